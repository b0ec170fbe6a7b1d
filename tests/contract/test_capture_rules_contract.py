"""What may happen inside a capture block, on the fake CUDA runtime (issue 11 item 3,
review F5-F7), asyncio and trio: ``execute`` / ``execute_sync``, a plan of another
device, a replay and awaiting a recorded handle are ``DeviceError``s (code
``INVALID_VALUE``) that enqueue no cuDNN call at all; another thread's execute on the
step's stream while the block is open runs at once, outside the stream capture, and is not
in the graph; the graph holds the recorded submit only. Results against the float64
oracle.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol

from . import _capture_scenarios as S
from ._fakes import between, calls, dnn_calls, violations

MISUSE = "INVALID_VALUE"


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def rules(request, fake_gpu):
    r = fake_gpu.call(S.rules_case, request.param)
    assert not violations(r["log"]), violations(r["log"])
    return r


def _conv(r):
    return R.conv_fprop(r["x"], r["w"], pre=1, post=1)


def _close(got, r, what):
    assert_close(got, _conv(r), *reduction_tol("conv_fprop", "float32", S.C * 9), what=what)


def _refused(r, name, match):
    err = r["errors"][name]
    assert err is not None, f"{name} was not refused"
    kind, code, msg = err
    assert kind == "DeviceError" and code == MISUSE, err
    assert match in msg, msg
    return msg


def test_execute_inside_a_capture_is_refused_and_enqueues_nothing(rules):
    for name in ("execute", "execute_sync"):
        msg = _refused(rules, name, "inside a capture: use submit; results come from replay")
        assert "capture step on stream 'cuda:0:s0' of device 'cuda:0'" in msg, msg
    _refused(rules, "await_handle", "recorded into capture step")
    rec = between(rules["log"], "block", "other")
    assert not dnn_calls(rec), [x["fn"] for x in dnn_calls(rec)]
    assert not calls(rec, "cudaStream*Capture"), "a capture began inside the block"
    assert np.isnan(rules["out"]["refused"]).all(), "a refused execute ran"


def test_plans_of_the_other_device_are_refused(rules):
    for name in ("cpu_plan_submit", "cpu_plan_execute"):
        msg = _refused(rules, name, "inside a capture of device 'cuda:0'")
        assert "a plan of device 'cpu'" in msg, msg
    for name in ("cuda_plan_submit", "cuda_plan_execute_sync"):
        msg = _refused(rules, name, "inside a capture of device 'cpu'")
        assert "a plan of device 'cuda:0'" in msg, msg
    _refused(rules, "cuda_replay", "inside a capture")
    rec = between(rules["log"], "cpu_block", "cpu_captured")
    assert not dnn_calls(rec) and not calls(rec, "cudaGraphLaunch"), \
        [x["fn"] for x in rec if x["rec"] == "call"]
    assert np.isnan(rules["out"]["cpu_refused"]).all()
    assert rules["recorded"] == {"cuda": 1, "cpu": 1}
    _close(rules["out"]["cpu_rec"], rules, "the CPU step's replay")


@pytest.mark.parametrize("who, start, end", [("thread", "other", "other_done"),
                                             ("task", "other_done", "task_done")])
def test_another_thread_or_task_runs_at_once_and_stays_out_of_the_graph(rules, who, start,
                                                                         end):
    other = between(rules["log"], start, end)
    assert [x["fn"] for x in dnn_calls(other)] == ["cudnnConvolutionForward"]
    assert not calls(other, "cudaStream*Capture")
    _close(rules["out"][who], rules, f"the other {who}'s execute")


def test_the_graph_holds_the_recorded_submit_only(rules):
    cap = between(rules["log"], "task_done", "captured")
    names = [x["fn"] for x in cap if x["rec"] == "call"]
    begin, end = names.index("cudaStreamBeginCapture"), names.index("cudaStreamEndCapture")
    inside = [n for n in names[begin:end] if n.startswith("cudnn")]
    assert inside.count("cudnnConvolutionForward") == 1, inside    # the recorded submit only


def test_the_recorded_submit_runs_at_replay_only(rules):
    assert np.isnan(rules["out"]["rec_before"]).all()
    rep = between(rules["log"], "replay", "replayed")
    assert len(calls(rep, "cudaGraphLaunch")) == 1 and not dnn_calls(rep)
    _close(rules["out"]["rec"], rules, "the replay")


def test_a_closed_step_says_invalid_value(rules):
    for name in ("closed_replay", "closed_replay_sync"):
        _refused(rules, name, "is closed")
    _refused(rules, "closed_graph_launcher", "replay of a closed capture step")
