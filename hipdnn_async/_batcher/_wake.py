"""Waiting in the batcher's event loop, one implementation per backend (as anyio's
``_backends/``): a request's caller waits for its rows, the collector for requests.

A waiter is set once, from the loop's own thread, and awaited by one task. On asyncio it
is a bare loop future; on trio the parked task itself (``trio.lowlevel``). Both cost a fraction of an
``anyio.Event``, which looks the backend up through sniffio when it is made and wraps the
backend's event (on asyncio an ``asyncio.Event``, which makes a future on each wait). A
waiter's await is a cancellation point of the loop (anyio's cancel scopes included).
"""
from __future__ import annotations

import sniffio

from .._errors import DeviceError

__all__ = ["Waits", "current_waits"]


class Waits:
    """The waiters of one event loop: ``new()``, ``wake(w)`` (idempotent),
    ``wait(w)`` (an awaitable) and ``now()`` (the loop's clock, seconds)."""

    __slots__ = ("new", "wake", "wait", "now")


def _asyncio_waits() -> Waits:
    import asyncio

    loop = asyncio.get_running_loop()

    def wake(fut) -> None:
        if not fut.done():      # a waiter cancelled with its task is done already
            fut.set_result(None)

    w = Waits()
    w.new = loop.create_future
    w.wake = wake
    w.wait = _identity          # a future is its own awaitable
    w.now = loop.time
    return w


def _identity(fut):
    return fut


class _TrioWaiter:
    """One task parked until woken (trio's own ``ParkingLot`` would hold a list of them)."""

    __slots__ = ("task", "woken")

    def __init__(self):
        self.task = None
        self.woken = False


def _trio_waits() -> Waits:
    import trio

    lowlevel = trio.lowlevel
    current_task, reschedule = lowlevel.current_task, lowlevel.reschedule
    park, checkpoint, succeeded = (lowlevel.wait_task_rescheduled, lowlevel.checkpoint,
                                   lowlevel.Abort.SUCCEEDED)

    def wake(w: _TrioWaiter) -> None:
        if not w.woken:
            w.woken = True
            task, w.task = w.task, None
            if task is not None:
                reschedule(task)

    async def wait(w: _TrioWaiter) -> None:
        if w.woken:
            await checkpoint()      # as trio.Event.wait: a checkpoint either way
            return
        w.task = current_task()

        def abort(_raise_cancel):
            w.task = None           # cancelled: a later wake reschedules nobody
            return succeeded

        await park(abort)

    w = Waits()
    w.new = _TrioWaiter
    w.wake = wake
    w.wait = wait
    w.now = trio.current_time
    return w


def current_waits() -> Waits:
    """The waiters of the running loop (asyncio or trio, directly or through anyio).

    Raises
    ------
    DeviceError
        No asyncio or trio loop runs in this thread.
    """
    try:
        name = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        name = None
    if name == "asyncio":
        return _asyncio_waits()
    if name == "trio":
        return _trio_waits()
    raise DeviceError(f"DynamicBatcher: async library {name!r} is not supported; run it "
                      "under asyncio or trio (directly or through anyio)")
