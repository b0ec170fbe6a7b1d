"""Capture-and-replay scenarios for the worker process (see ``_worker.py``): public API only,
on the fake "cuda:0", returning logs, inputs and outputs for the tests to check.

A step here is conv fprop -> batchnorm training + ReLU -> conv fprop (FLOAT, NCHW): each
plan reads the previous one's output, so a replay that skips or reorders one is wrong.
"""
from __future__ import annotations

import numpy as np

from ._fakes import calls
from ._scenarios import control

__all__ = ["step3_case", "capture_failure_case", "chain_case", "rules_case",
           "close_parked_case", "recapture_race_case", "copy_during_step_capture_case",
           "end_capture_case", "EPS"]

EPS = 1e-5
N, C, HW = 2, 4, 6


def _graphs(hd):
    def conv(name):
        g = hd.Graph(name=name)
        x = g.tensor(dims=(N, C, HW, HW), name="x")
        w = g.tensor(dims=(C, C, 3, 3), name="w")
        y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
        return g, (x, w, y)

    g = hd.Graph(name="bn_relu")
    x = g.tensor(dims=(N, C, HW, HW), name="x")
    s = g.tensor(dims=(1, C, 1, 1), name="scale")
    b = g.tensor(dims=(1, C, 1, 1), name="bias")
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=EPS)
    r = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("r")
    mean.set_output(True).set_name("mean")
    inv.set_output(True).set_name("inv")
    return conv("conv1"), (g, (x, s, b, r, mean, inv)), conv("conv2")


class _Step3:
    def __init__(self, hd, dev, rng):
        (g1, self.t1), (g2, self.t2), (g3, self.t3) = _graphs(hd)
        self.plans = [dev.build_sync(g) for g in (g1, g2, g3)]
        f32 = np.float32
        self.host = {"x": rng.uniform(-1, 1, (N, C, HW, HW)).astype(f32),
                     "w1": rng.uniform(-1, 1, (C, C, 3, 3)).astype(f32),
                     "w2": rng.uniform(-1, 1, (C, C, 3, 3)).astype(f32),
                     "scale": rng.uniform(0.5, 1.5, (1, C, 1, 1)).astype(f32),
                     "bias": rng.uniform(-0.5, 0.5, (1, C, 1, 1)).astype(f32)}
        shapes = {"y": (N, C, HW, HW), "r": (N, C, HW, HW), "mean": (1, C, 1, 1),
                  "inv": (1, C, 1, 1), "z": (N, C, HW, HW), "z2": (N, C, HW, HW)}
        self.dev = {}
        for name, a in self.host.items():
            self.dev[name] = dev.empty(a.shape, a.dtype)
            self.dev[name].copy_from(a)
        for name, shape in shapes.items():
            self.dev[name] = dev.empty(shape, f32)
            self.dev[name].copy_from(np.full(shape, np.nan, f32))

    def submit_all(self, z="z"):
        d = self.dev
        (x1, w1, y1), (x2, s2, b2, r2, m2, i2), (x3, w3, y3) = self.t1, self.t2, self.t3
        self.plans[0].submit({x1: d["x"], w1: d["w1"], y1: d["y"]})
        self.plans[1].submit({x2: d["y"], s2: d["scale"], b2: d["bias"], r2: d["r"],
                              m2: d["mean"], i2: d["inv"]})
        self.plans[2].submit({x3: d["r"], w3: d["w2"], y3: d[z]})

    def read(self, *names):
        return {n: self.dev[n].to_numpy_sync() for n in names}


OUTS = ("y", "r", "mean", "inv", "z")


def step3_case(seed: int = 0) -> dict:
    """Capture the 3-plan step, replay it, copy a new x in and replay, recapture into
    another output buffer (the executable graph updated in place), close.

    Returns
    -------
    dict
        ``log`` (marks "capture", "captured", "replay0", "read0", "replay1", "read1",
        "recapture", "replay2", "read2", "close", "end"), ``inputs`` (host values of the
        inputs; ``x1`` the second x), ``before`` (outputs after the capture, before any
        replay), ``out0``, ``out1``, ``out2`` (outputs after each replay; out2 also z2),
        ``stream`` (the step's stream name), ``updates``, ``violations``.
    """
    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(seed)
    with hd.Device("cuda:0", streams=2) as dev:
        s = _Step3(hd, dev, rng)
        ctl.clear()
        ctl.mark("capture")
        with dev.capture() as step:
            s.submit_all()
        ctl.mark("captured")
        before = s.read(*OUTS)
        ctl.mark("replay0")
        step.replay_sync()
        ctl.mark("read0")
        out0 = s.read(*OUTS)
        x1 = rng.uniform(-1, 1, s.host["x"].shape).astype(np.float32)
        s.dev["x"].copy_from(x1)
        ctl.mark("replay1")
        step.replay_sync()
        ctl.mark("read1")
        out1 = s.read(*OUTS)
        ctl.mark("recapture")
        with step.recapture():
            s.submit_all(z="z2")
        ctl.mark("replay2")
        step.replay_sync()
        ctl.mark("read2")
        out2 = s.read(*OUTS, "z2")
        updates = step._replay.updates
        ctl.mark("close")
        step.close()
        ctl.mark("end")
        stream = step.stream.name
    return {"log": ctl.log(), "violations": ctl.violations(), "inputs": dict(s.host, x1=x1),
            "before": before, "out0": out0, "out1": out1, "out2": out2, "stream": stream,
            "updates": updates}


def capture_failure_case(inject: str, status: int, *, when: str = "capture",
                         also: tuple = ()) -> dict:
    """A step whose capture (``when="capture"``: ``inject`` fails inside the recorded
    work or in ending the capture), recapture update (``when="update"``) or replay
    (``when="replay"``: the first replay's ``inject``, e.g. its graph launch) fails by
    injection; ``also``: more (function, status) injections made with it.

    Returns
    -------
    dict
        ``error`` (type name and message of what the block raised, or None), ``replay``
        (what ``step.replay_sync()`` raised then, or None), ``after`` (outputs of an
        ordinary execution of the step's plans on the step's stream afterwards, or of the
        replay after the fallback), ``inputs``, ``log``, ``violations``.
    """
    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(1)
    with hd.Device("cuda:0", streams=1) as dev:
        s = _Step3(hd, dev, rng)
        error = replay = None
        ctl.clear()
        if when == "replay":
            with dev.capture() as step:
                s.submit_all()
        elif when == "update":
            with dev.capture() as step:
                s.submit_all()
            ctl.inject(inject, status)
            ctl.mark("capture")
            with step.recapture():
                s.submit_all(z="z2")
        else:
            ctl.inject(inject, status)
            for fn, st in also:
                ctl.inject(fn, st)
            ctl.mark("capture")
            try:
                with dev.capture() as step:
                    s.submit_all()
            except Exception as exc:   # noqa: BLE001 - reported to the test
                error = (type(exc).__name__, str(exc))
        ctl.mark("replay")
        ctl.clear_injections()
        if when == "replay":       # a step captured as usual whose graph launch fails
            ctl.inject(inject, status)
        try:
            step.replay_sync()
        except Exception as exc:   # noqa: BLE001
            replay = (type(exc).__name__, str(exc))
        ctl.mark("after")
        if replay is not None:      # the device goes on: run the plans plainly
            s.submit_all(z="z2" if when == "update" else "z")
            dev._pool.synchronize_blocking()
        after = s.read(*OUTS, "z2")
        step.close()
        ctl.mark("end")
    return {"error": error, "replay": replay, "after": after, "inputs": s.host,
            "log": ctl.log(), "violations": ctl.violations()}


def chain_case(length: int = 20, seed: int = 2) -> dict:
    """A step of ``length`` executions of one 1x1 conv plan, each reading the previous
    one's output (b0 -> b1 -> ... -> b<length>), replayed twice with a new b0 between.

    Returns
    -------
    dict
        ``w``, ``b0`` (first input), ``b0_next`` (second), ``out`` / ``out_next`` (every
        b_i after each replay), ``log`` (marks "capture", "replay0", "replay1", "end"),
        ``violations``.
    """
    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(seed)
    shape = (2, 8, 5, 5)
    with hd.Device("cuda:0", streams=1) as dev:
        g = hd.Graph(name="chain")
        x = g.tensor(dims=shape, name="x")
        w = g.tensor(dims=(8, 8, 1, 1), name="w")
        y = g.conv_fprop(x, w).set_output(True).set_name("y")
        plan = dev.build_sync(g)
        # orthogonal-ish weights keep 20 products bounded
        q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
        wa = q.astype(np.float32).reshape(8, 8, 1, 1)
        wd = dev.empty(wa.shape, np.float32)
        wd.copy_from(wa)
        bufs = [dev.empty(shape, np.float32) for _ in range(length + 1)]
        b0 = rng.uniform(-1, 1, shape).astype(np.float32)
        bufs[0].copy_from(b0)
        for b in bufs[1:]:
            b.copy_from(np.full(shape, np.nan, np.float32))
        ctl.clear()
        ctl.mark("capture")
        with dev.capture() as step:
            for i in range(length):
                plan.submit({x: bufs[i], w: wd, y: bufs[i + 1]})
        ctl.mark("replay0")
        step.replay_sync()
        ctl.mark("read0")
        out = [b.to_numpy_sync() for b in bufs]
        b0_next = rng.uniform(-1, 1, shape).astype(np.float32)
        bufs[0].copy_from(b0_next)
        ctl.mark("replay1")
        handle = step.submit()
        handle.result()
        ctl.mark("read1")
        out_next = [b.to_numpy_sync() for b in bufs]
        step.close()
        ctl.mark("end")
    return {"w": wa, "b0": b0, "b0_next": b0_next, "out": out, "out_next": out_next,
            "log": ctl.log(), "violations": ctl.violations()}


def _captured_conv1x1(hd, dev, name: str, rng):
    """A 1x1 conv fprop (x (2, 8, 5, 5), w (8, 8, 1, 1), FLOAT) on ``dev`` with U(-1, 1)
    inputs and a NaN-filled y, captured once: (plan, (x, w, y), buffers, x values,
    w values, step)."""
    g = hd.Graph(name=name)
    x = g.tensor(dims=(2, 8, 5, 5), name="x")
    w = g.tensor(dims=(8, 8, 1, 1), name="w")
    y = g.conv_fprop(x, w).set_output(True).set_name("y")
    plan = dev.build_sync(g)
    xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
    wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
    bufs = {t: dev.empty(t.dims, np.float32) for t in (x, w, y)}
    bufs[x].copy_from(xa)
    bufs[w].copy_from(wa)
    bufs[y].copy_from(np.full(y.dims, np.nan, np.float32))
    with dev.capture() as step:
        plan.submit(bufs)
    return plan, (x, w, y), bufs, xa, wa, step


def close_parked_case(replays: int = 4, delay_us: int = 20000, seed: int = 4) -> dict:
    """A one-plan step (1x1 conv x -> y) on a stream with ``max_inflight=1`` whose device
    runs each item ``delay_us`` late: ``replays`` replays submitted back to back (one in
    flight, the rest parked host-side), the step closed while they wait, then each
    handle's outcome and a submit after the close.

    Returns
    -------
    dict
        ``log`` (marks "submit", "close", "closed", "done"), ``parked`` (items parked
        when the step was closed), ``errors`` (each handle's exception, None when it
        succeeded), ``closed_submit`` (what ``step.submit()`` after the close raised),
        ``x``, ``w``, ``y`` (y read after the replays), ``violations``.
    """
    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(seed)
    with hd.Device("cuda:0", streams=1, max_inflight=1) as dev:
        plan, (x, w, y), bufs, xa, wa, step = _captured_conv1x1(hd, dev, "parked", rng)
        ctl.clear()
        ctl.set_delay_us(delay_us)
        try:
            ctl.mark("submit")
            handles = [step.submit() for _ in range(replays)]
            parked = step.stream.metrics()["parked"]
            ctl.mark("close")
            step.close()
            ctl.mark("closed")
            errors = [h.exception(timeout=60) for h in handles]
            ctl.mark("done")
        finally:
            ctl.set_delay_us(0)
        closed_submit = _error(step.submit)
        ya = bufs[y].to_numpy_sync()
    return {"log": ctl.log(), "violations": ctl.violations(), "parked": parked,
            "errors": [None if e is None else repr(e) for e in errors],
            "closed_submit": closed_submit, "x": xa, "w": wa, "y": ya}


class _Cai:
    """A device array known only through ``__cuda_array_interface__`` (CuPy-like), whose
    data pointer can be moved to another allocation."""

    def __init__(self, arr):
        self.arr = arr
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)

    def point_at(self, arr):
        self.arr = arr
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)


def submit_reuse_case(seed: int = 3) -> dict:
    """One conv plan submitted with the same CAI buffers several times, then with its x
    pointed at another allocation, then with new buffer objects.

    Returns
    -------
    dict
        ``log`` (marks "first", "again", "moved", "new", "end"), ``x`` / ``x2`` / ``w``
        inputs, ``y_again`` (after the second submission, x's data replaced in place
        before it), ``y_moved``, ``violations``.
    """
    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(seed)
    with hd.Device("cuda:0", streams=1) as dev:
        g = hd.Graph(name="reuse")
        x = g.tensor(dims=(N, C, HW, HW), name="x")
        w = g.tensor(dims=(C, C, 3, 3), name="w")
        y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
        plan = dev.build_sync(g)
        host = {k: rng.uniform(-1, 1, t.dims).astype(np.float32) for k, t in (("x", x), ("w", w))}
        host["x_new"] = rng.uniform(-1, 1, x.dims).astype(np.float32)
        host["x2"] = rng.uniform(-1, 1, x.dims).astype(np.float32)
        arrs = {}
        for k in ("x", "w", "x2"):
            arrs[k] = dev.empty(host[k].shape, np.float32)
            arrs[k].copy_from(host[k])
        arrs["y"] = dev.empty(y.dims, np.float32)
        cai = {k: _Cai(a) for k, a in arrs.items()}
        vp = {x: cai["x"], w: cai["w"], y: cai["y"]}
        ctl.clear()
        ctl.mark("first")
        plan.submit(dict(vp)).result()
        arrs["x"].copy_from(host["x_new"])           # new data, same buffer
        ctl.mark("again")
        plan.submit(dict(vp)).result()
        plan.submit(vp).result()
        ctl.mark("read_again")
        y_again = arrs["y"].to_numpy_sync()
        cai["x"].point_at(arrs["x2"])                 # the same object, another allocation
        ctl.mark("moved")
        plan.submit(vp).result()
        ctl.mark("read_moved")
        y_moved = arrs["y"].to_numpy_sync()
        ctl.mark("new")
        plan.submit({x: _Cai(arrs["x"]), w: cai["w"], y: cai["y"]}).result()
        ctl.mark("end")
    return {"log": ctl.log(), "violations": ctl.violations(), "x_new": host["x_new"],
            "x2": host["x2"], "w": host["w"], "y_again": y_again, "y_moved": y_moved}


def _error(call):
    """(type name, code, message) of what ``call()`` raised, or None."""
    import hipdnn_async as hd
    try:
        call()
    except hd.HipdnnError as exc:
        return (type(exc).__name__, exc.code, str(exc))
    return None


async def _aerror(make):
    import hipdnn_async as hd
    try:
        await make()
    except hd.HipdnnError as exc:
        return (type(exc).__name__, exc.code, str(exc))
    return None


def rules_case(backend: str = "asyncio", seed: int = 5) -> dict:
    """What may happen inside a capture block on the fake "cuda:0" (and a CPU device),
    awaited on ``backend``: refused executes, a recorded handle awaited, plans of the
    other device, another thread's execute on the step's stream while the block is open,
    a replay of a closed step.

    Returns
    -------
    dict
        ``errors`` (name -> (type, code, message) or None), ``x`` / ``w`` inputs,
        ``out`` (name -> output after everything: ``refused`` (the refused executes'),
        ``thread`` (the other thread's), ``task`` (a task's started inside the block),
        ``rec`` (the recorded submit's, after the
        replay), ``rec_before`` (the same before the replay), ``cpu_rec`` and
        ``cpu_refused`` (the CPU plan's)), ``recorded`` (len of each step), ``log`` (marks
        "block", "other", "other_done", "task_done", "captured", "replay", "replayed", "cpu_block",
        "cpu_captured", "end"), ``violations``.
    """
    import anyio

    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(seed)
    g = hd.Graph(name="rules")
    x = g.tensor(dims=(N, C, HW, HW), name="x")
    w = g.tensor(dims=(C, C, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
    wa = rng.uniform(-1, 1, w.dims).astype(np.float32)
    errors, out, recorded = {}, {}, {}

    with hd.Device("cuda:0", streams=2) as dev, hd.Device("cpu") as cpu:
        plan, cpu_plan = dev.build_sync(g), cpu.build_sync(g)
        xd, wd = dev.empty(x.dims, np.float32), dev.empty(w.dims, np.float32)
        xd.copy_from(xa)
        wd.copy_from(wa)
        ys = {}
        for name in ("refused", "thread", "task", "rec"):
            ys[name] = dev.empty(y.dims, np.float32)
            ys[name].copy_from(np.full(y.dims, np.nan, np.float32))
        cpu_ys = {n: np.full(y.dims, np.nan, np.float32) for n in ("cpu_rec", "cpu_refused")}

        def vp(name):
            return {x: xd, w: wd, y: ys[name]}

        def cpu_vp(name):
            return {x: xa, w: wa, y: cpu_ys[name]}

        async def main():
            ctl.clear()
            ctl.mark("block")
            async with dev.capture(stream=0) as step:
                errors["execute"] = await _aerror(lambda: plan.execute(vp("refused")))
                errors["execute_sync"] = _error(lambda: plan.execute_sync(vp("refused")))
                errors["cpu_plan_submit"] = _error(lambda: cpu_plan.submit(cpu_vp("cpu_refused")))
                errors["cpu_plan_execute"] = await _aerror(
                    lambda: cpu_plan.execute(cpu_vp("cpu_refused")))
                handle = plan.submit(vp("rec"))
                errors["await_handle"] = await _aerror(lambda: handle)
                ctl.mark("other")
                # another thread, the step's stream, while the block is open: runs now
                await anyio.to_thread.run_sync(
                    lambda: plan.execute_sync(vp("thread"), stream=0))
                ctl.mark("other_done")
                # a task started inside the block (its context, not its capture): runs now
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: plan.execute(vp("task"), stream=0))
                ctl.mark("task_done")
            ctl.mark("captured")
            recorded["cuda"] = len(step)
            out["rec_before"] = ys["rec"].to_numpy_sync()
            ctl.mark("replay")
            await step.replay()
            ctl.mark("replayed")
            ctl.mark("cpu_block")
            async with cpu.capture() as cstep:
                errors["cuda_plan_submit"] = _error(lambda: plan.submit(vp("refused")))
                errors["cuda_plan_execute_sync"] = _error(
                    lambda: plan.execute_sync(vp("refused")))
                errors["cuda_replay"] = await _aerror(step.replay)
                cpu_plan.submit(cpu_vp("cpu_rec"))
            await dev.synchronize()
            ctl.mark("cpu_captured")
            recorded["cpu"] = len(cstep)
            await cstep.replay()
            cstep.close()
            unit = step._replay                # the executable graph's owner
            step.close()
            errors["closed_graph_launcher"] = _error(unit.launcher)
            errors["closed_replay"] = await _aerror(step.replay)
            errors["closed_replay_sync"] = _error(step.replay_sync)
            ctl.mark("end")

        anyio.run(main, backend=backend)
        for name, arr in ys.items():
            out[name] = arr.to_numpy_sync()
        out.update(cpu_ys)
    return {"errors": errors, "x": xa, "w": wa, "out": out, "recorded": recorded,
            "log": ctl.log(), "violations": ctl.violations()}


def recapture_race_case(rounds: int = 6, threads: int = 3, seed: int = 6) -> dict:
    """A one-plan step (1x1 conv x -> y) replayed from ``threads`` threads (each replay
    awaited) while the main thread recaptures it ``rounds`` times into a new y buffer (the
    executable graph updated in place) and replays it.

    Returns
    -------
    dict
        ``x``, ``w``, ``ys`` (each round's y after its replay), ``replays`` (replays that
        ran), ``failed`` (their errors), ``refusals`` (the distinct DeviceError messages of
        refused submits), ``foreign`` (any other exception), ``updates``, ``instantiates``,
        ``destroys`` (calls after the first capture), ``violations``.
    """
    import threading

    import hipdnn_async as hd
    ctl = control()
    rng = np.random.default_rng(seed)
    with hd.Device("cuda:0", streams=1, max_inflight=2) as dev:
        plan, (x, w, y), bufs, xa, wa, step = _captured_conv1x1(hd, dev, "race", rng)
        ctl.clear()
        stop = threading.Event()
        ran, failed, refusals, foreign = [], [], set(), []

        def replayer():
            while not stop.is_set():
                try:
                    error = step.submit().exception(timeout=60)
                except hd.DeviceError as exc:
                    refusals.add(str(exc))
                    continue
                except BaseException as exc:  # noqa: BLE001 - reported to the test
                    foreign.append(repr(exc))
                    return
                ran.append(1)
                if error is not None:
                    failed.append(repr(error))

        workers = [threading.Thread(target=replayer) for _ in range(threads)]
        for t in workers:
            t.start()
        ys = []
        try:
            for _ in range(rounds):
                y2 = dev.empty(y.dims, np.float32)
                y2.copy_from(np.full(y.dims, np.nan, np.float32))
                with step.recapture():
                    plan.submit({x: bufs[x], w: bufs[w], y: y2})
                step.replay_sync()
                ys.append(y2.to_numpy_sync())
        finally:
            stop.set()
            for t in workers:
                t.join()
        step.close()
    log = ctl.log()
    return {"x": xa, "w": wa, "ys": ys, "replays": len(ran), "failed": failed,
            "refusals": sorted(refusals), "foreign": foreign,
            "updates": len(calls(log, "cudaGraphExecUpdate")),
            "instantiates": len(calls(log, "cudaGraphInstantiateWithFlags")),
            "destroys": len(calls(log, "cudaGraphExecDestroy")),
            "violations": ctl.violations()}


def copy_during_step_capture_case(backend_lib: str, *, captures: int = 3,
                                  delay_us: int = 20000) -> dict:
    """A one-plan step captured ``captures`` times (``dev.capture()``, each capture's
    ``cudnnBackendExecute`` taking ``delay_us`` on the host) while another thread copies
    host data into a device array of the same device all the while (``GpuArray.copy_from``
    records an event on every compute stream, the capturing one included, to order the
    copy stream after launched work).

    Returns
    -------
    dict
        ``log`` (marks "start", "end"), ``copies`` done, ``copy_errors`` (each failed
        copy's type and text), ``capture_errors`` (each failed capture's), ``replayed``
        (replays that completed), ``copied_ok`` (the last copy's bytes read back equal
        what was copied).
    """
    from ._launch_graph_scenarios import _backend, _fake_backend_conv, copies_alongside

    be = _backend(backend_lib)
    import hipdnn_async as hd
    ctl = control()
    out = {"capture_errors": [], "replayed": 0}
    with hd.Device("cuda:0", streams=1) as dev:
        plan, vp = _fake_backend_conv(dev, be, "step_capture_copy")
        plan.execute_sync(vp, stream=0)
        with copies_alongside(dev, ctl, delay_us, out):
            for _ in range(captures):
                try:
                    with dev.capture(stream=0) as step:
                        plan.submit(vp)
                    step.replay_sync()
                    out["replayed"] += 1
                    step.close()
                except Exception as exc:  # noqa: BLE001 - reported to the test
                    out["capture_errors"].append(f"{type(exc).__name__}: {exc}")
        out["log"] = ctl.log()
    return out


def _gpu_error(call):
    """(type name, status, call, message) of the GpuError ``call()`` raised, or None."""
    from hipdnn_async._errors import GpuError
    try:
        call()
    except GpuError as exc:
        return (type(exc).__name__, exc.status, exc.call, str(exc))
    return None


def end_capture_case(end_status: int, nbytes: int = 256) -> dict:
    """``Runtime.end_capture`` on the fake CUDA runtime, one stream, a buffer set to 1
    first; each case captures a memset of the buffer (to 7) and ends the capture:

    - "ok": ends normally (the graph is destroyed after);
    - "open": the end fails with ``end_status`` by injection, the capture left open (as a
      CUDA end failing without invalidation may), then a memset to 5 runs on the stream;
    - "invalidated": a cudaMalloc inside the capture invalidates it (one violation);
    - "idle": an end on the stream while it captures nothing.

    Returns
    -------
    dict
        Per case name: ``graph`` (the handle returned, or 0), ``error`` (``_gpu_error``
        facts or None), ``capturing`` (``stream_is_capturing`` after); ``open`` also
        ``before`` (the buffer after the failed end) and ``after`` (after the memset to
        5 and a synchronize); "invalidated" also ``malloc`` (what the cudaMalloc raised);
        ``log`` (marks "ok", "open", "invalidated", "idle", "end").
    """
    from hipdnn_async.runtime import load_vendor
    ctl = control()
    rt = load_vendor("cuda").runtime
    rt.set_device(0)
    s = rt.stream_create()
    a = rt.malloc(nbytes, 0, False)
    host = np.zeros(nbytes, np.uint8)

    def read():
        rt.stream_synchronize(s)
        rt.memcpy(host.ctypes.data, a, nbytes, rt.MEMCPY_DEVICE_TO_HOST)
        return host.copy()

    rt.memset_async(a, 1, nbytes, s)
    read()
    out = {}
    ctl.clear()
    for case in ("ok", "open", "invalidated", "idle"):
        ctl.mark(case)
        got = {"graph": 0}
        if case != "idle":
            rt.stream_begin_capture(s)
            rt.memset_async(a, 7, nbytes, s)          # recorded, not run
        if case == "invalidated":
            got["malloc"] = _gpu_error(lambda: rt.malloc(16, 0, False))
        if case == "open":
            ctl.inject("cudaStreamEndCapture", end_status)

        def end():
            got["graph"] = rt.end_capture(s)
        got["error"] = _gpu_error(end)
        ctl.clear_injections()
        got["capturing"] = rt.stream_is_capturing(s)
        if case == "ok" and got["graph"]:
            rt.graph_destroy(got["graph"])
        if case == "open":
            got["before"] = read()
            rt.memset_async(a, 5, nbytes, s)
            got["after"] = read()
        out[case] = got
    ctl.mark("end")
    rt.stream_destroy(s)
    rt.free(a, 0, False)
    out["log"] = ctl.log()
    return out
