"""Edge cases of ``providers.cpu._kernels.bn_rows`` in both row families (channels-first,
``_bn_rows.h``; channels-last, ``_bn_last.h``) on every build this CPU runs (``isa``: the
portable baseline, the compiler's AVX2 and AVX-512 builds of the portable rows, the AVX2
bfloat16 and the AVX-512 intrinsics), against float64 references computed here from the formulas of
docs/contract/semantics.md, with the tolerances of tests/oracle/_cases.py:

- RELU_BWD of the recomputed forward value at +inf: dy passes without an upper clip
  (relu(+inf) = +inf with slope 1), is dropped under one (+inf is not below the clip).
- Finite data beyond float32's sums: deviations from 1.8e19 (squares beyond FLT_MAX),
  values whose float32 sums overflow, backward products g * (x - mean) beyond FLT_MAX,
  taken again in float64; the variance beyond FLT_MAX kept in a float64 variance_out.
- A factor scale / sqrt(variance + epsilon) beyond float32 (the smallest epsilon the graph
  takes, 1e-77, on a constant channel): y in float64, the bias there, not NaN.
- Backward of x spread over 1e-20 and less (inv_variance ~ 1e20 and up): dx's factor of
  x - mean beyond FLT_MAX while dx is finite, so the rows take xhat first there.
- Backward where scale * inv_variance (inv_variance 3.16e38 at epsilon 1e-77) or its
  product with dy ~ 1e30 is beyond FLT_MAX while dx is finite: that channel's dx in
  float64, the other channels' rows unchanged; and the same through a graph. Under
  pattern 2's RELU_BWD where scale * inv_variance itself overflows float32, the mask's
  forward value is inference's y (float64: the bias on a constant channel, not 0 * inf =
  NaN), in the rows and through a graph (NCHW, NHWC, a cropped NCHW).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers.cpu import _kernels as k
from hipdnn_async.runtime import load_onednn
from hipdnn_async.runtime._buffer import aligned_empty
from oracle._cases import assert_close, tol

from ._bn_rows_ops import pivot_pixels

KINDS = {"float32": (0, np.dtype(np.float32)), "bfloat16": (1, np.dtype(ml_dtypes.bfloat16)),
         "float16": (2, np.dtype(np.float16))}
# the builds this CPU runs (each checked against float64, so each against the others)
ISAS = k.bn_rows_builds()
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


# ------------------------------------------------------------------ finite data beyond float32's sums
SUM_RTOL = 1e-5      # statistics and backward sums, relative to the sum of |terms|
EPS = 1e-5
# (scale, offset) of x = offset + scale * N(0, 1): deviations whose squares overflow float32
# from |x - mean| ~ 1.8e19 (the variance itself beyond FLT_MAX from 1e20); at 5e37 + 1e37
# the float32 lane sums of x itself overflow too
HUGE = {"1e19": (1e19, 0.0), "4e19": (4e19, 0.0), "1e20": (1e20, 0.0), "1e30": (1e30, 0.0),
        "1e37": (1e37, 0.0), "5e37+1e37": (1e37, 5e37)}
# channels-first rows of 40 and 300 elements (32-lane blocks and a tail); channels-last
# 3 channels over 3 tiles of pixels, 20 (one register block) and 100 (pixel by pixel)
HUGE_SHAPES = {"first": [(2, 3, 5, 8), (3, 2, 15, 20)],
               "last": [(3, 3, 8, 9), (2, 20, 3, 5), (2, 100, 2, 3)]}
HUGE_KINDS = ("float32", "bfloat16")   # float16 holds no such value


def _training_rows(x, kind, scale, bias, eps, isa, wide, act=False, lo=0.0, hi=np.inf):
    c = x.shape[1]
    y = empty_like_layout(x)
    mean = np.full(c, np.nan, np.float32)
    var = np.full(c, np.nan, np.float64 if wide else np.float32)
    k.bn_rows(k.BN_ROWS_TRAINING, raw(x), raw(y), kind, scale=scale, bias=bias, mean_out=mean,
              variance_out=var, epsilon=eps, act=act, lower=lo, upper=hi, isa=isa)
    return y, mean, var


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", list(HUGE))
@pytest.mark.parametrize("layout,shape", [(lay, s) for lay, ss in HUGE_SHAPES.items()
                                          for s in ss])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
def test_training_of_huge_finite_values(dtype, layout, shape, case, isa):
    """Squares of deviations (and at 5e37 the sums of x) beyond float32 taken in float64:
    the float64 mean and variance, y from them; the float32 variance is the correctly
    rounded one (+inf beyond FLT_MAX), the float64 one keeps it, and inv_variance and the
    running variance from that (bn_training_statistics) are finite and right."""
    kind, dt = KINDS[dtype]
    sc, off = HUGE[case]
    rng = np.random.default_rng([shape[1], shape[2], len(case)])
    c = shape[1]
    x, xr = laid(off + sc * rng.standard_normal(shape), dt, layout)
    assert np.isfinite(xr).all()
    scale = rng.uniform(0.5, 2.0, c).astype(np.float32)
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    m = xr.size // c
    mean64 = xr.mean(axis=(0, 2, 3))
    var64 = ((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3))
    want_y = chan(scale) * (xr - chan(mean64)) / np.sqrt(chan(var64) + EPS) + chan(bias)
    what = f"{dtype} {layout} {shape} x ~ {case} {isa}"
    for wide in (False, True):
        y, mean, var = _training_rows(x, kind, scale, bias, EPS, isa, wide)
        assert_close(y, want_y, *tol("bn_training", dtype), f"{what} y")
        bound = SUM_RTOL * np.abs(xr).sum(axis=(0, 2, 3)) / m
        assert (np.abs(f64(mean) - mean64) <= bound).all(), (what, mean, mean64)
        if wide:
            assert_close(var, var64, 0.0, SUM_RTOL, f"{what} variance (float64)")
        else:
            with np.errstate(over="ignore"):
                assert_close(var, var64.astype(np.float32), 0.0, SUM_RTOL,
                             f"{what} variance (float32, +inf beyond FLT_MAX)")
    # inv_variance and the running statistics from the float64 variance
    inv = np.full(c, np.nan, np.float32)
    prev_m, prev_v = rng.uniform(-1, 1, c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    next_m, next_v = np.empty(c, np.float32), np.empty(c, np.float32)
    k.bn_training_statistics(var, EPS, inv, mean, 0.1, m / (m - 1.0), prev_m, next_m, prev_v,
                             next_v)
    with np.errstate(over="ignore"):
        want_nv = (0.9 * f64(prev_v) + 0.1 * var64 * m / (m - 1.0)).astype(np.float32)
    assert_close(inv, 1.0 / np.sqrt(var64 + EPS), 0.0, SUM_RTOL, f"{what} inv_variance")
    assert_close(next_v, want_nv, 0.0, SUM_RTOL, f"{what} next running variance")
    assert_close(next_m, 0.9 * f64(prev_m) + 0.1 * f64(mean), 0.0, 1e-6, f"{what} next mean")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("value,eps", [(30000.1, 1e-5), (1000.1, 1e-5), (-3.5, 1e-5),
                                       (0.1, 1e-14), (0.1, 1e-30), (0.1, 1e-77)])
def test_training_of_constant_channels_gives_the_bias(value, eps, dtype, layout, isa):
    """Channels holding one value (every channel but the last, an ordinary N(0, 1) one):
    the batch mean is that value exactly, the variance 0 and y the bias exactly (the
    float64 reference: x - mean = 0), whatever the factor scale / sqrt(epsilon). Was: the
    channels-first rows summed the values themselves in float32 lanes, whose rounding put
    the mean of 32 x 8 x 28 x 28 values of 30000.1 5.9e-3 off and y 0.75 off the bias
    (epsilon 1e-5), y 2.4e29 off at epsilon 1e-77 (found by a break-it helper)."""
    kind, dt = KINDS[dtype]
    shape = (32, 8, 28, 28) if value == 30000.1 else (8, 5, 14, 14)
    c = shape[1]
    rng = np.random.default_rng([len(dtype), shape[1]])
    xv = np.full(shape, value)
    xv[:, -1] = rng.standard_normal(xv[:, -1].shape)
    x, xr = laid(xv, dt, layout)
    scale = np.full(c, 1.0, np.float32)
    scale[1] = 2.0                               # 2 / sqrt(1e-77): beyond float32
    bias = np.linspace(-0.5, 0.5, c).astype(np.float32)
    y, mean, var = _training_rows(x, kind, scale, bias, eps, isa, wide=True)
    what = f"{dtype} {layout} {value} {eps} {isa}"
    const = xr[0, :-1, 0, 0]
    assert (f64(mean[:-1]) == const).all(), (what, mean[:-1], const)
    assert (var[:-1] == 0.0).all(), (what, var[:-1])
    want_b = chan(f64(bias.astype(dt)))[:, :-1]          # the bias in the output's type
    assert (f64(y[:, :-1]) == want_b).all(), (what, np.abs(f64(y[:, :-1]) - want_b).max())
    m = xr[:, -1].mean()
    inv = 1.0 / np.sqrt(((xr[:, -1] - m) ** 2).mean() + eps)
    want = (xr[:, -1] - m) * inv * scale[-1] + bias[-1]
    assert_close(y[:, -1], want, *tol("bn_training", dtype), what)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("where", ["first_last", "first_middle", "all_three"])
def test_training_with_outliers_at_the_pivots_elements(where, dtype, layout, isa):
    """Outliers of 1e10 at two or three of the elements the pivot is the median of
    (channels-first: a channel's first, middle and last values; channels-last: every
    sampled pixel of one, two or three of the three groups whose means it is the median
    of), N(0, 1) elsewhere: the pivot is an outlier, and the float32 lanes of pass 1 add
    x - p of about -1e10 for every other value. The mean (within 1e-5 of the mean of |x|,
    the rows' sum bound), the variance and y stay within their tolerances of float64:
    pass 2's deviations from pass 1's mean correct it (found by a break-it helper: 2
    outliers put the mean 5.4 % off channels-first, 0.2 % channels-last)."""
    kind, dt = KINDS[dtype]
    shape = (4, 3, 32, 64)
    rng = np.random.default_rng([len(where), len(dtype)])
    xv = rng.standard_normal(shape)
    n, s_ = shape[0], shape[2] * shape[3]
    if layout == "first":
        spots = {"first": [(0, 0)], "middle": [(n // 2, s_ // 2)], "last": [(n - 1, s_ - 1)]}
    else:
        spots = {name: [divmod(r, s_) for r in pivot_pixels(n, s_, g)]
                 for g, name in enumerate(("first", "middle", "last"))}
    names = ("first", "middle", "last") if where == "all_three" else where.split("_")
    for name in names:
        for i, o in spots[name]:
            xv[i, :, o // shape[3], o % shape[3]] = 1e10
    x, xr = laid(xv, dt, layout)
    scale, bias = np.ones(3, np.float32), np.zeros(3, np.float32)
    y, mean, var = _training_rows(x, kind, scale, bias, 1e-5, isa, wide=True)
    what = f"{where} {dtype} {layout} {isa}"
    m = xr.mean(axis=(0, 2, 3))
    v = xr.var(axis=(0, 2, 3))
    bound = 1e-5 * np.abs(xr).mean(axis=(0, 2, 3))
    if layout == "last":
        # 16-48 outliers raise the spread so that the pivot lies within 16 of its
        # root-mean-squares (no float64 pass): the contract's bound for the batch mean
        # (docs/contract/tolerances.md), 64 2^-24 max|x - mean| (909 off at 3.9e7 here)
        bound = np.maximum(bound, 64 * 2.0**-24 * np.abs(xr - chan(m)).max(axis=(0, 2, 3)))
    assert (np.abs(f64(mean) - m) <= bound).all(), (what, mean, m, bound)
    assert (np.abs(var - v) <= 1e-5 * v).all(), (what, var, v)
    want = (xr - chan(m)) / np.sqrt(chan(v) + 1e-5)
    assert_close(y, want, *tol("bn_training", dtype), what)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("data", ["normal", "two_values"])
@pytest.mark.parametrize("k_sigma", [0.0, 0.5, 3.0, 12.0, 40.0])
def test_training_around_the_one_pass_bound(k_sigma, data, dtype, layout, isa):
    """Offset data (1e4 + sigma N(0, 1), bfloat16 1e2 + ...; or the offset + -sigma / 3
    alternately, whose float32 lanes round alike, so that their errors add up rather than
    cancel) whose pivot's elements (channels-first: a channel's first, middle and last
    values; channels-last: all 48 sampled pixels) lie k_sigma standard deviations above
    the rest, so that the pivot does: statistics in one pass (0, 0.5: the variance as
    S2 / M - (S1 / M)^2 of the sums about the pivot), with pass 2's squared deviations
    from the mean (3, 12) and in float64 (40: over 16 root-mean-squares). The saved mean
    is float64's rounded to float32, the variance within 1e-6 of float64's (one pass
    taken at 12 sigma: 2e-5 to 6e-5 off on the two values) and y within tolerance."""
    kind, dt = KINDS[dtype]
    shape = (4, 3, 100, 100)
    off, sigma = (1e4, np.array([1.0, 0.01, 1.0])) if dtype == "float32" else \
        (1e2, np.array([1.0, 4.0, 1.0]))
    rng = np.random.default_rng([int(k_sigma * 10), len(dtype), len(layout), len(data)])
    if data == "normal":
        dev = rng.standard_normal(shape)
    else:
        dev = np.where(np.arange(np.prod(shape)).reshape(shape) % 2 == 0, 1 / 3, -1 / 3)
    xv = off + chan(sigma) * dev
    s_ = 100 * 100
    if layout == "first":
        spots = [0, 2 * s_ + s_ // 2, 4 * s_ - 1]
    else:
        spots = [r for g in range(3) for r in pivot_pixels(4, s_, g)]
    for r in spots:
        xv[r // s_, :, (r % s_) // 100, r % 100] += k_sigma * sigma * dev.std()
    x, xr = laid(xv, dt, layout)
    scale = np.array([1.0, 2.0, 0.5], np.float32)
    bias = np.array([0.0, 1.0, -1.0], np.float32)
    y, mean, var = _training_rows(x, kind, scale, bias, 1e-5, isa, wide=True)
    what = f"{data} {dtype} {layout} {isa} pivot {k_sigma:g} sigma away"
    m = xr.mean(axis=(0, 2, 3))
    v = xr.var(axis=(0, 2, 3))
    assert (f64(mean) == m.astype(np.float32)).all(), (what, f64(mean) - m)
    assert np.allclose(var, v, rtol=1e-6, atol=0), (what, var / v - 1)
    want = chan(scale) * (xr - chan(m)) / np.sqrt(chan(v) + 1e-5) + chan(bias)
    assert_close(y, want, *tol("bn_training", dtype), what)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("outlier", [1e4, 1e30])
def test_training_with_one_outlier_keeps_pass_1s_mean(outlier, layout, isa):
    """One outlier among 2 x 10^4 N(0, 1) values of a channel (not at a pivot element):
    pass 1's mean is right to float32's last bits, while pass 2's float32 sums of x - mean,
    dominated by the outlier, are off by 2e-6 of the mean at 1e30; the correction is
    taken only above that rounding (hd_bn_mean_fix), so the mean stays within 1e-6."""
    shape = (2, 2, 100, 100)
    rng = np.random.default_rng(int(np.log10(outlier)))
    xv = rng.standard_normal(shape)
    xv[0, :, 0, 64] = outlier        # the first of a tile (channels-last), of a lane
    x, xr = laid(xv, np.float32, layout)
    scale, bias = np.full(2, 100.0, np.float32), np.zeros(2, np.float32)
    y, mean, var = _training_rows(x, 0, scale, bias, 1e-5, isa, wide=True)
    m = xr.mean(axis=(0, 2, 3))
    v = xr.var(axis=(0, 2, 3))
    what = f"{outlier:g} {layout} {isa}"
    assert np.allclose(f64(mean), m, rtol=1e-6, atol=0), (what, mean, m)
    assert np.allclose(var, v, rtol=1e-5, atol=0), (what, var, v)
    want = 100.0 * (xr - chan(m)) / np.sqrt(chan(v) + 1e-5)
    assert_close(y, want, *tol("bn_training", "float32"), what)


# channels-first rows of 40 and 300 elements, a block of 9 short rows; channels-last 3
# channels over 3 tiles, 20 (a register block) and 100 (pixel by pixel)
TINY_TRAIN_SHAPES = {"first": [(2, 3, 5, 8), (3, 2, 15, 20), (2, 9, 5, 8)],
                     "last": [(3, 3, 8, 9), (2, 20, 3, 5), (2, 100, 2, 3)]}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout,shape", [(lay, s) for lay, ss in TINY_TRAIN_SHAPES.items()
                                          for s in ss])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
@pytest.mark.parametrize("spread,eps", [(1e-19, 1e-77), (1e-23, 1e-77), (1e-30, 1e-77),
                                        (1e-23, 1e-40), (1e-23, 1e-5)])
def test_training_of_a_tiny_spread(spread, eps, dtype, layout, shape, isa):
    """x ~ spread N(0, 1) on the even channels (N(0, 1) on the others), epsilon far below
    the variance: squares of deviations under 1e-19 fall below FLT_MIN in float32 and lose
    their bits (to 0 under 1e-23), so the variance came out 0 and y = (x - mean) /
    sqrt(epsilon) 1e14 off at spread 1e-23, epsilon 1e-77 (found by a break-it helper).
    Where variance + epsilon is below 1e-36 the rows take the channel's squares again in
    float64: y, the mean and the float64 variance are float64's. At epsilon 1e-5 the
    variance is below float32's resolution of variance + epsilon, and y is (x - mean) /
    sqrt(epsilon) either way (the float32 path, its variance within 2^-149 absolute)."""
    kind, dt = KINDS[dtype]
    c = shape[1]
    rng = np.random.default_rng([shape[1], shape[2], int(-np.log10(spread)), int(-np.log10(eps))])
    spreads = np.where(np.arange(c) % 2 == 0, spread, 1.0).reshape(1, -1, 1, 1)
    x, xr = laid(spreads * rng.standard_normal(shape), dt, layout)
    scale = rng.uniform(0.5, 2.0, c).astype(np.float32)
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    mean64 = xr.mean(axis=(0, 2, 3))
    var64 = ((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3))
    want_y = chan(scale) * (xr - chan(mean64)) / np.sqrt(chan(var64) + eps) + chan(bias)
    what = f"{dtype} {layout} {shape} spread {spread:g} eps {eps:g} {isa}"
    y, mean, var = _training_rows(x, kind, scale, bias, eps, isa, wide=True)
    assert np.isfinite(f64(y)).all(), what
    assert_close(y, want_y, *tol("bn_training", dtype), f"{what} y")
    bound = SUM_RTOL * np.abs(xr).mean(axis=(0, 2, 3))
    assert (np.abs(f64(mean) - mean64) <= bound).all(), (what, mean, mean64)
    # float32 squares (variance + epsilon above 1e-36) round each to within 2^-150 below
    # FLT_MIN: the variance within 2^-149 absolute, far below epsilon's share
    atol = 2.0 ** -149 if (var64 + eps >= 1e-36).all() else 0.0
    assert_close(var, var64, atol, SUM_RTOL, f"{what} variance (float64)")


@pytest.mark.parametrize("role", ["scale", "variance_out"])
def test_masked_vectors_are_refused_and_float64_memmaps_taken(tmp_path, role):
    """A masked per-channel vector is refused (its mask would be ignored, as the graph's
    binding says); a float64 ``variance_out`` is taken as any ndarray, an ``np.memmap``
    and dims (1, C, 1, 1) too, with the 1-D result."""
    x = np.random.default_rng(9).standard_normal((2, 3, 4, 5)).astype(np.float32)
    kw = dict(scale=np.ones(3, np.float32), bias=np.zeros(3, np.float32),
              mean_out=np.empty(3, np.float32), variance_out=np.empty(3, np.float64),
              epsilon=1e-5)
    kw[role] = np.ma.masked_array(kw[role], mask=[False, True, False])
    with pytest.raises(ValueError, match=f"bn_rows: {role} is a masked array"):
        k.bn_rows(k.BN_ROWS_TRAINING, x, np.empty_like(x), 0, **kw)
    want = None
    for out in (np.empty(3, np.float64), np.empty((1, 3, 1, 1), np.float64),
                np.memmap(tmp_path / "v", dtype=np.float64, mode="w+", shape=(1, 3, 1, 1))):
        kw.update(scale=np.ones(3, np.float32), variance_out=out)
        k.bn_rows(k.BN_ROWS_TRAINING, x, np.empty_like(x), 0, **kw)
        got = np.asarray(out).reshape(-1).copy()
        assert want is None or got.tobytes() == want.tobytes()
        want = got
    np.testing.assert_allclose(want, x.astype(np.float64).var(axis=(0, 2, 3)), rtol=1e-6)


def _backward_rows(x, dy, kind, scale, mean, inv, isa, bias=None, act=False, lo=0.0, hi=np.inf):
    c = x.shape[1]
    dx = empty_like_layout(x)
    dscale, dbias = np.full(c, np.nan, np.float32), np.full(c, np.nan, np.float32)
    k.bn_rows(k.BN_ROWS_BACKWARD, raw(x), raw(dx), kind, dy=raw(dy), scale=scale, bias=bias,
              mean=mean, inv_variance=inv, dscale=dscale, dbias=dbias, act=act, lower=lo,
              upper=hi, isa=isa)
    return dx, dscale, dbias


def _backward_want(xr, dyr, scale, mean, inv, bias=None, act=False):
    c, m = xr.shape[1], xr.size // xr.shape[1]
    xhat = (xr - chan(mean)) * chan(inv)
    g = dyr
    if act:
        g = np.where(chan(scale) * xhat + chan(bias) > 0, dyr, 0.0)
    db = g.sum(axis=(0, 2, 3))
    ds = (g * xhat).sum(axis=(0, 2, 3))
    dx = chan(scale) * chan(inv) / m * (m * g - chan(db) - xhat * chan(ds))
    return dx, ds, db, g, xhat


@pytest.mark.parametrize("v,match", [
    (np.ones(6)[::2], "variance_out is not a contiguous float64 vector that can be written"),
    (np.ones(3, ">f8"), "variance_out is not a contiguous float64 vector that can be written"),
    (np.ones(4), "variance_out has 4 values; 3 channels")])
def test_float64_variance_out_is_checked(v, match):
    x = np.ones((2, 3, 4, 4), np.float32)
    y = np.full_like(x, np.nan)
    one = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=match):
        k.bn_rows(k.BN_ROWS_TRAINING, x, y, 0, scale=one, bias=one, mean_out=one.copy(),
                  variance_out=v, epsilon=EPS)
    assert np.isnan(y).all()


def test_isa_names_a_build_this_cpu_runs():
    x = np.ones((2, 3, 4, 4), np.float32)
    one = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="isa 'sse4'"):     # not a build's name
        k.bn_rows(k.BN_ROWS_INFERENCE, x, x.copy(), 0, scale=one, bias=one, mean=one,
                  variance=one, epsilon=EPS, isa="sse4")
    for build in {"avx2_auto", "avx2", "avx512_auto", "avx512"} - set(k.bn_rows_builds()):
        with pytest.raises(ValueError, match=f"isa '{build}'; this CPU runs"):
            k.bn_rows(k.BN_ROWS_INFERENCE, x, x.copy(), 0, scale=one, bias=one, mean=one,
                      variance=one, epsilon=EPS, isa=build)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("act", [False, True], ids=["plain", "drelu"])
@pytest.mark.parametrize("layout,shape", [(lay, s) for lay, ss in HUGE_SHAPES.items()
                                          for s in ss])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
def test_backward_of_huge_finite_products(dtype, layout, shape, act, isa):
    """x ~ 1e20 N(0, 1) with its own statistics (inv_variance ~ 1e-20) and dy ~ 1e19: each
    g * (x - mean) is ~1e39, beyond float32, while dscale = inv_variance * sum(g (x -
    mean)) ~ 1e19 is not: the products and their sums taken in float64."""
    kind, dt = KINDS[dtype]
    rng = np.random.default_rng([shape[1], shape[2], act])
    c = shape[1]
    x, xr = laid(1e20 * rng.standard_normal(shape), dt, layout)
    dy, dyr = laid(1e19 * rng.uniform(-1, 1, shape), dt, layout)
    mean = xr.mean(axis=(0, 2, 3)).astype(np.float32)
    inv = (1.0 / np.sqrt(((xr - chan(xr.mean(axis=(0, 2, 3)))) ** 2).mean(axis=(0, 2, 3))))
    inv = inv.astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, c).astype(np.float32)
    want_dx, want_ds, want_db, g, xhat = _backward_want(xr, dyr, scale, mean, inv, bias, act)
    assert np.abs(g * (xr - chan(mean))).max() > 3.5e38        # products beyond float32
    dx, ds, db = _backward_rows(x, dy, kind, scale, mean, inv, isa, bias if act else None, act)
    what = f"{dtype} {layout} {shape} act={act} {isa}"
    assert_close(dx, want_dx, *tol("bn_backward", dtype), f"{what} dx")
    assert (np.abs(f64(db) - want_db) <= SUM_RTOL * np.abs(g).sum(axis=(0, 2, 3))).all(), what
    assert (np.abs(f64(ds) - want_ds) <= SUM_RTOL * np.abs(g * xhat).sum(axis=(0, 2, 3))).all(), what


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout,shape", [("first", (2, 3, 4, 32)), ("last", (2, 20, 4, 32)),
                                          ("last", (2, 100, 4, 8))])
def test_backward_sums_near_flt_max_that_cancel(layout, shape, isa):
    """dy of +-3e38 in runs of +, +, -, - along each row (channels-first: runs of 32
    elements, so that each float32 lane sees the pattern; channels-last: pixel by pixel):
    the float32 partial sums of dy overflow, the float64 ones are 0, so dbias is 0 (not
    +-inf or NaN). x = 1 +- 0.5 in runs of +, -, +, -, so that the products g (x - mean)
    cancel as well (dscale 0, finite)."""
    c = shape[1]
    n_sp = shape[2] * shape[3]
    if layout == "first":     # along a row: runs of 32
        s_dy = np.resize(np.repeat([1.0, 1.0, -1.0, -1.0], 32), n_sp)
        s_x = np.resize(np.repeat([1.0, -1.0, 1.0, -1.0], 32), n_sp)
    else:                     # along the pixels
        s_dy = np.resize([1.0, 1.0, -1.0, -1.0], n_sp)
        s_x = np.resize([1.0, -1.0, 1.0, -1.0], n_sp)
    grid = (1, 1, shape[2], shape[3])
    x, xr = laid(np.broadcast_to(1.0 + 0.5 * s_x.reshape(grid), shape).copy(), np.float32,
                 layout)
    dy, dyr = laid(np.broadcast_to(3e38 * s_dy.reshape(grid), shape).copy(), np.float32,
                   layout)
    mean = np.ones(c, np.float32)
    inv = np.full(c, 2.0, np.float32)
    scale = np.full(c, 0.01, np.float32)
    want_dx, want_ds, want_db, g, xhat = _backward_want(xr, dyr, scale, mean, inv)
    assert (want_db == 0).all() and (want_ds == 0).all()
    dx, ds, db = _backward_rows(x, dy, 0, scale, mean, inv, isa)
    what = f"{layout} {shape} {isa}"
    assert (db == 0).all() and (ds == 0).all(), (what, db, ds)
    assert_close(dx, want_dx, *tol("bn_backward", "float32"), f"{what} dx")


# channels-first rows of 40 and 300 elements; channels-last 3 channels over 3 tiles, 20 and
# 64 (one register block, masked and not) and 100 (pixel by pixel)
TINY_SHAPES = {"first": [(2, 3, 5, 8), (3, 2, 15, 20), (2, 9, 5, 8)],
               "last": [(3, 3, 8, 9), (2, 20, 3, 5), (2, 64, 2, 3), (2, 100, 2, 3)]}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("act", [False, True], ids=["plain", "drelu"])
@pytest.mark.parametrize("layout,shape", [(lay, s) for lay, ss in TINY_SHAPES.items()
                                          for s in ss])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
@pytest.mark.parametrize("spread", [1e-19, 1e-20, 1e-30], ids=lambda v: f"{v:g}")
def test_backward_of_a_tiny_spread(spread, dtype, layout, shape, act, isa):
    """x ~ spread N(0, 1) with its own statistics (inv_variance ~ 1 / spread), dy ~ U(-1,
    1): dx ~ 1 / spread is finite, while from spread 1e-20 on dx's factor of x - mean,
    -scale * inv_variance**2 * dscale / M, is beyond FLT_MAX (the rows once gave dx +-inf
    there); the rows take xhat = (x - mean) * inv_variance first where that factor is no
    float32. Every other channel is spread over 1 (its factor a float32), so that the
    channels-last rows meet both kinds of channel in one pass."""
    kind, dt = KINDS[dtype]
    rng = np.random.default_rng([shape[1], shape[2], act, int(-np.log10(spread))])
    c = shape[1]
    spreads = np.where(np.arange(c) % 2 == 0, spread, 1.0).reshape(1, -1, 1, 1)
    x, xr = laid(spreads * rng.standard_normal(shape), dt, layout)
    mean64 = xr.mean(axis=(0, 2, 3))
    mean = mean64.astype(np.float32)
    inv = (1.0 / np.sqrt(((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3)))).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, c).astype(np.float32)
    dyv = rng.uniform(-1, 1, shape)
    if act:   # off the mask's edge, where float32 and float64 may take different sides
        dyv[np.abs(chan(scale) * (xr - chan(mean)) * chan(inv) + chan(bias)) < 1e-3] = 0.0
    dy, dyr = laid(dyv, dt, layout)
    want_dx, want_ds, want_db, g, xhat = _backward_want(xr, dyr, scale, mean, inv, bias, act)
    assert np.isfinite(want_dx).all() and np.abs(want_dx[:, 0]).max() > 0.1 / spread
    dx, ds, db = _backward_rows(x, dy, kind, scale, mean, inv, isa, bias if act else None, act)
    what = f"{dtype} {layout} {shape} spread {spread:g} act={act} {isa}"
    assert np.isfinite(f64(dx)).all(), what
    assert_close(dx, want_dx, *tol("bn_backward", dtype), f"{what} dx")
    assert (np.abs(f64(db) - want_db) <= SUM_RTOL * np.abs(g).sum(axis=(0, 2, 3))).all(), what
    assert (np.abs(f64(ds) - want_ds) <= SUM_RTOL * np.abs(g * xhat).sum(axis=(0, 2, 3))).all(), what


# ------------------------------------------------------------------ backward factors beyond float32
FLT_MAX = float(np.finfo(np.float32).max)
# the even channels of a job, whose float32 factors of dx overflow while dx is finite:
#   constant:    x constant, inv_variance 3.16e38 (epsilon 1e-77), scale 2: k1 = scale *
#                inv_variance = 6.3e38 (dx = k1 (dy - mean dy) ~ 1e37)
#   tiny_spread: x ~ 1e-36 N(0, 1) with its own statistics, scale 1000: k1 ~ 1e39
#   dy_offset:   dy ~ 1e30 (1 + 0.03 N(0, 1)), k1 ~ 1e9: k1 dy and k3 = -k1 sum dy / M
#                ~ 1e39 (dx ~ 1e37)
# The mask of pattern 2 (act) takes its forward value (x - mean) * a + bias where a =
# float32(k1) overflows as inference's y there, in float64 (on the constant channels the
# bias, where float32 gave 0 * inf = NaN): there the even channels' biases are +-0.05 in
# turn, so that the mask passes one's dy and drops the next one's.
FACTOR_CASES = [("constant", False), ("constant", True), ("tiny_spread", False),
                ("tiny_spread", True), ("dy_offset", False)]


def _factor_job(case, dtype, layout, shape, act, slow=True):
    """A backward job of ``shape`` whose odd channels are ordinary (x ~ N(0, 1) with its
    own statistics, dy ~ U(-1, 1)) and whose even ones are ``case`` where ``slow`` (else
    ordinary too, the odd ones the same): (x, dy, scale, mean, inv, bias, xr, dyr)."""
    dt = KINDS[dtype][1]
    rng = np.random.default_rng([shape[1], shape[2], act, len(case)])
    c = shape[1]
    xv = rng.standard_normal(shape)
    dyv = rng.uniform(-1, 1, shape)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, c).astype(np.float32)
    ev = slice(0, None, 2)
    if slow:
        r2 = np.random.default_rng([shape[1], shape[2], len(case), 2])
        sub = xv[:, ev].shape
        if case == "constant":
            xv[:, ev] = 3.0
            dyv[:, ev] = 0.1 * r2.standard_normal(sub)
            scale[ev] = 2.0
            bias[ev] = np.where(np.arange(c)[ev] % 4 == 0, 0.05, -0.05)
        elif case == "tiny_spread":
            xv[:, ev] = 1e-36 * r2.standard_normal(sub)
            dyv[:, ev] = r2.uniform(-0.05, 0.05, sub)
            scale[ev] = 1000.0
            bias[ev] = 0.0
        else:
            dyv[:, ev] = 1e30 * (1.0 + 0.03 * r2.standard_normal(sub))
            scale[ev] = 1e9
    x, xr = laid(xv, dt, layout)
    mean64 = xr.mean(axis=(0, 2, 3))
    mean = mean64.astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = 1.0 / np.sqrt(((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3)))
    if slow and case == "constant":
        inv[ev] = 1.0 / np.sqrt(1e-77)
    inv = inv.astype(np.float32)
    if act:   # off the mask's edge, where float32 and float64 may take different sides
        dyv[np.abs(chan(scale) * (xr - chan(mean)) * chan(inv) + chan(bias)) < 1e-3] = 0.0
    dy, dyr = laid(dyv, dt, layout)
    return x, dy, scale, mean, inv, bias, xr, dyr


def bits(a):
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout,shape", [(lay, s) for lay, ss in TINY_SHAPES.items()
                                          for s in ss])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
@pytest.mark.parametrize("case,act", FACTOR_CASES,
                         ids=[f"{c}-{'drelu' if a else 'plain'}" for c, a in FACTOR_CASES])
def test_backward_where_factors_overflow_float32(case, act, dtype, layout, shape, isa):
    """dx's float32 factors k1 = scale * inv_variance, k3 = -k1 * sum(g) / M (or k2)
    beyond FLT_MAX while dx is finite (FACTOR_CASES; the rows once gave dx +-inf there):
    such a channel takes dx = k1 * (g - sum(g) / M - xhat * dscale / M) in float64, within
    float32 rounding of the float64 reference and of the float32 sums it starts from; the
    ordinary channels of the same job are bit for bit those of a job without such
    channels (their float32 rows unchanged)."""
    kind = KINDS[dtype][0]
    x, dy, scale, mean, inv, bias, xr, dyr = _factor_job(case, dtype, layout, shape, act)
    want_dx, want_ds, want_db, g, xhat = _backward_want(xr, dyr, scale, mean, inv, bias, act)
    m = xr.size // xr.shape[1]
    k1 = f64(scale) * f64(inv)
    assert ((k1 > FLT_MAX) | (k1 * np.abs(want_db) / m > FLT_MAX))[::2].all()
    assert np.isfinite(want_dx).all() and np.abs(want_dx).max() > 1e36
    dx, ds, db = _backward_rows(x, dy, kind, scale, mean, inv, isa, bias if act else None, act)
    what = f"{dtype} {layout} {shape} {case} act={act} {isa}"
    got = f64(dx)
    assert np.isfinite(got).all(), what
    # within the output's rounding, and k1 times that of the float32 sums of g, g (x - m)
    sum_g = SUM_RTOL * np.abs(g).sum(axis=(0, 2, 3))
    sum_gx = SUM_RTOL * np.abs(g * xhat).sum(axis=(0, 2, 3))
    lim = (tol("bn_backward", dtype)[1] * np.abs(want_dx)
           + chan(k1) * (chan(sum_g) + np.abs(xhat) * chan(sum_gx)) / m)
    bad = ~(np.abs(got - want_dx) <= lim)
    assert not bad.any(), (what, got[bad][:4], want_dx[bad][:4])
    assert_close(dx[:, 1::2], want_dx[:, 1::2], *tol("bn_backward", dtype), f"{what} dx")
    assert (np.abs(f64(db) - want_db) <= sum_g).all(), what
    assert (np.abs(f64(ds) - want_ds) <= sum_gx).all(), what
    # the ordinary channels: as in a job without the others
    x2, dy2, scale2, mean2, inv2, bias2, _, _ = _factor_job(case, dtype, layout, shape, act,
                                                            slow=False)
    dx2, ds2, db2 = _backward_rows(x2, dy2, kind, scale2, mean2, inv2, isa,
                                   bias2 if act else None, act)
    assert (bits(dx[:, 1::2]) == bits(dx2[:, 1::2])).all(), what
    assert (bits(ds[1::2]) == bits(ds2[1::2])).all() and (bits(db[1::2]) == bits(db2[1::2])).all()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout,shape", [("first", (2, 3, 5, 8)), ("last", (2, 3, 5, 8)),
                                          ("last", (2, 100, 2, 3))])
@pytest.mark.parametrize("dtype", list(KINDS))
@pytest.mark.parametrize("act", [False, True], ids=["plain", "drelu"])
def test_backward_where_k1_overflows_of_a_constant_dy(dtype, layout, shape, act, isa):
    """Channel 0 constant at inv_variance 3.16e38 (epsilon 1e-77), scale 2, under a
    constant dy: dx = k1 (dy - mean dy) is 0 (the float32 rows gave k1 dy + k3 = inf - inf,
    NaN), in every element kind; the other channels ordinary. drelu: the mask's forward
    value there is the bias, 0.5 (float32's d * a + b was 0 * inf = NaN), so dy passes."""
    kind, dt = KINDS[dtype]
    rng = np.random.default_rng([shape[1], len(dtype)])
    c = shape[1]
    xv, dyv = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)
    xv[:, 0], dyv[:, 0] = 3.0, 0.5
    x, xr = laid(xv, dt, layout)
    mean = xr.mean(axis=(0, 2, 3)).astype(np.float32)
    inv = (1.0 / np.sqrt(xr.var(axis=(0, 2, 3)) + 1e-77)).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    scale[0] = 2.0
    bias = rng.uniform(-0.5, 0.5, c).astype(np.float32)
    bias[0] = 0.5
    if act:   # off the mask's edge, where float32 and float64 may take different sides
        yb = chan(scale) * (xr - chan(mean)) * chan(inv) + chan(bias)
        dyv[:, 1:][np.abs(yb[:, 1:]) < 1e-3] = 0.0
    dy, dyr = laid(dyv, dt, layout)
    assert f64(scale[0]) * f64(inv[0]) > FLT_MAX
    want_dx, want_ds, want_db, _, _ = _backward_want(xr, dyr, scale, mean, inv, bias, act)
    dx, ds, db = _backward_rows(x, dy, kind, scale, mean, inv, isa, bias if act else None, act)
    what = f"{dtype} {layout} {shape} act={act} {isa}"
    assert (bits(dx[:, 0]) == 0).all() and ds[0] == 0 and db[0] == 0.5 * xr[:, 0].size, what
    assert_close(dx, want_dx, *tol("bn_backward", dtype), f"{what} dx")


@pytest.mark.skipif("avx512" not in ISAS, reason="the intrinsic rows alone stream")
@pytest.mark.parametrize("layout,shape", [("first", (2, 3, 5, 8)), ("last", (2, 64, 2, 3))])
@pytest.mark.parametrize("case", ["constant", "dy_offset"])
def test_backward_where_factors_overflow_float32_streamed(case, layout, shape):
    """Streamed stores of dx (MOVNTPS) around the float64 channels (channels-last writes
    them over the streamed pixels after a fence): the values of cached stores."""
    x, dy, scale, mean, inv, bias, _, _ = _factor_job(case, "float32", layout, shape, False)
    outs = []
    for stream in (True, False):
        dx = aligned_empty(x.nbytes).view(np.float32)
        dx = (dx.reshape(x.shape) if layout == "first" else
              np.moveaxis(dx.reshape(np.moveaxis(x, 1, -1).shape), -1, 1))
        dx[...] = np.nan
        ds, db = np.full(shape[1], np.nan, np.float32), np.full(shape[1], np.nan, np.float32)
        k.bn_rows(k.BN_ROWS_BACKWARD, x, dx, 0, dy=dy, scale=scale, mean=mean,
                  inv_variance=inv, dscale=ds, dbias=db, stream=stream, isa="avx512")
        outs.append(dx)
    assert np.isfinite(outs[0]).all()
    assert (bits(outs[0]) == bits(outs[1])).all()


def _engine_backward(layout, x, dy, scale, mean, inv):
    """dx of a FLOAT graph's batchnorm backward on ONEDNN_ENGINE (``layout`` NCHW or NHWC;
    the bn_rows alone), as float64 of logical (N, C, H, W)."""
    f32 = hd.DataType.FLOAT
    n, c, h, w = x.shape
    g = hd.Graph(io_data_type="float32", intermediate_data_type=f32, compute_data_type=f32)
    X = g.tensor(dims=x.shape, layout=layout, name="x")
    DY = g.tensor(dims=x.shape, layout=layout, name="dy")
    ch = lambda name: g.tensor(dims=(1, c, 1, 1), name=name, data_type="float32")
    dx, ds, db = g.batchnorm_backward(DY, X, ch("scale"), mean=ch("mean"),
                                      inv_variance=ch("inv"))
    dx.set_output(True).set_name("dx")
    ds.set_output(True).set_data_type("float32").set_name("ds")
    db.set_output(True).set_data_type("float32").set_name("db")
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE")
        names = [nm for nm, _ in plan.algorithm.trials]
        assert names == ["bn_rows:" + k.bn_rows_isa("float32")], names
        v = lambda a: np.asarray(a, np.float32).reshape(1, c, 1, 1)
        perm = (0, 2, 3, 1) if layout == "NHWC" else (0, 1, 2, 3)
        mem = lambda a: np.ascontiguousarray(np.transpose(a, perm)).astype(np.float32)
        out = np.full(mem(x).shape, np.nan, np.float32)
        plan.execute_sync({"x": mem(x), "dy": mem(dy), "scale": v(scale), "mean": v(mean),
                           "inv": v(inv), "dx": out, "ds": v([np.nan] * c),
                           "db": v([np.nan] * c)})
    return np.transpose(out, np.argsort(perm)).astype(np.float64)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", ["constant", "dy_offset"])
def test_engine_backward_where_factors_overflow_float32(case, layout):
    """A graph's batchnorm backward on a constant channel at epsilon 1e-77 (inv_variance
    3.16e38, allowed) with scale 2, and on dy ~ 1e30 + 1e24 N(0, 1) under scale *
    inv_variance ~ 1e9: k1 = 6.3e38, or k1 * dy and k3 ~ 1e39, beyond FLT_MAX while dx
    (~1e37, ~1e33) is finite; the rows gave dx +-inf there once."""
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    if case == "constant":
        rng = np.random.default_rng(0)
        x = np.full((4, 1, 4, 4), 3.0)
        dy = 0.1 * rng.standard_normal(x.shape)
        scale, mean, inv = 2.0, 3.0, float(np.float32(1 / np.sqrt(1e-77)))
    else:
        rng = np.random.default_rng(1)
        x = rng.standard_normal((2, 1, 2, 2)).astype(np.float32).astype(np.float64)
        dy = 1e30 + 1e24 * rng.standard_normal(x.shape)
        scale, mean, inv = 1e9, x.mean(), 1 / x.std()
    dx = _engine_backward(layout, x, dy, scale, mean, inv)
    xr, dyr = f64(np.float32(x)), f64(np.float32(dy))
    s, mu, iv = (float(np.float32(v)) for v in (scale, mean, inv))
    xhat = (xr - mu) * iv
    m = dyr.size
    want = s * iv / m * (m * dyr - dyr.sum() - xhat * (dyr * xhat).sum())
    assert np.isfinite(want).all() and np.abs(want).max() > 1e32
    assert np.isfinite(dx).all(), (dx.ravel()[:4], want.ravel()[:4])
    # within float32 rounding of the float64 reference and (dy_offset, where that is most
    # of dx: float32 ulps of 1e30 are 8e22) k1 times that of the float32 sums of dy
    lim = 2e-3 * np.abs(want) + s * iv * SUM_RTOL * (np.abs(dyr).sum()
                                                    + np.abs(xhat) * np.abs(dyr * xhat).sum()) / m
    assert (np.abs(dx - want) <= lim).all(), (dx.ravel()[:4], want.ravel()[:4])


# pattern 2 through a graph: N, C, H, W and the memory layouts (NCHW+cropped: W of 5 in
# rows of 7, which the rows read from dense copies, "+dense")
P2_DIMS = (2, 4, 3, 5)
P2_LAYOUTS = {"NCHW": ((0, 1, 2, 3), 0), "NHWC": ((0, 2, 3, 1), 0), "NCHW+cropped": ((0, 1, 2, 3), 2)}


def _p2_strides(layout):
    order, gap = P2_LAYOUTS[layout]
    st, size = [0] * 4, 1
    for ax in reversed(order):
        st[ax] = size
        size *= P2_DIMS[ax] + (gap if ax == 3 else 0)
    return tuple(st)


def _p2_data(special):
    """Pattern 2's inputs (float64, logical N, C, H, W / per channel): channels 0 and 2
    ordinary; where ``special``, channels 1 and 3 constant at inv_variance 3e38 (epsilon
    1e-77) with scale 2 and 1.5 (scale * inv_variance beyond FLT_MAX) and bias 10 (the
    mask passes dy) and -0.25 (it drops it), else ordinary too."""
    rng = np.random.default_rng(7)
    c = P2_DIMS[1]
    x = rng.uniform(-2, 2, P2_DIMS)
    dy = rng.uniform(-1, 1, P2_DIMS)
    mean = rng.uniform(-0.3, 0.3, c)
    inv = rng.uniform(0.5, 2, c)
    scale = rng.uniform(0.5, 1.5, c)
    bias = rng.uniform(-0.5, 0.5, c)
    if special:
        x[:, 1], x[:, 3] = 0.75, -1.5
        dy[:, 1::2] *= 1e-3                    # dx ~ k1 dy ~ 1e35, finite
        mean[1::2] = 0.75, -1.5
        inv[1::2] = 3e38
        scale[1::2] = 2.0, 1.5
        bias[1::2] = 10.0, -0.25
    return x, dy, mean, inv, scale, bias


def _engine_p2(layout, dtype, special):
    """Batchnorm inference -> RELU_BWD -> batchnorm backward (pattern 2) of a graph on
    ONEDNN_ENGINE: (dx, dscale, dbias as float64, dx's raw array, the float64 reference
    of the stored inputs)."""
    from oracle import _reference as ref
    from oracle._cases import alloc
    dt = KINDS[dtype][1]
    c = P2_DIMS[1]
    strides = _p2_strides(layout)
    g = hd.Graph(io_data_type=dtype, intermediate_data_type="float32",
                 compute_data_type="float32")
    X = g.tensor(dims=P2_DIMS, strides=strides, name="x")
    DY = g.tensor(dims=P2_DIMS, strides=strides, name="dy")
    ch = lambda name: g.tensor(dims=(1, c, 1, 1), name=name, data_type="float32")
    S, B, M, IV = ch("s"), ch("b"), ch("m"), ch("iv")
    yb = g.batchnorm_inference(X, M, IV, S, B)
    gg = g.pointwise(yb, DY, mode=hd.PointwiseMode.RELU_BWD)
    DX, DS, DB = g.batchnorm_backward(gg, X, S, mean=M, inv_variance=IV)
    DX.set_output(True).set_strides(strides)
    DS.set_output(True).set_data_type("float32")
    DB.set_output(True).set_data_type("float32")
    x, dy, mean, inv, scale, bias = _p2_data(special)
    pack = {}
    for t, v, tdt in ((X, x, dt), (DY, dy, dt), (S, scale, np.float32), (B, bias, np.float32),
                      (M, mean, np.float32), (IV, inv, np.float32)):
        a = alloc(t.dims, t.strides, tdt)
        a[...] = np.asarray(v, np.float64).reshape(t.dims).astype(np.float32).astype(tdt)
        pack[t] = a
    r = {t: f64(a) for t, a in pack.items()}
    outs = {DX: alloc(DX.dims, DX.strides, dt), DS: alloc(DS.dims, DS.strides, np.float32),
            DB: alloc(DB.dims, DB.strides, np.float32)}
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE")
        names = [nm for nm, _ in plan.algorithm.trials]
        want_name = ("bn_rows:" + k.bn_rows_isa(dtype)
                     + ("+dense" if layout.endswith("cropped") else ""))
        assert names == [want_name], names
        plan.execute_sync({**pack, **outs})
    yf = ref.bn_inference(r[X], r[M], r[IV], r[S], r[B])
    want = ref.bn_backward(ref.relu_bwd(yf, r[DY]), r[X], r[S], r[M], r[IV])
    return (f64(outs[DX]), f64(outs[DS]).ravel(), f64(outs[DB]).ravel(), outs[DX], want,
            yf)


@pytest.mark.parametrize("dtype", HUGE_KINDS)
@pytest.mark.parametrize("layout", list(P2_LAYOUTS))
def test_engine_pattern2_where_scale_inv_overflows_float32(layout, dtype):
    """Pattern 2 on constant channels at inv_variance 3e38 with scale 2 and 1.5:
    a = float32(scale * inv_variance) is +inf, and inference gives y = bias there (in
    float64, x - mean = 0); RELU_BWD's forward value in the backward was 0 * inf = NaN
    (dx, dscale NaN) where the float64 reference has dx ~ 1e35, dscale 0. Now the
    float64 reference's dx, dscale 0, dbias the sum of the passed dy; the ordinary
    channels bit for bit those of a graph run without the special ones."""
    if not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    dx, ds, db, dxa, want, yf = _engine_p2(layout, dtype, True)
    what = f"{layout} {dtype}"
    assert (yf[:, 1] == 10.0).all() and (yf[:, 3] == -0.25).all(), what
    wdx, wds, wdb = want["dx"], want["dscale"].ravel(), want["dbias"].ravel()
    assert np.isfinite(wdx).all() and np.abs(wdx[:, 1]).max() > 1e34, what
    assert np.isfinite(dx).all(), (what, dx[0, 1, 0])
    assert_close(dx, wdx, *tol("bn_backward", dtype), f"{what} dx")
    assert_close(ds, wds, *tol("bn_backward", "float32"), f"{what} dscale")
    assert_close(db, wdb, *tol("bn_backward", "float32"), f"{what} dbias")
    assert ds[1] == 0.0 and ds[3] == 0.0 and db[3] == 0.0, (what, ds, db)
    assert (dx[:, 3] == 0.0).all(), what
    # the ordinary channels: as without the special ones
    dx2, ds2, db2, dxa2, _, _ = _engine_p2(layout, dtype, False)
    assert (bits(np.ascontiguousarray(dxa[:, ::2]))
            == bits(np.ascontiguousarray(dxa2[:, ::2]))).all(), what
    f32 = lambda v: bits(np.float32(v[::2]))
    assert (f32(ds) == f32(ds2)).all() and (f32(db) == f32(db2)).all(), what


# ------------------------------------------------------------------ a factor beyond float32
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["training", "training_relu", "inference"])
@pytest.mark.parametrize("layout,shape", [("first", (2, 3, 5, 8)), ("last", (2, 3, 5, 8)),
                                          ("last", (2, 100, 2, 3))])
@pytest.mark.parametrize("dtype", list(KINDS))
def test_factor_beyond_float32(dtype, layout, shape, name, isa):
    """epsilon 1e-77 (the graph's bound is 8.64e-78, where 1/sqrt(epsilon) is FLT_MAX) and
    scale 2: scale / sqrt(variance + epsilon) = 6.3e38 overflows float32 on a channel of
    variance 0. Channel 0 is constant (0 * inf = NaN in float32; the bias in float64);
    for inference, channel 1 has the given variance 0 and mean 0 and x ~ 1e-39 (float32:
    y = x * 6.3e38 + bias ~ 1, +-inf in float32); the other channels take the float32
    rows. (A non-constant channel's squares of deviations below ~1e-19 underflow float32,
    so training has no finite such case but the constant one.)"""
    kind, dt = KINDS[dtype]
    eps = 1e-77
    rng = np.random.default_rng([shape[1], len(name)])
    c = shape[1]
    xv = rng.uniform(-1, 1, shape)
    xv[:, 0] = 3.0                                    # constant: variance 0
    tiny = name == "inference" and dtype == "float32"
    if tiny:
        xv[:, 1] = 1e-39 * rng.standard_normal(xv[:, 1].shape)
    x, xr = laid(xv, dt, layout)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    scale[:2] = 2.0
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    relu = name == "training_relu"
    what = f"{dtype} {layout} {shape} {name} {isa}"
    if name == "inference":
        mean64 = xr.mean(axis=(0, 2, 3))
        var64 = ((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3))
        mean, var = mean64.astype(np.float32), var64.astype(np.float32)
        if tiny:
            mean[1] = var[1] = 0.0
        y = empty_like_layout(x)
        k.bn_rows(k.BN_ROWS_INFERENCE, raw(x), raw(y), kind, scale=scale, bias=bias, mean=mean,
                  variance=var, epsilon=eps, isa=isa)
        mean64, var64 = f64(mean), f64(var)
    else:
        y, mean, var = _training_rows(x, kind, scale, bias, eps, isa, True, act=relu)
        mean64 = xr.mean(axis=(0, 2, 3))
        var64 = ((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3))
    want = chan(scale) * (xr - chan(mean64)) / np.sqrt(chan(var64) + eps) + chan(bias)
    if relu:
        want = np.maximum(want, 0.0)
    factor = f64(scale) / np.sqrt(var64 + eps)
    assert factor[0] > 3.5e38 and (not tiny or factor[1] > 3.5e38)
    assert_close(y, want, *tol("bn_training", dtype), f"{what} y")
    yb = f64(y)
    assert np.isfinite(yb).all(), what
    b0 = f64(np.float32(bias[0]).astype(dt))
    assert (yb[:, 0] == (max(b0, 0.0) if relu else b0)).all(), what


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("name", ["training", "training_relu", "inference"])
@pytest.mark.parametrize("layout,shape", [("first", (2, 4, 5, 8)), ("last", (2, 4, 5, 8)),
                                          ("last", (2, 100, 2, 3))])
@pytest.mark.parametrize("dtype", list(KINDS))
def test_infinite_scale(dtype, layout, shape, name, isa):
    """scale +inf on channel 0 and -inf on channel 1: y = scale (x - mean) /
    sqrt(variance + epsilon) + bias is +-inf by the side of the mean as in float64 (the
    float32 training rows folded the mean's remainder into the bias as inf * 0 = NaN and
    gave NaN there); the other channels are untouched by it."""
    kind, dt = KINDS[dtype]
    rng = np.random.default_rng([shape[1], len(name), kind])
    c = shape[1]
    # x never at the channel's mean: the values +-1 +- 0.25 U(0, 1), as many each side
    side = np.where(rng.uniform(size=shape) < 0.5, -1.0, 1.0)
    x, xr = laid(side * (1.0 + 0.25 * rng.uniform(size=shape)), dt, layout)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    scale[0], scale[1] = np.inf, -np.inf
    bias = rng.uniform(-1, 1, c).astype(np.float32)
    relu = name == "training_relu"
    what = f"{dtype} {layout} {shape} {name} {isa}"
    mean64 = xr.mean(axis=(0, 2, 3))
    var64 = ((xr - chan(mean64)) ** 2).mean(axis=(0, 2, 3))
    if name == "inference":
        mean, var = mean64.astype(np.float32), var64.astype(np.float32)
        y = empty_like_layout(x)
        k.bn_rows(k.BN_ROWS_INFERENCE, raw(x), raw(y), kind, scale=scale, bias=bias, mean=mean,
                  variance=var, epsilon=EPS, isa=isa)
        mean64, var64 = f64(mean), f64(var)
    else:
        y, mean, var = _training_rows(x, kind, scale, bias, EPS, isa, True, act=relu)
    with np.errstate(invalid="ignore", over="ignore"):
        want = chan(scale) * (xr - chan(mean64)) / np.sqrt(chan(var64) + EPS) + chan(bias)
    assert np.isinf(want[:, :2]).all(), what       # no x at its channel's mean
    if relu:
        want = np.maximum(want, 0.0)
    assert_close(y, want, *tol("bn_training", dtype), f"{what} y")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["first", "last"])
def test_infinite_scale_at_the_float32_mean(layout, isa):
    """x equal to the float32 rounding of its channel's mean but below the float64 mean
    (0.2f = 0.20000000298 against 0.2000000055, found by a break-it helper): scale +inf
    gives -inf there as in float64 (the channels-last rows took the float32 mean's side:
    NaN)."""
    xv = np.zeros((1, 2, 6, 1))
    xv[0, 0, :, 0] = np.float32([0.1, 0.2, 0.3, 0.2, 0.1, 0.3])
    xv[0, 1, :, 0] = [1, 2, 3, 3, 2, 1]
    x, xr = laid(xv, np.dtype(np.float32), layout)
    scale, bias = np.float32([np.inf, 1.0]), np.zeros(2, np.float32)
    y, mean, _ = _training_rows(x, 0, scale, bias, EPS, isa, True)
    m = xr.mean(axis=(0, 2, 3))
    assert np.float32(m[0]) == np.float32(0.2) and np.float32(0.2) < m[0]   # the edge
    with np.errstate(invalid="ignore"):
        want = chan(scale) * (xr - chan(m)) / np.sqrt(chan(xr.var(axis=(0, 2, 3))) + EPS)
    assert_close(y, want, *tol("bn_training", "float32"), f"{layout} {isa}")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("act", [False, True], ids=["plain", "drelu"])
@pytest.mark.parametrize("layout,shape", [("first", (2, 4, 3, 3)), ("last", (2, 4, 3, 3)),
                                          ("last", (2, 100, 2, 3))])
@pytest.mark.parametrize("dtype", list(KINDS))
def test_backward_of_an_infinite_scale(dtype, layout, shape, act, isa):
    """scale +inf and -inf on channels 0 and 1: dx = scale inv / M (M g - sum g - xhat
    dscale) is +-inf as in float64 (the float32 rows' k1 g + k2 xhat + k3 was inf - inf =
    NaN: found by a break-it helper), the other channels as before."""
    kind, dt = KINDS[dtype]
    rng = np.random.default_rng([shape[1], kind, act])
    c = shape[1]
    x, xr = laid(rng.standard_normal(shape), dt, layout)
    dy, g = laid(rng.standard_normal(shape), dt, layout)
    mean = xr.mean(axis=(0, 2, 3)).astype(np.float32)
    inv = (1 / np.sqrt(xr.var(axis=(0, 2, 3)) + EPS)).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    scale[0], scale[1] = np.inf, -np.inf
    bias = rng.uniform(-0.5, 0.5, c).astype(np.float32)
    dx = empty_like_layout(x)
    ds, db = np.full(c, np.nan, np.float32), np.full(c, np.nan, np.float32)
    k.bn_rows(k.BN_ROWS_BACKWARD, raw(x), raw(dx), kind, dy=raw(dy), scale=scale, mean=mean,
              inv_variance=inv, dscale=ds, dbias=db, act=act, bias=bias if act else None,
              isa=isa)
    xhat = (xr - chan(mean)) * chan(inv)
    with np.errstate(invalid="ignore", over="ignore"):
        if act:      # RELU_BWD of the recomputed forward: +-inf there, by xhat's sign
            yb = chan(scale) * xhat + chan(bias)
            g = np.where(yb > 0, g, 0.0)
        m = g[:, :1].size
        sg, sgd = g.sum(axis=(0, 2, 3)), (g * xhat).sum(axis=(0, 2, 3))
        want = chan(scale * inv / m) * (m * g - chan(sg) - xhat * chan(sgd))
    what = f"{dtype} {layout} {shape} {'drelu' if act else 'plain'} {isa}"
    assert np.isinf(want[:, :2]).any(), what
    assert_close(dx, want, *tol("bn_backward", dtype), f"{what} dx")


@pytest.mark.parametrize("engine", ["ONEDNN_ENGINE", "CPU_ENGINE"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_engine_training_of_a_tiny_spread(layout, engine):
    """A graph's batchnorm training at epsilon 1e-77 on x ~ 1e-23 N(0, 1) (variance ~
    1e-46, whose float32 squares vanish) beside an N(0, 1) channel: y ~ N(0, 1), the mean
    and inv_variance ~ 1e23 are float64's on both engines (the rows once gave y 1e14 off)."""
    if engine == "ONEDNN_ENGINE" and not ONEDNN_STATE.ok:
        pytest.skip(f"oneDNN does not load here: {ONEDNN_STATE.reason}")
    rng = np.random.default_rng(23)
    shape, eps = (4, 2, 6, 5), 1e-77
    x = (np.array([1e-23, 1.0]).reshape(1, 2, 1, 1)
         * rng.standard_normal(shape)).astype(np.float32)
    xr = f64(x)
    m = xr.mean(axis=(0, 2, 3))
    inv = 1.0 / np.sqrt(((xr - chan(m)) ** 2).mean(axis=(0, 2, 3)) + eps)
    want_y = (xr - chan(m)) * chan(inv)
    f32 = hd.DataType.FLOAT
    g = hd.Graph(io_data_type="float32", intermediate_data_type=f32, compute_data_type=f32)
    X = g.tensor(dims=shape, layout=layout, name="x")
    ch = lambda name: g.tensor(dims=(1, 2, 1, 1), name=name, data_type="float32")
    y, mean, iv, _, _ = g.batchnorm(X, ch("scale"), ch("bias"), epsilon=eps)
    y.set_output(True).set_name("y")
    mean.set_output(True).set_data_type("float32").set_name("mean")
    iv.set_output(True).set_data_type("float32").set_name("inv")
    perm = (0, 2, 3, 1) if layout == "NHWC" else (0, 1, 2, 3)
    xm = np.ascontiguousarray(np.transpose(x, perm))
    out = np.full_like(xm, np.nan)
    v = lambda a: np.asarray(a, np.float32).reshape(1, 2, 1, 1)
    pack = {"x": xm, "y": out, "scale": v([1, 1]), "bias": v([0, 0]),
            "mean": v([np.nan] * 2), "inv": v([np.nan] * 2)}
    with hd.Device("cpu") as dev:
        dev.build_sync(g, engine=engine).execute_sync(pack)
    got = np.transpose(out, np.argsort(perm))
    what = f"{layout} {engine}"
    assert_close(got, want_y, *tol("bn_training", "float32"), f"{what} y")
    assert_close(pack["mean"].reshape(-1), m, 1e-30, 1e-5, f"{what} mean")
    assert_close(pack["inv"].reshape(-1), inv, 0.0, 1e-5, f"{what} inv_variance")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout,shape", [("first", (5, 2, 3, 4)), ("last", (5, 2, 3, 4)),
                                          ("last", (5, 20, 2, 3)), ("last", (5, 100, 1, 2))])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
def test_training_where_x_minus_mean_is_beyond_flt_max(dtype, layout, shape, isa):
    """Channels holding +-FLT_MAX (3 of 5 images at the top, 2 at the bottom; the last
    channel N(0, 1)): x - mean reaches 1.7 FLT_MAX, which float32 cannot hold, while y
    (+0.82, -1.22) is finite; those channels' y are taken in float64 (they came out -inf:
    found by a break-it helper; PyTorch gives NaN there)."""
    kind, dt = KINDS[dtype]
    top = float(ml_dtypes.finfo(dt).max)   # (NumPy's finfo takes no bfloat16 with some ml_dtypes)
    xv = np.random.default_rng(len(shape)).standard_normal(shape)
    xv[:3, :-1] = top
    xv[3:, :-1] = -top
    x, xr = laid(xv, dt, layout)
    c = shape[1]
    scale, bias = np.ones(c, np.float32), np.zeros(c, np.float32)
    y, mean, var = _training_rows(x, kind, scale, bias, 1e-5, isa, wide=True)
    m = xr.mean(axis=(0, 2, 3))
    v = ((xr - chan(m)) ** 2).mean(axis=(0, 2, 3))
    want = (xr - chan(m)) / np.sqrt(chan(v) + 1e-5)
    what = f"{dtype} {layout} {shape} {isa}"
    assert np.isfinite(f64(y)).all(), what
    assert_close(y, want, *tol("bn_training", dtype), what)
    assert_close(var, v, 0.0, SUM_RTOL, f"{what} variance")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("dtype", HUGE_KINDS)
@pytest.mark.parametrize("seed", range(4))
def test_batch_mean_within_the_contracts_reduction_bound(seed, dtype, layout, isa):
    """Two opposite outliers (+-1e8, +-1e12, away from the pivot's elements) among N(0, 1)
    values: the saved mean is within the batchnorm-statistics bound of
    docs/contract/tolerances.md, the table's atol + rtol |mean| + 64 2^-24 max|x - mean|
    (one such channel was 0.01 off, outside the table's 4e-3 alone: found by a break-it
    helper; float32 partial sums cannot do better without float64 ones)."""
    kind, dt = KINDS[dtype]
    rng = np.random.default_rng([seed, len(dtype), len(layout)])
    shape = (4, 3, 5, 7)
    xv = rng.standard_normal(shape)
    big = 10.0 ** (8 + 4 * (seed % 2))
    xv[1, :, 2, 3] = big
    xv[0, :, 1, 1] = -big
    x, xr = laid(xv, dt, layout)
    y, mean, var = _training_rows(x, kind, np.ones(3, np.float32), np.zeros(3, np.float32),
                                  1e-5, isa, wide=True)
    m = np.array([math.fsum(xr[:, c].ravel()) for c in range(3)]) / (xr.size // 3)
    atol, rtol = tol("bn_training", dtype)
    bound = atol + rtol * np.abs(m) + 64 * 2.0 ** -24 * np.abs(xr - chan(m)).max(axis=(0, 2, 3))
    assert (np.abs(f64(mean) - m) <= bound).all(), (mean, m, bound)
