"""runtime._vendors: the vendor registry, library search order, and what load_vendor says
when a library is missing, broken or overridden. load_vendor's state is per process, so
every load runs in a fresh interpreter (on the fakes of fakes/ where one must load)."""
import ctypes.util
import json
import os
import subprocess
import sys

import pytest

import hipdnn_async as hd
from hipdnn_async.runtime import _gpu, _vendors
from hipdnn_async.runtime._vendors import VENDORS, LibrarySpec


def test_the_registry_names_each_vendors_libraries():
    cuda, hip = VENDORS["cuda"], VENDORS["hip"]
    assert cuda.runtime.sonames == ("libcudart.so.13", "libcudart.so.12")
    assert cuda.runtime.env == "HIPDNN_ASYNC_CUDART"
    assert set(cuda.runtime.wheel_dirs) == {"nvidia/cu13/lib", "nvidia/cuda_runtime/lib"}
    assert (cuda.dnn.sonames, cuda.dnn.env, cuda.dnn.wheel_dirs) == (
        ("libcudnn.so.9",), "HIPDNN_ASYNC_CUDNN", ("nvidia/cudnn/lib",))
    assert hip.runtime.sonames == ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")
    assert hip.runtime.env == "HIPDNN_ASYNC_HIP_RUNTIME"
    assert "/opt/rocm/lib" in hip.runtime.system_dirs and "/opt/rocm-*/lib" in hip.runtime.system_dirs
    assert (hip.dnn.sonames, hip.dnn.env) == (("libMIOpen.so.1",), "HIPDNN_ASYNC_MIOPEN")
    for name, vendor in VENDORS.items():
        assert vendor.name == name and _gpu.instance(name).kind == name   # one runtime each


def test_search_order_env_then_wheels_then_system_dirs_then_sonames(monkeypatch, tmp_path):
    wheel = tmp_path / "site" / "vendor_pkg" / "lib"
    rocm = tmp_path / "rocm-6.4.0" / "lib"
    for d in (wheel, rocm):
        d.mkdir(parents=True)
        (d / "libx.so.2").write_bytes(b"")
    spec = LibrarySpec("x", "X", ("libx.so.3", "libx.so.2"), "HIPDNN_TEST_X", ("vendor_pkg/lib",),
                       ("$HIPDNN_TEST_ROOT/rocm-*/lib", "$HIPDNN_TEST_UNSET/lib"))
    monkeypatch.setenv("HIPDNN_TEST_X", "/explicit/libx.so")
    monkeypatch.setenv("HIPDNN_TEST_ROOT", str(tmp_path))
    monkeypatch.delenv("HIPDNN_TEST_UNSET", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert spec.candidates() == [
        ("/explicit/libx.so", "env"),
        (str(wheel / "libx.so.2"), "site-packages"),
        (str(rocm / "libx.so.2"), "system"),
        ("libx.so.3", "system"), ("libx.so.2", "system")]
    monkeypatch.setenv("HIPDNN_TEST_X", "")          # an empty override is no override
    assert spec.candidates()[0][1] == "site-packages"


def _run(code, *args, **env):
    r = subprocess.run([sys.executable, "-c", code, *args], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


_STATE = r"""
import json, sys
import hipdnn_async as hd
from hipdnn_async.runtime import load_vendor
out = {}
for name in sys.argv[1:] or ["cuda"]:
    s = load_vendor(name)
    rec = s.runtime_record
    out[name] = {"ok": s.ok, "reason": s.reason, "devices": s.device_count,
                 "runtime": rec and [rec.path, rec.found_via, rec.version],
                 "dnn": s.dnn and [s.dnn.path, s.dnn.found_via, s.dnn.version],
                 "same": s is load_vendor(name), "tried": list(s.tried)}
out["devices"] = hd.devices()
for spec in ("cuda:0", "hip:0"):
    try:
        hd.Device(spec).close()
        out[spec] = "opened"
    except hd.DeviceError as e:
        out[spec] = str(e)
print(json.dumps(out))
"""


@pytest.mark.parametrize("path, reason", [
    ("/nonexistent/libcudart.so.13",
     "HIPDNN_ASYNC_CUDART=/nonexistent/libcudart.so.13 does not load: "),
    (ctypes.util.find_library("c") or "libc.so.6",
     "is not a CUDA runtime library: it lacks cudaGetDeviceCount"),
])
def test_a_bad_runtime_override_is_final_and_a_reason_not_a_crash(path, reason):
    out = _run(_STATE, HIPDNN_ASYNC_CUDART=path)
    cuda = out["cuda"]
    assert cuda["ok"] is False and reason in cuda["reason"] and cuda["same"]
    assert len(cuda["tried"]) == 1          # no silent fallback to another libcudart
    assert out["devices"] == ["cpu"] and reason in out["cuda:0"]


def test_hip_without_rocm_names_the_libraries_and_the_paths_tried():
    out = _run(_STATE, "hip")
    hip = out["hip"]
    if hip["runtime"] is not None:
        pytest.skip(f"a HIP runtime loads on this machine ({hip['runtime'][0]})")
    for so in VENDORS["hip"].runtime.sonames:
        assert any(t.startswith(f"{so}: ") for t in hip["tried"]), so
    err = out["hip:0"]
    assert err.startswith("Device: no usable HIP device for 'hip:0': ")
    assert "libamdhip64.so.7/.6/.5" in err and "libMIOpen.so.1" in err
    assert all(t in err for t in hip["tried"]) and "devices present: ['cpu']" in err


def test_a_hip_runtime_without_miopen_says_miopen_is_missing(build_fake):
    fake = build_fake("fake_gpu_runtime", PREFIX="hip", DEVICES=2, VERSION=60443483,
                      PROPS_NAME="R0600", ARCH_OFFSET=1160)
    out = _run(_STATE, "hip", HIPDNN_ASYNC_HIP_RUNTIME=fake,
               HIPDNN_ASYNC_MIOPEN="/nonexistent/libMIOpen.so.1")
    hip = out["hip"]
    assert hip["runtime"] == [fake, "env", 60443483] and hip["devices"] == 2
    assert hip["ok"] is False and "MIOpen" in hip["reason"]
    try:
        import hipdnn_async.runtime._miopen  # noqa: F401 - the binding of issue 12
    except ImportError:
        assert "MIOpen binding (hipdnn_async.runtime._miopen) is not built" in hip["reason"]
    else:
        assert "HIPDNN_ASYNC_MIOPEN=/nonexistent/libMIOpen.so.1 does not load" in hip["reason"]
    # no HIP device is listed (a CUDA one may be, on a GPU machine: seen on the H200)
    assert hip["reason"] in out["hip:0"] and not [d for d in out["devices"] if "hip" in d]


@pytest.mark.parametrize("version, ok", [(91900, True), (80907, False)])
def test_cuda_with_a_runtime_and_cudnn_overridden(build_fake, version, ok):
    cudart = build_fake("fake_gpu_runtime", PREFIX="cuda", DEVICES=1, VERSION=12090,
                        PROPS_NAME="_v2", WITH_POOLS=None)
    cudnn = build_fake("fake_cudnn", VERSION=version)
    out = _run(_STATE, HIPDNN_ASYNC_CUDART=cudart, HIPDNN_ASYNC_CUDNN=cudnn)
    cuda = out["cuda"]
    assert cuda["runtime"] == [cudart, "env", 12090] and cuda["devices"] == 1
    assert cuda["dnn"] == [cudnn, "env", version]
    assert cuda["ok"] is ok
    if ok:
        assert cuda["reason"] == "" and out["devices"] == ["cpu", "cuda:0"]
    else:
        assert cuda["reason"] == f"cuDNN at {cudnn} is version 80907; cuDNN 9 is required"
        assert out["devices"] == ["cpu"]


def test_both_vendors_load_side_by_side(build_fake):
    cudart = build_fake("fake_gpu_runtime", PREFIX="cuda", DEVICES=1, VERSION=13000,
                        PROPS_NAME="_v2", WITH_POOLS=None)
    hip = build_fake("fake_gpu_runtime", PREFIX="hip", DEVICES=3, VERSION=70204000,
                     PROPS_NAME="R0600", ARCH_OFFSET=1160)
    out = _run(_STATE, "cuda", "hip", HIPDNN_ASYNC_CUDART=cudart, HIPDNN_ASYNC_HIP_RUNTIME=hip,
               HIPDNN_ASYNC_CUDNN="/nonexistent/libcudnn.so.9")
    # two instances of one runtime type, each on its own library
    assert out["cuda"]["runtime"] == [cudart, "env", 13000]
    assert out["hip"]["runtime"] == [hip, "env", 70204000]
    assert (out["cuda"]["devices"], out["hip"]["devices"]) == (1, 3)
    assert "HIPDNN_ASYNC_CUDNN=/nonexistent/libcudnn.so.9 does not load" in out["cuda"]["reason"]


def test_load_cuda_is_load_vendor_cuda():
    assert _vendors.load_cuda() is _vendors.load_vendor("cuda")
    assert _vendors.cuda_status() is _vendors.vendor_status("cuda")
    assert _vendors.load_vendor("metal").ok is False
    assert "unknown GPU vendor 'metal'" in _vendors.load_vendor("metal").reason


@pytest.mark.skipif(hd.devices() != ["cpu"], reason="a GPU device is usable on this machine")
@pytest.mark.parametrize("spec", ["cuda:0", "gpu:0"])
def test_no_gpu_gives_a_device_error_with_the_reason(spec):
    from hipdnn_async.providers._registry import gpu_unavailable_reason
    kind = spec.split(":")[0]
    reason = gpu_unavailable_reason(kind)
    assert reason
    with pytest.raises(hd.DeviceError) as info:
        hd.Device(spec)
    assert reason in str(info.value) and "['cpu']" in str(info.value)
