"""Per-binding CUDA graphs of the cuDNN graph engine (issue 11 item 2), on the fake CUDA
runtime with a GraphPlan over the fake backend API (``_launch_graph_scenarios``): after
``GRAPH_AFTER`` direct executions of a bound variant pack, the next one is captured once
(thread-local mode) and every later one is one ``cudaGraphLaunch``; a capture that fails
at any step leaves the pack on direct executions and runs the work directly (once); ``$HIPDNN_ASYNC_LAUNCH_GRAPHS=0`` turns it off; inside
a ``dev.capture()`` block the execution is direct (recorded), not a graph launch."""
from __future__ import annotations

import pytest

from hipdnn_async.providers.cudnn._graph_plan import GRAPH_AFTER

from . import _launch_graph_scenarios as S
from ._fakes import between, calls, violations
from ._worker import FakeGpuProcess

SUBMITS = 6
# cudaStreamCaptureModeThreadLocal (driver_types.h; the contract ABI test checks our
# constant against the header)
THREAD_LOCAL = 1


def _run(fake_gpu, backend_lib, **kw):
    kw.setdefault("submits", SUBMITS)
    r = fake_gpu.call(S.launch_graph_case, backend_lib, **kw)
    assert not violations(r["log"]), violations(r["log"])
    return r


def _window(r):
    return between(r["log"], "start", "end")


def test_after_graph_after_direct_executions_the_binding_launches_one_captured_graph(
        fake_gpu, backend_lib):
    r = _run(fake_gpu, backend_lib)
    win = _window(r)
    begin = calls(win, "cudaStreamBeginCapture")
    assert len(begin) == 1 and len(calls(win, "cudaStreamEndCapture")) == 1
    assert len(calls(win, "cudaGraphInstantiateWithFlags")) == 1
    # the binding ran once directly before the window (execute_sync), so the window's
    # first GRAPH_AFTER - 1 submissions are direct, the next is captured (recorded, not
    # run) and launched, every later one is a launch
    direct = GRAPH_AFTER - 1
    assert r["executes"] == direct + 1                         # + the captured call
    assert len(calls(win, "cudaGraphLaunch")) == SUBMITS - direct
    assert r["launch"] == [1 + SUBMITS, SUBMITS - direct]      # executions, graph launches
    assert r["plan_stats"] == 1 + SUBMITS
    # the capture is made on a stream of its own, created and destroyed around it, with
    # the handle bound to it meanwhile and then back; the graph launches go to the
    # submissions' stream
    side = begin[0]["stream"]
    made = [c for c in calls(win, "cudaStreamCreateWithFlags") if c["id"] == side]
    assert len(made) == 1 and made[0]["seq"] < begin[0]["seq"]
    assert [c["seq"] > begin[0]["seq"] for c in calls(win, "cudaStreamDestroy")
            if c["stream"] == side] == [True]
    launched_on = {c["stream"] for c in calls(win, "cudaGraphLaunch")}
    assert len(launched_on) == 1 and side not in launched_on
    sets = [e for e in r["streams"] if e[0] == 1]
    handle, side_handle = sets[0][1], made[0]["handle"]
    assert sets == [[1, handle, side_handle], [1, handle, sets[1][2]]], r["streams"]
    assert sets[1][2] not in (0, side_handle)
    # the captured execution ran with the handle bound to the side stream
    assert [e for e in r["streams"] if e[0] == 2][-1] == [2, handle, side_handle]


@pytest.mark.parametrize("fn", ["cudaStreamCreateWithFlags", "cudaStreamBeginCapture",
                                "cudaStreamEndCapture", "cudaGraphInstantiateWithFlags",
                                "cudaGraphLaunch"])
def test_a_failed_capture_runs_the_work_directly_and_stays_direct(fake_gpu, backend_lib, fn):
    r = _run(fake_gpu, backend_lib, inject=(fn, 900))   # cudaErrorStreamCaptureUnsupported
    win = _window(r)
    early = fn in ("cudaStreamCreateWithFlags", "cudaStreamBeginCapture")
    captured = 0 if early else 1
    # every submission ran directly once (the failed capture's recorded call did not run)
    assert r["executes"] == SUBMITS + captured
    assert r["launch"] == [1 + SUBMITS, 0]
    # never tried again
    assert len(calls(win, "cudaStreamCreateWithFlags")) == 1
    assert len(calls(win, "cudaStreamBeginCapture")) == (fn != "cudaStreamCreateWithFlags")
    assert len(calls(win, "cudaGraphLaunch")) == (1 if fn == "cudaGraphLaunch" else 0)
    # the side stream is destroyed, and the handle bound back to the launching stream
    assert len(calls(win, "cudaStreamDestroy")) == (fn != "cudaStreamCreateWithFlags")
    sets = [e for e in r["streams"] if e[0] == 1]
    assert len(sets) == (0 if fn == "cudaStreamCreateWithFlags" else 2)
    if not early:
        # what was made is released: the captured graph (for a failed end, the one its
        # second end made: the fake's failed end leaves the capture open, as a CUDA end
        # that fails without invalidation may) and an instantiated one whose launch failed
        assert len(calls(win, "cudaGraphDestroy")) == 1
        assert len(calls(win, "cudaGraphExecDestroy")) == (fn == "cudaGraphLaunch")
    assert r["plan_stats"] == 1 + SUBMITS


def test_the_environment_variable_turns_graph_launches_off(fake_gpu, backend_lib):
    r = _run(fake_gpu, backend_lib, env_off=True)
    win = _window(r)
    assert r["executes"] == SUBMITS and r["launch"] == [1 + SUBMITS, 0]
    assert not calls(win, "cudaStreamBeginCapture") and not calls(win, "cudaGraphLaunch")


def test_inside_a_capture_block_the_execution_is_recorded_directly(fake_gpu, backend_lib):
    r = _run(fake_gpu, backend_lib, step=True)
    rec = between(r["log"], "capture", "replay")
    # the step's capture: one begin (the step's own), the plan's call recorded directly
    # (no graph launch inside the capture), then one replay = one graph launch
    assert len(calls(rec, "cudaStreamBeginCapture")) == 1
    assert not calls(rec, "cudaGraphLaunch")
    assert r["step_executes"] == 1
    assert len(calls(between(r["log"], "replay", "replayed"), "cudaGraphLaunch")) == 1


def test_submissions_alternating_between_streams_get_a_graph_on_each(fake_gpu, backend_lib):
    # a device's default pick goes round robin between idle streams: each stream keeps
    # its own pack and captures its own graph once, and later launches on either reuse it
    r = _run(fake_gpu, backend_lib, streams=2, submits=10)
    win = _window(r)
    executions, graph_launches = r["launch"]
    assert executions == 1 + 10
    assert len(calls(win, "cudaStreamBeginCapture")) == 2          # one per stream
    assert len(calls(win, "cudaGraphInstantiateWithFlags")) == 2
    assert len(calls(win, "cudaGraphLaunch")) == graph_launches >= 10 - 2 * GRAPH_AFTER
    assert r["executes"] == executions - 1 - graph_launches + 2     # direct + 2 captured


def test_a_launch_collected_in_a_reference_cycle_destroys_its_graphs(fake_gpu, backend_lib):
    # the cyclic GC may clear a pack (its Python fields: the runtime) before the pack is
    # deallocated; the pack must still destroy its executable graph then
    r = fake_gpu.call(S.collected_in_a_cycle_case, backend_lib)
    assert r["instantiated"] == 1 and r["packs_freed"] == 2, r
    assert r["destroyed"] == r["instantiated"], r


def test_copies_on_another_thread_during_a_capture_are_not_disturbed(fake_gpu, backend_lib):
    # a copy orders the copy stream after every compute stream (an event recorded on each,
    # from the copying thread); the capture of a binding on one of them must neither take
    # that record into its graph nor fail the copy, and the binding still gets its graph
    r = fake_gpu.call(S.copy_during_capture_case, backend_lib)
    assert not r["copy_errors"], r["copy_errors"]
    assert not violations(r["log"]), violations(r["log"])
    assert r["copies"] > 0 and r["copied_ok"]
    assert r["graph_launches"] == 5 - (GRAPH_AFTER - 1), r["graph_launches"]


@pytest.mark.parametrize("fail,call,status,kind", [
    ("execute", "cudnnBackendExecute", 5000, "CudnnError"),   # CUDNN_STATUS_EXECUTION_FAILED
    ("graph_launch", "cudaGraphLaunch", 719, "GpuError"),     # cudaErrorLaunchFailure
])
def test_a_steady_state_failure_names_the_plan_and_the_call(fake_gpu, backend_lib, fail, call,
                                                            status, kind):
    r = fake_gpu.call(S.steady_state_failure_case, backend_lib, fail)
    assert not violations(r["log"]), violations(r["log"])
    # the fake device's plan is built by the legacy engine (the fake libcudnn has no
    # backend API), then given a GraphPlan over the fake backend: its label says so
    assert r["label"] == "plan CONV_FPROP (graph 'conv1', engine CUDNN_LEGACY_ENGINE)"
    assert r["error"] is not None, "the injected failure did not reach the submission"
    got_kind, message, got_status, got_call, cause = r["error"]
    # "plan CONV_FPROP (graph 'conv1', ...): cudaGraphLaunch failed: cudaErrorLaunchFailure
    # (719): ...": the plan, then the failing call and its status
    assert message.startswith(f"{r['label']}: {call} failed: "), message
    assert f"({status})" in message, message
    # the vendor error's type and fields are kept; the unnamed one is its cause
    assert (got_kind, got_status, got_call, cause) == (kind, status, call, kind), r["error"]
    win = _window(r)
    assert not calls(win, "cudaStreamBeginCapture"), "a steady-state failure is no capture"
    if fail == "graph_launch":
        # captured and launched before; the failure is the one launch of the window
        assert r["graph_launches"] == 2 and len(calls(win, "cudaGraphLaunch")) == 1
    # the binding goes on: the next submission runs (execute_sync, [3 submissions,] the
    # failed one not counted, the next one)
    assert r["after"] == (2 if fail == "execute" else 5)


@pytest.fixture(scope="module")
def two_gpus(fake_libs, tmp_path_factory):
    env = fake_libs.env()
    env["HIPDNN_ASYNC_PERFDB"] = str(tmp_path_factory.mktemp("perfdb") / "perfdb.sqlite3")
    env["HIPDNN_ASYNC_FAKE_DEVICES"] = "2"
    proc = FakeGpuProcess(env)
    yield proc
    proc.close()


def test_a_binding_of_the_second_device_captures_and_launches_there(two_gpus, backend_lib):
    # the submitting thread has device 0 current: the side stream, the capture and every
    # graph launch are on device 1 (the fake counts a launch on a stream of another device
    # than the current one as a violation)
    r = _run(two_gpus, backend_lib, spec="cuda:1")
    win = _window(r)
    assert r["launch"][1] == SUBMITS - (GRAPH_AFTER - 1)
    assert len(calls(win, "cudaGraphLaunch")) == SUBMITS - (GRAPH_AFTER - 1)
    side = calls(win, "cudaStreamBeginCapture")[0]["stream"]
    assert [c["device"] for c in calls(win, "cudaStreamCreateWithFlags")
            if c["id"] == side] == [1]


def test_a_launch_calls_nothing_in_the_provider(fake_gpu, backend_lib):
    # issue 23: what a launch needs is resolved before it is handed down; the runtime's
    # GraphLaunch completes its pack per stream from the stream's resources and calls
    # no provider code back (a resolve closure in providers/cudnn/_graph_plan.py did)
    r = fake_gpu.call(S.launch_frames_case, backend_lib, streams=3, submits=6)
    assert r["launch"] == 7
    assert r["frames"], "the profiler saw no launch (the check would pass vacuously)"
    assert [f for f in r["frames"] if f.startswith("providers")] == [], r["frames"]


def test_a_stream_open_calls_nothing_in_the_provider(fake_gpu):
    # issue 23: the runtime creates what a stream needs (its DNN handle, its workspace)
    # from what the provider declared as data; opening a stream, or growing every
    # stream's workspace at build, enters no provider code from runtime or queue code
    # (provider callbacks registered on the GpuContext did)
    r = fake_gpu.call(S.stream_open_frames_case, streams=3)
    assert r["opened"] == 5
    assert r["runtime_frames"], "the profiler saw no runtime code (a vacuous pass)"
    assert r["upcalls"] == [], r["upcalls"]
