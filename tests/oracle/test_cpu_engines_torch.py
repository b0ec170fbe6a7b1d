"""PyTorch CPU (float64) as the peer of every CPU engine, through the public API.

Inputs are drawn, rounded to the I/O dtype (FLOAT, BFLOAT16, HALF), and PyTorch computes
in float64 from the same rounded values with the calls a user (or autograd) makes:
``F.conv2d`` / ``F.conv3d`` (+ in-place ``relu_``), ``torch.ops.aten.convolution_backward``
for dgrad and wgrad, ``torch.ops.aten.native_batch_norm`` and ``F.batch_norm`` for
training and inference, ``torch.ops.aten.native_batch_norm_backward`` for the backward.
Tolerances are the table of ``_cases.py``. Engines as in ``_cpu_engines.py``.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from ._cases import Harness, assert_close, chan_shape, reduction_tol, tol, wgrad_tol
from ._cpu_engines import cpu_engine  # noqa: F401
from ._cpu_engines import check_engine, run_named

torch = pytest.importorskip("torch", reason="PyTorch CPU is the float64 peer of this module")
F = torch.nn.functional

DTYPES = ("float32", "bfloat16", "float16")

# name: x dims, w dims, padding (symmetric, as torch's), stride, dilation, layout; the
# families of torch's common_nn.py conv configs, scaled down for a 2-core CPU
CONV_CONFIGS = {
    "2d": ((2, 3, 6, 5), (4, 3, 3, 2), (0, 0), (1, 1), (1, 1), "NCHW"),
    "2d_strided_padded": ((2, 3, 7, 6), (4, 3, 3, 3), (1, 2), (2, 2), (1, 1), "NHWC"),
    "2d_dilated": ((1, 3, 8, 7), (4, 3, 3, 2), (1, 0), (1, 1), (2, 2), "NHWC"),
    "2d_groups": ((2, 4, 6, 6), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), "NCHW"),
    "2d_depthwise_multiplier": ((1, 4, 6, 5), (8, 1, 3, 3), (1, 0), (2, 1), (1, 1), "NHWC"),
    "2d_1x1": ((2, 8, 5, 5), (6, 8, 1, 1), (0, 0), (1, 1), (1, 1), "NHWC"),
    "3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (0, 0, 0), (1, 1, 1), (1, 1, 1), "NCDHW"),
    "3d_groups_dilated": ((1, 4, 5, 5, 5), (4, 2, 2, 2, 2), (1, 1, 1), (2, 1, 2), (2, 2, 1),
                          "NDHWC"),
}


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CONV_CONFIGS))
def test_conv_vs_torch_on_engine(cpu_engine, name, dtype):
    dev, engine = cpu_engine
    xd, wd, pad, stride, dil, layout = CONV_CONFIGS[name]
    rng = np.random.default_rng(zlib.crc32(f"{name}/{dtype}".encode()))
    kw = dict(padding=pad, stride=stride, dilation=dil)
    groups = xd[1] // wd[1]
    conv = F.conv2d if len(xd) == 4 else F.conv3d
    what = f"{engine} {name} {dtype} {layout}"

    # fprop + bias + ReLU (the fused pattern; torch: conv with bias, then in-place relu_)
    h = Harness(dtype, layout, name="torch_cbr")
    x = h.input("x", rng.uniform(-1, 1, xd))
    w = h.input("w", rng.uniform(-1, 1, wd))
    b = h.input("bias", rng.uniform(-1, 1, chan_shape(wd[0], len(xd))))
    y = h.g.pointwise(h.g.conv_fprop(x, w, **kw), b, mode=h.hd.PointwiseMode.ADD)
    h.output(h.g.pointwise(y, mode=h.hd.PointwiseMode.RELU_FWD), "y")
    got_y = run_named(dev, engine, lambda: h.run(dev, engine=engine)["y"], what + " cbr")
    check_engine(h, engine)
    r = h.ref
    ty = conv(_t(r["x"]), _t(r["w"]), _t(r["bias"]).flatten(), groups=groups, **kw).relu_()
    n_fwd = wd[1] * int(np.prod(wd[2:]))
    assert_close(got_y, ty.numpy(), *reduction_tol("conv_fprop", dtype, n_fwd), what + " cbr")

    # dgrad and wgrad against aten.convolution_backward (the call autograd makes)
    yd = ty.shape
    dyv = rng.uniform(-1, 1, yd)
    hx = Harness(dtype, layout, name="torch_dgrad")
    dy = hx.input("dy", dyv)
    w2 = hx.input("w", r["w"])
    hx.output(hx.g.conv_dgrad(dy, w2, dx_dims=xd, **kw), "dx")
    got_dx = run_named(dev, engine, lambda: hx.run(dev, engine=engine)["dx"], what + " dgrad")
    check_engine(hx, engine)
    hw = Harness(dtype, layout, name="torch_wgrad")
    dy3 = hw.input("dy", dyv)
    x3 = hw.input("x", r["x"])
    hw.output(hw.g.conv_wgrad(dy3, x3, dw_dims=wd, **kw), "dw")
    got_dw = run_named(dev, engine, lambda: hw.run(dev, engine=engine)["dw"], what + " wgrad")
    check_engine(hw, engine)
    nsp = len(xd) - 2
    tdx, tdw, _ = torch.ops.aten.convolution_backward(
        _t(hx.ref["dy"]), _t(r["x"]), _t(r["w"]), None, list(stride), list(pad), list(dil),
        False, [0] * nsp, groups, [True, True, False])
    n_bwd = wd[0] // groups * int(np.prod(wd[2:]))
    assert_close(got_dx, tdx.numpy(), *reduction_tol("conv_dgrad", dtype, n_bwd), what + " dgrad")
    n_w = yd[0] * int(np.prod(yd[2:]))
    assert_close(got_dw, tdw.numpy(), *wgrad_tol(dtype, n_w, 1.0, 1.0), what + " wgrad")


BN_CASES = [((2, 3, 4, 5), "NCHW"), ((4, 5, 3, 3), "NHWC"), ((2, 3, 2, 3, 2), "NDHWC"),
            ((3, 6, 1, 1), "NHWC")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims,layout", BN_CASES, ids=[f"{d}-{lay}" for d, lay in BN_CASES])
def test_batchnorm_vs_torch_on_engine(cpu_engine, dims, layout, dtype):
    dev, engine = cpu_engine
    rank, c = len(dims), dims[1]
    cs = chan_shape(c, rank)
    rng = np.random.default_rng([sum(dims), len(dtype)])
    eps, mom = 1e-5, 0.1
    what = f"{engine} BN {dims} {layout} {dtype}"

    # training + ReLU with running statistics: aten.native_batch_norm, then relu_
    h = Harness(dtype, layout, name="torch_bn")
    x = h.input("x", rng.normal(0.5, 2.0, dims))
    scale = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    bias = h.float_input("bias", rng.uniform(-1, 1, cs))
    prm = h.float_input("prev_running_mean", rng.uniform(-1, 1, cs))
    prv = h.float_input("prev_running_variance", rng.uniform(0.5, 2, cs))
    y, mean, inv, nrm, nrv = h.g.batchnorm(x, scale, bias, epsilon=eps, momentum=mom,
                                           prev_running_mean=prm, prev_running_variance=prv)
    h.output(h.g.pointwise(y, mode=h.hd.PointwiseMode.RELU_FWD), "y")
    for t, n in ((mean, "mean"), (inv, "inv_variance"), (nrm, "nrm"), (nrv, "nrv")):
        h.output(t, n, dtype="float32")
    got = run_named(dev, engine, lambda: h.run(dev, engine=engine), what + " training")
    check_engine(h, engine)
    r = h.ref
    rm, rv = _t(r["prev_running_mean"].ravel()), _t(r["prev_running_variance"].ravel())
    ty, save_mean, save_invstd = torch.ops.aten.native_batch_norm(
        _t(r["x"]), _t(r["scale"].ravel()), _t(r["bias"].ravel()), rm, rv, True, mom, eps)
    t_train, tf = tol("bn_training", dtype), tol("bn_training", "float32")
    assert_close(got["y"], ty.relu_().numpy(), *t_train, what + " y")
    assert_close(got["mean"].ravel(), save_mean.numpy(), *tf, what + " mean")
    assert_close(got["inv_variance"].ravel(), save_invstd.numpy(), *tf, what + " inv_variance")
    assert_close(got["nrm"].ravel(), rm.numpy(), *tf, what + " next_running_mean")
    assert_close(got["nrv"].ravel(), rv.numpy(), *tf, what + " next_running_variance")

    # backward with the saved statistics: aten.native_batch_norm_backward
    dyv = rng.uniform(-1, 1, dims)
    hb = Harness(dtype, layout, name="torch_bn_bwd")
    dy = hb.input("dy", dyv)
    xb = hb.input("x", r["x"])
    sb = hb.float_input("scale", r["scale"])
    mb = hb.float_input("mean", save_mean.numpy().reshape(cs))
    ib = hb.float_input("inv_variance", save_invstd.numpy().reshape(cs))
    dx, dscale, dbias = hb.g.batchnorm_backward(dy, xb, sb, mean=mb, inv_variance=ib)
    hb.output(dx, "dx")
    hb.output(dscale, "dscale", dtype="float32")
    hb.output(dbias, "dbias", dtype="float32")
    gb = run_named(dev, engine, lambda: hb.run(dev, engine=engine), what + " backward")
    check_engine(hb, engine)
    rb = hb.ref
    tdx, tds, tdb = torch.ops.aten.native_batch_norm_backward(
        _t(rb["dy"]), _t(rb["x"]), _t(rb["scale"].ravel()), None, None,
        _t(rb["mean"].ravel()), _t(rb["inv_variance"].ravel()), True, eps, [True, True, True])
    tbf = tol("bn_backward", "float32")
    assert_close(gb["dx"], tdx.numpy(), *tol("bn_backward", dtype), what + " dx")
    assert_close(gb["dscale"].ravel(), tds.numpy(), *tbf, what + " dscale")
    assert_close(gb["dbias"].ravel(), tdb.numpy(), *tbf, what + " dbias")

    # inference with variance on the updated running statistics: F.batch_norm(training=False)
    hi = Harness(dtype, layout, name="torch_bn_inf")
    xi = hi.input("x", r["x"])
    mi = hi.float_input("mean", rm.numpy().reshape(cs))
    vi = hi.float_input("variance", rv.numpy().reshape(cs))
    si = hi.float_input("scale", r["scale"])
    bi = hi.float_input("bias", r["bias"])
    hi.output(hi.g.batchnorm_inference_variance_ext(xi, mi, vi, si, bi, epsilon=eps), "y")
    gi = run_named(dev, engine, lambda: hi.run(dev, engine=engine), what + " inference")
    check_engine(hi, engine)
    ri = hi.ref
    want = F.batch_norm(_t(ri["x"]), _t(ri["mean"].ravel()), _t(ri["variance"].ravel()),
                        _t(ri["scale"].ravel()), _t(ri["bias"].ravel()), training=False, eps=eps)
    assert_close(gi["y"], want.numpy(), *tol("bn_inference_variance", dtype), what + " inference")
