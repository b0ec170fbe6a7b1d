"""The wrong-layout error names the tensor's layout, the buffer's, and the array to pass
instead (issue 26); following its advice binds, checked against a float64 reference."""
import re

import numpy as np
import pytest

import hipdnn_async as hd
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
