"""providers/_tuning.py: candidates, the workspace knob, perf-db lookup/store keyed by engine.

Knob semantics are docs/contract/semantics.md's: ``global.workspace_size_limit`` only for
patterns 6, 7, 9, over [min, max] of the candidates' workspaces, default max; a limit no
candidate fits is a KnobError. The perf db keeps one record per engine; entries of a
schema-1 db (no engine) are claimed by the engine that wrote them.
"""
from __future__ import annotations

import logging
import sqlite3
import types

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async import _perfdb
from hipdnn_async.patterns import Pattern, match
from hipdnn_async.providers import _tuning
from hipdnn_async.providers._base import ProviderEngine, engine_id
from hipdnn_async.providers.cpu import CpuProvider
from hipdnn_async.providers.cpu import _conv
from hipdnn_async.providers.cpu._provider import CpuEngine, conv_problem
from oracle import _reference as ref

BENCH, WS = "global.benchmarking", "global.workspace_size_limit"
CANDS = [_tuning.Candidate("fast", 3, 4096, props={"time_ms": 0.1}),
         _tuning.Candidate("lean", 1, 0), _tuning.Candidate("big", 7, 1 << 20, False)]


def conv_graph(kind="fprop"):
    g = hd.Graph(name=kind)
    if kind == "fprop":
        y = g.conv_fprop(g.tensor(dims=(2, 3, 7, 6), name="x"),
                         g.tensor(dims=(4, 3, 3, 3), name="w"), padding=1)
    elif kind == "fused":
        y = g.conv_fprop(g.tensor(dims=(2, 3, 7, 6), name="x"),
                         g.tensor(dims=(4, 3, 3, 3), name="w"), padding=1)
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    else:  # batchnorm inference
        c = [g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("m", "v", "s", "b")]
        y = g.batchnorm_inference_variance_ext(g.tensor(dims=(2, 3, 4, 4), name="x"), *c,
                                               epsilon=1e-5)
    y.set_output(True).set_name("y")
    return g


class Engine:
    """The parts of a ProviderEngine that ``choose`` reads."""

    def __init__(self, name="FAKE_ENGINE", schema1=False):
        self.name, self.schema1 = name, schema1
        self.provider = types.SimpleNamespace(
            name="fakeprov", describe=lambda: {"library_versions": "fakelib 1.2",
                                               "device": "fake device"})


def test_knobs_by_pattern():
    for kind, want in (("fprop", [BENCH, WS]), ("fused", [BENCH]), ("bn", [BENCH])):
        knobs = _tuning.engine_knobs(match(conv_graph(kind)), CANDS)
        assert [k.id for k in knobs] == want, kind
    ws = _tuning.engine_knobs(match(conv_graph()), CANDS)[1]
    assert (ws.min, ws.max, ws.default) == (0, 1 << 20, 1 << 20)
    assert _tuning.WORKSPACE_KNOB_PATTERNS == {Pattern.CONV_FPROP, Pattern.CONV_DGRAD,
                                               Pattern.CONV_WGRAD}


def test_within_limit():
    assert _tuning.within_limit(CANDS, {}, engine_name="E") == (1 << 20, CANDS)
    assert _tuning.within_limit(CANDS, {WS: 4096}, engine_name="E") == (4096, CANDS[:2])
    big_only = [CANDS[2]]
    with pytest.raises(hd.KnobError) as e:
        _tuning.within_limit(big_only, {WS: 4096}, engine_name="E")
    assert "'global.workspace_size_limit' = 4096" in str(e.value)
    assert "engine 'E'" in str(e.value) and str(1 << 20) in str(e.value)


def test_candidate_props_do_not_compare():
    assert _tuning.Candidate("a", 1, 0, props={"time_ms": 1}) == _tuning.Candidate("a", 1, 0)
    assert CANDS[2].deterministic is False and CANDS[0].deterministic is True


def test_heuristic_choice_needs_no_perfdb():
    m = match(conv_graph())
    choice = _tuning.choose(Engine(), m, CANDS, {WS: 4096}, None,
                            heuristic=lambda fitting, limit: fitting[-1],
                            measure=pytest.fail)
    assert choice.candidate.name == "lean" and choice.limit == 4096
    assert choice.fitting == tuple(CANDS[:2])
    assert not choice.benchmarked and not choice.perfdb_hit


def test_benchmark_stores_then_hits_per_engine():
    db = hd.PerfDb(":memory:")
    m = match(conv_graph())
    measured = []

    def measure(fitting):
        measured.append([c.name for c in fitting])
        return fitting[1], 2.5

    kw = dict(heuristic=pytest.fail, measure=measure)
    first = _tuning.choose(Engine(), m, CANDS, {BENCH: 1}, db, **kw)
    assert first.benchmarked and first.candidate.name == "lean" and first.time_ms == 2.5
    (e,) = db.entries()
    assert (e["provider"], e["engine"], e["library_versions"], e["device"], e["problem"],
            e["workspace_limit"], e["algorithm"], e["time_ms"], e["workspace_bytes"]) == (
        "fakeprov", "FAKE_ENGINE", "fakelib 1.2", "fake device", m.signature, 1 << 20,
        "lean", 2.5, 0)
    again = _tuning.choose(Engine(), m, CANDS, {BENCH: 1}, db, **kw)
    assert again.perfdb_hit and not again.benchmarked and again.candidate == CANDS[1]
    # another engine of the same provider tunes (and records) the problem for itself
    other = _tuning.choose(Engine("FAKE_ENGINE_2"), m, CANDS, {BENCH: 1}, db, **kw)
    assert other.benchmarked and len(measured) == 2
    assert sorted(r["engine"] for r in db.entries()) == ["FAKE_ENGINE", "FAKE_ENGINE_2"]


def test_stale_record_is_tuned_again(caplog):
    db = hd.PerfDb(":memory:")
    m = match(conv_graph())
    key = _tuning.perf_key(Engine().provider, "FAKE_ENGINE", m, 1 << 20)
    db.store(key, _perfdb.PerfRecord("removed", 0.1, 0, 1.0))
    with caplog.at_level(logging.WARNING, logger="hipdnn_async"):
        c = _tuning.choose(Engine(), m, CANDS, {BENCH: 1}, db, heuristic=pytest.fail,
                           measure=lambda f: (f[0], 0.5))
    assert c.benchmarked and c.candidate.name == "fast"
    assert "'removed'" in caplog.text and "FAKE_ENGINE" in caplog.text
    assert db.lookup(key).algorithm == "fast" and db.lookup(key).time_ms == 0.5


def _schema1_db(path, row):
    """A perf db file as hipdnn_async 0.1.0 wrote it (schema 1: no engine column)."""
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE perf (
            provider TEXT NOT NULL, library_versions TEXT NOT NULL, device TEXT NOT NULL,
            problem TEXT NOT NULL, workspace_limit INTEGER NOT NULL, algorithm TEXT NOT NULL,
            time_ms REAL NOT NULL, workspace_bytes INTEGER NOT NULL, measured_at REAL NOT NULL,
            PRIMARY KEY (provider, library_versions, device, problem, workspace_limit));
        INSERT INTO meta VALUES ('format', 'hipdnn_async.perfdb');
        PRAGMA user_version = 1;""")
    conn.execute("INSERT INTO perf VALUES (?,?,?,?,?,?,?,?,?)", row)
    conn.commit()
    conn.close()


class CpuTwin(CpuEngine):
    name = "CPU_ENGINE_TWIN"
    schema1 = False


def test_the_cpu_engine_claims_its_schema1_entry(tmp_path, monkeypatch):
    g = conv_graph()
    m = match(g)
    p = conv_problem(m)
    applicable = [a for a in _conv.ALGORITHMS["fprop"] if a.applicable(p)]
    limit = max(a.workspace_size(p) for a in applicable)
    cpu = CpuProvider()
    # "direct" is the slowest: a benchmark would not pick it, so a plan with it came from the db
    _schema1_db(tmp_path / "old.sqlite3", ("cpu", cpu.describe()["library_versions"],
                                           cpu.perf_device(), m.signature, limit, "direct",
                                           9.0, 0, 100.0))
    monkeypatch.setattr(CpuProvider, "ENGINES", (CpuTwin, CpuEngine))
    db = hd.PerfDb(str(tmp_path / "old.sqlite3"))
    assert [e["engine"] for e in db.entries()] == [""]
    rng = np.random.default_rng(0)
    x, w = rng.uniform(-1, 1, (2, 3, 7, 6)).astype(np.float32), rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    with hd.Device("cpu", perfdb=db) as dev:
        twin = dev.build_sync(g, engine="CPU_ENGINE_TWIN", knobs={BENCH: 1})
        assert twin.benchmarked and not twin.perfdb_hit    # not its entry
        plan = dev.build_sync(g, engine="CPU_ENGINE", knobs={BENCH: 1})
        assert plan.perfdb_hit and not plan.benchmarked and plan.algorithm == "direct"
        y = np.full((2, 4, 7, 6), np.nan, np.float32)
        plan.execute_sync({"x": x, "w": w, "y": y})
    np.testing.assert_allclose(y, ref.conv_fprop(x, w, (1, 1), (1, 1)), rtol=1e-5, atol=1e-5)
    assert sorted(e["engine"] for e in db.entries()) == ["CPU_ENGINE", "CPU_ENGINE_TWIN"]


def test_provider_engine_defaults():
    class Bare(ProviderEngine):
        name = "BARE"

        def knobs(self, match):
            return []

        def build(self, match, engine, knobs, perfdb):
            raise hd.NotSupportedError("no")

    assert Bare.schema1 is False and CpuEngine.schema1 is True
    assert Bare(CpuProvider()).id == engine_id("BARE")


class _FakeMachine:
    """A clock and candidates whose calls take ``cost`` ms, plus ``burst_ms`` while the
    fake time is inside [burst_from, burst_to) ms: another job's burst of work."""

    def __init__(self, burst_from, burst_to, burst_ms):
        self.now = 0.0
        self.burst = (burst_from, burst_to, burst_ms)

    def clock(self):
        return self.now / 1e3

    def run(self, cost):
        def call():
            lo, hi, extra = self.burst
            self.now += cost + (extra if lo <= self.now < hi else 0.0)
        return call


def test_time_interleaved_takes_each_minimum_outside_a_burst():
    # two candidates of 1.0 and 1.1 ms; a burst adds 5 ms to every call begun in the first
    # 35 ms. Timed one after another (warm-up + 5 calls each), the first candidate's calls
    # all fell into the burst and the second won; round-robin, every candidate has calls
    # after the burst and each minimum is its own cost.
    m = _FakeMachine(0.0, 35.0, 5.0)
    sequential = []
    for cost in (1.0, 1.1):
        run = m.run(cost)
        run()
        times = []
        for _ in range(5):
            t0 = m.clock()
            run()
            times.append((m.clock() - t0) * 1e3)
        sequential.append(min(times))
    assert sequential[0] > sequential[1]          # the failure being guarded against
    m = _FakeMachine(0.0, 35.0, 5.0)
    got = _tuning.time_interleaved([m.run(1.0), m.run(1.1)], rounds=5, budget_s=1.0,
                                   clock=m.clock)
    assert got == pytest.approx([1.0, 1.1])
    assert _tuning.fastest(got) == 0


def test_time_interleaved_rounds_budget_and_order():
    calls = []
    m = _FakeMachine(0.0, 0.0, 0.0)

    def tracked(name, cost):
        run = m.run(cost)
        return lambda: (calls.append(name), run())
    got = _tuning.time_interleaved([tracked("a", 2.0), tracked("b", 3.0), tracked("c", 1.0)],
                                   rounds=3, budget_s=1.0, clock=m.clock)
    assert got == pytest.approx([2.0, 3.0, 1.0])
    # warm-ups, then rounds starting one candidate further along each time
    assert calls == ["a", "b", "c", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # the budget (per candidate) stops new rounds; the first round always runs
    calls.clear()
    got = _tuning.time_interleaved([tracked("a", 400.0), tracked("b", 400.0)], rounds=5,
                                   budget_s=0.5, warmup=False, clock=m.clock)
    assert calls == ["a", "b", "b", "a"] and got == pytest.approx([400.0, 400.0])
    with pytest.raises(ValueError, match="rounds >= 1"):
        _tuning.time_interleaved([tracked("a", 1.0)], rounds=0, budget_s=1.0)
    with pytest.raises(ValueError, match="needs runs"):
        _tuning.time_interleaved([], rounds=1, budget_s=1.0)
