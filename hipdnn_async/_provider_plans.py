"""A device's provider plans: which engine builds a graph, and the plans already built.

``ProviderPlanCache.plan`` picks the engine (the device's engines in rank order, each that
declines giving way to the next; or the one asked for), resolves its knobs and returns
the provider plan kept for (graph signature, engine, knob settings), building it on a
miss (under the device's tuning lock when it benchmarks). A decline is kept too, so the
next build of the same graph goes straight to the engine that takes it. Plans already
built keep their provider plan when it is dropped from the cache.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections import OrderedDict
from typing import Any

from . import _fork, _knobs, _perfdb
from ._errors import DECLINE_TYPES, NotSupportedError
from .providers._base import DeclinedError, Engine, engine_id

__all__ = ["ProviderPlanCache", "counts"]

log = logging.getLogger("hipdnn_async")

_counters_lock = _fork.reinit_in_child(threading.Lock())
_counters = {"plans_built": 0, "plan_cache_hits": 0}


def counts() -> dict:
    """``plans_built`` and ``plan_cache_hits`` since the process started (a copy)."""
    with _counters_lock:
        return dict(_counters)


def _count(name: str) -> None:
    with _counters_lock:
        _counters[name] += 1


class ProviderPlanCache:
    """The provider plans of one device, by (graph signature, engine id, knob settings),
    least recently built first.

    Parameters
    ----------
    provider : Provider
        The device's provider: its engines and their builds.
    spec : str
        The device spec, for messages.
    perfdb : PerfDb or None
        Where benchmarks are kept; None: ``_perfdb.default_perfdb()`` at each build
        that uses one.
    knob_defaults : tuple of str
        Knob-id suffixes (``".deterministic"``) whose offered default becomes 1.
    tune_lock : lock
        Held while a build benchmarks: concurrent timings would skew each other.
    """

    def __init__(self, provider, spec: str, *, perfdb, knob_defaults: tuple, tune_lock):
        self._provider = provider
        self._spec = spec
        self._perfdb = perfdb
        self._knob_defaults = knob_defaults
        self._tune_lock = tune_lock
        self._plans: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        _fork.reinit_attrs_in_child(self, "_lock")

    def __len__(self) -> int:
        with self._lock:
            return len(self._plans)

    def plan(self, match, engine, knobs, *, graph_name: str, limit: int):
        """(engine, knob settings, provider plan, declines) for a matched graph; declines:
        (engine name, reason) of the engines that declined it on the way (not offered for
        it, or declining at build before one built it; empty where ``engine`` is named)."""
        chosen, settings, pplan, declines = self._plan(match, engine, knobs,
                                                       graph_name=graph_name, limit=limit)
        return chosen, settings, pplan, tuple((n, str(e)) for n, e in declines)

    def _plan(self, match, engine, knobs, *, graph_name: str, limit: int):
        """``plan`` with the declines as (engine name, error).

        Parameters
        ----------
        match : Match
            The graph's snapshot, matched.
        engine : Engine or int or str or None
            Build with this engine only; None: the offered engines in rank order.
        knobs : mapping or sequence of KnobSetting or None
            As ``Device.build``.
        graph_name : str
            For messages and the log.
        limit : int
            Provider plans kept at most (the oldest dropped first).

        Raises
        ------
        DeclinedError
            Every engine declined (each one's reason in the message and ``declines``).
        NotSupportedError
            ``engine`` names no engine offered (or the one named declined: its error).
        KnobError, ExecutionError
            From the knobs or the build, at once.
        """
        offered, declines = self._provider.offers(match)
        tried = offered if engine is None else [_pick_engine(offered, engine, match, declines)]
        for chosen in tried:
            try:
                settings, pplan = self._provider_plan(match, chosen, knobs, limit)
                return chosen, settings, pplan, declines if engine is None else []
            except DECLINE_TYPES as exc:
                if engine is not None:
                    raise
                declines.append((chosen.name, exc))
                log.info("build: engine %s declined pattern %s of graph '%s': %s",
                         chosen.name, match.pattern.name, graph_name, exc)
        raise DeclinedError(
            f"build: every engine of device '{self._spec}' declined pattern "
            f"{match.pattern.name} (graph '{graph_name}'): "
            + ("; ".join(f"{n}: {e}" for n, e in declines) or "the device has no engines"),
            declines=declines)

    def _provider_plan(self, match, chosen: Engine, knobs, limit: int):
        """(knob settings, ProviderPlan) of one engine, from the cache or built.

        A decline is cached too (a copy of its error, without the traceback and so without
        the build's frames).
        """
        offered = chosen.knobs
        if self._knob_defaults:
            offered = [dataclasses.replace(k, default=1)
                       if k.id.endswith(self._knob_defaults) and k.max >= 1 else k
                       for k in offered]
        settings = _knobs.apply_forced_benchmarking(
            _knobs.resolve_knobs(offered, knobs, engine_name=chosen.name))
        key = (match.signature, chosen.id, tuple(sorted(settings.items())))
        with self._lock:
            pplan = self._plans.get(key)
            if pplan is not None:
                self._plans.move_to_end(key)
        if isinstance(pplan, _Declined):
            _count("plan_cache_hits")
            raise pplan.error.with_traceback(None)
        if pplan is not None:
            _count("plan_cache_hits")
            return settings, pplan
        perfdb = self._perfdb if self._perfdb is not None else _DefaultPerfDb()
        try:
            if settings.get(_knobs.BENCHMARKING):
                with self._tune_lock:
                    pplan = self._provider.build(match, chosen, settings, perfdb)
            else:
                pplan = self._provider.build(match, chosen, settings, perfdb)
        except DECLINE_TYPES as exc:
            self._store(key, _Declined(exc), limit)
            raise
        self._store(key, pplan, limit)
        _count("plans_built")
        return settings, pplan

    def _store(self, key: tuple, value, limit: int) -> None:
        with self._lock:
            self._plans[key] = value
            while len(self._plans) > limit:
                self._plans.popitem(last=False)


class _DefaultPerfDb:
    """``_perfdb.default_perfdb()``, opened at the build's first use of it: a build that
    neither benchmarks nor looks a plan up (every CPU build without
    ``global.benchmarking``) leaves no perf-db file behind (it created one)."""

    __slots__ = ("_db",)

    def __init__(self):
        self._db = None

    def __getattr__(self, name):
        if name == "_db":            # not set yet (a copy made without __init__)
            raise AttributeError(name)
        if self._db is None:
            self._db = _perfdb.default_perfdb()
        return getattr(self._db, name)


class _Declined:
    """A cache entry: the engine declined this graph with these knobs."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        try:   # a copy: the type and fields, not the traceback (which holds build frames)
            self.error = copy.copy(error)
        except Exception:  # noqa: BLE001 - an exception type that cannot be copied
            self.error = NotSupportedError(str(error))


def _pick_engine(offered: list[Engine], engine, match, declines=()) -> Engine:
    """The offered engine that ``engine`` (an Engine, id or name) names. One that declined
    to be offered raises its own error; one the device does not have, a NotSupportedError."""
    for e in offered:
        if engine == e or engine == e.id or engine == e.name:
            return e
    for name, exc in declines:
        if engine in (name, engine_id(name)) or getattr(engine, "name", None) == name:
            raise exc
    names = ", ".join(e.label() for e in offered) or "none"
    raise NotSupportedError(
        f"build: engine {getattr(engine, 'name', engine)!r} is not offered for pattern "
        f"{match.pattern.name}; offered: {names}")
