"""``_kernels.convert``: exact element-type conversion (float32 / bfloat16 / float16) against
NumPy's ``astype`` (and ml_dtypes' for bfloat16), bit for bit, NaN compared as NaN."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hipdnn_async.providers.cpu import _kernels

F16, F32, BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)
KIND = {F32: 0, BF16: 1, F16: 2}
BITS = {4: np.uint32, 2: np.uint16}


def _assert_same(got, want):
    """Equal bits where ``want`` is a number; NaN where it is NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    assert np.isnan(got.astype(np.float32)[nan]).all()
    g, w = (np.ascontiguousarray(a).view(BITS[a.dtype.itemsize]) for a in (got, want))
    bad = np.flatnonzero((g != w) & ~nan)
    assert bad.size == 0, (f"{bad.size} differ, first at {bad[0]}: "
                           f"{g.reshape(-1)[bad[0]]:#x} != {w.reshape(-1)[bad[0]]:#x}")


def _convert(x, dtype, *, baseline=False, team=False, out=None):
    out = np.empty(x.shape, dtype) if out is None else out
    _kernels.convert(x, KIND[x.dtype], out, KIND[out.dtype], baseline=baseline, team=team)
    return out


def _every_f16():
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(F16)


def _f32_sweep():
    """float32 values converting to float16 at every kind of boundary: the halfway points
    between all adjacent finite float16 values and their float32 neighbours (ties to even,
    subnormal ties included), float32 subnormals, the overflow threshold 65520 (the tie
    above 65504) and its neighbours, +-inf, NaNs, and 2**20 random bit patterns."""
    h = _every_f16().astype(np.float64)
    h = np.unique(h[np.isfinite(h)])
    mid = ((h[:-1] + h[1:]) / 2).astype(np.float32)          # exact in float32 (12 bits)
    assert np.array_equal(mid.astype(np.float64), (h[:-1] + h[1:]) / 2)
    near = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)),
                           np.nextafter(mid, np.float32(-np.inf)), h.astype(np.float32)])
    edge = np.array([65504, 65519.996, 65520, 65520.004, 3.4e38, np.inf, -np.inf, np.nan,
                     -np.nan, 2.0 ** -25, 2.0 ** -24, 2.0 ** -25 * 1.5, 2.0 ** -26, 1e-45,
                     -1e-45, 1e-40, 0.0, -0.0], np.float32)
    payload = np.array([0x7fc00001, 0x7f800001, 0xffbfffff, 0x7fa00000], np.uint32).view(F32)
    rand = np.random.default_rng(5).integers(0, 1 << 32, 1 << 20, dtype=np.uint32).view(F32)
    return np.concatenate([near, -near, edge, payload, rand])


@pytest.mark.parametrize("baseline", [False, True], ids=["rows", "baseline"])
def test_f16_to_f32_every_bit_pattern(baseline):
    x = _every_f16()
    _assert_same(_convert(x, F32, baseline=baseline), x.astype(F32))


@pytest.mark.parametrize("baseline", [False, True], ids=["rows", "baseline"])
def test_f32_to_f16_rounds_to_nearest_even_like_numpy(baseline):
    x = _f32_sweep()
    got = _convert(x, F16, baseline=baseline)
    with np.errstate(all="ignore"):
        _assert_same(got, x.astype(F16))
    assert np.isinf(got[np.abs(x) >= 65520]).all()


@np.errstate(all="ignore")          # casting NaN warns in ml_dtypes
def test_bf16_conversions_like_ml_dtypes():
    b = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)
    _assert_same(_convert(b, F32), b.astype(F32))
    x = _f32_sweep()
    with np.errstate(all="ignore"):
        want = x.astype(BF16)
    _assert_same(_convert(x, BF16), want)
    h = _every_f16()
    _assert_same(_convert(h, BF16), h.astype(F32).astype(BF16))  # f16 -> f32 is exact


@pytest.mark.parametrize("src,dst", [(F16, F32), (F32, F16), (F32, F32), (F16, F16)],
                         ids=["f16-f32", "f32-f16", "f32-f32", "f16-f16"])
@pytest.mark.parametrize("view", ["strided", "negative", "channels_last", "transposed_out"])
@pytest.mark.parametrize("team", [False, True], ids=["thread", "team"])
@np.errstate(all="ignore")          # casting 7e4 to float16 overflows (to inf: the point)
def test_views_and_team(src, dst, view, team):
    """Any strides in and out, negative ones included, and oneDNN's OpenMP team (65,536
    elements and more: uneven splits of 3 images) give NumPy's values."""
    rng = np.random.default_rng(7)
    dims = (3, 24, 31, 37)
    base = rng.standard_normal((3, 24, 62, 74)).astype(np.float32) * 300
    base.reshape(-1)[::97][:6] = [np.nan, np.inf, -np.inf, -0.0, 1e-6, 7e4]
    big = base.astype(src)
    out = np.full((3, 24, 62, 74), 7, dst)
    if view == "strided":
        x, o = big[:, :, ::2, ::2], out[:, :, 1::2, ::2]
    elif view == "negative":
        x, o = big[::-1, :, ::-2, ::2], out[:, ::-1, :31, 37:]
    elif view == "channels_last":
        x = np.ascontiguousarray(big[:, :, :31, :37].transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        o = np.empty((3, 31, 37, 24), dst).transpose(0, 3, 1, 2)
    else:
        x = big[:, :, :31, :37]
        o = np.empty((37, 31, 24, 3), dst).transpose(3, 2, 1, 0)
    assert x.shape == o.shape == dims and x.size >= 1 << 16
    before = out.copy()
    _convert(x, dst, out=o, team=team)
    _assert_same(o, x.astype(dst))
    if view == "strided":          # only the view's elements written
        mask = np.ones(out.shape, bool)
        mask[:, :, 1::2, ::2] = False
        assert np.array_equal(out.view(BITS[dst.itemsize])[mask],
                              before.view(BITS[dst.itemsize])[mask])


def test_team_equals_one_thread():
    from hipdnn_async.runtime import load_onednn
    if not load_onednn().ok:
        pytest.skip("oneDNN does not load here: team=True runs on the calling thread only")
    x = _f32_sweep()[: 1 << 20].reshape(4, 16, 128, 128)
    a, b = _convert(x, F16), _convert(x, F16, team=True)
    assert np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_rank_one_zero_size_and_in_place():
    x = np.array([1.5, -0.0, np.nan], np.float32)
    _assert_same(_convert(x, F16), x.astype(F16))
    _convert(np.empty((0, 3), F16), F32)                   # nothing to do
    y = np.array([1, 2, 3], np.float32)
    _kernels.convert(y, 0, y, 0)                           # the same kind: bits kept
    assert y.tolist() == [1, 2, 3]


def test_bad_arguments():
    x, o = np.zeros((2, 3), F16), np.zeros((2, 3), F32)
    with pytest.raises(ValueError, match="shapes differ"):
        _kernels.convert(x, 2, np.zeros((3, 2), F32), 0)
    with pytest.raises(ValueError, match="element kinds"):
        _kernels.convert(x, 2, o, 3)
    with pytest.raises(ValueError, match="item sizes"):
        _kernels.convert(x, 2, o, 2)
    with pytest.raises(ValueError, match=r"x \(>f2\) .* non-native byte order"):
        _kernels.convert(x.astype(">f2"), 2, o, 0)    # was: other numbers, silently
    with pytest.raises(ValueError, match=r"out \(>f4\) is in non-native byte order"):
        _kernels.convert(x, 2, o.astype(">f4"), 0)
    assert not o.any()                                 # nothing written
    o.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _kernels.convert(x, 2, o, 0)
