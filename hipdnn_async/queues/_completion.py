"""Completion: the handle of one work item on a stream.

A completion is finished exactly once, by the stream's backend (the CPU worker thread,
or a GPU backend's event watcher), with a result or an error. Waiters are woken as:

- event loops (asyncio, trio): one thread-safe callback per item and per loop that has
  an awaiter (``_asyncio.post`` / ``_trio.post``); each awaiting task registers its loop
  (through sniffio) when it awaits;
- plain threads: a ``threading.Event`` created on first use.

No polling, no thread per call.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback

import anyio
import anyio.lowlevel
import sniffio

from .. import _fork
from .._errors import DeviceError, ExecutionError, HipdnnError

__all__ = ["Completion"]

_log = logging.getLogger("hipdnn_async.queues")

from . import _core

_DONE, _RUNNING = _core.DONE, _core.RUNNING
# unheld in a fork child (a parent thread publishing at the fork is gone there)
_STATE_LOCK = _fork.reinit_in_child(threading.Lock())
_clock = time.perf_counter
# How long an awaiter of a launched GPU item polls between loop iterations before it
# waits for the completion thread (seconds).
SPIN_S = 50e-6
_LOOP_MODULES: dict = {}


def _loop_module(name: str):
    """Return the loop-specific module (``_asyncio`` or ``_trio``) for a sniffio name."""
    mod = _LOOP_MODULES.get(name)
    if mod is None:
        if name == "asyncio":
            from . import _asyncio as mod
        elif name == "trio":
            from . import _trio as mod
        else:
            raise DeviceError(f"queues: async library {name!r} is not supported; "
                              "use asyncio or trio (directly or through anyio)")
        _LOOP_MODULES[name] = mod
    return mod


def _current_loop():
    """Return (loop module, loop token) of the calling task, or (None, None) off-loop."""
    try:
        name = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        return None, None
    mod = _loop_module(name)
    try:
        return mod, mod.current_token()
    except RuntimeError:  # the library is named but no loop runs in this thread
        return None, None


class _LoopWaiter:
    """Awaiters of one completion in one event loop: one loop-local event, one wake-up."""

    __slots__ = ("mod", "token", "event")

    def __init__(self, mod, token):
        self.mod = mod
        self.token = token
        self.event = None  # anyio.Event, created on the loop by the first awaiter


class Completion(_core.CompletionCore):
    """Handle for one work item: awaitable from asyncio and trio, waitable from threads.

    Parameters
    ----------
    fn : callable
        ``fn()`` runs on the stream's worker; its return value is the result.
    keepalive : object, optional
        Anything (buffers, workspace) the queue must reference until ``fn`` has finished
        executing; dropped right after. Default ``()``.
    label : str, optional
        What the item is, for error messages, e.g. ``"plan 'conv1' (engine CPU_ENGINE)"``.

    Notes
    -----
    ``await completion`` returns ``fn()``'s value or raises its error; it may be awaited
    any number of times, from any number of tasks and loops. Cancelling an awaiter does not
    cancel the work. An exception in ``fn`` becomes :class:`ExecutionError` naming the
    label (the original is its ``__cause__``); a :class:`HipdnnError` passes unchanged.
    Timestamps are ``time.perf_counter()`` seconds.
    """

    # The fields live in ``CompletionCore`` (typed, for the C submission path):
    # label, stream, submitted_at, started_at, finished_at, and the private _fn,
    # _keepalive, _control, _state, _value, _error, _waiters, _tevent, _callbacks and
    # _batch (GPU streams: the completion batch it was launched in, until it is retired;
    # completion is observed when someone asks, not per item). Awaiters register their
    # loop when they await (``_wait_done``): asking sniffio at submission would cost
    # every submission, awaited or not.
    __slots__ = ()

    # One lock for every completion's waiter registration and publication (each holds it
    # for a few attribute writes): a lock per item would be an allocation per submission.
    _lock = _STATE_LOCK

    # ---------------------------------------------------------------- state

    def done(self) -> bool:
        """Return True once the item has finished (with a result or an error)."""
        if self._state != _DONE and self._batch is not None:
            self.stream._backend.poll(self)     # a GPU stream retires what has completed
        return self._state == _DONE

    def _watch(self) -> None:
        """Make sure the stream's backend finishes this item as soon as it completes (a GPU
        stream otherwise notices completions lazily); called after a waiter registered."""
        if self._batch is not None:
            self.stream._backend.watch(self)

    @property
    def queue_wait_ms(self) -> float | None:
        """Time from submission to start of execution, in ms (None before it started)."""
        if self.started_at is None or self.submitted_at is None:
            return None
        return (self.started_at - self.submitted_at) * 1e3

    @property
    def exec_ms(self) -> float | None:
        """Execution time on the worker, in ms (None before it finished)."""
        if self.finished_at is None or self.started_at is None:
            return None
        return (self.finished_at - self.started_at) * 1e3

    def describe(self) -> str:
        """Return the label, or a description of the item when it has none."""
        if self.label:
            return self.label
        where = f" on stream '{self.stream.name}'" if self.stream is not None else ""
        return f"work item{where}"

    def __repr__(self) -> str:
        state = ("pending", "running", "done")[self._state]
        if self._state == _DONE:
            state = "failed" if self._error is not None else "done"
        return f"<Completion {self.describe()!r} {state}>"

    # ---------------------------------------------------------------- waiting, threads

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until done; return False if ``timeout`` (s) passed."""
        if self._state == _DONE:
            return True
        if timeout is None and self._batch is not None:
            # a launched GPU item: wait for its event on this thread, no hand-off
            self.stream._backend.wait_item(self)
            if self._state == _DONE:
                return True
        with self._lock:
            if self._state == _DONE:
                return True
            if self._tevent is None:
                self._tevent = threading.Event()
            tevent = self._tevent
        if self._state == _DONE:    # published meanwhile without looking (see _publish)
            return True
        self._refuse_own_worker()
        self._watch()
        return tevent.wait(timeout)

    def _refuse_own_worker(self) -> None:
        """A ``DeviceError`` where the calling thread is the one that runs (CPU) or
        completes (GPU) this item's stream, e.g. in a done callback: it would wait for
        itself, and the stream would hang."""
        backend = self.stream._backend if self.stream is not None else None
        if backend is not None and getattr(backend, "_thread", None) is threading.current_thread():
            raise DeviceError(
                f"{self.describe()}: waiting for it on the thread that runs stream "
                f"'{self.stream.name}' (a done callback runs there) would wait for itself: "
                "the stream's items run one after another on that thread; chain the work "
                "with add_done_callback, or wait on another thread")

    def result(self, timeout: float | None = None):
        """Block until done; return ``fn()``'s value or raise its error.

        Raises
        ------
        TimeoutError
            Not done after ``timeout`` seconds.
        ExecutionError, HipdnnError
            The item failed.
        """
        if not self.wait(timeout):
            raise TimeoutError(f"{self.describe()}: not complete after {timeout} s")
        return self._outcome()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Block until done; return the item's error, or None if it succeeded."""
        if not self.wait(timeout):
            raise TimeoutError(f"{self.describe()}: not complete after {timeout} s")
        return self._error

    def add_done_callback(self, callback) -> None:
        """Call ``callback(completion)`` once done: on the worker, or now if already done.

        The callback must be quick and thread-safe. Its exceptions are logged (the
        ``"hipdnn_async"`` logger at ERROR; where that logging is off, the default, they
        are printed to stderr as Python prints an exception it cannot raise); on a
        stream's worker SystemExit and KeyboardInterrupt too (the worker runs on),
        while run now, on the calling thread, those two reach the caller. A child
        forked inside the callback on a worker ends when the callback does, with the
        status Python would give.
        """
        with self._lock:
            if self._state != _DONE:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                queued = True
            else:
                queued = False
        if queued:
            if self._state == _DONE:     # published meanwhile: run what is left, once
                self._run_callbacks()
            else:
                self._watch()
        else:
            _call_back(callback, self)

    def _run_callbacks(self) -> None:
        with self._lock:
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                _call_back(callback, self)

    # ---------------------------------------------------------------- waiting, loops

    def __await__(self):
        return self._await().__await__()

    async def _await(self):
        await self._wait_done()
        return self._outcome()

    async def _wait_done(self) -> None:
        """Wait in the current task until done, without raising the item's error."""
        if self._state == _DONE:
            await anyio.lowlevel.checkpoint_if_cancelled()
            return
        mod, token = _current_loop()
        if mod is None:
            raise DeviceError(f"{self.describe()}: awaited outside asyncio or trio")
        self._refuse_own_worker()       # an event loop run inside a done callback
        if self._batch is not None:
            # A launched GPU item: look for its completion between loop iterations for a
            # short while first (a short kernel is done within a few of them), before
            # asking the completion thread, whose wake-up and the loop's own cost tens
            # of microseconds.
            deadline = time.perf_counter() + SPIN_S
            while True:
                await anyio.lowlevel.checkpoint()
                if self.done():
                    return
                if time.perf_counter() > deadline:
                    break
        with self._lock:
            if self._state == _DONE:
                event = None
            else:
                if self._waiters is None:
                    self._waiters = []
                for waiter in self._waiters:
                    if waiter.token is token:
                        break
                else:
                    waiter = _LoopWaiter(mod, token)
                    self._waiters.append(waiter)
                if waiter.event is None:
                    waiter.event = anyio.Event()
                event = waiter.event
        if event is None or self._state == _DONE:   # (published meanwhile: _publish)
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            self._watch()
            await event.wait()

    def _outcome(self):
        if self._error is not None:
            raise self._error
        return self._value

    # ---------------------------------------------------------------- backend side

    def _execute(self):
        """Run ``fn`` on the calling thread; return (value, error). Drops fn (keepalive is
        dropped by ``_finish``, when the work is complete)."""
        self._state = _RUNNING
        self.started_at = _clock()
        fn = self._fn
        value = error = None
        try:
            value = fn()
        except HipdnnError as exc:
            error = exc
        except BaseException as exc:  # noqa: BLE001 - the worker must survive anything
            error = self._wrapped(exc)
        finally:
            self.finished_at = _clock()
            fn = None
            self._fn = None  # keepalive stays until _finish: a GPU backend's fn only
        return value, error  # enqueues, and the buffers are in use until its event fires

    def _wrapped(self, exc: BaseException) -> ExecutionError:
        """The ExecutionError of a foreign exception raised by ``fn``."""
        error = ExecutionError(f"{self.describe()}: {type(exc).__name__}: {exc}"
                               + (f" [stream '{self.stream.name}']" if self.stream else ""))
        error.__cause__ = exc
        return error

    def _finish(self, value, error) -> None:
        """Publish the outcome (exactly once) and wake every waiter."""
        if self._state == _DONE:
            raise RuntimeError(f"{self.describe()}: completed twice")  # backend bug
        stream = self.stream
        self._keepalive = None  # the work is done with the buffers
        if stream is not None and not self._control:
            # out of the stream's in-flight list and not yet published: where another
            # thread forks now, the fork hook (queues._pool) finds it here
            stream._finishing = self
            stream._item_finished(self, error is None)  # free the slot before waking
            self._publish(value, error)
            stream._finishing = None
            return
        self._publish(value, error)

    def _publish(self, value, error) -> None:
        """The second half of ``_finish``: publish and wake (the stream already counted
        the item)."""
        if self._state == _DONE:
            raise RuntimeError(f"{self.describe()}: completed twice")  # backend bug
        self._keepalive = None
        self._value = value
        self._error = error
        # Published without the lock when nobody waits (the common case: no lock per
        # item). Waiters register under the lock and then look at the state again, and
        # the state is written here before the waiter fields are read: with the GIL's
        # ordering one side always sees the other (a waiter may be woken twice, which
        # is harmless; callbacks are taken under the lock, so they run once).
        self._state = _DONE
        if self._tevent is not None or self._waiters is not None or self._callbacks is not None:
            self._wake()

    def _wake(self) -> None:
        """Wake every waiter and run the callbacks of a published item."""
        with self._lock:
            tevent = self._tevent
            waiters = self._waiters
            callbacks, self._callbacks = self._callbacks, None
        if tevent is not None:
            tevent.set()
        if waiters:
            for waiter in waiters:
                if waiter.event is not None:
                    waiter.mod.post(waiter.token, waiter.event.set)
        if callbacks:
            for callback in callbacks:
                _call_back(callback, self)

    def _drop(self) -> None:
        """Release fn and keepalive of an item that was never enqueued."""
        self._fn = None
        self._keepalive = None

    def _run(self) -> None:
        """Execute and finish on the calling thread (the CPU backend's worker)."""
        value, error = self._execute()
        self._finish(value, error)


def _call_back(callback, completion) -> None:
    try:
        callback(completion)
    except BaseException as exc:  # noqa: BLE001 - a callback must not kill the worker
        thread = threading.current_thread()
        if getattr(thread, "hipdnn_async_fork_child", False):
            _exit_fork_child(exc)           # forked in this callback: the child's end
        if not isinstance(exc, Exception) and not getattr(thread, "hipdnn_async_worker", False):
            raise       # Ctrl-C or sys.exit on the caller's thread (a callback run inline)
        # on a stream's worker even SystemExit and KeyboardInterrupt: the worker's loop
        # would end with them, and every later item of its stream wait forever
        if _log.isEnabledFor(logging.ERROR):
            _log.error("done callback of %s failed", completion.describe(), exc_info=exc)
        else:
            # the library's logging is off (the default): the callback's own error is not
            # ours to silence; printed as Python prints an exception it cannot raise
            try:
                print(f"Exception ignored in done callback of {completion.describe()}:",
                      file=sys.stderr)
                traceback.print_exception(exc, file=sys.stderr)
            except Exception:  # noqa: BLE001 - stderr closed or broken: nowhere to say it
                pass


def _exit_fork_child(outcome) -> None:
    """End a fork child whose only thread is a stream worker (forked in a done callback:
    the host pools' fork hook marks the thread) as Python ends a process: ``outcome``
    None (the callback returned) 0; a SystemExit its code (None 0, an int modulo 256, else
    printed and 1); another exception its traceback printed and 1 (KeyboardInterrupt
    130). stdout and stderr are flushed first."""
    code = 0
    if isinstance(outcome, SystemExit):
        code = outcome.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    elif outcome is not None:
        traceback.print_exception(outcome)
        code = 130 if isinstance(outcome, KeyboardInterrupt) else 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:       # noqa: BLE001 - a closed or broken stream: exit anyway
            pass
    os._exit(code & 0xFF)
