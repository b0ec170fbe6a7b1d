"""Stress: thousands of tiny items on 4 streams, random awaiter cancellations, injected failures.

Every item runs exactly once (counted by its own side effect and by a done callback), ends
in exactly one state, and every awaiter that was not cancelled gets its value or its error.
Runs on asyncio and trio.
"""
from __future__ import annotations

import random
import threading

import anyio
import pytest

from hipdnn_async._errors import ExecutionError
from hipdnn_async.queues import StreamPool

pytestmark = pytest.mark.anyio

N_ITEMS = 3000
FAIL_EVERY = 7        # items with i % 7 == 3 raise
CANCEL_FRACTION = 0.2


def _fails(i: int) -> bool:
    return i % FAIL_EVERY == 3


async def test_many_items_cancellations_and_failures():
    rng = random.Random(1234)
    runs = [0] * N_ITEMS            # side effect of each fn: must end at exactly 1
    callbacks = [0] * N_ITEMS
    callback_lock = threading.Lock()
    outcomes: dict[int, object] = {}
    cancelled: set[int] = set()
    handles = [None] * N_ITEMS

    def make(i):
        def fn():
            runs[i] += 1
            if _fails(i):
                raise ValueError(f"injected {i}")
            return i * 3
        return fn

    def on_done(i):
        def cb(_completion):
            with callback_lock:
                callbacks[i] += 1
        return cb

    async def awaiter(i, cancel_after):
        handle = handles[i]
        if cancel_after is None:
            try:
                outcomes[i] = await handle
            except ExecutionError as exc:
                outcomes[i] = exc
            return
        with anyio.move_on_after(cancel_after) as scope:
            try:
                outcomes[i] = await handle
            except ExecutionError as exc:
                outcomes[i] = exc
        if scope.cancelled_caught:
            cancelled.add(i)

    async with StreamPool("cpu", n_streams=4, max_inflight=16) as pool:
        async with anyio.create_task_group() as tg:
            for i in range(N_ITEMS):
                handles[i] = await pool.submit(make(i), label=f"stress item {i}",
                                               keepalive=(i,))
                handles[i].add_done_callback(on_done(i))
                cancel_after = rng.choice((0, 0.0005)) if rng.random() < CANCEL_FRACTION \
                    else None
                tg.start_soon(awaiter, i, cancel_after)
        await pool.synchronize()
        metrics = pool.metrics()

    n_fail = sum(_fails(i) for i in range(N_ITEMS))
    assert cancelled  # move_on_after(0) always cancels: the path was exercised
    assert runs == [1] * N_ITEMS
    assert callbacks == [1] * N_ITEMS
    assert all(h.done() for h in handles)
    for i, h in enumerate(handles):
        err = h.exception()
        if _fails(i):
            assert isinstance(err, ExecutionError) and f"stress item {i}:" in str(err)
        else:
            assert err is None and h.result() == i * 3
    for i in range(N_ITEMS):
        if i in cancelled:
            assert i not in outcomes
            continue
        assert i in outcomes, f"awaiter of item {i} got nothing"
        if _fails(i):
            assert isinstance(outcomes[i], ExecutionError)
            assert f"injected {i}" in str(outcomes[i])
        else:
            assert outcomes[i] == i * 3
    assert metrics["submitted"] == N_ITEMS
    assert (metrics["completed"], metrics["failed"]) == (N_ITEMS - n_fail, n_fail)
    assert metrics["in_flight"] == 0
    assert sum(s["submitted"] for s in metrics["streams"]) == N_ITEMS
    assert all(s["submitted"] > 0 for s in metrics["streams"])
    assert metrics["exec_ms"]["count"] == N_ITEMS


async def test_threads_and_loop_submit_together():
    """A plain thread with submit_blocking and the loop with submit share one pool."""
    n = 400
    with_thread = []
    async with StreamPool("cpu", n_streams=2, max_inflight=4) as pool:
        def thread_main():
            hs = [pool.submit_blocking(lambda i=i: i) for i in range(n)]
            with_thread.extend(h.result(timeout=10) for h in hs)

        t = threading.Thread(target=thread_main)
        t.start()
        values = [await (await pool.submit(lambda i=i: -i)) for i in range(n)]
        await anyio.to_thread.run_sync(t.join, 10)
    assert values == [-i for i in range(n)]
    assert with_thread == list(range(n))
