"""Whether a profile is open, and the calls the library's hooks make while one is.

A leaf module (standard library only): the device layer, the capture steps and the
batcher import it to check one flag, :data:`ON`, on their hot paths. With no profile open
nothing else of this package runs, nothing is allocated and no clock is read: the hooks
read ``ON`` and go on. The queues never import it: a submission hands them the record
of :func:`recorder` (or None) with its work, they attach it to the work item on whatever
path runs it (inline or queued), and the profile reads the timestamps the queues set on
every work item anyway (``Completion.submitted_at``, ``started_at``, ``finished_at``).
"""
from __future__ import annotations

import contextvars
import threading
import time

from .. import _fork

__all__ = ["ON", "sessions", "recorder", "batch_begin", "batch_end",
           "built", "span", "current_batch"]

ON = False               # True while any profile is open: all a hot path reads
_sessions: tuple = ()    # the open sessions (Profile objects), oldest first
_lock = _fork.reinit_in_child(threading.Lock())

# The batch being dispatched by this task (set by the batcher around its plan's execute):
# the execution submitted under it is the one that served the batch (its flow arrow).
current_batch: contextvars.ContextVar = contextvars.ContextVar(
    "hipdnn_async_profile_batch", default=None)


def sessions() -> tuple:
    """The open profiles, oldest first."""
    return _sessions


def _open(session) -> None:
    global ON, _sessions
    with _lock:
        _sessions = _sessions + (session,)
        ON = True


def _close(session) -> None:
    global ON, _sessions
    with _lock:
        _sessions = tuple(s for s in _sessions if s is not session)
        ON = bool(_sessions)


def _for(device) -> list:
    return [s for s in _sessions if s._covers(device)]


def recorder(device, kind: str, subject):
    """Before a submission on ``device``: the record that the open profiles covering the
    device keep of it (an ``Execution``), or None. The caller hands it to the queues with
    the work (``recorder=``), which attach it to the work item on whatever path the
    submission takes (``Execution.attach``); a call site reads :data:`ON` first.

    ``kind``: ``"execution"`` (``subject`` an ExecutionPlan), ``"replay"`` or
    ``"capture"`` (``subject`` a capture Step).
    """
    covering = _for(device)
    if not covering:
        return None
    return covering[0]._start_execution(device, kind, subject, covering,
                                        current_batch.get())


def batch_begin(batcher: str, device, requests, rows: int, bucket: int, formed: float):
    """A batcher (named ``batcher``: its graph's name) formed, at ``formed`` (``time.perf_counter()`` seconds), a batch of
    ``rows`` rows out of ``requests`` (each with ``n`` rows and ``enqueued``, a
    ``time.perf_counter()`` time) for bucket size ``bucket`` on ``device``: its record,
    made current for the task (the execution the task submits next served the batch), or
    None when no open profile covers the device."""
    covering = _for(device)
    if not covering:
        return None
    record = covering[0]._batch_record(batcher, device, requests, rows, bucket, formed,
                                       covering)
    record.token = current_batch.set(record)
    return record


def batch_end(record, requests) -> None:
    """The batch of ``record`` (from :func:`batch_begin`) has handed its rows to
    ``requests`` (or their errors: ``.error`` set)."""
    record.finish(all(getattr(r, "error", None) is None for r in requests))
    try:
        current_batch.reset(record.token)
    except ValueError:       # ended in another context than begun
        current_batch.set(None)


def built(device, plan, start: float) -> None:
    """``device`` built ``plan`` (an ExecutionPlan), from ``start`` to now
    (``time.perf_counter()`` seconds): a span on its ``builds`` track with the engine,
    the algorithm, whether it was benchmarked or a perf-db hit, and the benchmark's
    trials (candidate -> measured ms, where the build timed candidates)."""
    end = time.perf_counter()
    algorithm = plan.algorithm
    span(device, "builds", f"build {plan.pattern} '{plan.graph.name}'", start, end,
         {"engine": plan.engine.name, "algorithm": None if algorithm is None else str(algorithm),
          "benchmarked": bool(plan.benchmarked), "perfdb_hit": bool(plan.perfdb_hit),
          "trials_ms": dict(getattr(algorithm, "trials", ()))})


def span(device, track: str, name: str, start: float, end: float, args: dict) -> None:
    """A host-side span (a build, a capture recording) on ``device``'s ``track``, from
    ``start`` to ``end`` (``time.perf_counter()`` seconds)."""
    for s in _for(device):
        s._span(device, track, name, start, end, args)
