"""The knob ``onednn.candidate``: a convolution pinned to one of ONEDNN_ENGINE's candidates
by its index in the engine's order (a default build's ``plan.algorithm.trials``), as
cuDNN frontend's engine configs and MIOpen's solutions can be picked by hand. Each pinned
plan runs that implementation and matches float64; the pin is never timed and never
touches the perf db; an index past the candidates within the workspace limit is a
KnobError naming them."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.runtime import load_onednn

PIN = "onednn.candidate"
pytestmark = pytest.mark.skipif(not load_onednn().ok,
                                reason="ONEDNN_ENGINE needs oneDNN, which does not load here")


def _conv(direction="fprop"):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    if direction == "fprop":
        x = g.tensor(dims=(2, 8, 12, 12), name="x")
        w = g.tensor(dims=(16, 8, 3, 3), name="w")
        g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    else:
        dy = g.tensor(dims=(2, 16, 12, 12), name="dy")
        x = g.tensor(dims=(2, 8, 12, 12), name="x")
        g.conv_wgrad(dy, x, dw_dims=(16, 8, 3, 3), padding=1).set_output(True).set_name("dw")
    return g


def _reference(direction, a, b):
    """float64 cross-correlation with padding 1 (fprop: a = x, b = w; wgrad: a = dy,
    b = x), written from the definition."""
    if direction == "fprop":
        xp = np.pad(a.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((2, 16, 12, 12))
        for r in range(3):
            for s in range(3):
                out += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 12, s:s + 12],
                                 b[:, :, r, s].astype(np.float64))
        return out
    xp = np.pad(b.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    dw = np.zeros((16, 8, 3, 3))
    for r in range(3):
        for s in range(3):
            dw[:, :, r, s] = np.einsum("nkhw,nchw->kc", a.astype(np.float64),
                                       xp[:, :, r:r + 12, s:s + 12])
    return dw


@pytest.mark.parametrize("direction", ["fprop", "wgrad"])
def test_each_pinned_candidate_runs_and_matches_float64(direction):
    g = _conv(direction)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (2, 8, 12, 12) if direction == "fprop" else (2, 16, 12, 12))
    b = rng.uniform(-1, 1, (16, 8, 3, 3) if direction == "fprop" else (2, 8, 12, 12))
    a, b = a.astype(np.float32), b.astype(np.float32)
    want = _reference(direction, a, b)
    with hd.Device("cpu") as dev:
        default = dev.build_sync(g, engine="ONEDNN_ENGINE")
        names = [n for n, _ in default.algorithm.trials]
        knob = next(k for k in hd.engines(g, dev)[0].knobs if k.id == PIN)
        assert (knob.default, knob.min, knob.max) == (-1, -1, len(names) - 1)
        assert str(dev.build_sync(g, knobs={PIN: -1}).algorithm) == str(default.algorithm)
        for i, name in enumerate(names):
            plan = dev.build_sync(g, knobs={PIN: i})
            assert str(plan.algorithm) == name and f"'{PIN}' = {i}" in plan.algorithm.reason
            out = np.full(want.shape, np.nan, np.float32)
            pack = ({"x": a, "w": b, "y": out} if direction == "fprop"
                    else {"dy": a, "x": b, "dw": out})
            plan.execute_sync(pack)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4, err_msg=name)


def test_a_pin_is_not_timed_and_leaves_no_perf_db(tmp_path):
    g = _conv()
    db = hd.PerfDb(tmp_path / "perfdb.sqlite3")
    with hd.Device("cpu", perfdb=db) as dev:
        plan = dev.build_sync(g, knobs={PIN: 1, "global.benchmarking": 1})
        assert not plan.benchmarked and not plan.perfdb_hit
        assert f"'{PIN}' = 1" in plan.algorithm.reason
        assert all(ms is None for _, ms in plan.algorithm.trials)
        assert db.entries() == []
        # the same build unpinned benchmarks and stores its winner: the db is in use
        assert dev.build_sync(g, knobs={"global.benchmarking": 1}).benchmarked
        assert len(db.entries()) == 1


def test_an_index_past_the_candidates_is_a_knob_error_naming_them():
    g = _conv()
    with hd.Device("cpu") as dev:
        knobs = {k.id: k for k in hd.engines(g, dev)[0].knobs}
        with pytest.raises(hd.KnobError, match=r"outside \[-1, "):
            dev.build_sync(g, knobs={PIN: knobs[PIN].max + 1})
        with pytest.raises(hd.KnobError, match="outside"):
            dev.build_sync(g, knobs={PIN: -2})
        # the smallest workspace limit leaves fewer candidates than the knob's range
        limit = knobs["global.workspace_size_limit"].min
        few = dev.build_sync(g, knobs={"global.workspace_size_limit": limit})
        fitting = [n for n, _ in few.algorithm.trials]
        assert len(fitting) < knobs[PIN].max + 1
        with pytest.raises(hd.KnobError) as info:
            dev.build_sync(g, knobs={"global.workspace_size_limit": limit,
                                     PIN: len(fitting)})
        msg = str(info.value)
        assert f"{len(fitting)} candidate" in msg and f"limit of {limit} bytes" in msg
        assert all(f"{i}: {n}" in msg for i, n in enumerate(fitting)), msg


def test_batchnorm_is_not_offered_the_knob():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 8, 4, 4), name="x")
    c = [g.tensor(dims=(1, 8, 1, 1), name=n) for n in ("scale", "bias")]
    for t in g.batchnorm(x, *c, epsilon=1e-5)[:3]:
        t.set_output(True)
    with hd.Device("cpu") as dev:
        assert PIN not in [k.id for k in hd.engines(g, dev)[0].knobs]
        with pytest.raises(hd.KnobError, match=PIN):
            dev.build_sync(g, knobs={PIN: 0})
