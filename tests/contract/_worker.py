"""A fresh Python process whose GPU libraries are the fakes.

The library loader keeps process-wide state (a loaded CUDA runtime stays loaded; the
rest of the suite expects none), so every use of the fakes runs in a spawned worker
process with ``HIPDNN_ASYNC_CUDART`` / ``HIPDNN_ASYNC_CUDNN`` pointing at them. Tests
send module-level functions (``_scenarios.py``) and get their picklable results back;
exceptions come back as themselves (hipdnn_async errors pickle with their fields).

One worker serves a test module (fixture ``fake_gpu``); a worker that dies (a crash in a
fake or a binding) is replaced for the next call, and the call that saw it fails with the
process's exit code.
"""
from __future__ import annotations

import multiprocessing
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

__all__ = ["FakeGpuProcess", "WorkerDied"]


class WorkerDied(RuntimeError):
    """The worker process ended during a call (a segfault in a fake or a binding?)."""


def _init(env: dict) -> None:
    os.environ.update(env)
    os.environ.pop("HIPDNN_ASYNC_FORCE_BENCHMARKING", None)
    os.environ.pop("HIPDNN_FORCE_BENCHMARKING", None)
    warnings.simplefilter("error")      # as pytest's filterwarnings = error


class FakeGpuProcess:
    """A worker process with the loader pointed at the fakes.

    Parameters
    ----------
    env : dict
        Environment added in the worker (the override variables, a perf db path, ...).
    """

    def __init__(self, env: dict):
        self.env = dict(env)
        self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(1, mp_context=ctx, initializer=_init,
                                             initargs=(self.env,))
        return self._pool

    def call(self, fn, *args, timeout: float = 300, **kwargs):
        """Run ``fn(*args, **kwargs)`` in the worker; return its result or raise its error.

        Raises
        ------
        WorkerDied
            The worker process ended during the call (it is replaced for the next one).
        """
        future = self._executor().submit(fn, *args, **kwargs)
        try:
            return future.result(timeout=timeout)
        except BrokenProcessPool as exc:
            self.restart()
            raise WorkerDied(f"the fake-GPU worker died running {fn.__name__}: {exc}") from None

    def restart(self) -> None:
        """Replace the worker (fresh loader state)."""
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
