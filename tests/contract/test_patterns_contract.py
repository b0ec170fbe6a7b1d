"""All nine patterns on the fake cuDNN: results against the float64 oracle for every
pattern x dtype x layout of the GPU suite, the exact cuDNN call sequence of an execution
(the mapping documented in providers/cudnn/_plans.py), and the arguments of the
batchnorm and fused-convolution calls.

Convolution descriptors and algorithm choice: test_conv_contract.py.
"""
from __future__ import annotations

import math

import pytest

from . import _scenarios
from ._expect import (assert_no_setup, assert_results, assert_tensor_desc, dnn_names,
                      exec_calls)
from ._fakes import between, calls, violations

PATTERNS = ("BN_INFERENCE_VARIANCE", "BN_INFERENCE_DRELU_BACKWARD", "BN_TRAINING",
            "BN_TRAINING_RELU", "BN_BACKWARD", "CONV_DGRAD", "CONV_FPROP", "CONV_FPROP_BIAS_RELU",
            "CONV_FPROP_BIAS_RELU/no-bias", "CONV_WGRAD")
LAYOUTS_2D = ("NCHW", "NHWC")
# the GPU suite's cases (tests/gpu/test_patterns_gpu.py)
CASES = ([(p, dt, lay) for p in PATTERNS for dt in ("float32", "float16", "bfloat16") for lay in LAYOUTS_2D]
         + [(p, dt, lay) for p in PATTERNS for dt, lay in (("float32", "NCDHW"), ("float16", "NDHWC"))])
CHANNELS_LAST = ("NHWC", "NDHWC")
# the oracle's ReLU clips on the GPU (tests/gpu/test_patterns_gpu.py GPU_CLIPS): upper clip
# for HALF and BFLOAT16
CLIPPED = {"float32": False, "float16": True, "bfloat16": True}


def expected_sequence(pattern: str, dtype: str, layout: str) -> list[str]:
    """The cuDNN calls (and device-to-device copies) one execution enqueues, in order.

    From providers/cudnn/_plans.py: running statistics are copied prev -> next first
    (cuDNN updates them in place); channels-last training takes the Ex call (ReLU fused
    when unclipped, else an in-place activation after it); the fused convolution refuses
    CLIPPED_RELU, so a clipped ReLU runs IDENTITY fused and then the activation; the
    BN-inference + DReLU + BN-backward recipe is OpTensor (k = scale * inv_variance), BN
    inference of x with k (z), ActivationBackward (dz), BN backward of dz; channels-last
    backward takes the Ex call, never the plain one."""
    cl = layout in CHANNELS_LAST
    clipped = CLIPPED[dtype]
    copies = ["cudaMemcpyAsync", "cudaMemcpyAsync"]
    backward = "cudnnBatchNormalizationBackwardEx" if cl else "cudnnBatchNormalizationBackward"
    if pattern == "BN_INFERENCE_VARIANCE":
        return ["cudnnBatchNormalizationForwardInference"]
    if pattern == "BN_INFERENCE_DRELU_BACKWARD":
        if dtype != "float32":
            # the harness's intermediates are FLOAT: x and dy are converted (OpTensor), z and
            # dz computed in FLOAT, dz converted back (BnInferenceDreluBackwardPlan)
            return ["cudnnOpTensor", "cudnnOpTensor", "cudnnBatchNormalizationForwardInference",
                    "cudnnOpTensor", "cudnnActivationBackward", "cudnnOpTensor", backward]
        return ["cudnnOpTensor", "cudnnBatchNormalizationForwardInference", "cudnnActivationBackward",
                backward]
    if pattern == "BN_TRAINING":
        return copies + ["cudnnBatchNormalizationForwardTrainingEx" if cl else
                         "cudnnBatchNormalizationForwardTraining"]
    if pattern == "BN_TRAINING_RELU":
        if cl:
            # the oracle's training + ReLU is unclipped (RELU_FWD without clips)
            return copies + ["cudnnBatchNormalizationForwardTrainingEx"]
        return copies + ["cudnnBatchNormalizationForwardTraining", "cudnnActivationForward"]
    if pattern == "BN_BACKWARD":
        return [backward]
    if pattern == "CONV_FPROP":
        return ["cudnnConvolutionForward"]
    if pattern == "CONV_DGRAD":
        return ["cudnnConvolutionBackwardData"]
    if pattern == "CONV_WGRAD":
        return ["cudnnConvolutionBackwardFilter"]
    if pattern == "CONV_FPROP_BIAS_RELU":
        return ["cudnnConvolutionBiasActivationForward"]
    if pattern == "CONV_FPROP_BIAS_RELU/no-bias":
        return ["cudnnConvolutionBiasActivationForward"] + (["cudnnActivationForward"] if clipped else [])
    raise AssertionError(pattern)


@pytest.fixture(scope="module")
def cases(fake_gpu):
    """Each case runs once per module; the tests below read its result."""
    cache = {}

    def get(pattern, dtype, layout):
        key = (pattern, dtype, layout)
        if key not in cache:
            cache[key] = fake_gpu.call(_scenarios.pattern_case, pattern, dtype, layout)
        return cache[key]
    return get


@pytest.mark.parametrize("pattern,dtype,layout", CASES, ids=["-".join(c) for c in CASES])
def test_results_and_call_sequence(cases, hdr, pattern, dtype, layout):
    case = cases(pattern, dtype, layout)
    assert not violations(case["log"]), violations(case["log"])
    assert case["plan"]["pattern"] == pattern.split("/")[0]
    assert case["plan"]["provider"] == "cudnn", case["plan"]
    want = expected_sequence(pattern, dtype, layout)
    for i in range(2):
        got = dnn_names(exec_calls(case["log"], i))
        assert got == want, f"execution {i} of {pattern} {dtype} {layout}: {got}, expected {want}"
    assert_no_setup(exec_calls(case["log"], 0), f"{pattern} execution 0 (cold stream)", cold=True)
    assert_no_setup(exec_calls(case["log"], 1), f"{pattern} execution 1 (warm stream)")
    # every enqueued call succeeded and ran on the stream the execution used
    records = [r for r in exec_calls(case["log"], 1) if r["fn"] in want]
    assert all(r["status"] == 0 for r in records), records
    assert len({r["stream"] for r in records}) == 1
    assert_results(case)


def _bn_desc_ok(hdr, desc, channels, rank):
    assert tuple(desc["dims"]) == (1, channels) + (1,) * (rank - 2), desc
    assert tuple(desc["strides"])[1] == 1 and desc["dtype"] == hdr.CUDNN_DATA_FLOAT, desc


def _node(case, kind):
    return next(n for n in case["nodes"] if n["kind"] == kind)


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"), ("bfloat16", "NDHWC")])
def test_bn_training_arguments(cases, hdr, dtype, layout):
    case = cases("BN_TRAINING", dtype, layout)
    t, p = case["tensors"], case["pointers"]
    bn = _node(case, "batchnorm")["attrs"]
    records = exec_calls(case["log"], 1)
    cl = layout in CHANNELS_LAST
    r = calls(records, "cudnnBatchNormalizationForwardTrainingEx" if cl else
              "cudnnBatchNormalizationForwardTraining")[0]
    # SPATIAL_PERSISTENT in every layout by default (knob cudnn_legacy.bn_persistent)
    assert r["mode"] == hdr.CUDNN_BATCHNORM_SPATIAL_PERSISTENT
    assert_tensor_desc(hdr, r["xDesc"], t["x"], "x")
    assert_tensor_desc(hdr, r["yDesc"], t["y"], "y")
    _bn_desc_ok(hdr, r["bnScaleBiasMeanVarDesc"], t["x"]["dims"][1], len(t["x"]["dims"]))
    assert (r["alpha"], r["beta"]) == (1.0, 0.0)
    assert math.isclose(r["epsilon"], bn["epsilon"]) and math.isclose(r["exponentialAverageFactor"], bn["momentum"])
    for arg, role in (("x", "x"), ("y", "y"), ("bnScale", "scale"), ("bnBias", "bias"),
                      ("resultRunningMean", "next_running_mean"),
                      ("resultRunningVariance", "next_running_variance"),
                      ("resultSaveMean", "mean"), ("resultSaveInvVariance", "inv_variance")):
        assert r[arg] == p[role], f"{arg} is not the '{role}' buffer"
    # the running statistics start from prev: copied into next (C floats) before the call
    copies = [c for c in calls(records, "cudaMemcpyAsync") if c["seq"] < r["seq"]]
    nbytes = 4 * t["x"]["dims"][1]
    assert {(c["src"], c["dst"], c["count"], c["kind"]) for c in copies} == {
        (p["prev_running_mean"], p["next_running_mean"], nbytes, hdr.cudaMemcpyDeviceToDevice),
        (p["prev_running_variance"], p["next_running_variance"], nbytes, hdr.cudaMemcpyDeviceToDevice)}
    assert all(c["stream"] == r["stream"] for c in copies)
    if cl:
        assert r["bnOps"] == hdr.CUDNN_BATCHNORM_OPS_BN
        build = between(case["log"], "build", "stage")
        ws = calls(build, "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize")[-1]["size"]
        assert r["workSpaceSizeInBytes"] >= ws and r["workspace"] != 0


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_bn_training_relu_arguments(cases, hdr, layout):
    case = cases("BN_TRAINING_RELU", "float32", layout)
    records = exec_calls(case["log"], 1)
    p = case["pointers"]
    if layout == "NHWC":     # fused: BN_ACTIVATION with a RELU descriptor and a reserve space
        r = calls(records, "cudnnBatchNormalizationForwardTrainingEx")[0]
        assert r["bnOps"] == hdr.CUDNN_BATCHNORM_OPS_BN_ACTIVATION
        assert r["activationDesc"]["mode"] == hdr.CUDNN_ACTIVATION_RELU
        build = between(case["log"], "build", "stage")
        reserve = calls(build, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize")[-1]["size"]
        assert reserve > 0 and r["reserveSpaceSizeInBytes"] >= reserve and r["reserveSpace"] != 0
        assert r["y"] == p["y"]
    else:                    # training, then ReLU in place on y
        train = calls(records, "cudnnBatchNormalizationForwardTraining")[0]
        act = calls(records, "cudnnActivationForward")[0]
        assert act["seq"] > train["seq"] and act["x"] == act["y"] == p["y"]
        assert act["activationDesc"]["mode"] == hdr.CUDNN_ACTIVATION_RELU
        assert (act["alpha"], act["beta"]) == (1.0, 0.0)


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC")])
def test_bn_inference_and_backward_arguments(cases, hdr, dtype, layout):
    case = cases("BN_INFERENCE_VARIANCE", dtype, layout)
    t, p = case["tensors"], case["pointers"]
    r = calls(exec_calls(case["log"], 1), "cudnnBatchNormalizationForwardInference")[0]
    assert r["mode"] == hdr.CUDNN_BATCHNORM_SPATIAL
    assert math.isclose(r["epsilon"], _node(case, "batchnorm_inference_variance_ext")["attrs"]["epsilon"])
    assert_tensor_desc(hdr, r["xDesc"], t["x"], "x")
    _bn_desc_ok(hdr, r["bnScaleBiasMeanVarDesc"], t["x"]["dims"][1], 4)
    for arg, role in (("x", "x"), ("y", "y"), ("bnScale", "scale"), ("bnBias", "bias"),
                      ("estimatedMean", "mean"), ("estimatedVariance", "variance")):
        assert r[arg] == p[role], arg

    case = cases("BN_BACKWARD", dtype, layout)
    t, p = case["tensors"], case["pointers"]
    cl = layout in CHANNELS_LAST
    r = calls(exec_calls(case["log"], 1), "cudnnBatchNormalizationBackwardEx" if cl else
              "cudnnBatchNormalizationBackward")[0]
    assert r["mode"] == hdr.CUDNN_BATCHNORM_SPATIAL_PERSISTENT
    assert (r["alphaDataDiff"], r["betaDataDiff"], r["alphaParamDiff"], r["betaParamDiff"]) == (1, 0, 1, 0)
    if cl:   # bnOps BN: no y, dz, bias, activation or reserve space; the sized workspace
        assert r["bnOps"] == hdr.CUDNN_BATCHNORM_OPS_BN
        assert r["y"] == r["dz"] == r["bnBias"] == r["activationDesc"] == r["reserveSpace"] == 0
        assert r["reserveSpaceSizeInBytes"] == 0
        build = between(case["log"], "build", "stage")
        ws = calls(build, "cudnnGetBatchNormalizationBackwardExWorkspaceSize")[-1]["size"]
        assert r["workSpaceSizeInBytes"] >= ws and r["workspace"] != 0
        reserve = calls(build, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize")[-1]
        assert reserve["bnOps"] == hdr.CUDNN_BATCHNORM_OPS_BN and reserve["size"] == 0
    for key in ("xDesc", "dyDesc", "dxDesc"):
        assert_tensor_desc(hdr, r[key], t[key[:-4]], key)
    for arg, role in (("x", "x"), ("dy", "dy"), ("dx", "dx"), ("bnScale", "scale"),
                      ("dBnScaleResult", "dscale"), ("dBnBiasResult", "dbias"),
                      ("savedMean", "mean"), ("savedInvVariance", "inv_variance")):
        assert r[arg] == p[role], arg


def test_bn_inference_drelu_backward_recipe(cases, hdr):
    """k = scale * inv_variance; z = BN inference(x; k, bias, mean, variance 1, eps 0);
    dz = ReLU backward(z, dy); BN backward(dz) with the saved mean / inv_variance."""
    case = cases("BN_INFERENCE_DRELU_BACKWARD", "float32", "NCHW")
    p, t = case["pointers"], case["tensors"]
    records = exec_calls(case["log"], 1)
    op = calls(records, "cudnnOpTensor")[0]
    inf = calls(records, "cudnnBatchNormalizationForwardInference")[0]
    act = calls(records, "cudnnActivationBackward")[0]
    bwd = calls(records, "cudnnBatchNormalizationBackward")[0]
    assert op["op"] == hdr.CUDNN_OP_TENSOR_MUL and {op["A"], op["B"]} == {p["scale"], p["inv_variance"]}
    assert (op["alpha1"], op["alpha2"], op["beta"]) == (1.0, 1.0, 0.0)
    k = op["C"]
    assert k not in p.values()                       # scratch (the plan's workspace)
    assert inf["bnScale"] == k and inf["x"] == p["x"] and inf["bnBias"] == p["bias"]
    assert inf["estimatedMean"] == p["mean"] and inf["epsilon"] == 0.0
    z = inf["y"]
    assert act["y"] == act["x"] == z and act["dy"] == p["dy"]
    assert act["activationDesc"]["mode"] == hdr.CUDNN_ACTIVATION_RELU
    assert_tensor_desc(hdr, act["dyDesc"], t["dy"], "dy")
    assert bwd["dy"] == act["dx"] and bwd["x"] == p["x"] and bwd["dx"] == p["dx"]
    assert (bwd["savedMean"], bwd["savedInvVariance"]) == (p["mean"], p["inv_variance"])
    assert bwd["dBnScaleResult"] == p["dscale"] and bwd["dBnBiasResult"] == p["dbias"]


@pytest.mark.parametrize("pattern,dtype", [("CONV_FPROP_BIAS_RELU", "float32"),
                                           ("CONV_FPROP_BIAS_RELU/no-bias", "float16")])
def test_fused_conv_arguments(cases, hdr, pattern, dtype):
    case = cases(pattern, dtype, "NHWC")
    p, t = case["pointers"], case["tensors"]
    records = exec_calls(case["log"], 1)
    r = calls(records, "cudnnConvolutionBiasActivationForward")[0]
    assert (r["alpha1"], r["alpha2"]) == (1.0, 0.0) and r["z"] == r["y"] == p["y"]
    assert_tensor_desc(hdr, r["xDesc"], t["x"], "x")
    assert_tensor_desc(hdr, r["yDesc"], t["y"], "y")
    assert tuple(r["biasDesc"]["dims"]) == (1, t["y"]["dims"][1], 1, 1)
    if "bias" in p:
        assert r["bias"] == p["bias"]
    else:
        assert r["bias"] not in p.values()       # the plan's own zero bias
    if CLIPPED[dtype]:
        from gpu.test_patterns_gpu import GPU_CLIPS
        upper = GPU_CLIPS[dtype][1]
        assert r["activationDesc"]["mode"] == hdr.CUDNN_ACTIVATION_IDENTITY
        assert r["algo"] == hdr.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
        clip = calls(records, "cudnnActivationForward")[0]
        assert clip["activationDesc"]["mode"] == hdr.CUDNN_ACTIVATION_CLIPPED_RELU
        assert math.isclose(clip["activationDesc"]["coef"], upper)
        assert clip["x"] == clip["y"] == p["y"] and clip["seq"] > r["seq"]
    else:
        assert r["activationDesc"]["mode"] == hdr.CUDNN_ACTIVATION_RELU
