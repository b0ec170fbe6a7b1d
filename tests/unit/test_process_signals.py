"""Processes and signals on the CPU device: Ctrl-C (SIGINT) during ``execute_sync`` reaches
the caller as ``KeyboardInterrupt`` and leaves the device usable, on both CPU engines; a
fork child of a process that ran oneDNN builds on CPU_ENGINE and refuses to run a oneDNN
plan built before the fork (GNU OpenMP's pool does not survive fork) instead of hanging.

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
"""


def _run(script: str, timeout: float) -> subprocess.CompletedProcess:
    # no PYTHONFAULTHANDLER: its alternate signal stack hid the heap corruption that
    # test_signals_during_onednn_runs_keep_the_heap checks
    env = dict(os.environ, PYTHONPATH=ROOT)
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
            except hd.ExecutionError as exc:
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
    assert "forked" in ran and "'spawn' or 'forkserver'" in ran, ran
    assert (engine, interior, corner) == ("CPU_ENGINE", 4.0 * 9, 4.0 * 4)
    assert "forked" in declined and "'spawn' or 'forkserver'" in declined, declined
