"""Small CPU convolutions, where the host path is a large part of a call, against PyTorch.

Every case times our ``plan.execute_sync`` against the PyTorch eager call a user would
write (the calls of ``bench_cpu.py``: ``F.conv2d``; ``convolution_backward`` for dgrad
and wgrad; ``F.conv2d`` with bias, then ``relu_``), in alternating windows in one run, on
the same cores (torch on our thread count). Batch 1, FLOAT by default:

- tiny 1x1 8>8 @8 and tiny 3x3 8>8 @8 (the kernel takes microseconds: the call is
  almost all host path);
- 3x3 64>64 @8, 1x1 64>64 @14 (tens of microseconds);
- res5 3x3 512>512 @7 (ResNet-50's last 3x3 at batch 1, a few milliseconds);

fprop, dgrad, wgrad and conv + bias + ReLU, NHWC and NCHW; and batchnorm (the calls of
``bench_cpu.py``: ``native_batch_norm``, ``native_batch_norm_backward``) on a tiny
16x8x8 activation and a 64x14x14 one, every pattern. Per case: our and torch's
best and median µs, their ratio (ours / torch, best and median), our plan's algorithm and
workspace bytes. Plans with a workspace take it from the host pool on each execution (no
``workspace=`` passed), as a user's would.

Run it with ``PYTHONPATH`` on another tree for that tree's figures (the before of a
change): only the public API and ``bench_cpu``'s helpers are used.

    python bench/bench_cpu_small.py [--reps 400] [--configs float32:NHWC,...]
                                    [--threads N] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from _bench_common import geomean, table
from bench_cpu import BN_PATTERNS, CONFIGS, CONV_PATTERNS, _configs, _positive, bn_case, \
    conv_case, header, our_threads, time_pair, warm_process

# name, (C, H, W) of the input, (K, C, R, S), padding, stride
SHAPES = [
    ("tiny 1x1 8>8 @8", (8, 8, 8), (8, 8, 1, 1), 0, 1),
    ("tiny 3x3 8>8 @8", (8, 8, 8), (8, 8, 3, 3), 1, 1),
    ("3x3 64>64 @8", (64, 8, 8), (64, 64, 3, 3), 1, 1),
    ("1x1 64>64 @14", (64, 14, 14), (64, 64, 1, 1), 0, 1),
    ("res5 3x3 @7", (512, 7, 7), (512, 512, 3, 3), 1, 1),
]
# batchnorm: name, (C, H, W)
BN_SHAPES = [("tiny bn 16x8x8", (16, 8, 8)), ("bn 64x14x14", (64, 14, 14))]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=_positive, default=400,
                   help="timed calls per side at most (fewer where they pass 300 ms)")
    p.add_argument("--configs", type=_configs, default=CONFIGS[:2],
                   help="dtype:layout pairs (default float32:NHWC,float32:NCHW)")
    p.add_argument("--threads", type=_positive, default=None,
                   help="threads for both sides (default: the cores this process may use)")
    p.add_argument("--json", metavar="PATH", help="write every figure here")
    return p.parse_args(argv)


def run(args) -> dict:
    threads = our_threads(args.threads)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    import hipdnn_async as hd

    torch.set_num_threads(threads)
    rows = []
    with hd.Device("cpu") as dev:
        args.batch, args.engine, args.min_ms, args.warmup, args.gemm_n = 1, None, 0, 20, 0
        head = header(args, hd, torch, dev, threads)
        print("bench_cpu_small: " + "; ".join(f"{k} {v}" for k, v in head.items()
                                              if k not in ("device", "gemm_n", "min_ms")))
        warm_process(hd, torch, dev, None)
        for dtype, layout in args.configs:
            cases = [(spec[0], pattern, lambda spec=spec, pattern=pattern: conv_case(
                        hd, torch, dev, None, 1, spec, pattern, dtype, layout))
                     for spec in SHAPES for pattern in CONV_PATTERNS]
            cases += [(name, pattern, lambda chw=chw, pattern=pattern: bn_case(
                         hd, torch, dev, None, 1, chw, pattern, dtype, layout))
                      for name, chw in BN_SHAPES for pattern in BN_PATTERNS]
            for name, pattern, make in cases:
                case = make()
                # calls per side: --reps, or as many as take about 300 ms
                t0 = _seconds(case.ours)
                reps = max(10, min(args.reps, int(0.3 / max(t0, 1e-7))))
                t = time_pair(case.ours, case.theirs, reps, warmup=20)
                (ob, om, _, _), (tb, tm, _, _) = t["ours"], t["torch"]
                rows.append({"shape": name, "pattern": pattern, "dtype": dtype,
                             "layout": layout, "ours_us": ob * 1e3,
                             "ours_median_us": om * 1e3, "torch_us": tb * 1e3,
                             "torch_median_us": tm * 1e3, "ratio": ob / tb,
                             "median_ratio": om / tm, "calls": reps,
                             "algorithm": str(case.plan.algorithm),
                             "workspace": case.plan.workspace_size})
    table([[r["shape"], r["pattern"], r["dtype"], r["layout"],
            f"{r['ours_us']:.1f} / {r['ours_median_us']:.1f}",
            f"{r['torch_us']:.1f} / {r['torch_median_us']:.1f}", f"{r['ratio']:.2f}",
            f"{r['median_ratio']:.2f}", r["algorithm"], r["workspace"]] for r in rows],
          ["shape", "pattern", "dtype", "layout", "ours us best / median",
           "torch us best / median", "ratio", "median ratio", "algorithm", "workspace B"])
    summary = {"geomean_ratio": geomean([r["ratio"] for r in rows]),
               "geomean_median_ratio": geomean([r["median_ratio"] for r in rows]),
               "above_1": sum(r["ratio"] > 1.0 for r in rows), "cases": len(rows)}
    print(f"\ngeometric mean ratio {summary['geomean_ratio']:.3f} (medians "
          f"{summary['geomean_median_ratio']:.3f}); {summary['above_1']} of "
          f"{summary['cases']} cases above 1.0x")
    doc = {"header": head, "cases": rows, "summary": summary}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
    return doc


def _seconds(fn, n=5) -> float:
    import time
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
