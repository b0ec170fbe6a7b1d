"""TensorAttributes, strides_for, layouts and stride checks (hipdnn_async.graph._tensor)."""
import contextlib

import ml_dtypes
import numpy as np
import pytest

from hipdnn_async._errors import GraphError
from hipdnn_async._types import DataType
from hipdnn_async.graph import Graph, TensorAttributes, strides_for
from hipdnn_async.graph._tensor import check_strides, stride_order


@contextlib.contextmanager
def _raises(exc, code, *fragments):
    """``exc`` with ``.code`` and every fragment in the message."""
    with pytest.raises(exc) as info:
        yield info
    assert info.value.code == code, info.value.code
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


def _numpy_strides(dims, layout):
    """Element strides of a C-contiguous NumPy array transposed to logical order."""
    perm = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1), "NCDHW": (0, 1, 2, 3, 4),
            "NDHWC": (0, 2, 3, 4, 1)}[layout]
    stored = np.empty([dims[p] for p in perm], dtype=np.float32)
    inv = np.argsort(perm)
    logical = stored.transpose(inv)
    assert logical.shape == tuple(dims)
    return tuple(s // 4 for s in logical.strides)


@pytest.mark.parametrize("layout,dims", [
    ("NCHW", (8, 64, 56, 56)), ("NHWC", (8, 64, 56, 56)), ("NHWC", (2, 3, 5, 7)),
    ("NCDHW", (2, 3, 4, 5, 6)), ("NDHWC", (2, 3, 4, 5, 6)), ("nhwc", (1, 4, 2, 3)),
])
def test_strides_for_matches_numpy(layout, dims):
    assert strides_for(dims, layout) == _numpy_strides(dims, layout.upper())


def test_strides_for_nhwc_formula():
    n, c, h, w = 8, 64, 56, 56
    assert strides_for((n, c, h, w), "NHWC") == (h * w * c, 1, w * c, c)


@pytest.mark.parametrize("dims,layout,frag", [
    ((1, 2, 3, 4), "CHWN", "'CHWN'"),
    ((1, 2, 3), "NCHW", "needs 4 dims"),
    ((1, 2, 3, 4, 5), "NHWC", "needs 4 dims"),
    ((1, 2, 3, 4), "NDHWC", "needs 5 dims"),
    ((1, 2, 3, 4), 7, "7"),
])
def test_strides_for_errors(dims, layout, frag):
    with _raises(GraphError, "INVALID_VALUE", "strides_for", frag):
        strides_for(dims, layout)


def test_tensor_defaults_packed_nchw_and_io_type():
    g = Graph(io_data_type=DataType.HALF)
    t = g.tensor(dims=(2, 3, 4, 5), name="x")
    assert t.strides == (60, 20, 5, 1)
    assert t.data_type is DataType.HALF
    assert not t.is_virtual
    assert t.uid is None and t.name == "x"
    t5 = g.tensor(dims=(2, 3, 4, 5, 6))
    assert t5.strides == (360, 120, 30, 6, 1)


def test_tensor_layout_and_explicit_strides():
    g = Graph()
    x = g.tensor(dims=(8, 64, 56, 56), layout="NHWC", name="x")
    assert x.strides == (56 * 56 * 64, 1, 56 * 64, 64)
    w = g.tensor(dims=(64, 64, 3, 3), strides=(576, 1, 192, 64), name="w")
    assert w.strides == (576, 1, 192, 64)
    # non-packed (padded rows) strides are fine
    p = g.tensor(dims=(1, 2, 3, 4), strides=(100, 40, 8, 1))
    assert p.strides == (100, 40, 8, 1)


@pytest.mark.parametrize("dt,want", [
    (np.float32, DataType.FLOAT), (np.float16, DataType.HALF),
    (ml_dtypes.bfloat16, DataType.BFLOAT16), ("float16", DataType.HALF),
    ("bfloat16", DataType.BFLOAT16), (DataType.FLOAT, DataType.FLOAT),
])
def test_dtype_spellings(dt, want):
    g = Graph(io_data_type=dt)
    assert g.io_data_type is want
    assert g.tensor(dims=(1, 1, 1, 1), data_type=dt).data_type is want
    assert g.tensor(dims=(1, 1, 1, 1)).set_data_type(dt).data_type is want


def test_setters_chain_and_repack():
    g = Graph()
    t = g.tensor(dims=(2, 3, 4, 5), layout="NHWC", name="a")
    assert t.set_name("b").set_uid(7).set_output(False).set_data_type("float16") is t
    assert (t.name, t.uid, t.is_virtual, t.data_type) == ("b", 7, True, DataType.HALF)
    t.set_dims((2, 6, 4, 5))
    assert t.strides == strides_for((2, 6, 4, 5), "NHWC")
    t.set_strides((120, 20, 5, 1))
    t.set_dims((2, 6, 4, 5))
    assert t.strides == (120, 20, 5, 1)   # explicit strides are kept
    assert t.set_output(True).is_virtual is False
    assert "name='b'" in repr(t) and "uid=7" in repr(t) and "HALF" in repr(t)


def test_virtual_dtype_from_intermediate():
    g = Graph(io_data_type="float16", intermediate_data_type="float32")
    t = g.tensor(dims=(1, 2, 3, 4)).set_output(False)
    assert t.data_type is DataType.FLOAT
    t.set_output(True)
    assert t.data_type is DataType.HALF


def test_standalone_tensor_and_copy_into_graph():
    t = TensorAttributes(dims=(1, 2, 3, 4), name="s", uid=3)
    assert t.data_type is DataType.NOT_SET
    g = Graph()
    c = g.tensor(t)
    assert c is not t and c.dims == t.dims and c.uid == 3 and c.name == "s"


@pytest.mark.parametrize("kwargs,code,frags", [
    (dict(dims=None), "ATTRIBUTE_NOT_SET", ["dims are required"]),
    (dict(dims=(1, 2, 3, 4), strides=(24, 12, 4), name="x"), "INVALID_VALUE",
     ["'x'", "rank 3", "rank 4"]),
    (dict(dims=(2, 3, 4, 5), strides=(60, 0, 5, 1), name="x"), "INVALID_VALUE",
     ["'x'", "zero stride 0", "dim 1"]),
    (dict(dims=(2, 3, 4, 5), strides=(60, 20, -5, 1), name="x"), "INVALID_VALUE",
     ["'x'", "negative stride -5", "dim 2"]),
    (dict(dims=(2, 3, 4, 5), strides=(60, 20, 4, 1), name="x"), "INVALID_VALUE",
     ["'x'", "overlap", "(60, 20, 4, 1)"]),
    (dict(dims=(2, 3, 4, 5), strides=(1, 1, 1, 1), name="x"), "INVALID_VALUE",
     ["overlap"]),
    (dict(dims=(2, -3, 4, 5), name="x"), "INVALID_VALUE", ["'x'", "dim 1 is -3"]),
    (dict(dims=(2, 0, 4, 5), name="x"), "INVALID_VALUE", ["'x'", "dim 1 is 0"]),
    (dict(dims=(2, 3, 4, 5), strides=(60, 20, 5, 1), layout="NCHW"), "INVALID_VALUE",
     ["strides or layout"]),
    (dict(dims=(2, 3, 4, 5), layout="NCDHW", name="x"), "INVALID_VALUE", ["needs 5 dims"]),
    (dict(dims=(2, 3, 4, 5), layout="HWCN", name="x"), "INVALID_VALUE", ["'HWCN'"]),
    (dict(dims=(2, 3, 4, 5), data_type=DataType.DOUBLE, name="x"), "INVALID_VALUE",
     ["'x'", "DOUBLE", "FLOAT, HALF or BFLOAT16"]),
    (dict(dims=(2, 3, 4, 5), data_type="int8", name="x"), "INVALID_VALUE", ["'int8'"]),
    (dict(dims=(2, 3.0, 4, 5), name="x"), "INVALID_VALUE", ["3.0"]),
    (dict(dims="NCHW", name="x"), "INVALID_VALUE", ["'NCHW'"]),
])
def test_tensor_errors(kwargs, code, frags):
    g = Graph()
    with _raises(GraphError, code, *frags):
        g.tensor(**kwargs)


def test_zero_batch_allowed_at_creation():
    g = Graph()
    t = g.tensor(dims=(0, 3, 4, 5), layout="NHWC")
    assert t.strides == (60, 1, 15, 3)


def test_size_one_dims_do_not_overlap():
    # (1, C, 1, 1) with NHWC-like strides where size-1 dims repeat C: fine.
    check_strides((1, 8, 1, 1), (8, 1, 8, 8), where="t")
    check_strides((4, 1, 3, 3), (9, 9, 3, 1), where="t")


@pytest.mark.parametrize("dims,strides,order", [
    ((2, 3, 4, 5), strides_for((2, 3, 4, 5), "NCHW"), (0, 1, 2, 3)),
    ((2, 3, 4, 5), strides_for((2, 3, 4, 5), "NHWC"), (0, 2, 3, 1)),
    ((2, 1, 4, 5), strides_for((2, 1, 4, 5), "NHWC"), (0, 2, 3, 1)),
    ((2, 3, 1, 1), strides_for((2, 3, 1, 1), "NHWC"), (0, 2, 3, 1)),
    ((2, 3, 4, 5, 6), strides_for((2, 3, 4, 5, 6), "NDHWC"), (0, 2, 3, 4, 1)),
    ((2, 3, 4, 5), (1, 2, 6, 24), (3, 2, 1, 0)),
])
def test_stride_order(dims, strides, order):
    assert stride_order(dims, strides) == order


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_set_uid_errors(bad):
    g = Graph()
    with _raises(GraphError, "INVALID_VALUE", "uid"):
        g.tensor(dims=(1, 1, 1, 1), name="t").set_uid(bad)
