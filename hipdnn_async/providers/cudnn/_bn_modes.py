"""The legacy engine's batchnorm call form and mode (``cudnnBatchNormMode_t``), each
checked by a trial run on the build stream's scratch buffers: channels-last x runs only
cuDNN's Ex calls with SPATIAL_PERSISTENT; other layouts the first mode cuDNN accepts
(SPATIAL_PERSISTENT, then SPATIAL), or with ``global.benchmarking`` = 1 the faster of
those, kept in the perf db. A refusal of anything but the batchnorm call itself is raised
as it is, never cached as a decline."""
from __future__ import annotations

import logging

from ..._errors import NotSupportedError
from ...runtime import _cudnn
from .. import _tuning
from .._gpu._trial import BuildStream, medians_alike
from . import _plans
from ._conv import is_channels_last

__all__ = ["LEGACY_BN_PERSISTENT", "batchnorm_refused", "choose_bn_mode", "is_batchnorm_call"]

log = logging.getLogger("hipdnn_async")

LEGACY_BN_PERSISTENT = "cudnn_legacy.bn_persistent"


def is_batchnorm_call(exc) -> bool:
    """Whether a CudnnError came from one of cuDNN's batchnorm calls (their size queries
    included), rather than from another call of the same plan."""
    return "BatchNormalization" in (getattr(exc, "call", None) or "")


def batchnorm_refused(exc) -> bool:
    """Whether a CudnnError is cuDNN refusing a batchnorm call form or mode: a batchnorm
    call's NOT_SUPPORTED or BAD_PARAM, as for the convolutions' trial runs. Any other
    status (an execution failure, an internal error, an allocation failure) is not
    about the mode and is raised as the ExecutionError it is, never cached as a decline."""
    return is_batchnorm_call(exc) and isinstance(exc.at_build(), NotSupportedError)


def choose_bn_mode(build: BuildStream, impl, match, plan, knobs, perfdb, where: str):
    """The batchnorm call form and mode of ``plan``, each checked by a trial run on
    scratch buffers; ``plan.algorithm`` names the choice and why.

    Channels-last x: only cuDNN's Ex calls with SPATIAL_PERSISTENT (training: ReLU
    fused when unclipped; backward, alone or after BN inference + DReLU:
    ``cudnnBatchNormalizationBackwardEx``). The plain calls take 1.7-4.6 ms there
    against 50-77 µs (32x64x112x112 fp16; docs/design/vendor-notes.md, "Batchnorm on
    Hopper") and are never used: where cuDNN refuses the Ex form, the engine declines.
    Other layouts: :func:`_plain_mode`.

    Parameters
    ----------
    build : BuildStream
        The provider's build stream: its handle, lock, scratch buffers and trial runs.
    impl : ProviderEngine
        The engine building ``plan`` (its perf-db key).
    match, plan, knobs, perfdb, where
        As the engine's ``build``: the matched pattern, the batchnorm plan whose ``mode``
        is set here, the resolved knobs, the perf db and the error messages' prefix.

    Raises
    ------
    NotSupportedError
        Channels-last x and cuDNN refuses the Ex call (or a backward Ex call asks for
        a reserve space, which only a TrainingEx call fills).
    """
    if not is_channels_last(match.tensors["x"]):
        return _plain_mode(build, impl, match, plan, knobs, perfdb, where)
    plan.mode = _cudnn.BATCHNORM_SPATIAL_PERSISTENT
    try:
        with build.lock:
            handle = build.handle()
            if isinstance(plan, _plans.BnTrainingPlan):
                plan.use_ex(handle)
            else:
                dyd = plan.d["z"] if "z" in plan.d else plan.d["dy"]
                reserve = plan.use_backward_ex(handle, dyd)
                if reserve:
                    raise NotSupportedError(
                        f"{where}: cudnnBatchNormalizationBackwardEx asks for a "
                        f"{reserve}-byte reserve space for channels-last x, which only "
                        "a cudnnBatchNormalizationForwardTrainingEx call fills; the plain "
                        "backward call is 20-60x slower there and is not used")
        build.trial(match, plan)
    except _cudnn.CudnnError as exc:
        if not batchnorm_refused(exc):
            raise       # another call of the plan, or not a refusal: not about the Ex form
        raise NotSupportedError(
            f"{where}: cuDNN refused its Ex batchnorm call (SPATIAL_PERSISTENT) for "
            f"channels-last x: {exc}; the plain call is 20-60x slower there and is not "
            "used") from exc
    plan.algorithm = _tuning.Algorithm(
        plan.algorithm or "SPATIAL_PERSISTENT Ex", "channels-last x: cuDNN's Ex call with "
        "SPATIAL_PERSISTENT, the only legacy form used there (the plain calls are 20-60x "
        "slower)")
    return plan

def _plain_mode(build: BuildStream, impl, match, plan, knobs, perfdb, where: str):
    """The plain calls' mode for batchnorm on layouts other than channels-last:
    SPATIAL_PERSISTENT first (measured on the H200 at batch 32, ResNet-50 shapes:
    0.15-0.84x SPATIAL's time where C*H*W is large, equal elsewhere; within the
    tolerances of float64 for centred, offset (100 + U(-1, 1)), wide and 1e4-scaled
    data, bench/results/h200_diag_bn_nchw.log), then SPATIAL, PyTorch's NCHW mode;
    SPATIAL only with ``cudnn_legacy.bn_persistent`` = 0. Without benchmarking the
    first mode a trial run accepts; with ``global.benchmarking`` = 1 the faster of
    those accepted, timed on the build stream (SPATIAL_PERSISTENT is slower on a few
    shapes, e.g. FLOAT backward 32x512x28x28: 1.13x) and kept in the perf db."""
    persistent = bool(knobs.get(LEGACY_BN_PERSISTENT, 1))
    modes = [("SPATIAL_PERSISTENT", _cudnn.BATCHNORM_SPATIAL_PERSISTENT)] if persistent else []
    modes.append(("SPATIAL", _cudnn.BATCHNORM_SPATIAL))
    candidates = [_tuning.Candidate(name, mode, plan.workspace_size) for name, mode in modes]
    bufs = build.scratch_pack(match)
    refused = {}

    def runs(c) -> bool:
        if c.name in refused:
            return False
        plan.mode = c.id
        try:
            build.trial(match, plan, bufs)
            return True
        except _cudnn.CudnnError as exc:
            if not batchnorm_refused(exc):
                raise       # another call of the plan, or not a refusal: not about the mode
            log.info("%s: batchnorm %s declined (%s)", where, c.name, exc)
            refused[c.name] = exc
            return False

    def none_left():
        return NotSupportedError(f"{where}: cuDNN refused every batchnorm mode: "
                                 + "; ".join(f"{n}: {e}" for n, e in refused.items()))

    def accepted(fitting, first_only=False):
        out = []
        for c in fitting:
            if runs(c):
                out.append(c)
                if first_only:
                    break
        if not out:
            raise none_left()
        return out

    def timer(c):
        def run(capture):
            plan.mode = c.id
            return build.time_plan(plan, bufs, capture=capture)
        return run

    def measure(fitting):
        ok = accepted(fitting)
        times, refusals = medians_alike([timer(c) for c in ok], refused=batchnorm_refused)
        refused.update((ok[i].name, exc) for i, exc in refusals.items())  # as at a trial
        timed = [(c, t) for c, t in zip(ok, times) if t is not None]
        if not timed:
            raise none_left()
        pick = _tuning.fastest([t for _, t in timed])
        return timed[pick][0], timed[pick][1], [(c.name, t) for c, t in timed]

    choice = _tuning.choose(impl, match, candidates, knobs, perfdb,
                            heuristic=lambda fitting, limit: accepted(fitting, True)[0],
                            measure=measure, policy="" if persistent else "spatial")
    chosen, hit = choice.candidate, choice.perfdb_hit
    if hit and not runs(chosen):     # stored, but refused here now
        chosen, hit = accepted(candidates, True)[0], False
    plan.mode = chosen.id
    plan.benchmarked, plan.perfdb_hit = choice.benchmarked, hit
    if choice.benchmarked:
        how = (f"the faster of {len(choice.trials)} mode(s) cuDNN accepts, timed on the "
               f"build stream ({choice.time_ms:.4f} ms)")
    elif hit:
        how = "the perf db's benchmarked choice for this problem"
    elif not persistent:
        how = f"knob '{LEGACY_BN_PERSISTENT}' = 0"
    else:
        how = "the first mode cuDNN accepts (SPATIAL_PERSISTENT, then SPATIAL)"
    if choice.perfdb_hit and not hit:
        how += f" (the perf db's {choice.candidate.name} was refused)"
    if refused:
        how += "; refused: " + ", ".join(refused)
    plan.algorithm = _tuning.Algorithm(chosen.name, how, choice.trials)
    return plan
