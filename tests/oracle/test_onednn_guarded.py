"""ONEDNN_ENGINE's guarded convolutions (``_conv.GUARDED``): oneDNN 3.2's AMX jit forward
kernel (``jit:avx512_core_amx``) lets a NaN or inf in x reach outputs whose windows do not
hold it, and is exact on finite x; it runs with a check of x after it, and where x holds
a NaN or inf the first unguarded candidate recomputes y. On an AMX CPU it is the default
for a bfloat16 stem (3 channels: oneDNN has no AMX brgconv there). Checked against the
float64 references of ``_reference.py``: finite inputs within the tolerances, special
values exactly where the reference has them, through ``execute_sync`` and the streams;
and the guard is what makes it so (the kernel alone gives extra NaN on the same input).

Skipped where oneDNN does not offer the kernel (no AMX: ``amx_here``)."""
from __future__ import annotations

import anyio
import numpy as np
import pytest

from . import _reference as ref
from ._cases import assert_close, device, reduction_tol  # noqa: F401
from ._cpu_engines import ONEDNN, require
from .test_onednn_blocked import amx_here, run_blocked

GUARDED = "+guarded"
STEM = {   # layout, x dims, w dims, pre, post, stride, dilation: the ResNet-50 stem, small
    "NHWC": ("NHWC", (2, 3, 20, 20), (16, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1)),
    "NCHW": ("NCHW", (2, 3, 20, 20), (16, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1)),
}


@pytest.fixture(autouse=True)
def _amx():
    require(ONEDNN)
    if not amx_here():
        pytest.skip("oneDNN dispatches to no AMX ISA on this CPU: it offers no AMX jit "
                    "kernel, so no candidate is guarded")


def _specials(shape, seed=5):
    """U(-1, 1) with a NaN, +inf and -inf in x's interior, away from one another."""
    values = np.random.default_rng(seed).uniform(-1, 1, shape)
    values[0, 0, 5, 5] = np.nan
    values[0, -1, 10, 12] = np.inf
    values[-1, 1, 14, 6] = -np.inf
    return values


def _buffer(layout, dims, dtype=None):
    """Zeros of logical ``dims`` in ``layout``'s memory order (bfloat16 by default)."""
    import ml_dtypes
    dtype = ml_dtypes.bfloat16 if dtype is None else dtype
    if layout == "NHWC":
        return np.zeros((dims[0],) + tuple(dims[2:]) + (dims[1],), dtype).transpose(0, 3, 1, 2)
    return np.zeros(dims, dtype)


def _same_specials(got, want, what):
    got = np.asarray(got, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (
        f"{what}: NaN at {np.argwhere(np.isnan(got) != np.isnan(want))[:4]}")
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{what}: infs differ"


@pytest.mark.parametrize("layout", list(STEM))
@pytest.mark.parametrize("direction", ["fprop", "conv_bias_relu"])
def test_stem_defaults_to_the_guarded_amx_kernel_and_matches_float64(device, layout,
                                                                     direction):
    plan, got, want, limits = run_blocked(device, direction, "bfloat16", STEM[layout])
    what = f"{layout} {direction} ({plan.algorithm})"
    assert GUARDED in str(plan.algorithm) and "_amx" in str(plan.algorithm), what
    assert "guarded: x is checked" in plan.algorithm.reason, plan.algorithm.reason
    assert_close(got, want, *limits, what)


@pytest.mark.parametrize("layout", list(STEM))
@pytest.mark.parametrize("direction", ["fprop", "conv_bias_relu"])
def test_special_values_are_the_reference_s(device, layout, direction):
    case = STEM[layout]
    hs = []
    with np.errstate(invalid="ignore"):
        plan, got, want, limits = run_blocked(device, direction, "bfloat16", case, 5,
                                              _specials(case[1]), harness=hs)
    what = f"{layout} {direction} ({plan.algorithm})"
    assert GUARDED in str(plan.algorithm), what
    assert np.isnan(want).any() and np.isinf(want).any()
    _same_specials(got, want, what)
    finite = np.isfinite(want)
    assert_close(np.asarray(got, np.float64)[finite], want[finite], *limits, what)

    # the same input through a stream (the launch's hooks), twice: the fallback's
    # workspace is the execution's own
    pack = hs[0].pack

    async def main():
        for _ in range(2):
            pack["out"][...] = 0
            await plan.execute(pack)
    anyio.run(main)
    _same_specials(pack["out"], want, what + " via plan.execute")


def test_the_guard_is_what_makes_it_exact(device):
    """The guarded candidate's program alone (no check, no fallback) gives NaN where the
    reference has none on the same input; its plan does not."""
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    case = STEM["NHWC"]
    hs = []
    with np.errstate(invalid="ignore"):
        plan, got, want, _ = run_blocked(device, "fprop", "bfloat16", case, 5,
                                         _specials(case[1]), harness=hs)
    got = np.array(got, np.float64)      # (the pack's own buffer, run over below)
    match = plan._pplan.match
    pack = {role: hs[0].pack[t.name] for role, t in match.tensors.items() if not t.is_virtual}
    conv = Conv(match)
    cand = next(c for c in conv.candidates() if GUARDED in c.name)
    _, pd, _, variant = conv.impls[cand.id]
    program, spec = conv.program(pd, variant=variant)
    try:
        y = pack[conv.roles.y]
        y[...] = 0
        ws = np.empty(program.workspace_size, np.uint8) if program.workspace_size else None
        program.run(tuple(pack[r] for r in spec.roles), ws)
    finally:
        program.close()
    alone = np.asarray(y, np.float64)
    assert (np.isnan(alone) & ~np.isnan(want)).any(), "the kernel alone kept the reference"
    _same_specials(got, want, f"plan {plan.algorithm}")


def test_benchmarking_times_the_guarded_kernel_and_stays_exact(device, tmp_path,
                                                              monkeypatch):
    """Benchmarking times every candidate, the guarded one with its check; whichever it
    keeps gives the reference's special values. (Its own perf db: one that already holds
    this problem answers without benchmarking.)"""
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", str(tmp_path / "perfdb.sqlite3"))
    case = STEM["NCHW"]
    with np.errstate(invalid="ignore"):
        plan, got, want, _ = run_blocked(device, "fprop", "bfloat16", case, 5,
                                         _specials(case[1]), knobs={"global.benchmarking": 1})
    trials = dict(plan.algorithm.trials)
    assert plan.benchmarked
    guarded = [n for n in trials if GUARDED in n]
    assert guarded and all(trials[n] is not None and trials[n] > 0 for n in guarded), trials
    _same_specials(got, want, str(plan.algorithm))


@pytest.mark.parametrize("layout", list(STEM))
@pytest.mark.parametrize("clips", [None, (0.1, 0.3)], ids=["relu", "clipped"])
def test_fallback_stages_a_strided_bias(device, layout, clips):
    """Conv + bias + ReLU whose FLOAT bias has a channel stride of 2 (a per-channel copy
    staged in the workspace by the plan's host work, ``ProgramSpec.channel``): where x
    holds a NaN or inf the fallback reads its own copy of the bias, which must be staged
    too (it read unfilled workspace: every output off by up to 2 in the reference's
    finite values)."""
    import hipdnn_async as hd
    _, xd, wd, pre, post, stride, dil = STEM[layout]
    k = wd[0]
    rng = np.random.default_rng(11)
    g = hd.Graph(io_data_type="bfloat16")
    x = g.tensor(dims=xd, layout=layout, name="x")
    w = g.tensor(dims=wd, layout=layout, name="w")
    b = g.tensor(dims=(1, k, 1, 1), strides=(2 * k, 2, 1, 1), name="b",
                 data_type=hd.DataType.FLOAT)
    y = g.pointwise(g.conv_fprop(x, w, pre_padding=pre, post_padding=post, stride=stride,
                                 dilation=dil), b, mode=hd.PointwiseMode.ADD)
    kw = {} if clips is None else dict(relu_lower_clip=clips[0], relu_upper_clip=clips[1])
    y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, **kw).set_output(True).set_name("y")
    plan = device.build_sync(g, engine=ONEDNN)
    assert GUARDED in str(plan.algorithm), plan.algorithm

    xv, wv, yv = (_buffer(layout, d) for d in (xd, wd, tuple(y.dims)))
    xv[...] = _specials(xd)
    wv[...] = rng.uniform(-1, 1, wd)
    bv = np.zeros(2 * k, np.float32)[::2].reshape(1, k, 1, 1)
    bv[...] = rng.uniform(-1, 1, (1, k, 1, 1))
    plan.execute_sync({"x": xv, "w": wv, "b": bv, "y": yv})
    with np.errstate(invalid="ignore"):
        want = ref.conv_fprop(np.asarray(xv, np.float64), np.asarray(wv, np.float64), pre,
                              post, stride, dil) + bv.astype(np.float64)
        lo, hi = (0.0, np.inf) if clips is None else clips
        want = np.where(np.isnan(want), want, np.clip(want, lo, hi))
    what = f"{layout} bias stride 2 ({plan.algorithm})"
    _same_specials(yv, want, what)
    finite = np.isfinite(want)
    limits = reduction_tol("conv_fprop", "bfloat16", wd[1] * int(np.prod(wd[2:])))
    assert_close(np.asarray(yv, np.float64)[finite], want[finite], *limits, what)


@pytest.mark.parametrize("layout", list(STEM))
def test_fallback_converts_a_half_y(device, layout):
    """bfloat16 x and w into a HALF y (the ``+dense`` variant: y a float32 workspace copy
    converted out by the plan's host work, ``ProgramSpec.converted``): where x holds a
    NaN or inf the fallback's float32 y must be converted out too (it was not: y kept
    the guarded kernel's extra NaN, 64 outputs whose windows hold none)."""
    import hipdnn_async as hd
    _, xd, wd, pre, post, stride, dil = STEM[layout]
    g = hd.Graph(io_data_type="bfloat16")
    x = g.tensor(dims=xd, layout=layout, name="x")
    w = g.tensor(dims=wd, layout=layout, name="w")
    y = g.conv_fprop(x, w, pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
    y.set_output(True).set_name("y").set_data_type(hd.DataType.HALF)
    plan = device.build_sync(g, engine=ONEDNN)
    assert GUARDED in str(plan.algorithm), plan.algorithm
    xv, wv = _buffer(layout, xd), _buffer(layout, wd)
    xv[...] = _specials(xd)
    wv[...] = np.random.default_rng(12).uniform(-1, 1, wd)
    yv = _buffer(layout, tuple(y.dims), np.float16)
    plan.execute_sync({"x": xv, "w": wv, "y": yv})
    with np.errstate(invalid="ignore"):
        want = ref.conv_fprop(xv.astype(np.float64), wv.astype(np.float64), pre, post,
                              stride, dil)
    what = f"{layout} HALF y ({plan.algorithm})"
    _same_specials(yv, want, what)
    finite = np.isfinite(want)
    limits = reduction_tol("conv_fprop", "bfloat16", wd[1] * int(np.prod(wd[2:])))
    assert_close(yv.astype(np.float64)[finite], want[finite], *limits, what)
