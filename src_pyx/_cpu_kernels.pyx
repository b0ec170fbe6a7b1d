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

``bias_relu`` is the exception to the above: it takes whole arrays of any rank with
dims (N, C, ...), any element strides, in float32, bfloat16 or float16 (16-bit elements as
raw bits), and computes in float32 with the rounding to the output type done exactly
(see its docstring); its inner loops are C (``_relu_rows.h``), built for the baseline ISA,
AVX-512 and AVX2 and chosen at run time (``bias_relu_isa``). ``convert`` (exact element-type
conversion between the same three types, NumPy's ``astype``) shares its walk over the
strides and its split over oneDNN's OpenMP team (``_axes``, ``_run``, ``_share``).

``bn_training_statistics`` and ``bn_inference_factor`` are the per-channel host work
around the batchnorm rows and oneDNN's inference primitives (``onednn/_bnorm.py``): 1-D
float32 vectors of length C with any stride (the (1, C, 1, 1) tensors reshaped), float64
arithmetic rounded once to float32, one loop over C instead of a dozen NumPy calls.

Errors: shapes are checked by the Python layer; these functions raise only ``ValueError``
for a mismatch they detect themselves.
"""
from libc.math cimport INFINITY, nextafterf, sqrt
from libc.stdint cimport int16_t, int32_t, uint16_t, uint32_t
from cython cimport floating
cimport numpy as cnp
import os as _os    # as _os: "os" names output strides in the C declarations below

import numpy as np
from libc.stdlib cimport free, malloc

from hipdnn_async.runtime._onednn cimport run_on_team, team_barrier, team_size

cnp.import_array()

# per-channel vectors of this type are refused: the kernels would read past their mask
_MaskedArray = np.ma.MaskedArray

__all__ = [
    "channel_stats",
    "scale_shift_act",
    "bias_act",
    "bias_relu",
    "bias_relu_isa",
    "convert",
    "BIAS_RELU_KINDS",
    "relu_backward",
    "bn_backward_reduce",
    "bn_backward_dx",
    "bn_training_statistics",
    "bn_inference_factor",
    "bn_rows",
    "BN_ROWS_TRAINING",
    "BN_ROWS_INFERENCE",
    "BN_ROWS_BACKWARD",
    "bn_rows_isa",
    "bn_rows_builds",
    "nonfinite",
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
    """RELU_BWD: dy where lower < y < upper, 0 elsewhere; a NaN forward value gives NaN.
    ``upper`` +inf is no upper clip: dy where lower < y, y = +inf included (relu(+inf) =
    +inf with slope 1)."""
    if y != y:
        return y
    if lower < y and (y < upper or upper == INFINITY):
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
    """dx = dy where lower < y < upper, else 0; NaN in y gives NaN (RELU_BWD). ``upper``
    +inf is no upper clip: dy where lower < y, y = +inf included."""
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


# ----------------------------------------------------------------------------
# Bias + RELU_FWD epilogue on float32 / bfloat16 / float16 (any rank, any strides)
# ----------------------------------------------------------------------------
# The rows themselves are C (_relu_rows.h): compiled for the baseline ISA, AVX-512 and
# AVX2, the one to run chosen by the CPU's features.

cdef extern from "_relu_rows.h" nogil:
    int hd_relu_rows(int base)
    void hd_relu_row(int isa, int xk, int ok, const void* x, Py_ssize_t xs, void* o,
                     Py_ssize_t os, Py_ssize_t n, const float* bv, Py_ssize_t bs, float lo,
                     float hi)
    void hd_relu_row16(int isa, const uint16_t* x, Py_ssize_t xs, uint16_t* o, Py_ssize_t os,
                       Py_ssize_t n, int16_t klo, int16_t khi, int16_t inf, int16_t lo16,
                       int16_t hi16)
    int hd_relu_avx512()
    int hd_relu_avx2()
    int HD_ROWS_AVX512, HD_ROWS_AVX2
    uint32_t hd_bits(float f)
    float hd_flt(uint32_t u)
    void hd_cvt_row(int isa, int xk, int ok, const void* x, Py_ssize_t xs, void* o,
                    Py_ssize_t os, Py_ssize_t n)
    float hd_widen_bf16(uint16_t h)
    float hd_widen_f16(uint16_t h)
    uint16_t hd_narrow_bf16(float v)
    uint16_t hd_narrow_f16(float v)

# Element kinds accepted by bias_relu, by NumPy dtype name.
BIAS_RELU_KINDS = {"float32": 0, "bfloat16": 1, "float16": 2}

cdef enum:
    _MAX_AXES = 64          # NumPy's NPY_MAXDIMS (2.x)

cdef Py_ssize_t[3] _ITEMSIZE = [4, 2, 2]     # bytes per element of each kind


ctypedef struct _Clip:
    float lo, hi            # the clips rounded to the output type (as float32 values)
    int32_t klo, khi        # 16-bit same-type path: order keys of lo16 / hi16
    uint16_t lo16, hi16     # the clips as output bits, -0.0 replaced by +0.0
    uint16_t inf16          # bits of +inf in the 16-bit type (NaN: magnitude above it)
    bint bits16             # take the 16-bit integer path (same 16-bit type, no bias)


def bias_relu_isa() -> str:
    """The instruction set ``bias_relu``'s (and ``convert``'s) rows run with here:
    ``"avx512"`` (avx512f and avx512bw, on x86-64 built with GCC or clang), ``"avx2"``
    (avx2 and fma) or ``"baseline"`` (the build's own)."""
    cdef int rows = hd_relu_rows(0)
    return ("avx512" if rows == HD_ROWS_AVX512 else "avx2" if rows == HD_ROWS_AVX2
            else "baseline")


ctypedef struct _Walk:
    # one pass over two arrays of equal dims (``_axes``): bias_relu's rows or convert's
    char* xp
    char* op
    const float* bp
    int na, isa, xk, ok
    bint convert            # hd_cvt_row (exact conversion) instead of the RELU_FWD rows
    Py_ssize_t* dim
    Py_ssize_t* xst
    Py_ssize_t* ost
    Py_ssize_t* bst
    const _Clip* c


cdef void _run(const _Walk* w, char* xp, char* op, const float* bp,
               const Py_ssize_t* dim) noexcept nogil:
    """Walk the axes: axis 0 is the inner run, axis 1 the rows of a 2-D block, the rest an
    odometer. Strides ``w.xst``/``w.ost`` are in bytes, ``w.bst`` in bias elements (0 or 1)."""
    cdef Py_ssize_t idx[_MAX_AXES]
    cdef int na = w.na
    cdef const Py_ssize_t* xst = w.xst
    cdef const Py_ssize_t* ost = w.ost
    cdef const Py_ssize_t* bst = w.bst
    cdef const _Clip* c = w.c
    cdef Py_ssize_t xs0 = xst[0] // _ITEMSIZE[w.xk], os0 = ost[0] // _ITEMSIZE[w.ok]
    cdef Py_ssize_t nj = dim[1] if na > 1 else 1
    cdef Py_ssize_t xsj = xst[1] if na > 1 else 0
    cdef Py_ssize_t osj = ost[1] if na > 1 else 0
    cdef Py_ssize_t bsj = bst[1] if na > 1 else 0
    cdef Py_ssize_t j
    cdef int k
    for k in range(na):
        idx[k] = 0
    while True:
        for j in range(nj):
            if w.convert:
                hd_cvt_row(w.isa, w.xk, w.ok, xp + j * xsj, xs0, op + j * osj, os0, dim[0])
            elif c.bits16:
                hd_relu_row16(w.isa, <const uint16_t*>(xp + j * xsj), xs0,
                              <uint16_t*>(op + j * osj), os0, dim[0], <int16_t>c.klo,
                              <int16_t>c.khi, <int16_t>c.inf16, <int16_t>c.lo16,
                              <int16_t>c.hi16)
            else:
                hd_relu_row(w.isa, w.xk, w.ok, xp + j * xsj, xs0, op + j * osj, os0, dim[0],
                            (bp + j * bsj) if bp != NULL else NULL, bst[0], c.lo, c.hi)
        k = 2
        while k < na:
            idx[k] += 1
            xp += xst[k]
            op += ost[k]
            if bp != NULL:
                bp += bst[k]
            if idx[k] < dim[k]:
                break
            xp -= xst[k] * dim[k]
            op -= ost[k] * dim[k]
            if bp != NULL:
                bp -= bst[k] * dim[k]
            idx[k] = 0
            k += 1
        if k >= na:
            return


cdef void _share(void* data, int ithr, int nthr) noexcept nogil:
    """Thread ithr of nthr: its share [n ithr / nthr, n (ithr + 1) / nthr) of the outermost
    axis (``_run``'s last), every element of it once."""
    cdef _Walk* w = <_Walk*>data
    cdef Py_ssize_t dim[_MAX_AXES]
    cdef int k, a = w.na - 1
    cdef Py_ssize_t n = w.dim[a], i0 = n * ithr // nthr, i1 = n * (ithr + 1) // nthr
    if i1 <= i0:
        return
    for k in range(w.na):
        dim[k] = w.dim[k]
    dim[a] = i1 - i0
    # axis 0 is the inner run: its strides are in bytes too (_run divides them)
    _run(w, w.xp + w.xst[a] * i0, w.op + w.ost[a] * i0,
         (w.bp + w.bst[a] * i0) if w.bp != NULL else NULL, dim)


cdef int _axes(cnp.ndarray x, cnp.ndarray out, bint bias, Py_ssize_t* dim, Py_ssize_t* xst,
               Py_ssize_t* ost, Py_ssize_t* bst) noexcept:
    """The walk of ``x`` and ``out`` (equal dims, size > 0, rank <= _MAX_AXES) for ``_run``:
    the axes of extent > 1 (an extent-1 channel axis leaves one bias value for all), ordered
    by output stride, innermost first, an axis merged into the one inside it where both
    tensors step through them as one (never the channel axis of a ``bias``). Fills ``dim``
    and the byte strides ``xst``, ``ost`` (``bst``: 1 on the channel axis with a bias, else
    0); returns the number of axes (>= 1)."""
    cdef int nd = x.ndim, na = 0, a, k, best
    for a in range(nd):
        if x.shape[a] == 1:
            continue
        dim[na] = x.shape[a]
        xst[na] = x.strides[a]
        ost[na] = out.strides[a]
        bst[na] = 1 if (a == 1 and bias) else 0
        na += 1
    if na == 0:
        dim[0] = 1
        xst[0] = ost[0] = bst[0] = 0
        return 1
    # Order by output stride (selection sort: few axes), innermost first.
    for a in range(na):
        best = a
        for k in range(a + 1, na):
            if abs(ost[k]) < abs(ost[best]) or (abs(ost[k]) == abs(ost[best])
                                                and abs(xst[k]) < abs(xst[best])):
                best = k
        if best != a:
            dim[a], dim[best] = dim[best], dim[a]
            xst[a], xst[best] = xst[best], xst[a]
            ost[a], ost[best] = ost[best], ost[a]
            bst[a], bst[best] = bst[best], bst[a]
    # Merge an axis into the one inside it when both tensors step through them as one.
    a = 0
    while a + 1 < na:
        if (bst[a] == 0 and bst[a + 1] == 0 and xst[a + 1] == xst[a] * dim[a]
                and ost[a + 1] == ost[a] * dim[a]):
            dim[a] *= dim[a + 1]
            for k in range(a + 1, na - 1):
                dim[k], xst[k], ost[k], bst[k] = dim[k + 1], xst[k + 1], ost[k + 1], bst[k + 1]
            na -= 1
        else:
            a += 1
    return na


cdef void _go(_Walk* w, bint team) noexcept:
    """Run walk ``w`` on this thread, or split among oneDNN's OpenMP team (``team``)."""
    with nogil:
        if team:
            run_on_team(_share, w)
        else:
            _run(w, w.xp, w.op, w.bp, w.dim)


cdef float _f32_odd(double d) noexcept:
    """``d`` rounded to float32 by rounding to odd (then rounding to a 16-bit type is exact)."""
    cdef float f = <float>d
    cdef uint32_t u = hd_bits(f)
    if <double>f != d and (u & 1) == 0 and (u & 0x7f800000) != 0x7f800000:
        u = u + 1 if (<double>f < d) == (f > 0 or (f == 0 and d > 0)) else u - 1
    return hd_flt(u)


cdef uint16_t _narrow_bits(float v, int kind) noexcept:
    return hd_narrow_bf16(v) if kind == 1 else hd_narrow_f16(v)


cdef float _rounded(double d, int kind) noexcept:
    """``d`` correctly rounded to the output kind, as a float32 value."""
    if kind == 0:
        return <float>d
    if kind == 1:
        return hd_widen_bf16(_narrow_bits(_f32_odd(d), 1))
    return hd_widen_f16(_narrow_bits(_f32_odd(d), 2))


cdef int32_t _key(uint16_t h) noexcept:
    return -<int32_t>(h & 0x7fff) if (h & 0x8000) else <int32_t>(h & 0x7fff)


# elements below which ``bias_relu(team=True)`` stays on the calling thread: the team's
# fork and join (~2 us) is worth it only past a few hundred KiB
_TEAM_MIN_ELEMENTS = 1 << 16


def bias_relu(cnp.ndarray x, int x_kind, cnp.ndarray out, int out_kind, const float[::1] bias,
              double lower, double upper, *, bint baseline=False, bint team=False):
    """out = clamp(x + bias[c], lower, upper) + 0.0, one pass, rounded once to ``out``'s type.

    Parameters
    ----------
    x, out : ndarray
        Same dims (N, C, ...), ndim >= 2, any element strides (byte strides multiples of the
        item size, aligned); ``out`` writable. ``out`` may be ``x`` itself (same data and
        strides); any other overlap is the caller's to remove.
    x_kind, out_kind : int
        Element types, ``BIAS_RELU_KINDS``: 0 float32, 1 bfloat16, 2 float16 (16-bit
        arrays may be viewed as uint16: only the bits are read).
    bias : float32 array of length C, contiguous, or None
    lower, upper : float
        Clips, lower <= upper (RELU_FWD without clips is lower 0, upper +inf).
    baseline : bool
        Run the rows built for the baseline ISA even where the AVX2 or AVX-512 ones run
        (``bias_relu_isa``): both give the same bits; for tests comparing them.
    team : bool
        Split the outermost axis among the threads of oneDNN's OpenMP team
        (``runtime._onednn.run_on_team``, under its gate) where there are at least
        65,536 elements: as a pass after a oneDNN convolution, at the speed of PyTorch's
        two-thread ``relu_`` (one thread took about twice its time on 2 cores). Same
        bits either way (every element is computed alone).

    Notes
    -----
    The result equals the exact value clamp(x + bias, lower, upper) + 0.0 rounded to
    nearest-even in the output type: the sum is formed in float32 rounded to odd when the
    output is narrower (``hd_add_odd`` in _relu_rows.h), and rounding commutes with clamping
    against the rounded clips. NaN propagates (bfloat16/float16 NaN results are quiet; a
    float16 output NaN has payload 0x200), +-inf clamp like numbers, -0.0 becomes +0.0. A
    bfloat16/float16 output of a sum below the smallest subnormal can still be -0.0 when
    lower < 0 (as rounding the float64 result would give).
    """
    cdef Py_ssize_t dim[_MAX_AXES]
    cdef Py_ssize_t xst[_MAX_AXES]
    cdef Py_ssize_t ost[_MAX_AXES]
    cdef Py_ssize_t bst[_MAX_AXES]
    cdef _Clip c
    cdef _Walk w
    cdef const float* bp = NULL
    _check_pair("bias_relu", x, x_kind, out, out_kind)
    if bias is not None:
        if bias.shape[0] != x.shape[1]:
            raise ValueError(f"bias_relu: bias needs {x.shape[1]} values; got {bias.shape[0]}")
        bp = &bias[0] if bias.shape[0] else NULL
    if x.size == 0:
        return
    c.lo = _rounded(lower, out_kind)
    c.hi = _rounded(upper, out_kind)
    c.bits16 = x_kind == out_kind and x_kind != 0 and bp == NULL
    c.inf16 = 0x7f80 if out_kind == 1 else 0x7c00
    c.lo16 = c.hi16 = 0
    c.klo = c.khi = 0
    if out_kind != 0:
        # A clip of -0.0 is stored as +0.0 (RELU_FWD never returns -0.0).
        c.lo16 = _narrow_bits(c.lo, out_kind) & (0x7fff if c.lo == 0 else 0xffff)
        c.hi16 = _narrow_bits(c.hi, out_kind) & (0x7fff if c.hi == 0 else 0xffff)
        c.klo = _key(c.lo16)
        c.khi = _key(c.hi16)
    w.na = _axes(x, out, bp != NULL, dim, xst, ost, bst)
    w.xp, w.op, w.bp = <char*>cnp.PyArray_DATA(x), <char*>cnp.PyArray_DATA(out), bp
    w.isa, w.xk, w.ok, w.convert = hd_relu_rows(baseline), x_kind, out_kind, False
    w.dim, w.xst, w.ost, w.bst, w.c = dim, xst, ost, bst, &c
    _go(&w, team and x.size >= _TEAM_MIN_ELEMENTS)


cdef int _check_pair(str where, cnp.ndarray x, int x_kind, cnp.ndarray out,
                     int out_kind) except -1:
    """ValueError unless ``x`` and ``out`` have equal dims of rank 2.._MAX_AXES (rank 1..
    for ``convert``), kinds 0..2 matching their item sizes, and ``out`` is writable."""
    cdef int a, nd = x.ndim, least = 1 if where == "convert" else 2
    if nd < least or out.ndim != nd or nd > _MAX_AXES:
        raise ValueError(f"{where}: need x and out of equal rank {least}..{_MAX_AXES}; got "
                         f"{x.ndim}, {out.ndim}")
    for a in range(nd):
        if x.shape[a] != out.shape[a]:
            raise ValueError(f"{where}: x and out shapes differ: {(<object>x).shape}, "
                             f"{(<object>out).shape}")
    if not (0 <= x_kind <= 2 and 0 <= out_kind <= 2):
        raise ValueError(f"{where}: element kinds {x_kind}, {out_kind}; need 0, 1 or 2")
    if x.itemsize != _ITEMSIZE[x_kind] or out.itemsize != _ITEMSIZE[out_kind]:
        raise ValueError(f"{where}: item sizes {x.itemsize}, {out.itemsize} do not match "
                         f"element kinds {x_kind}, {out_kind}")
    if not (cnp.PyArray_ISNOTSWAPPED(x) and cnp.PyArray_ISNOTSWAPPED(out)):
        # the passes read and write native elements: a '>f2' x would convert other numbers
        raise ValueError(f"{where}: x ({x.dtype.str}) or out ({out.dtype.str}) is in "
                         "non-native byte order")
    if not out.flags.writeable:
        raise ValueError(f"{where}: out is read-only")
    return 0


def convert(cnp.ndarray x, int x_kind, cnp.ndarray out, int out_kind, *,
            bint baseline=False, bint team=False):
    """out = x converted exactly to ``out``'s element type, one pass (NumPy's ``astype``).

    Parameters
    ----------
    x, out : ndarray
        Same dims, rank >= 1, any element strides (byte strides multiples of the item size,
        aligned; negative ones too); ``out`` writable. ``out`` may be ``x`` itself (same
        kind); any other overlap is the caller's to remove.
    x_kind, out_kind : int
        Element types, ``BIAS_RELU_KINDS``: 0 float32, 1 bfloat16, 2 float16 (16-bit
        arrays may be viewed as uint16: only the bits are read).
    baseline : bool
        Run the rows built for the baseline ISA even where the AVX2 or AVX-512 ones run (same
        bits; for tests comparing them).
    team : bool
        Split the outermost axis among the threads of oneDNN's OpenMP team
        (``runtime._onednn.run_on_team``) where there are at least 65,536 elements.

    Notes
    -----
    float16 and bfloat16 to float32 are exact (every value: -0.0, subnormals, +-inf; NaN
    stays NaN with its payload). float32 (and float16 <-> bfloat16) to a 16-bit type rounds
    to nearest-even (IEEE 754-2008 roundTiesToEven, as NumPy's ``astype``), overflow to
    +-inf, NaN stays NaN (quiet: float16 0x7e00, bfloat16 the payload's top bits with the
    quiet bit). The same kind in and out copies the bits. Raises ``ValueError`` for
    unequal dims, a kind not 0..2 or not the array's item size, or a read-only ``out``.
    """
    cdef Py_ssize_t dim[_MAX_AXES]
    cdef Py_ssize_t xst[_MAX_AXES]
    cdef Py_ssize_t ost[_MAX_AXES]
    cdef Py_ssize_t bst[_MAX_AXES]
    cdef _Walk w
    _check_pair("convert", x, x_kind, out, out_kind)
    if x.size == 0:
        return
    w.na = _axes(x, out, False, dim, xst, ost, bst)
    w.xp, w.op, w.bp = <char*>cnp.PyArray_DATA(x), <char*>cnp.PyArray_DATA(out), NULL
    w.isa, w.xk, w.ok, w.convert = hd_relu_rows(baseline), x_kind, out_kind, True
    w.dim, w.xst, w.ost, w.bst, w.c = dim, xst, ost, bst, NULL
    _go(&w, team and x.size >= _TEAM_MIN_ELEMENTS)


cdef bint _dense_order(cnp.ndarray x) noexcept:
    """Whether ``x``'s elements fill ``x.size`` consecutive items from its data pointer
    (packed in some order of its axes, every stride positive)."""
    cdef int nd = cnp.PyArray_NDIM(x), i, j, best
    cdef Py_ssize_t want = cnp.PyArray_ITEMSIZE(x)
    cdef Py_ssize_t st[_MAX_AXES]
    cdef Py_ssize_t dm[_MAX_AXES]
    cdef bint used[_MAX_AXES]
    cdef cnp.npy_intp *strides = cnp.PyArray_STRIDES(x)
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(x)
    cdef int n = 0
    for i in range(nd):
        if dims[i] != 1:
            st[n], dm[n], used[n] = strides[i], dims[i], False
            n += 1
    for i in range(n):            # the axes from the smallest stride up
        best = -1
        for j in range(n):
            if not used[j] and (best < 0 or st[j] < st[best]):
                best = j
        if st[best] != want:
            return False
        used[best] = True
        want *= dm[best]
    return True


ctypedef fused _bits:
    uint16_t
    uint32_t


cdef bint _any_all_ones(const _bits *p, Py_ssize_t n, _bits mask) noexcept nogil:
    """Whether any of ``p[0:n]`` has every bit of ``mask`` set: per block of 256, the
    maximum of the masked values compared once (a loop the compiler vectorises)."""
    cdef Py_ssize_t i = 0, k
    cdef _bits a
    while i < n:
        a = 0
        for k in range(i, min(i + 256, n)):
            a = max(a, p[k] & mask)
        if a == mask:
            return True
        i += 256
    return False


def nonfinite(cnp.ndarray x, int kind):
    """Whether ``x`` holds a NaN or an infinity: its exponent bits all ones.

    Parameters
    ----------
    x : ndarray
        Any dims and strides; read only.
    kind : int
        Its element type, ``BIAS_RELU_KINDS``: 0 float32, 1 bfloat16, 2 float16 (16-bit
        arrays may be viewed as uint16: only the bits are read).

    Notes
    -----
    Packed memory (in any axis order: NCHW, NHWC, ...) is read as one run of bits, in
    blocks of 256 elements whose maximum masked exponent is compared once (a loop the
    compiler vectorises: 0.1 ms for 2.4 MB here); other strides go through NumPy.
    Raises ``ValueError`` for a kind not 0..2 or not the array's item size, or a
    byte-swapped array.
    """
    cdef Py_ssize_t n = x.size
    if kind not in (0, 1, 2) or cnp.PyArray_ITEMSIZE(x) != (4 if kind == 0 else 2):
        raise ValueError(f"nonfinite: kind {kind} does not fit a {x.dtype} array")
    if not x.dtype.isnative:
        raise ValueError(f"nonfinite: a {x.dtype.str} array is not in this machine's byte "
                         "order")
    if n == 0:
        return False
    if not _dense_order(x):
        bits = x.view(np.uint32 if kind == 0 else np.uint16)
        mask = (0x7f800000, 0x7f80, 0x7c00)[kind]
        return bool(((bits & mask) == mask).any())
    cdef bint found
    cdef const char *data = <const char*>cnp.PyArray_DATA(x)
    with nogil:
        if kind == 0:
            found = _any_all_ones(<const uint32_t*>data, n, <uint32_t>0x7f800000u)
        else:
            found = _any_all_ones(<const uint16_t*>data, n,
                                  <uint16_t>(0x7f80 if kind == 1 else 0x7c00))
    return found


# ----------------------------------------------------------------------------
# Per-channel host work around oneDNN's batchnorm (float32 vectors, float64 arithmetic)
# ----------------------------------------------------------------------------

cdef inline bint _wrong_len(const float[:] a, Py_ssize_t n):
    return a is not None and a.shape[0] != n


cdef bint _is_f64(object v):
    """Whether ``v`` is a float64 ndarray (a float64 batch variance: ``bn_rows``'
    ``variance_out``, ``bn_training_statistics``' ``variance``)."""
    return cnp.PyArray_Check(v) and cnp.PyArray_TYPE(<cnp.ndarray>v) == cnp.NPY_FLOAT64


def bn_training_statistics(variance, double epsilon, float[:] inv_variance,
                           const float[:] mean, double momentum, double unbias,
                           const float[:] prev_mean, float[:] next_mean,
                           const float[:] prev_variance, float[:] next_variance):
    """After a training batchnorm that wrote the biased ``variance`` (a float32 vector, or
    a float64 ndarray: ``bn_rows``' ``variance_out`` in float64, which keeps a variance
    beyond FLT_MAX finite, so that inv_variance and the running variance are its
    correctly rounded functions rather than those of +inf):
    ``inv_variance = 1 / sqrt(variance + epsilon)``,
    ``next_mean = (1 - momentum) * prev_mean + momentum * mean``,
    ``next_variance = (1 - momentum) * prev_variance + momentum * variance * unbias``
    (``unbias = m / (m - 1)``, Bessel's correction over the m = N * spatial values of a
    channel), each output skipped where it is None (the running pair updates in place when
    ``prev`` and ``next`` are one buffer: each element is read before it is written)."""
    cdef const float[:] v32 = None
    cdef const double[:] v64 = None
    cdef Py_ssize_t c, C
    cdef double v
    cdef bint wide = _is_f64(variance)
    cdef bint has_inv = inv_variance is not None, has_nm = next_mean is not None
    cdef bint has_nv = next_variance is not None
    if wide:
        v64 = variance
        C = v64.shape[0]
    else:
        v32 = variance
        C = v32.shape[0]
    if (_wrong_len(inv_variance, C) or _wrong_len(mean, C) or _wrong_len(next_mean, C)
            or _wrong_len(prev_mean, C) or _wrong_len(next_variance, C)
            or _wrong_len(prev_variance, C)
            or (has_nm and (mean is None or prev_mean is None))
            or (has_nv and prev_variance is None)):
        raise ValueError(f"bn_training_statistics: vectors of other than {C} channels, or a "
                         "running statistic without its inputs")
    with nogil:
        for c in range(C):
            v = v64[c] if wide else v32[c]
            if has_inv:
                inv_variance[c] = <float>(1.0 / sqrt(v + epsilon))
            if has_nm:
                next_mean[c] = <float>((1.0 - momentum) * prev_mean[c] + momentum * mean[c])
            if has_nv:
                next_variance[c] = <float>((1.0 - momentum) * prev_variance[c]
                                           + momentum * v * unbias)
    return None


def bn_inference_factor(const float[:] scale, const float[:] variance, double epsilon,
                        float[:] factor):
    """``factor = scale / sqrt(variance + epsilon)`` (batchnorm inference's per-channel
    multiplier)."""
    cdef Py_ssize_t c, C = scale.shape[0]
    if variance.shape[0] != C or factor.shape[0] != C:
        raise ValueError(f"bn_inference_factor: vectors of {scale.shape[0]}, "
                         f"{variance.shape[0]}, {factor.shape[0]} channels")
    with nogil:
        for c in range(C):
            factor[c] = <float>(scale[c] / sqrt(variance[c] + epsilon))
    return None


# ----------------------------------------------------------------------------
# Channels-first batchnorm rows (_bn_rows.h), on oneDNN's OpenMP team
# ----------------------------------------------------------------------------

cdef extern from "_bn_rows.h" nogil:
    ctypedef struct hd_bn_job:
        int op, kind, isa
        Py_ssize_t N, C, S
        Py_ssize_t R, W
        Py_ssize_t xr, yr, gr
        const void* x
        Py_ssize_t xn, xc
        void* y
        Py_ssize_t yn, yc
        const void* dy
        Py_ssize_t gn, gc
        const float* scale
        const float* bias
        const float* mean
        const float* var
        const float* inv
        float* mean_out
        float* var_out
        double* var_out64
        float* dscale
        float* dbias
        double eps
        int act
        float lo, hi
        int stream
    void hd_bn_team(void* data, int ithr, int nthr) noexcept
    int hd_bn_rows_isa(int base)
    int hd_bn_bf16_stores()
    int HD_BN_AVX2V
    int HD_BN_TRAINING, HD_BN_INFERENCE, HD_BN_BACKWARD

BN_ROWS_TRAINING, BN_ROWS_INFERENCE, BN_ROWS_BACKWARD = HD_BN_TRAINING, HD_BN_INFERENCE, HD_BN_BACKWARD

cdef extern from "_bn_last.h" nogil:
    ctypedef struct hd_bn_last_job:
        hd_bn_job j
        Py_ssize_t xp, yp, gp, Cp
        int slots
        char* scratch
        void (*barrier)() noexcept nogil
        int group
    void hd_bn_last_team(void* data, int ithr, int nthr) noexcept
    size_t HD_BN_LAST_BLOCK(Py_ssize_t Cp)
    Py_ssize_t hd_bnl_sample(Py_ssize_t i, Py_ssize_t N, Py_ssize_t S)
    int HD_BNL_PIVOT_G


# bytes of x up to which the channels-last rows group pixels by 4 (hd_bnl_group): the
# ResNet-50 activations at batch 8 (6.4 MB float32) gained 13-35 % from the groups, those
# at batch 32 (12.8-25.7 MB) lost 1.7-2.4x
_LAST_GROUP_BYTES = 8 << 20

def last_level_cache_bytes(root="/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of the largest level-3 (or higher) data or unified cache of cpu0, from Linux's
    sysfs (``root``, a path, holds ``index*/{level,type,size}``, sizes as ``32768K``); 32
    MiB where it names none (another OS, a container or VM hiding it or listing L1 and L2
    only, an unreadable or malformed file).

    sysfs, not CPUID: in a VM, CPUID (and so glibc's ``getconf LEVEL3_CACHE_SIZE``) can
    report the host's cache; on the 2-core EPYC guest measured here it reads 320 MiB where
    sysfs and the streamed-store crossover of ``bn_rows`` say 32 MiB. Level 3 and up only:
    an L2 taken for the last level would stream nearly every call, 1.3-1.9x slower while y
    fits the caches.
    """
    best = 0
    try:
        names = _os.listdir(root)
    except (OSError, TypeError, ValueError):
        names = []
    for name in names:
        if not name.startswith("index"):
            continue
        try:
            fields = {}
            for field in ("level", "type", "size"):
                with open(_os.path.join(root, name, field), encoding="ascii") as f:
                    fields[field] = f.read().strip()
        except (OSError, ValueError):     # unreadable; UnicodeDecodeError is a ValueError
            continue
        text, unit = fields["size"], fields["size"].lstrip("0123456789")
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(unit)
        if (fields["type"] in ("Data", "Unified") and fields["level"].isdigit()
                and int(fields["level"]) >= 3 and scale and 0 < len(text) - len(unit) <= 9):
            best = max(best, int(text[:len(text) - len(unit)]) * scale)
    return best or 32 << 20


# The last-level cache against which bn_rows decides to stream y (dx) by default: where the
# activations one call touches (x and y; backward x, dy and dx) pass it, repeated calls
# miss it whatever they do, and streaming y saves its read-for-ownership and keeps x (and
# dy) in the cache. Measured here (2 cores, 32 MiB L3, AVX-512 rows, streamed / cached
# time, best and median of 60 calls each, interleaved): channels-last backward at 3 x 12.8
# MB 0.80-0.87 / 0.78-0.81 and at 3 x 9.6 MB (below) 0.94-1.02 / 0.86-0.92; training and
# inference at 2 x 12.8 MB (below) 1.4-1.9 / 1.1-1.7, at 2 x 19.3 MB 0.95 / 0.83 and 1.15 /
# 0.94, at 2 x 25.7 MB 0.85-0.95 / 0.75-0.90. Channels-first backward at 3 x 12.8 MB 0.61-
# 1.04 / 0.63-1.01, training at 2 x 19.3 MB 0.65 / 0.66, inference 1.32 / 1.09 (its one
# loss). The rule before (y of at least 24 MiB, 3/4 of the L3 as glibc's memcpy) left
# ResNet-50's 32 x 512 x 14 x 14 float32 NHWC backward at 1.08x PyTorch's time.
cdef Py_ssize_t _stream_footprint = last_level_cache_bytes()


cdef inline bint _streams_by_default(int op, Py_ssize_t values, Py_ssize_t itemsize) noexcept:
    # C, not a Python call: bn_rows decides on every execution
    return values * itemsize * (3 if op == HD_BN_BACKWARD else 2) >= _stream_footprint


def bn_streams_by_default(int op, Py_ssize_t values, Py_ssize_t itemsize) -> bool:
    """Whether ``bn_rows`` streams y (dx) when its ``stream`` is None and it can: where the
    activations of the call, ``values`` elements of ``itemsize`` bytes each in x and y (and
    dy for ``BN_ROWS_BACKWARD``), are at least the last-level cache
    (``last_level_cache_bytes``)."""
    return _streams_by_default(op, values, itemsize)


def bn_pivot_samples(Py_ssize_t images, Py_ssize_t pixels) -> list:
    """The pixels (n * pixels + s) whose values the channels-last training pivot reads in
    a job of ``images`` (N) images of ``pixels`` (spatial) pixels each, as three lists (its
    groups: the pivot is the median of their means), ``HD_BNL_PIVOT_G`` samples each
    (``_bn_last.h``, ``hd_bnl_sample``: sample i of the R2 sequence over (image, pixel), in
    group i % 3). For tests that put data there; ValueError where either count is < 1."""
    cdef Py_ssize_t i
    if images < 1 or pixels < 1:
        raise ValueError(f"bn_pivot_samples: {images} images of {pixels} pixels; need >= 1")
    return [[hd_bnl_sample(i, images, pixels) for i in range(g, 3 * HD_BNL_PIVOT_G, 3)]
            for g in range(3)]


def bn_rows_isa(str kind="float32") -> str:
    """The rows ``bn_rows`` runs for elements of ``kind`` (a ``BIAS_RELU_KINDS`` name)
    here: ``"avx512"`` (intrinsics; float16 converted by VCVTPH2PS / VCVTPS2PH, bfloat16
    results rounded by VCVTNEPS2BF16, on CPUs with AVX512_BF16), ``"avx512_auto"`` (the
    compiler's AVX-512 build of the portable rows: bfloat16 without AVX512_BF16),
    ``"avx2"`` (float32 and bfloat16 on CPUs with AVX2 + FMA but not AVX-512:
    intrinsics for the channels-first rows but RELU_BWD's, and bfloat16's channels-last
    y; the compiler's AVX2 build for the rest), ``"avx2_auto"`` (that build: float16
    there) or ``"baseline"``."""
    return _rows_name(hd_bn_rows_isa(0), BIAS_RELU_KINDS[kind])


def bn_rows_builds() -> tuple:
    """The rows builds this CPU can run, ``bn_rows``'s ``isa`` names (for tests of every
    build): ``"baseline"`` always, ``"avx2_auto"`` with AVX2 and FMA (and ``"avx2"``
    where its intrinsics are built), ``"avx512_auto"`` with AVX-512 (avx512f, avx512bw)
    and ``"avx512"`` where the intrinsics are built too."""
    out = ["baseline"]
    if hd_relu_avx2():
        out.append("avx2_auto")
        if HD_BN_AVX2V:
            out.append("avx2")
    if hd_relu_avx512():
        out.append("avx512_auto")
        if hd_bn_rows_isa(0) == 2:
            out.append("avx512")
    return tuple(out)


# the rows builds by hd_bn_job.isa (_bn_rows.h: HD_BN_BASE ... HD_BN_AVX2)
_BN_BUILDS = ("baseline", "avx512_auto", "avx512", "avx2_auto", "avx2")


cdef str _rows_name(int isa, int kind):
    """The ``bn_rows_isa`` name of the rows build ``isa`` (``hd_bn_rows_isa``) runs for
    element ``kind`` with: bfloat16 without AVX512_BF16 keeps the compiler's AVX-512
    build; float16 has no AVX2 intrinsics."""
    if isa == 2 and kind == 1 and not hd_bn_bf16_stores():
        isa = 1
    if isa == 4 and kind == 2:
        isa = 3
    return _BN_BUILDS[isa]


cdef int _rows_of(cnp.ndarray a, object like, str role, Py_ssize_t itemsize,
                  Py_ssize_t* rn, Py_ssize_t* rc, Py_ssize_t* w, Py_ssize_t* rr) except -1:
    """Element strides of ``a``'s N and C axes, and its (n, c) rows as runs: ``w``
    elements packed (the innermost spatial dims), the spatial dims outside them one
    sequence of such runs ``rr`` >= ``w`` elements apart (NCHW cropped in W: runs of W,
    the H stride apart); a row of packed spatial elements is one run (``w`` its size,
    ``rr`` = ``w``). Else ValueError (the engine gives such memory dense copies)."""
    cdef int k, nd = a.ndim
    cdef bint split = False
    cdef Py_ssize_t run = itemsize, outer = 0, step = 0
    shape = tuple([a.shape[k] for k in range(nd)])
    if nd < 3 or (like is not None and shape != like):
        raise ValueError(f"bn_rows: {role} has dims {shape}; need (N, C, spatial...)"
                         + (f" equal to {like}" if like is not None else ""))
    if 0 in shape:      # (before the strides: NumPy may give an empty array any)
        raise ValueError(f"bn_rows: {role} has dims {shape}, no elements; need N, C and "
                         "every spatial dim >= 1 (the graph API's N = 0, inference only, "
                         "runs on CPU_ENGINE without the rows)")
    for k in range(nd - 1, 1, -1):
        if a.shape[k] == 1:
            continue
        if not split and a.strides[k] == run:
            run *= a.shape[k]                # still the packed run
        elif not split and run > itemsize and a.strides[k] >= run:
            # the first dim outside it (the innermost one packed): runs that far apart,
            # not overlapping
            split, outer, step = True, a.strides[k], a.strides[k] * a.shape[k]
        elif split and a.strides[k] == step:
            step *= a.shape[k]
        else:
            raise ValueError(f"bn_rows: {role}'s spatial elements are neither one packed run "
                             f"nor packed runs at one stride (strides {(<object>a).strides})")
    if a.strides[0] % itemsize or a.strides[1] % itemsize or outer % itemsize:
        raise ValueError(f"bn_rows: {role}'s strides {(<object>a).strides} are not whole "
                         "elements")
    rn[0] = a.strides[0] // itemsize
    rc[0] = a.strides[1] // itemsize
    w[0] = run // itemsize
    rr[0] = outer // itemsize if split else w[0]
    return 0


cdef int _runs_of(hd_bn_job* j, Py_ssize_t* w, Py_ssize_t* rr, int n, object roles) except -1:
    """Set ``j``'s runs (hd_bn_job R, W, xr, yr, gr; j.S > 0) from the ``n`` activations'
    runs (x, y, dy: ``w``, ``rr`` as ``_rows_of`` gives them): W the shortest run; an activation of
    runs that long keeps its stride, a packed one (one run of S) takes runs of W at
    stride W; any other cannot be read as runs of W (ValueError)."""
    cdef int i
    cdef Py_ssize_t W = j.S
    cdef Py_ssize_t st[3]
    for i in range(n):
        if w[i] < W:
            W = w[i]
    for i in range(n):
        if w[i] == W:
            st[i] = rr[i]
        elif w[i] == j.S:
            st[i] = W
        else:
            raise ValueError(f"bn_rows: {roles[i]}'s runs of {w[i]} elements and another's of "
                             f"{W} do not split one another")
    j.W, j.R = W, j.S // W
    j.xr, j.yr = st[0], st[1]
    j.gr = st[2] if n > 2 else 0
    return 0


cdef bint _pixels_of(cnp.ndarray a, Py_ssize_t itemsize, Py_ssize_t* rn, Py_ssize_t* rp):
    """Whether ``a`` (dims (N, C, spatial...)) is channels-last: the C values of a pixel one
    packed run and the pixels one run of a constant stride >= C (NHWC, NDHWC; N stride
    free); then its N and pixel strides in elements."""
    cdef int k, nd = a.ndim
    cdef Py_ssize_t p = a.shape[1] * itemsize, run
    if nd < 3 or (a.shape[1] > 1 and a.strides[1] != itemsize) or a.strides[0] % itemsize:
        return False
    for k in range(nd - 1, 1, -1):
        if a.shape[k] != 1:
            p = a.strides[k]
            break
    if p % itemsize or p < a.shape[1] * itemsize:
        return False
    run = p
    for k in range(nd - 1, 1, -1):
        if a.shape[k] != 1 and a.strides[k] != run:
            return False
        run *= a.shape[k]
    rn[0] = a.strides[0] // itemsize
    rp[0] = p // itemsize
    return True


cdef bint _channel_dims(cnp.ndarray a) noexcept:
    """Whether ``a``'s dims are a vector's: (C,), or (1, C, 1, ...) as a graph's per-channel
    tensors come (every dim but the second 1)."""
    cdef int k, nd = cnp.PyArray_NDIM(a)
    if nd == 1:
        return True
    for k in range(nd):
        if k != 1 and cnp.PyArray_DIM(a, k) != 1:
            return False
    return nd > 1


cdef const float* _vec(object v, Py_ssize_t c, str role, bint out, list held) except? NULL:
    """The float32 values of a per-channel vector ``v`` (None: NULL): an ndarray (a
    subclass too, e.g. ``np.memmap``), contiguous float32 of dims (C,) or (1, C, 1, ...),
    read in C (a typed memoryview's acquisition cost about 0.3 us a vector, 1.5 us of a
    tiny batchnorm's 4); else any buffer a ``float[::1]`` takes, whose acquisition goes
    into ``held``: the caller keeps it until the kernel is done, as the exporter may free
    or move memory no longer exported (``memoryview.release()`` then ``mmap.close()``
    from another thread while the kernel runs without the GIL; an ndarray's memory stays
    while the call holds the array)."""
    cdef cnp.ndarray a
    cdef const float[::1] ro
    cdef float[::1] rw
    if v is None:
        return NULL
    # as the graph's binding refuses one (exact ndarrays, the engine's, skip the check)
    if type(v) is not cnp.ndarray and isinstance(v, _MaskedArray):
        raise ValueError(f"bn_rows: {role} is a masked array; its mask would be ignored")
    if cnp.PyArray_Check(v):
        a = <cnp.ndarray>v
        # native byte order too: NPY_FLOAT32 is also the type of a '>f4' array, whose
        # bytes read as floats here would be other numbers
        why = (f"dtype {a.dtype.str}" if cnp.PyArray_TYPE(a) != cnp.NPY_FLOAT32
               or not cnp.PyArray_ISNOTSWAPPED(a) else
               f"dims {(<object>a).shape}; need (C,) or (1, C, 1, ...)" if not _channel_dims(a)
               else f"strides {(<object>a).strides}" if not cnp.PyArray_IS_C_CONTIGUOUS(a)
               else "read-only" if out and not cnp.PyArray_ISWRITEABLE(a) else None)
        if why is not None:
            raise ValueError(f"bn_rows: {role} is not a contiguous float32 vector"
                             f"{' that can be written' if out else ''} ({why})")
        if cnp.PyArray_SIZE(a) != c:
            raise ValueError(f"bn_rows: {role} has {cnp.PyArray_SIZE(a)} values; {c} "
                             "channels")
        return <const float*>cnp.PyArray_DATA(a) if c else NULL
    try:
        if out:
            rw = v
            ro = rw
        else:
            ro = v
    except (TypeError, ValueError, BufferError) as exc:
        raise ValueError(f"bn_rows: {role} is not a contiguous float32 vector"
                         f"{' that can be written' if out else ''} ({exc})") from None
    if ro.shape[0] != c:
        raise ValueError(f"bn_rows: {role} has {ro.shape[0]} values; {c} channels")
    held.append(ro)
    return &ro[0] if c else NULL


cdef double* _vec64_out(cnp.ndarray a, Py_ssize_t c) except? NULL:
    """The data of a float64 ``variance_out``: dims (C,) or (1, C, 1, ...), contiguous,
    writable, native byte order, ``c`` values (NULL where ``c`` is 0)."""
    if type(a) is not cnp.ndarray and isinstance(a, _MaskedArray):
        raise ValueError("bn_rows: variance_out is a masked array; its mask would be ignored")
    if not (_channel_dims(a) and cnp.PyArray_IS_C_CONTIGUOUS(a)
            and cnp.PyArray_ISNOTSWAPPED(a) and cnp.PyArray_ISWRITEABLE(a)):
        raise ValueError("bn_rows: variance_out is not a contiguous float64 vector that can "
                         f"be written (dims {(<object>a).shape}, strides "
                         f"{(<object>a).strides}, writeable {bool(cnp.PyArray_ISWRITEABLE(a))})")
    if cnp.PyArray_SIZE(a) != c:
        raise ValueError(f"bn_rows: variance_out has {cnp.PyArray_SIZE(a)} values; {c} "
                         "channels")
    return <double*>cnp.PyArray_DATA(a) if c else NULL


def bn_rows(int op, cnp.ndarray x, cnp.ndarray y, int kind, *, cnp.ndarray dy=None,
            scale=None, bias=None, mean=None, variance=None, inv_variance=None,
            mean_out=None, variance_out=None, dscale=None, dbias=None,
            double epsilon=0.0, bint act=False, double lower=0.0, double upper=INFINITY,
            bint baseline=False, stream=None, isa=None):
    """Batchnorm on channels-first or channels-last activations on oneDNN's OpenMP team
    (``runtime._onednn.run_on_team``), C rows of ``_bn_rows.h`` (channels-first: every
    pass of a channel on one thread) and ``_bn_last.h`` (channels-last: the pixels split
    among the threads, per-thread partial sums added up after a team barrier).

    Parameters
    ----------
    op : int
        ``BN_ROWS_TRAINING``: batch statistics, then y; ``BN_ROWS_INFERENCE``: y from the
        given statistics; ``BN_ROWS_BACKWARD``: dx (written to ``y``), dscale, dbias.
    x, y, dy : ndarray
        Activations of dims (N, C, spatial...) and one element type, ``kind``
        (``BIAS_RELU_KINDS``: 0 float32, 1 bfloat16, 2 float16; 16-bit ones as raw bits
        or any dtype of that size); ``y`` (dx for backward) is written, and must not
        overlap ``x`` or ``dy``, which is not checked here (the float64 repairs of some
        channels read x again after the pass that wrote y; the graph API refuses such
        aliasing at submit); ``dy`` for backward only. Channels-last where C > 1 and each has its C values of a pixel
        packed and its pixels at one stride (NHWC, NDHWC; N stride free); else
        channels-first: the spatial elements of each (n, c) one packed run (NCHW, NCDHW)
        or packed runs of one length at one stride (NCHW cropped in W: runs of W, the H
        stride apart; a packed activation beside it is read as runs of that length), N
        and C strides free.
    scale, bias, mean, variance, inv_variance : float32 vectors of C values, contiguous
        (ndarrays of dims (C,) or (1, C, 1, ...), or any 1-D buffer)
        Training: scale, bias. Inference: scale, bias, mean, variance. Backward: scale,
        mean, inv_variance (and bias with ``act``: the forward whose ReLU is undone).
    mean_out, variance_out : float32 vectors as above, written (training)
        The batch mean and the biased batch variance. ``variance_out`` may be a float64
        ndarray (1-D, contiguous): then the variance is stored in float64, where float32
        would round a variance beyond FLT_MAX (|x - mean| beyond 1.8e19) to +inf, so
        that ``bn_training_statistics`` takes inv_variance and the running variance
        from its float64 value. y is computed from the float64 variance either way.
    dscale, dbias : float32 vectors, written (backward)
    epsilon : float
        Added to the variance (training, inference).
    act : bool
        Forward: y = clamp(y, lower, upper) + 0.0 (RELU_FWD: NaN kept, no -0.0).
        Backward: g = dy where lower < y_bn < upper, 0 elsewhere, NaN where y_bn is NaN
        (RELU_BWD of ``y_bn = scale * (x - mean) * inv_variance + bias``); ``upper``
        +inf is no upper clip: there g = dy where lower < y_bn, +inf included.
    baseline : bool
        Run the rows built for the baseline ISA even where the AVX2 or AVX-512 ones run.
    isa : str or None
        The rows to run, a ``bn_rows_isa`` name: ``"baseline"`` (as ``baseline``),
        ``"avx2_auto"`` / ``"avx512_auto"`` (the compiler's AVX2 / AVX-512 builds),
        ``"avx2"`` / ``"avx512"`` (the intrinsics); None (the default) runs those ``bn_rows_isa``
        names. ValueError where this CPU cannot run the one named (``bn_rows_builds``).
    stream : bool or None
        Store y's full vectors non-temporally (MOVNTPS; bfloat16 MOVNTDQ): None
        decides by size (``bn_streams_by_default``: the activations of the call at least
        the last-level cache; channels-first rows neither runs nor of a length that is
        not whole 64-byte lines, and for inference y on a 64-byte boundary); True
        insists, and raises
        ValueError where these rows cannot (not the AVX-512 intrinsic rows, as with
        ``baseline``; channels-first rows of 16-bit elements, or of float32 off 4-byte
        boundaries; channels-last y not on 64-byte boundaries at every pixel); False
        never; any other value raises TypeError. The values written are the same either
        way.

    Returns
    -------
    int
        The number of threads that ran it.

    Notes
    -----
    Formulas (Ioffe and Szegedy, "Batch Normalization", ICML 2015, Algorithm 1 and the
    backward pass of its section 3): ``mean = sum(x) / M`` and ``variance = sum((x -
    mean)^2) / M`` over the M = N * spatial values of a channel (two passes; per-row sums of
    float32 lanes added in float64, the first of x - p, p the median of the channel's
    first, middle and last values, so that the lanes add deviations, not the offset: a
    constant channel's mean is exact; where the pivot lies far from that mean, or variance
    + epsilon is below 1e-36, the channel's mean and variance are taken again in float64,
    the corrected two-pass algorithm of Chan, Golub and LeVeque, "Algorithms for computing
    the sample variance", 1983); ``y = (x - mean) * (scale / sqrt(variance + epsilon))
    + bias``; backward ``dbias = sum(g)``, ``dscale = inv_variance * sum(g * (x - mean))``,
    ``dx = scale * inv_variance / M * (M g - dbias - (x - mean) * inv_variance * dscale)``.
    Element arithmetic is float32 (y and dx rounded once to the element type).
    Channels-last sums are float32 per channel over at most 64 pixels, added in float64.
    Finite data float32 cannot hold: a run's float32 sums that come out non-finite (sums
    of squares of deviations beyond 1.8e19, sums of values near FLT_MAX, backward
    products g * (x - mean) beyond FLT_MAX) are taken again in float64, and a channel
    whose factor ``scale / sqrt(variance + epsilon)`` overflows float32 (an epsilon near
    its bound on a constant channel) has its y computed in float64 (slow paths taken
    only there, tested once per run or channel).
    """
    cdef hd_bn_last_job L
    cdef hd_bn_job* j = &L.j
    cdef bint last
    cdef char* raw = NULL
    cdef int n = 1
    cdef Py_ssize_t rw[3]
    cdef Py_ssize_t rs[3]
    cdef Py_ssize_t itemsize = 4 if kind == 0 else 2
    if not 0 <= kind <= 2:
        raise ValueError(f"bn_rows: element kind {kind}; need 0, 1 or 2")
    if op not in (HD_BN_TRAINING, HD_BN_INFERENCE, HD_BN_BACKWARD):
        raise ValueError(f"bn_rows: op {op}")
    for a, role in ((x, "x"), (y, "y"), (dy, "dy")):
        if a is not None and a.itemsize != itemsize:
            raise ValueError(f"bn_rows: {role} has {a.itemsize}-byte elements; kind {kind} "
                             f"has {itemsize}")
        if a is not None and not cnp.PyArray_ISNOTSWAPPED(a):
            raise ValueError(f"bn_rows: {role} is in non-native byte order ({a.dtype.str})")
    if not y.flags.writeable:
        raise ValueError("bn_rows: y is read-only")
    if op == HD_BN_BACKWARD and dy is None:
        raise ValueError("bn_rows: backward needs dy")
    shape = (<object>x).shape
    for a, role in ((y, "y"), (dy if op == HD_BN_BACKWARD else None, "dy")):
        if a is not None and (<object>a).shape != shape:
            raise ValueError(f"bn_rows: {role} has dims {(<object>a).shape}; need (N, C, "
                             f"spatial...) equal to {shape}")
    j.xc = j.yc = j.gc = 1
    j.gn = L.gp = 0
    last = (x.ndim >= 3 and x.shape[1] > 1 and _pixels_of(x, itemsize, &j.xn, &L.xp)
            and _pixels_of(y, itemsize, &j.yn, &L.yp)
            and (op != HD_BN_BACKWARD or _pixels_of(dy, itemsize, &j.gn, &L.gp)))
    if not last:
        _rows_of(x, None, "x", itemsize, &j.xn, &j.xc, &rw[0], &rs[0])
        _rows_of(y, shape, "y", itemsize, &j.yn, &j.yc, &rw[1], &rs[1])
        if op == HD_BN_BACKWARD:
            _rows_of(dy, shape, "dy", itemsize, &j.gn, &j.gc, &rw[2], &rs[2])
    j.N, j.C = x.shape[0], x.shape[1]
    j.S = x.size // (j.N * j.C) if j.N * j.C else 0
    j.R, j.W, j.xr, j.yr, j.gr = 1, j.S, j.S, j.S, j.S
    if not last and j.S:
        _runs_of(j, rw, rs, 3 if op == HD_BN_BACKWARD else 2, ("x", "y", "dy"))
    j.op, j.kind, j.isa = op, kind, hd_bn_rows_isa(baseline)
    if isa is not None:
        runs = bn_rows_builds()
        if isa not in runs:
            raise ValueError(f"bn_rows: isa {isa!r}; this CPU runs {runs}")
        j.isa = _BN_BUILDS.index(isa)
    j.x, j.y = cnp.PyArray_DATA(x), cnp.PyArray_DATA(y)
    j.dy = cnp.PyArray_DATA(dy) if op == HD_BN_BACKWARD else NULL
    held = []     # the fallback vectors' buffers, acquired until the rows are done
    j.scale = _vec(scale, j.C, "scale", False, held)
    j.bias = _vec(bias, j.C, "bias", False, held)
    j.mean = _vec(mean, j.C, "mean", False, held)
    j.var = _vec(variance, j.C, "variance", False, held)
    j.inv = _vec(inv_variance, j.C, "inv_variance", False, held)
    j.mean_out = <float*>_vec(mean_out, j.C, "mean_out", True, held)
    if _is_f64(variance_out):
        j.var_out64, j.var_out = _vec64_out(variance_out, j.C), NULL
    else:
        j.var_out64 = NULL
        j.var_out = <float*>_vec(variance_out, j.C, "variance_out", True, held)
    j.dscale = <float*>_vec(dscale, j.C, "dscale", True, held)
    j.dbias = <float*>_vec(dbias, j.C, "dbias", True, held)
    j.eps, j.act = epsilon, act
    j.lo = _rounded(lower, kind) if op != HD_BN_BACKWARD else <float>lower
    # backward: the inclusive top of RELU_BWD's mask (hd_bn_drelu: lo < y_bn <= hi), the
    # float32 below the upper clip (y_bn < upper strictly, +inf dropped) or +inf where
    # there is none (y_bn = +inf passes)
    j.hi = (_rounded(upper, kind) if op != HD_BN_BACKWARD else
            INFINITY if upper == INFINITY else nextafterf(<float>upper, -INFINITY))
    if op == HD_BN_TRAINING:
        need = {"scale": scale, "bias": bias, "mean_out": mean_out, "variance_out": variance_out}
    elif op == HD_BN_INFERENCE:
        need = {"scale": scale, "bias": bias, "mean": mean, "variance": variance}
    else:
        need = {"scale": scale, "mean": mean, "inv_variance": inv_variance, "dscale": dscale,
                "dbias": dbias}
        if act:
            need["bias"] = bias
    missing = [r for r, v in need.items() if v is None]
    if missing:
        raise ValueError(f"bn_rows: op {op} needs {', '.join(missing)}")
    if j.N * j.C * j.S == 0:
        return 1
    if stream not in (None, True, False):
        raise TypeError(f"bn_rows: stream is {stream!r}; need None, True or False")
    # streamed stores where y passes the caches (None) or the caller insists (True): the
    # intrinsic rows (bn_rows_isa "avx512"); float32 channels-first rows, from each row's
    # first 64-byte line, so y on 4-byte boundaries (off them no float of a row is on a
    # 64-byte boundary: NumPy makes such arrays); float32 / bfloat16 channels-last ones
    # where every pixel's vectors lie on 64-byte boundaries (MOVNTPS faults on any other
    # address)
    can = (j.isa == 2 and (kind != 1 or hd_bn_bf16_stores())
           and (kind == 0 and <size_t>j.y % 4 == 0 if not last else
                kind != 2 and <size_t>j.y % 64 == 0 and (L.yp * itemsize) % 64 == 0
                and (j.N == 1 or (j.yn * itemsize) % 64 == 0)))
    if stream and not can:
        rows = _rows_name(j.isa, kind)
        raise ValueError(f"bn_rows: stream=True, but these rows cannot stream y (kind {kind}, "
                         f"{'channels-last' if last else 'channels-first'}, rows "
                         f"{rows}, y at {<size_t>j.y % 64} bytes past a "
                         "64-byte boundary"
                         + (f", pixels {L.yp * itemsize} bytes apart)" if last else ")")
                         + ("" if rows == "avx512" else
                            "; only the AVX-512 intrinsic rows ('avx512') stream"))
    # never by default where rows are runs (j.R > 1), nor channels-first rows that are not
    # whole 64-byte lines: a row's streamed full vectors and its neighbour's masked head or
    # tail share lines (inference in runs of 28 float32 values at 32x256x28x28 took 2.3x
    # the time with them, backward on rows of 14x14 float32 values at 32x512 1.02-1.04x)
    if not can:
        j.stream = 0
    elif stream is not None:
        j.stream = 1 if stream else 0
    else:
        # channels-first inference streamed off a 64-byte boundary (NumPy puts large
        # arrays 16 bytes past one) took 1.1x the cached time, and on it 1.0-1.06x;
        # training and backward gained either way (0.78-0.85x at 4 bytes off)
        j.stream = (j.R == 1 and (last or ((j.S * itemsize) % 64 == 0 and (
                        op != HD_BN_INFERENCE or <size_t>j.y % 64 == 0)))
                    and _streams_by_default(op, j.N * j.C * j.S, itemsize))
    if not last:
        with nogil:
            n = run_on_team(hd_bn_team, j)
        return n
    if (j.xn == j.S * L.xp and j.yn == j.S * L.yp
            and (op != HD_BN_BACKWARD or j.gn == j.S * L.gp)):
        j.S, j.N = j.S * j.N, 1              # every pixel at one stride: longer tiles
    L.Cp = (j.C + 15) // 16 * 16
    L.barrier = team_barrier
    # pixel groups (_bn_last.h, hd_bnl_group): 4 while x fits the caches, else 1
    L.group = 4 if j.N * j.C * j.S * itemsize <= _LAST_GROUP_BYTES else 1
    with nogil:
        L.slots = team_size()
        raw = <char*>malloc(L.slots * HD_BN_LAST_BLOCK(L.Cp) + 64)
        if raw != NULL:
            L.scratch = raw + (-<size_t>raw & 63)          # 64-byte aligned blocks
            n = run_on_team(hd_bn_last_team, &L)
            free(raw)
    if raw == NULL:
        raise MemoryError("bn_rows: per-thread scratch")
    return n
