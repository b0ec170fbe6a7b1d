"""Channels-last batchnorm training and backward on the cuDNN graph engine: does any knob
setting of the engine cuDNN's heuristics pick beat the heuristic's own, where the issue's
">= 75% of copy bandwidth" is missed (issue 11; bench/results/h200_bench_gpu.log: fp16 NHWC
training 54-61% on 32x1024x14x14 / 32x2048x7x7)?

For each shape: the heuristic plan (its config, device ms, GB/s, % of an x-sized
``dst.copy_(src)``'s bandwidth), then every engine config of a knob sweep of that engine
(knob types OCCUPANCY 30, ARRAY_SIZE_PER_THREAD 31, NUM_C_PER_BLOCK 32 of cudnn_graph.h:
the knobs the heuristics set for NORM_FORWARD / NORM_BACKWARD, over SWEEP's values: the
heuristics' choices on the H200 were 0-1, 0-7 and 2-3) timed by the engine's own benchmark (``global.benchmarking = 1``,
the cap on timed configs lifted for this process): the fastest one, re-timed as the bench
does, and the five fastest with their build-stream medians. Configs cuDNN refuses to
finalize or run are counted, not timed. Last, the legacy engine's plan (the Ex call,
SPATIAL_PERSISTENT, as PyTorch runs channels-last batchnorm), for comparison. Bytes moved as bench_gpu's batchnorm section:
training 3|x|, backward 5|x|.

    python3 bench/diag_bn_knobs.py [--batch 32] [--shapes 1024x14x14,2048x7x7]
        [--what train,backward] [--plans heuristic,sweep,legacy] [--max-seconds 200]
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

SWEEP = {30: range(0, 2), 31: range(0, 8), 32: range(1, 5)}   # 64 configs


def _sweep(be, gp, graph, first):
    """Candidates of ``first``'s engine over SWEEP (its other knobs as chosen), heuristic
    config first; combinations cuDNN refuses to finalize as a config are left out."""
    index, chosen = gp.parse_name(first.name(be))
    fixed = [(t, v) for t, v in chosen if t not in SWEEP]
    out, seen = [first], {first.name(be)}
    for values in itertools.product(*SWEEP.values()):
        knobs = sorted(fixed + list(zip(SWEEP, values)))
        name = f"eng{index} " + " ".join(f"k{t}={v}" for t, v in knobs)
        if name in seen:
            continue
        seen.add(name)
        try:
            cfg = gp.config_from_name(be, graph, name)
        except Exception:  # noqa: BLE001 - not a valid combination
            continue
        c = gp._inspect(be, cfg, "sweep")
        c.knobs = tuple(knobs)
        out.append(c)
    return out


def install_sweep():
    """Heuristic candidates of norm graphs become the knob sweep of the first one's engine;
    the benchmark times all of them (this process only)."""
    from hipdnn_async.providers.cudnn import _graph, _graph_plan as gp
    original = gp.heuristic_candidates

    def swept(be, graph, accept, log=None):
        cands = original(be, graph, accept, log)
        if not cands:
            return cands
        return _sweep(be, gp, graph, cands[0]) + cands[1:]

    gp.heuristic_candidates = swept
    _graph._BENCH_CANDIDATES = 10_000


async def one(hd, torch, bg, dev_h, dev_s, dims, what, plans):
    from hipdnn_async.providers.cudnn import CUDNN_ENGINE_NAME
    dtype, layout = "float16", "NHWC"
    x = bg.torch_tensor(torch, dims, dtype, layout)
    nbytes = x.numel() * x.element_size()
    dst = torch.empty_like(x)
    _, copy_ms = bg.time_torch(torch, lambda: dst.copy_(x), 20, "cuda_events")
    copy_gbps = bg.bn_gbps(2, nbytes, copy_ms)
    gt, _, gb = bg._bn_graphs(hd, dims, dtype, layout)
    c = dims[1]
    rows = []
    for label, dev, knobs, engine in (
            ("heuristic", dev_h, {}, None),
            ("sweep", dev_s, {"global.benchmarking": 1}, None),
            ("legacy", dev_h, {}, CUDNN_ENGINE_NAME)):
        if label not in plans:
            continue
        t0 = time.perf_counter()
        plan = await dev.build(gt if what == "train" else gb, engine=engine, knobs=knobs)
        build_s = time.perf_counter() - t0

        def c4(t):
            return t.reshape(1, c, 1, 1)

        if what == "train":
            ones, zeros = torch.ones(c, device="cuda"), torch.zeros(c, device="cuda")
            g = {k: bg.gpu_copy(torch, dev, v, layout) for k, v in (
                ("x", x), ("y", torch.empty_like(x)), ("scale", c4(ones)),
                ("bias", c4(zeros)), ("rm", c4(zeros.clone())), ("rv", c4(ones.clone())),
                ("mean", c4(torch.empty(c, device="cuda"))),
                ("inv_variance", c4(torch.empty(c, device="cuda"))))}
            vp = {**g, "nrm": g["rm"], "nrv": g["rv"]}
        else:
            vp = {k: bg.gpu_copy(torch, dev, v, layout) for k, v in (
                ("dy", bg.torch_tensor(torch, dims, dtype, layout)), ("x", x),
                ("scale", c4(torch.ones(c, device="cuda"))),
                ("mean", c4(torch.zeros(c, device="cuda"))),
                ("inv_variance", c4(torch.ones(c, device="cuda"))))}
            vp["dx"] = dev.empty(dims, dtype, layout=layout)
            vp["dscale"], vp["dbias"] = (dev.empty((1, c, 1, 1), "float32") for _ in range(2))
        ms, method, gpu_ms = await bg.time_plan(torch, dev, plan, vp, 20)
        gbps = bg.bn_gbps(bg.BN_PASSES[what], nbytes, gpu_ms or ms)
        trials = sorted((t for t in getattr(plan.algorithm, "trials", ()) or ()
                         if t[1] is not None), key=lambda t: t[1])
        rows.append((label, str(plan.algorithm).split(" (")[0], gpu_ms, gbps,
                     bg.pct_of(gbps, copy_gbps), len(trials), build_s, trials[:5]))
    return copy_gbps, rows


async def main_async(args):
    import torch

    import bench_gpu as bg
    import hipdnn_async as hd
    install_sweep()
    deadline = time.perf_counter() + args.max_seconds
    print(f"hipdnn_async {hd.__version__}; torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; batch {args.batch}; fp16 NHWC; knob sweep "
          f"{ {k: (min(v), max(v)) for k, v in SWEEP.items()} }", flush=True)
    with hd.Device("cuda:0", max_inflight=64) as dev_h, \
            hd.Device("cuda:0", max_inflight=64) as dev_s:
        for shape in args.shapes:
            dims = (args.batch,) + shape
            for what in args.what:
                if time.perf_counter() > deadline:
                    print(f"{dims} {what}: skipped (--max-seconds)")
                    continue
                try:
                    copy_gbps, rows = await one(hd, torch, bg, dev_h, dev_s, dims, what,
                                                   args.plans)
                except Exception as exc:  # noqa: BLE001 - report and go on
                    print(f"{dims} {what}: {type(exc).__name__}: {exc}", flush=True)
                    continue
                print(f"\n== {what} {'x'.join(map(str, dims))} (copy {bg.f(copy_gbps, 0)} GB/s)")
                bg.table([(r[0], r[1], bg.f(r[2], 4), bg.f(r[3], 0), bg.f(r[4], 0), r[5],
                           bg.f(r[6], 1)) for r in rows],
                         ["plan", "config", "gpu ms", "GB/s", "%copy", "timed", "build s"])
                for r in rows:
                    if r[7]:
                        print(f"  {r[0]} fastest timed: "
                              + "; ".join(f"{n.split(' (')[0]} {t:.4f}" for n, t in r[7]))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shapes", default="1024x14x14,2048x7x7",
                    type=lambda s: [tuple(int(v) for v in p.split("x")) for p in s.split(",")])
    ap.add_argument("--what", default="train", type=lambda s: s.split(","))
    ap.add_argument("--plans", default="heuristic,sweep,legacy", type=lambda s: s.split(","),
                    help="which plans to time per shape (the sweep takes 30-40 s a shape)")
    ap.add_argument("--max-seconds", type=float, default=200.0)
    args = ap.parse_args(argv)
    os.environ.setdefault("HIPDNN_ASYNC_PERFDB",
                          os.path.join(tempfile.mkdtemp(prefix="diag_bn_"), "perfdb.sqlite3"))
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
