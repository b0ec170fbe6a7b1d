"""A fork while other parent threads hold the package's locks, are inside the perf db, wait
on a handle or have an event recorded behind busy work: in the child nothing waits for a
thread that did not survive the fork (found by a break-it helper forking a busy parent:
a tuned build blocked in 21 of 40 children, ``plan_stats`` and event waits for good).

Each case forks in a subprocess with an alarm, so a hang fails the case instead of
taking pytest with it; each was shown to hang or fail on the code before the fix."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if not hasattr(os, "fork"):
    pytest.skip("os.fork is POSIX only", allow_module_level=True)

# all-ones x (N, C, H, W) and w (K, C, 3, 3), padding 1: an interior output is C * 9
_PRELUDE = """
import os, signal, sys, threading, time
import numpy as np
import hipdnn_async as hd

def conv_graph(dims, k):
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=dims, name="x"); w = g.tensor(dims=(k, dims[1], 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    return g, x, w, y

def interior(plan, x, w, y, dims, k):
    # executes the plan on all-ones data: an interior output (C * 9 expected)
    Y = np.full((dims[0], k) + dims[2:], np.nan, np.float32)
    plan.execute_sync({x: np.ones(dims, np.float32),
                       w: np.ones((k, dims[1], 3, 3), np.float32), y: Y})
    return float(Y[0, 1, 2, 2])

def busy_stream():
    # a one-stream device with three ~60 ms all-ones convolutions submitted
    dims = (16, 64, 56, 56)
    g, x, w, y = conv_graph(dims, 64)
    X, W = np.ones(dims, np.float32), np.ones((64, 64, 3, 3), np.float32)
    dev = hd.Device("cpu", streams=1)
    plan = dev.build_sync(g)
    outs = [np.zeros(dims, np.float32) for _ in range(3)]
    return dev, [plan.submit({x: X, w: W, y: o}) for o in outs], outs

FORKED_AT = []     # the parent's clock right after each fork

def hold_briefly(lock):
    # a thread holds lock for 0.3 s (as a statement or a library load would); returns, once
    # it holds it, a list that gets the thread's clock just before it releases the lock
    inside, released = threading.Event(), []
    def hold():
        with lock:
            inside.set()
            time.sleep(0.3)
            released.append(time.perf_counter())
    threading.Thread(target=hold, daemon=True).start()
    inside.wait()
    return released


def fork_child(body):
    # runs body() in a fork child under a 20 s alarm; returns the child's exit status
    pid = os.fork()
    if pid:
        FORKED_AT.append(time.perf_counter())
    if pid == 0:
        signal.alarm(20)
        try:
            body()
        except BaseException as exc:
            print("child raised", type(exc).__name__, exc, flush=True)
            os._exit(1)
        os._exit(0)
    return os.waitpid(pid, 0)[1]
"""


def _run(script: str, tmp_path, timeout: float = 120) -> list:
    path = os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH"))))
    env = dict(os.environ, PYTHONPATH=path, HIPDNN_ASYNC_PERFDB=str(tmp_path / "perfdb.sqlite3"))
    env.pop("HIPDNN_ASYNC_FORCE_BENCHMARKING", None)
    proc = subprocess.run([sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    return proc.stdout.strip().splitlines()


def test_fork_child_with_the_package_locks_held_by_a_parent_thread(tmp_path):
    """The module locks and the device's own locks that a fork child unholds
    (``_fork.reinit_in_child``), held by a parent thread across the fork: in the child
    the parent's device reports ``plan_stats``, and a new device makes a tuned build
    (counters, warn-once logs, the plan cache) and runs it inside a profile (profiler
    state)."""
    lines = _run("""
        from hipdnn_async import _capture, _log, _provider_plans
        from hipdnn_async._perfdb import _stats
        from hipdnn_async.profiler import _state
        dims = (2, 8, 12, 12)
        g, x, w, y = conv_graph(dims, 8)
        dev = hd.Device("cpu")
        plan = dev.build_sync(g)
        locks = [dev._stats_lock, dev._plan_cache._lock,
                 _provider_plans._counters_lock, _stats._counters_lock, _stats._warned_lock,
                 _log._lock, _log._warned_lock, _capture._open_lock, _state._lock]
        held, release = threading.Event(), threading.Event()
        def hold():
            for lock in locks:
                lock.acquire()
            held.set()
            release.wait()
            for lock in locks:
                lock.release()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        def child():
            stats = dev.plan_stats()
            with hd.Device("cpu") as dev2:
                with dev2.profile() as prof:
                    g2, x2, w2, y2 = conv_graph(dims, 8)
                    tuned = dev2.build_sync(g2, knobs={"global.benchmarking": 1})
                    value = interior(tuned, x2, w2, y2, dims, 8)
                events = len(prof.key_averages())
            print("child", stats["CONV_FPROP"]["plans"], tuned.benchmarked, value,
                  events > 0, hd.stats()["benchmarks_run"] >= 1, flush=True)
        status = fork_child(child)
        release.set()
        print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status),
              interior(plan, x, w, y, dims, 8))
        dev.close()
    """, tmp_path)
    assert f"child 1 True {8.0 * 9} True True" in lines, lines
    assert f"parent 0 {8.0 * 9}" in lines, lines


def test_fork_while_a_parent_thread_is_inside_the_perf_db(tmp_path):
    """A fork while another thread holds the default perf db's lock (as its SQLite
    statement does): the fork waits for it (no thread is inside SQLite at the fork);
    the child tunes and stores on a connection of its own, which the parent then reads
    as a perf-db hit; the parent's db still works. CPU_ENGINE: oneDNN declines in a fork
    child of a process that ran it (GNU OpenMP's pool does not survive fork)."""
    lines = _run("""
        from hipdnn_async import _perfdb
        dims = (2, 8, 12, 12)
        g, x, w, y = conv_graph(dims, 8)
        db = _perfdb.default_perfdb()
        with hd.Device("cpu") as dev:           # the parent's db in use before the fork
            dev.build_sync(conv_graph((1, 4, 6, 6), 4)[0], knobs={"global.benchmarking": 1})
        out = hold_briefly(db._lock)
        def child():
            with hd.Device("cpu") as dev:
                p = dev.build_sync(g, engine="CPU_ENGINE", knobs={"global.benchmarking": 1})
                print("child", p.benchmarked, p.perfdb_hit, interior(p, x, w, y, dims, 8),
                      flush=True)
        status = fork_child(child)
        print("fork waited", out[0] <= FORKED_AT[0])
        with hd.Device("cpu") as dev:
            p = dev.build_sync(g, engine="CPU_ENGINE", knobs={"global.benchmarking": 1})
            print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status), p.perfdb_hit,
                  p.benchmarked, interior(p, x, w, y, dims, 8))
    """, tmp_path)
    assert f"child True False {8.0 * 9}" in lines, lines
    assert "fork waited True" in lines, lines
    assert f"parent 0 True False {8.0 * 9}" in lines, lines


def test_fork_child_fails_a_handle_a_parent_thread_waits_on(tmp_path):
    """A parent thread waits on a handle (its threading.Event) and another holds that
    event's lock at the fork: the child fails the handle without that lock (it blocked
    inside ``os.fork``, in the hook), and a wait there returns."""
    lines = _run("""
        dev, handles, outs = busy_stream()
        h = handles[-1]
        threading.Thread(target=h.wait, daemon=True).start()
        while h._tevent is None:
            time.sleep(0.001)
        held, release = threading.Event(), threading.Event()
        def hold():
            with h._tevent._cond:
                held.set()
                release.wait()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        def child():
            done = h.wait(timeout=5)
            print("child", done, type(h.exception(timeout=0)).__name__, flush=True)
        status = fork_child(child)
        release.set()
        for o in handles:
            o.result()
        print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status),
              [float(o[1, 2, 3, 3]) for o in outs])
        dev.close()
    """, tmp_path)
    assert "child True DeviceError" in lines, lines
    assert f"parent 0 {[64.0 * 9] * 3}" in lines, lines


def test_fork_child_completes_events_recorded_behind_busy_work(tmp_path):
    """An event recorded on a stream behind work still running at the fork (its marker in
    the worker's queue, on no in-flight list), and a wait on it queued on another
    stream: in the child the event is done (synchronize returns, wait() in a loop
    returns) instead of never; in the parent it completes after the work."""
    lines = _run("""
        import asyncio
        dims = (16, 64, 56, 56)
        g, x, w, y = conv_graph(dims, 64)
        dev = hd.Device("cpu", streams=2)
        plan = dev.build_sync(g)
        X, W = np.ones(dims, np.float32), np.ones((64, 64, 3, 3), np.float32)
        outs = [np.zeros(dims, np.float32) for _ in range(3)]
        s0, s1 = dev.streams
        handles = [plan.submit({x: X, w: W, y: o}, stream=s0) for o in outs]
        ev = s0.record_event()
        s1.wait_event(ev)
        assert not ev.is_done()
        def child():
            ev.synchronize(timeout=5)
            asyncio.run(asyncio.wait_for(ev.wait(), 5))
            print("child", ev.is_done(), flush=True)
        status = fork_child(child)
        ev.synchronize()
        print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status), ev.is_done(),
              all(h.done() for h in handles), [float(o[1, 2, 3, 3]) for o in outs])
        dev.close()
    """, tmp_path)
    assert "child True" in lines, lines
    assert f"parent 0 True True {[64.0 * 9] * 3}" in lines, lines


def test_fork_waits_for_a_library_load_in_progress(tmp_path):
    """A fork while another thread holds the vendor registry's lock (as it does across a
    library load: dlopen and the library's init): the fork waits for it, instead of the
    child finding the library half-loaded (its load blocked there in 6 of 20 forks timed
    into a parent's first tuned build, found by a break-it helper); the child loads and
    runs."""
    lines = _run("""
        from hipdnn_async.runtime import _vendors
        dims = (2, 8, 12, 12)
        g, x, w, y = conv_graph(dims, 8)
        out = hold_briefly(_vendors._lock)
        def child():
            with hd.Device("cpu") as dev:
                p = dev.build_sync(g)
                print("child", interior(p, x, w, y, dims, 8), flush=True)
        status = fork_child(child)
        print("fork waited", out[0] <= FORKED_AT[0])
        print("parent", os.WIFEXITED(status) and os.WEXITSTATUS(status))
    """, tmp_path)
    assert f"child {8.0 * 9}" in lines, lines
    assert "fork waited True" in lines, lines
    assert "parent 0" in lines, lines


def test_fork_from_a_logging_handler_while_the_perf_db_opens(tmp_path):
    """A fork by the thread that holds the perf db's locks (a logging handler that forks,
    called for the warning that the db's directory cannot be made): the fork goes through and
    the child exits, where the hooks waited for their own thread's locks forever."""
    (tmp_path / "blocker").write_text("x")    # a file where the db's directory goes
    lines = _run(f"""
        import logging
        from hipdnn_async import _perfdb
        class Forking(logging.Handler):
            def emit(self, record):
                status = fork_child(lambda: print("child", flush=True))
                print("handler", os.WIFEXITED(status) and os.WEXITSTATUS(status), flush=True)
        log = logging.getLogger("hipdnn_async")
        log.addHandler(Forking()); log.setLevel(logging.WARNING)
        signal.alarm(20)
        os.environ["HIPDNN_ASYNC_PERFDB"] = {str(tmp_path / "blocker" / "perfdb.sqlite3")!r}
        db = _perfdb.default_perfdb()
        print("opened", db.in_memory)
    """, tmp_path)
    assert "child" in lines and "handler 0" in lines, lines
    assert "opened True" in lines, lines


def test_a_tuned_build_imports_nothing_new(tmp_path):
    """Once a CPU device is made, tuned builds of both engines (convolution, batchnorm)
    import no module for the first time: a fork while another thread imports leaves
    the child waiting on that import's lock forever (numpy.random, imported lazily at the
    first tuned build, hung 9 of 20 children forked into it; found by a break-it
    helper)."""
    lines = _run("""
        dev = hd.Device("cpu")
        before = set(sys.modules)
        for engine in ("ONEDNN_ENGINE", "CPU_ENGINE"):
            for dtype in (hd.DataType.FLOAT, hd.DataType.BFLOAT16):
                g = hd.Graph(io_data_type=dtype)
                x = g.tensor(dims=(1, 5, 8, 8), name="x"); w = g.tensor(dims=(4, 5, 3, 3), name="w")
                g.conv_fprop(x, w, padding=1).set_output(True)
                dev.build_sync(g, engine=engine, knobs={"global.benchmarking": 1})
            g = hd.Graph(io_data_type=hd.DataType.FLOAT)
            ch = lambda n: g.tensor(dims=(1, 4, 1, 1), name=n)
            for t in g.batchnorm(g.tensor(dims=(2, 4, 5, 5), name="x"), ch("s"), ch("b"),
                                 epsilon=1e-5, momentum=0.1, prev_running_mean=ch("rm"),
                                 prev_running_variance=ch("rv")):
                t.set_output(True)
            dev.build_sync(g, engine=engine, knobs={"global.benchmarking": 1})
        print("new", sorted(set(sys.modules) - before))
        dev.close()
    """, tmp_path)
    assert "new []" in lines, lines


def test_fork_child_of_a_done_callback_ends_when_it_returns(tmp_path):
    """A fork in a done callback (on the stream's worker) whose child returns from the
    callback: the child's worker loop ends, and with it the child, where it waited
    forever; the parent's work completes."""
    lines = _run("""
        dev, handles, outs = busy_stream()
        children = []
        def forking(h):
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)
                return                      # back into the worker's loop, in the child
            children.append(pid)
        handles[0].add_done_callback(forking)
        for h in handles:
            h.result()
        _, status = os.waitpid(children[0], 0)
        print("child", os.WIFSIGNALED(status) and signal.Signals(os.WTERMSIG(status)).name,
              os.WIFEXITED(status) and os.WEXITSTATUS(status))
        print("parent", [float(o[1, 2, 3, 3]) for o in outs])
        dev.close()
    """, tmp_path)
    assert "child False 0" in lines, lines
    assert f"parent {[64.0 * 9] * 3}" in lines, lines


_FORKING_HANDLER = """
import logging
class Forking(logging.Handler):
    # forks in emit, holding its own lock, once another thread is inside the lock a fork
    # waits for (``inside``); the child exits at once
    def emit(self, record):
        if record.getMessage() == "fork now":
            inside.wait(10)
            time.sleep(0.2)
            status = fork_child(lambda: None)
            print("handler forked", os.WIFEXITED(status) and os.WEXITSTATUS(status), flush=True)
inside = threading.Event()
root = logging.getLogger(); root.addHandler(Forking()); root.setLevel(logging.INFO)
logging.getLogger("hipdnn_async").setLevel(logging.INFO)
signal.alarm(30)
threading.Thread(target=lambda: logging.getLogger("user").info("fork now"), daemon=True).start()
"""


def test_a_forking_handler_while_another_thread_loads_a_library(tmp_path):
    """A logging handler forks (holding its lock) while another thread is inside the
    vendor registry's lock, about to log the load: the load's record waits until the lock
    is released (``_fork.holding``), so the fork goes through and the build finishes,
    where both waited for each other for good (3 of 3, found by a break-it helper)."""
    lines = _run(_FORKING_HANDLER + textwrap.dedent("""
        from hipdnn_async.runtime import _vendors
        original = _vendors._load_onednn
        def slow_load():
            inside.set()                    # inside the lock: the handler forks now
            time.sleep(0.5)
            return original()
        _vendors._load_onednn = slow_load
        dims = (2, 8, 12, 12)
        g, x, w, y = conv_graph(dims, 8)
        with hd.Device("cpu") as dev:
            print("built", interior(dev.build_sync(g), x, w, y, dims, 8), flush=True)
    """), tmp_path)
    assert "handler forked 0" in lines, lines
    assert f"built {8.0 * 9}" in lines, lines


def test_a_forking_handler_while_another_thread_opens_the_perf_db(tmp_path):
    """The same with the perf db: another thread opens a db whose path cannot be used, and
    warns (the in-memory fallback) inside the db's locks: the warning waits for their
    release, so the fork goes through (3 of 3 deadlocked, found by a break-it helper)."""
    (tmp_path / "blocker").write_text("x")    # a file where the db's directory goes
    lines = _run(_FORKING_HANDLER + textwrap.dedent(f"""
        from hipdnn_async._perfdb import _store
        original = _store.PerfDb._ensure_open
        def slow_open(self):
            inside.set()                    # inside the locks: the handler forks now
            time.sleep(0.5)
            return original(self)
        _store.PerfDb._ensure_open = slow_open
        db = _store.PerfDb({str(tmp_path / "blocker" / "perfdb.sqlite3")!r})
        print("opened", db.in_memory, flush=True)
    """), tmp_path)
    assert "handler forked 0" in lines, lines
    assert "opened True" in lines, lines


@pytest.mark.parametrize("how", ["SystemExit", "KeyboardInterrupt"])
def test_a_done_callback_that_raises_base_exceptions_leaves_the_worker_running(tmp_path, how):
    """A done callback raising SystemExit or KeyboardInterrupt: logged, and the stream's
    later items still complete, where the worker's loop ended and they waited forever."""
    lines = _run(f"""
        dev, handles, outs = busy_stream()
        def raising(h):
            raise {how}(3)
        handles[0].add_done_callback(raising)
        print("done", [h.wait(30) for h in handles], [float(o[1, 2, 3, 3]) for o in outs])
        dev.close()
    """, tmp_path)
    assert f"done [True, True, True] {[64.0 * 9] * 3}" in lines, lines


@pytest.mark.parametrize("end, status", [("sys.exit(3)", 3), ("sys.exit(2 ** 40)", 0),
                                         ("raise ValueError('in child')", 1)])
def test_a_fork_child_of_a_done_callback_ends_as_python_would(tmp_path, end, status):
    """A child forked in a done callback that ends it by ``sys.exit(3)``, an exit code
    beyond a C int, or an exception: it exits with the status Python gives (3, 0: the
    code modulo 2**32 then 256, 1) where it waited forever in the worker's loop (or, for
    2**40, once ``os._exit`` overflowed)."""
    lines = _run(f"""
        dev, handles, outs = busy_stream()
        children = []
        def forking(h):
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)
                print("in child", flush=True)
                {end}
            children.append(pid)
        handles[0].add_done_callback(forking)
        for h in handles:
            h.result()
        _, status = os.waitpid(children[0], 0)
        print("child", os.WIFEXITED(status) and os.WEXITSTATUS(status))
        dev.close()
    """, tmp_path)
    assert "in child" in lines and f"child {status}" in lines, lines


@pytest.mark.parametrize("how", ["KeyboardInterrupt", "SystemExit"])
def test_a_callback_run_inline_passes_ctrl_c_and_sys_exit_to_its_caller(how):
    """A done callback run on the caller's own thread (added to a handle already done):
    its KeyboardInterrupt or SystemExit reaches the caller of ``add_done_callback``, as
    Ctrl-C or ``sys.exit`` would (only a stream's worker logs them and runs on)."""
    import numpy as np
    import hipdnn_async as hd
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 2, 4, 4), name="x"); w = g.tensor(dims=(2, 2, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    exc = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[how]

    def raising(_):
        raise exc(7)

    with hd.Device("cpu") as dev:
        h = dev.build_sync(g).submit({x: np.ones((1, 2, 4, 4), np.float32),
                                      w: np.ones((2, 2, 3, 3), np.float32),
                                      y: np.zeros((1, 2, 4, 4), np.float32)})
        h.result()
        with pytest.raises(exc):
            h.add_done_callback(raising)


def test_held_back_records_meet_a_users_filters_once_and_a_fork_child_drops_them(tmp_path):
    """Records held back under a lock a fork waits for (``_fork.holding``): a filter the
    user added to the "hipdnn_async" logger before the import sees each once (a log-once
    filter dropped the perf db's fallback warning, a prefixing one applied twice); a fork
    inside the block leaves the parent's held records to the parent (the child emitted
    them again); a handler's error at release does not replace the block's own."""
    lines = _run("""
        import logging, threading
        seen = []
        class Once(logging.Filter):
            def filter(self, record):
                seen.append(record.getMessage()); return True
        class Out(logging.Handler):
            def emit(self, record):
                print("emitted", os.getpid() == PARENT, record.getMessage(), flush=True)
        PARENT = os.getpid()
        logging.getLogger("hipdnn_async").addFilter(Once())    # (after the import: below)
        logging.getLogger("hipdnn_async").addHandler(Out())
        logging.getLogger("hipdnn_async").setLevel(logging.INFO)
        from hipdnn_async import _fork
        log = logging.getLogger("hipdnn_async")
        lock = threading.RLock()
        with _fork.holding(lock):
            log.info("held")
            pid = os.fork()                 # the child goes on to the block's end too
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("seen", seen)
        class Broken(logging.Handler):
            def emit(self, record):
                raise KeyError("handler")
        log.addHandler(Broken())
        try:
            with _fork.holding(lock):
                log.info("again")
                raise ValueError("block")
        except Exception as exc:
            print("raised", type(exc).__name__)
    """, tmp_path)
    assert lines.count("emitted True held") == 1 and "emitted False held" not in lines, lines
    assert "seen ['held']" in lines, lines
    assert "raised ValueError" in lines, lines


def test_a_filter_added_before_the_import_sees_a_held_back_record_once(tmp_path):
    """A filter on the "hipdnn_async" logger added before ``import hipdnn_async``: the
    perf db's fallback warning, made under the db's locks and held back, passes it once
    (a log-once filter there dropped it: it ran at the call and again at the release)."""
    (tmp_path / "blocker").write_text("x")    # a file where the db's directory goes
    script = textwrap.dedent(f"""
        import logging
        calls = []
        class Once(logging.Filter):
            def filter(self, record):
                calls.append(record.getMessage())
                return calls.count(record.getMessage()) == 1
        log = logging.getLogger("hipdnn_async")
        log.addFilter(Once())
        got = []
        class Keep(logging.Handler):
            def emit(self, record):
                got.append(record.getMessage())
        log.addHandler(Keep())
        import hipdnn_async as hd
        log.setLevel(logging.WARNING)       # (the import sets the library's default: off)
        hd.PerfDb({str(tmp_path / "blocker" / "perfdb.sqlite3")!r})
        print(len(calls), len(got), "in-memory" in got[0] if got else None)
    """)
    path = os.pathsep.join(filter(None, (ROOT, os.environ.get("PYTHONPATH"))))
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=path),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "1", "True"], proc.stdout
