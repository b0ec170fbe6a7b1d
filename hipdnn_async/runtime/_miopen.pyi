"""Stubs of the MIOpen bindings (``src_pyx/_miopen.pyx``).

Covers what the MIOpen provider calls, opened with ``dlopen`` from ``libMIOpen.so.1``
through ``runtime._loader``: handles on HIP streams, tensor / convolution / activation
descriptors, immediate-mode convolution and Find 2.0 (directions 0 forward, 1 backward
data, 2 backward weights), conv + bias + activation fusion plans, the ``_V2`` batchnorm
calls and their fused ``*Activation`` forms (MIOpen 3.5.1 only), activation, bias and
``OpTensor``, the tuning policy (3.5.1 only). Handles, descriptors, streams and device
pointers are ints. A failing status raises the type ``STATUS`` names (``MiopenError``,
``MiopenBadParamError``, ``MiopenNotSupportedError``); a missing symbol ``LibraryError``.
Every declaration and constant was matched against miopen.h of MIOpen 3.4.0 and 3.5.1.
"""
from collections.abc import Sequence

from ._loader import Library, LibraryTable, LoadRecord

STATUS_SUCCESS: int
STATUS_NOT_INITIALIZED: int
STATUS_INVALID_VALUE: int
STATUS_BAD_PARM: int
STATUS_ALLOC_FAILED: int
STATUS_INTERNAL_ERROR: int
STATUS_NOT_IMPLEMENTED: int
STATUS_UNKNOWN_ERROR: int
STATUS_UNSUPPORTED_OP: int
STATUS_GPU_OPERATIONS_SKIPPED: int
STATUS_VERSION_MISMATCH: int
DATA_HALF: int
DATA_FLOAT: int
DATA_BFLOAT16: int
CONVOLUTION: int
CONV_ATTRIB_DETERMINISTIC: int
ALGO_GEMM: int
ALGO_DIRECT: int
ALGO_FFT: int
ALGO_WINOGRAD: int
ALGO_IMPLICIT_GEMM: int
CONV_FWD_ALGO_DIRECT: int
PROBLEM_FORWARD: int
PROBLEM_BACKWARD: int
PROBLEM_BACKWARD_WEIGHTS: int
TENSOR_CONV_X: int
TENSOR_CONV_W: int
TENSOR_CONV_Y: int
RESULTS_ORDER_BY_TIME: int
VERTICAL_FUSION: int
ACTIVATION_PASTHRU: int
ACTIVATION_RELU: int
ACTIVATION_CLIPPEDRELU: int
ACTIVATION_CLAMP: int
BN_SPATIAL: int
TENSOR_OP_ADD: int
TENSOR_OP_MUL: int
TUNING_POLICY_NONE: int
TUNING_POLICY_SEARCH: int
FORWARD: int
BACKWARD_DATA: int
BACKWARD_WEIGHTS: int
SINCE: dict[str, tuple[int, int, int]]
MIN_VERSION: tuple[int, int, int]
NAMES: tuple[str, ...]
OPTIONAL: dict[str, tuple[int, int, int]]
STATUS: dict[int, tuple[str, type]]
TABLE: Miopen

class Miopen(LibraryTable):
    """The MIOpen symbol table (one per process: ``TABLE``); see ``_loader.LibraryTable``."""

    name: str
    prefix: str
    title: str
    lib: Library | None
    required: tuple[str, ...]
    record: LoadRecord | None

    def load(self, path: str, found_via: str = "explicit") -> LoadRecord:
        """Open ``path`` and fill the table once."""
    @property
    def loaded(self) -> bool:
        """True once a library is loaded into this table."""
    def address(self, name: str) -> int:
        """The address of ``"miopen" + name``; LibraryError if absent or not loaded."""
    def status_name(self, status: int) -> str | None:
        """MIOpen's own name for ``status`` (``miopenGetErrorString``), or None."""

def n_slots() -> int:
    """Function pointers in the table struct (must equal ``len(NAMES)``)."""
def load(path: str, found_via: str = "explicit") -> LoadRecord:
    """Open MIOpen at ``path`` once; ``version`` = major * 10000 + minor * 100 + patch."""
def loaded() -> LoadRecord | None:
    """The ``LoadRecord`` of the loaded library, or None."""
def version() -> tuple[int, int, int]:
    """(major, minor, patch) of the loaded MIOpen."""
def has(name: str) -> bool:
    """True when the loaded MIOpen exports ``"miopen" + name`` (one of ``NAMES``)."""
def create_with_stream(stream: int) -> int:
    """A handle bound to ``stream`` and the calling thread's current device."""
def destroy(handle: int) -> None:
    """Destroy a handle."""
def set_stream(handle: int, stream: int) -> None:
    """Bind ``handle`` to ``stream``."""
def get_stream(handle: int) -> int:
    """The stream ``handle`` is bound to."""
def get_tuning_policy(handle: int) -> int:
    """The handle's ``miopenTuningPolicy_t`` (3.5.1 only)."""
def set_tuning_policy(handle: int, policy: int) -> None:
    """Set the handle's tuning policy (3.5.1 only)."""

class TensorDescriptor:
    """A tensor descriptor with explicit element strides (1 to 8 dims)."""

    ptr: int
    dtype: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]

    def __init__(self, dtype: int, dims: Sequence[int], strides: Sequence[int]) -> None:
        """``miopenSetTensorDescriptor(dtype, len(dims), dims, strides)``."""
    def close(self) -> None:
        """Destroy the descriptor; idempotent."""

class ConvolutionDescriptor:
    """A 2-D or 3-D convolution descriptor (symmetric padding, groups)."""

    ptr: int
    pads: tuple[int, ...]
    conv_strides: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int

    def __init__(self, pads: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 groups: int = 1, mode: int = 0, deterministic: bool | None = None) -> None:
        """``miopenInitConvolutionNdDescriptor`` + group count (+ determinism attribute)."""
    def close(self) -> None:
        """Destroy the descriptor; idempotent."""

class ActivationDescriptor:
    """An activation descriptor (mode, alpha, beta, gamma)."""

    ptr: int
    mode: int
    alpha: float
    beta: float
    gamma: float

    def __init__(self, mode: int, alpha: float = 0.0, beta: float = 0.0, gamma: float = 0.0) -> None:
        """``miopenSetActivationDescriptor(mode, alpha, beta, gamma)``."""
    def close(self) -> None:
        """Destroy the descriptor; idempotent."""

def conv_solutions(direction: int, handle: int, a: TensorDescriptor, b: TensorDescriptor,
                   conv: ConvolutionDescriptor, c: TensorDescriptor) -> list[tuple[int, int, int, float]]:
    """Immediate-mode solutions, best first: (solution_id, algorithm, workspace bytes, ms)."""
def conv_solution_workspace(direction: int, handle: int, a: TensorDescriptor, b: TensorDescriptor,
                            conv: ConvolutionDescriptor, c: TensorDescriptor, solution_id: int) -> int:
    """Workspace bytes of one solution."""
def conv_compile(direction: int, handle: int, a: TensorDescriptor, b: TensorDescriptor,
                 conv: ConvolutionDescriptor, c: TensorDescriptor, solution_id: int) -> None:
    """Compile one solution's kernels now."""
def conv_immediate(direction: int, handle: int, a: TensorDescriptor, a_ptr: int, b: TensorDescriptor,
                   b_ptr: int, conv: ConvolutionDescriptor, c: TensorDescriptor, c_ptr: int,
                   workspace: int, workspace_size: int, solution_id: int) -> None:
    """Run one solution on the handle's stream (output ``c``)."""
def find_solutions(handle: int, direction: int, conv: ConvolutionDescriptor, x: TensorDescriptor,
                   w: TensorDescriptor, y: TensorDescriptor, x_ptr: int, w_ptr: int, y_ptr: int,
                   workspace: int, workspace_size: int, tuning: bool, workspace_limit: int,
                   max_solutions: int = 16) -> list[tuple[int, int, int, float]]:
    """Find 2.0 search: (solver_id, algorithm, workspace bytes, ms), fastest first."""
def solver_algorithm(solver_id: int) -> int:
    """The ``miopenConvAlgorithm_t`` of a solver id."""

class FusionPlan:
    """A vertical fusion plan; compile once per handle, run with ``execute_fusion``."""

    ptr: int

    def __init__(self, input: TensorDescriptor) -> None:
        """``miopenCreateFusionPlan(miopenVerticalFusion, input)``."""
    def add_conv(self, conv: ConvolutionDescriptor, w: TensorDescriptor) -> int:
        """Append a convolution-forward op; returns it."""
    def add_bias(self, b: TensorDescriptor) -> int:
        """Append a bias op; returns it."""
    def add_activation(self, mode: int) -> int:
        """Append a forward activation op; returns it."""
    def compile(self, handle: int) -> None:
        """``miopenCompileFusionPlan`` for ``handle``; MiopenNotSupportedError when refused."""
    def workspace_size(self, handle: int) -> int:
        """The compiled plan's workspace bytes."""
    def close(self) -> None:
        """Destroy the plan; idempotent."""

class OperatorArgs:
    """The per-execution arguments of a fusion plan's ops."""

    ptr: int

    def __init__(self) -> None:
        """``miopenCreateOperatorArgs``."""
    def set_conv(self, op: int, w: int) -> None:
        """``miopenSetOpArgsConvForward(alpha=1, beta=0, w)``."""
    def set_bias(self, op: int, bias: int) -> None:
        """``miopenSetOpArgsBiasForward(alpha=1, beta=0, bias)``."""
    def set_activation(self, op: int, alpha: float, beta: float, gamma: float) -> None:
        """``miopenSetOpArgsActivForward(alpha=1, beta=0, activ alpha, beta, gamma)``."""
    def close(self) -> None:
        """Destroy the arguments; idempotent."""

def execute_fusion(handle: int, plan: FusionPlan, x: TensorDescriptor, x_ptr: int, y: TensorDescriptor,
                   y_ptr: int, args: OperatorArgs, workspace: int = 0, workspace_size: int = 0) -> None:
    """Run a compiled plan (``_v2`` with the workspace where present)."""
def bn_forward_inference(handle: int, x: TensorDescriptor, x_ptr: int, y: TensorDescriptor, y_ptr: int,
                         scale_d: TensorDescriptor, bias_d: TensorDescriptor, mean_d: TensorDescriptor,
                         var_d: TensorDescriptor, scale: int, bias: int, mean: int, variance: int,
                         epsilon: float, activation: ActivationDescriptor | None = None) -> None:
    """Spatial batchnorm inference with the running variance (``_V2`` / ``*Activation``)."""
def bn_forward_training(handle: int, x: TensorDescriptor, x_ptr: int, y: TensorDescriptor, y_ptr: int,
                        scale_d: TensorDescriptor, bias_d: TensorDescriptor, mean_d: TensorDescriptor,
                        var_d: TensorDescriptor, scale: int, bias: int, exp_avg_factor: float,
                        running_mean: int, running_variance: int, epsilon: float, saved_mean: int,
                        saved_inv_variance: int, activation: ActivationDescriptor | None = None) -> None:
    """Spatial batchnorm training (``_V2`` / ``*Activation``); running stats in place."""
def bn_backward(handle: int, x: TensorDescriptor, x_ptr: int, dy: TensorDescriptor, dy_ptr: int,
                dx: TensorDescriptor, dx_ptr: int, scale_d: TensorDescriptor, bias_d: TensorDescriptor,
                mean_d: TensorDescriptor, var_d: TensorDescriptor, scale: int, bias: int, dscale: int,
                dbias: int, epsilon: float, saved_mean: int, saved_inv_variance: int,
                activation: ActivationDescriptor | None = None) -> None:
    """Spatial batchnorm backward with saved statistics (``_V2`` / ``*Activation``)."""
def activation_forward(handle: int, activation: ActivationDescriptor, x: TensorDescriptor, x_ptr: int,
                       y: TensorDescriptor, y_ptr: int) -> None:
    """y = act(x)."""
def activation_backward(handle: int, activation: ActivationDescriptor, y: TensorDescriptor, y_ptr: int,
                        dy: TensorDescriptor, dy_ptr: int, x: TensorDescriptor, x_ptr: int,
                        dx: TensorDescriptor, dx_ptr: int) -> None:
    """dx = act'(x) * dy."""
def conv_forward_bias(handle: int, b: TensorDescriptor, b_ptr: int, y: TensorDescriptor, y_ptr: int) -> None:
    """y += b (``miopenConvolutionForwardBias``, alpha 1, beta 0)."""
def op_tensor(handle: int, op: int, alpha1: float, a: TensorDescriptor, a_ptr: int, alpha2: float,
              b: TensorDescriptor, b_ptr: int, beta: float, c: TensorDescriptor, c_ptr: int) -> None:
    """C = op(alpha1 * A, alpha2 * B) + beta * C."""
