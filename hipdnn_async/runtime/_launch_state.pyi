"""Stubs of the calling thread's launch context (``src_pyx/_launch_state.pyx``).

One C thread-local slot, shared with the other Cython modules through
``_launch_state.pxd``: a GPU stream's launching thread enters its ``LaunchContext`` around
each work item; the plans' launch code reads it.
"""
from typing import Any

__all__: list[str]

def current_launch() -> Any:
    """The launch context of the stream enqueuing work on this thread, or None."""

def enter(lc: Any) -> None:
    """Make ``lc`` (a ``runtime.LaunchContext``) the calling thread's launch context."""

def exit() -> None:
    """Clear the calling thread's launch context."""
