"""Two builds of the batchnorm rows (``providers.cpu._kernels``) timed against each other
in one process, interleaved: the ratio B / A per case, for kernel changes whose effect is
smaller than the machine's drift between runs (on a shared 2-core machine the rows' memory
bandwidth moved 1.6x within a session).

Usage::

    git stash; python setup.py build_ext --inplace
    cp hipdnn_async/providers/cpu/_kernels*.so /tmp/a.so       # the build before
    git stash pop; python setup.py build_ext --inplace
    cp hipdnn_async/providers/cpu/_kernels*.so /tmp/b.so       # the build after
    python bench/bench_bn_rows_ab.py /tmp/a.so /tmp/b.so [--ops training,backward]
        (ops: training, training_relu, backward, backward_drelu: ReLU fused / undone)
        [--layouts last,first] [--rounds 16]

Activations are N(0, 1) (dy too), float32 and bfloat16, on ResNet-50's shapes (N x H x W x
C: 8 x 56 x 56 x 64, 32 x 56 x 56 x 64, 32 x 28 x 28 x 256, 32 x 14 x 14 x 512, 8 x 28 x
28 x 256), channels-last (NHWC) or packed channels-first (NCHW), on 64-byte boundaries.
Each round runs 3 calls of each build, the order alternating between rounds; prints each
build's best call in ms and B / A of the best and of the median calls.
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import time

import ml_dtypes
import numpy as np

from hipdnn_async.runtime import load_onednn

SHAPES = [((8, 56, 56, 64), "float32"), ((32, 56, 56, 64), "float32"),
          ((32, 28, 28, 256), "float32"), ((32, 14, 14, 512), "float32"),
          ((8, 28, 28, 256), "float32"), ((32, 28, 28, 256), "bfloat16"),
          ((32, 14, 14, 512), "bfloat16")]


def load(path):
    """The ``_kernels`` extension module built at ``path``, loaded under its own name."""
    name = "hipdnn_async.providers.cpu._kernels"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def aligned(shape, dtype):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = np.empty(n + 64, np.uint8)
    off = (-buf.ctypes.data) % 64
    return buf[off:off + n].view(dtype).reshape(shape)


def case(shape, dtype, layout, rng):
    """x, y, dy as (N, C, H, W) views of NHWC or NCHW memory, and the element kind."""
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    dims = shape if layout == "last" else (shape[0], shape[3], shape[1], shape[2])
    arrays = []
    for fill in (True, False, True):
        a = aligned(dims, dt)
        if fill:
            a[...] = rng.standard_normal(dims).astype(dt)
        arrays.append(np.moveaxis(a, -1, 1) if layout == "last" else a)
    raw = [a if dtype == "float32" else a.view(np.uint16) for a in arrays]
    return raw, 0 if dtype == "float32" else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the first build's _kernels .so")
    parser.add_argument("b", help="the second build's _kernels .so")
    parser.add_argument("--ops", default="training,backward")
    parser.add_argument("--layouts", default="last,first")
    parser.add_argument("--rounds", type=int, default=16)
    args = parser.parse_args(argv)
    load_onednn()
    mods = (load(args.a), load(args.b))
    rng = np.random.default_rng(0)
    for layout in args.layouts.split(","):
        for op in args.ops.split(","):
            for shape, dtype in SHAPES:
                (x, y, dy), kind = case(shape, dtype, layout, rng)
                c = shape[3]
                vec = lambda v: np.full(c, v, np.float32)  # noqa: E731
                if op.startswith("training"):
                    kw = dict(scale=vec(1.0), bias=vec(0.0), mean_out=vec(0.0),
                              variance_out=np.empty(c, np.float64), epsilon=1e-5)
                else:
                    kw = dict(dy=dy, scale=vec(1.2), mean=vec(0.01), inv_variance=vec(1.1),
                              dscale=vec(0.0), dbias=vec(0.0))
                if op in ("training_relu", "backward_drelu"):
                    kw.update(act=True, bias=vec(0.1))
                times = ([], [])
                for r in range(args.rounds):
                    for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                        m = mods[i]
                        code = (m.BN_ROWS_TRAINING if op.startswith("training")
                                else m.BN_ROWS_BACKWARD)
                        for _ in range(3):
                            t0 = time.perf_counter()
                            m.bn_rows(code, x, y, kind, **kw)
                            times[i].append(time.perf_counter() - t0)
                med = [sorted(t)[len(t) // 2] for t in times]
                best = [min(t) for t in times]
                print(f"{layout:5s} {op:14s} {'x'.join(map(str, shape)):12s} {dtype:8s} "
                      f"A {best[0] * 1e3:.3f} ms  B {best[1] * 1e3:.3f} ms  "
                      f"B/A best {best[1] / best[0]:.3f}  median {med[1] / med[0]:.3f}",
                      flush=True)


if __name__ == "__main__":
    main()
