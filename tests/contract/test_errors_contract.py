"""Vendor failures injected into the fakes, and the errors the public API raises for them.

The error model is DESIGN.md's (``hipdnn_async/_errors.py``): one status table per library;
NOT_SUPPORTED is a decline (``NotSupportedError``), BAD_PARAM at build is a
``NotSupportedError`` naming the call, anything else an ``ExecutionError``; every cuDNN
failure is a ``CudnnError`` and every runtime failure a ``GpuError``, with ``.status``,
``.status_name`` and ``.call``; the completion path keeps the error object. Failures at
execution reach only that execution: the stream keeps working.
"""
from __future__ import annotations

import pytest

import hipdnn_async as hd
from hipdnn_async import _errors

from . import _scenarios
from ._expect import assert_results, expected_algorithm
from ._fakes import between, calls, violations

def run(fake_gpu, inject, phase, pattern="CONV_FPROP", **kw):
    r = fake_gpu.call(_scenarios.error_case, pattern, "float32", "NCHW", inject=inject,
                      phase=phase, **kw)
    assert not violations(r["log"]), violations(r["log"])
    return r


def assert_typed(r, family, kind, status, call):
    err = r["error"]
    assert err is not None, "no error raised"
    assert isinstance(err, family) and isinstance(err, kind), r["mro"]
    assert err.status == status and err.call == call, r["fields"]
    assert err.status_name and err.status_name.startswith(("CUDNN_STATUS", "cuda")), r["fields"]
    assert call in str(err) and err.status_name in str(err), str(err)


# ------------------------------------------------------------------ build
def test_every_algorithm_refused_at_its_trial_is_a_decline(fake_gpu, hdr):
    r = run(fake_gpu, [("cudnnConvolutionForward", hdr.CUDNN_STATUS_NOT_SUPPORTED, 1, 99)], "build")
    assert isinstance(r["error"], hd.NotSupportedError), r["mro"]
    assert "cudnnConvolutionForward" in r["message"] or "CUDNN_STATUS_NOT_SUPPORTED" in r["message"]


def test_an_algorithm_refused_at_its_trial_gives_way_to_the_next(fake_gpu, hdr):
    r = run(fake_gpu, [("cudnnConvolutionForward", hdr.CUDNN_STATUS_NOT_SUPPORTED, 1, 1)], "build")
    assert r["error"] is None, r["message"]
    build = between(r["log"], "build", "exec0")
    heur = calls(build, "cudnnGetConvolutionForwardAlgorithm_v7")[0]["perf"]
    first = expected_algorithm(hdr, heur, 0, True)
    rest = [e for e in heur if e["algo"] != first["algo"]]
    second = expected_algorithm(hdr, rest, 0, True)
    assert r["plan"]["algorithm"] == second["name"]
    trials = calls(build, "cudnnConvolutionForward")
    assert [t["algo"] for t in trials[:2]] == [first["algo"], second["algo"]]
    assert trials[0]["status"] == hdr.CUDNN_STATUS_NOT_SUPPORTED and trials[1]["status"] == 0
    assert_results(dict(r, plan=r["plan"]))


def test_not_supported_at_build_is_a_decline(fake_gpu, hdr):
    """Every engine declines (the graph engine: the fake has no backend API; the legacy
    one: the injected status): dev.build's NotSupportedError names each engine's reason."""
    call = "cudnnGetConvolutionForwardAlgorithm_v7"
    r = run(fake_gpu, [(call, hdr.CUDNN_STATUS_NOT_SUPPORTED, 1, 1)], "build")
    assert isinstance(r["error"], hd.NotSupportedError), r["mro"]
    assert call in r["message"] and "CUDNN_STATUS_NOT_SUPPORTED" in r["message"], r["message"]


def test_bad_param_at_build_is_not_supported_naming_the_call(fake_gpu, hdr):
    """DESIGN.md: a BAD_PARAM at build means "this engine cannot take the graph": a
    decline whose message names the call and the status (BadParamError.at_build). Every
    engine declines here; the legacy engine's own error, kept in the DeclinedError's
    ``declines``, is cuDNN's NotSupportedError with the status and call."""
    call = "cudnnSetTensorNdDescriptor"
    r = run(fake_gpu, [(call, hdr.CUDNN_STATUS_BAD_PARAM, 1, 1)], "build")
    assert isinstance(r["error"], hd.NotSupportedError), r["mro"]
    assert not isinstance(r["error"], hd.ExecutionError), r["mro"]
    assert call in r["message"] and "CUDNN_STATUS_BAD_PARAM" in r["message"], r["message"]
    legacy = dict(r["error"].declines)["CUDNN_LEGACY_ENGINE"]
    assert_typed(_scenarios._error_facts(legacy), _errors.CudnnError, hd.NotSupportedError,
                 hdr.CUDNN_STATUS_BAD_PARAM, call)


def test_internal_error_at_build_is_an_execution_error(fake_gpu, hdr):
    call = "cudnnGetConvolutionForwardAlgorithm_v7"
    r = run(fake_gpu, [(call, hdr.CUDNN_STATUS_INTERNAL_ERROR, 1, 1)], "build")
    assert_typed(r, _errors.CudnnError, hd.ExecutionError, hdr.CUDNN_STATUS_INTERNAL_ERROR, call)
    assert not isinstance(r["error"], hd.NotSupportedError)


def test_out_of_device_memory_is_a_device_error(fake_gpu, hdr):
    r = run(fake_gpu, [("cudaMallocAsync", hdr.cudaErrorMemoryAllocation, 1, 1),
                       ("cudaMalloc", hdr.cudaErrorMemoryAllocation, 1, 1)], "build")
    assert isinstance(r["error"], hd.DeviceError), r["mro"]
    assert "cudaErrorMemoryAllocation" in r["message"] or "out of memory" in r["message"]


# ------------------------------------------------------------------ execution
@pytest.mark.parametrize("status_name", ["CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_NOT_SUPPORTED"])
def test_a_failed_enqueue_fails_that_execution_only(fake_gpu, hdr, status_name):
    r = run(fake_gpu, [("cudnnConvolutionForward", hdr[status_name], 1, 1)], "exec")
    assert isinstance(r["error"], hd.ExecutionError), r["mro"]
    assert "cudnnConvolutionForward" in r["message"] and status_name in r["message"]
    assert_results(r)          # the next execution on the same stream is right


def test_a_gpu_fault_reported_at_completion_fails_that_execution_only(fake_gpu, hdr):
    r = run(fake_gpu, [("cudaEventSynchronize", hdr.cudaErrorLaunchFailure, 1, 1)], "exec")
    assert isinstance(r["error"], hd.ExecutionError), r["mro"]
    assert "cudaErrorLaunchFailure" in r["message"]
    assert_results(r)


def test_execution_errors_keep_the_vendor_status(fake_gpu, hdr):
    r = run(fake_gpu, [("cudnnConvolutionForward", hdr.CUDNN_STATUS_EXECUTION_FAILED, 1, 1)], "exec")
    assert_typed(r, _errors.CudnnError, hd.ExecutionError, hdr.CUDNN_STATUS_EXECUTION_FAILED,
                 "cudnnConvolutionForward")


def test_completion_errors_keep_the_runtime_status(fake_gpu, hdr):
    r = run(fake_gpu, [("cudaEventSynchronize", hdr.cudaErrorLaunchFailure, 1, 1)], "exec")
    assert_typed(r, _errors.GpuError, hd.ExecutionError, hdr.cudaErrorLaunchFailure,
                 "cudaEventSynchronize")


def test_errors_pickle_with_their_fields(fake_gpu, hdr):
    """They crossed a process boundary to get here: the fields survived pickling."""
    r = run(fake_gpu, [("cudnnConvolutionForward", hdr.CUDNN_STATUS_EXECUTION_FAILED, 1, 1)], "exec")
    assert type(r["error"]).__name__ == r["type"] and str(r["error"]) == r["message"]
