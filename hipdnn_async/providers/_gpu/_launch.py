"""Per-stream launch resources of a GPU provider: its vendor handle bound to the stream,
and the stream's workspace.

A plan's ``run`` executes on the launching thread of a GPU stream, inside the stream's
``LaunchContext`` (``runtime.current_launch()``); it finds the provider's resources there
under the provider's key.
"""
from __future__ import annotations

from typing import Callable

from ..._errors import ExecutionError
from ...runtime import current_launch

__all__ = ["StreamHandle", "launch_resource", "stream_workspace"]


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


def launch_resource(key: str, make: Callable[[int], object], who: str):
    """(launch context, resource ``key`` of its stream); ``make(stream)`` creates it the
    first time. ExecutionError off a GPU stream (``who`` names the plans in the message)."""
    lc = current_launch()
    if lc is None:
        raise ExecutionError(f"{who} run on a GPU stream of their device "
                             "(plan.execute / submit), not on the calling thread")
    res = lc.resources.get(key)
    if res is None:
        res = lc.resources[key] = make(lc.stream)
    return lc, res


def stream_workspace(lc, given, nbytes: int) -> int:
    """The workspace pointer of one execution: ``given`` (already checked by the binder),
    else the stream's own; 0 when none is needed."""
    if not nbytes:
        return 0
    return given if given is not None else lc.workspace(nbytes)
