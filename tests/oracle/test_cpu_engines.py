"""The oracle suite on every CPU engine, each named with ``dev.build(..., engine=...)``.

``ONEDNN_ENGINE`` (oneDNN's primitives) and ``CPU_ENGINE`` (NumPy/Cython, the reference
and fallback) run every pattern x {FLOAT, HALF, BFLOAT16} x {NCHW, NHWC, NCDHW, NDHWC and
non-packed strides}, the convolution shapes that broke libraries (groups, depthwise,
dilation, asymmetric padding, 2-D and 3-D), random convolution problems (hypothesis),
batchnorm with running statistics updated in place and with virtual saved statistics,
and inv_variance values far from 1 (oneDNN takes variance: the conversion is checked),
all against the float64 references of ``_reference.py`` with the tolerances of
``_cases.py``. An engine not offered here skips with its reason (``_cpu_engines``).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gpu._bn_cases import bn_training_case, drelu_boundary_case

from . import _reference as ref
from . import test_patterns as tp
from ._cases import (DTYPES, LAYOUTS, Harness, alloc, assert_close, chan_shape, np_dtype,
                     reduction_tol, tol, wgrad_tol)
from ._conv_shapes import ASYMMETRIC, CONV_SHAPES, conv_shape_case
from ._cpu_engines import ONEDNN, cpu_engine, probe_graph, require  # noqa: F401
from ._cpu_engines import check_engine, run_named


# ---------------------------------------------------------------------------------------
# every pattern x dtype x layout

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", list(tp.PATTERNS))
def test_pattern_on_engine(cpu_engine, pattern, dtype, layout):
    dev, engine = cpu_engine
    what = f"{engine} {pattern} {dtype} {layout}"
    h, checks, got = run_named(dev, engine, lambda: tp.run_case(dev, pattern, dtype, layout,
                                                           engine=engine), what)
    check_engine(h, engine)
    assert h.plan.pattern == pattern.split("/")[0]
    tp.check_case(h, checks, got, f"{what} (algorithm {h.plan.algorithm})")


def test_onednn_engine_is_offered_first_and_built_by_default():
    """Where oneDNN loads, ``hd.engines`` lists ``ONEDNN_ENGINE`` first and a build that
    names no engine takes it; ``CPU_ENGINE`` stays offered as the fallback."""
    import hipdnn_async as hd
    require(ONEDNN)
    g = probe_graph()
    names = [e.name for e in hd.engines(g, "cpu")]
    assert names[0] == ONEDNN and "CPU_ENGINE" in names, names
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        assert plan.engine.name == ONEDNN
        assert str(getattr(plan.algorithm, "name", plan.algorithm) or ""), plan   # oneDNN's impl


# ---------------------------------------------------------------------------------------
# convolution shapes: groups, depthwise, dilation, asymmetric padding, 3-D

SHAPES = {**CONV_SHAPES, **{f"asym_{k}": v for k, v in ASYMMETRIC.items()}}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_conv_shape_on_engine(cpu_engine, shape, direction, dtype, layout):
    dev, engine = cpu_engine
    what = f"{engine} {shape} {direction} {dtype} {layout}"
    h, got, want, limits = run_named(dev, engine, lambda: conv_shape_case(
        dev, SHAPES[shape], shape, direction, dtype, layout, engine=engine), what)
    check_engine(h, engine)
    assert_close(got, want, *limits, f"{what} (algorithm {h.plan.algorithm})")


@st.composite
def conv_problems(draw):
    """A small 2-D or 3-D convolution: groups, stride, dilation, asymmetric padding."""
    nsp = draw(st.sampled_from([2, 2, 3]))
    g = draw(st.sampled_from([1, 1, 2, 3]))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    sizes = [draw(st.integers(1, 7 if nsp == 2 else 4)) for _ in range(nsp)]
    k = [draw(st.integers(1, 3)) for _ in range(nsp)]
    stride = [draw(st.integers(1, 2)) for _ in range(nsp)]
    dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    pre = [draw(st.integers(0, 2)) for _ in range(nsp)]
    post = [draw(st.integers(0, 2)) for _ in range(nsp)]
    for i in range(nsp):
        assume(sizes[i] + pre[i] + post[i] >= dil[i] * (k[i] - 1) + 1)
    layouts = (("NCHW", "NHWC", "NHWC_nonpacked") if nsp == 2
               else ("NCDHW", "NDHWC", "NCDHW_nonpacked"))
    return dict(x=(n, g * cg, *sizes), w=(g * kg, cg, *k), pre=tuple(pre), post=tuple(post),
                stride=tuple(stride), dilation=tuple(dil),
                layout=draw(st.sampled_from(layouts)), dtype=draw(st.sampled_from(DTYPES)),
                direction=draw(st.sampled_from(["fprop", "dgrad", "wgrad"])),
                seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(p=conv_problems())
def test_random_convolutions_on_engine(cpu_engine, p):
    """Random small problems, degenerate ones included (1x1 images whose outputs come
    from padding alone, kernels as large as the padded input). An engine may decline
    those it has no fast kernel for (the issue's decline rule: the next engine builds
    them); the device's own choice must then compute them correctly."""
    import hipdnn_async as hd
    dev, engine = cpu_engine
    case = (p["x"], p["w"], p["pre"], p["post"], p["stride"], p["dilation"])
    what = f"{engine} {p}"
    try:
        h, got, want, limits = _random_case(dev, engine, p, case)
        check_engine(h, engine)
    except hd.NotSupportedError as exc:
        event(f"{engine} declined: {str(exc)[:60]}")
        h, got, want, limits = _random_case(dev, None, p, case)
        assert h.plan.engine.name != engine, h.plan
        what += f" (declined by {engine}: {exc}; built by {h.plan.engine.name})"
    assert_close(got, want, *limits, f"{what} (algorithm {h.plan.algorithm})")


def _random_case(dev, engine, p, case):
    xd, wd, pre, post, stride, dil = case
    yd = ref.conv_out_dims(xd, wd, pre, post, stride, dil)
    kw = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
    rng = np.random.default_rng(p["seed"])
    h = Harness(p["dtype"], p["layout"], name="random_conv")
    if p["direction"] == "fprop":
        a, b = h.input("x", rng.uniform(-1, 1, xd)), h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_fprop(a, b, **kw), "out")
        want = ref.conv_fprop(h.ref["x"], h.ref["w"], pre, post, stride, dil)
        limits = reduction_tol("conv_fprop", p["dtype"], wd[1] * int(np.prod(wd[2:])))
    elif p["direction"] == "dgrad":
        a, b = h.input("dy", rng.uniform(-1, 1, yd)), h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_dgrad(a, b, dx_dims=xd, **kw), "out")
        want = ref.conv_dgrad(h.ref["dy"], h.ref["w"], xd, pre, post, stride, dil)
        limits = reduction_tol("conv_dgrad", p["dtype"], wd[0] * int(np.prod(wd[2:])))
    else:
        a, b = h.input("dy", rng.uniform(-1, 1, yd)), h.input("x", rng.uniform(-1, 1, xd))
        h.output(h.g.conv_wgrad(a, b, dw_dims=wd, **kw), "out")
        want = ref.conv_wgrad(h.ref["dy"], h.ref["x"], wd, pre, post, stride, dil)
        limits = wgrad_tol(p["dtype"], yd[0] * int(np.prod(yd[2:])), 1.0, 1.0)
    return h, h.run(dev, engine=engine)["out"], want, limits


# ---------------------------------------------------------------------------------------
# batchnorm: running statistics, virtual statistics, inv_variance <-> variance

@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NCDHW", "NDHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_running_statistics_in_place_on_engine(cpu_engine, dtype, layout):
    """Three rounds of BN training with next_running_* bound to the prev_running_*
    buffers: each round starts from the previous round's statistics."""
    dev, engine = cpu_engine
    plan, checks = run_named(dev, engine, lambda: tp.bn_training_in_place(
        dev, dtype, layout, rounds=3, engine=engine), f"{engine} in-place BN {dtype} {layout}")
    assert plan.engine.name == engine
    for label, got, want, (atol, rtol) in checks:
        assert_close(got, want, atol, rtol, f"{engine} {dtype} {layout} {label}")


VIRTUAL = [(), ("mean", "inv_variance"), ("mean",), ("inv_variance",)]


@pytest.mark.parametrize("running", [True, False], ids=["running", "no-running"])
@pytest.mark.parametrize("virtual", VIRTUAL, ids=lambda v: "+".join(v) or "none")
@pytest.mark.parametrize("relu", [False, True], ids=["bn", "bn_relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bn_training_virtual_statistics_on_engine(cpu_engine, dtype, layout, relu, virtual,
                                                  running):
    """Batchnorm training (+ ReLU) whose saved mean / inv_variance stay virtual (the
    engine computes them as scratch), with and without running statistics."""
    dev, engine = cpu_engine
    h, checks = bn_training_case(dtype, layout, relu=relu, virtual=virtual, running=running)
    what = f"{engine} BN training relu={relu} virtual={virtual} running={running} {dtype} {layout}"
    got = run_named(dev, engine, lambda: h.run(dev, engine=engine), what)
    check_engine(h, engine)
    assert h.plan.pattern == ("BN_TRAINING_RELU" if relu else "BN_TRAINING")
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{what} output '{name}'")


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_drelu_keeps_float_intermediates_on_engine(cpu_engine, layout):
    """BN inference -> DReLU -> BN backward in bf16 with many z just below the clip: z
    must stay FLOAT (tests/gpu/_bn_cases.drelu_boundary_case discriminates)."""
    dev, engine = cpu_engine
    h, checks, _ = drelu_boundary_case("bfloat16", layout)
    got = run_named(dev, engine, lambda: h.run(dev, engine=engine), f"{engine} drelu {layout}")
    check_engine(h, engine)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{engine} {layout} {name}")


# inv_variance = 1/sqrt(var + eps) over a wide range: from var = 1e4 down to var + eps =
# 1e-6 (below a typical epsilon: a conversion var = 1/inv^2 - eps that clamps a negative
# variance to 0, or loses it to cancellation, is wrong there).
INV_VARIANCES = np.array([1e-2, 0.3, 1.0, 3.0, 30.0, 316.0, 1000.0])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NDHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", ["BN_BACKWARD", "BN_INFERENCE_DRELU_BACKWARD"])
def test_inv_variance_range_on_engine(cpu_engine, pattern, dtype, layout):
    """Graphs carry inv_variance, oneDNN takes variance: the values over 5 decades, each
    channel one of them, against float64 (the x spread per channel is ~1/inv_variance, so
    normalised values stay O(1)); inv_variance = 1000 is var + eps = 1e-6."""
    dev, engine = cpu_engine
    rank = 5 if "D" in layout else 4
    c = len(INV_VARIANCES)
    dims = (2, c, 3, 4) if rank == 4 else (2, c, 2, 3, 2)
    cs = chan_shape(c, rank)
    rng = np.random.default_rng([7, DTYPES.index(dtype), rank])
    inv_v = INV_VARIANCES.reshape(cs)
    mean_v = rng.uniform(-0.5, 0.5, cs)
    h = Harness(dtype, layout, name=f"inv_variance_{pattern}")
    x = h.input("x", mean_v + rng.uniform(-1.5, 1.5, dims) / inv_v)
    mean = h.float_input("mean", mean_v)
    inv = h.float_input("inv_variance", inv_v)
    scale = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    r = h.ref
    tf = tol("bn_backward", "float32")
    if pattern == "BN_BACKWARD":
        dy = h.input("dy", rng.uniform(-1, 1, dims))
        dx, dscale, dbias = h.g.batchnorm_backward(dy, x, scale, mean=mean, inv_variance=inv)
        want = ref.bn_backward(r["dy"], r["x"], r["scale"], r["mean"], r["inv_variance"])
    elif pattern == "BN_INFERENCE_DRELU_BACKWARD":
        import hipdnn_async as hd
        bias = h.float_input("bias", rng.uniform(-0.1, 0.1, cs))
        dy = h.input("dy", rng.uniform(-1, 1, dims))
        z = h.g.batchnorm_inference(x, mean, inv, scale, bias)
        gz = h.g.pointwise(z, dy, mode=hd.PointwiseMode.RELU_BWD)
        dx, dscale, dbias = h.g.batchnorm_backward(gz, x, scale, mean=mean, inv_variance=inv)
        zr = ref.bn_inference(r["x"], r["mean"], r["inv_variance"], r["scale"], r["bias"])
        want = ref.bn_backward(ref.relu_bwd(zr, r["dy"]), r["x"], r["scale"], r["mean"],
                               r["inv_variance"])
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    checks = [("dx", want["dx"], tol("bn_backward", dtype)), ("dscale", want["dscale"], tf),
              ("dbias", want["dbias"], tf)]
    what = f"{engine} {pattern} {dtype} {layout} inv_variance {INV_VARIANCES.tolist()}"
    got = run_named(dev, engine, lambda: h.run(dev, engine=engine), what)
    check_engine(h, engine)
    for name, want_v, (atol, rtol) in checks:
        assert_close(got[name], want_v, atol, rtol, f"{what} output '{name}'")


@pytest.mark.parametrize("dtype", DTYPES)
def test_bn_training_constant_channel_on_engine(cpu_engine, dtype):
    """A channel of one constant value: variance 0, inv_variance = 1/sqrt(eps) (316 at
    eps 1e-5) and y = bias there, no NaN (the variance -> inv_variance direction)."""
    dev, engine = cpu_engine
    rng = np.random.default_rng(11)
    dims, eps = (2, 3, 4, 5), 1e-5
    xv = rng.uniform(-1, 1, dims)
    xv[:, 1] = 0.75
    h = Harness(dtype, "NHWC", name="bn_constant_channel")
    cs = chan_shape(3, 4)
    x = h.input("x", xv)
    scale = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    bias = h.float_input("bias", rng.uniform(-1, 1, cs))
    y, mean, inv, _, _ = h.g.batchnorm(x, scale, bias, epsilon=eps)
    h.output(y, "y")
    h.output(mean, "mean", dtype="float32")
    h.output(inv, "inv_variance", dtype="float32")
    got = run_named(dev, engine, lambda: h.run(dev, engine=engine), f"{engine} constant channel")
    want = ref.bn_training(h.ref["x"], h.ref["scale"], h.ref["bias"], eps)
    tf = tol("bn_training", "float32")
    assert_close(got["y"], want["y"], *tol("bn_training", dtype), f"{engine} {dtype} y")
    assert_close(got["mean"], want["mean"], *tf, f"{engine} {dtype} mean")
    assert_close(got["inv_variance"], want["inv_variance"], *tf, f"{engine} {dtype} inv_variance")


# ---------------------------------------------------------------------------------------
# a non-packed strided case beyond the uniform gaps of LAYOUTS: a channel slice of a
# larger NHWC buffer (the view a user gets from x[:, :, :, :C] of a channels-last array)

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", ["CONV_FPROP", "CONV_DGRAD", "CONV_WGRAD", "BN_TRAINING",
                                     "BN_BACKWARD"])
def test_channel_slice_strides_on_engine(cpu_engine, pattern, dtype):
    dev, engine = cpu_engine
    h, checks, got = run_named(dev, engine, lambda: _channel_slice_case(dev, engine, pattern,
                                                                         dtype),
                          f"{engine} {pattern} {dtype} channel slice")
    check_engine(h, engine)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{engine} {pattern} {dtype} slice '{name}'")


class _SliceHarness(Harness):
    """Inputs and outputs with dims N, C, H, W stored as the first C channels of an NHWC
    buffer of 2C + 3 channels (strides (H*W*Cb, 1, W*Cb, Cb))."""

    def input(self, name, values, *, dtype=None, layout=None):
        values = np.asarray(values, np.float64)
        if layout is not None or dtype == "float32" or values.ndim != 4 or values.shape[2] == 1:
            return super().input(name, values, dtype=dtype, layout=layout)
        strides = self._strides(values.shape)
        t = self.g.tensor(dims=values.shape, strides=strides, name=name)
        t.set_data_type(dtype or self.dtype)
        buf = alloc(values.shape, strides, np_dtype(dtype or self.dtype))
        buf[...] = values.astype(np_dtype(dtype or self.dtype))
        self.pack[name], self.layouts[name] = buf, "NHWC"
        self.ref[name] = buf.astype(np.float64)
        return t

    def output(self, t, name, *, dtype=None, explicit_strides=None):
        t = super().output(t, name, dtype=dtype)
        if dtype != "float32":
            t.set_strides(self._strides(t.dims))
        return t

    @staticmethod
    def _strides(dims):
        n, c, hh, ww = dims
        cb = 2 * c + 3
        return (hh * ww * cb, 1, ww * cb, cb)


def _channel_slice_case(dev, engine, pattern, dtype):
    h = _SliceHarness(dtype, "NHWC", name=f"slice_{pattern}")
    rng = np.random.default_rng([5, DTYPES.index(dtype)])
    if pattern.startswith("CONV"):
        saved = tp.CONV
        tp.CONV = {4: dict(x=(2, 5, 6, 7), w=(6, 5, 3, 2), pre=(1, 0), post=(0, 1),
                           stride=(1, 2), dilation=(2, 1))}
        try:
            checks = tp.PATTERNS[pattern](h, 4, rng)
        finally:
            tp.CONV = saved
    else:
        checks = tp.PATTERNS[pattern](h, 4, rng)
    return h, checks, h.run(dev, engine=engine)


@pytest.mark.parametrize("ci,system,machine,fails", [
    ("true", "linux", "x86_64", True),        # CI installs oneDNN there: absent is a failure
    ("", "linux", "x86_64", False),           # a developer's machine without the wheel: skip
    ("true", "linux", "aarch64", False),      # no wheel for the platform: skip
    ("true", "darwin", "x86_64", False),
])
def test_an_absent_onednn_engine_fails_only_where_ci_installs_it(monkeypatch, ci, system,
                                                                  machine, fails):
    import platform
    import sys

    from . import _cpu_engines
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(sys, "platform", system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setitem(_cpu_engines._ABSENCE, ONEDNN, "NotSupportedError: libdnnl.so.3 not found")
    outcome = pytest.fail.Exception if fails else pytest.skip.Exception
    with pytest.raises(outcome, match="libdnnl.so.3 not found"):
        require(ONEDNN)
