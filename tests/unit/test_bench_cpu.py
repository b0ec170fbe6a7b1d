"""bench/bench_cpu.py runs (a tiny ``--quick`` subset, in a subprocess so that its
``torch.set_num_threads`` stays there) and its report is consistent: every case timed on
both sides, ratios, rates, percentages and geometric means recomputed here from the
case figures, torch's thread count equal to ours, and our outputs equal to PyTorch's
within the dtype's rounding (so the benchmark compares the same work)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="bench_cpu.py compares against PyTorch's CPU path")

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_cpu as bc  # noqa: E402

ARGS = ["--quick", "--batch", "1", "--reps", "1", "--warmup", "1", "--gemm-n", "512",
        "--configs", "float32:NHWC,bfloat16:NCHW",
        "--patterns", "fprop,wgrad,conv_bias_relu,bn_train_relu,bn_infer_drelu_bwd"]
# relative L2 difference of our output from torch's: fp32 accumulation order only
# (about sqrt(C*R*S) * 2^-24); bf16 both outputs rounded to 8 significant bits
# (2^-8 each) plus bf16 ReLU inputs on torch's side
REL_L2 = {"float32": 1e-5, "bfloat16": 1e-2}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_cpu") / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.abspath(os.path.join(BENCH, ".."))] + sys.path))
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "bench_cpu.py"), *ARGS,
                           "--json", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out) as fh:
        return json.load(fh), proc.stdout


def test_every_case_ran_on_both_sides(report):
    doc, stdout = report
    assert doc["errors"] == []
    want = {(shape, p, dt, lay)
            for dt, lay in (("float32", "NHWC"), ("bfloat16", "NCHW"))
            for shape, pats in ((bc.QUICK_CONV_SHAPES, ("fprop", "wgrad", "conv_bias_relu")),
                                (["x".join(map(str, s)) for s in bc.QUICK_BN_SHAPES],
                                 ("bn_train_relu", "bn_infer_drelu_bwd")))
            for shape in shape for p in pats}
    got = {(r["shape"], r["pattern"], r["dtype"], r["layout"]) for r in doc["cases"]}
    assert got == want
    for r in doc["cases"]:
        assert r["ours_ms"] > 0 and r["torch_ms"] > 0, r
        assert r["ours_ms"] <= r["ours_median_ms"] and r["torch_ms"] <= r["torch_median_ms"], r
        assert math.isclose(r["ratio"], r["ours_ms"] / r["torch_ms"], rel_tol=1e-12), r
        assert r["rel_l2"] <= REL_L2[r["dtype"]], r
        assert 1 <= r["calls"] <= bc.MAX_REPS, r         # --reps 1, the default --min-ms
    assert doc["header"]["min_ms"] == 200.0
    assert "geometric means" in stdout and "targets:" in stdout


def test_threads_and_header(report):
    doc, _ = report
    h = doc["header"]
    assert h["torch_threads"] == h["threads"] >= 1
    for key in ("command", "cpu", "onednn", "torch", "numpy", "date"):
        assert h[key], key
    dnnl = h["onednn"]
    if dnnl["loaded"]:   # oneDNN's OpenMP team is as wide as torch's
        assert dnnl["threads"] == h["threads"] and dnnl["version"] and dnnl["path"], dnnl
    else:
        assert dnnl["reason"], dnnl
    assert "bench_cpu.py" in h["command"] and "--quick" in h["command"]


def test_rates_against_anchors(report):
    doc, _ = report
    a = doc["anchors"]
    assert a["gemm_float32_gflops"] > 0 and a["gemm_bfloat16_gflops"] > 0 and a["copy_gbps"] > 0
    for r in doc["cases"]:
        if r["family"] == "conv":
            name, (c, h, w), (k, cg, rr, s), pad, stride = dict(
                (x[0], x) for x in bc.RESNET50_CONVS)[r["shape"]]
            p, q = (h + 2 * pad - rr) // stride + 1, (w + 2 * pad - s) // stride + 1
            flops = 2.0 * 1 * k * p * q * cg * rr * s        # batch 1
            assert math.isclose(r["rate"], flops / r["ours_ms"] / 1e6, rel_tol=1e-9), r
            anchor = a[f"gemm_{r['dtype']}_gflops"]
        else:
            c, hh, ww = map(int, r["shape"].split("x"))
            itemsize = 4 if r["dtype"] == "float32" else 2
            nbytes = bc.BN_PASSES[r["pattern"]] * c * hh * ww * itemsize
            assert math.isclose(r["rate"], nbytes / r["ours_ms"] / 1e6, rel_tol=1e-9), r
            anchor = a["copy_gbps"]
        assert math.isclose(r["pct"], 100.0 * r["rate"] / anchor, rel_tol=1e-9), r


def test_geometric_means_and_verdict(report):
    doc, _ = report
    rows, s = doc["cases"], doc["summary"]
    ratios = [r["ratio"] for r in rows]
    assert math.isclose(s["geomean_ratio"],
                        math.exp(sum(map(math.log, ratios)) / len(ratios)), rel_tol=1e-9)
    bf16 = [r["ratio"] for r in rows if r["dtype"] == "bfloat16"]
    assert math.isclose(s["geomean_ratio_bfloat16"],
                        math.exp(sum(map(math.log, bf16)) / len(bf16)), rel_tol=1e-9)
    v = s["verdict"]
    assert v["cases"] == len(rows)
    assert v["above_1x"] == sum(r["ratio"] > 1.0 for r in rows)
    assert v["geomean_target_met"] == (s["geomean_ratio"] <= 0.8)
    assert v["bn_below_copy_target"] == sum(r["family"] == "bn" and r["pct"] < 70.0 for r in rows)


def test_every_case_names_torchs_kernel_and_every_case_above_target_says_why(report):
    doc, stdout = report
    rows = doc["cases"]
    for r in rows:
        assert r["torch_reorders"] >= 0, r
        if r["family"] == "bn":
            assert r["torch_algorithm"] == "aten", r
        # a convolution without a oneDNN name says why (batch 1 may take ATen's own)
        assert r["torch_algorithm"] is not None or r["torch_algorithm_reason"], r
        assert bool(r["why"]) == (r["ratio"] > 1.0), r
    above = [r for r in rows if r["ratio"] > 1.0]
    assert doc["summary"]["verdict"]["above_1x_median_too"] == sum(
        r["median_ratio"] > 1.0 for r in above)
    assert ("== why:" in stdout) == bool(above)


def test_quick_and_filters_parse():
    args = bc.parse_args(["--quick", "--configs", "bfloat16:NHWC", "--patterns", "wgrad"])
    assert args.quick and args.configs == (("bfloat16", "NHWC"),) and args.patterns == ("wgrad",)
    full = bc.parse_args([])
    assert full.configs == bc.CONFIGS and set(full.patterns) == set(bc.CONV_PATTERNS
                                                                     + bc.BN_PATTERNS)
    assert set(bc.CONV_SHAPES) <= {c[0] for c in bc.RESNET50_CONVS}
    for bad in (["--configs", "float16:NHWC"], ["--patterns", "fft"], ["--batch", "0"]):
        with pytest.raises(SystemExit):
            bc.parse_args(bad)


def _counting():
    """(ours, theirs, log): two no-op timed functions recording the order of their calls."""
    log = []
    return (lambda: log.append("ours")), (lambda: log.append("torch")), log


@pytest.mark.parametrize("reps", [1, 2, 7, 10, 11])
def test_min_ms_0_times_exactly_reps_calls_per_side(reps):
    ours, theirs, log = _counting()
    t = bc.time_pair(ours, theirs, reps, warmup=1, min_ms=0)
    timed = log[2:]                                   # after one warm-up call each
    assert timed.count("ours") == timed.count("torch") == reps
    assert t["ours"][2] == t["torch"][2] == reps


def test_short_calls_get_up_to_max_reps_in_alternating_windows():
    ours, theirs, log = _counting()
    t = bc.time_pair(ours, theirs, 3, warmup=1, min_ms=1e3)    # a no-op: far below 1 s
    timed = log[2:]
    runs = [k for i, k in enumerate(timed) if i == 0 or timed[i - 1] != k]
    assert timed.count("ours") == timed.count("torch") == bc.MAX_REPS
    assert runs == ["ours", "torch"] * (len(runs) // 2)       # alternating windows
    assert bc.WINDOWS <= len(runs) // 2 <= bc.MAX_WINDOWS
    assert t["ours"][2] == t["torch"][2] == bc.MAX_REPS


def test_min_ms_adds_calls_only_up_to_about_min_ms():
    """Calls of >= 2 ms each (time.sleep's lower bound) against --min-ms 9: at most
    ceil(9 / 2) = 5 calls a side, and never fewer than --reps."""
    import time

    def slow():
        time.sleep(0.002)
    t = bc.time_pair(slow, slow, 2, warmup=1, min_ms=9)
    assert 2 <= t["ours"][2] == t["torch"][2] <= 5


@pytest.mark.parametrize("bad", ["-1", "inf", "nan"])
def test_min_ms_must_be_a_finite_number_of_ms(bad):
    with pytest.raises(SystemExit):
        bc.parse_args(["--min-ms", bad])


@pytest.mark.skipif(bc.minor_faults() is None, reason="no getrusage (resource) here")
def test_faults_per_call_count_the_pages_a_side_maps_fresh_each_call():
    import mmap
    pages = 256

    def fresh():                      # a new anonymous mapping, every page touched once
        m = mmap.mmap(-1, pages * mmap.PAGESIZE)
        for i in range(0, pages * mmap.PAGESIZE, mmap.PAGESIZE):
            m[i] = 1
        m.close()
    kept = bytearray(pages * mmap.PAGESIZE)

    def reused():
        for i in range(0, len(kept), mmap.PAGESIZE):
            kept[i] = 1
    t = bc.time_pair(fresh, reused, 4, warmup=1, min_ms=0)
    assert pages <= t["ours"][3] < pages + 32
    assert t["torch"][3] < 8


def test_without_getrusage_faults_are_none_not_zero(monkeypatch):
    # no resource module (not POSIX): "not counted", never a count of 0
    monkeypatch.setattr(bc, "resource", None)
    assert bc.minor_faults() is None
    t = bc.time_pair(lambda: None, lambda: None, 3, warmup=1, min_ms=0)
    assert t["ours"][3] is None and t["torch"][3] is None
    assert t["ours"][2] == 3
    assert bc.faults_text(None, None) == "-"
    assert bc.faults_text(256.4, 3.0) == "256/3"


class _StubTorch:
    """torch.randn / .to / matmul for ``_gemm_n``: a 256^3 product 'takes' ``ms``."""

    def __init__(self, ms):
        self.ms = ms

    def randn(self, *dims):
        return self

    def to(self, dtype):
        return self

    def matmul(self, a, b):
        import time
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < self.ms:
            pass


@pytest.mark.parametrize("probe_ms,want", [(0.3, 2048), (25.0, 512), (100.0, 256)])
def test_the_gemm_anchor_shrinks_where_one_call_would_take_too_long(probe_ms, want):
    # n^3 scales the probe's time by (n / 256)^3: 2048 takes 512x the probe, 512 takes 8x
    assert bc.GEMM_BUDGET_MS == 250.0
    assert bc._gemm_n(_StubTorch(probe_ms), None, 2048) == want
