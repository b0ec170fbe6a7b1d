# cython: language_level=3, boundscheck=False, wraparound=False
"""GPU runtime bindings (``hipdnn_async.runtime._gpu``): the CUDA or HIP runtime, loaded
at run time with ``dlopen``; no SDK headers are needed to build this module.

Wrapping contract
-----------------
Covered: device count / selection / attributes / name, memory (stream-ordered pool
allocation with a plain ``Malloc`` fallback), async copies and memsets, streams, events,
pointer attributes, versions. One table of function pointers serves both runtimes: the
symbols are looked up as ``<prefix><Name>`` with prefix ``cuda`` or ``hip`` (CuPy's
``cupy_hip_runtime.h`` idea, at run time). Handles (streams, events, pools) and device
pointers travel as Python ints.

Errors: a non-zero status raises ``GpuError`` (``.status``, ``.name``, ``.call``) with
the runtime's own error string; a missing symbol raises ``GpuError`` naming it when the
function is first called, not at load. Blocking calls (synchronize, copies, frees) release
the GIL.
"""
from libc.stdint cimport uintptr_t
from libc.string cimport memset
import threading

cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char*, int)
    void* dlsym(void*, const char*)
    char* dlerror()
    int RTLD_NOW
    int RTLD_LOCAL

__all__ = ["GpuError", "load", "loaded", "device_count", "set_device", "get_device",
           "device_attribute", "device_name", "runtime_version", "driver_version",
           "mem_get_info", "stream_create", "stream_destroy", "stream_synchronize",
           "stream_wait_event", "event_create", "event_record", "event_synchronize",
           "event_query", "event_elapsed_time", "event_destroy", "malloc", "free",
           "malloc_async", "memcpy", "memcpy_async", "memset_async", "pool_keep_memory", "pointer_device"]

# Enum values: cuda_runtime_api.h / driver_types.h (CUDA 12.9 wheel), identical in
# hip_runtime_api.h (ROCm 6.x) - see shared/reference/vendor-c-apis.md s.4.
STREAM_NON_BLOCKING = 0x1
EVENT_BLOCKING_SYNC = 0x1
EVENT_DISABLE_TIMING = 0x2
MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3
NOT_READY = 600                      # cudaErrorNotReady == hipErrorNotReady
ATTR_CC_MAJOR = 75                   # cudaDevAttrComputeCapabilityMajor
ATTR_CC_MINOR = 76
ATTR_MEMORY_POOLS_SUPPORTED = 115    # cudaDevAttrMemoryPoolsSupported
_POOL_ATTR_RELEASE_THRESHOLD = 4     # cudaMemPoolAttrReleaseThreshold
_MEMORY_TYPE_DEVICE = 2              # cudaMemoryTypeDevice
_MEMORY_TYPE_MANAGED = 3

ctypedef int (*f_int_p)(int*) noexcept nogil
ctypedef int (*f_int)(int) noexcept nogil
ctypedef const char* (*f_errstr)(int) noexcept nogil
ctypedef int (*f_attr)(int*, int, int) noexcept nogil
ctypedef int (*f_props)(void*, int) noexcept nogil
ctypedef int (*f_meminfo)(size_t*, size_t*) noexcept nogil
ctypedef int (*f_stream_create)(void**, unsigned int) noexcept nogil
ctypedef int (*f_handle)(void*) noexcept nogil
ctypedef int (*f_wait_event)(void*, void*, unsigned int) noexcept nogil
ctypedef int (*f_event_record)(void*, void*) noexcept nogil
ctypedef int (*f_elapsed)(float*, void*, void*) noexcept nogil
ctypedef int (*f_malloc)(void**, size_t) noexcept nogil
ctypedef int (*f_malloc_async)(void**, size_t, void*) noexcept nogil
ctypedef int (*f_free_async)(void*, void*) noexcept nogil
ctypedef int (*f_memcpy)(void*, const void*, size_t, int) noexcept nogil
ctypedef int (*f_memcpy_async)(void*, const void*, size_t, int, void*) noexcept nogil
ctypedef int (*f_memset_async)(void*, int, size_t, void*) noexcept nogil
ctypedef int (*f_pool)(void**, int) noexcept nogil
ctypedef int (*f_pool_set)(void*, int, void*) noexcept nogil
ctypedef int (*f_ptr_attr)(void*, const void*) noexcept nogil

# cudaPointerAttributes (CUDA >= 11) / hipPointerAttribute_t (ROCm >= 6): the first
# fields are {memoryType type; int device; void* devicePointer; void* hostPointer}.
ctypedef struct PointerAttributes:
    int type
    int device
    void* devicePointer
    void* hostPointer
    char pad[64]

# One slot per function, in _NAMES order.
_NAMES = ("GetDeviceCount", "SetDevice", "GetDevice", "GetErrorString", "GetErrorName",
          "DeviceGetAttribute", "GetDeviceProperties", "MemGetInfo", "RuntimeGetVersion",
          "DriverGetVersion", "StreamCreateWithFlags", "StreamDestroy", "StreamSynchronize",
          "StreamWaitEvent", "EventCreateWithFlags", "EventRecord", "EventSynchronize",
          "EventQuery", "EventElapsedTime", "EventDestroy", "Malloc", "Free",
          "MallocAsync", "FreeAsync", "Memcpy", "MemcpyAsync", "MemsetAsync",
          "DeviceGetDefaultMemPool", "MemPoolSetAttribute", "PointerGetAttributes")
DEF N_FUNCS = 30
# every runtime we support exports these (the rest are checked when called)
_REQUIRED = (0, 1, 3, 8, 10, 12, 14, 15, 16, 20, 21, 25)
cdef void* _fn[N_FUNCS]
cdef void* _lib = NULL
_lock = threading.Lock()
_record = None          # (path, prefix) once loaded
_prefix = "cuda"


class GpuError(RuntimeError):
    """A runtime call failed. ``status`` is the runtime's code, ``name`` its enum name."""

    def __init__(self, call, status, name, text):
        self.call, self.status, self.name, self.text = call, status, name, text
        super().__init__(f"{call} failed: {name} ({status}): {text}")

    def __reduce__(self):
        return (GpuError, (self.call, self.status, self.name, self.text))


def load(path, prefix="cuda"):
    """Load the runtime library at ``path`` (an absolute path or a soname); idempotent.

    Parameters
    ----------
    path : str
        e.g. ``".../nvidia/cu13/lib/libcudart.so.13"`` or ``"libamdhip64.so.6"``.
    prefix : str
        ``"cuda"`` or ``"hip"``: symbol prefix.

    Raises
    ------
    OSError
        ``dlopen`` failed (message from ``dlerror``).
    """
    global _lib, _record, _prefix
    with _lock:
        if _lib != NULL:
            return _record
        bpath = path.encode()
        handle = dlopen(bpath, RTLD_NOW | RTLD_LOCAL)
        if handle == NULL:
            err = dlerror()
            raise OSError(err.decode(errors="replace") if err != NULL else f"dlopen({path}) failed")
        found = []
        for i, name in enumerate(_NAMES):
            sym = (prefix + name).encode()
            p = dlsym(handle, sym)
            if p == NULL and name == "GetDeviceProperties":
                # CUDA 12+ exports the versioned name (the header's macro target).
                p = dlsym(handle, (prefix + name + "_v2").encode())
                if p == NULL:
                    p = dlsym(handle, (prefix + name + "R0600").encode())
            found.append(<uintptr_t>p)
        missing = [prefix + _NAMES[i] for i in _REQUIRED if not found[i]]
        if missing:  # the table is left empty: a later load may find the right library
            raise OSError(f"{path} is not a {prefix.upper()} runtime library: it lacks "
                          + ", ".join(missing[:4]))
        for i, addr in enumerate(found):
            _fn[i] = <void*><uintptr_t>addr
        _prefix = prefix
        _lib = handle
        _record = (path, prefix)
        return _record


def loaded():
    """``(path, prefix)`` of the loaded runtime, or None."""
    return _record


cdef inline void* _sym(int i) except NULL:
    if _lib == NULL:
        raise GpuError("runtime", -1, "NotLoaded", "the GPU runtime library is not loaded")
    p = _fn[i]
    if p == NULL:
        raise GpuError(_prefix + _NAMES[i], -1, "MissingSymbol",
                       f"symbol {_prefix + _NAMES[i]} is absent from {_record[0]}")
    return p


cdef int _check(int status, int which) except -1:
    if status == 0:
        return 0
    name, text = _error_strings(status)
    raise GpuError(_prefix + _NAMES[which], status, name, text)


def _error_strings(int status):
    cdef const char* s
    name = text = "?"
    if _fn[4] != NULL:
        s = (<f_errstr>_fn[4])(status)
        if s != NULL:
            name = s.decode(errors="replace")
    if _fn[3] != NULL:
        s = (<f_errstr>_fn[3])(status)
        if s != NULL:
            text = s.decode(errors="replace")
    return name, text


# ------------------------------------------------------------------ devices
def device_count():
    """Number of visible devices (0 when the driver finds none)."""
    cdef int n = 0
    cdef int st = (<f_int_p>_sym(0))(&n)
    if st != 0:
        return 0
    return n


def set_device(int device):
    """Make ``device`` current on the calling thread."""
    _check((<f_int>_sym(1))(device), 1)


def get_device():
    """The calling thread's current device."""
    cdef int d = 0
    _check((<f_int_p>_sym(2))(&d), 2)
    return d


def device_attribute(int attr, int device):
    """``DeviceGetAttribute(attr, device)`` as an int."""
    cdef int v = 0
    _check((<f_attr>_sym(5))(&v, attr, device), 5)
    return v


def device_name(int device):
    """The device's marketing name (first field of the device properties struct)."""
    cdef char buf[8192]   # larger than cudaDeviceProp / hipDeviceProp_t in any version
    memset(buf, 0, sizeof(buf))
    _check((<f_props>_sym(6))(<void*>buf, device), 6)
    return bytes(buf[:256]).split(b"\0", 1)[0].decode(errors="replace")


def mem_get_info():
    """(free, total) bytes of the current device."""
    cdef size_t free_b = 0, total_b = 0
    _check((<f_meminfo>_sym(7))(&free_b, &total_b), 7)
    return free_b, total_b


def runtime_version():
    """Runtime version as the runtime reports it (e.g. 13000)."""
    cdef int v = 0
    _check((<f_int_p>_sym(8))(&v), 8)
    return v


def driver_version():
    """Driver version (e.g. 13000); 0 when no driver is installed."""
    cdef int v = 0
    _check((<f_int_p>_sym(9))(&v), 9)
    return v


# ------------------------------------------------------------------ streams
def stream_create(unsigned int flags=STREAM_NON_BLOCKING):
    """Create a stream on the current device; returns its handle."""
    cdef void* s = NULL
    _check((<f_stream_create>_sym(10))(&s, flags), 10)
    return <uintptr_t>s


def stream_destroy(uintptr_t stream):
    """Destroy a stream (work already enqueued still completes)."""
    _check((<f_handle>_sym(11))(<void*>stream), 11)


def stream_synchronize(uintptr_t stream):
    """Block (GIL released) until all work on ``stream`` is done."""
    cdef f_handle f = <f_handle>_sym(12)
    cdef int st
    with nogil:
        st = f(<void*>stream)
    _check(st, 12)


def stream_wait_event(uintptr_t stream, uintptr_t event):
    """Make later work on ``stream`` wait for ``event`` (on the GPU; the host does not wait)."""
    _check((<f_wait_event>_sym(13))(<void*>stream, <void*>event, 0), 13)


# ------------------------------------------------------------------ events
def event_create(unsigned int flags=EVENT_DISABLE_TIMING | EVENT_BLOCKING_SYNC):
    """Create an event; default flags: no timing, blocking (sleeping) synchronize."""
    cdef void* e = NULL
    _check((<f_stream_create>_sym(14))(&e, flags), 14)
    return <uintptr_t>e


def event_record(uintptr_t event, uintptr_t stream):
    """Record ``event`` on ``stream``."""
    _check((<f_event_record>_sym(15))(<void*>event, <void*>stream), 15)


def event_synchronize(uintptr_t event):
    """Block (GIL released) until ``event`` completes; raises the error of failed work."""
    cdef f_handle f = <f_handle>_sym(16)
    cdef int st
    with nogil:
        st = f(<void*>event)
    _check(st, 16)


def event_query(uintptr_t event):
    """True when ``event`` has completed, False while pending."""
    cdef int st = (<f_handle>_sym(17))(<void*>event)
    if st == NOT_READY:
        return False
    _check(st, 17)
    return True


def event_elapsed_time(uintptr_t start, uintptr_t end):
    """Milliseconds between two completed timing events."""
    cdef float ms = 0
    _check((<f_elapsed>_sym(18))(&ms, <void*>start, <void*>end), 18)
    return ms


def event_destroy(uintptr_t event):
    """Destroy an event."""
    _check((<f_handle>_sym(19))(<void*>event), 19)


# ------------------------------------------------------------------ memory
def malloc(size_t nbytes, uintptr_t stream=0, bint pooled=True):
    """Allocate ``nbytes`` of device memory; returns the pointer (0 for 0 bytes).

    With ``pooled``, the allocation is stream-ordered (``MallocAsync`` on ``stream``) and
    the stream is synchronized, so that any stream may use the memory at once.
    """
    cdef void* p = NULL
    cdef int st
    cdef f_malloc_async fa
    cdef f_malloc f
    if nbytes == 0:
        return 0
    if pooled and _fn[22] != NULL:
        fa = <f_malloc_async>_fn[22]
        with nogil:
            st = fa(&p, nbytes, <void*>stream)
        _check(st, 22)
        stream_synchronize(stream)
    else:
        f = <f_malloc>_sym(20)
        with nogil:
            st = f(&p, nbytes)
        _check(st, 20)
    return <uintptr_t>p


def malloc_async(size_t nbytes, uintptr_t stream):
    """Stream-ordered allocation usable at once on ``stream`` only (no synchronize)."""
    cdef void* p = NULL
    cdef int st
    cdef f_malloc_async fa = <f_malloc_async>_sym(22)
    if nbytes == 0:
        return 0
    with nogil:
        st = fa(&p, nbytes, <void*>stream)
    _check(st, 22)
    return <uintptr_t>p


def free(uintptr_t ptr, uintptr_t stream=0, bint pooled=True):
    """Free memory from :func:`malloc` (stream-ordered on ``stream`` when pooled)."""
    cdef int st
    cdef f_free_async fa
    cdef f_handle fh
    if ptr == 0:
        return
    if pooled and _fn[23] != NULL:
        fa = <f_free_async>_fn[23]
        with nogil:
            st = fa(<void*>ptr, <void*>stream)
        _check(st, 23)
    else:
        fh = <f_handle>_sym(21)
        with nogil:
            st = fh(<void*>ptr)
        _check(st, 21)


def memcpy(uintptr_t dst, uintptr_t src, size_t nbytes, int kind):
    """Blocking copy (GIL released); ``kind`` is a MEMCPY_* constant."""
    cdef f_memcpy f = <f_memcpy>_sym(24)
    cdef int st
    with nogil:
        st = f(<void*>dst, <const void*>src, nbytes, kind)
    _check(st, 24)


def memcpy_async(uintptr_t dst, uintptr_t src, size_t nbytes, int kind, uintptr_t stream):
    """Copy enqueued on ``stream``; asynchronous to the host only for pinned host memory."""
    cdef f_memcpy_async f = <f_memcpy_async>_sym(25)
    cdef int st
    with nogil:
        st = f(<void*>dst, <const void*>src, nbytes, kind, <void*>stream)
    _check(st, 25)


def memset_async(uintptr_t dst, int value, size_t nbytes, uintptr_t stream):
    """Set ``nbytes`` bytes to ``value`` on ``stream``."""
    _check((<f_memset_async>_sym(26))(<void*>dst, value, nbytes, <void*>stream), 26)


def pool_keep_memory(int device):
    """Keep freed memory in the device's default pool (release threshold = max), as
    PyTorch's caching allocator does; otherwise every synchronize returns it to the OS."""
    cdef void* pool = NULL
    cdef unsigned long long threshold = <unsigned long long>-1
    if _fn[27] == NULL or _fn[28] == NULL:
        return False
    _check((<f_pool>_fn[27])(&pool, device), 27)
    _check((<f_pool_set>_fn[28])(pool, _POOL_ATTR_RELEASE_THRESHOLD, &threshold), 28)
    return True


def pointer_device(uintptr_t ptr):
    """Device ordinal owning ``ptr`` if it is device (or managed) memory, else -1."""
    cdef PointerAttributes attrs
    cdef int st
    memset(&attrs, 0, sizeof(attrs))
    if _fn[29] == NULL:
        return -2   # cannot tell
    st = (<f_ptr_attr>_fn[29])(&attrs, <const void*>ptr)
    if st != 0:
        return -1
    if attrs.type == _MEMORY_TYPE_DEVICE or attrs.type == _MEMORY_TYPE_MANAGED:
        return attrs.device
    return -1
