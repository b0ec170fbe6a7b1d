"""CPU batchnorm and activation kernels (hipdnn_async.providers.cpu._batchnorm) vs float64.

References are written here in float64 NumPy from the (already rounded) inputs.
Tolerances ``|impl - ref| <= tol * (1 + |ref|)`` per dtype follow hipDNN's
``hipdnn_test_sdk/utilities/TestTolerances.hpp`` (batchnorm::getToleranceTraining
4e-3/4e-3/8e-3, getToleranceInference 2e-4/5e-4/5e-3, getToleranceBackward
2e-3/4e-4/3e-3 for fp32/fp16/bf16), with fp32 tightened to 1e-5 since we accumulate in
float64. Per-channel float32 outputs (mean, inv_variance, running stats, dscale, dbias)
use 1e-6 / 1e-5.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from hipdnn_async._errors import GraphError
from hipdnn_async.providers.cpu import _batchnorm as bn

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
DTYPES = [F32, F16, BF16]
IDS = ["fp32", "fp16", "bf16"]
TOL_TRAIN = {F32: 1e-5, F16: 4e-3, BF16: 8e-3}
TOL_INFER = {F32: 1e-5, F16: 5e-4, BF16: 5e-3}
TOL_BWD = {F32: 1e-5, F16: 4e-4, BF16: 3e-3}
STATS_TOL = 1e-6   # mean / inv_variance / running stats: float32 outputs of float64 sums


def _check(got, ref, tol):
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any(), "unwritten (NaN) output elements"
    err = np.abs(got - ref)
    assert (err <= tol * (1 + np.abs(ref))).all(), f"max err {err.max():.3g} (tol {tol})"


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _pc(v, ndim):
    """A length-C vector as a (1, C, 1, ...) float64 array for broadcasting."""
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (ndim - 2))


def _param(c, rng, lo=-2.0, hi=2.0, ndim=4):
    return rng.uniform(lo, hi, (1, c) + (1,) * (ndim - 2)).astype(np.float32)


def _relu_ref(v, clips):
    if clips is None:
        return v
    lower, upper = clips
    lo = 0.0 if lower is None else lower
    hi = math.inf if upper is None else upper
    r = np.clip(v, lo, hi) + 0.0
    return np.where(np.isnan(v), v, r)


def _drelu_ref(y, dy, lower, upper):
    lo = 0.0 if lower is None else lower
    hi = math.inf if upper is None else upper
    g = np.where((y > lo) & (y < hi), dy, 0.0)
    return np.where(np.isnan(y), np.nan, g)


def _nhwc(a):
    order = (0,) + tuple(range(2, a.ndim)) + (1,)
    return np.ascontiguousarray(a.transpose(order)).transpose(np.argsort(order))


def _layout(a, layout):
    if layout == "nchw":
        return a
    if layout == "nhwc":
        return _nhwc(a)
    big = np.zeros(tuple(d + 1 for d in a.shape), a.dtype)   # non-packed view
    v = big[tuple(slice(1, None) for _ in a.shape)]
    v[...] = a
    return v


def _empty(dims, dtype, layout):
    a = _layout(np.zeros(dims, dtype), layout)
    a[...] = np.nan
    return a


SHAPES = [(2, 3, 5, 7), (4, 5, 3, 1), (2, 3, 3, 4, 5), (1, 3, 14, 14), (32, 3, 1, 14)]


# ----------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("relu", [None, (None, None), (None, 0.5), (-0.2, 0.5)],
                         ids=["norelu", "relu", "clipped", "clamp"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "gapped"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("dims", SHAPES, ids=[str(s) for s in SHAPES])
def test_bn_training(dims, dtype, layout, relu):
    rng = np.random.default_rng(len(dims) * 100 + dims[1])
    c = dims[1]
    x = _layout(rng.uniform(-1, 1, dims).astype(dtype), layout)
    scale, bias = _param(c, rng, ndim=len(dims)), _param(c, rng, ndim=len(dims))
    prev_m, prev_v = _param(c, rng, ndim=len(dims)), _param(c, rng, 0.5, 2, ndim=len(dims))
    eps, mom = 3e-5, 0.1
    y = _empty(dims, dtype, layout)
    outs = [np.full((1, c) + (1,) * (len(dims) - 2), np.nan, np.float32) for _ in range(4)]
    bn.bn_training(x, scale, bias, eps, y, outs[0], outs[1], relu=relu, momentum=mom,
                   prev_running_mean=prev_m, prev_running_variance=prev_v,
                   next_running_mean=outs[2], next_running_variance=outs[3])
    xd = x.astype(np.float64)
    m = xd.size // c
    mean = xd.mean(axis=_axes(xd), keepdims=True)
    var = ((xd - mean) ** 2).mean(axis=_axes(xd), keepdims=True)
    inv = 1 / np.sqrt(var + eps)
    yref = _relu_ref(scale * (xd - mean) * inv + bias, relu)
    _check(y, yref, TOL_TRAIN[np.dtype(dtype)])
    _check(outs[0], mean, STATS_TOL)
    _check(outs[1], inv, STATS_TOL)
    _check(outs[2], (1 - mom) * prev_m + mom * mean, STATS_TOL)
    _check(outs[3], (1 - mom) * prev_v + mom * var * m / (m - 1), STATS_TOL)


def test_bn_training_without_running_stats_and_float64():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 6, 5))
    scale, bias = _param(4, rng), _param(4, rng)
    y, mean, inv = np.full(x.shape, np.nan), np.full((1, 4, 1, 1), np.nan, np.float32), \
        np.full((1, 4, 1, 1), np.nan, np.float32)
    bn.bn_training(x, scale, bias, 1e-5, y, mean, inv)
    mu = x.mean(axis=(0, 2, 3), keepdims=True)
    iv = 1 / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, scale * (x - mu) * iv + bias, rtol=1e-12, atol=1e-12)
    _check(mean, mu, STATS_TOL)


def test_constant_channel_gives_zero_variance_not_nan():
    x = np.full((2, 3, 4, 4), 0.7, np.float32)
    x[:, 1] = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 4, 4)
    y = np.full(x.shape, np.nan, np.float32)
    mean, inv = np.zeros((1, 3, 1, 1), np.float32), np.zeros((1, 3, 1, 1), np.float32)
    nv = np.full((1, 3, 1, 1), np.nan, np.float32)
    bias = np.array([0.5, 0.0, -0.25], np.float32).reshape(1, 3, 1, 1)
    bn.bn_training(x, np.ones_like(bias), bias, 1e-5, y, mean, inv, momentum=1.0,
                   prev_running_mean=None, prev_running_variance=np.zeros_like(bias),
                   next_running_variance=nv)
    assert np.isfinite(y).all() and np.isfinite(inv).all()
    assert inv[0, 0, 0, 0] == np.float32(1 / math.sqrt(1e-5))
    assert (y[:, 0] == 0.5).all() and (y[:, 2] == -0.25).all()
    assert nv[0, 0, 0, 0] == 0 and nv[0, 2, 0, 0] == 0


def test_bf16_statistics_accumulate_wide():
    """A bf16 channel of 2^17 values near 100: a bf16 (or naive fp32) sum would be far off."""
    rng = np.random.default_rng(2)
    x = (100 + rng.uniform(-1, 1, (8, 2, 128, 128))).astype(BF16)
    y = np.empty(x.shape, BF16)
    mean, inv = np.empty((1, 2, 1, 1), np.float32), np.empty((1, 2, 1, 1), np.float32)
    one = np.ones((1, 2, 1, 1), np.float32)
    bn.bn_training(x, one, one * 0, 1e-5, y, mean, inv)
    xd = x.astype(np.float64)
    mu = xd.mean(axis=(0, 2, 3))
    var = xd.var(axis=(0, 2, 3))
    np.testing.assert_allclose(mean.ravel(), mu, rtol=1e-7)
    np.testing.assert_allclose(inv.ravel(), 1 / np.sqrt(var + 1e-5), rtol=1e-6)


@pytest.mark.parametrize("dims", [(1, 3, 1, 1), (1, 2, 1, 1, 1)])
def test_training_with_one_value_per_channel_is_an_error(dims):
    x = np.zeros(dims, np.float32)
    p = np.ones((1, dims[1]) + (1,) * (len(dims) - 2), np.float32)
    with pytest.raises(GraphError, match="N\\*spatial = 1"):
        bn.bn_training(x, p, p, 1e-5, np.empty_like(x), None, None)


@pytest.mark.parametrize("eps", [0.0, -1e-5])
def test_non_positive_epsilon_is_an_error(eps):
    x = np.zeros((2, 2, 2, 2), np.float32)
    p = np.ones((1, 2, 1, 1), np.float32)
    with pytest.raises(GraphError, match="epsilon"):
        bn.bn_training(x, p, p, eps, np.empty_like(x), None, None)
    with pytest.raises(GraphError, match="epsilon"):
        bn.bn_inference_variance(x, p, p, p, p, eps, np.empty_like(x))


# ----------------------------------------------------------------------------
# Inference
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("relu", [None, (None, None), (0.1, 0.5)], ids=["norelu", "relu", "clamp"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "gapped"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("dims", [(2, 3, 5, 7), (1, 256, 1, 1), (2, 3, 3, 1, 1), (2, 4, 3, 4, 5)])
def test_bn_inference_both_forms(dims, dtype, layout, relu):
    rng = np.random.default_rng(3)
    nd, c = len(dims), dims[1]
    x = _layout(rng.uniform(-1, 1, dims).astype(dtype), layout)
    mean, scale, bias = (_param(c, rng, -0.5, 0.5, nd) for _ in range(3))
    var = _param(c, rng, 0.2, 2.0, nd)
    eps = 1e-5
    inv = (1 / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
    xd = x.astype(np.float64)
    y1, y2 = _empty(dims, dtype, layout), _empty(dims, dtype, layout)
    bn.bn_inference(x, mean, inv, scale, bias, y1, relu=relu)
    bn.bn_inference_variance(x, mean, var, scale, bias, eps, y2, relu=relu)
    tol = TOL_INFER[np.dtype(dtype)]
    _check(y1, _relu_ref(scale * (xd - mean) * inv.astype(np.float64) + bias, relu), tol)
    _check(y2, _relu_ref(scale * (xd - mean) / np.sqrt(var.astype(np.float64) + eps) + bias,
                         relu), tol)


# ----------------------------------------------------------------------------
# Backward, plain and fused with DReLU
# ----------------------------------------------------------------------------

def _bwd_ref(dy, x, scale, mean, inv):
    ax = _axes(x)
    m = x.size // x.shape[1]
    xhat = (x - mean) * inv
    dbias = dy.sum(axis=ax, keepdims=True)
    dscale = (dy * xhat).sum(axis=ax, keepdims=True)
    dx = scale * inv / m * (m * dy - dbias - xhat * dscale)
    return dx, dscale, dbias


def _bwd_case(dims, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    nd, c = len(dims), dims[1]
    x = _layout(rng.uniform(-1, 1, dims).astype(dtype), layout)
    dy = _layout(rng.uniform(-1, 1, dims).astype(dtype), layout)
    scale, mean = _param(c, rng, 0.5, 1.5, nd), _param(c, rng, -0.1, 0.1, nd)
    inv = _param(c, rng, 1.9, 2.0, nd)
    return x, dy, scale, mean, inv


BWD_SHAPES = [(2, 3, 14, 14), (1, 3, 5, 5), (32, 3, 14, 1), (2, 5, 7, 9), (2, 3, 3, 4, 5)]


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "gapped"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("dims", BWD_SHAPES, ids=[str(s) for s in BWD_SHAPES])
def test_bn_backward(dims, dtype, layout):
    x, dy, scale, mean, inv = _bwd_case(dims, dtype, layout, seed=4)
    c = dims[1]
    dx = _empty(dims, dtype, layout)
    ds, db = (np.full((1, c) + (1,) * (len(dims) - 2), np.nan, np.float32) for _ in range(2))
    bn.bn_backward(dy, x, scale, mean, inv, dx, ds, db)
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    rdx, rds, rdb = _bwd_ref(f64(dy), f64(x), f64(scale), f64(mean), f64(inv))
    _check(dx, rdx, TOL_BWD[np.dtype(dtype)])
    _check(ds, rds, 1e-5)
    _check(db, rdb, 1e-5)


@pytest.mark.parametrize("clips", [(None, None), (None, 0.5), (0.1, 0.5)],
                         ids=["relu", "clipped", "clamp"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("dims", [(2, 3, 14, 14), (2, 3, 3, 4, 5)])
def test_bn_backward_drelu_fusion_equals_unfused_float64(dims, dtype, layout, clips):
    x, dy, scale, mean, inv = _bwd_case(dims, dtype, layout, seed=5)
    c = dims[1]
    bn_bias = _param(c, np.random.default_rng(6), -0.1, 0.1, len(dims))
    dx = _empty(dims, dtype, layout)
    ds, db = (np.full((1, c) + (1,) * (len(dims) - 2), np.nan, np.float32) for _ in range(2))
    bn.bn_backward(dy, x, scale, mean, inv, dx, ds, db, drelu=(bn_bias, *clips))
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    y_bn = f64(scale) * (f64(x) - f64(mean)) * f64(inv) + f64(bn_bias)
    g = _drelu_ref(y_bn, f64(dy), *clips)
    assert 0 < np.count_nonzero(g) < g.size       # the mask really cuts
    rdx, rds, rdb = _bwd_ref(g, f64(x), f64(scale), f64(mean), f64(inv))
    _check(dx, rdx, TOL_BWD[np.dtype(dtype)])
    _check(ds, rds, 1e-5)
    _check(db, rdb, 1e-5)


# ----------------------------------------------------------------------------
# Activations: special values
# ----------------------------------------------------------------------------

SPECIAL = [np.nan, -0.0, 0.0, -np.inf, np.inf, -1.0, 2.0, 0.3, 0.5, -0.2]


@pytest.mark.parametrize("clips", [(None, None), (None, 0.5), (-0.2, 0.5), (0.0, None)],
                         ids=["relu", "clipped", "clamp", "lower0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_relu_special_values(dtype, clips):
    x = np.array(SPECIAL, dtype).reshape(1, 2, 5)
    out = np.full(x.shape, 7, dtype)
    bn.relu(x, out, *clips)
    want = _relu_ref(x.astype(np.float64), clips).astype(dtype).astype(np.float64)
    got = out.astype(np.float64)
    np.testing.assert_array_equal(got, want)          # NaN positions compare equal too
    zeros = got == 0
    assert not np.signbit(got[zeros]).any(), "relu produced -0.0"
    assert np.isnan(got.ravel()[0])


def test_relu_backward_special_values():
    y = np.array([np.nan, 0.0, -0.0, 0.5, 1.0, 2.0, -1.0, 0.25], np.float32).reshape(1, 1, 8)
    dy = np.array([1.0, 2.0, 3.0, 4.0, np.nan, 6.0, np.nan, 8.0], np.float32).reshape(1, 1, 8)
    out = np.full(y.shape, 7, np.float32)
    bn.relu_backward(y, dy, out)
    np.testing.assert_array_equal(out.ravel(), [np.nan, 0, 0, 4, np.nan, 6, 0, 8])
    bn.relu_backward(y, dy, out, None, 1.0)          # upper bound is exclusive too
    np.testing.assert_array_equal(out.ravel(), [np.nan, 0, 0, 4, 0, 0, 0, 8])
    bn.relu_backward(y, dy, out, 0.25, 1.0)
    np.testing.assert_array_equal(out.ravel(), [np.nan, 0, 0, 4, 0, 0, 0, 0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_backward_at_plus_inf(dtype):
    """A forward value of +inf is inside the active range (lower, +inf] without an upper
    clip (relu(+inf) = +inf, slope 1: dy passes, as PyTorch and cuDNN pass it) and above
    any upper clip (0); -inf is below every lower clip."""
    y = np.array([np.inf, -np.inf, np.inf, 0.5], dtype).reshape(1, 1, 4)
    dy = np.array([3.0, 4.0, -5.0, 6.0], dtype).reshape(1, 1, 4)
    out = np.full(y.shape, 7, dtype)
    for clips, want in (((None, None), [3, 0, -5, 6]), ((0.25, None), [3, 0, -5, 6]),
                        ((-1.0, np.inf), [3, 0, -5, 6]), ((None, 6.0), [0, 0, 0, 6]),
                        ((0.25, 1e30), [0, 0, 0, 6])):
        bn.relu_backward(y, dy, out, *clips)
        np.testing.assert_array_equal(out.ravel(), want, err_msg=str(clips))


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "gapped"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_add_bias_relu(dtype, layout):
    rng = np.random.default_rng(8)
    y = _layout(rng.uniform(-1, 1, (2, 4, 5, 3)).astype(np.float32), layout)
    bias = _param(4, rng, -0.5, 0.5)
    for b, clips in ((bias, (None, None)), (None, (None, 0.3)), (bias, (-0.1, 0.2))):
        out = _empty(y.shape, dtype, layout)
        bn.add_bias_relu(y, b, out, *clips)
        want = _relu_ref(y.astype(np.float64) + (0 if b is None else b), clips)
        _check(out, want, {F32: 1e-7, F16: 1e-3, BF16: 8e-3}[np.dtype(dtype)])
    ref = _relu_ref(y.astype(np.float64) + bias, (None, None))
    bn.add_bias_relu(y, bias, y, None, None)          # in place
    _check(y, ref, 1e-7)


def test_gapped_outputs_are_written_only_inside():
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32)
    big = np.full((3, 4, 5, 6), np.nan, np.float32)
    y = big[1:, 1:, 1:, 1:]
    one = np.ones((1, 3, 1, 1), np.float32)
    bn.bn_training(x, one, one, 1e-5, y, None, None, relu=(None, None))
    inside = np.zeros(big.shape, bool)
    inside[1:, 1:, 1:, 1:] = True
    assert np.isfinite(big[inside]).all() and np.isnan(big[~inside]).all()


# ----------------------------------------------------------------------------
# add_bias_relu / relu: the one-pass kernel, exact against a float64 reference
# ----------------------------------------------------------------------------

def _round_ref(v, dtype):
    """float64 values correctly rounded (nearest, ties to even) to ``dtype``.

    float32 and float16 use NumPy's double -> float/half casts (one rounding). ml_dtypes
    casts double -> bfloat16 through float32 (two roundings), so bfloat16 is picked here
    as the nearest of the three bfloat16 neighbours of that cast, ties to an even pattern.
    """
    dtype = np.dtype(dtype)
    if dtype != BF16:
        return v.astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        c = v.astype(np.float32).astype(BF16).view(np.uint16).astype(np.int64)
        cands = np.stack([c - 1, c, c + 1]) & 0xFFFF
        cv = cands.astype(np.uint16).view(BF16).astype(np.float64)
        d = np.abs(cv - v)
    d = np.where(np.isnan(d), np.inf, d)
    best = d == d.min(axis=0)
    even_best = best & ((cands & 1) == 0)
    pick = np.where(even_best.any(axis=0), even_best.argmax(axis=0), best.argmax(axis=0))
    r = np.take_along_axis(cands, pick[None], axis=0)[0].astype(np.uint16).view(BF16)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(v), r, v.astype(BF16))


def _bias_relu_ref(y, bias, lower, upper, dtype):
    """RELU_FWD(y + bias) from the exact float64 sum, rounded once to ``dtype``."""
    v = np.asarray(y, np.float64) + (0.0 if bias is None else _pc(bias.reshape(-1), y.ndim))
    lo = 0.0 if lower is None else lower
    hi = math.inf if upper is None else upper
    r = np.where(np.isnan(v), v, np.clip(v, lo, hi) + 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        return _round_ref(r, dtype)


def _assert_same(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    np.testing.assert_array_equal(got, want)            # NaN positions compare equal
    assert not np.signbit(got[got == 0]).any(), "RELU_FWD produced -0.0"


def _tie_values(dtype):
    """(y, bias) float32 pairs whose exact sum lies on, or just off, a rounding tie of
    ``dtype`` at 1.0 (a float32 sum rounded to nearest would land on the tie)."""
    half_ulp = {BF16: 2.0 ** -8, F16: 2.0 ** -11, F32: 2.0 ** -24}[np.dtype(dtype)]
    bias = np.array([half_ulp, half_ulp * (1 + 2.0 ** -23), -half_ulp * (1 + 2.0 ** -23),
                     3 * half_ulp], np.float32)
    return np.ones(4, np.float32), bias


CLIPS = [(None, None), (None, 0.5), (-0.2, 0.5), (0.0, None), (0.25, 0.25), (-0.5, None)]
CLIP_IDS = ["relu", "upper", "clamp", "lower0", "point", "lower_neg"]


@pytest.mark.parametrize("clips", CLIPS, ids=CLIP_IDS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc", "gapped", "5d_nhwc"])
@pytest.mark.parametrize("in_dt, out_dt", [(F32, F32), (BF16, BF16), (F16, F16), (F32, BF16),
                                           (F32, F16), (BF16, F32), (F16, F32)],
                         ids=["fp32", "bf16", "fp16", "fp32>bf16", "fp32>fp16", "bf16>fp32",
                              "fp16>fp32"])
@pytest.mark.parametrize("bias_dt", [None, F32, "io"], ids=["nobias", "bias32", "biasio"])
def test_add_bias_relu_exact(in_dt, out_dt, layout, clips, bias_dt):
    rng = np.random.default_rng(21)
    dims = (2, 5, 3, 4, 3) if layout == "5d_nhwc" else (3, 5, 4, 6)
    v = rng.uniform(-2, 2, dims)
    flat = v.reshape(-1)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, -1e-3, 0.5, -0.2, 0.25, 0.5 + 2.0 ** -9,
               -0.2 - 2.0 ** -12, 6.0e4, -6.0e4]
    flat[:len(special)] = special
    y = _layout(v.astype(in_dt), "nhwc" if layout == "5d_nhwc" else layout)
    c = dims[1]
    bias = None
    if bias_dt is not None:
        bias = _param(c, rng, -0.5, 0.5, len(dims))
        bias.reshape(-1)[0] = 0.0
        if bias_dt == "io":
            bias = bias.astype(in_dt)
    lower, upper = clips
    want = _bias_relu_ref(y, bias, lower, upper, out_dt)
    out = _empty(dims, out_dt, "nhwc" if layout == "5d_nhwc" else layout)
    bn.add_bias_relu(y, bias, out, lower, upper)
    _assert_same(out, want)
    if in_dt == out_dt:                                  # in place
        y2 = y.copy()
        bn.add_bias_relu(y2, bias, y2, lower, upper)
        _assert_same(y2, want)


@pytest.mark.parametrize("in_dt, out_dt", [(F32, BF16), (F32, F16), (BF16, BF16), (F16, F16),
                                           (F32, F32)],
                         ids=["fp32>bf16", "fp32>fp16", "bf16", "fp16", "fp32"])
def test_add_bias_relu_rounds_ties_once(in_dt, out_dt):
    """Sums on and next to a rounding tie of the output type round once, to nearest-even."""
    y1, b1 = _tie_values(out_dt)
    c = b1.size
    y = np.broadcast_to(y1.reshape(1, c, 1, 1), (2, c, 3, 3)).astype(in_dt)
    bias = b1.reshape(1, c, 1, 1)
    out = np.zeros(y.shape, out_dt)
    bn.add_bias_relu(y, bias, out, None, None)
    want = _bias_relu_ref(y, bias, None, None, out_dt)
    _assert_same(out, want)
    if out_dt != F32:                                    # the cases that need it, checked
        got = out[0, :, 0, 0].astype(np.float64)
        assert got[0] == 1.0 and got[1] > 1.0, got       # tie -> even; above tie -> up


@pytest.mark.parametrize("clips", [(None, None), (-0.2, 0.5), (0.25, None)],
                         ids=["relu", "clamp", "lower"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("in_dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("out_dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_bias_relu_vector_rows_equal_baseline_and_reference(in_dt, out_dt, layout, clips,
                                                            with_bias):
    """Runs long enough for the vector bodies (64 channels, 7 x 9 planes, more than 32
    lanes), with special values and rounding ties among them: the rows picked at run time
    (``bias_relu_isa``: AVX-512 where the CPU has it) give the same bits as the baseline
    build, and both equal the float64 reference rounded once."""
    from hipdnn_async.providers.cpu import _kernels
    rng = np.random.default_rng(24)
    dims = (2, 64, 7, 9)
    v = rng.uniform(-2, 2, dims)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, -1e-3, 0.5, -0.2, 0.25, 0.5 + 2.0 ** -9,
               1.0 + 2.0 ** -9, 1.0 + 3 * 2.0 ** -12, -6.0e4, 7.0e4]
    v.reshape(-1)[::37][:len(special)] = special
    with np.errstate(over="ignore"):                     # 7e4 is +inf in float16
        y = _layout(v.astype(in_dt), layout)
    bias = _param(64, rng, -0.5, 0.5) if with_bias else None
    if bias is not None:
        bias.reshape(-1)[:3] = [2.0 ** -9, -2.0 ** -12, 0.0]   # ties of the narrow types
    kinds = _kernels.BIAS_RELU_KINDS
    b = None if bias is None else np.ascontiguousarray(bias.reshape(-1), np.float32)
    lo = 0.0 if clips[0] is None else clips[0]
    hi = math.inf if clips[1] is None else clips[1]
    outs = []
    for baseline in (False, True):
        out = _empty(dims, out_dt, layout)
        _kernels.bias_relu(y, kinds[in_dt.name], out, kinds[out_dt.name], b, lo, hi,
                           baseline=baseline)
        outs.append(out)
    vec, base = (o.view({4: np.uint32, 2: np.uint16}[o.dtype.itemsize]) for o in outs)
    assert np.array_equal(vec, base), f"{_kernels.bias_relu_isa()} rows differ from the baseline"
    _assert_same(outs[0], _bias_relu_ref(y, bias, clips[0], clips[1], out_dt))


def test_bias_relu_isa_names_the_rows():
    from hipdnn_async.providers.cpu import _kernels
    from pathlib import Path
    info = Path("/proc/cpuinfo")
    flags = set(info.read_text().split()) if info.exists() else set()
    want = ("avx512" if {"avx512f", "avx512bw"} <= flags
            else "avx2" if {"avx2", "fma"} <= flags else "baseline")
    assert _kernels.bias_relu_isa() == want


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_relu_partial_overlap_reads_inputs_first(dtype):
    rng = np.random.default_rng(22)
    big = rng.uniform(-1, 1, (2, 3, 5, 9)).astype(dtype)
    y = big[..., :8]
    out = big[..., 1:]                                   # shifted by one element
    want = _bias_relu_ref(y.copy(), None, None, None, dtype)
    bn.relu(y, out)
    _assert_same(big[..., 1:], want)


def test_add_bias_relu_float64_keeps_fallback():
    rng = np.random.default_rng(23)
    y = rng.uniform(-1, 1, (2, 3, 4, 4))
    bias = _param(3, rng)
    out = np.empty_like(y)
    bn.add_bias_relu(y, bias, out, None, 0.5)
    np.testing.assert_array_equal(out, _bias_relu_ref(y, bias, None, 0.5, np.float64))


def test_add_bias_relu_rejects_bad_bias_and_clips():
    y = np.zeros((1, 3, 2, 2), np.float32)
    with pytest.raises(GraphError, match="bias"):
        bn.add_bias_relu(y, np.zeros((1, 4, 1, 1), np.float32), y, None, None)
    with pytest.raises(GraphError, match="lower"):
        bn.relu(y, y, 1.0, 0.5)


@pytest.mark.parametrize("dims", [(3, 40, 33, 17), (1, 37, 45, 41)], ids=["n3", "n1"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("in_dt", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_bias_relu_on_onednn_threads_equals_one_thread(dims, layout, in_dt, with_bias):
    """``team=True`` (the oneDNN engine's epilogue; 65,536 elements and more) splits the
    outermost axis among oneDNN's OpenMP threads: the same bits as one thread, and the
    float64 reference rounded once, on uneven splits (3 images, or one image whose
    outermost axis is then a plane) with special values."""
    from hipdnn_async.providers.cpu import _kernels
    from hipdnn_async.runtime import load_onednn
    if not load_onednn().ok:
        pytest.skip("oneDNN does not load here: team=True runs on the calling thread only")
    rng = np.random.default_rng(31)
    v = rng.uniform(-2, 2, dims)
    v.reshape(-1)[::101][:5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    y = _layout(v.astype(in_dt), layout)
    assert y.size >= 1 << 16
    bias = _param(dims[1], rng, -0.5, 0.5) if with_bias else None
    b = None if bias is None else np.ascontiguousarray(bias.reshape(-1), np.float32)
    k = _kernels.BIAS_RELU_KINDS[in_dt.name]
    outs = []
    for team in (False, True):
        out = _empty(dims, in_dt, layout)
        _kernels.bias_relu(y, k, out, k, b, 0.0, math.inf, team=team)
        outs.append(out.view({4: np.uint32, 2: np.uint16}[out.dtype.itemsize]))
    assert np.array_equal(outs[0], outs[1])
    _assert_same(outs[1].view(in_dt), _bias_relu_ref(y, bias, None, None, in_dt))
