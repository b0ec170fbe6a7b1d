"""Several GPU devices in one process (issue 14), over every pair of GPUs present: each
ordered pair of distinct GPUs, and each GPU paired with itself (two ``Device`` objects on
one GPU: on a one-GPU machine the multi-device code paths run that way).

Two Devices run concurrently from one event loop with results against the float64
oracle, share no state (streams, plans, metrics; closing one leaves the other working),
copy between their arrays (device to device, peer to peer, or staged through the host),
leave the calling thread's current device as it was, and serve one DynamicBatcher over
both. Marked gpu; skipped with a reason where no GPU runtime is present.
"""
from __future__ import annotations

import os
import sys

import anyio
import numpy as np
import pytest

import hipdnn_async as hd

from .conftest import NO_GPU, gpu_specs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from oracle import _reference as ref  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.anyio]

X, W, B = (4, 8, 9, 9), (6, 8, 3, 3), (1, 6, 1, 1)
Y = (4, 6, 9, 9)
ATOL, RTOL = 5e-5, 1e-5     # FLOAT without TF32, 72-term sums (test_reliability_gpu.py)


def _pairs():
    specs = gpu_specs()
    out = [pytest.param((a, b), id=f"{a}+{b}") for a in specs for b in specs if a != b]
    out += [pytest.param((s, s), id=f"{s}+{s}") for s in specs]
    return out or [pytest.param(None, id="no-gpu")]


@pytest.fixture(params=_pairs())
def pair(request):
    """Two open Devices: on two GPUs, or two on one GPU."""
    if request.param is None:
        pytest.skip(NO_GPU)
    a, b = request.param
    with hd.Device(a) as da, hd.Device(b) as db:
        yield da, db


def cbr_graph():
    g = hd.Graph(name="multi_cbr", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=X, name="x")
    w = g.tensor(dims=W, name="w")
    b = g.tensor(dims=B, name="b")
    z = g.pointwise(g.conv_fprop(x, w, padding=1), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g


def rand(shape, rng):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def want_cbr(x, w, b):
    return np.maximum(ref.conv_fprop(x.astype(np.float64), w.astype(np.float64),
                                     pre=(1, 1), post=(1, 1)) + b, 0)


async def test_two_devices_run_concurrently_against_the_oracle(pair):
    rng = np.random.default_rng(14)
    w, b = rand(W, rng), rand(B, rng)
    results = {}

    async def run(dev, key, n):
        plan = await dev.build(cbr_graph())
        wg, bg = await dev.asarray(w), await dev.asarray(b)
        got = []
        for _ in range(n):
            x = rand(X, rng)
            y = dev.empty(Y, "float32")
            await plan.execute({"x": await dev.asarray(x), "w": wg, "b": bg, "y": y})
            got.append((await y.to_numpy(), want_cbr(x, w, b)))
        results[key] = (plan, got)

    da, db = pair
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, da, "a", 6)
        tg.start_soon(run, db, "b", 4)
    for key, n in (("a", 6), ("b", 4)):
        plan, got = results[key]
        assert len(got) == n
        for g_, w_ in got:
            np.testing.assert_allclose(g_, w_, atol=ATOL, rtol=RTOL)
    assert results["a"][0].device is da and results["b"][0].device is db
    assert da.metrics()["completed"] == 6 and db.metrics()["completed"] == 4
    # perf-db records are keyed by the GPU model: one key for two GPUs of one model
    ca, cb = da.provider.context, db.provider.context
    same_model = (ca.name, ca.compute_capability) == (cb.name, cb.compute_capability)
    assert (da.provider.describe() == db.provider.describe()) == same_model


async def test_no_state_is_shared_between_the_two_devices(pair):
    da, db = pair
    streams_a = {s.backend.stream for s in da.streams}
    streams_b = {s.backend.stream for s in db.streams}
    assert not streams_a & streams_b                 # each Device has its own streams
    pa, pb = await da.build(cbr_graph()), await db.build(cbr_graph())
    assert pa is not pb and pa._pplan is not pb._pplan    # and its own plans
    # what one GPU's Devices do share: its context, and so one benchmarking lock
    same_gpu = da.provider.context is db.provider.context
    assert (da._tune_lock is db._tune_lock) == same_gpu
    rng = np.random.default_rng(15)
    x, w, b = rand(X, rng), rand(W, rng), rand(B, rng)
    await da.aclose()                                # closing one leaves the other working
    y = db.empty(Y, "float32")
    await pb.execute({"x": await db.asarray(x), "w": await db.asarray(w),
                      "b": await db.asarray(b), "y": y})
    np.testing.assert_allclose(await y.to_numpy(), want_cbr(x, w, b), atol=ATOL, rtol=RTOL)


async def test_copies_between_the_devices_arrays(pair):
    da, db = pair
    a = np.random.default_rng(16).uniform(-1, 1, (2, 3, 5, 7)).astype(np.float32)
    src = await da.asarray(a)
    dst = db.empty(a.shape, "float32")
    await anyio.to_thread.run_sync(dst.copy_from, src)
    np.testing.assert_array_equal(await dst.to_numpy(), a)
    again = await db.asarray(src)
    assert again.device == db.spec
    np.testing.assert_array_equal(await again.to_numpy(), a)
    nhwc = db.empty(a.shape, "float32", layout="NHWC")      # another memory order
    await anyio.to_thread.run_sync(nhwc.copy_from, src)
    np.testing.assert_array_equal(await nhwc.to_numpy(), a)
    back = da.empty(a.shape, "float32")
    await anyio.to_thread.run_sync(back.copy_from, again)
    np.testing.assert_array_equal(await back.to_numpy(), a)
    ca, cb = da.provider.context, db.provider.context
    if ca is cb:
        assert not cb.peer_access(ca)                       # one GPU: device to device
    else:
        rt = cb.runtime
        assert cb.peer_access(ca) == bool(rt.can_access_peer(cb.index, ca.index))


async def test_the_callers_current_device_is_left_as_it_was(pair):
    da, db = pair
    rt = da.provider.context.runtime
    want = db.provider.context.index
    rt.set_device(want)
    plan = await da.build(cbr_graph())
    rng = np.random.default_rng(17)
    vp = {"x": await da.asarray(rand(X, rng)), "w": await da.asarray(rand(W, rng)),
          "b": await da.asarray(rand(B, rng)), "y": da.empty(Y, "float32")}
    await plan.execute(vp)
    plan.execute_sync(vp)
    await vp["y"].to_numpy()
    assert rt.get_device() == want


async def test_batcher_over_the_two_devices(pair):
    da, db = pair
    rng = np.random.default_rng(18)
    w, b = rand(W, rng), rand(B, rng)
    g = hd.Graph(name="multi_batch", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1,) + X[1:], name="x")
    wt, bt = g.tensor(dims=W, name="w"), g.tensor(dims=B, name="b")
    z = g.pointwise(g.conv_fprop(x, wt, padding=1), bt, mode=hd.PointwiseMode.ADD)
    g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    reqs = [rand((1 + i % 3,) + X[1:], rng) for i in range(48)]
    got = [None] * len(reqs)
    batcher = hd.DynamicBatcher([da, db], g, constants={"w": w, "b": b}, max_batch_size=4,
                                max_delay_ms=1.0)
    async with batcher:
        async def client(i):
            got[i] = await batcher(reqs[i])
        async with anyio.create_task_group() as tg:
            for i in range(len(reqs)):
                tg.start_soon(client, i)
    for r, g_ in zip(reqs, got):
        np.testing.assert_allclose(g_, want_cbr(r, w, b), atol=ATOL, rtol=RTOL)
    m = batcher.metrics()
    per = m["devices"]
    assert [d["device"] for d in per] == [da.spec, db.spec]
    assert sum(d["rows"] for d in per) == m["rows"] == sum(len(r) for r in reqs)
    assert all(d["batches"] >= 1 and d["errors"] == 0 for d in per), per
