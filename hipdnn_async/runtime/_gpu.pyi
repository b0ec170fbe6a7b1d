"""Stubs of the GPU runtime bindings (``src_pyx/_gpu.pyx``).

One ``Runtime`` type with one instance per runtime (``instance("cuda")``: libcudart,
symbols ``cuda<Name>``; ``instance("hip")``: libamdhip64, symbols ``hip<Name>``), each with
its own constants and status tables; both can be loaded in one process. Handles (streams,
events) and pointers are ints. A non-zero status raises the status table's type (all
``GpuError``); a missing symbol or an unloaded runtime raises ``LibraryError``.
"""
from hipdnn_async._errors import HipdnnError

from ._loader import LibraryTable

__all__: list[str]

CUDA_VERSIONS: str
HIP_VERSIONS: str
HIP5_VERSIONS: str
CUDA_CONSTANTS: dict[str, tuple[int, str, str]]
HIP_CONSTANTS: dict[str, tuple[int, str, str]]
HIP5_CONSTANTS: dict[str, tuple[int, str, str]]
CUDA_STATUS: dict[int, tuple[str, type[HipdnnError] | None]]
HIP_STATUS: dict[int, tuple[str, type[HipdnnError] | None]]

class GpuError(HipdnnError):
    """A GPU runtime call failed (``hipdnn_async._errors.GpuError``, an ExecutionError)."""

class Runtime(LibraryTable):
    """One GPU runtime: its symbol table, constants (also attributes: ``rt.MEMCPY_HOST_TO_DEVICE``) and status table."""

    kind: str
    constants: dict[str, int]
    constant_sources: dict[str, str]
    statuses: dict[int, tuple[str, type[HipdnnError] | None]]

    def __init__(self, kind: str) -> None:
        """A runtime of ``kind`` ``"cuda"`` or ``"hip"``, not loaded."""
    def __getattr__(self, name: str) -> int:
        """A constant by name; AttributeError for any other name."""
    @property
    def version(self) -> int:
        """The runtime's version as loaded (13000, HIP_VERSION); 0 before load."""
    # devices
    def device_count(self) -> int:
        """Number of visible devices (0 when the driver finds none or fails)."""
    def set_device(self, device: int) -> None:
        """Make ``device`` current on the calling thread."""
    def get_device(self) -> int:
        """The calling thread's current device."""
    def device_attribute(self, attr: int, device: int) -> int:
        """``DeviceGetAttribute(attr, device)``; ``attr`` one of this runtime's ATTR_* constants."""
    def device_name(self, device: int) -> str:
        """The device's marketing name."""
    def compute_capability(self, device: int) -> tuple[int, int]:
        """(major, minor) compute capability."""
    def arch_name(self, device: int) -> str:
        """``"sm_90"`` (CUDA) or ``gcnArchName`` (HIP)."""
    def multiprocessor_count(self, device: int) -> int:
        """SMs (CUDA) or compute units (HIP)."""
    def memory_pools_supported(self, device: int) -> bool:
        """Stream-ordered memory pools available on ``device`` and exported by the runtime."""
    def total_memory(self, device: int) -> int:
        """Total memory of ``device`` in bytes."""
    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
    def runtime_version(self) -> int:
        """``RuntimeGetVersion()``."""
    def driver_version(self) -> int:
        """Driver version; 0 when no driver is installed."""
    # streams
    def stream_create(self, flags: int | None = None) -> int:
        """A stream on the current device (default STREAM_NON_BLOCKING)."""
    def stream_create_with_priority(self, priority: int, flags: int | None = None) -> int:
        """A stream with ``priority`` (lower = higher priority)."""
    def stream_priority_range(self) -> tuple[int, int]:
        """(least, greatest) stream priority."""
    def stream_destroy(self, stream: int) -> None:
        """Destroy a stream (enqueued work still completes)."""
    def stream_synchronize(self, stream: int) -> None:
        """Block (GIL released) until all work on ``stream`` is done."""
    def stream_query(self, stream: int) -> bool:
        """True when all work on ``stream`` is done."""
    def stream_wait_event(self, stream: int, event: int) -> None:
        """Later work on ``stream`` waits for ``event`` on the GPU."""
    # events
    def event_create(self, flags: int | None = None) -> int:
        """An event (default EVENT_DISABLE_TIMING | EVENT_BLOCKING_SYNC)."""
    def event_record(self, event: int, stream: int) -> None:
        """Record ``event`` on ``stream``."""
    def event_synchronize(self, event: int) -> None:
        """Block (GIL released) until ``event`` completes; raises the error of failed work."""
    def event_query(self, event: int) -> bool:
        """True when ``event`` has completed."""
    def event_elapsed_time(self, start: int, end: int) -> float:
        """Milliseconds between two completed timing events."""
    def event_destroy(self, event: int) -> None:
        """Destroy an event."""
    # memory
    def malloc(self, nbytes: int, stream: int = 0, pooled: bool = True) -> int:
        """Device memory usable from any stream at once; 0 for 0 bytes."""
    def malloc_async(self, nbytes: int, stream: int) -> int:
        """Stream-ordered allocation usable at once on ``stream`` only; 0 for 0 bytes."""
    def free(self, ptr: int, stream: int = 0, pooled: bool = True) -> None:
        """Free memory from :meth:`malloc`; 0 is a no-op."""
    # peer access
    def can_access_peer(self, device: int, peer: int) -> bool:
        """``DeviceCanAccessPeer``: ``device`` can address ``peer``'s memory (False without the call)."""
    def enable_peer_access(self, peer: int) -> None:
        """``DeviceEnablePeerAccess(peer, 0)`` from the current device; already enabled is no error."""
    def memcpy_peer_async(self, dst: int, dst_device: int, src: int, src_device: int,
                          nbytes: int, stream: int) -> None:
        """``MemcpyPeerAsync``: a copy between two devices of this runtime on ``stream``."""
    def host_alloc(self, nbytes: int) -> int:
        """Pinned host memory; 0 for 0 bytes."""
    def host_free(self, ptr: int) -> None:
        """Free memory from :meth:`host_alloc`; 0 is a no-op."""
    def memcpy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        """Blocking copy (GIL released); ``kind`` a MEMCPY_* constant of this runtime."""
    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        """Copy enqueued on ``stream``."""
    def memset_async(self, dst: int, value: int, nbytes: int, stream: int) -> None:
        """Set ``nbytes`` bytes at ``dst`` to ``value`` on ``stream``."""
    # capture and graphs
    def stream_begin_capture(self, stream: int, mode: int | None = None) -> None:
        """Capture ``stream``'s work into a graph (default STREAM_CAPTURE_MODE_THREAD_LOCAL)."""
    def stream_end_capture(self, stream: int) -> int:
        """End the capture; the graph's handle."""
    def end_capture(self, stream: int) -> int:
        """End the capture; the graph's handle. A failed end raises once the stream no
        longer captures (ended again where it still did, that graph destroyed)."""
    def clear_last_error(self) -> int:
        """Reset the calling thread's last runtime error; the status it held."""
    def stream_is_capturing(self, stream: int) -> int:
        """One of STREAM_CAPTURE_STATUS_*."""
    def graph_instantiate(self, graph: int, flags: int = 0) -> int:
        """An executable graph's handle."""
    def graph_exec_update(self, graph_exec: int, graph: int) -> bool:
        """Update in place; False when the topologies differ."""
    def graph_launch(self, graph_exec: int, stream: int) -> None:
        """One launch of the executable graph on ``stream``."""
    def graph_destroy(self, graph: int) -> None:
        """Destroy a graph (its executable graphs are independent of it)."""
    def graph_exec_destroy(self, graph_exec: int) -> None:
        """Destroy an executable graph; launches in flight complete first."""
    def pool_keep_memory(self, device: int) -> bool:
        """Keep freed memory in the default pool; False where pools are unavailable."""
    def pointer_device(self, ptr: int) -> int:
        """Owning device of device/managed memory, -1 otherwise, -2 if it cannot tell."""

class ExecCounter:
    """Executions of one pattern's plans on a device and their host time (bumped in C)."""

    executions: int
    host_ns: int
    exec_ms: float

    def add(self, ns: int) -> None:
        """Count one execution that took ``ns`` nanoseconds of host time."""


def instance(kind: str) -> Runtime:
    """The process-wide runtime of ``kind`` (``"cuda"`` or ``"hip"``), loaded or not."""
def runtime(kind: str) -> Runtime | None:
    """The process-wide runtime of ``kind`` once loaded, else None."""
