"""Engine configs, execution plans and the plan that runs them (cuDNN graph engine).

- :func:`heuristic_candidates`: the engine configs of cuDNN's heuristics for an operation
  graph (mode A; B, then FALLBACK when A yields nothing usable), ranked best first, each
  with its engine's global index, numerical and behaviour notes and workspace size.
- :func:`rejection`: the numerical policy, which is the tolerance table's: never
  DOWN_CONVERT_INPUTS nor REDUCED_PRECISION_REDUCTION (our accumulation is at least
  FLOAT); for FLOAT I/O no TENSOR_CORE (that is TF32 for FLOAT data, as PyTorch reads the
  note) unless the ``cudnn_graph.allow_tf32`` knob allows it, and no Winograd (never
  measured within our bound: PyTorch's Winograd FLOAT 3x3 weight gradient was at 2.02x
  it on the H200). FFT-noted configs are accepted for every convolution, every data
  type, unless ``cudnn_graph.allow_fft`` is 0, which declines them (``_fft``: an FFT
  spreads a NaN or Inf input over its tile). FLOAT fprop and dgrad were measured with
  bench/diag_fft.py on the H200 (cuDNN 9.19), every ResNet-50 fp32 NCHW fprop and dgrad
  shape at batch 32, inputs U(-1, 1) and a wide-range set (magnitudes 2^-8..2^8): where
  FFT configs were chosen (res2 3x3 dgrad: eng50; res3 3x3 fprop: eng3 k11=2, dgrad:
  eng50) their max |got - float64| was at most 0.19 of our bound
  (tests/oracle/_cases.reduction_tol; 0.03 with the wide set), below the 0.41-0.44 of
  the direct kernels they replace, at 0.19-0.23 ms instead of 0.43-0.46 ms; every other
  shape chose the same config either way. PyTorch runs cuDNN's FFT on these shapes by
  default. FLOAT weight gradients were measured with bench/diag_wgrad_fft.py (same
  machine and versions, every ResNet-50 wgrad shape) through the legacy engine's FFT
  algorithm (cuDNN 9's legacy calls run this API's engines; the public graph engine
  declines FLOAT wgrad, ``_graph.ranks_after_legacy``, and only bench_gpu builds it
  there): every FFT result at most 0.05 of our bound (tests/oracle/_cases.gpu_wgrad_tol;
  0.01 with the wide set) against up to 0.33 for the direct ALGO_0 / ALGO_1, FFT at
  0.15-0.16 ms against 0.32-0.36 ms where it was chosen (res3 / res4 3x3: ``_fft``).
  Engines with the NONDETERMINISTIC
  note only where ``cudnn_graph.deterministic`` is 0 (their reductions are FLOAT: within
  tolerance, not bitwise reproducible).
- :func:`ordered`: the accepted configs in cuDNN's heuristic order (mode A ranks by
  predicted speed): the default choice is the fastest the policy allows, as PyTorch's
  heuristic choice is; :func:`explain` says why a config was chosen
  (``plan.algorithm.reason``).
- :func:`execution_plan` / :func:`plan_from_json` / :func:`config_from_name`: a finalized
  execution plan from a config, from its serialized JSON, or from an engine index and knob
  choices (what the perf db keeps).
- :class:`GraphPlan`: the provider plan: its ``run`` binds the variant pack (pattern
  buffers, workspace segments, host scalars) and calls ``cudnnBackendExecute`` on the
  stream's cuDNN handle.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from ..._errors import VariantPackError
from ..._log import warn_bad_env
from ...runtime._stream_resources import PackSpec
from .._base import ProviderPlan
from .._gpu._workspace import Segments
from .._tuning import BENCH_MARGIN as _BENCH_MARGIN
from . import _plans
from ._graph_lower import BYTE_ALIGNMENT

__all__ = ["Candidate", "heuristic_candidates", "heuristic_order", "rejection", "ordered",
           "execution_plan", "plan_from_json", "config_from_name", "GraphPlan", "parse_name",
           "LAUNCH_GRAPHS_ENV", "GRAPH_AFTER", "graph_after"]


_KNOB_TYPE_COUNTS = 44     # CUDNN_KNOB_TYPE_COUNTS of cuDNN 9.19 (cudnn_graph.h)

# A binding's execution becomes a CUDA graph launch after this many direct executions of
# its variant pack (``GraphLaunch``'s ``graph_after``): the first loads the engine's
# kernels, and a binding used only once or twice never pays the capture (~10-50 us).
GRAPH_AFTER = 2
# "0": every execution is a cudnnBackendExecute (no CUDA graph per binding)
LAUNCH_GRAPHS_ENV = "HIPDNN_ASYNC_LAUNCH_GRAPHS"


def graph_after() -> int:
    """``GraphLaunch``'s ``graph_after`` for new bindings: :data:`GRAPH_AFTER`, or 0 (never
    a graph) when ``$HIPDNN_ASYNC_LAUNCH_GRAPHS`` is ``0``; any value but unset, empty,
    ``0`` or ``1`` is a ``RuntimeWarning`` once per value and leaves graphs on."""
    raw = os.environ.get(LAUNCH_GRAPHS_ENV, "")
    word = raw.strip()
    if word == "0":
        return 0
    if word not in ("", "1"):
        warn_bad_env(LAUNCH_GRAPHS_ENV, raw, "0 (off) or 1 (on, the default)",
                     "graph launches stay on")
    return GRAPH_AFTER


@dataclass
class Candidate:
    """One engine config: ``cfg`` (descriptor), the engine's ``index`` (global index),
    ``numerical`` / ``behavior`` notes, ``workspace`` bytes (-1: not reported) and the
    heuristics ``mode`` it came from."""

    cfg: object
    index: int
    numerical: frozenset
    behavior: frozenset
    workspace: int
    mode: str
    knobs: tuple | None = None      # ((knob type, value), ...), read on demand

    def knob_choices(self, be) -> tuple:
        """The config's ((knob type, value), ...), sorted: what makes its name, and so the
        perf db's record, name this exact config (a config rebuilt from an engine index
        without its knobs is another, possibly much slower, kernel)."""
        if self.knobs is None:
            try:   # the count first, as for heuristics results
                n = self.cfg.count(be.ATTR_ENGINECFG_KNOB_CHOICES, be.TYPE_BACKEND_DESCRIPTOR)
            except Exception:  # noqa: BLE001
                n = 0
            # a count of 0 is not proof of no knobs (the H200 run named every config
            # without any): ask with cudnn-frontend's full array, as its getTag() does
            n = n if n > 0 else _KNOB_TYPE_COUNTS
            made = self.cfg.get_descriptors(be.ATTR_ENGINECFG_KNOB_CHOICES,
                                            be.BACKEND_KNOB_CHOICE_DESCRIPTOR, n)
            self.knobs = tuple(sorted(
                (k.get_enums(be.ATTR_KNOB_CHOICE_KNOB_TYPE, be.TYPE_KNOB_TYPE, 1)[0],
                 k.get_int64(be.ATTR_KNOB_CHOICE_KNOB_VALUE)[0]) for k in made))
        return self.knobs

    def name(self, be) -> str:
        """``"eng62 k2=3 k11=0"``: engine global index and knob choices (the perf-db form)."""
        return " ".join([f"eng{self.index}"] + [f"k{t}={v}" for t, v in self.knob_choices(be)])


def parse_name(name: str) -> tuple[int, tuple]:
    """(engine index, ((knob type, value), ...)) of a :meth:`Candidate.name`.

    Raises
    ------
    ValueError
        Not of that form.
    """
    parts = name.split()
    if not parts or not parts[0].startswith("eng"):
        raise ValueError(f"not an engine config name: {name!r}")
    knobs = []
    for p in parts[1:]:
        t, _, v = p[1:].partition("=")
        if not p.startswith("k") or not _:
            raise ValueError(f"not an engine config name: {name!r}")
        knobs.append((int(t), int(v)))
    return int(parts[0][3:]), tuple(knobs)


def _inspect(be, cfg, mode: str) -> Candidate:
    eng = cfg.get_descriptors(be.ATTR_ENGINECFG_ENGINE, be.BACKEND_ENGINE_DESCRIPTOR, 1)[0]
    index = eng.get_int64(be.ATTR_ENGINE_GLOBAL_INDEX)[0]
    numerical = frozenset(eng.get_enums(be.ATTR_ENGINE_NUMERICAL_NOTE, be.TYPE_NUMERICAL_NOTE,
                                        be.NUMERICAL_NOTE_TYPE_COUNT))
    behavior = frozenset(eng.get_enums(be.ATTR_ENGINE_BEHAVIOR_NOTE, be.TYPE_BEHAVIOR_NOTE,
                                       be.BEHAVIOR_NOTE_TYPE_COUNT))
    try:
        workspace = cfg.get_int64(be.ATTR_ENGINECFG_WORKSPACE_SIZE)[0]
    except Exception:  # noqa: BLE001 - before 9.2 the size comes with the plan
        workspace = -1
    return Candidate(cfg, index, numerical, behavior, workspace, mode)


def _query(be, graph, mode: int):
    heur = be.Descriptor(be.BACKEND_ENGINEHEUR_DESCRIPTOR)
    heur.set_descriptors(be.ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
    heur.set_enum(be.ATTR_ENGINEHEUR_MODE, be.TYPE_HEUR_MODE, mode)
    heur.finalize()
    n = heur.count(be.ATTR_ENGINEHEUR_RESULTS, be.TYPE_BACKEND_DESCRIPTOR)
    if n <= 0:
        return []
    return heur.get_descriptors(be.ATTR_ENGINEHEUR_RESULTS, be.BACKEND_ENGINECFG_DESCRIPTOR, n)


def heuristic_candidates(be, graph, accept, log=None) -> list[Candidate]:
    """The accepted configs of heuristics modes A and FALLBACK (B when neither has one),
    in cuDNN's order, each engine once; ``accept(candidate) -> reason or None``. A mode
    whose query itself fails (NOT_SUPPORTED) is skipped."""
    seen, out = set(), []
    for label, mode in (("A", be.HEUR_MODE_A), ("FALLBACK", be.HEUR_MODE_FALLBACK),
                        ("B", be.HEUR_MODE_B)):
        if label == "B" and out:
            break
        try:
            cfgs = _query(be, graph, mode)
        except Exception as exc:  # noqa: BLE001 - a mode the library refuses is skipped
            if log is not None:
                log.info("cuDNN heuristics mode %s: %s", label, exc)
            continue
        for cfg in cfgs:
            c = _inspect(be, cfg, label)
            why = accept(c)
            if why:
                if log is not None:
                    log.debug("engine %d (mode %s) rejected: %s", c.index, label, why)
                continue
            if c.index not in seen:
                seen.add(c.index)
                out.append(c)
    return out


def heuristic_order(be, graph, mode_label: str, *, float_io: bool) -> list[str]:
    """One heuristics mode's configs for ``graph`` in cuDNN's order, as short strings
    (``"eng25"``; ``"eng9!tf32"`` where the default numerical policy rejects it, with the
    first word of the reason), for diagnostics (bench_gpu). ``mode_label``: "A", "B" or
    "FALLBACK"."""
    mode = {"A": be.HEUR_MODE_A, "B": be.HEUR_MODE_B, "FALLBACK": be.HEUR_MODE_FALLBACK}[mode_label]
    out = []
    for cfg in _query(be, graph, mode):
        c = _inspect(be, cfg, mode_label)
        why = rejection(be, c, float_io=float_io, allow_tf32=False)
        tag = "" if why is None else "!" + {"down-converts": "downconv", "reduces": "rpr",
                                            "uses": "tf32",
                                            "Winograd": "winograd"}.get(why.split()[0], "x")
        out.append(f"eng{c.index}{tag}")
    return out


_WINOGRAD_NOTES = ("NUMERICAL_NOTE_WINOGRAD", "NUMERICAL_NOTE_WINOGRAD_TILE_4x4",
                   "NUMERICAL_NOTE_WINOGRAD_TILE_6x6", "NUMERICAL_NOTE_WINOGRAD_TILE_13x13")


def rejection(be, c: Candidate, *, float_io: bool, allow_tf32: bool,
              deterministic: bool = False, allow_fft: bool = True) -> str | None:
    """Why the numerical policy (module docstring) rejects ``c``, or None.

    ``allow_fft``: whether FFT-noted configs are accepted, for every data type and
    convolution direction (knob ``cudnn_graph.allow_fft``, default 1: ``_fft.allowed``)."""
    n = c.numerical
    if deterministic and be.NUMERICAL_NOTE_NONDETERMINISTIC in n:
        return "not deterministic (knob cudnn_graph.deterministic = 1)"
    if be.NUMERICAL_NOTE_DOWN_CONVERT_INPUTS in n and not (float_io and allow_tf32):
        return "down-converts its inputs"
    if be.NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION in n:
        return "reduces in reduced precision"
    if float_io and not allow_tf32 and be.NUMERICAL_NOTE_TENSOR_CORE in n:
        return "uses tensor cores (TF32) on FLOAT data"
    if float_io and n & {getattr(be, note) for note in _WINOGRAD_NOTES}:
        return "Winograd transform on FLOAT data (not measured within the FLOAT tolerance)"
    if not allow_fft and be.NUMERICAL_NOTE_FFT in n:
        return "FFT transform (knob cudnn_graph.allow_fft = 0)"
    return None


def ordered(be, candidates: list) -> list:
    """The candidates in cuDNN's heuristic order (predicted fastest first): the policy has
    already removed what is outside tolerance, and determinism is asked for with a knob,
    so nothing is moved down."""
    return list(candidates)


# (notes, word): a word where any of its notes is present (a Winograd engine may carry
# only its tile's note)
_NOTE_WORDS = ((("NUMERICAL_NOTE_TENSOR_CORE",), "tensor cores"),
               (("NUMERICAL_NOTE_NONDETERMINISTIC",), "not deterministic"),
               (_WINOGRAD_NOTES, "Winograd"), (("NUMERICAL_NOTE_FFT",), "FFT"))


def describe_notes(be, c: Candidate) -> str:
    """The numerical notes of ``c`` in words (``"tensor cores, deterministic"``)."""
    words = [w for notes, w in _NOTE_WORDS
             if any(getattr(be, note, None) in c.numerical for note in notes)]
    if "not deterministic" not in words:
        words.append("deterministic")
    return ", ".join(words)


def explain(be, c: Candidate, *, rank: int, of: int, timed: int = 0, ms: float = 0.0,
            kept_first: bool = False, first_ms: float | None = None,
            first: str = "the heuristic's choice") -> str:
    """Why ``c`` was chosen, for ``plan.algorithm.reason``: cuDNN's heuristic rank among
    the configs the policy accepts (or the benchmark: how many were timed, the median,
    and whether the first config timed, ``first``, was kept), and its numerical notes."""
    if timed:
        how = f"fastest of {timed} configs timed ({ms:.4f} ms median)"
        if kept_first and timed > 1:
            how = (f"{first}, kept: none of the {timed} configs timed was "
                   f"faster by over {int(round(_BENCH_MARGIN * 100))}% ({ms:.4f} ms median)")
        elif first_ms is not None and timed > 1:
            how += f"; {first} took {first_ms:.4f} ms"
    else:
        how = (f"cuDNN heuristics mode {c.mode}, rank {rank} of the {of} configs the "
               "numerical policy accepts")
    return f"{how}; {describe_notes(be, c)}"


def execution_plan(be, cfg, handle: int):
    """(finalized EXECUTION_PLAN descriptor, its workspace bytes) of engine config ``cfg``."""
    plan = be.Descriptor(be.BACKEND_EXECUTION_PLAN_DESCRIPTOR)
    plan.set_handle(be.ATTR_EXECUTION_PLAN_HANDLE, handle)
    plan.set_descriptors(be.ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg)
    plan.finalize()
    return plan, plan.get_int64(be.ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)[0]


def plan_from_json(be, text: str, handle: int):
    """(plan, workspace bytes) deserialized from ``EXECUTION_PLAN_JSON_REPRESENTATION``
    (cudnn-frontend's ``loadFromJson`` sequence: JSON, handle, finalize)."""
    plan = be.Descriptor(be.BACKEND_EXECUTION_PLAN_DESCRIPTOR)
    plan.set_chars(be.ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, text.encode())
    plan.set_handle(be.ATTR_EXECUTION_PLAN_HANDLE, handle)
    plan.finalize()
    return plan, plan.get_int64(be.ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)[0]


def plan_json(be, plan) -> str:
    """The serialized plan, or "" where the engine does not serialize."""
    try:
        return plan.get_chars(be.ATTR_EXECUTION_PLAN_JSON_REPRESENTATION).decode()
    except Exception:  # noqa: BLE001 - not every engine serializes
        return ""


def config_from_name(be, graph, name: str):
    """An ENGINECFG rebuilt from an engine index and knob choices (cudnn-frontend's
    ``create_engine`` / ``set_knob_choices`` / ``create_engine_config``)."""
    index, knobs = parse_name(name)
    eng = be.Descriptor(be.BACKEND_ENGINE_DESCRIPTOR)
    eng.set_descriptors(be.ATTR_ENGINE_OPERATION_GRAPH, graph)
    eng.set_int64(be.ATTR_ENGINE_GLOBAL_INDEX, index)
    eng.finalize()
    choices = []
    for t, v in knobs:
        k = be.Descriptor(be.BACKEND_KNOB_CHOICE_DESCRIPTOR)
        k.set_enum(be.ATTR_KNOB_CHOICE_KNOB_TYPE, be.TYPE_KNOB_TYPE, t)
        k.set_int64(be.ATTR_KNOB_CHOICE_KNOB_VALUE, v)
        k.finalize()
        choices.append(k)
    cfg = be.Descriptor(be.BACKEND_ENGINECFG_DESCRIPTOR)
    cfg.set_descriptors(be.ATTR_ENGINECFG_ENGINE, eng)
    if choices:
        cfg.set_descriptors(be.ATTR_ENGINECFG_KNOB_CHOICES, choices)
    cfg.finalize()
    return cfg


class GraphPlan(ProviderPlan):
    """An execution plan of the cuDNN graph engine, bound to a pattern's roles.

    Parameters
    ----------
    be : module
        The backend binding.
    spec : GraphSpec
        What the variant pack holds (roles, workspace segments, host scalars).
    plan : Descriptor
        The finalized execution plan.
    cudnn_workspace : int
        The plan's own workspace bytes.
    algorithm : str
        ``"eng<index> k<type>=<value> ..."`` (plus the variant, e.g. the dReLU type).
    """

    def __init__(self, be, spec, plan, cudnn_workspace: int, algorithm: str):
        self._be = be
        self.spec = spec
        self.plan = plan
        self.algorithm = algorithm
        seg = Segments()
        seg.add("cudnn", cudnn_workspace)
        for name, nbytes in spec.segments:
            seg.add(name, nbytes)
        self._segments = seg
        # exactly cuDNN's size when the plan has no segments of its own (the workspace
        # knob's range is cuDNN's sizes)
        self.workspace_size = seg.size if spec.segments else int(cudnn_workspace)
        self._cudnn_ws = int(cudnn_workspace)
        pack = spec.pack
        self._uids = tuple(t.uid for t in pack)
        # by-value scalars: host float32 buffers that live as long as the plan
        self._host = {t.uid: np.array([t.binding[1]], np.float32) for t in pack
                      if t.binding[0] == "scalar"}
        entries = [(t.uid, t.binding[0], t.binding[1], t.name) for t in pack]
        # per pack entry: (role or None, the pointer or workspace offset of a non-role,
        # tensor name), and which entries are offsets into the workspace (an empty
        # segment has no pointer: 0)
        self._slots = tuple(
            (what, 0, name) if kind == "role"
            else (None, seg.offset(what) if seg.nbytes(what) else 0, name) if kind == "segment"
            else (None, self._host[uid].ctypes.data, name)
            for uid, kind, what, name in entries)
        self._in_ws = tuple(kind == "segment" and bool(seg.nbytes(what))
                            for _uid, kind, what, _name in entries)
        self._plan_offset = seg.offset("cudnn") if self._cudnn_ws else None
        # cuDNN does not promise that one plan may execute on two streams at once
        # (PyTorch keeps its plans thread-local); launches of this plan take turns.
        # (the backend's PlanLock: GraphLaunch takes it in C, with no Python call)
        self._lock = be.PlanLock() if hasattr(be, "PlanLock") else threading.Lock()

    def pack(self, buffers, workspace=None) -> PackSpec:
        """The variant pack for ``buffers`` (role -> pointer) and ``workspace`` (the
        caller's pointer, or None for the stream's own): user buffers and host scalars
        as pointers, the plan's own segments as offsets into the workspace.

        Raises
        ------
        VariantPackError
            A buffer is not aligned as the plan was built for.
        """
        ptrs = []
        for role, value, name in self._slots:
            if role is not None:
                value = buffers[role]
                if value % BYTE_ALIGNMENT:
                    raise VariantPackError(
                        f"execute: tensor '{name}' ({role}) at {value:#x} is not "
                        f"{BYTE_ALIGNMENT}-byte aligned, as the cuDNN graph plan was built "
                        "for; pass an aligned buffer or build with engine='CUDNN_LEGACY_ENGINE'")
            ptrs.append(value)
        return PackSpec(_plans.RESOURCE_KEY, "cuDNN plans", ptrs, self._in_ws,
                        workspace=workspace, workspace_size=self.workspace_size,
                        plan_offset=self._plan_offset)

    def pointers(self, buffers, ws: int) -> list:
        """The variant pack's pointers, in uid order, for ``buffers`` (role -> pointer)
        and a workspace at ``ws``."""
        return self.pack(buffers).at(ws)

    def launcher(self, buffers, workspace, counter=None, label=None):
        """The submit path's work-item function for these buffers: a ``GraphLaunch``
        (``runtime._cudnn_backend``), whose variant pack is built on its first launch on a
        stream and reused until the stream or its workspace changes, so each execution is
        one ``cudnnBackendExecute``, and from the third on one launch of a CUDA graph
        captured from it (:func:`graph_after`). The pack's pointers are resolved here, once
        (alignment checked): the launch completes them from the stream's resources
        (``runtime.PackSpec``) and calls nothing in this provider.
        ``counter`` (a ``runtime.ExecCounter``) is bumped in C per execution. ``label``
        (the execution plan's, e.g. ``"plan CONV_FPROP (graph 'conv1', engine
        CUDNN_GRAPH_ENGINE)"``; default: this plan's engine config) starts the message of
        a failed execution's error, before the failing call.

        Raises
        ------
        VariantPackError
            A buffer is not aligned as the plan was built for.
        """
        pack = self.pack(buffers, workspace)   # alignment checked before anything is enqueued
        if label is None:
            label = f"cuDNN graph plan {self.algorithm!s}"
        return self._be.GraphLaunch(self.plan, self._uids, pack, self._lock, counter,
                                    graph_after(), label)

    def run(self, buffers, workspace) -> None:
        res, handle = _plans.handle_for_launch()
        ws = res.workspace(workspace, self.workspace_size) if self.workspace_size else 0
        ptrs = self.pointers(buffers, ws)
        cudnn_ws = self._segments.pointer(ws, "cudnn") if self._cudnn_ws else 0
        with self._lock:
            self._be.execute(handle, self.plan, self._uids, ptrs, cudnn_ws)

