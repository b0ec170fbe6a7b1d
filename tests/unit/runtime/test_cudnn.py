"""runtime._cudnn on the loader: its status table, errors typed end to end, a missing
symbol at call time. The cuDNN table is one per process, so each case runs in a fresh
interpreter on the small fake of fakes/fake_cudnn.c."""
import json
import os
import subprocess
import sys

import pytest

from hipdnn_async import _errors
from hipdnn_async.runtime import _cudnn

_PROBE = r"""
import json, os, sys
from hipdnn_async.runtime import _cudnn
from hipdnn_async import _errors
out = {"record": list(_cudnn.load(sys.argv[1], "env").__dict__.values()),
       "version": _cudnn.version()}
h = _cudnn.create()
_cudnn.set_stream(h, 0)
_cudnn.destroy(h)
for status in (3000, 3999, 2002, 4000, 4242):
    os.environ["FAKE_CUDNN_STATUS"] = str(status)
    try:
        _cudnn.create()
    except _errors.CudnnError as e:
        built = e.at_build()
        out[str(status)] = [type(e).__name__, str(e), e.status_name, e.call, e.library,
                            e.vendor_message, isinstance(e, _errors.NotSupportedError),
                            type(built).__name__, str(built)]
try:
    _cudnn.TensorDescriptor(_cudnn.DATA_FLOAT, (1, 2, 3, 4), (24, 12, 4, 1))
except _errors.LibraryError as e:
    out["missing"] = [str(e), e.call, isinstance(e, _errors.DeviceError)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(build_fake):
    path = build_fake("fake_cudnn", VERSION=91900)
    r = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, FAKE_CUDNN_STATUS="0"))
    assert r.returncode == 0, r.stderr
    return path, json.loads(r.stdout.splitlines()[-1])


def test_load_records_path_how_found_and_version(probe):
    path, out = probe
    assert out["record"] == ["cudnn", path, "env", 91900] and out["version"] == 91900


@pytest.mark.parametrize("status, type_name, name, declines, at_build", [
    (3000, "CudnnNotSupportedError", "CUDNN_STATUS_NOT_SUPPORTED", True,
     "CudnnNotSupportedError"),
    # newer than the table: typed by the name cuDNN gives it
    (3999, "CudnnNotSupportedError", "CUDNN_STATUS_NOT_SUPPORTED_SOMETHING_NEWER", True,
     "CudnnNotSupportedError"),
    (2002, "CudnnBadParamError", "CUDNN_STATUS_BAD_PARAM_NULL_POINTER", False,
     "CudnnNotSupportedError"),
    (4000, "CudnnError", "CUDNN_STATUS_INTERNAL_ERROR", False, "CudnnError"),
    (4242, "CudnnError", "CUDNN_STATUS_UNKNOWN", False, "CudnnError"),
])
def test_a_status_becomes_the_type_of_the_status_table(probe, status, type_name, name, declines,
                                                       at_build):
    path, out = probe
    got = out[str(status)]
    assert got[0] == type_name and got[2] == name
    assert got[1] == f"cudnnCreate failed: {name} ({status}): fake last error"
    assert got[3:6] == ["cudnnCreate", path, "fake last error"]
    assert got[6] is declines
    assert got[7] == at_build
    if status == 2002:
        assert got[8] == ("cudnnCreate refused this graph's parameters: "
                          "CUDNN_STATUS_BAD_PARAM_NULL_POINTER (2002): fake last error")


def test_a_missing_symbol_is_a_device_error_at_call_time(probe):
    path, out = probe
    assert out["missing"] == [f"cudnnCreateTensorDescriptor is not exported by {path}",
                              "cudnnCreateTensorDescriptor", True]


def test_the_status_table_covers_every_family_with_its_type():
    # cudnnStatus_t families of cudnn_graph.h (cuDNN 9): 2xxx BAD_PARAM, 3xxx NOT_SUPPORTED
    for status, (name, cls) in _cudnn.STATUS.items():
        assert name.startswith("CUDNN_STATUS_")
        if status == 0:
            assert cls is None
        elif "NOT_SUPPORTED" in name:
            assert cls is _errors.CudnnNotSupportedError
        elif "BAD_PARAM" in name or name == "CUDNN_STATUS_INVALID_VALUE":
            assert cls is _errors.CudnnBadParamError
        else:
            assert cls is _errors.CudnnError


def test_unloaded_calls_say_the_library_is_not_loaded():
    if _cudnn.loaded() is not None:
        pytest.skip("cuDNN is loaded in this process")
    with pytest.raises(_errors.LibraryError, match="cudnnCreate: the cuDNN library is not loaded"):
        _cudnn.create()
    with pytest.raises(ValueError, match="direction must be 0"):
        _cudnn.get_algorithms(3, 0, 0, 0, 0, 0)
