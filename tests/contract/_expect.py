"""What the cuDNN provider's calls must look like, checked against a fake's log.

The expected values come from the graph (dims, strides, conv attributes), from the
vendor headers (enum values, probed by compiling against them: fixture ``hdr``) and
from the fake's own answers in the same log (the heuristic list it returned, the
workspace sizes it reported), never from the provider's code.
"""
from __future__ import annotations

import numpy as np

from ._fakes import between, calls, dnn_calls

__all__ = ["HEADER_NAMES", "ALGOS", "FFTS", "WINOGRADS", "float_declines", "Header",
           "DTYPE_ENUM", "FORBIDDEN_PER_EXECUTION", "expected_algorithm", "assert_tensor_desc",
           "assert_filter_desc", "assert_no_setup", "exec_calls", "assert_results", "algo_value"]

# algorithm names per direction, as in cudnn_cnn.h (the enumerator minus its prefix)
ALGOS = (
    ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
     "WINOGRAD_NONFUSED"),
    ("0", "1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    ("0", "1", "FFT", "3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
)
_ALGO_PREFIX = ("CUDNN_CONVOLUTION_FWD_ALGO_", "CUDNN_CONVOLUTION_BWD_DATA_ALGO_",
                "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_")
FFTS = frozenset({"FFT", "FFT_TILING"})
WINOGRADS = frozenset({"WINOGRAD", "WINOGRAD_NONFUSED"})


def float_declines(name: str, allow_fft: bool = True) -> bool:
    """Whether the documented policy for FLOAT I/O (docs/guide/gpu.md, "Algorithm choice";
    providers/cudnn/_conv.ConvSetup.accurate) declines algorithm ``name``, in every
    direction alike: Winograd always; FFT / FFT_TILING only with ``cudnn_legacy.allow_fft
    = 0`` (weight gradients declined FFT until bench/diag_wgrad_fft.py measured it)."""
    return name in WINOGRADS or (name in FFTS and not allow_fft)


HEADER_NAMES = [p + a for p, names in zip(_ALGO_PREFIX, ALGOS) for a in names] + [
    "CUDNN_DATA_FLOAT", "CUDNN_DATA_HALF", "CUDNN_DATA_BFLOAT16", "CUDNN_TENSOR_NCHW",
    "CUDNN_TENSOR_NHWC", "CUDNN_CROSS_CORRELATION", "CUDNN_CONVOLUTION", "CUDNN_DEFAULT_MATH",
    "CUDNN_TENSOR_OP_MATH", "CUDNN_FMA_MATH", "CUDNN_DETERMINISTIC", "CUDNN_NON_DETERMINISTIC",
    "CUDNN_ACTIVATION_RELU", "CUDNN_ACTIVATION_CLIPPED_RELU", "CUDNN_ACTIVATION_IDENTITY",
    "CUDNN_NOT_PROPAGATE_NAN", "CUDNN_PROPAGATE_NAN", "CUDNN_BATCHNORM_SPATIAL",
    "CUDNN_BATCHNORM_SPATIAL_PERSISTENT", "CUDNN_BATCHNORM_OPS_BN",
    "CUDNN_BATCHNORM_OPS_BN_ACTIVATION", "CUDNN_OP_TENSOR_ADD", "CUDNN_OP_TENSOR_MUL",
    "CUDNN_STATUS_SUCCESS", "CUDNN_STATUS_BAD_PARAM", "CUDNN_STATUS_NOT_SUPPORTED",
    "CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_INTERNAL_ERROR", "CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
    "CUDNN_STATUS_BAD_PARAM_NULL_POINTER", "CUDNN_VERSION",
    "cudaSuccess", "cudaErrorLaunchFailure", "cudaErrorIllegalAddress", "cudaErrorMemoryAllocation",
    "cudaErrorNotReady", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
    "cudaMemcpyDeviceToDevice", "cudaStreamNonBlocking", "cudaEventBlockingSync",
    "cudaEventDisableTiming", "cudaMemPoolAttrReleaseThreshold", "cudaErrorIllegalState",
    "cudaErrorStreamCaptureInvalidated", "cudaErrorStreamCaptureUnsupported",
    "cudaStreamCaptureStatusNone",
]


class Header(dict):
    """Header constants by name (``hdr.CUDNN_DATA_HALF`` or ``hdr["..."]``)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{name} was not probed: add it to _expect.HEADER_NAMES") from None


DTYPE_ENUM = {"float32": "CUDNN_DATA_FLOAT", "float16": "CUDNN_DATA_HALF",
              "bfloat16": "CUDNN_DATA_BFLOAT16"}
_HD_DTYPE = {1: "CUDNN_DATA_FLOAT", 2: "CUDNN_DATA_HALF", 3: "CUDNN_DATA_BFLOAT16"}  # hd.DataType


def algo_value(hdr, direction: int, name: str) -> int:
    return hdr[_ALGO_PREFIX[direction] + name.removeprefix("ALGO_")]


def algo_name(hdr, direction: int, value: int) -> str:
    for name in ALGOS[direction]:
        if hdr[_ALGO_PREFIX[direction] + name] == value:
            return name if not name.isdigit() else f"ALGO_{name}"
    raise AssertionError(f"algorithm value {value} is not in cudnn_cnn.h for direction {direction}")


def expected_algorithm(hdr, perf: list[dict], direction: int, float_io: bool, limit=None,
                       only=None, deterministic: bool = False, allow_fft: bool = True) -> dict:
    """The heuristic entry the provider's documented policy picks: the first with status
    SUCCESS that is, for HALF/BFLOAT16 I/O, deterministic and, for FLOAT I/O, not declined
    by :func:`float_declines` (``allow_fft``: knob ``cudnn_legacy.allow_fft``) and
    deterministic only with ``deterministic`` (knob ``cudnn_legacy.deterministic``),
    within the workspace limit (docs/guide/gpu.md, "Algorithm choice"; providers/cudnn
    docstrings)."""
    for e in perf:
        name = algo_name(hdr, direction, e["algo"])
        if e["status"] != hdr.CUDNN_STATUS_SUCCESS:
            continue
        if e["determinism"] != hdr.CUDNN_DETERMINISTIC and (deterministic or not float_io):
            continue
        if float_io and float_declines(name, allow_fft):
            continue
        if limit is not None and e["memory"] > limit:
            continue
        if only is not None and name not in only:
            continue
        return dict(e, name=name)
    raise AssertionError(f"no heuristic entry fits the policy: {perf}")


def assert_tensor_desc(hdr, desc: dict, tensor: dict, what: str) -> None:
    """A logged tensor descriptor has the graph tensor's dims, element strides and dtype."""
    assert desc is not None, f"{what}: no descriptor"
    assert tuple(desc["dims"]) == tuple(tensor["dims"]), f"{what}: dims {desc['dims']} != {tensor['dims']}"
    assert tuple(desc["strides"]) == tuple(tensor["strides"]), (
        f"{what}: strides {desc['strides']} != the graph's {tensor['strides']}")
    assert desc["dtype"] == hdr[_HD_DTYPE[tensor["dtype"]]], (
        f"{what}: cudnnDataType {desc['dtype']} != {_HD_DTYPE[tensor['dtype']]}")


def assert_filter_desc(hdr, desc: dict, tensor: dict, channels_last: bool, what: str) -> None:
    """A filter descriptor: the tensor's dims and dtype; format NHWC for a channels-last
    filter (packed K, [T,] R, S, C strides), NCHW for packed KCRS."""
    assert tuple(desc["dims"]) == tuple(tensor["dims"]), f"{what}: dims {desc['dims']} != {tensor['dims']}"
    assert desc["dtype"] == hdr[_HD_DTYPE[tensor["dtype"]]], f"{what}: dtype {desc['dtype']}"
    want = hdr.CUDNN_TENSOR_NHWC if channels_last else hdr.CUDNN_TENSOR_NCHW
    assert desc["format"] == want, f"{what}: format {desc['format']}, want {want}"


# calls that set something up: never part of an execution (issue 9, capture-safe plans)
FORBIDDEN_PER_EXECUTION = ("cudaMalloc", "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaFree",
                           "cudaFreeAsync", "cudaMallocHost", "cudaHostAlloc", "cudaStreamCreate*",
                           "cudaStreamDestroy", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                           "cudaEventCreate*", "cudaEventDestroy", "cudnnCreate*", "cudnnDestroy*",
                           "cudnnSet*Descriptor", "cudnnSetConvolution*", "cudnnGet*", "cudnnFind*",
                           "cudaMemcpy", "cudaMemset")


def assert_no_setup(records: list[dict], what: str, *, cold: bool = False) -> None:
    """No allocation, free, synchronisation, handle / descriptor creation or algorithm
    query among ``records``. ``cold``: the first execution on a stream, where the stream
    backend may still grow its pool of completion events (cudaEventCreate)."""
    bad = []
    for pattern in FORBIDDEN_PER_EXECUTION:
        if cold and pattern == "cudaEventCreate*":
            continue
        bad += [r["fn"] for r in calls(records, pattern)]
    assert not bad, f"{what}: setup calls inside an execution: {bad}"


def exec_calls(log, i: int) -> list[dict]:
    """Records of execution ``i`` (between the marks exec<i> and the next one)."""
    nxt = f"exec{i + 1}"
    labels = [r["label"] for r in log if r["rec"] == "mark"]
    return between(log, f"exec{i}", nxt if nxt in labels else "read")


_SETUP = ("cudnnCreate", "cudnnDestroy", "cudnnSetStream", "cudnnGetStream")


def dnn_names(records) -> list[str]:
    """The DNN work an execution enqueued: cuDNN calls (handle setup and stream binding
    aside: see ``assert_no_setup``) and device-to-device copies, in order."""
    return [r["fn"] for r in dnn_calls(records)
            if not (r["fn"] in _SETUP or r["fn"].endswith("Descriptor"))]


def assert_results(case) -> None:
    """Every output of a pattern case within its tolerance of the float64 oracle."""
    from oracle._cases import assert_close
    for name, got, want, (atol, rtol) in case["checks"]:
        assert_close(np.asarray(got), want, atol, rtol,
                     f"{case['plan']['pattern']} output '{name}' (algorithm {case['plan']['algorithm']})")
