/* libamdhip64.so.N (fake): the HIP runtime calls hipdnn_async uses, on the host.
 *
 * Compiled (as C) against the REAL hip/hip_runtime_api.h of one ROCm release (Debian's
 * libamdhip64-dev 6.4.3 or 7.2.4, downloaded at test time), so every definition must match
 * the header's prototype and every constant is the header's. It links the shared fake core
 * (tests/contract/fakes/common/fake_core.c): the call log, failure injection, "device"
 * memory (host memory tracked as device allocations), streams that run work in order on a
 * worker thread after a delay, events. The fake MIOpen links this library, as the real
 * libMIOpen.so.1 links libamdhip64.so.N, and enqueues its kernels on these streams.
 *
 * Device: one (or $HIPDNN_ASYNC_FAKE_DEVICES) "gfx90a:sramecc+:xnack-" with 104 compute
 * units (an MI210; $HIPDNN_ASYNC_FAKE_HIP_ARCH, $HIPDNN_ASYNC_FAKE_HIP_CU override them);
 * stream-ordered memory pools unless $HIPDNN_ASYNC_FAKE_HIP_NO_POOLS is set.
 *
 * Semantics kept from hip_runtime_api.h (ROCm 6.4 / 7.2), where they match CUDA's:
 *  - hipGetDeviceProperties is the header's macro for hipGetDevicePropertiesR0600 (the
 *    symbol exported; hipDeviceProp_tR0600 layout): gcnArchName, multiProcessorCount.
 *  - hipDeviceGetAttribute uses HIP's own numbering (hipDeviceAttributeComputeCapabilityMajor
 *    is 23, not CUDA's 75); an attribute this fake does not model is hipErrorInvalidValue.
 *  - hipMemcpyAsync with pageable host memory: host-to-device returns once the source has
 *    been read (staged), device-to-host returns once the copy is done; pinned memory
 *    (hipHostMalloc / hipHostAlloc / hipHostRegister) is fully asynchronous.
 *  - hipFree synchronizes the device; a destroyed stream's pending work still completes.
 *  - hipEventQuery / hipEventSynchronize on an event never recorded: hipSuccess.
 *  - hipPointerGetAttributes of unregistered host memory: hipSuccess with
 *    hipMemoryTypeUnregistered (ROCm >= 6.0).
 * Misuse that real HIP turns into a crash or corruption is a violation in the log.
 */
#define _GNU_SOURCE
#include <hip/hip_runtime_api.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_core.h"

static __thread int current_device;
static __thread hipError_t last_error;

static int env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : dflt;
}

static int device_count_env(void) { return env_int("HIPDNN_ASYNC_FAKE_DEVICES", 1); }
static int cu_count(void) { return env_int("HIPDNN_ASYNC_FAKE_HIP_CU", 104); }
static int pools(void) { return getenv("HIPDNN_ASYNC_FAKE_HIP_NO_POOLS") == NULL; }
static const char *arch_name(void) {
    const char *e = getenv("HIPDNN_ASYNC_FAKE_HIP_ARCH");
    return e && *e ? e : "gfx90a:sramecc+:xnack-";
}

static hipError_t done(fake_rec *r, hipError_t st) {
    if (st != hipSuccess) last_error = st;
    return (hipError_t)fake_rec_end(r, (int)st);
}

#define BEGIN(name) fake_rec *R = fake_rec_begin("call", name); const char *FN = name; (void)FN
#define INJECT() do { int inj_ = fake_injected(FN); if (inj_) return done(R, (hipError_t)inj_); } while (0)
#define STREAM_OR_FAIL(var, handle) \
    fake_stream *var = fake_stream_get((void *)(handle), FN); \
    fake_rec_int(R, "stream", fake_stream_id(var)); \
    if (!var) return done(R, hipErrorInvalidResourceHandle)
#define DEVICE_OR_FAIL(d) \
    if ((d) < 0 || (d) >= device_count_env()) return done(R, hipErrorInvalidDevice)

/* ------------------------------------------------------------------ errors */
#define NAME(e) case e: return #e;
const char *hipGetErrorName(hipError_t hip_error) {
    switch (hip_error) {
        NAME(hipSuccess) NAME(hipErrorInvalidValue) NAME(hipErrorOutOfMemory)
        NAME(hipErrorNotInitialized) NAME(hipErrorInvalidDevice)
        NAME(hipErrorInvalidResourceHandle) NAME(hipErrorNotReady) NAME(hipErrorNoDevice)
        NAME(hipErrorLaunchFailure) NAME(hipErrorIllegalAddress) NAME(hipErrorNotSupported)
        NAME(hipErrorInvalidMemcpyDirection) NAME(hipErrorHostMemoryAlreadyRegistered)
        NAME(hipErrorHostMemoryNotRegistered) NAME(hipErrorInsufficientDriver)
        default: return "hipErrorUnknown";
    }
}

const char *hipGetErrorString(hipError_t hipError) {
    switch (hipError) {
        case hipSuccess: return "no error";
        case hipErrorInvalidValue: return "invalid argument";
        case hipErrorOutOfMemory: return "out of memory";
        case hipErrorInvalidDevice: return "invalid device ordinal";
        case hipErrorInvalidResourceHandle: return "invalid resource handle";
        case hipErrorNotReady: return "device not ready";
        case hipErrorIllegalAddress: return "an illegal memory access was encountered";
        case hipErrorLaunchFailure: return "unspecified launch failure";
        case hipErrorNoDevice: return "no ROCm-capable device is detected";
        case hipErrorNotSupported: return "operation not supported";
        default: return "unknown error (fake HIP)";
    }
}

hipError_t hipGetLastError(void) {
    hipError_t e = last_error;
    last_error = hipSuccess;
    return e;
}

hipError_t hipPeekAtLastError(void) { return last_error; }

/* ------------------------------------------------------------------ devices */
hipError_t hipGetDeviceCount(int *count) {
    BEGIN("hipGetDeviceCount");
    INJECT();
    int n = device_count_env();
    if (!count) return done(R, hipErrorInvalidValue);
    *count = n > 0 ? n : 0;
    fake_rec_int(R, "count", *count);
    return done(R, n > 0 ? hipSuccess : hipErrorNoDevice);
}

hipError_t hipSetDevice(int deviceId) {
    BEGIN("hipSetDevice");
    fake_rec_int(R, "device", deviceId);
    INJECT();
    DEVICE_OR_FAIL(deviceId);
    current_device = deviceId;
    return done(R, hipSuccess);
}

hipError_t hipGetDevice(int *deviceId) {
    BEGIN("hipGetDevice");
    INJECT();
    if (!deviceId) return done(R, hipErrorInvalidValue);
    *deviceId = current_device;
    return done(R, hipSuccess);
}

hipError_t hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId) {
    BEGIN("hipDeviceGetAttribute");
    fake_rec_int(R, "attr", attr);
    fake_rec_int(R, "device", deviceId);
    INJECT();
    DEVICE_OR_FAIL(deviceId);
    if (!pi) return done(R, hipErrorInvalidValue);
    int v;
    switch (attr) {                /* an MI210: gfx90a, reported as compute capability 9.0 */
        case hipDeviceAttributeComputeCapabilityMajor: v = 9; break;
        case hipDeviceAttributeComputeCapabilityMinor: v = 0; break;
        case hipDeviceAttributeMultiprocessorCount: v = cu_count(); break;
        case hipDeviceAttributeMemoryPoolsSupported: v = pools(); break;
        case hipDeviceAttributeWarpSize: v = 64; break;
        case hipDeviceAttributeMaxThreadsPerBlock: v = 1024; break;
        case hipDeviceAttributeIntegrated: v = 0; break;
        case hipDeviceAttributeConcurrentKernels: v = 1; break;
        default:
            /* not modelled: an error, so that a wrong (CUDA-numbered) attribute shows */
            fake_rec_str(R, "unmodelled", "attribute");
            return done(R, hipErrorInvalidValue);
    }
    *pi = v;
    fake_rec_int(R, "value", v);
    return done(R, hipSuccess);
}

/* the header maps hipGetDeviceProperties / hipDeviceProp_t to the R0600 names */
hipError_t hipGetDeviceProperties(hipDeviceProp_t *prop, int deviceId) {
    BEGIN("hipGetDevicePropertiesR0600");
    fake_rec_int(R, "device", deviceId);
    INJECT();
    DEVICE_OR_FAIL(deviceId);
    if (!prop) return done(R, hipErrorInvalidValue);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "Fake AMD Instinct MI210 (hipdnn_async contract)");
    snprintf(prop->gcnArchName, sizeof prop->gcnArchName, "%s", arch_name());
    prop->totalGlobalMem = fake_mem_total();
    prop->multiProcessorCount = cu_count();
    prop->major = 9;
    prop->minor = 0;
    prop->warpSize = 64;
    prop->maxThreadsPerBlock = 1024;
    prop->memoryPoolsSupported = pools();
    return done(R, hipSuccess);
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device) {
    BEGIN("hipDeviceGetName");
    INJECT();
    DEVICE_OR_FAIL(device);
    if (!name || len <= 0) return done(R, hipErrorInvalidValue);
    snprintf(name, (size_t)len, "Fake AMD Instinct MI210 (hipdnn_async contract)");
    return done(R, hipSuccess);
}

hipError_t hipMemGetInfo(size_t *free_b, size_t *total) {
    BEGIN("hipMemGetInfo");
    INJECT();
    if (!free_b || !total) return done(R, hipErrorInvalidValue);
    *total = fake_mem_total();
    *free_b = fake_mem_total() - fake_mem_in_use();
    return done(R, hipSuccess);
}

hipError_t hipRuntimeGetVersion(int *runtimeVersion) {
    BEGIN("hipRuntimeGetVersion");
    INJECT();
    if (!runtimeVersion) return done(R, hipErrorInvalidValue);
    *runtimeVersion = HIP_VERSION;      /* hip_version.h of the headers compiled against */
    fake_rec_int(R, "version", HIP_VERSION);
    return done(R, hipSuccess);
}

hipError_t hipDriverGetVersion(int *driverVersion) {
    BEGIN("hipDriverGetVersion");
    INJECT();
    if (!driverVersion) return done(R, hipErrorInvalidValue);
    *driverVersion = HIP_VERSION;
    return done(R, hipSuccess);
}

hipError_t hipDeviceSynchronize(void) {
    BEGIN("hipDeviceSynchronize");
    INJECT();
    fake_device_synchronize();
    return done(R, hipSuccess);
}

/* ------------------------------------------------------------------ streams */
hipError_t hipDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
    BEGIN("hipDeviceGetStreamPriorityRange");
    INJECT();
    if (leastPriority) *leastPriority = 0;      /* ROCm: [0, -1] */
    if (greatestPriority) *greatestPriority = -1;
    return done(R, hipSuccess);
}

static hipError_t create_stream(fake_rec *R, const char *FN, hipStream_t *p, unsigned flags,
                                int priority) {
    fake_rec_uint(R, "flags", flags);
    fake_rec_int(R, "priority", priority);
    INJECT();
    if (!p || (flags & ~(unsigned)hipStreamNonBlocking)) return done(R, hipErrorInvalidValue);
    if (priority > 0) priority = 0;
    if (priority < -1) priority = -1;
    fake_stream *s = fake_stream_new(flags, priority);
    *p = (hipStream_t)(void *)s;
    fake_rec_int(R, "id", fake_stream_id(s));
    fake_rec_ptr(R, "handle", s);
    return done(R, hipSuccess);
}

hipError_t hipStreamCreate(hipStream_t *stream) {
    BEGIN("hipStreamCreate");
    return create_stream(R, FN, stream, hipStreamDefault, 0);
}

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
    BEGIN("hipStreamCreateWithFlags");
    return create_stream(R, FN, stream, flags, 0);
}

hipError_t hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags, int priority) {
    BEGIN("hipStreamCreateWithPriority");
    return create_stream(R, FN, stream, flags, priority);
}

hipError_t hipStreamDestroy(hipStream_t stream) {
    BEGIN("hipStreamDestroy");
    if (!stream) { fake_violation(FN, "destroying the NULL stream"); return done(R, hipErrorInvalidResourceHandle); }
    STREAM_OR_FAIL(s, stream);
    INJECT();
    fake_stream_destroy(s);
    return done(R, hipSuccess);
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
    BEGIN("hipStreamSynchronize");
    STREAM_OR_FAIL(s, stream);
    fake_stream_synchronize(s);            /* wait first: an injected failure is the GPU's */
    INJECT();
    return done(R, hipSuccess);
}

hipError_t hipStreamQuery(hipStream_t stream) {
    BEGIN("hipStreamQuery");
    STREAM_OR_FAIL(s, stream);
    INJECT();
    return done(R, fake_stream_idle(s) ? hipSuccess : hipErrorNotReady);
}

hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags) {
    BEGIN("hipStreamWaitEvent");
    STREAM_OR_FAIL(s, stream);
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (!e) return done(R, hipErrorInvalidResourceHandle);
    if (flags != 0) return done(R, hipErrorInvalidValue);
    fake_stream_wait_event(s, e);
    return done(R, hipSuccess);
}

typedef struct { hipHostFn_t fn; void *data; } host_fn_arg;

static void run_host_fn(void *p) {
    host_fn_arg *a = (host_fn_arg *)p;
    a->fn(a->data);
}

hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData) {
    BEGIN("hipLaunchHostFunc");
    STREAM_OR_FAIL(s, stream);
    INJECT();
    if (!fn) return done(R, hipErrorInvalidValue);
    host_fn_arg *a = (host_fn_arg *)malloc(sizeof *a);
    a->fn = fn;
    a->data = userData;
    fake_stream_enqueue(s, "hipLaunchHostFunc", run_host_fn, a, free);
    return done(R, hipSuccess);
}

/* ------------------------------------------------------------------ events */
static hipError_t create_event(fake_rec *R, const char *FN, hipEvent_t *p, unsigned flags) {
    fake_rec_uint(R, "flags", flags);
    INJECT();
    unsigned known = hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess;
    if (!p || (flags & ~known)) return done(R, hipErrorInvalidValue);
    fake_event *e = fake_event_new(flags);
    *p = (hipEvent_t)(void *)e;
    fake_rec_int(R, "id", fake_event_id(e));
    return done(R, hipSuccess);
}

hipError_t hipEventCreate(hipEvent_t *event) {
    BEGIN("hipEventCreate");
    return create_event(R, FN, event, hipEventDefault);
}

hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags) {
    BEGIN("hipEventCreateWithFlags");
    return create_event(R, FN, event, flags);
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
    BEGIN("hipEventRecord");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    STREAM_OR_FAIL(s, stream);
    INJECT();
    if (!e) return done(R, hipErrorInvalidResourceHandle);
    fake_event_record(e, s);
    return done(R, hipSuccess);
}

hipError_t hipEventQuery(hipEvent_t event) {
    BEGIN("hipEventQuery");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    INJECT();
    if (!e) return done(R, hipErrorInvalidResourceHandle);
    return done(R, fake_event_done(e) ? hipSuccess : hipErrorNotReady);
}

hipError_t hipEventSynchronize(hipEvent_t event) {
    BEGIN("hipEventSynchronize");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    if (e && !(fake_event_flags(e) & hipEventBlockingSync))
        fake_rec_int(R, "spins", 1);       /* a real one would busy-wait a CPU core */
    if (!e) return done(R, hipErrorInvalidResourceHandle);
    fake_event_synchronize(e);             /* wait first: an injected failure is the GPU's */
    INJECT();
    return done(R, hipSuccess);
}

hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop) {
    BEGIN("hipEventElapsedTime");
    fake_event *a = fake_event_get(start, FN);
    fake_event *b = fake_event_get(stop, FN);
    fake_rec_int(R, "start", fake_event_id(a));
    fake_rec_int(R, "end", fake_event_id(b));
    INJECT();
    if (!ms) return done(R, hipErrorInvalidValue);
    if (!a || !b) return done(R, hipErrorInvalidResourceHandle);
    if ((fake_event_flags(a) | fake_event_flags(b)) & hipEventDisableTiming)
        return done(R, hipErrorInvalidResourceHandle);
    if (!fake_event_recorded(a) || !fake_event_recorded(b)) return done(R, hipErrorInvalidResourceHandle);
    if (!fake_event_done(a) || !fake_event_done(b)) return done(R, hipErrorNotReady);
    *ms = (float)(fake_event_time_ms(b) - fake_event_time_ms(a));
    return done(R, hipSuccess);
}

hipError_t hipEventDestroy(hipEvent_t event) {
    BEGIN("hipEventDestroy");
    fake_event *e = fake_event_get(event, FN);
    fake_rec_int(R, "event", fake_event_id(e));
    INJECT();
    if (!e) return done(R, hipErrorInvalidResourceHandle);
    fake_event_destroy(e);
    return done(R, hipSuccess);
}

/* ------------------------------------------------------------------ memory */
hipError_t hipMalloc(void **ptr, size_t size) {
    BEGIN("hipMalloc");
    fake_rec_uint(R, "size", size);
    INJECT();
    if (!ptr) return done(R, hipErrorInvalidValue);
    if (size > fake_mem_total() - fake_mem_in_use()) return done(R, hipErrorOutOfMemory);
    *ptr = size ? fake_mem_alloc(size, FAKE_MEM_DEVICE) : NULL;
    fake_rec_ptr(R, "ptr", *ptr);
    return done(R, hipSuccess);
}

hipError_t hipFree(void *ptr) {
    BEGIN("hipFree");
    fake_rec_ptr(R, "ptr", ptr);
    INJECT();
    fake_device_synchronize();             /* hipFree synchronizes the device */
    if (!ptr) return done(R, hipSuccess);
    if (fake_mem_free(ptr, FAKE_MEM_DEVICE) != 0) {
        fake_violation(FN, "%p is not a live hipMalloc/hipMallocAsync allocation", ptr);
        return done(R, hipErrorInvalidValue);
    }
    return done(R, hipSuccess);
}

typedef struct { void *p; } free_arg;

static void do_free(void *a) {
    void *p = ((free_arg *)a)->p;
    if (fake_mem_free(p, FAKE_MEM_DEVICE) != 0)
        fake_violation("hipFreeAsync", "%p is not a live allocation when the stream frees it", p);
}

hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream) {
    BEGIN("hipMallocAsync");
    fake_rec_uint(R, "size", size);
    STREAM_OR_FAIL(s, stream);
    INJECT();
    (void)s;
    if (!pools()) return done(R, hipErrorNotSupported);
    if (!dev_ptr) return done(R, hipErrorInvalidValue);
    if (size > fake_mem_total() - fake_mem_in_use()) return done(R, hipErrorOutOfMemory);
    *dev_ptr = size ? fake_mem_alloc(size, FAKE_MEM_DEVICE) : NULL;
    fake_rec_ptr(R, "ptr", *dev_ptr);
    return done(R, hipSuccess);
}

hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream) {
    BEGIN("hipFreeAsync");
    fake_rec_ptr(R, "ptr", dev_ptr);
    STREAM_OR_FAIL(s, stream);
    INJECT();
    if (!pools()) return done(R, hipErrorNotSupported);
    if (!dev_ptr) return done(R, hipSuccess);
    if (!fake_mem_find(dev_ptr, NULL, NULL, NULL)) {
        fake_violation(FN, "%p is not a live device allocation", dev_ptr);
        return done(R, hipErrorInvalidValue);
    }
    free_arg *a = (free_arg *)malloc(sizeof *a);
    a->p = dev_ptr;
    fake_stream_enqueue(s, NULL, do_free, a, free);   /* freed in stream order */
    return done(R, hipSuccess);
}

static hipError_t host_alloc(fake_rec *R, const char *FN, void **ptr, size_t size, unsigned flags) {
    fake_rec_uint(R, "size", size);
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (!ptr) return done(R, hipErrorInvalidValue);
    *ptr = fake_mem_alloc(size, FAKE_MEM_HOST);
    fake_rec_ptr(R, "ptr", *ptr);
    return done(R, hipSuccess);
}

hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags) {
    BEGIN("hipHostMalloc");
    return host_alloc(R, FN, ptr, size, flags);
}

hipError_t hipHostAlloc(void **ptr, size_t size, unsigned int flags) {
    BEGIN("hipHostAlloc");
    return host_alloc(R, FN, ptr, size, flags);
}

hipError_t hipHostFree(void *ptr) {
    BEGIN("hipHostFree");
    fake_rec_ptr(R, "ptr", ptr);
    INJECT();
    fake_device_synchronize();
    if (ptr && fake_mem_free(ptr, FAKE_MEM_HOST) != 0) {
        fake_violation(FN, "%p is not pinned host memory from hipHostMalloc/hipHostAlloc", ptr);
        return done(R, hipErrorInvalidValue);
    }
    return done(R, hipSuccess);
}

hipError_t hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags) {
    BEGIN("hipHostRegister");
    fake_rec_ptr(R, "ptr", hostPtr);
    fake_rec_uint(R, "size", sizeBytes);
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (!hostPtr || !sizeBytes) return done(R, hipErrorInvalidValue);
    if (fake_mem_find(hostPtr, NULL, NULL, NULL)) return done(R, hipErrorHostMemoryAlreadyRegistered);
    fake_mem_register(hostPtr, sizeBytes, FAKE_MEM_HOST);
    return done(R, hipSuccess);
}

hipError_t hipHostUnregister(void *hostPtr) {
    BEGIN("hipHostUnregister");
    fake_rec_ptr(R, "ptr", hostPtr);
    INJECT();
    fake_device_synchronize();
    int kind = 0;
    void *base = NULL;
    if (!fake_mem_find(hostPtr, &base, NULL, &kind) || kind != FAKE_MEM_HOST || base != hostPtr)
        return done(R, hipErrorHostMemoryNotRegistered);
    fake_mem_unregister(hostPtr);
    return done(R, hipSuccess);
}

static int pinned(const void *p) {
    int kind = 0;
    return fake_mem_find(p, NULL, NULL, &kind) && kind == FAKE_MEM_HOST;
}

/* one side of a copy: device memory where the kind says so */
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

static hipError_t check_copy(fake_rec *R, const char *FN, void *dst, const void *src, size_t n,
                             hipMemcpyKind kind) {
    fake_rec_ptr(R, "dst", dst);
    fake_rec_ptr(R, "src", src);
    fake_rec_uint(R, "count", n);
    fake_rec_int(R, "kind", kind);
    int dst_dev = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
    int src_dev = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
    if (kind == hipMemcpyDefault || kind == hipMemcpyHostToHost) return hipSuccess;
    if ((int)kind < 0 || kind > hipMemcpyDefault) return hipErrorInvalidMemcpyDirection;
    if (!copy_side_ok(FN, dst, n, dst_dev, "dst") || !copy_side_ok(FN, src, n, src_dev, "src"))
        return hipErrorInvalidValue;
    return hipSuccess;
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

hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind) {
    BEGIN("hipMemcpy");
    hipError_t st = check_copy(R, FN, dst, src, sizeBytes, kind);
    INJECT();
    if (st) return done(R, st);
    fake_stream_synchronize(fake_stream_get(NULL, FN));   /* ordered after the null stream */
    if (sizeBytes) memmove(dst, src, sizeBytes);
    return done(R, hipSuccess);
}

hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
                          hipStream_t stream) {
    BEGIN("hipMemcpyAsync");
    hipError_t st = check_copy(R, FN, dst, src, sizeBytes, kind);
    STREAM_OR_FAIL(s, stream);
    INJECT();
    if (st) return done(R, st);
    if (!sizeBytes) return done(R, hipSuccess);
    copy_arg *a = (copy_arg *)calloc(1, sizeof *a);
    a->dst = dst;
    a->src = src;
    a->n = sizeBytes;
    int h2d_pageable = kind == hipMemcpyHostToDevice && !pinned(src);
    int d2h_pageable = kind == hipMemcpyDeviceToHost && !pinned(dst);
    if (h2d_pageable) {                    /* staged now: the caller may reuse src */
        a->staged = malloc(sizeBytes);
        memcpy(a->staged, src, sizeBytes);
    }
    fake_rec_int(R, "pageable", h2d_pageable || d2h_pageable);
    fake_stream_enqueue(s, "hipMemcpyAsync", do_copy, a, free_copy);
    if (d2h_pageable) fake_stream_synchronize(s);   /* returns once the copy is done */
    return done(R, hipSuccess);
}

typedef struct { void *dst; int value; size_t n; } set_arg;

static void do_set(void *p) {
    set_arg *a = (set_arg *)p;
    memset(a->dst, a->value, a->n);
}

hipError_t hipMemset(void *dst, int value, size_t sizeBytes) {
    BEGIN("hipMemset");
    fake_rec_ptr(R, "dst", dst);
    fake_rec_int(R, "value", value);
    fake_rec_uint(R, "count", sizeBytes);
    INJECT();
    if (sizeBytes && !fake_mem_check(dst, sizeBytes, FN, "dst")) return done(R, hipErrorInvalidValue);
    fake_stream_synchronize(fake_stream_get(NULL, FN));
    memset(dst, value, sizeBytes);
    return done(R, hipSuccess);
}

hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream) {
    BEGIN("hipMemsetAsync");
    fake_rec_ptr(R, "dst", dst);
    fake_rec_int(R, "value", value);
    fake_rec_uint(R, "count", sizeBytes);
    STREAM_OR_FAIL(s, stream);
    INJECT();
    if (sizeBytes && !fake_mem_check(dst, sizeBytes, FN, "dst")) return done(R, hipErrorInvalidValue);
    set_arg *a = (set_arg *)malloc(sizeof *a);
    a->dst = dst;
    a->value = value;
    a->n = sizeBytes;
    fake_stream_enqueue(s, "hipMemsetAsync", do_set, a, free);
    return done(R, hipSuccess);
}

/* ------------------------------------------------------------------ pools */
typedef struct { unsigned long long release_threshold; } fake_pool;
static fake_pool default_pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_init(void) { fake_handle_register(&default_pool, FAKE_KIND_POOL); }

hipError_t hipDeviceGetDefaultMemPool(hipMemPool_t *mem_pool, int device) {
    BEGIN("hipDeviceGetDefaultMemPool");
    fake_rec_int(R, "device", device);
    INJECT();
    DEVICE_OR_FAIL(device);
    if (!pools()) return done(R, hipErrorNotSupported);
    if (!mem_pool) return done(R, hipErrorInvalidValue);
    pthread_once(&pool_once, pool_init);
    *mem_pool = (hipMemPool_t)(void *)&default_pool;
    fake_rec_int(R, "id", fake_handle_id(&default_pool));
    return done(R, hipSuccess);
}

hipError_t hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value) {
    BEGIN("hipMemPoolSetAttribute");
    fake_rec_int(R, "pool", fake_handle_id(mem_pool));
    fake_rec_int(R, "attr", attr);
    INJECT();
    if (fake_handle_kind(mem_pool) != FAKE_KIND_POOL || !value) return done(R, hipErrorInvalidValue);
    fake_pool *p = (fake_pool *)(void *)mem_pool;
    if (attr == hipMemPoolAttrReleaseThreshold) {
        p->release_threshold = *(unsigned long long *)value;
        fake_rec_uint(R, "value", p->release_threshold);
    }
    return done(R, hipSuccess);
}

hipError_t hipMemPoolGetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value) {
    BEGIN("hipMemPoolGetAttribute");
    fake_rec_int(R, "pool", fake_handle_id(mem_pool));
    fake_rec_int(R, "attr", attr);
    INJECT();
    if (fake_handle_kind(mem_pool) != FAKE_KIND_POOL || !value) return done(R, hipErrorInvalidValue);
    fake_pool *p = (fake_pool *)(void *)mem_pool;
    if (attr == hipMemPoolAttrReleaseThreshold) *(unsigned long long *)value = p->release_threshold;
    else if (attr == hipMemPoolAttrUsedMemCurrent || attr == hipMemPoolAttrReservedMemCurrent)
        *(unsigned long long *)value = fake_mem_in_use();
    else *(unsigned long long *)value = 0;
    return done(R, hipSuccess);
}

hipError_t hipMemPoolTrimTo(hipMemPool_t mem_pool, size_t min_bytes_to_hold) {
    BEGIN("hipMemPoolTrimTo");
    fake_rec_int(R, "pool", fake_handle_id(mem_pool));
    fake_rec_uint(R, "keep", min_bytes_to_hold);
    INJECT();
    return done(R, fake_handle_kind(mem_pool) == FAKE_KIND_POOL ? hipSuccess : hipErrorInvalidValue);
}

/* ------------------------------------------------------------------ pointers */
hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr) {
    BEGIN("hipPointerGetAttributes");
    fake_rec_ptr(R, "ptr", ptr);
    INJECT();
    if (!attributes) return done(R, hipErrorInvalidValue);
    memset(attributes, 0, sizeof *attributes);
    int kind = 0;
    if (!fake_mem_find(ptr, NULL, NULL, &kind)) {
        attributes->type = hipMemoryTypeUnregistered;
        attributes->device = -2;
        fake_rec_int(R, "type", attributes->type);
        return done(R, hipSuccess);
    }
    attributes->device = 0;
    if (kind == FAKE_MEM_HOST) {
        attributes->type = hipMemoryTypeHost;
        attributes->hostPointer = (void *)ptr;
        attributes->devicePointer = (void *)ptr;
    } else {
        attributes->type = kind == FAKE_MEM_MANAGED ? hipMemoryTypeManaged : hipMemoryTypeDevice;
        attributes->devicePointer = (void *)ptr;
        attributes->hostPointer = kind == FAKE_MEM_MANAGED ? (void *)ptr : NULL;
    }
    fake_rec_int(R, "type", attributes->type);
    fake_rec_int(R, "device", attributes->device);
    return done(R, hipSuccess);
}
