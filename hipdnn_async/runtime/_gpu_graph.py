"""CUDA/HIP graph capture: the work of one stream captured into a graph, one launch per
replay.

``capture_graph`` runs as one work item of a GPU stream (``GpuStreamBackend.capture``),
inside ``launch``: with the stream's launch lock held and its launch context entered, it
begins a capture on the stream (thread-local mode: the completion threads' synchronizes
go on), runs the recorded work-item functions (the plans enqueue exactly as they always
do, and plans only enqueue), ends the capture and instantiates the graph, or updates the
step's previous executable graph in place when the new one has the same shape
(``graph_exec_update``: pointers changed, no instantiation). A failure inside ends the
capture and drops the partial graph before it propagates, and so does a failed end
(``Runtime.end_capture``): the stream is not left capturing. Another thread's copy records
an event on every compute stream (``GpuContext.order_copy_stream``) under that stream's
launch lock, so it waits for the capture rather than joining it.

``GraphReplay`` is the step's replayable unit: ``launcher()`` gives the work-item function
of a replay (one graph launch on the stream, the same function for every replay);
``close()`` lets the executable graph go, which is destroyed once every replay already
submitted has launched (the runtime lets launches in flight finish).
"""
from __future__ import annotations

import functools
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

    Notes
    -----
    The work-item function of every replay is one object, ``rt.graph_launch`` bound to the
    graph and the stream (a C call: no Python frame per replay), and the executable graph
    lives exactly as long as it: its finalizer destroys the graph when the last reference
    goes. The references are this unit's, dropped by :meth:`close`; the ready step's
    (``Step._armed``, dropped by ``step.close()`` and when a recapture begins); and one
    per submitted replay, dropped by its work item once it has launched
    (``Completion._enqueue``) or when it is never enqueued (``_drop``). So ``close``
    never destroys a graph that a submitted replay will still launch, without a count or
    a lock per replay.
    """

    __slots__ = ("_rt", "_exec", "_stream", "_launch", "updates")

    def __init__(self, rt, graph_exec: int, stream: int):
        self._rt = rt
        self._exec = graph_exec
        self._stream = stream
        self.updates = 0         # in-place updates by recaptures
        self._launch = launch = functools.partial(rt.graph_launch, graph_exec, stream)
        # not at interpreter exit: the runtime may be gone by then
        weakref.finalize(launch, _destroy_exec, rt, graph_exec).atexit = False

    def launcher(self):
        """The work-item function of a replay (the same for every replay).

        Raises
        ------
        DeviceError
            The unit is closed.
        """
        launch = self._launch
        if launch is None:
            raise DeviceError("replay of a closed capture step", code="INVALID_VALUE")
        return launch

    def update(self, graph: int) -> bool:
        """Take ``graph``'s parameters into the executable graph in place (called by the
        capture item, between launches on the stream); False when it cannot (closed, or
        the graph's shape differs)."""
        launch = self._launch     # held: a close meanwhile cannot destroy it under us
        if launch is None:
            return False
        ok = self._rt.graph_exec_update(self._exec, graph)
        if ok:
            self.updates += 1
        return ok

    def close(self) -> None:
        """Let the executable graph go: destroyed now, or once the last replay submitted
        before has launched; idempotent."""
        self._launch = None

    def __repr__(self) -> str:
        state = "closed" if self._launch is None else "open"
        return f"<GraphReplay exec={self._exec:#x} stream={self._stream:#x} {state}>"


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
        capture invalidated it; ``Runtime.end_capture`` leaves the stream not capturing)
        or from instantiating the graph.
    """
    rt.stream_begin_capture(stream)
    try:
        for fn in fns:
            fn()
    except BaseException:
        try:
            rt.graph_destroy(rt.end_capture(stream))
        except GpuError:
            pass  # the function's error is the one to raise; the stream is ended either way
        if previous is not None:
            previous.close()
        raise
    try:
        # end_capture: a failed end leaves the stream not capturing, so the stream's
        # later work runs rather than being captured (or refused)
        graph = rt.end_capture(stream)
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
