"""GPU stream backend: work is enqueued on the submitting thread, completion comes from an
event, observed by one completion thread per stream.

``launch`` makes the stream's ``LaunchContext`` current, calls ``item._execute()`` (the
plan enqueues its kernels on the GPU stream and returns at once), records an event and
hands (event, item) to the completion thread, which sleeps in ``event_synchronize``
(blocking-sync events: no spinning) and then finishes items in launch order. The
variant-pack buffers stay alive until that moment (``Completion._keepalive``).
Cross-stream waits are GPU-side (``stream_wait_event``): the host never blocks.

Launch state is prepared before launches, never inside one: a provider registers a
*preparer* for a device (``prepare_streams``); it runs on every open stream of that
device at once and on each stream started later, before the stream's first launch, under
the stream's launch lock (the registry is the device's ``GpuContext``'s) (so it never races an enqueue). That is where per-stream vendor
handles are created and stream workspaces sized; a plan's ``run`` only enqueues.
"""
from __future__ import annotations

import collections
import functools
import queue
import threading
import time
from typing import Callable

from .._errors import DeviceError, GpuError
from ..runtime._gpu_device import GpuContext, LaunchContext
from ._completion import Completion
from ._graph import capture_graph
from ._stream import StreamBackend

__all__ = ["GpuStreamBackend", "prepare_streams"]

_STOP = object()

def prepare_streams(context, prepare: Callable[[LaunchContext], None], *,
                    later: bool = True) -> None:
    """``context.prepare_streams(prepare, later=later)`` (the registry lives on the
    device's ``GpuContext``, so providers reach it without importing the queues)."""
    context.prepare_streams(prepare, later=later)


class GpuStreamBackend(StreamBackend):
    """One non-blocking GPU stream plus its completion thread.

    Parameters
    ----------
    name : str
        Stream name, e.g. ``"cuda:0:s1"``.
    context : GpuContext
        The device.
    """

    def __init__(self, name: str, context: GpuContext):
        self.name = name
        self.context = context
        context.activate()
        self._rt = rt = context.runtime
        self.stream = rt.stream_create(rt.STREAM_NON_BLOCKING)
        context.add_stream(self.stream)
        self.launch_context = LaunchContext(self.stream, context)
        self._launch_lock = threading.Lock()   # launches vs preparers of launch state
        self._closed = False
        try:
            self._start_prepared()
        except BaseException as exc:
            self.launch_context.release()
            context.remove_stream(self.stream)
            rt.stream_destroy(self.stream)
            if isinstance(exc, Exception) and not isinstance(exc, DeviceError):
                raise DeviceError(f"GPU stream '{name}': cannot prepare its launch state: "
                                  f"{exc}") from exc
            raise
        self._free_events: collections.deque = collections.deque()
        self._marker_events: dict[int, int] = {}   # id(marker) -> event, until it completes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._complete_loop,
                                        name=f"hipdnn_async completion {name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ launch state
    def _start_prepared(self) -> None:
        """Run the device's preparers on this new stream, then make it visible to later
        ``prepare_streams`` rounds (under the registry lock, so no round misses it)."""
        self.context.open_prepared(self)

    def prepare(self, fn: Callable[[LaunchContext], None]) -> None:
        """Run ``fn(launch_context)`` between launches (never during one)."""
        with self._launch_lock:
            if self._closed:
                return
            self.context.activate()
            fn(self.launch_context)

    # ------------------------------------------------------------------ launch side
    def _event(self) -> int:
        try:
            return self._free_events.popleft()
        except IndexError:
            return self._rt.event_create()

    def launch(self, item: Completion) -> None:
        """Enqueue ``item``'s work on the GPU stream now; finish it when its event fires."""
        ctx = self.launch_context
        with self._launch_lock:
            self._rt.set_device(self.context.index)    # context.activate(), one call less
            ctx.enter()
            try:
                value, error = item._execute()
            finally:
                ctx.exit()
        event = 0
        try:
            event = self._event()
            self._rt.event_record(event, self.stream)
        except GpuError as exc:   # keeps its type and status
            error = error or exc.prefixed(f"{item.describe()} [stream '{self.name}']")
            event = 0
        if item._control:
            self._marker_events[id(item)] = event
        self._queue.put((event, item, value, error))

    def capture(self, fns: tuple, *, previous=None):
        """The work item of a capture step: ``fns`` captured from this stream into a
        CUDA/HIP graph, replayed with one launch (``queues._graph.capture_graph``)."""
        return functools.partial(capture_graph, self._rt, self.stream, tuple(fns), previous)

    def wait(self, marker: Completion) -> None:
        """Later work on this stream waits on the GPU for ``marker``'s event."""
        event = self._foreign_event(marker)
        if event:
            self._rt.stream_wait_event(self.stream, event)

    @staticmethod
    def _foreign_event(marker: Completion) -> int:
        stream = marker.stream
        backend = getattr(stream, "backend", None)
        if isinstance(backend, GpuStreamBackend):
            return backend._marker_events.get(id(marker), 0)
        return 0

    # ------------------------------------------------------------------ completion side
    def _complete_loop(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is _STOP:
                return
            event, item, value, error = entry
            if event:
                try:
                    self._rt.event_synchronize(event)
                except GpuError as exc:   # keeps its type and status
                    error = error or exc.prefixed(
                        f"{item.describe()} [stream '{self.name}']: the GPU reported")
            if item._control:
                self._marker_events.pop(id(item), None)  # before the event can be reused
            if event:
                self._free_events.append(event)
            item.finished_at = time.perf_counter()
            item._finish(value, error)
            entry = item = None

    def close(self) -> None:
        """Finish every launched item, then release the stream; idempotent."""
        with self._launch_lock:
            if self._closed:
                return
            self._closed = True
        self.context.close_prepared(self)
        self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        try:
            rt = self._rt
            rt.stream_synchronize(self.stream)
            self.launch_context.release()
            self.context.remove_stream(self.stream)
            while self._free_events:
                rt.event_destroy(self._free_events.popleft())
            rt.stream_synchronize(self.stream)
            rt.stream_destroy(self.stream)
        except GpuError:
            pass  # a broken context: nothing left to release safely
