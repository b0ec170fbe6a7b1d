"""Batchnorm training whose saved mean / inv_variance stay virtual (issue 10 item 7).

The CPU runs it; the cuDNN plan used to hand cuDNN ``None`` for the statistics (a raw
``TypeError`` at execute). Both must accept it: the CPU is checked against the float64
reference, the cuDNN plan on the fake runtime (the statistics go to segments of the stream
workspace, and the cuDNN call gets those pointers); tests/gpu/test_bn_gpu.py runs it on
the GPU against the same reference.
"""
from __future__ import annotations

import numpy as np
import pytest

from gpu._bn_cases import bn_training_case
from oracle._cases import assert_close

import hipdnn_async as hd
from hipdnn_async.providers.cudnn import _plans

# the cuDNN training calls' argument positions of the saved mean and inv_variance
# (runtime/_cudnn.pyi: batchnorm_forward_training, batchnorm_forward_training_ex)
STAT_ARGS = {"cudnn.batchnorm_forward_training": (12, 13),
             "cudnn.batchnorm_forward_training_ex": (14, 15)}


CASES = [(layout, relu, virtual) for layout in ("NCHW", "NHWC") for relu in (False, True)
         for virtual in (("mean", "inv_variance"), ("mean",), ("inv_variance",))]


@pytest.mark.parametrize("layout, relu, virtual", CASES)
def test_the_cpu_runs_bn_training_with_virtual_statistics(cpu_device, layout, relu, virtual):
    h, checks = bn_training_case("float32", layout, relu=relu, virtual=virtual)
    got = h.run(cpu_device)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, name)


@pytest.mark.parametrize("layout, relu, virtual", CASES)
def test_the_cudnn_plan_writes_virtual_statistics_to_its_workspace(fake_cuda, layout, relu,
                                                                   virtual):
    h, _ = bn_training_case("float32", layout, relu=relu, virtual=virtual)
    h._alloc_outputs()
    with hd.Device("cuda:0", streams=1) as dev:
        plan = dev.build_sync(h.g)
        res = dev.streams[0].backend.launch_context.resources[_plans.RESOURCE_KEY]
        pplan = plan._pplan
        assert pplan.stats_size == 256 * len(virtual)    # one aligned C-vector each
        assert plan.workspace_size >= pplan.stats_size
        staged = h.stage(dev)
        start = len(fake_cuda.calls)
        plan.execute_sync(staged)
        calls = [(n, a) for n, a, in_run in fake_cuda.calls[start:]
                 if in_run and n in STAT_ARGS]
        ws = range(res.workspace_ptr, res.workspace_ptr + pplan.stats_size)
    assert len(calls) == 1
    name, args = calls[0]
    mean, inv = (args[i] for i in STAT_ARGS[name])
    for role, ptr in (("mean", mean), ("inv_variance", inv)):
        if role in virtual:
            assert ptr in ws, (role, hex(ptr))
        else:
            assert ptr == staged[role].ptr
    assert mean != inv
    assert fake_cuda.violations == []


def test_a_user_workspace_holds_the_virtual_statistics(fake_cuda):
    h, _ = bn_training_case("float32", "NCHW")
    h._alloc_outputs()
    with hd.Device("cuda:0", streams=1) as dev:
        plan = dev.build_sync(h.g)
        ws = dev.empty((plan.workspace_size,), "float32", strides=(1,))
        start = len(fake_cuda.calls)
        plan.execute_sync(h.stage(dev), workspace=ws)
        (args,) = [a for n, a, r in fake_cuda.calls[start:]
                   if r and n == "cudnn.batchnorm_forward_training"]
    assert {args[12], args[13]} == {ws.ptr, ws.ptr + 256}


class _DeviceView:
    """``nbytes`` of device memory at ``ptr``, by __cuda_array_interface__ (version 3)."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3}


def test_a_user_workspace_overlapping_a_buffer_of_the_pack_is_refused(fake_cuda):
    """The workspace is written by the execution: on any buffer of the variant pack
    (input or output) it is a VariantPackError at submit, and nothing is launched."""
    h, _ = bn_training_case("float32", "NCHW")
    h._alloc_outputs()
    with hd.Device("cuda:0", streams=1) as dev:
        plan = dev.build_sync(h.g)
        assert plan.workspace_size > 0
        staged = h.stage(dev)
        start = len(fake_cuda.calls)
        for key, buf in staged.items():
            ws = _DeviceView(buf.ptr + 4, plan.workspace_size)    # starts inside the buffer
            with pytest.raises(hd.VariantPackError,
                               match=r"workspace given with workspace= .* shares memory with "
                                     r"tensor '"):
                plan.execute_sync(staged, workspace=ws)
        assert [n for n, _, r in fake_cuda.calls[start:] if r] == []
        own = dev.empty((plan.workspace_size,), "float32", strides=(1,))
        plan.execute_sync(staged, workspace=own)                  # its own memory: fine
