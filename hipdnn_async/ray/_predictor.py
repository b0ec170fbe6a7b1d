"""The Ray Data side: ``Predictor``, a callable class for ``Dataset.map_batches``.

Ray Data calls a callable class's ``__call__`` from a thread without an event loop, so
the Predictor runs its own: an anyio blocking portal (one event-loop thread per actor) in
which ``ModelHost`` opens the device and the model once, at construction, and each batch
is awaited there. Nothing here calls ``asyncio.run``; no loop of Ray's is borrowed.
"""
from __future__ import annotations

import asyncio
import logging
import concurrent.futures
import sys
import threading
import weakref
from typing import Mapping

import anyio
import anyio.from_thread
import numpy as np

from .._errors import DeviceError, VariantPackError
from ..queues import interpreter_exiting
from . import _requests
from ._requests import ModelInputs
from ._session import ModelHost, _assigned_gpus, worker_device

__all__ = ["Predictor"]

log = logging.getLogger("hipdnn_async")

_CLOSE_TIMEOUT_S = 60.0            # bound on draining the model and device at close
_CANCEL_TIMEOUT_S = 10.0           # bound on the loop thread ending once cancelled


class _LoopThread:
    """An asyncio event loop on a daemon thread, reached through an anyio BlockingPortal.

    anyio's ``start_blocking_portal`` joins its thread without a bound, and a Predictor
    is closed from finalizers and at exit (Ray shuts its workers down there), where one
    model that does not stop would hang the process: here every wait is bounded.
    """

    def __init__(self, name: str):
        started: concurrent.futures.Future = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._main, args=(started,), name=name,
                                       daemon=True)
        self.thread.start()
        self.portal, self._loop = started.result()

    @staticmethod
    def _main(started: concurrent.futures.Future) -> None:
        async def serve():
            async with anyio.from_thread.BlockingPortal() as portal:
                started.set_result((portal, asyncio.get_running_loop()))
                await portal.sleep_until_stopped()
        try:
            anyio.run(serve, backend="asyncio")
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self, *, cancel: bool, timeout: float) -> bool:
        """Stop the loop (cancelling what still runs in it if `cancel`); wait up to
        `timeout` s for the thread to end. True if it has ended."""
        if self.thread.is_alive():
            self.call_soon(lambda: self._loop.create_task(self.portal.stop(cancel)))
            self.thread.join(timeout)
        return not self.thread.is_alive()

    def call_soon(self, fn) -> None:
        """Run ``fn()`` on the loop thread soon; never waits (the portal's own calls wait
        for the loop to take them, and a blocked loop never does)."""
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:              # the loop has closed already
            pass


def _finalize(loop: _LoopThread, host: ModelHost, run: concurrent.futures.Future,
              spec: str) -> None:
    """The weakref.finalize callback: the Predictor was collected, or the interpreter is
    exiting (finalize's atexit hook). A collection may run on any thread at any moment,
    one holding a lock the close needs included (the import lock, a stream's): the close
    is handed to a thread of its own then and nobody waits. At exit it runs here, so that
    it is done before the interpreter freezes its threads."""
    if interpreter_exiting():
        _close(loop, host, run, spec)
        return
    # not a daemon: a close still running when the interpreter exits is waited for (it is
    # bounded: 60 s, then a cancel and 10 s more), so the model's aclose is not cut off
    threading.Thread(target=_close_logged, args=(loop, host, run, spec), daemon=False,
                     name="hipdnn_async.ray.Predictor close").start()


def _close_logged(*args) -> None:
    try:
        _close(*args)
    except Exception as exc:  # noqa: BLE001 - nobody to raise to: say it
        log.warning("hipdnn_async.ray: closing a collected Predictor: %s", exc)


def _close(loop: _LoopThread, host: ModelHost, run: concurrent.futures.Future,
           spec: str) -> None:
    """Stop the model host (it drains the model, then the device) and the loop thread.

    From ``close()``, from the finalizer (collected, or at exit while threads still run);
    not once the interpreter is finalizing: its threads are frozen then and nothing could
    finish.
    """
    if sys.is_finalizing() or not loop.alive():
        return
    if threading.current_thread() is loop.thread:
        # close() called from the model itself, on the loop thread: waiting here would
        # stop the very loop that has to do the closing
        threading.Thread(target=_close_logged, args=(loop, host, run, spec), daemon=True,
                         name="hipdnn_async.ray.Predictor close").start()
        return
    try:
        loop.call_soon(host.stop)                  # never blocks, even on a busy loop
        run.result(timeout=_CLOSE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        ended = loop.stop(cancel=True, timeout=_CANCEL_TIMEOUT_S)
        raise DeviceError(f"Predictor on '{spec}': the model and device did not close "
                          f"within {_CLOSE_TIMEOUT_S:g} s; cancelled them"
                          + ("" if ended else f", but the event-loop thread is still busy "
                             f"after {_CANCEL_TIMEOUT_S:g} s more (a blocking call in the "
                             "model?) and was left behind")) from None
    except BaseException:
        loop.stop(cancel=True, timeout=_CANCEL_TIMEOUT_S)
        raise
    loop.stop(cancel=False, timeout=_CANCEL_TIMEOUT_S)


class Predictor:
    """Run a model on each batch of a Ray Data dataset, one device per actor.

    Use as ``ds.map_batches(Predictor, fn_constructor_args=(model_factory,),
    compute=ray.data.ActorPoolStrategy(size=k), num_gpus=1 | 0, batch_size=...)``
    (Ray 2.60: ``compute=``, not the deprecated ``concurrency=``).

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
        self._host = ModelHost(model_factory, self.spec, device_options)
        loop = _LoopThread("hipdnn_async.ray.Predictor loop")
        try:
            self._run, model = loop.portal.start_task(self._host.run,
                                                      name="hipdnn_async.ray.Predictor")
        except BaseException:
            loop.stop(cancel=True, timeout=_CANCEL_TIMEOUT_S)
            raise
        self._portal = loop.portal
        self._finalizer = weakref.finalize(self, _finalize, loop, self._host, self._run,
                                           self.spec)
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
        try:
            y = self._portal.call(self._predict, rows)
        except RuntimeError:
            if self._closed:                  # closed meanwhile: the portal has stopped
                raise DeviceError(f"Predictor on '{self.spec}': closed") from None
            raise
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

        Also done when the Predictor is collected and at interpreter exit. Idempotent.

        Raises
        ------
        DeviceError
            The model and device did not close within 60 s; they were cancelled (and the
            event-loop thread, should it not end either, left behind).
        """
        self._closed = True
        finalizer = getattr(self, "_finalizer", None)
        detached = finalizer.detach() if finalizer is not None else None
        if detached is not None:              # not closed before: close here, and wait
            _, _, args, _ = detached
            _close(*args)

    def __repr__(self) -> str:
        return (f"Predictor(device={self.spec!r}, input_column={self.input_column!r}, "
                f"output_column={self.output_column!r})")
