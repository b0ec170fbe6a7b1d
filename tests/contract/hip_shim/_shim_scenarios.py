"""What a worker process runs with the hip-on-CUDA shim as its HIP runtime.

The worker's environment names the shim (``HIPDNN_ASYNC_HIP_RUNTIME``) and the libcudart
under it (``HIPDNN_ASYNC_CUDART``: the contract harness's fake on a CPU machine, the real
one on a GPU machine). Each case loads the HIP runtime binding through the loader
(``load_vendor("hip")``; MIOpen is absent, so the vendor is not ``ok`` but its runtime is
loaded) and returns plain data: the values computed through HIP next to what NumPy or the
CUDA runtime binding (instance ``"cuda"``, the same libcudart, CUDA's own enum values)
says they must be. With ``fake`` the fake's call log is returned too (the CUDA values the
shim passed on) and its stream delay is raised where a case needs work to be in flight.

The same cases run on the fake (tests/contract/test_hip_shim.py) and on a GPU
(tests/gpu/test_hip_shim_gpu.py); only sizes and the fake-only parts differ.
"""
from __future__ import annotations

import ctypes
import gc
import os
import threading
import time
import weakref

import numpy as np

__all__ = ["device_case", "copy_case", "order_case", "host_func_case", "alloc_case",
           "graph_case", "queue_case", "error_case"]

# offsets in hipDeviceProp_tR0600 (hip_min.h; hip_min_check.c holds them to ROCm 6.4 / 7.2)
_PROPS = {"totalGlobalMem": (288, ctypes.c_size_t), "warpSize": (308, ctypes.c_int),
          "major": (360, ctypes.c_int), "minor": (364, ctypes.c_int),
          "multiProcessorCount": (388, ctypes.c_int)}
_PROPS_BYTES = 1472
_HIP_ATTR_WARP_SIZE = 87     # hipDeviceAttributeWarpSize (hip_min.h, checked likewise)


def _fake_control():
    from contract._fakes import FakeControl
    return FakeControl(os.environ["HIPDNN_ASYNC_CUDART"])


def _runtimes():
    """(hip runtime, cuda runtime, hip VendorState, the shim through ctypes)."""
    from hipdnn_async.runtime import _gpu, _vendors
    state = _vendors.load_vendor("hip")
    hip = state.runtime
    if hip is None:
        raise RuntimeError(f"the HIP runtime did not load: {state.reason}")
    cuda = _gpu.instance("cuda")
    if not cuda.loaded:
        cuda.load(os.environ["HIPDNN_ASYNC_CUDART"], "env")
    hip.set_device(0)
    cuda.set_device(0)
    lib = ctypes.CDLL(os.environ["HIPDNN_ASYNC_HIP_RUNTIME"])
    return hip, cuda, state, lib


def _log(fake, ctl):
    return ctl.log() if fake else None


class _Pinned:
    """``n`` bytes of pinned host memory from ``rt.host_alloc`` with a NumPy view."""

    def __init__(self, rt, n):
        self.rt, self.n = rt, n
        self.ptr = rt.host_alloc(n)
        self.array = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.ptr))

    def free(self):
        self.array = None
        self.rt.host_free(self.ptr)


def _pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _error_facts(exc) -> dict:
    return {"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__],
            "status": getattr(exc, "status", None),
            "status_name": getattr(exc, "status_name", None),
            "call": getattr(exc, "call", None), "message": str(exc)}


# ---------------------------------------------------------------------- cases
def device_case(fake: bool = False) -> dict:
    """What the HIP binding says of device 0 through the shim, and what the CUDA binding says."""
    ctl = _fake_control() if fake else None
    if fake:
        ctl.clear()
    hip, cuda, state, lib = _runtimes()
    rec = state.runtime_record
    out = {"state": {"ok": state.ok, "reason": state.reason, "path": rec.path,
                     "found_via": rec.found_via, "device_count": state.device_count},
           "version": hip.version, "driver_version": hip.driver_version(),
           "cuda_driver_version": cuda.driver_version()}
    for name, rt in (("hip", hip), ("cuda", cuda)):
        out[name] = {"name": rt.device_name(0), "cc": rt.compute_capability(0),
                     "arch": rt.arch_name(0), "mp": rt.multiprocessor_count(0),
                     "pools": rt.memory_pools_supported(0), "total": rt.total_memory(0),
                     "priorities": rt.stream_priority_range(), "count": rt.device_count()}
    buf = ctypes.create_string_buffer(_PROPS_BYTES)
    lib.hipGetDevicePropertiesR0600.argtypes = [ctypes.c_void_p, ctypes.c_int]
    out["props_status"] = lib.hipGetDevicePropertiesR0600(buf, 0)
    out["props"] = {k: t.from_buffer(buf, off).value for k, (off, t) in _PROPS.items()}
    out["warp_size_attr"] = hip.device_attribute(_HIP_ATTR_WARP_SIZE, 0)
    import hipdnn_async as hd
    try:
        hd.Device("hip:0").close()
        out["dnn"] = None
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["dnn"] = _error_facts(exc)
    out["log"] = _log(fake, ctl)
    return out


def copy_case(fake: bool = False, nbytes: int = 1 << 16) -> dict:
    """Host -> device -> device -> (memset part) -> host through HIP, pinned and pageable;
    the device data read back through CUDA too; pointer attributes of each kind."""
    ctl = _fake_control() if fake else None
    hip, cuda, _, lib = _runtimes()
    data = _pattern(nbytes, 1)
    off, count, value = nbytes // 4, nbytes // 3, 0x5A
    want = data.copy()
    want[off:off + count] = value
    src, dst = _Pinned(hip, nbytes), _Pinned(hip, nbytes)
    src.array[:] = data
    a, b = hip.malloc(nbytes, 0, False), hip.malloc(nbytes, 0, False)
    s = hip.stream_create()
    if fake:
        ctl.clear()
        ctl.mark("copies")
    hip.memcpy_async(a, src.ptr, nbytes, hip.MEMCPY_HOST_TO_DEVICE, s)
    hip.memcpy_async(b, a, nbytes, hip.MEMCPY_DEVICE_TO_DEVICE, s)
    hip.memset_async(b + off, value, count, s)
    hip.memcpy_async(dst.ptr, b, nbytes, hip.MEMCPY_DEVICE_TO_HOST, s)
    hip.stream_synchronize(s)
    if fake:
        ctl.mark("pageable")
    out = {"pinned_ok": bool(np.array_equal(dst.array, want))}
    page = np.zeros(nbytes, np.uint8)
    hip.memcpy(b, data.ctypes.data, nbytes, hip.MEMCPY_HOST_TO_DEVICE)
    hip.memcpy(page.ctypes.data, b, nbytes, hip.MEMCPY_DEVICE_TO_HOST)
    out["pageable_ok"] = bool(np.array_equal(page, data))
    if fake:
        ctl.mark("end")
    through_cuda = np.zeros(nbytes, np.uint8)
    cuda.memcpy(through_cuda.ctypes.data, a, nbytes, cuda.MEMCPY_DEVICE_TO_HOST)
    out["cuda_reads_hip_memory"] = bool(np.array_equal(through_cuda, data))
    out["pointer_device"] = {"device": hip.pointer_device(a), "pinned": hip.pointer_device(src.ptr),
                             "pageable": hip.pointer_device(page.ctypes.data)}
    attr = ctypes.create_string_buffer(32)
    lib.hipPointerGetAttributes.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    types = {}
    for label, ptr in (("device", a), ("pinned", src.ptr), ("pageable", page.ctypes.data)):
        st = lib.hipPointerGetAttributes(attr, ctypes.c_void_p(ptr))
        types[label] = (st, ctypes.c_int.from_buffer(attr, 0).value,
                        ctypes.c_int.from_buffer(attr, 24).value)    # type, isManaged
    out["pointer_types"] = types
    out["memory_types"] = {k: hip.constants[k] for k in ("MEMORY_TYPE_UNREGISTERED",
                                                         "MEMORY_TYPE_HOST", "MEMORY_TYPE_DEVICE")}
    hip.stream_destroy(s)
    hip.free(a, 0, False)
    hip.free(b, 0, False)
    src.free()
    dst.free()
    out["log"] = _log(fake, ctl)
    return out


def order_case(fake: bool = False, nbytes: int = 1 << 16) -> dict:
    """A copy on stream 1 fills A; stream 2 waits on an event of stream 1, then copies A -> B
    -> host; only stream 2's event is waited for. Plus event queries before / after and
    the elapsed time of two timing events around the first copy."""
    ctl = _fake_control() if fake else None
    hip, _, _, _ = _runtimes()
    data = _pattern(nbytes, 2)
    src, dst = _Pinned(hip, nbytes), _Pinned(hip, nbytes)
    src.array[:] = data
    a, b = hip.malloc(nbytes, 0, False), hip.malloc(nbytes, 0, False)
    least, greatest = hip.stream_priority_range()
    s1 = hip.stream_create()
    s2 = hip.stream_create_with_priority(greatest)
    zero = hip.stream_create()
    hip.memset_async(a, 0, nbytes, zero)
    hip.memset_async(b, 0, nbytes, zero)
    hip.stream_synchronize(zero)
    if fake:
        ctl.clear()
    ev, done = hip.event_create(), hip.event_create()
    t0, t1 = hip.event_create(hip.EVENT_DEFAULT), hip.event_create(hip.EVENT_DEFAULT)
    if fake:
        ctl.set_delay_us(50000)      # the first copy stays in flight long enough to see it
        ctl.mark("order")
    hip.event_record(t0, s1)
    hip.memset_async(a, 0, nbytes, s1)   # two items ahead of the event: stream 2 would win
    hip.memcpy_async(a, src.ptr, nbytes, hip.MEMCPY_HOST_TO_DEVICE, s1)
    hip.event_record(t1, s1)
    hip.event_record(ev, s1)
    pending = not hip.event_query(ev)
    stream_pending = not hip.stream_query(s1)
    hip.stream_wait_event(s2, ev)
    hip.memcpy_async(b, a, nbytes, hip.MEMCPY_DEVICE_TO_DEVICE, s2)
    hip.memcpy_async(dst.ptr, b, nbytes, hip.MEMCPY_DEVICE_TO_HOST, s2)
    hip.event_record(done, s2)
    hip.event_synchronize(done)
    out = {"ordered_ok": bool(np.array_equal(dst.array, data)),
           "pending_seen": pending, "stream_pending_seen": stream_pending,
           "complete_after": hip.event_query(ev), "stream_idle_after": hip.stream_query(s2),
           "elapsed_ms": hip.event_elapsed_time(t0, t1), "priorities": (least, greatest),
           "nbytes": nbytes}
    if fake:
        ctl.set_delay_us(2000)
        ctl.mark("end")
    try:
        hip.event_elapsed_time(ev, done)          # timing disabled: refused
        out["untimed_error"] = None
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["untimed_error"] = _error_facts(exc)
    for e in (ev, done, t0, t1):
        hip.event_destroy(e)
    for s in (s1, s2, zero):
        hip.stream_destroy(s)
    hip.free(a, 0, False)
    hip.free(b, 0, False)
    src.free()
    dst.free()
    out["log"] = _log(fake, ctl)
    return out


def host_func_case(fake: bool = False, nbytes: int = 1 << 16) -> dict:
    """hipLaunchHostFunc after a device -> host copy: the function runs once, off the calling
    thread, after the copy (it sees the copied bytes)."""
    hip, _, _, lib = _runtimes()
    data = _pattern(nbytes, 3)
    src, dst = _Pinned(hip, nbytes), _Pinned(hip, nbytes)
    src.array[:] = data
    dst.array[:] = 0
    a = hip.malloc(nbytes, 0, False)
    s = hip.stream_create()
    seen = []

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def host_fn(_user):
        seen.append((bool(np.array_equal(dst.array, data)), threading.get_ident()))

    lib.hipLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    hip.memcpy_async(a, src.ptr, nbytes, hip.MEMCPY_HOST_TO_DEVICE, s)
    hip.memcpy_async(dst.ptr, a, nbytes, hip.MEMCPY_DEVICE_TO_HOST, s)
    status = lib.hipLaunchHostFunc(ctypes.c_void_p(s), ctypes.cast(host_fn, ctypes.c_void_p), None)
    hip.stream_synchronize(s)
    out = {"status": status, "calls": len(seen), "saw_copy": [c[0] for c in seen],
           "other_thread": [c[1] != threading.get_ident() for c in seen]}
    hip.stream_destroy(s)
    hip.free(a, 0, False)
    src.free()
    dst.free()
    return out


def alloc_case(fake: bool = False, nbytes: int = 1 << 16) -> dict:
    """Stream-ordered allocation (hipMallocAsync / hipFreeAsync on one stream) and the
    default pool's release threshold, set through the binding and read back through HIP."""
    ctl = _fake_control() if fake else None
    hip, _, _, lib = _runtimes()
    out = {"pools": hip.memory_pools_supported(0), "kept": hip.pool_keep_memory(0)}
    pool = ctypes.c_void_p()
    lib.hipDeviceGetDefaultMemPool.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.hipMemPoolGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    threshold = ctypes.c_uint64(0)
    out["pool_status"] = lib.hipDeviceGetDefaultMemPool(ctypes.byref(pool), 0)
    out["threshold_status"] = lib.hipMemPoolGetAttribute(
        pool, hip.constants["POOL_ATTR_RELEASE_THRESHOLD"], ctypes.byref(threshold))
    out["threshold"] = threshold.value
    dst = _Pinned(hip, nbytes)
    s = hip.stream_create()
    if fake:
        ctl.clear()
        ctl.mark("alloc")
    p = hip.malloc_async(nbytes, s)
    hip.memset_async(p, 0x33, nbytes, s)
    hip.memcpy_async(dst.ptr, p, nbytes, hip.MEMCPY_DEVICE_TO_HOST, s)
    hip.free(p, s, True)
    hip.stream_synchronize(s)
    if fake:
        ctl.mark("end")
    out["stream_ordered_ok"] = bool((dst.array == 0x33).all())
    q = hip.malloc(nbytes, s, True)       # pooled, usable from any stream
    out["pooled_device"] = hip.pointer_device(q)
    hip.free(q, s, True)
    hip.stream_synchronize(s)
    hip.stream_destroy(s)
    dst.free()
    out["log"] = _log(fake, ctl)
    return out


def graph_case(fake: bool = False, nbytes: int = 1 << 12) -> dict:
    """Capture memset + copy into a graph, launch it, recapture with another value, update the
    executable graph in place (HIP's four-argument hipGraphExecUpdate), launch again."""
    ctl = _fake_control() if fake else None
    hip, _, _, _ = _runtimes()
    a, b = hip.malloc(nbytes, 0, False), hip.malloc(nbytes, 0, False)
    host = np.zeros(nbytes, np.uint8)
    s = hip.stream_create()
    if fake:
        ctl.clear()
        ctl.mark("capture")

    def capture(value):
        hip.stream_begin_capture(s)
        status = hip.stream_is_capturing(s)
        hip.memset_async(a, value, nbytes, s)
        hip.memcpy_async(b, a, nbytes, hip.MEMCPY_DEVICE_TO_DEVICE, s)
        return hip.stream_end_capture(s), status

    def read():
        hip.memcpy(host.ctypes.data, b, nbytes, hip.MEMCPY_DEVICE_TO_HOST)
        return host.copy()

    g1, status = capture(7)
    exe = hip.graph_instantiate(g1)
    hip.graph_launch(exe, s)
    hip.stream_synchronize(s)
    first = read()
    g2, _ = capture(9)
    updated = hip.graph_exec_update(exe, g2)
    hip.graph_launch(exe, s)
    hip.stream_synchronize(s)
    second = read()
    out = {"status_during": status, "status_after": hip.stream_is_capturing(s),
           "first_ok": bool((first == 7).all()), "updated": updated,
           "second_ok": bool((second == 9).all()),
           "capture_constants": {k: hip.constants[k] for k in (
               "STREAM_CAPTURE_STATUS_ACTIVE", "STREAM_CAPTURE_STATUS_NONE")}}
    if fake:
        ctl.mark("end")
    for g in (g1, g2):
        hip.graph_destroy(g)
    hip.graph_exec_destroy(exe)
    hip.stream_destroy(s)
    hip.free(a, 0, False)
    hip.free(b, 0, False)
    out["log"] = _log(fake, ctl)
    return out


class _Token:
    """A keepalive whose lifetime the queue case watches."""


def queue_case(fake: bool = False, backend: str = "asyncio", n: int = 8,
               nbytes: int = 1 << 14, big: int = 1 << 20) -> dict:
    """The GPU stream backend on the HIP runtime: ``n`` work items (memset + device copy of
    their own buffers) over two streams, a cross-stream event wait, and an awaiter
    cancelled while its (long) item is in flight, whose execution still completes, with
    its keepalive held until then."""
    import anyio
    from hipdnn_async.queues._gpu_backend import GpuStreamBackend
    from hipdnn_async.queues._pool import StreamPool
    from hipdnn_async.runtime._gpu_device import GpuArray, context_for, current_launch

    ctl = _fake_control() if fake else None
    hip, _, _, _ = _runtimes()
    ctx = context_for(0, hip)
    m = nbytes // 4
    shape, strides = (1, 1, 1, m), (m, m, m, 1)
    result = {"arch": ctx.arch, "pooled": ctx.pooled}
    if fake:
        ctl.clear()
        ctl.mark("open")

    async def main():
        pool = StreamPool("hip:0", n_streams=2, max_inflight=4,
                          backend_factory=lambda name: GpuStreamBackend(name, ctx))
        try:
            if fake:
                ctl.mark("submit")
            srcs = [GpuArray(shape, np.float32, strides, ctx, "hip:0") for _ in range(n)]
            outs = [GpuArray(shape, np.float32, strides, ctx, "hip:0") for _ in range(n)]
            streams_seen = []

            def work(i):
                lc = current_launch()
                streams_seen.append(lc.stream)
                hip.memset_async(srcs[i].ptr, 16 + i, nbytes, lc.stream)
                hip.memcpy_async(outs[i].ptr, srcs[i].ptr, nbytes, hip.MEMCPY_DEVICE_TO_DEVICE,
                                 lc.stream)
                return i

            handles = [await pool.submit(lambda i=i: work(i), stream=i % 2, label=f"item {i}")
                       for i in range(n)]
            result["values"] = [await h for h in handles]
            result["streams"] = len(set(streams_seen))
            result["outputs_ok"] = [bool((o.to_numpy_sync().view(np.uint8) == 16 + i).all())
                                    for i, o in enumerate(outs)]
            # cross-stream: stream 1 copies what stream 0 wrote, after an event wait only
            if fake:
                ctl.mark("cross")
            data = _pattern(big, 4)
            host = _Pinned(hip, big)
            host.array[:] = data
            bm = big // 4
            mid = GpuArray((1, 1, 1, bm), np.float32, (bm, bm, bm, 1), ctx, "hip:0")
            fin = GpuArray((1, 1, 1, bm), np.float32, (bm, bm, bm, 1), ctx, "hip:0")
            fin.copy_from(np.zeros((1, 1, 1, bm), np.float32))
            if fake:
                ctl.set_delay_us(20000)
            h0 = await pool.submit(lambda: hip.memcpy_async(
                mid.ptr, host.ptr, big, hip.MEMCPY_HOST_TO_DEVICE, current_launch().stream),
                stream=0)
            pool.streams[1].wait_event(pool.streams[0].record_event())
            h1 = await pool.submit(lambda: hip.memcpy_async(
                fin.ptr, mid.ptr, big, hip.MEMCPY_DEVICE_TO_DEVICE, current_launch().stream),
                stream=1)
            await h1
            result["cross_first_done"] = h0.done()
            await h0
            result["cross_ok"] = bool(np.array_equal(fin.to_numpy_sync().view(np.uint8).ravel(),
                                                     data))
            # cancellation: the awaiter goes, the execution and its keepalive stay
            if fake:
                ctl.mark("cancel")
            token = _Token()
            ref = weakref.ref(token)
            out_big = GpuArray((1, 1, 1, bm), np.float32, (bm, bm, bm, 1), ctx, "hip:0")

            def long_work():
                s = current_launch().stream
                hip.memcpy_async(mid.ptr, host.ptr, big, hip.MEMCPY_HOST_TO_DEVICE, s)
                hip.memcpy_async(out_big.ptr, mid.ptr, big, hip.MEMCPY_DEVICE_TO_DEVICE, s)

            if fake:
                ctl.set_delay_us(100000)   # in flight for 0.2 s: a busy host still sees it
            c = await pool.submit(long_work, keepalive=(token,), stream=0)
            del token
            scope = anyio.CancelScope()

            async def waiter():
                with scope:
                    await c

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.sleep(0)
                scope.cancel()
            result["cancelled"] = scope.cancelled_caught
            result["alive_at_cancel"] = ref() is not None
            result["done_at_cancel"] = c.done()
            await pool.synchronize()
            gc.collect()
            result["done_after"] = c.done()
            result["released_after"] = ref() is None
            result["cancel_ok"] = bool(np.array_equal(
                out_big.to_numpy_sync().view(np.uint8).ravel(), data))
            result["pending_after"] = [s.pending for s in pool.streams]
            if fake:
                ctl.set_delay_us(2000)
                ctl.mark("close")
            host.free()
        finally:
            pool.close()
        if fake:
            ctl.mark("closed")

    anyio.run(main, backend=backend)
    result["log"] = _log(fake, ctl)
    return result


def error_case(fake: bool = False) -> dict:
    """Statuses through the shim: CUDA's (translated) and the shim's own refusals."""
    ctl = _fake_control() if fake else None
    hip, _, _, _ = _runtimes()
    out = {}

    def attempt(label, fn):
        try:
            fn()
            out[label] = None
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out[label] = _error_facts(exc)

    a = hip.malloc(64, 0, False)
    attempt("bad_device", lambda: hip.set_device(hip.device_count() + 7))
    hip.set_device(0)
    attempt("unpaired_attribute", lambda: hip.device_attribute(9999, 0))
    attempt("unpaired_memcpy_kind", lambda: hip.memcpy(a, a, 64, 7))
    attempt("unpaired_stream_flag", lambda: hip.stream_create(0x8))
    attempt("unpaired_event_flag", lambda: hip.event_create(0x40))
    if fake:
        s = hip.stream_create()
        ctl.inject("cudaMallocAsync", 2)          # cudaErrorMemoryAllocation
        attempt("out_of_memory", lambda: hip.malloc_async(64, s))
        ctl.inject("cudaStreamSynchronize", 800)  # cudaErrorNotPermitted: no HIP pair
        attempt("unpaired_cuda_status", lambda: hip.stream_synchronize(s))
        ctl.clear_injections()
        hip.stream_destroy(s)
    hip.free(a, 0, False)
    return out
