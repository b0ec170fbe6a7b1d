"""ONEDNN_ENGINE's ``+blocked`` forward and data-gradient convolutions run on the batch in
chunks (``Conv._chunked``: the weights reordered once, then per chunk the activations'
reorders and the kernel on one chunk's blocked copies): every count against the float64
references of ``_reference.py`` with the tolerances of ``_cases.py``, equal bits to the
unchunked plan (the same kernel per image), and where chunks do not apply (weight
gradients, a count that does not divide the batch, float16's float32 copies) the plan
runs whole. The count is forced through ``_avx512.CHUNKS_OVERRIDE``; the default rule
(``_avx512.batch_chunks``) is checked on its own.

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from ._cpu_engines import ONEDNN, require
from .test_onednn_blocked import CASES, STRIDED, amx_here, run_blocked

CHUNKED = "+batch/"


@pytest.fixture(autouse=True)
def _onednn():
    require(ONEDNN)


@pytest.fixture
def device():
    """A fresh CPU device per test: a shared one's plan cache would give an equal graph
    built under another chunk count that count's plan."""
    import hipdnn_async as hd
    with hd.Device("cpu") as dev:
        yield dev


@pytest.fixture
def chunks(monkeypatch):
    """Set the chunk count every ``+blocked`` forward and data gradient takes."""
    from hipdnn_async.providers.cpu.onednn import _avx512

    def force(count):
        monkeypatch.setattr(_avx512, "CHUNKS_OVERRIDE", count)
    return force


def _batch(case, n):
    """``case`` (``test_onednn_blocked.CASES``' form) at batch ``n``."""
    layout, xd, *rest = case
    return (layout, (n,) + tuple(xd[1:]), *rest)


def _whole(direction, dtype, case, seed):
    """The same problem built on a fresh device (a device's plan cache would give the
    chunked plan back) with one chunk: (plan, output)."""
    import hipdnn_async as hd
    with hd.Device("cpu") as dev:
        plan, got, _, _ = run_blocked(dev, direction, dtype, case, seed=seed)
        return plan, got


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "conv_bias_relu"])
@pytest.mark.parametrize("case", list(CASES) + ["strided"])
def test_chunked_matches_float64_and_the_whole_batch(device, chunks, case, direction, dtype,
                                                     count):
    from ._cases import assert_close
    problem = _batch(STRIDED if case == "strided" else CASES[case], 4)
    chunks(count)
    plan, got, want, limits = run_blocked(device, direction, dtype, problem, seed=3)
    what = f"{case} {direction} {dtype} x{count} (algorithm {plan.algorithm})"
    if dtype == "bfloat16" and amx_here() or "+blocked" not in str(plan.algorithm):
        # AMX kernels on channels-last copies by default; no blocked kernel (AVX2, some
        # 3-D problems): nothing is chunked
        assert CHUNKED not in str(plan.algorithm), what
    else:
        assert f"{CHUNKED}{count}" in str(plan.algorithm), what
    assert_close(got, want, *limits, what)
    chunks(1)
    whole, out = _whole(direction, dtype, problem, seed=3)
    assert CHUNKED not in str(whole.algorithm), whole.algorithm
    assert str(whole.algorithm) == str(plan.algorithm).replace(f"{CHUNKED}{count}", ""), what
    assert np.array_equal(got, out, equal_nan=True), what


@pytest.mark.parametrize("direction,dtype,n,why", [
    ("wgrad", "float32", 4, "a weight gradient sums over the batch"),
    ("fprop", "float32", 3, "2 does not divide 3"),
    ("dgrad", "float16", 4, "float16 runs on float32 copies of the whole batch"),
])
def test_chunks_do_not_apply(device, chunks, direction, dtype, n, why):
    from ._cases import assert_close
    chunks(2)
    plan, got, want, limits = run_blocked(device, direction, dtype, _batch(CASES["2d"], n))
    assert CHUNKED not in str(plan.algorithm), (why, plan.algorithm)
    assert_close(got, want, *limits, f"{direction} {dtype} N={n} ({plan.algorithm})")


def test_chunked_constant_weights_are_reordered_once(device, chunks):
    """The batcher's path: weights reordered once into an array the plan keeps
    (``reorder_constants``); a chunked program then reorders none, and later values of
    the user's weights are not seen."""
    chunks(2)
    hs = []
    plan, got, want, limits = run_blocked(device, "fprop", "float32", _batch(CASES["2d"], 4),
                                          seed=5, harness=hs)
    assert f"{CHUNKED}2" in str(plan.algorithm), plan.algorithm
    h = hs[0]
    x, w, y = (h.pack[n] for n in ("x", "w", "out"))
    assert plan.reorder_constants({"w": w}), plan.algorithm
    before = y.copy()
    y[...] = 0
    w[...] = 0                  # not seen: the reordered copy is what runs now
    plan.execute_sync(h.pack)
    assert np.array_equal(y, before)


def _avx512_without_amx() -> bool:
    from hipdnn_async.providers.cpu.onednn._avx512 import avx512_without_amx
    return avx512_without_amx()


# (dtype, C = K, H = W, N, chunks): ResNet-50's NCHW 3x3 convolutions, one image's blocked
# x and y copies 2 * C * H * W * (4 or 2) bytes against 2 MiB (CHUNK_BYTES): float32
# chunks of max(2, 2 MiB // image) images or fewer (a divisor of N); bfloat16 only where
# an image takes at most 0.5 MiB, chunks of max(4, 2 MiB // image)
RULE = [
    ("float32", 64, 56, 8, 4),      # 1.53 MiB an image: chunks of 2
    ("float32", 128, 28, 8, 4),     # 0.77 MiB: 2 (2.6 rounds down)
    ("float32", 256, 14, 8, 2),     # 0.38 MiB: 5, so 4 (the divisor of 8 below)
    ("float32", 256, 14, 32, 8),    # the same: 4 of 32
    ("float32", 128, 28, 7, 1),     # no divisor of 7 from 2 to 2
    ("float32", 128, 28, 2, 1),     # chunks of 2 images: the whole batch
    ("bfloat16", 128, 28, 8, 2),    # 0.38 MiB: 5, so 4
    ("bfloat16", 256, 14, 32, 4),   # 0.19 MiB: 10, so 8
    ("bfloat16", 256, 14, 8, 1),    # chunks of 8: the whole batch
    ("bfloat16", 64, 56, 32, 1),    # 0.77 MiB, over 0.5 MiB: whole
]


@pytest.mark.skipif(not _avx512_without_amx(), reason="the rule is measured on an AVX-512 "
                    "CPU without AMX; elsewhere every batch runs whole")
@pytest.mark.parametrize("dtype,c,hw,n,want", RULE)
def test_the_default_chunk_count(device, dtype, c, hw, n, want):
    import hipdnn_async as hd
    g = hd.Graph(name="rule", io_data_type=dtype, intermediate_data_type=hd.DataType.FLOAT,
                 compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(n, c, hw, hw), name="x")
    w = g.tensor(dims=(c, c, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    chosen = device.build_sync(g, engine=ONEDNN).algorithm
    algorithm, said = str(chosen), f"the batch in {want} chunks of {n // want} images"
    assert "+blocked" in algorithm, algorithm
    assert (f"{CHUNKED}{want}" in algorithm) if want > 1 else (CHUNKED not in algorithm), \
        (dtype, c, hw, n, algorithm)
    assert (said in chosen.reason) == (want > 1), chosen.reason
    assert "blocked layout" in chosen.reason, chosen.reason


def test_no_chunks_off_avx512_without_amx(device, monkeypatch):
    """Where the rule was not measured (AVX2, AMX: ``avx512_without_amx`` False) every
    batch runs whole."""
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _avx512
    monkeypatch.setattr(_avx512, "avx512_without_amx", lambda: False)
    g = hd.Graph(name="rule", io_data_type="float32")
    x = g.tensor(dims=(8, 64, 28, 28), name="x")
    w = g.tensor(dims=(64, 64, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    algorithm = str(device.build_sync(g, engine=ONEDNN).algorithm)
    assert CHUNKED not in algorithm, algorithm


@pytest.mark.parametrize("kernel, chunked", [
    ("jit:avx512_core", True), ("jit:avx2", True),
    # oneDNN's GEMM sums in an order that changes with the batch (break-it round: 1-2 ulp
    # apart from the whole batch in chunks), and other kernels were not measured
    ("x64:gemm:jit", False), ("jit_1x1:avx512_core", False), ("jit:sse41", False),
])
def test_the_rule_chunks_only_the_measured_float32_kernels(device, monkeypatch, kernel,
                                                            chunked):
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _avx512
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    monkeypatch.setattr(_avx512, "avx512_without_amx", lambda: True)
    g = hd.Graph(name="rule", io_data_type="float32")
    x = g.tensor(dims=(8, 64, 28, 28), name="x")
    w = g.tensor(dims=(64, 64, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    conv = Conv(device.build_sync(g, engine=ONEDNN)._pplan.match)
    pd = next(pd for name, pd, _, _ in conv.impls if "+blocked" in name)

    class Named:                    # the blocked implementation under another name
        impl_name = kernel
        md = staticmethod(pd.md)
    assert (_avx512.batch_chunks(conv, Named) > 1) == chunked, kernel
