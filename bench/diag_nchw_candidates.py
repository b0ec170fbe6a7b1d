"""NCHW convolutions on oneDNN: every candidate's benchmarking time against the default
choice (no benchmarking), in one run: whether the default ordering of
``providers/cpu/onednn/_conv.py`` (``prefers_blocked``) still picks the fastest, and what
channels-last copies (``+nhwc``: x reordered to NHWC and y back) would cost instead of
oneDNN's blocked layout (``+blocked``) or its GEMM on the plain layout.

Per line: shape, dtype, direction; the default's name and its time; the fastest and its
time (and its ratio to the default's); the five fastest, ms. Times are the library's own
benchmarking (``global.benchmarking = 1``: the best of up to 5 runs within 0.5 s each,
host work included), in a fresh perf db.

    python bench/diag_nchw_candidates.py [N] [shape,...] [float32,bfloat16]
"""
from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ["HIPDNN_ASYNC_PERFDB"] = os.path.join(tempfile.mkdtemp(), "perfdb.sqlite3")

import hipdnn_async as hd  # noqa: E402
from _bench_common import RESNET50_CONVS, conv_graph  # noqa: E402

SHAPES = ("res2 3x3", "res3 3x3", "res2 1x1 256>64", "res3 down 1x1/2")


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    shapes = sys.argv[2].split(",") if len(sys.argv) > 2 else SHAPES
    dtypes = sys.argv[3].split(",") if len(sys.argv) > 3 else ("float32", "bfloat16")
    convs = {c[0]: c for c in RESNET50_CONVS}
    with hd.Device("cpu") as dev:
        for name in shapes:
            _, cin, w, pad, stride = convs[name]
            for dt in dtypes:
                dtype = hd.DataType.FLOAT if dt == "float32" else hd.DataType.BFLOAT16
                for direction in ("fprop", "dgrad", "wgrad"):
                    args = (hd, direction, n, cin, w, pad, stride, dtype, "NCHW")
                    default = str(dev.build_sync(conv_graph(*args)[0]).algorithm)
                    tuned = dev.build_sync(conv_graph(*args)[0],
                                           knobs={"global.benchmarking": 1})
                    trials = sorted((ms, nm) for nm, ms in tuned.algorithm.trials
                                    if ms is not None)
                    ms_of = {nm: ms for ms, nm in trials}
                    d_ms, (b_ms, b_nm) = ms_of[default], trials[0]
                    print(f"{name:16s} {dt:8s} {direction:5s} default {default} {d_ms:.3f} | "
                          f"best {b_nm} {b_ms:.3f} ({b_ms / d_ms:.2f}) | "
                          + " ".join(f"{nm}={ms:.2f}" for ms, nm in trials[:5]),
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
