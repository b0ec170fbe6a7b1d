/* hip_min.h: the HIP runtime declarations the hip-on-CUDA shim implements, written out so
 * that the shim builds where no ROCm header exists (the H200 machine).
 *
 * Every value and layout here is one of ROCm's public headers' (hip/hip_runtime_api.h,
 * hip/driver_types.h of Debian's libamdhip64-dev 6.4.3 and 7.2.4, identical for all of
 * them): hip_min_check.c includes the real header next to these lists and fails to
 * compile, or exits non-zero, where one differs (tests/contract/test_hip_shim.py builds
 * and runs it against both releases).
 *
 * Modes:
 *   default               our own declarations (types, enumerators, structs);
 *   HIP_SHIM_REAL_HEADERS the real <hip/hip_runtime_api.h> instead (then the compiler
 *                         checks every shim definition against AMD's prototype);
 *   HIP_MIN_CHECK         the lists and our structs only, under other names, for
 *                         hip_min_check.c (the real header is included there).
 */
#ifndef HIP_MIN_H
#define HIP_MIN_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ values: (name, value) */
#define HIP_MIN_ERRORS(X) \
    X(hipSuccess, 0) X(hipErrorInvalidValue, 1) X(hipErrorOutOfMemory, 2) \
    X(hipErrorNotInitialized, 3) X(hipErrorDeinitialized, 4) \
    X(hipErrorInvalidDevicePointer, 17) X(hipErrorInvalidMemcpyDirection, 21) \
    X(hipErrorInsufficientDriver, 35) X(hipErrorNoDevice, 100) X(hipErrorInvalidDevice, 101) \
    X(hipErrorInvalidContext, 201) X(hipErrorNoBinaryForGpu, 209) \
    X(hipErrorPeerAccessUnsupported, 217) X(hipErrorPeerAccessAlreadyEnabled, 704) \
    X(hipErrorInvalidHandle, 400) X(hipErrorNotReady, 600) X(hipErrorIllegalAddress, 700) \
    X(hipErrorLaunchOutOfResources, 701) X(hipErrorHostMemoryAlreadyRegistered, 712) \
    X(hipErrorHostMemoryNotRegistered, 713) X(hipErrorLaunchFailure, 719) \
    X(hipErrorNotSupported, 801) X(hipErrorStreamCaptureUnsupported, 900) \
    X(hipErrorStreamCaptureInvalidated, 901) X(hipErrorStreamCaptureMerge, 902) \
    X(hipErrorStreamCaptureUnmatched, 903) X(hipErrorStreamCaptureUnjoined, 904) \
    X(hipErrorStreamCaptureIsolation, 905) X(hipErrorStreamCaptureImplicit, 906) \
    X(hipErrorCapturedEvent, 907) X(hipErrorStreamCaptureWrongThread, 908) \
    X(hipErrorGraphExecUpdateFailure, 910) X(hipErrorUnknown, 999)

/* hipDeviceAttribute_t is numbered on its own (not CUDA's cudaDeviceAttr) */
#define HIP_MIN_DEVICE_ATTRS(X) \
    X(hipDeviceAttributeConcurrentKernels, 8) X(hipDeviceAttributeIntegrated, 16) \
    X(hipDeviceAttributeL2CacheSize, 19) X(hipDeviceAttributeComputeCapabilityMajor, 23) \
    X(hipDeviceAttributeMaxThreadsPerBlock, 56) \
    X(hipDeviceAttributeComputeCapabilityMinor, 61) \
    X(hipDeviceAttributeMultiprocessorCount, 63) X(hipDeviceAttributePciBusId, 67) \
    X(hipDeviceAttributePciDeviceId, 68) X(hipDeviceAttributeMaxSharedMemoryPerBlock, 74) \
    X(hipDeviceAttributeUnifiedAddressing, 85) X(hipDeviceAttributeWarpSize, 87) \
    X(hipDeviceAttributeMemoryPoolsSupported, 88)

/* ROCm >= 6 numbering (ROCm 5 had {Host, Device, Array, Unified} from 0) */
#define HIP_MIN_MEMORY_TYPES(X) \
    X(hipMemoryTypeUnregistered, 0) X(hipMemoryTypeHost, 1) X(hipMemoryTypeDevice, 2) \
    X(hipMemoryTypeManaged, 3)

#define HIP_MIN_MEMCPY_KINDS(X) \
    X(hipMemcpyHostToHost, 0) X(hipMemcpyHostToDevice, 1) X(hipMemcpyDeviceToHost, 2) \
    X(hipMemcpyDeviceToDevice, 3) X(hipMemcpyDefault, 4)

#define HIP_MIN_MEMPOOL_ATTRS(X) \
    X(hipMemPoolReuseFollowEventDependencies, 1) X(hipMemPoolReuseAllowOpportunistic, 2) \
    X(hipMemPoolReuseAllowInternalDependencies, 3) X(hipMemPoolAttrReleaseThreshold, 4) \
    X(hipMemPoolAttrReservedMemCurrent, 5) X(hipMemPoolAttrReservedMemHigh, 6) \
    X(hipMemPoolAttrUsedMemCurrent, 7) X(hipMemPoolAttrUsedMemHigh, 8)

#define HIP_MIN_CAPTURE_MODES(X) \
    X(hipStreamCaptureModeGlobal, 0) X(hipStreamCaptureModeThreadLocal, 1) \
    X(hipStreamCaptureModeRelaxed, 2)

#define HIP_MIN_CAPTURE_STATUSES(X) \
    X(hipStreamCaptureStatusNone, 0) X(hipStreamCaptureStatusActive, 1) \
    X(hipStreamCaptureStatusInvalidated, 2)

#define HIP_MIN_GRAPH_UPDATE_RESULTS(X) \
    X(hipGraphExecUpdateSuccess, 0) X(hipGraphExecUpdateError, 1) \
    X(hipGraphExecUpdateErrorTopologyChanged, 2) X(hipGraphExecUpdateErrorNodeTypeChanged, 3) \
    X(hipGraphExecUpdateErrorFunctionChanged, 4) \
    X(hipGraphExecUpdateErrorParametersChanged, 5) X(hipGraphExecUpdateErrorNotSupported, 6) \
    X(hipGraphExecUpdateErrorUnsupportedFunctionChange, 7)

#define HIP_MIN_GRAPH_INSTANTIATE_FLAGS(X) \
    X(hipGraphInstantiateFlagAutoFreeOnLaunch, 1) X(hipGraphInstantiateFlagUpload, 2) \
    X(hipGraphInstantiateFlagDeviceLaunch, 4) X(hipGraphInstantiateFlagUseNodePriority, 8)

/* macros in the real header */
#define HIP_MIN_FLAGS(X) \
    X(hipStreamDefault, 0x0) X(hipStreamNonBlocking, 0x1) \
    X(hipEventDefault, 0x0) X(hipEventBlockingSync, 0x1) X(hipEventDisableTiming, 0x2) \
    X(hipEventInterprocess, 0x4) \
    X(hipHostMallocDefault, 0x0) X(hipHostMallocPortable, 0x1) X(hipHostMallocMapped, 0x2) \
    X(hipHostMallocWriteCombined, 0x4)

/* ------------------------------------------------------------------ layouts: (field) */
/* hipDeviceProp_tR0600 (what hipGetDevicePropertiesR0600 fills; 1472 bytes): the fields the
 * shim fills; every other byte stays zero */
#define HIP_MIN_PROPS_FIELDS(X) \
    X(name) X(totalGlobalMem) X(sharedMemPerBlock) X(warpSize) X(maxThreadsPerBlock) \
    X(major) X(minor) X(multiProcessorCount) X(concurrentKernels) X(pciBusID) \
    X(pciDeviceID) X(l2CacheSize) X(gcnArchName)
#define HIP_MIN_PROPS_BYTES 1472
#define HIP_MIN_POINTER_FIELDS(X) \
    X(type) X(device) X(devicePointer) X(hostPointer) X(isManaged) X(allocationFlags)
#define HIP_MIN_POINTER_BYTES 32

#define HIP_MIN_ENUMERATOR(name, value) name = value,

#if defined(HIP_MIN_CHECK)
#  define HIP_MIN_PROPS hip_min_props_t
#  define HIP_MIN_POINTER hip_min_pointer_t
#  define HIP_MIN_MEMORY_TYPE int
#  define HIP_MIN_LAYOUTS 1
#elif defined(HIP_SHIM_REAL_HEADERS)
#  include <hip/hip_runtime_api.h>
#else
#  define HIP_MIN_PROPS hipDeviceProp_tR0600
#  define HIP_MIN_POINTER hipPointerAttribute_t
#  define HIP_MIN_MEMORY_TYPE hipMemoryType
#  define HIP_MIN_LAYOUTS 1
#  define HIP_MIN_TYPES 1
#endif

#ifdef HIP_MIN_TYPES
typedef enum hipError_t { HIP_MIN_ERRORS(HIP_MIN_ENUMERATOR) } hipError_t;
typedef enum hipDeviceAttribute_t { HIP_MIN_DEVICE_ATTRS(HIP_MIN_ENUMERATOR) } hipDeviceAttribute_t;
typedef enum hipMemoryType { HIP_MIN_MEMORY_TYPES(HIP_MIN_ENUMERATOR) } hipMemoryType;
typedef enum hipMemcpyKind { HIP_MIN_MEMCPY_KINDS(HIP_MIN_ENUMERATOR) } hipMemcpyKind;
typedef enum hipMemPoolAttr { HIP_MIN_MEMPOOL_ATTRS(HIP_MIN_ENUMERATOR) } hipMemPoolAttr;
typedef enum hipStreamCaptureMode {
    HIP_MIN_CAPTURE_MODES(HIP_MIN_ENUMERATOR)
} hipStreamCaptureMode;
typedef enum hipStreamCaptureStatus {
    HIP_MIN_CAPTURE_STATUSES(HIP_MIN_ENUMERATOR)
} hipStreamCaptureStatus;
typedef enum hipGraphExecUpdateResult {
    HIP_MIN_GRAPH_UPDATE_RESULTS(HIP_MIN_ENUMERATOR)
} hipGraphExecUpdateResult;
typedef enum hipGraphInstantiateFlags {
    HIP_MIN_GRAPH_INSTANTIATE_FLAGS(HIP_MIN_ENUMERATOR)
} hipGraphInstantiateFlags;
enum { HIP_MIN_FLAGS(HIP_MIN_ENUMERATOR) };

typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipMemPoolHandle_t *hipMemPool_t;
typedef struct ihipGraph *hipGraph_t;
typedef struct hipGraphNode *hipGraphNode_t;
typedef struct hipGraphExec *hipGraphExec_t;
typedef void (*hipHostFn_t)(void *userData);
#define hipStreamPerThread ((hipStream_t)2)
#endif

#ifdef HIP_MIN_LAYOUTS
/* offsets as comments; hip_min_check.c compares each with the real struct's */
typedef struct HIP_MIN_PROPS {
    char name[256];                          /*    0 */
    char hip_min_pad0[288 - 256];            /* uuid, luid, luidDeviceNodeMask */
    size_t totalGlobalMem;                   /*  288 */
    size_t sharedMemPerBlock;                /*  296 */
    char hip_min_pad1[308 - 304];
    int warpSize;                            /*  308 */
    char hip_min_pad2[320 - 312];
    int maxThreadsPerBlock;                  /*  320 */
    char hip_min_pad3[360 - 324];
    int major;                               /*  360 */
    int minor;                               /*  364 */
    char hip_min_pad4[388 - 368];
    int multiProcessorCount;                 /*  388 */
    char hip_min_pad5[576 - 392];
    int concurrentKernels;                   /*  576 */
    char hip_min_pad6[584 - 580];
    int pciBusID;                            /*  584 */
    int pciDeviceID;                         /*  588 */
    char hip_min_pad7[616 - 592];
    int l2CacheSize;                         /*  616 */
    char hip_min_pad8[1160 - 620];
    char gcnArchName[256];                   /* 1160 */
    char hip_min_pad9[HIP_MIN_PROPS_BYTES - 1416];
} HIP_MIN_PROPS;

typedef struct HIP_MIN_POINTER {
    HIP_MIN_MEMORY_TYPE type;                /*  0 */
    int device;                              /*  4 */
    void *devicePointer;                     /*  8 */
    void *hostPointer;                       /* 16 */
    int isManaged;                           /* 24 */
    unsigned allocationFlags;                /* 28 */
} HIP_MIN_POINTER;
#endif

/* The HIP version the shim reports (hipRuntimeGetVersion): the ROCm ABI it declares,
 * HIP_VERSION = major * 10000000 + minor * 100000 + patch (hip/hip_version.h) */
#define HIP_SHIM_VERSION 70200000

#endif /* HIP_MIN_H */
