"""Capture and replay on the GPU (issue 11 item 3): a step is a CUDA/HIP graph of the
plans' work; replays compute from the buffers named at capture (new inputs copied in),
in order, on both engines; a recapture with new buffers; a 20-plan step; a step keeps its
own workspace when the stream's grows; cancellation and the stream rule; what is refused
inside a block (execute, execute_sync, another device's plan, a replay, awaiting a recorded
handle: DeviceError, code INVALID_VALUE, nothing runs) and what runs as usual (another
thread, a task started inside the block). Every result against the float64 oracle
(tests/oracle/_reference.py) of the values the GPU holds."""
from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import assert_close, reduction_tol, tol

import hipdnn_async as hd

from .conftest import engine_names

pytestmark = pytest.mark.gpu

F32 = hd.DataType.FLOAT
EPS = 1e-5


def _conv(name, dtype, layout, n=2, c=16, hw=10, k=16, r=3):
    g = hd.Graph(name=name, io_data_type=dtype, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(n, c, hw, hw), layout=layout, name="x")
    w = g.tensor(dims=(k, c, r, r), layout=layout, name="w")
    y = g.conv_fprop(x, w, padding=r // 2).set_output(True).set_name("y")
    return g, x, w, y


def _bn_relu(dtype, layout, n=2, c=16, hw=10):
    g = hd.Graph(name="bn_relu", io_data_type=dtype, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(n, c, hw, hw), layout=layout, name="x")
    s = g.tensor(dims=(1, c, 1, 1), data_type=F32, name="scale")
    b = g.tensor(dims=(1, c, 1, 1), data_type=F32, name="bias")
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=EPS)
    r = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("r")
    mean.set_output(True).set_name("mean")
    inv.set_output(True).set_name("inv")
    return g, (x, s, b), (r, mean, inv)


def _np(dtype):
    import ml_dtypes
    return {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]


def _array(dev, values, dtype, layout):
    arr = dev.empty(values.shape, dtype, layout=layout)
    arr.copy_from(values.astype(_np(dtype)))
    return arr


def _host(arr):
    return arr.to_numpy_sync().astype(np.float64)


def _nan(dev, dims, dtype, layout):
    return _array(dev, np.full(dims, np.nan), dtype, layout)


def _build(dev, g, engine):
    try:
        return dev.build_sync(g, engine=engine)
    except hd.NotSupportedError as exc:
        if engine is None:
            raise
        pytest.skip(f"engine {engine} declines {g.name}: {exc}")


CASES = [("float16", "NHWC"), ("float32", "NCHW"), ("bfloat16", "NHWC")]


@pytest.fixture(params=[None, "CUDNN_GRAPH_ENGINE", "CUDNN_LEGACY_ENGINE", "MIOPEN_ENGINE"])
def engine(request, gpu_device):
    if request.param is not None and request.param not in engine_names(gpu_device.spec):
        pytest.skip(f"{request.param} is not an engine of {gpu_device.spec}")
    return request.param


def _conv_check(got, x, w, dtype, what):
    c, r = w.shape[1], w.shape[2]
    atol, rtol = reduction_tol("conv_fprop", dtype, c * r * r, np.abs(x).max(),
                               np.abs(w).max())
    assert_close(got, ref.conv_fprop(x, w, pre=r // 2, post=r // 2), atol, rtol, what)


@pytest.mark.parametrize("dtype,layout", CASES)
def test_one_plan_replays_on_the_captured_buffers(gpu_device, engine, dtype, layout):
    dev = gpu_device
    rng = np.random.default_rng(0)
    g, x, w, y = _conv("cap1", dtype, layout)
    plan = _build(dev, g, engine)
    xd = _array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)
    wd = _array(dev, rng.uniform(-1, 1, w.dims), dtype, layout)
    yd = _nan(dev, y.dims, dtype, layout)
    with dev.capture() as step:
        handle = plan.submit({x: xd, w: wd, y: yd})
    assert not handle.done() and len(step) == 1     # it runs at each replay, not before
    assert np.isnan(_host(yd)).all(), "the capture ran the plan"
    for i in range(3):
        if i:
            xd.copy_from(rng.uniform(-1, 1, x.dims).astype(_np(dtype)))
        step.replay_sync()
        _conv_check(_host(yd), _host(xd), _host(wd), dtype,
                    f"replay {i} ({plan.engine.name}, {plan.algorithm})")
    step.close()
    with pytest.raises(hd.DeviceError, match="closed"):
        step.replay_sync()


def test_a_three_plan_step_runs_in_order_and_recaptures(gpu_device, engine):
    dtype, layout = "float16", "NHWC"
    dev = gpu_device
    rng = np.random.default_rng(1)
    g1, x1, w1, y1 = _conv("cap_a", dtype, layout)
    g2, (bx, bs, bb), (br, bm, bi) = _bn_relu(dtype, layout)
    g3, x3, w3, y3 = _conv("cap_b", dtype, layout)
    p1, p2, p3 = (_build(dev, g, engine) for g in (g1, g2, g3))
    d = {"x": _array(dev, rng.uniform(-1, 1, x1.dims), dtype, layout),
         "w1": _array(dev, rng.uniform(-1, 1, w1.dims), dtype, layout),
         "w2": _array(dev, rng.uniform(-1, 1, w3.dims), dtype, layout),
         "scale": _array(dev, rng.uniform(0.5, 1.5, (1, 16, 1, 1)), "float32", "NCHW"),
         "bias": _array(dev, rng.uniform(-0.5, 0.5, (1, 16, 1, 1)), "float32", "NCHW")}
    for name in ("y", "r", "z", "z2"):
        d[name] = _nan(dev, y1.dims, dtype, layout)
    for name in ("mean", "inv"):
        d[name] = _nan(dev, (1, 16, 1, 1), "float32", "NCHW")

    def record(z):
        p1.submit({x1: d["x"], w1: d["w1"], y1: d["y"]})
        p2.submit({bx: d["y"], bs: d["scale"], bb: d["bias"], br: d["r"], bm: d["mean"],
                   bi: d["inv"]})
        p3.submit({x3: d["r"], w3: d["w2"], y3: d[z]})

    def check(z):
        h = {k: _host(a) for k, a in d.items()}
        _conv_check(h["y"], h["x"], h["w1"], dtype, "conv a")
        bn = ref.bn_training(h["y"], h["scale"], h["bias"], EPS)
        t = tol("bn_training", dtype)
        assert_close(h["r"], ref.relu(bn["y"]), *t, what="bn relu")
        assert_close(h["mean"], bn["mean"], *tol("bn_training", "float32"), what="mean")
        assert_close(h["inv"], bn["inv_variance"], *tol("bn_training", "float32"), what="inv")
        _conv_check(h[z], h["r"], h["w2"], dtype, "conv b")

    with dev.capture() as step:
        record("z")
    step.replay_sync()
    check("z")
    d["x"].copy_from(rng.uniform(-1, 1, x1.dims).astype(np.float16))
    step.replay_sync()
    check("z")
    before = _host(d["z"])
    with step.recapture():
        record("z2")
    step.replay_sync()
    check("z2")
    np.testing.assert_array_equal(_host(d["z"]), before)    # no longer written
    step.close()


def test_a_twenty_plan_chain_replays_with_one_launch_each(gpu_device):
    dev = gpu_device
    dtype, layout = "float16", "NHWC"
    rng = np.random.default_rng(2)
    g, x, w, y = _conv("chain", dtype, layout, c=32, k=32, r=1)
    plan = dev.build_sync(g)
    q, _ = np.linalg.qr(rng.standard_normal((32, 32)))      # bounded over 20 products
    wd = _array(dev, q.reshape(32, 32, 1, 1), dtype, layout)
    bufs = [_array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)]
    bufs += [_nan(dev, y.dims, dtype, layout) for _ in range(20)]
    with dev.capture() as step:
        for i in range(20):
            plan.submit({x: bufs[i], w: wd, y: bufs[i + 1]})
    assert len(step) == 20
    for rep in range(2):
        if rep:
            bufs[0].copy_from(rng.uniform(-1, 1, x.dims).astype(np.float16))
        handles = [step.submit() for _ in range(3)]           # back to back
        for h in handles:
            h.result()
        wh = _host(wd)
        for i in range(1, 21):
            _conv_check(_host(bufs[i]), _host(bufs[i - 1]), wh, dtype, f"stage {i}")
    step.close()


def test_the_step_keeps_its_workspace_when_the_stream_grows_its_own(gpu_device):
    dev = gpu_device
    dtype, layout = "float32", "NCHW"
    rng = np.random.default_rng(3)
    g, x, w, y = _conv("ws_small", dtype, layout, c=8, k=8, hw=12)
    plan = dev.build_sync(g)
    xd = _array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)
    wd = _array(dev, rng.uniform(-1, 1, w.dims), dtype, layout)
    yd = _nan(dev, y.dims, dtype, layout)
    with dev.capture(stream=0) as step:
        plan.submit({x: xd, w: wd, y: yd})
    # a larger problem built afterwards grows every stream's workspace (freeing the old)
    big, bx, bw, by = _conv("ws_big", dtype, layout, n=2, c=64, k=64, hw=28)
    big_plan = dev.build_sync(big)
    bxd = _array(dev, rng.uniform(-1, 1, bx.dims), dtype, layout)
    bwd = _array(dev, rng.uniform(-1, 1, bw.dims) * 0.05, dtype, layout)
    byd = _nan(dev, by.dims, dtype, layout)
    big_plan.execute_sync({bx: bxd, bw: bwd, by: byd}, stream=0)
    step.replay_sync()
    _conv_check(_host(yd), _host(xd), _host(wd), dtype, "replay after the stream grew")
    step.close()


async def test_await_replay_and_cancellation(gpu_device, anyio_backend):
    dev = gpu_device
    dtype, layout = "float16", "NHWC"
    rng = np.random.default_rng(4)
    g, x, w, y = _conv("cap_async", dtype, layout)
    plan = await dev.build(g)
    xd = _array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)
    wd = _array(dev, rng.uniform(-1, 1, w.dims), dtype, layout)
    yd = _nan(dev, y.dims, dtype, layout)
    async with dev.capture() as step:
        plan.submit({x: xd, w: wd, y: yd})                   # recorded
    await step.replay()
    _conv_check(_host(yd), _host(xd), _host(wd), dtype, "await replay")
    xd.copy_from(rng.uniform(-1, 1, x.dims).astype(np.float16))
    with anyio.move_on_after(0):
        await step.replay()                # cancelled at once: the replay may or may not start
    await dev.synchronize()
    await step.replay()
    _conv_check(_host(yd), _host(xd), _host(wd), dtype, "replay after a cancelled one")
    step.close()


def test_submitting_to_another_stream_during_capture(gpu_device):
    dev = hd.Device(gpu_device.spec, streams=2)
    try:
        g, x, w, y = _conv("cap_streams", "float32", "NCHW")
        plan = dev.build_sync(g)
        vp = {t: _nan(dev, t.dims, "float32", "NCHW") for t in (x, w, y)}
        with pytest.raises(hd.DeviceError, match="during a capture"):
            with dev.capture(stream=0):
                plan.submit(vp, stream=1)
        vp[x].copy_from(np.ones(x.dims, np.float32))
        vp[w].copy_from(np.ones(w.dims, np.float32))
        plan.execute_sync(vp, stream=1)                      # the device goes on
        assert _host(vp[y])[0, 0, 5, 5] == 16 * 9
    finally:
        dev.close()


def _refused(excinfo, match):
    assert excinfo.value.code == "INVALID_VALUE", excinfo.value.code
    assert match in str(excinfo.value), str(excinfo.value)


async def test_what_a_capture_block_refuses_runs_nothing(gpu_device, anyio_backend):
    dev = gpu_device
    dtype, layout = "float32", "NCHW"
    rng = np.random.default_rng(5)
    g, x, w, y = _conv("cap_rules", dtype, layout)
    plan = await dev.build(g)
    xd = _array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)
    wd = _array(dev, rng.uniform(-1, 1, w.dims), dtype, layout)
    refused, rec = _nan(dev, y.dims, dtype, layout), _nan(dev, y.dims, dtype, layout)
    async with hd.Device("cpu") as cpu:
        cpu_plan = await cpu.build(g)
        cpu_y = np.full(y.dims, np.nan, np.float32)
        cpu_vp = {x: _host(xd).astype(np.float32), w: _host(wd).astype(np.float32), y: cpu_y}
        async with dev.capture() as step:
            with pytest.raises(hd.DeviceError) as ei:
                await plan.execute({x: xd, w: wd, y: refused})
            _refused(ei, "execute inside a capture: use submit; results come from replay")
            with pytest.raises(hd.DeviceError) as ei:
                plan.execute_sync({x: xd, w: wd, y: refused})
            _refused(ei, "execute_sync inside a capture")
            with pytest.raises(hd.DeviceError) as ei:
                cpu_plan.submit(cpu_vp)
            _refused(ei, f"inside a capture of device '{dev.spec}'")
            handle = plan.submit({x: xd, w: wd, y: rec})
            with pytest.raises(hd.DeviceError) as ei:
                with anyio.fail_after(10):
                    await handle
            _refused(ei, "recorded into capture step")
        async with cpu.capture() as cstep:
            with pytest.raises(hd.DeviceError) as ei:
                plan.submit({x: xd, w: wd, y: refused})
            _refused(ei, "inside a capture of device 'cpu'")
            with pytest.raises(hd.DeviceError) as ei:
                await step.replay()
            _refused(ei, "inside a capture")
        await dev.synchronize()
        assert len(step) == 1 and len(cstep) == 0
        assert np.isnan(_host(rec)).all() and np.isnan(cpu_y).all()
        await step.replay()
        _conv_check(_host(rec), _host(xd), _host(wd), dtype, "the recorded submit")
        assert np.isnan(_host(refused)).all(), "a refused execution ran"
        step.close()
        cstep.close()
        with pytest.raises(hd.DeviceError) as ei:
            step.replay_sync()
        _refused(ei, "is closed")


async def test_other_threads_and_tasks_run_as_usual_during_a_capture(gpu_device, anyio_backend):
    dev = hd.Device(gpu_device.spec, streams=1)     # one stream: all of it on the step's
    try:
        dtype, layout = "float16", "NHWC"
        rng = np.random.default_rng(6)
        g, x, w, y = _conv("cap_others", dtype, layout)
        plan = await dev.build(g)
        xd = _array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)
        wd = _array(dev, rng.uniform(-1, 1, w.dims), dtype, layout)
        outs = {n: _nan(dev, y.dims, dtype, layout) for n in ("rec", "thread", "task", "worker")}
        errors = []

        def plain_thread():
            try:
                plan.execute_sync({x: xd, w: wd, y: outs["thread"]})
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        async def child():
            await plan.execute({x: xd, w: wd, y: outs["task"]})

        async with anyio.create_task_group() as tg:
            async with dev.capture() as step:
                plan.submit({x: xd, w: wd, y: outs["rec"]})
                tg.start_soon(child)                  # inherits the context, not the capture
                t = threading.Thread(target=plain_thread)
                t.start()
                await anyio.to_thread.run_sync(
                    plan.execute_sync, {x: xd, w: wd, y: outs["worker"]})
                await anyio.to_thread.run_sync(t.join)
        assert not errors, errors
        assert len(step) == 1 and np.isnan(_host(outs["rec"])).all()
        xh, wh = _host(xd), _host(wd)
        for name in ("thread", "task", "worker"):
            _conv_check(_host(outs[name]), xh, wh, dtype, f"the {name}'s execute")
        await step.replay()
        _conv_check(_host(outs["rec"]), xh, wh, dtype, "the replay")
        step.close()
    finally:
        dev.close()


@pytest.mark.parametrize("dtype,layout", [("float16", "NHWC"), ("float32", "NCHW")])
def test_copies_on_another_thread_while_steps_capture(gpu_device, engine, dtype, layout):
    # a copy orders the copy stream after every compute stream by recording an event on
    # each; on a stream that is capturing a step that record would join the capture. It
    # waits for the capture instead: every copy and every step must come out right
    dev = gpu_device
    rng = np.random.default_rng(9)
    g, x, w, y = _conv("cap_copy", dtype, layout, n=8, c=32, hw=28, k=32)
    plan = _build(dev, g, engine)
    other = dev.empty((1 << 16,), np.float32)
    stop, errors, copies = threading.Event(), [], [0]

    def copier():
        base = np.arange(1 << 16, dtype=np.float32)
        while not stop.is_set():
            try:
                other.copy_from(base + copies[0])
                if not np.array_equal(other.to_numpy_sync(), base + copies[0]):
                    errors.append(f"copy {copies[0]} read back other values")
                    return
                copies[0] += 1
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(f"{type(exc).__name__}: {exc}")
                return

    t = threading.Thread(target=copier)
    t.start()
    try:
        for k in range(12):                       # 12 captures while the copies run
            xd = _array(dev, rng.uniform(-1, 1, x.dims), dtype, layout)
            wd = _array(dev, rng.uniform(-1, 1, w.dims), dtype, layout)
            yd = _nan(dev, y.dims, dtype, layout)
            with dev.capture() as step:
                plan.submit({x: xd, w: wd, y: yd})
            step.replay_sync()
            step.close()
            _conv_check(_host(yd), _host(xd), _host(wd), dtype,
                        f"step {k} ({plan.engine.name}, {plan.algorithm})")
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert copies[0] > 0


def test_end_capture_of_an_invalidated_capture_leaves_the_stream_usable(gpu_device):
    # Runtime.end_capture, the end of every capture step and of GraphLaunch's capture: a
    # capture invalidated by a call not allowed during it (synchronizing the capturing
    # stream: CUDA programming guide, "Prohibited and Unhandled Operations") ends with an
    # error and no graph, the stream no longer capturing; the captured memset never ran
    # and later work on the stream runs
    import ctypes

    from hipdnn_async._errors import GpuError
    ctx = gpu_device.provider.context
    rt, n = ctx.runtime, 4096
    host = np.zeros(n, np.uint8)
    with ctx.using():
        s = rt.stream_create()
        a = rt.malloc(n, 0, False)
        try:
            rt.memset_async(a, 1, n, s)
            rt.stream_synchronize(s)
            rt.stream_begin_capture(s)
            rt.memset_async(a, 7, n, s)           # recorded, not run
            with pytest.raises(GpuError):
                rt.stream_synchronize(s)          # refused; invalidates the capture
            with pytest.raises(GpuError) as err:
                rt.end_capture(s)
            assert err.value.call == rt.prefix + "StreamEndCapture", err.value
            assert rt.stream_is_capturing(s) == rt.constants["STREAM_CAPTURE_STATUS_NONE"]
            rt.memcpy(host.ctypes.data, a, n, rt.MEMCPY_DEVICE_TO_HOST)
            assert (host == 1).all(), np.unique(host)
            rt.memset_async(a, 5, n, s)
            rt.stream_synchronize(s)
            rt.memcpy(host.ctypes.data, a, n, rt.MEMCPY_DEVICE_TO_HOST)
            assert (host == 5).all(), np.unique(host)
        finally:
            # the refused calls set the thread's last error; leave none behind (PyTorch
            # checks it after its own launches in later tests)
            ctypes.CFUNCTYPE(ctypes.c_int)(rt.lib.address("GetLastError"))()
            rt.stream_destroy(s)
            rt.free(a, 0, False)
