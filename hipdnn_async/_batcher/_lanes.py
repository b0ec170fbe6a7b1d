"""Lanes over devices: one per device, each with its plans, constants and counters; the
dispatch sends each batch to the open lane with the fewest batches in flight (ties in
turn), and a lane whose device is closed leaves it for good, with one warning."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import DeviceError
from ._metrics import window
from ._staging import alloc, copy_in, device_empty

__all__ = ["Lane", "Lanes", "n_streams"]


def n_streams(device) -> int:
    """Batches a device runs at once by default: its number of streams (2 if it does not
    say)."""
    streams = getattr(device, "streams", None)
    try:
        return len(streams) if streams is not None else 2
    except TypeError:
        return int(streams) if isinstance(streams, int) else 2


@dataclass(eq=False)
class Lane:
    """One device of a batcher: its plans per bucket, its constants, its counters."""

    index: int
    device: Any
    host: bool              # the device's arrays are host memory (NumPy views)
    plans: dict = field(default_factory=dict)        # bucket size -> _buckets.Bucket
    plan_locks: dict = field(default_factory=dict)   # bucket size -> anyio.Lock
    constants: dict = field(default_factory=dict)    # name -> buffer on this device
    inflight: int = 0
    batches: int = 0
    rows: int = 0
    errors: int = 0
    closed: bool = False    # out of the dispatch (its device was closed)
    retried: int = 0        # batches that failed here before executing and ran elsewhere
    exec_ms: Any = field(default_factory=window)

    @property
    def spec(self) -> str:
        return repr(getattr(self.device, "spec", type(self.device).__name__))

    def upload_constant(self, name, t, host: np.ndarray) -> None:
        """Hold `host` (a prepared constant, ``_constants.prepare_constant``) on this
        lane's device: a read-only copy on a host device, a device array elsewhere."""
        if self.host:
            buf = alloc(self, t, zero=False)
            buf[...] = host
            buf.flags.writeable = False
        else:
            buf = device_empty(self, name, t)
            copy_in(self, name, buf, host)
        self.constants[name] = buf


class Lanes:
    """The lanes of a batcher, in the order their devices were given (a sequence)."""

    def __init__(self, devices):
        # A device without is_host (a duck-typed stand-in) is taken as host memory.
        self._lanes = [Lane(i, d, bool(getattr(d, "is_host", True)))
                       for i, d in enumerate(devices)]
        self._rr = 0                        # the lane a tie goes to next

    def __len__(self) -> int:
        return len(self._lanes)

    def __getitem__(self, i) -> Lane:
        return self._lanes[i]

    def __iter__(self):
        return iter(self._lanes)

    def pick(self, exclude: Lane | None = None) -> Lane | None:
        """The open lane with the fewest batches in flight (ties go to the lanes in turn),
        other than `exclude`; None when no lane is left."""
        lanes, n = self._lanes, len(self._lanes)
        start = self._rr
        live = [ln for ln in (lanes[(start + k) % n] for k in range(n))
                if ln is not exclude and self.is_open(ln)]
        if not live:
            return None
        best = min(live, key=lambda ln: ln.inflight)
        self._rr = (best.index + 1) % n
        return best

    def is_open(self, lane: Lane) -> bool:
        """False once `lane`'s device is closed (the lane then leaves the dispatch, with one
        warning)."""
        if lane.closed:
            return False
        # `is True`: a stand-in device with no such property (or a method of that name)
        # counts as open.
        if getattr(lane.device, "closed", False) is not True:
            return True
        lane.closed = True
        left = [ln.index for ln in self._lanes if not ln.closed]
        warnings.warn(f"DynamicBatcher: device {lane.spec} of lane {lane.index} is closed; "
                      f"its batches go to lanes {left} from now on" if left else
                      f"DynamicBatcher: device {lane.spec} of lane {lane.index} is closed; "
                      "no lane is left, requests fail", RuntimeWarning, stacklevel=2)
        return False

    def no_lane_error(self) -> DeviceError:
        """The error of a request arriving once every lane's device is closed."""
        names = ", ".join(f"lane {ln.index} {ln.spec}" for ln in self._lanes)
        return DeviceError(f"DynamicBatcher: every device is closed ({names}); open new "
                           "Devices and a new DynamicBatcher", code="INVALID_VALUE")
