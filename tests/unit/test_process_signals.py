"""Processes and signals on the CPU device: Ctrl-C (SIGINT) during ``execute_sync`` reaches
the caller as ``KeyboardInterrupt`` and leaves the device usable, on both CPU engines; in
a fork child a device opened before the fork takes no work (its stream workers, and GNU
OpenMP's pool, do not survive fork: every submission path raises DeviceError instead of
hanging), and a new device there builds on CPU_ENGINE once the parent ran oneDNN.

Each case runs in a subprocess with a timeout: a signal or a hang must not take pytest
with it."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from hipdnn_async.runtime import load_onednn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ONEDNN_OK = load_onednn().ok
needs_onednn = pytest.mark.skipif(not ONEDNN_OK,
                                  reason=f"oneDNN does not load here: {load_onednn().reason}")

# all-ones x (N, C, H, W) and w (K, C, 3, 3), padding 1: an interior output is C * 9, a
# corner C * 4 (the 2 x 2 taps inside the image)
_CONV = """
import os, signal, sys, threading, time
import numpy as np
import hipdnn_async as hd

def conv(dev, dims, k, engine):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=dims, name="x"); w = g.tensor(dims=(k, dims[1], 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    plan = dev.build_sync(g, engine=engine)
    X = np.ones(dims, np.float32); W = np.ones((k, dims[1], 3, 3), np.float32)
    return plan, (lambda Y: plan.execute_sync({x: X, w: W, y: Y}))

def busy_stream():
    # a one-stream device with three ~60 ms all-ones convolutions (16 x 64 x 56 x 56, 64
    # filters) submitted: (dev, handles, outputs); an interior output is 64 * 9
    dims = (16, 64, 56, 56)
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=dims, name="x"); w = g.tensor(dims=(64, 64, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    X, W = np.ones(dims, np.float32), np.ones((64, 64, 3, 3), np.float32)
    dev = hd.Device("cpu", streams=1)
    plan = dev.build_sync(g)
    outs = [np.zeros(dims, np.float32) for _ in range(3)]
    return dev, [plan.submit({x: X, w: W, y: o}) for o in outs], outs
"""


def _run(script: str, timeout: float) -> subprocess.CompletedProcess:
    # no PYTHONFAULTHANDLER: its alternate signal stack hid the heap corruption that
    # test_signals_during_onednn_runs_keep_the_heap checks
    # ROOT first, what the caller has on the path kept (packages installed with --target)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (ROOT, os.environ.get(
        "PYTHONPATH")))))
    env.pop("PYTHONFAULTHANDLER", None)
    return subprocess.run([sys.executable, "-c", _CONV + textwrap.dedent(script)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("engine", [
    "CPU_ENGINE", pytest.param("ONEDNN_ENGINE", marks=needs_onednn)])
def test_sigint_during_execute_sync_is_keyboard_interrupt(engine):
    # SIGINT 10 ms into a conv that runs ~0.1 s or more, 4 times; each must come back as
    # KeyboardInterrupt (not an ExecutionError, not an abort), and the device computes
    # the right answer afterwards
    proc = _run(f"""
        dims = (8, 64, 56, 56)
        with hd.Device("cpu") as dev:
            plan, run = conv(dev, dims, 16, {engine!r})
            assert plan.engine.name == {engine!r}, plan.engine.name
            run(np.empty((8, 16, 56, 56), np.float32))       # warm-up
            for i in range(4):
                Y = np.empty((8, 16, 56, 56), np.float32)
                try:
                    threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT)).start()
                    run(Y)
                    time.sleep(10)      # a run quicker than 10 ms is interrupted here
                    print("no interrupt"); sys.exit(3)
                except KeyboardInterrupt:
                    print("interrupted", i, flush=True)
            Y = np.full((8, 16, 56, 56), np.nan, np.float32)
            run(Y)
            print("after", float(Y[3, 5, 20, 20]), float(Y[7, 15, 0, 0]))
        print("closed")
    """, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, (proc.returncode, out, proc.stderr[-3000:])
    assert [f"interrupted {i}" for i in range(4)] == [l for l in out.splitlines()
                                                      if l.startswith("interrupted")]
    assert f"after {64.0 * 9} {64.0 * 4}" in out, out
    assert "closed" in out


def test_close_interrupted_by_sigint_then_closed_again_drains():
    # Ctrl-C while dev.close() waits for a stream held by a gate: the second close must
    # wait for the stream's work. (A Thread.join that Ctrl-C interrupts marks the thread
    # stopped while it runs on, in CPython 3.11-3.12: a close joining the worker returned
    # at once the second time, with every item still to run.)
    proc = _run("""
        dev = hd.Device("cpu", streams=1)
        gate = threading.Event()
        held = dev._pool.submit_blocking(lambda: gate.wait(30), stream=0)   # first
        outs = [np.zeros((2, 8, 16, 16), np.float32) for _ in range(3)]
        handles = [dev._pool.submit_blocking(lambda o=o: o.fill(1.0), stream=0) for o in outs]
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        threading.Timer(0.6, gate.set).start()
        try:
            dev.close()
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", [h.done() for h in [held] + handles])
        dev.close()
        print("after", [h.done() for h in [held] + handles], [float(o.sum()) for o in outs])
    """, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "interrupted [False, False, False, False]" in proc.stdout, proc.stdout
    assert f"after [True, True, True, True] {[2.0 * 8 * 16 * 16] * 3}" in proc.stdout, proc.stdout


@needs_onednn
def test_signals_during_onednn_runs_keep_the_heap():
    # a signal handled every 0.5 ms while executions run on the calling thread for 3 s:
    # before signals were blocked around primitives, 3 of 4 such runs aborted ("corrupted
    # size vs. prev_size") or returned wrong values
    proc = _run("""
        signal.signal(signal.SIGUSR1, lambda *a: None)
        dims = (8, 64, 56, 56)
        with hd.Device("cpu") as dev:
            plan, run = conv(dev, dims, 16, "ONEDNN_ENGINE")
            assert plan.engine.name == "ONEDNN_ENGINE", plan.engine.name
            stop = threading.Event()
            def pester():
                while not stop.is_set():
                    os.kill(os.getpid(), signal.SIGUSR1); time.sleep(0.0005)
            t = threading.Thread(target=pester); t.start()
            t0, n = time.perf_counter(), 0
            try:
                while time.perf_counter() - t0 < 3.0:
                    Y = np.full((8, 16, 56, 56), np.nan, np.float32)
                    run(Y); n += 1
                    print(n, float(Y[3, 5, 20, 20]), float(Y[7, 15, 0, 0]))
            finally:
                stop.set(); t.join()
        print("closed")
    """, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    lines = proc.stdout.splitlines()
    assert lines[-1] == "closed" and len(lines) > 1
    assert {l.split(" ", 1)[1] for l in lines[:-1]} == {f"{64.0 * 9} {64.0 * 4}"}, lines[:5]


@needs_onednn
def test_fork_child_after_onednn_does_not_hang():
    proc = _run("""
        import multiprocessing as mp
        dims = (2, 4, 6, 6)
        def child(q):
            import faulthandler; faulthandler.dump_traceback_later(20, exit=True)
            out = []
            try:                           # the plan built before the fork
                parent_plan_run(np.empty(dims, np.float32)); out.append("ran")
            except hd.DeviceError as exc:
                out.append(str(exc))
            with hd.Device("cpu") as d:    # a new plan: CPU_ENGINE
                plan, run = conv(d, dims, 4, None)
                Y = np.empty(dims, np.float32); run(Y)
                out += [plan.engine.name, float(Y[1, 2, 3, 3]), float(Y[0, 0, 0, 0])]
                try:
                    conv(d, dims, 4, "ONEDNN_ENGINE")
                    out.append("built")
                except hd.NotSupportedError as exc:
                    out.append(str(exc))
            q.put(out)
        with hd.Device("cpu") as dev:
            plan, parent_plan_run = conv(dev, dims, 4, "ONEDNN_ENGINE")
            parent_plan_run(np.empty(dims, np.float32))
            ctx = mp.get_context("fork"); q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,)); p.start()
            out = q.get(timeout=60); p.join(30)
            print(p.exitcode, repr(out))
    """, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    exitcode, out = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert exitcode == "0"
    ran, engine, interior, corner, declined = eval(out)  # noqa: S307 - our own repr
    assert "fork child" in ran and "'spawn' or 'forkserver'" in ran, ran
    assert (engine, interior, corner) == ("CPU_ENGINE", 4.0 * 9, 4.0 * 4)
    assert "forked" in declined and "'spawn' or 'forkserver'" in declined, declined


@pytest.mark.parametrize("engine", [
    "CPU_ENGINE", pytest.param("ONEDNN_ENGINE", marks=needs_onednn)])
def test_fork_child_submissions_on_the_parents_device_raise(engine):
    """plan.submit(...).result(), await plan.execute, plan.enqueue, execute_sync and
    dev.build_sync on a device opened before a fork, in the child: DeviceError naming the
    fork (the child has none of the stream workers, so submit and await hung forever once,
    found by a break-it helper); close() returns; a new device in the child runs."""
    proc = _run(f"""
        import anyio, multiprocessing as mp
        dims = (2, 4, 6, 6)
        def child(q):
            import faulthandler; faulthandler.dump_traceback_later(20, exit=True)
            out = []
            def pack():                    # keys: the graph's tensors, by uid
                return {{0: np.ones(dims, np.float32), 1: np.ones((4, 4, 3, 3), np.float32),
                        2: np.empty(dims, np.float32)}}
            async def main():
                for how in ("submit", "execute", "enqueue", "execute_sync", "build"):
                    try:
                        if how == "submit":
                            plan.submit(pack()).result(timeout=10)
                        elif how == "execute":
                            with anyio.fail_after(10):
                                await plan.execute(pack())
                        elif how == "enqueue":
                            with anyio.fail_after(10):
                                await (await plan.enqueue(pack()))
                        elif how == "execute_sync":
                            plan.execute_sync(pack())
                        else:
                            conv(dev, dims, 4, None)
                        out.append(how + ": ran")
                    except hd.DeviceError as exc:
                        out.append(how + ": " + str(exc))
            anyio.run(main)
            dev.close()
            with hd.Device("cpu") as d:
                plan2, run = conv(d, dims, 4, None)
                Y = np.empty(dims, np.float32); run(Y)
                out.append(float(Y[1, 2, 3, 3]))
            q.put(out)
        dev = hd.Device("cpu")
        plan, run = conv(dev, dims, 4, {engine!r})
        run(np.empty(dims, np.float32))
        ctx = mp.get_context("fork"); q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,)); p.start()
        out = q.get(timeout=60); p.join(30)
        run(np.empty(dims, np.float32))            # the parent's device still runs
        dev.close()
        print(p.exitcode, repr(out))
    """, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    exitcode, out = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert exitcode == "0"
    *refused, interior = eval(out)  # noqa: S307 - our own repr
    assert len(refused) == 5, refused
    for line in refused:
        assert "fork child" in line and "opened in process" in line, line
        assert "'spawn' or 'forkserver'" in line, line
    assert interior == 4.0 * 9


def test_fork_child_fails_the_parents_work_in_flight_instead_of_waiting():
    """Handles of work the parent had in flight (or queued) at the fork: in the child they
    are done with a DeviceError saying the work runs in the parent (h.wait(), await h
    and result() hung forever once, and dev.synchronize() returned with them not done:
    found by a break-it helper); in the parent they complete with the right values."""
    proc = _run("""
        import anyio
        dev, handles, outs = busy_stream()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            lines = []
            for h in handles:
                assert h.wait(timeout=5), "not done in the child"
                try:
                    h.result(); lines.append("ran")
                except hd.DeviceError as exc:
                    lines.append("DeviceError: " + str(exc))
            async def sync():
                await dev.synchronize()
                try:
                    await handles[-1]
                except hd.DeviceError:
                    return "awaited: DeviceError"
            lines.append(anyio.run(sync))
            dev.close()
            print("child", repr(lines), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        for h in handles:
            h.result()
        print("parent", os.WEXITSTATUS(status), [float(o[1, 2, 3, 3]) for o in outs])
        dev.close()
    """, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    lines = proc.stdout.strip().splitlines()
    child = [l for l in lines if l.startswith("child ")]
    parent = [l for l in lines if l.startswith("parent ")]
    assert len(child) == 1 and len(parent) == 1, lines
    got = eval(child[0].split(" ", 1)[1])  # noqa: S307 - our own repr
    ran = [g for g in got[:3] if g == "ran"]       # one may have finished before the fork
    failed = [g for g in got[:3] if g != "ran"]
    assert failed and got[:3] == ran + failed, got
    for line in failed:
        assert line.startswith("DeviceError: ") and "before a fork" in line, line
    assert got[3] == "awaited: DeviceError", got
    assert parent[0] == f"parent 0 {[64.0 * 9] * 3}", parent


def test_fork_child_closes_where_parent_threads_held_the_queue_locks():
    """A fork while another parent thread holds the completion-state lock, the stream's
    lock, the pool's close lock and the device's plans lock (as a worker finishing an
    item, a submitter or a build can at any moment): in the child the parent's work in
    flight still ends with a DeviceError (its done callback runs, which takes the state
    lock), dev.metrics() (the stream's lock) shows none in flight and dev.close()
    returns, where they blocked for good (2-3 of 1,200 children of a
    busy parent blocked in dev.close(), found by a break-it helper)."""
    proc = _run("""
        import threading
        from hipdnn_async.queues import _completion
        dev, handles, outs = busy_stream()
        seen = []
        handles[-1].add_done_callback(lambda h: seen.append(type(h.exception()).__name__))
        held, release = threading.Event(), threading.Event()
        def hold():
            with _completion._STATE_LOCK, dev.streams[0]._lock, dev._pool._close_lock, \\
                    dev._plans_lock:
                held.set()
                release.wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            done = handles[-1].wait(timeout=5)
            err = type(handles[-1].exception(timeout=0)).__name__ if done else None
            inflight = dev.metrics()["streams"][0]["in_flight"]
            dev.close()
            print("child", done, err, seen, inflight, flush=True)
            os._exit(0)
        release.set()
        _, status = os.waitpid(pid, 0)
        for h in handles:
            h.result()
        print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status),
              [float(o[1, 2, 3, 3]) for o in outs])
        dev.close()
    """, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    lines = proc.stdout.strip().splitlines()
    assert "child True DeviceError ['DeviceError'] 0" in lines, lines
    assert f"parent 0 {[64.0 * 9] * 3}" in lines, lines


def test_fork_child_fails_the_item_a_worker_was_finishing():
    """A fork while the stream's worker is between taking an item off the in-flight list
    and publishing it (held there by a wrapped ``Stream._item_finished``): in the child
    that handle is done with a DeviceError (it waited forever: about 1 fork in 2,000 of a
    busy parent, found by a break-it helper); in the parent it completes with the right
    value."""
    proc = _run("""
        import threading
        from hipdnn_async.queues import _stream
        dims = (2, 8, 12, 12)
        dev = hd.Device("cpu", streams=1)
        g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        x = g.tensor(dims=dims, name="x"); w = g.tensor(dims=(8, 8, 3, 3), name="w")
        y = g.conv_fprop(x, w, padding=1).set_output(True)
        plan = dev.build_sync(g)
        in_gap, forked = threading.Event(), threading.Event()
        original = _stream.Stream._item_finished
        def held(self, item, ok):
            original(self, item, ok)
            if threading.current_thread().name.startswith("hipdnn_async stream"):
                in_gap.set()
                forked.wait()
        _stream.Stream._item_finished = held
        out = np.zeros(dims, np.float32)
        X, W = np.ones(dims, np.float32), np.ones((8, 8, 3, 3), np.float32)
        h = plan.submit({x: X, w: W, y: out})
        assert in_gap.wait(10), "the worker did not run the item"
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            done = h.wait(timeout=5)
            err = type(h.exception(timeout=0)).__name__ if done else None
            print("child", done, err, flush=True)
            os._exit(0)
        forked.set()
        _, status = os.waitpid(pid, 0)
        h.result()
        print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status), float(out[1, 2, 3, 3]))
        _stream.Stream._item_finished = original
        dev.close()
    """, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    lines = proc.stdout.strip().splitlines()
    assert "child True DeviceError" in lines, lines
    assert f"parent 0 {8.0 * 9}" in lines, lines
