"""hipdnn_async: deep-learning primitive graphs on CPU and GPUs, awaited from asyncio or trio.

    import hipdnn_async as hd
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(8, 64, 56, 56), layout="NHWC", name="x")
    ...
    async with hd.Device("cpu") as dev:
        plan = await dev.build(g)
        await plan.execute({x: x_arr, w: w_arr, y: y_arr})

The public contract is docs/contract/ (semantics, tolerances, errors; the README links
it); everything here is re-exported from the modules' ``__all__``.
"""
from ._version import __version__
from ._errors import (DECLINE_TYPES, DeviceError, ExecutionError, GraphError, HipdnnError,
                      KnobError, NotSupportedError, PerfDbError, VariantPackError)
from ._types import ConvolutionMode, DataType, PointwiseMode
from .graph import TensorAttributes, strides_for
from .patterns import Pattern
from ._knobs import Knob, KnobSetting
from ._perfdb import PerfDb
from .providers._base import Engine
from .runtime import DeviceArray, GpuArray
from ._device import Device, ExecutionPlan, devices, engines, stats
from ._lowering import Graph   # graph.Graph with hipDNN's lowering methods
from ._batcher import DynamicBatcher
from .profiler import Profile, profile
from . import _log

_log.configure_from_env()

__all__ = [
    "__version__",
    "HipdnnError", "GraphError", "NotSupportedError", "KnobError", "VariantPackError",
    "ExecutionError", "DeviceError", "PerfDbError", "DECLINE_TYPES",
    "DataType", "PointwiseMode", "ConvolutionMode",
    "Graph", "TensorAttributes", "strides_for", "Pattern",
    "Knob", "KnobSetting", "PerfDb", "Engine", "DeviceArray", "GpuArray",
    "Device", "ExecutionPlan", "devices", "engines", "stats", "DynamicBatcher",
    "Profile", "profile",
]
