"""The default convolution implementation on an AVX-512 CPU without AMX (oneDNN's ISA
``avx512_core``, ``avx512_core_vnni``, ``avx512_core_bf16``...), where oneDNN 3.2's own
order, or ``Conv.prefers_blocked``, leaves a slower one first:

- channels-last strided data gradients (the stem's, the downsampling 1x1/2 and 3x3/2
  ones), for which oneDNN's first choice, ``brgconv_strided``, was never the fastest
  measured in bfloat16, nor in float32 into few channels or by a 1x1 kernel
  (``_channels_last_strided_dgrad``);
- channels-last strided 1x1 forward convolutions (ResNet-50's downsampling ones), where
  ``jit_bf16_1x1`` (bfloat16) and ``jit_1x1`` (float32) beat oneDNN's first,
  ``brgconv_1x1`` (``_channels_last_strided_1x1_fprop``);
- float32 weight gradients of NCHW activations over about 14x14 pixels, where oneDNN's
  ``jit`` kernel on channels-last copies beat the same kernel on the blocked copies
  ``Conv.prefers_blocked`` picks (``_plain_float32_wgrad``);
- float32 forward convolutions of NCHW images (at most 4 channels: a network's first
  layer), where oneDNN's AVX2 ``jit`` kernel on its blocked layout beat its AVX-512 one
  (``_plain_float32_image_fprop``);

and how many chunks a blocked forward convolution or data gradient runs its batch in
(``batch_chunks``).

Measured on a 2-core AMD EPYC (Zen 4, ``avx512_core_bf16``), oneDNN 3.2, two threads:
every candidate built as a whole plan and timed interleaved with PyTorch's call, the best
of 3-9 calls each (``bench/diag_conv_candidates.py``); the figures are the preferred
candidate's time over that of the one it displaces."""
from __future__ import annotations

import math

from ._preference import Preference, isa, pixels
from ._program import compute_type, dnnl, widened

__all__ = ["avx512_without_amx", "preference", "batch_chunks"]


def avx512_without_amx() -> bool:
    """Whether oneDNN runs AVX-512 kernels here but no AMX ones (its ISA ``avx512*`` not
    ``avx512_core_amx*``)."""
    name = isa()
    return name.startswith("avx512") and "amx" not in name


def preference(conv) -> Preference | None:
    """The AVX-512 rule ``conv`` (a ``Conv``) meets, or None (also off such a CPU)."""
    if not avx512_without_amx():
        return None
    return (_channels_last_strided_dgrad(conv) or _channels_last_strided_1x1_fprop(conv)
            or _plain_float32_wgrad(conv) or _plain_float32_image_fprop(conv))


def _measured(conv, direction) -> bool:
    """Whether ``conv`` is an ungrouped, undilated 2-D ``direction``: what every rule here
    was measured on."""
    return (conv.direction == direction and conv.match.params["conv"].groups == 1
            and len(conv.match.tensors[conv.roles.x].dims) == 4 and not any(conv.geometry[1]))


def _channels_last_strided(conv, direction) -> bool:
    """``_measured``, strided, on channels-last activations (the two strided rules)."""
    return (_measured(conv, direction) and any(s != 1 for s in conv.geometry[0])
            and conv.channels_last())


def _channels_last_strided_dgrad(conv) -> Preference | None:
    """The rule of an ungrouped, undilated, strided 2-D data gradient on channels-last
    activations."""
    t = conv.match.tensors
    x, w, y = t[conv.roles.x], t[conv.roles.w], t[conv.roles.y]
    _, _, pre, post = conv.geometry                # x: dx (C channels), y: dy (K)
    if not _channels_last_strided(conv, "dgrad"):
        return None
    c, k, taps, kind = x.dims[1], y.dims[1], math.prod(w.dims[2:]), compute_type(x)
    one = taps == 1 and not any(pre) and not any(post)
    if kind == dnnl.DATA_F32:
        if c <= 4 and k >= 32 and taps > 1:
            return Preference("x64:gemm", "", (
                "oneDNN's GEMM convolution before its brgconv_strided for a float32 "
                "channels-last strided dgrad into at most 4 channels from at least 32 on "
                "AVX-512 (0.40-0.75x its time at 3x3/2, 4x4/4, 5x5/2, 7x7/2 and 11x11/4 "
                "kernels over 64-224 pixel images, batch 1-32, ResNet-50's stem included; "
                "from 16 channels 1.06x, into 8-12 0.8-1.03x)"))
        if one:
            return Preference("jit_1x1:avx512_core", "", (
                "oneDNN's jit_1x1 before its brgconv_strided for a float32 channels-last "
                "strided unpadded 1x1 dgrad on AVX-512 (0.70-0.95x its time at ResNet-50's "
                "downsampling 1x1/2 convolutions, batch 1-32, and 32>64 at 56x56)"))
        return None     # 3x3/2: jit took 0.94-0.97x at res3, 1.03x at 64>128
    if kind != dnnl.DATA_BF16:
        return None
    if c <= 4 and k * taps >= 64 * 7 * 7:
        return Preference("x64:gemm", "", (
            "oneDNN's GEMM convolution before its brgconv_strided for a bfloat16 "
            "channels-last strided dgrad into at most 4 channels whose sums run over at "
            "least 64 x 7 x 7 terms (K R S) on AVX-512 (0.42-0.83x its time: ResNet-50's "
            "stem at batch 1-32, 5x5/2 from 128, 3x3/2 from 512-2048, 11x11/4; at 64 x 5 x "
            "5 and 256 x 3 x 3 jit_bf16 took 0.78-0.94x the GEMM's time, at 16-32 x 3 x 3 "
            "0.4-0.5x)"))
    if one:
        return Preference("jit_bf16_1x1:", "", (
            "oneDNN's jit_bf16_1x1 before its brgconv_strided for a bfloat16 channels-last "
            "strided unpadded 1x1 dgrad on AVX-512 (0.27-0.91x its time at ResNet-50's "
            "downsampling 1x1/2 convolutions, batch 1-32, and 32>64 at 56x56)"))
    return Preference("jit_bf16:", "", (
        "oneDNN's jit_bf16 before its brgconv_strided for a bfloat16 channels-last "
        "strided dgrad on AVX-512 (0.86-0.91x its time at ResNet-50's 3x3/2, batch 1-32, "
        "and 64>128 at 56x56; 0.23-0.93x into 1-15 channels at 3x3/2, 4x4/4, 5x5/2 and "
        "7x7/2; 0.96-1.09x into 3-4 from 2048 at 3x3/2, where the GEMM rule applies)"))


def _channels_last_strided_1x1_fprop(conv) -> Preference | None:
    """The rule of an ungrouped, strided, unpadded 2-D 1x1 forward convolution (conv +
    bias + ReLU too) on channels-last FLOAT or bfloat16 activations."""
    t = conv.match.tensors
    x, w = t[conv.roles.x], t[conv.roles.w]
    _, _, pre, post = conv.geometry
    if (not _channels_last_strided(conv, "fprop") or any(pre) or any(post)
            or math.prod(w.dims[2:]) != 1 or widened(x)):
        return None
    kind = compute_type(x)
    if kind == dnnl.DATA_BF16:
        return Preference("jit_bf16_1x1:", "", (
            "oneDNN's jit_bf16_1x1 before its brgconv_1x1 for a bfloat16 channels-last "
            "strided unpadded 1x1 fprop on AVX-512 (0.83-0.99x its time, conv + bias + ReLU "
            "0.86-0.98x, at ResNet-50's 256>512, 512>1024 and 1024>2048 1x1/2, batch 8 and "
            "32; at unit stride 0.98-1.06x: kept)"))
    if kind == dnnl.DATA_F32:
        return Preference("jit_1x1:avx512_core", "", (
            "oneDNN's jit_1x1 before its brgconv_1x1 for a float32 channels-last strided "
            "unpadded 1x1 fprop on AVX-512 (0.75-0.995x its time, conv + bias + ReLU "
            "0.78-0.99x, at ResNet-50's 256>512, 512>1024 and 1024>2048 1x1/2, batch 8 and "
            "32; once 1.027x in a 5-round run of 256>512 at batch 32, 0.987x in 9 rounds)"))
    return None


def _plain_float32(conv, direction) -> bool:
    """Whether ``conv`` is an ungrouped, undilated 2-D ``direction`` by a kernel larger
    than 1x1 on FLOAT activations that are not channels-last (NCHW): where the two NCHW
    rules below were measured."""
    x, w = conv.match.tensors[conv.roles.x], conv.match.tensors[conv.roles.w]
    return (_measured(conv, direction) and math.prod(w.dims[2:]) > 1
            and not conv.channels_last() and compute_type(x) == dnnl.DATA_F32
            and not widened(x))


# y pixels (OH x OW) and x channels of the NCHW float32 weight gradients that take
# channels-last copies (``_plain_float32_wgrad``)
WGRAD_NHWC_PIXELS = (100, 300)
WGRAD_NHWC_CHANNELS = (96, 512)


def _plain_float32_wgrad(conv) -> Preference | None:
    """The rule of a unit-stride NCHW float32 weight gradient (``_plain_float32``) over
    ``WGRAD_NHWC_PIXELS`` y pixels from ``WGRAD_NHWC_CHANNELS`` x channels."""
    if not _plain_float32(conv, "wgrad") or any(s != 1 for s in conv.geometry[0]):
        return None
    x, y = conv.match.tensors[conv.roles.x], conv.match.tensors[conv.roles.y]
    (lo_p, hi_p), (lo_c, hi_c) = WGRAD_NHWC_PIXELS, WGRAD_NHWC_CHANNELS
    if not (lo_p <= pixels(y) <= hi_p and lo_c <= x.dims[1] <= hi_c):
        return None
    return Preference("jit:avx512_core", "+nhwc", (
        "oneDNN's jit kernel on channels-last copies before its blocked copies for a "
        "float32 NCHW unit-stride weight gradient over 100-300 y pixels from 96-512 "
        "channels on AVX-512 (0.85-0.985x their time: 3x3 kernels at 12x12, 14x14, 17x17 "
        "from 96-512 channels, ResNet-50's res4 3x3 included, batch 1-32; at 20x20 "
        "0.97-1.005x; 1.02-1.17x from 64 channels, 0.93-1.045x from 1024, 0.94-1.25x at "
        "7x7 and 28x28, 1.07-1.2x at stride 2)"))


def _plain_float32_image_fprop(conv) -> Preference | None:
    """The rule of an NCHW float32 forward convolution (``_plain_float32``; conv + bias +
    ReLU too) from at most 4 channels."""
    if not _plain_float32(conv, "fprop") or conv.match.tensors[conv.roles.x].dims[1] > 4:
        return None
    return Preference("jit:avx2", "+blocked", (
        "oneDNN's AVX2 jit kernel before its AVX-512 one, both on the blocked layout, for a "
        "float32 NCHW fprop from at most 4 channels on AVX-512 (0.86-1.0x its time, conv + "
        "bias + ReLU 0.87-1.0x: 3x3/2, 3x3, 5x5 and 7x7/2 first layers over 32x32 to "
        "299x299 images, ResNet-50's stem included, batch 8 and 32)"))


# measuring (bench/diag_batch_chunks.py): the chunk count every +blocked forward and data
# gradient takes, where it divides the batch; None: the rule below
CHUNKS_OVERRIDE = None

# bytes of one chunk's blocked copies of x and y (dx and dy) that ``batch_chunks`` aims
# at: about the L2 caches of the two cores measured on (1 MiB each)
CHUNK_BYTES = 2 << 20


def batch_chunks(conv, pd) -> int:
    """The number of chunks ``Conv._chunked`` runs the batch of the ``+blocked``
    implementation ``pd`` (at the whole batch) in: 1 (the whole batch at once) off an
    AVX-512 CPU without AMX, and for what was not measured (problems other than
    ``_measured``'s forward and data-gradient ones, kernels other than the jit ones below:
    oneDNN's GEMM, whose summation order changes with the batch, gave other bits in
    chunks); else N / m, m the largest divisor of N from ``least`` images up to the
    images whose blocked copies (x and y, ``Conv._chosen``) take at most ``CHUNK_BYTES``
    (``least`` where one image's copies take more; no such divisor: 1):

    - float32 (``jit:avx512_core``, and the stem's ``jit:avx2``; ``least`` 2):
      ResNet-50's NCHW 3x3 fprop, dgrad and conv + bias + ReLU took 0.93-0.99x the whole
      batch's time at batch 8 and 32 (res4's at batch 32 0.98-1.0x), its 7x7/2 stem
      0.92-0.93x at batch 8 and 0.83-0.84x at 32;
    - bfloat16 1x1 (``jit_bf16_1x1``, ResNet-50's strided downsampling ones; ``least``
      2): 0.87-0.88x at batch 8, 0.75-0.77x at 32 (1 image a chunk: 1.02x at batch 8);
    - bfloat16 larger kernels (``jit_bf16``): only where one image's copies take at most
      ``CHUNK_BYTES / 4`` (``least`` 4): res3's 3x3 0.97-0.99x at batch 8 and 32, res4's
      0.98-1.02x at batch 32 (at batch 8 its whole batch is one chunk); res2's, at
      0.8 MB an image, took 1.01-1.02x in chunks of 4 images at batch 8 and 1.0-1.02x at
      batch 32, so it runs whole.

    Measured on the 2-core AMD EPYC above, two threads, interleaved with PyTorch's
    call (bench/diag_batch_chunks.py; best of 11 rounds at batch 8 and 7 at batch 32;
    every chunking gave the unchunked output's bits)."""
    if CHUNKS_OVERRIDE is not None:
        return CHUNKS_OVERRIDE
    if not (avx512_without_amx() and _measured(conv, conv.direction)
            and conv.direction != "wgrad"):
        return 1
    name = pd.impl_name
    n = conv.match.tensors[conv.roles.x].dims[0]
    image = sum(md.size for md in conv._chosen(pd)) / n     # bytes of one image's copies
    if compute_type(conv.match.tensors[conv.roles.x]) == dnnl.DATA_F32:
        if not name.startswith(("jit:avx512_core", "jit:avx2")):
            return 1        # not measured; oneDNN's GEMM sums in another order per batch
        least = 2
    elif name.startswith("jit_bf16_1x1:"):
        least = 2
    elif name.startswith("jit_bf16:") and image <= CHUNK_BYTES / 4:
        least = 4
    else:
        return 1
    most = max(least, int(CHUNK_BYTES // image))
    size = max((m for m in range(least, min(most, n) + 1) if n % m == 0), default=n)
    return n // size
