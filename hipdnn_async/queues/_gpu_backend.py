"""GPU stream backend: work is enqueued on the submitting thread; completion is observed
from events, lazily, and never costs a thread hand-off per submission.

``launch`` makes the stream's ``LaunchContext`` current and calls ``item._enqueue()`` (the
plan enqueues its kernels on the GPU stream and returns at once). Items are grouped in
*completion batches*: an event is recorded after every ``EVENT_EVERY`` work items, after
every event marker, and on demand when someone needs an item whose batch has no event
yet. Nobody is woken per item (on a real machine a thread wake-up per submission costs
20-50 us of host time and contends for the GIL with the submitter); the launched items
are finished, in launch order, by whoever asks:

- the submitting thread, when a batch closes (one ``cudaEventQuery``) and when the stream
  is full (``poll``);
- a thread that waits (``handle.result()``, ``execute_sync``): it synchronizes the event
  on its own thread (``wait_item``);
- the stream's completion thread, for items someone awaits from an event loop, waits for
  with a timeout, or adds a callback to (``watch``): it sleeps in ``event_synchronize``
  (blocking-sync events: no spinning) and wakes only for those.

The variant-pack buffers stay alive until an item is finished (``Completion._keepalive``).

Several devices: a launch or an on-demand event record can come from any host thread (the
submitting one, a waiting one, a completion thread launching a parked item), and the
current device is per thread, so every call that makes a stream or event, records, launches
or releases runs with the stream's device made current and the thread's own device
restored after (``GpuContext.using``, inlined on the launch path). Where the runtime sees
one device that device is current on every thread (no other index is valid), so the
launch path and the on-demand event record skip it. Waiting on and querying events needs
no current device.
Cross-stream waits are GPU-side (``stream_wait_event``): the host never blocks.

Launch state is prepared before launches, never inside one: a new stream is handed to its
device's ``GpuContext`` (``open_stream``), which creates on it what the device's providers
declared as data (``runtime._stream_prep``: a DNN handle per stream, a workspace, per-handle
compiled state), under the stream's launch lock; later rounds (a workspace grown at
build) run there too, between launches. A plan's ``run`` only enqueues.
"""
from __future__ import annotations

import collections
import functools
import queue
import threading
import time

from .._errors import DeviceError, GpuError
from ..runtime._gpu_device import GpuContext, LaunchContext
from ..runtime._gpu_graph import capture_graph
from ._completion import _DONE, SPIN_S, Completion
from . import _core
from ._stream import StreamBackend

__all__ = ["GpuStreamBackend"]

_STOP = object()

# Work items per completion event when nobody waits for them (``_core.EVENT_EVERY``: an
# event record costs host time, about a microsecond, and completions are only looked at
# batch by batch); ``_Batch``: items completed by one event (``_core.Batch``).
EVENT_EVERY, _Batch = _core.EVENT_EVERY, _core.Batch


class GpuStreamBackend(_core.LaunchCore, StreamBackend):
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
        self._rt = rt = context.runtime
        # launches vs preparation of launch state and on-demand event records; it is also
        # the stream's lock (``StreamBackend.lock``), so every launch runs with it held,
        # and a copy's event record on this stream takes it (``order_copy_stream``)
        self.lock = self._launch_lock = threading.Lock()
        with context.using():
            self.stream = rt.stream_create(rt.STREAM_NON_BLOCKING)
        context.add_stream(self.stream, self._launch_lock)
        self.launch_context = LaunchContext(self.stream, context)
        self._index = context.index
        # Whether a launch must make the stream's device current (and restore the
        # thread's after): not when the runtime sees one device, which is then current
        # on every thread whatever anyone set (the only valid index); that saves a
        # get_device per submission.
        self._switch = rt.device_count() != 1
        self._closed = False
        try:
            self._start_prepared()
        except BaseException as exc:
            with context.using():
                self.launch_context.release()
                with self._launch_lock:      # not while a copy records on it
                    context.remove_stream(self.stream)
                rt.stream_destroy(self.stream)
            if isinstance(exc, Exception) and not isinstance(exc, DeviceError):
                raise DeviceError(f"GPU stream '{name}': cannot prepare its launch state: "
                                  f"{exc}") from exc
            raise
        self._free_events: collections.deque = collections.deque()
        self._marker_events: dict[int, int] = {}   # id(marker) -> event, until it completes
        self._open = _Batch()                      # items launched since the last event
        self._batches: collections.deque = collections.deque()   # closed, not retired
        self._retire_lock = threading.Lock()       # items are finished in launch order
        self._queue: queue.SimpleQueue = queue.SimpleQueue()     # items to watch
        self._thread = threading.Thread(target=self._watch_loop,
                                        name=f"hipdnn_async completion {name}", daemon=True)
        self._thread.hipdnn_async_worker = True     # runs done callbacks (_call_back)
        self._thread.start()

    # ------------------------------------------------------------------ launch state
    def _start_prepared(self) -> None:
        """Have the device create this new stream's launch state (``GpuContext.open_stream``:
        the runtime's own calls, under the launch lock) and include it in later rounds."""
        self.context.open_stream(self.launch_context, self._launch_lock)

    # ------------------------------------------------------------------ launch side
    # ``launch(item)`` is LaunchCore's (C): with the stream's device current (only where
    # the runtime sees several devices) and its launch context entered, the item enqueues
    # its work; it joins the open batch, whose event is recorded after EVENT_EVERY items
    # or an event marker (``_close``).

    def _close(self) -> None:
        """Record the open batch's event and start a new batch (launch lock held)."""
        batch = self._open
        self._open = _Batch()
        event = 0
        try:
            try:
                event = self._free_events.popleft()
            except IndexError:
                event = self._rt.event_create()
            self._rt.event_record(event, self.stream)
        except GpuError as exc:   # keeps its type and status
            batch.record_error = exc
            if event:
                self._free_events.append(event)
            event = 0
        batch.event = event
        for item in batch.items:
            if item._control:
                self._marker_events[id(item)] = event
        self._batches.append(batch)
        self.poll_due = len(self._batches) > 1

    def _cover(self, item: Completion):
        """The batch of launched ``item``, its event recorded (now, if it was open); None
        when the item is already finished."""
        batch = item._batch
        if batch is not None and batch.event is None:
            with self._launch_lock:
                if batch is self._open and batch.items:
                    if self._switch:
                        with self.context.using():   # a waiting thread: keep its device
                            self._close()
                    else:
                        self._close()
        return batch

    def capture(self, fns: tuple, *, previous=None):
        """The work item of a capture step: ``fns`` captured from this stream into a
        CUDA/HIP graph, replayed with one launch (``runtime._gpu_graph.capture_graph``)."""
        return functools.partial(capture_graph, self._rt, self.stream, tuple(fns), previous)

    def wait(self, marker: Completion) -> None:
        """Later work on this stream waits on the GPU for ``marker``'s event."""
        event = self._foreign_event(marker)
        if event:
            with self.context.using():
                self._rt.stream_wait_event(self.stream, event)

    @staticmethod
    def _foreign_event(marker: Completion) -> int:
        stream = marker.stream
        backend = getattr(stream, "backend", None)
        if isinstance(backend, GpuStreamBackend):
            return backend._marker_events.get(id(marker), 0)
        return 0

    # ------------------------------------------------------------------ completion side
    def poll(self, item: Completion | None = None) -> None:
        """Finish the items of every batch whose event has fired; never blocks (another
        thread finishing items meanwhile is left to it). ``item``: someone asks whether
        it is done, so its batch gets its event now if it has none yet."""
        self.poll_due = False
        if item is not None:
            self._cover(item)
        if self._batches:
            self._retire(None, blocking=False)

    def watch(self, item: Completion) -> None:
        """The completion thread finishes ``item`` as soon as it completes."""
        self._queue.put(item)

    def wait_item(self, item: Completion) -> None:
        """Block this thread (GIL released) until ``item`` completes, then finish every
        item up to it."""
        batch = self._cover(item)
        if batch is not None:
            self._spin(batch)
            self._sync(batch)
            self._retire(batch)
            self._retire(None, blocking=False)   # and whatever else has completed

    def _spin(self, batch: _Batch) -> None:
        """Query ``batch``'s event for up to SPIN_S before the caller sleeps in
        ``event_synchronize``: a short kernel finishes sooner than a thread wakes."""
        event, query, clock = batch.event, self._rt.event_query, time.perf_counter
        deadline = clock() + SPIN_S
        try:
            while event and not batch.retired and not query(event) and clock() < deadline:
                pass
        except GpuError:
            pass               # event_synchronize reports it

    def _sync(self, batch: _Batch) -> None:
        event = batch.event
        if event and not batch.retired:
            try:
                self._rt.event_synchronize(event)
            except GpuError as exc:   # keeps its type and status
                batch.sync_error = exc
        batch.synced = True

    def _retire(self, upto, blocking: bool = True) -> None:
        """Finish, in launch order, the items of the closed batches that have completed:
        through batch ``upto`` (synchronized by the caller), or as far as their events
        say (``upto`` None)."""
        lock = self._retire_lock
        if not lock.acquire(blocking):
            return
        try:
            batches = self._batches
            while batches:
                batch = batches[0]
                error = batch.record_error
                if batch.synced:
                    error = error or batch.sync_error
                elif batch.event:
                    try:
                        done = self._rt.event_query(batch.event)
                    except GpuError as exc:
                        done, error = True, error or exc
                    if not done:
                        if upto is None or upto.retired:
                            return
                        self._sync(batch)     # before ``upto`` on the stream: done soon
                        error = error or batch.sync_error
                batches.popleft()
                self._finish_batch(batch, error)
                if batch is upto:
                    return
        finally:
            lock.release()

    def _finish_batch(self, batch: _Batch, error) -> None:
        items, event = batch.items, batch.event
        batch.retired = True
        batch.items = []
        now = time.perf_counter()
        for item in items:
            item._batch = None
            item.finished_at = now
            item._keepalive = None          # the work is done with the buffers
            if item._control:
                self._marker_events.pop(id(item), None)  # before the event can be reused
            if error is not None and item._error is None:
                how = ": the GPU reported" if error is batch.sync_error else ""
                item._error = error.prefixed(f"{item.describe()} [stream '{self.name}']{how}")
        if event:
            self._free_events.append(event)
        if items:
            stream = items[0].stream
            if stream is not None:
                stream._items_finished(items)      # free the slots before waking
            for item in items:
                item._publish_stored()

    def _watch_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if item._state == _DONE:
                continue
            batch = self._cover(item)
            if batch is not None:
                self._sync(batch)
                self._retire(batch)
                self._retire(None, blocking=False)   # and whatever else has completed
            item = batch = None

    def _drain(self) -> None:
        """Finish every launched item (at close)."""
        with self._launch_lock:
            if self._open.items:
                with self.context.using():
                    self._close()
            last = self._batches[-1] if self._batches else None
        if last is not None:
            self._sync(last)
            self._retire(last)

    def close(self) -> None:
        """Finish every launched item, then release the stream; idempotent."""
        with self._launch_lock:
            if self._closed:
                return
            self._closed = True
            self.context.close_stream(self.launch_context)   # no round prepares it now
        try:
            self._drain()
        finally:
            self._queue.put(_STOP)
            if threading.current_thread() is not self._thread:
                self._thread.join()
        try:
            rt = self._rt
            with self.context.using():
                rt.stream_synchronize(self.stream)
                self.launch_context.release()
                with self._launch_lock:      # not while a copy records on it
                    self.context.remove_stream(self.stream)
                while self._free_events:
                    rt.event_destroy(self._free_events.popleft())
                rt.stream_synchronize(self.stream)
                rt.stream_destroy(self.stream)
        except GpuError:
            pass  # a broken context: nothing left to release safely
