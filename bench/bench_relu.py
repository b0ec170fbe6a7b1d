"""RELU_FWD epilogue of the CPU engines against PyTorch, measured in the same run.

Times ``providers.cpu._batchnorm.relu`` (the one-pass ``_kernels.bias_relu``, its rows
built for AVX-512 where the CPU has it: ``bias_relu_isa``, printed) in place on
an N x C x H x W tensor (default 8 x 64 x 56 x 56, a ResNet-50 res2 activation), NCHW and
NHWC, in float32, bfloat16 and float16, against ``torch.relu_`` on the same data and
layout; also the float64-pass fallback (``_add_bias_relu_f64``, the path every dtype took
before the kernel) and the conv epilogue with a per-channel bias (``add_bias_relu`` from a
float32 conv result into the I/O dtype, against torch's ``add_`` + ``relu_``). Per case:
best of ``--reps`` calls after one warm-up (ms) and ratios ours / torch.

    python bench/bench_relu.py [--dims 8,64,56,56] [--reps 10] [--threads 1]
"""
from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np
import torch

from hipdnn_async.providers.cpu import _batchnorm as bn
from hipdnn_async.providers.cpu import _kernels


def _best(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def _as_layout(a, layout):
    """(N, C, H, W) logical view of ``a`` stored as ``layout``."""
    if layout == "NCHW":
        return np.ascontiguousarray(a)
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dims", default="8,64,56,56")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dims = tuple(int(d) for d in args.dims.split(","))
    rng = np.random.default_rng(0)
    base = rng.standard_normal(dims).astype(np.float32)
    bias = rng.standard_normal((1, dims[1], 1, 1)).astype(np.float32)
    tbias = torch.from_numpy(bias)
    print(f"dims {dims}, torch threads {torch.get_num_threads()}, best of {args.reps}, "
          f"rows {_kernels.bias_relu_isa()}")
    print(f"{'case':28s} {'ours ms':>8s} {'before ms':>10s} {'torch ms':>9s} "
          f"{'ours/torch':>10s} {'before/torch':>12s}")
    for dt, tdt in ((np.float32, torch.float32), (ml_dtypes.bfloat16, torch.bfloat16),
                    (np.float16, torch.float16)):
        name = np.dtype(dt).name
        for layout in ("NCHW", "NHWC"):
            x = _as_layout(base.astype(dt), layout)
            t = torch.from_numpy(_as_layout(base, layout)).to(tdt)   # keeps the strides
            ours = _best(lambda: bn.relu(x, x), args.reps)
            before = _best(lambda: bn._add_bias_relu_f64(x, None, x, 0.0, np.inf), args.reps)
            th = _best(lambda: torch.relu_(t), args.reps)
            print(f"{'relu ' + name + ' ' + layout:28s} {ours:8.3f} {before:10.3f} {th:9.3f} "
                  f"{ours / th:10.2f} {before / th:12.2f}")
            # conv epilogue: float32 conv result -> bias + ReLU into the I/O dtype
            y32 = _as_layout(base, layout)
            out = _as_layout(np.empty(dims, dt), layout)
            t32 = torch.from_numpy(y32.copy())
            ours = _best(lambda: bn.add_bias_relu(y32, bias, out, None, None), args.reps)
            before = _best(lambda: bn._add_bias_relu_f64(y32, bias, out, 0.0, np.inf), args.reps)
            th = _best(lambda: t32.add_(tbias).relu_().to(tdt), args.reps)
            print(f"{'bias+relu f32>' + name + ' ' + layout:28s} {ours:8.3f} {before:10.3f} "
                  f"{th:9.3f} {ours / th:10.2f} {before / th:12.2f}")


if __name__ == "__main__":
    main()
