"""Completion through the GPU stream backend on the fake runtime (whose streams run work
on a worker thread after a delay): many executions in flight on one stream, a cancelled
awaiter whose execution still completes with its buffers kept alive, and cross-stream
ordering through events. asyncio and trio."""
from __future__ import annotations

import numpy as np
import pytest

from . import _scenarios
from ._fakes import calls, violations

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_many_in_flight_on_one_stream(fake_gpu, backend):
    r = fake_gpu.call(_scenarios.queue_case, backend, n=5)
    assert not violations(r["log"]), violations(r["log"])
    convs = calls(r["log"], "cudnnConvolutionForward")
    assert len(convs) == 5 and len({c["stream"] for c in convs}) == 1
    assert len(calls(r["log"], "cudnnConvolutionForward", rec="exec")) == 5
    for got, want in zip(r["outputs"], r["wants"]):
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_cancelled_awaiter_does_not_cancel_the_execution(fake_gpu, backend):
    """docs/guide/devices.md: cancelling the awaiting task returns at once; the execution
    finishes, writes its outputs, and the library keeps the variant pack alive until then
    (the fake flags a kernel that runs on freed memory)."""
    r = fake_gpu.call(_scenarios.queue_case, backend, n=3, cancel=True)
    assert r["cancelled"] is True, "the awaiter was not cancelled in flight: the test proves nothing"
    assert not violations(r["log"]), violations(r["log"])
    for got, want in zip(r["outputs"], r["wants"]):
        np.testing.assert_allclose(got, want, **TOL)


def test_cross_stream_wait_orders_the_work(fake_gpu):
    r = fake_gpu.call(_scenarios.cross_stream_case, True)
    assert not violations(r["log"]), violations(r["log"])
    runs = calls(r["log"], "cudnnConvolutionForward", rec="exec")
    assert len(runs) == 2 and runs[0]["stream"] != runs[1]["stream"]
    assert runs[0]["seq"] < runs[1]["seq"]
    np.testing.assert_allclose(r["got"], r["want"], atol=1e-4, rtol=1e-5)
    waits = calls(r["log"], "cudaStreamWaitEvent")
    assert any(w["stream"] == runs[1]["stream"] for w in waits)
