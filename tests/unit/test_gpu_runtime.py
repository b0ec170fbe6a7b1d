"""The GPU layers that run without a GPU: library search, binding errors, error pickling,
the symbol tables, and clear DeviceErrors where no CUDA device is usable."""
import ctypes.util
import os
import pickle
import subprocess
import sys

import pytest

import hipdnn_async as hd
from hipdnn_async.providers._registry import gpu_unavailable_reason
from hipdnn_async.runtime import _cudnn, _gpu, _libs, load_cuda


def test_cudnn_symbol_indices_match_the_name_table():
    # the Cython DEF indices and _NAMES are maintained by hand; they must agree
    assert len(_cudnn.NAMES) == 48
    for name, index in _cudnn.INDEX.items():
        assert _cudnn.NAMES[index] == name


@pytest.mark.parametrize("err", [
    _gpu.GpuError("cudaMalloc", 2, "cudaErrorMemoryAllocation", "out of memory"),
    _cudnn.CudnnError("cudnnConvolutionForward", 3000, "CUDNN_STATUS_NOT_SUPPORTED", "detail"),
])
def test_vendor_errors_pickle_with_their_fields(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err)
    assert (back.call, back.status, back.name) == (err.call, err.status, err.name)


def test_not_supported_class_of_cudnn_status():
    assert _cudnn.CudnnError("f", 3007, "ARCH_MISMATCH").not_supported
    assert not _cudnn.CudnnError("f", 2000, "BAD_PARAM").not_supported


def test_library_search_order_env_first(monkeypatch, tmp_path):
    fake = tmp_path / "libcudart.so.13"
    fake.write_bytes(b"")
    monkeypatch.setenv("HIPDNN_ASYNC_CUDART", str(fake))
    monkeypatch.syspath_prepend(str(tmp_path))
    cands = _libs._candidates("cudart", "HIPDNN_ASYNC_CUDART", _libs._CUDART_SONAMES)
    assert cands[0] == (str(fake), "env")
    assert cands[-1] == ("libcudart.so.12", "system")


@pytest.mark.skipif(load_cuda()["ok"], reason="a CUDA device is usable on this machine")
@pytest.mark.parametrize("spec", ["cuda:0", "gpu:0"])
def test_no_gpu_gives_a_device_error_with_the_reason(spec):
    reason = gpu_unavailable_reason()
    assert reason
    with pytest.raises(hd.DeviceError) as info:
        hd.Device(spec)
    assert reason in str(info.value) and "['cpu']" in str(info.value)


def test_hip_is_refused_with_a_reason():
    with pytest.raises(hd.DeviceError, match="HIP/MIOpen provider is not built"):
        hd.Device("hip:0")


@pytest.mark.parametrize("env, reason", [
    ({"HIPDNN_ASYNC_CUDART": "/nonexistent/libcudart.so.13"},
     "HIPDNN_ASYNC_CUDART=/nonexistent/libcudart.so.13 does not load"),
    ({"HIPDNN_ASYNC_CUDART": ctypes.util.find_library("c") or "libc.so.6"},
     "is not a CUDA runtime library: it lacks cudaGetDeviceCount"),
])
def test_a_bad_library_override_is_a_reason_not_a_crash(env, reason):
    # load_cuda's state is per process: run each case in a fresh interpreter
    code = ("import hipdnn_async as hd\nfrom hipdnn_async.runtime import load_cuda\n"
            "s = load_cuda(); print(s['ok']); print(s['reason']); print(hd.devices())\n"
            "try:\n    hd.Device('cuda:0')\nexcept hd.DeviceError as e:\n    print('DeviceError', e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ok, why, devs, err = r.stdout.splitlines()[:4]
    assert ok == "False" and reason in why and devs == "['cpu']"
    assert err.startswith("DeviceError") and reason in err
