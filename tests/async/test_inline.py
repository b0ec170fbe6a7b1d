"""Executions run on the submitting thread (``queues._core.run_inline``): an idle host
stream runs ``execute_sync`` there, and ``plan.submit`` / ``await plan.execute`` of work
measured short; every guarantee of the README's streams section holds as on the worker:
stream order with work already queued or submitted meanwhile, errors reaching only the
failing execution, cancellation, ``max_inflight`` backpressure."""
import threading
import time

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._base import ProviderPlan
from hipdnn_async.queues import Completion, _core
from hipdnn_async.queues._pool import INLINE_MAX_S

pytestmark = pytest.mark.anyio


def tiny_graph():
    """y = conv(x, w), x (1, 4, 6, 6), w (4, 4, 1, 1): a kernel of microseconds."""
    g = hd.Graph(name="tiny")
    x = g.tensor(dims=(1, 4, 6, 6), name="x")
    w = g.tensor(dims=(4, 4, 1, 1), name="w")
    g.conv_fprop(x, w).set_output(True).set_name("y")
    return g


def ref(xa, wa):
    """float64 1x1 cross-correlation (independent of the library)."""
    return np.einsum("nchw,kc->nkhw", xa.astype(np.float64), wa[:, :, 0, 0].astype(np.float64))


def pack(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32),
            "w": rng.standard_normal((4, 4, 1, 1)).astype(np.float32),
            "y": np.full((1, 4, 6, 6), np.nan, np.float32)}


class Probe(ProviderPlan):
    """The real provider plan, run with hooks around it: which thread ran each execution
    (``threads``), and ``before()`` / ``after()`` callables."""

    def __init__(self, real, before=None, after=None):
        self.real, self.before, self.after = real, before, after
        self.algorithm, self.workspace_size = real.algorithm, real.workspace_size
        self.threads = []

    def run(self, buffers, workspace):
        self.threads.append(threading.current_thread())
        if self.before is not None:
            self.before()
        self.real.run(buffers, workspace)
        if self.after is not None:
            self.after()


def probed(dev, **hooks):
    plan = dev.build_sync(tiny_graph())
    plan._pplan = probe = Probe(plan._pplan, **hooks)     # before any binding is made
    return plan, probe


def worker_of(dev, i=0):
    return dev.streams[i].backend._thread


MEASURED = 8


def measured(plan, vp):
    """Run ``plan`` at least MEASURED times (execute_sync, inline on an idle stream) until
    its estimate (the shortest of its last runs) is within the inline bound: a kernel's
    first runs, or runs while other processes hold the cores, may take longer.
    Return the number of runs."""
    for i in range(100 * MEASURED):
        plan.execute_sync(vp)
        if i + 1 >= MEASURED and plan._timer.estimate_s <= INLINE_MAX_S:
            break
    assert plan._timer.estimate_s <= INLINE_MAX_S
    return i + 1


def test_execute_sync_on_an_idle_stream_runs_on_the_calling_thread():
    with hd.Device("cpu", streams=1) as dev:
        plan, probe = probed(dev)
        vp = pack()
        plan.execute_sync(vp)
        assert probe.threads == [threading.current_thread()]
        np.testing.assert_allclose(vp["y"], ref(vp["x"], vp["w"]), rtol=1e-5, atol=1e-5)
        m = dev.metrics()
        assert (m["submitted"], m["completed"], m["failed"], m["in_flight"]) == (1, 1, 0, 0)
        assert m["exec_ms"]["count"] == 1 and m["queue_wait_ms"]["count"] == 1


def test_inline_waits_behind_work_already_queued_on_the_stream():
    # an item queued (running, blocked) on stream 0: execute_sync, submit and a later
    # execute_sync on that stream go behind it, in order, on the worker
    with hd.Device("cpu", streams=2) as dev:
        plan, probe = probed(dev)
        vp = pack(1)
        plan.execute_sync(vp)                       # measured: short work from now on
        gate, order = threading.Event(), []
        x_new = np.ones_like(vp["x"])

        def blocker():
            assert gate.wait(10)
            vp["x"][...] = x_new                    # what the later executions must read
            order.append("blocker")

        held = dev._pool.submit_now(blocker, stream=0)
        done = threading.Event()

        def sync_caller():
            plan.execute_sync(vp, stream=0)
            order.append("execute_sync")
            done.set()

        t = threading.Thread(target=sync_caller)
        t.start()
        h = plan.submit(vp, stream=0)
        time.sleep(0.05)
        assert not done.is_set() and not h.done() and order == []
        gate.set()
        t.join(10)
        h.result(timeout=10)
        held.result(timeout=10)
        assert order == ["blocker", "execute_sync"]
        assert probe.threads[1:] == [worker_of(dev, 0)] * 2
        np.testing.assert_allclose(vp["y"], ref(x_new, vp["w"]), rtol=1e-5, atol=1e-5)


def test_work_submitted_during_an_inline_run_starts_after_it():
    # thread A runs an item inline and blocks inside it; thread B submits to the same
    # stream meanwhile: B's item waits (held behind the inline one), then runs on the
    # worker, after A's has finished
    with hd.Device("cpu", streams=1) as dev:
        stream = dev.streams[0]
        inside, release, order = threading.Event(), threading.Event(), []

        def slow():
            inside.set()
            assert release.wait(10)
            order.append("inline")

        result = {}

        def run_a():
            result["a"] = _core.run_inline(Completion, stream, slow, (), "a", None, -1.0)

        a = threading.Thread(target=run_a)
        a.start()
        assert inside.wait(10)
        b = dev._pool.submit_now(lambda: order.append("queued"), stream=stream)
        ev = stream.record_event()
        time.sleep(0.05)
        assert not b.done() and order == [] and stream.pending == 2
        release.set()
        a.join(10)
        b.result(timeout=10)
        ev.synchronize(10)
        item = result["a"]
        assert item is not None and item.done() and order == ["inline", "queued"]
        assert b.started_at >= item.finished_at
        assert stream.metrics()["completed"] == 2


def test_an_inline_error_reaches_only_its_execution_and_the_stream_goes_on():
    with hd.Device("cpu", streams=1) as dev:
        good, _ = probed(dev)
        bad = dev.build_sync(tiny_graph())

        class Broken(ProviderPlan):
            algorithm, workspace_size = None, 0

            def run(self, buffers, workspace):
                raise ZeroDivisionError("kernel failed")

        bad._pplan = Broken()
        vp_bad, vp_good = pack(2), pack(3)
        with pytest.raises(hd.ExecutionError, match="ZeroDivisionError: kernel failed") as ei:
            bad.execute_sync(vp_bad)
        assert "CONV_FPROP" in str(ei.value)
        handle = bad.submit(vp_bad)     # a failed run is not timed: no estimate, queued
        assert isinstance(handle.exception(timeout=10), hd.ExecutionError)
        good.execute_sync(vp_good)
        np.testing.assert_allclose(vp_good["y"], ref(vp_good["x"], vp_good["w"]),
                                   rtol=1e-5, atol=1e-5)
        m = dev.metrics()
        assert (m["submitted"], m["completed"], m["failed"], m["in_flight"]) == (3, 1, 2, 0)


async def test_short_work_runs_on_the_loop_thread_and_long_work_never_does(anyio_backend):
    async with hd.Device("cpu", streams=1) as dev:
        short, sp = probed(dev)
        long_, lp = probed(dev, before=lambda: time.sleep(20 * INLINE_MAX_S))
        vp_s, vp_l = pack(4), pack(5)
        me = threading.current_thread()
        await short.execute(vp_s)
        await long_.execute(vp_l)
        # the first of each runs on the worker (no estimate yet)
        assert sp.threads == [worker_of(dev)] and lp.threads == [worker_of(dev)]
        measured(short, vp_s)               # (a first run may be slow: timed a few times)
        del sp.threads[:]
        for _ in range(3):
            await short.execute(vp_s)
            await long_.execute(vp_l)
        # measured short, on the loop's thread; measured long, never
        assert sp.threads == [me] * 3
        assert lp.threads == [worker_of(dev)] * 4
        for vp in (vp_s, vp_l):
            np.testing.assert_allclose(vp["y"], ref(vp["x"], vp["w"]), rtol=1e-5, atol=1e-5)


async def test_a_cancelled_execute_runs_nothing(anyio_backend):
    async with hd.Device("cpu", streams=1) as dev:
        plan, probe = probed(dev)
        vp = pack(6)
        runs = measured(plan, vp)               # it would run inline
        vp["y"][...] = np.nan
        with anyio.CancelScope() as scope:
            scope.cancel()
            await plan.execute(vp)
        assert scope.cancelled_caught
        assert np.isnan(vp["y"]).all() and len(probe.threads) == runs
        assert dev.metrics()["submitted"] == runs


async def test_a_cancellation_during_an_inline_run_lets_it_complete(anyio_backend):
    # the scope is cancelled from inside the work (the loop's thread runs it): the
    # execution completes and writes its outputs; the task is cancelled afterwards
    async with hd.Device("cpu", streams=1) as dev:
        plan, probe = probed(dev)
        vp = pack(7)
        runs = measured(plan, vp)
        scope = anyio.CancelScope()
        probe.after = scope.cancel
        vp["y"][...] = np.nan
        after = []
        with scope:
            await plan.execute(vp)
            after.append("returned")
            await anyio.sleep(0)                # the cancellation is delivered here
            after.append("not cancelled")
        assert scope.cancelled_caught and after == ["returned"]
        assert probe.threads[-1] is threading.current_thread()
        np.testing.assert_allclose(vp["y"], ref(vp["x"], vp["w"]), rtol=1e-5, atol=1e-5)
        m = dev.metrics()
        assert (m["completed"], m["in_flight"]) == (runs + 1, 0)


async def test_max_inflight_counts_an_inline_execution(anyio_backend):
    # max_inflight=1: while an execution runs inline on another thread, it holds the
    # stream's slot: enqueue waits for it, submit parks behind it
    async with hd.Device("cpu", streams=1, max_inflight=1) as dev:
        inside, release = threading.Event(), threading.Event()
        plan, probe = probed(dev)
        vp, vp2, vp3 = pack(8), pack(9), pack(10)
        runs = measured(plan, vp)
        probe.before = lambda: (inside.set(), release.wait(10))
        t = threading.Thread(target=plan.execute_sync, args=(vp,))
        t.start()
        assert await anyio.to_thread.run_sync(inside.wait, 10)
        probe.before = None
        assert probe.threads[-1] is t and dev.metrics()["in_flight"] == 1
        with anyio.move_on_after(0.05):
            await plan.enqueue(vp2)             # waits for the slot
            pytest.fail("enqueue did not wait for the inline execution's slot")
        parked = plan.submit(vp3)
        m = dev.metrics()
        assert (m["in_flight"], m["parked"]) == (1, 1) and not parked.done()
        release.set()
        await anyio.to_thread.run_sync(t.join, 10)
        await parked
        handle = await plan.enqueue(vp2)
        await handle
        for v in (vp, vp2, vp3):
            np.testing.assert_allclose(v["y"], ref(v["x"], v["w"]), rtol=1e-5, atol=1e-5)
        m = dev.metrics()
        n = runs + 3
        assert (m["submitted"], m["completed"], m["in_flight"], m["parked"]) == (n, n, 0, 0)


async def test_a_profile_open_keeps_the_inline_path_and_records_it(anyio_backend):
    # the profiler's record travels with the work (recorder=): with a profile open,
    # execute_sync, plan.submit and await plan.execute run where they run without one
    # (inline on the idle stream), and each is recorded with its stream and times
    with hd.Device("cpu", streams=1) as dev:
        plan, probe = probed(dev)
        vp = pack(3)
        measured(plan, vp)
        probe.threads.clear()
        with dev.profile() as prof:
            plan.execute_sync(vp)
            handle = plan.submit(vp)
            assert handle.done()                     # ran inline: back already done
            await plan.execute(vp)
        assert probe.threads == [threading.current_thread()] * 3
        np.testing.assert_allclose(vp["y"], ref(vp["x"], vp["w"]), rtol=1e-5, atol=1e-5)
        assert [r.kind for r in prof.executions] == ["execution"] * 3
        for r in prof.executions:
            assert r.ok and r.stream == dev.streams[0].name
            assert r.submitted <= r.started <= r.ended
