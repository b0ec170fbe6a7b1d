"""Hypothesis properties of the public API that need no reference value of their own.

- layout invariance: NCHW, NHWC and non-packed strides give the same values;
- fused == unfused: conv+bias+relu vs conv then bias+relu; bn training+relu vs bn training
  then relu (rocm-libraries #6979, MIOpen #1028: fused once gave different values);
- batch-size independence of per-sample outputs for conv fprop and bn inference;
- the adjoint identity <conv(x,w), dy> == <x, dgrad(dy,w)> == <w, wgrad(dy,x)> in float32.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

try:
    from tests.oracle import _reference as ref
    from tests.oracle._cases import Harness, assert_close, chan_shape, device, tol  # noqa: F401
except ImportError:   # run from a checkout where tests/ is not importable as a package
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
    from oracle import _reference as ref
    from oracle._cases import Harness, assert_close, chan_shape, device, tol  # noqa: F401

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def conv_problems(draw, max_hw=7):
    g = draw(st.sampled_from([1, 1, 2]))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    hw = [draw(st.integers(1, max_hw)) for _ in range(2)]
    k = [draw(st.integers(1, 3)) for _ in range(2)]
    stride = [draw(st.integers(1, 2)) for _ in range(2)]
    dil = [draw(st.integers(1, 2)) for _ in range(2)]
    pre = [draw(st.integers(0, 2)) for _ in range(2)]
    post = [draw(st.integers(0, 2)) for _ in range(2)]
    for i in range(2):
        assume(hw[i] + pre[i] + post[i] >= dil[i] * (k[i] - 1) + 1)
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(x=(n, g * cg, *hw), w=(g * kg, cg, *k), pre=tuple(pre), post=tuple(post),
                stride=tuple(stride), dilation=tuple(dil), seed=seed)


def _kw(p):
    return dict(pre_padding=p["pre"], post_padding=p["post"], stride=p["stride"], dilation=p["dilation"])


def _fprop(dev, p, layout, x, w, dtype="float32"):
    h = Harness(dtype, layout)
    xt, wt = h.input("x", x), h.input("w", w)
    h.output(h.g.conv_fprop(xt, wt, **_kw(p)), "y")
    return h.run(dev)["y"].astype(np.float64)


def _dgrad(dev, p, layout, dy, w):
    h = Harness("float32", layout)
    dyt, wt = h.input("dy", dy), h.input("w", w)
    h.output(h.g.conv_dgrad(dyt, wt, dx_dims=p["x"], **_kw(p)), "dx")
    return h.run(dev)["dx"].astype(np.float64)


def _wgrad(dev, p, layout, dy, x):
    h = Harness("float32", layout)
    dyt, xt = h.input("dy", dy), h.input("x", x)
    h.output(h.g.conv_wgrad(dyt, xt, dw_dims=p["w"], **_kw(p)), "dw")
    return h.run(dev)["dw"].astype(np.float64)


def _f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


@SETTINGS
@given(p=conv_problems(), dtype=st.sampled_from(["float32", "float16"]))
def test_conv_layout_invariance(device, p, dtype):
    rng = np.random.default_rng(p["seed"])
    x, w = rng.uniform(-1, 1, p["x"]), rng.uniform(-1, 1, p["w"])
    outs = {lay: _fprop(device, p, lay, x, w, dtype) for lay in ("NCHW", "NHWC", "NHWC_nonpacked")}
    atol, rtol = tol("conv_fprop", dtype)
    for lay in ("NHWC", "NHWC_nonpacked"):
        assert_close(outs[lay], outs["NCHW"], atol, rtol, f"fprop {lay} vs NCHW {dtype} {p}")


@SETTINGS
@given(p=conv_problems())
def test_conv_grad_layout_invariance(device, p):
    rng = np.random.default_rng(p["seed"])
    yd = ref.conv_out_dims(p["x"], p["w"], p["pre"], p["post"], p["stride"], p["dilation"])
    x, w, dy = rng.uniform(-1, 1, p["x"]), rng.uniform(-1, 1, p["w"]), rng.uniform(-1, 1, yd)
    dx = {lay: _dgrad(device, p, lay, dy, w) for lay in ("NCHW", "NHWC", "NCHW_nonpacked")}
    dw = {lay: _wgrad(device, p, lay, dy, x) for lay in ("NCHW", "NHWC", "NCHW_nonpacked")}
    for lay in ("NHWC", "NCHW_nonpacked"):
        assert_close(dx[lay], dx["NCHW"], *tol("conv_dgrad", "float32"), f"dgrad {lay} {p}")
        assert_close(dw[lay], dw["NCHW"], 1e-5, 1e-5, f"wgrad {lay} {p}")


@SETTINGS
@given(p=conv_problems(max_hw=6))
def test_adjoint_identity(device, p):
    """<conv(x,w), dy> == <x, dgrad(dy,w)> == <w, wgrad(dy,x)>: float32, tolerance relative
    to the norms (each inner product's error <= ||err|| * ||other|| with float32 outputs)."""
    rng = np.random.default_rng(p["seed"])
    yd = ref.conv_out_dims(p["x"], p["w"], p["pre"], p["post"], p["stride"], p["dilation"])
    x, w, dy = (_f32(rng.uniform(-1, 1, d)) for d in (p["x"], p["w"], yd))
    y = _fprop(device, p, "NHWC", x, w)
    dx = _dgrad(device, p, "NHWC", dy, w)
    dw = _wgrad(device, p, "NHWC", dy, x)
    a, b, c = np.vdot(y, dy), np.vdot(x, dx), np.vdot(w, dw)
    scale = (np.linalg.norm(y) * np.linalg.norm(dy) + np.linalg.norm(x) * np.linalg.norm(dx)
             + np.linalg.norm(w) * np.linalg.norm(dw))
    bound = 1e-5 * scale + 1e-9   # ~100 float32 roundoffs of the norms
    assert abs(a - b) <= bound, (a, b, bound, p)
    assert abs(a - c) <= bound, (a, c, bound, p)


@SETTINGS
@given(p=conv_problems(), with_bias=st.booleans(),
       clips=st.sampled_from([(None, None), (None, 0.5), (-0.25, 0.5)]))
def test_fused_conv_bias_relu_equals_unfused(device, p, with_bias, clips):
    import hipdnn_async as hd
    rng = np.random.default_rng(p["seed"])
    k = p["w"][0]
    h = Harness("float32", "NHWC")
    x, w = h.input("x", rng.uniform(-1, 1, p["x"])), h.input("w", rng.uniform(-1, 1, p["w"]))
    y = h.g.conv_fprop(x, w, **_kw(p))
    if with_bias:
        b = h.input("bias", rng.uniform(-1, 1, (1, k, 1, 1)))
        y = h.g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    h.output(h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=clips[0],
                           relu_upper_clip=clips[1]), "y")
    fused = h.run(device)["y"]
    unfused = _fprop(device, p, "NHWC", h.ref["x"], h.ref["w"])
    if with_bias:
        unfused = unfused + h.ref["bias"]
    assert_close(fused, ref.relu(unfused, *clips), *tol("conv_fprop", "float32"), f"fused vs unfused {p}")


@st.composite
def bn_problems(draw):
    n = draw(st.integers(1, 3))
    c = draw(st.integers(1, 5))
    hw = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    assume(n * hw[0] * hw[1] > 1)
    return (n, c, *hw), draw(st.integers(0, 2**32 - 1))


def _bn_train(dev, dims, seed, layout, relu, dtype="float32"):
    import hipdnn_async as hd
    rng = np.random.default_rng(seed)
    cs = chan_shape(dims[1], 4)
    h = Harness(dtype, layout)
    x = h.input("x", rng.normal(0.3, 1.5, dims))
    s, b = h.float_input("scale", rng.uniform(-2, 2, cs)), h.float_input("bias", rng.uniform(-1, 1, cs))
    y, mean, inv, _, _ = h.g.batchnorm(x, s, b, epsilon=1e-5)
    if relu:
        y = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    h.output(y, "y")
    h.output(mean, "mean", dtype="float32")
    h.output(inv, "inv_variance", dtype="float32")
    return {k: v.astype(np.float64) for k, v in h.run(dev).items()}


@SETTINGS
@given(prob=bn_problems(), dtype=st.sampled_from(["float32", "float16", "bfloat16"]))
def test_bn_training_layout_invariance_and_fused_relu(device, prob, dtype):
    dims, seed = prob
    t = tol("bn_training", dtype)
    base = _bn_train(device, dims, seed, "NCHW", False, dtype)
    for lay in ("NHWC", "NHWC_nonpacked"):
        other = _bn_train(device, dims, seed, lay, False, dtype)
        for k in base:
            assert_close(other[k], base[k], *t, f"bn training {k} {lay} vs NCHW {dims}")
    fused = _bn_train(device, dims, seed, "NHWC", True, dtype)
    assert_close(fused["y"], ref.relu(base["y"]), *t, f"bn training+relu vs relu(bn) {dims}")


@SETTINGS
@given(p=conv_problems(), layout=st.sampled_from(["NCHW", "NHWC"]))
def test_conv_batch_size_independence(device, p, layout):
    rng = np.random.default_rng(p["seed"])
    n = 3
    xd = (n, *p["x"][1:])
    q = dict(p, x=xd)
    x, w = _f32(rng.uniform(-1, 1, xd)), _f32(rng.uniform(-1, 1, p["w"]))
    full = _fprop(device, q, layout, x, w)
    for i in range(n):
        one = _fprop(device, dict(p, x=(1, *xd[1:])), layout, x[i:i + 1], w)
        assert_close(one, full[i:i + 1], *tol("conv_fprop", "float32"), f"sample {i} of {n} {p}")


@SETTINGS
@given(prob=bn_problems(), layout=st.sampled_from(["NCHW", "NHWC"]))
def test_bn_inference_batch_size_independence(device, prob, layout):
    dims, seed = prob
    rng = np.random.default_rng(seed)
    cs = chan_shape(dims[1], 4)
    xv = _f32(rng.uniform(-1, 1, dims))
    stats = [_f32(rng.uniform(lo, hi, cs)) for lo, hi in ((-0.5, 0.5), (0.5, 2), (-2, 2), (-1, 1))]

    def run(xpart):
        h = Harness("float32", layout)
        x = h.input("x", xpart)
        args = [h.float_input(nm, v) for nm, v in zip(("mean", "variance", "scale", "bias"), stats)]
        h.output(h.g.batchnorm_inference_variance_ext(x, *args, epsilon=1e-5), "y")
        return h.run(device)["y"].astype(np.float64)

    full = run(xv)
    for i in range(dims[0]):
        assert_close(run(xv[i:i + 1]), full[i:i + 1], *tol("bn_inference_variance", "float32"),
                     f"bn inference sample {i} {dims}")
