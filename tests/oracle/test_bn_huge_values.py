"""Batchnorm of huge finite FLOAT values on ONEDNN_ENGINE (its C rows: channels-first on
NCHW, channels-last on NHWC) and CPU_ENGINE, against a float64 NumPy reference computed
here from the formulas of docs/contract/semantics.md ("Batchnorm").

x = offset + scale * N(0, 1) with scale 1e19..1e37: every value is a finite float32, but
the squares of the deviations |x - mean| >= 1.8e19 are not (and at 5e37 + 1e37 the float32
sums of x are not either). The rows once summed them in float32 lanes, so the variance
came out +inf, inv_variance 0 and y == bias, silently. The float64 variance itself is
beyond FLT_MAX from scale ~2e19 on, while inv_variance (~1/scale) and y (~1) are ordinary
floats. Backward: with x ~ 1e20 and dy ~ 1e19, each g * (x - mean) ~ 1e39 is beyond
float32 while dscale = inv_variance * sum(g (x - mean)) ~ 1e19 is not.

Tolerances: the project's FLOAT ones (tests/oracle/_cases.py: bn_training 4e-3, bn_backward
2e-3, atol = rtol); inv_variance (~1e-20 here) is compared relatively (atol 0: an atol of
4e-3 would accept 0), as tests/oracle/test_edge_cases.py does for inv_variance.
"""
from __future__ import annotations

import numpy as np
import pytest

from ._cases import Harness, assert_close, tol
from ._cpu_engines import check_engine, require, run_named

ENGINES = ["ONEDNN_ENGINE", "CPU_ENGINE"]
FLT_MAX = float(np.finfo(np.float32).max)
DIMS = (4, 3, 8, 9)          # rows of 72 elements, 288 values a channel
EPS, MOMENTUM = 1e-5, 0.1
# name: (scale, offset) of x = offset + scale * N(0, 1)
HUGE = {"1e19": (1e19, 0.0), "1e20": (1e20, 0.0), "1e25": (1e25, 0.0), "1e30": (1e30, 0.0),
        "1e37": (1e37, 0.0), "5e37+1e37": (1e37, 5e37)}


def _f32(v):
    """float64 values as float32 holds them (+-inf beyond FLT_MAX), read back in float64."""
    with np.errstate(over="ignore"):
        return np.asarray(v, np.float64).astype(np.float32).astype(np.float64)


def _training(dev, engine, layout, case, running):
    """Build and run batchnorm training of the ``case`` x on ``engine``; returns (outputs,
    float64 reference, harness)."""
    sc, off = HUGE[case]
    rng = np.random.default_rng([19, len(case), len(layout), running])
    cs = (1, DIMS[1], 1, 1)
    h = Harness("float32", layout, name=f"bn_huge_{case}_{layout}")
    x = h.input("x", off + sc * rng.standard_normal(DIMS))
    assert np.isfinite(h.ref["x"]).all()
    scale = h.float_input("scale", rng.uniform(0.5, 2.0, cs))
    bias = h.float_input("bias", rng.uniform(-1, 1, cs))
    kw = {}
    if running:
        kw = dict(momentum=MOMENTUM,
                  prev_running_mean=h.float_input("prev_running_mean", rng.uniform(-1, 1, cs)),
                  prev_running_variance=h.float_input("prev_running_variance",
                                                      rng.uniform(0.5, 2, cs)))
    y, mean, inv, nrm, nrv = h.g.batchnorm(x, scale, bias, epsilon=EPS, **kw)
    h.output(y, "y")
    h.output(mean, "mean", dtype="float32")
    h.output(inv, "inv_variance", dtype="float32")
    if running:
        h.output(nrm, "next_running_mean", dtype="float32")
        h.output(nrv, "next_running_variance", dtype="float32")
    # float64 reference: mean, biased variance, inv_variance = 1/sqrt(var + eps), y; the
    # running variance from the unbiased one
    r = h.ref
    xr = r["x"]
    m = xr.size // xr.shape[1]
    mu = xr.mean(axis=(0, 2, 3), keepdims=True)
    var = ((xr - mu) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    want = {"mean": mu, "variance": var, "inv_variance": 1.0 / np.sqrt(var + EPS),
            "y": r["scale"] * (xr - mu) / np.sqrt(var + EPS) + r["bias"]}
    if running:
        want["next_running_mean"] = (1 - MOMENTUM) * r["prev_running_mean"] + MOMENTUM * mu
        want["next_running_variance"] = ((1 - MOMENTUM) * r["prev_running_variance"]
                                         + MOMENTUM * var * m / (m - 1))
    what = f"{engine} {layout} x ~ {case} running={running}"
    got = run_named(dev, engine, lambda: h.run(dev, engine=engine), what)
    check_engine(h, engine)
    return got, want, h


@pytest.mark.parametrize("running", [False, True], ids=["plain", "running_stats"])
@pytest.mark.parametrize("case", list(HUGE))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("engine", ENGINES)
def test_training_y_and_mean_of_huge_values(cpu_device, engine, layout, case, running):
    require(engine)
    got, want, _ = _training(cpu_device, engine, layout, case, running)
    what = f"{engine} {layout} x ~ {case} running={running}"
    t = tol("bn_training", "float32")
    assert np.isfinite(got["y"]).all(), what
    assert_close(got["y"], want["y"], *t, f"{what} y")
    assert_close(got["mean"], want["mean"], *t, f"{what} mean")
    if running:
        assert_close(got["next_running_mean"], want["next_running_mean"], *t,
                     f"{what} next_running_mean")


@pytest.mark.parametrize("running", [False, True], ids=["plain", "running_stats"])
@pytest.mark.parametrize("case", list(HUGE))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("engine", ENGINES)
def test_training_inv_variance_of_huge_values(cpu_device, engine, layout, case, running):
    """inv_variance (and the running variance, correctly rounded to float32: +inf beyond
    FLT_MAX) from the float64 variance."""
    require(engine)
    got, want, _ = _training(cpu_device, engine, layout, case, running)
    what = f"{engine} {layout} x ~ {case} running={running}"
    rtol = tol("bn_training", "float32")[1]
    assert_close(got["inv_variance"], want["inv_variance"], 0.0, rtol, f"{what} inv_variance")
    if running:
        assert_close(got["next_running_variance"], _f32(want["next_running_variance"]), 0.0,
                     rtol, f"{what} next_running_variance")


@pytest.mark.parametrize("case", list(HUGE))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_engines_agree_on_huge_values(cpu_device, layout, case):
    """ONEDNN_ENGINE's y and mean agree with CPU_ENGINE's (float64 inside)."""
    require("ONEDNN_ENGINE")
    a, _, _ = _training(cpu_device, "ONEDNN_ENGINE", layout, case, False)
    b, _, _ = _training(cpu_device, "CPU_ENGINE", layout, case, False)
    t = tol("bn_training", "float32")
    assert_close(a["y"], b["y"], *t, f"{layout} {case} y: ONEDNN_ENGINE against CPU_ENGINE")
    assert_close(a["mean"], b["mean"], *t, f"{layout} {case} mean")


@pytest.mark.parametrize("drelu", [False, True], ids=["BN_BACKWARD", "BN_INFERENCE_DRELU_BACKWARD"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("engine", ENGINES)
def test_backward_of_huge_products(cpu_device, engine, layout, drelu):
    """x ~ 1e20 N(0, 1) with its own float64 statistics (inv_variance ~ 1e-20), dy ~ 1e19:
    g * (x - mean) ~ 1e39 is beyond float32 element by element."""
    import hipdnn_async as hd
    require(engine)
    rng = np.random.default_rng([20, len(layout), drelu])
    cs = (1, DIMS[1], 1, 1)
    h = Harness("float32", layout, name=f"bn_huge_backward_{layout}")
    x = h.input("x", 1e20 * rng.standard_normal(DIMS))
    dy = h.input("dy", 1e19 * rng.uniform(-1, 1, DIMS))
    xr = h.ref["x"]
    mu = xr.mean(axis=(0, 2, 3), keepdims=True)
    mean = h.float_input("mean", mu)
    var = ((xr - mu) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    inv = h.float_input("inv_variance", 1.0 / np.sqrt(var))
    scale = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    r = h.ref
    g = r["dy"]
    if drelu:
        bias = h.float_input("bias", rng.uniform(-0.1, 0.1, cs))
        y_bn = h.g.batchnorm_inference(x, mean, inv, scale, bias)
        d = h.g.pointwise(y_bn, dy, mode=hd.PointwiseMode.RELU_BWD)
        ybn = r["scale"] * (xr - r["mean"]) * r["inv_variance"] + r["bias"]
        g = np.where(ybn > 0, g, 0.0)
    else:
        d = dy
    dx, dscale, dbias = h.g.batchnorm_backward(d, x, scale, mean=mean, inv_variance=inv)
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    m = xr.size // xr.shape[1]
    xhat = (xr - r["mean"]) * r["inv_variance"]
    assert np.abs(g * (xr - r["mean"])).max() > 3.5e38
    want_db = g.sum(axis=(0, 2, 3), keepdims=True)
    want_ds = (g * xhat).sum(axis=(0, 2, 3), keepdims=True)
    want_dx = r["scale"] * r["inv_variance"] / m * (m * g - want_db - xhat * want_ds)
    what = f"{engine} {layout} drelu={drelu}"
    got = run_named(cpu_device, engine, lambda: h.run(cpu_device, engine=engine), what)
    check_engine(h, engine)
    t = tol("bn_backward", "float32")
    assert_close(got["dx"], want_dx, *t, f"{what} dx")
    assert_close(got["dscale"], want_ds, *t, f"{what} dscale")
    assert_close(got["dbias"], want_db, *t, f"{what} dbias")
