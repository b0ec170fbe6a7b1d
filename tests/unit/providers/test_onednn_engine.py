"""ONEDNN_ENGINE (hipdnn_async.providers.cpu.onednn): ranking, knobs over oneDNN's
implementations, the perf db across processes, the fallback without oneDNN, the submit
path's launcher, constant weights reordered once, and spot checks of every pattern
against the float64 references of tests/oracle/_reference.py (the full pattern x dtype x
layout matrix is tests/oracle, which runs on the default engine).

Skipped where oneDNN does not load (another platform: the engine declines there, which
test_fallback_without_onednn checks in a subprocess)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._tuning import Algorithm
from hipdnn_async.providers.cpu._kernels import bn_rows_builds
from hipdnn_async.runtime import load_onednn
from oracle import _reference as ref
from _peers import peer
from oracle._cases import alloc, assert_close, reduction_tol

pytestmark = pytest.mark.skipif(not load_onednn().ok,
                                reason=f"oneDNN does not load here: {load_onednn().reason}")

ONEDNN, CPU = "ONEDNN_ENGINE", "CPU_ENGINE"
WS, BENCH = "global.workspace_size_limit", "global.benchmarking"
BF16 = np.dtype(ml_dtypes.bfloat16)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def dev():
    with hd.Device("cpu") as d:
        yield d


def rand(t, seed=0, dtype=np.float32):
    """U(-1, 1) values in a buffer with tensor ``t``'s dims and strides."""
    a = alloc(t.dims, t.strides, dtype)
    a[...] = np.random.default_rng(seed).uniform(-1, 1, t.dims).astype(dtype)
    return a


def empty(t, dtype=np.float32):
    return alloc(t.dims, t.strides, dtype)


def fprop_graph(layout="NHWC", dtype=hd.DataType.FLOAT, x_dims=(2, 8, 9, 9), w_dims=(8, 4, 3, 3),
                **conv):
    g = hd.Graph(name="fprop", io_data_type=dtype)
    x = g.tensor(dims=x_dims, layout=layout, name="x")
    w = g.tensor(dims=w_dims, layout=layout, name="w")
    y = g.conv_fprop(x, w, **conv)
    y.set_output(True).set_name("y")
    return g, x, w, y


def close(got, want, tol):
    got = np.asarray(got, np.float64)
    assert np.all(np.abs(got - want) <= tol * (1 + np.abs(want))), np.abs(got - want).max()


# ------------------------------------------------------------------ ranking and naming
def test_onednn_ranks_first_and_names_its_implementation(dev):
    g, *_ = fprop_graph()
    assert [e.name for e in hd.engines(g, "cpu")] == [ONEDNN, CPU]
    plan = dev.build_sync(g)
    assert plan.engine.name == ONEDNN
    a = plan.algorithm
    assert isinstance(a, Algorithm) and not str(a).startswith("ref:")
    assert "oneDNN's own preference order, rank 1 of" in a.reason
    assert [n for n, _ in a.trials][0] == str(a)


def test_batchnorm_reason_gives_no_rank(dev):
    """The batchnorm rule picks by kind (the rows, else jit, else the binary primitive)
    from candidates listed in the order they were built: its reason gives their number,
    not a rank in that list, which read as if a better one had been passed over."""
    g = hd.Graph(name="bn_infer", io_data_type="float32")
    x = g.tensor(dims=(4, 8, 10, 10), name="x")
    stats = [g.tensor(dims=(1, 8, 1, 1), name=n, data_type="float32") for n in "mvsb"]
    g.batchnorm_inference_variance_ext(x, *stats, epsilon=1e-5).set_output(True)
    a = dev.build_sync(g, engine=ONEDNN).algorithm
    n = len(a.trials)
    assert n > 1 and f"chosen from the {n} candidates within the workspace limit" in a.reason
    assert "rank" not in a.reason, a.reason
    # one candidate (the rows of a small channels-first training): said so
    g = hd.Graph(name="bn_train", io_data_type="float32")
    x = g.tensor(dims=(2, 3, 4, 4), name="x")
    scale, bias = (g.tensor(dims=(1, 3, 1, 1), name=n, data_type="float32") for n in "sb")
    for t in g.batchnorm(x, scale, bias, epsilon=1e-5)[:3]:
        t.set_output(True)
    a = dev.build_sync(g, engine=ONEDNN).algorithm
    assert len(a.trials) == 1 and "the only candidate within the workspace limit" in a.reason, (
        a.trials, a.reason)


# ------------------------------------------------------------------ convolutions vs float64
@pytest.mark.parametrize("dtype,tol", [(hd.DataType.FLOAT, 1e-5), (hd.DataType.BFLOAT16, 2e-2)])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_fprop_groups_dilation_asymmetric_padding(dev, dtype, tol, layout):
    npdt = np.float32 if dtype == hd.DataType.FLOAT else BF16
    g, x, w, y = fprop_graph(layout, dtype, (2, 8, 11, 10), (6, 4, 3, 2), pre_padding=(2, 0),
                             post_padding=(1, 1), stride=(2, 1), dilation=(2, 3))
    plan = dev.build_sync(g, engine=ONEDNN)
    xa, wa = rand(x, 1, npdt), rand(w, 2, npdt)
    ya = empty(y, npdt)
    plan.execute_sync({x: xa, w: wa, y: ya})
    want = ref.conv_fprop(xa, wa, (2, 0), (1, 1), (2, 1), (2, 3))
    close(ya, want, tol * 4)


def test_dgrad_and_wgrad_match_float64(dev):
    x_dims, w_dims = (2, 6, 7, 7), (4, 6, 3, 3)
    for direction in ("dgrad", "wgrad"):
        g = hd.Graph(name=direction)
        dy = g.tensor(dims=(2, 4, 7, 7), layout="NHWC", name="dy")
        if direction == "dgrad":
            w = g.tensor(dims=w_dims, layout="NHWC", name="w")
            out = g.conv_dgrad(dy, w, dx_dims=x_dims, padding=1)
        else:
            w = g.tensor(dims=x_dims, layout="NHWC", name="x")
            out = g.conv_wgrad(dy, w, dw_dims=w_dims, padding=1)
        out.set_output(True)
        plan = dev.build_sync(g, engine=ONEDNN)
        dya, wa = rand(dy, 3), rand(w, 4)
        outa = empty(out)
        plan.execute_sync({dy: dya, w: wa, out: outa})
        want = (ref.conv_dgrad(dya, wa, x_dims, (1, 1), (1, 1)) if direction == "dgrad"
                else ref.conv_wgrad(dya, wa, w_dims, (1, 1), (1, 1)))
        close(outa, want, 1e-4)


def test_conv_bias_relu_and_nan(dev):
    g = hd.Graph(name="cbr")
    x = g.tensor(dims=(1, 4, 5, 5), layout="NHWC", name="x")
    w = g.tensor(dims=(4, 4, 1, 1), layout="NHWC", name="w")
    b = g.tensor(dims=(1, 4, 1, 1), name="b")
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w), b, mode=hd.PointwiseMode.ADD),
                    mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    xa, wa, ba = rand(x, 5), rand(w, 6), rand(b, 7)
    xa[0, 0, 0, 0] = np.nan                      # NaN propagates through ReLU
    ya = empty(y)
    plan.execute_sync({x: xa, w: wa, b: ba, y: ya})
    want = ref.relu(ref.conv_fprop(xa, wa) + ba.astype(np.float64))
    assert np.isnan(ya[0, :, 0, 0]).all() and np.array_equal(np.isnan(ya), np.isnan(want))
    ok = ~np.isnan(want)
    close(ya[ok], want[ok], 1e-5)
    assert not np.signbit(ya[ok]).any()          # never -0.0


# ------------------------------------------------------------------ batchnorm
# Conv + bias values that put every special value through the fused ReLU: per channel a
# bias of NaN, +-inf, a large negative, small numbers of both signs, zero (the input is
# zero there), and an input NaN / +-inf / -0.0 spreading through the 3x3 windows.
RELU_SPECIAL_BIAS = (np.nan, np.inf, -np.inf, -1e38, -1.5, 2.5, 1e-30, -1e-30, 0.0)
NPDT = {hd.DataType.FLOAT: np.float32, hd.DataType.BFLOAT16: BF16, hd.DataType.HALF: np.float16}


def _conv_bias_relu_special(dtype, layout, nd, clips=(None, None)):
    """(graph, {tensor: buffer}, y, float64 peer result): conv + bias + ReLU on special values,
    the peer being PyTorch's conv (float64, the same rounded inputs) and relu / clamp."""
    torch = peer("torch", "conv + bias + ReLU special values against PyTorch's conv + relu")
    k, c, sp = 16, 8, (6,) * nd
    rng = np.random.default_rng(nd)
    g = hd.Graph(name="cbr_special", io_data_type=dtype)
    x = g.tensor(dims=(2, c) + sp, layout=layout, name="x")
    w = g.tensor(dims=(k, c) + (3,) * nd, layout=layout, name="w")
    b = g.tensor(dims=(1, k) + (1,) * nd, name="b").set_data_type(hd.DataType.FLOAT)
    z = g.pointwise(g.conv_fprop(x, w, padding=1), b, mode=hd.PointwiseMode.ADD)
    y = g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=clips[0],
                    relu_upper_clip=clips[1])
    y.set_output(True)
    npdt = NPDT[dtype]
    xa = rand(x, 1, npdt)
    corner = (1,) * nd
    xa[(0, 0) + corner] = np.nan
    xa[(0, 1) + (2,) * nd] = np.inf
    xa[(0, 2) + (3,) * nd] = -np.inf
    xa[(1, 3) + (2,) * nd] = -0.0
    wa = rand(w, 2, npdt)
    ba = np.concatenate([RELU_SPECIAL_BIAS, rng.uniform(-1, 1, k - len(RELU_SPECIAL_BIAS))])
    ba = ba.reshape(b.dims).astype(np.float32)
    conv = torch.nn.functional.conv2d if nd == 2 else torch.nn.functional.conv3d
    t = conv(torch.from_numpy(xa.astype(np.float64)), torch.from_numpy(wa.astype(np.float64)),
             torch.from_numpy(ba.reshape(-1).astype(np.float64)), padding=1)
    if clips == (None, None):
        want = torch.relu(t)
    else:
        lo = 0.0 if clips[0] is None else clips[0]
        want = torch.clamp(t, lo, clips[1])
    return g, {x: xa, w: wa, b: ba}, y, want.numpy() + 0.0


def _assert_relu_special(got, want, tol, what):
    got = np.asarray(got, np.float64)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), \
        f"{what}: NaN differs at {np.argwhere(np.isnan(got) != nan)[:4]}"
    exact = ~nan & (np.isinf(want) | (want == 0))
    assert np.array_equal(got[exact], want[exact]), f"{what}: inf / zero results differ"
    assert not np.signbit(got[~nan & (got == 0)]).any(), f"{what}: -0.0 in the result"
    close(got[~nan & ~exact], want[~nan & ~exact], tol)


@pytest.mark.parametrize("dtype,tol", [(hd.DataType.FLOAT, 1e-5), (hd.DataType.BFLOAT16, 3e-2),
                                       (hd.DataType.HALF, 3e-3)],
                         ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("nd", [2, 3])
def test_conv_bias_relu_post_ops_exact_in_every_implementation(dev, monkeypatch, dtype, tol,
                                                               layout, nd):
    """RELU_FWD without clips: every oneDNN implementation of the problem is a candidate
    twice, with the ReLU after the primitive and as its post-ops (``+relu``); through each
    the result equals PyTorch's conv + relu on NaN, +-inf, -0.0 and negatives (the post-op
    chain is exact only by how oneDNN computes it)."""
    from hipdnn_async.providers.cpu.onednn import _conv
    layout = layout if nd == 2 else {"NCHW": "NCDHW", "NHWC": "NDHWC"}[layout]
    g, bufs, y, want = _conv_bias_relu_special(dtype, layout, nd)
    full = _conv.Conv.candidates
    plan = dev.build_sync(g, engine=ONEDNN)
    names = [str(a) for a, _ in plan.algorithm.trials]
    fused = [n for n in names if n.endswith("+relu")]
    # each implementation twice: the ReLU after it, and as post-ops (the default for this
    # small y, except on the GEMM convolution: test_conv_relu_default_by_y_size)
    assert str(plan.algorithm).endswith("+relu") == ("gemm" not in str(plan.algorithm))
    assert fused and sorted(n[:-len("+relu")] for n in fused) == sorted(set(names) - set(fused))
    for name in names:
        monkeypatch.setattr(_conv.Conv, "candidates",
                            lambda self, name=name: [c for c in full(self) if c.name == name])
        g, bufs, y, want = _conv_bias_relu_special(dtype, layout, nd)
        with hd.Device("cpu") as d:                 # a new plan cache: built afresh
            plan = d.build_sync(g, engine=ONEDNN)
            assert str(plan.algorithm) == name
            ya = empty(y, NPDT[dtype])
            plan.execute_sync({**bufs, y: ya})
        _assert_relu_special(ya, want, tol * 4, f"{name} {dtype.name} {layout}")


@pytest.mark.parametrize("layout,x_dims,w_dims,padding,post_ops", [
    ("NHWC", (1, 8, 8, 8), (8, 8, 3, 3), 1, True),           # y: 512 elements
    ("NCHW", (1, 8, 8, 8), (8, 8, 3, 3), 1, True),           # +blocked+relu
    ("NHWC", (1, 64, 8, 8), (64, 64, 3, 3), 1, True),        # 2.4 M multiply-adds
    ("NHWC", (1, 16, 64, 64), (16, 16, 3, 3), 1, False),     # y: SMALL_Y elements
    ("NHWC", (1, 128, 8, 8), (128, 128, 3, 3), 1, False),    # SMALL_MACS and more
    ("NCHW", (1, 8, 8, 8), (8, 8, 1, 1), 0, False),          # gemm:jit: the pass after it
])
def test_conv_relu_default_by_y_size(dev, layout, x_dims, w_dims, padding, post_ops):
    """Without benchmarking, conv + bias + ReLU computes the ReLU as post-ops where y has
    fewer than SMALL_Y elements and the convolution fewer than SMALL_MACS multiply-adds
    (not on oneDNN's GEMM convolution), else after the primitive; the plan says why, and
    the result is PyTorch's conv + relu."""
    from hipdnn_async.providers.cpu.onednn._conv import SMALL_MACS, SMALL_Y
    torch = peer("torch", "conv + bias + ReLU against PyTorch's conv + relu")
    g = hd.Graph(name="cbr_size")
    x = g.tensor(dims=x_dims, layout=layout, name="x")
    w = g.tensor(dims=w_dims, layout=layout, name="w")
    b = g.tensor(dims=(1, w_dims[0], 1, 1), name="b")
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w, padding=padding), b,
                                mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    small = (int(np.prod(y.dims)) < SMALL_Y
             and int(np.prod(y.dims)) * int(np.prod(w_dims[1:])) < SMALL_MACS)
    assert small == (post_ops or "gemm" in str(plan.algorithm))
    assert str(plan.algorithm).endswith("+relu") == post_ops, plan.algorithm
    assert ("post-ops for a y of fewer than" in plan.algorithm.reason) == post_ops
    xa, wa, ba = rand(x, 1), rand(w, 2), rand(b, 3)
    ya = empty(y)
    plan.execute_sync({x: xa, w: wa, b: ba, y: ya})
    want = torch.relu(torch.nn.functional.conv2d(
        torch.from_numpy(xa.astype(np.float64)), torch.from_numpy(wa.astype(np.float64)),
        torch.from_numpy(ba.reshape(-1).astype(np.float64)), padding=padding)).numpy()
    assert_close(ya, want, *reduction_tol("conv_fprop", "float32", int(np.prod(w_dims[1:]))),
                 str(plan.algorithm))


def test_a_post_op_twin_outside_the_small_rule_claims_no_small_reason(dev):
    """A ``+relu`` candidate taken for another reason (e.g. the only one within a
    workspace limit) on a problem the small-problem rule leaves out is not explained by
    that rule."""
    g = hd.Graph(name="cbr_big")
    x = g.tensor(dims=(1, 128, 8, 8), layout="NHWC", name="x")
    w = g.tensor(dims=(128, 128, 3, 3), layout="NHWC", name="w")
    b = g.tensor(dims=(1, 128, 1, 1), name="b")
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w, padding=1), b,
                                mode=hd.PointwiseMode.ADD), mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    conv = plan._pplan._conv
    name = str(plan.algorithm)
    assert not name.endswith("+relu")
    assert conv.rule(name + "+relu") == conv.rule(name)


@pytest.mark.parametrize("clips", [(None, 1.0), (-0.5, 1.0), (0.25, None)],
                         ids=["upper", "clamp", "lower"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_clipped_conv_relu_runs_after_the_primitive(dev, layout, clips):
    """A clipped RELU_FWD is not a post-op (oneDNN's clip and max / min map NaN to a bound):
    the plan names no ``+relu`` and the result equals PyTorch's conv + clamp."""
    g, bufs, y, want = _conv_bias_relu_special(hd.DataType.FLOAT, layout, 2, clips)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert not str(plan.algorithm).endswith("+relu")
    ya = empty(y)
    plan.execute_sync({**bufs, y: ya})
    _assert_relu_special(ya, want, 4e-5, f"{plan.algorithm} clips {clips}")


@pytest.mark.parametrize("clips", [(None, None), (-0.5, 1.0)], ids=["relu", "clamp"])
def test_conv_relu_on_an_unaligned_y_equals_the_aligned_result(dev, clips):
    """The ReLU after the primitive runs the compiled pass on y itself where y's elements
    are aligned, and the checked one otherwise: the same bits either way."""
    g, bufs, y, want = _conv_bias_relu_special(hd.DataType.FLOAT, "NHWC", 2, clips)
    plan = dev.build_sync(g, engine=ONEDNN)
    aligned = empty(y)
    plan.execute_sync({**bufs, y: aligned})
    raw = np.frombuffer(bytearray(aligned.nbytes + 1), np.uint8)[1:]
    odd = np.lib.stride_tricks.as_strided(raw.view(np.float32), aligned.shape,
                                          aligned.strides)
    assert not odd.flags.aligned and odd.flags.writeable
    plan.execute_sync({**bufs, y: odd})
    assert np.array_equal(odd, aligned, equal_nan=True)
    assert np.array_equal(np.signbit(odd), np.signbit(aligned))
    _assert_relu_special(odd, want, 4e-5, f"unaligned y, clips {clips}")


def test_bn_training_running_statistics_and_variance_round_trip(dev):
    g = hd.Graph(name="bn")
    x = g.tensor(dims=(4, 3, 5, 6), layout="NHWC", name="x")
    s, b, pm, pv = (g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("s", "b", "pm", "pv"))
    y, mean, inv, nm, nv = g.batchnorm(x, s, b, epsilon=1e-3, momentum=0.25,
                                       prev_running_mean=pm, prev_running_variance=pv)
    for t in (y, mean, inv, nm, nv):
        t.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    xa = rand(x, 8)
    xa[...] = 0.5 + 3 * xa
    sa, ba, pma, pva = rand(s, 9), rand(b, 10), rand(pm, 11), rand(pv, 12)
    pva += 2
    outs = {t: empty(t) for t in (y, mean, inv, nm, nv)}
    plan.execute_sync({x: xa, s: sa, b: ba, pm: pma, pv: pva, **outs})
    want = ref.bn_training(xa, sa, ba, 1e-3, 0.25, pma, pva)
    for t, key in ((y, "y"), (mean, "mean"), (inv, "inv_variance"), (nm, "next_running_mean"),
                   (nv, "next_running_variance")):
        close(outs[t], want[key], 1e-4)


def _bn_backward(dev, dims):
    """(plan, pack, tensors x, dy, dx, ds, db) of an NCHW batchnorm backward on ``dims``
    taking inv_variance: x, dy and scale U(-1, 1), mean and inv_variance x's float64
    statistics, outputs empty."""
    c = dims[1]
    g = hd.Graph(name="bnb")
    x = g.tensor(dims=dims, layout="NCHW", name="x")
    dy = g.tensor(dims=dims, layout="NCHW", name="dy")
    s, m, iv = (g.tensor(dims=(1, c, 1, 1), name=n) for n in ("s", "m", "iv"))
    dx, ds, db = g.batchnorm_backward(dy, x, s, mean=m, inv_variance=iv)
    for t in (dx, ds, db):
        t.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    xa = rand(x, 13)
    st = ref.bn_training(xa, np.ones(c), np.zeros(c), 1e-5)
    pack = {x: xa, dy: rand(dy, 14), s: rand(s, 15), m: st["mean"].astype(np.float32),
            iv: st["inv_variance"].astype(np.float32), **{t: empty(t) for t in (dx, ds, db)}}
    return plan, pack, (x, dy, s, m, iv, dx, ds, db)


def _check_bn_backward(pack, tensors):
    x, dy, s, m, iv, dx, ds, db = tensors
    want = ref.bn_backward(pack[dy], pack[x], pack[s], pack[m], pack[iv])
    close(pack[dx], want["dx"], 2e-3)
    close(pack[ds], want["dscale"], 2e-3)
    close(pack[db], want["dbias"], 2e-3)


def test_bn_backward_takes_inv_variance(dev):
    plan, pack, tensors = _bn_backward(dev, (3, 4, 5, 5))
    plan.execute_sync(pack)
    _check_bn_backward(pack, tensors)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_bn_training_relu_keeps_relu_special_values(dev, layout):
    # a NaN in a channel makes that channel NaN (oneDNN's fuse_norm_relu, once taken at
    # C = 16 NHWC, turned it into +0), RELU(-inf) = +0, -0.0 -> +0.0
    # (tests/oracle/test_edge_cases.py)
    c = 16
    g = hd.Graph(name="bnr")
    x = g.tensor(dims=(2, c, 3, 3), layout=layout, name="x")
    s, b = (g.tensor(dims=(1, c, 1, 1), name=n) for n in "sb")
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=1e-5)
    r = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    for t in (r, mean, inv):
        t.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    xa = rand(x, 20)
    xa[1, 1, 2, 0] = np.nan
    sa, ba = np.ones((1, c, 1, 1), np.float32), rand(b, 21)
    ba[0, 0] = -np.inf                                  # channel 0: RELU(-inf) = +0
    sa[0, 2], ba[0, 2] = 0.0, -0.0                      # channel 2: 0 * xhat + -0.0 = -0.0
    outs = {t: empty(t) for t in (r, mean, inv)}
    plan.execute_sync({x: xa, s: sa, b: ba, **outs})
    got = outs[r]
    assert np.isnan(got[:, 1]).all()
    assert not np.isnan(np.delete(got, 1, axis=1)).any()
    assert (got[:, 0] == 0).all() and (got[:, 2] == 0).all() and not np.signbit(got).any()
    want = ref.bn_training(np.delete(xa, 1, axis=1), np.delete(sa, 1, axis=1),
                           np.delete(ba, 1, axis=1), 1e-5)["y"]
    close(np.delete(got, 1, axis=1), ref.relu(want), 1e-4)


def test_bn_training_offers_the_rows_alone(dev):
    # every oneDNN 3.2 batchnorm sums in float32 (ncsp_bnorm, bnorm_jit, nspc_bnorm: y was
    # 2.9-5.1 off on x = 3e4 + N(0, 1)), so training offers only the engine's rows, also
    # to benchmarking, which would otherwise keep a faster, wrong kernel in the perf db
    g = hd.Graph(name="bn_nchw")
    x = g.tensor(dims=(4, 16, 5, 6), layout="NCHW", name="x")
    s, b = (g.tensor(dims=(1, 16, 1, 1), name=n) for n in ("s", "b"))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=1e-3)
    r = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    for t in (r, mean, inv):
        t.set_output(True)
    xa, sa, ba = rand(x, 30), rand(s, 31), rand(b, 32)
    want = ref.bn_training(xa, sa, ba, 1e-3)
    for knobs in ({}, {BENCH: 1}):
        plan = dev.build_sync(g, engine=ONEDNN, knobs=knobs)
        names = [n for n, _ in plan.algorithm.trials]
        assert len(names) == 1 and names[0].startswith("bn_rows:"), names
        assert str(plan.algorithm) == names[0]
        outs = {t: empty(t) for t in (r, mean, inv)}
        plan.execute_sync({x: xa, s: sa, b: ba, **outs})
        close(outs[r], ref.relu(want["y"]), 1e-4)
        close(outs[mean], want["mean"], 1e-5)
        close(outs[inv], want["inv_variance"], 1e-4)


def _every_other(dims, dtype=np.float32):
    """A view of ``dims`` taking every other element of a buffer twice its size (NaN in
    the gaps), and its element strides."""
    base = np.full(2 * int(np.prod(dims)), np.nan, dtype)[::2].reshape(dims)
    return base, tuple(st // base.itemsize for st in base.strides)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("relu", [False, True])
def test_bn_training_on_memory_the_rows_cannot_read_runs_them_on_dense_copies(dev, layout,
                                                                              relu):
    # x cropped in W (its spatial elements not one run, its pixels not at one stride) and
    # every per-channel tensor every other float: the rows run on dense workspace copies
    # ("+dense"), within the FLOAT training tolerance on offset data where oneDNN's own
    # batchnorm (taken here before) was off by about 3
    n, c, h, w = 4, 3, 16, 16
    tol = 4e-3                                  # FLOAT bn_training (tests/oracle/_cases.py)
    rng = np.random.default_rng(40)
    x64 = 3e4 + rng.standard_normal((n, c, h, w))
    full = x64 if layout == "NCHW" else x64.transpose(0, 2, 3, 1)
    wide = np.zeros(full.shape[:-1] + (full.shape[-1] + 3,), np.float32)
    wide[..., :full.shape[-1]] = full
    xv = wide[..., :full.shape[-1]]                  # the cropped view
    xa = xv if layout == "NCHW" else xv.transpose(0, 3, 1, 2)
    g = hd.Graph(name="bn_dense")
    x = g.tensor(dims=(n, c, h, w), strides=tuple(st // 4 for st in xa.strides), name="x")
    bufs = {}
    chans = {}
    for name in ("s", "b", "pm", "pv"):
        a, strides = _every_other((1, c, 1, 1))
        bufs[name] = a
        chans[name] = g.tensor(dims=(1, c, 1, 1), strides=strides, name=name)
    bufs["s"][...] = rng.uniform(0.5, 2, (1, c, 1, 1))
    bufs["b"][...] = rng.uniform(-1, 1, (1, c, 1, 1))
    bufs["pm"][...] = 0.5
    bufs["pv"][...] = 2.0
    y, mean, inv, nm, nv = g.batchnorm(x, chans["s"], chans["b"], epsilon=1e-5, momentum=0.25,
                                       prev_running_mean=chans["pm"],
                                       prev_running_variance=chans["pv"])
    out = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD) if relu else y
    outs = {}
    for t in (out, mean, inv, nm, nv):
        t.set_output(True)
    out.set_strides(tuple(st // 4 for st in xa.strides))          # y cropped like x
    for t in (mean, inv, nm, nv):
        a, strides = _every_other((1, c, 1, 1))
        t.set_strides(strides)
        outs[t] = a
    ywide = np.full_like(wide, np.nan)
    yv = ywide[..., :full.shape[-1]]
    outs[out] = yv if layout == "NCHW" else yv.transpose(0, 3, 1, 2)
    for knobs in ({}, {BENCH: 1}):
        plan = dev.build_sync(g, engine=ONEDNN, knobs=knobs)
        assert str(plan.algorithm).endswith("+dense"), plan.algorithm
        plan.execute_sync({x: xa, **{chans[k]: bufs[k] for k in chans}, **outs})
        want = ref.bn_training(xa, bufs["s"], bufs["b"], 1e-5, 0.25, bufs["pm"], bufs["pv"])
        close(outs[out], ref.relu(want["y"]) if relu else want["y"], tol)
        for t, key in ((mean, "mean"), (inv, "inv_variance"), (nm, "next_running_mean"),
                       (nv, "next_running_variance")):
            close(outs[t], want[key], tol)
        # the gaps of every strided output are untouched
        assert np.isnan(ywide[..., full.shape[-1]:]).all()
        for t in (mean, inv, nm, nv):
            assert np.isnan(outs[t].base[1::2]).all()


@pytest.mark.parametrize("dims, crop", [((4, 6, 7, 9), -1), ((2, 5, 3, 4, 6), -1),
                                        ((2, 5, 3, 4, 6), -2)],
                         ids=["NCHW-W", "NCDHW-W", "NCDHW-H"])
@pytest.mark.parametrize("y_cropped", [False, True], ids=["y_packed", "y_cropped"])
def test_bn_inference_on_cropped_memory_runs_the_rows_in_place(dev, dims, crop, y_cropped):
    # x cut from a wider buffer in W (or, NCDHW, in H): its (n, c) rows are packed runs of
    # W (H x W) at one stride, which the rows read as they are, y packed or cropped alike:
    # no dense copies ("+dense" absent), values within the FLOAT inference tolerance, the
    # crop's other columns untouched
    tol = 1e-5                            # FLOAT bn_inference_variance (tests/oracle/_cases.py)
    c = dims[1]
    wide_dims = list(dims)
    wide_dims[crop] += 3
    cut = (slice(None),) * (len(dims) + crop) + (slice(0, dims[crop]),)
    rng = np.random.default_rng(len(dims) - crop)
    wide = rng.standard_normal(wide_dims).astype(np.float32)
    xa = wide[cut]
    g = hd.Graph(name="bn_inference_cropped")
    x = g.tensor(dims=dims, strides=tuple(st // 4 for st in xa.strides), name="x")
    m, v, s, b = (g.tensor(dims=(1, c) + (1,) * (len(dims) - 2), name=n)
                  for n in ("m", "v", "s", "b"))
    y = g.batchnorm_inference_variance_ext(x, m, v, s, b, epsilon=1e-5).set_output(True)
    ywide = np.full(wide_dims, np.nan, np.float32)
    ya = ywide[cut] if y_cropped else np.full(dims, np.nan, np.float32)
    y.set_strides(tuple(st // 4 for st in ya.strides))
    vecs = {t: rng.uniform(lo, hi, t.dims).astype(np.float32)
            for t, lo, hi in ((m, -0.5, 0.5), (v, 0.5, 2.0), (s, 0.5, 1.5), (b, -1, 1))}
    plan = dev.build_sync(g, engine=ONEDNN)
    assert str(plan.algorithm).startswith("bn_rows:"), plan.algorithm
    assert "+dense" not in str(plan.algorithm), plan.algorithm
    plan.execute_sync({x: xa, y: ya, **vecs})
    close(ya, ref.bn_inference_variance(xa, vecs[m], vecs[v], vecs[s], vecs[b], 1e-5), tol)
    if y_cropped:
        rest = np.ones(wide_dims, bool)
        rest[cut] = False
        assert np.isnan(ywide[rest]).all()


@pytest.mark.parametrize("pattern", ["inference", "backward", "drelu_backward"])
def test_bn_rows_take_per_channel_memmaps(dev, tmp_path, pattern):
    # per-channel tensors bound to np.memmap arrays of dims (1, C, 1, 1), outputs (dscale,
    # dbias) too: the rows read and write them as the ndarrays they are (a regression
    # took only exact ndarrays there, and refused these at execute)
    n, c = 2, 4
    rng = np.random.default_rng(3)

    def mm(name, values):
        a = np.memmap(tmp_path / name, dtype=np.float32, mode="w+", shape=(1, c, 1, 1))
        a[...] = values
        return a
    g = hd.Graph(name="bn_memmap")
    x = g.tensor(dims=(n, c, 3, 5), name="x")
    s, b, m = (g.tensor(dims=(1, c, 1, 1), name=nm) for nm in ("s", "b", "m"))
    xa = rng.standard_normal(x.dims).astype(np.float32)
    sa, ba = rng.uniform(0.5, 1.5, s.dims), rng.uniform(-0.5, 0.5, b.dims)
    ma = xa.mean(axis=(0, 2, 3), keepdims=True)
    va = xa.var(axis=(0, 2, 3), keepdims=True)
    if pattern == "inference":
        v = g.tensor(dims=(1, c, 1, 1), name="v")
        y = g.batchnorm_inference_variance_ext(x, m, v, s, b, epsilon=1e-5).set_output(True)
        out = np.empty(x.dims, np.float32)
        pack = {x: xa, y: out, s: mm("s", sa), b: mm("b", ba), m: mm("m", ma),
                v: mm("v", va)}
        plan = dev.build_sync(g, engine=ONEDNN)
        plan.execute_sync(pack)
        close(out, ref.bn_inference_variance(xa, ma, va, sa, ba, 1e-5), 1e-5)
        return
    inv = g.tensor(dims=(1, c, 1, 1), name="inv")
    ia = 1.0 / np.sqrt(va + 1e-5)
    dy = g.tensor(dims=x.dims, name="dy")
    dya = rng.standard_normal(x.dims).astype(np.float32)
    if pattern == "drelu_backward":
        z = g.batchnorm_inference(x, m, inv, s, b)
        gz = g.pointwise(z, dy, mode=hd.PointwiseMode.RELU_BWD)
        g_in = ref.relu_bwd(ref.bn_inference(xa, ma, ia, sa, ba), dya)
        dx, ds, db = g.batchnorm_backward(gz, x, s, mean=m, inv_variance=inv)
    else:
        g_in = dya
        dx, ds, db = g.batchnorm_backward(dy, x, s, mean=m, inv_variance=inv)
    for t in (dx, ds, db):
        t.set_output(True)
    ds.set_data_type("float32")
    db.set_data_type("float32")
    outs = {dx: np.empty(x.dims, np.float32), ds: mm("ds", np.nan), db: mm("db", np.nan)}
    pack = {x: xa, dy: dya, s: mm("s", sa), m: mm("m", ma), inv: mm("inv", ia), **outs}
    if pattern == "drelu_backward":
        pack[b] = mm("b", ba)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert str(plan.algorithm).startswith("bn_rows:"), plan.algorithm
    plan.execute_sync(pack)
    want = ref.bn_backward(g_in, xa, sa, ma, ia)
    close(outs[dx], want["dx"], 1e-4)
    close(outs[ds], want["dscale"], 1e-4)
    close(outs[db], want["dbias"], 1e-4)


@pytest.mark.parametrize("eps", [1e-77, 1e-50, 1e-37])
def test_bn_inference_epsilon_below_float32_normals_offers_no_onednn_primitive(dev, eps):
    # oneDNN's batchnorm and the binary inference take epsilon, and 1/sqrt(variance +
    # epsilon), in float32: below its smallest normal (1.18e-38) a constant channel's y
    # came out NaN (ncsp_bnorm at 1e-50, chosen by benchmarking); only the rows are offered
    from hipdnn_async.providers.cpu import _kernels
    g = hd.Graph(name="bn_tiny_eps")
    x = g.tensor(dims=(2, 3, 4, 4), layout="NCHW", name="x")
    m, v, s, b = (g.tensor(dims=(1, 3, 1, 1), name=n) for n in ("m", "v", "s", "b"))
    y = g.batchnorm_inference_variance_ext(x, m, v, s, b, epsilon=eps).set_output(True)
    xa = rand(x, 60)
    xa[:, 1] = 3.0                                            # a constant channel
    ma, va = xa.mean(axis=(0, 2, 3), keepdims=True), xa.var(axis=(0, 2, 3), keepdims=True)
    ma[0, 1], va[0, 1] = 3.0, 0.0
    sa, ba = np.full(s.dims, 2.0, np.float32), np.full(b.dims, 0.5, np.float32)
    want = ref.bn_inference_variance(xa, ma, va, sa, ba, eps)
    for knobs in ({}, {BENCH: 1}):
        plan = dev.build_sync(g, engine=ONEDNN, knobs=knobs)
        names = [n for n, _ in plan.algorithm.trials]
        if eps < np.finfo(np.float32).tiny:
            assert names == ["bn_rows:" + _kernels.bn_rows_isa("float32")], names
        else:
            assert len(names) > 1, names
        out = empty(y)
        plan.execute_sync({x: xa, m: ma, v: va, s: sa, b: ba, y: out})
        assert (out[:, 1] == 0.5).all(), out[:, 1]
        close(out, want, 1e-4)


@pytest.mark.parametrize("dims", [(4, 16, 5, 6), (2, 20, 3, 2, 2), (3, 5, 1, 1)])
def test_nchw_bn_inference_runs_one_binary_primitive(dev, dims):
    # plain layouts: oneDNN's batchnorm has only its generic ncsp_bnorm there, so the
    # default is one jit binary pass (x - mean) * a + bias on the user's memory; a
    # channel stride of 1 ((3, 5, 1, 1)) is not offered the binary (oneDNN 3.2's kernel
    # broadcasts its post-op operands wrongly there)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"oneDNN's jit kernels are x86-64's; this is {platform.machine()}")
    c = dims[1]
    layout = "NCHW" if len(dims) == 4 else "NCDHW"
    g = hd.Graph(name="bn_infer_nchw")
    x = g.tensor(dims=dims, layout=layout, name="x")
    chan = (1, c) + (1,) * (len(dims) - 2)
    m, v, s, b = (g.tensor(dims=chan, name=n) for n in ("m", "v", "s", "b"))
    y = g.batchnorm_inference_variance_ext(x, m, v, s, b, epsilon=1e-4)
    y.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    names = [n for n, _ in plan.algorithm.trials]
    if x.strides[1] == 1:
        assert not any(n.endswith("+binary") for n in names), names
    else:   # offered; the engine's C rows are the default on channels-first memory
        assert any(n.startswith("jit:") and n.endswith("+binary") for n in names), names
        assert str(plan.algorithm).startswith("bn_rows:")
    xa, ma, sa, ba = rand(x, 40), rand(m, 41), rand(s, 42), rand(b, 43)
    xa[...] = 1e4 + xa                        # a large mean: (x - mean) must come first
    ma += 1e4
    va = np.abs(rand(v, 44)) + 0.01
    ya = empty(y)
    plan.execute_sync({x: xa, m: ma, v: va, s: sa, b: ba, y: ya})
    close(ya, ref.bn_inference_variance(xa, ma, va, sa, ba, 1e-4), 2e-4)


# 1e-19, 1e-20: inv_variance ~ 1e19, 1e20; at 1e20 the factor of x - mean in dx, -scale *
# inv_variance**2 * dscale / M, is beyond FLT_MAX while dx (~1e20) is finite, so the rows take
# xhat = (x - mean) * inv_variance first there (it overflowed float32 once: dx +-inf)
@pytest.mark.parametrize("x_scale", [1.0, 1e21, 1e-19, 1e-20])
def test_bn_backward_offers_the_rows_alone(dev, x_scale):
    # oneDNN's batchnorm backward takes inv_variance as variance = 1 / inv_variance**2 in
    # float32: 0 or +inf beyond about 9.2e18 or below 5.4e-20 (a constant channel's
    # inv_variance at epsilon 1e-77 is 3.2e38), and its dx was all NaN there; the rows alone
    # are offered, benchmarking too, on packed NCHW and on a W-cropped copy
    from hipdnn_async.providers.cpu import _kernels
    for cropped in (False, True):
        g = hd.Graph(name="bnb_nchw")
        dims = (3, 20, 5, 5)
        strides = (20 * 5 * 7, 5 * 7, 7, 1) if cropped else hd.strides_for(dims, "NCHW")
        x = g.tensor(dims=dims, strides=strides, name="x")
        dy = g.tensor(dims=dims, strides=strides, name="dy")
        s, m, iv = (g.tensor(dims=(1, 20, 1, 1), name=n) for n in ("s", "m", "iv"))
        dx, ds, db = g.batchnorm_backward(dy, x, s, mean=m, inv_variance=iv)
        for t in (dx, ds, db):
            t.set_output(True)
        dx.set_strides(strides)
        xa, dya, sa = rand(x, 13) * np.float32(x_scale), rand(dy, 14), rand(s, 15)
        st = ref.bn_training(xa, np.ones(20), np.zeros(20), 0.0)     # inv_variance ~ 1/x_scale
        ma, iva = st["mean"].astype(np.float32), st["inv_variance"].astype(np.float32)
        want = ref.bn_backward(dya, xa, sa, ma, iva)
        if cropped:
            wide = np.full((3, 20, 5, 7), np.nan, np.float32)
            xw, dyw, dxw = wide.copy(), wide.copy(), wide.copy()
            xw[..., :5], dyw[..., :5] = xa, dya
            xa, dya, dxa = xw[..., :5], dyw[..., :5], dxw[..., :5]
        else:
            dxa = empty(dx)
        for knobs in ({}, {BENCH: 1}):
            plan = dev.build_sync(g, engine=ONEDNN, knobs=knobs)
            names = [n for n, _ in plan.algorithm.trials]
            assert names == ["bn_rows:" + _kernels.bn_rows_isa("float32")
                             + ("+dense" if cropped else "")], names
            outs = {ds: empty(ds), db: empty(db)}
            plan.execute_sync({x: xa, dy: dya, s: sa, m: ma, iv: iva, dx: dxa, **outs})
            for got, key in ((dxa, "dx"), (outs[ds], "dscale"), (outs[db], "dbias")):
                assert np.isfinite(got).all(), key
                close(got, want[key], 2e-3)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("pattern", ["inference", "training"])
def test_bn_on_channel_packed_pixels_in_another_order_runs_the_rows_on_dense_copies(
        dev, pattern, dtype):
    # x and y with H and W swapped and a gap after each pixel's C values (packed, the
    # pixels not at one stride): the rows on dense channels-last copies, inference too
    # (oneDNN offers only its reference ref:any there); the gaps untouched, the values the
    # float64 reference's
    from hipdnn_async.providers.cpu import _kernels
    n, c, h, w = 2, 5, 3, 4
    strides = (w * h * (c + 1), 1, c + 1, h * (c + 1))     # N, W, H, C (+ a gap)
    dt = "float32" if dtype == np.float32 else "bfloat16"
    g = hd.Graph(name="bn_nwhc", io_data_type=dt, intermediate_data_type="float32",
                 compute_data_type="float32")
    x = g.tensor(dims=(n, c, h, w), strides=strides, name="x")
    ch = {k: g.tensor(dims=(1, c, 1, 1), name=k, data_type="float32")
          for k in (("m", "v") if pattern == "inference" else ()) + ("s", "b")}
    if pattern == "inference":
        y = g.batchnorm_inference_variance_ext(x, ch["m"], ch["v"], ch["s"], ch["b"],
                                               epsilon=1e-5)
        stats = ()
    else:
        y, mean, inv, _, _ = g.batchnorm(x, ch["s"], ch["b"], epsilon=1e-5)
        stats = (mean.set_output(True), inv.set_output(True))
    y.set_output(True).set_strides(strides)
    xa = rand(x, 50, dtype)
    pack = {x: xa, **{t: rand(t, 51 + i) for i, t in enumerate(ch.values())}}
    if "v" in ch:
        pack[ch["v"]] = np.abs(pack[ch["v"]]) + 0.1
    v = {k: np.asarray(pack[t], np.float64) for k, t in ch.items()}
    x64 = np.asarray(xa, np.float64)
    want = (ref.bn_inference_variance(x64, v["m"], v["v"], v["s"], v["b"], 1e-5)
            if pattern == "inference" else ref.bn_training(x64, v["s"], v["b"], 1e-5)["y"])
    for knobs in ({}, {BENCH: 1}):
        plan = dev.build_sync(g, engine=ONEDNN, knobs=knobs)
        rows = "bn_rows:" + _kernels.bn_rows_isa(dt) + "+dense"
        names = [name for name, _ in plan.algorithm.trials]
        assert rows in names and (knobs or str(plan.algorithm) == rows), names
        ya = empty(y, dtype)                               # NaN, gaps included
        plan.execute_sync({**pack, y: ya, **{t: empty(t) for t in stats}})
        close(ya, want, 2e-2 if dtype != np.float32 else 2e-4)
        # the gaps: after each pixel's C values but the last (the buffer ends there)
        pixels = np.lib.stride_tricks.as_strided(ya, (n * w * h - 1, c + 1),
                                                 ((c + 1) * ya.itemsize, ya.itemsize))
        assert np.isnan(np.asarray(pixels[:, c], np.float32)).all()


# ------------------------------------------------------------------ HALF and strided activations
def test_half_runs_float32_primitives_on_workspace_copies(dev):
    # oneDNN 3.2 has f16 kernels only with AVX512-FP16 / AMX-FP16: HALF I/O runs float32
    # primitives on float32 copies, which are pieces of the plan's workspace
    g, x, w, y = fprop_graph("NHWC", hd.DataType.HALF, (2, 8, 9, 9), (8, 8, 3, 3), padding=1)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert plan.engine.name == ONEDNN and str(plan.algorithm).endswith("+f32")
    assert plan.workspace_size >= 4 * (np.prod(x.dims) + np.prod(y.dims))
    xa, wa = rand(x, 1, np.float16), rand(w, 2, np.float16)
    ya = empty(y, np.float16)
    plan.execute_sync({x: xa, w: wa, y: ya})
    want = ref.conv_fprop(xa, wa, (1, 1), (1, 1))
    close(ya, want, 2e-3)          # one f16 rounding of a float32 sum of 72 products


def test_strided_activations_run_on_dense_copies(dev):
    # a channel slice (8 of 12 channels) of an NHWC buffer: oneDNN's only implementation of
    # such strides is its reference one, so the primitive runs on a dense copy
    g = hd.Graph(name="slice")
    dims = (2, 8, 7, 7)
    x = g.tensor(dims=dims, strides=(7 * 7 * 12, 1, 7 * 12, 12), name="x")
    w = g.tensor(dims=(8, 8, 3, 3), layout="NHWC", name="w")
    y = g.conv_fprop(x, w, padding=1)
    y.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert "+dense" in str(plan.algorithm) and not str(plan.algorithm).startswith("ref:")
    xa, wa = rand(x, 3), rand(w, 4)
    ya = empty(y)
    plan.execute_sync({x: xa, w: wa, y: ya})
    close(ya, ref.conv_fprop(xa, wa, (1, 1), (1, 1)), 1e-4)


# ------------------------------------------------------------------ knobs and the perf db
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_workspace_knob_ranges_over_the_implementations(dev, layout):
    # NCHW: the +blocked variant's workspace holds its activation copies too
    g, x, w, y = fprop_graph(layout, x_dims=(2, 16, 14, 14), w_dims=(16, 16, 3, 3), padding=1)
    e = hd.engines(g, "cpu")[0]
    assert e.name == ONEDNN
    knob = e.knob(WS)
    assert knob.default == knob.max >= knob.min >= 0
    with pytest.raises(hd.KnobError):
        dev.build_sync(g, engine=ONEDNN, knobs={WS: knob.max + 1})
    for limit in (knob.min, knob.max):
        p = dev.build_sync(g, engine=ONEDNN, knobs={WS: limit})
        assert p.workspace_size <= limit
        xa, wa = rand(x), rand(w, 1)
        ya = empty(y)
        p.execute_sync({x: xa, w: wa, y: ya})
        close(ya, ref.conv_fprop(xa, wa, (1, 1), (1, 1)), 1e-4)
    if knob.min > 0:
        with pytest.raises(hd.KnobError):
            dev.build_sync(g, engine=ONEDNN, knobs={WS: knob.min - 1})


_SCRIPT = """
import json, sys, hipdnn_async as hd
g = hd.Graph(name="f")
x = g.tensor(dims=(2, 16, 10, 10), layout=sys.argv[1], name="x")
w = g.tensor(dims=(16, 16, 3, 3), layout=sys.argv[1], name="w")
g.conv_fprop(x, w, padding=1).set_output(True)
with hd.Device("cpu") as dev:
    p = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs={"global.benchmarking": 1})
    print(json.dumps({"b": p.benchmarked, "hit": p.perfdb_hit, "algo": str(p.algorithm),
                      "reason": p.algorithm.reason,
                      "trials": [n for n, _ in p.algorithm.trials]}))
"""


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_benchmark_is_kept_in_the_perf_db_for_a_new_process(tmp_path, layout):
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=str(tmp_path / "db.sqlite3"),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SCRIPT, layout], env=env,
                                      check=True, capture_output=True, text=True).stdout)
            for _ in range(2)]
    assert runs[0]["b"] and not runs[0]["hit"] and runs[0]["reason"].startswith("benchmarked")
    assert runs[1]["hit"] and not runs[1]["b"] and runs[1]["algo"] == runs[0]["algo"]
    # NCHW: every layout variant is timed (the user's, +nhwc and +blocked)
    variants = {n.rpartition("+")[2] if n.endswith(("+nhwc", "+blocked")) else "user"
                for n in runs[0]["trials"]}
    assert variants == ({"user"} if layout == "NHWC" else {"user", "nhwc", "blocked"}), runs[0]


def test_perf_key_names_cpu_isa_threads_and_version(dev):
    from hipdnn_async.providers.cpu.onednn import OnednnEngine
    impl = next(i for i in dev.provider._engine_impls() if isinstance(i, OnednnEngine))
    key = impl.perf_device()
    state = load_onednn()
    assert f"isa {state.isa}" in key and "oneDNN 3." in key and "threads" in key
    assert dev.provider.describe()["device"] in key


_TORCH_THREADS = """
import json, sys
first = sys.argv[1]
if first == "torch":
    import torch, hipdnn_async as hd
else:
    import hipdnn_async as hd, torch
from hipdnn_async.providers.cpu.onednn import OnednnEngine
from hipdnn_async.runtime import _onednn as dnnl, load_onednn
load_onednn()
with hd.Device("cpu") as dev:
    engine = next(i for i in dev.provider._engine_impls() if isinstance(i, OnednnEngine))
    before = (dnnl.max_threads(), engine.perf_device())
    torch.set_num_threads(1)
    after = (dnnl.max_threads(), engine.perf_device())
print(json.dumps({"before": before, "after": after, "at_load": load_onednn().threads}))
"""


@pytest.mark.parametrize("first", ["torch", "hipdnn_async"])
def test_torch_set_num_threads_sets_onednn_team_and_perf_key(first):
    """cpu.md's Threads section: PyTorch and oneDNN share one OpenMP runtime, whichever is
    imported first, so torch.set_num_threads sets the engine's team and its perf-db key;
    load_onednn().threads stays the count at load."""
    peer("torch", "torch shares the OpenMP runtime these threads are set in")
    if os.cpu_count() < 2:
        pytest.skip("one core: the team is 1 thread before and after")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OMP_NUM_THREADS", None)
    run = subprocess.run([sys.executable, "-c", _TORCH_THREADS, first], env=env, check=True,
                         capture_output=True, text=True)
    got = json.loads(run.stdout)
    (n0, key0), (n1, key1) = got["before"], got["after"]
    assert n0 >= 2 and n1 == 1, got
    assert key0.endswith(f"; {n0} threads") and key1.endswith("; 1 threads"), got
    assert got["at_load"] == n0, got


# ------------------------------------------------------------------ fallback and info
_FALLBACK = """
import json, numpy as np, hipdnn_async as hd
from hipdnn_async.runtime import load_onednn
g = hd.Graph(name="f")
x = g.tensor(dims=(1, 4, 5, 5), name="x")
w = g.tensor(dims=(4, 4, 1, 1), name="w")
y = g.conv_fprop(x, w)
y.set_output(True)
with hd.Device("cpu") as dev:
    p = dev.build_sync(g)
    ya = np.zeros(y.dims, np.float32)
    p.execute_sync({x: np.ones(x.dims, np.float32), w: np.ones(w.dims, np.float32), y: ya})
print(json.dumps({"engines": [e.name for e in hd.engines(g, "cpu")], "engine": p.engine.name,
                  "y": float(ya.max()), "reason": load_onednn().reason}))
"""


def test_a_library_that_is_not_onednn_is_refused_with_a_warning(tmp_path):
    bogus = tmp_path / "libdnnl.so.3"
    bogus.write_bytes(b"not an ELF file")
    env = dict(os.environ, HIPDNN_ASYNC_ONEDNN=str(bogus),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, check=True,
                         capture_output=True, text=True)
    assert json.loads(run.stdout)["engine"] == CPU
    assert f"HIPDNN_ASYNC_ONEDNN={bogus} does not load" in run.stderr, run.stderr
    strict = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", _FALLBACK],
                            env=env, capture_output=True, text=True)
    assert strict.returncode != 0 and "RuntimeWarning" in strict.stderr


def test_fallback_when_the_library_path_is_missing(tmp_path):
    missing = str(tmp_path / "nope" / "libdnnl.so.3")
    env = dict(os.environ, HIPDNN_ASYNC_ONEDNN=missing,
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, check=True,
                         capture_output=True, text=True)
    out = json.loads(run.stdout)
    assert out["engines"] == [CPU] and out["engine"] == CPU and out["y"] == 4.0
    assert f"HIPDNN_ASYNC_ONEDNN={missing} does not load" in out["reason"]
    # the path asked for did not load: said at first use, once, not only in the log
    assert run.stderr.count("RuntimeWarning") == 1, run.stderr
    assert f"HIPDNN_ASYNC_ONEDNN={missing} does not load" in run.stderr
    info = json.loads(subprocess.run([sys.executable, "-m", "hipdnn_async", "info"], env=env,
                                     check=True, capture_output=True, text=True).stdout)
    assert info["cpu"]["onednn"] is False and missing in info["cpu"]["reason"]
    # the advice is to fix the variable (the installed wheel is not tried for it)
    assert "unset HIPDNN_ASYNC_ONEDNN" in info["cpu"]["reason"]
    assert "pip install" not in info["cpu"]["reason"]


def test_info_shows_the_library():
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    info = json.loads(subprocess.run([sys.executable, "-m", "hipdnn_async", "info"], env=env,
                                     check=True, capture_output=True, text=True).stdout)["cpu"]
    state = load_onednn()
    assert info["onednn"] is True and info["path"] == state.record.path
    assert info["version"] == ".".join(map(str, state.version[:3])) and info["isa"] == state.isa
    assert info["threads"] >= 1 and info["engines"] == [ONEDNN, CPU]
    # the build of the batchnorm rows, by the CPU's own flags (Linux: /proc/cpuinfo)
    rows = info["batchnorm_rows"]
    assert set(rows) == {"float32", "bfloat16", "float16"}
    assert set(rows.values()) <= {"avx512", "avx512_auto", "avx2", "avx2_auto", "baseline"}
    flags = _cpu_flags()
    if flags is not None and platform.machine().lower() in ("x86_64", "amd64"):
        avx512 = {"avx512f", "avx512bw", "avx512vl"} <= flags
        narrower = "avx2_auto" if {"avx2", "fma"} <= flags else "baseline"
        # the AVX2 intrinsics (float32, bfloat16), where this build has them (GCC >= 10,
        # clang)
        avx2 = "avx2" if narrower == "avx2_auto" and "avx2" in bn_rows_builds() else narrower
        assert rows["float32"] == ("avx512" if avx512 else avx2)
        assert rows["bfloat16"] == ("avx512" if avx512 and "avx512_bf16" in flags
                                    else "avx512_auto" if avx512 else avx2)
        assert rows["float16"] == ("avx512" if avx512 else narrower)


def _cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo, or None where it is not readable."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


# ------------------------------------------------------------------ submit path, constants
def test_launcher_is_a_c_callable_that_counts(dev):
    from hipdnn_async.runtime import ExecCounter, _onednn
    g, x, w, y = fprop_graph(x_dims=(1, 8, 8, 8), w_dims=(8, 8, 1, 1))
    plan = dev.build_sync(g, engine=ONEDNN)
    pplan = plan._pplan
    xa, wa, ya = rand(x), rand(w, 1), empty(y)
    buffers = {"x": xa, "w": wa, "y": ya}
    ws = np.empty(pplan.workspace_size, np.uint8) if pplan.workspace_size else None
    counter = ExecCounter()
    fn = pplan.launcher(buffers, ws, counter=counter, label="plan X")
    assert isinstance(fn, _onednn.Launch)
    fn()
    fn()
    assert counter.executions == 2 and counter.host_ns > 0
    close(ya, ref.conv_fprop(xa, wa), 1e-5)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_constant_weights_are_reordered_once(dev, layout):
    # NCHW: the +blocked variant (activations reordered in and out around the frozen weights)
    g, x, w, y = fprop_graph(layout, x_dims=(2, 16, 8, 8), w_dims=(16, 16, 3, 3), padding=1)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert ("+blocked" in str(plan.algorithm)) == (layout == "NCHW"), plan.algorithm
    xa, wa = rand(x), rand(w, 1)
    before = empty(y)
    plan.execute_sync({x: xa, w: wa, y: before})
    if not plan.reorder_constants({w: wa}):
        pytest.skip(f"{plan.algorithm} reads the user's weights layout: nothing to reorder")
    after = empty(y)
    plan.execute_sync({x: xa, w: wa, y: after})
    assert np.array_equal(before, after)
    wa[...] = 0                  # not seen: the reordered copy is what runs now
    plan.execute_sync({x: xa, w: wa, y: after})
    assert np.array_equal(before, after)


def test_a_plan_with_a_pooled_workspace_reuses_its_binding_with_a_fresh_workspace(dev):
    """A small pack of a plan that needs a workspace (none passed) binds once: later
    executions hit the binding cache, each with a workspace of its own from the pool, and
    see the pack's values as they are at each execution."""
    g, x, w, y = fprop_graph(x_dims=(1, 8, 8, 8), w_dims=(8, 8, 1, 1))
    plan = dev.build_sync(g, engine=ONEDNN)
    assert plan.workspace_size > 0, plan.workspace_size
    xa, wa, ya = rand(x), rand(w, 1), empty(y)
    pack = {x: xa, w: wa, y: ya}
    cache = plan._bindings
    misses = cache.misses
    for i in range(20):
        xa[...] = rand(x, 100 + i)
        plan.execute_sync(pack)
        close(ya, ref.conv_fprop(xa, wa), 1e-5)
    assert cache.misses == misses + 1 and cache.hits >= 19
    (entry,) = cache._entries
    assert entry.fresh_ws and entry.workspace is None      # the cache keeps no workspace
    assert entry.template is not None     # no host hooks: hits copy the launch in C
    first, second = cache.get(pack, None), cache.get(pack, None)
    assert first.workspace is not second.workspace
    assert first.workspace.nbytes == second.workspace.nbytes == plan.workspace_size
    # the two copies run on their own workspaces, each giving the float64 answer
    for b in (first, second):
        xa[...] = rand(x, 7 + (b is second))
        ya[...] = np.nan
        b.fn()
        close(ya, ref.conv_fprop(xa, wa), 1e-5)
    with pytest.raises(ValueError, match="workspace of 8 bytes"):
        entry.template.with_workspace(np.empty(8, np.uint8))


def test_a_launch_whose_hooks_may_read_the_workspace_is_not_copied():
    """A launch with host hooks is copied onto another workspace only where they are
    marked not to read it (``hooks_read_ws=False``: the ReLU pass after a convolution,
    the batchnorm rows); by default it is made anew for each fresh workspace, and a
    copy calls the same hooks."""
    from hipdnn_async.runtime import _onednn

    g, x, w, y = fprop_graph(x_dims=(1, 8, 8, 8), w_dims=(8, 8, 1, 1))
    plan = hd.Device("cpu", streams=1).build_sync(g, engine=ONEDNN)
    program = plan._pplan.program
    pack = {x: rand(x), w: rand(w, 1), y: empty(y)}
    arrays = plan._pplan._arrays(plan._bind(pack, None)[0])
    calls = []
    hook = lambda: calls.append(1)          # noqa: E731
    assert _onednn.Launch(program, arrays, None, None, None, hook).with_workspace(None) is None
    ws = np.empty(plan.workspace_size, np.uint8)
    copy = _onednn.Launch(program, arrays, None, None, None, None, hook,
                          hooks_read_ws=False).with_workspace(ws)
    pack[y][...] = np.nan
    copy()
    assert calls == [1]
    close(pack[y], ref.conv_fprop(pack[x], pack[w]), 1e-5)



def test_a_large_batchnorm_pack_reuses_its_binding_without_keeping_it_alive(dev):
    """A 3 MB batchnorm-backward pack (past the 1 MiB a cached host binding may keep
    alive) hits the binding cache by reference: results follow in-place edits (float64
    reference), and the arrays are freed while the plan and device live on."""
    import gc
    import weakref
    plan, pack, tensors = _bn_backward(dev, (8, 64, 14, 14))
    x, dy = tensors[:2]
    cache = plan._bindings
    hits, misses = cache.hits, cache.misses
    for i in range(3):
        pack[dy][...] = rand(dy, 20 + i)      # in place: the same pack object each time
        plan.execute_sync(pack)
        _check_bn_backward(pack, tensors)
    assert cache.misses == misses + 1 and cache.hits == hits + 2
    assert cache._entries[0].recipe is not None and cache._entries[0].buffers is None
    refs = [weakref.ref(pack[t]) for t in (x, dy)]
    del pack
    gc.collect()
    assert all(r() is None for r in refs), "the binding cache kept the pack alive"


def test_reorder_constants_drops_the_cached_bindings(dev):
    g, x, w, y = fprop_graph(x_dims=(1, 16, 8, 8), w_dims=(16, 16, 3, 3), padding=1)
    plan = dev.build_sync(g, engine=ONEDNN)
    xa, wa, ya = rand(x), rand(w, 1), empty(y)
    pack = {x: xa, w: wa, y: ya}
    plan.execute_sync(pack)
    assert plan._bindings._entries
    if not plan.reorder_constants({w: wa}):
        pytest.skip(f"{plan.algorithm} reads the user's weights layout: nothing to reorder")
    assert not plan._bindings._entries
    want = ref.conv_fprop(xa, wa, (1, 1), (1, 1))
    wa[...] = 0                  # the same pack again: the reordered copy runs, not wa
    plan.execute_sync(pack)
    close(ya, want, 1e-4)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_reorder_constants_reaches_no_other_plan_of_an_equal_graph(dev, layout):
    """Plans of equal graphs share one provider plan (the device's plan cache); constants
    reordered through one of them reach that plan only. The other plan, and a plan built
    later, keep giving the float64 convolution of the weights they are given. Was: the
    other plan's cached pack failed with a ValueError (its launch template on a workspace
    sized for the prepared program), and a new pack silently ran on the first plan's
    weights."""
    def graph():
        return fprop_graph(layout, x_dims=(1, 32, 16, 16), w_dims=(32, 32, 3, 3), padding=1)

    g1, x1, w1, y1 = graph()
    g2, x2, w2, y2 = graph()
    p1, p2 = dev.build_sync(g1, engine=ONEDNN), dev.build_sync(g2, engine=ONEDNN)
    xa, wa, wb = rand(x1), rand(w1, 1), rand(w1, 2)
    pack2 = {x2: xa, w2: wb, y2: empty(y2)}
    p2.execute_sync(pack2)                       # cached by p2
    if not p1.reorder_constants({w1: wa}):
        pytest.skip(f"{p1.algorithm} reads the user's weights layout: nothing to reorder")
    want_a = ref.conv_fprop(xa, wa, (1, 1), (1, 1))
    want_b = ref.conv_fprop(xa, wb, (1, 1), (1, 1))
    pack2[y2][...] = np.nan
    p2.execute_sync(pack2)                       # the cached pack
    close(pack2[y2], want_b, 1e-4)
    yb = empty(y2)
    p2.execute_sync({x2: xa, w2: wb, y2: yb})    # a new pack
    close(yb, want_b, 1e-4)
    g3, x3, w3, y3 = graph()
    yc = empty(y3)
    dev.build_sync(g3, engine=ONEDNN).execute_sync({x3: xa, w3: wb, y3: yc})
    close(yc, want_b, 1e-4)
    ya = empty(y1)
    p1.execute_sync({x1: xa, w1: np.zeros_like(wa), y1: ya})   # p1 reads its reordered wa
    close(ya, want_a, 1e-4)


def test_a_template_on_a_changed_program_is_made_anew(dev):
    """A thread whose hit comes between ``reorder_constants``'s new provider plan and its
    dropping the plan's bindings takes a workspace sized for the new program with the
    binding's template of the old one: the launch is made anew from the plan as it is, and
    the execution gives the float64 convolution (was: a ValueError naming the workspace).
    The window is opened here by setting the new provider plan alone."""
    import copy
    g, x, w, y = fprop_graph("NCHW", x_dims=(1, 32, 16, 16), w_dims=(32, 32, 3, 3), padding=1)
    plan = dev.build_sync(g, engine=ONEDNN)
    pack = {x: rand(x), w: rand(w, 1), y: empty(y)}
    plan.execute_sync(pack)
    (entry,) = plan._bindings._entries
    if entry.template is None:
        pytest.skip(f"{plan.algorithm}: no pooled workspace, no template here")
    prepared = copy.copy(plan._pplan)
    if not prepared.reorder_constants(plan._bind(pack, None)[0]):
        pytest.skip(f"{plan.algorithm} reads the user's weights layout: nothing to reorder")
    if prepared.workspace_size >= plan.workspace_size:
        pytest.skip("the prepared program needs no less workspace: the template fits")
    plan._pplan = prepared                       # what reorder_constants does before clear()
    pack[y][...] = np.nan
    plan.execute_sync(pack)
    close(pack[y], ref.conv_fprop(pack[x], pack[w], (1, 1), (1, 1)), 1e-4)


def test_two_batchers_of_one_graph_serve_their_own_weights():
    """Two DynamicBatchers of equal graphs with different constant weights on one device
    (two models of one architecture): each serves the float64 convolution of its own
    weights. Was: the second batcher's reordered weights reached the first one's plan,
    which then served them, silently."""
    import anyio

    def graph():
        g = hd.Graph(io_data_type=hd.DataType.FLOAT)
        x = g.tensor(dims=(1, 16, 12, 12), layout="NCHW", name="x")
        w = g.tensor(dims=(16, 16, 3, 3), layout="NCHW", name="w")
        g.conv_fprop(x, w, padding=1).set_output(True)
        return g

    rng = np.random.default_rng(7)
    wa, wb = (rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float32) for _ in range(2))
    req = rng.uniform(-1, 1, (1, 16, 12, 12)).astype(np.float32)
    got = {}

    async def main():
        async with hd.Device("cpu") as d:
            async with hd.DynamicBatcher(d, graph(), constants={"w": wa}, max_batch_size=4) as a, \
                    hd.DynamicBatcher(d, graph(), constants={"w": wb}, max_batch_size=4) as b:
                got["a"] = await a(req)
                got["b"] = await b(req)
                got["a2"] = await a(req)

    anyio.run(main)
    close(got["a"], ref.conv_fprop(req, wa, (1, 1), (1, 1)), 1e-4)
    close(got["b"], ref.conv_fprop(req, wb, (1, 1), (1, 1)), 1e-4)
    close(got["a2"], ref.conv_fprop(req, wa, (1, 1), (1, 1)), 1e-4)


def test_streams_share_one_plan_without_mixing_buffers():
    """Executions of one plan on two streams at once (each with its own arrays and
    workspace) give each its own result: the program's data handles are set under the
    process-wide oneDNN gate, so a run never sees another's pointers."""
    g, x, w, y = fprop_graph(x_dims=(2, 16, 12, 12), w_dims=(16, 16, 3, 3), padding=1)
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g, engine=ONEDNN)
        packs = []
        for i in range(8):
            packs.append({x: rand(x, 20 + i), w: rand(w, 40 + i), y: empty(y)})
        handles = [plan.submit(p, stream=i % 2) for i, p in enumerate(packs)]
        for h in handles:
            h.result(timeout=60)
    for p in packs:
        close(p[y], ref.conv_fprop(p[x], p[w], (1, 1), (1, 1)), 1e-4)


def _offset_bn_training(dev, dims, layout, dtype, offset, seed):
    """Batchnorm training of x = offset + N(0, 1) (dims (N, C, H, W) in ``layout`` memory):
    the plan runs the rows, and mean and inv_variance (rtol 1e-6 / 1e-5) and y (the
    tolerance table's batchnorm-training bound) match float64."""
    dt = getattr(hd.DataType, {"float32": "FLOAT", "bfloat16": "BFLOAT16",
                               "float16": "HALF"}[dtype])
    npdt = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    c = dims[1]
    g = hd.Graph(name="bn_offset", io_data_type=dt)
    x = g.tensor(dims=dims, layout=layout, name="x")
    s, b = (g.tensor(dims=(1, c, 1, 1), name=k, data_type=hd.DataType.FLOAT)
            for k in ("s", "b"))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=1e-5)
    for t in (y, mean, inv):
        t.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert str(plan.algorithm).startswith("bn_rows:"), (str(plan.algorithm),
                                                          plan.algorithm.trials)
    nhwc = layout == "NHWC"
    physical = (dims[0],) + dims[2:] + (c,) if nhwc else dims
    xm = (offset + np.random.default_rng(seed).standard_normal(physical)).astype(npdt)
    ym = np.empty_like(xm)
    got_mean, got_inv = np.empty((1, c, 1, 1), np.float32), np.empty((1, c, 1, 1), np.float32)
    plan.execute_sync({x: xm, s: np.ones((1, c, 1, 1), np.float32),
                       b: np.zeros((1, c, 1, 1), np.float32), y: ym, mean: got_mean,
                       inv: got_inv})
    x64 = xm.astype(np.float64)
    x64, y64 = ((a.transpose(0, 3, 1, 2) for a in (x64, ym.astype(np.float64))) if nhwc
                else (x64, ym.astype(np.float64)))
    want_mean = x64.mean(axis=(0, 2, 3))
    want_inv = 1 / np.sqrt(x64.var(axis=(0, 2, 3)) + 1e-5)
    np.testing.assert_allclose(got_mean.ravel(), want_mean, rtol=1e-6)
    np.testing.assert_allclose(got_inv.ravel(), want_inv, rtol=1e-5)
    want_y = (x64 - want_mean[:, None, None]) * want_inv[:, None, None]
    tol = {"float32": 4e-3, "bfloat16": 8e-3, "float16": 4e-3}[dtype]
    assert np.all(np.abs(y64 - want_y) <= tol + tol * np.abs(want_y))


@pytest.mark.parametrize("dims", [(32, 64, 56, 56), (16, 136, 40, 40)], ids=["c64", "c136"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_channels_last_bn_keeps_the_rows_out_of_the_caches(dev, dtype, dims):
    # channels-last training of 13-25 MB of float32 x: the rows, not oneDNN's jit
    # batchnorm, whose float32 sums missed the FLOAT tolerance on x = 1000 + N(0, 1) at
    # 32 x 64 x 56 x 56 (y off by 5.8e-3 against 4e-3); the rows match float64, with the
    # per-channel operands in registers (C <= 64) and, past 8 MiB, pixel by pixel (C > 64)
    _offset_bn_training(dev, dims, "NHWC", dtype, 1000 if dtype == "float32" else 100, 7)


@pytest.mark.parametrize("dtype,c", [("float32", 3), ("bfloat16", 17)])
def test_channels_last_bn_without_a_jit_kernel_runs_the_rows(dev, dtype, c):
    # channels-last training over 8 MiB where oneDNN 3.2 has no jit batchnorm for the
    # channel count (its generic nspc_bnorm only): the rows run, and the statistics of x
    # = 1000 + N(0, 1) match float64 (nspc_bnorm's float32 sums gave a mean off by about
    # 10, y off by about 1)
    side = {"float32": 954, "bfloat16": 567}[dtype]      # x just past 8 MiB
    _offset_bn_training(dev, (1, c, side, side), "NHWC", dtype, 1000, 5)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bn_single_channel_runs_the_rows(dev, layout):
    # C = 1: oneDNN 3.2 has only its generic ncsp_bnorm, whose float32 sums lost the mean
    # of x = 1000 + N(0, 1) over 2^20 values (y off by about 1); the rows match float64
    _offset_bn_training(dev, (16, 1, 256, 256), layout, "float32", 1000, 6)


_CANDIDATES = r"""
import json, sys
import hipdnn_async as hd

def names(layout, bench):
    g = hd.Graph(name="fprop", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 16, 9, 9), layout=layout, name="x")
    w = g.tensor(dims=(16, 16, 3, 3), layout=layout, name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs={"global.benchmarking": bench})
        return [n for n, _ in plan.algorithm.trials] if bench else None

if sys.argv[1] == "after":
    names("NCHW", 1)            # runs the +nhwc copies' implementations: same descriptors
print(json.dumps(names("NHWC", 1)))
"""


def test_candidates_do_not_depend_on_earlier_builds(tmp_path):
    """An NHWC convolution offers the same implementations in a fresh process as after a
    benchmarked NCHW one of the same shape ran its channels-last copies (oneDNN 3.2's
    primitive cache answered those descriptors' first implementations again, so the walk
    listed every implementation twice: ``#2`` names a new process cannot find in the perf
    db, and twice the benchmarking time)."""
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=":memory:",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    fresh, after = (json.loads(subprocess.run([sys.executable, "-c", _CANDIDATES, how], env=env,
                                              check=True, capture_output=True,
                                              text=True).stdout)
                    for how in ("fresh", "after"))
    assert len(set(fresh)) == len(fresh)
    assert after == fresh


def test_host_hooks_of_compiled_kernels_run_without_errstate_and_others_with_it():
    """``_plan.quiet``: a hook marked ``compiled_only`` (the batchnorm rows on dense
    copies) or a ``partial`` of a quiet kernel (the batchnorm rows themselves) is run as it
    is (no NumPy warning can come from C); any
    other hook runs under ``np.errstate(all="ignore")``, so a NumPy overflow in it warns
    nothing (pytest turns warnings into errors here)."""
    from functools import partial
    from hipdnn_async.providers.cpu import _kernels
    from hipdnn_async.providers.cpu.onednn._plan import quiet

    def marked():
        pass
    marked.compiled_only = True
    kernel = partial(_kernels.bias_relu)
    assert quiet(marked) is marked and quiet(kernel) is kernel
    seen = {}

    def numpy_hook():
        seen["state"] = np.geterr()
        seen["value"] = np.float32(3e38) * np.float32(10)       # overflows: no warning
    wrapped = quiet(numpy_hook)
    assert wrapped is not numpy_hook
    wrapped()
    assert seen["state"]["over"] == "ignore" and seen["value"] == np.inf
    plan, pack, _ = _bn_backward(hd.Device("cpu", streams=1), (2, 8, 3, 3))
    before, after = plan._pplan._host_work(plan._bind(pack, None)[0], None)
    assert isinstance(before, partial) and before.func is _kernels.bn_rows and after is None
    assert quiet(before) is before


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_repeated_training_pack_reuses_its_whole_launch(dev, layout):
    """Batchnorm training on the rows needs no workspace (its variance vector is made
    per execution), so a repeated pack hits a binding that keeps its launch: each
    execution still gives the float64 batch statistics, y and running statistics of the
    values it is given (the running pair updated in place, execution after execution)."""
    c, dims, eps, mom = 6, (2, 6, 3, 4), 1e-5, 0.1
    g = hd.Graph(name="bnt")
    x = g.tensor(dims=dims, layout=layout, name="x")
    s, b, rm, rv = (g.tensor(dims=(1, c, 1, 1), name=n) for n in ("s", "b", "rm", "rv"))
    y, mean, inv, nrm, nrv = g.batchnorm(x, s, b, epsilon=eps, momentum=mom,
                                         prev_running_mean=rm, prev_running_variance=rv)
    for t in (y, mean, inv, nrm, nrv):
        t.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert plan.algorithm.startswith("bn_rows") and plan.workspace_size == 0
    pack = {x: rand(x, 1), s: rand(s, 2), b: rand(b, 3), rm: rand(rm, 4),
            rv: np.abs(rand(rv, 5)) + 0.5, **{t: empty(t) for t in (y, mean, inv)}}
    pack[nrm], pack[nrv] = pack[rm], pack[rv]          # updated in place
    cache = plan._bindings
    for i in range(3):
        pack[x][...] = rand(x, 10 + i)
        run_m, run_v = pack[rm].astype(np.float64), pack[rv].astype(np.float64)
        plan.execute_sync(pack)
        want = ref.bn_training(pack[x], pack[s], pack[b], eps)
        close(pack[y], want["y"], 1e-4)
        close(pack[mean], want["mean"], 1e-5)
        close(pack[inv], want["inv_variance"], 1e-4)
        m = dims[0] * dims[2] * dims[3]
        var = pack[x].astype(np.float64).var(axis=(0, 2, 3)).reshape(1, c, 1, 1)
        close(pack[nrm], (1 - mom) * run_m + mom * want["mean"], 1e-5)
        close(pack[nrv], (1 - mom) * run_v + mom * var * m / (m - 1), 1e-5)
    (entry,) = cache._entries
    assert cache.hits == 2 and not entry.fresh_ws and entry.fn is not None


def test_a_conv_bias_relu_with_its_relu_pass_copies_its_launch_per_workspace(dev):
    """Past the small sizes the ReLU runs as a compiled pass after the primitive (a host
    hook that reads only y): a repeated pack with a pooled workspace hits a binding that
    keeps a template of the launch, hook included, and each execution gives the float64
    conv + bias + ReLU of its values."""
    g = hd.Graph(name="cbr")
    x = g.tensor(dims=(1, 64, 32, 32), layout="NHWC", name="x")
    w = g.tensor(dims=(64, 64, 3, 3), layout="NHWC", name="w")
    b = g.tensor(dims=(1, 64, 1, 1), name="b")
    y = g.pointwise(g.pointwise(g.conv_fprop(x, w, padding=1), b, mode=hd.PointwiseMode.ADD),
                    mode=hd.PointwiseMode.RELU_FWD)
    y.set_output(True)
    plan = dev.build_sync(g, engine=ONEDNN)
    if plan.workspace_size == 0 or "+relu" in plan.algorithm:
        pytest.skip(f"{plan.algorithm}: no pooled workspace or no separate ReLU pass here")
    pack = {x: rand(x, 5), w: rand(w, 6), b: rand(b, 7), y: empty(y)}
    for i in range(3):
        pack[x][...] = rand(x, 20 + i)
        pack[y][...] = np.nan
        plan.execute_sync(pack)
        close(pack[y], ref.relu(ref.conv_fprop(pack[x], pack[w], pre=1, post=1)
                                + pack[b].astype(np.float64)), 1e-4)
    (entry,) = plan._bindings._entries
    assert entry.fresh_ws and entry.template is not None
