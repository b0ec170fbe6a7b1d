"""Staging: the variant pack of one batch on one lane, and the copies to and from its device.

On a host device (the CPU) the rows are gathered straight into device arrays' NumPy views
(one copy per input, into buffers each bucket keeps for its next batch) and no copy
follows; the outputs are fresh arrays per batch, whose row slices are the results. On a device whose arrays are not host-addressable (a GPU) the rows
are gathered into host staging arrays in the tensors' own layouts (so the copy reorders
nothing), copied into device buffers off the event loop, and the outputs copied back once
the batch has run; each bucket keeps these buffers (a ``Staging``) for its next batch.
Copy and allocation errors name the tensor and the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import anyio
import numpy as np

from .._errors import DeviceError, HipdnnError
from .._layout import element_extent
from .._types import numpy_dtype
from ..runtime import DeviceArray

__all__ = ["Staging", "alloc", "copy_in", "copy_out", "device_empty", "gather",
           "host_buffer", "new_staging", "pack_host", "pack_staged"]


@dataclass(eq=False)
class Staging:
    """Buffers of one batch on a non-host device."""

    host: dict              # input name -> host staging array (bucket dims, tensor strides)
    device: dict            # input and output name -> device array (bucket dims)


def host_buffer(t) -> np.ndarray:
    """A zeroed NumPy array with the tensor's dims, element strides and dtype.

    Staged in the tensor's own layout, the copy into device memory order reorders nothing.
    """
    return DeviceArray(t.dims, numpy_dtype(t.data_type), t.strides, fill=0).view


def _named_error(exc: Exception, where: str) -> HipdnnError:
    """`exc` as one of our errors whose message starts with `where` (which names the tensor)."""
    if isinstance(exc, HipdnnError):
        return exc.prefixed(where)    # same type and fields (a vendor error's call, library)
    else:
        err = DeviceError(f"{where}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def alloc(lane, t, *, zero: bool) -> np.ndarray:
    """A buffer of a host device with the tensor's dims and strides (logical view)."""
    view = lane.device.empty(t.dims, t.data_type, strides=t.strides).view
    if zero:
        view[...] = 0
    return view


def device_empty(lane, name, t):
    """A device array with the tensor's dims and strides (non-host devices)."""
    try:
        return lane.device.empty(t.dims, t.data_type, strides=t.strides)
    except Exception as exc:
        raise _named_error(exc, f"DynamicBatcher: allocating tensor {name!r} (dims "
                                f"{tuple(t.dims)}) on device {lane.spec}")


def copy_in(lane, name, buf, host: np.ndarray) -> None:
    """Blocking host-to-device copy into `buf`; errors name the tensor."""
    try:
        buf.copy_from(host)
    except Exception as exc:
        raise _named_error(exc, f"DynamicBatcher: copying tensor {name!r} to device "
                                f"{lane.spec}")


async def copy_out(lane, name, buf) -> np.ndarray:
    """Device-to-host copy of `buf` once the work writing it is done; errors name it."""
    try:
        return await buf.to_numpy()
    except Exception as exc:
        raise _named_error(exc, f"DynamicBatcher: copying tensor {name!r} from device "
                                f"{lane.spec}")


def gather(buf: np.ndarray, parts: list, rows: int) -> None:
    """Copy the rows of `parts` (arrays of buf's dims past N and dtype) into the first
    `rows` rows of `buf`, in order, with one copy each; zero the padding rows after."""
    if len(parts) == 1:
        buf[:rows] = parts[0]
    else:
        np.concatenate(parts, out=buf[:rows])
    if rows < buf.shape[0]:
        buf[rows:] = 0


def pack_host(lane, bucket, batch, rows: int, roles) -> tuple[dict, dict, dict]:
    """Variant pack of a batch on a host device: rows gathered into the bucket's input
    buffers (device views, reused from ``bucket.idle`` and handed back after a clean run)
    and fresh output buffers (their row slices are the callers' results); returns (pack,
    output views by name, input buffers by name)."""
    inputs = bucket.idle.pop() if bucket.idle else {
        name: alloc(lane, bucket.tensors[name], zero=False) for name in roles.inputs}
    pack, outs = {}, {}
    for i, name in enumerate(roles.inputs):
        buf = inputs[name]
        gather(buf, [req.arrays[i] for req in batch], rows)
        pack[bucket.keys[name]] = buf
    for name, buf in lane.constants.items():
        pack[bucket.keys[name]] = buf
    for name in roles.all_outputs:
        outs[name] = _fresh_output(lane, bucket, name)
        pack[bucket.keys[name]] = outs[name]
    return pack, outs, inputs


def _fresh_output(lane, bucket, name) -> np.ndarray:
    """A new output buffer of `bucket` on a host lane: the device's first (its memory as
    ``device.empty`` makes it), then NumPy arrays of the same dims, strides and dtype
    over fresh memory (what a CPU ``Device.empty`` is; a microsecond, not tens)."""
    like = bucket.out_like.get(name)
    if like is None:
        view = alloc(lane, bucket.tensors[name], zero=False)
        elements = tuple(st // view.itemsize for st in view.strides)
        bucket.out_like[name] = (view.shape, view.dtype, view.strides,
                                 element_extent(view.shape, elements))
        return view
    shape, dtype, strides, extent = like
    return np.ndarray(shape, dtype, np.empty(max(extent, 1), dtype), 0, strides)


def new_staging(lane, bucket, roles) -> Staging:
    """Host staging arrays and device buffers for one batch of `bucket` on `lane`."""
    host = {k: host_buffer(bucket.tensors[k]) for k in roles.inputs}
    device = {k: device_empty(lane, k, bucket.tensors[k])
              for k in (*roles.inputs, *roles.all_outputs)}
    return Staging(host, device)


async def pack_staged(lane, bucket, staging: Staging, batch, rows: int, roles) -> dict:
    """Variant pack of a batch on a non-host device: rows gathered on the host and
    copied to the device (off the event loop: the copy waits for earlier device work)."""
    pack = {bucket.keys[k]: buf for k, buf in lane.constants.items()}
    for i, name in enumerate(roles.inputs):
        host = staging.host[name]
        gather(host, [req.arrays[i] for req in batch], rows)
        await anyio.to_thread.run_sync(copy_in, lane, name, staging.device[name], host)
    for name in (*roles.inputs, *roles.all_outputs):
        pack[bucket.keys[name]] = staging.device[name]
    return pack
