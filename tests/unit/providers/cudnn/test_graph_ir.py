"""Patterns as cuDNN operation graphs (providers/cudnn/_graph_ir.py), without a GPU.

Expected uids, strides and slots are written from the probe's call sequences
(docs/design/vendor-notes.md) and the cudnn_graph.h attribute list.
"""
import pytest

import hipdnn_async as hd
from hipdnn_async._errors import NotSupportedError
from hipdnn_async.patterns import match
from hipdnn_async.providers.cudnn._graph_ir import DRELU_DTYPES, channels_last, graph_spec

NHWC = lambda d: (d[1] * d[2] * d[3], 1, d[3] * d[1], d[1])   # noqa: E731
NCHW = lambda d: (d[1] * d[2] * d[3], d[2] * d[3], d[3], 1)   # noqa: E731


def _t(g, name, dims, layout=NHWC, dtype=None):
    t = g.tensor(dims=dims, strides=layout(dims), name=name)
    if dtype:
        t.set_data_type(dtype)
    return t


def _conv_graph(direction, dtype="float16", pre=(1, 0), post=(0, 1), layout=NHWC):
    g = hd.Graph(io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    kw = dict(pre_padding=pre, post_padding=post, stride=(1, 2), dilation=(1, 1))
    if direction == "fprop":
        y = g.conv_fprop(_t(g, "x", (2, 8, 9, 9), layout), _t(g, "w", (16, 8, 3, 3), layout), **kw)
    elif direction == "dgrad":
        y = g.conv_dgrad(_t(g, "dy", (2, 16, 8, 4), layout), _t(g, "w", (16, 8, 3, 3), layout),
                         dx_dims=(2, 8, 9, 9), **kw)
    else:
        y = g.conv_wgrad(_t(g, "dy", (2, 16, 8, 4), layout), _t(g, "x", (2, 8, 9, 9), layout),
                         dw_dims=(16, 8, 3, 3), **kw)
    y.set_output(True).set_name("out")
    return g


@pytest.mark.parametrize("direction,kind,slots", [
    ("fprop", "conv_fprop", ("x", "w", "y")),
    ("dgrad", "conv_dgrad", ("dx", "w", "dy")),
    ("wgrad", "conv_wgrad", ("x", "dw", "dy")),
])
def test_single_conv_keeps_asymmetric_padding(direction, kind, slots):
    (spec,) = graph_spec(match(_conv_graph(direction)), "test")
    (op,) = spec.ops
    assert op.kind == kind and tuple(s for s, _ in op.slots) == slots
    assert op.attr("pre_padding") == (1, 0) and op.attr("post_padding") == (0, 1)
    assert op.attr("stride") == (1, 2) and op.attr("mode") == "cross_correlation"
    # every tensor is a pattern buffer, bound by role, uids 1..3 in slot order
    assert [t.uid for t in spec.pack] == [1, 2, 3]
    assert all(t.binding[0] == "role" and not t.virtual for t in spec.pack)
    assert spec.segments == ()


def test_conv_bias_relu_is_conv_add_relu_with_float_virtuals():
    g = hd.Graph(io_data_type="bfloat16", compute_data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(_t(g, "x", (2, 8, 9, 9)), _t(g, "w", (16, 8, 3, 3)), padding=(1, 1))
    y = g.pointwise(y, _t(g, "bias", (1, 16, 1, 1), layout=NCHW), mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=0.1,
                relu_upper_clip=0.5).set_output(True).set_name("y")
    (spec,) = graph_spec(match(g), "test")
    conv, add, relu = spec.ops
    assert (conv.kind, add.attr("mode"), relu.attr("mode")) == ("conv_fprop", "add", "relu_fwd")
    conv_out, biased = spec.tensor(conv.slot("y")), spec.tensor(add.slot("y"))
    assert conv_out.virtual and biased.virtual
    assert conv_out.data_type == biased.data_type == hd.DataType.FLOAT
    assert conv_out.strides == NHWC((2, 16, 9, 9))          # y's layout
    assert add.slot("x") == conv.slot("y") and relu.slot("x") == add.slot("y")
    bias = spec.tensor(add.slot("b"))
    assert bias.binding == ("role", "bias") and bias.strides == (16, 1, 16, 16)
    assert relu.attr("lower_clip") == 0.1 and relu.attr("upper_clip") == 0.5
    assert spec.tensor(relu.slot("y")).binding == ("role", "y")


def test_conv_relu_without_bias_has_two_ops_and_default_clips():
    g = hd.Graph(io_data_type="float32", compute_data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(_t(g, "x", (1, 4, 5, 5)), _t(g, "w", (4, 4, 1, 1)))
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    (spec,) = graph_spec(match(g), "test")
    assert [o.kind for o in spec.ops] == ["conv_fprop", "pointwise"]
    assert spec.ops[1].attr("lower_clip") == 0.0 and spec.ops[1].attr("upper_clip") is None


def _bn_training(layout=NHWC, relu=False, running=True, stats_out=True, rank=4):
    g = hd.Graph(io_data_type="float16", compute_data_type=hd.DataType.FLOAT)
    dims = (2, 8, 5, 4) if rank == 4 else (2, 8, 3, 5, 4)
    lay = layout if rank == 4 else (lambda d: (d[1] * d[2] * d[3] * d[4], 1, d[3] * d[4] * d[1],
                                               d[4] * d[1], d[1]))
    ch = (1, 8) + (1,) * (rank - 2)
    per = lambda n: _t(g, n, ch, layout=lambda d: (8,) + (1,) * (rank - 1), dtype="float32")  # noqa: E731
    kw = dict(epsilon=1e-5)
    if running:
        kw.update(momentum=0.1, prev_running_mean=per("prm"), prev_running_variance=per("prv"))
    y, mean, inv, nrm, nrv = g.batchnorm(_t(g, "x", dims, lay), per("scale"), per("bias"), **kw)
    if relu:
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True).set_name("y")
    outs = [(mean, "mean"), (inv, "inv_variance")] if stats_out else []
    if running:
        outs += [(nrm, "nrm"), (nrv, "nrv")]
    for t, n in outs:
        t.set_output(True).set_name(n).set_data_type("float32")
    return g


@pytest.mark.parametrize("relu", [False, True])
def test_bn_training_norm_forward_with_scalars_and_running_stats(relu):
    (spec,) = graph_spec(match(_bn_training(relu=relu)), "test")
    norm = spec.ops[0]
    assert norm.kind == "norm_forward" and norm.attr("phase") == "training"
    eps, mom = spec.tensor(norm.slot("epsilon")), spec.tensor(norm.slot("momentum"))
    assert eps.by_value and eps.binding == ("scalar", 1e-5) and eps.dims == (1, 1, 1, 1)
    assert mom.by_value and mom.binding == ("scalar", pytest.approx(0.1))
    for slot, role in (("in_running_mean", "prev_running_mean"),
                       ("out_running_var", "next_running_variance")):
        t = spec.tensor(norm.slot(slot))
        assert t.binding == ("role", role) and t.strides == (8, 1, 8, 8)
    y = spec.tensor(norm.slot("y"))
    if relu:
        assert y.virtual and y.data_type == hd.DataType.FLOAT
        assert spec.ops[1].attr("mode") == "relu_fwd" and spec.ops[1].slot("x") == y.uid
    else:
        assert len(spec.ops) == 1 and y.binding == ("role", "y")


def test_bn_training_virtual_stats_become_workspace_segments():
    (spec,) = graph_spec(match(_bn_training(running=False, stats_out=False)), "test")
    norm = spec.ops[0]
    assert norm.slot("momentum") is None and norm.slot("in_running_mean") is None
    assert spec.segments == (("mean", 32), ("inv_variance", 32))   # 8 FLOAT channels
    assert not spec.tensor(norm.slot("mean")).virtual


def test_bn_3d_channels_last_is_taken():
    (spec,) = graph_spec(match(_bn_training(rank=5)), "test")
    assert spec.tensor(spec.ops[0].slot("scale")).strides == (8, 1, 8, 8, 8)


@pytest.mark.parametrize("pattern_graph", ["training", "backward"])
def test_nchw_batchnorm_is_left_to_the_legacy_engine(pattern_graph):
    if pattern_graph == "training":
        g = _bn_training(layout=NCHW)
    else:
        g = hd.Graph(io_data_type="float16", compute_data_type=hd.DataType.FLOAT)
        per = lambda n: _t(g, n, (1, 8, 1, 1), layout=NCHW, dtype="float32")  # noqa: E731
        dx, ds, db = g.batchnorm_backward(_t(g, "dy", (2, 8, 5, 4), NCHW),
                                          _t(g, "x", (2, 8, 5, 4), NCHW), per("scale"),
                                          mean=per("mean"), inv_variance=per("inv"))
        for t, n in ((dx, "dx"), (ds, "ds"), (db, "db")):
            t.set_output(True).set_name(n)
        ds.set_data_type("float32")
        db.set_data_type("float32")
    with pytest.raises(NotSupportedError, match="not channels-last.*SPATIAL_PERSISTENT"):
        graph_spec(match(g), "test")


def _drelu_graph(dtype, lower=None, upper=None):
    g = hd.Graph(io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    per = lambda n: _t(g, n, (1, 8, 1, 1), dtype="float32")  # noqa: E731
    x, mean, inv, scale, bias = (_t(g, "x", (2, 8, 5, 4)), per("mean"), per("inv"), per("scale"),
                                 per("bias"))
    y = g.batchnorm_inference(x, mean, inv, scale, bias)
    d = g.pointwise(y, _t(g, "dy", (2, 8, 5, 4)), mode=hd.PointwiseMode.RELU_BWD,
                    relu_lower_clip=lower, relu_upper_clip=upper)
    dx, ds, db = g.batchnorm_backward(d, x, scale, mean=mean, inv_variance=inv)
    for t, n in ((dx, "dx"), (ds, "ds"), (db, "db")):
        t.set_output(True).set_name(n)
    ds.set_data_type("float32")
    db.set_data_type("float32")
    return g


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_bn_inference_drelu_backward_declares_the_drelu_output_type(dtype):
    specs = graph_spec(match(_drelu_graph(dtype, 0.0, 0.5)), "test")
    io = hd.DataType[{"float16": "HALF", "bfloat16": "BFLOAT16", "float32": "FLOAT"}[dtype]]
    assert [s.variant for s in specs] == [f"dReLU output {d.name}" for d in DRELU_DTYPES[io]]
    fwd, drelu, bwd = specs[0].ops
    assert fwd.attr("phase") == "inference" and drelu.attr("mode") == "relu_bwd"
    g = specs[0].tensor(drelu.slot("dx"))
    assert g.virtual and g.data_type == DRELU_DTYPES[io][0]
    assert bwd.slot("dy") == g.uid and drelu.slot("x") == fwd.slot("y")
    # x, scale, mean and inv_variance are one tensor each, shared by both norm ops
    for slot in ("x", "scale", "mean", "inv_variance"):
        assert fwd.slot(slot) == bwd.slot(slot)
    assert drelu.attr("upper_clip") == 0.5
    assert specs[0].pack[-1].uid < 100     # no segment or scalar: every pack entry a buffer


def test_standalone_bn_inference_is_declined():
    g = hd.Graph(io_data_type="float16", compute_data_type=hd.DataType.FLOAT)
    per = lambda n: _t(g, n, (1, 8, 1, 1), dtype="float32")  # noqa: E731
    g.batchnorm_inference_variance_ext(_t(g, "x", (2, 8, 5, 4)), per("m"), per("v"), per("s"),
                                       per("b"), epsilon=1e-5).set_output(True).set_name("y")
    with pytest.raises(NotSupportedError, match="standalone batchnorm inference"):
        graph_spec(match(g), "test")


def test_channels_last_reads_strides_not_names():
    g = hd.Graph(io_data_type="float16")
    assert channels_last(_t(g, "a", (2, 8, 5, 4), NHWC))
    assert not channels_last(_t(g, "b", (2, 8, 5, 4), NCHW))
    assert not channels_last(_t(g, "c", (2, 1, 5, 4), NHWC))   # C == 1: no channel axis

