"""A CPU device dressed as a GPU device, for testing the staging paths without a GPU.

``FakeGpuDevice`` wraps a real ``hd.Device("cpu")`` and follows the GPU contract of the
cuDNN provider: ``is_host`` is False; ``empty`` / ``asarray`` return ``FakeGpuArray``
(host memory behind the GPU array surface: ``dims``, ``strides``, ``dtype``, ``device``,
``nbytes``, ``ptr``, ``copy_from``, ``to_numpy_sync``, ``await to_numpy()``, and *no*
``.view`` or ``__array__``); its plans refuse NumPy arrays in variant packs with
``VariantPackError``, as a GPU device does; and, as the cuDNN provider, it declines at
build a RELU_FWD clipped below at anything but 0. Copies and executions are counted, so
tests can tell that data was staged.

The staging tests (tests/async/test_batcher_staging.py, tests/test_demo_staging.py)
import it from here; the tests below check the fake itself against the contract.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import hipdnn_async as hd

__all__ = ["FakeGpuArray", "FakeGpuDevice", "FakeGpuPlan"]


class FakeGpuArray:
    """Host-backed stand-in for ``runtime.GpuArray``: the GPU surface without ``.view``."""

    def __init__(self, inner, owner: "FakeGpuDevice"):
        self._inner = inner                 # a runtime.DeviceArray of the CPU device
        self._owner = owner
        self.dims, self.strides, self.dtype = inner.dims, inner.strides, inner.dtype
        self.device = owner.spec
        self.nbytes = inner.nbytes

    @property
    def ptr(self) -> int:
        return self._inner.view.ctypes.data

    def copy_from(self, array) -> None:
        """Blocking "host-to-device" copy; as strict as a raw copy (shape and dtype)."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"copy_from takes a NumPy array; got {type(array).__name__}")
        if array.shape != self.dims or array.dtype != self.dtype:
            raise hd.VariantPackError(
                f"copy_from: needs a NumPy array of shape {self.dims} and dtype "
                f"{self.dtype}; got {array.shape} {array.dtype}")
        self._owner.counts["h2d"] += 1
        self._inner.view[...] = array

    def to_numpy_sync(self) -> np.ndarray:
        """Blocking "device-to-host" copy: a new C-contiguous array, never a view."""
        self._owner.counts["d2h"] += 1
        return np.array(self._inner.view, order="C", copy=True)

    async def to_numpy(self) -> np.ndarray:
        return self.to_numpy_sync()

    def __repr__(self) -> str:
        return f"FakeGpuArray(dims={self.dims}, strides={self.strides}, device={self.device!r})"


class FakeGpuPlan:
    """A CPU plan that takes only FakeGpuArrays in its variant packs."""

    def __init__(self, plan, owner: "FakeGpuDevice"):
        self._plan, self._owner = plan, owner

    def __getattr__(self, name):
        return getattr(self._plan, name)

    def _unwrap(self, pack) -> dict:
        out = {}
        for key, buf in pack.items():
            name = getattr(key, "name", key)
            if isinstance(buf, FakeGpuArray):
                out[key] = buf._inner
            elif isinstance(buf, np.ndarray):
                raise hd.VariantPackError(
                    f"execute: tensor {name!r}: a NumPy array cannot be bound on device "
                    f"'{self._owner.spec}'; copy it with 'await dev.asarray(...)'")
            else:
                raise hd.VariantPackError(f"execute: tensor {name!r}: device "
                                          f"'{self._owner.spec}' takes device arrays; got "
                                          f"{type(buf).__name__}")
        self._owner.counts["executions"] += 1
        return out

    async def execute(self, pack, **kw):
        return await self._plan.execute(self._unwrap(pack), **kw)

    def submit(self, pack, **kw):
        return self._plan.submit(self._unwrap(pack), **kw)

    async def enqueue(self, pack, **kw):
        return await self._plan.enqueue(self._unwrap(pack), **kw)

    def execute_sync(self, pack, **kw):
        return self._plan.execute_sync(self._unwrap(pack), **kw)


class FakeGpuDevice:
    """``hd.Device("cpu")`` behind the GPU device contract (``is_host`` False).

    Parameters
    ----------
    real : hipdnn_async.Device
        The CPU device that builds and runs everything.
    spec : str, optional
        What ``spec`` reports. Default ``"fake:0"``.
    """

    is_host = False

    def __init__(self, real, spec: str = "fake:0"):
        self._real = real
        self.spec = spec
        self.counts = collections.Counter()

    def __getattr__(self, name):       # streams, metrics, plan_stats, synchronize, ...
        return getattr(self._real, name)

    async def __aenter__(self) -> "FakeGpuDevice":
        return self

    async def __aexit__(self, *exc) -> None:
        await self._real.aclose()

    def empty(self, dims, dtype, *, layout=None, strides=None) -> FakeGpuArray:
        self.counts["alloc"] += 1
        return FakeGpuArray(self._real.empty(dims, dtype, layout=layout, strides=strides), self)

    async def asarray(self, array, *, layout=None) -> FakeGpuArray:
        array = np.asarray(array)
        out = self.empty(array.shape, array.dtype, layout=layout)
        out.copy_from(array)
        return out

    def _decline(self, graph) -> None:
        """cuDNN's contract: activations clip below at 0 only."""
        for node in graph.nodes:
            lower = getattr(node.attrs, "relu_lower_clip", None)
            if lower is not None and lower != 0:
                raise hd.NotSupportedError(f"{self.spec} (as cuDNN): node '{node.name}' has "
                                           f"relu_lower_clip = {lower}; only 0 is supported")

    async def build(self, graph, **kw) -> FakeGpuPlan:
        self._decline(graph)
        return FakeGpuPlan(await self._real.build(graph, **kw), self)

    def build_sync(self, graph, **kw) -> FakeGpuPlan:
        self._decline(graph)
        return FakeGpuPlan(self._real.build_sync(graph, **kw), self)

    def __repr__(self) -> str:
        return f"FakeGpuDevice({self.spec!r})"


# ---------------------------------------------------------------------------------------
# The fake against the contract
# ---------------------------------------------------------------------------------------

def _conv1x1_graph(n=2, c=3):
    """y = conv_fprop(x, w) with a 1x1 kernel, NCHW float32."""
    f = hd.DataType.FLOAT
    g = hd.Graph(name="fake", io_data_type=f, intermediate_data_type=f, compute_data_type=f)
    x = g.tensor(dims=(n, c, 4, 4), layout="NCHW", name="x")
    w = g.tensor(dims=(c, c, 1, 1), layout="NCHW", name="w")
    g.conv_fprop(x, w, padding=(0, 0), stride=(1, 1), dilation=(1, 1)).set_output(
        True).set_name("y")
    return g.validate()


def test_fake_array_has_the_gpu_surface_and_no_host_view():
    with hd.Device("cpu") as real:
        dev = FakeGpuDevice(real)
        a = dev.empty((2, 3, 4, 4), hd.DataType.FLOAT, layout="NHWC")
        assert not hasattr(a, "view") and not hasattr(a, "__array__")
        assert a.dims == (2, 3, 4, 4) and a.strides == (48, 1, 12, 3)
        assert a.dtype == np.float32 and a.device == "fake:0" and a.nbytes == 384
        src = np.arange(96, dtype=np.float32).reshape(2, 3, 4, 4)
        a.copy_from(src)
        got = a.to_numpy_sync()
        np.testing.assert_array_equal(got, src)
        assert got.flags.c_contiguous
        got[...] = -1                               # a copy, not the "device" memory
        np.testing.assert_array_equal(a.to_numpy_sync(), src)
        with pytest.raises(hd.VariantPackError, match="shape"):
            a.copy_from(src[:1])
        assert not dev.is_host and real.is_host


@pytest.mark.anyio
async def test_fake_plans_take_device_arrays_only():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 1, 1)).astype(np.float32)
    async with hd.Device("cpu") as real:
        dev = FakeGpuDevice(real)
        plan = await dev.build(_conv1x1_graph())
        y = dev.empty((2, 3, 4, 4), hd.DataType.FLOAT)
        with pytest.raises(hd.VariantPackError, match=r"'x'.*dev\.asarray"):
            await plan.execute({"x": x, "w": await dev.asarray(w), "y": y})
        await plan.execute({"x": await dev.asarray(x), "w": await dev.asarray(w), "y": y})
        got = await y.to_numpy()
    want = np.einsum("nchw,kc->nkhw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert dev.counts["h2d"] == 3 and dev.counts["d2h"] == 1 and dev.counts["alloc"] == 4


@pytest.mark.anyio
async def test_fake_declines_lower_clips_as_cudnn_does():
    from hipdnn_async.demo import _graphs
    from hipdnn_async.demo._model import LAYERS
    async with hd.Device("cpu") as real:
        dev = FakeGpuDevice(real)
        await dev.build(_graphs.conv_bias_act(LAYERS[0], 2, 8))       # plain ReLU: fine
        identity = _graphs.conv_bias_act(LAYERS[1], 2, 8)             # clamp to +-FLT_MAX
        await real.build(identity)
        with pytest.raises(hd.NotSupportedError, match="relu_lower_clip"):
            await dev.build(identity)
