/* hip_shim_pairs.h: which HIP enumerator is which CUDA enumerator, one list per domain.
 *
 * Each pair names a HIP and a CUDA enumerator; neither value is written here. The HIP
 * side (hip_on_cuda.c) reads the HIP names (hip_min.h or the real ROCm header), the CUDA
 * side (cuda_side.c) reads the CUDA names from NVIDIA's cuda_runtime_api.h /
 * driver_types.h, and a value is translated through its index in the list. A HIP value
 * without a pair is refused (hipErrorInvalidValue); a CUDA status without one becomes
 * hipErrorUnknown (its CUDA name and text stay readable through hipGetErrorString).
 */
#ifndef HIP_SHIM_PAIRS_H
#define HIP_SHIM_PAIRS_H

/* statuses (CUDA -> HIP for results; HIP -> CUDA for hipGetErrorString) */
#define SHIM_ERRORS(X) \
    X(hipSuccess, cudaSuccess) \
    X(hipErrorInvalidValue, cudaErrorInvalidValue) \
    X(hipErrorOutOfMemory, cudaErrorMemoryAllocation) \
    X(hipErrorNotInitialized, cudaErrorInitializationError) \
    X(hipErrorDeinitialized, cudaErrorCudartUnloading) \
    X(hipErrorInvalidDevicePointer, cudaErrorInvalidDevicePointer) \
    X(hipErrorInvalidMemcpyDirection, cudaErrorInvalidMemcpyDirection) \
    X(hipErrorInsufficientDriver, cudaErrorInsufficientDriver) \
    X(hipErrorNoDevice, cudaErrorNoDevice) \
    X(hipErrorInvalidDevice, cudaErrorInvalidDevice) \
    X(hipErrorInvalidContext, cudaErrorDeviceUninitialized) \
    X(hipErrorNoBinaryForGpu, cudaErrorNoKernelImageForDevice) \
    X(hipErrorInvalidHandle, cudaErrorInvalidResourceHandle) \
    X(hipErrorNotReady, cudaErrorNotReady) \
    X(hipErrorIllegalAddress, cudaErrorIllegalAddress) \
    X(hipErrorLaunchOutOfResources, cudaErrorLaunchOutOfResources) \
    X(hipErrorHostMemoryAlreadyRegistered, cudaErrorHostMemoryAlreadyRegistered) \
    X(hipErrorHostMemoryNotRegistered, cudaErrorHostMemoryNotRegistered) \
    X(hipErrorLaunchFailure, cudaErrorLaunchFailure) \
    X(hipErrorPeerAccessUnsupported, cudaErrorPeerAccessUnsupported) \
    X(hipErrorPeerAccessAlreadyEnabled, cudaErrorPeerAccessAlreadyEnabled) \
    X(hipErrorNotSupported, cudaErrorNotSupported) \
    X(hipErrorStreamCaptureUnsupported, cudaErrorStreamCaptureUnsupported) \
    X(hipErrorStreamCaptureInvalidated, cudaErrorStreamCaptureInvalidated) \
    X(hipErrorStreamCaptureMerge, cudaErrorStreamCaptureMerge) \
    X(hipErrorStreamCaptureUnmatched, cudaErrorStreamCaptureUnmatched) \
    X(hipErrorStreamCaptureUnjoined, cudaErrorStreamCaptureUnjoined) \
    X(hipErrorStreamCaptureIsolation, cudaErrorStreamCaptureIsolation) \
    X(hipErrorStreamCaptureImplicit, cudaErrorStreamCaptureImplicit) \
    X(hipErrorCapturedEvent, cudaErrorCapturedEvent) \
    X(hipErrorStreamCaptureWrongThread, cudaErrorStreamCaptureWrongThread) \
    X(hipErrorGraphExecUpdateFailure, cudaErrorGraphExecUpdateFailure) \
    X(hipErrorUnknown, cudaErrorUnknown)

/* hipDeviceGetAttribute (HIP -> CUDA) */
#define SHIM_DEVICE_ATTRS(X) \
    X(hipDeviceAttributeConcurrentKernels, cudaDevAttrConcurrentKernels) \
    X(hipDeviceAttributeIntegrated, cudaDevAttrIntegrated) \
    X(hipDeviceAttributeL2CacheSize, cudaDevAttrL2CacheSize) \
    X(hipDeviceAttributeComputeCapabilityMajor, cudaDevAttrComputeCapabilityMajor) \
    X(hipDeviceAttributeMaxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock) \
    X(hipDeviceAttributeComputeCapabilityMinor, cudaDevAttrComputeCapabilityMinor) \
    X(hipDeviceAttributeMultiprocessorCount, cudaDevAttrMultiProcessorCount) \
    X(hipDeviceAttributePciBusId, cudaDevAttrPciBusId) \
    X(hipDeviceAttributePciDeviceId, cudaDevAttrPciDeviceId) \
    X(hipDeviceAttributeMaxSharedMemoryPerBlock, cudaDevAttrMaxSharedMemoryPerBlock) \
    X(hipDeviceAttributeUnifiedAddressing, cudaDevAttrUnifiedAddressing) \
    X(hipDeviceAttributeWarpSize, cudaDevAttrWarpSize) \
    X(hipDeviceAttributeMemoryPoolsSupported, cudaDevAttrMemoryPoolsSupported)

/* hipPointerAttribute_t.type (CUDA -> HIP) */
#define SHIM_MEMORY_TYPES(X) \
    X(hipMemoryTypeUnregistered, cudaMemoryTypeUnregistered) \
    X(hipMemoryTypeHost, cudaMemoryTypeHost) \
    X(hipMemoryTypeDevice, cudaMemoryTypeDevice) \
    X(hipMemoryTypeManaged, cudaMemoryTypeManaged)

/* hipMemcpyKind (HIP -> CUDA) */
#define SHIM_MEMCPY_KINDS(X) \
    X(hipMemcpyHostToHost, cudaMemcpyHostToHost) \
    X(hipMemcpyHostToDevice, cudaMemcpyHostToDevice) \
    X(hipMemcpyDeviceToHost, cudaMemcpyDeviceToHost) \
    X(hipMemcpyDeviceToDevice, cudaMemcpyDeviceToDevice) \
    X(hipMemcpyDefault, cudaMemcpyDefault)

/* hipMemPoolAttr (HIP -> CUDA) */
#define SHIM_MEMPOOL_ATTRS(X) \
    X(hipMemPoolReuseFollowEventDependencies, cudaMemPoolReuseFollowEventDependencies) \
    X(hipMemPoolReuseAllowOpportunistic, cudaMemPoolReuseAllowOpportunistic) \
    X(hipMemPoolReuseAllowInternalDependencies, cudaMemPoolReuseAllowInternalDependencies) \
    X(hipMemPoolAttrReleaseThreshold, cudaMemPoolAttrReleaseThreshold) \
    X(hipMemPoolAttrReservedMemCurrent, cudaMemPoolAttrReservedMemCurrent) \
    X(hipMemPoolAttrReservedMemHigh, cudaMemPoolAttrReservedMemHigh) \
    X(hipMemPoolAttrUsedMemCurrent, cudaMemPoolAttrUsedMemCurrent) \
    X(hipMemPoolAttrUsedMemHigh, cudaMemPoolAttrUsedMemHigh)

/* hipStreamCaptureMode (HIP -> CUDA), hipStreamCaptureStatus (CUDA -> HIP) */
#define SHIM_CAPTURE_MODES(X) \
    X(hipStreamCaptureModeGlobal, cudaStreamCaptureModeGlobal) \
    X(hipStreamCaptureModeThreadLocal, cudaStreamCaptureModeThreadLocal) \
    X(hipStreamCaptureModeRelaxed, cudaStreamCaptureModeRelaxed)
#define SHIM_CAPTURE_STATUSES(X) \
    X(hipStreamCaptureStatusNone, cudaStreamCaptureStatusNone) \
    X(hipStreamCaptureStatusActive, cudaStreamCaptureStatusActive) \
    X(hipStreamCaptureStatusInvalidated, cudaStreamCaptureStatusInvalidated)

/* hipGraphExecUpdate's result (CUDA -> HIP; CUDA's newer reasons become ...Error) */
#define SHIM_GRAPH_UPDATE_RESULTS(X) \
    X(hipGraphExecUpdateSuccess, cudaGraphExecUpdateSuccess) \
    X(hipGraphExecUpdateError, cudaGraphExecUpdateError) \
    X(hipGraphExecUpdateErrorTopologyChanged, cudaGraphExecUpdateErrorTopologyChanged) \
    X(hipGraphExecUpdateErrorNodeTypeChanged, cudaGraphExecUpdateErrorNodeTypeChanged) \
    X(hipGraphExecUpdateErrorFunctionChanged, cudaGraphExecUpdateErrorFunctionChanged) \
    X(hipGraphExecUpdateErrorParametersChanged, cudaGraphExecUpdateErrorParametersChanged) \
    X(hipGraphExecUpdateErrorNotSupported, cudaGraphExecUpdateErrorNotSupported) \
    X(hipGraphExecUpdateErrorUnsupportedFunctionChange, \
      cudaGraphExecUpdateErrorUnsupportedFunctionChange)

/* bit flags (HIP -> CUDA, bit by bit; a HIP bit without a pair is refused) */
#define SHIM_STREAM_FLAGS(X) X(hipStreamNonBlocking, cudaStreamNonBlocking)
#define SHIM_EVENT_FLAGS(X) \
    X(hipEventBlockingSync, cudaEventBlockingSync) \
    X(hipEventDisableTiming, cudaEventDisableTiming) \
    X(hipEventInterprocess, cudaEventInterprocess)
#define SHIM_HOST_MALLOC_FLAGS(X) \
    X(hipHostMallocPortable, cudaHostAllocPortable) \
    X(hipHostMallocMapped, cudaHostAllocMapped) \
    X(hipHostMallocWriteCombined, cudaHostAllocWriteCombined)
#define SHIM_GRAPH_INSTANTIATE_FLAGS(X) \
    X(hipGraphInstantiateFlagAutoFreeOnLaunch, cudaGraphInstantiateFlagAutoFreeOnLaunch) \
    X(hipGraphInstantiateFlagUpload, cudaGraphInstantiateFlagUpload) \
    X(hipGraphInstantiateFlagDeviceLaunch, cudaGraphInstantiateFlagDeviceLaunch) \
    X(hipGraphInstantiateFlagUseNodePriority, cudaGraphInstantiateFlagUseNodePriority)

/* every domain: (list, name of the table pair) */
#define SHIM_DOMAINS(D) \
    D(SHIM_ERRORS, errors) D(SHIM_DEVICE_ATTRS, device_attrs) \
    D(SHIM_MEMORY_TYPES, memory_types) D(SHIM_MEMCPY_KINDS, memcpy_kinds) \
    D(SHIM_MEMPOOL_ATTRS, mempool_attrs) D(SHIM_CAPTURE_MODES, capture_modes) \
    D(SHIM_CAPTURE_STATUSES, capture_statuses) \
    D(SHIM_GRAPH_UPDATE_RESULTS, graph_update_results) \
    D(SHIM_STREAM_FLAGS, stream_flags) D(SHIM_EVENT_FLAGS, event_flags) \
    D(SHIM_HOST_MALLOC_FLAGS, host_malloc_flags) \
    D(SHIM_GRAPH_INSTANTIATE_FLAGS, graph_instantiate_flags)

#endif /* HIP_SHIM_PAIRS_H */
