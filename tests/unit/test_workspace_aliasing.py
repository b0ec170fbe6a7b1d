"""A workspace given with ``workspace=`` owns its memory (issue 10, "no data is lost").

The execution writes its workspace, so a workspace that overlaps a buffer of the variant
pack (input or output) used to overwrite the user's data silently; now it is a
``VariantPackError`` at submit naming the workspace and the tensor. Results are checked
against a float64 convolution computed here with NumPy.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import hipdnn_async as hd


def conv_plan(dev):
    g = hd.Graph(name="wsalias", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 3, 8, 8), name="x")
    w = g.tensor(dims=(4, 3, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    y.set_name("y")
    plan = dev.build_sync(g)
    assert plan.workspace_size > 0                 # im2col: the case has a workspace
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, x.dims).astype(np.float32)
    W = rng.uniform(-1, 1, w.dims).astype(np.float32)
    return plan, X, W


def reference(X, W):
    """Cross-correlation, padding 1, stride 1, in float64."""
    xp = np.pad(X.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((X.shape[0], W.shape[0]) + X.shape[2:])
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 8, s:s + 8], W[:, :, r, s])
    return out


@pytest.fixture
def dev():
    with hd.Device("cpu", streams=1) as d:
        yield d


def test_workspace_overlapping_an_input_is_refused_and_the_input_kept(dev):
    plan, X, W = conv_plan(dev)
    ws = plan.workspace_size
    buf = np.zeros(X.size + ws // 4 + 1, np.float32)
    Xv = buf[:X.size].reshape(X.shape)
    Xv[:] = X
    Y = np.zeros((2, 4, 8, 8), np.float32)
    with pytest.raises(hd.VariantPackError,
                       match=r"the workspace given with workspace= .* shares memory with "
                             r"tensor 'x'"):
        asyncio.run(plan.execute({"x": Xv, "w": W, "y": Y}, workspace=buf.view(np.uint8)[:ws]))
    with pytest.raises(hd.VariantPackError, match="workspace.*tensor 'x'"):
        plan.submit({"x": Xv, "w": W, "y": Y}, workspace=buf.view(np.uint8)[:ws])
    with pytest.raises(hd.VariantPackError, match="workspace.*tensor 'x'"):
        plan.execute_sync({"x": Xv, "w": W, "y": Y}, workspace=buf.view(np.uint8)[:ws])
    np.testing.assert_array_equal(Xv, X)           # nothing ran, nothing was lost
    assert dev.metrics()["submitted"] == 0


def test_workspace_overlapping_an_output_is_refused(dev):
    plan, X, W = conv_plan(dev)
    ws = plan.workspace_size
    buf = np.zeros(2 * 4 * 8 * 8 + ws // 4 + 1, np.float32)
    Y = buf[-2 * 4 * 8 * 8:].reshape(2, 4, 8, 8)   # the workspace's tail is y's head
    with pytest.raises(hd.VariantPackError, match=r"shares memory with tensor 'y'.*role y"):
        plan.execute_sync({"x": X, "w": W, "y": Y}, workspace=buf.view(np.uint8)[:ws + 8])


def test_adjacent_workspace_is_accepted_and_results_are_correct(dev):
    plan, X, W = conv_plan(dev)
    ws = -(-plan.workspace_size // 4) * 4
    buf = np.zeros(X.size + ws // 4 + 2 * 4 * 8 * 8, np.float32)
    Xv = buf[:X.size].reshape(X.shape)
    Xv[:] = X
    Y = buf[X.size + ws // 4:].reshape(2, 4, 8, 8)
    wsbuf = buf.view(np.uint8)[X.size * 4:X.size * 4 + ws]   # between x and y, touching both
    vp = {"x": Xv, "w": W, "y": Y}
    for _ in range(2):                                       # again: the memoised fast path
        asyncio.run(plan.execute(vp, workspace=wsbuf))
        np.testing.assert_array_equal(Xv, X)
        np.testing.assert_allclose(Y, reference(X, W), rtol=1e-5, atol=1e-5)
    # same buffers, a new (overlapping) workspace object: checked again
    with pytest.raises(hd.VariantPackError, match="workspace.*tensor 'x'"):
        plan.execute_sync(vp, workspace=buf.view(np.uint8)[:ws])
    np.testing.assert_array_equal(Xv, X)


# ---- running statistics updated in place (next_running_* bound to prev_running_*)
from oracle import test_patterns as _tp          # noqa: E402
from oracle._cases import assert_close as _close  # noqa: E402


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"),
                                          ("bfloat16", "NDHWC")])
def test_running_statistics_may_be_updated_in_place(cpu_device, dtype, layout):
    # PyTorch keeps running_mean / running_var and updates them in place; two executions
    # chain: the second starts from the first's statistics (float64 reference)
    plan, checks = _tp.bn_training_in_place(cpu_device, dtype, layout, rounds=2)
    assert len(checks) == 6
    for label, got, want, (atol, rtol) in checks:
        _close(got, want, atol, rtol, f"{dtype} {layout} {label}")


def _bn_in_place_pack(dev):
    h = _tp.Harness("float32", "NCHW", name="bn_alias")
    _tp.build_bn_training(h, 4, np.random.default_rng(5))
    h._alloc_outputs()
    plan = dev.build_sync(h.g)
    return plan, dict(h.pack)


def test_a_running_statistic_aliasing_another_tensor_is_still_refused(cpu_device):
    plan, pack = _bn_in_place_pack(cpu_device)
    pack["next_running_mean"] = pack["prev_running_variance"]          # the wrong one
    with pytest.raises(hd.VariantPackError, match=r"role next_running_mean\) shares memory "
                                                  r"with tensor 'prev_running_variance'"):
        plan.execute_sync(pack)
    plan, pack = _bn_in_place_pack(cpu_device)
    pack["y"] = pack["x"]                                              # not a statistic
    with pytest.raises(hd.VariantPackError, match=r"role y\) shares memory with tensor 'x'"):
        plan.execute_sync(pack)


def test_a_partial_overlap_of_a_running_statistic_is_refused(cpu_device):
    plan, pack = _bn_in_place_pack(cpu_device)
    c = pack["prev_running_mean"].shape[1]
    base = np.zeros(c + 1, np.float32)
    pack["prev_running_mean"] = base[:c].reshape(1, c, 1, 1)
    pack["next_running_mean"] = base[1:].reshape(1, c, 1, 1)          # shifted by one
    with pytest.raises(hd.VariantPackError, match=r"role next_running_mean\) shares memory"):
        plan.execute_sync(pack)
