"""bfloat16 weight gradients dilated along an outer spatial dim (H; D or H in 3-D): every
implementation ``ONEDNN_ENGINE`` offers (benchmarking may choose any) matches the float64
reference. oneDNN 3.2's AMX jit backward-weights kernel (``jit:avx512_core_amx`` in wgrad)
gave wrong values there, finite, inf or NaN, without special values in the inputs, where C
is above 32 and not a multiple of 16 (C = 33, 34, 36, 40, 47, 49, 50, 65, 72; not C <= 32,
48, 64, 80, 96, nor with dilation along W alone), on the user's channels-last memory and on
``+nhwc`` / ``+dense`` copies alike, whatever the workspace held; it is not a candidate for
a dilated weight gradient (``Conv._left_out``). On a CPU without AMX oneDNN does not offer it
and these cases check the other implementations.

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import pytest

from ._cases import assert_close, device  # noqa: F401
from ._cpu_engines import ONEDNN, require
from .test_onednn_blocked import candidate_outputs, run_blocked

CASES = {   # layout, x dims, w dims, pre, post padding, stride, dilation
    "C33-dil-h": ("NHWC", (1, 33, 9, 9), (8, 33, 3, 3), (2, 1), (2, 1), (1, 1), (2, 1)),
    "C33-dil-hw": ("NHWC", (1, 33, 9, 9), (8, 33, 3, 3), (2, 2), (2, 2), (1, 1), (2, 2)),
    "C40-dil-h-NCHW": ("NCHW", (2, 40, 12, 12), (16, 40, 3, 3), (3, 1), (3, 1), (1, 1),
                       (3, 1)),
    "C36-3d-dil-h": ("NDHWC", (1, 36, 6, 5, 6), (8, 36, 3, 3, 3), (1, 2, 1), (1, 2, 1),
                     (1, 1, 1), (1, 2, 1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dilated_bf16_wgrad_every_candidate_matches_float64(device, case):
    require(ONEDNN)
    hs = []
    plan, got, want, limits = run_blocked(device, "wgrad", "bfloat16", CASES[case], seed=5,
                                          harness=hs)
    assert_close(got, want, *limits, f"{case} default ({plan.algorithm})")
    outs = candidate_outputs(plan, hs[0], "wgrad", lambda name: True)
    assert outs, case
    for name, out in outs.items():
        assert_close(out, want, *limits, f"{case}, candidate {name}")
