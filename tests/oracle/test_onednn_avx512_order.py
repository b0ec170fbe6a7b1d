"""The AVX-512 rules of the default convolution implementation (``onednn/_avx512.py``):
channels-last strided data gradients and NCHW float32 weight gradients over about 14x14
pixels; channels-last strided 1x1 fprop; NCHW float32 fprop from at most 4
channels, on an AVX-512 CPU without AMX.

- ``test_rule_of_each_problem``: which rule each problem meets, on any CPU (the ISA check
  patched): the boundaries in channels on both sides, kernel size, stride and layout.
- ``test_default_on_this_cpu_matches_float64``: the plan built here against the float64
  reference; on such a CPU its default is the rule's implementation and its reason names
  the rule, elsewhere no AVX-512 rule is named.
"""
from __future__ import annotations

import pytest

from . import _reference as ref  # noqa: F401  (run_blocked's reference)
from ._cases import assert_close, device  # noqa: F401
from ._cpu_engines import ONEDNN
from .test_onednn_blocked import _graph, _onednn, run_blocked  # noqa: F401 (autouse)

GEMM, JIT_BF16 = ("x64:gemm", ""), ("jit_bf16:", "")
JIT_1X1, JIT_BF16_1X1 = ("jit_1x1:avx512_core", ""), ("jit_bf16_1x1:", "")
JIT_NHWC, JIT_AVX2_BLOCKED = ("jit:avx512_core", "+nhwc"), ("jit:avx2", "+blocked")

# (layout, dtype, direction, dx dims, w dims, stride, padding, the rule's (kernel, layout)
# or None)
CASES = [
    ("NHWC", "float32", "dgrad", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, GEMM),  # the stem
    ("NHWC", "float32", "dgrad", (2, 3, 64, 64), (32, 3, 3, 3), 2, 1, GEMM),    # from 32
    ("NHWC", "float32", "dgrad", (2, 3, 64, 64), (16, 3, 3, 3), 2, 1, None),    # from 16
    ("NHWC", "float32", "dgrad", (2, 4, 32, 32), (32, 4, 4, 4), 4, 0, GEMM),    # into 4
    ("NHWC", "float32", "dgrad", (2, 8, 32, 32), (64, 8, 7, 7), 2, 3, None),    # into 8
    ("NHWC", "float32", "dgrad", (2, 64, 28, 28), (128, 64, 3, 3), 2, 1, None),  # 3x3/2
    ("NHWC", "float32", "dgrad", (2, 256, 28, 28), (512, 256, 1, 1), 2, 0, JIT_1X1),
    ("NHWC", "float32", "dgrad", (2, 3, 28, 28), (64, 3, 1, 1), 2, 0, JIT_1X1),  # into 3
    ("NHWC", "float32", "dgrad", (2, 64, 28, 28), (128, 64, 1, 1), 2, 1, None),  # padded
    ("NHWC", "float32", "dgrad", (2, 3, 32, 32), (64, 3, 7, 7), 1, 3, None),    # unstrided
    ("NHWC", "float32", "fprop", (2, 3, 64, 64), (64, 3, 7, 7), 2, 3, None),
    ("NCHW", "float32", "dgrad", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, None),  # GEMM anyway
    ("NHWC", "bfloat16", "dgrad", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, GEMM),
    ("NHWC", "bfloat16", "dgrad", (2, 3, 64, 64), (64, 3, 5, 5), 2, 2, JIT_BF16),  # 1600
    ("NHWC", "bfloat16", "dgrad", (2, 4, 32, 32), (128, 4, 5, 5), 2, 2, GEMM),  # K R S 3200
    ("NHWC", "bfloat16", "dgrad", (2, 3, 16, 16), (512, 3, 3, 3), 2, 1, GEMM),  # 4608
    ("NHWC", "bfloat16", "dgrad", (2, 3, 16, 16), (256, 3, 3, 3), 2, 1, JIT_BF16),  # 2304
    ("NHWC", "bfloat16", "dgrad", (2, 3, 64, 64), (32, 3, 7, 7), 2, 3, JIT_BF16),  # from 32
    ("NHWC", "bfloat16", "dgrad", (2, 15, 32, 32), (64, 15, 3, 3), 2, 1, JIT_BF16),
    ("NHWC", "bfloat16", "dgrad", (2, 16, 32, 32), (64, 16, 3, 3), 2, 1, JIT_BF16),
    ("NHWC", "bfloat16", "dgrad", (2, 256, 28, 28), (512, 256, 1, 1), 2, 0, JIT_BF16_1X1),
    ("NHWC", "bfloat16", "dgrad", (2, 64, 28, 28), (128, 64, 3, 3), 1, 1, None),  # stride 1
    ("NCHW", "bfloat16", "dgrad", (2, 3, 64, 64), (64, 3, 7, 7), 2, 3, None),
    # channels-last strided unpadded 1x1 fprop
    ("NHWC", "bfloat16", "fprop", (2, 256, 28, 28), (512, 256, 1, 1), 2, 0, JIT_BF16_1X1),
    ("NHWC", "bfloat16", "fprop", (2, 64, 14, 14), (32, 64, 1, 1), 2, 1, None),    # padded
    ("NHWC", "bfloat16", "fprop", (2, 256, 28, 28), (64, 256, 1, 1), 1, 0, None),  # stride 1
    ("NHWC", "bfloat16", "fprop", (2, 64, 28, 28), (128, 64, 3, 3), 2, 1, None),   # 3x3/2
    ("NCHW", "bfloat16", "fprop", (2, 256, 28, 28), (512, 256, 1, 1), 2, 0, None),  # NCHW
    ("NHWC", "float32", "fprop", (2, 256, 28, 28), (512, 256, 1, 1), 2, 0, JIT_1X1),
    ("NHWC", "float32", "fprop", (2, 64, 14, 14), (32, 64, 1, 1), 2, 1, None),      # padded
    ("NHWC", "float32", "fprop", (2, 256, 28, 28), (64, 256, 1, 1), 1, 0, None),   # stride 1
    # NCHW float32 fprop from at most 4 channels (a first layer)
    ("NCHW", "float32", "fprop", (2, 3, 64, 64), (64, 3, 7, 7), 2, 3, JIT_AVX2_BLOCKED),
    ("NCHW", "float32", "fprop", (2, 4, 16, 16), (16, 4, 3, 3), 1, 1, JIT_AVX2_BLOCKED),
    ("NCHW", "float32", "fprop", (2, 5, 16, 16), (16, 5, 3, 3), 1, 1, None),     # 5 channels
    ("NCHW", "float32", "fprop", (2, 3, 16, 16), (16, 3, 1, 1), 1, 0, None),     # 1x1
    ("NHWC", "float32", "fprop", (2, 3, 64, 64), (64, 3, 7, 7), 2, 3, None),     # NHWC
    ("NCHW", "bfloat16", "fprop", (2, 3, 64, 64), (64, 3, 7, 7), 2, 3, None),    # bfloat16
    # NCHW float32 weight gradients: x dims, then w; y pixels 100-300, 96-512 channels
    ("NCHW", "float32", "wgrad", (2, 256, 14, 14), (256, 256, 3, 3), 1, 1, JIT_NHWC),
    ("NCHW", "float32", "wgrad", (1, 96, 10, 10), (32, 96, 3, 3), 1, 1, JIT_NHWC),   # 100
    ("NCHW", "float32", "wgrad", (1, 512, 17, 17), (16, 512, 3, 3), 1, 0, JIT_NHWC),  # 225
    ("NCHW", "float32", "wgrad", (1, 128, 15, 20), (64, 128, 3, 3), 1, 1, JIT_NHWC),  # 300
    ("NCHW", "float32", "wgrad", (1, 128, 17, 17), (64, 128, 3, 3), 1, 2, None),      # 361
    ("NCHW", "float32", "wgrad", (1, 128, 9, 9), (64, 128, 3, 3), 1, 1, None),       # 81
    ("NCHW", "float32", "wgrad", (1, 64, 14, 14), (64, 64, 3, 3), 1, 1, None),      # 64 ch
    ("NCHW", "float32", "wgrad", (1, 1024, 14, 14), (32, 1024, 3, 3), 1, 1, None),  # 1024
    ("NCHW", "float32", "wgrad", (1, 256, 28, 28), (64, 256, 3, 3), 2, 1, None),    # stride
    ("NCHW", "float32", "wgrad", (1, 256, 14, 14), (64, 256, 1, 1), 1, 0, None),    # 1x1
    ("NHWC", "float32", "wgrad", (1, 256, 14, 14), (64, 256, 3, 3), 1, 1, None),    # NHWC
    ("NCHW", "float32", "fprop", (1, 256, 14, 14), (64, 256, 3, 3), 1, 1, None),    # fprop
    ("NCHW", "bfloat16", "wgrad", (1, 256, 14, 14), (64, 256, 3, 3), 1, 1, None),   # bf16
]


def _id(row):
    layout, dtype, direction, xd, wd, stride, padding, _ = row
    return (f"{layout}-{dtype}-{direction}-{xd[1]}x{xd[2]}-{wd[0]}x{wd[2]}-s{stride}"
            f"-p{padding}")


def _conv(device, row):
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    layout, dtype, direction, xd, wd, stride, padding, _ = row
    plan = device.build_sync(_graph(hd, direction, layout, xd, wd, (stride, stride),
                                    padding, dtype=dtype), engine=ONEDNN)
    return Conv(plan._pplan.match)


@pytest.mark.parametrize("row", CASES, ids=[_id(r) for r in CASES])
def test_rule_of_each_problem(device, monkeypatch, row):
    from hipdnn_async.providers.cpu.onednn import _avx512
    from hipdnn_async.providers.cpu.onednn._program import compute_type, dnnl
    conv = _conv(device, row)
    x = conv.match.tensors[conv.roles.x]
    if row[1] == "bfloat16" and compute_type(x) != dnnl.DATA_BF16:
        pytest.skip("bfloat16 runs on float32 copies here (no AVX-512 bf16 kernels)")
    monkeypatch.setattr(_avx512, "avx512_without_amx", lambda: True)
    got = _avx512.preference(conv)
    assert (None if got is None else (got.kernel, got.layout)) == row[-1], got
    if got is not None:
        assert got.why.endswith(")") and "on AVX-512" in got.why, got.why
    monkeypatch.setattr(_avx512, "avx512_without_amx", lambda: False)
    assert _avx512.preference(conv) is None          # AVX2, AMX: not measured


def test_no_rule_for_groups_or_dilation(device, monkeypatch):
    """Ungrouped, undilated problems only were measured."""
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _avx512
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    monkeypatch.setattr(_avx512, "avx512_without_amx", lambda: True)
    for kw, wd in ((dict(stride=2, padding=1, dilation=2), (64, 2, 3, 3)),
                   (dict(stride=2, padding=1), (64, 1, 3, 3))):    # dilated; 2 groups
        g = hd.Graph(name="dgrad", io_data_type="float32")
        dy = g.tensor(dims=(2, 64, 16, 16) if "dilation" not in kw else (2, 64, 15, 15),
                      layout="NHWC")
        w = g.tensor(dims=wd, layout="NHWC")
        g.conv_dgrad(dy, w, dx_dims=(2, 2, 32, 32), **kw).set_output(True)
        conv = Conv(device.build_sync(g, engine=ONEDNN)._pplan.match)
        assert _avx512.preference(conv) is None, kw


def test_no_nchw_rule_for_groups_or_dilation(device, monkeypatch):
    """The NCHW float32 rules (weight gradients over 100-300 pixels, first-layer fprop)
    were measured on ungrouped, undilated problems only: each problem below meets its
    rule without the groups or the dilation."""
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn import _avx512
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    monkeypatch.setattr(_avx512, "avx512_without_amx", lambda: True)

    def wgrad(groups, dilation):
        g = hd.Graph(name="wgrad", io_data_type="float32")
        pad = dilation          # keeps y at 14x14 for a 3x3 kernel
        dy = g.tensor(dims=(1, 128, 14, 14), name="dy")
        x = g.tensor(dims=(1, 128, 14, 14), name="x")
        g.conv_wgrad(dy, x, dw_dims=(128, 128 // groups, 3, 3), padding=pad,
                     dilation=dilation).set_output(True)
        return g

    def fprop(groups, dilation):
        g = hd.Graph(name="fprop", io_data_type="float32")
        x = g.tensor(dims=(1, 4, 32, 32), name="x")
        w = g.tensor(dims=(16, 4 // groups, 3, 3), name="w")
        g.conv_fprop(x, w, padding=dilation, dilation=dilation).set_output(True)
        return g

    for make, want in ((wgrad, ("jit:avx512_core", "+nhwc")), (fprop, ("jit:avx2", "+blocked"))):
        for groups, dilation, expect in ((1, 1, want), (2, 1, None), (1, 2, None)):
            conv = Conv(device.build_sync(make(groups, dilation), engine=ONEDNN)._pplan.match)
            got = _avx512.preference(conv)
            assert (None if got is None else (got.kernel, got.layout)) == expect, (
                make.__name__, groups, dilation, got)


# dx sizes a stride does not divide, asymmetric padding and stride, non-square kernels,
# special values: through the rules' kernels, and where oneDNN offers no such kernel (odd dx
# sizes: no 1x1 kernel; an odd K in bfloat16: blocked copies) the one that runs instead
ODD = [
    ("float32", (3, 3, 17, 19), (64, 3, 7, 5), (3, 2), (2, 1), (2, 3)),       # GEMM
    ("float32", (1, 64, 18, 20), (128, 64, 1, 1), (0, 0), (0, 0), (2, 2)),    # jit_1x1
    ("float32", (1, 64, 17, 19), (128, 64, 1, 1), (0, 0), (0, 0), (2, 3)),    # jit (no 1x1)
    ("bfloat16", (3, 3, 17, 19), (64, 3, 7, 7), (3, 3), (2, 3), (2, 2)),      # GEMM
    ("bfloat16", (1, 33, 15, 16), (64, 33, 3, 3), (1, 0), (1, 1), (2, 1)),    # jit_bf16
    ("bfloat16", (1, 33, 15, 16), (65, 33, 3, 3), (1, 0), (1, 1), (2, 1)),    # +blocked
    ("bfloat16", (3, 64, 18, 20), (128, 64, 1, 1), (0, 0), (0, 0), (2, 2)),   # jit_bf16_1x1
]


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("odd", ODD, ids=[f"{o[0]}-{o[1][1]}x{o[1][2]}-{o[2][0]}x{o[2][2]}"
                                          for o in ODD])
def test_rules_kernels_on_odd_geometry_match_float64(device, odd, special):
    import numpy as np
    dtype, xd, wd, pre, post, stride = odd
    yd = ref.conv_out_dims(xd, wd, pre, post, stride, (1, 1))
    values = None
    if special:      # an inf, a NaN and a -inf in dy: where the reference has them, so has dx
        values = np.random.default_rng(3).uniform(-1, 1, yd)
        values[0, 0, 0, 0], values[-1, -1, -1, -1], values[0, -1, 1, 1] = np.inf, np.nan, -np.inf
    with np.errstate(invalid="ignore"):        # the reference's inf - inf where dy has both
        plan, got, expect, limits = run_blocked(device, "dgrad", dtype,
                                                ("NHWC", xd, wd, pre, post, stride, (1, 1)),
                                                seed=11, values=values)
    assert_close(got, expect, *limits, f"{odd} special={special} ({plan.algorithm})")


@pytest.mark.parametrize("row", CASES, ids=[_id(r) for r in CASES])
def test_default_on_this_cpu_matches_float64(device, row):
    from hipdnn_async.providers.cpu.onednn._avx512 import avx512_without_amx
    from hipdnn_async.providers.cpu.onednn._preference import Preference
    layout, dtype, direction, xd, wd, stride, padding, want = row
    pads = (padding, padding)
    case = (layout, xd, wd, pads, pads, (stride, stride), (1, 1))
    plan, got, expect, limits = run_blocked(device, direction, dtype, case, seed=7)
    name, reason = str(plan.algorithm), plan.algorithm.reason
    what = f"{_id(row)} ({name}: {reason})"
    if want is not None and avx512_without_amx() and "+f32" not in name:
        assert Preference(*want, "").matches(name), what
        assert "on AVX-512" in reason, what
    else:
        assert "on AVX-512" not in reason, what
    assert_close(got, expect, *limits, what)
