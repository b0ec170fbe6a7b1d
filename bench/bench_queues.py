"""Host-side cost of the stream queues, under asyncio and trio, and 2-stream overlap.

For tiny work items (``fn`` returns at once) it measures:

- ``submit_us``: host time per ``await pool.submit(fn)`` when no backpressure applies;
- ``roundtrip_us``: ``await (await pool.submit(fn))`` one at a time (submit, run on the
  worker, hand-off back to the loop), with the anchor ``await anyio.to_thread.run_sync(fn)``
  measured in the same run (``roundtrip_vs_to_thread`` = ours / anchor);
- ``wake_us_p50`` / ``wake_us_p99``: worker finished -> awaiting task resumed;
- ``pipelined_us``: wall time per item for many items in flight on all streams;

and, for two CPU-bound NumPy matmul items (one BLAS thread each) on two streams, the time
of both over the time of one (``overlap_ratio``, 1.0 is perfect overlap, 2.0 none), next to
the same ratio for two plain threads (``thread_overlap_ratio``, the machine's anchor).

``host`` section: the CPU device's host path for a tiny convolution (x 1x8x8x8, w 8x8x1x1,
FLOAT, NCHW: its kernel takes microseconds), against PyTorch's eager ``F.conv2d`` of the
same tensors in the same run (rounds interleaved, so a slow phase of a shared machine
falls on every case alike; µs per call are medians over rounds of ``--host-batch``
back-to-back calls). Rows: ``execute_sync``; ``plan.submit`` (host time of the calls; the
stream is synchronized after each round, untimed) and ``submit + drain`` (the same with
the drain timed, per item); ``await plan.execute`` under asyncio and trio; the plan's own
kernel (``ProviderPlan.run`` on bound buffers: what any path must pay); and the
DynamicBatcher at 256 concurrent clients (asyncio), whose host cost per request is
(wall time - the plans' execution time, ``dev.plan_stats()``) / requests, next to its
anchor measured in the same run (rounds interleaved): a bare asyncio batcher of the same
shape (requests appended to a list, a loop future each, one task forming batches of up to
64 with ``np.concatenate`` and handing out row slices; no hipdnn_async), the cost any
asyncio batcher pays on this machine, with its clients as asyncio tasks and, as ours'
are, in an anyio task group; ``host - anchor`` is what ours adds; the process CPU time
per request of each (ours with its kernels') is given too, steadier on a shared machine.
Each row gives
the ratio to the ``F.conv2d`` call (torch on one intra-op thread), in wall time and in
process CPU time (every thread's: steadier where other work shares the cores). Targets (issue 25): ``execute_sync`` and
``plan.submit`` <= 1.0x, ``await plan.execute`` <= 3x, batcher <= 10 µs per request.
The section uses only what ``main``'s code has too, so the baseline is this file run
with ``PYTHONPATH`` on the other tree.

    PYTHONPATH=. python bench/bench_queues.py [--items 5000] [--json FILE]
    PYTHONPATH=. python bench/bench_queues.py --only host [--engine NAME]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time

import anyio
import anyio.to_thread
import numpy as np

from hipdnn_async.queues import StreamPool


def _noop():
    return None


async def _loop_bench(n_items: int) -> dict:
    out = {}
    async with StreamPool("bench", n_streams=2, max_inflight=n_items) as pool:
        # warm up workers and the loop's wake-up path
        for _ in range(200):
            await (await pool.submit(_noop))

        t0 = time.perf_counter()
        handles = [await pool.submit(_noop) for _ in range(n_items)]
        out["submit_us"] = (time.perf_counter() - t0) / n_items * 1e6
        for h in handles:
            await h
        out["pipelined_us"] = (time.perf_counter() - t0) / n_items * 1e6

        n_rt = max(200, n_items // 5)
        wake = []
        t0 = time.perf_counter()
        for _ in range(n_rt):
            h = await pool.submit(_noop)
            await h
            wake.append(time.perf_counter() - h.finished_at)
        out["roundtrip_us"] = (time.perf_counter() - t0) / n_rt * 1e6
        wake.sort()
        out["wake_us_p50"] = wake[len(wake) // 2] * 1e6
        out["wake_us_p99"] = wake[int(len(wake) * 0.99)] * 1e6
        metrics = pool.metrics()
        out["queue_wait_ms_p50"] = metrics["queue_wait_ms"]["p50"]

    t0 = time.perf_counter()
    for _ in range(n_rt):
        await anyio.to_thread.run_sync(_noop)
    out["to_thread_roundtrip_us"] = (time.perf_counter() - t0) / n_rt * 1e6
    out["roundtrip_vs_to_thread"] = out["roundtrip_us"] / out["to_thread_roundtrip_us"]
    return out


def _matmul(a, reps):
    def run():
        for _ in range(reps):
            a @ a
    return run


def _overlap(repeats: int = 3) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn brings it
        threadpool_limits = None
    limit = threadpool_limits(1) if threadpool_limits else None
    try:
        t0 = time.perf_counter()
        _matmul(a, 10)()
        reps = max(4, int(0.15 / ((time.perf_counter() - t0) / 10)))
        ours, plain = [], []
        with StreamPool("bench", n_streams=2) as pool:
            for _ in range(repeats):
                t0 = time.perf_counter()
                pool.submit_blocking(_matmul(a, reps), stream=0).result()
                one = time.perf_counter() - t0
                t0 = time.perf_counter()
                h0 = pool.submit_blocking(_matmul(a, reps), stream=0)
                h1 = pool.submit_blocking(_matmul(a, reps), stream=1)
                h0.result()
                h1.result()
                ours.append((time.perf_counter() - t0) / one)

                threads = [threading.Thread(target=_matmul(a, reps)) for _ in range(2)]
                t0 = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                plain.append((time.perf_counter() - t0) / one)
    finally:
        if limit is not None:
            limit.unregister() if hasattr(limit, "unregister") else limit.restore_original_limits()
    return {"overlap_ratio": min(ours), "thread_overlap_ratio": min(plain),
            "item_ms": one * 1e3, "cpu_count": os.cpu_count()}


# ---------------------------------------------------------------------- host section
def _tiny_conv(hd, n: int = 1):
    """x (n, 8, 8, 8), w (8, 8, 1, 1) -> y, FLOAT NCHW: a kernel of microseconds."""
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="tiny", io_data_type=f32, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(n, 8, 8, 8), name="x")
    w = g.tensor(dims=(8, 8, 1, 1), name="w")
    g.conv_fprop(x, w).set_output(True).set_name("y")
    return g


def _round_us(fn, batch: int, finish=None, timed_finish=None) -> tuple:
    """(wall µs, process CPU µs) per call of ``batch`` back-to-back ``fn()``;
    ``finish()`` after, untimed, or ``timed_finish()``, timed."""
    wall, cpu = time.perf_counter_ns, time.process_time_ns
    t0, c0 = wall(), cpu()
    for _ in range(batch):
        fn()
    if timed_finish is not None:
        timed_finish()
    t1, c1 = wall(), cpu()
    if finish is not None:
        finish()
    return (t1 - t0) / batch / 1e3, (c1 - c0) / batch / 1e3


def _loop_round_us(plan, vp, batch: int, backend: str) -> tuple:
    """As ``_round_us`` for ``await plan.execute(vp)``, in one loop run."""
    async def run():
        await plan.execute(vp)
        wall, cpu = time.perf_counter_ns, time.process_time_ns
        t0, c0 = wall(), cpu()
        for _ in range(batch):
            await plan.execute(vp)
        t1, c1 = wall(), cpu()
        return (t1 - t0) / batch / 1e3, (c1 - c0) / batch / 1e3
    return anyio.run(run, backend=backend)


def _anchor_batcher_wall(xs, clients: int, requests: int, max_batch: int,
                         anyio_clients: bool) -> tuple:
    """(wall, process CPU) seconds of the bare asyncio batcher (module docstring) serving ``clients``
    tasks of ``requests`` calls each, with the rows of ``xs``; the clients are asyncio
    tasks (``asyncio.gather``), or with ``anyio_clients`` started as ours are (an anyio
    task group, whose task wrapper costs each resumption)."""
    import asyncio

    async def run():
        loop = asyncio.get_running_loop()
        pending = []
        wakeup = None               # the batching task's future while it waits

        async def batching():
            nonlocal wakeup
            while True:
                if not pending:
                    wakeup = loop.create_future()
                    await wakeup
                    wakeup = None
                batch = pending[:max_batch]
                del pending[:max_batch]
                y = np.concatenate([x for x, _ in batch])   # the batch; "executed" as is
                for i, (_, fut) in enumerate(batch):
                    if not fut.done():
                        fut.set_result(y[i:i + 1])
                await asyncio.sleep(0)                       # let the callers resume

        async def call(x):
            fut = loop.create_future()
            pending.append((x, fut))
            if wakeup is not None and not wakeup.done():
                wakeup.set_result(None)
            return await fut

        async def client(c):
            for r in range(requests):
                await call(xs[(c + r) % len(xs)])

        batcher = loop.create_task(batching())
        t0, c0 = time.perf_counter(), time.process_time()
        if anyio_clients:
            async with anyio.create_task_group() as tg:
                for c in range(clients):
                    tg.start_soon(client, c)
        else:
            await asyncio.gather(*(client(c) for c in range(clients)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        batcher.cancel()
        return wall, cpu

    return anyio.run(run, backend="asyncio")


def _batcher_cost(hd, dev, clients: int = 256, requests: int = 8) -> dict:
    """Wall µs per request and the host part of it (module docstring) for ``clients``
    concurrent callers of a DynamicBatcher over the tiny convolution, and the bare
    asyncio batcher's µs per request (the anchor), rounds interleaved."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    xs = [rng.standard_normal((1, 8, 8, 8)).astype(np.float32) for _ in range(64)]

    async def run():
        async with hd.DynamicBatcher(dev, _tiny_conv(hd), constants={"w": w},
                                     max_batch_size=64, max_delay_ms=1.0) as batcher:
            await batcher.warmup()

            async def client(c):
                for r in range(requests):
                    await batcher(xs[(c + r) % len(xs)])

            before = sum(s["exec_ms"] for s in dev.plan_stats().values())
            t0, c0 = time.perf_counter(), time.process_time()
            async with anyio.create_task_group() as tg:
                for c in range(clients):
                    tg.start_soon(client, c)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            exec_ms = sum(s["exec_ms"] for s in dev.plan_stats().values()) - before
            return wall, cpu, exec_ms, batcher.metrics()

    best, anchor, anchor_anyio = None, (math.inf,) * 2, (math.inf,) * 2
    cpu_min = math.inf
    for _ in range(5):
        wall, cpu, exec_ms, m = anyio.run(run)
        if best is None or wall < best[0]:
            best = (wall, exec_ms, m)
        cpu_min = min(cpu_min, cpu)
        a = _anchor_batcher_wall(xs, clients, requests, 64, False)
        anchor = tuple(map(min, anchor, a))
        a = _anchor_batcher_wall(xs, clients, requests, 64, True)
        anchor_anyio = tuple(map(min, anchor_anyio, a))
    wall, exec_ms, m = best
    n = clients * requests
    us = 1e6 / n
    host_us = (wall - exec_ms / 1e3) * us
    return {"clients": clients, "requests": n, "wall_us_per_request": wall * us,
            "exec_us_per_request": exec_ms * 1e3 / n,
            "host_us_per_request": host_us,
            "anchor_us_per_request": anchor[0] * us,
            "anchor_anyio_clients_us_per_request": anchor_anyio[0] * us,
            "host_minus_anchor_us": host_us - anchor[0] * us,
            "host_minus_anchor_anyio_clients_us": host_us - anchor_anyio[0] * us,
            # process CPU time (every thread's, ours with the kernels') over the same
            # runs, minima: steadier where other work shares the cores
            "cpu_us_per_request": cpu_min * us,
            "anchor_cpu_us_per_request": anchor[1] * us,
            "anchor_anyio_clients_cpu_us_per_request": anchor_anyio[1] * us,
            "mean_batch_size": m["mean_batch_size"]}


def host_section(rounds: int = 15, batch: int = 400, engine=None) -> dict:
    """The ``host`` rows (module docstring): {name: µs per call}, ratios, batcher."""
    import torch
    import torch.nn.functional as F
    import hipdnn_async as hd

    # one intra-op thread: a kernel of microseconds uses one core, and torch's pool of
    # spinning threads on a shared 2-core machine turns a 3 us call into milliseconds
    torch.set_num_threads(1)

    rng = np.random.default_rng(0)
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(_tiny_conv(hd), engine=engine)
        vp = {"x": rng.standard_normal((1, 8, 8, 8)).astype(np.float32),
              "w": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
              "y": np.zeros((1, 8, 8, 8), np.float32)}
        tx, tw = torch.from_numpy(vp["x"]), torch.from_numpy(vp["w"])
        torch.testing.assert_close(F.conv2d(tx, tw).numpy(), _executed(plan, vp),
                                   rtol=1e-5, atol=1e-5)
        buffers, ws = plan._bind(vp, None)
        kernel = plan._pplan.run
        sync = dev._pool.synchronize_blocking
        cases = {
            "torch F.conv2d": (lambda: F.conv2d(tx, tw), None, None),
            "plan kernel (ProviderPlan.run)": (lambda: kernel(buffers, ws), None, None),
            "execute_sync": (lambda: plan.execute_sync(vp), None, None),
            "plan.submit": (lambda: plan.submit(vp), sync, None),
            "submit + drain, per item": (lambda: plan.submit(vp), sync, None),
            "await execute (asyncio)": (None, None, "asyncio"),
            "await execute (trio)": (None, None, "trio"),
        }
        samples = {k: [] for k in cases}
        for r in range(rounds + 1):          # round 0 warms every case up
            for name, (fn, after, loop) in cases.items():
                if loop is not None:
                    us = _loop_round_us(plan, vp, batch, loop)
                elif name.startswith("submit + drain"):
                    us = _round_us(fn, batch, timed_finish=after)
                else:
                    us = _round_us(fn, batch, after)
                if r:
                    samples[name].append(us)
        us = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
        anchor = us["torch F.conv2d"]
        out = {"engine": plan.engine.name, "torch_threads": torch.get_num_threads(),
               "us": us, "cpu_us": cpu,
               "ratio_to_torch": {k: v / anchor for k, v in us.items()},
               "cpu_ratio_to_torch": {k: v / cpu["torch F.conv2d"] for k, v in cpu.items()},
               "batcher": _batcher_cost(hd, dev)}
    return out


def _executed(plan, vp) -> np.ndarray:
    plan.execute_sync(vp)
    return vp["y"].copy()


def _print_host(res: dict) -> None:
    print(f"host     tiny conv x(1,8,8,8) w(8,8,1,1) FLOAT, engine {res['engine']}; "
          f"torch {res['torch_threads']} thread(s); per call: wall us (ratio to torch "
          "F.conv2d), process CPU us (ratio)")
    for name, us in res["us"].items():
        print(f"  {name:34s} {us:8.2f} us {res['ratio_to_torch'][name]:6.2f}x  | cpu "
              f"{res['cpu_us'][name]:8.2f} us {res['cpu_ratio_to_torch'][name]:6.2f}x")
    b = res["batcher"]
    print(f"  DynamicBatcher, {b['clients']} clients: {b['wall_us_per_request']:.2f} us wall "
          f"per request, {b['exec_us_per_request']:.2f} us of it executing, host "
          f"{b['host_us_per_request']:.2f} us per request (mean batch {b['mean_batch_size']:.1f}); "
          f"bare asyncio batcher (anchor) {b['anchor_us_per_request']:.2f} us per request "
          f"(ours - anchor {b['host_minus_anchor_us']:.2f} us), with its clients in an anyio "
          f"task group as ours {b['anchor_anyio_clients_us_per_request']:.2f} us (ours - "
          f"that {b['host_minus_anchor_anyio_clients_us']:.2f} us); process CPU per request: "
          f"ours (kernels included) {b['cpu_us_per_request']:.2f} us, anchor "
          f"{b['anchor_cpu_us_per_request']:.2f} us, with anyio clients "
          f"{b['anchor_anyio_clients_cpu_us_per_request']:.2f} us")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000, help="tiny items per loop run")
    parser.add_argument("--only", choices=("loops", "overlap", "host"),
                        help="run one section")
    parser.add_argument("--host-rounds", type=int, default=15)
    parser.add_argument("--host-batch", type=int, default=400)
    parser.add_argument("--engine", help="engine of the host section's plan (name)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)

    results = {"items": args.items, "loops": {}}
    if args.only in (None, "host"):
        results["host"] = host = host_section(args.host_rounds, args.host_batch, args.engine)
        _print_host(host)
    for backend in (("asyncio", "trio") if args.only in (None, "loops") else ()):
        res = anyio.run(_loop_bench, args.items, backend=backend)
        results["loops"][backend] = res
        print(f"{backend:8s} submit {res['submit_us']:7.2f} us/item | pipelined "
              f"{res['pipelined_us']:7.2f} us/item | round trip {res['roundtrip_us']:7.1f} us "
              f"(to_thread {res['to_thread_roundtrip_us']:7.1f} us, ratio "
              f"{res['roundtrip_vs_to_thread']:.2f}) | wake p50 {res['wake_us_p50']:6.1f} us "
              f"p99 {res['wake_us_p99']:7.1f} us")
    if args.only in (None, "overlap"):
        ov = _overlap()
        results["overlap"] = ov
        print(f"overlap  2 streams: {ov['overlap_ratio']:.2f}x one item ({ov['item_ms']:.0f} "
              f"ms); two plain threads: {ov['thread_overlap_ratio']:.2f}x; cpus "
              f"{ov['cpu_count']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
