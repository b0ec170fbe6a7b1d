"""Runtime layer: device memory, GPU streams and events, and vendor-library loading.

The CPU device's memory is host memory; ``DeviceArray`` gives it the same surface a GPU
array has (``dims``, ``strides``, ``dtype``, ``await to_numpy()``), so code written for a
GPU device runs unchanged on ``"cpu"``. ``GpuArray`` is the GPU's (``_gpu_device``);
``_gpu`` and ``_cudnn`` are the compiled bindings over the CUDA runtime and cuDNN, loaded
at run time by ``load_cuda`` (``_libs``). This package imports nothing from the graph layer.
"""
from ._buffer import DeviceArray
from ._libs import LoadedLibrary, cuda_status, load_cuda

try:  # the compiled bindings build everywhere (no SDK needed); a source tree may lack them
    from . import _cudnn, _gpu
    from ._gpu_device import GpuArray, GpuContext, LaunchContext, context_for, current_launch
except ImportError:  # pragma: no cover - load_cuda then reports "not built"
    _gpu = _cudnn = None
    GpuArray = GpuContext = LaunchContext = context_for = None

    def current_launch():
        return None

__all__ = ["DeviceArray", "GpuArray", "GpuContext", "LaunchContext", "LoadedLibrary",
           "context_for", "cuda_status", "current_launch", "load_cuda"]
