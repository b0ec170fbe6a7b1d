"""The legacy cuDNN engine's batchnorm call forms and modes (issue 11), on the GPU against
the float64 reference:

- channels-last training and backward (alone or after BN inference + DReLU) run only
  cuDNN's Ex calls with SPATIAL_PERSISTENT (``plan.algorithm`` "SPATIAL_PERSISTENT Ex"):
  the plain calls are 20-60x slower there and must never run;
- NCHW training and backward run SPATIAL_PERSISTENT by default and SPATIAL with the knob
  ``cudnn_legacy.bn_persistent`` = 0, both within the batchnorm tolerances of float64 on
  shapes large enough for multi-block reductions, for centred data and for data whose
  mean dominates its spread (x = offset + U(-1, 1): the variance cancellation case, and
  where a scaled-integer reduction would lose bits).

Without a CUDA device every test skips with the reason (tests/gpu/conftest.py).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from gpu.conftest import cuda_spec
from gpu.test_patterns_gpu import run_gpu_case
from oracle import _reference as ref
from oracle._cases import Harness, assert_close, tol

import hipdnn_async as hd

pytestmark = pytest.mark.gpu

LEGACY = "CUDNN_LEGACY_ENGINE"
KNOB = "cudnn_legacy.bn_persistent"
BN_PATTERNS = ("BN_TRAINING", "BN_TRAINING_RELU", "BN_BACKWARD", "BN_INFERENCE_DRELU_BACKWARD")
# x offset per I/O dtype for the "offset" data: large against the spread of U(-1, 1), yet
# with several fractional bits left in the type (fp16/bf16 near 10: steps of 2^-7 / 2^-4)
OFFSET = {"float32": 100.0, "float16": 10.0, "bfloat16": 10.0}


@pytest.fixture(scope="module")
def cuda_device():
    with hd.Device(cuda_spec()) as dev:
        yield dev


# 2-D in every dtype, 5-D in fp16 (as tests/gpu/test_patterns_gpu.py)
CHANNELS_LAST = [("float32", "NHWC"), ("float16", "NHWC"), ("bfloat16", "NHWC"),
                 ("float16", "NDHWC")]


@pytest.mark.parametrize("dtype,layout", CHANNELS_LAST, ids=["-".join(c) for c in CHANNELS_LAST])
@pytest.mark.parametrize("pattern", BN_PATTERNS)
def test_channels_last_runs_only_the_ex_calls(cuda_device, monkeypatch, pattern, dtype, layout):
    h, checks, got = run_gpu_case(cuda_device, pattern, dtype, layout, monkeypatch,
                                  seed=11, engine=LEGACY)
    assert h.plan.engine.name == LEGACY
    assert str(h.plan.algorithm).startswith("SPATIAL_PERSISTENT Ex"), h.plan.algorithm
    assert "channels-last" in h.plan.algorithm.reason, h.plan.algorithm.reason
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol,
                     f"{pattern} {dtype} {layout} '{name}' ({h.plan.algorithm})")


def _training(dtype, data, dims, seed):
    rng = np.random.default_rng(seed)
    h = Harness(dtype, "NCHW", name=f"bn_mode_train_{dtype}_{data}")
    cs = (1, dims[1], 1, 1)
    base = OFFSET[dtype] if data == "offset" else 0.0
    x = h.input("x", base + rng.uniform(-1, 1, dims))
    scale = h.float_input("scale", rng.uniform(0.5, 2, cs))
    bias = h.float_input("bias", rng.uniform(-1, 1, cs))
    prm = h.float_input("prm", rng.uniform(-1, 1, cs))
    prv = h.float_input("prv", rng.uniform(0.5, 2, cs))
    y, mean, inv, nrm, nrv = h.g.batchnorm(x, scale, bias, epsilon=1e-5, momentum=0.1,
                                          prev_running_mean=prm, prev_running_variance=prv)
    h.output(y, "y")
    for t, name in ((mean, "mean"), (inv, "inv_variance"), (nrm, "next_running_mean"),
                    (nrv, "next_running_variance")):
        h.output(t, name, dtype="float32")
    r = h.ref
    want = ref.bn_training(r["x"], r["scale"], r["bias"], 1e-5, 0.1, r["prm"], r["prv"])
    tf = tol("bn_training", "float32")
    checks = [("y", want["y"], tol("bn_training", dtype))]
    checks += [(k, want[k], tf) for k in ("mean", "inv_variance", "next_running_mean",
                                          "next_running_variance")]
    return h, checks


def _backward(dtype, data, dims, seed):
    rng = np.random.default_rng(seed)
    h = Harness(dtype, "NCHW", name=f"bn_mode_bwd_{dtype}_{data}")
    cs = (1, dims[1], 1, 1)
    base = OFFSET[dtype] if data == "offset" else 0.0
    xv = base + rng.uniform(-1, 1, dims)
    x = h.input("x", xv)
    dy = h.input("dy", rng.uniform(-1, 1, dims))
    # the saved statistics of the rounded x, as a training pass would give them
    st = ref.bn_training(h.ref["x"], np.ones(dims[1]), np.zeros(dims[1]), 1e-5)
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
    return h, [("dx", want["dx"], tol("bn_backward", dtype)), ("dscale", want["dscale"], tf),
               ("dbias", want["dbias"], tf)]


@pytest.mark.parametrize("data", ["uniform", "offset"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("what", ["training", "backward"])
@pytest.mark.parametrize("persistent", [None, 1, 0], ids=["default", "knob1", "knob0"])
def test_nchw_modes_against_float64(cuda_device, what, dtype, data, persistent):
    """(16, 64, 28, 28): 12544 values per channel, reduced over many thread blocks."""
    dims = (16, 64, 28, 28)
    make = _training if what == "training" else _backward
    h, checks = make(dtype, data, dims, seed=zlib.crc32(f"{what} {dtype} {data}".encode()))
    knobs = {} if persistent is None else {KNOB: persistent}
    got = h.run(cuda_device, engine=LEGACY, knobs=knobs)
    want_mode = "SPATIAL" if persistent == 0 else "SPATIAL_PERSISTENT"
    assert h.plan.algorithm == want_mode, h.plan.algorithm
    for name, want, (atol, rtol) in checks:
        assert np.isfinite(got[name]).all(), f"{name}: non-finite values ({want_mode})"
        assert_close(got[name], want, atol, rtol,
                     f"NCHW {what} {dtype} {data} '{name}' ({want_mode})")


def test_the_knob_is_offered_only_where_it_chooses(cuda_device):
    """NCHW batchnorm offers cudnn_legacy.bn_persistent (default 1); channels-last, where
    only the Ex calls run, does not, and a build that names it there is refused."""
    def graph(layout):
        g = hd.Graph(io_data_type="float16", intermediate_data_type="float32",
                     compute_data_type="float32")
        x = g.tensor(dims=(2, 8, 4, 4), layout=layout, name="x")
        dy = g.tensor(dims=(2, 8, 4, 4), layout=layout, name="dy")
        c = [g.tensor(dims=(1, 8, 1, 1), layout=layout, name=n, data_type="float32")
             for n in ("scale", "mean", "inv_variance")]
        for t in g.batchnorm_backward(dy, x, c[0], mean=c[1], inv_variance=c[2]):
            t.set_output(True)
        return g

    def legacy_knobs(g):
        engine = next(e for e in hd.engines(g, cuda_device) if e.name == LEGACY)
        return {k.id: k for k in engine.knobs}

    nchw = legacy_knobs(graph("NCHW"))
    assert nchw[KNOB].default == 1 and (nchw[KNOB].min, nchw[KNOB].max) == (0, 1)
    assert KNOB not in legacy_knobs(graph("NHWC"))
    with pytest.raises(hd.KnobError, match=KNOB):
        cuda_device.build_sync(graph("NHWC"), engine=LEGACY, knobs={KNOB: 0})


@pytest.mark.parametrize("what", ["training", "backward"])
def test_nchw_benchmarking_keeps_the_faster_mode(cuda_device, what):
    """With global.benchmarking both modes are timed on the build stream and the kept one
    is not slower than the other beyond the timing margin; the result is still float64's.
    (32, 512, 28, 28) FLOAT backward is where SPATIAL_PERSISTENT measured 1.13x SPATIAL.)"""
    from hipdnn_async.providers._tuning import BENCH_MARGIN
    make = _training if what == "training" else _backward
    h, checks = make("float32", "uniform", (32, 512, 28, 28), seed=5)
    got = h.run(cuda_device, engine=LEGACY, knobs={"global.benchmarking": 1})
    trials = dict(h.plan.algorithm.trials)
    assert set(trials) == {"SPATIAL_PERSISTENT", "SPATIAL"} and h.plan.benchmarked, trials
    assert trials[str(h.plan.algorithm)] <= min(trials.values()) / (1 - BENCH_MARGIN)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"benchmarked {what} '{name}'")
