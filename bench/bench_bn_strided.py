"""Batchnorm on non-packed activations on the CPU device against PyTorch's CPU path on the
same strided tensors, timed in one process, the two interleaved: the ratio ours / PyTorch
per case.

Usage::

    python bench/bench_bn_strided.py [--batch 32] [--reps 6] [--dtypes float32,bfloat16]

Activations are ResNet-50's 256 x 28 x 28 at batch N, cut from a wider buffer: NCHW cropped
in W (28 of 32 columns: no channel's values are one packed run, so the rows run on dense
workspace copies, ``+dense``), NHWC a channel slice (256 of 320 channels: the
channels-last rows read it in place), and NWHC (channels-last with H and W swapped: the
rows on channels-last copies). Patterns: training (``native_batch_norm``, training True),
inference (the same, training False, running statistics) and backward
(``native_batch_norm_backward``). Prints the best and median of
``--reps`` interleaved rounds of 5 calls a side, the relative L2 distance of our y (dx)
from PyTorch's, and the load average.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

C, H, W = 256, 28, 28


def _wide(layout, n, dtype, seed):
    """(full buffer, the (N, C, H, W) view cut from it) for ``layout``."""
    rng = np.random.default_rng(seed)
    if layout == "NCHW":
        buf = rng.standard_normal((n, C, H, W + 4)).astype(dtype)
        return buf, buf[..., :W]
    if layout == "NWHC":
        buf = rng.standard_normal((n, W, H, C)).astype(dtype)
        return buf, buf.transpose(0, 3, 2, 1)
    buf = rng.standard_normal((n, H, W, C + 64)).astype(dtype)
    return buf, buf[..., :C].transpose(0, 3, 1, 2)


def case(hd, torch, dev, n, pattern, dtype, layout):
    """(plan, our call, PyTorch's call, our output y / dx)."""
    import ml_dtypes
    np_dtype = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    t_dtype = torch.float32 if dtype == "float32" else torch.bfloat16
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name=f"bn_{pattern}", io_data_type=dtype, intermediate_data_type=f32,
                 compute_data_type=f32)
    buf, xa = _wide(layout, n, np_dtype, 0)
    strides = tuple(s // xa.itemsize for s in xa.strides)
    x = g.tensor(dims=xa.shape, strides=strides, name="x")

    def chan(name):
        return g.tensor(dims=(1, C, 1, 1), name=name, data_type="float32")

    def torch_view(a, b):
        # the same view of a torch tensor over the same buffer (bfloat16 through its bits)
        whole = torch.from_numpy(b.view(np.uint16)).view(t_dtype) if dtype != "float32" \
            else torch.from_numpy(b)
        if layout == "NWHC":
            return whole.permute(0, 3, 2, 1)
        return whole[..., :W] if layout == "NCHW" else whole[..., :C].permute(0, 3, 1, 2)

    one = np.ones((1, C, 1, 1), np.float32)
    ot, zt = torch.ones(C), torch.zeros(C)
    xt = torch_view(xa, buf)
    if pattern == "bn_train":
        y, mean, inv, _, _ = g.batchnorm(x, chan("scale"), chan("bias"), epsilon=1e-5)
        _, ya = _wide(layout, n, np_dtype, 1)
        y.set_output(True).set_strides(strides)
        for t in (mean, inv):
            t.set_output(True).set_data_type("float32")
        plan = dev.build_sync(g)
        names = {t.name: t for t in g.tensors}
        pack = {names["scale"]: one, names["bias"]: one * 0, y: ya, x: xa,
                mean: np.empty_like(one), inv: np.empty_like(one)}

        def theirs():
            return torch.ops.aten.native_batch_norm(xt, ot, zt, None, None, True, 0.1, 1e-5)
    elif pattern == "bn_infer":
        y = g.batchnorm_inference_variance_ext(x, chan("mean"), chan("variance"), chan("scale"),
                                               chan("bias"), epsilon=1e-5)
        _, ya = _wide(layout, n, np_dtype, 1)
        y.set_output(True).set_strides(strides)
        plan = dev.build_sync(g)
        names = {t.name: t for t in g.tensors}
        pack = {x: xa, y: ya, names["mean"]: one * 0, names["variance"]: one,
                names["scale"]: one, names["bias"]: one * 0}

        def theirs():
            return torch.ops.aten.native_batch_norm(xt, ot, zt, zt, ot, False, 0.1, 1e-5)
    else:
        dy = g.tensor(dims=xa.shape, strides=strides, name="dy")
        dx, ds, db = g.batchnorm_backward(dy, x, chan("scale"), mean=chan("mean"),
                                          inv_variance=chan("inv_variance"))
        dx.set_output(True).set_strides(strides)
        for t in (ds, db):
            t.set_output(True).set_data_type("float32")
        plan = dev.build_sync(g)
        names = {t.name: t for t in g.tensors}
        gbuf, dya = _wide(layout, n, np_dtype, 2)
        _, dxa = _wide(layout, n, np_dtype, 3)
        pack = {x: xa, dy: dya, dx: dxa, names["scale"]: one, names["mean"]: one * 0,
                names["inv_variance"]: one, ds: np.empty_like(one), db: np.empty_like(one)}
        dyt = torch_view(dya, gbuf)

        def theirs():
            return torch.ops.aten.native_batch_norm_backward(
                dyt, xt, ot, None, None, zt, ot, True, 1e-5, [True, True, True])
    out = dxa if pattern == "bn_backward" else ya
    return plan, (lambda: plan.execute_sync(pack)), theirs, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=6, help="interleaved rounds (default 6)")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    args = ap.parse_args(argv)
    import torch
    import hipdnn_async as hd
    dev = hd.Device("cpu")
    torch.set_num_threads(len(os.sched_getaffinity(0)))   # the cores our plans use
    print(f"threads {torch.get_num_threads()}, batch {args.batch}, {C}x{H}x{W}")
    print(f"{'pattern':<12}{'dtype':<10}{'layout':<7}{'algorithm':<26}"
          f"{'ours ms':>9}{'torch ms':>10}{'ratio':>7}{'median ratio':>14}{'rel L2':>9}")
    for dtype in args.dtypes.split(","):
        for layout in ("NCHW", "NHWC", "NWHC"):
            for pattern in ("bn_train", "bn_infer", "bn_backward"):
                plan, ours, theirs, out = case(hd, torch, dev, args.batch, pattern, dtype, layout)
                for fn in (ours, theirs):
                    for _ in range(3):
                        fn()
                t = {"ours": [], "torch": []}
                for _ in range(args.reps):
                    for key, fn in (("ours", ours), ("torch", theirs)):
                        for _ in range(5):
                            t0 = time.perf_counter()
                            fn()
                            t[key].append((time.perf_counter() - t0) * 1e3)
                got = np.asarray(out, np.float64)
                want = theirs()[0].double().numpy()
                rel = np.linalg.norm(got - want) / np.linalg.norm(want)
                best = {k: min(v) for k, v in t.items()}
                med = {k: float(np.median(v)) for k, v in t.items()}
                print(f"{pattern:<12}{dtype:<10}{layout:<7}{str(plan.algorithm):<26}"
                      f"{best['ours']:>9.3f}{best['torch']:>10.3f}"
                      f"{best['ours'] / best['torch']:>7.3f}{med['ours'] / med['torch']:>14.3f}"
                      f"{rel:>9.1e}")
    print("load average", tuple(round(v, 2) for v in os.getloadavg()))


if __name__ == "__main__":
    main()
