"""Every CPU engine through the queues: several streams at once (one plan on all of them,
each execution with its own buffers), cancelled awaiters, capture and replay, and the
dynamic batcher, each result checked against the float64 references of
tests/oracle/_reference.py. asyncio and trio. Engines as in tests/oracle/_cpu_engines.py
(an engine absent here skips with its reason; ONEDNN_ENGINE fails instead under CI=true
on Linux x86-64)."""
from __future__ import annotations

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol, tol
from oracle._cpu_engines import engine_names, require

pytestmark = pytest.mark.anyio

F32 = hd.DataType.FLOAT
EPS = 1e-5
ENGINES = engine_names()


@pytest.fixture(params=ENGINES)
def engine(request):
    require(request.param)
    return request.param


def conv_graph(name, n=2, c=8, k=8, hw=12, layout="NHWC"):
    """3x3 conv fprop, padding 1: x (n, c, hw, hw), w (k, c, 3, 3), output 'y'."""
    g = hd.Graph(name=name, io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=(n, c, hw, hw), layout=layout, name="x")
    w = g.tensor(dims=(k, c, 3, 3), layout=layout, name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g, x, w, y


def bn_relu_graph(n=2, c=8, hw=12, layout="NHWC"):
    """Batchnorm training + ReLU with saved statistics: outputs 'y', 'mean', 'inv'."""
    g = hd.Graph(name="bn_relu", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(n, c, hw, hw), layout=layout, name="x")
    s = g.tensor(dims=(1, c, 1, 1), name="scale")
    b = g.tensor(dims=(1, c, 1, 1), name="bias")
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=EPS)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    mean.set_output(True).set_name("mean")
    inv.set_output(True).set_name("inv")
    return g


def _layout_array(values, layout="NHWC"):
    """float32 logical view of values stored in layout (NCHW or NHWC)."""
    a = np.asarray(values, np.float32)
    if layout == "NCHW":
        return np.ascontiguousarray(a)
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _nan_like(t):
    return _layout_array(np.full(t.dims, np.nan))


def _conv_tol(c):
    return reduction_tol("conv_fprop", "float32", c * 9)


# ------------------------------------------------------------------------ several streams

async def test_one_plan_on_several_streams_at_once(anyio_backend, engine):
    """One plan submitted on 3 streams at once, 4 rounds, each execution its own x and y:
    every output is its own input's convolution (a plan shared by stream threads must not
    share scratch memory between them)."""
    rng = np.random.default_rng(0)
    async with hd.Device("cpu", streams=3) as dev:
        g, x, w, y = conv_graph("shared", n=4, c=16, k=16, hw=20)
        plan = await dev.build(g, engine=engine)
        assert plan.engine.name == engine
        wa = _layout_array(rng.uniform(-1, 1, w.dims))
        jobs = []
        for _ in range(4):
            for s in range(3):
                xa = _layout_array(rng.uniform(-1, 1, x.dims))
                ya = _nan_like(y)
                jobs.append((xa, ya, plan.submit({x: xa, w: wa, y: ya}, stream=s)))
        for _, _, handle in jobs:
            await handle
        for i, (xa, ya, _) in enumerate(jobs):
            assert_close(ya, R.conv_fprop(xa, wa, pre=1, post=1), *_conv_tol(16),
                         what=f"{engine} execution {i} (stream {i % 3})")


async def test_different_plans_on_streams_concurrently(anyio_backend, engine):
    """A conv, a conv of another shape and batchnorm + ReLU run at the same time on three
    streams, awaited from concurrent tasks; each result against float64."""
    rng = np.random.default_rng(1)
    async with hd.Device("cpu", streams=3) as dev:
        g1, x1, w1, y1 = conv_graph("c1", n=2, c=8, k=12, hw=14)
        g2, x2, w2, y2 = conv_graph("c2", n=3, c=4, k=6, hw=9, layout="NCHW")
        g3 = bn_relu_graph()
        p1, p2, p3 = [await dev.build(g, engine=engine) for g in (g1, g2, g3)]
        assert {p.engine.name for p in (p1, p2, p3)} == {engine}
        a1 = {x1: _layout_array(rng.uniform(-1, 1, x1.dims)),
              w1: _layout_array(rng.uniform(-1, 1, w1.dims)), y1: _nan_like(y1)}
        a2 = {x2: rng.uniform(-1, 1, x2.dims).astype(np.float32),
              w2: rng.uniform(-1, 1, w2.dims).astype(np.float32),
              y2: np.full(y2.dims, np.nan, np.float32)}
        bn_x = _layout_array(rng.uniform(-2, 2, (2, 8, 12, 12)))
        a3 = {"x": bn_x, "scale": rng.uniform(0.5, 1.5, (1, 8, 1, 1)).astype(np.float32),
              "bias": rng.uniform(-0.5, 0.5, (1, 8, 1, 1)).astype(np.float32),
              "y": _layout_array(np.full(bn_x.shape, np.nan)),
              "mean": np.full((1, 8, 1, 1), np.nan, np.float32),
              "inv": np.full((1, 8, 1, 1), np.nan, np.float32)}
        async def run(plan, pack, stream):
            await plan.execute(pack, stream=stream)

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                for s, (plan, pack) in enumerate(((p1, a1), (p2, a2), (p3, a3))):
                    tg.start_soon(run, plan, pack, s)
        assert_close(a1[y1], R.conv_fprop(a1[x1], a1[w1], pre=1, post=1), *_conv_tol(8),
                     what="c1")
        assert_close(a2[y2], R.conv_fprop(a2[x2], a2[w2], pre=1, post=1), *_conv_tol(4),
                     what="c2")
        bn = R.bn_training(bn_x, a3["scale"], a3["bias"], EPS)
        t = tol("bn_training", "float32")
        assert_close(a3["y"], R.relu(bn["y"]), *t, what="bn y")
        assert_close(a3["mean"], bn["mean"], *t, what="bn mean")
        assert_close(a3["inv"], bn["inv_variance"], *t, what="bn inv_variance")


# ------------------------------------------------------------------------ cancellation

async def test_cancelled_awaiter_work_completes_correctly(anyio_backend, engine):
    """An awaiter of ``plan.execute`` cancelled at once returns promptly; the execution
    still runs to the end on the buffers it was given (the queue keeps them), and the
    next executions on the stream are unaffected."""
    rng = np.random.default_rng(2)
    async with hd.Device("cpu", streams=1) as dev:
        g, x, w, y = conv_graph("cancel", n=8, c=32, k=32, hw=28)
        plan = await dev.build(g, engine=engine)
        wa = _layout_array(rng.uniform(-1, 1, w.dims))
        xs = [_layout_array(rng.uniform(-1, 1, x.dims)) for _ in range(3)]
        ys = [_nan_like(y) for _ in range(3)]
        with anyio.CancelScope() as scope:
            scope.cancel()
            await plan.execute({x: xs[0], w: wa, y: ys[0]})
        assert scope.cancelled_caught
        with anyio.move_on_after(0.001):
            await plan.execute({x: xs[1], w: wa, y: ys[1]})
        await plan.execute({x: xs[2], w: wa, y: ys[2]})
        await dev.synchronize()
        for i in (1, 2):   # the second was submitted (its awaiter gave up); the third ran
            assert_close(ys[i], R.conv_fprop(xs[i], wa, pre=1, post=1), *_conv_tol(32),
                         what=f"{engine} execution {i}")
        # the first was cancelled before or after its submit: nothing or all of it
        if not np.isnan(ys[0]).all():
            assert_close(ys[0], R.conv_fprop(xs[0], wa, pre=1, post=1), *_conv_tol(32),
                         what=f"{engine} execution 0")


# ------------------------------------------------------------------------ capture / replay

async def test_capture_and_replay_on_engine(anyio_backend, engine):
    """conv -> batchnorm training + ReLU -> conv, captured then replayed twice (new x in
    place between replays): nothing runs at capture; each replay matches float64."""
    rng = np.random.default_rng(3)
    async with hd.Device("cpu", streams=2) as dev:
        g1, x1, w1, y1 = conv_graph("cap1")
        g3, x3, w3, y3 = conv_graph("cap2")
        gbn = bn_relu_graph()
        p1, pbn, p3 = [await dev.build(g, engine=engine) for g in (g1, gbn, g3)]
        xa = _layout_array(rng.uniform(-1, 1, x1.dims))
        w1a, w3a = (_layout_array(rng.uniform(-1, 1, w1.dims)) for _ in range(2))
        scale = rng.uniform(0.5, 1.5, (1, 8, 1, 1)).astype(np.float32)
        bias = rng.uniform(-0.5, 0.5, (1, 8, 1, 1)).astype(np.float32)
        ya, ra, za = _nan_like(y1), _nan_like(y1), _nan_like(y3)
        mean, inv = (np.full((1, 8, 1, 1), np.nan, np.float32) for _ in range(2))
        async with dev.capture() as step:
            p1.submit({x1: xa, w1: w1a, y1: ya})
            pbn.submit({"x": ya, "scale": scale, "bias": bias, "y": ra, "mean": mean,
                        "inv": inv})
            p3.submit({x3: ra, w3: w3a, y3: za})
        await dev.synchronize()
        assert all(np.isnan(a).all() for a in (ya, ra, za, mean, inv)), "capture ran work"
        for round_ in range(2):
            if round_:
                xa[...] = rng.uniform(-1, 1, xa.shape)
            await step.replay()
            t = tol("bn_training", "float32")
            assert_close(ya, R.conv_fprop(xa, w1a, pre=1, post=1), *_conv_tol(8), what="y")
            bn = R.bn_training(ya, scale, bias, EPS)
            assert_close(ra, R.relu(bn["y"]), *t, what=f"replay {round_} bn+relu")
            assert_close(inv, bn["inv_variance"], *t, what=f"replay {round_} inv_variance")
            assert_close(za, R.conv_fprop(ra, w3a, pre=1, post=1),
                         *reduction_tol("conv_fprop", "float32", 72, 1.0, 4.0),
                         what=f"replay {round_} z")
        step.close()


# ------------------------------------------------------------------------ the batcher

class _EngineDevice:
    """A Device whose builds name one engine (the batcher builds with the device's own
    choice otherwise)."""

    def __init__(self, dev, engine):
        self.dev, self.engine, self.engines_built = dev, engine, set()

    def __getattr__(self, name):
        return getattr(self.dev, name)

    async def build(self, graph, **kw):
        plan = await self.dev.build(graph, engine=self.engine, **kw)
        self.engines_built.add(plan.engine.name)
        return plan


async def test_batcher_on_engine(anyio_backend, engine):
    """conv + bias + ReLU served by DynamicBatcher to 24 concurrent callers of 1-3 rows:
    each gets its own rows' float64 result; every bucket plan is the engine's."""
    rng = np.random.default_rng(4)
    c, k = 6, 5
    g = hd.Graph(name="cbr", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=(1, c, 8, 8), layout="NHWC", name="x")
    w = g.tensor(dims=(k, c, 3, 3), layout="NHWC", name="w")
    b = g.tensor(dims=(1, k, 1, 1), name="b")
    z = g.pointwise(g.conv_fprop(x, w, padding=1), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    g.validate()
    wa = rng.uniform(-1, 1, (k, c, 3, 3)).astype(np.float32)
    ba = rng.uniform(-1, 1, (1, k, 1, 1)).astype(np.float32)
    reqs = [rng.uniform(-1, 1, (int(n), c, 8, 8)).astype(np.float32)
            for n in rng.integers(1, 4, size=24)]
    results = [None] * len(reqs)
    async with hd.Device("cpu") as dev:
        edev = _EngineDevice(dev, engine)
        async with hd.DynamicBatcher(edev, g, constants={"w": wa, "b": ba}, max_batch_size=16,
                                     max_delay_ms=5.0) as batcher:
            async def one(i):
                results[i] = await batcher(reqs[i])

            async with anyio.create_task_group() as tg:
                for i in range(len(reqs)):
                    tg.start_soon(one, i)
    assert edev.engines_built == {engine}
    for i, (req, got) in enumerate(zip(reqs, results)):
        got = got["y"] if isinstance(got, dict) else got
        want = R.relu(R.conv_fprop(req, wa, pre=1, post=1) + ba)
        assert_close(got, want, *_conv_tol(c), what=f"{engine} caller {i}")
