"""bench/bench_gpu.py's report (issue 11, "How it is checked"): the reason class of every
case above 1.0x PyTorch's time, the candidates line, the verdict table and its counts,
and the median of timing windows. The timings themselves need the H200 (bench_gpu runs
there); what is tested here is the arithmetic and the classification on given figures."""
from __future__ import annotations

import math
import os
import re
import sys

import pytest
from _peers import peer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import bench_gpu as bg  # noqa: E402

from hipdnn_async.providers._tuning import Algorithm  # noqa: E402

G, L = "CUDNN_GRAPH_ENGINE", "CUDNN_LEGACY_ENGINE"


@pytest.mark.parametrize("ratio,gpu,engine,layout,best,want", [
    (0.9, 2.0, G, "NHWC", None, None),              # at or below 1.0x: no reason
    (1.0, 2.0, G, "NHWC", None, None),
    (2.4, 1.0, G, "NHWC", None, bg.HOST),           # kernel as fast as torch's: the submit
    (2.4, 1.04, L, "NCHW", None, bg.HOST),
    (1.03, 1.00, G, "NCHW", None, bg.TIE),          # equal kernels, wall within 5 %
    (1.05, 1.05, L, "NCHW", None, bg.TIE),
    (1.06, 1.00, G, "NHWC", None, bg.HOST),         # just past the slack: the submit shows
    (10.3, 10.0, L, "NCHW", None, bg.LEGACY),       # fp32 wgrad ALGO_1
    (3.0, 3.0, L, "NHWC", None, bg.LAYOUT),
    (13.7, 13.7, G, "NCHW", 1.0, bg.ALGO),          # heuristic eng2, benchmark finds eng25
    (1.8, 1.8, G, "NCHW", 1.7, bg.NOCFG),
    (1.8, None, G, "NCHW", None, "unknown (no device time)"),
])
def test_reason_classes(ratio, gpu, engine, layout, best, want):
    assert bg.reason(ratio, gpu, engine, layout, best) == want


def test_trials_text_lists_names_and_medians():
    a = Algorithm("eng25", "fastest", [("eng2", 3.912), ("eng25", 0.2861), ("eng74", None)])
    assert bg.trials_text(a) == "eng2 3.912, eng25 0.286, eng74"
    assert bg.trials_text("ALGO_1") == "-"
    assert bg.trials_text(Algorithm("x", "", [("a", 1.0)] * 20), limit=2) == "a 1.000, a 1.000"


def test_timed_count_counts_measured_trials_only():
    a = Algorithm("eng0 k31=6", "fastest", [("eng0 k31=6", 0.012), ("eng3", None),
                                             ("eng7", 0.020)])
    assert bg.timed_count(a) == 2
    assert bg.timed_count(Algorithm("eng0", "heuristic", [("eng0", None)])) == 0
    assert bg.timed_count("None") == 0 and bg.timed_count(None) == 0


def test_median_ignores_unusable_values():
    assert bg.median([3.0, 1.0, 2.0]) == 2.0
    assert bg.median([1.0, None, float("nan"), 3.0]) == 2.0
    assert math.isnan(bg.median([None]))


def test_verdict_lists_every_case_above_1_with_its_reason(capsys):
    conv = [("conv_wgrad float32 NCHW res2 1x1 256>64", 10.3, 10.1, bg.LEGACY, "legacy ALGO_1",
             10.2),
            ("conv_fprop float16 NHWC res2 3x3", 2.0, 0.98, bg.HOST, "graph eng62", 2.1)]
    bn = [("batchnorm float16 NHWC 32x512x28x28 train", 2.0, 1.0, bg.HOST, "graph eng9", None)]
    detail = [("conv_wgrad float32 NCHW res2 1x1 256>64", "ALGO_1, ALGO_0", "ALGO_1 3.6, ALGO_0 0.3",
               "cuDNN _v7 heuristics, rank 1", {"mode A, 32B": "eng25 eng2 eng9!tf32"})]
    doc = {"results": {"conv": {"above_1": conv, "above_1_detail": detail},
                       "batchnorm": {"above_1": bn}}}
    bg.print_verdict(doc)
    text = capsys.readouterr().out
    assert "cases above 1.0x PyTorch (3;" in text
    for name, *_ in conv + bn:
        assert name in text
    assert "by reason: engine (legacy) 1, host-bound 2" in text
    assert "bench:     ALGO_1 3.6, ALGO_0 0.3" in text
    assert "mode A, 32B: eng25 eng2 eng9!tf32" in text
    assert doc["verdict"]["by_reason"] == {bg.LEGACY: 1, bg.HOST: 2}


def test_quick_mode_covers_the_slow_layers_and_all_directions():
    args = bg.parse_args(["--quick"])
    assert args.directions == ("fprop", "dgrad", "wgrad")
    names = {n for n, *_ in bg.RESNET50_CONVS}
    assert set(bg.QUICK_CONVS) <= names and "res3 down 1x1/2" in bg.QUICK_CONVS


# ---------------------------------------------------------------------------------------
# batchnorm section: backward rows, the copy-bandwidth anchor, the numerical check

def _bn_rec(dtype, layout, dims, *, x_bytes, copy_gpu_ms, figures, engines, bench=None):
    """A record as bench_batchnorm leaves it, from given timings (ms); `bench`: what ->
    (ours_<what>_bench_ms, ours_<what>_bench_gpu_ms, configs timed) of the benchmarked
    plan, every figure timed with CUDA events."""
    rec = {"dims": dims, "dtype": dtype, "layout": layout, "x_bytes": x_bytes,
           "copy_gpu_ms": copy_gpu_ms, "copy_gbps": bg.bn_gbps(2, x_bytes, copy_gpu_ms),
           "timing": "cuda_events", "backward_timing": "cuda_events"}
    rec.update(figures)
    for what, engine in engines.items():
        rec[f"{what}_engine"], rec[f"{what}_algorithm"] = engine, "eng0"
        bg._bn_ratios(rec, what)
    for what, (ms, gpu_ms, timed) in (bench or {}).items():
        rec[f"ours_{what}_bench_ms"], rec[f"ours_{what}_bench_gpu_ms"] = ms, gpu_ms
        rec[f"{what}_bench_engine"], rec[f"{what}_bench_algorithm"] = G, "eng0 k31=4"
        rec[f"{what}_bench_timed"], rec[f"{what}_bench_timing"] = timed, "cuda_events"
        rec[f"{what}_bench_trials"] = ", ".join([f"eng0 k31={i} {ms:.3f}" for i in range(timed)])
        bg._bn_bench_ratios(rec, what)
    bg.bn_bandwidth(rec)
    return rec


def test_bn_bandwidth_is_passes_over_device_time_against_the_copy():
    nbytes = 32 * 256 * 56 * 56 * 2                          # fp16 x of 32x256x56x56
    rec = _bn_rec("float16", "NHWC", (32, 256, 56, 56), x_bytes=nbytes, copy_gpu_ms=0.030,
                  figures={"ours_train_gpu_ms": 0.050, "torch_train_gpu_ms": 0.060,
                           "ours_backward_gpu_ms": 0.110, "torch_backward_gpu_ms": None},
                  engines={}, bench={"train": (0.07, 0.040, 3)})
    assert rec["copy_gbps"] == pytest.approx(2 * nbytes / 30e-6 / 1e9)
    assert rec["train_gbps"] == pytest.approx(3 * nbytes / 50e-6 / 1e9)
    assert rec["backward_bytes"] == 5 * nbytes and rec["train_bytes"] == 3 * nbytes
    # % of copy = (passes |x| / t) / (2 |x| / t_copy) = 100 passes t_copy / (2 t)
    assert rec["train_pct_of_copy"] == pytest.approx(100 * 3 * 0.030 / (2 * 0.050))
    assert rec["torch_train_pct_of_copy"] == pytest.approx(100 * 3 * 0.030 / (2 * 0.060))
    assert rec["backward_pct_of_copy"] == pytest.approx(100 * 5 * 0.030 / (2 * 0.110))
    assert rec["torch_backward_gbps"] is None and rec["torch_backward_pct_of_copy"] is None
    # the benchmarked plan's figures by the same passes over its own device time
    assert rec["train_bench_gbps"] == pytest.approx(3 * nbytes / 40e-6 / 1e9)
    assert rec["train_bench_pct_of_copy"] == pytest.approx(100 * 3 * 0.030 / (2 * 0.040))
    assert rec["backward_bench_gbps"] is None and rec["backward_bench_pct_of_copy"] is None


def _cells(line):
    """The cells of one printed table row (bg.table pads cells with >= 2 spaces)."""
    return re.split(r"\s{2,}", line.strip())


def test_bn_report_has_backward_rows_geomeans_copy_verdict_and_above_cases(capsys):
    nb16, nb32 = 32 * 1024 * 14 * 14 * 2, 32 * 1024 * 14 * 14 * 4
    nb16b = 32 * 512 * 28 * 28 * 2
    nhwc = _bn_rec("float16", "NHWC", (32, 1024, 14, 14), x_bytes=nb16, copy_gpu_ms=0.010,
                   figures={"ours_train_ms": 0.040, "torch_train_ms": 0.030,
                            "ours_train_gpu_ms": 0.020, "torch_train_gpu_ms": 0.020,
                            "ours_infer_ms": 0.02, "torch_infer_ms": 0.02,
                            "ours_infer_gpu_ms": 0.01, "torch_infer_gpu_ms": 0.01,
                            "ours_backward_ms": 0.050, "torch_backward_ms": 0.100,
                            "ours_backward_gpu_ms": 0.040, "torch_backward_gpu_ms": 0.080,
                            "ours_backward_err_over_tol": 0.25,
                            "torch_backward_err_over_tol": float("inf"),
                            "backward_bench_err_over_tol": 0.3,
                            "torch_backward_call": "aten.cudnn_batch_norm_backward"},
                   engines={"train": G, "infer": L, "backward": G},
                   bench={"train": (0.030, 0.016, 1), "backward": (0.045, 0.035, 2)})
    # a second channels-last shape: its heuristic plans are the better ones, its
    # benchmarked training the worst of all (the two minima fall on different shapes)
    nhwc2 = _bn_rec("float16", "NHWC", (32, 512, 28, 28), x_bytes=nb16b, copy_gpu_ms=0.020,
                    figures={"ours_train_ms": 0.040, "torch_train_ms": 0.050,
                             "ours_train_gpu_ms": 0.036, "torch_train_gpu_ms": 0.040,
                             "ours_backward_ms": 0.055, "torch_backward_ms": 0.060,
                             "ours_backward_gpu_ms": 0.050, "torch_backward_gpu_ms": 0.055},
                    engines={"train": G, "backward": G},
                    bench={"train": (0.040, 0.045, 1), "backward": (0.060, 0.050, 1)})
    nchw = _bn_rec("float32", "NCHW", (32, 1024, 14, 14), x_bytes=nb32, copy_gpu_ms=0.020,
                   figures={"ours_backward_ms": 0.120, "torch_backward_ms": 0.060,
                            "ours_backward_gpu_ms": 0.110, "torch_backward_gpu_ms": 0.055,
                            "torch_backward_call": "aten.cudnn_batch_norm_backward"},
                   engines={"backward": L})
    failed = {"dims": (32, 2048, 7, 7), "dtype": "float16", "layout": "NHWC",
              "backward_error": "GraphError: no engine",
              "train_bench_error": "NotSupportedError: no config"}
    res = bg.bn_report([nhwc, nhwc2, nchw, failed])
    text = capsys.readouterr().out
    assert "== batchnorm backward" in text and "5|x| / device time" in text
    assert "3|x| / device time" in text
    line = next(l for l in text.splitlines() if l.startswith("float16 NHWC  32x1024x14x14")
                and "cudnn_batch_norm_backward" in l)
    assert " 0.50 " in line and " 0.25 " in line and " inf " in line   # ratio, err/tol
    assert "GraphError: no engine" in text
    # geomean per (config, pass), backward included
    assert res["geomean_ratio"]["float16 NHWC backward"] == pytest.approx(
        math.sqrt(0.050 / 0.100 * 0.055 / 0.060))
    assert res["geomean_ratio"]["float32 NCHW backward"] == pytest.approx(2.0)
    assert "float32 NCHW backward 2.00" in text
    # NHWC bandwidth verdict, % of copy = 100 passes t_copy / (2 t): heuristic train
    # 1024: 100*3*0.010/(2*0.020) = 75 (at target), 512: 100*3*0.020/(2*0.036) = 83;
    # backward 1024: 100*5*0.010/(2*0.040) = 62.5 (below), 512: 100*5*0.020/(2*0.050) = 100.
    # Benchmarked train 1024: 100*3*0.010/(2*0.016), 512: 100*3*0.020/(2*0.045) (below);
    # backward 1024: 100*5*0.010/(2*0.035) (below), 512: 100*5*0.020/(2*0.050).
    # The failed row has no figure: not a case.
    d1, d2 = "32x1024x14x14", "32x512x28x28"
    heur = {"train": {d1: 100 * 3 * 0.010 / (2 * 0.020), d2: 100 * 3 * 0.020 / (2 * 0.036)},
            "backward": {d1: 100 * 5 * 0.010 / (2 * 0.040), d2: 100 * 5 * 0.020 / (2 * 0.050)}}
    bench = {"train": {d1: 100 * 3 * 0.010 / (2 * 0.016), d2: 100 * 3 * 0.020 / (2 * 0.045)},
             "backward": {d1: 100 * 5 * 0.010 / (2 * 0.035),
                          d2: 100 * 5 * 0.020 / (2 * 0.050)}}
    pct = res["nhwc_pct_of_copy"]

    def expect(vals):
        dims = min(vals, key=vals.get)
        return {"min": pytest.approx(vals[dims]), "min_dims": dims, "cases": len(vals),
                "below": sum(v < 75.0 for v in vals.values())}

    for what in ("train", "backward"):
        want_h, want_b = expect(heur[what]), expect(bench[what])
        assert pct[what] == {**want_h, "benchmarked": want_b}
        assert (f"NHWC {what} % of copy bandwidth (issue 11: >= 75%): heuristic min "
                f"{want_h['min'].expected:.0f} ({want_h['min_dims']}), {want_h['below']} of 2 "
                f"below; benchmarked min {want_b['min'].expected:.0f} ({want_b['min_dims']}), "
                f"{want_b['below']} of 2 below") in text
    assert pct["train"]["min_dims"] == d1 and pct["train"]["benchmarked"]["min_dims"] == d2
    assert "NHWC backward % of copy bandwidth (issue 11: >= 75%): heuristic min 62 " \
           "(32x1024x14x14)" in text
    # the benchmarked table: one row per shape and pass
    assert "== batchnorm benchmarked (global.benchmarking=1" in text
    rows = {(c[0], c[1], c[2]): c for c in map(_cells, text.splitlines())
            if len(c) > 3 and c[0].startswith("float") and c[2] in ("train", "backward")}
    assert len(rows) == 8                                   # 4 shapes x (train, backward)
    t = rows[("float16 NHWC", d1, "train")]
    assert t[3:9] == ["graph eng0 k31=4", "0.030", "0.016", "0.030", f"{0.030 / 0.030:.2f}",
                      f"{0.016 / 0.020:.2f}"]
    assert t[9:14] == [f"{3 * nb16 / 0.016e-3 / 1e9:.0f}", f"{bench['train'][d1]:.0f}",
                       f"{heur['train'][d1]:.0f}", "1", "-"]
    assert t[14] == "eng0 k31=0 0.030"
    b = rows[("float16 NHWC", d1, "backward")]
    assert b[7:14] == [f"{0.045 / 0.100:.2f}", f"{0.035 / 0.080:.2f}",
                       f"{5 * nb16 / 0.035e-3 / 1e9:.0f}", f"{bench['backward'][d1]:.0f}",
                       f"{heur['backward'][d1]:.0f}", "2", "0.30"]
    assert b[14] == "eng0 k31=0 0.045, eng0 k31=1 0.045"
    assert rows[("float16 NHWC", "32x2048x7x7", "train")][-1] == "NotSupportedError: no config"
    assert rows[("float32 NCHW", d1, "backward")][3:6] == ["-", "-", "-"]   # none benchmarked
    # its geomeans per (config, pass); none for fp32 NCHW (no benchmarked figure)
    gb = res["geomean_ratio_benchmarked"]
    assert gb["float16 NHWC train"] == pytest.approx(math.sqrt(0.030 / 0.030 * 0.040 / 0.050))
    assert gb["float16 NHWC backward"] == pytest.approx(math.sqrt(0.045 / 0.100 * 0.060 / 0.060))
    assert math.isnan(gb["float32 NCHW train"])
    assert (f"geomean ratios, benchmarked: float16 NHWC train "
            f"{math.sqrt(0.030 / 0.030 * 0.040 / 0.050):.2f}") in text
    # configs the benchmark timed, NHWC: the failed shape has none to say
    assert res["nhwc_bench_timed"] == {"train": {d1: 1, d2: 1, "32x2048x7x7": None},
                                       "backward": {d1: 2, d2: 1, "32x2048x7x7": None}}
    assert (f"NHWC configs timed by global.benchmarking=1 (1: the heuristic's own config only, "
            f"no choice): train {d1} 1, {d2} 1, 32x2048x7x7 -; backward {d1} 2, {d2} 1, "
            "32x2048x7x7 -") in text
    # above 1.0x: NHWC train (kernels equal: host-bound) and fp32 NCHW backward (legacy),
    # each with its benchmarked ratio where there is one
    above = {name: (why, rb) for name, _, _, why, _, rb in res["above_1"]}
    assert above == {"batchnorm float16 NHWC 32x1024x14x14 train":
                     (bg.HOST, pytest.approx(0.030 / 0.030)),
                     "batchnorm float32 NCHW 32x1024x14x14 backward": (bg.LEGACY, None)}
    doc = {"results": {"batchnorm": res}}
    bg.print_verdict(doc)
    assert doc["verdict"]["by_reason"] == {bg.HOST: 1, bg.LEGACY: 1}
    assert "batchnorm float32 NCHW 32x1024x14x14 backward" in capsys.readouterr().out


def test_bn_bench_ratio_needs_the_same_timing_method_and_refines_the_reason():
    """A benchmarked wall figure is compared with torch's only when both were timed the
    same way; its device time is the best candidate of the heuristic case's reason."""
    nb = 32 * 1024 * 14 * 14 * 2
    figures = {"ours_train_ms": 0.060, "torch_train_ms": 0.040,
               "ours_train_gpu_ms": 0.060, "torch_train_gpu_ms": 0.040}
    plain = _bn_rec("float16", "NHWC", (32, 1024, 14, 14), x_bytes=nb, copy_gpu_ms=0.01,
                    figures=figures, engines={"train": G})
    assert plain["train_reason"] == bg.NOCFG                 # 1.5x on the device, no candidate
    rec = _bn_rec("float16", "NHWC", (32, 1024, 14, 14), x_bytes=nb, copy_gpu_ms=0.01,
                  figures=figures, engines={"train": G}, bench={"train": (0.041, 0.041, 4)})
    assert rec["train_bench_ratio"] == pytest.approx(0.041 / 0.040)
    assert rec["train_bench_gpu_ratio"] == pytest.approx(0.041 / 0.040)
    assert rec["train_reason"] == bg.ALGO                    # a timed config matches torch
    rec["train_bench_timing"] = "wall_clock"                  # torch's figure is cuda_events
    bg._bn_bench_ratios(rec, "train")
    assert rec["train_bench_ratio"] is None
    assert rec["train_bench_gpu_ratio"] == pytest.approx(0.041 / 0.040)


class _FakePlan:
    def __init__(self, algorithm):
        self.algorithm = algorithm
        self.engine = type("E", (), {"name": G})()


class _FakeBenchDevice:
    """Records each build's knobs; `fail` makes the build raise."""

    def __init__(self, algorithm, fail=None):
        self.algorithm, self.fail, self.builds = algorithm, fail, []

    async def build(self, graph, knobs=None):
        self.builds.append((graph, knobs))
        if self.fail:
            raise self.fail
        return _FakePlan(self.algorithm)


def _bench_args():
    return bg.parse_args(["--sections", "batchnorm", "--reps", "7"])


@pytest.mark.anyio
async def test_bn_bench_builds_with_benchmarking_and_records_its_figures(monkeypatch):
    timed = []

    async def fake_time_plan(torch, dev, plan, vp, reps, stream=0, warmup=3):
        timed.append((dev, plan, vp, reps))
        return 0.021, "cuda_events", 0.018

    monkeypatch.setattr(bg, "time_plan", fake_time_plan)
    algo = Algorithm("eng0 k31=4", "fastest of 3", [("eng0 k31=6", 0.0201),
                                                   ("eng0 k31=4", 0.0180), ("eng0 k31=2", None)])
    bdev = _FakeBenchDevice(algo)
    checked = []

    async def check(plan):
        checked.append(plan)
        return 0.4

    rec = {"layout": "NHWC", "timing": "cuda_events", "backward_timing": "cuda_events",
           "torch_backward_ms": 0.030, "torch_backward_gpu_ms": 0.024,
           "ours_backward_ms": 0.025, "backward_error": None}
    vp, graph = {"dx": object()}, object()
    await bg._bn_bench(None, bdev, _bench_args(), rec, "backward", graph, vp, check=check)
    assert bdev.builds == [(graph, {"global.benchmarking": 1})]
    assert [(d, v, r) for d, _, v, r in timed] == [(bdev, vp, 7)]
    assert checked == [timed[0][1]]
    assert rec["backward_bench_engine"] == G and rec["backward_bench_algorithm"] == "eng0 k31=4"
    assert rec["backward_bench_timed"] == 2
    assert rec["backward_bench_trials"] == "eng0 k31=6 0.020, eng0 k31=4 0.018, eng0 k31=2"
    assert rec["ours_backward_bench_ms"] == 0.021 and rec["ours_backward_bench_gpu_ms"] == 0.018
    assert rec["backward_bench_ratio"] == pytest.approx(0.021 / 0.030)
    assert rec["backward_bench_gpu_ratio"] == pytest.approx(0.018 / 0.024)
    assert rec["backward_bench_err_over_tol"] == 0.4 and "backward_bench_error" not in rec
    assert rec["backward_bench_build_s"] >= 0


@pytest.mark.anyio
async def test_bn_bench_failure_and_deadline_leave_the_heuristic_figures(monkeypatch):
    async def no_timing(*a, **k):
        raise AssertionError("nothing may be timed")

    monkeypatch.setattr(bg, "time_plan", no_timing)
    heuristic = {"layout": "NHWC", "ours_train_ms": 0.04, "train_ratio": 1.3,
                 "train_pct_of_copy": 57.0, "train_reason": bg.HOST}
    bdev = _FakeBenchDevice(Algorithm("x"), fail=RuntimeError("CUDNN_STATUS_NOT_SUPPORTED"))
    rec = dict(heuristic)
    await bg._bn_bench(None, bdev, _bench_args(), rec, "train", object(), {"x": 1})
    assert rec == {**heuristic,
                   "train_bench_error": "RuntimeError: CUDNN_STATUS_NOT_SUPPORTED"}
    # past the deadline: no build at all
    bdev = _FakeBenchDevice(Algorithm("x"))
    rec = dict(heuristic)
    await bg._bn_bench(None, bdev, _bench_args(), rec, "train", object(), {"x": 1},
                       deadline=0.0)
    assert bdev.builds == [] and rec == {**heuristic,
                                         "train_bench_error": "skipped: --max-seconds reached"}
    # no variant pack (the heuristic part's buffers failed): said, nothing built
    rec = dict(heuristic)
    await bg._bn_bench(None, bdev, _bench_args(), rec, "train", object(), None)
    assert bdev.builds == [] and rec["train_bench_error"].startswith("RuntimeError: no variant")


def test_bn_backward_tolerance_is_the_oracle_table():
    from oracle._cases import TOL
    assert bg.BN_BACKWARD_TOL == TOL["bn_backward"]


def test_err_over_tol_is_in_units_of_the_elementwise_bound():
    torch = peer("torch", "PyTorch is the benchmark's peer")
    want = torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)
    got = torch.tensor([2.003, -1.0, 5e-4], dtype=torch.float16).float()
    atol = rtol = 1e-3
    # |2.003 (fp16: 2.0039) - 2| / (1e-3 + 2e-3); 5e-4 (fp16) / 1e-3
    e0 = abs(float(torch.tensor(2.003, dtype=torch.float16)) - 2.0) / 3e-3
    e2 = float(torch.tensor(5e-4, dtype=torch.float16)) / 1e-3
    assert bg.err_over_tol(got, want, atol, rtol) == pytest.approx(max(e0, e2))
    assert bg.err_over_tol(got.reshape(1, 3, 1, 1), want, atol, rtol) == pytest.approx(max(e0, e2))
    got[1] = float("nan")
    assert bg.err_over_tol(got, want, atol, rtol) == math.inf
    assert bg.err_text(math.inf) == "inf" and bg.err_text(None) == "-"


def _bn_data(torch, dims, seed=3):
    import numpy as np
    rng = np.random.default_rng(seed)
    c = dims[1]
    x = rng.normal(0.5, 2.0, dims)
    dy = rng.uniform(-1, 1, dims)
    scale = rng.uniform(0.5, 1.5, c)
    ax = (0, 2, 3)
    mean = x.mean(axis=ax)
    inv = 1.0 / np.sqrt(x.var(axis=ax) + bg.BN_EPS)
    return x, dy, scale, mean, inv


def test_bn_backward_reference_is_the_oracle_formula():
    torch = peer("torch", "PyTorch is the benchmark's peer")
    from oracle import _reference as ref
    x, dy, scale, mean, inv = _bn_data(torch, (3, 4, 5, 6))
    want = ref.bn_backward(dy, x, scale, mean, inv)
    t = [torch.from_numpy(a) for a in (x, dy, scale, mean, inv)]
    t[0] = t[0].contiguous(memory_format=torch.channels_last)      # layout must not matter
    dx, dscale, dbias = bg.bn_backward_reference(*t)
    assert torch.allclose(dx, torch.from_numpy(want["dx"]), rtol=1e-12, atol=1e-12)
    assert torch.allclose(dscale, torch.from_numpy(want["dscale"].ravel()), rtol=1e-12)
    assert torch.allclose(dbias, torch.from_numpy(want["dbias"].ravel()), rtol=1e-12, atol=1e-12)


def test_torch_bn_backward_native_route_runs_with_the_saved_statistics():
    """On CPU tensors PyTorch takes its native batchnorm: the call built from the schemas'
    names gives the float64 oracle's gradients with the forward's saved statistics."""
    torch = peer("torch", "PyTorch is the benchmark's peer")
    from oracle import _reference as ref
    x, dy, scale, mean, inv = _bn_data(torch, (4, 3, 5, 5))
    xt, dyt = (torch.from_numpy(a).float() for a in (x, dy))
    st = torch.from_numpy(scale).float()
    name, fn, save_mean, save_invstd = bg.torch_bn_backward(torch, xt, dyt, st,
                                                            torch.zeros(3))
    assert name == "aten.native_batch_norm_backward"
    assert torch.allclose(save_mean.double(), torch.from_numpy(mean), atol=1e-5)
    assert torch.allclose(save_invstd.double(), torch.from_numpy(inv), rtol=1e-4)
    want = ref.bn_backward(dy, x, scale, save_mean.double().numpy(), save_invstd.double().numpy())
    dx, dscale, dbias = fn()
    tf = bg.BN_BACKWARD_TOL["float32"]
    for got, key in ((dx, "dx"), (dscale, "dscale"), (dbias, "dbias")):
        assert bg.err_over_tol(got, torch.from_numpy(want[key]).reshape(got.shape), tf, tf) < 0.1


def test_every_torch_bn_op_gets_its_arguments_by_schema_name():
    """Each backend's forward and backward take their positional arguments from one name
    table (the schemas differ: grad_out / grad_output, eps / epsilon, save_invstd /
    save_var, reserve / reserveSpace): nothing missing, x and dy where each op wants them."""
    torch = peer("torch", "PyTorch is the benchmark's peer")
    x, dy = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    w, b, rm, rv = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)
    saved = (torch.empty(0), torch.zeros(3), torch.ones(3), torch.empty(0, dtype=torch.uint8))
    values = {**bg.bn_forward_values(x, w, b, rm, rv, 1e-5, 0.1),
              **bg.bn_backward_values(dy, saved)}
    for fwd_op, bwd_op in bg.TORCH_BN_OPS.values():
        _, args = bg.aten_call(torch, fwd_op, values)
        assert [args[i] is v for i, v in enumerate((x, w, b, rm, rv))] == [True] * 5
        assert args[-2:] == (0.1, 1e-5)                          # momentum, epsilon
        _, args = bg.aten_call(torch, bwd_op, values)
        first_two = (x, dy) if bwd_op == "cudnn_batch_norm_backward" else (dy, x)
        want = first_two + (w, rm, rv, saved[1], saved[2])
        assert [args[i] is v for i, v in enumerate(want)] == [True] * 7, bwd_op
    _, args = bg.aten_call(torch, "cudnn_batch_norm_backward", values)
    assert args[-1] is saved[3] and args[-2] == 1e-5          # epsilon, reserveSpace


class _Dt:
    def __init__(self, name):
        self.name = name


def _fake_torch(cuda=True, enabled=True, hip=None):
    from types import SimpleNamespace as NS
    f16, bf16, f32 = _Dt("half"), _Dt("bfloat16"), _Dt("float")
    cudnn = NS(is_available=lambda: cuda, enabled=enabled)
    return NS(float16=f16, bfloat16=bf16, float32=f32, version=NS(hip=hip),
              backends=NS(cudnn=cudnn))


class _FakeX:
    def __init__(self, dtype, shape=(32, 64, 56, 56), cuda=True):
        self.dtype, self.shape, self.is_cuda = dtype, shape, cuda

    def dim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)


def test_torch_bn_backend_follows_atens_selection():
    """ATen's _select_batch_norm_backend: cuDNN unless bf16, a half input with a non-float
    weight, a batch over 880801 or >= 2^31-1 elements; native otherwise; ROCm decides itself."""
    t = _fake_torch()
    w32 = _FakeX(t.float32, (64,))
    assert bg.torch_bn_backend(t, _FakeX(t.float16), w32) == "cudnn"
    assert bg.torch_bn_backend(t, _FakeX(t.float32), w32) == "cudnn"
    assert bg.torch_bn_backend(t, _FakeX(t.float16), _FakeX(t.float16, (64,))) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.bfloat16), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float32, (880802, 2, 2, 2)), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float16, (256, 2048, 64, 64)), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float32, cuda=False), w32) == "native"
    assert bg.torch_bn_backend(t, _FakeX(t.float32, (32, 64)), w32) == "native"
    assert bg.torch_bn_backend(_fake_torch(enabled=False), _FakeX(t.float32), w32) == "native"
    assert bg.torch_bn_backend(_fake_torch(hip="6.2"), _FakeX(t.float32), w32) == "dispatch"


def test_batchnorm_section_alone_parses():
    args = bg.parse_args(["--sections", "batchnorm", "--max-seconds", "60"])
    assert args.sections == ("batchnorm",) and args.max_seconds == 60.0


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC")])
def test_bn_section_graphs_build_and_backward_pack_runs_on_the_cpu(cpu_device, dtype, layout):
    """The section's three graphs are supported patterns, and the backward graph with the
    section's variant-pack names gives the float64 oracle's gradients (CPU device)."""
    import numpy as np
    import hipdnn_async as hd
    from oracle import _reference as ref
    dims = (2, 8, 5, 6)
    gt, gi, gb = bg._bn_graphs(hd, dims, dtype, layout)
    for g in (gt, gi):
        cpu_device.build_sync(g)
    x, dy, scale, mean, inv = _bn_data(None, dims)
    io = np.dtype(dtype)

    def arr(a):
        a = np.asarray(a, io)
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) \
            if layout == "NHWC" else a

    def chan(v):
        return np.asarray(v, np.float32).reshape(1, -1, 1, 1)

    vp = {"dy": arr(dy), "x": arr(x), "scale": chan(scale), "mean": chan(mean),
          "inv_variance": chan(inv), "dx": arr(np.full(dims, np.nan)),
          "dscale": chan(np.full(8, np.nan)), "dbias": chan(np.full(8, np.nan))}
    cpu_device.build_sync(gb).execute_sync(vp)
    want = ref.bn_backward(vp["dy"], vp["x"], vp["scale"], vp["mean"], vp["inv_variance"])
    t_io, t_f = bg.BN_BACKWARD_TOL[dtype], bg.BN_BACKWARD_TOL["float32"]
    for key, t in (("dx", t_io), ("dscale", t_f), ("dbias", t_f)):
        got, w = np.asarray(vp[key], np.float64), want[key]
        assert (np.abs(got - w) <= t + t * np.abs(w)).all(), key
