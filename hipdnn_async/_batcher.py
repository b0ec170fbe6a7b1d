"""Primitive-level dynamic batching for concurrent inference.

`DynamicBatcher` wraps a graph whose batch dim is N. Concurrent ``await batcher(sample)``
calls are coalesced, as Ray Serve's ``@serve.batch`` and Triton's dynamic batcher do for
whole models: the first waiting request opens a window, which is flushed when
``max_batch_size`` rows wait or ``max_delay_ms`` has elapsed. The coalesced rows run as
one plan built for a *bucket* batch size (plans are cached per bucket, so new sizes do
not each build or tune); padding rows are zero and their results are discarded, and each
caller gets exactly its own rows back.

Only graphs whose samples are independent are accepted (convolution forward, the fused
convolution + bias + ReLU, batchnorm inference): batch statistics couple the samples of
a training batchnorm, so batching them would change every caller's result.

On a host device (``device.is_host``, the CPU) the batch is gathered straight into a
device array's NumPy view and the outputs are sliced from theirs: no staging copy. On a
GPU device, whose arrays are not host-addressable, the rows are gathered into a host
staging array, copied to a device batch buffer, and the outputs are copied back once the
batch has run; constants are uploaded once, and each bucket keeps its staging and device
buffers for the next batch.

Several devices (the serving path of one process with several GPUs): given a list of
devices, the batcher keeps one *lane* per device (its plans, constants uploaded once,
staging buffers, counters) and sends each coalesced batch to the least loaded lane (fewest
batches in flight; ties in turn), so every device works while requests keep coming.
``metrics()["devices"]`` has each lane's counters.

A lane whose device is closed (``device.closed``, seen when a batch is dispatched or when
one of its batches fails with a ``DeviceError``) leaves the dispatch for good, with one
``RuntimeWarning`` naming the device; its ``metrics()["devices"][i]["closed"]`` is True and
batches go to the other lanes. A batch whose lane failed that way before its execution
started (building the plan, staging the rows) is run once more on another lane; one that
failed in ``plan.execute`` fails its callers (the execution may have begun). With no
lane left, a request fails with a ``DeviceError`` naming the devices.

Only anyio primitives are used (memory object streams, events, a task group, timeouts,
``to_thread`` for blocking device copies), so the batcher runs under asyncio and trio
alike.
"""
from __future__ import annotations

import collections
import copy
import math
import numbers
import operator
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import anyio
import numpy as np

from ._errors import (
    DeviceError,
    ExecutionError,
    GraphError,
    HipdnnError,
    KnobError,
    NotSupportedError,
    VariantPackError,
)
from ._layout import packed_strides, same_memory_order, stride_order, strides_match
from ._types import numpy_dtype
from .graph._tensor import as_int_tuple
from .queues._metrics import percentiles as _percentiles
from .runtime import DeviceArray

__all__ = ["DynamicBatcher"]

# Patterns whose output rows depend only on the same input rows (hence batchable).
BATCHABLE_PATTERNS = ("CONV_FPROP", "CONV_FPROP_BIAS_RELU", "BN_INFERENCE_VARIANCE")

# Samples kept for the latency percentiles of metrics() (a sliding window).
_METRIC_WINDOW = 10_000


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------

def _tensor_key(t) -> str | int:
    """Name of a tensor, or its uid when it has no name."""
    return t.name if t.name else t.uid


def _graph_io(graph) -> tuple[list, list]:
    """Non-virtual (inputs, outputs) of a graph, in first-use order."""
    produced: dict[int, Any] = {}
    for node in graph.nodes:
        for t in node.outputs.values():
            produced[id(t)] = t
    inputs: dict[int, Any] = {}
    for node in graph.nodes:
        for t in node.inputs.values():
            if id(t) not in produced and not t.is_virtual:
                inputs.setdefault(id(t), t)
    outputs = [t for t in produced.values() if not t.is_virtual]
    return list(inputs.values()), outputs


def _tensor_by_key(graph) -> dict:
    """Every tensor of a graph by name (or uid)."""
    out = {}
    for node in graph.nodes:
        for t in (*node.inputs.values(), *node.outputs.values()):
            out[_tensor_key(t)] = t
    return out


def _graph_batch(graph) -> int:
    """Batch size of a graph: dims[0] of the first data input of its first node."""
    node = graph.nodes[0]
    first = node.inputs.get("x", next(iter(node.inputs.values())))
    return int(first.dims[0])


def _resolve_buckets(buckets, max_batch_size: int) -> tuple[int, ...]:
    """The batch sizes plans are built for, increasing; the last is >= max_batch_size."""
    if isinstance(buckets, str):
        if buckets == "pow2":
            out, b = [], 1
            while b < max_batch_size:
                out.append(b)
                b *= 2
            out.append(max_batch_size)
            return tuple(out)
        if buckets == "exact":
            return tuple(range(1, max_batch_size + 1))
        raise GraphError(f"DynamicBatcher: buckets={buckets!r} is not a policy; "
                         "use 'pow2', 'exact' or an increasing sequence of batch sizes")
    try:
        out = tuple(operator.index(b) for b in buckets)
        if any(type(b) is bool for b in buckets):
            raise TypeError
    except (TypeError, ValueError):
        raise GraphError(f"DynamicBatcher: buckets={buckets!r} is not a policy; "
                         "use 'pow2', 'exact' or an increasing sequence of batch sizes") from None
    if (not out or out[0] < 1 or any(a >= b for a, b in zip(out, out[1:]))
            or out[-1] < max_batch_size):
        raise GraphError(f"DynamicBatcher: buckets {list(out)} must be positive, strictly "
                         f"increasing and end at >= max_batch_size={max_batch_size}")
    return out


def _logical_constant(name: str, t, arr: np.ndarray) -> np.ndarray:
    """`arr` as an array of the tensor's logical dims, read as ``plan.execute`` reads a
    buffer: logical dims (N, C, [D,] H, W), or a C-contiguous array in the tensor's memory
    order (e.g. (N, H, W, C) for NHWC). Where the two shapes differ, a logical array may
    have any strides; where they are the same (an NHWC filter with C == R == S), it must
    have the tensor's strides (the logical view of memory-order data), as in execute.

    Raises
    ------
    VariantPackError
        Neither shape; a memory-order array that is not C-contiguous; or, where the shapes
        are the same, an array without the tensor's strides (C-contiguous or not, it may
        hold either order: a guess could be silently wrong).
    """
    dims, strides = tuple(t.dims), tuple(t.strides)
    order = stride_order(dims, strides)
    physical = tuple(dims[a] for a in order)
    inverse = tuple(order.index(a) for a in range(len(dims)))
    natural = packed_strides(dims, tuple(range(len(dims))))
    # both readings give other values: a non-trivial memory order that the shape hides
    ambiguous = same_memory_order(dims, physical) and not strides_match(dims, strides,
                                                                         natural)
    if arr.shape == dims:
        item = arr.itemsize
        got = tuple(s // item for s in arr.strides)
        if not ambiguous or (all(s % item == 0 for s in arr.strides)
                             and strides_match(dims, strides, got)):
            return arr
        if strides_match(dims, strides, packed_strides(dims, order)):
            how = (f"memory_order_array.transpose{inverse}, or for logical data "
                   f"np.ascontiguousarray(arr.transpose{order}).transpose{inverse}")
        else:                             # padded strides: no transpose gives them
            how = ("np.lib.stride_tricks.as_strided over a buffer laid out with those "
                   "strides")
        raise VariantPackError(
            f"DynamicBatcher: constant {name!r}: an array of shape {arr.shape} is ambiguous "
            f"here (the logical dims and the memory order {order} have the same shape); "
            f"pass the logical view with the tensor's strides {strides}: {how}")
    if same_memory_order(arr.shape, physical):
        if not arr.flags.c_contiguous:
            raise VariantPackError(f"DynamicBatcher: constant {name!r}: a memory-order "
                                   f"array (shape {arr.shape}) must be C-contiguous; pass "
                                   "np.ascontiguousarray(arr)")
        return arr.reshape(physical).transpose(inverse)
    raise VariantPackError(f"DynamicBatcher: constant {name!r} needs logical shape {dims} "
                           f"(N, C, [D,] H, W order) or a C-contiguous array of shape "
                           f"{physical} (memory order); got {arr.shape}")


def _check_cast(name: str, value: np.ndarray, cast: np.ndarray) -> None:
    """Refuse a constant whose cast to the tensor's dtype turned a finite value into an
    infinity or NaN (1e5 as float16 is inf): that would be a silently wrong model."""
    with np.errstate(invalid="ignore", over="ignore"):
        # finiteness in each array's own dtype (a long double beyond float64 is finite)
        lost = np.isfinite(value) & ~np.isfinite(cast.astype(np.float64))
    if lost.any():
        at = tuple(int(i) for i in np.argwhere(lost)[0])
        raise VariantPackError(f"DynamicBatcher: constant {name!r} holds {value[at].item()!r} at "
                               f"index {at}, beyond the range of the tensor's dtype "
                               f"{cast.dtype.name} (it would be {float(cast[at])})")


def _host_buffer(t) -> np.ndarray:
    """A zeroed NumPy array with the tensor's dims, element strides and dtype.

    Staged in the tensor's own layout, the copy into device memory order reorders nothing.
    """
    return DeviceArray(t.dims, numpy_dtype(t.data_type), t.strides, fill=0).view


def _n_streams(device) -> int:
    """Batches a device runs at once by default: its number of streams (2 if it does not
    say)."""
    streams = getattr(device, "streams", None)
    try:
        return len(streams) if streams is not None else 2
    except TypeError:
        return int(streams) if isinstance(streams, int) else 2


def _named_error(exc: Exception, where: str) -> HipdnnError:
    """`exc` as one of our errors whose message starts with `where` (which names the tensor)."""
    if isinstance(exc, HipdnnError):
        return exc.prefixed(where)    # same type and fields (a vendor error's call, library)
    else:
        err = DeviceError(f"{where}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def _fresh_error(exc: BaseException) -> BaseException:
    """A copy of an exception for one caller (one instance must not be raised in many tasks)."""
    try:
        err = copy.copy(exc)
    except Exception:  # an exception type that does not copy: wrap it
        err = ExecutionError(str(exc))
    err.__traceback__ = None
    return err


@dataclass(eq=False)
class _Request:
    """One queued piece of a caller's request (at most max_batch_size rows)."""

    arrays: dict            # input name -> logical-order array, tensor dtype, rows n
    n: int
    enqueued: float         # time.perf_counter()
    window: float           # anyio.current_time() when queued
    done: anyio.Event = field(default_factory=anyio.Event)
    result: dict | None = None
    error: BaseException | None = None
    cancelled: bool = False


@dataclass(eq=False)
class _Staging:
    """Buffers of one batch on a non-host device."""

    host: dict              # input name -> host staging array (bucket dims, tensor strides)
    device: dict            # input and output name -> device array (bucket dims)


@dataclass(eq=False)
class _Lane:
    """One device of a batcher: its plans per bucket, its constants, its counters."""

    index: int
    device: Any
    host: bool              # the device's arrays are host memory (NumPy views)
    plans: dict = field(default_factory=dict)        # bucket size -> _Bucket
    plan_locks: dict = field(default_factory=dict)   # bucket size -> anyio.Lock
    constants: dict = field(default_factory=dict)    # name -> buffer on this device
    inflight: int = 0
    batches: int = 0
    rows: int = 0
    errors: int = 0
    closed: bool = False    # out of the dispatch (its device was closed)
    retried: int = 0        # batches that failed here before executing and ran elsewhere
    exec_ms: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=_METRIC_WINDOW))

    @property
    def spec(self) -> str:
        return repr(getattr(self.device, "spec", type(self.device).__name__))


@dataclass(eq=False)
class _Bucket:
    """A built plan for one bucket batch size, with its tensors by name."""

    size: int
    plan: Any
    tensors: dict           # name -> TensorAttributes of the bucket graph
    keys: dict              # name -> variant-pack key (uid when set, else name)
    idle: list = field(default_factory=list)   # _Staging sets free for the next batch


# ---------------------------------------------------------------------------------------
# DynamicBatcher
# ---------------------------------------------------------------------------------------

class DynamicBatcher:
    """Coalesce concurrent inference requests into batched executions of one graph.

    Parameters
    ----------
    device : Device or sequence of Device
        The device that builds and runs the plans (``await device.build(...)``). Where
        ``device.is_host`` is False (a GPU), requests and results stay NumPy and the
        batcher copies them to and from device buffers. Several devices (e.g. one
        ``Device`` per GPU): each builds its own plans and holds its own copy of the
        constants, and each batch runs on the device with the fewest batches in flight
        (ties in turn); ``metrics()["devices"]`` reports each. A device that is closed
        leaves the dispatch (one ``RuntimeWarning``); see the module docstring.
    graph : Graph
        A validated graph built at any batch size N. Its pattern must be per-sample
        independent: ``CONV_FPROP``, ``CONV_FPROP_BIAS_RELU`` or ``BN_INFERENCE_VARIANCE``.
        Per-bucket graphs are made with ``graph.with_batch_size(n)``.
    inputs : str or sequence of str, optional
        Names of the per-request (batched) input tensors (a str is one name). Default: the non-virtual graph
        inputs whose dims[0] follows the batch size and that are not in `constants`.
    outputs : str or sequence of str, optional
        Names of the non-virtual outputs returned to callers (a str is one name). Default:
        all of them.
    constants : mapping of str to array, optional
        The other non-virtual inputs (weights, bias, scale, mean, variance...), each read
        as ``plan.execute`` reads a buffer: logical dims (N, C, [D,] H, W) with any
        strides, or a C-contiguous array in the tensor's memory order ((K, R, S, C) for
        NHWC filters); any dtype castable to the tensor's, cast and copied once (to the
        device, on a GPU). Values are taken as given, NaN and inf included. Refused
        (VariantPackError naming the constant): neither shape; a memory-order array that
        is not C-contiguous; where both shapes are the same (NHWC with C == H == W), any
        array but the logical view with the tensor's strides (ambiguous); a masked array;
        a value the cast makes infinite or NaN (1e5 as float16), with its index.
    max_batch_size : int, optional
        Most rows in one execution. Default 64.
    max_delay_ms : float, optional
        Longest time (ms) the first waiting request waits for others. Default 2.0.
    buckets : {"pow2", "exact"} or sequence of int, optional
        Batch sizes plans are built for: "pow2" (1, 2, 4, ..., max_batch_size), "exact"
        (every size) or an increasing sequence ending >= max_batch_size. A batch of r
        rows runs on the smallest bucket >= r, padded with zero rows. Default "pow2".
    knobs : mapping or sequence of KnobSetting, optional
        Knob settings passed to every ``device.build``.
    max_concurrent_batches : int, optional
        Batches in flight at once (extension, as Ray Serve's argument of that name), over
        all devices. Default: the devices' numbers of streams, summed (2 per device that
        does not say).

    Raises
    ------
    NotSupportedError
        The graph's pattern couples samples (e.g. ``BN_TRAINING``).
    KnobError
        `knobs` is neither a mapping nor a sequence.
    GraphError
        Bad `buckets`, `max_batch_size`, `max_delay_ms`, `max_concurrent_batches` (an int
        >= 1), or an input/output/constant name
        that is not a non-virtual tensor of the graph in the right role.
    VariantPackError
        A constant whose shape does not match its tensor, or a missing constant.

    Notes
    -----
    A request of more rows than `max_batch_size` is split into pieces of at most
    `max_batch_size` rows, which are batched like separate requests; the caller gets the
    rows back concatenated in order. Use as ``async with DynamicBatcher(...) as b:``;
    leaving the block (or ``await b.aclose()``) stops new requests, drains pending ones,
    then stops the collector. A caller cancelled before its rows are batched is skipped;
    one cancelled while its batch runs has its result discarded. An execution error fails
    the callers of that batch only; the batcher keeps serving.
    """

    def __init__(self, device, graph, *, inputs: Sequence[str] | None = None,
                 outputs: Sequence[str] | None = None,
                 constants: Mapping[str, Any] | None = None,
                 max_batch_size: int = 64, max_delay_ms: float = 2.0,
                 buckets: str | Sequence[int] = "pow2", knobs: Mapping | None = None,
                 max_concurrent_batches: int | None = None):
        if type(max_batch_size) is bool or not isinstance(max_batch_size, numbers.Integral) \
                or max_batch_size < 1:
            raise GraphError(f"DynamicBatcher: max_batch_size={max_batch_size!r} must be an "
                             "int >= 1")
        if type(max_delay_ms) is bool or not isinstance(max_delay_ms, numbers.Real) or not (
                0.0 <= float(max_delay_ms) < math.inf):
            raise GraphError(f"DynamicBatcher: max_delay_ms={max_delay_ms!r} must be a finite "
                             "number >= 0 (ms)")
        devices = list(device) if isinstance(device, (list, tuple)) else [device]
        if not devices:
            raise GraphError("DynamicBatcher: device=[] names no device; give a Device or "
                             "a list of Devices")
        for d in devices:
            if not callable(getattr(d, "build", None)) or not callable(
                    getattr(d, "empty", None)):
                raise DeviceError(f"DynamicBatcher: device must be an hd.Device (with build() "
                                  f"and empty()) or a list of them; got {type(d).__name__} "
                                  f"{d!r}", code="INVALID_VALUE")
        if len({id(d) for d in devices}) != len(devices):
            raise GraphError("DynamicBatcher: the same Device object is listed twice; open "
                             "one Device per lane (two on one GPU are allowed)")
        if constants is not None and not isinstance(constants, Mapping):
            raise VariantPackError(f"DynamicBatcher: constants must be a mapping of tensor "
                                   f"name to array; got {type(constants).__name__}")
        for what, names in (("inputs", inputs), ("outputs", outputs)):
            if names is not None and not isinstance(names, str) and not (
                    isinstance(names, (list, tuple)) and all(isinstance(n, (str, int))
                                                             for n in names)):
                raise GraphError(f"DynamicBatcher: {what}={names!r} must be a tensor name "
                                 "or a list of names")
        # A device without is_host (a duck-typed stand-in) is taken as host memory.
        self._lanes = [_Lane(i, d, bool(getattr(d, "is_host", True)))
                       for i, d in enumerate(devices)]
        self._rr = 0                        # the lane a tie goes to next
        self._graph = graph
        if knobs is None or isinstance(knobs, Mapping):
            self._knobs = dict(knobs) if knobs else None
        elif isinstance(knobs, (list, tuple)):        # KnobSettings, as device.build takes
            self._knobs = tuple(knobs)
        else:
            raise KnobError(f"DynamicBatcher: knobs={knobs!r} must be a mapping of knob id "
                            "to value or a sequence of KnobSetting")
        self.max_batch_size = int(max_batch_size)
        self.max_delay_ms = float(max_delay_ms)
        self.buckets = _resolve_buckets(buckets, self.max_batch_size)
        if max_concurrent_batches is None:
            max_concurrent_batches = sum(_n_streams(d) for d in devices)
        if type(max_concurrent_batches) is bool or not isinstance(
                max_concurrent_batches, numbers.Integral) or max_concurrent_batches < 1:
            raise GraphError(f"DynamicBatcher: max_concurrent_batches="
                             f"{max_concurrent_batches!r} must be an int >= 1")
        self.max_concurrent_batches = int(max_concurrent_batches)

        self._pattern_checked = self._check_pattern(graph)
        self._classify(graph, inputs, outputs, constants or {})

        self._state = "new"             # new -> running -> closing -> closed
        self._tg = None
        self._send = self._recv = None
        self._drained: anyio.Event | None = None
        self._inflight = 0
        self._idle: anyio.Event | None = None
        # metrics
        self._n_requests = 0
        self._n_batches = 0
        self._n_rows = 0
        self._n_bucket_rows = 0
        self._n_errors = 0
        self._n_cancelled = 0
        self._plans_built = 0
        self._buckets_used: set[int] = set()
        self._queue_wait_ms = collections.deque(maxlen=_METRIC_WINDOW)
        self._exec_ms = collections.deque(maxlen=_METRIC_WINDOW)

    # ------------------------------------------------------------------ set-up

    @staticmethod
    def _check_pattern(graph) -> bool:
        """Reject per-sample-coupled patterns early when the pattern matcher is present."""
        try:
            from .patterns import match
        except ImportError:
            return False
        pattern = match(graph).pattern
        DynamicBatcher._require_batchable(getattr(pattern, "name", str(pattern)))
        return True

    @staticmethod
    def _require_batchable(pattern: str) -> None:
        if pattern not in BATCHABLE_PATTERNS:
            raise NotSupportedError(
                f"DynamicBatcher: pattern {pattern} is not batchable: its samples are not "
                "independent (batch statistics or reductions over N couple them), so "
                "coalescing requests would change each caller's result; batchable "
                f"patterns are {', '.join(BATCHABLE_PATTERNS)}")

    def _classify(self, graph, inputs, outputs, constants) -> None:
        """Split graph inputs into batched inputs and constants; pick the outputs."""
        g_inputs, g_outputs = _graph_io(graph)
        if not g_inputs or not g_outputs:
            raise GraphError(f"DynamicBatcher: graph {graph.name!r} has no non-virtual "
                             "inputs or outputs")
        self._batch = _graph_batch(graph)
        # Which tensors follow the batch size: compare with a copy at another batch size.
        probe = _tensor_by_key(graph.with_batch_size(self._batch + 1))
        batched = {_tensor_key(t) for t in (*g_inputs, *g_outputs)
                   if probe[_tensor_key(t)].dims[0] != t.dims[0]}
        in_by_key = {_tensor_key(t): t for t in g_inputs}
        out_by_key = {_tensor_key(t): t for t in g_outputs}

        for name in constants:
            if name not in in_by_key:
                raise GraphError(f"DynamicBatcher: constant {name!r} is not a non-virtual "
                                 f"input of graph {graph.name!r}; inputs are "
                                 f"{sorted(map(str, in_by_key))}")
            if name in batched:
                raise GraphError(f"DynamicBatcher: constant {name!r} has the batch dim "
                                 f"(dims {tuple(in_by_key[name].dims)}); a batched tensor "
                                 "must be a per-request input")
        if inputs is None:
            inputs = [k for k in in_by_key if k in batched and k not in constants]
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)   # one name
        if not inputs:
            raise GraphError(f"DynamicBatcher: graph {graph.name!r} has no batched input "
                             "(no non-virtual input follows dims[0] = N)")
        for name in inputs:
            if name not in in_by_key or name not in batched:
                raise GraphError(f"DynamicBatcher: input {name!r} is not a batched "
                                 f"non-virtual input of graph {graph.name!r}; batched "
                                 f"inputs are {sorted(map(str, batched & set(in_by_key)))}")
            if name in constants:
                raise GraphError(f"DynamicBatcher: {name!r} is given both as an input "
                                 "and as a constant")
        missing = [k for k in in_by_key if k not in inputs and k not in constants]
        if missing:
            raise VariantPackError(f"DynamicBatcher: graph {graph.name!r} input(s) "
                                   f"{missing} are neither per-request inputs nor given "
                                   "in constants=")
        if outputs is None:
            outputs = list(out_by_key)
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        for name in outputs:
            if name not in out_by_key:
                raise GraphError(f"DynamicBatcher: output {name!r} is not a non-virtual "
                                 f"output of graph {graph.name!r}; outputs are "
                                 f"{sorted(map(str, out_by_key))}")
            if name not in batched:
                raise GraphError(f"DynamicBatcher: output {name!r} (dims "
                                 f"{tuple(out_by_key[name].dims)}) has no batch dim")
        if not outputs:
            raise GraphError("DynamicBatcher: outputs= is empty")
        # Outputs not returned still need buffers in the variant pack.
        self._all_outputs = list(out_by_key)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self._in_tensors = {k: in_by_key[k] for k in inputs}

        for name, value in constants.items():
            t = in_by_key[name]
            if isinstance(value, np.ma.MaskedArray):   # as plan.execute: silently wrong
                raise VariantPackError(f"DynamicBatcher: constant {name!r} is a masked "
                                       "array (the mask would be ignored); pass "
                                       "arr.filled(value) or arr.data")
            arr = np.asarray(value)
            if arr.dtype.kind not in "fiu" and arr.dtype.name != "bfloat16":
                raise VariantPackError(f"DynamicBatcher: constant {name!r} needs a real "
                                       f"numeric array; got dtype {arr.dtype}")
            arr = _logical_constant(name, t, arr)
            host = _host_buffer(t)
            with np.errstate(over="ignore", invalid="ignore"):   # _check_cast says it
                host[...] = arr              # cast once, the same values on every device
            if arr.dtype != host.dtype:
                _check_cast(name, arr, host)
            for lane in self._lanes:
                if lane.host:
                    buf = self._alloc(lane, t, zero=False)
                    buf[...] = host
                    buf.flags.writeable = False
                else:
                    buf = self._device_empty(lane, name, t)
                    self._copy_in(lane, name, buf, host)
                lane.constants[name] = buf

    @property
    def devices(self) -> tuple:
        """The devices this batcher runs on, in the order given."""
        return tuple(lane.device for lane in self._lanes)

    @staticmethod
    def _alloc(lane: _Lane, t, *, zero: bool) -> np.ndarray:
        """A buffer of a host device with the tensor's dims and strides (logical view)."""
        view = lane.device.empty(t.dims, t.data_type, strides=t.strides).view
        if zero:
            view[...] = 0
        return view

    @staticmethod
    def _device_empty(lane: _Lane, name, t):
        """A device array with the tensor's dims and strides (non-host devices)."""
        try:
            return lane.device.empty(t.dims, t.data_type, strides=t.strides)
        except Exception as exc:
            raise _named_error(exc, f"DynamicBatcher: allocating tensor {name!r} (dims "
                                    f"{tuple(t.dims)}) on device {lane.spec}")

    @staticmethod
    def _copy_in(lane: _Lane, name, buf, host: np.ndarray) -> None:
        """Blocking host-to-device copy into `buf`; errors name the tensor."""
        try:
            buf.copy_from(host)
        except Exception as exc:
            raise _named_error(exc, f"DynamicBatcher: copying tensor {name!r} to device "
                                    f"{lane.spec}")

    @staticmethod
    async def _copy_out(lane: _Lane, name, buf) -> np.ndarray:
        """Device-to-host copy of `buf` once the work writing it is done; errors name it."""
        try:
            return await buf.to_numpy()
        except Exception as exc:
            raise _named_error(exc, f"DynamicBatcher: copying tensor {name!r} from device "
                                    f"{lane.spec}")

    @property
    def sample_shape(self) -> tuple | None:
        """Dims of one sample of the single batched input (its dims past N), or None when
        there are several inputs; a served model declares it (``hipdnn_async.ray``)."""
        if len(self.inputs) != 1:
            return None
        return tuple(int(d) for d in self._in_tensors[self.inputs[0]].dims[1:])

    @property
    def dtype(self) -> np.dtype | None:
        """NumPy dtype a request of the single batched input must have, or None when there
        are several inputs (``hipdnn_async.ray`` casts HTTP and Ray Data rows to it)."""
        if len(self.inputs) != 1:
            return None
        return np.dtype(numpy_dtype(self._in_tensors[self.inputs[0]].data_type))

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> "DynamicBatcher":
        if self._state != "new":
            raise DeviceError(f"DynamicBatcher: cannot start a batcher that is {self._state}",
                              code="INVALID_VALUE")
        if not self._pattern_checked:
            await self._get_bucket(self.buckets[0], self._lanes[0])   # checks plan.pattern
        self._send, self._recv = anyio.create_memory_object_stream(math.inf)
        self._drained = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._state = "running"
        self._tg.start_soon(self._collector)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> bool | None:
        try:
            if exc_type is None:
                await self.aclose()
            else:
                # The body failed: stop at once (waiting callers get DeviceError) and let
                # the body's exception propagate as it is, not wrapped in a group.
                self._stop_accepting()
                self._tg.cancel_scope.cancel()
                exc_type = exc = tb = None
        finally:
            try:
                await self._tg.__aexit__(exc_type, exc, tb)
            finally:
                self._state = "closed"
        return None

    def _stop_accepting(self) -> None:
        if self._state == "running":
            self._state = "closing"
            self._send.close()

    async def aclose(self) -> None:
        """Stop accepting requests, run every pending one, and wait until none is in flight."""
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        self._stop_accepting()
        await self._drained.wait()
        await self._idle.wait()

    # ------------------------------------------------------------------ requests

    async def __call__(self, request):
        """Run one request (N_k >= 1 rows) in some batch; return its own output rows.

        Parameters
        ----------
        request : mapping of str to array, or array
            ``{input_name: array}`` with each array in logical order (N_k, C, [D,] H, W)
            matching the input's dims past the batch dim; a bare array when the batcher has
            exactly one input. Each array has the tensor's dtype (``float32`` for FLOAT,
            ``float16``, ``ml_dtypes.bfloat16``), as ``plan.execute`` requires: requests
            are not cast.

        Returns
        -------
        dict of str to numpy.ndarray, or numpy.ndarray
            ``{output_name: array (N_k, ...)}``, or the single array when there is exactly
            one output. Arrays are logical order, with the output tensor's layout on a host
            device and C-contiguous when copied back from a GPU.

        Raises
        ------
        VariantPackError
            A missing or unknown input, a shape or dtype that does not match, or
            different N_k.
        DeviceError
            The batcher is not running (use ``async with``), or on a GPU a copy to or from
            the device failed (the message names the tensor).
        ExecutionError
            The batch holding this request failed.
        """
        if self._state != "running":
            raise DeviceError(f"DynamicBatcher: not running (state {self._state}); call it "
                              "inside 'async with DynamicBatcher(...) as batcher:'",
                              code="INVALID_VALUE")
        arrays, n = self._check_request(request)
        now, window = time.perf_counter(), anyio.current_time()
        pieces = []
        for lo in range(0, n, self.max_batch_size):
            hi = min(n, lo + self.max_batch_size)
            pieces.append(_Request({k: a[lo:hi] for k, a in arrays.items()}, hi - lo,
                                   now, window))
        self._n_requests += 1
        try:
            for p in pieces:
                self._send.send_nowait(p)
            for p in pieces:
                await p.done.wait()
        except BaseException:
            for p in pieces:
                if not p.done.is_set():
                    p.cancelled = True
            self._n_cancelled += 1
            raise
        for p in pieces:
            if p.error is not None:
                raise p.error
        if len(pieces) == 1:
            out = pieces[0].result
        else:
            out = {k: np.concatenate([p.result[k] for p in pieces]) for k in self.outputs}
        return out[self.outputs[0]] if len(self.outputs) == 1 else out

    def _check_request(self, request) -> tuple[dict, int]:
        """Validate a request; return {input: array of the tensor dtype} and its rows."""
        if not isinstance(request, Mapping):
            if len(self.inputs) != 1:
                raise VariantPackError(f"DynamicBatcher: a bare array needs exactly one "
                                       f"input; this batcher has {list(self.inputs)}: "
                                       "pass a dict")
            request = {self.inputs[0]: request}
        extra = [k for k in request if k not in self._in_tensors]
        if extra:
            raise VariantPackError(f"DynamicBatcher: request names {extra} are not "
                                   f"per-request inputs; inputs are {list(self.inputs)}")
        arrays, n = {}, None
        for name, t in self._in_tensors.items():
            if name not in request:
                raise VariantPackError(f"DynamicBatcher: request lacks input {name!r}")
            if isinstance(request[name], np.ma.MaskedArray):   # the mask would be ignored
                raise VariantPackError(f"DynamicBatcher: tensor {name!r}: masked arrays are "
                                       "not taken (the mask would be ignored); pass "
                                       "arr.filled(value) or arr.data")
            arr = np.asarray(request[name])
            want = tuple(t.dims[1:])
            if arr.ndim != len(t.dims) or tuple(arr.shape[1:]) != want or arr.shape[0] < 1:
                raise VariantPackError(f"DynamicBatcher: tensor {name!r} needs shape "
                                       f"(N, {', '.join(map(str, want))}) with N >= 1; "
                                       f"got {arr.shape}")
            if n is None:
                n = arr.shape[0]
            elif arr.shape[0] != n:
                raise VariantPackError(f"DynamicBatcher: tensor {name!r} has {arr.shape[0]} "
                                       f"rows; the request's other inputs have {n}")
            # The rule of plan.execute: no cast (a float64 or int request would be rounded
            # or overflow silently); the caller casts, knowing its values.
            dtype = np.dtype(numpy_dtype(t.data_type))
            if arr.dtype != dtype:
                got = arr.dtype.name
                if got == dtype.name:      # same kind, other byte order ('>f4')
                    got = f"{got} in non-native byte order ({arr.dtype.str})"
                raise VariantPackError(f"DynamicBatcher: tensor {name!r} needs dtype "
                                       f"{dtype.name} ({t.data_type.name}); got {got} (cast "
                                       f"with .astype(...) first: requests are not cast)")
            arrays[name] = arr
        return arrays, n

    # ------------------------------------------------------------------ collector

    async def _collector(self) -> None:
        """Group queued requests into batches and start them, until the queue closes."""
        pending: collections.deque[_Request] = collections.deque()
        slots = anyio.Semaphore(self.max_concurrent_batches)
        closed = False
        delay = self.max_delay_ms / 1000.0
        try:
            while True:
                self._drop_cancelled(pending)
                if not pending:
                    if closed:
                        break
                    try:
                        pending.append(await self._recv.receive())
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        closed = True
                        continue
                # The first waiting request opens the window.
                deadline = pending[0].window + delay
                while not closed and self._rows(pending) < self.max_batch_size:
                    closed = self._drain_nowait(pending)
                    if closed or self._rows(pending) >= self.max_batch_size:
                        break
                    remaining = deadline - anyio.current_time()
                    if remaining <= 0:
                        break
                    with anyio.move_on_after(remaining):
                        try:
                            pending.append(await self._recv.receive())
                        except (anyio.EndOfStream, anyio.ClosedResourceError):
                            closed = True
                await slots.acquire()
                # Requests that came while waiting for a slot join this batch.
                if not closed:
                    closed = self._drain_nowait(pending)
                self._drop_cancelled(pending)
                batch, rows = [], 0
                while pending and rows + pending[0].n <= self.max_batch_size:
                    req = pending.popleft()
                    batch.append(req)
                    rows += req.n
                if not batch:
                    slots.release()
                    continue
                lane = self._pick_lane()
                if lane is None:
                    err = self._no_lane_error()
                    self._n_errors += 1
                    for req in batch:
                        self._fail(req, err)
                    slots.release()
                    continue
                if self._inflight == 0:
                    self._idle = anyio.Event()
                self._inflight += 1
                lane.inflight += 1
                self._tg.start_soon(self._run_batch, batch, rows, slots, lane)
        finally:
            err = DeviceError("DynamicBatcher: closed before this request ran")
            for req in pending:
                self._fail(req, err)
            try:
                while True:
                    self._fail(self._recv.receive_nowait(), err)
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                pass
            self._recv.close()
            self._drained.set()

    def _pick_lane(self, exclude: _Lane | None = None) -> _Lane | None:
        """The open lane with the fewest batches in flight (ties go to the lanes in turn),
        other than `exclude`; None when no lane is left."""
        lanes, n = self._lanes, len(self._lanes)
        start = self._rr
        live = [ln for ln in (lanes[(start + k) % n] for k in range(n))
                if ln is not exclude and self._lane_open(ln)]
        if not live:
            return None
        best = min(live, key=lambda ln: ln.inflight)
        self._rr = (best.index + 1) % n
        return best

    def _lane_open(self, lane: _Lane) -> bool:
        """False once `lane`'s device is closed (the lane then leaves the dispatch, with one
        warning)."""
        if lane.closed:
            return False
        # `is True`: a stand-in device with no such property (or a method of that name)
        # counts as open.
        if getattr(lane.device, "closed", False) is not True:
            return True
        lane.closed = True
        left = [ln.index for ln in self._lanes if not ln.closed]
        warnings.warn(f"DynamicBatcher: device {lane.spec} of lane {lane.index} is closed; "
                      f"its batches go to lanes {left} from now on" if left else
                      f"DynamicBatcher: device {lane.spec} of lane {lane.index} is closed; "
                      "no lane is left, requests fail", RuntimeWarning, stacklevel=2)
        return False

    def _no_lane_error(self) -> DeviceError:
        names = ", ".join(f"lane {ln.index} {ln.spec}" for ln in self._lanes)
        return DeviceError(f"DynamicBatcher: every device is closed ({names}); open new "
                           "Devices and a new DynamicBatcher", code="INVALID_VALUE")

    @staticmethod
    def _rows(pending) -> int:
        return sum(r.n for r in pending if not r.cancelled)

    def _drain_nowait(self, pending) -> bool:
        """Move every request already queued into `pending`; True when the queue closed."""
        while True:
            try:
                pending.append(self._recv.receive_nowait())
            except anyio.WouldBlock:
                return False
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                return True

    @staticmethod
    def _drop_cancelled(pending) -> None:
        while pending and pending[0].cancelled:
            pending.popleft()
        if any(r.cancelled for r in pending):
            kept = [r for r in pending if not r.cancelled]
            pending.clear()
            pending.extend(kept)

    @staticmethod
    def _fail(req: _Request, err: BaseException) -> None:
        if not req.done.is_set():
            req.error = _fresh_error(err)
            req.done.set()

    # ------------------------------------------------------------------ execution

    def bucket_for(self, rows: int) -> int:
        """The smallest bucket batch size >= ``rows``.

        Parameters
        ----------
        rows : int
            Rows of one batch (at most ``max_batch_size``).

        Returns
        -------
        int

        Raises
        ------
        GraphError
            ``rows`` exceeds the largest bucket.
        """
        for b in self.buckets:
            if b >= rows:
                return b
        raise GraphError(f"DynamicBatcher: {rows} rows exceed the largest bucket "
                         f"{self.buckets[-1]}")

    async def _get_bucket(self, size: int, lane: _Lane) -> _Bucket:
        """The cached plan of `lane`'s device for a bucket size, built once (concurrent
        callers wait)."""
        bucket = lane.plans.get(size)
        if bucket is not None:
            return bucket
        lock = lane.plan_locks.setdefault(size, anyio.Lock())
        async with lock:
            bucket = lane.plans.get(size)
            if bucket is not None:
                return bucket
            g = self._graph.with_batch_size(size)
            try:
                plan = await lane.device.build(g, knobs=self._knobs)
            except KnobError as exc:  # e.g. a workspace limit outside this size's range
                raise KnobError(f"DynamicBatcher: the plan for batch bucket {size}: {exc}",
                                code=exc.code) from None
            pattern = getattr(plan, "pattern", None)
            if pattern is not None:
                self._require_batchable(getattr(pattern, "name", str(pattern)))
            self._plans_built += 1
            tensors = _tensor_by_key(g)
            keys = {}
            for name in (*self.inputs, *self._lanes[0].constants, *self._all_outputs):
                t = tensors[name]
                keys[name] = t.uid if t.uid is not None else t.name
            bucket = _Bucket(size, plan, tensors, keys)
            lane.plans[size] = bucket
            return bucket

    async def warmup(self, sizes: Sequence[int] | None = None) -> None:
        """Build the plans of the given bucket sizes now (default: every bucket), on every
        device.

        Parameters
        ----------
        sizes : sequence of int, optional
            Row counts; each is rounded up to its bucket (``bucket_for``).

        Raises
        ------
        GraphError
            ``sizes`` is not a sequence of integers >= 1 (checked before anything is
            built), or a size is beyond the largest bucket.
        NotSupportedError, KnobError, DeviceError
            As ``Device.build`` of a bucket's plan.
        """
        if sizes is None:
            sizes = self.buckets
        else:
            sizes = as_int_tuple(sizes, where="DynamicBatcher.warmup", what="sizes")
            if any(s < 1 for s in sizes):
                raise GraphError(f"DynamicBatcher.warmup: sizes {sizes} hold a value < 1; "
                                 "sizes are row counts")
        buckets = [self.bucket_for(s) for s in sizes]
        for size in buckets:
            for lane in self._lanes:
                await self._get_bucket(size, lane)

    async def _run_batch(self, batch: list[_Request], rows: int, slots, lane: _Lane) -> None:
        """Run one batch on `lane`'s plan for its bucket and hand each caller its rows."""
        started = time.perf_counter()
        try:
            size = self.bucket_for(rows)
            for req in batch:
                self._queue_wait_ms.append((started - req.enqueued) * 1e3)
            retried = False
            try:
                while True:
                    try:
                        bucket = await self._get_bucket(size, lane)
                        if lane.host:
                            pack, outs = self._pack_host(lane, bucket, batch, rows)
                        else:
                            staging = (bucket.idle.pop() if bucket.idle
                                       else self._new_staging(lane, bucket))
                            pack = await self._pack_staged(lane, bucket, staging, batch,
                                                           rows)
                        break
                    except DeviceError:
                        # Nothing ran yet: a lane whose device was closed meanwhile hands
                        # the batch to another lane, once.
                        other = (None if retried or self._lane_open(lane)
                                 else self._pick_lane(exclude=lane))
                        if other is None:
                            raise
                        retried = True
                        lane.retried += 1
                        lane.inflight -= 1
                        lane = other
                        lane.inflight += 1
                t0 = time.perf_counter()
                await bucket.plan.execute(pack)
                ms = (time.perf_counter() - t0) * 1e3
                self._exec_ms.append(ms)
                lane.exec_ms.append(ms)
                if not lane.host:
                    outs = {k: await self._copy_out(lane, k, staging.device[k])
                            for k in self.outputs}
                    # Reused only after a clean run: a cancelled execution may still write.
                    bucket.idle.append(staging)
            except Exception as exc:
                if not isinstance(exc, HipdnnError):
                    wrapped = ExecutionError(f"DynamicBatcher: batch of {rows} rows (bucket "
                                             f"{size}) failed: {type(exc).__name__}: {exc}")
                    wrapped.__cause__ = exc
                    exc = wrapped
                if isinstance(exc, DeviceError):
                    self._lane_open(lane)       # a closed device leaves the dispatch
                self._n_errors += 1
                lane.errors += 1
                for req in batch:
                    self._fail(req, exc)
                return
            self._n_batches += 1
            self._n_rows += rows
            lane.batches += 1
            lane.rows += rows
            self._n_bucket_rows += size
            self._buckets_used.add(size)
            lo = 0
            for req in batch:
                if not req.cancelled:
                    req.result = {k: outs[k][lo:lo + req.n].copy(order="K")
                                  for k in self.outputs}
                req.done.set()
                lo += req.n
        finally:
            # Cancelled (the batcher was torn down): nobody may be left waiting.
            for req in batch:
                self._fail(req, DeviceError("DynamicBatcher: closed while this request ran"))
            slots.release()
            lane.inflight -= 1
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    def _pack_host(self, lane: _Lane, bucket: _Bucket, batch: list[_Request], rows: int):
        """Variant pack of a batch on a host device: rows gathered into device views."""
        pack, outs = {}, {}
        for name in self.inputs:
            buf = self._alloc(lane, bucket.tensors[name], zero=rows < bucket.size)
            lo = 0
            for req in batch:
                buf[lo:lo + req.n] = req.arrays[name]
                lo += req.n
            pack[bucket.keys[name]] = buf
        for name, buf in lane.constants.items():
            pack[bucket.keys[name]] = buf
        for name in self._all_outputs:
            outs[name] = self._alloc(lane, bucket.tensors[name], zero=False)
            pack[bucket.keys[name]] = outs[name]
        return pack, outs

    def _new_staging(self, lane: _Lane, bucket: _Bucket) -> _Staging:
        """Host staging arrays and device buffers for one batch of `bucket` on `lane`."""
        host = {k: _host_buffer(bucket.tensors[k]) for k in self.inputs}
        device = {k: self._device_empty(lane, k, bucket.tensors[k])
                  for k in (*self.inputs, *self._all_outputs)}
        return _Staging(host, device)

    async def _pack_staged(self, lane: _Lane, bucket: _Bucket, staging: _Staging,
                           batch: list[_Request], rows: int) -> dict:
        """Variant pack of a batch on a non-host device: rows gathered on the host and
        copied to the device (off the event loop: the copy waits for earlier device work)."""
        pack = {bucket.keys[k]: buf for k, buf in lane.constants.items()}
        for name in self.inputs:
            host = staging.host[name]
            lo = 0
            for req in batch:
                host[lo:lo + req.n] = req.arrays[name]
                lo += req.n
            host[rows:] = 0         # padding rows, as on the host path (a no-op when full)
            await anyio.to_thread.run_sync(self._copy_in, lane, name, staging.device[name],
                                           host)
        for name in (*self.inputs, *self._all_outputs):
            pack[bucket.keys[name]] = staging.device[name]
        return pack

    # ------------------------------------------------------------------ metrics

    def metrics(self) -> dict:
        """Counters and latencies of this batcher.

        Returns
        -------
        dict
            ``requests`` (caller calls), ``batches`` (successful executions), ``rows``
            (real rows run), ``mean_batch_fill`` (rows / bucket rows, in [0, 1]),
            ``mean_batch_size`` (rows / batches), ``queue_wait_ms`` and ``exec_ms``
            (``{"p50", "p90", "p99", "mean"}`` over the last 10000 samples; queue wait is
            from the call to the start of its batch, exec is ``plan.execute``),
            ``plans_built``, ``buckets_used`` (sorted bucket sizes run), ``errors``
            (failed batches), ``cancelled`` (cancelled calls), ``pending`` (batches in
            flight), ``buckets`` (the policy's sizes), ``devices`` (one dict per device,
            in the order given: ``device`` (its spec), ``batches``, ``rows``, ``errors``,
            ``pending`` (batches in flight there), ``plans_built``, ``exec_ms``,
            ``lane`` (its index in that order: two CPU devices share the spec "cpu"),
            ``closed`` (True once the lane left the dispatch, its device being closed),
            ``retried`` (batches that failed there before executing and ran on another
            lane)).
        """
        return {
            "requests": self._n_requests,
            "batches": self._n_batches,
            "rows": self._n_rows,
            "mean_batch_fill": (self._n_rows / self._n_bucket_rows
                                if self._n_bucket_rows else 0.0),
            "mean_batch_size": self._n_rows / self._n_batches if self._n_batches else 0.0,
            "queue_wait_ms": _percentiles(self._queue_wait_ms),
            "exec_ms": _percentiles(self._exec_ms),
            "plans_built": self._plans_built,
            "buckets_used": sorted(self._buckets_used),
            "errors": self._n_errors,
            "cancelled": self._n_cancelled,
            "pending": self._inflight,
            "buckets": list(self.buckets),
            "devices": [{"lane": ln.index,
                         "device": getattr(ln.device, "spec", type(ln.device).__name__),
                         "closed": ln.closed, "retried": ln.retried,
                         "batches": ln.batches, "rows": ln.rows, "errors": ln.errors,
                         "pending": ln.inflight, "plans_built": len(ln.plans),
                         "exec_ms": _percentiles(ln.exec_ms)} for ln in self._lanes],
        }

    def __repr__(self) -> str:
        return (f"DynamicBatcher(graph={getattr(self._graph, 'name', '?')!r}, "
                f"inputs={list(self.inputs)}, outputs={list(self.outputs)}, "
                f"max_batch_size={self.max_batch_size}, max_delay_ms={self.max_delay_ms}, "
                f"buckets={list(self.buckets)}, state={self._state!r})")
