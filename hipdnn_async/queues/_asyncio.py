"""asyncio side of the completion hand-off (twin of ``_trio``).

The worker thread wakes an asyncio loop with exactly one ``call_soon_threadsafe`` per item.
"""
from __future__ import annotations

import asyncio

__all__ = ["current_token", "post"]


def current_token():
    """Return the running loop: the identity the worker posts completions to."""
    return asyncio.get_running_loop()


def post(token, callback) -> bool:
    """Run ``callback()`` on the loop ``token``; False when that loop is closed."""
    try:
        token.call_soon_threadsafe(callback)
    except RuntimeError:  # loop closed: nobody is left to wake
        return False
    return True
