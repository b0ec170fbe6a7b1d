"""Asynchronous execution on the GPU: concurrent awaits on several streams, submit returning
before the GPU finishes, events across streams, cancellation keeping buffers alive, and
backpressure. Results are checked against float64 values computed on the host."""
from __future__ import annotations

import gc
import time
import weakref

import anyio
import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import assert_close, tol

import hipdnn_async as hd

from .conftest import cuda_spec

pytestmark = pytest.mark.gpu

F32 = hd.DataType.FLOAT
# A convolution long enough (about 118 GFLOP, a few ms of strict-fp32 math on an H200)
# that the host is done submitting long before the GPU is done computing.
BIG_X, BIG_W = (32, 256, 56, 56), (256, 256, 3, 3)


def conv_graph(x_dims, w_dims, name="conv", layout="NCHW"):
    g = hd.Graph(name=name, io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=x_dims, layout=layout, name="x")
    w = g.tensor(dims=w_dims, layout=layout, name="w")
    g.conv_fprop(x, w, padding=(1, 1)).set_output(True).set_name("y")
    return g


def spot_check(y, x, w, n_points=24, seed=0, what="conv"):
    """Compare y (logical NCHW values) with float64 dot products at random positions
    of a padding-1, stride-1 3x3 convolution."""
    rng = np.random.default_rng(seed)
    n, k, p, q = y.shape
    xp = {}
    for _ in range(n_points):
        i, kk, pp, qq = (int(rng.integers(0, d)) for d in (n, k, p, q))
        if i not in xp:
            xp[i] = np.pad(x[i].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
        want = float(np.sum(xp[i][:, pp:pp + 3, qq:qq + 3] * w[kk].astype(np.float64)))
        got = float(y[i, kk, pp, qq])
        assert abs(got - want) <= 1e-4 + 1e-5 * abs(want), (
            f"{what}: y[{i},{kk},{pp},{qq}] = {got}, expected {want}")


def big_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random(BIG_X, dtype=np.float32) * 2 - 1
    w = (rng.random(BIG_W, dtype=np.float32) * 2 - 1) / 48
    return x, w


async def staged(dev, *arrays):
    return [await dev.asarray(a) for a in arrays]


async def nan_array(dev, dims, dtype=np.float32):
    return await dev.asarray(np.full(dims, np.nan, dtype))


# ---------------------------------------------------------------------------------------

@pytest.mark.anyio
async def test_many_concurrent_executes_on_several_streams(gpu_device, anyio_backend):
    xd, wd = (4, 16, 12, 12), (24, 16, 3, 3)
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-1, 1, xd).astype(np.float32) for _ in range(8)]
    wv = rng.uniform(-1, 1, wd).astype(np.float32)
    wants = [ref.conv_fprop(x, wv, (1, 1), (1, 1)) for x in xs]
    n_tasks = 64
    async with hd.Device(gpu_device.spec, streams=4) as dev:
        plan = await dev.build(conv_graph(xd, wd))
        xg = [await dev.asarray(x) for x in xs]
        wg = await dev.asarray(wv)
        ys = [await nan_array(dev, (4, 24, 12, 12)) for _ in range(n_tasks)]

        async def one(i):
            await plan.execute({"x": xg[i % 8], "w": wg, "y": ys[i]}, stream=i % 4)

        async with anyio.create_task_group() as tg:
            for i in range(n_tasks):
                tg.start_soon(one, i)
        for i, y in enumerate(ys):
            assert_close(await y.to_numpy(), wants[i % 8], *tol("conv_fprop", "float32"),
                         f"task {i} on stream {i % 4}")
        m = dev.metrics()
        assert m["completed"] >= n_tasks and m["failed"] == 0 and m["in_flight"] == 0
        assert all(s["submitted"] >= n_tasks // 4 for s in m["streams"]), m["streams"]


@pytest.mark.anyio
async def test_submit_returns_before_the_gpu_finishes(gpu_device, anyio_backend):
    x, w = big_inputs()
    async with hd.Device(gpu_device.spec, streams=1) as dev:
        plan = await dev.build(conv_graph(BIG_X, BIG_W, "big"))
        xg, wg = await staged(dev, x, w)
        y = await nan_array(dev, BIG_X[:1] + BIG_W[:1] + BIG_X[2:])
        vp = {"x": xg, "w": wg, "y": y}
        await plan.execute(vp)                       # warm: first-use costs out of the way
        t0 = time.perf_counter()
        handles = [plan.submit(vp) for _ in range(8)]
        host_s = time.perf_counter() - t0
        pending = [not h.done() for h in handles]
        for h in handles:
            await h
        total_s = time.perf_counter() - t0
        assert pending[-1], "the last of 8 large convolutions was done when submit returned"
        assert host_s < total_s / 4, (f"8 submits took {host_s * 1e3:.2f} ms of host time; "
                                      f"the GPU work {total_s * 1e3:.2f} ms")
        assert all(h.done() for h in handles)
        spot_check(await y.to_numpy(), x, w, what="after 8 submits")


@pytest.mark.anyio
async def test_done_handle_means_outputs_are_written(gpu_device, torch_cuda, anyio_backend):
    """A torch output read on torch's stream right after the await, with no
    synchronization: were completion reported before the GPU finished, it would read
    the NaN pre-fill."""
    torch = torch_cuda
    spec = cuda_spec()
    x, w = big_inputs(2)
    async with hd.Device(spec, streams=1) as dev:
        plan = await dev.build(conv_graph(BIG_X, BIG_W, "big"))
        xg, wg = await staged(dev, x, w)
        await plan.execute({"x": xg, "w": wg, "y": await nan_array(dev, (32, 256, 56, 56))})
        for attempt in range(3):
            y_t = torch.full((32, 256, 56, 56), float("nan"), device="cuda")
            torch.cuda.synchronize()
            await plan.submit({"x": xg, "w": wg, "y": y_t})
            nans = int(torch.isnan(y_t).sum().item())      # torch's stream, no sync with ours
            assert nans == 0, f"attempt {attempt}: {nans} outputs unwritten after the handle was done"
        spot_check(y_t.cpu().numpy(), x, w, what="torch output")


@pytest.mark.anyio
async def test_events_order_work_across_streams(gpu_device, anyio_backend):
    """Stream 1 reads what stream 0 writes, ordered only by an event."""
    x, w = big_inputs(3)
    c = BIG_W[0]
    y_dims = (32, c, 56, 56)
    rng = np.random.default_rng(4)
    stats = {k: rng.uniform(lo, hi, (1, c, 1, 1)).astype(np.float32)
             for k, lo, hi in (("mean", -0.5, 0.5), ("variance", 0.5, 2.0),
                               ("scale", 0.5, 1.5), ("bias", -1.0, 1.0))}
    g_bn = hd.Graph(name="bn_after", io_data_type=F32, intermediate_data_type=F32,
                    compute_data_type=F32)
    tx = g_bn.tensor(dims=y_dims, name="x")
    ts = [g_bn.tensor(dims=(1, c, 1, 1), name=k) for k in ("mean", "variance", "scale", "bias")]
    g_bn.batchnorm_inference_variance_ext(tx, *ts, epsilon=1e-5).set_output(True).set_name("z")
    async with hd.Device(gpu_device.spec, streams=2) as dev:
        conv = await dev.build(conv_graph(BIG_X, BIG_W, "big"))
        bn = await dev.build(g_bn)
        xg, wg = await staged(dev, x, w)
        st = {k: await dev.asarray(v) for k, v in stats.items()}
        for attempt in range(2):
            y = await nan_array(dev, y_dims)
            z = await nan_array(dev, y_dims)
            h_conv = conv.submit({"x": xg, "w": wg, "y": y}, stream=0)
            ev = dev.streams[0].record_event()
            dev.streams[1].wait_event(ev)
            h_bn = bn.submit({"x": y, "z": z, **st}, stream=1)
            await h_bn
            await ev.wait()
            assert ev.is_done()
            await h_conv
            y_host, z_host = await y.to_numpy(), await z.to_numpy()
            assert not np.isnan(y_host).any()
            sl = (slice(None), slice(None), slice(None, None, 7), slice(None, None, 5))
            want = ref.bn_inference_variance(y_host[sl], stats["mean"], stats["variance"],
                                             stats["scale"], stats["bias"], 1e-5)
            assert_close(z_host[sl], want, *tol("bn_inference_variance", "float32"),
                         f"attempt {attempt}: batchnorm on stream 1 after the event")
        spot_check(y_host, x, w, what="conv on stream 0")


@pytest.mark.anyio
async def test_cancelled_execute_keeps_buffers_alive(gpu_device, torch_cuda, anyio_backend):
    """Cancelling the awaiting task returns at once; the execution still runs, on buffers
    the library keeps alive (torch's caching allocator would otherwise hand their memory
    to the next torch allocation, which overwrites it)."""
    torch = torch_cuda
    spec = cuda_spec()
    x, w = big_inputs(5)
    refs = []
    async with hd.Device(spec, streams=1, max_inflight=16) as dev:
        plan = await dev.build(conv_graph(BIG_X, BIG_W, "big"))
        xg, wg = await staged(dev, x, w)
        y_block = await nan_array(dev, (32, 256, 56, 56))
        await plan.execute({"x": xg, "w": wg, "y": y_block})
        x_t = torch.from_numpy(x).cuda()
        w_t = torch.from_numpy(w).cuda()
        y_t = torch.full((32, 256, 56, 56), float("nan"), device="cuda")
        torch.cuda.synchronize()
        refs = [weakref.ref(t) for t in (x_t, w_t, y_t)]
        blockers = [plan.submit({"x": xg, "w": wg, "y": y_block}) for _ in range(4)]
        submitted = dev.metrics()["submitted"]
        t0 = time.perf_counter()
        with anyio.move_on_after(0.002) as scope:
            await plan.execute({"x": x_t, "w": w_t, "y": y_t})
        assert scope.cancelled_caught and time.perf_counter() - t0 < 0.5
        assert dev.metrics()["submitted"] == submitted + 1, "the cancelled execution was not enqueued"
        assert not all(h.done() for h in blockers), "too fast to test: the blockers are done"
        y_keep = y_t
        del x_t, w_t, y_t
        gc.collect()
        assert refs[0]() is not None and refs[1]() is not None, "inputs released while in flight"
        junk = [torch.full_like(y_keep, 1e4) for _ in range(2)]    # reuses freed torch memory
        await dev.synchronize()
        assert all(h.done() for h in blockers)
        torch.cuda.synchronize()
        spot_check(y_keep.cpu().numpy(), x, w, what="cancelled execution")
        del y_keep, junk
    gc.collect()
    assert all(r() is None for r in refs), "buffers outlived the work"


@pytest.mark.anyio
async def test_enqueue_waits_at_max_inflight(gpu_device, anyio_backend):
    x, w = big_inputs(6)
    async with hd.Device(gpu_device.spec, streams=1, max_inflight=2) as dev:
        plan = await dev.build(conv_graph(BIG_X, BIG_W, "big"))
        xg, wg = await staged(dev, x, w)
        y = await nan_array(dev, (32, 256, 56, 56))
        vp = {"x": xg, "w": wg, "y": y}
        await plan.execute(vp)
        handles = [await plan.enqueue(vp), await plan.enqueue(vp)]
        with anyio.move_on_after(0.0005) as scope:
            handles.append(await plan.enqueue(vp))
        assert scope.cancelled_caught, "enqueue did not wait with 2 large convolutions in flight"
        with anyio.fail_after(30):
            handles.append(await plan.enqueue(vp))
            for h in handles:
                await h
        m = dev.metrics()
        assert m["in_flight"] == 0 and m["failed"] == 0
        spot_check(await y.to_numpy(), x, w, what="after backpressure")


def test_execute_sync_from_a_thread(gpu_device):
    """execute_sync (threads without an event loop) returns with the results readable."""
    xd, wd = (2, 8, 10, 10), (8, 8, 3, 3)
    rng = np.random.default_rng(7)
    xv, wv = rng.uniform(-1, 1, xd).astype(np.float32), rng.uniform(-1, 1, wd).astype(np.float32)
    plan = gpu_device.build_sync(conv_graph(xd, wd, "sync"))
    xg, wg = gpu_device.empty(xd, "float32"), gpu_device.empty(wd, "float32")
    xg.copy_from(xv)
    wg.copy_from(wv)
    y = gpu_device.empty(xd, "float32")
    y.copy_from(np.full(xd, np.nan, np.float32))
    plan.execute_sync({"x": xg, "w": wg, "y": y})
    assert_close(y.to_numpy_sync(), ref.conv_fprop(xv, wv, (1, 1), (1, 1)),
                 *tol("conv_fprop", "float32"), "execute_sync")
