"""The CPU device's pool of host workspaces (``runtime._host_pool``): a block is
handed out again only once every view of it is gone; concurrent executions of one plan
each get their own; the pool keeps no more than its limits; results stay the float64
oracle's."""
import threading

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.runtime import _host_pool as pool
from tests.oracle import _reference as ref

BIG = 2 * pool.POOL_MIN_BYTES


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
    tiny = pool.take(pool.POOL_MIN_BYTES - 1)
    assert isinstance(tiny.base, (type(None), np.ndarray)) and tiny.flags.owndata


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
