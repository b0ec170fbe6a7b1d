"""The GPU binder (providers/_gpu/_bind.py) without a GPU: what it accepts and refuses.

A fake runtime answers ``pointer_device`` where a test needs an address to be device
memory; the real runtime is asked only where it is loaded.
"""
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._gpu._bind import GpuTarget, make_binder
from hipdnn_async.runtime import _gpu


def _binder(dtype="float32", dims=(2, 3, 4, 5), runtime=None):
    g = hd.Graph(io_data_type=dtype)
    t = g.tensor(dims=dims, name="x")
    return make_binder(t, output=False, target=GpuTarget(0, "cuda:0", runtime or _gpu))


def test_host_arrays_are_refused_by_a_gpu_binder():
    bind = _binder()
    with pytest.raises(hd.VariantPackError, match=r"tensor 'x'.*host ndarray.*dev.asarray"):
        bind(np.zeros((2, 3, 4, 5), np.float32))


class _FakeCai:
    def __init__(self, shape, typestr, strides=None, ptr=0x10000, readonly=False):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "strides": strides,
                                         "data": (ptr, readonly), "version": 3}


@pytest.mark.parametrize("buf, match", [
    (_FakeCai((2, 3, 4, 5), "<f2"), r"needs dtype float32 \(FLOAT\); got typestr '<f2'"),
    (_FakeCai((2, 3, 5, 4), "<f4"), r"needs logical shape \(2, 3, 4, 5\)"),
    (_FakeCai((2, 3, 4, 5), "<f4", strides=(240, 80, 4, 16)), r"strides \(60, 20, 5, 1\)"),
    ("a string", r"takes GpuArrays, objects with __cuda_array_interface__"),
])
def test_cuda_array_interface_checks(buf, match):
    with pytest.raises(hd.VariantPackError, match=match):
        _binder()(buf)


@pytest.mark.skipif(_gpu.loaded() is None, reason="no CUDA runtime library to ask")
def test_a_host_pointer_never_reaches_a_kernel():
    host = np.zeros(120, np.float32)
    with pytest.raises(hd.VariantPackError, match="is not device memory of cuda:0"):
        _binder()(_FakeCai((2, 3, 4, 5), "<f4", ptr=host.ctypes.data))
    with pytest.raises(hd.VariantPackError, match="is not device memory of cuda:0"):
        _binder()(host.ctypes.data)


class _Raises:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("device lost")


@pytest.mark.parametrize("buf", [
    _FakeCai(None, "<f4"), _FakeCai("abcd", "<f4"), _FakeCai((2, 3, 4, 5), "<f4", ptr=1.5),
    _FakeCai((2, 3, 4, -5), "<f4"), _Raises(), _FakeCai((1.5, 3, 4, 5), "<f4"),
])
def test_malformed_cuda_array_interface_is_a_variant_pack_error(buf):
    with pytest.raises(hd.VariantPackError, match="tensor 'x'.*malformed __cuda_array_interface__"):
        _binder()(buf)


def test_missing_cai_keys_are_a_variant_pack_error():
    class NoData:
        __cuda_array_interface__ = {"shape": (2, 3, 4, 5), "typestr": "<f4", "version": 3}
    with pytest.raises(hd.VariantPackError, match="malformed.*KeyError"):
        _binder()(NoData())


def test_masked_cuda_arrays_are_refused():
    buf = _FakeCai((2, 3, 4, 5), "<f4")
    buf.__cuda_array_interface__["mask"] = _FakeCai((2, 3, 4, 5), "|b1")
    with pytest.raises(hd.VariantPackError, match="masked CUDA arrays are not supported"):
        _binder()(buf)
