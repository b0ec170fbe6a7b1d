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
from oracle import test_patterns as tp
from oracle._cases import Harness, assert_close

import hipdnn_async as hd

pytestmark = pytest.mark.gpu

LEGACY = "CUDNN_LEGACY_ENGINE"
KNOB = "cudnn_legacy.bn_persistent"
BN_PATTERNS = ("BN_TRAINING", "BN_TRAINING_RELU", "BN_BACKWARD", "BN_INFERENCE_DRELU_BACKWARD")
# x offset per I/O dtype for the "offset" data: large against the spread of x, yet
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


def _case(what, dtype, data, dims, seed):
    """An NCHW training or backward case of the oracle suite's builders
    (tests/oracle/test_patterns.py) on ``dims``, x offset by OFFSET for "offset" data."""
    h = Harness(dtype, "NCHW", name=f"bn_mode_{what}_{dtype}_{data}")
    offset = OFFSET[dtype] if data == "offset" else 0.0
    rng = np.random.default_rng(seed)
    if what == "training":
        return h, tp._bn_training(h, 4, rng, relu=False, dims=dims, offset=offset)
    return h, tp.build_bn_backward(h, 4, rng, dims=dims, offset=offset)


@pytest.mark.parametrize("data", ["uniform", "offset"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("what", ["training", "backward"])
@pytest.mark.parametrize("persistent", [None, 1, 0], ids=["default", "knob1", "knob0"])
def test_nchw_modes_against_float64(cuda_device, what, dtype, data, persistent):
    """(16, 64, 28, 28): 12544 values per channel, reduced over many thread blocks."""
    h, checks = _case(what, dtype, data, (16, 64, 28, 28),
                      seed=zlib.crc32(f"{what} {dtype} {data}".encode()))
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
    h, checks = _case(what, "float32", "uniform", (32, 512, 28, 28), seed=5)
    got = h.run(cuda_device, engine=LEGACY, knobs={"global.benchmarking": 1})
    trials = dict(h.plan.algorithm.trials)
    assert set(trials) == {"SPATIAL_PERSISTENT", "SPATIAL"} and h.plan.benchmarked, trials
    assert trials[str(h.plan.algorithm)] <= min(trials.values()) / (1 - BENCH_MARGIN)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"benchmarked {what} '{name}'")
