"""``await dev.asarray(a)`` keeps the memory layout of ``a`` (issue 9 item 9), on the CPU
device and on the fake GPU runtime (host-backed, so the copied bytes can be read back)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async._layout import dense_strides_like

pytestmark = pytest.mark.anyio


def _nhwc_view(n=2, c=3, h=4, w=5, dtype=np.float32):
    memory = np.arange(n * h * w * c, dtype=dtype).reshape(n, h, w, c)
    return memory.transpose(0, 3, 1, 2)          # logical NCHW dims, NHWC strides


def _element_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


@pytest.mark.parametrize("case", ["nhwc", "nchw", "ndhwc", "sliced", "reversed"])
def test_dense_strides_like_keeps_the_order_and_packs(case):
    if case == "nhwc":
        a = _nhwc_view()
        want = _element_strides(a)              # dense: its own strides
    elif case == "nchw":
        a = np.zeros((2, 3, 4, 5), np.float16)
        want = (60, 20, 5, 1)
    elif case == "ndhwc":
        a = np.zeros((2, 4, 5, 6, 3), np.float32).transpose(0, 4, 1, 2, 3)
        want = _element_strides(a)
    elif case == "sliced":                      # not dense: packed, same (NHWC) order
        a = _nhwc_view(h=8)[:, :, ::2, :]
        want = hd.graph.strides_for(a.shape, "NHWC")
    else:                                       # negative strides: order by magnitude
        a = np.zeros((2, 3, 4, 5), np.float32)[:, :, ::-1, :]
        want = (60, 20, 5, 1)
    assert dense_strides_like(a.shape, a.strides) == tuple(want)


async def test_cpu_asarray_keeps_an_nhwc_view_nhwc(cpu_device):
    a = _nhwc_view()
    arr = await cpu_device.asarray(a)
    assert arr.strides == _element_strides(a) == hd.graph.strides_for(a.shape, "NHWC")
    np.testing.assert_array_equal(await arr.to_numpy(), a)
    packed = await cpu_device.asarray(a, layout="NCHW")
    assert packed.strides == (60, 20, 5, 1)
    explicit = await cpu_device.asarray(a, strides=(60, 1, 15, 3))
    assert explicit.strides == (60, 1, 15, 3)
    with pytest.raises(hd.GraphError, match="layout or strides, not both"):
        await cpu_device.asarray(a, layout="NHWC", strides=(60, 1, 15, 3))


async def test_gpu_asarray_keeps_the_layout_and_the_bytes(fake_cuda):
    a = _nhwc_view()
    with hd.Device("cuda:0", streams=1) as dev:
        arr = await dev.asarray(a)
        assert arr.strides == (60, 1, 15, 3)        # NHWC, as the view
        # the device bytes are the view's memory order: N, H, W, C
        raw = (ctypes.c_float * 120).from_address(arr.ptr)
        np.testing.assert_array_equal(np.frombuffer(raw, np.float32),
                                      np.ascontiguousarray(a.transpose(0, 2, 3, 1)).ravel())
        np.testing.assert_array_equal(arr.to_numpy_sync(), a)
        assert (await dev.asarray(np.ascontiguousarray(a))).strides == (60, 20, 5, 1)


async def test_an_nhwc_view_staged_by_asarray_binds_to_an_nhwc_tensor(fake_cuda):
    # the end-to-end point of the fix: before, asarray packed the view as NCHW and an NHWC
    # plan then refused it (or, for C == H == W, read it as NHWC memory)
    g = hd.Graph(io_data_type="float32")
    t = g.tensor(dims=(1, 2, 2, 2), layout="NHWC", name="x")
    from hipdnn_async.providers._gpu._bind import GpuTarget, make_binder
    bind = make_binder(t, output=False, target=GpuTarget(0, "cuda:0", fake_cuda.gpu))
    with hd.Device("cuda:0", streams=1) as dev:
        arr = await dev.asarray(_nhwc_view(1, 2, 2, 2))
        assert bind(arr) == arr.ptr


@pytest.mark.parametrize("where", ["cpu", "cuda:0"])
async def test_a_masked_array_is_refused_not_copied_without_its_mask(where, request):
    """np.asarray dropped the mask: the masked-out values (999 here) were copied as if
    valid, where plan.execute and the batcher refuse masked arrays (new-user report)."""
    if where != "cpu":
        request.getfixturevalue("fake_cuda")
    data = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    data[0, 1, 2, 3] = 999.0
    masked = np.ma.masked_array(data, mask=data == 999.0)
    with hd.Device(where, streams=1) as dev:
        with pytest.raises(hd.VariantPackError) as e:
            await dev.asarray(masked)
        assert "Device.asarray: masked arrays are not taken" in str(e.value)
        assert e.value.code == "INVALID_VARIANT_PACK"
        # the filled array is taken, with the value chosen for the masked element
        arr = await dev.asarray(masked.filled(-1.0))
        want = data.copy()
        want[0, 1, 2, 3] = -1.0
        np.testing.assert_array_equal(arr.to_numpy_sync(), want)


@pytest.mark.parametrize("where", ["cpu", "cuda:0"])
def test_copy_from_refuses_a_masked_array_and_keeps_the_contents(where, request):
    """DeviceArray / GpuArray.copy_from took np.asarray of a masked array, so its masked-out
    values were copied as if valid (new-user report); the array keeps what it held."""
    if where != "cpu":
        request.getfixturevalue("fake_cuda")
    data = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    masked = np.ma.masked_array(data + 100.0, mask=data == 23.0)
    with hd.Device(where, streams=1) as dev:
        arr = dev.empty(data.shape, "float32")
        arr.copy_from(data)
        name = "GpuArray" if where != "cpu" else "DeviceArray"
        with pytest.raises(hd.VariantPackError,
                           match=f"^{name}.copy_from: masked arrays are not taken") as e:
            arr.copy_from(masked)
        assert e.value.code == "INVALID_VARIANT_PACK"
        np.testing.assert_array_equal(arr.to_numpy_sync(), data)
        arr.copy_from(masked.filled(-1.0))
        np.testing.assert_array_equal(arr.to_numpy_sync(), np.where(data == 23.0, -1.0,
                                                                    data + 100.0))


async def test_asarray_errors_name_asarray_not_empty():
    """An integer array or layout + strides: the error names the call the user made."""
    async with hd.Device("cpu") as dev:
        with pytest.raises(hd.GraphError, match=r"^Device.asarray: unsupported data type "
                                                r"dtype\('int64'\)"):
            await dev.asarray(np.array([1, 2, 3], np.int64))
        with pytest.raises(hd.GraphError, match="^Device.asarray: give layout or strides"):
            await dev.asarray(np.zeros((1, 2, 3, 4), np.float32), layout="NHWC",
                              strides=(24, 1, 8, 2))
        with pytest.raises(hd.GraphError, match="^Device.empty: give layout or strides"):
            dev.empty((1, 2, 3, 4), "float32", layout="NHWC", strides=(24, 1, 8, 2))


@pytest.mark.parametrize("where", ["cpu", "cuda:0"])
def test_copy_from_a_shape_that_does_not_broadcast_is_a_library_error(where, request):
    """A bare NumPy ValueError came out of the assignment before (docstring-audit report);
    a broadcastable shape (a scalar, one row) is still taken."""
    if where != "cpu":
        request.getfixturevalue("fake_cuda")
    with hd.Device(where, streams=1) as dev:
        arr = dev.empty((1, 2, 3, 4), "float32")
        name = "GpuArray" if where != "cpu" else "DeviceArray"
        with pytest.raises(hd.VariantPackError,
                           match=rf"^{name}.copy_from: an array of shape \(2, 3, 5\) does "
                                 r"not broadcast to the dims \(1, 2, 3, 4\)") as e:
            arr.copy_from(np.zeros((2, 3, 5), np.float32))
        assert e.value.code == "INVALID_VARIANT_PACK" and isinstance(e.value, ValueError)
        with pytest.raises(hd.VariantPackError, match="does not broadcast"):
            arr.copy_from(np.zeros((2, 2, 3, 4), np.float32))   # would need to shrink
        arr.copy_from(np.arange(4, dtype=np.float32))
        np.testing.assert_array_equal(arr.to_numpy_sync(),
                                      np.broadcast_to(np.arange(4.0), (1, 2, 3, 4)))
        arr.copy_from(7.0)
        np.testing.assert_array_equal(arr.to_numpy_sync(), np.full((1, 2, 3, 4), 7.0))
        # NumPy's assignment drops extra leading size-1 dims of the source; so do we
        src = np.arange(24, dtype=np.float32).reshape(1, 1, 1, 2, 3, 4)
        arr.copy_from(src)
        np.testing.assert_array_equal(arr.to_numpy_sync(), src.reshape(1, 2, 3, 4))
        with pytest.raises(hd.VariantPackError, match=r"shape \(2, 1, 2, 3, 4\) does not"):
            arr.copy_from(np.zeros((2, 1, 2, 3, 4), np.float32))
