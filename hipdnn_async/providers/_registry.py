"""Which providers serve which device spec on this machine."""
from __future__ import annotations

import re

from .._errors import DeviceError
from ._base import Provider

__all__ = ["parse_spec", "provider_for", "available_devices"]

_SPEC = re.compile(r"^(cpu|gpu|cuda|hip)(?::(\d+))?$")


def parse_spec(spec: str) -> tuple[str, int]:
    """Split ``"cuda:1"`` into ``("cuda", 1)``; a bare kind means index 0.

    Raises
    ------
    DeviceError
        ``spec`` is not ``cpu``, ``gpu:N``, ``cuda:N`` or ``hip:N``.
    """
    m = _SPEC.match(str(spec).strip().lower())
    if not m:
        raise DeviceError(f"Device: unknown device spec {spec!r}; use 'cpu', 'gpu:N', "
                          "'cuda:N' or 'hip:N'", code="INVALID_VALUE")
    return m.group(1), int(m.group(2) or 0)


def _gpu_runtimes() -> list[str]:
    """GPU runtimes whose provider loads here: 'cuda' when the CUDA runtime, a GPU and
    cuDNN 9 are found (``runtime.load_cuda``). HIP/MIOpen is not built in."""
    from ..runtime import load_cuda
    return ["cuda"] if load_cuda()["ok"] else []


def _device_count(runtime: str) -> int:
    from ..runtime import load_cuda
    return load_cuda()["device_count"] if runtime == "cuda" else 0


def available_devices() -> list[str]:
    """Device specs usable on this machine, CPU first (every GPU of each runtime)."""
    return ["cpu"] + [f"{rt}:{i}" for rt in _gpu_runtimes() for i in range(_device_count(rt))]


def gpu_unavailable_reason() -> str:
    """Why no CUDA device is usable here ('' when one is)."""
    from ..runtime import load_cuda
    state = load_cuda()
    return "" if state["ok"] else state["reason"]


def provider_for(kind: str, index: int) -> Provider:
    """Return the provider for a parsed device spec.

    Raises
    ------
    DeviceError
        The runtime is absent (no GPU provider or vendor library on this machine).
    """
    if kind == "cpu":
        if index != 0:
            raise DeviceError(f"Device: there is one CPU device, 'cpu' (index 0); got index "
                              f"{index}", code="INVALID_VALUE")
        from .cpu import CpuProvider
        return CpuProvider()
    runtimes = _gpu_runtimes()
    wanted = runtimes if kind == "gpu" else [kind] if kind in runtimes else []
    if not wanted:
        why = (gpu_unavailable_reason() if kind in ("gpu", "cuda") else
               "the HIP/MIOpen provider is not built into this release")
        raise DeviceError(
            f"Device: no usable {'GPU' if kind == 'gpu' else kind.upper()} device for "
            f"'{kind}:{index}': {why}; devices present: {available_devices()}")
    from .cudnn import CudnnProvider
    return CudnnProvider(index)
