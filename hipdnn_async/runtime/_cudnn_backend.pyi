"""Stubs of the cuDNN 9 backend (graph) API bindings (``src_pyx/_cudnn_backend.pyx``).

Backend descriptors (create, set/get attributes, finalize, destroy) and plan execution on
a handle's stream; the symbol table (``BackendTable``, a ``_loader.LibraryTable``) is
filled by name at ``load``.
Constants are cudnn_graph.h's (cuDNN 9) without the ``CUDNN_`` prefix. A non-zero status
raises the type of cuDNN's status table (``_cudnn.STATUS``); a missing symbol a
``LibraryError``.
"""
from collections.abc import Sequence
from typing import Any

from hipdnn_async._errors import HipdnnError

from ._loader import LibraryTable, LoadRecord

BACKEND_POINTWISE_DESCRIPTOR: int
BACKEND_CONVOLUTION_DESCRIPTOR: int
BACKEND_ENGINE_DESCRIPTOR: int
BACKEND_ENGINECFG_DESCRIPTOR: int
BACKEND_ENGINEHEUR_DESCRIPTOR: int
BACKEND_EXECUTION_PLAN_DESCRIPTOR: int
BACKEND_KNOB_CHOICE_DESCRIPTOR: int
BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR: int
BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: int
BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: int
BACKEND_OPERATION_POINTWISE_DESCRIPTOR: int
BACKEND_OPERATIONGRAPH_DESCRIPTOR: int
BACKEND_VARIANT_PACK_DESCRIPTOR: int
BACKEND_TENSOR_DESCRIPTOR: int
BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR: int
BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR: int
TYPE_HANDLE: int
TYPE_DATA_TYPE: int
TYPE_BOOLEAN: int
TYPE_INT64: int
TYPE_FLOAT: int
TYPE_DOUBLE: int
TYPE_VOID_PTR: int
TYPE_CONVOLUTION_MODE: int
TYPE_HEUR_MODE: int
TYPE_KNOB_TYPE: int
TYPE_NAN_PROPOGATION: int
TYPE_NUMERICAL_NOTE: int
TYPE_POINTWISE_MODE: int
TYPE_BACKEND_DESCRIPTOR: int
TYPE_BEHAVIOR_NOTE: int
TYPE_INT32: int
TYPE_CHAR: int
TYPE_NORM_MODE: int
TYPE_NORM_FWD_PHASE: int
ATTR_POINTWISE_MODE: int
ATTR_POINTWISE_MATH_PREC: int
ATTR_POINTWISE_NAN_PROPAGATION: int
ATTR_POINTWISE_RELU_LOWER_CLIP: int
ATTR_POINTWISE_RELU_UPPER_CLIP: int
ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE: int
ATTR_CONVOLUTION_COMP_TYPE: int
ATTR_CONVOLUTION_CONV_MODE: int
ATTR_CONVOLUTION_DILATIONS: int
ATTR_CONVOLUTION_FILTER_STRIDES: int
ATTR_CONVOLUTION_POST_PADDINGS: int
ATTR_CONVOLUTION_PRE_PADDINGS: int
ATTR_CONVOLUTION_SPATIAL_DIMS: int
ATTR_ENGINEHEUR_MODE: int
ATTR_ENGINEHEUR_OPERATION_GRAPH: int
ATTR_ENGINEHEUR_RESULTS: int
ATTR_ENGINECFG_ENGINE: int
ATTR_ENGINECFG_KNOB_CHOICES: int
ATTR_ENGINECFG_WORKSPACE_SIZE: int
ATTR_EXECUTION_PLAN_HANDLE: int
ATTR_EXECUTION_PLAN_ENGINE_CONFIG: int
ATTR_EXECUTION_PLAN_WORKSPACE_SIZE: int
ATTR_EXECUTION_PLAN_JSON_REPRESENTATION: int
ATTR_KNOB_CHOICE_KNOB_TYPE: int
ATTR_KNOB_CHOICE_KNOB_VALUE: int
ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA: int
ATTR_OPERATION_CONVOLUTION_FORWARD_BETA: int
ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC: int
ATTR_OPERATION_CONVOLUTION_FORWARD_W: int
ATTR_OPERATION_CONVOLUTION_FORWARD_X: int
ATTR_OPERATION_CONVOLUTION_FORWARD_Y: int
ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA: int
ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA: int
ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC: int
ATTR_OPERATION_CONVOLUTION_BWD_DATA_W: int
ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX: int
ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY: int
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA: int
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA: int
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC: int
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW: int
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X: int
ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY: int
ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR: int
ATTR_OPERATION_POINTWISE_XDESC: int
ATTR_OPERATION_POINTWISE_BDESC: int
ATTR_OPERATION_POINTWISE_YDESC: int
ATTR_OPERATION_POINTWISE_DXDESC: int
ATTR_OPERATION_POINTWISE_DYDESC: int
ATTR_OPERATIONGRAPH_HANDLE: int
ATTR_OPERATIONGRAPH_OPS: int
ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: int
ATTR_TENSOR_BYTE_ALIGNMENT: int
ATTR_TENSOR_DATA_TYPE: int
ATTR_TENSOR_DIMENSIONS: int
ATTR_TENSOR_STRIDES: int
ATTR_TENSOR_UNIQUE_ID: int
ATTR_TENSOR_IS_VIRTUAL: int
ATTR_TENSOR_IS_BY_VALUE: int
ATTR_VARIANT_PACK_UNIQUE_IDS: int
ATTR_VARIANT_PACK_DATA_POINTERS: int
ATTR_VARIANT_PACK_WORKSPACE: int
ATTR_ENGINE_OPERATION_GRAPH: int
ATTR_ENGINE_GLOBAL_INDEX: int
ATTR_ENGINE_NUMERICAL_NOTE: int
ATTR_ENGINE_BEHAVIOR_NOTE: int
ATTR_OPERATION_NORM_FWD_MODE: int
ATTR_OPERATION_NORM_FWD_PHASE: int
ATTR_OPERATION_NORM_FWD_XDESC: int
ATTR_OPERATION_NORM_FWD_MEAN_DESC: int
ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC: int
ATTR_OPERATION_NORM_FWD_SCALE_DESC: int
ATTR_OPERATION_NORM_FWD_BIAS_DESC: int
ATTR_OPERATION_NORM_FWD_EPSILON_DESC: int
ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC: int
ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC: int
ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC: int
ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC: int
ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC: int
ATTR_OPERATION_NORM_FWD_YDESC: int
ATTR_OPERATION_NORM_BWD_MODE: int
ATTR_OPERATION_NORM_BWD_XDESC: int
ATTR_OPERATION_NORM_BWD_MEAN_DESC: int
ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC: int
ATTR_OPERATION_NORM_BWD_DYDESC: int
ATTR_OPERATION_NORM_BWD_SCALE_DESC: int
ATTR_OPERATION_NORM_BWD_EPSILON_DESC: int
ATTR_OPERATION_NORM_BWD_DSCALE_DESC: int
ATTR_OPERATION_NORM_BWD_DBIAS_DESC: int
ATTR_OPERATION_NORM_BWD_DXDESC: int
DATA_FLOAT: int
DATA_DOUBLE: int
DATA_HALF: int
DATA_BFLOAT16: int
CONVOLUTION: int
CROSS_CORRELATION: int
NOT_PROPAGATE_NAN: int
PROPAGATE_NAN: int
POINTWISE_ADD: int
POINTWISE_IDENTITY: int
POINTWISE_RELU_FWD: int
POINTWISE_RELU_BWD: int
BATCH_NORM: int
NORM_FWD_INFERENCE: int
NORM_FWD_TRAINING: int
HEUR_MODE_INSTANT: int
HEUR_MODE_B: int
HEUR_MODE_FALLBACK: int
HEUR_MODE_A: int
NUMERICAL_NOTE_TENSOR_CORE: int
NUMERICAL_NOTE_DOWN_CONVERT_INPUTS: int
NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION: int
NUMERICAL_NOTE_FFT: int
NUMERICAL_NOTE_NONDETERMINISTIC: int
NUMERICAL_NOTE_WINOGRAD: int
NUMERICAL_NOTE_WINOGRAD_TILE_4x4: int
NUMERICAL_NOTE_WINOGRAD_TILE_6x6: int
NUMERICAL_NOTE_WINOGRAD_TILE_13x13: int
NUMERICAL_NOTE_STRICT_NAN_PROP: int
NUMERICAL_NOTE_TYPE_COUNT: int
BEHAVIOR_NOTE_RUNTIME_COMPILATION: int
BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API: int
BEHAVIOR_NOTE_TYPE_COUNT: int
STATUS_SUCCESS: int
STATUS_NOT_INITIALIZED: int
STATUS_BAD_PARAM: int
STATUS_BAD_PARAM_NOT_FINALIZED: int
STATUS_NOT_SUPPORTED: int
STATUS_NOT_SUPPORTED_GRAPH_PATTERN: int
STATUS_NOT_SUPPORTED_SHAPE: int
STATUS_INTERNAL_ERROR: int
STATUS_EXECUTION_FAILED: int
NAMES: tuple[str, ...]
REQUIRED: tuple[str, ...]

class BackendTable(LibraryTable):
    """The backend-API symbol table of ``libcudnn.so.9`` (one per process: ``TABLE``)."""

    def __init__(self) -> None:
        """An empty table; ``load`` fills it."""

TABLE: BackendTable

class Descriptor:
    """Owns one backend descriptor of type ``kind`` (BACKEND_*), destroyed on ``close()``."""

    kind: int
    finalized: bool

    def __init__(self, kind: int) -> None:
        """``cudnnBackendCreateDescriptor(kind)``."""
    @property
    def address(self) -> int:
        """The descriptor handle as an int (0 once closed)."""
    def close(self) -> None:
        """Destroy the descriptor; idempotent."""
    def set_int64(self, attr: int, values: int | Sequence[int]) -> None:
        """Set an INT64 attribute to one int or a sequence of ints (at most 64)."""
    def set_enum(self, attr: int, attr_type: int, value: int) -> None:
        """Set a 4-byte enum attribute of type ``attr_type`` (TYPE_*)."""
    def set_bool(self, attr: int, value: bool) -> None:
        """Set a BOOLEAN attribute."""
    def set_float(self, attr: int, value: float) -> None:
        """Set a FLOAT attribute."""
    def set_double(self, attr: int, value: float) -> None:
        """Set a DOUBLE attribute."""
    def set_handle(self, attr: int, handle: int) -> None:
        """Set a HANDLE attribute to a ``cudnnHandle_t`` given as an int."""
    def set_descriptors(self, attr: int, descriptors: "Descriptor | Sequence[Descriptor]") -> None:
        """Set a BACKEND_DESCRIPTOR attribute to one descriptor or a sequence of them."""
    def set_chars(self, attr: int, text: bytes) -> None:
        """Set a CHAR attribute (a serialized execution plan)."""
    def finalize(self) -> None:
        """``cudnnBackendFinalize``; NotSupportedError for what cuDNN cannot take."""
    def count(self, attr: int, attr_type: int) -> int:
        """How many elements attribute ``attr`` holds."""
    def get_int64(self, attr: int, requested: int = 1) -> list[int]:
        """An INT64 attribute as a list of at most ``requested`` ints."""
    def get_enums(self, attr: int, attr_type: int, requested: int) -> list[int]:
        """A 4-byte enum attribute as a list of at most ``requested`` ints."""
    def get_descriptors(self, attr: int, kind: int, requested: int) -> list["Descriptor"]:
        """A BACKEND_DESCRIPTOR attribute: ``requested`` new descriptors of type ``kind``, filled."""
    def get_chars(self, attr: int) -> bytes:
        """A CHAR attribute as bytes (trailing NULs dropped)."""

def load(path: str, found_via: str = "explicit") -> LoadRecord:
    """Open cuDNN at ``path`` and fill the backend table once; idempotent."""
def loaded() -> LoadRecord | None:
    """The ``LoadRecord`` of the loaded library, or None."""
def available() -> tuple[bool, str]:
    """``(ok, reason)``: whether the backend API can be used."""
def loaded_path() -> str | None:
    """The library path the table was filled from, or None."""
def version() -> int:
    """cudnnGetVersion()."""
def status_name(status: int) -> str:
    """cuDNN's name of ``status``, or ``"?"``."""
def last_error() -> str:
    """cuDNN's last error message of this thread."""
def error_for(call: str, status: int, name: str | None = None,
              text: str | None = None) -> HipdnnError:
    """The typed error of ``status`` returned by ``call``."""
def execute(handle: int, plan: Descriptor, uids: Sequence[int], pointers: Sequence[int],
            workspace: int = 0) -> None:
    """Execute a finalized execution plan on ``handle``'s stream."""


class PlanLock:
    """The lock of one plan's launches: a context manager; GraphLaunch takes it in C."""

    def __enter__(self) -> "PlanLock":
        """Take the lock (the GIL released while it waits)."""
    def __exit__(self, *exc: Any) -> bool:
        """Release the lock."""


class StreamPack:
    """The variant pack of one GraphLaunch on one stream and the CUDA graph captured from
    it (internal to GraphLaunch; no Python API)."""


class GraphLaunch:
    """One bound execution of a plan (the submit path): a variant pack is built on the
    first call from each stream and reused until that stream's workspace moves; with
    ``graph_after`` > 0, after that many direct executions of one pack the next is
    captured into a CUDA graph and later ones launch it."""

    executions: int
    graph_launches: int
    counter: Any
    label: str

    def __init__(self, plan: Descriptor, uids: Sequence[int], pack: Any, lock: Any,
                 counter: Any = None, graph_after: int = 0, label: str = "") -> None:
        """``pack`` is a ``runtime.PackSpec`` (the pointers, and the stream resources the
        handle and workspace come from); a failed execution's error starts with
        ``label`` (the plan) and names the failing call."""
    def __call__(self) -> None:
        """Execute once on the launching stream (cudnnBackendExecute with the GIL released,
        or a launch of the graph captured from it)."""
