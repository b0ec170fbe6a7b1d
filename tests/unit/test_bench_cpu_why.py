"""bench/bench_cpu.py's "why" of a case above target: the oneDNN verbose parser on real
lines, the kernel-name normaliser, the reason rules, and the capture around a real
PyTorch convolution (skipped without torch or its oneDNN)."""
from __future__ import annotations

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import bench_cpu as bc  # noqa: E402

# Real output, torch 2.13.0+cpu (its oneDNN v3.12.0) on a 2-core AMD EPYC, 2026-12-06:
# an fp32 NHWC 3x3 dgrad (128>128 at 28x28, batch 2) reorders its weights, then runs
# backward data through the forward kernel; a 1x1/2 wgrad reorders its weights after.
TORCH_DGRAD = """\
onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,\
prop_kind,memory_descriptors,attributes,auxiliary,problem_desc,exec_time
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:acdb::f0 \
dst:f32::blocked:Bcda64b::f0,attr-scratchpad:user,,128x128x3x3,5.36108
onednn_verbose,v1,primitive,exec,cpu,convolution,brg_conv_bwd:avx512_core+brg_conv_fwd:\
avx512_core,backward_data,src:f32::blocked:acdb::f0 wei:f32:a:blocked:Bcda64b::f0 \
bia:undef::undef::: dst:f32::blocked:acdb::f0,attr-scratchpad:user,alg:convolution_direct,\
mb2_ic128oc128_ih28oh28kh3sh1dh0ph1_iw28ow28kw3sw1dw0pw1,13.313
"""
TORCH_WGRAD = """\
onednn_verbose,v1,primitive,exec,cpu,convolution,jit_1x1:avx512_core,backward_weights,\
src:f32::blocked:acdb::f0 wei:f32:a:blocked:ABcd16b16a::f0 bia:undef::undef::: \
dst:f32::blocked:acdb::f0,attr-scratchpad:user,alg:convolution_direct,\
mb2_ic256oc512_ih56oh28kh1sh2dh0ph0_iw56ow28kw1sw2dw0pw0,2.56396
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:ABcd16b16a::f0 \
dst:f32::blocked:abcd::f0,attr-scratchpad:user,,512x256x1x1,0.0649414
"""
# the same dgrad from our oneDNN 3.2 (ONEDNN_VERBOSE=1): no "v1,primitive" fields
OURS_DGRAD_3_2 = """\
onednn_verbose,exec,cpu,convolution,brg_fwd:avx512_core+brgconv:avx512_core,backward_data,\
src_f32::blocked:acdb::f0 wei_f32:a:blocked:Bcda64b::f0 bia_undef::undef::: \
dst_f32::blocked:acdb::f0,attr-scratchpad:user ,alg:convolution_direct,\
mb2_ic128oc128_ih28oh28kh3sh1dh0ph1_iw28ow28kw3sw1dw0pw1,9.81714
"""


def test_verbose_execs_reads_kind_and_implementation_of_exec_lines_only():
    assert bc.verbose_execs(TORCH_DGRAD) == [
        ("reorder", "jit:uni"),
        ("convolution", "brg_conv_bwd:avx512_core+brg_conv_fwd:avx512_core")]
    assert bc.verbose_execs(TORCH_WGRAD) == [("convolution", "jit_1x1:avx512_core"),
                                             ("reorder", "jit:uni")]
    assert bc.verbose_execs(OURS_DGRAD_3_2) == [
        ("convolution", "brg_fwd:avx512_core+brgconv:avx512_core")]
    # anything not a verbose line (our own prints, a stray exec) is no primitive
    assert bc.verbose_execs("bench_cpu: exec,cpu,convolution,jit:avx2\n\n") == []


@pytest.mark.parametrize("name, kernel", [
    ("brgconv:avx512_core_amx+nhwc", "brg_conv_fwd:avx512_core_amx"),
    ("jit:avx512_core+blocked", "jit:avx512_core"),
    ("jit:avx512_core_amx+nhwc+guarded", "jit:avx512_core_amx"),
    ("brg_fwd:avx512_core+brgconv:avx512_core", "brg_conv_fwd:avx512_core"),
    ("brg_conv_bwd:avx512_core+brg_conv_fwd:avx512_core", "brg_conv_fwd:avx512_core"),
    ("brgconv_1x1:avx512_core", "brgconv_1x1:avx512_core"),
    ("x64:gemm:jit", "x64:gemm:jit"),
    ("aten", None),
    (None, None)])
def test_kernel_name_drops_our_suffixes_keeps_the_inner_kernel_in_current_spelling(name,
                                                                                   kernel):
    assert bc.kernel_name(name) == kernel


def _row(algorithm, torch_algorithm, ratio, median_ratio, family="conv", reason=None):
    return {"family": family, "algorithm": algorithm, "torch_algorithm": torch_algorithm,
            "torch_algorithm_reason": reason, "ratio": ratio, "median_ratio": median_ratio}


def test_same_kernel_with_median_below_1x_is_within_the_spread():
    row = _row("brg_fwd:avx512_core+brgconv:avx512_core",
               "brg_conv_bwd:avx512_core+brg_conv_fwd:avx512_core", 1.04, 0.98)
    assert bc.why(row) == "same kernel as PyTorch; median <= 1.0x: within the run's spread"
    row["median_ratio"] = 1.03
    assert bc.why(row) == "same kernel as PyTorch; median above 1.0x too"


def test_different_kernels_are_named():
    row = _row("jit:avx512_core+blocked", "brg_conv_fwd:avx512_core", 1.2, 1.1)
    assert bc.why(row) == ("different kernel: ours jit:avx512_core, PyTorch "
                           "brg_conv_fwd:avx512_core; median above 1.0x too")


def test_a_kernel_our_onednn_does_not_offer_is_said_so():
    # the fp32 NHWC stem fprop: oneDNN 3.2 offers no brgconv for 3 input channels
    row = _row("jit:avx512_core", "brg_conv_fwd:avx512_core", 1.02, 1.01)
    row["candidates"] = ["jit:avx512_core", "jit:avx2", "jit:sse41", "x64:gemm:jit"]
    assert bc.why(row) == ("different kernel: ours jit:avx512_core, PyTorch "
                           "brg_conv_fwd:avx512_core (not among the 4 our oneDNN offers "
                           "here); median above 1.0x too")
    row["candidates"].append("brgconv:avx512_core+nhwc")      # offered, in 3.2's spelling
    assert bc.why(row).startswith("different kernel: ours jit:avx512_core, PyTorch "
                                  "brg_conv_fwd:avx512_core; ")


def test_batchnorm_against_aten_and_an_unknown_torch_kernel():
    row = _row("bn_rows:avx512", "aten", 1.1, 0.97, family="bn")
    assert bc.why(row) == ("our C rows vs PyTorch's ATen kernel; "
                           "median <= 1.0x: within the run's spread")
    row = _row("jit:avx512_core", None, 1.1, 1.2, reason="no oneDNN convolution line")
    assert bc.why(row) == ("PyTorch's kernel unknown (no oneDNN convolution line); "
                           "median above 1.0x too")


def test_verdict_counts_cases_above_by_median_too():
    rows = [dict(_row("a:b", "a:b", r, m), dtype="float32", layout="NHWC", shape="s",
                 pct=100.0) for r, m in ((1.1, 0.9), (1.1, 1.05), (0.9, 1.2))]
    v = bc.summarise(rows, {})["verdict"]
    assert (v["above_1x"], v["above_1x_median_too"]) == (2, 1)


def test_capture_names_pytorchs_convolution_implementation():
    torch = pytest.importorskip("torch", reason="the capture runs PyTorch's convolution")
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no oneDNN (torch.backends.mkldnn.is_available() False)")
    # batch 2: at batch 1 this small convolution is ATen's thnn_conv2d, not oneDNN's
    x, w = torch.randn(2, 8, 16, 16), torch.randn(8, 8, 3, 3)

    def conv():
        return torch.nn.functional.conv2d(x, w, None, 1, 1)
    conv()
    got = bc.torch_algorithm(torch, "conv", conv)
    assert isinstance(got["torch_algorithm"], str) and ":" in got["torch_algorithm"], got
    assert got["torch_algorithm_reason"] is None and got["torch_reorders"] >= 0, got
