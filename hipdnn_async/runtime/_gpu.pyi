"""Stubs of the GPU runtime bindings (``src_pyx/_gpu.pyx``).

Covers the CUDA or HIP runtime opened with ``dlopen`` (symbols ``<prefix><Name>``, prefix
``cuda`` or ``hip``): devices, memory, async copies and memsets, streams, events, pointer
attributes, versions. Handles (streams, events) and device pointers are ints. A non-zero
status, an unloaded runtime or a missing symbol raises ``GpuError``.
"""

__all__: list[str]

STREAM_NON_BLOCKING: int
EVENT_BLOCKING_SYNC: int
EVENT_DISABLE_TIMING: int
MEMCPY_HOST_TO_DEVICE: int
MEMCPY_DEVICE_TO_HOST: int
MEMCPY_DEVICE_TO_DEVICE: int
NOT_READY: int
ATTR_CC_MAJOR: int
ATTR_CC_MINOR: int
ATTR_MEMORY_POOLS_SUPPORTED: int

class GpuError(RuntimeError):
    """A runtime call failed; ``status`` is the runtime's code, ``name`` its enum name."""

    call: str
    status: int
    name: str
    text: str

    def __init__(self, call: str, status: int, name: str, text: str) -> None:
        """Message ``"{call} failed: {name} ({status}): {text}"``."""
    def __reduce__(self) -> tuple[type[GpuError], tuple[str, int, str, str]]:
        """Pickle by the four constructor arguments."""

# ------------------------------------------------------------------ loading
def load(path: str, prefix: str = "cuda") -> tuple[str, str]:
    """Load the runtime at ``path`` with symbol prefix ``"cuda"`` or ``"hip"``; idempotent; OSError on failure."""
def loaded() -> tuple[str, str] | None:
    """``(path, prefix)`` of the loaded runtime, or None."""

# ------------------------------------------------------------------ devices
def device_count() -> int:
    """Number of visible devices (0 when the driver finds none)."""
def set_device(device: int) -> None:
    """Make ``device`` current on the calling thread."""
def get_device() -> int:
    """The calling thread's current device."""
def device_attribute(attr: int, device: int) -> int:
    """``DeviceGetAttribute(attr, device)``; ``attr`` is an ATTR_* constant."""
def device_name(device: int) -> str:
    """The device's marketing name."""
def mem_get_info() -> tuple[int, int]:
    """(free, total) bytes of the current device."""
def runtime_version() -> int:
    """Runtime version as the runtime reports it (e.g. 13000)."""
def driver_version() -> int:
    """Driver version (e.g. 13000); 0 when no driver is installed."""

# ------------------------------------------------------------------ streams
def stream_create(flags: int = ...) -> int:
    """Create a stream on the current device (default STREAM_NON_BLOCKING); returns its handle."""
def stream_destroy(stream: int) -> None:
    """Destroy a stream (work already enqueued still completes)."""
def stream_synchronize(stream: int) -> None:
    """Block (GIL released) until all work on ``stream`` is done."""
def stream_wait_event(stream: int, event: int) -> None:
    """Make later work on ``stream`` wait for ``event`` on the GPU; the host does not wait."""

# ------------------------------------------------------------------ events
def event_create(flags: int = ...) -> int:
    """Create an event (default EVENT_DISABLE_TIMING | EVENT_BLOCKING_SYNC); returns its handle."""
def event_record(event: int, stream: int) -> None:
    """Record ``event`` on ``stream``."""
def event_synchronize(event: int) -> None:
    """Block (GIL released) until ``event`` completes; raises the error of failed work."""
def event_query(event: int) -> bool:
    """True when ``event`` has completed, False while pending."""
def event_elapsed_time(start: int, end: int) -> float:
    """Milliseconds between two completed timing events."""
def event_destroy(event: int) -> None:
    """Destroy an event."""

# ------------------------------------------------------------------ memory
def malloc(nbytes: int, stream: int = 0, pooled: bool = True) -> int:
    """Allocate ``nbytes`` of device memory, usable on any stream at once; pointer, 0 for 0 bytes."""
def malloc_async(nbytes: int, stream: int) -> int:
    """Stream-ordered allocation usable at once on ``stream`` only; pointer, 0 for 0 bytes."""
def free(ptr: int, stream: int = 0, pooled: bool = True) -> None:
    """Free memory from :func:`malloc` (stream-ordered on ``stream`` when pooled); 0 is a no-op."""
def memcpy(dst: int, src: int, nbytes: int, kind: int) -> None:
    """Blocking copy (GIL released); ``kind`` is a MEMCPY_* constant."""
def memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
    """Copy enqueued on ``stream``; asynchronous to the host only for pinned host memory."""
def memset_async(dst: int, value: int, nbytes: int, stream: int) -> None:
    """Set ``nbytes`` bytes at ``dst`` to ``value`` on ``stream``."""
def pool_keep_memory(device: int) -> bool:
    """Keep freed memory in the device's default pool; False where pools are unavailable."""
def pointer_device(ptr: int) -> int:
    """Device owning ``ptr`` if device or managed memory, -1 otherwise, -2 if it cannot tell."""
