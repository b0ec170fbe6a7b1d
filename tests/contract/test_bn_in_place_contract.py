"""Running statistics updated in place on the cuDNN legacy engine (fake CUDA runtime and
cuDNN): next_running_* bound to the prev_running_* buffers is accepted, both executions
chain against float64, and no copy of prev into next is enqueued (cuDNN's training call
updates its one running buffer in place)."""
from __future__ import annotations

from oracle._cases import assert_close

from . import _scenarios as S
from ._fakes import between, calls, violations


def test_in_place_running_statistics_chain_and_copy_nothing(fake_gpu):
    r = fake_gpu.call(S.bn_in_place_case)
    assert not violations(r["log"]), violations(r["log"])
    assert r["engine"] == "CUDNN_LEGACY_ENGINE"
    for label, got, want, (atol, rtol) in r["checks"]:
        assert_close(got, want, atol, rtol, label)
    run = between(r["log"], "run", "end")
    # the build's trial run (on its own stream, scratch buffers) and the two executions
    trains = calls(run, "cudnnBatchNormalizationForwardTraining")
    assert len(trains) == 3, trains
    build_stream = trains[0]["stream"]
    assert all(t["stream"] != build_stream for t in trains[1:]), trains
    # staging copies are host-to-device (kind 1); a prev -> next copy would be device-to-device
    d2d = [c for c in calls(run, "cudaMemcpyAsync")
           if c.get("kind") == 3 and c["stream"] != build_stream]
    assert d2d == [], d2d
