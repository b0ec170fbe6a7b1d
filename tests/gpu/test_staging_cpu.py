"""The GPU suite's own machinery, checked on the CPU (no GPU needed, not marked gpu).

``Harness.run(dev, stage=True)`` and ``Harness.arun`` copy every buffer through
``dev.empty`` + ``copy_from`` / ``await dev.asarray`` and read outputs back with
``to_numpy_sync`` / ``await to_numpy()``: the path every GPU case takes. On the CPU device
those are host DeviceArrays, so a staging bug shows here, as a difference from the direct
NumPy run (bitwise: same algorithm, same values) or from the float64 reference. The torch
expressions the GPU peer test uses for dgrad and wgrad are checked against the NumPy
references here too.
"""
from __future__ import annotations

import numpy as np
import pytest
from _peers import peer

from oracle import _reference as ref
from oracle import test_patterns as tp
from oracle._cases import DTYPES, LAYOUTS, Harness, assert_close, rank_of

import hipdnn_async as hd

CASES = [(p, dt, lay) for p in tp.PATTERNS for dt, lay in zip(
    DTYPES * 2, ("NHWC", "NCHW", "NHWC_nonpacked", "NDHWC", "NCDHW", "NCDHW_nonpacked"))]


@pytest.fixture(scope="module")
def cpu():
    with hd.Device("cpu") as dev:
        yield dev


def _case(pattern, dtype, layout):
    rng = np.random.default_rng([7, sorted(tp.PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    h = Harness(dtype, layout, name=f"staging_{pattern}")
    checks = tp.PATTERNS[pattern](h, rank_of(layout), rng)
    return h, checks


@pytest.mark.parametrize("pattern,dtype,layout", CASES, ids=["-".join(c) for c in CASES])
def test_staged_run_equals_direct_run(cpu, pattern, dtype, layout):
    h, checks = _case(pattern, dtype, layout)
    direct = {k: np.array(v) for k, v in h.run(cpu).items()}     # host path: NumPy bound
    assert not h.staged
    staged = h.run(cpu, stage=True)
    assert set(h.staged) == set(h.pack)
    for name, t in h.outputs.items():
        arr = h.staged[name]
        assert isinstance(arr, hd.DeviceArray)
        assert arr.dims == tuple(t.dims) and arr.strides == tuple(t.strides)
        assert staged[name].flags.c_contiguous and staged[name].shape == tuple(t.dims)
        np.testing.assert_array_equal(staged[name], direct[name], err_msg=name)
    for name, want, (atol, rtol) in checks:
        assert_close(staged[name], want, atol, rtol, f"staged {pattern} {dtype} {layout} {name}")


@pytest.mark.anyio
@pytest.mark.parametrize("layout", ["NHWC", "NCDHW", "NHWC_nonpacked"])
@pytest.mark.parametrize("pattern", ["CONV_WGRAD", "BN_TRAINING", "CONV_FPROP_BIAS_RELU"])
async def test_awaited_staged_run(cpu, pattern, layout, anyio_backend):
    h, checks = _case(pattern, "float16", layout)
    got = await h.arun(cpu)
    assert set(h.staged) == set(h.pack)
    for name, want, (atol, rtol) in checks:
        assert_close(got[name], want, atol, rtol, f"awaited {pattern} {layout} {name}")


def test_packed_layout_detection():
    h = Harness("float32", "NHWC")
    x = h.input("x", np.zeros((2, 3, 4, 5)))
    s = h.float_input("scale", np.zeros((1, 3, 1, 1)))
    w = h.input("w", np.zeros((2, 3, 4, 5)), layout="NCHW")
    n = Harness("float32", "NHWC_nonpacked")
    xn = n.input("x", np.zeros((2, 3, 4, 5)))
    assert h._packed_layout("x", x) == "NHWC"
    assert h._packed_layout("scale", s) in ("NHWC", "NCHW")
    assert h._packed_layout("w", w) == "NCHW"
    assert n._packed_layout("x", xn) is None


def test_torch_peer_expressions_match_the_references():
    """The dgrad (conv_transpose) and wgrad (convolution_backward) expressions of
    test_torch_peer_gpu.py, in float64 on the CPU, against tests/oracle/_reference.py."""
    torch = peer("torch", "PyTorch is the GPU suite's peer")
    from .test_torch_peer_gpu import CONFIGS, _torch_conv, _torch_dgrad, _torch_wgrad
    rng = np.random.default_rng(3)
    for name, (xd, wd, pad, stride, dil) in CONFIGS.items():
        groups = xd[1] // wd[1]
        yd = ref.conv_out_dims(xd, wd, pad, pad, stride, dil)
        x, w, dy = (rng.uniform(-1, 1, d) for d in (xd, wd, yd))
        xt, wt, dyt = (torch.from_numpy(a) for a in (x, w, dy))
        got = (_torch_conv(torch, xt, wt, pad, stride, dil, groups),
               _torch_dgrad(torch, dyt, wt, xd, pad, stride, dil, groups),
               _torch_wgrad(torch, dyt, xt, wd, pad, stride, dil, groups))
        want = (ref.conv_fprop(x, w, pad, pad, stride, dil),
                ref.conv_dgrad(dy, w, xd, pad, pad, stride, dil),
                ref.conv_wgrad(dy, x, wd, pad, pad, stride, dil))
        for what, g, wv in zip(("fprop", "dgrad", "wgrad"), got, want):
            np.testing.assert_allclose(g.numpy(), wv, rtol=1e-10, atol=1e-10,
                                       err_msg=f"{name} {what}")


def test_torch_batchnorm_expressions_match_the_references():
    torch = peer("torch", "PyTorch is the GPU suite's peer")
    rng = np.random.default_rng(4)
    dims, eps, mom = (4, 3, 5, 6), 1e-5, 0.1
    x, dy = rng.normal(0.5, 2, dims), rng.uniform(-1, 1, dims)
    scale, bias = rng.uniform(0.5, 1.5, 3), rng.uniform(-1, 1, 3)
    prm, prv = rng.uniform(-1, 1, 3), rng.uniform(0.5, 2, 3)
    rm, rv = torch.from_numpy(prm.copy()), torch.from_numpy(prv.copy())
    y, m, i = torch.native_batch_norm(torch.from_numpy(x), torch.from_numpy(scale),
                                      torch.from_numpy(bias), rm, rv, True, mom, eps)
    want = ref.bn_training(x, scale, bias, eps, mom, prm, prv)
    np.testing.assert_allclose(y.numpy(), want["y"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m.numpy(), want["mean"].ravel(), rtol=1e-12)
    np.testing.assert_allclose(i.numpy(), want["inv_variance"].ravel(), rtol=1e-10)
    np.testing.assert_allclose(rm.numpy(), want["next_running_mean"].ravel(), rtol=1e-10)
    np.testing.assert_allclose(rv.numpy(), want["next_running_variance"].ravel(), rtol=1e-10)
    dx, ds, db = torch.ops.aten.native_batch_norm_backward(
        torch.from_numpy(dy), torch.from_numpy(x), torch.from_numpy(scale), None, None, m, i,
        True, eps, [True, True, True])
    wb = ref.bn_backward(dy, x, scale, want["mean"], want["inv_variance"])
    np.testing.assert_allclose(dx.numpy(), wb["dx"], rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ds.numpy(), wb["dscale"].ravel(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(db.numpy(), wb["dbias"].ravel(), rtol=1e-9, atol=1e-10)
