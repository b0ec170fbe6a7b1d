"""Variant-pack buffers on a GPU device: check a buffer against a tensor, return its pointer.

Shared by every GPU provider (cuDNN, MIOpen): the vendor enters only through ``runtime``,
the loaded GPU runtime whose ``pointer_device`` tells which device owns an address.
Accepted: ``GpuArray`` of the same device, any object with ``__cuda_array_interface__``
(CuPy arrays, PyTorch CUDA tensors, Numba arrays) or ``__dlpack__`` (``_dlpack``), and int
device pointers. The layout rules are the CPU's (``providers/cpu/_bind.py``), decided from
shape and strides alone: logical dims with the tensor's element strides, a C-contiguous
array whose shape is the dims in memory order (refused where that shape is also the
logical one), or a flat 1-D buffer. Pointers are
checked with ``cudaPointerGetAttributes`` so that a host address never reaches a kernel
(which would poison the GPU context for the whole process).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._errors import VariantPackError
from ..._types import numpy_dtype
from ..._layout import (accepted_buffers, ambiguous_message, dim_letters, element_extent,
                        packed_strides, same_memory_order, stride_order,
                        strides_match, wrong_strides_message)
from ...runtime import KINDS, GpuArray
from ...runtime._buffer import refuse_neg_view
from ...runtime._kinds import host_memory_types
from ._dlpack import DEVICE_NAMES, read_dlpack

__all__ = ["GpuTarget", "make_binder", "bind_workspace"]


@dataclass(frozen=True)
class GpuTarget:
    """The GPU a binder checks buffers against.

    Attributes
    ----------
    index : int
        Device ordinal in ``runtime``.
    spec : str
        The device spec for messages, e.g. ``"cuda:0"``.
    runtime : object
        The loaded GPU runtime (``GpuContext.runtime``): ``pointer_device(ptr) -> int``
        (the owning ordinal, -1 for host memory, -2 when it cannot tell).
    """

    index: int
    spec: str
    runtime: Any = field(repr=False)

    @property
    def kind(self) -> str:
        """The spec's runtime part (``"cuda"`` of ``"cuda:0"``)."""
        return self.spec.split(":", 1)[0]


def _check_pointer(ptr: int, target: "GpuTarget", label: str) -> int:
    if not isinstance(ptr, int) or not 0 < ptr < 2 ** 64:
        raise VariantPackError(f"{label}: pointer {ptr!r} is not a valid device address")
    owner = target.runtime.pointer_device(ptr)
    if owner == -1:
        raise VariantPackError(
            f"{label}: address {ptr:#x} is not device memory of {target.spec} (a host "
            "pointer?); copy host data with `await dev.asarray(array)`")
    if owner >= 0 and owner != target.index:
        raise VariantPackError(f"{label}: address {ptr:#x} belongs to {target.kind}:{owner}; "
                               f"this plan runs on {target.spec}")
    return ptr


# How to make the logical view of a memory-order device array m, and a packed copy of
# logical data a (CuPy, PyTorch).
_GPU_VIEW = "m.transpose{inv} (CuPy) or m.permute{inv} (PyTorch)"
_GPU_COPY = ("cp.ascontiguousarray(a.transpose{order}).transpose{inv} (CuPy) or "
             "a.permute{order}.contiguous().permute{inv} (PyTorch)")
_GPU_PLAIN = "cp.ascontiguousarray(a) (CuPy) or a.contiguous() (PyTorch)"


def _layout_error(tensor, shape, strides, label, letters=None, output=False) -> str | None:
    """None when a buffer of ``shape`` with element ``strides`` (None: C-contiguous) holds
    the tensor, else the message.

    The rules are the CPU binder's, decided from shape and strides alone: (1) logical dims
    with the tensor's strides (size-1 dims aside); (2) a C-contiguous array whose shape is
    the dims in memory order, unless that shape is also the logical shape (e.g. NHWC with
    C == H == W): such an array could be logical NCHW data as well, so it is refused
    rather than guessed; (3) a contiguous 1-D buffer covering the tensor's extent.
    """
    dims, want = tuple(tensor.dims), tuple(tensor.strides)
    rank = len(shape)
    c_order = packed_strides(shape, tuple(range(rank)))
    got = c_order if strides is None else tuple(strides)
    order = stride_order(dims, want)
    physical = tuple(dims[a] for a in order)
    if 0 in dims and shape in (dims, physical):
        return None                       # nothing to read or write
    if shape == dims and strides_match(dims, want, got):
        return None
    contiguous = strides_match(shape, c_order, got)
    if contiguous and same_memory_order(shape, physical) and strides_match(
            dims, want, packed_strides(dims, order)):
        if shape != dims or order == tuple(range(len(dims))):
            return None
        return ambiguous_message(label, dims, want, letters=letters, view_hint=_GPU_VIEW,
                                 copy_hint=_GPU_COPY, output=output)
    if shape == dims:
        return wrong_strides_message(label, dims, want, got, view_hint=_GPU_VIEW,
                                     copy_hint=_GPU_COPY, plain_hint=_GPU_PLAIN,
                                     letters=letters, output=output)
    if rank == 1 and contiguous and shape[0] >= element_extent(dims, want):
        return None
    return (f"{label} needs {accepted_buffers(dims, want, letters=letters)}; got shape "
            f"{shape}, strides {got}")


def _has_cai(obj) -> bool:
    # hasattr runs the property; a property that raises still marks a CUDA array
    return (hasattr(type(obj), "__cuda_array_interface__")
            or "__cuda_array_interface__" in getattr(obj, "__dict__", ()))


def _read_cai(buf, label: str):
    """(shape, typestr, strides or None, pointer, readonly) of ``__cuda_array_interface__``;
    VariantPackError for a malformed one (version 3 of the protocol, numba.readthedocs.io)."""
    try:
        cai = buf.__cuda_array_interface__
        shape = tuple(operator.index(s) for s in cai["shape"])
        typestr = str(cai["typestr"])
        strides = cai.get("strides")
        strides = None if strides is None else tuple(operator.index(s) for s in strides)
        ptr, readonly = cai["data"]
        readonly = bool(readonly)
        masked = cai.get("mask") is not None
    except Exception as exc:  # noqa: BLE001 - a foreign object's property may raise anything
        raise VariantPackError(f"{label}: malformed __cuda_array_interface__ on "
                               f"{type(buf).__name__}: {type(exc).__name__}: {exc}") from None
    if masked:
        raise VariantPackError(f"{label}: masked CUDA arrays are not supported "
                               f"({type(buf).__name__} has a __cuda_array_interface__ mask)")
    if type(ptr) is not int or any(d < 0 for d in shape) or (
            strides is not None and len(strides) != len(shape)):
        raise VariantPackError(f"{label}: malformed __cuda_array_interface__ on "
                               f"{type(buf).__name__}: shape {shape}, strides {strides}, "
                               f"data pointer {ptr!r}")
    return shape, typestr, strides, ptr, readonly


def _from_cai(buf, tensor, label: str, want_dtype, target: GpuTarget, output: bool,
              letters=None) -> int:
    shape, typestr, strides, ptr, readonly = _read_cai(buf, label)
    try:
        dtype = np.dtype(typestr)
    except TypeError:
        dtype = None
    bf16_raw = want_dtype.name == "bfloat16" and typestr in ("<V2", "|V2")
    if dtype != want_dtype and not bf16_raw:
        raise VariantPackError(f"{label} needs dtype {want_dtype.name} ({tensor.data_type.name});"
                               f" got typestr {typestr!r} ({type(buf).__name__})")
    if output and readonly:
        raise VariantPackError(f"{label} is an output, but the buffer is read-only")
    item = want_dtype.itemsize
    if strides is not None:
        if any(s % item for s in strides):
            raise VariantPackError(f"{label}: byte strides {tuple(strides)} are not multiples "
                                   f"of the element size {item}")
        strides = tuple(s // item for s in strides)
    err = _layout_error(tensor, shape, strides, label, letters, output)
    if err:
        raise VariantPackError(err)
    if 0 in shape:
        return 0
    return _check_pointer(int(ptr), target, label)


def _from_dlpack(buf, tensor, label: str, want_dtype, target: GpuTarget, output: bool,
                 letters=None) -> int:
    try:
        device_type, device_id = (int(v) for v in buf.__dlpack_device__())
        host = device_type in host_memory_types()
        info = None if host else read_dlpack(buf)
    except Exception as exc:  # noqa: BLE001 - a foreign producer may raise anything
        raise VariantPackError(f"{label}: cannot read the DLPack export of "
                               f"{type(buf).__name__}: {type(exc).__name__}: {exc}") from None
    if host:
        raise VariantPackError(
            f"{label}: got a host {type(buf).__name__} (DLPack device "
            f"{DEVICE_NAMES.get(device_type, device_type)}); '{target.spec}' takes device "
            "memory: copy it with `await dev.asarray(array)`")
    wanted = KINDS[target.kind].dlpack   # the DLPack types of this kind's memory
    if info.device_type not in wanted or info.device_id != target.index:
        where = DEVICE_NAMES.get(info.device_type, f"DLPack device type {info.device_type}")
        raise VariantPackError(f"{label}: the {type(buf).__name__} lives on {where} device "
                               f"{info.device_id}; this plan runs on '{target.spec}'")
    if info.dtype != want_dtype.name:
        raise VariantPackError(f"{label} needs dtype {want_dtype.name} ({tensor.data_type.name});"
                               f" got {info.dtype} ({type(buf).__name__})")
    err = _layout_error(tensor, info.shape, info.strides, label, letters, output)
    if err:
        raise VariantPackError(err)
    if 0 in info.shape:
        return 0
    return _check_pointer(info.ptr, target, label)


def _has_dlpack(obj) -> bool:
    return hasattr(type(obj), "__dlpack__") and hasattr(type(obj), "__dlpack_device__")


def make_binder(tensor, *, output: bool, target: GpuTarget, filter: bool = False):
    """Return ``bind(buffer) -> int device pointer`` for one tensor of a built plan.

    Accepted, in this order: a ``GpuArray`` of the plan's device; an object with
    ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors, Numba); an object with
    ``__dlpack__`` on the plan's device (JAX and others); an int device pointer (taken as
    laid out as the tensor). Layouts are decided from shape and strides alone (see
    ``_layout_error``).

    Raises (from ``bind``)
    ----------------------
    VariantPackError
        A host array, a buffer of another device, wrong dtype, shape or strides (or an
        ambiguous C-contiguous shape), a read-only output, a malformed or failing
        ``__cuda_array_interface__`` / ``__dlpack__``.
    """
    want_dtype = numpy_dtype(tensor.data_type)
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    label = f"execute: tensor '{tensor.name}' (uid {tensor.uid})"
    letters = dim_letters(len(dims), filter=filter)    # a filter's dims read K, C, R, S
    spec = target.spec

    def bind(buf):
        if type(buf) is GpuArray:
            if buf.device != spec:
                raise VariantPackError(f"{label}: the array lives on '{buf.device}'; this "
                                       f"plan runs on '{spec}'")
            if buf.dims == dims and buf.dtype == want_dtype and (
                    buf.strides == strides or strides_match(dims, strides, buf.strides)):
                return buf.ptr
            if buf.dtype != want_dtype:
                raise VariantPackError(f"{label} needs dtype {want_dtype.name} "
                                       f"({tensor.data_type.name}); got {buf.dtype.name}")
            err = _layout_error(tensor, buf.dims, buf.strides, label, letters, output)
            if err:
                raise VariantPackError(err)
            return buf.ptr
        if isinstance(buf, np.ndarray) or hasattr(buf, "__array_interface__"):
            raise VariantPackError(
                f"{label}: got a host {type(buf).__name__}; '{spec}' takes device memory: "
                "copy it with `await dev.asarray(array)` (or pass a CuPy array / CUDA tensor)")
        refuse_neg_view(buf, label)
        if _has_cai(buf):
            return _from_cai(buf, tensor, label, want_dtype, target, output, letters)
        if _has_dlpack(buf):
            return _from_dlpack(buf, tensor, label, want_dtype, target, output, letters)
        if isinstance(buf, int) and not isinstance(buf, bool):
            return _check_pointer(buf, target, label)
        raise VariantPackError(
            f"{label}: '{spec}' takes GpuArrays, objects with __cuda_array_interface__ or "
            f"__dlpack__, or int device pointers; got {type(buf).__name__}")

    return bind


def bind_workspace(nbytes: int, given, *, where: str, target: GpuTarget):
    """The workspace pointer for one execution: ``given`` checked, or None (the stream's
    own workspace is used)."""
    if given is None or not nbytes:
        return None
    if isinstance(given, GpuArray):
        if given.device != target.spec:
            raise VariantPackError(f"{where}: the workspace lives on '{given.device}'; this "
                                   f"plan runs on '{target.spec}'")
        size, ptr = given.nbytes, given.ptr
    elif _has_cai(given):
        shape, typestr, _, ptr, readonly = _read_cai(given, where)
        try:
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(typestr).itemsize
        except TypeError:
            raise VariantPackError(f"{where}: workspace typestr {typestr!r} is not a dtype") from None
        if readonly:
            raise VariantPackError(f"{where}: the workspace is read-only")
    else:
        raise VariantPackError(f"{where}: workspace must be device memory (a GpuArray or an "
                               f"object with __cuda_array_interface__) of >= {nbytes} bytes; "
                               f"got {type(given).__name__}")
    if size < nbytes:
        raise VariantPackError(f"{where}: workspace of {size} bytes given; it needs {nbytes}")
    return _check_pointer(ptr, target, where)
