"""bfloat16 1x1 convolutions over an odd channel count on channels-last memory (the user's
NHWC, or ``+nhwc`` copies of NCHW): every implementation ``ONEDNN_ENGINE`` offers
(benchmarking may choose any) matches the float64 reference, with finite inputs. oneDNN
3.2's AVX-512 bf16 1x1 kernel (``jit_bf16_1x1:avx512_core_bf16``) gave wrong values there
for some pixel counts (C = 1, 3, 5, 17, 33 at 15, 30, 59 or 60 pixels per image: 453 of
480 outputs wrong at 1x3x5x6 > 16), and benchmarking chose it; it is not a candidate
there (``Conv._left_out``), as the GEMM convolution is not.

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import pytest

from ._cases import assert_close, device  # noqa: F401
from ._cpu_engines import ONEDNN, require
from .test_onednn_blocked import candidate_outputs, run_blocked

CASES = {   # layout, x dims, w dims, pre, post padding, stride, dilation
    "C3-NHWC-5x6": ("NHWC", (1, 3, 5, 6), (16, 3, 1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    "C3-NCHW-5x6": ("NCHW", (3, 3, 5, 6), (16, 3, 1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    "C1-NHWC-2x15": ("NHWC", (1, 1, 2, 15), (16, 1, 1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
    "C17-NCHW-2x15": ("NCHW", (3, 17, 2, 15), (8, 17, 1, 1), (0, 0), (0, 0), (1, 1), (1, 1)),
}


@pytest.mark.parametrize("direction", ["fprop", "conv_bias_relu"])
@pytest.mark.parametrize("case", list(CASES))
def test_bf16_odd_channel_1x1_every_candidate_matches_float64(device, case, direction):
    require(ONEDNN)
    hs = []
    plan, got, want, limits = run_blocked(device, direction, "bfloat16", CASES[case], seed=1,
                                          harness=hs)
    assert_close(got, want, *limits, f"{case} {direction} default ({plan.algorithm})")
    if direction == "conv_bias_relu":
        return      # its candidates compute the convolution alone (``candidate_outputs``)
    outs = candidate_outputs(plan, hs[0], direction, lambda name: True)
    assert outs, case
    for name, out in outs.items():
        assert_close(out, want, *limits, f"{case}, candidate {name}")
