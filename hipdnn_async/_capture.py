"""Capture and replay: record plan executions on one stream, replay them as one launch.

``dev.capture(stream=None)`` returns a :class:`Step`. Inside its ``async with`` (or
``with``) block every ``plan.submit`` / ``plan.enqueue`` of a plan of that device is bound
and *recorded*, nothing runs; at the end of the block the recording becomes one
replayable unit of the step's stream:

- GPU streams: a CUDA/HIP graph, captured from the stream in one work item (begin
  capture, the plans enqueue as they always do, end capture, instantiate), so a replay
  is one graph launch and its completion one event (``queues._gpu_backend``);
- CPU streams: the recorded executions in order, as one work item.

The buffers named at capture are the ones every replay reads and writes (copy new
inputs into them, as ``torch.cuda.graphs`` does); the step keeps them alive until it is
closed, and each replay keeps them until it completes. On a GPU the step owns one
workspace for all its plans (the stream's own workspace may be reallocated by later
builds, and a graph keeps the pointers it was captured with).

Inside the block nothing of the capturing task runs on a device behind its back, since
whatever ran there would be missing from every replay (CUDA's stream capture likewise
refuses synchronous work): ``execute`` / ``execute_sync`` (which promise finished
results), a replay of a step, and any execution of another device's plan are a
``DeviceError`` with code ``INVALID_VALUE``; awaiting the handle of a recorded
``submit`` is one too (the execution runs at each replay, not before).

A capture belongs to the task that entered the block (the asyncio or trio task; without
an event loop, the thread). Every other task and thread submits and executes as usual,
on any stream, the step's included, also while the block is open and also when it was
started inside the block (it inherits the block's context variables, not its capture):
the capture itself is one work item at the end of the block, so none of their work
lands in the graph and none is lost.

The plans' hot path pays one module attribute test for all this (``OPEN``, the number of
blocks open in the process); the context variable and the task are looked at only
while some block is open.
"""
from __future__ import annotations

import asyncio
import contextvars
import sys
import threading

import anyio
import anyio.lowlevel
import numpy as np

from . import _fork
from ._errors import DeviceError
from .profiler import _state as _prof
from .queues import _core as _queue_core

__all__ = ["Step", "Recorded", "OPEN", "recording_step", "refuse_eager"]

# the steps recording in this context, innermost last (one per device and task at most);
# a task started inside a block inherits the tuple, so entries are also checked for
# their owner (``_owner()``)
_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("hipdnn_async_capture",
                                                                default=())
# capture blocks open in the process, any thread: 0 means no submission anywhere records
OPEN = 0
_open_lock = _fork.reinit_in_child(threading.Lock())

_NEW, _RECORDING, _READY, _FAILED, _CLOSED = "new", "recording", "ready", "failed", "closed"
# a misuse of the capture API (wrong state, wrong place): hipDNN's code for a bad argument
MISUSE = "INVALID_VALUE"


def _owner():
    """Who submits: the running asyncio or trio task, else the thread (a capture's owner)."""
    if asyncio._get_running_loop() is not None:
        task = asyncio.current_task()
        if task is not None:
            return task
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return trio.lowlevel.current_task()
        except RuntimeError:   # not in a trio thread
            pass
    return threading.current_thread()


def _mine() -> list:
    """The steps recording for this task, innermost last (only while ``OPEN``)."""
    steps = _ACTIVE.get()
    if not steps:
        return []
    me = _owner()
    return [s for s in steps if s._owner is me and s._state == _RECORDING]


def recording_step(plan) -> "Step | None":
    """The step that records this submission of ``plan``, or None (it runs as usual).

    Called by ``ExecutionPlan.submit`` / ``enqueue`` only while ``OPEN``.

    Raises
    ------
    DeviceError
        This task is capturing, but not ``plan``'s device (the plan would run at once and
        the replay would compute nothing of it).
    """
    mine = _mine()
    if not mine:
        return None
    for step in mine:
        if step.device is plan.device:
            return step
    raise _foreign(plan, "submitted", mine[-1])


def refuse_eager(device, where: str, plan=None) -> None:
    """DeviceError when this task is inside a capture block: ``where`` (an execute, a
    replay) would run at once on ``device`` and be missing from every replay.

    Called by ``execute`` / ``execute_sync`` / replays only while ``OPEN``.
    """
    mine = _mine()
    if not mine:
        return
    step = next((s for s in mine if s.device is device), None)
    if step is None and plan is not None:
        raise _foreign(plan, "executed", mine[-1])
    step = step or mine[-1]
    if plan is not None:
        raise DeviceError(
            f"{where} inside a capture: use submit; results come from replay (`await "
            f"step.replay()` after the block); in {step._label} of device "
            f"'{step.device.spec}' an execute would run now and be missing from every "
            "replay", code=MISUSE)
    raise DeviceError(
        f"{where} inside a capture ({step._label} of device '{step.device.spec}'): a step "
        "records plan submissions only, and this would run now and be missing from every "
        "replay; replay it after the block", code=MISUSE)


def _foreign(plan, how: str, step) -> DeviceError:
    ours, theirs = f"device '{step.device.spec}'", f"device '{plan.device.spec}'"
    if plan.device.spec == step.device.spec:    # two Device objects of one spec
        ours, theirs = f"this {ours} object", f"another {theirs} object"
    return DeviceError(
        f"{plan._label}: a plan of {theirs} {how} inside a capture of {ours} "
        f"({step._label}); a step records only plans of its own device, and this one would "
        f"run now and be missing from every replay: build the plan on the capturing "
        f"device, run it outside the block, or capture the plan's device too (`async with "
        f"a.capture() as sa, b.capture() as sb:`)", code=MISUSE)


class Recorded:
    """The handle of an execution recorded into a step (``plan.submit`` inside
    ``dev.capture()``): the execution runs at each replay of the step, never by itself.

    ``done()`` is False; ``await handle``, ``result()``, ``exception()``, ``wait()`` and
    ``add_done_callback()`` raise ``DeviceError`` (code ``INVALID_VALUE``) naming the step:
    wait for a replay instead (``await step.replay()`` or the handle of ``step.submit()``).
    Waiting would otherwise deadlock inside the block (no replay can start before it ends)
    or claim a result that nothing computed. ``stream`` is the step's stream;
    ``queue_wait_ms`` and ``exec_ms`` are None (it never runs by itself).
    """

    __slots__ = ("label", "step")

    def __init__(self, label: str, step: "Step"):
        self.label = label
        self.step = step

    def _error(self, what: str) -> DeviceError:
        return DeviceError(
            f"{self.label}: {what} of an execution recorded into {self.step._label}: it runs "
            "only when the step is replayed; await step.replay() (or the handle of "
            "step.submit()) after the block instead", code=MISUSE)

    def done(self) -> bool:
        return False

    def result(self, timeout: float | None = None):
        raise self._error("result()")

    def exception(self, timeout: float | None = None):
        raise self._error("exception()")

    def wait(self, timeout: float | None = None) -> bool:
        raise self._error("wait()")

    def __await__(self):
        raise self._error("await")

    def add_done_callback(self, fn) -> None:
        raise self._error("add_done_callback()")

    @property
    def stream(self):
        return self.step.stream

    @property
    def queue_wait_ms(self) -> None:
        return None

    @property
    def exec_ms(self) -> None:
        return None

    def describe(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"<Recorded {self.label!r} in {self.step._label}>"


class _Record:
    """One recorded execution: the plan, its bound buffers and workspace, and the
    objects that back them (kept alive as long as the step)."""

    __slots__ = ("plan", "buffers", "workspace", "keep")

    def __init__(self, plan, buffers: dict, workspace, keep: tuple):
        self.plan = plan
        self.buffers = buffers
        self.workspace = workspace
        self.keep = keep


class Step:
    """A recorded sequence of plan executions on one stream, replayed as one launch.

    Made by ``dev.capture(stream=None)``; use as ``async with`` (or ``with`` from code
    without an event loop), then ``await step.replay()`` / ``step.replay_sync()`` /
    ``step.submit()`` any number of times, and ``step.close()``.

    Parameters
    ----------
    device : Device
        The device whose executions are recorded.
    stream : Stream or int, optional
        The stream the step records on and replays on. Default: the least loaded one,
        chosen when the block is entered.

    Attributes
    ----------
    device : Device
    stream : Stream or None
        The step's stream (None before the block is entered).

    Notes
    -----
    Inside the block ``plan.submit`` (and ``await plan.enqueue``) of a plan of this device
    binds the execution (every check of ``submit`` runs, and a bad variant pack raises
    there) and records it; nothing runs until a replay. Its handle is not a result:
    ``done()`` is False and awaiting it (or ``result()``, ``wait()``) raises
    ``DeviceError``; wait for a replay instead. Also a ``DeviceError`` (code
    ``INVALID_VALUE``), since each would run at once and be missing from every replay:
    ``execute`` / ``execute_sync`` (use ``submit``; results come from replay), a plan of
    another device, a replay of any step, a submission to another stream than the step's.

    The capture belongs to the task that entered the block (asyncio or trio task; the
    thread without an event loop): other tasks and threads, also ones started inside the
    block, submit and execute as usual and nothing of theirs is recorded (see
    ``hipdnn_async._capture``). Leaving the block with an exception records nothing: a
    first capture leaves the step with nothing to replay, a recapture leaves it replaying
    its earlier recording.
    """

    def __init__(self, device, stream=None):
        self.device = device
        self._stream_arg = stream
        self.stream = None
        self._records: list[_Record] = []
        self._state = _NEW
        self._why = ""
        self._token = None
        self._owner = None           # the task (or thread) recording, while recording
        self._replay = None          # the backend's replayable unit
        # (replay's work-item function, keepalive, label) while READY, else None: what
        # ``submit`` reads without the lock (one attribute, so one consistent triple)
        self._armed = None
        self._pool = device._pool
        self._keep: tuple = ()       # what every replay keeps alive
        self._previous = None        # while a recapture records: the recording before it
        self._ws = None              # the step's own workspace (GPU)
        self._lock = threading.Lock()
        _fork.reinit_attrs_in_child(self, "_lock")
        self._label = "capture step"
        # a host step's replay time: a short replay runs on the submitting thread when
        # its stream is idle, as a plan's execution does (StreamPool._submit_now)
        self._timer = _queue_core.ExecTimer() if device.is_host else None

    # ------------------------------------------------------------------ recording
    def __len__(self) -> int:
        """The number of executions recorded."""
        return len(self._records)

    def __repr__(self) -> str:
        where = f" on stream '{self.stream.name}'" if self.stream is not None else ""
        return f"<Step {self._state}, {len(self._records)} executions{where}>"

    def _begin(self) -> "Step":
        global OPEN
        self._check_enterable()
        if any(s.device is self.device for s in _mine()):
            raise DeviceError(f"{self._label}: device '{self.device.spec}' is already "
                              "capturing in this task; captures do not nest", code=MISUSE)
        self.device._check_open("capture")
        if self.stream is None:
            self.stream = self.device._pool.pick(self.device._stream(self._stream_arg, "capture"))
            self._label = f"capture step on stream '{self.stream.name}'"
        with self._lock:
            # checked again where the state changes: a close() or another entry from
            # another thread since the checks above must not be overwritten (a closed
            # step recording again, or two owners of one block)
            self._check_enterable()
            # a recapture keeps what a block that raises gives back (``_restore``)
            self._previous = ((self._records, self._keep, self._label, self._armed)
                              if self._state == _READY else None)
            self._records = []
            self._owner = _owner()
            self._state = _RECORDING
            self._armed = None       # a recapture: no replay while recording (after the
            #                          state: whoever then finds no triple sees RECORDING)
        with _open_lock:
            OPEN += 1
        self._token = _ACTIVE.set(_ACTIVE.get() + (self,))
        return self

    def _check_enterable(self) -> None:
        if self._state == _CLOSED:
            raise DeviceError(f"{self._label}: the step is closed; capture a new one",
                              code=MISUSE)
        if self._state == _RECORDING and self._token is None:
            raise DeviceError(f"{self._label} {self._still_capturing()}", code=MISUSE)
        if self._state == _RECORDING:
            raise DeviceError(f"{self._label}: already recording (a step's block is not "
                              "re-entrant)", code=MISUSE)

    def _still_capturing(self) -> str:
        # the block has ended and its capture item (queued or running; still queued after
        # an interrupted exit) will make the step ready or failed
        return (f"is still recording: its block has ended and its capture is still being "
                f"made on stream '{self.stream.name}'; wait for the stream "
                "(dev.synchronize()) and try again")

    def _end_recording(self) -> None:
        global OPEN
        token, self._token = self._token, None
        if token is None:
            return
        self._owner = None
        with _open_lock:
            OPEN -= 1
        try:
            _ACTIVE.reset(token)
        except ValueError:   # left in another context than entered: drop it by hand
            _ACTIVE.set(tuple(s for s in _ACTIVE.get() if s is not self))

    def _record(self, plan, variant_pack, workspace, stream) -> Recorded:
        """Bind one execution of ``plan`` and keep it for the capture (ExecutionPlan's
        hook, for the step's owner while it records: ``recording_step``)."""
        if stream is not None and self.device._stream(stream) is not self.stream:
            chosen = self.device._stream(stream)
            raise DeviceError(
                f"{plan._label}: submitted to stream '{chosen.name}' during a capture on "
                f"stream '{self.stream.name}'; a step records one stream (pass stream=None "
                "or the step's stream, or capture another step for the other stream)",
                code=MISUSE)
        buffers, ws = plan._bind(variant_pack, workspace)
        keep = tuple(variant_pack.values()) + ((workspace,) if workspace is not None else ())
        self._records.append(_Record(plan, buffers, ws, keep))
        return Recorded(plan._label, self)

    # ------------------------------------------------------------------ capture
    def _workspace(self):
        """One workspace for every recorded execution that would use the stream's own
        (GPU): (workspace object, bound pointer) or (None, None)."""
        need = [r for r in self._records if r.workspace is None and r.plan.workspace_size]
        if not need or self.device.is_host:
            return None, None
        nbytes = max(r.plan.workspace_size for r in need)
        provider = self.device.provider
        arr = self._ws
        if arr is None or arr.nbytes < nbytes:   # a recapture keeps a large enough one
            arr = self._ws = provider.empty((nbytes,), np.dtype(np.uint8), (1,))
        return arr, provider.bind_workspace(nbytes, arr, where=self._label)

    def _capture_fn(self, previous):
        """The work item that makes the replayable unit (run on the step's stream)."""
        ws_obj, ws_ptr = self._workspace()
        fns = []
        keep = [ws_obj] if ws_obj is not None else []
        for r in self._records:
            ws = r.workspace if r.workspace is not None or not r.plan.workspace_size else ws_ptr
            fns.append(r.plan._runner(r.buffers, ws))
            keep.extend(r.keep)
        self._keep = tuple(keep)
        return self.stream.backend.capture(tuple(fns), previous=previous)

    def _finish_recording(self, failed: BaseException | None) -> tuple | None:
        """Leave the recording state; (capture fn, keepalive) of a capture to run, or None
        when there is nothing to capture (failure)."""
        self._end_recording()
        if failed is not None:
            if not self._restore():
                self._fail(f"the capture block raised {type(failed).__name__}: {failed}")
            return None
        self._previous = None
        previous, self._replay = self._replay, None
        try:
            return self._capture_fn(previous), self._keep
        except BaseException as exc:
            if previous is not None:
                previous.close()
            self._fail(f"{type(exc).__name__}: {exc}")
            raise

    def _restore(self) -> bool:
        """After a recapture block that raised: the step as it was before the block (its
        replay untouched: nothing is captured until a block ends well); False where there
        was no earlier recording."""
        with self._lock:
            previous, self._previous = self._previous, None
            if previous is None or self._replay is None or self._state != _RECORDING:
                return False
            self._records, self._keep, self._label, armed = previous
            self._state = _READY
            self._armed = armed
            return True

    def _fail(self, why: str) -> None:
        with self._lock:
            if self._state == _CLOSED:   # closed meanwhile (another thread): stays closed
                return
            self._armed = None
            self._state = _FAILED
            self._why = why
            self._records = []
            self._keep = ()

    def _captured(self, handle) -> None:
        """Take the outcome of the capture item (its value is the replayable unit)."""
        try:
            replay = handle.result()
        except BaseException as exc:
            self._fail(f"capture failed: {exc}")
            raise
        with self._lock:
            if self._state == _CLOSED:      # closed meanwhile (another thread)
                replay.close()
                return
            self._replay = replay
            self._state = _READY
            self._label = (f"capture step of {len(self._records)} executions on stream "
                           f"'{self.stream.name}'")
            # a failed replay names the step (its launch is a bare runtime call)
            self._armed = (_queue_core.Named(replay.launcher(), self._label), self._keep,
                           self._label)

    def _submit_capture(self, fn, keep):
        try:
            rec = _prof.recorder(self.device, "capture", self) if _prof.ON else None
            return self.device._pool._submit_now(fn, keep, self.stream,
                                                 f"{self._label}: capture", None, rec)
        except BaseException as exc:
            # e.g. the device closed inside the block: the step is not left recording
            # (which would refuse every recapture as re-entrant), but says why it has
            # nothing to replay; a recapture's previous unit is released with ``fn``
            self._fail(f"the capture could not be submitted: {exc}")
            raise

    async def __aenter__(self) -> "Step":
        return self._begin()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        todo = self._finish_recording(exc)
        if todo is None:
            return
        # the capture is one short work item: finish it even when the task is cancelled,
        # so the step is either ready or failed, never half made
        with anyio.CancelScope(shield=True):
            handle = self._submit_capture(*todo)
            await handle._wait_done()
        self._captured(handle)

    def __enter__(self) -> "Step":
        return self._begin()

    def __exit__(self, exc_type, exc, tb) -> None:
        todo = self._finish_recording(exc)
        if todo is None:
            return
        handle = self._submit_capture(*todo)
        try:
            handle.wait()
        except BaseException:
            # interrupted (Ctrl-C) while the capture item waits its turn: it still runs,
            # and settles the step (ready or failed) when it is done
            handle.add_done_callback(self._settle)
            raise
        self._captured(handle)

    def _settle(self, handle) -> None:
        try:
            self._captured(handle)
        except BaseException:    # noqa: BLE001 - _captured has marked the step failed
            pass

    def recapture(self) -> "Step":
        """Record the step again (a block like the first): new buffers, the same or other
        plans. On a GPU the executable graph is updated in place where the new one has the
        same shape (``cudaGraphExecUpdate``: no instantiation), else replaced. A block that
        raises leaves the step as it was: replays run the earlier recording.

        Returns
        -------
        Step
            This step, to use as ``async with step.recapture():``.
        """
        if self._state == _CLOSED:
            raise DeviceError(f"{self._label}: the step is closed; capture a new one",
                              code=MISUSE)
        return self

    # ------------------------------------------------------------------ replay
    def _ready(self, where: str):
        state = self._state
        if state == _READY:
            return self._replay
        if state == _CLOSED:
            why = f"{self._label} is closed"
        elif state == _RECORDING and self._token is None:
            why = f"{self._label} {self._still_capturing()}"
        elif state == _RECORDING:
            why = f"{self._label} is still recording; replay after its block has ended"
        elif state == _FAILED:
            why = f"{self._label} has nothing to replay ({self._why})"
        else:
            why = (f"{self._label} was never captured (use it as `async with "
                   "dev.capture() as step:` first)")
        raise DeviceError(f"{where}: {why}", code=MISUSE)

    def _arm(self, where: str) -> tuple:
        """(work-item function, keepalive, label) of a replay, or the DeviceError of the
        step's state or of a capture block of this task."""
        with self._lock:
            armed = self._armed
            if armed is None:        # not READY (``_begin`` clears it after the state)
                self._ready(where)
            if OPEN:   # a replay inside a capture block would run now, unrecorded
                refuse_eager(self.device, f"{where} of {self._label}")
            return armed

    def submit(self):
        """Launch one replay and return its awaitable handle at once (as ``plan.submit``:
        never waits; beyond the stream's in-flight limit it waits host-side, in order).

        Raises
        ------
        DeviceError
            Code ``INVALID_VALUE``: the step is closed, still recording, or its capture
            failed; called inside a capture block of this task (the replay would run now,
            missing from that capture's replays); the device is closed.
        """
        # The hot path reads ``_armed`` once, without the lock. A close in another
        # thread that races this call is ordered after it: the replay is submitted with
        # the triple read, and its function keeps the executable graph until it has
        # launched (as with the lock, which never covered the enqueue). A racing
        # recapture may come before or after it: a replay enqueued after the recapture's
        # capture item runs the graph as updated in place (the new recording). Any other
        # state, or a capture block open somewhere, takes the checked path.
        armed = self._armed
        if armed is None or OPEN:
            armed = self._arm("replay")
        fn, keep, label = armed
        rec = _prof.recorder(self.device, "replay", self) if _prof.ON else None
        return self._pool._submit_now(fn, keep, self.stream, label, self._timer, rec)

    async def replay(self) -> None:
        """Run every recorded execution, in order, as one launch; return when done.

        Raises
        ------
        DeviceError
            As :meth:`submit`.
        ExecutionError
            The replay failed on the device.

        Notes
        -----
        As ``plan.execute``: a cancelled awaiter returns at once, the replay runs to
        completion and its buffers stay alive until then.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        fn, keep, label = self._arm("replay")
        rec = _prof.recorder(self.device, "replay", self) if _prof.ON else None
        item = await self._pool._run(fn, keep, self.stream, label, self._timer, rec)
        if item._error is not None:
            raise item._error

    def replay_sync(self) -> None:
        """Blocking :meth:`replay` for threads without an event loop."""
        fn, keep, label = self._arm("replay_sync")
        rec = _prof.recorder(self.device, "replay", self) if _prof.ON else None
        item = self._pool._run_sync(fn, keep, self.stream, label, self._timer, rec)
        if item._error is not None:
            raise item._error

    def close(self) -> None:
        """Release the replayable unit (the GPU graph) and the step's buffers; idempotent.
        Replays submitted before run to completion and keep their buffers until then (on
        a GPU the graph is destroyed once the last of them has been launched)."""
        with self._lock:
            if self._state == _CLOSED:
                return
            self._armed = None
            replay, self._replay = self._replay, None
            self._state = _CLOSED
            self._records = []
            self._keep = ()
            self._previous = None
            self._ws = None
        if replay is not None:
            replay.close()
