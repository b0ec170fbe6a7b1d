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
    """GPU runtimes whose provider loads here ('cuda', 'hip'); none are built in yet."""
    return []


def available_devices() -> list[str]:
    """Device specs usable on this machine, CPU first."""
    return ["cpu"] + [f"{rt}:0" for rt in _gpu_runtimes()]


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
        raise DeviceError(
            f"Device: no {'GPU' if kind == 'gpu' else kind.upper()} runtime found for '{kind}:{index}'; "
            f"devices present: {available_devices()}")
    raise DeviceError(f"Device: the {wanted[0]} provider is not available in this build")
