"""BN inference -> DReLU -> BN backward keeps its intermediates in the graph's
intermediate data type (issue 10 item 8), checked on the fake runtime's call record.

With BFLOAT16 (or HALF) I/O and FLOAT intermediates, x and dy are converted to FLOAT,
z = BN-inference(x) and dz = DReLU(z, dy) are computed on FLOAT descriptors, and dz goes
back to the I/O type (exact: dy times a 0/1 mask) for the batchnorm backward call. The
numbers are checked on the GPU (tests/gpu/test_bn_gpu.py, near a clip boundary).
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import test_patterns as tp
from oracle._cases import Harness, rank_of

import hipdnn_async as hd
from hipdnn_async import _errors
from hipdnn_async.runtime import _cudnn as real_cudnn

DTYPE_CODE = {"float32": real_cudnn.DATA_FLOAT, "float16": real_cudnn.DATA_HALF,
              "bfloat16": real_cudnn.DATA_BFLOAT16}
GPU_CLIPS = {"float32": (None, None), "float16": (None, 0.5), "bfloat16": (0.0, 0.5)}


def _case(dtype, layout, monkeypatch, intermediate=None):
    monkeypatch.setattr(tp, "CLIPS", GPU_CLIPS)
    h = Harness(dtype, layout, name=f"drelu_{dtype}_{layout}")
    if intermediate is not None:
        h.g.set_intermediate_data_type(hd.DataType[intermediate])
    tp.PATTERNS["BN_INFERENCE_DRELU_BACKWARD"](h, rank_of(layout), np.random.default_rng(0))
    h._alloc_outputs()
    return h


def _run_calls(rec, h):
    with hd.Device("cuda:0", streams=1) as dev:
        plan = dev.build_sync(h.g)
        start = len(rec.calls)
        plan.execute_sync(h.stage(dev))
    return plan, [(n, a) for n, a, r in rec.calls[start:] if r]


def _dtype_of(rec, ptr):
    return rec.cudnn.descriptors[ptr].args[0]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_io_computes_z_and_dz_in_float(fake_cuda, monkeypatch, dtype, layout):
    h = _case(dtype, layout, monkeypatch)
    plan, calls = _run_calls(fake_cuda, h)
    names = [n.split(".")[1] for n, _ in calls]
    # channels-last: the Ex backward call (its dy descriptor and dy one argument later)
    ex = layout == "NHWC"
    assert names == ["op_tensor", "op_tensor", "batchnorm_forward_inference", "op_tensor",
                     "activation_backward", "op_tensor",
                     "batchnorm_backward_ex" if ex else "batchnorm_backward"]
    f32, io = real_cudnn.DATA_FLOAT, DTYPE_CODE[dtype]
    _, to_x, bn_inf, to_dy, act, back, bn_bwd = (a for _, a in calls)
    # conversions: A (and B) in one type, C in the other
    assert (_dtype_of(fake_cuda, to_x[3]), _dtype_of(fake_cuda, to_x[8])) == (io, f32)
    assert (_dtype_of(fake_cuda, to_dy[3]), _dtype_of(fake_cuda, to_dy[8])) == (io, f32)
    assert (_dtype_of(fake_cuda, back[3]), _dtype_of(fake_cuda, back[8])) == (f32, io)
    # z (BN inference output) and every operand of the DReLU are FLOAT
    assert {_dtype_of(fake_cuda, bn_inf[i]) for i in (1, 3)} == {f32}
    assert {_dtype_of(fake_cuda, act[i]) for i in (2, 4, 6, 8)} == {f32}
    # the converted x feeds BN inference; the DReLU reads z and the converted dy
    assert bn_inf[2] == to_x[9] and act[3] == bn_inf[4] == act[7] and act[5] == to_dy[9]
    # dz converted back is what batchnorm backward reads, in the I/O type
    assert bn_bwd[4 + ex] == back[9] and _dtype_of(fake_cuda, bn_bwd[3 + ex]) == io
    assert plan._pplan.convert and fake_cuda.violations == []


@pytest.mark.parametrize("dtype, intermediate", [("float32", None), ("bfloat16", "BFLOAT16")])
def test_no_conversion_where_the_intermediate_type_is_the_io_type(fake_cuda, monkeypatch,
                                                                  dtype, intermediate):
    h = _case(dtype, "NHWC", monkeypatch, intermediate)
    plan, calls = _run_calls(fake_cuda, h)
    assert [n.split(".")[1] for n, _ in calls] == [
        "op_tensor", "batchnorm_forward_inference", "activation_backward", "batchnorm_backward_ex"]
    bn_inf = calls[1][1]
    assert _dtype_of(fake_cuda, bn_inf[3]) == DTYPE_CODE[dtype]   # z in the graph's type
    assert not plan._pplan.convert


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_refused_conversion_declines_instead_of_losing_precision(fake_cuda, monkeypatch,
                                                                   layout):
    # the batchnorm mode / Ex-form trials pass a refusal of another call on to this decline
    h = _case("bfloat16", layout, monkeypatch)

    def refuse(*args):
        if fake_cuda.cudnn.descriptors[args[3]].args[0] != fake_cuda.cudnn.descriptors[
                args[8]].args[0]:
            raise _errors.status_error(real_cudnn.STATUS, real_cudnn.CudnnError,
                                       library="fake", call="cudnnOpTensor", status=3000,
                                       vendor_message="fake: mixed types")
    monkeypatch.setattr(fake_cuda.cudnn, "op_tensor", refuse)
    with hd.Device("cuda:0", streams=1) as dev:
        with pytest.raises(hd.NotSupportedError, match="intermediate data type FLOAT.*mixed"):
            dev.build_sync(h.g)
