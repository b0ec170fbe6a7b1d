"""A plan is a snapshot of its graph at build (docs/contract/semantics.md), and its variant
pack is checked at submit against that snapshot (issue 10, items 1, 2 and the aliasing part of 9).

Contract tested here: editing a graph after ``build`` (``set_dims``, ``set_data_type``,
``set_strides``, ``set_name``, ``set_output``), or editing another graph of the same
signature whose plan shares the provider plan, changes nothing an existing plan computes
or accepts. A buffer that fits the *edited* graph but not the snapshot is a
``VariantPackError`` at submit (naming the edit), never an error inside the worker.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import hipdnn_async as hd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from oracle import _reference as ref  # noqa: E402


def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def conv_bias_relu_graph(name):
    g = hd.Graph(name=name, io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 8, 9, 9), name="x")
    w = g.tensor(dims=(6, 8, 3, 3), name="w")
    b = g.tensor(dims=(1, 6, 1, 1), name="b")
    conv = g.conv_fprop(x, w, padding=1, name="conv")
    z = g.pointwise(conv, b, mode=hd.PointwiseMode.ADD, name="bias")
    y = g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD, name="relu").set_output(True)
    return g, dict(x=x, w=w, b=b, conv=conv, z=z, y=y)


def expected(xs, ws, bs):
    return np.maximum(ref.conv_fprop(xs, ws, pre=(1, 1), post=(1, 1)) + bs.astype(np.float64), 0)


@pytest.fixture
def dev():
    with hd.Device("cpu", streams=1) as d:
        yield d


def run(plan, t, xs, ws, bs):
    y = np.full((2, 6, 9, 9), np.nan, np.float32)
    plan.execute_sync({t["x"]: xs, t["w"]: ws, t["b"]: bs, t["y"]: y})
    return y


def test_editing_graph_a_changes_no_plan_sharing_its_provider_plan(dev):
    """The issue's case: the fp32 error of plan B went from 5.6e-7 to 7.3e-3 after
    ``set_data_type(HALF)`` on graph A's virtual conv output."""
    ga, ta = conv_bias_relu_graph("a")
    gb, tb = conv_bias_relu_graph("b")
    plan_a = dev.build_sync(ga, engine="CPU_ENGINE")
    hits = hd.stats()["plan_cache_hits"]
    plan_b = dev.build_sync(gb, engine="CPU_ENGINE")
    assert hd.stats()["plan_cache_hits"] == hits + 1      # B shares A's provider plan
    xs, ws, bs = rand((2, 8, 9, 9), 1), rand((6, 8, 3, 3), 2), rand((1, 6, 1, 1), 3)
    want = expected(xs, ws, bs)
    before = np.abs(run(plan_b, tb, xs, ws, bs) - want).max()
    assert before < 1e-5                                  # fp32 oracle level

    ta["conv"].set_data_type(hd.DataType.HALF)            # edits that used to leak into B
    ta["z"].set_data_type(hd.DataType.HALF)
    ta["w"].set_name("renamed")
    for plan, t in ((plan_b, tb), (plan_a, ta)):
        err = np.abs(run(plan, t, xs, ws, bs) - want).max()
        assert err < 1e-5, (plan, err)

    # A plan built from the edited graph follows the edit (HALF intermediate rounds).
    plan_a2 = dev.build_sync(ga, engine="CPU_ENGINE")
    err2 = np.abs(run(plan_a2, ta, xs, ws, bs) - want).max()
    assert 1e-5 < err2 < 0.05
    # ... and building it changed neither of the earlier plans.
    assert np.abs(run(plan_b, tb, xs, ws, bs) - want).max() < 1e-5


def test_set_dims_after_build_keeps_the_snapshot_dims(dev):
    g, t = conv_bias_relu_graph("dims")
    plan = dev.build_sync(g)
    t["x"].set_dims((4, 8, 9, 9))                          # graph edited after build
    xs, ws, bs = rand((2, 8, 9, 9), 4), rand((6, 8, 3, 3), 5), rand((1, 6, 1, 1), 6)
    assert np.abs(run(plan, t, xs, ws, bs) - expected(xs, ws, bs)).max() < 1e-5


def test_buffer_of_the_edited_shape_is_refused_at_submit(dev):
    """Item 2: new-shape buffers used to pass the submit check and fail in the worker
    with a GraphError. One rule now: the snapshot's dims, checked at submit."""
    g = hd.Graph(name="edit", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 3, 5, 5), name="x")
    w = g.tensor(dims=(4, 3, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    plan = dev.build_sync(g)
    x.set_dims((3, 3, 5, 5))
    y.set_dims((3, 4, 5, 5))
    new_x, new_y = rand((3, 3, 5, 5), 1), np.zeros((3, 4, 5, 5), np.float32)
    for submit in (plan.execute_sync, plan.submit):
        with pytest.raises(hd.VariantPackError, match="edited after this plan was built"):
            submit({x: new_x, w: rand((4, 3, 3, 3), 2), y: new_y})
    # by uid and name too: keys resolve against the snapshot
    with pytest.raises(hd.VariantPackError, match=r"dims \(2, 3, 5, 5\)"):
        plan.execute_sync({x.uid: new_x, "w": rand((4, 3, 3, 3), 2), y.uid: new_y})
    # the build-time shapes still run, and give the reference
    xs, ws = rand((2, 3, 5, 5), 3), rand((4, 3, 3, 3), 4)
    out = np.zeros((2, 4, 5, 5), np.float32)
    plan.execute_sync({x: xs, w: ws, y: out})
    np.testing.assert_allclose(out, ref.conv_fprop(xs, ws, pre=(1, 1), post=(1, 1)),
                               atol=1e-5, rtol=1e-5)


def test_set_output_after_build_does_not_add_a_slot(dev):
    g = hd.Graph(name="virt", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 2, 4, 4), name="x")
    w = g.tensor(dims=(2, 2, 1, 1), name="w")
    b = g.tensor(dims=(1, 2, 1, 1), name="b")
    conv = g.conv_fprop(x, w)
    y = g.pointwise(g.pointwise(conv, b, mode=hd.PointwiseMode.ADD),
                    mode=hd.PointwiseMode.RELU_FWD).set_output(True)
    plan = dev.build_sync(g)
    conv.set_output(True)
    vp = {x: rand((1, 2, 4, 4), 1), w: rand((2, 2, 1, 1), 2), b: rand((1, 2, 1, 1), 3),
          y: np.zeros((1, 2, 4, 4), np.float32), conv: np.zeros((1, 2, 4, 4), np.float32)}
    with pytest.raises(hd.VariantPackError, match="was virtual when this plan was built"):
        plan.execute_sync(vp)


# -- aliasing (issue 10 item 9): outputs own their memory, checked at submit -----------

def _bn_backward(dev):
    g = hd.Graph(name="bnb", io_data_type=hd.DataType.FLOAT)
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    sc, mu, iv = (g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("scale", "mean", "inv"))
    dx, ds, db = g.batchnorm_backward(dy, x, sc, mean=mu, inv_variance=iv)
    for t in (dx, ds, db):
        t.set_output(True)
    plan = dev.build_sync(g)
    arrays = {dy: rand((2, 3, 4, 4), 1), x: rand((2, 3, 4, 4), 2),
              sc: rand((1, 3, 1, 1), 3), mu: rand((1, 3, 1, 1), 4),
              iv: np.abs(rand((1, 3, 1, 1), 5)) + 0.5,
              dx: np.zeros((2, 3, 4, 4), np.float32), ds: np.zeros((1, 3, 1, 1), np.float32),
              db: np.zeros((1, 3, 1, 1), np.float32)}
    return plan, arrays, dict(dy=dy, x=x, sc=sc, mu=mu, iv=iv, dx=dx, ds=ds, db=db)


@pytest.mark.parametrize("out,other", [("dx", "x"), ("dx", "dy"), ("ds", "sc"),
                                       ("db", "ds"), ("ds", "mu")])
def test_bn_backward_output_aliasing_an_input_is_refused_at_submit(dev, out, other):
    plan, arrays, t = _bn_backward(dev)
    arrays[t[out]] = arrays[t[other]]
    with pytest.raises(hd.VariantPackError, match="shares memory"):
        plan.submit(arrays)          # raised by submit itself, before anything is queued
    assert dev.metrics()["submitted"] == 0


def test_partial_overlap_and_int_pointers_are_refused(dev):
    plan, arrays, t = _bn_backward(dev)
    big = np.zeros(2 * 3 * 4 * 4 + 5, np.float32)
    big[:96] = arrays[t["x"]].reshape(-1)
    arrays[t["x"]] = big[:96].reshape(2, 3, 4, 4)
    arrays[t["dx"]] = big[5:].reshape(2, 3, 4, 4)          # overlaps x by 91 elements
    with pytest.raises(hd.VariantPackError, match=r"role dx\) shares memory with tensor 'x'"):
        plan.execute_sync(arrays)
    plan2, arrays2, t2 = _bn_backward(dev)
    keep = arrays2[t2["dy"]]
    arrays2[t2["dx"]] = keep.ctypes.data                     # same memory as an int pointer
    with pytest.raises(hd.VariantPackError, match="shares memory"):
        plan2.execute_sync(arrays2)


def test_interleaved_disjoint_views_and_shared_inputs_are_allowed(dev):
    """Disjoint views of one array are fine, and inputs may share memory (read only)."""
    plan, arrays, t = _bn_backward(dev)
    stats = np.zeros((2, 3), np.float32)
    arrays[t["ds"]] = stats[0].reshape(1, 3, 1, 1)
    arrays[t["db"]] = stats[1].reshape(1, 3, 1, 1)
    both = np.zeros((2, 3, 4, 4, 2), np.float32)             # dx interleaved with a copy of x
    both[..., 1] = arrays[t["x"]]
    arrays[t["x"]], arrays[t["dx"]] = both[..., 1], both[..., 0]
    arrays[t["mu"]] = arrays[t["sc"]]                        # two inputs, one buffer
    with pytest.raises(hd.VariantPackError):                 # dx's strides are not packed ...
        plan.execute_sync(arrays)
    g = hd.Graph(name="bnb2", io_data_type=hd.DataType.FLOAT)  # ... so say so in the graph
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    x = g.tensor(dims=(2, 3, 4, 4), strides=tuple(s // 4 for s in both[..., 1].strides), name="x")
    sc, mu, iv = (g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("scale", "mean", "inv"))
    dx, ds, db = g.batchnorm_backward(dy, x, sc, mean=mu, inv_variance=iv)
    dx.set_strides(x.strides)
    for o in (dx, ds, db):
        o.set_output(True)
    plan2 = dev.build_sync(g)
    shared = arrays[t["sc"]]
    plan2.execute_sync({dy: arrays[t["dy"]], x: both[..., 1], sc: shared, mu: shared,
                        iv: arrays[t["iv"]], dx: both[..., 0], ds: arrays[t["ds"]],
                        db: arrays[t["db"]]})
    want = ref.bn_backward(arrays[t["dy"]], both[..., 1], shared, shared, arrays[t["iv"]])
    want_dx, want_ds, want_db = want["dx"], want["dscale"], want["dbias"]
    np.testing.assert_allclose(both[..., 0], want_dx, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(stats[0], want_ds.reshape(-1), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(stats[1], want_db.reshape(-1), atol=1e-5, rtol=1e-4)


def test_conv_output_aliasing_input_refused(dev):
    g = hd.Graph(name="c", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 4, 5, 5), name="x")
    w = g.tensor(dims=(4, 4, 1, 1), name="w")
    y = g.conv_fprop(x, w).set_output(True)
    plan = dev.build_sync(g)
    xs = rand((1, 4, 5, 5), 1)
    with pytest.raises(hd.VariantPackError, match="role y.*role x"):
        plan.execute_sync({x: xs, w: rand((4, 4, 1, 1), 2), y: xs})


def test_plan_cache_is_bounded(dev, monkeypatch):
    from hipdnn_async import _device
    monkeypatch.setattr(_device, "PLAN_CACHE_SIZE", 3)
    plans = []
    for c in range(1, 6):
        g = hd.Graph(name=f"g{c}", io_data_type=hd.DataType.FLOAT)
        x = g.tensor(dims=(1, c, 3, 3), name="x")
        w = g.tensor(dims=(2, c, 1, 1), name="w")
        y = g.conv_fprop(x, w).set_output(True)
        plans.append((dev.build_sync(g), x, w, y, c))
    assert len(dev._plan_cache) == 3
    for plan, x, w, y, c in plans:        # evicted provider plans still run their plans
        xs, ws = rand((1, c, 3, 3), c), rand((2, c, 1, 1), c + 10)
        out = np.zeros((1, 2, 3, 3), np.float32)
        plan.execute_sync({x: xs, w: ws, y: out})
        np.testing.assert_allclose(out, ref.conv_fprop(xs, ws), atol=1e-5, rtol=1e-5)


def test_aliasing_is_checked_on_every_pack_not_only_the_first(dev):
    """The check remembers the last pack that passed (same objects: not compared again);
    a new pack that aliases is still refused, and int pointers are compared by value."""
    plan, arrays, t = _bn_backward(dev)
    for _ in range(2):
        plan.execute_sync(arrays)                          # passes, then hits the memo
    bad = dict(arrays)
    bad[t["dx"]] = arrays[t["x"]]
    with pytest.raises(hd.VariantPackError, match="shares memory"):
        plan.execute_sync(bad)
    plan.execute_sync(arrays)
    ptrs = dict(arrays)
    ptrs[t["dx"]] = arrays[t["dx"]].ctypes.data
    plan.execute_sync(ptrs)
    ptrs[t["dx"]] = arrays[t["dy"]].ctypes.data            # a new value: checked again
    with pytest.raises(hd.VariantPackError, match="shares memory"):
        plan.execute_sync(ptrs)
