"""Variant-pack buffers on a GPU device: check a buffer against a tensor, return its pointer.

Shared by every GPU provider (cuDNN, MIOpen): the vendor enters only through ``runtime``,
the loaded GPU runtime whose ``pointer_device`` tells which device owns an address.
Accepted: ``GpuArray`` of the same device, any object with ``__cuda_array_interface__``
(CuPy arrays, PyTorch CUDA tensors, Numba arrays), and int device pointers. The layout
rules are the CPU's (``providers/cpu/_bind.py``): logical dims with the tensor's element
strides, or a C-contiguous array whose shape is the dims in memory order. Pointers are
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
from ..._layout import packed_strides, stride_order, strides_match
from ...runtime import GpuArray, _gpu

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
        The loaded GPU runtime: ``pointer_device(ptr) -> int`` (the owning ordinal, -1 for
        host memory, -2 when it cannot tell).
    """

    index: int
    spec: str
    runtime: Any = field(default=_gpu, repr=False)

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


def _layout_error(tensor, shape, strides, label) -> str | None:
    """None when (shape, element strides) fits the tensor, else the message."""
    dims, want = tuple(tensor.dims), tuple(tensor.strides)
    if shape == dims and (strides is None or strides_match(dims, want, strides)):
        if strides is None and not strides_match(dims, want, packed_strides(dims, tuple(range(len(dims))))):
            return (f"{label} needs strides {want} in elements; got a C-contiguous array of "
                    f"shape {shape}")
        return None
    order = stride_order(dims, want)
    physical = tuple(dims[a] for a in order)
    contiguous = strides is None or strides_match(shape, packed_strides(shape, tuple(range(len(shape)))), strides)
    if shape == physical and contiguous and strides_match(dims, want, packed_strides(dims, order)):
        return None
    got = "C-contiguous" if strides is None else f"strides {strides}"
    return (f"{label} needs logical shape {dims} with strides {want} in elements, or a "
            f"C-contiguous array of shape {physical} (memory order); got shape {shape}, {got}")


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


def _from_cai(buf, tensor, label: str, want_dtype, target: GpuTarget, output: bool) -> int:
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
    err = _layout_error(tensor, shape, strides, label)
    if err:
        raise VariantPackError(err)
    if 0 in shape:
        return 0
    return _check_pointer(int(ptr), target, label)


def make_binder(tensor, *, output: bool, target: GpuTarget):
    """Return ``bind(buffer) -> int device pointer`` for one tensor of a built plan.

    Raises (from ``bind``)
    ----------------------
    VariantPackError
        A host array, a buffer of another device, wrong dtype, shape or strides, a
        read-only output.
    """
    want_dtype = numpy_dtype(tensor.data_type)
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    label = f"execute: tensor '{tensor.name}' (uid {tensor.uid})"
    spec = target.spec

    def bind(buf):
        if type(buf) is GpuArray:
            if buf.dims == dims and buf.dtype == want_dtype and (
                    buf.strides == strides or strides_match(dims, strides, buf.strides)):
                if buf.device != spec:
                    raise VariantPackError(f"{label}: the array lives on '{buf.device}'; this "
                                           f"plan runs on '{spec}'")
                return buf.ptr
            if buf.dtype != want_dtype:
                raise VariantPackError(f"{label} needs dtype {want_dtype.name} "
                                       f"({tensor.data_type.name}); got {buf.dtype.name}")
            err = _layout_error(tensor, buf.dims, buf.strides, label)
            if err:
                raise VariantPackError(err)
            return buf.ptr
        if isinstance(buf, np.ndarray) or hasattr(buf, "__array_interface__"):
            raise VariantPackError(
                f"{label}: got a host {type(buf).__name__}; '{spec}' takes device memory: "
                "copy it with `await dev.asarray(array)` (or pass a CuPy array / CUDA tensor)")
        if _has_cai(buf):
            return _from_cai(buf, tensor, label, want_dtype, target, output)
        if isinstance(buf, int) and not isinstance(buf, bool):
            return _check_pointer(buf, target, label)
        raise VariantPackError(
            f"{label}: '{spec}' takes GpuArrays, objects with __cuda_array_interface__ or int "
            f"device pointers; got {type(buf).__name__}")

    return bind


def bind_workspace(nbytes: int, given, *, where: str, target: GpuTarget):
    """The workspace pointer for one execution: ``given`` checked, or None (the stream's
    own workspace is used)."""
    if given is None or not nbytes:
        return None
    if isinstance(given, GpuArray):
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
