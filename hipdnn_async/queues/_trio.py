"""trio side of the completion hand-off (twin of ``_asyncio``).

The worker thread wakes a trio run with exactly one ``TrioToken.run_sync_soon`` per item.
"""
from __future__ import annotations

import trio

__all__ = ["current_token", "post"]


def current_token():
    """Return the current run's TrioToken: the identity the worker posts completions to."""
    return trio.lowlevel.current_trio_token()


def post(token, callback) -> bool:
    """Run ``callback()`` in the trio run ``token``; False when that run has finished."""
    try:
        token.run_sync_soon(callback)
    except trio.RunFinishedError:  # run over: nobody is left to wake
        return False
    return True
