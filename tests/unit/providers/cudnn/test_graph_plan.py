"""Engine configs and plans of the cuDNN graph engine without a GPU: the numerical
policy, heuristics order, perf-db names, config rebuilding and variant-pack binding."""
import dataclasses
import types

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.patterns import match
from hipdnn_async.providers.cudnn import _graph, _graph_plan
from hipdnn_async.providers.cudnn._graph_ir import graph_spec

from . import _fake_backend
from .test_graph_ir import _bn_training, _conv_graph


@pytest.fixture
def be():
    return _fake_backend.fake_module()


def _cand(be, *notes, index=1, ws=0):
    return _graph_plan.Candidate(None, index, frozenset(notes), frozenset(), ws, "A")


@pytest.mark.parametrize("note,float_io,tf32,fft,rejected", [
    ("NUMERICAL_NOTE_TENSOR_CORE", True, False, True, "TF32"),
    ("NUMERICAL_NOTE_TENSOR_CORE", True, True, True, None),
    ("NUMERICAL_NOTE_TENSOR_CORE", False, False, True, None),   # fp16/bf16: FLOAT accumulation
    ("NUMERICAL_NOTE_DOWN_CONVERT_INPUTS", False, False, True, "down-converts"),
    ("NUMERICAL_NOTE_DOWN_CONVERT_INPUTS", True, False, True, "down-converts"),
    ("NUMERICAL_NOTE_DOWN_CONVERT_INPUTS", True, True, True, None),
    ("NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION", False, False, True, "reduced precision"),
    # Winograd stays declined for FLOAT whatever allow_fft says (never measured within bound)
    ("NUMERICAL_NOTE_WINOGRAD", True, False, True, "Winograd"),
    ("NUMERICAL_NOTE_WINOGRAD_TILE_4x4", True, False, True, "Winograd"),
    ("NUMERICAL_NOTE_WINOGRAD_TILE_6x6", True, True, True, "Winograd"),
    ("NUMERICAL_NOTE_WINOGRAD_TILE_13x13", True, False, False, "Winograd"),
    ("NUMERICAL_NOTE_WINOGRAD", False, False, True, None),
    # FFT: accepted by default (FLOAT: measured within bound, bench/diag_fft.py and
    # bench/diag_wgrad_fft.py; HALF / BFLOAT16: as before), declined with allow_fft = 0
    # (the knob) for every data type
    ("NUMERICAL_NOTE_FFT", True, False, True, None),
    ("NUMERICAL_NOTE_FFT", True, True, True, None),
    ("NUMERICAL_NOTE_FFT", True, False, False, "FFT"),
    ("NUMERICAL_NOTE_FFT", True, True, False, "FFT"),
    ("NUMERICAL_NOTE_FFT", False, False, True, None),
    ("NUMERICAL_NOTE_FFT", False, False, False, "FFT"),
    ("NUMERICAL_NOTE_NONDETERMINISTIC", True, False, True, None),
])
def test_numerical_policy(be, note, float_io, tf32, fft, rejected):
    why = _graph_plan.rejection(be, _cand(be, getattr(be, note)), float_io=float_io,
                                allow_tf32=tf32, allow_fft=fft)
    if rejected is None:
        assert why is None
    else:
        assert why is not None and rejected in why


def test_the_policy_default_accepts_fft_for_float_but_not_winograd(be):
    fft, wino = _cand(be, be.NUMERICAL_NOTE_FFT), _cand(be, be.NUMERICAL_NOTE_WINOGRAD)
    assert _graph_plan.rejection(be, fft, float_io=True, allow_tf32=False) is None
    assert "Winograd" in _graph_plan.rejection(be, wino, float_io=True, allow_tf32=False)
    assert "allow_fft = 0" in _graph_plan.rejection(be, fft, float_io=True, allow_tf32=False,
                                                     allow_fft=False)


def test_the_order_is_cudnns_heuristic_order(be):
    # determinism is asked for with a knob; by default the predicted fastest come first
    a = _cand(be, be.NUMERICAL_NOTE_NONDETERMINISTIC, index=5)
    b, c = _cand(be, index=7), _cand(be, be.NUMERICAL_NOTE_TENSOR_CORE, index=2)
    assert [x.index for x in _graph_plan.ordered(be, [a, b, c])] == [5, 7, 2]


@pytest.mark.parametrize("float_io", [True, False])
def test_the_deterministic_knob_rejects_nondeterministic_engines(be, float_io):
    nondet = _cand(be, be.NUMERICAL_NOTE_NONDETERMINISTIC)
    why = _graph_plan.rejection(be, nondet, float_io=float_io, allow_tf32=False,
                                deterministic=True)
    assert why and "deterministic" in why
    assert _graph_plan.rejection(be, nondet, float_io=float_io, allow_tf32=False) is None
    assert _graph_plan.rejection(be, _cand(be), float_io=float_io, allow_tf32=False,
                                 deterministic=True) is None


def test_explain_names_rank_policy_and_notes(be):
    c = _cand(be, be.NUMERICAL_NOTE_TENSOR_CORE, be.NUMERICAL_NOTE_NONDETERMINISTIC)
    assert _graph_plan.explain(be, c, rank=2, of=5) == (
        "cuDNN heuristics mode A, rank 2 of the 5 configs the numerical policy accepts; "
        "tensor cores, not deterministic")
    assert _graph_plan.explain(be, _cand(be), rank=0, of=0, timed=8, ms=0.0123,
                               first_ms=0.05) == (
        "fastest of 8 configs timed (0.0123 ms median); the heuristic's choice took "
        "0.0500 ms; deterministic")
    assert _graph_plan.explain(be, _cand(be), rank=0, of=0, timed=3, ms=0.02,
                               kept_first=True, first_ms=0.02) == (
        "the heuristic's choice, kept: none of the 3 configs timed was faster by over 3% "
        "(0.0200 ms median); deterministic")


@pytest.mark.parametrize("note", ["NUMERICAL_NOTE_WINOGRAD", "NUMERICAL_NOTE_WINOGRAD_TILE_4x4",
                                  "NUMERICAL_NOTE_WINOGRAD_TILE_6x6",
                                  "NUMERICAL_NOTE_WINOGRAD_TILE_13x13"])
def test_the_reason_names_winograd_for_any_of_its_notes(be, note):
    # a Winograd config may carry only its tile's note; the reason (what tests/gpu reads to
    # tell a transform from direct summation) names it either way, once
    c = _cand(be, getattr(be, note), be.NUMERICAL_NOTE_WINOGRAD_TILE_4x4)
    assert _graph_plan.describe_notes(be, c) == "Winograd, deterministic"
    assert _graph_plan.describe_notes(be, _cand(be, be.NUMERICAL_NOTE_FFT)) == "FFT, deterministic"


def _cfg(be, index, notes=(), ws=64, knobs=()):
    F = _fake_backend.FakeDescriptor
    eng, cfg = F(be.BACKEND_ENGINE_DESCRIPTOR), F(be.BACKEND_ENGINECFG_DESCRIPTOR)
    choices = []
    for t, v in knobs:
        k = F(be.BACKEND_KNOB_CHOICE_DESCRIPTOR)
        k.values = {be.ATTR_KNOB_CHOICE_KNOB_TYPE: (t,), be.ATTR_KNOB_CHOICE_KNOB_VALUE: (v,)}
        choices.append(k)
    # per-descriptor answers: the fake's getters read values first for these
    eng.values = {be.ATTR_ENGINE_GLOBAL_INDEX: (index,)}
    cfg.values = {be.ATTR_ENGINECFG_WORKSPACE_SIZE: (ws,)}
    eng.get_enums = lambda attr, t, n: list(notes) if attr == be.ATTR_ENGINE_NUMERICAL_NOTE else []
    cfg.get_descriptors = lambda attr, kind, n: [eng] if attr == be.ATTR_ENGINECFG_ENGINE else choices
    cfg.count = lambda attr, t: len(choices)
    for k in choices:
        k.get_enums = lambda attr, t, n, k=k: list(k.values[attr])
    return cfg


def test_heuristics_a_then_fallback_filtered_and_deduplicated(be):
    F = _fake_backend.FakeDescriptor
    a = [_cfg(be, 62), _cfg(be, 9, notes=(be.NUMERICAL_NOTE_TENSOR_CORE,)), _cfg(be, 58)]
    fb = [_cfg(be, 58), _cfg(be, 0)]
    queried = []

    def finalize(self):
        mode = self.values.get(be.ATTR_ENGINEHEUR_MODE)
        queried.append(mode)
        self.results = a if mode == be.HEUR_MODE_A else fb if mode == be.HEUR_MODE_FALLBACK else []

    class Heur(F):
        def finalize(self):
            finalize(self)

        def count(self, attr, t):
            return len(self.results)

        def get_descriptors(self, attr, kind, n):
            return self.results[:n]

    be.Descriptor = lambda kind: Heur(kind) if kind == be.BACKEND_ENGINEHEUR_DESCRIPTOR else F(kind)
    out = _graph_plan.heuristic_candidates(
        be, F(be.BACKEND_OPERATIONGRAPH_DESCRIPTOR),
        lambda c: _graph_plan.rejection(be, c, float_io=True, allow_tf32=False))
    assert [c.index for c in out] == [62, 58, 0]
    assert [c.mode for c in out] == ["A", "A", "FALLBACK"]
    assert queried == [be.HEUR_MODE_A, be.HEUR_MODE_FALLBACK]       # B only when both are empty
    assert out[0].workspace == 64


def test_candidate_names_round_trip(be):
    c = _graph_plan.Candidate(_cfg(be, 62, knobs=((11, 0), (2, 3))), 62, frozenset(),
                              frozenset(), 0, "A")
    assert c.name(be) == "eng62 k2=3 k11=0"
    assert _graph_plan.parse_name("eng62 k2=3 k11=0") == (62, ((2, 3), (11, 0)))
    assert _graph_plan.parse_name("eng7") == (7, ())
    for bad in ("IMPLICIT_GEMM", "", "eng1 x2=3", "eng1 k2"):
        with pytest.raises(ValueError):
            _graph_plan.parse_name(bad)


def test_config_from_name_sets_engine_index_and_knobs(be):
    graph = _fake_backend.FakeDescriptor(be.BACKEND_OPERATIONGRAPH_DESCRIPTOR)
    cfg = _graph_plan.config_from_name(be, graph, "eng62 k2=3 k11=0")
    assert cfg.finalized
    (eng,) = cfg.values[be.ATTR_ENGINECFG_ENGINE]
    assert eng.values[be.ATTR_ENGINE_OPERATION_GRAPH] == (graph,)
    assert eng.values[be.ATTR_ENGINE_GLOBAL_INDEX] == (62,)
    knobs = cfg.values[be.ATTR_ENGINECFG_KNOB_CHOICES]
    assert [(k.values[be.ATTR_KNOB_CHOICE_KNOB_TYPE], k.values[be.ATTR_KNOB_CHOICE_KNOB_VALUE])
            for k in knobs] == [(2, (3,)), (11, (0,))]
    calls = [c for c in knobs[0].calls if c[0] == "enum"]
    assert calls == [("enum", be.ATTR_KNOB_CHOICE_KNOB_TYPE, be.TYPE_KNOB_TYPE, 2)]


def test_plan_json_sequence_is_json_then_handle(be):
    plan, _ = _graph_plan.plan_from_json(be, '{"a": 1}', handle=7)
    assert [c[0] for c in plan.calls] == ["chars", "handle"] and plan.finalized
    assert plan.values[be.ATTR_EXECUTION_PLAN_JSON_REPRESENTATION] == b'{"a": 1}'


def _graph_plan_for(be, g, ws=1000):
    (spec,) = graph_spec(match(g), "t")
    return spec, _graph_plan.GraphPlan(be, spec, object(), ws, "eng1")


def test_pointers_bind_roles_segments_and_scalars(be):
    spec, plan = _graph_plan_for(be, _bn_training(running=True, stats_out=False))
    assert plan.workspace_size == 1024 + 256 + 256       # cudnn (aligned), mean, inv_variance
    assert _graph_plan_for(be, _conv_graph("fprop"), ws=131)[1].workspace_size == 131
    roles = {t.binding[1]: 0x1000 * (i + 1) for i, t in enumerate(spec.pack)
             if t.binding[0] == "role"}
    ptrs = dict(zip(plan._uids, plan.pointers(roles, 0x900000)))
    for t in spec.pack:
        kind, what = t.binding
        if kind == "role":
            assert ptrs[t.uid] == roles[what]
        elif kind == "segment":
            assert ptrs[t.uid] == 0x900000 + {"mean": 1024, "inv_variance": 1280}[what]
        else:
            host = np.frombuffer((np.ctypeslib.as_array(
                (np.ctypeslib.ctypes.c_float * 1).from_address(ptrs[t.uid]))).tobytes(), np.float32)
            assert host[0] == pytest.approx(what)


def test_misaligned_buffers_are_variant_pack_errors(be):
    spec, plan = _graph_plan_for(be, _conv_graph("fprop"))
    roles = {"x": 0x1000, "w": 0x2008, "y": 0x3000}
    with pytest.raises(hd.VariantPackError, match=r"tensor 'w' \(w\) at 0x2008 is not 16-byte"):
        plan.pointers(roles, 0)


def test_run_executes_on_the_stream_handle(be, monkeypatch):
    spec, plan = _graph_plan_for(be, _conv_graph("wgrad"), ws=0)
    monkeypatch.setattr(_graph_plan._plans, "handle_for_launch", lambda: (None, 0xABC))
    plan.run({"x": 0x1000, "dw": 0x2000, "dy": 0x3000}, None)
    (call,) = be.executed
    assert call[0] == 0xABC and call[2] == (1, 2, 3) and call[3] == (0x1000, 0x2000, 0x3000)
    assert call[4] == 0 and plan.workspace_size == 0


def test_engine_declines_without_the_backend(monkeypatch):
    monkeypatch.setenv(_graph.DISABLE_ENV, "0")
    with pytest.raises(hd.NotSupportedError, match="turned off"):
        _graph.backend()


def test_engine_declines_when_cudnn_is_absent_or_lacks_the_backend_api(monkeypatch):
    from hipdnn_async.runtime import _cudnn_backend as real
    monkeypatch.delenv(_graph.DISABLE_ENV, raising=False)
    if real.available()[0]:
        pytest.skip("the real backend API is loaded here")
    monkeypatch.setattr(real, "available", lambda: (False, "libfake.so does not export the "
                                                    "cuDNN backend API (cudnnBackendExecute)"))
    monkeypatch.setattr(real, "loaded_path", lambda: "libfake.so")
    with pytest.raises(hd.NotSupportedError, match="does not export the cuDNN backend API"):
        _graph.backend()


class _Declines:
    name = _graph.CUDNN_GRAPH_ENGINE

    def offer(self, match):
        raise hd.NotSupportedError("graph: no")


class _Offers(_Declines):
    def offer(self, match):
        return "graph-engine"


def test_with_graph_engine_ranks_first_and_skips_declines():
    legacy = lambda: ["legacy"]  # noqa: E731
    m = match(_conv_graph("fprop"))
    assert _graph.with_graph_engine(_Offers(), m, legacy) == ["graph-engine", "legacy"]
    assert _graph.with_graph_engine(_Declines(), m, legacy) == ["legacy"]

    def refuses():
        raise hd.NotSupportedError("legacy: padding")
    assert _graph.with_graph_engine(_Offers(), m, refuses) == ["graph-engine"]
    with pytest.raises(hd.NotSupportedError, match="legacy: padding"):
        _graph.with_graph_engine(_Declines(), m, refuses)


def test_float_wgrad_ranks_the_graph_engine_second():
    legacy = lambda: ["legacy"]  # noqa: E731
    assert _graph.with_graph_engine(_Offers(), match(_conv_graph("wgrad", dtype="float32")),
                                    legacy) == ["legacy", "graph-engine"]
    assert _graph.with_graph_engine(_Offers(), match(_conv_graph("wgrad", dtype="float16")),
                                    legacy) == ["graph-engine", "legacy"]


class _FakeProvider:
    name = "cudnn"
    _build = None

    @staticmethod
    def describe():
        return {"device": "fake", "library_versions": "cudnn 0"}


def test_graph_api_engine_declines_float_wgrad_and_without_the_backend(monkeypatch):
    from hipdnn_async.providers._base import engine_id
    eng = _graph.GraphApiEngine(_FakeProvider())
    assert eng.name == "CUDNN_GRAPH_ENGINE" and eng.id == engine_id(eng.name)
    with pytest.raises(hd.NotSupportedError, match="FLOAT weight gradients"):
        eng.knobs(match(_conv_graph("wgrad", dtype="float32")))
    monkeypatch.setenv(_graph.DISABLE_ENV, "0")
    with pytest.raises(hd.NotSupportedError, match="turned off"):
        eng.offer(match(_conv_graph("fprop", dtype="float16")))


def test_heuristic_order_lists_one_mode_and_marks_what_the_policy_rejects(be):
    F = _fake_backend.FakeDescriptor
    results = [_cfg(be, 2), _cfg(be, 9, notes=(be.NUMERICAL_NOTE_TENSOR_CORE,)), _cfg(be, 25),
               _cfg(be, 50, notes=(be.NUMERICAL_NOTE_FFT,)),
               _cfg(be, 7, notes=(be.NUMERICAL_NOTE_WINOGRAD_TILE_4x4,))]
    asked = []

    class Heur(F):
        def finalize(self):
            asked.append(self.values.get(be.ATTR_ENGINEHEUR_MODE))

        def count(self, attr, t):
            return len(results)

        def get_descriptors(self, attr, kind, n):
            return results[:n]

    be.Descriptor = lambda kind: Heur(kind) if kind == be.BACKEND_ENGINEHEUR_DESCRIPTOR else F(kind)
    graph = F(be.BACKEND_OPERATIONGRAPH_DESCRIPTOR)
    assert _graph_plan.heuristic_order(be, graph, "B", float_io=True) == [
        "eng2", "eng9!tf32", "eng25", "eng50", "eng7!winograd"]
    assert _graph_plan.heuristic_order(be, graph, "A", float_io=False) == [
        "eng2", "eng9", "eng25", "eng50", "eng7"]
    # the default policy accepts the FFT config (eng50) for FLOAT, weight gradients too
    assert asked == [be.HEUR_MODE_B, be.HEUR_MODE_A]


def test_candidate_names_carry_the_knobs_when_the_count_reads_zero(be):
    # the H200 run named every config without knobs: a count of 0 is asked again with the
    # full array, so that a perf-db name rebuilds this config, not the engine's default one
    cfg = _cfg(be, 70, knobs=((2, 1), (3, 4)))
    cfg.count = lambda attr, t: 0
    asked = []
    inner = cfg.get_descriptors

    def get_descriptors(attr, kind, n):
        asked.append(n)
        return inner(attr, kind, n)
    cfg.get_descriptors = get_descriptors
    c = _graph_plan.Candidate(cfg, 70, frozenset(), frozenset(), 0, "A")
    assert c.name(be) == "eng70 k2=1 k3=4"
    assert asked == [44]


# The FFT part of the policy through the engine: which knobs are offered, which configs a
# build may choose from, and the perf-db key (a choice made under one policy is never
# taken under another).

class _SpyDb:
    def __init__(self):
        self.looked_up, self.stored = [], []

    def lookup(self, key):
        self.looked_up.append(key)

    def store(self, key, record):
        self.stored.append((key, record))


def _conv_bias_relu(dtype):
    from .test_graph_ir import NCHW, _t
    g = hd.Graph(io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(_t(g, "x", (2, 8, 9, 9)), _t(g, "w", (16, 8, 3, 3)), padding=(1, 1))
    y = g.pointwise(y, _t(g, "bias", (1, 16, 1, 1), layout=NCHW), mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g


def _policy_engine(monkeypatch, be):
    """A CudnnGraphEngine whose heuristics offer a direct (eng1), an FFT (eng50) and a
    Winograd (eng7) config, and whose ``_first`` / ``_benchmark`` record the configs a
    build may take."""
    cands = [dataclasses.replace(c, knobs=()) for c in (
        _cand(be, index=1, ws=16), _cand(be, be.NUMERICAL_NOTE_FFT, index=50, ws=64),
        _cand(be, be.NUMERICAL_NOTE_WINOGRAD, index=7, ws=32))]
    build = type("B", (), {"scratch_pack": staticmethod(lambda m: {})})()
    eng = _graph.CudnnGraphEngine(build, lambda: {"device": "fake", "library_versions": "cudnn 0"})
    monkeypatch.setattr(_graph, "backend", lambda: be)
    monkeypatch.setattr(_graph._graph_plan, "plan_json", lambda be, plan: "")

    def prepare(m, where):
        float_io, fft = _graph._float_io(m), _graph._fft_allowed(m, {})
        # what _prepare keeps: the widest policy (TF32 allowed; FFT where it may apply)
        kept = [c for c in cands if not _graph_plan.rejection(
            be, c, float_io=float_io, allow_tf32=True, allow_fft=fft)]
        return _graph._Prepared([("spec", "graph", kept)])
    monkeypatch.setattr(eng, "_prepare", prepare)
    chose_from = []

    def first(be_, m, pools, bufs, limit, where):
        chose_from.append([c.index for _, _, ok in pools for c in ok])
        return types.SimpleNamespace(plan=None, workspace_size=0), pools[0][2][0], 0.0
    monkeypatch.setattr(eng, "_first", first)
    monkeypatch.setattr(eng, "_benchmark", first)
    return eng, chose_from


def _build(eng, m, **settings):
    offered = eng.offer(m)
    knobs = {k.id: k.default for k in offered.knobs}
    knobs.update(settings)
    db = _SpyDb()
    eng.build(m, offered, knobs, db)
    (key, _), = db.stored
    assert db.looked_up == [key]
    return {k.id: k for k in offered.knobs}, key


@pytest.mark.parametrize("graph", [lambda: _conv_graph("fprop", dtype="float32"),
                                   lambda: _conv_graph("dgrad", dtype="float32"),
                                   lambda: _conv_graph("wgrad", dtype="float32"),
                                   lambda: _conv_bias_relu("float32")],
                         ids=["fprop", "dgrad", "wgrad", "conv_bias_relu"])
def test_float_convolutions_take_fft_unless_allow_fft_is_0(monkeypatch, be, graph):
    # FLOAT wgrad too (bench/diag_wgrad_fft.py): the public graph engine declines FLOAT
    # wgrad (ranks_after_legacy), but bench_gpu builds CudnnGraphEngine directly; its
    # entries chosen under the FFT-declining default (key "[heuristic] ...") are what
    # allow_fft = 0 reads, never the new default
    eng, chose_from = _policy_engine(monkeypatch, be)
    m = match(graph())
    knobs, key = _build(eng, m)
    fft = knobs[_graph.ALLOW_FFT]
    assert (fft.default, fft.min, fft.max) == (1, 0, 1)
    assert chose_from[-1] == [1, 50]                  # FFT accepted, Winograd not
    assert key.problem == f"[heuristic fft] {m.signature}"
    _, key0 = _build(eng, m, **{_graph.ALLOW_FFT: 0})
    assert chose_from[-1] == [1]
    # the key of the earlier default (FFT declined): what allow_fft = 0 reads, and never
    # what the new default reads
    assert key0.problem == f"[heuristic] {m.signature}" != key.problem
    _, keyb = _build(eng, m, **{"global.benchmarking": 1, _graph.DETERMINISTIC: 1})
    assert keyb.problem == f"[benchmark deterministic fft] {m.signature}"


def _bn_graph(dtype):
    """Channels-last batchnorm training (no running statistics) with ``dtype`` I/O."""
    from .test_graph_ir import _t
    g = hd.Graph(io_data_type=dtype, compute_data_type=hd.DataType.FLOAT)
    per = lambda n: _t(g, n, (1, 8, 1, 1), layout=lambda d: (8, 1, 1, 1), dtype="float32")  # noqa: E731
    y, mean, inv, _, _ = g.batchnorm(_t(g, "x", (2, 8, 5, 4)), per("scale"), per("bias"),
                                     epsilon=1e-5)
    y.set_output(True).set_name("y")
    for t, n in ((mean, "mean"), (inv, "inv_variance")):
        t.set_output(True).set_name(n).set_data_type("float32")
    return g


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_batchnorm_offers_no_fft_knob_and_keeps_its_key(monkeypatch, be, dtype):
    # batchnorm has no FFT engines: no knob, and no FFT word in its perf-db key for any
    # data type (the keys written before the knob existed)
    eng, _ = _policy_engine(monkeypatch, be)
    m = match(_bn_graph(dtype))
    assert m.pattern == hd.Pattern.BN_TRAINING
    knobs, key = _build(eng, m)
    assert _graph.ALLOW_FFT not in knobs
    assert key.problem == f"[heuristic] {m.signature}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("graph", [lambda dt: _conv_graph("fprop", dtype=dt),
                                   lambda dt: _conv_graph("dgrad", dtype=dt),
                                   lambda dt: _conv_graph("wgrad", dtype=dt),
                                   _conv_bias_relu],
                         ids=["fprop", "dgrad", "wgrad", "conv_bias_relu"])
def test_half_convolutions_keep_their_default_and_decline_fft_with_allow_fft_0(
        monkeypatch, be, graph, dtype):
    eng, chose_from = _policy_engine(monkeypatch, be)
    m = match(graph(dtype))
    knobs, key = _build(eng, m)
    fft = knobs[_graph.ALLOW_FFT]
    assert (fft.default, fft.min, fft.max) == (1, 0, 1)
    assert chose_from[-1] == [1, 50, 7]               # transforms in FLOAT accumulation, as before
    assert key.problem == f"[heuristic] {m.signature}"  # the default's key, as before
    _, key0 = _build(eng, m, **{_graph.ALLOW_FFT: 0})
    assert chose_from[-1] == [1, 7]                   # FFT declined, Winograd still taken
    assert key0.problem == f"[heuristic no-fft] {m.signature}" != key.problem
    _, keyb = _build(eng, m, **{"global.benchmarking": 1, _graph.ALLOW_FFT: 0})
    assert keyb.problem == f"[benchmark no-fft] {m.signature}"


def test_with_allow_fft_0_a_half_conv_whose_configs_are_all_fft_declines(monkeypatch, be):
    eng, _ = _policy_engine(monkeypatch, be)
    m = match(_conv_graph("fprop", dtype="float16"))
    only_fft = [dataclasses.replace(_cand(be, be.NUMERICAL_NOTE_FFT, index=50, ws=64), knobs=())]
    monkeypatch.setattr(eng, "_prepare",
                        lambda m_, where: _graph._Prepared([("spec", "graph", only_fft)]))
    offered = eng.offer(m)
    with pytest.raises(hd.NotSupportedError, match="numerical policy"):
        eng.build(m, offered, {_graph.ALLOW_FFT: 0}, _SpyDb())
