"""The fake CUDA runtime keeps the semantics the contract tests rely on (called through
ctypes, without our bindings): work is asynchronous (an event is not ready until the
stream's worker reached it), streams run in order, stream waits hold a stream back,
pageable device-to-host copies return complete, freed memory is neither device memory
nor reusable, and misuse is a violation. Also the harness's CI rule."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ._fakes import FakeControl, calls, violations

c_void_pp = ctypes.POINTER(ctypes.c_void_p)


@pytest.fixture(scope="module")
def rt(fake_libs):
    lib = ctypes.CDLL(fake_libs.cudart)
    ctl = FakeControl(fake_libs.cudart)
    ctl.set_delay_us(20000)          # 20 ms per stream item: "still running" is certain
    yield lib, ctl
    ctl.set_delay_us(2000)


def _stream(lib, hdr):
    s = ctypes.c_void_p()
    assert lib.cudaStreamCreateWithFlags(ctypes.byref(s), hdr.cudaStreamNonBlocking) == 0
    return s


def test_work_is_asynchronous_and_in_order(rt, hdr):
    lib, ctl = rt
    ctl.clear()
    s = _stream(lib, hdr)
    ev = ctypes.c_void_p()
    assert lib.cudaEventCreateWithFlags(ctypes.byref(ev), hdr.cudaEventBlockingSync) == 0
    dev = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(16)) == 0
    a, b = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    assert lib.cudaMemsetAsync(dev, 0, ctypes.c_size_t(16), s) == 0
    assert lib.cudaMemcpyAsync(dev, a.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(16),
                               hdr.cudaMemcpyHostToDevice, s) == 0
    assert lib.cudaEventRecord(ev, s) == 0
    assert lib.cudaEventQuery(ev) == hdr.cudaErrorNotReady       # the worker is still sleeping
    assert lib.cudaMemcpyAsync(b.ctypes.data_as(ctypes.c_void_p), dev, ctypes.c_size_t(16),
                               hdr.cudaMemcpyDeviceToHost, s) == 0   # pageable: returns complete
    np.testing.assert_array_equal(b, a)
    assert lib.cudaEventQuery(ev) == 0
    execs = [r["fn"] for r in ctl.log() if r["rec"] == "exec"]
    assert execs == ["cudaMemsetAsync", "cudaMemcpyAsync", "cudaMemcpyAsync"]
    assert lib.cudaFree(dev) == 0
    assert not violations(ctl.log())


def test_stream_wait_event_holds_the_other_stream(rt, hdr):
    lib, ctl = rt
    s1, s2 = _stream(lib, hdr), _stream(lib, hdr)
    ev = ctypes.c_void_p()
    lib.cudaEventCreateWithFlags(ctypes.byref(ev), hdr.cudaEventDisableTiming)
    dev = ctypes.c_void_p()
    lib.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4))
    one = np.ones(1, np.float32)
    ctl.clear()
    lib.cudaMemsetAsync(dev, 0, ctypes.c_size_t(4), s1)
    lib.cudaMemcpyAsync(dev, one.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(4),
                        hdr.cudaMemcpyHostToDevice, s1)
    lib.cudaEventRecord(ev, s1)
    lib.cudaStreamWaitEvent(s2, ev, 0)
    out = np.zeros(1, np.float32)
    lib.cudaMemcpyAsync(out.ctypes.data_as(ctypes.c_void_p), dev, ctypes.c_size_t(4),
                        hdr.cudaMemcpyDeviceToHost, s2)
    assert out[0] == 1.0, "the copy on s2 ran before s1's work it waited for"
    lib.cudaFree(dev)


def test_freed_memory_is_not_device_memory(rt, hdr):
    lib, ctl = rt
    ctl.clear()
    dev = ctypes.c_void_p()
    lib.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(64))
    attrs = (ctypes.c_char * 256)()
    lib.cudaPointerGetAttributes(attrs, dev)
    assert int.from_bytes(bytes(attrs[:4]), "little") == 2          # cudaMemoryTypeDevice
    lib.cudaFree(dev)
    lib.cudaPointerGetAttributes(attrs, dev)
    assert int.from_bytes(bytes(attrs[:4]), "little") == 0          # unregistered
    assert lib.cudaFree(dev) != 0                                  # a double free
    assert len(violations(ctl.log())) == 1


def test_injected_failures_hit_the_nth_call(rt):
    lib, ctl = rt
    ctl.clear()
    ctl.inject("cudaGetDevice", 999, nth=2, count=1)
    d = ctypes.c_int()
    assert [lib.cudaGetDevice(ctypes.byref(d)) for _ in range(3)] == [0, 999, 0]
    assert [r["status"] for r in calls(ctl.log(), "cudaGetDevice")] == [0, 999, 0]
    ctl.clear_injections()


def test_missing_prerequisites_fail_in_ci_and_skip_elsewhere(monkeypatch):
    from .conftest import unavailable
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        unavailable("no headers")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception):
        unavailable("no headers")
