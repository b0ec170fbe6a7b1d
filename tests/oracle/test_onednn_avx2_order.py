"""The AVX2 rules of the default convolution implementation (``onednn/_avx2.py``).

- ``test_rule_of_each_problem``: which rule each problem meets, on any CPU (the ISA check
  patched to AVX2): the rules' boundaries (pixels, channels, stride, padding, layout).
- ``test_default_on_this_cpu_matches_float64``: the plan built here, values against the
  float64 reference; on an AVX2 CPU its default is the rule's implementation and its
  reason names the rule, elsewhere no AVX2 rule is named.
"""
from __future__ import annotations

import pytest

from . import _reference as ref  # noqa: F401  (run_blocked's reference)
from ._cases import assert_close, device  # noqa: F401
from ._cpu_engines import ONEDNN
from .test_onednn_blocked import (_graph, _onednn, avx2_only_here,  # noqa: F401 (autouse)
                                  run_blocked)

GEMM, JIT, JIT_1X1, BRGCONV = "x64:gemm", "jit:avx2", "jit_1x1:avx2", "brgconv:avx2"

# layout, direction, x dims, w dims, stride, padding; the rule's (kernel, layout variant)
# or None where no AVX2 rule applies. Every rule needs at least _avx2.MIN_WORK (392) y
# pixels over the batch and _avx2.MIN_MACS (64 Mi) multiply-adds.
CASES = [
    # channels-last
    ("NHWC", "fprop", (8, 128, 28, 28), (128, 128, 1, 1), 1, 0, (JIT_1X1, "")),
    ("NHWC", "conv_bias_relu", (8, 128, 28, 28), (128, 128, 1, 1), 1, 0, (JIT_1X1, "")),
    ("NHWC", "fprop", (8, 128, 56, 56), (128, 128, 1, 1), 2, 0, (JIT_1X1, "")),
    ("NHWC", "fprop", (8, 512, 28, 28), (32, 512, 1, 1), 1, 0, None),      # into K = 32
    ("NHWC", "fprop", (1, 128, 28, 28), (128, 128, 1, 1), 1, 0, None),     # 13 M MACs
    ("NHWC", "fprop", (8, 128, 28, 28), (128, 128, 1, 1), 1, 1, None),     # padded 1x1
    ("NHWC", "fprop", (8, 64, 28, 28), (64, 64, 3, 3), 1, 1, None),
    ("NHWC", "dgrad", (4, 128, 56, 56), (128, 128, 1, 1), 1, 0, (JIT_1X1, "")),
    ("NHWC", "dgrad", (8, 128, 28, 28), (128, 128, 1, 1), 1, 0, None),     # into 28x28
    ("NHWC", "dgrad", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, (GEMM, "")),  # the stem's
    ("NHWC", "dgrad", (1, 8, 112, 112), (64, 8, 7, 7), 2, 3, None),        # into C = 8
    ("NHWC", "wgrad", (2, 256, 14, 14), (256, 256, 3, 3), 1, 1, (GEMM, "")),  # dy 14x14
    ("NHWC", "wgrad", (8, 128, 14, 14), (128, 128, 3, 3), 1, 1, None),     # 128 channels
    ("NHWC", "wgrad", (4, 64, 28, 28), (64, 64, 3, 3), 1, 1, (JIT, "+blocked")),  # 28x28
    ("NHWC", "wgrad", (4, 64, 56, 56), (64, 64, 3, 3), 2, 1, (JIT, "+blocked")),  # strided
    ("NHWC", "wgrad", (4, 72, 28, 28), (72, 72, 3, 3), 1, 1, (JIT, "+blocked")),
    ("NHWC", "wgrad", (32, 64, 15, 15), (64, 64, 3, 3), 2, 1, None),       # dy 8x8
    ("NHWC", "wgrad", (4, 68, 28, 28), (64, 68, 3, 3), 1, 1, None),        # C % 8 != 0
    ("NHWC", "wgrad", (2, 64, 28, 28), (64, 64, 7, 7), 1, 3, None),        # 7x7
    ("NHWC", "wgrad", (4, 32, 28, 28), (512, 32, 3, 3), 2, 1, None),       # from C = 32
    ("NHWC", "wgrad", (8, 128, 28, 28), (128, 128, 1, 1), 1, 0, None),     # 1x1
    # NCHW
    ("NCHW", "fprop", (4, 128, 14, 14), (128, 128, 3, 3), 1, 1, (BRGCONV, "+nhwc")),
    ("NCHW", "conv_bias_relu", (4, 128, 14, 14), (128, 128, 3, 3), 1, 1, (BRGCONV, "+nhwc")),
    ("NCHW", "fprop", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1, None),       # 49 y pixels
    ("NCHW", "fprop", (8, 64, 28, 28), (64, 64, 3, 3), 1, 1, None),        # C = 64
    ("NCHW", "fprop", (8, 256, 14, 14), (21, 256, 3, 3), 1, 1, None),      # K = 21
    ("NCHW", "fprop", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, None),        # the stem
    ("NCHW", "dgrad", (4, 128, 14, 14), (128, 128, 3, 3), 1, 1, None),
    ("NCHW", "dgrad", (8, 512, 14, 14), (128, 512, 1, 1), 1, 0, (JIT_1X1, "+blocked")),
    ("NCHW", "dgrad", (8, 256, 28, 28), (64, 256, 1, 1), 1, 0, None),      # into 28x28
    ("NCHW", "dgrad", (8, 512, 14, 14), (128, 512, 1, 1), 1, 1, None),     # padded 1x1
    ("NCHW", "fprop", (8, 1024, 7, 7), (256, 1024, 1, 1), 1, 0, (JIT_1X1, "+blocked")),
    ("NCHW", "fprop", (8, 512, 14, 14), (128, 512, 1, 1), 1, 0, None),     # over 14x14
    ("NCHW", "wgrad", (8, 256, 28, 28), (64, 256, 1, 1), 1, 0, (GEMM, "")),  # reducing
    ("NCHW", "wgrad", (8, 512, 14, 14), (128, 512, 1, 1), 1, 0, None),     # GEMM first
    ("NCHW", "wgrad", (8, 64, 28, 28), (256, 64, 1, 1), 1, 0, None),       # widening
    ("NCHW", "wgrad", (8, 256, 56, 56), (64, 256, 1, 1), 2, 0, None),      # strided 1x1
    ("NCHW", "wgrad", (4, 128, 14, 14), (128, 128, 3, 3), 1, 1, None),
]


def _plan(device, row, dtype="float32"):
    """The default plan of ``row``'s problem, built but not run."""
    import hipdnn_async as hd
    layout, direction, xd, wd, stride, padding, _ = row
    if direction == "conv_bias_relu":
        return run_blocked(device, direction, dtype, _case(layout, xd, wd, stride, padding))[0]
    return device.build_sync(_graph(hd, direction, layout, xd, wd, (stride, stride), padding,
                                    dtype=dtype), engine=ONEDNN)


def _case(layout, xd, wd, stride, padding):
    pads = (padding, padding)
    return (layout, xd, wd, pads, pads, (stride, stride), (1, 1))


def _id(row):
    layout, direction, xd, wd, stride, padding, _ = row
    return f"{layout}-{direction}-{xd[1]}x{xd[2]}-{wd[0]}x{wd[2]}-s{stride}-p{padding}"


@pytest.mark.parametrize("row", CASES, ids=[_id(r) for r in CASES])
def test_rule_of_each_problem(device, monkeypatch, row):
    from hipdnn_async.providers.cpu.onednn import _avx2
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    layout, direction, xd, wd, stride, padding, want = row
    case = _case(layout, xd, wd, stride, padding)
    plan, *_ = run_blocked(device, direction, "float32", case)
    monkeypatch.setattr(_avx2, "avx2_only", lambda: True)
    got = _avx2.preference(Conv(plan._pplan.match))
    assert (None if got is None else (got.kernel, got.layout)) == want, got
    if got is not None:
        assert got.why.endswith(")") and "on AVX2" in got.why, got.why


def test_no_rule_off_avx2_or_for_groups(device, monkeypatch):
    """Off AVX2 no rule applies; nor, on AVX2, to a grouped convolution the table's rule
    would otherwise take (ungrouped ones measured only)."""
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _avx2
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    plan = _plan(device, CASES[0])
    conv = Conv(plan._pplan.match)
    monkeypatch.setattr(_avx2, "avx2_only", lambda: False)
    assert _avx2.preference(conv) is None
    monkeypatch.setattr(_avx2, "avx2_only", lambda: True)
    assert _avx2.preference(conv) is not None
    g = hd.Graph(name="grouped", io_data_type="float32")
    x = g.tensor(dims=(8, 128, 28, 28), layout="NHWC")
    w = g.tensor(dims=(128, 64, 1, 1), layout="NHWC")
    g.conv_fprop(x, w).set_output(True)          # two groups: w has C / 2 channels
    grouped = device.build_sync(g, engine=ONEDNN)
    assert _avx2.preference(Conv(grouped._pplan.match)) is None


@pytest.mark.parametrize("row", CASES, ids=[_id(r) for r in CASES])
def test_channels_last_blocked_candidates(device, monkeypatch, row):
    """Channels-last activations get ``+blocked`` candidates for exactly the rule that
    takes them (a 3x3 weight gradient between at least 64 channels, multiples of 8, into
    more than 14x14 dy pixels); on an AVX2 CPU the plan lists them, and only the kernel
    the rule names."""
    from hipdnn_async.providers.cpu.onednn import _avx2
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    layout, want = row[0], row[-1]
    plan = _plan(device, row)
    blocked_here = [n for n, _ in plan.algorithm.trials if "+blocked" in n]
    expect = layout == "NHWC" and want is not None and want[1] == "+blocked"
    if layout == "NHWC":
        assert bool(blocked_here) == (expect and avx2_only_here()), plan.algorithm.trials
        assert all(n.startswith(JIT) for n in blocked_here), blocked_here
    monkeypatch.setattr(_avx2, "avx2_only", lambda: True)
    assert _avx2.channels_last_blocked(Conv(plan._pplan.match)) == expect


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("row", CASES, ids=[_id(r) for r in CASES])
def test_default_on_this_cpu_matches_float64(device, row, dtype):
    from hipdnn_async.providers.cpu.onednn._avx2 import Preference
    layout, direction, xd, wd, stride, padding, want = row
    plan, got, expect, limits = run_blocked(device, direction, dtype,
                                            _case(layout, xd, wd, stride, padding), seed=5)
    name, reason = str(plan.algorithm), plan.algorithm.reason
    what = f"{_id(row)} {dtype} ({name}: {reason})"
    # bfloat16 takes the rules where it runs float32 kernels on copies (``+f32``), but for
    # the NCHW 1x1 weight gradient's, which undoes an AVX-512 rule of FLOAT only
    bf16_too = "+f32" in name and not (layout == "NCHW" and direction == "wgrad")
    applies = (want is not None and avx2_only_here() and (dtype == "float32" or bf16_too))
    if applies:
        assert Preference(*want, "").matches(name), what
        assert "on AVX2" in reason, what
    else:
        assert "on AVX2" not in reason, what
    assert_close(got, expect, *limits, what)


def test_a_rule_that_moves_nothing_is_not_the_reason(device):
    """A rule naming the candidate that oneDNN's order puts first anyway is not given as
    the reason (``Conv._moved_by_rule``); one that moved it is."""
    from hipdnn_async.providers.cpu.onednn import _avx2
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    plan = _plan(device, ("NCHW", "fprop", (8, 512, 14, 14), (128, 512, 1, 1), 1, 0, None))
    conv = Conv(plan._pplan.match)
    names = [c.name for c in conv.candidates()]
    first, other = names[0], names[1]
    conv.preferred = _avx2.Preference(first.split("+")[0], "", "RULE TEXT")
    assert conv.rule(first) != "RULE TEXT"
    layout = next((v for v in ("+nhwc", "+blocked") if v in other), "")
    conv.preferred = _avx2.Preference(other.split("+")[0], layout, "RULE TEXT")
    assert conv.candidates()[0].name == other
    assert conv.rule(other) == "RULE TEXT"
