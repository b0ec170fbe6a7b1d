"""Capture and replay on the fake CUDA runtime (issue 11 item 3): a step is one stream
capture (thread-local mode) of the plans' ordinary calls, instantiated once; a replay is
one cudaGraphLaunch and one completion event and makes no cuDNN call; a recapture with
other buffers updates the executable graph in place; failures end the capture and leave
the stream usable. Results against the float64 oracle.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol, tol

from . import _capture_scenarios as S
from ._fakes import between, calls, dnn_calls, violations


def _thread_local_mode() -> int:
    # our table's value; test_abi checks it against driver_types.h
    from hipdnn_async.runtime import _gpu
    return _gpu.CUDA_CONSTANTS["STREAM_CAPTURE_MODE_THREAD_LOCAL"][0]


def _check_step(inputs, out, x, z="z"):
    """The step's outputs against the oracle of input ``x`` (later stages take the
    library's own rounded outputs as their inputs)."""
    n = S.C * 9
    assert_close(out["y"], R.conv_fprop(inputs[x], inputs["w1"], pre=1, post=1),
                 *reduction_tol("conv_fprop", "float32", n), what="conv1")
    bn = R.bn_training(out["y"], inputs["scale"], inputs["bias"], S.EPS)
    t = tol("bn_training", "float32")
    assert_close(out["r"], R.relu(bn["y"]), *t, what="bn relu")
    assert_close(out["mean"], bn["mean"], *t, what="mean")
    assert_close(out["inv"], bn["inv_variance"], *t, what="inv_variance")
    assert_close(out[z], R.conv_fprop(out["r"], inputs["w2"], pre=1, post=1),
                 *reduction_tol("conv_fprop", "float32", n, 1.0, 4.0), what="conv2")


@pytest.fixture(scope="module")
def step3(fake_gpu):
    r = fake_gpu.call(S.step3_case)
    assert not violations(r["log"]), violations(r["log"])
    return r


def test_capture_is_one_thread_local_stream_capture(step3):
    rec = between(step3["log"], "capture", "captured")
    names = [r["fn"] for r in rec if r["rec"] == "call"]
    begin = calls(rec, "cudaStreamBeginCapture")
    assert len(begin) == 1 and begin[0]["mode"] == _thread_local_mode()
    end = calls(rec, "cudaStreamEndCapture")
    assert len(end) == 1 and end[0]["status"] == 0
    inside = names[names.index("cudaStreamBeginCapture"):names.index("cudaStreamEndCapture")]
    dnn = [n for n in inside if n.startswith("cudnn")]
    assert dnn and all(n in inside for n in ("cudnnConvolutionForward",)), inside
    # nothing but the plans' enqueues inside the capture: no event, sync or allocation
    for bad in ("cudaEventRecord", "cudaStreamSynchronize", "cudaEventSynchronize",
                "cudaMalloc", "cudaMallocAsync", "cudaFree", "cudaFreeAsync", "cudaSetDevice"):
        assert bad not in inside, f"{bad} inside the capture: {inside}"
    assert end[0]["nodes"] >= 3, end[0]
    assert all(r["stream"] == begin[0]["stream"] for r in calls(rec, "cudaStream*Capture"))
    inst = calls(rec, "cudaGraphInstantiateWithFlags")
    assert len(inst) == 1 and inst[0]["graph"] == end[0]["graph"]
    assert [r["graph"] for r in calls(rec, "cudaGraphDestroy")] == [end[0]["graph"]]
    # nothing ran: every output still holds its NaN fill
    assert all(np.isnan(a).all() for a in step3["before"].values())


@pytest.mark.parametrize("i", [0, 1])
def test_a_replay_is_one_graph_launch_and_one_event(step3, i):
    rec = between(step3["log"], f"replay{i}", f"read{i}")
    assert not dnn_calls(rec), [r["fn"] for r in dnn_calls(rec)]
    launch = calls(rec, "cudaGraphLaunch")
    inst = calls(between(step3["log"], "capture", "captured"), "cudaGraphInstantiateWithFlags")
    assert len(launch) == 1 and launch[0]["exec"] == inst[0]["exec"]
    ev = calls(rec, "cudaEventRecord")
    assert len(ev) == 1 and ev[0]["stream"] == launch[0]["stream"] and ev[0]["seq"] > launch[0]["seq"]
    assert not calls(rec, "cudaGraphInstantiate*") and not calls(rec, "cudaStreamBeginCapture")


def test_replays_compute_from_the_captured_buffers(step3):
    _check_step(step3["inputs"], step3["out0"], "x")
    _check_step(step3["inputs"], step3["out1"], "x1")      # the new x copied in
    assert not np.allclose(step3["out0"]["z"], step3["out1"]["z"])


def test_recapture_updates_the_executable_graph_in_place(step3):
    rec = between(step3["log"], "recapture", "replay2")
    upd = calls(rec, "cudaGraphExecUpdate")
    inst = calls(between(step3["log"], "capture", "captured"), "cudaGraphInstantiateWithFlags")
    assert len(upd) == 1 and upd[0]["status"] == 0 and upd[0]["exec"] == inst[0]["exec"]
    assert not calls(rec, "cudaGraphInstantiate*") and not calls(rec, "cudaGraphExecDestroy")
    assert step3["updates"] == 1
    out2 = step3["out2"]
    _check_step(step3["inputs"], out2, "x1", z="z2")
    # the old output buffer is no longer written
    np.testing.assert_array_equal(out2["z"], step3["out1"]["z"])
    launch = calls(between(step3["log"], "replay2", "read2"), "cudaGraphLaunch")
    assert len(launch) == 1 and launch[0]["exec"] == inst[0]["exec"]


def test_close_destroys_the_executable_graph_once(step3):
    inst = calls(between(step3["log"], "capture", "captured"), "cudaGraphInstantiateWithFlags")
    destroyed = calls(between(step3["log"], "close", "end"), "cudaGraphExecDestroy")
    assert [r["exec"] for r in destroyed] == [inst[0]["exec"]]
    assert len(calls(step3["log"], "cudaGraphExecDestroy")) == 1


def test_closing_a_step_with_replays_parked_destroys_its_graph_after_the_last_launch(
        fake_gpu):
    n = 4
    r = fake_gpu.call(S.close_parked_case, n)
    assert not violations(r["log"]), violations(r["log"])
    assert r["parked"] == n - 1, r["parked"]       # one in flight, the rest host-side
    assert r["errors"] == [None] * n, r["errors"]
    log = r["log"]
    launches = [i for i, x in enumerate(log) if x["rec"] == "call"
                and x["fn"] == "cudaGraphLaunch"]
    destroys = [i for i, x in enumerate(log) if x["rec"] == "call"
                and x["fn"] == "cudaGraphExecDestroy"]
    assert len(launches) == n and len({log[i]["exec"] for i in launches}) == 1
    assert len(destroys) == 1 and log[destroys[0]]["exec"] == log[launches[0]]["exec"]
    assert destroys[0] > launches[-1], "the graph was destroyed before a submitted replay"
    assert not calls(between(log, "close", "closed"), "cudaGraphExecDestroy")
    assert calls(between(log, "closed", "done"), "cudaGraphExecDestroy")
    kind, code, msg = r["closed_submit"]
    assert kind == "DeviceError" and code == "INVALID_VALUE" and "is closed" in msg, msg
    want = np.einsum("oc,nchw->nohw", r["w"][:, :, 0, 0].astype(np.float64),
                     r["x"].astype(np.float64))
    assert_close(r["y"], want, *reduction_tol("conv_fprop", "float32", 8), what="replay")


def test_a_failing_plan_ends_the_capture_and_the_stream_goes_on(fake_gpu, hdr):
    r = fake_gpu.call(S.capture_failure_case, "cudnnConvolutionForward",
                      hdr.CUDNN_STATUS_EXECUTION_FAILED)
    assert not violations(r["log"]), violations(r["log"])
    assert r["error"] is not None and "cudnnConvolutionForward" in r["error"][1], r["error"]
    rec = between(r["log"], "capture", "replay")
    end = calls(rec, "cudaStreamEndCapture")
    assert len(end) == 1, [x["fn"] for x in rec if x["rec"] == "call"]
    assert [g["graph"] for g in calls(rec, "cudaGraphDestroy")] == [end[0]["graph"]]
    assert not calls(rec, "cudaGraphInstantiate*")
    assert r["replay"][0] == "DeviceError" and "nothing to replay" in r["replay"][1]
    _check_step(r["inputs"], r["after"], "x")         # ordinary executions still work


def test_a_failed_replay_names_the_step_and_the_stream_goes_on(fake_gpu, hdr):
    # the replay's work item is a bare graph launch; its error must still say which step
    r = fake_gpu.call(S.capture_failure_case, "cudaGraphLaunch", hdr.cudaErrorLaunchFailure,
                      when="replay")
    assert not violations(r["log"]), violations(r["log"])
    assert r["error"] is None
    kind, message = r["replay"]
    assert kind == "GpuError", r["replay"]
    assert message.startswith("capture step of 3 executions on stream 'cuda:0:s0': "
                              "cudaGraphLaunch failed"), message
    assert f"({hdr.cudaErrorLaunchFailure})" in message, message
    launches = calls(between(r["log"], "replay", "after"), "cudaGraphLaunch")
    assert [x["status"] for x in launches] == [hdr.cudaErrorLaunchFailure]
    _check_step(r["inputs"], r["after"], "x")         # ordinary executions still work


def test_a_failed_update_instantiates_anew(fake_gpu):
    from hipdnn_async.runtime import _gpu
    failure = _gpu.CUDA_CONSTANTS["ERROR_GRAPH_EXEC_UPDATE_FAILURE"][0]
    r = fake_gpu.call(S.capture_failure_case, "cudaGraphExecUpdate", failure, when="update")
    assert not violations(r["log"]), violations(r["log"])
    rec = between(r["log"], "capture", "replay")
    upd = calls(rec, "cudaGraphExecUpdate")
    assert len(upd) == 1 and upd[0]["status"] == failure
    inst = calls(rec, "cudaGraphInstantiateWithFlags")
    assert len(inst) == 1
    assert [x["exec"] for x in calls(rec, "cudaGraphExecDestroy")] == [upd[0]["exec"]]
    assert r["replay"] is None
    launch = calls(between(r["log"], "replay", "after"), "cudaGraphLaunch")
    assert [x["exec"] for x in launch] == [inst[0]["exec"]]
    _check_step(r["inputs"], r["after"], "x", z="z2")


def test_a_twenty_plan_step_replays_with_one_launch(fake_gpu):
    r = fake_gpu.call(S.chain_case, 20)
    assert not violations(r["log"]), violations(r["log"])
    end = calls(between(r["log"], "capture", "replay0"), "cudaStreamEndCapture")
    assert len(end) == 1 and end[0]["nodes"] >= 20
    for i, (b0, out) in enumerate(((r["b0"], r["out"]), (r["b0_next"], r["out_next"]))):
        rec = between(r["log"], f"replay{i}", f"read{i}")
        assert len(calls(rec, "cudaGraphLaunch")) == 1 and not dnn_calls(rec)
        for k in range(1, 21):   # each stage from the previous stage's stored output
            assert_close(out[k], R.conv_fprop(out[k - 1], r["w"]),
                         *reduction_tol("conv_fprop", "float32", 8), what=f"b{k}")
        np.testing.assert_array_equal(out[0], b0)


def test_replays_from_threads_racing_recaptures_run_or_say_recording(fake_gpu):
    # step.submit reads the ready step without a lock and a recapture updates the one
    # executable graph in place: every replay that was taken runs, the others say the
    # step is recording; each recaptured round computes into its own new buffer; the
    # graph is updated per round and destroyed once, at close
    rounds = 6
    r = fake_gpu.call(S.recapture_race_case, rounds)
    assert r["violations"] == 0
    assert not r["foreign"], r["foreign"]
    assert r["replays"] > 0           # the threads replayed between the recaptures
    assert not r["failed"], r["failed"][:3]
    for msg in r["refusals"]:
        assert "is still recording" in msg, msg
    want = np.einsum("oc,nchw->nohw", r["w"][:, :, 0, 0].astype(np.float64),
                     r["x"].astype(np.float64))
    assert len(r["ys"]) == rounds
    for i, y in enumerate(r["ys"]):
        assert_close(y, want, *reduction_tol("conv_fprop", "float32", 8), what=f"round {i}")
    assert r["updates"] == rounds and r["instantiates"] == 0, (r["updates"], r["instantiates"])
    assert r["destroys"] == 1


# ------------------------------------------------------------------ a failed end of capture
def _end_calls(rec):
    return calls(rec, "cudaStreamEndCapture")


@pytest.mark.parametrize("also", [(), (("cudnnConvolutionForward", 3000),)],
                         ids=["end", "plan_and_end"])
def test_a_failed_end_of_capture_leaves_the_step_stream_not_capturing(fake_gpu, hdr, also):
    # the end fails without ending (injected: the fake's failed call does nothing, as a
    # CUDA end failing without invalidation may): the step's stream is ended again and
    # what that makes dropped; the plans then run on it (before: the stream stayed
    # capturing, so they were captured and their completion event refused)
    r = fake_gpu.call(S.capture_failure_case, "cudaStreamEndCapture",
                      hdr.cudaErrorIllegalState, also=also)
    assert not violations(r["log"]), violations(r["log"])
    rec = between(r["log"], "capture", "replay")
    end = _end_calls(rec)
    assert [e["status"] for e in end] == [hdr.cudaErrorIllegalState, 0], end
    assert end[0]["stream"] == end[1]["stream"]
    assert [g["graph"] for g in calls(rec, "cudaGraphDestroy")] == [end[1]["graph"]]
    assert not calls(rec, "cudaGraphInstantiate*")
    kind, message = r["error"]
    if also:   # the plan's failure is the one raised; the end's is only cleaned up
        assert "cudnnConvolutionForward" in message, r["error"]
    else:      # the call and its status
        assert kind == "GpuError" and message.startswith("cudaStreamEndCapture failed: "), message
        assert f"({hdr.cudaErrorIllegalState})" in message, message
    # the step says why it has nothing to replay, naming itself and the failed call
    kind, message = r["replay"]
    assert kind == "DeviceError" and "capture step on stream" in message, message
    assert "nothing to replay" in message
    assert ("cudnnConvolutionForward" if also else "cudaStreamEndCapture") in message, message
    after = between(r["log"], "after", "end")
    assert calls(after, "cudnnConvolutionForward") and not calls(after, "cudaStreamBeginCapture")
    assert calls(after, "cudaEventRecord")     # completions on the stream, not captured
    _check_step(r["inputs"], r["after"], "x")


@pytest.fixture(scope="module")
def end_capture(fake_gpu, hdr):
    return fake_gpu.call(S.end_capture_case, hdr.cudaErrorIllegalState)


def test_end_capture_returns_the_graph_of_an_ended_capture(end_capture, hdr):
    got = end_capture["ok"]
    assert got["error"] is None and got["graph"] and \
        got["capturing"] == hdr.cudaStreamCaptureStatusNone
    rec = between(end_capture["log"], "ok", "open")
    end = _end_calls(rec)
    assert len(end) == 1 and end[0]["status"] == 0 and end[0]["nodes"] == 1, end
    assert [g["graph"] for g in calls(rec, "cudaGraphDestroy")] == [end[0]["graph"]]


def test_end_capture_that_fails_without_ending_ends_again_then_raises(end_capture, hdr):
    got = end_capture["open"]
    assert got["graph"] == 0
    assert got["error"][:3] == ("GpuError", hdr.cudaErrorIllegalState, "cudaStreamEndCapture")
    assert got["capturing"] == hdr.cudaStreamCaptureStatusNone
    rec = between(end_capture["log"], "open", "invalidated")
    assert not violations(rec), violations(rec)
    end = _end_calls(rec)
    assert [e["status"] for e in end] == [hdr.cudaErrorIllegalState, 0], end
    assert [g["graph"] for g in calls(rec, "cudaGraphDestroy")] == [end[1]["graph"]]
    # the captured memset (to 7) never ran; the stream runs work again (memset to 5)
    assert (got["before"] == 1).all() and (got["after"] == 5).all()


def test_end_capture_of_an_invalidated_capture_raises_without_a_second_end(end_capture, hdr):
    got = end_capture["invalidated"]
    assert got["malloc"][1] == hdr.cudaErrorStreamCaptureUnsupported, got["malloc"]
    assert got["graph"] == 0
    assert got["error"][:3] == ("GpuError", hdr.cudaErrorStreamCaptureInvalidated,
                                "cudaStreamEndCapture")
    assert got["capturing"] == hdr.cudaStreamCaptureStatusNone
    rec = between(end_capture["log"], "invalidated", "idle")
    # the one violation is the cudaMalloc that invalidated the capture, made on purpose
    assert [v.split(":")[0] for v in violations(rec)] == ["cudaMalloc"], violations(rec)
    assert len(_end_calls(rec)) == 1 and not calls(rec, "cudaGraphDestroy")


def test_end_capture_of_a_stream_not_capturing_raises(end_capture, hdr):
    got = end_capture["idle"]
    assert got["graph"] == 0
    assert got["error"][:3] == ("GpuError", hdr.cudaErrorIllegalState, "cudaStreamEndCapture")
    rec = between(end_capture["log"], "idle", "end")
    assert len(_end_calls(rec)) == 1 and not calls(rec, "cudaGraphDestroy")
