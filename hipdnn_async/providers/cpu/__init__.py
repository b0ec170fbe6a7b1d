"""The CPU provider (always present): NumPy/BLAS for the bulk, Cython for fused loops."""
from ._provider import CPU_ENGINE_NAME, CpuProvider

__all__ = ["CpuProvider", "CPU_ENGINE_NAME"]
