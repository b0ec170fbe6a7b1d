"""DynamicBatcher: coalescing, buckets, per-caller slices, errors and cancellation.

Every result is checked against a float64 NumPy reference computed here and against the
same sample run alone through a plan of batch 1. Runs on asyncio and trio.
"""
from __future__ import annotations

import anyio
import math

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async._errors import (
    DeviceError,
    ExecutionError,
    GraphError,
    KnobError,
    NotSupportedError,
    VariantPackError,
)

pytestmark = pytest.mark.anyio

F32 = hd.DataType.FLOAT
C, H, W, K = 4, 6, 6, 5
RTOL = ATOL = 1e-4          # float32 I/O, float32 accumulation, K*C*R*S = 180 terms


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param


# ----------------------------------------------------------------------------- helpers

def as_layout(arr: np.ndarray, layout: str) -> np.ndarray:
    """Logical-order view of `arr` stored in `layout` (NCHW or NHWC)."""
    if layout == "NCHW":
        return np.ascontiguousarray(arr)
    return np.ascontiguousarray(arr.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def cbr_graph(n: int = 1, layout: str = "NCHW") -> hd.Graph:
    """conv_fprop (3x3, pad 1) -> ADD bias -> RELU_FWD, output 'y'."""
    g = hd.Graph(name="cbr", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(n, C, H, W), layout=layout, name="x")
    w = g.tensor(dims=(K, C, 3, 3), layout=layout, name="w")
    b = g.tensor(dims=(1, K, 1, 1), layout=layout, name="b")
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1))
    z = g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    r = g.pointwise(z, mode=hd.PointwiseMode.RELU_FWD)
    r.set_output(True).set_name("y")
    g.validate()
    return g


def ref_cbr(x, w, b, relu=True) -> np.ndarray:
    """float64 conv (cross-correlation, pad 1, stride 1) + bias + ReLU (``relu``)."""
    x, w, b = (np.asarray(a, np.float64) for a in (x, w, b))
    n, _, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, k, h, wd))
    for i in range(r):
        for j in range(s):
            y += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    y = y + b.reshape(1, k, 1, 1)
    return np.maximum(y, 0.0) if relu else y


def weights(seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal((1, K, 1, 1)).astype(np.float32)
    return w, b


def samples(rng, n: int) -> np.ndarray:
    return rng.standard_normal((n, C, H, W)).astype(np.float32)


class CountingDevice:
    """Forwards to a Device; records built batch sizes; can fail or slow executions."""

    def __init__(self, dev, *, fail=0, delay=0.0):
        self.dev, self.fail, self.delay, self.built = dev, fail, delay, []

    def __getattr__(self, name):
        return getattr(self.dev, name)

    async def build(self, graph, **kw):
        self.built.append(next(t for t in graph.tensors if t.name == "x").dims[0])
        return _ProxyPlan(await self.dev.build(graph, **kw), self)


class _ProxyPlan:
    def __init__(self, plan, owner):
        self.plan, self.owner = plan, owner

    def __getattr__(self, name):
        return getattr(self.plan, name)

    async def execute(self, pack, **kw):
        if self.owner.fail > 0:
            self.owner.fail -= 1
            raise ExecutionError("injected failure [test]")
        if self.owner.delay:
            await anyio.sleep(self.owner.delay)
        return await self.plan.execute(pack, **kw)


async def gather(batcher, requests, results, errors=None):
    """Call the batcher concurrently, one task per request; fill results[i] / errors[i]."""
    async def one(i, req):
        try:
            results[i] = await batcher(req)
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            if errors is None:
                raise
            errors[i] = exc

    async with anyio.create_task_group() as tg:
        for i, req in enumerate(requests):
            tg.start_soon(one, i, req)


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
async def test_each_caller_gets_its_rows(layout):
    rng = np.random.default_rng(1)
    w, b = weights()
    reqs = [samples(rng, int(n)) for n in rng.integers(1, 4, size=12)]
    results = {}
    async with hd.Device("cpu") as dev:
        g = cbr_graph(3, layout)
        consts = {"w": as_layout(w, layout), "b": b}
        async with hd.DynamicBatcher(dev, g, constants=consts, max_batch_size=8,
                                     max_delay_ms=20.0) as batcher:
            await gather(batcher, [as_layout(r, layout) for r in reqs], results)
            m = batcher.metrics()
        # The same samples alone through a batch-1 plan.
        g1 = cbr_graph(1, layout)
        plan = await dev.build(g1)
        for i, req in enumerate(reqs):
            got = results[i]
            assert got.shape == (req.shape[0], K, H, W)
            np.testing.assert_allclose(got, ref_cbr(req, w, b), rtol=RTOL, atol=ATOL)
            for j in range(req.shape[0]):
                y1 = as_layout(np.empty((1, K, H, W), np.float32), layout)
                await plan.execute({"x": as_layout(req[j:j + 1], layout),
                                    "w": as_layout(w, layout), "b": b, "y": y1})
                np.testing.assert_allclose(got[j:j + 1], y1, rtol=1e-5, atol=1e-5)
    assert m["requests"] == len(reqs)
    assert m["rows"] == sum(r.shape[0] for r in reqs)
    assert m["batches"] < len(reqs)


async def test_coalescing_makes_few_batches():
    rng = np.random.default_rng(2)
    w, b = weights()
    reqs = [samples(rng, 1) for _ in range(64)]
    results = {}
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=32, max_delay_ms=50.0) as batcher:
            await gather(batcher, reqs, results)
            m = batcher.metrics()
    for i, req in enumerate(reqs):
        np.testing.assert_allclose(results[i], ref_cbr(req, w, b), rtol=RTOL, atol=ATOL)
    assert m["requests"] == 64 and m["rows"] == 64
    assert m["batches"] <= 8, m
    assert m["mean_batch_size"] >= 8
    assert 0.0 < m["mean_batch_fill"] <= 1.0
    assert set(m["queue_wait_ms"]) == {"p50", "p90", "p99", "mean"}
    assert m["exec_ms"]["p50"] > 0.0


async def test_max_delay_flushes_a_lone_request():
    rng = np.random.default_rng(3)
    w, b = weights()
    x = samples(rng, 1)
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=64, max_delay_ms=30.0) as batcher:
            await batcher.warmup([1])
            t0 = anyio.current_time()
            y = await batcher({"x": x})
            elapsed = anyio.current_time() - t0
            m = batcher.metrics()
    np.testing.assert_allclose(y, ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
    assert 0.025 <= elapsed < 10.0           # waited max_delay_ms for company, then ran
    assert m["batches"] == 1 and m["buckets_used"] == [1]
    assert m["queue_wait_ms"]["p50"] >= 25.0


@pytest.mark.parametrize("buckets, sizes, expected", [
    ("pow2", [3, 5, 4, 1], [4, 8, 1]),
    ("exact", [3, 5, 3], [3, 5]),
    ([2, 6, 16], [5, 1, 6, 7], [6, 2, 16]),
])
async def test_bucket_policy_builds_only_buckets(buckets, sizes, expected):
    rng = np.random.default_rng(4)
    w, b = weights()
    async with hd.Device("cpu") as real:
        dev = CountingDevice(real)
        async with hd.DynamicBatcher(dev, cbr_graph(2), constants={"w": w, "b": b},
                                     max_batch_size=16, max_delay_ms=0.0,
                                     buckets=buckets) as batcher:
            for n in sizes:             # one at a time: each is its own batch
                x = samples(rng, n)
                y = await batcher(x)
                np.testing.assert_allclose(y, ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
            m = batcher.metrics()
    assert dev.built == expected
    assert m["plans_built"] == len(expected)
    assert m["buckets_used"] == sorted(expected)
    bucket_rows = sum(batcher.bucket_for(n) for n in sizes)
    assert m["mean_batch_fill"] == pytest.approx(sum(sizes) / bucket_rows)


async def test_request_larger_than_max_batch_is_split():
    rng = np.random.default_rng(5)
    w, b = weights()
    x = samples(rng, 10)
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=4, max_delay_ms=1.0) as batcher:
            y = await batcher(x)
            m = batcher.metrics()
    np.testing.assert_allclose(y, ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
    assert m["batches"] >= 3 and m["rows"] == 10 and m["requests"] == 1


async def test_wrong_shape_request_fails_alone():
    rng = np.random.default_rng(6)
    w, b = weights()
    reqs = [samples(rng, 2) for _ in range(5)]
    reqs.insert(2, rng.standard_normal((2, C + 1, H, W)).astype(np.float32))
    results, errors = {}, {}
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=16, max_delay_ms=20.0) as batcher:
            await gather(batcher, reqs, results, errors)
            with pytest.raises(VariantPackError, match="'x'"):
                await batcher({"x": reqs[0], "bogus": reqs[0]})
    assert set(errors) == {2}
    assert isinstance(errors[2], VariantPackError) and "'x'" in str(errors[2])
    for i, req in enumerate(reqs):
        if i != 2:
            np.testing.assert_allclose(results[i], ref_cbr(req, w, b), rtol=RTOL, atol=ATOL)


async def test_a_request_of_another_dtype_is_refused_as_plan_execute_refuses_it():
    """Review F12: the batcher cast float64 (and int) requests silently while plan.execute
    refuses a float64 buffer. One rule now: the tensor's dtype or a VariantPackError naming
    tensor and dtypes, from both; the batcher declares that dtype and the sample shape."""
    rng = np.random.default_rng(16)
    w, b = weights()
    x = samples(rng, 2)
    async with hd.Device("cpu") as dev:
        g = cbr_graph()
        async with hd.DynamicBatcher(dev, g, constants={"w": w, "b": b},
                                     max_batch_size=4, max_delay_ms=1.0) as batcher:
            assert batcher.dtype == np.float32 and batcher.sample_shape == (C, H, W)
            for bad, got in ((x.astype(np.float64), "float64"), (x.astype(np.int32), "int32"),
                             (x.astype(">f4"), "non-native byte order"),
                             (x.astype(np.float16), "float16"), (x.tolist(), "float64")):
                with pytest.raises(VariantPackError, match=f"'x' needs dtype float32 "
                                                           f"\\(FLOAT\\); got .*{got}"):
                    await batcher(bad)
            np.testing.assert_allclose(await batcher(x), ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
            assert batcher.metrics()["requests"] == 1
        plan = await dev.build(g)
        y = np.empty((1, K, H, W), np.float32)
        with pytest.raises(VariantPackError, match="needs dtype float32 \\(FLOAT\\); got float64"):
            await plan.execute({"x": x[:1].astype(np.float64), "w": w, "b": b, "y": y})


async def test_execution_error_fails_its_batch_and_serving_goes_on():
    rng = np.random.default_rng(7)
    w, b = weights()
    first = [samples(rng, 1) for _ in range(4)]
    second = [samples(rng, 1) for _ in range(4)]
    res1, err1, res2 = {}, {}, {}
    async with hd.Device("cpu") as real:
        dev = CountingDevice(real, fail=1)
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=4, max_delay_ms=50.0) as batcher:
            await gather(batcher, first, res1, err1)
            await gather(batcher, second, res2)
            m = batcher.metrics()
    assert sorted(err1) == [0, 1, 2, 3] and not res1
    for e in err1.values():
        assert isinstance(e, ExecutionError) and "injected" in str(e)
    assert len({id(e) for e in err1.values()}) == 4      # one instance per caller
    for i, x in enumerate(second):
        np.testing.assert_allclose(res2[i], ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
    assert m["errors"] == 1 and m["batches"] == 1


async def test_cancelled_callers_do_not_affect_others():
    rng = np.random.default_rng(8)
    w, b = weights()
    xs = [samples(rng, 1) for _ in range(6)]
    results, cancelled = {}, set()

    async def call(i, timeout):
        with anyio.move_on_after(timeout) as scope:
            results[i] = await batcher(xs[i])
        if scope.cancelled_caught:
            cancelled.add(i)

    async with hd.Device("cpu") as real:
        dev = CountingDevice(real, delay=0.2)
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=8, max_delay_ms=100.0) as batcher:
            await batcher.warmup([1, 2, 4])
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, 0, 0.02)     # cancelled before its batch forms
                tg.start_soon(call, 1, 0.02)
                tg.start_soon(call, 2, 0.2)      # cancelled while its batch runs
                for i in (3, 4, 5):
                    tg.start_soon(call, i, 5.0)
            m = batcher.metrics()
            # Still serving afterwards.
            y = await batcher(xs[0])
    assert cancelled == {0, 1, 2}
    for i in (3, 4, 5):
        np.testing.assert_allclose(results[i], ref_cbr(xs[i], w, b), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(y, ref_cbr(xs[0], w, b), rtol=RTOL, atol=ATOL)
    assert m["rows"] == 4           # callers 2-5; 0 and 1 were skipped
    assert m["cancelled"] == 3


async def test_exit_drains_pending_requests():
    rng = np.random.default_rng(9)
    w, b = weights()
    xs = [samples(rng, 1) for _ in range(3)]
    results = {}

    async def call(batcher, i):
        results[i] = await batcher(xs[i])

    async with hd.Device("cpu") as dev:
        async with anyio.create_task_group() as tg:
            async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                         max_delay_ms=5000.0) as batcher:
                for i in range(3):
                    tg.start_soon(call, batcher, i)
                await anyio.sleep(0.01)
                t0 = anyio.current_time()
            assert anyio.current_time() - t0 < 2.0     # closing flushes the window
        assert sorted(results) == [0, 1, 2]
        for i, x in enumerate(xs):
            np.testing.assert_allclose(results[i], ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
        with pytest.raises(DeviceError, match="not running"):
            await batcher(xs[0])


async def test_call_outside_context_raises():
    w, b = weights()
    async with hd.Device("cpu") as dev:
        batcher = hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b})
        with pytest.raises(DeviceError, match="async with"):
            await batcher(np.zeros((1, C, H, W), np.float32))
        await batcher.aclose()


async def test_batchnorm_inference_is_batched():
    rng = np.random.default_rng(10)
    eps = 1e-5
    g = hd.Graph(name="bn", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(2, C, H, W), layout="NCHW", name="x")
    stats = {k: g.tensor(dims=(1, C, 1, 1), layout="NCHW", name=k)
             for k in ("mean", "variance", "scale", "bias")}
    y = g.batchnorm_inference_variance_ext(x, stats["mean"], stats["variance"],
                                           stats["scale"], stats["bias"], epsilon=eps)
    y.set_output(True).set_name("y")
    g.validate()
    consts = {k: rng.standard_normal((1, C, 1, 1)).astype(np.float32) for k in stats}
    consts["variance"] = np.abs(consts["variance"]) + 0.5
    xs = [samples(rng, n) for n in (1, 3, 2)]
    results = {}
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, g, constants=consts, max_delay_ms=20.0) as batcher:
            await gather(batcher, [{"x": v} for v in xs], results)
    c64 = {k: v.astype(np.float64) for k, v in consts.items()}
    for i, v in enumerate(xs):
        ref = (c64["scale"] * (v - c64["mean"]) / np.sqrt(c64["variance"] + eps)
               + c64["bias"])
        np.testing.assert_allclose(results[i], ref, rtol=1e-5, atol=1e-5)


async def test_batchnorm_training_is_rejected():
    g = hd.Graph(name="bnt", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    x = g.tensor(dims=(4, C, H, W), layout="NCHW", name="x")
    scale = g.tensor(dims=(1, C, 1, 1), layout="NCHW", name="scale")
    bias = g.tensor(dims=(1, C, 1, 1), layout="NCHW", name="bias")
    y, mean, inv_var, _, _ = g.batchnorm(x, scale, bias, epsilon=1e-5)
    for t, name in ((y, "y"), (mean, "mean"), (inv_var, "inv_variance")):
        t.set_output(True).set_name(name)
    g.validate()
    consts = {"scale": np.ones((1, C, 1, 1), np.float32),
              "bias": np.zeros((1, C, 1, 1), np.float32)}
    async with hd.Device("cpu") as dev:
        with pytest.raises(NotSupportedError, match="BN_TRAINING"):
            async with hd.DynamicBatcher(dev, g, constants=consts):
                pass


async def test_bad_arguments():
    w, b = weights()
    async with hd.Device("cpu") as dev:
        g = cbr_graph()
        with pytest.raises(GraphError, match="buckets"):
            hd.DynamicBatcher(dev, g, constants={"w": w, "b": b}, max_batch_size=8,
                              buckets=[1, 4])
        with pytest.raises(GraphError, match="buckets"):
            hd.DynamicBatcher(dev, g, constants={"w": w, "b": b}, buckets="fib")
        with pytest.raises(VariantPackError, match="'b'"):
            hd.DynamicBatcher(dev, g, constants={"w": w})
        with pytest.raises(VariantPackError, match="'w'"):
            hd.DynamicBatcher(dev, g, constants={"w": w[:1], "b": b})
        with pytest.raises(GraphError, match="'z'"):
            hd.DynamicBatcher(dev, g, constants={"w": w, "b": b}, outputs=["z"])
        for kw in ({"max_batch_size": 2.5}, {"max_batch_size": "8"}, {"max_batch_size": True},
                   {"max_delay_ms": math.inf}, {"max_delay_ms": -1.0}, {"max_delay_ms": "2"},
                   {"buckets": [2.5, 64]}, {"buckets": [True, 64]}):
            with pytest.raises(GraphError, match="max_batch_size|max_delay_ms|buckets"):
                hd.DynamicBatcher(dev, g, constants={"w": w, "b": b}, **kw)
        with pytest.raises(VariantPackError, match="constant 'w' needs a real numeric"):
            hd.DynamicBatcher(dev, g, constants={"w": w.astype(np.complex64), "b": b})
        # Constants are cast once to the tensor's dtype (float64 weights are fine), but a
        # value the cast turns into inf is refused, naming where it is.
        huge = w.astype(np.float64)
        huge[1, 0, 2, 0] = 1e39                                  # > float32's 3.4e38
        with pytest.raises(VariantPackError, match=r"constant 'w' holds 1e\+39 at index "
                                                   r"\(1, 0, 2, 0\).*float32"):
            hd.DynamicBatcher(dev, g, constants={"w": huge, "b": b})
        if np.finfo(np.longdouble).max > np.finfo(np.float64).max:   # x86-64: 80-bit
            long = w.astype(np.longdouble)
            long[0, 1, 0, 0] = np.longdouble("1e4000")              # beyond float64 too
            with pytest.raises(VariantPackError, match=r"constant 'w' holds .* at index "
                                                       r"\(0, 1, 0, 0\)"):
                hd.DynamicBatcher(dev, g, constants={"w": long, "b": b})


async def test_constants_are_read_as_plan_execute_reads_buffers():
    """New-user review F6/F8: constants in the tensor's memory order (as the README passes
    NHWC data to plan.execute) are taken as such; a C-contiguous array whose shape is both
    the logical and the memory-order one (NHWC with C == H == W) was taken as logical,
    silently wrong for memory-order data, and is refused as plan.execute refuses it; a
    masked array's mask was ignored."""
    rng = np.random.default_rng(5)
    w, b = weights()
    x = samples(rng, 3)
    want = ref_cbr(x, w, b)
    async with hd.Device("cpu") as dev:
        g = cbr_graph(3, "NHWC")
        memory = np.ascontiguousarray(w.transpose(0, 2, 3, 1))       # (K, 3, 3, C) = NHWC
        for given in (memory, as_layout(w, "NHWC"), w.astype(np.float64)):
            async with hd.DynamicBatcher(dev, g, constants={"w": given, "b": b},
                                         max_batch_size=4) as batcher:
                got = await batcher({"x": as_layout(x, "NHWC")})
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        with pytest.raises(VariantPackError, match=r"constant 'w'.*masked"):
            hd.DynamicBatcher(dev, g, constants={"w": np.ma.masked_less(w, 0), "b": b})
        with pytest.raises(VariantPackError, match=r"constant 'w': a memory-order array "
                                                   r"\(shape \(5, 3, 3, 4\)\) must be "
                                                   r"C-contiguous"):
            hd.DynamicBatcher(dev, g, constants={"w": memory[:, ::-1], "b": b})
        with pytest.raises(VariantPackError, match=r"constant 'w' needs logical shape "
                                                   r"\(5, 4, 3, 3\).*\(5, 3, 3, 4\)"):
            hd.DynamicBatcher(dev, g, constants={"w": memory[:, :, :, :3], "b": b})
        # C == H == W == 3: (K, 3, 3, 3) reads both ways
        g3 = hd.Graph(name="amb", io_data_type=F32)
        x3 = g3.tensor(dims=(1, 3, 8, 8), layout="NHWC", name="x")
        w3 = g3.tensor(dims=(2, 3, 3, 3), layout="NHWC", name="w")
        g3.conv_fprop(x3, w3, padding=1).set_output(True).set_name("y")
        w3s = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
        w3m = np.ascontiguousarray(w3s.transpose(0, 2, 3, 1))   # its memory order
        for either in (w3s, w3m, np.asfortranarray(w3s),
                       np.repeat(w3m, 2, axis=-1)[..., ::2]):     # (review 2 F3)
            with pytest.raises(VariantPackError, match=r"constant 'w'.*ambiguous"):
                hd.DynamicBatcher(dev, g3, constants={"w": either})
        gp = hd.Graph(name="padded", io_data_type=F32)      # NHWC with padded strides
        xp_ = gp.tensor(dims=(1, 3, 8, 8), layout="NHWC", name="x")
        wp = gp.tensor(dims=(2, 3, 3, 3), strides=(40, 1, 12, 4), name="w")
        gp.conv_fprop(xp_, wp, padding=1).set_output(True).set_name("y")
        with pytest.raises(VariantPackError, match=r"ambiguous.*strides \(40, 1, 12, 4\): "
                                                   r"np.lib.stride_tricks.as_strided"):
            hd.DynamicBatcher(dev, gp, constants={"w": w3m.transpose(0, 3, 1, 2)})
        async with hd.DynamicBatcher(dev, g3, constants={"w": w3m.transpose(0, 3, 1, 2)},
                                     max_batch_size=2) as batcher:   # the tensor's strides
            x3s = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
            got = await batcher({"x": as_layout(x3s, "NHWC")})
        xp = np.pad(x3s.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        ref = sum(np.einsum("nchw,kc->nkhw", xp[:, :, i:i + 8, j:j + 8], w3s[:, :, i, j])
                  for i in range(3) for j in range(3))
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


async def test_odd_arguments_and_requests_found_trying_to_break_it():
    """Issue 10 "widen the search": knobs=5 escaped as a TypeError (and a device, constants
    or inputs of the wrong type as TypeError/AttributeError); max_concurrent_batches
    2.5 or "2" were truncated silently; a masked request lost its mask silently (execute
    refuses masked arrays); calling a closed batcher had the code of a plan failure."""
    rng = np.random.default_rng(17)
    w, b = weights()
    consts = {"w": w, "b": b}
    async with hd.Device("cpu") as dev:
        g = cbr_graph()
        with pytest.raises(KnobError, match="knobs=5 must be a mapping"):
            hd.DynamicBatcher(dev, g, constants=consts, knobs=5)
        for not_a_device in ("cpu", None):      # were AttributeErrors
            with pytest.raises(DeviceError, match="device must be an hd.Device"):
                hd.DynamicBatcher(not_a_device, g, constants=consts)
        with pytest.raises(VariantPackError, match="constants must be a mapping"):
            hd.DynamicBatcher(dev, g, constants=list(consts.items()))    # was a TypeError
        with pytest.raises(GraphError, match="inputs=5 must be a tensor name"):
            hd.DynamicBatcher(dev, g, constants=consts, inputs=5)         # was a TypeError
        for bad in (2.5, "2", True, 0):
            with pytest.raises(GraphError, match=f"max_concurrent_batches={bad!r} must be an "
                                                 "int >= 1"):
                hd.DynamicBatcher(dev, g, constants=consts, max_concurrent_batches=bad)
        x = samples(rng, 2)
        async with hd.DynamicBatcher(dev, g, constants=consts, inputs="x", outputs="y",
                                     knobs=[hd.KnobSetting("global.benchmarking", 0)],
                                     max_batch_size=4, max_delay_ms=1.0) as batcher:
            assert batcher.inputs == ("x",) and batcher.outputs == ("y",)
            masked = np.ma.masked_array(x, mask=x < 0)
            with pytest.raises(VariantPackError, match="'x': masked arrays are not taken"):
                await batcher(masked)
            np.testing.assert_allclose(await batcher(x), ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
        with pytest.raises(DeviceError, match="not running") as ei:
            await batcher(x)
        assert ei.value.code == "INVALID_VALUE"
        with pytest.raises(DeviceError, match="cannot start") as ei:
            async with batcher:
                pass
        assert ei.value.code == "INVALID_VALUE"


async def test_error_in_body_fails_waiting_callers_and_propagates():
    rng = np.random.default_rng(11)
    w, b = weights()
    errors = {}

    async def call(batcher, i):
        try:
            await batcher(samples(rng, 1))
        except DeviceError as exc:
            errors[i] = exc

    async with hd.Device("cpu") as dev:
        async with anyio.create_task_group() as tg:
            with pytest.raises(KeyError, match="boom"):
                async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                             max_delay_ms=5000.0) as batcher:
                    for i in range(3):
                        tg.start_soon(call, batcher, i)
                    await anyio.sleep(0.01)
                    raise KeyError("boom")
    assert sorted(errors) == [0, 1, 2]
    assert all("closed" in str(e) for e in errors.values())


async def test_warmup_refuses_bad_sizes_before_building_anything():
    """warmup(["2"]) raised a bare ValueError and warmup([1.5]) warmed bucket 1 (int()
    truncated); sizes < 1 warmed the smallest bucket (docstring-audit report)."""
    w, b = weights()
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, cbr_graph(), constants={"w": w, "b": b},
                                     max_batch_size=8) as batcher:
            for bad, words in ((["2"], r"holds '2'; need integers"),
                               ([1.5], r"holds 1.5; need integers"),
                               ([True], "holds a bool"), ([0, 2], r"hold a value < 1"),
                               ("12", "must be a sequence of integers"),
                               ([2, 9], "9 rows exceed the largest bucket 8")):
                with pytest.raises(hd.GraphError, match=words) as e:
                    await batcher.warmup(bad)
                assert e.value.code == "INVALID_VALUE"
            assert batcher.metrics()["plans_built"] == 0      # nothing was built
            await batcher.warmup([np.int64(3)])
            assert batcher.metrics()["plans_built"] == 1


async def test_a_memory_order_request_is_refused_with_its_logical_view():
    """An NHWC batcher's request in memory order (N, H, W, C) is refused (requests are
    logical views), with the transpose that gives the logical view; that view is served
    and matches the float64 reference."""
    rng = np.random.default_rng(5)
    g = hd.Graph(name="nhwc_layer")
    x = g.tensor(dims=(4, 3, 6, 5), layout="NHWC", name="x")
    w = g.tensor(dims=(8, 3, 3, 3), layout="NHWC", name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    wv = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w_nhwc = np.ascontiguousarray(wv.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    m = rng.standard_normal((2, 6, 5, 3)).astype(np.float32)      # (N, H, W, C) memory
    async with hd.Device("cpu") as dev:
        async with hd.DynamicBatcher(dev, g, inputs=["x"], outputs=["y"],
                                     constants={"w": w_nhwc}, max_batch_size=4) as batcher:
            with pytest.raises(VariantPackError, match=r"'x' needs shape \(N, 3, 6, 5\).*"
                                                       r"memory order.*arr\.transpose\(0, 3, 1, 2\)"):
                await batcher(m)
            got = await batcher(m.transpose(0, 3, 1, 2))
    want = ref_cbr(m.transpose(0, 3, 1, 2), wv, np.zeros(8), relu=False)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


async def test_requests_numpy_cannot_read_are_variant_pack_errors():
    """A torch tensor with its neg bit set, one that requires grad and a ragged list
    leaked torch's RuntimeError / NumPy's ValueError from np.asarray (break-it round);
    plan.execute names the tensor, and so do the batcher and Device.asarray now."""
    from _peers import peer
    torch = peer("torch", "PyTorch makes the lazily negated tensor")
    rng = np.random.default_rng(7)
    w, b = weights()
    x = samples(rng, 2)
    async with hd.Device("cpu") as dev:
        g = cbr_graph(2)
        bad_requests = [
            (torch.from_numpy(x)._neg_view(), "tensor 'x'.*neg bit.*resolve_neg"),
            (torch.from_numpy(x.copy()).requires_grad_(), "tensor 'x'.*RuntimeError.*detach"),
            ([[1.0, 2.0], [3.0]], "tensor 'x': cannot read it as an array: ValueError"),
        ]
        async with hd.DynamicBatcher(dev, g, constants={"w": w, "b": b},
                                     max_batch_size=4) as batcher:
            for bad, match in bad_requests:
                with pytest.raises(VariantPackError, match=match):
                    await batcher(bad)
            # serving goes on, with the right values
            np.testing.assert_allclose(await batcher(x), ref_cbr(x, w, b), rtol=RTOL, atol=ATOL)
        with pytest.raises(VariantPackError, match="constant 'w'.*neg bit"):
            async with hd.DynamicBatcher(dev, g, constants={"w": torch.from_numpy(w)._neg_view(),
                                                            "b": b}):
                pass
        with pytest.raises(VariantPackError, match="Device.asarray.*neg bit"):
            await dev.asarray(torch.from_numpy(x)._neg_view())
        arr = dev.empty(x.shape, np.float32)
        with pytest.raises(VariantPackError, match="DeviceArray.copy_from.*neg bit"):
            arr.copy_from(torch.from_numpy(x)._neg_view())
