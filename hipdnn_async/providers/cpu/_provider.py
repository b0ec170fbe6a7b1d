"""The CPU provider: ``ONEDNN_ENGINE`` (``providers.cpu.onednn``: oneDNN's primitives,
first where the library loads) and ``CPU_ENGINE`` (``CpuEngine``), over NumPy/BLAS and
Cython kernels: the reference and the fallback.

Convolution patterns choose among several algorithms (``_conv.ALGORITHMS``) by heuristic
or, with ``global.benchmarking = 1``, by timing them on the real problem once and
remembering the winner in the perf db. Batchnorm patterns have one implementation each.
"""
from __future__ import annotations

import logging
import os
import platform

import numpy as np

try:        # at import, not at a first tuned build (a fork then: see onednn._choose)
    from threadpoolctl import threadpool_info
except ImportError:
    threadpool_info = None

from ... import _knobs
from ..._errors import DeviceError, ExecutionError, NotSupportedError
from ..._layout import element_extent
from ..._types import numpy_dtype
from ..._version import __version__
from ...patterns import conv_roles
from ...runtime import DeviceArray, _host_pool
from .. import _tuning
from .._base import Provider, ProviderEngine, ProviderPlan
from . import _batchnorm, _bind, _conv
from ._bind import bind_workspace, make_binder
from .onednn import OnednnEngine

__all__ = ["CpuProvider", "CpuEngine", "CPU_ENGINE_NAME"]

log = logging.getLogger("hipdnn_async")

CPU_ENGINE_NAME = "CPU_ENGINE"

# Benchmarking: one warm-up, then timed runs until this many or this much time (s).
_BENCH_RUNS = 3
_BENCH_BUDGET_S = 0.5


def conv_problem(match) -> _conv.ConvProblem:
    """The convolution problem of a convolution pattern, in the kernels' terms."""
    roles, t, conv = conv_roles(match.pattern), match.tensors, match.params["conv"]
    x, w, y = t[roles.x], t[roles.w], t[roles.y]
    return _conv.ConvProblem(
        direction=roles.direction.label, x_dims=tuple(x.dims), w_dims=tuple(w.dims),
        y_dims=tuple(y.dims), pre_padding=tuple(conv.pre_padding),
        post_padding=tuple(conv.post_padding), stride=tuple(conv.stride),
        dilation=tuple(conv.dilation), groups=conv.groups, dtype=numpy_dtype(x.data_type))


def _operands(match):
    """(a, b, out) roles of a convolution pattern, in ConvAlgorithm.run's order."""
    roles = conv_roles(match.pattern)
    return roles.inputs + (roles.output,)


class CpuEngine(ProviderEngine):
    """``CPU_ENGINE``: every pattern; convolutions choose among ``_conv.ALGORITHMS``."""

    name = CPU_ENGINE_NAME
    notes = ("all nine patterns; FLOAT/HALF/BFLOAT16 I/O accumulated in float32; any strides; "
             "batchnorm training also with running statistics; ReLU clips on every activation; "
             "NaN propagates through ReLU (a NaN input gives NaN)")
    schema1 = True   # the provider's only engine when the perf db had no engine column

    def knobs(self, match):
        if conv_roles(match.pattern) is None:
            return _tuning.engine_knobs(match)
        return _tuning.engine_knobs(match, self._candidates(match, conv_problem(match)))

    @staticmethod
    def _candidates(match, problem) -> list:
        """The applicable algorithms as candidates, in heuristic preference order; the
        id is the index in ``_conv.ALGORITHMS[direction]``."""
        found = [_tuning.Candidate(a.name, i, a.workspace_size(problem))
                 for i, a in enumerate(_conv.ALGORITHMS[problem.direction])
                 if a.applicable(problem)]
        if not found:  # "direct" is applicable everywhere; this would be a kernel bug
            raise NotSupportedError(f"{CPU_ENGINE_NAME}: no convolution algorithm applies to "
                                    f"{problem}")
        return found

    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        if conv_roles(match.pattern) is None:
            return CpuPlan(match, None, None)
        problem = conv_problem(match)
        algorithms = _conv.ALGORITHMS[problem.direction]

        def heuristic(fitting, limit):
            name = _conv.heuristic_choice(problem, limit).name
            return next(c for c in fitting if c.name == name)

        def affordable(fitting):
            # Candidates whose workspace is beyond the memory available are not timed (on
            # Linux a huge np.empty may succeed and the process be OOM-killed when it is
            # touched); "direct" needs none and always stays.
            memory = _conv.memory_budget()
            kept = [c for c in fitting if memory is None or c.workspace_bytes <= memory]
            for c in fitting:
                if c not in kept:
                    log.info("benchmark %s: skipping %s, workspace %d B is beyond the memory "
                             "available (%d B usable)", problem.direction, c.name,
                             c.workspace_bytes, memory)
            return kept or [c for c in fitting if c.workspace_bytes == 0]

        def measure(fitting):
            algo, ms, trials = _benchmark(match, problem, [algorithms[c.id] for c in fitting])
            return next(c for c in fitting if c.name == algo.name), ms, trials

        choice = _tuning.choose(self, match, self._candidates(match, problem), knobs, perfdb,
                                heuristic=heuristic, measure=measure, tunable=affordable,
                                device=self.provider.perf_device())
        plan = CpuPlan(match, problem, algorithms[choice.candidate.id])
        plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
        plan.algorithm = _explain(choice)
        return plan


class CpuProvider(Provider):
    """Runs every pattern on the host; always present."""

    # oneDNN first where it loads (it declines where it does not); CPU_ENGINE is the
    # reference and the fallback
    ENGINES = (OnednnEngine, CpuEngine)

    def __init__(self):
        self.name = self.spec = "cpu"
        self._describe = None

    def describe(self) -> dict:
        if self._describe is None:
            self._describe = {
                "device": f"cpu {platform.machine()} {_cpu_model()}".strip(),
                "library_versions": f"hipdnn_async {__version__}; numpy {np.__version__}",
            }
        return self._describe

    def perf_device(self) -> str:
        """The perf-db key's device: CPU model and NumPy's BLAS threads *now* (a winner
        tuned single-threaded is not reused multi-threaded; threadpoolctl changes the
        count at run time, so it is read at every tuning build)."""
        return f"{self.describe()['device']}; {_blas_threads()}"

    def binder(self, tensor, *, output: bool, filter: bool = False):
        return make_binder(tensor, output=output, filter=filter)

    def bind_workspace(self, nbytes: int, given, *, where: str):
        return bind_workspace(nbytes, given, where=where)

    def release_idle(self) -> None:
        # the host workspaces the pool keeps (up to 1 GiB); blocks in use stay theirs
        _host_pool.release_pooled()

    def empty(self, dims, dtype, strides):
        try:
            return DeviceArray(dims, dtype, strides, "cpu")
        except (MemoryError, ValueError) as exc:
            raise DeviceError(f"Device.empty: cannot allocate dims {tuple(dims)} of "
                              f"{np.dtype(dtype).name} on 'cpu': {exc}") from None


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else platform.processor(), else ''."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Model")):      # x86 / arm64
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def _blas_threads() -> str:
    """NumPy's BLAS and its thread count now, e.g. ``"blas openblas 2 threads"``."""
    if threadpool_info is None:
        # Without threadpoolctl nothing can change the count after start-up: the
        # environment read when the BLAS loaded (OpenBLAS / OpenMP / MKL) decides it.
        env = next((f"{v}={os.environ[v]}" for v in ("OPENBLAS_NUM_THREADS",
                    "OMP_NUM_THREADS", "MKL_NUM_THREADS") if os.environ.get(v)), None)
        return f"blas threads {env or f'default of {os.cpu_count()} cores'}"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    mine = [i for i in blas if "numpy" in (i.get("filepath") or "")] or blas
    if not mine:
        return "blas threads unknown"
    return "blas " + ", ".join(f"{i.get('internal_api')} {i.get('num_threads')} threads"
                               for i in mine)


def _scratch(tensor) -> np.ndarray:
    """A buffer with the tensor's dims and strides, filled with U(-1, 1) (for timing runs)."""
    arr = DeviceArray(tensor.dims, numpy_dtype(tensor.data_type), tensor.strides)
    arr.view[...] = np.random.default_rng(0).uniform(-1, 1, arr.dims)
    return arr.view


def _nbytes(tensor) -> int:
    return element_extent(tuple(tensor.dims), tuple(tensor.strides)) * \
        numpy_dtype(tensor.data_type).itemsize


def _explain(choice) -> _tuning.Algorithm:
    """``plan.algorithm`` of a CPU convolution: the chosen name, why (as the GPU engines
    say it) and the candidates considered, in preference order."""
    name = choice.candidate.name
    names = [c.name for c in choice.fitting]
    if choice.benchmarked:
        # trials without a time: candidates whose memory could not be allocated (_benchmark)
        untimed = [n for n, ms in choice.trials if ms is None]
        timed = len(choice.trials) - len(untimed) if choice.trials else len(names)
        reason = (f"benchmarked: the fastest of {timed} timed "
                  f"(the minimum of up to {_BENCH_RUNS} runs each, timed round-robin within "
                  f"{_BENCH_BUDGET_S} s per candidate, after a warm-up)")
        if untimed:
            reason += "; not timed, their memory could not be allocated: " + ", ".join(untimed)
        trials = choice.trials
    else:
        rank = names.index(name) + 1          # the choice is always one of the fitting
        reason = ("perf db: the benchmarked winner remembered for this problem"
                  if choice.perfdb_hit else
                  "CPU heuristic (preference order of bench/bench_conv_algorithms.py), "
                  f"rank {rank} of the {len(names)} algorithms within the workspace limit "
                  f"of {choice.limit} bytes")
        trials = tuple((n, None) for n in names)
    return _tuning.Algorithm(name, reason, trials)


def _benchmark(match, problem, algorithms):
    """Time each algorithm on the real problem; return (fastest, its time in ms, the
    (name, ms) of every candidate, ms None where it could not be allocated).

    A candidate whose workspace (or whose own temporaries) cannot be allocated is skipped;
    ``direct`` needs no workspace, so something is always timed unless the problem's own
    tensors do not fit (a DeviceError naming the bytes).
    """
    try:
        a, b, out = (_scratch(match.tensors[r]) for r in _operands(match))
    except MemoryError:
        need = sum(_nbytes(match.tensors[r]) for r in _operands(match))
        raise DeviceError(f"CPU_ENGINE: benchmarking conv_{problem.direction} needs {need} bytes "
                          "of scratch tensors, which cannot be allocated; build without "
                          f"'{_knobs.BENCHMARKING}'") from None
    # one workspace, the largest that can be allocated, serves every candidate (they run
    # one at a time); a candidate needing more, or whose own temporaries cannot be
    # allocated in its warm-up call, is skipped
    sizes = [algo.workspace_size(problem) for algo in algorithms]
    ws, ws_bytes = None, 0
    for size in sorted(set(sizes), reverse=True):
        try:
            ws, ws_bytes = (_bind.allocate_workspace(size) if size else None), size
            break
        except MemoryError:
            continue
    runs = {}       # algorithm name -> its timed call, for those that could run
    for algo, size in zip(algorithms, sizes):
        call = (lambda algo=algo, w=ws if size else None: algo.run(problem, a, b, out, w))
        try:
            if size > ws_bytes:
                raise MemoryError
            call()                                                   # warm-up
            runs[algo.name] = call
        except MemoryError:
            log.info("benchmark %s: skipping %s, its workspace of %d B (or temporaries) "
                     "cannot be allocated", problem.direction, algo.name, size)
    if not runs:
        raise DeviceError(f"CPU_ENGINE: benchmarking conv_{problem.direction}: no candidate "
                          f"({', '.join(a.name for a in algorithms)}) could allocate its "
                          f"memory; lower '{_knobs.WORKSPACE_SIZE_LIMIT}' or the batch size")
    times = dict(zip(runs, _tuning.time_interleaved(list(runs.values()), rounds=_BENCH_RUNS,
                                                    budget_s=_BENCH_BUDGET_S, warmup=False)))
    for name, ms in times.items():
        log.info("benchmark %s: %s %.3f ms", problem.direction, name, ms)
    best = min(times, key=times.get)        # the first of equal times: the heuristic's order
    return (next(a for a in algorithms if a.name == best), times[best],
            tuple((algo.name, times.get(algo.name)) for algo in algorithms))


class CpuPlan(ProviderPlan):
    """A CPU plan: the pattern, and for convolutions the chosen algorithm."""

    def __init__(self, match, problem, algo):
        self.match = match
        self.problem = problem
        self.algo = algo
        self.algorithm = algo.name if algo is not None else None
        self.workspace_size = algo.workspace_size(problem) if algo is not None else 0
        self._run = getattr(self, "_run_" + match.pattern.name.lower())

    def run(self, buffers, workspace) -> None:
        # IEEE results (overflow to inf when rounding to HALF, inf - inf = NaN) are the
        # answer, as on a GPU; NumPy must not turn them into warnings (or, under -W error,
        # into exceptions) on a worker thread.
        with np.errstate(all="ignore"):
            try:
                self._run(buffers, workspace)
            except MemoryError as exc:   # the kernels' own temporaries (packed operands)
                raise ExecutionError(
                    f"CPU_ENGINE: {self.match.pattern.name} (algorithm {self.algorithm}): out "
                    f"of host memory ({exc or 'MemoryError'}); lower the batch size, or "
                    f"'{_knobs.WORKSPACE_SIZE_LIMIT}' (workspace {self.workspace_size} bytes)"
                ) from None

    # -- convolutions ------------------------------------------------------------------
    def _conv(self, b, workspace, out=None):
        ra, rb, rout = _operands(self.match)
        self.algo.run(self.problem, b[ra], b[rb], b[rout] if out is None else out, workspace)

    _run_conv_fprop = _run_conv_dgrad = _run_conv_wgrad = _conv

    def _run_conv_fprop_bias_relu(self, b, workspace):
        # The conv output is a virtual tensor of the graph's intermediate type: compute
        # it in that type, then bias + ReLU into y (the seed's "Detailed requirements").
        conv_y = self.match.nodes[0].outputs["y"]
        tmp = np.empty(tuple(conv_y.dims), numpy_dtype(conv_y.data_type))
        self._conv(b, workspace, out=tmp)
        p = self.match.params
        _batchnorm.add_bias_relu(tmp, b.get("bias"), b["y"],
                                 p.get("relu_lower_clip"), p.get("relu_upper_clip"))

    # -- batchnorm ---------------------------------------------------------------------
    def _run_bn_inference_variance(self, b, workspace):
        _batchnorm.bn_inference_variance(b["x"], b["mean"], b["variance"], b["scale"], b["bias"],
                                         self.match.params["epsilon"], b["y"])

    def _run_bn_training(self, b, workspace, relu=None):
        p = self.match.params
        stats = {r: b.get(r) for r in ("mean", "inv_variance")}
        for role, arr in stats.items():
            if arr is None:  # virtual statistics: scratch the kernel may write
                stats[role] = np.empty(tuple(self.match.tensors[role].dims), np.float32)
        _batchnorm.bn_training(
            b["x"], b["scale"], b["bias"], p["epsilon"], b["y"], stats["mean"],
            stats["inv_variance"], relu=relu, momentum=p.get("momentum"),
            prev_running_mean=b.get("prev_running_mean"),
            prev_running_variance=b.get("prev_running_variance"),
            next_running_mean=b.get("next_running_mean"),
            next_running_variance=b.get("next_running_variance"))

    def _run_bn_training_relu(self, b, workspace):
        p = self.match.params
        self._run_bn_training(b, workspace, relu=(p.get("relu_lower_clip"), p.get("relu_upper_clip")))

    def _run_bn_backward(self, b, workspace, drelu=None):
        _batchnorm.bn_backward(b["dy"], b["x"], b["scale"], b["mean"], b["inv_variance"],
                               b["dx"], b["dscale"], b["dbias"], drelu=drelu)

    def _run_bn_inference_drelu_backward(self, b, workspace):
        p = self.match.params
        self._run_bn_backward(b, workspace,
                              drelu=(b["bias"], p.get("relu_lower_clip"), p.get("relu_upper_clip")))
