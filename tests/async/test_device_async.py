"""Plans on the device's streams, under asyncio and trio: cancellation keeps buffers alive,
events order work across streams, backpressure, close drains, errors stay per execution."""
import gc
import threading
import weakref

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._base import ProviderPlan

pytestmark = pytest.mark.anyio


def conv_plan_graph(n=4, c=32, k=32, hw=32):
    g = hd.Graph(name="conv")
    x = g.tensor(dims=(n, c, hw, hw), name="x")
    w = g.tensor(dims=(k, c, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    return g, x, w, y


def ref(xa, wa):
    """float64 cross-correlation, padding 1 (independent of the library)."""
    xp = np.pad(xa.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, w_ = xa.shape[2:]
    out = np.zeros((xa.shape[0], wa.shape[0], h, w_))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + h, j:j + w_], wa[:, :, i, j])
    return out


class Gate:
    """A plan stand-in whose run blocks until released (to hold work on a stream)."""

    def __init__(self):
        self.release = threading.Event()


async def test_cancelled_await_keeps_buffers_alive_until_done(anyio_backend):
    g, x, w, y = conv_plan_graph(n=1, c=4, k=4, hw=8)
    async with hd.Device("cpu", streams=1) as dev:
        plan = await dev.build(g, engine="CPU_ENGINE")  # its run is patched below
        gate = threading.Event()
        real_run = plan._pplan.run

        def held_run(buffers, ws):
            gate.wait(10)
            real_run(buffers, ws)

        plan._pplan.run = held_run
        xa = np.random.default_rng(0).standard_normal(x.dims).astype(np.float32)
        wa = np.random.default_rng(1).standard_normal(w.dims).astype(np.float32)
        ya = np.full(y.dims, np.nan, np.float32)
        refs = [weakref.ref(a) for a in (xa, wa, ya)]
        with anyio.move_on_after(0.05) as scope:
            await plan.execute({x: xa, w: wa, y: ya})
        assert scope.cancelled_caught
        want = ref(xa, wa)
        y_view = ya  # keep one reference to check the result afterwards
        del xa, wa, ya
        gc.collect()
        assert refs[0]() is not None and refs[1]() is not None, "inputs freed while in flight"
        gate.set()
        await dev.synchronize()
        np.testing.assert_allclose(y_view, want, rtol=1e-5, atol=1e-5)
        del y_view
        plan._pplan.run = real_run
    gc.collect()
    assert all(r() is None for r in refs), "buffers outlived the work"


async def test_events_order_work_across_streams(anyio_backend):
    g, x, w, y = conv_plan_graph(n=1, c=4, k=4, hw=8)
    async with hd.Device("cpu", streams=2) as dev:
        plan = await dev.build(g, engine="CPU_ENGINE")  # its run is patched below
        order = []
        gate = threading.Event()
        real_run = plan._pplan.run

        xa = np.ones(x.dims, np.float32)
        wa = np.ones(w.dims, np.float32)
        y0, y1 = np.zeros(y.dims, np.float32), np.zeros(y.dims, np.float32)

        def gated_run(buffers, ws):
            if buffers["y"] is y0:  # only the first execution waits for the gate
                gate.wait(10)
            real_run(buffers, ws)
            order.append("first" if buffers["y"] is y0 else "second")

        plan._pplan.run = gated_run
        h0 = plan.submit({x: xa, w: wa, y: y0}, stream=0)
        ev = dev.streams[0].record_event()
        dev.streams[1].wait_event(ev)
        h1 = plan.submit({x: xa, w: wa, y: y1}, stream=1)
        await anyio.sleep(0.05)
        assert not h1.done(), "stream 1 ran before the event it waits on"
        gate.set()
        await h0
        await h1
        await ev.wait()
        assert order == ["first", "second"]
        plan._pplan.run = real_run
        np.testing.assert_array_equal(y0, y1)


async def test_backpressure_and_metrics(anyio_backend):
    g, x, w, y = conv_plan_graph(n=1, c=4, k=4, hw=8)
    async with hd.Device("cpu", streams=1, max_inflight=2) as dev:
        plan = await dev.build(g, engine="CPU_ENGINE")  # its run is patched below
        gate = threading.Event()
        real_run = plan._pplan.run
        plan._pplan.run = lambda b, ws: (gate.wait(10), real_run(b, ws))
        vp = {x: np.ones(x.dims, np.float32), w: np.ones(w.dims, np.float32),
              y: np.zeros(y.dims, np.float32)}
        handles = [await plan.enqueue(vp), await plan.enqueue(vp)]
        with anyio.move_on_after(0.1) as scope:
            await plan.enqueue(vp)  # third: the stream is full
        assert scope.cancelled_caught, "enqueue did not wait at max_inflight"
        # submit never waits: beyond max_inflight the execution waits host-side, in order
        parked = [plan.submit(vp) for _ in range(3)]
        m = dev.metrics()
        assert (m["in_flight"], m["parked"]) == (2, 3)
        gate.set()
        for h in handles + parked:
            await h
        m = dev.metrics()
        assert m["submitted"] == 5 and m["completed"] == 5 and m["in_flight"] == 0


async def test_error_in_one_execution_does_not_touch_others(anyio_backend):
    g, x, w, y = conv_plan_graph(n=1, c=4, k=4, hw=8)
    async with hd.Device("cpu", streams=2) as dev:
        good = await dev.build(g)
        bad = await dev.build(g)
        bad._pplan = type("Broken", (ProviderPlan,), {"run": lambda self, b, ws: 1 / 0, "algorithm": None,
                                         "workspace_size": 0, "benchmarked": False,
                                         "perfdb_hit": False})()
        xa = np.random.default_rng(0).standard_normal(x.dims).astype(np.float32)
        wa = np.random.default_rng(1).standard_normal(w.dims).astype(np.float32)
        outs = [np.zeros(y.dims, np.float32) for _ in range(4)]
        errors = []

        async def run(plan, out):
            try:
                await plan.execute({x: xa, w: wa, y: out})
            except hd.ExecutionError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for i, out in enumerate(outs):
                tg.start_soon(run, bad if i == 1 else good, out)
        assert len(errors) == 1 and "ZeroDivisionError" in str(errors[0])
        assert "CONV_FPROP" in str(errors[0])
        for i, out in enumerate(outs):
            if i != 1:
                np.testing.assert_allclose(out, ref(xa, wa), rtol=1e-5, atol=1e-5)
        assert dev.metrics()["failed"] == 1


async def test_close_drains_and_rejects_later_work(anyio_backend):
    g, x, w, y = conv_plan_graph(n=2, c=8, k=8, hw=16)
    xa = np.random.default_rng(0).standard_normal(x.dims).astype(np.float32)
    wa = np.random.default_rng(1).standard_normal(w.dims).astype(np.float32)
    outs = [np.full(y.dims, np.nan, np.float32) for _ in range(6)]
    async with hd.Device("cpu", streams=1, max_inflight=1) as dev:  # 5 of 6 get parked
        plan = await dev.build(g)
        for o in outs:
            plan.submit({x: xa, w: wa, y: o})  # not awaited: close must drain them
    for o in outs:
        np.testing.assert_allclose(o, ref(xa, wa), rtol=1e-5, atol=1e-5)
    with pytest.raises(hd.DeviceError):
        await plan.execute({x: xa, w: wa, y: outs[0]})


async def test_parked_submissions_keep_order_with_events(anyio_backend):
    # Beyond max_inflight, submit parks executions host-side; an event recorded after
    # them must still wait for them (it keeps its place in the line).
    g, x, w, y = conv_plan_graph(n=1, c=4, k=4, hw=8)
    async with hd.Device("cpu", streams=1, max_inflight=1) as dev:
        plan = await dev.build(g, engine="CPU_ENGINE")  # its run is patched below
        order, gate = [], threading.Event()
        real_run = plan._pplan.run
        xa, wa = np.ones(x.dims, np.float32), np.ones(w.dims, np.float32)
        outs = [np.zeros(y.dims, np.float32) for _ in range(5)]

        def run(buffers, ws):
            i = next(k for k, o in enumerate(outs) if o is buffers["y"])
            if i == 0:
                gate.wait(10)
            real_run(buffers, ws)
            order.append(i)

        plan._pplan.run = run
        handles = [plan.submit({x: xa, w: wa, y: o}) for o in outs[:3]]
        ev = dev.streams[0].record_event()
        handles += [plan.submit({x: xa, w: wa, y: o}) for o in outs[3:]]
        assert not ev.is_done()
        gate.set()
        await ev.wait()
        assert order[:3] == [0, 1, 2]
        for h in handles:
            await h
        assert order == [0, 1, 2, 3, 4]
        plan._pplan.run = real_run
