"""Checks of ``DynamicBatcher``'s arguments other than the graph's tensors (devices,
sizes, delay, knobs, names), each refused with an error naming the argument."""
from __future__ import annotations

import math
import numbers
from typing import Mapping

from .._errors import DeviceError, GraphError, KnobError, VariantPackError

__all__ = ["check_constants", "check_delay", "check_devices", "check_knobs", "check_names",
           "check_positive_int"]


def check_positive_int(name: str, value) -> int:
    """`value` as an int >= 1 (GraphError naming `name` otherwise; a bool is refused)."""
    if type(value) is bool or not isinstance(value, numbers.Integral) or value < 1:
        raise GraphError(f"DynamicBatcher: {name}={value!r} must be an int >= 1")
    return int(value)


def check_delay(max_delay_ms) -> float:
    """`max_delay_ms` as a finite float >= 0 (ms)."""
    if type(max_delay_ms) is bool or not isinstance(max_delay_ms, numbers.Real) or not (
            0.0 <= float(max_delay_ms) < math.inf):
        raise GraphError(f"DynamicBatcher: max_delay_ms={max_delay_ms!r} must be a finite "
                         "number >= 0 (ms)")
    return float(max_delay_ms)


def check_devices(device) -> list:
    """`device` (a Device or a list or tuple of them) as a non-empty list of distinct
    objects with ``build()`` and ``empty()``."""
    devices = list(device) if isinstance(device, (list, tuple)) else [device]
    if not devices:
        raise GraphError("DynamicBatcher: device=[] names no device; give a Device or "
                         "a list of Devices")
    for d in devices:
        if not callable(getattr(d, "build", None)) or not callable(
                getattr(d, "empty", None)):
            raise DeviceError(f"DynamicBatcher: device must be an hd.Device (with build() "
                              f"and empty()) or a list of them; got {type(d).__name__} "
                              f"{d!r}", code="INVALID_VALUE")
    if len({id(d) for d in devices}) != len(devices):
        raise GraphError("DynamicBatcher: the same Device object is listed twice; open "
                         "one Device per lane (two on one GPU are allowed)")
    return devices


def check_constants(constants) -> None:
    if constants is not None and not isinstance(constants, Mapping):
        raise VariantPackError(f"DynamicBatcher: constants must be a mapping of tensor "
                               f"name to array; got {type(constants).__name__}")


def check_names(what: str, names) -> None:
    """`names` (``inputs`` or ``outputs``) is None, a name or a list or tuple of names."""
    if names is not None and not isinstance(names, str) and not (
            isinstance(names, (list, tuple)) and all(isinstance(n, (str, int))
                                                     for n in names)):
        raise GraphError(f"DynamicBatcher: {what}={names!r} must be a tensor name "
                         "or a list of names")


def check_knobs(knobs):
    """`knobs` as ``device.build`` takes them: None, a dict, or a tuple of KnobSetting."""
    if knobs is None or isinstance(knobs, Mapping):
        return dict(knobs) if knobs else None
    if isinstance(knobs, (list, tuple)):        # KnobSettings, as device.build takes
        return tuple(knobs)
    raise KnobError(f"DynamicBatcher: knobs={knobs!r} must be a mapping of knob id "
                    "to value or a sequence of KnobSetting")
