"""The build stream of a GPU provider: heuristics queries, benchmarks and trial runs.

Every GPU plan runs once at build on zero-filled scratch buffers, on a stream and vendor
handle of its own: vendor libraries list algorithms (or modes) that their execution then
refuses for our layout or math type, and a refusal at build lets the provider pick the
next one instead of failing the user's first execution.

Benchmarks time candidates here too (:meth:`BuildStream.time_runs`): on the build stream
(the stream the build handle is bound to), after warm-up runs that absorb the first
call's one-time costs (NVRTC compile, lazy module load, plan-internal setup), and the
median of several timed samples, so that one host stall or clock change does not decide
the choice. Each sample is one launch of a CUDA/HIP graph of ``GRAPH_REPEATS`` captured
executions between two timing events, divided by ``GRAPH_REPEATS``: the executions then
run back to back on the device, so a kernel shorter than its host-side launch (~5-10 µs
for a cuDNN execute) is timed by its device time, not by the launch's. Events around each
direct launch timed the launch instead, and a 11 µs config measured 30 µs and lost to an
18 µs one (H200, fp16 1x1 dgrad at batch 16). Where the launch cannot be captured (or
the runtime has no graphs) each direct execution is timed between two events.

A benchmark compares candidates timed the same way (:func:`medians_alike`): where one
candidate's executions cannot be captured, the others are timed again by direct launches,
since a direct launch's time includes host launch gaps that a graph's does not.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from statistics import median
from typing import Callable

from ..._types import numpy_dtype
from ...runtime._gpu_graph import capture_graph
from ...runtime import GpuArray, LaunchContext
from ._launch import StreamResources

log = logging.getLogger("hipdnn_async")

__all__ = ["BuildStream", "Samples", "medians_alike", "WARMUP_RUNS", "TIMED_RUNS"]

WARMUP_RUNS = 3     # untimed runs first (the first one may compile or load modules)
TIMED_RUNS = 7      # timed samples; their median is the candidate's time
GRAPH_REPEATS = 8   # executions captured into the graph one sample launches


class Samples(list):
    """Timed samples in milliseconds per execution (a ``list``), and how they were
    taken: ``captured`` True for launches of a captured graph, False for direct launches
    each between two events."""

    def __init__(self, values=(), captured: bool = False):
        super().__init__(values)
        self.captured = bool(captured)


def medians_alike(timers, *, refused: Callable[[BaseException], bool] = lambda exc: False
                  ) -> tuple[list, dict]:
    """The median milliseconds of each candidate of a benchmark, all timed one way.

    Parameters
    ----------
    timers : sequence of callable
        ``timers[i](capture) -> Samples``: times candidate ``i`` (``capture`` False:
        direct launches only).
    refused : callable, optional
        ``refused(exc)`` is True for an exception that means the vendor refuses that
        candidate; any other exception propagates.

    Returns
    -------
    medians : list of float or None
        One entry per timer, in order; None for a refused candidate. Where some
        candidates were timed as captured graphs and others by direct launches (their
        capture failed), the captured ones are timed again by direct launches, so that
        launch gaps count for all or for none.
    refusals : dict
        Index -> the exception of each refused candidate.
    """
    refusals = {}

    def run(i, capture):
        try:
            return timers[i](capture)
        except Exception as exc:  # noqa: BLE001 - refused() decides; the rest propagates
            if not refused(exc):
                raise
            log.info("build stream: candidate %d refused while timed (%s)", i, exc)
            refusals[i] = exc
            return None
    samples = [run(i, True) for i in range(len(timers))]
    ways = {s.captured for s in samples if s is not None}
    if len(ways) > 1:
        log.info("build stream: %d of %d candidates could not be captured; timing all by "
                 "direct launches", sum(not s.captured for s in samples if s is not None),
                 len(samples))
        samples = [run(i, False) if s is not None and s.captured else s
                   for i, s in enumerate(samples)]
    return [None if s is None else median(s) for s in samples], refusals


class BuildStream:
    """The stream and vendor handle a provider builds on (one thread at a time).

    Parameters
    ----------
    context : GpuContext
        The device.
    spec : str
        The device spec (``"cuda:0"``), for the arrays' messages.
    key : str
        The provider's launch-resource key (``"cudnn"``): a trial run finds the build
        stream's resources (handle, workspace) under it, as a launch finds a stream's.
    make_handle : callable
        ``make_handle(stream) -> resource`` with ``.ptr`` and ``.close()`` (a
        ``StreamHandle``).
    runtime : _gpu.Runtime or object, optional
        The GPU runtime (``stream_create``, ``stream_synchronize``, ``memset_async``);
        default the context's.

    Attributes
    ----------
    lock : threading.Lock
        Held by whoever uses the build handle or stream.
    """

    def __init__(self, context, spec: str, key: str, make_handle: Callable[[int], object],
                 runtime=None):
        self.context = context
        self.spec = spec
        self.key = key
        self.lock = threading.Lock()
        self._make_handle = make_handle
        self._rt = runtime if runtime is not None else context.runtime
        self.stream = 0
        self._res: StreamResources | None = None

    def _resources(self) -> StreamResources:
        if self._res is None:
            with self.context.using():   # the stream and handle belong to this device
                self.stream = self._rt.stream_create()
                self._res = StreamResources(self.stream, self._make_handle(self.stream),
                                            pooled=self.context.pooled, runtime=self._rt)
        return self._res

    def handle(self) -> int:
        """The build handle, created on first use (caller holds :attr:`lock`)."""
        return self._resources().handle

    def synchronize(self) -> None:
        """Wait for the build stream (caller holds :attr:`lock`)."""
        if self.stream:
            self._rt.stream_synchronize(self.stream)

    def scratch(self, tensor) -> GpuArray:
        """A zero-filled device array of ``tensor``'s dims, strides and dtype."""
        arr = GpuArray(tuple(tensor.dims), numpy_dtype(tensor.data_type), tuple(tensor.strides),
                       self.context, self.spec)
        if arr.nbytes:
            with self.context.using():
                self._rt.memset_async(arr.ptr, 0, arr.nbytes, self.context.copy_stream)
                self._rt.stream_synchronize(self.context.copy_stream)
        return arr

    def scratch_pack(self, match) -> dict:
        """Zero-filled scratch buffers for every non-virtual tensor of the pattern."""
        return {r: self.scratch(t) for r, t in match.tensors.items() if not t.is_virtual}

    @contextlib.contextmanager
    def _launching(self, plan):
        """Inside, ``plan.run`` runs on the build stream as it will on a compute stream:
        in a launch context whose resources (handle, a workspace of the plan's size) were
        prepared beforehand. The caller holds :attr:`lock` and the device is current."""
        res = self._resources()
        res.reserve(plan.workspace_size)
        lc = LaunchContext(self.stream, self.context)
        lc.resources[self.key] = res
        lc.enter()
        try:
            yield
        finally:
            lc.exit()
            lc.resources.clear()   # the build stream keeps its resources

    def trial(self, match, plan, bufs: dict | None = None) -> None:
        """Run ``plan`` once on the build stream, on ``bufs`` (default: fresh scratch), and
        wait for it: a vendor error raises here."""
        bufs = self.scratch_pack(match) if bufs is None else bufs
        with self.lock, self.context.using():
            try:
                with self._launching(plan):
                    plan.run({r: a.ptr for r, a in bufs.items()}, None)
            finally:
                self._rt.stream_synchronize(self.stream)

    def time_plan(self, plan, bufs: dict, *, capture: bool = True) -> Samples:
        """Milliseconds of one ``plan.run`` on ``bufs`` (role -> GpuArray) on the build
        stream (:meth:`time_runs`: warm-up runs, then timed samples).

        Raises
        ------
        GpuError, or the vendor's error type
            A run or the runtime failed.
        """
        ptrs = {r: a.ptr for r, a in bufs.items()}
        with self.lock, self.context.using(), self._launching(plan):
            return self.time_runs(lambda: plan.run(ptrs, None), capture=capture)

    def time_runs(self, launch: Callable[[], None], *, warmup: int = WARMUP_RUNS,
                  runs: int = TIMED_RUNS, capture: bool = True) -> Samples:
        """Milliseconds of one execution of ``launch()`` on the build stream, ``runs``
        samples (see the module docstring).

        ``launch()`` enqueues one execution on the build stream (through the build
        handle, which is bound to it). ``warmup`` untimed executions run first and are
        waited for; then ``GRAPH_REPEATS`` executions are captured into a graph, launched
        once untimed (its upload to the device) and each sample is one launch of it
        between two timing events, divided by ``GRAPH_REPEATS``. Where the capture fails,
        or ``capture`` is False, each timed execution is enqueued between two events
        instead (``Samples.captured`` says which). The last event is waited for before any
        elapsed time is read, and where a launch (or anything) raises, the build stream is
        waited for before the error propagates, as in :meth:`trial`: nothing enqueued here
        still runs on the caller's buffers and workspace once it frees them. The caller
        holds :attr:`lock`.

        Raises
        ------
        ValueError
            ``runs`` < 1.
        GpuError, CudnnError
            A launch or the runtime failed.
        """
        if runs < 1:
            raise ValueError(f"time_runs: runs must be >= 1; got {runs}")
        self._resources()
        try:
            return self._samples(launch, warmup, runs, capture)
        except BaseException:
            try:
                self._rt.stream_synchronize(self.stream)   # the executions enqueued before it
            except Exception:  # noqa: BLE001 - the launch's error is the one to raise
                pass
            raise

    def _samples(self, launch, warmup: int, runs: int, capture: bool) -> Samples:
        """:meth:`time_runs` without its wait on failure: warm-up, then graph or direct
        samples."""
        rt = self._rt
        for _ in range(max(warmup, 0)):
            launch()
        rt.stream_synchronize(self.stream)
        replay = self._capture(launch) if capture else None
        if replay is None:
            return Samples(self._event_times(launch, runs), captured=False)
        try:
            graph_launch = replay.launcher()
            graph_launch()                      # untimed: the first launch uploads the graph
            rt.stream_synchronize(self.stream)
            return Samples((ms / GRAPH_REPEATS for ms in self._event_times(graph_launch, runs)),
                           captured=True)
        finally:
            replay.close()     # the executable graph goes with its launcher

    def _capture(self, launch):
        """A ``GraphReplay`` of ``GRAPH_REPEATS`` calls of ``launch()`` captured from the
        build stream (``runtime._gpu_graph.capture_graph``, which ends and drops a failed
        capture), or None where the runtime or the launch cannot be captured; the
        runtime's last error is then cleared."""
        try:
            return capture_graph(self._rt, self.stream, (launch,) * GRAPH_REPEATS, None)
        except Exception as exc:  # noqa: BLE001 - the direct timing raises what is real
            log.debug("build stream: timing direct launches, no capture (%s)", exc)
            clear = getattr(self._rt, "clear_last_error", None)
            if clear is not None:
                clear()
            return None

    def _event_times(self, launch, runs: int) -> list[float]:
        """Milliseconds of each of ``runs`` calls of ``launch()``, each enqueued between
        two timing events on the build stream."""
        rt = self._rt
        events = []
        try:
            for _ in range(runs):
                start = rt.event_create(0)                              # 0: timing on
                try:
                    events.append((start, rt.event_create(0)))
                except BaseException:
                    rt.event_destroy(start)      # its pair could not be made
                    raise
            for start, end in events:
                rt.event_record(start, self.stream)
                launch()
                rt.event_record(end, self.stream)
            rt.event_synchronize(events[-1][1])
            return [float(rt.event_elapsed_time(start, end)) for start, end in events]
        finally:
            for pair in events:
                for ev in pair:
                    rt.event_destroy(ev)
