"""The MIOpen provider's knobs, perf db, error mapping and asynchrony on the fake MIOpen of
each header set.

- ``global.workspace_size_limit``: offered for the single-node convolutions with the range
  [min, max] of MIOpen's solutions for the problem, default max, enforced when choosing;
  below the minimum a ``KnobError`` at build.
- ``global.benchmarking``: MIOpen's exhaustive Find 2.0 search (tuning on, the workspace
  limit in force) once per problem, its winner run and recorded in our perf db keyed by
  gcnArchName, compute units, MIOpen and HIP versions: a new process builds without
  searching; another device architecture searches again. For batchnorm, the tuning
  policy Search around the build's trial run where MIOpen has it (3.5).
- MIOpen statuses become typed errors naming the call: at build BadParm / NotImplemented
  decline (NotSupportedError), others propagate; at run time the awaiting task gets the
  error with its status, and the stream keeps working. A fault reported by the
  completion event (hipEventSynchronize) reaches the task as a GpuError.
- Cancelling the awaiting task returns at once; the execution still completes into its
  output, its buffers kept alive by the queue until then.
"""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async import _errors

from .. import _scenarios
from .._fakes import between, calls, violations
from .._worker import FakeGpuProcess
from . import _scenarios_rocm as sc
from ._expect_rocm import NEWER

WS = "global.workspace_size_limit"
BENCH = "global.benchmarking"
_NAMES = {"fprop": "Forward", "dgrad": "BackwardData", "wgrad": "BackwardWeights"}


def _solutions(log, kind):
    listed = calls(log, f"miopenConvolution{_NAMES[kind]}GetSolution")
    assert listed and listed[-1]["status"] == 0, listed
    return listed[-1]["solutions"]


# ---------------------------------------------------------------------- workspace limit
@pytest.mark.parametrize("kind", ["fprop", "dgrad", "wgrad"])
def test_workspace_knob_range_is_that_of_miopens_solutions(fake_rocm, kind):
    facts = fake_rocm.call(sc.engine_knobs, kind)
    (name, knobs), = facts["engines"]
    assert name == "MIOPEN_ENGINE"
    by_id = {k[0]: k[1:] for k in knobs}
    assert by_id[BENCH] == (0, 0, 1)
    sizes = [s["workspace"] for s in _solutions(facts["log"], kind)]
    assert by_id[WS] == (max(sizes), min(sizes), max(sizes))


@pytest.mark.parametrize("kind", ["fprop", "wgrad"])
def test_workspace_limit_is_enforced_when_choosing(fake_rocm, kind):
    case = fake_rocm.call(sc.knob_build, kind, {WS: 0})
    assert "error" not in case, case.get("error")
    sols = _solutions(between(case["log"], "build", "exec0"), kind)
    fit = [s for s in sols if s["workspace"] <= 0]
    assert case["plan"]["algorithm"].startswith(f"solver {fit[0]['id']} ")
    run = calls(case["log"], f"miopenConvolution{_NAMES[kind]}Immediate")
    assert run and all(r["solution_id"] == fit[0]["id"] and r["workSpaceSize"] == 0 for r in run)
    np.testing.assert_allclose(case["out"], case["want"], rtol=1e-4, atol=1e-4)


def test_limit_below_the_smallest_solution_is_a_knob_error(rocm, tmp_path):
    # without MIOpen's naive solvers every solution needs a workspace: the range starts > 0
    env = {**rocm.env(), "HIPDNN_ASYNC_FAKE_MIOPEN_NO_NAIVE": "1",
           "HIPDNN_ASYNC_PERFDB": str(tmp_path / "perfdb.sqlite3")}
    proc = FakeGpuProcess(env)
    try:
        facts = proc.call(sc.engine_knobs, "fprop")
        lo, hi = next(k[2:] for k in facts["engines"][0][1] if k[0] == WS)
        assert 0 < lo <= hi
        below = proc.call(sc.knob_build, "fprop", {WS: lo - 1})
        assert isinstance(below["error"], hd.KnobError), below["error"]
        assert WS in str(below["error"])
        at_min = proc.call(sc.knob_build, "fprop", {WS: lo})
        assert at_min["plan"]["workspace_size"] == lo
        np.testing.assert_allclose(at_min["out"], at_min["want"], rtol=1e-4, atol=1e-4)
    finally:
        proc.close()


# ---------------------------------------------------------------------- benchmarking
def test_benchmarking_searches_once_and_is_remembered_across_processes(rocm, tmp_path):
    env = {**rocm.env(), "HIPDNN_ASYNC_PERFDB": str(tmp_path / "perfdb.sqlite3"),
           "MIOPEN_USER_DB_PATH": str(tmp_path / "miopen")}
    first = FakeGpuProcess(env)
    try:
        a = first.call(sc.knob_build, "fprop", {BENCH: 1})
    finally:
        first.close()
    build = between(a["log"], "build", "exec0")
    finds = calls(build, "miopenFindSolutions")
    assert len(finds) == 1 and finds[0]["tuning"] == 1
    assert [r["value"] for r in calls(build, "miopenSetFindOptionTuning")] == [1]
    sols = _solutions(build, "fprop")
    assert finds[0]["workspace_limit"] == max(s["workspace"] for s in sols)
    winner = finds[0]["solutions"][0]["solver"]
    assert winner != sols[0]["id"], "the fake's tuned order differs from its heuristic one"
    assert a["plan"]["benchmarked"] and not a["plan"]["perfdb_hit"]
    assert a["plan"]["algorithm"].startswith(f"solver {winner} ")
    assert all(r["solution_id"] == winner for r in calls(a["log"], "miopenConvolutionForwardImmediate"))
    np.testing.assert_allclose(a["out"], a["want"], rtol=1e-4, atol=1e-4)
    # a new process: the perf db answers, MIOpen searches nothing
    second = FakeGpuProcess(env)
    try:
        b = second.call(sc.knob_build, "fprop", {BENCH: 1})
    finally:
        second.close()
    assert not calls(b["log"], "miopenFindSolutions")
    assert b["plan"]["perfdb_hit"] and not b["plan"]["benchmarked"]
    assert b["plan"]["algorithm"] == a["plan"]["algorithm"]
    # another architecture (gcnArchName and compute units in the key) searches again
    other = FakeGpuProcess({**env, "HIPDNN_ASYNC_FAKE_HIP_ARCH": "gfx942:sramecc+:xnack-",
                            "HIPDNN_ASYNC_FAKE_HIP_CU": "304"})
    try:
        c = other.call(sc.knob_build, "fprop", {BENCH: 1})
    finally:
        other.close()
    assert len(calls(c["log"], "miopenFindSolutions")) == 1 and c["plan"]["benchmarked"]


def test_benchmarking_searches_within_the_workspace_limit(fake_rocm):
    case = fake_rocm.call(sc.knob_build, "fprop", {BENCH: 1, WS: 0})
    finds = calls(case["log"], "miopenFindSolutions")
    assert finds[0]["workspace_limit"] == 0
    assert all(r["workSpaceSize"] == 0 for r in calls(case["log"], "miopenConvolutionForwardImmediate"))


def test_batchnorm_benchmarking_is_the_tuning_policy(fake_rocm):
    case = fake_rocm.call(_scenarios.pattern_case, "BN_TRAINING", "float32", "NCHW", spec="hip:0",
                          knobs={BENCH: 1})
    build = between(case["log"], "build", "stage")
    policies = [r["policy"] for r in calls(build, "miopenSetTuningPolicy")]
    if fake_rocm.rocm.miopen_version >= NEWER:
        got = calls(build, "miopenGetTuningPolicy")[0]["policy"]
        assert policies == [3, got], policies          # Search for the trial, then restored
        assert case["plan"]["benchmarked"]
    else:
        assert policies == [] and not case["plan"]["benchmarked"]
    assert not calls(between(case["log"], "exec0", "read"), "miopenSetTuningPolicy")


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("status,declines", [(3, True), (6, True), (4, False)],
                         ids=["BadParm", "NotImplemented", "AllocFailed"])
def test_build_errors_decline_or_propagate(fake_rocm, status, declines):
    case = fake_rocm.call(sc.build_error, "fprop", "miopenConvolutionForwardGetSolution", status)
    err = case["error"]
    assert isinstance(err, hd.HipdnnError), err
    assert isinstance(err, hd.NotSupportedError) == declines, (type(err), err)
    cause = err if isinstance(err, _errors.MiopenError) else err.__cause__
    if declines and not isinstance(err, _errors.MiopenError):
        # Device.build: every engine declined; the reason names the call and status
        assert "miopenConvolutionForwardGetSolution" in str(err)
    else:
        assert isinstance(cause, _errors.MiopenError)
        assert cause.call == "miopenConvolutionForwardGetSolution" and cause.status == status
    assert case["again"]["provider"] == "miopen"     # the device still builds


@pytest.mark.parametrize("status,kind", [(5, _errors.MiopenError), (3, _errors.MiopenBadParamError)],
                         ids=["InternalError", "BadParm"])
def test_run_time_errors_reach_the_execution_and_the_stream_goes_on(fake_rocm, status, kind):
    case = fake_rocm.call(sc.exec_error, "miopenConvolutionForwardImmediate", status)
    err = case["error"]
    assert type(err) is kind and isinstance(err, hd.ExecutionError), (type(err), err)
    assert not isinstance(err, hd.NotSupportedError)
    assert err.call == "miopenConvolutionForwardImmediate" and err.status == status
    assert err.library.endswith("libMIOpen.so.1")
    np.testing.assert_allclose(case["out"], case["want"], rtol=1e-4, atol=1e-4)


def test_a_fault_reported_by_the_completion_event_is_a_gpu_error(fake_rocm):
    case = fake_rocm.call(sc.async_fault)
    err = case["error"]
    assert isinstance(err, _errors.GpuError) and isinstance(err, hd.ExecutionError), err
    assert err.status == 719 and err.status_name == "hipErrorLaunchFailure"
    np.testing.assert_allclose(case["out"], case["want"], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------- asynchrony
def test_cancelling_the_awaiting_task_keeps_the_execution_alive(fake_rocm):
    case = fake_rocm.call(sc.cancelled_execution, 100000)
    assert case["returned_s"] < 0.08, case["returned_s"]     # the kernel takes 100 ms
    assert not violations(case["log"]), violations(case["log"])
    np.testing.assert_allclose(case["out"], case["want"], rtol=1e-4, atol=1e-4)
    # nothing the execution used was freed before its kernel ran
    ran = [r for r in case["log"] if r["rec"] == "exec" and r["fn"] == "miopenConvolutionForwardImmediate"]
    assert ran
    freed = [r for r in between(case["log"], "exec0", "read") if r["fn"] in ("hipFree", "hipFreeAsync")
             and r["seq"] < ran[-1]["seq"]]
    assert not freed, freed


def test_every_stream_has_its_handle_and_compiled_solution(fake_rocm):
    case = fake_rocm.call(sc.streams_case, 3, 6)
    log = case["log"]
    assert not violations(log), violations(log)
    for out in case["outs"]:
        np.testing.assert_allclose(out, case["want"], rtol=1e-4, atol=1e-4)
    handles = {r["handle"]: r["stream"] for r in calls(log, "miopenCreateWithStream")}
    run = calls(between(log, "exec0", "read"), "miopenConvolutionForwardImmediate")
    used = {r["handle"] for r in run}
    assert len(used) == 3, used                     # one handle per stream
    assert len({handles[h] for h in used}) == 3     # each bound to its own stream
    compiled = {r["handle"] for r in calls(between(log, "build", "exec0"),
                                           "miopenConvolutionForwardCompileSolution")}
    assert used <= compiled


def test_streams_opened_after_a_build_get_its_compiled_solution_and_call_no_provider(
        fake_rocm):
    # issue 23: the plan's per-handle compile is declared as data (a HandleWork) and the
    # runtime runs it on streams opened after the build, entering no provider code
    from .. import _launch_graph_scenarios as lg
    case = fake_rocm.call(lg.stream_open_frames_case, streams=3, spec="hip:0")
    log = case["log"]
    assert not violations(log), violations(log)
    assert case["opened"] == 5 and case["runtime_frames"]
    assert case["upcalls"] == [], case["upcalls"]
    late = between(log, "late")
    made = {r["handle"] for r in calls(late, "miopenCreateWithStream")}
    compiled = {r["handle"] for r in calls(late, "miopenConvolutionForwardCompileSolution")}
    assert len(made) == 2 and made <= compiled, (made, compiled)


# ---------------------------------------------------------------------- devices
def test_hip_device_facts(fake_rocm):
    facts = fake_rocm.call(sc.device_facts)
    assert "hip:0" in facts["devices"] and facts["spec"] == "hip:0"
    assert facts["describe"]["device"].startswith("gfx90a:sramecc+:xnack- (104 CUs")
    v = ".".join(map(str, fake_rocm.rocm.miopen_version))
    assert facts["describe"]["library_versions"].startswith(f"MIOpen {v}; HIP runtime ")
    assert facts["gpu_provider"] == "miopen"        # "gpu:0" is the HIP device here


def test_lower_clip_needs_clamp(fake_rocm):
    case = fake_rocm.call(sc.lower_clip_build, "bfloat16")
    if fake_rocm.rocm.miopen_version >= NEWER:
        assert case["error"] is None and "CLAMP" in case["plan"]["algorithm"]
    else:
        err = case["error"]
        assert isinstance(err, hd.NotSupportedError)
        assert "relu_lower_clip" in str(err) and "miopenActivationCLAMP" in str(err)


def test_missing_miopen_is_a_device_error_naming_the_library(rocm, tmp_path):
    env = {**rocm.env(), "HIPDNN_ASYNC_MIOPEN": str(tmp_path / "libMIOpen.so.1")}
    proc = FakeGpuProcess(env)
    try:
        err = proc.call(_device_error)
    finally:
        proc.close()
    assert isinstance(err, hd.DeviceError)
    assert "HIPDNN_ASYNC_MIOPEN" in str(err) and "libMIOpen.so.1" in str(err)


def _device_error():
    try:
        hd.Device("hip:0")
    except hd.DeviceError as exc:
        return exc
    return None


def test_hip_without_rocm_is_a_device_error_naming_the_libraries():
    from hipdnn_async.runtime import load_vendor
    if load_vendor("hip").ok:
        pytest.skip("a HIP runtime and MIOpen are installed on this machine")
    with pytest.raises(hd.DeviceError) as info:
        hd.Device("hip:0")
    text = str(info.value)
    assert "hip:0" in text and "libamdhip64.so" in text, text


def test_miopen_on_another_hip_runtime_is_a_device_error(tmp_path):
    """The ROCm 6.4 fake runtime (libamdhip64.so.6) loaded, and the MIOpen 3.5.1 fake, which
    links libamdhip64.so.7: two HIP runtimes in one process, refused by name."""
    from . import _debian
    from .. import _headers
    from ._build_rocm import build_rocm
    try:
        libs = [build_rocm(src, *_headers.ensure(src)) for src in _debian.ROCM_SOURCES]
    except _headers.HeadersUnavailable as exc:
        pytest.skip(f"ROCm headers unavailable: {exc}")
    old, new = sorted(libs, key=lambda lib: lib.miopen_version)
    proc = FakeGpuProcess({"HIPDNN_ASYNC_HIP_RUNTIME": old.hip, "HIPDNN_ASYNC_MIOPEN": new.miopen,
                           "HIPDNN_ASYNC_PERFDB": str(tmp_path / "perfdb.sqlite3")})
    try:
        err = proc.call(_device_error)
    finally:
        proc.close()
    assert isinstance(err, hd.DeviceError), err
    assert "two HIP runtimes" in str(err) and "libamdhip64.so.6" in str(err), err
