"""Both cuDNN engines (the graph API's and the legacy one) on every pattern x dtype x layout
of the oracle suite, against its float64 references and tolerances; what the graph engine
adds (asymmetric padding, lower clips, perf-db plans restored in a new process).

The graph engine runs the CPU oracle's own cases (asymmetric padding, a 0.1 lower clip for
bfloat16); the legacy engine the GPU subset of ``test_patterns_gpu`` (symmetric padding,
lower clip 0). Where the graph engine is not offered, the case must be one it documents as
the legacy engine's (NCHW batchnorm, standalone BN inference); any other decline fails.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest

from oracle import _reference as ref
from oracle import test_patterns as tp
from oracle._cases import DTYPES, LAYOUTS, Harness, assert_close, rank_of

import hipdnn_async as hd

from .test_patterns_gpu import ASYMMETRIC, GPU_CLIPS, GPU_CONV, _conv_shape_case

pytestmark = pytest.mark.gpu

GRAPH = "CUDNN_GRAPH_ENGINE"
LEGACY = "CUDNN_LEGACY_ENGINE"
LAYOUTS_GPU = ("NCHW", "NHWC", "NCDHW", "NDHWC")
CASES = [(p, dt, lay) for p in tp.PATTERNS for dt in DTYPES for lay in LAYOUTS_GPU]
_BN = ("BN_TRAINING", "BN_TRAINING_RELU", "BN_BACKWARD", "BN_INFERENCE_DRELU_BACKWARD")


# cuDNN's graph batchnorm engines want channel counts its vector loads cover: the oracle's
# C = 3 gets no engine config (the legacy engine runs it), so the graph engine's cases use C = 32.
GRAPH_BN = {4: (2, 32, 5, 4), 5: (2, 32, 3, 4, 3)}


def _graph_may_decline(pattern, dtype, layout):
    """The documented declines: standalone BN inference; batchnorm that is not
    channels-last (legacy SPATIAL_PERSISTENT is faster there); BN inference + dReLU +
    backward other than HALF (cuDNN 9.19 takes it with a HALF dReLU output only); conv +
    bias + activation in NCHW (cuDNN's fusion engines are channels-last) or FLOAT (its
    fused FLOAT engines are TF32)."""
    base = pattern.split("/")[0]
    nchw = layout in ("NCHW", "NCDHW")
    return (base == "BN_INFERENCE_VARIANCE" or (base in _BN and nchw)
            or (base == "BN_INFERENCE_DRELU_BACKWARD" and dtype != "float16")
            or (base == "CONV_FPROP_BIAS_RELU" and (nchw or dtype == "float32"))
            or (base == "CONV_WGRAD" and dtype == "float32"))   # accuracy: ranks_after_legacy


def _case(dev, engine, pattern, dtype, layout, monkeypatch):
    if engine == LEGACY:
        monkeypatch.setattr(tp, "CLIPS", GPU_CLIPS)
        monkeypatch.setattr(tp, "CONV", GPU_CONV)
    else:
        monkeypatch.setattr(tp, "BN", GRAPH_BN)
    rng = np.random.default_rng([7, sorted(tp.PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    h = Harness(dtype, layout, name=f"graph_{pattern}_{dtype}_{layout}")
    checks = tp.PATTERNS[pattern](h, rank_of(layout), rng)
    return h, checks


@pytest.mark.parametrize("engine", [GRAPH, LEGACY])
@pytest.mark.parametrize("pattern,dtype,layout", CASES, ids=["-".join(c) for c in CASES])
def test_pattern_on_each_cudnn_engine(gpu_module_device, monkeypatch, engine, pattern, dtype,
                                      layout):
    dev = gpu_module_device
    h, checks = _case(dev, engine, pattern, dtype, layout, monkeypatch)
    try:
        offered = [e.name for e in hd.engines(h.g, dev)]
    except hd.NotSupportedError as exc:   # both engines decline (e.g. NCHW fused + lower clip)
        offered = [str(exc)]
    if engine not in offered:
        assert engine == GRAPH and _graph_may_decline(pattern, dtype, layout), (
            f"{engine} declined {pattern} {dtype} {layout}; offered {offered}")
        return
    if engine == GRAPH:
        assert offered[0] == GRAPH, offered        # ranked before the legacy engine
    got = h.run(dev, engine=engine)
    assert h.plan.engine.name == engine
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol,
                     f"{engine} {pattern} {dtype} {layout} output '{name}' "
                     f"(algorithm {h.plan.algorithm})")


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("shape", list(ASYMMETRIC))
@pytest.mark.parametrize("dtype,layout", [("float32", "NHWC"), ("float16", "NHWC"),
                                          ("float32", "NCHW")])
def test_graph_engine_computes_asymmetric_padding(gpu_module_device, monkeypatch, shape,
                                                  direction, dtype, layout):
    """The graph engine expresses pre and post padding directly: never a decline, except
    FLOAT wgrad, which it leaves to the legacy engine for accuracy (see _graph.py's
    ranks_after_legacy) and which the legacy engine cannot pad asymmetrically: a
    NotSupportedError naming both reasons."""
    real_run = Harness.run
    monkeypatch.setattr(Harness, "run", lambda self, dev, **kw: real_run(self, dev, engine=GRAPH))
    if direction == "wgrad" and dtype == "float32":
        with pytest.raises(hd.NotSupportedError, match="FLOAT weight gradients"):
            _conv_shape_case(gpu_module_device, ASYMMETRIC[shape], shape, direction, dtype,
                             layout)
        return
    h, got, want, limits = _conv_shape_case(gpu_module_device, ASYMMETRIC[shape], shape,
                                            direction, dtype, layout)
    assert h.plan.engine.name == GRAPH
    assert_close(got, want, *limits, f"graph asymmetric {shape} {direction} {dtype} {layout} "
                                     f"({h.plan.algorithm})")


@pytest.mark.parametrize("clips", [(0.1, 0.5), (-0.25, 2.0), (-1.0, 1.0)])
@pytest.mark.parametrize("dtype,layout", [("float16", "NHWC"), ("bfloat16", "NHWC")])
def test_graph_engine_lower_clips(gpu_module_device, clips, dtype, layout):
    """conv + bias + clamp with lower clips other than 0 (the legacy engine's limit)."""
    rng = np.random.default_rng(zlib.crc32(f"{clips}{dtype}".encode()))
    h = Harness(dtype, layout, name="graph_clamp")
    x = h.input("x", rng.uniform(-1, 1, (2, 8, 9, 9)))
    w = h.input("w", rng.uniform(-1, 1, (16, 8, 3, 3)))
    b = h.input("bias", rng.uniform(-1, 1, (1, 16, 1, 1)))
    y = h.g.pointwise(h.g.conv_fprop(x, w, padding=(1, 1)), b, mode=hd.PointwiseMode.ADD)
    h.output(h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=clips[0],
                           relu_upper_clip=clips[1]), "y")
    got = h.run(gpu_module_device, engine=GRAPH)["y"]
    want = ref.relu(ref.conv_fprop(h.ref["x"], h.ref["w"], (1, 1), (1, 1)) + h.ref["bias"],
                    *clips)
    lim = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}[dtype]
    assert_close(got, want, lim, lim, f"graph conv+bias+clamp{clips} {dtype} "
                                        f"({h.plan.algorithm})")


def test_graph_engine_rank_and_knobs(gpu_module_device):
    dev = gpu_module_device
    h = Harness("float32", "NCHW", name="graph_rank")
    x, w = h.input("x", np.ones((2, 8, 9, 9))), h.input("w", np.ones((8, 8, 3, 3)))
    h.output(h.g.conv_fprop(x, w, padding=(1, 1)), "y")
    first, second = hd.engines(h.g, dev)
    assert (first.name, second.name) == (GRAPH, LEGACY)
    ids = [k.id for k in first.knobs]
    assert ids[:2] == ["global.benchmarking", "global.workspace_size_limit"], ids
    assert "cudnn_graph.allow_tf32" in ids and first.knob("cudnn_graph.allow_tf32").default == 0
    plan = dev.build_sync(h.g)
    assert plan.engine.name == GRAPH and plan.algorithm.startswith("eng"), plan.algorithm


def test_graph_launches_count_themselves_in_plan_stats(gpu_module_device):
    # the submit path's work item is the C launch itself (no Python wrapper); it bumps the
    # device's per-pattern counter in C: executions and their host time in plan_stats
    from hipdnn_async.runtime._cudnn_backend import GraphLaunch
    dev = gpu_module_device
    h = Harness("float16", "NHWC", name="graph_stats")
    x, w = h.input("x", np.ones((2, 8, 9, 9))), h.input("w", np.ones((8, 8, 3, 3)))
    h.output(h.g.conv_fprop(x, w, padding=(1, 1)), "y")
    plan = dev.build_sync(h.g)
    assert plan.engine.name == GRAPH, plan.engine.name
    vp = {"x": dev.empty((2, 8, 9, 9), "float16", layout="NHWC"),
          "w": dev.empty((8, 8, 3, 3), "float16", layout="NHWC"),
          "y": dev.empty((2, 8, 9, 9), "float16", layout="NHWC")}
    before = dev.plan_stats().get("CONV_FPROP", {}).get("executions", 0)
    handles = [plan.submit(vp, stream=0) for _ in range(25)]
    for hd_ in handles:
        hd_.result()
    assert isinstance(plan._bindings.get(vp, None).fn, GraphLaunch)
    stats = dev.plan_stats()["CONV_FPROP"]
    assert stats["executions"] - before == 25, stats
    assert stats["exec_ms"] > 0.0, stats


# Per-binding CUDA graphs (GraphLaunch's graph_after): the same bound buffers submitted
# again and again, new input data copied into them before each submission; from the
# (GRAPH_AFTER + 1)-th execution on each one is a launch of the graph captured from it,
# which must read the buffers' current data (a graph replays kernels with the captured
# pointers: stale data or a skipped kernel would fail the float64 comparison).
REPEAT_CASES = [("CONV_FPROP", "float16", "NHWC"), ("CONV_DGRAD", "float16", "NHWC"),
                ("CONV_WGRAD", "float16", "NHWC"), ("CONV_FPROP_BIAS_RELU", "float16", "NHWC"),
                ("CONV_FPROP_BIAS_RELU/no-bias", "bfloat16", "NHWC"),
                ("BN_TRAINING_RELU", "float16", "NHWC"), ("BN_BACKWARD", "bfloat16", "NHWC"),
                ("BN_INFERENCE_DRELU_BACKWARD", "float16", "NHWC"),
                ("CONV_FPROP", "float32", "NCHW"), ("CONV_DGRAD", "float32", "NCHW")]


def _rounds(pattern, dtype, layout, n):
    out = []
    for seed in range(n):
        h = Harness(dtype, layout, name=f"repeat_{pattern}_{dtype}_{layout}".replace("/", "_"))
        checks = tp.PATTERNS[pattern](h, rank_of(layout), np.random.default_rng([seed, 29]))
        out.append((h, checks))
    return out


def _submit_round(plan, staged, h, checks, where, submit=None, stream=0):
    for name, values in h.pack.items():         # the round's inputs, into the bound buffers
        staged[name].copy_from(np.ascontiguousarray(values))
    (submit or (lambda: plan.submit(staged, stream=stream).result()))()
    for name, want, (atol, rtol) in checks:
        assert_close(staged[name].to_numpy_sync(), want, atol, rtol, f"{where} output '{name}'")


@pytest.mark.parametrize("pattern,dtype,layout", REPEAT_CASES,
                         ids=["-".join(c) for c in REPEAT_CASES])
def test_repeated_submissions_launch_a_captured_graph_that_reads_new_data(
        gpu_module_device, monkeypatch, pattern, dtype, layout):
    from hipdnn_async.providers.cudnn._graph_plan import GRAPH_AFTER
    from hipdnn_async.runtime._cudnn_backend import GraphLaunch
    monkeypatch.setattr(tp, "BN", GRAPH_BN)
    dev = gpu_module_device
    rounds = _rounds(pattern, dtype, layout, GRAPH_AFTER + 4)
    h0 = rounds[0][0]
    h0._alloc_outputs()
    plan = dev.build_sync(h0.g, engine=GRAPH)
    staged = h0.stage(dev)
    for k, (h, checks) in enumerate(rounds):
        _submit_round(plan, staged, h, checks, f"{pattern} {dtype} {layout} round {k}")
    launch = plan._bindings.get(staged, None).fn
    assert isinstance(launch, GraphLaunch)
    assert launch.executions == len(rounds)
    assert launch.graph_launches == len(rounds) - GRAPH_AFTER, (launch.executions,
                                                               launch.graph_launches)


def test_graph_launches_on_alternating_streams_read_new_data(gpu_module_device):
    # no stream given: the device's pick goes round robin between its idle streams; each
    # stream keeps its own pack and graph
    from hipdnn_async.providers.cudnn._graph_plan import GRAPH_AFTER
    dev = gpu_module_device
    n_streams = len(dev.streams)
    assert n_streams >= 2, "the default device has 2-4 streams"
    rounds = _rounds("CONV_FPROP", "float16", "NHWC", n_streams * (GRAPH_AFTER + 2))
    h0 = rounds[0][0]
    h0._alloc_outputs()
    plan = dev.build_sync(h0.g, engine=GRAPH)
    staged = h0.stage(dev)
    for k, (h, checks) in enumerate(rounds):
        _submit_round(plan, staged, h, checks, f"round {k}", stream=None)
    launch = plan._bindings.get(staged, None).fn
    assert launch.executions == len(rounds)
    assert launch.graph_launches >= len(rounds) - n_streams * GRAPH_AFTER, launch.graph_launches


def test_a_plan_on_graph_launches_is_recorded_and_replayed_by_a_capture_step(gpu_module_device):
    # the binding already launches its own graph; inside a capture block its execution is
    # recorded directly (a graph launch is not captured), and the step's replay computes
    # with the data in the buffers at replay time
    from hipdnn_async.providers.cudnn._graph_plan import GRAPH_AFTER
    dev = gpu_module_device
    rounds = _rounds("CONV_FPROP", "float16", "NHWC", GRAPH_AFTER + 4)
    h0 = rounds[0][0]
    h0._alloc_outputs()
    plan = dev.build_sync(h0.g, engine=GRAPH)
    staged = h0.stage(dev)
    for k, (h, checks) in enumerate(rounds[:GRAPH_AFTER + 2]):
        _submit_round(plan, staged, h, checks, f"round {k}")
    launch = plan._bindings.get(staged, None).fn
    assert launch.graph_launches == 2
    with dev.capture(stream=0) as step:
        plan.submit(staged)
    for k, (h, checks) in enumerate(rounds[GRAPH_AFTER + 2:]):
        _submit_round(plan, staged, h, checks, f"replay {k}", submit=step.replay_sync)
    step.close()
    assert launch.graph_launches == 2       # the replays launched the step's graph


def test_copies_on_another_thread_while_bindings_capture_their_graphs(gpu_module_device):
    # a copy orders the copy stream after every compute stream (an event recorded on each
    # from the copying thread); a binding's capture, made on a side stream of its own,
    # must neither fail such a copy nor take it into its graph, and still get its graph
    import threading

    from hipdnn_async.providers.cudnn._graph_plan import GRAPH_AFTER
    dev = gpu_module_device
    other = dev.empty((1 << 16,), np.float32)
    stop, errors, copies = threading.Event(), [], [0]

    def copier():
        base = np.arange(1 << 16, dtype=np.float32)
        while not stop.is_set():
            try:
                other.copy_from(base + copies[0])
                back = other.to_numpy_sync()
                if not np.array_equal(back, base + copies[0]):
                    errors.append(f"copy {copies[0]} read back other values")
                    return
                copies[0] += 1
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(f"{type(exc).__name__}: {exc}")
                return

    rounds = _rounds("CONV_FPROP", "float16", "NHWC", GRAPH_AFTER + 2)
    h0 = rounds[0][0]
    h0._alloc_outputs()
    plan = dev.build_sync(h0.g, engine=GRAPH)
    t = threading.Thread(target=copier)
    t.start()
    try:
        for b in range(8):                 # 8 bindings: 8 captures while the copies run
            staged = h0.stage(dev)
            for k, (h, checks) in enumerate(rounds):
                _submit_round(plan, staged, h, checks, f"binding {b} round {k}")
            launch = plan._bindings.get(staged, None).fn
            assert launch.graph_launches == 2, (b, launch.executions, launch.graph_launches)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert copies[0] > 0


@pytest.mark.parametrize("engine,dtype,layout", [(GRAPH, "float16", "NHWC"),
                                                 (GRAPH, "bfloat16", "NHWC"),
                                                 (LEGACY, "float32", "NCHW"),
                                                 (LEGACY, "float16", "NHWC")])
def test_running_statistics_updated_in_place(gpu_module_device, engine, dtype, layout):
    # next_running_* bound to the prev_running_* buffers (as PyTorch keeps them): cuDNN
    # reads prev and writes next per channel; two executions chain against float64, the
    # second (graph engine) a graph launch or not, both must read the updated statistics
    plan, checks = tp.bn_training_in_place(gpu_module_device, dtype, layout, rounds=3,
                                           bn_dims=GRAPH_BN, engine=engine)
    assert plan.engine.name == engine
    for label, got, want, (atol, rtol) in checks:
        assert_close(got, want, atol, rtol, f"{engine} {dtype} {layout} {label}")


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path[:0] = [sys.argv[3]]
    from oracle._cases import Harness
    import hipdnn_async as hd
    from hipdnn_async.providers.cudnn import _graph_plan
    calls = []
    real = _graph_plan.heuristic_candidates
    _graph_plan.heuristic_candidates = lambda *a, **k: calls.append(1) or real(*a, **k)
    pattern, perfdb = sys.argv[1], sys.argv[2]
    exec(open(sys.argv[4]).read())
    h, _ = make(pattern)
    with hd.Device("cuda:0", perfdb=perfdb) as dev:
        got = h.run(dev, engine="CUDNN_GRAPH_ENGINE")
    print(json.dumps({"hit": h.plan.perfdb_hit, "algorithm": h.plan.algorithm,
                      "values": {k: np.asarray(v, np.float64).tolist() for k, v in got.items()}}))
""")

_MAKE = textwrap.dedent("""
    def make(pattern):
        import numpy as np
        from oracle import test_patterns as tp
        from oracle._cases import Harness
        tp.BN = {4: (2, 32, 5, 4), 5: (2, 32, 3, 4, 3)}
        rng = np.random.default_rng(11)
        h = Harness("float16", "NHWC", name="graph_perfdb_" + pattern)
        return h, tp.PATTERNS[pattern](h, 4, rng)
""")


@pytest.mark.parametrize("pattern", ["CONV_FPROP", "BN_TRAINING_RELU"])
def test_perfdb_plan_restored_in_a_new_process(gpu_device, tmp_path, pattern):
    """A build stores the engine config (and the serialized plan where cuDNN gives one); a
    new process builds from it (perf-db hit) and computes the same values."""
    db = str(tmp_path / "perfdb.sqlite3")
    make_file = tmp_path / "make.py"
    make_file.write_text(_MAKE)
    ns = {}
    exec(_MAKE, ns)
    h, checks = ns["make"](pattern)
    with hd.Device(gpu_device.spec, perfdb=db) as dev:
        got = h.run(dev, engine=GRAPH)
    first = h.plan
    assert not first.perfdb_hit
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"first build {pattern} '{name}'")
    entries = hd.PerfDb(db).entries()
    assert [e["algorithm"] for e in entries] == [first.algorithm.split(" (")[0]], entries
    plans = os.listdir(tmp_path / "cudnn_plans") if (tmp_path / "cudnn_plans").exists() else []
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.getcwd(), tests_dir] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", _CHILD, pattern, db, tests_dir, str(make_file)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["hit"] and child["algorithm"] == first.algorithm, (child["algorithm"], plans)
    for name, want, (atol, rtol) in checks:
        assert_close(np.asarray(child["values"][name]), want, atol, rtol,
                     f"restored plan {pattern} '{name}' (serialized plans kept: {len(plans)})")
        np.testing.assert_array_equal(np.asarray(child["values"][name]),
                                      np.asarray(got[name], np.float64))


def test_graph_benchmarking_stores_then_second_device_hits(gpu_device, tmp_path):
    db = str(tmp_path / "perfdb.sqlite3")
    rng = np.random.default_rng(3)
    h = Harness("float16", "NHWC", name="graph_bench")
    x, w = h.input("x", rng.uniform(-1, 1, (4, 32, 20, 20))), h.input("w", rng.uniform(-1, 1, (32, 32, 3, 3)))
    h.output(h.g.conv_fprop(x, w, padding=(1, 1)), "y")
    want = ref.conv_fprop(h.ref["x"], h.ref["w"], (1, 1), (1, 1))
    with hd.Device(gpu_device.spec, perfdb=db) as dev:
        got = h.run(dev, engine=GRAPH, knobs={"global.benchmarking": 1})["y"]
    assert h.plan.benchmarked and not h.plan.perfdb_hit
    assert_close(got, want, 1e-2, 1e-2, f"benchmarked graph fprop ({h.plan.algorithm})")
    first = h.plan.algorithm
    with hd.Device(gpu_device.spec, perfdb=db) as dev:
        got = h.run(dev, engine=GRAPH, knobs={"global.benchmarking": 1})["y"]
    assert h.plan.perfdb_hit and not h.plan.benchmarked and h.plan.algorithm == first
    assert_close(got, want, 1e-2, 1e-2, "perf-db graph fprop")
