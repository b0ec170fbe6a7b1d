"""GPU device state: a context per device, device arrays, and the launch context.

``GpuContext`` holds what one GPU device shares across its streams: the runtime it
belongs to (a loaded ``_gpu.Runtime``, CUDA or HIP), the device ordinal and what the
runtime says of the device by meaning (name, compute capability, architecture name,
multiprocessor count, memory pools), a copy stream for host transfers and allocation, and
the set of compute streams (so that copies can be ordered after work already launched on
them). Every call below goes through ``context.runtime``: nothing here names a vendor.
``GpuArray`` is device memory with the surface of the CPU ``DeviceArray``.
``LaunchContext`` is what a provider sees while its plan enqueues work: the compute
stream, per-stream resources (a DNN handle), and a per-stream workspace that grows on
demand; see ``current_launch``. The per-stream resources are created here, from what
providers declared as data (``_stream_prep``), when a stream opens and at build.

Several devices: the current device is per host thread (``cudaSetDevice`` /
``hipSetDevice``), and a stream, event, allocation or DNN handle belongs to the device
current when it was made. Every call here that makes one or enqueues work runs inside
``context.using()`` (``DeviceGuard``): the device is made current for the call and the
thread's previous device restored afterwards, so a user's thread (the event loop's, a
worker's, a finalizer's) keeps the device its own code set. Copies between two devices'
arrays (``GpuArray.copy_from(other)``) go peer to peer where the runtime allows it
(``can_access_peer``; access enabled once per pair) and through pinned host memory
otherwise; same-device copies stay device to device.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .._errors import DeviceError, GpuError, GraphError
from . import _launch_state
from ._buffer import element_extent, host_values
from ._stream_prep import HandleWork, StreamNeeds

__all__ = ["GpuContext", "GpuArray", "LaunchContext", "DeviceGuard", "current_launch",
           "context_for"]

_contexts: dict[tuple, "GpuContext"] = {}   # (runtime, index) -> context
_contexts_lock = threading.Lock()
# (runtime, device, peer) -> whether `device` reads/writes `peer`'s memory directly (access
# enabled); decided once per ordered pair per process, as DeviceEnablePeerAccess is.
_peers: dict[tuple, bool] = {}
_peers_lock = threading.Lock()


class DeviceGuard:
    """``with DeviceGuard(runtime, index):`` makes device ``index`` current on the calling
    thread and restores the thread's previous device on leaving (nothing to restore when it
    was already current). Cheap: one ``get_device``, and ``set_device`` only on a change.
    """

    __slots__ = ("_rt", "_index", "_prev")

    def __init__(self, runtime, index: int):
        self._rt = runtime
        self._index = index
        self._prev = index

    def __enter__(self) -> "DeviceGuard":
        prev = self._rt.get_device()
        if prev != self._index:
            self._rt.set_device(self._index)
        self._prev = prev
        return self

    def __exit__(self, *exc) -> None:
        if self._prev != self._index:
            self._rt.set_device(self._prev)


def context_for(index: int, runtime) -> "GpuContext":
    """The process-wide context of device ``index`` of ``runtime`` (created once).

    Parameters
    ----------
    index : int
        Device ordinal of the runtime.
    runtime : _gpu.Runtime
        A loaded runtime (``_gpu.runtime("cuda")``, ``load_vendor(...).runtime``), or an
        object with the same methods (the tests' fakes).
    """
    with _contexts_lock:
        ctx = _contexts.get((runtime, index))
        if ctx is None:
            ctx = _contexts[(runtime, index)] = GpuContext(index, runtime)
        return ctx


current_launch = _launch_state.current_launch   # -> LaunchContext | None (C thread-local)


class GpuContext:
    """Shared state of one GPU device (see the module docstring).

    Parameters
    ----------
    index : int
        Device ordinal of ``runtime``.
    runtime : _gpu.Runtime
        The loaded runtime the device belongs to.

    Attributes
    ----------
    name : str
        Marketing name.
    compute_capability : tuple of int
        (major, minor); on HIP the GCN/CDNA version.
    arch : str
        ``"sm_90"`` or HIP's ``gcnArchName`` (``"gfx942:sramecc+:xnack-"``).
    multiprocessor_count : int
        SMs (CUDA) or compute units (HIP).
    pooled : bool
        Stream-ordered memory pools are used.
    tune_lock : threading.Lock
        Held while a build benchmarks on this GPU (by any Device on it).
    """

    def __init__(self, index: int, runtime):
        self.index = index
        self.runtime = rt = runtime
        with DeviceGuard(rt, index):
            self.name = rt.device_name(index)
            self.compute_capability = rt.compute_capability(index)
            self.arch = rt.arch_name(index)
            self.multiprocessor_count = rt.multiprocessor_count(index)
            self.pooled = rt.memory_pools_supported(index)
            if self.pooled:
                rt.pool_keep_memory(index)
            # The copy stream lives as long as the process: arrays free on it when collected.
            self.copy_stream = rt.stream_create()
        # compute stream -> the lock its launches hold (None: none), see order_copy_stream
        self._streams: dict[int, object] = {}
        self._lock = threading.Lock()
        # Held by a benchmarking build (Device): timings on one GPU must not overlap, and
        # two Devices on one GPU share this context.
        self.tune_lock = threading.Lock()
        # What streams need (StreamNeeds, HandleWork; weak: their owners keep them) and the
        # open streams it is created on (launch context -> launch lock). Guarded by
        # _prep_lock, so no stream opened during a round misses a declaration.
        self._needs: "weakref.WeakSet" = weakref.WeakSet()
        self._works: "weakref.WeakSet" = weakref.WeakSet()
        self._prepared: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._prep_lock = threading.Lock()

    def activate(self) -> None:
        """Make this device current on the calling thread (for the library's own threads;
        elsewhere use :meth:`using`, which restores the thread's device)."""
        self.runtime.set_device(self.index)

    def using(self) -> DeviceGuard:
        """``with context.using():`` this device is current inside, the thread's previous
        device again afterwards."""
        return DeviceGuard(self.runtime, self.index)

    def peer_access(self, other: "GpuContext") -> bool:
        """Whether this device reads and writes ``other``'s memory directly (same runtime,
        ``can_access_peer``, access enabled: done here once per ordered pair). False for
        the same device, another runtime, or a pair without peer access.
        """
        if other is self or other.runtime is not self.runtime or other.index == self.index:
            return False
        key = (self.runtime, self.index, other.index)
        with _peers_lock:
            ok = _peers.get(key)
            if ok is None:
                ok = False
                try:
                    if self.runtime.can_access_peer(self.index, other.index):
                        with self.using():
                            self.runtime.enable_peer_access(other.index)
                        ok = True
                except (GpuError, DeviceError):   # unsupported pair or no such call: stage
                    ok = False
                _peers[key] = ok
        return ok

    def add_stream(self, stream: int, lock=None) -> None:
        """Register a compute stream; ``lock``: the lock held by whatever enqueues on it
        (a stream backend's launch lock, held through a capture step's whole capture),
        which :meth:`order_copy_stream` takes to record its event there."""
        with self._lock:
            self._streams[stream] = lock

    def remove_stream(self, stream: int) -> None:
        """Unregister a compute stream (before it is destroyed)."""
        with self._lock:
            self._streams.pop(stream, None)

    # ------------------------------------------------------------------ launch state
    # What streams need is declared as data (``_stream_prep``: ``StreamNeeds``,
    # ``HandleWork``) and created here, with the runtime's own bindings: opening a stream
    # or growing a workspace calls no provider code.
    def apply_needs(self, needs) -> None:
        """Register ``needs`` (a ``StreamNeeds``, held weakly; again: nothing new) and
        create or grow its resources on every open stream now, each under its launch lock
        (never during a launch); streams opened later get them at :meth:`open_stream`.

        Raises
        ------
        TypeError
            ``needs`` is not a ``StreamNeeds`` (a declaration is data, not a callback).
        DeviceError, GpuError
            The creation fails (the first failing stream stops the round).
        """
        if not isinstance(needs, StreamNeeds):
            raise TypeError(f"apply_needs takes a StreamNeeds, not {type(needs).__name__}")
        with self._prep_lock:
            self._needs.add(needs)
            targets = list(self._prepared.items())
        self._prepare_each(targets, needs.create_on)

    def add_handle_work(self, work) -> None:
        """Register ``work`` (a ``HandleWork``, held weakly) and run it on every open
        stream now, as :meth:`apply_needs`; streams opened later run it at
        :meth:`open_stream`.

        Raises
        ------
        TypeError
            ``work`` is not a ``HandleWork``.
        """
        if not isinstance(work, HandleWork):
            raise TypeError(f"add_handle_work takes a HandleWork, not {type(work).__name__}")
        with self._prep_lock:
            self._works.add(work)
            targets = list(self._prepared.items())
        self._prepare_each(targets, work.prepare_on)

    def _prepare_each(self, targets, step) -> None:
        for lc, lock in targets:
            with lock:
                if self._prepared.get(lc) is not lock:   # closed meanwhile
                    continue
                with self.using():
                    step(lc)

    def open_stream(self, lc, lock) -> None:
        """Create on a new stream (launch context ``lc``, launch lock ``lock``) what every
        registered ``StreamNeeds`` and ``HandleWork`` says, then include it in later
        rounds (under the registry lock, so no round misses it).

        Raises whatever the creation raises; the stream is then not included (the caller
        releases what was made).
        """
        with self._prep_lock:
            needs, works = list(self._needs), list(self._works)
            with lock, self.using():
                for n in needs:
                    n.create_on(lc)
                for w in works:
                    w.prepare_on(lc)
            self._prepared[lc] = lock

    def close_stream(self, lc) -> None:
        """Leave launch context ``lc``'s stream out of later rounds (the caller holds its
        launch lock, having marked it closed)."""
        with self._prep_lock:
            self._prepared.pop(lc, None)

    def order_copy_stream(self) -> None:
        """Make the copy stream wait (on the GPU) for all work launched so far on every
        compute stream: copies then see finished results and never overwrite an array
        that launched work still reads. Must not be called with a stream's launch lock
        held (copies are host calls; plans and stream preparation make none)."""
        with self._lock:
            streams = tuple(self._streams.items())
        for s, lock in streams:
            if lock is None:
                self._copy_stream_after(s)
                continue
            # The stream's launch lock: an event recorded while the stream is capturing
            # (a capture step) would join the capture, and the copy stream with it. The
            # record waits for the capture instead; a stream closed meanwhile is skipped,
            # also when a new stream has its handle (registered with its own lock).
            with lock:
                with self._lock:
                    live = self._streams.get(s) is lock
                if live:
                    self._copy_stream_after(s)

    def _copy_stream_after(self, stream: int) -> None:
        rt = self.runtime
        ev = rt.event_create(rt.EVENT_DISABLE_TIMING)
        try:
            rt.event_record(ev, stream)
            rt.stream_wait_event(self.copy_stream, ev)
        finally:
            rt.event_destroy(ev)   # released once the wait no longer needs it

    def malloc(self, nbytes: int) -> int:
        """Device memory usable from any stream at once; 0 for 0 bytes."""
        with self.using():
            return self.runtime.malloc(nbytes, self.copy_stream, self.pooled)

    def free(self, ptr: int) -> None:
        """Free memory from :meth:`malloc` (from any thread: a finalizer's too)."""
        with self.using():
            self.runtime.free(ptr, self.copy_stream, self.pooled)

    def copy_stream_event(self) -> int:
        """An event recorded now on the copy stream (the caller destroys it): another
        device's stream waits on it for the copies enqueued so far."""
        rt = self.runtime
        with self.using():
            ev = rt.event_create(rt.EVENT_DISABLE_TIMING)
            rt.event_record(ev, self.copy_stream)
        return ev


def _release(ctx: GpuContext, ptr: int) -> None:
    try:
        ctx.free(ptr)
    except Exception:  # noqa: BLE001 - at interpreter exit the runtime may be gone
        pass


class GpuArray:
    """An array in GPU memory, in logical dims (N, C, [D,] H, W) with element strides.

    The same surface as the CPU ``DeviceArray`` minus ``.view``: ``dims``, ``strides``,
    ``dtype``, ``device``, ``nbytes``, ``copy_from``, ``to_numpy_sync``, ``await
    to_numpy()``; plus ``ptr`` (int device pointer) and ``__cuda_array_interface__``
    (version 3) so that CuPy and PyTorch can wrap it without a copy.

    Parameters
    ----------
    dims, dtype, strides
        As ``DeviceArray``; the allocation spans exactly the strided extent.
    context : GpuContext
        The owning device.
    device : str
        The device spec, for messages (``"cuda:0"``).

    Raises
    ------
    DeviceError
        The memory cannot be allocated.
    """

    def __init__(self, dims, dtype, strides, context: GpuContext, device: str):
        self.dims = tuple(int(d) for d in dims)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = np.dtype(dtype)
        self.device = device
        self.context = context
        self._extent = element_extent(self.dims, self.strides)
        self.nbytes = self._extent * self.dtype.itemsize
        try:
            self.ptr = context.malloc(self.nbytes)
        except GpuError as exc:
            raise DeviceError(f"Device.empty: cannot allocate {self.nbytes} bytes (dims "
                              f"{self.dims}, {self.dtype.name}) on '{device}': {exc}") from None
        self._finalizer = weakref.finalize(self, _release, context, self.ptr)
        # Not at exit: an atexit handler registered before this array runs after
        # finalize's exit hook and may still use it; the process's end frees the memory.
        self._finalizer.atexit = False

    def _host_staging(self) -> tuple:
        """(flat host buffer of the allocation's size, its logical view)."""
        flat = np.empty(max(self._extent, 1), self.dtype)
        return flat, as_strided(flat, self.dims,
                                tuple(s * self.dtype.itemsize for s in self.strides))

    def copy_from(self, array) -> None:
        """Copy a NumPy array, or another ``GpuArray``, of logical shape ``dims`` into this
        array (blocking; ordered after work already launched on both devices' streams).

        A ``GpuArray`` of the same dtype and strides is copied as bytes: device to device on
        one device; peer to peer between two devices with peer access
        (``GpuContext.peer_access``); else staged through pinned host memory. Other strides
        are reordered through the host.

        Parameters
        ----------
        array : array_like or GpuArray
            Broadcastable to ``dims``; host values are cast to ``dtype`` by NumPy's
            assignment rules (a ``GpuArray`` must match dims and dtype exactly).

        Raises
        ------
        GraphError
            A ``GpuArray`` of other dims or dtype (GPU copies do not cast).
        VariantPackError
            A masked array (its mask would be dropped), or one whose shape does not
            broadcast to ``dims`` (a ``ValueError`` too).
        """
        if isinstance(array, GpuArray):
            self._copy_from_gpu(array)
            return
        values = host_values(array, "GpuArray.copy_from", self.dims)
        if self.nbytes == 0:
            return
        flat, view = self._host_staging()
        view[...] = values
        self._upload(flat.ctypes.data)

    def _upload(self, host_ptr: int) -> None:
        """Host bytes (the allocation's size) into this array, ordered after launched work."""
        ctx = self.context
        rt = ctx.runtime
        with ctx.using():
            ctx.order_copy_stream()
            rt.memcpy_async(self.ptr, host_ptr, self.nbytes, rt.MEMCPY_HOST_TO_DEVICE,
                            ctx.copy_stream)
            rt.stream_synchronize(ctx.copy_stream)

    def _download(self, host_ptr: int) -> None:
        """This array's bytes into host memory, once launched work is done."""
        ctx = self.context
        rt = ctx.runtime
        with ctx.using():
            ctx.order_copy_stream()
            rt.memcpy_async(host_ptr, self.ptr, self.nbytes, rt.MEMCPY_DEVICE_TO_HOST,
                            ctx.copy_stream)
            rt.stream_synchronize(ctx.copy_stream)

    def _copy_from_gpu(self, src: "GpuArray") -> None:
        if src.dims != self.dims or src.dtype != self.dtype:
            raise GraphError(f"GpuArray.copy_from: source dims {src.dims} {src.dtype.name} "
                             f"({src.device!r}) do not match dims {self.dims} "
                             f"{self.dtype.name} ({self.device!r}); GPU copies do not cast")
        if self.nbytes == 0:
            return
        if src.strides != self.strides:        # another memory order: reorder on the host
            self.copy_from(src.to_numpy_sync())
            return
        dst_ctx, src_ctx = self.context, src.context
        if dst_ctx is src_ctx:
            rt = dst_ctx.runtime
            with dst_ctx.using():
                dst_ctx.order_copy_stream()
                rt.memcpy_async(self.ptr, src.ptr, self.nbytes, rt.MEMCPY_DEVICE_TO_DEVICE,
                                dst_ctx.copy_stream)
                rt.stream_synchronize(dst_ctx.copy_stream)
        elif dst_ctx.peer_access(src_ctx):
            self._copy_peer(src)
        else:
            self._copy_staged(src)

    def _copy_peer(self, src: "GpuArray") -> None:
        """Peer copy on this device's copy stream, after the work launched on both."""
        dst_ctx, src_ctx = self.context, src.context
        rt = dst_ctx.runtime
        with src_ctx.using():
            src_ctx.order_copy_stream()
        ready = src_ctx.copy_stream_event()    # src's launched work is done at this event
        try:
            with dst_ctx.using():
                dst_ctx.order_copy_stream()
                rt.stream_wait_event(dst_ctx.copy_stream, ready)
                rt.memcpy_peer_async(self.ptr, dst_ctx.index, src.ptr, src_ctx.index,
                                     self.nbytes, dst_ctx.copy_stream)
                rt.stream_synchronize(dst_ctx.copy_stream)
        finally:
            with src_ctx.using():
                src_ctx.runtime.event_destroy(ready)

    def _copy_staged(self, src: "GpuArray") -> None:
        """Device to pinned host memory (the source's runtime) to device."""
        srt = src.context.runtime
        try:
            with src.context.using():
                host = srt.host_alloc(self.nbytes)
        except (GpuError, DeviceError):        # no pinned memory to be had: pageable
            flat = np.empty(self.nbytes, np.uint8)
            src._download(flat.ctypes.data)
            self._upload(flat.ctypes.data)
            return
        try:
            src._download(host)
            self._upload(host)
        finally:
            with src.context.using():
                srt.host_free(host)

    def to_numpy_sync(self) -> np.ndarray:
        """A C-contiguous NumPy copy in logical shape (blocking; waits for work already
        launched on the device's streams)."""
        flat, view = self._host_staging()
        if self.nbytes:
            self._download(flat.ctypes.data)
        return np.ascontiguousarray(view)

    async def to_numpy(self) -> np.ndarray:
        """As ``to_numpy_sync``, in a worker thread: the copy waits for work already
        launched on the device, and the event loop must not."""
        import anyio.to_thread
        return await anyio.to_thread.run_sync(self.to_numpy_sync)

    @property
    def __cuda_array_interface__(self) -> dict:
        item = self.dtype.itemsize
        typestr = self.dtype.str if self.dtype.kind == "f" else "<V2"  # bfloat16: raw 2 bytes
        return {"shape": self.dims, "typestr": typestr, "data": (self.ptr, False),
                "strides": tuple(s * item for s in self.strides), "version": 3,
                "stream": None}

    def __repr__(self) -> str:
        return (f"GpuArray(dims={self.dims}, strides={self.strides}, "
                f"dtype={self.dtype.name}, device={self.device!r})")


class LaunchContext:
    """Per-stream state a provider uses while enqueuing: ``stream`` (handle),
    ``context``, ``resources`` (a provider's per-stream objects, e.g. its DNN handle),
    and :meth:`workspace`. Only the stream's launching thread touches it, under the
    stream's lock."""

    def __init__(self, stream: int, context: GpuContext):
        self.stream = stream
        self.context = context
        self.resources: dict = {}
        self._ws_ptr = 0
        self._ws_size = 0

    def workspace(self, nbytes: int) -> int:
        """A device pointer to at least ``nbytes`` of scratch, reused by every item on this
        stream (items run in order, so one buffer suffices; it grows, never shrinks)."""
        if nbytes <= self._ws_size:
            return self._ws_ptr
        size = max(nbytes, 2 * self._ws_size)
        rt = self.context.runtime
        if self._ws_ptr:
            rt.free(self._ws_ptr, self.stream, self.context.pooled)  # stream-ordered
        self._ws_ptr, self._ws_size = 0, 0
        self._ws_ptr = (rt.malloc_async(size, self.stream) if self.context.pooled
                        else rt.malloc(size, 0, False))
        self._ws_size = size
        return self._ws_ptr

    def enter(self) -> None:
        """Make this the calling thread's launch context (``current_launch``)."""
        _launch_state.enter(self)

    @staticmethod
    def exit() -> None:
        """Clear the calling thread's launch context."""
        _launch_state.exit()

    def release(self) -> None:
        """Close per-stream resources and free the workspace (after the stream is drained)."""
        for res in self.resources.values():
            close = getattr(res, "close", None)
            if close is not None:
                close()
        self.resources.clear()
        if self._ws_ptr:
            self.context.runtime.free(self._ws_ptr, self.stream, self.context.pooled)
            self._ws_ptr, self._ws_size = 0, 0
