/* hip_on_cuda.c: the HIP runtime calls hipdnn_async makes, implemented on libcudart.
 *
 * A test tool, never shipped: loaded as the HIP runtime (HIPDNN_ASYNC_HIP_RUNTIME=<this
 * library>), it lets the HIP runtime binding (hipdnn_async.runtime._gpu, instance "hip")
 * and the GPU stream backend (queues/_gpu_backend.py) run on a CUDA GPU's real streams,
 * events, copies and pools. What it proves and what it does not: docs/guide/miopen.md.
 *
 * Every hip* symbol the binding looks up is defined here (tests/contract/test_hip_shim.py
 * compares them with src_pyx/_gpu.pyx). Declarations: hip_min.h (ours, checked against
 * ROCm 6.4.3 / 7.2.4) or, with HIP_SHIM_REAL_HEADERS, AMD's hip_runtime_api.h (then each
 * definition below is checked against AMD's prototype). Values cross between HIP and CUDA
 * only through the paired lists of hip_shim_pairs.h (HIP's value here, CUDA's in
 * cuda_side.c): device attributes, memcpy kinds, statuses, stream / event / host-alloc /
 * graph flags, pool attributes, capture modes and statuses, memory types, update results.
 * A HIP value without a CUDA pair is hipErrorInvalidValue, never passed on as a number.
 *
 * Handles: a hipStream_t / hipEvent_t / hipMemPool_t / hipGraph_t is the CUDA handle
 * itself; the null stream is CUDA's legacy default stream (HIP's null stream also
 * synchronizes with blocking streams) and hipStreamPerThread is cudaStreamPerThread.
 * Versions: hipRuntimeGetVersion reports HIP_SHIM_VERSION (the ROCm ABI declared here),
 * hipDriverGetVersion the CUDA driver's version. hipGetDevicePropertiesR0600 fills the
 * fields the CUDA properties have and names the architecture "sm_XY (hip-on-cuda shim)".
 */
#include <stdio.h>
#include <string.h>

#include "hip_min.h"
#include "hip_shim_pairs.h"
#include "cuda_side.h"

#define SHIM_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ the HIP side's tables */
#define SHIM_HIP_VALUE(hip, cuda) (long long)(hip),
#define SHIM_HIP_TABLE(list, name) static const long long hip_##name[] = { list(SHIM_HIP_VALUE) };
SHIM_DOMAINS(SHIM_HIP_TABLE)

static int pair(const long long *from, const long long *to, int n, long long v, long long *out) {
    for (int i = 0; i < n; i++) {
        if (from[i] == v) {
            *out = to[i];
            return 1;
        }
    }
    return 0;
}

/* HIP value -> CUDA value of domain `name` (0 when it has no pair) */
#define TO_CUDA(name, v, out) pair(hip_##name, sc_cuda_##name, sc_cuda_##name##_count, (long long)(v), out)
#define TO_HIP(name, v, out) pair(sc_cuda_##name, hip_##name, sc_cuda_##name##_count, (long long)(v), out)

/* HIP bit flags -> CUDA bit flags; 0 when a set bit has no pair */
static int flags(const long long *hip, const long long *cuda, int n, unsigned long long v,
                 unsigned long long *out) {
    unsigned long long o = 0, left = v;
    for (int i = 0; i < n; i++) {
        unsigned long long bit = (unsigned long long)hip[i];
        if (bit && (v & bit) == bit) {
            o |= (unsigned long long)cuda[i];
            left &= ~bit;
        }
    }
    if (left) return 0;
    *out = o;
    return 1;
}
#define FLAGS_TO_CUDA(name, v, out) \
    flags(hip_##name, sc_cuda_##name, sc_cuda_##name##_count, (unsigned long long)(v), out)

/* ------------------------------------------------------------------ statuses */
/* the CUDA status behind this thread's last hipErrorUnknown (0: none) */
static __thread int unmapped_cuda_status;
static __thread char error_text[512];

static hipError_t from_cuda(int st) {
    long long h;
    if (st == 0) return hipSuccess;
    if (TO_HIP(errors, st, &h) && h != (long long)hipErrorUnknown) return (hipError_t)h;
    unmapped_cuda_status = st;
    return hipErrorUnknown;
}

#define CUDA(call) return from_cuda(call)

static void *cu_stream(hipStream_t s) {
    return s == hipStreamPerThread ? sc_StreamPerThread() : (void *)s;
}

#define SHIM_NAME_CASE(hip, cuda) case hip: return #hip;
SHIM_API const char *hipGetErrorName(hipError_t hip_error) {
    switch (hip_error) {
        SHIM_ERRORS(SHIM_NAME_CASE)
        default: return "hipErrorUnknown";
    }
}

SHIM_API const char *hipGetErrorString(hipError_t hip_error) {
    long long c;
    if (hip_error == hipErrorUnknown && unmapped_cuda_status) {
        int st = unmapped_cuda_status;
        snprintf(error_text, sizeof error_text, "CUDA status %d (%s): %s [hip-on-cuda shim]",
                 st, sc_GetErrorName(st), sc_GetErrorString(st));
        return error_text;
    }
    if (TO_CUDA(errors, hip_error, &c)) return sc_GetErrorString((int)c);
    return "unknown HIP status [hip-on-cuda shim]";
}

/* ------------------------------------------------------------------ devices */
SHIM_API hipError_t hipGetDeviceCount(int *count) { CUDA(sc_GetDeviceCount(count)); }
SHIM_API hipError_t hipSetDevice(int deviceId) { CUDA(sc_SetDevice(deviceId)); }
SHIM_API hipError_t hipGetDevice(int *deviceId) { CUDA(sc_GetDevice(deviceId)); }
SHIM_API hipError_t hipDeviceSynchronize(void) { CUDA(sc_DeviceSynchronize()); }

SHIM_API hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId) {
    long long c;
    if (!pi || !TO_CUDA(device_attrs, attr, &c)) return hipErrorInvalidValue;
    CUDA(sc_DeviceGetAttribute(pi, (int)c, deviceId));
}

SHIM_API hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600 *prop, int deviceId) {
    struct sc_props p;
    if (!prop) return hipErrorInvalidValue;
    int st = sc_GetDeviceProperties(&p, deviceId);
    if (st != 0) return from_cuda(st);
    memset(prop, 0, sizeof *prop);
    memcpy(prop->name, p.name, sizeof prop->name);
    prop->totalGlobalMem = p.totalGlobalMem;
    prop->sharedMemPerBlock = p.sharedMemPerBlock;
    prop->warpSize = p.warpSize;
    prop->maxThreadsPerBlock = p.maxThreadsPerBlock;
    prop->major = p.major;
    prop->minor = p.minor;
    prop->multiProcessorCount = p.multiProcessorCount;
    prop->concurrentKernels = p.concurrentKernels;
    prop->pciBusID = p.pciBusID;
    prop->pciDeviceID = p.pciDeviceID;
    prop->l2CacheSize = p.l2CacheSize;
    snprintf(prop->gcnArchName, sizeof prop->gcnArchName, "sm_%d%d (hip-on-cuda shim)",
             p.major, p.minor);
    return hipSuccess;
}

SHIM_API hipError_t hipMemGetInfo(size_t *free_b, size_t *total) { CUDA(sc_MemGetInfo(free_b, total)); }

SHIM_API hipError_t hipRuntimeGetVersion(int *runtimeVersion) {
    int cuda_version = 0;
    if (!runtimeVersion) return hipErrorInvalidValue;
    int st = sc_RuntimeGetVersion(&cuda_version);     /* a broken libcudart fails here */
    if (st != 0) return from_cuda(st);
    *runtimeVersion = HIP_SHIM_VERSION;
    return hipSuccess;
}

SHIM_API hipError_t hipDriverGetVersion(int *driverVersion) { CUDA(sc_DriverGetVersion(driverVersion)); }

SHIM_API hipError_t hipDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    CUDA(sc_DeviceGetStreamPriorityRange(leastPriority, greatestPriority));
}

/* ------------------------------------------------------------------ streams */
SHIM_API hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int fl) {
    unsigned long long c;
    if (!FLAGS_TO_CUDA(stream_flags, fl, &c)) return hipErrorInvalidValue;
    CUDA(sc_StreamCreateWithFlags((void **)stream, (unsigned)c));
}

SHIM_API hipError_t hipStreamCreateWithPriority(hipStream_t *stream, unsigned int fl, int priority) {
    unsigned long long c;
    if (!FLAGS_TO_CUDA(stream_flags, fl, &c)) return hipErrorInvalidValue;
    CUDA(sc_StreamCreateWithPriority((void **)stream, (unsigned)c, priority));
}

SHIM_API hipError_t hipStreamDestroy(hipStream_t stream) { CUDA(sc_StreamDestroy(cu_stream(stream))); }
SHIM_API hipError_t hipStreamSynchronize(hipStream_t stream) { CUDA(sc_StreamSynchronize(cu_stream(stream))); }
SHIM_API hipError_t hipStreamQuery(hipStream_t stream) { CUDA(sc_StreamQuery(cu_stream(stream))); }

SHIM_API hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int fl) {
    if (fl != 0) return hipErrorInvalidValue;    /* HIP defines no wait flag (must be 0) */
    CUDA(sc_StreamWaitEvent(cu_stream(stream), (void *)event, 0));
}

SHIM_API hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData) {
    CUDA(sc_LaunchHostFunc(cu_stream(stream), fn, userData));
}

/* ------------------------------------------------------------------ events */
SHIM_API hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned fl) {
    unsigned long long c;
    if (!FLAGS_TO_CUDA(event_flags, fl, &c)) return hipErrorInvalidValue;
    CUDA(sc_EventCreateWithFlags((void **)event, (unsigned)c));
}

SHIM_API hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    CUDA(sc_EventRecord((void *)event, cu_stream(stream)));
}
SHIM_API hipError_t hipEventSynchronize(hipEvent_t event) { CUDA(sc_EventSynchronize((void *)event)); }
SHIM_API hipError_t hipEventQuery(hipEvent_t event) { CUDA(sc_EventQuery((void *)event)); }
SHIM_API hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop) {
    CUDA(sc_EventElapsedTime(ms, (void *)start, (void *)stop));
}
SHIM_API hipError_t hipEventDestroy(hipEvent_t event) { CUDA(sc_EventDestroy((void *)event)); }

/* ------------------------------------------------------------------ memory */
SHIM_API hipError_t hipMalloc(void **ptr, size_t size) { CUDA(sc_Malloc(ptr, size)); }
SHIM_API hipError_t hipFree(void *ptr) { CUDA(sc_Free(ptr)); }
SHIM_API hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream) {
    CUDA(sc_MallocAsync(dev_ptr, size, cu_stream(stream)));
}
SHIM_API hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream) {
    CUDA(sc_FreeAsync(dev_ptr, cu_stream(stream)));
}

SHIM_API hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int fl) {
    unsigned long long c;
    if (!FLAGS_TO_CUDA(host_malloc_flags, fl, &c)) return hipErrorInvalidValue;
    CUDA(sc_HostAlloc(ptr, size, (unsigned)c));
}
SHIM_API hipError_t hipHostFree(void *ptr) { CUDA(sc_FreeHost(ptr)); }

SHIM_API hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind) {
    long long c;
    if (!TO_CUDA(memcpy_kinds, kind, &c)) return hipErrorInvalidMemcpyDirection;
    CUDA(sc_Memcpy(dst, src, sizeBytes, (int)c));
}

SHIM_API hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
                                   hipStream_t stream) {
    long long c;
    if (!TO_CUDA(memcpy_kinds, kind, &c)) return hipErrorInvalidMemcpyDirection;
    CUDA(sc_MemcpyAsync(dst, src, sizeBytes, (int)c, cu_stream(stream)));
}

SHIM_API hipError_t hipMemcpyPeerAsync(void *dst, int dstDeviceId, const void *src,
                                       int srcDevice, size_t sizeBytes, hipStream_t stream) {
    CUDA(sc_MemcpyPeerAsync(dst, dstDeviceId, src, srcDevice, sizeBytes, cu_stream(stream)));
}

SHIM_API hipError_t hipDeviceCanAccessPeer(int *canAccessPeer, int deviceId, int peerDeviceId) {
    CUDA(sc_DeviceCanAccessPeer(canAccessPeer, deviceId, peerDeviceId));
}

SHIM_API hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags) {
    CUDA(sc_DeviceEnablePeerAccess(peerDeviceId, flags));
}

SHIM_API hipError_t hipGetLastError(void) { CUDA(sc_GetLastError()); }

SHIM_API hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream) {
    CUDA(sc_MemsetAsync(dst, value, sizeBytes, cu_stream(stream)));
}

SHIM_API hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *mem_pool, int device) {
    CUDA(sc_DeviceGetDefaultMemPool((void **)mem_pool, device));
}

SHIM_API hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value) {
    long long c;
    if (!TO_CUDA(mempool_attrs, attr, &c)) return hipErrorInvalidValue;
    CUDA(sc_MemPoolSetAttribute((void *)mem_pool, (int)c, value));
}

SHIM_API hipError_t hipMemPoolGetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value) {
    long long c;
    if (!TO_CUDA(mempool_attrs, attr, &c)) return hipErrorInvalidValue;
    CUDA(sc_MemPoolGetAttribute((void *)mem_pool, (int)c, value));
}

SHIM_API hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr) {
    int type = 0, device = 0;
    void *dptr = NULL, *hptr = NULL;
    long long h;
    if (!attributes) return hipErrorInvalidValue;
    int st = sc_PointerGetAttributes(ptr, &type, &device, &dptr, &hptr);
    if (st != 0) return from_cuda(st);
    if (!TO_HIP(memory_types, type, &h)) return hipErrorInvalidValue;
    memset(attributes, 0, sizeof *attributes);
    attributes->type = (hipMemoryType)h;
    attributes->device = device;
    attributes->devicePointer = dptr;
    attributes->hostPointer = hptr;
    attributes->isManaged = h == (long long)hipMemoryTypeManaged;
    return hipSuccess;
}

/* ------------------------------------------------------------------ capture and graphs */
SHIM_API hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode) {
    long long c;
    if (!TO_CUDA(capture_modes, mode, &c)) return hipErrorInvalidValue;
    CUDA(sc_StreamBeginCapture(cu_stream(stream), (int)c));
}

SHIM_API hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph) {
    CUDA(sc_StreamEndCapture(cu_stream(stream), (void **)pGraph));
}

SHIM_API hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus) {
    int cuda_status = 0;
    long long h;
    if (!pCaptureStatus) return hipErrorInvalidValue;
    int st = sc_StreamIsCapturing(cu_stream(stream), &cuda_status);
    if (st != 0) return from_cuda(st);
    if (!TO_HIP(capture_statuses, cuda_status, &h)) return hipErrorUnknown;
    *pCaptureStatus = (hipStreamCaptureStatus)h;
    return hipSuccess;
}

SHIM_API hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *pGraphExec, hipGraph_t graph,
                                                 unsigned long long fl) {
    unsigned long long c;
    if (!FLAGS_TO_CUDA(graph_instantiate_flags, fl, &c)) return hipErrorInvalidValue;
    CUDA(sc_GraphInstantiateWithFlags((void **)pGraphExec, (void *)graph, c));
}

SHIM_API hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream) {
    CUDA(sc_GraphLaunch((void *)graphExec, cu_stream(stream)));
}

/* HIP keeps the pre-CUDA-12 form: the error node and the result apart */
SHIM_API hipError_t hipGraphExecUpdate(hipGraphExec_t hGraphExec, hipGraph_t hGraph,
                                       hipGraphNode_t *hErrorNode_out,
                                       hipGraphExecUpdateResult *updateResult_out) {
    int cuda_result = 0;
    void *node = NULL;
    long long h;
    int st = sc_GraphExecUpdate((void *)hGraphExec, (void *)hGraph, &cuda_result, &node);
    if (hErrorNode_out) *hErrorNode_out = (hipGraphNode_t)node;
    if (updateResult_out) {
        *updateResult_out = TO_HIP(graph_update_results, cuda_result, &h)
            ? (hipGraphExecUpdateResult)h : hipGraphExecUpdateError;
    }
    return from_cuda(st);
}

SHIM_API hipError_t hipGraphDestroy(hipGraph_t graph) { CUDA(sc_GraphDestroy((void *)graph)); }
SHIM_API hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec) {
    CUDA(sc_GraphExecDestroy((void *)graphExec));
}
