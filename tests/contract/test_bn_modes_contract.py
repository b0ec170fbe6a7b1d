"""The legacy cuDNN engine's batchnorm call forms on the fake cuDNN (providers/cudnn/
_provider.py ``_bn_mode``): channels-last training and backward run only the Ex calls,
and where cuDNN refuses them the engine declines rather than fall back to the plain calls
(20-60x slower there); other layouts run SPATIAL_PERSISTENT, SPATIAL with the knob
``cudnn_legacy.bn_persistent`` = 0 or where cuDNN refuses PERSISTENT at the trial run.
The default call sequences and arguments: test_patterns_contract.py."""
from __future__ import annotations

import pytest

import hipdnn_async as hd

from . import _scenarios
from ._expect import assert_results
from ._fakes import between, calls, violations

KNOB = "cudnn_legacy.bn_persistent"
PLAIN = {"BN_TRAINING": "cudnnBatchNormalizationForwardTraining",
         "BN_BACKWARD": "cudnnBatchNormalizationBackward"}
EX = {"BN_TRAINING": "cudnnBatchNormalizationForwardTrainingEx",
      "BN_BACKWARD": "cudnnBatchNormalizationBackwardEx"}


@pytest.mark.parametrize("pattern", ["BN_TRAINING", "BN_BACKWARD"])
def test_nchw_knob_0_runs_spatial(fake_gpu, hdr, pattern):
    case = fake_gpu.call(_scenarios.pattern_case, pattern, "float32", "NCHW", knobs={KNOB: 0})
    assert not violations(case["log"]), violations(case["log"])
    assert case["plan"]["algorithm"] == "SPATIAL" and case["plan"]["knobs"][KNOB] == 0
    # the reason says why: the knob, not a refusal of SPATIAL_PERSISTENT (never tried)
    assert KNOB in case["plan"]["reason"], case["plan"]["reason"]
    for i in range(2):
        run = between(case["log"], f"exec{i}", f"exec{i + 1}" if i == 0 else "read")
        r = calls(run, PLAIN[pattern])
        assert len(r) == 1 and r[0]["mode"] == hdr.CUDNN_BATCHNORM_SPATIAL, r
    assert_results(case)


@pytest.mark.parametrize("pattern", ["BN_TRAINING", "BN_BACKWARD"])
def test_nchw_persistent_refused_at_the_trial_runs_spatial(fake_gpu, hdr, pattern):
    r = fake_gpu.call(_scenarios.error_case, pattern, "float32", "NCHW",
                      inject=[(PLAIN[pattern], hdr.CUDNN_STATUS_NOT_SUPPORTED, 1, 1)])
    assert not violations(r["log"]), violations(r["log"])
    assert r["error"] is None, r.get("message")
    assert r["plan"]["algorithm"] == "SPATIAL"
    build = between(r["log"], "build", "exec0")
    trials = calls(build, PLAIN[pattern])
    assert [(t["mode"], t["status"]) for t in trials] == [
        (hdr.CUDNN_BATCHNORM_SPATIAL_PERSISTENT, hdr.CUDNN_STATUS_NOT_SUPPORTED),
        (hdr.CUDNN_BATCHNORM_SPATIAL, 0)][:len(trials)]
    run = calls(between(r["log"], "exec0", "read"), PLAIN[pattern])
    assert run and all(c["mode"] == hdr.CUDNN_BATCHNORM_SPATIAL for c in run), run
    assert_results(dict(r, plan=r["plan"]))


@pytest.mark.parametrize("pattern", ["BN_TRAINING", "BN_BACKWARD"])
def test_channels_last_ex_refused_is_a_decline_never_the_plain_call(fake_gpu, hdr, pattern):
    r = fake_gpu.call(_scenarios.error_case, pattern, "float16", "NHWC", then_run=False,
                      inject=[(EX[pattern], hdr.CUDNN_STATUS_NOT_SUPPORTED, 1, 99)])
    assert not violations(r["log"]), violations(r["log"])
    assert isinstance(r["error"], hd.NotSupportedError), r.get("mro")
    assert "CUDNN_LEGACY_ENGINE" in r["message"] and "SPATIAL_PERSISTENT" in r["message"]
    assert "channels-last" in r["message"], r["message"]
    assert calls(r["log"], EX[pattern]), "the Ex call was never tried"
    assert calls(r["log"], PLAIN[pattern]) == [], "the plain call ran on channels-last data"


def test_channels_last_backward_asking_for_a_reserve_space_is_declined(fake_gpu):
    r = fake_gpu.call(_scenarios.bn_backward_reserve_case)
    assert not violations(r["log"]), violations(r["log"])
    assert isinstance(r["error"], hd.NotSupportedError), r.get("mro")
    assert "128-byte reserve space" in r["message"] and "BN_BACKWARD" in r["message"]
    assert calls(r["log"], "cudnnBatchNormalizationBackwardEx") == []
    assert calls(r["log"], "cudnnBatchNormalizationBackward") == []


def test_nchw_benchmarking_times_both_modes_and_the_perf_db_keeps_the_winner(fake_gpu, hdr):
    r = fake_gpu.call(_scenarios.knob_case, "bn_backward", {"global.benchmarking": 1}, builds=2,
                      fresh_perfdb=True)
    first, second = r["builds"]
    assert first["error"] is None and second["error"] is None, (first, second)
    p1, p2 = first["plan"], second["plan"]
    assert p1["engine"] == "CUDNN_LEGACY_ENGINE" and p1["benchmarked"] and not p1["perfdb_hit"]
    # both modes ran their trial and were timed, heuristic order first
    assert [name for name, _ in p1["trials"]] == ["SPATIAL_PERSISTENT", "SPATIAL"]
    assert all(ms is not None and ms >= 0 for _, ms in p1["trials"])
    assert p1["algorithm"] in ("SPATIAL_PERSISTENT", "SPATIAL")
    modes = {c["mode"] for c in calls(first["log"], "cudnnBatchNormalizationBackward")}
    assert modes == {hdr.CUDNN_BATCHNORM_SPATIAL_PERSISTENT, hdr.CUDNN_BATCHNORM_SPATIAL}
    # each mode timed as launches of a captured graph of its executions (_trial.time_runs)
    assert len(calls(first["log"], "cudaStreamBeginCapture")) == 2
    assert len(calls(first["log"], "cudaGraphLaunch")) == 2 * (1 + 7)   # upload + 7 samples
    # a new Device takes the stored winner: no timing events, the same mode
    assert p2["perfdb_hit"] and not p2["benchmarked"] and p2["algorithm"] == p1["algorithm"]
    assert calls(second["log"], "cudaEventElapsedTime") == []
    assert ("CUDNN_LEGACY_ENGINE", ) in {(e,) for e, _, a in r["perfdb"] if a == p1["algorithm"]}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("pattern", ["BN_TRAINING", "BN_BACKWARD", "BN_INFERENCE_DRELU_BACKWARD"])
@pytest.mark.parametrize("status_name", ["CUDNN_STATUS_EXECUTION_FAILED",
                                         "CUDNN_STATUS_INTERNAL_ERROR"])
def test_a_failure_at_the_trial_run_is_an_execution_error_not_a_cached_decline(
        fake_gpu, hdr, pattern, layout, status_name):
    """Only NOT_SUPPORTED / BAD_PARAM mean "cuDNN refuses this mode" (as for the
    convolutions' trial runs, test_errors_contract.py): an execution failure or internal
    error of the batchnorm call at the build's trial run is the ExecutionError it is, not
    a NotSupportedError ("cuDNN refused ...") that the plan cache keeps as a decline, so
    the next build of the graph on that Device runs."""
    fn = (EX if layout == "NHWC" else PLAIN)[pattern.replace("INFERENCE_DRELU_", "")]
    r = fake_gpu.call(_scenarios.bn_rebuild_case, pattern, layout,
                      inject=[(fn, hdr[status_name], 1, 99)])
    assert not violations(r["log"]), violations(r["log"])
    first, second = r["first"], r["second"]
    assert isinstance(first["error"], hd.ExecutionError), first.get("mro")
    assert not isinstance(first["error"], hd.NotSupportedError), first["message"]
    assert status_name in first["message"] and fn in first["message"], first["message"]
    assert second["error"] is None, second.get("message")
    assert second["plan"]["engine"] == "CUDNN_LEGACY_ENGINE"


def test_a_perf_db_choice_refused_now_is_not_reported_as_the_perf_db_choice(fake_gpu, hdr):
    """The perf db holds a mode that the trial run of a later build refuses (a new cuDNN,
    another driver): that build runs the first mode cuDNN accepts, and plan.algorithm's
    reason and perfdb_hit say so rather than call it the perf db's choice."""
    call = "cudnnBatchNormalizationBackward"
    r = fake_gpu.call(_scenarios.knob_case, "bn_backward", {"global.benchmarking": 1},
                      builds=2, inject=[(1, call, hdr.CUDNN_STATUS_NOT_SUPPORTED, 1, 1)])
    first, second = r["builds"]
    assert first["error"] is None and second["error"] is None, (first, second)
    stored, p2 = first["plan"]["algorithm"], second["plan"]
    refused = [c for c in calls(second["log"], call) if c["status"]]
    assert [c["mode"] for c in refused] == [hdr["CUDNN_BATCHNORM_" + stored]]
    assert not p2["perfdb_hit"] and not p2["benchmarked"], p2
    assert "perf db's benchmarked choice" not in p2["reason"], p2["reason"]
    assert stored in p2["reason"] and "refused" in p2["reason"], p2["reason"]


def test_a_mode_refused_while_timed_is_declined_and_the_other_mode_kept(fake_gpu, hdr):
    """Both modes pass their trial runs, then cuDNN refuses SPATIAL_PERSISTENT at its
    first timed (warm-up) run: the benchmark declines that mode, as a refusal at the
    trial, and keeps SPATIAL (it used to decline the whole build)."""
    call = "cudnnBatchNormalizationBackward"
    # calls 1, 2: the two trial runs; call 3: PERSISTENT's first warm-up run
    r = fake_gpu.call(_scenarios.knob_case, "bn_backward", {"global.benchmarking": 1},
                      inject=[(0, call, hdr.CUDNN_STATUS_NOT_SUPPORTED, 3, 1)],
                      fresh_perfdb=True)
    (first,) = r["builds"]
    assert first["error"] is None, first.get("message")
    p = first["plan"]
    assert p["algorithm"] == "SPATIAL" and p["benchmarked"], p
    assert [name for name, _ in p["trials"]] == ["SPATIAL"]
    assert "refused: SPATIAL_PERSISTENT" in p["reason"], p["reason"]
    refused = [c for c in calls(first["log"], call) if c["status"]]
    assert [c["mode"] for c in refused] == [hdr.CUDNN_BATCHNORM_SPATIAL_PERSISTENT]
    assert [a for e, _, a in r["perfdb"] if e == "CUDNN_LEGACY_ENGINE"] == ["SPATIAL"]


def test_modes_are_timed_alike_when_one_cannot_be_captured(fake_gpu, hdr):
    """SPATIAL's timing capture fails (cudaStreamBeginCapture refused): PERSISTENT, timed
    as graph launches, is timed again by direct launches with SPATIAL, so that neither
    time includes host launch gaps the other does not (_trial.medians_alike)."""
    r = fake_gpu.call(_scenarios.knob_case, "bn_backward", {"global.benchmarking": 1},
                      inject=[(0, "cudaStreamBeginCapture",
                               hdr.cudaErrorStreamCaptureUnsupported, 2, 1)],
                      fresh_perfdb=True)
    (first,) = r["builds"]
    assert first["error"] is None, first.get("message")
    assert [name for name, _ in first["plan"]["trials"]] == ["SPATIAL_PERSISTENT", "SPATIAL"]
    log = first["log"]
    assert len(calls(log, "cudaStreamBeginCapture")) == 2
    launches = calls(log, "cudaGraphLaunch")
    assert len(launches) == 1 + 7          # PERSISTENT's graph only: upload + 7 samples
    # after PERSISTENT's graph samples, both modes run again between timing events
    after = log[log.index(launches[-1]) + 1:]
    modes = [c["mode"] for c in calls(after, "cudnnBatchNormalizationBackward")]
    assert modes.count(hdr.CUDNN_BATCHNORM_SPATIAL_PERSISTENT) >= 7, modes
    assert modes.count(hdr.CUDNN_BATCHNORM_SPATIAL) >= 7, modes
    assert len(calls(after, "cudaEventElapsedTime")) >= 2 * 7
