"""Convolution shapes that broke libraries, and one case of them through the public API.

Shared by the CPU engine suite (tests/oracle/test_cpu_engines.py), the GPU suite
(tests/gpu/test_patterns_gpu.py) and the GPU contract tests: fprop, dgrad and wgrad of
each shape against the float64 references of ``_reference.py``.
"""
from __future__ import annotations

import zlib

import numpy as np

from . import _reference as ref
from ._cases import Harness, gpu_wgrad_tol, reduction_tol

__all__ = ["ASYMMETRIC", "CONV_SHAPES", "conv_layout", "conv_shape_case"]

# name -> x dims, w dims, pre, post, stride, dilation.
CONV_SHAPES = {
    # groups = 2 and depthwise with stride 2
    "groups2": ((2, 8, 9, 9), (8, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "depthwise_s2": ((1, 8, 10, 10), (8, 1, 3, 3), (1, 1), (1, 1), (2, 2), (1, 1)),
    # 1x1 stride-2 sub-sampling, with padding: rows that land only in padding (MIOpen #218)
    "1x1_s2_pad1": ((2, 16, 9, 9), (8, 16, 1, 1), (1, 1), (1, 1), (2, 2), (1, 1)),
    # non-square kernel, anisotropic stride and dilation (MIOpen #133 family)
    "dilated_anisotropic": ((1, 4, 17, 12), (6, 4, 5, 3), (2, 1), (2, 1), (2, 1), (2, 3)),
    # conv1-like: C=3, K not a multiple of 8, 7x7 stride 2 (MIOpen #946)
    "c3_7x7_s2": ((2, 3, 20, 20), (5, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1)),
    # batch 1, a size where tensor-core (GPU) and blocked AMX/AVX-512 (CPU) kernels are picked
    "batch1_medium": ((1, 32, 28, 28), (64, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    # 3-D, stride 2
    "3d_s2": ((1, 4, 6, 7, 5), (8, 4, 3, 3, 3), (1, 1, 1), (1, 1, 1), (2, 2, 2), (1, 1, 1)),
}

ASYMMETRIC = {
    # "same" padding with an even kernel: padding at the bottom/right only (MIOpen #142)
    "even_kernel_same": ((1, 8, 7, 7), (8, 8, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),
    # ... and at the top/left only (ORT #26215)
    "even_kernel_top_left": ((1, 1, 8, 8), (1, 1, 2, 2), (1, 1), (0, 0), (1, 1), (1, 1)),
    # the oracle suite's 2-D case: asymmetric in H, stride and dilation on different dims
    "oracle_2d": ((2, 4, 7, 6), (5, 4, 3, 3), (1, 0), (1, 1), (2, 1), (1, 2)),
}


def conv_layout(layout, rank):
    """The 3-D twin of a 2-D layout name for rank-5 tensors (NCHW -> NCDHW, NHWC -> NDHWC)."""
    return layout if rank == 4 else {"NCHW": "NCDHW", "NHWC": "NDHWC"}[layout]


def conv_shape_case(dev, case, shape, direction, dtype, layout, **build_kw):
    """Run one shape in one direction on ``dev`` (``build_kw`` go to ``dev.build_sync``,
    e.g. ``engine=``); returns (harness, output, float64 reference, (atol, rtol))."""
    xd, wd, pre, post, stride, dil = case
    layout = conv_layout(layout, len(xd))
    kw = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
    yd = ref.conv_out_dims(xd, wd, pre, post, stride, dil)
    rng = np.random.default_rng(zlib.crc32(f"{shape}/{direction}/{dtype}".encode()))
    h = Harness(dtype, layout, name=f"shape_{shape}_{direction}")
    if direction == "fprop":
        x = h.input("x", rng.uniform(-1, 1, xd))
        w = h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_fprop(x, w, **kw), "out")
        want = ref.conv_fprop(h.ref["x"], h.ref["w"], pre, post, stride, dil)
        limits = reduction_tol("conv_fprop", dtype, wd[1] * int(np.prod(wd[2:])))
    elif direction == "dgrad":
        dy = h.input("dy", rng.uniform(-1, 1, yd))
        w = h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_dgrad(dy, w, dx_dims=xd, **kw), "out")
        want = ref.conv_dgrad(h.ref["dy"], h.ref["w"], xd, pre, post, stride, dil)
        limits = reduction_tol("conv_dgrad", dtype, wd[0] * int(np.prod(wd[2:])))
    else:
        dy = h.input("dy", rng.uniform(-1, 1, yd))
        x = h.input("x", rng.uniform(-1, 1, xd))
        h.output(h.g.conv_wgrad(dy, x, dw_dims=wd, **kw), "out")
        want = ref.conv_wgrad(h.ref["dy"], h.ref["x"], wd, pre, post, stride, dil)
        limits = gpu_wgrad_tol(dtype, yd[0] * int(np.prod(yd[2:])), 1.0, 1.0)
    return h, h.run(dev, **build_kw)["out"], want, limits
