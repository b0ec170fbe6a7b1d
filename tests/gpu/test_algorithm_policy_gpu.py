"""The algorithm policy on the GPU (issue 11 item 4; bench_gpu's 10.3x fp32 wgrad and
37.9x benchmark cases of the 64f5d8e run):

- FLOAT convolutions on the legacy cuDNN engine may take cuDNN's non-deterministic
  ALGO_0 / ALGO_3 (FLOAT atomics) by default and stay within the float64 oracle's
  tolerance; with ``cudnn_legacy.deterministic = 1`` (or ``Device(deterministic=True)``)
  they take only deterministic algorithms, and repeated runs are bitwise equal.
- ``global.benchmarking = 1`` never keeps something slower than the heuristic's choice:
  the benchmarked plan's median device time is within 10 % of the heuristic plan's.
- FLOAT fprop / dgrad may run cuDNN's FFT by default on both engines (bench/diag_fft.py:
  within our bound on the H200) and stay within the float64 oracle's reduction bound;
  with ``<engine>.allow_fft = 0`` no FFT algorithm runs, also within the bound.
- FLOAT weight gradients too (bench/diag_wgrad_fft.py: FFT at most 0.05 of our wgrad
  bound on the H200), on the legacy engine (the graph engine declines FLOAT wgrad): at
  ResNet-50's res3 3x3 shape at batch 32, where the H200's heuristic took FFT, the
  default plan, its benchmark (which times FFT) and ``cudnn_legacy.allow_fft = 0`` (no
  FFT) stay within the float64 oracle's wgrad bound (``gpu_wgrad_tol``).
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import Harness, assert_close, gpu_wgrad_tol, reduction_tol

import hipdnn_async as hd

from .test_knobs_gpu import conv_case

pytestmark = pytest.mark.gpu

DET = "cudnn_legacy.deterministic"


def _legacy_knob_or_skip(dev, h):
    """The legacy cuDNN engine for ``h``; skips only on a device that is not a cuDNN one
    (MIOpen: no cuDNN engine at all); on cuDNN a missing engine or knob is a failure."""
    engines = {e.name: e for e in hd.engines(h.g, dev)}
    if not any(name.startswith("CUDNN") for name in engines):
        pytest.skip(f"{dev.spec}: not a cuDNN device (engines {sorted(engines)})")
    legacy = engines.get("CUDNN_LEGACY_ENGINE")
    assert legacy is not None, f"{dev.spec}: no CUDNN_LEGACY_ENGINE for this case: {sorted(engines)}"
    assert DET in [k.id for k in legacy.knobs], [k.id for k in legacy.knobs]
    return legacy


@pytest.mark.parametrize("direction", ["dgrad", "wgrad"])
def test_float_legacy_convolutions_default_and_deterministic(gpu_module_device, direction):
    dev = gpu_module_device
    h, want, limits = conv_case(direction, "float32", "NCHW", seed=11)
    legacy = _legacy_knob_or_skip(dev, h)
    got = h.run(dev, engine=legacy)["out"]
    assert h.plan.knobs[DET] == 0
    assert_close(got, want(), *limits, f"{direction} default ({h.plan.algorithm}: "
                 f"{h.plan.algorithm.reason})")
    runs = [h.run(dev, engine=legacy, knobs={DET: 1})["out"] for _ in range(3)]
    assert "not deterministic" not in h.plan.algorithm.reason, h.plan.algorithm.reason
    assert_close(runs[0], want(), *limits, f"{direction} deterministic ({h.plan.algorithm})")
    assert all(np.array_equal(runs[0], r) for r in runs[1:]), h.plan.algorithm
    with hd.Device(dev.spec, deterministic=True) as ddev:
        h2, _, _ = conv_case(direction, "float32", "NCHW", seed=11)
        h2.run(ddev, engine="CUDNN_LEGACY_ENGINE")
        assert h2.plan.knobs[DET] == 1


def _device_ms(dev, plan, pack, reps=30, rounds=5):
    """Median wall ms per execution of `reps` back-to-back submissions (the kernels below
    take far longer than a submission, so this is the device's time)."""
    for _ in range(3):
        plan.execute_sync(pack)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        handles = [plan.submit(pack) for _ in range(reps)]
        for hd_ in handles:
            hd_.result()
        out.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(out)


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC")])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_benchmarking_never_keeps_a_slower_plan(gpu_module_device, direction, dtype, layout,
                                               tmp_path):
    """ResNet-50 res2 1x1 256>64 at batch 16 (0.05-2 ms kernels): the benchmarked plan is
    at most 10 % (plus 5 us) slower than the heuristic plan, measured here (a fresh perf
    db: the benchmark really runs)."""
    with hd.Device(gpu_module_device.spec, perfdb=str(tmp_path / "perfdb.sqlite3")) as dev:
        _check_benchmark(dev, direction, dtype, layout)


def _check_benchmark(dev, direction, dtype, layout):
    rng = np.random.default_rng(3)
    x_dims, w_dims = (16, 256, 56, 56), (64, 256, 1, 1)
    y_dims = (16, 64, 56, 56)
    g = hd.Graph(name=f"bench_policy_{direction}", io_data_type=dtype,
                 compute_data_type=hd.DataType.FLOAT, intermediate_data_type=hd.DataType.FLOAT)
    if direction == "fprop":
        a, b = g.tensor(dims=x_dims, layout=layout, name="a"), g.tensor(dims=w_dims, layout=layout, name="b")
        out = g.conv_fprop(a, b)
    elif direction == "dgrad":
        a, b = g.tensor(dims=y_dims, layout=layout, name="a"), g.tensor(dims=w_dims, layout=layout, name="b")
        out = g.conv_dgrad(a, b, dx_dims=x_dims)
    else:
        a, b = g.tensor(dims=y_dims, layout=layout, name="a"), g.tensor(dims=x_dims, layout=layout, name="b")
        out = g.conv_wgrad(a, b, dw_dims=w_dims)
    out.set_output(True).set_name("out")
    pack = {}
    for t in (a, b):
        arr = dev.empty(t.dims, dtype, strides=t.strides)
        arr.copy_from(rng.uniform(-1, 1, t.dims).astype(dtype))
        pack[t.name] = arr
    pack["out"] = dev.empty(out.dims, dtype, strides=out.strides)
    heur = dev.build_sync(g)
    tuned = dev.build_sync(g, knobs={"global.benchmarking": 1})
    assert tuned.engine.name == heur.engine.name and tuned.benchmarked, tuned
    t_heur, t_tuned = _device_ms(dev, heur, pack), _device_ms(dev, tuned, pack)
    assert t_tuned <= 1.10 * t_heur + 0.005, (
        f"benchmarked {tuned.algorithm} {t_tuned:.4f} ms ({tuned.algorithm.reason}) vs "
        f"heuristic {heur.algorithm} {t_heur:.4f} ms")


FFT_KNOB = {"CUDNN_GRAPH_ENGINE": "cudnn_graph.allow_fft",
            "CUDNN_LEGACY_ENGINE": "cudnn_legacy.allow_fft"}
# ResNet-50 res3 3x3 (128 channels, 28x28), where bench/diag_fft.py saw cuDNN's FFT
# configs chosen at batch 32; batch 4 keeps the float64 reference quick
RES3_X, RES3_W, RES3_PAD = (4, 128, 28, 28), (128, 128, 3, 3), (1, 1)


def _res3_case(direction):
    rng = np.random.default_rng([5, ("fprop", "dgrad", "wgrad").index(direction)])
    h = Harness("float32", "NCHW", name=f"fft_policy_{direction}")
    if direction == "fprop":
        x, w = h.input("x", rng.uniform(-1, 1, RES3_X)), h.input("w", rng.uniform(-1, 1, RES3_W))
        h.output(h.g.conv_fprop(x, w, padding=RES3_PAD), "out")
        return h, lambda: ref.conv_fprop(h.ref["x"], h.ref["w"], RES3_PAD, RES3_PAD)
    if direction == "dgrad":
        dy, w = h.input("dy", rng.uniform(-1, 1, RES3_X)), h.input("w", rng.uniform(-1, 1, RES3_W))
        h.output(h.g.conv_dgrad(dy, w, dx_dims=RES3_X, padding=RES3_PAD), "out")
        return h, lambda: ref.conv_dgrad(h.ref["dy"], h.ref["w"], RES3_X, RES3_PAD, RES3_PAD)
    dy, x = h.input("dy", rng.uniform(-1, 1, RES3_X)), h.input("x", rng.uniform(-1, 1, RES3_X))
    h.output(h.g.conv_wgrad(dy, x, dw_dims=RES3_W, padding=RES3_PAD), "out")
    return h, None


def _cudnn_engines_or_skip(dev, h):
    engines = {e.name: e for e in hd.engines(h.g, dev)}
    if not any(name.startswith("CUDNN") for name in engines):
        pytest.skip(f"{dev.spec}: not a cuDNN device (engines {sorted(engines)})")
    return engines


@pytest.mark.parametrize("engine", sorted(FFT_KNOB))
@pytest.mark.parametrize("direction", ["fprop", "dgrad"])
def test_float_fft_by_default_and_direct_summation_with_allow_fft_0(
        gpu_module_device, tmp_path, direction, engine):
    h, want = _res3_case(direction)
    engines = _cudnn_engines_or_skip(gpu_module_device, h)
    assert engine in engines, f"{engine} is not offered for FLOAT {direction}: {sorted(engines)}"
    knob = engines[engine].knob(FFT_KNOB[engine])
    assert (knob.default, knob.min, knob.max) == (1, 0, 1), knob
    n = RES3_W[1 if direction == "fprop" else 0] * RES3_W[2] * RES3_W[3]
    atol, rtol = reduction_tol(f"conv_{direction}", "float32", n)
    expected = want()
    # a fresh perf db: both plans are chosen here (a restored plan's reason names no notes)
    with hd.Device(gpu_module_device.spec, perfdb=str(tmp_path / "perfdb.sqlite3")) as dev:
        got = h.run(dev, engine=engine)["out"]
        plan = h.plan
        assert plan.knobs[FFT_KNOB[engine]] == 1 and not plan.perfdb_hit
        assert_close(got, expected, atol, rtol, f"{engine} {direction} default "
                     f"({plan.algorithm}: {plan.algorithm.reason})")
        got = h.run(dev, engine=engine, knobs={FFT_KNOB[engine]: 0})["out"]
        direct = h.plan
        assert direct.knobs[FFT_KNOB[engine]] == 0 and not direct.perfdb_hit
        assert "FFT" not in str(direct.algorithm) and "FFT" not in direct.algorithm.reason, (
            direct.algorithm, direct.algorithm.reason)
        assert_close(got, expected, atol, rtol, f"{engine} {direction} allow_fft=0 "
                     f"({direct.algorithm}: {direct.algorithm.reason})")


# bench/diag_wgrad_fft.py's res3 3x3 at its batch: there the H200's heuristic took FFT
# (0.161 ms against ALGO_0's 0.357); the float64 reference takes a few seconds on the host
WGRAD_X = (32,) + RES3_X[1:]
LEGACY = "CUDNN_LEGACY_ENGINE"


def _wgrad_case():
    rng = np.random.default_rng([5, 2, 32])
    h = Harness("float32", "NCHW", name="fft_policy_wgrad")
    dy, x = h.input("dy", rng.uniform(-1, 1, WGRAD_X)), h.input("x", rng.uniform(-1, 1, WGRAD_X))
    h.output(h.g.conv_wgrad(dy, x, dw_dims=RES3_W, padding=RES3_PAD), "out")
    n = WGRAD_X[0] * WGRAD_X[2] * WGRAD_X[3]          # N * P * Q terms per dw element
    return (h, lambda: ref.conv_wgrad(h.ref["dy"], h.ref["x"], RES3_W, RES3_PAD, RES3_PAD),
            gpu_wgrad_tol("float32", n, 1.0, 1.0))


def _trial_names(plan):
    return [name for name, _ms in plan.algorithm.trials]


def test_float_wgrad_fft_by_default_and_direct_summation_with_allow_fft_0(
        gpu_module_device, tmp_path):
    h, want, (atol, rtol) = _wgrad_case()
    engines = _cudnn_engines_or_skip(gpu_module_device, h)
    assert next(iter(engines)) == LEGACY, f"FLOAT wgrad ranks the legacy engine first: {engines}"
    knob_id = FFT_KNOB[LEGACY]
    knob = engines[LEGACY].knob(knob_id)
    assert (knob.default, knob.min, knob.max) == (1, 0, 1), knob
    expected = want()
    # a fresh perf db: every plan is chosen here (a restored plan's reason names no notes)
    with hd.Device(gpu_module_device.spec, perfdb=str(tmp_path / "perfdb.sqlite3")) as dev:
        got = h.run(dev)["out"]                       # what a user gets: no engine, no knobs
        plan = h.plan
        what = f"FLOAT NCHW res3 3x3 wgrad default ({plan.algorithm}: {plan.algorithm.reason})"
        assert plan.engine.name == LEGACY and plan.knobs[knob_id] == 1, what
        assert not plan.perfdb_hit, what
        # the algorithms the policy accepted, in cuDNN's order: FFT among them
        assert "FFT" in _trial_names(plan), f"{what}: trials {plan.algorithm.trials}"
        assert_close(got, expected, atol, rtol, what)
        # benchmarked: cuDNN's Find times FFT beside the direct algorithms (cuDNN lists
        # FFT for a stride-1 2-D weight gradient; the H200 listed it here)
        got = h.run(dev, knobs={"global.benchmarking": 1})["out"]
        tuned = h.plan
        names = _trial_names(tuned)
        assert tuned.benchmarked and not tuned.perfdb_hit, tuned
        assert "FFT" in names, f"the benchmark timed no FFT: {names}"
        assert_close(got, expected, atol, rtol, f"wgrad default benchmarked ({tuned.algorithm}, "
                     f"trials {tuned.algorithm.trials})")
        for bench in (0, 1):
            got = h.run(dev, engine=LEGACY, knobs={knob_id: 0, "global.benchmarking": bench})["out"]
            direct = h.plan
            what = (f"wgrad allow_fft=0 benchmarking={bench} ({direct.algorithm}: "
                    f"{direct.algorithm.reason}, trials {direct.algorithm.trials})")
            assert direct.knobs[knob_id] == 0 and not direct.perfdb_hit, what
            assert "FFT" not in str(direct.algorithm) and "FFT" not in direct.algorithm.reason, what
            assert not any(n.startswith("FFT") for n in _trial_names(direct)), what
            assert_close(got, expected, atol, rtol, what)
