"""Several devices in one process (issue 14), on the CPU: two Device objects run plans
concurrently from one event loop without sharing state, and one DynamicBatcher serves over
a list of devices, sending each batch to the least loaded one, with per-device metrics.

Results are checked against the float64 reference of tests/async/test_batcher.py. The
GPU forms of the same checks are tests/contract/test_multi_device_contract.py (two fake
GPUs) and tests/gpu/test_multi_device_gpu.py (the H200).
"""
from __future__ import annotations

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async._errors import DeviceError, GraphError

from test_batcher import ATOL, C, H, RTOL, W, cbr_graph, ref_cbr, samples, weights

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


# ----------------------------------------------------------------------------- devices

async def test_two_devices_run_concurrently_without_shared_state():
    rng = np.random.default_rng(1)
    w, b = weights(1)
    async with hd.Device("cpu", streams=2) as d0, hd.Device("cpu", streams=3) as d1:
        assert d0.streams is not d1.streams and len(d0.streams) == 2 and len(d1.streams) == 3
        results = {}

        async def run(dev, key, n):
            g = cbr_graph(4)
            plan = await dev.build(g)
            got, want = [], []
            for _ in range(n):
                x = samples(rng, 4)
                y = dev.empty((4, 5, H, W), hd.DataType.FLOAT)
                await plan.execute({"x": x, "w": w, "b": b, "y": y})
                got.append(await y.to_numpy())
                want.append(ref_cbr(x, w, b))
            results[key] = (plan, got, want)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, d0, "d0", 3)
            tg.start_soon(run, d1, "d1", 5)
        for key, n in (("d0", 3), ("d1", 5)):
            plan, got, want = results[key]
            assert len(got) == n
            for g_, w_ in zip(got, want):
                np.testing.assert_allclose(g_, w_, rtol=RTOL, atol=ATOL)
        # each device built its own plan and counted only its own work
        assert results["d0"][0].device is d0 and results["d1"][0].device is d1
        assert d0.metrics()["completed"] == 3 and d1.metrics()["completed"] == 5
        s0, s1 = d0.plan_stats(), d1.plan_stats()
        assert s0["CONV_FPROP_BIAS_RELU"]["executions"] == 3
        assert s1["CONV_FPROP_BIAS_RELU"]["executions"] == 5
        # closing one leaves the other working
        await d0.aclose()
        plan = results["d1"][0]
        x = samples(rng, 4)
        y = d1.empty((4, 5, H, W), hd.DataType.FLOAT)
        await plan.execute({"x": x, "w": w, "b": b, "y": y})
        np.testing.assert_allclose(await y.to_numpy(), ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
        with pytest.raises(DeviceError, match="after close"):
            await results["d0"][0].execute({"x": x, "w": w, "b": b, "y": y})


async def test_asarray_of_a_host_array_of_another_cpu_device_copies():
    a = np.arange(2 * C * H * W, dtype=np.float32).reshape(2, C, H, W)
    async with hd.Device("cpu") as d0, hd.Device("cpu") as d1:
        src = await d0.asarray(a)
        dst = await d1.asarray(await src.to_numpy())
        np.testing.assert_array_equal(await dst.to_numpy(), a)
        assert not np.shares_memory(src.view, dst.view)


# ----------------------------------------------------------------------------- batcher

async def test_batcher_over_two_devices_serves_every_caller_correctly():
    rng = np.random.default_rng(2)
    w, b = weights(2)
    reqs = [samples(rng, 1 + i % 3) for i in range(40)]
    async with hd.Device("cpu", streams=2) as d0, hd.Device("cpu", streams=2) as d1:
        batcher = hd.DynamicBatcher([d0, d1], cbr_graph(), constants={"w": w, "b": b},
                                    max_batch_size=4, max_delay_ms=1.0)
        assert batcher.devices == (d0, d1)
        assert batcher.max_concurrent_batches == 4          # 2 streams on each device
        got = [None] * len(reqs)
        async with batcher:
            async def client(i):
                got[i] = await batcher(reqs[i])
            async with anyio.create_task_group() as tg:
                for i in range(len(reqs)):
                    tg.start_soon(client, i)
        for r, g_ in zip(reqs, got):
            np.testing.assert_allclose(g_, ref_cbr(r, w, b), rtol=RTOL, atol=ATOL)
        m = batcher.metrics()
        per = m["devices"]
        assert [d["device"] for d in per] == ["cpu", "cpu"]
        assert sum(d["batches"] for d in per) == m["batches"]
        assert sum(d["rows"] for d in per) == m["rows"] == sum(len(r) for r in reqs)
        assert all(d["errors"] == 0 and d["pending"] == 0 for d in per)
        # each device ran batches on plans of its own and holds its own constants
        lanes = batcher._lanes
        assert all(d["batches"] >= 1 for d in per), per
        assert {id(p.plan.device) for ln in lanes for p in ln.plans.values()} == {id(d0), id(d1)}
        assert not np.shares_memory(lanes[0].constants["w"], lanes[1].constants["w"])
        assert m["plans_built"] == sum(d["plans_built"] for d in per)


class _GatedDevice:
    """A CPU Device whose plans' executions wait for ``gate`` (set: run at once)."""

    def __init__(self, dev, gate: anyio.Event | None):
        self._dev, self.gate = dev, gate
        self.spec, self.is_host, self.streams = "gated-" + dev.spec, True, dev.streams

    def empty(self, *args, **kwargs):
        return self._dev.empty(*args, **kwargs)

    async def build(self, graph, **kwargs):
        plan = await self._dev.build(graph, **kwargs)
        outer = self

        class Plan:
            pattern = plan.pattern
            device = outer

            async def execute(self, pack):
                if outer.gate is not None:
                    await outer.gate.wait()
                await plan.execute(pack)
        return Plan()


async def test_batcher_sends_each_batch_to_the_least_loaded_device():
    rng = np.random.default_rng(3)
    w, b = weights(3)
    async with hd.Device("cpu") as c0, hd.Device("cpu") as c1:
        slow, fast = _GatedDevice(c0, anyio.Event()), _GatedDevice(c1, None)
        batcher = hd.DynamicBatcher([slow, fast], cbr_graph(), constants={"w": w, "b": b},
                                    max_batch_size=1, max_delay_ms=0.0,
                                    max_concurrent_batches=8)
        await batcher.warmup([1])
        async with batcher:
            x_slow = samples(rng, 1)
            got = {}
            async with anyio.create_task_group() as tg:
                async def stuck():
                    got["slow"] = await batcher(x_slow)
                tg.start_soon(stuck)
                while batcher.metrics()["devices"][0]["pending"] == 0:   # on `slow` (a tie)
                    await anyio.sleep(0.001)
                xs = [samples(rng, 1) for _ in range(5)]
                for i, x in enumerate(xs):   # `slow` has one in flight, `fast` none: fast
                    got[i] = await batcher(x)
                m = batcher.metrics()["devices"]
                assert (m[0]["pending"], m[0]["batches"]) == (1, 0)
                assert (m[1]["pending"], m[1]["batches"]) == (0, 5)
                slow.gate.set()
        m = batcher.metrics()["devices"]
        assert (m[0]["batches"], m[1]["batches"]) == (1, 5)
        np.testing.assert_allclose(got["slow"], ref_cbr(x_slow, w, b), rtol=RTOL, atol=ATOL)
        for i, x in enumerate(xs):
            np.testing.assert_allclose(got[i], ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)


async def test_batcher_ties_go_to_the_devices_in_turn():
    rng = np.random.default_rng(4)
    w, b = weights(4)
    async with hd.Device("cpu") as d0, hd.Device("cpu") as d1, hd.Device("cpu") as d2:
        batcher = hd.DynamicBatcher([d0, d1, d2], cbr_graph(), constants={"w": w, "b": b},
                                    max_batch_size=1, max_delay_ms=0.0)
        async with batcher:
            for _ in range(6):            # one at a time: every pick is a tie (none in flight)
                await batcher(samples(rng, 1))
        assert [d["batches"] for d in batcher.metrics()["devices"]] == [2, 2, 2]


async def test_single_device_batcher_keeps_its_api():
    w, b = weights(5)
    async with hd.Device("cpu") as dev:
        batcher = hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b})
        assert batcher.devices == (dev,)
        async with batcher:
            x = samples(np.random.default_rng(5), 2)
            np.testing.assert_allclose(await batcher(x), ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
        m = batcher.metrics()
        assert len(m["devices"]) == 1 and m["devices"][0]["batches"] == m["batches"] == 1


async def test_batcher_device_list_errors():
    w, b = weights(6)
    async with hd.Device("cpu") as dev:
        with pytest.raises(GraphError, match=r"device=\[\] names no device"):
            hd.DynamicBatcher([], cbr_graph(), constants={"w": w, "b": b})
        with pytest.raises(GraphError, match="listed twice"):
            hd.DynamicBatcher([dev, dev], cbr_graph(), constants={"w": w, "b": b})


# ----------------------------------------------------------------------------- closed lanes

async def test_batcher_stops_sending_to_a_closed_device():
    rng = np.random.default_rng(7)
    w, b = weights(7)
    async with hd.Device("cpu") as d0:
        d1 = hd.Device("cpu")
        async with hd.DynamicBatcher([d0, d1], cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=1, max_delay_ms=0.0) as batcher:
            x = samples(rng, 1)
            np.testing.assert_allclose(await batcher(x), ref_cbr(x, w, b), rtol=RTOL,
                                       atol=ATOL)
            d1.close()
            assert d1.closed and not d0.closed
            xs = [samples(rng, 1) for _ in range(10)]
            with pytest.warns(RuntimeWarning, match=r"device 'cpu' of lane 1 is closed") as rec:
                got = [await batcher(x) for x in xs]
            assert len([r for r in rec if "is closed" in str(r.message)]) == 1
            for x, g_ in zip(xs, got):
                np.testing.assert_allclose(g_, ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
            m = batcher.metrics()
            per = m["devices"]
            assert [d["lane"] for d in per] == [0, 1]
            assert [d["closed"] for d in per] == [False, True]
            assert per[0]["batches"] == 11 and per[1]["batches"] == 0
            assert m["errors"] == 0 and per[1]["errors"] == 0
            # the last lane closing too: requests fail naming the devices
            d0.close()
            with pytest.warns(RuntimeWarning, match="lane 0 is closed; no lane is left"):
                with pytest.raises(DeviceError, match=r"every device is closed \(lane 0 'cpu', "
                                                      r"lane 1 'cpu'\)"):
                    await batcher(xs[0])
            assert batcher.metrics()["devices"][0]["closed"] is True


class _ClosingDevice(_GatedDevice):
    """A CPU Device that is closed while the batcher builds its first plan (a close racing
    the dispatch): its build fails with the device's own DeviceError."""

    def __init__(self, dev):
        super().__init__(dev, None)

    @property
    def closed(self):
        return self._dev.closed

    async def build(self, graph, **kwargs):
        self._dev.close()
        return await super().build(graph, **kwargs)


async def test_batch_failing_before_execution_on_a_closed_device_runs_on_another_lane():
    rng = np.random.default_rng(8)
    w, b = weights(8)
    async with hd.Device("cpu") as c0, hd.Device("cpu") as d1:
        closing = _ClosingDevice(c0)
        batcher = hd.DynamicBatcher([closing, d1], cbr_graph(), constants={"w": w, "b": b},
                                    max_batch_size=2, max_delay_ms=0.0)
        async with batcher:
            x = samples(rng, 2)
            with pytest.warns(RuntimeWarning, match="lane 0 is closed"):
                got = await batcher(x)         # the first pick is lane 0 (a tie)
            np.testing.assert_allclose(got, ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
            x2 = samples(rng, 2)
            np.testing.assert_allclose(await batcher(x2), ref_cbr(x2, w, b), rtol=RTOL,
                                       atol=ATOL)
        per = batcher.metrics()["devices"]
        assert (per[0]["closed"], per[0]["retried"], per[0]["batches"]) == (True, 1, 0)
        assert (per[1]["closed"], per[1]["retried"], per[1]["batches"]) == (False, 0, 2)
        assert batcher.metrics()["errors"] == 0 and per[0]["pending"] == per[1]["pending"] == 0


async def test_batch_on_a_single_closed_device_fails_with_device_error():
    w, b = weights(9)
    async with hd.Device("cpu") as c0:
        batcher = hd.DynamicBatcher([_ClosingDevice(c0)], cbr_graph(),
                                    constants={"w": w, "b": b}, max_batch_size=1)
        async with batcher:
            with pytest.warns(RuntimeWarning, match="no lane is left"):
                with pytest.raises(DeviceError, match="build: device 'cpu' is closed"):
                    await batcher(samples(np.random.default_rng(9), 1))
            with pytest.raises(DeviceError, match=r"every device is closed \(lane 0 "):
                await batcher(samples(np.random.default_rng(9), 1))
        per = batcher.metrics()["devices"]
        assert per[0]["closed"] is True and per[0]["retried"] == 0 and per[0]["errors"] == 1
