"""A copy on another thread while a capture step records (``dev.capture()``).

A copy orders the device's copy stream after every compute stream by recording an event
on each. Recorded on a stream that is capturing, that event would join the capture (the
copy stream then joins it too, and the copy fails or lands in the graph). Such a record
waits for the capture to end instead: the copy and the capture both succeed.
"""
from __future__ import annotations


from . import _capture_scenarios as C
from ._fakes import calls, violations


def test_copies_during_a_step_capture_wait_for_it_and_both_succeed(fake_gpu, backend_lib):
    r = fake_gpu.call(C.copy_during_step_capture_case, backend_lib)
    assert not violations(r["log"]), violations(r["log"])
    assert not r["copy_errors"], r["copy_errors"]
    assert not r["capture_errors"], r["capture_errors"]
    assert r["replayed"] == 3 and r["copies"] > 0 and r["copied_ok"]
    begins = calls(r["log"], "cudaStreamBeginCapture")
    ends = calls(r["log"], "cudaStreamEndCapture")
    assert len(begins) == len(ends) == 3
    captured = begins[0]["stream"]
    windows = [(b["seq"], e["seq"]) for b, e in zip(begins, ends)]
    # the copier's event records on the captured stream (another thread than the
    # capturing one): they came while the captures ran, and none inside a capture
    theirs = [c["seq"] for c in calls(r["log"], "cudaEventRecord")
              if c["stream"] == captured and c["thread"] != begins[0]["thread"]]
    assert any(windows[0][0] < seq < windows[-1][1] for seq in theirs), (windows, theirs)
    assert not [seq for seq in theirs for lo, hi in windows if lo < seq < hi]
