# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._onednn``: the oneDNN symbol table and the
objects that own oneDNN handles (memory descriptors, primitive descriptors, primitives) and
the prebuilt ``Program`` whose run is the per-execution hot path. See ``_onednn.pyx``.
"""
from libc.stdint cimport int64_t

from ._onednn_api cimport ExecArg, OnednnFns
from ._loader cimport Library, LibraryTable


cdef class Onednn(LibraryTable):
    cdef OnednnFns f
    cdef void* engine                 # the CPU engine (index 0), created at load
    # from the library's OpenMP runtime (GNU libgomp); each may be NULL
    cdef int (*omp_get_max_threads)() noexcept nogil
    cdef int (*omp_get_thread_num)() noexcept nogil
    cdef int (*omp_get_num_threads)() noexcept nogil
    cdef void (*gomp_parallel)(void (*)(void*) noexcept nogil, void*, unsigned, unsigned) noexcept nogil
    cdef void (*gomp_barrier)() noexcept nogil
    cdef Library _omp                 # that runtime, kept open

    cdef int _check(self, int status, const char* call) except -1


cdef class MemoryDesc:
    cdef void* md
    cdef readonly tuple dims
    cdef readonly int data_type


cdef class PrimitiveDesc:
    cdef void* pd
    cdef readonly str kind            # "conv_fwd", "conv_bwd_data", ..., "reorder"
    cdef object _hint                 # the forward hint a backward descriptor iterates with


cdef class Primitive:
    cdef void* prim
    cdef readonly PrimitiveDesc desc


cdef class Program:
    cdef void* stream
    cdef int n_mems
    cdef void** mems                  # dnnl_memory_t per memory slot
    cdef int* mem_kind                # 0 user array, 1 workspace offset, 2 owned buffer
    cdef Py_ssize_t* mem_ref          # kind 0: index in the arrays tuple; kind 1: byte offset
    cdef void** mem_last              # the handle set last (set again only when it changes)
    cdef int n_steps
    cdef void** step_prim
    cdef int* step_nargs
    cdef ExecArg** step_args
    cdef unsigned char* step_on       # 0: skipped (e.g. a reorder of frozen constants)
    # steps [rep_first, rep_last) run rep_count times, user-array memory i advanced by
    # rep_step[i] bytes each time (a batch in chunks); rep_count 1: every step once
    cdef int rep_first, rep_last, rep_count
    cdef Py_ssize_t* rep_step
    cdef int _handle_status           # a failed dnnl_memory_set_data_handle's, in _steps
    cdef readonly Py_ssize_t n_arrays
    cdef readonly Py_ssize_t workspace_size
    cdef list _keep                   # primitives, descriptors and owned buffers kept alive

    cdef int c_run(self, tuple arrays, char* workspace) except -1
    cdef int _steps(self, void** ptrs, int first, int last, int r) noexcept nogil


# a share of host work, fn(data, i, n), run on each thread i of n of oneDNN's team (the
# callback's type is ours, written out: a ctypedef'd function-pointer type is taken for a
# vendor declaration that the header checks must cover)
cdef int run_on_team(void (*fn)(void*, int, int) noexcept nogil, void* data) noexcept nogil
cdef int team_size() noexcept nogil
cdef void team_barrier() noexcept nogil
