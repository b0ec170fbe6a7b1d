# cython: language_level=3, boundscheck=False, wraparound=False
"""GPU runtime bindings (``hipdnn_async.runtime._gpu``): the CUDA runtime and the HIP
runtime, loaded at run time with ``dlopen``; no SDK header is needed to build this module.

Wrapping contract
-----------------
- One implementation, ``Runtime``, and one instance per runtime: ``instance("cuda")``
  (``libcudart``, symbols ``cuda<Name>``) and ``instance("hip")`` (``libamdhip64``,
  symbols ``hip<Name>``). Each fills its own table of named function pointers
  (``_gpu_api.RuntimeFns``) through ``_loader.LibraryTable``, so both can be loaded in one
  process. ``runtime(kind)`` returns an instance once it is loaded, else None.
- Each instance has its own constants table (``CUDA_CONSTANTS`` / ``HIP_CONSTANTS``:
  device attributes, memcpy kinds, error codes, stream and event flags, pointer memory
  types), each value with the C name, header and version it was read from; HIP's values
  are selected by the loaded runtime's version (ROCm 5 numbers pointer memory types
  differently). The constants are attributes of the instance (``rt.MEMCPY_HOST_TO_DEVICE``)
  and ``rt.constants``. Callers ask by meaning (``compute_capability``, ``arch_name``,
  ``multiprocessor_count``, ``memory_pools_supported``, ``total_memory``), never by enum.
- Covered: devices, device properties, stream-ordered pool allocation with a plain
  ``Malloc`` fallback, pinned host memory, async copies and memsets, peer access and peer
  copies between two devices, streams (flags, priorities), events, pointer attributes,
  versions, stream capture and graphs (begin / end capture, ``end_capture`` that leaves
  no capture open when the end fails, instantiate, launch, in-place update, destroy;
  HIP's ``GraphExecUpdate`` has the older four-argument form, a named branch). Where the
  runtimes' exports differ the names are listed per runtime (``GetDeviceProperties_v2`` / ``GetDevicePropertiesR0600``,
  ``HostAlloc`` / ``HostMalloc``, ``FreeHost`` / ``HostFree``). Handles (streams, events,
  pools) and pointers travel as Python ints. Method names are the C names without prefix,
  in snake_case (CuPy's convention).
- Errors: a non-zero status raises the type the runtime's status table gives
  (``CUDA_STATUS`` / ``HIP_STATUS``: ``GpuNotSupportedError``, ``GpuDeviceError``, else
  ``GpuError``; all ``GpuError``), with ``.status``, ``.status_name``, ``.call``,
  ``.library`` and the runtime's own error string; a symbol the library lacks raises
  ``LibraryError`` (a ``DeviceError``) naming it when called, not at load. Blocking calls
  (synchronize, copies, allocation, frees) release the GIL; ``_gpu.pxd`` exposes the hot
  calls as ``nogil`` methods for Cython callers.
"""
from libc.stdint cimport uintptr_t
from libc.string cimport memset

from hipdnn_async import _errors
from hipdnn_async._errors import GpuError

from ._gpu_api cimport (GraphExecUpdateResultInfo, PointerAttributes, RuntimeConstants,
                        RuntimeFns, CudaOnlyFns, HipOnlyFns, f_begin_capture, f_create_with_flags, f_end_capture,
                        f_graph_exec_update, f_graph_exec_update_hip, f_graph_instantiate,
                        f_graph_launch, f_is_capturing,
                        f_create_with_priority, f_default_mem_pool, f_device_attribute, f_device_properties,
                        f_error_text, f_event_elapsed, f_event_record, f_free_async,
                        f_handle, f_host_alloc, f_int_in, f_int_out, f_malloc,
                        f_malloc_async, f_mem_get_info, f_mem_pool_set, f_memcpy,
                        f_memcpy_async, f_memset_async, f_pointer_attributes,
                        f_priority_range, f_stream_wait_event, f_can_access_peer,
                        f_enable_peer_access, f_memcpy_peer_async, f_status)
from ._loader cimport Library, LibraryTable

__all__ = ["Runtime", "ExecCounter", "runtime", "instance", "GpuError", "CUDA_CONSTANTS", "HIP_CONSTANTS",
           "HIP5_CONSTANTS", "CUDA_STATUS", "HIP_STATUS"]

# ------------------------------------------------------------------ constants tables
# name -> (value, C name, header); ``*_VERSIONS`` names the header versions each table is
# compile-checked against by tests/contract (a test keeps them equal to the headers it
# downloads): the NVIDIA wheel nvidia-cuda-runtime 13.0 (13.0.96) for CUDA, Debian's
# libamdhip64-dev 6.4.3 and 7.2.4 for HIP (identical values). ROCm 5.2 differs only in
# the memory types (HIP5_CONSTANTS), compile-checked (over HIP_CONSTANTS, with the status
# table and gcnArchName's offset) against Debian 12's libamdhip64-dev 5.2.3 headers
# (tests/contract/hip/test_hip5_abi.py).
CUDA_VERSIONS = "CUDA 13.0"
CUDA_CONSTANTS = {
    "STREAM_DEFAULT": (0x0, "cudaStreamDefault", "driver_types.h"),
    "STREAM_NON_BLOCKING": (0x1, "cudaStreamNonBlocking", "driver_types.h"),
    "EVENT_DEFAULT": (0x0, "cudaEventDefault", "driver_types.h"),
    "EVENT_BLOCKING_SYNC": (0x1, "cudaEventBlockingSync", "driver_types.h"),
    "EVENT_DISABLE_TIMING": (0x2, "cudaEventDisableTiming", "driver_types.h"),
    "MEMCPY_HOST_TO_HOST": (0, "cudaMemcpyHostToHost", "driver_types.h"),
    "MEMCPY_HOST_TO_DEVICE": (1, "cudaMemcpyHostToDevice", "driver_types.h"),
    "MEMCPY_DEVICE_TO_HOST": (2, "cudaMemcpyDeviceToHost", "driver_types.h"),
    "MEMCPY_DEVICE_TO_DEVICE": (3, "cudaMemcpyDeviceToDevice", "driver_types.h"),
    "MEMCPY_DEFAULT": (4, "cudaMemcpyDefault", "driver_types.h"),
    "ERROR_NOT_READY": (600, "cudaErrorNotReady", "driver_types.h"),
    "ERROR_NOT_SUPPORTED": (801, "cudaErrorNotSupported", "driver_types.h"),
    "ATTR_CC_MAJOR": (75, "cudaDevAttrComputeCapabilityMajor", "driver_types.h"),
    "ATTR_CC_MINOR": (76, "cudaDevAttrComputeCapabilityMinor", "driver_types.h"),
    "ATTR_MULTIPROCESSOR_COUNT": (16, "cudaDevAttrMultiProcessorCount", "driver_types.h"),
    "ATTR_MEMORY_POOLS_SUPPORTED": (115, "cudaDevAttrMemoryPoolsSupported", "driver_types.h"),
    "POOL_ATTR_RELEASE_THRESHOLD": (4, "cudaMemPoolAttrReleaseThreshold", "driver_types.h"),
    "MEMORY_TYPE_UNREGISTERED": (0, "cudaMemoryTypeUnregistered", "driver_types.h"),
    "MEMORY_TYPE_HOST": (1, "cudaMemoryTypeHost", "driver_types.h"),
    "MEMORY_TYPE_DEVICE": (2, "cudaMemoryTypeDevice", "driver_types.h"),
    "MEMORY_TYPE_MANAGED": (3, "cudaMemoryTypeManaged", "driver_types.h"),
    "HOST_ALLOC_DEFAULT": (0x0, "cudaHostAllocDefault", "driver_types.h"),
    "STREAM_CAPTURE_MODE_GLOBAL": (0, "cudaStreamCaptureModeGlobal", "driver_types.h"),
    "STREAM_CAPTURE_MODE_THREAD_LOCAL": (1, "cudaStreamCaptureModeThreadLocal",
                                         "driver_types.h"),
    "STREAM_CAPTURE_MODE_RELAXED": (2, "cudaStreamCaptureModeRelaxed", "driver_types.h"),
    "STREAM_CAPTURE_STATUS_NONE": (0, "cudaStreamCaptureStatusNone", "driver_types.h"),
    "STREAM_CAPTURE_STATUS_ACTIVE": (1, "cudaStreamCaptureStatusActive", "driver_types.h"),
    "STREAM_CAPTURE_STATUS_INVALIDATED": (2, "cudaStreamCaptureStatusInvalidated",
                                          "driver_types.h"),
    "GRAPH_EXEC_UPDATE_SUCCESS": (0x0, "cudaGraphExecUpdateSuccess", "driver_types.h"),
    "ERROR_STREAM_CAPTURE_UNSUPPORTED": (900, "cudaErrorStreamCaptureUnsupported",
                                         "driver_types.h"),
    "ERROR_STREAM_CAPTURE_INVALIDATED": (901, "cudaErrorStreamCaptureInvalidated",
                                         "driver_types.h"),
    "ERROR_GRAPH_EXEC_UPDATE_FAILURE": (910, "cudaErrorGraphExecUpdateFailure", "driver_types.h"),
    "ERROR_PEER_ACCESS_ALREADY_ENABLED": (704, "cudaErrorPeerAccessAlreadyEnabled",
                                          "driver_types.h"),
}
HIP_VERSIONS = "ROCm 6.4.3, 7.2.4"
HIP_CONSTANTS = {
    "STREAM_DEFAULT": (0x0, "hipStreamDefault", "hip/hip_runtime_api.h"),
    "STREAM_NON_BLOCKING": (0x1, "hipStreamNonBlocking", "hip/hip_runtime_api.h"),
    "EVENT_DEFAULT": (0x0, "hipEventDefault", "hip/hip_runtime_api.h"),
    "EVENT_BLOCKING_SYNC": (0x1, "hipEventBlockingSync", "hip/hip_runtime_api.h"),
    "EVENT_DISABLE_TIMING": (0x2, "hipEventDisableTiming", "hip/hip_runtime_api.h"),
    "MEMCPY_HOST_TO_HOST": (0, "hipMemcpyHostToHost", "hip/driver_types.h"),
    "MEMCPY_HOST_TO_DEVICE": (1, "hipMemcpyHostToDevice", "hip/driver_types.h"),
    "MEMCPY_DEVICE_TO_HOST": (2, "hipMemcpyDeviceToHost", "hip/driver_types.h"),
    "MEMCPY_DEVICE_TO_DEVICE": (3, "hipMemcpyDeviceToDevice", "hip/driver_types.h"),
    "MEMCPY_DEFAULT": (4, "hipMemcpyDefault", "hip/driver_types.h"),
    "ERROR_NOT_READY": (600, "hipErrorNotReady", "hip/hip_runtime_api.h"),
    "ERROR_NOT_SUPPORTED": (801, "hipErrorNotSupported", "hip/hip_runtime_api.h"),
    # not CUDA's 75/76/16/115: hipDeviceAttribute_t is numbered on its own
    "ATTR_CC_MAJOR": (23, "hipDeviceAttributeComputeCapabilityMajor", "hip/hip_runtime_api.h"),
    "ATTR_CC_MINOR": (61, "hipDeviceAttributeComputeCapabilityMinor", "hip/hip_runtime_api.h"),
    "ATTR_MULTIPROCESSOR_COUNT": (63, "hipDeviceAttributeMultiprocessorCount",
                                  "hip/hip_runtime_api.h"),
    "ATTR_MEMORY_POOLS_SUPPORTED": (88, "hipDeviceAttributeMemoryPoolsSupported",
                                    "hip/hip_runtime_api.h"),
    "POOL_ATTR_RELEASE_THRESHOLD": (4, "hipMemPoolAttrReleaseThreshold", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_UNREGISTERED": (0, "hipMemoryTypeUnregistered", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_HOST": (1, "hipMemoryTypeHost", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_DEVICE": (2, "hipMemoryTypeDevice", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_MANAGED": (3, "hipMemoryTypeManaged", "hip/hip_runtime_api.h"),
    "HOST_ALLOC_DEFAULT": (0x0, "hipHostMallocDefault", "hip/hip_runtime_api.h"),
    "STREAM_CAPTURE_MODE_GLOBAL": (0, "hipStreamCaptureModeGlobal", "hip/hip_runtime_api.h"),
    "STREAM_CAPTURE_MODE_THREAD_LOCAL": (1, "hipStreamCaptureModeThreadLocal",
                                         "hip/hip_runtime_api.h"),
    "STREAM_CAPTURE_MODE_RELAXED": (2, "hipStreamCaptureModeRelaxed", "hip/hip_runtime_api.h"),
    "STREAM_CAPTURE_STATUS_NONE": (0, "hipStreamCaptureStatusNone", "hip/hip_runtime_api.h"),
    "STREAM_CAPTURE_STATUS_ACTIVE": (1, "hipStreamCaptureStatusActive",
                                     "hip/hip_runtime_api.h"),
    "STREAM_CAPTURE_STATUS_INVALIDATED": (2, "hipStreamCaptureStatusInvalidated",
                                          "hip/hip_runtime_api.h"),
    "GRAPH_EXEC_UPDATE_SUCCESS": (0x0, "hipGraphExecUpdateSuccess", "hip/hip_runtime_api.h"),
    "ERROR_STREAM_CAPTURE_UNSUPPORTED": (900, "hipErrorStreamCaptureUnsupported",
                                         "hip/hip_runtime_api.h"),
    "ERROR_STREAM_CAPTURE_INVALIDATED": (901, "hipErrorStreamCaptureInvalidated",
                                         "hip/hip_runtime_api.h"),
    "ERROR_GRAPH_EXEC_UPDATE_FAILURE": (910, "hipErrorGraphExecUpdateFailure",
                                        "hip/hip_runtime_api.h"),
    "ERROR_PEER_ACCESS_ALREADY_ENABLED": (704, "hipErrorPeerAccessAlreadyEnabled",
                                          "hip/hip_runtime_api.h"),
}
# What ROCm 5 (hipRuntimeGetVersion < 60000000) numbers differently: hipMemoryType was
# {Host, Device, Array, Unified}; it had no unregistered or managed type (-1: none).
HIP5_VERSIONS = "ROCm 5.2.3"
HIP5_CONSTANTS = {
    "MEMORY_TYPE_UNREGISTERED": (-1, "(none in ROCm 5)", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_HOST": (0, "hipMemoryTypeHost", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_DEVICE": (1, "hipMemoryTypeDevice", "hip/hip_runtime_api.h"),
    "MEMORY_TYPE_MANAGED": (-1, "(none in ROCm 5: hipPointerAttribute_t.isManaged)",
                            "hip/hip_runtime_api.h"),
}

# ------------------------------------------------------------------ status tables
# value -> (name, error type); other values are GpuError named by GetErrorName. Same
# headers and versions as the constants.
CUDA_STATUS = {
    0: ("cudaSuccess", None),
    1: ("cudaErrorInvalidValue", GpuError),
    2: ("cudaErrorMemoryAllocation", GpuError),
    3: ("cudaErrorInitializationError", _errors.GpuDeviceError),
    21: ("cudaErrorInvalidMemcpyDirection", GpuError),
    34: ("cudaErrorStubLibrary", _errors.GpuDeviceError),
    35: ("cudaErrorInsufficientDriver", _errors.GpuDeviceError),
    36: ("cudaErrorCallRequiresNewerDriver", _errors.GpuDeviceError),
    46: ("cudaErrorDevicesUnavailable", _errors.GpuDeviceError),
    100: ("cudaErrorNoDevice", _errors.GpuDeviceError),
    101: ("cudaErrorInvalidDevice", _errors.GpuDeviceError),
    209: ("cudaErrorNoKernelImageForDevice", _errors.GpuDeviceError),
    400: ("cudaErrorInvalidResourceHandle", GpuError),
    600: ("cudaErrorNotReady", GpuError),
    700: ("cudaErrorIllegalAddress", GpuError),
    719: ("cudaErrorLaunchFailure", GpuError),
    801: ("cudaErrorNotSupported", _errors.GpuNotSupportedError),
    900: ("cudaErrorStreamCaptureUnsupported", GpuError),
    901: ("cudaErrorStreamCaptureInvalidated", GpuError),
    910: ("cudaErrorGraphExecUpdateFailure", GpuError),
    803: ("cudaErrorSystemDriverMismatch", _errors.GpuDeviceError),
    804: ("cudaErrorCompatNotSupportedOnDevice", _errors.GpuDeviceError),
}
HIP_STATUS = {
    0: ("hipSuccess", None),
    1: ("hipErrorInvalidValue", GpuError),
    2: ("hipErrorOutOfMemory", GpuError),
    3: ("hipErrorNotInitialized", _errors.GpuDeviceError),
    21: ("hipErrorInvalidMemcpyDirection", GpuError),
    35: ("hipErrorInsufficientDriver", _errors.GpuDeviceError),
    100: ("hipErrorNoDevice", _errors.GpuDeviceError),
    101: ("hipErrorInvalidDevice", _errors.GpuDeviceError),
    209: ("hipErrorNoBinaryForGpu", _errors.GpuDeviceError),
    400: ("hipErrorInvalidHandle", GpuError),
    600: ("hipErrorNotReady", GpuError),
    700: ("hipErrorIllegalAddress", GpuError),
    719: ("hipErrorLaunchFailure", GpuError),
    801: ("hipErrorNotSupported", _errors.GpuNotSupportedError),
    900: ("hipErrorStreamCaptureUnsupported", GpuError),
    901: ("hipErrorStreamCaptureInvalidated", GpuError),
    910: ("hipErrorGraphExecUpdateFailure", GpuError),
}

# Every runtime we support exports these; a library lacking one is refused at load.
_REQUIRED = ("GetDeviceCount", "SetDevice", "GetErrorString", "RuntimeGetVersion",
             "StreamCreateWithFlags", "StreamSynchronize", "EventCreateWithFlags",
             "EventRecord", "EventSynchronize", "Malloc", "Free", "MemcpyAsync")
# Exported names that differ between the runtimes (first found wins).
_ALIASES = {
    "cuda": {"GetDeviceProperties": ("GetDeviceProperties_v2", "GetDeviceProperties"),
             "HostAlloc": ("HostAlloc",), "FreeHost": ("FreeHost",)},
    "hip": {"GetDeviceProperties": ("GetDevicePropertiesR0600", "GetDeviceProperties"),
            "HostAlloc": ("HostMalloc", "HostAlloc"), "FreeHost": ("HostFree", "FreeHost")},
}
# offsetof(hipDeviceProp_t, gcnArchName): 1160 in hipDeviceProp_tR0600 (ROCm 6.4.3, 7.2.4;
# compile-checked), 396 in the struct of the unsuffixed hipGetDeviceProperties (ROCm 5.2.3;
# compile-checked); char[256] in both.
_GCN_ARCH_OFFSET = {"GetDevicePropertiesR0600": 1160, "GetDeviceProperties": 396}
cdef enum:
    PROPS_BYTES = 8192   # larger than cudaDeviceProp (1032) and hipDeviceProp_tR0600 (1472)
    NAME_BYTES = 256     # the device name: char[256] at offset 0 of both structs
_PROPS_BYTES, _NAME_BYTES = PROPS_BYTES, NAME_BYTES   # for the contract checks of both


cdef class Runtime(LibraryTable):
    """One GPU runtime (CUDA or HIP): its symbol table, constants and status table.

    Parameters
    ----------
    kind : str
        ``"cuda"`` (library ``libcudart``) or ``"hip"`` (``libamdhip64``).

    Notes
    -----
    The module holds one instance per kind (``instance``); a separate instance (tests,
    a shim library) loads its own library and shares nothing with them.
    """

    def __init__(self, str kind):
        if kind == "cuda":
            LibraryTable.__init__(self, "cudart", "cuda", "CUDA runtime", _REQUIRED)
            self.statuses = CUDA_STATUS
        elif kind == "hip":
            LibraryTable.__init__(self, "hip", "hip", "HIP runtime", _REQUIRED)
            self.statuses = HIP_STATUS
        else:
            raise ValueError(f"Runtime: kind must be 'cuda' or 'hip'; got {kind!r}")
        self.kind = kind
        self._props_arch_offset = -1
        self._runtime_version = 0
        self._select_constants(0)

    cdef int _select_constants(self, int version) except -1:
        cdef RuntimeConstants* c = &self.c
        if self.kind == "cuda":
            table = [(CUDA_CONSTANTS, CUDA_VERSIONS)]
        else:
            table = [(HIP_CONSTANTS, HIP_VERSIONS)]
            # HIP_VERSION = major * 10000000 + minor * 100000 + patch (hip_version.h)
            if 0 < version < 60000000:
                table.append((HIP5_CONSTANTS, HIP5_VERSIONS))
        values, sources = {}, {}
        for entries, versions in table:
            for name, (value, cname, header) in entries.items():
                values[name] = value
                sources[name] = f"{cname}, {header}, {versions}"
        self.constants, self.constant_sources = values, sources
        c.STREAM_NON_BLOCKING = values["STREAM_NON_BLOCKING"]
        c.EVENT_BLOCKING_SYNC = values["EVENT_BLOCKING_SYNC"]
        c.EVENT_DISABLE_TIMING = values["EVENT_DISABLE_TIMING"]
        c.MEMCPY_HOST_TO_DEVICE = values["MEMCPY_HOST_TO_DEVICE"]
        c.MEMCPY_DEVICE_TO_HOST = values["MEMCPY_DEVICE_TO_HOST"]
        c.MEMCPY_DEVICE_TO_DEVICE = values["MEMCPY_DEVICE_TO_DEVICE"]
        c.ERROR_NOT_READY = values["ERROR_NOT_READY"]
        c.ATTR_CC_MAJOR = values["ATTR_CC_MAJOR"]
        c.ATTR_CC_MINOR = values["ATTR_CC_MINOR"]
        c.ATTR_MULTIPROCESSOR_COUNT = values["ATTR_MULTIPROCESSOR_COUNT"]
        c.ATTR_MEMORY_POOLS_SUPPORTED = values["ATTR_MEMORY_POOLS_SUPPORTED"]
        c.POOL_ATTR_RELEASE_THRESHOLD = values["POOL_ATTR_RELEASE_THRESHOLD"]
        c.MEMORY_TYPE_DEVICE = values["MEMORY_TYPE_DEVICE"]
        c.MEMORY_TYPE_MANAGED = values["MEMORY_TYPE_MANAGED"]
        c.STREAM_CAPTURE_MODE_THREAD_LOCAL = values["STREAM_CAPTURE_MODE_THREAD_LOCAL"]
        c.ERROR_GRAPH_EXEC_UPDATE_FAILURE = values["ERROR_GRAPH_EXEC_UPDATE_FAILURE"]
        c.ERROR_PEER_ACCESS_ALREADY_ENABLED = values["ERROR_PEER_ACCESS_ALREADY_ENABLED"]
        return 0

    def __getattr__(self, str name):
        """Constants by name: ``rt.MEMCPY_HOST_TO_DEVICE``."""
        try:
            return self.constants[name]
        except KeyError:
            raise AttributeError(f"{self.title} has no attribute or constant {name!r}") from None

    # -------------------------------------------------------------- the table
    cdef int _fill(self, Library lib) except -1:
        cdef RuntimeFns* f = &self.f
        cdef int v = 0
        aliases = _ALIASES[self.kind]
        f.GetDeviceCount = <f_int_out>lib.sym("GetDeviceCount")
        f.SetDevice = <f_int_in>lib.sym("SetDevice")
        f.GetDevice = <f_int_out>lib.sym("GetDevice")
        f.GetErrorName = <f_error_text>lib.sym("GetErrorName")
        f.GetErrorString = <f_error_text>lib.sym("GetErrorString")
        f.DeviceGetAttribute = <f_device_attribute>lib.sym("DeviceGetAttribute")
        f.GetDeviceProperties = <f_device_properties>lib.sym_first(aliases["GetDeviceProperties"])
        f.MemGetInfo = <f_mem_get_info>lib.sym("MemGetInfo")
        f.RuntimeGetVersion = <f_int_out>lib.sym("RuntimeGetVersion")
        f.DriverGetVersion = <f_int_out>lib.sym("DriverGetVersion")
        f.DeviceGetStreamPriorityRange = <f_priority_range>lib.sym("DeviceGetStreamPriorityRange")
        f.StreamCreateWithFlags = <f_create_with_flags>lib.sym("StreamCreateWithFlags")
        f.StreamCreateWithPriority = <f_create_with_priority>lib.sym("StreamCreateWithPriority")
        f.StreamDestroy = <f_handle>lib.sym("StreamDestroy")
        f.StreamSynchronize = <f_handle>lib.sym("StreamSynchronize")
        f.StreamQuery = <f_handle>lib.sym("StreamQuery")
        f.StreamWaitEvent = <f_stream_wait_event>lib.sym("StreamWaitEvent")
        f.EventCreateWithFlags = <f_create_with_flags>lib.sym("EventCreateWithFlags")
        f.EventRecord = <f_event_record>lib.sym("EventRecord")
        f.EventSynchronize = <f_handle>lib.sym("EventSynchronize")
        f.EventQuery = <f_handle>lib.sym("EventQuery")
        f.EventElapsedTime = <f_event_elapsed>lib.sym("EventElapsedTime")
        f.EventDestroy = <f_handle>lib.sym("EventDestroy")
        f.Malloc = <f_malloc>lib.sym("Malloc")
        f.Free = <f_handle>lib.sym("Free")
        f.MallocAsync = <f_malloc_async>lib.sym("MallocAsync")
        f.FreeAsync = <f_free_async>lib.sym("FreeAsync")
        f.HostAlloc = <f_host_alloc>lib.sym_first(aliases["HostAlloc"])
        f.FreeHost = <f_handle>lib.sym_first(aliases["FreeHost"])
        f.Memcpy = <f_memcpy>lib.sym("Memcpy")
        f.MemcpyAsync = <f_memcpy_async>lib.sym("MemcpyAsync")
        f.MemsetAsync = <f_memset_async>lib.sym("MemsetAsync")
        f.DeviceGetDefaultMemPool = <f_default_mem_pool>lib.sym("DeviceGetDefaultMemPool")
        f.MemPoolSetAttribute = <f_mem_pool_set>lib.sym("MemPoolSetAttribute")
        f.PointerGetAttributes = <f_pointer_attributes>lib.sym("PointerGetAttributes")
        f.DeviceCanAccessPeer = <f_can_access_peer>lib.sym("DeviceCanAccessPeer")
        f.DeviceEnablePeerAccess = <f_enable_peer_access>lib.sym("DeviceEnablePeerAccess")
        f.MemcpyPeerAsync = <f_memcpy_peer_async>lib.sym("MemcpyPeerAsync")
        f.GetLastError = <f_status>lib.sym("GetLastError")
        f.StreamBeginCapture = <f_begin_capture>lib.sym("StreamBeginCapture")
        f.StreamEndCapture = <f_end_capture>lib.sym("StreamEndCapture")
        f.StreamIsCapturing = <f_is_capturing>lib.sym("StreamIsCapturing")
        f.GraphInstantiateWithFlags = <f_graph_instantiate>lib.sym("GraphInstantiateWithFlags")
        f.GraphLaunch = <f_graph_launch>lib.sym("GraphLaunch")
        if self.kind == "cuda":
            self.f_cuda.GraphExecUpdate = <f_graph_exec_update>lib.sym("GraphExecUpdate")
        else:
            self.f_hip.GraphExecUpdate = <f_graph_exec_update_hip>lib.sym("GraphExecUpdate")
        f.GraphDestroy = <f_handle>lib.sym("GraphDestroy")
        f.GraphExecDestroy = <f_handle>lib.sym("GraphExecDestroy")
        if self.kind == "hip" and f.GetDeviceProperties != NULL:
            for name in aliases["GetDeviceProperties"]:   # the struct layout follows the name
                if lib.address(name) == <uintptr_t>f.GetDeviceProperties:
                    self._props_arch_offset = _GCN_ARCH_OFFSET[name]
                    break
        if f.RuntimeGetVersion != NULL and f.RuntimeGetVersion(&v) != 0:
            v = 0
        self._runtime_version = v
        self._select_constants(v)
        return 0

    cdef void _clear(self) noexcept:
        memset(&self.f, 0, sizeof(self.f))
        memset(&self.f_cuda, 0, sizeof(self.f_cuda))
        memset(&self.f_hip, 0, sizeof(self.f_hip))
        self._props_arch_offset = -1
        self._runtime_version = 0

    cdef object _version(self):
        return self._runtime_version

    cdef object _error(self, int status, str call):
        cdef const char* s
        name = text = None
        if self.f.GetErrorName != NULL:
            s = self.f.GetErrorName(status)
            if s != NULL:
                name = s.decode(errors="replace")
        if self.f.GetErrorString != NULL:
            s = self.f.GetErrorString(status)
            if s != NULL:
                text = s.decode(errors="replace")
        return _errors.status_error(self.statuses, GpuError,
                                    library=self.lib.path if self.lib is not None else self.name,
                                    call=self.prefix + call, status=status, status_name=name,
                                    vendor_message=text or "")

    # -------------------------------------------------------------- nogil C API
    cdef int c_check(self, int status, const char* call) except -1 nogil:
        if status == 0:
            return 0
        with gil:
            raise self._error(status, call.decode())

    cdef int c_set_device(self, int device) except -1 nogil:
        if self.f.SetDevice == NULL:
            self.missing(b"SetDevice")
        return self.c_check(self.f.SetDevice(device), b"SetDevice")

    cdef int c_stream_synchronize(self, void* stream) except -1 nogil:
        if self.f.StreamSynchronize == NULL:
            self.missing(b"StreamSynchronize")
        return self.c_check(self.f.StreamSynchronize(stream), b"StreamSynchronize")

    cdef int c_stream_wait_event(self, void* stream, void* event) except -1 nogil:
        if self.f.StreamWaitEvent == NULL:
            self.missing(b"StreamWaitEvent")
        return self.c_check(self.f.StreamWaitEvent(stream, event, 0), b"StreamWaitEvent")

    cdef int c_event_record(self, void* event, void* stream) except -1 nogil:
        if self.f.EventRecord == NULL:
            self.missing(b"EventRecord")
        return self.c_check(self.f.EventRecord(event, stream), b"EventRecord")

    cdef int c_event_synchronize(self, void* event) except -1 nogil:
        if self.f.EventSynchronize == NULL:
            self.missing(b"EventSynchronize")
        return self.c_check(self.f.EventSynchronize(event), b"EventSynchronize")

    cdef int c_event_query(self, void* event) except -1 nogil:
        cdef int st
        if self.f.EventQuery == NULL:
            self.missing(b"EventQuery")
        st = self.f.EventQuery(event)
        if st == self.c.ERROR_NOT_READY:
            return 0
        self.c_check(st, b"EventQuery")
        return 1

    cdef int c_malloc_async(self, void** ptr, size_t nbytes, void* stream) except -1 nogil:
        if self.f.MallocAsync == NULL:
            self.missing(b"MallocAsync")
        return self.c_check(self.f.MallocAsync(ptr, nbytes, stream), b"MallocAsync")

    cdef int c_free_async(self, void* ptr, void* stream) except -1 nogil:
        if self.f.FreeAsync == NULL:
            self.missing(b"FreeAsync")
        return self.c_check(self.f.FreeAsync(ptr, stream), b"FreeAsync")

    cdef int c_memcpy_async(self, void* dst, const void* src, size_t nbytes, int kind,
                            void* stream) except -1 nogil:
        if self.f.MemcpyAsync == NULL:
            self.missing(b"MemcpyAsync")
        return self.c_check(self.f.MemcpyAsync(dst, src, nbytes, kind, stream), b"MemcpyAsync")

    cdef int c_memset_async(self, void* dst, int value, size_t nbytes,
                            void* stream) except -1 nogil:
        if self.f.MemsetAsync == NULL:
            self.missing(b"MemsetAsync")
        return self.c_check(self.f.MemsetAsync(dst, value, nbytes, stream), b"MemsetAsync")

    cdef int c_graph_launch(self, void* graph_exec, void* stream) except -1 nogil:
        if self.f.GraphLaunch == NULL:
            self.missing(b"GraphLaunch")
        return self.c_check(self.f.GraphLaunch(graph_exec, stream), b"GraphLaunch")

    cdef bint c_stream_capturing(self, void* stream) noexcept nogil:
        # a status it cannot tell counts as capturing: each caller's safe way is then
        # taken (end once more, execute directly, keep the stream)
        cdef int status = 0
        if self.f.StreamIsCapturing == NULL or self.f.StreamIsCapturing(stream, &status) != 0:
            return True
        return status != 0     # cuda/hipStreamCaptureStatusNone is 0 in both headers

    cdef int c_end_capture(self, void* stream, void** graph) noexcept nogil:
        # the end's status (-1: no StreamEndCapture, or a success without a graph);
        # *graph is the graph on 0 and NULL otherwise, and the stream is left not capturing
        cdef void* extra = NULL
        cdef int st
        graph[0] = NULL
        if self.f.StreamEndCapture == NULL:
            return -1
        st = self.f.StreamEndCapture(stream, graph)
        if st != 0 and self.c_stream_capturing(stream):
            # an end that failed without ending (CUDA ends an invalidated capture itself;
            # another failure may not): end it again, or every later launch on the stream
            # would be captured (or refused), and drop what that makes
            self.f.StreamEndCapture(stream, &extra)
            if extra != NULL and self.f.GraphDestroy != NULL:
                self.f.GraphDestroy(extra)
        if st == 0 and graph[0] == NULL:
            st = -1
        if st != 0 and graph[0] != NULL:
            if self.f.GraphDestroy != NULL:
                self.f.GraphDestroy(graph[0])
            graph[0] = NULL
        return st

    # -------------------------------------------------------------- devices
    @property
    def version(self):
        """The runtime's version as it reports it (``cudaRuntimeGetVersion``: 13000 for
        13.0; ``hipRuntimeGetVersion``: HIP_VERSION, 60400000 + patch for 6.4); 0 before
        load."""
        return self._runtime_version

    def device_count(self):
        """Number of visible devices (0 when the driver finds none or fails)."""
        cdef int n = 0
        if self.f.GetDeviceCount == NULL:
            self.missing(b"GetDeviceCount")
        if self.f.GetDeviceCount(&n) != 0:
            return 0
        return n

    def set_device(self, int device):
        """Make ``device`` current on the calling thread."""
        self.c_set_device(device)

    def get_device(self):
        """The calling thread's current device."""
        cdef int d = 0
        if self.f.GetDevice == NULL:
            self.missing(b"GetDevice")
        self.c_check(self.f.GetDevice(&d), b"GetDevice")
        return d

    def device_attribute(self, int attr, int device):
        """``DeviceGetAttribute(attr, device)`` as an int; ``attr`` is one of this
        runtime's ``ATTR_*`` constants (the numbering differs between runtimes)."""
        cdef int v = 0
        if self.f.DeviceGetAttribute == NULL:
            self.missing(b"DeviceGetAttribute")
        self.c_check(self.f.DeviceGetAttribute(&v, attr, device), b"DeviceGetAttribute")
        return v

    cdef bytes _properties(self, int device):
        cdef char buf[PROPS_BYTES]
        memset(buf, 0, sizeof(buf))
        if self.f.GetDeviceProperties == NULL:
            self.missing(_ALIASES[self.kind]["GetDeviceProperties"][0].encode())
        self.c_check(self.f.GetDeviceProperties(<void*>buf, device), b"GetDeviceProperties")
        return buf[:PROPS_BYTES]

    def device_name(self, int device):
        """The device's marketing name (``name``, the first field of the properties)."""
        return self._properties(device)[:NAME_BYTES].split(b"\0", 1)[0].decode(errors="replace")

    def compute_capability(self, int device):
        """(major, minor) compute capability (HIP: the GCN/CDNA version, e.g. (9, 4))."""
        return (self.device_attribute(self.c.ATTR_CC_MAJOR, device),
                self.device_attribute(self.c.ATTR_CC_MINOR, device))

    def arch_name(self, int device):
        """The architecture as the vendor names it: ``"sm_90"`` (CUDA, from the compute
        capability) or ``gcnArchName`` (HIP, e.g. ``"gfx942:sramecc+:xnack-"``)."""
        if self.kind == "cuda":
            major, minor = self.compute_capability(device)
            return f"sm_{major}{minor}"
        props = self._properties(device)
        if self._props_arch_offset < 0:
            self.missing(b"GetDevicePropertiesR0600")
        raw = props[self._props_arch_offset:self._props_arch_offset + NAME_BYTES]
        return raw.split(b"\0", 1)[0].decode(errors="replace")

    def multiprocessor_count(self, int device):
        """Streaming multiprocessors (CUDA) or compute units (HIP) of ``device``."""
        return self.device_attribute(self.c.ATTR_MULTIPROCESSOR_COUNT, device)

    def memory_pools_supported(self, int device):
        """True when ``device`` has stream-ordered memory pools and the runtime exports
        ``MallocAsync``/``FreeAsync``."""
        if self.f.MallocAsync == NULL or self.f.FreeAsync == NULL:
            return False
        return bool(self.device_attribute(self.c.ATTR_MEMORY_POOLS_SUPPORTED, device))

    def total_memory(self, int device):
        """Total memory of ``device`` in bytes (``MemGetInfo`` with ``device`` current;
        the calling thread's current device is restored)."""
        current = self.get_device()
        self.set_device(device)
        try:
            return self.mem_get_info()[1]
        finally:
            self.set_device(current)

    def mem_get_info(self):
        """(free, total) bytes of the current device."""
        cdef size_t free_b = 0, total_b = 0
        if self.f.MemGetInfo == NULL:
            self.missing(b"MemGetInfo")
        self.c_check(self.f.MemGetInfo(&free_b, &total_b), b"MemGetInfo")
        return free_b, total_b

    def runtime_version(self):
        """``RuntimeGetVersion()`` (see :attr:`version`)."""
        cdef int v = 0
        if self.f.RuntimeGetVersion == NULL:
            self.missing(b"RuntimeGetVersion")
        self.c_check(self.f.RuntimeGetVersion(&v), b"RuntimeGetVersion")
        return v

    def driver_version(self):
        """Driver version (e.g. 13000); 0 when no driver is installed."""
        cdef int v = 0
        if self.f.DriverGetVersion == NULL:
            self.missing(b"DriverGetVersion")
        self.c_check(self.f.DriverGetVersion(&v), b"DriverGetVersion")
        return v

    # -------------------------------------------------------------- streams
    def stream_create(self, flags=None):
        """Create a stream on the current device (default STREAM_NON_BLOCKING); its handle."""
        cdef void* s = NULL
        cdef unsigned int fl = self.c.STREAM_NON_BLOCKING if flags is None else flags
        if self.f.StreamCreateWithFlags == NULL:
            self.missing(b"StreamCreateWithFlags")
        self.c_check(self.f.StreamCreateWithFlags(&s, fl), b"StreamCreateWithFlags")
        return <uintptr_t>s

    def stream_create_with_priority(self, int priority, flags=None):
        """A stream with ``priority`` (lower number = higher priority; see
        :meth:`stream_priority_range`), default flags STREAM_NON_BLOCKING."""
        cdef void* s = NULL
        cdef unsigned int fl = self.c.STREAM_NON_BLOCKING if flags is None else flags
        if self.f.StreamCreateWithPriority == NULL:
            self.missing(b"StreamCreateWithPriority")
        self.c_check(self.f.StreamCreateWithPriority(&s, fl, priority),
                     b"StreamCreateWithPriority")
        return <uintptr_t>s

    def stream_priority_range(self):
        """(least, greatest) stream priority of the current device; greatest <= least."""
        cdef int least = 0, greatest = 0
        if self.f.DeviceGetStreamPriorityRange == NULL:
            self.missing(b"DeviceGetStreamPriorityRange")
        self.c_check(self.f.DeviceGetStreamPriorityRange(&least, &greatest),
                     b"DeviceGetStreamPriorityRange")
        return least, greatest

    def stream_destroy(self, uintptr_t stream):
        """Destroy a stream (work already enqueued still completes)."""
        if self.f.StreamDestroy == NULL:
            self.missing(b"StreamDestroy")
        self.c_check(self.f.StreamDestroy(<void*>stream), b"StreamDestroy")

    def stream_synchronize(self, uintptr_t stream):
        """Block (GIL released) until all work on ``stream`` is done."""
        with nogil:
            self.c_stream_synchronize(<void*>stream)

    def stream_query(self, uintptr_t stream):
        """True when all work on ``stream`` is done, False while some is pending."""
        cdef int st
        if self.f.StreamQuery == NULL:
            self.missing(b"StreamQuery")
        st = self.f.StreamQuery(<void*>stream)
        if st == self.c.ERROR_NOT_READY:
            return False
        self.c_check(st, b"StreamQuery")
        return True

    def stream_wait_event(self, uintptr_t stream, uintptr_t event):
        """Make later work on ``stream`` wait for ``event`` (on the GPU; the host does not wait)."""
        self.c_stream_wait_event(<void*>stream, <void*>event)

    # -------------------------------------------------------------- events
    def event_create(self, flags=None):
        """Create an event; default flags EVENT_DISABLE_TIMING | EVENT_BLOCKING_SYNC (no
        timing, a synchronize that sleeps instead of spinning)."""
        cdef void* e = NULL
        cdef unsigned int fl = ((self.c.EVENT_DISABLE_TIMING | self.c.EVENT_BLOCKING_SYNC)
                                if flags is None else flags)
        if self.f.EventCreateWithFlags == NULL:
            self.missing(b"EventCreateWithFlags")
        self.c_check(self.f.EventCreateWithFlags(&e, fl), b"EventCreateWithFlags")
        return <uintptr_t>e

    def event_record(self, uintptr_t event, uintptr_t stream):
        """Record ``event`` on ``stream``."""
        self.c_event_record(<void*>event, <void*>stream)

    def event_synchronize(self, uintptr_t event):
        """Block (GIL released) until ``event`` completes; raises the error of failed work."""
        with nogil:
            self.c_event_synchronize(<void*>event)

    def event_query(self, uintptr_t event):
        """True when ``event`` has completed, False while pending."""
        return self.c_event_query(<void*>event) == 1

    def event_elapsed_time(self, uintptr_t start, uintptr_t end):
        """Milliseconds between two completed timing events."""
        cdef float ms = 0
        if self.f.EventElapsedTime == NULL:
            self.missing(b"EventElapsedTime")
        self.c_check(self.f.EventElapsedTime(&ms, <void*>start, <void*>end), b"EventElapsedTime")
        return ms

    def event_destroy(self, uintptr_t event):
        """Destroy an event."""
        if self.f.EventDestroy == NULL:
            self.missing(b"EventDestroy")
        self.c_check(self.f.EventDestroy(<void*>event), b"EventDestroy")

    # -------------------------------------------------------------- memory
    def malloc(self, size_t nbytes, uintptr_t stream=0, bint pooled=True):
        """Allocate ``nbytes`` of device memory usable from any stream at once; the
        pointer (0 for 0 bytes).

        With ``pooled`` and ``MallocAsync`` exported, the allocation is stream-ordered on
        ``stream`` and the stream is synchronized; otherwise a plain ``Malloc``.
        """
        cdef void* p = NULL
        cdef int st
        if nbytes == 0:
            return 0
        if pooled and self.f.MallocAsync != NULL:
            with nogil:
                self.c_malloc_async(&p, nbytes, <void*>stream)
                self.c_stream_synchronize(<void*>stream)
        else:
            if self.f.Malloc == NULL:
                self.missing(b"Malloc")
            with nogil:
                st = self.f.Malloc(&p, nbytes)
            self.c_check(st, b"Malloc")
        return <uintptr_t>p

    def malloc_async(self, size_t nbytes, uintptr_t stream):
        """Stream-ordered allocation usable at once on ``stream`` only (no synchronize)."""
        cdef void* p = NULL
        if nbytes == 0:
            return 0
        with nogil:
            self.c_malloc_async(&p, nbytes, <void*>stream)
        return <uintptr_t>p

    def free(self, uintptr_t ptr, uintptr_t stream=0, bint pooled=True):
        """Free memory from :meth:`malloc` (stream-ordered on ``stream`` when pooled and
        ``FreeAsync`` is exported); 0 is a no-op."""
        cdef int st
        if ptr == 0:
            return
        if pooled and self.f.FreeAsync != NULL:
            with nogil:
                self.c_free_async(<void*>ptr, <void*>stream)
        else:
            if self.f.Free == NULL:
                self.missing(b"Free")
            with nogil:
                st = self.f.Free(<void*>ptr)
            self.c_check(st, b"Free")

    def host_alloc(self, size_t nbytes):
        """Pinned (page-locked) host memory of ``nbytes`` (``cudaHostAlloc`` /
        ``hipHostMalloc``, default flags): copies from it are truly asynchronous. The
        pointer; 0 for 0 bytes."""
        cdef void* p = NULL
        cdef int st
        if nbytes == 0:
            return 0
        if self.f.HostAlloc == NULL:
            self.missing(_ALIASES[self.kind]["HostAlloc"][0].encode())
        with nogil:
            st = self.f.HostAlloc(&p, nbytes, 0)
        self.c_check(st, b"HostAlloc")
        return <uintptr_t>p

    def host_free(self, uintptr_t ptr):
        """Free memory from :meth:`host_alloc`; 0 is a no-op."""
        cdef int st
        if ptr == 0:
            return
        if self.f.FreeHost == NULL:
            self.missing(_ALIASES[self.kind]["FreeHost"][0].encode())
        with nogil:
            st = self.f.FreeHost(<void*>ptr)
        self.c_check(st, b"FreeHost")

    def memcpy(self, uintptr_t dst, uintptr_t src, size_t nbytes, int kind):
        """Blocking copy (GIL released); ``kind`` is one of this runtime's MEMCPY_* constants."""
        cdef int st
        if self.f.Memcpy == NULL:
            self.missing(b"Memcpy")
        with nogil:
            st = self.f.Memcpy(<void*>dst, <const void*>src, nbytes, kind)
        self.c_check(st, b"Memcpy")

    def memcpy_async(self, uintptr_t dst, uintptr_t src, size_t nbytes, int kind,
                     uintptr_t stream):
        """Copy enqueued on ``stream``; asynchronous to the host only for pinned host memory."""
        with nogil:
            self.c_memcpy_async(<void*>dst, <const void*>src, nbytes, kind, <void*>stream)

    def memset_async(self, uintptr_t dst, int value, size_t nbytes, uintptr_t stream):
        """Set ``nbytes`` bytes at ``dst`` to ``value`` on ``stream``."""
        self.c_memset_async(<void*>dst, value, nbytes, <void*>stream)

    # -------------------------------------------------------------- peer access
    def can_access_peer(self, int device, int peer):
        """Whether ``device`` can address ``peer``'s memory directly
        (``DeviceCanAccessPeer``); False where the runtime lacks the call."""
        cdef int can = 0
        if self.f.DeviceCanAccessPeer == NULL:
            return False
        self.c_check(self.f.DeviceCanAccessPeer(&can, device, peer), b"DeviceCanAccessPeer")
        return can != 0

    def enable_peer_access(self, int peer):
        """Let the calling thread's current device address ``peer``'s memory
        (``DeviceEnablePeerAccess``, flags 0); already enabled is no error."""
        cdef int st
        if self.f.DeviceEnablePeerAccess == NULL:
            self.missing(b"DeviceEnablePeerAccess")
        st = self.f.DeviceEnablePeerAccess(peer, 0)
        if st == self.c.ERROR_PEER_ACCESS_ALREADY_ENABLED:
            if self.f.GetLastError != NULL:
                self.f.GetLastError()   # the runtime keeps it as the sticky last error
            return
        self.c_check(st, b"DeviceEnablePeerAccess")

    def memcpy_peer_async(self, uintptr_t dst, int dst_device, uintptr_t src, int src_device,
                          size_t nbytes, uintptr_t stream):
        """Device-to-device copy between two devices of this runtime, on ``stream``
        (``MemcpyPeerAsync``)."""
        cdef int st
        if self.f.MemcpyPeerAsync == NULL:
            self.missing(b"MemcpyPeerAsync")
        with nogil:
            st = self.f.MemcpyPeerAsync(<void*>dst, dst_device, <const void*>src, src_device,
                                        nbytes, <void*>stream)
        self.c_check(st, b"MemcpyPeerAsync")

    # -------------------------------------------------------------- capture and graphs
    def stream_begin_capture(self, uintptr_t stream, mode=None):
        """Start capturing the work enqueued on ``stream`` into a graph; ``mode`` is one
        of STREAM_CAPTURE_MODE_* (default THREAD_LOCAL: only this thread's unsafe calls
        are refused meanwhile, so other threads' synchronizes go on)."""
        cdef int m = self.c.STREAM_CAPTURE_MODE_THREAD_LOCAL if mode is None else mode
        if self.f.StreamBeginCapture == NULL:
            self.missing(b"StreamBeginCapture")
        self.c_check(self.f.StreamBeginCapture(<void*>stream, m), b"StreamBeginCapture")

    def stream_end_capture(self, uintptr_t stream):
        """End the capture on ``stream``; the captured graph's handle (raises when the
        capture was invalidated, e.g. by a call not allowed during capture)."""
        cdef void* g = NULL
        if self.f.StreamEndCapture == NULL:
            self.missing(b"StreamEndCapture")
        self.c_check(self.f.StreamEndCapture(<void*>stream, &g), b"StreamEndCapture")
        return <uintptr_t>g

    def end_capture(self, uintptr_t stream):
        """End the capture on ``stream``; the captured graph's handle. Unlike
        :meth:`stream_end_capture`, a failed end does not leave the stream capturing.

        Raises
        ------
        GpuError
            The end failed (e.g. ``cudaErrorStreamCaptureInvalidated``: a call not allowed
            during capture). Raised once the stream no longer captures: where the failed
            end left it capturing it is ended again and that graph destroyed, so the
            stream's later work runs. Only if that second end fails too may it still be
            capturing (``stream_is_capturing`` tells).
        LibraryError
            The runtime lacks ``StreamEndCapture``.
        """
        cdef void* g = NULL
        if self.f.StreamEndCapture == NULL:
            self.missing(b"StreamEndCapture")
        self.c_check(self.c_end_capture(<void*>stream, &g), b"StreamEndCapture")
        return <uintptr_t>g

    def clear_last_error(self):
        """Reset the calling thread's last runtime error (``GetLastError``), e.g. after a
        capture that was tried and dropped; returns the status it held."""
        if self.f.GetLastError == NULL:
            return 0
        return self.f.GetLastError()

    def stream_is_capturing(self, uintptr_t stream):
        """The capture status of ``stream``: one of STREAM_CAPTURE_STATUS_*."""
        cdef int status = 0
        if self.f.StreamIsCapturing == NULL:
            self.missing(b"StreamIsCapturing")
        self.c_check(self.f.StreamIsCapturing(<void*>stream, &status), b"StreamIsCapturing")
        return status

    def graph_instantiate(self, uintptr_t graph, unsigned long long flags=0):
        """An executable graph of ``graph`` (``GraphInstantiateWithFlags``); its handle."""
        cdef void* e = NULL
        cdef int st
        if self.f.GraphInstantiateWithFlags == NULL:
            self.missing(b"GraphInstantiateWithFlags")
        with nogil:
            st = self.f.GraphInstantiateWithFlags(&e, <void*>graph, flags)
        self.c_check(st, b"GraphInstantiateWithFlags")
        return <uintptr_t>e

    def graph_exec_update(self, uintptr_t graph_exec, uintptr_t graph):
        """Update the executable graph ``graph_exec`` in place to the parameters of
        ``graph`` (same topology, other pointers); True when done, False when the graphs
        differ in a way an update cannot take (then instantiate anew)."""
        cdef GraphExecUpdateResultInfo info
        cdef void* error_node = NULL
        cdef int result = 0
        cdef int st
        memset(&info, 0, sizeof(info))
        if self.kind == "hip":     # the pre-CUDA-12 form: error node and result apart
            if self.f_hip.GraphExecUpdate == NULL:
                self.missing(b"GraphExecUpdate")
            st = self.f_hip.GraphExecUpdate(<void*>graph_exec, <void*>graph, &error_node,
                                            &result)
        else:
            if self.f_cuda.GraphExecUpdate == NULL:
                self.missing(b"GraphExecUpdate")
            st = self.f_cuda.GraphExecUpdate(<void*>graph_exec, <void*>graph, &info)
        if st == self.c.ERROR_GRAPH_EXEC_UPDATE_FAILURE:
            return False
        self.c_check(st, b"GraphExecUpdate")
        return True

    def graph_launch(self, uintptr_t graph_exec, uintptr_t stream):
        """Enqueue one launch of an executable graph on ``stream``."""
        self.c_graph_launch(<void*>graph_exec, <void*>stream)

    def graph_destroy(self, uintptr_t graph):
        """Destroy a graph (executable graphs made from it are independent of it)."""
        if self.f.GraphDestroy == NULL:
            self.missing(b"GraphDestroy")
        self.c_check(self.f.GraphDestroy(<void*>graph), b"GraphDestroy")

    def graph_exec_destroy(self, uintptr_t graph_exec):
        """Destroy an executable graph; launches in flight complete first (the runtime
        frees it when they are done)."""
        if self.f.GraphExecDestroy == NULL:
            self.missing(b"GraphExecDestroy")
        self.c_check(self.f.GraphExecDestroy(<void*>graph_exec), b"GraphExecDestroy")

    def pool_keep_memory(self, int device):
        """Keep freed memory in the device's default pool (release threshold = max), as
        PyTorch's caching allocator does; otherwise every synchronize returns it to the
        OS. False where pools are unavailable."""
        cdef void* pool = NULL
        cdef unsigned long long threshold = <unsigned long long>-1
        if self.f.DeviceGetDefaultMemPool == NULL or self.f.MemPoolSetAttribute == NULL:
            return False
        self.c_check(self.f.DeviceGetDefaultMemPool(&pool, device), b"DeviceGetDefaultMemPool")
        self.c_check(self.f.MemPoolSetAttribute(pool, self.c.POOL_ATTR_RELEASE_THRESHOLD,
                                                &threshold), b"MemPoolSetAttribute")
        return True

    def pointer_device(self, uintptr_t ptr):
        """Device ordinal owning ``ptr`` if it is device (or managed) memory, -1 if it is
        not, -2 if the runtime cannot tell (no ``PointerGetAttributes``)."""
        cdef PointerAttributes attrs
        cdef int st
        memset(&attrs, 0, sizeof(attrs))
        if self.f.PointerGetAttributes == NULL:
            return -2
        st = self.f.PointerGetAttributes(&attrs, <const void*>ptr)
        if st != 0:
            return -1
        if attrs.type == self.c.MEMORY_TYPE_DEVICE or attrs.type == self.c.MEMORY_TYPE_MANAGED:
            return attrs.device
        return -1


# ------------------------------------------------------------------ launch accounting
cdef class ExecCounter:
    """Executions of one pattern's plans on one device, and the host time they took.

    A C launch (``_cudnn_backend.GraphLaunch``) bumps it in C after each successful
    execution, so the submit path makes no Python call to keep ``Device.plan_stats()``;
    other work items call :meth:`add`. Bumped with the GIL held: concurrent launches
    from several streams never lose a count.

    Attributes
    ----------
    executions : int
        Successful executions so far.
    host_ns : int
        Their host time in nanoseconds (on a GPU the enqueueing, not the kernels).
    """

    def add(self, long long ns):
        """Count one execution that took ``ns`` nanoseconds of host time."""
        self.bump(ns)

    @property
    def exec_ms(self):
        """``host_ns`` in milliseconds (float)."""
        return self.host_ns / 1e6

    def __repr__(self):
        return f"ExecCounter(executions={self.executions}, host_ns={self.host_ns})"


# ------------------------------------------------------------------ the two instances
cdef dict _INSTANCES = {"cuda": Runtime("cuda"), "hip": Runtime("hip")}


def instance(str kind):
    """The process-wide ``Runtime`` of ``kind`` (``"cuda"`` or ``"hip"``), loaded or not.

    Raises
    ------
    ValueError
        ``kind`` is neither.
    """
    try:
        return _INSTANCES[kind]
    except KeyError:
        raise ValueError(f"instance: kind must be 'cuda' or 'hip'; got {kind!r}") from None


def runtime(str kind):
    """The process-wide ``Runtime`` of ``kind`` once loaded, else None."""
    rt = _INSTANCES.get(kind)
    return rt if rt is not None and rt.loaded else None
