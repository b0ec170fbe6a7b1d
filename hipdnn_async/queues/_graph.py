"""GPU capture steps: the work of one stream captured into a CUDA/HIP graph, one launch per
replay.

``capture_graph`` runs as one work item of a GPU stream (``GpuStreamBackend.capture``),
inside ``launch``: with the stream's launch lock held and its launch context entered, it
begins a capture on the stream (thread-local mode: the completion threads' synchronizes
go on), runs the recorded work-item functions (the plans enqueue exactly as they always
do, and plans only enqueue), ends the capture and instantiates the graph, or updates the
step's previous executable graph in place when the new one has the same shape
(``graph_exec_update``: pointers changed, no instantiation). A failure inside ends the
capture and drops the partial graph before it propagates.

``GraphReplay`` is the step's replayable unit: ``launcher()`` gives one replay's work-item
function (a graph launch on the stream); ``close()`` destroys the executable graph once
every replay already submitted has launched (the runtime lets launches in flight finish).
"""
from __future__ import annotations

import threading
import weakref

from .._errors import DeviceError, GpuError

__all__ = ["GraphReplay", "capture_graph"]


def _destroy_exec(rt, graph_exec: int) -> None:
    try:
        rt.graph_exec_destroy(graph_exec)
    except GpuError:
        pass  # a broken context: nothing left to release


class GraphReplay:
    """An executable graph captured from ``stream``; each replay is one graph launch.

    Parameters
    ----------
    rt : Runtime
        The loaded GPU runtime.
    graph_exec : int
        The executable graph (owned from now on).
    stream : int
        The stream it was captured from and is launched on.
    """

    def __init__(self, rt, graph_exec: int, stream: int):
        self._rt = rt
        self._exec = graph_exec
        self._stream = stream
        self._lock = threading.Lock()
        self._pending = 0        # replays submitted and not yet launched (or dropped)
        self._closed = False
        self.updates = 0         # in-place updates by recaptures
        self._finalizer = weakref.finalize(self, _destroy_exec, rt, graph_exec)
        self._finalizer.atexit = False   # the runtime may be gone at interpreter exit

    def launcher(self) -> "_Launch":
        """The work-item function of one replay.

        Raises
        ------
        DeviceError
            The unit is closed.
        """
        with self._lock:
            if self._closed:
                raise DeviceError("replay of a closed capture step", code="INVALID_VALUE")
            self._pending += 1
        return _Launch(self)

    def _launch(self) -> None:
        self._rt.graph_launch(self._exec, self._stream)

    def _release(self) -> None:
        """One replay's function is done with (launched, failed or never run)."""
        with self._lock:
            self._pending -= 1
            destroy = self._closed and not self._pending
        if destroy:
            self._finalizer()

    def update(self, graph: int) -> bool:
        """Take ``graph``'s parameters into the executable graph in place (called by the
        capture item, between launches on the stream); False when it cannot (closed, or
        the graph's shape differs)."""
        with self._lock:
            if self._closed:
                return False
        ok = self._rt.graph_exec_update(self._exec, graph)
        if ok:
            self.updates += 1
        return ok

    def close(self) -> None:
        """Destroy the executable graph once every submitted replay has launched;
        idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            destroy = not self._pending
        if destroy:
            self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._pending} pending"
        return f"<GraphReplay exec={self._exec:#x} stream={self._stream:#x} {state}>"


class _Launch:
    """One replay's work-item function; releases its hold on the graph when dropped
    (after it ran, or when the item was never run), so ``close`` never destroys a graph
    that a submitted replay will still launch."""

    __slots__ = ("_replay",)

    def __init__(self, replay: GraphReplay):
        self._replay = replay

    def __call__(self) -> None:
        self._replay._launch()

    def __del__(self):
        replay, self._replay = self._replay, None
        if replay is not None:
            replay._release()


def capture_graph(rt, stream: int, fns: tuple, previous: GraphReplay | None) -> GraphReplay:
    """Capture ``fns`` (run in order) from ``stream`` into an executable graph: the
    work-item function of a capture step, run inside the stream's ``launch``.

    Returns
    -------
    GraphReplay
        ``previous`` updated in place where it could be, else a new one (``previous`` is
        then closed).

    Raises
    ------
    Exception
        Whatever a recorded function raised (the capture is ended and dropped first), or
        the runtime's error from ending the capture (e.g. a call not allowed during
        capture invalidated it) or from instantiating the graph.
    """
    rt.stream_begin_capture(stream)
    try:
        for fn in fns:
            fn()
    except BaseException:
        try:
            partial = rt.stream_end_capture(stream)
        except GpuError:
            partial = 0
        if partial:
            rt.graph_destroy(partial)
        if previous is not None:
            previous.close()
        raise
    try:
        graph = rt.stream_end_capture(stream)
    except BaseException:
        if previous is not None:
            previous.close()
        raise
    try:
        if previous is not None:
            if previous.update(graph):
                return previous
            previous.close()
        return GraphReplay(rt, rt.graph_instantiate(graph), stream)
    finally:
        rt.graph_destroy(graph)
