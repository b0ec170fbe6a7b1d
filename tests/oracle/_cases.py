"""Shared cases, tolerances and the public-API harness of the oracle suite.

Tolerances follow ``|impl - ref| <= atol + rtol*|ref|`` elementwise, with the float64
reference computed from the *same rounded inputs* the library sees (inputs drawn in
float64, rounded to the I/O dtype, then read back as float64). Only the public API of
``hipdnn_async`` is used here.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

__all__ = [
    "DTYPES", "LAYOUTS", "TOL", "tol", "wgrad_tol", "layout_strides", "Harness",
    "assert_close", "device", "np_dtype",
]

# I/O dtypes by public name; hd.DataType is accepted as well but we keep strings so
# that collecting the suite does not need the library.
DTYPES = ("float32", "float16", "bfloat16")


def np_dtype(name):
    return {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
            "bfloat16": np.dtype(ml_dtypes.bfloat16)}[name]


# ---------------------------------------------------------------------------------------
# Tolerances: (atol = rtol = value) per op per I/O dtype.
# Source: hipDNN hipdnn_test_sdk/utilities/TestTolerances.hpp (newest version read), as
# set out with these deviations in docs/contract/tolerances.md.
# Deviations are commented on the line.
# Half-ulp (unit roundoff) of the output types: fp32 2^-24 = 6.0e-8, fp16 2^-11 = 4.9e-4,
# bf16 2^-8 = 3.9e-3 (bf16 keeps 8 significand bits); any tolerance below the output type's
# unit roundoff would fail on correctly rounded results.
TOL = {
    # conv::getToleranceFwd: 1e-5 / 1e-2 / 1e-2. bf16: 1e-2 ~ 2.6 bf16 half-ulps; with FLOAT
    # accumulation the only error left is the final rounding to bf16 (<= 3.9e-3 relative).
    "conv_fprop": {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2},
    # conv::getToleranceBwd: 8.5e-6 / 2e-2 / 2e-2
    "conv_dgrad": {"float32": 8.5e-6, "float16": 2e-2, "bfloat16": 2e-2},
    # wgrad: hipDNN's IntegrationGpuConvBackwardWeights uses rtol 0.01 with a dynamic atol;
    # fp32 rtol 2e-4 is conv::getToleranceWrw<float>. atol: see wgrad_tol().
    "conv_wgrad": {"float32": 2e-4, "float16": 1e-2, "bfloat16": 1e-2},
    # batchnorm::getToleranceTraining 4e-3 / 4e-3 / 8e-3
    "bn_training": {"float32": 4e-3, "float16": 4e-3, "bfloat16": 8e-3},
    # batchnorm::getToleranceInferenceWithVariance 2e-4 / 6.6e-4 / 5.2e-3
    "bn_inference_variance": {"float32": 2e-4, "float16": 6.6e-4, "bfloat16": 5.2e-3},
    # batchnorm::getToleranceInference 2e-4 / 5e-4 / 5e-3
    "bn_inference": {"float32": 2e-4, "float16": 5e-4, "bfloat16": 5e-3},
    # batchnorm::getToleranceBackward 2e-3 / 4e-4 / 3e-3. fp16: 4e-4 is below fp16's
    # unit roundoff 4.9e-4 (it would reject correctly rounded dx with |dx| > ~4), so 1e-3;
    # bf16: 3e-3 is below bf16's 3.9e-3 (correctly rounded dx with |dx| > ~3.3 failed), so
    # 4e-3.
    "bn_backward": {"float32": 2e-3, "float16": 1e-3, "bfloat16": 4e-3},
    # pointwise::getTolerance 1e-5 / 1e-3 / 1e-2
    "pointwise": {"float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2},
}


def tol(op, dtype):
    """(atol, rtol) of the static table for an op and an I/O dtype name."""
    v = TOL[op][dtype]
    return v, v


def sequential_atol(n, max_a=1.0, max_b=1.0):
    """Absolute error of an n-term FLOAT reduction summed in order (GPU kernels such as
    cuDNN's ALGO_1 wgrad do), as a random walk: u * sqrt(n) rounding steps on partial sums
    that grow like sqrt(n) * max|a|*max|b|, so u * n * max|a|*max|b| (u = 2^-24); about
    3x the rms estimate for U(-1, 1) operands."""
    return TOL["conv_fprop"]["float32"] + 2.0 ** -24 * max(n, 1) * max_a * max_b


def reduction_tol(op, dtype, n, max_a=1.0, max_b=1.0):
    """(atol, rtol) for a convolution whose outputs are sums of n products (fprop:
    C/groups*R*S; dgrad: about K/groups*R*S): the static table's value, with the FLOAT
    accumulation bound of :func:`wgrad_tol` as the atol floor where it is larger. The
    static fp32 1e-5 is below the rounding of a 576-term FLOAT sum of U(-1, 1) products
    (about 1.1e-5), so long reductions need it."""
    atol, rtol = tol(op, dtype)
    return max(atol, wgrad_tol(dtype, n, max_a, max_b)[0], sequential_atol(n, max_a, max_b)), rtol


def gpu_wgrad_tol(dtype, n, max_a, max_b):
    """:func:`wgrad_tol` with :func:`sequential_atol` as a floor: kernels that sum the n
    terms in order, cuDNN's ALGO_1 on a GPU and oneDNN's jit weight gradients on a CPU
    (tests/oracle/test_onednn_resnet_wgrad.py)."""
    atol, rtol = wgrad_tol(dtype, n, max_a, max_b)
    return max(atol, sequential_atol(n, max_a, max_b)), rtol


def wgrad_tol(dtype, n, max_a, max_b):
    """(atol, rtol) for wgrad, whose reductions run over n = N*prod(dy spatial) terms.

    As hipDNN's ``calculateConvWrwTolerance`` (DynamicTolerances.hpp), the absolute error
    scales with max|a|*max|b|; for a statistical (not worst-case) bound we take sqrt(n):
    atol = 16 * 2^-24 * sqrt(n) * max|dy| * max|x| (FLOAT accumulation,
    docs/contract/semantics.md: "accumulation is always FLOAT or wider"; 16 units of
    roundoff of headroom for blocked sums), plus the fp32 conv::getToleranceFwd value 1e-5
    as a floor. The I/O rounding of dw is relative and covered by rtol.
    """
    atol = TOL["conv_fprop"]["float32"] + 16 * 2.0 ** -24 * math.sqrt(max(n, 1)) * max_a * max_b
    return atol, TOL["conv_wgrad"][dtype]


# ---------------------------------------------------------------------------------------
# Layouts: packed ones and non-packed variants (every dim padded by one element in memory).
LAYOUTS = ("NCHW", "NHWC", "NHWC_nonpacked", "NCDHW", "NDHWC", "NCDHW_nonpacked")
_ORDERS = {  # memory order, outermost first, as indices into logical dims
    "NCHW": (0, 1, 2, 3), "NHWC": (0, 2, 3, 1),
    "NCDHW": (0, 1, 2, 3, 4), "NDHWC": (0, 2, 3, 4, 1),
}


def rank_of(layout):
    return 5 if "D" in layout.split("_")[0] else 4


def layout_strides(dims, layout):
    """Strides in elements of logical dims for a layout name (``_nonpacked``: gaps)."""
    base, _, kind = layout.partition("_")
    order = _ORDERS[base]
    gap = 1 if kind == "nonpacked" else 0
    strides = [0] * len(dims)
    s = 1
    for ax in reversed(order):
        strides[ax] = s
        s *= max(dims[ax], 1) + gap
    return tuple(strides)


def alloc(dims, strides, dtype, fill=np.nan):
    """A writable logical view of given strides over a fresh buffer pre-filled with fill."""
    dtype = np.dtype(dtype)
    size = 0 if 0 in dims else 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    base = np.full(max(size, 1), fill, dtype=dtype)
    return np.lib.stride_tricks.as_strided(
        base, shape=tuple(dims), strides=tuple(s * dtype.itemsize for s in strides))


# ---------------------------------------------------------------------------------------
def assert_close(got, ref, atol, rtol, what=""):
    """Elementwise |got - ref| <= atol + rtol*|ref|; NaN/inf must match exactly."""
    got = np.asarray(got).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != reference {ref.shape}"
    nan_ref = np.isnan(ref)
    bad_nan = np.isnan(got) != nan_ref
    assert not bad_nan.any(), (
        f"{what}: NaN mismatch at {np.argwhere(bad_nan)[:5].tolist()} "
        f"(got {got[bad_nan][:5]}, expected {ref[bad_nan][:5]})")
    inf_ref = np.isinf(ref)
    bad_inf = (np.isinf(got) | inf_ref) & ~nan_ref & (got != ref)
    assert not bad_inf.any(), (
        f"{what}: inf mismatch at {np.argwhere(bad_inf)[:5].tolist()} "
        f"(got {got[bad_inf][:5]}, expected {ref[bad_inf][:5]})")
    fin = np.isfinite(ref)
    with np.errstate(invalid="ignore", over="ignore"):   # inf - inf where both are inf
        err = np.abs(got - ref)
        lim = atol + rtol * np.abs(ref)
    bad = fin & ~(err <= lim)
    if bad.any():
        idx = np.argwhere(bad)
        i0 = tuple(idx[0])
        worst = np.unravel_index(np.argmax(np.where(fin, err - lim, -np.inf)), ref.shape)
        raise AssertionError(
            f"{what}: {bad.sum()} of {ref.size} elements outside atol={atol:.3g} rtol={rtol:.3g}; "
            f"first at {i0}: got {got[i0]!r}, expected {ref[i0]!r}; worst at {tuple(worst)}: "
            f"got {got[worst]!r}, expected {ref[worst]!r}")


# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def device():
    """A CPU device of the public API (sync use), shared by a test module."""
    import hipdnn_async as hd  # a package that does not import must fail, not skip

    with hd.Device("cpu") as dev:
        yield dev


class Harness:
    """Build a graph through the public API, bind NaN-prefilled buffers, run, compare.

    On a device whose memory is not host memory (a GPU: ``dev.is_host`` False), ``run``
    stages every buffer into device arrays of the tensors' strides and reads the outputs
    back; ``arun`` does the same through the awaited API (tests/gpu/).

    Parameters
    ----------
    dtype : str
        I/O dtype name ("float32", "float16", "bfloat16").
    layout : str
        One of LAYOUTS; sets the strides of every N, C, [D,] H, W tensor.
    """

    def __init__(self, dtype, layout, name="oracle"):
        import hipdnn_async as hd
        self.hd = hd
        self.dtype = dtype
        self.layout = layout
        self.g = hd.Graph(name=name, io_data_type=dtype,
                          intermediate_data_type=hd.DataType.FLOAT,
                          compute_data_type=hd.DataType.FLOAT)
        self.pack = {}     # name -> buffer (logical view)
        self.ref = {}      # name -> float64 values the library sees
        self.outputs = {}  # name -> tensor
        self.layouts = {}  # name -> layout name the input's strides came from
        self.staged = {}   # name -> device array (only after a staged run)

    def input(self, name, values, *, dtype=None, layout=None):
        """Add a non-virtual input: values rounded to dtype; returns the tensor."""
        dtype = dtype or self.dtype
        values = np.asarray(values, dtype=np.float64)
        strides = layout_strides(values.shape, layout or self.layout)
        t = self.g.tensor(dims=values.shape, strides=strides, name=name)
        t.set_data_type(dtype)
        buf = alloc(values.shape, strides, np_dtype(dtype))
        buf[...] = values.astype(np_dtype(dtype))
        self.pack[name] = buf
        self.layouts[name] = layout or self.layout
        self.ref[name] = buf.astype(np.float64)
        return t

    def float_input(self, name, values):
        """A FLOAT per-channel tensor (scale, bias, mean, variance): dims (1, C, 1, ...)."""
        return self.input(name, values, dtype="float32", layout=self.layout.split("_")[0])

    def output(self, t, name, *, dtype=None, explicit_strides=None):
        """Mark t as an output named name; bind a NaN-filled buffer of its strides."""
        dtype = dtype or self.dtype
        t.set_output(True).set_name(name).set_data_type(dtype)
        want = layout_strides(t.dims, self.layout)
        if explicit_strides or self.layout.endswith("nonpacked"):
            t.set_strides(want)
        self.outputs[name] = t
        return t

    def _alloc_outputs(self):
        for name, t in self.outputs.items():
            dt = np_dtype({self.hd.DataType.FLOAT: "float32", self.hd.DataType.HALF: "float16",
                           self.hd.DataType.BFLOAT16: "bfloat16"}[t.data_type])
            self.pack[name] = alloc(t.dims, t.strides, dt)

    def run(self, dev, *, stage=None, **build_kw):
        """Validate, build and execute synchronously; returns {name: output values}.

        Parameters
        ----------
        dev : Device
            The device to build and execute on.
        stage : bool, optional
            Copy every buffer into device memory first (``dev.empty`` + ``copy_from``)
            and read the outputs back (``to_numpy_sync``). Default: only on a device
            whose memory is not host memory (``dev.is_host`` False, a GPU). On the host
            path the NumPy buffers are bound directly and returned (unchanged
            behaviour); staged, C-contiguous NumPy copies in logical shape come back.
        """
        self._alloc_outputs()
        self.g.validate()
        self.plan = dev.build_sync(self.g, **build_kw)
        if stage is None:
            stage = not getattr(dev, "is_host", True)
        if not stage:
            self.plan.execute_sync(self.pack)
            return {name: self.pack[name] for name in self.outputs}
        self.staged = self.stage(dev)
        self.plan.execute_sync(self.staged)
        return {name: self.staged[name].to_numpy_sync() for name in self.outputs}

    async def arun(self, dev, **build_kw):
        """As ``run(dev, stage=True)``, awaited: ``await dev.build``, inputs through
        ``await dev.asarray(values, layout=...)`` where a named packed layout gives the
        tensor's strides (``dev.empty`` + ``copy_from`` otherwise), ``await
        plan.execute`` and ``await arr.to_numpy()``."""
        self._alloc_outputs()
        self.g.validate()
        self.plan = await dev.build(self.g, **build_kw)
        self.staged = {}
        for name, t in self._bound_tensors():
            values = np.ascontiguousarray(self.pack[name])
            layout = self._packed_layout(name, t)
            if layout is not None:
                arr = await dev.asarray(values, layout=layout)
            else:
                arr = dev.empty(t.dims, values.dtype, strides=t.strides)
                arr.copy_from(values)
            self.staged[name] = arr
        await self.plan.execute(self.staged)
        return {name: await self.staged[name].to_numpy() for name in self.outputs}

    def stage(self, dev):
        """Copy every bound buffer (inputs; NaN-filled outputs) into arrays of ``dev``
        with the tensor's strides: ``{name: device array}``, a ready variant pack."""
        staged = {}
        for name, t in self._bound_tensors():
            values = np.ascontiguousarray(self.pack[name])   # logical shape, NaN for outputs
            arr = dev.empty(t.dims, values.dtype, strides=t.strides)
            arr.copy_from(values)
            staged[name] = arr
        return staged

    def _bound_tensors(self):
        by_name = {t.name: t for t in self.g.tensors if not t.is_virtual}
        return [(name, by_name[name]) for name in self.pack]

    def _packed_layout(self, name, t):
        """The layout name whose packed strides are t's (size-1 dims aside), or None."""
        rank = len(t.dims)
        for layout in ((self.layouts.get(name, self.layout).split("_")[0],)
                       + (("NCHW", "NHWC") if rank == 4 else ("NCDHW", "NDHWC"))):
            if rank_of(layout) != rank:
                continue
            want = layout_strides(t.dims, layout)
            if all(d <= 1 or a == b for d, a, b in zip(t.dims, want, t.strides)):
                return layout
        return None

    def expect_strides(self, name):
        """Packed strides the API promises for an output of the harness layout."""
        return layout_strides(self.outputs[name].dims, self.layout)


def uniform(rng, lo, hi, shape):
    return rng.uniform(lo, hi, shape)


def chan_shape(c, rank):
    return (1, c) + (1,) * (rank - 2)
