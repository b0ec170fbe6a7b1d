"""Profiler scenarios for the worker process (see ``_worker.py``): public API only, on the
fake "cuda:0" or "hip:0" (whose streams are threads that wait ``delay`` µs before each
item), returning the profile's records, its trace's check, and the runtime's call log.
"""
from __future__ import annotations

import numpy as np

from ._scenarios import control

__all__ = ["profile_case"]


def _conv(hd):
    g = hd.Graph(name="contract_conv")
    x = g.tensor(dims=(2, 4, 6, 6), name="x")
    w = g.tensor(dims=(3, 4, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g, x, w, y


def profile_case(spec: str = "cuda:0", backend: str = "asyncio", streams: int = 2,
                 executions: int = 6, delay_us: int = 3000) -> dict:
    """``executions`` convolutions awaited concurrently, round-robin over ``streams``
    streams: first with no profile open (log slice ``closed``), then inside
    ``async with dev.profile()`` (slice ``profiled``). Returns per execution (submission
    order) its stream, submitted / launched / started / ended seconds and ok; the
    overlap; the trace's format problems; outputs and their float64 reference; the log."""
    import anyio
    import hipdnn_async as hd
    from hipdnn_async.profiler import check_trace
    from oracle import _reference as ref

    ctl = control(spec)
    rng = np.random.default_rng(11)
    out = {}

    async def main():
        async with hd.Device(spec, streams=streams) as dev:
            g, x, w, y = _conv(hd)
            plan = await dev.build(g)
            xs = rng.standard_normal(x.dims).astype(np.float32)
            ws = rng.standard_normal(w.dims).astype(np.float32)
            X, W = await dev.asarray(xs), await dev.asarray(ws)
            outs = [dev.empty(y.dims, np.float32) for _ in range(executions)]

            async def run_all():
                async with anyio.create_task_group() as tg:
                    for i, o in enumerate(outs):
                        tg.start_soon(lambda o=o, i=i: plan.execute({x: X, w: W, y: o},
                                                                    stream=i % streams))
            await dev.synchronize()
            ctl.set_delay_us(delay_us)
            ctl.clear()
            ctl.mark("closed")
            await run_all()
            ctl.mark("profiled")
            async with dev.profile() as prof:
                await run_all()
            ctl.mark("end")
            out["log"] = ctl.log()
            ctl.set_delay_us(2000)
            out["records"] = [{"stream": r.stream, "submitted": r.submitted,
                               "launched": r.launched, "started": r.started,
                               "ended": r.ended, "ok": r.ok, "kind": r.kind,
                               "pattern": r.facts["pattern"]} for r in prof.executions]
            out["profile"] = (prof.started_at, prof.stopped_at)
            out["overlap"] = prof.overlap()
            out["problems"] = check_trace(prof.trace())
            out["outputs"] = [await o.to_numpy() for o in outs]
            out["want"] = ref.conv_fprop(xs, ws, pre=1, post=1)
        out["violations"] = ctl.violations()
    anyio.run(main, backend=backend)
    return out


def capture_and_batcher_case(spec: str = "cuda:0", backend: str = "asyncio") -> dict:
    """Inside one profile on the fake GPU: a capture step of two convolutions (its capture
    item, two ``replay_sync`` and one ``submit``), then a ``DynamicBatcher`` over the same
    graph serving 6 concurrent one-row requests. Returns the records, the batches, the
    trace's problems and the log (marks ``capture``, ``batcher``, ``end``)."""
    import anyio
    import hipdnn_async as hd
    from hipdnn_async.profiler import check_trace

    ctl = control(spec)
    rng = np.random.default_rng(12)
    out = {}

    async def main():
        async with hd.Device(spec, streams=2) as dev:
            g, x, w, y = _conv(hd)
            plan = await dev.build(g)
            ws = rng.standard_normal(w.dims).astype(np.float32)
            X = await dev.asarray(rng.standard_normal(x.dims).astype(np.float32))
            W = await dev.asarray(ws)
            Y1, Y2 = dev.empty(y.dims, np.float32), dev.empty(y.dims, np.float32)
            async with hd.DynamicBatcher(dev, g, inputs=["x"], outputs=["y"],
                                         constants={"w": ws}, max_batch_size=2) as batcher:
                await batcher.warmup()
                ctl.clear()
                async with dev.profile() as prof:
                    ctl.mark("capture")
                    async with dev.capture(stream=1) as step:
                        plan.submit({x: X, w: W, y: Y1})
                        plan.submit({x: X, w: W, y: Y2})
                    step.replay_sync()
                    step.replay_sync()
                    await step.submit()
                    ctl.mark("batcher")
                    async with anyio.create_task_group() as tg:
                        for _ in range(6):
                            tg.start_soon(batcher, rng.standard_normal((1, 4, 6, 6))
                                          .astype(np.float32))
                    ctl.mark("end")
                step.close()
            out["records"] = [{"kind": r.kind, "name": r.facts["name"], "stream": r.stream,
                               "launched": r.launched, "started": r.started,
                               "ended": r.ended, "ok": r.ok,
                               "batch": prof.batches.index(r.batch) if r.batch else None}
                              for r in prof.executions]
            out["batches"] = [{"rows": b.rows, "bucket": b.bucket,
                               "executions": len(b.executions)} for b in prof.batches]
            out["problems"] = check_trace(prof.trace())
            out["log"] = ctl.log()
        out["violations"] = ctl.violations()
    anyio.run(main, backend=backend)
    return out


def nested_case(spec: str = "cuda:0") -> dict:
    """Two profiles open at once on one GPU device (``dev.profile()`` inside
    ``hd.profile()``, the inner one leaving first), three ``execute_sync`` inside both:
    each profile's records (the same executions, timed by one pair of events each)."""
    import hipdnn_async as hd
    ctl = control(spec)
    rng = np.random.default_rng(13)
    with hd.Device(spec, streams=1) as dev:
        g, x, w, y = _conv(hd)
        plan = dev.build_sync(g)
        X = dev.empty(x.dims, np.float32)
        X.copy_from(rng.standard_normal(x.dims).astype(np.float32))
        W = dev.empty(w.dims, np.float32)
        W.copy_from(rng.standard_normal(w.dims).astype(np.float32))
        Y = dev.empty(y.dims, np.float32)
        ctl.clear()
        with hd.profile() as outer:
            with dev.profile() as inner:
                for _ in range(3):
                    plan.execute_sync({x: X, w: W, y: Y})
    times = [[(r.started, r.ended) for r in p.executions] for p in (outer, inner)]
    return {"times": times, "log": ctl.log(), "violations": ctl.violations()}
