"""GPU times of a profile: two timing events around each launch, anchored on the host clock.

While a profile is open, an execution on a GPU device is submitted as a function that
records a start event on the launching stream, launches the work, and records an end
event after it (the stream is the one the queue is launching on: ``current_launch()``).
No event is created or recorded when no profile is open. At collection each pair is
turned into host-clock seconds through one anchor event per device, recorded when the
profile opened on an idle stream and synchronized, whose host time is taken when that
synchronize returns:

    start = anchor_host + elapsed(anchor, start_event) / 1e3

Event times have the runtime's resolution (about 0.5 µs, ``cudaEventElapsedTime``); the
anchor's host time is late by the synchronize's wake-up (tens of µs), so the GPU lanes may
sit that much later than the host's timestamps, never earlier than the launches.
"""
from __future__ import annotations

import threading
import time

from ..runtime import current_launch

__all__ = ["GpuClock"]


class GpuClock:
    """Timing events of one GPU device for one profile.

    Parameters
    ----------
    context : GpuContext
        The device.
    stream : int
        A stream handle of the device (its queue's first stream) to record the anchor on.
    """

    def __init__(self, context, stream: int) -> None:
        self.context = context
        self.rt = rt = context.runtime
        # timing on (no EVENT_DISABLE_TIMING); a synchronize sleeps
        self._flags = rt.EVENT_BLOCKING_SYNC
        self._lock = threading.Lock()
        self._events: list = []
        self.closed = False
        with context.using():
            rt.stream_synchronize(stream)   # idle: the anchor completes when recorded
            self.anchor = self._new()
            rt.event_record(self.anchor, stream)
            rt.event_synchronize(self.anchor)
        self.host = time.perf_counter()

    def _new(self) -> int:
        event = self.rt.event_create(self._flags)
        with self._lock:
            self._events.append(event)
        return event

    def wrap(self, fn, record):
        """``fn`` (a work item's function) between a start and an end event on the stream
        that launches it; the events go to ``record.gpu``."""
        rt, new = self.rt, self._new

        def timed():
            if self.closed:          # launched after the profile's exit: not timed
                return fn()
            stream = current_launch().stream
            start, end = new(), new()
            record.gpu = (start, end)
            rt.event_record(start, stream)
            try:
                return fn()
            finally:
                rt.event_record(end, stream)
        return timed

    def resolve(self, record) -> None:
        """Set ``record.started`` / ``ended`` from its events (waiting for the end one);
        the host launch time is kept in ``record.launched``."""
        if record.gpu is None:
            return
        start, end = record.gpu
        rt = self.rt
        rt.event_synchronize(end)
        record.launched = record.started
        record.started = self.host + rt.event_elapsed_time(self.anchor, start) / 1e3
        record.ended = self.host + rt.event_elapsed_time(self.anchor, end) / 1e3

    def close(self) -> None:
        """Destroy every event (after every record was resolved)."""
        with self._lock:
            self.closed = True
            events, self._events = self._events, []
        with self.context.using():
            for event in events:
                try:
                    self.rt.event_synchronize(event)
                    self.rt.event_destroy(event)
                except Exception:  # noqa: BLE001 - a broken context: nothing to release
                    pass
