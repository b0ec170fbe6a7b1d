"""``OnednnEngine``: ``ONEDNN_ENGINE``, ranked first on the CPU where oneDNN loads."""
from __future__ import annotations

from .... import _knobs
from ...._errors import KnobError
from ....patterns import conv_roles
from ....runtime import load_onednn
from ... import _tuning
from ..._base import ProviderEngine, ProviderPlan
from ._bnorm import Bn
from ._choose import benchmark_bn, benchmark_conv, explain
from ._conv import Conv, conv_hooks
from ._plan import OnednnPlan
from ._program import ONEDNN_ENGINE_NAME, decline, dnnl

__all__ = ["OnednnEngine", "CANDIDATE"]

# A convolution's oneDNN implementation, pinned by its index in the engine's order (the
# order of a default build's plan.algorithm.trials); -1: the engine's own choice.
CANDIDATE = "onednn.candidate"


class OnednnEngine(ProviderEngine):
    """``ONEDNN_ENGINE``: every pattern through oneDNN; declines where oneDNN is absent or
    has no implementation (``CPU_ENGINE`` then runs the graph)."""

    name = ONEDNN_ENGINE_NAME
    notes = ("all nine patterns through oneDNN primitives (library: runtime.load_onednn); "
             "FLOAT/HALF/BFLOAT16 I/O, per-channel tensors FLOAT; any strides; weights "
             "reordered to oneDNN's blocked layout; NCHW activations of kernels larger than 1x1 "
             "reordered to its blocked layout too (bfloat16 on an AMX CPU: to channels-last "
             "for its AMX kernels); HALF computed in float32 (reorders in the "
             "workspace), strided activations on dense copies; batchnorm on plain layouts "
             "through channel-blocked (nC16c) copies, inference there as one binary "
             "primitive; channels-first batchnorm by default through the engine's own C rows "
             "(bn_rows) on oneDNN's threads, channels-last too; declines "
             "(to CPU_ENGINE) where oneDNN has only its reference implementation; NaN "
             "propagates through ReLU (a NaN input gives NaN)")

    def __init__(self, provider):
        super().__init__(provider)
        self._convs = {}

    @staticmethod
    def _library():
        if dnnl is None:
            raise decline("the oneDNN binding (runtime._onednn) is not built")
        state = load_onednn()
        if not state.ok:
            raise decline(f"oneDNN is not available: {state.reason}")
        return state

    def _conv(self, match) -> Conv:
        key = match.signature
        conv = self._convs.get(key)
        if conv is None:
            conv = self._convs[key] = Conv(match)
            if len(self._convs) > 64:                      # a bounded cache of problems
                self._convs.pop(next(iter(self._convs)))
        return conv

    def knobs(self, match):
        self._library()
        if conv_roles(match.pattern) is None:
            return _tuning.engine_knobs(match, Bn(match).candidates())
        cands = self._conv(match).candidates()
        return _tuning.engine_knobs(match, cands) + [
            _knobs.Knob(CANDIDATE, "int64", -1, -1, len(cands) - 1,
                 "Run the convolution on the candidate of this index in the engine's order "
                 "within the workspace limit (plan.algorithm.trials of a build without "
                 "it); -1: the engine's choice")]

    def perf_device(self) -> str:
        """The perf-db key's device: CPU model, oneDNN version, ISA and threads."""
        state = self._library()
        major, minor, patch = state.version[:3]
        return (f"{self.provider.describe()['device']}; oneDNN {major}.{minor}.{patch} "
                f"{state.version[4]}; isa {state.isa}; {dnnl.max_threads()} threads")

    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        self._library()
        if conv_roles(match.pattern) is None:
            bn = Bn(match)
            choice = _tuning.choose(self, match, bn.candidates(), knobs, perfdb,
                                    heuristic=bn.heuristic,
                                    measure=lambda fitting: benchmark_bn(bn, fitting),
                                    device=self.perf_device())
            spec, _, hooks = bn.build(choice.candidate)
            plan = OnednnPlan(match, spec.program(), spec,
                              explain(choice, "the engine's batchnorm rows where offered "
                                       "(channels-first; channels-last where they beat "
                                       "oneDNN's jit); "
                                       "else a jit implementation before oneDNN's generic "
                                       "ones, blocked copies before channels-last ones "
                                       "(batchnorm inference: the jit batchnorm on the "
                                       "user's layout, else one binary primitive)",
                                       ranked=False),
                              hooks=hooks)
            plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
            return plan
        conv = self._conv(match)
        pin = knobs.get(CANDIDATE, -1)
        if pin >= 0:
            # a pinned candidate is not timed: the pin wins over global.benchmarking (and
            # over HIPDNN_ASYNC_FORCE_BENCHMARKING), and the perf db is neither read nor
            # written
            knobs = {**knobs, _knobs.BENCHMARKING: 0}

        def heuristic(fitting, limit):
            if pin >= len(fitting):
                raise KnobError(
                    f"{self.name}: '{CANDIDATE}' = {pin}, but {len(fitting)} candidate"
                    f"{'s' if len(fitting) != 1 else ''} of conv_{conv.direction} fit the "
                    f"workspace limit of {limit} bytes: "
                    + ", ".join(f"{i}: {c.name}" for i, c in enumerate(fitting)))
            return fitting[max(pin, 0)]

        def measure(fitting):
            return benchmark_conv(conv, fitting)

        choice = _tuning.choose(self, match, conv.candidates(), knobs, perfdb,
                                heuristic=heuristic, measure=measure,
                                device=self.perf_device())
        _, pd, _, variant = conv.impls[choice.candidate.id]
        program, spec = conv.program(pd, variant=variant)
        hooks, ws = conv_hooks(conv, choice.candidate)
        # a guarded plan (its own workspace size) reads the user's weights per execution:
        # its fallback does too, and reorder_constants would drop the guard's hooks
        rule = (f"pinned by '{CANDIDATE}' = {pin}" if pin >= 0
                else conv.rule(choice.candidate.name))
        plan = OnednnPlan(match, program, spec, explain(choice, rule),
                          hooks=hooks, workspace_size=ws,
                          conv=conv if ws is None else None, pd=pd, variant=variant)
        plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
        return plan
