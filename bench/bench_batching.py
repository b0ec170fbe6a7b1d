"""Throughput of DynamicBatcher against one-at-a-time batch-1 execution.

A conv_fprop + bias + ReLU layer (x N x 16 x 16 x 16, w 32 x 16 x 3 x 3, pad 1) is run for
`--clients` concurrent clients, each sending `--requests` single-sample requests:

- ``batched``: every client awaits ``batcher(sample)``; requests are coalesced;
- ``serial``: the same samples one after another through a plan of batch 1
  (``await plan.execute``), the way a server without batching would run them.

Prints samples/s for both and their ratio; ``--json FILE`` writes the numbers too.

    PYTHONPATH=. python bench/bench_batching.py [--clients 256] [--json out.json]
"""
from __future__ import annotations

import argparse
import sys
import time

import anyio
import numpy as np

import hipdnn_async as hd
from _bench_common import write_json

C, H, W, K = 16, 16, 16, 32


def layer_graph(n: int, layout: str) -> hd.Graph:
    """conv_fprop 3x3 pad 1 -> ADD bias -> RELU_FWD at batch n; output 'y'."""
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="bench_cbr", io_data_type=f32, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(n, C, H, W), layout=layout, name="x")
    w = g.tensor(dims=(K, C, 3, 3), layout=layout, name="w")
    b = g.tensor(dims=(1, K, 1, 1), layout=layout, name="b")
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1))
    z = g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    r = g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD)
    r.set_output(True).set_name("y")
    g.validate()
    return g


def as_layout(arr: np.ndarray, layout: str) -> np.ndarray:
    if layout == "NCHW":
        return np.ascontiguousarray(arr)
    return np.ascontiguousarray(arr.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


async def run(args) -> dict:
    rng = np.random.default_rng(0)
    w = as_layout(rng.standard_normal((K, C, 3, 3)).astype(np.float32) * 0.1, args.layout)
    b = rng.standard_normal((1, K, 1, 1)).astype(np.float32)
    total = args.clients * args.requests
    xs = [as_layout(rng.standard_normal((1, C, H, W)).astype(np.float32), args.layout)
          for _ in range(min(total, 512))]

    async with hd.Device(args.device) as dev:
        # Serial baseline: batch-1 plan, one execution at a time.
        plan = await dev.build(layer_graph(1, args.layout))
        y1 = as_layout(np.empty((1, K, H, W), np.float32), args.layout)
        await plan.execute({"x": xs[0], "w": w, "b": b, "y": y1})        # warm
        t0 = time.perf_counter()
        for i in range(total):
            await plan.execute({"x": xs[i % len(xs)], "w": w, "b": b, "y": y1})
        serial_s = time.perf_counter() - t0

        # Batched: `clients` concurrent callers.
        async with hd.DynamicBatcher(dev, layer_graph(1, args.layout),
                                     constants={"w": w, "b": b},
                                     max_batch_size=args.max_batch_size,
                                     max_delay_ms=args.max_delay_ms) as batcher:
            await batcher.warmup()

            async def client(c: int) -> None:
                for r in range(args.requests):
                    await batcher(xs[(c * args.requests + r) % len(xs)])

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for c in range(args.clients):
                    tg.start_soon(client, c)
            batched_s = time.perf_counter() - t0
            m = batcher.metrics()

    result = {
        "device": args.device, "backend": args.backend, "layout": args.layout,
        "clients": args.clients, "requests_per_client": args.requests, "samples": total,
        "max_batch_size": args.max_batch_size, "max_delay_ms": args.max_delay_ms,
        "serial_samples_per_s": total / serial_s,
        "batched_samples_per_s": total / batched_s,
        "ratio": serial_s / batched_s,
        "batcher_metrics": m,
    }
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--clients", type=int, default=256)
    p.add_argument("--requests", type=int, default=4, help="requests per client")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--max-delay-ms", type=float, default=2.0)
    p.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    p.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    res = anyio.run(run, args, backend=args.backend)
    m = res["batcher_metrics"]
    print(f"conv+bias+relu x(N,{C},{H},{W}) w({K},{C},3,3) on {res['device']} "
          f"[{res['backend']}], {res['clients']} clients x {res['requests_per_client']}")
    print(f"  serial batch-1 : {res['serial_samples_per_s']:10.1f} samples/s")
    print(f"  DynamicBatcher : {res['batched_samples_per_s']:10.1f} samples/s "
          f"({m['batches']} batches, mean size {m['mean_batch_size']:.1f}, "
          f"fill {m['mean_batch_fill']:.2f}, queue p50 {m['queue_wait_ms']['p50']:.2f} ms, "
          f"exec p50 {m['exec_ms']['p50']:.2f} ms)")
    print(f"  ratio batched/serial: {res['ratio']:.2f}x")
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
