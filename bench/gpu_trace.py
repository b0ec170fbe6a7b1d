"""Profiler traces on a GPU: a captured two-plan step replayed, and a dynamic batcher serving
concurrent clients, each exported as trace-event JSON and checked and drawn by
``hipdnn-async trace``.

    python bench/gpu_trace.py --device cuda:0 --out DIR

Writes ``DIR/trace_capture.json`` and ``DIR/trace_batcher.json`` and prints each profile's
table and overlap figure. The traces are checked by ``hipdnn-async trace`` (run it on
each file; ``--png`` draws the timeline where matplotlib is installed).
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))       # this checkout's hipdnn_async

import anyio  # noqa: E402
import numpy as np  # noqa: E402

import hipdnn_async as hd  # noqa: E402


def _graphs(n: int):
    """A ResNet-50 3x3 64->64 conv (NCHW, FLOAT) and a batchnorm inference on its output."""
    conv = hd.Graph(name="conv3x3", io_data_type=hd.DataType.FLOAT)
    x = conv.tensor(dims=(n, 64, 56, 56), name="x")
    w = conv.tensor(dims=(64, 64, 3, 3), name="w")
    h = conv.conv_fprop(x, w, padding=1).set_output(True).set_name("h")
    bn = hd.Graph(name="bn_inference", io_data_type=hd.DataType.FLOAT)
    hin = bn.tensor(dims=(n, 64, 56, 56), name="h")
    stats = {k: bn.tensor(dims=(1, 64, 1, 1), name=k) for k in ("mean", "var", "scale", "bias")}
    y = bn.batchnorm_inference_variance_ext(hin, stats["mean"], stats["var"], stats["scale"],
                                            stats["bias"], epsilon=1e-5).set_output(True)
    return conv, (x, w, h), bn, (hin, stats, y)


async def capture_trace(spec: str, out: str) -> None:
    conv, (x, w, h), bn, (hin, stats, y) = _graphs(8)
    rng = np.random.default_rng(0)
    async with hd.Device(spec, streams=2) as dev:
        conv_plan, bn_plan = await dev.build(conv), await dev.build(bn)
        xs = await dev.asarray(rng.standard_normal(x.dims).astype(np.float32))
        ws = await dev.asarray((rng.standard_normal(w.dims) / 24).astype(np.float32))
        hs = dev.empty(h.dims, "float32")
        ys = dev.empty(y.dims, "float32")
        per_channel = {}
        for name, value in (("mean", 0.0), ("var", 1.0), ("scale", 1.0), ("bias", 0.0)):
            per_channel[stats[name]] = await dev.asarray(np.full((1, 64, 1, 1), value,
                                                                 np.float32))
        async with dev.profile() as prof:
            async with dev.capture() as step:
                conv_plan.submit({x: xs, w: ws, h: hs})
                bn_plan.submit({hin: hs, y: ys, **per_channel})
            for _ in range(10):
                await step.replay()
            for i in range(10):     # the two plans directly, on both streams, for overlap
                conv_plan.submit({x: xs, w: ws, h: hs}, stream=i % 2)
            await dev.synchronize()
        step.close()
    print(prof.table())
    print(f"capture profile: overlap {prof.overlap():.0%}")
    prof.export_chrome_trace(os.path.join(out, "trace_capture.json"))


async def batcher_trace(spec: str, out: str, clients: int) -> None:
    g = hd.Graph(name="layer", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(32, 64, 28, 28), name="x")
    w = g.tensor(dims=(64, 64, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    weights = (np.random.default_rng(0).standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    image = np.ones((1, 64, 28, 28), np.float32)
    async with hd.Device(spec, streams=2) as dev:
        async with hd.DynamicBatcher(dev, g, inputs=["x"], outputs=["y"],
                                     constants={"w": weights},
                                     max_batch_size=32) as batcher:
            await batcher.warmup()
            async with dev.profile() as prof:
                async with anyio.create_task_group() as tg:
                    for _ in range(clients):
                        tg.start_soon(batcher, image)
    print(prof.table())
    fills = [b.fill for b in prof.batches]
    print(f"batcher profile: {len(prof.batches)} batches for {clients} requests, "
          f"mean fill {np.mean(fills):.0%}, overlap {prof.overlap():.0%}")
    prof.export_chrome_trace(os.path.join(out, "trace_batcher.json"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--out", default=".")
    p.add_argument("--clients", type=int, default=256)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    anyio.run(capture_trace, args.device, args.out)
    anyio.run(batcher_trace, args.device, args.out, args.clients)
    return 0


if __name__ == "__main__":
    sys.exit(main())
