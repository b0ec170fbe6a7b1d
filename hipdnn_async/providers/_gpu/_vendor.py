"""The first step of opening a GPU provider: its vendor's libraries, and the device."""
from __future__ import annotations

from ..._errors import DeviceError
from ...runtime import VENDORS, load_vendor

__all__ = ["open_vendor"]


def open_vendor(kind: str, index: int):
    """The loaded vendor state (``runtime.load_vendor``) of `kind`, with device `index`.

    Parameters
    ----------
    kind : str
        A GPU kind (a key of ``runtime.VENDORS``: ``"cuda"``, ``"hip"``).
    index : int
        Device ordinal among the devices the runtime sees.

    Raises
    ------
    DeviceError
        The runtime or the DNN library is absent (the reason names them and the paths
        tried), or there is no device `index` (code INVALID_VALUE, with the count present).
    """
    state = load_vendor(kind)
    if not state.ok:
        raise DeviceError(f"Device: {kind}:{index} is unavailable: {state.reason}")
    if not 0 <= index < state.device_count:
        raise DeviceError(f"Device: no device {kind}:{index}; {state.device_count} "
                          f"{VENDORS[kind].title} device(s) present", code="INVALID_VALUE")
    return state
