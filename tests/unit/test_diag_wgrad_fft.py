"""bench/diag_wgrad_fft.py's CPU parts: the per-shape choice (fastest config within the
margin, FFT against the direct algorithm, NaN errors never chosen), the decision lines,
the shape order, the accepted-list wrapper on the legacy engine's ``ConvSetup`` (cuDNN's
list recorded, one forced algorithm, everything restored) and the plan checks of each
config (default: FFT knob at 1; FFT declined: knob 0 and no FFT; forced: that algorithm).
The timings and errors themselves come from the H200; here the records are given."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_gpu  # noqa: E402
import diag_wgrad_fft as dw  # noqa: E402

from hipdnn_async import NotSupportedError  # noqa: E402
from hipdnn_async.providers._tuning import BENCH_MARGIN, Candidate  # noqa: E402
from hipdnn_async.providers.cudnn import _conv  # noqa: E402

SCRIPT = os.path.join(BENCH, "diag_wgrad_fft.py")


def rec(config, algorithm, ms, err, workspace=0, status="ok"):
    return {"config": config, "algorithm": algorithm, "ms": ms, "err": err,
            "workspace": workspace, "status": status}


def res3(fft_err=0.10, tiling_err=0.30, fft_ms=0.150, tiling_ms=0.200):
    """A res3-3x3-like shape: the default takes FFT, the direct ALGO_0 (FFT declined) is
    slow, torch faster but over the bound."""
    return [rec("default", "FFT", fft_ms + 0.001, fft_err, 64 << 20),
            rec("default bench", "FFT", fft_ms + 0.002, fft_err, 64 << 20),
            rec("FFT declined", "ALGO_0", 0.360, 0.04),
            rec("FFT declined bench", "ALGO_0", 0.362, 0.04),
            rec("force FFT", "FFT", fft_ms, fft_err, 64 << 20),
            rec("force FFT_TILING", "FFT_TILING", tiling_ms, tiling_err, 16 << 20),
            rec("torch", "cudnn.benchmark", 0.118, 2.02, None)]


FFT_RECS = (0, 1, 4, 5)     # the records of res3() that run FFT / FFT_TILING


def test_noise_is_the_benchmark_margin():
    assert dw.NOISE == BENCH_MARGIN


def test_fft_within_the_margin_and_faster_is_chosen_over_torch_outside_the_bound():
    recs = res3()
    v = dw.verdict(recs, 0.5)
    assert v["best"] is recs[4]                      # force FFT, 0.150 ms; torch is at 2.02
    assert v["best_bound"] is recs[4]                # torch is outside the bound itself
    assert v["fft"] is recs[4] and v["fft_over"] == []
    assert v["direct"] is recs[2]                    # ALGO_0 at 0.360, the fastest direct
    assert v["ratio"] == pytest.approx(0.150 / 0.360) and v["beats"]
    assert v["torch"] is recs[6]
    line = dw.summary_line("res3 3x3", v, 0.5)
    assert "FFT (force FFT) 0.150 ms, err 0.10" in line
    assert "FFT BEATS ALGO_0" in line and "0.42x ALGO_0" in line and "64.0 MiB" in line
    assert "with err/bound <= 1:" not in line           # the same record as the margin's
    assert "torch 0.118 ms err 2.02 (outside our bound)" in line


def test_fft_inside_the_bound_but_over_the_margin_is_not_taken_and_is_named():
    recs = res3(fft_err=0.70, tiling_err=0.60)
    v = dw.verdict(recs, 0.5)
    assert v["fft"] is None
    assert {r["config"] for r in v["fft_over"]} == {"default", "default bench", "force FFT",
                                                    "force FFT_TILING"}
    assert v["best"] is recs[2] and v["best_bound"] is recs[4]
    assert v["ratio"] is None and not v["beats"]
    line = dw.summary_line("res3 3x3", v, 0.5)
    assert "with err/bound <= 1: FFT (force FFT)" in line
    assert "no FFT config with err/bound <= 0.5" in line
    assert "FFT_TILING (force FFT_TILING) err 0.60 OVER 0.5" in line
    # a wider margin takes it
    assert dw.verdict(recs, 0.75)["fft"] is recs[4]


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_a_nan_or_missing_error_is_never_within_any_margin(bad):
    recs = res3()
    for i in FFT_RECS:
        recs[i]["err"] = bad
    v = dw.verdict(recs, 1.0)
    assert v["fft"] is None and v["best"] is recs[2]
    assert len(v["fft_over"]) == len(FFT_RECS)
    if bad is not None and math.isnan(bad):
        assert "err nan OVER 1" in dw.summary_line("s", v, 1.0)


def test_fft_within_the_timing_noise_does_not_beat_the_direct_algorithm():
    direct = 0.360
    just_in = direct * (1 - dw.NOISE) * 1.001        # 2.9 % faster: noise
    v = dw.verdict(res3(fft_ms=just_in, tiling_ms=0.5), 0.5)
    assert v["fft"]["ms"] == just_in and not v["beats"]
    assert "FFT does not beat ALGO_0" in dw.summary_line("s", v, 0.5)
    assert dw.verdict(res3(fft_ms=direct * (1 - dw.NOISE) * 0.999, tiling_ms=0.5), 0.5)["beats"]


def test_records_that_did_not_run_are_left_out():
    recs = [rec("default", "ALGO_1", 0.25, 0.10),
            rec("default bench", "ALGO_1", 0.25, 0.10),
            {"config": "force FFT", "status": "n/a", "ms": None, "err": None,
             "workspace": None, "message": "FFT not in cuDNN's list"},
            {"config": "force FFT_TILING", "status": "error", "ms": None, "err": None,
             "workspace": None, "message": "RuntimeError: ..."},
            rec("default", "FFT", 0.01, 0.0, status="error"),       # an error row never counts
            {"config": "torch", "status": "error", "ms": None, "err": None, "workspace": None}]
    v = dw.verdict(recs, 0.5)
    assert v["fft"] is None and v["fft_over"] == [] and v["direct"] is recs[0]
    assert v["best"] is recs[0] and v["torch"] is recs[5]
    line = dw.summary_line("res5 1x1", v, 0.5)
    assert "no FFT config with err/bound <= 0.5" in line and "torch - ms err -" in line


def test_decision_lines_sort_the_shapes():
    verdicts = {"res3 3x3": dw.verdict(res3(), 0.5),
                "res2 3x3": dw.verdict(res3(fft_ms=0.359, tiling_ms=0.5), 0.5),
                "res4 3x3": dw.verdict(res3(fft_err=0.8, tiling_err=0.9), 0.5),
                "conv1 7x7/2": dw.verdict([rec("default", "ALGO_0", 0.42, 0.1)], 0.5)}
    beats, within, over, none = dw.decision(verdicts, 0.5)
    assert beats.endswith("1 of 4 shapes: res3 3x3")
    assert within.endswith("res3 3x3, res2 3x3")
    assert ("res4 3x3 (default 0.80, default bench 0.80, force FFT 0.80, force FFT_TILING "
            "0.90)") in over
    assert none.endswith("conv1 7x7/2")


def test_worst_keeps_a_nan():
    assert dw.worst(0.1, 0.3) == 0.3
    assert math.isnan(dw.worst(0.1, math.nan)) and math.isnan(dw.worst(math.nan, 0.1))


def test_shapes_put_the_3x3_ones_first():
    all_rows = dw.shapes(bench_gpu.RESNET50_CONVS, "all")
    assert sorted(all_rows) == sorted(bench_gpu.RESNET50_CONVS)
    three = dw.shapes(bench_gpu.RESNET50_CONVS, "3x3")
    assert [r[0] for r in three] == ["res2 3x3", "res3 3x3/2", "res3 3x3", "res4 3x3",
                                     "res5 3x3"]
    assert all_rows[:len(three)] == three


def test_arguments():
    a = dw.parse_args([])
    assert (a.batch, a.wide, a.layers, a.reps, a.margin, a.max_seconds, a.json) == \
        (32, False, "all", 20, 0.5, 110.0, None)
    with pytest.raises(SystemExit):
        dw.parse_args(["--margin", "0"])


def _run_without_torch(*argv):
    """The script as ``python bench/diag_wgrad_fft.py ARGV`` in a process where
    ``import torch`` fails."""
    code = ("import runpy, sys; sys.modules['torch'] = None; "
            f"sys.argv = [{SCRIPT!r}] + {list(argv)!r}; "
            f"runpy.run_path({SCRIPT!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_help_works_without_torch_and_a_run_says_what_is_missing():
    r = _run_without_torch("--help")
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout and "--max-seconds" in r.stdout and "gpu_wgrad_tol" in r.stdout
    r = _run_without_torch()
    assert r.returncode == 2 and "needs PyTorch with CUDA" in r.stderr, (r.stdout, r.stderr)


# ---------------------------------------------------------------------------------------
# the accepted-list wrapper, on the legacy engine's own ConvSetup

NAMES = _conv.ALGO_NAMES[2]     # backward filter


def _cand(name, ws, det=True):
    return Candidate(name, NAMES.index(name), ws, det)


RAW = [_cand("ALGO_1", 100), _cand("ALGO_0", 0, det=False), _cand("ALGO_3", 50, det=False),
       _cand("WINOGRAD_NONFUSED", 300), _cand("FFT_TILING", 400), _cand("FFT", 900)]


def _setup(float_io=True, direction=2):
    return _conv.ConvSetup(direction=direction, roles=(), descs=(), conv=None,
                           float_io=float_io)


def _accepted(setup, raw=RAW, allow_fft=True):
    return [c.name for c in setup.accepted(raw, deterministic=False, allow_fft=allow_fft)]


def test_the_policy_itself_accepts_fft_for_float_wgrad_so_forcing_needs_no_patch():
    # the forced rows only narrow what the policy accepts: FFT must be in it by default
    assert {"FFT", "FFT_TILING"} <= set(_accepted(_setup()))
    assert not {"FFT", "FFT_TILING"} & set(_accepted(_setup(), allow_fft=False))


@pytest.mark.parametrize("allow_fft", [True, False])
def test_wrapper_without_force_returns_the_policys_list_and_records_cudnns(allow_fft):
    s = _setup()
    plain = _accepted(s, allow_fft=allow_fft)
    with dw.AcceptedList() as wrap:
        assert _accepted(s, allow_fft=allow_fft) == plain
    assert wrap.seen == [[(c.name, c.workspace_bytes) for c in RAW]]
    assert _accepted(s, allow_fft=allow_fft) == plain


@pytest.mark.parametrize("force", ["FFT", "FFT_TILING"])
def test_wrapper_forces_one_algorithm(force):
    with dw.AcceptedList(force):
        assert _accepted(_setup()) == [force]


def test_forcing_an_algorithm_cuDNN_does_not_list_is_a_decline_naming_the_list():
    raw = [c for c in RAW if c.name != "FFT"]
    with dw.AcceptedList("FFT"), pytest.raises(NotSupportedError) as info:
        _accepted(_setup(), raw)
    msg = str(info.value)
    assert dw.NOT_LISTED in msg and "ALGO_1, ALGO_0, ALGO_3, WINOGRAD_NONFUSED, FFT_TILING" in msg


@pytest.mark.parametrize("force,allow_fft", [("WINOGRAD_NONFUSED", True), ("FFT", False)])
def test_forcing_an_algorithm_the_policy_refuses_is_an_error_not_a_decline(force, allow_fft):
    with dw.AcceptedList(force), pytest.raises(RuntimeError) as info:
        _accepted(_setup(), allow_fft=allow_fft)
    assert not isinstance(info.value, NotSupportedError)
    assert "refused" in str(info.value) and "update this diagnostic" in str(info.value)
    assert f"allow_fft={allow_fft}" in str(info.value)


def test_wrapper_is_undone_after_an_error():
    original = _conv.ConvSetup.accepted
    with pytest.raises(ZeroDivisionError), dw.AcceptedList("FFT"):
        1 / 0
    assert _conv.ConvSetup.accepted is original


def _plan_rec(engine=dw.LEGACY, algorithm="FFT", **knobs):
    return {"engine": engine, "algorithm": algorithm, "knobs": knobs}


@pytest.mark.parametrize("label", [c[0] for c in dw.CONFIGS])
def test_every_config_accepts_a_plan_that_shows_its_policy(label):
    _, _, _, _, allow_fft, force = next(c for c in dw.CONFIGS if c[0] == label)
    algorithm = force or ("FFT" if allow_fft else "ALGO_0")
    dw.check_plan(_plan_rec(algorithm=algorithm, **{dw.LEGACY_ALLOW_FFT: allow_fft}),
                  allow_fft, force)


def test_configs_are_the_default_the_fft_declined_policy_and_the_forced_rows():
    by_label = {c[0]: c for c in dw.CONFIGS}
    assert [c[0] for c in dw.CONFIGS] == ["default", "default bench", "FFT declined",
                                          "FFT declined bench", "force FFT",
                                          "force FFT_TILING"]
    assert by_label["default"][2] is None and by_label["default"][4] == 1
    assert by_label["FFT declined"][2] == dw.LEGACY and by_label["FFT declined"][4] == 0
    assert [by_label[k][3] for k in ("default bench", "FFT declined bench")] == [1, 1]
    assert len({c[1] for c in dw.CONFIGS}) == dw.N_DEVICES    # one Device per policy


@pytest.mark.parametrize("rec_,allow_fft,force,words", [
    (_plan_rec(), 1, None, "has knobs {}"),                              # knob not offered
    (_plan_rec(**{dw.LEGACY_ALLOW_FFT: 1}), 0, None, "allow_fft=0, the legacy plan"),
    (_plan_rec(**{dw.LEGACY_ALLOW_FFT: 0}), 0, None, "=0 but the plan runs FFT"),
    (_plan_rec(algorithm="FFT_TILING", **{dw.LEGACY_ALLOW_FFT: 0}), 0, None, "runs FFT_TILING"),
    (_plan_rec(algorithm="ALGO_1", **{dw.LEGACY_ALLOW_FFT: 1}), 1, "FFT",
     "forced FFT but the plan runs ALGO_1"),
], ids=["no-knob", "knob-not-0", "declined-runs-fft", "declined-runs-tiling", "forced-other"])
def test_a_plan_that_does_not_show_its_policy_is_an_error(rec_, allow_fft, force, words):
    with pytest.raises(RuntimeError) as info:
        dw.check_plan(rec_, allow_fft, force)
    assert words in str(info.value)


def test_a_graph_engine_default_plan_needs_no_legacy_knob():
    dw.check_plan(_plan_rec(engine="CUDNN_GRAPH_ENGINE", algorithm="eng17"), 1, None)


# ---------------------------------------------------------------------------------------
# the run's orchestration (table, summaries, decision, exit status, JSON) with the GPU
# parts replaced: what the H200 run prints, on given figures

class _FakeDevice:
    def __init__(self, spec, **kwargs):
        self.spec, self.kwargs = spec, kwargs
        self.provider = type("P", (), {"describe": lambda self: {"device": "fake"}})()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class _Ns:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _fake_helpers():
    cudnn = _Ns(allow_tf32=True, benchmark=True, version=lambda: 91900)
    cuda = _Ns(matmul=_Ns(allow_tf32=True))
    torch = _Ns(__version__="fake", backends=_Ns(cudnn=cudnn, cuda=cuda))
    return _Ns(torch=torch, hd=_Ns(Device=_FakeDevice), RESNET50_CONVS=bench_gpu.RESNET50_CONVS,
               forced_benchmarking=lambda: None, NotSupportedError=NotSupportedError)


class _FakeShape:
    def __init__(self, h, batch, row, wide, devs):
        self.name, self.n, self.atol, self.rtol = row[0], batch * 784, 1e-3, 2e-4
        assert len(devs) == dw.N_DEVICES


def _fake_run(monkeypatch):
    times = {"default": ("FFT", 0.151, 0.12), "default bench": ("FFT", 0.152, 0.12),
             "FFT declined": ("ALGO_0", 0.36, 0.04),
             "FFT declined bench": ("ALGO_0", 0.35, 0.04),
             "force FFT": ("FFT", 0.15, 0.12), "force FFT_TILING": ("FFT_TILING", 0.2, 0.3)}
    stride2 = {"default": ("ALGO_0", 0.36, 0.04), "default bench": ("ALGO_0", 0.35, 0.04)}

    async def run_config(h, shape, devs, cfg, reps):
        label = cfg[0]
        if shape.name == "res3 3x3/2" and cfg[5] is not None:
            raise NotSupportedError(f"{cfg[5]} {dw.NOT_LISTED} for this problem (it lists "
                                    "ALGO_0, ALGO_1)")
        if shape.name == "res4 3x3" and label == "force FFT_TILING":
            raise RuntimeError("diag_wgrad_fft: forced FFT_TILING but the plan runs ALGO_1")
        algo, ms, err = times[label]
        if shape.name == "res3 3x3/2":                              # stride 2: no FFT listed
            algo, ms, err = stride2.get(label, (algo, ms, err))
        return {"config": label, "engine": dw.LEGACY, "algorithm": algo, "ms": ms, "err": err,
                "workspace": 32 << 20, "status": "ok", "method": "cuda_events",
                "trials": "ALGO_0 0.350, FFT 0.150" if cfg[3] else "-",
                "listed": [("ALGO_0", 0), ("FFT", 32 << 20)]}

    def run_torch(h, shape, reps, method):
        assert method == "cuda_events"
        return {"config": dw.TORCH, "engine": "torch", "algorithm": "cudnn.benchmark",
                "ms": 0.12, "err": 2.02, "workspace": None, "status": "ok", "trials": "-"}

    monkeypatch.setattr(dw, "Shape", _FakeShape)
    monkeypatch.setattr(dw, "run_config", run_config)
    monkeypatch.setattr(dw, "run_torch", run_torch)


def test_a_run_prints_table_summaries_and_decision_and_fails_on_an_error(monkeypatch, capsys,
                                                                         tmp_path):
    import asyncio
    import json
    _fake_run(monkeypatch)
    h = _fake_helpers()
    out_json = tmp_path / "r.json"
    rc = asyncio.run(dw.main_async(dw.parse_args(["--layers", "3x3", "--json", str(out_json)]), h))
    text = capsys.readouterr().out
    assert rc == 1                                       # res4's forced FFT_TILING failed
    assert not h.torch.backends.cudnn.allow_tf32 and not h.torch.backends.cudnn.benchmark
    assert "cudnnFind trials (ms) / why" in text
    assert "legacy FFT" in text and "0.150" in text and "32.0" in text   # a row
    assert "N/A" in text and "FFT not in cuDNN's list" in text           # res3 3x3/2 forced
    assert "ERROR" in text and "cuDNN lists (workspace MiB): ALGO_0 0.0, FFT 32.0" in text
    summary = text.split("== per shape")[1]
    for name in ("res2 3x3", "res3 3x3", "res4 3x3", "res5 3x3"):
        assert f"  {name}: fastest with err/bound <= 0.5: FFT (force FFT) 0.150 ms" in summary
    assert "  res3 3x3/2: fastest with err/bound <= 0.5: ALGO_0 (default bench) 0.350 ms" \
        in summary
    assert "FFT BEATS ALGO_0" in summary
    assert "torch 0.120 ms err 2.02 (outside our bound)" in summary
    assert "4 of 5 shapes" in text and "no FFT config ran: res3 3x3/2" in text
    assert "ERRORS (1)" in text
    assert "res4 3x3 force FFT_TILING: RuntimeError" in text
    doc = json.loads(out_json.read_text())
    assert len(doc["records"]) == 5 * 7 and len(doc["errors"]) == 1
    assert {r["shape"] for r in doc["records"]} == {"res2 3x3", "res3 3x3/2", "res3 3x3",
                                                    "res4 3x3", "res5 3x3"}


def test_a_run_that_reaches_max_seconds_says_what_it_skipped(monkeypatch, capsys):
    import asyncio
    _fake_run(monkeypatch)
    rc = asyncio.run(dw.main_async(dw.parse_args(["--max-seconds", "0"]), _fake_helpers()))
    text = capsys.readouterr().out
    assert rc == 1 and "no shape ran" in text
    assert "SKIPPED (--max-seconds 0 reached): res2 3x3, res3 3x3/2" in text
