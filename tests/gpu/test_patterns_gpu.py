"""The oracle suite on the GPU: every pattern, FLOAT/HALF/BFLOAT16, 2-D and 3-D layouts,
and odd convolution shapes, staged through device memory, against the float64 references
of ``tests/oracle/_reference.py`` with the tolerances of ``tests/oracle/_cases.py``.

Inputs are drawn in float64, rounded to the I/O dtype, copied to the device with
``dev.empty`` + ``copy_from`` (``Harness.run``) or ``await dev.asarray`` (``Harness.arun``);
outputs are device arrays pre-filled with NaN, so an element the GPU does not write fails.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import _reference as ref
from oracle import test_patterns as tp
from oracle._conv_shapes import ASYMMETRIC, CONV_SHAPES
from oracle._conv_shapes import conv_shape_case as _conv_shape_case
from oracle._cases import DTYPES, LAYOUTS, Harness, assert_close, rank_of, tol

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


CONV_DTYPES = (("float32", "NCHW"), ("float16", "NHWC"), ("bfloat16", "NHWC"))


@pytest.mark.parametrize("dtype,layout", CONV_DTYPES, ids=[d for d, _ in CONV_DTYPES])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("shape", list(CONV_SHAPES))
def test_conv_shape_gpu(gpu_module_device, shape, direction, dtype, layout):
    h, got, want, limits = _conv_shape_case(gpu_module_device, CONV_SHAPES[shape], shape,
                                            direction, dtype, layout)
    assert h.plan.engine.provider != "cpu"
    assert_close(got, want, *limits, f"{shape} {direction} {dtype} {layout} "
                                     f"(algorithm {h.plan.algorithm})")


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
