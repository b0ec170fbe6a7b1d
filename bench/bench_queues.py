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

    PYTHONPATH=. python bench/bench_queues.py [--items 5000] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000, help="tiny items per loop run")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)

    results = {"items": args.items, "loops": {}}
    for backend in ("asyncio", "trio"):
        res = anyio.run(_loop_bench, args.items, backend=backend)
        results["loops"][backend] = res
        print(f"{backend:8s} submit {res['submit_us']:7.2f} us/item | pipelined "
              f"{res['pipelined_us']:7.2f} us/item | round trip {res['roundtrip_us']:7.1f} us "
              f"(to_thread {res['to_thread_roundtrip_us']:7.1f} us, ratio "
              f"{res['roundtrip_vs_to_thread']:.2f}) | wake p50 {res['wake_us_p50']:6.1f} us "
              f"p99 {res['wake_us_p99']:7.1f} us")
    ov = _overlap()
    results["overlap"] = ov
    print(f"overlap  2 streams: {ov['overlap_ratio']:.2f}x one item ({ov['item_ms']:.0f} ms); "
          f"two plain threads: {ov['thread_overlap_ratio']:.2f}x; cpus {ov['cpu_count']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
