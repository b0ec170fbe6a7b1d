"""The fakes' CPU reference (fakes/common/ref_kernels.h) on its own: every HALF and
BFLOAT16 bit pattern decodes as NumPy / ml_dtypes decode it, float32 rounds to them as
they round (nearest even), and the convolution kernels agree with the float64 oracle
(tests/oracle/_reference.py) with groups, strides, dilation, strided operands, true
convolution (flipped kernel) and alpha/beta blending. The fakes' results rest on these."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest

from oracle import _reference as ref

from . import _build


@pytest.fixture(scope="module")
def probe(fake_libs, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe") / "libref_probe.so"
    _build.compile_library(out, [_build.FAKES / "probe" / "ref_probe.c"], includes=[_build.COMMON])
    lib = ctypes.CDLL(str(out))
    return lib


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def test_every_half_and_bfloat16_decodes_exactly(probe):
    bits = np.arange(2 ** 16, dtype=np.uint16)
    for fn, dtype in (("probe_half_to_float", np.float16), ("probe_bf16_to_float", ml_dtypes.bfloat16)):
        out = np.empty(bits.size, np.float32)
        getattr(probe, fn)(_ptr(bits), _ptr(out), ctypes.c_int64(bits.size))
        want = bits.view(dtype).astype(np.float32)
        same = (out == want) | (np.isnan(out) & np.isnan(want))
        assert same.all(), f"{fn}: {bits[~same][:5]} -> {out[~same][:5]}, want {want[~same][:5]}"


def test_float_rounds_to_half_and_bfloat16_to_nearest_even(probe):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200000).astype(np.float32) * 10.0 ** rng.integers(-9, 6, 200000),
                        np.array([0.0, -0.0, np.inf, -np.inf, 65504, 65520, 65519.99, 6.1e-5, 5.96e-8,
                                  2.98e-8, 1e-10, 3.4e38], np.float32)]).astype(np.float32)
    for fn, dtype in (("probe_float_to_half", np.float16), ("probe_float_to_bf16", ml_dtypes.bfloat16)):
        out = np.empty(x.size, np.uint16)
        getattr(probe, fn)(_ptr(x), _ptr(out), ctypes.c_int64(x.size))
        with np.errstate(over="ignore"):    # beyond HALF's range: inf, as the kernel rounds
            want = x.astype(dtype).view(np.uint16)
        bad = out != want
        assert not bad.any(), f"{fn}: {x[bad][:5]} -> {out[bad][:5]}, want {want[bad][:5]}"


def _strided(a, pad_last=1):
    """a copy of ``a`` in a buffer with gaps (every dim one longer), and its strides."""
    big = np.full(tuple(d + pad_last for d in a.shape), np.nan)
    view = big[tuple(slice(0, d) for d in a.shape)]
    view[...] = a
    return big, view, tuple(s // 8 for s in view.strides)


CASES = {
    "groups2": ((2, 4, 7, 6), (6, 2, 3, 3), (1, 0), (2, 1), (1, 2), 2),
    "depthwise": ((1, 3, 6, 6), (3, 1, 3, 3), (1, 1), (2, 2), (1, 1), 3),
    "3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (0, 1, 1), (1, 2, 1), (2, 1, 1), 1),
}


@pytest.mark.parametrize("flip", [0, 1], ids=["cross_correlation", "convolution"])
@pytest.mark.parametrize("which", [0, 1, 2], ids=["fwd", "bwd_data", "bwd_filter"])
@pytest.mark.parametrize("case", list(CASES))
def test_convolution_matches_the_oracle(probe, case, which, flip):
    xd, wd, pad, stride, dil, groups = CASES[case]
    nsp = len(xd) - 2
    yd = ref.conv_out_dims(xd, wd, pad, pad, stride, dil)
    rng = np.random.default_rng([len(xd), which, flip])
    x, w, dy = rng.uniform(-1, 1, xd), rng.uniform(-1, 1, wd), rng.uniform(-1, 1, yd)
    wk = np.flip(w, axis=tuple(range(2, 2 + nsp))) if flip else w   # the oracle correlates
    alpha, beta = 0.75, -0.5
    out = {0: 2, 1: 0, 2: 1}[which]         # the output's place in (x, w, y)
    prior = rng.uniform(-1, 1, (xd, wd, yd)[out])
    if which == 0:
        want = ref.conv_fprop(x, wk, pad, pad, stride, dil)
    elif which == 1:
        want = ref.conv_dgrad(dy, wk, xd, pad, pad, stride, dil)
    else:
        want = ref.conv_wgrad(dy, x, wd, pad, pad, stride, dil)
        if flip:
            want = np.flip(want, axis=tuple(range(2, 2 + nsp)))
    want = alpha * want + beta * prior
    ops = [x, w, dy]
    ops[out] = prior
    bufs = [_strided(a) for a in ops]
    i64 = ctypes.c_int64 * len(xd)
    ints = ctypes.c_int * nsp
    args = []
    for a, (big, view, strides) in zip(ops, bufs):
        args += [i64(*a.shape), i64(*strides), ctypes.c_void_p(view.ctypes.data)]
    probe.probe_conv(ctypes.c_int(which), ctypes.c_int(len(xd)), *args, ints(*pad), ints(*stride),
                     ints(*dil), ctypes.c_int(groups), ctypes.c_int(flip), ctypes.c_double(alpha),
                     ctypes.c_double(beta))
    got = bufs[out][1]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for k, (big, view, _s) in enumerate(bufs):       # nothing written outside the views
        gaps = np.isnan(big).sum()
        assert gaps == big.size - view.size, f"operand {k}: the gaps were written"
