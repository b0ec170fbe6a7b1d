"""The public class ``DynamicBatcher``: its arguments, its lifetime (``async with``), the
call a request makes, and ``metrics()``; the work is done by the modules beside it (see
the package docstring)."""
from __future__ import annotations

import time
from _thread import get_ident as _thread_id
from typing import Any, Mapping, Sequence

import anyio
import numpy as np

from .._errors import DeviceError, GraphError
from .._types import numpy_dtype
from ..graph._tensor import as_int_tuple
from ._buckets import PlanCache, bucket_for, resolve_buckets
from ._classify import check_pattern, classify
from ._constants import prepare_constant
from ._dispatch import Dispatcher
from ._lanes import Lanes, n_streams
from ._metrics import BatcherMetrics
from ._options import (check_constants, check_delay, check_devices, check_knobs, check_names,
                       check_positive_int)
from ._requests import Request, check_request, split_request
from ._wake import current_waits

__all__ = ["DynamicBatcher"]

_perf_counter = time.perf_counter


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
        self.max_batch_size = check_positive_int("max_batch_size", max_batch_size)
        self.max_delay_ms = check_delay(max_delay_ms)
        devices = check_devices(device)
        check_constants(constants)
        check_names("inputs", inputs)
        check_names("outputs", outputs)
        self._lanes = Lanes(devices)
        self._graph = graph
        knobs = check_knobs(knobs)
        self.buckets = resolve_buckets(buckets, self.max_batch_size)
        if max_concurrent_batches is None:
            max_concurrent_batches = sum(n_streams(d) for d in devices)
        self.max_concurrent_batches = check_positive_int("max_concurrent_batches",
                                                         max_concurrent_batches)

        self._pattern_checked = check_pattern(graph)
        constants = constants or {}
        self._roles = classify(graph, inputs, outputs, constants)
        self.inputs, self.outputs = self._roles.inputs, self._roles.outputs
        for name, t in self._roles.constant_tensors.items():
            host = prepare_constant(name, t, constants[name])
            for lane in self._lanes:
                lane.upload_constant(name, t, host)
        self._plans = PlanCache(graph, knobs, self._roles)
        self._metrics = BatcherMetrics()

        # A request of the single input, as an ndarray of its dtype and dims past N, is
        # checked by these alone (``__call__``); anything else by ``check_request``.
        self._one_input = None
        if len(self.inputs) == 1:
            t = self._roles.in_tensors[self.inputs[0]]
            self._one_input = (len(t.dims), tuple(int(d) for d in t.dims[1:]),
                               np.dtype(numpy_dtype(t.data_type)))

        self._state = "new"             # new -> running -> closing -> closed
        self._tg = None
        self._waits = None              # the loop's waiters (_wake), when it starts
        self._loop_thread = None        # the thread its event loop runs on, when it starts
        self._dispatch: Dispatcher | None = None     # made when the batcher starts

    # ------------------------------------------------------------------ properties

    @property
    def devices(self) -> tuple:
        """The devices this batcher runs on, in the order given."""
        return tuple(lane.device for lane in self._lanes)

    @property
    def sample_shape(self) -> tuple | None:
        """Dims of one sample of the single batched input (its dims past N), or None when
        there are several inputs; a served model declares it (``hipdnn_async.ray``)."""
        if len(self.inputs) != 1:
            return None
        return tuple(int(d) for d in self._roles.in_tensors[self.inputs[0]].dims[1:])

    @property
    def dtype(self) -> np.dtype | None:
        """NumPy dtype a request of the single batched input must have, or None when there
        are several inputs (``hipdnn_async.ray`` casts HTTP and Ray Data rows to it)."""
        if len(self.inputs) != 1:
            return None
        return np.dtype(numpy_dtype(self._roles.in_tensors[self.inputs[0]].data_type))

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> "DynamicBatcher":
        if self._state != "new":
            raise DeviceError(f"DynamicBatcher: cannot start a batcher that is {self._state}",
                              code="INVALID_VALUE")
        if not self._pattern_checked:
            await self._plans.get(self._lanes[0], self.buckets[0])   # checks plan.pattern
        self._tg = anyio.create_task_group()
        self._waits = current_waits()
        self._loop_thread = _thread_id()
        self._dispatch = Dispatcher(
            self._tg, self._waits, roles=self._roles, lanes=self._lanes, plans=self._plans,
            metrics=self._metrics, buckets=self.buckets, max_batch_size=self.max_batch_size,
            max_delay_ms=self.max_delay_ms,
            max_concurrent_batches=self.max_concurrent_batches)
        await self._tg.__aenter__()
        self._state = "running"
        self._tg.start_soon(self._dispatch.collect)
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
            self._dispatch.close()

    async def aclose(self) -> None:
        """Stop accepting requests, run every pending one, and wait until none is in flight."""
        if self._state in ("new", "closed"):
            self._state = "closed"
            return
        self._stop_accepting()
        await self._dispatch.drained.wait()
        await self._dispatch.idle.wait()

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
            device and C-contiguous when copied back from a GPU. Each is a view of this
            caller's rows of its batch's output array (made for that batch, written by no
            later one), which it keeps alive; a request split into pieces gets a new
            array of its rows concatenated.

        Raises
        ------
        VariantPackError
            A missing or unknown input, a shape or dtype that does not match, or
            different N_k.
        DeviceError
            The batcher is not running (use ``async with``), it is called from another
            thread than its event loop's, or on a GPU a copy to or from the device failed
            (the message names the tensor).
        ExecutionError
            The batch holding this request failed.
        """
        if self._state != "running":
            raise DeviceError(f"DynamicBatcher: not running (state {self._state}); call it "
                              "inside 'async with DynamicBatcher(...) as batcher:'",
                              code="INVALID_VALUE")
        if _thread_id() != self._loop_thread:
            # its waiters and queues belong to its own event loop (one thread)
            raise DeviceError("DynamicBatcher: called from another thread's event loop; "
                              "call it from the loop that entered 'async with' (from "
                              "another thread: anyio.from_thread.run or "
                              "asyncio.run_coroutine_threadsafe on that loop)",
                              code="INVALID_VALUE")
        waits = self._waits
        one = self._one_input
        if (one is not None and type(request) is np.ndarray and request.ndim == one[0]
                and request.dtype == one[2] and request.shape[1:] == one[1]
                and 0 < request.shape[0] <= self.max_batch_size):
            # the common request: one input's rows as they are, one piece
            req = Request((request,), request.shape[0], _perf_counter(), waits.now(),
                          waits.new())
            self._metrics.requests += 1
            self._dispatch.put(req)
            try:
                await waits.wait(req.waiter)
            except BaseException:
                if not req.done:
                    self._dispatch.cancel(req)
                self._metrics.cancelled += 1
                raise
            if req.error is not None:
                raise req.error
            return req.result
        arrays, n = check_request(self._roles, request)
        pieces = split_request(arrays, n, self.max_batch_size, _perf_counter(), waits.now(),
                               waits.new)
        self._metrics.requests += 1
        try:
            for p in pieces:
                self._dispatch.put(p)
            for p in pieces:
                await waits.wait(p.waiter)
        except BaseException:
            for p in pieces:
                if not p.done:
                    self._dispatch.cancel(p)
            self._metrics.cancelled += 1
            raise
        for p in pieces:
            if p.error is not None:
                raise p.error
        if len(pieces) == 1:
            return pieces[0].result
        if len(self.outputs) == 1:
            return np.concatenate([p.result for p in pieces])
        return {k: np.concatenate([p.result[k] for p in pieces]) for k in self.outputs}

    # ------------------------------------------------------------------ plans

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
        return bucket_for(self.buckets, rows)

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
                await self._plans.get(lane, size)

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
        return self._metrics.snapshot(
            lanes=self._lanes, plans_built=self._plans.built,
            pending=self._dispatch.inflight if self._dispatch is not None else 0,
            buckets=self.buckets)

    def __repr__(self) -> str:
        return (f"DynamicBatcher(graph={getattr(self._graph, 'name', '?')!r}, "
                f"inputs={list(self.inputs)}, outputs={list(self.outputs)}, "
                f"max_batch_size={self.max_batch_size}, max_delay_ms={self.max_delay_ms}, "
                f"buckets={list(self.buckets)}, state={self._state!r})")
