"""The DynamicBatcher's per-request host path (issue 25): a request wakes the collector
only when the collector waits for it; rows are gathered into input buffers each bucket
reuses, padding rows zeroed; each caller's rows are a view of its batch's output; and a
stream's completion that nobody awaits calls into no event loop.

Results are checked against the float64 reference of tests/async/test_batcher.py. Runs on
asyncio and trio.
"""
from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.queues import StreamPool, _asyncio, _trio

from test_batcher import ATOL, RTOL, as_layout, cbr_graph, ref_cbr, samples, weights

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


class RecordingPlans:
    """Wraps a Device: every plan it builds records, at each execution, a copy of the
    variant pack's 'x' and the buffer object itself."""

    def __init__(self, dev):
        self.dev, self.packs = dev, []

    def __getattr__(self, name):
        return getattr(self.dev, name)

    async def build(self, graph, **kw):
        return _RecordingPlan(await self.dev.build(graph, **kw), self.packs)


class _RecordingPlan:
    def __init__(self, plan, packs):
        self.plan, self.packs = plan, packs

    def __getattr__(self, name):
        return getattr(self.plan, name)

    async def execute(self, pack, **kw):
        x = next(t for t in self.plan.graph.tensors if t.name == "x")
        buf = pack[x.uid if x.uid is not None else "x"]
        self.packs.append((buf, buf.copy()))
        return await self.plan.execute(pack, **kw)


async def test_a_request_wakes_the_collector_only_when_it_waits_for_it():
    """Eight one-row requests arrive 5 ms apart into a window of 2 s with
    max_batch_size 8: the collector sleeps through the seven in between and is woken
    twice, by the first request (the queue was empty) and by the eighth (8 rows); the
    batch runs at once, not at the window's end."""
    rng = np.random.default_rng(3)
    w, b = weights(3)
    xs = [samples(rng, 1) for _ in range(8)]
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=8, max_delay_ms=2000) as batcher:
            await batcher.warmup([8])
            d = batcher._dispatch
            request_waiters, collector_wakes = set(), []
            put, wake = d.put, d._wake

            def counting_put(req):
                request_waiters.add(id(req.waiter))
                put(req)

            def counting_wake(waiter):
                if id(waiter) not in request_waiters:
                    collector_wakes.append(waiter)
                wake(waiter)

            d.put, d._wake = counting_put, counting_wake
            results = {}

            async def call(i):
                results[i] = await batcher(xs[i])

            t0 = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for i in range(8):
                    tg.start_soon(call, i)
                    await anyio.sleep(0.005)
            elapsed = anyio.current_time() - t0
            assert len(collector_wakes) == 2
            m = batcher.metrics()
    assert elapsed < 1.0                       # flushed when full, not after 2 s
    assert (m["batches"], m["mean_batch_size"]) == (1, 8.0)
    for i in range(8):
        np.testing.assert_allclose(results[i], ref_cbr(xs[i], w, b), rtol=RTOL, atol=ATOL)


async def test_input_buffers_are_reused_with_the_padding_rows_zeroed():
    """A batch of 4 rows then one of 3 in bucket 4: both gather into the same input
    buffer, and the second's padding row is zero at execution (not the first batch's
    row 3); each caller's result matches the reference."""
    rng = np.random.default_rng(4)
    w, b = weights(4)
    first, second = samples(rng, 4), samples(rng, 3)
    async with hd.Device("cpu") as dev:
        rec = RecordingPlans(dev)
        async with hd.DynamicBatcher(rec, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=4, max_delay_ms=50,
                                     max_concurrent_batches=1) as batcher:
            got = await batcher(first)
            got2 = await batcher(second)
    (buf1, x1), (buf2, x2) = rec.packs
    assert buf1 is buf2
    np.testing.assert_array_equal(x1, first)
    np.testing.assert_array_equal(x2[:3], second)
    np.testing.assert_array_equal(x2[3], np.zeros_like(second[0]))
    np.testing.assert_allclose(got, ref_cbr(first, w, b), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got2, ref_cbr(second, w, b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
async def test_callers_rows_are_views_of_their_batch_output(layout):
    """Three concurrent callers of one batch, in each of two batches, get views of their
    batch's output array, each its own rows in the output tensor's layout: a write into
    one caller's result changes no other's, in its batch or the next."""
    rng = np.random.default_rng(5)
    w, b = weights(5)
    xs = [as_layout(samples(rng, n), layout) for n in (1, 2, 1, 2, 1, 1)]
    results = {}
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(1, layout),
                                     constants={"w": as_layout(w, layout), "b": b},
                                     max_batch_size=4, max_delay_ms=500) as batcher:

            async def call(i):
                results[i] = await batcher(xs[i])

            for first in (0, 3):
                async with anyio.create_task_group() as tg:
                    for i in range(first, first + 3):
                        tg.start_soon(call, i)
            assert batcher.metrics()["batches"] == 2
    for batch in ((0, 1, 2), (3, 4, 5)):
        assert len({id(results[i].base) for i in batch}) == 1
    assert results[0].base is not results[3].base
    assert not results[0].flags.owndata
    wants = [ref_cbr(xs[i], w, b) for i in range(6)]
    for i in range(6):
        assert results[i].shape == wants[i].shape
        assert results[i].strides == as_layout(wants[i].astype(np.float32), layout).strides
    results[1][...] = -1.0
    results[4][...] = -1.0
    for i in (0, 2, 3, 5):
        np.testing.assert_allclose(results[i], wants[i], rtol=RTOL, atol=ATOL)


async def test_a_completion_nobody_awaits_calls_into_no_loop(monkeypatch, anyio_backend):
    """200 items finished by the workers with no awaiter post nothing to the loop; one
    awaited while pending posts exactly one wake-up."""
    posts = []
    mod = _asyncio if anyio_backend == "asyncio" else _trio
    post = mod.post

    def counting_post(token, callback):
        posts.append(callback)
        return post(token, callback)

    monkeypatch.setattr(mod, "post", counting_post)
    release, got = threading.Event(), []
    async with StreamPool("t", n_streams=2) as pool:
        items = [pool.submit_now(lambda i=i: i * i) for i in range(200)]
        await anyio.to_thread.run_sync(pool.synchronize_blocking)
        assert [it.result() for it in items] == [i * i for i in range(200)]
        assert posts == []
        item = pool.submit_now(lambda: release.wait() and 7)

        async def awaiter(*, task_status):
            task_status.started()
            got.append(await item)      # registers before it first suspends

        async with anyio.create_task_group() as tg:
            await tg.start(awaiter)
            release.set()
        assert got == [7]
        assert len(posts) == 1          # (closing the pool awaits markers: more posts)


@pytest.mark.parametrize("seed", [0, 1])
async def test_callers_cancelled_at_random_leave_the_others_served(seed):
    """300 callers of 1 to 11 rows (split past max_batch_size 8), started at random over
    50 ms, a third with a random timeout of up to 10 ms: every caller not cancelled gets
    its own rows (float64 reference), none hangs, and the cancelled ones are counted."""
    rng = np.random.default_rng(seed)
    w, b = weights(seed)
    xs = [samples(rng, int(n)) for n in rng.integers(1, 12, size=300)]
    starts = rng.random(300) * 0.05
    timeouts = [float(t) if k % 3 == 0 else None
                for k, t in enumerate(rng.random(300) * 0.01)]
    got, cancelled = {}, set()
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=8, max_delay_ms=0.5) as batcher:

            async def call(i):
                await anyio.sleep(starts[i])
                with anyio.move_on_after(timeouts[i]) as scope:
                    got[i] = await batcher(xs[i])
                if scope.cancelled_caught:
                    cancelled.add(i)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(len(xs)):
                        tg.start_soon(call, i)
            m = batcher.metrics()
    assert sorted([*got, *cancelled]) == list(range(len(xs)))
    assert m["cancelled"] == len(cancelled)
    assert all(timeouts[i] is not None for i in cancelled)
    for i, y in got.items():
        np.testing.assert_allclose(y, ref_cbr(xs[i], w, b), rtol=RTOL, atol=ATOL)
