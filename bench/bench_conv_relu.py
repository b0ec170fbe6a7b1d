"""Conv + bias + ReLU on ONEDNN_ENGINE: the ReLU as the primitive's post-ops against the
same plan with the ReLU as a pass after it (the epilogue), and PyTorch, in the same run.

Builds each case of ``bench_cpu.py``'s ``conv_bias_relu`` pattern twice, oneDNN's
preferred implementation each time: ``fused`` (among the candidates computing the ReLU as
post-ops, named ``+relu``) and ``epilogue`` (among the others: the primitive, then
``providers.cpu._batchnorm.relu`` on y, the default build), and times both against PyTorch's ``F.conv2d``
with bias then ``relu_`` in alternating windows (fused, epilogue, torch, ...), garbage
collector off; per case the best call of each (ms) and the ratios fused / torch,
epilogue / torch and fused / epilogue; then geometric means.

    python bench/bench_conv_relu.py [--batch 8] [--reps 10] [--threads N] [--clock wall|cpu]
                                    [--configs float32:NHWC,...] [--shapes "res2 3x3",...]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _bench_common import RESNET50_CONVS, NoGc, geomean, table  # noqa: E402
from bench_cpu import CONFIGS, CONV_SHAPES, _configs, conv_case, our_threads  # noqa: E402


def _best_interleaved(fns, reps, warmup=3, clock=time.perf_counter):
    """Best time (ms, by ``clock``) of each of ``fns``, called in alternating windows."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    best = [float("inf")] * len(fns)
    with NoGc():
        for _ in range(reps):
            for i, fn in enumerate(fns):
                t0 = clock()
                fn()
                best[i] = min(best[i], (clock() - t0) * 1e3)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--configs", type=_configs, default=CONFIGS)
    p.add_argument("--shapes", default=",".join(CONV_SHAPES))
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: time.perf_counter; cpu: time.process_time, this process's CPU "
                        "time over all its threads (with --threads 1, the work done, less "
                        "disturbed by other processes on a loaded machine)")
    args = p.parse_args(argv)
    import torch

    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _conv
    threads = our_threads(args.threads)
    torch.set_num_threads(threads)
    convs = {s[0]: s for s in RESNET50_CONVS}
    print(f"bench_conv_relu: batch {args.batch}, reps {args.reps}, threads {threads}, "
          f"clock {args.clock}, "
          f"load average {os.getloadavg()}")
    rows, fused_r, epi_r = [], [], []
    every = _conv.Conv.candidates

    def build(dev, dtype, layout, name, fused):
        """The case with only the ``+relu`` candidates (fused) or only the others, each
        in oneDNN's order: the plan is the heuristic's pick among them."""
        _conv.Conv.candidates = lambda self: [c for c in every(self)
                                              if c.name.endswith("+relu") == fused]
        try:
            return conv_case(hd, torch, dev, "ONEDNN_ENGINE", args.batch, convs[name],
                             "conv_bias_relu", dtype, layout)
        finally:
            _conv.Conv.candidates = every

    for dtype, layout in args.configs:
        for name in args.shapes.split(","):
            with hd.Device("cpu") as dev_f, hd.Device("cpu") as dev_e:
                fused = build(dev_f, dtype, layout, name, True)
                epi = build(dev_e, dtype, layout, name, False)
                clock = time.perf_counter if args.clock == "wall" else time.process_time
                tf, te, tt = _best_interleaved([fused.ours, epi.ours, fused.theirs], args.reps,
                                               clock=clock)
            fused_r.append(tf / tt)
            epi_r.append(te / tt)
            rows.append((name, dtype, layout, f"{tf:.3f}", f"{te:.3f}", f"{tt:.3f}",
                         f"{tf / tt:.3f}", f"{te / tt:.3f}", f"{tf / te:.3f}",
                         str(fused.plan.algorithm), str(epi.plan.algorithm)))
    table(rows, ("shape", "dtype", "layout", "fused ms", "epilogue ms", "torch ms",
                       "fused/torch", "epilogue/torch", "fused/epilogue", "fused plan",
                       "epilogue plan"))
    print(f"geometric mean: fused/torch {geomean(fused_r):.3f}, epilogue/torch "
          f"{geomean(epi_r):.3f}; load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
