# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._cudnn_backend`` (the cuDNN 9 backend API),
for other Cython modules to cimport: descriptors, the ``nogil`` execution and the submit
path's bound launch. See ``_cudnn_backend.pyx`` for the wrapping contract."""
from libc.stdint cimport int64_t, uintptr_t



cdef class Descriptor:
    cdef void* ptr
    cdef readonly int kind
    cdef readonly bint finalized
    cdef list _refs          # descriptors set on this one: cuDNN keeps pointers to them

    cdef int _set(self, int attr, int attr_type, int64_t count, const void* values) except -1
    cdef int _get(self, int attr, int attr_type, int64_t requested, int64_t* count,
                  void* values) except -1


cdef class GraphLaunch:
    cdef Descriptor plan
    cdef int n
    cdef int64_t uids[32]        # MAX_PACK of the .pyx
    cdef object resolve
    cdef object lock
    cdef object lc               # the launch context the variant pack was built for
    cdef object marker           # its workspace_ptr moves with the stream's workspace
    cdef uintptr_t ws_ptr
    cdef void* handle
    cdef void* vp                # finalized variant pack, owned

    cdef int _rebuild(self, object lc) except -1


# Build a variant pack, execute, destroy it; the first failing status (0: success).
cdef int execute_c(void* handle, void* plan, int n, const int64_t* uids, void** pointers,
                   void* workspace) noexcept nogil
# A finalized variant pack in *out (NULL on failure); the first failing status.
cdef int make_pack(void** out, int n, const int64_t* uids, void** pointers,
                   void* workspace) noexcept nogil
# cudnnSetStream; CUDNN_STATUS_NOT_INITIALIZED when the table lacks it.
cdef int set_stream_c(void* handle, void* stream) noexcept nogil
