"""Graph-level behaviour: validate, uids, lookup, signature, copy, with_batch_size, lowering."""

import pytest

import hipdnn_async
from hipdnn_async._errors import GraphError
from hipdnn_async._types import DataType, PointwiseMode
from hipdnn_async.graph import Graph, strides_for


def check_error(excinfo, code, *fragments):
    err = excinfo.value
    assert err.code == code, err.code
    for f in fragments:
        assert f in str(err), (f, str(err))


def conv_bias_relu(layout="NCHW", n=2, name="g"):
    g = Graph(name=name)
    x = g.tensor(dims=(n, 4, 8, 8), layout=layout, name="x")
    w = g.tensor(dims=(6, 4, 3, 3), name="w")
    b = g.tensor(dims=(1, 6, 1, 1), name="b")
    y = g.conv_fprop(x, w, padding=1, name="conv")
    a = g.pointwise(y, b, mode=PointwiseMode.ADD, name="add")
    r = g.pointwise(a, mode=PointwiseMode.RELU_FWD, name="relu").set_output(True)
    return g, x, w, b, y, a, r


def test_validate_assigns_smallest_unused_uids():
    g, x, w, b, y, a, r = conv_bias_relu()
    w.set_uid(0)
    b.set_uid(2)
    assert g.validate() is g
    assert [t.uid for t in (x, w, b, y, a, r)] == [1, 0, 2, 3, 4, 5]
    assert sorted(t.uid for t in g.tensors) == list(range(6))


def test_duplicate_uids():
    g, x, w, *_ = conv_bias_relu()
    x.set_uid(5)
    w.set_uid(5)
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "duplicate uid 5", "'x'", "'w'")


def test_empty_graph():
    with pytest.raises(GraphError) as e:
        Graph(name="empty").validate()
    check_error(e, "INVALID_VALUE", "'empty'", "no nodes")


def test_disconnected_components():
    g, *_ = conv_bias_relu()
    p = g.tensor(dims=(1, 2, 3, 3), name="p")
    g.pointwise(p, mode=PointwiseMode.RELU_FWD, name="lonely").set_output(True)
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "2 disconnected components", "'lonely'", "'conv'")


def test_cycle_detected():
    g, x, w, b, y, a, r = conv_bias_relu()
    conv = g.nodes[0]
    # Only reachable through internals: feed the ReLU output back into the conv.
    r.set_dims(x.dims)
    r._dims_explicit = False
    conv.inputs["x"] = a
    with pytest.raises(GraphError) as e:
        g.topological_nodes()
    check_error(e, "INVALID_VALUE", "cycle", "'conv'", "'add'")


def test_virtual_input_without_producer():
    g, x, *_ = conv_bias_relu()
    x.set_output(False)
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "conv_fprop 'conv'", "'x'", "virtual", "no node produces")


def test_validate_rechecks_changed_inputs_and_reinfers_outputs():
    g, x, w, b, y, a, r = conv_bias_relu()
    x.set_dims((2, 4, 10, 10))
    g.validate()
    assert y.dims == a.dims == r.dims == (2, 6, 10, 10)
    w.set_dims((6, 4, 13, 13))
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "conv_fprop 'conv'", "output height 0")
    w.set_dims((6, 4, 3, 3))
    r.set_dims((2, 6, 9, 9))
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "pointwise 'relu'", "(2, 6, 9, 9)", "(2, 6, 10, 10)")
    r.set_dims((2, 6, 10, 10))
    b.set_strides((6, 0, 1, 1))
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "pointwise 'add'", "'b'", "zero stride")
    b.set_strides((6, 1, 1, 1))
    y.set_data_type(DataType.DOUBLE)
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "'conv::Y'", "DOUBLE")


def test_validate_bn_stat_dtype_change():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    s = g.tensor(dims=(1, 3, 1, 1), name="s")
    bb = g.tensor(dims=(1, 3, 1, 1), name="bb")
    y, mean, inv, _, _ = g.batchnorm(x, s, bb, epsilon=1e-5, name="bn")
    mean.set_data_type("float16")
    with pytest.raises(GraphError) as e:
        g.validate()
    check_error(e, "INVALID_VALUE", "batchnorm 'bn'", "'bn::MEAN'", "HALF", "FLOAT")


def test_topological_nodes_order():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    mean, inv, s, bias = (g.tensor(dims=(1, 3, 1, 1), name=n)
                          for n in ("mean", "inv", "s", "bias"))
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    y = g.batchnorm_inference(x, mean, inv, s, bias, name="bn")
    d = g.pointwise(y, dy, mode=PointwiseMode.RELU_BWD, name="drelu")
    g.batchnorm_backward(d, x, s, mean=mean, inv_variance=inv, name="bwd")
    assert [n.name for n in g.topological_nodes()] == ["bn", "drelu", "bwd"]
    assert [n.name for n in g.nodes] == ["bn", "drelu", "bwd"]


def test_tensor_by():
    g, x, w, b, y, a, r = conv_bias_relu()
    g.validate()
    assert g.tensor_by(x) is x
    assert g.tensor_by(w.uid) is w
    assert g.tensor_by("conv::Y") is y
    assert g.tensor_by("nope") is None
    assert g.tensor_by(99, "missing") == "missing"
    assert g.tensor_by(True) is None and g.tensor_by(1.5) is None
    g.tensor(dims=(1, 1, 1, 1), name="x")
    with pytest.raises(GraphError) as e:
        g.tensor_by("x")
    check_error(e, "INVALID_VALUE", "'x'", "ambiguous")
    c = g.copy()
    assert c.tensor_by(w) is not w and c.tensor_by(w).uid == w.uid


def test_signature_independent_of_names_uids_and_unrelated_tensors():
    g1, *_ = conv_bias_relu(name="one")
    g2 = Graph(name="two")
    g2.tensor(dims=(9, 9, 9, 9), name="unused")      # unrelated: not in any node
    b = g2.tensor(dims=(1, 6, 1, 1), name="bias", uid=40)
    w = g2.tensor(dims=(6, 4, 3, 3), name="weights", uid=7)
    x = g2.tensor(dims=(2, 4, 8, 8), name="input")
    y = g2.conv_fprop(x, w, padding=(1, 1))
    a = g2.pointwise(y, b, mode=PointwiseMode.ADD)
    g2.pointwise(a, mode=PointwiseMode.RELU_FWD).set_output(True)
    g2.validate()
    assert g1.signature() == g2.signature()
    assert g1.signature() == g1.signature()
    g3, *_ = conv_bias_relu(layout="NHWC")
    assert g3.signature() != g1.signature()
    g4, x4, *_ = conv_bias_relu()
    x4.set_data_type("float16")
    assert g4.signature() != g1.signature()
    g5, *rest = conv_bias_relu()
    rest[-2].set_output(True)                         # virtual flag matters
    assert g5.signature() != g1.signature()
    g6 = Graph(name="six")
    x6 = g6.tensor(dims=(2, 4, 8, 8), name="x")
    w6 = g6.tensor(dims=(6, 4, 3, 3), name="w")
    b6 = g6.tensor(dims=(1, 6, 1, 1), name="b")
    y6 = g6.conv_fprop(x6, w6, padding=1, stride=2)
    g6.pointwise(g6.pointwise(y6, b6, mode=PointwiseMode.ADD),
                 mode=PointwiseMode.RELU_FWD).set_output(True)
    assert g6.signature() != g1.signature()           # attrs matter


def test_signature_ignores_strides_of_unit_dims():
    sigs = []
    for strides in ((6, 1, 1, 1), (6, 1, 6, 6)):
        g, x, w, b, *_ = conv_bias_relu()
        b.set_strides(strides)
        sigs.append(g.signature())
    assert sigs[0] == sigs[1]


def test_copy_is_independent():
    g, x, w, b, y, a, r = conv_bias_relu()
    g.validate()
    c = g.copy()
    assert c.signature() == g.signature()
    assert [t.uid for t in c.tensors] == [t.uid for t in g.tensors]
    assert [t.name for t in c.tensors] == [t.name for t in g.tensors]
    assert all(ct is not t for ct, t in zip(c.tensors, g.tensors))
    assert c.nodes[0].outputs["y"].producer is c.nodes[0]
    c.tensor_by("x").set_dims((3, 4, 8, 8))
    c.validate()
    assert x.dims == (2, 4, 8, 8) and c.tensor_by("relu::OUT_0").dims == (3, 6, 8, 8)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_with_batch_size_conv(layout, n):
    g, x, w, b, y, a, r = conv_bias_relu(layout=layout)
    g.validate()
    g2 = g.with_batch_size(n)
    assert g2 is not g and x.dims[0] == 2
    for name in ("x", "conv::Y", "add::OUT_0", "relu::OUT_0"):
        old, new = g.tensor_by(name), g2.tensor_by(name)
        assert new.dims == (n,) + old.dims[1:]
        assert new.strides == strides_for(new.dims, layout)
        assert new.uid == old.uid
    for name in ("w", "b"):
        assert g2.tensor_by(name).dims == g.tensor_by(name).dims
        assert g2.tensor_by(name).strides == g.tensor_by(name).strides


def test_with_batch_size_batchnorm_family():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), layout="NHWC", name="x")
    dy = g.tensor(dims=(2, 3, 4, 4), layout="NHWC", name="dy")
    mean, inv, s, bias = (g.tensor(dims=(1, 3, 1, 1), name=n)
                          for n in ("mean", "inv", "s", "bias"))
    y = g.batchnorm_inference(x, mean, inv, s, bias, name="bn")
    d = g.pointwise(y, dy, mode=PointwiseMode.RELU_BWD, name="drelu")
    dx, ds, db = g.batchnorm_backward(d, x, s, mean=mean, inv_variance=inv, name="bwd")
    g2 = g.with_batch_size(7)
    for name in ("x", "dy", "bn::Y", "drelu::OUT_0", "bwd::DX"):
        assert g2.tensor_by(name).dims == (7, 3, 4, 4)
        assert g2.tensor_by(name).strides == strides_for((7, 3, 4, 4), "NHWC")
    for name in ("mean", "inv", "s", "bias", "bwd::DSCALE", "bwd::DBIAS"):
        assert g2.tensor_by(name).dims == (1, 3, 1, 1)
    with pytest.raises(GraphError) as e:
        g.with_batch_size(0)                    # batchnorm_backward needs N >= 1
    check_error(e, "INVALID_VALUE", "dim 0 is 0")


def test_with_batch_size_wgrad_keeps_dw():
    g = Graph()
    dy = g.tensor(dims=(2, 6, 6, 6), name="dy")
    x = g.tensor(dims=(2, 4, 8, 8), name="x")
    dw = g.conv_wgrad(dy, x, dw_dims=(6, 4, 3, 3), name="wg").set_output(True)
    g2 = g.with_batch_size(3)
    assert g2.tensor_by("dy").dims[0] == g2.tensor_by("x").dims[0] == 3
    assert g2.tensor_by(dw.name).dims == (6, 4, 3, 3)


@pytest.mark.parametrize("bad", [-1, 1.0, "2", True])
def test_with_batch_size_errors(bad):
    g, *_ = conv_bias_relu()
    with pytest.raises(GraphError) as e:
        g.with_batch_size(bad)
    check_error(e, "INVALID_VALUE", "with_batch_size")


def test_with_batch_size_training_single_value():
    g = Graph()
    x = g.tensor(dims=(2, 3, 1, 1), name="x")
    s, bb = g.tensor(dims=(1, 3, 1, 1), name="s"), g.tensor(dims=(1, 3, 1, 1), name="bb")
    g.batchnorm(x, s, bb, epsilon=1e-5, name="bn")
    with pytest.raises(GraphError) as e:
        g.with_batch_size(1)
    check_error(e, "INVALID_VALUE", "batchnorm 'bn'", "N * spatial == 1")


def test_graph_config():
    g = Graph(name="cfg", io_data_type="bfloat16", intermediate_data_type="float16",
              compute_data_type="float32")
    assert (g.io_data_type, g.intermediate_data_type, g.compute_data_type) == (
        DataType.BFLOAT16, DataType.HALF, DataType.FLOAT)
    assert g.set_name("z").name == "z"
    assert "z" in repr(g)
    with pytest.raises(GraphError) as e:
        Graph(intermediate_data_type=DataType.DOUBLE)
    check_error(e, "INVALID_VALUE", "intermediate_data_type", "DOUBLE")


LOWERING = ("build_operation_graph", "get_ranked_engine_ids", "get_knobs_for_engine",
            "create_execution_plan_ext", "build_plans", "get_workspace_size", "execute",
            "execute_async")


def test_the_graph_layer_holds_no_lowering_and_no_hook():
    # hipDNN's lowering needs devices, which sit above the graph layer (issue 23): the
    # graph layer's Graph has none of those methods, and no global a higher layer fills
    from hipdnn_async.graph import _graph
    assert not [m for m in LOWERING if hasattr(Graph, m)]
    assert not hasattr(_graph, "_lowering_impl") and not hasattr(_graph, "set_lowering")


def test_hd_graph_is_the_graph_with_hipdnn_lowering():
    assert issubclass(hipdnn_async.Graph, Graph) and hipdnn_async.Graph is not Graph
    assert all(callable(getattr(hipdnn_async.Graph, m)) for m in LOWERING)
    g = hipdnn_async.Graph(name="g")
    x = g.tensor(dims=(2, 4, 8, 8), name="x")
    w = g.tensor(dims=(6, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True)
    # the graph layer's copies keep the class, so a copy lowers the same way
    assert type(g.with_batch_size(3)) is hipdnn_async.Graph
    assert type(g._snapshot()[0]) is hipdnn_async.Graph
    for step, args in (("get_ranked_engine_ids", ()), ("build_plans", ()),
                       ("get_workspace_size", ()), ("execute", ({},))):
        with pytest.raises(GraphError) as e:
            getattr(g, step)(*args)
        assert e.value.code == "ATTRIBUTE_NOT_SET" and str(e.value).startswith(step), e.value


def test_with_batch_size_keeps_a_bias_that_looks_like_data():
    # N = 1 and a 1x1 output: ADD's bias (1, 5, 1, 1) has in0's dims but is per-channel
    g = Graph(io_data_type="float32")
    x = g.tensor(dims=(1, 3, 3, 3), name="x")
    w = g.tensor(dims=(5, 3, 3, 3), name="w")
    b = g.tensor(dims=(1, 5, 1, 1), name="bias")
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w), b, mode=PointwiseMode.ADD),
                    mode=PointwiseMode.RELU_FWD)
    y.set_output(True).set_name("y")
    g2 = g.with_batch_size(4)
    assert g2.tensor_by("bias").dims == (1, 5, 1, 1)
    assert g2.tensor_by("x").dims == (4, 3, 3, 3) and g2.tensor_by("y").dims == (4, 5, 1, 1)


def test_a_tensor_of_another_graph_names_both_graphs_apart():
    g = Graph(name="g")
    x = g.tensor(dims=(1, 4, 8, 8), name="x")
    c = g.copy()                       # same name: the message must still tell them apart
    w = c.tensor(dims=(4, 4, 1, 1), name="w")
    with pytest.raises(GraphError) as e:
        c.conv_fprop(x, w)
    check_error(e, "INVALID_VALUE", "tensor 'x' (x) belongs to another graph object also "
                "named 'g'", "not this graph 'g'")
    other = Graph(name="other")
    with pytest.raises(GraphError) as e:
        other.conv_fprop(x, other.tensor(dims=(4, 4, 1, 1), name="w"))
    check_error(e, "INVALID_VALUE", "belongs to graph 'g', not this graph 'other'")
