"""Capture and replay on the CPU device (docs/guide/capture.md): recorded executions run
only at replay, in order, on the buffers named at capture; errors, cancellation and closing.
Results are checked against the float64 oracle (tests/oracle/_reference.py). asyncio and
trio."""
from __future__ import annotations

import gc
import threading
import weakref

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol, tol

pytestmark = pytest.mark.anyio

EPS = 1e-5
N, C, HW = 2, 4, 6


def conv_graph(name, c_in=C, k=C):
    g = hd.Graph(name=name)
    x = g.tensor(dims=(N, c_in, HW, HW), name="x")
    w = g.tensor(dims=(k, c_in, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g, x, w, y


def bn_relu_graph():
    g = hd.Graph(name="bn_relu")
    x = g.tensor(dims=(N, C, HW, HW), name="x")
    s = g.tensor(dims=(1, C, 1, 1), name="scale")
    b = g.tensor(dims=(1, C, 1, 1), name="bias")
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=EPS)
    r = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True)
    mean.set_output(True)
    inv.set_output(True)
    return g, (x, s, b), (r, mean, inv)


class Step3:
    """conv -> batchnorm training + ReLU -> conv: each plan reads the previous one's output,
    so replaying them out of order (or not at all) gives wrong values."""

    def __init__(self, dev, plans, rng):
        self.plans = plans
        (_, self.x, self.w1, self.y), (_, self.bn_in, self.bn_out), (_, self.a, self.w2, self.z) = (
            plans["graphs"])
        f32 = np.float32
        self.xa = rng.uniform(-1, 1, self.x.dims).astype(f32)
        self.w1a = rng.uniform(-1, 1, self.w1.dims).astype(f32)
        self.w2a = rng.uniform(-1, 1, self.w2.dims).astype(f32)
        self.scale = rng.uniform(0.5, 1.5, (1, C, 1, 1)).astype(f32)
        self.bias = rng.uniform(-0.5, 0.5, (1, C, 1, 1)).astype(f32)
        self.ya = np.full(self.y.dims, np.nan, f32)
        self.ra = np.full(self.y.dims, np.nan, f32)
        self.mean = np.full((1, C, 1, 1), np.nan, f32)
        self.inv = np.full((1, C, 1, 1), np.nan, f32)
        self.za = np.full(self.z.dims, np.nan, f32)

    def submit_all(self):
        p = self.plans
        (bx, bs, bb), (br, bm, bi) = self.bn_in, self.bn_out
        p["conv1"].submit({self.x: self.xa, self.w1: self.w1a, self.y: self.ya})
        p["bn"].submit({bx: self.ya, bs: self.scale, bb: self.bias, br: self.ra, bm: self.mean,
                        bi: self.inv})
        p["conv2"].submit({self.a: self.ra, self.w2: self.w2a, self.z: self.za})

    def check(self):
        """Every output against the float64 oracle of the current inputs."""
        y = R.conv_fprop(self.xa, self.w1a, pre=1, post=1)
        n = C * 9
        assert_close(self.ya, y, *reduction_tol("conv_fprop", "float32", n), what="conv1 y")
        # the next stages take the library's own rounded outputs as their inputs
        bn = R.bn_training(self.ya, self.scale, self.bias, EPS)
        assert_close(self.ra, R.relu(bn["y"]), *tol("bn_training", "float32"), what="bn relu")
        assert_close(self.mean, bn["mean"], *tol("bn_training", "float32"), what="bn mean")
        assert_close(self.inv, bn["inv_variance"], *tol("bn_training", "float32"), what="bn inv")
        z = R.conv_fprop(self.ra, self.w2a, pre=1, post=1)
        assert_close(self.za, z, *reduction_tol("conv_fprop", "float32", n, 1.0, 4.0),
                     what="conv2 z")

    def untouched(self):
        return all(np.isnan(a).all() for a in (self.ya, self.ra, self.mean, self.inv, self.za))


async def build3(dev):
    g1 = conv_graph("conv1")
    g2 = bn_relu_graph()
    g3 = conv_graph("conv2")
    return {"conv1": await dev.build(g1[0]), "bn": await dev.build(g2[0]),
            "conv2": await dev.build(g3[0]), "graphs": (g1, g2, g3)}


async def test_capture_records_and_replay_runs_in_order(anyio_backend):
    rng = np.random.default_rng(0)
    async with hd.Device("cpu", streams=2) as dev:
        s = Step3(dev, await build3(dev), rng)
        async with dev.capture() as step:
            s.submit_all()
            assert len(step) == 3
        await dev.synchronize()
        assert s.untouched(), "a capture ran something"
        await step.replay()
        s.check()
        step.close()


async def test_replays_use_the_buffers_named_at_capture(anyio_backend):
    rng = np.random.default_rng(1)
    async with hd.Device("cpu") as dev:
        s = Step3(dev, await build3(dev), rng)
        async with dev.capture() as step:
            s.submit_all()
        await step.replay()
        first = s.za.copy()
        # new inputs copied into the captured buffers: the replay computes from them
        s.xa[...] = rng.uniform(-1, 1, s.xa.shape)
        s.w2a[...] = rng.uniform(-1, 1, s.w2a.shape)
        await step.replay()
        s.check()
        assert not np.allclose(first, s.za)
        # the synchronous form, from a thread without a loop, and the handle form
        s.xa[...] = rng.uniform(-1, 1, s.xa.shape)
        await anyio.to_thread.run_sync(step.replay_sync)
        s.check()
        s.xa[...] = rng.uniform(-1, 1, s.xa.shape)
        handle = step.submit()
        await handle
        s.check()
        step.close()


async def test_enqueue_records_and_the_handle_is_not_a_result(anyio_backend):
    rng = np.random.default_rng(2)
    async with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
        wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
        ya = np.full(y.dims, np.nan, np.float32)
        async with dev.capture() as step:
            handle = plan.submit({x: xa, w: wa, y: ya})
            assert not handle.done()                          # it runs at replay
            await plan.enqueue({"x": xa, "w": wa, "y": ya})   # names too
        assert len(step) == 2 and np.isnan(ya).all()
        await step.replay()
        assert_close(ya, R.conv_fprop(xa, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        step.close()


def test_sync_capture_from_a_thread():
    rng = np.random.default_rng(3)
    with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = dev.build_sync(g)
        xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
        wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
        ya = np.full(y.dims, np.nan, np.float32)
        with dev.capture(stream=1) as step:
            plan.submit({x: xa, w: wa, y: ya})
        assert step.stream is dev.streams[1] and np.isnan(ya).all()
        step.replay_sync()
        assert_close(ya, R.conv_fprop(xa, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        step.close()


def _two_packs(rng, x, w, y):
    """Two inputs xa, xb, one filter wa and two NaN-filled outputs ya, yb (a recapture's
    buffers beside the first capture's)."""
    xa, xb = (rng.uniform(-1, 1, x.dims).astype(np.float32) for _ in range(2))
    wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
    ya, yb = (np.full(y.dims, np.nan, np.float32) for _ in range(2))
    return xa, xb, wa, ya, yb


async def test_recapture_takes_new_buffers(anyio_backend):
    rng = np.random.default_rng(4)
    async with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        xa, xb, wa, ya, yb = _two_packs(rng, x, w, y)
        async with dev.capture() as step:
            plan.submit({x: xa, w: wa, y: ya})
        async with step.recapture():
            plan.submit({x: xb, w: wa, y: yb})
            plan.submit({x: xb, w: wa, y: yb})
        assert len(step) == 2
        await step.replay()
        assert np.isnan(ya).all(), "the first recording still ran"
        assert_close(yb, R.conv_fprop(xb, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        step.close()


async def test_a_recapture_block_that_raises_keeps_the_earlier_recording(anyio_backend):
    """A recapture is all or nothing: a block that raises (here a bad buffer) leaves the
    step replaying what it recorded before, as a failed transaction leaves the data."""
    rng = np.random.default_rng(5)
    async with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        xa, xb, wa, ya, yb = _two_packs(rng, x, w, y)
        async with dev.capture() as step:
            plan.submit({x: xa, w: wa, y: ya})
        label = str(step)
        with pytest.raises(hd.VariantPackError):
            async with step.recapture():
                plan.submit({x: xb, w: wa, y: yb})
                plan.submit({x: xb, w: wa, y: yb[:, :1]})     # wrong shape: raises
        assert len(step) == 1 and str(step) == label
        await step.replay()
        assert np.isnan(yb).all(), "the failed block's recording ran"
        assert_close(ya, R.conv_fprop(xa, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        # a later recapture that ends well replaces it, as before
        async with step.recapture():
            plan.submit({x: xb, w: wa, y: yb})
        await step.replay()
        assert_close(yb, R.conv_fprop(xb, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        step.close()


# ------------------------------------------------------------------------------ errors
async def test_submitting_to_another_stream_during_capture_is_an_error(anyio_backend):
    async with hd.Device("cpu", streams=2) as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        vp = {x: np.zeros(x.dims, np.float32), w: np.zeros(w.dims, np.float32),
              y: np.zeros(y.dims, np.float32)}
        with pytest.raises(hd.DeviceError, match="during a capture on stream 'cpu:s0'"):
            async with dev.capture(stream=0) as step:
                plan.submit(vp, stream=0)           # the step's own stream is fine
                plan.submit(vp, stream=dev.streams[1])
        with pytest.raises(hd.DeviceError, match="nothing to replay"):
            await step.replay()
        # the device goes on working, and the failed step can record again
        await plan.execute(vp, stream=1)
        async with step.recapture():
            plan.submit(vp)
        await step.replay()
        step.close()


async def test_bad_variant_pack_raises_at_record(anyio_backend):
    async with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        async with dev.capture() as step:
            with pytest.raises(hd.VariantPackError, match="missing tensor 'y'"):
                plan.submit({x: np.zeros(x.dims, np.float32), w: np.zeros(w.dims, np.float32)})
        assert len(step) == 0
        await step.replay()          # an empty step replays (as an empty CUDA graph does)
        step.close()


async def test_replay_states(anyio_backend):
    async with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        vp = {x: np.zeros(x.dims, np.float32), w: np.zeros(w.dims, np.float32),
              y: np.zeros(y.dims, np.float32)}
        step = dev.capture()
        with pytest.raises(hd.DeviceError, match="never captured"):
            await step.replay()
        async with step:
            plan.submit(vp)
            with pytest.raises(hd.DeviceError, match="still recording"):
                step.submit()
            with pytest.raises(hd.DeviceError, match="captures do not nest"):
                async with dev.capture():
                    pass
        step.close()
        step.close()                                  # idempotent
        for call in (step.submit, step.replay_sync):
            with pytest.raises(hd.DeviceError, match="is closed"):
                call()
        with pytest.raises(hd.DeviceError, match="is closed"):
            await step.replay()
        with pytest.raises(hd.DeviceError, match="is closed"):
            async with step.recapture():
                pass
        # outside the block the plan runs as usual
        await plan.execute(vp)


async def test_capture_on_a_closed_device(anyio_backend):
    dev = hd.Device("cpu")
    await dev.aclose()
    with pytest.raises(hd.DeviceError, match="closed"):
        async with dev.capture():
            pass


async def test_other_tasks_run_normally_during_a_capture(anyio_backend):
    rng = np.random.default_rng(5)
    async with hd.Device("cpu", streams=1) as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
        wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
        ya = np.full(y.dims, np.nan, np.float32)
        other = np.full(y.dims, np.nan, np.float32)
        go, done = anyio.Event(), anyio.Event()

        async def outsider():
            await go.wait()
            await plan.execute({x: xa, w: wa, y: other})    # the step's stream, not recorded
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(outsider)          # started outside the block: its own context
            async with dev.capture() as step:
                plan.submit({x: xa, w: wa, y: ya})
                go.set()
                with anyio.fail_after(10):
                    await done.wait()
        assert len(step) == 1 and np.isnan(ya).all()
        assert_close(other, R.conv_fprop(xa, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        step.close()


# ------------------------------------------------------------------------ cancellation
async def test_cancelled_capture_block_records_nothing(anyio_backend):
    async with hd.Device("cpu") as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        ya = np.full(y.dims, np.nan, np.float32)
        vp = {x: np.ones(x.dims, np.float32), w: np.ones(w.dims, np.float32), y: ya}
        with anyio.move_on_after(0.01) as scope:
            async with dev.capture() as step:
                plan.submit(vp)
                await anyio.sleep(10)
        assert scope.cancelled_caught
        with pytest.raises(hd.DeviceError, match="Cancel"):
            await step.replay()
        await dev.synchronize()
        assert np.isnan(ya).all()
        await plan.execute(vp)          # the device and the context are clean
        assert not np.isnan(ya).any()


def _hold(dev, stream):
    """Block ``stream`` with a work item until the returned gate is set."""
    gate = threading.Event()
    dev._pool.submit_now(lambda: gate.wait(10), stream=stream, label="hold")
    return gate


async def test_cancelled_replay_runs_to_completion_and_keeps_buffers(anyio_backend):
    rng = np.random.default_rng(6)
    async with hd.Device("cpu", streams=1) as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
        wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
        ya = np.full(y.dims, np.nan, np.float32)
        want = R.conv_fprop(xa, wa, pre=1, post=1)
        ref_x = weakref.ref(xa)
        async with dev.capture() as step:
            plan.submit({x: xa, w: wa, y: ya})
        del xa
        gate = _hold(dev, step.stream)
        with anyio.move_on_after(0.05) as scope:
            await step.replay()
        assert scope.cancelled_caught and np.isnan(ya).all()
        step.close()                    # the replay already submitted keeps its buffers
        gc.collect()
        assert ref_x() is not None, "an input was freed while a replay was in flight"
        gate.set()
        await dev.synchronize()
        assert_close(ya, want, *reduction_tol("conv_fprop", "float32", C * 9))
        gc.collect()
        assert ref_x() is None, "the closed step still holds its buffers"


async def test_replays_submitted_before_close_still_run(anyio_backend):
    async with hd.Device("cpu", streams=1, max_inflight=1) as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        xa, wa = np.ones(x.dims, np.float32), np.ones(w.dims, np.float32)
        ya = np.full(y.dims, np.nan, np.float32)
        async with dev.capture() as step:
            plan.submit({x: xa, w: wa, y: ya})
        gate = _hold(dev, step.stream)
        handle = step.submit()          # beyond max_inflight: waits host-side
        step.close()
        gate.set()
        with anyio.fail_after(10):
            await handle
        assert_close(ya, R.conv_fprop(xa, wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9))
        with pytest.raises(hd.DeviceError, match="is closed"):
            step.submit()


async def test_replay_error_reaches_the_awaiter_and_the_stream_goes_on(anyio_backend):
    async with hd.Device("cpu", streams=1) as dev:
        g, x, w, y = conv_graph("c")
        plan = await dev.build(g)
        ya = np.full(y.dims, np.nan, np.float32)
        vp = {x: np.ones(x.dims, np.float32), w: np.ones(w.dims, np.float32), y: ya}
        async with dev.capture() as step:
            plan.submit(vp)
        real = plan._pplan.run

        def broken(buffers, ws):
            raise RuntimeError("kernel failed")

        plan._pplan.run = broken
        try:
            with pytest.raises(hd.ExecutionError, match="kernel failed"):
                await step.replay()
        finally:
            plan._pplan.run = real
        await step.replay()
        assert not np.isnan(ya).any()
        step.close()
