"""Node methods of Graph: shape inference, default names, eager validation errors."""
import math

import numpy as np
import pytest

from hipdnn_async._errors import GraphError
from hipdnn_async._types import ConvolutionMode, DataType, PointwiseMode
from hipdnn_async.graph import (
    BatchnormAttrs,
    BatchnormInferenceVarianceAttrs,
    ConvAttrs,
    Graph,
    PointwiseAttrs,
    strides_for,
)


def check_error(excinfo, code, *fragments):
    err = excinfo.value
    assert err.code == code, err.code
    for f in fragments:
        assert f in str(err), (f, str(err))


def ref_out(size, k, pre, post, stride, dil):
    """The contract's output size formula, computed here independently."""
    return math.floor((size + pre + post - dil * (k - 1) - 1) / stride) + 1


# ---------------------------------------------------------------- conv_fprop
@pytest.mark.parametrize("x,w,pre,post,stride,dil", [
    ((1, 1, 8, 8), (1, 1, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),
    ((1, 1, 8, 8), (1, 1, 2, 2), (1, 1), (0, 0), (1, 1), (1, 1)),
    ((1, 32, 170, 96), (32, 32, 21, 11), (0, 0), (0, 0), (2, 1), (1, 1)),
    ((10, 1, 128, 66), (768, 1, 16, 16), (0, 0), (0, 0), (10, 10), (1, 1)),
    ((1, 128, 56, 56), (64, 128, 1, 1), (1, 1), (1, 1), (2, 2), (1, 1)),
    ((1, 3, 224, 224), (1, 3, 7, 7), (1, 1), (1, 1), (2, 2), (3, 3)),
    ((8, 32, 1, 18, 18), (32, 32, 1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((2, 4, 5, 6, 7), (8, 2, 3, 2, 3), (0, 1, 2), (2, 1, 0), (1, 2, 3), (2, 1, 1)),
])
def test_conv_fprop_shape_inference(x, w, pre, post, stride, dil):
    g = Graph()
    tx = g.tensor(dims=x, name="x")
    tw = g.tensor(dims=w, name="w")
    y = g.conv_fprop(tx, tw, pre_padding=pre, post_padding=post, stride=stride,
                     dilation=dil)
    want = (x[0], w[0]) + tuple(ref_out(x[i + 2], w[i + 2], pre[i], post[i], stride[i],
                                        dil[i]) for i in range(len(x) - 2))
    assert y.dims == want
    assert y.is_virtual
    node = g.nodes[0]
    assert node.kind == "conv_fprop" and node.inputs == {"x": tx, "w": tw}
    assert node.outputs == {"y": y}
    assert node.attrs == ConvAttrs(pre, post, stride, dil, ConvolutionMode.CROSS_CORRELATION,
                                   x[1] // w[1])


def test_conv_fprop_defaults_names_and_strides():
    g = Graph(io_data_type=DataType.HALF)
    x = g.tensor(dims=(8, 64, 56, 56), layout="NHWC", name="x")
    w = g.tensor(dims=(32, 64, 3, 3), strides=(576, 1, 192, 64), name="w")
    y = g.conv_fprop(x, w)
    assert y.dims == (8, 32, 54, 54)
    assert y.strides == strides_for((8, 32, 54, 54), "NHWC")
    assert y.name == "ConvolutionFprop_0::Y"
    assert y.data_type is DataType.FLOAT            # virtual: intermediate type
    assert y.set_output(True).data_type is DataType.HALF
    a = g.nodes[0].attrs
    assert (a.pre_padding, a.post_padding, a.stride, a.dilation) == ((0, 0),) * 2 + ((1, 1),) * 2
    y2 = g.conv_fprop(x, w, padding=1, stride=2, dilation=1)
    assert y2.name == "ConvolutionFprop_1::Y"
    assert y2.dims == (8, 32, 28, 28)
    assert g.nodes[1].compute_data_type is DataType.FLOAT


def test_conv_groups():
    g = Graph()
    x = g.tensor(dims=(2, 8, 5, 5))
    w = g.tensor(dims=(8, 1, 3, 3))     # depthwise
    g.conv_fprop(x, w, padding=1, name="dw")
    assert g.nodes[0].attrs.groups == 8


def test_declared_groups_agree_with_the_filter_and_survive_set_dims():
    """groups= states what the filter's dims imply (x.C // w.C), checked again when dims
    change; None (the default) infers it, as hipDNN does."""
    g = Graph()
    x = g.tensor(dims=(2, 8, 5, 5), name="x")
    w = g.tensor(dims=(8, 1, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1, groups=8)
    assert g.nodes[0].attrs.groups == 8 and g.nodes[0].groups == 8
    dy = g.tensor(dims=y.dims, name="dy")
    g.conv_dgrad(dy, w, dx_dims=x.dims, padding=1, groups=8)
    g.conv_wgrad(dy, x, dw_dims=w.dims, padding=1, groups=8)
    assert [n.attrs.groups for n in g.nodes] == [8, 8, 8]
    with pytest.raises(GraphError, match="groups=4 needs dx.C = groups \\* w.C = 4"):
        g.conv_dgrad(dy, w, dx_dims=x.dims, padding=1, groups=4)
    with pytest.raises(GraphError, match="groups=2 needs x.C = groups \\* dw.C = 2"):
        g.conv_wgrad(dy, x, dw_dims=w.dims, padding=1, groups=2)
    # the declared value binds later changes too: x grows to 16 channels, w stays (8, 1)
    x.set_dims((2, 16, 5, 5))
    with pytest.raises(GraphError, match="groups=8 needs x.C = groups \\* w.C = 8"):
        g.validate()
    # an undeclared node keeps inferring: the same change is a 16-group convolution
    h = Graph()
    hx, hw = h.tensor(dims=(2, 8, 5, 5)), h.tensor(dims=(16, 1, 3, 3))
    h.conv_fprop(hx, hw, padding=1).set_output(True)
    hx.set_dims((2, 16, 5, 5))
    h.validate()
    assert h.nodes[0].attrs.groups == 16


def _conv_graph(x=(2, 4, 8, 8), w=(6, 4, 3, 3)):
    g = Graph()
    return g, g.tensor(dims=x, name="x"), g.tensor(dims=w, name="w")


@pytest.mark.parametrize("x,w,kwargs,frags", [
    ((1, 1, 3, 3), (1, 1, 5, 5), {}, ["'conv1'", "output height -1", "H=3", "R=5",
                                      "need H + pre + post >= dilation*(R-1) + 1"]),
    ((1, 1, 8, 3), (1, 1, 1, 5), {}, ["output width -1", "W=3", "S=5"]),
    ((1, 1, 2, 8, 8), (1, 1, 3, 1, 1), {}, ["output depth 0", "D=2", "T=3"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(stride=0), ["stride 0", "height", "stride >= 1"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(stride=(1, -1)), ["stride -1", "width"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(dilation=(0, 1)), ["dilation 0", "dilation >= 1"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(padding=-1), ["padding -1", "pre_padding >= 0"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(post_padding=(0, -2)), ["post_padding -2", "width"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(padding=(1, 1, 1)), ["padding", "3 entries",
                                                           "(2)"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(stride=(1,)), ["stride (1,)", "1 entries"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(padding=1, pre_padding=1), ["not both"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(stride=1.5), ["1.5"]),
    ((1, 6, 8, 8), (4, 4, 3, 3), {}, ["x.C=6", "w.C=4", "divide", "whatever the layout"]),
    ((1, 6, 8, 8), (3, 3, 3, 3), {}, ["w.K=3", "groups=2"]),
    # a declared groups: a filter whose C/groups is a typo is an error, not a grouped conv
    ((1, 8, 8, 8), (16, 4, 3, 3), dict(groups=1), ["groups=1 needs x.C = groups * w.C = 4",
                                                    "got x.C=8, w.C=4"]),
    ((1, 8, 8, 8), (16, 2, 3, 3), dict(groups=2), ["groups=2 needs x.C = groups * w.C = 4"]),
    ((1, 8, 8, 8), (16, 8, 3, 3), dict(groups=0), ["groups must be an int >= 1", "got 0"]),
    ((1, 8, 8, 8), (16, 8, 3, 3), dict(groups=True), ["groups must be an int", "got True"]),
    ((1, 8, 8, 8), (16, 8, 3, 3), dict(groups=1.0), ["got 1.0"]),
    ((1, 1, 8), (1, 1, 3), {}, ["'x'", "rank 3", "rank 4"]),
    ((1, 1, 2, 2, 2, 2), (1, 1, 1, 1, 1, 1), {}, ["rank 6"]),
    ((1, 1, 8, 8), (1, 1, 3, 3, 3), {}, ["'w'", "rank 5", "need rank 4"]),
    ((1, 1, 8, 8), (1, 1, 3, 3), dict(mode=7), ["convolution mode 7"]),
])
def test_conv_fprop_errors(x, w, kwargs, frags):
    g, tx, tw = _conv_graph(x, w)
    with pytest.raises(GraphError) as e:
        g.conv_fprop(tx, tw, name="conv1", **kwargs)
    check_error(e, "INVALID_VALUE", "conv_fprop 'conv1'", *frags)
    assert g.nodes == ()          # a failed call leaves the graph unchanged


def test_conv_mode_convolution_accepted_by_graph():
    g, x, w = _conv_graph()
    g.conv_fprop(x, w, mode=ConvolutionMode.CONVOLUTION).set_output(True)
    g.validate()
    assert g.nodes[0].attrs.mode is ConvolutionMode.CONVOLUTION


def test_tensor_from_other_graph():
    g, x, w = _conv_graph()
    other = Graph(name="other")
    w2 = other.tensor(dims=(6, 4, 3, 3), name="w2")
    with pytest.raises(GraphError) as e:
        g.conv_fprop(x, w2, name="c")
    check_error(e, "INVALID_VALUE", "conv_fprop 'c'", "'w2'", "graph 'other'")
    with pytest.raises(GraphError) as e:
        g.conv_fprop(x, "w", name="c")
    check_error(e, "INVALID_VALUE", "TensorAttributes", "str")


def test_duplicate_node_name():
    g, x, w = _conv_graph()
    g.conv_fprop(x, w, name="c")
    with pytest.raises(GraphError) as e:
        g.conv_fprop(x, w, name="c")
    check_error(e, "INVALID_VALUE", "'c'", "unique")


def test_bad_dtypes():
    g = Graph()
    x = g.tensor(dims=(1, 1, 4, 4), name="x")
    w = g.tensor(dims=(1, 1, 3, 3), name="w")
    w._data_type = DataType.DOUBLE      # bypass the eager check in tensor()
    with pytest.raises(GraphError) as e:
        g.conv_fprop(x, w, name="c")
    check_error(e, "INVALID_VALUE", "'w'", "DOUBLE", "FLOAT, HALF or BFLOAT16")
    with pytest.raises(GraphError) as e:
        Graph(io_data_type=DataType.DOUBLE)
    check_error(e, "INVALID_VALUE", "io_data_type", "DOUBLE")


def test_zero_batch():
    g = Graph()
    x = g.tensor(dims=(0, 4, 8, 8), name="x")
    w = g.tensor(dims=(6, 4, 3, 3), name="w")
    assert g.conv_fprop(x, w).dims == (0, 6, 6, 6)
    g2 = Graph()
    dy = g2.tensor(dims=(0, 6, 6, 6), name="dy")
    w2 = g2.tensor(dims=(6, 4, 3, 3), name="w")
    with pytest.raises(GraphError) as e:
        g2.conv_dgrad(dy, w2, dx_dims=(0, 4, 8, 8), name="dg")
    check_error(e, "INVALID_VALUE", "conv_dgrad 'dg'", "dim 0 is 0")
    g3 = Graph()
    w3 = g3.tensor(dims=(0, 4, 3, 3), name="w")
    x3 = g3.tensor(dims=(1, 4, 8, 8), name="x")
    with pytest.raises(GraphError) as e:
        g3.conv_fprop(x3, w3, name="c")
    check_error(e, "INVALID_VALUE", "'w'", "dim 0 is 0")


# ---------------------------------------------------------------- dgrad / wgrad
@pytest.mark.parametrize("dx,w,pre,post,stride", [
    ((8, 32, 1, 18, 18), (32, 32, 1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((1, 64, 1, 8), (17, 64, 1, 3), (0, 1), (0, 1), (1, 2)),
    ((1, 8, 7, 7), (8, 8, 2, 2), (0, 0), (1, 1), (1, 1)),
    ((2, 4, 9, 9), (6, 2, 3, 3), (1, 1), (1, 1), (2, 2)),
])
def test_conv_dgrad_and_wgrad(dx, w, pre, post, stride):
    n_sp = len(dx) - 2
    dy_dims = (dx[0], w[0]) + tuple(ref_out(dx[i + 2], w[i + 2], pre[i], post[i], stride[i], 1)
                                    for i in range(n_sp))
    g = Graph()
    dy = g.tensor(dims=dy_dims, layout="NHWC" if n_sp == 2 else "NDHWC", name="dy")
    tw = g.tensor(dims=w, name="w")
    out = g.conv_dgrad(dy, tw, dx_dims=dx, pre_padding=pre, post_padding=post, stride=stride)
    assert out.dims == dx and out.name == "ConvolutionDgrad_0::DX"
    assert out.strides == strides_for(dx, "NHWC" if n_sp == 2 else "NDHWC")
    assert g.nodes[0].attrs.groups == dx[1] // w[1]
    g2 = Graph()
    dy2 = g2.tensor(dims=dy_dims, name="dy")
    x2 = g2.tensor(dims=dx, name="x")
    dw = g2.conv_wgrad(dy2, x2, dw_dims=w, pre_padding=pre, post_padding=post, stride=stride)
    assert dw.dims == w and dw.name == "ConvolutionWgrad_0::DW"
    assert g2.nodes[0].inputs == {"dy": dy2, "x": x2}


@pytest.mark.parametrize("dy,w,dx,kwargs,frags", [
    ((1, 6, 6, 6), (6, 4, 3, 3), (1, 4, 9, 8), {}, ["dy", "(6, 6)", "(7, 6)"]),
    ((1, 6, 6, 6), (6, 4, 3, 3), (2, 4, 8, 8), {}, ["N=2", "N=1"]),
    ((1, 5, 6, 6), (6, 4, 3, 3), (1, 4, 8, 8), {}, ["K=6", "channels 5"]),
    ((1, 6, 6, 6), (6, 4, 3, 3), (1, 6, 8, 8), {}, ["dx.C=6", "w.C=4"]),
    ((1, 6, 6, 6), (6, 4, 3, 3), (1, 4, 8), {}, ["dx_dims", "rank 3"]),
    ((1, 6, 6, 6), (6, 4, 3, 3), (1, 4, 8, 8), dict(stride=0), ["stride 0"]),
    ((1, 6, 6, 6), (6, 4, 3, 3), (1, 4, 0, 8), {}, ["dx_dims", "dim 2 is 0"]),
])
def test_conv_dgrad_errors(dy, w, dx, kwargs, frags):
    g = Graph()
    tdy, tw = g.tensor(dims=dy, name="dy"), g.tensor(dims=w, name="w")
    with pytest.raises(GraphError) as e:
        g.conv_dgrad(tdy, tw, dx_dims=dx, name="dg", **kwargs)
    check_error(e, "INVALID_VALUE", "conv_dgrad 'dg'", *frags)


def test_conv_dgrad_requires_dx_dims():
    g = Graph()
    dy, w = g.tensor(dims=(1, 6, 6, 6)), g.tensor(dims=(6, 4, 3, 3))
    with pytest.raises(GraphError) as e:
        g.conv_dgrad(dy, w, dx_dims=None, name="dg")
    check_error(e, "ATTRIBUTE_NOT_SET", "conv_dgrad 'dg'", "dx_dims")
    with pytest.raises(GraphError) as e:
        g.conv_wgrad(dy, g.tensor(dims=(1, 4, 8, 8)), dw_dims=None, name="wg")
    check_error(e, "ATTRIBUTE_NOT_SET", "conv_wgrad 'wg'", "dw_dims")


@pytest.mark.parametrize("dy,x,dw,frags", [
    ((1, 6, 6, 6), (1, 4, 8, 8), (6, 4, 3, 2), ["dy", "(6, 6)", "(6, 7)"]),
    ((1, 6, 6, 6), (1, 4, 8, 8), (5, 4, 3, 3), ["K=5", "channels 6"]),
    ((1, 6, 6, 6), (3, 4, 8, 8), (6, 4, 3, 3), ["N=3", "N=1"]),
    ((1, 6, 6, 6), (1, 4, 8, 8), (6, 3, 3, 3), ["x.C=4", "dw.C=3"]),
])
def test_conv_wgrad_errors(dy, x, dw, frags):
    g = Graph()
    tdy, tx = g.tensor(dims=dy, name="dy"), g.tensor(dims=x, name="x")
    with pytest.raises(GraphError) as e:
        g.conv_wgrad(tdy, tx, dw_dims=dw, name="wg")
    check_error(e, "INVALID_VALUE", "conv_wgrad 'wg'", *frags)


# ---------------------------------------------------------------- pointwise
def test_pointwise_modes_and_broadcast():
    g = Graph()
    a = g.tensor(dims=(2, 3, 4, 5), layout="NHWC", name="a")
    b = g.tensor(dims=(1, 3, 1, 1), name="b")
    c = g.tensor(dims=(2, 3, 4, 5), name="c")
    out = g.pointwise(a, b, mode=PointwiseMode.ADD)
    assert out.dims == a.dims and out.strides == a.strides
    assert out.name == "Pointwise_0::OUT_0"
    g.pointwise(a, c, mode=PointwiseMode.ADD)
    g.pointwise(a, c, mode=PointwiseMode.RELU_BWD, relu_upper_clip=6)
    r = g.pointwise(a, mode=PointwiseMode.RELU_FWD, relu_lower_clip=-1.0, relu_upper_clip=1.0)
    assert g.nodes[-1].attrs == PointwiseAttrs(PointwiseMode.RELU_FWD, -1.0, 1.0)
    assert r.dims == a.dims
    g.pointwise(a, mode=34)     # plain int modes are accepted
    assert g.nodes[-1].attrs.mode is PointwiseMode.RELU_FWD


@pytest.mark.parametrize("use_in1,in1_dims,kwargs,code,frags", [
    (False, None, dict(mode=PointwiseMode.ADD), "ATTRIBUTE_NOT_SET", ["ADD needs in1"]),
    (False, None, dict(mode=PointwiseMode.RELU_BWD), "ATTRIBUTE_NOT_SET", ["RELU_BWD"]),
    (True, (2, 3, 4, 5), dict(mode=PointwiseMode.RELU_FWD), "INVALID_VALUE",
     ["one input", "'b'"]),
    (True, (2, 3, 4, 4), dict(mode=PointwiseMode.ADD), "INVALID_VALUE",
     ["'b'", "(2, 3, 4, 4)", "(1, 3, 1, 1)"]),
    (True, (1, 3, 1, 1), dict(mode=PointwiseMode.RELU_BWD), "INVALID_VALUE",
     ["'b'", "(1, 3, 1, 1)", "(2, 3, 4, 5)"]),
    (True, (1, 2, 1, 1), dict(mode=PointwiseMode.ADD), "INVALID_VALUE", ["(1, 2, 1, 1)"]),
    (True, (2, 3, 4, 5), dict(mode=PointwiseMode.ADD, relu_upper_clip=1.0), "INVALID_VALUE",
     ["clips", "ADD"]),
    (False, None, dict(mode=PointwiseMode.RELU_FWD, relu_lower_clip=2.0, relu_upper_clip=1.0),
     "INVALID_VALUE", ["relu_lower_clip 2.0", "relu_upper_clip 1.0"]),
    (False, None, dict(mode=PointwiseMode.RELU_FWD, relu_upper_clip=float("nan")),
     "INVALID_VALUE", ["relu_upper_clip", "nan"]),
    (False, None, dict(mode=PointwiseMode.RELU_FWD, relu_upper_clip="1"),
     "INVALID_VALUE", ["relu_upper_clip", "'1'"]),
    # an int beyond float64's range was a bare OverflowError from float() (new-user report)
    (False, None, dict(mode=PointwiseMode.RELU_FWD, relu_upper_clip=10**400),
     "INVALID_VALUE", ["relu_upper_clip 1000", "not finite as a float"]),
    (False, None, dict(mode=PointwiseMode.RELU_FWD, relu_lower_clip=-2**1100),
     "INVALID_VALUE", ["relu_lower_clip -", "not finite as a float"]),
    # the lower clip is 0 when not given, so an upper clip below 0 is lower > upper: it was
    # accepted here and refused only at build by patterns 4 and 8 (naming no node), and
    # taken by pattern 2 (new-user report)
    (False, None, dict(mode=PointwiseMode.RELU_FWD, relu_upper_clip=-1.0),
     "INVALID_VALUE", ["relu_upper_clip -1.0 < 0", "relu_lower_clip <= -1.0"]),
    (True, (2, 3, 4, 5), dict(mode=PointwiseMode.RELU_BWD, relu_upper_clip=-0.5),
     "INVALID_VALUE", ["relu_upper_clip -0.5 < 0"]),
    (False, None, dict(mode=99), "INVALID_VALUE", ["pointwise mode 99"]),
    (False, None, dict(mode=PointwiseMode.NOT_SET), "ATTRIBUTE_NOT_SET", ["NOT_SET"]),
])
def test_pointwise_errors(use_in1, in1_dims, kwargs, code, frags):
    g = Graph()
    a = g.tensor(dims=(2, 3, 4, 5), name="a")
    b = g.tensor(dims=in1_dims, name="b") if use_in1 else None
    with pytest.raises(GraphError) as e:
        g.pointwise(a, b, name="pw", **kwargs)
    check_error(e, code, "pointwise 'pw'", *frags)


# ---------------------------------------------------------------- batchnorm
def _stats(g, c, rank=4, names=("scale", "bias")):
    return [g.tensor(dims=(1, c) + (1,) * (rank - 2), name=n) for n in names]


def test_batchnorm_training_outputs():
    g = Graph(io_data_type="float16")
    x = g.tensor(dims=(4, 3, 5, 5), layout="NHWC", name="x")
    scale, bias = _stats(g, 3)
    scale.set_data_type("float32")
    bias.set_data_type("float32")
    y, mean, inv, nm, nv = g.batchnorm(x, scale, bias, epsilon=1e-5)
    assert nm is None and nv is None
    assert y.dims == x.dims and y.strides == x.strides and y.is_virtual
    assert mean.dims == inv.dims == (1, 3, 1, 1)
    assert mean.data_type is DataType.FLOAT and mean.name == "Batchnorm_0::MEAN"
    assert inv.name == "Batchnorm_0::INV_VARIANCE"
    assert g.nodes[0].attrs == BatchnormAttrs(1e-5, None)
    pm, pv = _stats(g, 3, names=("pm", "pv"))
    for t in (pm, pv):
        t.set_data_type("float32")
    y, mean, inv, nm, nv = g.batchnorm(x, scale, bias, epsilon=1e-3, momentum=0.1,
                                       prev_running_mean=pm, prev_running_variance=pv)
    assert nm.dims == nv.dims == (1, 3, 1, 1) and nv.data_type is DataType.FLOAT
    assert set(g.nodes[1].inputs) == {"x", "scale", "bias", "prev_running_mean",
                                      "prev_running_variance"}
    assert set(g.nodes[1].outputs) == {"y", "mean", "inv_variance", "next_running_mean",
                                       "next_running_variance"}


def _bn_graph(x_dims=(4, 3, 5, 5)):
    g = Graph()
    x = g.tensor(dims=x_dims, name="x")
    c = x_dims[1]
    return g, x, _stats(g, c, len(x_dims), ("scale", "bias", "mean", "var", "pm", "pv"))


@pytest.mark.parametrize("x_dims,kwargs,code,frags", [
    ((1, 3, 1, 1), dict(epsilon=1e-5), "INVALID_VALUE", ["N * spatial == 1", "(1, 3, 1, 1)"]),
    ((1, 3, 1, 1, 1), dict(epsilon=1e-5), "INVALID_VALUE", ["N * spatial == 1"]),
    ((4, 3, 5, 5), dict(epsilon=0.0), "INVALID_VALUE", ["epsilon 0.0", "> 0"]),
    ((4, 3, 5, 5), dict(epsilon=-1e-5), "INVALID_VALUE", ["epsilon -1e-05"]),
    # below 1/FLT_MAX**2: 1/sqrt(epsilon), a constant channel's inv_variance, overflows
    # float32 (and y is NaN there)
    ((4, 3, 5, 5), dict(epsilon=1e-80), "INVALID_VALUE", ["epsilon 1e-80", "8.63617e-78",
                                                          "inv_variance", "constant channel"]),
    ((4, 3, 5, 5), dict(epsilon=1e-300), "INVALID_VALUE", ["epsilon 1e-300", "FLOAT"]),
    ((4, 3, 5, 5), dict(epsilon=5e-324), "INVALID_VALUE", ["epsilon 5e-324"]),
    ((4, 3, 5, 5), dict(epsilon=float("inf")), "INVALID_VALUE", ["epsilon inf",
                                                                 "not finite"]),
    ((4, 3, 5, 5), dict(epsilon=None), "ATTRIBUTE_NOT_SET", ["epsilon"]),
    ((4, 3, 5, 5), dict(epsilon=1e-5, momentum=1.5), "INVALID_VALUE",
     ["momentum 1.5", "[0, 1]"]),
    ((4, 3, 5, 5), dict(epsilon=1e-5, momentum=-0.1), "INVALID_VALUE", ["momentum -0.1"]),
    ((4, 3, 5, 5), dict(epsilon=True), "INVALID_VALUE", ["epsilon", "True"]),
    # ints beyond float64's range: a bare OverflowError before (new-user report)
    ((4, 3, 5, 5), dict(epsilon=2**1100), "INVALID_VALUE", ["epsilon 1358",
                                                            "not finite as a float"]),
    ((4, 3, 5, 5), dict(epsilon=1e-5, momentum=10**400), "INVALID_VALUE",
     ["momentum 1000", "not finite as a float"]),
    ((0, 3, 5, 5), dict(epsilon=1e-5), "INVALID_VALUE", ["'x'", "dim 0 is 0"]),
    ((4, 3, 5), dict(epsilon=1e-5), "INVALID_VALUE", ["rank 3"]),
])
def test_batchnorm_errors(x_dims, kwargs, code, frags):
    g, x, (scale, bias, *_) = _bn_graph(x_dims)
    with pytest.raises(GraphError) as e:
        g.batchnorm(x, scale, bias, name="bn", **kwargs)
    check_error(e, code, "batchnorm 'bn'", *frags)


@pytest.mark.parametrize("eps", [1e-77, 1e-30, 1.0 / float(np.finfo(np.float32).max) ** 2])
def test_batchnorm_epsilon_bound_accepts(eps):
    """Epsilon at or above 1/FLT_MAX**2 (about 8.64e-78; 1/sqrt of it is FLT_MAX, a finite
    float32) is accepted by every batchnorm node kind that takes one."""
    g, x, (scale, bias, mean, var, _, _) = _bn_graph()
    g.batchnorm(x, scale, bias, epsilon=eps, name="bn")
    g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=eps, name="v")
    assert g.nodes[0].attrs.epsilon == g.nodes[1].attrs.epsilon == eps
    assert np.isfinite(np.float32(1.0 / np.sqrt(eps)))


def test_batchnorm_running_stats_rules():
    g, x, (scale, bias, mean, var, pm, pv) = _bn_graph()
    with pytest.raises(GraphError) as e:
        g.batchnorm(x, scale, bias, epsilon=1e-5, momentum=0.1, prev_running_mean=pm,
                    name="bn")
    check_error(e, "ATTRIBUTE_NOT_SET", "batchnorm 'bn'", "prev_running_variance")
    with pytest.raises(GraphError) as e:
        g.batchnorm(x, scale, bias, epsilon=1e-5, prev_running_mean=pm,
                    prev_running_variance=pv, name="bn")
    check_error(e, "ATTRIBUTE_NOT_SET", "momentum")
    pv.set_dims((1, 4, 1, 1))
    with pytest.raises(GraphError) as e:
        g.batchnorm(x, scale, bias, epsilon=1e-5, momentum=0.0, prev_running_mean=pm,
                    prev_running_variance=pv, name="bn")
    check_error(e, "INVALID_VALUE", "'pv'", "(1, 4, 1, 1)", "(1, 3, 1, 1)")


_BN_METHODS = ["batchnorm", "batchnorm_inference", "batchnorm_inference_variance_ext",
               "batchnorm_backward"]
_BN_STAT_CASES = [
    ("scale", (1, 4, 1, 1), None, ["'scale'", "(1, 4, 1, 1)", "(1, 3, 1, 1)"]),
    ("scale", (3,), None, ["'scale'", "(3,)"]),
    ("scale", (1, 3, 1, 1), DataType.HALF, ["'scale'", "HALF", "FLOAT"]),
    ("mean", (1, 3, 2, 1), None, ["'mean'", "(1, 3, 2, 1)"]),
    ("mean", (1, 3, 1, 1), DataType.BFLOAT16, ["'mean'", "BFLOAT16"]),
]


@pytest.mark.parametrize("method,which,dims,dtype,frags", [
    (m, *case) for m in _BN_METHODS for case in _BN_STAT_CASES
    if not (m == "batchnorm" and case[0] == "mean")])  # training takes no mean input
def test_bn_stat_errors(method, which, dims, dtype, frags):
    g = Graph()
    x = g.tensor(dims=(4, 3, 5, 5), name="x")
    ts = {}
    for n in ("scale", "bias", "mean", "var"):
        ts[n] = g.tensor(dims=dims if n == which else (1, 3, 1, 1),
                         data_type=dtype if n == which else None, name=n)
    with pytest.raises(GraphError) as e:
        if method == "batchnorm":
            g.batchnorm(x, ts["scale"], ts["bias"], epsilon=1e-5, name="n")
        elif method == "batchnorm_inference":
            g.batchnorm_inference(x, ts["mean"], ts["var"], ts["scale"], ts["bias"], name="n")
        elif method == "batchnorm_inference_variance_ext":
            g.batchnorm_inference_variance_ext(x, ts["mean"], ts["var"], ts["scale"],
                                               ts["bias"], epsilon=1e-5, name="n")
        else:
            dy = g.tensor(dims=(4, 3, 5, 5), name="dy")
            g.batchnorm_backward(dy, x, ts["scale"], mean=ts["mean"], inv_variance=ts["var"],
                                 name="n")
    check_error(e, "INVALID_VALUE", f"{method} 'n'", *frags)


def test_batchnorm_inference_and_variance_ext():
    g, x, (scale, bias, mean, var, _, _) = _bn_graph((0, 3, 5, 5))   # N=0 is fine here
    y = g.batchnorm_inference(x, mean, var, scale, bias)
    assert y.dims == x.dims and y.name == "BatchnormInference_0::Y"
    y2 = g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=1e-5)
    assert y2.name == "BatchnormInferenceVarianceExt_0::Y"
    assert g.nodes[1].attrs == BatchnormInferenceVarianceAttrs(1e-5)
    with pytest.raises(GraphError) as e:
        g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=0, name="v")
    check_error(e, "INVALID_VALUE", "batchnorm_inference_variance_ext 'v'", "epsilon 0.0")
    with pytest.raises(GraphError) as e:
        g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=10**400,
                                           name="v")
    check_error(e, "INVALID_VALUE", "batchnorm_inference_variance_ext 'v'", "epsilon 1000",
                "not finite as a float")
    for eps in (1e-80, 1e-300):     # below 1/FLT_MAX**2: 1/sqrt(epsilon) overflows float32
        with pytest.raises(GraphError) as e:
            g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=eps,
                                               name="v")
        check_error(e, "INVALID_VALUE", "batchnorm_inference_variance_ext 'v'",
                    f"epsilon {eps}", "8.63617e-78", "inv_variance", "constant channel")


def test_batchnorm_backward():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 5, 6), name="x")
    dy = g.tensor(dims=(2, 3, 4, 5, 6), layout="NDHWC", name="dy")
    scale, mean, inv = _stats(g, 3, 5, ("scale", "mean", "inv"))
    dx, ds, db = g.batchnorm_backward(dy, x, scale, mean=mean, inv_variance=inv)
    assert dx.dims == x.dims and dx.strides == dy.strides   # dy's stride order
    assert ds.dims == db.dims == (1, 3, 1, 1, 1)
    assert (dx.name, ds.name, db.name) == ("BatchnormBackward_0::DX",
                                           "BatchnormBackward_0::DSCALE",
                                           "BatchnormBackward_0::DBIAS")
    dy2 = g.tensor(dims=(2, 3, 4, 5, 7), name="dy2")
    with pytest.raises(GraphError) as e:
        g.batchnorm_backward(dy2, x, scale, mean=mean, inv_variance=inv, name="bb")
    check_error(e, "INVALID_VALUE", "batchnorm_backward 'bb'", "'dy2'", "(2, 3, 4, 5, 7)")
