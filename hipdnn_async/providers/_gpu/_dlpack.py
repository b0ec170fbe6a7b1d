"""Reading a DLPack producer's tensor (shape, strides, dtype, device, data pointer).

A GPU binder needs only the description of a device tensor, not a new array object, so
this reads the ``DLManagedTensor`` behind the capsule of ``obj.__dlpack__()`` with ctypes
and leaves the capsule unconsumed: the producer's capsule destructor (run when the
capsule is collected) releases the export, while the producer object itself, kept alive
by the variant pack until the execution completes, owns the memory.

Struct layouts and enum values: ``dlpack.h`` of DLPack 0.8 / 1.0 (dmlc/dlpack), the
legacy (unversioned) ``"dltensor"`` capsule; strides are in elements, NULL for compact
row-major.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...runtime._kinds import (KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED, KDL_ROCM,
                               KDL_ROCM_HOST)

__all__ = ["DLPackTensor", "read_dlpack", "DEVICE_NAMES", "KDL_CPU", "KDL_CUDA", "KDL_CUDA_HOST",
           "KDL_ROCM", "KDL_ROCM_HOST", "KDL_CUDA_MANAGED"]

# DLDeviceType (dlpack.h, DLPack 1.0), for messages: every device type of the standard.
# Which types are whose memory is each kind's record (runtime.KINDS: dlpack, dlpack_host).
DEVICE_NAMES = {KDL_CPU: "CPU", KDL_CUDA: "CUDA", KDL_CUDA_HOST: "CUDA host (pinned)",
                4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", KDL_ROCM: "ROCm",
                KDL_ROCM_HOST: "ROCm host (pinned)", 12: "ExtDev",
                KDL_CUDA_MANAGED: "CUDA managed", 14: "oneAPI", 15: "WebGPU", 16: "Hexagon",
                17: "MAIA"}

# DLDataTypeCode (dlpack.h): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4
_FLOAT, _BFLOAT = 2, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


# private function objects (indexing makes new ones): the argtypes set here do not leak
# into ctypes.pythonapi's shared attributes
_get_pointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi["PyCapsule_IsValid"]
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass(frozen=True)
class DLPackTensor:
    """What a binder needs of a DLPack tensor.

    Attributes
    ----------
    shape : tuple of int
    strides : tuple of int or None
        In elements; None for compact row-major (C-contiguous).
    dtype : str
        ``"float16"``, ``"float32"``, ``"float64"``, ``"bfloat16"`` or a ``code/bits``
        description of anything else.
    itemsize : int
    device_type, device_id : int
        DLPack device (``KDL_*``) and ordinal.
    ptr : int
        Address of element 0 (``data + byte_offset``).
    """

    shape: tuple
    strides: tuple | None
    dtype: str
    itemsize: int
    device_type: int
    device_id: int
    ptr: int


def _dtype_name(code: int, bits: int, lanes: int) -> str:
    if lanes == 1 and code == _FLOAT and bits in (16, 32, 64):
        return f"float{bits}"
    if lanes == 1 and code == _BFLOAT and bits == 16:
        return "bfloat16"
    return f"DLPack dtype code {code} bits {bits} lanes {lanes}"


def read_dlpack(obj) -> DLPackTensor:
    """Describe ``obj``'s DLPack export (``obj.__dlpack__()``, no stream argument: as with
    ``__cuda_array_interface__``, ordering against the producer's stream is the caller's).

    Raises
    ------
    TypeError, ValueError, BufferError, ...
        Whatever the producer raises, or ValueError for a capsule that is not an unused
        ``"dltensor"``; the binder turns every failure into a VariantPackError.
    """
    capsule = obj.__dlpack__()
    if not _is_valid(capsule, b"dltensor"):
        raise ValueError("__dlpack__ returned no unused 'dltensor' capsule")
    managed = _DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    ndim = int(t.ndim)
    if not 0 <= ndim <= 64:
        raise ValueError(f"DLPack tensor with ndim {ndim}")
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    strides = (tuple(int(t.strides[i]) for i in range(ndim)) if ndim and bool(t.strides)
               else None)
    dt = t.dtype
    ptr = int(t.data or 0) + int(t.byte_offset)
    return DLPackTensor(shape, strides, _dtype_name(dt.code, dt.bits, dt.lanes),
                        (int(dt.bits) * int(dt.lanes) + 7) // 8, int(t.device.device_type),
                        int(t.device.device_id), ptr)
