"""BFLOAT16 convolutions where oneDNN has no bf16 kernels (oneDNN 3.2 on an AVX2 CPU):
ONEDNN_ENGINE runs float32 primitives on float32 copies converted exactly from and to the
user's bf16 memory (``_program.widened``, as for HALF), so it still takes every case.

The probe (``_program.bf16_convolutions``) is checked against the ISA oneDNN reports; the
widened path is forced on any CPU (the probe's answer patched to False) and checked
against the float64 references of ``_reference.py`` with the bf16 tolerances of
``_cases.py``. Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import pytest

from ._cases import assert_close, device  # noqa: F401
from ._conv_shapes import conv_shape_case
from ._cpu_engines import ONEDNN, require

# shapes of their own, so that no problem cached by the engine (``_convs``) or the device
# (its plan cache) from another test is reused: x dims, w dims, pre, post, stride, dilation
SHAPES = {
    "3x3": ((2, 6, 7, 5), (5, 6, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "1x1_s2": ((1, 18, 9, 7), (7, 18, 1, 1), (0, 0), (0, 0), (2, 2), (1, 1)),
    "3d": ((1, 5, 4, 5, 3), (6, 5, 3, 3, 3), (1, 1, 1), (1, 0, 1), (1, 1, 1), (1, 1, 1)),
}


@pytest.fixture(autouse=True)
def _onednn():
    require(ONEDNN)


def test_the_probe_agrees_with_the_isa():
    """oneDNN 3.2 has bf16 convolution kernels from ``avx512_core`` up (the bf16
    instructions emulated below ``avx512_core_bf16``) and none on ``avx2``."""
    from hipdnn_async.providers.cpu.onednn._program import bf16_convolutions
    from hipdnn_async.runtime import load_onednn
    state = load_onednn()
    if tuple(state.version[:2]) != (3, 2) or state.isa not in ISA_BF16:
        pytest.skip(f"the rule was read off oneDNN 3.2 on {sorted(ISA_BF16)}; this is "
                    f"oneDNN {state.version[:3]} on {state.isa}")
    assert bf16_convolutions() == ISA_BF16[state.isa], state.isa


ISA_BF16 = {"avx2": False, "avx512_core": True, "avx512_core_vnni": True,
            "avx512_core_bf16": True, "avx512_core_fp16": True, "avx512_core_amx": True}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_widened_bf16_matches_float64(device, monkeypatch, shape, direction, layout):
    from hipdnn_async.providers.cpu.onednn import _program
    monkeypatch.setattr(_program, "_BF16_CONVOLUTIONS", False)
    name = f"widened_{shape}"
    h, got, want, limits = conv_shape_case(device, SHAPES[shape], name, direction,
                                           "bfloat16", layout, engine=ONEDNN)
    what = f"widened bf16 {shape} {direction} {layout} (algorithm {h.plan.algorithm})"
    assert h.plan.engine.name == ONEDNN, what
    # every step runs float32: the user's bf16 arrays are converted copies (``+f32``)
    assert "+f32" in str(h.plan.algorithm), what
    assert_close(got, want, *limits, what)
