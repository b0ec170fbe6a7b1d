"""Choosing among an engine's algorithms: candidates, the workspace knob, the perf db.

Every engine with algorithms to choose from (the convolutions of the CPU and GPU engines)
describes them as ``Candidate``s and chooses through ``choose``, so that the knob
semantics of docs/contract/semantics.md ("Knobs") and the perf-db records are one implementation:

- ``engine_knobs``: ``global.benchmarking`` (0/1, default 0) for every pattern, and
  ``global.workspace_size_limit`` only for the single-node convolutions (patterns 6, 7, 9)
  with the range [min, max] of the candidates' workspaces, default max. A value outside
  the range is a ``KnobError`` at build (``_knobs.resolve_knobs``).
- ``within_limit``: the candidates whose workspace fits the limit in force (default: the
  largest); a ``KnobError`` when none does.
- ``choose``: without benchmarking the engine's heuristic pick; with it the perf db's
  winner for (provider, engine, library versions, device, problem, limit), or the
  engine's measurement, stored there.
- ``fastest``: which of several timed candidates a benchmark keeps: the heuristic's own
  choice unless another is faster by more than the timing noise (``BENCH_MARGIN``), so
  that benchmarking never ends on something slower than the heuristic's pick.
- ``time_interleaved``: the host engines' timing of their candidates, round-robin.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .. import _knobs, _perfdb
from .._errors import KnobError
from ..patterns import Pattern

__all__ = ["Algorithm", "Candidate", "Choice", "WORKSPACE_KNOB_PATTERNS", "BENCH_MARGIN",
           "engine_knobs", "within_limit", "perf_key", "tuned", "choose", "fastest",
           "time_interleaved"]

log = logging.getLogger("hipdnn_async")

# Patterns offered the workspace knob: the single-node convolutions (the seed, "Knobs").
WORKSPACE_KNOB_PATTERNS = frozenset({Pattern.CONV_DGRAD, Pattern.CONV_FPROP, Pattern.CONV_WGRAD})
# A timed candidate replaces the heuristic's choice only when its median time is lower by
# more than this fraction: run-to-run spread of a median of 7 event-timed runs on the
# H200 is 1-2 %, and a switch inside the noise can only lose.
BENCH_MARGIN = 0.03


class Algorithm(str):
    """``plan.algorithm``: the algorithm's name (a plain ``str``: what the perf db stores
    and comparisons see) carrying why the engine chose it in ``.reason`` (e.g. "cuDNN
    heuristics mode A, rank 1 of the 4 configs the numerical policy accepts; tensor
    cores, deterministic") and, in ``.trials``, what was considered: ``(name, ms)`` pairs
    in the engine's heuristic order (``ms`` the measured median with benchmarking, None
    for a candidate not timed), for benchmarks and diagnostics."""

    def __new__(cls, name: str, reason: str = "", trials=()):
        obj = super().__new__(cls, name)
        obj.reason = reason
        obj.trials = tuple((str(n), None if ms is None else float(ms)) for n, ms in trials)
        return obj

    def __reduce__(self):
        return (Algorithm, (str(self), self.reason, self.trials))


@dataclass(frozen=True)
class Candidate:
    """One algorithm an engine may run for a problem.

    Attributes
    ----------
    name : str
        The algorithm's name, as ``plan.algorithm`` and the perf db give it (e.g.
        ``"im2col_gemm"``, ``"IMPLICIT_PRECOMP_GEMM"``).
    id : int
        The engine's own id for it (CPU: index in ``_conv.ALGORITHMS[direction]``; a
        vendor library: its algorithm enum value).
    workspace_bytes : int
        Workspace it needs for this problem, in bytes.
    deterministic : bool
        Whether two runs give bitwise-equal results.
    props : mapping
        Anything else the engine knows (e.g. ``{"time_ms": ...}`` from a heuristic);
        not compared.
    """

    name: str
    id: int
    workspace_bytes: int
    deterministic: bool = True
    props: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Choice:
    """The candidate chosen, and how: ``benchmarked`` (measured now) or ``perfdb_hit``
    (taken from the perf db); neither for a heuristic choice. ``limit`` is the workspace
    limit in force, ``fitting`` the candidates within it (for an engine that falls back
    when its choice refuses to run), ``time_ms`` the measured time (None unless
    benchmarked), ``trials`` the measurement's ``(name, ms)`` pairs where it gave them."""

    candidate: Candidate
    limit: int
    fitting: tuple = ()
    benchmarked: bool = False
    perfdb_hit: bool = False
    time_ms: float | None = None
    trials: tuple = ()


def engine_knobs(match, candidates: Sequence[Candidate] = ()) -> list:
    """The knobs an engine offers for ``match``: benchmarking, plus the workspace limit
    over ``candidates`` (non-empty) for patterns 6, 7 and 9."""
    knobs = [_knobs.benchmarking_knob()]
    if match.pattern in WORKSPACE_KNOB_PATTERNS:
        sizes = [c.workspace_bytes for c in candidates]
        knobs.append(_knobs.workspace_limit_knob(min(sizes), max(sizes)))
    return knobs


def within_limit(candidates: Sequence[Candidate], knobs: Mapping[str, int], *,
                 engine_name: str) -> tuple[int, list[Candidate]]:
    """(limit in force, the candidates within it, in the given order).

    Raises
    ------
    KnobError
        Every candidate needs more than the limit.
    """
    limit = int(knobs.get(_knobs.WORKSPACE_SIZE_LIMIT,
                          max(c.workspace_bytes for c in candidates)))
    fitting = [c for c in candidates if c.workspace_bytes <= limit]
    if not fitting:
        raise KnobError(
            f"knob '{_knobs.WORKSPACE_SIZE_LIMIT}' = {limit} is below every algorithm's "
            f"workspace for engine '{engine_name}' (smallest "
            f"{min(c.workspace_bytes for c in candidates)} bytes)")
    return limit, fitting


def perf_key(provider, engine_name: str, match, limit: int, *,
             device: str | None = None, policy: str = "") -> _perfdb.PerfKey:
    """The perf-db key of a tuning: provider name and ``describe()`` (library versions,
    device; ``device`` overrides the latter), engine, problem signature, limit.
    ``policy``: knob settings that narrow the candidates (e.g. ``"deterministic"``); a
    winner under one policy may not be allowed under another, so it prefixes the problem
    as ``"[policy] "`` (the default policy, "", keeps the plain signature)."""
    desc = provider.describe()
    problem = f"[{policy}] {match.signature}" if policy else match.signature
    return _perfdb.PerfKey(provider=provider.name, engine=engine_name,
                           library_versions=desc["library_versions"],
                           device=desc["device"] if device is None else device,
                           problem=problem, workspace_limit=int(limit))


def tuned(perfdb, key: _perfdb.PerfKey, fitting: Sequence[Candidate],
          measure: Callable[[list], tuple], *, schema1: bool = False) -> Choice:
    """The perf db's winner for ``key`` among ``fitting``; else ``measure(fitting)``
    -> (candidate, ms) or (candidate, ms, trials), stored under ``key`` where ``ms`` is a
    measured time (finite, >= 0; a NaN says none was timed and nothing is stored).

    A stored algorithm that no longer fits (or exists) is tuned again, with a warning.
    ``schema1``: the engine may claim an entry of a schema-1 db (``PerfDb.lookup``).
    """
    record = perfdb.lookup(key, schema1=schema1)
    by_name = {c.name: c for c in fitting}
    if record is not None and record.algorithm in by_name:
        return Choice(by_name[record.algorithm], key.workspace_limit, tuple(fitting),
                      perfdb_hit=True)
    if record is not None:
        log.warning("perf db entry names algorithm %r, which no longer applies within %d "
                    "bytes for engine %s; tuning again", record.algorithm,
                    key.workspace_limit, key.engine)
    _perfdb.count("benchmarks_run")
    measured = measure(list(fitting))
    best, ms = measured[0], float(measured[1])
    trials = tuple(measured[2]) if len(measured) > 2 else ()
    if math.isfinite(ms) and ms >= 0:
        perfdb.store(key, _perfdb.PerfRecord(algorithm=best.name, time_ms=ms,
                                             workspace_bytes=best.workspace_bytes,
                                             measured_at=time.time()))
    else:
        # nothing was timed (the vendor's search measured none of the candidates): an
        # entry would be taken as a benchmarked winner by every later build
        log.warning("benchmark of engine %s timed none of its %d candidates; %s runs "
                    "untimed and the perf db keeps nothing for it", key.engine,
                    len(fitting), best.name)
    return Choice(best, key.workspace_limit, tuple(fitting), benchmarked=True, time_ms=ms,
                  trials=trials)


def choose(engine, match, candidates: Sequence[Candidate], knobs: Mapping[str, int], perfdb,
           *, heuristic: Callable[[list, int], Candidate],
           measure: Callable[[list], tuple], tunable: Callable[[list], list] | None = None,
           device: str | None = None, policy: str = "") -> Choice:
    """Choose the candidate a build of ``engine`` (a ``ProviderEngine``) runs.

    Parameters
    ----------
    engine : ProviderEngine
        Gives ``name``, ``provider`` (perf-db key) and ``schema1``.
    candidates : sequence of Candidate
        The applicable algorithms, best first by the engine's own ranking.
    knobs : mapping
        The resolved knob settings.
    heuristic : callable
        ``heuristic(fitting, limit) -> Candidate`` without benchmarking.
    measure : callable
        ``measure(fitting) -> (Candidate, ms[, trials])`` with benchmarking, on a
        perf-db miss.
    tunable : callable, optional
        ``tunable(fitting) -> list``: the candidates benchmarking may pick (perf-db hit
        or measurement), e.g. those whose workspace this machine can hold; non-empty.
        Default: all that fit the limit. The limit (and so the perf-db key) is unchanged.
    device : str, optional
        The perf-db key's device, when not ``provider.describe()["device"]``.
    policy : str, optional
        The knob settings that narrowed `candidates`, for the perf-db key (``perf_key``).

    Raises
    ------
    KnobError
        No candidate fits the workspace limit.
    """
    limit, fitting = within_limit(candidates, knobs, engine_name=engine.name)
    if not knobs.get(_knobs.BENCHMARKING, 0):
        return Choice(heuristic(fitting, limit), limit, tuple(fitting))
    if tunable is not None:
        fitting = tunable(fitting)
    key = perf_key(engine.provider, engine.name, match, limit, device=device, policy=policy)
    return tuned(perfdb, key, fitting, measure, schema1=engine.schema1)


def fastest(times: Sequence[float], margin: float = BENCH_MARGIN) -> int:
    """Index of the candidate a benchmark keeps, of ``times`` (ms, in the engine's
    heuristic order: index 0 is the heuristic's own choice).

    The fastest finite time wins only if it beats the heuristic's choice by more than
    ``margin`` (a fraction); a NaN, infinite or negative time (a failed or unusable
    measurement) never wins. With no usable time at all, index 0.

    Raises
    ------
    ValueError
        ``times`` is empty.
    """
    if not times:
        raise ValueError("fastest: no candidates were timed")
    usable = [(t, i) for i, t in enumerate(times)
              if t is not None and math.isfinite(t) and t >= 0]
    if not usable:
        return 0
    best_ms, best = min(usable)
    first = times[0]
    if best != 0 and first is not None and math.isfinite(first) and first >= 0 \
            and best_ms >= first * (1.0 - margin):
        return 0
    return best


def time_interleaved(runs: Sequence[Callable[[], Any]], *, rounds: int, budget_s: float,
                     warmup: bool = True,
                     clock: Callable[[], float] = time.perf_counter) -> list:
    """The fastest call of each of ``runs`` (ms), the calls timed round-robin (the host
    engines' benchmarks; the GPU engines time on their streams).

    Each run is called once untimed (a warm-up, unless ``warmup`` is false: the caller
    made it), then in rounds of one call each, a round
    starting one run further along than the last, until ``rounds`` rounds are done or
    ``budget_s`` seconds per run have passed (at least one round). Timed one after
    another, a burst of other work on the machine fell into one candidate's calls alone
    and the perf db kept whichever candidate it spared; interleaved, a burst slows one or
    two calls of every candidate and each minimum comes from the other rounds.

    Parameters
    ----------
    runs : sequence of callables
        Each runs one candidate once; at least one.
    rounds : int
        The most timed calls of each run, >= 1.
    budget_s : float
        Seconds per run after which no new round starts.
    warmup : bool, optional
        Call each run once untimed first (default).
    clock : callable, optional
        Seconds, monotonic (``time.perf_counter``; a test passes a fake).

    Returns
    -------
    list of float
        The minimum time of each run's timed calls, ms, in the order of ``runs``.
    """
    if not runs or rounds < 1:
        raise ValueError(f"time_interleaved: needs runs and rounds >= 1; got {len(runs)} "
                         f"runs, rounds={rounds}")
    if warmup:
        for run in runs:
            run()
    n = len(runs)
    best = [math.inf] * n
    start = clock()
    for r in range(rounds):
        if r and clock() - start >= budget_s * n:
            break
        for k in range(n):
            i = (r + k) % n
            t0 = clock()
            runs[i]()
            best[i] = min(best[i], (clock() - t0) * 1e3)
    return best
