# cython: language_level=3, boundscheck=False, wraparound=False
"""oneDNN bindings (``hipdnn_async.runtime._onednn``), loaded at run time with ``dlopen``
through the shared loader (``runtime._loader``); no oneDNN header is needed to build.

Wrapping contract
-----------------
Covered: what the oneDNN engine of the CPU provider needs, from the v3 C API
(``oneapi/dnnl/dnnl.h``): the CPU engine, streams, memory descriptors with explicit strides
or a format tag (``format_tag_any`` lets a primitive choose its layout), convolution
forward / backward-data / backward-weights and batch-normalization forward / backward
primitive descriptors with a user-managed scratchpad and eltwise post-ops, reorders, the
walk over implementations (``next_impl``, named by ``impl_info_str``), and the library's
version and effective ISA. Function names drop the ``dnnl_`` prefix.

Objects: :class:`MemoryDesc`, :class:`PrimitiveDesc` and :class:`Primitive` own their
handle and destroy it on ``close()`` / collection. A :class:`Program` is a prebuilt
execution: a list of primitives (steps) over memory objects made once, each memory a user
array (its data handle set from ``PyArray_DATA`` at each run, only when it changed), an
offset into the run's workspace, or a buffer the program owns. ``Program.run`` executes
the steps and waits on the stream with the GIL released, under the process-wide oneDNN
gate (a C mutex): one oneDNN program runs at a time, with all the cores of its OpenMP
team, so several stream workers share the cores instead of oversubscribing them (on the
2-core machine measured, two primitives side by side with one thread each were no faster
than one after the other with two). Primitives are stateless (their scratchpad is an
argument: ``scratchpad_mode_user``), so one program may be run from any thread.
:class:`Launch` is a program bound to one execution's arrays: the submit path's work
item, a C callable.

Versions: every declaration (``_onednn_api.pxd``) and constant below was matched against
``oneapi/dnnl/dnnl_types.h`` / ``dnnl_common_types.h`` of oneDNN 3.2.0 (PyPI
``onednn-devel-cpu-gomp`` 2023.2.0); the v3 ABI (``libdnnl.so.3``) keeps them.
``MIN_VERSION`` is the oldest oneDNN taken (3.0: the v3 primitive-descriptor calls).

Errors: a status other than ``dnnl_success`` raises the type the status table
(``STATUS``) names, built by ``_errors.status_error``: ``OnednnNotSupportedError``
(``dnnl_unimplemented``: in the decline set), ``OnednnBadParamError``
(``dnnl_invalid_arguments``: a ``NotSupportedError`` naming the call when raised at
build), ``OnednnError`` otherwise; ``.call`` is the C function, ``.status`` /
``.status_name`` the status.
"""
import operator
import os

from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset

cimport numpy as cnp

from hipdnn_async import _errors

from ._loader cimport Library, LibraryTable
from ._loader import status_table as _status_table
from ._onednn_api cimport ExecArg, OnednnFns, Version
from ._launch_state cimport gate_acquired, gate_waited

cnp.import_array()

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_trylock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)

cdef extern from "<signal.h>" nogil:
    ctypedef struct sigset_t:
        pass
    int pthread_sigmask(int, const sigset_t*, sigset_t*)
    int sigfillset(sigset_t*)
    int sigdelset(sigset_t*, int)
    int SIG_BLOCK, SIG_SETMASK
    int SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int, timespec*)
    int CLOCK_MONOTONIC

__all__ = ["Onednn", "TABLE", "STATUS", "NAMES", "MIN_VERSION", "ISA_NAMES", "load",
           "loaded", "version", "effective_isa", "isa_name", "max_threads", "n_slots",
           "MemoryDesc", "PrimitiveDesc", "Primitive", "Program", "Launch",
           "conv_forward", "conv_backward_data", "conv_backward_weights", "bn_forward",
           "bn_backward", "reorder"]

# ------------------------------------------------------------------ constants
# oneapi/dnnl/dnnl_common_types.h, oneDNN 3.2.0: dnnl_status_t
STATUS_SUCCESS = 0
STATUS_OUT_OF_MEMORY = 1
STATUS_INVALID_ARGUMENTS = 2
STATUS_UNIMPLEMENTED = 3
STATUS_LAST_IMPL_REACHED = 4
STATUS_RUNTIME_ERROR = 5
STATUS_NOT_REQUIRED = 6
STATUS_INVALID_GRAPH = 7
STATUS_INVALID_GRAPH_OP = 8
STATUS_INVALID_SHAPE = 9
STATUS_INVALID_DATA_TYPE = 10
# oneapi/dnnl/dnnl_common_types.h, oneDNN 3.2.0: dnnl_data_type_t, dnnl_engine_kind_t,
# dnnl_stream_flags_t
DATA_F16 = 1
DATA_BF16 = 2
DATA_F32 = 3
ENGINE_CPU = 1
STREAM_DEFAULT_FLAGS = 1
# oneapi/dnnl/dnnl_types.h, oneDNN 3.2.0: dnnl_format_tag_t, dnnl_prop_kind_t, dnnl_alg_kind_t
FORMAT_TAG_ANY = 1
FORMAT_TAG_NCW16C = 56               # dnnl_nCw16c: channels blocked by 16 (3-D)
FORMAT_TAG_NCHW16C = 78              # dnnl_nChw16c (4-D)
FORMAT_TAG_NCDHW16C = 121            # dnnl_nCdhw16c (5-D)
PROP_FORWARD_TRAINING = 64
PROP_FORWARD_INFERENCE = 96
PROP_BACKWARD = 128
PROP_BACKWARD_DATA = 160
PROP_BACKWARD_WEIGHTS = 192
CONVOLUTION_DIRECT = 1
ELTWISE_RELU = 32
ELTWISE_ELU = 34
ELTWISE_LINEAR = 38
ELTWISE_CLIP = 46
ELTWISE_CLIP_V2 = 47
ELTWISE_SQRT = 37
BINARY_ADD = 0x1fff0
BINARY_MUL = 0x1fff1
BINARY_DIV = 0x1fff4
BINARY_SUB = 0x1fff5
# oneapi/dnnl/dnnl_types.h, oneDNN 3.2.0: dnnl_normalization_flags_t
USE_GLOBAL_STATS = 1
USE_SCALE = 2
USE_SHIFT = 4
FUSE_NORM_RELU = 8
# oneapi/dnnl/dnnl_types.h, oneDNN 3.2.0: dnnl_scratchpad_mode_t, dnnl_query_t
SCRATCHPAD_MODE_USER = 1
QUERY_IMPL_INFO_STR = 8
QUERY_SRC_MD = 129
QUERY_DIFF_SRC_MD = 130
QUERY_WEIGHTS_MD = 131
QUERY_DIFF_WEIGHTS_MD = 132
QUERY_DST_MD = 133
QUERY_DIFF_DST_MD = 134
QUERY_WORKSPACE_MD = 135
QUERY_SCRATCHPAD_MD = 136
# oneapi/dnnl/dnnl_types.h, oneDNN 3.2.0: DNNL_ARG_* (execution argument indices)
ARG_SRC = 1
ARG_SRC_1 = 2
ARG_DST = 17
ARG_WEIGHTS = 33
ARG_BIAS = 41
ARG_MEAN = 49
ARG_VARIANCE = 50
ARG_SCALE = 51
ARG_SHIFT = 52
ARG_WORKSPACE = 64
ARG_SCRATCHPAD = 80
ARG_DIFF_SRC = 129
ARG_DIFF_DST = 145
ARG_DIFF_WEIGHTS = 161
ARG_DIFF_BIAS = 169
ARG_DIFF_SCALE = 255
ARG_DIFF_SHIFT = 256
# DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1 is post-op i's operand:
# ARG_ATTR_MULTIPLE_POST_OP_BASE * (i + 1) | ARG_SRC_1
ARG_ATTR_MULTIPLE_POST_OP_BASE = 32768
# oneapi/dnnl/dnnl_types.h, oneDNN 3.2.0: DNNL_RUNTIME_* (dnnl_version_t.cpu_runtime)
RUNTIME_SEQ = 1
RUNTIME_OMP = 2
RUNTIME_TBB = 4
RUNTIME_THREADPOOL = 8

# oneapi/dnnl/dnnl_types.h, oneDNN 3.2.0: dnnl_cpu_isa_t -> the library's name for it
ISA_NAMES = {
    0x0: "default", 0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xf: "avx2_vnni",
    0x1f: "avx2_vnni_2", 0x27: "avx512_core", 0x67: "avx512_core_vnni",
    0xe7: "avx512_core_bf16", 0x1ef: "avx512_core_fp16", 0xfef: "avx512_core_amx",
    0x1fef: "avx512_core_amx_fp16",
}
RUNTIME_NAMES = {RUNTIME_SEQ: "sequential", RUNTIME_OMP: "OpenMP", RUNTIME_TBB: "TBB",
                 RUNTIME_THREADPOOL: "threadpool"}

MIN_VERSION = (3, 0, 0)
MAX_NDIMS = 12                       # DNNL_MAX_NDIMS, oneapi/dnnl/dnnl_common_types.h 3.2.0

# ------------------------------------------------------------------ the symbol table
# In OnednnFns field order (a test checks it against the .pxd); looked up as "dnnl_" + name.
NAMES = (
    "version", "get_effective_cpu_isa", "set_primitive_cache_capacity", "engine_create",
    "engine_destroy", "stream_create", "stream_destroy", "stream_wait",
    "memory_desc_create_with_strides", "memory_desc_create_with_tag", "memory_desc_clone",
    "memory_desc_destroy", "memory_desc_get_size", "memory_desc_equal", "memory_create",
    "memory_destroy", "memory_set_data_handle", "primitive_attr_create",
    "primitive_attr_destroy", "primitive_attr_set_scratchpad_mode",
    "primitive_attr_set_post_ops", "post_ops_create", "post_ops_destroy",
    "post_ops_append_eltwise", "primitive_desc_next_impl", "primitive_desc_query",
    "primitive_desc_query_md", "primitive_desc_clone", "primitive_desc_destroy",
    "primitive_create", "primitive_destroy", "primitive_execute",
    "convolution_forward_primitive_desc_create",
    "convolution_backward_data_primitive_desc_create",
    "convolution_backward_weights_primitive_desc_create",
    "batch_normalization_forward_primitive_desc_create",
    "batch_normalization_backward_primitive_desc_create",
    "reorder_primitive_desc_create", "post_ops_append_binary", "binary_primitive_desc_create",
)
_REQUIRED = ("version", "engine_create", "primitive_execute", "memory_desc_create_with_strides",
             "convolution_forward_primitive_desc_create")

# dnnl_status_t -> (name, error type); dnnl_success is not a failure
STATUS = _status_table(_errors.OnednnError, {
    STATUS_OUT_OF_MEMORY: "dnnl_out_of_memory",
    STATUS_INVALID_ARGUMENTS: ("dnnl_invalid_arguments", _errors.OnednnBadParamError),
    STATUS_UNIMPLEMENTED: ("dnnl_unimplemented", _errors.OnednnNotSupportedError),
    STATUS_LAST_IMPL_REACHED: ("dnnl_last_impl_reached", _errors.OnednnNotSupportedError),
    STATUS_RUNTIME_ERROR: "dnnl_runtime_error",
    STATUS_NOT_REQUIRED: "dnnl_not_required",
    STATUS_INVALID_GRAPH: "dnnl_invalid_graph",
    STATUS_INVALID_GRAPH_OP: "dnnl_invalid_graph_op",
    STATUS_INVALID_SHAPE: "dnnl_invalid_shape",
    STATUS_INVALID_DATA_TYPE: "dnnl_invalid_data_type",
})

# C copies of the constants used without the GIL
cdef int _C_SUCCESS = STATUS_SUCCESS
cdef int _C_LAST_IMPL = STATUS_LAST_IMPL_REACHED
cdef int _C_SCRATCHPAD_USER = SCRATCHPAD_MODE_USER
cdef int _C_QUERY_IMPL_INFO = QUERY_IMPL_INFO_STR
cdef int _C_QUERY_SCRATCHPAD = QUERY_SCRATCHPAD_MD
cdef int _C_ENGINE_CPU = ENGINE_CPU
# array bounds (compile-time): DNNL_MAX_NDIMS (checked through MAX_NDIMS below) and ours
cdef enum:
    _C_MAX_NDIMS = 12
    _C_MAX_MEMS = 48           # our bound on the memories of one program
    _C_SET_HANDLE_FAILED = -1000   # Program._steps: not a dnnl_status_t (those are >= 0)
    _C_MAX_REPEAT = 1 << 20        # our bound on a Program's repeat count (a batch's images)
_MAX_REPEAT_BYTES = 1 << 56        # our bound on a repeat's span (Py_ssize_t arithmetic)
MAX_REPEAT = _C_MAX_REPEAT         # (Python's view of it: a larger batch runs whole)
if _C_MAX_NDIMS != MAX_NDIMS:
    raise ImportError("_onednn: the C bound on dims disagrees with MAX_NDIMS (a build bug)")

# The process-wide gate: one oneDNN program runs at a time (see the module notes).
cdef pthread_mutex_t _gate
pthread_mutex_init(&_gate, NULL)


def n_slots():
    """Function pointers in ``OnednnFns`` (must equal ``len(NAMES)``)."""
    return sizeof(OnednnFns) // sizeof(void*)


cdef class Onednn(LibraryTable):
    """The oneDNN symbol table (one per process: :data:`TABLE`); creates the CPU engine
    once loaded."""

    cdef int _fill(self, Library lib) except -1:
        if len(NAMES) != sizeof(OnednnFns) // sizeof(void*):
            raise RuntimeError("_onednn: NAMES and OnednnFns disagree (a build bug)")
        cdef void** slots = <void**>&self.f
        cdef int i
        for i in range(len(NAMES)):
            slots[i] = lib.sym(NAMES[i])
        # the OpenMP runtime libdnnl links (GNU libgomp, already loaded with it: opening its
        # soname again takes the same copy); absent for a TBB or sequential build
        try:
            omp = Library("gomp", "libgomp.so.1", "system", "")
        except _errors.LibraryError:
            omp = None
        self._omp = omp
        self.omp_get_max_threads = NULL
        self.omp_get_thread_num = self.omp_get_num_threads = NULL
        self.gomp_parallel = NULL
        self.gomp_barrier = NULL
        if omp is not None:
            self.omp_get_max_threads = <int (*)() noexcept nogil>omp.sym("omp_get_max_threads")
            self.omp_get_thread_num = <int (*)() noexcept nogil>omp.sym("omp_get_thread_num")
            self.omp_get_num_threads = <int (*)() noexcept nogil>omp.sym("omp_get_num_threads")
            # what ``#pragma omp parallel`` compiles to (libgomp's ABI since GCC 4.9)
            self.gomp_parallel = <void (*)(void (*)(void*) noexcept nogil, void*, unsigned,
                                           unsigned) noexcept nogil>omp.sym("GOMP_parallel")
            # what ``#pragma omp barrier`` compiles to: the team's threads meet
            self.gomp_barrier = <void (*)() noexcept nogil>omp.sym("GOMP_barrier")
        return 0

    cdef void _clear(self) noexcept:
        memset(&self.f, 0, sizeof(self.f))
        self.omp_get_max_threads = NULL
        self.omp_get_thread_num = self.omp_get_num_threads = NULL
        self.gomp_parallel = NULL
        self.gomp_barrier = NULL
        self.engine = NULL

    cdef object _version(self):
        cdef const Version* v
        cdef void* engine = NULL
        if self.f.version == NULL:
            return 0
        v = <const Version*>self.f.version()
        if (v.major, v.minor, v.patch) < MIN_VERSION:
            raise _errors.LibraryError(
                f"oneDNN at {self.lib.path if self.lib is not None else '?'} is version "
                f"{v.major}.{v.minor}.{v.patch}; {'.'.join(map(str, MIN_VERSION))} or later "
                "is required", call="dnnl_version")
        for i, name in enumerate(NAMES):
            if (<void**>&self.f)[i] == NULL:
                raise _errors.LibraryError(f"oneDNN lacks dnnl_{name}", call="dnnl_" + name)
        self._check(self.f.engine_create(&engine, _C_ENGINE_CPU, 0), b"dnnl_engine_create")
        self.engine = engine
        # oneDNN's primitive cache off: primitives are made once per plan at build, so it
        # saves nothing at run time, and in 3.2 it handed a weight gradient's GEMM
        # implementation a primitive made for another walk's pd of the same name, with
        # another weights layout and a larger scratchpad (wrong dw and writes past the
        # workspace: tests/oracle/test_onednn_primitive_cache.py); its walks also
        # restarted from cached steps, listing implementations twice
        self._check(self.f.set_primitive_cache_capacity(0),
                    b"dnnl_set_primitive_cache_capacity")
        return v.major * 10000 + v.minor * 100 + v.patch

    cdef int _check(self, int status, const char* call) except -1:
        # called with the GIL held (a nogil caller keeps the status and checks it after)
        if status == _C_SUCCESS:
            return 0
        raise _error(status, call.decode())


cdef object _error(int status, str call):
    return _T.status_error(STATUS, _errors.OnednnError, status, call)


cdef Onednn _T = Onednn("onednn", "dnnl_", "oneDNN", _REQUIRED)
TABLE = _T


# GNU OpenMP's thread pool does not survive fork: a forked child of a process that ran
# OpenMP work may not use OpenMP (libgomp hangs in its first parallel region). Once this
# process has run a primitive, a fork child refuses to run any (``fork_reason``).
cdef bint _ran = False
cdef object _forked = None
cdef bint _fork_child = False         # _forked is set (a nogil-readable copy)

# Asynchronous signals are blocked on a thread while it runs primitives: a signal handled
# on that thread mid-primitive corrupted the heap (Ctrl-C 50 ms into a large conv_fprop
# aborted 10 of 30 runs with "corrupted size vs. prev_size" or a segfault; SIGUSR1 every
# 0.5 ms, 3 of 4 runs of 3 s). With an alternate signal stack (faulthandler's; Python's
# handlers are SA_ONSTACK) it did not happen (0 of 54): the handler's frame, pushed on the
# interrupted stack, overwrites what the JIT kernels keep there. A signal that arrives
# meanwhile goes to another thread, or is taken on return; OpenMP threads, made inside a
# run, inherit the mask and never take one. Synchronous faults stay unblocked.
cdef sigset_t _async_signals
sigfillset(&_async_signals)
for _sig in (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT):
    sigdelset(&_async_signals, _sig)
del _sig


def _after_fork_in_child():
    global _forked, _fork_child
    if _ran and _forked is None:
        _fork_child = True
        _forked = (f"oneDNN cannot run in a process forked (pid {os.getppid()} -> "
                   f"{os.getpid()}) after its parent ran oneDNN primitives: the OpenMP "
                   "thread pool does not survive fork; start worker processes with "
                   "multiprocessing's 'spawn' or 'forkserver' method")


os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_reason():
    """Why oneDNN may not run in this process (a fork child of a process that ran
    oneDNN primitives), or None."""
    return _forked


cdef struct _TeamCall:
    void (*fn)(void*, int, int) noexcept nogil
    void* data


cdef void _team_entry(void* p) noexcept nogil:
    cdef _TeamCall* t = <_TeamCall*>p
    t.fn(t.data, _T.omp_get_thread_num(), _T.omp_get_num_threads())


cdef inline bint _has_team() noexcept nogil:
    return (_T.gomp_parallel != NULL and _T.gomp_barrier != NULL
            and _T.omp_get_thread_num != NULL and _T.omp_get_num_threads != NULL
            and _T.omp_get_max_threads != NULL and not _fork_child)


cdef int team_size() noexcept nogil:
    """The most threads ``run_on_team`` runs ``fn`` on from this thread now (1 without
    the OpenMP runtime): the size of per-thread scratch its callers allocate."""
    return _T.omp_get_max_threads() if _has_team() else 1


cdef void team_barrier() noexcept nogil:
    """Wait until every thread of the team running ``run_on_team``'s ``fn`` calls it too
    (GOMP_barrier); only inside ``fn`` with more than one thread."""
    _T.gomp_barrier()


cdef inline void _gate_lock() noexcept nogil:
    """Take the gate, and tell ``_launch_state.gate_acquired`` how long it waited (another
    thread's program or team work held it): the queues count the wait before a work
    item's first acquisition as queue wait, and a launch's counter leaves every wait out."""
    cdef long long t0
    if pthread_mutex_trylock(&_gate) == 0:
        gate_acquired(0.0)
        return
    t0 = _now_ns()
    pthread_mutex_lock(&_gate)
    gate_acquired((_now_ns() - t0) * 1e-9)


cdef int run_on_team(void (*fn)(void*, int, int) noexcept nogil, void* data) noexcept nogil:
    """Run ``fn(data, i, n)`` on each thread i of n of oneDNN's OpenMP team (the pool its
    primitives run on), under the process-wide gate: host work of the CPU provider (its
    batchnorm rows) takes the cores in turn with oneDNN programs instead of
    oversubscribing them; ``fn`` may call ``team_barrier``. Without that runtime (oneDNN
    not loaded, or a TBB or sequential build) ``fn(data, 0, 1)`` runs on the calling
    thread. Returns the thread count."""
    global _ran
    cdef _TeamCall t
    cdef sigset_t saved
    cdef int n = 1
    t.fn, t.data = fn, data
    pthread_sigmask(SIG_BLOCK, &_async_signals, &saved)
    _gate_lock()
    if _has_team():
        _ran = True
        n = _T.omp_get_max_threads()
        _T.gomp_parallel(_team_entry, &t, 0, 0)
    else:
        fn(data, 0, 1)
    pthread_mutex_unlock(&_gate)
    pthread_sigmask(SIG_SETMASK, &saved, NULL)
    return n



cdef inline int _need() except -1:
    if _T.engine == NULL:
        _T.missing(b"version")
    return 0


# ------------------------------------------------------------------ library
def load(str path, str found_via="explicit"):
    """Open oneDNN at ``path`` (absolute path or soname) once and create its CPU engine;
    returns the ``LoadRecord`` (``version`` = major * 10000 + minor * 100 + patch).

    Raises
    ------
    LibraryError
        ``dlopen`` failed, the library is not oneDNN (lacks a required symbol), or is older
        than :data:`MIN_VERSION`.
    OnednnError
        The CPU engine cannot be created.
    """
    return _T.load(path, found_via)


def loaded():
    """The ``LoadRecord`` of the loaded library, or None."""
    return _T.record


def version():
    """``(major, minor, patch, git_hash, cpu_runtime_name)`` of the loaded oneDNN
    (``dnnl_version``)."""
    _need()
    cdef const Version* v = <const Version*>_T.f.version()
    h = v.hash.decode(errors="replace") if v.hash != NULL else ""
    return (v.major, v.minor, v.patch, h, RUNTIME_NAMES.get(v.cpu_runtime, str(v.cpu_runtime)))


def effective_isa():
    """The ``dnnl_cpu_isa_t`` value oneDNN dispatches to (``dnnl_get_effective_cpu_isa``)."""
    _need()
    return _T.f.get_effective_cpu_isa()


def isa_name(int isa):
    """oneDNN's name for a ``dnnl_cpu_isa_t`` value (``"avx512_core_amx"``), else hex."""
    return ISA_NAMES.get(isa, hex(isa))


def max_threads():
    """Threads a primitive run from the calling thread uses (``omp_get_max_threads`` of
    the OpenMP runtime oneDNN is linked with), or None when it is not OpenMP."""
    _need()
    if _T.omp_get_max_threads == NULL:
        return None
    return _T.omp_get_max_threads()


cdef object _checked(object obj, type cls, str where):
    # constructors take untyped arguments and refuse a wrong one with ValueError, so a
    # keyword-name mismatch is the only TypeError they raise (the stub checks rely on it)
    if not isinstance(obj, cls):
        raise ValueError(f"_onednn.{where} needs a {cls.__name__}; got {type(obj).__name__}")
    return obj


# ------------------------------------------------------------------ memory descriptors
cdef int _dims(object seq, int64_t* out, str what) except -1:
    cdef int i, n = len(seq)
    if n > _C_MAX_NDIMS:
        raise ValueError(f"_onednn: {what} has {n} entries; at most {_C_MAX_NDIMS}")
    memset(out, 0, sizeof(int64_t) * _C_MAX_NDIMS)
    for i in range(n):
        out[i] = seq[i]
    return n


cdef class MemoryDesc:
    """A ``dnnl_memory_desc_t``: dims (logical order), data type, and strides (in
    elements) or a format tag (``FORMAT_TAG_ANY``: the primitive chooses).

    Parameters
    ----------
    dims : sequence of int
        Logical dims, at most 12.
    data_type : int
        ``DATA_F32``, ``DATA_BF16`` or ``DATA_F16``.
    strides : sequence of int, optional
        Strides in elements, one per dim.
    tag : int, optional
        A ``dnnl_format_tag_t`` instead of ``strides``.
    """

    def __init__(self, dims=None, data_type=DATA_F32, strides=None, tag=None):
        cdef int64_t d[_C_MAX_NDIMS]
        cdef int64_t s[_C_MAX_NDIMS]
        cdef int n
        if dims is None:           # filled by PrimitiveDesc.md
            return
        _need()
        try:
            data_type = int(data_type)
            tag = None if tag is None else int(tag)
            dims = [int(x) for x in dims]
            strides = None if strides is None else [int(x) for x in strides]
        except TypeError as exc:
            raise ValueError(f"_onednn.MemoryDesc: {exc}") from None
        n = _dims(dims, d, "dims")
        self.dims, self.data_type = tuple(int(x) for x in dims), data_type
        if strides is not None:
            if len(strides) != n:
                raise ValueError(f"_onednn: {n} dims but {len(strides)} strides")
            _dims(strides, s, "strides")
            _T._check(_T.f.memory_desc_create_with_strides(&self.md, n, d, data_type, s),
                      b"dnnl_memory_desc_create_with_strides")
        else:
            _T._check(_T.f.memory_desc_create_with_tag(&self.md, n, d, data_type,
                                                       FORMAT_TAG_ANY if tag is None else tag),
                      b"dnnl_memory_desc_create_with_tag")

    @property
    def size(self):
        """Bytes the described memory occupies (``dnnl_memory_desc_get_size``)."""
        return 0 if self.md == NULL else _T.f.memory_desc_get_size(self.md)

    def equals(self, MemoryDesc other):
        """Whether two descriptors describe the same memory (``dnnl_memory_desc_equal``)."""
        return bool(_T.f.memory_desc_equal(self.md, other.md))

    def close(self):
        """Destroy the descriptor (idempotent)."""
        if self.md != NULL and _T.engine != NULL:
            _T.f.memory_desc_destroy(self.md)
        self.md = NULL

    def __dealloc__(self):
        self.close()


cdef MemoryDesc _clone_md(const void* md):
    cdef MemoryDesc out = MemoryDesc()
    if md == NULL:
        return None
    _T._check(_T.f.memory_desc_clone(&out.md, md), b"dnnl_memory_desc_clone")
    return out


# ------------------------------------------------------------------ primitive descriptors
cdef void* _attr(list post_ops) except NULL:
    """A primitive attribute with a user scratchpad and the ``post_ops``: eltwise
    (alg, alpha, beta) or binary (alg, src1 MemoryDesc); the caller destroys it."""
    cdef void* attr = NULL
    cdef void* ops = NULL
    _T._check(_T.f.primitive_attr_create(&attr), b"dnnl_primitive_attr_create")
    try:
        _T._check(_T.f.primitive_attr_set_scratchpad_mode(attr, _C_SCRATCHPAD_USER),
                  b"dnnl_primitive_attr_set_scratchpad_mode")
        if post_ops:
            _T._check(_T.f.post_ops_create(&ops), b"dnnl_post_ops_create")
            try:
                for op in post_ops:
                    if len(op) == 2:
                        _T._check(_T.f.post_ops_append_binary(
                            ops, op[0], (<MemoryDesc>_checked(op[1], MemoryDesc, "post-op")).md),
                            b"dnnl_post_ops_append_binary")
                    else:
                        _T._check(_T.f.post_ops_append_eltwise(ops, op[0], op[1], op[2]),
                                  b"dnnl_post_ops_append_eltwise")
                _T._check(_T.f.primitive_attr_set_post_ops(attr, ops),
                          b"dnnl_primitive_attr_set_post_ops")
            finally:
                _T.f.post_ops_destroy(ops)
    except BaseException:
        _T.f.primitive_attr_destroy(attr)
        raise
    return attr


cdef inline const void* _md(MemoryDesc m):
    return NULL if m is None else m.md


cdef class PrimitiveDesc:
    """A ``dnnl_primitive_desc_t``: one implementation of a primitive for its descriptors
    (made by :func:`conv_forward`, :func:`bn_forward`, ...; ``next_impl`` walks on)."""

    @property
    def impl_name(self):
        """The implementation's name (``dnnl_query_impl_info_str``), e.g. ``"brg:avx512_core"``."""
        cdef const char* s = NULL
        _T._check(_T.f.primitive_desc_query(self.pd, _C_QUERY_IMPL_INFO, 0, &s),
                  b"dnnl_primitive_desc_query")
        return s.decode(errors="replace") if s != NULL else ""

    @property
    def scratchpad_size(self):
        """Bytes of user scratchpad an execution takes (``DNNL_ARG_SCRATCHPAD``)."""
        cdef const void* md = _T.f.primitive_desc_query_md(self.pd, _C_QUERY_SCRATCHPAD, 0)
        return 0 if md == NULL else _T.f.memory_desc_get_size(md)

    def md(self, int query, int index=0):
        """A copy of the descriptor the primitive takes for ``query`` (``QUERY_*_MD``),
        or None where it takes none (``dnnl_primitive_desc_query_md``)."""
        cdef const void* md = _T.f.primitive_desc_query_md(self.pd, query, index)
        if md == NULL or _T.f.memory_desc_get_size(md) == 0:
            return None
        return _clone_md(md)

    def next_impl(self):
        """Move to the next implementation; False (unchanged) after the last one."""
        cdef int st = _T.f.primitive_desc_next_impl(self.pd)
        if st == _C_LAST_IMPL:
            return False
        _T._check(st, b"dnnl_primitive_desc_next_impl")
        return True

    def clone(self):
        """An independent copy at the current implementation."""
        cdef PrimitiveDesc out = PrimitiveDesc()
        out.kind, out._hint = self.kind, self._hint
        _T._check(_T.f.primitive_desc_clone(&out.pd, self.pd), b"dnnl_primitive_desc_clone")
        return out

    def close(self):
        """Destroy the descriptor (idempotent)."""
        if self.pd != NULL and _T.engine != NULL:
            _T.f.primitive_desc_destroy(self.pd)
        self.pd = NULL

    def __dealloc__(self):
        self.close()

    def __repr__(self):
        return f"PrimitiveDesc({self.kind}, {self.impl_name if self.pd != NULL else 'closed'})"


cdef struct _Geometry:
    # a convolution's strides, dilations (from 0) and paddings, as its creation takes them
    int64_t strides[_C_MAX_NDIMS]
    int64_t dilates[_C_MAX_NDIMS]
    int64_t padding_l[_C_MAX_NDIMS]
    int64_t padding_r[_C_MAX_NDIMS]


cdef int _geometry(_Geometry* g, strides, dilates, padding_l, padding_r) except -1:
    _dims(strides, g.strides, "strides")
    _dims(dilates, g.dilates, "dilates")
    _dims(padding_l, g.padding_l, "padding_l")
    _dims(padding_r, g.padding_r, "padding_r")
    return 0


cdef PrimitiveDesc _pd(str kind):
    _need()
    cdef PrimitiveDesc out = PrimitiveDesc()
    out.kind = kind
    return out


def conv_forward(int prop, MemoryDesc src, MemoryDesc weights, MemoryDesc bias, MemoryDesc dst,
                 strides, dilates, padding_l, padding_r, list post_ops=None):
    """Convolution forward (``dnnl_convolution_forward_primitive_desc_create``, direct
    algorithm; ``dilates`` count from 0), user scratchpad, eltwise ``post_ops``."""
    cdef _Geometry g
    cdef PrimitiveDesc out = _pd("conv_fwd")
    _geometry(&g, strides, dilates, padding_l, padding_r)
    cdef void* attr = _attr(post_ops or [])
    try:
        _T._check(_T.f.convolution_forward_primitive_desc_create(
            &out.pd, _T.engine, prop, CONVOLUTION_DIRECT, src.md, weights.md, _md(bias),
            dst.md, g.strides, g.dilates, g.padding_l, g.padding_r, attr),
            b"dnnl_convolution_forward_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    return out


def conv_backward_data(MemoryDesc diff_src, MemoryDesc weights, MemoryDesc diff_dst, strides,
                       dilates, padding_l, padding_r, PrimitiveDesc hint):
    """Convolution backward data (``dnnl_convolution_backward_data_primitive_desc_create``)."""
    cdef _Geometry g
    cdef PrimitiveDesc out = _pd("conv_bwd_data")
    _geometry(&g, strides, dilates, padding_l, padding_r)
    cdef void* attr = _attr([])
    try:
        _T._check(_T.f.convolution_backward_data_primitive_desc_create(
            &out.pd, _T.engine, CONVOLUTION_DIRECT, diff_src.md, weights.md, diff_dst.md,
            g.strides, g.dilates, g.padding_l, g.padding_r, hint.pd, attr),
            b"dnnl_convolution_backward_data_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    out._hint = hint        # next_impl reads it: it must outlive the iteration
    return out


def conv_backward_weights(MemoryDesc src, MemoryDesc diff_weights, MemoryDesc diff_dst, strides,
                          dilates, padding_l, padding_r, PrimitiveDesc hint):
    """Convolution backward weights, no bias gradient
    (``dnnl_convolution_backward_weights_primitive_desc_create``)."""
    cdef _Geometry g
    cdef PrimitiveDesc out = _pd("conv_bwd_weights")
    _geometry(&g, strides, dilates, padding_l, padding_r)
    cdef void* attr = _attr([])
    try:
        _T._check(_T.f.convolution_backward_weights_primitive_desc_create(
            &out.pd, _T.engine, CONVOLUTION_DIRECT, src.md, diff_weights.md, NULL, diff_dst.md,
            g.strides, g.dilates, g.padding_l, g.padding_r, hint.pd, attr),
            b"dnnl_convolution_backward_weights_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    out._hint = hint        # next_impl reads it: it must outlive the iteration
    return out


def bn_forward(int prop, MemoryDesc src, MemoryDesc dst, float epsilon, unsigned flags):
    """Batch normalization forward (``dnnl_batch_normalization_forward_primitive_desc_create``)."""
    cdef PrimitiveDesc out = _pd("bn_fwd")
    cdef void* attr = _attr([])
    try:
        _T._check(_T.f.batch_normalization_forward_primitive_desc_create(
            &out.pd, _T.engine, prop, src.md, dst.md, epsilon, flags, attr),
            b"dnnl_batch_normalization_forward_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    return out


def bn_backward(int prop, MemoryDesc diff_src, MemoryDesc diff_dst, MemoryDesc src,
                float epsilon, unsigned flags, PrimitiveDesc hint):
    """Batch normalization backward (``dnnl_batch_normalization_backward_primitive_desc_create``)."""
    cdef PrimitiveDesc out = _pd("bn_bwd")
    cdef void* attr = _attr([])
    try:
        _T._check(_T.f.batch_normalization_backward_primitive_desc_create(
            &out.pd, _T.engine, prop, diff_src.md, diff_dst.md, src.md, epsilon, flags,
            hint.pd, attr), b"dnnl_batch_normalization_backward_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    out._hint = hint        # next_impl reads it: it must outlive the iteration
    return out


def binary(int alg, MemoryDesc src0, MemoryDesc src1, MemoryDesc dst, list post_ops=None):
    """An elementwise ``dst = src0 <alg> src1`` (``src1`` broadcast where its dims are 1)
    with ``post_ops`` (``_attr``: eltwise (alg, alpha, beta), binary (alg, src1 md), each
    binary operand passed as ``ARG_ATTR_MULTIPLE_POST_OP_BASE * (i + 1) | ARG_SRC_1``)
    (``dnnl_binary_primitive_desc_create``), user scratchpad."""
    cdef PrimitiveDesc out = _pd("binary")
    cdef void* attr = _attr(post_ops or [])
    try:
        _T._check(_T.f.binary_primitive_desc_create(&out.pd, _T.engine, alg, src0.md, src1.md,
                                                    dst.md, attr),
                  b"dnnl_binary_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    return out


def reorder(MemoryDesc src, MemoryDesc dst):
    """A reorder (layout and/or data-type conversion) from ``src`` to ``dst``
    (``dnnl_reorder_primitive_desc_create``), user scratchpad."""
    cdef PrimitiveDesc out = _pd("reorder")
    cdef void* attr = _attr([])
    try:
        _T._check(_T.f.reorder_primitive_desc_create(&out.pd, src.md, _T.engine, dst.md,
                                                     _T.engine, attr),
                  b"dnnl_reorder_primitive_desc_create")
    finally:
        _T.f.primitive_attr_destroy(attr)
    return out


# ------------------------------------------------------------------ primitives
cdef class Primitive:
    """A ``dnnl_primitive_t`` made from a primitive descriptor (JIT code is generated
    here: milliseconds; make it at build, never per execution)."""

    def __init__(self, desc):
        _need()
        self.desc = _checked(desc, PrimitiveDesc, "Primitive")
        _T._check(_T.f.primitive_create(&self.prim, self.desc.pd), b"dnnl_primitive_create")

    def close(self):
        """Destroy the primitive (idempotent)."""
        if self.prim != NULL and _T.engine != NULL:
            _T.f.primitive_destroy(self.prim)
        self.prim = NULL

    def __dealloc__(self):
        self.close()


# ------------------------------------------------------------------ programs
MEM_ARRAY, MEM_WORKSPACE, MEM_OWNED = 0, 1, 2


cdef class Program:
    """A prebuilt execution: primitives (steps) over memory objects made once.

    Parameters
    ----------
    mems : sequence of (MemoryDesc, kind, ref)
        One memory object each. ``kind`` ``MEM_ARRAY``: ``ref`` is an index into the
        arrays tuple a run takes (a NumPy array whose data pointer is the element at index
        0 of the descriptor's dims); ``MEM_WORKSPACE``: ``ref`` is a byte offset into the
        run's workspace (64-byte aligned by the caller); ``MEM_OWNED``: ``ref`` is a NumPy
        array the program keeps.
    steps : sequence of (Primitive, sequence of (arg, mem index))
        Executed in order on the program's own stream; ``arg`` a ``DNNL_ARG_*`` value.
    n_arrays : int
        Length of the arrays tuple a run takes.
    workspace_size : int
        Bytes of workspace a run needs (0: none).
    repeat : (first, last, count, byte_steps), optional
        Steps ``first`` to ``last - 1`` run ``count`` times, on consecutive slices of the
        user arrays: before time ``r`` (from 0) the handle of each ``MEM_ARRAY`` memory
        ``i`` is its array's data pointer plus ``r * byte_steps[i]`` (a memory of one
        chunk of the batch, ``byte_steps[i]`` the chunk's bytes along N). Memories
        advanced (a nonzero step) are named only by repeated steps; the others (weights,
        workspace copies) are shared by all ``count`` runs. Default: every step once.
        Arrays are not measured here, repeated or not: the caller (the binder, which
        checks every buffer against its tensor) keeps every slice inside its array.

    Raises
    ------
    ValueError
        A memory, step or repeat argument out of range or not an integer (a count
        outside 1 to 2**20, a negative byte step, a span past 2**56 bytes, a step of a
        memory that is not a user array, an advanced memory named outside the repeat).
    """

    def __init__(self, mems, steps, n_arrays, workspace_size=0, repeat=None):
        _need()
        try:
            mems = [(_checked(md, MemoryDesc, "Program"), kind, ref) for md, kind, ref in mems]
            steps = [(_checked(prim, Primitive, "Program"), [(int(a), int(m)) for a, m in args])
                     for prim, args in steps]
            n_arrays, workspace_size = int(n_arrays), int(workspace_size)
            first, last, count, byte_steps = (
                (0, 0, 1, [0] * len(mems)) if repeat is None else repeat)
            # integers only (a float count or a str step is a caller's bug, not a number)
            first, last, count = (operator.index(v) for v in (first, last, count))
            byte_steps = [operator.index(b) for b in byte_steps]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"_onednn.Program: {exc}") from None
        if not 1 <= count <= _C_MAX_REPEAT:
            raise ValueError(f"_onednn.Program: repeat count {count}; 1 to {_C_MAX_REPEAT}")
        for b in byte_steps:
            # a slice before the array's start, or past any address
            if not 0 <= b * (count - 1) <= _MAX_REPEAT_BYTES:
                raise ValueError(f"_onednn.Program: byte step {b} x {count} repeats; steps "
                                 f"are >= 0 and span at most {_MAX_REPEAT_BYTES} bytes")
        cdef int i, j
        cdef MemoryDesc md
        cdef Primitive prim
        cdef void* handle
        if len(mems) > _C_MAX_MEMS:
            raise ValueError(f"_onednn.Program: {len(mems)} memories; at most {_C_MAX_MEMS}")
        self._keep = []
        self.n_arrays, self.workspace_size = n_arrays, workspace_size
        self.n_mems, self.n_steps = len(mems), len(steps)
        self.mems = <void**>calloc(max(1, self.n_mems), sizeof(void*))
        self.mem_last = <void**>calloc(max(1, self.n_mems), sizeof(void*))
        self.mem_kind = <int*>calloc(max(1, self.n_mems), sizeof(int))
        self.mem_ref = <Py_ssize_t*>calloc(max(1, self.n_mems), sizeof(Py_ssize_t))
        self.step_prim = <void**>calloc(max(1, self.n_steps), sizeof(void*))
        self.step_nargs = <int*>calloc(max(1, self.n_steps), sizeof(int))
        self.step_args = <ExecArg**>calloc(max(1, self.n_steps), sizeof(ExecArg*))
        self.step_on = <unsigned char*>calloc(max(1, self.n_steps), 1)
        self.rep_step = <Py_ssize_t*>calloc(max(1, self.n_mems), sizeof(Py_ssize_t))
        if (self.mems == NULL or self.mem_last == NULL or self.mem_kind == NULL
                or self.mem_ref == NULL or self.step_prim == NULL or self.step_nargs == NULL
                or self.step_args == NULL or self.step_on == NULL or self.rep_step == NULL):
            raise MemoryError()
        if len(byte_steps) != self.n_mems:
            raise ValueError(f"_onednn.Program: {len(byte_steps)} byte steps for "
                             f"{self.n_mems} memories")
        if not 0 <= first <= last <= self.n_steps:
            raise ValueError(f"_onednn.Program: repeat of steps [{first}, {last}) x {count} "
                             f"out of {self.n_steps} steps")
        self.rep_first, self.rep_last, self.rep_count = first, last, count
        for i, b in enumerate(byte_steps):
            if b and mems[i][1] != MEM_ARRAY:
                raise ValueError(f"_onednn.Program: memory {i} advances {b} bytes a repeat "
                                 "but is not a user array")
            self.rep_step[i] = b
        for i, (md, kind, ref) in enumerate(mems):
            handle = NULL
            if kind == MEM_ARRAY:
                if not 0 <= ref < n_arrays:
                    raise ValueError(f"_onednn.Program: memory {i} refers to array {ref} of {n_arrays}")
                self.mem_ref[i] = ref
            elif kind == MEM_WORKSPACE:
                if md.size + ref > workspace_size:
                    raise ValueError(f"_onednn.Program: memory {i} ({md.size} bytes at "
                                     f"{ref}) runs past the workspace ({workspace_size} bytes)")
                self.mem_ref[i] = ref
            elif kind == MEM_OWNED:
                if not isinstance(ref, cnp.ndarray) or (<cnp.ndarray>ref).nbytes < md.size:
                    raise ValueError(f"_onednn.Program: memory {i} needs an array of >= {md.size} bytes")
                handle = cnp.PyArray_DATA(<cnp.ndarray>ref)
            else:
                raise ValueError(f"_onednn.Program: memory {i} has unknown kind {kind!r}")
            self.mem_kind[i] = kind
            self._keep.append((md, ref))
            _T._check(_T.f.memory_create(&self.mems[i], md.md, _T.engine, handle),
                      b"dnnl_memory_create")
            self.mem_last[i] = handle
        for i, (prim, args) in enumerate(steps):
            self._keep.append(prim)
            self.step_prim[i] = prim.prim
            self.step_on[i] = 1
            self.step_nargs[i] = len(args)
            self.step_args[i] = <ExecArg*>calloc(max(1, len(args)), sizeof(ExecArg))
            if self.step_args[i] == NULL:
                raise MemoryError()
            for j, (arg, m) in enumerate(args):
                if not 0 <= m < self.n_mems:
                    raise ValueError(f"_onednn.Program: step {i} names memory {m} of {self.n_mems}")
                if self.rep_step[m] and not first <= i < last:
                    raise ValueError(f"_onednn.Program: step {i} names memory {m}, advanced "
                                     f"in the repeated steps [{first}, {last}) only")
                self.step_args[i][j].arg = arg
                self.step_args[i][j].memory = self.mems[m]
        _T._check(_T.f.stream_create(&self.stream, _T.engine, STREAM_DEFAULT_FLAGS),
                  b"dnnl_stream_create")

    def set_step(self, int index, bint on):
        """Run step ``index`` or skip it (e.g. the reorder of weights already reordered)."""
        if not 0 <= index < self.n_steps:
            raise IndexError(f"_onednn.Program: step {index} of {self.n_steps}")
        self.step_on[index] = on

    def run(self, tuple arrays, workspace=None):
        """Execute every step on ``arrays`` (C-order tuple of NumPy arrays, see ``mems``)
        with ``workspace`` (a contiguous NumPy array of >= ``workspace_size`` bytes, or
        None when that is 0), and wait for it.

        Raises
        ------
        OnednnError
            A primitive failed (``dnnl_primitive_execute``, ``dnnl_stream_wait``).
        ValueError
            Wrong number of arrays, or no workspace where one is needed.
        """
        cdef char* ws = NULL
        if workspace is not None:
            if (<cnp.ndarray?>workspace).nbytes < self.workspace_size:
                raise ValueError(f"_onednn.Program: workspace of {workspace.nbytes} bytes; "
                                 f"{self.workspace_size} needed")
            ws = <char*>cnp.PyArray_DATA(<cnp.ndarray>workspace)
        self.c_run(arrays, ws)

    cdef int c_run(self, tuple arrays, char* workspace) except -1:
        cdef void* ptrs[_C_MAX_MEMS]
        cdef int i, r, st = 0, kind
        cdef const char* call = b"dnnl_primitive_execute"
        cdef object a
        global _ran
        if _forked is not None:
            raise _errors.ExecutionError(_forked)
        if len(arrays) != self.n_arrays:
            raise ValueError(f"_onednn.Program: {len(arrays)} arrays given; {self.n_arrays} needed")
        if workspace == NULL and self.workspace_size:
            raise ValueError(f"_onednn.Program: a workspace of {self.workspace_size} bytes is needed")
        if self.n_steps == 0:
            return 0        # nothing to run (a launch whose hooks do the work): no gate
        for i in range(self.n_mems):
            kind = self.mem_kind[i]
            if kind == 0:
                a = arrays[self.mem_ref[i]]
                if not isinstance(a, cnp.ndarray):
                    raise TypeError(f"_onednn.Program: argument {self.mem_ref[i]} is a "
                                    f"{type(a).__name__}, not a NumPy array")
                ptrs[i] = cnp.PyArray_DATA(<cnp.ndarray>a)
            elif kind == 1:
                ptrs[i] = workspace + self.mem_ref[i]
            else:
                ptrs[i] = self.mem_last[i]
        cdef sigset_t saved
        _ran = True
        with nogil:
            pthread_sigmask(SIG_BLOCK, &_async_signals, &saved)
            _gate_lock()
            # handles are set under the gate: two threads running one program never mix
            # each other's pointers
            for i in range(self.n_mems):
                if ptrs[i] != self.mem_last[i]:
                    st = _T.f.memory_set_data_handle(self.mems[i], ptrs[i])
                    if st != 0:
                        call = b"dnnl_memory_set_data_handle"
                        break
                    self.mem_last[i] = ptrs[i]
            if st == 0:
                st = self._steps(ptrs, 0, self.rep_first, 0)
                for r in range(self.rep_count):
                    if st != 0:
                        break
                    st = self._steps(ptrs, self.rep_first, self.rep_last, r)
                if st == 0:
                    st = self._steps(ptrs, self.rep_last, self.n_steps, 0)
                if st == _C_SET_HANDLE_FAILED:      # else a failed execution's status
                    st, call = self._handle_status, b"dnnl_memory_set_data_handle"
                if st == 0:
                    st = _T.f.stream_wait(self.stream)
                    call = b"dnnl_stream_wait"
            pthread_mutex_unlock(&_gate)
            pthread_sigmask(SIG_SETMASK, &saved, NULL)
        if st != 0:
            _T._check(st, call)
        return 0

    cdef int _steps(self, void** ptrs, int first, int last, int r) noexcept nogil:
        """Execute steps [first, last) (those switched on), the advanced memories at slice
        ``r`` (``repeat``); 0, a failed execution's status, or _C_SET_HANDLE_FAILED (the
        status in ``_handle_status``). Called under the gate."""
        cdef int i, st
        cdef void* p
        if first >= last:
            return 0
        if r:
            for i in range(self.n_mems):
                if self.rep_step[i]:
                    p = <char*>ptrs[i] + r * self.rep_step[i]
                    st = _T.f.memory_set_data_handle(self.mems[i], p)
                    if st != 0:
                        self._handle_status = st
                        return _C_SET_HANDLE_FAILED
                    self.mem_last[i] = p
        for i in range(first, last):
            if self.step_on[i]:
                st = _T.f.primitive_execute(self.step_prim[i], self.stream,
                                            self.step_nargs[i], self.step_args[i])
                if st != 0:
                    return st
        return 0

    def close(self):
        """Destroy the stream and memory objects (idempotent; the program must be idle)."""
        cdef int i
        if _T.engine != NULL:
            if self.stream != NULL:
                _T.f.stream_destroy(self.stream)
            if self.mems != NULL:
                for i in range(self.n_mems):
                    if self.mems[i] != NULL:
                        _T.f.memory_destroy(self.mems[i])
        self.stream = NULL
        if self.step_args != NULL:
            for i in range(self.n_steps):
                free(self.step_args[i])
        free(self.mems); free(self.mem_last); free(self.mem_kind); free(self.mem_ref)
        free(self.step_prim); free(self.step_nargs); free(self.step_args); free(self.step_on)
        free(self.rep_step)
        self.rep_step = NULL
        self.mems = self.mem_last = NULL
        self.mem_kind = NULL
        self.mem_ref = NULL
        self.step_prim = NULL
        self.step_nargs = NULL
        self.step_args = NULL
        self.step_on = NULL
        self.n_mems = self.n_steps = 0
        self._keep = []

    def __dealloc__(self):
        self.close()


cdef long long _now_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return t.tv_sec * 1000000000LL + t.tv_nsec


cdef class Launch:
    """A :class:`Program` bound to one execution's arrays: calling it runs the program
    (``before()`` / ``after()`` around it where given, for per-channel host work), counts
    the execution in ``counter`` (``add(ns)``) and raises a failure as a ``HipdnnError``
    whose message starts with ``label``.

    Parameters
    ----------
    program : Program
    arrays : tuple of ndarray
        As ``Program.run`` takes them.
    workspace : ndarray or None
    counter : object, optional
        Has ``add(ns)`` (``runtime.ExecCounter``).
    label : str, optional
        Starts the message of a failed execution's error.
    before, after : callable, optional
        Called with no arguments before and after the program (while it is not running).
    hooks_read_ws : bool
        Whether ``before`` / ``after`` may read ``workspace`` (the default): such a launch
        is never copied onto another one (:meth:`with_workspace`).
    """

    cdef Program program
    cdef tuple arrays
    cdef object workspace
    cdef char* ws
    cdef object counter
    cdef object label
    cdef object before
    cdef object after
    cdef bint hooks_read_ws

    def __init__(self, program, arrays, workspace=None, counter=None, label=None,
                 before=None, after=None, *, bint hooks_read_ws=True):
        self.program = _checked(program, Program, "Launch")
        self.arrays = _checked(arrays, tuple, "Launch")
        self._set_workspace(workspace)
        self.counter, self.label, self.before, self.after = counter, label, before, after
        self.hooks_read_ws = hooks_read_ws

    def with_workspace(self, workspace):
        """This launch on another ``workspace`` (an ndarray of at least the program's
        ``workspace_size`` bytes; None makes a template, only to be copied again), or None
        where ``before`` / ``after`` may read the workspace they were made for
        (``hooks_read_ws``). A copy in C: no check of the arrays runs again.

        Raises
        ------
        ValueError
            ``workspace`` is smaller than the program's workspace.
        """
        cdef Launch out
        if self.hooks_read_ws and (self.before is not None or self.after is not None):
            return None
        out = Launch.__new__(Launch)
        out.program, out.arrays, out.counter, out.label = (self.program, self.arrays,
                                                           self.counter, self.label)
        out.before, out.after, out.hooks_read_ws = self.before, self.after, self.hooks_read_ws
        out._set_workspace(workspace)
        return out

    cdef int _set_workspace(self, workspace) except -1:
        """``workspace`` (None, or an ndarray of at least the program's bytes) and its
        address."""
        self.workspace, self.ws = workspace, NULL
        if workspace is not None:
            if (<cnp.ndarray>_checked(workspace, cnp.ndarray, "Launch")).nbytes < self.program.workspace_size:
                raise ValueError(f"_onednn.Launch: workspace of {workspace.nbytes} bytes; "
                                 f"{self.program.workspace_size} needed")
            self.ws = <char*>cnp.PyArray_DATA(<cnp.ndarray>workspace)
        return 0

    def __call__(self):
        cdef long long t0 = _now_ns()
        cdef double waited = gate_waited()
        try:
            if self.before is not None:
                self.before()
            self.program.c_run(self.arrays, self.ws)
            if self.after is not None:
                self.after()
        except _errors.HipdnnError as exc:
            if self.label is None:
                raise
            raise exc.prefixed(self.label)
        if self.counter is not None:
            # the time spent waiting for the gate (another stream's program) is not this
            # execution's
            self.counter.add(_now_ns() - t0 - <long long>((gate_waited() - waited) * 1e9))
