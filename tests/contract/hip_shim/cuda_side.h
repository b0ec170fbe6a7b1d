/* cuda_side.h: what hip_on_cuda.c calls of the CUDA runtime, in plain C types.
 *
 * ROCm's and NVIDIA's headers cannot share a translation unit (both define char1, dim3,
 * ...), so the CUDA calls live in cuda_side.c, compiled against cuda_runtime_api.h, and
 * take and return CUDA's own values as int (statuses, enums) or unsigned (flags). Handles
 * are void*. Nothing here is exported from the shim (hidden visibility).
 */
#ifndef HIP_SHIM_CUDA_SIDE_H
#define HIP_SHIM_CUDA_SIDE_H

#include <stddef.h>

#include "hip_shim_pairs.h"

#define SC_API __attribute__((visibility("hidden")))

/* CUDA's values of each domain's pairs, in list order (sc_cuda_errors[i] is the CUDA
 * enumerator paired with the i-th HIP one) */
#define SC_DECLARE_TABLE(list, name) \
    extern SC_API const long long sc_cuda_##name[]; extern SC_API const int sc_cuda_##name##_count;
SHIM_DOMAINS(SC_DECLARE_TABLE)
#undef SC_DECLARE_TABLE

/* cudaDeviceProp fields the shim copies into hipDeviceProp_tR0600 */
struct sc_props {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock;
    int warpSize, maxThreadsPerBlock, major, minor, multiProcessorCount, concurrentKernels;
    int pciBusID, pciDeviceID, l2CacheSize;
};

SC_API const char *sc_GetErrorName(int status);
SC_API const char *sc_GetErrorString(int status);
SC_API int sc_GetDeviceCount(int *count);
SC_API int sc_SetDevice(int device);
SC_API int sc_GetDevice(int *device);
SC_API int sc_DeviceGetAttribute(int *value, int attr, int device);
SC_API int sc_GetDeviceProperties(struct sc_props *out, int device);
SC_API int sc_MemGetInfo(size_t *free_b, size_t *total);
SC_API int sc_RuntimeGetVersion(int *v);
SC_API int sc_DriverGetVersion(int *v);
SC_API int sc_DeviceSynchronize(void);
SC_API int sc_DeviceGetStreamPriorityRange(int *least, int *greatest);
SC_API void *sc_StreamPerThread(void);
SC_API int sc_StreamCreateWithFlags(void **s, unsigned flags);
SC_API int sc_StreamCreateWithPriority(void **s, unsigned flags, int priority);
SC_API int sc_StreamDestroy(void *s);
SC_API int sc_StreamSynchronize(void *s);
SC_API int sc_StreamQuery(void *s);
SC_API int sc_StreamWaitEvent(void *s, void *e, unsigned flags);
SC_API int sc_LaunchHostFunc(void *s, void (*fn)(void *), void *user);
SC_API int sc_EventCreateWithFlags(void **e, unsigned flags);
SC_API int sc_EventRecord(void *e, void *s);
SC_API int sc_EventSynchronize(void *e);
SC_API int sc_EventQuery(void *e);
SC_API int sc_EventElapsedTime(float *ms, void *start, void *end);
SC_API int sc_EventDestroy(void *e);
SC_API int sc_Malloc(void **p, size_t n);
SC_API int sc_Free(void *p);
SC_API int sc_MallocAsync(void **p, size_t n, void *s);
SC_API int sc_FreeAsync(void *p, void *s);
SC_API int sc_HostAlloc(void **p, size_t n, unsigned flags);
SC_API int sc_FreeHost(void *p);
SC_API int sc_Memcpy(void *dst, const void *src, size_t n, int kind);
SC_API int sc_MemcpyAsync(void *dst, const void *src, size_t n, int kind, void *s);
SC_API int sc_MemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device,
                              size_t n, void *s);
SC_API int sc_DeviceCanAccessPeer(int *can, int device, int peer);
SC_API int sc_DeviceEnablePeerAccess(int peer, unsigned flags);
SC_API int sc_GetLastError(void);
SC_API int sc_MemsetAsync(void *dst, int value, size_t n, void *s);
SC_API int sc_DeviceGetDefaultMemPool(void **pool, int device);
SC_API int sc_MemPoolSetAttribute(void *pool, int attr, void *value);
SC_API int sc_MemPoolGetAttribute(void *pool, int attr, void *value);
SC_API int sc_PointerGetAttributes(const void *ptr, int *type, int *device, void **dptr,
                                   void **hptr);
SC_API int sc_StreamBeginCapture(void *s, int mode);
SC_API int sc_StreamEndCapture(void *s, void **graph);
SC_API int sc_StreamIsCapturing(void *s, int *status);
SC_API int sc_GraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags);
SC_API int sc_GraphLaunch(void *exec, void *s);
SC_API int sc_GraphExecUpdate(void *exec, void *graph, int *result, void **error_node);
SC_API int sc_GraphDestroy(void *graph);
SC_API int sc_GraphExecDestroy(void *exec);

#endif /* HIP_SHIM_CUDA_SIDE_H */
