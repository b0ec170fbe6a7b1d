# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._gpu``: the ``Runtime`` type (one per GPU
runtime, CUDA or HIP) and its ``nogil`` calls, for other Cython modules to cimport.

Each ``c_*`` method raises (taking the GIL only then) on a non-zero status or a missing
symbol and returns 0, except the ``noexcept`` ones, which return a status for callers that
fall back instead; the hot calls of a launch path need no Python object.
"""
from ._gpu_api cimport CudaOnlyFns, HipOnlyFns, PointerAttributes, RuntimeConstants, RuntimeFns
from ._loader cimport Library, LibraryTable


cdef class Runtime(LibraryTable):
    cdef readonly str kind                # "cuda" or "hip"
    cdef RuntimeFns f
    cdef CudaOnlyFns f_cuda               # filled for kind "cuda" only
    cdef HipOnlyFns f_hip                 # filled for kind "hip" only
    cdef RuntimeConstants c
    cdef readonly dict constants          # name -> value, as selected for the loaded version
    cdef readonly dict constant_sources   # name -> the header and version it was read from
    cdef readonly dict statuses           # the status table: value -> (name, error type)
    cdef int _props_arch_offset           # offset of gcnArchName in the properties struct; -1: none
    cdef int _runtime_version

    cdef int _select_constants(self, int version) except -1
    cdef object _error(self, int status, str call)
    cdef bytes _properties(self, int device)

    # ------------------------------------------------------------------ nogil C API
    cdef int c_check(self, int status, const char* call) except -1 nogil
    cdef int c_set_device(self, int device) except -1 nogil
    cdef int c_stream_synchronize(self, void* stream) except -1 nogil
    cdef int c_stream_wait_event(self, void* stream, void* event) except -1 nogil
    cdef int c_event_record(self, void* event, void* stream) except -1 nogil
    cdef int c_event_synchronize(self, void* event) except -1 nogil
    cdef int c_event_query(self, void* event) except -1 nogil         # 1 complete, 0 pending
    cdef int c_malloc_async(self, void** ptr, size_t nbytes, void* stream) except -1 nogil
    cdef int c_free_async(self, void* ptr, void* stream) except -1 nogil
    cdef int c_memcpy_async(self, void* dst, const void* src, size_t nbytes, int kind,
                            void* stream) except -1 nogil
    cdef int c_memset_async(self, void* dst, int value, size_t nbytes,
                            void* stream) except -1 nogil
    cdef int c_graph_launch(self, void* graph_exec, void* stream) except -1 nogil
    # never raise: for launch paths that fall back rather than raise (GraphLaunch)
    cdef bint c_stream_capturing(self, void* stream) noexcept nogil   # unknown: True
    # end the capture into *graph: 0, or the end's status (-1: no symbol or no graph) with
    # *graph NULL and the stream no longer capturing (ended again where the failed end
    # left it capturing, that graph destroyed)
    cdef int c_end_capture(self, void* stream, void** graph) noexcept nogil


cdef class ExecCounter:
    # executions of one pattern's plans on a device and the host time their launches took;
    # bumped in C (with the GIL held, so no count is lost) by launches that take one
    cdef readonly long long executions
    cdef readonly long long host_ns

    cdef inline void bump(self, long long ns) noexcept:
        self.executions += 1
        self.host_ns += ns
