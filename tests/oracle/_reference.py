"""Independent float64 NumPy references for the oracle suite.

Written from the math (cross-correlation sums over sliding windows, the batchnorm formulas
of ``docs/contract/semantics.md``), never from ``hipdnn_async.providers``. Every function
takes *logical* arrays (dims N, C, [D,] H, W), converts them to float64 and returns float64.

References
----------
.. [1] cuDNN developer guide, convolution formulas (output size, dgrad/wgrad as adjoints).
.. [2] Ioffe & Szegedy 2015, batch normalization; backward as in cuDNN/MIOpen
       ``BatchNormalizationBackward`` with saved mean and inverse standard deviation.
"""
from __future__ import annotations

import itertools

import numpy as np

__all__ = [
    "conv_out_dims",
    "conv_fprop",
    "conv_dgrad",
    "conv_wgrad",
    "bn_training",
    "bn_inference",
    "bn_inference_variance",
    "bn_backward",
    "relu",
    "relu_bwd",
]


def _f64(a):
    return np.asarray(a).astype(np.float64)


def _tup(v, nsp, default):
    if v is None:
        return (default,) * nsp
    if np.isscalar(v):
        return (int(v),) * nsp
    return tuple(int(t) for t in v)


def conv_out_dims(x_dims, w_dims, pre, post, stride, dilation):
    """Output dims (N, K, *out) of a cross-correlation; raises ValueError if < 1."""
    nsp = len(x_dims) - 2
    out = []
    for i in range(nsp):
        o = (x_dims[2 + i] + pre[i] + post[i] - dilation[i] * (w_dims[2 + i] - 1) - 1) // stride[i] + 1
        if o < 1:
            raise ValueError(f"output size {o} < 1 in spatial dim {i}")
        out.append(o)
    return (x_dims[0], w_dims[0], *out)


def _params(nsp, pre, post, stride, dilation):
    return (_tup(pre, nsp, 0), _tup(post, nsp, 0), _tup(stride, nsp, 1), _tup(dilation, nsp, 1))


def _window(nsp, offs, dilation, stride, out):
    # index tuple selecting, for kernel offset `offs`, the padded-input positions
    # offs*dilation + stride*o for o in range(out) (one slice per spatial dim)
    return tuple(slice(offs[i] * dilation[i], offs[i] * dilation[i] + stride[i] * (out[i] - 1) + 1,
                       stride[i]) for i in range(nsp))


def conv_fprop(x, w, pre=None, post=None, stride=None, dilation=None):
    """y[n,k,o] = sum_{c,r} x_pad[n, g*Cg + c, o*s + r*d] * w[k, c, r]  (groups = C // w.C)."""
    x, w = _f64(x), _f64(w)
    nsp = x.ndim - 2
    pre, post, stride, dilation = _params(nsp, pre, post, stride, dilation)
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    groups = c // cg
    kg = k // groups
    y_dims = conv_out_dims(x.shape, w.shape, pre, post, stride, dilation)
    out = y_dims[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pre[i], post[i]) for i in range(nsp)])
    xp = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = w.reshape(groups, kg, cg, *w.shape[2:])
    y = np.zeros((n, groups, kg, *out))
    for offs in itertools.product(*[range(r) for r in w.shape[2:]]):
        win = (slice(None),) * 3 + _window(nsp, offs, dilation, stride, out)
        xs = xp[win]                                   # (n, g, cg, *out)
        wk = wg[(slice(None),) * 3 + offs]             # (g, kg, cg)
        y += np.einsum("ngc...,gkc->ngk...", xs, wk)
    return y.reshape(y_dims)


def conv_dgrad(dy, w, dx_dims, pre=None, post=None, stride=None, dilation=None):
    """Adjoint of conv_fprop in x: scatter dy*w back to every input position it read."""
    dy, w = _f64(dy), _f64(w)
    nsp = dy.ndim - 2
    pre, post, stride, dilation = _params(nsp, pre, post, stride, dilation)
    n, c = dx_dims[:2]
    k, cg = w.shape[:2]
    groups = c // cg
    kg = k // groups
    out = dy.shape[2:]
    expect = conv_out_dims(tuple(dx_dims), w.shape, pre, post, stride, dilation)
    if tuple(expect) != tuple(dy.shape):
        raise ValueError(f"dy dims {dy.shape} do not match forward output {expect} of dx {dx_dims}")
    padded = [dx_dims[2 + i] + pre[i] + post[i] for i in range(nsp)]
    dxp = np.zeros((n, groups, cg, *padded))
    dyg = dy.reshape(n, groups, kg, *out)
    wg = w.reshape(groups, kg, cg, *w.shape[2:])
    for offs in itertools.product(*[range(r) for r in w.shape[2:]]):
        win = (slice(None),) * 3 + _window(nsp, offs, dilation, stride, out)
        wk = wg[(slice(None),) * 3 + offs]
        dxp[win] += np.einsum("ngk...,gkc->ngc...", dyg, wk)
    crop = (slice(None),) * 3 + tuple(slice(pre[i], pre[i] + dx_dims[2 + i]) for i in range(nsp))
    return dxp[crop].reshape(tuple(dx_dims))


def conv_wgrad(dy, x, dw_dims, pre=None, post=None, stride=None, dilation=None):
    """dw[k,c,r] = sum_{n,o} dy[n,k,o] * x_pad[n, g*Cg + c, o*s + r*d]."""
    dy, x = _f64(dy), _f64(x)
    nsp = x.ndim - 2
    pre, post, stride, dilation = _params(nsp, pre, post, stride, dilation)
    n, c = x.shape[:2]
    k, cg = dw_dims[:2]
    groups = c // cg
    kg = k // groups
    expect = conv_out_dims(x.shape, tuple(dw_dims), pre, post, stride, dilation)
    if tuple(expect) != tuple(dy.shape):
        raise ValueError(f"dy dims {dy.shape} do not match forward output {expect}")
    out = dy.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pre[i], post[i]) for i in range(nsp)])
    xp = xp.reshape(n, groups, cg, *xp.shape[2:])
    dyg = dy.reshape(n, groups, kg, *out)
    dw = np.zeros((groups, kg, cg, *dw_dims[2:]))
    for offs in itertools.product(*[range(r) for r in dw_dims[2:]]):
        win = (slice(None),) * 3 + _window(nsp, offs, dilation, stride, out)
        xs = xp[win]
        sp = "xyz"[:nsp]  # explicit spatial subscripts: summed over n and every output position
        dw[(slice(None),) * 3 + offs] = np.einsum(f"ngk{sp},ngc{sp}->gkc", dyg, xs)
    return dw.reshape(tuple(dw_dims))


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _chan(v, ndim):
    # (1, C, 1, ...) or (C,) -> broadcastable (1, C, 1, ...)
    v = _f64(v).reshape(-1)
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def bn_training(x, scale, bias, epsilon, momentum=None, prev_running_mean=None,
                prev_running_variance=None):
    """Spatial batchnorm training; returns dict y, mean, inv_variance[, next_running_*].

    mean and biased var over N and spatial dims; inv_variance = 1/sqrt(var + eps);
    running variance updated with the unbiased (m/(m-1)) variance (docs/contract/semantics.md).
    """
    x = _f64(x)
    ax = _axes(x)
    m = x.size // x.shape[1] if x.shape[1] else 0
    mean = x.mean(axis=ax, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=ax, keepdims=True)
    inv = 1.0 / np.sqrt(var + epsilon)
    y = _chan(scale, x.ndim) * (x - mean) * inv + _chan(bias, x.ndim)
    out = {"y": y, "mean": mean, "inv_variance": inv}
    if prev_running_mean is not None:
        out["next_running_mean"] = (1 - momentum) * _chan(prev_running_mean, x.ndim) + momentum * mean
        out["next_running_variance"] = ((1 - momentum) * _chan(prev_running_variance, x.ndim)
                                        + momentum * var * m / (m - 1))
    return out


def bn_inference(x, mean, inv_variance, scale, bias):
    """y = scale*(x - mean)*inv_variance + bias, per channel."""
    x = _f64(x)
    nd = x.ndim
    return _chan(scale, nd) * (x - _chan(mean, nd)) * _chan(inv_variance, nd) + _chan(bias, nd)


def bn_inference_variance(x, mean, variance, scale, bias, epsilon):
    """y = scale*(x - mean)/sqrt(variance + eps) + bias, per channel."""
    x = _f64(x)
    nd = x.ndim
    return (_chan(scale, nd) * (x - _chan(mean, nd)) / np.sqrt(_chan(variance, nd) + epsilon)
            + _chan(bias, nd))


def bn_backward(dy, x, scale, mean, inv_variance):
    """Batchnorm gradients with saved statistics; returns dict dx, dscale, dbias.

    xhat = (x-mean)*inv; dbias = sum dy; dscale = sum dy*xhat;
    dx = scale*inv/m * (m*dy - dbias - xhat*dscale), m = N*spatial.
    """
    dy, x = _f64(dy), _f64(x)
    nd = x.ndim
    ax = _axes(x)
    m = x.size // x.shape[1]
    inv = _chan(inv_variance, nd)
    xhat = (x - _chan(mean, nd)) * inv
    dbias = dy.sum(axis=ax, keepdims=True)
    dscale = (dy * xhat).sum(axis=ax, keepdims=True)
    dx = _chan(scale, nd) * inv / m * (m * dy - dbias - xhat * dscale)
    return {"dx": dx, "dscale": dscale, "dbias": dbias}


def relu(x, lower=None, upper=None):
    """RELU_FWD: max(x, 0); min(max(x,0), upper); clamp(x, lower, upper). NaN propagates,
    and the result is never -0.0 (a -0.0 input gives +0.0)."""
    x = _f64(x)
    lo = 0.0 if lower is None else float(lower)
    y = np.where(x > lo, x, lo)                       # x > lo false for NaN -> handled below
    if upper is not None:
        y = np.where(y < upper, y, float(upper))
    y = np.where(np.isnan(x), np.nan, y)
    return y + 0.0                                    # -0.0 + 0.0 == +0.0


def relu_bwd(y_fwd, dy, lower=None, upper=None):
    """RELU_BWD(in0=forward input, in1=dy): dy where lower < in0 < upper (strictly), else 0
    (docs/contract/semantics.md, "Pointwise"). Without an upper clip the active range is
    (lower, +inf]: in0 = +inf passes dy (relu(+inf) = +inf with slope 1); under a clip
    u, +inf is not below u and gives 0. NaN where in0 is NaN (the gradient is undefined
    there: NaN propagates on the CPU)."""
    y_fwd, dy = _f64(y_fwd), _f64(dy)
    lo = 0.0 if lower is None else float(lower)
    inside = y_fwd > lo
    if upper is not None:
        inside &= y_fwd < float(upper)
    return np.where(np.isnan(y_fwd), np.nan, np.where(inside, dy, 0.0))
