"""The GPU runtime layer on the fake CUDA runtime: discovery, what a Device sets up,
memory copies, the binder's pointer checks, streams and events with the header's flags."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd

from . import _scenarios
from ._fakes import between, calls, violations
from ._worker import FakeGpuProcess


@pytest.fixture(scope="module")
def rt(fake_gpu):
    r = fake_gpu.call(_scenarios.runtime_case)
    assert not violations(r["log"]), violations(r["log"])
    return r


def test_the_fake_device_is_found(rt):
    assert "cuda:0" in rt["devices"]


def test_device_start_up(rt, hdr):
    opened = between(rt["log"], "open", "opened")
    streams = calls(opened, "cudaStreamCreate*")
    assert streams and all(s["flags"] == hdr.cudaStreamNonBlocking for s in streams), streams
    pool = calls(rt["log"], "cudaMemPoolSetAttribute")
    # freed memory stays in the pool (release threshold = max), as PyTorch's allocator does
    assert any(p["attr"] == hdr.cudaMemPoolAttrReleaseThreshold and p["value"] == 2 ** 64 - 1
               for p in pool), pool


def test_asarray_keeps_the_layout_and_the_values(rt, hdr):
    dims = rt["dims"]
    assert dims == (2, 3, 4, 5)
    assert rt["strides"] == (60, 1, 15, 3), "an NHWC-strided array stays NHWC on the device"
    np.testing.assert_array_equal(rt["back"], rt["want"])
    copies = calls(between(rt["log"], "asarray", "read"), "cudaMemcpyAsync")
    assert any(c["kind"] == hdr.cudaMemcpyHostToDevice and c["dst"] == rt["ptr"]
               and c["count"] == rt["nbytes"] for c in copies), copies


@pytest.mark.parametrize("label", ["numpy", "host_int"])
def test_host_memory_in_a_variant_pack_is_refused(rt, label):
    err = rt["errors"][label]
    assert err is not None and isinstance(err["error"], hd.VariantPackError), err
    # nothing reached cuDNN with the host address
    bind = between(rt["log"], "bind", "close")
    assert not [c for c in calls(bind, "cudnnConvolutionForward") if c["y"] == rt["host_ptr"]]


def test_completion_events_sleep_rather_than_spin(rt, hdr):
    syncs = calls(between(rt["log"], "execute", "bind"), "cudaEventSynchronize")
    assert syncs and not [s for s in syncs if s.get("spins")], "completion events need cudaEventBlockingSync"


def test_closing_the_device_releases_its_streams(rt):
    closing = between(rt["log"], "close", "closed")
    created = {s["id"] for s in calls(rt["log"], "cudaStreamCreate*")}
    destroyed = {s["stream"] for s in calls(closing, "cudaStreamDestroy")}
    assert destroyed and destroyed <= created


def test_no_gpu_is_a_device_error(fake_libs, tmp_path):
    env = dict(fake_libs.env(), HIPDNN_ASYNC_FAKE_DEVICES="0",
               HIPDNN_ASYNC_PERFDB=str(tmp_path / "perfdb.sqlite3"))
    proc = FakeGpuProcess(env)
    try:
        r = proc.call(_scenarios.no_device_case)
    finally:
        proc.close()
    assert r["devices"] == ["cpu"]
    assert isinstance(r["error"], hd.DeviceError), r.get("mro")


_GPU_AT_EXIT = """
import atexit
import numpy as np
def late():
    # registered before the array existed: runs after weakref.finalize's exit hook
    back = a.to_numpy_sync()
    print(np.array_equal(back, ref), flush=True)
atexit.register(late)
import hipdnn_async as hd
dev = hd.Device("cuda:0")
ref = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
a = dev.empty(ref.shape, "float32")
a.copy_from(ref)
"""


def test_a_gpu_array_is_still_there_for_an_atexit_handler(fake_libs, tmp_path):
    """A GpuArray's memory was freed by its finalizer at exit, before an atexit handler
    registered earlier (so run later) read it: a read of freed device memory. As the CPU
    streams and captured graphs, it is left to the process's end (the driver frees it)."""
    import subprocess
    import sys
    env = dict(fake_libs.env(), HIPDNN_ASYNC_PERFDB=str(tmp_path / "perfdb.sqlite3"))
    out = subprocess.run([sys.executable, "-c", _GPU_AT_EXIT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:1] == ["True"], (out.stdout, out.stderr[-2000:])
