"""The cuDNN graph-API engine, ``CUDNN_GRAPH_ENGINE`` (issue 11 item 1).

Each pattern becomes a cuDNN 9 operation graph (``_graph_ir``, ``_graph_lower``); cuDNN's
heuristics are asked once per problem (mode A, then FALLBACK, and B when neither has a
usable config: ``_graph_plan``), and the first config that finalizes, fits the workspace
limit and runs once on zero-filled scratch buffers becomes the execution plan
(``global.benchmarking = 1``: up to 16 of them timed on the build stream, the median of
7 samples after 3 warm-ups each, a sample one launch of a graph of 8 captured executions;
the heuristic's own choice is kept unless
another is faster by over ``_tuning.BENCH_MARGIN``).
cuDNN's legacy calls are themselves a shim that builds such a graph on every call (57-111 us
of host time); a cached plan executes in 7.6-14 us (docs/design/vendor-notes.md,
"cuDNN 9: the graph API and its host cost").

The engine declines (``NotSupportedError``, so the legacy engine runs the graph) where it
has no form for a pattern or layout (``_graph_ir.graph_spec``), where cuDNN refuses the
operation graph, where the heuristics offer no config the numerical policy accepts, and
where the loaded libcudnn lacks the backend API.

Perf db: every build stores its choice (engine global index and knob choices, e.g.
``"eng62 k2=3"``) under the problem signature, and the serialized execution plan, where
cuDNN serializes it, in a ``cudnn_plans`` directory beside the db file. A later process
rebuilds the plan from the JSON (no heuristics query or NVRTC compile) or from the engine
config, and verifies it with a trial run like any other.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time

import numpy as np

from ... import _knobs, _perfdb
from ..._errors import BadParamError, CudnnError, GpuError, KnobError, NotSupportedError
from ..._log import warn_bad_env
from ..._types import DataType
from ...patterns import Pattern
from ...runtime import GpuArray, load_vendor
from .._base import Engine, ProviderEngine, engine_id
from .._gpu._trial import Samples, medians_alike
from .. import _tuning
from .._tuning import Algorithm
from . import _fft, _graph_ir, _graph_lower, _graph_plan

__all__ = ["CUDNN_GRAPH_ENGINE", "ALLOW_TF32", "ALLOW_FFT", "DETERMINISTIC", "DISABLE_ENV",
           "disabled_by_env",
           "CudnnGraphEngine", "GraphApiEngine",
           "backend", "with_graph_engine", "ranks_after_legacy"]

log = logging.getLogger("hipdnn_async")

CUDNN_GRAPH_ENGINE = "CUDNN_GRAPH_ENGINE"
ALLOW_TF32 = "cudnn_graph.allow_tf32"
ALLOW_FFT = "cudnn_graph.allow_fft"
DETERMINISTIC = "cudnn_graph.deterministic"
_CONV = (Pattern.CONV_FPROP, Pattern.CONV_DGRAD, Pattern.CONV_WGRAD)
# every convolution pattern, fused included (where ALLOW_FFT is offered: _fft)
_ALL_CONV = _CONV + (Pattern.CONV_FPROP_BIAS_RELU,)
# "0" turns the engine off (every graph goes to the legacy engine)
DISABLE_ENV = "HIPDNN_ASYNC_CUDNN_GRAPH"
# configs timed with global.benchmarking = 1 (PyTorch's cudnn.benchmark times every config
# of heuristics + fallback; 16 covers mode A's list for the ResNet-50 convolutions)
_BENCH_CANDIDATES = 16
_NOTES = ("cuDNN 9 graph (backend) API with cached execution plans; conv fprop/dgrad/wgrad "
          "and conv+bias+ReLU/clamp with asymmetric padding and any lower clip; channels-last "
          "batchnorm training (+ReLU), backward and inference+dReLU+backward; FLOAT/HALF/"
          "BFLOAT16 I/O, FLOAT per-channel tensors. Algorithm policy: the fastest engine "
          "config the tolerance table allows, in cuDNN's heuristic order (global.benchmarking"
          " = 1: the fastest of up to 16 timed, the median of 7 runs after warm-up; the "
          "heuristic's choice is kept unless another is over 3% faster); never "
          "down-converting or reduced-precision-"
          "reduction engines; FLOAT data without TF32 tensor cores unless "
          f"'{ALLOW_TF32}' = 1 and without Winograd; every convolution (FLOAT ones measured "
          "within tolerance on the H200, wgrad through the legacy engine's FFT; HALF/BFLOAT16)"
          f" may run FFT configs unless '{ALLOW_FFT}' = 0 (no FFT for any data type: an FFT "
          "spreads a NaN/Inf input over its tile; HALF/BFLOAT16 may still take Winograd); "
          "non-deterministic engines (FLOAT reductions) allowed "
          f"unless '{DETERMINISTIC}' = 1 (Device(..., deterministic=True) sets it); "
          "plan.algorithm.reason says why a config was chosen; NaN propagates through ReLU "
          "(pointwise NAN_PROPAGATION = PROPAGATE_NAN)")


def disabled_by_env() -> bool:
    """True when ``$HIPDNN_ASYNC_CUDNN_GRAPH`` is ``0`` (the engine is off); unset, empty
    or ``1`` leave it on. Any other value is a ``RuntimeWarning`` once per process and
    value (``warn_bad_env``, naming the accepted values) and leaves the engine on."""
    raw = os.environ.get(DISABLE_ENV, "")
    word = raw.strip()
    if word in ("", "1"):
        return False
    if word == "0":
        return True
    warn_bad_env(DISABLE_ENV, raw, "0 (off) or 1 (on, the default)", "the engine stays on")
    return False


def backend():
    """The loaded backend binding (``runtime._cudnn_backend``).

    Raises
    ------
    NotSupportedError
        The binding is not built, cuDNN is not loaded, or the loaded library lacks the
        backend API (a stand-in libcudnn, a pre-8 cuDNN).
    """
    if disabled_by_env():
        raise NotSupportedError(f"{CUDNN_GRAPH_ENGINE}: turned off by {DISABLE_ENV}=0")
    try:
        from ...runtime import _cudnn_backend as be
    except ImportError as exc:
        raise NotSupportedError(f"{CUDNN_GRAPH_ENGINE}: the cuDNN backend binding is not built "
                                f"({exc}); run `pip install -e .`") from None
    ok, why = be.available()
    if not ok and be.loaded_path() is None:
        state = load_vendor("cuda")
        if not state.ok:
            raise NotSupportedError(f"{CUDNN_GRAPH_ENGINE}: {state.reason}")
        be.load(state.dnn.path, state.dnn.found_via)
        ok, why = be.available()
    if not ok:
        raise NotSupportedError(f"{CUDNN_GRAPH_ENGINE}: {why}")
    return be


def with_graph_engine(graph_engine, match, others) -> list:
    """The engines for ``match``, best first: the graph engine's offer, then ``others()``
    (the legacy engine's list; first where :func:`ranks_after_legacy`); an engine that
    declines is left out, and when every one declines the last refusal (the legacy
    engine's) is raised.

    Raises
    ------
    NotSupportedError
        No engine takes ``match``.
    """
    offered, refusals, graph = [], [], []
    try:
        graph.append(graph_engine.offer(match))
    except NotSupportedError as exc:
        log.info("%s", exc)
        refusals.append(exc)
    try:
        offered.extend(others())
    except NotSupportedError as exc:
        refusals.append(exc)
    if not offered and not graph:
        raise refusals[-1]
    return offered + graph if ranks_after_legacy(match) else graph + offered


def ranks_after_legacy(match) -> bool:
    """FLOAT weight gradients: cuDNN 9.19's graph engines for them (engine 17 and others)
    left a few elements at 1.4-2x the FLOAT tolerance's reduction bound on the H200 (the
    legacy ALGO_1 with FMA math stays inside it), so the graph engine is offered second."""
    return match.pattern == Pattern.CONV_WGRAD and _float_io(match)


class _Prepared:
    """What one problem needs across ``offer`` and ``build``: per operation-graph variant,
    the spec, the finalized graph and the accepted heuristic configs."""

    def __init__(self, variants: list):
        self.variants = variants          # [(GraphSpec, graph descriptor, [Candidate])]


class CudnnGraphEngine:
    """The graph engine of one CUDA device.

    Parameters
    ----------
    build : BuildStream
        The provider's build stream (handle, scratch buffers, trial runs).
    describe : callable
        ``describe() -> dict`` with ``device`` and ``library_versions`` (perf-db key).
    """

    name = CUDNN_GRAPH_ENGINE

    def __init__(self, build, describe):
        self._build = build
        self._describe = describe
        self._prepared: dict[str, _Prepared] = {}

    # ------------------------------------------------------------------ offer
    def offer(self, match) -> Engine:
        """The ``Engine`` record for ``match`` (knobs with their ranges).

        Raises
        ------
        NotSupportedError
            The engine declines (module docstring).
        """
        where = f"{CUDNN_GRAPH_ENGINE} ({match.pattern.name})"
        prep = self._prepare(match, where)
        knobs = [_knobs.benchmarking_knob()]
        if match.pattern in _CONV:
            sizes = [c.workspace for _, _, cands in prep.variants for c in cands
                     if c.workspace >= 0]
            if sizes:
                knobs.append(_knobs.workspace_limit_knob(min(sizes), max(sizes)))
            if _float_io(match):
                knobs.append(_knobs.Knob(ALLOW_TF32, "int64", 0, 0, 1,
                                         "Allow TF32 tensor-core engines for FLOAT data"))
        if match.pattern in _ALL_CONV:
            knobs.append(_fft.fft_knob(ALLOW_FFT, "FFT engine configs"))
        knobs.append(_knobs.Knob(DETERMINISTIC, "int64", 0, 0, 1,
                                 "Only engine configs without cuDNN's NONDETERMINISTIC note "
                                 "(bitwise-reproducible results)"))
        return Engine(engine_id(CUDNN_GRAPH_ENGINE), CUDNN_GRAPH_ENGINE, "cudnn", tuple(knobs),
                      _NOTES)

    def _prepare(self, match, where: str) -> _Prepared:
        cached = self._prepared.get(match.signature)
        if cached is not None:
            return cached
        specs = _graph_ir.graph_spec(match, where)
        be = backend()
        # the widest FFT policy (the knob's default)
        float_io, fft = _float_io(match), _fft_allowed(match, {})
        variants, refused = [], []
        for spec in specs:
            with self._build.lock:
                try:
                    graph = _graph_lower.lower(be, spec, self._build.handle())
                except Exception as exc:  # noqa: BLE001 - cuDNN refuses the graph itself
                    if not _declines(exc):
                        raise
                    refused.append(f"{spec.variant or 'graph'}: {exc}")
                    continue
                cands = _graph_plan.heuristic_candidates(
                    be, graph, lambda c: _graph_plan.rejection(be, c, float_io=float_io,
                                                               allow_tf32=True, allow_fft=fft),
                    log)
            default = [c for c in cands if not _graph_plan.rejection(
                be, c, float_io=float_io, allow_tf32=False, allow_fft=fft)]
            # TF32-only configs are kept for the knob, never offered alone (FFT-only ones
            # are offered: the default accepts them; with allow_fft = 0 the build declines)
            if default:
                variants.append((spec, graph, _graph_plan.ordered(be, cands)))
                log.info("%s%s: engine configs %s", where, f" ({spec.variant})" if spec.variant
                         else "", ", ".join(f"{c.index}{sorted(c.numerical)}" for c in cands))
            else:
                refused.append(f"{spec.variant or 'graph'}: cuDNN's heuristics offer no "
                               "engine config the numerical policy accepts (of "
                               f"{[c.index for c in cands]})")
        if not variants:
            raise NotSupportedError(f"{where}: " + "; ".join(refused))
        prep = self._prepared[match.signature] = _Prepared(variants)
        return prep

    # ------------------------------------------------------------------ build
    def build(self, match, engine, knobs, perfdb):
        """A verified ``GraphPlan`` (module docstring).

        Raises
        ------
        NotSupportedError
            No config finalizes and runs (the next engine may try).
        KnobError
            The workspace limit is below every config's workspace.
        """
        where = f"{CUDNN_GRAPH_ENGINE} ({match.pattern.name})"
        be = backend()
        prep = self._prepare(match, where)
        bench = bool(knobs.get(_knobs.BENCHMARKING, 0))
        allow_tf32 = bool(knobs.get(ALLOW_TF32, 0))
        allow_fft = _fft_allowed(match, knobs)
        deterministic = bool(knobs.get(DETERMINISTIC, 0))
        limit = knobs.get(_knobs.WORKSPACE_SIZE_LIMIT)
        float_io = _float_io(match)
        key = self._key(match, bench, allow_tf32, limit, deterministic, allow_fft, float_io)
        bufs = self._build.scratch_pack(match)
        plan = self._restore(be, match, prep, key, perfdb, bufs, limit, where)
        if plan is not None:
            plan.perfdb_hit = True
            return plan
        pools = []
        for spec, graph, cands in prep.variants:
            ok = [c for c in cands
                  if not _graph_plan.rejection(be, c, float_io=float_io, allow_tf32=allow_tf32,
                                               deterministic=deterministic,
                                               allow_fft=allow_fft)]
            pools.append((spec, graph, ok))
        if not any(ok for _, _, ok in pools):
            raise NotSupportedError(f"{where}: no engine config cuDNN's heuristics offer meets "
                                    f"the numerical policy (knobs {dict(knobs)})")
        if limit is not None and all(c.workspace > limit for _, _, ok in pools for c in ok):
            raise KnobError(f"knob '{_knobs.WORKSPACE_SIZE_LIMIT}' = {limit} is below every "
                            f"engine config's workspace for engine '{engine.name}'")
        chosen = (self._benchmark if bench else self._first)(be, match, pools, bufs, limit, where)
        plan, cand, ms = chosen
        plan.benchmarked = bench
        self._store(be, key, perfdb, plan, cand, ms)
        return plan

    def _verified(self, be, match, spec, cand, bufs, limit):
        """The plan of ``cand`` after one trial run, or the reason it is unusable."""
        with self._build.lock:
            try:
                exec_plan, ws = _graph_plan.execution_plan(be, cand.cfg, self._build.handle())
            except Exception as exc:  # noqa: BLE001
                if not _declines(exc):
                    raise
                return None, f"finalize: {exc}"
        if limit is not None and ws > limit:
            return None, f"workspace {ws} > limit {limit}"
        algorithm = cand.name(be) + (f" ({spec.variant})" if spec.variant else "")
        plan = _graph_plan.GraphPlan(be, spec, exec_plan, ws, algorithm)
        try:
            self._build.trial(match, plan, bufs)
        except Exception as exc:  # noqa: BLE001
            if not _cudnn_refuses(exc):
                raise
            return None, f"trial run: {exc}"
        plan._candidate = cand
        return plan, ""

    def _first(self, be, match, pools, bufs, limit, where):
        declined = []
        of = sum(len(cands) for _, _, cands in pools)
        rank = 0
        for spec, _graph, cands in pools:
            for cand in cands:
                rank += 1
                plan, why = self._verified(be, match, spec, cand, bufs, limit)
                if plan is not None:
                    order = [(c.name(be), None) for _, _, cs in pools for c in cs]
                    plan.algorithm = Algorithm(plan.algorithm,
                                               _graph_plan.explain(be, cand, rank=rank, of=of),
                                               order)
                    return plan, cand, 0.0
                declined.append(f"engine {cand.index}: {why}")
                log.info("%s: engine %d declined: %s", where, cand.index, why)
        raise NotSupportedError(f"{where}: no cuDNN engine config runs this graph: "
                                + "; ".join(declined[:6]))

    def _benchmark(self, be, match, pools, bufs, limit, where):
        """The config ``_tuning.fastest`` keeps among the first ``_BENCH_CANDIDATES``
        that verify, in heuristic order (so the heuristic's own choice is always timed
        and is kept unless another is faster beyond the noise), each timed by its median
        on the build stream (``BuildStream.time_runs``; all alike, ``medians_alike``). A
        config cuDNN refuses while it is timed is declined like one refused at its trial
        run, and the plan's ``algorithm.reason`` names it with cuDNN's words."""
        _perfdb.count("benchmarks_run")
        verified, declined = [], []
        for spec, _graph, cands in pools:
            for cand in cands:
                if len(verified) >= _BENCH_CANDIDATES:
                    break
                plan, why = self._verified(be, match, spec, cand, bufs, limit)
                if plan is None:
                    declined.append(f"engine {cand.index}: {why}")
                    continue
                verified.append((plan, cand))
        times, refusals = medians_alike(
            [lambda capture, p=p: self._time(p, bufs, capture=capture) for p, _ in verified],
            refused=_cudnn_refuses)
        timed = [(t, p, c) for t, (p, c) in zip(times, verified) if t is not None]
        declined += [f"engine {c.index}: refused while timed: {refusals[i]}"
                     for i, (t, (_, c)) in enumerate(zip(times, verified)) if t is None]
        if not timed:
            raise NotSupportedError(f"{where}: no cuDNN engine config runs this graph: "
                                    + "; ".join(declined[:6]))
        pick = _tuning.fastest([t[0] for t in timed])
        ms, plan, cand = timed[pick]
        trials = [(str(p.algorithm), t) for t, p, _ in timed]
        # the heuristic's choice is the first config that passed its trial run (a build
        # without benchmarking runs it); where cuDNN refused it while timed, the first
        # timed is another config
        first = ("the heuristic's choice" if times[0] is not None else
                 f"the first config timed in heuristic order (engine {timed[0][2].index})")
        reason = _graph_plan.explain(be, cand, rank=0, of=0, timed=len(timed), ms=ms,
                                     kept_first=pick == 0, first_ms=timed[0][0], first=first)
        if refusals:
            reason += "; refused while timed: " + ", ".join(
                f"engine {verified[i][1].index} ({exc})" for i, exc in sorted(refusals.items()))
        plan.algorithm = Algorithm(plan.algorithm, reason, trials)
        log.info("%s: benchmarked %d configs (%s), kept %s %.4f ms", where, len(timed),
                 ", ".join(f"{n} {t:.4f}" for n, t in trials), plan.algorithm, ms)
        return plan, cand, ms

    def _time(self, plan, bufs, *, capture: bool = True) -> Samples:
        """Milliseconds of one execution of ``plan`` on the build stream: warm-up runs,
        then timed samples (``BuildStream.time_runs``: launches of a captured graph of
        executions unless ``capture`` is False), with the workspace the plan needs."""
        b = self._build
        ws = GpuArray((max(plan.workspace_size, 1),), np.uint8, (1,), b.context, b.spec)
        ptrs = {r: a.ptr for r, a in bufs.items()}
        with b.lock:
            handle = b.handle()
            pack = plan.pointers(ptrs, ws.ptr)
            cudnn_ws = plan._segments.pointer(ws.ptr, "cudnn") if plan._cudnn_ws else 0
            return b.time_runs(lambda: plan._be.execute(handle, plan.plan, plan._uids, pack,
                                                        cudnn_ws), capture=capture)

    # ------------------------------------------------------------------ perf db
    def _key(self, match, bench: bool, allow_tf32: bool, limit,
             deterministic: bool = False, allow_fft: bool = False,
             float_io: bool = True) -> _perfdb.PerfKey:
        """The perf-db key: the problem prefixed with the policy that narrowed the configs
        (``"[heuristic fft] ..."``), so that a choice made under one policy is never taken
        under another. ``allow_fft``: FFT accepted, named as ``_fft.key_word`` says (FLOAT
        convolutions: ``fft``, the default since FFT was measured, whose earlier
        FFT-declining keys carry no word; HALF / BFLOAT16: ``no-fft`` for
        ``cudnn_graph.allow_fft = 0``, their default keys unchanged; batchnorm: none)."""
        desc = self._describe()
        fft = _fft.key_word(conv=match.pattern in _ALL_CONV, float_io=float_io,
                            allow_fft=allow_fft)
        policy = (("benchmark" if bench else "heuristic") + (" tf32" if allow_tf32 else "")
                  + (" deterministic" if deterministic else "") + (f" {fft}" if fft else ""))
        return _perfdb.PerfKey(provider="cudnn", engine=CUDNN_GRAPH_ENGINE,
                               library_versions=desc["library_versions"], device=desc["device"],
                               problem=f"[{policy}] {match.signature}",
                               workspace_limit=int(limit) if limit is not None else 0)

    def _store(self, be, key, perfdb, plan, cand, ms: float) -> None:
        name = cand.name(be)
        perfdb.store(key, _perfdb.PerfRecord(algorithm=name, time_ms=float(ms),
                                             workspace_bytes=int(plan.workspace_size),
                                             measured_at=time.time()))
        path = _json_path(perfdb, key, name)
        text = _graph_plan.plan_json(be, plan.plan)
        if path and text:
            _write_atomic(path, text)

    def _restore(self, be, match, prep, key, perfdb, bufs, limit, where):
        """The plan the perf db names for ``key`` (from its JSON, else its engine config),
        verified by a trial run; None when there is none or it no longer works."""
        record = perfdb.lookup(key)
        if record is None:
            return None
        try:
            _graph_plan.parse_name(record.algorithm)
        except ValueError:
            log.warning("%s: perf db entry %r is not an engine config; building anew", where,
                        record.algorithm)
            return None
        path = _json_path(perfdb, key, record.algorithm)
        for spec, graph, cands in prep.variants:
            for source in ("json", "config"):
                try:
                    plan = self._rebuild(be, match, spec, graph, record.algorithm, source,
                                         path, bufs, limit)
                except Exception as exc:  # noqa: BLE001 - any failure means: build anew
                    log.info("%s: perf db %s of %s unusable (%s)", where, source,
                             record.algorithm, exc)
                    continue
                if plan is not None:
                    return plan
        log.warning("%s: perf db entry %s no longer builds; tuning again", where,
                    record.algorithm)
        return None

    def _rebuild(self, be, match, spec, graph, name, source, path, bufs, limit):
        with self._build.lock:
            handle = self._build.handle()
            if source == "json":
                if not path or not os.path.isfile(path):
                    return None
                with open(path, encoding="utf-8") as f:
                    exec_plan, ws = _graph_plan.plan_from_json(be, f.read(), handle)
            else:
                cfg = _graph_plan.config_from_name(be, graph, name)
                exec_plan, ws = _graph_plan.execution_plan(be, cfg, handle)
        if limit is not None and ws > limit:
            return None
        algorithm = Algorithm(name + (f" ({spec.variant})" if spec.variant else ""),
                              "the perf db's choice for this problem (rebuilt from its "
                              + ("serialized plan)" if source == "json" else "engine config)"))
        plan = _graph_plan.GraphPlan(be, spec, exec_plan, ws, algorithm)
        self._build.trial(match, plan, bufs)
        return plan


def _float_io(match) -> bool:
    return any(t.data_type == DataType.FLOAT for r, t in match.tensors.items()
               if r in ("x", "y", "dx", "dy", "w", "dw"))


def _fft_allowed(match, knobs) -> bool:
    """Whether FFT-noted configs may be chosen under ``knobs`` (``_fft.allowed``: a
    convolution's ``cudnn_graph.allow_fft``, default 1; batchnorm has no FFT configs)."""
    return _fft.allowed(knobs, ALLOW_FFT, conv=match.pattern in _ALL_CONV)


def _declines(exc: BaseException) -> bool:
    """True for the cuDNN failures that mean "this config / graph cannot be used":
    NOT_SUPPORTED*, BAD_PARAM* (at build, the parameters are ours) and INTERNAL_ERROR*
    (some engines' finalize); EXECUTION_FAILED and CUDA errors propagate."""
    if isinstance(exc, (NotSupportedError, BadParamError)):
        return True
    # named by cuDNN's status table (runtime._cudnn.STATUS), not by status arithmetic
    return isinstance(exc, CudnnError) and (exc.status_name or "").startswith(
        "CUDNN_STATUS_INTERNAL_ERROR")


def _cudnn_refuses(exc: BaseException) -> bool:
    """True for cuDNN refusing a config when it runs (its trial run, or while it is timed;
    ``_declines``); a failure of the GPU runtime there (a scratch memset, events, graph
    launches: a ``GpuError``, also one that is a ``NotSupportedError``) is not about the
    config and propagates."""
    return _declines(exc) and not isinstance(exc, GpuError)


def _json_path(perfdb, key, name: str) -> str | None:
    """Where the serialized plan of (key, config) lives: ``cudnn_plans/<sha1>.json`` beside
    the perf db file; None for an in-memory db."""
    path = getattr(perfdb, "path", None)
    if not path or path == ":memory:" or getattr(perfdb, "in_memory", False):
        return None
    digest = hashlib.sha1("\n".join((key.library_versions, key.device, key.problem,
                                     str(key.workspace_limit), name)).encode()).hexdigest()
    return os.path.join(os.path.dirname(path), "cudnn_plans", digest + ".json")


def _write_atomic(path: str, text: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only location only costs the next process a compile
        log.info("cannot keep the serialized cuDNN plan at %s: %s", path, exc)


class GraphApiEngine(ProviderEngine):
    """``CUDNN_GRAPH_ENGINE`` in ``CudnnProvider.ENGINES`` (ranked first): see the module
    docstring. FLOAT weight gradients are declined (:func:`ranks_after_legacy`), so the
    legacy engine runs them."""

    name = CUDNN_GRAPH_ENGINE
    notes = _NOTES

    def __init__(self, provider):
        super().__init__(provider)
        self._impl = CudnnGraphEngine(provider._build, provider.describe)

    def knobs(self, match):
        if ranks_after_legacy(match):
            raise NotSupportedError(f"{CUDNN_GRAPH_ENGINE} ({match.pattern.name}): FLOAT weight "
                                    "gradients stay on the legacy engine (accuracy, "
                                    "ranks_after_legacy)")
        return self._impl.offer(match).knobs

    def build(self, match, engine, knobs, perfdb):
        return self._impl.build(match, engine, knobs, perfdb)
