"""Streams: in-order execution of work items, behind a backend seam.

A :class:`Stream` owns the bookkeeping (in-flight items, counters, histograms, events);
a :class:`StreamBackend` owns execution. The CPU backend runs items on one worker thread
(the items' heavy parts release the GIL, so streams overlap on several cores). The GPU
backend (``_gpu_backend``) implements the same methods over a vendor stream: ``launch``
calls ``item._enqueue()`` on the submitting thread (the call enqueues kernels) and adds
the item to a completion batch closed by one vendor event; completions are observed in
batches when someone asks (``poll``/``watch``/``wait_item``), ``record`` and ``wait``
map to event record / stream-wait-event.
"""
from __future__ import annotations

import collections
import functools
import queue
import threading
import time
import weakref

import anyio.lowlevel

from .._errors import DeviceError
from ._completion import _DONE, Completion
from . import _core
from ._metrics import Histogram


__all__ = ["StreamBackend", "CpuStreamBackend", "Stream", "Event", "SequenceReplay"]


# ==================================================================== backends

class StreamBackend:
    """Execution seam of a stream: runs launched items in launch order.

    Subclasses implement :meth:`launch` and :meth:`close`; the defaults of :meth:`record`
    and :meth:`wait` express events as ordinary in-order items, which suits any backend
    that executes host callables in order.
    """

    def launch(self, item: Completion) -> None:
        """Start ``item`` after every item launched before it; finish it exactly once.

        Called with the stream's lock held (launch order is submission order): must not
        block on other items.
        """
        raise NotImplementedError

    # A backend whose launches must exclude other work of its own (a GPU stream's
    # launch-state preparation and on-demand event records) gives the lock for that here: the stream
    # takes it as its own lock, so ``launch``, always called with the stream's lock
    # held, needs no second one. Such a backend must not call back into the stream
    # while holding it.
    lock = None

    # A backend that notices completions lazily (a GPU stream: no thread wakes per item)
    # finishes launched items when asked through these three; a backend whose worker
    # finishes every item itself (the CPU one) needs none of them.
    poll_due = False     # True: the backend asks the submitter to call poll() once

    def poll(self, item: Completion | None = None) -> None:
        """Finish the launched items that have completed (never blocks; must not be
        called with the stream's lock held); ``item``: someone asks about that one."""

    def watch(self, item: Completion) -> None:
        """Finish ``item`` (and every item launched before it) as soon as it completes:
        someone waits for it."""

    def wait_item(self, item: Completion) -> None:
        """Block the calling thread until ``item`` has completed, and finish it."""

    def record(self, marker: Completion) -> None:
        """Complete ``marker`` once every item launched before it has finished."""
        self.launch(marker)

    def wait(self, marker: Completion) -> None:
        """Make items launched after this call wait until ``marker`` (another stream's) is done."""
        self.launch(Completion(marker.wait, label="wait_event", _control=True))

    def capture(self, fns: tuple, *, previous=None):
        """A work-item function that turns ``fns`` (work-item functions, in order) into one
        replayable unit of this stream, and returns it when run by :meth:`launch`.

        The unit has ``launcher()`` (the work-item function of one replay, made at
        submission) and ``close()`` (replays submitted before it still run). The default replays by calling ``fns`` in order (a host backend);
        ``previous`` is the unit being recaptured (closed here: a host sequence has
        nothing to update in place).
        """
        if previous is not None:
            previous.close()
        return lambda: SequenceReplay(fns)

    def close(self) -> None:
        """Finish every launched item, then release the backend; idempotent."""
        raise NotImplementedError


class SequenceReplay:
    """Recorded work-item functions run in order as one item (a host stream's replay).

    :meth:`launcher` gives the work-item function of one replay, bound to the
    recording at that moment, so a replay submitted before :meth:`close` still runs.
    """

    __slots__ = ("_fns",)

    def __init__(self, fns: tuple):
        self._fns = tuple(fns)

    def launcher(self):
        """The work-item function of one replay."""
        fns = self._fns
        if fns is None:
            raise DeviceError("replay of a closed capture step", code="INVALID_VALUE")
        return functools.partial(_run_in_order, fns)

    def close(self) -> None:
        self._fns = None


def _run_in_order(fns: tuple) -> None:
    for fn in fns:
        fn()


_STOP = object()
_live_backends: "weakref.WeakSet[CpuStreamBackend]" = weakref.WeakSet()


class CpuStreamBackend(_core.HostLaunchCore, StreamBackend):
    """CPU stream: one worker thread that runs items in order.

    An item may instead run on the thread that submits it, when the stream is idle
    (``queues._core.run_inline``: the plans' ``execute_sync``, and ``submit`` /
    ``execute`` of work measured to be short); items launched meanwhile wait behind it
    and reach the worker once it has finished, so the stream still runs one item at a
    time, in submission order.

    The worker is a daemon thread, drained (not stopped) when the interpreter starts to
    exit: work submitted before then runs, and a device used or closed afterwards, from an
    ``atexit`` handler or a late finalizer (Ray shuts a worker down there), still has a
    worker. A non-daemon worker would have to be stopped first, and that close would wait
    forever. From then on a submission returns only once the worker has run it
    (:meth:`poll`): a daemon thread does not outlive the interpreter, so work nobody
    waits for would otherwise be lost.

    Parameters
    ----------
    name : str
        Used in the thread's name.
    """

    def __init__(self, name: str) -> None:
        self._queue = queue.SimpleQueue()
        self._held = []                  # launched behind an inline item (HostLaunchCore)
        self._stopped = False
        self._exited = threading.Event()     # the worker's loop has returned
        self._thread = threading.Thread(target=self._work, args=(_STOP,),
                                        name=f"hipdnn_async stream {name}", daemon=True)
        self._thread.hipdnn_async_worker = True     # runs done callbacks (_call_back)
        self._thread.start()
        _live_backends.add(self)
        if _exiting:
            self.poll_due = True

    def poll(self, item: Completion | None = None) -> None:
        """Once the interpreter exits (``poll_due`` is then True, so every submission
        calls this outside the stream's lock): wait until the worker has run all that is
        queued. Before that, nothing to do: the worker finishes every item itself."""
        if self.poll_due and threading.current_thread() is not self._thread:
            self._drain()

    def _drain(self) -> None:
        """Wait until the worker has run every item launched, including those a finishing
        item launches from the stream's host-side line (parked beyond max_inflight)."""
        while self._thread.is_alive():
            flush = _Flush()
            self._queue.put(flush)
            flush.reached.wait()
            # every item launched before the flush has run; one launched meanwhile (a
            # parked item, freed by a finishing one) has not, or has only just
            if self._ran >= self._launched:
                return

    def stop(self) -> None:
        """Ask the worker to exit after the items already queued; do not wait."""
        if not self._stopped:
            self._stopped = True
            self.put_last(_STOP)

    def _work(self, stop) -> None:
        try:
            self.work(stop)
        finally:
            self._exited.set()

    def close(self) -> None:
        """Stop the worker after the queued items and wait until it has run them (unless
        called from it). The wait is on ``_exited``, not ``Thread.join``: a join that
        Ctrl-C interrupts marks the thread stopped while it runs on (CPython 3.11-3.12,
        ``_wait_for_tstate_lock``), so a second close would return before the work is
        done."""
        self.stop()
        if threading.current_thread() is not self._thread:
            self._exited.wait()
            self._thread.join()


class _Flush:
    """A queue entry that reports when the worker has reached it."""

    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = threading.Event()

    def _run(self) -> None:
        self.reached.set()


_exiting = False     # set once the interpreter exits: CPU submissions then wait (poll)


def interpreter_exiting() -> bool:
    """True once the interpreter has begun to exit (where it joins non-daemon threads,
    before atexit handlers and finalize's exit hook run)."""
    return _exiting


def _drain_all_workers() -> None:
    # Runs where the interpreter joins non-daemon threads (as concurrent.futures' exit
    # hook does): work queued on a pool that was never closed finishes before exit, as it
    # would on a non-daemon worker; the workers stay up for atexit handlers, whose
    # submissions run before they return.
    global _exiting
    _exiting = True
    backends = list(_live_backends)
    for backend in backends:
        backend.poll_due = True
    for backend in backends:
        if not backend._stopped:
            backend._drain()


_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_drain_all_workers)


# ==================================================================== stream

class Stream(_core.StreamCore):
    """An in-order queue of work items with its own worker.

    Created by :class:`StreamPool`; use ``pool.submit(..., stream=s)`` to target one.

    Parameters
    ----------
    name : str
        Display name, e.g. ``"cpu:s0"``.
    id : int, optional
        Index of the stream in its pool. Default 0.
    backend : StreamBackend, optional
        Execution backend; default a new :class:`CpuStreamBackend`.

    Notes
    -----
    ``pending`` counts work items submitted and not completed (event markers and waits
    are not work items).
    """

    def __init__(self, name: str, *, id: int = 0, backend: StreamBackend | None = None) -> None:
        self.id = id
        self.name = name
        self._backend = backend if backend is not None else CpuStreamBackend(name)
        lock = self._backend.lock
        # a host stream's own lock: the submission path takes it without a Python call
        self._lock = lock if lock is not None else _core.StreamLock()
        self._inflight: collections.deque = collections.deque()
        # Host-side line in front of the bounded stream, in submission order: work items
        # submitted with park=True beyond the in-flight limit, and the event records /
        # waits submitted after them (so that they keep their place). See _unpark.
        self._parked: collections.deque = collections.deque()
        self._limit: int | None = None
        self._closed = False
        self._fork_child = False   # set in a fork child (queues._pool's fork hook)
        self._finishing = None     # the item between _item_finished and its publication
        self._submitted = 0
        self._completed = 0
        self._failed = 0
        self._queue_wait = Histogram()
        self._exec = Histogram()
        if isinstance(self._backend, CpuStreamBackend):
            # a forgotten stream must not keep its worker; not at exit, though: an atexit
            # handler registered before this stream existed runs after finalize's own
            # exit hook and may still use the stream
            weakref.finalize(self, self._backend.stop).atexit = False

    # ---------------------------------------------------------------- properties

    @property
    def pending(self) -> int:
        """Work items submitted and not yet completed (in flight or parked)."""
        return len(self._inflight) + len(self._parked)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def backend(self) -> StreamBackend:
        """The execution backend."""
        return self._backend

    def __repr__(self) -> str:
        return f"<Stream {self.id} {self.name!r} pending={self.pending}>"

    # ---------------------------------------------------------------- submission
    # ``_try_submit(item, limit, park=False)`` is StreamCore's (C): enqueue ``item``
    # unless ``limit`` items are in flight, else return the oldest one; with ``park`` a
    # full stream takes it into the host-side line (launched by ``_unpark``).

    def _unpark(self) -> None:
        """Launch parked entries while there is room (called with the lock held)."""
        parked, limit = self._parked, self._limit
        while parked:
            kind, item = parked[0]
            if kind == "launch":
                if limit is not None and len(self._inflight) >= limit:
                    break
                self._inflight.append(item)
                try:
                    self._backend.launch(item)
                except Exception as exc:
                    # no submitter to raise to (a slot freed on a completing thread): a
                    # GPU launch that failed before enqueueing fails the item in its
                    # place, and the items finishing now still complete
                    if not isinstance(self._backend, _core.LaunchCore) or item._batch is not None:
                        raise
                    self._backend.fail_unlaunched(item, exc)
            elif kind == "record":
                self._backend.record(item)
            else:
                self._backend.wait(item)
                item = None
            parked.popleft()
            if item is not None and (item._waiters is not None or item._tevent is not None
                                     or item._callbacks):
                self._backend.watch(item)   # waited for while it was parked
        if parked and self._inflight:
            self._backend.watch(self._inflight[0])   # the next free slot unparks more

    def _item_finished(self, item: Completion, ok: bool) -> None:
        """Backend hook, before waiters wake: free the slot, count, time."""
        with self._lock:
            head = self._inflight.popleft()
            if head is not item:  # items finish in order on a stream
                self._inflight.appendleft(head)
                self._inflight.remove(item)
            if ok:
                self._completed += 1
            else:
                self._failed += 1
            if self._parked:
                self._unpark()
            wait_ms, exec_ms = item.queue_wait_ms, item.exec_ms
            if wait_ms is not None:
                self._queue_wait.record(wait_ms)
            if exec_ms is not None:
                self._exec.record(exec_ms)

    def _items_finished(self, items: list) -> None:
        """Backend hook for items finished together, in launch order (a GPU stream's
        completion batch), before their waiters wake: as ``_item_finished``, one lock."""
        waits, execs = [], []
        wait, exec_ = waits.append, execs.append
        work = failed = 0
        lock = self._lock
        lock.acquire()
        try:
            inflight = self._inflight
            popleft = inflight.popleft
            for item in items:
                if item._control:
                    continue
                work += 1
                head = popleft()
                if head is not item:
                    inflight.appendleft(head)
                    inflight.remove(item)
                if item._error is not None:
                    failed += 1
                started = item.started_at
                if started is not None:
                    if item.submitted_at is not None:
                        wait((started - item.submitted_at) * 1e3)
                    if item.finished_at is not None:
                        exec_((item.finished_at - started) * 1e3)
            self._failed += failed
            self._completed += work - failed
            self._queue_wait.record_many(waits)
            self._exec.record_many(execs)
            if self._parked:
                self._unpark()
        finally:
            lock.release()

    def _oldest(self) -> Completion | None:
        with self._lock:
            if self._inflight:
                return self._inflight[0]
            return self._parked[0][1] if self._parked else None

    # ---------------------------------------------------------------- events

    def record_event(self) -> "Event":
        """Return an :class:`Event` that completes when all work submitted so far has.

        Raises
        ------
        DeviceError
            The stream is closed.
        """
        event = Event()
        event.record(self)
        return event

    def wait_event(self, event: "Event") -> None:
        """Make work submitted after this call wait until ``event`` is done.

        Blocks neither the caller nor other streams: only this stream's later items wait.

        Raises
        ------
        DeviceError
            The stream is closed.
        """
        if not isinstance(event, Event):
            raise DeviceError(f"stream '{self.name}': wait_event takes an Event (from "
                              f"stream.record_event()); got {type(event).__name__}",
                              code="INVALID_VALUE")
        marker = event._marker
        with self._lock:
            if self._closed:
                raise DeviceError(f"stream '{self.name}': wait_event after close")
            if marker is None or marker._state == _DONE or marker.stream is self:
                return  # never recorded, already complete, or ordered by this stream
            if self._parked:
                self._parked.append(("wait", marker))
            else:
                self._backend.wait(marker)

    def _record(self, marker: Completion) -> None:
        with self._lock:
            if self._closed:
                raise DeviceError(f"stream '{self.name}': record_event after close")
            marker.stream = self
            marker.submitted_at = time.perf_counter()
            if self._parked:
                self._parked.append(("record", marker))
            else:
                self._backend.record(marker)

    # ---------------------------------------------------------------- metrics, close

    def metrics(self) -> dict:
        """Plain dict: id, name, submitted, completed, failed, in_flight, queue_wait_ms, exec_ms."""
        with self._lock:
            return self._metrics_locked()

    def _metrics_and_histograms(self) -> tuple[dict, Histogram, Histogram]:
        """:meth:`metrics` and copies of the two histograms, read under one hold of the
        lock (the pool sums the histograms of several streams)."""
        with self._lock:
            return self._metrics_locked(), self._queue_wait.copy(), self._exec.copy()

    def _metrics_locked(self) -> dict:
        return {
            "id": self.id,
            "name": self.name,
            "submitted": self._submitted,
            "completed": self._completed,
            "failed": self._failed,
            "in_flight": len(self._inflight),
            "parked": len(self._parked),
            "queue_wait_ms": self._queue_wait.summary(),
            "exec_ms": self._exec.summary(),
        }

    def close(self) -> None:
        """Stop accepting work, finish what was submitted, release the worker; idempotent.
        In a fork child of the process that made it, nothing (closed there by the fork
        hook, with no worker; its lock may be held by a parent thread that is gone)."""
        if self._fork_child:
            return
        with self._lock:
            self._closed = True
            # Draining: whatever waits in the host-side line goes to the worker now, ahead
            # of its stop, so that nothing submitted is lost.
            self._limit = None
            self._unpark()
            if isinstance(self._backend, _core.HostLaunchCore):
                self._backend.stop()     # behind what waits for an inline item to finish
        self._backend.close()


# ==================================================================== event

def _noop() -> None:
    return None


class Event:
    """Marks a point in a stream: done when all work submitted before it has finished.

    Obtain one from :meth:`Stream.record_event` (or ``Event().record(stream)``). An event
    never recorded counts as done.
    """

    __slots__ = ("_marker",)

    def __init__(self) -> None:
        self._marker: Completion | None = None

    def record(self, stream: Stream) -> "Event":
        """(Re)record on ``stream``: capture all work submitted to it so far; return self."""
        marker = Completion(_noop, label=f"event on stream '{stream.name}'", _control=True)
        stream._record(marker)
        self._marker = marker
        return self

    @property
    def stream(self) -> Stream | None:
        """The stream of the latest record, or None."""
        return self._marker.stream if self._marker is not None else None

    def is_done(self) -> bool:
        """True when the work before the event has finished (or it was never recorded)."""
        marker = self._marker
        return marker is None or marker.done()

    def synchronize(self, timeout: float | None = None) -> None:
        """Block the calling thread until done.

        Raises
        ------
        TimeoutError
            Not done after ``timeout`` seconds.
        """
        marker = self._marker
        if marker is not None and not marker.wait(timeout):
            raise TimeoutError(f"event on stream '{marker.stream.name}': not complete "
                               f"after {timeout} s")

    async def wait(self) -> None:
        """Wait in the current task (asyncio or trio) until done; cancellable."""
        marker = self._marker
        if marker is None:
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            await marker._wait_done()

    def __repr__(self) -> str:
        return f"<Event {'done' if self.is_done() else 'pending'}>"
