/* cuda_side.c: the CUDA half of the hip-on-CUDA shim (see hip_on_cuda.c).
 *
 * Compiled against NVIDIA's cuda_runtime_api.h / driver_types.h (CUDA 13: the
 * nvidia-cuda-runtime wheel's headers here, the machine's own on the GPU host), so each
 * call below is checked against CUDA's prototype and each table value is CUDA's own
 * enumerator. Linked against libcudart (the contract harness's fake on CPU machines, the
 * real one on a GPU machine).
 */
#include <cuda_runtime_api.h>
#include <driver_types.h>

#include <string.h>

#include "cuda_side.h"

#define SC_CUDA_VALUE(hip, cuda) (long long)(cuda),
#define SC_DEFINE_TABLE(list, name) \
    const long long sc_cuda_##name[] = { list(SC_CUDA_VALUE) }; \
    const int sc_cuda_##name##_count = (int)(sizeof sc_cuda_##name / sizeof sc_cuda_##name[0]);
SHIM_DOMAINS(SC_DEFINE_TABLE)

const char *sc_GetErrorName(int status) { return cudaGetErrorName((cudaError_t)status); }
const char *sc_GetErrorString(int status) { return cudaGetErrorString((cudaError_t)status); }
int sc_GetDeviceCount(int *count) { return (int)cudaGetDeviceCount(count); }
int sc_SetDevice(int device) { return (int)cudaSetDevice(device); }
int sc_GetDevice(int *device) { return (int)cudaGetDevice(device); }

int sc_DeviceGetAttribute(int *value, int attr, int device) {
    return (int)cudaDeviceGetAttribute(value, (enum cudaDeviceAttr)attr, device);
}

int sc_GetDeviceProperties(struct sc_props *out, int device) {
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    cudaError_t st = cudaGetDeviceProperties(&p, device);
    if (st != cudaSuccess) return (int)st;
    memset(out, 0, sizeof *out);
    memcpy(out->name, p.name, sizeof out->name);
    out->name[sizeof out->name - 1] = '\0';
    out->totalGlobalMem = p.totalGlobalMem;
    out->sharedMemPerBlock = p.sharedMemPerBlock;
    out->warpSize = p.warpSize;
    out->maxThreadsPerBlock = p.maxThreadsPerBlock;
    out->major = p.major;
    out->minor = p.minor;
    out->multiProcessorCount = p.multiProcessorCount;
    out->concurrentKernels = p.concurrentKernels;
    out->pciBusID = p.pciBusID;
    out->pciDeviceID = p.pciDeviceID;
    out->l2CacheSize = p.l2CacheSize;
    return (int)cudaSuccess;
}

int sc_MemGetInfo(size_t *free_b, size_t *total) { return (int)cudaMemGetInfo(free_b, total); }
int sc_RuntimeGetVersion(int *v) { return (int)cudaRuntimeGetVersion(v); }
int sc_DriverGetVersion(int *v) { return (int)cudaDriverGetVersion(v); }
int sc_DeviceSynchronize(void) { return (int)cudaDeviceSynchronize(); }
int sc_DeviceGetStreamPriorityRange(int *least, int *greatest) {
    return (int)cudaDeviceGetStreamPriorityRange(least, greatest);
}

void *sc_StreamPerThread(void) { return (void *)cudaStreamPerThread; }
int sc_StreamCreateWithFlags(void **s, unsigned flags) {
    return (int)cudaStreamCreateWithFlags((cudaStream_t *)s, flags);
}
int sc_StreamCreateWithPriority(void **s, unsigned flags, int priority) {
    return (int)cudaStreamCreateWithPriority((cudaStream_t *)s, flags, priority);
}
int sc_StreamDestroy(void *s) { return (int)cudaStreamDestroy((cudaStream_t)s); }
int sc_StreamSynchronize(void *s) { return (int)cudaStreamSynchronize((cudaStream_t)s); }
int sc_StreamQuery(void *s) { return (int)cudaStreamQuery((cudaStream_t)s); }
int sc_StreamWaitEvent(void *s, void *e, unsigned flags) {
    return (int)cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, flags);
}
int sc_LaunchHostFunc(void *s, void (*fn)(void *), void *user) {
    return (int)cudaLaunchHostFunc((cudaStream_t)s, (cudaHostFn_t)fn, user);
}

int sc_EventCreateWithFlags(void **e, unsigned flags) {
    return (int)cudaEventCreateWithFlags((cudaEvent_t *)e, flags);
}
int sc_EventRecord(void *e, void *s) {
    return (int)cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s);
}
int sc_EventSynchronize(void *e) { return (int)cudaEventSynchronize((cudaEvent_t)e); }
int sc_EventQuery(void *e) { return (int)cudaEventQuery((cudaEvent_t)e); }
int sc_EventElapsedTime(float *ms, void *start, void *end) {
    return (int)cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end);
}
int sc_EventDestroy(void *e) { return (int)cudaEventDestroy((cudaEvent_t)e); }

int sc_Malloc(void **p, size_t n) { return (int)cudaMalloc(p, n); }
int sc_Free(void *p) { return (int)cudaFree(p); }
int sc_MallocAsync(void **p, size_t n, void *s) {
    return (int)cudaMallocAsync(p, n, (cudaStream_t)s);
}
int sc_FreeAsync(void *p, void *s) { return (int)cudaFreeAsync(p, (cudaStream_t)s); }
int sc_HostAlloc(void **p, size_t n, unsigned flags) { return (int)cudaHostAlloc(p, n, flags); }
int sc_FreeHost(void *p) { return (int)cudaFreeHost(p); }
int sc_Memcpy(void *dst, const void *src, size_t n, int kind) {
    return (int)cudaMemcpy(dst, src, n, (enum cudaMemcpyKind)kind);
}
int sc_MemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s) {
    return (int)cudaMemcpyAsync(dst, src, n, (enum cudaMemcpyKind)kind, (cudaStream_t)s);
}
int sc_MemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t n,
                       void *s) {
    return (int)cudaMemcpyPeerAsync(dst, dst_device, src, src_device, n, (cudaStream_t)s);
}
int sc_DeviceCanAccessPeer(int *can, int device, int peer) {
    return (int)cudaDeviceCanAccessPeer(can, device, peer);
}
int sc_DeviceEnablePeerAccess(int peer, unsigned flags) {
    return (int)cudaDeviceEnablePeerAccess(peer, flags);
}
int sc_GetLastError(void) { return (int)cudaGetLastError(); }
int sc_MemsetAsync(void *dst, int value, size_t n, void *s) {
    return (int)cudaMemsetAsync(dst, value, n, (cudaStream_t)s);
}

int sc_DeviceGetDefaultMemPool(void **pool, int device) {
    return (int)cudaDeviceGetDefaultMemPool((cudaMemPool_t *)pool, device);
}
int sc_MemPoolSetAttribute(void *pool, int attr, void *value) {
    return (int)cudaMemPoolSetAttribute((cudaMemPool_t)pool, (enum cudaMemPoolAttr)attr, value);
}
int sc_MemPoolGetAttribute(void *pool, int attr, void *value) {
    return (int)cudaMemPoolGetAttribute((cudaMemPool_t)pool, (enum cudaMemPoolAttr)attr, value);
}

int sc_PointerGetAttributes(const void *ptr, int *type, int *device, void **dptr, void **hptr) {
    struct cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    cudaError_t st = cudaPointerGetAttributes(&a, ptr);
    if (st != cudaSuccess) return (int)st;
    *type = (int)a.type;
    *device = a.device;
    *dptr = a.devicePointer;
    *hptr = a.hostPointer;
    return (int)cudaSuccess;
}

int sc_StreamBeginCapture(void *s, int mode) {
    return (int)cudaStreamBeginCapture((cudaStream_t)s, (enum cudaStreamCaptureMode)mode);
}
int sc_StreamEndCapture(void *s, void **graph) {
    return (int)cudaStreamEndCapture((cudaStream_t)s, (cudaGraph_t *)graph);
}
int sc_StreamIsCapturing(void *s, int *status) {
    enum cudaStreamCaptureStatus st_out = cudaStreamCaptureStatusNone;
    cudaError_t st = cudaStreamIsCapturing((cudaStream_t)s, &st_out);
    *status = (int)st_out;
    return (int)st;
}
int sc_GraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    return (int)cudaGraphInstantiateWithFlags((cudaGraphExec_t *)exec, (cudaGraph_t)graph, flags);
}
int sc_GraphLaunch(void *exec, void *s) {
    return (int)cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s);
}
int sc_GraphExecUpdate(void *exec, void *graph, int *result, void **error_node) {
    cudaGraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    cudaError_t st = cudaGraphExecUpdate((cudaGraphExec_t)exec, (cudaGraph_t)graph, &info);
    *result = (int)info.result;
    *error_node = (void *)info.errorNode;
    return (int)st;
}
int sc_GraphDestroy(void *graph) { return (int)cudaGraphDestroy((cudaGraph_t)graph); }
int sc_GraphExecDestroy(void *exec) { return (int)cudaGraphExecDestroy((cudaGraphExec_t)exec); }
