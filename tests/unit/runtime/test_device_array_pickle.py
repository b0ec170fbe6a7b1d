"""A CPU ``DeviceArray`` pickled (multiprocessing, Ray) or copied comes back as one array:
same dims, strides, dtype and device spec, its view over its own fresh allocation (64-byte
aligned; from 2 MiB on a 2 MiB boundary), holding the values written through the NumPy
view of the original."""
import copy
import pickle

import ml_dtypes
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.runtime._buffer import HUGE_PAGE, DeviceArray


@pytest.fixture(scope="module")
def dev():
    with hd.Device("cpu") as d:
        yield d


@pytest.mark.parametrize("dims,dtype,layout", [
    ((2, 3, 5, 4), np.float32, "NCHW"),
    ((2, 16, 64, 64), np.float32, "NHWC"),                  # 2 MiB and up: a mapping
    ((1, 5, 3, 4, 2), ml_dtypes.bfloat16, "NDHWC"),
    ((3, 2, 7, 7), np.float16, "NCHW"),
])
@pytest.mark.parametrize("how", ["pickle", "pickle5", "deepcopy", "copy"])
def test_a_copy_is_one_array_with_the_values(dev, dims, dtype, layout, how):
    a = dev.empty(dims, dtype, layout=layout)
    want = np.random.default_rng(1).uniform(-4, 4, dims).astype(dtype)
    a.view[...] = want
    if how.startswith("pickle"):
        b = pickle.loads(pickle.dumps(a, protocol=5 if how == "pickle5" else 2))
    else:
        b = (copy.deepcopy if how == "deepcopy" else copy.copy)(a)
    assert type(b) is DeviceArray and b is not a
    assert (b.dims, b.strides, b.dtype, b.device) == (a.dims, a.strides, a.dtype, a.device)
    assert b.nbytes == a.nbytes
    np.testing.assert_array_equal(b.to_numpy_sync().astype(np.float64),
                                  want.astype(np.float64))
    # the view is over the array's own allocation, not a second copy of it
    assert np.shares_memory(b.view, b._flat) and not np.shares_memory(b.view, a.view)
    assert b._flat.ctypes.data % (HUGE_PAGE if b.nbytes >= HUGE_PAGE else 64) == 0
    b.copy_from(np.zeros(dims, dtype))
    assert not b.view.astype(np.float64).any() and b._flat.astype(np.float64).sum() == 0
    np.testing.assert_array_equal(a.view.astype(np.float64), want.astype(np.float64))


def test_non_packed_strides_survive(dev):
    a = dev.empty((2, 3, 4, 5), np.float32, strides=(200, 60, 15, 2))
    a.view[...] = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    b = pickle.loads(pickle.dumps(a))
    assert b.strides == (200, 60, 15, 2)
    assert b.view.strides == tuple(4 * s for s in (200, 60, 15, 2))
    np.testing.assert_array_equal(b.to_numpy_sync(),
                                  np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5))
