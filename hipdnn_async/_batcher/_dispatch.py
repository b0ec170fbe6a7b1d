"""Batch forming and dispatch: the collector task groups queued requests into batches
(the first waiting request opens a window, flushed at ``max_batch_size`` rows or after
``max_delay_ms``) and runs each on a lane's plan for its bucket, handing every caller its
own rows; a batch whose lane closed before its execution started runs once more on
another lane."""
from __future__ import annotations

import collections
import time

import anyio

from .._errors import DeviceError, ExecutionError, HipdnnError
from ..profiler import _state as _prof
from ._buckets import bucket_for
from ._requests import Request, fail
from ._staging import copy_out, new_staging, pack_host, pack_staged

__all__ = ["Dispatcher"]


def _drop_cancelled(pending) -> int:
    """Remove the cancelled requests of `pending`; return the rows removed."""
    dropped = 0
    while pending and pending[0].cancelled:
        dropped += pending.popleft().n
    if any(r.cancelled for r in pending):
        kept = [r for r in pending if not r.cancelled]
        dropped += sum(r.n for r in pending if r.cancelled)
        pending.clear()
        pending.extend(kept)
    return dropped


class Dispatcher:
    """The running part of a batcher, made by ``DynamicBatcher.__aenter__``: takes
    requests (``put``), forms batches (``collect``) and runs them in task group `tg`
    (``run_batch``), at most `max_concurrent_batches` at once, on `lanes` with the
    plans of `plans` (``_buckets.PlanCache``), counting in `metrics`; `waits` are the
    loop's waiters (``_wake``).

    Requests wait in one queue read by the collector; a request wakes the collector only
    when it waits for that request: for the first one when the queue is empty, for the
    one that fills ``max_batch_size`` rows during a window.

    Attributes
    ----------
    inflight : int
        Batches started and not finished.
    idle : anyio.Event
        Set while no batch is in flight (replaced when one starts).
    drained : anyio.Event
        Set once the queue is closed and every queued request was batched or failed.
    """

    def __init__(self, tg, waits, *, roles, lanes, plans, metrics, buckets,
                 max_batch_size: int, max_delay_ms: float, max_concurrent_batches: int):
        self._tg = tg
        self.waits = waits
        self._wake = waits.wake
        self._roles = roles
        self._lanes = lanes
        self._plans = plans
        self._metrics = metrics
        self._buckets = buckets
        self._max_rows = max_batch_size
        self._delay = max_delay_ms / 1000.0
        self._slots = max_concurrent_batches
        self._single_out = len(roles.outputs) == 1
        self._queue: collections.deque[Request] = collections.deque()
        self._queued_rows = 0       # rows in the queue, cancelled requests' included
        self._cancelled = 0         # requests cancelled since the queue was last swept
        self._wakeup = None         # the collector's waiter while it waits
        self._want_rows = 1         # queued rows that wake it
        self._closed = False
        self.inflight = 0
        self.idle = anyio.Event()
        self.idle.set()
        self.drained = anyio.Event()

    # ------------------------------------------------------------------ the queue

    def put(self, req: Request) -> None:
        """Queue `req` for a batch (from the loop's thread; never blocks); fail it when
        the collector has ended."""
        if self._closed:
            fail(req, DeviceError("DynamicBatcher: closed before this request ran"),
                 self._wake)
            return
        self._queue.append(req)
        self._queued_rows += req.n
        w = self._wakeup
        if w is not None and self._queued_rows >= self._want_rows:
            self._wakeup = None
            self._wake(w)

    def close(self) -> None:
        """Take no more requests; the collector batches what is queued, then ends."""
        self._closed = True
        w = self._wakeup
        if w is not None:
            self._wakeup = None
            self._wake(w)

    async def _wait_for(self, rows: int) -> None:
        """Wait until `rows` rows are queued or the queue closes (a cancellation point)."""
        if self._queued_rows >= rows or self._closed:
            return
        self._want_rows = rows
        w = self._wakeup = self.waits.new()
        try:
            await self.waits.wait(w)
        finally:
            self._wakeup = None

    def cancel(self, req: Request) -> None:
        """The caller of `req` (queued or batched, not done) was cancelled: its rows are
        skipped if not batched yet."""
        req.cancelled = True
        self._cancelled += 1

    def _drop_cancelled(self) -> None:
        if self._cancelled:         # the queue is swept only after a cancellation
            self._cancelled = 0
            self._queued_rows -= _drop_cancelled(self._queue)

    def _full(self) -> bool:
        """Whether max_batch_size rows of callers not cancelled are queued."""
        if self._queued_rows < self._max_rows:
            return False
        self._drop_cancelled()
        return self._queued_rows >= self._max_rows

    async def collect(self) -> None:
        """Group queued requests into batches and start them, until the queue closes."""
        pending = self._queue
        slots = anyio.Semaphore(self._slots)
        delay, now = self._delay, self.waits.now
        try:
            while True:
                self._drop_cancelled()
                if not pending:
                    if self._closed:
                        break
                    self._queued_rows = 0       # (it is: the count can only lag behind)
                    await self._wait_for(1)
                    continue
                # The first waiting request opens the window.
                deadline = pending[0].window + delay
                while not self._closed and not self._full():
                    remaining = deadline - now()
                    if remaining <= 0:
                        break
                    with anyio.move_on_after(remaining):
                        await self._wait_for(self._max_rows)
                # Requests that come while waiting for a slot join this batch.
                await slots.acquire()
                self._drop_cancelled()
                batch, rows, max_rows = [], 0, self._max_rows
                while pending and rows + pending[0].n <= max_rows:
                    req = pending.popleft()
                    batch.append(req)
                    rows += req.n
                self._queued_rows -= rows
                if not batch:
                    slots.release()
                    continue
                lane = self._lanes.pick()
                if lane is None:
                    err = self._lanes.no_lane_error()
                    self._metrics.failed()
                    for req in batch:
                        fail(req, err, self._wake)
                    slots.release()
                    continue
                if self.inflight == 0:
                    self.idle = anyio.Event()
                self.inflight += 1
                lane.inflight += 1
                self._tg.start_soon(self.run_batch, batch, rows, slots, lane)
        finally:
            self._closed = True
            err = DeviceError("DynamicBatcher: closed before this request ran")
            while pending:
                fail(pending.popleft(), err, self._wake)
            self._queued_rows = 0
            self.drained.set()

    async def _pack_on(self, lane, size: int, batch: list[Request], rows: int):
        """(bucket, pack, host outputs or None, reusable buffers) of a batch on `lane`:
        its plan for bucket `size`, its variant pack, and the buffers handed back to the
        bucket after a clean run (``Bucket.idle``)."""
        bucket = await self._plans.get(lane, size)
        if lane.host:
            pack, outs, inputs = pack_host(lane, bucket, batch, rows, self._roles)
            return bucket, pack, outs, inputs
        staging = bucket.idle.pop() if bucket.idle else new_staging(lane, bucket, self._roles)
        pack = await pack_staged(lane, bucket, staging, batch, rows, self._roles)
        return bucket, pack, None, staging

    async def run_batch(self, batch: list[Request], rows: int, slots, lane) -> None:
        """Run one batch on `lane`'s plan for its bucket and hand each caller its rows."""
        started = time.perf_counter()
        prof = None
        wake = self._wake
        try:
            size = bucket_for(self._buckets, rows)
            self._metrics.queue_wait_ms.extend([(started - req.enqueued) * 1e3
                                                for req in batch])
            retried = False
            try:
                while True:
                    try:
                        bucket, pack, outs, reusable = await self._pack_on(lane, size,
                                                                           batch, rows)
                        break
                    except DeviceError:
                        # Nothing ran yet: a lane whose device was closed meanwhile hands
                        # the batch to another lane, once.
                        other = (None if retried or self._lanes.is_open(lane)
                                 else self._lanes.pick(exclude=lane))
                        if other is None:
                            raise
                        retried = True
                        lane.retried += 1
                        lane.inflight -= 1
                        lane = other
                        lane.inflight += 1
                if _prof.ON:    # the batch's record; the execution below serves it
                    prof = _prof.batch_begin(bucket.plan.graph.name, lane.device, batch, rows,
                                             size, started)
                t0 = time.perf_counter()
                await bucket.plan.execute(pack)
                self._metrics.executed(lane, (time.perf_counter() - t0) * 1e3)
                if not lane.host:
                    outs = {k: await copy_out(lane, k, reusable.device[k])
                            for k in self._roles.outputs}
                # Reused only after a clean run: a cancelled execution may still use them.
                bucket.idle.append(reusable)
            except Exception as exc:
                if not isinstance(exc, HipdnnError):
                    wrapped = ExecutionError(f"DynamicBatcher: batch of {rows} rows (bucket "
                                             f"{size}) failed: {type(exc).__name__}: {exc}")
                    wrapped.__cause__ = exc
                    exc = wrapped
                if isinstance(exc, DeviceError):
                    self._lanes.is_open(lane)       # a closed device leaves the dispatch
                self._metrics.failed(lane)
                for req in batch:
                    fail(req, exc, wake)
                return
            self._metrics.succeeded(lane, rows, size)
            # Each caller's rows are a view of the batch's output (fresh for each batch).
            lo = 0
            if self._single_out:
                out = outs[self._roles.outputs[0]]
                for req in batch:
                    hi = lo + req.n
                    req.result = out[lo:hi]
                    req.done = True
                    wake(req.waiter)
                    lo = hi
            else:
                names = self._roles.outputs
                for req in batch:
                    hi = lo + req.n
                    req.result = {k: outs[k][lo:hi] for k in names}
                    req.done = True
                    wake(req.waiter)
                    lo = hi
        finally:
            if prof is not None:
                _prof.batch_end(prof, batch)
            # Cancelled (the batcher was torn down): nobody may be left waiting.
            err = None
            for req in batch:
                if not req.done:
                    if err is None:
                        err = DeviceError("DynamicBatcher: closed while this request ran")
                    fail(req, err, wake)
            slots.release()
            lane.inflight -= 1
            self.inflight -= 1
            if self.inflight == 0:
                self.idle.set()
