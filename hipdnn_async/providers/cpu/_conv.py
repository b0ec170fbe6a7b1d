"""Convolution algorithms of the cpu provider: fprop, dgrad and wgrad over NumPy BLAS.

Every algorithm takes **logical** arrays (dims N, C, *spatial, for 1, 2 or 3 spatial
dims) with any strides and dtype float32, float16, ml_dtypes.bfloat16 or float64, and
writes every element of its output array (nothing else). Arithmetic is float32 (float64
when the I/O type is float64); operands are packed once into contiguous work-dtype
copies, the size of the tensors themselves. Scratch that *grows* with the kernel size
(column matrices) lives in the caller's workspace, so ``workspace_size`` is honest.
The GEMMs run in BLAS, which releases the GIL.

Algorithms, per direction (``ALGORITHMS[direction]`` lists them in heuristic preference
order: gemm_1x1, im2col_gemm, direct, im2col_gemm_chunked):

``gemm_1x1``
    1x1 kernels only (any padding, stride, dilation): one GEMM per group in the layout of
    the input, channels-last (N*P, C) x (C, K) for NHWC-like strides, channel-first
    (K, C) x (C, P) per image otherwise; a matching float32 input with stride 1 and no
    padding is used without a copy.
    Output positions that see only padding are written 0. No workspace.
``im2col_gemm``
    Column matrix of the whole batch, (G, C/G * prod(kernel), N * prod(out)), in the
    workspace, then one GEMM per group (dgrad: GEMM into the columns, then col2im).
``im2col_gemm_chunked``
    The same with the columns of one image at a time: workspace divided by N.
``direct``
    No workspace: one GEMM per kernel tap over strided windows of the packed input,
    restricted to the output range where that tap meets real input (padding is never
    materialised). Applicable everywhere; the choice for a workspace limit of 0.

Geometry (docs/contract/semantics.md): cross-correlation,
``out = (in + pre + post - dil*(k-1) - 1)//stride + 1``; output position o, tap t read input
``o*stride + t*dil - pre``.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..._errors import ExecutionError, GraphError

__all__ = ["ConvProblem", "ConvAlgorithm", "ALGORITHMS", "heuristic_choice", "conv_output_dims",
           "affordable_workspace", "available_memory", "memory_budget", "io_bytes"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_DIRECTIONS = ("fprop", "dgrad", "wgrad")
_ROLES = {"fprop": ("x", "w", "y"), "dgrad": ("dy", "w", "dx"), "wgrad": ("dy", "x", "dw")}


# ----------------------------------------------------------------------------
# Problem
# ----------------------------------------------------------------------------

def conv_output_dims(x_dims, w_dims, pre_padding, post_padding, stride, dilation) -> tuple:
    """Output dims (N, K, *out) of a cross-correlation; one line of the contract's
    formula per dim (docs/contract/semantics.md)."""
    out = tuple((i + a + b - d * (k - 1) - 1) // s + 1 for i, k, a, b, s, d in
                zip(x_dims[2:], w_dims[2:], pre_padding, post_padding, stride, dilation))
    return (x_dims[0], w_dims[0]) + out


@dataclass(frozen=True)
class ConvProblem:
    """One convolution problem, independent of strides and buffers.

    Parameters
    ----------
    direction : str
        ``"fprop"``, ``"dgrad"`` or ``"wgrad"``.
    x_dims : tuple of int
        (N, C, *spatial) of x (of dx for dgrad). N = 0 (an empty batch) is allowed.
    w_dims : tuple of int
        (K, C/groups, *kernel) of w (of dw for wgrad).
    y_dims : tuple of int
        (N, K, *out_spatial) of y (of dy for dgrad and wgrad).
    pre_padding, post_padding, stride, dilation : tuple of int
        One entry per spatial dim; padding >= 0, stride and dilation >= 1.
    groups : int
        C // (C/groups); K must be divisible by it.
    dtype : numpy.dtype
        I/O element type (float32, float16, bfloat16 or float64).
    """

    direction: str
    x_dims: tuple
    w_dims: tuple
    y_dims: tuple
    pre_padding: tuple
    post_padding: tuple
    stride: tuple
    dilation: tuple
    groups: int
    dtype: np.dtype

    def __post_init__(self):
        for name in ("x_dims", "w_dims", "y_dims", "pre_padding", "post_padding", "stride",
                     "dilation"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "groups", int(self.groups))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        self._validate()

    def _validate(self) -> None:
        where = f"conv_{self.direction}"
        if self.direction not in _DIRECTIONS:
            raise GraphError(f"ConvProblem: direction {self.direction!r}; use one of {_DIRECTIONS}")
        nsp = len(self.x_dims) - 2
        if nsp < 1 or len(self.w_dims) != nsp + 2 or len(self.y_dims) != nsp + 2:
            raise GraphError(f"{where}: dims x {self.x_dims}, w {self.w_dims}, y {self.y_dims} "
                             "need one rank, 3 to 5")
        for name in ("pre_padding", "post_padding", "stride", "dilation"):
            if len(getattr(self, name)) != nsp:
                raise GraphError(f"{where}: {name} {getattr(self, name)} needs {nsp} entries")
        for i in range(nsp):
            if self.stride[i] < 1 or self.dilation[i] < 1:
                raise GraphError(f"{where}: spatial dim {i}: stride {self.stride[i]}, dilation "
                                 f"{self.dilation[i]}; need >= 1")
            if self.pre_padding[i] < 0 or self.post_padding[i] < 0:
                raise GraphError(f"{where}: spatial dim {i}: padding ({self.pre_padding[i]}, "
                                 f"{self.post_padding[i]}); need >= 0")
        n, c = self.x_dims[:2]
        k, cg = self.w_dims[:2]
        g = self.groups
        if g < 1 or cg * g != c or k % g:
            raise GraphError(f"{where}: groups {g} with x C={c}, w dims {self.w_dims}; need "
                             "C == groups * w.C and K % groups == 0")
        expect = conv_output_dims(self.x_dims, self.w_dims, self.pre_padding, self.post_padding,
                                  self.stride, self.dilation)
        if (any(v < 1 for v in expect[2:]) or any(v < 1 for v in self.x_dims[1:] + self.w_dims)
                or n < 0):
            raise GraphError(f"{where}: output dims {expect} from x {self.x_dims}, w {self.w_dims}; "
                             "every dim must be >= 1 (N >= 0)")
        if expect != self.y_dims:
            raise GraphError(f"{where}: y dims {self.y_dims} do not match x {self.x_dims}, "
                             f"w {self.w_dims}; expected {expect}")

    @property
    def work_dtype(self) -> np.dtype:
        """Accumulation type: float64 for float64 I/O, else float32."""
        return _F64 if self.dtype == _F64 else _F32

    @property
    def taps(self) -> int:
        """Number of kernel taps, prod(kernel spatial dims)."""
        return math.prod(self.w_dims[2:])


# ----------------------------------------------------------------------------
# Geometry and packing helpers
# ----------------------------------------------------------------------------

def _tap_windows(p: ConvProblem):
    """Yield (tap index tuple, output slices, input slices) for every tap meeting real input.

    For tap t of a dim, the valid outputs are lo <= o < hi with 0 <= o*s + t*d - pre < in;
    the matching inputs are the strided range starting at lo*s + t*d - pre, step s.
    """
    per_dim = []
    for i_, k, o, a, s, d in zip(p.x_dims[2:], p.w_dims[2:], p.y_dims[2:], p.pre_padding,
                                 p.stride, p.dilation):
        lst = []
        for t in range(k):
            off = t * d - a
            lo = max(0, -(off // s))
            hi = min(o, (i_ - 1 - off) // s + 1) if i_ - 1 - off >= 0 else 0
            if hi > lo:
                st = lo * s + off
                lst.append((t, slice(lo, hi), slice(st, st + (hi - lo - 1) * s + 1, s)))
        per_dim.append(lst)
    for combo in itertools.product(*per_dim):
        yield (tuple(c[0] for c in combo), tuple(c[1] for c in combo),
               tuple(c[2] for c in combo))


def _full_cover(p: ConvProblem) -> bool:
    """True when every tap meets real input at every output position (no padding is read)."""
    for i_, k, o, a, s, d in zip(p.x_dims[2:], p.w_dims[2:], p.y_dims[2:], p.pre_padding,
                                 p.stride, p.dilation):
        if a > 0 or (o - 1) * s + (k - 1) * d - a > i_ - 1:
            return False
    return True


def _cfirst(a: np.ndarray, dt: np.dtype, groups: int) -> np.ndarray:
    """Pack (N, C, *sp) as a contiguous (G, C/G, N, *sp) array of ``dt``."""
    n, c = a.shape[:2]
    packed = np.empty((c, n) + a.shape[2:], dtype=dt)
    packed[...] = np.swapaxes(a, 0, 1)
    return packed.reshape((groups, c // groups, n) + a.shape[2:])


def _store_cfirst(out: np.ndarray, acc: np.ndarray) -> None:
    """Write a (G, C/G, N, *sp) result into the logical (N, C, *sp) ``out``."""
    g, cg, n = acc.shape[:3]
    out[...] = np.swapaxes(acc.reshape((g * cg, n) + acc.shape[3:]), 0, 1)


def _weights(w: np.ndarray, p: ConvProblem) -> np.ndarray:
    """w (K, C/G, *k) as a contiguous work-dtype (G, K/G, C/G, *k) array."""
    k = w.shape[0]
    return np.ascontiguousarray(w, dtype=p.work_dtype).reshape(
        (p.groups, k // p.groups) + w.shape[1:])


def _store_weights(out: np.ndarray, dw: np.ndarray) -> None:
    """Write a (G, K/G, C/G, *k) result into the logical (K, C/G, *k) ``out``."""
    out[...] = dw.reshape(out.shape)


def _workspace(workspace, p: ConvProblem, name: str, need: int, shape) -> np.ndarray:
    """A work-dtype view of the first ``need`` bytes of the caller's uint8 workspace."""
    if need == 0:
        return np.empty(shape, p.work_dtype)
    got = 0 if workspace is None else workspace.nbytes
    if workspace is None or got < need:
        raise ExecutionError(f"conv_{p.direction} algorithm '{name}': workspace of {got} bytes; "
                             f"needs {need} (ask workspace_size)")
    if workspace.dtype != np.uint8 or not workspace.flags.c_contiguous:
        raise ExecutionError(f"conv_{p.direction} algorithm '{name}': workspace must be a "
                             f"contiguous uint8 array; got {workspace.dtype} with strides "
                             f"{workspace.strides}")
    return workspace.reshape(-1)[:need].view(p.work_dtype).reshape(shape)


def _check_arrays(p: ConvProblem, name: str, a, b, out) -> None:
    """Dims of the three arrays against the problem; GraphError naming the tensor."""
    dims = {"fprop": (p.x_dims, p.w_dims, p.y_dims), "dgrad": (p.y_dims, p.w_dims, p.x_dims),
            "wgrad": (p.y_dims, p.x_dims, p.w_dims)}[p.direction]
    for role, arr, want in zip(_ROLES[p.direction], (a, b, out), dims):
        if tuple(arr.shape) != want:
            raise GraphError(f"conv_{p.direction} algorithm '{name}': tensor '{role}' has dims "
                             f"{tuple(arr.shape)}; expected {want}")
    if not out.flags.writeable:
        raise ExecutionError(f"conv_{p.direction} algorithm '{name}': output "
                             f"'{_ROLES[p.direction][2]}' is read-only")


_ALL = (slice(None),) * 3


# ----------------------------------------------------------------------------
# Algorithms
# ----------------------------------------------------------------------------

class ConvAlgorithm:
    """One convolution algorithm for one direction (an entry of ``ALGORITHMS``).

    Attributes
    ----------
    name : str
        Stable algorithm name, recorded in plans and the perf db.
    direction : str
        ``"fprop"``, ``"dgrad"`` or ``"wgrad"``.
    """

    name = ""

    def __init__(self, direction: str):
        self.direction = direction

    def __repr__(self) -> str:
        return f"<ConvAlgorithm {self.direction}/{self.name}>"

    def applicable(self, p: ConvProblem) -> bool:
        """Whether this algorithm computes ``p`` (direction and shape domain)."""
        return p.direction == self.direction

    def workspace_size(self, p: ConvProblem) -> int:
        """Workspace bytes ``run`` needs for ``p`` (0: pass None)."""
        return 0

    def run(self, p: ConvProblem, a: np.ndarray, b: np.ndarray, out: np.ndarray,
            workspace: np.ndarray | None = None) -> None:
        """Compute ``p`` into ``out``.

        Parameters
        ----------
        p : ConvProblem
        a, b, out : ndarray
            fprop: x, w, y; dgrad: dy, w, dx; wgrad: dy, x, dw. Logical dims, any strides.
        workspace : ndarray of uint8 or None
            At least ``workspace_size(p)`` bytes, C-contiguous.

        Raises
        ------
        GraphError
            Dims of an array do not match ``p``.
        ExecutionError
            Not applicable, or the workspace is too small.
        """
        if not self.applicable(p):
            raise ExecutionError(f"conv_{p.direction} algorithm '{self.name}' is not applicable to "
                                 f"w dims {p.w_dims}")
        _check_arrays(p, self.name, a, b, out)
        if p.x_dims[0] == 0:       # empty batch: nothing to compute, dw of an empty sum is 0
            out[...] = 0
            return
        getattr(self, "_" + p.direction)(p, a, b, out, workspace)


# Bytes of one tap window a direct GEMM copies at a time: the batch is walked in chunks
# of this size so that the temporaries stay small next to the tensors.
_DIRECT_WINDOW_BYTES = 1 << 20


def _batch_chunks(n: int, per_image_bytes: int):
    """Slices of the batch whose tap windows fit in _DIRECT_WINDOW_BYTES (at least 1 image)."""
    step = max(1, min(n, _DIRECT_WINDOW_BYTES // max(per_image_bytes, 1)))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


class Direct(ConvAlgorithm):
    """Per-tap GEMMs over strided windows, a chunk of the batch at a time; no workspace."""

    name = "direct"

    def _fprop(self, p, x, w, y, ws):
        xp = _cfirst(x, p.work_dtype, p.groups)                     # (G, Cg, N, *sp)
        wp = _weights(w, p)                                         # (G, Kg, Cg, *k)
        acc = np.zeros(wp.shape[:2] + (p.y_dims[0],) + p.y_dims[2:], p.work_dtype)
        per_image = xp[:, :, 0].nbytes
        for tap, o_sl, i_sl in _tap_windows(p):
            w_tap = wp[(Ellipsis,) + tap]
            for nb in _batch_chunks(p.x_dims[0], per_image):
                win = np.ascontiguousarray(xp[(slice(None), slice(None), nb) + i_sl])
                res = np.matmul(w_tap, win.reshape(win.shape[:2] + (-1,)))
                acc[(slice(None), slice(None), nb) + o_sl] += res.reshape(
                    acc.shape[:2] + win.shape[2:])
        _store_cfirst(y, acc)

    def _dgrad(self, p, dy, w, dx, ws):
        yp = _cfirst(dy, p.work_dtype, p.groups)                    # (G, Kg, N, *o)
        wt = np.swapaxes(_weights(w, p), 1, 2)                      # (G, Cg, Kg, *k)
        acc = np.zeros((p.groups, p.x_dims[1] // p.groups, p.x_dims[0]) + p.x_dims[2:],
                       p.work_dtype)
        per_image = yp[:, :, 0].nbytes
        for tap, o_sl, i_sl in _tap_windows(p):
            w_tap = np.ascontiguousarray(wt[(Ellipsis,) + tap])
            for nb in _batch_chunks(p.x_dims[0], per_image):
                win = np.ascontiguousarray(yp[(slice(None), slice(None), nb) + o_sl])
                res = np.matmul(w_tap, win.reshape(win.shape[:2] + (-1,)))
                acc[(slice(None), slice(None), nb) + i_sl] += res.reshape(
                    acc.shape[:2] + win.shape[2:])
        _store_cfirst(dx, acc)

    def _wgrad(self, p, dy, x, dw, ws):
        yp = _cfirst(dy, p.work_dtype, p.groups)                    # (G, Kg, N, *o)
        xp = _cfirst(x, p.work_dtype, p.groups)                     # (G, Cg, N, *sp)
        acc = np.zeros((p.groups, p.w_dims[0] // p.groups) + p.w_dims[1:], p.work_dtype)
        per_image = yp[:, :, 0].nbytes + xp[:, :, 0].nbytes
        for tap, o_sl, i_sl in _tap_windows(p):
            for nb in _batch_chunks(p.x_dims[0], per_image):
                ywin = np.ascontiguousarray(yp[(slice(None), slice(None), nb) + o_sl])
                xwin = np.ascontiguousarray(xp[(slice(None), slice(None), nb) + i_sl])
                acc[(Ellipsis,) + tap] += np.matmul(
                    ywin.reshape(ywin.shape[:2] + (-1,)),
                    np.swapaxes(xwin.reshape(xwin.shape[:2] + (-1,)), 1, 2))
        _store_weights(dw, acc)


class Im2colGemm(ConvAlgorithm):
    """Column matrix in the workspace, then one GEMM per group (chunked over images)."""

    name = "im2col_gemm"
    per_image = False

    def _chunk(self, p: ConvProblem) -> int:
        return 1 if self.per_image else p.y_dims[0]

    def _col_shape(self, p: ConvProblem, nb: int) -> tuple:
        g = p.groups
        return (g, p.x_dims[1] // g) + p.w_dims[2:] + (nb,) + p.y_dims[2:]

    def workspace_size(self, p: ConvProblem) -> int:
        if p.x_dims[0] == 0:
            return 0
        return math.prod(self._col_shape(p, self._chunk(p))) * p.work_dtype.itemsize

    def _chunks(self, p: ConvProblem):
        nb = self._chunk(p)
        for n0 in range(0, p.y_dims[0], nb):
            yield n0, min(n0 + nb, p.y_dims[0])

    def _fill(self, p, col, xp, n0, n1):
        """col[g, c, *tap, n, *o] = x[n0 + n, g*Cg + c, o*s + tap*d - pre] (0 in padding)."""
        if not _full_cover(p):
            col.fill(0)
        for tap, o_sl, i_sl in _tap_windows(p):
            col[(slice(None), slice(None)) + tap + (slice(0, n1 - n0),) + o_sl] = \
                xp[(slice(None), slice(None), slice(n0, n1)) + i_sl]

    def _fprop(self, p, x, w, y, ws):
        g = p.groups
        xp = _cfirst(x, p.work_dtype, g)
        wm = _weights(w, p).reshape(g, p.w_dims[0] // g, -1)        # (G, Kg, Cg*T)
        out = np.empty((g, p.w_dims[0] // g, p.y_dims[0]) + p.y_dims[2:], p.work_dtype)
        col_all = _workspace(ws, p, self.name, self.workspace_size(p),
                             self._col_shape(p, self._chunk(p)))
        for n0, n1 in self._chunks(p):
            col = col_all          # chunks are 1 or N images: always the full buffer
            self._fill(p, col, xp, n0, n1)
            res = np.matmul(wm, col.reshape(g, wm.shape[2], -1))
            out[:, :, n0:n1] = res.reshape((g, wm.shape[1], n1 - n0) + p.y_dims[2:])
        _store_cfirst(y, out)

    def _wgrad(self, p, dy, x, dw, ws):
        g = p.groups
        xp = _cfirst(x, p.work_dtype, g)
        yp = _cfirst(dy, p.work_dtype, g)                           # (G, Kg, N, *o)
        acc = np.zeros((g, p.w_dims[0] // g, math.prod(p.w_dims[1:])), p.work_dtype)
        col_all = _workspace(ws, p, self.name, self.workspace_size(p),
                             self._col_shape(p, self._chunk(p)))
        for n0, n1 in self._chunks(p):
            col = col_all
            self._fill(p, col, xp, n0, n1)
            ym = yp[:, :, n0:n1].reshape(g, yp.shape[1], -1)
            acc += np.matmul(ym, np.swapaxes(col.reshape(g, acc.shape[2], -1), 1, 2))
        _store_weights(dw, acc)

    def _dgrad(self, p, dy, w, dx, ws):
        g = p.groups
        yp = _cfirst(dy, p.work_dtype, g)                           # (G, Kg, N, *o)
        wt = np.swapaxes(_weights(w, p).reshape(g, p.w_dims[0] // g, -1), 1, 2)  # (G, Cg*T, Kg)
        acc = np.zeros((g, p.x_dims[1] // g, p.x_dims[0]) + p.x_dims[2:], p.work_dtype)
        col_all = _workspace(ws, p, self.name, self.workspace_size(p),
                             self._col_shape(p, self._chunk(p)))
        for n0, n1 in self._chunks(p):
            col = col_all
            ym = np.ascontiguousarray(yp[:, :, n0:n1]).reshape(g, yp.shape[1], -1)
            np.matmul(wt, ym, out=col.reshape(g, wt.shape[1], -1))
            for tap, o_sl, i_sl in _tap_windows(p):
                acc[(slice(None), slice(None), slice(n0, n1)) + i_sl] += \
                    col[(slice(None), slice(None)) + tap + (slice(None),) + o_sl]
        _store_cfirst(dx, acc)


class Im2colGemmChunked(Im2colGemm):
    """im2col + GEMM one image at a time: workspace / N, more (smaller) GEMMs."""

    name = "im2col_gemm_chunked"
    per_image = True


class Gemm1x1(ConvAlgorithm):
    """1x1 kernels: one GEMM per group in the input's own layout; padding-only outputs are 0."""

    name = "gemm_1x1"

    def applicable(self, p: ConvProblem) -> bool:
        return p.direction == self.direction and all(k == 1 for k in p.w_dims[2:])

    @staticmethod
    def _clast(a: np.ndarray, sl: tuple, dt: np.dtype, groups: int) -> np.ndarray:
        """a[:, :, *sl] as (G, N*S, C/G) channels-last; no copy for a matching NHWC buffer."""
        win = np.moveaxis(a[(slice(None), slice(None)) + sl], 1, -1)   # (N, *s, C)
        m = np.ascontiguousarray(win, dtype=dt).reshape(-1, groups, a.shape[1] // groups)
        return np.swapaxes(m, 0, 1)

    @staticmethod
    def _put_clast(out: np.ndarray, sl: tuple, res: np.ndarray, full: bool) -> None:
        """Write (G, N*S, C/G) into out[:, :, *sl]; zero the rest of ``out`` unless ``full``."""
        if not full:
            out[...] = 0
        dst = out[(slice(None), slice(None)) + sl]
        shaped = np.swapaxes(res, 0, 1).reshape((dst.shape[0],) + dst.shape[2:] + (dst.shape[1],))
        dst[...] = np.moveaxis(shaped, -1, 1)

    @staticmethod
    def _channels_last(a: np.ndarray) -> bool:
        """True when ``a``'s channel stride is below its innermost spatial stride (NHWC-like)."""
        return a.shape[1] > 1 and abs(a.strides[1]) < abs(a.strides[-1])

    @staticmethod
    def _cf(a: np.ndarray, sl: tuple, dt: np.dtype, groups: int) -> np.ndarray:
        """a[:, :, *sl] as (N, G, C/G, S) channel-first; no copy for a matching NCHW buffer."""
        win = np.ascontiguousarray(a[(slice(None), slice(None)) + sl], dtype=dt)
        return win.reshape(a.shape[0], groups, a.shape[1] // groups, -1)

    @staticmethod
    def _put_cf(out: np.ndarray, sl: tuple, res: np.ndarray, full: bool) -> None:
        """Write (N, G, C/G, S) into out[:, :, *sl]; zero the rest of ``out`` unless ``full``."""
        if not full:
            out[...] = 0
        dst = out[(slice(None), slice(None)) + sl]
        dst[...] = res.reshape(dst.shape)

    def _window(self, p):
        (_, o_sl, i_sl), = list(_tap_windows(p)) or [(None, None, None)]
        return o_sl, i_sl

    def _fprop(self, p, x, w, y, ws):
        o_sl, i_sl = self._window(p)
        if o_sl is None:
            y[...] = 0
            return
        wm = _weights(w, p).reshape(p.groups, p.w_dims[0] // p.groups, -1)   # (G, Kg, Cg)
        full = all(s.start == 0 and s.stop == o for s, o in zip(o_sl, p.y_dims[2:]))
        if self._channels_last(x):
            xm = self._clast(x, i_sl, p.work_dtype, p.groups)                  # (G, M, Cg)
            self._put_clast(y, o_sl, np.matmul(xm, np.swapaxes(wm, 1, 2)), full)
        else:
            xm = self._cf(x, i_sl, p.work_dtype, p.groups)                     # (N, G, Cg, S)
            self._put_cf(y, o_sl, np.matmul(wm, xm), full)

    def _dgrad(self, p, dy, w, dx, ws):
        o_sl, i_sl = self._window(p)
        if o_sl is None:
            dx[...] = 0
            return
        wm = _weights(w, p).reshape(p.groups, p.w_dims[0] // p.groups, -1)   # (G, Kg, Cg)
        full = all(s.start == 0 and s.stop == i and s.step == 1
                   for s, i in zip(i_sl, p.x_dims[2:]))
        if self._channels_last(dy):
            ym = self._clast(dy, o_sl, p.work_dtype, p.groups)                 # (G, M, Kg)
            self._put_clast(dx, i_sl, np.matmul(ym, wm), full)
        else:
            ym = self._cf(dy, o_sl, p.work_dtype, p.groups)                    # (N, G, Kg, S)
            wt = np.ascontiguousarray(np.swapaxes(wm, 1, 2))                   # (G, Cg, Kg)
            self._put_cf(dx, i_sl, np.matmul(wt, ym), full)

    def _wgrad(self, p, dy, x, dw, ws):
        o_sl, i_sl = self._window(p)
        if o_sl is None:
            dw[...] = 0
            return
        if self._channels_last(x):
            ym = self._clast(dy, o_sl, p.work_dtype, p.groups)                 # (G, M, Kg)
            xm = self._clast(x, i_sl, p.work_dtype, p.groups)                  # (G, M, Cg)
            res = np.matmul(np.swapaxes(ym, 1, 2), xm)                         # (G, Kg, Cg)
        else:
            ym = self._cf(dy, o_sl, p.work_dtype, p.groups)                    # (N, G, Kg, S)
            xm = self._cf(x, i_sl, p.work_dtype, p.groups)                     # (N, G, Cg, S)
            res = np.matmul(ym, np.swapaxes(xm, 2, 3)).sum(axis=0)             # (G, Kg, Cg)
        _store_weights(dw, res)


def _make(direction: str) -> tuple:
    return (Gemm1x1(direction), Im2colGemm(direction), Im2colGemmChunked(direction),
            Direct(direction))


ALGORITHMS: dict[str, tuple[ConvAlgorithm, ...]] = {d: _make(d) for d in _DIRECTIONS}


# The heuristic's workspace budget (``affordable_workspace``): a workspace up to
# _IO_FACTOR times the problem's I/O bytes, or up to _SMALL_WORKSPACE whatever the ratio,
# and never more than _MEMORY_SHARE of the memory available now. im2col's column matrix is
# prod(kernel) x the input: 9x for 3x3 (taken), 49x for a 7x7 with C == K (the chunked
# variant then, N times smaller and within ~10% of its speed), 961x for 31x31 (issue 10:
# 481 GiB for an 8x1x4096^2 input, so chunked or direct).
_IO_FACTOR = 16
_SMALL_WORKSPACE = 64 << 20
_MEMORY_SHARE = 0.5


def available_memory() -> int | None:
    """Bytes of memory this process can still get, or None where it cannot be read.

    Linux: ``MemAvailable`` of /proc/meminfo, lowered to the cgroup's room
    (``memory.max - memory.current``, cgroup v2) inside a limited container.
    """
    avail = None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", "rb") as f:
            limit = f.read().strip()
        if limit != b"max":
            with open("/sys/fs/cgroup/memory.current", "rb") as f:
                room = max(0, int(limit) - int(f.read().strip()))
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    return avail


def io_bytes(p: ConvProblem) -> int:
    """Bytes of the problem's three tensors in the work dtype (what is packed anyway)."""
    return (math.prod(p.x_dims) + math.prod(p.w_dims) + math.prod(p.y_dims)) * \
        p.work_dtype.itemsize


def memory_budget() -> int | None:
    """The largest workspace worth allocating now (``_MEMORY_SHARE`` of the available
    memory), or None where the available memory cannot be read."""
    avail = available_memory()
    return None if avail is None else int(avail * _MEMORY_SHARE)


def affordable_workspace(p: ConvProblem) -> int:
    """The heuristic's workspace budget for ``p``, in bytes (see ``_IO_FACTOR``)."""
    budget = max(_IO_FACTOR * io_bytes(p), _SMALL_WORKSPACE)
    memory = memory_budget()
    return budget if memory is None else min(budget, memory)


def heuristic_choice(p: ConvProblem, workspace_limit: int) -> ConvAlgorithm:
    """The fastest applicable algorithm of ``p.direction`` whose workspace fits the limit
    and the heuristic's budget.

    Parameters
    ----------
    p : ConvProblem
    workspace_limit : int
        Bytes; 0 selects a zero-workspace algorithm (``direct`` is always applicable).

    Notes
    -----
    Preference order is ``ALGORITHMS[p.direction]``'s, from bench/bench_conv_algorithms.py
    on ResNet-50 layers (2-core x86-64): gemm_1x1 (1x1 only) > im2col_gemm >
    im2col_gemm_chunked (N times less workspace, within ~10% of im2col_gemm) > direct
    (no workspace; 1.2-7x slower than the chunked GEMM on 3x3 and 7x7 layers).

    The workspace is also held to ``affordable_workspace(p)``: at most 16x the I/O bytes
    (or 64 MiB), and half the memory available now, so that the default limit (the
    largest algorithm's workspace) never picks a column matrix that cannot be allocated;
    an algorithm of zero workspace (``direct``) is always within it.
    """
    limit = min(workspace_limit, affordable_workspace(p))
    for alg in ALGORITHMS[p.direction]:
        if alg.applicable(p) and alg.workspace_size(p) <= limit:
            return alg
    raise ExecutionError(f"conv_{p.direction}: no algorithm fits a workspace limit of "
                         f"{workspace_limit} bytes")
