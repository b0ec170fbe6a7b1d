"""Per-stream launch resources and the variant packs that launch on them.

What a plan needs on the stream it launches on is that stream's state, prepared before
any launch (``_stream_prep``: the runtime creates and sizes it from what providers declared): a vendor DNN handle
bound to the stream and a workspace. It lives in the stream's ``LaunchContext.resources``
under the vendor's key.

- ``StreamHandle``: a vendor DNN handle bound to one stream.
- ``StreamResources``: one stream's handle and workspace.
- ``stream_resources(key, who)``: the lookup a plan's launch makes (no creation).
- ``PackSpec``: a bound execution's pointers, resolved before the launch is handed down,
  with the stream-dependent part (the handle, the workspace) named as data; a bound C
  launch (``_cudnn_backend.GraphLaunch``) completes it per stream with :meth:`PackSpec.resolve`,
  calling nothing above the runtime.
"""
from __future__ import annotations

from typing import Callable

from .._errors import DeviceError, ExecutionError
from . import _launch_state

current_launch = _launch_state.current_launch   # -> LaunchContext | None (C thread-local)

__all__ = ["StreamHandle", "StreamResources", "stream_resources", "PackSpec"]


class StreamHandle:
    """A vendor DNN handle bound to one GPU stream.

    Parameters
    ----------
    create : callable
        ``create() -> int`` handle (e.g. ``cudnnCreate``).
    set_stream : callable
        ``set_stream(handle, stream)``.
    destroy : callable
        ``destroy(handle)``.
    stream : int
        The stream handle.
    """

    def __init__(self, create: Callable[[], int], set_stream: Callable[[int, int], None],
                 destroy: Callable[[int], None], stream: int):
        self._destroy = destroy
        self.ptr = create()
        try:
            set_stream(self.ptr, stream)
        except BaseException:
            destroy(self.ptr)
            raise

    def close(self) -> None:
        """Destroy the handle (once the stream is drained); idempotent."""
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self._destroy(ptr)


class StreamResources:
    """One stream's vendor handle and workspace.

    Parameters
    ----------
    stream : int
        The stream.
    handle : StreamHandle or object with ``ptr`` and ``close()``
        The vendor handle bound to ``stream``; closed with these resources unless
        ``owns_handle`` is False (a handle lent for a trial run).
    pooled : bool
        Whether the device allocates from a stream-ordered pool.
    runtime : _gpu.Runtime or object
        The GPU runtime (``malloc``, ``malloc_async``, ``free``).
    """

    def __init__(self, stream: int, handle, *, pooled: bool, runtime,
                 owns_handle: bool = True):
        self.stream = stream
        self._handle = handle
        self._owns_handle = owns_handle
        self._pooled = pooled
        self._rt = runtime
        self.workspace_ptr = 0
        self.workspace_size = 0

    @property
    def handle(self) -> int:
        """The vendor handle (an int)."""
        return self._handle.ptr

    def reserve(self, nbytes: int) -> None:
        """Grow the workspace to at least ``nbytes``: at stream start or at build only,
        between launches (``StreamNeeds`` calls it under the stream's launch lock).
        The old buffer is freed stream-ordered, after the work already enqueued.

        Raises
        ------
        DeviceError
            The memory cannot be had.
        """
        if nbytes <= self.workspace_size:
            return
        old, self.workspace_ptr, self.workspace_size = self.workspace_ptr, 0, 0
        try:
            if old:
                self._rt.free(old, self.stream, self._pooled)
            self.workspace_ptr = (self._rt.malloc_async(nbytes, self.stream) if self._pooled
                                  else self._rt.malloc(nbytes, 0, False))
        except Exception as exc:  # noqa: BLE001 - the runtime's error, retyped with the size
            raise DeviceError(f"cannot allocate a stream workspace of {nbytes} bytes: {exc}; "
                              "lower the knob 'global.workspace_size_limit' or pass "
                              "workspace= to execute") from exc
        self.workspace_size = int(nbytes)

    def workspace(self, given, nbytes: int) -> int:
        """The workspace pointer of one execution: ``given`` (already checked by the
        binder), else this stream's own; 0 when none is needed. Allocates nothing.

        Raises
        ------
        ExecutionError
            The stream's workspace was not sized for ``nbytes`` at build (a bug).
        """
        if not nbytes:
            return 0
        if given is not None:
            return given
        if nbytes > self.workspace_size:
            raise ExecutionError(f"the stream workspace holds {self.workspace_size} bytes; this "
                                 f"plan needs {nbytes} (it was not reserved at build)")
        return self.workspace_ptr

    def close(self) -> None:
        """Free the workspace and destroy the handle (the stream is drained); idempotent."""
        if self.workspace_ptr:
            ptr, self.workspace_ptr, self.workspace_size = self.workspace_ptr, 0, 0
            self._rt.free(ptr, self.stream, self._pooled)
        if self._owns_handle and self._handle is not None:
            self._handle.close()
        self._handle = None


def stream_resources(key: str, who: str, lc=None) -> StreamResources:
    """The resources under ``key`` of launch context ``lc`` (default: the stream launching
    on this thread), looked up, never created. ``who`` names the plans in messages.

    Raises
    ------
    ExecutionError
        Called off a GPU stream, or on a stream that was not prepared for ``key``.
    """
    if lc is None:
        lc = current_launch()
    if lc is None:
        raise ExecutionError(f"{who} run on a GPU stream of their device "
                             "(plan.execute / submit), not on the calling thread")
    res = lc.resources.get(key)
    if res is None:
        raise ExecutionError(f"{who}: stream {lc.stream:#x} has no {key} launch resources "
                             "(it belongs to another device, or was not prepared)")
    return res


class PackSpec:
    """A bound execution's variant pack, resolved before its launch is handed down.

    Every pointer is fixed at bind time except what depends on the stream the launch
    runs on: the stream's vendor handle and, unless the caller gave one, the stream's
    workspace. Those are named here as data (the resource key) and looked up in the
    stream's ``LaunchContext.resources`` by :meth:`resolve`, which a bound launch calls
    when it first runs on a stream (and again when that stream's workspace moved).

    Parameters
    ----------
    key : str
        The stream resources' key (``"cudnn"``).
    who : str
        The plans, as messages name them (``"cuDNN plans"``).
    pointers : sequence of int
        The pack's device/host pointers in uid order; an entry flagged in ``in_workspace``
        is instead a byte offset into the execution's workspace.
    in_workspace : sequence of bool
        Per entry: whether it is an offset into the workspace. Default: none is.
    workspace : int, optional
        The caller's workspace pointer (checked by the binder), or None for the stream's
        own.
    workspace_size : int, optional
        Bytes of workspace one execution needs (0: none; then the workspace is 0).
    plan_offset : int, optional
        Offset of the library's own workspace in it, or None when it needs none.

    Raises
    ------
    ValueError
        ``in_workspace`` and ``pointers`` differ in length.
    """

    __slots__ = ("key", "who", "pointers", "in_workspace", "workspace", "workspace_size",
                 "plan_offset")

    def __init__(self, key: str, who: str, pointers, in_workspace=(), *, workspace=None,
                 workspace_size: int = 0, plan_offset: int | None = None):
        self.key = key
        self.who = who
        self.pointers = tuple(pointers)
        flags = tuple(in_workspace) or (False,) * len(self.pointers)
        if len(flags) != len(self.pointers):
            raise ValueError(f"PackSpec: {len(flags)} workspace flags for "
                             f"{len(self.pointers)} pointers")
        self.in_workspace = flags
        self.workspace = workspace
        self.workspace_size = int(workspace_size)
        self.plan_offset = plan_offset

    def at(self, ws: int) -> list:
        """The pointers for a workspace at ``ws``."""
        return [p + ws if w else p for p, w in zip(self.pointers, self.in_workspace)]

    def resolve(self, lc) -> tuple:
        """``(handle, pointers, plan_workspace, marker)`` on launch context ``lc``: the
        stream's handle, the pointers in uid order, the library's workspace pointer (0:
        none), and the object whose ``workspace_ptr`` changes when the stream's workspace
        moves (None when the workspace is the caller's or there is none).

        Raises
        ------
        ExecutionError
            ``lc`` is None (not on a GPU stream), the stream was not prepared for
            ``key``, or its workspace was not sized for ``workspace_size``.
        """
        res = stream_resources(self.key, self.who, lc)
        ws = res.workspace(self.workspace, self.workspace_size)
        plan_ws = ws + self.plan_offset if self.plan_offset is not None else 0
        marker = res if self.workspace is None and self.workspace_size else None
        return res.handle, self.at(ws), plan_ws, marker
