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
``cudnn_{graph,ops,cnn}.h`` of cuDNN 9 (see shared/reference/vendor-c-apis.md s.2); every
function used is exported by ``libcudnn.so.9`` (the shim), so only that library is opened.

Handles, descriptors, streams and device pointers travel as Python ints; descriptors are
owned by small ``cdef class`` objects that destroy them on ``close()`` / collection.
Scaling factors (alpha, beta) are host ``float`` values, as cuDNN takes for FLOAT, HALF and
BFLOAT16 data. Calls that launch work run with the GIL released.

Errors: a non-zero ``cudnnStatus_t`` raises ``CudnnError`` with ``.status``, the status
name (``cudnnGetErrorString``) and cuDNN's last error message; a missing symbol raises
``CudnnError`` naming it at the first call.
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

# cudnnDataType_t, cudnnTensorFormat_t, ... (cudnn_graph.h / cudnn_ops.h, cuDNN 9.28)
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
DEF BN_SPATIAL = 1
BATCHNORM_SPATIAL = BN_SPATIAL
BATCHNORM_SPATIAL_PERSISTENT = 2   # NHWC fast path (PyTorch uses it for channels-last training)
STATUS_NOT_SUPPORTED = 3000
STATUS_BAD_PARAM = 2000

DEF MAX_DIMS = 8
DEF MAX_ALGOS = 32

ctypedef struct AlgoPerf:      # cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t, 48 bytes
    int algo
    int status
    float time
    size_t memory
    int determinism
    int mathType
    int reserved[3]

ctypedef int (*f_create)(void**) noexcept nogil
ctypedef int (*f_destroy)(void*) noexcept nogil
ctypedef int (*f_set_stream)(void*, void*) noexcept nogil
ctypedef size_t (*f_version)() noexcept nogil
ctypedef const char* (*f_errstr)(int) noexcept nogil
ctypedef void (*f_last_err)(char*, size_t) noexcept nogil
ctypedef int (*f_set_tensor)(void*, int, int, const int*, const int*) noexcept nogil
ctypedef int (*f_set_filter)(void*, int, int, int, const int*) noexcept nogil
ctypedef int (*f_set_conv)(void*, int, const int*, const int*, const int*, int, int) noexcept nogil
ctypedef int (*f_set_int)(void*, int) noexcept nogil
ctypedef int (*f_set_act)(void*, int, int, double) noexcept nogil
ctypedef int (*f_set_op)(void*, int, int, int) noexcept nogil
ctypedef int (*f_max_count)(void*, int*) noexcept nogil
ctypedef int (*f_get_v7)(void*, void*, void*, void*, void*, int, int*, AlgoPerf*) noexcept nogil
ctypedef int (*f_find_ex)(void*, void*, const void*, void*, const void*, void*, void*,
                          void*, int, int*, AlgoPerf*, void*, size_t) noexcept nogil
ctypedef int (*f_ws_size)(void*, void*, void*, void*, void*, int, size_t*) noexcept nogil
ctypedef int (*f_conv)(void*, const void*, void*, const void*, void*, const void*, void*,
                       int, void*, size_t, const void*, void*, void*) noexcept nogil
ctypedef int (*f_cba)(void*, const void*, void*, const void*, void*, const void*, void*,
                      int, void*, size_t, const void*, void*, const void*, void*,
                      const void*, void*, void*, void*) noexcept nogil
ctypedef int (*f_bn_inf)(void*, int, const void*, const void*, void*, const void*, void*,
                         void*, void*, const void*, const void*, const void*, const void*,
                         double) noexcept nogil
ctypedef int (*f_bn_train)(void*, int, const void*, const void*, void*, const void*, void*,
                           void*, void*, const void*, const void*, double, void*, void*,
                           double, void*, void*) noexcept nogil
ctypedef int (*f_bn_bwd)(void*, int, const void*, const void*, const void*, const void*,
                         void*, const void*, void*, const void*, void*, void*, void*,
                         const void*, void*, void*, double, const void*, const void*) noexcept nogil
ctypedef int (*f_bn_ex_ws)(void*, int, int, void*, void*, void*, void*, void*,
                           size_t*) noexcept nogil
ctypedef int (*f_bn_ex_reserve)(void*, int, int, void*, void*, size_t*) noexcept nogil
ctypedef int (*f_bn_train_ex)(void*, int, int, const void*, const void*, void*, const void*,
                              void*, const void*, void*, void*, void*, const void*,
                              const void*, double, void*, void*, double, void*, void*,
                              void*, void*, size_t, void*, size_t) noexcept nogil
ctypedef int (*f_act_fwd)(void*, void*, const void*, void*, const void*, const void*,
                          void*, void*) noexcept nogil
ctypedef int (*f_act_bwd)(void*, void*, const void*, void*, const void*, void*, const void*,
                          void*, const void*, const void*, void*, void*) noexcept nogil
ctypedef int (*f_op_tensor)(void*, void*, const void*, void*, const void*, const void*,
                            void*, const void*, const void*, void*, void*) noexcept nogil

_NAMES = (
    "cudnnGetVersion", "cudnnGetErrorString", "cudnnGetLastErrorString", "cudnnCreate",
    "cudnnDestroy", "cudnnSetStream",
    "cudnnCreateTensorDescriptor", "cudnnSetTensorNdDescriptor", "cudnnDestroyTensorDescriptor",
    "cudnnCreateFilterDescriptor", "cudnnSetFilterNdDescriptor", "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor", "cudnnSetConvolutionNdDescriptor",
    "cudnnSetConvolutionGroupCount", "cudnnSetConvolutionMathType",
    "cudnnDestroyConvolutionDescriptor",
    "cudnnCreateActivationDescriptor", "cudnnSetActivationDescriptor",
    "cudnnDestroyActivationDescriptor",
    "cudnnCreateOpTensorDescriptor", "cudnnSetOpTensorDescriptor", "cudnnDestroyOpTensorDescriptor",
    "cudnnGetConvolutionForwardAlgorithmMaxCount",
    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
    "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
    "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnFindConvolutionForwardAlgorithmEx", "cudnnFindConvolutionBackwardDataAlgorithmEx",
    "cudnnFindConvolutionBackwardFilterAlgorithmEx",
    "cudnnGetConvolutionForwardWorkspaceSize", "cudnnGetConvolutionBackwardDataWorkspaceSize",
    "cudnnGetConvolutionBackwardFilterWorkspaceSize",
    "cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter",
    "cudnnConvolutionBiasActivationForward",
    "cudnnBatchNormalizationForwardInference", "cudnnBatchNormalizationForwardTraining",
    "cudnnBatchNormalizationBackward",
    "cudnnActivationForward", "cudnnActivationBackward", "cudnnOpTensor",
    "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize",
    "cudnnGetBatchNormalizationTrainingExReserveSpaceSize",
    "cudnnBatchNormalizationForwardTrainingEx",
)
DEF N_FUNCS = 48
cdef void* _fn[N_FUNCS]
cdef void* _lib = NULL
_lock = threading.Lock()
_record = None

# indices into _fn (kept next to _NAMES; a test checks that they agree)
DEF I_VERSION = 0
DEF I_ERRSTR = 1
DEF I_LASTERR = 2
DEF I_CREATE = 3
DEF I_DESTROY = 4
DEF I_SET_STREAM = 5
DEF I_TENSOR = 6
DEF I_FILTER = 9
DEF I_CONV = 12
DEF I_ACT = 17
DEF I_OP = 20
DEF I_MAXCOUNT = 23
DEF I_GET_V7 = 26
DEF I_FIND_EX = 29
DEF I_WS = 32
DEF I_RUN_CONV = 35
DEF I_CBA = 38
DEF I_BN_INF = 39
DEF I_BN_TRAIN = 40
DEF I_BN_BWD = 41
DEF I_ACT_FWD = 42
DEF I_ACT_BWD = 43
DEF I_OP_TENSOR = 44
DEF I_BN_TRAIN_EX_WS = 45
DEF I_BN_TRAIN_EX_RESERVE = 46
DEF I_BN_TRAIN_EX = 47

INDEX = {"cudnnGetVersion": I_VERSION, "cudnnCreateTensorDescriptor": I_TENSOR,
         "cudnnCreateFilterDescriptor": I_FILTER, "cudnnCreateConvolutionDescriptor": I_CONV,
         "cudnnCreateActivationDescriptor": I_ACT, "cudnnCreateOpTensorDescriptor": I_OP,
         "cudnnGetConvolutionForwardAlgorithmMaxCount": I_MAXCOUNT,
         "cudnnGetConvolutionForwardAlgorithm_v7": I_GET_V7,
         "cudnnFindConvolutionForwardAlgorithmEx": I_FIND_EX,
         "cudnnGetConvolutionForwardWorkspaceSize": I_WS,
         "cudnnConvolutionForward": I_RUN_CONV,
         "cudnnConvolutionBiasActivationForward": I_CBA,
         "cudnnBatchNormalizationForwardInference": I_BN_INF,
         "cudnnBatchNormalizationForwardTraining": I_BN_TRAIN,
         "cudnnBatchNormalizationBackward": I_BN_BWD,
         "cudnnActivationForward": I_ACT_FWD, "cudnnActivationBackward": I_ACT_BWD,
         "cudnnOpTensor": I_OP_TENSOR,
         "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize": I_BN_TRAIN_EX_WS,
         "cudnnGetBatchNormalizationTrainingExReserveSpaceSize": I_BN_TRAIN_EX_RESERVE,
         "cudnnBatchNormalizationForwardTrainingEx": I_BN_TRAIN_EX}
NAMES = _NAMES


class CudnnError(RuntimeError):
    """A cuDNN call failed. ``status`` is the cudnnStatus_t value, ``name`` its name."""

    def __init__(self, call, status, name, text=""):
        self.call, self.status, self.name, self.text = call, status, name, text
        msg = f"{call} failed: {name} ({status})"
        super().__init__(msg + (f": {text}" if text else ""))

    @property
    def not_supported(self):
        """True for the CUDNN_STATUS_NOT_SUPPORTED class (3000-3999)."""
        return self.status // 1000 == 3

    def __reduce__(self):
        return (CudnnError, (self.call, self.status, self.name, self.text))


def load(path):
    """Load cuDNN from ``path`` (absolute path or soname); idempotent; returns (path, version).

    Raises
    ------
    OSError
        ``dlopen`` failed.
    """
    global _lib, _record
    with _lock:
        if _lib != NULL:
            return _record
        handle = dlopen(path.encode(), RTLD_NOW | RTLD_LOCAL)
        if handle == NULL:
            err = dlerror()
            raise OSError(err.decode(errors="replace") if err != NULL else f"dlopen({path}) failed")
        found = [<uintptr_t>dlsym(handle, name.encode()) for name in _NAMES]
        missing = [_NAMES[i] for i in (I_VERSION, I_CREATE, I_SET_STREAM, I_RUN_CONV) if not found[i]]
        if missing:  # the table is left empty: a later load may find the right library
            raise OSError(f"{path} is not cuDNN: it lacks " + ", ".join(missing))
        for i, addr in enumerate(found):
            _fn[i] = <void*><uintptr_t>addr
        _lib = handle
        version = (<f_version>_fn[I_VERSION])() if _fn[I_VERSION] != NULL else 0
        _record = (path, int(version))
        return _record


def loaded():
    """``(path, version)`` of the loaded library, or None."""
    return _record


cdef inline void* _sym(int i) except NULL:
    if _lib == NULL:
        raise CudnnError("cudnn", -1, "NOT_LOADED", "cuDNN is not loaded")
    if _fn[i] == NULL:
        raise CudnnError(_NAMES[i], -1, "MISSING_SYMBOL",
                         f"{_NAMES[i]} is absent from {_record[0]}")
    return _fn[i]


cdef int _check(int status, int which) except -1:
    cdef const char* s
    cdef char buf[512]
    if status == 0:
        return 0
    name = "?"
    if _fn[I_ERRSTR] != NULL:
        s = (<f_errstr>_fn[I_ERRSTR])(status)
        if s != NULL:
            name = s.decode(errors="replace")
    text = ""
    if _fn[I_LASTERR] != NULL:
        memset(buf, 0, sizeof(buf))
        (<f_last_err>_fn[I_LASTERR])(buf, sizeof(buf) - 1)
        text = buf.decode(errors="replace").strip()
    raise CudnnError(_NAMES[which], status, name, text)


def version():
    """cudnnGetVersion(): MAJOR*10000 + MINOR*100 + PATCH since 9.0."""
    return int((<f_version>_sym(I_VERSION))())


# ------------------------------------------------------------------ handles
def create():
    """A new cuDNN handle on the current device (call once per stream, not per call)."""
    cdef void* h = NULL
    _check((<f_create>_sym(I_CREATE))(&h), I_CREATE)
    return <uintptr_t>h


def destroy(uintptr_t handle):
    """Destroy a handle (cuDNN synchronizes the device here)."""
    cdef f_destroy f = <f_destroy>_sym(I_DESTROY)
    cdef int st
    with nogil:
        st = f(<void*>handle)
    _check(st, I_DESTROY)


def set_stream(uintptr_t handle, uintptr_t stream):
    """Bind ``handle`` to ``stream`` for all later calls."""
    _check((<f_set_stream>_sym(I_SET_STREAM))(<void*>handle, <void*>stream), I_SET_STREAM)


# ------------------------------------------------------------------ descriptors
cdef int _fill(int* out, values, what) except -1:
    if len(values) > MAX_DIMS:
        raise ValueError(f"{what}: at most {MAX_DIMS} values; got {len(values)}")
    for i, v in enumerate(values):
        out[i] = int(v)
    return 0


cdef class _Descriptor:
    """Owns one cuDNN descriptor; ``ptr`` is its handle as an int."""
    cdef void* _d
    cdef int _destroy_index

    @property
    def ptr(self):
        return <uintptr_t>self._d

    def close(self):
        """Destroy the descriptor; idempotent."""
        if self._d != NULL and _fn[self._destroy_index] != NULL:
            (<f_destroy>_fn[self._destroy_index])(self._d)
        self._d = NULL

    def __dealloc__(self):
        self.close()


cdef class TensorDescriptor(_Descriptor):
    """``cudnnSetTensorNdDescriptor(dtype, dims, strides)``: 4 or 5 dims, element strides."""

    def __init__(self, int dtype, dims, strides):
        cdef int d[MAX_DIMS]
        cdef int s[MAX_DIMS]
        _fill(d, dims, "tensor dims")
        _fill(s, strides, "tensor strides")
        self._destroy_index = I_TENSOR + 2
        _check((<f_create>_sym(I_TENSOR))(&self._d), I_TENSOR)
        _check((<f_set_tensor>_sym(I_TENSOR + 1))(self._d, dtype, len(dims), d, s), I_TENSOR + 1)


cdef class FilterDescriptor(_Descriptor):
    """``cudnnSetFilterNdDescriptor(dtype, format, dims)``: dims K, C/groups, [T,] R, S."""

    def __init__(self, int dtype, int fmt, dims):
        cdef int d[MAX_DIMS]
        _fill(d, dims, "filter dims")
        self._destroy_index = I_FILTER + 2
        _check((<f_create>_sym(I_FILTER))(&self._d), I_FILTER)
        _check((<f_set_filter>_sym(I_FILTER + 1))(self._d, dtype, fmt, len(dims), d), I_FILTER + 1)


cdef class ConvolutionDescriptor(_Descriptor):
    """Cross-correlation with per-spatial-dim padding, stride and dilation, ``groups``,
    compute type and math type."""

    def __init__(self, padding, stride, dilation, int groups, int compute_type, int math_type):
        cdef int p[MAX_DIMS]
        cdef int s[MAX_DIMS]
        cdef int dl[MAX_DIMS]
        _fill(p, padding, "padding")
        _fill(s, stride, "stride")
        _fill(dl, dilation, "dilation")
        self._destroy_index = I_CONV + 4
        _check((<f_create>_sym(I_CONV))(&self._d), I_CONV)
        _check((<f_set_conv>_sym(I_CONV + 1))(self._d, len(padding), p, s, dl,
                                              CROSS_CORRELATION, compute_type), I_CONV + 1)
        if groups != 1:
            _check((<f_set_int>_sym(I_CONV + 2))(self._d, groups), I_CONV + 2)
        self.set_math_type(math_type)

    def set_math_type(self, int math_type):
        _check((<f_set_int>_sym(I_CONV + 3))(self._d, math_type), I_CONV + 3)


cdef class ActivationDescriptor(_Descriptor):
    """``cudnnSetActivationDescriptor(mode, NOT_PROPAGATE_NAN, coef)``."""

    def __init__(self, int mode, double coef=0.0):
        self._destroy_index = I_ACT + 2
        _check((<f_create>_sym(I_ACT))(&self._d), I_ACT)
        _check((<f_set_act>_sym(I_ACT + 1))(self._d, mode, NOT_PROPAGATE_NAN, coef), I_ACT + 1)


cdef class OpTensorDescriptor(_Descriptor):
    """``cudnnSetOpTensorDescriptor(op, FLOAT compute, NOT_PROPAGATE_NAN)``."""

    def __init__(self, int op):
        self._destroy_index = I_OP + 2
        _check((<f_create>_sym(I_OP))(&self._d), I_OP)
        _check((<f_set_op>_sym(I_OP + 1))(self._d, op, DATA_FLOAT, NOT_PROPAGATE_NAN), I_OP + 1)


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
    cdef int i = I_GET_V7 + direction
    memset(perf, 0, sizeof(perf))
    _check((<f_get_v7>_sym(i))(<void*>handle, <void*>a, <void*>b, <void*>conv, <void*>c,
                               MAX_ALGOS, &n, perf), i)
    return _perf_list(perf, n)


def find_algorithms(int direction, uintptr_t handle, uintptr_t ad, uintptr_t a,
                    uintptr_t bd, uintptr_t b, uintptr_t conv, uintptr_t cd, uintptr_t c,
                    uintptr_t workspace, size_t workspace_size):
    """``Find...AlgorithmEx``: runs every algorithm on the given buffers (``c`` is
    overwritten), sorted by measured time; same tuple layout as :func:`get_algorithms`."""
    cdef AlgoPerf perf[MAX_ALGOS]
    cdef int n = 0
    cdef int st
    cdef int i = I_FIND_EX + direction
    cdef f_find_ex f = <f_find_ex>_sym(i)
    memset(perf, 0, sizeof(perf))
    with nogil:
        st = f(<void*>handle, <void*>ad, <const void*>a, <void*>bd, <const void*>b,
               <void*>conv, <void*>cd, <void*>c, MAX_ALGOS, &n, perf,
               <void*>workspace, workspace_size)
    _check(st, i)
    return _perf_list(perf, n)


def workspace_size(int direction, uintptr_t handle, uintptr_t a, uintptr_t b,
                   uintptr_t conv, uintptr_t c, int algo):
    """Workspace bytes ``algo`` needs; raises CudnnError (NOT_SUPPORTED) if inapplicable."""
    cdef size_t n = 0
    cdef int i = I_WS + direction
    _check((<f_ws_size>_sym(i))(<void*>handle, <void*>a, <void*>b, <void*>conv, <void*>c,
                                algo, &n), i)
    return n


def convolution(int direction, uintptr_t handle, uintptr_t ad, uintptr_t a, uintptr_t bd,
                uintptr_t b, uintptr_t conv, int algo, uintptr_t workspace,
                size_t workspace_size, uintptr_t cd, uintptr_t c, float alpha=1.0,
                float beta=0.0):
    """Run one convolution: fwd (x, w -> y), dgrad (w, dy -> dx), wgrad (x, dy -> dw)."""
    cdef int i = I_RUN_CONV + direction
    cdef f_conv f = <f_conv>_sym(i)
    cdef int st
    with nogil:
        st = f(<void*>handle, &alpha, <void*>ad, <const void*>a, <void*>bd, <const void*>b,
               <void*>conv, algo, <void*>workspace, workspace_size, &beta, <void*>cd, <void*>c)
    _check(st, i)


def convolution_bias_activation_forward(
        uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t wd, uintptr_t w,
        uintptr_t conv, int algo, uintptr_t workspace, size_t workspace_size,
        uintptr_t bias_d, uintptr_t bias, uintptr_t act, uintptr_t yd, uintptr_t y):
    """y = act(conv(x, w) + bias), with z = y and alpha2 = 0 (no residual)."""
    cdef float alpha1 = 1.0
    cdef float alpha2 = 0.0
    cdef f_cba f = <f_cba>_sym(I_CBA)
    cdef int st
    with nogil:
        st = f(<void*>handle, &alpha1, <void*>xd, <const void*>x, <void*>wd, <const void*>w,
               <void*>conv, algo, <void*>workspace, workspace_size, &alpha2, <void*>yd,
               <const void*>y, <void*>bias_d, <const void*>bias, <void*>act, <void*>yd,
               <void*>y)
    _check(st, I_CBA)


# ------------------------------------------------------------------ batchnorm (SPATIAL)
def batchnorm_forward_inference(uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t yd,
                                uintptr_t y, uintptr_t bnd, uintptr_t scale, uintptr_t bias,
                                uintptr_t mean, uintptr_t variance, double epsilon):
    """y = scale * (x - mean) / sqrt(variance + epsilon) + bias, per channel."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_inf f = <f_bn_inf>_sym(I_BN_INF)
    cdef int st
    with nogil:
        st = f(<void*>handle, BN_SPATIAL, &one, &zero, <void*>xd, <const void*>x,
               <void*>yd, <void*>y, <void*>bnd, <const void*>scale, <const void*>bias,
               <const void*>mean, <const void*>variance, epsilon)
    _check(st, I_BN_INF)


def batchnorm_forward_training(uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t yd,
                               uintptr_t y, uintptr_t bnd, uintptr_t scale, uintptr_t bias,
                               double factor, uintptr_t running_mean,
                               uintptr_t running_variance, double epsilon,
                               uintptr_t save_mean, uintptr_t save_inv_variance,
                               int mode=BN_SPATIAL):
    """Batch statistics, normalised y, optional running-stat update (0 pointers: none)
    ``running = batch * factor + running * (1 - factor)`` with the unbiased variance.
    ``mode``: BATCHNORM_SPATIAL or BATCHNORM_SPATIAL_PERSISTENT."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_train f = <f_bn_train>_sym(I_BN_TRAIN)
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, &one, &zero, <void*>xd, <const void*>x,
               <void*>yd, <void*>y, <void*>bnd, <const void*>scale, <const void*>bias,
               factor, <void*>running_mean, <void*>running_variance, epsilon,
               <void*>save_mean, <void*>save_inv_variance)
    _check(st, I_BN_TRAIN)


def batchnorm_backward(uintptr_t handle, uintptr_t xd, uintptr_t x, uintptr_t dyd,
                       uintptr_t dy, uintptr_t dxd, uintptr_t dx, uintptr_t bnd,
                       uintptr_t scale, uintptr_t dscale, uintptr_t dbias, double epsilon,
                       uintptr_t saved_mean, uintptr_t saved_inv_variance,
                       int mode=BN_SPATIAL):
    """dx, dscale, dbias from x, dy and the saved mean / inv_variance (``mode`` as in
    :func:`batchnorm_forward_training`)."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_bn_bwd f = <f_bn_bwd>_sym(I_BN_BWD)
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, &one, &zero, &one, &zero, <void*>xd,
               <const void*>x, <void*>dyd, <const void*>dy, <void*>dxd, <void*>dx,
               <void*>bnd, <const void*>scale, <void*>dscale, <void*>dbias, epsilon,
               <const void*>saved_mean, <const void*>saved_inv_variance)
    _check(st, I_BN_BWD)


# ------------------------------------------------------------------ pointwise
def activation_forward(uintptr_t handle, uintptr_t act, uintptr_t xd, uintptr_t x,
                       uintptr_t yd, uintptr_t y):
    """y = act(x) (in place when x == y)."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_act_fwd f = <f_act_fwd>_sym(I_ACT_FWD)
    cdef int st
    with nogil:
        st = f(<void*>handle, <void*>act, &one, <void*>xd, <const void*>x, &zero,
               <void*>yd, <void*>y)
    _check(st, I_ACT_FWD)


def activation_backward(uintptr_t handle, uintptr_t act, uintptr_t yd, uintptr_t y,
                        uintptr_t dyd, uintptr_t dy, uintptr_t xd, uintptr_t x,
                        uintptr_t dxd, uintptr_t dx):
    """dx = act'(x) * dy."""
    cdef float one = 1.0
    cdef float zero = 0.0
    cdef f_act_bwd f = <f_act_bwd>_sym(I_ACT_BWD)
    cdef int st
    with nogil:
        st = f(<void*>handle, <void*>act, &one, <void*>yd, <const void*>y, <void*>dyd,
               <const void*>dy, <void*>xd, <const void*>x, &zero, <void*>dxd, <void*>dx)
    _check(st, I_ACT_BWD)


def op_tensor(uintptr_t handle, uintptr_t op, float alpha1, uintptr_t ad, uintptr_t a,
              float alpha2, uintptr_t bd, uintptr_t b, uintptr_t cd, uintptr_t c):
    """C = op(alpha1 * A, alpha2 * B) (B broadcast over dims of size 1)."""
    cdef float zero = 0.0
    cdef f_op_tensor f = <f_op_tensor>_sym(I_OP_TENSOR)
    cdef int st
    with nogil:
        st = f(<void*>handle, <void*>op, &alpha1, <void*>ad, <const void*>a, &alpha2,
               <void*>bd, <const void*>b, &zero, <void*>cd, <void*>c)
    _check(st, I_OP_TENSOR)


# ------------------------------------------------------------------ batchnorm Ex (NHWC fast path)
BN_OPS_BN = 0
BN_OPS_BN_ACTIVATION = 1


def batchnorm_training_ex_sizes(uintptr_t handle, int mode, int bn_ops, uintptr_t xd,
                                uintptr_t yd, uintptr_t bnd, uintptr_t act):
    """(workspace bytes, reserve-space bytes) of ``batchnorm_forward_training_ex``."""
    cdef size_t ws = 0, reserve = 0
    _check((<f_bn_ex_ws>_sym(I_BN_TRAIN_EX_WS))(<void*>handle, mode, bn_ops, <void*>xd, NULL,
                                                 <void*>yd, <void*>bnd, <void*>act, &ws),
           I_BN_TRAIN_EX_WS)
    _check((<f_bn_ex_reserve>_sym(I_BN_TRAIN_EX_RESERVE))(<void*>handle, mode, bn_ops,
                                                           <void*>act, <void*>xd, &reserve),
           I_BN_TRAIN_EX_RESERVE)
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
    cdef f_bn_train_ex f = <f_bn_train_ex>_sym(I_BN_TRAIN_EX)
    cdef int st
    with nogil:
        st = f(<void*>handle, mode, bn_ops, &one, &zero, <void*>xd, <const void*>x, NULL, NULL,
               <void*>yd, <void*>y, <void*>bnd, <const void*>scale, <const void*>bias, factor,
               <void*>running_mean, <void*>running_variance, epsilon, <void*>save_mean,
               <void*>save_inv_variance, <void*>act, <void*>workspace, workspace_size,
               <void*>reserve, reserve_size)
    _check(st, I_BN_TRAIN_EX)
