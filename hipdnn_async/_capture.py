"""Capture and replay: record plan executions on one stream, replay them as one launch.

``dev.capture(stream=None)`` returns a :class:`Step`. Inside its ``async with`` (or
``with``) block every execution of a plan of that device (``plan.submit``,
``enqueue``, ``execute``, ``execute_sync``) is bound and *recorded*, nothing runs; at
the end of the block the recording becomes one replayable unit of the step's stream:

- GPU streams: a CUDA/HIP graph, captured from the stream in one work item (begin
  capture, the plans enqueue as they always do, end capture, instantiate), so a replay
  is one graph launch and its completion one event (``queues._gpu_backend``);
- CPU streams: the recorded executions in order, as one work item.

The buffers named at capture are the ones every replay reads and writes (copy new
inputs into them, as ``torch.cuda.graphs`` does); the step keeps them alive until it is
closed, and each replay keeps them until it completes. On a GPU the step owns one
workspace for all its plans (the stream's own workspace may be reallocated by later
builds, and a graph keeps the pointers it was captured with).

Which device is capturing is a context variable: the task (or thread) inside the block
records; other tasks submit to the device as usual, the step's stream included (the
capture itself is a single work item, so nothing of theirs lands in the graph).
"""
from __future__ import annotations

import contextvars
import threading
import anyio
import anyio.lowlevel
import numpy as np

from ._errors import DeviceError

__all__ = ["Step", "Recorded", "active_step"]

# the steps recording in this context, innermost last (one per device at most)
_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("hipdnn_async_capture",
                                                                default=())

_NEW, _RECORDING, _READY, _FAILED, _CLOSED = "new", "recording", "ready", "failed", "closed"


def active_step(device) -> "Step | None":
    """The step recording executions of ``device`` in this context, or None."""
    for step in _ACTIVE.get():
        if step.device is device:
            return step
    return None


class Recorded:
    """The handle of an execution recorded into a step: it runs only at replay, so it is
    complete as soon as it is recorded (``await`` returns None at once)."""

    __slots__ = ("label",)

    def __init__(self, label: str):
        self.label = label

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> None:
        return None

    def exception(self, timeout: float | None = None) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def __await__(self):
        return anyio.lowlevel.checkpoint().__await__()

    def __repr__(self) -> str:
        return f"<Recorded {self.label!r}>"


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
    Inside the block an execution is bound (every check of ``plan.submit`` runs, and a
    bad variant pack raises there) and returns at once: ``plan.submit`` gives a handle
    that is already complete and ``await plan.execute(...)`` returns; nothing runs until
    a replay. An execution on another stream than the step's is a ``DeviceError``.
    Leaving the block with an exception records nothing (the step cannot be replayed).
    """

    def __init__(self, device, stream=None):
        self.device = device
        self._stream_arg = stream
        self.stream = None
        self._records: list[_Record] = []
        self._state = _NEW
        self._why = ""
        self._token = None
        self._replay = None          # the backend's replayable unit
        self._keep: tuple = ()       # what every replay keeps alive
        self._ws = None              # the step's own workspace (GPU)
        self._lock = threading.Lock()
        self._label = "capture step"

    # ------------------------------------------------------------------ recording
    def __len__(self) -> int:
        """The number of executions recorded."""
        return len(self._records)

    def __repr__(self) -> str:
        where = f" on stream '{self.stream.name}'" if self.stream is not None else ""
        return f"<Step {self._state}, {len(self._records)} executions{where}>"

    def _begin(self) -> "Step":
        if self._state == _CLOSED:
            raise DeviceError(f"{self._label}: the step is closed; capture a new one")
        if self._state == _RECORDING:
            raise DeviceError(f"{self._label}: already recording (a step's block is not "
                              "re-entrant)")
        if active_step(self.device) is not None:
            raise DeviceError(f"{self._label}: device '{self.device.spec}' is already "
                              "capturing in this task; captures do not nest")
        self.device._check_open("capture")
        if self.stream is None:
            self.stream = self.device._pool.pick(self.device._stream(self._stream_arg))
            self._label = f"capture step on stream '{self.stream.name}'"
        self._records = []
        self._state = _RECORDING
        self._token = _ACTIVE.set(_ACTIVE.get() + (self,))
        return self

    def _end_recording(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            try:
                _ACTIVE.reset(token)
            except ValueError:   # left in another context than entered: drop it by hand
                _ACTIVE.set(tuple(s for s in _ACTIVE.get() if s is not self))

    def _record(self, plan, variant_pack, workspace, stream) -> Recorded:
        """Bind one execution of ``plan`` and keep it for the capture (ExecutionPlan's
        hook while this step is active)."""
        if self._state != _RECORDING:
            raise DeviceError(f"{self._label}: not recording")
        if stream is not None and self.device._stream(stream) is not self.stream:
            chosen = self.device._stream(stream)
            raise DeviceError(
                f"{plan._label}: submitted to stream '{chosen.name}' during a capture on "
                f"stream '{self.stream.name}'; a step records one stream (pass stream=None "
                "or the step's stream, or capture another step for the other stream)",
                code="INVALID_VALUE")
        buffers, ws = plan._bind(variant_pack, workspace)
        keep = tuple(variant_pack.values()) + ((workspace,) if workspace is not None else ())
        self._records.append(_Record(plan, buffers, ws, keep))
        return Recorded(plan._label)

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
            self._fail(f"the capture block raised {type(failed).__name__}: {failed}")
            return None
        previous, self._replay = self._replay, None
        try:
            return self._capture_fn(previous), self._keep
        except BaseException as exc:
            if previous is not None:
                previous.close()
            self._fail(f"{type(exc).__name__}: {exc}")
            raise

    def _fail(self, why: str) -> None:
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

    def _submit_capture(self, fn, keep):
        return self.device._pool.submit_now(fn, keepalive=keep, stream=self.stream,
                                            label=f"{self._label}: capture")

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
        handle.wait()
        self._captured(handle)

    def recapture(self) -> "Step":
        """Record the step again (a block like the first): new buffers, the same or other
        plans. On a GPU the executable graph is updated in place where the new one has the
        same shape (``cudaGraphExecUpdate``: no instantiation), else replaced.

        Returns
        -------
        Step
            This step, to use as ``async with step.recapture():``.
        """
        if self._state == _CLOSED:
            raise DeviceError(f"{self._label}: the step is closed; capture a new one")
        return self

    # ------------------------------------------------------------------ replay
    def _ready(self, where: str):
        state = self._state
        if state == _READY:
            return self._replay
        if state == _CLOSED:
            raise DeviceError(f"{where}: {self._label} is closed")
        if state == _RECORDING:
            raise DeviceError(f"{where}: {self._label} is still recording; replay after its "
                              "block has ended")
        if state == _FAILED:
            raise DeviceError(f"{where}: {self._label} has nothing to replay ({self._why})")
        raise DeviceError(f"{where}: {self._label} was never captured (use it as "
                          "`async with dev.capture() as step:` first)")

    def _launcher(self, where: str):
        with self._lock:
            return self._ready(where).launcher()

    def submit(self):
        """Launch one replay and return its awaitable handle at once (as ``plan.submit``:
        never waits; beyond the stream's in-flight limit it waits host-side, in order).

        Raises
        ------
        DeviceError
            The step is closed, still recording, or its capture failed; the device is
            closed.
        """
        fn = self._launcher("replay")
        return self.device._pool.submit_now(fn, keepalive=self._keep, stream=self.stream,
                                            label=self._label)

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
        fn = self._launcher("replay")
        handle = await self.device._pool.submit(fn, keepalive=self._keep,
                                                stream=self.stream, label=self._label)
        await handle

    def replay_sync(self) -> None:
        """Blocking :meth:`replay` for threads without an event loop."""
        fn = self._launcher("replay_sync")
        self.device._pool.submit_blocking(fn, keepalive=self._keep, stream=self.stream,
                                          label=self._label).result()

    def close(self) -> None:
        """Release the replayable unit (the GPU graph) and the step's buffers; idempotent.
        Replays submitted before run to completion and keep their buffers until then (on
        a GPU the graph is destroyed once the last of them has been launched)."""
        with self._lock:
            if self._state == _CLOSED:
                return
            replay, self._replay = self._replay, None
            self._state = _CLOSED
            self._records = []
            self._keep = ()
            self._ws = None
        if replay is not None:
            replay.close()
