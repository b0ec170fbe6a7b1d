"""CPU convolutions and memory (issue 10 item 4): no untyped MemoryError.

The default workspace limit is the largest algorithm's, and the heuristic used to take
im2col_gemm whatever its size: 481 GiB for an 8x1x4096^2 input with a 31x31 kernel, 8.7+
GiB for a 7x7 conv at batch 64. Now the heuristic holds the workspace to a budget (16x the
I/O bytes or 64 MiB, and half the memory available), benchmarking skips what cannot be
allocated, and an allocation that still fails is an ExecutionError naming the bytes and
the knob. Nothing here allocates the large sizes: workspace sizes are computed, and
allocation failures are injected.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers.cpu import _bind, _conv, _provider
from hipdnn_async.providers.cpu._conv import ALGORITHMS, ConvProblem, heuristic_choice

GiB = 1 << 30


def problem(x, w, pad, stride=1, dtype=np.float32):
    nsp = len(x) - 2
    out = tuple((x[2 + i] + 2 * pad - (w[2 + i] - 1) - 1) // stride + 1 for i in range(nsp))
    return ConvProblem("fprop", x, w, (x[0], w[0]) + out, (pad,) * nsp, (pad,) * nsp,
                       (stride,) * nsp, (1,) * nsp, x[1] // w[1], dtype)


# The issue's two shapes: (x dims, w dims, padding)
BIG_KERNEL = ((8, 1, 4096, 4096), (1, 1, 31, 31), 15)
RESNET_7X7_B64 = ((64, 64, 112, 112), (64, 64, 7, 7), 3)


def by_name(p):
    return {a.name: a.workspace_size(p) for a in ALGORITHMS[p.direction] if a.applicable(p)}


def test_workspace_of_the_issue_shapes_is_what_im2col_implies():
    """Column matrix bytes = C/G * prod(kernel) * N * prod(out) * 4, independently."""
    p = problem(*BIG_KERNEL)
    ws = by_name(p)
    assert ws["im2col_gemm"] == 1 * 31 * 31 * 8 * 4096 * 4096 * 4       # 480.5 GiB
    assert round(ws["im2col_gemm"] / GiB, 1) == 480.5
    assert ws["im2col_gemm_chunked"] == ws["im2col_gemm"] // 8
    p = problem(*RESNET_7X7_B64)
    assert by_name(p)["im2col_gemm"] == 64 * 49 * 64 * 112 * 112 * 4    # 9.4 GiB
    assert math.prod(p.x_dims) * 4 == 205_520_896                        # the issue's 205 MB


@pytest.mark.parametrize("available", [None, 512 * GiB, 16 * GiB, 1 * GiB])
def test_heuristic_never_takes_a_workspace_beyond_the_budget(monkeypatch, available):
    monkeypatch.setattr(_conv, "available_memory", lambda: available)
    for shape in (BIG_KERNEL, RESNET_7X7_B64):
        p = problem(*shape)
        ws = by_name(p)
        io = (math.prod(p.x_dims) + math.prod(p.w_dims) + math.prod(p.y_dims)) * 4
        budget = max(16 * io, 64 << 20)
        if available is not None:
            budget = min(budget, available // 2)
        chosen = heuristic_choice(p, max(ws.values()))            # the default limit
        assert chosen.workspace_size(p) <= budget
        # ... and it is the most preferred algorithm within the budget
        for alg in ALGORITHMS["fprop"]:
            if alg is chosen:
                break
            assert not alg.applicable(p) or alg.workspace_size(p) > budget
    # the 31x31 case takes direct (chunked is 60 GiB); the 7x7 one the chunked im2col
    assert heuristic_choice(problem(*BIG_KERNEL), 1 << 60).name == "direct"
    assert heuristic_choice(problem(*RESNET_7X7_B64), 1 << 60).name == "im2col_gemm_chunked"


def test_small_problems_keep_im2col(monkeypatch):
    """The budget does not change the choice for ordinary layers (3x3, ResNet-50 sizes)."""
    monkeypatch.setattr(_conv, "available_memory", lambda: 64 * GiB)
    assert heuristic_choice(problem((8, 64, 56, 56), (64, 64, 3, 3), 1), 1 << 60).name == \
        "im2col_gemm"
    assert heuristic_choice(problem((1, 1, 32, 32), (1, 1, 31, 31), 15), 1 << 60).name == \
        "im2col_gemm"                                  # 961x the I/O, but only 15 MB


def test_build_of_the_issue_graphs_picks_what_fits():
    """Heuristic builds allocate nothing, so the issue's graphs build here."""
    with hd.Device("cpu", streams=1) as dev:
        for (x_dims, w_dims, pad), want in ((BIG_KERNEL, "direct"),
                                            (RESNET_7X7_B64, "im2col_gemm_chunked")):
            g = hd.Graph(name="big", io_data_type=hd.DataType.FLOAT)
            x = g.tensor(dims=x_dims, name="x")
            w = g.tensor(dims=w_dims, name="w")
            g.conv_fprop(x, w, padding=pad).set_output(True)
            plan = dev.build_sync(g, engine="CPU_ENGINE")
            budget = _conv.memory_budget()
            if budget is None or budget >= 160 << 20:    # room for the 147 MiB chunked one
                assert plan.algorithm == want
            assert plan.workspace_size <= max(16 * 4 * sum(math.prod(d) for d in (
                x_dims, w_dims, x_dims[:1] + w_dims[:1] + x_dims[2:])), 64 << 20)


def small_conv(dev, **knobs):
    g = hd.Graph(name="small", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 3, 8, 8), name="x")
    w = g.tensor(dims=(4, 3, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    plan = dev.build_sync(g, knobs=knobs, engine="CPU_ENGINE")
    rng = np.random.default_rng(0)
    vp = {x: rng.uniform(-1, 1, x.dims).astype(np.float32),
          w: rng.uniform(-1, 1, w.dims).astype(np.float32), y: np.zeros(y.dims, np.float32)}
    return plan, vp


def test_workspace_allocation_failure_is_a_typed_error_naming_bytes_and_knob(monkeypatch):
    with hd.Device("cpu", streams=1) as dev:
        plan, vp = small_conv(dev)
        assert plan.workspace_size > 0

        def fail(nbytes):
            raise MemoryError(f"Unable to allocate {nbytes} bytes")
        monkeypatch.setattr(_bind, "allocate_workspace", fail)
        with pytest.raises(hd.ExecutionError) as ei:
            plan.execute_sync(vp)
        msg = str(ei.value)
        assert str(plan.workspace_size) in msg and "global.workspace_size_limit" in msg
        assert ei.value.code == "GRAPH_EXECUTION_FAILED"
        plan.execute_sync(vp, workspace=np.empty(plan.workspace_size, np.uint8))  # given: fine


def test_kernel_temporaries_out_of_memory_is_an_execution_error(monkeypatch):
    with hd.Device("cpu", streams=1) as dev:
        plan, vp = small_conv(dev)

        def fail(*a, **k):
            raise MemoryError("Unable to allocate 3.00 GiB for an array")
        monkeypatch.setattr(_conv, "_cfirst", fail)
        with pytest.raises(hd.ExecutionError, match="out of host memory.*3.00 GiB"):
            plan.execute_sync(vp)
        m = dev.metrics()
        assert m["failed"] == 1


@pytest.fixture
def no_workspace(monkeypatch):
    """Every workspace allocation fails (monkeypatch.undo() ends it)."""
    def fail(nbytes):
        raise MemoryError(f"Unable to allocate {nbytes} bytes")
    monkeypatch.setattr(_bind, "allocate_workspace", fail)


def test_benchmarking_skips_candidates_that_cannot_be_allocated(no_workspace, monkeypatch):
    with hd.Device("cpu", streams=1, perfdb=hd.PerfDb(":memory:")) as dev:
        plan, vp = small_conv(dev, **{"global.benchmarking": 1})
        assert plan.benchmarked and plan.workspace_size == 0 and plan.algorithm == "direct"
        monkeypatch.undo()
        plan.execute_sync(vp)


def test_benchmarking_reason_counts_only_the_candidates_timed(no_workspace):
    # the candidates whose memory could not be allocated are in .trials with no time; the
    # reason must not count them as timed ("the fastest of 3 timed" with one timed)
    with hd.Device("cpu", streams=1, perfdb=hd.PerfDb(":memory:")) as dev:
        plan, _ = small_conv(dev, **{"global.benchmarking": 1})
    untimed = [n for n, ms in plan.algorithm.trials if ms is None]
    assert plan.algorithm == "direct" and len(untimed) >= 1, plan.algorithm.trials
    reason = plan.algorithm.reason
    assert "the fastest of 1 timed" in reason, reason
    assert "not timed, their memory could not be allocated: " + ", ".join(untimed) in reason, \
        reason


def test_benchmarking_does_not_time_beyond_the_available_memory(monkeypatch):
    monkeypatch.setattr(_conv, "available_memory", lambda: 16 << 10)   # 8 KiB usable
    timed = []
    real = _provider._benchmark

    def spy(match, problem, algorithms):
        timed.extend(a.name for a in algorithms)
        return real(match, problem, algorithms)
    monkeypatch.setattr(_provider, "_benchmark", spy)
    with hd.Device("cpu", streams=1, perfdb=hd.PerfDb(":memory:")) as dev:
        plan, _ = small_conv(dev, **{"global.benchmarking": 1})
    p = _provider.conv_problem(plan.match)
    assert timed and all(by_name(p)[n] <= 8 << 10 for n in timed)
    assert "im2col_gemm" not in timed                     # 2*27*64*4 = 13.8 KiB


def test_benchmarking_scratch_that_cannot_be_allocated_is_a_device_error(monkeypatch):
    def fail(tensor):
        raise MemoryError("Unable to allocate")
    monkeypatch.setattr(_provider, "_scratch", fail)
    with hd.Device("cpu", streams=1, perfdb=hd.PerfDb(":memory:")) as dev:
        with pytest.raises(hd.DeviceError, match="bytes of scratch tensors"):
            small_conv(dev, **{"global.benchmarking": 1})
