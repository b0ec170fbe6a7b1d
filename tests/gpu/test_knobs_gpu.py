"""Knobs and the perf db on the GPU: the workspace limit's range for patterns 6, 7, 9 (its
minimum still builds and runs correctly), and benchmark-mode tuning stored once and hit by
a second Device."""
from __future__ import annotations

import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import gpu_wgrad_tol, Harness, assert_close, tol

import hipdnn_async as hd

pytestmark = pytest.mark.gpu

WS = "global.workspace_size_limit"
BENCH = "global.benchmarking"
X, W, PAD = (4, 32, 20, 20), (32, 32, 3, 3), (1, 1)
Y = ref.conv_out_dims(X, W, PAD, PAD, (1, 1), (1, 1))


def conv_case(direction, dtype="float32", layout="NCHW", seed=0):
    """A Harness with one convolution and its float64 expectation."""
    rng = np.random.default_rng([seed, ("fprop", "dgrad", "wgrad").index(direction)])
    h = Harness(dtype, layout, name=f"knobs_{direction}")
    if direction == "fprop":
        x, w = h.input("x", rng.uniform(-1, 1, X)), h.input("w", rng.uniform(-1, 1, W))
        h.output(h.g.conv_fprop(x, w, padding=PAD), "out")
        return h, lambda: ref.conv_fprop(h.ref["x"], h.ref["w"], PAD, PAD), tol("conv_fprop", dtype)
    if direction == "dgrad":
        dy, w = h.input("dy", rng.uniform(-1, 1, Y)), h.input("w", rng.uniform(-1, 1, W))
        h.output(h.g.conv_dgrad(dy, w, dx_dims=X, padding=PAD), "out")
        return h, (lambda: ref.conv_dgrad(h.ref["dy"], h.ref["w"], X, PAD, PAD)), \
            tol("conv_dgrad", dtype)
    dy, x = h.input("dy", rng.uniform(-1, 1, Y)), h.input("x", rng.uniform(-1, 1, X))
    h.output(h.g.conv_wgrad(dy, x, dw_dims=W, padding=PAD), "out")
    return h, (lambda: ref.conv_wgrad(h.ref["dy"], h.ref["x"], W, PAD, PAD)), \
        gpu_wgrad_tol(dtype, Y[0] * Y[2] * Y[3], 1.0, 1.0)


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC")])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_workspace_limit_range_and_minimum(gpu_module_device, direction, dtype, layout):
    dev = gpu_module_device
    h, want, limits = conv_case(direction, dtype, layout)
    (engine, *_) = hd.engines(h.g, dev)
    assert engine.provider != "cpu"
    ids = [k.id for k in engine.knobs]
    assert BENCH in ids and WS in ids, ids
    ws = engine.knob(WS)
    assert 0 <= ws.min <= ws.default <= ws.max and ws.default == ws.max
    assert str(ws.constraint) == f"[{ws.min}, {ws.max}]"
    for limit in sorted({ws.min, ws.max}):
        got = h.run(dev, knobs={WS: limit})["out"]
        assert h.plan.knobs[WS] == limit
        assert h.plan.workspace_size <= limit, (limit, h.plan)
        assert_close(got, want(), *limits,
                     f"{direction} {dtype} workspace limit {limit} (algorithm {h.plan.algorithm})")
    for bad in (ws.max + 1, -1) + ((ws.min - 1,) if ws.min > 0 else ()):
        with pytest.raises(hd.KnobError, match=WS):
            dev.build_sync(h.g, knobs={WS: bad})


def test_workspace_knob_not_offered_for_batchnorm_or_fused(gpu_module_device):
    dev = gpu_module_device
    h = Harness("float32", "NHWC", name="knobs_fused")
    x = h.input("x", np.ones((2, 8, 6, 6)))
    w = h.input("w", np.ones((8, 8, 3, 3)))
    h.output(h.g.pointwise(h.g.conv_fprop(x, w, padding=(1, 1)), mode=hd.PointwiseMode.RELU_FWD), "y")
    hb = Harness("float32", "NHWC", name="knobs_bn")
    xb = hb.input("x", np.ones((2, 8, 6, 6)))
    s = hb.float_input("scale", np.ones((1, 8, 1, 1)))
    b = hb.float_input("bias", np.zeros((1, 8, 1, 1)))
    y, mean, inv, _, _ = hb.g.batchnorm(xb, s, b, epsilon=1e-5)
    hb.output(y, "y")
    hb.output(mean, "mean", dtype="float32")
    hb.output(inv, "inv_variance", dtype="float32")
    for g in (h.g, hb.g):
        (engine, *_) = hd.engines(g, dev)
        ids = [k.id for k in engine.knobs]
        assert ids[0] == BENCH and WS not in ids, ids   # engines add their own (determinism)
        with pytest.raises(hd.KnobError, match=WS):
            dev.build_sync(g, knobs={WS: 0})


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_benchmarking_stores_then_second_device_hits(gpu_device, tmp_path, direction):
    db_path = str(tmp_path / "perfdb.sqlite3")
    h, want, limits = conv_case(direction, "float16", "NHWC", seed=3)
    with hd.Device(gpu_device.spec, perfdb=db_path) as dev:
        got = h.run(dev, knobs={BENCH: 1})["out"]
        first = h.plan
    assert first.benchmarked and not first.perfdb_hit and first.knobs[BENCH] == 1
    assert_close(got, want(), *limits, f"benchmarked {direction} ({first.algorithm})")
    entries = hd.PerfDb(db_path).entries()
    assert len(entries) == 1 and entries[0]["provider"] != "cpu", entries
    assert entries[0]["algorithm"] == first.algorithm
    assert entries[0]["engine"] == first.engine.name      # the perf-db key names the engine

    with hd.Device(gpu_device.spec, perfdb=db_path) as dev2:   # no in-process plan cache
        got2 = h.run(dev2, knobs={BENCH: 1})["out"]
        second = h.plan
    assert second.perfdb_hit and not second.benchmarked
    assert second.algorithm == first.algorithm and second.workspace_size == first.workspace_size
    assert_close(got2, want(), *limits, f"perf-db hit {direction} ({second.algorithm})")
    assert len(hd.PerfDb(db_path).entries()) == 1


def test_benchmarking_respects_the_workspace_limit(gpu_device, tmp_path):
    h, want, limits = conv_case("fprop", "float32", "NHWC", seed=4)
    ws = hd.engines(h.g, gpu_device)[0].knob(WS)
    with hd.Device(gpu_device.spec, perfdb=str(tmp_path / "db.sqlite3")) as dev:
        got = h.run(dev, knobs={BENCH: 1, WS: ws.min})["out"]
    assert h.plan.benchmarked and h.plan.workspace_size <= ws.min
    assert_close(got, want(), *limits, f"benchmarked under limit {ws.min} ({h.plan.algorithm})")
