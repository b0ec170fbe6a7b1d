"""A ``GraphSpec`` as finalized cuDNN backend descriptors: tensors, operations, the graph.

The call sequences and attribute types are those of the H200 probe
(docs/design/vendor-notes.md, "cuDNN backend call sequences") and cudnn-frontend's
builders: every tensor gets DATA_TYPE, DIMENSIONS, STRIDES, UNIQUE_ID and BYTE_ALIGNMENT
(+ IS_VIRTUAL / IS_BY_VALUE); the ReLU pointwise descriptors get NAN_PROPAGATION, the clips
as DOUBLE and a zero lower-clip slope, as ``cudnn_frontend_PointWiseDesc.h`` sets them.

``be`` is the binding module (``runtime._cudnn_backend``) or a stand-in with the same
names (the unit tests record the calls).
"""
from __future__ import annotations

from ..._types import DataType

__all__ = ["lower", "BYTE_ALIGNMENT", "FLT_MAX"]

# Pointer alignment declared for every non-virtual tensor (the probe's value; cudaMalloc
# gives 256). A buffer bound later must be aligned to it (checked at execution).
BYTE_ALIGNMENT = 16
# cudnn-frontend clamps an unset upper clip to FLT_MAX for FLOAT math (PointWiseDesc.h).
FLT_MAX = 3.4028234663852886e38


def data_type(be, dt: DataType) -> int:
    return {DataType.FLOAT: be.DATA_FLOAT, DataType.HALF: be.DATA_HALF,
            DataType.BFLOAT16: be.DATA_BFLOAT16, DataType.DOUBLE: be.DATA_DOUBLE}[dt]


def _tensor(be, t, alignment: int = BYTE_ALIGNMENT):
    d = be.Descriptor(be.BACKEND_TENSOR_DESCRIPTOR)
    d.set_enum(be.ATTR_TENSOR_DATA_TYPE, be.TYPE_DATA_TYPE, data_type(be, t.data_type))
    d.set_int64(be.ATTR_TENSOR_DIMENSIONS, t.dims)
    d.set_int64(be.ATTR_TENSOR_STRIDES, t.strides)
    d.set_int64(be.ATTR_TENSOR_UNIQUE_ID, t.uid)
    d.set_int64(be.ATTR_TENSOR_BYTE_ALIGNMENT, alignment)
    if t.virtual:
        d.set_bool(be.ATTR_TENSOR_IS_VIRTUAL, True)
    if t.by_value:
        d.set_bool(be.ATTR_TENSOR_IS_BY_VALUE, True)
    d.finalize()
    return d


def _conv_desc(be, op):
    spatial = len(op.attr("stride"))
    d = be.Descriptor(be.BACKEND_CONVOLUTION_DESCRIPTOR)
    d.set_enum(be.ATTR_CONVOLUTION_COMP_TYPE, be.TYPE_DATA_TYPE, be.DATA_FLOAT)
    mode = be.CONVOLUTION if op.attr("mode") == "convolution" else be.CROSS_CORRELATION
    d.set_enum(be.ATTR_CONVOLUTION_CONV_MODE, be.TYPE_CONVOLUTION_MODE, mode)
    d.set_int64(be.ATTR_CONVOLUTION_SPATIAL_DIMS, spatial)
    d.set_int64(be.ATTR_CONVOLUTION_DILATIONS, op.attr("dilation"))
    d.set_int64(be.ATTR_CONVOLUTION_FILTER_STRIDES, op.attr("stride"))
    d.set_int64(be.ATTR_CONVOLUTION_PRE_PADDINGS, op.attr("pre_padding"))
    d.set_int64(be.ATTR_CONVOLUTION_POST_PADDINGS, op.attr("post_padding"))
    d.finalize()
    return d


# kind -> (descriptor type, ALPHA, BETA, CONV_DESC, {slot: attribute})
def _conv_table(be):
    return {
        "conv_fprop": (be.BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                       be.ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                       be.ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                       be.ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                       {"x": be.ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                        "w": be.ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                        "y": be.ATTR_OPERATION_CONVOLUTION_FORWARD_Y}),
        "conv_dgrad": (be.BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                       be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                       be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                       be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                       {"dx": be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                        "w": be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                        "dy": be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY}),
        "conv_wgrad": (be.BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                       be.ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                       be.ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                       be.ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                       {"x": be.ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                        "dw": be.ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                        "dy": be.ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}),
    }


def _conv_op(be, op, tensors):
    kind, alpha, beta, conv_attr, slots = _conv_table(be)[op.kind]
    d = be.Descriptor(kind)
    for slot, attr in slots.items():
        d.set_descriptors(attr, tensors[op.slot(slot)])
    d.set_descriptors(conv_attr, _conv_desc(be, op))
    d.set_float(alpha, 1.0)
    d.set_float(beta, 0.0)
    d.finalize()
    return d


def _pointwise_desc(be, op):
    mode = {"add": be.POINTWISE_ADD, "relu_fwd": be.POINTWISE_RELU_FWD,
            "relu_bwd": be.POINTWISE_RELU_BWD}[op.attr("mode")]
    d = be.Descriptor(be.BACKEND_POINTWISE_DESCRIPTOR)
    d.set_enum(be.ATTR_POINTWISE_MODE, be.TYPE_POINTWISE_MODE, mode)
    d.set_enum(be.ATTR_POINTWISE_MATH_PREC, be.TYPE_DATA_TYPE, be.DATA_FLOAT)
    if mode in (be.POINTWISE_RELU_FWD, be.POINTWISE_RELU_BWD):
        upper = op.attr("upper_clip")
        d.set_enum(be.ATTR_POINTWISE_NAN_PROPAGATION, be.TYPE_NAN_PROPOGATION, be.PROPAGATE_NAN)
        d.set_double(be.ATTR_POINTWISE_RELU_LOWER_CLIP, op.attr("lower_clip", 0.0))
        d.set_double(be.ATTR_POINTWISE_RELU_UPPER_CLIP, FLT_MAX if upper is None else min(upper, FLT_MAX))
        d.set_double(be.ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, 0.0)
    d.finalize()
    return d


def _pointwise_op(be, op, tensors):
    d = be.Descriptor(be.BACKEND_OPERATION_POINTWISE_DESCRIPTOR)
    d.set_descriptors(be.ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, _pointwise_desc(be, op))
    slots = {"x": be.ATTR_OPERATION_POINTWISE_XDESC, "b": be.ATTR_OPERATION_POINTWISE_BDESC,
             "y": be.ATTR_OPERATION_POINTWISE_YDESC, "dx": be.ATTR_OPERATION_POINTWISE_DXDESC,
             "dy": be.ATTR_OPERATION_POINTWISE_DYDESC}
    for slot, uid in op.slots:
        d.set_descriptors(slots[slot], tensors[uid])
    d.finalize()
    return d


def _norm_forward(be, op, tensors):
    d = be.Descriptor(be.BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR)
    phase = be.NORM_FWD_TRAINING if op.attr("phase") == "training" else be.NORM_FWD_INFERENCE
    d.set_enum(be.ATTR_OPERATION_NORM_FWD_MODE, be.TYPE_NORM_MODE, be.BATCH_NORM)
    d.set_enum(be.ATTR_OPERATION_NORM_FWD_PHASE, be.TYPE_NORM_FWD_PHASE, phase)
    slots = {"x": be.ATTR_OPERATION_NORM_FWD_XDESC,
             "mean": be.ATTR_OPERATION_NORM_FWD_MEAN_DESC,
             "inv_variance": be.ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC,
             "scale": be.ATTR_OPERATION_NORM_FWD_SCALE_DESC,
             "bias": be.ATTR_OPERATION_NORM_FWD_BIAS_DESC,
             "epsilon": be.ATTR_OPERATION_NORM_FWD_EPSILON_DESC,
             "momentum": be.ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
             "in_running_mean": be.ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
             "in_running_var": be.ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
             "out_running_mean": be.ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
             "out_running_var": be.ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
             "y": be.ATTR_OPERATION_NORM_FWD_YDESC}
    for slot, uid in op.slots:
        d.set_descriptors(slots[slot], tensors[uid])
    d.finalize()
    return d


def _norm_backward(be, op, tensors):
    d = be.Descriptor(be.BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR)
    d.set_enum(be.ATTR_OPERATION_NORM_BWD_MODE, be.TYPE_NORM_MODE, be.BATCH_NORM)
    slots = {"x": be.ATTR_OPERATION_NORM_BWD_XDESC, "dy": be.ATTR_OPERATION_NORM_BWD_DYDESC,
             "scale": be.ATTR_OPERATION_NORM_BWD_SCALE_DESC,
             "mean": be.ATTR_OPERATION_NORM_BWD_MEAN_DESC,
             "inv_variance": be.ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC,
             "dscale": be.ATTR_OPERATION_NORM_BWD_DSCALE_DESC,
             "dbias": be.ATTR_OPERATION_NORM_BWD_DBIAS_DESC,
             "dx": be.ATTR_OPERATION_NORM_BWD_DXDESC}
    for slot, uid in op.slots:
        d.set_descriptors(slots[slot], tensors[uid])
    d.finalize()
    return d


_OPS = {"conv_fprop": _conv_op, "conv_dgrad": _conv_op, "conv_wgrad": _conv_op,
        "pointwise": _pointwise_op, "norm_forward": _norm_forward,
        "norm_backward": _norm_backward}


def lower(be, spec, handle: int, *, alignment: int = BYTE_ALIGNMENT):
    """The finalized OPERATIONGRAPH descriptor of ``spec`` on cuDNN handle ``handle``.

    ``alignment``: the BYTE_ALIGNMENT declared for every tensor (plans are built with
    ``BYTE_ALIGNMENT``; another value only serves diagnostics such as bench_gpu's
    heuristic orders: PyTorch declares up to 32 for cudaMalloc'ed buffers).

    Raises
    ------
    NotSupportedError, ExecutionError
        A descriptor's finalize refused (cuDNN names the reason in the message).
    """
    tensors = {t.uid: _tensor(be, t, alignment) for t in spec.tensors}
    ops = [_OPS[op.kind](be, op, tensors) for op in spec.ops]
    g = be.Descriptor(be.BACKEND_OPERATIONGRAPH_DESCRIPTOR)
    g.set_descriptors(be.ATTR_OPERATIONGRAPH_OPS, ops)
    g.set_handle(be.ATTR_OPERATIONGRAPH_HANDLE, handle)
    g.finalize()
    return g
