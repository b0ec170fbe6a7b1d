"""A Python-level fake GPU runtime and fake cuDNN that record every call (no GPU needed).

``fake_cuda`` installs them where the GPU layers look them up (the fake runtime is the
``runtime`` of the vendor state, so every ``GpuContext`` made for it calls the fake; the
fake cuDNN replaces the ``_cudnn`` module), opens the way for ``hd.Device("cuda:0")``
(``load_vendor("cuda")`` says a device and cuDNN are present) and returns the ``Recorder``. Device memory is host memory (NumPy buffers), so copies move real
bytes and ``pointer_device`` can tell device addresses (ours) from host ones. cuDNN calls
compute nothing: these fakes test call discipline and binding, not numbers (the C-level
fakes of tests/contract/ and the H200 runs test those).

A call is a *launch-time* call when a ``LaunchContext`` is current on the calling thread,
i.e. inside a plan's ``run`` (on a stream, or in a trial run at build). The calls that a
capture-safe ``run`` must never make (``FORBIDDEN_IN_RUN``) are recorded as violations.
"""
from __future__ import annotations

import ctypes
import itertools
import threading

import numpy as np
import pytest

from hipdnn_async._errors import GpuError
from hipdnn_async.runtime import _cudnn as real_cudnn
from hipdnn_async.runtime import _gpu as real_gpu
from hipdnn_async.runtime import LoadRecord, VendorState

# allocation, freeing, synchronisation, handle / stream / descriptor creation, and the
# vendor queries that belong to build time
FORBIDDEN_IN_RUN = frozenset({
    "gpu.malloc", "gpu.malloc_async", "gpu.free", "gpu.stream_synchronize",
    "gpu.event_synchronize", "gpu.stream_create", "gpu.stream_destroy", "gpu.event_create",
    "gpu.event_destroy", "gpu.memcpy", "gpu.set_device",
    "cudnn.create", "cudnn.destroy", "cudnn.set_stream", "cudnn.get_algorithms",
    "cudnn.find_algorithms", "cudnn.workspace_size", "cudnn.batchnorm_training_ex_sizes",
    "cudnn.batchnorm_backward_ex_sizes",
    "cudnn.TensorDescriptor", "cudnn.FilterDescriptor", "cudnn.ConvolutionDescriptor",
    "cudnn.ActivationDescriptor", "cudnn.OpTensorDescriptor",
})


class Recorder:
    """Every fake call as (name, args, in_run); ``violations`` are the forbidden ones
    made inside a run."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.violations: list[tuple] = []
        self._lock = threading.Lock()

    def record(self, name: str, args: tuple) -> None:
        from hipdnn_async.runtime import current_launch
        in_run = current_launch() is not None
        with self._lock:
            self.calls.append((name, args, in_run))
            if in_run and name in FORBIDDEN_IN_RUN:
                self.violations.append((name, args))

    def names(self, *, in_run=None) -> list[str]:
        return [n for n, _, r in self.calls if in_run is None or r == in_run]

    def count(self, name: str) -> int:
        return sum(1 for n, _, _ in self.calls if n == name)

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
            self.violations.clear()


_CUDA = real_gpu.instance("cuda")   # the real CUDA runtime's constants (not loaded here)


class FakeGpuRuntime:
    """The surface of a ``runtime._gpu.Runtime`` (the CUDA instance's constants),
    host-backed."""

    GpuError = GpuError
    kind = "cuda"
    version = 13000
    record = LoadRecord("cudart", "fake", "test", 13000)

    def __init__(self, rec: Recorder, *, pooled: bool = True):
        self._rec = rec
        self._pooled = pooled
        self._mem: dict[int, np.ndarray] = {}   # pointer -> backing host buffer
        self._handles = itertools.count(0x1000)
        self.live = 0                            # allocations not yet freed
        self._current = threading.local()

    def __getattr__(self, name):                 # constants: the real CUDA runtime's values
        if name in _CUDA.constants:
            return _CUDA.constants[name]
        raise AttributeError(f"the fake GPU runtime has no {name}")

    def _r(self, name, *args):
        self._rec.record("gpu." + name, args)

    # devices
    def set_device(self, index):
        self._r("set_device", index)
        self._current.index = index

    def get_device(self):                        # per host thread, as the runtime's
        return getattr(self._current, "index", 0)

    def device_count(self):                      # one device: launches need not switch
        return 1

    def device_name(self, index):
        return "Fake GPU"

    def compute_capability(self, index):
        return (9, 0)

    def arch_name(self, index):
        return "sm_90"

    def multiprocessor_count(self, index):
        return 132

    def memory_pools_supported(self, index):
        return self._pooled

    def pool_keep_memory(self, index):
        return self._pooled

    # streams, events
    def stream_create(self, flags=0):
        self._r("stream_create", flags)
        return next(self._handles)

    def stream_destroy(self, stream):
        self._r("stream_destroy", stream)

    def stream_synchronize(self, stream):
        self._r("stream_synchronize", stream)

    def stream_wait_event(self, stream, event):
        self._r("stream_wait_event", stream, event)

    def event_create(self, flags=0):
        self._r("event_create", flags)
        return next(self._handles)

    def event_record(self, event, stream):
        self._r("event_record", event, stream)

    def event_synchronize(self, event):
        self._r("event_synchronize", event)

    def event_query(self, event):                 # work here is complete when enqueued
        self._r("event_query", event)
        return True

    def event_destroy(self, event):
        self._r("event_destroy", event)

    # memory
    def _alloc(self, nbytes):
        if nbytes == 0:
            return 0
        buf = np.zeros(nbytes, np.uint8)
        ptr = buf.ctypes.data
        self._mem[ptr] = buf
        self.live += 1
        return ptr

    def malloc(self, nbytes, stream=0, pooled=True):
        self._r("malloc", nbytes, stream, pooled)
        return self._alloc(nbytes)

    def malloc_async(self, nbytes, stream):
        self._r("malloc_async", nbytes, stream)
        return self._alloc(nbytes)

    def free(self, ptr, stream=0, pooled=True):
        self._r("free", ptr, stream, pooled)
        if ptr:
            del self._mem[ptr]
            self.live -= 1

    def memcpy_async(self, dst, src, nbytes, kind, stream):
        self._r("memcpy_async", dst, src, nbytes, kind, stream)
        ctypes.memmove(dst, src, nbytes)

    def memset_async(self, dst, value, nbytes, stream):
        self._r("memset_async", dst, value, nbytes, stream)
        ctypes.memset(dst, value, nbytes)

    def pointer_device(self, ptr):
        for base, buf in self._mem.items():
            if base <= ptr < base + buf.nbytes:
                return 0
        return -1


class _FakeDescriptor:
    _ptrs = itertools.count(0x5000)

    def __init__(self, kind, args):
        self.kind, self.args = kind, args
        self.ptr = next(self._ptrs)


class FakeCudnn:
    """The surface of ``runtime._cudnn``: records calls, computes nothing.

    The heuristic offers IMPLICIT_PRECOMP_GEMM (1, ``ALGO_WS`` bytes of workspace) then
    IMPLICIT_GEMM (0, none); the training Ex call asks ``EX_SIZES`` (workspace, reserve).
    """

    CudnnError = real_cudnn.CudnnError
    ALGO_WS = 4096
    EX_SIZES = (1000, 300)

    def __init__(self, rec: Recorder):
        self._rec = rec
        self._handles = itertools.count(0x9000)
        self.live_handles = set()
        self.descriptors: dict[int, _FakeDescriptor] = {}   # ptr -> descriptor

    def __getattr__(self, name):
        value = getattr(real_cudnn, name)
        if isinstance(value, type) and name.endswith("Descriptor"):
            def make(*args, _name=name):
                self._rec.record("cudnn." + _name, args)
                desc = _FakeDescriptor(_name, args)
                self.descriptors[desc.ptr] = desc
                return desc
            return make
        if callable(value) and not isinstance(value, type):
            def call(*args, _name=name):
                self._rec.record("cudnn." + _name, args)
                return None
            return call
        return value   # constants

    def create(self):
        self._rec.record("cudnn.create", ())
        h = next(self._handles)
        self.live_handles.add(h)
        return h

    def destroy(self, h):
        self._rec.record("cudnn.destroy", (h,))
        self.live_handles.discard(h)

    def set_stream(self, h, stream):
        self._rec.record("cudnn.set_stream", (h, stream))

    def _entries(self):
        det, fma = real_cudnn.DETERMINISTIC, real_cudnn.FMA_MATH
        return [(1, 0, 0.1, self.ALGO_WS, det, fma), (0, 0, 0.2, 0, det, fma)]

    def get_algorithms(self, *args):
        self._rec.record("cudnn.get_algorithms", args)
        return self._entries()

    def find_algorithms(self, *args):
        self._rec.record("cudnn.find_algorithms", args)
        return self._entries()

    def workspace_size(self, direction, handle, a, b, conv, c, algo):
        self._rec.record("cudnn.workspace_size", (direction, handle, a, b, conv, c, algo))
        return self.ALGO_WS if algo == 1 else 0

    def batchnorm_training_ex_sizes(self, *args):
        self._rec.record("cudnn.batchnorm_training_ex_sizes", args)
        return self.EX_SIZES

    def batchnorm_backward_ex_sizes(self, *args):
        # (workspace, reserve): no reserve space for bnOps BN, as cuDNN 9.19 answers
        self._rec.record("cudnn.batchnorm_backward_ex_sizes", args)
        return self.EX_SIZES[0], 0


def _install(monkeypatch, *, pooled=True):
    import hipdnn_async.runtime as runtime
    from hipdnn_async.providers._gpu import _vendor
    from hipdnn_async.providers.cudnn import _conv, _plans, _provider
    from hipdnn_async.runtime import _gpu_device, _stream_prep

    rec = Recorder()
    gpu, cudnn = FakeGpuRuntime(rec, pooled=pooled), FakeCudnn(rec)
    for mod in (_conv, _plans, _provider, _stream_prep):   # _stream_prep: stream handles
        monkeypatch.setattr(mod, "_cudnn", cudnn)
    monkeypatch.setattr(_gpu_device, "_contexts", {})    # a fresh GpuContext per test
    state = VendorState("cuda", True, runtime=gpu, device_count=1,
                        dnn=LoadRecord("cudnn", "fake", "test", 91900))
    load = {"cuda": state}.get
    monkeypatch.setattr(runtime, "load_vendor",
                        lambda name: load(name) or VendorState(name, False, "not faked"))
    monkeypatch.setattr(_vendor, "load_vendor", lambda name: state)
    rec.gpu, rec.cudnn = gpu, cudnn
    return rec


@pytest.fixture
def fake_cuda(monkeypatch):
    """The fake runtime and cuDNN installed (pooled memory); yields the Recorder."""
    return _install(monkeypatch)


@pytest.fixture
def fake_cuda_unpooled(monkeypatch):
    """As ``fake_cuda`` on a device without memory pools (plain malloc/free)."""
    return _install(monkeypatch, pooled=False)
