"""The wrong-layout error names the tensor's layout, the buffer's, and the array to pass
instead (issue 26); following its advice binds, checked against a float64 reference."""
import re

import numpy as np
import pytest

import hipdnn_async as hd
from _peers import peer
from hipdnn_async._layout import layout_name, wrong_strides_message


def _nhwc_conv():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 8, 10, 10), layout="NHWC", name="x")
    w = g.tensor(dims=(4, 8, 1, 1), layout="NHWC", name="w")
    y = g.conv_fprop(x, w).set_output(True)
    return g, x, w, y


def test_an_nchw_array_for_an_nhwc_tensor_names_both_layouts_and_the_array_to_pass():
    g, x, w, y = _nhwc_conv()
    rng = np.random.default_rng(0)
    data = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)   # logical NCHW order
    wm = rng.standard_normal((4, 1, 1, 8)).astype(np.float32)        # NHWC memory order
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: data, w: wm, y: np.empty((2, 10, 10, 4), np.float32)})
        msg = str(info.value)
        assert "tensor 'x'" in msg and "is NHWC (strides (800, 1, 80, 8) in elements)" in msg
        assert "strides (800, 100, 10, 1) (NCHW)" in msg
        assert "(N, H, W, C) = (2, 10, 10, 8) in C order" in msg
        # Do what the message says, both ways: the memory-order array and its view.
        to_memory = re.search(r"np\.ascontiguousarray\(a\.transpose(\([\d, ]+\))\)", msg)
        m = np.ascontiguousarray(data.transpose(eval(to_memory.group(1))))
        view = re.search(r"logical view m\.transpose(\([\d, ]+\))", msg)
        ref = np.einsum("nchw,kc->nkhw", data.astype(np.float64),
                        wm.reshape(4, 8).astype(np.float64))
        for arr in (m, m.transpose(eval(view.group(1)))):
            out = np.empty((2, 10, 10, 4), np.float32)
            plan.execute_sync({x: arr, w: wm, y: out})
            np.testing.assert_allclose(out.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dims, want, name", [
    ((2, 3, 4, 5), (60, 20, 5, 1), "NCHW"),
    ((2, 3, 4, 5), (60, 1, 15, 3), "NHWC"),
    ((2, 3, 4, 5, 6), (360, 1, 90, 18, 3), "NDHWC"),
    ((2, 3, 4, 5), (80, 1, 20, 4), "non-packed NHWC-ordered"),
    ((2, 3, 4, 5), (60, 20, 1, 4), "strided with stride order (0, 1, 3, 2)"),
])
def test_layout_names(dims, want, name):
    assert layout_name(dims, want) == name


def test_a_5d_message_gives_the_memory_order_shape_with_dim_letters():
    msg = wrong_strides_message("t", (2, 3, 4, 5, 6), (360, 1, 90, 18, 3),
                                (360, 120, 30, 6, 1))
    assert "t is NDHWC" in msg and "(NCDHW)" in msg
    assert "(N, D, H, W, C) = (2, 4, 5, 6, 3)" in msg
    assert "a.transpose(0, 2, 3, 4, 1)" in msg and "m.transpose(0, 4, 1, 2, 3)" in msg


def test_non_packed_strides_ask_for_that_view_or_a_flat_buffer_of_the_extent():
    msg = wrong_strides_message("t", (2, 3, 4, 5), (80, 1, 20, 4), (60, 20, 5, 1))
    assert "non-packed NHWC-ordered" in msg
    assert "flat 1-D buffer of at least 159 elements" in msg     # 1 + 80 + 2 + 60 + 16


def test_a_plain_layout_message_offers_no_identity_transpose():
    """An NCHW tensor given a buffer with other strides: the message asks for a C-order
    array of the logical shape, not for a no-op ``m.transpose(0, 1, 2, 3)``."""
    msg = wrong_strides_message("t", (2, 3, 4, 5), (60, 20, 5, 1), (60, 1, 15, 3))
    assert "t is NCHW" in msg and "(N, C, H, W) = (2, 3, 4, 5) in C order" in msg
    assert "transpose" not in msg


# -- dims named by role; the ambiguous case's calls; what a bias accepts (trial item 9) ----

def _conv_ref(xl, wl):
    """float64 cross-correlation, stride 1, no padding, logical layouts (NC..., KC...)."""
    out = np.zeros((xl.shape[0], wl.shape[0]) + tuple(
        a - b + 1 for a, b in zip(xl.shape[2:], wl.shape[2:])))
    for tap in np.ndindex(*wl.shape[2:]):
        win = xl[(slice(None), slice(None)) + tuple(slice(t, t + n) for t, n in
                                                     zip(tap, out.shape[2:]))]
        out += np.einsum("nc...,kc->nk...", win, wl[(slice(None), slice(None)) + tap])
    return out


@pytest.mark.parametrize("xdims, wdims, layout, letters", [
    ((2, 5, 7, 7), (4, 5, 3, 3), "NHWC", "KCRS"),
    ((1, 3, 4, 5, 5), (2, 3, 2, 3, 3), "NDHWC", "KCTRS"),
])
def test_a_filter_in_channels_last_order_is_asked_for_as_k_r_s_c(xdims, wdims, layout, letters):
    """An NHWC filter given in logical C order: the message named its memory order
    (N, H, W, C), the dims of an activation; a filter's are (K, R, S, C) ((K, T, R, S, C)
    in 3-D). Doing what it says computes the convolution."""
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=xdims, layout=layout, name="x")
    w = g.tensor(dims=wdims, layout=layout, name="w")
    y = g.conv_fprop(x, w).set_output(True)
    rng = np.random.default_rng(1)
    xl = rng.standard_normal(xdims).astype(np.float32)
    wl = rng.standard_normal(wdims).astype(np.float32)
    last = (0,) + tuple(range(2, len(xdims))) + (1,)          # channels last
    ref = _conv_ref(xl.astype(np.float64), wl.astype(np.float64))
    out = np.empty(tuple(ref.shape[i] for i in last), np.float32)
    memory = tuple(wdims[i] for i in last)
    names = "(" + ", ".join(letters[i] for i in last) + ")"
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        xm = np.ascontiguousarray(xl.transpose(last))
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xm, w: wl, y: out})
        msg = str(info.value)
        assert "tensor 'w'" in msg and f"{names} = {memory} in C order" in msg, msg
        assert "(N, " not in msg
        to_memory = re.search(r"np\.ascontiguousarray\(a\.transpose(\([\d, ]+\))\)", msg)
        wm = np.ascontiguousarray(wl.transpose(eval(to_memory.group(1))))
        assert wm.shape == memory
        plan.execute_sync({x: xm, w: wm, y: out})
        np.testing.assert_allclose(out.transpose(np.argsort(last)), ref, rtol=1e-4, atol=1e-4)
        # the activation's message keeps N, C, H, W
        with pytest.raises(hd.VariantPackError, match=r"\(N, .*C\) = "):
            plan.execute_sync({x: xl, w: wm, y: out})


def test_the_ambiguous_message_gives_the_exact_calls_and_they_compute():
    """C == H == W: a C-contiguous (N, C, H, W)-shaped array may be logical or NHWC memory.
    The message gave "arr.transpose(...)"; now each call is spelled out, and each, run as
    written on its kind of data, gives the float64 convolution."""
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 4, 4, 4), layout="NHWC", name="x")
    w = g.tensor(dims=(3, 4, 1, 1), layout="NHWC", name="w")
    y = g.conv_fprop(x, w).set_output(True)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 4, 4, 4)).astype(np.float32)       # logical data
    m = np.ascontiguousarray(a.transpose(0, 2, 3, 1))               # its NHWC memory
    wm = rng.standard_normal((3, 1, 1, 4)).astype(np.float32)
    ref = np.einsum("nchw,kc->nkhw", a.astype(np.float64), wm.reshape(3, 4).astype(np.float64))
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        out = np.empty((2, 4, 4, 3), np.float32)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: m, w: wm, y: out})
        msg = str(info.value)
        assert "ambiguous" in msg and "(N, C, H, W)" in msg and "(N, H, W, C)" in msg
        calls = re.findall(r"(m\.transpose\([\d, ]+\)|np\.ascontiguousarray\(a\.transpose"
                           r"\([\d, ]+\)\)\.transpose\([\d, ]+\)|m\.reshape\(-1\))", msg)
        assert len(calls) == 3, msg
        for call in calls:
            out = np.empty((2, 4, 4, 3), np.float32)
            plan.execute_sync({x: eval(call, {"np": np, "a": a, "m": m}), w: wm, y: out})
            np.testing.assert_allclose(out.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)


def test_a_wrong_bias_shape_says_a_flat_c_array_is_taken_and_it_is():
    """A (3, 1, 1) bias for a (1, 3, 1, 1) tensor: the message gave the same shape twice
    (logical, then "memory order") and left out the flat (C,) array that binds."""
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 2, 3, 3), name="x")
    w = g.tensor(dims=(3, 2, 1, 1), name="w")
    b = g.tensor(dims=(1, 3, 1, 1), name="bias")
    y = g.pointwise(g.conv_fprop(x, w), b, mode=hd.PointwiseMode.ADD)
    y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True)
    rng = np.random.default_rng(3)
    xl, wl = (rng.standard_normal(s).astype(np.float32) for s in ((1, 2, 3, 3), (3, 2, 1, 1)))
    bias = rng.standard_normal(3).astype(np.float32)
    ref = np.einsum("nchw,kc->nkhw", xl.astype(np.float64), wl.reshape(3, 2).astype(np.float64))
    ref = np.maximum(ref + bias.astype(np.float64).reshape(1, 3, 1, 1), 0)
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        out = np.empty((1, 3, 3, 3), np.float32)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xl, w: wl, b: bias.reshape(3, 1, 1), y: out})
        msg = str(info.value)
        assert msg.count(str((1, 3, 1, 1))) == 1, msg
        flat = re.search(r"e\.g\. shape (\(\d+,\))", msg)
        assert flat and eval(flat.group(1)) == (bias.size,)
        plan.execute_sync({x: xl, w: wl, b: bias.reshape(eval(flat.group(1))), y: out})
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_an_output_is_never_offered_a_copy_and_its_advice_fills_the_callers_array():
    # (break-it helper) the messages offered np.ascontiguousarray(...) of logical data for
    # outputs too: execute_sync wrote into that temporary copy and the caller's array kept
    # its NaN
    g, x, w, y = _nhwc_conv()
    rng = np.random.default_rng(1)
    xm = rng.standard_normal((2, 10, 10, 8)).astype(np.float32)     # memory order
    wm = rng.standard_normal((4, 1, 1, 8)).astype(np.float32)
    ref = np.einsum("nhwc,kc->nkhw", xm.astype(np.float64), wm.reshape(4, 8).astype(np.float64))
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xm, w: wm, y: np.full((2, 4, 10, 10), np.nan, np.float32)})
        msg = str(info.value)
        assert "ascontiguousarray" not in msg and "logical order" not in msg, msg
        assert "the results are written into m" in msg
        view = re.search(r"logical view m\.transpose(\([\d, ]+\))", msg)
        m = np.full((2, 10, 10, 4), np.nan, np.float32)               # (N, H, W, K)
        plan.execute_sync({x: xm, w: wm, y: m.transpose(eval(view.group(1)))})
        np.testing.assert_allclose(m.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)
        # the ambiguous shape (K == H == W): the same, with a flat buffer offered too
        g2 = hd.Graph(io_data_type=hd.DataType.FLOAT)
        x2 = g2.tensor(dims=(1, 4, 4, 4), layout="NHWC", name="x")
        w2 = g2.tensor(dims=(4, 4, 1, 1), layout="NHWC", name="w")
        y2 = g2.conv_fprop(x2, w2).set_output(True)
        plan2 = dev.build_sync(g2)
        x2m = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
        w2m = rng.standard_normal((4, 1, 1, 4)).astype(np.float32)
        with pytest.raises(hd.VariantPackError) as info:
            plan2.execute_sync({x2: x2m.transpose(0, 3, 1, 2), w2: w2m,
                                y2: np.full((1, 4, 4, 4), np.nan, np.float32)})
        msg = str(info.value)
        assert "ambiguous" in msg and "logical data a" not in msg, msg
        flat = np.full(64, np.nan, np.float32)
        plan2.execute_sync({x2: x2m.transpose(0, 3, 1, 2), w2: w2m, y2: flat})
        ref2 = np.einsum("nhwc,kc->nhwk", x2m.astype(np.float64),
                         w2m.reshape(4, 4).astype(np.float64))
        np.testing.assert_allclose(flat.reshape(1, 4, 4, 4), ref2, rtol=1e-5, atol=1e-5)


def test_a_torch_tensor_is_told_the_torch_spelling_and_it_binds():
    torch = peer("torch", "the PyTorch spelling of layout messages is checked against torch")
    # an RGB stem's filter nn.Conv2d(3, K, 3).weight: C == R == S, ambiguous as NHWC; the
    # message said m.transpose / np.ascontiguousarray, which a torch tensor refuses
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 3, 8, 8), layout="NHWC", name="x")
    w = g.tensor(dims=(5, 3, 3, 3), layout="NHWC", name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    xt = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(5, 3, 3, 3)                                     # contiguous: NCHW
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        out = torch.empty(2, 5, 8, 8).contiguous(memory_format=torch.channels_last)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xt, w: wt, y: out})
        msg = str(info.value)
        assert "a.contiguous(memory_format=torch.channels_last)" in msg, msg
        assert "m.permute(0, 3, 1, 2)" in msg and "np." not in msg, msg
        plan.execute_sync({x: xt, w: wt.contiguous(memory_format=torch.channels_last), y: out})
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), padding=1)
        assert torch.allclose(out.double(), ref, atol=1e-4, rtol=1e-4)


def test_a_channels_last_torch_tensor_for_an_nchw_tensor_is_told_contiguous():
    """(new-user trial) An NCHW tensor given a channels-last torch tensor: the message
    offers ``a.contiguous()``, not NumPy's ``np.ascontiguousarray``, and that binds."""
    torch = peer("torch", "the PyTorch spelling of layout messages is checked against torch")
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 8, 5, 5), name="x")
    w = g.tensor(dims=(8, 8, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    xt = torch.randn(2, 8, 5, 5).contiguous(memory_format=torch.channels_last)
    wt = torch.randn(8, 8, 3, 3)
    out = torch.empty(2, 8, 5, 5)
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xt, w: wt, y: out})
        msg = str(info.value)
        assert "is NCHW" in msg and "(NHWC)" in msg and "(a.contiguous())" in msg, msg
        assert "np." not in msg, msg
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xt.numpy(), w: wt, y: out})
        assert "(np.ascontiguousarray(a))" in str(info.value), str(info.value)
        plan.execute_sync({x: xt.contiguous(), w: wt, y: out})
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), padding=1)
        assert torch.allclose(out.double(), ref, atol=1e-4, rtol=1e-4)


def test_the_gpu_wrong_strides_message_offers_device_library_copies():
    from hipdnn_async.providers._gpu._bind import _layout_error

    class T:
        dims, strides, name, uid = (32, 16, 3, 3), (144, 1, 48, 16), "w", 1
    msg = _layout_error(T, (32, 16, 3, 3), (144, 9, 3, 1), "execute: tensor 'w'", "KCRS")
    assert "np." not in msg and "cp.ascontiguousarray(a.transpose(0, 2, 3, 1))" in msg
    assert "a.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2) (PyTorch)" in msg

    class Plain:
        dims, strides, name, uid = (32, 16, 3, 3), (144, 9, 3, 1), "w", 1
    plain = _layout_error(Plain, (32, 16, 3, 3), (144, 1, 48, 16), "execute: tensor 'w'",
                          "KCRS")
    assert "(cp.ascontiguousarray(a) (CuPy) or a.contiguous() (PyTorch))" in plain, plain
    out = _layout_error(T, (32, 16, 3, 3), (144, 9, 3, 1), "execute: tensor 'w'", "KCRS",
                        output=True)
    assert "ascontiguousarray" not in out and "the results are written into m" in out


@pytest.mark.parametrize("declared, buffer", [(None, "NHWC"), ("NHWC", "NCHW")])
def test_a_packed_buffer_in_another_layout_is_told_the_layout_that_binds_it_as_it_is(
        declared, buffer):
    """An input packed in another named layout is also told to declare the tensor with that
    layout (zero-copy); doing so binds the same buffer, checked against torch in float64.
    Outputs and buffers in no named packed layout are not offered it."""
    torch = peer("torch", "the rebuilt graph's result is checked against torch's conv2d")
    memory = torch.channels_last if buffer == "NHWC" else torch.contiguous_format

    def graph(layout):
        g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        x = g.tensor(dims=(2, 8, 5, 5), name="x", layout=layout)
        w = g.tensor(dims=(4, 8, 3, 3), name="w")
        y = g.conv_fprop(x, w, padding=1).set_output(True)
        return g, x, w, y

    xt = torch.randn(2, 8, 5, 5).contiguous(memory_format=memory)
    wt = torch.randn(4, 8, 3, 3)
    out = torch.empty(2, 4, 5, 5).contiguous(memory_format=(
        torch.channels_last if declared == "NHWC" else torch.contiguous_format))
    with hd.Device("cpu") as dev:
        g, x, w, y = graph(declared)
        plan = dev.build_sync(g)
        with pytest.raises(hd.VariantPackError) as info:
            plan.execute_sync({x: xt, w: wt, y: out})
        msg = str(info.value)
        said = re.search(r"declare the tensor g\.tensor\(\.\.\., layout='(\w+)'\) \(outputs "
                         r"computed from an x follow its layout unless given strides\)$", msg)
        assert said and said.group(1) == buffer, msg
        g, x, w, y = graph(said.group(1))                  # do what it says
        out = torch.empty(2, 4, 5, 5).contiguous(memory_format=memory)   # y follows x
        dev.build_sync(g).execute_sync({x: xt, w: wt, y: out})
        ref = torch.nn.functional.conv2d(xt.double(), wt.double(), padding=1)
        assert torch.allclose(out.double(), ref, atol=1e-4, rtol=1e-4)
    # an output, and a buffer packed in no named layout: no such offer
    assert "declare the tensor" not in wrong_strides_message(
        "t", (2, 8, 5, 5), (200, 25, 5, 1), (200, 1, 40, 8), output=True)
    assert "declare the tensor" not in wrong_strides_message(
        "t", (2, 8, 5, 5), (200, 25, 5, 1), (200, 5, 1, 40))
