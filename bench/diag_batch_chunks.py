"""Would running a convolution batch in chunks help? One NCHW 3x3 convolution forward
(ResNet-50's res2 / res3 / res4 3x3) at batch N, as one plan at batch N and as N/k calls
of a plan built at batch N/k on slices of the same arrays (k = 1, 2, 4, 8), timed
interleaved with PyTorch's ``F.conv2d`` in one process: best and median of ``--rounds``.

The question (oneDNN issue, "every case <= 1.0x"): our NCHW path is PyTorch's, three
reorders around the blocked ``jit`` kernel; with a chunk's reordered copy in L2 instead
of memory, the reorders might cost less. Ratios are ours / torch of the same round; they
compare the chunkings with each other. Against PyTorch they are not ``bench_cpu.py``'s: in
a fresh process like this one PyTorch's outputs and blocked copies are fresh ``mmap``s,
about 2,300 page faults per call at res3 batch 8 (its time 8.2 ms with
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set to 1e9, 10.5-11.1 ms
without), which bench_cpu's warmed process does not pay.

    python bench/diag_batch_chunks.py [--batch 8] [--shape res3] [--dtype float32]
                                      [--rounds 15]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

SHAPES = {"res2": (64, 56), "res3": (128, 28), "res4": (256, 14)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--shape", choices=sorted(SHAPES), default="res3")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args(argv)
    import ml_dtypes
    import torch
    import torch.nn.functional as F

    import hipdnn_async as hd
    n, (c, hw) = a.batch, SHAPES[a.shape]
    bf16 = a.dtype == "bfloat16"
    tdt = torch.bfloat16 if bf16 else torch.float32
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, hw, hw, generator=gen).to(tdt)
    w = (torch.randn(c, c, 3, 3, generator=gen) * 0.05).to(tdt)
    y = torch.empty(n, c, hw, hw, dtype=tdt)

    def host(t):     # the tensor's memory as a NumPy array (bfloat16 through int16)
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if bf16 else t.numpy()

    xn, wn, yn = host(x), host(w), host(y)
    dt = hd.DataType.BFLOAT16 if bf16 else hd.DataType.FLOAT
    with hd.Device("cpu") as dev:
        plans = {}
        for k in (1, 2, 4, 8):
            if n % k:
                continue
            g = hd.Graph(io_data_type=dt, intermediate_data_type=hd.DataType.FLOAT,
                         compute_data_type=hd.DataType.FLOAT)
            gx = g.tensor(dims=(n // k, c, hw, hw), name="x")
            gw = g.tensor(dims=(c, c, 3, 3), name="w")
            g.conv_fprop(gx, gw, padding=1).set_output(True).set_name("y")
            plans[k] = dev.build_sync(g)

        def ours(k):
            plan, m = plans[k], n // k
            for i in range(k):
                plan.execute_sync({"x": xn[i * m:(i + 1) * m], "w": wn,
                                   "y": yn[i * m:(i + 1) * m]})
        runs = {f"ours, {k} chunk(s)": (lambda k=k: ours(k)) for k in plans}
        runs["torch F.conv2d"] = lambda: F.conv2d(x, w, padding=1)
        for fn in runs.values():
            for _ in range(3):
                fn()
        times = {name: [] for name in runs}
        for _ in range(a.rounds):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
        ours(1)
        ref = y.float().clone()
        for k in plans:      # every chunking computes the same values
            y.zero_()
            ours(k)
            assert torch.allclose(y.float(), ref, rtol=1e-2, atol=1e-2), k
        print(f"diag_batch_chunks: {a.shape} 3x3 {c}>{c} @{hw} {a.dtype} NCHW batch {n}; "
              f"plans {sorted({pl.algorithm for pl in plans.values()})}; {a.rounds} rounds")
        tb, tm = min(times["torch F.conv2d"]), float(np.median(times["torch F.conv2d"]))
        for name, v in times.items():
            print(f"  {name:22s} best {min(v):8.3f} ms  median {np.median(v):8.3f} ms  "
                  f"ratio {min(v) / tb:.3f}  median ratio {np.median(v) / tm:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
