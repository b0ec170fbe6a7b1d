"""providers/_registry.py: vendor -> provider, device specs, hd.devices().

The vendor states come from a fake ``runtime.load_vendor`` and the providers from a fake
module, so every combination of vendors present can be checked on a CPU-only machine.
"""
from __future__ import annotations

import sys
import types

import pytest

import hipdnn_async as hd
from hipdnn_async import runtime
from hipdnn_async.providers import _registry
from hipdnn_async.runtime import VendorState


class FakeProvider:
    """Records the vendor and device index it was opened for."""

    vendor = "?"

    def __init__(self, index):
        self.index = index
        self.spec = f"{self.vendor}:{index}"


class FakeCuda(FakeProvider):
    vendor = "cuda"


class FakeHip(FakeProvider):
    vendor = "hip"


@pytest.fixture
def machine(monkeypatch):
    """Declare which vendors load here: ``machine(cuda=2, hip=None, ...)``; an int is a
    device count, a str the reason it does not load. Providers are fakes for both."""
    mod = types.ModuleType("hipdnn_async.providers._fake_registry_test")
    mod.FakeCuda, mod.FakeHip = FakeCuda, FakeHip
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(_registry, "PROVIDERS", {"cuda": ("_fake_registry_test", "FakeCuda"),
                                                 "hip": ("_fake_registry_test", "FakeHip")})

    def use(**vendors):
        def load_vendor(name):
            got = vendors.get(name, f"lib{name}.so not found; tried: /nowhere/lib{name}.so")
            if isinstance(got, int):
                return VendorState(name, True, device_count=got)
            return VendorState(name, False, got)
        monkeypatch.setattr(runtime, "load_vendor", load_vendor)
    return use


def test_every_gpu_of_every_vendor_is_listed(machine):
    machine(cuda=2, hip=3)
    assert hd.devices() == ["cpu", "cuda:0", "cuda:1", "hip:0", "hip:1", "hip:2"]


def test_vendor_specs_open_that_vendors_provider(machine):
    machine(cuda=2, hip=3)
    for spec, cls, index in (("cuda:1", FakeCuda, 1), ("hip:0", FakeHip, 0), ("hip:2", FakeHip, 2)):
        p = _registry.provider_for(*_registry.parse_spec(spec))
        assert type(p) is cls and p.index == index, spec


def test_gpu_n_counts_over_every_vendor(machine):
    machine(cuda=2, hip=3)
    picks = [_registry.provider_for("gpu", i) for i in range(5)]
    assert [p.spec for p in picks] == hd.devices()[1:]
    with pytest.raises(hd.DeviceError, match=r"no device 'gpu:5'; 5 GPU\(s\) present"):
        _registry.provider_for("gpu", 5)


def test_gpu_n_picks_whichever_vendor_is_present(machine):
    machine(hip=2)
    assert _registry.provider_for("gpu", 1).spec == "hip:1"
    assert hd.devices() == ["cpu", "hip:0", "hip:1"]
    machine(cuda=1)
    assert _registry.provider_for("gpu", 0).spec == "cuda:0"


def test_index_beyond_the_devices_present(machine):
    machine(cuda=2)
    with pytest.raises(hd.DeviceError) as e:
        _registry.provider_for("cuda", 2)
    assert "no device 'cuda:2'; 2 CUDA device(s) present: ['cuda:0', 'cuda:1']" in str(e.value)
    assert e.value.code == "INVALID_VALUE"


def test_a_missing_vendor_says_which_library_and_where(machine):
    machine(cuda=1, hip="no MIOpen (libMIOpen.so.1) loads; tried: /opt/rocm/lib/libMIOpen.so.1")
    with pytest.raises(hd.DeviceError) as e:
        hd.Device("hip:0")
    msg = str(e.value)
    assert "no usable HIP device for 'hip:0'" in msg and "libMIOpen.so.1" in msg
    assert "/opt/rocm/lib" in msg and "['cpu', 'cuda:0']" in msg


def test_no_gpu_names_every_vendors_reason(machine):
    machine()
    assert hd.devices() == ["cpu"]
    with pytest.raises(hd.DeviceError) as e:
        hd.Device("gpu:0")
    msg = str(e.value)
    assert "cuda: libcuda.so not found" in msg and "hip: libhip.so not found" in msg


def test_libraries_without_a_provider_are_reported_not_used(machine, monkeypatch):
    machine(cuda=1, hip=2)
    monkeypatch.delitem(_registry.PROVIDERS, "hip")
    assert hd.devices() == ["cpu", "cuda:0"]
    with pytest.raises(hd.DeviceError, match="no hip provider is built into this release"):
        _registry.provider_for("hip", 0)
    assert _registry.provider_for("gpu", 0).spec == "cuda:0"


def test_the_real_registry_maps_cuda_to_the_cudnn_provider():
    module, cls = _registry.PROVIDERS["cuda"]
    assert (module, cls) == ("cudnn", "CudnnProvider")
    assert set(_registry.PROVIDERS) <= set(runtime.VENDORS)


def test_specs():
    assert _registry.parse_spec(" CUDA:3 ") == ("cuda", 3)
    assert _registry.parse_spec("gpu") == ("gpu", 0)
    for bad in ("tpu", "cuda:-1", "gpu:x", "cpu:"):
        with pytest.raises(hd.DeviceError, match="unknown device spec"):
            _registry.parse_spec(bad)
    with pytest.raises(hd.DeviceError, match="one CPU device"):
        _registry.provider_for("cpu", 1)
