"""Waiting in the batcher's event loop, one implementation per backend (as anyio's
``_backends/``): a request's caller waits for its rows, the collector for requests.

A waiter is set once, from the loop's own thread, and awaited by one task. On asyncio it
is a bare loop future; on trio a ``trio.Event``. Both cost a fraction of an
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


def _trio_waits() -> Waits:
    import trio

    w = Waits()
    w.new = trio.Event
    w.wake = trio.Event.set
    w.wait = trio.Event.wait
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
