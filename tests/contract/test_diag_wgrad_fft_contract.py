"""bench/diag_wgrad_fft.py's configs on the legacy engine (fake cuDNN): by default a FLOAT
weight gradient offers ``cudnn_legacy.allow_fft`` at 1 and its benchmark times FFT and
FFT_TILING beside the direct algorithms; with the knob at 0 it times none of them; a
forced build (the accepted-list wrapper) runs exactly the forced algorithm with the
workspace cuDNN reported for it; where cuDNN lists no FFT (stride 2) the forced build
declines naming the list; every plan passes the script's own checks and the wrapper is
gone afterwards. Expected names and sizes come from the fake's own answers in the log
(its heuristic list, its workspace sizes), never from the provider's code."""
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
LEGACY = "CUDNN_LEGACY_ENGINE"


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


def _ok(b):
    assert b["error"] is None, b.get("message")
    assert b["check"] is None, b["check"]        # the script's own plan check passed
    return b["plan"]


def test_every_config_builds_and_passes_the_scripts_checks(case):
    assert set(case) == {"default", "default bench", "FFT declined", "FFT declined bench",
                         "force FFT", "force FFT_TILING"}
    for label, b in case.items():
        p = _ok(b)
        assert p["engine"] == LEGACY, (label, p["engine"])      # first for FLOAT wgrad
        assert b["seen"], f"{label}: the wrapper saw no policy call"


def test_default_benchmark_times_fft_beside_the_direct_algorithms(case, hdr):
    listed = _listed(hdr, case)
    assert FFTS <= {n for n, _ in listed}, f"the fake lists FFT for this problem: {listed}"
    b = case["default bench"]
    p = _ok(b)
    assert p["knobs"][KNOB] == 1 and p["benchmarked"]
    assert [n for n, _ in p["trials"]] == [n for n, _ in listed if n not in WINOGRADS]
    assert calls(b["log"], FIND), "cudnnFind not called"
    assert [n for n, _ in b["seen"][-1]] == [n for n, _ in listed]


def test_fft_declined_benchmark_times_only_direct_algorithms(case, hdr):
    listed = _listed(hdr, case)
    p = _ok(case["FFT declined bench"])
    assert p["knobs"][KNOB] == 0 and p["benchmarked"]
    assert [n for n, _ in p["trials"]] == [n for n, _ in listed
                                           if n not in WINOGRADS | FFTS]
    assert case["FFT declined"]["plan"]["algorithm"] not in FFTS


@pytest.mark.parametrize("force", sorted(FFTS))
def test_forced_build_runs_that_algorithm_with_its_workspace(case, hdr, force):
    b = case[f"force {force}"]
    p = _ok(b)
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
    p = _ok(builds["default bench"])
    assert p["knobs"][KNOB] == 1 and not {n for n, _ in p["trials"]} & FFTS
