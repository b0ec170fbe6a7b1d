"""Every supported pattern x {FLOAT, HALF, BFLOAT16} x layouts (packed and non-packed),
through the public API, against the float64 references of ``_reference.py``.

Outputs are pre-filled with NaN, so an element the library does not write fails.
"""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import DTYPES, LAYOUTS, Harness, assert_close, chan_shape, device, rank_of, tol, wgrad_tol  # noqa: F401

CONV = {
    # asymmetric padding, stride and dilation on different dims, odd sizes
    4: dict(x=(2, 4, 7, 6), w=(5, 4, 3, 3), pre=(1, 0), post=(1, 1), stride=(2, 1), dilation=(1, 2)),
    5: dict(x=(1, 3, 5, 4, 5), w=(4, 3, 3, 2, 3), pre=(1, 0, 1), post=(1, 1, 1), stride=(1, 2, 1),
            dilation=(1, 1, 2)),
}
BN = {4: (2, 3, 5, 4), 5: (2, 3, 3, 4, 3)}
CLIPS = {"float32": (None, None), "float16": (None, 0.5), "bfloat16": (0.1, 0.5)}


def _conv_kw(c):
    return dict(pre_padding=c["pre"], post_padding=c["post"], stride=c["stride"], dilation=c["dilation"])


def _ref_conv_kw(c):
    return (c["pre"], c["post"], c["stride"], c["dilation"])


def _y_dims(c):
    return ref.conv_out_dims(c["x"], c["w"], *_ref_conv_kw(c))


# Each builder adds its graph to h and returns [(output name, reference, (atol, rtol))].
def build_bn_inference_variance(h, rank, rng):
    dims = BN[rank]
    cs = chan_shape(dims[1], rank)
    eps = 1e-5
    x = h.input("x", rng.uniform(-1, 1, dims))
    mean = h.float_input("mean", rng.uniform(-0.5, 0.5, cs))
    var = h.float_input("variance", rng.uniform(0.5, 2.0, cs))
    scale = h.float_input("scale", rng.uniform(-2, 2, cs))
    bias = h.float_input("bias", rng.uniform(-2, 2, cs))
    y = h.g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=eps)
    h.output(y, "y")
    r = h.ref
    want = ref.bn_inference_variance(r["x"], r["mean"], r["variance"], r["scale"], r["bias"], eps)
    return [("y", want, tol("bn_inference_variance", h.dtype))]


def build_bn_inference_drelu_backward(h, rank, rng):
    hd = h.hd
    dims = BN[rank]
    cs = chan_shape(dims[1], rank)
    lower, upper = CLIPS[h.dtype]
    # ranges of hipDNN's HD/samples/batchnorm/FusedBnInfDReluBnBwd.cpp (scale widened)
    x = h.input("x", rng.uniform(-1.8, 1.8, dims))
    dy = h.input("dy", rng.uniform(-1, 1, dims))
    mean = h.float_input("mean", rng.uniform(-0.1, 0.1, cs))
    inv = h.float_input("inv_variance", rng.uniform(0.1, 2.0, cs))
    scale = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    bias = h.float_input("bias", rng.uniform(-0.1, 0.1, cs))
    y_bn = h.g.batchnorm_inference(x, mean, inv, scale, bias)
    g = h.g.pointwise(y_bn, dy, mode=hd.PointwiseMode.RELU_BWD, relu_lower_clip=lower,
                      relu_upper_clip=upper)
    dx, dscale, dbias = h.g.batchnorm_backward(g, x, scale, mean=mean, inv_variance=inv)
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    r = h.ref
    ybn = ref.bn_inference(r["x"], r["mean"], r["inv_variance"], r["scale"], r["bias"])
    gm = ref.relu_bwd(ybn, r["dy"], lower, upper)
    want = ref.bn_backward(gm, r["x"], r["scale"], r["mean"], r["inv_variance"])
    tf = tol("bn_backward", "float32")   # dscale/dbias are FLOAT (hipDNN: getToleranceBackward<float>)
    return [("dx", want["dx"], tol("bn_backward", h.dtype)), ("dscale", want["dscale"], tf),
            ("dbias", want["dbias"], tf)]


# epsilon within hipDNN's U[1e-6, 1e-4], momentum in [0.05, 0.15]
BN_TRAIN_EPS, BN_TRAIN_MOMENTUM = 3e-5, 0.1


def _bn_training(h, rank, rng, relu, dims=None, offset=0.3):
    """Batchnorm training (+ ReLU) of x = ``offset`` + 2 U(-1, 1) of ``dims`` (default
    ``BN[rank]``), running statistics updated; its checks against float64."""
    hd = h.hd
    dims = BN[rank] if dims is None else dims
    cs = chan_shape(dims[1], rank)
    eps, momentum = BN_TRAIN_EPS, BN_TRAIN_MOMENTUM
    x = h.input("x", rng.uniform(-1, 1, dims) * 2 + offset)
    scale = h.float_input("scale", rng.uniform(-2, 2, cs))
    bias = h.float_input("bias", rng.uniform(-2, 2, cs))
    prm = h.float_input("prev_running_mean", rng.uniform(-1, 1, cs))
    prv = h.float_input("prev_running_variance", rng.uniform(0.5, 2, cs))
    y, mean, inv, nrm, nrv = h.g.batchnorm(x, scale, bias, epsilon=eps, momentum=momentum,
                                           prev_running_mean=prm, prev_running_variance=prv)
    if relu:
        y = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    h.output(y, "y")
    for t, name in ((mean, "mean"), (inv, "inv_variance"), (nrm, "next_running_mean"),
                    (nrv, "next_running_variance")):
        h.output(t, name, dtype="float32")
    r = h.ref
    want = ref.bn_training(r["x"], r["scale"], r["bias"], eps, momentum, r["prev_running_mean"],
                           r["prev_running_variance"])
    if relu:
        want["y"] = ref.relu(want["y"])
    tf = tol("bn_training", "float32")
    return [("y", want["y"], tol("bn_training", h.dtype))] + [
        (k, want[k], tf) for k in ("mean", "inv_variance", "next_running_mean", "next_running_variance")]


def build_bn_training(h, rank, rng):
    return _bn_training(h, rank, rng, relu=False)


def build_bn_training_relu(h, rank, rng):
    return _bn_training(h, rank, rng, relu=True)


def build_bn_backward(h, rank, rng, dims=None, offset=0.0):
    """Batchnorm backward of x = ``offset`` + U(-1, 1) of ``dims`` (default ``BN[rank]``)
    with its own saved statistics; its checks against float64."""
    dims = BN[rank] if dims is None else dims
    cs = chan_shape(dims[1], rank)
    xv = offset + rng.uniform(-1, 1, dims)
    st = ref.bn_training(xv, np.ones(dims[1]), np.zeros(dims[1]), 1e-5)   # saved batch stats
    x = h.input("x", xv)
    dy = h.input("dy", rng.uniform(-1, 1, dims))
    scale = h.float_input("scale", rng.uniform(-2, 2, cs))
    mean = h.float_input("mean", st["mean"])
    inv = h.float_input("inv_variance", st["inv_variance"])
    dx, dscale, dbias = h.g.batchnorm_backward(dy, x, scale, mean=mean, inv_variance=inv)
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    r = h.ref
    want = ref.bn_backward(r["dy"], r["x"], r["scale"], r["mean"], r["inv_variance"])
    tf = tol("bn_backward", "float32")
    return [("dx", want["dx"], tol("bn_backward", h.dtype)), ("dscale", want["dscale"], tf),
            ("dbias", want["dbias"], tf)]


def build_conv_dgrad(h, rank, rng):
    c = CONV[rank]
    dy = h.input("dy", rng.uniform(-1, 1, _y_dims(c)))
    w = h.input("w", rng.uniform(-1, 1, c["w"]))
    dx = h.g.conv_dgrad(dy, w, dx_dims=c["x"], **_conv_kw(c))
    h.output(dx, "dx")
    want = ref.conv_dgrad(h.ref["dy"], h.ref["w"], c["x"], *_ref_conv_kw(c))
    return [("dx", want, tol("conv_dgrad", h.dtype))]


def build_conv_fprop(h, rank, rng):
    c = CONV[rank]
    x = h.input("x", rng.uniform(-1, 1, c["x"]))
    w = h.input("w", rng.uniform(-1, 1, c["w"]))
    y = h.g.conv_fprop(x, w, **_conv_kw(c))
    h.output(y, "y")
    want = ref.conv_fprop(h.ref["x"], h.ref["w"], *_ref_conv_kw(c))
    return [("y", want, tol("conv_fprop", h.dtype))]


def _conv_fused(h, rank, rng, with_bias, clips):
    hd = h.hd
    c = CONV[rank]
    x = h.input("x", rng.uniform(-1, 1, c["x"]))
    w = h.input("w", rng.uniform(-1, 1, c["w"]))
    y = h.g.conv_fprop(x, w, **_conv_kw(c))
    want = ref.conv_fprop(h.ref["x"], h.ref["w"], *_ref_conv_kw(c))
    if with_bias:
        b = h.input("bias", rng.uniform(-1, 1, chan_shape(c["w"][0], rank)))
        y = h.g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
        want = want + h.ref["bias"]
    out = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=clips[0],
                        relu_upper_clip=clips[1])
    h.output(out, "y")
    return [("y", ref.relu(want, *clips), tol("conv_fprop", h.dtype))]


def build_conv_fprop_bias_relu(h, rank, rng):
    return _conv_fused(h, rank, rng, True, (None, None))


def build_conv_fprop_relu_clipped(h, rank, rng):
    # the 2-node form of pattern 8 (no bias), with the activation clips of the dtype
    return _conv_fused(h, rank, rng, False, CLIPS[h.dtype])


def build_conv_wgrad(h, rank, rng):
    c = CONV[rank]
    y_dims = _y_dims(c)
    dy = h.input("dy", rng.uniform(-1, 1, y_dims))
    x = h.input("x", rng.uniform(-1, 1, c["x"]))
    dw = h.g.conv_wgrad(dy, x, dw_dims=c["w"], **_conv_kw(c))
    h.output(dw, "dw")
    r = h.ref
    want = ref.conv_wgrad(r["dy"], r["x"], c["w"], *_ref_conv_kw(c))
    n = y_dims[0] * int(np.prod(y_dims[2:]))
    return [("dw", want, wgrad_tol(h.dtype, n, np.abs(r["dy"]).max(), np.abs(r["x"]).max()))]


PATTERNS = {
    "BN_INFERENCE_VARIANCE": build_bn_inference_variance,
    "BN_INFERENCE_DRELU_BACKWARD": build_bn_inference_drelu_backward,
    "BN_TRAINING": build_bn_training,
    "BN_TRAINING_RELU": build_bn_training_relu,
    "BN_BACKWARD": build_bn_backward,
    "CONV_DGRAD": build_conv_dgrad,
    "CONV_FPROP": build_conv_fprop,
    "CONV_FPROP_BIAS_RELU": build_conv_fprop_bias_relu,
    "CONV_FPROP_BIAS_RELU/no-bias": build_conv_fprop_relu_clipped,
    "CONV_WGRAD": build_conv_wgrad,
}


def bn_training_in_place(dev, dtype, layout, *, rounds=2, seed=0, bn_dims=None, **build_kw):
    """BN_TRAINING with next_running_mean / next_running_variance bound to the
    prev_running_* buffers themselves (updated in place, as PyTorch keeps running
    statistics), executed ``rounds`` times on the same x: round r's expected statistics
    start from round r-1's (float64, tests/oracle/_reference.bn_training).

    Returns
    -------
    (plan, checks): checks = [(label, got, want, (atol, rtol))] for y and both running
    statistics of every round.
    """
    global BN
    rng = np.random.default_rng([seed, 71, DTYPES.index(dtype), LAYOUTS.index(layout)])
    h = Harness(dtype, layout, name=f"bn_in_place_{dtype}_{layout}")
    saved = BN
    try:
        BN = bn_dims or BN
        checks = {name: (want, tol_) for name, want, tol_ in
                  build_bn_training(h, rank_of(layout), rng)}
    finally:
        BN = saved
    h._alloc_outputs()
    h.g.validate()
    plan = dev.build_sync(h.g, **build_kw)
    staged = dict(h.pack) if getattr(dev, "is_host", True) else h.stage(dev)
    for nxt, prev in (("next_running_mean", "prev_running_mean"),
                      ("next_running_variance", "prev_running_variance")):
        staged[nxt] = staged[prev]

    def read(name):
        buf = staged[name]
        return np.array(buf) if isinstance(buf, np.ndarray) else buf.to_numpy_sync()

    r = h.ref
    prm, prv = r["prev_running_mean"], r["prev_running_variance"]
    out = []
    for k in range(rounds):
        plan.execute_sync(staged)
        want = ref.bn_training(r["x"], r["scale"], r["bias"], BN_TRAIN_EPS, BN_TRAIN_MOMENTUM,
                               prm, prv)
        out.append((f"round {k} y", read("y"), want["y"], checks["y"][1]))
        for name in ("next_running_mean", "next_running_variance"):
            out.append((f"round {k} {name}", read(name), want[name], checks[name][1]))
        prm, prv = want["next_running_mean"], want["next_running_variance"]
    return plan, out


def run_case(dev, pattern, dtype, layout, seed=0, **build_kw):
    """Build and run one case on ``dev`` (``build_kw`` go to ``dev.build_sync``, e.g.
    ``engine=``); returns (harness, checks, outputs)."""
    rng = np.random.default_rng([seed, sorted(PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    h = Harness(dtype, layout, name=f"{pattern}_{dtype}_{layout}")
    checks = PATTERNS[pattern](h, rank_of(layout), rng)
    got = h.run(dev, **build_kw)
    return h, checks, got


STATISTICS = ("mean", "inv_variance", "next_running_mean", "next_running_variance", "dscale",
              "dbias")


def check_case(h, checks, got, what):
    """Every output of a case against its float64 reference, and the packed strides the
    contract (docs/contract/semantics.md) promises for outputs whose strides were not set
    (in the first data input's order)."""
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{what} output '{name}'")
    if not h.layout.endswith("nonpacked"):
        for name, t in h.outputs.items():
            if sum(d > 1 for d in t.dims) > 1 and name not in STATISTICS:
                assert tuple(t.strides) == h.expect_strides(name), (what, name, t.strides)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_pattern(device, pattern, dtype, layout):
    h, checks, got = run_case(device, pattern, dtype, layout)
    assert h.plan.pattern == pattern.split("/")[0]
    check_case(h, checks, got, f"{pattern} {dtype} {layout}")
