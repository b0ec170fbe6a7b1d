"""runtime._cudnn_backend.GraphLaunch, the submit path's bound execution (issue 11 item 2):
the variant pack is built once per stream and reused while that stream's workspace stays
(launches alternating between streams keep each stream's pack), rebuilt when it moves; one cudnnBackendExecute per call;
errors typed. Its pack is a ``runtime.PackSpec`` completed from the stream's resources,
never a callable (issue 23: the runtime calls nothing above it). The backend table is one per process, so the case runs in a fresh
interpreter on the fake of fakes/fake_cudnn_backend.c."""
import json
import os
import subprocess
import sys

import pytest

_PROBE = r"""
import ctypes, json, sys, threading
from hipdnn_async import _errors
from hipdnn_async.runtime import _cudnn_backend as be
from hipdnn_async.runtime._gpu import ExecCounter
from hipdnn_async.runtime._gpu_device import LaunchContext
from hipdnn_async.runtime._stream_resources import PackSpec, StreamResources
import time

path = sys.argv[1]
lib = ctypes.CDLL(path)
be.load(path)
def counts():
    a = (ctypes.c_long * 5)()
    lib.fake_counts(a)
    return dict(zip(("creates", "destroys", "finalizes", "executes", "packs"), a))
def last():
    a = (ctypes.c_uint64 * 80)()
    lib.fake_last(a)
    n = a[3]
    return {"handle": a[0], "plan": a[1], "ws": a[2], "uids": list(a[4:4 + n]),
            "ptrs": list(a[4 + n:4 + 2 * n])}

asked = []
class Counted(PackSpec):   # records the streams the launch asks about (only the probe's)
    __slots__ = ()
    def resolve(self, lc):
        asked.append(lc.stream if lc is not None else None)
        return PackSpec.resolve(self, lc)

class Handle:
    def __init__(self, ptr): self.ptr = ptr
    def close(self): pass

def stream(n):
    # a stream whose cuDNN handle is 0xA0 + n and whose own workspace is at 0x100000 * n
    lc = LaunchContext(n, None)
    res = lc.resources["cudnn"] = StreamResources(n, Handle(0xA0 + n), pooled=False, runtime=None)
    res.workspace_ptr, res.workspace_size = 0x100000 * n, 0x1000
    return lc

# uid 8 is a segment of the plan's workspace (at offset 0x20); the plan's own at offset 8
pack = Counted("cudnn", "cuDNN plans", (0x10, 0x20, 0x30), (False, True, False),
               workspace_size=0x100, plan_offset=8)
plan = be.Descriptor(be.BACKEND_EXECUTION_PLAN_DESCRIPTOR)
counter = ExecCounter()
launch = be.GraphLaunch(plan, (7, 8, 9), pack, threading.Lock(), counter)
wall0 = time.perf_counter_ns()
out = {"start": counts()}
s1, s2 = stream(1), stream(2)
s1.enter()
for _ in range(3):
    launch()
out["three_on_s1"], out["last_s1"], out["asked_s1"] = counts(), last(), list(asked)
out["plan"] = plan.address
s1.resources["cudnn"].workspace_ptr = 0x900000   # the stream's workspace grew: a new pack
launch()
out["moved"], out["last_moved"], out["asked_moved"] = counts(), last(), list(asked)
s2.enter()
launch(); launch()
out["s2"], out["last_s2"], out["asked_s2"] = counts(), last(), list(asked)
for lc in (s1, s2, s1, s2):          # alternating streams (a pool's round robin)
    lc.enter()
    launch()
out["alternate"], out["asked_alternate"] = counts(), list(asked)
s2.enter()
LaunchContext.exit()
try:
    launch()
except _errors.ExecutionError as e:
    out["off_stream"] = [type(e).__name__, str(e)]
s2.enter()
import os
os.environ["FAKE_EXECUTE_STATUS"] = "5000"
try:
    launch()
except _errors.HipdnnError as e:
    out["failed"] = [type(e).__name__, e.status, e.call, isinstance(e, _errors.ExecutionError)]
    out["failed_message"] = str(e)
del os.environ["FAKE_EXECUTE_STATUS"]
launch()
out["after_failure"] = counts()
# a launch given its plan's label names it in the error (and the failing call)
LABEL = "plan CONV_FPROP (graph 'conv1', engine CUDNN_GRAPH_ENGINE)"
one = PackSpec("cudnn", "cuDNN plans", (0x10,))
named = be.GraphLaunch(plan, (7,), one, threading.Lock(), label=LABEL)
os.environ["FAKE_EXECUTE_STATUS"] = "5000"
try:
    named()
except _errors.HipdnnError as e:
    cause = e.__cause__
    out["named"] = {"type": type(e).__name__, "message": str(e), "status": e.status,
                    "call": e.call, "label": named.label, "executions": named.executions,
                    "cause": [type(cause).__name__, str(cause)] if cause is not None else None}
del os.environ["FAKE_EXECUTE_STATUS"]
named()
out["named_after"] = named.executions
del named
out["wall_ns"] = time.perf_counter_ns() - wall0
out["counter"] = [counter.executions, counter.host_ns, launch.executions, launch.counter is counter]
plain = be.GraphLaunch(plan, (7,), one, threading.Lock())
plain()
out["plain"] = [plain.executions, plain.counter is None, counter.executions]
# a device of more streams than a handful, its default pick going round robin: every
# stream keeps its pack (the second round builds nothing and asks resolve nothing)
many = be.GraphLaunch(plan, (7, 8, 9), pack, threading.Lock())
lcs = [stream(10 + i) for i in range(12)]
for lc in lcs:
    lc.enter()
    many()
c0, n0 = counts(), len(asked)
for lc in lcs:
    lc.enter()
    many()
out["twelve_streams"] = [counts()["finalizes"] - c0["finalizes"], len(asked) - n0,
                         counts()["executes"] - c0["executes"]]
del launch, plain, many
out["end"] = counts()
try:
    be.GraphLaunch(plan, tuple(range(40)), pack, threading.Lock())
except ValueError as e:
    out["too_many"] = str(e)
try:       # a callable is refused: what a launch needs is resolved before it is handed down
    be.GraphLaunch(plan, (7,), lambda lc: (1, [0x10], 0, None), threading.Lock())
except ValueError as e:
    out["callable"] = str(e)
lc = LaunchContext(3, None)    # a stream prepared for no cuDNN plans
lc.enter()
try:
    be.GraphLaunch(plan, (7,), one, threading.Lock())()
except _errors.ExecutionError as e:
    out["unprepared"] = str(e)
LaunchContext.exit()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(build_fake):
    path = build_fake("fake_cudnn_backend")
    r = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _delta(a, b):
    return {k: b[k] - a[k] for k in a}


def test_the_variant_pack_is_built_once_per_stream_and_reused(probe):
    d = _delta(probe["start"], probe["three_on_s1"])
    # the plan descriptor + one pack; one finalize; three executions
    assert d == {"creates": 1, "destroys": 0, "finalizes": 1, "executes": 3, "packs": 1}, d
    assert probe["asked_s1"] == [1]
    last = probe["last_s1"]
    assert last["uids"] == [7, 8, 9] and last["ptrs"] == [0x10, 0x100020, 0x30]
    assert last["handle"] == 0xA1 and last["plan"] == probe["plan"] and last["ws"] == 0x100008


def test_a_moved_workspace_or_another_stream_builds_a_new_pack(probe):
    d = _delta(probe["three_on_s1"], probe["moved"])
    assert d == {"creates": 1, "destroys": 1, "finalizes": 1, "executes": 1, "packs": 0}, d
    assert probe["asked_moved"] == [1, 1] and probe["last_moved"]["ws"] == 0x900008
    assert probe["last_moved"]["ptrs"] == [0x10, 0x900020, 0x30]
    d = _delta(probe["moved"], probe["s2"])
    # a pack of its own for the second stream; the first stream's is kept
    assert d == {"creates": 1, "destroys": 0, "finalizes": 1, "executes": 2, "packs": 1}, d
    assert probe["asked_s2"] == [1, 1, 2]
    last = probe["last_s2"]
    assert last["handle"] == 0xA2 and last["ptrs"] == [0x10, 0x200020, 0x30]


def test_launches_alternating_between_streams_reuse_each_streams_pack(probe):
    d = _delta(probe["s2"], probe["alternate"])
    assert d == {"creates": 0, "destroys": 0, "finalizes": 0, "executes": 4, "packs": 0}, d
    assert probe["asked_alternate"] == probe["asked_s2"]     # resolve not asked again


def test_off_a_stream_or_on_an_unprepared_one_the_launch_is_refused(probe):
    kind, message = probe["off_stream"]
    assert kind == "ExecutionError" and message.startswith("cuDNN plans run on a GPU stream")
    assert probe["unprepared"] == ("cuDNN plans: stream 0x3 has no cudnn launch resources "
                                   "(it belongs to another device, or was not prepared)")


def test_the_pack_is_data_not_a_callback(probe):
    assert probe["callable"] == "GraphLaunch: pack must be a runtime PackSpec; got function"


def test_a_failed_execution_is_typed_and_the_launch_goes_on(probe):
    name, status, call, is_exec = probe["failed"]
    assert status == 5000 and call == "cudnnBackendExecute" and is_exec, probe["failed"]
    assert probe["after_failure"]["executes"] == probe["alternate"]["executes"] + 1


def test_a_failed_execution_names_the_plan_given_as_label_and_the_call(probe):
    label = "plan CONV_FPROP (graph 'conv1', engine CUDNN_GRAPH_ENGINE)"
    n = probe["named"]
    assert n["label"] == label
    # the plan first, then the call and cuDNN's status and text; the same type and fields
    assert n["message"].startswith(f"{label}: cudnnBackendExecute failed: "), n["message"]
    assert "CUDNN_STATUS_EXECUTION_FAILED (5000)" in n["message"], n["message"]
    assert n["type"] == "CudnnError" and n["status"] == 5000 and n["call"] == "cudnnBackendExecute"
    # the unnamed error is its cause; an unlabelled launch's message is that one
    assert n["cause"] == ["CudnnError", n["message"][len(label) + 2:]], n
    assert probe["failed_message"].startswith("cudnnBackendExecute failed: "), probe["failed_message"]
    # nothing counted for the failure; the launch goes on
    assert n["executions"] == 0 and probe["named_after"] == 1


def test_the_pack_is_destroyed_with_the_launch(probe):
    assert probe["end"]["packs"] == 0
    assert "40 uids (at most 32)" in probe["too_many"]


def test_a_counter_is_bumped_per_successful_execution_with_its_host_time(probe):
    # the probe's launch ran 3 + 1 + 2 + 4 times, then once more after a refused and a
    # failed call: 11 successful executions, each counted in C with its host time, which
    # cannot exceed the probe's own wall clock around all of them
    executions, host_ns, launch_executions, same = probe["counter"]
    assert executions == launch_executions == 11 and same
    assert 0 < host_ns <= probe["wall_ns"]
    # without a counter a launch still counts its own executions, and bumps no one else's
    assert probe["plain"] == [1, True, 11]


def test_a_device_of_many_streams_keeps_a_pack_per_stream(probe):
    # twelve streams alternating (a round-robin pick on a 12-stream device): the second
    # round reuses each stream's pack (no finalize, resolve not asked), twelve executions
    assert probe["twelve_streams"] == [0, 0, 12], probe["twelve_streams"]
