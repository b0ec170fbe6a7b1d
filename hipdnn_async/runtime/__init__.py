"""Runtime layer: device memory, GPU streams and events, and vendor-library loading.

The CPU device's memory is host memory; ``DeviceArray`` gives it the same surface a GPU
array has (``dims``, ``strides``, ``dtype``, ``await to_numpy()``), so code written for a
GPU device runs unchanged on ``"cpu"``. ``GpuArray`` is the GPU's (``_gpu_device``).

The compiled bindings sit on one loader (``_loader``: ``Library``, ``LibraryTable``,
``LoadRecord``): ``_gpu`` (one ``Runtime`` type, a CUDA and a HIP instance) and one
module per DNN library (``_cudnn``, ``_onednn``, ...). ``_kinds`` is the registry of device
kinds (``KINDS``: ``"cpu"``, ``"cuda"``, ``"hip"``): each kind's runtime and DNN library and
where to find them (``_libraries``), its device specs, DLPack device types and Ray
resource; ``load_vendor`` (``_vendors``) loads a GPU kind's libraries, ``load_onednn`` the
host's optional DNN library. A launch's state is the runtime's too: the calling thread's
launch context (``_launch_state``, a C thread-local the Cython modules cimport), a stream's
DNN handle and workspace and the variant packs completed from them
(``_stream_resources``), created on every stream from what providers declared as data
(``_stream_prep``), and CUDA/HIP graph capture (``_gpu_graph``). This package imports
nothing from the graph layer, nor from providers, and calls nothing of theirs back.
"""
from ._buffer import DeviceArray
from ._kinds import KINDS, DeviceKind, parse_spec
from ._vendors import (VENDORS, OnednnState, VendorState, cuda_status, load_cuda, load_onednn,
                       load_vendor, onednn_status, vendor_status)

try:  # the compiled bindings build everywhere (no SDK needed); a source tree may lack them
    from . import _cudnn, _gpu
    from ._gpu import ExecCounter
    from ._gpu_device import GpuArray, GpuContext, LaunchContext, context_for, current_launch
    from ._loader import LoadRecord
except ImportError:  # pragma: no cover - load_vendor then reports "not built"
    _gpu = _cudnn = None
    GpuArray = GpuContext = LaunchContext = context_for = LoadRecord = None

    def current_launch():
        return None

    class ExecCounter:   # _gpu.ExecCounter's surface, for a tree without the bindings
        def __init__(self):
            self.executions = self.host_ns = 0

        def add(self, ns):
            self.executions += 1
            self.host_ns += ns

        exec_ms = property(lambda self: self.host_ns / 1e6)

LoadedLibrary = LoadRecord   # the former name of the load record

__all__ = ["DeviceArray", "DeviceKind", "ExecCounter", "GpuArray", "GpuContext", "KINDS",
           "LaunchContext", "LoadRecord", "LoadedLibrary", "OnednnState", "VENDORS",
           "VendorState", "context_for", "cuda_status", "current_launch", "load_cuda",
           "load_onednn", "load_vendor", "onednn_status", "parse_spec", "vendor_status"]
