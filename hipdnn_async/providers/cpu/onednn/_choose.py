"""Choosing among candidates: timing them under ``global.benchmarking`` and
``plan.algorithm``'s name and reason."""
from __future__ import annotations

import logging
import math

import numpy as np
# numpy imports numpy.random lazily, at its first use: here, at the provider's import,
# not during a first tuned build, where a fork from another thread would leave the
# child waiting for that import's lock forever (found by a break-it helper)
import numpy.random  # noqa: F401

from .... import _knobs
from ...._errors import DeviceError
from ...._types import numpy_dtype
from ... import _tuning
from .._bind import allocate_workspace
from ._bnorm import Bn
from ._conv import Conv, conv_hooks
from ._plan import OnednnPlan
from ._program import ONEDNN_ENGINE_NAME

__all__ = ["benchmark_conv", "benchmark_bn", "explain"]

log = logging.getLogger("hipdnn_async")

# Benchmarking: one warm-up call per candidate, then rounds of one timed call each
# (_tuning.time_interleaved) until this many or this much time (s) per candidate.
_BENCH_RUNS = 5
_BENCH_BUDGET_S = 0.5


def _time_plans(plans, arrays) -> list:
    """The fastest of each plan's timed calls (ms) on the scratch tensors ``arrays``; one
    workspace of the largest size, from the pool executions take theirs from, serves them
    all (they run one at a time)."""
    size = max((p.workspace_size for p in plans), default=0)
    try:
        ws = allocate_workspace(size) if size else None
    except MemoryError:
        raise DeviceError(f"{ONEDNN_ENGINE_NAME}: benchmarking cannot allocate a workspace "
                          f"of {size} bytes; lower '{_knobs.WORKSPACE_SIZE_LIMIT}' or build "
                          f"without '{_knobs.BENCHMARKING}'") from None
    runs = [lambda p=p: p.run(arrays, ws if p.workspace_size else None) for p in plans]
    return _tuning.time_interleaved(runs, rounds=_BENCH_RUNS, budget_s=_BENCH_BUDGET_S)


def scratch_array(tensor) -> np.ndarray:
    """U(-1, 1) values with the tensor's dims and strides (for timing runs)."""
    from ....runtime import DeviceArray
    arr = DeviceArray(tensor.dims, numpy_dtype(tensor.data_type), tensor.strides)
    arr.view[...] = np.random.default_rng(0).uniform(-1, 1, arr.dims)
    return arr.view


def benchmark_conv(conv: Conv, fitting):
    """Time each candidate's program on scratch tensors: (fastest, its ms, trials)."""
    t = conv.match.tensors
    roles = [conv.roles.x, conv.roles.w, conv.roles.y] + ([conv.bias_role] if conv.bias_role else [])
    try:
        arrays = {r: scratch_array(t[r]) for r in roles}
    except MemoryError:
        raise DeviceError(f"{ONEDNN_ENGINE_NAME}: benchmarking conv_{conv.direction} cannot "
                          "allocate its scratch tensors; build without "
                          f"'{_knobs.BENCHMARKING}'") from None
    plans, programs = [], []
    try:
        for cand in fitting:
            # the plan each candidate would be, host work included: the RELU_FWD pass after
            # a primitive without the ReLU post-ops, the 16-bit <-> float32 conversions
            _, pd, _, variant = conv.impls[cand.id]
            program, spec = conv.program(pd, variant=variant)
            programs.append(program)
            hooks, ws_size = conv_hooks(conv, cand)      # a guarded one's check timed too
            plans.append(OnednnPlan(conv.match, program, spec, cand.name, hooks=hooks,
                                    workspace_size=ws_size))
        times = _time_plans(plans, arrays)
    finally:
        for program in programs:
            program.close()         # a candidate that raised too
    for cand, ms in zip(fitting, times):
        log.info("benchmark %s: %s %.3f ms", conv.direction, cand.name, ms)
    best = _tuning.fastest(times)
    return fitting[best], times[best], tuple((c.name, ms) for c, ms in zip(fitting, times))


def benchmark_bn(bn: Bn, fitting):
    """Time each batchnorm candidate's plan (its host work included) on scratch tensors:
    (fastest, its ms, trials)."""
    t = bn.match.tensors
    arrays = {}
    try:
        for role, tensor in t.items():
            if not tensor.is_virtual:
                arrays[role] = scratch_array(tensor)
                if math.prod(tensor.dims) == tensor.dims[1]:       # statistics: positive
                    np.abs(arrays[role], out=arrays[role])
                    arrays[role] += 0.5
    except MemoryError:
        raise DeviceError(f"{ONEDNN_ENGINE_NAME}: benchmarking batchnorm cannot allocate its "
                          f"scratch tensors; build without '{_knobs.BENCHMARKING}'") from None
    plans = []
    try:
        for cand in fitting:
            spec, _, hooks = bn.build(cand)
            plans.append(OnednnPlan(bn.match, spec.program(), spec, cand.name, hooks=hooks))
        times = _time_plans(plans, arrays)
    finally:
        for plan in plans:
            plan.program.close()
    for cand, ms in zip(fitting, times):
        log.info("benchmark batchnorm: %s %.3f ms", cand.name, ms)
    best = _tuning.fastest(times)
    return fitting[best], times[best], tuple((c.name, ms) for c, ms in zip(fitting, times))


def explain(choice, rule=None, ranked=True) -> _tuning.Algorithm:
    """``plan.algorithm``: oneDNN's implementation name and why it runs. ``ranked``: the
    candidates are in the rule's order (convolutions: its pick is the first that fits, or
    the pinned index), so the pick's rank is told; else (batchnorm: the rule picks by kind
    from candidates in the order they were built) only their number."""
    names = [c.name for c in choice.fitting]
    name = choice.candidate.name
    if choice.benchmarked:
        n = len(choice.trials)
        # candidates: oneDNN's implementations, or the engine's own rows (bn_rows)
        reason = (f"benchmarked: the fastest of {n} candidates "
                  f"(the minimum of up to {_BENCH_RUNS} runs each, timed round-robin within "
                  f"{_BENCH_BUDGET_S} s per candidate, after a warm-up)" if n != 1 else
                  f"benchmarked: the only candidate, timed for the perf db (the minimum of "
                  f"up to {_BENCH_RUNS} runs within {_BENCH_BUDGET_S} s, after a warm-up)")
    elif choice.perfdb_hit:
        reason = "perf db: the benchmarked winner remembered for this problem"
    elif rule is not None:
        reason = (f"{rule}: {_place(names, name, 'candidates', ranked)} within the "
                  f"workspace limit of {choice.limit} bytes")
    else:
        reason = (f"oneDNN's own preference order, "
                  f"{_place(names, name, 'implementations', True)} within the workspace "
                  f"limit of {choice.limit} bytes")
    # untimed choices list the candidates that fit, in order, without times
    trials = choice.trials if choice.benchmarked else tuple((n, None) for n in names)
    return _tuning.Algorithm(name, reason, trials)


def _place(names, name, what, ranked) -> str:
    """Where ``name`` stands among ``names`` (``what``: their plural), for a reason."""
    if len(names) == 1:
        return f"the only {what[:-1]}"
    if ranked:
        return f"rank {names.index(name) + 1} of the {len(names)} {what}"
    return f"chosen from the {len(names)} {what}"
