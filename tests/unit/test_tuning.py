"""Knobs on real plans, benchmark-mode tuning and the perf db, on the CPU provider."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async import _perfdb
from hipdnn_async.providers.cpu import _conv
from hipdnn_async.providers.cpu._provider import conv_problem
from hipdnn_async.patterns import match

WS = "global.workspace_size_limit"
BENCH = "global.benchmarking"


def graph(direction="fprop", n=2, c=4, k=8, hw=9, ksize=3):
    g = hd.Graph(name=f"conv_{direction}")
    x_dims, w_dims = (n, c, hw, hw), (k, c, ksize, ksize)
    y_dims = (n, k, hw, hw)
    pad = ksize // 2
    if direction == "fprop":
        x, w = g.tensor(dims=x_dims, name="x"), g.tensor(dims=w_dims, name="w")
        out = g.conv_fprop(x, w, padding=pad)
    elif direction == "dgrad":
        dy, w = g.tensor(dims=y_dims, name="dy"), g.tensor(dims=w_dims, name="w")
        out = g.conv_dgrad(dy, w, dx_dims=x_dims, padding=pad)
    else:
        dy, x = g.tensor(dims=y_dims, name="dy"), g.tensor(dims=x_dims, name="x")
        out = g.conv_wgrad(dy, x, dw_dims=w_dims, padding=pad)
    out.set_output(True)
    return g


def bn_graph():
    g = hd.Graph(name="bn")
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    s, b = (g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("scale", "bias"))
    outs = g.batchnorm(x, s, b, epsilon=1e-5)
    for t in outs[:3]:
        t.set_output(True)
    return g


def workspace_sizes(g):
    m = match(g)
    p = conv_problem(m)
    return sorted(a.workspace_size(p) for a in _conv.ALGORITHMS[p.direction] if a.applicable(p))


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_conv_knobs_offered_with_dynamic_range(direction):
    g = graph(direction)
    e = hd.engines(g, "cpu")[-1]   # CPU_ENGINE (ONEDNN_ENGINE ranks first)
    ids = [k.id for k in e.knobs]
    assert ids == [BENCH, WS]
    sizes = workspace_sizes(g)
    ws = e.knob(WS)
    assert (ws.min, ws.max, ws.default) == (sizes[0], sizes[-1], sizes[-1])
    assert str(ws.constraint) == f"[{sizes[0]}, {sizes[-1]}]"
    b = e.knob(BENCH)
    assert (b.min, b.max, b.default, b.type) == (0, 1, 0, "int64")


def test_workspace_knob_not_offered_for_batchnorm_or_fused():
    e = hd.engines(bn_graph(), "cpu")[-1]   # CPU_ENGINE
    assert [k.id for k in e.knobs] == [BENCH]
    with hd.Device("cpu") as dev, pytest.raises(hd.KnobError, match=WS):
        dev.build_sync(bn_graph(), knobs={WS: 0}, engine="CPU_ENGINE")


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_workspace_limit_range_and_zero(direction):
    g = graph(direction)
    sizes = workspace_sizes(g)
    with hd.Device("cpu") as dev:
        if sizes[-1] > 0:
            with pytest.raises(hd.KnobError, match=r"outside \[") as ei:
                dev.build_sync(g, knobs={WS: sizes[-1] + 1}, engine="CPU_ENGINE")
            assert str(sizes[-1]) in str(ei.value)
        with pytest.raises(hd.KnobError):
            dev.build_sync(g, knobs={WS: -1}, engine="CPU_ENGINE")
        with pytest.raises(hd.KnobError):
            dev.build_sync(g, knobs={WS: 1.5}, engine="CPU_ENGINE")
        with pytest.raises(hd.KnobError, match="global.nonsense"):
            dev.build_sync(g, knobs={"global.nonsense": 1}, engine="CPU_ENGINE")
        assert sizes[0] == 0, "a zero-workspace algorithm must exist in every direction"
        plan = dev.build_sync(g, knobs={WS: 0}, engine="CPU_ENGINE")
        assert plan.workspace_size == 0 and plan.knobs[WS] == 0
        default = dev.build_sync(g, engine="CPU_ENGINE")
        assert default.knobs == {BENCH: 0, WS: sizes[-1]}


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_every_limit_gives_plan_within_limit(direction):
    g = graph(direction)
    with hd.Device("cpu") as dev:
        for limit in workspace_sizes(g):
            for bench in (0, 1):
                plan = dev.build_sync(g, knobs={WS: limit, BENCH: bench}, engine="CPU_ENGINE")
                assert plan.workspace_size <= limit


def test_benchmarking_runs_once_then_perfdb_hits(tmp_path):
    db = hd.PerfDb(str(tmp_path / "db.sqlite3"))
    g = graph("fprop", hw=12)
    before = hd.stats()["benchmarks_run"]
    with hd.Device("cpu", perfdb=db) as dev:
        p1 = dev.build_sync(g, knobs={BENCH: 1}, engine="CPU_ENGINE")
    assert p1.benchmarked and not p1.perfdb_hit
    with hd.Device("cpu", perfdb=db) as dev:  # new device: no in-process plan cache
        p2 = dev.build_sync(g, knobs={BENCH: 1}, engine="CPU_ENGINE")
    assert p2.perfdb_hit and not p2.benchmarked and p2.algorithm == p1.algorithm
    assert hd.stats()["benchmarks_run"] == before + 1
    assert len(db.entries()) == 1


def test_stale_perfdb_entry_is_ignored_and_retuned(tmp_path):
    db = hd.PerfDb(str(tmp_path / "db.sqlite3"))
    g = graph("fprop")
    with hd.Device("cpu", perfdb=db) as dev:
        p1 = dev.build_sync(g, knobs={BENCH: 1}, engine="CPU_ENGINE")
    (entry,) = db.entries()
    key = _perfdb.PerfKey(**{k: entry[k] for k in ("provider", "engine", "library_versions",
                                                     "device", "problem", "workspace_limit")})
    db.store(key, _perfdb.PerfRecord("removed_algorithm", 0.001, 0, 0.0))
    with hd.Device("cpu", perfdb=db) as dev:
        p2 = dev.build_sync(g, knobs={BENCH: 1}, engine="CPU_ENGINE")
    assert p2.benchmarked and p2.algorithm in {a.name for a in _conv.ALGORITHMS["fprop"]}
    assert db.lookup(key).algorithm == p2.algorithm
    assert p1.algorithm in {a.name for a in _conv.ALGORITHMS["fprop"]}


def test_forced_benchmarking_env(monkeypatch, tmp_path):
    db = hd.PerfDb(str(tmp_path / "db.sqlite3"))
    monkeypatch.setenv("HIPDNN_FORCE_BENCHMARKING", "on")
    with hd.Device("cpu", perfdb=db) as dev:
        plan = dev.build_sync(graph("wgrad"), engine="CPU_ENGINE")
    assert plan.knobs[BENCH] == 1 and plan.benchmarked
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "0")
    with hd.Device("cpu", perfdb=db) as dev:
        plan = dev.build_sync(graph("dgrad"), knobs={BENCH: 1}, engine="CPU_ENGINE")
    assert plan.knobs[BENCH] == 0 and not plan.benchmarked


SCRIPT = textwrap.dedent("""
    import json, hipdnn_async as hd
    g = hd.Graph(name="p")
    x = g.tensor(dims=(2, 4, 10, 10), name="x"); w = g.tensor(dims=(8, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True)
    with hd.Device("cpu") as dev:
        p = dev.build_sync(g, knobs={"global.benchmarking": 1}, engine="CPU_ENGINE")
    print(json.dumps({"benchmarked": p.benchmarked, "hit": p.perfdb_hit, "algo": p.algorithm,
                      "runs": hd.stats()["benchmarks_run"]}))
""")


def test_benchmarking_happens_once_across_processes(tmp_path):
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=str(tmp_path / "shared.sqlite3"))
    env.pop("HIPDNN_ASYNC_FORCE_BENCHMARKING", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", SCRIPT], env=env, check=True,
                                      capture_output=True, text=True).stdout) for _ in range(2)]
    assert runs[0]["benchmarked"] and runs[0]["runs"] == 1
    assert runs[1]["hit"] and not runs[1]["benchmarked"] and runs[1]["runs"] == 0
    assert runs[0]["algo"] == runs[1]["algo"]


def test_hipdnn_style_lowering_seed_sample():
    g = graph("fprop")
    g.build_operation_graph("cpu")
    ids = g.get_ranked_engine_ids()
    assert ids == [e.id for e in hd.engines(g, "cpu")]
    knobs = g.get_knobs_for_engine(ids[0])
    ws_knob = next(k for k in knobs if k.id == WS)
    assert str(ws_knob.constraint) == f"[{ws_knob.constraint.min}, {ws_knob.constraint.max}]"
    g.create_execution_plan_ext(ids[0], [hd.KnobSetting(BENCH, 1),
                                         hd.KnobSetting(WS, ws_knob.constraint.min)])
    g.build_plans()
    assert g.get_workspace_size() <= ws_knob.constraint.min
    x, w, y = (g.tensor_by(n) for n in ("x", "w", g.tensors[-1].name))
    xa = np.random.default_rng(0).standard_normal(x.dims).astype(np.float32)
    wa = np.random.default_rng(1).standard_normal(w.dims).astype(np.float32)
    ya, yb = np.zeros(y.dims, np.float32), np.zeros(y.dims, np.float32)
    g.execute({x: xa, w: wa, y: ya}, None)
    with hd.Device("cpu") as dev:  # the same machinery through the async spelling
        dev.build_sync(g, engine="CPU_ENGINE").execute_sync({x: xa, w: wa, y: yb})
    np.testing.assert_allclose(ya, yb, rtol=1e-5, atol=1e-4)
    with pytest.raises(hd.KnobError, match="outside"):
        g.create_execution_plan_ext(ids[0], [hd.KnobSetting(WS, ws_knob.constraint.max + 1)])


def test_a_lowered_graph_pickles_and_deep_copies_without_its_lowering():
    """Ray ships graphs by pickling them: after build_operation_graph / build_plans the
    graph held Cython state (a TypeError); the copy is the graph, unlowered, as
    Graph.copy() makes it, and builds where it lands (break-it round 2)."""
    import copy
    import pickle
    g = graph("fprop")
    g.build_operation_graph("cpu")
    g.build_plans()
    for other in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert type(other) is type(g) and other.signature() == g.signature()
        with pytest.raises(hd.GraphError, match="build_operation_graph"):
            other.get_ranked_engine_ids()
        other.build_operation_graph("cpu")
        assert other.get_ranked_engine_ids() == g.get_ranked_engine_ids()
        other._lowering_state.device.close()
    assert g.get_workspace_size() >= 0          # the original keeps its lowering
    g._lowering_state.device.close()


def test_a_second_build_operation_graph_closes_the_device_the_first_opened():
    """Each call with a spec opens a Device; a second call left the first one's streams
    and threads running until garbage collection (docstring-audit report). A Device the
    caller passed in is the caller's, and stays open."""
    g = graph("fprop")
    g.build_operation_graph("cpu")
    first = g._lowering_state.device
    g.build_operation_graph("cpu")
    second = g._lowering_state.device
    assert first.closed and not second.closed and second is not first
    with hd.Device("cpu") as mine:
        g.build_operation_graph(mine)
        assert second.closed and not mine.closed
        g.build_operation_graph("cpu")
        assert not mine.closed
        g.build_plans()                 # builds on the open device of the last call
    g._lowering_state.device.close()


@pytest.mark.slow
def test_eight_processes_tuning_into_one_db_at_once(tmp_path):
    # MIOpen #1878/#2214: concurrent tuners corrupted or locked a shared db. Here 8
    # processes build the same benchmarked plan at once: none fails, the db stays readable
    # and holds the problem once, with an algorithm that exists.
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=str(tmp_path / "shared.sqlite3"))
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert all(r["benchmarked"] or r["hit"] for r in results)
    entries = hd.PerfDb(str(tmp_path / "shared.sqlite3")).entries()
    assert len(entries) == 1
    assert entries[0]["algorithm"] in {a.name for a in _conv.ALGORITHMS["fprop"]}


def test_each_build_logs_engine_knobs_algorithm_and_db_hit(tmp_path, caplog):
    import logging
    db = hd.PerfDb(str(tmp_path / "db.sqlite3"))
    with caplog.at_level(logging.INFO, logger="hipdnn_async"):
        for _ in range(2):
            with hd.Device("cpu", perfdb=db) as dev:
                plan = dev.build_sync(graph("fprop"), knobs={BENCH: 1}, engine="CPU_ENGINE")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("built plan")]
    assert len(lines) == 2
    for line, hit in zip(lines, (False, True)):
        assert "engine CPU_ENGINE" in line and f"algorithm {plan.algorithm}" in line
        assert "'global.benchmarking': 1" in line and f"perf db hit {hit}" in line


def test_a_benchmark_that_timed_nothing_stores_nothing(tmp_path):
    """A vendor search that measured none of the candidates (cudnnFind / MIOpen Find
    returning only other algorithms) gives the heuristic's first with ms NaN: that must
    not enter the perf db as a benchmarked winner, or no later build benchmarks again."""
    from hipdnn_async.providers import _tuning
    db = hd.PerfDb(str(tmp_path / "db.sqlite3"))
    key = _perfdb.PerfKey(provider="p", engine="E", library_versions="v", device="d",
                          problem="conv", workspace_limit=0)
    cands = [_tuning.Candidate("A", 0, 0), _tuning.Candidate("B", 1, 0)]
    choice = _tuning.tuned(db, key, cands, lambda fitting: (fitting[0], float("nan")))
    assert choice.candidate.name == "A" and choice.benchmarked and not choice.perfdb_hit
    assert db.lookup(key) is None and db.entries() == []
    # the next build benchmarks again and stores what it measured
    again = _tuning.tuned(db, key, cands, lambda fitting: (fitting[1], 0.25))
    assert again.benchmarked and not again.perfdb_hit
    assert db.lookup(key).algorithm == "B" and db.lookup(key).time_ms == 0.25
