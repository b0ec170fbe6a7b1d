"""runtime._kinds: one record per device kind, and every place that knows kinds reads it.

A GPU kind no release has ("xpu": DLPack's kDLOneAPI memory, Ray's "GPU" resource) joins
with one ``DeviceKind`` in ``KINDS`` and its provider's line in ``PROVIDERS``, and nothing
else: spec parsing and its error, ``hd.devices()``, ``Device`` and ``"gpu:N"``,
``open_vendor``'s messages, the GPU binder's DLPack check and the Ray worker's device,
GPU check and resources then know it. The records' own values are checked against their
sources: dlpack.h's device types and Ray's accelerator managers.
"""
from __future__ import annotations

import sys
import types

import pytest

import hipdnn_async as hd
from hipdnn_async import runtime
from hipdnn_async.providers import _registry
from hipdnn_async.providers._gpu import _vendor
from hipdnn_async.providers._gpu._bind import GpuTarget, make_binder
from hipdnn_async.providers.cpu import CpuProvider
from hipdnn_async.runtime import KINDS, VENDORS, DeviceKind, VendorState
from hipdnn_async.runtime._libraries import LibrarySpec

from .gpu.test_bind import _DLPackProducer

KDL_ONEAPI = 14      # dlpack.h: kDLOneAPI


class FakeXpu(CpuProvider):
    """A provider of the new kind (host memory behind it, so that a Device opens)."""

    def __init__(self, index):
        super().__init__()
        self.spec = f"xpu:{index}"


XPU = DeviceKind(
    "xpu", "XPU",
    runtime=LibrarySpec("xpurt", "XPU runtime", ("libxpurt.so.1",), "HIPDNN_TEST_XPURT"),
    dnn=LibrarySpec("xdnn", "xDNN", ("libxdnn.so.1",), "HIPDNN_TEST_XDNN"), dnn_module="_xdnn",
    dlpack=(KDL_ONEAPI,), ray_resource="GPU",
    ray_noset=("RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK",))


@pytest.fixture
def xpu(monkeypatch):
    """The machine has two XPUs and no CUDA or HIP device."""
    mod = types.ModuleType("hipdnn_async.providers._fake_kinds_test")
    mod.FakeXpu = FakeXpu
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setitem(KINDS, "xpu", XPU)                                   # the one record
    monkeypatch.setitem(_registry.PROVIDERS, "xpu", ("_fake_kinds_test", "FakeXpu"))

    def load_vendor(name):
        if name == "xpu":
            return VendorState(name, True, device_count=2)
        return VendorState(name, False, f"lib{name}.so not found")
    monkeypatch.setattr(runtime, "load_vendor", load_vendor)
    monkeypatch.setattr(_vendor, "load_vendor", load_vendor)
    for var in XPU.ray_noset:
        monkeypatch.delenv(var, raising=False)


def test_a_new_kind_is_a_device_spec_and_a_device(xpu):
    assert list(VENDORS) == ["cuda", "hip", "xpu"]
    assert hd.devices() == ["cpu", "xpu:0", "xpu:1"]
    with hd.Device("xpu:1", streams=1) as dev:
        assert dev.spec == "xpu:1" and dev.is_host is False and type(dev.provider) is FakeXpu
    assert _registry.provider_for("gpu", 1).spec == "xpu:1"     # "gpu:N" counts it
    with pytest.raises(hd.DeviceError, match=r"no device 'xpu:2'; 2 XPU device\(s\) present"):
        hd.Device("xpu:2")
    with pytest.raises(hd.DeviceError, match=r"use 'cpu', 'gpu:N', 'cuda:N', 'hip:N' or "
                                             r"'xpu:N'"):
        hd.Device("xpu0")
    with pytest.raises(hd.DeviceError, match=r"no device xpu:5; 2 XPU device\(s\) present"):
        _vendor.open_vendor("xpu", 5)


def test_the_gpu_binder_takes_the_new_kinds_dlpack_memory_only(xpu):
    class Runtime:                       # every address is device 0's
        def pointer_device(self, ptr):
            return 0
    t = hd.Graph(io_data_type="float32").tensor(dims=(2, 3, 4, 5), name="x")
    bind = make_binder(t, output=False, target=GpuTarget(0, "xpu:0", Runtime()))
    assert bind(_DLPackProducer((2, 3, 4, 5), device=(KDL_ONEAPI, 0), ptr=0x10000)) == 0x10000
    with pytest.raises(hd.VariantPackError, match="lives on CUDA device 0; this plan runs on "
                                                  "'xpu:0'"):
        bind(_DLPackProducer((2, 3, 4, 5), device=(2, 0), ptr=0x10000))


def test_the_ray_worker_knows_the_new_kind(xpu, monkeypatch):
    from hipdnn_async.ray import _cli, _session
    assert _session.parse_device("XPU:1") == ("xpu", 1)
    assert _session.worker_device("xpu:1") == "xpu:1"           # outside Ray: as given
    monkeypatch.setattr(_session, "_assigned_gpus", lambda: ["5", "7"])
    assert _session.worker_device("xpu:1") == "xpu:1"           # Ray made them 0, 1
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_ZE_AFFINITY_MASK", "1")
    assert _session.worker_device("xpu:1") == "xpu:7"           # Ray left them physical
    assert _cli._gpus_missing("xpu", 2) == ""
    assert "this machine has 2" in _cli._gpus_missing("xpu", 3)


def test_the_records_hold_dlpacks_device_types():
    # dlpack.h (DLPack 1.0) DLDeviceType: kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, kDLROCM 10,
    # kDLROCMHost 11, kDLCUDAManaged 13
    assert (KINDS["cpu"].dlpack, KINDS["cpu"].dlpack_host) == ((1,), ())
    assert (KINDS["cuda"].dlpack, KINDS["cuda"].dlpack_host) == ((2, 13), (3,))
    assert (KINDS["hip"].dlpack, KINDS["hip"].dlpack_host) == ((10,), (11,))
    assert [k for k, kind in KINDS.items() if kind.is_host] == ["cpu"]
    assert KINDS["cpu"].runtime is None and KINDS["cpu"].ray_resource is None


def test_the_records_hold_rays_names():
    # ray._private, not ray: with pythonpath = ["tests"], the folder tests/ray is importable
    # as a namespace package named ray where Ray is not installed
    pytest.importorskip("ray._private.accelerators", reason="Ray is an optional extra (ray)")
    from ray._private.accelerators import amd_gpu, nvidia_gpu
    assert KINDS["cuda"].ray_resource == nvidia_gpu.NvidiaGPUAcceleratorManager.get_resource_name()
    assert KINDS["hip"].ray_resource == amd_gpu.AMDGPUAcceleratorManager.get_resource_name()
    assert nvidia_gpu.NOSET_CUDA_VISIBLE_DEVICES_ENV_VAR in KINDS["cuda"].ray_noset
    assert amd_gpu.NOSET_HIP_VISIBLE_DEVICES_ENV_VAR in KINDS["hip"].ray_noset
