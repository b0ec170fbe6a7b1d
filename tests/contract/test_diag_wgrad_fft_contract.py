"""bench/diag_wgrad_fft.py's FFT policy patch reaches the legacy engine (fake cuDNN):
with it a FLOAT weight gradient offers ``cudnn_legacy.allow_fft`` (default 1), benchmarks
FFT and FFT_TILING beside the direct algorithms, and a forced build runs exactly the
forced algorithm with the workspace cuDNN reported for it; where cuDNN lists no FFT
(stride 2) the forced build declines naming the list; without the patch, nothing of it
is left (no knob, no FFT). Expected names and sizes come from the fake's own answers in
the log (its heuristic list, its workspace sizes), never from the provider's code."""
from __future__ import annotations

import pytest

import hipdnn_async as hd

from . import _wgrad_fft_scenarios
from ._expect import FFTS, WINOGRADS, algo_name
from ._fakes import calls

HEUR = "cudnnGetConvolutionBackwardFilterAlgorithm_v7"
WS = "cudnnGetConvolutionBackwardFilterWorkspaceSize"
FIND = "cudnnFindConvolutionBackwardFilterAlgorithmEx"
KNOB = "cudnn_legacy.allow_fft"


@pytest.fixture(scope="module")
def case(fake_gpu):
    r = fake_gpu.call(_wgrad_fft_scenarios.wgrad_fft_case, 1)
    assert r["violations"] == 0 and r["restored"]
    return r["builds"]


def _listed(hdr, build):
    """The fake's heuristic list (name, memory) for this build's problem, status SUCCESS."""
    logs = [b["log"] for b in build.values()]
    perf = next(calls(log, HEUR)[0]["perf"] for log in logs if calls(log, HEUR))
    return [(algo_name(hdr, 2, e["algo"]), e["memory"]) for e in perf
            if e["status"] == hdr.CUDNN_STATUS_SUCCESS]


def test_without_the_patch_float_wgrad_has_no_fft(case):
    b = case["default bench"]
    assert b["error"] is None, b.get("message")
    assert KNOB not in b["plan"]["knobs"] and b["plan"]["benchmarked"]
    names = {n for n, _ in b["plan"]["trials"]}
    assert names and not names & (FFTS | WINOGRADS), names
    k = case["knob without the patch"]
    assert isinstance(k["error"], hd.KnobError) and KNOB in k["message"], k.get("message")


def test_patched_benchmark_times_fft_beside_the_direct_algorithms(case, hdr):
    listed = _listed(hdr, case)
    assert FFTS <= {n for n, _ in listed}, f"the fake lists FFT for this problem: {listed}"
    b = case["fft bench"]
    assert b["error"] is None, b.get("message")
    p = b["plan"]
    assert p["engine"] == "CUDNN_LEGACY_ENGINE" and p["knobs"][KNOB] == 1 and p["benchmarked"]
    assert [n for n, _ in p["trials"]] == [n for n, _ in listed if n not in WINOGRADS]
    assert calls(b["log"], FIND), "cudnnFind not called"
    assert b["seen"] and [n for n, _ in b["seen"][-1]] == [n for n, _ in listed]


@pytest.mark.parametrize("force", sorted(FFTS))
def test_forced_build_runs_that_algorithm_with_its_workspace(case, hdr, force):
    b = case[f"force {force}"]
    assert b["error"] is None, b.get("message")
    p = b["plan"]
    assert p["algorithm"] == force and p["knobs"][KNOB] == 1 and not p["benchmarked"]
    value = hdr[f"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_{force}"]
    sizes = [r["size"] for r in calls(b["log"], WS) if r["algo"] == value and r["status"] == 0]
    memory = dict(_listed(hdr, case))[force]
    assert p["workspace_size"] == max(sizes + [memory]) > 0


def test_forcing_fft_where_cudnn_lists_none_declines_naming_the_list(fake_gpu, hdr):
    r = fake_gpu.call(_wgrad_fft_scenarios.wgrad_fft_case, 2)
    assert r["violations"] == 0 and r["restored"]
    builds = r["builds"]
    listed = [n for n, _ in _listed(hdr, builds)]
    assert not FFTS & set(listed), f"the fake lists no FFT for stride 2: {listed}"
    for force in sorted(FFTS):
        b = builds[f"force {force}"]
        assert isinstance(b["error"], hd.NotSupportedError), b.get("mro")
        assert f"{force} not in cuDNN's list" in b["message"]
        assert ", ".join(listed) in b["message"], (b["message"], listed)
    fb = builds["fft bench"]
    assert fb["error"] is None and fb["plan"]["knobs"][KNOB] == 1
    assert not {n for n, _ in fb["plan"]["trials"]} & FFTS
