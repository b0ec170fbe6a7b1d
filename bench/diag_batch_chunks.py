"""How many chunks should a blocked NCHW convolution run its batch in? Each NCHW case of
``bench_cpu.py`` whose plan takes oneDNN's blocked layout (x reordered into it, the
kernel, y reordered out: PyTorch's NCHW path), built at 1, 2, 4 and 8 chunks
(``_avx512.CHUNKS_OVERRIDE``; ``Conv._chunked``: the weights reordered once, then per
chunk the activations' reorders and the kernel, on copies one chunk large) and timed
interleaved with PyTorch's call in one warmed process, as ``bench_cpu.py`` times: best
and median of ``--rounds`` rounds, each side once a round. Every chunking's output is
compared with the unchunked one (the same kernel per image: equal bits expected).

The measurements behind ``_avx512.batch_chunks``: the ratio column is ours / PyTorch's
best time; the chunkings compare with one another in the same rounds.

    python bench/diag_batch_chunks.py [--batch 8] [--shapes "res2 3x3,res3 3x3"]
        [--patterns fprop,dgrad,conv_bias_relu] [--dtypes float32,bfloat16]
        [--chunks 1,2,4,8] [--rounds 15]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import bench_cpu
from _bench_common import RESNET50_CONVS, NoGc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--shapes", default=",".join(bench_cpu.CONV_SHAPES))
    p.add_argument("--patterns", default="fprop,dgrad,conv_bias_relu")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--chunks", default="1,2,4,8")
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args(argv)
    import torch

    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _avx512
    from hipdnn_async.providers.cpu.onednn._conv import CHUNKED
    specs = {s[0]: s for s in RESNET50_CONVS}
    counts = [int(k) for k in a.chunks.split(",")]
    torch.set_num_threads(bench_cpu.our_threads())
    # a device per count: a device's plan cache would give the second count the first's plan
    devs = {k: hd.Device("cpu") for k in counts}
    try:
        bench_cpu.warm_process(hd, torch, devs[counts[0]], None)
        for shape in a.shapes.split(","):
            for dtype in a.dtypes.split(","):
                for pattern in a.patterns.split(","):
                    cases = {}
                    for k in counts:
                        _avx512.CHUNKS_OVERRIDE = k
                        try:
                            case = bench_cpu.conv_case(hd, torch, devs[k], None, a.batch,
                                                       specs[shape], pattern, dtype, "NCHW")
                        finally:
                            _avx512.CHUNKS_OVERRIDE = None
                        if "+blocked" not in case.plan.algorithm:
                            break
                        if k > 1 and CHUNKED not in case.plan.algorithm:
                            continue        # the count does not divide the batch
                        cases[k] = case
                    if not cases:
                        print(f"{shape} {pattern} {dtype}: not on the blocked layout")
                        continue
                    _one(torch, shape, pattern, dtype, cases, a.rounds)
    finally:
        for dev in devs.values():
            dev.close()
    return 0


def _one(torch, shape, pattern, dtype, cases, rounds):
    runs = {f"{k} chunk(s)": c.ours for k, c in cases.items()}
    first = next(iter(cases.values()))
    runs["torch"] = first.theirs
    for fn in runs.values():
        for _ in range(3):
            fn()
    times = {name: [] for name in runs}
    with NoGc():
        for _ in range(rounds):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
    ref = None
    diffs = []
    for k, c in cases.items():
        c.out[...] = 0
        c.ours()
        out = np.asarray(c.out, np.float64)
        ref = out if ref is None else ref
        diffs.append(f"{k}:{np.max(np.abs(out - ref)):.1e}")
    tb, tm = min(times["torch"]), float(np.median(times["torch"]))
    algos = sorted({c.plan.algorithm for c in cases.values()})
    print(f"{shape} {pattern} {dtype} NCHW; {algos}; max |diff| from 1 chunk "
          f"{' '.join(diffs)}")
    for name, v in times.items():
        print(f"  {name:12s} best {min(v):8.3f} ms  median {np.median(v):8.3f} ms  "
              f"ratio {min(v) / tb:.3f}  median ratio {np.median(v) / tm:.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
