# cython: boundscheck=False, wraparound=False, cdivision=True, language_level=3
"""Compiled CPU loops for the cpu provider (``hipdnn_async.providers.cpu._kernels``).

Wrapping contract
-----------------
Covered: the batchnorm family (per-channel statistics, the fused normalise + shift +
activation pass, the fused DReLU + batchnorm-backward reduction and dx pass) and the
per-channel bias + activation epilogue used by the fused convolution pattern.

Every function takes 3-D typed memoryviews over the logical (N, C, S) view of a tensor
(S = product of the spatial dims), with **any** element strides: NHWC buffers arrive as
views whose channel stride is 1. Elements are float32 or float64 (Cython fused type
``floating``); the Python layer (``_batchnorm.py``) converts half and bfloat16 to float32
first. Per-channel parameters are contiguous float64 vectors of length C. All arithmetic
and accumulation is in float64; results are rounded once to the output element type.

Loop order follows memory: when the channel axis has the smallest stride the channel loop
is innermost, otherwise the spatial loop is. All loops run with the GIL released; there
is no OpenMP (two CPU streams already run on two threads).

Errors: shapes are checked by the Python layer; these functions raise only ``ValueError``
for a mismatch they detect themselves.
"""
from libc.math cimport sqrt
from cython cimport floating

__all__ = [
    "channel_stats",
    "scale_shift_act",
    "bias_act",
    "relu_backward",
    "bn_backward_reduce",
    "bn_backward_dx",
]


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------

cdef inline double _act(double v, double lower, double upper) noexcept nogil:
    """clamp(v, lower, upper) with NaN propagation and no -0.0 (v + 0.0 maps -0.0 to +0.0)."""
    if v != v:
        return v
    if v < lower:
        v = lower
    elif v > upper:
        v = upper
    return v + 0.0


cdef inline double _dact(double y, double dy, double lower, double upper) noexcept nogil:
    """RELU_BWD: dy where lower < y < upper, 0 elsewhere; a NaN forward value gives NaN."""
    if y != y:
        return y
    if lower < y and y < upper:
        return dy
    return 0.0



# ----------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------

def channel_stats(const floating[:, :, :] x, double[::1] mean, double[::1] var):
    """Per-channel mean and biased variance over N and S (two passes, float64 sums).

    Parameters
    ----------
    x : float32 or float64 array, dims (N, C, S), any strides
    mean, var : float64 arrays of length C, written
    """
    cdef Py_ssize_t n_, c_, s_, N = x.shape[0], C = x.shape[1], S = x.shape[2]
    cdef double m = <double>(N * S)
    cdef double d
    cdef bint cin
    if mean.shape[0] != C or var.shape[0] != C:
        raise ValueError(f"channel_stats: mean/var need length {C}; got {mean.shape[0]}, {var.shape[0]}")
    cin = C > 1 and S > 1 and abs(x.strides[1]) < abs(x.strides[2])
    with nogil:
        for c_ in range(C):
            mean[c_] = 0.0
            var[c_] = 0.0
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        mean[c_] += x[n_, c_, s_]
        else:
            for n_ in range(N):
                for c_ in range(C):
                    d = 0.0
                    for s_ in range(S):
                        d += x[n_, c_, s_]
                    mean[c_] += d
        for c_ in range(C):
            mean[c_] = mean[c_] / m
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        d = x[n_, c_, s_] - mean[c_]
                        var[c_] += d * d
        else:
            for n_ in range(N):
                for c_ in range(C):
                    for s_ in range(S):
                        d = x[n_, c_, s_] - mean[c_]
                        var[c_] += d * d
        for c_ in range(C):
            var[c_] = var[c_] / m


# ----------------------------------------------------------------------------
# Forward element-wise passes
# ----------------------------------------------------------------------------

def scale_shift_act(const floating[:, :, :] x, floating[:, :, :] y, const double[::1] mean,
                    const double[::1] a, const double[::1] bias, bint act, double lower,
                    double upper):
    """y = act((x - mean[c]) * a[c] + bias[c]); act is clamp(lower, upper) when ``act``.

    With a = scale * inv_variance this is batchnorm forward (training or inference),
    optionally fused with RELU_FWD.
    """
    cdef Py_ssize_t n_, c_, s_, N = x.shape[0], C = x.shape[1], S = x.shape[2]
    cdef double v
    cdef bint cin = C > 1 and S > 1 and abs(x.strides[1]) < abs(x.strides[2])
    if y.shape[0] != N or y.shape[1] != C or y.shape[2] != S:
        raise ValueError("scale_shift_act: x and y shapes differ")
    with nogil:
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        v = (x[n_, c_, s_] - mean[c_]) * a[c_] + bias[c_]
                        if act:
                            v = _act(v, lower, upper)
                        y[n_, c_, s_] = <floating>v
        else:
            for n_ in range(N):
                for c_ in range(C):
                    for s_ in range(S):
                        v = (x[n_, c_, s_] - mean[c_]) * a[c_] + bias[c_]
                        if act:
                            v = _act(v, lower, upper)
                        y[n_, c_, s_] = <floating>v


def bias_act(const floating[:, :, :] x, floating[:, :, :] y, const double[::1] bias,
             bint has_bias, double lower, double upper):
    """y = clamp(x + bias[c], lower, upper) (bias skipped when not ``has_bias``)."""
    cdef Py_ssize_t n_, c_, s_, N = x.shape[0], C = x.shape[1], S = x.shape[2]
    cdef double v
    cdef bint cin = C > 1 and S > 1 and abs(x.strides[1]) < abs(x.strides[2])
    if y.shape[0] != N or y.shape[1] != C or y.shape[2] != S:
        raise ValueError("bias_act: x and y shapes differ")
    with nogil:
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        v = x[n_, c_, s_]
                        if has_bias:
                            v = v + bias[c_]
                        y[n_, c_, s_] = <floating>_act(v, lower, upper)
        else:
            for n_ in range(N):
                for c_ in range(C):
                    for s_ in range(S):
                        v = x[n_, c_, s_]
                        if has_bias:
                            v = v + bias[c_]
                        y[n_, c_, s_] = <floating>_act(v, lower, upper)


def relu_backward(const floating[:, :, :] y, const floating[:, :, :] dy, floating[:, :, :] dx,
                  double lower, double upper):
    """dx = dy where lower < y < upper, else 0; NaN in y gives NaN (RELU_BWD)."""
    cdef Py_ssize_t n_, c_, s_, N = y.shape[0], C = y.shape[1], S = y.shape[2]
    cdef bint cin = C > 1 and S > 1 and abs(y.strides[1]) < abs(y.strides[2])
    with nogil:
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        dx[n_, c_, s_] = <floating>_dact(y[n_, c_, s_], dy[n_, c_, s_], lower, upper)
        else:
            for n_ in range(N):
                for c_ in range(C):
                    for s_ in range(S):
                        dx[n_, c_, s_] = <floating>_dact(y[n_, c_, s_], dy[n_, c_, s_], lower, upper)


# ----------------------------------------------------------------------------
# Batchnorm backward (optionally fused with DReLU of the recomputed forward)
# ----------------------------------------------------------------------------

cdef inline double _grad(double g, double xv, Py_ssize_t c, const double[::1] scale,
                         const double[::1] mean, const double[::1] inv,
                         const double[::1] bn_bias, bint drelu, double lower,
                         double upper) noexcept nogil:
    """The incoming gradient, masked by RELU_BWD of y_bn = scale*(x-mean)*inv + bn_bias."""
    if drelu:
        return _dact(scale[c] * (xv - mean[c]) * inv[c] + bn_bias[c], g, lower, upper)
    return g


def bn_backward_reduce(const floating[:, :, :] dy, const floating[:, :, :] x,
                       const double[::1] scale, const double[::1] mean,
                       const double[::1] inv, const double[::1] bn_bias, bint drelu,
                       double lower, double upper, double[::1] dbias, double[::1] dscale):
    """dbias[c] = sum(g), dscale[c] = sum(g * (x - mean) * inv), g the (masked) gradient."""
    cdef Py_ssize_t n_, c_, s_, N = x.shape[0], C = x.shape[1], S = x.shape[2]
    cdef double g, xh
    cdef bint cin = C > 1 and S > 1 and abs(x.strides[1]) < abs(x.strides[2])
    with nogil:
        for c_ in range(C):
            dbias[c_] = 0.0
            dscale[c_] = 0.0
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        g = _grad(dy[n_, c_, s_], x[n_, c_, s_], c_, scale, mean, inv,
                                  bn_bias, drelu, lower, upper)
                        xh = (x[n_, c_, s_] - mean[c_]) * inv[c_]
                        dbias[c_] += g
                        dscale[c_] += g * xh
        else:
            for n_ in range(N):
                for c_ in range(C):
                    for s_ in range(S):
                        g = _grad(dy[n_, c_, s_], x[n_, c_, s_], c_, scale, mean, inv,
                                  bn_bias, drelu, lower, upper)
                        xh = (x[n_, c_, s_] - mean[c_]) * inv[c_]
                        dbias[c_] += g
                        dscale[c_] += g * xh


def bn_backward_dx(const floating[:, :, :] dy, const floating[:, :, :] x, floating[:, :, :] dx,
                   const double[::1] scale, const double[::1] mean, const double[::1] inv,
                   const double[::1] bn_bias, bint drelu, double lower, double upper,
                   const double[::1] dbias, const double[::1] dscale):
    """dx = scale*inv/m * (m*g - dbias - xhat*dscale), m = N*S, xhat = (x - mean)*inv."""
    cdef Py_ssize_t n_, c_, s_, N = x.shape[0], C = x.shape[1], S = x.shape[2]
    cdef double m = <double>(N * S)
    cdef double g, xh
    cdef bint cin = C > 1 and S > 1 and abs(x.strides[1]) < abs(x.strides[2])
    with nogil:
        if cin:
            for n_ in range(N):
                for s_ in range(S):
                    for c_ in range(C):
                        g = _grad(dy[n_, c_, s_], x[n_, c_, s_], c_, scale, mean, inv,
                                  bn_bias, drelu, lower, upper)
                        xh = (x[n_, c_, s_] - mean[c_]) * inv[c_]
                        dx[n_, c_, s_] = <floating>(scale[c_] * inv[c_] / m
                                                    * (m * g - dbias[c_] - xh * dscale[c_]))
        else:
            for n_ in range(N):
                for c_ in range(C):
                    for s_ in range(S):
                        g = _grad(dy[n_, c_, s_], x[n_, c_, s_], c_, scale, mean, inv,
                                  bn_bias, drelu, lower, upper)
                        xh = (x[n_, c_, s_] - mean[c_]) * inv[c_]
                        dx[n_, c_, s_] = <floating>(scale[c_] * inv[c_] / m
                                                    * (m * g - dbias[c_] - xh * dscale[c_]))
