"""Every oneDNN candidate of a convolution timed as a whole plan, interleaved with
PyTorch's call for the same work: how the rules of ``providers/cpu/onednn/_avx2.py`` (and
``Conv.prefers_blocked``) were measured, and how to re-measure them on another CPU.

Per line: shape, dtype, layout, pattern; the default choice; then each candidate (up to
``TOP``, in the engine's order) and PyTorch, fastest first, as best-of-``ROUNDS`` ms and
the ratio to PyTorch's time. Each candidate is built pinned by the knob
``onednn.candidate`` (its index in the engine's order), so its time includes its reorders
and hooks; the candidates and PyTorch run round-robin, one call each per round.

    python bench/diag_conv_candidates.py SHAPES DTYPES LAYOUTS PATTERNS
    e.g. python bench/diag_conv_candidates.py "res2 3x3,res4 3x3" float32 NHWC,NCHW wgrad

SHAPES are names of ``_bench_common.RESNET50_CONVS`` or ``CxHxW>K/RsSpP`` (x of C
channels, H x W pixels, into K channels by an R x R kernel at stride S and padding P, e.g.
``3x224x224>64/7s2p3``, the stem); PATTERNS of fprop, dgrad, wgrad, conv_bias_relu. Environment: N (batch, default 8), TOP (candidates, default 6), ROUNDS
(default 7).
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["HIPDNN_ASYNC_PERFDB"] = os.path.join(tempfile.mkdtemp(), "perfdb.sqlite3")

import hipdnn_async as hd  # noqa: E402

import bench_cpu  # noqa: E402
from _bench_common import RESNET50_CONVS  # noqa: E402

PIN = "onednn.candidate"     # the knob that pins a candidate by its index


def _case(dev, torch, n, spec, pattern, dtype, layout, pin=None):
    """bench_cpu's case of the default plan, or of candidate ``pin`` (its index in the
    engine's order)."""
    return bench_cpu.conv_case(hd, torch, dev, None, n, spec, pattern, dtype, layout,
                               knobs=None if pin is None else {PIN: pin})


def _spec(name, convs):
    """The ``RESNET50_CONVS`` entry ``name``, or one made from ``CxHxW>K/RsSpP``."""
    if name in convs:
        return convs[name]
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)>(\d+)/(\d+)s(\d+)p(\d+)", name)
    if m is None:
        raise SystemExit(f"diag_conv_candidates: shape {name!r} is neither a ResNet-50 "
                         "name nor CxHxW>K/RsSpP")
    c, h, w, k, r, st, pad = map(int, m.groups())
    return (name, (c, h, w), (k, c, r, r), pad, st)


def main(argv) -> int:
    import torch
    if len(argv) != 4:
        print(__doc__)
        return 2
    shapes, dtypes, layouts, patterns = (a.split(",") for a in argv)
    n = int(os.environ.get("N", "8"))
    top, rounds = int(os.environ.get("TOP", "6")), int(os.environ.get("ROUNDS", "7"))
    torch.set_num_threads(bench_cpu.our_threads())
    convs = {c[0]: c for c in RESNET50_CONVS}
    convs = {name: _spec(name, convs) for name in shapes}
    with hd.Device("cpu") as dev:
        bench_cpu.warm_process(hd, torch, dev, None, 1.0)
        for name in shapes:
            for dtype in dtypes:
                for layout in layouts:
                    for pattern in patterns:
                        default = _case(dev, torch, n, convs[name], pattern, dtype, layout)
                        order = [nm for nm, _ in default.plan.algorithm.trials]
                        cases = {}
                        for nm in [x for x in order if "#" not in x][:top]:
                            c = _case(dev, torch, n, convs[name], pattern, dtype, layout,
                                      order.index(nm))
                            cases[nm] = c.ours
                        cases["torch"] = default.theirs
                        times = {nm: [] for nm in cases}
                        for fn in cases.values():
                            fn()
                        for _ in range(rounds):
                            for nm, fn in cases.items():
                                t0 = time.perf_counter()
                                fn()
                                times[nm].append(time.perf_counter() - t0)
                        base = min(times["torch"])
                        best = sorted((min(v), nm) for nm, v in times.items())
                        print(f"{name:16s} {dtype:8s} {layout} {pattern:14s} "
                              f"default={default.plan.algorithm}  "
                              + "  ".join(f"{nm}={t * 1e3:.2f}({t / base:.3f})"
                                          for t, nm in best), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
