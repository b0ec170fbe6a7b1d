# cython: language_level=3, boundscheck=False, wraparound=False
"""MIOpen bindings (``hipdnn_async.runtime._miopen``), loaded at run time with ``dlopen``
through the shared loader (``runtime._loader``); no SDK header is needed to build.

Wrapping contract
-----------------
Covered: what the MIOpen provider needs (providers/miopen): handles bound to HIP streams,
tensor / convolution / activation descriptors, immediate-mode convolution (solution lists,
workspace sizes, compile, run) in the three directions, Find 2.0 (``miopenFindSolutions``
with tuning and a workspace limit, read back as solver ids), conv + bias + activation
fusion plans, batchnorm through the ``_V2`` calls, the fused batchnorm ``*Activation``
calls, activation forward / backward, ``miopenConvolutionForwardBias``, ``miopenOpTensor``
and the handle's tuning policy. Function names drop the ``miopen`` prefix and become
snake_case (``conv_immediate`` for ``miopenConvolution*Immediate``).

Versions: every declaration (``_miopen.pxd``) and constant below was matched against
``miopen/miopen.h`` of MIOpen 3.4.0 (ROCm 6.4.3) and 3.5.1 (ROCm 7.2.4). Entry points only
3.5.1 exports (``miopenExecuteFusionPlan_v2``, ``miopenBatchNorm{ForwardTraining,
ForwardInference,Backward}Activation``, ``miopen{Get,Set}TuningPolicy``) and the constant
``ACTIVATION_CLAMP`` are looked up / used only when present: :func:`has` says which, and
calling an absent one is a ``LibraryError`` naming it. ``MIN_VERSION`` is the oldest MIOpen
the provider takes (the ``_V2`` batchnorm calls are from 3.3; 3.4.0 is the oldest header
checked).

Handles, descriptors, streams and device pointers travel as Python ints; descriptors are
owned by small ``cdef class`` objects that destroy them on ``close()`` / collection.
Scaling factors (alpha, beta) are host ``float`` values, as MIOpen takes for FLOAT, HALF
and BFLOAT16 data. Calls that compile, search or launch work run with the GIL released.

Errors: a status other than ``miopenStatusSuccess`` (and ``miopenStatusGpuOperationsSkipped``,
which miopen.h says is not an error) raises the type the status table (``STATUS``) names,
built by ``_errors.status_error``: ``MiopenNotSupportedError`` (NotImplemented,
UnsupportedOp: in the decline set), ``MiopenBadParamError`` (BadParm, InvalidValue: a
``NotSupportedError`` naming the call when raised at build), ``MiopenError`` otherwise;
``.call`` is the C function, ``.status`` / ``.status_name`` the status.
"""
from libc.stdint cimport uint64_t, uintptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

from hipdnn_async import _errors

from ._loader cimport Library, LibraryTable
from ._loader import status_table as _status_table

__all__ = ["Miopen", "TABLE", "STATUS", "NAMES", "OPTIONAL", "MIN_VERSION", "load", "loaded",
           "version", "has", "create_with_stream", "destroy", "set_stream", "get_stream",
           "get_tuning_policy", "set_tuning_policy", "TensorDescriptor",
           "ConvolutionDescriptor", "ActivationDescriptor", "conv_solutions",
           "conv_solution_workspace", "conv_compile", "conv_immediate", "find_solutions",
           "solver_algorithm", "FusionPlan", "OperatorArgs", "execute_fusion",
           "bn_forward_inference", "bn_forward_training", "bn_backward",
           "activation_forward", "activation_backward", "conv_forward_bias", "op_tensor",
           "n_slots"]

# ------------------------------------------------------------------ constants
# miopen.h, MIOpen 3.4.0 and 3.5.1 (identical in both unless marked); tests/contract/hip
# checks every one of them against both headers.
STATUS_SUCCESS = 0                     # miopenStatus_t
STATUS_NOT_INITIALIZED = 1
STATUS_INVALID_VALUE = 2
STATUS_BAD_PARM = 3
STATUS_ALLOC_FAILED = 4
STATUS_INTERNAL_ERROR = 5
STATUS_NOT_IMPLEMENTED = 6
STATUS_UNKNOWN_ERROR = 7
STATUS_UNSUPPORTED_OP = 8
STATUS_GPU_OPERATIONS_SKIPPED = 9      # "This is not an error."
STATUS_VERSION_MISMATCH = 10
DATA_HALF = 0                          # miopenDataType_t
DATA_FLOAT = 1
DATA_BFLOAT16 = 5
CONVOLUTION = 0                        # miopenConvolutionMode_t: miopenConvolution (cross-correlation)
CONV_ATTRIB_DETERMINISTIC = 1          # miopenConvolutionAttrib_t: MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC
ALGO_GEMM = 0                          # miopenConvAlgorithm_t
ALGO_DIRECT = 1
ALGO_FFT = 2
ALGO_WINOGRAD = 3
ALGO_IMPLICIT_GEMM = 5
CONV_FWD_ALGO_DIRECT = 1               # miopenConvFwdAlgorithm_t: miopenConvolutionFwdAlgoDirect
PROBLEM_FORWARD = 0                    # miopenProblemDirection_t
PROBLEM_BACKWARD = 1                   # backward data (dgrad)
PROBLEM_BACKWARD_WEIGHTS = 2
TENSOR_CONV_X = 1                      # miopenTensorArgumentId_t: miopenTensorConvolutionX
TENSOR_CONV_W = 2
TENSOR_CONV_Y = 3
RESULTS_ORDER_BY_TIME = 0              # miopenFindResultsOrder_t
VERTICAL_FUSION = 0                    # miopenFusionDirection_t: miopenVerticalFusion
ACTIVATION_PASTHRU = 0                 # miopenActivationMode_t
ACTIVATION_RELU = 3
ACTIVATION_CLIPPEDRELU = 7             # max(0, min(alpha, x))
ACTIVATION_CLAMP = 10                  # max(alpha, min(beta, x)); MIOpen 3.5.1 only
BN_SPATIAL = 1                         # miopenBatchNormMode_t: miopenBNSpatial
TENSOR_OP_ADD = 0                      # miopenTensorOp_t
TENSOR_OP_MUL = 1
TUNING_POLICY_NONE = 1                 # miopenTuningPolicy_t (MIOpen 3.5.1 only)
TUNING_POLICY_SEARCH = 3

# constants a header version lacks: name -> first MIOpen version that declares it
SINCE = {"ACTIVATION_CLAMP": (3, 5, 0), "TUNING_POLICY_NONE": (3, 5, 0),
         "TUNING_POLICY_SEARCH": (3, 5, 0)}

MIN_VERSION = (3, 4, 0)

# Convolution directions of the immediate-mode family, in our numbering (= the Find 2.0
# miopenProblemDirection_t values of miopen.h, MIOpen 3.4.0 and 3.5.1): 0 forward, 1 backward
# data, 2 backward weights.
FORWARD, BACKWARD_DATA, BACKWARD_WEIGHTS = 0, 1, 2

# ------------------------------------------------------------------ the symbol table
# In MiopenFns field order (a test checks it against the .pxd); looked up as "miopen" + name.
NAMES = (
    "GetVersion", "GetErrorString", "Create", "CreateWithStream", "Destroy", "SetStream",
    "GetStream", "SetTuningPolicy", "GetTuningPolicy",
    "CreateTensorDescriptor", "SetTensorDescriptor", "DestroyTensorDescriptor",
    "CreateConvolutionDescriptor", "InitConvolutionNdDescriptor", "SetConvolutionGroupCount",
    "SetConvolutionAttribute", "DestroyConvolutionDescriptor",
    "ConvolutionForwardGetSolutionCount", "ConvolutionForwardGetSolution",
    "ConvolutionForwardGetSolutionWorkspaceSize", "ConvolutionForwardCompileSolution",
    "ConvolutionForwardImmediate",
    "ConvolutionBackwardDataGetSolutionCount", "ConvolutionBackwardDataGetSolution",
    "ConvolutionBackwardDataGetSolutionWorkspaceSize", "ConvolutionBackwardDataCompileSolution",
    "ConvolutionBackwardDataImmediate",
    "ConvolutionBackwardWeightsGetSolutionCount", "ConvolutionBackwardWeightsGetSolution",
    "ConvolutionBackwardWeightsGetSolutionWorkspaceSize",
    "ConvolutionBackwardWeightsCompileSolution", "ConvolutionBackwardWeightsImmediate",
    "CreateConvProblem", "SetProblemTensorDescriptor", "DestroyProblem", "CreateFindOptions",
    "DestroyFindOptions", "SetFindOptionTuning", "SetFindOptionWorkspaceLimit",
    "SetFindOptionResultsOrder", "SetFindOptionPreallocatedWorkspace",
    "SetFindOptionPreallocatedTensor", "FindSolutions", "GetSolutionWorkspaceSize",
    "GetSolutionTime", "GetSolutionSolverId", "GetSolverIdConvAlgorithm", "DestroySolution",
    "CreateActivationDescriptor", "SetActivationDescriptor", "DestroyActivationDescriptor",
    "ActivationForward", "ActivationBackward", "ConvolutionForwardBias", "OpTensor",
    "CreateFusionPlan", "DestroyFusionPlan", "CreateOpConvForward", "CreateOpBiasForward",
    "CreateOpActivationForward", "CompileFusionPlan", "FusionPlanGetWorkSpaceSize",
    "FusionPlanConvolutionGetAlgo", "CreateOperatorArgs", "DestroyOperatorArgs",
    "SetOpArgsConvForward", "SetOpArgsBiasForward", "SetOpArgsActivForward",
    "ExecuteFusionPlan", "ExecuteFusionPlan_v2",
    "BatchNormalizationForwardInference_V2", "BatchNormalizationForwardTraining_V2",
    "BatchNormalizationBackward_V2", "BatchNormForwardInferenceActivation",
    "BatchNormForwardTrainingActivation", "BatchNormBackwardActivation",
)
# Looked up by name and used only when present: name -> the first MIOpen that exports it
# (3.5.1's header declares them, 3.4.0's does not; 3.5.0 is ROCm 7.0's first MIOpen 3.5).
OPTIONAL = {"SetTuningPolicy": (3, 5, 0), "GetTuningPolicy": (3, 5, 0),
            "ExecuteFusionPlan_v2": (3, 5, 0), "BatchNormForwardInferenceActivation": (3, 5, 0),
            "BatchNormForwardTrainingActivation": (3, 5, 0),
            "BatchNormBackwardActivation": (3, 5, 0)}
_REQUIRED = ("GetVersion", "GetErrorString", "Create", "CreateWithStream", "Destroy",
             "SetStream", "CreateTensorDescriptor", "SetTensorDescriptor",
             "ConvolutionForwardImmediate", "BatchNormalizationForwardInference_V2")

# miopenStatus_t -> (name, error type); 0 and 9 are not failures
_BP, _NS = _errors.MiopenBadParamError, _errors.MiopenNotSupportedError
STATUS = _status_table(_errors.MiopenError, {
    STATUS_NOT_INITIALIZED: "miopenStatusNotInitialized",
    STATUS_INVALID_VALUE: ("miopenStatusInvalidValue", _BP),
    STATUS_BAD_PARM: ("miopenStatusBadParm", _BP),
    STATUS_ALLOC_FAILED: "miopenStatusAllocFailed",
    STATUS_INTERNAL_ERROR: "miopenStatusInternalError",
    STATUS_NOT_IMPLEMENTED: ("miopenStatusNotImplemented", _NS),
    STATUS_UNKNOWN_ERROR: "miopenStatusUnknownError",
    STATUS_UNSUPPORTED_OP: ("miopenStatusUnsupportedOp", _NS),
    STATUS_VERSION_MISMATCH: "miopenStatusVersionMismatch",
})
del _BP, _NS

# C copies of the constants used in nogil calls
cdef int _C_SUCCESS = STATUS_SUCCESS
cdef int _C_SKIPPED = STATUS_GPU_OPERATIONS_SKIPPED
cdef int _C_BN_SPATIAL = BN_SPATIAL
cdef float _ONE = 1.0
cdef float _ZERO = 0.0

# our bounds: tensor ranks, the solutions we ask for
cdef enum:
    MAX_DIMS = 8
    MAX_SOLUTIONS = 64


def n_slots():
    """Function pointers in ``MiopenFns`` (must equal ``len(NAMES)``)."""
    return sizeof(MiopenFns) // sizeof(void*)


cdef class Miopen(LibraryTable):
    """The MIOpen symbol table (one per process: :data:`TABLE`)."""

    cdef int _fill(self, Library lib) except -1:
        if len(NAMES) != sizeof(MiopenFns) // sizeof(void*):
            raise RuntimeError("_miopen: NAMES and MiopenFns disagree (a build bug)")
        cdef void** slots = <void**>&self.f
        cdef int i
        for i in range(len(NAMES)):
            slots[i] = lib.sym(NAMES[i])
        return 0

    cdef void _clear(self) noexcept:
        memset(&self.f, 0, sizeof(self.f))

    cdef object _version(self):
        cdef size_t major = 0, minor = 0, patch = 0
        if self.f.GetVersion == NULL:
            return 0
        self._check(self.f.GetVersion(&major, &minor, &patch), b"miopenGetVersion")
        return major * 10000 + minor * 100 + patch

    cdef int _check(self, int status, const char* call) except -1 nogil:
        if status == _C_SUCCESS or status == _C_SKIPPED:
            return 0
        with gil:
            raise _error(self, status, call.decode())

    def status_name(self, int status):
        """MIOpen's own name for ``status`` (``miopenGetErrorString``), or None."""
        cdef const char* s
        if self.f.GetErrorString == NULL:
            return None
        s = self.f.GetErrorString(status)
        return s.decode(errors="replace") if s != NULL else None


cdef object _error(Miopen t, int status, str call):
    return t.status_error(STATUS, _errors.MiopenError, status, call, t.status_name(status))


cdef Miopen _T = Miopen("miopen", "miopen", "MIOpen", _REQUIRED)
TABLE = _T


cdef inline int _need(void* fn, const char* name) except -1:
    if fn == NULL:
        _T.missing(name)
    return 0


# ------------------------------------------------------------------ library
def load(str path, str found_via="explicit"):
    """Open MIOpen at ``path`` (absolute path or soname) once; returns the ``LoadRecord``
    (``version`` = major * 10000 + minor * 100 + patch).

    Raises
    ------
    LibraryError
        ``dlopen`` failed, or the library is not MIOpen (lacks a required symbol).
    """
    return _T.load(path, found_via)


def loaded():
    """The ``LoadRecord`` of the loaded library, or None."""
    return _T.record


def version():
    """(major, minor, patch) of the loaded MIOpen (``miopenGetVersion``)."""
    cdef size_t major = 0, minor = 0, patch = 0
    _need(<void*>_T.f.GetVersion, b"GetVersion")
    _T._check(_T.f.GetVersion(&major, &minor, &patch), b"miopenGetVersion")
    return int(major), int(minor), int(patch)


def has(str name):
    """True when the loaded MIOpen exports ``"miopen" + name`` (one of :data:`NAMES`)."""
    cdef void** slots = <void**>&_T.f
    if name not in NAMES:
        raise ValueError(f"_miopen.has: {name!r} is not in NAMES")
    return slots[NAMES.index(name)] != NULL


# ------------------------------------------------------------------ handles
def create_with_stream(uintptr_t stream):
    """A handle bound to the HIP ``stream`` and the calling thread's current device."""
    cdef void* h = NULL
    _need(<void*>_T.f.CreateWithStream, b"CreateWithStream")
    cdef int st
    with nogil:
        st = _T.f.CreateWithStream(&h, <void*>stream)
    _T._check(st, b"miopenCreateWithStream")
    return <uintptr_t>h


def destroy(uintptr_t handle):
    """Destroy a handle (its stream is the caller's to drain first)."""
    _need(<void*>_T.f.Destroy, b"Destroy")
    _T._check(_T.f.Destroy(<void*>handle), b"miopenDestroy")


def set_stream(uintptr_t handle, uintptr_t stream):
    """Bind ``handle`` to ``stream``."""
    _need(<void*>_T.f.SetStream, b"SetStream")
    _T._check(_T.f.SetStream(<void*>handle, <void*>stream), b"miopenSetStream")


def get_stream(uintptr_t handle):
    """The stream ``handle`` is bound to."""
    cdef void* s = NULL
    _need(<void*>_T.f.GetStream, b"GetStream")
    _T._check(_T.f.GetStream(<void*>handle, &s), b"miopenGetStream")
    return <uintptr_t>s


def get_tuning_policy(uintptr_t handle):
    """The handle's ``miopenTuningPolicy_t`` (MIOpen 3.5.1 only; LibraryError before)."""
    cdef int v = 0
    _need(<void*>_T.f.GetTuningPolicy, b"GetTuningPolicy")
    _T._check(_T.f.GetTuningPolicy(<void*>handle, &v), b"miopenGetTuningPolicy")
    return v


def set_tuning_policy(uintptr_t handle, int policy):
    """Set the handle's tuning policy (MIOpen 3.5.1 only; LibraryError before)."""
    _need(<void*>_T.f.SetTuningPolicy, b"SetTuningPolicy")
    _T._check(_T.f.SetTuningPolicy(<void*>handle, policy), b"miopenSetTuningPolicy")


# ------------------------------------------------------------------ descriptors
cdef int _int32(object v, str what) except? -1:
    if not 0 <= v <= 0x7FFFFFFF:
        raise _errors.NotSupportedError(f"MIOpen descriptors take 32-bit {what}; got {v}")
    return <int>v


cdef class TensorDescriptor:
    """A ``miopenTensorDescriptor_t`` set with ``miopenSetTensorDescriptor``.

    Parameters
    ----------
    dtype : int
        ``DATA_FLOAT``, ``DATA_HALF`` or ``DATA_BFLOAT16``.
    dims, strides : sequence of int
        Logical dims (N, C, [D,] H, W) and element strides, 1 to 8 of each; MIOpen reads
        the layout from the strides.

    Raises
    ------
    NotSupportedError
        A dim or stride beyond 32 bits.
    MiopenError
        MIOpen refused the descriptor.
    """

    cdef readonly uintptr_t ptr
    cdef readonly int dtype
    cdef readonly tuple dims
    cdef readonly tuple strides

    def __init__(self, int dtype, dims, strides):
        cdef int n = len(dims)
        cdef int d[MAX_DIMS]
        cdef int s[MAX_DIMS]
        cdef void* p = NULL
        cdef int i
        if not 1 <= n <= MAX_DIMS or len(strides) != n:
            raise ValueError(f"TensorDescriptor: {n} dims and {len(strides)} strides; need 1-8 of each")
        for i in range(n):
            d[i] = _int32(dims[i], "dims")
            s[i] = _int32(strides[i], "strides")
        self.dtype, self.dims, self.strides = dtype, tuple(dims), tuple(strides)
        _need(<void*>_T.f.CreateTensorDescriptor, b"CreateTensorDescriptor")
        _need(<void*>_T.f.SetTensorDescriptor, b"SetTensorDescriptor")
        _T._check(_T.f.CreateTensorDescriptor(&p), b"miopenCreateTensorDescriptor")
        self.ptr = <uintptr_t>p
        try:
            _T._check(_T.f.SetTensorDescriptor(p, dtype, n, d, s), b"miopenSetTensorDescriptor")
        except BaseException:
            self.close()
            raise

    def close(self):
        """Destroy the descriptor; idempotent."""
        if self.ptr and _T.f.DestroyTensorDescriptor != NULL:
            _T.f.DestroyTensorDescriptor(<void*>self.ptr)
        self.ptr = 0

    def __dealloc__(self):
        if self.ptr and _T.f.DestroyTensorDescriptor != NULL:
            _T.f.DestroyTensorDescriptor(<void*>self.ptr)

    def __repr__(self):
        return f"TensorDescriptor(dtype={self.dtype}, dims={self.dims}, strides={self.strides})"


cdef class ConvolutionDescriptor:
    """A ``miopenConvolutionDescriptor_t``: ``miopenInitConvolutionNdDescriptor`` (symmetric
    ``pads`` per spatial dim, ``strides``, ``dilations``; 2 or 3 spatial dims), then
    ``miopenSetConvolutionGroupCount`` and, when ``deterministic`` is given,
    ``miopenSetConvolutionAttribute(MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC)``."""

    cdef readonly uintptr_t ptr
    cdef readonly tuple pads
    cdef readonly tuple conv_strides
    cdef readonly tuple dilations
    cdef readonly int groups

    def __init__(self, pads, strides, dilations, int groups=1, int mode=CONVOLUTION,
                 deterministic=None):
        cdef int n = len(pads)
        cdef int p[3]
        cdef int s[3]
        cdef int d[3]
        cdef void* c = NULL
        cdef int i
        if not 2 <= n <= 3 or len(strides) != n or len(dilations) != n:
            raise ValueError(f"ConvolutionDescriptor: {n} pads, {len(strides)} strides, "
                             f"{len(dilations)} dilations; need 2 or 3 of each")
        for i in range(n):
            p[i] = _int32(pads[i], "pads")
            s[i] = _int32(strides[i], "strides")
            d[i] = _int32(dilations[i], "dilations")
        self.pads, self.conv_strides, self.dilations = tuple(pads), tuple(strides), tuple(dilations)
        self.groups = groups
        _need(<void*>_T.f.CreateConvolutionDescriptor, b"CreateConvolutionDescriptor")
        _need(<void*>_T.f.InitConvolutionNdDescriptor, b"InitConvolutionNdDescriptor")
        _need(<void*>_T.f.SetConvolutionGroupCount, b"SetConvolutionGroupCount")
        _T._check(_T.f.CreateConvolutionDescriptor(&c), b"miopenCreateConvolutionDescriptor")
        self.ptr = <uintptr_t>c
        try:
            _T._check(_T.f.InitConvolutionNdDescriptor(c, n, p, s, d, mode),
                      b"miopenInitConvolutionNdDescriptor")
            _T._check(_T.f.SetConvolutionGroupCount(c, groups), b"miopenSetConvolutionGroupCount")
            if deterministic is not None:
                _need(<void*>_T.f.SetConvolutionAttribute, b"SetConvolutionAttribute")
                _T._check(_T.f.SetConvolutionAttribute(c, CONV_ATTRIB_DETERMINISTIC,
                                                       1 if deterministic else 0),
                          b"miopenSetConvolutionAttribute")
        except BaseException:
            self.close()
            raise

    def close(self):
        """Destroy the descriptor; idempotent."""
        if self.ptr and _T.f.DestroyConvolutionDescriptor != NULL:
            _T.f.DestroyConvolutionDescriptor(<void*>self.ptr)
        self.ptr = 0

    def __dealloc__(self):
        if self.ptr and _T.f.DestroyConvolutionDescriptor != NULL:
            _T.f.DestroyConvolutionDescriptor(<void*>self.ptr)


cdef class ActivationDescriptor:
    """A ``miopenActivationDescriptor_t`` (``miopenSetActivationDescriptor(mode, alpha, beta,
    gamma)``: CLIPPEDRELU clips at alpha, CLAMP to [alpha, beta])."""

    cdef readonly uintptr_t ptr
    cdef readonly int mode
    cdef readonly double alpha
    cdef readonly double beta
    cdef readonly double gamma

    def __init__(self, int mode, double alpha=0.0, double beta=0.0, double gamma=0.0):
        cdef void* a = NULL
        self.mode, self.alpha, self.beta, self.gamma = mode, alpha, beta, gamma
        _need(<void*>_T.f.CreateActivationDescriptor, b"CreateActivationDescriptor")
        _need(<void*>_T.f.SetActivationDescriptor, b"SetActivationDescriptor")
        _T._check(_T.f.CreateActivationDescriptor(&a), b"miopenCreateActivationDescriptor")
        self.ptr = <uintptr_t>a
        try:
            _T._check(_T.f.SetActivationDescriptor(a, mode, alpha, beta, gamma),
                      b"miopenSetActivationDescriptor")
        except BaseException:
            self.close()
            raise

    def close(self):
        """Destroy the descriptor; idempotent."""
        if self.ptr and _T.f.DestroyActivationDescriptor != NULL:
            _T.f.DestroyActivationDescriptor(<void*>self.ptr)
        self.ptr = 0

    def __dealloc__(self):
        if self.ptr and _T.f.DestroyActivationDescriptor != NULL:
            _T.f.DestroyActivationDescriptor(<void*>self.ptr)


# ------------------------------------------------------------------ immediate mode
# (a, b, c) descriptors in each direction's C argument order: forward (w, x, y),
# backward data (dy, w, dx), backward weights (dy, x, dw).
_DIRECTION_NAMES = ("Forward", "BackwardData", "BackwardWeights")


cdef int _direction(int direction) except -1:
    if not 0 <= direction <= 2:
        raise ValueError(f"convolution direction {direction}; 0 forward, 1 backward data, "
                         "2 backward weights")
    return direction


cdef f_solution_count _count_fn(int d) noexcept nogil:
    if d == 0:
        return _T.f.ConvolutionForwardGetSolutionCount
    if d == 1:
        return _T.f.ConvolutionBackwardDataGetSolutionCount
    return _T.f.ConvolutionBackwardWeightsGetSolutionCount


def conv_solutions(int direction, uintptr_t handle, TensorDescriptor a, TensorDescriptor b,
                   ConvolutionDescriptor conv, TensorDescriptor c):
    """MIOpen's immediate-mode solutions for a convolution, best first
    (``miopenConvolution*GetSolutionCount`` + ``*GetSolution``).

    Parameters
    ----------
    direction : int
        ``FORWARD``, ``BACKWARD_DATA`` or ``BACKWARD_WEIGHTS``.
    a, b, c : TensorDescriptor
        In the direction's C order: forward (w, x, y), backward data (dy, w, dx),
        backward weights (dy, x, dw).

    Returns
    -------
    list of (solution_id, algorithm, workspace_bytes, time_ms)
        ``algorithm`` a ``miopenConvAlgorithm_t``; ``time_ms`` may be an estimate.
    """
    cdef int d = _direction(direction)
    cdef bytes name = f"miopenConvolution{_DIRECTION_NAMES[d]}GetSolutionCount".encode()
    cdef bytes name2 = f"miopenConvolution{_DIRECTION_NAMES[d]}GetSolution".encode()
    cdef bytes short1 = name[6:], short2 = name2[6:]
    cdef f_solution_count fc = _count_fn(d)
    cdef f_get_solution fg = (_T.f.ConvolutionForwardGetSolution if d == 0 else
                              _T.f.ConvolutionBackwardDataGetSolution if d == 1 else
                              _T.f.ConvolutionBackwardWeightsGetSolution)
    cdef size_t n = 0, got = 0
    cdef ConvSolution* sols
    cdef int st
    _need(<void*>fc, short1)
    _need(<void*>fg, short2)
    with nogil:
        st = fc(<void*>handle, <void*>a.ptr, <void*>b.ptr, <void*>conv.ptr, <void*>c.ptr, &n)
    _T._check(st, name)
    if n == 0:
        return []
    n = min(n, <size_t>MAX_SOLUTIONS)
    sols = <ConvSolution*>malloc(n * sizeof(ConvSolution))
    if sols == NULL:
        raise MemoryError()
    try:
        memset(sols, 0, n * sizeof(ConvSolution))
        with nogil:
            st = fg(<void*>handle, <void*>a.ptr, <void*>b.ptr, <void*>conv.ptr, <void*>c.ptr, n,
                    &got, sols)
        _T._check(st, name2)
        return [(int(sols[i].solution_id), int(sols[i].algorithm), int(sols[i].workspace_size),
                 float(sols[i].time)) for i in range(min(got, n))]
    finally:
        free(sols)


def conv_solution_workspace(int direction, uintptr_t handle, TensorDescriptor a,
                            TensorDescriptor b, ConvolutionDescriptor conv, TensorDescriptor c,
                            uint64_t solution_id):
    """Workspace bytes of one solution (``miopenConvolution*GetSolutionWorkspaceSize``)."""
    cdef int d = _direction(direction)
    cdef bytes name = f"miopenConvolution{_DIRECTION_NAMES[d]}GetSolutionWorkspaceSize".encode()
    cdef f_solution_workspace f = (_T.f.ConvolutionForwardGetSolutionWorkspaceSize if d == 0 else
                                   _T.f.ConvolutionBackwardDataGetSolutionWorkspaceSize if d == 1 else
                                   _T.f.ConvolutionBackwardWeightsGetSolutionWorkspaceSize)
    cdef size_t ws = 0
    cdef int st
    cdef bytes short = name[6:]
    _need(<void*>f, short)
    with nogil:
        st = f(<void*>handle, <void*>a.ptr, <void*>b.ptr, <void*>conv.ptr, <void*>c.ptr,
               solution_id, &ws)
    _T._check(st, name)
    return int(ws)


def conv_compile(int direction, uintptr_t handle, TensorDescriptor a, TensorDescriptor b,
                 ConvolutionDescriptor conv, TensorDescriptor c, uint64_t solution_id):
    """Compile one solution's kernels now (``miopenConvolution*CompileSolution``), so that
    its first run compiles nothing."""
    cdef int d = _direction(direction)
    cdef bytes name = f"miopenConvolution{_DIRECTION_NAMES[d]}CompileSolution".encode()
    cdef f_compile_solution f = (_T.f.ConvolutionForwardCompileSolution if d == 0 else
                                 _T.f.ConvolutionBackwardDataCompileSolution if d == 1 else
                                 _T.f.ConvolutionBackwardWeightsCompileSolution)
    cdef int st
    cdef bytes short = name[6:]
    _need(<void*>f, short)
    with nogil:
        st = f(<void*>handle, <void*>a.ptr, <void*>b.ptr, <void*>conv.ptr, <void*>c.ptr,
               solution_id)
    _T._check(st, name)


def conv_immediate(int direction, uintptr_t handle, TensorDescriptor a, uintptr_t a_ptr,
                   TensorDescriptor b, uintptr_t b_ptr, ConvolutionDescriptor conv,
                   TensorDescriptor c, uintptr_t c_ptr, uintptr_t workspace,
                   size_t workspace_size, uint64_t solution_id):
    """Run one solution (``miopenConvolution*Immediate``) on the handle's stream.

    ``a``/``b``/``c`` (and their pointers) in the direction's C order; the output is
    ``c``. The GIL is released.
    """
    cdef int d = _direction(direction)
    cdef f_immediate f = (_T.f.ConvolutionForwardImmediate if d == 0 else
                          _T.f.ConvolutionBackwardDataImmediate if d == 1 else
                          _T.f.ConvolutionBackwardWeightsImmediate)
    cdef const char* name = (b"miopenConvolutionForwardImmediate" if d == 0 else
                             b"miopenConvolutionBackwardDataImmediate" if d == 1 else
                             b"miopenConvolutionBackwardWeightsImmediate")
    cdef int st
    if f == NULL:
        _T.missing(name + 6)
    with nogil:
        st = f(<void*>handle, <void*>a.ptr, <const void*>a_ptr, <void*>b.ptr, <const void*>b_ptr,
               <void*>conv.ptr, <void*>c.ptr, <void*>c_ptr, <void*>workspace, workspace_size,
               solution_id)
    _T._check(st, name)


# ------------------------------------------------------------------ Find 2.0
def find_solutions(uintptr_t handle, int direction, ConvolutionDescriptor conv,
                   TensorDescriptor x, TensorDescriptor w, TensorDescriptor y,
                   uintptr_t x_ptr, uintptr_t w_ptr, uintptr_t y_ptr, uintptr_t workspace,
                   size_t workspace_size, bint tuning, size_t workspace_limit,
                   size_t max_solutions=16):
    """Search with Find 2.0: a convolution problem (``miopenCreateConvProblem``), options
    (``miopenSetFindOptionTuning``: the exhaustive search that tunes and records in MIOpen's
    user perf db; ``...WorkspaceLimit``; results by time; the given buffers preallocated,
    so MIOpen allocates nothing and overwrites them), ``miopenFindSolutions``. The solution
    objects are read and destroyed: the search's result is kept as solver ids, which
    immediate mode runs on any handle.

    Parameters
    ----------
    direction : int
        ``FORWARD`` / ``BACKWARD_DATA`` / ``BACKWARD_WEIGHTS`` (= miopenProblemDirection_t).
    x, w, y : TensorDescriptor
        The problem's X, W, Y: for backward data X is dx and Y is dy; for backward weights
        W is dw and Y is dy. ``x_ptr`` etc. are scratch buffers of them.

    Returns
    -------
    list of (solver_id, algorithm, workspace_bytes, time_ms)
        Fastest first; ``algorithm`` from ``miopenGetSolverIdConvAlgorithm``.
    """
    cdef int d = _direction(direction)
    cdef void* problem = NULL
    cdef void* options = NULL
    cdef void* sols[64]
    cdef size_t n = 0, i, ws = 0
    cdef float t = 0
    cdef uint64_t solver = 0
    cdef int algo = 0, st
    for nm in ("CreateConvProblem", "SetProblemTensorDescriptor", "DestroyProblem",
               "CreateFindOptions", "DestroyFindOptions", "SetFindOptionTuning",
               "SetFindOptionWorkspaceLimit", "SetFindOptionResultsOrder",
               "SetFindOptionPreallocatedWorkspace", "SetFindOptionPreallocatedTensor",
               "FindSolutions", "GetSolutionWorkspaceSize", "GetSolutionTime",
               "GetSolutionSolverId", "GetSolverIdConvAlgorithm", "DestroySolution"):
        if not has(nm):
            short = nm.encode()
            _need(NULL, short)
    max_solutions = min(max_solutions, 64)
    out = []
    try:
        _T._check(_T.f.CreateConvProblem(&problem, <void*>conv.ptr, d), b"miopenCreateConvProblem")
        _T._check(_T.f.SetProblemTensorDescriptor(problem, TENSOR_CONV_X, <void*>x.ptr),
                  b"miopenSetProblemTensorDescriptor")
        _T._check(_T.f.SetProblemTensorDescriptor(problem, TENSOR_CONV_W, <void*>w.ptr),
                  b"miopenSetProblemTensorDescriptor")
        _T._check(_T.f.SetProblemTensorDescriptor(problem, TENSOR_CONV_Y, <void*>y.ptr),
                  b"miopenSetProblemTensorDescriptor")
        _T._check(_T.f.CreateFindOptions(&options), b"miopenCreateFindOptions")
        _T._check(_T.f.SetFindOptionTuning(options, 1 if tuning else 0), b"miopenSetFindOptionTuning")
        _T._check(_T.f.SetFindOptionWorkspaceLimit(options, workspace_limit),
                  b"miopenSetFindOptionWorkspaceLimit")
        _T._check(_T.f.SetFindOptionResultsOrder(options, RESULTS_ORDER_BY_TIME),
                  b"miopenSetFindOptionResultsOrder")
        if workspace_size:
            _T._check(_T.f.SetFindOptionPreallocatedWorkspace(options, <void*>workspace,
                                                              workspace_size),
                      b"miopenSetFindOptionPreallocatedWorkspace")
        for tid, ptr in ((TENSOR_CONV_X, x_ptr), (TENSOR_CONV_W, w_ptr), (TENSOR_CONV_Y, y_ptr)):
            _T._check(_T.f.SetFindOptionPreallocatedTensor(options, tid, <void*><uintptr_t>ptr),
                      b"miopenSetFindOptionPreallocatedTensor")
        with nogil:
            st = _T.f.FindSolutions(<void*>handle, problem, options, sols, &n, max_solutions)
        _T._check(st, b"miopenFindSolutions")
        try:
            for i in range(n):
                _T._check(_T.f.GetSolutionSolverId(sols[i], &solver), b"miopenGetSolutionSolverId")
                _T._check(_T.f.GetSolutionWorkspaceSize(sols[i], &ws), b"miopenGetSolutionWorkspaceSize")
                _T._check(_T.f.GetSolutionTime(sols[i], &t), b"miopenGetSolutionTime")
                _T._check(_T.f.GetSolverIdConvAlgorithm(solver, &algo), b"miopenGetSolverIdConvAlgorithm")
                out.append((int(solver), int(algo), int(ws), float(t)))
        finally:
            for i in range(n):
                _T.f.DestroySolution(sols[i])
    finally:
        if options != NULL:
            _T.f.DestroyFindOptions(options)
        if problem != NULL:
            _T.f.DestroyProblem(problem)
    return out


def solver_algorithm(uint64_t solver_id):
    """The ``miopenConvAlgorithm_t`` of a solver id (``miopenGetSolverIdConvAlgorithm``)."""
    cdef int algo = 0
    _need(<void*>_T.f.GetSolverIdConvAlgorithm, b"GetSolverIdConvAlgorithm")
    _T._check(_T.f.GetSolverIdConvAlgorithm(solver_id, &algo), b"miopenGetSolverIdConvAlgorithm")
    return algo


# ------------------------------------------------------------------ fusion plans
cdef class FusionPlan:
    """A vertical fusion plan (``miopenCreateFusionPlan``) whose ops are added in execution
    order; compile it once per handle (:meth:`compile`), then run it with
    :func:`execute_fusion` and an :class:`OperatorArgs`.

    Parameters
    ----------
    input : TensorDescriptor
        The plan's input (x).
    """

    cdef readonly uintptr_t ptr
    cdef list _keep          # descriptors the ops refer to

    def __init__(self, input):
        cdef void* p = NULL
        _need(<void*>_T.f.CreateFusionPlan, b"CreateFusionPlan")
        cdef TensorDescriptor d = <TensorDescriptor?>input
        self._keep = [d]
        _T._check(_T.f.CreateFusionPlan(&p, VERTICAL_FUSION, <void*>d.ptr),
                  b"miopenCreateFusionPlan")
        self.ptr = <uintptr_t>p

    def add_conv(self, ConvolutionDescriptor conv, TensorDescriptor w):
        """Append a convolution-forward op (``miopenCreateOpConvForward``); returns the op."""
        cdef void* op = NULL
        _need(<void*>_T.f.CreateOpConvForward, b"CreateOpConvForward")
        _T._check(_T.f.CreateOpConvForward(<void*>self.ptr, &op, <void*>conv.ptr, <void*>w.ptr),
                  b"miopenCreateOpConvForward")
        self._keep += [conv, w]
        return <uintptr_t>op

    def add_bias(self, TensorDescriptor b):
        """Append a bias op (``miopenCreateOpBiasForward``); returns the op."""
        cdef void* op = NULL
        _need(<void*>_T.f.CreateOpBiasForward, b"CreateOpBiasForward")
        _T._check(_T.f.CreateOpBiasForward(<void*>self.ptr, &op, <void*>b.ptr),
                  b"miopenCreateOpBiasForward")
        self._keep.append(b)
        return <uintptr_t>op

    def add_activation(self, int mode):
        """Append a forward activation op (``miopenCreateOpActivationForward``); returns it."""
        cdef void* op = NULL
        _need(<void*>_T.f.CreateOpActivationForward, b"CreateOpActivationForward")
        _T._check(_T.f.CreateOpActivationForward(<void*>self.ptr, &op, mode),
                  b"miopenCreateOpActivationForward")
        return <uintptr_t>op

    def compile(self, uintptr_t handle):
        """``miopenCompileFusionPlan`` for ``handle`` (a plan runs only on handles it was
        compiled for). MiopenNotSupportedError (UnsupportedOp) when no fused solver applies."""
        cdef int st
        _need(<void*>_T.f.CompileFusionPlan, b"CompileFusionPlan")
        with nogil:
            st = _T.f.CompileFusionPlan(<void*>handle, <void*>self.ptr)
        _T._check(st, b"miopenCompileFusionPlan")

    def workspace_size(self, uintptr_t handle):
        """The compiled plan's workspace bytes (``miopenFusionPlanGetWorkSpaceSize`` with the
        plan's convolution algorithm, ``miopenFusionPlanConvolutionGetAlgo``)."""
        cdef size_t ws = 0
        cdef int algo = CONV_FWD_ALGO_DIRECT
        cdef int n = 0
        _need(<void*>_T.f.FusionPlanGetWorkSpaceSize, b"FusionPlanGetWorkSpaceSize")
        if _T.f.FusionPlanConvolutionGetAlgo != NULL:
            _T._check(_T.f.FusionPlanConvolutionGetAlgo(<void*>self.ptr, 1, &n, &algo),
                      b"miopenFusionPlanConvolutionGetAlgo")
        _T._check(_T.f.FusionPlanGetWorkSpaceSize(<void*>handle, <void*>self.ptr, &ws, algo),
                  b"miopenFusionPlanGetWorkSpaceSize")
        return int(ws)

    def close(self):
        """Destroy the plan; idempotent."""
        if self.ptr and _T.f.DestroyFusionPlan != NULL:
            _T.f.DestroyFusionPlan(<void*>self.ptr)
        self.ptr = 0

    def __dealloc__(self):
        if self.ptr and _T.f.DestroyFusionPlan != NULL:
            _T.f.DestroyFusionPlan(<void*>self.ptr)


cdef class OperatorArgs:
    """A ``miopenOperatorArgs_t``: the per-execution arguments of a fusion plan's ops."""

    cdef readonly uintptr_t ptr

    def __init__(self):
        cdef void* p = NULL
        _need(<void*>_T.f.CreateOperatorArgs, b"CreateOperatorArgs")
        _T._check(_T.f.CreateOperatorArgs(&p), b"miopenCreateOperatorArgs")
        self.ptr = <uintptr_t>p

    def set_conv(self, uintptr_t op, uintptr_t w):
        """``miopenSetOpArgsConvForward(alpha=1, beta=0, w)``."""
        _need(<void*>_T.f.SetOpArgsConvForward, b"SetOpArgsConvForward")
        _T._check(_T.f.SetOpArgsConvForward(<void*>self.ptr, <void*>op, &_ONE, &_ZERO,
                                            <const void*>w), b"miopenSetOpArgsConvForward")

    def set_bias(self, uintptr_t op, uintptr_t bias):
        """``miopenSetOpArgsBiasForward(alpha=1, beta=0, bias)``."""
        _need(<void*>_T.f.SetOpArgsBiasForward, b"SetOpArgsBiasForward")
        _T._check(_T.f.SetOpArgsBiasForward(<void*>self.ptr, <void*>op, &_ONE, &_ZERO,
                                            <const void*>bias), b"miopenSetOpArgsBiasForward")

    def set_activation(self, uintptr_t op, double alpha, double beta, double gamma):
        """``miopenSetOpArgsActivForward(alpha=1, beta=0, activAlpha, activBeta, activGamma)``."""
        _need(<void*>_T.f.SetOpArgsActivForward, b"SetOpArgsActivForward")
        _T._check(_T.f.SetOpArgsActivForward(<void*>self.ptr, <void*>op, &_ONE, &_ZERO, alpha,
                                             beta, gamma), b"miopenSetOpArgsActivForward")

    def close(self):
        """Destroy the arguments; idempotent."""
        if self.ptr and _T.f.DestroyOperatorArgs != NULL:
            _T.f.DestroyOperatorArgs(<void*>self.ptr)
        self.ptr = 0

    def __dealloc__(self):
        if self.ptr and _T.f.DestroyOperatorArgs != NULL:
            _T.f.DestroyOperatorArgs(<void*>self.ptr)


def execute_fusion(uintptr_t handle, FusionPlan plan, TensorDescriptor x, uintptr_t x_ptr,
                   TensorDescriptor y, uintptr_t y_ptr, OperatorArgs args,
                   uintptr_t workspace=0, size_t workspace_size=0):
    """Run a compiled plan on the handle's stream: ``miopenExecuteFusionPlan_v2`` (with the
    workspace) where MIOpen has it, else ``miopenExecuteFusionPlan``, which takes none.

    Raises
    ------
    NotSupportedError
        A workspace is needed and this MIOpen has no ``miopenExecuteFusionPlan_v2``.
    """
    cdef int st
    if _T.f.ExecuteFusionPlan_v2 != NULL:
        with nogil:
            st = _T.f.ExecuteFusionPlan_v2(<void*>handle, <void*>plan.ptr, <void*>x.ptr,
                                           <const void*>x_ptr, <void*>y.ptr, <void*>y_ptr,
                                           <void*>args.ptr, <void*>workspace, workspace_size)
        _T._check(st, b"miopenExecuteFusionPlan_v2")
        return
    if workspace_size:
        raise _errors.NotSupportedError(
            f"this fusion plan needs a {workspace_size}-byte workspace, and MIOpen "
            f"{_T.record.version if _T.record else '?'} has no miopenExecuteFusionPlan_v2 "
            "to pass one")
    _need(<void*>_T.f.ExecuteFusionPlan, b"ExecuteFusionPlan")
    with nogil:
        st = _T.f.ExecuteFusionPlan(<void*>handle, <void*>plan.ptr, <void*>x.ptr,
                                    <const void*>x_ptr, <void*>y.ptr, <void*>y_ptr, <void*>args.ptr)
    _T._check(st, b"miopenExecuteFusionPlan")


# ------------------------------------------------------------------ batchnorm (spatial, _V2)
cdef inline void* _act(object activation) except? NULL:
    return NULL if activation is None else <void*><uintptr_t>(<ActivationDescriptor>activation).ptr


def bn_forward_inference(uintptr_t handle, TensorDescriptor x, uintptr_t x_ptr,
                         TensorDescriptor y, uintptr_t y_ptr, TensorDescriptor scale_d,
                         TensorDescriptor bias_d, TensorDescriptor mean_d,
                         TensorDescriptor var_d, uintptr_t scale, uintptr_t bias,
                         uintptr_t mean, uintptr_t variance, double epsilon,
                         ActivationDescriptor activation=None):
    """Spatial batchnorm inference with the running variance:
    ``miopenBatchNormalizationForwardInference_V2`` (alpha 1, beta 0), or with
    ``activation`` ``miopenBatchNormForwardInferenceActivation`` (3.5.1 only)."""
    cdef int st
    cdef void* act = _act(activation)
    if activation is None:
        _need(<void*>_T.f.BatchNormalizationForwardInference_V2, b"BatchNormalizationForwardInference_V2")
        with nogil:
            st = _T.f.BatchNormalizationForwardInference_V2(
                <void*>handle, _C_BN_SPATIAL, &_ONE, &_ZERO, <void*>x.ptr, <const void*>x_ptr,
                <void*>y.ptr, <void*>y_ptr, <void*>scale_d.ptr, <void*>bias_d.ptr,
                <void*>mean_d.ptr, <void*>var_d.ptr, <void*>scale, <void*>bias, <void*>mean,
                <void*>variance, epsilon)
        _T._check(st, b"miopenBatchNormalizationForwardInference_V2")
        return
    _need(<void*>_T.f.BatchNormForwardInferenceActivation, b"BatchNormForwardInferenceActivation")
    with nogil:
        st = _T.f.BatchNormForwardInferenceActivation(
            <void*>handle, _C_BN_SPATIAL, &_ONE, &_ZERO, <void*>x.ptr, <const void*>x_ptr,
            <void*>y.ptr, <void*>y_ptr, <void*>scale_d.ptr, <void*>bias_d.ptr,
            <void*>mean_d.ptr, <void*>var_d.ptr, <void*>scale, <void*>bias, <void*>mean,
            <void*>variance, epsilon, act)
    _T._check(st, b"miopenBatchNormForwardInferenceActivation")


def bn_forward_training(uintptr_t handle, TensorDescriptor x, uintptr_t x_ptr,
                        TensorDescriptor y, uintptr_t y_ptr, TensorDescriptor scale_d,
                        TensorDescriptor bias_d, TensorDescriptor mean_d,
                        TensorDescriptor var_d, uintptr_t scale, uintptr_t bias,
                        double exp_avg_factor, uintptr_t running_mean,
                        uintptr_t running_variance, double epsilon, uintptr_t saved_mean,
                        uintptr_t saved_inv_variance, ActivationDescriptor activation=None):
    """Spatial batchnorm training: ``miopenBatchNormalizationForwardTraining_V2`` or, with
    ``activation``, ``miopenBatchNormForwardTrainingActivation`` (3.5.1 only). Running
    statistics (0: not updated) are updated in place: ``r = batch * factor + r * (1 -
    factor)``, the variance unbiased; saved mean / inverse variance (0: not written)."""
    cdef int st
    cdef void* act = _act(activation)
    if activation is None:
        _need(<void*>_T.f.BatchNormalizationForwardTraining_V2, b"BatchNormalizationForwardTraining_V2")
        with nogil:
            st = _T.f.BatchNormalizationForwardTraining_V2(
                <void*>handle, _C_BN_SPATIAL, &_ONE, &_ZERO, <void*>x.ptr, <const void*>x_ptr,
                <void*>y.ptr, <void*>y_ptr, <void*>scale_d.ptr, <void*>bias_d.ptr,
                <void*>mean_d.ptr, <void*>var_d.ptr, <void*>scale, <void*>bias, exp_avg_factor,
                <void*>running_mean, <void*>running_variance, epsilon, <void*>saved_mean,
                <void*>saved_inv_variance)
        _T._check(st, b"miopenBatchNormalizationForwardTraining_V2")
        return
    _need(<void*>_T.f.BatchNormForwardTrainingActivation, b"BatchNormForwardTrainingActivation")
    with nogil:
        st = _T.f.BatchNormForwardTrainingActivation(
            <void*>handle, _C_BN_SPATIAL, &_ONE, &_ZERO, <void*>x.ptr, <const void*>x_ptr,
            <void*>y.ptr, <void*>y_ptr, <void*>scale_d.ptr, <void*>bias_d.ptr,
            <void*>mean_d.ptr, <void*>var_d.ptr, <void*>scale, <void*>bias, exp_avg_factor,
            <void*>running_mean, <void*>running_variance, epsilon, <void*>saved_mean,
            <void*>saved_inv_variance, act)
    _T._check(st, b"miopenBatchNormForwardTrainingActivation")


def bn_backward(uintptr_t handle, TensorDescriptor x, uintptr_t x_ptr, TensorDescriptor dy,
                uintptr_t dy_ptr, TensorDescriptor dx, uintptr_t dx_ptr,
                TensorDescriptor scale_d, TensorDescriptor bias_d, TensorDescriptor mean_d,
                TensorDescriptor var_d, uintptr_t scale, uintptr_t bias, uintptr_t dscale,
                uintptr_t dbias, double epsilon, uintptr_t saved_mean,
                uintptr_t saved_inv_variance, ActivationDescriptor activation=None):
    """Spatial batchnorm backward with the saved statistics:
    ``miopenBatchNormalizationBackward_V2`` (``bias`` unused), or with ``activation``
    ``miopenBatchNormBackwardActivation`` (3.5.1 only), which first masks ``dy`` by the
    activation's gradient at the recomputed forward output ``scale * xhat + bias``.
    All alphas 1, betas 0."""
    cdef int st
    cdef void* act = _act(activation)
    if activation is None:
        _need(<void*>_T.f.BatchNormalizationBackward_V2, b"BatchNormalizationBackward_V2")
        with nogil:
            st = _T.f.BatchNormalizationBackward_V2(
                <void*>handle, _C_BN_SPATIAL, &_ONE, &_ZERO, &_ONE, &_ZERO, <void*>x.ptr,
                <const void*>x_ptr, <void*>dy.ptr, <const void*>dy_ptr, <void*>dx.ptr,
                <void*>dx_ptr, <void*>scale_d.ptr, <void*>bias_d.ptr, <void*>mean_d.ptr,
                <void*>var_d.ptr, <const void*>scale, <void*>dscale, <void*>dbias, epsilon,
                <const void*>saved_mean, <const void*>saved_inv_variance)
        _T._check(st, b"miopenBatchNormalizationBackward_V2")
        return
    _need(<void*>_T.f.BatchNormBackwardActivation, b"BatchNormBackwardActivation")
    with nogil:
        st = _T.f.BatchNormBackwardActivation(
            <void*>handle, _C_BN_SPATIAL, &_ONE, &_ZERO, &_ONE, &_ZERO, <void*>x.ptr,
            <const void*>x_ptr, <void*>dy.ptr, <const void*>dy_ptr, <void*>dx.ptr,
            <void*>dx_ptr, <void*>scale_d.ptr, <void*>bias_d.ptr, <void*>mean_d.ptr,
            <void*>var_d.ptr, <const void*>scale, <const void*>bias, <void*>dscale,
            <void*>dbias, epsilon, <const void*>saved_mean, <const void*>saved_inv_variance, act)
    _T._check(st, b"miopenBatchNormBackwardActivation")


# ------------------------------------------------------------------ activation, bias, element-wise
def activation_forward(uintptr_t handle, ActivationDescriptor activation, TensorDescriptor x,
                       uintptr_t x_ptr, TensorDescriptor y, uintptr_t y_ptr):
    """``miopenActivationForward`` (alpha 1, beta 0): y = act(x)."""
    cdef int st
    _need(<void*>_T.f.ActivationForward, b"ActivationForward")
    with nogil:
        st = _T.f.ActivationForward(<void*>handle, <void*>activation.ptr, &_ONE, <void*>x.ptr,
                                    <const void*>x_ptr, &_ZERO, <void*>y.ptr, <void*>y_ptr)
    _T._check(st, b"miopenActivationForward")


def activation_backward(uintptr_t handle, ActivationDescriptor activation, TensorDescriptor y,
                        uintptr_t y_ptr, TensorDescriptor dy, uintptr_t dy_ptr,
                        TensorDescriptor x, uintptr_t x_ptr, TensorDescriptor dx,
                        uintptr_t dx_ptr):
    """``miopenActivationBackward`` (alpha 1, beta 0): dx = act'(x) * dy."""
    cdef int st
    _need(<void*>_T.f.ActivationBackward, b"ActivationBackward")
    with nogil:
        st = _T.f.ActivationBackward(<void*>handle, <void*>activation.ptr, &_ONE, <void*>y.ptr,
                                     <const void*>y_ptr, <void*>dy.ptr, <const void*>dy_ptr,
                                     <void*>x.ptr, <const void*>x_ptr, &_ZERO, <void*>dx.ptr,
                                     <void*>dx_ptr)
    _T._check(st, b"miopenActivationBackward")


def conv_forward_bias(uintptr_t handle, TensorDescriptor b, uintptr_t b_ptr,
                      TensorDescriptor y, uintptr_t y_ptr):
    """``miopenConvolutionForwardBias`` (alpha 1, beta 0, the only values it takes):
    y += b, b of dims (1, K, 1, 1[, 1])."""
    cdef int st
    _need(<void*>_T.f.ConvolutionForwardBias, b"ConvolutionForwardBias")
    with nogil:
        st = _T.f.ConvolutionForwardBias(<void*>handle, &_ONE, <void*>b.ptr, <const void*>b_ptr,
                                         &_ZERO, <void*>y.ptr, <void*>y_ptr)
    _T._check(st, b"miopenConvolutionForwardBias")


def op_tensor(uintptr_t handle, int op, float alpha1, TensorDescriptor a, uintptr_t a_ptr,
              float alpha2, TensorDescriptor b, uintptr_t b_ptr, float beta,
              TensorDescriptor c, uintptr_t c_ptr):
    """``miopenOpTensor``: C = op(alpha1 * A, alpha2 * B) + beta * C, B broadcast."""
    cdef int st
    _need(<void*>_T.f.OpTensor, b"OpTensor")
    with nogil:
        st = _T.f.OpTensor(<void*>handle, op, &alpha1, <void*>a.ptr, <const void*>a_ptr, &alpha2,
                           <void*>b.ptr, <const void*>b_ptr, &beta, <void*>c.ptr, <void*>c_ptr)
    _T._check(st, b"miopenOpTensor")
