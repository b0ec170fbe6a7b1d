"""Capture-safe plans (issue 9 item 8), on the fake runtime of conftest.py.

A plan's launch state (the stream's cuDNN handle, its workspace) is prepared at stream
start and at build; ``run`` only enqueues: the fake records every runtime and cuDNN call,
and one made inside a run that allocates, frees, synchronises or creates a handle or
descriptor fails the test.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import test_patterns as tp
from oracle._cases import Harness, rank_of

import hipdnn_async as hd
from hipdnn_async.providers._gpu._launch import StreamResources, stream_resources
from hipdnn_async.providers.cudnn import _plans
from hipdnn_async.queues._gpu_backend import GpuStreamBackend
from hipdnn_async.runtime import LaunchContext

# the cuDNN provider's contract: lower clips 0 only, symmetric padding (tests/gpu)
GPU_CLIPS = {"float32": (None, None), "float16": (None, 0.5), "bfloat16": (0.0, 0.5)}
GPU_CONV = {4: dict(tp.CONV[4], pre=(1, 1), post=(1, 1))}
# the cuDNN call that does each pattern's work, made inside run()
WORK_CALL = {
    "BN_INFERENCE_VARIANCE": "cudnn.batchnorm_forward_inference",
    "BN_INFERENCE_DRELU_BACKWARD": "cudnn.activation_backward",
    "BN_TRAINING": "cudnn.batchnorm_forward_training",
    "BN_TRAINING_RELU": "cudnn.batchnorm_forward_training",
    "BN_BACKWARD": "cudnn.batchnorm_backward",
    "CONV_DGRAD": "cudnn.convolution",
    "CONV_FPROP": "cudnn.convolution",
    "CONV_FPROP_BIAS_RELU": "cudnn.convolution_bias_activation_forward",
    "CONV_FPROP_BIAS_RELU/no-bias": "cudnn.convolution_bias_activation_forward",
    "CONV_WGRAD": "cudnn.convolution",
}


def _resources(dev) -> list[StreamResources]:
    return [s.backend.launch_context.resources[_plans.RESOURCE_KEY] for s in dev.streams]


def _harness(pattern, dtype, layout, monkeypatch):
    monkeypatch.setattr(tp, "CLIPS", GPU_CLIPS)
    monkeypatch.setattr(tp, "CONV", GPU_CONV)
    h = Harness(dtype, layout, name=f"fake_{pattern}_{layout}")
    tp.PATTERNS[pattern](h, rank_of(layout), np.random.default_rng(0))
    h._alloc_outputs()
    h.g.validate()
    return h


def test_the_fake_records_a_forbidden_call_inside_a_run(fake_cuda):
    # the check below would pass vacuously if in-run calls were not seen as such
    lc = LaunchContext(1, None)
    lc.enter()
    try:
        fake_cuda.gpu.malloc(16)
        fake_cuda.cudnn.create()
    finally:
        lc.exit()
    assert [v[0] for v in fake_cuda.violations] == ["gpu.malloc", "cudnn.create"]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("pattern", sorted(tp.PATTERNS))
def test_run_only_enqueues(fake_cuda, monkeypatch, pattern, layout):
    h = _harness(pattern, "float32", layout, monkeypatch)
    with hd.Device("cuda:0", streams=2) as dev:
        # stream start: each stream has its handle before any build
        assert fake_cuda.cudnn.live_handles >= {r.handle for r in _resources(dev)}
        plan = dev.build_sync(h.g)
        assert plan.engine.provider == "cudnn"
        # build: every stream's workspace already holds what the plan needs
        assert all(r.workspace_size >= plan.workspace_size for r in _resources(dev))
        staged = h.stage(dev)
        built = len(fake_cuda.calls)
        for _ in range(3):
            plan.execute_sync(staged)
        launched = fake_cuda.calls[built:]
    assert fake_cuda.violations == []
    in_run = [name for name, _, r in launched if r]
    assert WORK_CALL[pattern] in in_run or WORK_CALL[pattern] + "_ex" in in_run
    outside = {name for name, _, r in launched if not r}
    # executions allocate nothing and create no handle outside run() either
    assert not outside & {"gpu.malloc", "gpu.malloc_async", "cudnn.create"}, outside


def test_a_stream_started_after_a_build_gets_the_reserved_workspace(fake_cuda, monkeypatch):
    h = _harness("CONV_FPROP", "float32", "NCHW", monkeypatch)
    with hd.Device("cuda:0", streams=1) as dev:
        plan = dev.build_sync(h.g)
        assert plan.workspace_size == fake_cuda.cudnn.ALGO_WS
        late = GpuStreamBackend("cuda:0:late", dev.provider.context)
        try:
            res = late.launch_context.resources[_plans.RESOURCE_KEY]
            assert res.workspace_size == plan.workspace_size and res.handle
        finally:
            late.close()


@pytest.mark.parametrize("fixture", ["fake_cuda", "fake_cuda_unpooled"])
def test_the_workspace_grows_at_build_never_in_run(fixture, request, monkeypatch):
    rec = request.getfixturevalue(fixture)
    small = _harness("CONV_FPROP", "float32", "NCHW", monkeypatch)
    with hd.Device("cuda:0", streams=2) as dev:
        dev.build_sync(small.g)
        before = {r.workspace_ptr for r in _resources(dev)}
        rec.cudnn.ALGO_WS = 1 << 20             # the next problem needs more
        big = Harness("float32", "NCHW", name="big")
        x = big.input("x", np.ones((2, 3, 6, 6)))
        w = big.input("w", np.ones((4, 3, 3, 3)))
        big.output(big.g.conv_fprop(x, w, padding=1), "y")
        big._alloc_outputs()
        start = len(rec.calls)
        plan = dev.build_sync(big.g)
        grew = rec.calls[start:]
        assert plan.workspace_size == 1 << 20
        assert all(r.workspace_size == 1 << 20 for r in _resources(dev))
        freed = [a[0] for n, a, _ in grew if n == "gpu.free"]
        assert before <= set(freed)             # the old buffers went back, stream-ordered
        alloc = "gpu.malloc_async" if fixture == "fake_cuda" else "gpu.malloc"
        assert sum(1 for n, a, _ in grew if n == alloc and a[0] == 1 << 20) >= 2
        plan.execute_sync(big.stage(dev))
    assert rec.violations == []


def test_closing_the_device_releases_every_stream_resource(fake_cuda, monkeypatch):
    h = _harness("BN_TRAINING", "float32", "NHWC", monkeypatch)
    with hd.Device("cuda:0", streams=3) as dev:
        plan = dev.build_sync(h.g)
        plan.execute_sync(h.stage(dev))
        handles = {r.handle for r in _resources(dev)}
        workspaces = {r.workspace_ptr for r in _resources(dev)}
        assert len(handles) == 3 and all(workspaces)
    assert not handles & fake_cuda.cudnn.live_handles
    freed = {a[0] for n, a, _ in fake_cuda.calls if n == "gpu.free"}
    assert workspaces <= freed


def test_a_plan_run_off_a_prepared_stream_is_an_execution_error(fake_cuda, monkeypatch):
    h = _harness("CONV_FPROP", "float32", "NCHW", monkeypatch)
    with hd.Device("cuda:0", streams=1) as dev:
        plan = dev.build_sync(h.g)
        bufs = {r: a.ptr for r, a in dev.provider._build.scratch_pack(plan.match).items()}
        with pytest.raises(hd.ExecutionError, match="not on the calling thread"):
            plan._pplan.run(bufs, None)
        lc = LaunchContext(7, dev.provider.context)    # a stream nobody prepared
        lc.enter()
        try:
            with pytest.raises(hd.ExecutionError, match="no cudnn launch resources"):
                plan._pplan.run(bufs, None)
        finally:
            lc.exit()
    assert fake_cuda.violations == []     # it failed before creating anything


def test_an_unreserved_workspace_is_an_execution_error_not_an_allocation(fake_cuda):
    res = StreamResources(1, type("H", (), {"ptr": 5, "close": lambda self: None})(),
                          pooled=True, runtime=fake_cuda.gpu)
    res.reserve(100)
    assert res.workspace(None, 100) == res.workspace_ptr
    assert res.workspace(0xABC, 100) == 0xABC and res.workspace(None, 0) == 0
    with pytest.raises(hd.ExecutionError, match="holds 100 bytes; this plan needs 101"):
        res.workspace(None, 101)
    res.close()
    assert fake_cuda.gpu.live == 0


def test_a_stream_that_cannot_get_its_handle_is_a_device_error(fake_cuda, monkeypatch):
    def refuse():
        raise RuntimeError("fake cudnnCreate: CUDNN_STATUS_ALLOC_FAILED")
    monkeypatch.setattr(fake_cuda.cudnn, "create", refuse)
    with pytest.raises(hd.DeviceError, match="cannot prepare its launch state.*ALLOC_FAILED"):
        hd.Device("cuda:0", streams=2)
    created = fake_cuda.count("gpu.stream_create")
    destroyed = fake_cuda.count("gpu.stream_destroy")
    assert created - destroyed == 1                # the device's copy stream lives on


def test_stream_resources_lookup_needs_a_launch():
    with pytest.raises(hd.ExecutionError, match="on a GPU stream"):
        stream_resources("cudnn", "cuDNN plans")
