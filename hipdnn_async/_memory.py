"""Device memory as ``Device.empty`` and ``Device.asarray`` give it: allocation under the
graph's layout rules, and copies onto a device in the source's memory order."""
from __future__ import annotations

import anyio
import numpy as np

from ._errors import GraphError
from ._layout import dense_strides_like
from ._types import as_data_type, numpy_dtype
from .graph import strides_for
from .graph._tensor import as_int_tuple, check_strides, packed_strides
from .runtime import GpuArray
from .runtime._buffer import DeviceArray, host_array, refuse_masked

__all__ = ["allocate", "copy_in"]


def allocate(provider, dims, dtype, layout, strides, where: str):
    """``provider.empty`` for logical ``dims`` with ``layout`` or ``strides`` (default
    packed channel-first), checked as a graph checks a tensor's.

    Raises
    ------
    GraphError
        A data type other than FLOAT/HALF/BFLOAT16/DOUBLE, non-integer or negative dims,
        both ``layout`` and ``strides``, an unknown layout or one of another rank, or
        strides that do not fit ``dims`` (each message starting with ``where``).
    DeviceError
        The memory cannot be had.
    """
    dt = numpy_dtype(as_data_type(dtype, where=where))
    dims = as_int_tuple(dims, where=where, what="dims")
    if any(d < 0 for d in dims):
        raise GraphError(f"{where}: dims {dims} hold a negative value")
    if layout is not None and strides is not None:
        raise GraphError(f"{where}: give layout or strides, not both")
    if strides is None:
        strides = (strides_for(dims, layout) if layout is not None
                   else packed_strides(dims, tuple(range(len(dims)))))
    else:  # the graph's rules: one stride per dim, each >= 1, no overlapping elements
        strides = as_int_tuple(strides, where=where, what="strides")
        check_strides(dims, strides, where=where)
    return provider.empty(dims, dt, strides)


async def copy_in(array, layout, strides, *, provider, host: bool, pool):
    """A new array of ``provider``'s device holding a copy of ``array`` (``Device.asarray``:
    the parameters, result and errors are documented there).

    ``host``: the device's memory is host memory, ordered after the work of ``pool`` (its
    stream pool); else the copy runs in a worker thread, after work already launched.
    """
    where = "Device.asarray"
    refuse_masked(array, where)
    if GpuArray is not None and isinstance(array, GpuArray):
        if host:
            array = await array.to_numpy()
        else:
            if layout is None and strides is None:
                strides = array.strides
            out = allocate(provider, array.dims, array.dtype, layout, strides, where)
            await anyio.to_thread.run_sync(out.copy_from, array)
            return out
    if isinstance(array, DeviceArray):  # once the work writing it is done
        if layout is None and strides is None:   # its memory order, as np.asarray's
            strides = dense_strides_like(array.view.shape, array.view.strides)
        array = await array.to_numpy()
    array = host_array(array, where)
    if layout is None and strides is None:
        strides = dense_strides_like(array.shape, array.strides)
    out = allocate(provider, array.shape, array.dtype, layout, strides, where)
    if not host:  # the copy waits for launched work; the loop must not
        await anyio.to_thread.run_sync(out.copy_from, array)
    else:  # a new array: no submitted work writes it yet, so copy, then order it
        out.copy_from(array)
        out.order_after(pool)
    return out
