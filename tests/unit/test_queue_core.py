"""The queues' C submission path (``queues._core``): what it stamps and what it refuses.

The queue behaviour itself (order, limits, parking, completion batches) is the same for
every caller and is tested through the public API in tests/async and tests/contract.
"""
import itertools
import threading
import time

import pytest

from hipdnn_async import DeviceError
from hipdnn_async.queues import Completion, StreamPool
from hipdnn_async.queues import _core


def test_its_clock_is_time_perf_counter():
    # every timestamp of an item must be comparable with the Python-side ones (the CPU
    # worker's started_at / finished_at, queue_wait_ms): the same clock, not just a
    # monotonic one
    for _ in range(100):
        before = time.perf_counter()
        now = _core.perf_counter()
        after = time.perf_counter()
        assert before <= now <= after


def test_timestamps_of_a_submission_are_ordered_on_one_clock():
    with StreamPool("cpu", n_streams=1) as pool:
        t0 = time.perf_counter()
        item = pool._submit_now(lambda: 7, (), pool.streams[0], "probe")
        assert item.result(timeout=10) == 7
        t1 = time.perf_counter()
    assert t0 <= item.submitted_at <= item.started_at <= item.finished_at <= t1
    assert 0.0 <= item.queue_wait_ms <= (t1 - t0) * 1e3


def test_submit_now_takes_only_work_item_types():
    with StreamPool("cpu", n_streams=1) as pool:
        stream = pool.streams[0]
        with pytest.raises(TypeError, match="dict is not a work-item type"):
            _core.submit_now(dict, stream, lambda: None, (), "x", None)
        assert stream.metrics()["submitted"] == 0


def test_submit_now_on_a_closed_stream_names_stream_and_item():
    pool = StreamPool("cpu", n_streams=1)
    stream = pool.streams[0]
    pool.close()
    with pytest.raises(DeviceError, match=r"stream 'cpu:s0': plan 'p' submitted after close"):
        _core.submit_now(Completion, stream, lambda: None, (), "plan 'p'", None)


def test_a_work_item_must_be_callable():
    with pytest.raises(TypeError, match="work item 'w': fn must be callable; got int"):
        Completion(3, label="w")


def test_an_error_of_the_work_is_stored_named_and_the_function_dropped():
    # a GPU launch's item: the value or error is stored, fn released at once (it may
    # hold a replay's graph)
    def boom():
        raise ValueError("bad")

    item = Completion(boom, label="plan 'c'")
    item._enqueue()
    assert item._fn is None
    assert "plan 'c': ValueError: bad" in str(item._error)
    assert isinstance(item._error.__cause__, ValueError)


class _DeviceCallFails:
    """A runtime whose cudaGetDevice fails (several devices: a launch makes the stream's
    device current first)."""

    def __init__(self):
        self.fail = True

    def get_device(self):
        if self.fail:
            from hipdnn_async._errors import GpuError
            raise GpuError("cudaGetDevice failed: cudaErrorUnknown (999)")
        return 0

    def set_device(self, index):
        pass


def test_an_item_whose_launch_fails_before_enqueueing_takes_no_slot():
    from hipdnn_async.queues import Stream
    from hipdnn_async.queues._stream import StreamBackend

    class Backend(_core.LaunchCore, StreamBackend):
        def _close(self):
            pass

        def poll(self, item=None):
            pass

    backend = Backend()
    backend._rt, backend._switch, backend._index = _DeviceCallFails(), True, 1
    backend._open = _core.Batch()
    stream = Stream("gpu:s0", backend=backend)
    ran = []
    with pytest.raises(Exception, match="cudaGetDevice failed"):
        _core.submit_now(Completion, stream, lambda: ran.append(1), (), "plan 'a'", 4)
    assert (stream.pending, stream.metrics()["submitted"], ran) == (0, 0, [])
    backend._rt.fail = False          # the next submission launches and takes its slot
    item = _core.submit_now(Completion, stream, lambda: ran.append(2), (), "plan 'b'", 4)
    assert ran == [2] and item._batch is backend._open and stream.pending == 1
    assert stream.metrics()["submitted"] == 1


class _Interrupt(BaseException):
    """A KeyboardInterrupt-like exception (not caught as an Exception)."""


def test_a_host_backend_that_raises_after_taking_the_item_keeps_it():
    # A CPU stream's launch hands the item to its worker thread; an exception after that
    # (a KeyboardInterrupt delivered right after the queue put) must not take the item
    # back: the worker runs it and frees its slot, so a stream that forgot it had an
    # empty in-flight line to free it from (the worker died, later items never ran).
    from hipdnn_async.queues import Stream
    from hipdnn_async.queues._stream import CpuStreamBackend

    ran = threading.Event()

    class Interrupted(CpuStreamBackend):
        fail = True

        def launch(self, item):
            super().launch(item)
            if self.fail:
                self.fail = False
                assert ran.wait(10)
                time.sleep(0.05)       # the worker now waits for the stream's lock
                raise _Interrupt

    stream = Stream("cpu:s0", backend=Interrupted("cpu:s0"))
    try:
        def work():
            ran.set()
            return 7

        item = Completion(work, label="plan 'a'")
        with pytest.raises(_Interrupt):
            stream._try_submit(item, 4)
        assert item.result(timeout=10) == 7
        after = _core.submit_now(Completion, stream, lambda: 8, (), "plan 'b'", 4)
        assert after.result(timeout=10) == 8
        m = stream.metrics()
        assert (m["submitted"], m["completed"], m["failed"], stream.pending) == (2, 2, 0, 0)
    finally:
        stream.close()


class _TwoDevices:
    """A runtime on the host with two devices; the calling thread's device is 1 and the
    stream's 0, so every launch makes device 0 current; ``fail_at``: the number of the
    cudaSetDevice call that fails."""

    STREAM_NON_BLOCKING, EVENT_DISABLE_TIMING = 1, 2

    def __init__(self):
        self._handles = itertools.count(0x100)
        self.set_calls = 0
        self.fail_at = None

    def get_device(self):
        return 1

    def set_device(self, index):
        from hipdnn_async._errors import GpuError
        self.set_calls += 1
        if self.set_calls == self.fail_at:
            raise GpuError("cudaSetDevice failed: cudaErrorUnknown (999)")

    def device_count(self):
        return 2

    def stream_create(self, flags=0):
        return next(self._handles)

    event_create = stream_create

    def event_query(self, event):
        return True

    def __getattr__(self, name):     # device facts, records, waits, destroys: nothing
        return lambda *args: 0


def test_a_parked_item_whose_launch_fails_fails_in_its_place():
    # A slot freed by a finishing item launches the next parked one on the finishing
    # thread; when that launch fails before the work is enqueued (cudaSetDevice), there
    # is no submitter to raise to: the parked item fails with that error, and the item
    # that was finishing still completes (before: the error escaped the completing thread,
    # which died with the finishing item unpublished, and the parked item stayed both in
    # flight and parked).
    from hipdnn_async._errors import GpuError
    from hipdnn_async.queues import Stream
    from hipdnn_async.queues._gpu_backend import GpuStreamBackend
    from hipdnn_async.runtime._gpu_device import GpuContext

    rt = _TwoDevices()
    stream = Stream("cuda:0:s0", backend=GpuStreamBackend("cuda:0:s0", GpuContext(0, rt)))
    try:
        a = Completion(lambda: "A", label="plan 'a'")
        b = Completion(lambda: "B", label="plan 'b'")
        assert stream._try_submit(a, 1, True) is None and stream._try_submit(b, 1, True) is None
        assert (len(stream._inflight), len(stream._parked)) == (1, 1)
        # a's completion (on the stream's completion thread): device 0 made current to
        # record its batch's event (1), the thread's device back (2), then b's launch as
        # a's slot frees (3: fails)
        rt.fail_at = rt.set_calls + 3
        assert a.result(timeout=5) == "A"
        with pytest.raises(GpuError, match=r"plan 'b'.*cudaSetDevice failed"):
            b.result(timeout=5)
        m = stream.metrics()
        assert (m["completed"], m["failed"], m["in_flight"], m["parked"]) == (1, 1, 0, 0)
    finally:
        stream.close()


def test_a_launch_core_without_an_open_batch_raises_not_crashes():
    # the batch is a typed field: read as None it would crash the process
    from hipdnn_async.queues import Stream
    from hipdnn_async.queues._stream import StreamBackend

    class Unstarted(_core.LaunchCore, StreamBackend):
        name = "cuda:0:s0"

        def _close(self):
            pass

    stream = Stream("cuda:0:s0", backend=Unstarted())
    ran = []
    with pytest.raises(RuntimeError, match="Unstarted: launch before the stream started"):
        _core.submit_now(Completion, stream, lambda: ran.append(1), (), "plan 'a'", 4)
    assert (ran, stream.pending, stream.metrics()["submitted"]) == ([], 0, 0)


def test_named_names_library_errors_only():
    from hipdnn_async import ExecutionError
    from hipdnn_async._errors import GpuError

    def launch_fails():
        raise GpuError("cudaGraphLaunch failed: cudaErrorLaunchFailure (719)", status=719)

    assert _core.Named(lambda: 5, "step")() == 5
    with pytest.raises(GpuError) as info:
        _core.Named(launch_fails, "capture step on stream 's0'")()
    assert str(info.value) == ("capture step on stream 's0': cudaGraphLaunch failed: "
                               "cudaErrorLaunchFailure (719)")
    assert info.value.status == 719 and isinstance(info.value.__cause__, GpuError)
    # a foreign error passes unchanged: the queue wraps it, naming the item's label
    with pytest.raises(ZeroDivisionError):
        _core.Named(lambda: 1 / 0, "step")()
    item = Completion(_core.Named(lambda: 1 / 0, "step"), label="capture step")
    item._enqueue()
    assert isinstance(item._error, ExecutionError) and "capture step: ZeroDivisionError" in str(item._error)
