"""Waits that cannot end and waits that were cut short: a blocking wait on a stream from the
thread that runs it (a done callback) is refused instead of hanging; a Ctrl-C in
``step.__exit__`` or ``profile.stop()`` leaves the object usable (the step settles, a
second stop collects; ``dev.close()``: tests/unit/test_process_signals.py, with a real
SIGINT); a batcher called from another thread's loop, a recorded handle's callback API
and a callback's error with logging off.
"""
from __future__ import annotations

import logging
import threading

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.queues import StreamPool, _completion


def _conv(n=2, c=8, hw=16):
    g = hd.Graph(name="conv", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(name="x", dims=(n, c, hw, hw))
    w = g.tensor(name="w", dims=(c, c, 3, 3))
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    return g, x, w, y


def _pack(x, w, y, value=1.0):
    return {x: np.full(x.dims, value, np.float32), w: np.ones(w.dims, np.float32),
            y: np.zeros(y.dims, np.float32)}


def _blocked_stream(dev):
    """Stream 0 of ``dev`` held by a work item until the returned event is set."""
    gate = threading.Event()
    handle = dev._pool.submit_blocking(lambda: gate.wait(30), stream=0)
    return gate, handle


class _InterruptOnce:
    """A stand-in for a blocking wait that raises KeyboardInterrupt on its first call (as
    Ctrl-C does there) and waits as ``real`` after."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 1:
            raise KeyboardInterrupt
        return self.real(*args, **kwargs)


# ------------------------------------------------------------------ waits on oneself

@pytest.mark.parametrize("how", ["result", "execute_sync"])
def test_a_blocking_wait_on_the_stream_from_its_own_callback_is_refused(how):
    g, x, w, y = _conv()
    caught = []
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        gate, first = _blocked_stream(dev)
        packs = [_pack(x, w, y) for _ in range(3)]
        handles = [plan.submit(p) for p in packs[:2]]
        blocked_pack = packs[2]

        def callback(_h):
            try:
                if how == "result":
                    handles[1].result(timeout=30)
                else:
                    plan.execute_sync(blocked_pack)
            except hd.DeviceError as exc:
                caught.append(exc)

        handles[0].add_done_callback(callback)
        gate.set()
        handles[1].result(timeout=30)      # the stream went on (no hang)
    assert len(caught) == 1 and "would wait for itself" in str(caught[0])
    assert "cpu:s0" in str(caught[0])
    if how == "execute_sync":
        # refused before anything was enqueued: its output was never written
        assert not blocked_pack[y].any()


def test_a_callbacks_execute_sync_without_a_stream_runs_on_another_one():
    # stream 0 (whose thread runs the callback) is the less loaded one, so the pool's
    # first choice; the execution goes to stream 1 once its gate opens
    g, x, w, y = _conv()
    got = []
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g)
        gate, first = _blocked_stream(dev)
        gate1 = threading.Event()
        dev._pool.submit_blocking(lambda: gate1.wait(30), stream=1)
        busy1 = [plan.submit(_pack(x, w, y), stream=1) for _ in range(3)]
        later = plan.submit(_pack(x, w, y), stream=0)
        inner = _pack(x, w, y, value=3.0)

        def callback(_h):
            threading.Timer(0.3, gate1.set).start()
            try:
                plan.execute_sync(inner)
                got.append(float(inner[y][0, 0, 5, 5]))
            except hd.DeviceError as exc:
                got.append(exc)

        first.add_done_callback(callback)
        gate.set()
        later.result(timeout=30)
        for h in busy1:
            h.result(timeout=30)
    assert got == [3.0 * 8 * 9]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_event_loop_in_a_callback_awaiting_its_own_stream_is_refused(backend):
    pytest.importorskip(backend)
    g, x, w, y = _conv()
    caught = []
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        gate, first = _blocked_stream(dev)
        later = plan.submit(_pack(x, w, y))

        async def await_later():
            with anyio.fail_after(5):          # a regression times out, not hangs
                await later

        def callback(_h):
            try:
                anyio.run(await_later, backend=backend)
            except (hd.DeviceError, TimeoutError) as exc:
                caught.append(exc)

        first.add_done_callback(callback)
        gate.set()
        later.result(timeout=30)
    assert len(caught) == 1 and isinstance(caught[0], hd.DeviceError), caught
    assert "would wait for itself" in str(caught[0])


def test_to_numpy_sync_in_a_callback_waits_for_the_other_streams():
    # the callback runs on stream 0's thread; stream 1 is still writing the array: the
    # copy waits for stream 1 (it read the zeros before), not for stream 0 (itself)
    g, x, w, y = _conv(n=2, c=8, hw=16)
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g)
        out = dev.empty(y.dims, "float32")
        out.copy_from(np.zeros(y.dims, np.float32))
        gate0, first = _blocked_stream(dev)
        gate1 = threading.Event()
        dev._pool.submit_blocking(lambda: gate1.wait(30), stream=1)
        pack = _pack(x, w, y)
        pack[y] = out
        writer = plan.submit(pack, stream=1)
        seen = []

        def callback(_h):
            threading.Timer(0.3, gate1.set).start()
            seen.append(float(out.to_numpy_sync()[0, 0, 5, 5]))

        first.add_done_callback(callback)
        gate0.set()
        writer.result(timeout=30)
        first.result(timeout=30)
        dev._pool.synchronize_blocking(30)
    assert seen == [8 * 9.0]


def test_two_callbacks_copying_from_each_others_streams_do_not_deadlock():
    # each callback's copy would wait for the other stream, whose thread waits back: one
    # of them is refused, the other copies, nothing hangs
    with hd.Device("cpu", streams=2) as dev:
        out = dev.empty((2, 8, 16, 16), "float32")
        out.copy_from(np.full((2, 8, 16, 16), 7.0, np.float32))
        gates = [threading.Event(), threading.Event()]
        handles = [dev._pool.submit_blocking(lambda e=e: e.wait(30), stream=i)
                   for i, e in enumerate(gates)]
        both = threading.Barrier(2, timeout=10)     # the two callbacks overlap every time
        seen = []

        def callback(_h):
            both.wait()
            try:
                seen.append(float(out.to_numpy_sync()[0, 0, 5, 5]))
            except hd.DeviceError as exc:
                seen.append(exc)

        for h in handles:
            h.add_done_callback(callback)
        for e in gates:
            e.set()
        for h in handles:
            h.result(timeout=30)
        dev._pool.synchronize_blocking(30)
    assert sorted(map(type, seen), key=str) == sorted([float, hd.DeviceError], key=str)
    assert 7.0 in seen and "neither could go on" in str(next(e for e in seen if e != 7.0))


def test_a_profile_closed_in_a_callbacks_event_loop_over_its_own_stream_is_refused():
    g, x, w, y = _conv()
    caught = []
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g)
        gate, first = _blocked_stream(dev)

        async def body():
            async with dev.profile():
                plan.submit(_pack(x, w, y), stream=0)

        def callback(_h):
            try:
                anyio.run(body)
            except hd.DeviceError as exc:
                caught.append(exc)

        first.add_done_callback(callback)
        gate.set()
        first.result(timeout=30)
        dev._pool.synchronize_blocking(30)
    assert len(caught) == 1 and "would wait for itself" in str(caught[0])


# ------------------------------------------------------------------ Ctrl-C, then again

def test_a_capture_block_interrupted_at_its_exit_still_settles(monkeypatch):
    g, x, w, y = _conv()
    pack = _pack(x, w, y, value=2.0)
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        gate, _first = _blocked_stream(dev)
        step = dev.capture()
        monkeypatch.setattr(_completion.Completion, "wait",
                            _InterruptOnce(_completion.Completion.wait))
        with pytest.raises(KeyboardInterrupt):
            with step:
                plan.submit(pack)
        monkeypatch.undo()
        with pytest.raises(hd.DeviceError, match="its capture is still being made"):
            step.replay_sync()
        with pytest.raises(hd.DeviceError, match="its capture is still being made"):
            step.recapture().__enter__()
        gate.set()
        dev._pool.synchronize_blocking(30)
        assert repr(step).startswith("<Step ready")
        step.replay_sync()
        # each output element: 2.0 * 8 channels * the 3x3 window (9 taps inside)
        assert pack[y][0, 0, 5, 5] == 2.0 * 8 * 9
        with step.recapture():             # not left "recording"
            plan.submit(pack)


def test_a_profile_stop_interrupted_then_stopped_again_collects(monkeypatch):
    g, x, w, y = _conv()
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        gate, _first = _blocked_stream(dev)
        prof = dev.profile().start()
        handles = [plan.submit(_pack(x, w, y)) for _ in range(3)]
        monkeypatch.setattr(_completion.Completion, "wait",
                            _InterruptOnce(_completion.Completion.wait))
        with pytest.raises(KeyboardInterrupt):
            prof.stop()
        monkeypatch.undo()
        with pytest.raises(hd.DeviceError, match="interrupted; call its stop"):
            prof.table()
        gate.set()
        prof.stop()
    assert all(h.done() for h in handles)
    assert len(prof.executions) == 3 and prof.key_averages()[0]["count"] == 3


# ------------------------------------------------------------------ wrong thread, API

def test_a_batcher_called_from_another_threads_loop_is_a_clear_error():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 3, 8, 8), name="x")
    w = g.tensor(dims=(4, 3, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True)
    weights = {"w": np.ones((4, 3, 3, 3), np.float32)}
    errors = []

    async def client(b):
        try:
            await b(np.ones((2, 3, 8, 8), np.float32))
        except hd.DeviceError as exc:
            errors.append(exc)

    async def main():
        async with hd.Device("cpu") as dev, hd.DynamicBatcher(dev, g, constants=weights) as b:
            await anyio.to_thread.run_sync(lambda: anyio.run(client, b))
            out = await b(np.ones((2, 3, 8, 8), np.float32))      # its own loop: served
            assert out.shape == (2, 4, 8, 8)

    anyio.run(main)
    assert len(errors) == 1 and "another thread's event loop" in str(errors[0])


def test_a_recorded_handle_has_the_handle_api_and_refuses_callbacks():
    g, x, w, y = _conv()
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        with dev.capture() as step:
            h = plan.submit(_pack(x, w, y))
            with pytest.raises(hd.DeviceError, match="add_done_callback"):
                h.add_done_callback(lambda _h: None)
            assert h.stream is step.stream and h.exec_ms is None and h.queue_wait_ms is None
            assert h.describe() == plan._label


def test_a_callbacks_error_reaches_stderr_with_logging_off(capsys, monkeypatch):
    monkeypatch.setattr(logging.getLogger("hipdnn_async"), "level", logging.CRITICAL + 10)
    ran = threading.Event()

    def bad(_h):
        raise ValueError("callback boom 41")

    with StreamPool("cpu", n_streams=1) as pool:
        gate = threading.Event()
        h = pool.submit_blocking(lambda: gate.wait(30), stream=0)
        h.add_done_callback(bad)
        h.add_done_callback(lambda _h: ran.set())
        gate.set()
        assert ran.wait(30)
    err = capsys.readouterr().err
    assert "Exception ignored in done callback of" in err and "callback boom 41" in err
