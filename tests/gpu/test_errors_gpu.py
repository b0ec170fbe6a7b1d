"""Errors on the GPU: host buffers and mismatched device buffers are VariantPackErrors naming
the tensor (raised before anything runs); what cuDNN cannot do is a NotSupportedError at
build for graphs the CPU provider builds."""
from __future__ import annotations

import numpy as np
import pytest
from _peers import peer

import hipdnn_async as hd

pytestmark = pytest.mark.gpu

F32 = hd.DataType.FLOAT
XD, WD = (2, 8, 6, 5), (4, 8, 3, 3)       # C != H: memory-order shapes are unambiguous


def fprop_graph(layout="NHWC", dtype=F32):
    g = hd.Graph(name="errors", io_data_type=dtype, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=XD, layout=layout, name="x")
    w = g.tensor(dims=WD, layout=layout, name="w")
    y = g.conv_fprop(x, w, padding=(1, 1)).set_output(True).set_name("y")
    return g, x, w, y


def good_pack(dev, layout="NHWC"):
    pack = {}
    for name, dims in (("x", XD), ("w", WD), ("y", (2, 4, 6, 5))):
        arr = dev.empty(dims, "float32", layout=layout)
        arr.copy_from(np.zeros(dims, np.float32))
        pack[name] = arr
    return pack


def test_host_buffers_are_rejected_with_a_remedy(gpu_module_device):
    dev = gpu_module_device
    g, *_ = fprop_graph()
    plan = dev.build_sync(g)
    pack = good_pack(dev)
    plan.execute_sync(pack)                                   # the good pack runs
    for bad in (np.zeros(XD, np.float32),                      # logical NumPy array
                np.zeros((2, 6, 5, 8), np.float32)):           # memory-order NumPy array
        with pytest.raises(hd.VariantPackError, match=r"'x'.*asarray|asarray.*'x'"):
            plan.execute_sync({**pack, "x": bad})
        with pytest.raises(hd.VariantPackError, match="'x'"):
            plan.submit({**pack, "x": bad})                    # raised at submit, not later
    with hd.Device("cpu") as cpu:
        host_array = cpu.empty(XD, "float32", layout="NHWC")   # a CPU device array
    with pytest.raises(hd.VariantPackError, match="'x'"):
        plan.execute_sync({**pack, "x": host_array})


def test_torch_cpu_tensor_is_rejected(gpu_module_device):
    torch = peer("torch", "PyTorch is the GPU suite's peer")
    g, *_ = fprop_graph("NCHW")
    plan = gpu_module_device.build_sync(g)
    pack = good_pack(gpu_module_device, "NCHW")
    with pytest.raises(hd.VariantPackError, match="'w'"):
        plan.execute_sync({**pack, "w": torch.zeros(WD)})


def test_mismatched_device_buffers(gpu_module_device):
    dev = gpu_module_device
    g, *_ = fprop_graph()
    plan = dev.build_sync(g)
    pack = good_pack(dev)
    cases = {
        "dtype": dev.empty(XD, "float16", layout="NHWC"),
        "shape": dev.empty((2, 8, 6, 6), "float32", layout="NHWC"),
        "strides": dev.empty(XD, "float32", layout="NCHW"),       # NCHW for an NHWC tensor
    }
    for what, bad in cases.items():
        with pytest.raises(hd.VariantPackError, match="'x'") as info:
            plan.execute_sync({**pack, "x": bad})
        assert what != "dtype" or ("float16" in str(info.value) or "HALF" in str(info.value))
    with pytest.raises(hd.VariantPackError, match="'y'"):
        plan.execute_sync({"x": pack["x"], "w": pack["w"]})        # missing output
    with pytest.raises(hd.VariantPackError, match="'y'"):
        plan.execute_sync({**pack, "y": dev.empty((2, 4, 6, 4), "float32", layout="NHWC")})


def test_workspace_must_be_device_memory_of_enough_bytes(gpu_module_device):
    dev = gpu_module_device
    g = hd.Graph(name="ws", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=(8, 64, 28, 28), layout="NHWC", name="x")
    w = g.tensor(dims=(64, 64, 3, 3), layout="NHWC", name="w")
    g.conv_fprop(x, w, padding=(1, 1)).set_output(True).set_name("y")
    plan = dev.build_sync(g)
    pack = {}
    for name, dims in (("x", (8, 64, 28, 28)), ("w", (64, 64, 3, 3)), ("y", (8, 64, 28, 28))):
        pack[name] = dev.empty(dims, "float32", layout="NHWC")
        pack[name].copy_from(np.ones(dims, np.float32))
    if plan.workspace_size == 0:
        plan.execute_sync(pack, workspace=None)
        pytest.skip(f"algorithm {plan.algorithm} needs no workspace; nothing to reject")
    with pytest.raises(hd.VariantPackError):
        plan.execute_sync(pack, workspace=np.empty(plan.workspace_size, np.uint8))
    small = dev.empty((max(plan.workspace_size // 4 - 1, 1),), "float32")
    with pytest.raises(hd.VariantPackError):
        plan.execute_sync(pack, workspace=small)
    enough = dev.empty((plan.workspace_size // 4 + 1,), "float32")
    plan.execute_sync(pack, workspace=enough)
    y = pack["y"].to_numpy_sync()
    # interior: 9 taps x 64 channels of 1*1 (FFT/Winograd algorithms round a little)
    np.testing.assert_allclose(y[:, :, 1:-1, 1:-1], 64 * 9, rtol=1e-5)


def _conv_relu(lower, upper, *, bias=True, w_strides=None):
    g = hd.Graph(name="clip", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=XD, layout="NHWC", name="x")
    w = (g.tensor(dims=WD, strides=w_strides, name="w") if w_strides
         else g.tensor(dims=WD, layout="NHWC", name="w"))
    y = g.conv_fprop(x, w, padding=(1, 1))
    if bias:
        y = g.pointwise(y, g.tensor(dims=(1, 4, 1, 1), name="b"), mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=lower,
                relu_upper_clip=upper).set_output(True).set_name("y")
    return g


def _bn_relu(lower):
    g = hd.Graph(name="bn_clip", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=XD, layout="NHWC", name="x")
    s, b = (g.tensor(dims=(1, 8, 1, 1), name=n) for n in ("scale", "bias"))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, epsilon=1e-5)
    mean.set_output(True)
    inv.set_output(True)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=lower,
                relu_upper_clip=1.0).set_output(True).set_name("y")
    return g


def _drelu(lower):
    g = hd.Graph(name="drelu_clip", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    x, dy = (g.tensor(dims=XD, layout="NHWC", name=n) for n in ("x", "dy"))
    m, i, s, b = (g.tensor(dims=(1, 8, 1, 1), name=n) for n in ("mean", "inv", "scale", "bias"))
    ybn = g.batchnorm_inference(x, m, i, s, b)
    gm = g.pointwise(ybn, dy, mode=hd.PointwiseMode.RELU_BWD, relu_lower_clip=lower,
                     relu_upper_clip=1.0)
    for t in g.batchnorm_backward(gm, x, s, mean=m, inv_variance=i):
        t.set_output(True)
    return g


UNSUPPORTED = {
    "conv+bias+relu lower clip 0.1": lambda: _conv_relu(0.1, 1.0),
    "conv+relu clamp(-0.5, 2)": lambda: _conv_relu(-0.5, 2.0, bias=False),
    "bn training+relu lower clip 0.1": lambda: _bn_relu(0.1),
    "bn inference+drelu+bn backward lower clip 0.1": lambda: _drelu(0.1),
    "conv+bias+relu lower clip alone": lambda: _conv_relu(0.25, None),   # CPU runs it
    # weights not packed (a gap after every row): cuDNN takes KCRS or KRSC only
    "non-packed weights": lambda: _conv_relu(None, None, w_strides=(8 * 3 * 4, 3 * 4, 4, 1)),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_not_supported_at_build(gpu_module_device, case):
    g = UNSUPPORTED[case]()
    with hd.Device("cpu") as cpu:
        cpu.build_sync(g)                     # a valid graph: the CPU provider builds it
    with pytest.raises(hd.NotSupportedError) as info:
        # the legacy engine's limits (the graph engine computes these: test_cudnn_graph_gpu)
        gpu_module_device.build_sync(g, engine="CUDNN_LEGACY_ENGINE")
    assert len(str(info.value)) > 20, f"unclear message: {info.value}"


def test_convolution_mode_is_not_supported(gpu_module_device):
    g = hd.Graph(name="mode", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    x = g.tensor(dims=XD, name="x")
    w = g.tensor(dims=WD, name="w")
    g.conv_fprop(x, w, padding=(1, 1), mode=hd.ConvolutionMode.CONVOLUTION).set_output(True)
    with pytest.raises(hd.NotSupportedError):
        gpu_module_device.build_sync(g)


def test_non_float_scale_never_reaches_the_gpu(gpu_module_device):
    """Per-channel tensors must be FLOAT: the graph layer rejects a HALF scale (GraphError)
    before any provider sees it; were it let through, the GPU must decline it."""
    g = hd.Graph(name="half_scale", io_data_type="float16", intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=XD, layout="NHWC", name="x")
    m, v, b = (g.tensor(dims=(1, 8, 1, 1), name=n, data_type="float32")
               for n in ("mean", "variance", "bias"))
    s = g.tensor(dims=(1, 8, 1, 1), name="scale")          # HALF: the graph's io type
    with pytest.raises((hd.GraphError, hd.NotSupportedError), match="scale"):
        g.batchnorm_inference_variance_ext(x, m, v, s, b, epsilon=1e-5).set_output(True)
        gpu_module_device.build_sync(g)
