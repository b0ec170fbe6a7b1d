# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._binding``: a plan's binding cache, whose
hit is compared in C, for the queues' host submission path to cimport
(``queues._core.run_host``)."""

cdef enum:
    _MAX_NDIM = 8     # dims of a NumPy print kept in C (tensors have 4 or 5; flat ones 1)


cdef struct NdPrint:
    void* data
    int ndim
    int writeable
    void* descr                          # the dtype object (kept in Binding.descrs)
    Py_ssize_t dims[_MAX_NDIM]           # npy_intp is Py_ssize_t's size (Py_intptr_t)
    Py_ssize_t strides[_MAX_NDIM]


cdef class Binding:
    cdef readonly tuple keys, refs, checks, prints, descrs
    cdef readonly object buffers, workspace, fn, ws_obj, ws_print
    cdef readonly Py_ssize_t n
    cdef readonly bint plain
    cdef readonly bint fresh_ws          # a hit takes a fresh workspace (BindingCache)
    cdef readonly object recipe          # by reference only: ((role, pack index), ...)
    cdef readonly object template        # fresh_ws: a launch to copy onto each workspace
    cdef int* kinds
    cdef NdPrint* nd
    cdef object __weakref__

    cdef bint matches(self, dict variant_pack, object workspace)
    cdef Binding one_off(self, buffers, workspace, fn)


cdef class BindingCache:
    cdef object _bind, _make_fn, _take_ws
    cdef readonly list _entries           # most recent first (tests read it)
    cdef public bint enabled
    cdef readonly bint host
    cdef public Py_ssize_t hits, misses

    cpdef Binding lookup(self, variant_pack, workspace)
