"""Which providers serve which device spec on this machine.

The device kinds, their libraries and their specs are the runtime's registry
(``runtime._kinds.KINDS``; ``runtime.load_vendor`` loads a GPU kind's libraries); which
provider serves a kind is decided here (``PROVIDERS``), so the runtime never imports
providers. A GPU kind whose libraries load but that has no provider is reported, never
used. The host kind (``"cpu"``) is served by the CPU provider, always present.

Device specs: ``"cpu"``; ``"<vendor>:N"`` (``"cuda:N"``, ``"hip:N"``), the N-th device
of that vendor's runtime; ``"gpu:N"``, the N-th GPU of ``available_devices()`` (every
usable GPU of every vendor, vendors in ``VENDORS`` order): with one vendor present,
``"gpu:N"`` is that vendor's device N.
"""
from __future__ import annotations

import importlib

from .._errors import DeviceError
from ..runtime._kinds import ANY_GPU, KINDS, kind_title, parse_spec as _parse_spec
from ._base import Provider

__all__ = ["PROVIDERS", "parse_spec", "provider_for", "available_devices",
           "gpu_unavailable_reason"]

# GPU kind (a key of runtime.VENDORS) -> (module under providers, class) of the provider
# serving its devices; the module is imported only when a device is opened.
PROVIDERS = {"cuda": ("cudnn", "CudnnProvider"), "hip": ("miopen", "MiopenProvider")}


def parse_spec(spec: str) -> tuple[str, int]:
    """Split ``"cuda:1"`` into ``("cuda", 1)``; a bare kind means index 0.

    Raises
    ------
    DeviceError
        ``spec`` is not ``cpu``, ``gpu:N`` or ``<vendor>:N`` of a known GPU kind
        (``cuda:N``, ``hip:N``); the message lists them.
    """
    return _parse_spec(spec, "Device")


def _gpu_vendors() -> list[str]:
    """GPU vendors usable here, in ``VENDORS`` order: runtime, a GPU and the DNN library
    found (``runtime.load_vendor``) and a provider for them."""
    from ..runtime import VENDORS, load_vendor
    return [v for v in VENDORS if v in PROVIDERS and load_vendor(v).ok]


def _gpu_devices() -> list[tuple[str, int]]:
    """(vendor, index) of every usable GPU, vendors in ``VENDORS`` order."""
    from ..runtime import load_vendor
    return [(v, i) for v in _gpu_vendors() for i in range(load_vendor(v).device_count)]


def _gpu_specs() -> list[str]:
    return [f"{v}:{i}" for v, i in _gpu_devices()]


def available_devices() -> list[str]:
    """Device specs usable on this machine: ``"cpu"`` first, then every GPU of every
    vendor (e.g. ``["cpu", "cuda:0", "cuda:1"]``)."""
    return [k for k, kind in KINDS.items() if kind.is_host] + _gpu_specs()


def gpu_unavailable_reason(kind: str = ANY_GPU) -> str:
    """Why no device of vendor ``kind`` (``"gpu"``: of any vendor) is usable here ('' when
    one is): each vendor's missing library and the paths tried, or its missing provider."""
    from ..runtime import VENDORS, load_vendor
    reasons = []
    for vendor in (VENDORS if kind == ANY_GPU else [kind]):
        state = load_vendor(vendor)
        if state.ok and vendor in PROVIDERS:
            return ""
        why = state.reason or (f"its libraries are present, but no {vendor} provider is built "
                               "into this release")
        reasons.append(f"{vendor}: {why}" if kind == ANY_GPU else why)
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
    if kind in KINDS and KINDS[kind].is_host:
        if index != 0:
            raise DeviceError(f"Device: there is one {kind_title(kind)} device, '{kind}' "
                              f"(index 0); got index {index}", code="INVALID_VALUE")
        from .cpu import CpuProvider
        return CpuProvider()
    devices = _gpu_devices()
    mine = devices if kind == ANY_GPU else [d for d in devices if d[0] == kind]
    title = kind_title(kind)
    if not mine:
        raise DeviceError(
            f"Device: no usable {title} device for '{kind}:{index}': "
            f"{gpu_unavailable_reason(kind)}; devices present: {available_devices()}")
    if kind == ANY_GPU:
        if index >= len(mine):
            raise DeviceError(f"Device: no device '{kind}:{index}'; {len(mine)} GPU(s) present: "
                              f"{_gpu_specs()}", code="INVALID_VALUE")
        vendor, index = mine[index]
    elif (kind, index) not in mine:
        raise DeviceError(f"Device: no device '{kind}:{index}'; {len(mine)} {title} "
                          f"device(s) present: {_gpu_specs()}", code="INVALID_VALUE")
    else:
        vendor = kind
    module, cls = PROVIDERS[vendor]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)(index)
