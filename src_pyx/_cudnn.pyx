# cython: language_level=3, boundscheck=False, wraparound=False
"""cuDNN 9 bindings (``hipdnn_async.runtime._cudnn``), loaded at run time with ``dlopen``.

Wrapping contract
-----------------
Covered: the legacy (non-backend) API the cudnn provider needs: handles, tensor /
filter / convolution / activation / op-tensor descriptors, convolution forward, backward
data and backward filter (heuristic ``_v7`` lists, ``Find...Ex`` benchmarking, workspace
sizes, execution), the fused convolution + bias + activation, batchnorm inference,
training and backward, activation forward/backward and ``OpTensor``. Function names drop
the ``cudnn`` prefix and become snake_case (``convolution_forward``). Signatures follow
``cudnn_{graph,ops,cnn}.h`` of cuDNN 9 (see docs/design/vendor-notes.md); every
function used is exported by ``libcudnn.so.9`` (the shim), so only that library is opened.

The symbol table is a ``_loader.LibraryTable`` (``CudnnTable``, one per process) with one
named pointer per function (``_cudnn.pxd``), filled by name at ``load``. Handles,
descriptors, streams and device pointers travel as Python ints; descriptors are owned by
small ``cdef class`` objects that destroy them on ``close()`` / collection. Scaling
factors (alpha, beta) are host ``float`` values, as cuDNN takes for FLOAT, HALF and
BFLOAT16 data. Calls that launch work run with the GIL released.

Errors: a non-zero ``cudnnStatus_t`` raises the type ``STATUS`` (this binding's status
table) gives: ``CudnnNotSupportedError`` (NOT_SUPPORTED*; in the decline set),
``CudnnBadParamError`` (BAD_PARAM*; a provider reports it at build as a
``NotSupportedError`` with ``.at_build()``), else ``CudnnError``; all are ``CudnnError``,
with ``.status``, ``.status_name``, ``.call``, ``.library`` and cuDNN's last error message.
A symbol the library lacks raises ``LibraryError`` (a ``DeviceError``) naming it at the
first call.

Shared with the backend binding (``_cudnn_backend``, whose table points into the same
library): ``version_of``, ``status_name_of`` and ``last_error_of`` (``_cudnn.pxd``) read the
version and the status texts through either table's pointers, and :func:`status_error` is
the one status-to-error mapping.
"""
from libc.stdint cimport uintptr_t
from libc.string cimport memset

from hipdnn_async import _errors
from hipdnn_async._errors import CudnnError

from ._loader cimport Library, LibraryTable
from ._loader import status_table as _status_table

# cudnnDataType_t, cudnnTensorFormat_t, ... (cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h; cuDNN 9.19.1)
DATA_FLOAT = 0
DATA_HALF = 2
DATA_BFLOAT16 = 9
FORMAT_NCHW = 0
FORMAT_NHWC = 1
CROSS_CORRELATION = 1
DEFAULT_MATH = 0
TENSOR_OP_MATH = 1
FMA_MATH = 3
DETERMINISTIC = 1              # cudnnDeterminism_t
ACTIVATION_RELU = 1
ACTIVATION_CLIPPED_RELU = 3
ACTIVATION_IDENTITY = 5
NOT_PROPAGATE_NAN = 0
OP_TENSOR_ADD = 0
OP_TENSOR_MUL = 1
BATCHNORM_SPATIAL = 1
BATCHNORM_SPATIAL_PERSISTENT = 2   # NHWC fast path (PyTorch uses it for channels-last training)
STATUS_NOT_SUPPORTED = 3000
STATUS_BAD_PARAM = 2000

cdef int _C_BN_SPATIAL = BATCHNORM_SPATIAL   # C copy for the nogil calls

# our bounds: tensor ranks (8 >= every layout we take), the algorithm lists we ask for
cdef enum:
    MAX_DIMS = 8
    MAX_ALGOS = 32

# ------------------------------------------------------------------ the status table
# cudnnStatus_t of cudnn_graph.h, cuDNN 9.x (each name since 9.0.0 unless noted): value ->
# (name, error type), a bare name a CudnnError. A value absent here (a later cuDNN) is a
# CudnnError named by cudnnGetErrorString, or a CudnnNotSupportedError when that name says
# NOT_SUPPORTED.
_NS, _BP = _errors.CudnnNotSupportedError, _errors.CudnnBadParamError
STATUS = _status_table(CudnnError, {
    0: ("CUDNN_STATUS_SUCCESS", None),
    1001: "CUDNN_STATUS_NOT_INITIALIZED",
    1002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
    1003: "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH",
    1004: "CUDNN_STATUS_DEPRECATED",
    1005: "CUDNN_STATUS_LICENSE_ERROR",
    1006: "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
    1007: "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
    1008: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",      # since 9.2.0
    2000: ("CUDNN_STATUS_BAD_PARAM", _BP),
    2001: ("CUDNN_STATUS_INVALID_VALUE", _BP),                        # deprecated alias
    2002: ("CUDNN_STATUS_BAD_PARAM_NULL_POINTER", _BP),
    2003: ("CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER", _BP),
    2004: ("CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED", _BP),
    2005: ("CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND", _BP),
    2006: ("CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT", _BP),
    2007: ("CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH", _BP),
    2008: ("CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH", _BP),
    2009: ("CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES", _BP),
    2010: ("CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE", _BP),
    2011: ("CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH", _BP),        # since 9.5.0
    2012: ("CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE", _BP),            # since 9.6.0
    3000: ("CUDNN_STATUS_NOT_SUPPORTED", _NS),
    3001: ("CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN", _NS),
    3002: ("CUDNN_STATUS_NOT_SUPPORTED_SHAPE", _NS),
    3003: ("CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE", _NS),
    3004: ("CUDNN_STATUS_NOT_SUPPORTED_LAYOUT", _NS),
    3005: ("CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER", _NS),
    3006: ("CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART", _NS),
    3007: ("CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", _NS),
    3008: ("CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING", _NS),
    3009: ("CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE", _NS),
    3010: ("CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT", _NS),
    3011: ("CUDNN_STATUS_NOT_SUPPORTED_PADDING", _NS),
    3012: ("CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM", _NS),
    3013: ("CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API", _NS),   # since 9.5.0
    3014: ("CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE", _NS),   # since 9.18.0
    4000: "CUDNN_STATUS_INTERNAL_ERROR",
    4001: "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED",
    4002: "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE",
    4003: "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    4004: "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
    4005: "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM",
    4006: "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
    5000: "CUDNN_STATUS_EXECUTION_FAILED",
    5001: "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
    5002: "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
    5003: "CUDNN_STATUS_EXECUTION_FAILED_CUDART",
    5004: "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
})
del _NS, _BP

# The convolution calls come in three directions (0 forward, 1 backward data, 2 backward
# filter), named below without the prefix; _per_direction picks the named pointer.
_GET_V7 = (b"GetConvolutionForwardAlgorithm_v7", b"GetConvolutionBackwardDataAlgorithm_v7",
           b"GetConvolutionBackwardFilterAlgorithm_v7")
_FIND_EX = (b"FindConvolutionForwardAlgorithmEx", b"FindConvolutionBackwardDataAlgorithmEx",
            b"FindConvolutionBackwardFilterAlgorithmEx")
_WORKSPACE = (b"GetConvolutionForwardWorkspaceSize", b"GetConvolutionBackwardDataWorkspaceSize",
              b"GetConvolutionBackwardFilterWorkspaceSize")
_CONVOLUTION = (b"ConvolutionForward", b"ConvolutionBackwardData", b"ConvolutionBackwardFilter")


def status_error(str call, int status, str status_name=None, str vendor_message="",
                 str library="libcudnn.so.9"):
    """The typed error of ``status`` returned by cuDNN's ``call``, from :data:`STATUS` (a
    value newer than the table is a ``CudnnNotSupportedError`` when cuDNN's own name for it
    says NOT_SUPPORTED, else a ``CudnnError``). Every cuDNN binding raises through it."""
    family = CudnnError
    if (status not in STATUS and status_name
            and status_name.startswith("CUDNN_STATUS_NOT_SUPPORTED")):
        family = _errors.CudnnNotSupportedError
    return _errors.status_error(STATUS, family, library=library, call=call, status=status,
                                status_name=status_name, vendor_message=vendor_message or "")


cdef class CudnnTable(LibraryTable):
    """The symbol table of ``libcudnn.so.9`` (one per process: ``table()``)."""

    def __init__(self):
        LibraryTable.__init__(self, "cudnn", "cudnn", "cuDNN",
                              ("GetVersion", "Create", "SetStream", "ConvolutionForward"))
        self._version_number = 0

    cdef int _fill(self, Library lib) except -1:
        cdef CudnnFns* f = &self.f
        f.GetVersion = <f_version>lib.sym("GetVersion")
        f.GetErrorString = <f_errstr>lib.sym("GetErrorString")
        f.GetLastErrorString = <f_last_err>lib.sym("GetLastErrorString")
        f.Create = <f_create>lib.sym("Create")
        f.Destroy = <f_destroy>lib.sym("Destroy")
        f.SetStream = <f_set_stream>lib.sym("SetStream")
        f.CreateTensorDescriptor = <f_create>lib.sym("CreateTensorDescriptor")
        f.SetTensorNdDescriptor = <f_set_tensor>lib.sym("SetTensorNdDescriptor")
        f.DestroyTensorDescriptor = <f_destroy>lib.sym("DestroyTensorDescriptor")
        f.CreateFilterDescriptor = <f_create>lib.sym("CreateFilterDescriptor")
        f.SetFilterNdDescriptor = <f_set_filter>lib.sym("SetFilterNdDescriptor")
        f.DestroyFilterDescriptor = <f_destroy>lib.sym("DestroyFilterDescriptor")
        f.CreateConvolutionDescriptor = <f_create>lib.sym("CreateConvolutionDescriptor")
        f.SetConvolutionNdDescriptor = <f_set_conv>lib.sym("SetConvolutionNdDescriptor")
        f.SetConvolutionGroupCount = <f_set_int>lib.sym("SetConvolutionGroupCount")
        f.SetConvolutionMathType = <f_set_int>lib.sym("SetConvolutionMathType")
        f.DestroyConvolutionDescriptor = <f_destroy>lib.sym("DestroyConvolutionDescriptor")
        f.CreateActivationDescriptor = <f_create>lib.sym("CreateActivationDescriptor")
        f.SetActivationDescriptor = <f_set_act>lib.sym("SetActivationDescriptor")
        f.DestroyActivationDescriptor = <f_destroy>lib.sym("DestroyActivationDescriptor")
        f.CreateOpTensorDescriptor = <f_create>lib.sym("CreateOpTensorDescriptor")
        f.SetOpTensorDescriptor = <f_set_op>lib.sym("SetOpTensorDescriptor")
        f.DestroyOpTensorDescriptor = <f_destroy>lib.sym("DestroyOpTensorDescriptor")
        f.GetConvolutionForwardAlgorithmMaxCount = <f_max_count>lib.sym(
            "GetConvolutionForwardAlgorithmMaxCount")
        f.GetConvolutionBackwardDataAlgorithmMaxCount = <f_max_count>lib.sym(
            "GetConvolutionBackwardDataAlgorithmMaxCount")
        f.GetConvolutionBackwardFilterAlgorithmMaxCount = <f_max_count>lib.sym(
            "GetConvolutionBackwardFilterAlgorithmMaxCount")
        f.GetConvolutionForwardAlgorithm_v7 = <f_get_v7>lib.sym(
            "GetConvolutionForwardAlgorithm_v7")
        f.GetConvolutionBackwardDataAlgorithm_v7 = <f_get_v7>lib.sym(
            "GetConvolutionBackwardDataAlgorithm_v7")
        f.GetConvolutionBackwardFilterAlgorithm_v7 = <f_get_v7>lib.sym(
            "GetConvolutionBackwardFilterAlgorithm_v7")
        f.FindConvolutionForwardAlgorithmEx = <f_find_ex>lib.sym(
            "FindConvolutionForwardAlgorithmEx")
        f.FindConvolutionBackwardDataAlgorithmEx = <f_find_ex>lib.sym(
            "FindConvolutionBackwardDataAlgorithmEx")
        f.FindConvolutionBackwardFilterAlgorithmEx = <f_find_ex>lib.sym(
            "FindConvolutionBackwardFilterAlgorithmEx")
        f.GetConvolutionForwardWorkspaceSize = <f_ws_size>lib.sym(
            "GetConvolutionForwardWorkspaceSize")
        f.GetConvolutionBackwardDataWorkspaceSize = <f_ws_size>lib.sym(
            "GetConvolutionBackwardDataWorkspaceSize")
        f.GetConvolutionBackwardFilterWorkspaceSize = <f_ws_size>lib.sym(
            "GetConvolutionBackwardFilterWorkspaceSize")
        f.ConvolutionForward = <f_conv>lib.sym("ConvolutionForward")
        f.ConvolutionBackwardData = <f_conv>lib.sym("ConvolutionBackwardData")
        f.ConvolutionBackwardFilter = <f_conv>lib.sym("ConvolutionBackwardFilter")
        f.ConvolutionBiasActivationForward = <f_cba>lib.sym("ConvolutionBiasActivationForward")
        f.BatchNormalizationForwardInference = <f_bn_inf>lib.sym(
            "BatchNormalizationForwardInference")
        f.BatchNormalizationForwardTraining = <f_bn_train>lib.sym(
            "BatchNormalizationForwardTraining")
        f.BatchNormalizationBackward = <f_bn_bwd>lib.sym("BatchNormalizationBackward")
        f.ActivationForward = <f_act_fwd>lib.sym("ActivationForward")
        f.ActivationBackward = <f_act_bwd>lib.sym("ActivationBackward")
        f.OpTensor = <f_op_tensor>lib.sym("OpTensor")
        f.GetBatchNormalizationForwardTrainingExWorkspaceSize = <f_bn_ex_ws>lib.sym(
            "GetBatchNormalizationForwardTrainingExWorkspaceSize")
        f.GetBatchNormalizationTrainingExReserveSpaceSize = <f_bn_ex_reserve>lib.sym(
            "GetBatchNormalizationTrainingExReserveSpaceSize")
        f.BatchNormalizationForwardTrainingEx = <f_bn_train_ex>lib.sym(
            "BatchNormalizationForwardTrainingEx")
        f.GetBatchNormalizationBackwardExWorkspaceSize = <f_bn_bwd_ex_ws>lib.sym(
            "GetBatchNormalizationBackwardExWorkspaceSize")
        f.BatchNormalizationBackwardEx = <f_bn_bwd_ex>lib.sym("BatchNormalizationBackwardEx")
        self._version_number = version_of(f.GetVersion)
        return 0

    cdef void _clear(self) noexcept:
        memset(&self.f, 0, sizeof(self.f))
        self._version_number = 0

    cdef object _version(self):
        return self._version_number

    cdef object _error(self, int status, str call):
        return status_error(self.prefix + call, status,
                            status_name_of(self.f.GetErrorString, status),
                            last_error_of(self.f.GetLastErrorString),
                            self.lib.path if self.lib is not None else self.name)

    cdef int c_check(self, int status, const char* call) except -1 nogil:
        if status == 0:
            return 0
        with gil:
            raise self._error(status, call.decode())


cdef CudnnTable _T = CudnnTable()
TABLE = _T


# ------------------------------------------------------------------ shared with _cudnn_backend
cdef int version_of(f_version get_version) noexcept nogil:
    """``cudnnGetVersion()`` through a table's pointer (MAJOR*10000 + MINOR*100 + PATCH
    since 9.0), or 0 where the library lacks it."""
    return <int>get_version() if get_version != NULL else 0


cdef str status_name_of(f_errstr get_error_string, int status):
    """cuDNN's name of ``status`` (``cudnnGetErrorString`` through a table's pointer), or
    None where the library lacks the call or names nothing."""
    cdef const char* s
    if get_error_string == NULL:
        return None
    s = get_error_string(status)
    return s.decode(errors="replace") if s != NULL else None


cdef str last_error_of(f_last_err get_last_error_string):
    """cuDNN's last error message of this thread (``cudnnGetLastErrorString`` through a
    table's pointer), or "" where the library lacks the call."""
    cdef char buf[1024]
    if get_last_error_string == NULL:
        return ""
    memset(buf, 0, sizeof(buf))
    get_last_error_string(buf, sizeof(buf) - 1)
    return buf.decode(errors="replace").strip()


cdef CudnnTable table():
    return _T


cdef inline void* _need(void* p, const char* name) except NULL:
    """``p``, or LibraryError naming cudnn<name> and the library (not loaded / not exported)."""
    if p == NULL:
        _T.missing(name)
    return p


cdef inline int _check(int status, const char* name) except -1:
    return _T.c_check(status, name)


cdef const char* _per_direction(tuple names, int direction) except NULL:
    if not 0 <= direction <= 2:
        raise ValueError(f"direction must be 0 (forward), 1 (backward data) or 2 (backward "
                         f"filter); got {direction}")
    return names[direction]


cdef void* _get_v7_fn(int direction) noexcept:
    if direction == 0:
        return <void*>_T.f.GetConvolutionForwardAlgorithm_v7
    if direction == 1:
        return <void*>_T.f.GetConvolutionBackwardDataAlgorithm_v7
    return <void*>_T.f.GetConvolutionBackwardFilterAlgorithm_v7


cdef void* _find_ex_fn(int direction) noexcept:
    if direction == 0:
        return <void*>_T.f.FindConvolutionForwardAlgorithmEx
    if direction == 1:
        return <void*>_T.f.FindConvolutionBackwardDataAlgorithmEx
    return <void*>_T.f.FindConvolutionBackwardFilterAlgorithmEx


cdef void* _workspace_fn(int direction) noexcept:
    if direction == 0:
        return <void*>_T.f.GetConvolutionForwardWorkspaceSize
    if direction == 1:
        return <void*>_T.f.GetConvolutionBackwardDataWorkspaceSize
    return <void*>_T.f.GetConvolutionBackwardFilterWorkspaceSize


cdef void* _convolution_fn(int direction) noexcept:
    if direction == 0:
        return <void*>_T.f.ConvolutionForward
    if direction == 1:
        return <void*>_T.f.ConvolutionBackwardData
    return <void*>_T.f.ConvolutionBackwardFilter


def load(str path, str found_via="explicit"):
    """Load cuDNN from ``path`` (absolute path or soname) into the table; idempotent.

    Returns
    -------
    LoadRecord
        ``version`` is ``cudnnGetVersion()``.

    Raises
    ------
    LibraryError
        ``dlopen`` failed, or the library lacks cudnnGetVersion, cudnnCreate,
        cudnnSetStream or cudnnConvolutionForward (it is not cuDNN).
    """
    return _T.load(path, found_via)


def loaded():
    """The ``LoadRecord`` of the loaded library, or None."""
    return _T.record


def version():
    """cudnnGetVersion(): MAJOR*10000 + MINOR*100 + PATCH since 9.0."""
    return int((<f_version>_need(_T.f.GetVersion, b"GetVersion"))())


# ------------------------------------------------------------------ handles
def create():
    """A new cuDNN handle on the current device (call once per stream, not per call)."""
    cdef void* h = NULL
    _check((<f_create>_need(_T.f.Create, b"Create"))(&h), b"Create")
    return <uintptr_t>h


def destroy(uintptr_t handle):
    """Destroy a handle (cuDNN synchronizes the device here)."""
    cdef f_destroy f = <f_destroy>_need(_T.f.Destroy, b"Destroy")
    cdef int st
    with nogil:
        st = f(<void*>handle)
    _check(st, b"Destroy")


def set_stream(uintptr_t handle, uintptr_t stream):
    """Bind ``handle`` to ``stream`` for all later calls."""
    _check((<f_set_stream>_need(_T.f.SetStream, b"SetStream"))(<void*>handle, <void*>stream),
           b"SetStream")


# ------------------------------------------------------------------ descriptors
cdef int _fill_ints(int* out, values, what) except -1:
    if len(values) > MAX_DIMS:
        raise ValueError(f"{what}: at most {MAX_DIMS} values; got {len(values)}")
    for i, v in enumerate(values):
        out[i] = int(v)
    return 0


cdef class _Descriptor:
    """Owns one cuDNN descriptor; ``ptr`` is its handle as an int."""
    cdef void* _d
    cdef f_destroy _destroy

    @property
    def ptr(self):
        return <uintptr_t>self._d

    def close(self):
        """Destroy the descriptor; idempotent."""
        if self._d != NULL and self._destroy != NULL:
            self._destroy(self._d)
        self._d = NULL

    def __dealloc__(self):
        self.close()


cdef class TensorDescriptor(_Descriptor):
    """``cudnnSetTensorNdDescriptor(dtype, dims, strides)``: 4 or 5 dims, element strides."""

    def __init__(self, int dtype, dims, strides):
        cdef int d[MAX_DIMS]
        cdef int s[MAX_DIMS]
        _fill_ints(d, dims, "tensor dims")
        _fill_ints(s, strides, "tensor strides")
        _check((<f_create>_need(_T.f.CreateTensorDescriptor, b"CreateTensorDescriptor"))(&self._d),
               b"CreateTensorDescriptor")
        self._destroy = _T.f.DestroyTensorDescriptor
        _check((<f_set_tensor>_need(_T.f.SetTensorNdDescriptor, b"SetTensorNdDescriptor"))(
            self._d, dtype, len(dims), d, s), b"SetTensorNdDescriptor")


cdef class FilterDescriptor(_Descriptor):
    """``cudnnSetFilterNdDescriptor(dtype, format, dims)``: dims K, C/groups, [T,] R, S."""

    def __init__(self, int dtype, int fmt, dims):
        cdef int d[MAX_DIMS]
        _fill_ints(d, dims, "filter dims")
        _check((<f_create>_need(_T.f.CreateFilterDescriptor, b"CreateFilterDescriptor"))(&self._d),
               b"CreateFilterDescriptor")
        self._destroy = _T.f.DestroyFilterDescriptor
        _check((<f_set_filter>_need(_T.f.SetFilterNdDescriptor, b"SetFilterNdDescriptor"))(
            self._d, dtype, fmt, len(dims), d), b"SetFilterNdDescriptor")


cdef class ConvolutionDescriptor(_Descriptor):
    """Cross-correlation with per-spatial-dim padding, stride and dilation, ``groups``,
    compute type and math type."""

    def __init__(self, padding, stride, dilation, int groups, int compute_type, int math_type):
        cdef int p[MAX_DIMS]
        cdef int s[MAX_DIMS]
        cdef int dl[MAX_DIMS]
        _fill_ints(p, padding, "padding")
        _fill_ints(s, stride, "stride")
        _fill_ints(dl, dilation, "dilation")
        _check((<f_create>_need(_T.f.CreateConvolutionDescriptor,
                                b"CreateConvolutionDescriptor"))(&self._d),
               b"CreateConvolutionDescriptor")
        self._destroy = _T.f.DestroyConvolutionDescriptor
        _check((<f_set_conv>_need(_T.f.SetConvolutionNdDescriptor, b"SetConvolutionNdDescriptor"))(
            self._d, len(padding), p, s, dl, CROSS_CORRELATION, compute_type),
            b"SetConvolutionNdDescriptor")
        if groups != 1:
            _check((<f_set_int>_need(_T.f.SetConvolutionGroupCount, b"SetConvolutionGroupCount"))(
                self._d, groups), b"SetConvolutionGroupCount")
        self.set_math_type(math_type)

    def set_math_type(self, int math_type):
        _check((<f_set_int>_need(_T.f.SetConvolutionMathType, b"SetConvolutionMathType"))(
            self._d, math_type), b"SetConvolutionMathType")


cdef class ActivationDescriptor(_Descriptor):
    """``cudnnSetActivationDescriptor(mode, NOT_PROPAGATE_NAN, coef)``."""

    def __init__(self, int mode, double coef=0.0):
        _check((<f_create>_need(_T.f.CreateActivationDescriptor, b"CreateActivationDescriptor"))(
            &self._d), b"CreateActivationDescriptor")
        self._destroy = _T.f.DestroyActivationDescriptor
        _check((<f_set_act>_need(_T.f.SetActivationDescriptor, b"SetActivationDescriptor"))(
            self._d, mode, NOT_PROPAGATE_NAN, coef), b"SetActivationDescriptor")


cdef class OpTensorDescriptor(_Descriptor):
    """``cudnnSetOpTensorDescriptor(op, FLOAT compute, NOT_PROPAGATE_NAN)``."""

    def __init__(self, int op):
        _check((<f_create>_need(_T.f.CreateOpTensorDescriptor, b"CreateOpTensorDescriptor"))(
            &self._d), b"CreateOpTensorDescriptor")
        self._destroy = _T.f.DestroyOpTensorDescriptor
        _check((<f_set_op>_need(_T.f.SetOpTensorDescriptor, b"SetOpTensorDescriptor"))(
            self._d, op, DATA_FLOAT, NOT_PROPAGATE_NAN), b"SetOpTensorDescriptor")


# ------------------------------------------------------------------ convolution: algorithms
# direction: 0 forward, 1 backward data, 2 backward filter. Descriptor order per direction
# is the C API's: fwd (x, w, conv, y); dgrad (w, dy, conv, dx); wgrad (x, dy, conv, dw).

cdef list _perf_list(AlgoPerf* perf, int n):
    return [(perf[i].algo, perf[i].status, perf[i].time, perf[i].memory,
             perf[i].determinism, perf[i].mathType) for i in range(n)]


def get_algorithms(int direction, uintptr_t handle, uintptr_t a, uintptr_t b,
                   uintptr_t conv, uintptr_t c):
    """The ``_v7`` heuristic list: [(algo, status, time_ms, memory_bytes, determinism,
    math_type)], best first (no execution)."""
    cdef AlgoPerf perf[MAX_ALGOS]
    cdef int n = 0
    cdef const char* name = _per_direction(_GET_V7, direction)
    cdef f_get_v7 f = <f_get_v7>_need(_get_v7_fn(direction), name)
    memset(perf, 0, sizeof(perf))
    _check(f(<void*>handle, <void*>a, <void*>b, <void*>conv, <void*>c, MAX_ALGOS, &n, perf), name)
    return _perf_list(perf, n)


def find_algorithms(int direction, uintptr_t handle, uintptr_t ad, uintptr_t a,
                    uintptr_t bd, uintptr_t b, uintptr_t conv, uintptr_t cd, uintptr_t c,
                    uintptr_t workspace, size_t workspace_size):
    """``Find...AlgorithmEx``: runs every algorithm on the given buffers (``c`` is
    overwritten), sorted by measured time; same tuple layout as :func:`get_algorithms`."""
    cdef AlgoPerf perf[MAX_ALGOS]
    cdef int n = 0
    cdef int st
    cdef const char* name = _per_direction(_FIND_EX, direction)
    cdef f_find_ex f = <f_find_ex>_need(_find_ex_fn(direction), name)
    memset(perf, 0, sizeof(perf))
    with nogil:
        st = f(<void*>handle, <void*>ad, <const void*>a, <void*>bd, <const void*>b,
               <void*>conv, <void*>cd, <void*>c, MAX_ALGOS, &n, perf,
               <void*>workspace, workspace_size)
    _check(st, name)
    return _perf_list(perf, n)


def workspace_size(int direction, uintptr_t handle, uintptr_t a, uintptr_t b,
                   uintptr_t conv, uintptr_t c, int algo):
    """Workspace bytes ``algo`` needs; raises CudnnNotSupportedError if inapplicable."""
    cdef size_t n = 0
    cdef const char* name = _per_direction(_WORKSPACE, direction)
    cdef f_ws_size f = <f_ws_size>_need(_workspace_fn(direction), name)
    _check(f(<void*>handle, <void*>a, <void*>b, <void*>conv, <void*>c, algo, &n), name)
    return n


def convolution(int direction, uintptr_t handle, uintptr_t ad, uintptr_t a, uintptr_t bd,
                uintptr_t b, uintptr_t conv, int algo, uintptr_t workspace,
                size_t workspace_size, uintptr_t cd, uintptr_t c, float alpha=1.0,
                float beta=0.0):
    """Run one convolution: fwd (x, w -> y), dgrad (w, dy -> dx), wgrad (x, dy -> dw)."""
    cdef const char* name = _per_direction(_CONVOLUTION, direction)
    cdef f_conv f = <f_conv>_need(_convolution_fn(direction), name)
    cdef int st
    with nogil:
        st = f(<void*>handle, &alpha, <void*>ad, <const void*>a, <void*>bd, <const void*>b,
               <void*>conv, algo, <void*>workspace, workspace_size, &beta, <void*>cd, <void*>c)
    _check(st, name)


def convolution_bias_activation_forward(
        uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t wd, uintptr_t w,
        uintptr_t conv, int algo, uintptr_t workspace, size_t workspace_size,
        uintptr_t bias_d, uintptr_t bias, uintptr_t act, uintptr_t yd, uintptr_t y):
    """y = act(conv(x, w) + bias), with z = y and alpha2 = 0 (no residual)."""
    cdef float alpha1 = 1.0
    cdef float alpha2 = 0.0
    cdef f_cba f = <f_cba>_need(_T.f.ConvolutionBiasActivationForward,
                                b"ConvolutionBiasActivationForward")
    cdef int st
    with nogil:
        st = f(<void*>handle, &alpha1, <void*>xd, <const void*>x, <void*>wd, <const void*>w,
               <void*>conv, algo, <void*>workspace, workspace_size, &alpha2, <void*>yd,
               <const void*>y, <void*>bias_d, <const void*>bias, <void*>act, <void*>yd,
               <void*>y)
    _check(st, b"ConvolutionBiasActivationForward")


# ------------------------------------------------------------------ batchnorm (SPATIAL)
def batchnorm_forward_inference(uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t yd,
                                uintptr_t y, uintptr_t bnd, uintptr_t scale, uintptr_t bias,
                                uintptr_t mean, uintptr_t variance, double epsilon):
    """y = scale * (x - mean) / sqrt(variance + epsilon) + bias, per channel."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_inf f = <f_bn_inf>_need(_T.f.BatchNormalizationForwardInference,
                                      b"BatchNormalizationForwardInference")
    cdef int st
    with nogil:
        st = f(<void*>handle, _C_BN_SPATIAL, &one, &zero, <void*>xd, <const void*>x,
               <void*>yd, <void*>y, <void*>bnd, <const void*>scale, <const void*>bias,
               <const void*>mean, <const void*>variance, epsilon)
    _check(st, b"BatchNormalizationForwardInference")


def batchnorm_forward_training(uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t yd,
                               uintptr_t y, uintptr_t bnd, uintptr_t scale, uintptr_t bias,
                               double factor, uintptr_t running_mean,
                               uintptr_t running_variance, double epsilon,
                               uintptr_t save_mean, uintptr_t save_inv_variance,
                               int mode=BATCHNORM_SPATIAL):
    """Batch statistics, normalised y, optional running-stat update (0 pointers: none)
    ``running = batch * factor + running * (1 - factor)`` with the unbiased variance.
    ``mode``: BATCHNORM_SPATIAL or BATCHNORM_SPATIAL_PERSISTENT."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_train f = <f_bn_train>_need(_T.f.BatchNormalizationForwardTraining,
                                          b"BatchNormalizationForwardTraining")
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, &one, &zero, <void*>xd, <const void*>x,
               <void*>yd, <void*>y, <void*>bnd, <const void*>scale, <const void*>bias,
               factor, <void*>running_mean, <void*>running_variance, epsilon,
               <void*>save_mean, <void*>save_inv_variance)
    _check(st, b"BatchNormalizationForwardTraining")


def batchnorm_backward(uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t dyd,
                       uintptr_t dy, uintptr_t dxd, uintptr_t dx, uintptr_t bnd,
                       uintptr_t scale, uintptr_t dscale, uintptr_t dbias, double epsilon,
                       uintptr_t saved_mean, uintptr_t saved_inv_variance,
                       int mode=BATCHNORM_SPATIAL):
    """dx, dscale, dbias from x, dy and the saved mean / inv_variance (``mode`` as in
    :func:`batchnorm_forward_training`)."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_bwd f = <f_bn_bwd>_need(_T.f.BatchNormalizationBackward,
                                      b"BatchNormalizationBackward")
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, &one, &zero, &one, &zero, <void*>xd,
               <const void*>x, <void*>dyd, <const void*>dy, <void*>dxd, <void*>dx,
               <void*>bnd, <const void*>scale, <void*>dscale, <void*>dbias, epsilon,
               <const void*>saved_mean, <const void*>saved_inv_variance)
    _check(st, b"BatchNormalizationBackward")


# ------------------------------------------------------------------ pointwise
def activation_forward(uintptr_t handle, uintptr_t act, uintptr_t xd, uintptr_t x,
                       uintptr_t yd, uintptr_t y):
    """y = act(x) (in place when x == y)."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_act_fwd f = <f_act_fwd>_need(_T.f.ActivationForward, b"ActivationForward")
    cdef int st
    with nogil:
        st = f(<void*>handle, <void*>act, &one, <void*>xd, <const void*>x, &zero,
               <void*>yd, <void*>y)
    _check(st, b"ActivationForward")


def activation_backward(uintptr_t handle, uintptr_t act, uintptr_t yd, uintptr_t y,
                        uintptr_t dyd, uintptr_t dy, uintptr_t xd, uintptr_t x,
                        uintptr_t dxd, uintptr_t dx):
    """dx = act'(x) * dy."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_act_bwd f = <f_act_bwd>_need(_T.f.ActivationBackward, b"ActivationBackward")
    cdef int st
    with nogil:
        st = f(<void*>handle, <void*>act, &one, <void*>yd, <const void*>y, <void*>dyd,
               <const void*>dy, <void*>xd, <const void*>x, &zero, <void*>dxd, <void*>dx)
    _check(st, b"ActivationBackward")


def op_tensor(uintptr_t handle, uintptr_t op, float alpha1, uintptr_t ad, uintptr_t a,
              float alpha2, uintptr_t bd, uintptr_t b, uintptr_t cd, uintptr_t c):
    """C = op(alpha1 * A, alpha2 * B) (B broadcast over dims of size 1)."""
    cdef float zero = 0.0
    cdef f_op_tensor f = <f_op_tensor>_need(_T.f.OpTensor, b"OpTensor")
    cdef int st
    with nogil:
        st = f(<void*>handle, <void*>op, &alpha1, <void*>ad, <const void*>a, &alpha2,
               <void*>bd, <const void*>b, &zero, <void*>cd, <void*>c)
    _check(st, b"OpTensor")


# ------------------------------------------------------------------ batchnorm Ex (NHWC fast path)
# cudnnBatchNormOps_t (cudnn_ops.h, cuDNN 9.19.1)
BN_OPS_BN = 0
BN_OPS_BN_ACTIVATION = 1


def batchnorm_training_ex_sizes(uintptr_t handle, int mode, int bn_ops, uintptr_t xd,
                                uintptr_t yd, uintptr_t bnd, uintptr_t act):
    """(workspace bytes, reserve-space bytes) of ``batchnorm_forward_training_ex``."""
    cdef size_t ws = 0, reserve = 0
    cdef f_bn_ex_ws fw = <f_bn_ex_ws>_need(
        _T.f.GetBatchNormalizationForwardTrainingExWorkspaceSize,
        b"GetBatchNormalizationForwardTrainingExWorkspaceSize")
    cdef f_bn_ex_reserve fr = <f_bn_ex_reserve>_need(
        _T.f.GetBatchNormalizationTrainingExReserveSpaceSize,
        b"GetBatchNormalizationTrainingExReserveSpaceSize")
    _check(fw(<void*>handle, mode, bn_ops, <void*>xd, NULL, <void*>yd, <void*>bnd, <void*>act,
              &ws), b"GetBatchNormalizationForwardTrainingExWorkspaceSize")
    _check(fr(<void*>handle, mode, bn_ops, <void*>act, <void*>xd, &reserve),
           b"GetBatchNormalizationTrainingExReserveSpaceSize")
    return ws, reserve


def batchnorm_forward_training_ex(
        uintptr_t handle, int mode, int bn_ops, uintptr_t xd, uintptr_t x, uintptr_t yd,
        uintptr_t y, uintptr_t bnd, uintptr_t scale, uintptr_t bias, double factor,
        uintptr_t running_mean, uintptr_t running_variance, double epsilon,
        uintptr_t save_mean, uintptr_t save_inv_variance, uintptr_t act,
        uintptr_t workspace, size_t workspace_size, uintptr_t reserve, size_t reserve_size):
    """``cudnnBatchNormalizationForwardTrainingEx`` without a residual (z): bn_ops BN or
    BN_ACTIVATION (ReLU fused; cuDNN takes it with SPATIAL_PERSISTENT and channels-last)."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_train_ex f = <f_bn_train_ex>_need(_T.f.BatchNormalizationForwardTrainingEx,
                                                b"BatchNormalizationForwardTrainingEx")
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, bn_ops, &one, &zero, <void*>xd, <const void*>x, NULL, NULL,
               <void*>yd, <void*>y, <void*>bnd, <const void*>scale, <const void*>bias, factor,
               <void*>running_mean, <void*>running_variance, epsilon, <void*>save_mean,
               <void*>save_inv_variance, <void*>act, <void*>workspace, workspace_size,
               <void*>reserve, reserve_size)
    _check(st, b"BatchNormalizationForwardTrainingEx")


def batchnorm_backward_ex_sizes(uintptr_t handle, int mode, uintptr_t xd, uintptr_t dyd,
                                uintptr_t dxd, uintptr_t bnd):
    """(workspace bytes, reserve-space bytes) of :func:`batchnorm_backward_ex` (bn_ops BN:
    no y, z, dz or activation). The reserve space is what a TrainingEx call of the same
    mode and x would write; a backward plan of its own has none to give."""
    cdef size_t ws = 0, reserve = 0
    cdef int ops = BN_OPS_BN
    cdef f_bn_bwd_ex_ws fw = <f_bn_bwd_ex_ws>_need(
        _T.f.GetBatchNormalizationBackwardExWorkspaceSize,
        b"GetBatchNormalizationBackwardExWorkspaceSize")
    cdef f_bn_ex_reserve fr = <f_bn_ex_reserve>_need(
        _T.f.GetBatchNormalizationTrainingExReserveSpaceSize,
        b"GetBatchNormalizationTrainingExReserveSpaceSize")
    _check(fw(<void*>handle, mode, ops, <void*>xd, NULL, <void*>dyd, NULL, <void*>dxd,
              <void*>bnd, NULL, &ws), b"GetBatchNormalizationBackwardExWorkspaceSize")
    _check(fr(<void*>handle, mode, ops, NULL, <void*>xd, &reserve),
           b"GetBatchNormalizationTrainingExReserveSpaceSize")
    return ws, reserve


def batchnorm_backward_ex(uintptr_t handle, int mode, uintptr_t xd, uintptr_t x,
                          uintptr_t dyd, uintptr_t dy, uintptr_t dxd, uintptr_t dx,
                          uintptr_t bnd, uintptr_t scale, uintptr_t dscale, uintptr_t dbias,
                          double epsilon, uintptr_t saved_mean,
                          uintptr_t saved_inv_variance, uintptr_t workspace,
                          size_t workspace_size):
    """``cudnnBatchNormalizationBackwardEx`` with bn_ops BN (no activation, no residual,
    no reserve space): dx, dscale, dbias from x, dy and the saved statistics. The
    channels-last fast path (SPATIAL_PERSISTENT), as PyTorch's channels-last backward."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef int ops = BN_OPS_BN
    cdef f_bn_bwd_ex f = <f_bn_bwd_ex>_need(_T.f.BatchNormalizationBackwardEx,
                                            b"BatchNormalizationBackwardEx")
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, ops, &one, &zero, &one, &zero, <void*>xd,
               <const void*>x, NULL, NULL, <void*>dyd, <const void*>dy, NULL, NULL,
               <void*>dxd, <void*>dx, <void*>bnd, <const void*>scale, NULL,
               <void*>dscale, <void*>dbias, epsilon, <const void*>saved_mean,
               <const void*>saved_inv_variance, NULL, <void*>workspace, workspace_size,
               NULL, 0)
    _check(st, b"BatchNormalizationBackwardEx")
