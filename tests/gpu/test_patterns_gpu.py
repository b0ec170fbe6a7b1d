"""The oracle suite on the GPU: every pattern, FLOAT/HALF/BFLOAT16, 2-D and 3-D layouts,
and odd convolution shapes, staged through device memory, against the float64 references
of ``tests/oracle/_reference.py`` with the tolerances of ``tests/oracle/_cases.py``.

Inputs are drawn in float64, rounded to the I/O dtype, copied to the device with
``dev.empty`` + ``copy_from`` (``Harness.run``) or ``await dev.asarray`` (``Harness.arun``);
outputs are device arrays pre-filled with NaN, so an element the GPU does not write fails.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from oracle import _reference as ref
from oracle import test_patterns as tp
from oracle._cases import (DTYPES, LAYOUTS, Harness, assert_close, gpu_wgrad_tol, rank_of,
                           reduction_tol, tol)

import hipdnn_async as hd

pytestmark = pytest.mark.gpu

# The contract of the cuDNN provider: ReLU clips are upper clips only (a lower clip must
# be 0 or None). The CPU oracle runs bfloat16 with (0.1, 0.5); here it runs with a lower
# clip of exactly 0, which is supported; a lower clip of 0.1 must be NotSupportedError
# (test_errors_gpu.py).
GPU_CLIPS = {"float32": (None, None), "float16": (None, 0.5), "bfloat16": (0.0, 0.5)}
# cuDNN's convolution descriptors take symmetric padding only: the oracle's convolution
# cases with pre == post (same dims, stride and dilation). Asymmetric padding must be
# computed correctly or declined with NotSupportedError (test_asymmetric_padding below).
GPU_CONV = {
    4: dict(tp.CONV[4], pre=(1, 1), post=(1, 1)),
    5: dict(tp.CONV[5], pre=(1, 0, 1), post=(1, 0, 1)),
}

LAYOUTS_2D = ("NCHW", "NHWC")
CASES = ([(p, dt, lay) for p in tp.PATTERNS for dt in DTYPES for lay in LAYOUTS_2D]
         + [(p, dt, lay) for p in tp.PATTERNS
            for dt, lay in (("float32", "NCDHW"), ("float16", "NDHWC"))])


def _check_plan(h, dev, pattern):
    assert h.plan.pattern == pattern.split("/")[0]
    assert h.plan.engine.provider != "cpu", f"{dev.spec} built a CPU plan: {h.plan!r}"


def run_gpu_case(dev, pattern, dtype, layout, monkeypatch, seed=0, engine=None):
    monkeypatch.setattr(tp, "CLIPS", GPU_CLIPS)
    monkeypatch.setattr(tp, "CONV", GPU_CONV)
    rng = np.random.default_rng([seed, sorted(tp.PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    h = Harness(dtype, layout, name=f"gpu_{pattern}_{dtype}_{layout}")
    checks = tp.PATTERNS[pattern](h, rank_of(layout), rng)
    got = h.run(dev, engine=engine)      # staged: dev.is_host is False
    return h, checks, got


@pytest.mark.parametrize("pattern,dtype,layout", CASES, ids=["-".join(c) for c in CASES])
def test_pattern_gpu(gpu_engine_device, monkeypatch, pattern, dtype, layout):
    """Every case on every GPU device, with the device's own engine choice (which must
    take every case) and with every engine of its provider by name (an engine may decline
    a case at build: it is then not offered, or raises a decline type, and the case is
    skipped for that engine with its reason)."""
    dev, engine, default = gpu_engine_device
    assert not dev.is_host
    try:
        h, checks, got = run_gpu_case(dev, pattern, dtype, layout, monkeypatch, engine=engine)
    except hd.NotSupportedError as exc:
        if default:
            raise
        pytest.skip(f"engine {engine} declines {pattern} {dtype} {layout}: {exc}")
    assert engine is None or h.plan.engine.name == engine
    _check_plan(h, dev, pattern)
    for name, want, (atol, rtol) in checks:
        assert got[name].shape == tuple(h.outputs[name].dims)
        assert_close(got[name], want, atol, rtol,
                     f"{dev.spec} {pattern} {dtype} {layout} output '{name}' "
                     f"(algorithm {h.plan.algorithm})")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
@pytest.mark.parametrize("pattern", list(tp.PATTERNS))
async def test_pattern_gpu_awaited(gpu_device, monkeypatch, pattern):
    """The same cases through the awaited path: dev.build, dev.asarray, plan.execute,
    to_numpy (fp16 NHWC)."""
    monkeypatch.setattr(tp, "CLIPS", GPU_CLIPS)
    monkeypatch.setattr(tp, "CONV", GPU_CONV)
    rng = np.random.default_rng([1, sorted(tp.PATTERNS).index(pattern)])
    h = Harness("float16", "NHWC", name=f"gpu_await_{pattern}")
    checks = tp.PATTERNS[pattern](h, 4, rng)
    got = await h.arun(gpu_device)
    _check_plan(h, gpu_device, pattern)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"awaited {pattern} output '{name}'")


# ---------------------------------------------------------------------------------------
# Convolution shapes that broke libraries (tests/oracle test-cases reference), fprop,
# dgrad and wgrad each: name -> x dims, w dims, pre, post, stride, dilation.
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
    # batch 1, a size where tensor-core kernels are picked
    "batch1_medium": ((1, 32, 28, 28), (64, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    # 3-D, stride 2
    "3d_s2": ((1, 4, 6, 7, 5), (8, 4, 3, 3, 3), (1, 1, 1), (1, 1, 1), (2, 2, 2), (1, 1, 1)),
}
CONV_DTYPES = (("float32", "NCHW"), ("float16", "NHWC"), ("bfloat16", "NHWC"))


def _conv_layout(layout, rank):
    return layout if rank == 4 else {"NCHW": "NCDHW", "NHWC": "NDHWC"}[layout]


@pytest.mark.parametrize("dtype,layout", CONV_DTYPES, ids=[d for d, _ in CONV_DTYPES])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("shape", list(CONV_SHAPES))
def test_conv_shape_gpu(gpu_module_device, shape, direction, dtype, layout):
    h, got, want, limits = _conv_shape_case(gpu_module_device, CONV_SHAPES[shape], shape,
                                            direction, dtype, layout)
    assert h.plan.engine.provider != "cpu"
    assert_close(got, want, *limits, f"{shape} {direction} {dtype} {layout} "
                                     f"(algorithm {h.plan.algorithm})")


ASYMMETRIC = {
    # "same" padding with an even kernel: padding at the bottom/right only (MIOpen #142)
    "even_kernel_same": ((1, 8, 7, 7), (8, 8, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),
    # ... and at the top/left only (ORT #26215)
    "even_kernel_top_left": ((1, 1, 8, 8), (1, 1, 2, 2), (1, 1), (0, 0), (1, 1), (1, 1)),
    # the oracle suite's 2-D case: asymmetric in H, stride and dilation on different dims
    "oracle_2d": ((2, 4, 7, 6), (5, 4, 3, 3), (1, 0), (1, 1), (2, 1), (1, 2)),
}


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("shape", list(ASYMMETRIC))
def test_asymmetric_padding_correct_or_declined(gpu_module_device, shape, direction):
    """Asymmetric padding: the right values, or NotSupportedError at build naming the
    padding (cuDNN's descriptors are symmetric), never a silently shifted result."""
    try:
        h, got, want, limits = _conv_shape_case(gpu_module_device, ASYMMETRIC[shape], shape,
                                                direction, "float32", "NHWC")
    except hd.NotSupportedError as exc:
        assert "padding" in str(exc), str(exc)
        return
    assert_close(got, want, *limits, f"asymmetric {shape} {direction}")


def _conv_shape_case(dev, case, shape, direction, dtype, layout):
    xd, wd, pre, post, stride, dil = case
    layout = _conv_layout(layout, len(xd))
    kw = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
    yd = ref.conv_out_dims(xd, wd, pre, post, stride, dil)
    rng = np.random.default_rng(zlib.crc32(f"{shape}/{direction}/{dtype}".encode()))
    h = Harness(dtype, layout, name=f"gpu_{shape}_{direction}")
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
    return h, h.run(dev)["out"], want, limits


def test_conv_fused_lower_clip_zero_gpu(gpu_module_device):
    """A lower clip of exactly 0 with an upper clip is the supported form of the clamp."""
    rng = np.random.default_rng(5)
    h = Harness("float32", "NHWC", name="gpu_clip0")
    x = h.input("x", rng.uniform(-1, 1, (2, 8, 9, 9)))
    w = h.input("w", rng.uniform(-1, 1, (16, 8, 3, 3)))
    b = h.input("bias", rng.uniform(-1, 1, (1, 16, 1, 1)))
    y = h.g.conv_fprop(x, w, padding=(1, 1))
    y = h.g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    h.output(h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=0.0,
                           relu_upper_clip=1.5), "y")
    got = h.run(gpu_module_device)["y"]
    want = ref.relu(ref.conv_fprop(h.ref["x"], h.ref["w"], (1, 1), (1, 1)) + h.ref["bias"],
                    0.0, 1.5)
    assert h.plan.pattern == "CONV_FPROP_BIAS_RELU"
    assert_close(got, want, *tol("conv_fprop", "float32"), "conv+bias+clamp(0, 1.5)")


@pytest.mark.parametrize("layout", ["NHWC_nonpacked", "NCDHW_nonpacked"])
@pytest.mark.parametrize("pattern", ["CONV_FPROP", "BN_TRAINING", "BN_BACKWARD"])
def test_nonpacked_layouts_run_correctly_or_decline(gpu_module_device, monkeypatch, pattern,
                                                    layout):
    """Non-packed data tensors: correct results, or NotSupportedError at build (the
    contract's "anything else"), never silently wrong values."""
    try:
        h, checks, got = run_gpu_case(gpu_module_device, pattern, "float32", layout, monkeypatch)
    except hd.NotSupportedError as exc:
        assert str(exc), "NotSupportedError without a message"
        return
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{pattern} {layout} output '{name}'")
