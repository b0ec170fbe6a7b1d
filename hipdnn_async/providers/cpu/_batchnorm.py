"""Batchnorm and activation kernels of the cpu provider (NumPy glue over ``_kernels``).

Every function takes **logical** arrays: I/O tensors with dims (N, C, [D,] H, W) and any
strides (NHWC buffers arrive as transposed views), dtype float32, float16,
ml_dtypes.bfloat16 or float64; per-channel tensors (scale, bias, mean, variance,
inv_variance and their gradients) with dims (1, C, 1, 1[, 1]), float32 (float64 accepted).
Results are written into the given output arrays, every element of them and nothing else.

Arithmetic and accumulation are float64 inside the compiled loops (``_kernels``), which
run with the GIL released. Half and bfloat16 inputs are first widened to float32
(a transient copy); float64 inputs stay float64. The exception is ``relu`` /
``add_bias_relu`` on float32, bfloat16 and float16: one compiled pass reading and writing
the I/O dtype directly (``_kernels.bias_relu``), correctly rounded.

Activation semantics (docs/contract/semantics.md, "Pointwise")
------------------------------------------
``relu`` / ``drelu`` clips are ``(lower, upper)``, each a float or None:

- RELU_FWD: no clip -> ``max(x, 0)``; upper only -> ``min(max(x, 0), upper)``; both ->
  ``clamp(x, lower, upper)``; lower only -> ``max(x, lower)``. NaN propagates; the result
  is never -0.0 (``max(-0.0, 0)`` is +0.0).
- RELU_BWD(y, dy): ``dy`` where ``lower < y < upper`` strictly (lower defaults to 0),
  else 0; without an upper clip (upper None, taken as +inf) ``dy`` where ``lower < y``,
  so a forward value of +inf passes (relu(+inf) = +inf with slope 1, as PyTorch's relu
  backward and cuDNN have it), while under an upper clip +inf is dropped (it is not below
  the clip). A NaN in ``dy`` propagates where the mask passes it; a NaN in the forward
  value ``y`` gives NaN (the gradient is undefined there).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..._errors import ExecutionError, GraphError
try:
    from . import _kernels
except ImportError as exc:  # a source tree used without building it
    raise ImportError("hipdnn_async's compiled extensions are not built (providers.cpu._kernels "
                      "is missing); install the package with `pip install -e .` (needs a C "
                      "compiler)") from exc

__all__ = [
    "bn_training",
    "bn_inference",
    "bn_inference_variance",
    "bn_backward",
    "relu",
    "relu_backward",
    "add_bias_relu",
]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------

def _ncs(a: np.ndarray) -> np.ndarray | None:
    """A (N, C, S) view of a (N, C, ...) array without copying, or None if impossible."""
    n, c = a.shape[:2]
    if a.size == 0:
        return a.reshape(n, c, 0)
    # The spatial dims collapse into one without a copy when each (non-unit) dim's stride
    # is the next one's stride times its extent (NumPy 2.5 deprecates assigning .shape).
    spatial = [(d, st) for d, st in zip(a.shape[2:], a.strides[2:]) if d != 1]
    if any(s0 != s1 * d1 for (_, s0), (d1, s1) in zip(spatial, spatial[1:])):
        return None
    inner = spatial[-1][1] if spatial else a.itemsize
    size = int(np.prod(a.shape[2:], dtype=np.int64))
    return as_strided(a, (n, c, size), (a.strides[0], a.strides[1], inner))


def _work_dtype(*arrays) -> np.dtype:
    """float64 when any I/O array is float64, else float32."""
    return _F64 if any(a.dtype == _F64 for a in arrays) else _F32


def _src(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    """A (N, C, S) view of ``a`` in ``dt``: the array itself when it already fits, else a copy."""
    if a.dtype == dt:
        v = _ncs(a)
        if v is not None:
            return v
    return np.asarray(a, dtype=dt).reshape(a.shape[0], a.shape[1], -1)


def _dst(out: np.ndarray, dt: np.dtype):
    """Return (view to write, finish) for ``out``; finish() copies a temporary back."""
    if out.dtype == dt and out.flags.writeable:
        v = _ncs(out)
        if v is not None:
            return v, lambda: None
    tmp = np.empty((out.shape[0], out.shape[1], math.prod(out.shape[2:])), dtype=dt)

    def finish():
        out[...] = tmp.reshape(out.shape)
    return tmp, finish


def _vec(a, c: int, what: str, where: str) -> np.ndarray:
    """A per-channel (1, C, 1, 1) array as a contiguous float64 vector of length C."""
    v = np.asarray(a, dtype=_F64).reshape(-1)
    if v.shape[0] != c:
        raise GraphError(f"{where}: tensor '{what}' needs {c} per-channel values (dims (1, {c}, 1, 1)); "
                         f"got dims {tuple(np.shape(a))}")
    return np.ascontiguousarray(v)


def _put(out, values: np.ndarray, what: str, where: str) -> None:
    """Write a length-C vector into a (1, C, 1, 1) output array."""
    if out is None:
        return
    if out.size != values.size:
        raise GraphError(f"{where}: output '{what}' needs {values.size} per-channel values; "
                         f"got dims {tuple(out.shape)}")
    out[...] = values.reshape(out.shape)


def _clips(clips, where: str) -> tuple[bool, float, float]:
    """(active, lower, upper) for a ``(lower, upper)`` tuple or None (no activation)."""
    if clips is None:
        return False, 0.0, math.inf
    lower, upper = clips
    lo = 0.0 if lower is None else float(lower)
    hi = math.inf if upper is None else float(upper)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise GraphError(f"{where}: relu clips lower={lower!r}, upper={upper!r}; need lower <= upper")
    return True, lo, hi


def _check_io(where: str, ref: np.ndarray, **arrays) -> None:
    for name, a in arrays.items():
        if a is not None and tuple(a.shape) != tuple(ref.shape):
            raise GraphError(f"{where}: tensor '{name}' has dims {tuple(a.shape)}; "
                             f"expected {tuple(ref.shape)}")


# ----------------------------------------------------------------------------
# Batchnorm forward
# ----------------------------------------------------------------------------

def bn_training(x, scale, bias, epsilon, y, mean, inv_variance, *, relu=None, momentum=None,
                prev_running_mean=None, prev_running_variance=None, next_running_mean=None,
                next_running_variance=None) -> None:
    """Spatial batchnorm training forward, optionally fused with RELU_FWD.

    Parameters
    ----------
    x : ndarray
        Input, dims (N, C, [D,] H, W), any strides; float32, float16, bfloat16 or float64.
    scale, bias : ndarray
        dims (1, C, 1, 1[, 1]), float32.
    epsilon : float
        Added to the biased batch variance, > 0.
    y : ndarray
        Output, dims of ``x``, any strides and I/O dtype; written.
    mean, inv_variance : ndarray or None
        Batch mean and 1/sqrt(var + epsilon), dims (1, C, 1, 1), float32; written.
    relu : tuple (lower, upper) or None
        Fused RELU_FWD clips (see module notes); None: no activation.
    momentum : float, optional
        Running-statistics factor; required with the running-statistics arrays.
    prev_running_mean, prev_running_variance : ndarray, optional
        Inputs (1, C, 1, 1) float32.
    next_running_mean, next_running_variance : ndarray, optional
        Outputs: ``(1 - momentum) * prev + momentum * stat``, where the variance statistic
        is the unbiased batch variance ``var * m / (m - 1)``, m = N * spatial.

    Raises
    ------
    GraphError
        m = N * spatial < 2, epsilon <= 0, mismatched dims or missing running inputs.
    """
    where = "bn_training"
    _check_io(where, x, y=y)
    n, c = x.shape[0], x.shape[1]
    m = n * math.prod(x.shape[2:])
    if m < 2:
        raise GraphError(f"{where}: tensor 'x' dims {tuple(x.shape)} give N*spatial = {m} value(s) "
                         "per channel; training needs at least 2")
    if not epsilon > 0:
        raise GraphError(f"{where}: epsilon = {epsilon!r}; need epsilon > 0")
    active, lo, hi = _clips(relu, where)
    dt = _work_dtype(x, y)
    xs = _src(x, dt)
    mu = np.empty(c, _F64)
    var = np.empty(c, _F64)
    _kernels.channel_stats(xs, mu, var)
    inv = 1.0 / np.sqrt(var + float(epsilon))
    a = _vec(scale, c, "scale", where) * inv
    b = _vec(bias, c, "bias", where)
    ys, finish = _dst(y, dt)
    _kernels.scale_shift_act(xs, ys, mu, a, b, active, lo, hi)
    finish()
    _put(mean, mu, "mean", where)
    _put(inv_variance, inv, "inv_variance", where)
    wants = (next_running_mean is not None, next_running_variance is not None)
    if any(wants):
        if momentum is None:
            raise GraphError(f"{where}: running statistics need a momentum; got None")
        mom = float(momentum)
        if next_running_mean is not None:
            if prev_running_mean is None:
                raise GraphError(f"{where}: output 'next_running_mean' needs input 'prev_running_mean'")
            prev = _vec(prev_running_mean, c, "prev_running_mean", where)
            _put(next_running_mean, (1.0 - mom) * prev + mom * mu, "next_running_mean", where)
        if next_running_variance is not None:
            if prev_running_variance is None:
                raise GraphError(f"{where}: output 'next_running_variance' needs input "
                                 "'prev_running_variance'")
            prev = _vec(prev_running_variance, c, "prev_running_variance", where)
            _put(next_running_variance, (1.0 - mom) * prev + mom * var * (m / (m - 1.0)),
                 "next_running_variance", where)


def bn_inference(x, mean, inv_variance, scale, bias, y, *, relu=None) -> None:
    """Batchnorm inference ``y = scale*(x - mean)*inv_variance + bias`` (+ optional RELU_FWD).

    Parameters
    ----------
    x, y : ndarray
        dims (N, C, [D,] H, W), any strides, I/O dtype; ``y`` is written.
    mean, inv_variance, scale, bias : ndarray
        dims (1, C, 1, 1[, 1]), float32.
    relu : tuple (lower, upper) or None
        Fused RELU_FWD clips; None: no activation.
    """
    where = "bn_inference"
    _check_io(where, x, y=y)
    c = x.shape[1]
    active, lo, hi = _clips(relu, where)
    inv = _vec(inv_variance, c, "inv_variance", where)
    _affine(x, y, _vec(mean, c, "mean", where), _vec(scale, c, "scale", where) * inv,
            _vec(bias, c, "bias", where), active, lo, hi)


def bn_inference_variance(x, mean, variance, scale, bias, epsilon, y, *, relu=None) -> None:
    """Batchnorm inference with variance ``y = scale*(x - mean)/sqrt(variance + epsilon) + bias``.

    Parameters
    ----------
    x, y : ndarray
        dims (N, C, [D,] H, W), any strides, I/O dtype; ``y`` is written.
    mean, variance, scale, bias : ndarray
        dims (1, C, 1, 1[, 1]), float32.
    epsilon : float
        > 0 (variance + epsilon must be positive).
    relu : tuple (lower, upper) or None
        Fused RELU_FWD clips; None: no activation.
    """
    where = "bn_inference_variance"
    _check_io(where, x, y=y)
    if not epsilon > 0:
        raise GraphError(f"{where}: epsilon = {epsilon!r}; need epsilon > 0")
    c = x.shape[1]
    active, lo, hi = _clips(relu, where)
    inv = 1.0 / np.sqrt(_vec(variance, c, "variance", where) + float(epsilon))
    _affine(x, y, _vec(mean, c, "mean", where), _vec(scale, c, "scale", where) * inv,
            _vec(bias, c, "bias", where), active, lo, hi)


def _affine(x, y, mu, a, b, active, lo, hi) -> None:
    """y = act((x - mu) * a + b) through the compiled loop."""
    if x.size == 0:
        return
    dt = _work_dtype(x, y)
    xs = _src(x, dt)
    ys, finish = _dst(y, dt)
    _kernels.scale_shift_act(xs, ys, mu, a, b, active, lo, hi)
    finish()


# ----------------------------------------------------------------------------
# Batchnorm backward
# ----------------------------------------------------------------------------

def bn_backward(dy, x, scale, mean, inv_variance, dx, dscale, dbias, *, drelu=None) -> None:
    """Spatial batchnorm backward given the saved mean and inv_variance.

    Parameters
    ----------
    dy, x : ndarray
        dims (N, C, [D,] H, W), any strides, I/O dtype.
    scale, mean, inv_variance : ndarray
        dims (1, C, 1, 1[, 1]), float32.
    dx : ndarray
        dims of ``x``; written.
    dscale, dbias : ndarray or None
        dims (1, C, 1, 1), float32; written.
    drelu : tuple (bn_bias, lower, upper) or None
        Fuse RELU_BWD first: the incoming gradient is ``RELU_BWD(y_bn, dy)`` with the
        recomputed ``y_bn = scale*(x - mean)*inv_variance + bn_bias`` (pattern 2).

    Notes
    -----
    With m = N * spatial, xhat = (x - mean) * inv_variance and g the (masked) gradient:
    dbias = sum(g), dscale = sum(g * xhat),
    dx = scale * inv_variance / m * (m * g - dbias - xhat * dscale).
    """
    where = "bn_backward"
    _check_io(where, x, dy=dy, dx=dx)
    c = x.shape[1]
    sc = _vec(scale, c, "scale", where)
    mu = _vec(mean, c, "mean", where)
    inv = _vec(inv_variance, c, "inv_variance", where)
    if drelu is None:
        fused, bnb, lo, hi = False, np.zeros(c, _F64), 0.0, math.inf
    else:
        bn_bias, lower, upper = drelu
        fused, lo, hi = _clips((lower, upper), where)
        bnb = _vec(bn_bias, c, "bias", where)
    db = np.zeros(c, _F64)
    ds = np.zeros(c, _F64)
    if x.size:
        dt = _work_dtype(dy, x, dx)
        xs = _src(x, dt)
        dys = _src(dy, dt)
        _kernels.bn_backward_reduce(dys, xs, sc, mu, inv, bnb, fused, lo, hi, db, ds)
        dxs, finish = _dst(dx, dt)
        if np.shares_memory(dxs, xs) or np.shares_memory(dxs, dys):
            raise ExecutionError(f"{where}: output 'dx' overlaps an input; in-place is not supported")
        _kernels.bn_backward_dx(dys, xs, dxs, sc, mu, inv, bnb, fused, lo, hi, db, ds)
        finish()
    _put(dscale, ds, "dscale", where)
    _put(dbias, db, "dbias", where)


# ----------------------------------------------------------------------------
# Activations
# ----------------------------------------------------------------------------

def relu(x, out, lower=None, upper=None, *, team=False) -> None:
    """RELU_FWD (docs/contract/semantics.md) into ``out``; ``add_bias_relu`` without bias.

    Parameters
    ----------
    x : ndarray
        dims (N, C, ...) (any rank; rank < 2 is accepted too), any strides; float32,
        bfloat16, float16 or float64.
    out : ndarray
        dims of ``x``, any strides and I/O dtype; written (may be ``x`` itself).
    lower, upper : float or None
        Clips. No clip: max(x, 0); upper only: min(max(x, 0), upper); both:
        clamp(x, lower, upper); lower only: max(x, lower). NaN propagates and -0.0 becomes
        +0.0.
    team : bool
        Split the pass among oneDNN's OpenMP threads (``_kernels.bias_relu``; the oneDNN
        engine's epilogues: after a oneDNN primitive, on the threads it ran on).
    """
    add_bias_relu(x, None, out, lower, upper, team=team)


def add_bias_relu(y, bias, out, lower, upper, *, team=False) -> None:
    """Convolution epilogue: ``out = RELU_FWD(y + bias)`` in one pass.

    Parameters
    ----------
    y : ndarray
        Convolution result, dims (N, K, ...), any strides; float32 (typical), bfloat16,
        float16 or float64.
    bias : ndarray or None
        dims (1, K, 1, 1[, 1]), float32 or the I/O dtype; None: no bias.
    out : ndarray
        dims of ``y``, any strides, float32, bfloat16, float16 or float64; written (may be
        ``y`` itself; another overlap with ``y`` is handled by copying ``y`` first).
    lower, upper : float or None
        RELU_FWD clips (see ``relu``).
    team : bool
        As in ``relu``.

    Raises
    ------
    GraphError
        Mismatched dims, a bias without K values, or clips with lower > upper (or NaN).

    Notes
    -----
    With ``y`` and ``out`` in float32, bfloat16 or float16 and a float32/bfloat16/float16
    bias (the engines' cases), the compiled ``_kernels.bias_relu`` runs one pass with the
    GIL released, and the result is the exact ``clamp(y + bias, lower, upper) + 0.0``
    correctly rounded (nearest-even) to ``out``'s dtype. Other dtypes (float64) take a
    float64 pass, rounded once to float32/float64 and then, for 16-bit outputs, again.
    """
    where = "add_bias_relu"
    _check_io(where, y, out=out)
    _, lo, hi = _clips((lower, upper), where)
    if y.size == 0:
        return
    if y.ndim < 2:
        # Scalars/vectors: NumPy path with the same semantics.
        r = np.clip(np.asarray(y, _F64), lo, hi) + 0.0
        out[...] = np.where(np.isnan(y), y, r)
        return
    c = y.shape[1]
    if bias is not None:
        b = np.asarray(bias).reshape(-1)
        if b.shape[0] != c:
            raise GraphError(f"{where}: tensor 'bias' needs {c} per-channel values "
                             f"(dims (1, {c}, 1, 1)); got dims {tuple(np.shape(bias))}")
    if _bias_relu_kernel(y, bias, out, lo, hi, team):
        return
    _add_bias_relu_f64(y, bias, out, lo, hi)


def _bias_relu_kernel(y, bias, out, lo: float, hi: float, team: bool = False) -> bool:
    """Run ``_kernels.bias_relu`` when it takes these arrays; False when it does not."""
    kinds = _kernels.BIAS_RELU_KINDS
    yk = kinds.get(y.dtype.name)
    ok = kinds.get(out.dtype.name)
    if (yk is None or ok is None or not out.flags.writeable or not y.flags.aligned
            or not out.flags.aligned
            or (bias is not None and np.dtype(bias.dtype).name not in kinds)):
        return False
    b = None if bias is None else np.ascontiguousarray(np.asarray(bias).reshape(-1), _F32)
    if np.may_share_memory(y, out) and not (
            y.dtype == out.dtype and y.strides == out.strides
            and y.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
        y = y.copy()   # a partial overlap: the one-pass kernel would read written values
    _kernels.bias_relu(y, yk, out, ok, b, lo, hi, team=team)
    return True


def _add_bias_relu_f64(y, bias, out, lo: float, hi: float) -> None:
    """The float64 fallback: ``_kernels.bias_act`` through float32/float64 temporaries."""
    c = y.shape[1]
    b = np.zeros(c, _F64) if bias is None else _vec(bias, c, "bias", "add_bias_relu")
    dt = _work_dtype(y, out)
    ys = _src(y, dt)
    os_, finish = _dst(out, dt)
    _kernels.bias_act(ys, os_, b, bias is not None, lo, hi)
    finish()


def relu_backward(y, dy, out, lower=None, upper=None) -> None:
    """RELU_BWD(y, dy) into ``out``: dy where lower < y < upper (defaults 0, +inf), else 0;
    with no upper clip (None or +inf) dy where lower < y, so y = +inf passes.

    A NaN forward value ``y`` gives NaN; a NaN in ``dy`` propagates where the mask passes it.
    """
    where = "relu_backward"
    _check_io(where, y, dy=dy, out=out)
    _, lo, hi = _clips((lower, upper), where)
    if y.size == 0:
        return
    if y.ndim < 2:
        y, dy, out = (a.reshape(1, 1, -1) for a in (y, dy, out))
    dt = _work_dtype(y, dy, out)
    os_, finish = _dst(out, dt)
    _kernels.relu_backward(_src(y, dt), _src(dy, dt), os_, lo, hi)
    finish()
