# cython: language_level=3
"""Host workspaces reused across executions: the CPU device's caching pool, in C.

Why: a workspace the caller does not pass is allocated for each execution. Below about
32 MiB glibc's heap recycles such blocks, but a larger one (a 32 x 64 x 56 x 56 float32
convolution on NCHW memory needs 51 MB for its channel-blocked copies) is a fresh
``mmap`` every time, whose pages the kernel faults in and zeroes on first touch: 2-8 ms
of a 35-43 ms convolution on 2 cores, where PyTorch's allocator reuses its blocks.

How: ``take`` hands out blocks of at least ``POOL_MIN_BYTES`` as NumPy arrays over a
``HostBlock``, a buffer exporter. Every NumPy view made from the array keeps the exporter
alive, so a block returns to the pool only when the last view of it is gone (an
execution holds its workspace until it completes). The return is the exporter's C
deallocator: no Python code runs there, so a signal (SIGINT) arriving meanwhile is
raised by the next Python line, never lost in a finalizer. Every free-list operation is
C calls under the GIL with no Python code between them, so no lock is needed. The pool
keeps at most ``POOL_KEEP_BLOCKS`` free blocks and ``POOL_KEEP_BYTES`` bytes; others are
freed. A block serves a request of at least half its size. Contents are not cleared: a
workspace is scratch, as ``np.empty``'s is.
"""
from cpython.buffer cimport PyBUF_FORMAT
cimport numpy as cnp

import numpy as np

from ._buffer import ALIGN, aligned_empty

cnp.import_array()

cdef Py_ssize_t _ALIGN = ALIGN

__all__ = ["ALIGN", "POOL_MIN_BYTES", "POOL_KEEP_BLOCKS", "POOL_KEEP_BYTES", "HostBlock",
           "aligned_empty", "take", "pooled_bytes", "release_pooled"]

POOL_MIN_BYTES = 1 << 20      # smaller workspaces: np.empty (the heap recycles those)
POOL_KEEP_BLOCKS = 8          # free blocks kept
POOL_KEEP_BYTES = 1 << 30     # bytes of free blocks kept

cdef list _free = []          # owner arrays (np.uint8, 1-D, from aligned_empty) of the
                              # free blocks
cdef char* _FORMAT = b"B"     # unsigned bytes (struct module syntax)


cdef class HostBlock:
    """The first ``nbytes`` of a pooled block, exported as a writable 1-D byte buffer; the
    block returns to the pool when this object is deallocated."""
    cdef object owner
    cdef char* ptr
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]

    @property
    def nbytes(self):
        """Bytes exported (the request's size, at most the block's)."""
        return self.shape[0]

    def __getbuffer__(self, Py_buffer* buf, int flags):
        buf.buf = self.ptr
        buf.obj = self
        buf.len = self.shape[0]
        buf.readonly = 0
        buf.itemsize = 1
        if flags & PyBUF_FORMAT:
            buf.format = _FORMAT
        else:
            buf.format = NULL
        buf.ndim = 1
        buf.shape = self.shape
        buf.strides = self.strides
        buf.suboffsets = NULL
        buf.internal = NULL

    def __releasebuffer__(self, Py_buffer* buf):
        pass

    def __dealloc__(self):
        if self.owner is not None:
            _put(self.owner)


cdef Py_ssize_t _held():
    """Bytes of the free blocks."""
    cdef Py_ssize_t held = 0
    for o in _free:
        held += cnp.PyArray_NBYTES(<cnp.ndarray>o)
    return held


cdef void _put(object owner):
    """Keep ``owner`` free where the limits allow (else it is dropped, and freed)."""
    if _free is None:              # interpreter shutdown
        return
    if (len(_free) < POOL_KEEP_BLOCKS
            and _held() + cnp.PyArray_NBYTES(<cnp.ndarray>owner) <= POOL_KEEP_BYTES):
        _free.append(owner)


cdef object _small(Py_ssize_t nbytes):
    """``aligned_empty(nbytes)`` in C calls: a workspace taken per execution costs 0.4 us
    this way, 1.9 us through the Python function (its ``__array_interface__`` dict)."""
    cdef cnp.npy_intp n = nbytes + _ALIGN
    cdef cnp.ndarray raw = cnp.PyArray_EMPTY(1, &n, cnp.NPY_UINT8, 0)
    cdef size_t a = <size_t>_ALIGN
    cdef Py_ssize_t off = <Py_ssize_t>((a - <size_t>cnp.PyArray_DATA(raw) % a) % a)
    return raw[off:off + nbytes]


cdef object _pop_fit(Py_ssize_t nbytes):
    """The smallest free block of nbytes .. 2 * nbytes bytes, taken off the list; None."""
    cdef Py_ssize_t i, best = -1, size, best_size = 0
    for i in range(len(_free)):
        size = cnp.PyArray_NBYTES(<cnp.ndarray>_free[i])
        if nbytes <= size <= 2 * nbytes and (best < 0 or size < best_size):
            best, best_size = i, size
    return None if best < 0 else _free.pop(best)


def take(Py_ssize_t nbytes):
    """A writable uint8 array of ``nbytes`` starting at a multiple of ``ALIGN`` bytes: a
    reused block where one fits, else a new one (where that fails, once more after freeing
    the idle blocks; then MemoryError). From ``POOL_MIN_BYTES`` up it returns to the pool
    once every view of it is gone.

    NumPy's own arrays start at 16-byte boundaries; oneDNN's kernels read the workspace's
    pieces (blocked copies, scratchpads) as 64-byte vectors, and a piece off by 16 bytes
    splits every one of them over two cache lines: the fp32 7x7/2 stem's weight gradient
    at batch 32 took 46 ms with such a workspace, 42 ms with an aligned one."""
    if 0 <= nbytes < POOL_MIN_BYTES:
        return _small(nbytes)
    owner = _pop_fit(nbytes)
    if owner is None:
        try:
            owner = aligned_empty(nbytes)
        except MemoryError:     # idle blocks (none fits) may hold the memory it lacks
            del _free[:]
            owner = aligned_empty(nbytes)
    cdef HostBlock block = HostBlock.__new__(HostBlock)
    block.ptr = <char*>cnp.PyArray_DATA(<cnp.ndarray>owner)
    block.shape[0] = nbytes
    block.strides[0] = 1
    block.owner = owner
    return np.frombuffer(block, np.uint8)


def pooled_bytes():
    """Bytes held in free blocks now."""
    return _held()


def release_pooled():
    """Free every pooled block not in use; return the bytes released."""
    released = pooled_bytes()
    del _free[:]
    return released
