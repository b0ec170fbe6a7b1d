# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._cudnn_backend`` (the cuDNN 9 backend API),
for other Cython modules to cimport: the function-pointer types, the named table
``BackendFns``, the table object (``table()``), descriptors, the ``nogil`` execution and
the submit path's bound launch. See ``_cudnn_backend.pyx`` for the wrapping contract.

Signatures follow ``cudnn_graph.h`` of cuDNN 9.19.1 (the ``nvidia-cudnn-cu13`` 9.19.1.2
wheel; tests/contract compiles every type below against that header): handles and
descriptors are ``void*``, enums ``int``, ``cudnnStatus_t`` an ``int``.
"""
from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int64_t, uintptr_t

from ._gpu cimport ExecCounter, Runtime
from ._loader cimport Library, LibraryTable

# ------------------------------------------------------------------ function-pointer types
# cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*)
ctypedef int (*f_create_descriptor)(int, void**) noexcept nogil
# cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t), cudnnBackendFinalize(same)
ctypedef int (*f_descriptor)(void*) noexcept nogil
# cudnnBackendSetAttribute(desc, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
#                          int64_t elementCount, const void* arrayOfElements)
ctypedef int (*f_set_attribute)(void*, int, int, int64_t, const void*) noexcept nogil
# cudnnBackendGetAttribute(desc, name, type, int64_t requestedElementCount,
#                          int64_t* elementCount, void* arrayOfElements)
ctypedef int (*f_get_attribute)(void*, int, int, int64_t, int64_t*, void*) noexcept nogil
# cudnnBackendExecute(cudnnHandle_t, executionPlan, variantPack)
ctypedef int (*f_execute)(void*, void*, void*) noexcept nogil
ctypedef size_t (*f_version)() noexcept nogil                         # cudnnGetVersion
ctypedef const char* (*f_errstr)(int) noexcept nogil                  # cudnnGetErrorString
ctypedef void (*f_last_err)(char*, size_t) noexcept nogil             # cudnnGetLastErrorString
ctypedef int (*f_set_stream)(void*, void*) noexcept nogil             # cudnnSetStream

# ------------------------------------------------------------------ the table
# One named pointer per function; the field is the symbol without its ``cudnn`` prefix.
# Field order is the order of NAMES in _cudnn_backend.pyx (a test checks they agree).
ctypedef struct BackendFns:
    f_create_descriptor BackendCreateDescriptor
    f_descriptor BackendDestroyDescriptor
    f_set_attribute BackendSetAttribute
    f_get_attribute BackendGetAttribute
    f_descriptor BackendFinalize
    f_execute BackendExecute
    f_version GetVersion
    f_errstr GetErrorString
    f_last_err GetLastErrorString
    f_set_stream SetStream


cdef class BackendTable(LibraryTable):
    cdef BackendFns f
    cdef int _version_number


cdef BackendTable table()


cdef class Descriptor:
    cdef void* ptr
    cdef readonly int kind
    cdef readonly bint finalized
    cdef list _refs          # descriptors set on this one: cuDNN keeps pointers to them

    cdef int _set(self, int attr, int attr_type, int64_t count, const void* values) except -1
    cdef int _get(self, int attr, int attr_type, int64_t requested, int64_t* count,
                  void* values) except -1


cdef class PlanLock:
    cdef PyThread_type_lock lock

    cdef void take(self)
    cdef void give(self)


cdef class StreamPack:
    # the variant pack of one GraphLaunch on one stream; the CUDA graph captured from it
    # (cudaGraphLaunch ~2 us instead of cudnnBackendExecute's 7-14 us of host time)
    cdef object lc               # the launch context (stream) it was built for
    cdef object marker           # its workspace_ptr moves with the stream's workspace
    cdef uintptr_t ws_ptr
    cdef void* handle
    cdef void* vp                # finalized variant pack, owned
    cdef int pack_runs           # direct executions since the pack was built
    cdef bint no_graph           # this pack's capture failed: direct executions only
    cdef Runtime rt              # the stream's runtime (None: no graphs)
    cdef void* stream            # the stream (of lc)
    cdef void* gexec             # executable graph of the pack, owned, or NULL

    cdef bint stale(self) except -1
    cdef bint capturing(self) noexcept nogil
    cdef void drop_graph(self) noexcept


cdef class GraphLaunch:
    cdef Descriptor plan
    cdef int n
    cdef int64_t uids[32]        # MAX_PACK of the .pyx
    cdef object pack             # runtime.PackSpec: the pointers, and the stream's part
    cdef object lock
    cdef PlanLock plock          # the same lock when it is a PlanLock (taken in C)
    cdef readonly long long executions
    cdef readonly long long graph_launches
    cdef readonly ExecCounter counter   # None, or bumped per execution with its host time
    cdef int graph_after         # direct executions of one pack before capture; 0: never
    cdef dict packs              # launch context -> its StreamPack, oldest first
    cdef StreamPack last         # the pack of the latest launch
    cdef readonly str label      # the plan it executes, for its errors ("" : unnamed)

    cdef StreamPack _pack(self, object lc)
    cdef object _failed(self, object error)
    cdef int _build(self, StreamPack p, object lc) except -1
    cdef int _execute(self, object lc) except -1
    cdef int _direct(self, StreamPack p) except -1
    cdef int _capture(self, StreamPack p) except -1


# Build a variant pack, execute, destroy it; the first failing status (0: success).
cdef int execute_c(void* handle, void* plan, int n, const int64_t* uids, void** pointers,
                   void* workspace) noexcept nogil
# A finalized variant pack in *out (NULL on failure); the first failing status.
cdef int make_pack(void** out, int n, const int64_t* uids, void** pointers,
                   void* workspace) noexcept nogil
# cudnnSetStream; CUDNN_STATUS_NOT_INITIALIZED when the table lacks it.
cdef int set_stream_c(void* handle, void* stream) noexcept nogil
