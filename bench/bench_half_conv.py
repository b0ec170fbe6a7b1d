"""HALF (float16 I/O) against float32 convolutions on the CPU device's ONEDNN_ENGINE, timed
in one process, the two interleaved: the ratio float16 / float32 time per case (HALF
computes on float32 copies; the difference is the conversions in and out).

Usage::

    python bench/bench_half_conv.py [--batch 8] [--reps 15] [--layouts NCHW,NHWC]
                                    [--patterns fprop,dgrad,wgrad,conv_bias_relu]

Shape: 3x3 64 -> 64 at 56x56, padding 1 (ResNet-50's conv2_x). Prints the median of
``--reps`` interleaved rounds (each the best of 3 calls) per case, and the load average.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _bench_common import conv_graph  # noqa: E402


def _cbr_graph(hd, n, dtype, layout):
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="half_cbr", io_data_type=dtype, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(n, 64, 56, 56), layout=layout, name="x")
    w = g.tensor(dims=(64, 64, 3, 3), layout=layout, name="w")
    b = g.tensor(dims=(1, 64, 1, 1), name="b", data_type="float32")
    z = g.pointwise(g.conv_fprop(x, w, padding=1, stride=1), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g


def _array(dims, dtype, layout, rng):
    v = rng.standard_normal(dims).astype(np.float32) * 0.5
    if layout == "NHWC" and len(dims) == 4:
        return np.ascontiguousarray(v.transpose(0, 2, 3, 1), dtype).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(v, dtype)


def case(hd, dev, pattern, dtype, layout, n):
    rng = np.random.default_rng(0)
    direction = "fprop" if pattern == "conv_bias_relu" else pattern
    g, dims = conv_graph(hd, direction, n, (64, 56, 56), (64, 64, 3, 3), 1, 1, dtype, layout)
    if pattern == "conv_bias_relu":
        g = _cbr_graph(hd, n, dtype, layout)
    plan = dev.build_sync(g, engine="ONEDNN_ENGINE")
    np_dt = np.float16 if dtype == "float16" else np.float32
    arr = {r: _array(d, np_dt, layout, rng) for r, d in dims.items()}
    pack = {"fprop": {"x": arr["x"], "w": arr["w"], "y": arr["y"]},
            "dgrad": {"dy": arr["y"], "w": arr["w"], "dx": arr["x"]},
            "wgrad": {"dy": arr["y"], "x": arr["x"], "dw": arr["w"]}}[direction]
    if pattern == "conv_bias_relu":
        pack["b"] = np.full((1, 64, 1, 1), 0.1, np.float32)
    plan.execute_sync(pack)
    return plan, pack


def best_ms(plan, pack, calls=3):
    best = float("inf")
    for _ in range(calls):
        t = time.perf_counter()
        plan.execute_sync(pack)
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--layouts", default="NCHW,NHWC")
    ap.add_argument("--patterns", default="fprop,dgrad,wgrad,conv_bias_relu")
    args = ap.parse_args()
    import hipdnn_async as hd
    print(f"bench_half_conv: {hd.__file__}; batch {args.batch}; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    with hd.Device("cpu") as dev:
        for layout in args.layouts.split(","):
            for pattern in args.patterns.split(","):
                pair = {dt: case(hd, dev, pattern, dt, layout, args.batch)
                        for dt in ("float32", "float16")}
                times = {dt: [] for dt in pair}
                for _ in range(args.reps):
                    for dt, (plan, pack) in pair.items():
                        times[dt].append(best_ms(plan, pack))
                m = {dt: statistics.median(v) for dt, v in times.items()}
                print(f"{layout} {pattern:15s} float32 {m['float32']:7.2f} ms  float16 "
                      f"{m['float16']:7.2f} ms  ratio {m['float16'] / m['float32']:5.2f}  "
                      f"({pair['float16'][0].algorithm})", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
