"""Where the demo's tensors live: NumPy on the CPU device, device arrays on a GPU.

The host math of the demo (loss, optimiser, running statistics, the host ReLU of
evaluation (a)) is NumPy. On the CPU device (``device.is_host``) plans take those NumPy
arrays directly, so every method here hands its argument through without a copy; on a GPU
device arrays are not host-addressable, so NumPy inputs are copied in and results copied
out.
"""
from __future__ import annotations

import numpy as np

import hipdnn_async as hd

__all__ = ["Staging"]


class Staging:
    """Buffers of one device for the demo's float32 NCHW tensors.

    Parameters
    ----------
    device : hipdnn_async.Device
        The device the plans run on.

    Attributes
    ----------
    is_host : bool
        ``device.is_host``: True when NumPy arrays bind directly (no staging).
    """

    def __init__(self, device):
        self.device = device
        self.is_host = bool(device.is_host)
        self._resident: dict = {}

    def empty(self, dims: tuple) -> object:
        """An uninitialised float32 buffer of logical `dims` (packed NCHW)."""
        if self.is_host:
            return np.empty(dims, np.float32)
        return self.device.empty(dims, hd.DataType.FLOAT)

    async def put(self, array: np.ndarray) -> object:
        """`array` (float32, logical dims) where plans can read it: itself on the host, a
        new device copy on a GPU."""
        if self.is_host:
            return array
        return await self.device.asarray(np.ascontiguousarray(array, np.float32))

    async def get(self, buffer) -> np.ndarray:
        """`buffer` as NumPy: itself on the host, a copy once it is written on a GPU."""
        if self.is_host:
            return buffer
        return await buffer.to_numpy()

    def resident(self, arrays: dict) -> dict:
        """Device copies of named host arrays, refreshed from the host on every call.

        On the host the dict itself is returned. On a GPU each name keeps one device
        array, rewritten in place: the demo's parameters change after every SGD step and
        are small, so re-uploading them per pass is cheap. The copy is ordered after
        device work already launched, so a plan still reading the old values is safe.
        """
        if self.is_host:
            return arrays
        out = {}
        for name, value in arrays.items():
            buf = self._resident.get(name)
            if buf is None or buf.dims != value.shape:
                buf = self._resident[name] = self.device.empty(value.shape, hd.DataType.FLOAT)
            buf.copy_from(value)
            out[name] = buf
        return out
