"""The profiler's GPU times on the fake CUDA runtime: two timing events around each launch,
recorded on the launching stream only while a profile is open, read with
``cudaEventElapsedTime`` against an anchor and all destroyed at the exit; asyncio and trio.
The MIOpen device's run is in ``hip/test_miopen_profiler.py``."""
from __future__ import annotations

import numpy as np
import pytest

from . import _profile_scenarios
from ._fakes import between, calls, violations

DELAY_US = 3000
TIMING = 0x2          # cudaEventDisableTiming / hipEventDisableTiming (driver_types.h)


def check_profile(r, *, prefix: str, streams: int, executions: int) -> None:
    """What every GPU runtime's profile must show (``prefix``: ``cuda`` or ``hip``)."""
    assert not violations(r["log"]), violations(r["log"])
    assert r["problems"] == []
    for got in r["outputs"]:
        np.testing.assert_allclose(got, r["want"], atol=1e-4, rtol=1e-5)
    closed = between(r["log"], "closed", "profiled")
    profiled = between(r["log"], "profiled", "end")
    elapsed = f"{prefix}EventElapsedTime"
    create = f"{prefix}EventCreateWithFlags"

    def timing_events(records):
        return [c for c in records if c["rec"] == "call" and c["fn"] == create
                and not c["flags"] & TIMING]
    # no profile: no timing event made, none read
    assert timing_events(closed) == [] and not [c for c in closed if c["fn"] == elapsed]
    # a profile: one anchor plus two events per execution, each read once against the
    # anchor, each destroyed
    made = timing_events(profiled)
    assert len(made) == 1 + 2 * executions
    reads = [c for c in profiled if c["rec"] == "call" and c["fn"] == elapsed]
    assert len(reads) == 2 * executions and len({c["start"] for c in reads}) == 1
    destroyed = {c["event"] for c in profiled if c["rec"] == "call"
                 and c["fn"] == f"{prefix}EventDestroy"}
    ids = {c["start"] for c in reads} | {c["end"] for c in reads}
    assert ids <= destroyed
    records = r["records"]
    assert len(records) == executions and all(x["ok"] for x in records)
    t0, t1 = r["profile"]
    by_stream = {}
    for x in records:
        # on the GPU after its launch; within the profile; at least the kernel's item
        # (the fake's stream waits DELAY_US before each item)
        assert t0 <= x["submitted"] <= x["launched"] <= x["started"] < x["ended"] <= t1
        assert x["ended"] - x["started"] >= 0.9 * DELAY_US * 1e-6
        by_stream.setdefault(x["stream"], []).append(x)
    assert len(by_stream) == streams
    for xs in by_stream.values():
        for a, b in zip(xs, xs[1:]):
            assert a["ended"] <= b["started"] + 1e-6
    if streams == 1:
        assert r["overlap"] == 0.0
    else:
        assert r["overlap"] > 0.0


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("streams", [1, 2])
def test_profile_times_executions_with_events(fake_gpu, backend, streams):
    r = fake_gpu.call(_profile_scenarios.profile_case, "cuda:0", backend, streams, 4,
                      DELAY_US)
    check_profile(r, prefix="cuda", streams=streams, executions=4)
    # the events are recorded on the streams the convolutions ran on
    profiled = between(r["log"], "profiled", "end")
    conv_streams = {c["stream"] for c in calls(profiled, "cudnnConvolutionForward")}
    record_streams = {c["stream"] for c in calls(profiled, "cudaEventRecord")}
    assert conv_streams <= record_streams and len(conv_streams) == streams


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_capture_replays_and_batcher_batches_on_the_gpu(fake_gpu, backend):
    r = fake_gpu.call(_profile_scenarios.capture_and_batcher_case, "cuda:0", backend)
    assert not violations(r["log"]), violations(r["log"])
    assert r["problems"] == []
    recs = r["records"]
    assert [x["kind"] for x in recs[:4]] == ["capture", "replay", "replay", "replay"]
    assert all(x["stream"] == "cuda:0:s1" for x in recs[:4])
    served = recs[4:]
    assert served and all(x["kind"] == "execution" and x["batch"] is not None
                          for x in served)
    assert sum(b["rows"] for b in r["batches"]) == 6
    assert all(b["executions"] == 1 for b in r["batches"])
    for x in recs:          # every one timed by its events, after its launch
        assert x["ok"] and x["launched"] <= x["started"] < x["ended"]
    # each replay is one graph launch between the profile's two event records
    replays = between(r["log"], "capture", "batcher")
    launches = [c for c in replays if c["rec"] == "call" and c["fn"] == "cudaGraphLaunch"]
    assert len(launches) == 3


def test_nested_profiles_share_the_executions_and_their_times(fake_gpu):
    r = fake_gpu.call(_profile_scenarios.nested_case, "cuda:0")
    assert not violations(r["log"]), violations(r["log"])
    outer, inner = r["times"]
    assert len(outer) == len(inner) == 3 and outer == inner
    assert all(a < b for a, b in outer)
    # one pair of timing events per execution, not one per profile; two anchors
    made = [c for c in r["log"] if c["rec"] == "call" and c["fn"] == "cudaEventCreateWithFlags"
            and not c["flags"] & TIMING]
    assert len(made) == 2 + 2 * 3
