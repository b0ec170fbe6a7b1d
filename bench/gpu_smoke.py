"""Quick GPU cross-check: every pattern builder of tests/oracle/test_patterns.py on a GPU
device, against the same float64 references, with symmetric convolution padding (cuDNN's
legacy API takes no other). Prints one line per case and exits non-zero on any failure.

    python bench/gpu_smoke.py [--device cuda:0]
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import hipdnn_async as hd  # noqa: E402
from tests.oracle import test_patterns as tp  # noqa: E402
from tests.oracle._cases import Harness, assert_close  # noqa: E402

tp.CONV = {
    4: dict(x=(2, 4, 7, 6), w=(5, 4, 3, 3), pre=(1, 1), post=(1, 1), stride=(2, 1), dilation=(1, 2)),
    5: dict(x=(1, 3, 5, 4, 5), w=(4, 3, 3, 2, 3), pre=(1, 0, 1), post=(1, 0, 1), stride=(1, 2, 1),
            dilation=(1, 1, 2)),
}
BUILDERS = [n for n in dir(tp) if n.startswith("build_")]


def stage(dev, buf):
    strides = tuple(s // buf.itemsize for s in buf.strides)
    arr = dev.empty(buf.shape, buf.dtype, strides=strides)
    arr.copy_from(buf)
    return arr


def run_case(dev, name, dtype, layout):
    rng = np.random.default_rng(0)
    h = Harness(dtype, layout)
    rank = 5 if layout.startswith("NCD") or layout.startswith("NDH") else 4
    checks = getattr(tp, name)(h, rank, rng)
    for out, t in h.outputs.items():
        dt = {hd.DataType.FLOAT: np.float32, hd.DataType.HALF: np.float16}.get(t.data_type)
        if dt is None:
            import ml_dtypes
            dt = ml_dtypes.bfloat16
        h.pack[out] = np.full(t.dims, np.nan, dt)
        if tuple(t.strides) != tuple(s // h.pack[out].itemsize for s in h.pack[out].strides):
            from tests.oracle._cases import alloc
            h.pack[out] = alloc(t.dims, t.strides, dt)
    plan = dev.build_sync(h.g)
    pack = {k: stage(dev, v) for k, v in h.pack.items()}
    plan.execute_sync(pack)
    worst = 0.0
    for out, want, (atol, rtol) in checks:
        got = pack[out].to_numpy_sync().astype(np.float64)
        assert_close(got, want, atol, rtol, what=f"{name} {dtype} {layout} {out}")
        worst = max(worst, float(np.max(np.abs(got - want))))
    return plan, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    failures = 0
    with hd.Device(args.device) as dev:
        print("device", dev.spec, hd.devices())
        for name in BUILDERS:
            for dtype in ("float32", "float16", "bfloat16"):
                for layout in ("NCHW", "NHWC", "NCDHW"):
                    try:
                        plan, worst = run_case(dev, name, dtype, layout)
                        print(f"ok   {name:40s} {dtype:9s} {layout:6s} algo={plan.algorithm} "
                              f"ws={plan.workspace_size} maxabs={worst:.3g}", flush=True)
                    except hd.NotSupportedError as exc:
                        print(f"nosup {name:40s} {dtype:9s} {layout:6s} {exc}", flush=True)
                    except Exception as exc:  # noqa: BLE001
                        failures += 1
                        print(f"FAIL {name:40s} {dtype:9s} {layout:6s} {type(exc).__name__}: "
                              f"{str(exc)[:400]}", flush=True)
                        if failures < 4:
                            traceback.print_exc()
    print("failures:", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
