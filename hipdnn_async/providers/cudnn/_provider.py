"""The cuDNN provider: one engine, ``CUDNN_LEGACY_ENGINE`` (``LegacyEngine``), over cuDNN 9's
legacy API. Another engine is one more class in ``CudnnProvider.ENGINES`` (best first).

Convolution patterns choose a cuDNN algorithm: by default the first applicable entry of
cuDNN's heuristic list (``cudnnGetConvolution*Algorithm_v7``) that the numerical policy
accepts (``ConvSetup.accurate``) and that fits the workspace limit; with
``global.benchmarking = 1``, the entry ``cudnnFindConvolution*AlgorithmEx`` measures
fastest on scratch buffers (the heuristic's choice kept unless another is faster beyond
``_tuning.BENCH_MARGIN``), remembered in the perf db. FLOAT convolutions use FMA math (no
TF32), so results match a float32 reference; their non-deterministic ALGO_0 / ALGO_3
(FLOAT atomics) are allowed unless the knob ``cudnn_legacy.deterministic`` is 1; every
convolution may take FFT / FFT_TILING unless the knob ``cudnn_legacy.allow_fft`` is 0 (no
FFT for any data type: ``_fft``). FLOAT fprop, dgrad and conv+bias+activation were
measured within tolerance by bench/diag_fft.py, FLOAT weight gradients by
bench/diag_wgrad_fft.py (H200, cuDNN 9.19, every ResNet-50 fp32 NCHW wgrad shape at batch
32: FFT at most 0.05 of our bound, the direct ALGO_0 / ALGO_1 up to 0.33; the heuristic's
first accepted entry becomes FFT on res3 and res4 3x3, 0.15-0.16 ms instead of
0.32-0.36 ms, with a ~150 MiB workspace: ``ConvSetup.accurate``); no FLOAT convolution
takes Winograd. HALF/BFLOAT16 use tensor cores with float32 accumulation, deterministic
algorithms only.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from ... import _knobs
from ..._errors import NotSupportedError
from ..._types import DataType, numpy_dtype
from ..._layout import packed_strides, stride_order
from ...patterns import Pattern
from ...runtime import GpuArray, _cudnn, context_for
from .. import _tuning
from .._base import Provider, ProviderEngine, ProviderPlan
from .._gpu._bind import GpuTarget, bind_workspace, make_binder
from .._gpu._launch import StreamNeeds
from .._gpu._trial import BuildStream
from .._gpu._vendor import open_vendor
from . import _fft, _plans
from ._bn_modes import LEGACY_BN_PERSISTENT, choose_bn_mode, is_batchnorm_call
from ._graph import GraphApiEngine
from ._conv import CUDNN_DTYPE, conv_setup, is_channels_last, tensor_descriptor

__all__ = ["CudnnProvider", "CUDNN_ENGINE_NAME"]

log = logging.getLogger("hipdnn_async")

CUDNN_ENGINE_NAME = "CUDNN_LEGACY_ENGINE"
LEGACY_DETERMINISTIC = "cudnn_legacy.deterministic"
LEGACY_ALLOW_FFT = "cudnn_legacy.allow_fft"
_BN_MODE_PATTERNS = (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU, Pattern.BN_BACKWARD,
                     Pattern.BN_INFERENCE_DRELU_BACKWARD)
_CONV = (Pattern.CONV_FPROP, Pattern.CONV_DGRAD, Pattern.CONV_WGRAD)
_IMPLICIT_PRECOMP_GEMM = 1


class LegacyEngine(ProviderEngine):
    """``CUDNN_LEGACY_ENGINE``: the nine patterns through cuDNN's legacy API."""

    name = CUDNN_ENGINE_NAME
    schema1 = True   # the provider's only engine when the perf db had no engine column
    notes = ("cuDNN 9 legacy API; FLOAT/HALF/BFLOAT16 I/O with FLOAT per-channel tensors; "
             "4-D and 5-D; packed filters; FLOAT convolutions without TF32 or Winograd; "
             "every convolution (FLOAT fprop/dgrad/wgrad/conv+bias+ReLU measured within "
             "tolerance on the H200; HALF/BFLOAT16) may run FFT/FFT_TILING unless "
             f"'{LEGACY_ALLOW_FFT}' = 0 (no FFT for any data type: an FFT spreads a NaN/Inf "
             "input over its tile; HALF/BFLOAT16 may still take Winograd); "
             "cuDNN's non-deterministic ALGO_0/ALGO_3 (FLOAT atomics) allowed unless "
             f"'{LEGACY_DETERMINISTIC}' = 1; HALF/BFLOAT16 convolutions deterministic "
             "algorithms only; plan.algorithm.reason says why; ReLU upper clip "
             "only; NaN entering a ReLU comes out as 0 (cuDNN activations with "
             "CUDNN_NOT_PROPAGATE_NAN), except where cuDNN fuses the ReLU into channels-last "
             "batchnorm training (plan.algorithm 'SPATIAL_PERSISTENT Ex, ReLU fused'): there "
             "NaN propagates (seen on the H200, cuDNN 9.19). Channels-last batchnorm "
             "training and backward (alone or after BN inference + DReLU) run only "
             "cuDNN's Ex calls with SPATIAL_PERSISTENT (PyTorch's channels-last path; the "
             "plain calls are 20-60x slower there), declined where cuDNN refuses them; "
             "other layouts run SPATIAL_PERSISTENT unless "
             f"'{LEGACY_BN_PERSISTENT}' = 0 (SPATIAL, PyTorch's NCHW choice); "
             "plan.algorithm names the mode")

    def knobs(self, match):
        return self.provider._legacy_knobs(match)

    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        return self.provider._legacy_build(match, engine, knobs, perfdb)


class CudnnProvider(Provider):
    """Runs the nine patterns on CUDA device ``index`` through cuDNN.

    Raises
    ------
    DeviceError
        CUDA runtime or cuDNN 9 absent, or no device ``index``.
    """

    ENGINES = (GraphApiEngine, LegacyEngine)   # the graph API first (issue 11)

    def __init__(self, index: int = 0):
        state = open_vendor("cuda", index)
        self.name = "cudnn"
        self.index = index
        self.spec = f"cuda:{index}"
        self.context = context_for(index, state.runtime)
        self._libs = state
        self._target = GpuTarget(index, self.spec, self.context.runtime)
        self._build = BuildStream(self.context, self.spec, _plans.RESOURCE_KEY,
                                  _plans.make_handle)
        # every stream of the device gets its cuDNN handle at start, and a workspace
        # sized at build for each plan, both made by the runtime from this declaration:
        # plans' run() only enqueues (capture-safe)
        self._launch = StreamNeeds(self.context, _plans.RESOURCE_KEY, _plans.HANDLE_KIND)
        self._conv_cache: dict[str, tuple] = {}   # match.signature -> (ConvSetup, algorithms)

    # ------------------------------------------------------------------ identity
    def describe(self) -> dict:
        cc = self.context.compute_capability
        return {"device": f"{self.context.name} (sm_{cc[0]}{cc[1]})",
                "library_versions": (f"cudnn {self._libs.dnn.version}; cudart "
                                     f"{self._libs.runtime.version}")}

    # ------------------------------------------------------------------ engines
    def _legacy_knobs(self, match) -> list:
        where = f"{CUDNN_ENGINE_NAME} ({match.pattern.name})"
        self._check_supported(match, where)
        if match.pattern in _CONV or match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
            setup, raw = self._conv_candidates(match, where)
            knobs = _tuning.engine_knobs(match, self._policy(match, setup, raw, False, True))
            if self._offers_determinism(setup, raw):
                knobs.append(_knobs.Knob(LEGACY_DETERMINISTIC, "int64", 0, 0, 1,
                                         "Only deterministic cuDNN algorithms (no ALGO_0 / "
                                         "ALGO_3 atomics: bitwise-reproducible results)"))
            knobs.append(_fft.fft_knob(LEGACY_ALLOW_FFT, "cuDNN's FFT / FFT_TILING algorithms"))
            return knobs
        knobs = _tuning.engine_knobs(match)
        if match.pattern in _BN_MODE_PATTERNS and not is_channels_last(match.tensors["x"]):
            knobs.append(_knobs.Knob(
                LEGACY_BN_PERSISTENT, "int64", 1, 0, 1,
                "1: CUDNN_BATCHNORM_SPATIAL_PERSISTENT (faster; cuDNN may reduce in scaled "
                "integers there and overflow to Inf/NaN on very large inputs); 0: "
                "CUDNN_BATCHNORM_SPATIAL, PyTorch's NCHW mode"))
        return knobs

    @staticmethod
    def _offers_determinism(setup, raw) -> bool:
        """The determinism knob is offered where it changes the choice: FLOAT I/O with a
        non-deterministic algorithm in cuDNN's list."""
        return setup.float_io and any(not c.deterministic for c in raw)

    def _policy(self, match, setup, raw, deterministic: bool, allow_fft: bool) -> list:
        """The algorithms the numerical policy accepts, in cuDNN's order (a fused
        conv+bias+ReLU with an upper clip runs IMPLICIT_PRECOMP_GEMM only)."""
        algos = setup.accepted(raw, deterministic=deterministic, allow_fft=allow_fft)
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU and match.params.get("relu_upper_clip") is not None:
            algos = [a for a in algos if a.id == _IMPLICIT_PRECOMP_GEMM]
        if not algos:
            raise NotSupportedError(f"{CUDNN_ENGINE_NAME} ({match.pattern.name}): cuDNN offers no "
                                    "algorithm for this convolution (layouts/dtypes "
                                    f"{self._layouts(match)})")
        return algos

    def _check_supported(self, match, where: str) -> None:
        p, t = match.params, match.tensors
        lower = p.get("relu_lower_clip")
        if lower is not None and lower != 0:
            raise NotSupportedError(f"{where}: relu_lower_clip = {lower}; cuDNN's activations "
                                    "clip below at 0 only (CPU engine: cpu device)")
        for role in ("scale", "bias", "mean", "variance", "inv_variance", "dscale", "dbias",
                     "prev_running_mean", "prev_running_variance", "next_running_mean",
                     "next_running_variance"):
            tensor = t.get(role)
            if tensor is None or match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
                continue
            if tensor.data_type != DataType.FLOAT:
                raise NotSupportedError(f"{where}: per-channel tensor '{tensor.name}' ({role}) is "
                                        f"{tensor.data_type.name}; cuDNN batchnorm takes FLOAT")
            c = tensor.dims[1]
            if c > 1 and tensor.strides[1] != 1:
                raise NotSupportedError(f"{where}: per-channel tensor '{tensor.name}' ({role}) "
                                        f"has channel stride {tensor.strides[1]}; cuDNN needs 1")
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU and "bias" in t:
            if t["bias"].data_type != t["y"].data_type:
                raise NotSupportedError(
                    f"{where}: bias '{t['bias'].name}' is {t['bias'].data_type.name}, y is "
                    f"{t['y'].data_type.name}; cuDNN's fused conv+bias+ReLU takes the bias in "
                    "y's data type")

    def _conv_candidates(self, match, where: str):
        """(ConvSetup, cuDNN's heuristic list) of a convolution pattern, asked of cuDNN once
        per problem: ``engines`` and ``build`` of the same graph share the answer (the
        policy, :meth:`_policy`, is applied per build, as it depends on a knob)."""
        cached = self._conv_cache.get(match.signature)
        if cached is not None:
            return cached
        setup = conv_setup(match, where)
        with self._build.lock:
            raw = setup.algorithms(self._build.handle())
        self._policy(match, setup, raw, False, True)     # none at all: declined here
        self._conv_cache[match.signature] = setup, raw
        return setup, raw

    @staticmethod
    def _layouts(match) -> str:
        return ", ".join(f"{r} {t.data_type.name} strides {tuple(t.strides)}"
                         for r, t in match.tensors.items())

    # ------------------------------------------------------------------ binding, memory
    def binder(self, tensor, *, output: bool, filter: bool = False):
        return make_binder(tensor, output=output, target=self._target, filter=filter)

    def bind_workspace(self, nbytes: int, given, *, where: str):
        return bind_workspace(nbytes, given, where=where, target=self._target)

    def empty(self, dims, dtype, strides):
        return GpuArray(dims, dtype, strides, self.context, self.spec)

    # ------------------------------------------------------------------ build
    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        """Build with ``engine`` (any of ``ENGINES``), then size every stream's workspace
        for the plan, so that its first launch allocates nothing."""
        plan = super().build(match, engine, knobs, perfdb)
        self._launch.reserve(plan.workspace_size)
        return plan

    def _legacy_build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        where = f"{engine.name} ({match.pattern.name})"
        self._check_supported(match, where)
        pattern = match.pattern
        if pattern in _CONV or pattern == Pattern.CONV_FPROP_BIAS_RELU:
            return self._build_conv(match, engine, knobs, perfdb, where)
        t, p = match.tensors, match.params
        x = t["x"]
        descs = {"bn": self._bn_descriptor(x, where)}
        for role in ("x", "y", "dy", "dx"):
            if role in t:
                descs[role] = tensor_descriptor(t[role], where)
        params = dict(p)
        channels = x.dims[1]
        if pattern == Pattern.BN_INFERENCE_VARIANCE:
            return _plans.BnInferencePlan(descs, params)

        def mode(plan):
            return choose_bn_mode(self._build, self.engine_impl(engine), match, plan, knobs,
                                  perfdb, where)

        if pattern in (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU):
            if "next_running_mean" in t and p.get("momentum") is None:
                raise NotSupportedError(f"{where}: running statistics need a momentum")
            return mode(_plans.BnTrainingPlan(
                descs, params, channels, p.get("relu_upper_clip"),
                relu=pattern == Pattern.BN_TRAINING_RELU,
                virtual=frozenset(r for r, tensor in t.items() if tensor.is_virtual)))
        if pattern == Pattern.BN_BACKWARD:
            return mode(_plans.BnBackwardPlan(descs, params))
        # BN_INFERENCE_DRELU_BACKWARD: z and dz in packed x layout in the workspace, z in
        # the graph's intermediate type (the BN-inference output's)
        plan = self._drelu_plan(match, descs, params, where)
        try:
            return mode(plan)
        except _cudnn.CudnnError as exc:
            if not plan.convert or is_batchnorm_call(exc):
                raise
            # a refusal of another call than the batchnorm one's (the mode trials pass
            # those on): the conversions. Without them the intermediates would be in the
            # I/O type, a silently less precise answer; decline instead (issue 10 item 8)
            raise NotSupportedError(
                f"{where}: cuDNN refused the conversion to the intermediate data type "
                f"{match.nodes[0].outputs['y'].data_type.name} ({exc}); the legacy API "
                "cannot keep this pattern's intermediates at the graph's precision") from exc

    def _drelu_plan(self, match, descs, params, where):
        t, p = match.tensors, match.params
        x = t["x"]
        channels = x.dims[1]
        rank = len(x.dims)
        dims = tuple(x.dims)
        packed = packed_strides(dims, stride_order(dims, tuple(x.strides)))
        descs["z"] = tensor_descriptor(x, where, strides=packed)
        inter = match.nodes[0].outputs["y"].data_type
        unit = None
        if inter != x.data_type:
            code = CUDNN_DTYPE.get(inter)
            if code is None:
                raise NotSupportedError(f"{where}: intermediate data type {inter.name}; cuDNN "
                                        "plans keep intermediates in FLOAT, HALF or BFLOAT16")
            one_dims = (1,) * rank
            descs["zi"] = _cudnn.TensorDescriptor(code, dims, packed)
            descs["one_io"] = tensor_descriptor(x, where, dims=one_dims, strides=one_dims)
            descs["one_i"] = _cudnn.TensorDescriptor(code, one_dims, one_dims)
            unit = tuple(self._filled(one_dims, numpy_dtype(dt), 1.0)
                         for dt in (x.data_type, inter))
        ones = self._filled((1, channels) + (1,) * (rank - 2), np.float32, 1.0)
        return _plans.BnInferenceDreluBackwardPlan(
            descs, params, channels, math.prod(dims), numpy_dtype(x.data_type).itemsize,
            numpy_dtype(inter).itemsize, ones, p.get("relu_upper_clip"), unit)

    def _filled(self, dims, dtype, value) -> GpuArray:
        """A plan-owned packed device array of ``value`` (made at build)."""
        arr = GpuArray(dims, dtype, packed_strides(dims, tuple(range(len(dims)))), self.context,
                       self.spec)
        arr.copy_from(np.full(dims, value, dtype))
        return arr

    def _bn_descriptor(self, x, where):
        dims = (1, x.dims[1]) + (1,) * (len(x.dims) - 2)
        return _cudnn.TensorDescriptor(_cudnn.DATA_FLOAT, dims, packed_strides(dims, tuple(range(len(dims)))))

    def _build_conv(self, match, engine, knobs, perfdb, where):
        fused = match.pattern == Pattern.CONV_FPROP_BIAS_RELU
        setup, raw = self._conv_candidates(match, where)
        deterministic = bool(knobs.get(LEGACY_DETERMINISTIC, 0))
        allow_fft = _fft.allowed(knobs, LEGACY_ALLOW_FFT, conv=True)
        candidates = self._policy(match, setup, raw, deterministic, allow_fft)
        # the knobs that set the candidates, for the perf-db key: FLOAT "fft" where FFT is
        # accepted (the default, weight gradients included), so that winners benchmarked
        # under the earlier, FFT-declining default (keys without it) are never taken as
        # this one's; HALF / BFLOAT16 "no-fft" where the knob is 0 (default keys unchanged)
        fft = _fft.key_word(conv=True, float_io=setup.float_io, allow_fft=allow_fft)
        policy = " ".join(w for w, on in (("deterministic", deterministic), (fft, fft)) if on)
        choice = _tuning.choose(self.engine_impl(engine), match, candidates, knobs, perfdb,
                                heuristic=lambda fitting, limit: fitting[0],
                                measure=lambda fitting: self._find(match, setup, fitting),
                                policy=policy)
        fitting, chosen = list(choice.fitting), choice.candidate
        if fused:
            plan = self._fused_plan(match, setup, fitting, chosen, where)
        else:
            plan = self._verified(match, fitting, chosen, where,
                                  lambda a, ws: _plans.ConvPlan(setup, a, ws))
        plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
        plan.algorithm = self._explain(plan.algorithm, choice, fitting, raw, deterministic)
        return plan

    @staticmethod
    def _explain(name, choice, fitting, raw, deterministic: bool) -> _tuning.Algorithm:
        """``plan.algorithm`` with its reason and trials (see ``_tuning.Algorithm``)."""
        det = next((c.deterministic for c in raw if c.name == name), True)
        notes = "deterministic" if det else "not deterministic (FLOAT atomics)"
        if name.startswith("FFT"):
            notes = f"FFT transform, {notes}"
        if choice.benchmarked:
            how = (f"cudnnFind over the {len(fitting)} algorithms the policy accepts "
                   f"({choice.time_ms:.4f} ms)" if choice.time_ms is not None and
                   math.isfinite(choice.time_ms) else "cudnnFind (no usable timing: the "
                   "heuristic's choice)")
            trials = choice.trials or [(c.name, None) for c in fitting]
        elif choice.perfdb_hit:
            how, trials = "the perf db's benchmarked choice for this problem", ()
        else:
            names = [c.name for c in fitting]
            rank = names.index(name) + 1 if name in names else 0
            how = (f"cuDNN _v7 heuristics, rank {rank} of the {len(fitting)} algorithms the "
                   "policy accepts" + (" (deterministic only)" if deterministic else ""))
            trials = [(c.name, None) for c in fitting]
        return _tuning.Algorithm(name, f"{how}; {notes}", trials)

    def _verified(self, match, fitting, choice, where, make):
        """The plan of the first algorithm (``choice``, then the other fitting ones) that
        runs once on scratch buffers: cuDNN lists algorithms its execution then refuses
        under our math type or layout."""
        order = [choice] + [c for c in fitting if c is not choice]
        declined = []
        bufs = self._build.scratch_pack(match)
        for candidate in order:
            plan = make(candidate.id, candidate.workspace_bytes)
            try:
                self._build.trial(match, plan, bufs)
                return plan
            except _cudnn.CudnnError as exc:
                if not isinstance(exc.at_build(), NotSupportedError):  # NOT_SUPPORTED / BAD_PARAM
                    raise
                log.info("%s: algorithm %s declined at its trial run: %s", where,
                         plan.algorithm, exc)
                declined.append(f"{plan.algorithm} ({exc.status_name})")
        raise NotSupportedError(f"{where}: cuDNN ran none of its algorithms: "
                                f"{', '.join(declined)}")

    def _fused_plan(self, match, setup, fitting, choice, where):
        t, p = match.tensors, match.params
        y = t["y"]
        bias_dims = (1, y.dims[1]) + (1,) * (len(y.dims) - 2)
        bias_strides = packed_strides(bias_dims, tuple(range(len(bias_dims))))
        zero_bias = None
        if "bias" in t:
            bias_desc = tensor_descriptor(t["bias"], where)
        else:
            bias_desc = tensor_descriptor(y, where, dims=bias_dims, strides=bias_strides)
            zero_bias = GpuArray(bias_dims, numpy_dtype(y.data_type), bias_strides,
                                 self.context, self.spec)
            zero_bias.copy_from(np.zeros(bias_dims, np.float32))
        # The fused call refuses some (algorithm, layout) pairs that the plain one takes.
        return self._verified(match, fitting, choice, where, lambda a, ws: _plans.ConvBiasReluPlan(
            setup, a, ws, bias_desc, zero_bias, p.get("relu_upper_clip")))

    def _find(self, match, setup, fitting):
        """(candidate, ms, trials): of ``fitting``, the one ``_tuning.fastest`` keeps from
        cudnnFind*AlgorithmEx's times on scratch buffers under this setup's math type
        (the heuristic's first, ms NaN, if none was timed); trials are (name, ms) in
        the heuristic's order."""
        a, b, c = (self._build.scratch(match.tensors[r]) for r in setup.roles)
        ws_bytes = max(f.workspace_bytes for f in fitting)
        ws = GpuArray((max(ws_bytes, 1),), np.uint8, (1,), self.context, self.spec)
        ad, bd, cd = setup.descs
        with self._build.lock:
            results = _cudnn.find_algorithms(setup.direction, self._build.handle(), ad.ptr,
                                             a.ptr, bd.ptr, b.ptr, setup.conv.ptr, cd.ptr, c.ptr,
                                             ws.ptr, ws_bytes)
            self._build.synchronize()
        measured = {}
        for algo, status, ms, _memory, _det, mt in results:
            if status == 0 and setup.math_ok(mt) and algo not in measured:
                measured[algo] = float(ms)
        # in the heuristic's order, so that _tuning.fastest keeps its choice within the noise
        times = [measured.get(f.id, float("nan")) for f in fitting]
        pick = _tuning.fastest(times)
        choice, ms = fitting[pick], times[pick]
        trials = tuple((f.name, None if math.isnan(t) else t) for f, t in zip(fitting, times))
        log.info("benchmark %s: %s %.4f ms (of %s)", match.pattern.name, choice.name, ms,
                 ", ".join(f"{n} {t}" for n, t in trials))
        return choice, ms, trials
