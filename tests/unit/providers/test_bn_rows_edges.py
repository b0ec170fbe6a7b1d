"""Edge cases of ``providers.cpu._kernels.bn_rows`` in both row families (channels-first,
``_bn_rows.h``; channels-last, ``_bn_last.h``) on every build this CPU runs (``isa``: the
portable baseline, the compiler's AVX-512 build of the portable rows, the AVX-512
intrinsics), against float64 references computed here from the formulas of
docs/contract/semantics.md, with the tolerances of tests/oracle/_cases.py:

- RELU_BWD of the recomputed forward value at +inf: dy passes without an upper clip
  (relu(+inf) = +inf with slope 1), is dropped under one (+inf is not below the clip).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hipdnn_async.providers.cpu import _kernels as k
from hipdnn_async.runtime import load_onednn
from oracle._cases import assert_close, tol

KINDS = {"float32": (0, np.dtype(np.float32)), "bfloat16": (1, np.dtype(ml_dtypes.bfloat16)),
         "float16": (2, np.dtype(np.float16))}
BUILDS = ("baseline", "avx512_auto", "avx512")
# the builds this CPU runs (bn_rows_isa names the widest)
ISAS = BUILDS[:BUILDS.index(k.bn_rows_isa("float32")) + 1]
ONEDNN_STATE = load_onednn()          # the rows run on oneDNN's OpenMP team, as in the engine


def f64(a):
    return np.asarray(a, np.float64)


def chan(v):
    return np.asarray(v, np.float64).reshape(1, -1, 1, 1)


def laid(values, dtype, layout):
    """``values`` (logical N, C, H, W) rounded to ``dtype`` in ``layout`` memory ("first":
    NCHW, "last": NHWC); returns (array, the float64 values it holds)."""
    if layout == "first":
        a = np.ascontiguousarray(values.astype(dtype))
    else:
        a = np.moveaxis(np.ascontiguousarray(np.moveaxis(values, 1, -1).astype(dtype)), -1, 1)
    return a, f64(a)


def empty_like_layout(a):
    out = np.empty_like(a)   # keeps the strides' order (NHWC stays NHWC)
    out[...] = np.nan
    return out


def raw(a):
    return a if a.dtype.itemsize == 4 else a.view(np.uint16)


# ------------------------------------------------------------------ RELU_BWD at +inf
# (lower, upper) of the mask; upper +inf is no upper clip
DRELU_CLIPS = {"no_clip": (0.0, np.inf), "lower_only": (0.1, np.inf), "upper_6": (0.0, 6.0)}
# channels-first rows of 40 elements (a 32-lane block, then the tail), channels-last 20
# and 100 channels (one register block; pixel by pixel)
DRELU_SHAPES = {"first": [(2, 4, 5, 8)], "last": [(2, 20, 3, 5), (2, 100, 2, 3)]}


def inf_at(shape):
    """Where x = +inf: channel 1's first element (a row's first vector) and channel 3's
    last (the tail of a row)."""
    return [(0, 1, 0, 0), (shape[0] - 1, 3, shape[2] - 1, shape[3] - 1)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("clip", list(DRELU_CLIPS))
@pytest.mark.parametrize("layout,shape", [(lay, s) for lay, ss in DRELU_SHAPES.items()
                                          for s in ss])
@pytest.mark.parametrize("dtype", list(KINDS))
def test_drelu_at_plus_inf(dtype, layout, shape, clip, isa):
    kind, dt = KINDS[dtype]
    lo, hi = DRELU_CLIPS[clip]
    rng = np.random.default_rng([len(dtype), shape[1], len(clip)])
    c = shape[1]
    xv = rng.uniform(-1.8, 1.8, shape)
    dyv = rng.uniform(-1, 1, shape)
    for at in inf_at(shape):
        xv[at] = np.inf
        dyv[at] = 0.75
    mean = rng.uniform(-0.1, 0.1, c).astype(np.float32)
    inv = rng.uniform(0.5, 2.0, c).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, c).astype(np.float32)
    x, xr = laid(xv, dt, layout)
    ybn = chan(scale) * (xr - chan(mean)) * chan(inv) + chan(bias)
    with np.errstate(invalid="ignore"):
        near = (np.abs(ybn - lo) < 1e-3) | (np.abs(ybn - hi) < 1e-3)
    dyv[near] = 0.0                  # float32 and float64 may take either side there
    dy, dyr = laid(dyv, dt, layout)
    dx = empty_like_layout(x)
    dscale, dbias = np.full(c, np.nan, np.float32), np.full(c, np.nan, np.float32)
    k.bn_rows(k.BN_ROWS_BACKWARD, raw(x), raw(dx), kind, dy=raw(dy), scale=scale, bias=bias,
              mean=mean, inv_variance=inv, dscale=dscale, dbias=dbias, act=True, lower=lo,
              upper=hi, isa=isa)
    # float64: dy where lo < ybn < hi, +inf passing where hi is +inf (no upper clip)
    inside = (ybn > lo) & ((ybn < hi) | (hi == np.inf))
    g = np.where(inside, dyr, 0.0)
    m = xr.size // c
    with np.errstate(invalid="ignore", over="ignore"):
        xhat = (xr - chan(mean)) * chan(inv)
        want_db = g.sum(axis=(0, 2, 3))
        want_ds = (g * xhat).sum(axis=(0, 2, 3))
        want_dx = chan(scale) * chan(inv) / m * (m * g - chan(want_db) - xhat * chan(want_ds))
    what = f"{dtype} {layout} {shape} {clip} {isa}"
    tf = tol("bn_backward", "float32")
    assert_close(dbias, want_db, *tf, f"{what} dbias")
    assert_close(dscale, want_ds, *tf, f"{what} dscale")
    assert_close(dx, want_dx, *tol("bn_backward", dtype), f"{what} dx")
    for at in inf_at(shape):
        # passed: dscale +inf (0.75 * inf); dropped: 0 * inf = NaN
        assert (dscale[at[1]] == np.inf) if hi == np.inf else np.isnan(dscale[at[1]]), what
