"""Cross-check the float64 references of ``_reference.py`` against PyTorch CPU float64.

This validates the oracle itself (an independent implementation checked against a peer),
so that the pattern tests can trust it.
"""
from __future__ import annotations

import numpy as np
import pytest
from _peers import peer

from . import _reference as ref

torch = peer("torch", "PyTorch CPU is the peer that checks the reference")
F = torch.nn.functional

# (x dims, w dims, pre, post, stride, dilation)
CONV_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 2), (1, 0), (1, 0), (1, 1), (1, 1)),
    ((1, 4, 9, 9), (6, 2, 3, 3), (2, 2), (2, 2), (2, 2), (2, 2)),       # 2 groups, s2 d2
    ((2, 4, 5, 7), (4, 1, 3, 3), (1, 1), (1, 1), (2, 1), (1, 1)),       # depthwise
    ((1, 2, 5, 4, 5), (3, 2, 2, 3, 1), (1, 1, 0), (1, 1, 0), (1, 2, 1), (2, 1, 1)),
    ((1, 1, 8, 8), (1, 1, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),       # asymmetric pad
]


def _torch_conv(x, w, pre, post, stride, dilation, groups):
    # torch pads symmetrically; asymmetric padding goes through F.pad (last dim first)
    pad = []
    for a, b in zip(reversed(pre), reversed(post)):
        pad += [a, b]
    xt = F.pad(torch.from_numpy(x), pad)
    conv = F.conv2d if x.ndim == 4 else F.conv3d
    return conv(xt, torch.from_numpy(w), stride=stride, dilation=dilation, groups=groups)


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv_reference_matches_torch(case):
    xd, wd, pre, post, s, d = case
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, xd)
    w = rng.uniform(-1, 1, wd)
    groups = xd[1] // wd[1]
    y = ref.conv_fprop(x, w, pre, post, s, d)
    xt = torch.from_numpy(x).requires_grad_(True)
    wt = torch.from_numpy(w).requires_grad_(True)
    pad = []
    for a, b in zip(reversed(pre), reversed(post)):
        pad += [a, b]
    conv = F.conv2d if x.ndim == 4 else F.conv3d
    yt = conv(F.pad(xt, pad), wt, stride=s, dilation=d, groups=groups)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    dy = rng.uniform(-1, 1, y.shape)
    yt.backward(torch.from_numpy(dy))
    np.testing.assert_allclose(ref.conv_dgrad(dy, w, xd, pre, post, s, d), xt.grad.numpy(),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref.conv_wgrad(dy, x, wd, pre, post, s, d), wt.grad.numpy(),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dims", [(2, 3, 4, 5), (3, 2, 3, 2, 2)], ids=str)
def test_batchnorm_reference_matches_torch(dims):
    rng = np.random.default_rng(1)
    c = dims[1]
    x = rng.uniform(-1, 1, dims) * 3 + 0.5
    scale, bias = rng.uniform(0.5, 1.5, c), rng.uniform(-1, 1, c)
    rm, rv = rng.uniform(-1, 1, c), rng.uniform(0.5, 2, c)
    eps, mom = 1e-5, 0.1
    got = ref.bn_training(x, scale, bias, eps, mom, rm, rv)
    xt = torch.from_numpy(x).requires_grad_(True)
    st = torch.from_numpy(scale).requires_grad_(True)
    bt = torch.from_numpy(bias).requires_grad_(True)
    rmt, rvt = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    yt = F.batch_norm(xt, rmt, rvt, st, bt, training=True, momentum=mom, eps=eps)
    np.testing.assert_allclose(got["y"], yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got["next_running_mean"].ravel(), rmt.numpy(), rtol=1e-12)
    np.testing.assert_allclose(got["next_running_variance"].ravel(), rvt.numpy(), rtol=1e-12)
    # backward with the saved statistics of this batch equals autograd through training BN
    dy = rng.uniform(-1, 1, dims)
    yt.backward(torch.from_numpy(dy))
    g = ref.bn_backward(dy, x, scale, got["mean"], got["inv_variance"])
    np.testing.assert_allclose(g["dx"], xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(g["dscale"].ravel(), st.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g["dbias"].ravel(), bt.grad.numpy(), rtol=1e-10, atol=1e-12)
    # inference forms
    yi = F.batch_norm(torch.from_numpy(x), torch.from_numpy(rm), torch.from_numpy(rv),
                      torch.from_numpy(scale), torch.from_numpy(bias), training=False, eps=eps)
    np.testing.assert_allclose(ref.bn_inference_variance(x, rm, rv, scale, bias, eps),
                               yi.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref.bn_inference(x, rm, 1 / np.sqrt(rv + eps), scale, bias),
                               yi.numpy(), rtol=1e-12, atol=1e-12)


def test_relu_reference_matches_torch():
    x = np.array([-2.0, -0.0, 0.0, 0.3, 0.7, 1.5, np.nan, np.inf, -np.inf])
    xt = torch.from_numpy(x)
    np.testing.assert_array_equal(ref.relu(x), torch.relu(xt).numpy())
    np.testing.assert_array_equal(ref.relu(x, upper=1.0), torch.clamp(torch.relu(xt), max=1.0).numpy())
    np.testing.assert_array_equal(ref.relu(x, 0.1, 1.0), torch.clamp(xt, 0.1, 1.0).numpy())
    assert not np.signbit(ref.relu(x)[1])
    dy = np.arange(x.size, dtype=np.float64) + 1
    # RELU_BWD: PyTorch's relu / hardtanh(0, 1) backward wherever the forward value is a
    # number (+inf passes without an upper clip, not under one); NaN where it is NaN (the
    # contract's CPU rule; PyTorch passes dy there)
    nan = np.isnan(x)
    for upper, fwd in ((None, torch.relu), (1.0, lambda t: F.hardtanh(t, 0.0, 1.0))):
        xg = xt.clone().requires_grad_(True)
        fwd(xg).backward(torch.from_numpy(dy))
        got = ref.relu_bwd(x, dy, upper=upper)
        np.testing.assert_array_equal(got[~nan], xg.grad.numpy()[~nan])
        assert np.isnan(got[nan]).all()
    assert ref.relu_bwd(x, dy)[7] == dy[7] and ref.relu_bwd(x, dy, upper=1.0)[7] == 0.0
