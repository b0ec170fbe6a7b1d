"""Per-stream launch resources of a GPU provider, prepared before any launch.

What a plan's ``run`` needs on its stream (the provider's vendor handle bound to that
stream, and a workspace large enough for every plan built so far) is created when the
stream starts and grown when a plan is built, before the plan can first be launched:
``run`` then only enqueues work. It allocates, frees, synchronises and creates nothing, so
the first execution pays no setup and the work a stream enqueues could be captured into a
CUDA/HIP graph.

- ``LaunchResources``: a provider's view of all its device's streams: ``reserve(nbytes)``
  at build grows every open stream's workspace now and every later stream's at its start.
- ``StreamHandle``, ``StreamResources`` (one stream's handle and workspace, in
  ``LaunchContext.resources`` under the provider's key; closed with the stream) and
  ``stream_resources(key, who)`` (the lookup a plan's ``run`` makes) are the runtime's
  (``runtime._stream_resources``), where a bound C launch reads them too.
"""
from __future__ import annotations

import threading
from typing import Callable

from ...runtime._stream_resources import StreamHandle, StreamResources, stream_resources

__all__ = ["StreamHandle", "StreamResources", "LaunchResources", "prepare_streams",
           "stream_resources"]


def prepare_streams(context, prepare, *, later: bool = True) -> None:
    """``context.prepare_streams(prepare, later=later)``: see ``GpuContext.prepare_streams``."""
    context.prepare_streams(prepare, later=later)


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
