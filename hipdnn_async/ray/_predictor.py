"""The Ray Data side: ``Predictor``, a callable class for ``Dataset.map_batches``.

Ray Data calls a callable class's ``__call__`` from a thread without an event loop, so
the Predictor runs its own: an anyio blocking portal (one event-loop thread per actor) in
which ``ModelHost`` opens the device and the model once, at construction, and each batch
is awaited there. Nothing here calls ``asyncio.run``; no loop of Ray's is borrowed.
"""
from __future__ import annotations

import contextlib
from typing import Mapping

import anyio.from_thread
import numpy as np

from .._errors import DeviceError, VariantPackError
from . import _requests
from ._requests import ModelInputs
from ._session import ModelHost, _assigned_gpus, worker_device

__all__ = ["Predictor"]

_CLOSE_TIMEOUT_S = 60.0            # bound on draining the model and device at close


class Predictor:
    """Run a model on each batch of a Ray Data dataset, one device per actor.

    Use as ``ds.map_batches(Predictor, fn_constructor_args=(model_factory,),
    concurrency=k, num_gpus=1 | 0, batch_size=...)``.

    Parameters
    ----------
    model_factory : async callable
        ``await model_factory(dev)`` returns the model (see ``hipdnn_async.ray``).
    device : str, optional
        ``"cpu"``, ``"gpu:N"``... Default None: the first GPU Ray assigned to this actor
        (``num_gpus=1`` in ``map_batches``), else the CPU.
    input_column : str, optional
        The batch column holding the model's input rows. Default ``"data"`` (the column
        of ``ray.data.from_numpy``).
    output_column : str, optional
        Column the outputs go to. Default ``"outputs"``. A model returning a dict of
        arrays gives one column per key instead.
    device_options : mapping, optional
        Keyword arguments of ``hd.Device``.

    Notes
    -----
    Each batch (a dict of NumPy columns, ``batch_format="numpy"``; or a bare array)
    comes back with the input column replaced by the output column(s) and every other
    column kept, row for row, so ids and labels travel with their predictions. The device
    and the model are opened when the actor starts (errors surface there, not in the first
    batch) and closed, drained, by ``close()`` or when the actor goes away.

    Raises
    ------
    VariantPackError
        (per batch) The input column is missing or its rows do not fit the model (shape,
        not numbers, or a NaN, infinite or out-of-range value for the model's dtype).
    DeviceError
        (at construction) The device does not open.
    GraphError
        (at construction) `model_factory` is not an async callable, or the model it
        returns is None or not callable.
    """

    def __init__(self, model_factory, *, device: str | None = None,
                 input_column: str = "data", output_column: str = "outputs",
                 device_options=None):
        if device is None:
            device = "gpu:0" if _assigned_gpus() else "cpu"
        self.spec = worker_device(device)
        self.input_column = input_column
        self.output_column = output_column
        self._stack = contextlib.ExitStack()
        try:
            self._portal = self._stack.enter_context(
                anyio.from_thread.start_blocking_portal(backend="asyncio"))
            self._host = ModelHost(model_factory, self.spec, device_options)
            self._run, model = self._portal.start_task(self._host.run,
                                                       name="hipdnn_async.ray.Predictor")
        except BaseException:
            self._stack.close()
            raise
        self._inputs = ModelInputs.of(model)
        self._closed = False

    async def _predict(self, x: np.ndarray):
        model = self._host.model
        if model is None:
            raise DeviceError(f"Predictor on '{self.spec}': closed")
        return await model(x)

    def __call__(self, batch):
        """Outputs of one batch; see the class notes for the columns."""
        if self._closed:
            raise DeviceError(f"Predictor on '{self.spec}': closed")
        columns = isinstance(batch, Mapping)
        if columns and self.input_column not in batch:
            raise VariantPackError(f"Predictor: batch has no column {self.input_column!r}; "
                                   f"columns are {sorted(batch)} (set input_column=)")
        x = batch[self.input_column] if columns else batch
        rows, _ = _requests.as_batch(x, self._inputs, allow_single=False,
                                     where=f"Predictor column {self.input_column!r}")
        y = self._portal.call(self._predict, rows)
        if not columns:
            return y
        out = {k: v for k, v in batch.items() if k != self.input_column}
        if isinstance(y, Mapping):
            out.update({k: np.asarray(v) for k, v in y.items()})
        else:
            out[self.output_column] = np.asarray(y)
        return out

    def close(self) -> None:
        """Close the model (draining it) and the device, then the event-loop thread.

        Raises
        ------
        DeviceError
            The model and device did not close within 60 s; they were cancelled and the
            event-loop thread has ended.
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:
            self._portal.call(self._host.stop)
            self._run.result(timeout=_CLOSE_TIMEOUT_S)
        except BaseException as exc:
            # Handing the exception to the portal's exit cancels what is still running
            # there; a plain close would wait for it, and join the loop thread, forever.
            self._stack.__exit__(type(exc), exc, exc.__traceback__)
            if isinstance(exc, TimeoutError):
                raise DeviceError(f"Predictor on '{self.spec}': the model and device did "
                                  f"not close within {_CLOSE_TIMEOUT_S:g} s; cancelled "
                                  "them") from exc
            raise
        self._stack.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return (f"Predictor(device={self.spec!r}, input_column={self.input_column!r}, "
                f"output_column={self.output_column!r})")
