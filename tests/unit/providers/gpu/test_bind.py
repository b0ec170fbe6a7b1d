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
    return make_binder(t, output=False, target=GpuTarget(0, "cuda:0", runtime or _gpu.instance("cuda")))


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


@pytest.mark.skipif(_gpu.runtime("cuda") is None, reason="no CUDA runtime library to ask")
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


# ---------------------------------------------------------------- layout from strides alone
def _tensor(dims, layout, dtype="float32"):
    g = hd.Graph(io_data_type=dtype)
    return g.tensor(dims=dims, layout=layout, name="x")


def _gpu_binder(tensor, fake, output=False):
    return make_binder(tensor, output=output, target=GpuTarget(0, "cuda:0", fake))


def _buffer_cases(dims, strides):
    """(shape, element strides or None) of buffers a user might pass for a tensor."""
    from hipdnn_async._layout import element_extent, packed_strides, stride_order
    order = stride_order(dims, strides)
    physical = tuple(dims[a] for a in order)
    c_of = lambda shape: packed_strides(shape, tuple(range(len(shape))))  # noqa: E731
    extent = element_extent(dims, strides)
    return [
        (dims, strides),                         # logical, the tensor's strides
        (dims, None),                            # logical shape, C-contiguous
        (dims, c_of(dims)),                      # the same, strides given
        (physical, None),                        # memory-order shape, C-contiguous
        (physical, tuple(2 * s for s in c_of(physical))),   # memory order, gaps
        ((extent,), None),                       # flat buffer
        ((extent - 1,), None) if extent > 1 else ((0,), None),  # too short
        (tuple(reversed(dims)), None),           # nonsense shape
    ]


CASE_DIMS = [(1, 2, 2, 2), (2, 3, 4, 5), (1, 3, 3, 3), (2, 1, 3, 3), (2, 4, 1, 1), (2, 3, 3, 3)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dims", CASE_DIMS, ids=str)
def test_the_gpu_binder_decides_as_the_cpu_binder(fake_cuda, dims, layout):
    # The CPU binder is the reference (tests/unit: its own tests); a GPU binder must accept
    # exactly what it accepts, at the same base address, for any (shape, strides).
    from numpy.lib.stride_tricks import as_strided

    from hipdnn_async.providers.cpu._bind import logical_view
    t = _tensor(dims, layout)
    bind = _gpu_binder(t, fake_cuda.gpu)
    base = fake_cuda.gpu.malloc(4 * 4096)
    host = np.zeros(4096, np.float32)
    for shape, strides in _buffer_cases(tuple(t.dims), tuple(t.strides)):
        byte_strides = None if strides is None else tuple(4 * s for s in strides)
        arr = (np.ndarray(shape, np.float32, host.data) if strides is None else
               as_strided(host, shape, byte_strides))
        try:
            view = logical_view(t, arr, output=False)
            cpu = view.__array_interface__["data"][0] - host.ctypes.data
        except hd.VariantPackError:
            cpu = None
        try:
            gpu = bind(_FakeCai(shape, "<f4", byte_strides, ptr=base)) - base
        except hd.VariantPackError as exc:
            gpu, why = None, str(exc)
        assert gpu == cpu, (shape, strides, cpu, gpu if gpu is not None else why)
        if cpu is not None:  # the CPU reads the buffer with the tensor's own strides
            want = tuple(4 * s for d, s in zip(t.dims, t.strides) if d > 1)
            assert tuple(s for d, s in zip(t.dims, view.strides) if d > 1) == want


def test_an_ambiguous_c_contiguous_array_is_refused_with_the_way_to_pass_it(fake_cuda):
    # (1, 2, 2, 2) C-contiguous reads as NCHW-logical data and as NHWC memory order; the
    # old binder took it as NHWC memory, a silent wrong answer for NCHW data
    t = _tensor((1, 2, 2, 2), "NHWC")
    ptr = fake_cuda.gpu.malloc(64)
    with pytest.raises(hd.VariantPackError, match=r"ambiguous.*strides \(8, 1, 4, 2\).*"
                                                  r"transpose\(0, 3, 1, 2\)"):
        _gpu_binder(t, fake_cuda.gpu)(_FakeCai((1, 2, 2, 2), "<f4", ptr=ptr))
    # the logical view (NHWC strides) binds
    assert _gpu_binder(t, fake_cuda.gpu)(_FakeCai((1, 2, 2, 2), "<f4", (32, 4, 16, 8),
                                                  ptr=ptr)) == ptr


def test_a_gpu_array_is_checked_by_the_same_rules(fake_cuda):
    with hd.Device("cuda:0", streams=1) as dev:
        t = _tensor((1, 2, 2, 2), "NHWC")
        bind = _gpu_binder(t, fake_cuda.gpu)
        with pytest.raises(hd.VariantPackError, match="ambiguous"):
            bind(dev.empty((1, 2, 2, 2), "float32"))          # NCHW-packed: ambiguous
        good = dev.empty((1, 2, 2, 2), "float32", layout="NHWC")
        assert bind(good) == good.ptr
        memory_order = dev.empty((2, 4, 4, 3), "float32")     # (N, H, W, C), C-contiguous
        assert _gpu_binder(_tensor((2, 3, 4, 4), "NHWC"), fake_cuda.gpu)(memory_order) \
            == memory_order.ptr


def test_a_gpu_array_of_another_device_is_refused_whatever_its_layout(fake_cuda):
    with hd.Device("cuda:0", streams=1) as dev:
        arr = dev.empty((2, 4, 4, 3), "float32")
        arr.device = "cuda:1"    # as an array of the second GPU would say
        for layout in ("NCHW", "NHWC"):
            with pytest.raises(hd.VariantPackError, match="lives on 'cuda:1'"):
                _gpu_binder(_tensor((2, 3, 4, 4), layout), fake_cuda.gpu)(arr)


# ---------------------------------------------------------------- DLPack producers
class _DLPackProducer:
    """A producer whose __dlpack__ returns a real 'dltensor' capsule (dlpack.h layout)."""

    def __init__(self, shape, strides=None, *, code=2, bits=32, device=(2, 0), ptr=0x10000,
                 byte_offset=0):
        import ctypes

        from hipdnn_async.providers._gpu import _dlpack
        n = len(shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * max(n, 1))(*strides)
        m = _dlpack._DLManagedTensor()
        m.dl_tensor.data = ptr
        m.dl_tensor.device.device_type, m.dl_tensor.device.device_id = device
        m.dl_tensor.ndim = n
        m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits, m.dl_tensor.dtype.lanes = code, bits, 1
        m.dl_tensor.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        if self._strides is not None:
            m.dl_tensor.strides = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        m.dl_tensor.byte_offset = byte_offset
        self._managed = m
        self._device = device
        self._name = ctypes.create_string_buffer(b"dltensor")

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        import ctypes
        new = ctypes.pythonapi["PyCapsule_New"]
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p,
                                                        ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), ctypes.addressof(self._name), None)


def test_a_dlpack_device_tensor_binds_to_its_data_pointer(fake_cuda):
    ptr = fake_cuda.gpu.malloc(4 * 120 + 64)
    t = _tensor((2, 3, 4, 5), "NHWC")
    nhwc = (60, 1, 15, 3)            # DLPack strides are in elements
    bind = _gpu_binder(t, fake_cuda.gpu)
    assert bind(_DLPackProducer((2, 3, 4, 5), nhwc, ptr=ptr, byte_offset=64)) == ptr + 64
    assert bind(_DLPackProducer((2, 4, 5, 3), None, ptr=ptr)) == ptr   # memory order


@pytest.mark.parametrize("producer, match", [
    (lambda p: _DLPackProducer((2, 3, 4, 5), device=(1, 0), ptr=p),
     r"host _DLPackProducer \(DLPack device CPU\).*dev.asarray"),
    (lambda p: _DLPackProducer((2, 3, 4, 5), device=(2, 1), ptr=p),
     r"lives on CUDA device 1; this plan runs on 'cuda:0'"),
    (lambda p: _DLPackProducer((2, 3, 4, 5), device=(10, 0), ptr=p), r"lives on ROCm device 0"),
    (lambda p: _DLPackProducer((2, 3, 4, 5), bits=16, ptr=p),
     r"needs dtype float32 \(FLOAT\); got float16"),
    (lambda p: _DLPackProducer((2, 3, 4, 5), code=0, bits=32, ptr=p), r"got DLPack dtype code 0"),
    (lambda p: _DLPackProducer((2, 3, 4, 5), (60, 20, 1, 4), ptr=p),
     r"is NCHW \(strides \(60, 20, 5, 1\) in elements\)"),
    (lambda p: _DLPackProducer((2, 3, 4, 5), ptr=0xDEAD0000),
     r"not device memory of cuda:0"),
])
def test_dlpack_producers_are_checked(fake_cuda, producer, match):
    ptr = fake_cuda.gpu.malloc(4 * 120)
    with pytest.raises(hd.VariantPackError, match=match):
        _gpu_binder(_tensor((2, 3, 4, 5), "NCHW"), fake_cuda.gpu)(producer(ptr))


@pytest.mark.parametrize("exc", [KeyError("stream"), AttributeError("no device"),
                                 RuntimeError("device lost"), BufferError("exported")])
def test_a_failing_dlpack_producer_is_a_variant_pack_error(fake_cuda, exc):
    class Broken(_DLPackProducer):
        def __dlpack__(self, stream=None):
            raise exc
    with pytest.raises(hd.VariantPackError, match=f"cannot read the DLPack export of Broken: "
                                                  f"{type(exc).__name__}"):
        _gpu_binder(_tensor((2, 3, 4, 5), "NCHW"), fake_cuda.gpu)(Broken((2, 3, 4, 5)))


def test_a_capsule_that_is_not_a_dltensor_is_refused(fake_cuda):
    class Used(_DLPackProducer):
        def __dlpack__(self, stream=None):
            import ctypes
            self._name = ctypes.create_string_buffer(b"used_dltensor")
            return super().__dlpack__()
    with pytest.raises(hd.VariantPackError, match="no unused 'dltensor' capsule"):
        _gpu_binder(_tensor((2, 3, 4, 5), "NCHW"), fake_cuda.gpu)(Used((2, 3, 4, 5)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_read_dlpack_agrees_with_numpy_own_export(dtype):
    # NumPy is a real producer: its capsule read through our struct layout must give
    # NumPy's own shape, element strides, dtype and address
    from hipdnn_async.providers._gpu._dlpack import KDL_CPU, read_dlpack
    base = np.arange(2 * 3 * 4 * 5, dtype=dtype).reshape(2, 4, 5, 3)
    view = base.transpose(0, 3, 1, 2)[:, :, 1:, :]       # NHWC-strided, offset
    info = read_dlpack(view)
    assert info.shape == view.shape and info.dtype == dtype
    assert info.strides == tuple(s // view.itemsize for s in view.strides)
    assert info.ptr == view.__array_interface__["data"][0]
    assert (info.device_type, info.device_id, info.itemsize) == (KDL_CPU, 0, view.itemsize)


def test_a_host_dlpack_object_is_refused_before_it_is_exported(fake_cuda):
    class TorchCpuLike:                  # __dlpack__ but no __array_interface__
        exported = False

        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None):
            TorchCpuLike.exported = True
            raise AssertionError("a host tensor needs no export")
    with pytest.raises(hd.VariantPackError, match=r"host TorchCpuLike.*dev.asarray"):
        _gpu_binder(_tensor((2, 3, 4, 5), "NCHW"), fake_cuda.gpu)(TorchCpuLike())
    assert not TorchCpuLike.exported


def test_a_torch_tensor_with_its_neg_bit_set_is_refused_before_export():
    """The GPU binder reads __cuda_array_interface__ / DLPack, neither of which carries
    torch's lazy negation: such a tensor is refused by name, as on the CPU."""
    from _peers import peer
    torch = peer("torch", "PyTorch makes the lazily negated tensor")
    with pytest.raises(hd.VariantPackError, match=r"tensor 'x'.*neg bit.*t\.resolve_neg\(\)"):
        _binder()(torch.zeros(2, 3, 4, 5)._neg_view())
