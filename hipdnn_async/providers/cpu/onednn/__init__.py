"""``ONEDNN_ENGINE``: the nine patterns through oneDNN's primitives (``runtime._onednn``).

The engine ranks first on the CPU where oneDNN loads (``runtime.load_onednn``) and declines
(``NotSupportedError``) where it does not, or where oneDNN has no implementation for a graph
(``dnnl_unimplemented`` at build): ``CPU_ENGINE`` then runs it.

How each pattern maps (primitives are created at build, never per execution):

- conv fprop / dgrad / wgrad: one convolution primitive with the activations described
  exactly as the user's memory (``dnnl_memory_desc_create_with_strides``: NCHW, NHWC, NCDHW,
  NDHWC, any strides) and the weights as ``format_tag_any`` (oneDNN's plain-weights
  implementations are its reference ones, ~1000x slower), reordered from / to the user's
  layout in the same program; groups as a grouped weights descriptor, oneDNN's dilation =
  ours - 1, asymmetric padding as ``padding_l`` / ``padding_r``. Backward weights
  accumulate in a float32 blocked buffer converted once by the reorder. Activations that
  are not channels-last also get channels-last candidates (``+nhwc``) and candidates in
  the layout oneDNN picks for ``format_tag_any`` activations (``+blocked``, typically
  nChw16c), each with reorders in and out; without benchmarking ``+blocked`` is taken
  for kernels larger than 1x1 (oneDNN runs ``gemm:jit`` on plain NCHW; its blocked
  kernels plus the reorders took 0.5-0.9 of that time here), except a strided dgrad
  into fewer than 16 channels, and for a float32 unit-stride unpadded 1x1 weight
  gradient reducing channels over at least 28x28 pixels, and for an unpadded strided
  1x1 bfloat16 fprop or small-dy dgrad (``Conv.prefers_blocked``). On a CPU with AMX,
  bfloat16 kernels larger than 1x1 take oneDNN's AMX implementations first (on ``+nhwc``
  copies: its blocked layout runs bf16 on AVX-512 kernels) and a bfloat16 1x1 the plain
  GEMM (``Conv._amx_first``). On an AVX2 CPU without AVX-512, rules measured there move
  one implementation first where oneDNN 3.2's own order is slower (``_avx2.preference``;
  channels-last weight gradients of larger kernels also get ``+blocked`` candidates);
  on an AVX-512 CPU without AMX, channels-last strided dgrads take oneDNN's GEMM,
  ``jit_1x1`` or ``jit_bf16`` kernels before its ``brgconv_strided``
  (``_avx512.preference``).
  Activations that are not packed (gaps between elements, a channel slice) run on dense
  copies (``+dense``): oneDNN's only implementations of strided activations are its
  reference ones.
  oneDNN's reference implementations (``ref:any``) are never candidates: where nothing
  else applies the engine declines.
- conv + bias + ReLU: the forward primitive with its bias argument; RELU_FWD then runs
  on y through the CPU kernels, since oneDNN 3.2's eltwise post-ops differ from RELU_FWD
  on special values (``relu`` gives NaN for -inf and -0.0 for negatives, ``clip`` maps
  NaN to the lower bound); an unclipped one also as the exact post-op chain ``elu``,
  ``linear`` (``+relu`` candidates: the default for a y of fewer than 65,536 elements
  and fewer than 4 M multiply-adds, not on the GEMM convolution;
  ``_conv._post_ops_first``).
- batchnorm inference (variance): one forward-inference primitive with global statistics.
- batchnorm training (+ ReLU): the engine's batchnorm rows alone (below), on dense copies
  of memory they cannot read as it is; every oneDNN 3.2 batchnorm sums in float32 and
  missed the FLOAT tolerance on offset data (``_bnorm.BN_BUILDERS``).
- batchnorm backward and inference -> RELU_BWD -> batchnorm backward: the rows alone too;
  oneDNN's backward takes inv_variance as a float32 variance ``1 / inv_variance**2`` (0
  or +inf at the extremes: dx all NaN) and its fused ReLU mask (``fuse_norm_relu``) turns
  a NaN y into 0 (``_bnorm.BN_BUILDERS``).
- batchnorm activations that are not packed run on dense copies, as convolutions do.

HALF (float16) I/O: oneDNN 3.2 has f16 convolution and batchnorm kernels only on CPUs with
AVX512-FP16 or AMX-FP16, so every HALF graph runs float32 primitives on float32 copies
(candidate names ``+f32``): the f16 -> f32 reorders in are exact, the f32 -> f16 reorder
of each result rounds once (what the tolerance table assumes); weights are reordered to
oneDNN's blocked float32 layout, a HALF bias to a float32 vector. Every copy is a piece
of the plan's workspace (``workspace_size`` counts it).

Batchnorm on channels-first activations with packed spatial elements (NCHW, NCDHW) runs,
by default, through the engine's own batchnorm rows (``_bnorm._rows``: C in
``_kernels.bn_rows``, on oneDNN's OpenMP team under its gate; every pass of a channel on
one thread, the later passes reading it from cache), since oneDNN 3.2's jit batchnorm
reads only blocked or channels-last memory and the reorders around it cost 2-3.5x
PyTorch's time in backward; for inference the oneDNN candidates below stay offered and
benchmarked. On channels-last activations (NHWC, NDHWC) the rows split the
pixels among the threads (``_bn_last.h``; partial sums meet at a team barrier) and are
taken by default too, for every pattern and data type (they measured faster than
oneDNN's jit batchnorm, and its float32 sums missed the tolerance on offset data).
Training, backward and pattern 2 run the rows alone; on memory they cannot read as it
is, on dense workspace copies (``+dense``).

Batchnorm inference candidates: the rows (in place, or on dense copies), oneDNN's
batchnorm on the user's layout and, for activations that are not channels-last, on
channel-blocked and channels-last copies (``+nChw16c``, ``+nhwc``: reorders in and out
around oneDNN's jit batchnorm, which takes no plain NCHW memory; there oneDNN runs its
generic ``ncsp_bnorm:any``), and one binary primitive (``+binary``). Without
benchmarking the rows run; ``global.benchmarking=1`` times them all.

Per-channel tensors (scale, bias, statistics) whose channel stride is not 1 are staged
through the workspace (oneDNN reads and writes them as dense vectors; the rows too).

Choosing: a primitive descriptor's implementations (``next_impl``, named by
``impl_info_str``) are the candidates, in oneDNN's own preference order; each needs the
workspace of its scratchpad plus the blocked weights (``global.workspace_size_limit``
ranges over these). ``global.benchmarking = 1`` times the candidates and keeps the
fastest in the perf db, keyed by CPU model, ISA, threads and oneDNN version.
"""
from __future__ import annotations

from ._engine import OnednnEngine
from ._plan import OnednnPlan
from ._program import ONEDNN_ENGINE_NAME

__all__ = ["OnednnEngine", "OnednnPlan", "ONEDNN_ENGINE_NAME"]
