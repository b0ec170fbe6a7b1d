"""What may happen inside a capture block (docs/guide/capture.md), on the CPU device,
asyncio and trio: only ``submit`` / ``enqueue`` of the capturing device's plans record;
``execute`` / ``execute_sync``, a plan of another device, a replay, and awaiting a recorded
handle are ``DeviceError``s (code ``INVALID_VALUE``) and run nothing; the capture belongs
to the task that entered the block, so other tasks and threads (also ones started inside
it) run as usual and nothing of theirs is recorded or lost. Error codes of the capture API
and of an absent device. Results against the float64 oracle (tests/oracle/_reference.py).
"""
from __future__ import annotations

import threading

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async import _capture
from oracle import _reference as R
from oracle._cases import assert_close, reduction_tol

pytestmark = pytest.mark.anyio

N, C, HW = 2, 4, 6
MISUSE = "INVALID_VALUE"


class Conv:
    """A 3x3 conv plan with its own input values and a NaN-filled output per ``pack()``."""

    def __init__(self, plan, x, w, y, seed):
        rng = np.random.default_rng(seed)
        self.plan, self.x, self.w, self.y = plan, x, w, y
        self.xa = rng.uniform(-1, 1, x.dims).astype(np.float32)
        self.wa = rng.uniform(-1, 1, w.dims).astype(np.float32)

    def pack(self):
        return {self.x: self.xa, self.w: self.wa, self.y: np.full(self.y.dims, np.nan,
                                                                  np.float32)}

    def check(self, vp, what="y"):
        assert_close(vp[self.y], R.conv_fprop(self.xa, self.wa, pre=1, post=1),
                     *reduction_tol("conv_fprop", "float32", C * 9), what=what)


def _graph(name="c"):
    g = hd.Graph(name=name)
    x = g.tensor(dims=(N, C, HW, HW), name="x")
    w = g.tensor(dims=(C, C, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g, x, w, y


async def conv(dev, seed=0, name="c"):
    g, x, w, y = _graph(name)
    return Conv(await dev.build(g), x, w, y, seed)


def captured(dev, name, seed):
    """(Conv, step) of a conv plan built on ``dev`` and captured once (sync block)."""
    g, x, w, y = _graph(name)
    c = Conv(dev.build_sync(g), x, w, y, seed)
    step = dev.capture()
    with step:
        c.plan.submit(c.pack())
    return c, step


def untouched(vp, c):
    return np.isnan(vp[c.y]).all()


@pytest.fixture(autouse=True)
def no_capture_left_open():
    yield
    assert getattr(_capture, "OPEN", 0) == 0, "a capture block left the process-wide count raised"


# ------------------------------------------------------------------------ F5: execute
async def test_execute_inside_a_capture_is_refused_and_runs_nothing(anyio_backend):
    async with hd.Device("cpu") as dev:
        c = await conv(dev)
        refused, rec = c.pack(), c.pack()
        async with dev.capture() as step:
            with pytest.raises(hd.DeviceError, match="execute inside a capture: use submit; "
                               "results come from replay") as ei:
                await c.plan.execute(refused)
            assert ei.value.code == MISUSE and "stream 'cpu:s0'" in str(ei.value)
            with pytest.raises(hd.DeviceError, match="execute_sync inside a capture: use "
                               "submit") as ei:
                c.plan.execute_sync(refused)           # a blocking call in the async block
            assert ei.value.code == MISUSE
            c.plan.submit(rec)                         # the block goes on recording
        await dev.synchronize()
        assert len(step) == 1 and untouched(refused, c) and untouched(rec, c)
        await step.replay()
        c.check(rec)
        assert untouched(refused, c), "a refused execute ran at replay"
        step.close()


async def test_an_uncaught_execute_error_fails_the_step(anyio_backend):
    async with hd.Device("cpu") as dev:
        c = await conv(dev)
        vp = c.pack()
        with pytest.raises(hd.DeviceError, match="execute inside a capture"):
            async with dev.capture() as step:
                c.plan.submit(vp)
                await c.plan.execute(vp)
        with pytest.raises(hd.DeviceError, match="nothing to replay") as ei:
            await step.replay()
        assert ei.value.code == MISUSE
        await c.plan.execute(vp)                       # outside the block: runs
        c.check(vp)


def test_execute_sync_inside_a_sync_capture_is_refused():
    with hd.Device("cpu") as dev:
        g, x, w, y = _graph()
        c = Conv(dev.build_sync(g), x, w, y, 1)
        refused, rec = c.pack(), c.pack()
        with dev.capture() as step:
            with pytest.raises(hd.DeviceError, match="execute_sync inside a capture"):
                c.plan.execute_sync(refused)
            c.plan.submit(rec)
        step.replay_sync()
        c.check(rec)
        assert untouched(refused, c)
        # the hipDNN spelling is the same execution: refused too
        g.build_operation_graph(dev)
        g.create_execution_plan_ext(g.get_ranked_engine_ids()[0], [])
        g.build_plans()
        with dev.capture() as step2:
            with pytest.raises(hd.DeviceError, match="execute_sync inside a capture"):
                g.execute(refused, None)
        assert len(step2) == 0 and untouched(refused, c)
        step.close()
        step2.close()


# ------------------------------------------------------------- the handle of a record
async def test_awaiting_a_recorded_handle_raises_instead_of_claiming_a_result(anyio_backend):
    async with hd.Device("cpu") as dev:
        c = await conv(dev)
        vp = c.pack()
        async with dev.capture() as step:
            handle = c.plan.submit(vp)
            assert not handle.done()
            with anyio.fail_after(5):                  # no deadlock waiting for a replay
                with pytest.raises(hd.DeviceError, match="recorded into capture step") as ei:
                    await handle
            assert ei.value.code == MISUSE and "step.replay()" in str(ei.value)
        for call in (handle.result, handle.wait, handle.exception):
            with pytest.raises(hd.DeviceError, match="runs only when the step is replayed"):
                call()
        await step.replay()
        c.check(vp)
        assert not handle.done()                       # a replay has its own handle
        with pytest.raises(hd.DeviceError, match="recorded into"):
            await handle
        step.close()


# ----------------------------------------------------------- F6: another device's plan
async def test_a_plan_of_another_device_inside_a_capture_is_refused(anyio_backend):
    async with hd.Device("cpu") as a, hd.Device("cpu") as b:
        ca, cb = await conv(a, 0), await conv(b, 1)
        va, vb = ca.pack(), cb.pack()
        async with b.capture() as step:
            for call in (lambda: ca.plan.submit(va), lambda: ca.plan.execute_sync(va)):
                with pytest.raises(hd.DeviceError, match="inside a capture of this device "
                                                         "'cpu' object") as ei:
                    call()
                msg = str(ei.value)    # two devices of one spec: named apart
                assert ei.value.code == MISUSE and "a plan of another device 'cpu' object" in msg
                assert "capture step on stream 'cpu:s0'" in msg, msg
            with pytest.raises(hd.DeviceError, match="executed inside a capture of this device"):
                await ca.plan.execute(va)
            with pytest.raises(hd.DeviceError, match="submitted inside a capture"):
                await ca.plan.enqueue(va)
            cb.plan.submit(vb)
        await a.synchronize()
        assert untouched(va, ca), "the other device's plan ran"
        assert len(step) == 1
        await step.replay()
        cb.check(vb)
        assert untouched(va, ca)
        step.close()


async def test_two_devices_captured_together_each_record_their_own(anyio_backend):
    async with hd.Device("cpu") as a, hd.Device("cpu") as b:
        ca, cb = await conv(a, 0), await conv(b, 1)
        va, vb = ca.pack(), cb.pack()
        async with a.capture() as sa, b.capture() as sb:
            ca.plan.submit(va)
            cb.plan.submit(vb)
            cb.plan.submit(vb)
        assert (len(sa), len(sb)) == (1, 2) and untouched(va, ca) and untouched(vb, cb)
        await sa.replay()
        ca.check(va)
        assert untouched(vb, cb)
        await sb.replay()
        cb.check(vb)
        sa.close()
        sb.close()


async def test_a_replay_inside_a_capture_is_refused(anyio_backend):
    async with hd.Device("cpu") as dev, hd.Device("cpu") as other:
        c, o = await conv(dev), await conv(other, 1)
        vp, vo = c.pack(), o.pack()
        async with dev.capture() as first:
            c.plan.submit(vp)
        async with other.capture() as foreign:
            o.plan.submit(vo)
        async with dev.capture() as second:
            for step in (first, foreign):
                with pytest.raises(hd.DeviceError, match="inside a capture") as ei:
                    await step.replay()
                assert ei.value.code == MISUSE
                for call in (step.replay_sync, step.submit):
                    with pytest.raises(hd.DeviceError, match="a step records plan submissions"):
                        call()
        await dev.synchronize()
        await other.synchronize()
        assert untouched(vp, c) and untouched(vo, o) and len(second) == 0
        await first.replay()                           # outside: replays as usual
        c.check(vp)
        for s in (first, foreign, second):
            s.close()


# ------------------------------------------------ the capture is the entering task's
async def test_a_task_started_inside_the_block_runs_as_usual(anyio_backend):
    async with hd.Device("cpu", streams=1) as dev:
        c = await conv(dev)
        rec, child_exec, child_sub, late = c.pack(), c.pack(), c.pack(), c.pack()
        submitted, recapturing, late_done = anyio.Event(), anyio.Event(), anyio.Event()

        async def child():
            # it inherits the block's context variables, not its capture
            await c.plan.execute(child_exec)              # not refused: runs now
            await c.plan.submit(child_sub)                # runs now, awaitable
            submitted.set()
            await recapturing.wait()
            await c.plan.execute(late)                    # during the parent's recapture
            late_done.set()

        async with anyio.create_task_group() as tg:
            async with dev.capture() as step:
                tg.start_soon(child)
                c.plan.submit(rec)
                with anyio.fail_after(10):
                    await submitted.wait()
            c.check(child_exec, "child execute")
            c.check(child_sub, "child submit")
            assert len(step) == 1 and untouched(rec, c)
            async with step.recapture():
                c.plan.submit(rec)
                recapturing.set()
                with anyio.fail_after(10):
                    await late_done.wait()
        c.check(late, "child execute during the recapture")
        assert len(step) == 1
        await step.replay()
        c.check(rec)
        step.close()


async def test_threads_run_as_usual_during_a_capture(anyio_backend):
    async with hd.Device("cpu", streams=1) as dev:
        c = await conv(dev)
        rec, in_worker, in_thread = c.pack(), c.pack(), c.pack()
        errors = []

        def plain_thread():
            try:
                c.plan.execute_sync(in_thread)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        async with dev.capture() as step:
            c.plan.submit(rec)
            # anyio's worker thread copies the block's context: still not the capturing task
            await anyio.to_thread.run_sync(c.plan.execute_sync, in_worker)
            t = threading.Thread(target=plain_thread)
            t.start()
            await anyio.to_thread.run_sync(t.join)
        assert not errors, errors
        c.check(in_worker, "worker thread")
        c.check(in_thread, "plain thread")
        assert len(step) == 1 and untouched(rec, c)
        await step.replay()
        c.check(rec)
        step.close()


def test_two_threads_capture_the_same_stream_at_once():
    with hd.Device("cpu", streams=1) as dev:
        g, x, w, y = _graph()
        plan = dev.build_sync(g)
        convs = [Conv(plan, x, w, y, seed) for seed in range(2)]
        packs = [[c.pack() for _ in range(i + 1)] for i, c in enumerate(convs)]
        inside = threading.Barrier(2)
        steps, errors = [None, None], []

        def capture(i):
            try:
                with dev.capture() as step:
                    inside.wait(10)                   # both blocks open together
                    for vp in packs[i]:
                        convs[i].plan.submit(vp)
                    inside.wait(10)
                steps[i] = step
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=capture, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert [len(s) for s in steps] == [1, 2]
        for i, step in enumerate(steps):
            assert all(untouched(vp, convs[i]) for vp in packs[i])
            step.replay_sync()
            for vp in packs[i]:
                convs[i].check(vp, f"step {i}")
            step.close()


# -------------------------------------------------------------------------- F7: codes
async def test_capture_api_errors_say_invalid_value(anyio_backend):
    async with hd.Device("cpu") as dev:
        c = await conv(dev)
        step = dev.capture()
        with pytest.raises(hd.DeviceError, match="never captured") as ei:
            await step.replay()
        codes = [ei.value.code]
        async with step:
            c.plan.submit(c.pack())
            with pytest.raises(hd.DeviceError, match="still recording") as ei:
                step.submit()
            codes.append(ei.value.code)
            with pytest.raises(hd.DeviceError, match="do not nest") as ei:
                async with dev.capture():
                    pass
            codes.append(ei.value.code)
        # a bad stream names the capture, not an execute
        last = len(dev.streams) - 1
        with pytest.raises(hd.DeviceError, match=rf"^capture: .*stream index {last + 1} "
                                                 rf"outside \[0, {last}\]") as ei:
            async with dev.capture(stream=last + 1):
                pass
        codes.append(ei.value.code)
        step.close()
        for call in (step.replay_sync, step.submit, step.recapture):
            with pytest.raises(hd.DeviceError, match="closed") as ei:
                call()
            codes.append(ei.value.code)
        async with dev.capture() as ready:
            c.plan.submit(c.pack())
        unit = step.stream.backend.capture(())()            # the backend's unit, closed
        unit.close()
        with pytest.raises(hd.DeviceError, match="closed capture step") as ei:
            unit.launcher()
        codes.append(ei.value.code)
    with pytest.raises(hd.DeviceError, match="closed") as ei:
        async with dev.capture():
            pass
    codes.append(ei.value.code)
    for call in (ready.replay_sync, ready.submit):     # a step of a closed device
        with pytest.raises(hd.DeviceError, match="after close") as ei:
            call()
        codes.append(ei.value.code)
    assert codes == [MISUSE] * len(codes)


def test_an_absent_gpu_is_a_backend_error_not_a_plan_creation_failure():
    present = hd.devices()
    if any(d.startswith("cuda:") for d in present):
        pytest.skip(f"a CUDA device is present here ({present})")
    with pytest.raises(hd.DeviceError, match="no usable CUDA device") as ei:
        hd.Device("cuda:0")
    assert ei.value.code == "HIPDNN_BACKEND_ERROR"


# ---------------------------------------------------------- replays racing a close
def test_replays_submitted_from_threads_racing_a_close_run_or_say_closed():
    # step.submit reads the ready step without its lock: a submission that saw it ready
    # runs to completion even when close() came right after; later ones say closed
    g, x, w, y = _graph("race")
    with hd.Device("cpu", streams=1) as dev:
        c = Conv(dev.build_sync(g), x, w, y, seed=7)
        vp = c.pack()
        with dev.capture() as step:
            c.plan.submit(vp)
        step.replay_sync()
        c.check(vp, "the first replay")
        vp[y].fill(np.nan)
        handles, ends = [], []          # ends: (replays submitted, the error or None)
        start = threading.Barrier(5)

        def submitter():
            start.wait()
            mine, error = [], None
            for _ in range(200):
                try:
                    mine.append(step.submit())
                except hd.DeviceError as exc:
                    error = exc
                    break
            handles.extend(mine)
            ends.append((len(mine), error))

        threads = [threading.Thread(target=submitter) for _ in range(4)]
        for t in threads:
            t.start()
        start.wait()
        step.close()
        for t in threads:
            t.join()
        for h in handles:
            assert h.result(timeout=60) is None
        assert len(ends) == 4
        for n, error in ends:
            if error is None:
                assert n == 200
            else:               # once closed, every later submit says so
                assert error.code == MISUSE and "is closed" in str(error), str(error)
        m = dev.metrics()
        # the capture item, replay_sync and every handle: all run, none failed
        assert m["completed"] == m["submitted"] == len(handles) + 2 and m["failed"] == 0
        if handles:
            c.check(vp, "the replays submitted before the close")


# ------------------------------------------- a capture that cannot even be submitted
async def test_a_block_whose_capture_cannot_be_submitted_fails_the_step(anyio_backend):
    # the device closed inside the block: the block's end cannot submit the capture item;
    # the step must then say why it has nothing to replay (it is no longer recording)
    # and take a recapture, not claim to be still recording forever
    dev = hd.Device("cpu")
    async with dev:
        c = await conv(dev)
        step = dev.capture()
        with pytest.raises(hd.DeviceError, match="after close"):
            async with step:
                c.plan.submit(c.pack())
                dev.close()
    assert "recording" not in repr(step), repr(step)
    for call in (step.submit, step.replay_sync):
        with pytest.raises(hd.DeviceError, match="nothing to replay") as ei:
            call()
        assert ei.value.code == MISUSE and "after close" in str(ei.value), str(ei.value)
        assert "still recording" not in str(ei.value)
    with pytest.raises(hd.DeviceError, match="closed") as ei:    # the device, not the step
        with step.recapture():
            pass
    assert "already recording" not in str(ei.value), str(ei.value)
    step.close()


def test_a_sync_block_whose_capture_cannot_be_submitted_fails_the_step():
    g, x, w, y = _graph("sync_closed")
    dev = hd.Device("cpu")
    with dev:
        c = Conv(dev.build_sync(g), x, w, y, seed=8)
        step = dev.capture()
        with pytest.raises(hd.DeviceError, match="after close"):
            with step:
                c.plan.submit(c.pack())
                dev.close()
    with pytest.raises(hd.DeviceError, match="nothing to replay") as ei:
        step.submit()
    assert "after close" in str(ei.value), str(ei.value)


def test_a_step_closed_while_its_capture_fails_stays_closed():
    # another thread's close() during a failing capture: the step stays closed (a
    # closed step is never recapturable)
    with hd.Device("cpu") as dev:
        _, step = captured(dev, "closed_fail", seed=9)
        step.close()
        step._fail("a late failure")          # what a failing capture item reports
        assert "closed" in repr(step), repr(step)
        with pytest.raises(hd.DeviceError, match="is closed"):
            step.submit()
        with pytest.raises(hd.DeviceError, match="closed"):
            step.recapture()


def test_a_close_racing_a_recapture_leaves_the_step_closed():
    # close() from another thread while a recapture is being entered (here: during the
    # device check of its entry, the widest point of that window): the step stays
    # closed, the block is refused, and nothing is left open (OPEN back to 0)
    with hd.Device("cpu") as dev:
        c, step = captured(dev, "close_vs_recapture", seed=10)
        check_open = dev._check_open

        def closing_meanwhile(what):
            check_open(what)
            t = threading.Thread(target=step.close)
            t.start()
            t.join()

        dev._check_open = closing_meanwhile
        try:
            with pytest.raises(hd.DeviceError, match="closed") as ei:
                with step.recapture():
                    c.plan.submit(c.pack())
        finally:
            del dev._check_open
        assert ei.value.code == MISUSE
        assert "closed" in repr(step), repr(step)
        assert _capture.OPEN == 0
        with pytest.raises(hd.DeviceError, match="is closed"):
            step.submit()
