"""``runtime._miopen`` on the fake MIOpen of each header set: loading, the optional entry
points, the exact arguments of the calls, results against the float64 reference, the
status -> error mapping. (The provider's use of it: test_miopen_provider*.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async import _errors as err_types
from oracle import _reference as ref

from . import _binding_scenarios as sc
from .._fakes import calls, violations

NEWER = (3, 5, 0)


def test_load_version_and_optional_entry_points(fake_rocm):
    facts = fake_rocm.call(sc.binding_facts)
    v = fake_rocm.rocm.miopen_version
    assert facts["version"] == v
    assert facts["record"].version == v[0] * 10000 + v[1] * 100 + v[2]
    assert facts["record"].path.endswith("libMIOpen.so.1")
    assert facts["slots"] == facts["names"]
    newer = v >= NEWER
    assert all(facts["has"][n] == newer for n in facts["has"]), facts["has"]
    if newer:
        assert facts["missing"] == [] and facts["policy"] == 3      # miopenTuningPolicySearch
    else:
        assert sorted(facts["missing"]) == sorted("miopen" + n for n in facts["has"])
        err = facts["missing_error"]
        assert isinstance(err, hd.DeviceError), err
        assert err.call == "miopenSetTuningPolicy" and "not exported by" in str(err)


@pytest.mark.parametrize("direction", [0, 1, 2], ids=["fwd", "bwd_data", "bwd_weights"])
def test_immediate_mode_calls_and_result(fake_rocm, direction):
    case = fake_rocm.call(sc.conv_immediate_case, direction)
    assert not violations(case["log"]), violations(case["log"])
    sols = case["solutions"]
    # the fake's heuristic order for a 3x3, stride 1, FLOAT problem: GEMM, Winograd, direct
    assert [s[0] for s in sols][:1] and sols[0][2] == case["ws_reported"]
    dname = ("Forward", "BackwardData", "BackwardWeights")[direction]
    run = calls(case["log"], f"miopenConvolution{dname}Immediate")
    assert len(run) == 1
    r = run[0]
    assert r["solution_id"] == sols[0][0] and r["workSpaceSize"] == sols[0][2]
    a, b, c = (("w", "x", "y"), ("dy", "w", "dx"), ("dy", "x", "dw"))[direction]
    assert (r[a], r[b], r[c]) == case["pointers"][:3]
    assert r["convDesc"]["pad"] == [1, 1] and r["convDesc"]["groups"] == 1
    assert r["convDesc"]["mode"] == 0
    x, w, dy = case["x"], case["w"], case["dy"]
    want = [lambda: ref.conv_fprop(x, w, pre=1, post=1),
            lambda: ref.conv_dgrad(dy, w, x.shape, pre=1, post=1),
            lambda: ref.conv_wgrad(dy, x, w.shape, pre=1, post=1)][direction]()
    np.testing.assert_allclose(case["out"], want, rtol=1e-5, atol=1e-4)
    compiled = calls(case["log"], f"miopenConvolution{dname}CompileSolution")
    assert [c["solution_id"] for c in compiled] == [sols[0][0]]


@pytest.mark.parametrize("tuning", [False, True], ids=["find", "tuned"])
def test_find_2_0_options_and_order(fake_rocm, tuning):
    case = fake_rocm.call(sc.find_case, tuning, 1 << 20)
    log = case["log"]
    assert [r["value"] for r in calls(log, "miopenSetFindOptionTuning")] == [int(tuning)]
    assert [r["value"] for r in calls(log, "miopenSetFindOptionWorkspaceLimit")] == [1 << 20]
    assert [r["value"] for r in calls(log, "miopenSetFindOptionResultsOrder")] == [0]
    assert sorted(r["id"] for r in calls(log, "miopenSetFindOptionPreallocatedTensor")) == [1, 2, 3]
    times = [f[3] for f in case["found"]]
    assert times == sorted(times)
    # every solution object and the problem and options are destroyed again
    assert len(calls(log, "miopenDestroySolution")) == len(case["found"])
    assert calls(log, "miopenDestroyProblem") and calls(log, "miopenDestroyFindOptions")
    fastest_heuristic = case["immediate"][0][0]
    if tuning:     # the fake's tuned kernels rank Winograd first
        assert case["found"][0][1] == 3 and case["found"][0][0] != fastest_heuristic


def test_find_respects_the_workspace_limit(fake_rocm):
    case = fake_rocm.call(sc.find_case, True, 0)
    assert case["found"] and all(f[2] == 0 for f in case["found"])


@pytest.mark.parametrize("call,status,kind", [
    ("miopenSetTensorDescriptor", 3, err_types.MiopenBadParamError),
    ("miopenConvolutionForwardGetSolutionCount", 6, err_types.MiopenNotSupportedError),
    ("miopenCompileFusionPlan", 8, err_types.MiopenNotSupportedError),
    ("miopenSetTensorDescriptor", 4, err_types.MiopenError),
])
def test_status_becomes_a_typed_error(fake_rocm, call, status, kind):
    case = fake_rocm.call(sc.error_case, call, status)
    err = case["error"]
    assert type(err) is kind, (type(err), err)
    assert isinstance(err, err_types.MiopenError) and isinstance(err, hd.ExecutionError)
    assert err.call == call and err.status == status
    name = {3: "miopenStatusBadParm", 4: "miopenStatusAllocFailed", 6: "miopenStatusNotImplemented",
            8: "miopenStatusUnsupportedOp"}[status]
    assert err.status_name == name and f"{call} failed: {name} ({status})" in str(err)
    assert isinstance(err, hd.NotSupportedError) == (status in (6, 8))
    if status == 3:
        built = err.at_build()
        assert isinstance(built, hd.NotSupportedError) and isinstance(built, err_types.MiopenError)
        assert call in str(built)


def test_fusion_plan_runs_and_passes_its_workspace(fake_rocm):
    case = fake_rocm.call(sc.fusion_case, "ACTIVATION_CLIPPEDRELU", 0.5, 0.0, True)
    assert "compile_error" not in case, case.get("compile_error")
    newer = fake_rocm.rocm.miopen_version >= NEWER
    run = calls(case["log"], "miopenExecuteFusionPlan_v2" if newer else "miopenExecuteFusionPlan")
    assert len(run) == 1
    if newer:
        assert case["ws_size"] > 0 and run[0]["workspaceSize"] == case["ws_size"]
    else:
        assert case["ws_size"] == 0
    want = ref.relu(ref.conv_fprop(case["x"], case["w"], pre=1, post=1) + case["b"], 0.0, 0.5)
    np.testing.assert_allclose(case["out"], want, rtol=1e-5, atol=1e-4)


def test_fusion_refusal_is_a_decline(fake_rocm):
    case = fake_rocm.call(sc.fusion_case, "ACTIVATION_RELU", 0.0, 0.0, False, 1)
    err = case["compile_error"]
    assert isinstance(err, err_types.MiopenNotSupportedError) and err.status == 8
    assert isinstance(err, hd.NotSupportedError)


def test_fused_batchnorm_calls_only_where_exported(fake_rocm):
    err = fake_rocm.call(sc.bn_activation_case)["error"]
    if fake_rocm.rocm.miopen_version >= NEWER:
        assert err is None
    else:
        assert isinstance(err, hd.DeviceError)
        assert err.call == "miopenBatchNormForwardInferenceActivation"
