"""All nine patterns on the fake MIOpen of each header set (MIOpen 3.4.0 and 3.5.1):
results against the float64 oracle for every pattern x dtype x layout of the GPU suite,
the exact MIOpen call sequence of an execution (providers/miopen/_plans.py's mapping),
nothing found, compiled or set up inside an execution, and the arguments of the calls.

Each case runs the oracle suite's graph (tests/oracle/test_patterns.py with tests/gpu's
symmetric padding) through the public API in a worker process whose "hip:0" is the fake
(``contract._scenarios.pattern_case(spec="hip:0")``). The ReLU clips are the oracle's on
MIOpen >= 3.5 (its BFLOAT16 case clamps to [0.1, 0.5]: miopenActivationCLAMP) and the
GPU suite's before (upper clips only; a lower clip is declined there, test_lower_clip_*).
"""
from __future__ import annotations

import math

import pytest

from hipdnn_async.runtime import _miopen

from .. import _scenarios
from . import _scenarios_rocm
from .._expect import assert_results, exec_calls
from .._fakes import between, calls, violations
import hipdnn_async as hd

from ._expect_rocm import (NEWER, assert_no_setup, assert_tensor_desc, declines,
                           expected_sequence, fuses, miopen_names)

PATTERNS = ("BN_INFERENCE_VARIANCE", "BN_INFERENCE_DRELU_BACKWARD", "BN_TRAINING",
            "BN_TRAINING_RELU", "BN_BACKWARD", "CONV_DGRAD", "CONV_FPROP", "CONV_FPROP_BIAS_RELU",
            "CONV_FPROP_BIAS_RELU/no-bias", "CONV_WGRAD")
CASES = ([(p, dt, lay) for p in PATTERNS for dt in ("float32", "float16", "bfloat16")
          for lay in ("NCHW", "NHWC")]
         + [(p, dt, lay) for p in PATTERNS for dt, lay in (("float32", "NCDHW"), ("float16", "NDHWC"))])


def oracle_clips(version):
    from oracle import test_patterns as tp
    return dict(tp.CLIPS) if tuple(version) >= NEWER else None


@pytest.fixture(scope="module")
def cases(fake_rocm):
    """Each case runs once per module and header set; the tests below read its result."""
    cache = {}
    version = fake_rocm.rocm.miopen_version

    def get(pattern, dtype, layout):
        key = (pattern, dtype, layout)
        if key not in cache:
            try:
                cache[key] = fake_rocm.call(_scenarios.pattern_case, pattern, dtype, layout,
                                            spec="hip:0", clips=oracle_clips(version))
            except hd.NotSupportedError as exc:
                cache[key] = exc
        return cache[key]
    get.version = version
    return get


@pytest.mark.parametrize("pattern,dtype,layout", CASES, ids=["-".join(c) for c in CASES])
def test_results_and_call_sequence(cases, pattern, dtype, layout):
    case = cases(pattern, dtype, layout)
    if declines(pattern, dtype, cases.version):
        assert isinstance(case, hd.NotSupportedError), case
        assert "miopenBatchNormBackwardActivation" in str(case) and "FLOAT" in str(case)
        return
    assert not isinstance(case, Exception), case
    assert not violations(case["log"]), violations(case["log"])
    assert case["plan"]["pattern"] == pattern.split("/")[0]
    assert case["plan"]["provider"] == "miopen" and case["plan"]["engine"] == "MIOPEN_ENGINE"
    want = expected_sequence(pattern, dtype, layout, cases.version)
    for i in range(2):
        got = miopen_names(exec_calls(case["log"], i))
        assert got == want, f"execution {i} of {pattern} {dtype} {layout}: {got}, expected {want}"
    # the first execution meets a cold stream (the stream backend's completion event is
    # made then), the second a warm one: no MIOpen setup in either, nothing in the second
    assert_no_setup(exec_calls(case["log"], 0), f"{pattern} execution 0", miopen_only=True)
    assert_no_setup(exec_calls(case["log"], 1), f"{pattern} execution 1")
    records = [r for r in exec_calls(case["log"], 1) if r["fn"] in want]
    assert all(r["status"] == 0 for r in records), records
    handles = {r["handle"] for r in records if "handle" in r}
    assert len(handles) <= 1, handles
    # the work ran on one stream, the one the completion event was recorded on
    ran = [r for r in exec_calls(case["log"], 1) if r["rec"] == "exec" and r["fn"] in want]
    recorded = calls(exec_calls(case["log"], 1), "hipEventRecord")
    assert ran and recorded and {r["stream"] for r in ran} == {recorded[-1]["stream"]}
    assert_results(case)


# ---------------------------------------------------------------------- convolutions
_CONV = {"CONV_FPROP": (0, "Forward", ("w", "x", "y"), ("wDesc", "xDesc", "yDesc")),
         "CONV_DGRAD": (1, "BackwardData", ("dy", "w", "dx"), ("dyDesc", "wDesc", "dxDesc")),
         "CONV_WGRAD": (2, "BackwardWeights", ("dy", "x", "dw"), ("dyDesc", "xDesc", "dwDesc"))}


@pytest.mark.parametrize("pattern", list(_CONV))
@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"),
                                          ("bfloat16", "NCHW"), ("float32", "NCDHW"),
                                          ("float16", "NDHWC")])
def test_conv_descriptors_solution_and_workspace(cases, pattern, dtype, layout):
    case = cases(pattern, dtype, layout)
    _d, name, roles, keys = _CONV[pattern]
    build = between(case["log"], "build", "stage")
    # the problem is asked of MIOpen once; the plan runs its first solution (no knob set)
    listed = calls(build, f"miopenConvolution{name}GetSolution")
    assert len(listed) == 1 and listed[0]["status"] == 0
    first = listed[0]["solutions"][0]
    ws = [r["workspace"] for r in calls(build, f"miopenConvolution{name}GetSolutionWorkspaceSize")
          if r["solution_id"] == first["id"]]
    assert ws and case["plan"]["workspace_size"] == ws[0] == first["workspace"]
    assert case["plan"]["algorithm"].startswith(f"solver {first['id']} ")
    init = calls(build, "miopenInitConvolutionNdDescriptor")[-1]
    from gpu.test_patterns_gpu import GPU_CONV
    attrs = GPU_CONV[len(case["tensors"][roles[1] if pattern != "CONV_DGRAD" else "dx"]["dims"])]
    assert init["pad"] == list(attrs["pre"]) and init["stride"] == list(attrs["stride"])
    assert init["dilation"] == list(attrs["dilation"]) and init["mode"] == _miopen.CONVOLUTION
    assert [r["groups"] for r in calls(build, "miopenSetConvolutionGroupCount")][-1:] == [1]
    for i in range(2):
        r = calls(exec_calls(case["log"], i), f"miopenConvolution{name}Immediate")[0]
        for role, key in zip(roles, keys):
            assert_tensor_desc(r[key], case["tensors"][role], f"exec {i} {role}")
            assert r[role] == case["pointers"][role], f"{role}: not the bound buffer"
        assert r["solution_id"] == first["id"] and r["workSpaceSize"] == ws[0]
        assert r["convDesc"]["pad"] == init["pad"] and r["convDesc"]["groups"] == 1
        assert (r["workSpace"] != 0) == (ws[0] > 0)


@pytest.mark.parametrize("pattern", list(_CONV) + ["CONV_FPROP_BIAS_RELU"])
def test_the_solution_is_compiled_for_every_handle_before_it_runs(cases, pattern):
    dtype = "float16"
    case = cases(pattern, dtype, "NCHW")
    log = case["log"]
    if pattern == "CONV_FPROP_BIAS_RELU":
        if fuses(cases.version, dtype, "NCHW"):
            compiled = {r["handle"] for r in calls(log, "miopenCompileFusionPlan") if r["status"] == 0}
            ran = {r["handle"] for r in calls(log, "miopenExecuteFusionPlan*")}
        else:
            compiled = {r["handle"] for r in calls(log, "miopenConvolutionForwardCompileSolution")}
            ran = {r["handle"] for r in calls(log, "miopenConvolutionForwardImmediate")}
    else:
        name = _CONV[pattern][1]
        compiled = {r["handle"] for r in calls(log, f"miopenConvolution{name}CompileSolution")}
        ran = {r["handle"] for r in calls(log, f"miopenConvolution{name}Immediate")}
    assert ran and ran <= compiled, (ran, compiled)
    for i in range(2):   # never inside an execution
        inside = [r["fn"] for r in exec_calls(log, i) if "Compile" in r["fn"]]
        assert not inside, inside


# ---------------------------------------------------------------------- conv + bias + activation
@pytest.mark.parametrize("pattern", ["CONV_FPROP_BIAS_RELU", "CONV_FPROP_BIAS_RELU/no-bias"])
@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"),
                                          ("bfloat16", "NCHW"), ("float32", "NCDHW")])
def test_fused_conv_arguments(cases, pattern, dtype, layout):
    case = cases(pattern, dtype, layout)
    log, version = case["log"], cases.version
    build = between(log, "build", "stage")
    from oracle import test_patterns as tp
    from gpu.test_patterns_gpu import GPU_CLIPS
    lower, upper = (tp.CLIPS if tuple(version) >= NEWER else GPU_CLIPS)[dtype] \
        if pattern.endswith("no-bias") else (None, None)
    if lower not in (None, 0, 0.0):
        mode, alpha, beta = _miopen.ACTIVATION_CLAMP, lower, upper
    elif upper is not None:
        mode, alpha, beta = _miopen.ACTIVATION_CLIPPEDRELU, upper, 0.0
    else:
        mode, alpha, beta = _miopen.ACTIVATION_RELU, 0.0, 0.0
    compiles = calls(build, "miopenCompileFusionPlan")
    assert compiles, "no fusion plan tried at build"
    bias = pattern == "CONV_FPROP_BIAS_RELU"
    if fuses(version, dtype, layout):
        assert compiles[0]["status"] == 0
        acts = calls(build, "miopenCreateOpActivationForward")
        assert acts and all(a["mode"] == mode for a in acts)
        assert bool(calls(build, "miopenCreateOpBiasForward")) == bias
        ws = calls(build, "miopenFusionPlanGetWorkSpaceSize")[-1]["workspace"]
        assert case["plan"]["workspace_size"] == ws
        for i in range(2):
            rec = exec_calls(log, i)
            a = calls(rec, "miopenSetOpArgsActivForward")[0]
            assert (a["activAlpha"], a["activBeta"]) == (alpha, beta) and (a["alpha"], a["beta"]) == (1.0, 0.0)
            assert calls(rec, "miopenSetOpArgsConvForward")[0]["w"] == case["pointers"]["w"]
            if bias:
                assert calls(rec, "miopenSetOpArgsBiasForward")[0]["bias"] == case["pointers"]["bias"]
            run = calls(rec, "miopenExecuteFusionPlan*")[0]
            assert run["input"] == case["pointers"]["x"] and run["output"] == case["pointers"]["y"]
            assert_tensor_desc(run["inputDesc"], case["tensors"]["x"], "fusion input")
            assert_tensor_desc(run["outputDesc"], case["tensors"]["y"], "fusion output")
            if tuple(version) >= NEWER:
                assert run["fn"] == "miopenExecuteFusionPlan_v2" and run["workspaceSize"] == ws
        assert case["plan"]["algorithm"].startswith("fusion plan")
    else:
        assert compiles[0]["status"] == _miopen.STATUS_UNSUPPORTED_OP
        assert case["plan"]["algorithm"].startswith("composed (the fusion was refused)")
        for i in range(2):
            rec = exec_calls(log, i)
            conv = calls(rec, "miopenConvolutionForwardImmediate")[0]
            act = calls(rec, "miopenActivationForward")[0]
            z = conv["y"]
            assert z != case["pointers"]["y"] and act["x"] == z and act["y"] == case["pointers"]["y"]
            assert act["activDesc"]["mode"] == mode and act["activDesc"]["alpha"] == alpha
            if bias:
                b = calls(rec, "miopenConvolutionForwardBias")[0]
                assert b["y"] == z and b["b"] == case["pointers"]["bias"]
                assert (b["alpha"], b["beta"]) == (1.0, 0.0)
            # the intermediate lies in the workspace, before the convolution's own workspace
            z_bytes = math.prod(case["tensors"]["y"]["dims"]) * (4 if dtype == "float32" else 2)
            assert conv["workSpaceSize"] == 0 or conv["workSpace"] >= z + z_bytes


# ---------------------------------------------------------------------- batchnorm
def _channel_desc_ok(desc, channels, rank):
    assert tuple(desc["dims"]) == (1, channels) + (1,) * (rank - 2), desc
    assert desc["dtype"] == _miopen.DATA_FLOAT and tuple(desc["strides"])[1] == 1, desc


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"), ("bfloat16", "NDHWC")])
def test_bn_training_arguments(cases, dtype, layout):
    case = cases("BN_TRAINING", dtype, layout)
    t, p = case["tensors"], case["pointers"]
    rank = len(t["x"]["dims"])
    for i in range(2):
        rec = exec_calls(case["log"], i)
        r = calls(rec, "miopenBatchNormalizationForwardTraining_V2")[0]
        assert r["mode"] == _miopen.BN_SPATIAL and (r["alpha"], r["beta"]) == (1.0, 0.0)
        assert_tensor_desc(r["xDesc"], t["x"], "x")
        assert_tensor_desc(r["yDesc"], t["y"], "y")
        for key in ("scaleDesc", "biasVarDesc", "savedMeanDesc", "savedVarDesc"):
            _channel_desc_ok(r[key], t["x"]["dims"][1], rank)
        assert r["x"] == p["x"] and r["y"] == p["y"] and r["bnScale"] == p["scale"]
        assert r["bnBias"] == p["bias"]
        assert r["resultSaveMean"] == p["mean"] and r["resultSaveInvVariance"] == p["inv_variance"]
        # running statistics: prev copied into next on the stream, then updated in place
        assert r["resultRunningMean"] == p["next_running_mean"]
        assert r["resultRunningVariance"] == p["next_running_variance"]
        copies = calls(rec, "hipMemcpyAsync")
        assert {(c["src"], c["dst"]) for c in copies} == {
            (p["prev_running_mean"], p["next_running_mean"]),
            (p["prev_running_variance"], p["next_running_variance"])}
        assert all(c["kind"] == 3 and c["count"] == 4 * t["x"]["dims"][1] for c in copies)
        assert r["epsilon"] > 0 and 0 < r["expAvgFactor"] < 1


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("bfloat16", "NHWC")])
def test_bn_training_relu_arguments(cases, dtype, layout):
    case = cases("BN_TRAINING_RELU", dtype, layout)
    t, p = case["tensors"], case["pointers"]
    for i in range(2):
        rec = exec_calls(case["log"], i)
        if tuple(cases.version) >= NEWER:
            r = calls(rec, "miopenBatchNormForwardTrainingActivation")[0]
            assert r["y"] == p["y"] and r["activDesc"]["mode"] == _miopen.ACTIVATION_RELU
        else:
            r = calls(rec, "miopenBatchNormalizationForwardTraining_V2")[0]
            act = calls(rec, "miopenActivationForward")[0]
            # the BN output goes to the workspace, the activation writes y from there
            assert r["y"] != p["y"] and act["x"] == r["y"] and act["y"] == p["y"]
            assert act["activDesc"]["mode"] == _miopen.ACTIVATION_RELU
            assert tuple(act["xDesc"]["dims"]) == tuple(t["y"]["dims"])
        assert r["resultSaveMean"] == p["mean"] and r["resultRunningMean"] == p["next_running_mean"]


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"), ("bfloat16", "NCDHW")])
def test_bn_inference_and_backward_arguments(cases, dtype, layout):
    inf = cases("BN_INFERENCE_VARIANCE", dtype, layout)
    t, p = inf["tensors"], inf["pointers"]
    rank = len(t["x"]["dims"])
    r = calls(exec_calls(inf["log"], 0), "miopenBatchNormalizationForwardInference_V2")[0]
    assert r["mode"] == _miopen.BN_SPATIAL and (r["alpha"], r["beta"]) == (1.0, 0.0)
    assert (r["bnScale"], r["bnBias"], r["estimatedMean"], r["estimatedVariance"]) == (
        p["scale"], p["bias"], p["mean"], p["variance"])
    for key in ("scaleDesc", "biasDesc", "estMeanDesc", "estVarianceDesc"):
        _channel_desc_ok(r[key], t["x"]["dims"][1], rank)
    assert_tensor_desc(r["xDesc"], t["x"], "x")
    assert r["epsilon"] > 0
    bwd = cases("BN_BACKWARD", dtype, layout)
    t, p = bwd["tensors"], bwd["pointers"]
    r = calls(exec_calls(bwd["log"], 0), "miopenBatchNormalizationBackward_V2")[0]
    assert (r["alphaDataDiff"], r["betaDataDiff"], r["alphaParamDiff"], r["betaParamDiff"]) == (1, 0, 1, 0)
    assert (r["x"], r["dy"], r["dx"], r["bnScale"]) == (p["x"], p["dy"], p["dx"], p["scale"])
    assert (r["resultBnScaleDiff"], r["resultBnBiasDiff"]) == (p["dscale"], p["dbias"])
    assert (r["savedMean"], r["savedInvVariance"]) == (p["mean"], p["inv_variance"])
    assert r["epsilon"] == 1e-5          # hipDNN's BATCHNORM_DEFAULT_EPSILON
    assert_tensor_desc(r["dyDesc"], t["dy"], "dy")
    assert_tensor_desc(r["dxDesc"], t["dx"], "dx")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bn_inference_drelu_backward_recipe(cases, dtype):
    case = cases("BN_INFERENCE_DRELU_BACKWARD", dtype, "NCHW")
    if declines("BN_INFERENCE_DRELU_BACKWARD", dtype, cases.version):
        assert isinstance(case, hd.NotSupportedError), case
        return
    p = case["pointers"]
    rec = exec_calls(case["log"], 1)
    if tuple(cases.version) >= NEWER:
        r = calls(rec, "miopenBatchNormBackwardActivation")[0]
        assert r["bnBias"] == p["bias"] and r["activDesc"] is not None
        assert (r["savedMean"], r["savedInvVariance"]) == (p["mean"], p["inv_variance"])
        assert r["dy"] == p["dy"] and r["dx"] == p["dx"]
        return
    op = calls(rec, "miopenOpTensor")[0]
    inf = calls(rec, "miopenBatchNormalizationForwardInference_V2")[0]
    act = calls(rec, "miopenActivationBackward")[0]
    bwd = calls(rec, "miopenBatchNormalizationBackward_V2")[0]
    # k = scale * inv_variance; z = BN(x; scale k, variance 1 - 2^-10, epsilon 2^-10)
    assert op["op"] == _miopen.TENSOR_OP_MUL and {op["A"], op["B"]} == {p["scale"], p["inv_variance"]}
    k = op["C"]
    assert inf["bnScale"] == k and inf["bnBias"] == p["bias"] and inf["estimatedMean"] == p["mean"]
    assert inf["epsilon"] == 2.0 ** -10
    z = inf["y"]
    assert act["x"] == z and act["y"] == z and act["dy"] == p["dy"]
    assert bwd["dy"] == act["dx"] and bwd["dx"] == p["dx"] and bwd["x"] == p["x"]
    assert len({k, z, act["dx"]}) == 3


# ---------------------------------------------------------------------- nothing per execution
def test_builds_ask_and_compile_once(cases):
    """Across every case: no solution query, search or compile between the exec marks."""
    for pattern, dtype, layout in CASES[::7]:
        if declines(pattern, dtype, cases.version):
            continue
        case = cases(pattern, dtype, layout)
        for i in range(2):
            bad = [r["fn"] for r in exec_calls(case["log"], i) if r["fn"].startswith("miopen")
                   and any(w in r["fn"] for w in ("GetSolution", "Find", "Compile", "Create", "Destroy"))]
            assert not bad, (pattern, dtype, layout, bad)


def test_drelu_boundary_needs_float_intermediates(fake_rocm):
    """tests/gpu's boundary case (BFLOAT16, z within half a bf16 step below the clip):
    right with MIOpen 3.5's fused call; declined before 3.5 with the graph's FLOAT
    intermediates; composed, and right for that precision, once the graph asks for
    BFLOAT16 intermediates."""
    got = fake_rocm.call(_scenarios_rocm.drelu_boundary, "bfloat16", "NCHW", None)
    if tuple(fake_rocm.rocm.miopen_version) >= NEWER:
        assert got["error"] is None, got["error"]
        assert got["algorithm"].startswith("miopenBatchNormBackwardActivation")
        for name, value, want, (atol, rtol) in got["checks"]:
            from oracle._cases import assert_close
            assert_close(value, want, atol, rtol, name)
        return
    assert isinstance(got["error"], hd.NotSupportedError), got["error"]
    relaxed = fake_rocm.call(_scenarios_rocm.drelu_boundary, "bfloat16", "NCHW", "bfloat16")
    assert relaxed["error"] is None, relaxed["error"]
    assert relaxed["algorithm"].startswith("miopenOpTensor")
    from oracle._cases import assert_close
    name, value, _want, (atol, rtol) = relaxed["checks"][0]
    assert_close(value, relaxed["flipped"]["dx"], atol, rtol, "dx with bf16 intermediates")
