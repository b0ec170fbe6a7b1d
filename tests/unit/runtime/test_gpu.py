"""runtime._gpu: one Runtime type, a CUDA and a HIP instance with their own constants and
status tables, both loadable in one process. Exercised on small fake runtimes built from
fakes/fake_gpu_runtime.c (the constants' agreement with the vendors' headers is checked by
tests/contract/)."""
import ctypes
import pickle

import numpy as np
import pytest

from hipdnn_async import _errors
from hipdnn_async.runtime import _gpu

CUDA_FAKE = dict(PREFIX="cuda", DEVICES=2, VERSION=13000, PROPS_NAME="_v2", WITH_POOLS=None,
                 MEM_DEVICE=_gpu.CUDA_CONSTANTS["MEMORY_TYPE_DEVICE"][0])
HIP_FAKE = dict(PREFIX="hip", DEVICES=3, VERSION=60443483, PROPS_NAME="R0600",
                ARCH_OFFSET=1160, MEM_DEVICE=_gpu.HIP_CONSTANTS["MEMORY_TYPE_DEVICE"][0])


@pytest.fixture
def cuda_rt(build_fake):
    path = build_fake("fake_gpu_runtime", **CUDA_FAKE)
    rt = _gpu.Runtime("cuda")
    rt.load(path)
    return rt, ctypes.CDLL(path)


@pytest.fixture
def hip_rt(build_fake):
    path = build_fake("fake_gpu_runtime", **HIP_FAKE)
    rt = _gpu.Runtime("hip")
    rt.load(path)
    return rt, ctypes.CDLL(path)


def test_a_cuda_and_a_hip_runtime_coexist_in_one_process(cuda_rt, hip_rt):
    (cuda, _), (hip, _) = cuda_rt, hip_rt
    assert cuda.loaded and hip.loaded and cuda.lib.path != hip.lib.path
    assert (cuda.device_count(), hip.device_count()) == (2, 3)   # each calls its own library
    assert (cuda.version, hip.version) == (13000, 60443483)
    assert cuda.record.name == "cudart" and hip.record.name == "hip"
    assert cuda.lib.looked_up[0] == "cudaGetDeviceCount"
    assert hip.lib.looked_up[0] == "hipGetDeviceCount"
    hip.set_device(2)
    assert (hip.get_device(), cuda.get_device()) == (2, 0)        # separate state


def test_each_runtime_asks_with_its_own_attribute_numbers(cuda_rt, hip_rt):
    (cuda, _), (hip, _) = cuda_rt, hip_rt
    # the fake answers attr * 10 + device: the binding must pass its own table's numbers
    for rt in (cuda, hip):
        major, minor = rt.constants["ATTR_CC_MAJOR"], rt.constants["ATTR_CC_MINOR"]
        assert rt.compute_capability(1) == (major * 10 + 1, minor * 10 + 1)
        assert rt.multiprocessor_count(0) == rt.constants["ATTR_MULTIPROCESSOR_COUNT"] * 10
    assert cuda.ATTR_CC_MAJOR != hip.ATTR_CC_MAJOR       # the two runtimes number differently
    assert "hipDeviceAttributeComputeCapabilityMajor" in hip.constant_sources["ATTR_CC_MAJOR"]
    assert "cudaDevAttrComputeCapabilityMajor" in cuda.constant_sources["ATTR_CC_MAJOR"]


def test_constants_tables_name_header_and_version():
    for table, versions in ((_gpu.CUDA_CONSTANTS, _gpu.CUDA_VERSIONS),
                            (_gpu.HIP_CONSTANTS, _gpu.HIP_VERSIONS)):
        assert set(table) == set(_gpu.CUDA_CONSTANTS)        # the same meanings on both
        for name, (value, cname, header) in table.items():
            assert isinstance(value, int) and header.endswith(".h") and cname[:3] in ("cud", "hip")
        assert versions
    rt = _gpu.Runtime("hip")
    assert rt.constant_sources["MEMCPY_HOST_TO_DEVICE"] == (
        "hipMemcpyHostToDevice, hip/driver_types.h, " + _gpu.HIP_VERSIONS)
    with pytest.raises(AttributeError, match="NO_SUCH_CONSTANT"):
        rt.NO_SUCH_CONSTANT


def test_names_and_architecture(cuda_rt, hip_rt):
    (cuda, _), (hip, _) = cuda_rt, hip_rt
    assert cuda.device_name(1) == "Fake cuda GPU 1"
    assert hip.device_name(2) == "Fake hip GPU 2"
    assert hip.arch_name(0) == "gfx942:sramecc+:xnack-"           # gcnArchName at its offset
    major, minor = cuda.compute_capability(0)
    assert cuda.arch_name(0) == f"sm_{major}{minor}"


def test_rocm5_numbers_memory_types_differently(build_fake):
    # ROCm 5.2: hipMemoryTypeDevice is 1 and the properties call has no R0600 suffix
    path = build_fake("fake_gpu_runtime", PREFIX="hip", VERSION=50203000, PROPS_NAME="",
                      ARCH_OFFSET=396, MEM_DEVICE=_gpu.HIP5_CONSTANTS["MEMORY_TYPE_DEVICE"][0])
    rt = _gpu.Runtime("hip")
    rt.load(path)
    assert rt.MEMORY_TYPE_DEVICE == 1 and rt.MEMORY_TYPE_MANAGED == -1
    assert _gpu.HIP5_VERSIONS in rt.constant_sources["MEMORY_TYPE_DEVICE"]
    assert rt.arch_name(0) == "gfx942:sramecc+:xnack-"
    ptr = rt.malloc(64)
    assert rt.pointer_device(ptr) == 0
    rt.free(ptr)


def test_memory_copies_and_pointer_checks(cuda_rt):
    rt, lib = cuda_rt
    host = np.arange(16, dtype=np.uint8)
    dev = rt.malloc(16)
    assert rt.pointer_device(dev) == rt.get_device() and rt.pointer_device(host.ctypes.data) == -1
    rt.memcpy_async(dev, host.ctypes.data, 16, rt.MEMCPY_HOST_TO_DEVICE, 0)
    assert lib.fake_last_memcpy_kind() == rt.MEMCPY_HOST_TO_DEVICE
    back = np.zeros(16, np.uint8)
    rt.memcpy(back.ctypes.data, dev, 16, rt.MEMCPY_DEVICE_TO_HOST)
    assert lib.fake_last_memcpy_kind() == rt.MEMCPY_DEVICE_TO_HOST
    assert (back == host).all()
    rt.memset_async(dev, 7, 16, 0)
    rt.memcpy(back.ctypes.data, dev, 16, rt.MEMCPY_DEVICE_TO_HOST)
    assert (back == 7).all()
    rt.free(dev, 0, True)
    assert rt.malloc(0) == 0 and rt.free(0) is None


def test_streams_events_and_flags(cuda_rt):
    rt, lib = cuda_rt
    s = rt.stream_create()
    assert lib.fake_last_flags() == rt.STREAM_NON_BLOCKING
    e = rt.event_create()
    assert lib.fake_last_flags() == rt.EVENT_DISABLE_TIMING | rt.EVENT_BLOCKING_SYNC
    rt.event_record(e, s)
    assert rt.event_query(e) is False          # the fake answers NotReady once
    assert rt.event_query(e) is True
    rt.event_synchronize(e)
    rt.stream_wait_event(s, e)
    rt.stream_synchronize(s)
    assert rt.stream_query(s) is True
    assert rt.stream_priority_range() == (0, -5)
    p = rt.stream_create_with_priority(-5)
    assert lib.fake_last_flags() == rt.STREAM_NON_BLOCKING + 5000
    for h in (s, p):
        rt.stream_destroy(h)
    rt.event_destroy(e)
    rt.set_device(0)
    assert rt.mem_get_info() == (1000, 4096)
    assert rt.total_memory(1) == 8192 and rt.get_device() == 0   # current device restored


@pytest.mark.parametrize("kind, status, cls, name", [
    ("cuda", 801, _errors.GpuNotSupportedError, "cudaErrorNotSupported"),
    ("cuda", 100, _errors.GpuDeviceError, "cudaErrorNoDevice"),
    ("cuda", 2, _errors.GpuError, "cudaErrorMemoryAllocation"),
    ("hip", 2, _errors.GpuError, "hipErrorOutOfMemory"),
    ("hip", 801, _errors.GpuNotSupportedError, "hipErrorNotSupported"),
    ("hip", 4242, _errors.GpuError, "fakeError4242"),     # not in the table: the runtime's name
])
def test_a_status_becomes_the_type_of_the_runtimes_table(request, kind, status, cls, name):
    rt, lib = request.getfixturevalue(f"{kind}_rt")
    s = rt.stream_create()
    lib.fake_next_status(status)
    with pytest.raises(_errors.GpuError) as info:
        rt.stream_destroy(s)
    err = info.value
    assert type(err) is cls and isinstance(err, _errors.ExecutionError)
    assert (err.status, err.status_name, err.call, err.library) == (
        status, name, f"{kind}StreamDestroy", rt.lib.path)
    assert err.vendor_message == "fake error string"
    assert str(err) == f"{kind}StreamDestroy failed: {name} ({status}): fake error string"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.status == status and back.call == err.call


def test_an_invalid_device_is_a_device_error(hip_rt):
    rt, _ = hip_rt
    with pytest.raises(_errors.GpuDeviceError, match=r"hipSetDevice failed: hipErrorInvalidDevice"):
        rt.set_device(7)


def test_a_missing_symbol_raises_when_called_not_at_load(hip_rt):
    rt, _ = hip_rt                          # built without the stream-ordered pool calls
    assert "hipMallocAsync" in rt.lib.missing
    assert rt.memory_pools_supported(0) is False and rt.pool_keep_memory(0) is False
    with pytest.raises(_errors.LibraryError) as info:
        rt.malloc_async(64, 0)
    assert str(info.value) == f"hipMallocAsync is not exported by {rt.lib.path}"
    assert isinstance(info.value, _errors.DeviceError) and info.value.call == "hipMallocAsync"
    ptr = rt.malloc(64, 0, True)           # pooled falls back to hipMalloc
    assert rt.pointer_device(ptr) == rt.get_device()
    rt.free(ptr, 0, True)
    with pytest.raises(_errors.LibraryError, match="hipHostMalloc is not exported"):
        rt.host_alloc(16)


def test_an_unloaded_runtime_says_so():
    rt = _gpu.Runtime("hip")
    with pytest.raises(_errors.LibraryError, match="hipStreamCreateWithFlags: the HIP runtime "
                                                   "library is not loaded"):
        rt.stream_create()
    assert rt.pointer_device(0x1000) == -2      # cannot tell


def test_a_library_that_is_not_a_runtime_is_refused(build_fake):
    rt = _gpu.Runtime("cuda")
    hip_path = build_fake("fake_gpu_runtime", **HIP_FAKE)      # hip* symbols only
    with pytest.raises(_errors.LibraryError, match="is not a CUDA runtime library: it lacks "
                                                   "cudaGetDeviceCount"):
        rt.load(hip_path)
    assert not rt.loaded


def test_module_instances():
    assert _gpu.instance("cuda").kind == "cuda" and _gpu.instance("hip").kind == "hip"
    for kind in ("cuda", "hip"):
        rt = _gpu.runtime(kind)
        assert rt is None or (rt is _gpu.instance(kind) and rt.loaded)
    with pytest.raises(ValueError, match="'cuda' or 'hip'"):
        _gpu.instance("metal")
    with pytest.raises(ValueError, match="'cuda' or 'hip'"):
        _gpu.Runtime("metal")
