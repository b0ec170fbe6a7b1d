"""Our default plan and PyTorch's call for one convolution, timed in several fresh
processes: how much each side's best time moves from process to process (oneDNN's bf16
GEMM convolution on NCHW 1x1s did, in bench_cpu's runs, and so did PyTorch's).

Per process and pattern: the best of ``CALLS`` calls of each side, alternating, after 3
warm-ups; then the range of ours / PyTorch's over the processes.

    python bench/diag_process_variance.py SHAPE DTYPE LAYOUT PATTERNS [PROCESSES]
    e.g. python bench/diag_process_variance.py "res2 1x1 256>64" bfloat16 NCHW fprop,wgrad 6

SHAPE is a name of ``_bench_common.RESNET50_CONVS``. Environment: N (batch, default 8),
CALLS (default 30), ALT (the start of a ``plan.algorithm`` name, e.g.
``jit_bf16_1x1:avx512_core_bf16+blocked``, which its ``+batch/<k>`` chunks follow: the first
candidate, pinned through the ``onednn.candidate`` knob, whose ``plan.algorithm`` starts
so and is not the default, is timed in the same rounds as a third column: whether another
candidate's time moves with the process too).
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
            alt = _alternative(hd, torch, dev, n, spec, pattern, dtype, layout, case)
            sides = [case.ours, case.theirs] + ([alt.ours] if alt else [])
            for _ in range(3):
                for side in sides:
                    side()
            best = [float("inf")] * len(sides)
            for _ in range(calls):
                for i, side in enumerate(sides):
                    t0 = time.perf_counter()
                    side()
                    best[i] = min(best[i], time.perf_counter() - t0)
            out[pattern] = ([b * 1e3 for b in best]
                            + [str(case.plan.algorithm)] + ([str(alt.plan.algorithm)] if alt else []))
    return out


def _alternative(hd, torch, dev, n, spec, pattern, dtype, layout, default):
    """The case pinned to the first candidate whose name starts with $ALT, not the default
    (None without ALT or where none does): its index in the default plan's trials, the
    order the ``onednn.candidate`` knob counts in (as ``diag_conv_candidates.py`` pins)."""
    import bench_cpu
    start = os.environ.get("ALT")
    names = [name for name, _ in default.plan.algorithm.trials]
    index = next((i for i, name in enumerate(names)
                  if start and name.startswith(start) and name != str(default.plan.algorithm)),
                 None)
    if index is None:
        return None
    return bench_cpu.conv_case(hd, torch, dev, None, n, spec, pattern, dtype, layout,
                               knobs={"onednn.candidate": index})


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
        print(f"process {i + 1}: " + "  ".join(_row(p, r) for p, r in got.items()), flush=True)
    for p in patterns.split(","):
        ratios = [r[p][0] / r[p][1] for r in runs]
        ours, theirs = [r[p][0] for r in runs], [r[p][1] for r in runs]
        print(f"{shape} {dtype} {layout} {p}: ours / torch {min(ratios):.3f}-{max(ratios):.3f}; "
              f"ours {min(ours):.3f}-{max(ours):.3f} ms, torch {min(theirs):.3f}-"
              f"{max(theirs):.3f} ms over {procs} processes")
        if all(len(r[p]) == 5 for r in runs):
            alt = [r[p][2] / r[p][1] for r in runs]
            print(f"  {runs[0][p][4]} / torch {min(alt):.3f}-{max(alt):.3f}")
    return 0


def _row(pattern, r) -> str:
    """One pattern's figures in one process: [ours, torch, (alt,) ours' name, (alt's)]."""
    alt = len(r) == 5
    text = (f"{pattern} ours {r[0]:.3f} ms ({r[3] if alt else r[2]}) torch {r[1]:.3f} ms "
            f"ratio {r[0] / r[1]:.3f}")
    if alt:
        text += f"; {r[4]} {r[2]:.3f} ms ratio {r[2] / r[1]:.3f}"
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
