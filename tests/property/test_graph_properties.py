"""Hypothesis: valid conv/batchnorm graphs validate and match; invalid ones raise only our types."""
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipdnn_async._errors import GraphError, NotSupportedError
from hipdnn_async._types import ConvolutionMode, PointwiseMode
from hipdnn_async.graph import Graph, strides_for
from hipdnn_async.patterns import Pattern, match

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LAYOUTS = {4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}


def ref_out(size, k, pre, post, stride, dil):
    """docs/contract/semantics.md: out = (in + pre + post - dilation*(k-1) - 1) // stride + 1
    (floor)."""
    return math.floor((size + pre + post - dil * (k - 1) - 1) / stride) + 1


@st.composite
def conv_problems(draw):
    rank = draw(st.sampled_from([4, 5]))
    nsp = rank - 2
    groups = draw(st.integers(1, 3))
    c = groups * draw(st.integers(1, 3))
    k = groups * draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    pre = tuple(draw(st.integers(0, 2)) for _ in range(nsp))
    post = tuple(draw(st.integers(0, 2)) for _ in range(nsp))
    spatial = []
    for i in range(nsp):
        need = max(1, dil[i] * (kernel[i] - 1) + 1 - pre[i] - post[i])
        spatial.append(draw(st.integers(need, need + 6)))
    layout = draw(st.sampled_from(LAYOUTS[rank]))
    return dict(x=(n, c) + tuple(spatial), w=(k, c // groups) + kernel, pre=pre, post=post,
                stride=stride, dil=dil, layout=layout, groups=groups)


@SETTINGS
@given(conv_problems(), st.sampled_from(["fprop", "fused", "fused_bias", "dgrad", "wgrad"]))
def test_valid_conv_graphs_validate_and_match(p, kind):
    g = Graph()
    kw = dict(pre_padding=p["pre"], post_padding=p["post"], stride=p["stride"],
              dilation=p["dil"])
    y_dims = (p["x"][0], p["w"][0]) + tuple(
        ref_out(p["x"][i + 2], p["w"][i + 2], p["pre"][i], p["post"][i], p["stride"][i],
                p["dil"][i]) for i in range(len(p["x"]) - 2))
    assert min(y_dims) >= 1
    w = g.tensor(dims=p["w"], name="w")
    if kind in ("fprop", "fused", "fused_bias"):
        x = g.tensor(dims=p["x"], layout=p["layout"], name="x")
        y = g.conv_fprop(x, w, **kw)
        assert y.dims == y_dims
        assert y.strides == strides_for(y_dims, p["layout"])
        if kind == "fprop":
            y.set_output(True)
            want = Pattern.CONV_FPROP
        else:
            if kind == "fused_bias":
                b = g.tensor(dims=(1, p["w"][0]) + (1,) * (len(y_dims) - 2), name="b")
                y = g.pointwise(y, b, mode=PointwiseMode.ADD)
            g.pointwise(y, mode=PointwiseMode.RELU_FWD).set_output(True)
            want = Pattern.CONV_FPROP_BIAS_RELU
    elif kind == "dgrad":
        dy = g.tensor(dims=y_dims, layout=p["layout"], name="dy")
        dx = g.conv_dgrad(dy, w, dx_dims=p["x"], **kw).set_output(True)
        assert dx.strides == strides_for(p["x"], p["layout"])
        want = Pattern.CONV_DGRAD
    else:
        dy = g.tensor(dims=y_dims, layout=p["layout"], name="dy")
        x = g.tensor(dims=p["x"], name="x")
        g.conv_wgrad(dy, x, dw_dims=p["w"], **kw).set_output(True)
        want = Pattern.CONV_WGRAD
    m = match(g)
    assert m.pattern is want
    assert m.params["conv"].groups == p["groups"]
    assert sorted(t.uid for t in g.tensors) == list(range(len(g.tensors)))
    # with_batch_size to the same batch is the identity on the signature
    assert g.with_batch_size(p["x"][0]).signature() == g.signature()


@st.composite
def bn_problems(draw):
    rank = draw(st.sampled_from([4, 5]))
    dims = (draw(st.integers(1, 3)), draw(st.integers(1, 4))) + tuple(
        draw(st.integers(1, 4)) for _ in range(rank - 2))
    if dims[0] * math.prod(dims[2:]) == 1:
        dims = (2,) + dims[1:]
    return dims, draw(st.sampled_from(LAYOUTS[rank]))


@SETTINGS
@given(bn_problems(), st.sampled_from([1, 2, 3, 4, 5]),
       st.floats(1e-7, 1e-1), st.floats(0.0, 1.0))
def test_valid_bn_graphs_validate_and_match(prob, which, eps, momentum):
    dims, layout = prob
    g = Graph()
    x = g.tensor(dims=dims, layout=layout, name="x")
    sd = (1, dims[1]) + (1,) * (len(dims) - 2)
    s = {n: g.tensor(dims=sd, name=n) for n in ("scale", "bias", "mean", "var", "pm", "pv")}
    if which == 1:
        g.batchnorm_inference_variance_ext(x, s["mean"], s["var"], s["scale"], s["bias"],
                                           epsilon=eps).set_output(True)
    elif which == 2:
        dy = g.tensor(dims=dims, layout=layout, name="dy")
        y = g.batchnorm_inference(x, s["mean"], s["var"], s["scale"], s["bias"])
        d = g.pointwise(y, dy, mode=PointwiseMode.RELU_BWD)
        for t in g.batchnorm_backward(d, x, s["scale"], mean=s["mean"],
                                      inv_variance=s["var"]):
            t.set_output(True)
    elif which in (3, 4):
        outs = g.batchnorm(x, s["scale"], s["bias"], epsilon=eps, momentum=momentum,
                           prev_running_mean=s["pm"], prev_running_variance=s["pv"])
        for t in outs[1:]:
            t.set_output(True)
        if which == 3:
            outs[0].set_output(True)
        else:
            g.pointwise(outs[0], mode=PointwiseMode.RELU_FWD).set_output(True)
        assert outs[0].strides == strides_for(dims, layout)
    else:
        dy = g.tensor(dims=dims, layout=layout, name="dy")
        for t in g.batchnorm_backward(dy, x, s["scale"], mean=s["mean"],
                                      inv_variance=s["var"]):
            t.set_output(True)
    assert match(g).pattern.value == which


small = st.integers(-2, 6)


@SETTINGS
@given(st.lists(small, min_size=3, max_size=6), st.lists(small, min_size=3, max_size=6),
       st.one_of(st.none(), st.lists(small, min_size=0, max_size=6)),
       st.one_of(st.none(), small, st.lists(small, min_size=1, max_size=4)),
       st.one_of(st.none(), small, st.lists(small, min_size=1, max_size=4)),
       st.one_of(st.none(), small, st.lists(small, min_size=1, max_size=4)),
       st.sampled_from(list(ConvolutionMode) + [9]),
       st.sampled_from(["fprop", "dgrad", "wgrad", "fused"]))
def test_invalid_conv_parameters_raise_only_our_errors(xd, wd, strides, pad, stride, dil,
                                                       mode, kind):
    g = Graph()
    try:
        x = g.tensor(dims=xd, strides=strides, name="x")
        w = g.tensor(dims=wd, name="w")
        kw = dict(padding=pad, stride=stride, dilation=dil, mode=mode)
        if kind in ("fprop", "fused"):
            y = g.conv_fprop(x, w, **kw)
            if kind == "fused":
                y = g.pointwise(y, mode=PointwiseMode.RELU_FWD)
            y.set_output(True)
        elif kind == "dgrad":
            g.conv_dgrad(x, w, dx_dims=wd, **kw).set_output(True)
        else:
            g.conv_wgrad(x, w, dw_dims=wd, **kw).set_output(True)
        match(g)
    except (GraphError, NotSupportedError):
        pass


@SETTINGS
@given(st.lists(st.integers(-1, 4), min_size=2, max_size=6),
       st.lists(st.integers(-1, 4), min_size=1, max_size=6),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 2)),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
       st.sampled_from(["train", "train_relu", "inf", "inf_var", "bwd", "add", "relu_bwd"]))
def test_invalid_bn_and_pointwise_raise_only_our_errors(xd, sd, eps, clip, kind):
    g = Graph()
    try:
        x = g.tensor(dims=xd, name="x")
        s = g.tensor(dims=sd, name="s")
        if kind in ("train", "train_relu"):
            y = g.batchnorm(x, s, s, epsilon=eps, momentum=clip)[0]
            if kind == "train_relu":
                y = g.pointwise(y, mode=PointwiseMode.RELU_FWD, relu_upper_clip=clip)
        elif kind == "inf":
            y = g.batchnorm_inference(x, s, s, s, s)
        elif kind == "inf_var":
            y = g.batchnorm_inference_variance_ext(x, s, s, s, s, epsilon=eps)
        elif kind == "bwd":
            y = g.batchnorm_backward(x, x, s, mean=s, inv_variance=s)[0]
        elif kind == "add":
            y = g.pointwise(x, s, mode=PointwiseMode.ADD)
        else:
            y = g.pointwise(x, s, mode=PointwiseMode.RELU_BWD, relu_lower_clip=eps,
                            relu_upper_clip=clip)
        y.set_output(True)
        match(g)
    except (GraphError, NotSupportedError):
        pass


@pytest.mark.parametrize("n", [1, 4])
def test_with_batch_size_preserves_match(n):
    g = Graph()
    x = g.tensor(dims=(2, 4, 6, 6), layout="NHWC", name="x")
    w = g.tensor(dims=(8, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True)
    assert match(g.with_batch_size(n)).pattern is Pattern.CONV_FPROP
