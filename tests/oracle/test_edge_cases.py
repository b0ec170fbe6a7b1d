"""Edge cases from public bug reports, through the public API, against float64 references.

One case per line in the tables below, each naming the report it comes from (shapes scaled
down for a 2-core CPU where the original is large). Every output is pre-filled with NaN so
that unwritten elements fail. See docs/design/failure-classes.md.
"""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import Harness, assert_close, chan_shape, device, tol, wgrad_tol  # noqa: F401

# name: (origin, x dims, w dims, pre, post, stride, dilation, dtypes, layouts)
CONV_EDGES = {
    "same_even_kernel_pad_bottom_right": ("MIOpen #142, ORT #26215: x 1x1x8x8 w 2x2 pads (t,b,l,r)=(0,1,0,1)",
                                          (1, 1, 8, 8), (1, 1, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),
    "same_even_kernel_pad_top_left": ("MIOpen #142, ORT #26215: x 1x1x8x8 w 2x2 pads (t,b,l,r)=(1,0,1,0)",
                                      (1, 1, 8, 8), (1, 1, 2, 2), (1, 1), (0, 0), (1, 1), (1, 1)),
    "same_even_kernel_onnx_order": ("ORT #26215: ONNX pads [0,1,0,1] = pre (0,1), post (0,1)",
                                    (1, 1, 8, 8), (1, 1, 2, 2), (0, 1), (0, 1), (1, 1), (1, 1)),
    "same_even_kernel_8ch_7x7": ("MIOpen #142: x 1x8x7x7 w 8x8x2x2 bottom/right pads only",
                                 (1, 8, 7, 7), (8, 8, 2, 2), (0, 0), (1, 1), (1, 1), (1, 1)),
    "stride2_dilation2": ("hipDNN ConvolutionCommon p2 d2 family with stride 2",
                          (1, 3, 9, 9), (4, 3, 3, 3), (2, 2), (2, 2), (2, 2), (2, 2)),
    "1x1_pad_larger_than_kernel": ("MIOpen #218 family: 1x1 kernel, pad 2",
                                   (1, 3, 5, 5), (4, 3, 1, 1), (2, 2), (2, 2), (1, 1), (1, 1)),
    "odd_prime_spatial": ("odd/prime sizes: x 2x3x7x11 w 5x3x3x5",
                          (2, 3, 7, 11), (5, 3, 3, 5), (1, 2), (1, 2), (1, 1), (1, 1)),
    "odd_prime_spatial_3d": ("odd/prime sizes, 3-D: x 1x2x5x3x7",
                             (1, 2, 5, 3, 7), (3, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 2), (1, 1, 1)),
    "kernel_larger_than_input": ("kernel 5x5 > input 3x3, pad 2",
                                 (1, 2, 3, 3), (3, 2, 5, 5), (2, 2), (2, 2), (1, 1), (1, 1)),
    "kernel_larger_than_input_nonsquare": ("kernel 4x5 > input 2x3, pad 2",
                                           (1, 2, 2, 3), (2, 2, 4, 5), (2, 2), (2, 2), (1, 1), (1, 1)),
    "large_nonsquare_kernel_anisotropic_stride": (
        "MIOpen #133: x 1x32x170x96 w 32x32x21x11 s (2,1), scaled to x 1x4x30x16 w 3x4x9x5",
        (1, 4, 30, 16), (3, 4, 9, 5), (0, 0), (0, 0), (2, 1), (1, 1)),
    "strided_1d_like_dgrad_odd_k": ("oneDNN fork #43: dx 1x64x1x8 w 17x64x1x3 s (1,2) pad W 1; C scaled to 8",
                                    (1, 8, 1, 8), (17, 8, 1, 3), (0, 1), (0, 1), (1, 2), (1, 1)),
    "overlapping_patches_k_gt_s": ("pytorch #102968: x 10x1x128x66 w 768x1x16x16 s10, scaled: k6 s4",
                                   (2, 1, 26, 17), (4, 1, 6, 6), (0, 0), (0, 0), (4, 4), (1, 1)),
    "gemm_path_small_32x32": ("TheRock #2458: x 1x8x32x32 w 16x8x3x3 pad 1",
                              (1, 8, 32, 32), (16, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "1x1_stride2_no_pad": ("MIOpen #218, pytorch #55381: 1x1 s2 pad 0 sub-sampling",
                           (1, 8, 9, 9), (4, 8, 1, 1), (0, 0), (0, 0), (2, 2), (1, 1)),
    "1x1x1_3d_filter_pad1": ("MIOpen #1672: dx 8x32x1x18x18 w 32x32x1x1x1 pad 1, scaled to 2x4x1x5x5",
                             (2, 4, 1, 5, 5), (4, 4, 1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    "fp16_wgrad_k1_c20_s2": ("MIOpen #990: n1 c256 12x12 k1 3x3 s2; C scaled to 20 (not a multiple of 8)",
                             (1, 20, 12, 12), (1, 20, 3, 3), (0, 0), (0, 0), (2, 2), (1, 1)),
    "fp16_wgrad_k1_c3_7x7_s2_d3": ("MIOpen #946: n1 c3 224x224 k1 7x7 s2 pad1 d3, scaled to 24x24",
                                   (1, 3, 24, 24), (1, 3, 7, 7), (1, 1), (1, 1), (2, 2), (3, 3)),
}
SEEDS = {name: i for i, name in enumerate(CONV_EDGES)}


def conv_run(dev, direction, dtype, layout, xd, wd, pre, post, stride, dil, seed, *, values=None):
    """Run one conv direction through the API; return (got, reference, (atol, rtol), harness)."""
    rng = np.random.default_rng(seed)
    kw = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
    yd = ref.conv_out_dims(xd, wd, pre, post, stride, dil)
    h = Harness(dtype, layout)
    if direction == "fprop":
        x = h.input("x", rng.uniform(-1, 1, xd) if values is None else values)
        w = h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_fprop(x, w, **kw), "y")
        got = h.run(dev)["y"]
        want = ref.conv_fprop(h.ref["x"], h.ref["w"], pre, post, stride, dil)
        return got, want, tol("conv_fprop", dtype), h
    if direction == "dgrad":
        dy = h.input("dy", rng.uniform(-1, 1, yd))
        w = h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_dgrad(dy, w, dx_dims=xd, **kw), "dx")
        got = h.run(dev)["dx"]
        want = ref.conv_dgrad(h.ref["dy"], h.ref["w"], xd, pre, post, stride, dil)
        return got, want, tol("conv_dgrad", dtype), h
    dy = h.input("dy", rng.uniform(-1, 1, yd))
    x = h.input("x", rng.uniform(-1, 1, xd))
    h.output(h.g.conv_wgrad(dy, x, dw_dims=wd, **kw), "dw")
    got = h.run(dev)["dw"]
    want = ref.conv_wgrad(h.ref["dy"], h.ref["x"], wd, pre, post, stride, dil)
    n = yd[0] * int(np.prod(yd[2:]))
    return got, want, wgrad_tol(dtype, n, np.abs(h.ref["dy"]).max(), np.abs(h.ref["x"]).max()), h


def _layouts(xd):
    return ("NCHW", "NHWC") if len(xd) == 4 else ("NCDHW", "NDHWC")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("name", list(CONV_EDGES))
def test_conv_edge(device, name, direction, dtype):
    origin, xd, wd, pre, post, stride, dil = CONV_EDGES[name]
    layout = _layouts(xd)[SEEDS[name] % 2]
    got, want, (atol, rtol), _ = conv_run(device, direction, dtype, layout, xd, wd, pre, post,
                                          stride, dil, SEEDS[name])
    assert_close(got, want, atol, rtol, f"{name} {direction} {dtype} {layout} [{origin}]")


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("c", [1, 3, 17])
def test_fp16_nhwc_odd_channel_counts(device, c, direction):
    """Channel counts 1, 3, 17 in fp16 NHWC (vectorised NHWC kernels assume C % 8 == 0; MIOpen #946/#990)."""
    got, want, (atol, rtol), _ = conv_run(device, direction, "float16", "NHWC", (2, c, 6, 5), (c, c, 3, 3),
                                          (1, 1), (1, 1), (1, 1), (1, 1), 100 + c)
    assert_close(got, want, atol, rtol, f"fp16 NHWC C=K={c} {direction}")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("pad", [0, 1])
def test_1x1_stride2_padding_rows_equal_bias(device, pad, dtype):
    """MIOpen #218, pytorch #55381: 1x1 s2 sub-sampling with conv+bias+relu; outputs whose
    window lies only in padding equal the (positive) bias exactly."""
    import hipdnn_async as hd
    rng = np.random.default_rng(218 + pad)
    h = Harness(dtype, "NHWC")
    x = h.input("x", rng.uniform(-1, 1, (1, 8, 9, 9)))
    w = h.input("w", rng.uniform(-1, 1, (4, 8, 1, 1)))
    b = h.input("bias", rng.uniform(0.25, 1, (1, 4, 1, 1)))
    y = h.g.conv_fprop(x, w, padding=(pad, pad), stride=(2, 2))
    s = h.g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    h.output(h.g.pointwise(s, mode=hd.PointwiseMode.RELU_FWD), "y")
    got = h.run(device)["y"].astype(np.float64)
    want = ref.relu(ref.conv_fprop(h.ref["x"], h.ref["w"], (pad, pad), (pad, pad), (2, 2)) + h.ref["bias"])
    assert_close(got, want, *tol("conv_fprop", dtype), f"1x1 s2 pad {pad} conv+bias+relu {dtype}")
    if pad:
        bias = np.broadcast_to(h.ref["bias"], got.shape)
        edge = np.zeros(got.shape, bool)
        edge[:, :, [0, -1], :] = True
        edge[:, :, :, [0, -1]] = True
        np.testing.assert_array_equal(got[edge], bias[edge])   # exactly the bias, no residue


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_dgrad_1x1x1_3d_filter_pad_writes_everything(device, dtype):
    """MIOpen #1672: dgrad of a 1x1x1 3-D filter with padding left dx elements unwritten."""
    got, want, (atol, rtol), _ = conv_run(device, "dgrad", dtype, "NCDHW", (3, 4, 1, 6, 5), (4, 4, 1, 1, 1),
                                          (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1672)
    assert not np.isnan(got.astype(np.float64)).any(), "dx has unwritten (NaN pre-filled) elements"
    assert_close(got, want, atol, rtol, "dgrad 1x1x1 pad 1")


def _bn_training_run(dev, dtype, layout, xv, *, relu=False, eps=1e-5, **build_kw):
    import hipdnn_async as hd
    rank = xv.ndim
    cs = chan_shape(xv.shape[1], rank)
    rng = np.random.default_rng(7)
    h = Harness(dtype, layout)
    x = h.input("x", xv)
    s = h.float_input("scale", rng.uniform(0.5, 2, cs))
    b = h.float_input("bias", rng.uniform(0.1, 1, cs))
    y, mean, inv, _, _ = h.g.batchnorm(x, s, b, epsilon=eps)
    if relu:
        y = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    h.output(y, "y")
    h.output(mean, "mean", dtype="float32")
    h.output(inv, "inv_variance", dtype="float32")
    got = h.run(dev, **build_kw)
    want = ref.bn_training(h.ref["x"], h.ref["scale"], h.ref["bias"], eps)
    if relu:
        want["y"] = ref.relu(want["y"])
    return got, want, h


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("relu", [False, True])
def test_bn_constant_and_zero_channels_no_nan(device, dtype, relu):
    """MIOpen #248: constant channels (variance 0) and all-zero channels give no NaN."""
    xv = np.random.default_rng(248).uniform(-1, 1, (2, 4, 3, 5))
    xv[:, 0] = 3.0      # constant channel
    xv[:, 1] = 0.0      # all-zero channel
    got, want, _ = _bn_training_run(device, dtype, "NHWC", xv, relu=relu)
    for k in ("y", "mean", "inv_variance"):
        assert np.isfinite(got[k].astype(np.float64)).all(), f"{k} has NaN/inf for constant channels"
    t = tol("bn_training", dtype)
    assert_close(got["y"], want["y"], *t, "bn constant channels y")
    assert_close(got["mean"], want["mean"], *tol("bn_training", "float32"), "mean")
    # inv_variance = 1/sqrt(eps) = 316 for a zero-variance channel: compare relatively
    assert_close(got["inv_variance"], want["inv_variance"], 0, 4e-3, "inv_variance")


@pytest.mark.parametrize("engine", ["ONEDNN_ENGINE", "CPU_ENGINE"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bn_epsilon_at_float32_bound_constant_channel(device, layout, engine):
    """The smallest epsilons the graph takes (1e-77, just above 1/FLT_MAX**2 = 8.64e-78):
    a constant channel's inv_variance 1/sqrt(epsilon) = 3.2e38 is a finite float32, and y
    is the bias there (below the bound 1/sqrt(epsilon) overflowed and y was NaN)."""
    from ._cpu_engines import require
    require(engine)
    xv = np.random.default_rng(78).uniform(-1, 1, (2, 3, 4, 4))
    xv[:, 1] = 3.0      # constant channel
    got, want, _ = _bn_training_run(device, "float32", layout, xv, eps=1e-77, engine=engine)
    for k in ("y", "mean", "inv_variance"):
        assert np.isfinite(got[k].astype(np.float64)).all(), f"{k} has NaN/inf"
    assert_close(got["y"], want["y"], *tol("bn_training", "float32"), "y, epsilon 1e-77")
    assert_close(got["inv_variance"], want["inv_variance"], 0, 4e-3, "inv_variance")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_bn_all_zero_batch_no_nan(device, dtype):
    """MIOpen #248: an all-zero batch: mean 0, inv_variance 1/sqrt(eps), y == bias."""
    got, want, h = _bn_training_run(device, dtype, "NCHW", np.zeros((2, 3, 4, 4)))
    assert np.isfinite(got["y"].astype(np.float64)).all()
    assert_close(got["y"], want["y"], *tol("bn_training", dtype), "zero batch y")
    assert_close(got["inv_variance"], want["inv_variance"], 0, 4e-3, "zero batch inv_variance")


@pytest.mark.parametrize("dtype,center,noise", [("bfloat16", 256.0, 4.0), ("float16", 1000.0, 2.0)])
def test_bn_low_precision_statistics_accumulate_in_float32(device, dtype, center, noise):
    """pytorch #140112: bf16 (and fp16) statistics need float32 accumulation: values around
    256 (bf16 ulp 2) or 1000 (fp16: the sum of 512 values overflows 65504)."""
    xv = center + np.random.default_rng(140112).normal(0, noise, (2, 4, 8, 8))
    got, want, _ = _bn_training_run(device, dtype, "NHWC", xv)
    assert_close(got["mean"], want["mean"], 0, 1e-5, f"{dtype} mean near {center}")
    assert_close(got["inv_variance"], want["inv_variance"], 0, tol("bn_training", dtype)[0],
                 f"{dtype} inv_variance")
    assert_close(got["y"], want["y"], *tol("bn_training", dtype), f"{dtype} y")


SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -1.5, 2.5, 0.25, 1e-30, -1e-30, 0.75, 3.0])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("clips", [(None, None), (None, 1.0), (-0.5, 1.0)], ids=["relu", "upper", "clamp"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NCDHW", "NDHWC"])
def test_relu_special_values(device, dtype, clips, layout):
    """pytorch #7999: ReLU propagates NaN, maps -inf to the lower bound, never yields -0.0.
    Through conv (1x1 identity weight, C = K = 1) + RELU_FWD, pattern 8 with two nodes; on
    oneDNN an unclipped ReLU is also offered as the primitive's post-ops (candidates named
    ``+relu``), a clipped one never is."""
    import hipdnn_async as hd
    h = Harness(dtype, layout)
    lead = (1, 1) + (1,) * (len(layout) - 4)
    x = h.input("x", SPECIAL.reshape(lead + (3, 4)))
    w = h.input("w", np.ones(lead + (1, 1)))
    y = h.g.conv_fprop(x, w)
    h.output(h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=clips[0],
                           relu_upper_clip=clips[1]), "y")
    got = h.run(device)["y"].astype(np.float64)
    want = ref.relu(h.ref["x"], *clips)
    assert_close(got, want, 0, 0, f"relu {clips} on special values")
    if clips[0] is None:
        assert not np.signbit(got[got == 0]).any(), f"relu produced -0.0: {got.ravel()}"
    if h.plan.engine.name == "ONEDNN_ENGINE":                 # post-op candidates: unclipped only
        trials = [str(n) for n, _ in h.plan.algorithm.trials]
        assert any(n.endswith("+relu") for n in trials) == (clips == (None, None)), trials


LOWER_ONLY = 0.25   # a lower clip without an upper one: RELU_FWD is max(x, lower)


def _lower_only_conv_relu(h, rng):
    x = h.input("x", rng.uniform(-1, 1, (2, 3, 6, 5)))
    w = h.input("w", rng.uniform(-1, 1, (4, 3, 3, 3)))
    b = h.input("bias", rng.uniform(-1, 1, (1, 4, 1, 1)))
    y = h.g.pointwise(h.g.conv_fprop(x, w, padding=1), b, mode=h.hd.PointwiseMode.ADD)
    h.output(h.g.pointwise(y, mode=h.hd.PointwiseMode.RELU_FWD, relu_lower_clip=LOWER_ONLY), "y")
    r = h.ref
    want = ref.relu(ref.conv_fprop(r["x"], r["w"], (1, 1), (1, 1)) + r["bias"], LOWER_ONLY)
    return {"y": (want, tol("conv_fprop", h.dtype))}


def _lower_only_bn_training_relu(h, rng):
    cs = (1, 3, 1, 1)
    x = h.input("x", rng.uniform(-1, 1, (2, 3, 4, 5)))
    s, b = h.float_input("scale", rng.uniform(0.5, 2, cs)), h.float_input("bias", rng.uniform(-1, 1, cs))
    y, mean, inv, _, _ = h.g.batchnorm(x, s, b, epsilon=1e-5)
    h.output(h.g.pointwise(y, mode=h.hd.PointwiseMode.RELU_FWD, relu_lower_clip=LOWER_ONLY), "y")
    h.output(mean, "mean", dtype="float32")
    h.output(inv, "inv_variance", dtype="float32")
    want = ref.bn_training(h.ref["x"], h.ref["scale"], h.ref["bias"], 1e-5)
    return {"y": (ref.relu(want["y"], LOWER_ONLY), tol("bn_training", h.dtype))}


def _lower_only_bn_drelu_backward(h, rng):
    cs = (1, 3, 1, 1)
    x = h.input("x", rng.uniform(-1.8, 1.8, (2, 3, 4, 5)))
    dy = h.input("dy", rng.uniform(-1, 1, (2, 3, 4, 5)))
    mean, inv = h.float_input("mean", rng.uniform(-0.1, 0.1, cs)), h.float_input("inv_variance", rng.uniform(0.5, 2, cs))
    scale, bias = h.float_input("scale", rng.uniform(0.5, 1.5, cs)), h.float_input("bias", rng.uniform(-0.1, 0.1, cs))
    y_bn = h.g.batchnorm_inference(x, mean, inv, scale, bias)
    g = h.g.pointwise(y_bn, dy, mode=h.hd.PointwiseMode.RELU_BWD, relu_lower_clip=LOWER_ONLY)
    dx, dscale, dbias = h.g.batchnorm_backward(g, x, scale, mean=mean, inv_variance=inv)
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    r = h.ref
    ybn = ref.bn_inference(r["x"], r["mean"], r["inv_variance"], r["scale"], r["bias"])
    want = ref.bn_backward(ref.relu_bwd(ybn, r["dy"], LOWER_ONLY), r["x"], r["scale"], r["mean"],
                           r["inv_variance"])
    return {"dx": (want["dx"], tol("bn_backward", h.dtype)),
            "dscale": (want["dscale"], tol("bn_backward", "float32"))}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("build", [_lower_only_conv_relu, _lower_only_bn_training_relu,
                                   _lower_only_bn_drelu_backward],
                         ids=["conv_bias_relu", "bn_training_relu", "bn_drelu_backward"])
def test_relu_lower_clip_alone(device, dtype, build):
    """A lower clip without an upper one (patterns 8, 4, 2) is max(x, lower) forward and
    passes dy where lower < y backward (docs/contract/semantics.md, "Pointwise"). MIOpen has
    no such activation, so only a provider that lacks it refuses it; the CPU runs it
    (issue 9)."""
    h = Harness(dtype, "NHWC")
    expected = build(h, np.random.default_rng(9))
    got = h.run(device)
    for name, (want, (atol, rtol)) in expected.items():
        assert_close(got[name], want, atol, rtol, f"{build.__name__} {name}")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bn_training_relu_nan_propagates(device, dtype):
    """pytorch #7999: a NaN in a channel makes that channel's statistics and outputs NaN
    (propagated, not masked by the ReLU); other channels are unaffected."""
    xv = np.random.default_rng(7999).uniform(-1, 1, (2, 3, 3, 3))
    xv[1, 1, 2, 0] = np.nan
    got, want, _ = _bn_training_run(device, dtype, "NCHW", xv, relu=True)
    assert np.isnan(got["y"][:, 1].astype(np.float64)).all()
    assert_close(got["y"], want["y"], *tol("bn_training", dtype), "bn+relu with NaN")


def test_conv_fprop_zero_batch(device):
    """Empty tensors (N=0) are legal for inference-style ops (test-cases.md, PyTorch)."""
    h = Harness("float32", "NHWC")
    x = h.input("x", np.zeros((0, 3, 5, 5)))
    w = h.input("w", np.random.default_rng(0).uniform(-1, 1, (4, 3, 3, 3)))
    h.output(h.g.conv_fprop(x, w, padding=(1, 1)), "y")
    got = h.run(device)["y"]
    assert got.shape == (0, 4, 5, 5)


def test_bn_inference_zero_batch(device):
    """Empty tensors (N=0) for batchnorm inference: empty output, no error."""
    h = Harness("float16", "NCHW")
    cs = (1, 3, 1, 1)
    x = h.input("x", np.zeros((0, 3, 4, 4)))
    args = [h.float_input(n, np.full(cs, v)) for n, v in
            (("mean", 0.1), ("variance", 1.0), ("scale", 1.0), ("bias", 0.0))]
    h.output(h.g.batchnorm_inference_variance_ext(x, *args, epsilon=1e-5), "y")
    assert h.run(device)["y"].shape == (0, 3, 4, 4)


def test_conv_batch_beyond_65535(device):
    """tensorflow #9870: batch sizes beyond 65535 (GPU grid limits) must be handled."""
    got, want, (atol, rtol), _ = conv_run(device, "fprop", "float32", "NCHW", (70000, 1, 1, 2), (2, 1, 1, 1),
                                          (0, 0), (0, 0), (1, 1), (1, 1), 9870)
    assert_close(got, want, atol, rtol, "N = 70000")


@pytest.mark.parametrize("dims", [(3, 5, 7, 7), (2, 3, 11, 11)], ids=str)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bn_backward_odd_spatial(device, dims, layout):
    """MIOpen #2024 (n16 c80 73x73, scaled) and MIOpen #2385 / ROCm pytorch #1561 (NHWC fp16
    backward NaN): odd spatial sizes in fp16 backward, both layouts, no NaN."""
    rng = np.random.default_rng(2024)
    cs = chan_shape(dims[1], 4)
    xv = rng.uniform(-1, 1, dims)
    st = ref.bn_training(xv, np.ones(dims[1]), np.zeros(dims[1]), 1e-5)
    h = Harness("float16", layout)
    dy, x = h.input("dy", rng.uniform(-1, 1, dims)), h.input("x", xv)
    s = h.float_input("scale", rng.uniform(0.5, 1.5, cs))
    m, i = h.float_input("mean", st["mean"]), h.float_input("inv_variance", st["inv_variance"])
    dx, ds, db = h.g.batchnorm_backward(dy, x, s, mean=m, inv_variance=i)
    h.output(dx, "dx")
    h.output(ds, "dscale", dtype="float32")
    h.output(db, "dbias", dtype="float32")
    got = h.run(device)
    want = ref.bn_backward(h.ref["dy"], h.ref["x"], h.ref["scale"], h.ref["mean"], h.ref["inv_variance"])
    assert_close(got["dx"], want["dx"], *tol("bn_backward", "float16"), "dx")
    assert_close(got["dscale"], want["dscale"], *tol("bn_backward", "float32"), "dscale")
    assert_close(got["dbias"], want["dbias"], *tol("bn_backward", "float32"), "dbias")


def test_bn_small_epsilon_works(device):
    """pytorch #1623: a small positive epsilon (1e-6) works."""
    xv = np.random.default_rng(1623).uniform(-1, 1, (2, 3, 4, 4))
    got, want, _ = _bn_training_run(device, "float32", "NCHW", xv, eps=1e-6)
    assert_close(got["y"], want["y"], *tol("bn_training", "float32"), "eps 1e-6")


@pytest.mark.parametrize("eps", [0.0, -1e-5, 1e-80, 1e-300])
def test_bn_nonpositive_epsilon_rejected(eps):
    """pytorch #1623: epsilon 0 or negative is a GraphError naming the value; so is one
    below 1/FLT_MAX**2 (about 8.64e-78), whose 1/sqrt overflows float32 (a constant
    channel's inv_variance; y NaN there)."""
    import hipdnn_async as hd
    g = hd.Graph(io_data_type="float32")
    x = g.tensor(dims=(2, 3, 4, 4), layout="NCHW", name="x")
    s = g.tensor(dims=(1, 3, 1, 1), layout="NCHW", name="scale")
    b = g.tensor(dims=(1, 3, 1, 1), layout="NCHW", name="bias")
    with pytest.raises(hd.GraphError, match="epsilon"):
        g.batchnorm(x, s, b, epsilon=eps)
        g.validate()


@pytest.mark.parametrize("kw", [dict(stride=(0, 1)), dict(dilation=(1, 0)), dict(padding=(-1, 0)),
                                dict(stride=(-1, 1))], ids=str)
def test_conv_zero_or_negative_parameters_rejected(kw):
    """oneDNN #438: dilation counts from 1 here; 0 or negative stride/dilation/padding is a GraphError."""
    import hipdnn_async as hd
    g = hd.Graph(io_data_type="float32")
    x = g.tensor(dims=(1, 2, 5, 5), layout="NCHW", name="x")
    w = g.tensor(dims=(2, 2, 3, 3), layout="NCHW", name="w")
    with pytest.raises(hd.GraphError):
        g.conv_fprop(x, w, **kw)
        g.validate()


def test_zero_stride_weights_rejected_or_densified(device):
    """pytorch #4500: zero strides (broadcast weights) must be rejected or give dense results."""
    import hipdnn_async as hd
    rng = np.random.default_rng(4500)
    g = hd.Graph(io_data_type="float32")
    x = g.tensor(dims=(1, 2, 5, 5), layout="NCHW", name="x")
    try:
        w = g.tensor(dims=(3, 2, 3, 3), strides=(0, 9, 3, 1), name="w")   # every K shares one filter
        y = g.conv_fprop(x, w)
        y.set_output(True).set_name("y")
        g.validate()
        plan = device.build_sync(g)
    except (hd.GraphError, hd.NotSupportedError):
        return
    xv = rng.uniform(-1, 1, (1, 2, 5, 5)).astype(np.float32)
    base = rng.uniform(-1, 1, 18).astype(np.float32)
    wv = np.lib.stride_tricks.as_strided(base, (3, 2, 3, 3), (0, 36, 12, 4))
    yv = np.full((1, 3, 3, 3), np.nan, np.float32)
    plan.execute_sync({"x": xv, "w": wv, "y": yv})
    assert_close(yv, ref.conv_fprop(xv, wv), *tol("conv_fprop", "float32"), "zero-stride weights")


def test_workspace_limit_minimum_still_correct(device):
    """MIOpen #90, pytorch #49207: the smallest workspace limit offered picks an algorithm
    that fits it, and the result stays correct."""
    import hipdnn_async as hd
    rng = np.random.default_rng(90)
    h = Harness("float32", "NHWC")
    x = h.input("x", rng.uniform(-1, 1, (2, 8, 9, 9)))
    w = h.input("w", rng.uniform(-1, 1, (8, 8, 3, 3)))
    h.output(h.g.conv_fprop(x, w, padding=(1, 1)), "y")
    eng = hd.engines(h.g, device)[0]
    knob = {k.id: k for k in eng.knobs}["global.workspace_size_limit"]
    got = h.run(device, knobs={"global.workspace_size_limit": knob.min})["y"]
    assert h.plan.workspace_size <= knob.min
    assert_close(got, ref.conv_fprop(h.ref["x"], h.ref["w"], (1, 1), (1, 1)), *tol("conv_fprop", "float32"),
                 f"workspace limit {knob.min}, algorithm {h.plan.algorithm}")
