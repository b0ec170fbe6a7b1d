"""The CPU device's pool of host workspaces (``runtime._host_pool``): a block is
handed out again only once every view of it is gone; concurrent executions of one plan
each get their own; the pool keeps no more than its limits; results stay the float64
oracle's."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.runtime import _host_pool as pool
from tests.oracle import _reference as ref

BIG = 2 * pool.POOL_MIN_BYTES
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.fixture(autouse=True)
def empty_pool():
    pool.release_pooled()
    yield
    pool.release_pooled()


def test_a_block_in_use_by_any_view_is_not_handed_out_again():
    a = pool.take(BIG)
    addr = a.ctypes.data
    view = a[64:4096].view(np.float32)[3:]     # a view of a view, as the engines make
    del a
    b = pool.take(BIG)                          # the first block is still in use
    b_addr = b.ctypes.data
    assert b_addr != addr
    view[:] = 1.0                               # ...and still ours to write
    del b
    assert pool.pooled_bytes() == BIG
    del view
    assert pool.pooled_bytes() == 2 * BIG
    c = pool.take(BIG)
    assert c.ctypes.data in (addr, b_addr) and c.nbytes == BIG
    assert pool.pooled_bytes() == BIG


def test_reuse_needs_at_least_half_the_block_and_small_requests_skip_the_pool():
    a = pool.take(4 * BIG)
    addr = a.ctypes.data
    del a
    small = pool.take(BIG)                      # a quarter of the free block: not that one
    assert small.ctypes.data != addr and small.nbytes == BIG
    half = pool.take(2 * BIG)                   # half of it: reused, viewed at its size
    assert half.ctypes.data == addr and half.nbytes == 2 * BIG
    tiny = pool.take(pool.POOL_MIN_BYTES - 1)      # a view of a plain np.empty
    assert type(tiny.base) is np.ndarray and tiny.base.flags.owndata
    assert tiny.nbytes == pool.POOL_MIN_BYTES - 1


@pytest.mark.parametrize("nbytes", [1, 100, 83840, BIG, 3 * BIG + 5])
def test_every_workspace_starts_on_a_64_byte_boundary(nbytes):
    # NumPy's arrays start at 16-byte boundaries (so most of these would not)
    got = [pool.take(nbytes) for _ in range(6)]
    assert [a.ctypes.data % 64 for a in got] == [0] * 6
    assert all(a.nbytes == nbytes and a.flags.writeable for a in got)
    for a in got:                                 # the whole extent is ours to write
        a[:] = 7
        a[-1] = 8


def test_a_given_workspace_is_used_from_its_first_64_byte_boundary_where_it_has_room():
    from hipdnn_async.providers.cpu._bind import bind_workspace
    raw = np.empty(1000 + 128, np.uint8)
    base = raw[(16 - raw.ctypes.data) % 64:]     # a start 16 bytes past a boundary
    assert base.ctypes.data % 64 == 16
    roomy = bind_workspace(900, base, where="t")
    assert roomy.ctypes.data % 64 == 0 and roomy.nbytes >= 900
    assert np.shares_memory(roomy, base)
    tight = bind_workspace(base.nbytes, base, where="t")   # no room: used as given
    assert tight.ctypes.data == base.ctypes.data


def test_a_numpy_integer_size_is_taken_as_np_empty_takes_it():
    """A size computed with NumPy (np.prod of dims) must not be a ctypes TypeError ('_length_
    must be an integer') where np.empty took it."""
    a = pool.take(np.int64(BIG))
    assert a.nbytes == BIG and a.dtype == np.uint8
    del a
    assert pool.take(np.uint32(BIG)).nbytes == BIG            # the reused block


def test_the_pool_keeps_at_most_its_blocks_and_bytes(monkeypatch):
    blocks = [pool.take(BIG) for _ in range(pool.POOL_KEEP_BLOCKS + 3)]
    del blocks
    assert pool.pooled_bytes() == pool.POOL_KEEP_BLOCKS * BIG
    pool.release_pooled()
    monkeypatch.setattr(pool, "POOL_KEEP_BYTES", 3 * BIG)
    blocks = [pool.take(BIG) for _ in range(5)]
    del blocks
    assert pool.pooled_bytes() == 3 * BIG
    assert pool.release_pooled() == 3 * BIG and pool.pooled_bytes() == 0


def _nchw_conv(dev):
    """A FLOAT NCHW conv_fprop whose workspace (blocked copies) is past POOL_MIN_BYTES."""
    g = hd.Graph(name="pool_conv", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(8, 32, 40, 40), layout="NCHW", name="x")
    w = g.tensor(dims=(32, 32, 3, 3), layout="NCHW", name="w")
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1))
    y.set_output(True).set_name("y")
    return dev.build_sync(g), x, w, y


def test_concurrent_executions_of_one_plan_each_use_their_own_workspace():
    """Eight submissions on two streams, three rounds, each with its own x and the
    workspace from the pool: every y is its x's convolution. (oneDNN's programs run one at
    a time under the process-wide gate, so this checks results under reuse; that a block
    in use is never handed out is the first test's.)"""
    with hd.Device("cpu", streams=2) as dev:
        plan, x, w, y = _nchw_conv(dev)
        assert plan.workspace_size >= pool.POOL_MIN_BYTES, plan.workspace_size
        rng = np.random.default_rng(3)
        wv = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
        xs = [rng.standard_normal((8, 32, 40, 40)).astype(np.float32) for _ in range(8)]
        ys = [np.full((8, 32, 40, 40), np.nan, np.float32) for _ in range(8)]
        for _ in range(3):
            handles = [plan.submit({x: xv, w: wv, y: yv}) for xv, yv in zip(xs, ys)]
            for h in handles:
                h.result(timeout=60)
            for xv, yv in zip(xs, ys):
                want = ref.conv_fprop(xv, wv, pre=(1, 1), post=(1, 1))
                np.testing.assert_allclose(yv, want, rtol=1e-4, atol=1e-4)
                yv[...] = np.nan


def test_executions_from_threads_reuse_the_pool_and_stay_correct():
    with hd.Device("cpu", streams=2) as dev:
        plan, x, w, y = _nchw_conv(dev)
        rng = np.random.default_rng(4)
        wv = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
        errors = []

        def worker(seed):
            r = np.random.default_rng(seed)
            for _ in range(3):
                xv = r.standard_normal((8, 32, 40, 40)).astype(np.float32)
                yv = np.empty_like(xv)
                plan.execute_sync({x: xv, w: wv, y: yv})
                want = ref.conv_fprop(xv, wv, pre=(1, 1), post=(1, 1))
                if not np.allclose(yv, want, rtol=1e-4, atol=1e-4):
                    errors.append(seed)
        threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert 0 < pool.pooled_bytes() <= pool.POOL_KEEP_BYTES


def _child(code: str, timeout: float) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (a hang there cannot hang this session)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                              timeout=timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child hung: {exc.stdout!r} {exc.stderr!r}")


def test_a_block_the_cyclic_gc_frees_inside_the_pool_does_not_deadlock():
    """A view of a workspace in a reference cycle (a traceback's frame, a work item in a
    cycle) is freed by the cyclic GC, which runs at any allocation, also inside the pool's
    own code: the block comes back there (a pool whose release took a non-reentrant lock
    deadlocked at the first iteration)."""
    r = _child("""
        import gc
        from hipdnn_async.runtime import _host_pool as pool

        class Holder:
            pass

        gc.set_threshold(7)
        for i in range(2000):
            h = Holder()
            h.me = h                                    # only the cyclic GC frees h
            h.ws = pool.take(2 << 20)[16:]
            del h
            pool.take(2 << 20)
        print("done", pool.pooled_bytes() <= pool.POOL_KEEP_BYTES)
        """, timeout=30)
    assert r.returncode == 0 and r.stdout.split() == ["done", "True"], r.stderr[-2000:]


def test_a_fork_while_another_thread_is_in_the_pool_leaves_the_child_a_usable_pool():
    """os.fork (multiprocessing's fork start method) while a stream's worker gives a block
    back: the child must not inherit pool state held by a thread it does not have (with a
    lock and no at-fork handling, about a third of these children hung)."""
    r = _child("""
        import os, signal, threading
        from hipdnn_async.runtime import _host_pool as pool

        stop = False
        def churn():
            while not stop:
                a = pool.take(2 << 20)
                del a
        t = threading.Thread(target=churn)
        t.start()
        hung = 0
        for _ in range(30):
            pid = os.fork()
            if pid == 0:
                signal.alarm(2)                         # a hung child dies of SIGALRM
                a = pool.take(2 << 20)
                del a
                os._exit(0 if pool.pooled_bytes() == 2 << 20 else 3)
            _, status = os.waitpid(pid, 0)
            hung += status != 0
        stop = True
        t.join()
        print("hung", hung)
        """, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["hung", "0"], (r.stdout, r.stderr[-2000:])


def test_an_allocation_that_fails_while_blocks_sit_idle_frees_them_and_tries_again():
    """Under an address-space limit, 240 MB of idle blocks (none of which fits a 200 MB
    request) must not turn a 200 MB workspace that fits once they are freed into a
    MemoryError (the execution's 'cannot allocate a workspace')."""
    r = _child("""
        import resource
        from hipdnn_async.runtime import _host_pool as pool

        MB = 1 << 20
        blocks = [pool.take(60 * MB) for _ in range(4)]
        del blocks
        assert pool.pooled_bytes() == 240 * MB
        with open("/proc/self/status") as f:
            vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + 100 * MB, resource.RLIM_INFINITY))
        a = pool.take(200 * MB)
        a[-1] = 1
        print(a.nbytes // MB, pool.pooled_bytes())
        """, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["200", "0"], (r.stdout, r.stderr[-2000:])


def test_closing_a_cpu_device_frees_the_idle_blocks():
    with hd.Device("cpu", streams=1) as dev:
        plan, x, w, y = _nchw_conv(dev)
        xv = np.ones((8, 32, 40, 40), np.float32)
        plan.execute_sync({x: xv, w: np.ones((32, 32, 3, 3), np.float32),
                           y: np.empty_like(xv)})
        assert pool.pooled_bytes() >= plan.workspace_size
    assert pool.pooled_bytes() == 0
