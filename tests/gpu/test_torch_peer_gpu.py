"""PyTorch on CUDA as the GPU peer, and foreign GPU buffers in the variant pack.

Torch CUDA tensors (``__cuda_array_interface__``), CuPy arrays and int device pointers are
bound directly. Expected values: torch in float64 on the GPU from the same rounded inputs
(the oracle), and torch in the I/O dtype with ``torch.backends.cudnn.allow_tf32 = False``
(the peer: our result must agree with it within twice the dtype's tolerance).

Torch exports ``__cuda_array_interface__`` version 2, without a ``stream``: nothing tells
a consumer which stream produced the data, so these tests synchronize torch before they
hand its tensors over (as a user must).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import gpu_wgrad_tol, assert_close, reduction_tol, tol

import hipdnn_async as hd

from .conftest import cuda_spec

pytestmark = [pytest.mark.gpu, pytest.mark.cuda]


@pytest.fixture(scope="module")
def cuda_dev():
    """A cuDNN device shared by the module (skips where there is none)."""
    spec = cuda_spec()
    with hd.Device(spec) as dev:
        yield dev


def _tdtype(torch, name):
    return {"float32": torch.float32, "float16": torch.float16,
            "bfloat16": torch.bfloat16}[name]


def _to_cuda(torch, values, dtype, layout):
    """A CUDA tensor of logical dims holding values rounded to dtype, in layout."""
    t = torch.from_numpy(np.asarray(values, np.float64)).to("cuda").to(_tdtype(torch, dtype))
    if layout in ("NHWC", "NDHWC"):
        fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
        t = t.contiguous(memory_format=fmt)
    return t


def _nan_like(torch, dims, dtype, layout):
    return _to_cuda(torch, np.full(dims, np.nan), dtype, layout)


def _layout(name, rank):
    return name if rank == 4 else {"NCHW": "NCDHW", "NHWC": "NDHWC"}[name]


# name: x dims, w dims, padding (symmetric), stride, dilation
CONFIGS = {
    "strided_padded": ((4, 16, 15, 13), (32, 16, 3, 3), (1, 1), (2, 2), (1, 1)),
    "dilated": ((2, 8, 12, 11), (16, 8, 3, 3), (2, 2), (1, 1), (2, 2)),
    "groups4": ((2, 16, 10, 10), (32, 4, 3, 3), (1, 1), (1, 1), (1, 1)),
    "depthwise": ((2, 32, 14, 14), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1)),
    "1x1": ((8, 64, 14, 14), (128, 64, 1, 1), (0, 0), (1, 1), (1, 1)),
    "resnet_3x3": ((8, 64, 28, 28), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1)),
    "conv3d": ((2, 8, 6, 7, 8), (16, 8, 3, 3, 3), (1, 1, 1), (1, 2, 1), (1, 1, 1)),
}


def _graph(dtype, layout, name):
    f32 = hd.DataType.FLOAT
    return hd.Graph(name=name, io_data_type=dtype, intermediate_data_type=f32,
                    compute_data_type=f32)


def _torch_conv(torch, x, w, pad, stride, dil, groups):
    conv = torch.nn.functional.conv2d if x.dim() == 4 else torch.nn.functional.conv3d
    return conv(x, w, padding=pad, stride=stride, dilation=dil, groups=groups)


def _torch_dgrad(torch, dy, w, x_dims, pad, stride, dil, groups):
    """dgrad as the transposed convolution of dy with the same weights."""
    nsp = dy.dim() - 2
    out_pad = [x_dims[2 + i] - ((dy.shape[2 + i] - 1) * stride[i] - 2 * pad[i]
                                + dil[i] * (w.shape[2 + i] - 1) + 1) for i in range(nsp)]
    tconv = (torch.nn.functional.conv_transpose2d if nsp == 2
             else torch.nn.functional.conv_transpose3d)
    return tconv(dy, w, stride=stride, padding=pad, output_padding=out_pad, groups=groups,
                 dilation=dil)


def _torch_wgrad(torch, dy, x, w_dims, pad, stride, dil, groups):
    """wgrad through the convolution backward torch's autograd calls (weight only)."""
    w = torch.empty(w_dims, dtype=x.dtype, device=x.device)
    nsp = x.dim() - 2
    return torch.ops.aten.convolution_backward(
        dy, x, w, None, list(stride), list(pad), list(dil), False, [0] * nsp, groups,
        [False, True, False])[1]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_conv_vs_torch_cuda(cuda_dev, torch_cuda, name, dtype, layout):
    torch = torch_cuda
    xd, wd, pad, stride, dil = CONFIGS[name]
    layout = _layout(layout, len(xd))
    groups = xd[1] // wd[1]
    rng = np.random.default_rng(zlib.crc32(f"{name}/{dtype}/{layout}".encode()))
    kw = dict(padding=pad, stride=stride, dilation=dil)
    yd = ref.conv_out_dims(xd, wd, pad, pad, stride, dil)

    x = _to_cuda(torch, rng.uniform(-1, 1, xd), dtype, layout)
    w = _to_cuda(torch, rng.uniform(-1, 1, wd), dtype, layout)
    dy = _to_cuda(torch, rng.uniform(-1, 1, yd), dtype, layout)
    y, dx, dw = (_nan_like(torch, d, dtype, layout) for d in (yd, xd, wd))

    gf = _graph(dtype, layout, f"peer_fprop_{name}")
    tx, tw = gf.tensor(dims=xd, layout=layout, name="x"), gf.tensor(dims=wd, layout=layout, name="w")
    gf.conv_fprop(tx, tw, **kw).set_output(True).set_name("y")
    gd = _graph(dtype, layout, f"peer_dgrad_{name}")
    tdy, tw2 = gd.tensor(dims=yd, layout=layout, name="dy"), gd.tensor(dims=wd, layout=layout, name="w")
    gd.conv_dgrad(tdy, tw2, dx_dims=xd, **kw).set_output(True).set_name("dx")
    gw = _graph(dtype, layout, f"peer_wgrad_{name}")
    tdy3, tx3 = gw.tensor(dims=yd, layout=layout, name="dy"), gw.tensor(dims=xd, layout=layout, name="x")
    gw.conv_wgrad(tdy3, tx3, dw_dims=wd, **kw).set_output(True).set_name("dw")

    torch.cuda.synchronize()   # CAI v2 carries no stream: the inputs must be complete
    cuda_dev.build_sync(gf).execute_sync({"x": x, "w": w, "y": y})
    cuda_dev.build_sync(gd).execute_sync({"dy": dy, "w": w, "dx": dx})
    cuda_dev.build_sync(gw).execute_sync({"dy": dy, "x": x, "dw": dw})

    x64, w64, dy64 = x.double(), w.double(), dy.double()
    oracle = (_torch_conv(torch, x64, w64, pad, stride, dil, groups),
              _torch_dgrad(torch, dy64, w64, xd, pad, stride, dil, groups),
              _torch_wgrad(torch, dy64, x64, wd, pad, stride, dil, groups))
    peer = (_torch_conv(torch, x, w, pad, stride, dil, groups),
            _torch_dgrad(torch, dy, w, xd, pad, stride, dil, groups),
            _torch_wgrad(torch, dy, x, wd, pad, stride, dil, groups))
    n = yd[0] * int(np.prod(yd[2:]))
    taps = int(np.prod(wd[2:]))
    limits = (reduction_tol("conv_fprop", dtype, wd[1] * taps),
              reduction_tol("conv_dgrad", dtype, wd[0] // groups * taps),
              gpu_wgrad_tol(dtype, n, 1.0, 1.0))
    for what, got, want, mate, (atol, rtol) in zip(("fprop", "dgrad", "wgrad"), (y, dx, dw),
                                                   oracle, peer, limits):
        got_np = got.float().cpu().numpy()
        label = f"{name} {what} {dtype} {layout}"
        assert_close(got_np, want.cpu().numpy(), atol, rtol, f"{label} vs torch float64")
        assert_close(got_np, mate.float().cpu().numpy(), 2 * atol, 2 * rtol,
                     f"{label} vs torch {dtype} (cuDNN, no TF32)")


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC"),
                                          ("bfloat16", "NHWC")])
def test_batchnorm_vs_torch_cuda(cuda_dev, torch_cuda, dtype, layout):
    """Training (with running statistics), backward with the saved statistics, and
    inference with variance, against torch.native_batch_norm(_backward) on CUDA."""
    torch = torch_cuda
    dims, eps, mom = (8, 32, 14, 13), 1e-5, 0.1
    c = dims[1]
    rng = np.random.default_rng(zlib.crc32(f"bn/{dtype}".encode()))
    x = _to_cuda(torch, rng.normal(0.5, 2.0, dims), dtype, layout)
    dy = _to_cuda(torch, rng.uniform(-1, 1, dims), dtype, layout)

    def chan(values):
        return torch.tensor(np.asarray(values, np.float32), device="cuda")

    scale, bias = chan(rng.uniform(0.5, 1.5, c)), chan(rng.uniform(-1, 1, c))
    prm, prv = chan(rng.uniform(-1, 1, c)), chan(rng.uniform(0.5, 2, c))

    def c4(t):
        return t.reshape(1, c, 1, 1)

    # training
    g = _graph(dtype, layout, "peer_bn_training")
    tx = g.tensor(dims=dims, layout=layout, name="x")
    ts, tb, tm, tv = (g.tensor(dims=(1, c, 1, 1), name=n, data_type="float32")
                      for n in ("scale", "bias", "prm", "prv"))
    outs = g.batchnorm(tx, ts, tb, epsilon=eps, momentum=mom, prev_running_mean=tm,
                       prev_running_variance=tv)
    for t, n in zip(outs, ("y", "mean", "inv_variance", "nrm", "nrv")):
        t.set_output(True).set_name(n)
    y = _nan_like(torch, dims, dtype, layout)
    mean, inv, nrm, nrv = (torch.full((1, c, 1, 1), float("nan"), device="cuda") for _ in "abcd")
    torch.cuda.synchronize()
    cuda_dev.build_sync(g).execute_sync({"x": x, "scale": c4(scale), "bias": c4(bias),
                                         "prm": c4(prm), "prv": c4(prv), "y": y, "mean": mean,
                                         "inv_variance": inv, "nrm": nrm, "nrv": nrv})
    rm64, rv64 = prm.double(), prv.double()
    y64, m64, i64 = torch.native_batch_norm(x.double(), scale.double(), bias.double(), rm64, rv64,
                                            True, mom, eps)
    rm, rv = prm.clone(), prv.clone()
    y_peer, _, _ = torch.native_batch_norm(x, scale, bias, rm, rv, True, mom, eps)
    t_y, t_f = tol("bn_training", dtype), tol("bn_training", "float32")
    assert_close(y.float().cpu().numpy(), y64.cpu().numpy(), *t_y, f"bn training y {dtype}")
    assert_close(y.float().cpu().numpy(), y_peer.float().cpu().numpy(), 2 * t_y[0], 2 * t_y[1],
                 f"bn training y vs torch {dtype}")
    for got, want, what in ((mean, m64, "mean"), (inv, i64, "inv_variance"),
                            (nrm, rm64, "next_running_mean"), (nrv, rv64, "next_running_variance")):
        assert_close(got.cpu().numpy().ravel(), want.cpu().numpy().ravel(), *t_f,
                     f"bn training {what} {dtype}")

    # backward, with our saved statistics (as a training step would)
    gb = _graph(dtype, layout, "peer_bn_backward")
    bdy, bx = gb.tensor(dims=dims, layout=layout, name="dy"), gb.tensor(dims=dims, layout=layout, name="x")
    bs, bm, bi = (gb.tensor(dims=(1, c, 1, 1), name=n, data_type="float32")
                  for n in ("scale", "mean", "inv_variance"))
    bouts = gb.batchnorm_backward(bdy, bx, bs, mean=bm, inv_variance=bi)
    bouts[0].set_output(True).set_name("dx")
    bouts[1].set_output(True).set_name("dscale").set_data_type("float32")
    bouts[2].set_output(True).set_name("dbias").set_data_type("float32")
    dx = _nan_like(torch, dims, dtype, layout)
    dscale, dbias = (torch.full((1, c, 1, 1), float("nan"), device="cuda") for _ in "ab")
    cuda_dev.build_sync(gb).execute_sync({"dy": dy, "x": x, "scale": c4(scale), "mean": mean,
                                          "inv_variance": inv, "dx": dx, "dscale": dscale,
                                          "dbias": dbias})
    dx64, ds64, db64 = torch.ops.aten.native_batch_norm_backward(
        dy.double(), x.double(), scale.double(), None, None, mean.reshape(c).double(),
        inv.reshape(c).double(), True, eps, [True, True, True])
    t_b, t_bf = tol("bn_backward", dtype), tol("bn_backward", "float32")
    assert_close(dx.float().cpu().numpy(), dx64.cpu().numpy(), *t_b, f"bn backward dx {dtype}")
    assert_close(dscale.cpu().numpy().ravel(), ds64.cpu().numpy(), *t_bf, "bn backward dscale")
    assert_close(dbias.cpu().numpy().ravel(), db64.cpu().numpy(), *t_bf, "bn backward dbias")

    # inference with variance, on the updated running statistics
    gi = _graph(dtype, layout, "peer_bn_inference")
    ix = gi.tensor(dims=dims, layout=layout, name="x")
    im, iv, isc, ib = (gi.tensor(dims=(1, c, 1, 1), name=n, data_type="float32")
                       for n in ("mean", "variance", "scale", "bias"))
    gi.batchnorm_inference_variance_ext(ix, im, iv, isc, ib, epsilon=eps).set_output(True).set_name("y")
    yi = _nan_like(torch, dims, dtype, layout)
    cuda_dev.build_sync(gi).execute_sync({"x": x, "mean": nrm, "variance": nrv, "scale": c4(scale),
                                          "bias": c4(bias), "y": yi})
    want = torch.nn.functional.batch_norm(x.double(), nrm.reshape(c).double(),
                                          nrv.reshape(c).double(), scale.double(), bias.double(),
                                          training=False, eps=eps)
    assert_close(yi.float().cpu().numpy(), want.cpu().numpy(), *tol("bn_inference_variance", dtype),
                 f"bn inference {dtype}")


def test_bfloat16_torch_tensors_bind(cuda_dev, torch_cuda):
    """bfloat16 torch tensors export typestr '<V2' (as ml_dtypes); they bind as BFLOAT16."""
    torch = torch_cuda
    rng = np.random.default_rng(16)
    xd, wd = (2, 8, 9, 9), (16, 8, 3, 3)
    x = _to_cuda(torch, rng.uniform(-1, 1, xd), "bfloat16", "NHWC")
    w = _to_cuda(torch, rng.uniform(-1, 1, wd), "bfloat16", "NHWC")
    y = _nan_like(torch, (2, 16, 9, 9), "bfloat16", "NHWC")
    g = _graph("bfloat16", "NHWC", "bf16_torch")
    tx, tw = g.tensor(dims=xd, layout="NHWC", name="x"), g.tensor(dims=wd, layout="NHWC", name="w")
    g.conv_fprop(tx, tw, padding=(1, 1)).set_output(True).set_name("y")
    torch.cuda.synchronize()
    cuda_dev.build_sync(g).execute_sync({"x": x, "w": w, "y": y})
    want = ref.conv_fprop(x.double().cpu().numpy(), w.double().cpu().numpy(), (1, 1), (1, 1))
    assert_close(y.float().cpu().numpy(), want, *tol("conv_fprop", "bfloat16"), "bf16 via CAI")


def _fprop_graph(dtype, layout, xd, wd, pad=(1, 1)):
    g = _graph(dtype, layout, "foreign")
    tx, tw = g.tensor(dims=xd, layout=layout, name="x"), g.tensor(dims=wd, layout=layout, name="w")
    ty = g.conv_fprop(tx, tw, padding=pad).set_output(True).set_name("y")
    return g, ty


def test_cupy_arrays_bind(cuda_dev):
    """CuPy arrays: a logical view with NHWC strides, and C-contiguous memory-order
    arrays (N, H, W, C), as inputs and as the output."""
    cp = pytest.importorskip("cupy", reason="CuPy is one of the foreign array types bound here")
    rng = np.random.default_rng(7)
    xd, wd = (2, 8, 11, 10), (16, 8, 3, 3)
    xv = rng.uniform(-1, 1, xd).astype(np.float16)
    wv = rng.uniform(-1, 1, wd).astype(np.float16)
    g, ty = _fprop_graph("float16", "NHWC", xd, wd)
    x_view = cp.asarray(np.ascontiguousarray(xv.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)
    w_mem = cp.asarray(np.ascontiguousarray(wv.transpose(0, 2, 3, 1)))       # (K, R, S, C)
    y_mem = cp.full((2, 11, 10, 16), cp.nan, dtype=cp.float16)                # (N, P, Q, K)
    cp.cuda.Device().synchronize()
    cuda_dev.build_sync(g).execute_sync({"x": x_view, "w": w_mem, "y": y_mem})
    got = cp.asnumpy(y_mem).transpose(0, 3, 1, 2)
    want = ref.conv_fprop(xv, wv, (1, 1), (1, 1))
    assert_close(got, want, *tol("conv_fprop", "float16"), "cupy buffers")


@pytest.mark.anyio
async def test_int_device_pointers_bind(cuda_dev, torch_cuda, anyio_backend):
    """Int device pointers (no stream, no shape: the graph's strides are trusted)."""
    torch = torch_cuda
    rng = np.random.default_rng(8)
    xd, wd = (2, 8, 9, 7), (12, 8, 3, 3)
    x = _to_cuda(torch, rng.uniform(-1, 1, xd), "float32", "NCHW")
    w = _to_cuda(torch, rng.uniform(-1, 1, wd), "float32", "NCHW")
    y = _nan_like(torch, (2, 12, 9, 7), "float32", "NCHW")
    g, ty = _fprop_graph("float32", "NCHW", xd, wd)
    plan = await cuda_dev.build(g)
    torch.cuda.synchronize()
    await plan.execute({"x": x.data_ptr(), "w": w.data_ptr(), "y": y.data_ptr()})
    want = ref.conv_fprop(x.double().cpu().numpy(), w.double().cpu().numpy(), (1, 1), (1, 1))
    assert_close(y.cpu().numpy(), want, *tol("conv_fprop", "float32"), "int pointers")


@pytest.mark.parametrize("dtype,layout", [("float32", "NCHW"), ("float16", "NHWC")])
def test_device_array_exports_cuda_array_interface(cuda_dev, torch_cuda, dtype, layout):
    """dev.empty arrays wrap in torch and CuPy with their dims, strides and values."""
    torch = torch_cuda
    dims = (2, 3, 4, 5)
    arr = cuda_dev.empty(dims, dtype, layout=layout)
    values = np.random.default_rng(9).uniform(-1, 1, dims).astype(dtype)
    arr.copy_from(values)
    assert arr.dims == dims and arr.strides == hd.strides_for(dims, layout)
    assert np.dtype(arr.dtype) == np.dtype(dtype)
    assert arr.nbytes >= values.nbytes and isinstance(arr.ptr, int) and arr.ptr != 0
    assert not hasattr(arr, "view"), "device memory is not host-addressable"
    cai = arr.__cuda_array_interface__
    assert cai["data"][0] == arr.ptr and tuple(cai["shape"]) == dims
    np.testing.assert_array_equal(arr.to_numpy_sync(), values)
    t = torch.as_tensor(arr, device="cuda")
    assert tuple(t.shape) == dims and t.stride() == arr.strides and t.data_ptr() == arr.ptr
    np.testing.assert_array_equal(t.cpu().numpy(), values)
    try:
        import cupy as cp
    except ImportError:
        return
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(arr)), values)
