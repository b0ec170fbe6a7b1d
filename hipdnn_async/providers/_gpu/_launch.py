"""Per-stream launch resources of a GPU provider, prepared before any launch.

What a plan's ``run`` needs on its stream (the provider's vendor handle bound to that
stream, and a workspace large enough for every plan built so far) is created when the
stream starts and grown when a plan is built, before the plan can first be launched:
``run`` then only enqueues work. It allocates, frees, synchronises and creates nothing, so
the first execution pays no setup and the work a stream enqueues could be captured into a
CUDA/HIP graph.

- ``StreamResources``: one stream's handle and workspace (in ``LaunchContext.resources``
  under the provider's key; closed with the stream).
- ``LaunchResources``: a provider's view of all its device's streams: ``reserve(nbytes)``
  at build grows every open stream's workspace now and every later stream's at its start.
- ``stream_resources(key)``: the lookup a plan's ``run`` makes (no creation).
"""
from __future__ import annotations

import threading
from typing import Callable

from ..._errors import DeviceError, ExecutionError
from ...runtime import current_launch

__all__ = ["StreamHandle", "StreamResources", "LaunchResources", "prepare_streams",
           "stream_resources"]


def prepare_streams(context, prepare, *, later: bool = True) -> None:
    """``context.prepare_streams(prepare, later=later)``: see ``GpuContext.prepare_streams``."""
    context.prepare_streams(prepare, later=later)


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
        between launches (``LaunchResources`` calls it under the stream's launch lock).
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


class LaunchResources:
    """A provider's launch state on every stream of its device.

    On creation it registers with the device's streams (``queues._gpu_backend``): every
    open stream and every stream started later gets ``StreamResources`` under ``key``
    (a handle from ``make_handle(stream)``) with a workspace of the largest size reserved
    so far. Providers of one vendor on one device share the key, so a stream holds one
    handle of that vendor whichever provider prepared it.

    Parameters
    ----------
    context : GpuContext
        The device.
    key : str
        The resource key (``"cudnn"``, ``"miopen"``).
    make_handle : callable
        ``make_handle(stream)`` -> a ``StreamHandle``.
    runtime : _gpu.Runtime or object, optional
        The GPU runtime; default the context's.
    """

    def __init__(self, context, key: str, make_handle: Callable[[int], object], runtime=None):
        self.context = context
        self.key = key
        self._make_handle = make_handle
        self._rt = runtime if runtime is not None else context.runtime
        self._lock = threading.Lock()
        self._reserved = 0
        context.prepare_streams(self._prepare)

    @property
    def reserved(self) -> int:
        """The stream workspace size every stream holds (bytes)."""
        return self._reserved

    def _prepare(self, lc) -> None:
        res = lc.resources.get(self.key)
        if res is None:
            res = StreamResources(lc.stream, self._make_handle(lc.stream),
                                  pooled=self.context.pooled, runtime=self._rt)
            lc.resources[self.key] = res
        res.reserve(self._reserved)

    def reserve(self, nbytes: int) -> None:
        """Make every stream's workspace (open ones now, later ones at start) hold at
        least ``nbytes``: called at build, before the plan can be launched.

        Raises
        ------
        DeviceError
            The memory cannot be had on some stream.
        """
        with self._lock:
            if nbytes <= self._reserved:
                return
            self._reserved = int(nbytes)
            self.context.prepare_streams(self._prepare, later=False)


def stream_resources(key: str, who: str) -> StreamResources:
    """The resources under ``key`` of the stream launching on this thread (looked up,
    never created). ``who`` names the plans in messages.

    Raises
    ------
    ExecutionError
        Called off a GPU stream, or on a stream that was not prepared for ``key``.
    """
    lc = current_launch()
    if lc is None:
        raise ExecutionError(f"{who} run on a GPU stream of their device "
                             "(plan.execute / submit), not on the calling thread")
    res = lc.resources.get(key)
    if res is None:
        raise ExecutionError(f"{who}: stream {lc.stream:#x} has no {key} launch resources "
                             "(it belongs to another device, or was not prepared)")
    return res
