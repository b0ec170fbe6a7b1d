"""Keys and records of the perf db, their fields in column order, and the checks every
value passes before SQLite sees it."""
from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import dataclass, field

from .._errors import DeviceError, PerfDbError

__all__ = ["FIELDS", "INT_MAX", "KEY_FIELDS", "PerfKey", "PerfRecord", "RECORD_FIELDS",
           "SCHEMA1_FIELDS", "STR_FIELDS", "check_path", "encodable", "error", "os_error"]

KEY_FIELDS = ("provider", "engine", "library_versions", "device", "problem", "workspace_limit")
RECORD_FIELDS = ("algorithm", "time_ms", "workspace_bytes", "measured_at")
FIELDS = KEY_FIELDS + RECORD_FIELDS
STR_FIELDS = ("provider", "engine", "library_versions", "device", "problem", "algorithm")
# Schema 1 (hipdnn_async 0.1.0): the same columns without ``engine``.
SCHEMA1_FIELDS = tuple(f for f in FIELDS if f != "engine")

# SQLite INTEGER is a signed 64-bit integer (sqlite.org/datatype3.html).
INT_MAX = (1 << 63) - 1


def error(message: str) -> PerfDbError:
    """The perf db's error for a bad argument, file or entry (a ``ValueError``)."""
    return PerfDbError(message)


def os_error(message: str) -> DeviceError:
    """The perf db's error for the operating system failing to read or write a file the
    user named (permissions, a full disk): a ``DeviceError``, code INVALID_VALUE."""
    return DeviceError(message, code="INVALID_VALUE")


def encodable(value: str) -> bool:
    """Whether SQLite can store `value` (UTF-8: no lone surrogates such as '\\udcff')."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_str(owner: str, name: str, value) -> str:
    if not isinstance(value, str):
        raise error(f"{owner}: field '{name}' must be a str; got "
                    f"{type(value).__name__} {value!r}")
    if not encodable(value):
        raise error(f"{owner}: field '{name}' must be valid Unicode text (no lone "
                    f"surrogates); got {value!r}")
    return value


def _check_int(owner: str, name: str, value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise error(f"{owner}: field '{name}' must be an int; got "
                    f"{type(value).__name__} {value!r}")
    value = int(value)
    if not 0 <= value <= INT_MAX:
        raise error(f"{owner}: field '{name}' must be in [0, 2**63 - 1]; got {value}")
    return value


def check_path(owner: str, path) -> str:
    """`path` (str, bytes or os.PathLike) as a str, or a PerfDbError naming what it is."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise error(f"{owner}: path must be a str, bytes or os.PathLike; got "
                    f"{type(path).__name__} {path!r}")
    try:
        path = os.fsdecode(path)
    except TypeError as exc:            # an os.PathLike whose __fspath__ returns junk
        raise error(f"{owner}: path {path!r}: {exc}") from None
    if not path or "\x00" in path:
        raise error(f"{owner}: path {path!r} is empty or holds a NUL character")
    return path


def _check_float(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{owner}: field '{name}' must be a number; got "
                    f"{type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise error(f"{owner}: field '{name}' must be finite and >= 0; got {value}")
    return value


@dataclass(frozen=True)
class PerfKey:
    """What a benchmark result is valid for.

    Parameters
    ----------
    provider : str
        Provider name, e.g. ``"cpu"``.
    engine : str
        Engine name, e.g. ``"CPU_ENGINE"``: two engines of one provider keep separate
        records for the same problem.
    library_versions : str
        Versions of the libraries that ran the kernels (e.g. ``"numpy 2.1"``).
    device : str
        Device model plus driver/runtime version where one exists.
    problem : str
        Full problem signature text (``Match.signature``: pattern, dims, strides, dtypes).
    workspace_limit : int
        Workspace limit in force, in bytes (a different limit is a different entry).
    """

    provider: str
    engine: str
    library_versions: str
    device: str
    problem: str
    workspace_limit: int

    def __post_init__(self):
        for name in KEY_FIELDS[:5]:
            _check_str("PerfKey", name, getattr(self, name))
        object.__setattr__(self, "workspace_limit",
                           _check_int("PerfKey", "workspace_limit", self.workspace_limit))


@dataclass(frozen=True)
class PerfRecord:
    """A benchmark winner.

    Parameters
    ----------
    algorithm : str
        Provider's algorithm name.
    time_ms : float
        Measured time in milliseconds.
    workspace_bytes : int
        Workspace the algorithm needs, in bytes.
    measured_at : float, optional
        When it was measured, unix seconds. Default: now.
    """

    algorithm: str
    time_ms: float
    workspace_bytes: int
    measured_at: float = field(default_factory=time.time)

    def __post_init__(self):
        _check_str("PerfRecord", "algorithm", self.algorithm)
        object.__setattr__(self, "time_ms", _check_float("PerfRecord", "time_ms", self.time_ms))
        object.__setattr__(self, "workspace_bytes",
                           _check_int("PerfRecord", "workspace_bytes", self.workspace_bytes))
        object.__setattr__(self, "measured_at",
                           _check_float("PerfRecord", "measured_at", self.measured_at))
