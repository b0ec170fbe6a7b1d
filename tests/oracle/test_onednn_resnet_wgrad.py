"""Weight gradients over ResNet-50's long reductions on the CPU device's default engine,
against float64: dw sums n = N * P * Q products per element (up to 25,088 here), and
oneDNN's jit weight-gradient kernels sum them in order, as cuDNN's ALGO_1 does on a GPU,
so the bound is ``gpu_wgrad_tol``'s (``wgrad_tol`` with ``sequential_atol``, u * n, as
its floor). Measured here on oneDNN 3.2 (AVX-512): the float32 stem at batch 1 (n =
12,544) is 1.2-1.9x ``wgrad_tol``'s statistical sqrt(n) bound and 0.18-0.29 of this one;
on an AVX2 CPU, res2's 3x3 at batch 8 (n = 25,088) 1.28e-3 against ``wgrad_tol``'s 1.6e-4
and this bound's 1.5e-3. The small-n cases of the other suites keep ``wgrad_tol``.

Inputs U(-1, 1); shapes ``_conv_shapes.conv_shape_case`` runs (through the public API)."""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import assert_close, device, gpu_wgrad_tol  # noqa: F401
from ._conv_shapes import conv_shape_case

# name -> x dims, w dims, pre, post, stride, dilation
RESNET50_WGRAD = {
    "res2_3x3_batch8": ((8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "stem_7x7_s2_batch1": ((1, 3, 224, 224), (64, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1)),
    "res3_down_1x1_s2_batch2": ((2, 256, 56, 56), (512, 256, 1, 1), (0, 0), (0, 0), (2, 2),
                                (1, 1)),
    "res4_3x3_batch4": ((4, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(RESNET50_WGRAD))
def test_resnet50_wgrad_matches_float64(device, name, dtype, layout):
    case = RESNET50_WGRAD[name]
    h, got, want, limits = conv_shape_case(device, case, name, "wgrad", dtype, layout)
    yd = ref.conv_out_dims(*case[:2], *case[2:])
    n = yd[0] * int(np.prod(yd[2:]))
    assert limits == gpu_wgrad_tol(dtype, n, 1.0, 1.0)      # the bound named above
    assert_close(got, want, *limits, f"{name} wgrad {dtype} {layout} (n = {n}, "
                 f"{h.plan.algorithm})")
