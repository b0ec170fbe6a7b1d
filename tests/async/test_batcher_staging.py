"""DynamicBatcher on a non-host device: rows staged through host arrays and device copies.

No GPU is needed: ``FakeGpuDevice`` (tests/test_demo_fake_gpu.py) is a CPU device behind
the GPU contract (``is_host`` False, arrays without ``.view``, plans that refuse NumPy).
Every result is checked against a float64 NumPy reference computed here and against the
same requests run through a batcher on the plain CPU device. Runs on asyncio and trio.
"""
from __future__ import annotations

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from test_batcher import (ATOL, C, F32, H, K, RTOL, W, as_layout, cbr_graph, ref_cbr,
                          samples, weights)
from test_demo_fake_gpu import FakeGpuArray, FakeGpuDevice

pytestmark = pytest.mark.anyio

SAME = 1e-5                 # CPU path vs staged path: same kernels, maybe another bucket


# ----------------------------------------------------------------------------- helpers
# (the plain batcher tests' graph, reference and data; tests/async is on sys.path)

async def gather(batcher, requests, results, errors=None):
    """Call the batcher concurrently, one task per request; fill results[i] / errors[i]."""
    async def one(i, req):
        try:
            results[i] = await batcher(req)
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            if errors is None:
                raise
            errors[i] = exc

    async with anyio.create_task_group() as tg:
        for i, req in enumerate(requests):
            tg.start_soon(one, i, req)


async def serve(dev, graph, consts, requests, **kw):
    """Results and metrics of `requests` sent concurrently through a batcher on `dev`."""
    results = {}
    async with hd.DynamicBatcher(dev, graph, constants=consts, **kw) as batcher:
        await gather(batcher, requests, results)
        return results, batcher.metrics()


class SpyDevice(FakeGpuDevice):
    """Records what every execution's input tensor 'x' holds on the device."""

    def __init__(self, real):
        super().__init__(real)
        self.inputs = []

    async def build(self, graph, **kw):
        plan = await super().build(graph, **kw)
        execute, uid = plan.execute, graph.tensor_by("x").uid

        async def spy(pack, **kw2):
            buf = pack.get("x", pack.get(uid))
            self.inputs.append(np.array(buf._inner.view))
            return await execute(pack, **kw2)

        plan.execute = spy
        return plan


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
async def test_staged_callers_get_the_cpu_paths_rows(layout):
    rng = np.random.default_rng(1)
    w, b = weights()
    reqs = [as_layout(samples(rng, int(n)), layout) for n in rng.integers(1, 4, size=12)]
    consts = {"w": as_layout(w, layout), "b": b}
    kw = {"max_batch_size": 8, "max_delay_ms": 20.0}
    async with hd.Device("cpu") as real:
        want, _ = await serve(real, cbr_graph(3, layout), consts, reqs, **kw)
        dev = FakeGpuDevice(real)
        got, m = await serve(dev, cbr_graph(3, layout), consts, reqs, **kw)
    for i, req in enumerate(reqs):
        assert isinstance(got[i], np.ndarray) and got[i].shape == (len(req), K, H, W)
        np.testing.assert_allclose(got[i], want[i], rtol=SAME, atol=SAME)
        np.testing.assert_allclose(got[i], ref_cbr(req, w, b), rtol=RTOL, atol=ATOL)
    assert m["rows"] == sum(len(r) for r in reqs) and m["batches"] < len(reqs)
    # Each batch: one input copied in, one output copied out; constants once.
    assert dev.counts["executions"] == m["batches"]
    assert dev.counts["h2d"] == len(consts) + m["batches"]
    assert dev.counts["d2h"] == m["batches"]


async def test_constants_upload_once_and_buffers_are_reused():
    rng = np.random.default_rng(2)
    w, b = weights()
    async with hd.Device("cpu") as real:
        dev = FakeGpuDevice(real)
        batcher = hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                    max_batch_size=4, max_delay_ms=0.0)
        assert dev.counts["h2d"] == 2 and dev.counts["alloc"] == 2
        async with batcher:
            for _ in range(5):      # one at a time: bucket 1 each time
                x = samples(rng, 1)
                np.testing.assert_allclose(await batcher(x), ref_cbr(x, w, b),
                                           rtol=RTOL, atol=ATOL)
            m = batcher.metrics()
    assert m["batches"] == 5 and m["buckets_used"] == [1]
    assert dev.counts["h2d"] == 2 + 5
    assert dev.counts["alloc"] == 2 + 2          # constants, then one x and one y, reused


async def test_many_concurrent_batches_stay_apart():
    rng = np.random.default_rng(3)
    w, b = weights()
    reqs = [samples(rng, 1) for _ in range(64)]
    kw = {"max_batch_size": 8, "max_delay_ms": 5.0, "max_concurrent_batches": 4}
    async with hd.Device("cpu") as real:
        want, _ = await serve(real, cbr_graph(), {"w": w, "b": b}, reqs, **kw)
        dev = FakeGpuDevice(real)
        got, m = await serve(dev, cbr_graph(), {"w": w, "b": b}, reqs, **kw)
    for i, x in enumerate(reqs):
        np.testing.assert_allclose(got[i], want[i], rtol=SAME, atol=SAME)
        np.testing.assert_allclose(got[i], ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
    assert m["rows"] == 64 and m["batches"] >= 8
    # At most max_concurrent_batches sets of (x, y) per bucket, however many batches.
    assert dev.counts["alloc"] <= 2 + 2 * 4 * len(m["buckets_used"])


async def test_padding_rows_of_a_reused_buffer_are_zero():
    rng = np.random.default_rng(4)
    w, b = weights()
    async with hd.Device("cpu") as real:
        dev = SpyDevice(real)
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=4, max_delay_ms=0.0) as batcher:
            full, part = samples(rng, 4), samples(rng, 3)
            y_full = await batcher(full)            # bucket 4, every row real
            y_part = await batcher(part)            # bucket 4 again, one padding row
    np.testing.assert_allclose(y_full, ref_cbr(full, w, b), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y_part, ref_cbr(part, w, b), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(dev.inputs[1][:3], part)
    assert not dev.inputs[1][3:].any()              # not the old row 3 of `full`


async def test_batchnorm_inference_constants_are_staged():
    rng = np.random.default_rng(5)
    eps = 1e-5
    g = hd.Graph(name="bn", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(2, C, H, W), layout="NHWC", name="x")
    stats = {k: g.tensor(dims=(1, C, 1, 1), layout="NCHW", name=k)
             for k in ("mean", "variance", "scale", "bias")}
    g.batchnorm_inference_variance_ext(x, stats["mean"], stats["variance"], stats["scale"],
                                       stats["bias"], epsilon=eps).set_output(
        True).set_name("y")
    g.validate()
    consts = {k: rng.standard_normal((1, C, 1, 1)) for k in stats}   # float64: cast once
    consts["variance"] = np.abs(consts["variance"]) + 0.5
    xs = [{"x": samples(rng, n)} for n in (1, 3, 2)]
    async with hd.Device("cpu") as real:
        want, _ = await serve(real, g, consts, xs, max_delay_ms=20.0)
        dev = FakeGpuDevice(real)
        got, m = await serve(dev, g, consts, xs, max_delay_ms=20.0)
    c32 = {k: v.astype(np.float32).astype(np.float64) for k, v in consts.items()}
    for i, req in enumerate(xs):
        ref = (c32["scale"] * (req["x"] - c32["mean"]) / np.sqrt(c32["variance"] + eps)
               + c32["bias"])
        np.testing.assert_allclose(got[i], ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[i], want[i], rtol=SAME, atol=SAME)
    assert dev.counts["h2d"] == 4 + m["batches"]


async def test_copy_errors_name_the_tensor_and_serving_goes_on(monkeypatch):
    rng = np.random.default_rng(6)
    w, b = weights()
    x = samples(rng, 1)
    real_copy, real_fetch = FakeGpuArray.copy_from, FakeGpuArray.to_numpy_sync

    def broken_copy(self, array):
        raise hd.DeviceError("cudaMemcpy failed: cudaErrorIllegalAddress (700)", status=700,
                             status_name="cudaErrorIllegalAddress")

    def broken_fetch(self):
        raise RuntimeError("lost the device")

    async with hd.Device("cpu") as real:
        dev = FakeGpuDevice(real)
        monkeypatch.setattr(FakeGpuArray, "copy_from", broken_copy)
        with pytest.raises(hd.DeviceError, match=r"'w'.*cudaErrorIllegalAddress"):
            hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b})
        monkeypatch.setattr(FakeGpuArray, "copy_from", real_copy)
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_delay_ms=0.0) as batcher:
            monkeypatch.setattr(FakeGpuArray, "copy_from", broken_copy)
            with pytest.raises(hd.DeviceError, match=r"tensor 'x'.*'fake:0'") as exc:
                await batcher(x)
            assert exc.value.status == 700 and "cudaErrorIllegalAddress" in str(exc.value)
            monkeypatch.setattr(FakeGpuArray, "copy_from", real_copy)
            monkeypatch.setattr(FakeGpuArray, "to_numpy_sync", broken_fetch)
            with pytest.raises(hd.DeviceError, match=r"tensor 'y'.*lost the device"):
                await batcher(x)
            monkeypatch.setattr(FakeGpuArray, "to_numpy_sync", real_fetch)
            y = await batcher(x)
            m = batcher.metrics()
    np.testing.assert_allclose(y, ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
    assert m["errors"] == 2 and m["batches"] == 1


async def test_numpy_never_reaches_a_device_plan():
    """The fake refuses NumPy in a variant pack, so a staging slip fails loudly."""
    w, b = weights()
    async with hd.Device("cpu") as real:
        dev = FakeGpuDevice(real)
        plan = await dev.build(cbr_graph())
        with pytest.raises(hd.VariantPackError, match="'w'"):
            await plan.execute({"x": dev.empty((1, C, H, W), F32), "w": w, "b": b,
                                "y": dev.empty((1, K, H, W), F32)})
