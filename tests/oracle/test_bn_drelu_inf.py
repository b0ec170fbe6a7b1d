"""RELU_BWD at a forward value of +inf, in the fused pattern BN_INFERENCE_DRELU_BACKWARD
(batchnorm inference -> RELU_BWD -> batchnorm backward), on ONEDNN_ENGINE (its C rows,
channels-first on NCHW and channels-last on NHWC) and CPU_ENGINE, FLOAT and BFLOAT16.

docs/contract/semantics.md ("Pointwise"): RELU_BWD passes dy where the forward input lies
strictly inside the active range. Without an upper clip that range is (lower, +inf]:
relu(+inf) = +inf with slope 1, so dy passes there (PyTorch's relu backward and cuDNN do
too); under an upper clip u, +inf is not below u and gives 0. A NaN forward value gives
NaN. The engines once tested ``y < upper`` with upper defaulting to +inf and dropped dy at
+inf. The float64 reference is computed here from those rules.

Per channel: 0 finite; 1 one x = +inf (its forward value +inf; dy there 0.75, so dbias
tells whether it passed: dscale is +inf where it passed, NaN = 0 * inf where it did not);
2 one x = NaN (every output of the channel NaN).
"""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import Harness, assert_close, tol
from ._cpu_engines import check_engine, require, run_named

DIMS = (2, 3, 4, 5)
INF_AT, NAN_AT = (0, 1, 1, 2), (1, 2, 3, 0)
# (lower, upper) clips of RELU_BWD: none; a lower clip only (still no upper clip: +inf
# passes); an upper clip of 6 (+inf dropped)
CLIPS = {"no_clip": (None, None), "lower_only": (0.1, None), "upper_6": (0.0, 6.0)}


def _want(r, lower, upper):
    """float64 dx, dscale, dbias of the pattern for the rounded inputs ``r`` (the
    reference's RELU_BWD follows the rules above), and the forward value y_bn."""
    with np.errstate(invalid="ignore", over="ignore"):
        ybn = ref.bn_inference(r["x"], r["mean"], r["inv_variance"], r["scale"], r["bias"])
        g = ref.relu_bwd(ybn, r["dy"], lower, upper)
        return ref.bn_backward(g, r["x"], r["scale"], r["mean"], r["inv_variance"]), ybn


def _case(dtype, layout, lower, upper):
    import hipdnn_async as hd
    rng = np.random.default_rng([7, len(dtype), len(layout)])
    cs = (1, DIMS[1], 1, 1)
    xv = rng.uniform(-1.8, 1.8, DIMS)
    xv[INF_AT], xv[NAN_AT] = np.inf, np.nan
    dyv = rng.uniform(-1, 1, DIMS)
    dyv[INF_AT] = 0.75
    mean_v, inv_v = rng.uniform(-0.1, 0.1, cs), rng.uniform(0.5, 2.0, cs)
    scale_v, bias_v = rng.uniform(0.5, 1.5, cs), rng.uniform(-0.1, 0.1, cs)
    # dy 0 where the forward value is within 1e-3 of a clip (float32 and float64 may take
    # different sides there; dy then does not matter)
    ybn = scale_v * (xv - mean_v) * inv_v + bias_v
    lo = 0.0 if lower is None else lower
    with np.errstate(invalid="ignore"):
        near = np.abs(ybn - lo) < 1e-3
        if upper is not None:
            near |= np.abs(ybn - upper) < 1e-3
    dyv[near] = 0.0
    h = Harness(dtype, layout, name=f"drelu_inf_{dtype}_{layout}")
    x = h.input("x", xv)
    dy = h.input("dy", dyv)
    mean, inv = h.float_input("mean", mean_v), h.float_input("inv_variance", inv_v)
    scale, bias = h.float_input("scale", scale_v), h.float_input("bias", bias_v)
    y_bn = h.g.batchnorm_inference(x, mean, inv, scale, bias)
    g = h.g.pointwise(y_bn, dy, mode=hd.PointwiseMode.RELU_BWD, relu_lower_clip=lower,
                      relu_upper_clip=upper)
    dx, dscale, dbias = h.g.batchnorm_backward(g, x, scale, mean=mean, inv_variance=inv)
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    return h


@pytest.mark.parametrize("clip", list(CLIPS))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("engine", ["ONEDNN_ENGINE", "CPU_ENGINE"])
def test_drelu_passes_dy_at_plus_inf_without_an_upper_clip(cpu_device, engine, dtype, layout,
                                                          clip):
    require(engine)
    lower, upper = CLIPS[clip]
    h = _case(dtype, layout, lower, upper)
    want, ybn = _want(h.ref, lower, upper)
    assert ybn[INF_AT] == np.inf and np.isnan(ybn[NAN_AT])
    what = f"{engine} {dtype} {layout} {clip}"
    got = run_named(cpu_device, engine, lambda: h.run(cpu_device, engine=engine), what)
    check_engine(h, engine)
    assert h.plan.pattern == "BN_INFERENCE_DRELU_BACKWARD"
    tf = tol("bn_backward", "float32")
    assert_close(got["dx"], want["dx"], *tol("bn_backward", dtype), f"{what} dx")
    assert_close(got["dscale"], want["dscale"], *tf, f"{what} dscale")
    assert_close(got["dbias"], want["dbias"], *tf, f"{what} dbias")
    dbias, dscale = got["dbias"].reshape(-1), got["dscale"].reshape(-1)
    dx = got["dx"].astype(np.float64)
    # channel 1: dy at +inf passed without an upper clip (dbias, checked above, counts its
    # 0.75, far outside the tolerance; dscale +inf), dropped under one (dscale 0 * inf =
    # NaN, and so every dx of the channel)
    if upper is None:
        assert dscale[1] == np.inf, what
    else:
        assert np.isnan(dscale[1]) and np.isnan(dx[:, 1]).all(), what
    # channel 2: a NaN forward value makes the channel's outputs NaN; channel 0 finite
    assert np.isnan(dbias[2]) and np.isnan(dscale[2]) and np.isnan(dx[:, 2]).all(), what
    assert np.isfinite(dx[:, 0]).all() and np.isfinite([dbias[0], dscale[0]]).all(), what


@pytest.mark.parametrize("clip", list(CLIPS))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NCHW_nonpacked", "NHWC_nonpacked"])
def test_every_onednn_candidate_follows_the_drelu_rules(cpu_device, layout, clip):
    """Every candidate ``global.benchmarking=1`` may keep: the rows alone, on dense copies
    of non-packed memory (oneDNN's composition once dropped dy at +inf under a lower-only
    clip and gave 0 for a NaN forward value, as its fuse_norm_relu did)."""
    from .test_onednn_bn_variants import candidate_outputs
    require("ONEDNN_ENGINE")
    lower, upper = CLIPS[clip]
    h = _case("float32", layout, lower, upper)
    want, _ = _want(h.ref, lower, upper)
    h.run(cpu_device, engine="ONEDNN_ENGINE")
    runs = candidate_outputs(h)
    assert [n.endswith("+dense") for n, _ in runs] == [layout.endswith("nonpacked")], runs
    tf = tol("bn_backward", "float32")
    for name, got in runs:
        what = f"{layout} {clip} candidate {name}"
        for k in ("dx", "dscale", "dbias"):
            assert_close(got[k], want[k], *tf, f"{what} {k}")
