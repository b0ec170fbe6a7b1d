"""The CPU device's DeviceArray copies wait for the work already submitted to the device's
streams, as a GpuArray's copies wait for launched work (its to_numpy read zeros of a
submitted, unfinished conv before; docstring-audit report). A gate on the plan's stream
holds the work back, so the order is checked without timing luck."""
from __future__ import annotations

import pickle
import threading

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol

pytestmark = pytest.mark.anyio

N, C, HW = 2, 3, 5


def _conv(dev):
    g = hd.Graph(name="order")
    x = g.tensor(dims=(N, C, HW, HW), name="x")
    w = g.tensor(dims=(C, C, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    rng = np.random.default_rng(7)
    xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
    wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
    ref = R.conv_fprop(xa, wa, pre=1, post=1)
    return dev.build_sync(g), x, w, y, xa, wa, ref


def _gate(dev):
    """Hold stream 0 until the returned event is set."""
    gate = threading.Event()
    dev._pool.submit_now(gate.wait, stream=0, label="gate")
    return gate


def _waits_behind(gate, fn):
    """Run ``fn`` on a thread while stream 0 is held, then release it: (whether ``fn``
    had returned before the release, its result)."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(0.05)
    early = bool(out)
    gate.set()
    t.join(10)
    assert len(out) == 1
    return early, out[0]


async def test_to_numpy_waits_for_the_submitted_execution(anyio_backend):
    async with hd.Device("cpu", streams=2) as dev:
        plan, x, w, y, xa, wa, ref = _conv(dev)
        ya = dev.empty(y.dims, "float32")
        ya.copy_from(np.zeros(y.dims, np.float32))
        gate = _gate(dev)
        handle = plan.submit({x: xa, w: wa, y: ya}, stream=0)
        got = []

        async def read():
            got.append(await ya.to_numpy())

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.sleep(0.05)
                early = list(got)
                gate.set()
        finally:
            gate.set()                                 # never leave the stream held
        assert early == [] and handle.done()           # it waited behind the gate
        assert_close(got[0], ref, *reduction_tol("conv_fprop", "float32", C * 9))


def test_copy_from_and_to_numpy_sync_wait_for_submitted_work():
    with hd.Device("cpu", streams=2) as dev:
        plan, x, w, y, xa, wa, ref = _conv(dev)
        xd = dev.empty(x.dims, "float32")
        xd.copy_from(xa)
        ya = dev.empty(y.dims, "float32")
        gate = _gate(dev)
        handle = plan.submit({x: xd, w: wa, y: ya}, stream=0)
        early, _ = _waits_behind(gate, lambda: xd.copy_from(np.zeros(x.dims, np.float32)))
        assert not early                    # the overwrite waited for the execution
        handle.result(10)
        # the execution read x before the overwrite, and to_numpy_sync sees its result
        assert_close(ya.to_numpy_sync(), ref, *reduction_tol("conv_fprop", "float32", C * 9))
        np.testing.assert_array_equal(xd.to_numpy_sync(), np.zeros(x.dims, np.float32))


def test_pickling_waits_for_submitted_work():
    # a DeviceArray pickled (for another process) holds the values of the work already
    # submitted to write it, as to_numpy_sync does
    with hd.Device("cpu", streams=2) as dev:
        plan, x, w, y, xa, wa, ref = _conv(dev)
        ya = dev.empty(y.dims, "float32")
        ya.copy_from(np.zeros(y.dims, np.float32))
        gate = _gate(dev)
        handle = plan.submit({x: xa, w: wa, y: ya}, stream=0)
        early, pickled = _waits_behind(gate, lambda: pickle.dumps(ya))
        assert not early
        handle.result(10)
        assert_close(pickle.loads(pickled).to_numpy_sync(), ref,
                     *reduction_tol("conv_fprop", "float32", C * 9))


def test_to_numpy_sync_in_a_done_callback_reads_the_result():
    # a handle's done-callback runs on the stream's worker: waiting there for the work
    # submitted to that stream waited for the callback itself (it hung the stream, and
    # so close(): the device is closed only once the callback has returned)
    dev = hd.Device("cpu", streams=2)
    plan, x, w, y, xa, wa, ref = _conv(dev)
    ya = dev.empty(y.dims, "float32")
    got, done = [], threading.Event()

    def on_done(_):
        try:
            got.append(ya.to_numpy_sync())
            ya.copy_from(np.zeros(y.dims, np.float32))
            got.append(ya.to_numpy_sync())
        finally:
            done.set()

    plan.submit({x: xa, w: wa, y: ya}, stream=0).add_done_callback(on_done)
    assert done.wait(10), "to_numpy_sync in a done-callback did not return"
    dev.close()
    assert_close(got[0], ref, *reduction_tol("conv_fprop", "float32", C * 9))
    np.testing.assert_array_equal(got[1], np.zeros(y.dims, np.float32))


async def test_asarray_and_copy_from_of_a_device_array_wait_for_its_writer(anyio_backend):
    # the source array's submitted writer: Device.asarray(y) and other.copy_from(y) read
    # y at once before (the conv's output still zeros), also from another CPU device
    async with hd.Device("cpu", streams=2) as dev, hd.Device("cpu", streams=2) as dev2:
        plan, x, w, y, xa, wa, ref = _conv(dev)
        tol = reduction_tol("conv_fprop", "float32", C * 9)
        ya = dev.empty(y.dims, "float32")
        for copy in ("asarray", "copy_from"):
            ya.copy_from(np.zeros(y.dims, np.float32))
            gate = _gate(dev)
            plan.submit({x: xa, w: wa, y: ya}, stream=0)
            threading.Timer(0.1, gate.set).start()
            try:
                if copy == "asarray":
                    out = await dev.asarray(ya)
                else:
                    out = dev2.empty(y.dims, "float32")
                    await anyio.to_thread.run_sync(out.copy_from, ya)
            finally:
                gate.set()
            assert_close(out.to_numpy_sync(), ref, *tol)


def test_cpu_device_arrays_start_on_a_64_byte_boundary():
    # NumPy's own arrays start at 16-byte boundaries; oneDNN's kernels read 64-byte vectors
    import ml_dtypes
    with hd.Device("cpu") as dev:
        for dims, dtype in (((32, 64, 56, 56), np.float32), ((3, 5, 1, 1), np.float16),
                            ((2, 3, 7, 7), ml_dtypes.bfloat16), ((1, 1, 1, 1), np.float32)):
            arrays = [dev.empty(dims, dtype) for _ in range(4)]
            assert [a.view.ctypes.data % 64 for a in arrays] == [0] * 4, dims
            a = arrays[0]
            assert a.view.shape == dims and a.view.dtype == np.dtype(dtype)
            a.view[...] = 3
            assert a.nbytes == np.prod(dims) * np.dtype(dtype).itemsize
            assert (a.view == 3).all()
