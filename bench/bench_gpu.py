"""GPU benchmarks of hipdnn_async against PyTorch's cuDNN, measured in the same run.

Sections (each a ratio to an anchor timed in this process, on this GPU):

- ``overhead``: host microseconds per ``plan.submit`` (GpuArray, torch tensor and int
  pointer buffers), per ``await plan.execute`` round trip and per ``execute_sync`` of a
  tiny convolution, against a tiny torch conv + ``torch.cuda.synchronize()`` round trip,
  a bare ``torch.cuda.synchronize()`` and torch's per-launch host time.
- ``submit``: host µs per ``plan.submit`` of a ResNet-50 3x3 convolution (GpuArray,
  torch tensor, CuPy buffers) and wall µs of 20 back-to-back executions plus a synchronize,
  against torch launching the same convolution (``bench/_bench_capture.py``).
- ``capture``: that convolution captured as a one-plan step, and a 20-plan ResNet-like
  training step (4 layers of conv, batchnorm + ReLU forward and backward) captured as one
  graph: host µs per replay, per plan amortised, GPU ms per replay, against
  ``torch.cuda.CUDAGraph`` replays of the same work and the step in PyTorch eager.
- ``overlap``: mid-sized convolutions, all on one stream vs alternating over two streams
  (time of two / time of one; 1.0 = no overlap, 0.5 = perfect), next to the same ratio
  for two ``torch.cuda.Stream``s.
- ``batcher``: samples/s of ``hd.DynamicBatcher`` serving concurrent single-sample
  requests (host arrays in, host arrays out) against one-at-a-time execution of the same
  conv+bias+ReLU through our plan and through torch.
- ``batchnorm``: batchnorm training (with running statistics), inference and backward on
  ResNet-50 activations at batch N, against ``torch.nn.functional.batch_norm`` and the
  backward call its autograd makes (``aten.cudnn_batch_norm_backward`` where PyTorch picks
  cuDNN); GB/s and % of an x-sized device-to-device copy's bandwidth, measured in the same
  run; the backward outputs' max error against float64 in units of the tolerance. Training
  and backward also with ``global.benchmarking = 1`` (a separate device with an in-memory
  perf db, so every config is timed in this run), with the number of configs it timed.
- ``multi`` (with ``--devices all``, or ``--sections multi``): one GPU against all GPUs
  of the host in the same run, on the ResNet-50 conv + BN + ReLU block at batch 256 and
  the batcher serving 1,024 clients (``bench/_bench_multi.py``).
- ``conv``: every ResNet-50 convolution shape at batch N, fprop / dgrad / wgrad, fp16 NHWC
  and fp32 NCHW: our plan with the heuristic choice and with ``global.benchmarking = 1``
  against torch's cuDNN call with ``torch.backends.cudnn.benchmark`` False and True
  (``allow_tf32 = False``: strict fp32, as our FLOAT plans).

GPU times come from CUDA events (``torch.cuda.Event``) recorded around back-to-back
launches on the stream that runs the work (for our plans, the device stream wrapped as a
``torch.cuda.ExternalStream``); where that stream handle is not reachable, both sides fall
back to wall-clock time of back-to-back launches until completion. Every figure goes to
``--json``. A section that fails is reported and the script exits 1 after the others ran.

    python bench/bench_gpu.py [--device cuda:0] [--batch 32] [--quick] [--json FILE]
                              [--devices all|cuda:0,cuda:1] [--sections batchnorm,conv]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback

import _bench_capture  # noqa: E402 - bench/ is on sys.path when run as a script
from _bench_common import (RESNET50_CONVS, NoGc as _NoGc, bn_gbps, conv_graph, f,  # noqa: F401
                           geomean, median, pct_of, ratio as _ratio, table)
import _bench_multi  # noqa: E402

SECTIONS = ("overhead", "submit", "capture", "overlap", "batcher", "batchnorm", "conv")

# --quick: the three layers the first H200 run found slowest (fp32 1x1 256>64 fprop /
# wgrad, strided dgrad) and one 3x3
QUICK_CONVS = ("res2 1x1 256>64", "res3 down 1x1/2", "res3 3x3")
# ResNet-50 batchnorm inputs: C, H, W
RESNET50_BN = [(64, 112, 112), (256, 56, 56), (512, 28, 28), (1024, 14, 14), (2048, 7, 7)]
CONFIGS = (("float16", "NHWC"), ("float32", "NCHW"))


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"need an int >= 1; got {value}")
    return value


def _list(choices):
    def parse(text):
        items = tuple(t.strip() for t in text.split(",") if t.strip())
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {bad or text!r}; choose from {choices}")
        return items
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--device", default=None, help="GPU device spec (default: the first GPU "
                   "in hd.devices())")
    p.add_argument("--batch", type=_positive, default=32, help="batch N of the ResNet-50 "
                   "convolution and batchnorm shapes (default 32)")
    p.add_argument("--reps", type=_positive, default=20, help="timed launches per figure")
    p.add_argument("--sections", type=_list(SECTIONS + ("multi",)), default=SECTIONS,
                   help="comma-separated subset of " + ",".join(SECTIONS) + " (and multi)")
    p.add_argument("--devices", default=None, metavar="all|SPECS",
                   help="run the multi section over these GPUs: 'all' or cuda:0,cuda:1")
    p.add_argument("--directions", type=_list(("fprop", "dgrad", "wgrad")),
                   default=("fprop", "dgrad", "wgrad"), help="conv directions")
    p.add_argument("--quick", action="store_true", help="3 conv layers (the slowest of the "
                   "last H200 run), 2 BN shapes, fewer requests: a smoke run (<= 90 s)")
    p.add_argument("--max-seconds", type=float, default=420.0, help="stop starting new conv "
                   "layers after this much wall time (default 420)")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    args = p.parse_args(argv)
    if args.devices and "multi" not in args.sections:       # --devices asks for it
        args.sections = tuple(args.sections) + ("multi",)
    elif "multi" in args.sections and not args.devices:
        args.devices = "all"
    return args


# =======================================================================================
# timing helpers
#
# Two figures per case, each the median of WINDOWS windows with Python's garbage collector
# off (a full collection in a process holding torch takes tens of ms, and one landing in
# a window made a 0.12 ms convolution read 4.5 ms on the H200):
# - "wall": `reps` back-to-back launches between CUDA events on the launching stream: the
#   host's launch cost is in it where it exceeds the kernel's time (what a training loop
#   sees);
# - "gpu": the same launches queued behind a spin kernel (torch.cuda._sleep) that outlasts
#   their enqueueing, so the events see only the device's time (what the algorithm costs).
# The difference tells a host-bound case from a slow kernel (REASONS).

WINDOWS = 3


class Spin:
    """torch.cuda._sleep calibrated to milliseconds on this GPU (None where torch lacks it)."""

    cycles_per_ms = None

    @classmethod
    def calibrate(cls, torch):
        if cls.cycles_per_ms is not None or not hasattr(torch.cuda, "_sleep"):
            return cls.cycles_per_ms
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        cls.cycles_per_ms = 2_000_000 / ms if ms > 0 else None
        return cls.cycles_per_ms

    @classmethod
    def hold(cls, torch, stream, ms):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(int(ms * cls.cycles_per_ms))


class Timer:
    """GPU time of `reps` back-to-back launches, by CUDA events on the launching stream."""

    def __init__(self, torch):
        self.torch = torch

    def events(self, stream, launch, reps, warmup=3, sync=None):
        """ms per launch: events recorded on `stream` around `reps` calls of launch()
        (median of WINDOWS windows, garbage collector off)."""
        torch = self.torch
        for _ in range(warmup):
            launch()
        (sync or torch.cuda.synchronize)()
        out = []
        with _NoGc():
            for _ in range(WINDOWS):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                for _ in range(reps):
                    launch()
                end.record(stream)
                end.synchronize()
                out.append(start.elapsed_time(end) / reps)
        return median(out)

    def device(self, stream, launch, reps, finish=None):
        """ms per launch of device time only: the launches queued behind a spin kernel
        that outlasts their enqueueing (None where that could not be arranged)."""
        torch = self.torch
        if Spin.calibrate(torch) is None:
            return None
        hold = 2.0 + 0.2 * reps
        for _ in range(3):
            torch.cuda.synchronize()
            with _NoGc():
                Spin.hold(torch, stream, hold)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                pending = [launch() for _ in range(reps)]
                caught_up = start.query()     # the spin ended before the last launch was queued
                end.record(stream)
                if finish is not None:
                    finish(pending)
                end.synchronize()
            if not caught_up:
                return start.elapsed_time(end) / reps
            hold *= 4
        return None

    @staticmethod
    def wall(launch, finish, reps, warmup=3):
        """ms per launch: wall time of `reps` launches, then finish() (waits for all)."""
        for _ in range(warmup):
            launch()
        finish()
        out = []
        with _NoGc():
            for _ in range(WINDOWS):
                t0 = time.perf_counter()
                for _ in range(reps):
                    launch()
                finish()
                out.append((time.perf_counter() - t0) * 1e3 / reps)
        return median(out)


def our_stream(torch, dev, index=0):
    """Our device stream `index` as a torch ExternalStream, or None where the handle is
    not reachable (then timings fall back to wall clock)."""
    try:
        handle = int(dev.streams[index].backend.stream)
    except (AttributeError, TypeError, IndexError):
        return None
    return torch.cuda.ExternalStream(handle) if handle else None


async def time_plan(torch, dev, plan, vp, reps, stream=0, warmup=3):
    """(ms per execution, method, device-only ms or None) of our plan: CUDA events on
    its stream when reachable (all `reps` launched without waiting: the device's
    max_inflight must exceed reps), else wall clock; median of WINDOWS windows."""
    ext = our_stream(torch, dev, stream)
    for _ in range(warmup):
        await plan.execute(vp, stream=stream)
    if ext is not None:
        out, parked = [], 0
        with _NoGc():
            for _ in range(WINDOWS):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(ext)
                handles = [plan.submit(vp, stream=stream) for _ in range(reps)]
                end.record(ext)
                # after the end event: nothing but the launches is in the window, as in
                # Timer.events (dev.metrics() in it cost ~10 us per launch of 20)
                parked += dev.metrics()["parked"]
                for h in handles:
                    await h
                end.synchronize()
                out.append(start.elapsed_time(end) / reps)
        if parked == 0:
            gpu = await _plan_device_ms(torch, dev, plan, vp, reps, stream, ext)
            return median(out), "cuda_events", gpu
    out = []
    with _NoGc():
        for _ in range(WINDOWS):
            t0 = time.perf_counter()
            handles = [plan.submit(vp, stream=stream) for _ in range(reps)]
            for h in handles:
                await h
            out.append((time.perf_counter() - t0) * 1e3 / reps)
    return median(out), "wall_clock", None


async def _plan_device_ms(torch, dev, plan, vp, reps, stream, ext):
    """Device-only ms per execution of our plan (``Timer.device`` on our stream)."""
    if Spin.calibrate(torch) is None:
        return None
    hold = 2.0 + 0.2 * reps
    for _ in range(3):
        await plan.execute(vp, stream=stream)
        torch.cuda.synchronize()
        with _NoGc():
            Spin.hold(torch, ext, hold)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(ext)
            handles = [plan.submit(vp, stream=stream) for _ in range(reps)]
            caught_up = start.query()
            end.record(ext)
            caught_up = caught_up or dev.metrics()["parked"] > 0
            for h in handles:
                await h
            end.synchronize()
        if not caught_up:
            return start.elapsed_time(end) / reps
        hold *= 4
    return None


def time_torch(torch, fn, reps, method, warmup=3):
    """(ms per call, device-only ms or None) of a torch launch fn() on torch's current
    stream, by `method`."""
    t = Timer(torch)
    if method == "cuda_events":
        stream = torch.cuda.current_stream()
        return t.events(stream, fn, reps, warmup), t.device(stream, fn, reps)
    return Timer.wall(fn, torch.cuda.synchronize, reps, warmup), None


# Why a case is above 1.0x PyTorch's time (the classes of issue 11's "How it is checked"):
TIE = "tie"                    # kernels equal and wall within GPU_SLACK: window noise
HOST = "host-bound"            # our kernel is as fast as torch's: the submit cost shows
ALGO = "algorithm choice"      # graph engine; one of our own timed configs matches torch
NOCFG = "no config matches"    # graph engine; none of our timed configs reaches torch
LEGACY = "engine (legacy)"     # the legacy engine runs it, its kernel is slower
LAYOUT = "layout path"         # the legacy engine on channels-last data
REASONS = (TIE, HOST, ALGO, NOCFG, LEGACY, LAYOUT)
GPU_SLACK = 1.05               # device times within 5 % count as equal


def reason(ratio, gpu_ratio, engine, layout, best_gpu_ratio=None):
    """The class of a case with wall ratio `ratio` (ours / torch) above 1.0, from the
    device-only ratio, the engine and layout, and the best device ratio among our own
    timed candidates; None at or below 1.0."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 1.0:
        return None
    if gpu_ratio is not None and math.isfinite(gpu_ratio) and gpu_ratio <= GPU_SLACK:
        return TIE if ratio <= GPU_SLACK else HOST
    if engine == "CUDNN_LEGACY_ENGINE":
        return LAYOUT if layout in ("NHWC", "NDHWC") else LEGACY
    if best_gpu_ratio is not None and math.isfinite(best_gpu_ratio) and best_gpu_ratio <= GPU_SLACK:
        return ALGO
    return NOCFG if gpu_ratio is not None else "unknown (no device time)"


def engine_of(plan):
    return getattr(plan.engine, "name", str(plan.engine))


def trials_text(algorithm, limit=8):
    """ "eng2 3.912, eng25 0.286, ..." of a plan.algorithm's trials ("-" if none)."""
    trials = getattr(algorithm, "trials", ()) or ()
    return ", ".join(n if ms is None else f"{n} {ms:.3f}" for n, ms in trials[:limit]) or "-"


def timed_count(algorithm):
    """How many of a plan.algorithm's trials were timed (a measured ms), 0 if none."""
    return sum(1 for _, ms in getattr(algorithm, "trials", ()) or () if ms is not None)


# =======================================================================================
# graphs and buffers

def torch_tensor(torch, dims, dtype, layout, fill=None, scale=1.0):
    tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
    t = (torch.randn(dims, device="cuda", dtype=torch.float32) * scale).to(tdt) if fill is None \
        else torch.full(dims, fill, device="cuda", dtype=tdt)
    if layout in ("NHWC", "NDHWC"):
        t = t.contiguous(memory_format=torch.channels_last if len(dims) == 4
                         else torch.channels_last_3d)
    return t


def gpu_copy(torch, dev, t, layout):
    """A GpuArray of our device holding torch tensor t's values (a device-to-device copy
    through the array's __cuda_array_interface__)."""
    arr = dev.empty(tuple(t.shape), str(t.dtype).replace("torch.", ""), layout=layout)
    torch.as_tensor(arr, device="cuda").copy_(t)
    torch.cuda.synchronize()
    return arr


# =======================================================================================
# sections

async def bench_overhead(hd, torch, spec, args):
    n = 200 if args.quick else 1000
    async with hd.Device(spec, streams=1, max_inflight=n + 64) as dev:
        return await _overhead(hd, torch, dev, args, n)


async def _overhead(hd, torch, dev, args, n):
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="tiny", io_data_type=f32, intermediate_data_type=f32, compute_data_type=f32)
    x = g.tensor(dims=(1, 8, 8, 8), name="x")
    w = g.tensor(dims=(8, 8, 3, 3), name="w")
    g.conv_fprop(x, w, padding=(1, 1)).set_output(True).set_name("y")
    plan = await dev.build(g)
    xt, wt, yt = (torch.randn(d, device="cuda") for d in ((1, 8, 8, 8), (8, 8, 3, 3), (1, 8, 8, 8)))
    torch.cuda.synchronize()
    packs = {"GpuArray": {k: gpu_copy(torch, dev, t, "NCHW") for k, t in
                          (("x", xt), ("w", wt), ("y", yt))},
             "torch tensor": {"x": xt, "w": wt, "y": yt},
             "int pointer": {"x": xt.data_ptr(), "w": wt.data_ptr(), "y": yt.data_ptr()}}
    out = {"submit_us": {}, "calls": n}
    for kind, vp in packs.items():
        for _ in range(20):
            await plan.execute(vp, stream=0)
        t0 = time.perf_counter()
        handles = [plan.submit(vp, stream=0) for _ in range(n)]
        out["submit_us"][kind] = (time.perf_counter() - t0) / n * 1e6
        for h in handles:
            await h
    vp = packs["GpuArray"]
    t0 = time.perf_counter()
    for _ in range(n):
        await plan.execute(vp, stream=0)
    out["round_trip_us"] = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        plan.execute_sync(vp, stream=0)
    out["execute_sync_us"] = (time.perf_counter() - t0) / n * 1e6
    # anchors: torch on the same tiny conv
    conv = torch.nn.functional.conv2d
    for _ in range(20):
        conv(xt, wt, padding=1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        conv(xt, wt, padding=1)
    out["torch_launch_us"] = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        conv(xt, wt, padding=1)
        torch.cuda.synchronize()
    out["torch_conv_sync_round_trip_us"] = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        torch.cuda.synchronize()
    out["torch_bare_synchronize_us"] = (time.perf_counter() - t0) / n * 1e6
    out["round_trip_over_torch_conv_sync"] = out["round_trip_us"] / out["torch_conv_sync_round_trip_us"]
    out["submit_over_torch_launch"] = out["submit_us"]["GpuArray"] / out["torch_launch_us"]
    print(f"\n== overhead (tiny conv, {n} calls, host time)")
    table([[f"submit ({k})", f(v, 1) + " us"] for k, v in out["submit_us"].items()]
          + [["await execute round trip", f(out["round_trip_us"], 1) + " us"],
             ["execute_sync", f(out["execute_sync_us"], 1) + " us"],
             ["torch conv launch (anchor)", f(out["torch_launch_us"], 1) + " us"],
             ["torch conv + synchronize (anchor)", f(out["torch_conv_sync_round_trip_us"], 1) + " us"],
             ["torch bare synchronize (anchor)", f(out["torch_bare_synchronize_us"], 1) + " us"],
             ["round trip / torch conv+sync", f(out["round_trip_over_torch_conv_sync"], 2)],
             ["submit / torch launch", f(out["submit_over_torch_launch"], 2)]],
          ["figure", "value"])
    return out


async def bench_overlap(hd, torch, args, spec):
    n_ops = 100 if args.quick else 400
    x_dims, w_dims = (4, 256, 14, 14), (256, 256, 3, 3)
    g, _ = conv_graph(hd, "fprop", 4, x_dims[1:], w_dims, 1, 1, "float32", "NCHW")
    out = {"ops": n_ops, "x": x_dims, "w": w_dims, "dtype": "float32"}
    async with hd.Device(spec, streams=2, max_inflight=n_ops + 8) as dev:
        plan = await dev.build(g)
        xt = torch_tensor(torch, x_dims, "float32", "NCHW")
        wt = torch_tensor(torch, w_dims, "float32", "NCHW", scale=0.05)
        xs = [gpu_copy(torch, dev, xt, "NCHW") for _ in range(2)]
        w = gpu_copy(torch, dev, wt, "NCHW")
        ys = [dev.empty(x_dims, "float32") for _ in range(2)]
        packs = [{"x": xs[i], "w": w, "y": ys[i]} for i in range(2)]

        async def run(n_streams):
            for s in range(2):
                await plan.execute(packs[s], stream=s)
            t0 = time.perf_counter()
            handles = [plan.submit(packs[i % n_streams], stream=i % n_streams)
                       for i in range(n_ops)]
            submit_s = time.perf_counter() - t0
            for h in handles:
                await h
            return time.perf_counter() - t0, submit_s

        one, sub1 = min([await run(1) for _ in range(3)])
        two, sub2 = min([await run(2) for _ in range(3)])
    out.update(ours_one_stream_ms=one * 1e3, ours_two_streams_ms=two * 1e3,
               ours_submit_ms=max(sub1, sub2) * 1e3, ours_two_over_one=two / one)
    # anchor: the same work through torch on one and on two torch streams
    conv = torch.nn.functional.conv2d
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    xts = [xt.clone(), xt.clone()]

    def torch_run(n_streams):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n_ops):
            with torch.cuda.stream(streams[i % n_streams]):
                conv(xts[i % n_streams], wt, padding=1)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    torch_run(2)
    t1 = min(torch_run(1) for _ in range(3))
    t2 = min(torch_run(2) for _ in range(3))
    out.update(torch_one_stream_ms=t1 * 1e3, torch_two_streams_ms=t2 * 1e3,
               torch_two_over_one=t2 / t1, ours_vs_torch_two_streams=two / t2)
    print(f"\n== overlap ({n_ops} convs x{x_dims} w{w_dims} fp32; wall time until all done)")
    table([["hipdnn_async", f(one * 1e3, 2), f(two * 1e3, 2), f(two / one, 2),
            f(max(sub1, sub2) * 1e3, 2)],
           ["torch (anchor)", f(t1 * 1e3, 2), f(t2 * 1e3, 2), f(t2 / t1, 2), "-"]],
          ["", "1 stream ms", "2 streams ms", "2/1", "host submit ms"])
    return out


def _cbr_graph(hd, n, c, h, w, k):
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="bench_cbr", io_data_type=f32, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(n, c, h, w), name="x")
    wt = g.tensor(dims=(k, c, 3, 3), name="w")
    b = g.tensor(dims=(1, k, 1, 1), name="b")
    y = g.pointwise(g.conv_fprop(x, wt, padding=(1, 1)), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g


async def bench_batcher(hd, torch, dev, args):
    import anyio
    import numpy as np
    c, h, w, k = 64, 28, 28, 64
    clients, per_client = (64, 2) if args.quick else (256, 4)
    total = clients * per_client
    rng = np.random.default_rng(0)
    wv = (rng.standard_normal((k, c, 3, 3)) * 0.05).astype(np.float32)
    bv = rng.standard_normal((1, k, 1, 1)).astype(np.float32)
    xs = [rng.standard_normal((1, c, h, w)).astype(np.float32) for _ in range(min(total, 256))]
    out = {"layer": f"conv3x3+bias+relu x(1,{c},{h},{w}) w({k},{c},3,3) fp32 NCHW",
           "clients": clients, "requests_per_client": per_client, "samples": total}

    # ours, one request at a time: upload, execute, download (what a server without
    # batching does per request)
    plan = await dev.build(_cbr_graph(hd, 1, c, h, w, k))
    wg, bg = await dev.asarray(wv), await dev.asarray(bv)
    yg = dev.empty((1, k, h, w), "float32")
    for i in range(5):
        await plan.execute({"x": await dev.asarray(xs[i]), "w": wg, "b": bg, "y": yg})
        await yg.to_numpy()
    t0 = time.perf_counter()
    for i in range(total):
        await plan.execute({"x": await dev.asarray(xs[i % len(xs)]), "w": wg, "b": bg, "y": yg})
        await yg.to_numpy()
    out["ours_serial_samples_per_s"] = total / (time.perf_counter() - t0)

    async with hd.DynamicBatcher(dev, _cbr_graph(hd, 1, c, h, w, k),
                                 constants={"w": wv, "b": bv}, max_batch_size=64,
                                 max_delay_ms=2.0) as batcher:
        await batcher.warmup()
        first = await batcher(xs[0])
        ref = torch.relu(torch.nn.functional.conv2d(
            torch.from_numpy(xs[0]).cuda(), torch.from_numpy(wv).cuda(), padding=1)
            + torch.from_numpy(bv).cuda()).cpu().numpy()
        out["batcher_max_abs_err_vs_torch"] = float(np.abs(np.asarray(first) - ref).max())

        async def client(i):
            for r in range(per_client):
                await batcher(xs[(i * per_client + r) % len(xs)])

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(client, i)
        out["ours_batched_samples_per_s"] = total / (time.perf_counter() - t0)
        out["batcher_metrics"] = batcher.metrics()

    # anchors: torch one request at a time, and torch on full batches of 64
    wt, bt = torch.from_numpy(wv).cuda(), torch.from_numpy(bv).cuda()

    def torch_one(x):
        y = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x).cuda(), wt, padding=1) + bt)
        return y.cpu().numpy()

    for i in range(5):
        torch_one(xs[i])
    t0 = time.perf_counter()
    for i in range(total):
        torch_one(xs[i % len(xs)])
    out["torch_serial_samples_per_s"] = total / (time.perf_counter() - t0)
    batch64 = np.concatenate(xs[:64])
    torch_one(batch64)
    t0 = time.perf_counter()
    for _ in range(total // 64):
        torch_one(batch64)
    out["torch_batch64_samples_per_s"] = (total // 64) * 64 / (time.perf_counter() - t0)
    out["batched_over_ours_serial"] = out["ours_batched_samples_per_s"] / out["ours_serial_samples_per_s"]
    out["batched_over_torch_serial"] = out["ours_batched_samples_per_s"] / out["torch_serial_samples_per_s"]
    out["batched_over_torch_batch64"] = out["ours_batched_samples_per_s"] / out["torch_batch64_samples_per_s"]
    m = out["batcher_metrics"]
    print(f"\n== batcher ({out['layer']}; {clients} clients x {per_client} requests; host "
          "arrays in and out)")
    table([["hipdnn_async serial batch 1", f(out["ours_serial_samples_per_s"], 0)],
           ["hipdnn_async DynamicBatcher", f(out["ours_batched_samples_per_s"], 0)],
           ["torch serial batch 1 (anchor)", f(out["torch_serial_samples_per_s"], 0)],
           ["torch batch 64 (anchor)", f(out["torch_batch64_samples_per_s"], 0)],
           ["batcher / ours serial", f(out["batched_over_ours_serial"], 2)],
           ["batcher / torch serial", f(out["batched_over_torch_serial"], 2)],
           ["batcher / torch batch 64", f(out["batched_over_torch_batch64"], 2)]],
          ["figure", "samples/s or ratio"])
    print(f"  batches {m.get('batches')}, mean size {m.get('mean_batch_size')}, "
          f"max |err| vs torch {out['batcher_max_abs_err_vs_torch']:.2e}")
    return out


BN_EPS, BN_MOMENTUM = 1e-5, 0.1
# x-sized passes over device memory of a two-pass batchnorm kernel: no output can be
# written before the per-channel sums over all of x are complete, so a tensor larger than
# the chip's L2 + shared memory is read twice. Training reads x for mean / variance, reads
# it again to normalize and writes y (running statistics, mean and inv_variance are
# C-sized); backward reads x and dy for dscale / dbias, reads them again for dx and writes
# dx. A kernel that keeps x (and dy) on chip moves 2 / 3 passes and can read above 100 % of
# the copy bandwidth measured for the same size.
BN_PASSES = {"train": 3, "backward": 5}
# (atol, rtol) of batchnorm backward by I/O dtype: tests/oracle/_cases.py TOL["bn_backward"]
# (hipDNN batchnorm::getToleranceBackward, fp16 raised to 1e-3); dscale and dbias are FLOAT
# outputs and take the float32 entry (as tests/gpu/test_torch_peer_gpu.py)
BN_BACKWARD_TOL = {"float32": 2e-3, "float16": 1e-3, "bfloat16": 4e-3}   # tests/oracle/_cases.TOL
BN_COPY_TARGET = 75.0          # issue 11: NHWC training / backward >= 75 % of copy bandwidth
BN_BENCHED = ("train", "backward")   # the passes also built with global.benchmarking = 1


def _bn_graphs(hd, dims, dtype, layout):
    """(training with running statistics, inference with variance, backward) graphs of
    one batchnorm shape; every per-channel tensor is FLOAT (1, C, 1, 1)."""
    f32 = hd.DataType.FLOAT
    c = dims[1]

    def chan(g, name):
        return g.tensor(dims=(1, c, 1, 1), name=name, data_type="float32")

    def graph(name):
        return hd.Graph(name=name, io_data_type=dtype, intermediate_data_type=f32,
                        compute_data_type=f32)

    gt = graph("bench_bn_train")
    x = gt.tensor(dims=dims, layout=layout, name="x")
    outs = gt.batchnorm(x, chan(gt, "scale"), chan(gt, "bias"), epsilon=BN_EPS,
                        momentum=BN_MOMENTUM, prev_running_mean=chan(gt, "rm"),
                        prev_running_variance=chan(gt, "rv"))
    for t, n in zip(outs, ("y", "mean", "inv_variance", "nrm", "nrv")):
        t.set_output(True).set_name(n)
    gi = graph("bench_bn_infer")
    xi = gi.tensor(dims=dims, layout=layout, name="x")
    gi.batchnorm_inference_variance_ext(xi, chan(gi, "rm"), chan(gi, "rv"), chan(gi, "scale"),
                                        chan(gi, "bias"), epsilon=BN_EPS
                                        ).set_output(True).set_name("y")
    gb = graph("bench_bn_backward")
    dy, xb = gb.tensor(dims=dims, layout=layout, name="dy"), gb.tensor(dims=dims, layout=layout,
                                                                       name="x")
    dx, dscale, dbias = gb.batchnorm_backward(dy, xb, chan(gb, "scale"), mean=chan(gb, "mean"),
                                              inv_variance=chan(gb, "inv_variance"))
    dx.set_output(True).set_name("dx")
    dscale.set_output(True).set_name("dscale").set_data_type("float32")
    dbias.set_output(True).set_name("dbias").set_data_type("float32")
    return gt, gi, gb


def err_over_tol(got, want, atol, rtol):
    """max |got - want| / (atol + rtol * |want|) over all elements of two torch tensors of
    equal element count (`got` is reshaped to `want`'s shape): <= 1 is within the tolerance
    (the elementwise test of tests/oracle/_cases.assert_close). A NaN counts as inf."""
    got = got.double().reshape(want.shape)
    q = (got - want).abs() / (atol + rtol * want.abs())
    return float(q.nan_to_num(nan=math.inf, posinf=math.inf).max())


def err_text(v):
    """An err/tol figure: 2 decimals, "inf" for a NaN or inf output, "-" for none."""
    return "inf" if v == math.inf else f(v, 2)


def bn_backward_reference(x, dy, scale, mean, inv_variance):
    """(dx, dscale, dbias) in float64 from torch tensors x, dy (N, C, ...) and per-channel
    scale, mean, inv_variance (C elements): xhat = (x - mean) * inv; dbias = sum dy;
    dscale = sum dy * xhat; dx = scale * inv / m * (m * dy - dbias - xhat * dscale),
    m = N * spatial (tests/oracle/_reference.bn_backward); dscale, dbias have C elements."""
    c = x.shape[1]
    shape = (1, c) + (1,) * (x.dim() - 2)
    axes = (0,) + tuple(range(2, x.dim()))
    m = x.numel() // c

    def chan(t):
        return t.double().reshape(shape)

    inv = chan(inv_variance)
    dy = dy.double()
    xhat = (x.double() - chan(mean)) * inv
    dbias = dy.sum(dim=axes, keepdim=True)
    dscale = (dy * xhat).sum(dim=axes, keepdim=True)
    dx = chan(scale) * inv / m * (m * dy - dbias - xhat * dscale)
    return dx, dscale.reshape(c), dbias.reshape(c)


def torch_bn_backend(torch, x, weight):
    """'cudnn', 'native' or 'dispatch': the batchnorm that PyTorch's F.batch_norm(training=
    True) with running statistics runs, and so its autograd backward. ATen's
    _select_batch_norm_backend (aten/src/ATen/native/Normalization.cpp, PyTorch >= 2.3,
    for _batch_norm_with_update and batch_norm_backward) takes cuDNN for a CUDA input of
    >= 3 dims unless the input or the weight is bfloat16, a half input has a non-float
    weight, the batch exceeds 880801 or the tensor has 2^31-1 elements or more (its
    epsilon floor, CUDNN_BN_MIN_EPSILON, is 0 in cuDNN 9); otherwise its native CUDA
    kernels. On ROCm ('dispatch') ATen may pick MIOpen: its own batch_norm_backward
    decides."""
    if getattr(torch.version, "hip", None):
        return "dispatch"
    cudnn = torch.backends.cudnn
    if (x.is_cuda and cudnn.is_available() and cudnn.enabled and x.dim() >= 3
            and torch.bfloat16 not in (x.dtype, weight.dtype)
            and (x.dtype != torch.float16 or weight.dtype == torch.float32)
            and x.shape[0] <= 880801 and x.numel() < 2 ** 31 - 1):
        return "cudnn"
    return "native"


def aten_call(torch, op, values):
    """(op, positional args) of torch.ops.aten.`op` with each argument taken from `values`
    by its name in the op's schema, so no argument can land in another's place (a name
    missing from `values` is a KeyError)."""
    fn = getattr(torch.ops.aten, op).default
    return fn, tuple(values[a.name] for a in fn._schema.arguments if not a.kwarg_only)


# (forward op, backward op) of each backend; the forward's outputs after y are the saved
# mean and inverse standard deviation (cuDNN's and MIOpen's "save_var" is
# 1/sqrt(var + eps), as native's save_invstd) and, where there is one, the reserve space
TORCH_BN_OPS = {"cudnn": ("cudnn_batch_norm", "cudnn_batch_norm_backward"),
                "native": ("native_batch_norm", "native_batch_norm_backward"),
                "dispatch": ("_batch_norm_with_update", "batch_norm_backward")}


def torch_bn_backward(torch, x, dy, scale, bias, eps=BN_EPS, momentum=BN_MOMENTUM):
    """(name, fn, save_mean, save_invstd): PyTorch's batchnorm backward as F.batch_norm's
    autograd runs it on this build (torch_bn_backend), called directly without autograd on
    x and dy after one training forward with running statistics; fn() -> (dx, dscale,
    dbias). save_mean / save_invstd (C elements, float32) are that forward's statistics."""
    fwd_op, bwd_op = TORCH_BN_OPS[torch_bn_backend(torch, x, scale)]
    c = x.shape[1]
    rm = torch.zeros(c, device=x.device, dtype=scale.dtype)
    rv = torch.ones(c, device=x.device, dtype=scale.dtype)
    values = bn_forward_values(x, scale, bias, rm, rv, eps, momentum)
    fwd, args = aten_call(torch, fwd_op, values)
    saved = fwd(*args)
    values.update(bn_backward_values(dy, saved))
    bwd, bargs = aten_call(torch, bwd_op, values)
    return f"aten.{bwd_op}", (lambda: bwd(*bargs)), saved[1], saved[2]


def bn_forward_values(x, scale, bias, running_mean, running_var, eps, momentum):
    """The arguments of TORCH_BN_OPS' training forwards by their schemas' names (each
    backend names some differently)."""
    return {"input": x, "weight": scale, "bias": bias, "running_mean": running_mean,
            "running_var": running_var, "training": True, "train": True, "update": True,
            "momentum": momentum, "exponential_average_factor": momentum, "eps": eps,
            "epsilon": eps}


def bn_backward_values(dy, saved):
    """The further arguments of TORCH_BN_OPS' backwards: dy and the forward's outputs
    `saved` = (y, save_mean, save_invstd[, reserve])."""
    reserve = saved[3] if len(saved) > 3 else None
    return {"grad_out": dy, "grad_output": dy, "save_mean": saved[1], "save_var": saved[2],
            "save_invstd": saved[2], "output_mask": [True, True, True], "reserve": reserve,
            "reserveSpace": reserve}


async def bench_batchnorm(hd, torch, dev, args, deadline=math.inf):
    """Batchnorm training (running statistics), inference and backward against PyTorch's
    calls on the same tensors, with an x-sized device-to-device copy as the bandwidth
    anchor of each shape; training and backward also with ``global.benchmarking = 1``.
    A shape past `deadline` (perf_counter) is skipped, and so is a benchmarked build."""
    torch.backends.cudnn.benchmark = True          # the run loop resets it after the section
    shapes = RESNET50_BN[1:3] if args.quick else RESNET50_BN
    out = []
    async with contextlib.AsyncExitStack() as stack:
        # benchmarked plans come from a device of their own with a private in-memory perf
        # db: every config is timed in this run (a perf-db hit would restore a choice
        # without timing anything), and the user's perf db is neither read nor written
        bdev, bdev_error = None, None
        try:
            bdev = await stack.enter_async_context(hd.Device(
                dev.spec, streams=1, max_inflight=max(64, args.reps + 16), perfdb=":memory:"))
        except Exception as exc:  # noqa: BLE001 - the heuristic figures stand without it
            bdev_error = f"benchmarking device: {type(exc).__name__}: {exc}"
        for dtype, layout in CONFIGS:
            for chw in shapes:
                rec = {"dims": (args.batch,) + chw, "dtype": dtype, "layout": layout}
                out.append(rec)
                if time.perf_counter() > deadline:
                    rec["error"] = "skipped: --max-seconds reached"
                    continue
                if bdev_error:
                    for what in BN_BENCHED:
                        rec[f"{what}_bench_error"] = bdev_error
                try:
                    await _bn_shape(hd, torch, dev, args, rec, bdev, deadline)
                except Exception as exc:  # noqa: BLE001 - one shape failing must not hide the rest
                    rec.setdefault("error", f"{type(exc).__name__}: {exc}")
    return bn_report(out)


async def _bn_shape(hd, torch, dev, args, rec, bdev=None, deadline=math.inf):
    """Every figure of one shape into rec; each part's failure is its own error entry
    (copy_error, error, backward_error, train_bench_error, backward_bench_error) so the
    others still report. `bdev`: the device of the benchmarked plans (None: none)."""
    dims, dtype, layout = rec["dims"], rec["dtype"], rec["layout"]
    x = torch_tensor(torch, dims, dtype, layout)
    rec["x_bytes"] = nbytes = x.numel() * x.element_size()
    try:                           # the anchor: an x-sized device-to-device copy
        dst = torch.empty_like(x)
        rec["copy_ms"], rec["copy_gpu_ms"] = time_torch(torch, lambda: dst.copy_(x),
                                                        args.reps, "cuda_events")
        rec["copy_gbps"] = bn_gbps(2, nbytes, rec["copy_gpu_ms"] or rec["copy_ms"])
    except Exception as exc:  # noqa: BLE001 - one part failing must not hide the rest
        rec["copy_error"] = f"{type(exc).__name__}: {exc}"
    try:
        gt, gi, gb = _bn_graphs(hd, dims, dtype, layout)
    except Exception as exc:  # noqa: BLE001
        rec["error"] = f"{type(exc).__name__}: {exc}"
        return
    packs = {}                     # what -> (variant pack[, numerical check]) as made
    try:
        await _bn_train_infer(torch, dev, args, rec, gt, gi, x, packs)
    except Exception as exc:  # noqa: BLE001
        rec["error"] = f"{type(exc).__name__}: {exc}"
    if bdev is not None:
        await _bn_bench(torch, bdev, args, rec, "train", gt, packs.get("train"), deadline)
    try:
        await _bn_backward(torch, dev, args, rec, gb, x, packs)
    except Exception as exc:  # noqa: BLE001
        rec["backward_error"] = f"{type(exc).__name__}: {exc}"
    if bdev is not None:
        await _bn_bench(torch, bdev, args, rec, "backward", gb, packs.get("backward"),
                        deadline, check=packs.get("backward_check"))
    bn_bandwidth(rec)


def bn_bandwidth(rec):
    """rec's train_ / backward_ bytes, GB/s and % of copy_gbps: ours (train_gbps), torch's
    (torch_train_gbps) and the benchmarked plan's (train_bench_gbps); None where a device
    time is missing. From x_bytes and the ours_/torch_ *_gpu_ms, ours_*_bench_gpu_ms."""
    nbytes = rec["x_bytes"]
    for what in ("train", "backward"):
        rec[f"{what}_bytes"] = BN_PASSES[what] * nbytes
        for ms_key, key in ((f"ours_{what}_gpu_ms", f"{what}"),
                            (f"torch_{what}_gpu_ms", f"torch_{what}"),
                            (f"ours_{what}_bench_gpu_ms", f"{what}_bench")):
            gbps = bn_gbps(BN_PASSES[what], nbytes, rec.get(ms_key))
            rec[f"{key}_gbps"] = gbps
            rec[f"{key}_pct_of_copy"] = pct_of(gbps, rec.get("copy_gbps"))


async def _bn_train_infer(torch, dev, args, rec, gt, gi, x, packs=None):
    """Training and inference with the heuristic plans against F.batch_norm; the training
    variant pack goes to packs["train"] once made (the benchmarked plan's, _bn_bench)."""
    dims, layout = rec["dims"], rec["layout"]
    c = dims[1]
    y = torch.empty_like(x)
    scale, bias = torch.ones(c, device="cuda"), torch.zeros(c, device="cuda")
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    stats = [torch.empty(c, device="cuda") for _ in range(2)]

    def c4(t):
        return t.reshape(1, c, 1, 1)

    torch.cuda.synchronize()
    g = {k: gpu_copy(torch, dev, v, layout) for k, v in (
        ("x", x), ("y", y), ("scale", c4(scale)), ("bias", c4(bias)), ("rm", c4(rm)),
        ("rv", c4(rv)), ("mean", c4(stats[0])), ("inv_variance", c4(stats[1])))}
    # running statistics updated in place, as F.batch_norm updates trm / trv below
    vt = {**g, "nrm": g["rm"], "nrv": g["rv"]}
    vi = {k: g[k] for k in ("x", "scale", "bias", "rm", "rv", "y")}
    if packs is not None:
        packs["train"] = vt
    pt, pi = await dev.build(gt), await dev.build(gi)
    rec["train_engine"], rec["train_algorithm"] = engine_of(pt), str(pt.algorithm)
    rec["infer_engine"], rec["infer_algorithm"] = engine_of(pi), str(pi.algorithm)
    rec["ours_train_ms"], method, rec["ours_train_gpu_ms"] = await time_plan(
        torch, dev, pt, vt, args.reps)
    rec["ours_infer_ms"], _, rec["ours_infer_gpu_ms"] = await time_plan(
        torch, dev, pi, vi, args.reps)
    trm, trv = rm.clone(), rv.clone()
    bn = torch.nn.functional.batch_norm
    rec["torch_train_ms"], rec["torch_train_gpu_ms"] = time_torch(torch, lambda: bn(
        x, trm, trv, scale, bias, training=True, momentum=BN_MOMENTUM, eps=BN_EPS),
        args.reps, method)
    rec["torch_infer_ms"], rec["torch_infer_gpu_ms"] = time_torch(torch, lambda: bn(
        x, rm, rv, scale, bias, training=False, eps=BN_EPS), args.reps, method)
    for what in ("train", "infer"):
        _bn_ratios(rec, what)
    rec["timing"] = method


def _bn_ratios(rec, what):
    rec[f"{what}_ratio"] = _ratio(rec[f"ours_{what}_ms"], rec[f"torch_{what}_ms"])
    rec[f"{what}_gpu_ratio"] = _ratio(rec[f"ours_{what}_gpu_ms"], rec[f"torch_{what}_gpu_ms"])
    rec[f"{what}_reason"] = reason(rec[f"{what}_ratio"], rec[f"{what}_gpu_ratio"],
                                   rec[f"{what}_engine"], rec["layout"])


async def _bn_bench(torch, bdev, args, rec, what, graph, vp, deadline=math.inf, check=None):
    """`what` ("train" or "backward") with ``global.benchmarking = 1``: the plan built on
    `bdev`, timed on the variant pack `vp` as the heuristic plan is (time_plan), and its
    ratio to torch's figure of the same pass (cudnn.benchmark=True, timed by the same
    method); ``await check(plan) -> err/tol`` where given. Into rec as
    <what>_bench_engine / _algorithm / _trials / _timed (configs the benchmark timed: 1
    is the heuristic's own only, 0 an engine without a choice to time) / _build_s,
    ours_<what>_bench_ms / _gpu_ms, <what>_bench_ratio / _gpu_ratio, <what>_bench_timing;
    a failure, or `deadline` (perf_counter) passed before the build, is
    <what>_bench_error and leaves every other figure of rec as it was."""
    key = f"{what}_bench"
    try:
        if vp is None:
            raise RuntimeError("no variant pack (its buffers failed; see error)")
        if time.perf_counter() > deadline:
            rec[f"{key}_error"] = "skipped: --max-seconds reached"
            return
        t0 = time.perf_counter()
        tuned = await bdev.build(graph, knobs={"global.benchmarking": 1})
        rec[f"{key}_build_s"] = time.perf_counter() - t0
        rec[f"{key}_engine"], rec[f"{key}_algorithm"] = engine_of(tuned), str(tuned.algorithm)
        rec[f"{key}_trials"] = trials_text(tuned.algorithm, limit=16)
        rec[f"{key}_timed"] = timed_count(tuned.algorithm)
        rec[f"ours_{key}_ms"], method, rec[f"ours_{key}_gpu_ms"] = await time_plan(
            torch, bdev, tuned, vp, args.reps)
        rec[f"{key}_timing"] = method
        _bn_bench_ratios(rec, what)
        if check is not None:
            rec[f"{what}_bench_err_over_tol"] = await check(tuned)
    except Exception as exc:  # noqa: BLE001 - the heuristic figures stand without it
        rec[f"{key}_error"] = f"{type(exc).__name__}: {exc}"


def _bn_bench_ratios(rec, what):
    """The benchmarked plan's ratios to torch's figures of `what` (wall only where both
    were timed by the same method), and the heuristic case's reason class again with the
    better of our two device times as the best candidate (reason's best_gpu_ratio)."""
    key = f"{what}_bench"
    same = rec.get(f"{key}_timing") == rec.get("timing" if what != "backward"
                                               else "backward_timing")
    rec[f"{key}_ratio"] = _ratio(rec.get(f"ours_{key}_ms"), rec.get(f"torch_{what}_ms")) \
        if same else None
    rec[f"{key}_gpu_ratio"] = _ratio(rec.get(f"ours_{key}_gpu_ms"),
                                     rec.get(f"torch_{what}_gpu_ms"))
    if rec.get(f"{what}_reason"):
        best = min((v for v in (rec.get(f"ours_{what}_gpu_ms"), rec.get(f"ours_{key}_gpu_ms"))
                    if v), default=None)
        rec[f"{what}_reason"] = reason(rec[f"{what}_ratio"], rec.get(f"{what}_gpu_ratio"),
                                       rec[f"{what}_engine"], rec["layout"],
                                       _ratio(best, rec.get(f"torch_{what}_gpu_ms")))


async def _bn_backward(torch, dev, args, rec, gb, x, packs=None):
    """BN_BACKWARD from the saved statistics of a torch training forward on x, against
    PyTorch's backward call (torch_bn_backward) on the same x, dy and statistics; both
    results' max error against float64 in units of the bn_backward tolerance. The variant
    pack goes to packs["backward"] once made, and packs["backward_check"] is
    ``await check(plan) -> err/tol`` of another plan's outputs on it (_bn_bench)."""
    dims, dtype, layout = rec["dims"], rec["dtype"], rec["layout"]
    c = dims[1]
    dy = torch_tensor(torch, dims, dtype, layout)
    gen = torch.Generator(device="cuda").manual_seed(11)
    scale = torch.rand(c, device="cuda", generator=gen) + 0.5      # not 1: dx must use it
    bias = torch.zeros(c, device="cuda")
    call, fn, mean, inv = torch_bn_backward(torch, x, dy, scale, bias)
    rec["torch_backward_call"] = call
    torch.cuda.synchronize()

    def c4(t):
        return t.reshape(1, c, 1, 1)

    vb = {k: gpu_copy(torch, dev, v, layout) for k, v in (
        ("dy", dy), ("x", x), ("scale", c4(scale)), ("mean", c4(mean)),
        ("inv_variance", c4(inv)))}
    vb["dx"] = dev.empty(dims, dtype, layout=layout)
    vb["dscale"], vb["dbias"] = (dev.empty((1, c, 1, 1), "float32") for _ in range(2))
    outs = ("dx", "dscale", "dbias")
    tols = (BN_BACKWARD_TOL[dtype], BN_BACKWARD_TOL["float32"], BN_BACKWARD_TOL["float32"])

    def fill_nan():                               # NaN: an output left unwritten shows
        for k in outs:
            torch.as_tensor(vb[k], device="cuda").fill_(float("nan"))
        torch.cuda.synchronize()

    async def check(plan):
        """err/tol of one execution of `plan` (built for gb on any device of this GPU)
        on vb, its outputs NaN-filled first, against float64."""
        fill_nan()
        await plan.execute(vb)
        torch.cuda.synchronize()
        want = bn_backward_reference(x, dy, scale, mean, inv)
        got = [torch.as_tensor(vb[k], device="cuda") for k in outs]
        return max(err_over_tol(g, w, t, t) for g, w, t in zip(got, want, tols))

    fill_nan()
    if packs is not None:
        packs["backward"], packs["backward_check"] = vb, check
    pb = await dev.build(gb)
    rec["backward_engine"], rec["backward_algorithm"] = engine_of(pb), str(pb.algorithm)
    rec["ours_backward_ms"], method, rec["ours_backward_gpu_ms"] = await time_plan(
        torch, dev, pb, vb, args.reps)
    rec["torch_backward_ms"], rec["torch_backward_gpu_ms"] = time_torch(torch, fn, args.reps,
                                                                        method)
    _bn_ratios(rec, "backward")
    rec["backward_timing"] = method
    # numerics: our outputs of one more execution and torch's, against float64
    await pb.execute(vb)
    theirs = fn()
    torch.cuda.synchronize()
    want = bn_backward_reference(x, dy, scale, mean, inv)
    ours = [torch.as_tensor(vb[k], device="cuda") for k in outs]
    for who, got in (("ours", ours), ("torch", theirs)):
        rec[f"{who}_backward_err_over_tol"] = max(
            err_over_tol(g, w, t, t) for g, w, t in zip(got, want, tols))
    del want, theirs, ours


def bn_report(out):
    """Print the batchnorm tables from the records of bench_batchnorm and return the
    section's result: rows, geomean ratios, NHWC % of copy bandwidth, cases above 1.0x."""
    def shape(r):
        return "x".join(map(str, r["dims"]))

    rows = [[f"{r['dtype']} {r['layout']}", shape(r), f(r.get("copy_gbps"), 0),
             _short(r.get("train_engine"), r.get("train_algorithm")),
             f(r.get("ours_train_ms")), f(r.get("torch_train_ms")),
             f(r.get("train_ratio"), 2), f(r.get("train_gpu_ratio"), 2),
             f(r.get("train_gbps"), 0), f(r.get("train_pct_of_copy"), 0),
             f(r.get("torch_train_pct_of_copy"), 0),
             _short(r.get("infer_engine"), r.get("infer_algorithm")),
             f(r.get("ours_infer_ms")), f(r.get("torch_infer_ms")),
             f(r.get("infer_ratio"), 2), f(r.get("infer_gpu_ratio"), 2),
             "; ".join(r[k] for k in ("error", "copy_error") if r.get(k))[:80]] for r in out]
    print("\n== batchnorm training / inference (ms per call; ratio = ours / torch wall, gpu = "
          f"device-only ratio; GB/s = {BN_PASSES['train']}|x| / device time: x read for the "
          "statistics, read again to normalize, y written (running statistics are C-sized); "
          "%copy = that / copy GB/s, copy = 2|x| / device time of torch dst.copy_(src) of x's "
          "size; torch% = torch's %copy)")
    table(rows, ["config", "dims", "copy GB/s", "train engine/algo", "train", "torch", "ratio",
                 "gpu", "GB/s", "%copy", "torch%", "infer engine/algo", "infer", "torch",
                 "ratio", "gpu", "error"])
    brows = [[f"{r['dtype']} {r['layout']}", shape(r),
              _short(r.get("backward_engine"), r.get("backward_algorithm")),
              f(r.get("ours_backward_ms")), f(r.get("torch_backward_ms")),
              f(r.get("backward_ratio"), 2), f(r.get("backward_gpu_ratio"), 2),
              f(r.get("backward_gbps"), 0), f(r.get("backward_pct_of_copy"), 0),
              f(r.get("torch_backward_pct_of_copy"), 0),
              err_text(r.get("ours_backward_err_over_tol")),
              err_text(r.get("torch_backward_err_over_tol")), r.get("torch_backward_call", "-"),
              (r.get("backward_error")
               or ("" if "ours_backward_ms" in r else r.get("error", "")))[:80]] for r in out]
    print("\n== batchnorm backward (dx, dscale, dbias from a torch training forward's saved "
          "mean / inv_variance; torch: its call for F.batch_norm's autograd on the same "
          f"tensors; GB/s = {BN_PASSES['backward']}|x| / device time: x and dy read for "
          "dscale / dbias, read again for dx, dx written; err/tol = max |out - float64| / "
          "(atol + rtol |float64|) over dx, dscale, dbias, bn_backward tolerance: <= 1 within)")
    table(brows, ["config", "dims", "backward engine/algo", "ours", "torch", "ratio", "gpu",
                  "GB/s", "%copy", "torch%", "err/tol", "torch err/tol", "torch call",
                  "error"])
    bn_bench_report(out)
    whats = ("train", "infer", "backward")
    summary = {f"{d} {l} {what}": geomean([r.get(f"{what}_ratio") for r in out
                                          if r["dtype"] == d and r["layout"] == l])
               for d, l in CONFIGS for what in whats}
    bench_summary = {f"{d} {l} {what}": geomean([r.get(f"{what}_bench_ratio") for r in out
                                                if r["dtype"] == d and r["layout"] == l])
                     for d, l in CONFIGS for what in BN_BENCHED}
    print("  geomean ratios: " + ", ".join(f"{k} {f(v, 2)}" for k, v in summary.items()))
    print("  geomean ratios, benchmarked: "
          + ", ".join(f"{k} {f(v, 2)}" for k, v in bench_summary.items()))
    pct = bn_copy_verdict(out)

    def verdict(v):
        return (f"min {f(v['min'], 0)} ({v['min_dims'] or '-'}), {v['below']} of {v['cases']} "
                "below")

    for what, v in pct.items():
        print(f"  NHWC {what} % of copy bandwidth (issue 11: >= {BN_COPY_TARGET:.0f}%): "
              f"heuristic {verdict(v)}; benchmarked {verdict(v['benchmarked'])}")
    timed = bn_bench_timed(out)
    print("  NHWC configs timed by global.benchmarking=1 (1: the heuristic's own config "
          "only, no choice): " + "; ".join(
              what + " " + (", ".join(f"{d} {'-' if n is None else n}" for d, n in t.items())
                            or "-") for what, t in timed.items()))
    above = [(f"batchnorm {r['dtype']} {r['layout']} {shape(r)} {w}",
              r[f"{w}_ratio"], r.get(f"{w}_gpu_ratio"), r[f"{w}_reason"],
              _short(r.get(f"{w}_engine"), r.get(f"{w}_algorithm")), r.get(f"{w}_bench_ratio"))
             for r in out for w in whats if r.get(f"{w}_reason")]
    return {"rows": out, "geomean_ratio": summary, "geomean_ratio_benchmarked": bench_summary,
            "nhwc_pct_of_copy": pct, "nhwc_bench_timed": timed, "above_1": above}


def bn_bench_report(out):
    """Print the table of the benchmarked plans (training and backward) of bench_batchnorm's
    records."""
    rows = []
    for r in out:
        for what in BN_BENCHED:
            key = f"{what}_bench"
            # its own error, else the shape's (e.g. skipped) where nothing was timed
            err = r.get(f"{key}_error") or ("" if f"ours_{key}_ms" in r else r.get("error"))
            rows.append([f"{r['dtype']} {r['layout']}", "x".join(map(str, r["dims"])), what,
                         _short(r.get(f"{key}_engine"), r.get(f"{key}_algorithm")),
                         f(r.get(f"ours_{key}_ms")), f(r.get(f"ours_{key}_gpu_ms")),
                         f(r.get(f"torch_{what}_ms")), f(r.get(f"{key}_ratio"), 2),
                         f(r.get(f"{key}_gpu_ratio"), 2), f(r.get(f"{key}_gbps"), 0),
                         f(r.get(f"{key}_pct_of_copy"), 0), f(r.get(f"{what}_pct_of_copy"), 0),
                         r.get(f"{key}_timed", "-"),
                         err_text(r.get(f"{key}_err_over_tol")) if what == "backward" else "-",
                         r.get(f"{key}_trials", "-")[:60], (err or "")[:80]])
    print("\n== batchnorm benchmarked (global.benchmarking=1, built on a device with an "
          "in-memory perf db: every config timed in this run; ms per call; device = device-only"
          " ms; torch = its figure above (cudnn.benchmark=True); ratio = ours / torch wall "
          "(same timing method only), gpu = device-only ratio; GB/s, %copy as above; heur% = "
          "the heuristic plan's %copy; timed = configs the benchmark timed, trials = their "
          "median ms in heuristic order; err/tol of the benchmarked backward as above)")
    table(rows, ["config", "dims", "pass", "bench engine/algo", "ours", "device", "torch",
                 "ratio", "gpu", "GB/s", "%copy", "heur%", "timed", "err/tol", "trials",
                 "error"])


def bn_bench_timed(out):
    """{"train"|"backward": {dims: configs timed or None}} of the channels-last rows: how
    much choice the benchmark had (1: the heuristic's own config only)."""
    return {what: {"x".join(map(str, r["dims"])): r.get(f"{what}_bench_timed") for r in out
                   if r["layout"] in ("NHWC", "NDHWC")} for what in BN_BENCHED}


def bn_copy_verdict(out):
    """{"train"|"backward": {min, min_dims, below, cases, benchmarked}}: the channels-last
    rows' % of the copy bandwidth against issue 11's BN_COPY_TARGET, of the heuristic plans
    and (under "benchmarked", the same keys) of the global.benchmarking=1 plans; rows
    without a figure are not cases."""
    def low(key):
        vals = [(r[key], "x".join(map(str, r["dims"]))) for r in out
                if r["layout"] in ("NHWC", "NDHWC") and r.get(key) is not None]
        v, dims = min(vals, default=(None, None))
        return {"min": v, "min_dims": dims, "cases": len(vals),
                "below": sum(1 for v, _ in vals if v < BN_COPY_TARGET)}

    return {what: {**low(f"{what}_pct_of_copy"),
                   "benchmarked": low(f"{what}_bench_pct_of_copy")} for what in BN_BENCHED}


def _short(engine, algorithm, width=34):
    if not engine:
        return "-"
    tag = {"CUDNN_GRAPH_ENGINE": "graph", "CUDNN_LEGACY_ENGINE": "legacy"}.get(engine, engine)
    return f"{tag} {algorithm}"[:width]


def _torch_conv_fn(torch, direction, t, w_dims, pad, stride):
    conv = torch.nn.functional.conv2d
    if direction == "fprop":
        return lambda: conv(t["x"], t["w"], padding=pad, stride=stride)
    mask = [True, False, False] if direction == "dgrad" else [False, True, False]
    return lambda: torch.ops.aten.convolution_backward(
        t["dy"], t["x"], t["w"], None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1, mask)


async def bench_conv(hd, torch, dev, args, deadline):
    layers = [l for l in RESNET50_CONVS if not args.quick or l[0] in QUICK_CONVS]
    rows, out = [], []
    db_path = os.path.join(tempfile.mkdtemp(prefix="bench_gpu_"), "perfdb.sqlite3")
    async with hd.Device(dev.spec, streams=1, max_inflight=args.reps + 16,
                         perfdb=db_path) as bdev:
        for dtype, layout in CONFIGS:
            for name, cin, w_dims, pad, stride in layers:
                for direction in args.directions:
                    rec = {"layer": name, "direction": direction, "dtype": dtype,
                           "layout": layout, "batch": args.batch}
                    if time.perf_counter() > deadline:
                        rec["error"] = "skipped: --max-seconds reached"
                        out.append(rec)
                        continue
                    try:
                        await _one_conv(hd, torch, bdev, args, rec, name, cin, w_dims, pad,
                                        stride, dtype, layout, direction)
                    except Exception as exc:  # noqa: BLE001
                        rec["error"] = f"{type(exc).__name__}: {exc}"
                    finally:
                        torch.backends.cudnn.benchmark = False
                    out.append(rec)
                    rows.append([f"{dtype} {layout}", name, direction,
                                 _short(rec.get("engine"), rec.get("ours_algorithm")),
                                 f(rec.get("ours_ms")), f(rec.get("torch_ms")),
                                 f(rec.get("ratio"), 2), f(rec.get("gpu_ratio"), 2),
                                 _short(rec.get("bench_engine"), rec.get("ours_bench_algorithm")),
                                 f(rec.get("ours_bench_ms")), f(rec.get("torch_bench_ms")),
                                 f(rec.get("ratio_bench"), 2), f(rec.get("gpu_ratio_bench"), 2),
                                 rec.get("reason") or "", rec.get("error", "")[:70]])
                    if rec.get("error"):
                        print("  " + "  ".join(rows[-1]), flush=True)
    print(f"\n== convolutions, ResNet-50 shapes at batch {args.batch} (ms per call, wall of "
          f"{args.reps} back-to-back; ratio = ours / torch; gpu = device-only ratio; 'bench' = "
          "global.benchmarking=1 vs cudnn.benchmark=True; reason: why the heuristic case is "
          "above 1.0x)")
    table(rows, ["config", "layer", "dir", "engine/algo", "ours", "torch", "ratio", "gpu",
                 "bench engine/algo", "ours", "torch", "ratio", "gpu", "reason", "error"])
    summary = {}
    for dtype, layout in CONFIGS:
        for direction in args.directions:
            sel = [r for r in out if (r["dtype"], r["layout"], r["direction"]) ==
                   (dtype, layout, direction)]
            summary[f"conv_{direction} {dtype} {layout}"] = {
                "heuristic": geomean([r.get("ratio") for r in sel]),
                "benchmarked": geomean([r.get("ratio_bench") for r in sel]),
                "heuristic_gpu": geomean([r.get("gpu_ratio") for r in sel]),
                "benchmarked_gpu": geomean([r.get("gpu_ratio_bench") for r in sel])}
    for k, v in summary.items():
        print(f"  geomean {k}: heuristic {f(v['heuristic'], 2)} (gpu {f(v['heuristic_gpu'], 2)}),"
              f" benchmarked {f(v['benchmarked'], 2)} (gpu {f(v['benchmarked_gpu'], 2)})")
    wg = [r for r in out if r.get("graph_wgrad_ms")]
    if wg:
        print("\n  FLOAT wgrad on the graph engine (declined by default for accuracy; "
              "err/bound = max|dw - float64| / (1e-5 + 2^-24 * N*H*W * max|dy|*max|x|)):")
        table([[r["layer"], _short("CUDNN_GRAPH_ENGINE", r.get("graph_wgrad_algorithm")),
                f(r.get("graph_wgrad_ms")), f(r.get("torch_ms")),
                f(_ratio(r.get("graph_wgrad_ms"), r.get("torch_ms")), 2),
                f(r.get("graph_wgrad_err_over_bound"), 2),
                f(r.get("legacy_wgrad_err_over_bound"), 2), r.get("ours_algorithm", "-")]
               for r in wg],
              ["layer", "graph engine/algo", "graph", "torch", "ratio", "err/bound",
               "default err/bound", "default algo"])
    above = [(f"conv_{r['direction']} {r['dtype']} {r['layout']} {r['layer']}", r["ratio"],
              r.get("gpu_ratio"), r["reason"], _short(r.get("engine"), r.get("ours_algorithm")),
              r.get("ratio_bench"))
             for r in out if r.get("reason")]
    detail = [(f"conv_{r['direction']} {r['dtype']} {r['layout']} {r['layer']}",
               r.get("heuristic_trials", "-"), r.get("bench_trials", "-"),
               r.get("ours_reason", ""), r.get("heuristic_orders") or {})
              for r in out if r.get("reason") in (ALGO, NOCFG, LEGACY, LAYOUT)]
    return {"rows": out, "geomean_ratio": summary, "above_1": above, "above_1_detail": detail}


async def _one_conv(hd, torch, dev, args, rec, name, cin, w_dims, pad, stride, dtype, layout,
                    direction):
    g, dims = conv_graph(hd, direction, args.batch, cin, w_dims, pad, stride, dtype, layout)
    t = {"x": torch_tensor(torch, dims["x"], dtype, layout),
         "w": torch_tensor(torch, dims["w"], dtype, layout, scale=0.05),
         "dy": torch_tensor(torch, dims["y"], dtype, layout)}
    outputs = {"fprop": ("y", dims["y"]), "dgrad": ("dx", dims["x"]), "wgrad": ("dw", dims["w"])}
    out_name, out_dims = outputs[direction]
    inputs = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}[direction]
    vp = {k: gpu_copy(torch, dev, t[k], layout) for k in inputs}
    vp[out_name] = dev.empty(out_dims, dtype, layout=layout)
    rec["flop"] = 2 * math.prod(dims["y"]) * math.prod(w_dims[1:])
    plan = await dev.build(g)
    rec["engine"], rec["ours_algorithm"] = engine_of(plan), str(plan.algorithm)
    rec["ours_reason"] = getattr(plan.algorithm, "reason", "")
    rec["heuristic_trials"] = trials_text(plan.algorithm)
    rec["ours_workspace"] = plan.workspace_size
    rec["ours_ms"], method, rec["ours_gpu_ms"] = await time_plan(torch, dev, plan, vp, args.reps)
    t0 = time.perf_counter()
    tuned = await dev.build(g, knobs={"global.benchmarking": 1})
    rec["tune_s"] = time.perf_counter() - t0
    rec["bench_engine"], rec["ours_bench_algorithm"] = engine_of(tuned), str(tuned.algorithm)
    rec["bench_reason"] = getattr(tuned.algorithm, "reason", "")
    rec["bench_trials"] = trials_text(tuned.algorithm, limit=16)
    rec["bench_workspace"] = tuned.workspace_size
    rec["ours_bench_ms"], _, rec["ours_bench_gpu_ms"] = await time_plan(torch, dev, tuned, vp,
                                                                         args.reps)
    fn = _torch_conv_fn(torch, direction, t, w_dims, pad, stride)
    torch.backends.cudnn.benchmark = False
    rec["torch_ms"], rec["torch_gpu_ms"] = time_torch(torch, fn, args.reps, method)
    torch.backends.cudnn.benchmark = True
    rec["torch_bench_ms"], rec["torch_bench_gpu_ms"] = time_torch(torch, fn, args.reps, method,
                                                                  warmup=5)
    rec["ratio"] = rec["ours_ms"] / rec["torch_ms"]
    rec["ratio_bench"] = rec["ours_bench_ms"] / rec["torch_bench_ms"]
    rec["gpu_ratio"] = _ratio(rec["ours_gpu_ms"], rec["torch_gpu_ms"])
    rec["gpu_ratio_bench"] = _ratio(rec["ours_bench_gpu_ms"], rec["torch_bench_gpu_ms"])
    # the best device time among our own candidates: the benchmarked plan's
    best = min((v for v in (rec["ours_gpu_ms"], rec["ours_bench_gpu_ms"]) if v), default=None)
    rec["reason"] = reason(rec["ratio"], rec["gpu_ratio"], rec["engine"], layout,
                           _ratio(best, rec["torch_gpu_ms"]))
    rec["ours_tflops"] = rec["flop"] / rec["ours_ms"] / 1e9
    rec["timing"] = method
    if rec["reason"] in (ALGO, NOCFG):
        rec["heuristic_orders"] = heuristic_orders(dev, g, dtype == "float32")
    if direction == "wgrad" and dtype == "float32":
        await _graph_wgrad(hd, torch, dev, args, rec, g, plan, t, vp, pad, stride)


def heuristic_orders(dev, g, float_io):
    """cuDNN's heuristic orders for the graph engine's operation graph of `g`: mode A and B
    with the 16-byte alignment our plans declare, mode A with PyTorch's 32 ("!": rejected
    by the default numerical policy): which one would have put the fast config first."""
    out = {}
    try:
        from hipdnn_async.patterns import match as match_pattern
        from hipdnn_async.providers.cudnn import _graph, _graph_ir, _graph_lower, _graph_plan
        be = _graph.backend()
        spec = _graph_ir.graph_spec(match_pattern(g._snapshot()[0]), "bench")[0]
        build = dev.provider._build
        for align, modes in ((16, ("A", "B")), (32, ("A",))):
            with build.lock:
                graph = _graph_lower.lower(be, spec, build.handle(), alignment=align)
                for mode in modes:
                    try:
                        out[f"mode {mode}, {align}B"] = " ".join(
                            _graph_plan.heuristic_order(be, graph, mode, float_io=float_io)[:12])
                    except Exception as exc:  # noqa: BLE001
                        out[f"mode {mode}, {align}B"] = f"{type(exc).__name__}: {exc}"[:80]
    except Exception as exc:  # noqa: BLE001 - a diagnostic
        out["error"] = f"{type(exc).__name__}: {exc}"[:120]
    return out


async def _graph_wgrad(hd, torch, dev, args, rec, g, plan, t, vp, pad, stride):
    """FLOAT wgrad through the graph engine (which declines it by default: ranks_after_legacy)
    and the default plan's error, both against a float64 torch reference, to decide on
    evidence whether the graph engine may take FLOAT weight gradients."""
    try:
        import anyio
        from hipdnn_async.patterns import match as match_pattern
        from hipdnn_async.runtime import _cudnn
        impl = next(i for i in dev.provider._engine_impls()
                    if i.name == "CUDNN_GRAPH_ENGINE")._impl
        m = match_pattern(g._snapshot()[0])
        eng = impl.offer(m)
        knobs = {k.id: k.default for k in eng.knobs}
        pplan = await anyio.to_thread.run_sync(
            lambda: dev.provider.build(m, eng, knobs, hd.PerfDb(":memory:")))
        rec["graph_wgrad_algorithm"] = str(pplan.algorithm)
        ref = torch.ops.aten.convolution_backward(
            t["dy"].double(), t["x"].double(), t["w"].double(), None, [stride] * 2, [pad] * 2,
            [1, 1], False, [0, 0], 1, [False, True, False])[1]
        n = t["dy"].shape[0] * t["dy"].shape[2] * t["dy"].shape[3]
        bound = 1e-5 + 2.0 ** -24 * n * float(t["dy"].abs().max()) * float(t["x"].abs().max())
        await plan.execute(vp)           # the default plan's dw (the last run was the tuned one)
        default_dw = torch.as_tensor(vp["dw"], device="cuda").double()
        rec["legacy_wgrad_err_over_bound"] = float((default_dw - ref).abs().max()) / bound
        ext = our_stream(torch, dev)
        graph_dw = torch.empty_like(t["w"])
        ptrs = {"dy": t["dy"].data_ptr(), "x": t["x"].data_ptr(), "dw": graph_dw.data_ptr()}
        ws = torch.empty(max(pplan.workspace_size, 1), dtype=torch.uint8, device="cuda")
        be = pplan._be
        handle = _cudnn.create()
        try:
            stream = ext.cuda_stream if ext is not None else torch.cuda.current_stream().cuda_stream
            _cudnn.set_stream(handle, stream)
            pack = pplan.pointers(ptrs, ws.data_ptr())
            cws = pplan._segments.pointer(ws.data_ptr(), "cudnn") if pplan._cudnn_ws else 0
            s = ext if ext is not None else torch.cuda.current_stream()
            rec["graph_wgrad_ms"] = Timer(torch).events(
                s, lambda: be.execute(handle, pplan.plan, pplan._uids, pack, cws), args.reps)
            torch.cuda.synchronize()
        finally:
            _cudnn.destroy(handle)
        rec["graph_wgrad_err_over_bound"] = float((graph_dw.double() - ref).abs().max()) / bound
    except Exception as exc:  # noqa: BLE001 - a diagnostic; the case itself stands
        rec["graph_wgrad_error"] = f"{type(exc).__name__}: {exc}"


def print_verdict(doc):
    """Every case above 1.0x PyTorch's time with its reason class, and the classes' counts:
    what to fix next."""
    above = []
    for section in ("conv", "batchnorm"):
        above += (doc["results"].get(section) or {}).get("above_1", [])
    print(f"\n== cases above 1.0x PyTorch ({len(above)}; reason classes: {', '.join(REASONS)})")
    if above:
        table([[name, f(r, 2), f(g, 2), why, algo, f(rb, 2)] for name, r, g, why, algo, rb in above],
              ["case", "ratio", "gpu", "reason", "engine/algo", "bench ratio"])
    counts = {}
    for _, _, _, why, _, _ in above:
        counts[why] = counts.get(why, 0) + 1
    print("  by reason: " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    detail = (doc["results"].get("conv") or {}).get("above_1_detail", [])
    if detail:
        print("\n  candidates of the non-host-bound cases (heuristic order; bench: median ms):")
        for name, heur, bench, why, orders in detail:
            print(f"  {name}\n    heuristic: {heur}\n    bench:     {bench}\n    reason:    {why}")
            for label, order in orders.items():
                print(f"    {label}: {order}")
    doc["verdict"] = {"above_1": above, "by_reason": counts}


# =======================================================================================

async def run(args):
    import hipdnn_async as hd
    import torch

    started = time.perf_counter()
    deadline = started + args.max_seconds
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    specs = [d for d in hd.devices() if d != "cpu"]
    spec = args.device or (specs[0] if specs else None)
    doc = {"argv": sys.argv[1:], "python": platform.python_version(),
           "hipdnn_async": hd.__version__, "devices": hd.devices(), "torch": torch.__version__,
           "torch_cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
           "results": {}, "errors": {}}
    if spec is None or not torch.cuda.is_available():
        doc["errors"]["setup"] = (f"needs a GPU device and torch with CUDA; hd.devices() = "
                                  f"{hd.devices()}, torch.cuda.is_available() = "
                                  f"{torch.cuda.is_available()}")
        return doc
    doc["gpu"] = torch.cuda.get_device_name()
    async with hd.Device(spec, max_inflight=max(64, args.reps + 16)) as dev:
        doc["device"] = dev.spec
        doc["engine_provider"] = getattr(dev.provider, "name", None)
        doc["provider"] = dev.provider.describe()
        print(f"hipdnn_async {hd.__version__} on {dev.spec} ({doc['gpu']}); torch "
              f"{torch.__version__}, cuDNN {doc['torch_cudnn']}; batch {args.batch}", flush=True)
        for section in args.sections:
            t0 = time.perf_counter()
            try:
                if section == "overhead":
                    res = await bench_overhead(hd, torch, dev.spec, args)
                elif section == "submit":
                    res = await _bench_capture.bench_submit(hd, torch, dev, args, table, f)
                elif section == "capture":
                    res = await _bench_capture.bench_capture(hd, torch, dev, args, table, f,
                                                             our_stream)
                elif section == "overlap":
                    res = await bench_overlap(hd, torch, args, dev.spec)
                elif section == "batcher":
                    res = await bench_batcher(hd, torch, dev, args)
                elif section == "batchnorm":
                    res = await bench_batchnorm(hd, torch, dev, args, deadline)
                elif section == "multi":
                    res = await _bench_multi.bench_multi(hd, args, table, f)
                else:
                    res = await bench_conv(hd, torch, dev, args, deadline)
                doc["results"][section] = res
            except Exception as exc:  # noqa: BLE001 - report, go on with the next section
                doc["errors"][section] = f"{type(exc).__name__}: {exc}"
                print(f"\n== {section}: FAILED\n{traceback.format_exc()}", flush=True)
            finally:
                torch.backends.cudnn.benchmark = False
            doc.setdefault("section_seconds", {})[section] = time.perf_counter() - t0
        doc["metrics"] = dev.metrics()
    if "conv" in doc["results"] or "batchnorm" in doc["results"]:
        print_verdict(doc)
    doc["stats"] = hd.stats()
    doc["total_seconds"] = time.perf_counter() - started
    return doc


def main(argv=None) -> int:
    args = parse_args(argv)
    import anyio
    doc = anyio.run(run, args, backend="asyncio")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2, default=str)
        print(f"\nfigures written to {args.json}")
    for section, err in doc["errors"].items():
        print(f"bench_gpu: {section}: {err}", file=sys.stderr)
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
