"""Issue 10's device-independent promises on every GPU device: plans are snapshots of
their graph, outputs own their memory (checked at submit, device pointers by their byte
ranges), a buffer of an edited shape is a VariantPackError at submit. Marked gpu; skipped
with a reason where no GPU runtime is present (tests/gpu/conftest.py)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import hipdnn_async as hd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from oracle import _reference as ref  # noqa: E402

pytestmark = pytest.mark.gpu


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def conv_bias_relu(name):
    g = hd.Graph(name=name, io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 8, 9, 9), name="x")
    w = g.tensor(dims=(6, 8, 3, 3), name="w")
    b = g.tensor(dims=(1, 6, 1, 1), name="b")
    conv = g.conv_fprop(x, w, padding=1, name="conv")
    z = g.pointwise(conv, b, mode=hd.PointwiseMode.ADD)
    y = g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD).set_output(True)
    return g, dict(x=x, w=w, b=b, conv=conv, z=z, y=y)


async def _run(dev, plan, t, xs, ws, bs):
    vp = {t["x"]: await dev.asarray(xs), t["w"]: await dev.asarray(ws),
          t["b"]: await dev.asarray(bs), t["y"]: dev.empty((2, 6, 9, 9), "float32")}
    await plan.execute(vp)
    return await vp[t["y"]].to_numpy()


@pytest.mark.anyio
async def test_editing_a_graph_changes_no_gpu_plan(gpu_device):
    dev = gpu_device
    ga, ta = conv_bias_relu("a")
    gb, tb = conv_bias_relu("b")
    plan_a = await dev.build(ga)
    plan_b = await dev.build(gb)            # may share A's provider plan
    xs, ws, bs = rand((2, 8, 9, 9), 1), rand((6, 8, 3, 3), 2), rand((1, 6, 1, 1), 3)
    want = np.maximum(ref.conv_fprop(xs, ws, pre=(1, 1), post=(1, 1)) + bs, 0)
    ta["conv"].set_data_type(hd.DataType.HALF)
    ta["z"].set_data_type(hd.DataType.HALF)
    ta["x"].set_dims((4, 8, 9, 9))
    for plan, t in ((plan_b, tb), (plan_a, ta)):
        got = await _run(dev, plan, t, xs, ws, bs)
        # FLOAT without TF32 (docs/guide/gpu.md): the CPU's fp32 tolerance, scaled by the
        # 72-term sums
        np.testing.assert_allclose(got, want, atol=5e-5, rtol=1e-5)
    with pytest.raises(hd.VariantPackError, match="edited after this plan was built"):
        plan_a.submit({ta["x"]: dev.empty((4, 8, 9, 9), "float32"),
                       ta["w"]: await dev.asarray(ws), ta["b"]: await dev.asarray(bs),
                       ta["y"]: dev.empty((2, 6, 9, 9), "float32")})


@pytest.mark.anyio
async def test_output_sharing_device_memory_is_refused_at_submit(gpu_device):
    dev = gpu_device
    g = hd.Graph(name="bnb", io_data_type=hd.DataType.FLOAT)
    dy = g.tensor(dims=(2, 3, 4, 4), name="dy")
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    sc, mu, iv = (g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("scale", "mean", "inv"))
    dx, ds, db = g.batchnorm_backward(dy, x, sc, mean=mu, inv_variance=iv)
    for t in (dx, ds, db):
        t.set_output(True)
    plan = await dev.build(g)
    xd = await dev.asarray(rand((2, 3, 4, 4), 1))
    vp = {dy: await dev.asarray(rand((2, 3, 4, 4), 2)), x: xd,
          sc: await dev.asarray(np.ones((1, 3, 1, 1), np.float32)),
          mu: await dev.asarray(np.zeros((1, 3, 1, 1), np.float32)),
          iv: await dev.asarray(np.ones((1, 3, 1, 1), np.float32)),
          dx: xd, ds: dev.empty((1, 3, 1, 1), "float32"), db: dev.empty((1, 3, 1, 1), "float32")}
    with pytest.raises(hd.VariantPackError, match="shares memory"):
        plan.submit(vp)
    vp[dx] = dev.empty((2, 3, 4, 4), "float32")
    vp[db] = vp[ds]                                  # two outputs, one buffer
    with pytest.raises(hd.VariantPackError, match="shares memory"):
        plan.submit(vp)
    vp[db] = dev.empty((1, 3, 1, 1), "float32")
    await plan.execute(vp)                           # and with its own buffers it runs
