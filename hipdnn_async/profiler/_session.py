"""The profile: a session that records executions, batches and builds while it is open."""
from __future__ import annotations

import json
import os
import threading
import time

import anyio
import anyio.to_thread

from .. import _fork
from .._errors import DeviceError
from . import _state
from ._events import Batch, Execution, Span, plan_facts, step_facts

__all__ = ["Profile", "profile"]


def profile(*devices) -> "Profile":
    """A profile of ``devices`` (none: every device), to use as ``with`` / ``async with``.

    ::

        with hd.profile(dev0, dev1) as prof:
            ...
        prof.export_chrome_trace("trace.json")
        print(prof.table())

    Parameters
    ----------
    *devices : Device
        The devices whose executions, builds and batches are recorded. Default: all.

    Returns
    -------
    Profile
        Not yet recording: it records from ``__enter__`` / ``__aenter__`` to the exit.

    Raises
    ------
    DeviceError
        An argument is not a Device (code ``INVALID_VALUE``).
    """
    return Profile(devices)


class Profile:
    """Records every execution (plan, capture replay), batcher batch and build of its
    devices from entry to exit; then exports and summarises them.

    Made by ``hd.profile(*devices)`` or ``dev.profile()``. Use as ``with`` or ``async
    with`` (the async exit waits for the recorded work off the event loop); once
    exited, :meth:`export_chrome_trace`, :meth:`trace`, :meth:`table`,
    :meth:`key_averages` and :meth:`overlap` read what was recorded.

    Attributes
    ----------
    executions : list of Execution
        In submission order: ``device``, ``stream`` (name), ``kind`` (``"execution"``,
        ``"replay"``, ``"capture"``), ``facts`` (``name``, ``pattern``, ``engine``,
        ``algorithm``, ``flops``, ``bytes``), ``submitted``, ``started``, ``ended``
        (``time.perf_counter()`` seconds), ``queue_wait``, ``duration`` (s), ``ok``,
        ``batch`` (the batcher batch it served, or None).
    batches : list of Batch
        ``batcher``, ``requests`` ((rows, enqueued s) each), ``rows``, ``bucket``,
        ``fill``, ``wait`` (s), ``formed``, ``ended``, ``executions``.
    spans : list of Span
        Builds and other host-side spans: ``track``, ``name``, ``start``, ``end``,
        ``args``.
    started_at : float
        ``time.perf_counter()`` at entry.
    stopped_at : float
        ``time.perf_counter()`` once every recorded execution had finished.

    Notes
    -----
    CPU executions carry the queue's timestamps (taken where the execution ran: the
    stream's worker, or the submitting thread for an inline one). A GPU
    execution is timed by two events recorded around its launch on its stream, created
    only while a profile is open (``hipdnn_async.profiler._gpu``); its host launch time is
    ``launched``. With no profile open the library records nothing, allocates nothing and
    reads no clock for it: its hot paths test one module flag.
    """

    def __init__(self, devices=()) -> None:
        for d in devices:
            # a Device (duck-typed: the device layer imports this package, not back)
            if not (hasattr(d, "streams") and hasattr(d, "provider") and hasattr(d, "spec")):
                raise DeviceError(f"profile: expected Device objects; got "
                                  f"{type(d).__name__}", code="INVALID_VALUE")
        self._devices = tuple(devices) or None
        self.executions: list[Execution] = []
        self.batches: list[Batch] = []
        self.spans: list[Span] = []
        self.started_at = self.stopped_at = None
        self._clocks: dict = {}            # id(device) -> GpuClock
        self._seen: dict = {}              # id(device) -> device, in first-seen order
        self._facts: dict = {}             # (id(plan or step), kind, n) -> facts
        self._keep: list = []
        self._lock = threading.Lock()
        _fork.reinit_attrs_in_child(self, "_lock")
        self._state = "new"

    # ------------------------------------------------------------------ lifetime
    def __enter__(self) -> "Profile":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    async def __aenter__(self) -> "Profile":
        # a GPU device's anchor waits for its first stream: off the loop
        await anyio.to_thread.run_sync(self._begin)
        return self

    async def __aexit__(self, *exc) -> None:
        _state._close(self)
        # the collection waits in a worker thread: a handle of the stream whose thread this
        # is (an event loop run in a done callback) is refused here, where that is known
        for record in self.executions:
            handle = record.handle
            if handle is not None and record.ok is None and not handle.done():
                handle._refuse_own_worker()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._collect)

    def start(self) -> "Profile":
        """Start recording (``__enter__``); return self.

        Raises
        ------
        DeviceError
            Already started (a profile records once; make a new one).
        """
        self._begin()
        return self

    def _begin(self) -> None:
        if self._state != "new":
            raise DeviceError("profile: already started; a profile records once (make a "
                              "new one)", code="INVALID_VALUE")
        for device in self._devices or ():
            self._clock(device)
        self._state = "open"
        self.started_at = time.perf_counter()
        _state._open(self)

    def stop(self) -> None:
        """Stop recording and wait until every recorded execution has finished
        (``__exit__``); idempotent."""
        _state._close(self)
        self._collect()

    @property
    def recording(self) -> bool:
        """True between start and stop."""
        return self._state == "open"

    # ------------------------------------------------------------------ hooks
    def _covers(self, device) -> bool:
        return self._devices is None or any(d is device for d in self._devices)

    def _clock(self, device):
        """The GPU clock of ``device`` (made on first use), or None for a host device."""
        key = id(device)
        try:
            return self._clocks[key]
        except KeyError:
            pass
        with self._lock:            # one clock per device, whichever thread comes first
            if key not in self._clocks:
                self._seen.setdefault(key, device)
                context = getattr(device.provider, "context", None)
                clock = None
                if context is not None and not device.closed:
                    from ._gpu import GpuClock
                    clock = GpuClock(context, device.streams[0].backend.stream)
                self._clocks[key] = clock
            return self._clocks[key]

    def _facts_of(self, subject, kind: str) -> dict:
        """Facts of an execution of ``subject`` (a plan, or a capture step: its replay or
        capture), computed once per subject and recording."""
        # a step's facts follow the plans it holds now (a recapture may record others,
        # as many as before)
        plans = [r.plan for r in subject._records] if kind != "execution" else []
        key = (id(subject), kind, tuple(map(id, plans)))
        out = self._facts.get(key)
        if out is None:
            if kind == "execution":
                out = plan_facts(subject)
            else:
                out = step_facts(subject, plans, kind)
            self._facts[key] = out
            self._keep.append((subject, plans))   # their ids stay theirs while recorded
        return out

    def _start_execution(self, device, kind, subject, covering, batch) -> Execution:
        record = Execution(device, kind, self._facts_of(subject, kind), batch)
        # timed by this profile's events (Execution.attach), whoever collects it
        record.clock = self._clock(device)
        if batch is not None:
            batch.executions.append(record)
        for session in covering:
            session._seen.setdefault(id(device), device)   # each names the device's lane
            session.executions.append(record)
        return record

    def _batch_record(self, batcher, device, requests, rows, bucket, formed,
                      covering) -> Batch:
        self._seen.setdefault(id(device), device)
        record = Batch(batcher or "batcher", device, [(r.n, r.enqueued) for r in requests],
                       rows, bucket, formed)
        for session in covering:
            session._seen.setdefault(id(device), device)
            session.batches.append(record)
        return record

    def _span(self, device, track, name, start, end, args) -> None:
        self._seen.setdefault(id(device), device)
        self.spans.append(Span(device, track, name, start, end, args))

    # ------------------------------------------------------------------ collection
    def _collect(self) -> None:
        """Wait for every recorded execution, read its times, release the GPU events."""
        with self._lock:
            if self._state not in ("open", "interrupted"):
                return
            self._state = "collecting"
        try:
            self._wait_all()
        except BaseException:
            # e.g. Ctrl-C while waiting: recording has ended; ``stop`` again collects the
            # rest (records already read are kept)
            self._state = "interrupted"
            raise

    def _wait_all(self) -> None:
        for record in self.executions:
            handle = record.handle
            if handle is None or record.ok is not None:
                record.handle = None
                continue                 # never submitted, or read by another profile
            handle.wait()                # (interrupted: the record keeps its handle)
            record.handle = None
            record.stream = handle.stream.name if handle.stream is not None else "?"
            record.submitted = handle.submitted_at
            record.started = handle.started_at
            record.ended = handle.finished_at
            record.ok = handle._error is None
            if record.gpu is not None:
                try:
                    record.clock.resolve(record)
                except Exception:  # noqa: BLE001 - a failed launch: keep the host times
                    record.ok = False
        self.executions = [r for r in self.executions if r.ok is not None]
        for clock in self._clocks.values():
            if clock is not None:
                clock.close()
        now = time.perf_counter()
        for b in self.batches:
            if b.ended is None:          # still running at the exit: cut there
                b.ended = now
        ends = [r.ended for r in self.executions if r.ended is not None]
        self.stopped_at = max([now] + ends)
        self._keep = []
        self._state = "done"

    def _check_done(self, what: str) -> None:
        if self._state == "interrupted":
            raise DeviceError(f"profile.{what}: the profile's collection was interrupted; "
                              "call its stop() again", code="INVALID_VALUE")
        if self._state != "done":
            raise DeviceError(f"profile.{what}: the profile is {self._state}; leave its "
                              "`with` block first", code="INVALID_VALUE")

    # ------------------------------------------------------------------ results
    def trace(self) -> dict:
        """The trace in Chrome's trace-event format (a JSON-ready dict; see
        ``export_chrome_trace``)."""
        self._check_done("trace")
        from ._chrome import to_trace
        return to_trace(self)

    def export_chrome_trace(self, path) -> None:
        """Write the trace as trace-event JSON, which Perfetto (ui.perfetto.dev) and
        ``chrome://tracing`` open.

        One process per device, one thread track per stream (and ``builds``,
        ``capture``); one process per dynamic batcher with its ``batches`` and
        ``requests`` tracks; flow arrows from each request to its batch and from each
        batch to the execution that served it. Times are µs from the profile's start.

        Parameters
        ----------
        path : str or os.PathLike
            The file to write (``.json``).

        Raises
        ------
        DeviceError
            The profile is still open or collecting (code ``INVALID_VALUE``), ``path``
            is not a path, or the file cannot be written (a missing folder, a directory,
            a full disk: the ``OSError`` is its ``__cause__``).
        """
        trace = self.trace()
        try:
            target = os.fspath(path)
        except TypeError:
            raise DeviceError(f"profile.export_chrome_trace: path must be a str or "
                              f"os.PathLike; got {type(path).__name__}",
                              code="INVALID_VALUE") from None
        try:
            with open(target, "w", encoding="utf-8") as f:
                json.dump(trace, f)
        except OSError as exc:
            raise DeviceError(f"profile.export_chrome_trace: cannot write {target!r}: "
                              f"{exc.strerror or exc}", code="INVALID_VALUE") from exc

    def key_averages(self, group_by: str = "name") -> list[dict]:
        """Executions grouped by ``group_by`` (``"name"``: the plan's graph name,
        ``"pattern"``, ``"engine"``, ``"stream"``), slowest total first.

        Returns
        -------
        list of dict
            ``key``, ``count``, ``total_ms``, ``mean_ms``, ``p50_ms``, ``p99_ms``,
            ``queue_wait_ms`` (mean), ``gflops`` (achieved GFLOP/s: FLOPs of all
            executions over their total time; None without FLOPs) and ``gbps`` (GB/s of
            the variant packs' bytes, 1 GB = 1e9 B).

        Raises
        ------
        DeviceError
            The profile is still open or collecting, or ``group_by`` is none of the four
            (code ``INVALID_VALUE``; :meth:`table` too).
        """
        self._check_done("key_averages")
        from ._stats import key_averages
        return key_averages(self.executions, group_by)

    def table(self, group_by: str | None = None, row_limit: int = 20) -> str:
        """A text table of :meth:`key_averages`: per plan and per pattern (or only
        ``group_by``), at most ``row_limit`` rows each, with the overlap figure."""
        self._check_done("table")
        from ._stats import table
        return table(self, group_by, row_limit)

    def overlap(self, device=None) -> float:
        """The fraction of wall time with two or more streams busy, in [0, 1].

        Wall time runs from the first recorded execution's start to the last one's end;
        a stream is busy from an execution's start to its end. ``device``: only that
        device's streams (default: all recorded).
        """
        self._check_done("overlap")
        from ._stats import overlap
        return overlap([r for r in self.executions
                        if device is None or r.device is device])

    def __repr__(self) -> str:
        return (f"<Profile {self._state}: {len(self.executions)} executions, "
                f"{len(self.batches)} batches, {len(self.spans)} spans>")
