"""Runtime layer: device memory, and (for GPU providers) streams, events and library loading.

The CPU device's memory is host memory; ``DeviceArray`` gives it the same surface a GPU
array has (``dims``, ``strides``, ``dtype``, ``await to_numpy()``), so code written for a
GPU device runs unchanged on ``"cpu"``. This package imports nothing from the graph layer.
"""
from ._buffer import DeviceArray

__all__ = ["DeviceArray"]
