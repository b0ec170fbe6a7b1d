"""Every candidate of one NCHW ResNet-50 convolution (``bench/_bench_common.py``'s
RESNET50_CONVS names), each ``+blocked`` one at 1, 2, 4 and 8 batch chunks
(``_avx512.CHUNKS_OVERRIDE``), timed interleaved with PyTorch's call in one process:
best of 9 rounds, and the median ratio. Each candidate is pinned through the
``onednn.candidate`` knob, by its index in the default plan's ``algorithm.trials``.
Whether chunking makes a blocked kernel beat the default (e.g. oneDNN's GEMM on a 1x1).

    python bench/diag_chunked_candidates.py "res2 1x1 256>64" fprop bfloat16 8
"""
import contextlib
import sys
import time

import numpy as np
import torch

import bench_cpu
import hipdnn_async as hd
from _bench_common import RESNET50_CONVS
from hipdnn_async.providers.cpu.onednn import _avx512

PIN = "onednn.candidate"     # the knob that pins a candidate by its index
ROUNDS = 9


def _cases(devices, spec, pattern, dtype, n) -> dict:
    """{plan.algorithm: case} of every candidate, each +blocked one at 1, 2, 4, 8 chunks,
    each chunk count on its own device (a device's plan cache would give an equal graph
    the plan built under another count)."""
    cases = {}
    for k in (1, 2, 4, 8):
        _avx512.CHUNKS_OVERRIDE = k          # read at build
        dev = devices.enter_context(hd.Device("cpu"))
        try:
            default = bench_cpu.conv_case(hd, torch, dev, None, n, spec, pattern, dtype, "NCHW")
            for index, (name, _) in enumerate(default.plan.algorithm.trials):
                if name not in cases and (k == 1 or "+blocked" in name):
                    cases[name] = bench_cpu.conv_case(hd, torch, dev, None, n, spec, pattern,
                                                      dtype, "NCHW", knobs={PIN: index})
        finally:
            _avx512.CHUNKS_OVERRIDE = None
    return cases


def main(argv) -> int:
    if len(argv) != 4:
        print(__doc__)
        return 2
    shape, pattern, dtype, n = argv[0], argv[1], argv[2], int(argv[3])
    torch.set_num_threads(bench_cpu.our_threads())
    spec = {s[0]: s for s in RESNET50_CONVS}[shape]
    with contextlib.ExitStack() as devices:
        cases = _cases(devices, spec, pattern, dtype, n)
        runs = {name: c.ours for name, c in cases.items()}
        runs["torch"] = next(iter(cases.values())).theirs
        for f in runs.values():
            for _ in range(3):
                f()
        t = {k: [] for k in runs}
        for _ in range(ROUNDS):
            for k, f in runs.items():
                t0 = time.perf_counter()
                f()
                t[k].append(time.perf_counter() - t0)
    tb, mb = min(t["torch"]), np.median(t["torch"])
    for k, v in sorted(t.items(), key=lambda kv: min(kv[1])):
        print(f"{k:50s} {min(v) * 1e3:8.3f} ms  {min(v) / tb:.3f}  median "
              f"{np.median(v) / mb:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
