"""The profiler under asyncio and trio: ``async with dev.profile()``, awaited executions,
and the dynamic batcher's batches with the flow from each request to the execution that
served it."""
from __future__ import annotations

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.profiler import check_trace

pytestmark = pytest.mark.anyio


def _graph(n=8, name="layer"):
    g = hd.Graph(name=name)
    x = g.tensor(name="x", dims=(n, 3, 8, 8), data_type=hd.DataType.FLOAT)
    w = g.tensor(name="w", dims=(4, 3, 3, 3), data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(x, w, padding=1)
    y.set_output(True)
    y.set_name("y")
    return g, x, w, y


async def test_async_profile_records_awaited_executions():
    g, x, w, y = _graph(n=2)
    rng = np.random.default_rng(1)
    async with hd.Device("cpu", streams=2) as dev:
        plan = await dev.build(g)
        async with dev.profile() as prof:
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    vp = {x: rng.standard_normal(x.dims).astype(np.float32),
                          w: rng.standard_normal(w.dims).astype(np.float32),
                          y: np.empty(y.dims, np.float32)}
                    tg.start_soon(lambda vp=vp, i=i: plan.execute(vp, stream=i % 2))
    assert len(prof.executions) == 6
    assert all(r.ok and r.started >= r.submitted for r in prof.executions)
    assert {r.stream for r in prof.executions} == {"cpu:s0", "cpu:s1"}
    assert check_trace(prof.trace()) == []


async def test_a_requests_flow_leads_to_the_execution_that_served_it():
    g, x, w, y = _graph()
    rng = np.random.default_rng(2)
    weights = rng.standard_normal(w.dims).astype(np.float32)
    async with hd.Device("cpu", streams=2) as dev:
        async with hd.DynamicBatcher(dev, g, inputs=["x"], outputs=["y"],
                                     constants={"w": weights}, max_batch_size=8,
                                     max_delay_ms=1.0) as batcher:
            await batcher.warmup()
            async with dev.profile() as prof:
                async def client():
                    for _ in range(4):
                        await batcher(rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
                async with anyio.create_task_group() as tg:
                    for _ in range(6):
                        tg.start_soon(client)
    assert sum(b.rows for b in prof.batches) == 24
    for b in prof.batches:
        assert b.rows == sum(n for n, _ in b.requests) and 0 < b.fill <= 1
        assert len(b.executions) == 1 and b.executions[0].facts["name"] == "layer"
    trace = prof.trace()
    assert check_trace(trace) == []
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}

    def slice_at(point):
        return next(e for e in slices if e["pid"] == point["pid"] and e["tid"] == point["tid"]
                    and e["ts"] <= point["ts"] <= e["ts"] + e["dur"])

    requests = [e for e in slices if e["cat"] == "request"]
    assert len(requests) == 24
    served_rows = {}
    for fid, s in starts.items():
        if s["name"] != "request":
            continue
        req, batch = slice_at(s), slice_at(ends[fid])
        assert req["cat"] == "request" and batch["cat"] == "batch"
        # the batch's own flow leads on to an execution on a stream of the device
        (bid,) = [i for i, e in starts.items() if e["name"] == "batch" and slice_at(e) is batch]
        execution = slice_at(ends[bid])
        assert execution["cat"] == "execution" and execution["name"] == "layer"
        assert execution["args"]["stream"] in ("cpu:s0", "cpu:s1")
        assert execution["ts"] >= batch["ts"]
        served_rows[id(batch)] = served_rows.get(id(batch), 0) + req["args"]["rows"]
        assert served_rows[id(batch)] <= batch["args"]["rows"]
    assert sum(served_rows.values()) == 24
