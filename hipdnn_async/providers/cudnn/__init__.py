"""The cuDNN provider (NVIDIA GPUs); see ``_provider``."""
from ._provider import CUDNN_ENGINE_NAME, CudnnProvider

__all__ = ["CudnnProvider", "CUDNN_ENGINE_NAME"]
