"""ONEDNN_ENGINE's ``+blocked`` convolutions: activations that are not channels-last
reordered into the layout oneDNN picks (``format_tag_any``, nChw16c / nCdhw16c) and the
results reordered back, against the float64 references of ``_reference.py`` with the
tolerances of ``_cases.py``; and the default choice's rule (``Conv.prefers_blocked``): the
blocked variant for NCHW kernels larger than 1x1, for float32 unpadded unit-stride 1x1
weight gradients reducing channels over at least 28x28 pixels, and for unpadded strided 1x1
bfloat16 fprop and dgrad with a small dy; the user's layout for other 1x1 kernels and a
strided dgrad into fewer than 16 channels (the stem's).

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import Harness, assert_close, device, reduction_tol, wgrad_tol  # noqa: F401
from ._cpu_engines import ONEDNN, require

BLOCKED = "+blocked"
AMX_REASON = "oneDNN's AMX implementations first"


def amx_here() -> bool:
    """Whether oneDNN dispatches to AMX on this CPU (its own report, ``dnnl_get_effective_
    cpu_isa``): there bfloat16 kernels larger than 1x1 default to its AMX implementations on
    channels-last copies, and a bfloat16 1x1 to the plain GEMM (``Conv._amx_first``)."""
    from hipdnn_async.runtime import load_onednn
    return "amx" in load_onednn().isa


def bf16_kernels_here() -> bool:
    """Whether oneDNN has bfloat16 convolution kernels on this CPU; without them (AVX2)
    BFLOAT16 runs float32 kernels on float32 copies (``_program.widened``)."""
    from hipdnn_async.providers.cpu.onednn._program import bf16_convolutions
    return bf16_convolutions()


def candidate_outputs(plan, harness, direction, keep):
    """{name: output as float64} of every candidate of ``plan``'s problem whose name
    ``keep(name)`` accepts, each run alone on ``harness``'s pack (not only the default),
    as its plan runs it: with its hooks (a guarded one's check and fallback, the ReLU
    pass after the primitive)."""
    pack = {role: harness.pack[t.name] for role, t in plan._pplan.match.tensors.items()
            if not t.is_virtual}
    return {name: out for name, out in run_candidates(plan._pplan.match, pack, direction)
            if keep(name)}


def run_candidates(match, pack, direction):
    """(name, output as float64) per candidate of ``match``'s convolution, in the engine's
    order, each run on ``pack`` (role -> array) through the plan the engine would make
    of it: its program and hooks (``_conv.conv_hooks``), as ``benchmark_conv`` times it."""
    from hipdnn_async.providers.cpu.onednn._conv import Conv, conv_hooks
    from hipdnn_async.providers.cpu.onednn._plan import OnednnPlan
    conv = Conv(match)
    out = getattr(conv.roles, {"dgrad": "x", "wgrad": "w"}.get(direction, "y"))
    got = []
    for cand in conv.candidates():
        _, pd, _, variant = conv.impls[cand.id]
        program, spec = conv.program(pd, variant=variant)
        try:
            hooks, ws_size = conv_hooks(conv, cand)
            plan = OnednnPlan(match, program, spec, cand.name, hooks=hooks,
                              workspace_size=ws_size)
            pack[out][...] = 0
            size = plan.workspace_size
            plan.run(pack, np.empty(size, np.uint8) if size else None)
        finally:
            program.close()
        got.append((cand.name, np.asarray(pack[out], np.float64).copy()))
    return got


def check_default(plan, got, want, limits, what, direction, dtype, harness):
    """The default of a kernel larger than 1x1 is ``+blocked`` (with the blocked reason),
    or in bfloat16 on an AMX CPU an AMX one on copies (with that reason), whose blocked
    candidates (no longer the default there) must match float64 too; where oneDNN offers
    no blocked kernel for the problem, the reason says so and every candidate must match. Conv + bias + ReLU's
    candidates compute the convolution alone, so only its default is compared."""
    if dtype == "bfloat16" and amx_here():
        # (on channels-last copies, or on the layout oneDNN chose where those are not
        # offered: the odd-K bf16 dgrad's, ``Conv._variants``)
        assert "_amx" in str(plan.algorithm), what
        assert AMX_REASON in plan.algorithm.reason, plan.algorithm.reason
        if direction != "conv_bias_relu":
            others = candidate_outputs(plan, harness, direction,
                                       lambda n: BLOCKED in n and "_amx" not in n)
            assert others, what
            for name, out in others.items():
                assert_close(out, want, *limits, f"{what}, candidate {name}")
    elif not any(BLOCKED in n for n, _ in plan.algorithm.trials):
        # no blocked kernel for this problem on this CPU (oneDNN 3.2 on AVX2: 3-D and
        # grouped weight gradients): the reason says so, and every candidate must match
        assert "no blocked kernel applies" in plan.algorithm.reason, plan.algorithm.reason
        if direction != "conv_bias_relu":
            others = candidate_outputs(plan, harness, direction, lambda n: True)
            assert others, what
            for name, out in others.items():
                assert_close(out, want, *limits, f"{what}, candidate {name}")
    else:
        assert BLOCKED in str(plan.algorithm), what
        assert "blocked layout" in plan.algorithm.reason, plan.algorithm.reason
        # the dgrad exception of ``prefers_blocked`` is named for data gradients only
        said = "strided dgrad" in plan.algorithm.reason
        assert said == (direction == "dgrad"), plan.algorithm.reason
    assert_close(got, want, *limits, what)

# name: (layout, x dims, w dims, pre, post, stride, dilation); every one takes +blocked
# by default (kernels larger than 1x1)
CASES = {
    "2d": ("NCHW", (2, 16, 7, 6), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "3d": ("NCDHW", (1, 16, 4, 5, 3), (16, 16, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1),
           (1, 1, 1)),
    # two groups of 16 channels, dilation, asymmetric padding, non-packed user memory
    "2d_groups_dilation_asym_strided_memory": ("NCHW_nonpacked", (2, 32, 9, 8),
                                               (32, 16, 3, 2), (2, 0), (1, 1), (1, 1),
                                               (2, 1)),
    "3d_groups_asym_strided_memory": ("NCDHW_nonpacked", (1, 32, 3, 5, 4), (32, 16, 2, 3, 3),
                                      (0, 1, 2), (1, 1, 0), (1, 1, 1), (1, 1, 1)),
}
STRIDED = ("NCHW", (2, 16, 9, 9), (16, 16, 3, 3), (1, 1), (0, 0), (2, 2), (1, 1))
DEPTHWISE = ("NCHW", (2, 16, 9, 8), (16, 1, 3, 3), (1, 1), (1, 1), (2, 1), (1, 1))


@pytest.fixture(autouse=True)
def _onednn():
    require(ONEDNN)


def run_blocked(dev, direction, dtype, case, seed=0, values=None, harness=None, knobs=None):
    """Build ``case`` on ONEDNN_ENGINE by default choice (or with ``knobs``): (plan, got,
    want, (atol, rtol)); ``harness``: a list the ``Harness`` is appended to (its pack, for
    re-runs)."""
    layout, xd, wd, pre, post, stride, dil = case
    kw = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
    yd = ref.conv_out_dims(xd, wd, pre, post, stride, dil)
    rng = np.random.default_rng(seed)
    h = Harness(dtype, layout, name=f"blocked_{direction}")
    taps = int(np.prod(wd[2:]))
    if direction in ("fprop", "conv_bias_relu"):
        x = h.input("x", rng.uniform(-1, 1, xd) if values is None else values)
        w = h.input("w", rng.uniform(-1, 1, wd))
        y = h.g.conv_fprop(x, w, **kw)
        want = ref.conv_fprop(h.ref["x"], h.ref["w"], pre, post, stride, dil)
        if direction == "conv_bias_relu":
            b = h.input("bias", rng.uniform(-1, 1, (1, wd[0]) + (1,) * (len(xd) - 2)))
            y = h.g.pointwise(h.g.pointwise(y, b, mode=h.hd.PointwiseMode.ADD),
                              mode=h.hd.PointwiseMode.RELU_FWD)
            want = ref.relu(want + h.ref["bias"])
        h.output(y, "out")
        limits = reduction_tol("conv_fprop", dtype, wd[1] * taps)
    elif direction == "dgrad":
        dy = h.input("dy", rng.uniform(-1, 1, yd) if values is None else values)
        w = h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_dgrad(dy, w, dx_dims=xd, **kw), "out")
        want = ref.conv_dgrad(h.ref["dy"], h.ref["w"], xd, pre, post, stride, dil)
        limits = reduction_tol("conv_dgrad", dtype, wd[0] * taps)
    else:
        dy = h.input("dy", rng.uniform(-1, 1, yd))
        x = h.input("x", rng.uniform(-1, 1, xd) if values is None else values)
        h.output(h.g.conv_wgrad(dy, x, dw_dims=wd, **kw), "out")
        want = ref.conv_wgrad(h.ref["dy"], h.ref["x"], wd, pre, post, stride, dil)
        limits = wgrad_tol(dtype, yd[0] * int(np.prod(yd[2:])), 1.0, 1.0)
    got = h.run(dev, engine=ONEDNN, **({} if knobs is None else {"knobs": knobs}))["out"]
    if harness is not None:
        harness.append(h)
    return h.plan, got, want, limits


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad", "conv_bias_relu"])
@pytest.mark.parametrize("case", list(CASES))
def test_blocked_matches_float64(device, case, direction, dtype):
    hs = []
    plan, got, want, limits = run_blocked(device, direction, dtype, CASES[case], harness=hs)
    what = f"{case} {direction} {dtype} (algorithm {plan.algorithm})"
    check_default(plan, got, want, limits, what, direction, dtype, hs[0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case,direction", [
    ("strided", "fprop"), ("strided", "dgrad"), ("strided", "wgrad"),
    ("strided", "conv_bias_relu"),
    # oneDNN's depthwise forward kernels choose channels-last for format_tag_any: there
    # the +nhwc variant runs, no +blocked one
    ("depthwise", "dgrad"), ("depthwise", "wgrad")])
def test_blocked_strided_and_depthwise_match_float64(device, case, direction, dtype):
    hs = []
    plan, got, want, limits = run_blocked(device, direction, dtype,
                                          STRIDED if case == "strided" else DEPTHWISE, seed=1,
                                          harness=hs)
    what = f"{case} {direction} {dtype} (algorithm {plan.algorithm})"
    if case == "depthwise":     # no AMX kernel: +blocked everywhere
        assert BLOCKED in str(plan.algorithm), what
        assert_close(got, want, *limits, what)
    else:
        check_default(plan, got, want, limits, what, direction, dtype, hs[0])


@pytest.mark.parametrize("direction,case", [
    ("fprop", ("NCHW", (1, 17, 5, 5), (17, 17, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1))),
    ("dgrad", ("NCHW", (1, 17, 5, 5), (17, 17, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1))),
    ("wgrad", ("NCHW", (1, 3, 11, 11), (16, 3, 7, 7), (3, 3), (3, 3), (2, 2), (1, 1))),
])
def test_blocked_bf16_odd_channels_keep_inf(device, direction, case):
    """Odd channel counts in bf16 (17, and the stem's 3; padded to the 16-channel block
    with zeros in the blocked layout; the bf16 kernels pair channels): inf inputs give
    exactly the reference's +-inf and NaN, never an extra NaN from inf * 0 with a
    zero-padded weight."""
    shape = case[1] if direction != "dgrad" else ref.conv_out_dims(*case[1:3], *case[3:])
    values = np.random.default_rng(7).uniform(-1, 1, shape)
    values[0, -1, 2, 2] = np.inf
    values[0, 1, 0, 4] = -np.inf
    hs = []
    with np.errstate(invalid="ignore"):     # the reference's inf - inf is NaN, as it must be
        plan, got, want, limits = run_blocked(device, direction, "bfloat16", case, 7, values,
                                              harness=hs)
        assert np.isinf(want).any()
        check_default(plan, got, want, limits,
                      f"bf16 C={case[1][1]} {direction} with inf inputs ({plan.algorithm})",
                      direction, "bfloat16", hs[0])


# ---------------------------------------------------------------------------------------
# the default choice's rule

def _graph(hd, direction, layout, xd, wd, stride=(1, 1), padding=0, dtype="float32"):
    g = hd.Graph(name=f"rule_{direction}", io_data_type=dtype)
    yd = ref.conv_out_dims(xd, wd, (padding,) * 2, (padding,) * 2, stride, (1, 1))
    kw = dict(padding=padding, stride=stride)
    if direction == "fprop":
        x, w = g.tensor(dims=xd, layout=layout), g.tensor(dims=wd, layout=layout)
        out = g.conv_fprop(x, w, **kw)
    elif direction == "dgrad":
        dy, w = g.tensor(dims=yd, layout=layout), g.tensor(dims=wd, layout=layout)
        out = g.conv_dgrad(dy, w, dx_dims=xd, **kw)
    else:
        dy, x = g.tensor(dims=yd, layout=layout), g.tensor(dims=xd, layout=layout)
        out = g.conv_wgrad(dy, x, dw_dims=wd, **kw)
    out.set_output(True)
    return g


# (direction, x dims, w dims, stride, padding, blocked; on an AVX2 CPU without AVX-512:
# blocked there, and whether an AVX2 rule of ``_avx2.preference`` gives the reason)
@pytest.mark.parametrize("direction,xd,wd,stride,padding,blocked,blocked_avx2,avx2_rule", [
    ("fprop", (2, 64, 14, 14), (64, 64, 3, 3), (1, 1), 1, True, True, False),  # res2 3x3
    ("dgrad", (2, 64, 14, 14), (64, 64, 3, 3), (1, 1), 1, True, True, False),
    ("wgrad", (2, 64, 14, 14), (64, 64, 3, 3), (1, 1), 1, True, True, False),
    ("fprop", (2, 64, 14, 14), (32, 64, 1, 1), (1, 1), 0, False, False, False),  # one GEMM
    ("wgrad", (2, 64, 14, 14), (32, 64, 1, 1), (1, 1), 0, False, False, False),
    # 1x1 reducing C at 28x28: blocked (on AVX2 too at these sizes: the AVX2 rule
    # replacing it takes effect from 64 Mi multiply-adds, test_onednn_avx2_order.py)
    ("wgrad", (2, 64, 28, 28), (32, 64, 1, 1), (1, 1), 0, True, True, False),
    ("wgrad", (2, 64, 28, 28), (64, 64, 1, 1), (1, 1), 0, True, True, False),
    ("wgrad", (2, 32, 28, 28), (64, 32, 1, 1), (1, 1), 0, False, False, False),  # widening
    ("wgrad", (2, 64, 28, 28), (32, 64, 1, 1), (2, 2), 0, False, False, False),  # strided
    ("fprop", (2, 64, 28, 28), (32, 64, 1, 1), (1, 1), 0, False, False, False),
    ("dgrad", (2, 32, 14, 14), (32, 32, 3, 3), (2, 2), 1, True, True, False),  # strided dgrad
    ("fprop", (1, 3, 32, 32), (16, 3, 7, 7), (2, 2), 3, True, True, False),    # the stem
    ("wgrad", (1, 3, 32, 32), (16, 3, 7, 7), (2, 2), 3, True, True, False),
    ("dgrad", (1, 3, 32, 32), (16, 3, 7, 7), (2, 2), 3, False, False, False),  # into C = 3
    ("dgrad", (1, 3, 32, 32), (16, 3, 3, 3), (1, 1), 1, True, True, False),    # unstrided
])
def test_default_choice_rule(device, direction, xd, wd, stride, padding, blocked,
                             blocked_avx2, avx2_rule):
    import hipdnn_async as hd
    plan = device.build_sync(_graph(hd, direction, "NCHW", xd, wd, stride, padding),
                             engine=ONEDNN)
    names = [n for n, _ in plan.algorithm.trials]
    avx2_rule = avx2_rule and avx2_only_here()
    if avx2_only_here():
        blocked = blocked_avx2
    # (a blocked candidate where the rule takes it; oneDNN 3.2 on AVX2 offers none into
    # the stem's 3 channels, where the rule declines it anyway)
    assert any(BLOCKED in n for n in names) or not blocked, names
    assert (BLOCKED in str(plan.algorithm)) == blocked, (plan.algorithm, names)
    assert ("on AVX2" in plan.algorithm.reason) == avx2_rule, plan.algorithm.reason
    if not blocked and not avx2_rule:
        assert "oneDNN's own preference order, rank 1" in plan.algorithm.reason


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_1x1_weight_gradient_exception_is_float32_only(device, dtype):
    # float16 runs on float32 copies (compute type float32) but was not measured faster
    import hipdnn_async as hd
    plan = device.build_sync(_graph(hd, "wgrad", "NCHW", (2, 64, 28, 28), (32, 64, 1, 1),
                                    dtype=dtype), engine=ONEDNN)
    assert BLOCKED not in str(plan.algorithm), plan.algorithm
    assert "+nhwc" not in str(plan.algorithm), plan.algorithm
    # (the AVX2 rule replacing the exception is float32's too: nothing to replace here)
    assert "oneDNN's own preference order, rank 1" in plan.algorithm.reason


def test_a_padded_1x1_weight_gradient_keeps_the_plain_gemm(device):
    # no blocked kernel takes a padded 1x1; its channels-last copies were 2.8x slower
    import hipdnn_async as hd
    plan = device.build_sync(_graph(hd, "wgrad", "NCHW", (2, 64, 28, 28), (32, 64, 1, 1),
                                    padding=1), engine=ONEDNN)
    names = [n for n, _ in plan.algorithm.trials]
    assert not any(BLOCKED in n for n in names), names
    assert plan.algorithm == names[0] and "+nhwc" not in plan.algorithm, names
    assert "oneDNN's own preference order, rank 1" in plan.algorithm.reason


def test_the_1x1_exception_names_its_own_reason(device):
    import hipdnn_async as hd
    plan = device.build_sync(_graph(hd, "wgrad", "NCHW", (2, 64, 28, 28), (32, 64, 1, 1)),
                             engine=ONEDNN)
    assert BLOCKED in plan.algorithm, plan.algorithm
    assert "1x1 weight gradient reducing channels" in plan.algorithm.reason
    assert "larger than 1x1" not in plan.algorithm.reason


# the strided 1x1 exceptions: (direction, dtype, x dims, w dims, padding, blocked, and on
# an AVX2 CPU without AVX-512)
STRIDED_1X1 = [
    ("fprop", "bfloat16", (1, 32, 28, 28), (64, 32, 1, 1), 0, True, False),
    ("conv_bias_relu", "bfloat16", (1, 32, 28, 28), (64, 32, 1, 1), 0, True, False),
    ("fprop", "float32", (1, 32, 28, 28), (64, 32, 1, 1), 0, False, False),   # C < 256
    ("fprop", "float32", (1, 256, 28, 28), (64, 256, 1, 1), 0, False, True),
    ("conv_bias_relu", "float32", (1, 256, 28, 28), (64, 256, 1, 1), 0, False, True),
    ("fprop", "float32", (1, 256, 27, 27), (64, 256, 1, 1), 0, False, False), # no jit_1x1
    ("fprop", "float16", (1, 32, 28, 28), (64, 32, 1, 1), 0, False, False),   # not measured
    ("fprop", "bfloat16", (1, 32, 28, 28), (64, 32, 1, 1), 1, False, False),  # padded
    ("fprop", "float32", (1, 256, 28, 28), (64, 256, 1, 1), 1, False, False), # padded
    ("dgrad", "bfloat16", (1, 32, 28, 28), (64, 32, 1, 1), 0, True, False),   # dy 14x14
    ("dgrad", "bfloat16", (1, 32, 58, 58), (64, 32, 1, 1), 0, False, False),  # dy 29x29
    ("dgrad", "float32", (1, 32, 14, 14), (64, 32, 1, 1), 0, True, True),     # dy 7x7
    ("dgrad", "float32", (1, 32, 28, 28), (64, 32, 1, 1), 0, False, False),   # dy 14x14
    ("dgrad", "float32", (1, 256, 28, 28), (64, 256, 1, 1), 0, False, True),  # dy 14x14
    ("dgrad", "float32", (1, 256, 30, 30), (64, 256, 1, 1), 0, False, False), # dy 15x15
    ("dgrad", "float32", (1, 256, 27, 27), (64, 256, 1, 1), 0, False, False), # no jit_1x1
    ("dgrad", "bfloat16", (1, 8, 14, 14), (64, 8, 1, 1), 0, False, False),    # into C = 8
    ("dgrad", "float32", (1, 8, 14, 14), (64, 8, 1, 1), 0, False, False),     # into C = 8
    ("wgrad", "bfloat16", (1, 32, 28, 28), (64, 32, 1, 1), 0, False, False),
    ("wgrad", "float32", (1, 256, 28, 28), (64, 256, 1, 1), 0, False, False),
    ("fprop", "float32", (1, 256, 28, 28), (16, 256, 1, 1), 0, False, False), # into K = 16
    ("fprop", "float32", (1, 256, 28, 28), (32, 256, 1, 1), 0, False, True),  # into K = 32
    # dy 7x7 from an odd dx: only the generic blocked kernel on AVX2 (None: not measured
    # on other CPUs, only checked against float64 there)
    ("dgrad", "float32", (1, 32, 13, 13), (64, 32, 1, 1), 0, None, False),
]


def avx2_only_here() -> bool:
    """Whether oneDNN reports an AVX2 ISA here (``avx2``, ``avx2_vnni``...: no AVX-512)."""
    from hipdnn_async.runtime import load_onednn
    return str(load_onednn().isa).startswith("avx2")


@pytest.mark.parametrize("direction,dtype,xd,wd,padding,blocked,blocked_avx2", STRIDED_1X1)
def test_strided_1x1_exceptions_match_float64(device, direction, dtype, xd, wd, padding,
                                              blocked, blocked_avx2):
    pads = (padding, padding)
    case = ("NCHW", xd, wd, pads, pads, (2, 2), (1, 1))
    plan, got, want, limits = run_blocked(device, direction, dtype, case, seed=3)
    what = f"strided 1x1 {direction} {dtype} {xd} pad {padding} (algorithm {plan.algorithm})"
    if avx2_only_here():
        # bfloat16 there runs float32 kernels on copies, as float16: no exception
        # measured; float32 prefers jit_1x1:avx2 to the GEMM more often
        blocked = blocked_avx2
    elif dtype == "bfloat16" and amx_here():
        blocked = False       # the plain GEMM on AMX (``Conv.prefers_blocked``)
    if blocked is None:
        assert_close(got, want, *limits, what)
        return
    assert (BLOCKED in str(plan.algorithm)) == blocked, what
    if blocked:
        # the reason names the rule this graph met: its type, direction, and on AVX2 why
        reason = plan.algorithm.reason
        assert "strided unpadded 1x1" in reason, reason
        assert ("bfloat16" if dtype == "bfloat16" else "float32") in reason, reason
        assert ("fprop" if direction != "dgrad" else "dgrad") in reason, reason
        assert ("AVX2" in reason) == (avx2_only_here() and dtype == "float32"
                                      and not (direction == "dgrad" and xd[2] <= 14)), reason
    else:
        assert "oneDNN's own preference order, rank 1" in plan.algorithm.reason, what
    assert_close(got, want, *limits, what)


def test_channels_last_has_no_blocked_variant(device):
    import hipdnn_async as hd
    plan = device.build_sync(_graph(hd, "fprop", "NHWC", (2, 64, 14, 14), (64, 64, 3, 3),
                                    padding=1), engine=ONEDNN)
    assert not any(BLOCKED in n for n, _ in plan.algorithm.trials), plan.algorithm.trials
