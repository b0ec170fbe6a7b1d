"""Convolution fprop / dgrad / wgrad on the fake cuDNN: descriptors, algorithm choice,
workspace, the exact calls of an execution, and results against the float64 oracle.

Each case runs the oracle suite's graph for the pattern (tests/oracle/test_patterns.py,
with tests/gpu's symmetric padding) through the public API in a worker process whose
"cuda:0" is the fake (``_scenarios.pattern_case``).
"""
from __future__ import annotations

import pytest

from . import _scenarios
from ._expect import (algo_value, assert_filter_desc, assert_no_setup, assert_results,
                      assert_tensor_desc, dnn_names, exec_calls, expected_algorithm)
from ._fakes import between, calls, violations

# direction: (pattern, C call, heuristic call, workspace call, (a, b, c) roles, filter role)
DIRECTIONS = {
    0: ("CONV_FPROP", "cudnnConvolutionForward", "cudnnGetConvolutionForwardAlgorithm_v7",
        "cudnnGetConvolutionForwardWorkspaceSize", ("x", "w", "y"), "w"),
    1: ("CONV_DGRAD", "cudnnConvolutionBackwardData", "cudnnGetConvolutionBackwardDataAlgorithm_v7",
        "cudnnGetConvolutionBackwardDataWorkspaceSize", ("dx", "w", "dy"), "w"),
    2: ("CONV_WGRAD", "cudnnConvolutionBackwardFilter", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
        "cudnnGetConvolutionBackwardFilterWorkspaceSize", ("x", "dw", "dy"), "dw"),
}
CASES = [(d, dt, lay) for d in DIRECTIONS for dt in ("float32", "float16", "bfloat16")
         for lay in ("NCHW", "NHWC")] + [(d, dt, lay) for d in DIRECTIONS
                                          for dt, lay in (("float32", "NCDHW"), ("float16", "NDHWC"))]


@pytest.mark.parametrize("direction,dtype,layout", CASES,
                         ids=[f"{DIRECTIONS[d][0]}-{dt}-{lay}" for d, dt, lay in CASES])
def test_conv_calls_and_results(fake_gpu, hdr, direction, dtype, layout):
    pattern, call, heuristic, ws_call, roles, filt = DIRECTIONS[direction]
    case = fake_gpu.call(_scenarios.pattern_case, pattern, dtype, layout)
    log, tensors, plan = case["log"], case["tensors"], case["plan"]
    assert not violations(log), violations(log)
    assert plan["pattern"] == pattern and plan["provider"] == "cudnn", plan
    channels_last = layout in ("NHWC", "NDHWC")
    float_io = dtype == "float32"

    # build: the problem is asked of cuDNN once; the plan takes the policy's algorithm
    build = between(log, "build", "stage")
    heur = calls(build, heuristic)
    assert len(heur) == 1, f"{heuristic} called {len(heur)} times at build"
    choice = expected_algorithm(hdr, heur[0]["perf"], direction, float_io)
    assert plan["algorithm"] == choice["name"], (plan["algorithm"], choice)
    sizes = [r["size"] for r in calls(build, ws_call) if r["algo"] == choice["algo"] and r["status"] == 0]
    assert sizes, f"{ws_call} not asked for the chosen algorithm {choice['name']}"
    assert plan["workspace_size"] == max(sizes + [choice["memory"]])

    conv = calls(build, "cudnnSetConvolutionNdDescriptor")[-1]
    nsp = len(tensors["x" if direction != 1 else "dx"]["dims"]) - 2
    from gpu.test_patterns_gpu import GPU_CONV
    attrs = GPU_CONV[nsp + 2]
    assert conv["pad"] == list(attrs["pre"]) and conv["stride"] == list(attrs["stride"])
    assert conv["dilation"] == list(attrs["dilation"])
    assert conv["mode"] == hdr.CUDNN_CROSS_CORRELATION and conv["compute"] == hdr.CUDNN_DATA_FLOAT
    math = calls(build, "cudnnSetConvolutionMathType")[-1]["math"]
    assert math == (hdr.CUDNN_FMA_MATH if float_io else hdr.CUDNN_TENSOR_OP_MATH)

    # every execution: exactly one convolution call, with the graph's descriptors
    for i in range(2):
        records = exec_calls(log, i)
        assert dnn_names(records) == [call], f"execution {i}: {dnn_names(records)}"
        r = calls(records, call)[0]
        a, b, c = roles
        desc_key = {"x": "xDesc", "dx": "dxDesc", "y": "yDesc", "dy": "dyDesc", "w": "wDesc", "dw": "dwDesc"}
        for role in (a, c):
            assert_tensor_desc(hdr, r[desc_key[role]], tensors[role], f"exec {i} {call} {role}")
        assert_filter_desc(hdr, r[desc_key[b]], tensors[filt], channels_last, f"exec {i} {call} {b}")
        assert r["convDesc"]["pad"] == conv["pad"] and r["convDesc"]["math"] == math
        assert r["convDesc"]["groups"] == 1
        assert (r["alpha"], r["beta"]) == (1.0, 0.0)
        assert r["algo"] == algo_value(hdr, direction, plan["algorithm"])
        assert r["workSpaceSizeInBytes"] == plan["workspace_size"]
        for role in roles:
            assert r[role] == case["pointers"][role], f"{role} pointer is not the bound buffer's"
        # the plan's work goes on a compute stream; an event on that stream marks completion
        ev = calls(records, "cudaEventRecord")
        assert ev and ev[-1]["stream"] == r["stream"] and ev[-1]["seq"] > r["seq"]
    assert_no_setup(exec_calls(log, 0), "execution 0 (first on its stream)", cold=True)
    assert_no_setup(exec_calls(log, 1), "execution 1 (steady state)")
    assert_results(case)


SHAPES = ("groups2", "depthwise_s2", "1x1_s2_pad1", "dilated_anisotropic", "c3_7x7_s2", "3d_s2")
SHAPE_CASES = [(s, d, dt, lay) for s in SHAPES for d in ("fprop", "dgrad", "wgrad")
               for dt, lay in (("float32", "NCHW"), ("float16", "NHWC"))]


@pytest.mark.parametrize("shape,direction,dtype,layout", SHAPE_CASES,
                         ids=["-".join(c) for c in SHAPE_CASES])
def test_conv_shapes(fake_gpu, shape, direction, dtype, layout):
    """Groups, depthwise, strides, dilation and 3-D reach cuDNN's descriptors as the graph
    says, and the results are the oracle's."""
    from oracle._cases import assert_close
    r = fake_gpu.call(_scenarios.conv_shape_case, shape, direction, dtype, layout)
    assert not violations(r["log"]), violations(r["log"])
    assert r["plan"]["provider"] == "cudnn", r["plan"]
    attrs = r["nodes"][0]["attrs"]
    conv = calls(r["log"], "cudnnSetConvolutionNdDescriptor")[-1]
    assert conv["pad"] == list(attrs["pre_padding"]) and conv["stride"] == list(attrs["stride"])
    assert conv["dilation"] == list(attrs["dilation"])
    groups = calls(r["log"], "cudnnSetConvolutionGroupCount")
    if attrs["groups"] > 1:
        assert groups and groups[-1]["groups"] == attrs["groups"]
    name = DIRECTIONS[{"fprop": 0, "dgrad": 1, "wgrad": 2}[direction]][1]
    run = calls(r["log"], name)[-1]
    assert run["convDesc"]["groups"] == attrs["groups"] and run["status"] == 0
    assert_close(r["got"], r["want"], *r["limits"], f"{shape} {direction} {dtype} {layout}")
