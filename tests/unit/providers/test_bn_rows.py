"""``providers.cpu._kernels.bn_rows``, the channels-first batchnorm rows of
ONEDNN_ENGINE (``_bn_rows.h``), against the float64 references of
tests/oracle/_reference.py with the tolerances of tests/oracle/_cases.py: every op
(training with and without a clamp, inference, backward with and without the RELU_BWD
mask) x element kind x build (the portable baseline and the one that runs by default) x
row lengths around the 16- and 32-lane blocks, on N and C strides that are not packed;
special values; results that do not depend on the OpenMP team's size (bit for bit, in
subprocesses); the errors; and the engine's choice of the rows on NCHW and NCDHW graphs.

The batch statistics and the backward sums are float32 lane sums added in float64, so
they are checked to 1e-5 of the sum of the magnitudes of their terms, far inside the
batchnorm tolerances (a row tail lost or counted twice moves them by 1/M of a term).
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers.cpu import _kernels as k
from hipdnn_async.runtime import load_onednn
from hipdnn_async.runtime._buffer import aligned_empty
from oracle import _reference as ref
from oracle import test_patterns as tp
from oracle._cases import assert_close, tol

from ._bn_rows_ops import OPS, op_vectors

HERE = pathlib.Path(__file__).resolve().parent
KINDS = {"float32": (0, np.dtype(np.float32)), "bfloat16": (1, np.dtype(ml_dtypes.bfloat16)),
         "float16": (2, np.dtype(np.float16))}
ONEDNN, BENCH = "ONEDNN_ENGINE", "global.benchmarking"
SUM_RTOL = 1e-5      # statistics and backward sums, relative to the sum of |terms|
EPS = 3e-5
# loaded at import, so that every case below runs on oneDNN's OpenMP team, as in the
# engine, wherever oneDNN loads (elsewhere on the calling thread; the worker compares the
# two bit for bit)
ONEDNN_STATE = load_onednn()

# (N, C, spatial...): rows of S = 1, 5, 16, 17, 31, 33, 196 elements (tails of the 16-lane
# masked vectors and the 32-lane blocks), NCDHW ones, and one channel (fewer channels
# than threads)
SHAPES = [(2, 5, 1, 1), (3, 5, 1, 5), (2, 5, 4, 4), (2, 5, 17, 1), (2, 4, 1, 31),
          (2, 5, 3, 11), (2, 3, 14, 14), (2, 5, 3, 4, 5), (3, 4, 2, 3, 3), (4, 1, 3, 7)]
# how an activation sits in memory: spatial elements packed, N and C strides free; or
# cropped in its last dim (packed runs of it, the next dim's stride apart)
STRIDES = ("packed", "channel_slice", "batch_step", "reversed", "cnhw", "cropped")


def placed(shape, dtype, how, fill, offset=None):
    """An array of logical ``shape`` laid out as ``how`` (STRIDES) in a buffer filled
    with ``fill``, the buffer ``offset`` bytes past a 64-byte boundary (None: where NumPy
    puts it); returns (view, buffer, mask of the buffer's elements the view covers)."""
    n, c, sp = shape[0], shape[1], shape[2:]

    def full(dims):
        if offset is None:
            return np.full(dims, fill, dtype)
        size = int(np.prod(dims)) * dtype.itemsize
        b = aligned_empty(offset + size)[offset:].view(dtype).reshape(dims)
        b[...] = fill
        return b

    if how == "channel_slice":
        base = full((n, c + 5) + sp)
        sel = (slice(None), slice(2, 2 + c))
    elif how == "batch_step":
        base = full((2 * n, c) + sp)
        sel = (slice(1, None, 2),)
    elif how in ("cropped", "cropped_outer"):
        # the innermost dim of size > 1 (cropped_outer: the next one out) cut from one 3 wider
        big = [a for a in range(2, len(shape)) if shape[a] > 1] or [len(shape) - 1]
        d = big[-1] if how == "cropped" else big[-2]
        base = full(shape[:d] + (shape[d] + 3,) + shape[d + 1:])
        sel = (slice(None),) * d + (slice(0, shape[d]),)
    elif how == "reversed":          # negative N and C strides
        base = full(shape)
        sel = (slice(None, None, -1), slice(None, None, -1))
    else:
        base = full(shape if how == "packed" else (c, n) + sp)
        sel = ()
    covered = np.zeros(base.shape, bool)
    covered[sel] = True
    view = base[sel]
    if how == "cnhw":                # memory (C, N, spatial): the N stride below C's
        view = view.swapaxes(0, 1)
    return view, base, covered


def raw(a):
    """An activation as ``bn_rows`` reads it: 16-bit kinds as their raw bits."""
    return a if a.dtype.itemsize == 4 else a.view(np.uint16)


def f64(a):
    return np.asarray(a).astype(np.float64)


def axes(a):
    return (0,) + tuple(range(2, a.ndim))


def chan(v, nd):
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (nd - 2))


def relu_bwd_nan(ybn, dy, lower, upper):
    """RELU_BWD as the CPU computes it: tests/oracle's reference, with NaN where the
    forward value is NaN (NaN propagates on the CPU)."""
    up = None if np.isinf(upper) else upper
    return np.where(np.isnan(ybn), np.nan, ref.relu_bwd(ybn, dy, lower, up))


def forward_act(y, act, lower, upper):
    return ref.relu(y, lower, None if np.isinf(upper) else upper) if act else y


def close_sums(got, want, terms, what):
    """Per-channel sums within SUM_RTOL of the sum of |terms| over N and spatial."""
    got, want = f64(got), want.reshape(-1)
    assert_close(got, want, np.inf, 0.0, what)                 # NaN and inf positions
    bound = SUM_RTOL * np.abs(terms).sum(axis=axes(terms))
    fin = np.isfinite(want)
    assert (np.abs(got - want)[fin] <= bound[fin]).all(), \
        f"{what}: got {got}, expected {want}, bound {bound}"


def need_build(dtype, baseline):
    if not baseline and k.bn_rows_isa(dtype) == "baseline":
        pytest.skip(f"the default rows for {dtype} are the baseline build here (no AVX2)")


def need_streams():
    """Skip unless the float32 rows here stream y (the AVX-512 intrinsics only)."""
    if k.bn_rows_isa("float32") != "avx512":
        pytest.skip(f"the float32 rows here are {k.bn_rows_isa('float32')}: only the "
                    "AVX-512 intrinsic rows stream y")


def run_op(name, dtype, baseline, shape, hows, vals, eps=EPS, fill=np.nan, stream=None,
           y_offset=None, isa=None):
    """Run OPS' ``name`` on ``vals`` (float64 logical arrays and vectors) with y (dx)
    filled with ``fill`` before, its buffer ``y_offset`` bytes past a 64-byte boundary
    (``placed``), by the build ``isa`` where given; returns the outputs, the y/dx buffer
    and its coverage mask."""
    _, op, act, lo, hi = next(o for o in OPS if o[0] == name)
    kind, dt = KINDS[dtype]
    x, _, _ = placed(shape, dt, hows[0], 7.0)
    x[...] = vals["x"].astype(dt)
    y, ybuf, cover = placed(shape, dt, hows[1], fill, y_offset)
    c = shape[1]
    vec = {r: np.asarray(vals[r], np.float32) for r in ("scale", "bias", "mean", "variance",
                                                      "inv_variance") if r in vals}
    out = {r: np.full(c, np.nan, np.float32) for r in ("mean_out", "variance_out", "dscale",
                                                      "dbias")}
    kw = dict(op_vectors(op, act, vec, out), act=act, lower=lo, upper=hi, baseline=baseline,
              stream=stream, isa=isa)
    if op == k.BN_ROWS_BACKWARD:
        dy, _, _ = placed(shape, dt, hows[2], 7.0)
        dy[...] = vals["dy"].astype(dt)
        kw["dy"] = raw(dy)
    else:
        kw["epsilon"] = eps
    n = k.bn_rows(op, raw(x), raw(y), kind, **kw)
    out["y"], out["threads"] = y, n
    return out, ybuf, cover


def reference(name, vals, eps=EPS):
    """float64 outputs of OPS' ``name`` for ``vals`` (already rounded to the I/O type)."""
    _, op, act, lo, hi = next(o for o in OPS if o[0] == name)
    x = vals["x"]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if op == k.BN_ROWS_TRAINING:
            r = ref.bn_training(x, vals["scale"], vals["bias"], eps)
            var = ((x - r["mean"]) ** 2).mean(axis=axes(x), keepdims=True)
            return {"y": forward_act(r["y"], act, lo, hi), "mean": r["mean"], "variance": var}
        if op == k.BN_ROWS_INFERENCE:
            y = ref.bn_inference_variance(x, vals["mean"], vals["variance"], vals["scale"],
                                          vals["bias"], eps)
            return {"y": forward_act(y, act, lo, hi)}
        g = vals["dy"]
        if act:
            ybn = ref.bn_inference(x, vals["mean"], vals["inv_variance"], vals["scale"],
                                   vals["bias"])
            g = relu_bwd_nan(ybn, g, lo, hi)
        r = ref.bn_backward(g, x, vals["scale"], vals["mean"], vals["inv_variance"])
        return {"y": r["dx"], "dscale": r["dscale"], "dbias": r["dbias"], "g": g}


def draw(name, dtype, shape, seed, offset=0.3):
    """Inputs for OPS' ``name``: activations rounded to ``dtype`` and read back in float64,
    float32 vectors; for a RELU_BWD mask, dy is 0 where the forward is within 1e-4 of a
    clip (where float32 and float64 may take different sides, and dy then does not matter)."""
    _, op, act, lo, hi = next(o for o in OPS if o[0] == name)
    dt = KINDS[dtype][1]
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = f64((offset + rng.uniform(-1, 1, shape) * 2).astype(dt))
    v = {"x": x, "scale": rng.uniform(-2, 2, c).astype(np.float32),
         "bias": rng.uniform(-1, 1, c).astype(np.float32)}
    if op == k.BN_ROWS_INFERENCE:
        v["mean"] = rng.uniform(-0.5, 1, c).astype(np.float32)
        v["variance"] = rng.uniform(0.5, 2, c).astype(np.float32)
    if op == k.BN_ROWS_BACKWARD:
        st = ref.bn_training(x, np.ones(c), np.zeros(c), 1e-5)
        v["mean"] = st["mean"].reshape(-1).astype(np.float32)
        v["inv_variance"] = st["inv_variance"].reshape(-1).astype(np.float32)
        v["scale"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        v["bias"] = rng.uniform(-0.2, 0.6, c).astype(np.float32)
        dy = f64(rng.uniform(-1, 1, shape).astype(dt))
        if act:
            ybn = ref.bn_inference(x, v["mean"], v["inv_variance"], v["scale"], v["bias"])
            near = np.abs(ybn - lo) < 1e-4 * (1 + abs(lo))
            if np.isfinite(hi):
                near |= np.abs(ybn - hi) < 1e-4 * (1 + abs(hi))
            dy[near] = 0.0
        v["dy"] = dy
    for r in ("mean", "variance", "inv_variance", "scale", "bias"):
        if r in v:
            v[r] = np.asarray(v[r], np.float32)
    return v


def check(name, dtype, got, want, vals, what):
    op = next(o for o in OPS if o[0] == name)[1]
    x = vals["x"]
    if op == k.BN_ROWS_TRAINING:
        m = x.size // x.shape[1]
        assert_close(got["y"], want["y"], *tol("bn_training", dtype), f"{what} y")
        close_sums(got["mean_out"], want["mean"], x / m, f"{what} mean")
        close_sums(got["variance_out"], want["variance"], (x - want["mean"]) ** 2 / m,
                   f"{what} variance")
    elif op == k.BN_ROWS_INFERENCE:
        assert_close(got["y"], want["y"], *tol("bn_inference_variance", dtype), f"{what} y")
    else:
        assert_close(got["y"], want["y"], *tol("bn_backward", dtype), f"{what} dx")
        g = want["g"]
        d = (x - chan(vals["mean"], x.ndim)) * chan(vals["inv_variance"], x.ndim)
        close_sums(got["dbias"], want["dbias"], g, f"{what} dbias")
        close_sums(got["dscale"], want["dscale"], g * d, f"{what} dscale")


# ------------------------------------------------------------------ every op x kind x build x shape
@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", [o[0] for o in OPS])
@pytest.mark.parametrize("i", range(len(SHAPES)), ids=["x".join(map(str, s)) for s in SHAPES])
def test_rows_match_float64(name, dtype, baseline, i):
    need_build(dtype, baseline)
    shape = SHAPES[i]
    # x, y and dy each in another of STRIDES, a different pick per shape
    hows = tuple(STRIDES[(i + j * 2) % len(STRIDES)] for j in range(3))
    vals = draw(name, dtype, shape, [i, KINDS[dtype][0], [o[0] for o in OPS].index(name)])
    got, ybuf, cover = run_op(name, dtype, baseline, shape, hows, vals)
    what = f"{name} {dtype} {'baseline' if baseline else 'default'} {shape} {hows}"
    check(name, dtype, got, reference(name, vals), vals, what)
    assert got["threads"] == (ONEDNN_STATE.threads if ONEDNN_STATE.ok else 1), what
    # nothing written outside y's elements (the buffer's other channels or batches)
    assert np.isnan(f64(ybuf[~cover])).all(), what


# the AVX2 intrinsics (float32, bfloat16: the sums, y and dx rows but RELU_BWD's) beside
# the compiler's AVX2 build they replace: within tolerance of float64, and where no sum is
# taken (inference) or the compiler's rows take RELU_BWD's, its bits, as they round and
# contract alike; rows of 1-3136 elements (the masked last steps), strided N and C
AVX2_SHAPES = SHAPES + [(2, 3, 1, 15), (3, 2, 7, 7), (2, 2, 56, 56)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", [o[0] for o in OPS])
@pytest.mark.parametrize("i", range(len(AVX2_SHAPES)),
                         ids=["x".join(map(str, s)) for s in AVX2_SHAPES])
def test_avx2_rows_match_float64_and_the_compilers_build(name, i, dtype):
    if "avx2" not in k.bn_rows_builds():
        pytest.skip(f"this CPU runs {k.bn_rows_builds()}: no AVX2 + FMA (or no intrinsics "
                    "in this build)")
    shape = AVX2_SHAPES[i]
    hows = tuple(STRIDES[(i + j) % len(STRIDES)] for j in range(3))
    vals = draw(name, dtype, shape, [i, 41, [o[0] for o in OPS].index(name)])
    got, ybuf, cover = run_op(name, dtype, False, shape, hows, vals, isa="avx2")
    auto, _, _ = run_op(name, dtype, False, shape, hows, vals, isa="avx2_auto")
    what = f"{name} {dtype} avx2 {shape} {hows}"
    check(name, dtype, got, reference(name, vals), vals, what)
    assert np.isnan(f64(ybuf[~cover])).all(), what
    if name.startswith("inference") or name.startswith("backward_drelu"):
        for r in ("y", "dscale", "dbias"):
            assert got[r].tobytes() == auto[r].tobytes(), f"{what} {r}: not avx2_auto's bits"


@pytest.mark.parametrize("name", ["inference", "inference_relu", "inference_clamp",
                                  "backward_drelu"])
def test_avx2_bfloat16_rows_of_special_values_give_the_compilers_bits(name):
    """NaN (any payload), +-inf, -0.0, subnormals, values that round up to inf in bfloat16
    and ties to even in x (dy): the intrinsic rows give the compiler's build's bits."""
    if "avx2" not in k.bn_rows_builds():
        pytest.skip(f"this CPU runs {k.bn_rows_builds()}: no AVX2 + FMA (or no intrinsics "
                    "in this build)")
    shape = (2, 3, 5, 7)
    vals = draw(name, "bfloat16", shape, 43)
    bits = np.random.default_rng(44).integers(0, 1 << 16, shape, dtype=np.uint16)
    specials = np.array([0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x8000, 0x0001, 0x807f,
                         0x7f7f, 0xff7f, 0x3f81, 0x0000], np.uint16)
    bits.reshape(-1)[::3][:specials.size] = specials
    with np.errstate(all="ignore"):
        vals["x"] = f64(bits.view(ml_dtypes.bfloat16))
        if "dy" in vals:
            vals["dy"] = f64(bits[::-1].copy().view(ml_dtypes.bfloat16))
        got, _, _ = run_op(name, "bfloat16", False, shape, ("packed",) * 3, vals, isa="avx2")
        auto, _, _ = run_op(name, "bfloat16", False, shape, ("packed",) * 3, vals,
                            isa="avx2_auto")
    assert got["y"].tobytes() == auto["y"].tobytes(), f"{name}: not avx2_auto's bits"


@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
def test_training_statistics_of_a_large_mean(baseline):
    # x = 1000 + U(-1, 1): the variance is taken from deviations, not from sum(x^2)
    need_build("float32", baseline)
    shape = (4, 6, 7, 9)
    vals = draw("training", "float32", shape, 5, offset=1000.0)
    got, _, _ = run_op("training", "float32", baseline, shape, ("channel_slice", "packed"),
                       vals)
    want = reference("training", vals)
    check("training", "float32", got, want, vals, "offset 1000")
    assert_close(got["variance_out"], want["variance"].reshape(-1), 0.0, 1e-4, "variance")


# channels-first jobs that prefetch the next channel's rows (_bn_rows.h,
# hd_bn_prefetches: x and y, or x, dy and dx, past 24 MiB; rows of at most 8 KiB): the
# last channel of each thread, and the last of the tensor, whose next one is not read
PREFETCH_SHAPES = {"training": (65, 257, 14, 14), "backward": (43, 257, 14, 14)}


@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", ["training", "backward", "backward_drelu"])
def test_rows_that_prefetch_the_next_channel_match_float64(name, dtype):
    need_build(dtype, False)
    shape = PREFETCH_SHAPES["training" if name == "training" else "backward"]
    item = KINDS[dtype][1].itemsize
    shape = (shape[0] * 4 // item,) + shape[1:]     # 16-bit kinds: twice the rows, same bytes
    n, c, s_ = shape[0], shape[1], shape[2] * shape[3]
    tensors = 2 if name == "training" else 3
    assert n * c * s_ * item * tensors >= 24 << 20 and s_ * item <= 8192, "below the threshold"
    vals = draw(name, dtype, shape, 11)
    # x with negative N and C strides (the next channel below this one in memory)
    got, ybuf, cover = run_op(name, dtype, False, shape,
                              ("reversed", "packed", "channel_slice"), vals)
    check(name, dtype, got, reference(name, vals), vals, f"{name} {dtype} {shape}")
    assert np.isnan(f64(ybuf[~cover])).all()


# channels-first training and backward in blocks of channels (_bn_rows.h, hd_bn_block):
# x, y (and dy) each with its channels adjacent (C stride = the row) and rows of at most
# 1 KiB take up to 64 channels a pass; each thread's share is cut into such blocks, the
# last one shorter. (N, C, spatial...): blocks of 64 with 1-2 left over, of 10 (backward)
# and 20 (training) with a remainder, a share of fewer channels than a block, rows of 3.
BLOCK_SHAPES = [(3, 131, 14, 14), (33, 41, 14, 14), (2, 70, 3, 3), (4, 9, 1, 3)]


@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", [o[0] for o in OPS if o[1] != k.BN_ROWS_INFERENCE])
@pytest.mark.parametrize("shape", BLOCK_SHAPES, ids=["x".join(map(str, s)) for s in BLOCK_SHAPES])
def test_rows_in_channel_blocks_match_float64_and_one_channel_at_a_time(shape, name, dtype):
    """Blocks change only the order in which rows are read: each channel's sums add its
    rows in n order either way, so the outputs are bit for bit those of the same job run one
    channel at a time (y, or dy for backward, laid out (C, N, ...): channels not adjacent),
    and within the tolerances of float64."""
    need_build(dtype, False)
    vals = draw(name, dtype, shape, [len(shape), shape[1], len(name)])
    backward = name.startswith("backward")
    got, ybuf, cover = run_op(name, dtype, False, shape, ("packed", "packed", "packed"), vals)
    check(name, dtype, got, reference(name, vals), vals, f"{name} {dtype} {shape} blocks")
    assert np.isnan(f64(ybuf[~cover])).all()
    one = run_op(name, dtype, False, shape,
                 ("packed", "packed", "cnhw") if backward else ("packed", "cnhw"), vals)[0]
    for r in ("y", "dscale", "dbias") if backward else ("y", "mean_out", "variance_out"):
        a, b = np.ascontiguousarray(got[r]), np.ascontiguousarray(one[r])
        assert a.tobytes() == b.tobytes(), f"{name} {dtype} {shape}: {r} differs"


# (n, c) rows read as packed runs at one stride (_bn_rows.h, hd_bn_job R, W): NCHW cropped
# in W (runs of W, the H stride apart), NCDHW cropped in W (the D stride H times the H
# stride) and in H (runs of H x W); beside packed activations, read as runs that long
RUN_CASES = [((2, 5, 6, 7), ("cropped", "packed", "cropped")),
             ((3, 4, 5, 33), ("packed", "cropped", "cropped")),
             ((2, 3, 3, 4, 5), ("cropped", "cropped", "packed")),
             ((2, 3, 3, 4, 5), ("cropped_outer", "packed", "cropped_outer")),
             ((2, 70, 3, 3), ("cropped", "cropped", "cropped"))]


@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", [o[0] for o in OPS])
@pytest.mark.parametrize("shape, hows", RUN_CASES,
                         ids=["x".join(map(str, s)) + "-" + "-".join(h) for s, h in RUN_CASES])
def test_rows_in_packed_runs_match_float64(shape, hows, name, dtype, baseline):
    need_build(dtype, baseline)
    vals = draw(name, dtype, shape, [len(shape), shape[-1], len(name), len(hows[0])])
    got, ybuf, cover = run_op(name, dtype, baseline, shape, hows, vals)
    check(name, dtype, got, reference(name, vals), vals, f"{name} {dtype} {shape} {hows}")
    assert np.isnan(f64(ybuf[~cover])).all()        # the crop's other columns untouched
    if dtype == "float32" and not baseline and k.bn_rows_isa(dtype) == "avx512":
        # streamed stores, run by run
        streamed, sbuf, _ = run_op(name, dtype, baseline, shape, hows, vals, stream=True)
        assert f64(streamed["y"]).tobytes() == f64(got["y"]).tobytes()
        assert np.isnan(f64(sbuf[~cover])).all()


# streamed stores (hd_bn_stream; by default only where the call's activations pass the
# last-level cache, bn_streams_by_default): float32 rows
# masked up to each row's first 64-byte line, then MOVNTPS, then a masked tail. Rows of
# 5-196 elements, most starting inside a 64-byte line (x, y, dy in other STRIDES);
# not a single pixel (C values of one pixel are a channels-last job)
ROWS = [i for i, s in enumerate(SHAPES) if np.prod(s[2:]) > 1]


@pytest.mark.parametrize("name", [o[0] for o in OPS])
@pytest.mark.parametrize("i", ROWS, ids=["x".join(map(str, SHAPES[i])) for i in ROWS])
def test_streamed_rows_match_float64_and_the_cached_stores(name, i):
    need_streams()
    shape = SHAPES[i]
    hows = tuple(STRIDES[(i + j) % len(STRIDES)] for j in range(3))
    vals = draw(name, "float32", shape, [i, 7, [o[0] for o in OPS].index(name)])
    got, ybuf, cover = run_op(name, "float32", False, shape, hows, vals, stream=True)
    what = f"{name} streamed {shape} {hows}"
    check(name, "float32", got, reference(name, vals), vals, what)
    assert np.isnan(f64(ybuf[~cover])).all(), what
    cached, _, _ = run_op(name, "float32", False, shape, hows, vals, stream=False)
    for r in ("y", "mean_out", "variance_out", "dscale", "dbias"):   # the same values
        np.testing.assert_array_equal(f64(got[r]), f64(cached[r]), f"{what} {r}")


# each row's masked head, from y's start at every 4-byte offset of a 64-byte line: rows
# shorter than the head, of exactly 16 and 32 elements, and around them; rows S * 4 bytes
# apart, so that the rows of one job start at several offsets
LINE_ROWS = (2, 5, 15, 16, 17, 31, 32, 33, 49)


@pytest.mark.parametrize("offset", range(0, 64, 4))
@pytest.mark.parametrize("name", [o[0] for o in OPS])
def test_streamed_rows_from_every_offset_of_a_line(name, offset):
    need_streams()
    for j, s_ in enumerate(LINE_ROWS):
        shape = (3, 2, s_)
        hows = ("packed", STRIDES[j % 4], STRIDES[(j + 1) % 4])
        vals = draw(name, "float32", shape, [offset, j, [o[0] for o in OPS].index(name)])
        got, ybuf, cover = run_op(name, "float32", False, shape, hows, vals, stream=True,
                                  y_offset=offset)
        what = f"{name} streamed {shape} {hows} y at {offset}"
        check(name, "float32", got, reference(name, vals), vals, what)
        assert np.isnan(f64(ybuf[~cover])).all(), what
        cached, _, _ = run_op(name, "float32", False, shape, hows, vals, stream=False,
                              y_offset=offset)
        for r in ("y", "mean_out", "variance_out", "dscale", "dbias"):
            np.testing.assert_array_equal(f64(got[r]), f64(cached[r]), f"{what} {r}")


# float32 y off 4-byte boundaries (NumPy makes such arrays from a buffer at an odd
# offset): no element of such a row is ever on a 64-byte boundary, so its rows are not
# streamed (MOVNTPS there faulted and ended the process), whether asked for or at a size
# that streams by default, through bn_rows and through the engine. In a subprocess, so
# that a fault fails the test instead of ending the run.
_OFF_WORD = r"""
import sys
import numpy as np
import hipdnn_async as hd
from hipdnn_async.providers.cpu import _kernels as k
from hipdnn_async.runtime._buffer import aligned_empty

path, off = sys.argv[1], int(sys.argv[2])
dims = (32, 64, 56, 56)                  # 25.7 MB of float32 y: the default streams
c, size = dims[1], int(np.prod(dims)) * 4


def y_at(offset):
    y = aligned_empty(size + 64)[offset:offset + size].view(np.float32).reshape(dims)
    y[...] = np.nan
    return y


rng = np.random.default_rng(off)
x = rng.uniform(-1, 1, dims).astype(np.float32) + 0.3
s, b = (rng.uniform(-1, 1, (1, c, 1, 1)).astype(np.float32) for _ in "sb")
vec = {r: np.ones(c, np.float32) for r in ("scale", "bias", "mean", "variance")}
try:
    k.bn_rows(k.BN_ROWS_INFERENCE, x[:2], y_at(off)[:2], 0, stream=True, **vec)
    refused = False
except ValueError as e:
    refused = "cannot stream y" in str(e)
g = hd.Graph(name="bn_off_word")
xt = g.tensor(dims=dims, layout="NCHW", name="x")
st, bt = (g.tensor(dims=(1, c, 1, 1), name=n) for n in ("s", "b"))
yt, mt, it, _, _ = g.batchnorm(xt, st, bt, epsilon=1e-4)
for t in (yt, mt, it):
    t.set_output(True)
y = y_at(off)
with hd.Device("cpu") as dev:
    plan = dev.build_sync(g, engine="ONEDNN_ENGINE")
    plan.execute_sync({xt: x, st: s, bt: b, yt: y, mt: np.empty(s.shape, np.float32),
                       it: np.empty(s.shape, np.float32)})
np.savez(path, x=x, s=s, b=b, y=y, refused=refused, algorithm=str(plan.algorithm))
"""


@pytest.mark.parametrize("offset", [1, 2, 3])
def test_rows_off_4_byte_boundaries_are_not_streamed(tmp_path, offset):
    need_build("float32", False)
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    path = tmp_path / "y.npz"
    p = subprocess.run([sys.executable, "-c", _OFF_WORD, str(path), str(offset)],
                       env=_worker_env(2), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit status {p.returncode}: {p.stderr[-2000:]}"
    with np.load(path) as f:
        got = dict(f)
    assert bool(got["refused"]), "bn_rows(stream=True) ran on a y off 4-byte boundaries"
    assert str(got["algorithm"]).startswith("bn_rows:")
    want = ref.bn_training(f64(got["x"]), got["s"], got["b"], 1e-4)
    assert_close(got["y"], want["y"], *tol("bn_training", "float32"), f"y at {offset}")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_streaming_16_bit_rows_is_refused(dtype):
    need_build(dtype, False)
    vals = draw("inference", dtype, SHAPES[2], 3)
    with pytest.raises(ValueError, match="cannot stream y"):
        run_op("inference", dtype, False, SHAPES[2], ("packed",) * 3, vals, stream=True)
    with pytest.raises(ValueError, match="cannot stream y .*rows baseline.*only the "
                       "AVX-512 intrinsic rows"):   # as run, and why
        run_op("inference", "float32", True, SHAPES[2], ("packed",) * 3,
               draw("inference", "float32", SHAPES[2], 3), stream=True)


def test_stream_takes_none_true_or_false():
    x, y, _ = _args()
    v = {r: np.ones(3, np.float32) for r in ("scale", "bias", "mean", "variance")}
    with pytest.raises(TypeError, match="^bn_rows: stream is 'yes'; need None, True or False"):
        k.bn_rows(k.BN_ROWS_INFERENCE, x, y, 0, stream="yes", **v)
    assert np.isnan(y).all()                                        # nothing ran


# ------------------------------------------------------------------ special values
SPECIAL_SHAPE = (2, 9, 5, 7)
UNWRITTEN = 1000.0   # y's fill where NaN is expected: an element not written fails


def _special_training(dtype):
    """x, scale, bias with, per channel: 0 finite; 1 a NaN in x; 2 +inf in x; 3 -inf in x;
    4 scale NaN; 5 bias NaN; 6 bias -inf; 7 scale 0 and bias -0.0; 8 finite."""
    v = draw("training", dtype, SPECIAL_SHAPE, 11)
    x = v["x"]
    x[1, 1, 2, 3], x[0, 2, 4, 6], x[1, 3, 0, 0] = np.nan, np.inf, -np.inf
    v["scale"][4], v["bias"][5], v["bias"][6] = np.nan, np.nan, -np.inf
    v["scale"][7], v["bias"][7] = 0.0, -0.0
    return v


@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", ["training", "training_relu", "training_clamp"])
def test_training_special_values(name, dtype, baseline):
    need_build(dtype, baseline)
    vals = _special_training(dtype)
    got, _, _ = run_op(name, dtype, baseline, SPECIAL_SHAPE, ("channel_slice", "reversed"),
                       vals, fill=UNWRITTEN)
    want = reference(name, vals)
    what = f"{name} {dtype}"
    assert_close(got["y"], want["y"], *tol("bn_training", dtype), f"{what} y")
    for r, w in (("mean_out", want["mean"]), ("variance_out", want["variance"])):
        assert_close(got[r], w.reshape(-1), 1e-5, 1e-5, f"{what} {r}")
    y = f64(got["y"])
    assert np.isnan(y[:, [1, 2, 3, 4, 5]]).all(), what           # NaN statistics / vectors
    assert np.isfinite(y[:, [0, 7, 8]]).all(), what              # other channels untouched
    if name == "training":
        assert (y[:, 6] == -np.inf).all(), what
    else:                    # RELU_FWD: NaN kept, -inf -> lower, never -0.0
        assert (y[:, 6] == (0.0 if name == "training_relu" else -0.25)).all(), what
        assert (y[:, 7] == 0.0).all(), what
        assert not np.signbit(y[y == 0]).any(), what


@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", ["inference", "inference_relu", "inference_clamp"])
def test_inference_special_values(name, dtype, baseline):
    # per channel: 0 finite; 1 NaN, 2 +inf, 3 -inf in x; 4 mean NaN; 5 variance +inf;
    # 6 scale NaN; 7 bias -inf; 8 variance -1 (sqrt of a negative: NaN)
    need_build(dtype, baseline)
    _, _, act, lo, hi = next(o for o in OPS if o[0] == name)
    vals = draw(name, dtype, SPECIAL_SHAPE, 12)
    x = vals["x"]
    x[1, 1, 2, 3], x[0, 2, 4, 6], x[1, 3, 0, 0] = np.nan, np.inf, -np.inf
    vals["mean"][4], vals["variance"][5], vals["scale"][6] = np.nan, np.inf, np.nan
    vals["bias"][7], vals["variance"][8] = -np.inf, -1.0
    got, _, _ = run_op(name, dtype, baseline, SPECIAL_SHAPE, ("batch_step", "cnhw"),
                       vals, fill=UNWRITTEN)
    want = reference(name, vals)
    assert_close(got["y"], want["y"], *tol("bn_inference_variance", dtype), f"{name} {dtype} y")
    y = f64(got["y"])
    assert np.isnan(y[1, 1, 2, 3]) and np.isnan(y[:, [4, 6, 8]]).all()
    assert np.isfinite(np.delete(y[:, 1], np.ravel_multi_index((1, 2, 3), (2, 5, 7)))).all()
    # scale * (+-inf - mean): +-inf, or the clip it is clamped to
    inf2 = np.inf * np.sign(vals["scale"][2])
    inf3 = -np.inf * np.sign(vals["scale"][3])
    for got_v, v in ((y[0, 2, 4, 6], inf2), (y[1, 3, 0, 0], inf3), (y[0, 7, 0, 0], -np.inf)):
        assert got_v == (min(max(v, lo), hi) if act else v), (name, got_v, v)
    # variance +inf: scale / sqrt(inf) = 0, so y is the bias (rounded to the I/O type)
    b5 = f64(vals["bias"][5].astype(KINDS[dtype][1]))
    assert (y[:, 5] == (min(max(b5, lo), hi) if act else b5)).all()
    if act:
        assert not np.signbit(y[y == 0]).any()


@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", list(KINDS))
def test_backward_special_values(dtype, baseline):
    # per channel: 0 finite; 1 NaN in dy; 2 +inf in dy; 3 scale NaN; 4 inv_variance NaN;
    # 5 mean NaN; 6 finite; 7 +inf in x (dscale infinite: dx infinite, of the sign of
    # -(x - mean) * dscale)
    need_build(dtype, baseline)
    shape = (2, 8, 5, 7)
    vals = draw("backward", dtype, shape, 13)
    dy = vals["dy"]
    dy[1, 1, 2, 3], dy[0, 2, 4, 6] = np.nan, np.inf
    vals["x"][1, 7, 3, 3] = np.inf
    vals["scale"][3], vals["inv_variance"][4], vals["mean"][5] = np.nan, np.nan, np.nan
    got, _, _ = run_op("backward", dtype, baseline, shape, ("reversed", "channel_slice",
                                                            "batch_step"), vals, fill=UNWRITTEN)
    want = reference("backward", vals)
    assert_close(got["y"], want["y"], *tol("bn_backward", dtype), f"{dtype} dx")
    for r in ("dscale", "dbias"):
        assert_close(got[r], want[r].reshape(-1), 1e-5, 1e-5, f"{dtype} {r}")
    dx = f64(got["y"])
    assert np.isnan(dx[:, [1, 3, 4, 5]]).all() and np.isfinite(dx[:, [0, 6]]).all()
    assert np.isfinite(got["dbias"][[0, 3, 4, 5, 6, 7]]).all()       # sums of dy only
    assert np.isinf(got["dscale"][7]) and np.isinf(dx[:, 7]).sum() > dx[:, 7].size // 2


@pytest.mark.parametrize("baseline", [True, False], ids=["baseline", "default"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("name", ["backward_drelu", "backward_drelu_clipped"])
def test_backward_drelu_special_values(name, dtype, baseline):
    # per channel: 0 finite; 1 a NaN forward value (x NaN); 2 bias NaN (every forward
    # value NaN); 3 dy +inf and 4 dy NaN where the mask is off (forward below lower);
    # 5 dy +inf where it is on; 6 finite
    need_build(dtype, baseline)
    _, _, _, lo, hi = next(o for o in OPS if o[0] == name)
    shape = (2, 7, 5, 7)
    vals = draw(name, dtype, shape, 14)
    x, dy = vals["x"], vals["dy"]
    x[1, 1, 2, 3] = np.nan
    vals["bias"][2] = np.nan
    ybn = ref.bn_inference(x, vals["mean"], vals["inv_variance"], vals["scale"], vals["bias"])
    off = [tuple(np.argwhere(ybn[:, c] < lo - 1e-3)[0]) for c in (3, 4)]
    on = tuple(np.argwhere((ybn[:, 5] > lo + 1e-3) & (ybn[:, 5] < hi - 1e-3))[0])
    dy[(off[0][0], 3) + off[0][1:]] = np.inf
    dy[(off[1][0], 4) + off[1][1:]] = np.nan
    dy[(on[0], 5) + on[1:]] = np.inf
    got, _, _ = run_op(name, dtype, baseline, shape, ("cnhw", "packed", "reversed"), vals,
                       fill=UNWRITTEN)
    want = reference(name, vals)
    what = f"{name} {dtype}"
    assert_close(got["y"], want["y"], *tol("bn_backward", dtype), f"{what} dx")
    for r in ("dscale", "dbias"):
        assert_close(got[r], want[r].reshape(-1), 1e-5, 1e-5, f"{what} {r}")
    dx = f64(got["y"])
    assert np.isnan(dx[:, [1, 2]]).all() and np.isnan(got["dbias"][[1, 2]]).all(), what
    assert np.isfinite(dx[:, [0, 3, 4, 6]]).all(), what             # masked-off dy unseen
    assert np.isfinite(got["dbias"][[0, 3, 4, 6]]).all(), what
    assert got["dbias"][5] == np.inf, what


# ------------------------------------------------------------------ OpenMP team
def _worker():
    spec = importlib.util.spec_from_file_location("_bn_rows_worker", HERE / "_bn_rows_worker.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_run_on_onednn_team_and_match_the_baseline():
    """With oneDNN loaded the rows run on its OpenMP team (the thread count returned is
    its ``omp_get_max_threads``), and the default build agrees with the baseline one and
    with float64."""
    state = ONEDNN_STATE
    if not state.ok:
        pytest.skip(f"oneDNN does not load here: {state.reason}")
    from hipdnn_async.runtime import _onednn
    shape = (2, 6, 9, 9)
    vals = draw("training_relu", "float32", shape, 21)
    want = reference("training_relu", vals)
    got = {}
    for baseline in (True, False):
        got[baseline] = run_op("training_relu", "float32", baseline, shape,
                               ("packed", "packed"), vals)[0]
        assert got[baseline]["threads"] == _onednn.max_threads() == state.threads
        check("training_relu", "float32", got[baseline], want, vals, f"baseline={baseline}")
    np.testing.assert_allclose(got[False]["y"], got[True]["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[False]["mean_out"], got[True]["mean_out"], rtol=1e-6)


def _worker_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=os.pathsep.join(
        [str(pathlib.Path(k.__file__).resolve().parents[3])] + sys.path))


def _same_bits(got, here, phase, n, what):
    """Every output of ``here`` (this process) equals ``got``'s ``phase`` bit for bit
    (NaN payloads included), each case having run on ``n`` threads."""
    for key, v in here.items():
        if key.endswith("/threads"):
            assert int(got[f"{phase}/{key}"]) == n, (what, phase, key)
        else:
            assert np.array_equal(got[f"{phase}/{key}"].view(np.uint8),
                                  np.ascontiguousarray(v).view(np.uint8)), (what, phase, key)


def test_results_do_not_depend_on_the_team_size(tmp_path):
    """Every channel runs on one thread: 1, 2 (here: this process) and 3 threads, and no
    team at all before oneDNN is loaded, give the same bits."""
    state = ONEDNN_STATE
    if not state.ok:
        pytest.skip(f"oneDNN does not load here: {state.reason}")
    from hipdnn_async.runtime import _onednn
    if _onednn.max_threads() < 2:
        pytest.skip("oneDNN's team has one thread here: nothing to compare with 1 thread")
    here = _worker().run_all()
    assert {int(v) for key, v in here.items() if key.endswith("/threads")} == \
        {_onednn.max_threads()}
    for threads in (1, 3):
        path = tmp_path / f"t{threads}.npz"
        p = subprocess.run([sys.executable, str(HERE / "_bn_rows_worker.py"), str(path)],
                           env=_worker_env(threads), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        with np.load(path) as f:
            got = dict(f)
        assert int(got["max_threads"]) == threads
        _same_bits(got, here, "unloaded", 1, f"OMP_NUM_THREADS={threads}")
        _same_bits(got, here, "loaded", threads, f"OMP_NUM_THREADS={threads}")


def test_fork_child_runs_the_rows_on_its_own_thread(tmp_path):
    """A process forked after its parent ran the rows on oneDNN's team (whose threads do
    not survive fork) runs them on its calling thread instead: no hang, the same bits."""
    state = ONEDNN_STATE
    if not state.ok:
        pytest.skip(f"oneDNN does not load here: {state.reason}")
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    here = _worker().run_all()
    path = tmp_path / "fork.npz"
    p = subprocess.run([sys.executable, str(HERE / "_bn_rows_worker.py"), str(path), "fork"],
                       env=_worker_env(2), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    with np.load(path) as f:
        got = dict(f)
    _same_bits(got, here, "loaded", 2, "parent")
    _same_bits(got, here, "forked", 1, "fork child")


# ------------------------------------------------------------------ errors
def _args(shape=(2, 3, 4, 5), dtype=np.float32):
    x = np.ones(shape, dtype)
    c = shape[1]
    v = {r: np.ones(c, np.float32) for r in ("scale", "bias", "mean_out", "variance_out")}
    return x, np.full_like(x, np.nan), v


@pytest.mark.parametrize("case, match", [
    ("kind", "element kind 3"),
    ("itemsize", "x has 2-byte elements; kind 0 has 4"),
    ("op", "op 9"),
    ("rank", r"x has dims \(2, 3\); need \(N, C, spatial...\)"),
    ("dims", r"y has dims \(2, 3, 4, 4\); need \(N, C, spatial...\) equal to \(2, 3, 4, 5\)"),
    ("spatial", r"x's spatial elements are neither one packed run nor packed runs at one "
                r"stride \(strides"),
    ("spatial_y", r"y's spatial elements are neither one packed run nor packed runs"),
    ("runs", r"y's runs of 8 elements and another's of 4 do not split one another"),
    ("length", "scale has 4 values; 3 channels"),
    ("missing", "op 0 needs mean_out, variance_out"),
    ("missing_inference", "op 1 needs mean, variance"),
    ("missing_backward", "op 2 needs inv_variance, dscale, dbias"),
    ("missing_bias_drelu", "op 2 needs bias"),
    ("no_dy", "backward needs dy"),
    ("dy_dims", r"dy has dims \(2, 3, 4, 6\)"),
    ("read_only", "y is read-only"),
    ("vector_dtype", r"scale is not a contiguous float32 vector \("),
    ("vector_stride", r"bias is not a contiguous float32 vector \("),
    ("vector_read_only", "mean_out is not a contiguous float32 vector that can be written"),
    ("vector_byte_order", r"scale is not a contiguous float32 vector \("),
    ("out_byte_order", "variance_out is not a contiguous float32 vector that can be written"),
    ("x_byte_order", r"x is in non-native byte order \(>f4\)"),
    ("empty_n", r"x has dims \(0, 3, 4, 5\), no elements; need N, C and every spatial"),
    ("empty_c", r"x has dims \(2, 0, 4, 5\), no elements"),
    ("empty_h", r"x has dims \(2, 3, 0, 5\), no elements"),
])
def test_errors_are_clear(case, match):
    x, y, v = _args()
    op, kind, kw = k.BN_ROWS_TRAINING, 0, dict(v)
    if case == "kind":
        kind = 3
    elif case == "itemsize":
        x, y = x.astype(np.float16), np.full(x.shape, np.nan, np.float16)
    elif case == "op":
        op = 9
    elif case == "rank":
        x, y = np.ones((2, 3), np.float32), np.full((2, 3), np.nan, np.float32)
    elif case == "dims":
        y = np.full((2, 3, 4, 4), np.nan, np.float32)
    elif case == "spatial":
        x = np.ones((2, 3, 4, 10), np.float32)[..., ::2]
    elif case == "spatial_y":       # W not packed
        y = np.full((2, 3, 4, 10), np.nan, np.float32)[..., ::2]
    elif case == "runs":            # x in runs of 4 (W cropped), y of 8 (H cropped)
        x = np.ones((2, 3, 2, 2, 6), np.float32)[..., :4]
        yb = np.full((2, 3, 2, 11), np.nan, np.float32)
        y = np.lib.stride_tricks.as_strided(yb, (2, 3, 2, 2, 4), yb.strides[:3] + (16, 4))
        kw = {"scale": v["scale"], "bias": v["bias"], "mean": v["scale"],
              "variance": v["scale"]}
        op = k.BN_ROWS_INFERENCE
    elif case == "length":
        kw["scale"] = np.ones(4, np.float32)
    elif case == "missing":
        del kw["mean_out"], kw["variance_out"]
    elif case == "missing_inference":
        op = k.BN_ROWS_INFERENCE
        kw = {"scale": v["scale"], "bias": v["bias"]}
    elif case in ("missing_backward", "missing_bias_drelu", "no_dy", "dy_dims"):
        op = k.BN_ROWS_BACKWARD
        kw = {"scale": v["scale"], "mean": v["scale"]}
        if case != "no_dy":
            kw["dy"] = np.ones((2, 3, 4, 6) if case == "dy_dims" else x.shape, np.float32)
        if case in ("missing_bias_drelu", "no_dy", "dy_dims"):
            kw.update(inv_variance=v["scale"], dscale=np.empty(3, np.float32),
                      dbias=np.empty(3, np.float32))
        if case == "missing_bias_drelu":
            kw["act"] = True
    elif case == "read_only":
        y.flags.writeable = False
    elif case == "vector_dtype":
        kw["scale"] = np.ones(3, np.float64)
    elif case == "vector_stride":
        kw["bias"] = np.ones(6, np.float32)[::2]
    elif case == "vector_read_only":
        kw["mean_out"] = np.empty(3, np.float32)
        kw["mean_out"].flags.writeable = False
    elif case == "vector_byte_order":     # was read in C as native floats: other numbers
        kw["scale"] = np.ones(3, ">f4")
    elif case == "out_byte_order":
        kw["variance_out"] = np.empty(3, ">f4")
    elif case == "x_byte_order":
        x = x.astype(">f4")
    elif case.startswith("empty"):   # was "neither one packed run" (NumPy's strides)
        dims = {"empty_n": (0, 3, 4, 5), "empty_c": (2, 0, 4, 5), "empty_h": (2, 3, 0, 5)}[case]
        x, y = np.ones(dims, np.float32), np.full(dims, np.nan, np.float32)
        if case == "empty_c":
            kw = {}
    with pytest.raises(ValueError, match=f"^bn_rows: {match}"):
        k.bn_rows(op, x, y, kind, epsilon=1e-5, **kw)
    assert np.isnan(y.astype(np.float64)).all()                    # nothing ran


def test_vectors_of_any_float32_buffer_give_the_ndarray_results():
    """Per-channel vectors are read in C from 1-D float32 ndarrays, and through the buffer
    protocol from anything else a float32 memoryview takes (array.array here): the same
    values either way."""
    import array
    _, _, v = _args()
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 5)).astype(np.float32)
    got = {}
    for how in ("ndarray", "buffer"):
        y = np.full(x.shape, np.nan, np.float32)
        outs = {r: (np.full(3, np.nan, np.float32) if how == "ndarray"
                    else array.array("f", [np.nan] * 3)) for r in ("mean_out", "variance_out")}
        vec = {r: (v[r] if how == "ndarray" else array.array("f", v[r].tolist()))
               for r in ("scale", "bias")}
        k.bn_rows(k.BN_ROWS_TRAINING, x, y, 0, epsilon=1e-5, **vec, **outs)
        got[how] = (y, np.asarray(outs["mean_out"], np.float32),
                    np.asarray(outs["variance_out"], np.float32))
    for a, b in zip(got["ndarray"], got["buffer"]):
        np.testing.assert_array_equal(a, b)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(got["buffer"][1], xd.mean(axis=(0, 2, 3)), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("dims", [(1, 3, 1, 1), (1, 3, 1, 1, 1), (1, 3)])
def test_vectors_of_a_graphs_per_channel_dims_give_the_1d_results(dims):
    """Per-channel ndarrays of a graph's dims (1, C, 1, ...) are read as they are (the
    engine passes its bound arrays, without 1-D views): the same bits as 1-D vectors, every
    op, outputs (mean_out, variance_out; dscale, dbias) written in place; ndarray
    subclasses (``np.memmap``'s kind) too. Other dims, dtypes, byte orders and strides are
    refused, naming the vector and what is wrong with it."""
    x = np.random.default_rng(5).standard_normal((2, 3, 4, 5)).astype(np.float32)
    dy = np.random.default_rng(6).standard_normal(x.shape).astype(np.float32)
    v = {"scale": np.float32([0.5, -1.5, 2.0]), "bias": np.float32([0.1, 0.2, -0.3]),
         "mean": np.float32([0.0, 0.1, -0.1]), "variance": np.float32([1.0, 0.5, 2.0]),
         "inv_variance": np.float32([1.0, 1.4, 0.7])}
    for name, op, act, lo, hi in OPS:
        got = {}
        for shape in ((3,), dims):
            outs = {r: np.full(shape, np.nan, np.float32)
                    for r in ("mean_out", "variance_out", "dscale", "dbias")}
            kw = op_vectors(op, act, {r: a.reshape(shape) for r, a in v.items()}, outs)
            y = np.full(x.shape, np.nan, np.float32)
            extra = {"dy": dy} if op == k.BN_ROWS_BACKWARD else {"epsilon": 1e-5}
            k.bn_rows(op, x, y, 0, act=act, lower=lo, upper=hi, **kw, **extra)
            got[shape] = [y] + [outs[r].reshape(-1) for r in sorted(outs)]
        for a, b in zip(got[(3,)], got[dims]):
            assert a.tobytes() == b.tobytes(), (name, dims)
    # an ndarray subclass (np.memmap's kind) is read as an ndarray, any dims above
    class Sub(np.ndarray):
        pass
    y = np.full(x.shape, np.nan, np.float32)
    kw = {r: v[r].reshape(dims).view(Sub) for r in ("scale", "bias", "mean", "variance")}
    k.bn_rows(k.BN_ROWS_INFERENCE, x, y, 0, epsilon=1e-5, **kw)
    want = np.full(x.shape, np.nan, np.float32)
    k.bn_rows(k.BN_ROWS_INFERENCE, x, want, 0, epsilon=1e-5,
              **{r: v[r] for r in ("scale", "bias", "mean", "variance")})
    assert y.tobytes() == want.tobytes()
    inf = dict(bias=v["bias"], mean=v["mean"], variance=v["variance"], epsilon=1e-5)
    for bad, why in ((v["scale"].reshape(3, 1), r"dims \(3, 1\); need \(C,\) or \(1, C, 1"),
                     (v["scale"].reshape(dims).astype(np.float64), "dtype <f8"),
                     (v["scale"].reshape(dims).astype(">f4"), "dtype >f4"),
                     (np.repeat(v["scale"], 2)[::2].reshape(dims), "strides")):
        with pytest.raises(ValueError, match=r"bn_rows: scale is not a contiguous float32 "
                                             r"vector \(" + why):
            k.bn_rows(k.BN_ROWS_INFERENCE, x, np.empty_like(x), 0, scale=bad, **inf)


def test_a_buffer_vector_stays_acquired_until_the_rows_are_done():
    """A vector read through the buffer protocol stays acquired for the whole call: while
    the rows run (without the GIL) another thread cannot release it. Was: released as soon
    as it was read, so a ``memoryview.release()`` then ``mmap.close()`` from another
    thread during the call unmapped the memory the rows then wrote (a segfault). The
    other thread waits for the GIL, which the call first lets go of in the rows, so its
    attempt falls inside the call (a trial where it does not is repeated); it must be
    refused, and the mean written is the float64 mean."""
    import threading
    import time
    c = 64
    x = np.random.default_rng(5).standard_normal((32, c, 28, 56)).astype(np.float32)
    y = np.empty_like(x)
    want = x.astype(np.float64).mean(axis=(0, 2, 3))
    for _ in range(20):
        store = np.full(c, np.nan, np.float32)
        view = memoryview(store)
        seen = {}
        started = threading.Event()

        def attempt(view=view, seen=seen, started=started):
            started.wait()
            seen["at"] = time.perf_counter()
            try:
                view.release()
                seen["released"] = True
            except BufferError:
                seen["released"] = False

        thread = threading.Thread(target=attempt)
        thread.start()
        started.set()
        try:
            k.bn_rows(k.BN_ROWS_TRAINING, x, y, 0, epsilon=1e-5, scale=np.ones(c, np.float32),
                      bias=np.zeros(c, np.float32), mean_out=view,
                      variance_out=np.empty(c, np.float32), baseline=True)
        except ValueError:          # released before the call read it: a clear error
            thread.join()
            continue
        end = time.perf_counter()
        thread.join()
        if seen["at"] < end:
            assert seen["released"] is False
            np.testing.assert_allclose(store, want, rtol=1e-5, atol=1e-6)
            return
    pytest.fail("no release attempt fell inside a call")


# ------------------------------------------------------------------ ONEDNN_ENGINE
BN_PATTERNS = ("BN_TRAINING", "BN_TRAINING_RELU", "BN_INFERENCE_VARIANCE", "BN_BACKWARD",
               "BN_INFERENCE_DRELU_BACKWARD")


@pytest.fixture(scope="module")
def dev():
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    with hd.Device("cpu") as d:
        yield d


@pytest.mark.parametrize("layout", ["NCHW", "NCDHW", "NHWC", "NDHWC", "NCDHW_nonpacked",
                                    "NHWC_nonpacked"])
@pytest.mark.parametrize("pattern", BN_PATTERNS)
def test_engine_takes_the_rows_on_packed_memory(dev, pattern, layout):
    # channels first with the spatial elements packed, or channels last (_bn_last.h);
    # non-packed memory: the rows on dense copies, alone but in inference (oneDNN's
    # batchnorm is not offered for the others: _bnorm.BN_BUILDERS), where oneDNN's
    # primitives on reordered copies are candidates too; without timing the rows run
    rows = "bn_rows:" + k.bn_rows_isa("float32") + ("" if "_" not in layout else "+dense")
    training = pattern != "BN_INFERENCE_VARIANCE"
    for knobs in ({}, {BENCH: 1}):
        h, checks, got = tp.run_case(dev, pattern, "float32", layout, engine=ONEDNN,
                                     knobs=knobs)
        alg = h.plan.algorithm
        names = [n for n, _ in alg.trials]
        if training:
            assert names == [rows], names
        else:
            assert [n for n in names if n.startswith("bn_rows:")] == [rows], names
        assert str(alg) in names, (str(alg), names)
        if not knobs:
            assert str(alg) == rows, names
        tp.check_case(h, checks, got, f"{pattern} {layout} {knobs}")


@pytest.mark.parametrize("dims, strides", [
    ((2, 5, 4, 6), (9 * 24, 24, 6, 1)),                 # a channel slice: 5 of 9 channels
    ((3, 4, 2, 3, 3), (18, 3 * 18, 9, 3, 1)),           # memory (C, N, D, H, W)
])
def test_engine_takes_the_rows_on_free_n_and_c_strides(dev, dims, strides):
    g = hd.Graph(name="bn_slice")
    c, nd = dims[1], len(dims)
    x = g.tensor(dims=dims, strides=strides, name="x")
    s, b = (g.tensor(dims=(1, c) + (1,) * (nd - 2), name=n) for n in ("s", "b"))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=1e-4)
    y.set_strides(strides)
    for t in (y, mean, inv):
        t.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert str(plan.algorithm).startswith("bn_rows:")
    rng = np.random.default_rng(3)
    xa = _strided(dims, strides, rng.uniform(-1, 1, dims))
    sa, ba = (rng.uniform(-1, 1, (1, c) + (1,) * (nd - 2)).astype(np.float32) for _ in "sb")
    ya = _strided(dims, strides, np.full(dims, np.nan))
    ma, ia = np.empty(s.dims, np.float32), np.empty(s.dims, np.float32)
    plan.execute_sync({x: xa, s: sa, b: ba, y: ya, mean: ma, inv: ia})
    want = ref.bn_training(xa, sa, ba, 1e-4)
    assert_close(ya, want["y"], *tol("bn_training", "float32"), "y")
    assert_close(ma, want["mean"], 1e-6, 1e-5, "mean")
    assert_close(ia, want["inv_variance"], 1e-5, 1e-5, "inv_variance")


def _strided(dims, strides, values):
    """float32 ``values`` in a buffer with element ``strides`` (rest NaN)."""
    size = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    buf = np.full(size, np.nan, np.float32)
    a = np.lib.stride_tricks.as_strided(buf, dims, tuple(4 * s for s in strides))
    a[...] = values
    return a


def test_two_streams_run_rows_plans_at_once():
    """bn_rows plans queued on two streams at once (work too long to run inline at
    submission: each stream's worker thread runs it): the oneDNN gate takes their teams in
    turn, and each execution gets its own results."""
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    g = hd.Graph(name="bn_streams")
    dims = (8, 32, 28, 28)
    x = g.tensor(dims=dims, layout="NCHW", name="x")
    s, b = (g.tensor(dims=(1, 32, 1, 1), name=n) for n in ("s", "b"))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=1e-4)
    r = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    for t in (r, mean, inv):
        t.set_output(True)
    with hd.Device("cpu", streams=2) as dev2:
        plan = dev2.build_sync(g, engine=ONEDNN)
        assert str(plan.algorithm).startswith("bn_rows:")
        packs = []
        for i in range(8):
            rng = np.random.default_rng(60 + i)
            packs.append({x: rng.uniform(-1, 1, dims).astype(np.float32) + i,
                          s: rng.uniform(-2, 2, s.dims).astype(np.float32),
                          b: rng.uniform(-1, 1, b.dims).astype(np.float32),
                          r: np.full(dims, np.nan, np.float32),
                          mean: np.full(s.dims, np.nan, np.float32),
                          inv: np.full(s.dims, np.nan, np.float32)})
        handles = [plan.submit(p, stream=i % 2) for i, p in enumerate(packs)]
        for h in handles:
            h.result(timeout=60)
        assert [st["completed"] for st in dev2.metrics()["streams"]] == [4, 4]
    for p in packs:
        want = ref.bn_training(p[x], p[s], p[b], 1e-4)
        assert_close(p[r], ref.relu(want["y"]), *tol("bn_training", "float32"), "y")
        assert_close(p[mean], want["mean"], 1e-6, 1e-5, "mean")
        assert_close(p[inv], want["inv_variance"], 1e-5, 1e-5, "inv_variance")


@pytest.mark.parametrize("baseline", [False, True], ids=["default", "baseline"])
def test_long_rows_sum_in_float64_chunks(baseline):
    """One image of 2048 x 2048 (a 4 Mi-element row): the sums of a row go to float64 every
    HD_BN_CHUNK elements, so x = 1000 + N(0, 1) keeps its mean to float64's reach (float32
    lanes over the whole row put y 3.3e-4 off); bounds far inside the tolerance table's, as
    the lost tail of a row shows only there."""
    x = (1000 + np.random.default_rng(8).standard_normal((1, 1, 2048, 2048))).astype(np.float32)
    y = np.empty_like(x)
    mean, var = np.empty(1, np.float32), np.empty(1, np.float32)
    k.bn_rows(k.BN_ROWS_TRAINING, x, y, 0, scale=np.ones(1, np.float32),
              bias=np.zeros(1, np.float32), mean_out=mean, variance_out=var, epsilon=1e-5,
              baseline=baseline)
    x64 = x.astype(np.float64)
    assert abs(mean[0] - x64.mean()) <= 1e-7 * x64.mean()
    assert abs(var[0] - x64.var()) <= 1e-5 * x64.var()
    want = (x64 - x64.mean()) / np.sqrt(x64.var() + 1e-5)
    assert np.abs(y - want).max() <= 1e-4


@pytest.mark.parametrize("off,sigma", [(3e4, 0.5), (3e4, 0.1), (1e4, 1.0)],
                         ids=lambda v: f"{v:g}")
@pytest.mark.parametrize("shape", [(2, 20, 2, 3), (4, 3, 8, 8), (1, 17, 2, 2, 5)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("isa", ["baseline", "avx2_auto", "avx2", "avx512_auto", "avx512"])
def test_training_on_offset_data_matches_float64(isa, shape, off, sigma):
    """float32 training on x = off + sigma N(0, 1), channels-first: y within the training
    tolerance of float64. y is computed from the float32 mean mf, whose rounding over sigma
    (3e4: half an ulp is 1e-3) once put y 4.3e-3 off at sigma 0.2 and 9e-3 at 0.1; the
    bias now takes the float64 mean's remainder, bias - a (mean - mf)."""
    if isa not in k.bn_rows_builds():
        pytest.skip(f"this CPU runs {k.bn_rows_builds()}, not {isa}")
    rng = np.random.default_rng([shape[1], int(off), int(10 * sigma)])
    c = shape[1]
    x, _, _ = placed(shape, np.dtype(np.float32), "packed", np.nan)
    x[...] = off + sigma * rng.standard_normal(shape)
    y, _, _ = placed(shape, np.dtype(np.float32), "packed", np.nan)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    mean, var = np.full(c, np.nan, np.float32), np.full(c, np.nan, np.float32)
    k.bn_rows(k.BN_ROWS_TRAINING, x, y, 0, scale=scale, bias=bias, mean_out=mean,
              variance_out=var, epsilon=EPS, isa=isa)
    want = ref.bn_training(f64(x), scale, bias, EPS)
    assert_close(y, want["y"], *tol("bn_training", "float32"),
                 f"{isa} {shape} {off:g} + {sigma:g} N(0, 1) y")
