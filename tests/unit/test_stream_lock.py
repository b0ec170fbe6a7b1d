"""``queues._core.StreamLock``, a host stream's lock: ``threading.Lock``'s protocol
(mutual exclusion, non-blocking and timed acquires, release errors), the GIL released
while it waits, and the submission path taking it without a Python call."""
import signal
import threading
import time

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._base import ProviderPlan
from hipdnn_async.queues import _core

THREADS, INCREMENTS = 4, 10_000


def test_threads_incrementing_under_the_lock_lose_no_update():
    lock, total = _core.StreamLock(), [0]

    def work():
        for _ in range(INCREMENTS):
            with lock:
                v = total[0]
                time.sleep(0) if v % 997 == 0 else None   # yield inside, now and then
                total[0] = v + 1

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert total[0] == THREADS * INCREMENTS
    assert not lock.locked()


def test_non_blocking_acquire_of_a_held_lock_fails():
    lock = _core.StreamLock()
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(False) is False
    lock.release()
    assert lock.acquire(blocking=False) is True
    lock.release()
    assert not lock.locked()


def test_timed_acquire_of_a_held_lock_fails_after_the_timeout():
    lock = _core.StreamLock()
    lock.acquire()
    t0 = time.perf_counter()
    assert lock.acquire(timeout=0.2) is False
    waited = time.perf_counter() - t0
    assert 0.19 <= waited < 5.0
    lock.release()


def test_timed_acquire_succeeds_when_another_thread_releases():
    lock = _core.StreamLock()
    lock.acquire()
    threading.Timer(0.05, lock.release).start()     # any thread may release it
    assert lock.acquire(timeout=10) is True
    lock.release()


def test_release_of_an_unheld_lock_raises_as_threading_lock():
    lock = _core.StreamLock()
    with pytest.raises(RuntimeError):
        threading.Lock().release()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()


@pytest.mark.parametrize("kwargs, error", [({"blocking": False, "timeout": 1.0}, ValueError),
                                           ({"timeout": -2.0}, ValueError),
                                           ({"timeout": threading.TIMEOUT_MAX * 2}, OverflowError)])
def test_bad_acquire_arguments_raise_as_threading_lock(kwargs, error):
    with pytest.raises(error):
        threading.Lock().acquire(**kwargs)
    lock = _core.StreamLock()
    with pytest.raises(error):
        lock.acquire(**kwargs)
    assert not lock.locked()


@pytest.mark.parametrize("how", ["acquire", "with"])
def test_a_thread_waiting_for_the_lock_lets_other_threads_run(how):
    # the waiter holds no GIL: a counting thread keeps advancing while it waits
    lock = _core.StreamLock()
    lock.acquire()
    got = threading.Event()

    def waiter():
        if how == "with":
            with lock:
                got.set()
        else:
            assert lock.acquire()
            got.set()
            lock.release()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)                                # the waiter is blocked by now
    count, deadline = 0, time.perf_counter() + 0.2
    while time.perf_counter() < deadline:
        count += 1
    assert not got.is_set()
    assert count > 1000                             # ran, not starved by the waiter
    lock.release()
    assert got.wait(10)
    t.join(10)
    assert not lock.locked()


class Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    raise Interrupted


@pytest.mark.parametrize("how", ["acquire", "timeout", "with"])
def test_a_signal_handler_error_ends_a_wait_as_with_threading_lock(how):
    lock = _core.StreamLock()
    lock.acquire()
    old = signal.signal(signal.SIGALRM, _interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        t0 = time.perf_counter()
        with pytest.raises(Interrupted):
            if how == "with":
                with lock:
                    pass
            else:
                lock.acquire(timeout=30 if how == "timeout" else -1)
        assert time.perf_counter() - t0 < 10
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert lock.locked()                            # still the first holder's
    lock.release()


class CountingLock(_core.StreamLock):
    """A StreamLock counting the calls of its Python protocol (the core's C methods
    bypass these overrides)."""

    def __init__(self):
        self.calls = []

    def acquire(self, *args, **kwargs):
        self.calls.append("acquire")
        return super().acquire(*args, **kwargs)

    def release(self):
        self.calls.append("release")
        return super().release()

    def __enter__(self):
        self.calls.append("__enter__")
        return super().__enter__()

    def __exit__(self, *exc):
        self.calls.append("__exit__")
        return super().__exit__(*exc)


class ThreadProbe(ProviderPlan):
    """The real provider plan, noting which thread ran each execution."""

    def __init__(self, real):
        self.real, self.threads = real, []
        self.algorithm, self.workspace_size = real.algorithm, real.workspace_size

    def run(self, buffers, workspace):
        self.threads.append(threading.current_thread())
        self.real.run(buffers, workspace)


def test_host_streams_lock_with_a_stream_lock():
    with hd.Device("cpu", streams=2) as dev:
        assert all(type(s._lock) is _core.StreamLock for s in dev.streams)


def test_inline_executions_take_the_stream_lock_without_a_python_call():
    g = hd.Graph(name="tiny")
    x = g.tensor(dims=(1, 8, 8, 8), name="x")
    w = g.tensor(dims=(8, 8, 1, 1), name="w")
    g.conv_fprop(x, w).set_output(True).set_name("y")
    rng = np.random.default_rng(0)
    vp = {"x": rng.standard_normal((1, 8, 8, 8)).astype(np.float32),
          "w": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
          "y": np.zeros((1, 8, 8, 8), np.float32)}
    expected = np.einsum("nchw,kc->nkhw", vp["x"].astype(np.float64),
                         vp["w"][:, :, 0, 0].astype(np.float64))
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        plan._pplan = probe = ThreadProbe(plan._pplan)    # before any binding is made
        for _ in range(20):                          # warm: measured short, runs inline
            plan.execute_sync(vp)
            plan.submit(vp).result(timeout=10)
        stream = dev.streams[0]
        stream._lock = lock = CountingLock()         # idle: nothing holds the old one
        del probe.threads[:]
        for _ in range(5):
            vp["y"][...] = np.nan
            plan.execute_sync(vp)
            np.testing.assert_allclose(vp["y"], expected, rtol=1e-5, atol=1e-5)
            vp["y"][...] = np.nan
            plan.submit(vp).result(timeout=10)
            np.testing.assert_allclose(vp["y"], expected, rtol=1e-5, atol=1e-5)
        assert probe.threads == [threading.current_thread()] * 10   # all ran inline
        assert lock.calls == []
        assert dev.metrics()["completed"] >= 50      # and were counted under the lock
