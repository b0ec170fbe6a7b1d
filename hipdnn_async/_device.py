"""Devices and execution plans: the public face over patterns, providers and queues."""
from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
import time
import weakref
from collections import defaultdict
from typing import TYPE_CHECKING, Mapping

import anyio
import anyio.lowlevel
import numpy as np

from . import _capture, _fork, _memory, _perfdb
from . import _variant_pack as _vp
from .runtime._binding import BindingCache
from ._errors import DeviceError, GraphError, VariantPackError
from ._provider_plans import ProviderPlanCache, counts as _plan_counts
from ._types import numpy_dtype
from .graph import Graph, TensorAttributes
from .runtime._buffer import element_extent
from .runtime import KINDS, ExecCounter
from .patterns import conv_roles, match as match_pattern, spec_for
from .profiler import _state as _prof
from .providers._base import Engine, run_launcher
from .providers._registry import available_devices, parse_spec, provider_for
from .queues import Completion, StreamPool
from .queues._core import ExecTimer, PlanLaunch, run_host
from .queues._pool import INLINE_MAX_S
from .queues._pool import MAX_INFLIGHT, MAX_STREAMS

if TYPE_CHECKING:
    from .profiler import Profile

__all__ = ["Device", "ExecutionPlan", "devices", "engines", "stats"]

log = logging.getLogger("hipdnn_async")

# Provider plans kept per device for reuse by graphs of the same signature (oldest
# dropped first): a long-lived device that builds many shapes (a server, a fuzzer)
# must not grow without bound. Plans already built keep their provider plan.
PLAN_CACHE_SIZE = 256


_LOCK_TYPE = type(threading.Lock())


def stats() -> dict:
    """Process-wide counters: plans built, plan-cache hits, perf-db hits/misses/stores,
    benchmarks run. Cheap; always on.

    Returns
    -------
    dict of str to int
        ``plans_built``, ``plan_cache_hits``, ``perfdb_hits``, ``perfdb_misses``,
        ``perfdb_stores``, ``benchmarks_run``, ``perfdb_warnings``: counts since the
        process started (a copy; later work does not change it).
    """
    out = _plan_counts()
    out.update(_perfdb.stats())
    return out


def devices() -> list[str]:
    """Device specs present on this machine, ``"cpu"`` first (e.g. ``["cpu", "cuda:0"]``).

    Returns
    -------
    list of str
        Each a spec ``Device`` takes. A GPU is listed only where its runtime, a device
        and its DNN library are all found; nothing is raised for a missing one.
    """
    return available_devices()


def engines(graph: Graph, device) -> list[Engine]:
    """Engines of ``device`` (a Device or a spec string) able to run ``graph``, best first.

    This is the order ``Device.build`` tries them in (and ``get_ranked_engine_ids``'s);
    an engine that cannot take the graph at all is left out.

    Parameters
    ----------
    graph : Graph
        Validated here (uids are assigned).
    device : Device or str
        A device, or a spec as ``Device`` takes (no device is opened for it).

    Returns
    -------
    list of Engine
        Non-empty; each with the knobs it offers for this graph.

    Raises
    ------
    GraphError
        The graph is invalid.
    NotSupportedError
        The graph matches none of the nine patterns, or no engine of the device takes it
        (a ``DeclinedError`` giving each engine's reason).
    DeviceError
        An unknown spec, or the runtime for it is absent.
    """
    provider = device.provider if isinstance(device, Device) else provider_for(*parse_spec(device))
    with _on_device(provider):
        return provider.engines(match_pattern(graph))


def _on_device(provider):
    """``with _on_device(provider):`` the provider's GPU is current on this thread (the
    thread's own device restored after): building asks the vendor library on that device.
    Nothing for the host (no device context)."""
    context = provider.context
    return context.using() if context is not None else contextlib.nullcontext()


class Device:
    """A compute device with its stream queues: ``"cpu"``, ``"gpu:N"``, ``"cuda:N"``, ``"hip:N"``.

    Parameters
    ----------
    spec : str
        Device spec; ``"gpu:N"`` picks whichever GPU runtime is present.
    streams : int, optional
        Number of streams (CPU: worker threads), 1 to 256 (``queues.MAX_STREAMS``).
        Default ``min(4, os.cpu_count())``, at least 2.
    max_inflight : int, optional
        Executions submitted and not completed per stream before ``enqueue`` /
        ``execute`` wait (backpressure; ``submit`` parks them host-side instead), 1 to
        ``sys.maxsize``. Default 64.
    perfdb : PerfDb or str or os.PathLike or None
        Perf db for benchmarking results (a path is opened as ``PerfDb(path)``); default
        ``$HIPDNN_ASYNC_PERFDB`` or ``~/.config/hipdnn_async/perfdb.sqlite3``.
    deterministic : bool, optional
        Ask every engine for bitwise-reproducible results: the default of each offered
        knob named ``<engine>.deterministic`` becomes 1 (a value set in ``knobs=`` still
        wins). Default False: the fastest algorithm within the tolerance table.
    allow_tf32 : bool, optional
        Let FLOAT convolutions use TF32 tensor cores (outside the FLOAT tolerance table):
        the default of each offered ``<engine>.allow_tf32`` knob becomes 1. Default
        False (strict FP32).

    Raises
    ------
    DeviceError
        Unknown spec, or the runtime for it is absent; ``streams`` or ``max_inflight``
        not an int in range, ``deterministic`` or ``allow_tf32`` not a bool, ``perfdb``
        of another type (code ``INVALID_VALUE``); the stream threads cannot start.
    PerfDbError
        ``perfdb`` is an empty path or holds a NUL (a file that cannot be used is not
        an error: the db falls back to memory, with a warning).

    Notes
    -----
    Use as ``async with hd.Device("cpu") as dev:`` (leaving drains in-flight work), or
    ``with`` / ``close()`` from code without an event loop.

    A Device is entered once: a second ``with`` or ``async with`` on it while the first
    is open (nested, or from another task or thread) raises a ``DeviceError``, since
    leaving it would drain and close the device under the code of the outer one; pass
    the open device along instead. Entering a closed device is a ``DeviceError`` too.
    """

    def __init__(self, spec: str = "cpu", *, streams: int | None = None,
                 max_inflight: int | None = None, perfdb=None, deterministic: bool = False,
                 allow_tf32: bool = False):
        for what, value in (("deterministic", deterministic), ("allow_tf32", allow_tf32)):
            if not isinstance(value, bool):
                raise DeviceError(f"Device('{spec}'): {what} = {value!r}; need True or False",
                                  code="INVALID_VALUE")
        self.provider = provider_for(*parse_spec(spec))
        self.spec = self.provider.spec     # "gpu:N" resolves to the kind serving it ("cuda:N")
        self._kind = KINDS[self.spec.partition(":")[0]]
        if isinstance(perfdb, (str, bytes, os.PathLike)):
            perfdb = _perfdb.PerfDb(perfdb)
        elif perfdb is not None and not isinstance(perfdb, _perfdb.PerfDb):
            raise DeviceError(f"Device('{spec}'): perfdb must be a PerfDb, a path or None; got "
                              f"{type(perfdb).__name__}", code="INVALID_VALUE")
        self._perfdb = perfdb                     # None: the default perf db at each build
        for what, value in (("streams", streams), ("max_inflight", max_inflight)):
            if value is not None and (type(value) is not int or value < 1):
                raise DeviceError(f"Device('{spec}'): {what} = {value!r}; need an int >= 1",
                                  code="INVALID_VALUE")
        if streams is not None and streams > MAX_STREAMS:
            raise DeviceError(f"Device('{spec}'): streams = {streams}; at most {MAX_STREAMS} "
                              "streams per device (each is a worker thread or a GPU stream; "
                              f"this machine has {os.cpu_count()} cores)", code="INVALID_VALUE")
        if max_inflight is not None and max_inflight > MAX_INFLIGHT:
            raise DeviceError(f"Device('{spec}'): max_inflight = {max_inflight}; at most "
                              f"{MAX_INFLIGHT} (sys.maxsize, the submission core's counter)",
                              code="INVALID_VALUE")
        try:
            self._pool = StreamPool(self.spec, n_streams=streams, max_inflight=max_inflight,
                                    backend_factory=_backend_factory(self.provider))
        except RuntimeError as exc:  # e.g. "can't start new thread"
            raise DeviceError(f"Device('{spec}'): cannot start {streams} streams: {exc}") from None
        # Timings of concurrent tunings would skew each other: one lock per GPU (two
        # Devices on one GPU share it), per Device on the host.
        lock = getattr(self.provider.context, "tune_lock", None)
        self._tune_lock = lock if isinstance(lock, _LOCK_TYPE) else threading.Lock()
        # knob-id suffix -> default 1 (device-wide numerics options; see the docstring)
        defaults = tuple(suffix for suffix, on in (
            (".deterministic", deterministic), (".allow_tf32", allow_tf32)) if on)
        self._plan_cache = ProviderPlanCache(self.provider, self.spec, perfdb=perfdb,
                                             knob_defaults=defaults,
                                             tune_lock=self._tune_lock)
        self._stats_lock = threading.Lock()
        self._plans = weakref.WeakSet()          # built here: close() drops their bindings
        self._plans_lock = threading.Lock()      # a build may add one while close() reads
        # unheld in a fork child: a parent thread counting or building at the fork is gone
        # (not _tune_lock: this device builds nothing there, and a new one has its own)
        _fork.reinit_attrs_in_child(self, "_stats_lock", "_plans_lock")
        self._entered = False                     # by `with` / `async with`: see Notes
        # per pattern: plans built, build ms, and the executions' counter (a C launch bumps
        # it itself: no Python call per execution)
        self._plan_stats = defaultdict(lambda: {"plans": 0, "build_ms": 0.0,
                                                "counter": ExecCounter()})

    # -- lifetime ------------------------------------------------------------------------
    async def __aenter__(self) -> "Device":
        self._enter("async with")
        return self

    def _enter(self, where: str) -> None:
        self._check_open(where)
        with self._stats_lock:
            if self._entered:
                raise DeviceError(f"{where}: device '{self.spec}' is already entered (a "
                                  "`with` or `async with` on it is still open; leaving a "
                                  "second one would close the device under the first); "
                                  "use the open device", code="INVALID_VALUE")
            self._entered = True

    def _check_open(self, where: str) -> None:
        if self._pool.closed:
            reason = self._pool.fork_reason() or "is closed; open a new Device"
            raise DeviceError(f"{where}: device '{self.spec}' {reason}", code="INVALID_VALUE")

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    def __enter__(self) -> "Device":
        self._enter("with")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def aclose(self) -> None:
        """Drain in-flight work, then stop the streams and free the memory the provider
        keeps for reuse (on the CPU, the pool of host workspaces) and the plans' cached
        bindings (on the CPU, references to the arrays of their last packs). Idempotent."""
        await self._pool.aclose()
        self._release()

    def close(self) -> None:
        """Blocking ``aclose`` for code without an event loop. Idempotent."""
        self._pool.close()
        self._release()

    def _release(self) -> None:
        """Free what the device keeps for reuse once nothing can run: the provider's
        (host workspaces) and its plans' cached bindings (on the CPU they keep the
        user's arrays alive)."""
        with self._plans_lock:        # unheld in a fork child too (_fork)
            plans = list(self._plans)
        for plan in plans:
            plan._bindings.clear()
        self.provider.release_idle()

    def __repr__(self) -> str:
        return f"Device({self.spec!r}, streams={len(self._pool.streams)})"

    @property
    def closed(self) -> bool:
        """True once ``close()`` or ``aclose()`` ran: the device builds and runs nothing
        more (a ``DynamicBatcher`` takes it out of its dispatch)."""
        return self._pool.closed

    @property
    def is_host(self) -> bool:
        """True for the CPU device, whose arrays are host memory (NumPy arrays bind
        directly); False for a GPU device (stage with ``await dev.asarray(...)``)."""
        return self._kind.is_host

    # -- queues --------------------------------------------------------------------------
    @property
    def streams(self):
        """The device's streams (ordered; ``stream=`` takes one of these or its index)."""
        return self._pool.streams

    def _stream(self, stream, where: str = "execute"):
        """The Stream for a ``stream=`` argument of ``where`` (None: let the queue choose)."""
        if stream is None:
            return None
        try:
            return self._pool.pick(stream)
        except ValueError as exc:
            raise DeviceError(f"{where}: {exc}", code="INVALID_VALUE") from None

    async def synchronize(self) -> None:
        """Wait until all work submitted so far on every stream has finished.

        Errors of that work are not raised here (each handle keeps its own); returns at
        once on a closed device.
        """
        await self._pool.synchronize()

    def metrics(self) -> dict:
        """Queue metrics per device and stream: submitted, completed, failed, in flight,
        queue-wait and execution-time percentiles (ms).

        Returns
        -------
        dict
            ``device``, ``n_streams``, ``max_inflight``, ``closed``, ``submitted``,
            ``completed``, ``failed``, ``in_flight``, ``queue_wait_ms`` and ``exec_ms``
            (``count``, ``mean``, ``min``, ``max``, ``p50``, ``p90``, ``p99`` in ms and
            ``buckets`` as (upper edge ms, count)), and ``streams``: the same per stream.
        """
        return self._pool.metrics()

    def plan_stats(self) -> dict:
        """Per pattern: plans built, build time (ms), executions, execution time (ms).

        Execution time is host time in the plan's ``run``: the whole computation on the
        CPU, only the enqueueing on a GPU (GPU time is in ``metrics()``' ``exec_ms``, from
        launch to the completion event).

        Returns
        -------
        dict of str to dict
            Pattern name (e.g. ``"CONV_FPROP"``) -> ``plans`` (int), ``build_ms``
            (float, ms), ``executions`` (int), ``exec_ms`` (float, ms); totals since the
            device was made.
        """
        with self._stats_lock:
            return {k: {"plans": s["plans"], "build_ms": s["build_ms"],
                        "executions": s["counter"].executions, "exec_ms": s["counter"].exec_ms}
                    for k, s in self._plan_stats.items()}

    def _exec_counter(self, pattern: str) -> ExecCounter:
        with self._stats_lock:
            return self._plan_stats[pattern]["counter"]

    def profile(self) -> "Profile":
        """A profile of this device: ``with dev.profile() as prof:`` (or ``async with``)
        records its executions, batches and builds (``hd.profile(*devices)`` for several).

        Returns
        -------
        hipdnn_async.profiler.Profile
            See there: ``export_chrome_trace``, ``table``, ``key_averages``, ``overlap``.
        """
        from .profiler import Profile
        return Profile((self,))

    def capture(self, stream=None) -> "_capture.Step":
        """Record plan executions on one stream, to replay them as one launch.

        ::

            async with dev.capture() as step:    # records, runs nothing
                plan_a.submit(vp_a)
                plan_b.submit(vp_b)
            await step.replay()                  # one launch of all that was recorded
            step.close()

        Parameters
        ----------
        stream : Stream or int, optional
            The stream to record and replay on; default the least loaded when the block
            is entered.

        Returns
        -------
        Step
            Made at once, not yet recording; errors of the stream, of a closed device or
            of a capture already open come when the block is entered (``DeviceError``).
            Use as ``async with`` / ``with``; then ``await step.replay()``,
            ``step.replay_sync()``, ``step.submit()`` (the handle at once),
            ``step.recapture()`` (record again: new buffers) and ``step.close()``.

        Notes
        -----
        The buffers named at capture are the ones every replay reads and writes: copy new
        inputs into them. On a GPU a step is a CUDA/HIP graph (one launch, one completion
        event per replay); on the CPU the recorded executions run in order as one work
        item. Inside the block only ``plan.submit`` / ``plan.enqueue`` of this device's
        plans record; ``execute``, ``execute_sync``, replays and other devices' plans are
        a ``DeviceError`` there (they would run now, missing from every replay), and
        awaiting a recorded handle is one too. The capture is the entering task's (or
        thread's): other tasks and threads run as usual. See ``hipdnn_async._capture``.
        """
        return _capture.Step(self, stream)

    # -- memory --------------------------------------------------------------------------
    def empty(self, dims, dtype, *, layout: str | None = None, strides=None):
        """Allocate an uninitialised device array of logical ``dims``: a ``DeviceArray``
        (host memory) on the CPU, a ``GpuArray`` (device memory, no ``.view``) on a GPU.

        Parameters
        ----------
        dims : tuple of int
            Logical dims (N, C, [D,] H, W).
        dtype : DataType or dtype or str
            FLOAT, HALF or BFLOAT16 (any spelling ``as_data_type`` takes). DOUBLE
            (float64) is accepted too, though no tensor of a graph takes it.
        layout : str, optional
            ``"NCHW" | "NHWC" | "NCDHW" | "NDHWC"``; packed strides. Default channel-first.
        strides : tuple of int, optional
            Explicit strides in elements (instead of ``layout``); each >= 1, no two
            elements at one address.

        Returns
        -------
        DeviceArray or GpuArray
            ``dims``, ``strides`` (elements), ``dtype`` (NumPy), ``nbytes``; the
            allocation spans exactly the strided extent.

        Raises
        ------
        GraphError
            A data type other than FLOAT/HALF/BFLOAT16/DOUBLE, non-integer or negative dims,
            both ``layout`` and ``strides``, an unknown layout or one of another rank,
            or strides that do not fit ``dims``.
        DeviceError
            The memory cannot be had.
        """
        out = _memory.allocate(self.provider, dims, dtype, layout, strides, "Device.empty")
        if self.is_host:
            out.order_after(self._pool)
        return out

    async def asarray(self, array, *, layout: str | None = None, strides=None):
        """Copy a NumPy array (logical shape) to a new device array (see ``empty``).

        The new array keeps the memory layout (stride order) of ``array`` unless
        ``layout`` or ``strides`` is given: an NHWC-strided view becomes an NHWC-strided
        device array (as ``torch.Tensor.to`` and CuPy's ``order="K"`` do); a non-dense
        array is packed in its own stride order. On a GPU the copy runs in a worker
        thread, ordered after work already launched on the device's streams.

        ``array`` may also be a ``GpuArray`` (of this or another GPU): the copy is
        device to device, peer to peer between two GPUs with peer access, else staged
        through pinned host memory (``GpuArray.copy_from``); onto the CPU it is
        ``await array.to_numpy()``.

        Parameters
        ----------
        array : array_like or GpuArray
            Logical dims (N, C, [D,] H, W); float32, float16 or ml_dtypes.bfloat16 (the
            dtype is kept, not cast: a float64 array gives a float64 device array, which
            no tensor takes; cast first).
        layout, strides : optional
            As ``empty``: the device array's memory order, in place of ``array``'s.

        Returns
        -------
        DeviceArray or GpuArray
            A new array of ``array``'s dims and dtype.

        Raises
        ------
        GraphError
            As ``empty`` (e.g. an integer array: the data types are FLOAT/HALF/BFLOAT16
            and DOUBLE), naming ``Device.asarray``.
        DeviceError
            The memory cannot be had.
        VariantPackError
            A masked array (the mask would be dropped), as ``plan.execute`` refuses one, a
            torch tensor with its neg bit set, or an object NumPy cannot read.
        """
        return await _memory.copy_in(array, layout, strides, provider=self.provider,
                                     host=self.is_host, pool=self._pool)

    # -- plans ---------------------------------------------------------------------------
    async def build(self, graph: Graph, *, engine=None, knobs=None) -> "ExecutionPlan":
        """Build an execution plan for ``graph`` off the event loop (it may benchmark).

        Parameters
        ----------
        graph : Graph
            A graph matching one of the nine patterns.
        engine : Engine or int or str, optional
            Engine, engine id or engine name: build with that engine only. Default: the
            engines of ``hd.engines(graph, device)`` in rank order, each that declines
            (``DECLINE_TYPES``) giving way to the next; ``plan.engine`` says which built.
        knobs : mapping or sequence of KnobSetting, optional
            e.g. ``{"global.benchmarking": 1, "global.workspace_size_limit": 1 << 20}``
            (the workspace limit in bytes). Knobs not set take their defaults;
            ``HIPDNN_ASYNC_FORCE_BENCHMARKING`` / ``HIPDNN_FORCE_BENCHMARKING`` override
            ``global.benchmarking``.

        Returns
        -------
        ExecutionPlan
            Built from a snapshot of ``graph`` taken now.

        Raises
        ------
        GraphError
            ``graph`` is not a Graph, or is invalid.
        NotSupportedError
            The graph matches none of the nine patterns; every engine declined (a
            ``DeclinedError``); ``engine`` names no engine offered for the graph.
        KnobError
            An unknown knob, a non-integer value, one outside the knob's range (e.g.
            ``global.workspace_size_limit`` below the smallest algorithm's workspace).
        DeviceError
            The device is closed.
        ExecutionError
            A trial or benchmark run failed (not a decline: raised at once).
        """
        return await anyio.to_thread.run_sync(
            functools.partial(self.build_sync, graph, engine=engine, knobs=knobs))

    def build_sync(self, graph: Graph, *, engine=None, knobs=None) -> "ExecutionPlan":
        """Blocking ``build`` for code without an event loop (same parameters, result and
        errors).

        The engines offered for the graph (``hd.engines``) are tried best first: one that
        declines (raises one of ``DECLINE_TYPES``) gives way to the next; any other error
        (a ``KnobError``, an ``ExecutionError``) is raised at once. With ``engine=`` only
        that engine is tried.

        Raises
        ------
        NotSupportedError
            Every engine declined: a ``DeclinedError`` whose message gives each engine's
            reason and whose ``declines`` holds (engine name, its own error) pairs. With
            ``engine=``, that engine's own error.
        GraphError, KnobError, DeviceError, ExecutionError
            As ``build``.
        """
        t0 = time.perf_counter()
        if self._pool.closed:
            self._check_open("build")
        if not isinstance(graph, Graph):
            raise GraphError(f"build: expected a hipdnn_async.Graph; got {type(graph).__name__}")
        # The plan (and the provider plan it may share with other graphs of the same
        # signature) reads only this snapshot: later edits of `graph` change no plan.
        snapshot, tensor_map = graph._snapshot()
        match = match_pattern(snapshot)
        with _on_device(self.provider):   # heuristics, trial runs, benchmarks: this GPU's
            chosen, settings, pplan, declined = self._plan_cache.plan(
                match, engine, knobs, graph_name=graph.name, limit=PLAN_CACHE_SIZE)
            originals = {id(tensor_map[id(t)]): t for t in graph.tensors}
            plan = ExecutionPlan(self, graph, match, chosen, settings, pplan,
                                 (time.perf_counter() - t0) * 1e3, originals=originals,
                                 declined=declined)
            with self._plans_lock:
                self._plans.add(plan)
        with self._stats_lock:
            s = self._plan_stats[plan.pattern]
            s["plans"] += 1
            s["build_ms"] += plan.build_ms
        if _prof.ON:
            _prof.built(self, plan, t0)
        log.info("built plan %s for graph '%s': engine %s, knobs %s, algorithm %s, workspace %d B, "
                 "benchmarked %s, perf db hit %s%s", plan.pattern, graph.name, chosen.name,
                 settings, plan.algorithm, plan.workspace_size, pplan.benchmarked,
                 pplan.perfdb_hit, "".join(f"; {n} declined: {why}" for n, why in declined))
        return plan


def _backend_factory(provider):
    """Stream backends for a provider's device: GPU streams where it has a GPU context."""
    context = provider.context
    if context is None:
        return None
    from .queues._gpu_backend import GpuStreamBackend
    return lambda name: GpuStreamBackend(name, context)


class ExecutionPlan:
    """A built plan: engine, knob settings, algorithm and workspace, ready to execute.

    Made by ``Device.build`` / ``build_sync`` (not constructed directly).

    Attributes
    ----------
    device : Device
        The device it was built for and runs on.
    graph : Graph
        The graph as passed to ``build`` (its keys resolve variant packs; the plan
        computes what its build-time snapshot said).
    engine : Engine
        The engine that built the plan (the first offered that did not decline, or the one
        asked for with ``engine=``).
    declined : tuple of (str, str)
        (engine name, reason) of each engine of the device that declined this graph on the
        way to ``engine``: not offered for it, or declining at build before ``engine``
        built it (e.g. ``ONEDNN_ENGINE`` where oneDNN 3.2 has only its reference
        implementation, so that ``CPU_ENGINE`` runs it). Empty where ``engine=`` named the
        engine.
    knobs : dict
        The knob settings in force (defaults filled in, environment overrides applied).
    workspace_size : int
        Bytes of workspace an execution needs (when not passed: allocated per call on a
        GPU; on the CPU taken from a pool of host blocks reused across executions).
    algorithm : str or None
        The provider's algorithm choice (None where there is nothing to choose).
    pattern : str
        Which of the nine patterns the graph is: the ``hd.Pattern`` member's name, e.g.
        ``"CONV_FPROP_BIAS_RELU"`` (``hd.Pattern[plan.pattern]`` is the member).
    build_ms : float
        Wall time of the build, in ms.
    benchmarked : bool
        Whether this build timed candidate algorithms.
    perfdb_hit : bool
        Whether this build took the algorithm from the perf db.

    Notes
    -----
    A plan is a snapshot of its graph at build (the contract: docs/contract/semantics.md).
    Editing the graph afterwards (``set_dims``, ``set_data_type``, ``set_strides``,
    ``set_name``, ``set_output``, new nodes), or editing another graph of the same
    signature, changes nothing the plan computes or accepts: it keeps running as built.
    Variant-pack keys resolve as they did at build (tensors, their uids and names then), and
    buffers are checked at submit against the build-time dims, strides and dtypes; a buffer
    that fits only the edited graph is a ``VariantPackError`` naming the edit. Build a new
    plan for the edited graph.

    Outputs own their memory: an output that overlaps any other buffer of the variant pack
    is a ``VariantPackError`` at submit (inputs may share memory). So does a workspace
    passed with ``workspace=``, which an execution writes: one that overlaps any buffer of
    the pack, input or output, is a ``VariantPackError`` naming the tensor.
    """

    def __init__(self, device: Device, graph: Graph, match, engine: Engine, knobs: dict,
                 provider_plan, build_ms: float, *, originals: dict | None = None,
                 declined: tuple = ()):
        self.device = device
        self.declined = tuple(declined)
        self.graph = graph                     # the user's graph (keys are looked up in it)
        self.match = match                     # of the build-time snapshot of `graph`
        self._snapshot = match.graph if match.graph is not None else graph
        self._by_key = {}        # a name or uid of the pack -> the snapshot's tensor
        # id(snapshot tensor) -> the user's tensor it was copied from
        self._originals = originals or {}
        self.engine = engine
        self.knobs = dict(knobs)
        self._pplan = provider_plan
        self.build_ms = build_ms
        self.pattern = match.pattern.name
        self._label = f"plan {self.pattern} (graph '{graph.name}', engine {engine.name})"
        # Binding is on the submission path: precompute tensor -> (role, is_output) slots.
        self._roles = tuple((role, t) for role, t in match.tensors.items() if not t.is_virtual)
        self._n_roles = len(self._roles)
        outputs = {id(t) for n in match.nodes for t in n.outputs.values()}
        conv = conv_roles(match.pattern)     # its filter's messages say (K, R, S, C), not N...
        self._slots: dict[int, list] = {}
        for role, t in self._roles:
            binder = device.provider.binder(t, output=id(t) in outputs,
                                            filter=conv is not None and role == conv.w)
            self._slots.setdefault(id(t), []).append((role, binder))
        # The user's tensors are keys too; they bind by the snapshot's dims, strides and
        # dtype (one rule, checked at submit), whatever was edited since.
        for sid, user_t in self._originals.items():
            if sid in self._slots:
                self._slots[id(user_t)] = self._slots[sid]
        self._snap_of = {id(u): self._snapshot_tensor(sid) for sid, u in self._originals.items()}
        # Aliasing (checked at submit, every pattern): an output's memory may not overlap
        # any other buffer of the variant pack, input or output; inputs may share memory.
        self._out_roles = tuple(role for role, t in self._roles if id(t) in outputs)
        self._extent = {role: element_extent(tuple(t.dims), tuple(t.strides))
                        * numpy_dtype(t.data_type).itemsize for role, t in self._roles}
        self._alias_pairs = tuple((o, r) for o in self._out_roles for r, _ in self._roles
                                  if r != o and self._extent[o] and self._extent[r])
        layout = {role: _vp.element_layout(t.dims, t.strides, t.data_type) for role, t in self._roles}
        # outputs the pattern lets be exactly an input's buffer (PatternSpec.in_place: a
        # running statistic updated in place), where both tensors lay elements out alike
        self._in_place = frozenset((o, r) for spec in spec_for(match.pattern)
                                   for o, r in spec.in_place
                                   if o in layout and r in layout and layout[o] == layout[r])
        self._alias_roles = tuple(r for r, _ in self._roles)
        self._alias_passed = None
        # this pattern's execution counter (made once per device and pattern, never
        # replaced): looked up once, not per binding
        self._counter = device._exec_counter(self.pattern)
        # The submit path reuses a binding while the same buffers come again.
        self._bindings = BindingCache(self._bind, self._make_fn, enabled=True,
                                      host=device.is_host,
                                      take_workspace=self._fresh_workspace)
        # Host streams: the plan's execution time, from which a submission decides whether
        # it may run on the calling thread (``StreamPool._submit_now``); None on a GPU,
        # whose launches only enqueue.
        self._timer = ExecTimer() if device.is_host else None
        self._pool = device._pool
        self._launch = PlanLaunch(Completion, self._bindings, self._pool, self._label,
                                  self._timer)

    algorithm = property(lambda self: self._pplan.algorithm,
                         doc="The provider's algorithm choice (str), or None where there is "
                             "nothing to choose.")
    workspace_size = property(lambda self: self._pplan.workspace_size,
                              doc="Workspace an execution needs, in bytes (int, >= 0).")
    benchmarked = property(lambda self: self._pplan.benchmarked,
                           doc="Whether this build timed candidate algorithms (bool).")
    perfdb_hit = property(lambda self: self._pplan.perfdb_hit,
                          doc="Whether the algorithm came from the perf db (bool).")

    def __repr__(self) -> str:
        return (f"ExecutionPlan({self.pattern}, engine={self.engine.name}, "
                f"algorithm={self.algorithm}, workspace_size={self.workspace_size})")

    # -- variant pack --------------------------------------------------------------------
    def _bind(self, variant_pack: Mapping, workspace):
        if not isinstance(variant_pack, dict) and not isinstance(variant_pack, Mapping):
            raise VariantPackError(f"execute: the variant pack must be a mapping; got "
                                   f"{type(variant_pack).__name__}")
        buffers = {}
        for key, buf in variant_pack.items():
            if type(key) is TensorAttributes:
                t = key
            else:  # uids and names as they were at build (the snapshot's never change)
                t = self._by_key.get(key) if type(key) is str or type(key) is int else None
                if t is None:
                    try:
                        t = self._snapshot.tensor_by(key)
                    except GraphError as exc:  # a name shared by several tensors
                        raise VariantPackError(f"execute: {exc}") from None
                    if t is not None and (type(key) is str or type(key) is int):
                        self._by_key[key] = t
            slots = self._slots.get(id(t))
            if slots is None:
                raise VariantPackError(_vp.unknown_key(self, key, t))
            for role, bind in slots:
                if role in buffers:
                    raise VariantPackError(f"execute: tensor '{t.name}' (uid {t.uid}) given twice")
                try:
                    buffers[role] = bind(buf)
                except VariantPackError as exc:
                    raise VariantPackError(str(exc) + _vp.edit_hint(self, role)) from None
        if len(buffers) != self._n_roles:
            role, t = next((r, t) for r, t in self._roles if r not in buffers)
            raise VariantPackError(f"execute: variant pack is missing tensor '{t.name}' "
                                   f"(uid {t.uid}, role {role}) of plan {self.pattern}")
        ws = self.device.provider.bind_workspace(self.workspace_size, workspace,
                                                 where=f"execute: plan {self.pattern}")
        # only a user-given workspace can overlap the pack (a fresh one is its own memory)
        given = workspace if ws is not None else None
        if self._out_roles or given is not None:
            self._check_aliasing(buffers, ws, given)
        return buffers, ws

    def _check_aliasing(self, buffers: dict, ws=None, given=None) -> None:
        """VariantPackError when an output buffer, or the user's workspace, overlaps another
        buffer of the pack.

        No kernel of any provider is written for in-place operation, and a partial
        overlap would be silently wrong, so the rule is simple: outputs own their memory
        (the one exception: a running statistic updated in place, ``PatternSpec.in_place``), and so
        does a workspace passed with ``workspace=`` (``ws``: as bound; ``given``:
        the user's object), which every execution may write in full. Host arrays are
        compared exactly (interleaved, disjoint views of one array are fine); device
        pointers by their byte ranges (a workspace by ``workspace_size`` bytes). The same
        buffers and workspace object as the last pack that passed (the steady state of a
        loop) are not compared again: an array's memory never changes, and a pointer is
        its value.
        """
        bound = [buffers[r] for r in self._alias_roles]
        last = self._alias_passed
        if last is not None and (last[1]() is given if last[1] is not None else given is None) \
                and all((ref() is b) if type(ref) is weakref.ref
                        else (ref == b and type(b) is int)
                        for ref, b in zip(last[0], bound)):
            return
        for out, role in self._alias_pairs:
            a, b = buffers[out], buffers[role]
            if _vp.overlap(a, self._extent[out], b, self._extent[role]):
                if (out, role) in self._in_place and _vp.same_memory(a, b):
                    continue        # a running statistic updated in place (PatternSpec.in_place)
                t, u = self.match.tensors[out], self.match.tensors[role]
                raise VariantPackError(
                    f"execute: output tensor '{t.name}' (uid {t.uid}, role {out}) shares "
                    f"memory with tensor '{u.name}' (uid {u.uid}, role {role}) of plan "
                    f"{self.pattern}; outputs may not overlap any other buffer (no "
                    "operation runs in place, except running statistics: next_running_* "
                    "may be exactly its prev_running_* buffer): give the output its own "
                    "buffer")
        if ws is not None:
            nbytes = self.workspace_size
            for role in self._alias_roles:
                if self._extent[role] and _vp.overlap(ws, nbytes, buffers[role],
                                                        self._extent[role]):
                    u = self.match.tensors[role]
                    raise VariantPackError(
                        f"execute: the workspace given with workspace= ({nbytes} bytes needed) "
                        f"shares memory with tensor '{u.name}' (uid {u.uid}, role {role}) of "
                        f"plan {self.pattern}; the execution writes its workspace, which may "
                        "not overlap any buffer of the variant pack: give it its own memory")
        try:
            self._alias_passed = ([weakref.ref(b) if isinstance(b, np.ndarray) else b
                                   for b in bound],
                                  None if given is None else weakref.ref(given))
        except TypeError:          # an object that takes no weak reference: no memo
            self._alias_passed = None

    def _snapshot_tensor(self, sid: int):
        return next((t for t in self._snapshot.tensors if id(t) == sid), None)

    def _runner(self, buffers: dict, ws):
        """The work-item function of one execution with bound ``buffers`` / ``ws`` that
        calls the provider plan's ``run`` (a capture records these: a replay must not
        launch anything but the recorded calls); its library errors name this plan."""
        return run_launcher(self._pplan, buffers, ws, counter=self._counter, label=self._label)

    def _fresh_workspace(self):
        """A fresh workspace for one execution (the binding cache's hit of a pack bound
        without one; raises as ``_bind`` does)."""
        return self.device.provider.bind_workspace(self.workspace_size, None,
                                                   where=f"execute: plan {self.pattern}")

    def _make_fn(self, buffers: dict, ws):
        """The work-item function of one binding: the provider plan's ``launcher`` for
        these buffers (a prebuilt vendor launch where the engine has one), counted in the
        device's ``plan_stats`` and naming this plan in its errors."""
        return self._pplan.launcher(buffers, ws, counter=self._counter, label=self._label)

    def _work(self, variant_pack, workspace):
        """(work-item function, keepalive) of one execution: the binding's function, and
        the buffer objects (and workspace), which stay alive until the execution
        completes (the binding need not: a launch reads its variant pack when enqueued)."""
        fn = self._bindings.lookup(variant_pack, workspace).fn
        keep = tuple(variant_pack.values())
        return fn, (keep if workspace is None else (keep, workspace))

    def reorder_constants(self, constants: Mapping) -> bool:
        """Let the engine prepare inputs that stay the same across executions, once.

        ``ONEDNN_ENGINE`` reorders constant convolution weights into the blocked layout
        its primitive reads, so later executions skip that reorder; other engines have
        nothing to prepare. Every later execution of this plan must pass the same values
        for these tensors (a change is not seen until this is called again); other plans,
        built from equal graphs, keep reading the values they are given.

        Parameters
        ----------
        constants : mapping
            Tensor (or its name or uid) -> buffer, as in a variant pack.

        Returns
        -------
        bool
            True when the plan now reads a prepared copy.

        Raises
        ------
        VariantPackError
            A key names no tensor of the plan, or a buffer does not fit its tensor.
        """
        prepare = getattr(self._pplan, "reorder_constants", None)
        if prepare is None:
            return False
        bound = {}
        for key, buf in constants.items():
            t = key if type(key) is TensorAttributes else self._snapshot.tensor_by(key)
            slots = self._slots.get(id(t)) if t is not None else None
            if slots is None:
                raise VariantPackError(_vp.unknown_key(self, key, t))
            for role, bind in slots:
                bound[role] = bind(buf)
        # on a copy of the provider plan: the device's plan cache gives equal graphs' plans
        # one provider plan, and the others must not read these constants
        pplan = copy.copy(self._pplan)
        prepared = bool(pplan.reorder_constants(bound))
        if prepared:
            self._pplan = pplan
            self._bindings.clear()     # their functions run the program before the copy
        return prepared

    # -- execution -----------------------------------------------------------------------
    def submit(self, variant_pack: Mapping, *, workspace=None, stream=None):
        """Enqueue an execution and return its awaitable handle at once.

        Never waits: when the stream already has ``max_inflight`` executions in flight, the
        execution waits host-side, in submission order, and starts when a slot frees
        (``await plan.enqueue(...)`` waits for the slot instead). ``await handle`` returns
        when the results are complete; ``handle.result()`` blocks a thread until then.

        Parameters
        ----------
        variant_pack, workspace, stream
            As ``execute``.

        Returns
        -------
        handle
            Awaitable; also ``done()``, ``result(timeout=None)``, ``exception()`` and
            ``wait(timeout=None)`` (timeouts in seconds). An ``ExecutionError`` of the
            run is raised by awaiting it or by ``result()``.

        Raises
        ------
        VariantPackError
            Missing, virtual or mismatched buffers (raised here, before enqueueing).
        DeviceError
            The device is closed, or ``stream`` is not one of its streams; inside a
            ``dev.capture()`` block of this task: ``stream`` is not the step's, or the
            plan is of another device than the capture's.

        Notes
        -----
        Inside ``dev.capture()`` (in the task that entered it) the execution is bound and
        recorded, not run: it runs at each replay of the step, and its handle only says
        so (awaiting it is a ``DeviceError``; await the replay).
        """
        if _capture.OPEN:   # some capture block is open: is this task's one of them?
            step = _capture.recording_step(self)
            if step is not None:
                return step._record(self, variant_pack, workspace, stream)
        if stream is not None:
            stream = self.device._stream(stream)      # checked once: the pool takes it as is
        rec = _prof.recorder(self.device, "execution", self) if _prof.ON else None
        # binding, keepalive and stream in C; on a host stream short work runs at once
        # where the stream is idle (run_host), else the item is queued
        got = run_host(self._launch, variant_pack, workspace, stream, INLINE_MAX_S, rec)
        if type(got) is not tuple:
            return got
        return self._pool._submit_now(*got, self._label, self._timer, rec)

    async def enqueue(self, variant_pack: Mapping, *, workspace=None, stream=None):
        """As ``submit``, but first wait (asynchronously, cancellably) while the stream has
        ``max_inflight`` executions in flight: backpressure for producers (inside
        ``dev.capture()``: recorded, as ``submit``).

        Returns the handle, as ``submit``; cancelled while waiting, nothing is enqueued.
        Raises as ``submit``.
        """
        if _capture.OPEN:
            step = _capture.recording_step(self)
            if step is not None:
                return step._record(self, variant_pack, workspace, stream)
        fn, keep = self._work(variant_pack, workspace)
        rec = _prof.recorder(self.device, "execution", self) if _prof.ON else None
        return await self.device._pool.submit(fn, keepalive=keep, label=self._label,
                                              stream=self.device._stream(stream),
                                              recorder=rec)

    async def execute(self, variant_pack: Mapping, *, workspace=None, stream=None) -> None:
        """Run the plan; return when the results are complete and readable.

        Parameters
        ----------
        variant_pack : mapping
            TensorAttributes, uid or name -> buffer for every non-virtual tensor, in
            logical shape with the tensor's strides or C-contiguous in memory order. CPU:
            NumPy arrays, DeviceArrays, ``__dlpack__`` objects, int host pointers. GPU:
            GpuArrays, ``__cuda_array_interface__`` objects (CuPy, PyTorch CUDA tensors),
            int device pointers (checked to be memory of this device). An output may not
            share memory with any other buffer of the pack (no operation runs in place);
            inputs may share memory with each other.
        workspace : array, optional
            At least ``workspace_size`` writable contiguous bytes. If omitted: allocated
            per call on a GPU; on the CPU, blocks of 1 MiB and more come from a pool
            reused once an execution is done with its block (up to 8 free blocks, 1 GiB,
            are kept). The execution writes it: it may not overlap any buffer of the pack,
            nor be given to an execution in flight on another stream (they would race).
        stream : Stream or int, optional
            Stream to run on; default the least loaded. Waits while it is full.

        Raises
        ------
        VariantPackError
            Bad variant pack (before anything runs): not a mapping, a key naming no
            tensor or a virtual one, a tensor given twice or missing, a buffer of the
            wrong type, dtype, shape or strides, a read-only output, an output
            overlapping another buffer, a workspace too small or overlapping the pack.
        ExecutionError
            The provider failed while running (the stream keeps working), or a workspace
            of ``workspace_size`` bytes cannot be allocated for this call.
        DeviceError
            The device is closed, or ``stream`` is not one of its streams; inside a
            ``dev.capture()`` block of this task (code ``INVALID_VALUE``): an
            execute would run now and be missing from every replay; use ``submit``
            there, results come from replay.

        Notes
        -----
        Cancelling the awaiting task returns at once but does not stop the execution once
        it is enqueued: it runs to completion and writes its outputs, and the library
        keeps every buffer object of the variant pack alive until then (not memory an
        object frees itself: a torch tensor's ``resize_`` / ``set_`` meanwhile leaves the
        execution writing freed memory). Use ``await dev.synchronize()`` before reusing
        the buffers of a cancelled execution.
        """
        if _capture.OPEN:
            _capture.refuse_eager(self.device, f"{self._label}: execute", self)
        if self._timer is None:    # a GPU plan
            handle = await self.enqueue(variant_pack, workspace=workspace, stream=stream)
            await handle
            return
        # a host stream: at once on this thread where the work is short and the stream
        # idle (run_host; a cancelled task runs nothing), else on its worker
        if stream is not None:
            stream = self.device._stream(stream)
        await anyio.lowlevel.checkpoint_if_cancelled()
        rec = _prof.recorder(self.device, "execution", self) if _prof.ON else None
        got = run_host(self._launch, variant_pack, workspace, stream, INLINE_MAX_S, rec)
        if type(got) is tuple:
            got = await self._pool._run(*got, self._label, self._timer, rec)
        if got._error is not None:
            raise got._error

    def execute_sync(self, variant_pack: Mapping, *, workspace=None, stream=None) -> None:
        """Blocking ``execute`` for threads without an event loop (same parameters, path
        and errors; inside a ``dev.capture()`` block of this thread a ``DeviceError``, as
        ``execute``). Waits while the stream is full, then until the results are
        complete."""
        if _capture.OPEN:
            _capture.refuse_eager(self.device, f"{self._label}: execute_sync", self)
        if stream is not None:
            stream = self.device._stream(stream)
        rec = _prof.recorder(self.device, "execution", self) if _prof.ON else None
        # an idle host stream runs it on this thread, which waits for it anyway
        item = run_host(self._launch, variant_pack, workspace, stream, -1.0, rec)
        if type(item) is tuple:
            fn, keep, chosen = item
            # no stream asked for: the pool chooses again (not the stream whose thread
            # this is, in a done callback)
            item = self._pool._run_sync(fn, keep, chosen if stream is not None else None,
                                        self._label, self._timer, rec)
        if item._error is not None:
            raise item._error
