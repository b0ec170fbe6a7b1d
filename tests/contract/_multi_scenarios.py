"""Scenarios on two fake GPUs (``HIPDNN_ASYNC_FAKE_DEVICES=2``), run in the worker process
(``_worker.py``): two ``Device`` objects on ``cuda:0`` and ``cuda:1`` from one event loop,
copies between their arrays, a ``DynamicBatcher`` over both. Public API only; each returns
plain data (results, float64 references, the fakes' log) for the tests to assert on.

The fake runtime records, for every call that enqueues work on a stream, the stream's
device (``on_device``) and the calling thread's current device (``current_device``), and
counts a violation where they differ; the cuDNN fake does the same for a handle's kernels
and the runtime fake for memory of another device given to a kernel (``fake_mem_check``).
"""
from __future__ import annotations

import numpy as np

from ._scenarios import _conv_graph, _conv_inputs, control

__all__ = ["two_devices_case", "copy_case", "batcher_case", "current_device_case"]

_X, _W = (2, 4, 7, 6), (5, 4, 3, 3)


def _runtime():
    from hipdnn_async.runtime import load_vendor
    return load_vendor("cuda").runtime


def two_devices_case(executions: int = 4) -> dict:
    """The same conv plan built on cuda:0 and cuda:1 and executed concurrently (one task
    per device, ``executions`` each, every execution its own input) from one event loop.
    The main thread makes device 1 current first: nothing the library does may change it."""
    import anyio
    import hipdnn_async as hd
    from oracle import _reference as ref

    ctl = control()
    rt = _runtime()
    rng = np.random.default_rng(21)
    out = {"devices": hd.devices(), "got": {}, "want": {}, "describe": {}, "plans": {}}

    async def run(dev):
        g, xt, wt, yt = _conv_graph(hd, x=_X, w=_W)
        plan = await dev.build(g)
        out["plans"][dev.spec] = plan.algorithm
        out["describe"][dev.spec] = dev.provider.describe()
        got, want = [], []
        # a captured step replayed on this device's stream (graph launch on its device)
        xs, ws = _conv_inputs(rng, xt.dims, wt.dims)
        X, W = await dev.asarray(xs), await dev.asarray(ws)
        Y = dev.empty(yt.dims, np.float32)
        async with dev.capture() as step:
            plan.submit({xt: X, wt: W, yt: Y})
        await step.replay()
        await step.replay()
        step.close()
        got.append(await Y.to_numpy())
        want.append(ref.conv_fprop(xs.astype(np.float64), ws.astype(np.float64), pre=1, post=1))
        for _ in range(executions):
            xs, ws = _conv_inputs(rng, xt.dims, wt.dims)
            X, W = await dev.asarray(xs), await dev.asarray(ws)
            Y = dev.empty(yt.dims, np.float32)
            await plan.execute({xt: X, wt: W, yt: Y})
            got.append(await Y.to_numpy())
            want.append(ref.conv_fprop(xs.astype(np.float64), ws.astype(np.float64),
                                       pre=1, post=1))
        out["got"][dev.spec], out["want"][dev.spec] = got, want
        out["metrics"] = out.get("metrics", {})
        out["metrics"][dev.spec] = dev.metrics()["completed"]

    async def main():
        rt.set_device(1)
        ctl.clear()
        async with hd.Device("cuda:0") as d0, hd.Device("cuda:1") as d1:
            out["streams"] = {d.spec: len(d.streams) for d in (d0, d1)}
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, d0)
                tg.start_soon(run, d1)
        out["main_device_after"] = rt.get_device()

    anyio.run(main)
    out["log"] = ctl.log()
    out["violations"] = ctl.violations()
    return out


def copy_case() -> dict:
    """Copies between arrays of cuda:0 and cuda:1 (peer or staged, whatever the fake's
    $HIPDNN_ASYNC_FAKE_PEER allows), a same-device copy, another memory order, and
    ``dev.asarray(other device's array)``; each slice of the log between marks."""
    import anyio
    import hipdnn_async as hd
    from ._fakes import between

    ctl = control()
    rng = np.random.default_rng(22)
    a = rng.uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32)
    out = {}

    async def main():
        async with hd.Device("cuda:0") as d0, hd.Device("cuda:1") as d1:
            A0 = await d0.asarray(a)
            arrays = {}
            ctl.clear()
            for i in range(3):                       # peer access is enabled once
                ctl.mark(f"cross{i}")
                arrays[f"cross{i}"] = B1 = d1.empty(a.shape, np.float32)
                await anyio.to_thread.run_sync(B1.copy_from, A0)
            ctl.mark("same")
            arrays["same"] = C0 = d0.empty(a.shape, np.float32)
            await anyio.to_thread.run_sync(C0.copy_from, A0)
            ctl.mark("asarray")
            arrays["asarray"] = D1 = await d1.asarray(A0)
            ctl.mark("reorder")
            arrays["reorder"] = E1 = d1.empty(a.shape, np.float32, layout="NHWC")
            await anyio.to_thread.run_sync(E1.copy_from, A0)
            ctl.mark("back")
            arrays["back"] = F0 = d0.empty(a.shape, np.float32)
            await anyio.to_thread.run_sync(F0.copy_from, D1)
            ctl.mark("mismatch")
            try:
                d1.empty((1, 3, 4, 5), np.float32).copy_from(A0)
                out["mismatch"] = None
            except hd.HipdnnError as exc:
                out["mismatch"] = (type(exc).__name__, str(exc))
            ctl.mark("end")
            for key, arr in arrays.items():          # read back after the log's slices
                out[key] = await arr.to_numpy()
            out["asarray_device"] = D1.device
            out["peer"] = A0.context.peer_access(D1.context)
    anyio.run(main)
    log = ctl.log()
    marks = ["cross0", "cross1", "cross2", "same", "asarray", "reorder", "back", "mismatch",
             "end"]
    out["slices"] = {m: between(log, m, n) for m, n in zip(marks, marks[1:])}
    out["log"] = log
    out["want"] = a
    out["violations"] = ctl.violations()
    return out


def batcher_case(clients: int = 24) -> dict:
    """A DynamicBatcher over [cuda:0, cuda:1] serving ``clients`` concurrent callers of a
    conv + bias + ReLU block: each caller's rows against the float64 reference, the
    per-device metrics, and where each batch ran (the cuDNN fake's handles by device)."""
    import anyio
    import hipdnn_async as hd
    from oracle import _reference as ref

    ctl = control()
    rng = np.random.default_rng(23)
    x_dims, w_dims = (4, 4, 6, 6), (6, 4, 3, 3)
    w = rng.uniform(-1, 1, w_dims).astype(np.float32)
    b = rng.uniform(-1, 1, (1, 6, 1, 1)).astype(np.float32)
    g = hd.Graph(name="multi_batcher", io_data_type="float32")
    xt = g.tensor(dims=x_dims, name="x")
    wt = g.tensor(dims=w_dims, name="w")
    bt = g.tensor(dims=(1, 6, 1, 1), name="b")
    y = g.pointwise(g.pointwise(g.conv_fprop(xt, wt, padding=1), bt, mode=hd.PointwiseMode.ADD),
                    mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_name("y")
    reqs = [rng.uniform(-1, 1, (1 + i % 3, 4, 6, 6)).astype(np.float32) for i in range(clients)]
    out = {}

    async def main():
        async with hd.Device("cuda:0") as d0, hd.Device("cuda:1") as d1:
            ctl.clear()
            batcher = hd.DynamicBatcher([d0, d1], g, constants={"w": w, "b": b},
                                        max_batch_size=8, max_delay_ms=5.0)
            results = [None] * clients
            async with batcher:
                async def client(i):
                    results[i] = await batcher(reqs[i])
                async with anyio.create_task_group() as tg:
                    for i in range(clients):
                        tg.start_soon(client, i)
            out["got"] = results
            out["metrics"] = batcher.metrics()
            out["devices"] = [d.spec for d in batcher.devices]
    anyio.run(main)
    out["want"] = [np.maximum(ref.conv_fprop(r.astype(np.float64), w.astype(np.float64),
                                             pre=1, post=1) + b, 0) for r in reqs]
    out["log"] = ctl.log()
    out["violations"] = ctl.violations()
    return out


def current_device_case() -> dict:
    """The device current on a thread outside the library (the test's main thread) is
    untouched by opening devices, building, executing, copying and closing."""
    import hipdnn_async as hd
    rt = _runtime()
    seen = []                      # (device set first, after what, current device then)
    for start in (0, 1):
        rt.set_device(start)
        with hd.Device("cuda:0") as d0, hd.Device("cuda:1") as d1:
            seen.append((start, "open", rt.get_device()))
            for dev in (d0, d1):
                g, xt, wt, yt = _conv_graph(hd, x=_X, w=_W)
                plan = dev.build_sync(g)
                X, W = dev.empty(xt.dims, np.float32), dev.empty(wt.dims, np.float32)
                X.copy_from(np.ones(xt.dims, np.float32))
                W.copy_from(np.ones(wt.dims, np.float32))
                plan.execute_sync({xt: X, wt: W, yt: dev.empty(yt.dims, np.float32)})
                seen.append((start, f"executed on {dev.spec}", rt.get_device()))
        seen.append((start, "closed", rt.get_device()))
    return {"seen": seen, "violations": control().violations()}


def bench_multi_case(devices: str = "all") -> dict:
    """bench/_bench_multi.py's section on the fakes at small sizes (the fake's kernels are
    CPU references): that it runs, on every device, and what it reports."""
    import argparse
    import sys
    from pathlib import Path

    import anyio
    import hipdnn_async as hd
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import _bench_multi as bm
    bm.BLOCK.update(n=2, c=4, hw=6, k=4)
    bm.SERVE.update(c=4, hw=5, k=4, max_batch_size=4)
    printed = []

    def table(rows, header):
        printed.append((header, rows))

    args = argparse.Namespace(devices=devices, quick=True)
    ctl = control()
    ctl.clear()
    out = anyio.run(bm.bench_multi, hd, args, table, lambda x, d=3: f"{x:.{d}f}")
    return {"out": out, "printed": printed, "violations": ctl.violations()}
