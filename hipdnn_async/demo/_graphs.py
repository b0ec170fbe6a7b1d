"""One small graph per operation of the demo network, each matching one of the nine patterns.

Every graph is NCHW float32 with fixed tensor names, so variant packs are keyed by name:
``x``, ``w``, ``y`` (conv fprop); ``dy``, ``w``, ``dx`` (dgrad); ``dy``, ``x``, ``dw``
(wgrad); ``scale``, ``bias``, ``mean``, ``inv_variance``, ``variance``,
``running_mean``, ``running_var``, ``next_running_mean``, ``next_running_var``,
``dscale``, ``dbias`` (batchnorm).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import hipdnn_async as hd

__all__ = ["LayerSpec", "conv_fprop", "conv_dgrad", "conv_wgrad", "bn_training",
           "bn_backward", "bn_drelu_backward", "bn_inference_variance", "conv_bias_act"]

# Clip bounds that make RELU_FWD the identity (clamp to the float32 range), so a layer
# without an activation still runs as the fused convolution + bias + activation pattern.
_IDENTITY_CLIP = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class LayerSpec:
    """One convolution layer and the batchnorm after it.

    ``bn`` is ``"relu"`` (batchnorm + ReLU), ``"plain"`` (batchnorm alone) or None.
    """

    name: str
    in_channels: int
    out_channels: int
    kernel: int
    stride: int = 1
    padding: int = 0
    bn: str | None = None

    @property
    def w_dims(self) -> tuple:
        return (self.out_channels, self.in_channels, self.kernel, self.kernel)

    def out_size(self, size: int) -> int:
        """Output height (= width) for an input of `size` (docs/contract/semantics.md)."""
        return (size + 2 * self.padding - (self.kernel - 1) - 1) // self.stride + 1


def _graph(name: str) -> hd.Graph:
    f = hd.DataType.FLOAT
    return hd.Graph(name=name, io_data_type=f, intermediate_data_type=f, compute_data_type=f)


def _t(g, name, dims):
    return g.tensor(dims=tuple(dims), layout="NCHW", name=name)


def _stat(g, name, c):
    return g.tensor(dims=(1, c, 1, 1), layout="NCHW", name=name)


def _conv_kw(layer: LayerSpec) -> dict:
    return {"padding": (layer.padding,) * 2, "stride": (layer.stride,) * 2,
            "dilation": (1, 1)}


def _out(t, name):
    return t.set_output(True).set_name(name)


def conv_fprop(layer: LayerSpec, n: int, size: int) -> hd.Graph:
    """CONV_FPROP: y = conv(x, w), x dims (n, C, size, size)."""
    g = _graph(f"{layer.name}.fprop")
    x = _t(g, "x", (n, layer.in_channels, size, size))
    w = _t(g, "w", layer.w_dims)
    _out(g.conv_fprop(x, w, name=f"{layer.name}_fprop", **_conv_kw(layer)), "y")
    return g.validate()


def conv_dgrad(layer: LayerSpec, n: int, size: int) -> hd.Graph:
    """CONV_DGRAD: dx = dgrad(dy, w), dx dims (n, C, size, size)."""
    g = _graph(f"{layer.name}.dgrad")
    out = layer.out_size(size)
    dy = _t(g, "dy", (n, layer.out_channels, out, out))
    w = _t(g, "w", layer.w_dims)
    _out(g.conv_dgrad(dy, w, dx_dims=(n, layer.in_channels, size, size),
                      name=f"{layer.name}_dgrad", **_conv_kw(layer)), "dx")
    return g.validate()


def conv_wgrad(layer: LayerSpec, n: int, size: int) -> hd.Graph:
    """CONV_WGRAD: dw = wgrad(dy, x), x dims (n, C, size, size)."""
    g = _graph(f"{layer.name}.wgrad")
    out = layer.out_size(size)
    dy = _t(g, "dy", (n, layer.out_channels, out, out))
    x = _t(g, "x", (n, layer.in_channels, size, size))
    _out(g.conv_wgrad(dy, x, dw_dims=layer.w_dims, name=f"{layer.name}_wgrad",
                      **_conv_kw(layer)), "dw")
    return g.validate()


def bn_training(layer: LayerSpec, n: int, size: int, *, epsilon: float,
                momentum: float) -> hd.Graph:
    """BN_TRAINING_RELU (``layer.bn == "relu"``) or BN_TRAINING, with running statistics."""
    c = layer.out_channels
    g = _graph(f"{layer.name}.bn_training")
    x = _t(g, "x", (n, c, size, size))
    y, mean, inv_var, next_mean, next_var = g.batchnorm(
        x, _stat(g, "scale", c), _stat(g, "bias", c), epsilon=epsilon, momentum=momentum,
        prev_running_mean=_stat(g, "running_mean", c),
        prev_running_variance=_stat(g, "running_var", c), name=f"{layer.name}_bn")
    if layer.bn == "relu":
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, name=f"{layer.name}_relu")
    _out(y, "y")
    _out(mean, "mean")
    _out(inv_var, "inv_variance")
    _out(next_mean, "next_running_mean")
    _out(next_var, "next_running_var")
    return g.validate()


def bn_backward(layer: LayerSpec, n: int, size: int) -> hd.Graph:
    """BN_BACKWARD: (dx, dscale, dbias) from dy, x and the saved mean / inv_variance."""
    c = layer.out_channels
    g = _graph(f"{layer.name}.bn_backward")
    dy = _t(g, "dy", (n, c, size, size))
    x = _t(g, "x", (n, c, size, size))
    dx, dscale, dbias = g.batchnorm_backward(
        dy, x, _stat(g, "scale", c), mean=_stat(g, "mean", c),
        inv_variance=_stat(g, "inv_variance", c), name=f"{layer.name}_bn_backward")
    _out(dx, "dx")
    _out(dscale, "dscale")
    _out(dbias, "dbias")
    return g.validate()


def bn_drelu_backward(layer: LayerSpec, n: int, size: int) -> hd.Graph:
    """BN_INFERENCE_DRELU_BACKWARD: batchnorm inference -> RELU_BWD -> batchnorm backward.

    The forward output is recomputed from x and the saved mean / inv_variance; dy is the
    gradient at the ReLU's output.
    """
    c = layer.out_channels
    g = _graph(f"{layer.name}.bn_drelu_backward")
    x = _t(g, "x", (n, c, size, size))
    dy = _t(g, "dy", (n, c, size, size))
    scale, bias = _stat(g, "scale", c), _stat(g, "bias", c)
    mean, inv_var = _stat(g, "mean", c), _stat(g, "inv_variance", c)
    y_bn = g.batchnorm_inference(x, mean, inv_var, scale, bias, name=f"{layer.name}_bn_inf")
    dy_bn = g.pointwise(y_bn, dy, mode=hd.PointwiseMode.RELU_BWD, name=f"{layer.name}_drelu")
    dx, dscale, dbias = g.batchnorm_backward(dy_bn, x, scale, mean=mean,
                                             inv_variance=inv_var,
                                             name=f"{layer.name}_bn_backward")
    _out(dx, "dx")
    _out(dscale, "dscale")
    _out(dbias, "dbias")
    return g.validate()


def bn_inference_variance(layer: LayerSpec, n: int, size: int, *,
                          epsilon: float) -> hd.Graph:
    """BN_INFERENCE_VARIANCE: y from x and the running mean / variance."""
    c = layer.out_channels
    g = _graph(f"{layer.name}.bn_inference")
    x = _t(g, "x", (n, c, size, size))
    _out(g.batchnorm_inference_variance_ext(
        x, _stat(g, "mean", c), _stat(g, "variance", c), _stat(g, "scale", c),
        _stat(g, "bias", c), epsilon=epsilon, name=f"{layer.name}_bn_inf"), "y")
    return g.validate()


def conv_bias_act(layer: LayerSpec, n: int, size: int) -> hd.Graph:
    """CONV_FPROP_BIAS_RELU: y = act(conv(x, w) + bias).

    The activation is ReLU where the layer's batchnorm had one, else RELU_FWD clamped to
    the float32 range (the identity).
    """
    g = _graph(f"{layer.name}.folded")
    x = _t(g, "x", (n, layer.in_channels, size, size))
    w = _t(g, "w", layer.w_dims)
    y = g.conv_fprop(x, w, name=f"{layer.name}_fprop", **_conv_kw(layer))
    y = g.pointwise(y, _stat(g, "bias", layer.out_channels), mode=hd.PointwiseMode.ADD,
                    name=f"{layer.name}_bias")
    if layer.bn == "relu":
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, name=f"{layer.name}_relu")
    else:
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=-_IDENTITY_CLIP,
                        relu_upper_clip=_IDENTITY_CLIP, name=f"{layer.name}_identity")
    _out(y, "y")
    return g.validate()
