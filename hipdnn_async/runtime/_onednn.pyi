"""Type stubs of the compiled oneDNN binding (``src_pyx/_onednn.pyx``)."""
from typing import Any, Callable, Sequence

import numpy as np

from ._loader import LibraryTable, LoadRecord

STATUS_SUCCESS: int
STATUS_OUT_OF_MEMORY: int
STATUS_INVALID_ARGUMENTS: int
STATUS_UNIMPLEMENTED: int
STATUS_LAST_IMPL_REACHED: int
STATUS_RUNTIME_ERROR: int
STATUS_NOT_REQUIRED: int
STATUS_INVALID_GRAPH: int
STATUS_INVALID_GRAPH_OP: int
STATUS_INVALID_SHAPE: int
STATUS_INVALID_DATA_TYPE: int
DATA_F16: int
DATA_BF16: int
DATA_F32: int
ENGINE_CPU: int
STREAM_DEFAULT_FLAGS: int
FORMAT_TAG_ANY: int
FORMAT_TAG_NCW16C: int
FORMAT_TAG_NCHW16C: int
FORMAT_TAG_NCDHW16C: int
PROP_FORWARD_TRAINING: int
PROP_FORWARD_INFERENCE: int
PROP_BACKWARD: int
PROP_BACKWARD_DATA: int
PROP_BACKWARD_WEIGHTS: int
CONVOLUTION_DIRECT: int
ELTWISE_RELU: int
ELTWISE_ELU: int
ELTWISE_LINEAR: int
ELTWISE_CLIP: int
ELTWISE_CLIP_V2: int
ELTWISE_SQRT: int
BINARY_ADD: int
BINARY_MUL: int
BINARY_DIV: int
BINARY_SUB: int
USE_GLOBAL_STATS: int
USE_SCALE: int
USE_SHIFT: int
FUSE_NORM_RELU: int
SCRATCHPAD_MODE_USER: int
QUERY_IMPL_INFO_STR: int
QUERY_SRC_MD: int
QUERY_DIFF_SRC_MD: int
QUERY_WEIGHTS_MD: int
QUERY_DIFF_WEIGHTS_MD: int
QUERY_DST_MD: int
QUERY_DIFF_DST_MD: int
QUERY_WORKSPACE_MD: int
QUERY_SCRATCHPAD_MD: int
ARG_SRC: int
ARG_SRC_1: int
ARG_DST: int
ARG_WEIGHTS: int
ARG_BIAS: int
ARG_MEAN: int
ARG_VARIANCE: int
ARG_SCALE: int
ARG_SHIFT: int
ARG_WORKSPACE: int
ARG_SCRATCHPAD: int
ARG_DIFF_SRC: int
ARG_DIFF_DST: int
ARG_DIFF_WEIGHTS: int
ARG_DIFF_BIAS: int
ARG_DIFF_SCALE: int
ARG_DIFF_SHIFT: int
ARG_ATTR_MULTIPLE_POST_OP_BASE: int
RUNTIME_SEQ: int
RUNTIME_OMP: int
RUNTIME_TBB: int
RUNTIME_THREADPOOL: int
ISA_NAMES: dict[int, str]
RUNTIME_NAMES: dict[int, str]
MIN_VERSION: tuple[int, int, int]
MAX_NDIMS: int
NAMES: tuple[str, ...]
STATUS: dict[int, tuple[str, type]]
MEM_ARRAY: int
MEM_WORKSPACE: int
MEM_OWNED: int

class Onednn(LibraryTable):
    """The oneDNN symbol table (one per process: ``TABLE``)."""


TABLE: Onednn

def n_slots() -> int:
    """Function pointers in the table (equals ``len(NAMES)``)."""

def load(path: str, found_via: str = ...) -> LoadRecord:
    """Open oneDNN at ``path`` once and create its CPU engine."""

def fork_reason() -> str | None:
    """Why oneDNN may not run in this process (a fork child of a process that ran
    oneDNN primitives), or None."""

def loaded() -> LoadRecord | None:
    """The load record, or None before ``load``."""

def version() -> tuple[int, int, int, str, str]:
    """(major, minor, patch, git hash, CPU runtime name)."""

def effective_isa() -> int:
    """The dnnl_cpu_isa_t value oneDNN dispatches to."""

def isa_name(isa: int) -> str:
    """oneDNN's name for an ISA value."""

def max_threads() -> int | None:
    """OpenMP threads a primitive uses from the calling thread."""


class MemoryDesc:
    """A dnnl_memory_desc_t: dims, data type, strides or a format tag."""

    dims: tuple[int, ...]
    data_type: int
    def __init__(self, dims: Sequence[int] | None = ..., data_type: int = ...,
                 strides: Sequence[int] | None = ..., tag: int | None = ...) -> None:
        """init."""
    @property
    def size(self) -> int:
        """size."""
    def equals(self, other: MemoryDesc) -> bool:
        """equals."""
    def close(self) -> None:
        """close."""

class PrimitiveDesc:
    """A dnnl_primitive_desc_t at one implementation."""

    kind: str
    @property
    def impl_name(self) -> str:
        """impl name."""
    @property
    def scratchpad_size(self) -> int:
        """scratchpad size."""
    def md(self, query: int, index: int = ...) -> MemoryDesc | None:
        """md."""
    def next_impl(self) -> bool:
        """next impl."""
    def clone(self) -> PrimitiveDesc:
        """clone."""
    def close(self) -> None:
        """close."""

class Primitive:
    """A dnnl_primitive_t (JIT code made at construction)."""

    desc: PrimitiveDesc
    def __init__(self, desc: PrimitiveDesc) -> None:
        """init."""
    def close(self) -> None:
        """close."""

MAX_REPEAT: int

class Program:
    """A prebuilt execution: primitives over memory objects made once."""

    n_arrays: int
    workspace_size: int
    def __init__(self, mems: Sequence[tuple[MemoryDesc, int, Any]],
                 steps: Sequence[tuple[Primitive, Sequence[tuple[int, int]]]], n_arrays: int,
                 workspace_size: int = ...,
                 repeat: tuple[int, int, int, Sequence[int]] | None = ...) -> None:
        """init."""
    def set_step(self, index: int, on: bool) -> None:
        """set step."""
    def run(self, arrays: tuple[np.ndarray, ...], workspace: np.ndarray | None = ...) -> None:
        """run."""
    def close(self) -> None:
        """close."""

class Launch:
    """A Program bound to one execution's arrays: the submit path's work item."""

    def __init__(self, program: Program, arrays: tuple[np.ndarray, ...],
                 workspace: np.ndarray | None = ..., counter: Any = ..., label: str | None = ...,
                 before: Callable[[], None] | None = ...,
                 after: Callable[[], None] | None = ..., *,
                 hooks_read_ws: bool = True) -> None:
        """init."""
    def with_workspace(self, workspace: np.ndarray | None) -> Launch | None:
        """This launch on another workspace (None: a template), or None where its host
        hooks may read the workspace (``hooks_read_ws``); ValueError where the workspace
        is too small."""
    def __call__(self) -> None:
        """call."""

def conv_forward(prop: int, src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None,
                 dst: MemoryDesc, strides: Sequence[int], dilates: Sequence[int],
                 padding_l: Sequence[int], padding_r: Sequence[int],
                 post_ops: list[tuple[int, float, float]] | None = ...) -> PrimitiveDesc:
    """conv forward."""
def conv_backward_data(diff_src: MemoryDesc, weights: MemoryDesc, diff_dst: MemoryDesc,
                       strides: Sequence[int], dilates: Sequence[int],
                       padding_l: Sequence[int], padding_r: Sequence[int],
                       hint: PrimitiveDesc) -> PrimitiveDesc:
    """conv backward data."""
def conv_backward_weights(src: MemoryDesc, diff_weights: MemoryDesc, diff_dst: MemoryDesc,
                          strides: Sequence[int], dilates: Sequence[int],
                          padding_l: Sequence[int], padding_r: Sequence[int],
                          hint: PrimitiveDesc) -> PrimitiveDesc:
    """conv backward weights."""
def bn_forward(prop: int, src: MemoryDesc, dst: MemoryDesc, epsilon: float,
               flags: int) -> PrimitiveDesc:
    """bn forward."""
def bn_backward(prop: int, diff_src: MemoryDesc, diff_dst: MemoryDesc, src: MemoryDesc,
                epsilon: float, flags: int, hint: PrimitiveDesc) -> PrimitiveDesc:
    """bn backward."""
def binary(alg: int, src0: MemoryDesc, src1: MemoryDesc, dst: MemoryDesc,
           post_ops: list[tuple] | None = ...) -> PrimitiveDesc:
    """binary."""
def reorder(src: MemoryDesc, dst: MemoryDesc) -> PrimitiveDesc:
    """reorder."""
