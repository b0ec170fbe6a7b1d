"""CPU benchmarks of hipdnn_async against PyTorch's CPU path, measured in the same run.

Every case times our ``plan.execute_sync`` (built with ``--engine``, default: the
device's own choice) against the PyTorch eager calls a user would write for the same
work, on the same cores (``torch.set_num_threads`` set to our thread count, and checked):

- convolutions, ResNet-50 shapes at batch N (3x3 64>64 @56, 1x1 256>64 @56, 3x3 128>128
  @28, 3x3 256>256 @14, the 7x7/2 stem 3>64 @224, the strided 1x1/2 256>512 @56): fprop
  (``F.conv2d``), dgrad and wgrad (``torch.ops.aten.convolution_backward``, the call
  autograd makes), conv + bias + ReLU (``F.conv2d`` with bias, then in-place ``relu_``);
- batchnorm on ResNet-50 activations (C x H x W 64x56x56, 256x28x28, 512x14x14): training
  with running statistics (``torch.ops.aten.native_batch_norm``), training + ReLU (the same
  + ``relu_``), inference with running statistics (``native_batch_norm``, training False),
  backward (``native_batch_norm_backward``), inference -> DReLU -> backward
  (``native_batch_norm``, ``threshold_backward``, ``native_batch_norm_backward``);

each in FLOAT and BFLOAT16, NHWC and NCHW. Anchors measured in the same run: fp32 and
bf16 GEMM rates (``torch.matmul`` 2048^3, or (n/2^k)^3 where one call would take over
``GEMM_BUDGET_MS``) and copy bandwidth (``Tensor.copy_`` of 64 MiB,
read + write bytes). Per case: ours ms, torch ms, ratio (ours / torch), GFLOP/s (2 N K P
Q C/g R S per convolution) or GB/s (passes over x: BN_PASSES) and its % of the anchor,
and the relative L2 difference of the two outputs; then geometric means (all, per dtype,
per family) and the issue's targets (every case <= 1.0x, geometric mean <= 0.8x, FP32 3x3
>= 80 % and BF16 3x3 >= 70 % of the GEMM rate, batchnorm >= 70 % of the copy bandwidth).

Timing: one warm-up of each side before anything is timed (the first primitive in a
process runs ~50 % slow), then per case ``--warmup`` calls each and ``--reps`` timed calls
each in alternating windows (ours, torch, ours, ...), garbage collector off; where
``--reps`` calls take less than ``--min-ms``, more (up to MAX_REPS, in up to MAX_WINDOWS
windows), so that a millisecond batchnorm gets as many samples as its noisy memory bus
needs; the figure is the best call (the median goes to ``--json`` too, and the calls
column says how many each side had). Every buffer of both sides starts on a 64-byte
boundary, as torch's allocator and ``Device.empty`` place theirs (a NumPy array's
16-byte start cost a 1x1 convolution 8 % on NHWC memory).

Why, for each case above 1.0x (best-of ratio, as the verdict counts): after the timing,
the torch call runs once more under ``torch.backends.mkldnn.verbose``, file descriptor 1
caught (oneDNN prints from C), for PyTorch's oneDNN implementation (``torch_algorithm``;
"aten" for batchnorm, ATen's own kernel; None and ``torch_algorithm_reason`` where no
oneDNN convolution ran) and its reorders in the call (``torch_reorders``). The reason
compares kernels: ours less our variant suffixes (the parts without ``:``: ``+blocked``,
``+nhwc``, ``+guarded``), of a name ``outer+inner`` (backward data through the forward
kernel) the inner one, which does the work, and in oneDNN 3.5's spelling (ours is 3.2,
torch 2.13 bundles 3.12; 3.5 renamed ``brgconv`` to ``brg_conv_fwd`` and ``brg_fwd`` to
``brg_conv_bwd``). Equal: "same kernel as PyTorch" (the same implementation, its code
possibly changed between the versions); else "different kernel: ours X, PyTorch Y", with
"(not among the N our oneDNN offers here)" where no candidate of our plan
(``plan.algorithm.trials``, in ``candidates``) is PyTorch's kernel;
batchnorm: "our C rows vs PyTorch's ATen kernel". Each ends "median <= 1.0x: within
the run's spread" where the median ratio is at most 1.0x (the best calls differ, the
typical ones do not), else "median above 1.0x too", which the verdict also counts.

    python bench/bench_cpu.py [--engine ONEDNN_ENGINE|CPU_ENGINE] [--batch 8] [--quick]
                              [--reps 10] [--min-ms 200] [--threads N]
                              [--configs float32:NHWC,...] [--patterns fprop,...]
                              [--gemm-n 2048] [--json PATH]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import platform
import sys
import tempfile
import time

import numpy as np

try:
    import resource         # POSIX: minor_faults
except ImportError:
    resource = None

from _bench_common import (RESNET50_CONVS, NoGc, bn_gbps, conv_flops, conv_graph, f,  # noqa: E402
                           geomean, median, pct_of, ratio, table)

CONV_SHAPES = ("res2 3x3", "res2 1x1 256>64", "res3 3x3", "res4 3x3", "conv1 7x7/2",
               "res3 down 1x1/2")
BN_SHAPES = ((64, 56, 56), (256, 28, 28), (512, 14, 14))
CONV_PATTERNS = ("fprop", "dgrad", "wgrad", "conv_bias_relu")
BN_PATTERNS = ("bn_train", "bn_train_relu", "bn_infer", "bn_backward", "bn_infer_drelu_bwd")
CONFIGS = (("float32", "NHWC"), ("float32", "NCHW"), ("bfloat16", "NHWC"), ("bfloat16", "NCHW"))
# --quick: one 3x3, the strided 1x1 and the 256x28x28 batchnorm
QUICK_CONV_SHAPES = ("res3 3x3", "res3 down 1x1/2")
QUICK_BN_SHAPES = ((256, 28, 28),)

# Minimum traffic of a batchnorm, in passes over x (read or write of an x-sized tensor;
# per-channel tensors are negligible): training reads x for the statistics, again to
# normalise, and writes y (3); inference reads x, writes y (2); backward reads x and dy for
# dscale / dbias, again for dx, and writes dx (5); inference -> DReLU -> backward the same
# as backward (z is recomputed from x, never stored).
BN_PASSES = {"bn_train": 3, "bn_train_relu": 3, "bn_infer": 2, "bn_backward": 5,
             "bn_infer_drelu_bwd": 5}
BN_EPS, BN_MOMENTUM = 1e-5, 0.1

# issue 24, "How it is checked"
TARGET_RATIO, TARGET_GEOMEAN = 1.0, 0.8
TARGET_GEMM = {"float32": 80.0, "bfloat16": 70.0}   # % of the GEMM rate, 3x3 convolutions
TARGET_COPY = 70.0                                   # % of the copy bandwidth, batchnorm

WINDOWS = 3
MAX_WINDOWS = 10
MAX_REPS = 100     # timed calls per side at most, however short a call
ANCHOR_GEMM_N = 2048
ANCHOR_COPY_BYTES = 64 << 20


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"need an int >= 1; got {value}")
    return value


def _milliseconds(text):
    value = float(text)
    if not 0.0 <= value < math.inf:     # also NaN; inf would ask for infinitely many calls
        raise argparse.ArgumentTypeError(f"need a finite number of ms >= 0; got {text}")
    return value


def _configs(text):
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        dtype, _, layout = item.partition(":")
        if (dtype, layout) not in CONFIGS:
            raise argparse.ArgumentTypeError(
                f"unknown config {item!r}; choose from "
                + ",".join(f"{d}:{lay}" for d, lay in CONFIGS))
        out.append((dtype, layout))
    if not out:
        raise argparse.ArgumentTypeError("no config given")
    return tuple(out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--engine", default=None, help="engine name to build with (ONEDNN_ENGINE, "
                   "CPU_ENGINE); default: the device's own choice")
    p.add_argument("--batch", type=_positive, default=8, help="batch N (default 8)")
    p.add_argument("--reps", type=_positive, default=10, help="timed calls per side (default 10)")
    p.add_argument("--warmup", type=_positive, default=3, help="untimed calls per side first")
    p.add_argument("--min-ms", type=_milliseconds, default=200.0,
                   help="time each side for about this long where --reps calls are shorter "
                        f"(at most {MAX_REPS} calls; default 200; 0: exactly --reps)")
    p.add_argument("--threads", type=_positive, default=None,
                   help="threads of both sides (default: the cores this process may use)")
    p.add_argument("--quick", action="store_true", help="a subset: convolutions "
                   + ", ".join(QUICK_CONV_SHAPES) + "; batchnorm "
                   + ", ".join("x".join(map(str, s)) for s in QUICK_BN_SHAPES))
    p.add_argument("--configs", type=_configs, default=CONFIGS,
                   help="comma-separated dtype:layout pairs (default all four)")
    p.add_argument("--patterns", default=None, help="comma-separated subset of "
                   + ",".join(CONV_PATTERNS + BN_PATTERNS))
    p.add_argument("--gemm-n", type=_positive, default=ANCHOR_GEMM_N,
                   help=f"size n of the n^3 GEMM anchors (default {ANCHOR_GEMM_N})")
    p.add_argument("--json", metavar="PATH", help="write every figure here")
    args = p.parse_args(argv)
    known = CONV_PATTERNS + BN_PATTERNS
    args.patterns = known if args.patterns is None else tuple(
        t.strip() for t in args.patterns.split(",") if t.strip())
    bad = [t for t in args.patterns if t not in known]
    if bad or not args.patterns:
        p.error(f"--patterns: unknown {bad or args.patterns!r}; choose from {','.join(known)}")
    return args


# =======================================================================================
# buffers: the same values for both sides, in the case's dtype and layout

def our_threads(threads=None):
    """Threads our engines use: ``threads``, else OMP_NUM_THREADS, else this process's
    cores (oneDNN's OpenMP team and NumPy's BLAS both default to the cores available)."""
    if threads:
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class Buffers:
    """Paired buffers: a NumPy logical view for our plan, a torch tensor for PyTorch, the
    same values (drawn in float32, rounded once to the case's dtype)."""

    def __init__(self, torch, dtype, layout, seed=0):
        import ml_dtypes
        self.torch, self.layout = torch, layout
        self.np_dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[dtype]
        self.t_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
        self.rng = np.random.default_rng(seed)

    def pair(self, dims, scale=1.0, fill=None, per_channel=False):
        """(numpy logical view, torch tensor) of dims; NaN-free; per-channel tensors are
        FLOAT (1, C, 1, 1) for us and FLOAT (C,) for torch."""
        torch = self.torch
        if per_channel:
            v = (np.full(dims, fill, np.float32) if fill is not None
                 else self.rng.uniform(0.5, 1.5, dims).astype(np.float32))
            return v.reshape(1, -1, 1, 1), torch.from_numpy(v.copy())
        v = (np.full(dims, fill, np.float32) if fill is not None
             else (self.rng.standard_normal(dims) * scale).astype(np.float32))
        t = torch.from_numpy(v).to(self.t_dtype)
        # both sides' buffers on 64-byte boundaries: torch's allocator aligns its own
        # (clone), NumPy's start at 16 bytes (aligned_copy), which costs oneDNN's kernels
        # up to 8 % on either side
        if self.layout == "NHWC":
            t = t.contiguous(memory_format=torch.channels_last).clone(
                memory_format=torch.channels_last)
            return aligned_copy(v.transpose(0, 2, 3, 1), self.np_dtype).transpose(0, 3, 1, 2), t
        return aligned_copy(v, self.np_dtype), t.contiguous().clone()

    def empty(self, dims):
        """A NaN-filled output of ours."""
        return self.pair(dims, fill=float("nan"))[0]


def aligned_copy(a, dtype):
    """A C-contiguous copy of ``a`` in ``dtype`` in ``Device.empty``'s memory: on a 64-byte
    boundary (as a torch tensor is too), and from 2 MiB up on huge pages where the kernel
    gives them (``runtime._buffer.aligned_empty``; PyTorch's allocator does so only with
    ``THP_MEM_ALLOC_ENABLE=1``, which this benchmark does not set)."""
    from hipdnn_async.runtime._buffer import aligned_empty
    out = aligned_empty(a.size * np.dtype(dtype).itemsize,
                        huge_pages=True).view(dtype).reshape(a.shape)
    out[...] = a
    return out


def _norm(a):
    """||a|| without BLAS: NumPy's BLAS (np.linalg.norm's dot) leaves its threads spinning
    for about 0.1 s, which the next case's first timed calls would share the cores with."""
    return math.sqrt(float(np.sum(np.square(a))))


def rel_l2(ours, theirs):
    """||ours - theirs|| / ||theirs|| in float64 (NaN anywhere gives inf)."""
    a = np.asarray(ours, dtype=np.float64)
    b = theirs.detach().double().numpy() if hasattr(theirs, "detach") else np.asarray(
        theirs, np.float64)
    a = a.reshape(b.shape)
    if not np.isfinite(a).all():
        return math.inf
    den = _norm(b)
    return float(_norm(a - b) / den) if den else float(_norm(a))


# =======================================================================================
# cases: (our plan + variant pack, torch call, work) per pattern

class Case:
    """One timed comparison: ``ours()`` runs our plan, ``theirs()`` torch's calls and
    returns the tensor compared with ``out`` (our output array)."""

    def __init__(self, family, shape, pattern, dtype, layout, plan, pack, theirs, out,
                 flops=None, nbytes=None):
        self.family, self.shape, self.pattern = family, shape, pattern
        self.dtype, self.layout = dtype, layout
        self.plan, self.pack, self.theirs, self.out = plan, pack, theirs, out
        self.flops, self.nbytes = flops, nbytes

    def ours(self):
        self.plan.execute_sync(self.pack)


def conv_case(hd, torch, dev, engine, n, spec, pattern, dtype, layout, knobs=None):
    name, cin, w_dims, pad, stride = spec
    F = torch.nn.functional
    direction = "fprop" if pattern == "conv_bias_relu" else pattern
    g, dims = conv_graph(hd, direction, n, cin, w_dims, pad, stride, dtype, layout)
    bufs = Buffers(torch, dtype, layout, seed=len(name))
    k = w_dims[0]
    if pattern == "conv_bias_relu":
        g = _cbr_graph(hd, n, cin, w_dims, pad, stride, dtype, layout)
    plan = dev.build_sync(g, engine=engine, knobs=knobs)
    st, pd = [stride] * 2, [pad] * 2
    if direction == "fprop":
        x, xt = bufs.pair(dims["x"])
        w, wt = bufs.pair(dims["w"], scale=0.1)
        y = bufs.empty(dims["y"])
        pack = {"x": x, "w": w, "y": y}
        if pattern == "conv_bias_relu":
            b, bt = bufs.pair((k,), per_channel=True)
            pack["b"] = b
            bt = bt.to(bufs.t_dtype)

            def theirs():
                return F.conv2d(xt, wt, bt, stride, pad).relu_()
        else:
            def theirs():
                return F.conv2d(xt, wt, None, stride, pad)
        out = y
    elif direction == "dgrad":
        dy, dyt = bufs.pair(dims["y"])
        w, wt = bufs.pair(dims["w"], scale=0.1)
        xt = torch.empty(0, dtype=bufs.t_dtype).new_empty(dims["x"])   # shape only
        if layout == "NHWC":
            xt = xt.contiguous(memory_format=torch.channels_last)
        out = bufs.empty(dims["x"])
        pack = {"dy": dy, "w": w, "dx": out}

        def theirs():
            return torch.ops.aten.convolution_backward(
                dyt, xt, wt, None, st, pd, [1, 1], False, [0, 0], 1, [True, False, False])[0]
    else:
        dy, dyt = bufs.pair(dims["y"], scale=0.1)
        x, xt = bufs.pair(dims["x"])
        wt = torch.empty(0, dtype=bufs.t_dtype).new_empty(w_dims)   # shape only
        if layout == "NHWC":
            wt = wt.contiguous(memory_format=torch.channels_last)
        out = bufs.empty(w_dims)
        pack = {"dy": dy, "x": x, "dw": out}

        def theirs():
            return torch.ops.aten.convolution_backward(
                dyt, xt, wt, None, st, pd, [1, 1], False, [0, 0], 1, [False, True, False])[1]
    return Case("conv", name, pattern, dtype, layout, plan, pack, theirs, out,
                flops=conv_flops(n, cin, w_dims, pad, stride))


def _cbr_graph(hd, n, cin, w_dims, pad, stride, dtype, layout):
    """conv_fprop -> ADD bias (FLOAT (1, K, 1, 1)) -> RELU_FWD; names x, w, b, y."""
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="bench_cbr", io_data_type=dtype, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(n,) + tuple(cin), layout=layout, name="x")
    w = g.tensor(dims=w_dims, layout=layout, name="w")
    b = g.tensor(dims=(1, w_dims[0], 1, 1), name="b", data_type="float32")
    z = g.pointwise(g.conv_fprop(x, w, padding=pad, stride=stride), b,
                    mode=hd.PointwiseMode.ADD)
    g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g


def _bn_graph(hd, pattern, dims, dtype, layout):
    """The graph of one batchnorm pattern; per-channel tensors FLOAT (1, C, 1, 1)."""
    f32 = hd.DataType.FLOAT
    c = dims[1]
    g = hd.Graph(name=f"bench_{pattern}", io_data_type=dtype, intermediate_data_type=f32,
                 compute_data_type=f32)

    def chan(name):
        return g.tensor(dims=(1, c, 1, 1), name=name, data_type="float32")

    def out(t, name, per_channel=False):
        t.set_output(True).set_name(name)
        if per_channel:
            t.set_data_type("float32")

    x = g.tensor(dims=dims, layout=layout, name="x")
    if pattern in ("bn_train", "bn_train_relu"):
        y, mean, inv, nrm, nrv = g.batchnorm(
            x, chan("scale"), chan("bias"), epsilon=BN_EPS, momentum=BN_MOMENTUM,
            prev_running_mean=chan("rm"), prev_running_variance=chan("rv"))
        if pattern == "bn_train_relu":
            y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
        out(y, "y")
        for t, name in ((mean, "mean"), (inv, "inv_variance"), (nrm, "nrm"), (nrv, "nrv")):
            out(t, name, True)
    elif pattern == "bn_infer":
        out(g.batchnorm_inference_variance_ext(x, chan("rm"), chan("rv"), chan("scale"),
                                               chan("bias"), epsilon=BN_EPS), "y")
    else:
        dy = g.tensor(dims=dims, layout=layout, name="dy")
        mean, inv, scale = chan("mean"), chan("inv_variance"), chan("scale")
        if pattern == "bn_infer_drelu_bwd":
            z = g.batchnorm_inference(x, mean, inv, scale, chan("bias"))
            dy = g.pointwise(z, dy, mode=hd.PointwiseMode.RELU_BWD)
        dx, dscale, dbias = g.batchnorm_backward(dy, x, scale, mean=mean, inv_variance=inv)
        out(dx, "dx")
        out(dscale, "dscale", True)
        out(dbias, "dbias", True)
    return g


def bn_case(hd, torch, dev, engine, n, chw, pattern, dtype, layout):
    aten = torch.ops.aten
    dims = (n,) + tuple(chw)
    c = chw[0]
    bufs = Buffers(torch, dtype, layout, seed=c)
    plan = dev.build_sync(_bn_graph(hd, pattern, dims, dtype, layout), engine=engine)
    x, xt = bufs.pair(dims, scale=2.0)
    scale, st = bufs.pair((c,), per_channel=True)
    bias, bt = bufs.pair((c,), per_channel=True)
    rm, rmt = bufs.pair((c,), fill=0.1, per_channel=True)
    rv, rvt = bufs.pair((c,), per_channel=True)
    chan_nan = np.full((1, c, 1, 1), np.nan, np.float32)
    if pattern in ("bn_train", "bn_train_relu"):
        y = bufs.empty(dims)
        pack = {"x": x, "scale": scale, "bias": bias, "rm": rm, "rv": rv, "y": y,
                "mean": chan_nan, "inv_variance": chan_nan.copy(), "nrm": rm.copy(),
                "nrv": rv.copy()}
        relu = pattern == "bn_train_relu"

        def theirs():
            out = aten.native_batch_norm(xt, st, bt, rmt, rvt, True, BN_MOMENTUM, BN_EPS)[0]
            return out.relu_() if relu else out
        # running statistics drift over the timed calls on both sides alike
        out = y
    elif pattern == "bn_infer":
        y = bufs.empty(dims)
        pack = {"x": x, "rm": rm, "rv": rv, "scale": scale, "bias": bias, "y": y}

        def theirs():
            return aten.native_batch_norm(xt, st, bt, rmt, rvt, False, BN_MOMENTUM, BN_EPS)[0]
        out = y
    else:
        dy, dyt = bufs.pair(dims)
        xv = np.asarray(x, np.float64)
        mean_v = xv.mean(axis=(0, 2, 3)).astype(np.float32)
        inv_v = (1.0 / np.sqrt(xv.var(axis=(0, 2, 3)) + BN_EPS)).astype(np.float32)
        mean_t, inv_t = torch.from_numpy(mean_v.copy()), torch.from_numpy(inv_v.copy())
        dx = bufs.empty(dims)
        pack = {"x": x, "dy": dy, "scale": scale, "mean": mean_v.reshape(1, c, 1, 1),
                "inv_variance": inv_v.reshape(1, c, 1, 1), "dx": dx, "dscale": chan_nan,
                "dbias": chan_nan.copy()}
        mask = [True, True, True]
        if pattern == "bn_infer_drelu_bwd":
            pack["bias"] = bias
            var_t = 1.0 / inv_t ** 2 - BN_EPS   # the running variance giving inv_variance

            def theirs():
                z = aten.native_batch_norm(xt, st, bt, mean_t, var_t, False, 0.0, BN_EPS)[0]
                g = aten.threshold_backward(dyt, z, 0)
                return aten.native_batch_norm_backward(g, xt, st, None, None, mean_t, inv_t,
                                                       True, BN_EPS, mask)[0]
        else:
            def theirs():
                return aten.native_batch_norm_backward(dyt, xt, st, None, None, mean_t, inv_t,
                                                       True, BN_EPS, mask)[0]
        out = dx
    nbytes = int(np.prod(dims)) * np.dtype(bufs.np_dtype).itemsize
    return Case("bn", "x".join(map(str, chw)), pattern, dtype, layout, plan, pack, theirs,
                out, nbytes=BN_PASSES[pattern] * nbytes)


# =======================================================================================
# timing

def time_pair(ours, theirs, reps, warmup, min_ms=0.0):
    """{"ours": (best ms, median ms, calls, minor page faults per call), "torch": (...)}
    (faults None where ``minor_faults`` cannot count them): warm-up calls of each, then
    timed calls of each in alternating windows, garbage collector off: ``reps`` calls, or
    more where one call is short, until each side has run about ``min_ms`` (at most
    MAX_REPS calls; a millisecond batchnorm is as noisy as its memory bus, and 3 samples
    of it say little). Windows: WINDOWS, or one per 5 calls, up to MAX_WINDOWS, never
    more than the calls; the calls are split among them exactly."""
    per_call = 0.0
    for fn in (ours, theirs):
        for _ in range(warmup):
            t0 = time.perf_counter()
            fn()
            last = (time.perf_counter() - t0) * 1e3
        per_call = max(per_call, last)
    if min_ms > 0 and per_call > 0:
        reps = max(reps, min(MAX_REPS, math.ceil(min_ms / per_call)))
    windows = min(reps, MAX_WINDOWS, max(WINDOWS, reps // 5))
    samples = {"ours": [], "torch": []}
    faults = {"ours": 0, "torch": 0}
    with NoGc():
        for i in range(windows):
            # reps split exactly (window sizes differ by at most one): --min-ms 0 times
            # --reps calls, not windows * ceil(reps / windows)
            calls = reps // windows + (i < reps % windows)
            for key, fn in (("ours", ours), ("torch", theirs)):
                before = minor_faults()
                for _ in range(calls):
                    t0 = time.perf_counter()
                    fn()
                    samples[key].append((time.perf_counter() - t0) * 1e3)
                if before is not None:
                    faults[key] += minor_faults() - before
    return {k: (min(v), median(v), len(v), None if minor_faults() is None
                else faults[k] / len(v)) for k, v in samples.items()}


def minor_faults() -> int | None:
    """This process's minor page faults so far, every thread's (getrusage RUSAGE_SELF's
    ru_minflt); None where there is no ``resource`` module (not POSIX). A fresh mapping
    of an allocation faults once per page it touches (4 KiB; once per 2 MiB where
    transparent huge pages back it): a side that allocates its output or scratch per call
    pays for that inside its time."""
    if resource is None:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_text(ours, torch) -> str:
    """The faults/call column: ours/torch, "-" where they were not counted."""
    return "-" if ours is None else f"{ours:.0f}/{torch:.0f}"


def anchors(torch, n=ANCHOR_GEMM_N, reps=5, sizes=None):
    """fp32 / bf16 GEMM GFLOP/s (torch.matmul n^3, or a smaller power-of-two fraction of n
    where one n^3 call would take over GEMM_BUDGET_MS: ``gemm_<dtype>_n``) and copy GB/s
    (64 MiB, read + write); ``sizes``: {dtype: n} to use instead (the end of a run repeats
    the start's sizes, so that its rates compare)."""
    out = {}
    for dtype, tdt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        m = sizes[dtype] if sizes else _gemm_n(torch, tdt, n)
        a, b = torch.randn(m, m).to(tdt), torch.randn(m, m).to(tdt)
        c = torch.empty(m, m, dtype=tdt)
        best = _best(lambda: torch.matmul(a, b, out=c), reps)
        out[f"gemm_{dtype}_gflops"] = 2.0 * m ** 3 / best / 1e6
        out[f"gemm_{dtype}_n"] = m
    src = torch.randn(ANCHOR_COPY_BYTES // 4)
    dst = torch.empty_like(src)
    best = _best(lambda: dst.copy_(src), reps * 4)
    out["copy_gbps"] = 2.0 * ANCHOR_COPY_BYTES / best / 1e6
    return out


# one anchor GEMM call at most this long: PyTorch's bfloat16 GEMM on a 2-core AVX2 CPU
# without AVX-512 ran at 1.3 GFLOP/s (256^3 and 512^3, 2026-12-07), 13 s per 2048^3 call
GEMM_BUDGET_MS = 250.0


def _gemm_n(torch, tdt, n, probe=256):
    """n, halved until a 256^3 probe's rate says one n^3 call takes <= GEMM_BUDGET_MS."""
    a = torch.randn(probe, probe).to(tdt)
    ms = _best(lambda: torch.matmul(a, a), 1)
    while n > probe and ms * (n / probe) ** 3 > GEMM_BUDGET_MS:
        n //= 2
    return n


def _best(fn, reps):
    fn()
    fn()
    times = []
    with NoGc():
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return min(times)


def warm_process(hd, torch, dev, engine, seconds=0.5):
    """Run one 3x3 convolution of each side for about `seconds` (the first primitive in a
    process runs slow: thread pools start, pages fault in)."""
    case = conv_case(hd, torch, dev, engine, 2, dict(
        (s[0], s) for s in RESNET50_CONVS)["res3 3x3"], "fprop", "float32", "NHWC")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        case.ours()
        case.theirs()


# =======================================================================================
# why: PyTorch's oneDNN implementation of a case, and the reason a case is above target

# the oneDNN primitive kind each family's torch call would run, where it runs one
ONEDNN_KIND = {"conv": "convolution", "bn": "batch_normalization"}
# oneDNN 3.5 (commit 20d93aea88) renamed these x64 implementations; ours is 3.2
ONEDNN_RENAMES = {"brgconv": "brg_conv_fwd", "brg_fwd": "brg_conv_bwd"}


def verbose_execs(text):
    """(primitive kind, implementation) of each oneDNN verbose ``exec`` line of ``text``,
    in order; other lines are skipped. Fields are found from ``exec`` on, not by position:
    oneDNN 3.2 writes ``onednn_verbose,exec,cpu,KIND,IMPL,...``, the 3.12 of torch 2.13
    ``onednn_verbose,v1,primitive,exec,cpu,KIND,IMPL,...``, and ONEDNN_VERBOSE_TIMESTAMP
    adds a field before ``exec``."""
    out = []
    for line in text.splitlines():
        fields = line.strip().split(",")
        if fields[0] not in ("onednn_verbose", "dnnl_verbose") or "exec" not in fields:
            continue
        i = fields.index("exec")
        # graph-API lines carry partitions, not primitives, in those fields
        if "graph" not in fields[1:i] and len(fields) > i + 3:
            out.append((fields[i + 2], fields[i + 3]))
    return out


def capture_fd1(fn):
    """The text ``fn()`` writes to file descriptor 1: oneDNN prints its verbose lines with
    C stdio, below Python's ``sys.stdout``. Both stdio buffers are flushed on either side
    so that nothing of ours goes into the capture, or of the capture to the terminal."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            fn()
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode("utf-8", errors="replace")


def torch_algorithm(torch, family, theirs):
    """{"torch_algorithm", "torch_reorders", "torch_algorithm_reason"} of one case: the
    implementation of the oneDNN primitive ``theirs()`` ran (ONEDNN_KIND[family]; distinct
    names joined by ";"), the reorders it ran, and why the name is "aten" or None (the
    reason is None where a name came). One untimed call under verbose; any failure is
    reported in the reason, never raised: the timed figures stand without it."""
    execs, reason = [], None
    if not torch.backends.mkldnn.is_available():
        reason = "this torch has no oneDNN (torch.backends.mkldnn.is_available() False)"
    else:
        try:
            execs = verbose_execs(capture_fd1(lambda: _verbose_call(torch, theirs)))
        except Exception as exc:  # noqa: BLE001 - the case keeps its timings
            reason = f"verbose capture failed: {type(exc).__name__}: {exc}"
    kind = ONEDNN_KIND[family]
    impls = list(dict.fromkeys(impl for k, impl in execs if k == kind))
    name = ";".join(impls) or None
    if name is None and family == "bn":
        name = "aten"
        reason = reason or "no oneDNN batch_normalization ran: PyTorch's CPU batchnorm is ATen's"
    elif name is None:
        # e.g. batch-1 fp32 NCHW at 8x16x16: ATen's thnn_conv2d (torch's profiler says)
        reason = reason or f"no oneDNN {kind} ran: PyTorch took a kernel of its own"
    return {"torch_algorithm": name, "torch_reorders": sum(k == "reorder" for k, _ in execs),
            "torch_algorithm_reason": reason}


def _verbose_call(torch, theirs):
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        theirs()


def kernel_name(name):
    """The oneDNN implementation that does the work in an algorithm name, in oneDNN 3.5+'s
    spelling, or None where the name has none: our variant suffixes (parts without ":")
    dropped, the last oneDNN part kept (of ``outer+inner`` the inner kernel), renamed by
    ONEDNN_RENAMES. ``brg_fwd:avx512_core+brgconv:avx512_core+nhwc`` ->
    ``brg_conv_fwd:avx512_core``; ``x64:gemm:jit`` stays."""
    parts = [p for p in (name or "").split("+") if ":" in p]
    if not parts:
        return None
    impl, _, isa = parts[-1].partition(":")
    return f"{ONEDNN_RENAMES.get(impl, impl)}:{isa}"


def above_target(row):
    """Whether a case's best-of ratio misses TARGET_RATIO (no ratio misses it too)."""
    return row["ratio"] is None or row["ratio"] > TARGET_RATIO


def median_above(row):
    """Whether a case's median ratio misses TARGET_RATIO too."""
    return row["median_ratio"] is None or row["median_ratio"] > TARGET_RATIO


def why(row):
    """The reason of a case above target, from its figures and both sides' kernels (the
    rules: the module docstring)."""
    spread = ("median above 1.0x too" if median_above(row)
              else "median <= 1.0x: within the run's spread")
    ours, theirs = kernel_name(row["algorithm"]), row["torch_algorithm"]
    if theirs == "aten":
        who = "our C rows" if (ours or "").startswith("bn_rows:") else f"ours {ours}"
        return f"{who} vs PyTorch's ATen kernel; {spread}"
    if theirs is None:
        return f"PyTorch's kernel unknown ({row['torch_algorithm_reason']}); {spread}"
    if ours == kernel_name(theirs):
        return f"same kernel as PyTorch; {spread}"
    offered = row.get("candidates") or []
    absent = ("" if not offered or kernel_name(theirs) in {kernel_name(c) for c in offered}
              else f" (not among the {len(offered)} our oneDNN offers here)")
    return (f"different kernel: ours {ours}, PyTorch {kernel_name(theirs)}{absent}; "
            f"{spread}")


def print_why(rows):
    """One line per case above target: both ratios, both sides' algorithms, the reason."""
    lines = [[f"{r['family']} {r['shape']} {r['pattern']} {r['dtype']} {r['layout']}",
              f(r["ratio"]), f(r["median_ratio"]), r["algorithm"], r["torch_algorithm"],
              r["torch_reorders"], r["why"]] for r in rows if r["why"]]
    if lines:
        print(f"\n== why: the {len(lines)} cases above {TARGET_RATIO:.1f}x")
        table(lines, ["case", "ratio", "median ratio", "ours", "torch", "torch reorders",
                      "why"])


# =======================================================================================
# report

def header(args, hd, torch, dev, threads):
    """The run's facts: command, CPU, versions, threads, engine."""
    desc = dict(dev.provider.describe())
    return {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "cores_available": our_threads(None),
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "engine": args.engine or "device's choice",
        "device": desc,
        "onednn": onednn_facts(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "hipdnn_async": getattr(hd, "__version__", "?"),
        "python": platform.python_version(),
        "load_average_1_5_15": _loadavg(),
        "batch": args.batch,
        "reps": args.reps,
        "min_ms": args.min_ms,
        "warmup": args.warmup,
        "gemm_n": args.gemm_n,
    }


def _loadavg():
    """The 1, 5 and 15 minute load averages (other processes on the cores make every
    figure noisy; ratios measured in alternating windows suffer least)."""
    try:
        return tuple(round(v, 2) for v in os.getloadavg())
    except OSError:
        return None


def onednn_facts():
    """oneDNN as the runtime loaded it: path, version, ISA, threads, or why it did not
    load (``hipdnn-async info`` reports the same)."""
    from hipdnn_async import runtime
    load = getattr(runtime, "load_onednn", None)
    if load is None:
        return {"loaded": False, "reason": "this hipdnn_async has no oneDNN binding"}
    st = load()
    record = getattr(st, "record", None)
    return {"loaded": bool(st.ok), "reason": st.reason,
            "path": getattr(record, "path", None),
            "version": ".".join(map(str, st.version[:3])) if st.version else None,
            "isa": st.isa or None, "threads": st.threads}


def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def summarise(rows, anch):
    """Geometric means of the ratios (all, per dtype, per family, per dtype x family) and
    the issue's verdict on the targets."""
    out = {"geomean_ratio": geomean([r["ratio"] for r in rows])}
    for key in ("dtype", "family", "layout"):
        for v in sorted({r[key] for r in rows}):
            out[f"geomean_ratio_{v}"] = geomean([r["ratio"] for r in rows if r[key] == v])
    for dt in sorted({r["dtype"] for r in rows}):
        for fam in sorted({r["family"] for r in rows}):
            sel = [r["ratio"] for r in rows if r["dtype"] == dt and r["family"] == fam]
            if sel:
                out[f"geomean_ratio_{dt}_{fam}"] = geomean(sel)
    above = [r for r in rows if above_target(r)]
    gemm_miss = [r for r in rows if r["family"] == "conv" and "3x3" in r["shape"]
                 and (r["pct"] is None or r["pct"] < TARGET_GEMM[r["dtype"]])]
    copy_miss = [r for r in rows if r["family"] == "bn"
                 and (r["pct"] is None or r["pct"] < TARGET_COPY)]
    out["verdict"] = {
        "cases": len(rows),
        "above_1x": len(above),
        "above_1x_median_too": sum(map(median_above, above)),
        "geomean_target_met": bool(out["geomean_ratio"] <= TARGET_GEOMEAN),
        "conv3x3_below_gemm_target": len(gemm_miss),
        "bn_below_copy_target": len(copy_miss),
    }
    return out


def print_matrix(rows, key="ratio", digits=2):
    """One line per (shape, pattern), one column per dtype x layout: the rows' `key`."""
    cols = sorted({(r["dtype"], r["layout"]) for r in rows}, key=lambda c: (c[0] != "float32",
                                                                           c[1] != "NHWC"))
    cells = {(r["shape"], r["pattern"], r["dtype"], r["layout"]): r[key] for r in rows}
    lines = []
    for shape, pattern in dict.fromkeys((r["shape"], r["pattern"]) for r in rows):
        lines.append([shape, pattern] + [f(cells.get((shape, pattern) + c), digits)
                                         for c in cols])
    table(lines, ["shape", "pattern"] + [f"{d} {lay}" for d, lay in cols])


def print_summary(summary, anch):
    print(f"\n== geometric means of ours / torch ({summary['verdict']['cases']} cases)")
    table([[k.replace("geomean_ratio", "all").replace("all_", ""), f(v)]
           for k, v in summary.items() if k.startswith("geomean_ratio")], ["", "ratio"])
    v = summary["verdict"]
    print(f"\n== targets: {v['above_1x']} of {v['cases']} cases above {TARGET_RATIO:.1f}x; "
          f"geometric mean {f(summary['geomean_ratio'])} "
          f"({'meets' if v['geomean_target_met'] else 'misses'} <= {TARGET_GEOMEAN}); "
          f"{v['conv3x3_below_gemm_target']} 3x3 convolutions below "
          f"{TARGET_GEMM['float32']:.0f} % (fp32) / {TARGET_GEMM['bfloat16']:.0f} % (bf16) of "
          f"the GEMM rate; {v['bn_below_copy_target']} batchnorm cases below "
          f"{TARGET_COPY:.0f} % of the copy bandwidth "
          f"({f(anch['copy_gbps'], 1)} GB/s)")
    print(f"   {v['above_1x_median_too']} of the {v['above_1x']} above {TARGET_RATIO:.1f}x "
          "by their median ratio too")


def run(args):
    threads = our_threads(args.threads)
    if args.threads:
        # before torch and oneDNN load: OpenMP reads it once, for every thread's team
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    import hipdnn_async as hd

    torch.set_num_threads(threads)
    convs = dict((s[0], s) for s in RESNET50_CONVS)
    conv_names = QUICK_CONV_SHAPES if args.quick else CONV_SHAPES
    bn_shapes = QUICK_BN_SHAPES if args.quick else BN_SHAPES
    doc = {"anchors": {}, "cases": [], "errors": []}
    started = time.perf_counter()
    with hd.Device("cpu") as dev:
        doc["header"] = head = header(args, hd, torch, dev, threads)
        print("bench_cpu: " + "; ".join(f"{k} {v}" for k, v in head.items()
                                        if k not in ("device",)), flush=True)
        print(f"  device: {head['device']}", flush=True)
        dnnl_threads = head["onednn"].get("threads")
        for who, n in (("torch", head["torch_threads"]), ("oneDNN", dnnl_threads)):
            if n is not None and n != threads:
                doc["errors"].append(f"{who} threads {n} != ours {threads}")
        warm_process(hd, torch, dev, args.engine)
        anch = doc["anchors"] = anchors(torch, args.gemm_n)
        print(f"anchors: fp32 GEMM {f(anch['gemm_float32_gflops'], 1)} GFLOP/s, bf16 GEMM "
              f"{f(anch['gemm_bfloat16_gflops'], 1)} GFLOP/s (torch.matmul "
              f"{anch['gemm_float32_n']}^3 / {anch['gemm_bfloat16_n']}^3); "
              f"copy {f(anch['copy_gbps'], 1)} GB/s (64 MiB, read + write)", flush=True)
        specs = ([("conv", convs[name], p) for name in conv_names for p in CONV_PATTERNS
                  if p in args.patterns]
                 + [("bn", chw, p) for chw in bn_shapes for p in BN_PATTERNS
                    if p in args.patterns])
        rows = doc["cases"]
        more = (f", or of up to {MAX_REPS} in up to {MAX_WINDOWS} windows where {args.reps} "
                f"take less than {args.min_ms:g} ms (the calls column)" if args.min_ms > 0
                else "")
        print(f"\n== {len(specs) * len(args.configs)} cases at batch {args.batch}; ms = best of "
              f"{args.reps} calls (up to {WINDOWS} alternating windows){more}; "
              "ratio = ours / torch")
        hdr = ["family", "shape", "pattern", "dtype", "layout", "ours ms", "torch ms", "ratio",
               "median ratio", "rate", "% anchor", "rel L2", "algorithm", "calls",
               "faults/call"]
        printed = []
        for dtype, layout in args.configs:
            for family, spec, pattern in specs:
                try:
                    make = conv_case if family == "conv" else bn_case
                    case = make(hd, torch, dev, args.engine, args.batch, spec, pattern, dtype,
                                layout)
                    t = time_pair(case.ours, case.theirs, args.reps, args.warmup, args.min_ms)
                    err = rel_l2(case.out, case.theirs())
                    kernels = torch_algorithm(torch, family, case.theirs)   # untimed
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    name = spec[0] if family == "conv" else "x".join(map(str, spec))
                    doc["errors"].append(f"{family} {name} {pattern} {dtype} {layout}: "
                                         f"{type(exc).__name__}: {exc}")
                    print(f"  ERROR {doc['errors'][-1]}", flush=True)
                    continue
                row = dict(_row(case, t, err, anch), **kernels)
                rows.append(row)
                printed.append([row["family"], row["shape"], row["pattern"], dtype, layout,
                                f(row["ours_ms"]), f(row["torch_ms"]), f(row["ratio"]),
                                f(row["median_ratio"]), row["rate_text"], f(row["pct"], 1),
                                f"{err:.1e}", row["algorithm"][:48], row["calls"],
                                faults_text(row["faults"], row["torch_faults"])])
                print("  " + "  ".join(str(c) for c in printed[-1]), flush=True)
        # the anchors again at the end, the best of both kept: the figures are maxima the
        # machine reached, and load from other processes varies over a run
        again = anchors(torch, args.gemm_n, sizes={d: anch[f"gemm_{d}_n"]
                                                   for d in ("float32", "bfloat16")})
        doc["anchors_end"] = again
        for k, v in again.items():
            if not k.endswith("_n"):
                anch[k] = max(anch[k], v)
        for row in rows:
            _rate_pct(row, anch)
    print(f"\nanchors (best of start and end): fp32 GEMM {f(anch['gemm_float32_gflops'], 1)} "
          f"GFLOP/s, bf16 GEMM {f(anch['gemm_bfloat16_gflops'], 1)} GFLOP/s, copy "
          f"{f(anch['copy_gbps'], 1)} GB/s; load average at the end {_loadavg()}")
    for line, row in zip(printed, rows):
        line[10] = f(row["pct"], 1)
    print()
    table(printed, hdr)
    doc["summary"] = summarise(rows, anch)
    for row in rows:
        row["why"] = why(row) if above_target(row) else None
    print("\n== ours / torch (best of the calls each)")
    print_matrix(rows)
    print("\n== % of the anchor (fp32 / bf16 GEMM rate for convolutions, copy bandwidth for "
          "batchnorm)")
    print_matrix(rows, "pct", 0)
    print_summary(doc["summary"], anch)
    print_why(rows)
    doc["total_seconds"] = time.perf_counter() - started
    print(f"\nbench_cpu: {len(rows)} cases in {doc['total_seconds']:.1f} s", flush=True)
    return doc


def _row(case, t, err, anch):
    ours_ms, ours_med, calls, ours_faults = t["ours"]
    torch_ms, torch_med, _, torch_faults = t["torch"]
    if case.flops is not None:
        rate = case.flops / ours_ms / 1e6
        anchor = anch[f"gemm_{case.dtype}_gflops"]
        rate_text = f"{rate:.1f} GFLOP/s"
    else:
        rate = bn_gbps(1, case.nbytes, ours_ms)
        anchor = anch["copy_gbps"]
        rate_text = f"{rate:.1f} GB/s"
    return {"family": case.family, "shape": case.shape, "pattern": case.pattern,
            "dtype": case.dtype, "layout": case.layout, "ours_ms": ours_ms,
            "ours_median_ms": ours_med, "torch_ms": torch_ms, "torch_median_ms": torch_med,
            "ratio": ratio(ours_ms, torch_ms), "median_ratio": ratio(ours_med, torch_med),
            "calls": calls, "faults": ours_faults, "torch_faults": torch_faults,
            "rate": rate, "rate_text": rate_text, "pct": pct_of(rate, anchor),
            "anchor": "copy_gbps" if case.flops is None else f"gemm_{case.dtype}_gflops",
            "rel_l2": err, "engine": case.plan.engine.name,
            "algorithm": str(case.plan.algorithm),
            "candidates": [n for n, _ in getattr(case.plan.algorithm, "trials", ())]}


def _rate_pct(row, anch):
    """Recompute a row's % of its anchor (after the anchors were updated)."""
    row["pct"] = pct_of(row["rate"], anch[row["anchor"]])


def main(argv=None) -> int:
    args = parse_args(argv)
    doc = run(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2, default=str)
        print(f"figures written to {args.json}")
    for err in doc["errors"]:
        print(f"bench_cpu: {err}", file=sys.stderr)
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
