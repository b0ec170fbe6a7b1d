"""Per-device stream queues: in-order streams, completions awaitable from asyncio and trio.

The queue layer knows nothing of graphs: a work item is a callable ``fn()`` run on a
stream's worker. See ``docs/design/internals.md`` section 6.
"""
from ._completion import Completion
from ._metrics import Histogram
from ._pool import DEFAULT_MAX_INFLIGHT, StreamPool
from ._stream import CpuStreamBackend, Event, Stream, StreamBackend, interpreter_exiting

__all__ = [
    "Completion",
    "CpuStreamBackend",
    "DEFAULT_MAX_INFLIGHT",
    "Event",
    "Histogram",
    "Stream",
    "StreamBackend",
    "StreamPool",
    "interpreter_exiting",
]
