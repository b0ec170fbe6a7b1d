"""Process-wide counters of the perf db (hits, misses, stores, benchmarks, warnings) and
its warn-once log."""
from __future__ import annotations

import logging
import threading

from .. import _fork

__all__ = ["count", "logger", "reset_stats", "stats", "warn_once", "warned"]

logger = logging.getLogger("hipdnn_async")

_COUNTER_NAMES = ("perfdb_hits", "perfdb_misses", "perfdb_stores", "benchmarks_run",
                  "perfdb_warnings")
_counters = dict.fromkeys(_COUNTER_NAMES, 0)
_counters_lock = _fork.reinit_in_child(threading.Lock())


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to the process-wide counter ``name`` (e.g. ``"benchmarks_run"``)."""
    with _counters_lock:
        _counters[name] = _counters.get(name, 0) + n


def stats() -> dict[str, int]:
    """Return a copy of the process-wide counters (hits, misses, stores, benchmarks)."""
    with _counters_lock:
        return dict(_counters)


def reset_stats() -> None:
    """Set every counter back to 0."""
    with _counters_lock:
        for k in list(_counters):
            _counters[k] = 0


warned: set = set()          # keys already warned about (cleared by tests)
_warned_lock = _fork.reinit_in_child(threading.Lock())


def warn_once(key, msg: str, *args) -> None:
    """Log a warning on the 'hipdnn_async' logger the first time ``key`` is seen."""
    with _warned_lock:
        if key in warned:
            return
        warned.add(key)
    count("perfdb_warnings")  # visible in hd.stats() even while logging is off
    logger.warning(msg, *args)
