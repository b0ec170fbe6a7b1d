/* hip_min_check.c: hip_min.h against a ROCm release's real hip_runtime_api.h.
 *
 * Compiled (with -D__HIP_PLATFORM_AMD__ and the release's include directory) and run by
 * tests/contract/test_hip_shim.py: every enumerator / macro value of hip_min.h's lists
 * must equal the header's (a static assertion), every field of our structs must sit at
 * the header's offset with its size, both structs must have the header's size, and
 * hipStreamPerThread must be the same handle (checked at run time: not a constant).
 */
#include <hip/hip_runtime_api.h>

#include <stdint.h>
#include <stdio.h>

#define HIP_MIN_CHECK 1
#include "hip_min.h"

#define SAME_VALUE(name, value) \
    _Static_assert((long long)(name) == (long long)(value), \
                   "hip_min.h: " #name " differs from the ROCm header");
HIP_MIN_ERRORS(SAME_VALUE)
HIP_MIN_DEVICE_ATTRS(SAME_VALUE)
HIP_MIN_MEMORY_TYPES(SAME_VALUE)
HIP_MIN_MEMCPY_KINDS(SAME_VALUE)
HIP_MIN_MEMPOOL_ATTRS(SAME_VALUE)
HIP_MIN_CAPTURE_MODES(SAME_VALUE)
HIP_MIN_CAPTURE_STATUSES(SAME_VALUE)
HIP_MIN_GRAPH_UPDATE_RESULTS(SAME_VALUE)
HIP_MIN_GRAPH_INSTANTIATE_FLAGS(SAME_VALUE)
HIP_MIN_FLAGS(SAME_VALUE)

#define SAME_FIELD(real, ours, f) \
    _Static_assert(offsetof(real, f) == offsetof(ours, f), "hip_min.h: offset of " #real "." #f); \
    _Static_assert(sizeof(((real *)0)->f) == sizeof(((ours *)0)->f), \
                   "hip_min.h: size of " #real "." #f);
#define SAME_PROPS_FIELD(f) SAME_FIELD(hipDeviceProp_tR0600, hip_min_props_t, f)
#define SAME_POINTER_FIELD(f) SAME_FIELD(hipPointerAttribute_t, hip_min_pointer_t, f)
HIP_MIN_PROPS_FIELDS(SAME_PROPS_FIELD)
HIP_MIN_POINTER_FIELDS(SAME_POINTER_FIELD)
_Static_assert(sizeof(hipDeviceProp_tR0600) == HIP_MIN_PROPS_BYTES,
               "hip_min.h: sizeof hipDeviceProp_tR0600");
_Static_assert(sizeof(hip_min_props_t) == HIP_MIN_PROPS_BYTES, "hip_min.h: our props size");
_Static_assert(sizeof(hipPointerAttribute_t) == HIP_MIN_POINTER_BYTES,
               "hip_min.h: sizeof hipPointerAttribute_t");
_Static_assert(sizeof(hip_min_pointer_t) == HIP_MIN_POINTER_BYTES, "hip_min.h: our pointer attributes size");

int main(void) {
    if ((uintptr_t)hipStreamPerThread != 2) {
        printf("hip_min.h: hipStreamPerThread is (hipStream_t)2, the header's is %p\n",
               (void *)hipStreamPerThread);
        return 1;
    }
    printf("hip_min.h agrees with HIP %d\n", HIP_VERSION);
    return 0;
}
