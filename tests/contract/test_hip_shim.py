"""The hip-on-CUDA shim (tests/contract/hip_shim) on the contract harness's fake libcudart.

The shim is built here exactly as on the GPU machine (``hip_min.h``, no ROCm header) but
linked against the fake CUDA runtime, and loaded as the HIP runtime through the loader's
override (``HIPDNN_ASYNC_HIP_RUNTIME``) in a worker process. Checked:

- ``hip_min.h`` against the real ROCm 6.4.3 and 7.2.4 headers (values, struct layouts),
  and the shim compiled against those headers (every definition against AMD's prototype);
  a wrong value in ``hip_min.h`` (CUDA's number for a HIP attribute) fails the check;
- every ``hip*`` symbol the HIP binding looks up is exported, nothing of the CUDA side is;
- the CUDA values the shim passes to libcudart (the fake's call log) are CUDA's own
  enumerators (values from NVIDIA's headers), for flags, attributes, memcpy kinds, pool
  attributes, capture modes;
- the HIP binding and the GPU stream backend through the shim: copies, stream order,
  events, host functions, stream-ordered allocation, pinned memory, graphs, queue
  submissions across streams, a cancelled awaiter; statuses translated both ways.
The same scenarios run on a real GPU in tests/gpu/test_hip_shim_gpu.py.
"""
from __future__ import annotations

import shutil

import pytest

from . import _build, _headers
from ._fakes import between, calls, violations
from ._worker import FakeGpuProcess
from .conftest import unavailable
from .hip import _debian
from .hip_shim import _shim
from .hip_shim import _shim_scenarios as sc

_ROCM = [pytest.param(s, id=s.label) for s in _debian.ROCM_SOURCES]

# CUDA enumerators the fake's log is compared with (their values: NVIDIA's headers)
CUDA_NAMES = [
    "cudaStreamNonBlocking", "cudaEventBlockingSync", "cudaEventDisableTiming",
    "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
    "cudaDevAttrComputeCapabilityMajor", "cudaDevAttrComputeCapabilityMinor",
    "cudaDevAttrMultiProcessorCount", "cudaDevAttrMemoryPoolsSupported", "cudaDevAttrWarpSize",
    "cudaMemPoolAttrReleaseThreshold", "cudaStreamCaptureModeThreadLocal",
]
# HIP enumerators the statuses are compared with (their values: ROCm's headers)
HIP_NAMES = ["hipErrorInvalidValue", "hipErrorOutOfMemory", "hipErrorInvalidDevice",
             "hipErrorInvalidMemcpyDirection", "hipErrorUnknown", "hipMemoryTypeHost",
             "hipMemoryTypeDevice", "hipMemoryTypeUnregistered", "hipStreamCaptureStatusActive",
             "hipStreamCaptureStatusNone", "hipDeviceAttributeWarpSize"]


@pytest.fixture(scope="module")
def cuda_values(nvidia_headers, fake_libs):
    try:
        return _build.header_constants(CUDA_NAMES, nvidia_headers, includes=("cuda_runtime_api.h",))
    except _build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def _rocm_include(source):
    try:
        return _headers.ensure(source)[0]
    except _headers.HeadersUnavailable as exc:
        unavailable(f"ROCm headers unavailable: {exc}")


@pytest.fixture(scope="module")
def hip_values():
    """ROCm 7.2.4's values of HIP_NAMES (hip_min_check.c holds 6.4.3 to the same)."""
    include = _rocm_include(_debian.ROCM_SOURCES[-1])
    headers = {"rocm": (include, {})}
    try:
        return _build.header_constants(HIP_NAMES, headers, includes=("hip/hip_runtime_api.h",),
                                       defines=("-D__HIP_PLATFORM_AMD__",))
    except _build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def _cuda_includes(nvidia_headers):
    return [v[0] for k, v in nvidia_headers.items() if k.startswith("cuda-")]


@pytest.fixture(scope="module")
def shim(fake_libs, nvidia_headers, tmp_path_factory):
    """libhip_on_cuda.so (hip_min.h, as on the GPU machine) on the fake libcudart."""
    try:
        return str(_shim.build(tmp_path_factory.mktemp("hip_shim"), fake_libs.cudart,
                               _cuda_includes(nvidia_headers)))
    except _build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def _worker(shim_path, fake_libs, tmp_path_factory):
    return FakeGpuProcess({
        "HIPDNN_ASYNC_HIP_RUNTIME": shim_path, "HIPDNN_ASYNC_CUDART": fake_libs.cudart,
        "HIPDNN_ASYNC_CUDNN": fake_libs.cudnn,
        "HIPDNN_ASYNC_PERFDB": str(tmp_path_factory.mktemp("perfdb") / "perfdb.sqlite3")})


@pytest.fixture(scope="module")
def hip_on_fake(shim, fake_libs, tmp_path_factory):
    proc = _worker(shim, fake_libs, tmp_path_factory)
    yield proc
    proc.close()


# ---------------------------------------------------------------------- declarations
@pytest.mark.parametrize("source", _ROCM)
def test_hip_min_matches_the_rocm_headers(source, tmp_path):
    include = _rocm_include(source)
    said = _shim.check_declarations(include, tmp_path)
    assert said.startswith("hip_min.h agrees with HIP "), said


def test_a_wrong_value_in_hip_min_fails_the_check(tmp_path):
    """CUDA's number for a HIP attribute (the classic mistake) must not pass."""
    include = _rocm_include(_debian.ROCM_SOURCES[-1])
    copy = tmp_path / "shim"
    shutil.copytree(_shim.SHIM_DIR, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    header = copy / "hip_min.h"
    text = header.read_text()
    wrong = text.replace("X(hipDeviceAttributeComputeCapabilityMajor, 23)",
                         "X(hipDeviceAttributeComputeCapabilityMajor, 75)")
    assert wrong != text
    header.write_text(wrong)
    with pytest.raises(_build.BuildError, match="hipDeviceAttributeComputeCapabilityMajor"):
        _shim.check_declarations(include, tmp_path, shim_dir=copy)


@pytest.mark.parametrize("source", _ROCM)
def test_the_shim_compiles_against_the_rocm_headers(source, fake_libs, nvidia_headers,
                                                    tmp_path, tmp_path_factory):
    """Every hip* definition of the shim against AMD's own prototype; the library built
    that way also runs (the copy case)."""
    include = _rocm_include(source)
    lib = _shim.build(tmp_path, fake_libs.cudart, _cuda_includes(nvidia_headers),
                      hip_include=include)
    proc = _worker(str(lib), fake_libs, tmp_path_factory)
    try:
        r = proc.call(sc.copy_case, True)
    finally:
        proc.close()
    assert r["pinned_ok"] and r["pageable_ok"] and r["cuda_reads_hip_memory"], r


def _binding_symbols():
    """hip<Name> for every lib.sym("Name") of src_pyx/_gpu.pyx, and the HIP aliases."""
    import re
    from . import _abi
    text = (_abi.SRC_PYX / "_gpu.pyx").read_text()
    single = set(re.findall(r'lib\.sym\("(\w+)"\)', text))
    from hipdnn_async.runtime import _gpu
    aliases = [tuple("hip" + n for n in names) for names in _gpu._ALIASES["hip"].values()]
    return sorted("hip" + n for n in single), aliases


def test_every_symbol_the_binding_uses_is_exported(shim):
    import ctypes
    lib = ctypes.CDLL(shim)
    single, aliases = _binding_symbols()
    assert len(single) > 30, single
    missing = [n for n in single if not hasattr(lib, n)]
    missing += [" or ".join(a) for a in aliases if not any(hasattr(lib, n) for n in a)]
    assert not missing, f"the shim lacks {missing}"
    assert hasattr(lib, "hipLaunchHostFunc")
    assert not hasattr(lib, "sc_Malloc"), "the CUDA side must stay hidden"


# ---------------------------------------------------------------------- the runtime layer
def test_the_loader_loads_the_shim_as_the_hip_runtime(hip_on_fake, shim, hip_values):
    r = hip_on_fake.call(sc.device_case, True)
    st = r["state"]
    assert st["path"] == shim and st["found_via"] == "env" and st["device_count"] == 1, st
    assert not st["ok"] and "MIOpen" in st["reason"], st      # no MIOpen here
    assert r["dnn"] is not None and "DeviceError" in r["dnn"]["mro"], r["dnn"]
    assert r["version"] == 70200000


def test_device_facts_match_the_cuda_binding(hip_on_fake, cuda_values, hip_values):
    r = hip_on_fake.call(sc.device_case, True)
    hip, cuda = r["hip"], r["cuda"]
    for key in ("name", "cc", "mp", "pools", "total", "priorities", "count"):
        assert hip[key] == cuda[key], (key, hip[key], cuda[key])
    assert hip["arch"] == "sm_%d%d (hip-on-cuda shim)" % tuple(cuda["cc"]), hip["arch"]
    assert r["props_status"] == 0
    props = r["props"]
    assert (props["major"], props["minor"]) == tuple(cuda["cc"])
    assert props["multiProcessorCount"] == cuda["mp"] and props["totalGlobalMem"] == cuda["total"]
    assert props["warpSize"] == r["warp_size_attr"] == 32
    attrs = {c["attr"] for c in calls(r["log"], "cudaDeviceGetAttribute")}
    want = {cuda_values[n] for n in ("cudaDevAttrComputeCapabilityMajor",
                                     "cudaDevAttrComputeCapabilityMinor",
                                     "cudaDevAttrMultiProcessorCount",
                                     "cudaDevAttrMemoryPoolsSupported", "cudaDevAttrWarpSize")}
    assert attrs == want, "HIP attribute numbers must reach CUDA as CUDA's cudaDeviceAttr"


def test_copies_round_trip_with_cuda_memcpy_kinds(hip_on_fake, cuda_values, hip_values):
    r = hip_on_fake.call(sc.copy_case, True)
    assert not violations(r["log"]), violations(r["log"])
    assert r["pinned_ok"] and r["pageable_ok"] and r["cuda_reads_hip_memory"], r
    kinds = [c["kind"] for c in calls(between(r["log"], "copies", "pageable"), "cudaMemcpyAsync")]
    assert kinds == [cuda_values["cudaMemcpyHostToDevice"], cuda_values["cudaMemcpyDeviceToDevice"],
                     cuda_values["cudaMemcpyDeviceToHost"]], kinds
    assert r["pointer_device"] == {"device": 0, "pinned": -1, "pageable": -1}
    t = r["pointer_types"]
    assert t["device"] == (0, hip_values["hipMemoryTypeDevice"], 0), t
    assert t["pinned"] == (0, hip_values["hipMemoryTypeHost"], 0), t
    assert t["pageable"] == (0, hip_values["hipMemoryTypeUnregistered"], 0), t


def test_stream_order_and_events(hip_on_fake, cuda_values):
    r = hip_on_fake.call(sc.order_case, True)
    log = between(r["log"], "order", "end")
    assert not violations(r["log"]), violations(r["log"])
    assert r["ordered_ok"], "stream 2 ran before the event of stream 1"
    assert r["pending_seen"] and r["stream_pending_seen"], "the delayed copy was not seen in flight"
    assert r["complete_after"] and r["stream_idle_after"]
    assert r["elapsed_ms"] > 0
    assert r["untimed_error"] is not None and "GpuError" in r["untimed_error"]["mro"]
    created = calls(r["log"], "cudaEventCreateWithFlags")
    default = cuda_values["cudaEventBlockingSync"] | cuda_values["cudaEventDisableTiming"]
    assert sorted(c["flags"] for c in created) == [0, 0, default, default], created
    waits = calls(log, "cudaStreamWaitEvent")
    assert len(waits) == 1 and waits[0]["flags"] == 0, waits


def test_host_function_runs_after_the_copy(hip_on_fake):
    r = hip_on_fake.call(sc.host_func_case, True)
    assert r["status"] == 0 and r["calls"] == 1, r
    assert r["saw_copy"] == [True] and r["other_thread"] == [True], r


def test_stream_ordered_allocation_and_the_pool(hip_on_fake, cuda_values):
    r = hip_on_fake.call(sc.alloc_case, True)
    assert not violations(r["log"]), violations(r["log"])
    assert r["pools"] and r["kept"]
    assert r["pool_status"] == 0 and r["threshold_status"] == 0
    assert r["threshold"] == 2 ** 64 - 1, "the release threshold set through HIP reads back"
    sets = calls(r["log"], "cudaMemPoolSetAttribute")
    assert not sets  # the log was cleared after pool_keep_memory; the readback proves the set
    names = [c["fn"] for c in calls(between(r["log"], "alloc", "end"))]
    assert names[:2] == ["cudaMallocAsync", "cudaMemsetAsync"] and "cudaFreeAsync" in names, names
    assert r["stream_ordered_ok"] and r["pooled_device"] == 0


def test_graph_capture_launch_and_update(hip_on_fake, cuda_values, hip_values):
    r = hip_on_fake.call(sc.graph_case, True)
    assert not violations(r["log"]), violations(r["log"])
    assert r["status_during"] == hip_values["hipStreamCaptureStatusActive"]
    assert r["status_after"] == hip_values["hipStreamCaptureStatusNone"]
    assert r["first_ok"] and r["updated"] and r["second_ok"], r
    modes = {c["mode"] for c in calls(r["log"], "cudaStreamBeginCapture")}
    assert modes == {cuda_values["cudaStreamCaptureModeThreadLocal"]}, modes


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_gpu_stream_backend_over_hip(hip_on_fake, cuda_values, backend):
    r = hip_on_fake.call(sc.queue_case, True, backend)
    assert not violations(r["log"]), violations(r["log"])
    assert r["arch"].endswith("(hip-on-cuda shim)") and r["pooled"]
    assert r["values"] == list(range(8)) and all(r["outputs_ok"]) and r["streams"] == 2, r
    assert r["cross_ok"], "stream 1 did not wait for stream 0's event"
    assert r["cancelled"] is True, "the awaiter was not cancelled in flight: proves nothing"
    assert r["alive_at_cancel"] and not r["done_at_cancel"], r
    assert r["done_after"] and r["released_after"] and r["cancel_ok"], r
    assert r["pending_after"] == [0, 0]
    opened = between(r["log"], "open", "submit")
    flags = {c["flags"] for c in calls(r["log"], "cudaStreamCreateWithFlags")}
    assert flags == {cuda_values["cudaStreamNonBlocking"]}, flags
    assert calls(opened, "cudaStreamCreateWithFlags"), "GpuStreamBackend opened no stream"
    syncs = calls(between(r["log"], "submit", "cross"), "cudaEventSynchronize")
    assert syncs and not [s for s in syncs if s.get("spins")], "completion events must sleep"
    closing = between(r["log"], "close", "closed")
    destroyed = {c["stream"] for c in calls(closing, "cudaStreamDestroy")}
    assert len(destroyed) == 2, destroyed


def test_statuses_are_translated(hip_on_fake, hip_values):
    r = hip_on_fake.call(sc.error_case, True)
    want = {"bad_device": ("hipErrorInvalidDevice", "GpuDeviceError"),
            "unpaired_attribute": ("hipErrorInvalidValue", "GpuError"),
            "unpaired_memcpy_kind": ("hipErrorInvalidMemcpyDirection", "GpuError"),
            "unpaired_stream_flag": ("hipErrorInvalidValue", "GpuError"),
            "unpaired_event_flag": ("hipErrorInvalidValue", "GpuError"),
            "out_of_memory": ("hipErrorOutOfMemory", "GpuError"),
            "unpaired_cuda_status": ("hipErrorUnknown", "GpuError")}
    for label, (name, kind) in want.items():
        e = r[label]
        assert e is not None, label
        assert e["status"] == hip_values[name] and e["status_name"] == name, (label, e)
        assert kind in e["mro"] and e["call"].startswith("hip"), (label, e)
    unpaired = r["unpaired_cuda_status"]
    assert "cudaErrorNotPermitted" in unpaired["message"], unpaired
