"""Layouts of device buffers on every GPU device (issue 9 item 9; the fake-runtime unit
tests are tests/unit/providers/gpu/test_asarray.py and test_bind.py):

- ``await dev.asarray(a)`` keeps an NHWC-strided view NHWC-strided on the device, and an
  NHWC plan computes the right answer from it;
- the GPU binder decides from strides alone: a C-contiguous (1, 2, 2, 2) buffer for an NHWC
  tensor (C == H == W) is refused as ambiguous, while its logical view binds and computes
  the float64 reference's answer;
- a producer reached only through ``__dlpack__`` (a torch CUDA tensor behind a wrapper)
  binds and computes the same answer.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import assert_close, tol

import hipdnn_async as hd

pytestmark = pytest.mark.gpu


def _conv_graph(dims, k, layout):
    g = hd.Graph(name=f"layout_{layout}_{dims}", io_data_type="float32")
    x = g.tensor(dims=dims, layout=layout, name="x")
    w = g.tensor(dims=(k, dims[1], 1, 1), layout=layout, name="w")
    y = g.conv_fprop(x, w, padding=0).set_output(True).set_name("y")
    return g, y


def _values(dims, k, seed=0):
    rng = np.random.default_rng(seed)
    xv = rng.uniform(-1, 1, dims).astype(np.float32)
    wv = rng.uniform(-1, 1, (k, dims[1], 1, 1)).astype(np.float32)
    return xv, wv, ref.conv_fprop(xv, wv)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asarray_keeps_nhwc_and_the_plan_reads_it(gpu_device):
    dev = gpu_device
    dims, k = (2, 3, 4, 5), 6
    xv, wv, want = _values(dims, k)
    x_view = np.ascontiguousarray(xv.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)   # NHWC view
    w_view = np.ascontiguousarray(wv.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    xd, wd = await dev.asarray(x_view), await dev.asarray(w_view)
    assert xd.strides == hd.graph.strides_for(dims, "NHWC")
    np.testing.assert_array_equal(await xd.to_numpy(), xv)
    g, y = _conv_graph(dims, k, "NHWC")
    plan = await dev.build(g)
    yd = dev.empty(y.dims, "float32", layout="NHWC")
    await plan.execute({"x": xd, "w": wd, "y": yd})
    atol, rtol = tol("conv_fprop", "float32")
    assert_close(await yd.to_numpy(), want, atol, rtol, f"{dev.spec} {plan.engine.name}")


def test_an_ambiguous_device_array_is_refused_and_its_logical_view_computes(gpu_device):
    dev = gpu_device
    dims, k = (1, 2, 2, 2), 2
    xv, wv, want = _values(dims, k, seed=1)
    g, y = _conv_graph(dims, k, "NHWC")
    plan = dev.build_sync(g)
    w_d = dev.empty(wv.shape, "float32", layout="NHWC")
    w_d.copy_from(wv)
    y_d = dev.empty(y.dims, "float32", layout="NHWC")
    ambiguous = dev.empty(dims, "float32")            # C-contiguous (1, 2, 2, 2)
    ambiguous.copy_from(np.ascontiguousarray(xv.transpose(0, 2, 3, 1)).reshape(dims))
    with pytest.raises(hd.VariantPackError, match="ambiguous"):
        plan.execute_sync({"x": ambiguous, "w": w_d, "y": y_d})
    x_d = dev.empty(dims, "float32", layout="NHWC")        # the logical view
    x_d.copy_from(xv)
    plan.execute_sync({"x": x_d, "w": w_d, "y": y_d})
    atol, rtol = tol("conv_fprop", "float32")
    assert_close(y_d.to_numpy_sync(), want, atol, rtol, dev.spec)


class _DLPackOnly:
    """Exposes only a torch tensor's DLPack export (no __cuda_array_interface__)."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


@pytest.mark.cuda
def test_a_dlpack_only_producer_binds_on_the_gpu(torch_cuda):
    from gpu.conftest import cuda_spec
    torch = torch_cuda
    spec = cuda_spec()
    index = int(spec.split(":")[1])
    dims, k = (2, 3, 4, 5), 4
    xv, wv, want = _values(dims, k, seed=2)
    g, y = _conv_graph(dims, k, "NHWC")
    cl = torch.channels_last
    with hd.Device(spec) as dev:
        plan = dev.build_sync(g)
        dev_t = torch.device("cuda", index)
        x_t = torch.from_numpy(xv).to(dev_t).contiguous(memory_format=cl)
        w_t = torch.from_numpy(wv).to(dev_t).contiguous(memory_format=cl)
        y_t = torch.full(tuple(y.dims), float("nan"), device=dev_t).contiguous(memory_format=cl)
        torch.cuda.synchronize(dev_t)
        plan.execute_sync({"x": _DLPackOnly(x_t), "w": _DLPackOnly(w_t), "y": _DLPackOnly(y_t)})
        got = y_t.cpu().numpy()
    atol, rtol = tol("conv_fprop", "float32")
    assert_close(got, want, atol, rtol, f"{spec} DLPack")
    with hd.Device(spec) as dev:    # a torch CPU tensor through DLPack: a host buffer
        plan = dev.build_sync(g)
        with pytest.raises(hd.VariantPackError, match="host _DLPackOnly"):
            plan.execute_sync({"x": _DLPackOnly(torch.from_numpy(xv)), "w": w_t, "y": y_t})
