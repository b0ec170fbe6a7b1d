# cython: language_level=3
"""C types of the GPU runtime calls we make (ours: no SDK header is included).

One function-pointer type per signature and one struct of named pointers, ``RuntimeFns``,
that a ``Runtime`` (``_gpu.pyx``) fills by name with the prefix ``cuda`` or ``hip``. The
signatures are those of ``cuda_runtime_api.h`` (CUDA 13.0) and ``hip/hip_runtime_api.h``
(ROCm 6.4.3, 7.2.4), the headers tests/contract compiles every type below against (ROCm
5.2 is taken too but not compile-checked); the two agree call for call: handles
(``cudaStream_t``/``hipStream_t``, events, memory pools) are ``void*``, status and enum
arguments are ``int`` (``cudaError_t``/``hipError_t`` are C enums, int-sized on every ABI
we build for). The values of those enums differ between the runtimes and live in each
runtime's constants table (``_gpu.pyx``), not here.
"""

# ------------------------------------------------------------------ function-pointer types
# GetDeviceCount, GetDevice, ...Version
ctypedef int (*f_int_out)(int*) noexcept nogil
ctypedef int (*f_int_in)(int) noexcept nogil                           # SetDevice
# GetErrorName, GetErrorString
ctypedef const char* (*f_error_text)(int) noexcept nogil
# DeviceGetAttribute(value, attr, device)
ctypedef int (*f_device_attribute)(int*, int, int) noexcept nogil
# GetDeviceProperties(prop, device)
ctypedef int (*f_device_properties)(void*, int) noexcept nogil
ctypedef int (*f_mem_get_info)(size_t*, size_t*) noexcept nogil        # MemGetInfo(free, total)
# DeviceGetStreamPriorityRange(least, greatest)
ctypedef int (*f_priority_range)(int*, int*) noexcept nogil
# StreamCreateWithFlags, EventCreateWithFlags
ctypedef int (*f_create_with_flags)(void**, unsigned int) noexcept nogil
# StreamCreateWithPriority
ctypedef int (*f_create_with_priority)(void**, unsigned int, int) noexcept nogil
# StreamDestroy/Synchronize/Query, Event*, Free, FreeHost
ctypedef int (*f_handle)(void*) noexcept nogil
ctypedef int (*f_stream_wait_event)(void*, void*, unsigned int) noexcept nogil
ctypedef int (*f_event_record)(void*, void*) noexcept nogil            # EventRecord(event, stream)
# EventElapsedTime(ms, start, end)
ctypedef int (*f_event_elapsed)(float*, void*, void*) noexcept nogil
ctypedef int (*f_malloc)(void**, size_t) noexcept nogil
# MallocAsync(ptr, size, stream)
ctypedef int (*f_malloc_async)(void**, size_t, void*) noexcept nogil
ctypedef int (*f_free_async)(void*, void*) noexcept nogil              # FreeAsync(ptr, stream)
# cudaHostAlloc / hipHostMalloc
ctypedef int (*f_host_alloc)(void**, size_t, unsigned int) noexcept nogil
ctypedef int (*f_memcpy)(void*, const void*, size_t, int) noexcept nogil
ctypedef int (*f_memcpy_async)(void*, const void*, size_t, int, void*) noexcept nogil
ctypedef int (*f_memset_async)(void*, int, size_t, void*) noexcept nogil
# DeviceGetDefaultMemPool(pool, device)
ctypedef int (*f_default_mem_pool)(void**, int) noexcept nogil
# MemPoolSetAttribute(pool, attr, value)
ctypedef int (*f_mem_pool_set)(void*, int, void*) noexcept nogil
ctypedef int (*f_pointer_attributes)(void*, const void*) noexcept nogil
# Peer access between two devices of one runtime (multi-GPU copies)
# DeviceCanAccessPeer(canAccessPeer, device, peerDevice)
ctypedef int (*f_can_access_peer)(int*, int, int) noexcept nogil
ctypedef int (*f_status)() noexcept nogil                              # GetLastError
# DeviceEnablePeerAccess(peerDevice, flags): from the current device to peerDevice
ctypedef int (*f_enable_peer_access)(int, unsigned int) noexcept nogil
# MemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream)
ctypedef int (*f_memcpy_peer_async)(void*, int, const void*, int, size_t, void*) noexcept nogil
# Stream capture and graphs (CUDA >= 12 / ROCm >= 5.2). Enum out-parameters and the CUDA
# update's result struct travel as void* (their C types differ per runtime).
# StreamBeginCapture(stream, mode)
ctypedef int (*f_begin_capture)(void*, int) noexcept nogil
# StreamEndCapture(stream, graph*)
ctypedef int (*f_end_capture)(void*, void**) noexcept nogil
# StreamIsCapturing(stream, cudaStreamCaptureStatus* / hipStreamCaptureStatus*)
ctypedef int (*f_is_capturing)(void*, void*) noexcept nogil
# GraphInstantiateWithFlags(exec*, graph, flags)
ctypedef int (*f_graph_instantiate)(void**, void*, unsigned long long) noexcept nogil
ctypedef int (*f_graph_launch)(void*, void*) noexcept nogil           # GraphLaunch(exec, stream)
# cudaGraphExecUpdate(exec, graph, cudaGraphExecUpdateResultInfo*) of CUDA >= 12
ctypedef int (*f_graph_exec_update)(void*, void*, void*) noexcept nogil
# hipGraphExecUpdate(exec, graph, hipGraphNode_t* error_node, hipGraphExecUpdateResult*)
ctypedef int (*f_graph_exec_update_hip)(void*, void*, void**, void*) noexcept nogil


# ------------------------------------------------------------------ the table of one runtime
ctypedef struct RuntimeFns:
    f_int_out GetDeviceCount
    f_int_in SetDevice
    f_int_out GetDevice
    f_error_text GetErrorName
    f_error_text GetErrorString
    f_device_attribute DeviceGetAttribute
    f_device_properties GetDeviceProperties
    f_mem_get_info MemGetInfo
    f_int_out RuntimeGetVersion
    f_int_out DriverGetVersion
    f_priority_range DeviceGetStreamPriorityRange
    f_create_with_flags StreamCreateWithFlags
    f_create_with_priority StreamCreateWithPriority
    f_handle StreamDestroy
    f_handle StreamSynchronize
    f_handle StreamQuery
    f_stream_wait_event StreamWaitEvent
    f_create_with_flags EventCreateWithFlags
    f_event_record EventRecord
    f_handle EventSynchronize
    f_handle EventQuery
    f_event_elapsed EventElapsedTime
    f_handle EventDestroy
    f_malloc Malloc
    f_handle Free
    f_malloc_async MallocAsync
    f_free_async FreeAsync
    f_host_alloc HostAlloc
    f_handle FreeHost
    f_memcpy Memcpy
    f_memcpy_async MemcpyAsync
    f_memset_async MemsetAsync
    f_default_mem_pool DeviceGetDefaultMemPool
    f_mem_pool_set MemPoolSetAttribute
    f_pointer_attributes PointerGetAttributes
    f_can_access_peer DeviceCanAccessPeer
    f_enable_peer_access DeviceEnablePeerAccess
    f_status GetLastError
    f_memcpy_peer_async MemcpyPeerAsync
    f_begin_capture StreamBeginCapture
    f_end_capture StreamEndCapture
    f_is_capturing StreamIsCapturing
    f_graph_instantiate GraphInstantiateWithFlags
    f_graph_launch GraphLaunch
    f_handle GraphDestroy
    f_handle GraphExecDestroy


# ------------------------------------------------------------------ calls that differ per runtime
# Where the two runtimes' C signatures differ, each has its own table, filled only for that
# runtime and checked against its own header (tests/contract/_abi.py FUNCTION_TABLES,
# tests/contract/hip/_abi_rocm.py).
ctypedef struct CudaOnlyFns:
    f_graph_exec_update GraphExecUpdate

ctypedef struct HipOnlyFns:
    f_graph_exec_update_hip GraphExecUpdate


# ------------------------------------------------------------------ the constants the C code uses
# Filled per runtime from its constants table (_gpu.pyx), which names header and version.
ctypedef struct RuntimeConstants:
    unsigned int STREAM_NON_BLOCKING
    unsigned int EVENT_BLOCKING_SYNC
    unsigned int EVENT_DISABLE_TIMING
    int MEMCPY_HOST_TO_DEVICE
    int MEMCPY_DEVICE_TO_HOST
    int MEMCPY_DEVICE_TO_DEVICE
    int ERROR_NOT_READY
    int ATTR_CC_MAJOR
    int ATTR_CC_MINOR
    int ATTR_MULTIPROCESSOR_COUNT
    int ATTR_MEMORY_POOLS_SUPPORTED
    int POOL_ATTR_RELEASE_THRESHOLD
    int MEMORY_TYPE_DEVICE
    int MEMORY_TYPE_MANAGED
    int STREAM_CAPTURE_MODE_THREAD_LOCAL
    int ERROR_GRAPH_EXEC_UPDATE_FAILURE
    int ERROR_PEER_ACCESS_ALREADY_ENABLED


# cudaPointerAttributes (CUDA >= 11: 88 bytes in CUDA 13) / hipPointerAttribute_t (32 bytes,
# ROCm 5.2-7.2) both start {memoryType type; int device; void* devicePointer; void*
# hostPointer;}; the pad covers the rest of either.
ctypedef struct PointerAttributes:
    int type
    int device
    void* devicePointer
    void* hostPointer
    char pad[192]


# cudaGraphExecUpdateResultInfo (driver_types.h, CUDA >= 12): the out-parameter of
# cudaGraphExecUpdate. HIP's update returns the result enum and error node separately.
ctypedef struct GraphExecUpdateResultInfo:
    int result
    void* errorNode
    void* errorFromNode
