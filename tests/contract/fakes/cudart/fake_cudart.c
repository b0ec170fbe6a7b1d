/* libfakecudart.so: the CUDA runtime calls hipdnn_async uses, on the host.
 *
 * Compiled against CUDA 13's own cuda_runtime_api.h / driver_types.h (downloaded from the
 * nvidia-cuda-runtime wheel at test time), so every definition here must match the
 * header's prototype, and every constant is the header's. One device (or
 * $HIPDNN_ASYNC_FAKE_DEVICES; peer access between them unless $HIPDNN_ASYNC_FAKE_PEER=0),
 * "device" memory is host memory tracked by fake_core,
 * streams are worker threads that run work in order after a small delay.
 *
 * Semantics kept from the CUDA runtime API reference (CUDA 13):
 *  - cudaMemcpyAsync with pageable host memory: host-to-device returns once the source has
 *    been read (staged), device-to-host returns once the copy is done; with pinned memory
 *    (cudaMallocHost / cudaHostAlloc / cudaHostRegister) both are fully asynchronous.
 *  - cudaFree and cudaStreamDestroy: cudaFree synchronizes the device; a destroyed
 *    stream's pending work still completes.
 *  - cudaEventQuery / cudaEventSynchronize on an event never recorded: cudaSuccess.
 *  - cudaEventElapsedTime needs two completed events without cudaEventDisableTiming.
 *  - cudaPointerGetAttributes of an unregistered host pointer: cudaSuccess with
 *    type cudaMemoryTypeUnregistered.
 * Misuse that real CUDA turns into a crash or corruption is a violation in the log.
 *
 * Several devices: streams, events and allocations belong to the device current when they
 * were made (fake_core). A call that enqueues work on a stream (copies, memsets, stream-
 * ordered allocation, event records, host functions, graph launches, the DNN fakes'
 * kernels) records "on_device" (the stream's) and "current_device" and is a violation when
 * they differ: the library must set the device on every thread before such a call
 * (cudaSetDevice is per host thread). A kernel's memory must be its device's
 * (fake_mem_check); cudaMemcpyPeerAsync records whether peer access was enabled.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <driver_types.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_core.h"
#include "fake_cudart_capture.h"
#include "fake_cudart_checks.h"   /* generated: our constants against this header */

#define RT_VERSION 13000          /* CUDA 13.0, what the H200 machine's cudart reports */

static __thread int current_device;
static __thread cudaError_t last_error;

static int device_count_env(void) {
    const char *e = getenv("HIPDNN_ASYNC_FAKE_DEVICES");
    return e && *e ? atoi(e) : 1;
}

/* the stream work of FN runs on device dev: a violation unless it is the current one */
static int on_device(fake_rec *R, const char *FN, int dev) {
    fake_rec_int(R, "on_device", dev);
    fake_rec_int(R, "current_device", current_device);
    if (dev >= 0 && dev != current_device) {
        fake_violation(FN, "a stream of device %d used while the calling thread's current "
                       "device is %d (cudaSetDevice is per host thread)", dev, current_device);
        return 0;
    }
    return 1;
}

static cudaError_t done(fake_rec *r, cudaError_t st) {
    if (st != cudaSuccess) last_error = st;
    return (cudaError_t)fake_rec_end(r, (int)st);
}

#define BEGIN(name) fake_rec *R = fake_rec_begin("call", name); const char *FN = name; (void)FN
#define INJECT() do { int inj_ = fake_injected(FN); if (inj_) return done(R, (cudaError_t)inj_); } while (0)
#define STREAM_OR_FAIL(var, handle) \
    fake_stream *var = fake_stream_get((void *)(handle), FN); \
    fake_rec_int(R, "stream", fake_stream_id(var)); \
    if (!var) return done(R, cudaErrorInvalidResourceHandle)

/* ------------------------------------------------------------------ errors */
#define NAME(e) case e: return #e;
const char *cudaGetErrorName(cudaError_t error) {
    switch (error) {
        NAME(cudaSuccess) NAME(cudaErrorInvalidValue) NAME(cudaErrorMemoryAllocation)
        NAME(cudaErrorInitializationError) NAME(cudaErrorInvalidDevice)
        NAME(cudaErrorInvalidResourceHandle) NAME(cudaErrorNotReady)
        NAME(cudaErrorIllegalAddress) NAME(cudaErrorLaunchFailure) NAME(cudaErrorNoDevice)
        NAME(cudaErrorInsufficientDriver) NAME(cudaErrorNotSupported) NAME(cudaErrorUnknown)
        NAME(cudaErrorInvalidMemcpyDirection) NAME(cudaErrorNotPermitted)
        NAME(cudaErrorStreamCaptureUnsupported) NAME(cudaErrorHostMemoryAlreadyRegistered)
        NAME(cudaErrorHostMemoryNotRegistered) NAME(cudaErrorPeerAccessAlreadyEnabled)
        NAME(cudaErrorPeerAccessUnsupported)
        default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        default: return "unknown error (fake cudart)";
    }
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

/* ------------------------------------------------------------------ devices */
cudaError_t cudaGetDeviceCount(int *count) {
    BEGIN("cudaGetDeviceCount");
    INJECT();
    int n = device_count_env();
    if (n <= 0) { *count = 0; return done(R, cudaErrorNoDevice); }
    *count = n;
    fake_rec_int(R, "count", n);
    return done(R, cudaSuccess);
}

cudaError_t cudaSetDevice(int device) {
    BEGIN("cudaSetDevice");
    fake_rec_int(R, "device", device);
    INJECT();
    if (device < 0 || device >= device_count_env()) return done(R, cudaErrorInvalidDevice);
    current_device = device;
    fake_set_current_device(device);
    return done(R, cudaSuccess);
}

cudaError_t cudaGetDevice(int *device) {
    BEGIN("cudaGetDevice");
    INJECT();
    *device = current_device;
    return done(R, cudaSuccess);
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
    BEGIN("cudaSetDeviceFlags");
    fake_rec_uint(R, "flags", flags);
    INJECT();
    return done(R, cudaSuccess);
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    BEGIN("cudaDeviceGetAttribute");
    fake_rec_int(R, "attr", attr);
    fake_rec_int(R, "device", device);
    INJECT();
    if (device < 0 || device >= device_count_env()) return done(R, cudaErrorInvalidDevice);
    int v = 0;
    switch (attr) {                         /* an H200: sm_90, 132 SMs */
        case cudaDevAttrComputeCapabilityMajor: v = 9; break;
        case cudaDevAttrComputeCapabilityMinor: v = 0; break;
        case cudaDevAttrMultiProcessorCount: v = 132; break;
        case cudaDevAttrMemoryPoolsSupported: v = 1; break;
        case cudaDevAttrWarpSize: v = 32; break;
        case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
        case cudaDevAttrUnifiedAddressing: v = 1; break;
        default: v = 0; break;
    }
    *value = v;
    fake_rec_int(R, "value", v);
    return done(R, cudaSuccess);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    BEGIN("cudaGetDeviceProperties");
    fake_rec_int(R, "device", device);
    INJECT();
    if (device < 0 || device >= device_count_env()) return done(R, cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "Fake H200 (hipdnn_async contract)");
    prop->totalGlobalMem = fake_mem_total();
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    return done(R, cudaSuccess);
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    BEGIN("cudaMemGetInfo");
    INJECT();
    *total = fake_mem_total();
    *free_b = fake_mem_total() - fake_mem_in_use();
    return done(R, cudaSuccess);
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    BEGIN("cudaRuntimeGetVersion");
    INJECT();
    *v = RT_VERSION;
    return done(R, cudaSuccess);
}

cudaError_t cudaDriverGetVersion(int *v) {
    BEGIN("cudaDriverGetVersion");
    INJECT();
    *v = RT_VERSION;
    return done(R, cudaSuccess);
}

cudaError_t cudaDeviceSynchronize(void) {
    BEGIN("cudaDeviceSynchronize");
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    fake_device_synchronize();
    return done(R, cudaSuccess);
}

/* ------------------------------------------------------------------ streams */
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    BEGIN("cudaDeviceGetStreamPriorityRange");
    INJECT();
    if (least) *least = 0;           /* as on sm_90: [0, -5] */
    if (greatest) *greatest = -5;
    return done(R, cudaSuccess);
}

static cudaError_t create_stream(fake_rec *R, const char *FN, cudaStream_t *p, unsigned flags,
                                 int priority) {
    fake_rec_uint(R, "flags", flags);
    fake_rec_int(R, "priority", priority);
    INJECT();
    if (!p || (flags & ~(unsigned)cudaStreamNonBlocking)) return done(R, cudaErrorInvalidValue);
    if (priority > 0) priority = 0;       /* clamped to the range, as CUDA does */
    if (priority < -5) priority = -5;
    fake_stream *s = fake_stream_new(flags, priority);
    *p = (cudaStream_t)s;
    fake_rec_int(R, "id", fake_stream_id(s));
    fake_rec_ptr(R, "handle", s);
    fake_rec_int(R, "device", fake_stream_device(s));   /* the current one */
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamCreate(cudaStream_t *p) {
    BEGIN("cudaStreamCreate");
    return create_stream(R, FN, p, 0, 0);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *p, unsigned int flags) {
    BEGIN("cudaStreamCreateWithFlags");
    return create_stream(R, FN, p, flags, 0);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *p, unsigned int flags, int priority) {
    BEGIN("cudaStreamCreateWithPriority");
    return create_stream(R, FN, p, flags, priority);
}

cudaError_t cudaStreamGetFlags(cudaStream_t h, unsigned int *flags) {
    BEGIN("cudaStreamGetFlags");
    STREAM_OR_FAIL(s, h);
    INJECT();
    *flags = fake_stream_flags(s);
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamGetPriority(cudaStream_t h, int *priority) {
    BEGIN("cudaStreamGetPriority");
    STREAM_OR_FAIL(s, h);
    INJECT();
    *priority = fake_stream_priority(s);
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamDestroy(cudaStream_t h) {
    BEGIN("cudaStreamDestroy");
    if (!h) { fake_violation(FN, "destroying the NULL stream"); return done(R, cudaErrorInvalidResourceHandle); }
    STREAM_OR_FAIL(s, h);
    INJECT();
    fake_stream_destroy(s);
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
    BEGIN("cudaStreamSynchronize");
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "synchronizes")) return done(R, cudaErrorStreamCaptureUnsupported);
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    fake_stream_synchronize(s);
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
    BEGIN("cudaStreamQuery");
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "queries")) return done(R, cudaErrorStreamCaptureUnsupported);
    return done(R, fake_stream_idle(s) ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t event, unsigned int flags) {
    BEGIN("cudaStreamWaitEvent");
    STREAM_OR_FAIL(s, h);
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) makes wait on an event")) return done(R, cudaErrorStreamCaptureUnsupported);
    if (!e) return done(R, cudaErrorInvalidResourceHandle);
    fake_stream_wait_event(s, e);
    return done(R, cudaSuccess);
}

typedef struct { cudaHostFn_t fn; void *data; } host_fn_arg;

static void run_host_fn(void *p) {
    host_fn_arg *a = (host_fn_arg *)p;
    a->fn(a->data);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *userData) {
    BEGIN("cudaLaunchHostFunc");
    STREAM_OR_FAIL(s, h);
    fake_rec_ptr(R, "fn", (const void *)(uintptr_t)fn);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) launches a host function on")) return done(R, cudaErrorStreamCaptureUnsupported);
    if (!fn) return done(R, cudaErrorInvalidValue);
    on_device(R, FN, fake_stream_device(s));
    host_fn_arg *a = (host_fn_arg *)malloc(sizeof *a);
    a->fn = fn;
    a->data = userData;
    fake_stream_enqueue(s, "cudaLaunchHostFunc", run_host_fn, a, free);
    return done(R, cudaSuccess);
}

/* ------------------------------------------------------------------ events */
static cudaError_t create_event(fake_rec *R, const char *FN, cudaEvent_t *p, unsigned flags) {
    fake_rec_uint(R, "flags", flags);
    INJECT();
    unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!p || (flags & ~known)) return done(R, cudaErrorInvalidValue);
    fake_event *e = fake_event_new(flags);
    *p = (cudaEvent_t)e;
    fake_rec_int(R, "id", fake_event_id(e));
    return done(R, cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t *p) {
    BEGIN("cudaEventCreate");
    return create_event(R, FN, p, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *p, unsigned int flags) {
    BEGIN("cudaEventCreateWithFlags");
    return create_event(R, FN, p, flags);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t h) {
    BEGIN("cudaEventRecord");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) records an event on")) return done(R, cudaErrorStreamCaptureUnsupported);
    if (!e) return done(R, cudaErrorInvalidResourceHandle);
    on_device(R, FN, fake_stream_device(s));
    if (fake_stream_device(s) >= 0 && fake_event_device(e) != fake_stream_device(s)) {
        fake_violation(FN, "event %d of device %d recorded on a stream of device %d",
                       fake_event_id(e), fake_event_device(e), fake_stream_device(s));
        return done(R, cudaErrorInvalidResourceHandle);   /* as CUDA: not the same device */
    }
    fake_event_record(e, s);
    return done(R, cudaSuccess);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t h, unsigned int flags) {
    BEGIN("cudaEventRecordWithFlags");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    fake_rec_uint(R, "flags", flags);
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) records an event on")) return done(R, cudaErrorStreamCaptureUnsupported);
    if (!e) return done(R, cudaErrorInvalidResourceHandle);
    fake_event_record(e, s);
    return done(R, cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    BEGIN("cudaEventQuery");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    INJECT();
    if (!e) return done(R, cudaErrorInvalidResourceHandle);
    return done(R, fake_event_done(e) ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    BEGIN("cudaEventSynchronize");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    if (e && !(fake_event_flags(e) & cudaEventBlockingSync))
        fake_rec_int(R, "spins", 1);       /* a real one would busy-wait a CPU core */
    if (!e) return done(R, cudaErrorInvalidResourceHandle);
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    fake_event_synchronize(e);             /* wait first: an injected failure is the GPU's */
    INJECT();
    return done(R, cudaSuccess);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    BEGIN("cudaEventElapsedTime");
    fake_event *a = fake_event_get(start, FN);
    fake_event *b = fake_event_get(end, FN);
    fake_rec_int(R, "start", fake_event_id(a));
    fake_rec_int(R, "end", fake_event_id(b));
    INJECT();
    if (!a || !b) return done(R, cudaErrorInvalidResourceHandle);
    if ((fake_event_flags(a) | fake_event_flags(b)) & cudaEventDisableTiming)
        return done(R, cudaErrorInvalidResourceHandle);
    if (!fake_event_recorded(a) || !fake_event_recorded(b)) return done(R, cudaErrorInvalidResourceHandle);
    if (!fake_event_done(a) || !fake_event_done(b)) return done(R, cudaErrorNotReady);
    *ms = (float)(fake_event_time_ms(b) - fake_event_time_ms(a));
    return done(R, cudaSuccess);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    BEGIN("cudaEventDestroy");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    INJECT();
    if (!e) return done(R, cudaErrorInvalidResourceHandle);
    fake_event_destroy(e);
    return done(R, cudaSuccess);
}

/* ------------------------------------------------------------------ memory */
cudaError_t cudaMalloc(void **p, size_t size) {
    BEGIN("cudaMalloc");
    fake_rec_uint(R, "size", size);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    if (!p) return done(R, cudaErrorInvalidValue);
    if (size > fake_mem_total() - fake_mem_in_use()) return done(R, cudaErrorMemoryAllocation);
    *p = size ? fake_mem_alloc(size, FAKE_MEM_DEVICE) : NULL;
    fake_rec_ptr(R, "ptr", *p);
    return done(R, cudaSuccess);
}

cudaError_t cudaFree(void *p) {
    BEGIN("cudaFree");
    fake_rec_ptr(R, "ptr", p);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    fake_device_synchronize();             /* cudaFree synchronizes the device */
    if (!p) return done(R, cudaSuccess);
    if (fake_mem_free(p, FAKE_MEM_DEVICE) != 0) {
        fake_violation(FN, "%p is not a live cudaMalloc/cudaMallocAsync allocation", p);
        return done(R, cudaErrorInvalidValue);
    }
    return done(R, cudaSuccess);
}

typedef struct { void *p; } free_arg;

static void do_free(void *a) {
    void *p = ((free_arg *)a)->p;
    if (fake_mem_free(p, FAKE_MEM_DEVICE) != 0)
        fake_violation("cudaFreeAsync", "%p is not a live allocation when the stream frees it", p);
}

cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t h) {
    BEGIN("cudaMallocAsync");
    fake_rec_uint(R, "size", size);
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) allocates on")) return done(R, cudaErrorStreamCaptureUnsupported);
    on_device(R, FN, fake_stream_device(s));
    if (!p) return done(R, cudaErrorInvalidValue);
    if (size > fake_mem_total() - fake_mem_in_use()) return done(R, cudaErrorMemoryAllocation);
    *p = size ? fake_mem_alloc(size, FAKE_MEM_DEVICE) : NULL;
    fake_rec_ptr(R, "ptr", *p);
    return done(R, cudaSuccess);
}

cudaError_t cudaMallocFromPoolAsync(void **p, size_t size, cudaMemPool_t pool, cudaStream_t h) {
    BEGIN("cudaMallocFromPoolAsync");
    fake_rec_uint(R, "size", size);
    fake_rec_int(R, "pool", fake_handle_id(pool));
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) allocates on")) return done(R, cudaErrorStreamCaptureUnsupported);
    (void)s;
    if (!p || fake_handle_kind(pool) != FAKE_KIND_POOL) return done(R, cudaErrorInvalidValue);
    *p = size ? fake_mem_alloc(size, FAKE_MEM_DEVICE) : NULL;
    fake_rec_ptr(R, "ptr", *p);
    return done(R, cudaSuccess);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t h) {
    BEGIN("cudaFreeAsync");
    fake_rec_ptr(R, "ptr", p);
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (fake_capture_on(s, FN, "(not modeled) frees on")) return done(R, cudaErrorStreamCaptureUnsupported);
    on_device(R, FN, fake_stream_device(s));
    if (!p) return done(R, cudaSuccess);
    if (!fake_mem_find(p, NULL, NULL, NULL)) {
        fake_violation(FN, "%p is not a live device allocation", p);
        return done(R, cudaErrorInvalidValue);
    }
    free_arg *a = (free_arg *)malloc(sizeof *a);
    a->p = p;
    fake_stream_enqueue(s, NULL, do_free, a, free);   /* freed in stream order */
    return done(R, cudaSuccess);
}

cudaError_t cudaMallocHost(void **p, size_t size) {
    BEGIN("cudaMallocHost");
    fake_rec_uint(R, "size", size);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    *p = fake_mem_alloc(size, FAKE_MEM_HOST);
    fake_rec_ptr(R, "ptr", *p);
    return done(R, cudaSuccess);
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) {
    BEGIN("cudaHostAlloc");
    fake_rec_uint(R, "size", size);
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    *p = fake_mem_alloc(size, FAKE_MEM_HOST);
    fake_rec_ptr(R, "ptr", *p);
    return done(R, cudaSuccess);
}

cudaError_t cudaFreeHost(void *p) {
    BEGIN("cudaFreeHost");
    fake_rec_ptr(R, "ptr", p);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    fake_device_synchronize();
    if (p && fake_mem_free(p, FAKE_MEM_HOST) != 0) {
        fake_violation(FN, "%p is not pinned host memory from cudaMallocHost/cudaHostAlloc", p);
        return done(R, cudaErrorInvalidValue);
    }
    return done(R, cudaSuccess);
}

cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags) {
    BEGIN("cudaHostRegister");
    fake_rec_ptr(R, "ptr", p);
    fake_rec_uint(R, "size", size);
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    if (fake_mem_find(p, NULL, NULL, NULL)) return done(R, cudaErrorHostMemoryAlreadyRegistered);
    fake_mem_register(p, size, FAKE_MEM_HOST);
    return done(R, cudaSuccess);
}

cudaError_t cudaHostUnregister(void *p) {
    BEGIN("cudaHostUnregister");
    fake_rec_ptr(R, "ptr", p);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    fake_device_synchronize();
    int kind = 0;
    void *base = NULL;
    if (!fake_mem_find(p, &base, NULL, &kind) || kind != FAKE_MEM_HOST || base != p)
        return done(R, cudaErrorHostMemoryNotRegistered);
    fake_mem_unregister(p);
    return done(R, cudaSuccess);
}

static int pinned(const void *p) {
    int kind = 0;
    return fake_mem_find(p, NULL, NULL, &kind) && kind == FAKE_MEM_HOST;
}

/* checks one side of a copy: device memory where the kind says so */
static int copy_side_ok(const char *fn, const void *p, size_t n, int device, const char *what) {
    if (!n) return 1;
    if (device) return fake_mem_check(p, n, fn, what);
    int kind = 0;
    if (fake_mem_find(p, NULL, NULL, &kind) && kind != FAKE_MEM_HOST) {
        fake_violation(fn, "%s: %p is device memory but the copy kind says host", what, p);
        return 0;
    }
    return 1;
}

static cudaError_t check_copy(fake_rec *R, const char *FN, void *dst, const void *src,
                              size_t n, enum cudaMemcpyKind kind) {
    fake_rec_ptr(R, "dst", dst);
    fake_rec_ptr(R, "src", src);
    fake_rec_uint(R, "count", n);
    fake_rec_int(R, "kind", kind);
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) return cudaSuccess;
    if ((int)kind < 0 || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    if (!copy_side_ok(FN, dst, n, dst_dev, "dst") || !copy_side_ok(FN, src, n, src_dev, "src"))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

typedef struct { void *dst; const void *src; void *staged; size_t n; } copy_arg;

static void do_copy(void *p) {
    copy_arg *a = (copy_arg *)p;
    memcpy(a->dst, a->staged ? a->staged : a->src, a->n);
}

static void free_copy(void *p) {
    copy_arg *a = (copy_arg *)p;
    free(a->staged);
    free(a);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    BEGIN("cudaMemcpy");
    cudaError_t st = check_copy(R, FN, dst, src, n, kind);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    if (st) return done(R, st);
    /* the legacy default stream: ordered after work on it (our streams are
     * non-blocking, so nothing else) */
    fake_stream *s = fake_stream_get(NULL, FN);
    fake_stream_synchronize(s);
    if (n) memmove(dst, src, n);
    return done(R, cudaSuccess);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t h) {
    BEGIN("cudaMemcpyAsync");
    cudaError_t st = check_copy(R, FN, dst, src, n, kind);
    STREAM_OR_FAIL(s, h);
    INJECT();
    on_device(R, FN, fake_stream_device(s));
    if (st) return done(R, st);
    if (!n) return done(R, cudaSuccess);
    copy_arg *a = (copy_arg *)calloc(1, sizeof *a);
    a->dst = dst;
    a->src = src;
    a->n = n;
    int h2d_pageable = kind == cudaMemcpyHostToDevice && !pinned(src);
    int d2h_pageable = kind == cudaMemcpyDeviceToHost && !pinned(dst);
    if (h2d_pageable) {                    /* staged now: the caller may reuse src */
        a->staged = malloc(n);
        memcpy(a->staged, src, n);
    }
    fake_rec_int(R, "pageable", h2d_pageable || d2h_pageable);
    if ((h2d_pageable || d2h_pageable) && fake_capture_on(s, FN, "(not modeled) copies pageable host memory on")) {
        free_copy(a);
        return done(R, cudaErrorStreamCaptureUnsupported);
    }
    fake_stream_enqueue(s, "cudaMemcpyAsync", do_copy, a, free_copy);
    if (d2h_pageable) fake_stream_synchronize(s);   /* returns once the copy is done */
    return done(R, cudaSuccess);
}

typedef struct { void *dst; int value; size_t n; } set_arg;

static void do_set(void *p) {
    set_arg *a = (set_arg *)p;
    memset(a->dst, a->value, a->n);
}

cudaError_t cudaMemset(void *dst, int value, size_t n) {
    BEGIN("cudaMemset");
    fake_rec_ptr(R, "dst", dst);
    fake_rec_int(R, "value", value);
    fake_rec_uint(R, "count", n);
    INJECT();
    if (fake_capture_unsafe(FN)) return done(R, cudaErrorStreamCaptureUnsupported);
    if (n && !fake_mem_check(dst, n, FN, "dst")) return done(R, cudaErrorInvalidValue);
    fake_stream_synchronize(fake_stream_get(NULL, FN));
    memset(dst, value, n);
    return done(R, cudaSuccess);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t h) {
    BEGIN("cudaMemsetAsync");
    fake_rec_ptr(R, "dst", dst);
    fake_rec_int(R, "value", value);
    fake_rec_uint(R, "count", n);
    STREAM_OR_FAIL(s, h);
    INJECT();
    on_device(R, FN, fake_stream_device(s));
    if (n && !fake_mem_check(dst, n, FN, "dst")) return done(R, cudaErrorInvalidValue);
    set_arg *a = (set_arg *)malloc(sizeof *a);
    a->dst = dst;
    a->value = value;
    a->n = n;
    fake_stream_enqueue(s, "cudaMemsetAsync", do_set, a, free);
    return done(R, cudaSuccess);
}

/* ------------------------------------------------------------------ pools */
typedef struct { unsigned long long release_threshold; } fake_pool;
static fake_pool default_pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_init(void) { fake_handle_register(&default_pool, FAKE_KIND_POOL); }

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
    BEGIN("cudaDeviceGetDefaultMemPool");
    fake_rec_int(R, "device", device);
    INJECT();
    if (device < 0 || device >= device_count_env()) return done(R, cudaErrorInvalidDevice);
    pthread_once(&pool_once, pool_init);
    *pool = (cudaMemPool_t)(void *)&default_pool;
    fake_rec_int(R, "id", fake_handle_id(&default_pool));
    return done(R, cudaSuccess);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
    BEGIN("cudaMemPoolSetAttribute");
    fake_rec_int(R, "pool", fake_handle_id(pool));
    fake_rec_int(R, "attr", attr);
    INJECT();
    if (fake_handle_kind(pool) != FAKE_KIND_POOL || !value) return done(R, cudaErrorInvalidValue);
    fake_pool *p = (fake_pool *)(void *)pool;
    if (attr == cudaMemPoolAttrReleaseThreshold) {
        p->release_threshold = *(unsigned long long *)value;
        fake_rec_uint(R, "value", p->release_threshold);
    }
    return done(R, cudaSuccess);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
    BEGIN("cudaMemPoolGetAttribute");
    fake_rec_int(R, "pool", fake_handle_id(pool));
    fake_rec_int(R, "attr", attr);
    INJECT();
    if (fake_handle_kind(pool) != FAKE_KIND_POOL || !value) return done(R, cudaErrorInvalidValue);
    fake_pool *p = (fake_pool *)(void *)pool;
    if (attr == cudaMemPoolAttrReleaseThreshold) *(unsigned long long *)value = p->release_threshold;
    else if (attr == cudaMemPoolAttrUsedMemCurrent || attr == cudaMemPoolAttrReservedMemCurrent)
        *(unsigned long long *)value = fake_mem_in_use();
    else *(unsigned long long *)value = 0;
    return done(R, cudaSuccess);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
    BEGIN("cudaMemPoolTrimTo");
    fake_rec_int(R, "pool", fake_handle_id(pool));
    fake_rec_uint(R, "keep", keep);
    INJECT();
    return done(R, fake_handle_kind(pool) == FAKE_KIND_POOL ? cudaSuccess : cudaErrorInvalidValue);
}

/* ------------------------------------------------------------------ pointers */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr) {
    BEGIN("cudaPointerGetAttributes");
    fake_rec_ptr(R, "ptr", ptr);
    INJECT();
    if (!attr) return done(R, cudaErrorInvalidValue);
    memset(attr, 0, sizeof *attr);
    int kind = 0;
    if (!fake_mem_find(ptr, NULL, NULL, &kind)) {
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = -2;
        fake_rec_int(R, "type", attr->type);
        return done(R, cudaSuccess);
    }
    attr->device = kind == FAKE_MEM_HOST ? 0 : fake_mem_device(ptr);
    if (kind == FAKE_MEM_HOST) {
        attr->type = cudaMemoryTypeHost;
        attr->hostPointer = (void *)ptr;
        attr->devicePointer = (void *)ptr;
    } else {
        attr->type = kind == FAKE_MEM_MANAGED ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
        attr->devicePointer = (void *)ptr;
        attr->hostPointer = kind == FAKE_MEM_MANAGED ? (void *)ptr : NULL;
    }
    fake_rec_int(R, "type", attr->type);
    fake_rec_int(R, "device", attr->device);
    return done(R, cudaSuccess);
}

/* ------------------------------------------------------------------ peer access */
static int peer_enabled[16][16];   /* [device][peer]: cudaDeviceEnablePeerAccess done */
static pthread_mutex_t peer_mu = PTHREAD_MUTEX_INITIALIZER;

static int peer_possible(int device, int peer) {
    const char *e = getenv("HIPDNN_ASYNC_FAKE_PEER");
    return device != peer && !(e && *e == '0');
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
    BEGIN("cudaDeviceCanAccessPeer");
    fake_rec_int(R, "device", device);
    fake_rec_int(R, "peer", peerDevice);
    INJECT();
    int n = device_count_env();
    if (device < 0 || device >= n || peerDevice < 0 || peerDevice >= n || n > 16)
        return done(R, cudaErrorInvalidDevice);
    if (!canAccessPeer) return done(R, cudaErrorInvalidValue);
    *canAccessPeer = peer_possible(device, peerDevice);
    fake_rec_int(R, "can", *canAccessPeer);
    return done(R, cudaSuccess);
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
    BEGIN("cudaDeviceEnablePeerAccess");
    fake_rec_int(R, "peer", peerDevice);
    fake_rec_uint(R, "flags", flags);
    fake_rec_int(R, "current_device", current_device);
    INJECT();
    if (flags) return done(R, cudaErrorInvalidValue);
    if (peerDevice < 0 || peerDevice >= device_count_env() || peerDevice >= 16
            || peerDevice == current_device)
        return done(R, cudaErrorInvalidDevice);
    if (!peer_possible(current_device, peerDevice)) return done(R, cudaErrorPeerAccessUnsupported);
    pthread_mutex_lock(&peer_mu);
    int was = peer_enabled[current_device][peerDevice];
    peer_enabled[current_device][peerDevice] = 1;
    pthread_mutex_unlock(&peer_mu);
    return done(R, was ? cudaErrorPeerAccessAlreadyEnabled : cudaSuccess);
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                size_t count, cudaStream_t h) {
    BEGIN("cudaMemcpyPeerAsync");
    fake_rec_ptr(R, "dst", dst);
    fake_rec_int(R, "dst_device", dstDevice);
    fake_rec_ptr(R, "src", src);
    fake_rec_int(R, "src_device", srcDevice);
    fake_rec_uint(R, "count", count);
    STREAM_OR_FAIL(s, h);
    INJECT();
    on_device(R, FN, fake_stream_device(s));
    int n = device_count_env();
    if (dstDevice < 0 || dstDevice >= n || srcDevice < 0 || srcDevice >= n || n > 16)
        return done(R, cudaErrorInvalidDevice);
    pthread_mutex_lock(&peer_mu);
    /* the direction a peer copy uses: either device mapping the other's memory */
    int peer = peer_enabled[dstDevice][srcDevice] || peer_enabled[srcDevice][dstDevice];
    pthread_mutex_unlock(&peer_mu);
    fake_rec_int(R, "peer_enabled", peer);
    if (!count) return done(R, cudaSuccess);
    void *base = NULL;
    size_t size = 0;
    int kind = 0;
    const struct { const void *p; int dev; const char *what; } side[2] = {
        {dst, dstDevice, "dst"}, {src, srcDevice, "src"}};
    for (int i = 0; i < 2; i++) {
        if (!fake_mem_find(side[i].p, &base, &size, &kind) || kind == FAKE_MEM_HOST
                || (const char *)side[i].p + count > (const char *)base + size) {
            fake_violation(FN, "%s: %p + %zu bytes is not device memory", side[i].what,
                           side[i].p, count);
            return done(R, cudaErrorInvalidValue);
        }
        if (fake_mem_device(side[i].p) != side[i].dev) {
            fake_violation(FN, "%s: %p is memory of device %d, not of device %d", side[i].what,
                           side[i].p, fake_mem_device(side[i].p), side[i].dev);
            return done(R, cudaErrorInvalidValue);
        }
    }
    copy_arg *a = (copy_arg *)calloc(1, sizeof *a);
    a->dst = dst;
    a->src = src;
    a->n = count;
    fake_stream_enqueue(s, "cudaMemcpyPeerAsync", do_copy, a, free_copy);
    return done(R, cudaSuccess);
}
