"""The Ray Serve side: ``deployment(...)`` and the replica class it deploys.

Each replica opens one device (on a GPU replica, the GPU Ray assigned it), builds and
warms up the model in ``__init__`` (Serve reports a replica healthy only once its
constructor has returned), and coalesces concurrent requests with Serve's own
``@serve.batch``, counting rows, not requests, against ``max_batch_size``
(``batch_size_fn``). A request larger than ``max_batch_size`` rows is split into pieces
that are batched like separate requests and joined again in order.

Malformed requests are refused before they are batched, so they never fail a batch of
good ones: a model that declares ``sample_shape`` / ``dtype`` has each request checked
against them; for a model that does not, requests are batched only with requests of the
same trailing shape and dtype, and where the model refuses such a batch with a
``ValueError`` (``VariantPackError`` is one) each of its requests is run again on its
own, so that only the bad one fails. Over HTTP a refusal is a 4xx with the reason.

Shutdown: Serve stops routing to the replica and waits for its requests in flight
(``graceful_shutdown_timeout_s``); then ``__del__`` closes the model (a batcher drains
its batches) and the device.
"""
from __future__ import annotations

import asyncio
import math
import numbers
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from .._errors import DeviceError, ExecutionError, GraphError, VariantPackError
from ..runtime._kinds import ray_resource
from . import _requests
from ._deps import require_ray
from ._metrics import ReplicaMetrics
from ._requests import HttpError, ModelInputs
from ._session import ModelHost, _assigned_gpus, parse_device, worker_device

__all__ = ["deployment", "ModelReplica"]


@dataclass(eq=False)
class _Piece:
    """At most max_batch_size rows of one request, queued for a batch."""

    rows: np.ndarray
    enqueued: float                # time.perf_counter()


@dataclass(eq=False)
class _Outcome:
    """One piece's result or error (serve.batch hands back one value per piece)."""

    value: Any = None
    error: BaseException | None = None


def _rows_of(pieces) -> int:
    """serve.batch's batch size: rows, not requests."""
    return sum(len(p.rows) for p in pieces)


def _split(y, sizes: list[int], where: str) -> list:
    """Split a model's output (array or dict of arrays) back into per-piece rows."""
    total = sum(sizes)
    bounds = np.cumsum(sizes)[:-1]
    if isinstance(y, Mapping):
        parts = {}
        for k, v in y.items():
            v = np.asarray(v)
            if v.ndim < 1 or len(v) != total:
                raise ExecutionError(f"{where}: the model's output {k!r} has shape {v.shape} "
                                     f"for a batch of {total} rows; a model maps (N, ...) to "
                                     "(N, ...)")
            parts[k] = np.split(v, bounds)
        return [{k: parts[k][i] for k in parts} for i in range(len(sizes))]
    y = np.asarray(y)
    if y.ndim < 1 or len(y) != total:
        raise ExecutionError(f"{where}: the model returned shape {y.shape} for a batch of "
                             f"{total} rows; a model maps (N, ...) to (N, ...)")
    return np.split(y, bounds)


async def _start_host(host: ModelHost) -> asyncio.Task:
    """Run ``host.run`` as a task of this loop; return once it has started (or raise)."""
    loop = asyncio.get_running_loop()
    started = loop.create_future()

    class _Status:
        @staticmethod
        def started(value=None):
            if not started.done():
                started.set_result(value)

    task = loop.create_task(host.run(task_status=_Status()))
    await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
    if not started.done():
        task.result()              # raises why the device or the model did not open
        raise DeviceError("hipdnn_async.ray: the model host ended before it started")
    return task


class ModelReplica:
    """A Ray Serve replica: one device, one model, Serve's batching in front of it.

    Deploy it through ``deployment(...)``, which binds these arguments.

    Parameters
    ----------
    model_factory : async callable
        ``await model_factory(dev)`` returns the model; pickled to each replica.
    device : str
        ``"cpu"`` or ``"gpu:N"`` / ``"cuda:N"`` / ``"hip:N"`` (N counts the GPUs Ray
        assigned to the replica; see ``worker_device``).
    max_batch_size : int
        Most rows per model call.
    max_delay_ms : float
        Longest wait (ms) of the first request of a batch for others.
    max_concurrent_batches : int
        Model calls in flight at once.
    device_options : mapping, optional
        Keyword arguments of ``hd.Device``.

    Notes
    -----
    Calls: ``handle.remote(x)`` (or ``handle.predict.remote(x)``) with an array of rows
    (N, ...) or, where the model declares ``sample_shape``, one sample; the reply is the
    model's rows for it, in order, without the batch dim for a single sample. HTTP: POST a
    JSON array, ``{"inputs": array}`` or a ``.npy`` body (see ``_requests``); GET returns
    what the model expects. ``handle.metrics.remote()`` returns this replica's counters.
    """

    async def __init__(self, model_factory, *, device: str = "cpu", max_batch_size: int = 64,
                       max_delay_ms: float = 2.0, max_concurrent_batches: int = 2,
                       device_options=None):
        require_ray("serve")
        from ray import serve
        from starlette.requests import Request

        self._request_type = Request
        self.max_batch_size = int(max_batch_size)
        self.spec = worker_device(device)
        self._host = ModelHost(model_factory, self.spec, device_options)
        self._task = await _start_host(self._host)
        self._inputs = ModelInputs.of(self._host.model)
        self._model_name = type(self._host.model).__name__
        ctx = serve.get_replica_context()
        self._metrics = ReplicaMetrics(
            {"application": ctx.app_name, "deployment": ctx.deployment,
             "replica": ctx.replica_tag, "device": self.spec},
            max_batch_size=self.max_batch_size)
        self._batched = serve.batch(max_batch_size=self.max_batch_size,
                                    batch_wait_timeout_s=float(max_delay_ms) / 1000.0,
                                    max_concurrent_batches=int(max_concurrent_batches),
                                    batch_size_fn=_rows_of)(self._run_batch)

    # ------------------------------------------------------------------ requests

    async def __call__(self, request):
        """An HTTP request (starlette ``Request``) or a handle call with an array."""
        if isinstance(request, self._request_type):
            return await self._http(request)
        return await self.predict(request)

    async def predict(self, x):
        """Run one request; return the model's rows for it (see the class notes).

        Raises
        ------
        VariantPackError
            Malformed request (not numbers, ragged, wrong shape); nothing was run.
        DeviceError
            The replica is shutting down.
        HipdnnError, Exception
            The model call holding this request failed (only its batch's requests see it).
        """
        try:
            batch, single = _requests.as_batch(x, self._inputs)
        except VariantPackError:
            self._metrics.rejected_request()
            raise
        y = await self._run_rows(batch)
        if single:
            y = {k: v[0] for k, v in y.items()} if isinstance(y, Mapping) else y[0]
        return y

    async def _run_rows(self, batch: np.ndarray):
        if self._host.model is None:
            raise DeviceError(f"hipdnn_async.ray: replica on '{self.spec}' is shutting down; "
                              "retry on another replica")
        t0 = time.perf_counter()
        pieces = [_Piece(batch[lo:lo + self.max_batch_size], t0)
                  for lo in range(0, len(batch), self.max_batch_size)]
        outcomes = await asyncio.gather(*(self._batched(p) for p in pieces))
        failed = next((o.error for o in outcomes if o.error is not None), None)
        if failed is None:
            self._metrics.answered(len(batch), (time.perf_counter() - t0) * 1e3, ok=True)
        elif isinstance(failed, VariantPackError):     # the model refused this request
            self._metrics.rejected_request()
        else:
            self._metrics.answered(len(batch), 0.0, ok=False)
        if failed is not None:
            raise failed
        if len(outcomes) == 1:
            return outcomes[0].value
        first = outcomes[0].value
        if isinstance(first, Mapping):
            return {k: np.concatenate([o.value[k] for o in outcomes]) for k in first}
        return np.concatenate([o.value for o in outcomes])

    async def _run_batch(self, pieces: list[_Piece]) -> list[_Outcome]:
        """serve.batch's function: run coalesced pieces, one model call per input kind."""
        groups: dict[tuple, list[int]] = {}
        for i, p in enumerate(pieces):
            groups.setdefault((p.rows.shape[1:], p.rows.dtype.str), []).append(i)
        out: list[_Outcome] = [_Outcome() for _ in pieces]
        for members in groups.values():
            await self._run_group(pieces, members, out)
        return out

    async def _run_group(self, pieces, members: list[int], out: list[_Outcome]) -> None:
        model = self._host.model
        where = f"model {self._model_name} on '{self.spec}'"
        sizes = [len(pieces[i].rows) for i in members]
        x = (pieces[members[0]].rows if len(members) == 1
             else np.concatenate([pieces[i].rows for i in members]))
        t0 = time.perf_counter()
        try:
            if model is None:
                raise DeviceError(f"hipdnn_async.ray: replica on '{self.spec}' is shutting "
                                  "down; retry on another replica")
            parts = _split(await model(x), sizes, where)
        except ValueError as exc:
            if len(members) > 1:   # which request is bad? run each alone (inference: safe)
                for i in members:
                    await self._run_group(pieces, [i], out)
                return
            out[members[0]].error = exc
            return
        except Exception as exc:
            for i in members:
                out[i].error = exc
            return
        exec_ms = (time.perf_counter() - t0) * 1e3
        self._metrics.batch(sum(sizes), [(t0 - pieces[i].enqueued) * 1e3 for i in members],
                            exec_ms, model)
        for i, part in zip(members, parts):
            out[i].value = part

    # ------------------------------------------------------------------ HTTP

    async def _http(self, request):
        from starlette.responses import JSONResponse, Response

        if request.method == "GET":
            return JSONResponse(self._describe())
        if request.method != "POST":
            return JSONResponse({"error": f"method {request.method} not allowed; POST an "
                                          "array (JSON or .npy), or GET for the model's "
                                          "input"}, status_code=405,
                                headers={"Allow": "GET, POST"})
        try:
            body = await request.body()
            doc, came_as_npy = _requests.decode_body(body, request.headers.get("content-type"))
            y = await self.predict(doc)
        except HttpError as exc:
            self._metrics.rejected_request()
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except (VariantPackError, GraphError) as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=400)
        except DeviceError as exc:
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=503)
        except Exception as exc:   # the model failed: say how, keep serving
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)
        content, media = _requests.encode_reply(
            y, _requests.wants_npy(request.headers.get("accept"), came_as_npy))
        return Response(content, media_type=media)

    # ------------------------------------------------------------------ inspection
    # Serve runs a replica's sync methods on its event loop and warns about it once, so the
    # methods a caller or Serve may call are async.

    async def info(self) -> dict:
        """What this replica serves: device (and the GPU ids Ray assigned), model, the input
        it expects, batching, formats."""
        return self._describe()

    def _describe(self) -> dict:
        i = self._inputs
        return {"model": self._model_name, "device": self.spec,
                "ray_gpu_ids": [str(g) for g in _assigned_gpus()],
                "sample_shape": list(i.sample_shape) if i.sample_shape is not None else None,
                "dtype": str(i.dtype) if i.dtype is not None else None,
                "max_batch_size": self.max_batch_size,
                "formats": [_requests.JSON_MEDIA_TYPE, _requests.NPY_MEDIA_TYPES[0]]}

    async def metrics(self) -> dict:
        """This replica's counters and percentiles, and the model's own ``metrics()``."""
        return self._metrics.snapshot(self._host.model)

    async def profile(self, seconds: float = 1.0) -> dict:
        """Profile this replica's device for ``seconds`` while it serves; return the trace.

        Parameters
        ----------
        seconds : float
            How long to record, in (0, 600] s.

        Returns
        -------
        dict
            Trace-event JSON (``hipdnn_async.profiler.Profile.trace``: the replica's
            executions per stream, its model's batcher batches and requests with their
            flows), with ``otherData["replica"]`` naming the replica (``info()``'s
            fields and the Serve replica tag). Write it with ``json.dump`` for Perfetto,
            or draw it with ``hipdnn-async trace``.

        Raises
        ------
        DeviceError
            ``seconds`` out of range (code ``INVALID_VALUE``), or the replica's device has
            stopped.
        """
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) \
                or not 0 < float(seconds) <= 600:
            raise DeviceError(f"hipdnn_async.ray: profile(seconds={seconds!r}); need a number "
                              "of seconds in (0, 600]", code="INVALID_VALUE")
        dev = self._host.device
        if dev is None:
            raise DeviceError(f"hipdnn_async.ray: profile: the model on '{self.spec}' has "
                              "stopped")
        async with dev.profile() as prof:
            await asyncio.sleep(float(seconds))
        trace = prof.trace()
        trace["otherData"]["replica"] = {**self._describe(),
                                         "replica": self._metrics.tags.get("replica")}
        return trace

    async def check_health(self) -> None:
        """Serve's periodic probe: unhealthy (so replaced) once the device or model ended."""
        if self._host.stopped or self._task.done():
            raise DeviceError(f"hipdnn_async.ray: the model on '{self.spec}' has stopped"
                              + (f": {self._host.error!r}" if self._host.error else ""))

    async def reconfigure(self, config: dict) -> None:
        """Serve's ``user_config``: ``max_batch_size`` and/or ``max_delay_ms`` at run time."""
        config = dict(config or {})
        if "max_batch_size" in config:
            n = _check_batch_size(config.pop("max_batch_size"))
            self.max_batch_size = n
            self._batched.set_max_batch_size(n)
        if "max_delay_ms" in config:
            self._batched.set_batch_wait_timeout_s(_check_delay(config.pop("max_delay_ms"))
                                                   / 1000.0)
        if config:
            raise GraphError(f"hipdnn_async.ray: user_config keys {sorted(config)} are not "
                             "settings; use max_batch_size, max_delay_ms")

    def __del__(self):
        """Close the model (draining its batches), then the device.

        Serve calls this at shutdown, on the replica's event loop, and awaits what it
        returns: the close. (A sync method returning an awaitable, not an ``async def``,
        so that a garbage collector's call leaves no coroutine un-awaited.)
        """
        host, task = getattr(self, "_host", None), getattr(self, "_task", None)
        if host is None or task is None or getattr(self, "_closing", False):
            return None
        self._closing = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:       # the interpreter is exiting: nothing left to drain into
            return None
        if task.get_loop() is not loop:
            return None
        host.stop()
        return self._closed()

    async def _closed(self) -> None:
        try:
            await self._task
        except Exception:          # already reported by check_health / the requests
            pass


def _check_batch_size(n) -> int:
    if type(n) is bool or not isinstance(n, numbers.Integral) or n < 1:
        raise GraphError(f"hipdnn_async.ray: max_batch_size={n!r} must be an int >= 1")
    return int(n)


def _check_delay(ms) -> float:
    if type(ms) is bool or not isinstance(ms, numbers.Real) or not 0.0 <= float(ms) < math.inf:
        raise GraphError(f"hipdnn_async.ray: max_delay_ms={ms!r} must be a finite number "
                         ">= 0 (ms)")
    return float(ms)


def deployment(model_factory, *, device: str = "cpu", max_batch_size: int = 64,
               max_delay_ms: float = 2.0, num_replicas: int = 1, ray_actor_options=None,
               max_concurrent_batches: int = 2, device_options=None, **serve_options):
    """A Ray Serve application serving `model_factory`'s model from `num_replicas` replicas.

    Parameters
    ----------
    model_factory : async callable
        ``await model_factory(dev)`` returns the model: an async callable from a batch
        (N, ...) to outputs (N, ...), optionally with ``sample_shape``, ``dtype``,
        ``__aenter__``/``__aexit__`` or ``aclose``, ``warmup()`` and ``metrics()``. Must
        pickle (a module-level function or class, not a live device or batcher).
    device : str, optional
        ``"cpu"`` (default) or ``"gpu:0"`` (also ``"cuda:0"``, ``"hip:0"``): a GPU
        replica asks Ray for one GPU (``num_gpus=1`` unless `ray_actor_options` says
        otherwise) and opens the GPU Ray assigned it.
    max_batch_size : int, optional
        Most rows per model call (requests are coalesced up to it). Default 64.
    max_delay_ms : float, optional
        Longest wait (ms) of a batch's first request for more. Default 2.0.
    num_replicas : int or "auto", optional
        Replicas (Serve's option). Default 1.
    ray_actor_options : dict, optional
        Ray resources per replica (``num_cpus``, ``num_gpus``, ``runtime_env``...).
    max_concurrent_batches : int, optional
        Model calls in flight per replica (one fills while another runs). Default 2.
    device_options : dict, optional
        Keyword arguments of ``hd.Device`` (``streams``, ``perfdb``...).
    **serve_options
        Other ``serve.deployment`` options (``name``, default ``"HipdnnModel"``;
        ``max_ongoing_requests``, default ``max_batch_size * max_concurrent_batches``, so
        that batches can fill; ``health_check_period_s``...).

    Returns
    -------
    ray.serve.Application
        Run it with ``serve.run(app, name=..., route_prefix=...)``.

    Raises
    ------
    ImportError
        Ray Serve is not installed (the ``ray`` extra).
    DeviceError
        A malformed device spec.
    GraphError
        `model_factory` is not callable, or `max_batch_size`, `max_delay_ms` or
        `max_concurrent_batches` out of range.
    """
    require_ray("serve")
    from ray import serve

    if not callable(model_factory):
        raise GraphError(f"hipdnn_async.ray.deployment: model_factory must be an async "
                         f"callable model_factory(dev); got {type(model_factory).__name__}")
    kind, _ = parse_device(device)
    max_batch_size = _check_batch_size(max_batch_size)
    max_delay_ms = _check_delay(max_delay_ms)
    if type(max_concurrent_batches) is not int or max_concurrent_batches < 1:
        raise GraphError(f"hipdnn_async.ray.deployment: max_concurrent_batches="
                         f"{max_concurrent_batches!r} must be an int >= 1")
    actor = dict(ray_actor_options or {})
    if ray_resource(kind) == "GPU":     # the kind's Ray resource (runtime.KINDS)
        actor.setdefault("num_gpus", 1)
    serve_options.setdefault("name", "HipdnnModel")
    serve_options.setdefault("max_ongoing_requests", max_batch_size * max_concurrent_batches)
    dep = serve.deployment(ModelReplica, num_replicas=num_replicas, ray_actor_options=actor,
                           **serve_options)
    return dep.bind(model_factory, device=device, max_batch_size=max_batch_size,
                    max_delay_ms=max_delay_ms, max_concurrent_batches=max_concurrent_batches,
                    device_options=device_options)
