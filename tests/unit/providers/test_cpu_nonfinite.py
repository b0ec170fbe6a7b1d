"""``_kernels.nonfinite``: whether an array holds a NaN or an infinity, against NumPy's
``isfinite`` (on float32 copies: exact for every float16 and bfloat16 value), for the
three element types, packed memory in several axis orders (the compiled scan) and other
strides (NumPy), special values at every kind of position."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hipdnn_async.providers.cpu import _kernels

KIND = {np.dtype(np.float32): 0, np.dtype(ml_dtypes.bfloat16): 1, np.dtype(np.float16): 2}
DTYPES = list(KIND)
SPECIALS = (np.inf, -np.inf, np.nan)


def _want(a) -> bool:
    return not np.isfinite(np.asarray(a, np.float32)).all()


def _views(base):
    """(name, view) of ``base`` (N, H, W, C): packed NHWC, the NCHW-dims view of it,
    a C-order copy, an F-order copy, a channel slice, a reversed axis, a 0-d element."""
    yield "nhwc", base
    yield "nchw dims over nhwc", base.transpose(0, 3, 1, 2)
    yield "c order", np.ascontiguousarray(base.transpose(0, 3, 1, 2))
    yield "f order", np.asfortranarray(base)
    yield "channel slice", base[..., 1:]
    yield "reversed", base[:, ::-1]
    yield "one element", base[0, 0, 0, 0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_finite_arrays_have_none(dtype):
    rng = np.random.default_rng(0)
    base = rng.uniform(-1, 1, (3, 7, 11, 5)).astype(dtype)
    top = ml_dtypes.finfo(dtype).max      # NumPy's finfo takes no bfloat16 with some ml_dtypes
    base[0, 0, 0, :2] = (top, -top)       # largest finite
    base[0, 0, 1, 0] = -0.0
    for name, v in _views(base):
        v = np.asarray(v)
        assert _kernels.nonfinite(v, KIND[dtype]) is False, name


@pytest.mark.parametrize("special", SPECIALS, ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_special_value_is_found_wherever_it_is(dtype, special):
    rng = np.random.default_rng(1)
    # 1155 elements: blocks of 256 and a tail of 131
    base = rng.uniform(-1, 1, (3, 7, 11, 5)).astype(dtype)
    for flat in (0, 255, 256, 511, 1024, base.size - 1):
        b = base.copy()
        b.reshape(-1)[flat] = special
        for name, v in _views(b):
            v = np.asarray(v)
            assert _kernels.nonfinite(v, KIND[dtype]) == _want(v), (name, flat)


def test_empty_arrays_and_wrong_kinds():
    assert _kernels.nonfinite(np.empty((0, 3), np.float32), 0) is False
    with pytest.raises(ValueError, match="kind 0 does not fit"):
        _kernels.nonfinite(np.zeros(4, np.float16), 0)
    with pytest.raises(ValueError, match="kind 3"):
        _kernels.nonfinite(np.zeros(4, np.float16), 3)
    with pytest.raises(ValueError, match="byte order"):   # its inf would read as finite
        _kernels.nonfinite(np.array([1.0, np.inf], ">f4"), 0)


def test_16_bit_arrays_are_read_as_bits():
    # a bfloat16 array viewed as uint16 (how the plan may hold it): the same answer
    b = np.array([1.0, np.inf, 2.0], ml_dtypes.bfloat16)
    assert _kernels.nonfinite(b.view(np.uint16), 1)
    assert not _kernels.nonfinite(b[::2].view(np.uint16), 1)
