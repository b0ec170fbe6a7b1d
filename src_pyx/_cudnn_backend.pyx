# cython: language_level=3, boundscheck=False, wraparound=False
"""cuDNN 9 backend (graph) API bindings (``hipdnn_async.runtime._cudnn_backend``).

Wrapping contract
-----------------
Covered: ``cudnnBackendCreateDescriptor``, ``SetAttribute``, ``GetAttribute``,
``Finalize``, ``Execute`` and ``DestroyDescriptor`` (cudnn_graph.h of cuDNN 9), plus
``cudnnGetVersion``, ``cudnnGetErrorString``, ``cudnnGetLastErrorString`` and
``cudnnSetStream`` for status text and the C submit path. Handles come from the legacy
binding (``runtime._cudnn.create``): both tables point into the same ``libcudnn.so.9``.

Names drop the ``CUDNN_`` prefix: ``CUDNN_ATTR_TENSOR_DIMENSIONS`` is
``ATTR_TENSOR_DIMENSIONS``. Every constant is the value of cudnn_graph.h in cuDNN 9.19.1
(the ``nvidia-cudnn-cu13`` 9.19.1.2 wheel), checked by compiling the header; the backend
enums are stable across cuDNN 9 (new values are appended).

A :class:`Descriptor` owns one backend descriptor; its ``set_*`` / ``get_*`` methods take
the attribute name and, where the attribute type is not implied, the attribute type.
Descriptors set on another one stay referenced by it (cuDNN keeps their pointers).
Execution is :func:`execute` from Python or :func:`execute_c` (``nogil``, C arrays) from
Cython: the variant pack is built, executed and destroyed in C (0.4-0.7 us measured on the
H200, docs/design/vendor-notes.md). :class:`GraphLaunch` is the submit path's
form: one bound execution whose variant pack is built once (per stream and workspace) and
reused, so an execution is one ``cudnnBackendExecute`` call with the GIL released.
``_cudnn_backend.pxd`` declares the C surface for other Cython modules.

Loading: the symbol table is a ``_loader.LibraryTable`` (``BackendTable``, one per
process: :data:`TABLE`) with one named pointer per function (``BackendFns`` of
``_cudnn_backend.pxd``), filled by name, once and under the table's lock, when
:func:`load` opens ``libcudnn.so.9`` through the shared loader (the same library the
legacy binding ``runtime._cudnn`` opens; ``dlopen`` returns the same handle). A library
that lacks the backend API is still taken (its legacy API may serve): :func:`available`
says up front whether the backend API is usable, and why not; a symbol that is absent
raises ``LibraryError`` (a ``DeviceError``) at its first call, naming symbol and library.

Errors: a non-zero ``cudnnStatus_t`` raises the library's typed error (:func:`error_for`,
from cuDNN's one status table, ``runtime._cudnn.STATUS``, its status name and last error
message read by ``runtime._cudnn``'s shared ``status_name_of`` / ``last_error_of``, as the
version by ``version_of``): NOT_SUPPORTED* is a
``CudnnNotSupportedError`` (a ``NotSupportedError``, so the next engine may try), BAD_PARAM*
a ``CudnnBadParamError``, anything else a ``CudnnError`` (an ``ExecutionError``); each keeps
``.status``, ``.status_name``, ``.call`` and cuDNN's last error message.
"""
cimport cython
from cpython.pythread cimport (NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_release_lock)
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from .. import _errors
from . import _cudnn
from ._cudnn cimport last_error_of, status_name_of, version_of
from ._gpu cimport ExecCounter, Runtime
from ._gpu_api cimport RuntimeFns
from ._loader cimport Library, LibraryTable
from ._launch_state cimport launch_current
from ._stream_resources import PackSpec as _PackSpec

# ------------------------------------------------------------------ constants
# cudnnBackendDescriptorType_t (cudnn_graph.h, cuDNN 9.19.1)
BACKEND_POINTWISE_DESCRIPTOR = 0
BACKEND_CONVOLUTION_DESCRIPTOR = 1
BACKEND_ENGINE_DESCRIPTOR = 2
BACKEND_ENGINECFG_DESCRIPTOR = 3
BACKEND_ENGINEHEUR_DESCRIPTOR = 4
BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5
BACKEND_KNOB_CHOICE_DESCRIPTOR = 7
BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10
BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR = 11
BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR = 12
BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13
BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15
BACKEND_VARIANT_PACK_DESCRIPTOR = 16
BACKEND_TENSOR_DESCRIPTOR = 17
BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR = 29
BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR = 30

# cudnnBackendAttributeType_t (cudnn_graph.h, cuDNN 9.19.1)
TYPE_HANDLE = 0
TYPE_DATA_TYPE = 1
TYPE_BOOLEAN = 2
TYPE_INT64 = 3
TYPE_FLOAT = 4
TYPE_DOUBLE = 5
TYPE_VOID_PTR = 6
TYPE_CONVOLUTION_MODE = 7
TYPE_HEUR_MODE = 8
TYPE_KNOB_TYPE = 9
TYPE_NAN_PROPOGATION = 10      # sic, the header's spelling
TYPE_NUMERICAL_NOTE = 11
TYPE_POINTWISE_MODE = 14
TYPE_BACKEND_DESCRIPTOR = 15
TYPE_BEHAVIOR_NOTE = 19
TYPE_INT32 = 23
TYPE_CHAR = 24
TYPE_NORM_MODE = 27
TYPE_NORM_FWD_PHASE = 28

# cudnnBackendAttributeName_t (cudnn_graph.h, cuDNN 9.19.1)
ATTR_POINTWISE_MODE = 0
ATTR_POINTWISE_MATH_PREC = 1
ATTR_POINTWISE_NAN_PROPAGATION = 2
ATTR_POINTWISE_RELU_LOWER_CLIP = 3
ATTR_POINTWISE_RELU_UPPER_CLIP = 4
ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE = 5
ATTR_CONVOLUTION_COMP_TYPE = 100
ATTR_CONVOLUTION_CONV_MODE = 101
ATTR_CONVOLUTION_DILATIONS = 102
ATTR_CONVOLUTION_FILTER_STRIDES = 103
ATTR_CONVOLUTION_POST_PADDINGS = 104
ATTR_CONVOLUTION_PRE_PADDINGS = 105
ATTR_CONVOLUTION_SPATIAL_DIMS = 106
ATTR_ENGINEHEUR_MODE = 200
ATTR_ENGINEHEUR_OPERATION_GRAPH = 201
ATTR_ENGINEHEUR_RESULTS = 202
ATTR_ENGINECFG_ENGINE = 300
ATTR_ENGINECFG_KNOB_CHOICES = 302
ATTR_ENGINECFG_WORKSPACE_SIZE = 303          # readable since 9.2
ATTR_EXECUTION_PLAN_HANDLE = 400             # deprecated in 9.x headers, still accepted
ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401
ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402
ATTR_EXECUTION_PLAN_JSON_REPRESENTATION = 405
ATTR_KNOB_CHOICE_KNOB_TYPE = 600
ATTR_KNOB_CHOICE_KNOB_VALUE = 601
ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA = 700
ATTR_OPERATION_CONVOLUTION_FORWARD_BETA = 701
ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC = 702
ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703
ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704
ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705
ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA = 706
ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA = 707
ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC = 708
ATTR_OPERATION_CONVOLUTION_BWD_DATA_W = 709
ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX = 710
ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY = 711
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA = 712
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA = 713
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC = 714
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW = 715
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X = 716
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY = 717
ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750
ATTR_OPERATION_POINTWISE_XDESC = 751
ATTR_OPERATION_POINTWISE_BDESC = 752
ATTR_OPERATION_POINTWISE_YDESC = 753
ATTR_OPERATION_POINTWISE_DXDESC = 756
ATTR_OPERATION_POINTWISE_DYDESC = 757
ATTR_OPERATIONGRAPH_HANDLE = 800             # deprecated in 9.x headers, still accepted
ATTR_OPERATIONGRAPH_OPS = 801
ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT = 802
ATTR_TENSOR_BYTE_ALIGNMENT = 900
ATTR_TENSOR_DATA_TYPE = 901
ATTR_TENSOR_DIMENSIONS = 902
ATTR_TENSOR_STRIDES = 903
ATTR_TENSOR_UNIQUE_ID = 906
ATTR_TENSOR_IS_VIRTUAL = 907
ATTR_TENSOR_IS_BY_VALUE = 908
ATTR_VARIANT_PACK_UNIQUE_IDS = 1000
ATTR_VARIANT_PACK_DATA_POINTERS = 1001
ATTR_VARIANT_PACK_WORKSPACE = 1003
ATTR_ENGINE_OPERATION_GRAPH = 1300
ATTR_ENGINE_GLOBAL_INDEX = 1301
ATTR_ENGINE_NUMERICAL_NOTE = 1303
ATTR_ENGINE_BEHAVIOR_NOTE = 1305
ATTR_OPERATION_NORM_FWD_MODE = 2000
ATTR_OPERATION_NORM_FWD_PHASE = 2001
ATTR_OPERATION_NORM_FWD_XDESC = 2002
ATTR_OPERATION_NORM_FWD_MEAN_DESC = 2003
ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC = 2004
ATTR_OPERATION_NORM_FWD_SCALE_DESC = 2005
ATTR_OPERATION_NORM_FWD_BIAS_DESC = 2006
ATTR_OPERATION_NORM_FWD_EPSILON_DESC = 2007
ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC = 2008
ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC = 2009
ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC = 2010
ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC = 2011
ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC = 2012
ATTR_OPERATION_NORM_FWD_YDESC = 2013
ATTR_OPERATION_NORM_BWD_MODE = 2100
ATTR_OPERATION_NORM_BWD_XDESC = 2101
ATTR_OPERATION_NORM_BWD_MEAN_DESC = 2102
ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC = 2103
ATTR_OPERATION_NORM_BWD_DYDESC = 2104
ATTR_OPERATION_NORM_BWD_SCALE_DESC = 2105
ATTR_OPERATION_NORM_BWD_EPSILON_DESC = 2106
ATTR_OPERATION_NORM_BWD_DSCALE_DESC = 2107
ATTR_OPERATION_NORM_BWD_DBIAS_DESC = 2108
ATTR_OPERATION_NORM_BWD_DXDESC = 2109

# cudnnDataType_t, cudnnConvolutionMode_t, cudnnNanPropagation_t (cudnn_graph.h, cuDNN 9.19.1)
DATA_FLOAT = 0
DATA_DOUBLE = 1
DATA_HALF = 2
DATA_BFLOAT16 = 9
CONVOLUTION = 0
CROSS_CORRELATION = 1
NOT_PROPAGATE_NAN = 0
PROPAGATE_NAN = 1
# cudnnPointwiseMode_t (cudnn_graph.h, cuDNN 9.19.1)
POINTWISE_ADD = 0
POINTWISE_IDENTITY = 21
POINTWISE_RELU_FWD = 100
POINTWISE_RELU_BWD = 200
# cudnnBackendNormMode_t, cudnnBackendNormFwdPhase_t (cudnn_graph.h, cuDNN 9.19.1)
BATCH_NORM = 2
NORM_FWD_INFERENCE = 0
NORM_FWD_TRAINING = 1
# cudnnBackendHeurMode_t (cudnn_graph.h, cuDNN 9.19.1): A is an alias of INSTANT
HEUR_MODE_INSTANT = 0
HEUR_MODE_B = 1
HEUR_MODE_FALLBACK = 2
HEUR_MODE_A = 3
# cudnnBackendNumericalNote_t (cudnn_graph.h, cuDNN 9.19.1)
NUMERICAL_NOTE_TENSOR_CORE = 0
NUMERICAL_NOTE_DOWN_CONVERT_INPUTS = 1
NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION = 2
NUMERICAL_NOTE_FFT = 3
NUMERICAL_NOTE_NONDETERMINISTIC = 4
NUMERICAL_NOTE_WINOGRAD = 5
NUMERICAL_NOTE_WINOGRAD_TILE_4x4 = 6
NUMERICAL_NOTE_WINOGRAD_TILE_6x6 = 7
NUMERICAL_NOTE_WINOGRAD_TILE_13x13 = 8
NUMERICAL_NOTE_STRICT_NAN_PROP = 9
NUMERICAL_NOTE_TYPE_COUNT = 10
# cudnnBackendBehaviorNote_t (cudnn_graph.h, cuDNN 9.19.1)
BEHAVIOR_NOTE_RUNTIME_COMPILATION = 0
BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API = 3
BEHAVIOR_NOTE_TYPE_COUNT = 5
# cudnnStatus_t (cudnn_graph.h, cuDNN 9.19.1): categories are the thousands
STATUS_SUCCESS = 0
STATUS_NOT_INITIALIZED = 1001
STATUS_BAD_PARAM = 2000
STATUS_BAD_PARAM_NOT_FINALIZED = 2004
STATUS_NOT_SUPPORTED = 3000
STATUS_NOT_SUPPORTED_GRAPH_PATTERN = 3001
STATUS_NOT_SUPPORTED_SHAPE = 3002
STATUS_INTERNAL_ERROR = 4000
STATUS_EXECUTION_FAILED = 5000

# C copies of the constants the nogil paths use (values of the checked constants above)
cdef int _C_NOT_INITIALIZED = STATUS_NOT_INITIALIZED     # the table lacks the call
cdef int _C_VARIANT_PACK = BACKEND_VARIANT_PACK_DESCRIPTOR
cdef int _C_UNIQUE_IDS = ATTR_VARIANT_PACK_UNIQUE_IDS
cdef int _C_DATA_POINTERS = ATTR_VARIANT_PACK_DATA_POINTERS
cdef int _C_WORKSPACE = ATTR_VARIANT_PACK_WORKSPACE
cdef int _C_TYPE_INT64 = TYPE_INT64
cdef int _C_TYPE_VOID_PTR = TYPE_VOID_PTR
cdef enum:
    MAX_PACK = 32               # variant-pack entries per execution (the patterns use <= 12)
    MAX_VALUES = 64             # elements of one attribute (dims: 8; knob choices: 44)

# ------------------------------------------------------------------ symbol table
# In BackendFns field order (a test checks it against the .pxd); looked up as "cudnn" + name.
NAMES = (
    "BackendCreateDescriptor", "BackendDestroyDescriptor", "BackendSetAttribute",
    "BackendGetAttribute", "BackendFinalize", "BackendExecute", "GetVersion",
    "GetErrorString", "GetLastErrorString", "SetStream",
)
# the calls without which the backend API cannot be used at all (see available())
REQUIRED = NAMES[:7]


cdef class BackendTable(LibraryTable):
    """The backend-API symbol table of ``libcudnn.so.9`` (one per process: :data:`TABLE`).

    It requires nothing at load (a cuDNN without the backend API is still loaded, and
    :func:`available` says why it cannot be used); its version is ``cudnnGetVersion()``.
    """

    def __init__(self):
        LibraryTable.__init__(self, "cudnn", "cudnn", "cuDNN backend API")
        self._version_number = 0

    cdef int _fill(self, Library lib) except -1:
        cdef BackendFns* f = &self.f
        f.BackendCreateDescriptor = <f_create_descriptor>lib.sym("BackendCreateDescriptor")
        f.BackendDestroyDescriptor = <f_descriptor>lib.sym("BackendDestroyDescriptor")
        f.BackendSetAttribute = <f_set_attribute>lib.sym("BackendSetAttribute")
        f.BackendGetAttribute = <f_get_attribute>lib.sym("BackendGetAttribute")
        f.BackendFinalize = <f_descriptor>lib.sym("BackendFinalize")
        f.BackendExecute = <f_execute>lib.sym("BackendExecute")
        f.GetVersion = <f_version>lib.sym("GetVersion")
        f.GetErrorString = <f_errstr>lib.sym("GetErrorString")
        f.GetLastErrorString = <f_last_err>lib.sym("GetLastErrorString")
        f.SetStream = <f_set_stream>lib.sym("SetStream")
        self._version_number = version_of(f.GetVersion)
        return 0

    cdef void _clear(self) noexcept:
        memset(&self.f, 0, sizeof(self.f))
        self._version_number = 0

    cdef object _version(self):
        return self._version_number


cdef BackendTable _T = BackendTable()
# The table's pointers for the nogil paths (the table lives as long as the module).
cdef BackendFns* _f = &_T.f
TABLE = _T


cdef BackendTable table():
    return _T


def load(str path, str found_via="explicit"):
    """Open cuDNN at ``path`` (absolute path or soname) and fill the backend table;
    idempotent (a loaded table returns its record and ignores ``path``).

    Returns
    -------
    LoadRecord
        ``version`` is ``cudnnGetVersion()`` (0 when the library lacks it).

    Raises
    ------
    LibraryError
        ``dlopen`` failed (the message names the path and ``dlerror()``).
    """
    return _T.load(path, found_via)


def loaded():
    """The ``LoadRecord`` of the loaded library, or None."""
    return _T.record


def available():
    """``(ok, reason)``: whether the backend API can be used; ``reason`` names the missing
    calls or says that nothing was loaded."""
    if _T.lib is None:
        return False, "the cuDNN backend API is not loaded"
    lacking = [_T.prefix + n for n in REQUIRED if (_T.prefix + n) in _T.lib.missing]
    if lacking:
        return False, f"{_T.lib.path} does not export the cuDNN backend API ({', '.join(lacking)})"
    return True, ""


def loaded_path():
    """The library path the table was filled from, or None."""
    return _T.lib.path if _T.lib is not None else None


def version():
    """cudnnGetVersion(): MAJOR*10000 + MINOR*100 + PATCH since 9.0."""
    if _f.GetVersion == NULL:
        _T.missing(b"GetVersion")
    return int(_f.GetVersion())


# ------------------------------------------------------------------ errors
# (the texts are read as the legacy binding reads them: runtime._cudnn's shared helpers)
def status_name(int status):
    """cuDNN's name of ``status`` (``cudnnGetErrorString``), or ``"?"``."""
    name = status_name_of(_f.GetErrorString, status)
    return "?" if name is None else name


def last_error():
    """cuDNN's last error message of this thread (``cudnnGetLastErrorString``)."""
    return last_error_of(_f.GetLastErrorString)


def error_for(str call, int status, str name=None, str text=None):
    """The typed error of ``status`` returned by ``call``: cuDNN's status table
    (``runtime._cudnn.STATUS`` through ``_cudnn.status_error``: NOT_SUPPORTED* a
    ``CudnnNotSupportedError``, BAD_PARAM* a ``CudnnBadParamError``, else ``CudnnError``)."""
    name = status_name_of(_f.GetErrorString, status) if name is None else name
    text = last_error_of(_f.GetLastErrorString) if text is None else text
    return _cudnn.status_error(call, status, None if name == "?" else name, text,
                               loaded_path() or "libcudnn.so.9")


cdef int check(int status, str call) except -1:
    if status != 0:
        raise error_for(call, status)
    return 0


# ------------------------------------------------------------------ descriptors
cdef class Descriptor:
    """One backend descriptor of type ``kind`` (``BACKEND_*_DESCRIPTOR``).

    ``ptr`` is its address as an int. ``close()`` destroys it (idempotent; also on
    collection). Setting descriptors on it keeps them alive as long as it lives.

    Raises
    ------
    NotSupportedError, ExecutionError
        ``cudnnBackendCreateDescriptor`` failed.
    DeviceError
        The backend API is not loaded.
    """

    def __cinit__(self, int kind):
        self.ptr = NULL
        self.kind = kind
        self.finalized = False
        self._refs = []
        cdef void* d = NULL
        if _f.BackendCreateDescriptor == NULL:
            _T.missing(b"BackendCreateDescriptor")
        check(_f.BackendCreateDescriptor(kind, &d), "cudnnBackendCreateDescriptor")
        self.ptr = d

    @property
    def address(self):
        return <uintptr_t>self.ptr

    def close(self):
        """Destroy the descriptor; idempotent."""
        if self.ptr != NULL and _f.BackendDestroyDescriptor != NULL:
            _f.BackendDestroyDescriptor(self.ptr)
        self.ptr = NULL
        self._refs = []

    def __dealloc__(self):
        if self.ptr != NULL and _f.BackendDestroyDescriptor != NULL:
            _f.BackendDestroyDescriptor(self.ptr)
        self.ptr = NULL

    cdef int _set(self, int attr, int attr_type, int64_t count, const void* values) except -1:
        if self.ptr == NULL:
            raise _errors.ExecutionError(f"cudnnBackendSetAttribute({attr}): descriptor closed")
        if _f.BackendSetAttribute == NULL:
            _T.missing(b"BackendSetAttribute")
        cdef int st = _f.BackendSetAttribute(self.ptr, attr, attr_type, count, values)
        if st != 0:
            raise error_for(f"cudnnBackendSetAttribute(attribute {attr}, type {attr_type}, "
                            f"descriptor type {self.kind})", st)
        return 0

    # ---- setters
    def set_int64(self, int attr, values):
        """Set an INT64 attribute to one int or a sequence of ints (at most 64)."""
        cdef int64_t buf[MAX_VALUES]
        vals = [values] if isinstance(values, int) else list(values)
        if len(vals) > MAX_VALUES:
            raise ValueError(f"attribute {attr}: at most {MAX_VALUES} values; got {len(vals)}")
        for i, v in enumerate(vals):
            buf[i] = int(v)
        self._set(attr, TYPE_INT64, len(vals), buf)

    def set_enum(self, int attr, int attr_type, int value):
        """Set a 4-byte enum attribute (DATA_TYPE, CONVOLUTION_MODE, HEUR_MODE,
        POINTWISE_MODE, NORM_MODE, NORM_FWD_PHASE, KNOB_TYPE, NAN_PROPOGATION)."""
        cdef int v = value
        self._set(attr, attr_type, 1, &v)

    def set_bool(self, int attr, bint value):
        """Set a BOOLEAN attribute (a C ``bool``, one byte)."""
        cdef char v = 1 if value else 0
        self._set(attr, TYPE_BOOLEAN, 1, &v)

    def set_float(self, int attr, double value):
        """Set a FLOAT attribute (alpha/beta of FLOAT, HALF and BFLOAT16 operations)."""
        cdef float v = <float>value
        self._set(attr, TYPE_FLOAT, 1, &v)

    def set_double(self, int attr, double value):
        """Set a DOUBLE attribute (ReLU clips, as cudnn-frontend sets them)."""
        cdef double v = value
        self._set(attr, TYPE_DOUBLE, 1, &v)

    def set_handle(self, int attr, uintptr_t handle):
        """Set a HANDLE attribute to a ``cudnnHandle_t`` given as an int."""
        cdef void* h = <void*>handle
        self._set(attr, TYPE_HANDLE, 1, &h)

    def set_descriptors(self, int attr, descriptors):
        """Set a BACKEND_DESCRIPTOR attribute to one descriptor or a sequence of them."""
        cdef void* buf[MAX_VALUES]
        cdef Descriptor d
        ds = [descriptors] if isinstance(descriptors, Descriptor) else list(descriptors)
        if len(ds) > MAX_VALUES:
            raise ValueError(f"attribute {attr}: at most {MAX_VALUES} descriptors; got {len(ds)}")
        for i, obj in enumerate(ds):
            d = <Descriptor?>obj
            buf[i] = d.ptr
        self._set(attr, TYPE_BACKEND_DESCRIPTOR, len(ds), buf)
        self._refs.extend(ds)

    def set_chars(self, int attr, bytes text):
        """Set a CHAR attribute (a serialized execution plan)."""
        cdef const char* p = text
        self._set(attr, TYPE_CHAR, len(text), p)

    def finalize(self):
        """``cudnnBackendFinalize``; NotSupportedError for what cuDNN cannot take."""
        if self.ptr == NULL:
            raise _errors.ExecutionError("cudnnBackendFinalize: descriptor closed")
        cdef f_descriptor f = _f.BackendFinalize
        if f == NULL:
            _T.missing(b"BackendFinalize")
        cdef int st
        with nogil:
            st = f(self.ptr)     # plan finalize may compile kernels (NVRTC): seconds
        if st != 0:
            raise error_for(f"cudnnBackendFinalize(descriptor type {self.kind})", st)
        self.finalized = True

    # ---- getters
    cdef int _get(self, int attr, int attr_type, int64_t requested, int64_t* count,
                  void* values) except -1:
        if self.ptr == NULL:
            raise _errors.ExecutionError(f"cudnnBackendGetAttribute({attr}): descriptor closed")
        if _f.BackendGetAttribute == NULL:
            _T.missing(b"BackendGetAttribute")
        cdef int st = _f.BackendGetAttribute(self.ptr, attr, attr_type, requested, count, values)
        if st != 0:
            raise error_for(f"cudnnBackendGetAttribute(attribute {attr}, type {attr_type}, "
                            f"descriptor type {self.kind})", st)
        return 0

    def count(self, int attr, int attr_type):
        """How many elements attribute ``attr`` holds (a GetAttribute of 0 elements)."""
        cdef int64_t n = 0
        self._get(attr, attr_type, 0, &n, NULL)
        return int(n)

    def get_int64(self, int attr, int requested=1):
        """An INT64 attribute as a list of at most ``requested`` ints."""
        cdef int64_t buf[MAX_VALUES]
        cdef int64_t n = 0
        requested = min(requested, MAX_VALUES)
        self._get(attr, TYPE_INT64, requested, &n, buf)
        return [int(buf[i]) for i in range(min(n, requested))]

    def get_enums(self, int attr, int attr_type, int requested):
        """A 4-byte enum attribute (NUMERICAL_NOTE, BEHAVIOR_NOTE, KNOB_TYPE, ...) as a
        list of at most ``requested`` ints."""
        cdef int buf[MAX_VALUES]
        cdef int64_t n = 0
        requested = min(requested, MAX_VALUES)
        self._get(attr, attr_type, requested, &n, buf)
        return [int(buf[i]) for i in range(min(n, requested))]

    def get_descriptors(self, int attr, int kind, int requested):
        """A BACKEND_DESCRIPTOR attribute: ``requested`` new descriptors of type ``kind``
        are created, cuDNN fills them, and the ones it filled come back (a list)."""
        cdef void* buf[MAX_VALUES]
        cdef int64_t n = 0
        cdef Descriptor d
        requested = min(requested, MAX_VALUES)
        made = [Descriptor(kind) for _ in range(requested)]
        for i in range(requested):
            d = made[i]
            buf[i] = d.ptr
        self._get(attr, TYPE_BACKEND_DESCRIPTOR, requested, &n, buf)
        for d in made[n:]:
            d.close()
        for d in made[:n]:
            d.finalized = True
        return made[:n]

    def get_chars(self, int attr):
        """A CHAR attribute as bytes (trailing NULs dropped)."""
        cdef int64_t n = self.count(attr, TYPE_CHAR)
        cdef bytearray buf = bytearray(n + 1)
        cdef char* p = buf
        cdef int64_t got = 0
        if n:
            self._get(attr, TYPE_CHAR, n, &got, p)
        return bytes(buf[:got]).rstrip(b"\0")


# ------------------------------------------------------------------ execution
cdef int execute_c(void* handle, void* plan, int n, const int64_t* uids, void** pointers,
                   void* workspace) noexcept nogil:
    """Build a variant pack of ``n`` (uid, pointer) pairs and ``workspace``, execute
    ``plan`` on ``handle``'s stream, destroy the pack; the first failing status."""
    cdef void* vp = NULL
    cdef int st
    if _f.BackendExecute == NULL:
        return _C_NOT_INITIALIZED
    st = make_pack(&vp, n, uids, pointers, workspace)
    if st != 0:
        return st
    st = _f.BackendExecute(handle, plan, vp)
    _f.BackendDestroyDescriptor(vp)
    return st


cdef int set_stream_c(void* handle, void* stream) noexcept nogil:
    """``cudnnSetStream``; CUDNN_STATUS_NOT_INITIALIZED when the table lacks it."""
    if _f.SetStream == NULL:
        return _C_NOT_INITIALIZED
    return _f.SetStream(handle, stream)


def execute(uintptr_t handle, Descriptor plan, uids, pointers, uintptr_t workspace=0):
    """Execute a finalized execution plan on ``handle``'s stream.

    Parameters
    ----------
    handle : int
        ``cudnnHandle_t`` bound to the stream the work goes on.
    plan : Descriptor
        A finalized EXECUTION_PLAN descriptor.
    uids, pointers : sequence of int
        The variant pack: tensor uids and their device pointers (host pointers for
        by-value tensors), in the same order; at most 32 entries.
    workspace : int, optional
        Device pointer to at least the plan's workspace size; 0 when it needs none.

    Raises
    ------
    ExecutionError, NotSupportedError
        cuDNN refused the variant pack or the execution.
    """
    cdef int64_t u[MAX_PACK]
    cdef void* p[MAX_PACK]
    cdef int n = len(uids)
    cdef int st
    if n != len(pointers) or n > MAX_PACK:
        raise ValueError(f"execute: {n} uids and {len(pointers)} pointers (at most {MAX_PACK})")
    if _f.BackendExecute == NULL:
        _T.missing(b"BackendExecute")
    for i in range(n):
        u[i] = uids[i]
        p[i] = <void*><uintptr_t>pointers[i]
    with nogil:
        st = execute_c(<void*>handle, plan.ptr, n, u, p, <void*>workspace)
    if st != 0:
        raise error_for("cudnnBackendExecute", st)


# ------------------------------------------------------------------ the submit path
cdef int make_pack(void** out, int n, const int64_t* uids, void** pointers,
                   void* workspace) noexcept nogil:
    """A finalized variant pack of ``n`` (uid, pointer) pairs and ``workspace`` in
    ``*out``; the first failing status (nothing is left allocated then)."""
    cdef void* vp = NULL
    cdef int st
    out[0] = NULL
    if (_f.BackendCreateDescriptor == NULL or _f.BackendSetAttribute == NULL
            or _f.BackendFinalize == NULL or _f.BackendDestroyDescriptor == NULL):
        return _C_NOT_INITIALIZED
    st = _f.BackendCreateDescriptor(_C_VARIANT_PACK, &vp)
    if st != 0:
        return st
    st = _f.BackendSetAttribute(vp, _C_UNIQUE_IDS, _C_TYPE_INT64, n, uids)
    if st == 0:
        st = _f.BackendSetAttribute(vp, _C_DATA_POINTERS, _C_TYPE_VOID_PTR, n, pointers)
    if st == 0:
        st = _f.BackendSetAttribute(vp, _C_WORKSPACE, _C_TYPE_VOID_PTR, 1, &workspace)
    if st == 0:
        st = _f.BackendFinalize(vp)
    if st != 0:
        _f.BackendDestroyDescriptor(vp)
        return st
    out[0] = vp
    return 0


_UNBUILT = object()     # StreamPack.lc before it is given one (None is "no launch context")


cdef class PlanLock:
    """The lock of one execution plan's launches (cuDNN does not promise that a plan may
    execute on two streams at once): a context manager for Python, taken in C by
    :class:`GraphLaunch` (no Python call on the submit path)."""

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("PlanLock: cannot allocate a lock")

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)
            self.lock = NULL

    cdef void take(self):
        if not PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self.lock, WAIT_LOCK)

    cdef void give(self):
        PyThread_release_lock(self.lock)

    def __enter__(self):
        self.take()
        return self

    def __exit__(self, *exc):
        self.give()
        return False


cdef int _record(Runtime rt, void* side, void* h, void* plan, void* vp,
                 void** graph) noexcept nogil:
    """One ``cudnnBackendExecute`` captured on ``side`` (``h`` bound to it, thread-local
    mode) into ``*graph``; the first failing status (``*graph`` NULL then)."""
    cdef int st, end_st
    graph[0] = NULL
    st = rt.f.StreamBeginCapture(side, rt.c.STREAM_CAPTURE_MODE_THREAD_LOCAL)
    if st != 0:
        return st
    st = _f.BackendExecute(h, plan, vp)      # recorded, not run
    end_st = rt.c_end_capture(side, graph)   # side is left not capturing, even on failure
    if st == 0:
        return end_st
    if graph[0] != NULL:                     # the execute failed: its graph is no use
        rt.f.GraphDestroy(graph[0])
        graph[0] = NULL
    return st


# streams one GraphLaunch keeps a pack for: queues.MAX_STREAMS, a device's most (a binding
# is of one device; with fewer slots than a device's streams, its round-robin pick would
# evict each pack just before it is needed again, and no execution would reuse one)
cdef enum:
    MAX_STREAM_PACKS = 256


# no_gc_clear: the cyclic GC may otherwise clear ``rt`` (tp_clear) before __dealloc__ runs,
# and the executable graph, which needs rt's GraphExecDestroy, would never be destroyed
@cython.no_gc_clear
cdef class StreamPack:
    """The variant pack of one :class:`GraphLaunch` on one stream, and the CUDA graph
    captured from it (owned: destroyed with it)."""

    def __cinit__(self):
        self.vp = NULL
        self.gexec = NULL
        self.stream = NULL
        self.handle = NULL
        self.lc = _UNBUILT

    cdef bint stale(self) except -1:
        marker = self.marker
        return self.vp == NULL or (marker is not None and marker.workspace_ptr != self.ws_ptr)

    cdef bint capturing(self) noexcept nogil:
        """Whether the pack's stream is being captured (a ``dev.capture()`` block)."""
        return self.rt.c_stream_capturing(self.stream)

    cdef void drop_graph(self) noexcept:
        # launches already enqueued complete (the runtime keeps what they need)
        if self.gexec != NULL and self.rt is not None and self.rt.f.GraphExecDestroy != NULL:
            self.rt.f.GraphExecDestroy(self.gexec)
        self.gexec = NULL

    def __dealloc__(self):
        self.drop_graph()
        if self.vp != NULL and _f.BackendDestroyDescriptor != NULL:
            _f.BackendDestroyDescriptor(self.vp)
        self.vp = NULL


cdef class GraphLaunch:
    """One bound execution of an execution plan: the work-item function the submit path
    reuses while the same buffers come again.

    Calling it executes ``plan`` on the launching stream's cuDNN handle with a variant
    pack built once per stream and kept (a :class:`StreamPack`, for up to
    ``MAX_STREAM_PACKS`` streams: 256, a device's most): it is rebuilt only when that
    stream's workspace moved (``pack.resolve`` is asked then), so launches that
    alternate between a device's streams reuse their packs, a steady-state execution is
    a single ``cudnnBackendExecute`` with the GIL released, and the call itself makes no
    Python call and allocates nothing (the plan's lock is taken in C when it is a
    :class:`PlanLock`).

    With ``graph_after`` > 0, once the same pack has executed ``graph_after`` times on a
    stream of a loaded GPU runtime, the next execution is captured into a CUDA graph (on
    a stream of its own, thread-local mode, the stream's handle bound to it meanwhile:
    no other thread's call can touch that capture) and launched on the stream, and every
    later one is a ``cudaGraphLaunch`` of it: the same kernels with the same pointers
    and plan constants, for ~2 us of host time instead of ``cudnnBackendExecute``'s
    7.6-14 us (cuDNN 9.19 on the H200, docs/design/vendor-notes.md;
    cuDNN's execution plans are capturable, as PyTorch's CUDA graphs rely on). Where the
    capture fails (side stream, begin, execute, end, instantiate or first launch), the
    pack stays on direct executions and the work runs directly, with the runtime's last
    error cleared; while the stream is itself being captured (a ``dev.capture()`` block being
    recorded) the execution is direct, so it is recorded as such. A rebuilt pack (the
    workspace moved) drops its graph.

    Parameters
    ----------
    plan : Descriptor
        A finalized EXECUTION_PLAN.
    uids : sequence of int
        The variant pack's uids (at most 32).
    pack : runtime.PackSpec
        The variant pack's pointers (in uid order), resolved by the caller before the
        launch is handed down, and where the stream-dependent part comes from: on a new
        stream ``pack.resolve(launch_context)`` gives the stream's handle, the pointers,
        the plan's workspace pointer, and the stream resources whose ``workspace_ptr``
        changes when the stream's workspace moves (None when the workspace is the
        caller's own). Runtime code only: nothing is called back above the runtime.
    lock : PlanLock or lock
        Taken around the execution (a plan executes on one stream at a time).
    counter : runtime._gpu.ExecCounter, optional
        Bumped in C after each successful execution with the call's host time
        (``CLOCK_MONOTONIC``): the device's per-pattern ``plan_stats``, kept with no
        Python call on the submit path.
    graph_after : int, optional
        Direct executions of one pack before the next is captured as a CUDA graph; 0
        (the default) never captures. The launch context must carry the stream
        (``.stream``) and its device's ``runtime._gpu.Runtime`` (``.context.runtime``);
        without one there are no graphs.
    label : str, optional
        The plan, as its errors name it (``"plan CONV_FPROP (graph 'conv1', engine
        CUDNN_GRAPH_ENGINE)"``): a failed execution's error message starts with it
        (``HipdnnError.prefixed``, made only on failure). Default "": not named.

    Attributes
    ----------
    executions : int
        Successful executions so far (counted in C, under the plan's lock), graph
        launches included.
    graph_launches : int
        Of those, the ones that were a launch of the captured graph.
    counter : ExecCounter or None

    Raises (when called)
    --------------------
    ExecutionError, NotSupportedError
        cuDNN refused the execution or its variant pack (``CudnnError``), the graph
        launch failed (``GpuError``: ``cudaGraphLaunch``), each named by ``label`` and
        the failing call; or ``pack.resolve``'s (off a GPU stream, a stream not
        prepared for the pack's resources).
    """

    def __init__(self, plan, uids, pack, lock, counter=None, int graph_after=0,
                 str label=""):
        cdef int i
        if not isinstance(plan, Descriptor):   # a value error: the stub test's dummies
            raise ValueError(f"GraphLaunch: plan must be an EXECUTION_PLAN Descriptor; got "
                             f"{type(plan).__name__}")
        if counter is not None and not isinstance(counter, ExecCounter):
            raise ValueError(f"GraphLaunch: counter must be an ExecCounter or None; got "
                             f"{type(counter).__name__}")
        if len(uids) > MAX_PACK:
            raise ValueError(f"GraphLaunch: {len(uids)} uids (at most {MAX_PACK})")
        if not isinstance(pack, _PackSpec):    # data, not a callback into a provider
            raise ValueError(f"GraphLaunch: pack must be a runtime PackSpec; got "
                             f"{type(pack).__name__}")
        if len(pack.pointers) != len(uids):
            raise ValueError(f"GraphLaunch: {len(pack.pointers)} pointers for {len(uids)} uids")
        if graph_after < 0:
            raise ValueError(f"GraphLaunch: graph_after must be >= 0; got {graph_after}")
        self.plan = plan
        self.n = len(uids)
        for i in range(self.n):
            self.uids[i] = uids[i]
        self.pack = pack
        self.lock = lock
        self.plock = lock if isinstance(lock, PlanLock) else None
        self.executions = 0
        self.graph_launches = 0
        self.counter = counter
        self.graph_after = graph_after
        self.packs = {}
        self.last = None
        self.label = label

    cdef object _failed(self, object error):
        """``error`` (a ``HipdnnError``) named by this launch's plan: built on the failure
        path only, so a successful execution pays nothing for it."""
        return error.prefixed(self.label) if self.label else error

    cdef StreamPack _pack(self, object lc):
        """The pack of launch context ``lc``, built (or rebuilt) when needed."""
        cdef StreamPack p = self.last
        if p is None or p.lc is not lc:
            p = self.packs.get(lc)         # LaunchContext: hashed by identity
            if p is None:
                p = StreamPack()
                p.lc = lc
                self._build(p, lc)         # kept only once built (lc may be refused)
                if len(self.packs) >= MAX_STREAM_PACKS:
                    del self.packs[next(iter(self.packs))]     # the oldest
                self.packs[lc] = p
        if p.stale():
            self._build(p, lc)
        self.last = p
        return p

    cdef int _build(self, StreamPack p, object lc) except -1:
        cdef void* ptrs[MAX_PACK]
        cdef void* vp = NULL
        cdef int i, st
        handle, pointers, workspace, marker = self.pack.resolve(lc)
        if len(pointers) != self.n:
            raise ValueError(f"GraphLaunch: {len(pointers)} pointers for {self.n} uids")
        for i in range(self.n):
            ptrs[i] = <void*><uintptr_t>pointers[i]
        st = make_pack(&vp, self.n, self.uids, ptrs, <void*><uintptr_t>workspace)
        if st != 0:
            raise self._failed(error_for("cudnnBackendFinalize (variant pack)", st))
        if p.vp != NULL:
            _f.BackendDestroyDescriptor(p.vp)
        p.vp = vp
        p.handle = <void*><uintptr_t>handle
        p.marker = marker
        p.ws_ptr = marker.workspace_ptr if marker is not None else 0
        p.drop_graph()          # captured with the old pack's pointers
        p.pack_runs = 0
        p.no_graph = False
        rt = getattr(getattr(lc, "context", None), "runtime", None)
        p.rt = rt if self.graph_after > 0 and isinstance(rt, Runtime) else None
        p.stream = <void*><uintptr_t>lc.stream if p.rt is not None else NULL
        return 0

    cdef int _execute(self, object lc) except -1:
        """Execute on ``lc``'s stream (graph launch, capture or direct); the caller holds
        the plan's lock."""
        cdef StreamPack p = self._pack(lc)
        cdef int st
        if p.rt is None:
            return self._direct(p)
        if p.gexec != NULL:
            if p.capturing():
                return self._direct(p)
            # the status, not rt.c_graph_launch, so that the error can name the plan
            # (GraphLaunch is present: _capture made gexec only where it is)
            with nogil:
                st = p.rt.f.GraphLaunch(p.gexec, p.stream)
            if st != 0:
                raise self._failed(p.rt._error(st, "GraphLaunch"))
            self.executions += 1
            self.graph_launches += 1
            return 0
        if not p.no_graph and p.pack_runs >= self.graph_after and not p.capturing():
            return self._capture(p)
        return self._direct(p)

    cdef int _direct(self, StreamPack p) except -1:
        cdef int st
        cdef void* h = p.handle
        cdef void* vp = p.vp
        with nogil:
            st = _f.BackendExecute(h, self.plan.ptr, vp)
        if st != 0:
            raise self._failed(error_for("cudnnBackendExecute", st))
        self.executions += 1
        p.pack_runs += 1
        return 0

    cdef int _capture(self, StreamPack p) except -1:
        """This execution captured into a graph, instantiated and launched on the pack's
        stream; on any failure the pack stays on direct executions and this one runs
        directly.

        The capture is made on a stream of its own (created here, the handle bound to it
        meanwhile; PyTorch's graphs capture on a side stream too): no other thread knows
        that stream, so none of their calls on the pack's stream (a copy's event record
        on every compute stream, ``GpuContext.order_copy_stream``) can join the capture,
        be swallowed by it or invalidate it."""
        cdef RuntimeFns* f = &p.rt.f
        cdef void* graph = NULL
        cdef void* gexec = NULL
        cdef void* side = NULL
        cdef int st, back = 0
        cdef unsigned int flags = p.rt.c.STREAM_NON_BLOCKING
        cdef void* stream = p.stream
        cdef void* h = p.handle
        cdef void* vp = p.vp
        cdef void* plan = self.plan.ptr
        if (f.StreamBeginCapture == NULL or f.StreamEndCapture == NULL
                or f.GraphInstantiateWithFlags == NULL or f.GraphLaunch == NULL
                or f.GraphDestroy == NULL or f.GraphExecDestroy == NULL
                or f.StreamCreateWithFlags == NULL or f.StreamDestroy == NULL
                or _f.SetStream == NULL):
            p.no_graph = True
            return self._direct(p)
        with nogil:
            st = f.StreamCreateWithFlags(&side, flags)    # on the launch's (current) device
            if st == 0:
                st = _f.SetStream(h, side)
                if st == 0:
                    st = _record(p.rt, side, h, plan, vp, &graph)
                    back = _f.SetStream(h, stream)
                # nothing ran on it; kept while the handle may still be bound to it (or
                # while a capture that would not end holds it)
                if back == 0 and not p.rt.c_stream_capturing(side):
                    f.StreamDestroy(side)
            if st == 0 and back == 0:
                st = f.GraphInstantiateWithFlags(&gexec, graph, 0)
            if graph != NULL:
                f.GraphDestroy(graph)
            if st == 0 and back == 0:
                st = f.GraphLaunch(gexec, stream)
                if st != 0:
                    f.GraphExecDestroy(gexec)
            if (st != 0 or back != 0) and f.GetLastError != NULL:
                # leave no error behind for the runtime's next caller (PyTorch checks
                # the last error after its own launches)
                f.GetLastError()
        if back != 0:
            p.no_graph = True
            raise self._failed(error_for(
                f"cudnnSetStream (back to stream {<uintptr_t>stream:#x} after capturing this "
                "plan's execution on a stream of its own)", back))
        if st != 0:
            p.no_graph = True
            return self._direct(p)      # nothing captured ran: the work runs now
        p.gexec = gexec
        self.executions += 1
        self.graph_launches += 1
        return 0

    def __call__(self):
        cdef timespec t0, t1
        clock_gettime(CLOCK_MONOTONIC, &t0)
        lc = launch_current()
        if _f.BackendExecute == NULL:
            _T.missing(b"BackendExecute")
        # under the lock: launches from two streams take turns, and one never destroys
        # the pack (or graph) the other is executing with
        cdef PlanLock plock = self.plock
        if plock is not None:
            plock.take()
            try:
                self._execute(lc)
            finally:
                plock.give()
        else:
            with self.lock:
                self._execute(lc)
        if self.counter is not None:
            clock_gettime(CLOCK_MONOTONIC, &t1)
            self.counter.bump((t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec))
