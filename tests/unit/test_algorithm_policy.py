"""The algorithm policy's device options (issue 11 item 4): ``Device(deterministic=True)``
and ``Device(allow_tf32=True)`` make 1 the default of every offered knob named
``<engine>.deterministic`` / ``<engine>.allow_tf32``; a value given in ``knobs=`` wins;
other knobs and engines without such knobs are unchanged; ``plan.algorithm`` is a str
with ``.reason``. The cuDNN graph engine's own policy is tested in
tests/unit/providers/cudnn/test_graph_plan.py and, on the H200, tests/gpu."""
import contextlib
import pickle
import statistics

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._tuning import Algorithm


def _graph():
    g = hd.Graph(name="policy")
    x = g.tensor(dims=(1, 4, 5, 5), name="x")
    w = g.tensor(dims=(4, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g


def _with_knobs(dev, monkeypatch, *extra):
    impl = dev.provider._engine_impls()[0]
    base = impl.knobs

    def knobs(match):
        return list(base(match)) + list(extra)
    monkeypatch.setattr(impl, "knobs", knobs)
    return impl


DET = hd.Knob("cpu_test.deterministic", "int64", 0, 0, 1, "test")
TF32 = hd.Knob("cpu_test.allow_tf32", "int64", 0, 0, 1, "test")


@pytest.mark.parametrize("option,knob", [("deterministic", DET), ("allow_tf32", TF32)])
def test_a_device_option_sets_the_default_of_its_knobs(monkeypatch, option, knob):
    with hd.Device("cpu", **{option: True}) as dev:
        _with_knobs(dev, monkeypatch, DET, TF32)
        plan = dev.build_sync(_graph())
        other = TF32 if knob is DET else DET
        assert plan.knobs[knob.id] == 1 and plan.knobs[other.id] == 0, plan.knobs
        assert plan.knobs["global.benchmarking"] == 0
        again = dev.build_sync(_graph(), knobs={knob.id: 0})      # the caller's value wins
        assert again.knobs[knob.id] == 0
    with hd.Device("cpu") as dev:
        _with_knobs(dev, monkeypatch, DET, TF32)
        assert dev.build_sync(_graph()).knobs[knob.id] == 0


def test_engines_without_the_knobs_are_unchanged():
    with hd.Device("cpu", deterministic=True, allow_tf32=True) as dev:
        plan = dev.build_sync(_graph())
        assert not any(k.endswith((".deterministic", ".allow_tf32")) for k in plan.knobs)
        x = np.ones((1, 4, 5, 5), np.float32)
        y = np.zeros((1, 4, 5, 5), np.float32)
        plan.execute_sync({"x": x, "w": np.ones((4, 4, 3, 3), np.float32), "y": y})
        assert y[0, 0, 2, 2] == 36.0          # 4 channels x 3 x 3 ones


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_the_options_take_bools(bad):
    with pytest.raises(hd.DeviceError, match="need True or False"):
        hd.Device("cpu", deterministic=bad)


def test_algorithm_is_a_name_with_a_reason():
    a = Algorithm("eng62 k2=3", "cuDNN heuristics mode A, rank 1 of the 3 configs ...")
    assert a == "eng62 k2=3" and isinstance(a, str) and a.split(" (")[0] == "eng62 k2=3"
    b = pickle.loads(pickle.dumps(a))
    assert b == a and b.reason == a.reason and type(b) is Algorithm
    assert Algorithm("x").reason == ""


def test_cpu_algorithm_says_why_as_the_gpu_engines_do(tmp_path):
    # code written against a GPU plan reads plan.algorithm.reason / .trials: the CPU's
    # convolution plans carry them too (heuristic, benchmarked, perf db hit)
    from hipdnn_async.providers.cpu import _conv
    from hipdnn_async.providers.cpu._provider import conv_problem
    db = str(tmp_path / "perfdb.sqlite3")
    with hd.Device("cpu", perfdb=db) as dev:
        plan = dev.build_sync(_graph(), engine="CPU_ENGINE")
        a = plan.algorithm
        assert isinstance(a, Algorithm) and a.reason.startswith("CPU heuristic"), a.reason
        want = _conv.heuristic_choice(conv_problem(plan.match), 2 ** 62).name
        assert str(a) == want and a.trials[0][0] == want and "rank 1 of" in a.reason
        assert all(ms is None for _, ms in a.trials)
        tuned = dev.build_sync(_graph(), knobs={"global.benchmarking": 1},
                               engine="CPU_ENGINE").algorithm
        assert tuned.reason.startswith("benchmarked") and tuned.trials
        timed = {n: ms for n, ms in tuned.trials if ms is not None}
        assert str(tuned) in timed and timed[str(tuned)] == min(timed.values())
    with hd.Device("cpu", perfdb=db) as dev:
        hit = dev.build_sync(_graph(), knobs={"global.benchmarking": 1},
                               engine="CPU_ENGINE")
        assert hit.perfdb_hit and hit.algorithm == tuned
        assert hit.algorithm.reason.startswith("perf db"), hit.algorithm.reason


# ---------------------------------------------------------------------------------------
# Benchmarking (issue 11, bench_gpu's 37.9x case): the timing of candidates on the build
# stream, and which candidate a benchmark keeps. A fake runtime with one clock per stream
# stands in for the GPU: a launch advances its stream's clock by the kernel's duration, an
# event takes its stream's time, and an elapsed time can only be read once the event has
# completed (a synchronize), as cudaEventElapsedTime returns cudaErrorNotReady before.

import types  # noqa: E402

from hipdnn_async.providers import _tuning  # noqa: E402
from hipdnn_async.providers._gpu import _trial  # noqa: E402


class ClockRuntime:
    def __init__(self):
        self.clock, self.events, self.done, self.calls = {}, {}, set(), []
        self._next = iter(range(0x100, 0x10000))

    def stream_create(self):
        s = next(self._next)
        self.clock[s] = 0.0
        return s

    def kernel(self, stream, ms):
        self.calls.append(("kernel", stream, ms))
        self.clock[stream] += ms

    def event_create(self, flags):
        assert flags == 0, "timing events need flags 0 (cudaEventDefault)"
        e = next(self._next)
        self.calls.append(("event_create", e))
        return e

    def event_record(self, event, stream):
        self.calls.append(("event_record", event, stream))
        self.events[event] = (stream, self.clock[stream])
        self.done.discard(event)

    def _complete(self, stream):
        self.done.update(e for e, (s, _) in self.events.items() if s == stream)

    def event_synchronize(self, event):
        self.calls.append(("event_synchronize", event))
        self._complete(self.events[event][0])

    def stream_synchronize(self, stream):
        self.calls.append(("stream_synchronize", stream))
        self._complete(stream)

    def event_elapsed_time(self, start, end):
        if not {start, end} <= self.done:
            raise RuntimeError("cudaErrorNotReady: elapsed time read before the events completed")
        (s0, t0), (s1, t1) = self.events[start], self.events[end]
        assert s0 == s1
        return t1 - t0

    def event_destroy(self, event):
        self.calls.append(("event_destroy", event))


def _build_stream(rt):
    # a GpuContext's surface: using() makes its device current (a no-op here)
    ctx = types.SimpleNamespace(activate=lambda: None, using=contextlib.nullcontext,
                                pooled=False, runtime=rt)
    bound = {}

    def make_handle(stream):
        bound["stream"] = stream
        return types.SimpleNamespace(ptr=0x5EED, close=lambda: None)
    return _trial.BuildStream(ctx, "cuda:0", "cudnn", make_handle), bound


def test_time_runs_times_the_build_stream_after_warm_up_and_gives_each_run():
    rt = ClockRuntime()
    b, bound = _build_stream(rt)
    # the first call compiles (NVRTC) and the second loads a module lazily: warm-up only
    durations = iter([40.0, 3.0, 1.0, 1.0, 1.1, 0.9, 1.0, 9.0, 1.0, 1.0])
    with b.lock:
        b.handle()
        times = b.time_runs(lambda: rt.kernel(bound["stream"], next(durations)))
    assert times == pytest.approx([1.0, 1.1, 0.9, 1.0, 9.0, 1.0, 1.0])
    assert statistics.median(times) == pytest.approx(1.0)        # the 9 ms stall does not count
    records = [c for c in rt.calls if c[0] == "event_record"]
    assert len(records) == 2 * _trial.TIMED_RUNS and {c[2] for c in records} == {b.stream}
    # the warm-ups are waited for before the first timing event
    first_record = rt.calls.index(records[0])
    assert ("stream_synchronize", b.stream) in rt.calls[:first_record]
    made = {c[1] for c in rt.calls if c[0] == "event_create"}
    assert made == {c[1] for c in rt.calls if c[0] == "event_destroy"}


class GraphClockRuntime(ClockRuntime):
    """ClockRuntime with stream capture: a direct launch costs the device ``gap`` ms of
    idle time first (the host enqueues slower than a short kernel runs), a launch of a
    captured graph runs its kernels back to back (one gap per graph launch)."""

    def __init__(self, gap=0.0, refuse_capture=False, upload=0.0):
        super().__init__()
        self.gap, self.refuse_capture, self.upload = gap, refuse_capture, upload
        self.uploaded = set()
        self.capturing, self.graphs, self.execs, self.cleared = None, {}, {}, 0

    def kernel(self, stream, ms):
        if self.capturing is not None and stream == self.capturing[0]:
            if self.refuse_capture:
                raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED during capture")
            self.capturing[1].append(ms)
            return
        self.clock[stream] += self.gap
        super().kernel(stream, ms)

    def stream_begin_capture(self, stream):
        self.calls.append(("begin_capture", stream))
        self.capturing = (stream, [])

    def end_capture(self, stream):
        stream_, kernels = self.capturing
        self.capturing = None
        g = next(self._next)
        self.graphs[g] = kernels
        return g

    def graph_instantiate(self, graph):
        e = next(self._next)
        self.execs[e] = list(self.graphs[graph])
        return e

    def graph_destroy(self, graph):
        self.calls.append(("graph_destroy", graph))

    def graph_exec_destroy(self, graph_exec):
        self.calls.append(("graph_exec_destroy", graph_exec))

    def graph_launch(self, graph_exec, stream):
        # the first launch of an executable graph also uploads it (``upload`` ms)
        self.calls.append(("graph_launch", graph_exec, stream))
        first = graph_exec not in self.uploaded
        self.uploaded.add(graph_exec)
        self.clock[stream] += self.gap + sum(self.execs[graph_exec]) + (self.upload if first else 0)

    def clear_last_error(self):
        self.cleared += 1


def test_time_runs_times_a_captured_graph_so_host_launch_gaps_do_not_count():
    # 0.011 ms kernels behind 0.02 ms host gaps: direct event timing would say 0.031; the
    # graph's first launch (its upload, 0.5 ms here) is not a sample
    rt = GraphClockRuntime(gap=0.02, upload=0.5)
    b, bound = _build_stream(rt)
    with b.lock:
        b.handle()
        times = b.time_runs(lambda: rt.kernel(bound["stream"], 0.011))
    per_graph_gap = 0.02 / _trial.GRAPH_REPEATS
    assert times == pytest.approx([0.011 + per_graph_gap] * _trial.TIMED_RUNS)
    assert times.captured
    launches = [c for c in rt.calls if c[0] == "graph_launch"]
    assert len(launches) == _trial.TIMED_RUNS + 1 and {c[2] for c in launches} == {b.stream}
    # the untimed upload launch comes before the first timing event
    first_record = next(i for i, c in enumerate(rt.calls) if c[0] == "event_record")
    assert rt.calls.index(launches[0]) < first_record
    assert [c[0] for c in rt.calls if c[0].startswith("graph_")].count("graph_exec_destroy") == 1
    assert ("graph_destroy", next(iter(rt.graphs))) in rt.calls


def test_time_runs_falls_back_to_direct_launches_where_capture_is_refused():
    rt = GraphClockRuntime(refuse_capture=True)
    b, bound = _build_stream(rt)
    with b.lock:
        b.handle()
        times = b.time_runs(lambda: rt.kernel(bound["stream"], 1.0))
    assert times == pytest.approx([1.0] * _trial.TIMED_RUNS) and not times.captured
    assert rt.capturing is None and rt.cleared == 1          # capture ended, error reset
    assert not [c for c in rt.calls if c[0] == "graph_launch"]


def test_time_runs_ends_the_capture_when_a_launch_is_interrupted():
    # Ctrl-C (or any BaseException) inside a captured launch: the build stream must not
    # stay capturing, or every later trial run's synchronize on it fails
    rt = GraphClockRuntime()
    b, bound = _build_stream(rt)
    n = iter(range(100))

    def launch():
        if next(n) == _trial.WARMUP_RUNS + 2:          # the third launch of the capture
            raise KeyboardInterrupt
        rt.kernel(bound["stream"], 1.0)
    with b.lock:
        b.handle()
        with pytest.raises(KeyboardInterrupt):
            b.time_runs(launch)
    assert rt.capturing is None, "the build stream was left capturing"
    assert [c[0] for c in rt.calls].count("graph_destroy") == 1   # the partial graph


@pytest.mark.parametrize("capture", [True, False])
@pytest.mark.parametrize("exc", [RuntimeError("CUDNN_STATUS_NOT_SUPPORTED"), KeyboardInterrupt])
def test_time_runs_waits_for_the_build_stream_before_it_raises(capture, exc):
    # a launch fails at the 4th timed sample: the executions enqueued before it may still
    # run, on the caller's buffers and workspace, which the caller frees (stream-ordered
    # on another stream) as soon as time_runs raises; a benchmark goes on to the next
    # candidate. time_runs waits for its stream first, as trial() does
    rt = GraphClockRuntime()
    b, bound = _build_stream(rt)
    state = {"n": 0, "graph": False}

    def launch():
        if rt.capturing is None:
            state["n"] += 1
            if state["n"] == _trial.WARMUP_RUNS + 4:
                raise exc
        rt.kernel(bound["stream"], 1.0)
    if capture:       # the graph's launch fails instead (its 4th timed sample)
        real = rt.graph_launch

        def graph_launch(graph_exec, stream):
            state["n"] += 1
            if state["n"] == _trial.WARMUP_RUNS + 1 + 4:      # + its untimed upload
                raise exc
            real(graph_exec, stream)
        rt.graph_launch = graph_launch
    with b.lock:
        b.handle()
        with pytest.raises(type(exc) if isinstance(exc, BaseException) else exc):
            b.time_runs(launch, capture=capture)
    last_work = max(i for i, c in enumerate(rt.calls)
                    if c[0] in ("event_record", "graph_launch", "kernel"))
    assert ("stream_synchronize", b.stream) in rt.calls[last_work + 1:], rt.calls[last_work:]


def test_time_runs_without_capture_times_direct_launches():
    rt = GraphClockRuntime(gap=0.02)
    b, bound = _build_stream(rt)
    with b.lock:
        b.handle()
        times = b.time_runs(lambda: rt.kernel(bound["stream"], 0.011), capture=False)
    assert times == pytest.approx([0.031] * _trial.TIMED_RUNS) and not times.captured
    assert not [c for c in rt.calls if c[0] in ("begin_capture", "graph_launch")]


def test_a_benchmark_times_every_candidate_alike_when_one_cannot_be_captured():
    # candidate 1's launches cannot be captured: timed directly it pays the host gap
    # (0.02 ms) that graph launches of candidates 0 and 2 do not; compared so, the slower
    # kernel (0.011 + 0.02 > 0.025 ms) would lose for the wrong reason or a slow one win
    rt = GraphClockRuntime(gap=0.02)
    b, bound = _build_stream(rt)
    kernels = [0.025, 0.011, 0.030]

    def timer(i):
        def run(capture):
            rt.refuse_capture = i == 1
            try:
                return b.time_runs(lambda: rt.kernel(bound["stream"], kernels[i]),
                                   capture=capture)
            finally:
                rt.refuse_capture = False
        return run
    calls = []

    def counted(i):
        inner = timer(i)
        return lambda capture: calls.append((i, capture)) or inner(capture)
    with b.lock:
        b.handle()
        medians, refusals = _trial.medians_alike([counted(i) for i in range(3)])
    # all three by direct launches: the same 0.02 ms gap on each
    assert medians == pytest.approx([k + 0.02 for k in kernels]) and refusals == {}
    assert _tuning.fastest(medians) == 1
    # the captured two were timed again; candidate 1's direct samples were kept
    assert calls == [(0, True), (1, True), (2, True), (0, False), (2, False)]


def test_medians_alike_gives_none_for_a_refused_candidate_and_raises_the_rest():
    ok = lambda capture: _trial.Samples([2.0, 1.0, 3.0], captured=capture)   # noqa: E731

    def refused(capture):
        raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")

    def broken(capture):
        raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
    is_refusal = lambda exc: "NOT_SUPPORTED" in str(exc)                    # noqa: E731
    medians, refusals = _trial.medians_alike([ok, refused, ok], refused=is_refusal)
    assert medians == [2.0, None, 2.0]
    assert list(refusals) == [1] and "NOT_SUPPORTED" in str(refusals[1])
    with pytest.raises(RuntimeError, match="EXECUTION_FAILED"):
        _trial.medians_alike([ok, broken], refused=is_refusal)


@pytest.mark.parametrize("fail_at", [1, 2, 5])
def test_time_runs_destroys_every_event_it_made_when_one_cannot_be_made(fail_at):
    # an event_create failing part-way (even the second of a run's pair) leaks nothing
    rt = ClockRuntime()
    b, bound = _build_stream(rt)
    real, made = rt.event_create, []

    def event_create(flags):
        if len(made) + 1 == fail_at:
            raise RuntimeError("cudaErrorMemoryAllocation")
        made.append(real(flags))
        return made[-1]
    rt.event_create = event_create
    with b.lock:
        b.handle()
        with pytest.raises(RuntimeError, match="MemoryAllocation"):
            b.time_runs(lambda: rt.kernel(bound["stream"], 1.0))
    assert len(made) == fail_at - 1
    assert sorted(made) == sorted(c[1] for c in rt.calls if c[0] == "event_destroy")


@pytest.mark.parametrize("times,kept", [
    ([1.0, 0.99, 1.2], 0),          # within the noise: the heuristic's choice stays
    ([1.0, 0.5, 0.7], 1),           # clearly faster: it wins
    ([1.0, 1.5, 0.98], 0),          # 2%: inside the 3% margin
    ([1.0, 1.5, 0.95], 2),          # 5%: past it
    ([float("nan"), 2.0, 3.0], 1),  # the heuristic's choice could not be timed
    ([1.0, float("nan"), -1.0, float("inf")], 0),   # unusable times never win
    ([float("nan")], 0),
])
def test_a_benchmark_keeps_the_heuristic_choice_unless_another_is_clearly_faster(times, kept):
    assert _tuning.fastest(times) == kept


def test_fastest_needs_candidates():
    with pytest.raises(ValueError):
        _tuning.fastest([])


# The graph engine's benchmark over scripted candidates: which are timed, which is kept.

from hipdnn_async.providers.cudnn import _graph as cudnn_graph, _graph_plan  # noqa: E402


class _Plan:
    def __init__(self, name):
        self.algorithm = name


def _graph_engine(monkeypatch, times, declined=()):
    eng = cudnn_graph.CudnnGraphEngine(build=None, describe=lambda: {})
    timed = []
    monkeypatch.setattr(eng, "_verified", lambda be, m, spec, cand, bufs, limit: (
        (None, "finalize: NOT_SUPPORTED") if cand.index in declined else (_Plan(f"eng{cand.index}"), "")))

    def fake_time(plan, bufs, capture=True):
        timed.append(plan.algorithm)
        t = times[int(plan.algorithm[3:])]
        if isinstance(t, Exception):
            raise t
        return _trial.Samples([t], captured=capture)
    monkeypatch.setattr(eng, "_time", fake_time)
    be = types.SimpleNamespace(NUMERICAL_NOTE_TENSOR_CORE=1, NUMERICAL_NOTE_NONDETERMINISTIC=2)
    cands = [_graph_plan.Candidate(None, i, frozenset(), frozenset(), 0, "A")
             for i in range(len(times))]
    return eng, be, [("spec", "graph", cands)], timed


def test_graph_benchmark_keeps_the_heuristic_first_within_the_noise(monkeypatch):
    eng, be, pools, timed = _graph_engine(monkeypatch, [0.120, 0.119, 4.5, 0.2])
    plan, cand, ms = eng._benchmark(be, None, pools, {}, None, "t")
    assert plan.algorithm == "eng0" and cand.index == 0 and ms == 0.120
    assert plan.algorithm.trials == (("eng0", 0.120), ("eng1", 0.119), ("eng2", 4.5),
                                     ("eng3", 0.2))
    assert "heuristic's choice, kept" in plan.algorithm.reason


def test_graph_benchmark_takes_a_clearly_faster_config(monkeypatch):
    eng, be, pools, timed = _graph_engine(monkeypatch, [3.9, 0.29, 0.5], declined={1})
    plan, cand, ms = eng._benchmark(be, None, pools, {}, None, "t")
    assert plan.algorithm == "eng2" and ms == 0.5 and timed == ["eng0", "eng2"]
    assert "the heuristic's choice took 3.9000 ms" in plan.algorithm.reason


def test_graph_benchmark_declines_a_config_refused_while_timed(monkeypatch):
    # eng0 passed its trial run but cuDNN refuses it at a timed run: declined like a
    # refusal at the trial, and the benchmark goes on with the others
    refusal = hd.NotSupportedError("CUDNN_STATUS_NOT_SUPPORTED at execute")
    eng, be, pools, timed = _graph_engine(monkeypatch, [refusal, 0.4, 0.395])
    plan, cand, ms = eng._benchmark(be, None, pools, {}, None, "t")
    assert plan.algorithm == "eng1" and ms == 0.4
    assert [n for n, _ in plan.algorithm.trials] == ["eng1", "eng2"]
    broken = hd.ExecutionError("CUDNN_STATUS_EXECUTION_FAILED")
    eng, be, pools, timed = _graph_engine(monkeypatch, [0.4, broken])
    with pytest.raises(hd.ExecutionError):
        eng._benchmark(be, None, pools, {}, None, "t")
    eng, be, pools, timed = _graph_engine(monkeypatch, [refusal])
    with pytest.raises(hd.NotSupportedError, match="refused while timed"):
        eng._benchmark(be, None, pools, {}, None, "t")


def test_graph_benchmark_reason_names_a_heuristic_choice_refused_while_timed(monkeypatch):
    # eng0, the heuristic's choice (it passed its trial run: a build without benchmarking
    # runs it), is refused while timed; eng1 is kept within the noise of eng2. The reason
    # must not call eng1 "the heuristic's choice", and must say what was refused and why
    refusal = hd.NotSupportedError("CUDNN_STATUS_NOT_SUPPORTED at execute")
    eng, be, pools, timed = _graph_engine(monkeypatch, [refusal, 0.4, 0.395])
    plan, cand, ms = eng._benchmark(be, None, pools, {}, None, "t")
    assert plan.algorithm == "eng1"
    reason = plan.algorithm.reason
    assert "heuristic's choice" not in reason, reason
    assert "the first config timed in heuristic order (engine 1), kept" in reason, reason
    assert "refused while timed: engine 0 (CUDNN_STATUS_NOT_SUPPORTED at execute)" in reason, \
        reason
    # a clearly faster one taken: the first timed is named by its engine, with its time
    eng, be, pools, timed = _graph_engine(monkeypatch, [refusal, 0.4, 0.1])
    plan, cand, ms = eng._benchmark(be, None, pools, {}, None, "t")
    assert plan.algorithm == "eng2"
    assert "the first config timed in heuristic order (engine 1) took 0.4000 ms" in \
        plan.algorithm.reason, plan.algorithm.reason
    assert "heuristic's choice" not in plan.algorithm.reason


def test_graph_benchmark_does_not_take_a_runtime_failure_for_a_config_refused(monkeypatch):
    # the CUDA runtime failing under the timing (an event call's cudaErrorNotSupported is a
    # GpuNotSupportedError, a NotSupportedError) is not cuDNN refusing eng0: declining eng0
    # for it would store eng1 in the perf db as the benchmark's winner. It propagates
    from hipdnn_async._errors import GpuNotSupportedError
    failure = GpuNotSupportedError("cudaEventElapsedTime failed: cudaErrorNotSupported (801)",
                                   status=801, status_name="cudaErrorNotSupported",
                                   call="cudaEventElapsedTime")
    eng, be, pools, timed = _graph_engine(monkeypatch, [failure, 0.4])
    with pytest.raises(GpuNotSupportedError, match="cudaEventElapsedTime"):
        eng._benchmark(be, None, pools, {}, None, "t")


def test_graph_benchmark_says_why_a_config_was_refused_while_timed(monkeypatch):
    # every config that passed its trial is refused at a timed run: the error names each
    # and gives cuDNN's own words, as a refusal at the trial run does ("trial run: ...")
    refusals = [hd.NotSupportedError(f"cudnnBackendExecute failed: CUDNN_STATUS_NOT_SUPPORTED "
                                     f"(3000): engine {i} cannot run this layout")
                for i in range(2)]
    eng, be, pools, timed = _graph_engine(monkeypatch, refusals)
    with pytest.raises(hd.NotSupportedError) as err:
        eng._benchmark(be, None, pools, {}, None, "CUDNN_GRAPH_ENGINE (CONV_FPROP)")
    msg = str(err.value)
    assert msg.startswith("CUDNN_GRAPH_ENGINE (CONV_FPROP): "), msg
    for i in range(2):
        assert f"engine {i}: refused while timed: cudnnBackendExecute failed: " \
               f"CUDNN_STATUS_NOT_SUPPORTED (3000): engine {i} cannot run this layout" in msg, msg


def test_graph_benchmark_times_at_least_8_configs_as_pytorch_does(monkeypatch):
    n = 24
    eng, be, pools, timed = _graph_engine(monkeypatch, [1.0] * (n - 1) + [0.1])
    plan, *_ = eng._benchmark(be, None, pools, {}, None, "t")
    assert 8 <= cudnn_graph._BENCH_CANDIDATES == len(timed) < n
    assert timed == [f"eng{i}" for i in range(len(timed))]     # in heuristic order
    assert plan.algorithm == "eng0"


def test_graph_time_is_the_median_on_the_build_stream_through_the_build_handle(monkeypatch):
    rt = ClockRuntime()
    b, bound = _build_stream(rt)
    b.context.runtime = rt
    eng = cudnn_graph.CudnnGraphEngine(build=b, describe=lambda: {})
    monkeypatch.setattr(cudnn_graph, "GpuArray", lambda dims, *a: types.SimpleNamespace(ptr=0x9000))
    durations = iter([50.0, 0.2, 0.2] + [0.2, 0.21, 0.19, 5.0, 0.2, 0.2, 0.2])
    handles = []

    def execute(handle, plan, uids, pack, ws):
        handles.append(handle)
        rt.kernel(bound["stream"], next(durations))     # the handle is bound to this stream
    plan = types.SimpleNamespace(workspace_size=0, _cudnn_ws=0, plan="P", _uids=(1,),
                                 _be=types.SimpleNamespace(execute=execute),
                                 pointers=lambda ptrs, ws: [ptrs["x"]])
    ms = statistics.median(eng._time(plan, {"x": types.SimpleNamespace(ptr=0x1000)}))
    assert ms == pytest.approx(0.2) and set(handles) == {0x5EED}
    assert len(handles) == _trial.WARMUP_RUNS + _trial.TIMED_RUNS


@pytest.mark.parametrize("failure,declined", [
    # cuDNN refusing the config at its trial run: declined, the next config is tried
    (hd.NotSupportedError("cudnnBackendExecute failed: CUDNN_STATUS_NOT_SUPPORTED (3000)"), True),
    # the CUDA runtime failing under the trial (its scratch memset, the synchronize) is
    # not about the config: it propagates, nothing is declined or cached as a decline
    ("runtime", False),
])
def test_graph_trial_run_declines_only_cudnn_refusals(monkeypatch, failure, declined):
    from hipdnn_async._errors import GpuNotSupportedError
    if failure == "runtime":
        failure = GpuNotSupportedError("cudaMemsetAsync failed: cudaErrorNotSupported (801)",
                                       status=801, status_name="cudaErrorNotSupported",
                                       call="cudaMemsetAsync")

    def trial(match, plan, bufs):
        raise failure
    build = types.SimpleNamespace(lock=contextlib.nullcontext(), handle=lambda: 0x5EED,
                                  trial=trial)
    eng = cudnn_graph.CudnnGraphEngine(build=build, describe=lambda: {})
    monkeypatch.setattr(cudnn_graph._graph_plan, "execution_plan", lambda be, cfg, h: ("P", 0))
    monkeypatch.setattr(cudnn_graph._graph_plan, "GraphPlan", lambda *a: types.SimpleNamespace())
    cand = types.SimpleNamespace(cfg=None, index=7, name=lambda be: "eng7")
    spec = types.SimpleNamespace(variant="")
    if declined:
        plan, why = eng._verified(None, None, spec, cand, {}, None)
        assert plan is None and why.startswith("trial run: ") and "NOT_SUPPORTED" in why
    else:
        with pytest.raises(GpuNotSupportedError, match="cudaMemsetAsync"):
            eng._verified(None, None, spec, cand, {}, None)
