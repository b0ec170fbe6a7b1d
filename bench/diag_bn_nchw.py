"""Batchnorm on the NVIDIA fast path (issue 11), three questions in one run.

A. ``nchw``: NCHW batchnorm training and backward on the legacy cuDNN engine
   (``CUDNN_LEGACY_ENGINE``) with the knob ``cudnn_legacy.bn_persistent`` = 0
   (CUDNN_BATCHNORM_SPATIAL, PyTorch's NCHW mode) and = 1 (SPATIAL_PERSISTENT, the proposed
   default): accuracy against float64 and speed. cuDNN documents that PERSISTENT in NCHW
   "may use a scaled atomic integer reduction ... For finite but very large input values,
   the algorithm may encounter overflows more frequently due to a lower dynamic range and
   emit Inf-s/NaN-s while CUDNN_BATCHNORM_SPATIAL will produce finite results", and PyTorch
   avoids it for NCHW after "accuracy losses in ResNeXt-101 and video R(2+1)D". Per ResNet-50
   batchnorm shape (C x H x W at --batch), dtype (float32, float16, bfloat16) and data regime:
   ``uniform`` x ~ U(-1, 1); ``offset`` 100 + U(-1, 1) (10 + U(-1, 1) for fp16 / bf16: the
   mean-dominated variance-cancellation trap); ``wide`` U(-1, 1) * 2**k, k per channel in
   -8..8; ``large`` U(-1, 1) * 1e4 (3e4 for fp16 / bf16; dy scaled alike): overflow hunt.
   Each knob value: plan.algorithm, device ms per execution (bench_gpu.time_plan's
   device-only figure where it has one), PyTorch's F.batch_norm(training=True) forward /
   its autograd's backward call (bench_gpu.torch_bn_backward) on the same values with
   cudnn.benchmark = True, the ratio ours / PyTorch, every output's max error against a
   float64 NumPy reference from the same rounded inputs (tests/oracle/_reference.py) in
   units of the tolerance (backward: bench_gpu.BN_BACKWARD_TOL, dscale / dbias at the
   float32 entry; training: tests/oracle/_cases.py TOL["bn_training"], y at the I/O dtype
   and mean / inv_variance / running statistics at float32, as tests/oracle/test_patterns.py
   checks them), the count of non-finite outputs (and of those where float64 is finite),
   whether a second run gave the same bits, and the "floor": the err/tol of the float64 y /
   dx rounded to the I/O dtype, what a correctly rounded kernel scores (bfloat16's half-ulp
   is up to 3.9e-3 relative; the bf16 backward tolerance is 4e-3 for that reason).
   Training: scale,
   bias, running statistics (momentum 0.1, epsilon 1e-5) into separate next buffers;
   backward: x, dy, scale and the saved mean / inv_variance computed in float64 from x
   (rounded to float32). Cases run most informative first (uniform and offset in fp32 and
   fp16, then large and wide, then bfloat16); what does not fit --max-seconds is skipped
   and listed. One table per (pass, shape), then a summary per knob value.
B. ``nhwc_bwd``: fp16 channels-last batchnorm backward at --batch: the legacy engine's plan
   (``cudnnBatchNormalizationBackwardEx``, SPATIAL_PERSISTENT; a NotSupportedError is
   printed and is a valid outcome) against the graph engine's default plan (engine=None):
   device ms, GB/s and % of an x-sized copy's bandwidth (bench_gpu.BN_PASSES["backward"]
   passes of x, as bench/diag_bn_knobs.py), PyTorch's backward call, err/tol against float64
   (and its fp16 rounding floor).
C. ``profile``: why fp16 NHWC training on the graph engine reaches only ~55-60 % of copy
   bandwidth on 32x1024x14x14 / 32x2048x7x7: every CUDA kernel / memset / memcpy (name,
   count and mean device us per execution) of --profile-reps executions under
   torch.profiler (CUDA activities, through CUPTI: our streams are seen too) of our
   training plan, of PyTorch's F.batch_norm on a channels_last tensor and of an x-sized
   dst.copy_(src); the sum of kernel time per execution against the CUDA-event time per
   execution (the gap is launch / dependency idle time). All shapes at --batch, and the two
   smallest also at --contrast-batch (256).

--max-seconds bounds the whole run: section A stops starting cases early enough to leave
RESERVE_S for the later sections selected (at most RESERVE_MAX of it). With
``--device cpu`` it is a smoke test of the reference and error code (the CPU engine, no
knob variants, no torch: timing, PyTorch and the profile are skipped with a reason);
``--no-torch`` does the same on a GPU device.

    python3 bench/diag_bn_nchw.py [--device cuda:0] [--batch 32]
        [--shapes 64x112x112,256x56x56,512x28x28,1024x14x14,2048x7x7]
        [--dtypes float32,float16,bfloat16] [--what train,backward]
        [--data uniform,offset,wide,large] [--knob-values 0,1]
        [--sections nchw,nhwc_bwd,profile] [--max-seconds 200] [--json PATH] [--no-torch]
    python3 bench/diag_bn_nchw.py --max-seconds 225 --json diag_bn_nchw.json     # H200, ~240 s
    python3 bench/diag_bn_nchw.py --device cpu --shapes 8x6x5 --batch 2 --max-seconds 60
"""
from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import json
import math
import os
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path[:0] = [HERE, ROOT]

KNOB = "cudnn_legacy.bn_persistent"
LEGACY = "CUDNN_LEGACY_ENGINE"          # hipdnn_async.providers.cudnn.CUDNN_ENGINE_NAME
DTYPES = ("float32", "float16", "bfloat16")
DATA = ("uniform", "offset", "wide", "large")
WHATS = ("train", "backward")
SECTIONS = ("nchw", "nhwc_bwd", "profile")
DEFAULT_SHAPES = "64x112x112,256x56x56,512x28x28,1024x14x14,2048x7x7"
OFFSET = {"float32": 100.0, "float16": 10.0, "bfloat16": 10.0}
LARGE = {"float32": 1e4, "float16": 3e4, "bfloat16": 3e4}
# seconds kept for the sections after A (B: 5 float64 backward references and 10 builds;
# C: CUPTI start-up, 7 graph-engine builds and 21 short profiles)
RESERVE_S = {"nhwc_bwd": 30.0, "profile": 40.0}
RESERVE_MAX = 0.35             # at most this share of --max-seconds is kept for them
TRAIN_OUTS = ("y", "mean", "inv_variance", "nrm", "nrv")
BWD_OUTS = ("dx", "dscale", "dbias")
SHORT = {"inv_variance": "inv_var", "nrm": "run_mean", "nrv": "run_var"}
# the ordering of section A's cases: most informative first
TIERS = ((("uniform", "offset"), ("float32", "float16")),
         (("large", "wide"), ("float32", "float16")),
         (("uniform", "offset", "large", "wide"), ("bfloat16",)))


def _list(choices):
    def parse(text):
        items = tuple(t.strip() for t in text.split(",") if t.strip())
        items = tuple("train" if t == "training" else t for t in items)
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {bad or text!r}; choose from {choices}")
        return items
    return parse


def _shapes(text):
    try:
        return [tuple(int(v) for v in p.split("x")) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"shapes are CxHxW[,CxHxW...]; got {text!r}") from None


# =======================================================================================
# the float64 oracle, its tolerances and the error measure

def load_reference():
    """tests/oracle/_reference.py (float64 NumPy batchnorm formulas; imports only NumPy),
    loaded from its file so that the oracle package's imports (pytest) are not needed."""
    path = os.path.join(ROOT, "tests", "oracle", "_reference.py")
    spec = importlib.util.spec_from_file_location("_oracle_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_tol_table():
    """TOL of tests/oracle/_cases.py, read from its source (that module imports pytest,
    which a GPU host may lack): {op: {dtype: value}}, (atol, rtol) = (value, value)."""
    path = os.path.join(ROOT, "tests", "oracle", "_cases.py")
    with open(path) as fh:
        tree = ast.parse(fh.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TOL"
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"no TOL table in {path}")


def tol_denominators(np, want, tols):
    """{output: atol + rtol * |float64|}: the per-element tolerance, computed once per case
    and shared by every plan scored against it."""
    out = {}
    for k, w in want.items():
        atol, rtol = tols[k]
        d = np.abs(w)
        d *= rtol
        d += atol
        out[k] = d
    return out


def _err_in_place(np, q, want, den):
    """max |q - want| / den, overwriting q (float64, want's shape); NaN -> inf."""
    if q.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        q -= want
        np.abs(q, out=q)
        q /= den
    m = float(q.max())                   # a NaN anywhere makes the max NaN
    return math.inf if math.isnan(m) else m


def err_over_tol_np(np, got, want, atol, rtol, den=None):
    """bench_gpu.err_over_tol on NumPy arrays: max |got - want| / (atol + rtol * |want|)
    in float64 (`got` reshaped to `want`'s shape); <= 1 is within the tolerance; a NaN or
    an inf counts as inf. `den`: that denominator precomputed (tol_denominators)."""
    q = np.array(got, dtype=np.float64).reshape(want.shape)        # a copy, always
    if den is None:
        den = tol_denominators(np, {0: want}, {0: (atol, rtol)})[0]
    return _err_in_place(np, q, want, den)


def score(np, row, got, want, dens):
    """Into row: err (output -> err/tol; dens from tol_denominators), worst, worst_out,
    nonfinite (count over all outputs), nonfinite_ref_finite (of those, where float64 is
    finite)."""
    errs, nonfinite, bad = {}, 0, 0
    for k, g in got.items():
        w = want[k]
        g64 = np.array(g, dtype=np.float64).reshape(w.shape)          # a copy, always
        n_bad = g64.size - int(np.count_nonzero(np.isfinite(g64)))
        if n_bad:
            nonfinite += n_bad
            bad += int(np.count_nonzero(~np.isfinite(g64) & np.isfinite(w)))
        if k == "inv_variance":         # not a tolerance: the relative error, for the record
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = float((np.abs(g64 - w) / np.abs(w)).max())
            row["inv_variance_max_rel"] = math.inf if math.isnan(rel) else rel
        errs[k] = _err_in_place(np, g64, w, dens[k])
        del g64
    worst = max(errs, key=lambda k: errs[k]) if errs else None
    row.update(err=errs, worst=errs.get(worst), worst_out=worst, nonfinite=nonfinite,
               nonfinite_ref_finite=bad)


def rounding_floor(np, want, npdt, den):
    """err/tol of the float64 result itself rounded to the output dtype (None for float32,
    where it is ~1e-5): what a correctly rounded kernel scores. Not a tolerance: a row's
    err/tol at or below it is the I/O dtype's own rounding."""
    if npdt == np.float32:
        return None
    return _err_in_place(np, np.array(want.astype(npdt), dtype=np.float64), want, den)


def self_check(np, torch, bg, ref):
    """Our NumPy error measure and oracle against bench_gpu's torch ones on a small case
    (CPU tensors): the same figures, or a printed warning."""
    rng = np.random.default_rng(0)
    x, dy = rng.uniform(-1, 1, (3, 4, 5, 6)), rng.uniform(-1, 1, (3, 4, 5, 6))
    scale, mean, inv = rng.uniform(0.5, 1.5, 4), rng.uniform(-.1, .1, 4), rng.uniform(.5, 2, 4)
    ours = ref.bn_backward(dy, x, scale, mean, inv)
    theirs = bg.bn_backward_reference(*(torch.from_numpy(a) for a in (x, dy, scale, mean,
                                                                      inv)))
    diff = max(float(np.abs(ours[k].reshape(-1) - t.numpy().reshape(-1)).max())
               for k, t in zip(BWD_OUTS, theirs))
    got = ours["dx"] + rng.uniform(-1e-3, 1e-3, x.shape)
    e_np = err_over_tol_np(np, got, ours["dx"], 1e-3, 1e-3)
    e_bg = bg.err_over_tol(torch.from_numpy(got), torch.from_numpy(ours["dx"]), 1e-3, 1e-3)
    ok = diff < 1e-12 and abs(e_np - e_bg) < 1e-9
    print(f"self-check against bench_gpu's torch helpers: {'ok' if ok else 'MISMATCH'} "
          f"(reference max diff {diff:.1e}; err/tol {e_np:.6f} vs {e_bg:.6f})", flush=True)


# =======================================================================================
# inputs and buffers

def make_x(np, rng, dims, dtype, data, npdt):
    """x of one data regime in the I/O dtype (drawn in float32, rounded once)."""
    c = dims[1]
    u = rng.random(dims, dtype=np.float32)
    u *= 2
    u -= 1
    if data == "offset":
        u += np.float32(OFFSET[dtype])
    elif data == "wide":
        k = rng.integers(-8, 9, c)
        u *= np.exp2(k).astype(np.float32).reshape(1, c, 1, 1)
    elif data == "large":
        u *= np.float32(LARGE[dtype])
    return u if npdt == np.float32 else u.astype(npdt)


def make_dy(np, rng, dims, dtype, data, npdt):
    u = rng.random(dims, dtype=np.float32)
    u *= 2
    u -= 1
    if data == "large":
        u *= np.float32(LARGE[dtype])
    return u if npdt == np.float32 else u.astype(npdt)


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode())


async def upload(dev, a, layout=None):
    return await dev.asarray(a, layout=layout)


async def fill_nan(np, arr):
    """NaN into an output buffer first: an output left unwritten shows."""
    nan = np.full((1,) * len(arr.dims), np.nan, np.float32)
    await asyncio.to_thread(arr.copy_from, nan)


async def run_and_read(np, plan, vp, outs):
    """Outputs of one execution of plan on vp (NaN-filled first), as NumPy arrays."""
    for k in outs:
        await fill_nan(np, vp[k])
    await plan.execute(vp)
    return {k: await vp[k].to_numpy() for k in outs}


def same_bits(np, a, b):
    return all(np.array_equal(np.ascontiguousarray(a[k]).view(np.uint8),
                              np.ascontiguousarray(b[k]).view(np.uint8)) for k in a)


def torch_from(torch, np, a, tdt, channels_last=False):
    """A CUDA tensor of NumPy array a's values (via float32: exact for fp16 / bf16)."""
    t = torch.from_numpy(np.ascontiguousarray(np.asarray(a, np.float32))).to("cuda").to(tdt)
    return t.contiguous(memory_format=torch.channels_last) if channels_last else t


class Ctx:
    """What every section uses: modules, the device, args."""

    def __init__(self, hd, np, torch, bg, ref, tol_table, dev, args):
        self.hd, self.np, self.torch, self.bg, self.ref = hd, np, torch, bg, ref
        self.tol_table, self.dev, self.args = tol_table, dev, args
        import ml_dtypes
        self.npdt = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                     "bfloat16": np.dtype(ml_dtypes.bfloat16)}
        self.tdt = None if torch is None else {
            "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

    def tol(self, op, dtype):
        v = self.tol_table[op][dtype]
        return v, v

    def train_tols(self, dtype):
        tf = self.tol("bn_training", "float32")
        return {"y": self.tol("bn_training", dtype), "mean": tf, "inv_variance": tf,
                "nrm": tf, "nrv": tf}

    def bwd_tols(self, dtype):
        t = self.bg.BN_BACKWARD_TOL
        return {"dx": (t[dtype], t[dtype]), "dscale": (t["float32"],) * 2,
                "dbias": (t["float32"],) * 2}


async def time_ours(ctx, plan, vp):
    """(ms, method, gpu_ms) of bench_gpu.time_plan; (None, None, None) without torch."""
    if ctx.torch is None:
        return None, None, None
    return await ctx.bg.time_plan(ctx.torch, ctx.dev, plan, vp, ctx.args.reps)


def time_theirs(ctx, fn, method):
    """(ms, gpu_ms) of bench_gpu.time_torch by our plan's method."""
    return ctx.bg.time_torch(ctx.torch, fn, ctx.args.reps, method or "cuda_events")


def ratio_of(row):
    """ours / torch: device-only figures where both have one, else the timed ones."""
    if row.get("gpu_ms") and row.get("torch_gpu_ms"):
        return row["gpu_ms"] / row["torch_gpu_ms"]
    if row.get("ms") and row.get("torch_ms") and row.get("method") == row.get("torch_method"):
        return row["ms"] / row["torch_ms"]
    return None


# =======================================================================================
# A. NCHW batchnorm, legacy engine, bn_persistent 0 / 1

def knob_variants(ctx, graph):
    """[(label, engine, knobs)]: the legacy engine with each --knob-values value where it
    offers the knob; the legacy engine without it where it does not (label 'n/a'); the
    device's first engine without knobs where there is no legacy engine (CPU: '-')."""
    engines = ctx.hd.engines(graph, ctx.dev)
    legacy = next((e for e in engines if e.name == LEGACY), None)
    if legacy is None:
        return [("-", None, None)]
    if legacy.knob(KNOB) is None:
        return [("n/a", LEGACY, None)]
    return [(str(v), LEGACY, {KNOB: v}) for v in ctx.args.knob_values]


async def nchw_pass(ctx, base, graph, vp, outs, want, dens, torch_fn):
    """Rows of one (pass, shape, dtype, data): each knob variant built, checked against
    float64 (one NaN-filled execution), timed, re-read for reproducibility; then the torch
    anchor torch_fn() -> (call name, fn) timed once for all rows."""
    np = ctx.np
    rows = []
    try:
        variants = knob_variants(ctx, graph)
    except Exception as exc:  # noqa: BLE001 - report and go on
        return [dict(base, knob="?", error=f"engines: {type(exc).__name__}: {exc}")]
    method = None
    for label, engine, knobs in variants:
        row = dict(base, knob=label)
        rows.append(row)
        try:
            t0 = time.perf_counter()
            plan = await ctx.dev.build(graph, engine=engine, knobs=knobs)
            row["build_s"] = time.perf_counter() - t0
            row["engine"], row["algorithm"] = plan.engine.name, str(plan.algorithm)
            row["plan_knobs"] = {k: v for k, v in plan.knobs.items() if k == KNOB}
            first = await run_and_read(np, plan, vp, outs)
            score(np, row, first, want, dens)
            row["ms"], row["method"], row["gpu_ms"] = await time_ours(ctx, plan, vp)
            method = method or row["method"]
            if ctx.torch is None:          # one more run for the reproducibility check
                await plan.execute(vp)
            again = {k: await vp[k].to_numpy() for k in outs}
            row["repro"] = same_bits(np, first, again)
            del first, again
        except Exception as exc:  # noqa: BLE001 - one variant failing must not hide the rest
            row["error"] = f"{type(exc).__name__}: {exc}"
    if ctx.torch is not None:
        try:
            call, fn = torch_fn()
            torch_ms, torch_gpu = time_theirs(ctx, fn, method)
            for row in rows:
                row.update(torch_call=call, torch_ms=torch_ms, torch_gpu_ms=torch_gpu,
                           torch_method=method or "cuda_events")
                row["ratio"] = ratio_of(row)
        except Exception as exc:  # noqa: BLE001
            for row in rows:
                row["torch_error"] = f"{type(exc).__name__}: {exc}"
    return rows


def progress(row):
    tail = (f"ERROR {row['error']}" if "error" in row else
            f"{row.get('algorithm')}; gpu {_ms(row)} torch {_torch_ms(row)} ratio "
            f"{_f(row.get('ratio'), 2)}; worst err/tol {_e(row.get('worst'))} "
            f"({SHORT.get(row.get('worst_out'), row.get('worst_out'))}; {row.get('floor_out')} "
            f"rounding floor {_e(row.get('floor'))}); nonfinite "
            f"{row.get('nonfinite')}; repro {_yn(row.get('repro'))}")
    print(f"  {row['what']:8} {row['shape']:>11} {row['dtype']:8} {row['data']:7} "
          f"knob {row['knob']:3}: {tail}", flush=True)


async def nchw_case(ctx, chw, dtype, data, whats):
    """Every requested pass of one (shape, dtype, data regime): rows."""
    np, ref, bg, hd, dev, torch = ctx.np, ctx.ref, ctx.bg, ctx.hd, ctx.dev, ctx.torch
    args = ctx.args
    dims = (args.batch,) + tuple(chw)
    c = dims[1]
    npdt = ctx.npdt[dtype]
    rng = np.random.default_rng(seed_of(dims, dtype, data))
    x = make_x(np, rng, dims, dtype, data, npdt)
    f32 = np.float32
    scale = rng.uniform(0.5, 1.5, c).astype(f32)
    bias = rng.uniform(-0.5, 0.5, c).astype(f32)
    prm = rng.uniform(-1, 1, c).astype(f32)
    prv = rng.uniform(0.5, 2, c).astype(f32)
    ref_t = ref.bn_training(x, scale, bias, bg.BN_EPS, bg.BN_MOMENTUM, prm, prv)
    gt, _, gb = bg._bn_graphs(hd, dims, dtype, "NCHW")
    shape = "x".join(map(str, chw))
    base = {"section": "nchw", "shape": shape, "dims": dims, "dtype": dtype, "data": data}

    def c4(a):
        return a.reshape(1, c, 1, 1)

    X = await upload(dev, x)
    S = await upload(dev, c4(scale))
    x_t = None if torch is None else torch_from(torch, np, x, ctx.tdt[dtype])
    s_t = None if torch is None else torch.from_numpy(scale).to("cuda")
    b_t = None if torch is None else torch.from_numpy(bias).to("cuda")
    rows = []
    if "train" in whats:
        want = {"y": ref_t["y"], "mean": ref_t["mean"], "inv_variance": ref_t["inv_variance"],
                "nrm": ref_t["next_running_mean"], "nrv": ref_t["next_running_variance"]}
        vp = {"x": X, "scale": S, "bias": await upload(dev, c4(bias)),
              "rm": await upload(dev, c4(prm)), "rv": await upload(dev, c4(prv)),
              "y": dev.empty(dims, dtype), "nrm": dev.empty((1, c, 1, 1), "float32"),
              "nrv": dev.empty((1, c, 1, 1), "float32"),
              "mean": dev.empty((1, c, 1, 1), "float32"),
              "inv_variance": dev.empty((1, c, 1, 1), "float32")}

        def torch_train():
            rm_t, rv_t = torch.from_numpy(prm).to("cuda"), torch.from_numpy(prv).to("cuda")
            bn = torch.nn.functional.batch_norm
            return "F.batch_norm(training=True)", (lambda: bn(
                x_t, rm_t, rv_t, s_t, b_t, training=True, momentum=bg.BN_MOMENTUM,
                eps=bg.BN_EPS))

        dens = tol_denominators(np, want, ctx.train_tols(dtype))
        floor = rounding_floor(np, want["y"], npdt, dens["y"])
        for row in await nchw_pass(ctx, dict(base, what="train", floor=floor, floor_out="y"),
                                   gt, vp, TRAIN_OUTS, want, dens, torch_train):
            progress(row)
            rows.append(row)
        del want, vp, dens
    if "backward" in whats:
        mean32, inv32 = ref_t["mean"].astype(f32), ref_t["inv_variance"].astype(f32)
        del ref_t
        dy = make_dy(np, rng, dims, dtype, data, npdt)
        r = ref.bn_backward(dy, x, scale, mean32, inv32)
        want = {k: r[k] for k in BWD_OUTS}
        del r
        vp = {"dy": await upload(dev, dy), "x": X, "scale": S,
              "mean": await upload(dev, mean32), "inv_variance": await upload(dev, inv32),
              "dx": dev.empty(dims, dtype), "dscale": dev.empty((1, c, 1, 1), "float32"),
              "dbias": dev.empty((1, c, 1, 1), "float32")}

        def torch_bwd():
            dy_t = torch_from(torch, np, dy, ctx.tdt[dtype])
            call, fn, _, _ = bg.torch_bn_backward(torch, x_t, dy_t, s_t, b_t)
            return call, fn

        dens = tol_denominators(np, want, ctx.bwd_tols(dtype))
        floor = rounding_floor(np, want["dx"], npdt, dens["dx"])
        for row in await nchw_pass(ctx, dict(base, what="backward", floor=floor, floor_out="dx"),
                                   gb, vp, BWD_OUTS, want, dens, torch_bwd):
            progress(row)
            rows.append(row)
    return rows


def nchw_cases(args):
    """(shape, dtype, data) in run order: TIERS, filtered by the arguments."""
    out = []
    for datas, dtypes in TIERS:
        for data in datas:
            for dtype in dtypes:
                if data in args.data and dtype in args.dtypes:
                    out.extend((chw, dtype, data) for chw in args.shapes)
    return out


async def section_nchw(ctx, deadline):
    args, bg = ctx.args, ctx.bg
    print(f"\n== A. NCHW batchnorm on {LEGACY}, {KNOB} in {list(args.knob_values)}; batch "
          f"{args.batch}; passes {','.join(args.what)} (most informative cases first)",
          flush=True)
    print("  tolerances (atol = rtol) by I/O dtype: train y "
          + ", ".join(f"{d} {ctx.train_tols(d)['y'][0]:g}" for d in DTYPES)
          + f", its FLOAT outputs {ctx.train_tols('float32')['mean'][0]:g} "
          "(tests/oracle/_cases.py TOL['bn_training']); backward dx "
          + ", ".join(f"{d} {ctx.bwd_tols(d)['dx'][0]:g}" for d in DTYPES)
          + f", dscale/dbias {ctx.bwd_tols('float32')['dscale'][0]:g} "
          "(bench_gpu.BN_BACKWARD_TOL)", flush=True)
    rows, skipped = [], []
    spent, work = 0.0, 0.0          # seconds and elements * passes of the cases run
    for chw, dtype, data in nchw_cases(args):
        size = args.batch * math.prod(chw) * len(args.what)
        now = time.perf_counter()
        estimate = spent / work * size if work else 0.0
        if now + estimate > deadline:
            skipped.append(f"{dtype} {data} {'x'.join(map(str, chw))}")
            continue
        try:
            rows.extend(await nchw_case(ctx, chw, dtype, data, args.what))
        except Exception as exc:  # noqa: BLE001 - one case failing must not hide the rest
            print(f"  {'x'.join(map(str, chw))} {dtype} {data}: {type(exc).__name__}: {exc}",
                  flush=True)
            rows.append({"section": "nchw", "shape": "x".join(map(str, chw)), "dtype": dtype,
                         "data": data, "what": ",".join(args.what), "knob": "?",
                         "error": f"{type(exc).__name__}: {exc}"})
        spent += time.perf_counter() - now
        work += size
    if skipped:
        print(f"  skipped for --max-seconds ({len(skipped)} cases, each for "
              f"{','.join(args.what)}): " + "; ".join(skipped), flush=True)
    nchw_tables(bg, rows, args)
    summary = nchw_summary(bg, rows)
    return {"rows": rows, "skipped": skipped, "summary": summary}


def _f(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) \
        else f"{x:.{digits}f}"


def _e(v):
    return "-" if v is None else ("inf" if v == math.inf else f"{v:.3f}")


def _yn(v):
    return "-" if v is None else ("yes" if v else "NO")


def _ms(row):
    """Device-only ms, else the timed ms marked 'w' (wall / events incl. launches)."""
    if row.get("gpu_ms"):
        return f"{row['gpu_ms']:.4f}"
    return f"{row['ms']:.4f}w" if row.get("ms") else "-"


def _torch_ms(row):
    if row.get("torch_gpu_ms"):
        return f"{row['torch_gpu_ms']:.4f}"
    return f"{row['torch_ms']:.4f}w" if row.get("torch_ms") else "-"


def _nonfinite(row):
    n = row.get("nonfinite")
    return "-" if n is None else f"{n}/{row.get('nonfinite_ref_finite')}"


def nchw_tables(bg, rows, args):
    print("\nerr/tol: max |ours - float64| / (atol + rtol |float64|) per output, <= 1 within "
          "tolerance; nonfin: non-finite outputs / of them where float64 is finite; repro: "
          "same bits on a second run; floor: err/tol of float64 rounded to the I/O dtype (y / dx), "
          "what a correctly rounded kernel scores; gpu / torch ms: device-only ('w': events incl. "
          "launches); ratio ours / torch", flush=True)
    for what in WHATS:
        outs = TRAIN_OUTS if what == "train" else BWD_OUTS
        for chw in args.shapes:
            shape = "x".join(map(str, chw))
            sel = [r for r in rows if r.get("what") == what and r.get("shape") == shape]
            if not sel:
                continue
            calls = sorted({r["torch_call"] for r in sel if r.get("torch_call")})
            print(f"\n-- {what} {args.batch}x{shape} NCHW (torch: {', '.join(calls) or '-'})",
                  flush=True)
            table = []
            for r in sel:
                errs = r.get("err", {})
                table.append([r["dtype"], r["data"], r["knob"],
                              (r.get("algorithm") or r.get("error", "-"))[:40], _ms(r),
                              _torch_ms(r), _f(r.get("ratio"), 2)]
                             + [_e(errs.get(k)) for k in outs]
                             + [_e(r.get("worst")), _e(r.get("floor")), _nonfinite(r),
                                _yn(r.get("repro"))])
            bg.table(table, ["dtype", "data", "knob", "algorithm", "gpu ms", "torch ms",
                             "ratio"] + [SHORT.get(k, k) for k in outs]
                     + ["worst", f"floor({outs[0]})", "nonfin", "repro"])
            for r in sel:
                if r.get("torch_error"):
                    print(f"  torch {r['dtype']} {r['data']}: {r['torch_error']}", flush=True)
                    break


def nchw_summary(bg, rows):
    """Per knob value: worst err/tol (and its case), non-finite outputs where float64 is
    finite, geomean ratio vs PyTorch per (pass, dtype); and the geomean device-time ratio
    of each knob value to the first one's on the same cases."""
    print("\n-- summary per knob value", flush=True)
    out = {}
    knobs = []
    for r in rows:
        if r.get("knob") not in knobs and r.get("knob") != "?":
            knobs.append(r["knob"])
    for knob in knobs:
        sel = [r for r in rows if r.get("knob") == knob and "error" not in r]
        errs = [r for r in sel if r.get("worst") is not None]
        worst = max(errs, key=lambda r: r["worst"]) if errs else None
        bad = [r for r in sel if r.get("nonfinite_ref_finite")]
        over = [r for r in errs if r["worst"] > 1.0]
        floored = [r for r in over if r.get("floor") is not None and r["floor"] > 1.0
                   and r["worst_out"] == r.get("floor_out")]
        norepro = [r for r in sel if r.get("repro") is False]
        failed = [r for r in rows if r.get("knob") == knob and "error" in r]
        geo = {}
        for what in WHATS:
            for dtype in DTYPES:
                rs = [r.get("ratio") for r in sel if r["what"] == what and r["dtype"] == dtype]
                if any(rs):
                    geo[f"{what} {dtype}"] = bg.geomean(rs)
        rec = {"cases": len(sel), "failed": len(failed),
               "worst_err_over_tol": None if worst is None else worst["worst"],
               "worst_case": None if worst is None else
               f"{worst['what']} {worst['shape']} {worst['dtype']} {worst['data']} "
               f"{worst['worst_out']}",
               "nonfinite_where_ref_finite": [
                   f"{r['what']} {r['shape']} {r['dtype']} {r['data']}: "
                   f"{r['nonfinite_ref_finite']}" for r in bad],
               "not_reproducible": [f"{r['what']} {r['shape']} {r['dtype']} {r['data']}"
                                    for r in norepro],
               "geomean_ratio_vs_torch": geo,
               "over_tolerance": [f"{r['what']} {r['shape']} {r['dtype']} {r['data']} "
                                  f"{r['worst_out']} {r['worst']:.3f} (floor "
                                  f"{_e(r.get('floor'))})" for r in over],
               "over_tolerance_at_rounding_floor": len(floored)}
        out[knob] = rec
        print(f"knob {knob}: {rec['cases']} cases ({rec['failed']} failed); worst err/tol "
              f"{_e(rec['worst_err_over_tol'])} ({rec['worst_case']}); non-finite where "
              f"float64 is finite: {len(bad)} cases"
              + (" [" + "; ".join(rec["nonfinite_where_ref_finite"][:8]) + "]" if bad else "")
              + f"; not bitwise reproducible: {len(norepro)} cases; over tolerance: "
              f"{len(over)} cases ({len(floored)} where the I/O dtype's own rounding is over "
              "1 too)", flush=True)
        for line in rec["over_tolerance"][:12]:
            print(f"  over tolerance: {line}", flush=True)
        if geo:
            print("  geomean ratio vs PyTorch: "
                  + "; ".join(f"{k} {v:.2f}" for k, v in geo.items()), flush=True)
        for r in failed[:5]:
            print(f"  failed: {r.get('what')} {r['shape']} {r['dtype']} {r['data']}: "
                  f"{r['error']}", flush=True)
    if len(knobs) > 1:           # device time of each knob value against the first one's
        first = knobs[0]
        key = ("what", "shape", "dtype", "data")
        base = {tuple(r.get(k) for k in key): r.get("gpu_ms") for r in rows
                if r.get("knob") == first}
        for knob in knobs[1:]:
            rel = {}
            for what in WHATS:
                for dtype in DTYPES:
                    pairs = [r["gpu_ms"] / base[tuple(r.get(k) for k in key)] for r in rows
                             if r.get("knob") == knob and r.get("what") == what
                             and r.get("dtype") == dtype and r.get("gpu_ms")
                             and base.get(tuple(r.get(k) for k in key))]
                    if pairs:
                        rel[f"{what} {dtype}"] = bg.geomean(pairs)
            out[f"gpu_ms_knob{knob}_over_knob{first}"] = rel
            if rel:
                print(f"device time knob {knob} / knob {first} (geomean): "
                      + "; ".join(f"{k} {v:.2f}" for k, v in rel.items()), flush=True)
    return out


# =======================================================================================
# B. channels-last fp16 batchnorm backward: legacy (BackwardEx) vs the graph engine

async def section_nhwc_bwd(ctx, deadline):
    np, ref, bg, dev, torch, args = ctx.np, ctx.ref, ctx.bg, ctx.dev, ctx.torch, ctx.args
    dtype, layout = "float16", "NHWC"
    print(f"\n== B. fp16 NHWC batchnorm backward, batch {args.batch}: {LEGACY} "
          "(BackwardEx, SPATIAL_PERSISTENT) vs the graph engine's default plan", flush=True)
    if torch is None:
        print("  (no CUDA torch: timing, copy bandwidth and PyTorch skipped; err/tol only)",
              flush=True)
    rows = []
    tols = ctx.bwd_tols(dtype)
    for chw in args.shapes:
        shape = "x".join(map(str, chw))
        dims = (args.batch,) + tuple(chw)
        c = dims[1]
        if time.perf_counter() > deadline:
            print(f"  {shape}: skipped (--max-seconds)", flush=True)
            rows.append({"section": "nhwc_bwd", "shape": shape, "error": "skipped"})
            continue
        try:
            rng = np.random.default_rng(seed_of(dims, dtype, "nhwc_bwd"))
            x = make_x(np, rng, dims, dtype, "uniform", ctx.npdt[dtype])
            dy = make_dy(np, rng, dims, dtype, "uniform", ctx.npdt[dtype])
            scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
            st = ref.bn_training(x, np.ones(c), np.zeros(c), bg.BN_EPS)
            mean32 = st["mean"].astype(np.float32)
            inv32 = st["inv_variance"].astype(np.float32)
            del st
            r = ref.bn_backward(dy, x, scale, mean32, inv32)
            want = {k: r[k] for k in BWD_OUTS}
            del r
            dens = tol_denominators(np, want, tols)
            floor = rounding_floor(np, want["dx"], ctx.npdt[dtype], dens["dx"])
            nbytes = x.size * x.dtype.itemsize
            gb = bg._bn_graphs(ctx.hd, dims, dtype, layout)[2]
            vp = {"dy": await upload(dev, dy, layout), "x": await upload(dev, x, layout),
                  "scale": await upload(dev, scale.reshape(1, c, 1, 1)),
                  "mean": await upload(dev, mean32), "inv_variance": await upload(dev, inv32),
                  "dx": dev.empty(dims, dtype, layout=layout),
                  "dscale": dev.empty((1, c, 1, 1), "float32"),
                  "dbias": dev.empty((1, c, 1, 1), "float32")}
            copy_gbps, anchor = None, {}
            if torch is not None:
                x_t = torch_from(torch, np, x, torch.float16, channels_last=True)
                dy_t = torch_from(torch, np, dy, torch.float16, channels_last=True)
                dst = torch.empty_like(x_t)
                copy_ms, copy_gpu = bg.time_torch(torch, lambda: dst.copy_(x_t), args.reps,
                                                  "cuda_events")
                copy_gbps = bg.bn_gbps(2, nbytes, copy_gpu or copy_ms)
                try:
                    s_t = torch.from_numpy(scale).to("cuda")
                    call, fn, _, _ = bg.torch_bn_backward(torch, x_t, dy_t, s_t,
                                                          torch.zeros_like(s_t))
                    t_ms, t_gpu = bg.time_torch(torch, fn, args.reps, "cuda_events")
                    anchor = {"torch_call": call, "torch_ms": t_ms, "torch_gpu_ms": t_gpu,
                              "torch_method": "cuda_events"}
                except Exception as exc:  # noqa: BLE001
                    anchor = {"torch_error": f"{type(exc).__name__}: {exc}"}
            for label, engine in (("legacy", LEGACY), ("graph default", None)):
                row = {"section": "nhwc_bwd", "shape": shape, "dims": dims, "plan": label,
                       "x_bytes": nbytes, "copy_gbps": copy_gbps, "floor": floor,
                       "floor_out": "dx", **anchor}
                rows.append(row)
                try:
                    plan = await dev.build(gb, engine=engine)
                    row["engine"], row["algorithm"] = plan.engine.name, str(plan.algorithm)
                    first = await run_and_read(np, plan, vp, BWD_OUTS)
                    score(np, row, first, want, dens)
                    row["ms"], row["method"], row["gpu_ms"] = await time_ours(ctx, plan, vp)
                    row["gbps"] = bg.bn_gbps(bg.BN_PASSES["backward"], nbytes,
                                             row["gpu_ms"] or row["ms"])
                    row["pct_of_copy"] = bg.pct_of(row["gbps"], copy_gbps)
                    row["ratio"] = ratio_of(row)
                    del first
                except ctx.hd.NotSupportedError as exc:
                    row["error"] = f"NotSupportedError: {exc}"
                    print(f"  {shape} {label}: not supported: {exc}", flush=True)
                except Exception as exc:  # noqa: BLE001
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    print(f"  {shape} {label}: {row['error']}", flush=True)
                if "error" not in row:
                    print(f"  {shape} {label}: {row['engine']} {row['algorithm']}; gpu "
                          f"{_ms(row)} ({_f(row.get('pct_of_copy'), 0)}% of copy); torch "
                          f"{_torch_ms(row)}; worst err/tol {_e(row.get('worst'))}",
                          flush=True)
        except Exception as exc:  # noqa: BLE001 - one shape failing must not hide the rest
            print(f"  {shape}: {type(exc).__name__}: {exc}", flush=True)
            rows.append({"section": "nhwc_bwd", "shape": shape,
                         "error": f"{type(exc).__name__}: {exc}"})
    print("\n-- fp16 NHWC backward (GB/s: 5 x-sized passes; %copy of an x-sized copy's "
          "GB/s)", flush=True)
    bg.table([[r["shape"], r.get("plan", "-"), r.get("engine", "-"),
               (r.get("algorithm") or r.get("error", "-"))[:60], _ms(r),
               _f(r.get("gbps"), 0), _f(r.get("pct_of_copy"), 0), _torch_ms(r),
               _f(r.get("ratio"), 2)]
              + [_e(r.get("err", {}).get(k)) for k in BWD_OUTS]
              + [_e(r.get("floor")), _nonfinite(r)] for r in rows],
             ["shape", "plan", "engine", "algorithm", "gpu ms", "GB/s", "%copy", "torch ms",
              "ratio"] + list(BWD_OUTS) + ["floor(dx)", "nonfin"])
    for r in rows:
        if r.get("torch_error"):
            print(f"  torch {r['shape']}: {r['torch_error']}", flush=True)
    return rows


# =======================================================================================
# C. profile of fp16 NHWC training: ours (graph engine), PyTorch, copy

# device-typed CUDA activities that are waits, not work (kineto's CUDA_SYNC records)
SYNC_NAMES = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event", "cudaDevice")


def device_events(torch, prof):
    """[(name, start_us, duration_us)] of the device-side events (kernels, memsets,
    memcpys) of a finished torch.profiler.profile; synchronization records left out."""
    cuda = getattr(getattr(torch.autograd, "DeviceType", None), "CUDA", None)
    out = []
    try:
        events = list(prof.events())
    except Exception as exc:  # noqa: BLE001 - key_averages as the fallback
        print(f"    prof.events() failed ({type(exc).__name__}: {exc}); using key_averages",
              flush=True)
        events = None
    if events is not None:
        for e in events:
            dt = getattr(e, "device_type", None)
            if not ((cuda is not None and dt == cuda) or str(dt).endswith("CUDA")):
                continue
            if str(e.name).startswith(SYNC_NAMES):
                continue
            tr = getattr(e, "time_range", None)
            if tr is not None:
                start, dur = tr.start, tr.end - tr.start
            else:
                start = None
                dur = next((getattr(e, a) for a in ("device_time_total", "cuda_time_total",
                                                    "self_device_time_total")
                            if getattr(e, a, None) is not None), 0)
            out.append((str(e.name), start, float(dur)))
        return out
    for a in prof.key_averages():        # (name, None, total) with a count: expand
        dt = getattr(a, "device_type", None)
        if not ((cuda is not None and dt == cuda) or str(dt).endswith("CUDA")):
            continue
        if str(a.key).startswith(SYNC_NAMES):
            continue
        total = next((getattr(a, k) for k in ("self_device_time_total", "device_time_total",
                                              "self_cuda_time_total", "cuda_time_total")
                      if getattr(a, k, None) is not None), 0)
        n = max(int(getattr(a, "count", 1) or 1), 1)
        out.extend((str(a.key), None, float(total) / n) for _ in range(n))
    return out


def kernel_table(events, n):
    """Rows (name[:90], count per execution, mean us, us per execution) by total time, and
    (kernel us per execution, span us per execution or None)."""
    agg = {}
    for name, _, dur in events:
        a = agg.setdefault(name, [0, 0.0])
        a[0] += 1
        a[1] += dur
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])
    table = [[name[:90], f"{cnt / n:.2f}", f"{tot / cnt:.2f}", f"{tot / n:.2f}"]
             for name, (cnt, tot) in rows]
    total = sum(d for _, _, d in events) / n
    starts = [(s, s + d) for _, s, d in events if s is not None]
    span = (max(e for _, e in starts) - min(s for s, _ in starts)) / n if starts else None
    return table, total, span, {name: {"count": cnt, "total_us": tot}
                                for name, (cnt, tot) in rows}


async def profiled(torch, launch, n):
    """Device events of n launches under torch.profiler (CUDA activities)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        await launch(n)
        torch.cuda.synchronize()
    return device_events(torch, prof)


async def section_profile(ctx, deadline):
    torch, args = ctx.torch, ctx.args
    print(f"\n== C. fp16 NHWC batchnorm training: CUDA kernels per execution under "
          f"torch.profiler ({args.profile_reps} executions): ours (default plan), PyTorch "
          "F.batch_norm (channels_last), an x-sized copy", flush=True)
    if torch is None:
        print("  skipped: needs torch with CUDA", flush=True)
        return {"skipped": "no CUDA torch"}
    try:                       # CUPTI start-up outside every measurement
        t = torch.ones(1024, device="cuda")
        await profiled(torch, _torch_launcher(torch, lambda: t.add_(1)), 2)
    except Exception as exc:  # noqa: BLE001 - the profiler may be unusable here
        print(f"  profiler unusable: {type(exc).__name__}: {exc}", flush=True)
        return {"error": f"{type(exc).__name__}: {exc}"}
    configs = [(args.batch, chw) for chw in args.shapes]
    smallest = sorted(args.shapes, key=math.prod)[:2]
    configs += [(args.contrast_batch, chw) for chw in args.shapes if chw in smallest
                and args.contrast_batch != args.batch]
    n = args.profile_reps
    out = []
    for batch, chw in configs:
        dims = (batch,) + tuple(chw)
        name = "x".join(map(str, dims))
        if time.perf_counter() > deadline:
            print(f"\n-- {name}: skipped (--max-seconds)", flush=True)
            out.append({"dims": dims, "error": "skipped"})
            continue
        rec = {"dims": dims}
        out.append(rec)
        try:
            await profile_one(ctx, dims, rec, n)
        except Exception as exc:  # noqa: BLE001 - one config failing must not hide the rest
            rec["error"] = f"{type(exc).__name__}: {exc}"
            print(f"\n-- {name}: {rec['error']}\n{traceback.format_exc()}", flush=True)
    return out


def _torch_launcher(torch, fn):
    async def launch(n):
        for _ in range(n):
            fn()
    return launch


async def profile_one(ctx, dims, rec, n):
    bg, dev, torch, args, hd = ctx.bg, ctx.dev, ctx.torch, ctx.args, ctx.hd
    dtype, layout = "float16", "NHWC"
    c = dims[1]
    x = bg.torch_tensor(torch, dims, dtype, layout)
    nbytes = x.numel() * x.element_size()
    gt, _, _ = bg._bn_graphs(hd, dims, dtype, layout)
    plan = await dev.build(gt)
    rec["engine"], rec["algorithm"] = plan.engine.name, str(plan.algorithm)

    def c4(t):
        return t.reshape(1, c, 1, 1)

    ones, zeros = torch.ones(c, device="cuda"), torch.zeros(c, device="cuda")
    g = {k: bg.gpu_copy(torch, dev, v, layout) for k, v in (
        ("x", x), ("y", torch.empty_like(x)), ("scale", c4(ones)), ("bias", c4(zeros)),
        ("rm", c4(zeros.clone())), ("rv", c4(ones.clone())),
        ("mean", c4(torch.empty(c, device="cuda"))),
        ("inv_variance", c4(torch.empty(c, device="cuda"))))}
    vp = {**g, "nrm": g["rm"], "nrv": g["rv"]}
    dst = torch.empty_like(x)
    trm, trv = zeros.clone(), ones.clone()
    bn = torch.nn.functional.batch_norm

    def torch_fn():
        return bn(x, trm, trv, ones, zeros, training=True, momentum=bg.BN_MOMENTUM,
                  eps=bg.BN_EPS)

    def copy_fn():
        return dst.copy_(x)

    async def ours_launch(k):
        handles = [plan.submit(vp) for _ in range(k)]
        for h in handles:
            await h

    # event-timed ms per execution first (the profiler is off)
    ms, method, gpu_ms = await bg.time_plan(torch, dev, plan, vp, args.reps)
    timed = {"ours": gpu_ms or ms}
    timed["torch"] = (lambda r: r[1] or r[0])(bg.time_torch(torch, torch_fn, args.reps, method))
    timed["copy"] = (lambda r: r[1] or r[0])(bg.time_torch(torch, copy_fn, args.reps, method))
    copy_gbps = bg.bn_gbps(2, nbytes, timed["copy"])
    await ours_launch(3)
    for _ in range(3):
        torch_fn()
        copy_fn()
    torch.cuda.synchronize()
    print(f"\n-- {'x'.join(map(str, dims))} fp16 NHWC training: ours {rec['engine']} "
          f"{rec['algorithm']}; timing {method}; copy {_f(copy_gbps, 0)} GB/s", flush=True)
    for who, launch in (("ours", ours_launch), ("torch", _torch_launcher(torch, torch_fn)),
                        ("copy", _torch_launcher(torch, copy_fn))):
        try:
            events = await profiled(torch, launch, n)
        except Exception as exc:  # noqa: BLE001 - the others still report
            rec[who] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"  {who}: profiler failed: {rec[who]['error']}", flush=True)
            continue
        table, total, span, agg = kernel_table(events, n)
        ev_us = timed[who] * 1e3 if timed[who] else None
        passes = 2 if who == "copy" else bg.BN_PASSES["train"]
        gbps = bg.bn_gbps(passes, nbytes, timed[who])
        rec[who] = {"event_us": ev_us, "kernel_us": total, "span_us": span, "kernels": agg,
                    "gbps": gbps, "pct_of_copy": bg.pct_of(gbps, copy_gbps)}
        print(f"  {who}: kernels {total:.1f} us/exec; events {_f(ev_us, 1)} us/exec; "
              f"profile span {_f(span, 1)} us/exec; gap (events - kernels) "
              f"{_f(None if ev_us is None else ev_us - total, 1)} us; {_f(gbps, 0)} GB/s "
              f"({_f(rec[who]['pct_of_copy'], 0)}% of copy)", flush=True)
        if table:
            bg.table([["   "] + r for r in table],
                     ["   ", "kernel / memset / memcpy", "per exec", "mean us", "us/exec"])
        else:
            print("    no CUDA events recorded (CUPTI unavailable?)", flush=True)


# =======================================================================================

async def main_async(args):
    import numpy as np

    import bench_gpu as bg
    import hipdnn_async as hd
    started = time.perf_counter()
    deadline = started + args.max_seconds
    on_cpu = args.device == "cpu"
    torch = None
    if not on_cpu and not args.no_torch:
        try:
            import torch
        except ImportError as exc:
            print(f"NO TORCH ({exc}): timing, PyTorch anchors and the profile are skipped",
                  flush=True)
            torch = None
        if torch is not None and not torch.cuda.is_available():
            print(f"{args.device}: torch.cuda.is_available() is False: timing, PyTorch "
                  "anchors and the profile are skipped", flush=True)
            torch = None
    if torch is not None:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    ref = load_reference()
    tol_table = load_tol_table()
    doc = {"argv": sys.argv[1:], "hipdnn_async": hd.__version__, "device": args.device,
           "errors": {}, "seconds": {}}
    async with hd.Device(args.device, max_inflight=max(64, args.reps + 16),
                         perfdb=":memory:") as dev:
        head = f"hipdnn_async {hd.__version__} on {dev.spec}"
        try:
            head += f" ({dev.provider.describe()})"
        except Exception:  # noqa: BLE001
            pass
        if torch is not None:
            doc["torch"], doc["torch_cudnn"] = torch.__version__, torch.backends.cudnn.version()
            head += f"; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
        print(head + f"; batch {args.batch}; sections {','.join(args.sections)}; "
              f"--max-seconds {args.max_seconds:g}", flush=True)
        if torch is not None:
            try:
                self_check(np, torch, bg, ref)
            except Exception as exc:  # noqa: BLE001
                print(f"self-check failed: {type(exc).__name__}: {exc}", flush=True)
        ctx = Ctx(hd, np, torch, bg, ref, tol_table, dev, args)
        for i, section in enumerate(args.sections):
            reserve = min(sum(RESERVE_S.get(s, 0.0) for s in args.sections[i + 1:]),
                          RESERVE_MAX * args.max_seconds)
            t0 = time.perf_counter()
            try:
                if section == "nchw":
                    doc["nchw"] = await section_nchw(ctx, deadline - reserve)
                elif section == "nhwc_bwd":
                    doc["nhwc_bwd"] = await section_nhwc_bwd(ctx, deadline - reserve)
                else:
                    doc["profile"] = await section_profile(ctx, deadline - reserve)
            except Exception as exc:  # noqa: BLE001 - report, go on with the next section
                doc["errors"][section] = f"{type(exc).__name__}: {exc}"
                print(f"\n== {section}: FAILED\n{traceback.format_exc()}", flush=True)
            doc["seconds"][section] = time.perf_counter() - t0
    doc["seconds"]["total"] = time.perf_counter() - started
    print(f"\ndone in {doc['seconds']['total']:.0f} s ("
          + ", ".join(f"{k} {v:.0f} s" for k, v in doc["seconds"].items() if k != "total")
          + ")", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1, default=str)
        print(f"figures written to {args.json}", flush=True)
    for section, err in doc["errors"].items():
        print(f"diag_bn_nchw: {section}: {err}", file=sys.stderr)
    return 1 if doc["errors"] else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for the smoke run")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--shapes", default=_shapes(DEFAULT_SHAPES), type=_shapes,
                    help="CxHxW,... (default the five ResNet-50 batchnorm shapes)")
    ap.add_argument("--dtypes", default=DTYPES, type=_list(DTYPES))
    ap.add_argument("--what", default=WHATS, type=_list(WHATS))
    ap.add_argument("--data", default=DATA, type=_list(DATA))
    ap.add_argument("--knob-values", default=(0, 1),
                    type=lambda s: tuple(int(v) for v in s.split(",")),
                    help=f"values of {KNOB} to build (section A)")
    ap.add_argument("--sections", default=SECTIONS, type=_list(SECTIONS))
    ap.add_argument("--reps", type=int, default=20, help="timed launches per figure")
    ap.add_argument("--profile-reps", type=int, default=20,
                    help="profiled executions per case (section C)")
    ap.add_argument("--contrast-batch", type=int, default=256,
                    help="section C's second batch, for the two smallest shapes")
    ap.add_argument("--max-seconds", type=float, default=200.0,
                    help="wall time for the whole run (section A leaves RESERVE_S for later "
                         "sections)")
    ap.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    ap.add_argument("--no-torch", action="store_true", help="a GPU device without torch: "
                    "numerics only (no timing, PyTorch anchors or profile)")
    args = ap.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
