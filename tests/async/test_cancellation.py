"""Cancellation: awaiters return promptly, work and its keepalive buffers stay with the queue.

Runs on asyncio and trio.
"""
from __future__ import annotations

import gc
import threading
import time
import weakref

import anyio
import numpy as np
import pytest
import sniffio

from hipdnn_async.queues import StreamPool

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pool():
    p = StreamPool("cpu", n_streams=2, max_inflight=4)
    yield p
    await p.aclose()


def _work_on(buf, gate, ran):
    """A work item that waits for the gate, then writes into buf (a weakref-able array)."""
    def fn():
        gate.wait(10)
        buf[:] = 3.0
        ran.append(True)
        return float(buf.sum())
    return fn


async def test_move_on_after_keeps_work_and_keepalive(pool):
    gate, ran = threading.Event(), []
    buf = np.zeros(1000)
    ref = weakref.ref(buf)
    handle = await pool.submit(_work_on(np.empty(0), gate, ran), keepalive=(buf,))
    del buf
    gc.collect()
    t0 = time.perf_counter()
    with anyio.move_on_after(0.05) as scope:
        await handle
    # the await gave up without the gated work (which never ends before gate.set())
    assert scope.cancelled_caught and time.perf_counter() - t0 < 10.0
    gc.collect()
    assert ref() is not None and not handle.done()  # the queue still holds the buffer
    gate.set()
    with anyio.fail_after(5):
        assert await handle == 0.0
    assert ran == [True]
    gc.collect()
    assert ref() is None  # dropped once the work finished


async def test_cancelled_awaiter_of_buffer_captured_by_fn(pool):
    gate, ran = threading.Event(), []
    buf = np.zeros(10)
    ref = weakref.ref(buf)
    handle = await pool.submit(_work_on(buf, gate, ran), keepalive=buf)
    del buf

    async def awaiter():
        await handle

    async with anyio.create_task_group() as tg:
        tg.start_soon(awaiter)
        await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    gc.collect()
    assert ref() is not None and not handle.done()
    gate.set()
    assert await handle == 30.0  # the work ran to the end
    gc.collect()
    assert ref() is None


async def test_native_cancellation(pool, anyio_backend):
    gate = threading.Event()
    handle = await pool.submit(lambda: gate.wait(10))
    if sniffio.current_async_library() == "asyncio":
        import asyncio

        async def wait_it():
            return await handle

        task = asyncio.ensure_future(wait_it())
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        import trio

        with trio.CancelScope() as scope:
            scope.deadline = trio.current_time() + 0.02
            await handle
        assert scope.cancelled_caught
    assert not handle.done()
    gate.set()
    with anyio.fail_after(5):
        assert await handle is True


async def test_cancel_during_backpressure_enqueues_nothing():
    gate = threading.Event()
    ran = []
    async with StreamPool("cpu", n_streams=1, max_inflight=1) as p:
        await p.submit(lambda: gate.wait(10))
        keep = np.zeros(4)
        ref = weakref.ref(keep)
        with anyio.move_on_after(0.05) as scope:
            await p.submit(lambda: ran.append("late"), keepalive=keep)
        assert scope.cancelled_caught
        del keep
        gc.collect()
        assert ref() is None  # nothing of the cancelled submit stays queued
        m = p.metrics()
        assert (m["submitted"], m["in_flight"]) == (1, 1)
        gate.set()
        await p.synchronize()
    assert ran == []


async def test_cancelled_submit_task_in_group():
    gate = threading.Event()
    async with StreamPool("cpu", n_streams=1, max_inflight=1) as p:
        await p.submit(lambda: gate.wait(10))
        async with anyio.create_task_group() as tg:
            tg.start_soon(p.submit, lambda: None)
            await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
        assert p.metrics()["submitted"] == 1
        gate.set()


async def test_aclose_is_shielded_and_drains():
    p = StreamPool("cpu", n_streams=2)
    done = []
    for i in range(4):
        await p.submit(lambda i=i: (time.sleep(0.02), done.append(i)))
    with anyio.CancelScope() as scope:
        scope.cancel()
        await p.aclose()  # cancelled from the start: still drains and joins
    assert sorted(done) == [0, 1, 2, 3]
    assert p.metrics()["in_flight"] == 0


async def test_event_wait_cancellable(pool):
    gate = threading.Event()
    await pool.submit(lambda: gate.wait(10), stream=0)
    event = pool.streams[0].record_event()
    with anyio.move_on_after(0.02) as scope:
        await event.wait()
    assert scope.cancelled_caught and not event.is_done()
    gate.set()
    with anyio.fail_after(5):
        await event.wait()
