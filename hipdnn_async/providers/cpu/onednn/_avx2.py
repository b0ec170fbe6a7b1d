"""The default convolution implementation on an AVX2 CPU without AVX-512 (oneDNN's ISA
``avx2``, ``avx2_vnni``...), where oneDNN 3.2's own order and ``Conv.prefers_blocked``'s
AVX-512 rules leave a slower one first.

Each rule names the implementation (a prefix of oneDNN's name) and the layout variant that
``Conv._ordered`` moves first where both exist. They hold for float32 kernels (FLOAT, and
the HALF and BFLOAT16 I/O that runs them on float32 copies) of 2-D convolutions without
groups or dilation. Measured on a 2-core AMD EPYC (AVX2 + FMA), oneDNN 3.2, ResNet-50's
convolutions at batch 8 (checked at 32), two threads: every candidate of one problem built
as a whole plan (reorders included) and timed interleaved, the best of 5-11 calls each;
the figures are the preferred candidate's time over that of the one it displaces.
``Preference`` (``_preference.py``) is what each rule names."""
from __future__ import annotations

import math

from ._preference import Preference, isa, pixels as _pixels
from ._program import compute_type, dnnl

__all__ = ["Preference", "avx2_only", "channels_last_blocked", "preference"]

# y pixels of all images (N x OH x OW) and multiply-adds from which any rule applies: the
# fewest of the convolutions measured (ResNet-50's at batch 8: 7x7 layers; res2's 1x1
# 64>64, 103 M multiply-adds). Below them (batch 1, small images, few channels) several
# picks lost: brgconv on NCHW copies 1.1-2x, the blocked 1x1 kernels 1.08-1.5x, the blocked
# channels-last weight gradient 1.04-1.45x.
MIN_WORK = 8 * 7 * 7
MIN_MACS = 64 << 20


def avx2_only() -> bool:
    """Whether oneDNN runs AVX2 kernels at most here (its ISA ``avx2``, ``avx2_vnni``...:
    a CPU without AVX-512)."""
    return isa().startswith("avx2")


def _measured(conv):
    """(x, w, y) of ``conv`` where the rules were measured (an AVX2 CPU, float32 kernels,
    ungrouped, undilated 2-D, at least ``MIN_WORK`` y pixels and ``MIN_MACS``
    multiply-adds), else None."""
    t = conv.match.tensors
    x, w, y = t[conv.roles.x], t[conv.roles.w], t[conv.roles.y]
    work = y.dims[0] * _pixels(y)
    if (conv.match.params["conv"].groups != 1 or compute_type(x) != dnnl.DATA_F32
            or len(x.dims) != 4 or any(conv.geometry[1]) or work < MIN_WORK
            or work * math.prod(w.dims[:2]) * math.prod(w.dims[2:]) < MIN_MACS
            or not avx2_only()):
        return None
    return x, w, y


def preference(conv) -> Preference | None:
    """The AVX2 rule ``conv`` (a ``Conv``) meets, or None (also off AVX2, on grouped,
    dilated or 3-D convolutions and on kernels other than float32)."""
    xwy = _measured(conv)
    if xwy is None:
        return None
    x, w, y = xwy
    stride, _, pre, post = conv.geometry
    # an unpadded 1x1 (a padded one has no jit_1x1 kernel: none of these rules measured)
    one = all(d == 1 for d in w.dims[2:]) and not any(pre) and not any(post)
    if all(d == 1 for d in w.dims[2:]) and not one:
        return None
    if x.strides[1] == 1 and y.strides[1] == 1:
        return _channels_last(conv.direction, one, stride, x, w, y)
    if (conv.direction == "wgrad" and one
            and not conv._reducing_1x1_wgrad(conv.match.params["conv"], w)):
        return None     # the plain GEMM is first already (oneDNN's order)
    return _nchw(conv.direction, one, stride, x, w, y)


def channels_last_blocked(conv) -> bool:
    """Whether channels-last activations also get ``+blocked`` candidates (copies in the
    layout oneDNN picks, reordered in and out; elsewhere the reorders cost more than the
    blocked kernels save): on AVX2, a float32 3x3 weight gradient between channel counts
    of at least 64, multiples of 8 (oneDNN's AVX2 block: over 17, 20 or 100 channels the
    padded blocks took 1.06-1.9x the time), into more than 14x14 dy pixels (strided or
    not), where the blocked ``jit:avx2`` took 0.66-0.87x the time of the best
    channels-last candidate (a 7x7 kernel over 64 channels 1.11-1.18x, 8x8 strided dy
    over 64-72 channels at batch 32 1.03-1.09x; 1x1 weight gradients 1.03-1.7x but once,
    fprop 1.1-1.27x, dgrad 1.05-1.14x). Only that kernel is kept on those copies
    (``Conv._left_out``)."""
    xwy = _measured(conv)
    if xwy is None or conv.direction != "wgrad":
        return False
    x, w, y = xwy
    c, k = x.dims[1], y.dims[1]
    return (x.strides[1] == 1 and y.strides[1] == 1 and tuple(w.dims[2:]) == (3, 3)
            and min(c, k) >= 64 and c % 8 == 0 and k % 8 == 0
            and _pixels(y) > 14 * 14)


def _channels_last(direction, one, stride, x, w, y) -> Preference | None:
    strided = any(s != 1 for s in stride)
    c, k = x.dims[1], y.dims[1]
    if direction == "fprop" and one and min(c, k) >= 64:
        return Preference("jit_1x1:avx2", "", (
            "oneDNN's jit_1x1 before its brgconv_1x1 for a float32 1x1 fprop between at "
            "least 64 channels on AVX2 (0.63-0.99x its time at ResNet-50's 1x1 "
            "convolutions, strided ones too)"))
    if direction == "dgrad" and one and min(c, k) >= 64 and _pixels(x) >= 56 * 56:
        return Preference("jit_1x1:avx2", "", (
            "oneDNN's jit_1x1 before its brgconv kernels for a float32 1x1 dgrad between "
            "at least 64 channels into at least 56x56 pixels on AVX2 (0.61-0.98x their "
            "time; into 28x28 and fewer 0.96-1.12x)"))
    if (direction == "dgrad" and c <= 4 and tuple(w.dims[2:]) == (7, 7)
            and tuple(stride) == (2, 2)):
        return Preference("x64:gemm", "", (
            "oneDNN's GEMM convolution before its brgconv_strided for a float32 7x7/2 "
            "dgrad into at most 4 channels (the stem's) on AVX2 (0.58x its time at "
            "ResNet-50's stem; into 8-15 channels 1.0-1.8x)"))
    if direction == "wgrad" and not one:
        if _pixels(y) > 14 * 14:
            if (tuple(w.dims[2:]) == (3, 3) and min(c, k) >= 64
                    and c % 8 == 0 and k % 8 == 0):
                return Preference("jit:avx2", "+blocked", (
                    "oneDNN's blocked layout on its jit:avx2 (activations reordered in and "
                    "out) before the channels-last candidates for a float32 3x3 weight "
                    "gradient between at least 64 channels (multiples of 8) into more than "
                    "14x14 dy pixels, strided or not, on AVX2 "
                    "(0.66-0.87x the time of the best of them at ResNet-50's 3x3 "
                    "convolutions)"))
        elif not strided and min(c, k) >= 256:
            return Preference("x64:gemm", "", (
                "oneDNN's GEMM convolution before its jit kernel for a float32 "
                "unit-stride weight gradient of a kernel larger than 1x1 between at least "
                "256 channels into at most 14x14 dy pixels on AVX2 (0.77-0.96x its time at ResNet-50's "
                "res4 and res5 3x3; over 64-128 channels, or at batch 1, 1.13-2.8x)"))
    return None


def _nchw(direction, one, stride, x, w, y) -> Preference | None:
    strided = any(s != 1 for s in stride)
    c, k = x.dims[1], y.dims[1]
    if (direction == "fprop" and tuple(w.dims[2:]) == (3, 3) and c >= 128 and k >= 16
            and k % 8 == 0):
        return Preference("brgconv:avx2", "+nhwc", (
            "channels-last copies on oneDNN's brgconv (activations reordered in and out) "
            "before the blocked layout for a float32 3x3 fprop from at least 128 channels "
            "into a multiple of 8 from 16 on AVX2 (0.80-0.99x its time at ResNet-50's 3x3 "
            "convolutions over 128-512 channels; over 64, 1.03-1.05x; into 3 or 21 "
            "channels 1.2-1.6x)"))
    if not one or strided:
        return None
    # the blocked jit_1x1 between at least 256 channels on the x side and 64 on the y side,
    # over small images: dgrad into at most 14x14 pixels (0.44-0.58x the GEMM's time; into
    # 28x28 1.06x, from 8-16 channels 1.2-1.8x), fprop over at most 7x7 (0.88x; over 14x14
    # 1.04x, into 5-16 channels 1.04-2.4x)
    side = {"dgrad": 14, "fprop": 7}.get(direction)
    if side is not None and c >= 256 and k >= 64 and _pixels(x) <= side * side:
        ratio = "0.44-0.58x" if direction == "dgrad" else "0.88x"
        return Preference("jit_1x1:avx2", "+blocked", (
            "oneDNN's blocked layout on its jit_1x1 (activations reordered in and out) "
            f"before the plain GEMM for a float32 unit-stride 1x1 {direction} between at "
            f"least 256 channels of at most {side}x{side} pixels and at least 64 on AVX2 "
            f"({ratio} its time at ResNet-50's 1x1 convolutions)"))
    if direction == "wgrad":
        return Preference("x64:gemm", "", (
            "the plain GEMM before oneDNN's blocked jit_1x1 for a float32 unit-stride 1x1 "
            "weight gradient reducing channels over at least 28x28 pixels on AVX2, where "
            "the AVX-512 rule takes the blocked layout (0.77-0.89x its time at ResNet-50's "
            "1x1 convolutions)"))
    return None
