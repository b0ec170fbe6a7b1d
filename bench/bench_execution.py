"""Host-side cost of one plan execution on the CPU device, under asyncio and trio.

Prints, for a tiny conv_fprop (so the kernel time is negligible):
  submit_us      time of ``plan.submit(vp)`` (bind + enqueue), per execution
  round_trip_us  time of ``await plan.execute(vp)`` (submit, run, completion to the loop)
  sync_us        time of ``plan.execute_sync(vp)`` from a plain thread
and the ratio round_trip / anyio.to_thread.run_sync of a no-op (the anchor measured in the
same run: what a thread hop costs on this loop).

    python bench/bench_execution.py [--n 2000] [--json FILE]
"""
import argparse
import json
import time

import anyio
import numpy as np

import hipdnn_async as hd


def tiny_plan_graph():
    g = hd.Graph(name="tiny")
    x = g.tensor(dims=(1, 1, 2, 2), name="x")
    w = g.tensor(dims=(1, 1, 1, 1), name="w")
    y = g.conv_fprop(x, w).set_output(True)
    return g, x, w, y


async def measure(n: int) -> dict:
    g, x, w, y = tiny_plan_graph()
    vp = {x: np.ones(x.dims, np.float32), w: np.ones(w.dims, np.float32),
          y: np.zeros(y.dims, np.float32)}
    async with hd.Device("cpu") as dev:
        plan = await dev.build(g)
        for _ in range(200):
            await plan.execute(vp)
        t0 = time.perf_counter()
        handles = [plan.submit(vp) for _ in range(n)]
        submit = (time.perf_counter() - t0) / n
        for h in handles:
            await h
        t0 = time.perf_counter()
        for _ in range(n):
            await plan.execute(vp)
        round_trip = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            await anyio.to_thread.run_sync(lambda: None)
        hop = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            plan.execute_sync(vp)
        sync = (time.perf_counter() - t0) / n
    return {"submit_us": submit * 1e6, "round_trip_us": round_trip * 1e6,
            "sync_us": sync * 1e6, "to_thread_noop_us": hop * 1e6,
            "round_trip_over_to_thread": round_trip / hop}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    results = {}
    for backend in ("asyncio", "trio"):
        r = anyio.run(measure, args.n, backend=backend)
        results[backend] = r
        print(f"{backend:8} submit {r['submit_us']:7.1f} us   round trip {r['round_trip_us']:7.1f} us"
              f"   execute_sync {r['sync_us']:7.1f} us   to_thread no-op {r['to_thread_noop_us']:7.1f} us"
              f"   round trip / to_thread {r['round_trip_over_to_thread']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
