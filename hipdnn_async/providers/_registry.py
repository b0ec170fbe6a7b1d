"""Which providers serve which device spec on this machine.

The vendors and their libraries are the runtime's (``runtime._vendors.VENDORS``,
``load_vendor``); which provider serves a vendor's devices is decided here
(``PROVIDERS``), so the runtime never imports providers. A vendor whose libraries load
but that has no provider is reported, never used.

Device specs: ``"cpu"``; ``"<vendor>:N"`` (``"cuda:N"``, ``"hip:N"``), the N-th device
of that vendor's runtime; ``"gpu:N"``, the N-th GPU of ``available_devices()`` (every
usable GPU of every vendor, vendors in ``VENDORS`` order): with one vendor present,
``"gpu:N"`` is that vendor's device N.
"""
from __future__ import annotations

import importlib
import re

from .._errors import DeviceError
from ._base import Provider

__all__ = ["PROVIDERS", "parse_spec", "provider_for", "available_devices",
           "gpu_unavailable_reason"]

_SPEC = re.compile(r"^(cpu|gpu|cuda|hip)(?::(\d+))?$")

# GPU vendor (a key of runtime._vendors.VENDORS) -> (module under providers, class) of the
# provider serving its devices; the module is imported only when a device is opened.
PROVIDERS = {"cuda": ("cudnn", "CudnnProvider"), "hip": ("miopen", "MiopenProvider")}


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


def _gpu_vendors() -> list[str]:
    """GPU vendors usable here, in ``VENDORS`` order: runtime, a GPU and the DNN library
    found (``runtime.load_vendor``) and a provider for them."""
    from ..runtime import VENDORS, load_vendor
    return [v for v in VENDORS if v in PROVIDERS and load_vendor(v).ok]


def _gpu_devices() -> list[tuple[str, int]]:
    """(vendor, index) of every usable GPU, vendors in ``VENDORS`` order."""
    from ..runtime import load_vendor
    return [(v, i) for v in _gpu_vendors() for i in range(load_vendor(v).device_count)]


def available_devices() -> list[str]:
    """Device specs usable on this machine: ``"cpu"`` first, then every GPU of every
    vendor (e.g. ``["cpu", "cuda:0", "cuda:1"]``)."""
    return ["cpu"] + [f"{v}:{i}" for v, i in _gpu_devices()]


def gpu_unavailable_reason(kind: str = "gpu") -> str:
    """Why no device of vendor ``kind`` (``"gpu"``: of any vendor) is usable here ('' when
    one is): each vendor's missing library and the paths tried, or its missing provider."""
    from ..runtime import VENDORS, load_vendor
    reasons = []
    for vendor in (VENDORS if kind == "gpu" else [kind]):
        state = load_vendor(vendor)
        if state.ok and vendor in PROVIDERS:
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
        No such device: the vendor's libraries or provider are absent (the message says
        which library is missing and where it was looked for), or the index is beyond the
        devices present (listed).
    """
    if kind == "cpu":
        if index != 0:
            raise DeviceError(f"Device: there is one CPU device, 'cpu' (index 0); got index "
                              f"{index}", code="INVALID_VALUE")
        from .cpu import CpuProvider
        return CpuProvider()
    devices = _gpu_devices()
    mine = devices if kind == "gpu" else [d for d in devices if d[0] == kind]
    if not mine:
        raise DeviceError(
            f"Device: no usable {'GPU' if kind == 'gpu' else kind.upper()} device for "
            f"'{kind}:{index}': {gpu_unavailable_reason(kind)}; devices present: "
            f"{available_devices()}")
    if kind == "gpu":
        if index >= len(mine):
            raise DeviceError(f"Device: no device 'gpu:{index}'; {len(mine)} GPU(s) present: "
                              f"{available_devices()[1:]}", code="INVALID_VALUE")
        vendor, index = mine[index]
    elif (kind, index) not in mine:
        raise DeviceError(f"Device: no device '{kind}:{index}'; {len(mine)} {kind.upper()} "
                          f"device(s) present: {available_devices()[1:]}", code="INVALID_VALUE")
    else:
        vendor = kind
    module, cls = PROVIDERS[vendor]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)(index)
