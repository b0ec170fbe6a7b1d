"""Our default plan and PyTorch's call for one convolution, timed in several fresh
processes: how much each side's best time moves from process to process (oneDNN's bf16
GEMM convolution on NCHW 1x1s did, in bench_cpu's runs, and so did PyTorch's).

Per process and pattern: the best of ``CALLS`` calls of each side, alternating, after 3
warm-ups; then the range of ours / PyTorch's over the processes.

    python bench/diag_process_variance.py SHAPE DTYPE LAYOUT PATTERNS [PROCESSES]
    e.g. python bench/diag_process_variance.py "res2 1x1 256>64" bfloat16 NCHW fprop,wgrad 6

SHAPE is a name of ``_bench_common.RESNET50_CONVS``. Environment: N (batch, default 8),
CALLS (default 30).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _one(shape, dtype, layout, patterns) -> dict:
    """In this process: {pattern: (ours ms, torch ms)}, each the best of CALLS calls."""
    sys.path.insert(0, HERE)
    import torch

    import bench_cpu
    import hipdnn_async as hd
    from _bench_common import RESNET50_CONVS
    spec = {c[0]: c for c in RESNET50_CONVS}[shape]
    n, calls = int(os.environ.get("N", "8")), int(os.environ.get("CALLS", "30"))
    out = {}
    with hd.Device("cpu") as dev:
        for pattern in patterns:
            case = bench_cpu.conv_case(hd, torch, dev, None, n, spec, pattern, dtype, layout)
            for _ in range(3):
                case.ours()
                case.theirs()
            ours = theirs = float("inf")
            for _ in range(calls):
                t0 = time.perf_counter()
                case.ours()
                t1 = time.perf_counter()
                case.theirs()
                t2 = time.perf_counter()
                ours, theirs = min(ours, t1 - t0), min(theirs, t2 - t1)
            out[pattern] = (ours * 1e3, theirs * 1e3, str(case.plan.algorithm))
    return out


def main(argv) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(_one(argv[1], argv[2], argv[3], argv[4].split(","))))
        return 0
    if len(argv) not in (4, 5):
        print(__doc__)
        return 2
    shape, dtype, layout, patterns = argv[:4]
    procs = int(argv[4]) if len(argv) == 5 else 6
    runs = []
    for i in range(procs):
        got = json.loads(subprocess.run(
            [sys.executable, __file__, "--child", shape, dtype, layout, patterns],
            check=True, capture_output=True, text=True).stdout)
        runs.append(got)
        print(f"process {i + 1}: " + "  ".join(
            f"{p} ours {o:.3f} ms ({a}) torch {t:.3f} ms ratio {o / t:.3f}"
            for p, (o, t, a) in got.items()), flush=True)
    for p in patterns.split(","):
        ratios = [r[p][0] / r[p][1] for r in runs]
        ours, theirs = [r[p][0] for r in runs], [r[p][1] for r in runs]
        print(f"{shape} {dtype} {layout} {p}: ours / torch {min(ratios):.3f}-{max(ratios):.3f}; "
              f"ours {min(ours):.3f}-{max(ours):.3f} ms, torch {min(theirs):.3f}-"
              f"{max(theirs):.3f} ms over {procs} processes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
