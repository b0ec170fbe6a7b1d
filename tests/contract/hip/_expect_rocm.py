"""What the MIOpen provider's calls must look like, checked against the fakes' log.

Expected values come from the graph (dims, strides, conv attributes), from MIOpen's
headers (the enum values: ``_abi_rocm`` checks the binding's constants against them, so
the tests may name them through ``_miopen``), and from the fake's own answers in the same
log (the solution list it returned, the workspace sizes it reported), never from the
provider's code.
"""
from __future__ import annotations

from hipdnn_async.runtime import _miopen

from .._fakes import calls

__all__ = ["NEWER", "DTYPE", "FORBIDDEN_PER_EXECUTION", "miopen_names", "assert_no_setup",
           "assert_tensor_desc", "fuses", "declines", "expected_sequence", "channels_last"]

NEWER = (3, 5, 0)      # the first MIOpen with the *Activation / _v2 / CLAMP entry points
# hd.DataType value -> miopenDataType_t (miopen.h: miopenHalf 0, miopenFloat 1, miopenBFloat16 5)
DTYPE = {1: _miopen.DATA_FLOAT, 2: _miopen.DATA_HALF, 3: _miopen.DATA_BFLOAT16}
CHANNELS_LAST = ("NHWC", "NDHWC")

# MIOpen and HIP calls that set something up, search or compile: never inside an execution
FORBIDDEN_PER_EXECUTION = (
    "miopenCreate*", "miopenDestroy*", "miopenSet*Descriptor", "miopenInit*", "miopenGet*",
    "miopenFind*", "miopenConvolution*GetSolution*", "miopenConvolution*CompileSolution",
    "miopenCompileFusionPlan", "miopenFusionPlan*", "miopenSetTuningPolicy",
    "miopenSetConvolution*", "miopenSetFindOption*", "miopenSetProblem*",
    "hipMalloc", "hipMallocAsync", "hipFree", "hipFreeAsync", "hipHostMalloc", "hipHostAlloc",
    "hipStreamCreate*", "hipStreamDestroy", "hipStreamSynchronize", "hipDeviceSynchronize",
    "hipEventCreate*", "hipEventDestroy", "hipMemcpy", "hipMemset")


def miopen_names(records) -> list[str]:
    """The work an execution enqueued: MIOpen calls and device-to-device copies, in order."""
    return [r["fn"] for r in records if r["rec"] == "call" and (
        r["fn"].startswith("miopen") or (r["fn"] == "hipMemcpyAsync" and r.get("kind") == 3))]


def assert_no_setup(records, what: str, *, miopen_only: bool = False) -> None:
    """None of FORBIDDEN_PER_EXECUTION (its MIOpen part only, with ``miopen_only``)."""
    bad = [r["fn"] for pattern in FORBIDDEN_PER_EXECUTION for r in calls(records, pattern)
           if not miopen_only or pattern.startswith("miopen")]
    assert not bad, f"{what}: setup calls inside an execution: {bad}"


def assert_tensor_desc(desc: dict, tensor: dict, what: str) -> None:
    """A tensor descriptor carries the graph tensor's dims, element strides and type."""
    assert tuple(desc["dims"]) == tuple(tensor["dims"]), f"{what}: dims {desc['dims']} != {tensor['dims']}"
    assert tuple(desc["strides"]) == tuple(tensor["strides"]), \
        f"{what}: strides {desc['strides']} != {tensor['strides']}"
    assert desc["dtype"] == DTYPE[tensor["dtype"]], f"{what}: dtype {desc['dtype']}"


def channels_last(layout: str) -> bool:
    return layout in CHANNELS_LAST


def fuses(version: tuple, dtype: str, layout: str) -> bool:
    """Whether the fake MIOpen compiles the conv + bias + activation fusion plan (its rule,
    fakes/fake_miopen.cpp: 2-D ungrouped; FLOAT only before 3.5)."""
    return layout in ("NCHW", "NHWC") and (tuple(version) >= NEWER or dtype == "float32")


def declines(pattern: str, dtype: str, version: tuple) -> bool:
    """Whether the provider declines the case: batchnorm inference + DReLU + backward of
    HALF/BFLOAT16 data with the oracle's FLOAT intermediates before MIOpen 3.5 (the
    composed form would round the recomputed BN output to the I/O type)."""
    return (pattern == "BN_INFERENCE_DRELU_BACKWARD" and dtype != "float32"
            and tuple(version) < NEWER)


def expected_sequence(pattern: str, dtype: str, layout: str, version: tuple) -> list[str]:
    """The MIOpen calls (and device-to-device copies) one execution enqueues, in order
    (providers/miopen/_plans.py's mapping)."""
    newer = tuple(version) >= NEWER
    copies = ["hipMemcpyAsync", "hipMemcpyAsync"]   # prev -> next running statistics
    if pattern == "BN_INFERENCE_VARIANCE":
        return ["miopenBatchNormalizationForwardInference_V2"]
    if pattern == "BN_INFERENCE_DRELU_BACKWARD":
        if newer:
            return ["miopenBatchNormBackwardActivation"]
        return ["miopenOpTensor", "miopenBatchNormalizationForwardInference_V2",
                "miopenActivationBackward", "miopenBatchNormalizationBackward_V2"]
    if pattern == "BN_TRAINING":
        return copies + ["miopenBatchNormalizationForwardTraining_V2"]
    if pattern == "BN_TRAINING_RELU":
        if newer:
            return copies + ["miopenBatchNormForwardTrainingActivation"]
        return copies + ["miopenBatchNormalizationForwardTraining_V2", "miopenActivationForward"]
    if pattern == "BN_BACKWARD":
        return ["miopenBatchNormalizationBackward_V2"]
    if pattern == "CONV_FPROP":
        return ["miopenConvolutionForwardImmediate"]
    if pattern == "CONV_DGRAD":
        return ["miopenConvolutionBackwardDataImmediate"]
    if pattern == "CONV_WGRAD":
        return ["miopenConvolutionBackwardWeightsImmediate"]
    bias = pattern == "CONV_FPROP_BIAS_RELU"
    if fuses(version, dtype, layout):
        return (["miopenSetOpArgsConvForward"] + (["miopenSetOpArgsBiasForward"] if bias else [])
                + ["miopenSetOpArgsActivForward",
                   "miopenExecuteFusionPlan_v2" if newer else "miopenExecuteFusionPlan"])
    return (["miopenConvolutionForwardImmediate"] + (["miopenConvolutionForwardBias"] if bias else [])
            + ["miopenActivationForward"])
