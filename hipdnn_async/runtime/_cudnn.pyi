"""Stubs of the cuDNN 9 bindings (``src_pyx/_cudnn.pyx``).

Covers the legacy API opened with ``dlopen`` from ``libcudnn.so.9``: handles, tensor /
filter / convolution / activation / op-tensor descriptors, convolution forward, backward
data and backward filter (heuristics, ``Find...Ex``, workspace sizes, execution), fused
convolution + bias + activation, batchnorm, activation and ``OpTensor``. Handles,
descriptors, streams and device pointers are ints; ``direction`` is 0 forward, 1 backward
data, 2 backward filter. A non-zero status raises the type of ``STATUS`` (all
``CudnnError``: ``CudnnNotSupportedError``, ``CudnnBadParamError``); a missing symbol or an
unloaded library raises ``LibraryError`` (a ``DeviceError``).
"""
from collections.abc import Sequence

from hipdnn_async._errors import HipdnnError

from ._loader import LibraryTable, LoadRecord

DATA_FLOAT: int
DATA_HALF: int
DATA_BFLOAT16: int
FORMAT_NCHW: int
FORMAT_NHWC: int
CROSS_CORRELATION: int
DEFAULT_MATH: int
TENSOR_OP_MATH: int
FMA_MATH: int
DETERMINISTIC: int
ACTIVATION_RELU: int
ACTIVATION_CLIPPED_RELU: int
ACTIVATION_IDENTITY: int
NOT_PROPAGATE_NAN: int
OP_TENSOR_ADD: int
OP_TENSOR_MUL: int
BATCHNORM_SPATIAL: int
BATCHNORM_SPATIAL_PERSISTENT: int
STATUS_NOT_SUPPORTED: int
STATUS_BAD_PARAM: int
BN_OPS_BN: int
BN_OPS_BN_ACTIVATION: int
STATUS: dict[int, tuple[str, type[HipdnnError] | None]]

class CudnnError(HipdnnError):
    """A cuDNN call failed (``hipdnn_async._errors.CudnnError``, an ExecutionError)."""

def status_error(call: str, status: int, status_name: str | None = None,
                 vendor_message: str = "", library: str = "libcudnn.so.9") -> CudnnError:
    """The typed error of ``status`` returned by ``call``, from :data:`STATUS`."""

class CudnnTable(LibraryTable):
    """The symbol table of ``libcudnn.so.9`` (one per process)."""

    def __init__(self) -> None:
        """An empty table; ``load`` fills it."""

TABLE: CudnnTable

# ------------------------------------------------------------------ loading, handles
def load(path: str, found_via: str = "explicit") -> LoadRecord:
    """Load cuDNN from ``path``; idempotent; LibraryError when it does not open or is not cuDNN."""
def loaded() -> LoadRecord | None:
    """The record of the loaded library, or None."""
def version() -> int:
    """cudnnGetVersion(): MAJOR*10000 + MINOR*100 + PATCH since 9.0."""
def create() -> int:
    """A new cuDNN handle on the current device."""
def destroy(handle: int) -> None:
    """Destroy a handle (cuDNN synchronizes the device; GIL released)."""
def set_stream(handle: int, stream: int) -> None:
    """Bind ``handle`` to ``stream`` for all later calls."""

# ------------------------------------------------------------------ descriptors
class _Descriptor:
    """Owns one cuDNN descriptor, destroyed on ``close()`` or collection."""

    @property
    def ptr(self) -> int:
        """The descriptor handle (0 once closed)."""
    def close(self) -> None:
        """Destroy the descriptor; idempotent."""

class TensorDescriptor(_Descriptor):
    """``cudnnSetTensorNdDescriptor``: DATA_* dtype, 4 or 5 dims, strides in elements."""

    def __init__(self, dtype: int, dims: Sequence[int], strides: Sequence[int]) -> None:
        """Create and set the descriptor; at most 8 dims."""

class FilterDescriptor(_Descriptor):
    """``cudnnSetFilterNdDescriptor``: DATA_* dtype, FORMAT_* format, dims K, C/groups, [T,] R, S."""

    def __init__(self, dtype: int, fmt: int, dims: Sequence[int]) -> None:
        """Create and set the descriptor; at most 8 dims."""

class ConvolutionDescriptor(_Descriptor):
    """Cross-correlation with per-spatial-dim padding, stride, dilation, groups, compute and math type."""

    def __init__(self, padding: Sequence[int], stride: Sequence[int],
                 dilation: Sequence[int], groups: int, compute_type: int,
                 math_type: int) -> None:
        """Create and set the descriptor; ``compute_type`` DATA_*, ``math_type`` *_MATH."""
    def set_math_type(self, math_type: int) -> None:
        """``cudnnSetConvolutionMathType``: DEFAULT_MATH, TENSOR_OP_MATH or FMA_MATH."""

class ActivationDescriptor(_Descriptor):
    """``cudnnSetActivationDescriptor(mode, NOT_PROPAGATE_NAN, coef)``."""

    def __init__(self, mode: int, coef: float = 0.0) -> None:
        """``mode`` ACTIVATION_*; ``coef`` is the clipping ceiling of CLIPPED_RELU."""

class OpTensorDescriptor(_Descriptor):
    """``cudnnSetOpTensorDescriptor(op, FLOAT compute, NOT_PROPAGATE_NAN)``."""

    def __init__(self, op: int) -> None:
        """``op`` OP_TENSOR_ADD or OP_TENSOR_MUL."""

# ------------------------------------------------------------------ convolution
# Descriptor order per direction is the C API's: fwd (x, w, conv, y); dgrad (w, dy, conv,
# dx); wgrad (x, dy, conv, dw). Algorithm tuples: (algo, status, time_ms, memory_bytes,
# determinism, math_type).
def get_algorithms(direction: int, handle: int, a: int, b: int, conv: int,
                   c: int) -> list[tuple[int, int, float, int, int, int]]:
    """The ``_v7`` heuristic list of algorithm tuples, best first (no execution)."""
def find_algorithms(direction: int, handle: int, ad: int, a: int, bd: int, b: int,
                    conv: int, cd: int, c: int, workspace: int,
                    workspace_size: int) -> list[tuple[int, int, float, int, int, int]]:
    """``Find...AlgorithmEx``: runs every algorithm (``c`` overwritten), fastest first."""
def workspace_size(direction: int, handle: int, a: int, b: int, conv: int, c: int,
                   algo: int) -> int:
    """Workspace bytes ``algo`` needs; CudnnNotSupportedError if inapplicable."""
def convolution(direction: int, handle: int, ad: int, a: int, bd: int, b: int, conv: int,
                algo: int, workspace: int, workspace_size: int, cd: int, c: int,
                alpha: float = 1.0, beta: float = 0.0) -> None:
    """Run one convolution: fwd (x, w -> y), dgrad (w, dy -> dx), wgrad (x, dy -> dw)."""
def convolution_bias_activation_forward(handle: int, xd: int, x: int, wd: int, w: int,
                                        conv: int, algo: int, workspace: int,
                                        workspace_size: int, bias_d: int, bias: int,
                                        act: int, yd: int, y: int) -> None:
    """y = act(conv(x, w) + bias), no residual."""

# ------------------------------------------------------------------ batchnorm
def batchnorm_forward_inference(handle: int, xd: int, x: int, yd: int, y: int, bnd: int,
                                scale: int, bias: int, mean: int, variance: int,
                                epsilon: float) -> None:
    """y = scale * (x - mean) / sqrt(variance + epsilon) + bias, per channel (SPATIAL)."""
def batchnorm_forward_training(handle: int, xd: int, x: int, yd: int, y: int, bnd: int,
                               scale: int, bias: int, factor: float, running_mean: int,
                               running_variance: int, epsilon: float, save_mean: int,
                               save_inv_variance: int, mode: int = ...) -> None:
    """Batch statistics, normalised y, running-stat update unless its pointers are 0."""
def batchnorm_backward(handle: int, xd: int, x: int, dyd: int, dy: int, dxd: int, dx: int,
                       bnd: int, scale: int, dscale: int, dbias: int, epsilon: float,
                       saved_mean: int, saved_inv_variance: int, mode: int = ...) -> None:
    """dx, dscale, dbias from x, dy and the saved mean / inv_variance."""
def batchnorm_training_ex_sizes(handle: int, mode: int, bn_ops: int, xd: int, yd: int,
                                bnd: int, act: int) -> tuple[int, int]:
    """(workspace bytes, reserve-space bytes) of :func:`batchnorm_forward_training_ex`."""
def batchnorm_forward_training_ex(handle: int, mode: int, bn_ops: int, xd: int, x: int,
                                  yd: int, y: int, bnd: int, scale: int, bias: int,
                                  factor: float, running_mean: int, running_variance: int,
                                  epsilon: float, save_mean: int, save_inv_variance: int,
                                  act: int, workspace: int, workspace_size: int,
                                  reserve: int, reserve_size: int) -> None:
    """``cudnnBatchNormalizationForwardTrainingEx`` without z; ``bn_ops`` BN_OPS_BN or BN_OPS_BN_ACTIVATION."""
def batchnorm_backward_ex_sizes(handle: int, mode: int, xd: int, dyd: int, dxd: int,
                                bnd: int) -> tuple[int, int]:
    """(workspace bytes, reserve-space bytes) of :func:`batchnorm_backward_ex`."""
def batchnorm_backward_ex(handle: int, mode: int, xd: int, x: int, dyd: int, dy: int,
                          dxd: int, dx: int, bnd: int, scale: int, dscale: int, dbias: int,
                          epsilon: float, saved_mean: int, saved_inv_variance: int,
                          workspace: int, workspace_size: int) -> None:
    """``cudnnBatchNormalizationBackwardEx`` with bn_ops BN and no reserve space."""

# ------------------------------------------------------------------ pointwise
def activation_forward(handle: int, act: int, xd: int, x: int, yd: int, y: int) -> None:
    """y = act(x) (in place when x == y)."""
def activation_backward(handle: int, act: int, yd: int, y: int, dyd: int, dy: int, xd: int,
                        x: int, dxd: int, dx: int) -> None:
    """dx = act'(x) * dy."""
def op_tensor(handle: int, op: int, alpha1: float, ad: int, a: int, alpha2: float, bd: int,
              b: int, cd: int, c: int) -> None:
    """C = op(alpha1 * A, alpha2 * B), B broadcast over dims of size 1; ``op`` a descriptor."""
