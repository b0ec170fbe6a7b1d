"""GPU stream backend: work is enqueued on the submitting thread, completion comes from an
event, observed by one completion thread per stream.

``launch`` makes the stream's ``LaunchContext`` current, calls ``item._execute()`` (the
plan enqueues its kernels on the GPU stream and returns at once), records an event and
hands (event, item) to the completion thread, which sleeps in ``event_synchronize``
(blocking-sync events: no spinning) and then finishes items in launch order. The
variant-pack buffers stay alive until that moment (``Completion._keepalive``).
Cross-stream waits are GPU-side (``stream_wait_event``): the host never blocks.
"""
from __future__ import annotations

import collections
import queue
import threading
import time

from .._errors import ExecutionError
from ..runtime import _gpu
from ..runtime._gpu_device import GpuContext, LaunchContext
from ._completion import Completion
from ._stream import StreamBackend

__all__ = ["GpuStreamBackend"]

_STOP = object()


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
        self.stream = _gpu.stream_create(_gpu.STREAM_NON_BLOCKING)
        context.add_stream(self.stream)
        self.launch_context = LaunchContext(self.stream, context)
        self._free_events: collections.deque = collections.deque()
        self._marker_events: dict[int, int] = {}   # id(marker) -> event, until it completes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._complete_loop,
                                        name=f"hipdnn_async completion {name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ launch side
    def _event(self) -> int:
        try:
            return self._free_events.popleft()
        except IndexError:
            return _gpu.event_create()

    def launch(self, item: Completion) -> None:
        """Enqueue ``item``'s work on the GPU stream now; finish it when its event fires."""
        ctx = self.launch_context
        ctx.enter()
        try:
            self.context.activate()
            value, error = item._execute()
        finally:
            ctx.exit()
        event = 0
        try:
            event = self._event()
            _gpu.event_record(event, self.stream)
        except _gpu.GpuError as exc:
            error = error or ExecutionError(f"{item.describe()}: {exc} [stream '{self.name}']")
            event = 0
        if item._control:
            self._marker_events[id(item)] = event
        self._queue.put((event, item, value, error))

    def wait(self, marker: Completion) -> None:
        """Later work on this stream waits on the GPU for ``marker``'s event."""
        event = self._foreign_event(marker)
        if event:
            _gpu.stream_wait_event(self.stream, event)

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
                    _gpu.event_synchronize(event)
                except _gpu.GpuError as exc:
                    error = error or ExecutionError(
                        f"{item.describe()}: the GPU reported {exc} [stream '{self.name}']")
            if item._control:
                self._marker_events.pop(id(item), None)  # before the event can be reused
            if event:
                self._free_events.append(event)
            item.finished_at = time.perf_counter()
            item._finish(value, error)
            entry = item = None

    def close(self) -> None:
        """Finish every launched item, then release the stream; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join()
        try:
            _gpu.stream_synchronize(self.stream)
            self.launch_context.release()
            self.context.remove_stream(self.stream)
            while self._free_events:
                _gpu.event_destroy(self._free_events.popleft())
            _gpu.stream_synchronize(self.stream)
            _gpu.stream_destroy(self.stream)
        except _gpu.GpuError:
            pass  # a broken context: nothing left to release safely
