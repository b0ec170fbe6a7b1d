"""bf16 convolutions with an odd number of summed channels (C = 1, 3, 5, 17 for fprop
and wgrad, K for dgrad), infs in the last channel (and, for fprop and dgrad, in ~3 % of
every channel): every implementation ``ONEDNN_ENGINE`` offers (not only its default)
gives the float64 reference's +-inf and NaN exactly where the reference has them.
oneDNN 3.2's bf16 kernels read channels in pairs; on channels-last memory with an odd
channel count some read the next pixel's channel with a zero-padded weight (inf * 0 =
NaN), so those are not offered there (``Conv._left_out``: the GEMM, the AVX-512 brgconv
kernels); the AMX jit forward kernel runs guarded (``Conv._guarded``), and is run here as
its plan runs it. Where the reference is a number the candidates give it too.

Skipped where oneDNN does not load (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import assert_close, device  # noqa: F401
from ._cpu_engines import ONEDNN, require
from .test_onednn_blocked import run_blocked, run_candidates

CASES = {   # layout, x dims, w dims, pre, post padding, stride, dilation
    "C1": ("NCHW", (2, 1, 6, 6), (16, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "C3": ("NCHW", (2, 3, 6, 6), (16, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "C3-stem": ("NCHW", (1, 3, 16, 16), (16, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1)),
    "C17": ("NCHW", (1, 17, 5, 5), (17, 17, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "C3-NHWC": ("NHWC", (2, 3, 6, 6), (16, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "K3-dgrad": ("NCHW", (2, 16, 6, 6), (3, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "K3-dgrad-NHWC": ("NHWC", (2, 16, 6, 6), (3, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "K3-stem-dgrad": ("NCHW", (1, 64, 16, 16), (3, 64, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1)),
    "depthwise": ("NCHW", (2, 16, 9, 8), (16, 1, 3, 3), (1, 1), (1, 1), (2, 1), (1, 1)),
    # channels-last memory read in pairs by the AVX-512 brgconv kernels and the AMX jit one
    "C5-NHWC": ("NHWC", (2, 5, 12, 12), (16, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "C5-strided": ("NCHW", (2, 5, 12, 12), (16, 5, 3, 3), (1, 1), (1, 1), (2, 2), (1, 1)),
    "C3-1x1-NHWC": ("NHWC", (2, 3, 8, 8), (16, 3, 1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    "C17-strided-NHWC": ("NHWC", (2, 17, 12, 12), (16, 17, 3, 3), (1, 1), (1, 1), (2, 2),
                         (1, 1)),
    "K5-strided-dgrad": ("NCHW", (2, 16, 12, 12), (5, 16, 3, 3), (1, 1), (1, 1), (2, 2),
                         (1, 1)),
    # non-packed NCHW (a channel slice): dense copies, where a blocked kernel chose the
    # plain odd-channel layout for x (the copy, not the user's memory)
    "C5-nonpacked": ("NCHW_nonpacked", (2, 5, 8, 10), (5, 5, 2, 2), (0, 0), (0, 0), (1, 1),
                     (1, 1)),
    "C3-nonpacked-3x3": ("NCHW_nonpacked", (2, 3, 8, 10), (16, 3, 3, 3), (1, 1), (1, 1),
                         (1, 1), (1, 1)),
}


# dgrad sums over K (the K3 case), fprop and wgrad over C (the others)
PAIRS = [(c, d) for c in CASES for d in (("dgrad",) if c.startswith("K") else
                                         ("fprop", "dgrad", "wgrad") if c == "depthwise" else
                                         ("fprop", "wgrad"))]


@pytest.mark.parametrize("case,direction", PAIRS)
def test_bf16_odd_channels_keep_inf_on_every_candidate(device, case, direction):
    require(ONEDNN)
    layout, xd, wd = CASES[case][:3]
    shape = xd if direction != "dgrad" else ref.conv_out_dims(xd, wd, *CASES[case][3:])
    rng = np.random.default_rng(3)
    values = rng.uniform(-1, 1, shape)
    values[0, -1, 2, 2] = np.inf                  # the last (odd) channel
    values[-1, -1, 1, 3] = -np.inf
    if direction != "wgrad":
        # and ~3 % infs in every channel of the summed side: a kernel reading a pair of
        # channels across two pixels meets one. (Not for wgrad, which sums over pixels:
        # there oneDNN's kernels multiply x's border pixels by dy positions past its
        # edge, zeros, so an inf there gives a NaN the reference does not have, for every
        # channel count: docs/guide/cpu.md)
        values[rng.random(shape) < 0.03] = np.inf
    hs = []
    with np.errstate(invalid="ignore"):           # the reference's inf - inf is NaN
        plan, got, want, limits = run_blocked(device, direction, "bfloat16", CASES[case],
                                              3, values, harness=hs)
    assert np.isinf(want).any()
    match = plan._pplan.match
    pack = {role: hs[0].pack[t.name] for role, t in match.tensors.items() if not t.is_virtual}
    names = []
    finite = np.isfinite(want)
    inf = np.isinf(want)
    with np.errstate(invalid="ignore"):
        for name, got_c in run_candidates(match, pack, direction):
            extra = np.isnan(got_c) & ~np.isnan(want)
            names.append((name, int(extra.sum())))
            # and where the reference is a number, the same number: the infs with their
            # sign, the finite values within the tolerances
            assert np.array_equal(got_c[inf], want[inf]), f"{case} {name}: infs differ"
            assert_close(got_c[finite], want[finite], *limits, f"{case} {name}")
    assert names and not any(n for _, n in names), (
        f"default {plan.algorithm}; (candidate, NaNs where the reference has none): {names}")
