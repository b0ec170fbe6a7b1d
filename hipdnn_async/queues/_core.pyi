"""Stubs of the queues' submission path in C (``src_pyx/_queue_core.pyx``).

``CompletionCore``, ``StreamCore``, ``LaunchCore`` and ``HostLaunchCore`` hold, typed, the fields a submission
touches; ``queues.Completion``, ``queues.Stream`` and ``queues.GpuStreamBackend`` derive
from them. ``submit_now`` runs one whole submission (handle, stream bookkeeping, GPU
launch, completion batch) without a Python frame. Timestamps are ``perf_counter()``
seconds (``time.perf_counter``'s clock, CLOCK_MONOTONIC on Linux).
"""
from collections import deque
from typing import Any, Callable

__all__: list[str]

PENDING: int
RUNNING: int
DONE: int
EVENT_EVERY: int

def perf_counter() -> float:
    """The clock of the timestamps set here, in seconds (``time.perf_counter()``'s)."""

class CompletionCore:
    """Fields of one work item (``queues.Completion`` documents them)."""

    label: str
    stream: Any
    submitted_at: float | None
    started_at: float | None
    finished_at: float | None

    def __init__(self, fn: Callable[[], Any], keepalive: Any = (), label: str = "",
                 _control: bool = False) -> None:
        """An item for ``fn``; TypeError when ``fn`` is not callable."""
    def _enqueue(self) -> None:
        """Run ``fn`` (it only enqueues); store its value or error; drop ``fn``."""
    def _publish_stored(self) -> None:
        """Publish the stored outcome and wake the waiters (a GPU completion batch)."""

class Named:
    """``fn()`` whose ``HipdnnError`` is re-raised prefixed with ``label``."""

    fn: Callable[[], Any]
    label: str

    def __init__(self, fn: Callable[[], Any], label: str) -> None:
        """Name ``fn``'s library errors with ``label``."""
    def __call__(self) -> Any:
        """Run ``fn``."""

class Batch:
    """Items launched in order on one GPU stream, completed by one event."""

    items: list
    event: int | None
    record_error: BaseException | None
    sync_error: BaseException | None
    synced: bool
    retired: bool

    def __init__(self) -> None:
        """An open batch with no items."""

class LaunchCore:
    """Launch fields of a GPU stream (``queues.GpuStreamBackend`` derives from this)."""

    launch_context: Any
    poll_due: bool

    def launch(self, item: CompletionCore) -> None:
        """Enqueue ``item``'s work on the GPU stream now; it joins the open batch."""
    def fail_unlaunched(self, item: CompletionCore, exc: BaseException) -> None:
        """Fail ``item``, whose launch raised ``exc`` before enqueueing, in its place."""

class ExecTimer:
    """A plan's recent execution time on a host stream (seconds, weighted mean)."""

    estimate_s: float
    count: int

    def record(self, seconds: float) -> None:
        """Take one execution's time (seconds)."""

class HostLaunchCore:
    """Launch fields of a host stream (``queues.CpuStreamBackend`` derives from this)."""

    poll_due: bool

    def launch(self, item: CompletionCore) -> None:
        """Queue ``item`` for the worker (behind an inline item, once it has finished)."""
    def put_last(self, entry: Any) -> None:
        """Queue a control entry for the worker behind everything launched."""
    def work(self, _stop: object) -> None:
        """The worker's loop: run items in order until ``_stop`` comes."""

class StreamLock:
    """A host stream's lock: ``threading.Lock``'s protocol; the submission path takes it
    with C calls, waiting with the GIL released."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock; False when not taken within ``timeout`` seconds (-1: no limit)."""
    def release(self) -> None:
        """Release the lock; RuntimeError when it is not held."""
    def locked(self) -> bool:
        """True while some thread holds the lock."""
    def __enter__(self) -> bool:
        """Take the lock."""
    def __exit__(self, *exc: Any) -> None:
        """Release the lock."""

class StreamCore:
    """Submission fields of a stream (``queues.Stream`` derives from this)."""

    name: str
    id: int

    def _try_submit(self, item: CompletionCore, limit: int | None,
                    park: bool = False) -> CompletionCore | None:
        """Enqueue ``item`` unless ``limit`` items are in flight, else return the oldest."""

def submit_now(item_type: type, stream: StreamCore, fn: Callable[[], Any], keepalive: Any,
               label: str, limit: int | None, timer: ExecTimer | None = None,
               recorder: Any = None) -> CompletionCore:
    """A new ``item_type`` for ``fn``, enqueued on ``stream`` at once (parked when full);
    ``recorder.attach(item)`` first where ``recorder`` is not None."""

def run_inline(item_type: type, stream: StreamCore, fn: Callable[[], Any], keepalive: Any,
               label: str, timer: ExecTimer | None, bound: float,
               recorder: Any = None) -> CompletionCore | None:
    """Run ``fn`` as a work item of an idle host ``stream`` on the calling thread, when
    ``timer`` says it takes at most ``bound`` s (``bound`` < 0: always); the finished item,
    or None (nothing done)."""

def least_loaded(streams: tuple, start: int) -> StreamCore:
    """The stream with the fewest items pending, looking from index ``start`` on."""

class PlanLaunch:
    """What every execution of one plan hands ``run_host``, fixed at build."""

    item_type: type
    cache: Any
    pool: Any
    label: str
    timer: ExecTimer | None

    def __init__(self, item_type: type, cache: Any, pool: Any, label: str,
                 timer: ExecTimer | None) -> None:
        """The record of a plan's item type, binding cache, pool, label and timer."""

def run_host(plan: PlanLaunch, variant_pack: Any, workspace: Any, stream: StreamCore | None,
             bound: float, recorder: Any) -> CompletionCore | tuple:
    """A host plan's execution in one call (binding, keepalive, stream, inline run): the
    finished item, or ``(fn, keepalive, stream)`` for the caller to submit."""
