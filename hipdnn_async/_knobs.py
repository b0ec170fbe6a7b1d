"""Knobs: the tunable settings an engine offers, and their resolution at build time.

A provider offers a list of :class:`Knob` per (graph, engine); the caller passes settings
either as a mapping ``{knob_id: value}`` or as a sequence of :class:`KnobSetting` (the
hipDNN spelling). :func:`resolve_knobs` is the one place both spellings are checked and
completed with defaults, so the two APIs share a single code path.

The ``global.*`` names and the benchmarking override variable follow hipDNN
(``hipdnn_plugin_sdk/GlobalKnobDefines.hpp``, ``HD/docs/Environment.md``).

This module imports only ``_errors`` and ``_log`` (and the stdlib).
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._errors import KnobError
from ._log import warn_bad_env

__all__ = [
    "Knob",
    "KnobSetting",
    "IntConstraint",
    "BENCHMARKING",
    "WORKSPACE_SIZE_LIMIT",
    "FORCE_BENCHMARKING_ENV",
    "benchmarking_knob",
    "workspace_limit_knob",
    "resolve_knobs",
    "forced_benchmarking",
    "apply_forced_benchmarking",
]


# hipdnn_plugin_sdk::BENCHMARKING_KNOB_NAME / WORKSPACE_SIZE_LIMIT_KNOB_NAME.
BENCHMARKING = "global.benchmarking"
WORKSPACE_SIZE_LIMIT = "global.workspace_size_limit"

# Read in this order on every call; the first one set to a recognised value wins.
FORCE_BENCHMARKING_ENV = ("HIPDNN_ASYNC_FORCE_BENCHMARKING", "HIPDNN_FORCE_BENCHMARKING")

_INT64_MIN = -(2 ** 63)
_INT64_MAX = 2 ** 63 - 1

# hipDNN's accepted spellings for HIPDNN_FORCE_BENCHMARKING.
_TRUE_WORDS = frozenset({"1", "true", "on", "yes", "enable", "enabled"})
_FALSE_WORDS = frozenset({"0", "false", "off", "no", "disable", "disabled"})


# ---------------------------------------------------------------------------
# Knob, constraint, setting
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class IntConstraint:
    """Closed integer range ``[min, max]`` of an int64 knob (hipDNN ``IntConstraint``).

    Parameters
    ----------
    min, max : int
        Inclusive bounds, ``min <= max``.
    """

    min: int
    max: int

    def __str__(self) -> str:
        return f"[{self.min}, {self.max}]"

    def contains(self, value: int) -> bool:
        """Return True when ``min <= value <= max``."""
        return self.min <= value <= self.max

    def validate(self, value, *, knob_id: str = "?", engine_name: str = "?") -> int:
        """Check one value against the constraint and return it as a Python int.

        Raises
        ------
        KnobError
            The value is a bool, not an integer, or outside ``[min, max]``.
        """
        value = _as_int64(value, knob_id=knob_id, engine_name=engine_name)
        if not self.contains(value):
            raise KnobError(f"knob '{knob_id}' = {value} is outside {self} "
                            f"for engine '{engine_name}'")
        return value


@dataclass(frozen=True, init=False)
class Knob:
    """One tunable setting offered by an engine (hipDNN ``Knob``); a frozen dataclass.

    Parameters
    ----------
    id : str
        Knob id, e.g. ``"global.benchmarking"``.
    type : str, optional
        Value type; only ``"int64"`` exists. Default ``"int64"``.
    default : int
        Value used when the caller does not set the knob; within ``[min, max]``.
    min, max : int
        Inclusive range of accepted values (bytes for workspace limits).
    description : str, optional
        One line for humans.

    Raises
    ------
    KnobError
        ``type`` is not ``"int64"``, a bound or the default is missing or not an
        integer, or ``min <= default <= max`` does not hold.
    """

    id: str
    type: str
    default: int
    min: int
    max: int
    description: str

    def __init__(self, id: str, type: str = "int64", default: int | None = None,
                 min: int | None = None, max: int | None = None, description: str = ""):
        # Hand-written so that hipDNN's argument order (id, type, default, min, max,
        # description) works positionally while ``type`` may be left out by keyword.
        if not isinstance(id, str) or not id:
            raise KnobError(f"Knob: id must be a non-empty str; got {id!r}")
        if type != "int64":
            raise KnobError(f"Knob '{id}': type must be 'int64'; got {type!r}")
        vals = {}
        for name, v in (("default", default), ("min", min), ("max", max)):
            if v is None:
                raise KnobError(f"Knob '{id}': {name} is required")
            vals[name] = _as_int64(v, knob_id=id, engine_name="?", what=name)
        if not vals["min"] <= vals["default"] <= vals["max"]:
            raise KnobError(f"Knob '{id}': default {vals['default']} is outside "
                            f"[{vals['min']}, {vals['max']}]")
        for name, v in (("id", id), ("type", type), ("default", vals["default"]),
                        ("min", vals["min"]), ("max", vals["max"]),
                        ("description", str(description))):
            object.__setattr__(self, name, v)

    @property
    def constraint(self) -> IntConstraint:
        """The accepted range; ``str()`` gives ``"[min, max]"``."""
        return IntConstraint(self.min, self.max)

    def validate(self, value, *, engine_name: str = "?") -> int:
        """Return ``value`` as a Python int when this knob accepts it.

        Parameters
        ----------
        value : int
            A Python or NumPy integer (bool and float, even 1.0, are refused).
        engine_name : str, optional
            Named in the error message.

        Raises
        ------
        KnobError
            A bool or non-integer, a value outside int64, or outside ``[min, max]``.
        """
        return self.constraint.validate(value, knob_id=self.id, engine_name=engine_name)


@dataclass
class KnobSetting:
    """A value for one knob (hipDNN ``KnobSetting(knobId, value)``).

    Parameters
    ----------
    knob_id : str
        Id of a knob offered by the engine.
    value : int
        The requested value; nothing is checked here: ``Device.build`` (and
        ``create_execution_plan_ext``) raise ``KnobError`` for an unknown id or a
        value the knob does not accept.
    """

    knob_id: str
    value: int


# ---------------------------------------------------------------------------
# Factories for the global knobs
# ---------------------------------------------------------------------------

def benchmarking_knob() -> Knob:
    """Return ``global.benchmarking``: 0 (heuristic choice, default) or 1 (benchmark)."""
    return Knob(BENCHMARKING, "int64", 0, 0, 1,
                "Enable benchmarking mode for kernel selection")


def workspace_limit_knob(min_bytes: int, max_bytes: int) -> Knob:
    """Return ``global.workspace_size_limit`` over ``[min_bytes, max_bytes]``, default max.

    Parameters
    ----------
    min_bytes, max_bytes : int
        Smallest and largest workspace, in bytes, over the applicable algorithms.
    """
    return Knob(WORKSPACE_SIZE_LIMIT, "int64", max_bytes, min_bytes, max_bytes,
                "Maximum workspace memory in bytes")


# ---------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------

def _as_int64(value, *, knob_id: str, engine_name: str, what: str = "value") -> int:
    """Coerce a Python or NumPy integer to int; reject bool, float and anything else."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        # numpy.bool_ is not Integral; floats (even 1.0) are rejected: the type is int64.
        raise KnobError(f"knob '{knob_id}' {what} {value!r} has type "
                        f"{type(value).__name__}; expected an int64 integer "
                        f"for engine '{engine_name}'")
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise KnobError(f"knob '{knob_id}' {what} {value} does not fit in int64 "
                        f"for engine '{engine_name}'")
    return value


def _iter_settings(settings, engine_name: str):
    """Yield (knob_id, value) pairs from a mapping or a sequence of KnobSetting."""
    if settings is None:
        return
    if isinstance(settings, Mapping):
        yield from settings.items()
        return
    if isinstance(settings, (str, bytes)) or not isinstance(settings, Sequence):
        raise KnobError(f"knob settings for engine '{engine_name}' must be a mapping "
                        f"{{knob_id: value}} or a sequence of KnobSetting; "
                        f"got {type(settings).__name__}")
    for i, s in enumerate(settings):
        if isinstance(s, KnobSetting):
            yield s.knob_id, s.value
        elif isinstance(s, tuple) and len(s) == 2:
            yield s
        else:
            raise KnobError(f"knob setting {i} for engine '{engine_name}' must be a "
                            f"KnobSetting; got {s!r}")


def resolve_knobs(knobs: Sequence[Knob], settings=None, *, engine_name: str) -> dict[str, int]:
    """Check the caller's knob settings and complete them with defaults.

    Parameters
    ----------
    knobs : sequence of Knob
        The knobs the engine offers for this graph.
    settings : mapping or sequence of KnobSetting or None
        ``{knob_id: value}``, ``[KnobSetting(knob_id, value), ...]`` or None (all
        defaults). Values are Python or NumPy integers.
    engine_name : str
        Engine name for error messages.

    Returns
    -------
    dict of str to int
        Every offered knob id, in offer order, with its value in force.

    Raises
    ------
    KnobError
        Unknown knob id (the message lists the offered ids), a bool or non-integer
        value, a value outside the knob's range, or the same knob set twice.
    """
    offered = {k.id: k for k in knobs}
    chosen: dict[str, int] = {}
    for knob_id, value in _iter_settings(settings, engine_name):
        if knob_id not in offered:
            names = ", ".join(f"'{k}'" for k in offered) or "none"
            raise KnobError(f"knob {knob_id!r} is not offered for engine "
                            f"'{engine_name}' on this graph; offered: {names}")
        if knob_id in chosen:
            raise KnobError(f"knob '{knob_id}' is set twice for engine '{engine_name}' "
                            f"(values {chosen[knob_id]} and {value!r})")
        chosen[knob_id] = offered[knob_id].validate(value, engine_name=engine_name)
    return {k.id: chosen.get(k.id, k.default) for k in knobs}


# ---------------------------------------------------------------------------
# Environment override of global.benchmarking
# ---------------------------------------------------------------------------

def forced_benchmarking() -> bool | None:
    """Return the benchmarking override from the environment, read on every call.

    ``HIPDNN_ASYNC_FORCE_BENCHMARKING`` is read first, then hipDNN's
    ``HIPDNN_FORCE_BENCHMARKING``. Accepted (case-insensitive): 1, true, on, yes,
    enable, enabled -> True; 0, false, off, no, disable, disabled -> False. An
    unrecognised value is a ``RuntimeWarning`` once per process and value (also logged,
    logger ``hipdnn_async``), naming the accepted values, and is ignored.

    Returns
    -------
    bool or None
        None when neither variable holds a recognised value.
    """
    for name in FORCE_BENCHMARKING_ENV:
        raw = os.environ.get(name)
        if raw is None or not raw.strip():
            continue
        word = raw.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
        warn_bad_env(name, raw, "1, true, on, yes, enable, enabled (benchmark) or 0, false, "
                     "off, no, disable, disabled (do not)", "ignored (the knob decides)")
    return None


def apply_forced_benchmarking(resolved: dict[str, int]) -> dict[str, int]:
    """Return a copy of resolved knobs with ``global.benchmarking`` forced by the env.

    When :func:`forced_benchmarking` gives True or False the copy has
    ``global.benchmarking`` set to 1 or 0 (added when absent); otherwise it is an
    unchanged copy.
    """
    out = dict(resolved)
    forced = forced_benchmarking()
    if forced is not None:
        out[BENCHMARKING] = int(forced)
    return out
