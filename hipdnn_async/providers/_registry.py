"""Which providers serve which device spec on this machine."""
from __future__ import annotations

import re

from .._errors import DeviceError
from ._base import Provider

__all__ = ["parse_spec", "provider_for", "available_devices"]

_SPEC = re.compile(r"^(cpu|gpu|cuda|hip)(?::(\d+))?$")

# GPU vendor (runtime._vendors.VENDORS) -> (provider module, class) serving its devices. A
# vendor missing here is looked for and reported, never used.
_PROVIDERS = {"cuda": ("cudnn", "CudnnProvider")}


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
    """GPU vendors usable here, in ``VENDORS`` order: runtime, a GPU and DNN library found
    (``runtime.load_vendor``) and a provider for them."""
    from ..runtime import VENDORS, load_vendor
    return [v for v in VENDORS if v in _PROVIDERS and load_vendor(v).ok]


def _device_count(runtime: str) -> int:
    from ..runtime import load_vendor
    return load_vendor(runtime).device_count


def available_devices() -> list[str]:
    """Device specs usable on this machine, CPU first (every GPU of each runtime)."""
    return ["cpu"] + [f"{rt}:{i}" for rt in _gpu_runtimes() for i in range(_device_count(rt))]


def gpu_unavailable_reason(kind: str = "gpu") -> str:
    """Why no device of vendor ``kind`` (``"gpu"``: of any vendor) is usable here ('' when
    one is): each vendor's missing library and the paths tried."""
    from ..runtime import VENDORS, load_vendor
    reasons = []
    for vendor in (VENDORS if kind == "gpu" else [kind]):
        state = load_vendor(vendor)
        if state.ok and vendor in _PROVIDERS:
            return ""
        why = state.reason or (f"its libraries are present, but no {vendor} provider is built "
                               "into this release")
        reasons.append(f"{vendor}: {why}" if kind == "gpu" else why)
    return "; ".join(reasons)


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
            f"Device: no usable {'GPU' if kind == 'gpu' else kind.upper()} device for "
            f"'{kind}:{index}': {gpu_unavailable_reason(kind)}; devices present: "
            f"{available_devices()}")
    import importlib
    module, cls = _PROVIDERS[wanted[0]]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)(index)
