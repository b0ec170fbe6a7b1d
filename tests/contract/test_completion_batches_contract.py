"""Completion batches of the GPU stream backend on the fake CUDA runtime (issue 11 item 2):
a submission nobody waits for costs no event synchronize and no thread wake-up; an event
is recorded every EVENT_EVERY work items; a thread that waits synchronizes on its own
thread; awaits, callbacks and a full stream are driven by the completion thread; buffers
are let go once a submission is finished; results are the oracle's."""
from __future__ import annotations

import pytest

from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol

from . import _completion_scenarios as S
from ._fakes import between, calls, violations


@pytest.fixture(scope="module")
def case(fake_gpu):
    r = fake_gpu.call(S.batches_case)
    assert not violations(r["log"]), violations(r["log"])
    return r


def test_submissions_nobody_waits_for_record_one_event_per_batch(case):
    rec = between(case["log"], "submits", "polled")
    n, every = 40, case["every"]
    launches = calls(rec, "cudnnConvolutionForward")
    assert len(launches) == n
    events = calls(rec, "cudaEventRecord")
    assert len(events) == n // every, [e["fn"] for e in events]
    # each event follows the last launch of its batch on the same stream
    for k, ev in enumerate(events):
        last = launches[(k + 1) * every - 1]
        assert ev["seq"] > last["seq"] and ev["stream"] == last["stream"]
    assert not calls(rec, "cudaEventSynchronize")       # nobody blocked for them


def test_handles_finish_when_polled_without_a_wait(case):
    assert case["done_after"] == 40


def test_a_thread_that_waits_records_the_open_batch_and_synchronizes_itself(case):
    rec = between(case["log"], "result", "await")
    ev = calls(rec, "cudaEventRecord")
    sync = calls(rec, "cudaEventSynchronize")
    assert len(ev) == 1 and len(sync) == 1 and sync[0]["event"] == ev[0]["event"]
    assert sync[0]["thread"] == ev[0]["thread"]      # on the waiting thread, no hand-off


def test_a_finished_submission_lets_go_of_its_buffers(case):
    assert case["kept_alive"] is False


def test_awaits_and_callbacks_complete(case):
    assert case["await_error"] is None and case["awaited_done"] == [True] * 3
    assert case["callback_ran"]


def test_a_full_stream_drains_with_nobody_waiting(case):
    assert case["full_done"] == [True] * 12 and not case["full_errors"]


def test_results_are_the_oracles(case):
    tol = reduction_tol("conv_fprop", "float32", S.C * 9)
    want = R.conv_fprop(case["x"], case["w"], pre=1, post=1)
    assert_close(case["y"], want, *tol)
    assert_close(case["y_full"], want, *tol)
