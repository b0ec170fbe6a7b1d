"""Variant-pack buffers on the CPU: check a buffer against a tensor, return a logical view."""
from __future__ import annotations

import ctypes
import errno
import mmap
import os

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._errors import ExecutionError, VariantPackError
from ..._knobs import WORKSPACE_SIZE_LIMIT
from ..._types import DataType, numpy_dtype
from ..._layout import (accepted_buffers, ambiguous_message, dim_letters, element_extent,
                        packed_strides, same_memory_order, stride_order,
                        strides_match, TORCH_PLAIN, TORCH_VIEW, torch_copy_hint,
                        wrong_strides_message)
from ...runtime import DeviceArray, _host_pool
from ...runtime._buffer import refuse_masked, refuse_neg_view

__all__ = ["logical_view", "make_binder", "bind_workspace", "allocate_workspace"]


def logical_view(tensor, buffer, *, output: bool, where: str = "execute",
                 filter: bool = False) -> np.ndarray:
    """Return ``buffer`` as a NumPy view with ``tensor.dims`` and ``tensor.strides``.

    Accepted buffers: an array in logical shape (N, C, [D,] H, W) whose element strides
    equal the tensor's; a C-contiguous array whose shape is the dims in memory order
    (e.g. (N, H, W, C) for NHWC); a contiguous 1-D array covering the tensor's extent
    (for non-packed strides); any object with ``__dlpack__`` (a CPU tensor). With
    ``filter`` (a convolution's w or dw) messages name the dims K, C, [T,] R, S.

    Raises
    ------
    VariantPackError
        Wrong type, dtype, shape or strides, or a read-only output buffer.
    """
    label = f"{where}: tensor '{tensor.name}' (uid {tensor.uid})"
    source = type(buffer)       # a layout message speaks the caller's library (_style)
    if isinstance(buffer, DeviceArray):
        buffer = buffer.view
    elif isinstance(buffer, int) and not isinstance(buffer, bool):
        buffer = _from_pointer(buffer, tensor, label, output)
    if not isinstance(buffer, np.ndarray):
        # On the type: hasattr on the object runs a property, which may raise anything.
        if hasattr(type(buffer), "__dlpack__") or "__dlpack__" in getattr(buffer, "__dict__", ()):
            refuse_neg_view(buffer, label)
            try:
                buffer = _from_dlpack(buffer)
            except Exception as exc:  # the producer's own code: KeyError, AttributeError, ...
                raise VariantPackError(
                    f"{label}: cannot import the buffer through DLPack on the CPU: "
                    f"{type(exc).__name__}: {exc}") from None
        else:
            raise VariantPackError(
                f"{label}: the CPU device takes NumPy arrays, DeviceArrays, __dlpack__ "
                f"objects or int host pointers; got {type(buffer).__name__}")
    refuse_masked(buffer, label)   # the mask would be ignored: silently wrong
    want_dtype = numpy_dtype(tensor.data_type)
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    if buffer.dtype != want_dtype:
        got = buffer.dtype.name
        if got == want_dtype.name:      # same kind, other byte order ('>f4')
            got = f"{got} in non-native byte order ({buffer.dtype.str})"
        raise VariantPackError(
            f"{label} needs dtype {want_dtype.name} ({tensor.data_type.name}); got {got}")
    if output and not buffer.flags.writeable:
        raise VariantPackError(f"{label} is an output, but the buffer is read-only")
    item = buffer.itemsize
    order = stride_order(dims, strides)
    physical = tuple(dims[a] for a in order)
    if 0 in dims and buffer.shape in (dims, physical):
        return np.empty(dims, want_dtype)  # nothing to read or write (NumPy's empty strides vary)
    got = tuple(s // item for s in buffer.strides)
    if buffer.shape == dims and strides_match(dims, strides, got) and all(
            s % item == 0 for s in buffer.strides):
        return buffer
    # Memory-order shape; checked second because e.g. (4, 3, 3, 3) is both a logical and
    # an NHWC physical shape. Size-1 dims have no place in memory, so any placement of
    # them is the same memory order: for NDHWC dims (3, 1, 5, 1, 3), (3, 5, 1, 1, 3) is as
    # good as (3, 5, 1, 3, 1) (the fuzzer found the first refused).
    if buffer.flags.c_contiguous and same_memory_order(buffer.shape, physical):
        if buffer.shape == dims and order != tuple(range(len(dims))):
            # e.g. an NHWC tensor with C == H == W: a C-contiguous array of this shape may
            # be logical NCHW (wrong strides) or NHWC memory order; guessing could be
            # silently wrong.
            raise VariantPackError(ambiguous_message(label, dims, strides, output=output,
                                                     **_style(source, order, filter)))
        if strides_match(dims, strides, packed_strides(dims, order)):
            return as_strided(buffer.reshape(-1), dims, tuple(s * item for s in strides))
    if buffer.shape == dims:
        raise VariantPackError(wrong_strides_message(label, dims, strides, got, output=output,
                                                     **_style(source, order, filter, plain=True)))
    if buffer.ndim == 1 and buffer.flags.c_contiguous and buffer.size >= element_extent(dims, strides):
        return as_strided(buffer, dims, tuple(s * item for s in strides))
    letters = dim_letters(len(dims), filter=filter)
    raise VariantPackError(
        f"{label} needs a buffer of {accepted_buffers(dims, strides, letters=letters)}; got "
        f"shape {buffer.shape} with strides {tuple(s // item for s in buffer.strides)}")


def _style(source: type, order: tuple, filter: bool, plain: bool = False) -> dict:
    """A layout message's dim letters (a filter's K, C, R, S) and, for a PyTorch tensor
    (``source``, the buffer's type as passed), PyTorch's spelling of the calls (``plain``:
    the packed copy of a plain layout too, which only ``wrong_strides_message`` takes);
    made on the error path only (binding is on the submission path)."""
    style = {"letters": dim_letters(len(order), filter=filter)}
    if source.__module__.partition(".")[0] == "torch":
        style.update(view_hint=TORCH_VIEW, copy_hint=torch_copy_hint(order))
        if plain:
            style["plain_hint"] = TORCH_PLAIN
    return style


def _from_dlpack(obj) -> np.ndarray:
    """``np.from_dlpack``; bfloat16 (which NumPy's DLPack import does not know) goes
    through a same-size int16 view of the producer, reinterpreted as ml_dtypes.bfloat16."""
    try:
        return np.from_dlpack(obj)
    except (TypeError, RuntimeError, BufferError, ValueError):
        if not str(getattr(obj, "dtype", "")).endswith("bfloat16"):
            raise
        if type(obj).__module__.split(".")[0] != "torch" or getattr(obj, "requires_grad", False):
            raise  # (torch refuses to export tensors that require grad; so do we)
        import torch  # the producer is a torch tensor, so torch is importable
        return np.from_dlpack(obj.view(torch.int16)).view(numpy_dtype(DataType.BFLOAT16))


def make_binder(tensor, *, output: bool, filter: bool = False):
    """Return ``bind(buffer) -> logical view`` for one tensor of a built plan (``filter``:
    it is a convolution's filter, for the messages' dim names).

    Binding is on the submission path, so the exact-match case (a NumPy array in logical
    shape with the tensor's strides) is checked against values computed once here.
    """
    dtype = numpy_dtype(tensor.data_type)
    dims = tuple(tensor.dims)
    byte_strides = tuple(s * dtype.itemsize for s in tensor.strides)
    # the stride of a dim of extent 1 addresses nothing: a (1, C, 1, 1) statistic whose
    # strides follow an NHWC tensor's (C, 1, C, C) is the same memory as a (C, 1, 1, 1)
    # array, so both take the fast path
    moving = tuple(i for i, d in enumerate(dims) if d != 1)
    want = tuple(byte_strides[i] for i in moving)
    unit = len(moving) < len(dims)

    def bind(buffer):
        if (type(buffer) is np.ndarray and buffer.shape == dims and buffer.dtype == dtype
                and (buffer.strides == byte_strides
                     or (unit and tuple([buffer.strides[i] for i in moving]) == want))
                and (not output or buffer.flags.writeable)):
            return buffer
        return logical_view(tensor, buffer, output=output, filter=filter)

    return bind


try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _process_vm_readv, _process_vm_writev = _libc.process_vm_readv, _libc.process_vm_writev
    for _f in (_process_vm_readv, _process_vm_writev):
        _f.restype = ctypes.c_ssize_t
        _f.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                       ctypes.c_ulong, ctypes.c_ulong)
except (OSError, AttributeError):  # not Linux
    _process_vm_readv = _process_vm_writev = None

_PAGE = mmap.PAGESIZE
# Remote iovecs per process_vm_readv/writev call: UIO_MAXIOV (IOV_MAX) is 1024 on Linux
# (include/uapi/linux/uio.h); more is EINVAL.
_IOV_MAX = 1024


def _unmapped_page(address: int, nbytes: int, writable: bool = False):
    """The first address in ``[address, address + nbytes)`` this process cannot read (or,
    with ``writable``, write), ``None`` when every page can, or ``...`` when the system
    cannot tell (not Linux, or the calls are refused).

    Every page of the range is probed, one byte each, by ``process_vm_readv`` (and
    ``process_vm_writev``, storing back the byte just read): they report EFAULT instead of
    faulting, so an int pointer to a range with a hole (an unmapped or PROT_NONE page in
    the middle) becomes an error message rather than a segfault in a worker. Cost: one
    call per 1024 pages (4 MiB with 4 KiB pages).
    """
    if _process_vm_readv is None:
        return ...
    first_page = address - address % _PAGE
    n_pages = (address + nbytes - 1) // _PAGE - first_page // _PAGE + 1
    pid = os.getpid()
    # The probe addresses (``address``, then the start of every later page) are made one
    # call's worth at a time: all at once they were an array of 8 bytes per page, a
    # MemoryError for a tensor of hundreds of TB bound to a small buffer's pointer.
    for lo in range(0, n_pages, _IOV_MAX):
        chunk = np.uint64(first_page) + np.arange(lo, min(n_pages, lo + _IOV_MAX),
                                                  dtype=np.uint64) * np.uint64(_PAGE)
        if lo == 0:
            chunk[0] = address
        remote = np.empty((chunk.size, 2), np.uint64)     # struct iovec {void *base; size_t len}
        remote[:, 0], remote[:, 1] = chunk, 1
        local_bytes = ctypes.create_string_buffer(chunk.size)
        local = np.array([[ctypes.addressof(local_bytes), chunk.size]], np.uint64)
        for call in ((_process_vm_readv, _process_vm_writev) if writable else (_process_vm_readv,)):
            n = call(pid, local.ctypes.data, 1, remote.ctypes.data, chunk.size, 0)
            if n < 0:
                if ctypes.get_errno() != errno.EFAULT:
                    return ...          # e.g. EPERM under a seccomp filter: cannot tell
                n = 0
            if n < chunk.size:          # transfers stop at the first failing iovec
                return int(chunk[n])
    return None


def _from_pointer(address: int, tensor, label: str, output: bool = False) -> np.ndarray:
    """A host address (the contract's int device pointer; on the CPU device, host memory)."""
    if not 0 < address < 2 ** 64:
        raise VariantPackError(f"{label}: pointer {address:#x} is not a valid host address")
    dtype = numpy_dtype(tensor.data_type)
    nbytes = element_extent(tuple(tensor.dims), tuple(tensor.strides)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(0, dtype)
    if address + nbytes > 2 ** 64:
        raise VariantPackError(f"{label}: pointer {address:#x} (+{nbytes} bytes) runs past "
                               "the end of the address space")
    bad = _unmapped_page(address, nbytes)
    if bad is ...:
        raise VariantPackError(
            f"{label}: cannot prove that pointer {address:#x} (+{nbytes} bytes) is readable "
            "host memory on this system (process_vm_readv unavailable); pass a NumPy array")
    if bad is not None:
        raise VariantPackError(
            f"{label}: pointer {address:#x} (+{nbytes} bytes) is not mapped host memory of "
            f"this process: address {bad:#x} (offset {bad - address}) cannot be read")
    if output:
        bad = _unmapped_page(address, nbytes, writable=True)
        if bad is not None and bad is not ...:
            raise VariantPackError(
                f"{label} is an output, but pointer {address:#x} (+{nbytes} bytes) is "
                f"read-only memory at address {bad:#x} (offset {bad - address})")
    raw = (ctypes.c_char * nbytes).from_address(address)
    return np.frombuffer(raw, dtype)


def allocate_workspace(nbytes: int) -> np.ndarray:
    """A uint8 host workspace of ``nbytes`` for one execution, from the runtime's pool of
    host blocks (``runtime._host_pool``: reused once the execution is done with it;
    raises MemoryError; one place to fail)."""
    return _host_pool.take(nbytes)


def bind_workspace(nbytes: int, given, *, where: str):
    """A host workspace of ``nbytes``: ``given`` (a writable contiguous NumPy array or
    DeviceArray of at least that many bytes) viewed as uint8, or a fresh one.

    Raises
    ------
    VariantPackError
        ``given`` is not a large enough writable contiguous array.
    ExecutionError
        A fresh workspace cannot be allocated (the message names the bytes and the knob).
    """
    if given is None:
        if not nbytes:
            return None
        try:
            return allocate_workspace(nbytes)
        except MemoryError:
            raise ExecutionError(
                f"{where}: cannot allocate a workspace of {nbytes} bytes "
                f"({nbytes / 2 ** 30:.2f} GiB) in host memory; build the plan with a lower "
                f"knob '{WORKSPACE_SIZE_LIMIT}' (0 selects an algorithm without workspace) "
                "or pass workspace=", code="GRAPH_EXECUTION_FAILED") from None
    if not nbytes:
        return None
    ws = given.view if isinstance(given, DeviceArray) else given
    if not isinstance(ws, np.ndarray):
        raise VariantPackError(f"{where}: workspace must be a NumPy array or DeviceArray of "
                               f">= {nbytes} bytes; got {type(given).__name__}")
    if ws.nbytes < nbytes or not ws.flags.c_contiguous or not ws.flags.writeable:
        raise VariantPackError(
            f"{where}: workspace of {ws.nbytes} bytes given (contiguous: "
            f"{ws.flags.c_contiguous}, writable: {ws.flags.writeable}); it needs {nbytes} "
            "writable contiguous bytes")
    ws = ws.reshape(-1).view(np.uint8)
    # from its first 64-byte boundary where it has the room (as runtime._host_pool's
    # blocks start): oneDNN's blocked copies and scratchpads 16 bytes off a boundary took
    # up to 8 % longer (every 64-byte vector over two cache lines)
    off = -ws.__array_interface__["data"][0] % _host_pool.ALIGN
    return ws[off:] if off and ws.nbytes - off >= nbytes else ws
