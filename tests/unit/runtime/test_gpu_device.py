"""``GpuContext.order_copy_stream`` against streams that go away while a copy orders itself.

A copy records an event on every compute stream of the device, each under the lock that
the stream's launches hold (a capture step holds it throughout), and skips a stream that
was unregistered meanwhile. These tests use a host-only fake runtime that tracks which
stream handles are live and which are capturing, and fail on an event recorded on a
destroyed or a capturing stream (a record there is a use after free, or joins the capture).
"""
from __future__ import annotations

import itertools
import threading

import pytest

from hipdnn_async._errors import DeviceError
from hipdnn_async.runtime._gpu_device import GpuContext


class _Runtime:
    """The runtime calls of a GpuContext and a GPU stream backend, on the host."""

    STREAM_NON_BLOCKING = 1
    EVENT_DISABLE_TIMING = 2

    def __init__(self):
        self._handles = itertools.count(0x100)
        self.live: set[int] = set()
        self.capturing: set[int] = set()
        self.bad: list[str] = []
        self.destroyed: list[int] = []
        self.on_get_device = None     # hook: called by get_device (then cleared)
        self.on_event_create = None   # hook: called by event_create (then cleared)

    def get_device(self):
        hook, self.on_get_device = self.on_get_device, None
        if hook is not None:
            hook()
        return 0

    def set_device(self, index):
        pass

    def device_count(self):
        return 1

    device_name = arch_name = lambda self, index: "fake"
    compute_capability = lambda self, index: (9, 0)
    multiprocessor_count = lambda self, index: 1
    memory_pools_supported = pool_keep_memory = lambda self, index: False

    def stream_create(self, flags=0, *, handle=None):
        s = next(self._handles) if handle is None else handle
        self.live.add(s)
        return s

    def stream_destroy(self, stream):
        self.live.discard(stream)
        self.destroyed.append(stream)

    def stream_synchronize(self, stream):
        pass

    def stream_wait_event(self, stream, event):
        pass

    def event_create(self, flags=0):
        hook, self.on_event_create = self.on_event_create, None
        if hook is not None:
            hook()
        return next(self._handles)

    def event_record(self, event, stream):
        if stream not in self.live:
            self.bad.append(f"event record on destroyed stream {stream:#x}")
        elif stream in self.capturing:
            self.bad.append(f"event record on capturing stream {stream:#x}")

    def event_destroy(self, event):
        pass


def test_a_copy_skips_a_stream_whose_handle_a_new_capturing_stream_took():
    # A stream closed while the copy waited for an earlier stream's lock, and a new
    # stream created with the same handle (the runtime reuses the address) that is now
    # capturing: the copy holds the old stream's lock, not the new one's, so it must not
    # record there (it would join that capture).
    rt = _Runtime()
    ctx = GpuContext(0, rt)
    s = rt.stream_create()
    capture_lock = threading.Lock()

    class OldLaunchLock:
        """The closed stream's launch lock: taking it, the copy finds the swap done."""

        def __enter__(self):
            ctx.remove_stream(s)
            rt.stream_destroy(s)
            ctx.add_stream(rt.stream_create(handle=s), capture_lock)
            capture_lock.acquire()          # the new stream's capture step runs
            rt.capturing.add(s)

        def __exit__(self, *exc):
            return False

    ctx.add_stream(s, OldLaunchLock())
    ctx.order_copy_stream()
    assert rt.bad == []


def test_a_copy_racing_a_stream_that_fails_to_start_never_records_on_it_destroyed(monkeypatch):
    # A new stream's preparation fails (its handle cannot be had) while another thread
    # copies: the stream is unregistered and destroyed; the copy, which took the stream's
    # launch lock as the failed preparation let it go, must have recorded before the
    # destroy or not at all.
    from hipdnn_async.queues._gpu_backend import GpuStreamBackend
    from hipdnn_async.runtime import _stream_prep

    rt = _Runtime()
    ctx = GpuContext(0, rt)
    copy_errors: list[BaseException] = []
    copier_in_record = threading.Event()
    stream_destroyed = threading.Event()

    def copy():
        try:
            ctx.order_copy_stream()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            copy_errors.append(exc)

    copier = threading.Thread(target=copy)

    def failing_handle(stream):
        copier.start()                  # it sees the new stream, then waits for its lock
        copier.join(0.2)

        def record_soon():              # the copier, holding the lock, about to record
            copier_in_record.set()
            stream_destroyed.wait(0.5)  # (with the lock held: the destroy cannot wait)

        def cleanup_soon():             # the failed start's cleanup, once the copier
            copier_in_record.wait(2)    # has the lock
        rt.on_event_create = record_soon
        rt.on_get_device = cleanup_soon
        raise RuntimeError("out of memory")

    real_destroy = rt.stream_destroy

    def destroy(stream):
        real_destroy(stream)
        stream_destroyed.set()
    rt.stream_destroy = destroy

    # the declaration is data; the runtime makes the handle with its kind's function,
    # here one that fails
    monkeypatch.setitem(_stream_prep.HANDLE_KINDS, "fake", failing_handle)
    needs = _stream_prep.StreamNeeds(ctx, "fake", "fake")
    with pytest.raises(DeviceError, match="cannot prepare its launch state: out of memory"):
        GpuStreamBackend("cuda:0:s0", ctx)
    copier.join(5)
    assert not copier.is_alive() and copy_errors == []
    assert copier_in_record.is_set() and len(rt.destroyed) == 1
    assert rt.bad == []
    del needs
