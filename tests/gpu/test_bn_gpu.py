"""Batchnorm on every GPU device against the float64 reference, for the defects of
issue 10 items 7 and 8 (the fake-runtime unit tests in tests/unit/providers/gpu/ check
the cuDNN call sequence of the same cases without a GPU).

- Item 7: batchnorm training whose saved mean / inv_variance stay virtual runs (it raised
  a raw TypeError at execute on cuDNN) and agrees with the CPU and the reference.
- Item 8: BN inference -> DReLU -> BN backward keeps z in the graph's intermediate type
  (FLOAT): a bf16 NHWC case with many z just below the clip, where a bf16 z flips the
  ReLU mask. The CPU runs the same case (unmarked) so that the case itself is checked here
  too, and the case is shown to discriminate (the bf16-z answer is outside tolerance).
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu._bn_cases import bn_training_case, drelu_boundary_case
from oracle._cases import assert_close

import hipdnn_async as hd

VIRTUAL = [("mean", "inv_variance"), ("mean",), ("inv_variance",)]


@pytest.mark.gpu
@pytest.mark.parametrize("virtual", VIRTUAL, ids="+".join)
@pytest.mark.parametrize("relu", [False, True], ids=["bn", "bn_relu"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bn_training_with_virtual_statistics_gpu(gpu_module_device, dtype, layout, relu,
                                                 virtual):
    dev = gpu_module_device
    h, checks = bn_training_case(dtype, layout, relu=relu, virtual=virtual)
    got = h.run(dev)
    assert h.plan.engine.provider != "cpu"
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{dev.spec} {name} (virtual {virtual})")
    # the CPU accepts and computes the same graph (they must agree on what is accepted)
    h_cpu, _ = bn_training_case(dtype, layout, relu=relu, virtual=virtual)
    with hd.Device("cpu") as cpu:
        got_cpu = h_cpu.run(cpu)
    for name, want, (atol, rtol) in checks:
        assert_close(got_cpu[name], want, atol, rtol, f"cpu {name}")


def test_the_drelu_boundary_case_discriminates():
    # with z rounded to bf16 the answer is outside the tolerance the test demands, so a
    # plan that stores z in bf16 fails test_drelu_keeps_float_intermediates
    _, checks, flipped = drelu_boundary_case("bfloat16", "NHWC")
    (_, want, (atol, rtol)) = checks[0]
    err = np.abs(flipped["dx"] - want) - (atol + rtol * np.abs(want))
    assert (err > 0).sum() > 10


def _drelu_devices():
    from gpu.conftest import gpu_specs
    return ([pytest.param("cpu", id="cpu")]
            + [pytest.param(s, id=s, marks=pytest.mark.gpu) for s in gpu_specs()]
            + ([] if gpu_specs() else [pytest.param(None, id="no-gpu", marks=pytest.mark.gpu)]))


@pytest.mark.parametrize("spec", _drelu_devices())
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_drelu_keeps_float_intermediates(spec, layout):
    if spec is None:
        pytest.skip("no GPU runtime (CUDA/cuDNN or HIP/MIOpen) on this machine")
    h, checks, _ = drelu_boundary_case("bfloat16", layout)
    with hd.Device(spec) as dev:
        got = h.run(dev)
        engine = h.plan.engine.name
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"{spec} {engine} {layout} {name}")
