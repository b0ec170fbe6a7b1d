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


def _rows(pending) -> int:
    return sum(r.n for r in pending if not r.cancelled)


def _drop_cancelled(pending) -> None:
    while pending and pending[0].cancelled:
        pending.popleft()
    if any(r.cancelled for r in pending):
        kept = [r for r in pending if not r.cancelled]
        pending.clear()
        pending.extend(kept)


class Dispatcher:
    """The running part of a batcher, made by ``DynamicBatcher.__aenter__``: reads
    requests from `recv`, forms batches (``collect``) and runs them in task group `tg`
    (``run_batch``), at most `max_concurrent_batches` at once, on `lanes` with the
    plans of `plans` (``_buckets.PlanCache``), counting in `metrics`.

    Attributes
    ----------
    inflight : int
        Batches started and not finished.
    idle : anyio.Event
        Set while no batch is in flight (replaced when one starts).
    drained : anyio.Event
        Set once the queue is closed and every queued request was batched or failed.
    """

    def __init__(self, recv, tg, *, roles, lanes, plans, metrics, buckets,
                 max_batch_size: int, max_delay_ms: float, max_concurrent_batches: int):
        self._recv = recv
        self._tg = tg
        self._roles = roles
        self._lanes = lanes
        self._plans = plans
        self._metrics = metrics
        self._buckets = buckets
        self._max_rows = max_batch_size
        self._delay = max_delay_ms / 1000.0
        self._slots = max_concurrent_batches
        self.inflight = 0
        self.idle = anyio.Event()
        self.idle.set()
        self.drained = anyio.Event()

    def _drain_nowait(self, pending) -> bool:
        """Move every request already queued into `pending`; True when the queue closed."""
        while True:
            try:
                pending.append(self._recv.receive_nowait())
            except anyio.WouldBlock:
                return False
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return True

    async def collect(self) -> None:
        """Group queued requests into batches and start them, until the queue closes."""
        pending: collections.deque[Request] = collections.deque()
        slots = anyio.Semaphore(self._slots)
        closed = False
        delay = self._delay
        try:
            while True:
                _drop_cancelled(pending)
                if not pending:
                    if closed:
                        break
                    try:
                        pending.append(await self._recv.receive())
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        closed = True
                        continue
                # The first waiting request opens the window.
                deadline = pending[0].window + delay
                while not closed and _rows(pending) < self._max_rows:
                    closed = self._drain_nowait(pending)
                    if closed or _rows(pending) >= self._max_rows:
                        break
                    remaining = deadline - anyio.current_time()
                    if remaining <= 0:
                        break
                    with anyio.move_on_after(remaining):
                        try:
                            pending.append(await self._recv.receive())
                        except (anyio.EndOfStream, anyio.ClosedResourceError):
                            closed = True
                await slots.acquire()
                # Requests that came while waiting for a slot join this batch.
                if not closed:
                    closed = self._drain_nowait(pending)
                _drop_cancelled(pending)
                batch, rows = [], 0
                while pending and rows + pending[0].n <= self._max_rows:
                    req = pending.popleft()
                    batch.append(req)
                    rows += req.n
                if not batch:
                    slots.release()
                    continue
                lane = self._lanes.pick()
                if lane is None:
                    err = self._lanes.no_lane_error()
                    self._metrics.failed()
                    for req in batch:
                        fail(req, err)
                    slots.release()
                    continue
                if self.inflight == 0:
                    self.idle = anyio.Event()
                self.inflight += 1
                lane.inflight += 1
                self._tg.start_soon(self.run_batch, batch, rows, slots, lane)
        finally:
            err = DeviceError("DynamicBatcher: closed before this request ran")
            for req in pending:
                fail(req, err)
            try:
                while True:
                    fail(self._recv.receive_nowait(), err)
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                pass
            self._recv.close()
            self.drained.set()

    async def _pack_on(self, lane, size: int, batch: list[Request], rows: int):
        """(bucket, pack, host outputs or None, staging or None) of a batch on `lane`: its
        plan for bucket `size` and its variant pack."""
        bucket = await self._plans.get(lane, size)
        if lane.host:
            pack, outs = pack_host(lane, bucket, batch, rows, self._roles)
            return bucket, pack, outs, None
        staging = bucket.idle.pop() if bucket.idle else new_staging(lane, bucket, self._roles)
        pack = await pack_staged(lane, bucket, staging, batch, rows, self._roles)
        return bucket, pack, None, staging

    async def run_batch(self, batch: list[Request], rows: int, slots, lane) -> None:
        """Run one batch on `lane`'s plan for its bucket and hand each caller its rows."""
        started = time.perf_counter()
        prof = None
        try:
            size = bucket_for(self._buckets, rows)
            for req in batch:
                self._metrics.queue_wait_ms.append((started - req.enqueued) * 1e3)
            retried = False
            try:
                while True:
                    try:
                        bucket, pack, outs, staging = await self._pack_on(lane, size, batch,
                                                                          rows)
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
                if staging is not None:
                    outs = {k: await copy_out(lane, k, staging.device[k]) for k in self._roles.outputs}
                    # Reused only after a clean run: a cancelled execution may still write.
                    bucket.idle.append(staging)
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
                    fail(req, exc)
                return
            self._metrics.succeeded(lane, rows, size)
            lo = 0
            for req in batch:
                if not req.cancelled:
                    req.result = {k: outs[k][lo:lo + req.n].copy(order="K")
                                  for k in self._roles.outputs}
                req.done.set()
                lo += req.n
        finally:
            if prof is not None:
                _prof.batch_end(prof, batch)
            # Cancelled (the batcher was torn down): nobody may be left waiting.
            for req in batch:
                fail(req, DeviceError("DynamicBatcher: closed while this request ran"))
            slots.release()
            lane.inflight -= 1
            self.inflight -= 1
            if self.inflight == 0:
                self.idle.set()
