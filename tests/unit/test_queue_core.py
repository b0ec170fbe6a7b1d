"""The queues' C submission path (``queues._core``): what it stamps and what it refuses.

The queue behaviour itself (order, limits, parking, completion batches) is the same for
every caller and is tested through the public API in tests/async and tests/contract.
"""
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
