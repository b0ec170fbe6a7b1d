"""GraphSpec -> backend descriptors (providers/cudnn/_graph_lower.py) against a recording
stand-in of the binding: which descriptors, attributes and attribute types are set.

The expected sequences are the probe's (docs/design/vendor-notes.md) and
cudnn-frontend's PointWiseDesc.h (ReLU clips as DOUBLE, FLT_MAX upper clip)."""
import pytest

import hipdnn_async as hd
from hipdnn_async.patterns import match
from hipdnn_async.providers.cudnn import _graph_lower
from hipdnn_async.providers.cudnn._graph_ir import graph_spec

from . import _fake_backend
from .test_graph_ir import _bn_training, _conv_graph, _drelu_graph, _t


@pytest.fixture
def be():
    return _fake_backend.fake_module()


def _created(be, kind):
    return [d for op, k, d in _fake_backend.CALLS if op == "create" and k == kind]


def test_tensors_carry_type_dims_strides_uid_alignment(be):
    (spec,) = graph_spec(match(_conv_graph("fprop", dtype="bfloat16")), "t")
    g = _graph_lower.lower(be, spec, handle=0x1234)
    tensors = _created(be, be.BACKEND_TENSOR_DESCRIPTOR)
    assert len(tensors) == 3 and all(t.finalized for t in tensors)
    x = tensors[0].values
    assert x[be.ATTR_TENSOR_DATA_TYPE] == be.DATA_BFLOAT16
    assert x[be.ATTR_TENSOR_DIMENSIONS] == (2, 8, 9, 9)
    assert x[be.ATTR_TENSOR_STRIDES] == (648, 1, 72, 8)
    assert x[be.ATTR_TENSOR_UNIQUE_ID] == (1,)
    assert x[be.ATTR_TENSOR_BYTE_ALIGNMENT] == (16,)
    assert be.ATTR_TENSOR_IS_VIRTUAL not in x
    assert g.finalized and g.values[be.ATTR_OPERATIONGRAPH_HANDLE] == 0x1234


def test_conv_descriptor_and_operation(be):
    (spec,) = graph_spec(match(_conv_graph("dgrad", pre=(1, 0), post=(0, 1))), "t")
    _graph_lower.lower(be, spec, handle=1)
    (conv,) = _created(be, be.BACKEND_CONVOLUTION_DESCRIPTOR)
    v = conv.values
    assert v[be.ATTR_CONVOLUTION_COMP_TYPE] == be.DATA_FLOAT
    assert v[be.ATTR_CONVOLUTION_CONV_MODE] == be.CROSS_CORRELATION
    assert v[be.ATTR_CONVOLUTION_SPATIAL_DIMS] == (2,)
    assert v[be.ATTR_CONVOLUTION_PRE_PADDINGS] == (1, 0)
    assert v[be.ATTR_CONVOLUTION_POST_PADDINGS] == (0, 1)
    assert v[be.ATTR_CONVOLUTION_FILTER_STRIDES] == (1, 2)
    (op,) = _created(be, be.BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR)
    ov = op.values
    assert ov[be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA] == 1.0
    assert ov[be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA] == 0.0
    assert ov[be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC] == (conv,)
    uid = lambda d: d[0].values[be.ATTR_TENSOR_UNIQUE_ID]  # noqa: E731
    assert uid(ov[be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX]) == (1,)
    assert uid(ov[be.ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY]) == (3,)
    types = {c[1]: c[2] for c in op.calls if c[0] == "enum"}
    assert types == {}


def test_relu_pointwise_sets_frontend_attributes(be):
    g = hd.Graph(io_data_type="float16", compute_data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(_t(g, "x", (1, 4, 5, 5)), _t(g, "w", (4, 4, 1, 1)))
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=-1.0,
                relu_upper_clip=6.0).set_output(True).set_name("y")
    (spec,) = graph_spec(match(g), "t")
    _graph_lower.lower(be, spec, handle=1)
    (pw,) = _created(be, be.BACKEND_POINTWISE_DESCRIPTOR)
    calls = {c[1]: c for c in pw.calls}
    assert calls[be.ATTR_POINTWISE_MODE] == ("enum", be.ATTR_POINTWISE_MODE,
                                             be.TYPE_POINTWISE_MODE, be.POINTWISE_RELU_FWD)
    assert calls[be.ATTR_POINTWISE_MATH_PREC][-1] == be.DATA_FLOAT
    assert calls[be.ATTR_POINTWISE_NAN_PROPAGATION][-1] == be.PROPAGATE_NAN
    assert calls[be.ATTR_POINTWISE_RELU_LOWER_CLIP] == ("double", be.ATTR_POINTWISE_RELU_LOWER_CLIP, -1.0)
    assert calls[be.ATTR_POINTWISE_RELU_UPPER_CLIP][-1] == 6.0
    assert calls[be.ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE][-1] == 0.0
    (conv_out,) = [t for t in _created(be, be.BACKEND_TENSOR_DESCRIPTOR)
                   if be.ATTR_TENSOR_IS_VIRTUAL in t.values]
    assert conv_out.values[be.ATTR_TENSOR_DATA_TYPE] == be.DATA_FLOAT


def test_unclipped_relu_gets_flt_max(be):
    g = hd.Graph(io_data_type="float32", compute_data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(_t(g, "x", (1, 4, 5, 5)), _t(g, "w", (4, 4, 1, 1)))
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    (spec,) = graph_spec(match(g), "t")
    _graph_lower.lower(be, spec, handle=1)
    (pw,) = _created(be, be.BACKEND_POINTWISE_DESCRIPTOR)
    assert pw.values[be.ATTR_POINTWISE_RELU_UPPER_CLIP] == _graph_lower.FLT_MAX
    assert pw.values[be.ATTR_POINTWISE_RELU_LOWER_CLIP] == 0.0


def test_bn_training_norm_forward_attributes(be):
    (spec,) = graph_spec(match(_bn_training()), "t")
    _graph_lower.lower(be, spec, handle=1)
    (op,) = _created(be, be.BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR)
    v = op.values
    assert v[be.ATTR_OPERATION_NORM_FWD_MODE] == be.BATCH_NORM
    assert v[be.ATTR_OPERATION_NORM_FWD_PHASE] == be.NORM_FWD_TRAINING
    modes = {c[1]: c[2] for c in op.calls if c[0] == "enum"}
    assert modes == {be.ATTR_OPERATION_NORM_FWD_MODE: be.TYPE_NORM_MODE,
                     be.ATTR_OPERATION_NORM_FWD_PHASE: be.TYPE_NORM_FWD_PHASE}
    eps = v[be.ATTR_OPERATION_NORM_FWD_EPSILON_DESC][0].values
    assert eps[be.ATTR_TENSOR_IS_BY_VALUE] is True and eps[be.ATTR_TENSOR_DIMENSIONS] == (1, 1, 1, 1)
    for attr in (be.ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
                 be.ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
                 be.ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC,
                 be.ATTR_OPERATION_NORM_FWD_YDESC):
        assert attr in v


def test_drelu_graph_has_three_ops_in_order(be):
    spec = graph_spec(match(_drelu_graph("float16")), "t")[0]
    g = _graph_lower.lower(be, spec, handle=1)
    kinds = [d.kind for d in g.values[be.ATTR_OPERATIONGRAPH_OPS]]
    assert kinds == [be.BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR,
                     be.BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                     be.BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR]
    fwd = g.values[be.ATTR_OPERATIONGRAPH_OPS][0]
    assert fwd.values[be.ATTR_OPERATION_NORM_FWD_PHASE] == be.NORM_FWD_INFERENCE
    assert be.ATTR_OPERATION_NORM_FWD_EPSILON_DESC not in fwd.values
    pw = g.values[be.ATTR_OPERATIONGRAPH_OPS][1]
    drelu = pw.values[be.ATTR_OPERATION_POINTWISE_DXDESC][0].values
    assert drelu[be.ATTR_TENSOR_DATA_TYPE] == be.DATA_HALF and drelu[be.ATTR_TENSOR_IS_VIRTUAL]


def test_constants_match_cudnn_graph_h(be):
    # spot checks against cudnn_graph.h of cuDNN 9.19.1 (docs/design/vendor-notes.md)
    assert (be.BACKEND_TENSOR_DESCRIPTOR, be.BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR) == (17, 30)
    assert (be.TYPE_BACKEND_DESCRIPTOR, be.TYPE_NORM_FWD_PHASE, be.TYPE_CHAR) == (15, 28, 24)
    assert (be.ATTR_TENSOR_UNIQUE_ID, be.ATTR_VARIANT_PACK_WORKSPACE) == (906, 1003)
    assert (be.ATTR_OPERATION_NORM_FWD_YDESC, be.ATTR_OPERATION_NORM_BWD_DXDESC) == (2013, 2109)
    assert (be.POINTWISE_RELU_BWD, be.HEUR_MODE_A, be.DATA_BFLOAT16) == (200, 3, 9)


def test_lower_declares_another_alignment_only_when_asked():
    be = _fake_backend.fake_module()
    (spec,) = graph_spec(match(_conv_graph("fprop")), "t")
    for align in (None, 32):
        _fake_backend.CALLS.clear()
        _graph_lower.lower(be, spec, 7, **({} if align is None else {"alignment": align}))
        tensors = [d for kind, k, d in _fake_backend.CALLS if k == be.BACKEND_TENSOR_DESCRIPTOR]
        assert tensors and {d.values[be.ATTR_TENSOR_BYTE_ALIGNMENT] for d in tensors} == {
            (align or _graph_lower.BYTE_ALIGNMENT,)}
