"""Constants of a batcher (weights, bias, scale, statistics): read as ``plan.execute``
reads a buffer, cast once to the tensor's dtype on the host, refused where the reading
or the cast would be silently wrong."""
from __future__ import annotations

import numpy as np

from .._errors import VariantPackError
from .._layout import packed_strides, same_memory_order, stride_order, strides_match
from ..runtime._buffer import host_array
from ._staging import host_buffer

__all__ = ["prepare_constant"]


def _logical_constant(name: str, t, arr: np.ndarray) -> np.ndarray:
    """`arr` as an array of the tensor's logical dims, read as ``plan.execute`` reads a
    buffer: logical dims (N, C, [D,] H, W), or a C-contiguous array in the tensor's memory
    order (e.g. (N, H, W, C) for NHWC). Where the two shapes differ, a logical array may
    have any strides; where they are the same (an NHWC filter with C == R == S), it must
    have the tensor's strides (the logical view of memory-order data), as in execute.

    Raises
    ------
    VariantPackError
        Neither shape; a memory-order array that is not C-contiguous; or, where the shapes
        are the same, an array without the tensor's strides (C-contiguous or not, it may
        hold either order: a guess could be silently wrong).
    """
    dims, strides = tuple(t.dims), tuple(t.strides)
    order = stride_order(dims, strides)
    physical = tuple(dims[a] for a in order)
    inverse = tuple(order.index(a) for a in range(len(dims)))
    natural = packed_strides(dims, tuple(range(len(dims))))
    # both readings give other values: a non-trivial memory order that the shape hides
    ambiguous = same_memory_order(dims, physical) and not strides_match(dims, strides,
                                                                         natural)
    if arr.shape == dims:
        item = arr.itemsize
        got = tuple(s // item for s in arr.strides)
        if not ambiguous or (all(s % item == 0 for s in arr.strides)
                             and strides_match(dims, strides, got)):
            return arr
        if strides_match(dims, strides, packed_strides(dims, order)):
            how = (f"memory_order_array.transpose{inverse}, or for logical data "
                   f"np.ascontiguousarray(arr.transpose{order}).transpose{inverse}")
        else:                             # padded strides: no transpose gives them
            how = ("np.lib.stride_tricks.as_strided over a buffer laid out with those "
                   "strides")
        raise VariantPackError(
            f"DynamicBatcher: constant {name!r}: an array of shape {arr.shape} is ambiguous "
            f"here (the logical dims and the memory order {order} have the same shape); "
            f"pass the logical view with the tensor's strides {strides}: {how}")
    if same_memory_order(arr.shape, physical):
        if not arr.flags.c_contiguous:
            raise VariantPackError(f"DynamicBatcher: constant {name!r}: a memory-order "
                                   f"array (shape {arr.shape}) must be C-contiguous; pass "
                                   "np.ascontiguousarray(arr)")
        return arr.reshape(physical).transpose(inverse)
    raise VariantPackError(f"DynamicBatcher: constant {name!r} needs logical shape {dims} "
                           f"(N, C, [D,] H, W order) or a C-contiguous array of shape "
                           f"{physical} (memory order); got {arr.shape}")


def _check_cast(name: str, value: np.ndarray, cast: np.ndarray) -> None:
    """Refuse a constant whose cast to the tensor's dtype turned a finite value into an
    infinity or NaN (1e5 as float16 is inf): that would be a silently wrong model."""
    with np.errstate(invalid="ignore", over="ignore"):
        # finiteness in each array's own dtype (a long double beyond float64 is finite)
        lost = np.isfinite(value) & ~np.isfinite(cast.astype(np.float64))
    if lost.any():
        at = tuple(int(i) for i in np.argwhere(lost)[0])
        raise VariantPackError(f"DynamicBatcher: constant {name!r} holds {value[at].item()!r} at "
                               f"index {at}, beyond the range of the tensor's dtype "
                               f"{cast.dtype.name} (it would be {float(cast[at])})")


def prepare_constant(name: str, t, value) -> np.ndarray:
    """`value` cast once to tensor `t`'s dtype, in a host array of its dims and strides
    (the same values then go to every device).

    Raises
    ------
    VariantPackError
        A masked array, a non-numeric dtype, a shape that is neither reading of the
        tensor (see ``_logical_constant``), or a value the cast makes infinite or NaN.
    """
    arr = host_array(value, f"DynamicBatcher: constant {name!r}")
    if arr.dtype.kind not in "fiu" and arr.dtype.name != "bfloat16":
        raise VariantPackError(f"DynamicBatcher: constant {name!r} needs a real "
                               f"numeric array; got dtype {arr.dtype}")
    arr = _logical_constant(name, t, arr)
    host = host_buffer(t)
    with np.errstate(over="ignore", invalid="ignore"):   # _check_cast says it
        host[...] = arr
    if arr.dtype != host.dtype:
        _check_cast(name, arr, host)
    return host
