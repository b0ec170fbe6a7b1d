"""Knobs on the fake cuDNN: global.workspace_size_limit picks within the limit or is a
KnobError below every candidate; global.benchmarking runs cuDNN's Find once, takes the
fastest allowed result and remembers it in the perf db, so a later build finds nothing;
cudnn_legacy.deterministic keeps cuDNN's non-deterministic ALGO_0 / ALGO_3 out of FLOAT
convolutions, which take them by default (FLOAT atomics: within tolerance);
cudnn_legacy.allow_fft (default 1, every FLOAT convolution, weight gradients included)
keeps FFT / FFT_TILING out, and the perf-db key names it, so that winners benchmarked under
the earlier FFT-declining default are chosen anew; no FLOAT convolution takes Winograd.
The candidates and timings are the fake's own answers, read from the same log."""
from __future__ import annotations

import pytest

import hipdnn_async as hd
from hipdnn_async.patterns import match

from . import _scenarios
from ._expect import ALGOS, FFTS, WINOGRADS, algo_name, expected_algorithm, float_declines
from ._fakes import calls

LIMIT = "global.workspace_size_limit"
DET = "cudnn_legacy.deterministic"
FFT = "cudnn_legacy.allow_fft"
HEUR = {"fprop": "cudnnGetConvolutionForwardAlgorithm_v7",
        "dgrad": "cudnnGetConvolutionBackwardDataAlgorithm_v7",
        "wgrad": "cudnnGetConvolutionBackwardFilterAlgorithm_v7"}
DIRECTION = {"fprop": 0, "dgrad": 1, "wgrad": 2}


def build(fake_gpu, direction, knobs, builds=1, perfdb=False):
    r = fake_gpu.call(_scenarios.knob_case, direction, knobs, builds=builds)
    assert r["violations"] == 0
    return (r["builds"], r["perfdb"]) if perfdb else r["builds"]


def candidates(hdr, perf, direction, deterministic=False, allow_fft=True):
    """The heuristic entries the policy may take (FLOAT I/O)."""
    return [e for e in perf if e["status"] == 0
            and (e["determinism"] == hdr.CUDNN_DETERMINISTIC or not deterministic)
            and not float_declines(algo_name(hdr, direction, e["algo"]), allow_fft)]


@pytest.mark.parametrize("direction", ["fprop", "dgrad"])
def test_default_build_asks_heuristics_once_and_never_finds(fake_gpu, direction):
    b = build(fake_gpu, direction, {})[0]
    assert b["error"] is None, b.get("message")
    assert len(calls(b["log"], HEUR[direction])) == 1
    assert not calls(b["log"], "cudnnFind*")


def test_workspace_limit_takes_the_best_candidate_within_it(fake_gpu, hdr):
    first = build(fake_gpu, "fprop", {})[0]
    perf = calls(first["log"], HEUR["fprop"])[0]["perf"]
    default = expected_algorithm(hdr, perf, 0, True)
    assert first["plan"]["algorithm"] == default["name"]
    limit = default["memory"] - 1
    assert limit >= min(e["memory"] for e in candidates(hdr, perf, 0)), "the fake offers no smaller one"
    b = build(fake_gpu, "fprop", {LIMIT: limit})[0]
    assert b["error"] is None, b.get("message")
    want = expected_algorithm(hdr, perf, 0, True, limit=limit)
    assert b["plan"]["algorithm"] == want["name"] != default["name"]
    assert b["plan"]["workspace_size"] <= limit


def test_workspace_limit_below_every_candidate_is_a_knob_error(fake_gpu, hdr):
    first = build(fake_gpu, "dgrad", {})[0]
    perf = calls(first["log"], HEUR["dgrad"])[0]["perf"]
    smallest = min(e["memory"] for e in candidates(hdr, perf, 1, deterministic=True))
    assert smallest > 0, "the fake's deterministic dgrad candidates need workspace"
    b = build(fake_gpu, "dgrad", {LIMIT: smallest - 1, DET: 1})[0]
    assert isinstance(b["error"], hd.KnobError), b.get("mro")
    assert LIMIT in b["message"] and str(smallest - 1) in b["message"]


@pytest.mark.parametrize("direction", ["dgrad", "wgrad"])
def test_float_convolutions_take_nondeterministic_algorithms_unless_the_knob_says(
        fake_gpu, hdr, direction):
    d = DIRECTION[direction]
    first = build(fake_gpu, direction, {})[0]
    assert first["error"] is None, first.get("message")
    assert first["plan"]["knobs"][DET] == 0
    perf = calls(first["log"], HEUR[direction])[0]["perf"]
    nondet = [e for e in candidates(hdr, perf, d) if e["determinism"] != hdr.CUDNN_DETERMINISTIC]
    det = candidates(hdr, perf, d, deterministic=True)
    assert nondet and det, "the fake offers both kinds"
    # a limit that only a non-deterministic algorithm fits: taken by default ...
    limit = min(e["memory"] for e in nondet)
    assert limit < min(e["memory"] for e in det), "the fake's non-deterministic one is smaller"
    b = build(fake_gpu, direction, {LIMIT: limit})[0]
    assert b["error"] is None, b.get("message")
    want = expected_algorithm(hdr, perf, d, True, limit=limit)
    assert want["determinism"] != hdr.CUDNN_DETERMINISTIC
    assert b["plan"]["algorithm"] == want["name"], b["plan"]
    assert "not deterministic" in b["plan"]["reason"], b["plan"]["reason"]
    # ... and refused with the knob (no algorithm left within the limit)
    c = build(fake_gpu, direction, {LIMIT: limit, DET: 1})[0]
    assert isinstance(c["error"], hd.KnobError), c.get("mro")
    d1 = build(fake_gpu, direction, {DET: 1})[0]
    assert d1["plan"]["algorithm"] == expected_algorithm(hdr, perf, d, True,
                                                         deterministic=True)["name"]


def test_benchmarking_finds_once_and_remembers(fake_gpu, hdr):
    first, second = build(fake_gpu, "fprop", {"global.benchmarking": 1}, builds=2)
    assert first["error"] is None and second["error"] is None
    finds = calls(first["log"], "cudnnFindConvolutionForwardAlgorithmEx")
    assert len(finds) == 1, "Find must run once per build of a new problem"
    perf = calls(first["log"], HEUR["fprop"])[0]["perf"]
    allowed = {e["algo"] for e in candidates(hdr, perf, 0)}
    fastest = next(e for e in finds[0]["perf"] if e["status"] == 0 and e["algo"] in allowed
                   and e["mathType"] in (hdr.CUDNN_DEFAULT_MATH, hdr.CUDNN_FMA_MATH))
    assert first["plan"]["algorithm"] == algo_name(hdr, 0, fastest["algo"])
    assert first["plan"]["benchmarked"] and not first["plan"]["perfdb_hit"]
    heuristic = expected_algorithm(hdr, perf, 0, True)
    assert fastest["algo"] != heuristic["algo"], "the fake's timings should differ from its heuristic order"
    # the second build, in a new Device, reads the perf db: no Find
    assert not calls(second["log"], "cudnnFind*")
    assert second["plan"]["perfdb_hit"] and second["plan"]["algorithm"] == first["plan"]["algorithm"]
    assert ALGOS  # names come from cudnn_cnn.h via _expect


def test_benchmarked_winners_are_remembered_per_determinism_policy(fake_gpu, hdr):
    """A winner benchmarked with cudnn_legacy.deterministic=0 (possibly ALGO_0/ALGO_3)
    must not stand in for a deterministic build, nor the other way round: the knob is in
    the perf-db key (review of the change: it was not, while the graph engine's was)."""
    bench = {"global.benchmarking": 1}
    free, det, det_again = build(fake_gpu, "wgrad", dict(bench), builds=1) + build(
        fake_gpu, "wgrad", dict(bench, **{DET: 1}), builds=2)
    for b in (free, det, det_again):
        assert b["error"] is None, b.get("message")
    assert free["plan"]["benchmarked"] and not free["plan"]["perfdb_hit"]
    # the deterministic build benchmarks its own candidates (no hit of the other policy's)
    assert len(calls(det["log"], "cudnnFindConvolutionBackwardFilterAlgorithmEx")) == 1
    assert det["plan"]["benchmarked"] and not det["plan"]["perfdb_hit"]
    perf = calls(free["log"], HEUR["wgrad"])[0]["perf"]
    deterministic = {algo_name(hdr, 2, e["algo"]) for e in candidates(hdr, perf, 2, True)}
    assert det["plan"]["algorithm"] in deterministic
    assert free["plan"]["algorithm"] not in deterministic, \
        "the fake's fastest FLOAT wgrad should be a non-deterministic one"
    # ... and remembers it under its own key, beside the other policy's winner
    assert det_again["plan"]["perfdb_hit"] and not calls(det_again["log"], "cudnnFind*")
    assert det_again["plan"]["algorithm"] == det["plan"]["algorithm"]
    free_again = build(fake_gpu, "wgrad", dict(bench))[0]
    assert free_again["plan"]["perfdb_hit"], free_again["plan"]
    assert free_again["plan"]["algorithm"] == free["plan"]["algorithm"]


def _names(hdr, entries, direction):
    return [algo_name(hdr, direction, e["algo"]) for e in entries]


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_float_convolutions_consider_fft_unless_allow_fft_is_0(fake_gpu, hdr, direction):
    d = DIRECTION[direction]
    first = build(fake_gpu, direction, {})[0]
    assert first["error"] is None, first.get("message")
    assert first["plan"]["knobs"][FFT] == 1
    perf = calls(first["log"], HEUR[direction])[0]["perf"]
    offered = set(_names(hdr, [e for e in perf if e["status"] == 0], d))
    assert FFTS <= offered and WINOGRADS & offered, "the fake offers FFT and Winograd here"
    # the candidates the plan considered (heuristic order, policy applied): FFT in,
    # Winograd out
    considered = [name for name, _ in first["plan"]["trials"]]
    assert considered == _names(hdr, candidates(hdr, perf, d), d)
    assert FFTS <= set(considered) and not WINOGRADS & set(considered), considered
    # the workspace limit's default (no limit) is the largest considered workspace, FFT's
    # included: the knob bounds FFT's workspace as any other's
    assert first["plan"]["knobs"][LIMIT] == max(e["memory"] for e in candidates(hdr, perf, d))
    b = build(fake_gpu, direction, {FFT: 0})[0]
    assert b["error"] is None, b.get("message")
    considered = [name for name, _ in b["plan"]["trials"]]
    assert considered == _names(hdr, candidates(hdr, perf, d, allow_fft=False), d)
    assert not (FFTS | WINOGRADS) & set(considered), considered


def test_float_wgrad_workspace_limit_below_fft_keeps_fft_out(fake_gpu, hdr):
    """FLOAT wgrad may now need FFT's workspace; a workspace limit below it keeps the
    FFT algorithms out of the candidates (and a deterministic build within the limit
    still finds one)."""
    first = build(fake_gpu, "wgrad", {})[0]
    perf = calls(first["log"], HEUR["wgrad"])[0]["perf"]
    ffts = [e for e in candidates(hdr, perf, 2) if algo_name(hdr, 2, e["algo"]) in FFTS]
    limit = min(e["memory"] for e in ffts) - 1
    within = [e for e in candidates(hdr, perf, 2) if e["memory"] <= limit]
    assert within, "the fake offers a direct algorithm below FFT's workspace"
    b = build(fake_gpu, "wgrad", {LIMIT: limit})[0]
    assert b["error"] is None, b.get("message")
    considered = [name for name, _ in b["plan"]["trials"]]
    assert considered == _names(hdr, within, 2) and not FFTS & set(considered), considered
    assert b["plan"]["workspace_size"] <= limit


def test_benchmarked_wgrad_is_chosen_anew_under_the_fft_default(fake_gpu, hdr):
    """A FLOAT weight gradient benchmarked with allow_fft = 0 is stored under the plain
    signature, the key the earlier FFT-declining default wrote; the new default does not
    take it (it benchmarks FFT too, under "[fft] <signature>"), and allow_fft = 0 finds
    its own winner again. Both use one workspace limit, 1 byte below the largest
    candidate's (a key no other test writes: the perf db is the session's)."""
    first = build(fake_gpu, "wgrad", {})[0]
    perf = calls(first["log"], HEUR["wgrad"])[0]["perf"]
    limit = max(e["memory"] for e in candidates(hdr, perf, 2)) - 1
    assert any(algo_name(hdr, 2, e["algo"]) in FFTS and e["memory"] <= limit
               for e in candidates(hdr, perf, 2)), "an FFT algorithm fits the limit"
    bench = {"global.benchmarking": 1, LIMIT: limit}
    find = "cudnnFindConvolutionBackwardFilterAlgorithmEx"
    old = build(fake_gpu, "wgrad", dict(bench, **{FFT: 0}))[0]
    new = build(fake_gpu, "wgrad", dict(bench))[0]
    old_again = build(fake_gpu, "wgrad", dict(bench, **{FFT: 0}))[0]
    (new_again,), db = build(fake_gpu, "wgrad", dict(bench), perfdb=True)
    for b in (old, new, old_again, new_again):
        assert b["error"] is None, b.get("message")
    for b, allow_fft in ((old, False), (new, True)):
        assert b["plan"]["benchmarked"] and not b["plan"]["perfdb_hit"], b["plan"]
        assert len(calls(b["log"], find)) == 1
        timed = [name for name, _ in b["plan"]["trials"]]
        assert timed == _names(hdr, [e for e in candidates(hdr, perf, 2, allow_fft=allow_fft)
                                     if e["memory"] <= limit], 2)
    assert FFTS & {name for name, _ in new["plan"]["trials"]}
    for again, earlier in ((old_again, old), (new_again, new)):
        assert again["plan"]["perfdb_hit"] and not calls(again["log"], "cudnnFind*")
        assert again["plan"]["algorithm"] == earlier["plan"]["algorithm"]
    sig = match(_scenarios._conv_graph(hd, "wgrad")[0]._snapshot()[0]).signature
    ours = {problem: algo for engine, problem, algo in db
            if engine == "CUDNN_LEGACY_ENGINE" and problem in (sig, f"[fft] {sig}")}
    assert ours == {f"[fft] {sig}": new["plan"]["algorithm"],
                    sig: old["plan"]["algorithm"]}, ours


def test_benchmarked_dgrad_takes_fft_and_remembers_it_per_fft_policy(fake_gpu, hdr):
    """With FFT accepted the fake's fastest allowed FLOAT dgrad is an FFT one; with
    allow_fft = 0 another. The knob is in the perf-db key: the default key carries
    "[fft]", the allow_fft = 0 key is the earlier default's (FFT declined then), so that a
    winner of the earlier policy is never taken by the new default and the other way
    round."""
    bench = {"global.benchmarking": 1}
    fft = build(fake_gpu, "dgrad", dict(bench))[0]
    no_fft = build(fake_gpu, "dgrad", dict(bench, **{FFT: 0}))[0]
    (fft_again,), db = build(fake_gpu, "dgrad", dict(bench), perfdb=True)
    for b in (fft, no_fft, fft_again):
        assert b["error"] is None, b.get("message")
    perf = calls(fft["log"], HEUR["dgrad"])[0]["perf"]
    find = "cudnnFindConvolutionBackwardDataAlgorithmEx"

    def fastest(b, allow_fft):
        allowed = set(_names(hdr, candidates(hdr, perf, 1, allow_fft=allow_fft), 1))
        (f,) = calls(b["log"], find)
        return next(algo_name(hdr, 1, e["algo"]) for e in f["perf"] if e["status"] == 0
                    and algo_name(hdr, 1, e["algo"]) in allowed
                    and e["mathType"] in (hdr.CUDNN_DEFAULT_MATH, hdr.CUDNN_FMA_MATH))
    assert fft["plan"]["benchmarked"] and not fft["plan"]["perfdb_hit"]
    assert fft["plan"]["algorithm"] == fastest(fft, True) in FFTS, fft["plan"]
    assert "FFT" in fft["plan"]["reason"], fft["plan"]["reason"]
    # allow_fft = 0 benchmarks anew (no hit of the FFT winner) and keeps a direct one
    assert no_fft["plan"]["benchmarked"] and not no_fft["plan"]["perfdb_hit"]
    assert no_fft["plan"]["algorithm"] == fastest(no_fft, False) not in FFTS, no_fft["plan"]
    # the default finds its own winner again, beside the other policy's
    assert fft_again["plan"]["perfdb_hit"] and not calls(fft_again["log"], "cudnnFind*")
    assert fft_again["plan"]["algorithm"] == fft["plan"]["algorithm"]
    # in the db: the default's winner under "[fft] <signature>", the allow_fft = 0 one
    # under the plain signature, as the FFT-declining default wrote it (so the new
    # default never reads an entry chosen under the earlier policy)
    sig = match(_scenarios._conv_graph(hd, "dgrad")[0]._snapshot()[0]).signature
    ours = {problem: algo for engine, problem, algo in db
            if engine == "CUDNN_LEGACY_ENGINE" and problem.endswith(sig)}
    assert ours == {f"[fft] {sig}": fft["plan"]["algorithm"],
                    sig: no_fft["plan"]["algorithm"]}, ours

