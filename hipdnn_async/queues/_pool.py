"""StreamPool: the per-device set of streams, with submission and backpressure."""
from __future__ import annotations

import os
import queue
import sys
import threading
import time
import weakref

import anyio
import anyio.lowlevel
import anyio.to_thread

from .._errors import DeviceError
from ._completion import Completion, _exit_fork_child
from . import _core
from ._metrics import Histogram, _copy_summary
from ._stream import CpuStreamBackend, Stream, StreamBackend

_submit_now = _core.submit_now   # bound once: they are on the submission path
_run_inline = _core.run_inline
_least_loaded = _core.least_loaded

__all__ = ["StreamPool", "DEFAULT_MAX_INFLIGHT", "MAX_INFLIGHT", "MAX_STREAMS", "INLINE_MAX_S"]

DEFAULT_MAX_INFLIGHT = 64  # work items in flight per stream before submit waits
# The C submission core (queues._core) compares in-flight counts with max_inflight as a
# Py_ssize_t: a larger limit would raise OverflowError on every submit.
MAX_INFLIGHT = sys.maxsize
# Streams per device at most. A CPU stream is a worker thread (and a GPU stream a vendor
# stream, handle, workspace and completion thread): 20,000 of them (issue 10) exhaust the
# process long before they help; 256 is far beyond any core count they could use.
MAX_STREAMS = 256
# Work measured to take at most this long (seconds, the plan's recent mean) may run on the
# submitting thread when its host stream is idle (``plan.submit``, ``await plan.execute``):
# a hand-off to the worker and back costs 10-50 us of host time on 2-4 cores, and an event
# loop blocked this long still answers within a fraction of a millisecond.
INLINE_MAX_S = 100e-6


def _default_n_streams() -> int:
    return max(2, min(4, os.cpu_count() or 1))


# Host pools of this process. A fork child has none of their worker threads (only the
# forking thread survives fork), so work queued there would wait forever: in the child,
# each is closed with the parent's pid as the reason (its submissions raise DeviceError),
# and the work the parent had in flight, parked or queued on it (event markers too)
# finishes there with a DeviceError (its handles would otherwise never be done: the
# parent runs that work). Locks another parent thread held at the fork stay held in the
# child: the completion-state lock is unheld by ``_fork``'s hook (registered first, so it
# runs before this one), the streams' own locks are made anew here, and closing such a
# pool there takes none of its locks (close, aclose). An item a worker was finishing at
# the fork (out of the in-flight list, not yet published: Stream._finishing) is failed
# too. A handle's threading.Event is dropped before it is failed: the threads that waited
# on it are gone, and a lock inside it may be held.
_host_pools: "weakref.WeakSet[StreamPool]" = weakref.WeakSet()


def _close_host_pools_in_fork_child() -> None:
    parent = os.getppid()
    for pool in list(_host_pools):
        if not pool._closed:
            pool._forked_from = parent
        pool._closed = True
        pool._fork_child = True
        for s in pool.streams:          # nothing to synchronize or drain: no workers
            s._closed = True
            s._fork_child = True
            if s._backend.lock is None:     # the stream's own lock (metrics take it)
                s._lock = _core.StreamLock()
            items = list(s._inflight) + [item for _, item in s._parked]
            if s._finishing is not None:    # forked between leaving _inflight and done
                items.append(s._finishing)
            items += _launched_in_child(s._backend)
            s._inflight.clear()
            s._parked.clear()
            for item in items:
                if not item.done():
                    item._tevent = None
                    item._publish(None, DeviceError(
                        f"{item.describe()}: submitted in process {parent} before a fork; "
                        "it runs there, not in this fork child (the stream's worker does "
                        "not survive fork)", code="INVALID_VALUE"))
            if getattr(s._backend, "_thread", None) is threading.current_thread():
                # forked on this worker (in a done callback): the child ends when that
                # callback returns or raises, as Python would (_completion._call_back);
                # marked after the callbacks of the failed items above have run
                threading.current_thread().hipdnn_async_fork_child = True
                s._backend._queue.put(_ExitForkChild())


def _launched_in_child(backend) -> list:
    """The completions a host backend's worker had not reached at the fork, taken out of
    its queue and its line behind an inline item (event markers and waits among them:
    they are on no in-flight list)."""
    if not isinstance(backend, _core.HostLaunchCore):
        return []
    out = [item for item in backend._held if isinstance(item, Completion)]
    backend._held.clear()
    while True:
        try:
            item = backend._queue.get_nowait()
        except queue.Empty:
            return out
        if isinstance(item, Completion):
            out.append(item)


class _ExitForkChild:
    """The last entry of a worker that a fork child inherited as its only thread (forked
    in a done callback): once the callback returns, the child exits with status 0, its
    stdout and stderr flushed. Its loop would otherwise wait on the queue forever, and a
    thread that ends there ends the process without Python's finalization, in C exit
    handlers (GNU OpenMP's) that wait for threads the child does not have."""

    __slots__ = ()

    def _run(self) -> None:
        _exit_fork_child(None)


os.register_at_fork(after_in_child=_close_host_pools_in_fork_child)


class StreamPool:
    """The streams of one device; submits work items with per-stream backpressure.

    Parameters
    ----------
    device_name : str
        The device, e.g. ``"cpu"``; streams are named ``"<device_name>:s<i>"``.
    n_streams : int, optional
        Number of streams, 1 to ``MAX_STREAMS`` (256). Default ``min(4, os.cpu_count())``,
        at least 2.
    max_inflight : int, optional
        Work items submitted and not completed per stream before ``submit`` waits, 1 to
        ``MAX_INFLIGHT`` (``sys.maxsize``, the C core's counter). Default 64.
    backend_factory : callable, optional
        ``backend_factory(stream_name) -> StreamBackend``; default a CPU worker thread per
        stream.

    Raises
    ------
    ValueError
        ``n_streams`` outside [1, 256] or ``max_inflight`` outside [1, ``MAX_INFLIGHT``].

    Notes
    -----
    ``async with`` / ``with`` close the pool on exit (draining submitted work).
    """

    def __init__(self, device_name: str, n_streams: int | None = None,
                 max_inflight: int | None = None, *, backend_factory=None) -> None:
        if n_streams is None:
            n_streams = _default_n_streams()
        if max_inflight is None:
            max_inflight = DEFAULT_MAX_INFLIGHT
        if int(n_streams) != n_streams or not 1 <= n_streams <= MAX_STREAMS:
            raise ValueError(f"StreamPool '{device_name}': n_streams = {n_streams!r}; "
                             f"need an int in [1, {MAX_STREAMS}]")
        if int(max_inflight) != max_inflight or not 1 <= max_inflight <= MAX_INFLIGHT:
            raise ValueError(f"StreamPool '{device_name}': max_inflight = {max_inflight!r}; "
                             f"need an int in [1, {MAX_INFLIGHT}]")
        self.device_name = device_name
        self.max_inflight = int(max_inflight)
        streams = []
        try:
            for i in range(int(n_streams)):
                name = f"{device_name}:s{i}"
                backend: StreamBackend | None = backend_factory(name) if backend_factory else None
                streams.append(Stream(name, id=i, backend=backend))
        except BaseException:
            for s in streams:  # a pool that could not start leaves no workers behind
                s.close()
            raise
        self.streams: tuple[Stream, ...] = tuple(streams)
        self._rr = 0
        self._closed = False
        self._forked_from = None         # the parent's pid, in a fork child
        self._fork_child = False         # inherited through a fork (open then or not)
        self._close_lock = threading.Lock()
        self._cross_waiter = None    # the stream whose callback waits for the others
        if all(isinstance(s._backend, CpuStreamBackend) for s in self.streams):
            _host_pools.add(self)
        self._created_at = time.perf_counter()

    def __repr__(self) -> str:
        return (f"<StreamPool {self.device_name!r} streams={len(self.streams)} "
                f"max_inflight={self.max_inflight}{' closed' if self._closed else ''}>")

    @property
    def closed(self) -> bool:
        """True once close started."""
        return self._closed

    # ---------------------------------------------------------------- choosing a stream

    def pick(self, stream: Stream | int | None = None) -> Stream:
        """Return the given stream (a Stream of this pool or its index) or the least loaded.

        Ties between equally loaded streams go round robin.

        Raises
        ------
        ValueError
            ``stream`` is not a stream of this pool, or the index is out of range.
        """
        streams = self.streams
        if stream is None:
            best = _least_loaded(streams, self._rr)
            self._rr = (best.id + 1) % len(streams)
            return best
        if type(stream) is int and 0 <= stream < len(streams):    # the common index
            return streams[stream]
        if isinstance(stream, Stream):
            if stream.id < len(streams) and streams[stream.id] is stream:
                return stream
            raise ValueError(f"StreamPool '{self.device_name}': stream {stream.name!r} "
                             "belongs to another pool")
        if isinstance(stream, int) and not isinstance(stream, bool):
            if 0 <= stream < len(streams):
                return streams[stream]
            raise ValueError(f"StreamPool '{self.device_name}': stream index {stream} "
                             f"outside [0, {len(streams) - 1}]")
        raise ValueError(f"StreamPool '{self.device_name}': stream must be a Stream, an int "
                         f"index or None; got {type(stream).__name__}")

    # ---------------------------------------------------------------- submission

    def _check_open(self, label: str) -> None:
        if self._closed:
            what = f" {label}" if label else ""
            reason = self.fork_reason() or "after close; open a new device"
            raise DeviceError(f"StreamPool '{self.device_name}': submit{what} {reason}",
                              code="INVALID_VALUE")

    def fork_reason(self) -> str | None:
        """Why this pool takes no work in a fork child of the process that opened it, or
        None (not inherited through a fork); for error messages."""
        if self._forked_from is None:
            return None
        return (f"in a fork child: the device was opened in process {self._forked_from}, "
                "and its stream workers do not survive fork; open a new Device in this "
                "process (or start worker processes with multiprocessing's 'spawn' or "
                "'forkserver' method)")

    async def submit(self, fn, *, keepalive=(), stream: Stream | int | None = None,
                     label: str = "", recorder=None) -> Completion:
        """Enqueue ``fn()`` on a stream and return its :class:`Completion` at once.

        Waits first (asynchronously, cancellably) while the chosen stream already has
        ``max_inflight`` items in flight. Cancelled while waiting, nothing is enqueued.

        Parameters
        ----------
        fn : callable
            Runs on the stream's worker; should release the GIL in its heavy parts.
        keepalive : object, optional
            Referenced by the queue until ``fn`` has finished executing.
        stream : Stream or int, optional
            Target stream; default the least loaded.
        label : str, optional
            Names the item in errors, e.g. ``"plan 'conv1' (engine CPU_ENGINE)"``.
        recorder : object, optional
            A profile's record, attached to the item before it is enqueued
            (``_core.submit_now`` says how). Default None: nothing recorded.

        Raises
        ------
        DeviceError
            The pool is closed.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open(label)
        item = Completion(fn, keepalive=keepalive, label=label)
        if recorder is not None:
            recorder.attach(item)
        fn = keepalive = None  # only the item holds them: a retained traceback must not
        return await self._enqueue(item, stream, label)

    async def _enqueue(self, item: Completion, stream, label: str) -> Completion:
        """``submit``'s wait for a slot and enqueue of ``item``."""
        try:
            while True:
                oldest = self.pick(stream)._try_submit(item, self.max_inflight)
                if oldest is None:
                    return item
                await oldest._wait_done()  # in-order streams: the oldest frees a slot
                self._check_open(label)
        except BaseException:
            item._drop()  # never enqueued: release fn and keepalive now
            raise

    def submit_nowait(self, fn, *, keepalive=(), stream: Stream | int | None = None,
                      label: str = "") -> Completion:
        """Enqueue without waiting; raise ``anyio.WouldBlock`` if the stream is full.

        With ``stream=None`` it is full only when every stream is.

        Raises
        ------
        anyio.WouldBlock
            The chosen stream has ``max_inflight`` items in flight.
        DeviceError
            The pool is closed.
        """
        self._check_open(label)
        item = Completion(fn, keepalive=keepalive, label=label)
        target = self.pick(stream)
        if target._try_submit(item, self.max_inflight) is not None:
            raise anyio.WouldBlock(f"stream '{target.name}': {self.max_inflight} items "
                                   "in flight")
        return item

    def submit_now(self, fn, *, keepalive=(), stream: Stream | int | None = None,
                   label: str = "") -> Completion:
        """Enqueue at once and never wait: beyond ``max_inflight`` the item waits host-side,
        in submission order, and is launched when a slot frees.

        Raises
        ------
        DeviceError
            The pool is closed.
        """
        if self._closed:
            self._check_open(label)
        item = Completion(fn, keepalive=keepalive, label=label)
        self.pick(stream)._try_submit(item, self.max_inflight, park=True)
        return item

    def _submit_now(self, fn, keepalive, stream: Stream | None, label: str,
                    timer=None, recorder=None) -> Completion:
        """``submit_now`` for the library's own hot paths (``plan.submit``, ``step.submit``):
        ``stream`` is a Stream of this pool already (``Device._stream``) or None.

        ``timer`` (a host plan's ``_core.ExecTimer``): work measured to take at most
        ``INLINE_MAX_S`` runs at once on the calling thread when the stream is idle
        (``_core.run_inline``), and the handle comes back done. ``recorder``: attached to
        the item, wherever it runs (``_core.submit_now``)."""
        if self._closed:
            self._check_open(label)
        if stream is None:
            stream = self.pick()
        if timer is not None:
            item = _run_inline(Completion, stream, fn, keepalive, label, timer, INLINE_MAX_S,
                               recorder)
            if item is not None:
                return item
        return _submit_now(Completion, stream, fn, keepalive, label, self.max_inflight, timer,
                           recorder)

    def _run_sync(self, fn, keepalive, stream: Stream | None, label: str, timer,
                  recorder=None) -> Completion:
        """The finished item of ``fn`` (``execute_sync``, ``replay_sync``): run at once on
        the calling thread when the host stream is idle (it blocks until done either way),
        else submitted as ``submit_blocking`` and waited for; ``recorder`` as
        ``_submit_now``."""
        if self._closed:
            self._check_open(label)
        me = threading.current_thread()
        if stream is None:
            stream = self.pick()
            if getattr(stream._backend, "_thread", None) is me:
                # a done callback's execution: any other stream, not the one running it
                stream = next((s for s in self.streams
                               if getattr(s._backend, "_thread", None) is not me), stream)
        if timer is not None:
            item = _run_inline(Completion, stream, fn, keepalive, label, timer, -1.0,
                               recorder)
            if item is not None:
                return item
        if getattr(stream._backend, "_thread", None) is me:
            # refused before anything is enqueued (Completion._refuse_own_worker's case)
            raise DeviceError(
                f"{label}: a blocking execution on stream '{stream.name}' from the thread "
                "that runs it (a done callback runs there) would wait for itself: the "
                "stream's items run one after another on that thread; submit it, or "
                "choose another stream")
        item = Completion(fn, keepalive=keepalive, label=label)
        item._timer = timer
        if recorder is not None:
            recorder.attach(item)
        fn = keepalive = None
        self._enqueue_blocking(item, stream, label)
        item.wait()
        return item

    async def _run(self, fn, keepalive, stream: Stream | None, label: str, timer,
                   recorder=None) -> Completion:
        """The finished item of ``fn`` (``await plan.execute``, ``step.replay``): run at
        once on the loop's thread when the host stream is idle and the work measured to
        take at most ``INLINE_MAX_S``, else submitted (waiting for a slot) and awaited;
        ``recorder`` as ``_submit_now``.

        Cancelled before it runs, nothing is enqueued; cancelled while awaiting the
        worker, it returns at once and the work still completes."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        if timer is not None:
            if self._closed:
                self._check_open(label)
            item = _run_inline(Completion, self.pick() if stream is None else stream, fn,
                               keepalive, label, timer, INLINE_MAX_S, recorder)
            if item is not None:
                return item
        self._check_open(label)
        item = Completion(fn, keepalive=keepalive, label=label)
        item._timer = timer
        if recorder is not None:
            recorder.attach(item)
        fn = keepalive = None
        await self._enqueue(item, stream, label)
        await item._wait_done()
        return item

    def submit_blocking(self, fn, *, keepalive=(), stream: Stream | int | None = None,
                        label: str = "", timeout: float | None = None) -> Completion:
        """As :meth:`submit`, for threads without an event loop: blocks while full.

        Raises
        ------
        TimeoutError
            Still full after ``timeout`` seconds (nothing enqueued).
        DeviceError
            The pool is closed.
        """
        self._check_open(label)
        item = Completion(fn, keepalive=keepalive, label=label)
        fn = keepalive = None
        return self._enqueue_blocking(item, stream, label, timeout)

    def _enqueue_blocking(self, item: Completion, stream, label: str,
                          timeout: float | None = None) -> Completion:
        """``submit_blocking``'s wait for a slot and enqueue of ``item``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                oldest = self.pick(stream)._try_submit(item, self.max_inflight)
                if oldest is None:
                    return item
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not oldest.wait(left):
                    raise TimeoutError(f"StreamPool '{self.device_name}': "
                                       f"{item.describe()}: streams still full after "
                                       f"{timeout} s")
                self._check_open(label)
        except BaseException:
            item._drop()  # never enqueued
            raise

    # ---------------------------------------------------------------- waiting, closing

    def _record_all(self):
        if all(s.closed for s in self.streams):
            return []
        return [s.record_event() for s in self.streams if not s.closed]

    async def synchronize(self) -> None:
        """Wait until everything submitted so far has finished (errors are not raised)."""
        for event in self._record_all():
            await event.wait()

    def on_worker(self) -> bool:
        """Whether the calling thread is one of this pool's stream workers (a work item or
        a done-callback runs there): waiting on it for the work submitted to its stream
        would wait for itself."""
        me = threading.current_thread()
        return any(getattr(s._backend, "_thread", None) is me for s in self.streams)

    def synchronize_blocking(self, timeout: float | None = None, *,
                             skip_own: bool = False) -> None:
        """Block the calling thread until everything submitted so far has finished;
        ``skip_own``: not the work of the stream whose thread this is (a done callback:
        its stream's later items cannot run before it returns)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        me = threading.current_thread()
        own = [s for s in self.streams if getattr(s._backend, "_thread", None) is me]
        if skip_own and own:
            events = [s.record_event() for s in self.streams if not s.closed and s not in own]
            # a worker waiting for the other streams while another worker of the pool
            # waits for its stream would wait forever: one such wait at a time
            with self._close_lock:
                if self._cross_waiter is not None:
                    raise DeviceError(
                        f"StreamPool '{self.device_name}': a done callback on stream "
                        f"'{own[0].name}' waits for the other streams while one on stream "
                        f"'{self._cross_waiter}' waits for its stream: neither could go on; "
                        "copy after the callbacks return (or read the array's memory in "
                        "the callback)")
                self._cross_waiter = own[0].name
            try:
                for event in events:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    event.synchronize(left)
            finally:
                with self._close_lock:
                    self._cross_waiter = None
            return
        for event in self._record_all():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            event.synchronize(left)

    def close(self) -> None:
        """Stop accepting work, drain in-flight work, join the workers; idempotent. In a
        fork child of the process that made it nothing: the fork hook closed it."""
        if self._fork_child:
            return
        with self._close_lock:
            self._closed = True
        for s in self.streams:
            s.close()

    async def aclose(self) -> None:
        """Async :meth:`close`: drain without blocking the loop; shielded from cancellation."""
        if self._fork_child:
            return
        with self._close_lock:
            self._closed = True
        with anyio.CancelScope(shield=True):
            await self.synchronize()
            await anyio.to_thread.run_sync(self.close)

    def __enter__(self) -> "StreamPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self) -> "StreamPool":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # ---------------------------------------------------------------- metrics

    def metrics(self) -> dict:
        """Plain dict of counters and latency summaries, for the pool and per stream.

        Keys: ``device``, ``n_streams``, ``max_inflight``, ``closed``, ``submitted``,
        ``completed`` (finished without error), ``failed``, ``in_flight``,
        ``queue_wait_ms`` and ``exec_ms`` (each ``count``, ``mean``, ``min``, ``max``,
        ``p50``, ``p90``, ``p99`` in ms and non-empty ``buckets`` as (upper edge ms,
        count)), and ``streams``: a list of the same per stream with ``id`` and ``name``.
        """
        streams = self.streams
        totals = {"submitted": 0, "completed": 0, "failed": 0, "in_flight": 0, "parked": 0}
        if len(streams) == 1:
            # the pool-wide summaries are the stream's own: copied, not recomputed
            m = streams[0].metrics()
            per_stream = [m]
            wait_ms, exec_ms = _copy_summary(m["queue_wait_ms"]), _copy_summary(m["exec_ms"])
        else:
            per_stream, waits, execs = [], [], []
            for s in streams:
                m, wait_h, exec_h = s._metrics_and_histograms()
                per_stream.append(m)
                waits.append(wait_h)
                execs.append(exec_h)
            wait_ms = Histogram.merged(waits).summary()
            exec_ms = Histogram.merged(execs).summary()
        for m in per_stream:
            for key in totals:
                totals[key] += m[key]
        return {
            "device": self.device_name,
            "n_streams": len(streams),
            "max_inflight": self.max_inflight,
            "closed": self._closed,
            **totals,
            "queue_wait_ms": wait_ms,
            "exec_ms": exec_ms,
            "streams": per_stream,
        }
