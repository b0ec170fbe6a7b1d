"""PyTorch CPU (float64) as a peer oracle, through the public API.

Inputs are drawn, rounded to the I/O dtype, and torch computes in float64 from the same
rounded values (autograd gives dgrad and wgrad). Shapes follow the families of torch's
``common_nn.py`` conv configs (plain, strided, padded, dilated, groups, depthwise, 3-D)
and its batchnorm module inputs, scaled down for a 2-core CPU.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from _peers import peer

from ._cases import Harness, assert_close, chan_shape, device, tol, wgrad_tol  # noqa: F401

torch = peer("torch", "PyTorch CPU is the float64 peer of this module")
F = torch.nn.functional

# name: (x dims, w dims, padding (symmetric), stride, dilation)
CONV_CONFIGS = {
    "Conv2d": ((2, 3, 6, 5), (4, 3, 3, 2), (0, 0), (1, 1), (1, 1)),
    "Conv2d_strided": ((2, 3, 7, 6), (4, 3, 3, 3), (0, 0), (2, 2), (1, 1)),
    "Conv2d_padding": ((1, 3, 5, 6), (4, 3, 3, 3), (1, 2), (1, 1), (1, 1)),
    "Conv2d_dilated": ((1, 3, 8, 7), (4, 3, 3, 2), (0, 0), (1, 1), (2, 2)),
    "Conv2d_groups": ((2, 4, 6, 6), (4, 2, 3, 3), (1, 1), (1, 1), (1, 1)),
    "Conv2d_depthwise": ((2, 4, 6, 6), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1)),
    "Conv2d_depthwise_multiplier": ((1, 4, 6, 5), (8, 1, 3, 3), (1, 0), (2, 1), (1, 1)),
    "Conv2d_1x1": ((2, 8, 5, 5), (6, 8, 1, 1), (0, 0), (1, 1), (1, 1)),
    "Conv3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (0, 0, 0), (1, 1, 1), (1, 1, 1)),
    "Conv3d_groups": ((1, 4, 4, 4, 4), (4, 2, 2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    "Conv3d_dilated_strided": ((1, 2, 5, 5, 5), (2, 2, 2, 2, 2), (1, 1, 1), (2, 2, 2), (2, 2, 2)),
}


def _torch_grads(x, w, pad, stride, dil, dy):
    """fprop, dgrad, wgrad by torch autograd in float64."""
    xt = torch.from_numpy(x).requires_grad_(True)
    wt = torch.from_numpy(w).requires_grad_(True)
    conv = F.conv2d if x.ndim == 4 else F.conv3d
    yt = conv(xt, wt, padding=pad, stride=stride, dilation=dil, groups=x.shape[1] // w.shape[1])
    yt.backward(torch.from_numpy(dy))
    return yt.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", list(CONV_CONFIGS))
def test_conv_vs_torch(device, name, dtype):
    xd, wd, pad, stride, dil = CONV_CONFIGS[name]
    layout = ("NCHW", "NHWC")[len(name) % 2] if len(xd) == 4 else ("NCDHW", "NDHWC")[len(name) % 2]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    kw = dict(padding=pad, stride=stride, dilation=dil)
    # fprop
    h = Harness(dtype, layout)
    x = h.input("x", rng.uniform(-1, 1, xd))
    w = h.input("w", rng.uniform(-1, 1, wd))
    y = h.g.conv_fprop(x, w, **kw)
    h.output(y, "y")
    got_y = h.run(device)["y"]
    dyv = rng.uniform(-1, 1, got_y.shape)
    # dgrad
    hd_ = Harness(dtype, layout)
    dy = hd_.input("dy", dyv)
    w2 = hd_.input("w", h.ref["w"])
    dx = hd_.g.conv_dgrad(dy, w2, dx_dims=xd, **kw)
    hd_.output(dx, "dx")
    got_dx = hd_.run(device)["dx"]
    # wgrad
    hw = Harness(dtype, layout)
    dy3 = hw.input("dy", dyv)
    x3 = hw.input("x", h.ref["x"])
    dw = hw.g.conv_wgrad(dy3, x3, dw_dims=wd, **kw)
    hw.output(dw, "dw")
    got_dw = hw.run(device)["dw"]

    ty, tdx, tdw = _torch_grads(h.ref["x"], h.ref["w"], pad, stride, dil, hd_.ref["dy"])
    assert_close(got_y, ty, *tol("conv_fprop", dtype), f"{name} fprop {dtype}")
    assert_close(got_dx, tdx, *tol("conv_dgrad", dtype), f"{name} dgrad {dtype}")
    n = int(np.prod(got_y.shape)) // got_y.shape[1]
    assert_close(got_dw, tdw, *wgrad_tol(dtype, n, 1.0, 1.0), f"{name} wgrad {dtype}")


@pytest.mark.parametrize("dims", [(2, 3, 4, 5), (4, 2, 3, 3), (2, 3, 2, 3, 2), (3, 5, 1, 1)], ids=str)
def test_batchnorm_vs_torch(device, dims):
    rank = len(dims)
    layout = "NCHW" if rank == 4 else "NDHWC"
    c = dims[1]
    cs = chan_shape(c, rank)
    rng = np.random.default_rng(sum(dims))
    eps, mom = 1e-5, 0.1
    h = Harness("float32", layout)
    x = h.input("x", rng.normal(0.5, 2.0, dims))
    scale = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    bias = h.float_input("bias", rng.uniform(-1, 1, cs))
    prm = h.float_input("prev_running_mean", rng.uniform(-1, 1, cs))
    prv = h.float_input("prev_running_variance", rng.uniform(0.5, 2, cs))
    y, mean, inv, nrm, nrv = h.g.batchnorm(x, scale, bias, epsilon=eps, momentum=mom,
                                           prev_running_mean=prm, prev_running_variance=prv)
    h.output(y, "y")
    for t, n in ((mean, "mean"), (inv, "inv_variance"), (nrm, "nrm"), (nrv, "nrv")):
        h.output(t, n, dtype="float32")
    got = h.run(device)
    r = h.ref
    xt = torch.from_numpy(r["x"]).requires_grad_(True)
    st = torch.from_numpy(r["scale"].ravel()).requires_grad_(True)
    bt = torch.from_numpy(r["bias"].ravel()).requires_grad_(True)
    rm, rv = torch.from_numpy(r["prev_running_mean"].ravel().copy()), torch.from_numpy(
        r["prev_running_variance"].ravel().copy())
    yt = F.batch_norm(xt, rm, rv, st, bt, training=True, momentum=mom, eps=eps)
    t = tol("bn_training", "float32")
    assert_close(got["y"], yt.detach().numpy(), *t, "bn training y")
    assert_close(got["nrm"].ravel(), rm.numpy(), *t, "next_running_mean")
    assert_close(got["nrv"].ravel(), rv.numpy(), *t, "next_running_variance")
    # batchnorm backward with the library's own saved statistics vs torch autograd
    dyv = rng.uniform(-1, 1, dims)
    yt.backward(torch.from_numpy(dyv))
    hb = Harness("float32", layout)
    dy = hb.input("dy", dyv)
    xb = hb.input("x", r["x"])
    sb = hb.float_input("scale", r["scale"])
    mb = hb.float_input("mean", np.asarray(got["mean"], np.float64))
    ib = hb.float_input("inv_variance", np.asarray(got["inv_variance"], np.float64))
    dx, dscale, dbias = hb.g.batchnorm_backward(dy, xb, sb, mean=mb, inv_variance=ib)
    hb.output(dx, "dx")
    hb.output(dscale, "dscale", dtype="float32")
    hb.output(dbias, "dbias", dtype="float32")
    gb = hb.run(device)
    tb = tol("bn_backward", "float32")
    assert_close(gb["dx"], xt.grad.numpy(), *tb, "bn backward dx")
    assert_close(gb["dscale"].ravel(), st.grad.numpy(), *tb, "bn backward dscale")
    assert_close(gb["dbias"].ravel(), bt.grad.numpy(), *tb, "bn backward dbias")
    # inference with variance on the updated running stats
    hi = Harness("float32", layout)
    xi = hi.input("x", r["x"])
    mi = hi.float_input("mean", rm.numpy().reshape(cs))
    vi = hi.float_input("variance", rv.numpy().reshape(cs))
    si = hi.float_input("scale", r["scale"])
    bi = hi.float_input("bias", r["bias"])
    yi = hi.g.batchnorm_inference_variance_ext(xi, mi, vi, si, bi, epsilon=eps)
    hi.output(yi, "y")
    gi = hi.run(device)
    want = F.batch_norm(torch.from_numpy(hi.ref["x"]), torch.from_numpy(hi.ref["mean"].ravel()),
                        torch.from_numpy(hi.ref["variance"].ravel()),
                        torch.from_numpy(hi.ref["scale"].ravel()),
                        torch.from_numpy(hi.ref["bias"].ravel()), training=False, eps=eps)
    assert_close(gi["y"], want.numpy(), *tol("bn_inference_variance", "float32"), "bn inference")


def test_torch_tensors_as_buffers(device):
    """Torch CPU tensors (``__dlpack__``), channels_last, bind directly in the variant pack."""
    import hipdnn_async as hd
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 3, 6, 5, generator=gen) * 2 - 1).to(memory_format=torch.channels_last)
    w = (torch.rand(4, 3, 3, 3, generator=gen) * 2 - 1).to(memory_format=torch.channels_last)
    g = hd.Graph(name="dlpack", io_data_type=hd.DataType.FLOAT,
                 intermediate_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    xt = g.tensor(dims=tuple(x.shape), strides=tuple(x.stride()), name="x")
    wt = g.tensor(dims=tuple(w.shape), strides=tuple(w.stride()), name="w")
    yt = g.conv_fprop(xt, wt, padding=(1, 1))
    yt.set_output(True).set_name("y")
    y = torch.full(tuple(yt.dims), float("nan")).as_strided(tuple(yt.dims), tuple(yt.strides))
    plan = device.build_sync(g)
    plan.execute_sync({"x": x, "w": w, "y": y})
    want = F.conv2d(x.double(), w.double(), padding=1)
    assert_close(y.numpy(), want.numpy(), *tol("conv_fprop", "float32"), "dlpack conv")
