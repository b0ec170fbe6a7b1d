"""One device and one model for the life of a Ray worker (a Serve replica, a Data actor).

``ModelHost.run`` opens the device, builds the model with the user's factory, enters it,
warms it up, reports that it has started and then waits until ``stop()``; leaving, it
closes the model (a ``DynamicBatcher`` drains its pending batches) and then the device
(which drains its streams). Everything is entered and left by that one task: anyio task
groups, such as a batcher's, must be left by the task that entered them, while a Serve
replica's ``__init__`` and ``__del__`` run as different tasks.

``worker_device`` maps the user's device spec to the GPU that Ray assigned to this worker.
"""
from __future__ import annotations

import contextlib
import inspect
import os

import anyio

from .._errors import DeviceError, GraphError
from ..runtime._kinds import KINDS, parse_spec, ray_resource

__all__ = ["ModelHost", "parse_device", "worker_device"]


def parse_device(spec) -> tuple[str, int]:
    """``"gpu:1"`` -> ``("gpu", 1)``; a bare kind is index 0.

    Raises
    ------
    DeviceError
        Not ``cpu``, ``gpu[:N]``, ``cuda[:N]`` or ``hip[:N]`` (a kind of ``runtime.KINDS``).
    """
    return parse_spec(spec, "hipdnn_async.ray")


def _assigned_gpus() -> list:
    """The GPU ids Ray assigned to this worker; [] outside a Ray worker or with none."""
    import sys
    ray = sys.modules.get("ray")
    is_initialized = getattr(ray, "is_initialized", None)   # None: Ray absent
    if is_initialized is None or not is_initialized():
        return []
    try:
        return list(ray.get_gpu_ids())
    except Exception:  # a driver, or a Ray without GPU bookkeeping here
        return []


def worker_device(spec) -> str:
    """The device spec to open in this worker for the user's `spec`.

    On a GPU worker (Ray assigned it GPUs: ``num_gpus`` >= 1) index N of ``"gpu:N"`` means
    the N-th GPU Ray assigned. Ray makes those visible to the process as 0, 1, ... (it
    sets ``CUDA_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES``), so the in-process index is N;
    where Ray was told not to set them, it is the assigned id itself. Elsewhere (the CPU,
    no Ray, no GPUs assigned) the spec is used as given.

    Raises
    ------
    DeviceError
        A malformed spec, or an index past the GPUs Ray assigned.
    """
    kind, index = parse_device(spec)
    if ray_resource(kind) is None:   # the host: Ray assigns it no device
        return kind
    ids = _assigned_gpus()
    if not ids:
        return f"{kind}:{index}"
    if index >= len(ids):
        raise DeviceError(f"hipdnn_async.ray: device {spec!r} asks for GPU {index} of this "
                          f"worker, but Ray assigned it {len(ids)} (ids {ids}); use "
                          f"'{kind}:0'" + (f"..'{kind}:{len(ids) - 1}'" if len(ids) > 1 else ""),
                          code="INVALID_VALUE")
    # Ray leaves the visibility variables unset when one of these is set: in-process GPU
    # indices are then the physical ids
    if any(os.environ.get(v) for k in KINDS.values() for v in k.ray_noset):
        return f"{kind}:{int(ids[index])}"
    return f"{kind}:{index}"


class ModelHost:
    """Owns one ``hd.Device`` and the model its factory makes, from start to stop.

    Parameters
    ----------
    model_factory : async callable
        ``await model_factory(dev)`` returns the model (see ``hipdnn_async.ray``).
    spec : str
        Device spec to open (already mapped by ``worker_device``).
    device_options : mapping, optional
        Keyword arguments of ``hd.Device`` (``streams``, ``perfdb``, ...).

    Raises
    ------
    GraphError
        `model_factory` is not callable (here), or (from ``run``) it is not async or its
        model is None or not callable.

    Attributes
    ----------
    model : object or None
        The entered, warmed-up model while running; None before and after.
    device : hipdnn_async.Device or None
    error : BaseException or None
        Why ``run`` ended early, if it did.
    """

    def __init__(self, model_factory, spec: str, device_options=None):
        if not callable(model_factory):
            raise GraphError(f"hipdnn_async.ray: model_factory must be an async callable "
                             f"model_factory(dev); got {type(model_factory).__name__}")
        self.factory = model_factory
        self.spec = spec
        self.device_options = dict(device_options or {})
        self.model = None
        self.device = None
        self.error: BaseException | None = None
        self.stopped = False
        self._stop: anyio.Event | None = None

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Open, warm up, ``task_status.started(model)``, wait for ``stop()``, close."""
        import hipdnn_async as hd
        self._stop = anyio.Event()
        try:
            async with hd.Device(self.spec, **self.device_options) as dev:
                made = self.factory(dev)
                if not inspect.isawaitable(made):
                    raise GraphError(f"hipdnn_async.ray: model_factory(dev) returned "
                                     f"{type(made).__name__}, not an awaitable; "
                                     "model_factory must be an async callable")
                model = await made
                if model is None or not callable(model):
                    raise GraphError(f"hipdnn_async.ray: model_factory returned "
                                     f"{type(model).__name__}; it must return an async "
                                     "callable model(batch) -> outputs")
                async with contextlib.AsyncExitStack() as stack:
                    if hasattr(type(model), "__aenter__"):
                        model = await stack.enter_async_context(model)
                    elif callable(getattr(model, "aclose", None)):
                        stack.push_async_callback(model.aclose)
                    if callable(getattr(model, "warmup", None)):
                        await model.warmup()
                    self.device, self.model = dev, model
                    task_status.started(model)
                    await self._stop.wait()
                    self.model = None         # no new calls while the model drains
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self.model = self.device = None
            self.stopped = True

    def stop(self) -> None:
        """Ask ``run`` to close the model and the device (call from its event loop)."""
        if self._stop is not None:
            self._stop.set()
