"""The MIOpen provider: one engine, ``MIOPEN_ENGINE``, over MIOpen's C API on HIP streams.

The nine patterns map as hipDNN's MIOpen provider maps them (``_plans.py``). Everything a
plan needs is decided at build, once per problem: the convolution's solution (the first
immediate-mode solution within the workspace limit, or with ``global.benchmarking = 1``
the fastest one of MIOpen's exhaustive Find 2.0 search, remembered in our perf db under
the device's gcnArchName and compute units and the MIOpen and HIP versions, and in
MIOpen's own user databases), compiled on every stream's handle; a fusion plan compiled
on every stream's handle. An execution only runs what was prepared.

Knobs (the seed's MIOpen plugin table): ``global.benchmarking`` for every pattern;
``global.workspace_size_limit`` for the single-node convolutions, its range [min, max]
over MIOpen's solutions for the problem, default max, enforced when choosing (below the
minimum: ``KnobError`` at build). For batchnorm, benchmarking sets the handle's tuning
policy to ``miopenTuningPolicySearch`` for the build's trial run (MIOpen >= 3.5; it has
no effect before).
"""
from __future__ import annotations

import contextlib
import logging
import math
import os

import numpy as np

from ... import _knobs
from ..._errors import DeviceError, MiopenError, NotSupportedError
from ..._layout import packed_strides
from ..._types import numpy_dtype
from ...patterns import Pattern
from ...runtime import GpuArray, _miopen, context_for
from .. import _tuning
from .._base import Provider, ProviderEngine, ProviderPlan
from .._gpu._bind import GpuTarget, bind_workspace, make_binder
from .._gpu._launch import StreamNeeds
from .._gpu._trial import BuildStream
from .._gpu._vendor import open_vendor
from . import _plans
from ._descriptors import (activation, channel_descriptor, conv_setup, packed_layout,
                           packed_like, tensor_descriptor)

__all__ = ["MiopenProvider", "MiopenEngine", "MIOPEN_ENGINE_NAME"]

log = logging.getLogger("hipdnn_async")

MIOPEN_ENGINE_NAME = "MIOPEN_ENGINE"
_CONV = (Pattern.CONV_FPROP, Pattern.CONV_DGRAD, Pattern.CONV_WGRAD)
_ALGO_NAMES = {_miopen.ALGO_GEMM: "GEMM", _miopen.ALGO_DIRECT: "Direct", _miopen.ALGO_FFT: "FFT",
               _miopen.ALGO_WINOGRAD: "Winograd", _miopen.ALGO_IMPLICIT_GEMM: "ImplicitGEMM"}
_CHANNEL_ROLES = ("scale", "bias", "mean", "variance", "inv_variance", "dscale", "dbias",
                  "prev_running_mean", "prev_running_variance", "next_running_mean",
                  "next_running_variance")


@contextlib.contextmanager
def _at_build():
    """MIOpen errors as a build reports them: a BadParm / InvalidValue means "this engine
    cannot take the graph" (a NotSupportedError naming the call, so the next engine may
    try); any other failure propagates as it is."""
    try:
        yield
    except MiopenError as exc:
        built = exc.at_build()
        if built is exc:
            raise
        raise built from exc


def _hip_runtimes_mapped() -> list[str]:
    """The distinct libamdhip64 files mapped into this process (Linux ``/proc/self/maps``;
    [] where it cannot be read). MIOpen must run on the HIP runtime instance we loaded
    (docs/design/vendor-notes.md,
    "MIOpen: library, handle and stream")."""
    paths = set()
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                path = line.rstrip("\n").split(None, 5)[-1] if line.count(" ") >= 5 else ""
                if os.path.basename(path).startswith("libamdhip64.so"):
                    paths.add(os.path.realpath(path))
    except OSError:
        return []
    return sorted(paths)


class MiopenEngine(ProviderEngine):
    """``MIOPEN_ENGINE``: the nine patterns through MIOpen."""

    name = MIOPEN_ENGINE_NAME
    notes = ("MIOpen (ROCm) C API: FLOAT/HALF/BFLOAT16 I/O with FLOAT per-channel tensors; "
             "2-D and 3-D; symmetric padding, cross-correlation; packed batchnorm tensors. "
             "Convolutions run one solution chosen at build (immediate mode, or Find 2.0 "
             "with benchmarking). conv + bias + activation is one MIOpen fusion plan compiled "
             "per stream; where MIOpen refuses the fusion, the plan composes the convolution, "
             "miopenConvolutionForwardBias and miopenActivationForward on one stream with the "
             "intermediate in the workspace (plan.algorithm says which). A ReLU lower clip "
             "needs MIOpen >= 3.5 (CLAMP); before it, fused batchnorm + activation runs "
             "composed, and batchnorm inference + DReLU + backward of HALF/BFLOAT16 data with "
             "FLOAT intermediates is declined. NaN propagates through ReLU (MIOpen's RELU "
             "kernel computes x * (x > 0)); its clipped kernels (fmin/fmax) may not: not yet "
             "verified on AMD hardware")

    def knobs(self, match):
        return self.provider._knobs(match)

    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        return self.provider._build_plan(match, engine, knobs, perfdb)


class MiopenProvider(Provider):
    """Runs the nine patterns on HIP device ``index`` through MIOpen.

    Raises
    ------
    DeviceError
        The HIP runtime or MIOpen is absent (the message names the libraries and the paths
        tried), MIOpen is older than 3.4, or there is no device ``index``.
    """

    ENGINES = (MiopenEngine,)

    def __init__(self, index: int = 0):
        state = open_vendor("hip", index)
        runtimes = _hip_runtimes_mapped()
        if len(runtimes) > 1:
            raise DeviceError(
                f"Device: hip:{index}: two HIP runtimes are loaded ({', '.join(runtimes)}): "
                f"MIOpen ({state.dnn.path}) links another libamdhip64 than the one loaded "
                f"({state.runtime_record.path}), and streams of one are not streams of the "
                "other; point HIPDNN_ASYNC_HIP_RUNTIME at the libamdhip64 beside that MIOpen")
        self.version = _miopen.version()
        if self.version < _miopen.MIN_VERSION:
            raise DeviceError(f"Device: hip:{index}: MIOpen {'.'.join(map(str, self.version))} "
                              f"at {state.dnn.path} is older than "
                              f"{'.'.join(map(str, _miopen.MIN_VERSION))}, the oldest this "
                              "provider takes")
        self.name = "miopen"
        self.index = index
        self.spec = f"hip:{index}"
        self.rt = state.runtime
        self._state = state
        self.context = context_for(index, self.rt)
        self._target = GpuTarget(index, self.spec, self.rt)
        make = _plans.make_handle(self.context)
        self._build = BuildStream(self.context, self.spec, _plans.RESOURCE_KEY, make, self.rt)
        # every stream of the device gets its MIOpen handle at start, and a workspace sized
        # at build for each plan, both made by the runtime from this declaration: plans'
        # run() only enqueues
        self._launch = StreamNeeds(self.context, _plans.RESOURCE_KEY, _plans.HANDLE_KIND)
        self._conv_cache: dict[str, tuple] = {}   # match.signature -> (ConvSetup, candidates)

    # ------------------------------------------------------------------ identity
    def describe(self) -> dict:
        """The perf-db key's device (gcnArchName, compute units, name) and library versions
        (MIOpen, HIP runtime)."""
        ctx = self.context
        return {"device": f"{ctx.arch} ({ctx.multiprocessor_count} CUs, {ctx.name})",
                "library_versions": f"MIOpen {'.'.join(map(str, self.version))}; HIP runtime "
                                    f"{self.rt.version}"}

    def _where(self, match) -> str:
        return f"{MIOPEN_ENGINE_NAME} ({match.pattern.name})"

    # ------------------------------------------------------------------ engines
    def _knobs(self, match) -> list:
        with _at_build():
            return self._offered_knobs(match)

    def _offered_knobs(self, match) -> list:
        where = self._where(match)
        self._check_supported(match, where)
        if match.pattern in _CONV:
            _, candidates = self._conv_candidates(match, where)
            return _tuning.engine_knobs(match, candidates)
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
            self._conv_candidates(match, where)
        return _tuning.engine_knobs(match)

    def _check_supported(self, match, where: str) -> None:
        t, p = match.tensors, match.params
        if match.pattern not in _CONV and match.pattern != Pattern.CONV_FPROP_BIAS_RELU:
            for role in _CHANNEL_ROLES:
                if role in t:
                    channel_descriptor(t[role], where)   # FLOAT, packed (1, C, 1, 1[, 1])
            for role in ("x", "y", "dy", "dx"):
                if role in t and not t[role].is_virtual:
                    packed_layout(t[role], where)
        if match.pattern in (Pattern.CONV_FPROP_BIAS_RELU, Pattern.BN_TRAINING_RELU,
                             Pattern.BN_INFERENCE_DRELU_BACKWARD):
            activation(p.get("relu_lower_clip"), p.get("relu_upper_clip"), self.version, where)
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU and "bias" in t:
            if t["bias"].data_type != t["y"].data_type:
                raise NotSupportedError(
                    f"{where}: bias '{t['bias'].name}' is {t['bias'].data_type.name}, y is "
                    f"{t['y'].data_type.name}; MIOpen's bias op takes y's data type")

    def _conv_candidates(self, match, where: str):
        """(ConvSetup, Candidates) of a convolution, asked of MIOpen once per problem:
        the immediate-mode solutions (``miopenConvolution*GetSolution``), best first."""
        cached = self._conv_cache.get(match.signature)
        if cached is not None:
            return cached
        setup = conv_setup(match, where)
        a, b, c = setup.descs
        with self._build.lock:
            solutions = _miopen.conv_solutions(setup.direction, self._build.handle(), a, b,
                                               setup.conv, c)
        if not solutions:
            raise NotSupportedError(
                f"{where}: MIOpen has no solution for this convolution ("
                + ", ".join(f"{r} {match.tensors[r].data_type.name} strides "
                            f"{tuple(match.tensors[r].strides)}" for r in setup.roles) + ")")
        candidates = [_tuning.Candidate(self._solution_name(sid, algo), sid, ws,
                                        props={"time_ms": t, "algorithm": algo})
                      for sid, algo, ws, t in solutions]
        self._conv_cache[match.signature] = setup, candidates
        return setup, candidates

    @staticmethod
    def _solution_name(solution_id: int, algorithm: int) -> str:
        return f"solver {solution_id} ({_ALGO_NAMES.get(algorithm, f'algorithm {algorithm}')})"

    # ------------------------------------------------------------------ binding, memory
    def binder(self, tensor, *, output: bool, filter: bool = False):
        return make_binder(tensor, output=output, target=self._target, filter=filter)

    def bind_workspace(self, nbytes: int, given, *, where: str):
        return bind_workspace(nbytes, given, where=where, target=self._target)

    def empty(self, dims, dtype, strides):
        return GpuArray(dims, dtype, strides, self.context, self.spec)

    # ------------------------------------------------------------------ build
    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        """Build with ``engine``, size every stream's workspace for the plan and prepare
        every stream's handle for it (compiled solutions / fusion plans, now for open
        streams and at start for later ones: the runtime runs the plan's ``handle_work``),
        so that its first launch does nothing else."""
        plan = super().build(match, engine, knobs, perfdb)
        self._launch.reserve(plan.workspace_size)
        if plan.handle_work is not None:
            self._launch.prepare_handles(plan.handle_work)
        return plan

    def _build_plan(self, match, engine, knobs, perfdb) -> ProviderPlan:
        where = f"{engine.name} ({match.pattern.name})"
        self._check_supported(match, where)
        with _at_build():
            if match.pattern in _CONV or match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
                return self._build_conv(match, engine, knobs, perfdb, where)
            return self._build_bn(match, knobs, where)

    # ---------------------------------------------------------------- convolutions
    def _build_conv(self, match, engine, knobs, perfdb, where) -> ProviderPlan:
        setup, candidates = self._conv_candidates(match, where)
        fused = None
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
            fused = self._fusion_plan(match, setup, knobs, where)
            if fused is not None:
                return fused
        choice = _tuning.choose(self.engine_impl(engine), match, candidates, knobs, perfdb,
                                heuristic=lambda fitting, limit: fitting[0],
                                measure=lambda fitting: self._find(match, setup, fitting))
        cand = choice.candidate
        a, b, c = setup.descs
        with self._build.lock:
            handle = self._build.handle()
            ws = _miopen.conv_solution_workspace(setup.direction, handle, a, b, setup.conv, c,
                                                 cand.id)
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
            plan = self._composed_plan(match, setup, cand, ws, where)
        else:
            plan = _plans.ConvPlan(setup, cand.id, ws, cand.name)
        with self._build.lock:
            plan.prepare_handle(self._build.handle())
        self._build.trial(match, plan)
        plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
        return plan

    def _find(self, match, setup, fitting):
        """(candidate, ms): the fastest of ``fitting`` in MIOpen's exhaustive Find 2.0 search
        (tuning on, the workspace limit the largest of ``fitting``) on scratch buffers; the
        first of ``fitting`` (ms NaN) if the search finds none of them."""
        x, w, y = (self._build.scratch(match.tensors[r]) for r in setup.find_roles)
        limit = max(f.workspace_bytes for f in fitting)
        ws = GpuArray((max(limit, 1),), np.uint8, (1,), self.context, self.spec)
        xd, wd, yd = (setup.desc(r) for r in setup.find_roles)
        with self._build.lock:
            found = _miopen.find_solutions(self._build.handle(), setup.direction, setup.conv,
                                           xd, wd, yd, x.ptr, w.ptr, y.ptr, ws.ptr, limit, True,
                                           limit)
            self._build.synchronize()
        by_id = {f.id: f for f in fitting}
        for solver, _algo, _ws, ms in found:
            if solver in by_id:
                log.info("benchmark %s: %s %.4f ms", match.pattern.name, by_id[solver].name, ms)
                return by_id[solver], ms
        log.info("benchmark %s: Find found none of %s; using %s", match.pattern.name,
                 [f.name for f in fitting], fitting[0].name)
        return fitting[0], float("nan")

    def _fusion_plan(self, match, setup, knobs, where):
        """The fused conv + bias + activation plan, or None where MIOpen refuses the fusion
        (``miopenCompileFusionPlan``: UnsupportedOp / NotImplemented) or its plan needs a
        workspace this MIOpen cannot pass (no ``miopenExecuteFusionPlan_v2``)."""
        t, p = match.tensors, match.params
        act = activation(p.get("relu_lower_clip"), p.get("relu_upper_clip"), self.version, where)
        bias_desc = tensor_descriptor(t["bias"], where) if "bias" in t else None
        plan = _plans.FusedConvBiasActPlan(setup, bias_desc, act)
        with self._build.lock:
            handle = self._build.handle()
            policy = self._tuning_policy(handle, knobs)
            try:
                plan.prepare_handle(handle)
            except NotSupportedError as exc:
                log.info("%s: MIOpen refused the fusion plan (%s); composing", where, exc)
                return None
            finally:
                self._restore_policy(handle, policy)
        if plan.workspace_size and not _miopen.has("ExecuteFusionPlan_v2"):
            log.info("%s: the fusion plan needs %d workspace bytes and this MIOpen has no "
                     "miopenExecuteFusionPlan_v2; composing", where, plan.workspace_size)
            return None
        self._build.trial(match, plan)
        plan.benchmarked = policy is not None
        return plan

    def _composed_plan(self, match, setup, cand, conv_ws, where):
        t, p = match.tensors, match.params
        y = t["y"]
        act = activation(p.get("relu_lower_clip"), p.get("relu_upper_clip"), self.version, where)
        z_strides = packed_like(y)
        z_desc = tensor_descriptor(y, where, strides=z_strides)
        z_bytes = math.prod(y.dims) * numpy_dtype(y.data_type).itemsize
        bias_desc = tensor_descriptor(t["bias"], where) if "bias" in t else None
        return _plans.ComposedConvBiasActPlan(setup, cand.id, conv_ws, cand.name, z_desc,
                                              tensor_descriptor(y, where), bias_desc, act,
                                              z_bytes)

    # ---------------------------------------------------------------- batchnorm
    def _build_bn(self, match, knobs, where) -> ProviderPlan:
        t, p = match.tensors, match.params
        pattern = match.pattern
        x = t["x"]
        d = {r: tensor_descriptor(t[r], where) for r in ("x", "y", "dy", "dx") if r in t}
        d.update({r: channel_descriptor(t[r], where) for r in _CHANNEL_ROLES if r in t})
        channels = x.dims[1]
        cdims = (1, channels) + (1,) * (len(x.dims) - 2)
        stat = _miopen.TensorDescriptor(_miopen.DATA_FLOAT, cdims,
                                        packed_strides(cdims, tuple(range(len(cdims)))))
        z_bytes = math.prod(x.dims) * numpy_dtype(x.data_type).itemsize
        params = dict(p)
        if pattern == Pattern.BN_INFERENCE_VARIANCE:
            plan = _plans.BnInferencePlan(d, params)
        elif pattern in (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU):
            if "next_running_mean" in t and p.get("momentum") is None:
                raise NotSupportedError(f"{where}: running statistics need a momentum")
            act = fused = None
            if pattern == Pattern.BN_TRAINING_RELU:
                act = activation(p.get("relu_lower_clip"), p.get("relu_upper_clip"),
                                 self.version, where)
                fused = _miopen.has("BatchNormForwardTrainingActivation")
                d["z"] = tensor_descriptor(t["y"], where, strides=packed_like(t["y"]))
            d["stat"] = d.get("mean", stat)
            virtual = frozenset(r for r in ("mean", "inv_variance") if t[r].is_virtual)
            plan = _plans.BnTrainingPlan(d, params, channels, virtual, act, bool(fused),
                                         z_bytes, self.rt)
        elif pattern == Pattern.BN_BACKWARD:
            plan = _plans.BnBackwardPlan(d, params)
        else:   # BN_INFERENCE_DRELU_BACKWARD
            act = activation(p.get("relu_lower_clip"), p.get("relu_upper_clip"), self.version,
                             where)
            fused = _miopen.has("BatchNormBackwardActivation")
            ones = None
            inter = match.nodes[0].outputs["y"].data_type
            if not fused and inter != x.data_type:
                # the composed form recomputes the BN output in x's type (MIOpen converts
                # no types): a clip it lands on decides the gradient, so rounding it is not
                # a small error; decline (issue 10 item 8)
                raise NotSupportedError(
                    f"{where}: MIOpen {'.'.join(map(str, self.version))} has no "
                    "miopenBatchNormBackwardActivation, and composing it would round the "
                    f"recomputed batchnorm output to {x.data_type.name}, not the graph's "
                    f"intermediate type {inter.name} (set the graph's intermediate data type "
                    f"to {x.data_type.name} to accept that, or use MIOpen >= 3.5)")
            if not fused:
                d["z"] = tensor_descriptor(x, where, strides=packed_like(x))
                ones = self._filled(cdims, 1.0 - _plans.DRELU_EPSILON)
            plan = _plans.BnDreluBackwardPlan(d, params, act, fused, channels, z_bytes, ones)
        self._trial_tuned(match, plan, knobs)
        return plan

    def _trial_tuned(self, match, plan, knobs) -> None:
        """The trial run at build; with benchmarking, under the tuning policy Search."""
        with self._build.lock:
            handle = self._build.handle()
            policy = self._tuning_policy(handle, knobs)
        try:
            self._build.trial(match, plan)
        finally:
            with self._build.lock:
                self._restore_policy(handle, policy)
        plan.benchmarked = policy is not None

    def _tuning_policy(self, handle: int, knobs):
        """With benchmarking and a MIOpen that has tuning policies: set Search (search the
        perf db, tune on a miss) on ``handle``; return the policy to restore, else None."""
        if not knobs.get(_knobs.BENCHMARKING, 0) or not _miopen.has("SetTuningPolicy"):
            return None
        old = _miopen.get_tuning_policy(handle)
        _miopen.set_tuning_policy(handle, _miopen.TUNING_POLICY_SEARCH)
        return old

    @staticmethod
    def _restore_policy(handle: int, policy) -> None:
        if policy is not None:
            _miopen.set_tuning_policy(handle, policy)

    def _filled(self, dims, value) -> GpuArray:
        """A plan-owned packed FLOAT device array of ``value`` (made at build)."""
        arr = GpuArray(dims, np.float32, packed_strides(dims, tuple(range(len(dims)))),
                       self.context, self.spec)
        arr.copy_from(np.full(dims, value, np.float32))
        return arr
