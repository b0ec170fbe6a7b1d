"""What the worker process runs (see ``_worker.py``): public-API scenarios on the fake
"cuda:0", returning plain data (logs, outputs, plan facts) for the tests to assert on.

Only the public API is used (``hd.Device``, ``dev.build_sync`` / ``await dev.build``,
``dev.empty``, ``plan.execute_sync`` / ``submit`` / ``await execute``, ``GpuArray``), so
the scenarios survive refactors of the provider and runtime. The pattern cases are the
oracle suite's (``tests/oracle/test_patterns.py`` builders, restricted to what the cuDNN
provider takes as ``tests/gpu/test_patterns_gpu.py`` does).
"""
from __future__ import annotations

import contextlib
import gc
import os

import numpy as np

from ._fakes import FakeControl

__all__ = ["control", "quiet_gc", "tensor_facts", "node_facts", "pattern_case", "plan_facts"]


def control(spec: str = "cuda:0") -> FakeControl:
    """The control of the fake runtime serving ``spec`` (the CUDA or the HIP fake)."""
    env = "HIPDNN_ASYNC_CUDART" if spec.startswith("cuda") else "HIPDNN_ASYNC_HIP_RUNTIME"
    return FakeControl(os.environ[env])


@contextlib.contextmanager
def quiet_gc():
    """Collect earlier scenarios' garbage now and pause the cyclic collector: descriptors
    of a previous plan destroyed by a collection in the middle of an execution would read
    as that execution's calls."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def tensor_facts(graph) -> dict:
    """name -> {dims, strides, dtype (hd.DataType value), virtual} of a graph's tensors."""
    return {t.name: {"dims": tuple(t.dims), "strides": tuple(t.strides),
                     "dtype": int(t.data_type), "virtual": bool(t.is_virtual)}
            for t in graph.tensors}


def node_facts(graph) -> list[dict]:
    """[{kind, name, attrs}] of a graph's nodes (attrs as a dict)."""
    import dataclasses
    out = []
    for n in graph.nodes:
        attrs = dataclasses.asdict(n.attrs) if dataclasses.is_dataclass(n.attrs) else {}
        out.append({"kind": n.kind, "name": n.name,
                    "attrs": {k: (int(v) if hasattr(v, "value") else v) for k, v in attrs.items()}})
    return out


def plan_facts(plan) -> dict:
    engine = plan.engine
    return {"pattern": plan.pattern, "algorithm": plan.algorithm,
            "reason": getattr(plan.algorithm, "reason", ""), "knobs": dict(plan.knobs),
            "trials": [tuple(t) for t in getattr(plan.algorithm, "trials", ())],
            "workspace_size": int(plan.workspace_size),
            "engine": getattr(engine, "name", str(engine)),
            "provider": getattr(engine, "provider", None),
            "benchmarked": bool(getattr(plan, "benchmarked", False)),
            "perfdb_hit": bool(getattr(plan, "perfdb_hit", False))}


def _oracle_for_gpu(clips=None):
    """The oracle builders with the cuDNN provider's limits (tests/gpu does the same), or
    the ReLU clips ``clips`` (dtype -> (lower, upper)) where given."""
    from gpu import test_patterns_gpu as tpg
    from oracle import test_patterns as tp
    tp.CLIPS = clips or tpg.GPU_CLIPS
    tp.CONV = tpg.GPU_CONV
    return tp


def pattern_case(pattern: str, dtype: str, layout: str, *, executions: int = 2, knobs=None,
                 seed: int = 0, stream=0, spec: str = "cuda:0", clips=None) -> dict:
    """Build, stage and execute one oracle case on the fake device ``spec`` (``"cuda:0"``;
    ``"hip:0"`` for the MIOpen harness, tests/contract/hip) with every execution on
    ``stream``: the first one there meets a cold stream, later ones a warm one. ``clips``
    replaces the GPU suite's ReLU clips (see ``_oracle_for_gpu``).

    Returns
    -------
    dict
        ``plan`` (plan_facts), ``tensors`` (tensor_facts), ``pointers`` (name -> device
        pointer of the staged buffer), ``checks`` ([(name, got, want, (atol, rtol))]),
        ``log`` (the whole call log, with marks "build", "stage", "exec0".., "read",
        "end"), ``violations``.
    """
    import hipdnn_async as hd
    from oracle._cases import DTYPES, LAYOUTS, Harness, rank_of

    tp = _oracle_for_gpu(clips)
    ctl = control(spec)
    rng = np.random.default_rng([seed, sorted(tp.PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    with hd.Device(spec) as dev:
        h = Harness(dtype, layout, name=f"contract_{pattern}_{dtype}_{layout}")
        checks = tp.PATTERNS[pattern](h, rank_of(layout), rng)
        h._alloc_outputs()
        h.g.validate()
        with quiet_gc():
            ctl.clear()
            ctl.mark("build")
            plan = dev.build_sync(h.g, knobs=knobs)
            ctl.mark("stage")
            staged = h.stage(dev)
            for i in range(executions):
                ctl.mark(f"exec{i}")
                plan.execute_sync(staged, stream=stream)
            ctl.mark("read")
        got = {name: staged[name].to_numpy_sync() for name in h.outputs}
        ctl.mark("end")
        result = {"plan": plan_facts(plan), "tensors": tensor_facts(h.g), "nodes": node_facts(h.g),
                  "pointers": {name: int(a.ptr) for name, a in staged.items()},
                  "checks": [(name, got[name], want, tolerance) for name, want, tolerance in checks]}
    result["log"] = ctl.log()
    result["violations"] = ctl.violations()
    return result


def _error_facts(exc) -> dict:
    return {"error": exc, "type": type(exc).__name__,
            "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc),
            "fields": {k: getattr(exc, k, None) for k in
                       ("status", "status_name", "call", "library", "vendor_message", "code")}}


def error_case(pattern: str, dtype: str, layout: str, *, inject, phase: str = "build",
               then_run: bool = True, knobs=None) -> dict:
    """Inject failures (``[(function, status, nth, count)]``) before the build
    (``phase="build"``) or before the first execution (``"exec"``); report the error
    (``error``: the exception itself, or None) and, with ``then_run``, whether a
    clean execution afterwards gives the oracle's results (``checks``)."""
    import hipdnn_async as hd
    from oracle._cases import DTYPES, LAYOUTS, Harness, rank_of

    tp = _oracle_for_gpu()
    ctl = control()
    rng = np.random.default_rng([7, sorted(tp.PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    result = {"error": None, "plan": None, "checks": []}
    with hd.Device("cuda:0") as dev:
        h = Harness(dtype, layout, name=f"contract_err_{pattern}")
        checks = tp.PATTERNS[pattern](h, rank_of(layout), rng)
        h._alloc_outputs()
        h.g.validate()
        ctl.clear()
        ctl.clear_injections()

        def arm():
            for fn, status, nth, count in inject:
                ctl.inject(fn, status, nth=nth, count=count)
        try:
            if phase == "build":
                arm()
            ctl.mark("build")
            plan = dev.build_sync(h.g, knobs=knobs)
            result["plan"] = plan_facts(plan)
            staged = h.stage(dev)
            if phase == "exec":
                arm()
            ctl.mark("exec0")
            plan.execute_sync(staged, stream=0)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            result.update(_error_facts(exc))
        ctl.clear_injections()
        if then_run and result["plan"] is not None:
            staged = h.stage(dev)
            ctl.mark("exec1")
            plan.execute_sync(staged, stream=0)
            got = {name: staged[name].to_numpy_sync() for name in h.outputs}
            result["checks"] = [(n, got[n], w, tol) for n, w, tol in checks]
        ctl.mark("read")
    result["log"] = ctl.log()
    result["violations"] = ctl.violations()
    return result


def _conv_graph(hd, direction="fprop", dtype="float32", x=(2, 4, 7, 6), w=(5, 4, 3, 3), pad=1):
    """A small convolution graph of the public API: (graph, x or dy, w or x, output)."""
    from oracle import _reference as ref
    g = hd.Graph(name=f"contract_{direction}", io_data_type=dtype,
                 compute_data_type=hd.DataType.FLOAT)
    y_dims = ref.conv_out_dims(x, w, (pad, pad), (pad, pad), (1, 1), (1, 1))
    if direction == "fprop":
        a, b = g.tensor(dims=x, name="x"), g.tensor(dims=w, name="w")
        out = g.conv_fprop(a, b, padding=pad)
    elif direction == "dgrad":
        a, b = g.tensor(dims=y_dims, name="dy"), g.tensor(dims=w, name="w")
        out = g.conv_dgrad(a, b, dx_dims=x, padding=pad)
    else:
        a, b = g.tensor(dims=y_dims, name="dy"), g.tensor(dims=x, name="x")
        out = g.conv_wgrad(a, b, dw_dims=w, padding=pad)
    out.set_output(True).set_name("out")
    return g, a, b, out


def _bn_backward_graph(hd, dims=(4, 6, 5, 5)):
    """fp32 NCHW batchnorm backward of the public API (the legacy engine's mode choice)."""
    g = hd.Graph(name="contract_bn_backward", io_data_type="float32",
                 compute_data_type=hd.DataType.FLOAT)
    x, dy = g.tensor(dims=dims, name="x"), g.tensor(dims=dims, name="dy")
    c = [g.tensor(dims=(1, dims[1], 1, 1), name=n) for n in ("scale", "mean", "inv_variance")]
    for t in g.batchnorm_backward(dy, x, c[0], mean=c[1], inv_variance=c[2]):
        t.set_output(True)
    return g


def knob_case(direction: str, knobs: dict, *, builds: int = 1, inject=(),
              fresh_perfdb: bool = False) -> dict:
    """Build a small convolution (``direction`` fprop / dgrad / wgrad; "bn_backward": an
    fp32 NCHW batchnorm backward) ``builds`` times, each in a new Device, with ``knobs``;
    returns per build its plan facts (or the error) and its slice of the log. ``inject``:
    ``[(build index, function, status, nth, count)]``, failures armed before that build.
    The default perf db (shared by the cases of one session) is emptied first with
    ``fresh_perfdb``."""
    import hipdnn_async as hd
    from hipdnn_async import _perfdb
    if fresh_perfdb:
        _perfdb.default_perfdb().clear()
    ctl = control()
    ctl.clear()
    out = []
    for i in range(builds):
        g = _bn_backward_graph(hd) if direction == "bn_backward" else _conv_graph(hd, direction)[0]
        with hd.Device("cuda:0") as dev:
            ctl.clear_injections()
            for at, fn, status, nth, count in inject:
                if at == i:
                    ctl.inject(fn, status, nth=nth, count=count)
            ctl.mark(f"build{i}")
            try:
                out.append({"plan": plan_facts(dev.build_sync(g, knobs=knobs)), "error": None})
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out.append(dict(_error_facts(exc), plan=None))
            ctl.mark(f"built{i}")
    ctl.clear_injections()
    log = ctl.log()
    from ._fakes import between
    for i, b in enumerate(out):
        b["log"] = between(log, f"build{i}", f"built{i}")
    return {"builds": out, "violations": ctl.violations(),
            "perfdb": [(e["engine"], e["problem"], e["algorithm"])
                       for e in _perfdb.default_perfdb().entries()]}


def _conv_inputs(rng, x, w, dtype=np.float32):
    return rng.uniform(-1, 1, x).astype(dtype), rng.uniform(-1, 1, w).astype(dtype)


def queue_case(backend: str = "asyncio", n: int = 5, cancel: bool = False) -> dict:
    """``n`` executions of one conv plan submitted at once on stream 0 (``plan.submit``),
    each with its own input and output; with ``cancel``, the task awaiting the first is
    cancelled while it runs and its input arrays are dropped at once. Returns outputs,
    their float64 references and the log."""
    import anyio
    import hipdnn_async as hd
    from oracle import _reference as ref

    ctl = control()
    rng = np.random.default_rng(3)
    result = {}

    async def main():
        async with hd.Device("cuda:0") as dev:
            g, xt, wt, yt = _conv_graph(hd)
            plan = await dev.build(g)
            packs, wants, outs = [], [], []
            for _ in range(n):
                xs, ws = _conv_inputs(rng, xt.dims, wt.dims)
                wants.append(ref.conv_fprop(xs, ws, pre=1, post=1))
                X, W = await dev.asarray(xs), await dev.asarray(ws)
                Y = dev.empty(yt.dims, np.float32)
                packs.append({xt: X, wt: W, yt: Y})
                outs.append(Y)
            ctl.clear()
            ctl.mark("submit")
            cancelled = None
            if cancel:
                # the first execution's awaiter is cancelled once its work is enqueued
                # (logged) and long before it can finish (a 50 ms stream delay)
                ctl.set_delay_us(50000)
                first = packs.pop(0)
                scope = anyio.CancelScope()

                async def waiter():
                    with scope:
                        await plan.execute(first, stream=0)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter)
                    while not [r for r in ctl.log() if r["fn"] == "cudnnConvolutionForward"]:
                        await anyio.sleep(0.0005)
                    scope.cancel()
                cancelled = scope.cancelled_caught
                ctl.set_delay_us(2000)
                del first          # our last references to its inputs and output wrapper
            handles = [plan.submit(p, stream=0) for p in packs]
            del packs
            for h in handles:
                await h
            await dev.synchronize()
            ctl.mark("done")
            result["cancelled"] = cancelled
            result["outputs"] = [await y.to_numpy() for y in outs]
            result["wants"] = wants
        result["log"] = ctl.log()
        result["violations"] = ctl.violations()
    anyio.run(main, backend=backend)
    return result


def cross_stream_case(wait: bool = True) -> dict:
    """conv on stream 0 writes y; a second conv on stream 1 reads it after
    ``streams[1].wait_event(streams[0].record_event())`` (or without the wait)."""
    import hipdnn_async as hd
    from oracle import _reference as ref

    ctl = control()
    rng = np.random.default_rng(5)
    with hd.Device("cuda:0", streams=2) as dev:
        g1, x1, w1, y1 = _conv_graph(hd, x=(1, 2, 6, 6), w=(2, 2, 3, 3))
        g2, x2, w2, y2 = _conv_graph(hd, x=(1, 2, 6, 6), w=(2, 2, 3, 3))
        p1, p2 = dev.build_sync(g1), dev.build_sync(g2)
        xs, ws = _conv_inputs(rng, x1.dims, w1.dims)
        vs = rng.uniform(-1, 1, w2.dims).astype(np.float32)
        X, W, V = dev.empty(x1.dims, np.float32), dev.empty(w1.dims, np.float32), dev.empty(w2.dims, np.float32)
        X.copy_from(xs), W.copy_from(ws), V.copy_from(vs)
        Y, Z = dev.empty(y1.dims, np.float32), dev.empty(y2.dims, np.float32)
        Y.copy_from(np.zeros(y1.dims, np.float32))
        ctl.clear()
        ctl.mark("start")
        h1 = p1.submit({x1: X, w1: W, y1: Y}, stream=0)
        if wait:
            dev.streams[1].wait_event(dev.streams[0].record_event())
        h2 = p2.submit({x2: Y, w2: V, y2: Z}, stream=1)
        h2.result()
        h1.result()
        got = Z.to_numpy_sync()
        want = ref.conv_fprop(ref.conv_fprop(xs, ws, pre=1, post=1), vs, pre=1, post=1)
    return {"got": got, "want": want, "log": ctl.log(), "violations": ctl.violations()}


def capture_case() -> dict:
    """Two conv plans with different workspaces, built first, then executed for the first
    time on streams that have run nothing: the executions' log slices."""
    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(9)
    with hd.Device("cuda:0", streams=2) as dev:
        small = _conv_graph(hd, x=(1, 2, 5, 5), w=(2, 2, 3, 3))
        big = _conv_graph(hd, x=(2, 8, 9, 9), w=(8, 8, 3, 3))
        plans = [dev.build_sync(small[0]), dev.build_sync(big[0])]
        packs = []
        for (g, xt, wt, yt) in (small, big):
            xs, ws = _conv_inputs(rng, xt.dims, wt.dims)
            X, W = dev.empty(xt.dims, np.float32), dev.empty(wt.dims, np.float32)
            X.copy_from(xs), W.copy_from(ws)
            packs.append({xt: X, wt: W, yt: dev.empty(yt.dims, np.float32)})
        with quiet_gc():
            ctl.clear()
            for label, i, stream in (("small_s1", 0, 1), ("small_s0", 0, 0), ("big_s0", 1, 0)):
                ctl.mark(label)
                plans[i].execute_sync(packs[i], stream=stream)
            ctl.mark("end")
        sizes = [p.workspace_size for p in plans]
    return {"log": ctl.log(), "workspace_sizes": sizes, "violations": ctl.violations()}


def runtime_case() -> dict:
    """The runtime layer through the public API: device discovery, Device start-up calls,
    ``await dev.asarray`` of a channels-last array, and variant packs the binder must
    refuse (host memory as a NumPy array and as an int pointer)."""
    import anyio
    import hipdnn_async as hd

    ctl = control()
    ctl.clear()
    out = {"devices": hd.devices()}
    ctl.mark("open")
    with hd.Device("cuda:0") as dev:
        ctl.mark("opened")
        a = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
        nhwc = np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        ctl.mark("asarray")
        arr = anyio.run(dev.asarray, nhwc)
        ctl.mark("read")
        out.update(strides=tuple(arr.strides), dims=tuple(arr.dims), ptr=int(arr.ptr),
                   nbytes=int(arr.nbytes), back=arr.to_numpy_sync(), want=a)
        g, xt, wt, yt = _conv_graph(hd)
        plan = dev.build_sync(g)
        X, W = dev.empty(xt.dims, np.float32), dev.empty(wt.dims, np.float32)
        host = np.zeros(yt.dims, np.float32)
        ctl.mark("execute")
        plan.execute_sync({xt: X, wt: W, yt: dev.empty(yt.dims, np.float32)})
        errors = {}
        ctl.mark("bind")
        for label, buf in (("numpy", host), ("host_int", int(host.ctypes.data))):
            try:
                plan.execute_sync({xt: X, wt: W, yt: buf})
                errors[label] = None
            except Exception as exc:  # noqa: BLE001 - reported to the test
                errors[label] = _error_facts(exc)
        out["errors"] = errors
        out["host_ptr"] = int(host.ctypes.data)
        ctl.mark("close")
    ctl.mark("closed")
    out["log"] = ctl.log()
    out["violations"] = ctl.violations()
    return out


def no_device_case() -> dict:
    """What the public API says when the runtime sees no GPU."""
    import hipdnn_async as hd
    out = {"devices": hd.devices()}
    try:
        hd.Device("cuda:0")
        out["error"] = None
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out.update(_error_facts(exc))
    return out


def conv_shape_case(shape: str, direction: str, dtype: str, layout: str) -> dict:
    """One of the GPU suite's hard convolution shapes (groups, depthwise, dilation, 3-D;
    tests/gpu/test_patterns_gpu.py CONV_SHAPES) on the fake: output, reference, limits,
    the node's attributes and the log."""
    import hipdnn_async as hd
    from gpu import test_patterns_gpu as tpg

    ctl = control()
    with hd.Device("cuda:0") as dev, quiet_gc():
        ctl.clear()
        h, got, want, limits = tpg._conv_shape_case(dev, tpg.CONV_SHAPES[shape], shape, direction,
                                                    dtype, layout)
        result = {"plan": plan_facts(h.plan), "nodes": node_facts(h.g), "got": got, "want": want,
                  "limits": limits}
    result["log"] = ctl.log()
    result["violations"] = ctl.violations()
    return result


def bn_in_place_case(dtype: str = "float32", layout: str = "NCHW") -> dict:
    """BN training with its running statistics updated in place (next_running_* bound to
    the prev_running_* buffers; tests/oracle/test_patterns.bn_training_in_place), two
    executions on the fake "cuda:0".

    Returns
    -------
    dict
        ``checks`` ([(label, got, want, (atol, rtol))]), ``engine``, ``log`` (marks
        "run", "end"), ``violations``.
    """
    import hipdnn_async as hd
    from oracle import test_patterns as tp
    ctl = control()
    with hd.Device("cuda:0") as dev:
        with quiet_gc():
            ctl.clear()
            ctl.mark("run")
            plan, checks = tp.bn_training_in_place(dev, dtype, layout, rounds=2)
            ctl.mark("end")
        engine = plan.engine.name
    return {"checks": checks, "engine": engine, "log": ctl.log(), "violations": ctl.violations()}


def bn_rebuild_case(pattern: str, layout: str, *, inject) -> dict:
    """Build ``pattern`` (fp32, ``layout``) on the fake "cuda:0" with failures injected
    (``[(function, status, nth, count)]``), then again on the same Device without them:
    ``first`` (the first build's error facts, or ``error`` None) and ``second`` (the
    second build's plan facts, or its error facts)."""
    import hipdnn_async as hd
    from oracle._cases import DTYPES, LAYOUTS, Harness, rank_of

    tp = _oracle_for_gpu()
    ctl = control()
    rng = np.random.default_rng([5, DTYPES.index("float32"), LAYOUTS.index(layout)])
    out = {}
    with hd.Device("cuda:0") as dev:
        h = Harness("float32", layout, name=f"contract_rebuild_{pattern}")
        tp.PATTERNS[pattern](h, rank_of(layout), rng)
        h._alloc_outputs()
        ctl.clear()
        ctl.clear_injections()
        for fn, status, nth, count in inject:
            ctl.inject(fn, status, nth=nth, count=count)
        try:
            out["first"] = {"error": None, "plan": plan_facts(dev.build_sync(h.g))}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out["first"] = _error_facts(exc)
        ctl.clear_injections()
        try:
            out["second"] = {"error": None, "plan": plan_facts(dev.build_sync(h.g))}
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out["second"] = _error_facts(exc)
    out["log"] = ctl.log()
    out["violations"] = ctl.violations()
    return out


def bn_backward_reserve_case(layout: str = "NHWC") -> dict:
    """Build BN_BACKWARD (fp16) on the legacy engine while cuDNN's size query asks for a
    reserve space for the backward Ex call (the fake answers 0 for bnOps BN, as cuDNN 9.19
    on the H200 does; here the binding's answer is patched to 128 bytes): the error, and
    the call log."""
    import hipdnn_async as hd
    from hipdnn_async.runtime import _cudnn
    from oracle._cases import DTYPES, LAYOUTS, Harness, rank_of

    tp = _oracle_for_gpu()
    ctl = control()
    rng = np.random.default_rng([3, DTYPES.index("float16"), LAYOUTS.index(layout)])
    real = _cudnn.batchnorm_backward_ex_sizes
    _cudnn.batchnorm_backward_ex_sizes = lambda *a: (real(*a)[0], 128)
    result = {"error": None}
    try:
        with hd.Device("cuda:0") as dev:
            h = Harness("float16", layout, name="contract_bn_reserve")
            tp.PATTERNS["BN_BACKWARD"](h, rank_of(layout), rng)
            h._alloc_outputs()
            ctl.clear()
            ctl.mark("build")
            try:
                dev.build_sync(h.g, engine="CUDNN_LEGACY_ENGINE")
            except Exception as exc:  # noqa: BLE001 - reported to the test
                result.update(_error_facts(exc))
            ctl.mark("end")
    finally:
        _cudnn.batchnorm_backward_ex_sizes = real
    result["log"] = ctl.log()
    result["violations"] = ctl.violations()
    return result
