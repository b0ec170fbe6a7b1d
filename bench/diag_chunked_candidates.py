"""Every candidate of one NCHW ResNet-50 convolution (``bench/_bench_common.py``'s
RESNET50_CONVS names), each ``+blocked`` one at 1, 2, 4 and 8 batch chunks
(``_avx512.CHUNKS_OVERRIDE``), timed interleaved with PyTorch's call in one process:
best of 9 rounds, and the median ratio. Pinned through the ``onednn.candidate`` knob.
Whether chunking makes a blocked kernel beat the default (e.g. oneDNN's GEMM on a 1x1).

    python bench/diag_chunked_candidates.py "res2 1x1 256>64" fprop bfloat16 8
"""
import sys
import time

import numpy as np
import torch

import hipdnn_async as hd, bench_cpu
from _bench_common import RESNET50_CONVS
from hipdnn_async.providers.cpu.onednn import _avx512
specs = {s[0]: s for s in RESNET50_CONVS}
torch.set_num_threads(2)
shape, pattern, dtype, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
devs=[]
cases = {}
for idx in range(12):
    for k in (1, 2, 4, 8):
        _avx512.CHUNKS_OVERRIDE = k
        dev = hd.Device("cpu"); devs.append(dev)
        try:
            c = bench_cpu.conv_case(hd, torch, dev, None, n, specs[shape], pattern, dtype, "NCHW",
                                    knobs={"onednn.candidate": idx})
        except Exception as e:
            c = None
        finally:
            _avx512.CHUNKS_OVERRIDE = None
        if c is None: break
        name = str(c.plan.algorithm)
        if name not in cases: cases[name] = c
        if "+blocked" not in name: break
    if c is None: break
runs = {k: c.ours for k, c in cases.items()}
runs["torch"] = next(iter(cases.values())).theirs
for f in runs.values():
    for _ in range(3): f()
t = {k: [] for k in runs}
for _ in range(9):
    for k, f in runs.items():
        t0 = time.perf_counter(); f(); t[k].append(time.perf_counter() - t0)
tb = min(t["torch"])
for k, v in sorted(t.items(), key=lambda kv: min(kv[1])):
    print(f"{k:50s} {min(v)*1e3:8.3f} ms  {min(v)/tb:.3f}  median {np.median(v)/np.median(t['torch']):.3f}")
