"""Pattern recognition: the nine supported patterns and near misses (hipdnn_async.patterns)."""
import pytest

from hipdnn_async._errors import GraphError, NotSupportedError
from hipdnn_async._types import ConvolutionMode, DataType, PointwiseMode
from hipdnn_async.graph import ConvAttrs, Graph
from hipdnn_async.patterns import CATALOG, ConvDirection, Match, Pattern, conv_roles, match

ADD, RELU_FWD, RELU_BWD = PointwiseMode.ADD, PointwiseMode.RELU_FWD, PointwiseMode.RELU_BWD


def check_ns(excinfo, *fragments):
    err = excinfo.value
    assert type(err) is NotSupportedError
    assert err.code == "GRAPH_NOT_SUPPORTED"
    for f in fragments:
        assert f in str(err), (f, str(err))


def stat(g, name, c=3, rank=4):
    return g.tensor(dims=(1, c) + (1,) * (rank - 2), name=name)


# ---------------------------------------------------------------- builders
def p1(rank=4):
    g = Graph()
    x = g.tensor(dims=(2, 3) + (4,) * (rank - 2), name="x")
    ts = [stat(g, n, rank=rank) for n in ("mean", "variance", "scale", "bias")]
    y = g.batchnorm_inference_variance_ext(x, *ts, epsilon=1e-5, name="bn").set_output(True)
    return g, dict(x=x, mean=ts[0], variance=ts[1], scale=ts[2], bias=ts[3], y=y)


def p2(lower=None, upper=None):
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    mean, inv, scale, bias = (stat(g, n) for n in ("mean", "inv_variance", "scale", "bias"))
    y = g.batchnorm_inference(x, mean, inv, scale, bias, name="bn")
    d = g.pointwise(y, dy, mode=RELU_BWD, relu_lower_clip=lower, relu_upper_clip=upper,
                    name="drelu")
    dx, ds, db = g.batchnorm_backward(d, x, scale, mean=mean, inv_variance=inv, name="bwd")
    for t in (dx, ds, db):
        t.set_output(True)
    return g, dict(x=x, mean=mean, inv_variance=inv, scale=scale, bias=bias, dy=dy, dx=dx,
                   dscale=ds, dbias=db, y_bn=y, g=d)


def p3(running=False, stats_out=True):
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    scale, bias = stat(g, "scale"), stat(g, "bias")
    kw = {}
    if running:
        kw = dict(momentum=0.1, prev_running_mean=stat(g, "pm"),
                  prev_running_variance=stat(g, "pv"))
    y, mean, inv, nm, nv = g.batchnorm(x, scale, bias, epsilon=1e-5, name="bn", **kw)
    y.set_output(True)
    if stats_out:
        mean.set_output(True)
        inv.set_output(True)
    for t in (nm, nv):
        if t is not None:
            t.set_output(True)
    return g, dict(x=x, scale=scale, bias=bias, y=y, mean=mean, inv_variance=inv, nm=nm,
                   nv=nv, **kw)


def p4(lower=None, upper=None, running=False):
    g, t = p3(running=running)
    t["y"].set_output(False)
    r = g.pointwise(t["y"], mode=RELU_FWD, relu_lower_clip=lower, relu_upper_clip=upper,
                    name="relu").set_output(True)
    t["y_bn"], t["y"] = t["y"], r
    return g, t


def p5():
    g = Graph()
    dy, x = g.tensor(dims=(2, 3, 4, 4), name="dy"), g.tensor(dims=(2, 3, 4, 4), name="x")
    scale, mean, inv = (stat(g, n) for n in ("scale", "mean", "inv_variance"))
    dx, ds, db = g.batchnorm_backward(dy, x, scale, mean=mean, inv_variance=inv, name="bwd")
    for t in (dx, ds, db):
        t.set_output(True)
    return g, dict(dy=dy, x=x, scale=scale, mean=mean, inv_variance=inv, dx=dx, dscale=ds,
                   dbias=db)


def p6(mode=ConvolutionMode.CROSS_CORRELATION):
    g = Graph()
    dy, w = g.tensor(dims=(2, 6, 8, 8), name="dy"), g.tensor(dims=(6, 4, 3, 3), name="w")
    dx = g.conv_dgrad(dy, w, dx_dims=(2, 4, 8, 8), padding=1, mode=mode,
                      name="dgrad").set_output(True)
    return g, dict(dy=dy, w=w, dx=dx)


def p7(mode=ConvolutionMode.CROSS_CORRELATION):
    g = Graph()
    x, w = g.tensor(dims=(2, 4, 8, 8), name="x"), g.tensor(dims=(6, 4, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1, mode=mode, name="conv").set_output(True)
    return g, dict(x=x, w=w, y=y)


def p8(bias=True, lower=None, upper=None, rank=4):
    g = Graph()
    x = g.tensor(dims=(2, 4) + (8,) * (rank - 2), name="x")
    w = g.tensor(dims=(6, 4) + (3,) * (rank - 2), name="w")
    y = g.conv_fprop(x, w, padding=1, name="conv")
    t = dict(x=x, w=w, conv_y=y)
    a = y
    if bias:
        t["bias"] = g.tensor(dims=(1, 6) + (1,) * (rank - 2), name="bias")
        a = g.pointwise(y, t["bias"], mode=ADD, name="add")
        t["add_out"] = a
    t["y"] = g.pointwise(a, mode=RELU_FWD, relu_lower_clip=lower, relu_upper_clip=upper,
                         name="relu").set_output(True)
    return g, t


def p9():
    g = Graph()
    dy, x = g.tensor(dims=(2, 6, 8, 8), name="dy"), g.tensor(dims=(2, 4, 8, 8), name="x")
    dw = g.conv_wgrad(dy, x, dw_dims=(6, 4, 3, 3), padding=1, name="wgrad").set_output(True)
    return g, dict(dy=dy, x=x, dw=dw)


# ---------------------------------------------------------------- the nine patterns
def test_catalog_covers_nine_patterns():
    assert sorted({s.pattern.value for s in CATALOG}) == list(range(1, 10))
    assert [p.value for p in Pattern] == list(range(1, 10))


@pytest.mark.parametrize("rank", [4, 5])
def test_p1_bn_inference_variance(rank):
    g, t = p1(rank)
    m = match(g)
    assert m.pattern is Pattern.BN_INFERENCE_VARIANCE
    assert m.tensors == {k: t[k] for k in ("x", "mean", "variance", "scale", "bias", "y")}
    assert m.params == {"epsilon": 1e-5}
    assert [n.name for n in m.nodes] == ["bn"]


@pytest.mark.parametrize("lower,upper", [(None, None), (0.0, None), (None, 0.5), (0.1, 0.5)])
def test_p2_bn_inference_drelu_backward(lower, upper):
    g, t = p2(lower, upper)
    m = match(g)
    assert m.pattern is Pattern.BN_INFERENCE_DRELU_BACKWARD
    roles = ("x", "mean", "inv_variance", "scale", "bias", "dy", "dx", "dscale", "dbias")
    assert m.tensors == {k: t[k] for k in roles}
    assert m.params == {"relu_lower_clip": lower, "relu_upper_clip": upper}
    assert [n.name for n in m.nodes] == ["bn", "drelu", "bwd"]


@pytest.mark.parametrize("running", [False, True])
@pytest.mark.parametrize("stats_out", [False, True])
def test_p3_bn_training(running, stats_out):
    g, t = p3(running, stats_out)
    m = match(g)
    assert m.pattern is Pattern.BN_TRAINING
    want = {k: t[k] for k in ("x", "scale", "bias", "y", "mean", "inv_variance")}
    if running:
        want.update(prev_running_mean=t["prev_running_mean"],
                    prev_running_variance=t["prev_running_variance"],
                    next_running_mean=t["nm"], next_running_variance=t["nv"])
    assert m.tensors == want
    assert m.params == {"epsilon": 1e-5, "momentum": 0.1 if running else None}


@pytest.mark.parametrize("lower,upper", [(None, None), (None, 6.0), (-1.0, 1.0)])
def test_p4_bn_training_relu(lower, upper):
    g, t = p4(lower, upper, running=True)
    m = match(g)
    assert m.pattern is Pattern.BN_TRAINING_RELU
    assert m.tensors["y"] is t["y"] and m.tensors["x"] is t["x"]
    assert t["y_bn"] not in m.tensors.values()
    assert m.tensors["next_running_mean"] is t["nm"]
    assert m.params == {"epsilon": 1e-5, "momentum": 0.1, "relu_lower_clip": lower,
                        "relu_upper_clip": upper}


def test_p5_bn_backward():
    g, t = p5()
    m = match(g)
    assert m.pattern is Pattern.BN_BACKWARD
    assert m.tensors == t and m.params == {}


@pytest.mark.parametrize("builder,pattern", [(p6, Pattern.CONV_DGRAD),
                                             (p7, Pattern.CONV_FPROP),
                                             (p9, Pattern.CONV_WGRAD)])
def test_single_conv_patterns(builder, pattern):
    g, t = builder()
    m = match(g)
    assert m.pattern is pattern
    assert m.tensors == t
    assert m.params["conv"] == ConvAttrs((1, 1), (1, 1), (1, 1), (1, 1),
                                         ConvolutionMode.CROSS_CORRELATION, 1)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rank", [4, 5])
def test_p8_conv_bias_relu(bias, rank):
    g, t = p8(bias=bias, upper=6.0, rank=rank)
    m = match(g)
    assert m.pattern is Pattern.CONV_FPROP_BIAS_RELU
    want = {k: t[k] for k in ("x", "w", "y") + (("bias",) if bias else ())}
    assert m.tensors == want
    assert m.params["relu_upper_clip"] == 6.0 and m.params["relu_lower_clip"] is None
    assert isinstance(m.params["conv"], ConvAttrs)
    assert len(m.nodes) == (3 if bias else 2)


def test_match_signature():
    g1, _ = p7()
    g2, _ = p7()
    m1, m2 = match(g1), match(g2)
    assert isinstance(m1, Match)
    assert m1.signature == "CONV_FPROP: " + g1.signature()
    assert m1.signature == m2.signature
    assert match(p9()[0]).signature != m1.signature


def test_match_validates_first():
    g, t = p7()
    t["x"].set_dims((2, 5, 8, 8))
    with pytest.raises(GraphError):
        match(g)


# ---------------------------------------------------------------- near misses
def test_convolution_mode_not_supported():
    for builder in (p6, p7):
        g, _ = builder(mode=ConvolutionMode.CONVOLUTION)
        with pytest.raises(NotSupportedError) as e:
            match(g)
        check_ns(e, "CONVOLUTION", "CROSS_CORRELATION")


@pytest.mark.parametrize("builder", [p1, p3, p7, p8, p9])
def test_double_compute_type_is_not_supported(builder):
    """Every engine computes in FLOAT: a DOUBLE compute type ran, unmet, as FLOAT."""
    g, _ = builder()
    node = g.topological_nodes()[-1]          # the last of the pattern's nodes
    node.compute_data_type = DataType.DOUBLE
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, f"node '{node.name}'", "compute_data_type DOUBLE", "compute in FLOAT")


def test_a_graph_computing_in_double_is_not_supported():
    g = Graph(compute_data_type="float64")
    x, w = g.tensor(dims=(1, 4, 6, 6), name="x"), g.tensor(dims=(4, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1, name="conv").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'conv'", "compute_data_type DOUBLE")


def test_single_conv_output_must_be_non_virtual():
    g, t = p7()
    t["y"].set_output(False)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "pattern conv_fprop", "'conv::Y'", "non-virtual")


def test_fused_conv_intermediate_must_be_virtual():
    g, t = p8()
    t["conv_y"].set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "pattern conv_fprop+bias+relu: tensor 'conv::Y'", "must be virtual")
    g, t = p8()
    t["add_out"].set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "'add::OUT_0'", "must be virtual")


def test_relu_after_batchnorm_backward():
    g, t = p5()
    t["dx"].set_output(False)
    g.pointwise(t["dx"], mode=RELU_FWD, name="relu").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'relu' (pointwise RELU_FWD) after batchnorm_backward fits none of the "
             "nine patterns")


def test_a_second_chain_or_consumer_is_named_as_such():
    # two convolutions of one x, and two ReLUs of one conv output: neither node takes the
    # output of the node before it, which the message says (not "after conv_fprop")
    g = Graph()
    x = g.tensor(dims=(1, 2, 5, 5), name="x")
    w = g.tensor(dims=(2, 2, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1, name="c0").set_output(True)
    g.conv_fprop(x, w, padding=1, name="c1").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'c1' (conv_fprop) does not take the output of 'c0' (conv_fprop)",
             "holds another chain")
    g = Graph()
    x = g.tensor(dims=(1, 2, 5, 5), name="x")
    w = g.tensor(dims=(2, 2, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1, name="c")
    g.pointwise(y, mode=RELU_FWD, name="r0").set_output(True)
    g.pointwise(y, mode=RELU_FWD, name="r1").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'r1' (pointwise RELU_FWD) does not take the output of 'r0'",
             "second consumer")


def test_pointwise_first_node():
    g = Graph()
    a = g.tensor(dims=(1, 2, 3, 3), name="a")
    g.pointwise(a, mode=RELU_FWD, name="relu").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'relu' (pointwise RELU_FWD) fits none of the nine patterns")


def test_identity_mode_not_supported():
    g, t = p7()
    t["y"].set_output(False)
    g.pointwise(t["y"], mode=PointwiseMode.IDENTITY, name="id").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'id' (pointwise IDENTITY) after conv_fprop", "pointwise ADD",
             "pointwise RELU_FWD")


def test_bn_inference_alone():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    ts = [stat(g, n) for n in ("mean", "inv", "scale", "bias")]
    g.batchnorm_inference(x, *ts, name="bn").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'bn' (batchnorm_inference)", "batchnorm_inference -> pointwise RELU_BWD "
             "-> batchnorm_backward", "on its own is g.batchnorm_inference_variance_ext(x, "
             "mean, variance, scale, bias, epsilon=...)")


def test_bn_inference_in_a_chain_gets_no_stand_alone_hint():
    """The pointer to pattern 1 is for a lone batchnorm_inference only."""
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    ts = [stat(g, n) for n in ("mean", "inv", "scale", "bias")]
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    y = g.batchnorm_inference(x, *ts, name="bn")
    y.set_output(False)
    g.pointwise(y, dy, mode=RELU_BWD, name="drelu").set_output(True)   # no bwd after it
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'drelu' (pointwise RELU_BWD) ends the graph")
    assert "on its own" not in str(e.value), str(e.value)


def test_bn_inference_variance_then_relu():
    g, t = p1()
    t["y"].set_output(False)
    g.pointwise(t["y"], mode=RELU_FWD, name="relu").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'relu' (pointwise RELU_FWD) after batchnorm_inference_variance_ext")


def test_conv_add_without_relu():
    g = Graph()
    x, w = g.tensor(dims=(2, 4, 8, 8), name="x"), g.tensor(dims=(6, 4, 3, 3), name="w")
    b = g.tensor(dims=(1, 6, 1, 1), name="b")
    y = g.conv_fprop(x, w, padding=1, name="conv")
    g.pointwise(y, b, mode=ADD, name="add").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'add' (pointwise ADD)", "conv_fprop -> pointwise ADD -> pointwise RELU_FWD")


def test_conv_add_full_tensor_not_bias():
    g = Graph()
    x, w = g.tensor(dims=(2, 4, 8, 8), name="x"), g.tensor(dims=(6, 4, 3, 3), name="w")
    res = g.tensor(dims=(2, 6, 8, 8), name="residual")
    y = g.conv_fprop(x, w, padding=1, name="conv")
    a = g.pointwise(y, res, mode=ADD, name="add")
    g.pointwise(a, mode=RELU_FWD, name="relu").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "pattern conv_fprop+bias+relu", "'residual'", "(2, 6, 8, 8)", "(1, 6, 1, 1)")


def test_lower_clip_alone_matches():
    # a vendor rule (MIOpen has no activation for it), not a pattern rule: the providers
    # that cannot express it refuse it at build
    for g, _ in (p8(lower=0.5), p4(lower=0.5), p2(lower=0.5)):
        m = match(g)
        assert m.params["relu_lower_clip"] == 0.5 and m.params["relu_upper_clip"] is None


def test_bn_training_relu_rules():
    g, t = p4()
    t["y_bn"].set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "pattern batchnorm+relu", "'bn::Y'", "must be virtual")
    g, t = p3()
    g.pointwise(t["mean"], mode=RELU_FWD, name="relu").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "pattern batchnorm+relu", "node 'relu'", "in0", "'bn::Y'", "'bn::MEAN'")
    g, t = p3(running=True)
    t["nm"].set_output(False)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "pattern batchnorm", "'bn::NEXT_RUNNING_MEAN'", "non-virtual")


def test_bn_training_relu_bwd_not_supported():
    g, t = p3()
    t["y"].set_output(False)
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    g.pointwise(t["y"], dy, mode=RELU_BWD, name="drelu").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'drelu' (pointwise RELU_BWD) after batchnorm", "pointwise RELU_FWD")


def test_p2_must_reuse_tensors():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    x2 = g.tensor(dims=(2, 3, 4, 4), name="x2")
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    mean, inv, scale, bias = (stat(g, n) for n in ("mean", "inv", "scale", "bias"))
    y = g.batchnorm_inference(x, mean, inv, scale, bias, name="bn")
    d = g.pointwise(y, dy, mode=RELU_BWD, name="drelu")
    for t in g.batchnorm_backward(d, x2, scale, mean=mean, inv_variance=inv, name="bwd"):
        t.set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'bwd'", "input x", "same tensor", "'x2'")


def test_p2_intermediates_and_operands():
    g, t = p2()
    t["g"].set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "'drelu::OUT_0'", "must be virtual")
    g, t = p2()
    t["dscale"].set_output(False)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "'bwd::DSCALE'", "non-virtual")


def test_p2_wrong_order_of_relu_bwd_operands():
    g = Graph()
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    mean, inv, scale, bias = (stat(g, n) for n in ("mean", "inv", "scale", "bias"))
    y = g.batchnorm_inference(x, mean, inv, scale, bias, name="bn")
    d = g.pointwise(dy, y, mode=RELU_BWD, name="drelu")      # swapped
    for t in g.batchnorm_backward(d, x, scale, mean=mean, inv_variance=inv, name="bwd"):
        t.set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'drelu'", "input in0", "'bn::Y'", "'dy'")


def test_single_node_inputs_non_virtual_and_conv_then_conv():
    g, t = p7()
    t["y"].set_output(False)
    w2 = g.tensor(dims=(2, 6, 1, 1), name="w2")
    g.conv_fprop(t["y"], w2, name="conv2").set_output(True)
    with pytest.raises(NotSupportedError) as e:
        match(g)
    check_ns(e, "node 'conv2' (conv_fprop) after conv_fprop")


@pytest.mark.parametrize("build, direction, x, w, y", [
    (p7, ConvDirection.FPROP, "x", "w", "y"), (p8, ConvDirection.FPROP, "x", "w", "y"),
    (p6, ConvDirection.DGRAD, "dx", "w", "dy"), (p9, ConvDirection.WGRAD, "x", "dw", "dy"),
])
def test_conv_roles_name_the_node_slots(build, direction, x, w, y):
    g, _ = build()
    m = match(g)
    roles = conv_roles(m.pattern)
    assert (roles.direction, roles.x, roles.w, roles.y) == (direction, x, w, y)
    node = m.nodes[0]
    # inputs in the node's input-slot order, output its output: the same tensor objects
    assert [m.tensors[r] for r in roles.inputs] == list(node.inputs.values())
    # the output is the pattern's last node's (pattern 8: after bias and ReLU)
    assert m.tensors[roles.output] is next(iter(m.nodes[-1].outputs.values()))
    assert roles.direction.label == node.kind.split("_")[1]


def test_conv_roles_only_for_convolutions():
    for build in (p1, p2, p3, p4, p5):
        assert conv_roles(match(build()[0]).pattern) is None
    assert [int(d) for d in ConvDirection] == [0, 1, 2]   # forward, backward data, backward filter
