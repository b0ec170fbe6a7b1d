"""Device arrays of the CPU device (host memory with a device-array surface)."""
from __future__ import annotations

import mmap
import operator
import sys
import weakref

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._errors import VariantPackError
from .._layout import element_extent

__all__ = ["ALIGN", "DeviceArray", "HUGE_PAGE", "aligned_empty", "element_extent",
           "host_array", "host_values", "refuse_masked", "refuse_neg_view"]

ALIGN = 64    # bytes: where DeviceArrays and host workspaces start (oneDNN's own alignment)
HUGE_PAGE = 2 << 20     # bytes: x86-64's transparent huge page (PMD) size
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", None)     # Linux only


def aligned_empty(nbytes: int, *, huge_pages: bool = False) -> np.ndarray:
    """Return a writable, uninitialised 1-D uint8 array of ``nbytes`` bytes starting at a
    multiple of ``ALIGN`` bytes.

    NumPy's arrays start at 16-byte boundaries; oneDNN's kernels read 64-byte vectors, and
    one off a boundary spans two cache lines (a 1x1 convolution on NHWC memory took 1.08x
    the time, the fp32 7x7/2 stem's weight gradient with its scratchpad so placed 1.09x).

    With ``huge_pages`` (``DeviceArray`` memory), from ``HUGE_PAGE`` bytes up (on Linux)
    the array is its own anonymous mapping, starting on a ``HUGE_PAGE`` boundary, and its
    whole 2 MiB extents are advised
    ``MADV_HUGEPAGE``: with the kernel's transparent huge pages in ``madvise`` or
    ``always`` mode they are then backed by 2 MiB pages, one TLB entry each instead of
    512. Measured here (2-core AVX-512 CPU, THP ``madvise``, one process, against the
    same buffers from the NumPy heap): memory-bound batchnorm 0.79-0.98x the time, oneDNN
    convolutions 0.97-0.99x (1x1 weight gradients 0.93-0.96x). The tail past the last
    whole extent is not advised, so in ``madvise`` mode it keeps 4 KiB pages and no more
    memory is touched than ``nbytes`` (in ``always`` mode the kernel may back it, as any
    memory, by a huge page). The mapping is unmapped when the last view of the array goes.
    The workspace pool (``runtime._host_pool``) keeps its blocks on the heap: in whole
    benchmark runs (``bench/bench_cpu.py --batch 32``) with its blocks on huge pages,
    bfloat16 NCHW 3x3 convolutions, whose blocked copies live in the workspace, took
    1.04-1.13x PyTorch's time in each of three runs, against 1.00-1.03x with heap blocks
    and the same code otherwise (cause not found; one case at a time, it did not show).

    Parameters
    ----------
    nbytes : int
        Size in bytes, >= 0; any integer type (``operator.index``: NumPy integers too,
        converted before any arithmetic, so a ``np.uint32`` cannot wrap around).
    huge_pages : bool, optional
        Map ``HUGE_PAGE`` bytes and more on their own, advised huge (default False: the
        NumPy heap at every size).

    Returns
    -------
    numpy.ndarray
        Shape (nbytes,), dtype uint8, C-contiguous, writable.

    Raises
    ------
    MemoryError
        The memory cannot be had (the heap, or ``mmap`` refused: address-space limit,
        ``vm.max_map_count``, overcommit).
    ValueError
        ``nbytes`` < 0.
    TypeError
        ``nbytes`` is not an integer.
    """
    nbytes = operator.index(nbytes)
    if nbytes < 0:
        raise ValueError(f"aligned_empty: nbytes must be >= 0; got {nbytes}")
    if huge_pages and _MADV_HUGEPAGE is not None and nbytes >= HUGE_PAGE:
        return _huge_empty(nbytes)
    raw = np.empty(nbytes + ALIGN, np.uint8)
    off = -raw.__array_interface__["data"][0] % ALIGN
    return raw[off:off + nbytes]


def _huge_empty(nbytes: int) -> np.ndarray:
    """``aligned_empty`` of ``nbytes`` >= ``HUGE_PAGE`` from a mapping of its own, released
    (munmap) when the last view of the array goes."""
    try:
        # one page of slack to start on a boundary; pages never touched cost nothing
        m = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as exc:
        raise MemoryError(f"cannot map {nbytes} bytes of host memory: {exc}") from None
    raw = np.frombuffer(m, np.uint8)
    off = -raw.__array_interface__["data"][0] % HUGE_PAGE
    whole = nbytes // HUGE_PAGE * HUGE_PAGE
    try:
        m.madvise(_MADV_HUGEPAGE, off, whole)
    except OSError:
        pass        # a kernel without transparent huge pages: 4 KiB pages, same result
    return raw[off:off + nbytes]


def refuse_masked(array, where: str) -> None:
    """A masked array is a ``VariantPackError`` naming ``where``: np.asarray would drop
    its mask and copy the masked-out values as if they were valid."""
    if isinstance(array, np.ma.MaskedArray):
        raise VariantPackError(f"{where}: masked arrays are not taken (the mask would be "
                               "ignored); pass arr.filled(value) or arr.data")


def refuse_neg_view(buffer, where: str) -> None:
    """A PyTorch tensor (or a subclass of one) whose negative bit is set is a
    ``VariantPackError`` naming ``where``: a lazy view such as ``x.conj().imag`` or
    ``x._neg_view()`` holds in memory the values before the negation, which neither
    ``__dlpack__`` nor ``__cuda_array_interface__`` can say, so it would be read as +x.
    (The conjugate bit is on complex tensors only, refused by their dtype.)"""
    torch = sys.modules.get("torch")          # not imported: no torch tensor exists
    if torch is not None and isinstance(buffer, getattr(torch, "Tensor", ())) and (
            buffer.is_neg()):
        raise VariantPackError(f"{where}: the torch tensor has its neg bit set (a lazy "
                               "negation view; its memory holds the values before the "
                               "negation); pass t.resolve_neg() instead")


def host_array(array, where: str) -> np.ndarray:
    """``np.asarray(array)`` of values read on the host, or a ``VariantPackError`` naming
    ``where``: a masked array (``refuse_masked``), a torch tensor with its neg bit set
    (``refuse_neg_view``), or an object NumPy cannot read (the producer's own error, e.g.
    torch's for a tensor that requires grad, or a ragged list)."""
    refuse_masked(array, where)
    refuse_neg_view(array, where)
    try:
        return np.asarray(array)
    except Exception as exc:  # noqa: BLE001 - a foreign producer may raise anything
        raise VariantPackError(f"{where}: cannot read it as an array: "
                               f"{type(exc).__name__}: {exc}") from None


def host_values(array, where: str, dims: tuple) -> np.ndarray:
    """``np.asarray(array)`` for a copy into a device array of logical ``dims``: a masked
    array (``refuse_masked``) or a shape that does not broadcast to ``dims`` is a
    ``VariantPackError`` naming ``where`` (before anything is copied), as are the
    buffers ``host_array`` refuses."""
    values = host_array(array, where)
    shape = values.shape
    while len(shape) > len(dims) and shape[0] == 1:   # NumPy's assignment drops these
        shape = shape[1:]
    try:
        fits = np.broadcast_shapes(shape, dims) == tuple(dims)
    except ValueError:
        fits = False
    if not fits:
        raise VariantPackError(f"{where}: an array of shape {values.shape} does not "
                               f"broadcast to the dims {tuple(dims)}")
    return values


class DeviceArray:
    """An array owned by a device, in logical dims (N, C, [D,] H, W) with element strides.

    The CPU device's array (``Device.empty`` / ``Device.asarray`` make it): host memory
    starting on a 64-byte boundary (``ALIGN``), from 2 MiB up on transparent huge pages
    where the kernel gives them (``aligned_empty``), with ``dims``, ``strides`` (elements),
    ``dtype``, ``device``, ``nbytes`` and
    ``view``, a NumPy view in logical shape over that memory (read or written at once).
    ``copy_from`` and ``to_numpy`` wait for the work already submitted to the owning
    device's streams (``order_after``), as a ``GpuArray``'s copies wait for launched work:
    a program reads the same values on either device. Called on a stream's worker (a
    handle's done-callback), ``copy_from`` / ``to_numpy_sync`` copy at once: that
    handle's work is done, and waiting there would wait for the callback itself.

    Parameters
    ----------
    dims : tuple of int
        Logical dims.
    dtype : numpy dtype
        float32, float16 or ml_dtypes.bfloat16.
    strides : tuple of int
        Strides in elements; the allocation spans exactly the strided extent.
    device : str
        The owning device's spec, for messages.
    fill : scalar, optional
        Initial value of every element; default uninitialised.

    Raises
    ------
    MemoryError
        The host memory cannot be had (``Device.empty`` reports it as a
        ``DeviceError``).
    """

    def __init__(self, dims, dtype, strides, device: str = "cpu", *, fill=None):
        self.dims = tuple(int(d) for d in dims)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = np.dtype(dtype)
        self.device = device
        extent = element_extent(self.dims, self.strides)
        # from an ALIGN-byte boundary, as torch's allocator places its tensors
        self._flat = aligned_empty(max(extent, 1) * self.dtype.itemsize,
                                   huge_pages=True).view(self.dtype)
        if fill is not None:
            self._flat[...] = fill
        self.view = as_strided(self._flat, self.dims,
                               tuple(s * self.dtype.itemsize for s in self.strides))
        self._queue = None      # weakref to the owning device's StreamPool (order_after)

    def order_after(self, queue) -> None:
        """Make ``copy_from`` / ``to_numpy`` wait for the work submitted to ``queue`` (the
        owning device's StreamPool: ``synchronize()``, ``synchronize_blocking()``,
        ``on_worker()``), held weakly, so a collected or closed device waits for nothing."""
        self._queue = weakref.ref(queue)

    def _live_queue(self):
        return self._queue() if self._queue is not None else None

    def _wait_blocking(self) -> None:
        queue = self._live_queue()
        # on a stream's worker (a done callback) a wait for that stream's work would wait
        # for the caller itself: the other streams' work is waited for, not its own
        if queue is not None:
            queue.synchronize_blocking(skip_own=True)

    @property
    def nbytes(self) -> int:
        """Bytes of the allocation."""
        return self._flat.nbytes

    def copy_from(self, array) -> None:
        """Copy a NumPy array of logical shape ``dims`` into this array (blocking: once
        the work already submitted to the owning device's streams is done).

        Parameters
        ----------
        array : array_like
            Broadcastable to ``dims``; values are cast to ``dtype`` by NumPy's
            assignment rules (float64 or integers are converted, not refused).

        Raises
        ------
        VariantPackError
            A masked array (its mask would be dropped), or one whose shape does not
            broadcast to ``dims`` (a ``ValueError`` too).
        """
        values = host_values(array, "DeviceArray.copy_from", self.dims)
        if isinstance(array, DeviceArray) and array._live_queue() is not self._live_queue():
            array._wait_blocking()      # the source's writers too, on its own device
        self._wait_blocking()
        self.view[...] = values

    def to_numpy_sync(self) -> np.ndarray:
        """Return a C-contiguous NumPy copy in logical shape, of ``dtype`` (blocking: once
        the work already submitted to the owning device's streams is done, as
        ``GpuArray.to_numpy_sync`` waits for launched work)."""
        self._wait_blocking()
        return np.array(self.view, order="C", copy=True)

    async def to_numpy(self) -> np.ndarray:
        """As ``to_numpy_sync``, awaiting the submitted work without blocking the loop."""
        queue = self._live_queue()
        if queue is not None:
            await queue.synchronize()
        return np.array(self.view, order="C", copy=True)

    def __reduce__(self):
        """Pickle (and ``copy.copy`` / ``copy.deepcopy``) as a new array of the same dims,
        strides, dtype and device spec holding the values, once the work already submitted
        to the owning device's streams is done. The copy waits for no stream (a process
        that unpickles it has none of the original's). Field by field, the strided view and
        the allocation under it would come back as two unrelated copies, and the weak
        reference to the owning streams does not pickle at all."""
        self._wait_blocking()
        return (_rebuild, (self.dims, self.dtype, self.strides, self.device, self._flat))

    def __array__(self, dtype=None, copy=None):
        return self.view if dtype is None else self.view.astype(dtype)

    def __repr__(self) -> str:
        return (f"DeviceArray(dims={self.dims}, strides={self.strides}, "
                f"dtype={self.dtype.name}, device={self.device!r})")


def _rebuild(dims, dtype, strides, device, flat) -> DeviceArray:
    """``DeviceArray.__reduce__``'s constructor: a new array holding ``flat``'s elements."""
    out = DeviceArray(dims, dtype, strides, device)
    out._flat[...] = flat
    return out
