"""What the worker runs for the MIOpen provider's knob, error, asynchrony and device tests
(the pattern cases are ``contract._scenarios.pattern_case(spec="hip:0")``). Public API
only; results are plain data (hipdnn_async errors pickle with their fields).
"""
from __future__ import annotations

import os
import time

import numpy as np

from .._fakes import FakeControl
from .._scenarios import _oracle_for_gpu, plan_facts

__all__ = ["control", "conv_graph", "engine_knobs", "knob_build", "exec_error",
           "build_error", "cancelled_execution", "async_fault", "streams_case",
           "device_facts", "lower_clip_build", "drelu_boundary"]


def control() -> FakeControl:
    return FakeControl(os.environ["HIPDNN_ASYNC_HIP_RUNTIME"])


def conv_graph(kind: str = "fprop", dtype: str = "float32", layout: str = "NCHW",
               kernel: int = 3):
    """(graph, inputs by name, output name) of a 3x3 (or ``kernel``) stride-1 convolution."""
    import hipdnn_async as hd
    rng = np.random.default_rng(7)
    dt = {"float32": hd.DataType.FLOAT, "float16": hd.DataType.HALF}[dtype]
    g = hd.Graph(name=f"contract_{kind}", io_data_type=dt)
    pad = kernel // 2
    xd, wd = (2, 4, 6, 6), (3, 4, kernel, kernel)
    yd = (2, 3, 6, 6)
    npd = np.float32 if dtype == "float32" else np.float16
    if kind == "fprop":
        x = g.tensor(dims=xd, layout=layout, name="x")
        w = g.tensor(dims=wd, layout=layout, name="w")
        g.conv_fprop(x, w, padding=pad).set_output(True).set_name("y")
        ins = {"x": rng.standard_normal(xd).astype(npd), "w": rng.standard_normal(wd).astype(npd)}
        return g, ins, "y", yd
    if kind == "dgrad":
        dy = g.tensor(dims=yd, layout=layout, name="dy")
        w = g.tensor(dims=wd, layout=layout, name="w")
        g.conv_dgrad(dy, w, dx_dims=xd, padding=pad).set_output(True).set_name("dx")
        ins = {"dy": rng.standard_normal(yd).astype(npd), "w": rng.standard_normal(wd).astype(npd)}
        return g, ins, "dx", xd
    dy = g.tensor(dims=yd, layout=layout, name="dy")
    x = g.tensor(dims=xd, layout=layout, name="x")
    g.conv_wgrad(dy, x, dw_dims=wd, padding=pad).set_output(True).set_name("dw")
    ins = {"dy": rng.standard_normal(yd).astype(npd), "x": rng.standard_normal(xd).astype(npd)}
    return g, ins, "dw", wd


def _stage(dev, g, ins):
    """Device arrays of ``ins`` with their graph tensors' strides."""
    by_name = {t.name: t for t in g.tensors}
    out = {}
    for k, v in ins.items():
        arr = dev.empty(v.shape, v.dtype, strides=by_name[k].strides)
        arr.copy_from(v)
        out[k] = arr
    return out


def _run(dev, plan, g, ins, out_name, out_dims, *, executions=1):
    import anyio

    staged = _stage(dev, g, ins)
    out = dev.empty(out_dims, ins[next(iter(ins))].dtype, strides=next(
        t.strides for t in g.tensors if t.name == out_name))

    async def main():
        for _ in range(executions):
            await plan.execute({**staged, out_name: out})
        return await out.to_numpy()
    return anyio.run(main)


def engine_knobs(kind: str) -> dict:
    """The knobs MIOPEN_ENGINE offers for a convolution, and the solutions the build stream
    was told (the fake's GetSolution answer)."""
    import hipdnn_async as hd
    ctl = control()
    g, *_ = conv_graph(kind)
    with hd.Device("hip:0") as dev:
        ctl.clear()
        engines = hd.engines(g, dev)
        log = ctl.log()
    return {"engines": [(e.name, [(k.id, k.default, k.constraint.min, k.constraint.max)
                                  for k in e.knobs]) for e in engines], "log": log}


def knob_build(kind: str, knobs: dict, *, dtype="float32", kernel=3, execute=True) -> dict:
    """Build a convolution with ``knobs`` (and run it once); the plan, output, log, or the
    error the build raised."""
    import hipdnn_async as hd
    from oracle import _reference as ref
    ctl = control()
    g, ins, out_name, out_dims = conv_graph(kind, dtype, kernel=kernel)
    with hd.Device("hip:0") as dev:
        ctl.clear()
        ctl.mark("build")
        try:
            plan = dev.build_sync(g, knobs=knobs)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            return {"error": exc, "log": ctl.log()}
        ctl.mark("exec0")
        out = _run(dev, plan, g, ins, out_name, out_dims) if execute else None
        ctl.mark("read")
        pad = kernel // 2
        want = {"fprop": lambda: ref.conv_fprop(ins["x"], ins["w"], pre=pad, post=pad),
                "dgrad": lambda: ref.conv_dgrad(ins["dy"], ins["w"], out_dims, pre=pad, post=pad),
                "wgrad": lambda: ref.conv_wgrad(ins["dy"], ins["x"], out_dims, pre=pad, post=pad)}[kind]()
        return {"plan": plan_facts(plan), "out": out, "want": want, "log": ctl.log(),
                "stats": dict(hd.stats()) if hasattr(hd, "stats") else {}}


def build_error(kind: str, call: str, status: int) -> dict:
    """The error a build raises when the fake fails ``call`` with ``status`` (hipDNN's
    errors keep the vendor fields), and whether the device still builds afterwards."""
    import hipdnn_async as hd
    ctl = control()
    g, *_ = conv_graph(kind)
    with hd.Device("hip:0") as dev:
        ctl.inject(call, status)
        try:
            dev.build_sync(g)
            err = None
        except Exception as exc:  # noqa: BLE001 - returned to the test
            err = exc
        ctl.clear_injections()
        again = dev.build_sync(conv_graph(kind, kernel=1)[0])
        return {"error": err, "again": plan_facts(again), "log": ctl.log()}


def exec_error(call: str, status: int, *, at: str = "call") -> dict:
    """An execution whose MIOpen call (``at="call"``) or whose completion (``at="event"``:
    hipEventSynchronize, as an asynchronous GPU fault) fails; the error the awaiting task
    gets, and the next execution on the same stream, which must succeed."""
    import anyio

    import hipdnn_async as hd
    from oracle import _reference as ref
    ctl = control()
    g, ins, out_name, out_dims = conv_graph("fprop")
    with hd.Device("hip:0", streams=1) as dev:
        plan = dev.build_sync(g)

        staged = _stage(dev, g, ins)

        async def main():
            out = dev.empty(out_dims, np.float32)
            ctl.inject(call, status)
            try:
                await plan.execute({**staged, out_name: out})
                first = None
            except Exception as exc:  # noqa: BLE001 - returned to the test
                first = exc
            ctl.clear_injections()
            await plan.execute({**staged, out_name: out})
            return first, await out.to_numpy()
        first, out = anyio.run(main)
        return {"error": first, "out": out,
                "want": ref.conv_fprop(ins["x"], ins["w"], pre=1, post=1), "log": ctl.log(),
                "metrics": dev.metrics()}


def cancelled_execution(delay_us: int = 50000) -> dict:
    """Cancel the task awaiting an execution whose kernel takes ``delay_us``: the await
    returns at once, the execution still completes into its output, and nothing it used
    is freed before it ran (a freed buffer would be a violation or NaN)."""
    import anyio

    import hipdnn_async as hd
    from oracle import _reference as ref
    ctl = control()
    g, ins, out_name, out_dims = conv_graph("fprop")
    with hd.Device("hip:0", streams=1) as dev:
        plan = dev.build_sync(g)

        staged = _stage(dev, g, ins)

        async def main():
            nonlocal staged
            out = dev.empty(out_dims, np.float32)
            ctl.set_delay_us(delay_us)
            ctl.mark("exec0")
            t0 = time.perf_counter()
            with anyio.move_on_after(0.005):
                await plan.execute({**staged, out_name: out})
            returned = time.perf_counter() - t0
            staged = None   # only the queue keeps the inputs alive now
            await dev.synchronize()
            ctl.set_delay_us(200)
            ctl.mark("read")
            return returned, await out.to_numpy()
        returned, out = anyio.run(main)
        return {"returned_s": returned, "out": out, "log": ctl.log(),
                "want": ref.conv_fprop(ins["x"], ins["w"], pre=1, post=1)}


def async_fault() -> dict:
    """An asynchronous fault (the completion's hipEventSynchronize fails): the error type
    and fields the awaiting task gets."""
    return exec_error("hipEventSynchronize", 719, at="event")


def streams_case(n_streams: int = 3, executions: int = 6) -> dict:
    """Executions spread over ``n_streams`` streams: each stream has its own MIOpen handle
    (created with miopenCreateWithStream on that stream), the solution is compiled for each
    before any execution, results are right."""
    import anyio

    import hipdnn_async as hd
    from oracle import _reference as ref
    ctl = control()
    g, ins, out_name, out_dims = conv_graph("fprop")
    ctl.clear()
    with hd.Device("hip:0", streams=n_streams) as dev:
        ctl.mark("build")
        plan = dev.build_sync(g)

        staged = _stage(dev, g, ins)

        async def main():
            outs = [dev.empty(out_dims, np.float32) for _ in range(executions)]
            ctl.mark("exec0")
            async with anyio.create_task_group() as tg:
                for i, o in enumerate(outs):
                    tg.start_soon(_execute_on, plan, {**staged, out_name: o}, dev.streams[i % n_streams])
            ctl.mark("read")
            return [await o.to_numpy() for o in outs]
        outs = anyio.run(main)
        return {"outs": outs, "want": ref.conv_fprop(ins["x"], ins["w"], pre=1, post=1),
                "log": ctl.log()}


async def _execute_on(plan, vp, stream):
    await plan.execute(vp, stream=stream)


def device_facts() -> dict:
    """What the device and the provider say about the fake GPU."""
    import hipdnn_async as hd
    with hd.Device("hip:0") as dev:
        desc = dev.provider.describe()
        with hd.Device("gpu:0") as gpu:
            gpu_provider = gpu.provider.name
        return {"devices": hd.devices(), "describe": desc, "spec": dev.spec,
                "gpu_provider": gpu_provider}


def lower_clip_build(dtype: str = "bfloat16") -> dict:
    """The oracle's clamped ReLU (lower clip 0.1) on a conv + ReLU: built where MIOpen has
    CLAMP, declined (NotSupportedError naming the clip) where it does not."""
    import hipdnn_async as hd
    from oracle import test_patterns as tp
    from oracle._cases import Harness, rank_of
    # the oracle's clamp (tests/oracle/test_patterns.py CLIPS["bfloat16"]), for every dtype
    _oracle_for_gpu({dt: (0.1, 0.5) for dt in ("float32", "float16", "bfloat16")})
    rng = np.random.default_rng(5)
    h = Harness(dtype, "NCHW", name="contract_lower_clip")
    tp.PATTERNS["CONV_FPROP_BIAS_RELU/no-bias"](h, rank_of("NCHW"), rng)
    h._alloc_outputs()
    with hd.Device("hip:0") as dev:
        try:
            plan = dev.build_sync(h.g)
            return {"plan": plan_facts(plan), "error": None}
        except Exception as exc:  # noqa: BLE001 - returned to the test
            return {"plan": None, "error": exc}


def drelu_boundary(dtype: str, layout: str, intermediate) -> dict:
    """tests/gpu/_bn_cases.drelu_boundary_case on "hip:0", the graph's intermediate data
    type set to ``intermediate`` when given: its checks with the outputs, the float64 dx a
    rounded z gives (``flipped``), the plan's algorithm, or the build's error."""
    import hipdnn_async as hd
    from gpu._bn_cases import drelu_boundary_case
    h, checks, flipped = drelu_boundary_case(dtype, layout)
    if intermediate is not None:
        h.g.set_intermediate_data_type(intermediate)
        for n in h.g.nodes:   # the virtual tensors take the graph's new intermediate type
            for t in n.outputs.values():
                if t.is_virtual:
                    t.set_data_type(intermediate)
    with hd.Device("hip:0") as dev:
        try:
            got = h.run(dev)
        except hd.NotSupportedError as exc:
            return {"error": exc, "checks": [], "flipped": flipped, "algorithm": None}
        return {"error": None, "algorithm": h.plan.algorithm, "flipped": flipped,
                "checks": [(name, got[name], want, tol) for name, want, tol in checks]}
