"""Convolutions through oneDNN: ``Conv`` (one problem, its implementations and the
program running one of them) and the RELU_FWD of conv + bias + ReLU: hooks running it
after the primitive, or the primitive's post-ops where they are exact (``relu_post_ops``)."""
from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

from ...._errors import NotSupportedError
from ...._types import ConvolutionMode, DataType, numpy_dtype
from ....patterns import Pattern, conv_roles
from ....runtime import load_onednn
from ... import _tuning
from .. import _batchnorm, _kernels
from ...._layout import packed_strides
from ._avx2 import avx2_only, channels_last_blocked, preference as avx2_preference
from ._avx512 import batch_chunks, preference as avx512_preference
from ._program import (ProgramSpec, any_md, channel_like, channels_last_md, compute_type,
                       decline, dnnl, dnnl_type, is_native, memory_order, packed_md, staged,
                       user_md, widened)

__all__ = ["Conv", "Chunks", "clip_hooks", "conv_hooks", "clips_are_relu", "relu_post_ops",
           "relu_post_ops_exact", "BLOCKED", "CHUNKED", "GUARDED", "RELU", "SMALL_MACS", "SMALL_Y"]

BLOCKED = "+blocked"         # the variant whose activations are in oneDNN's chosen layout
CHUNKED = "+batch/"          # then "<count>": a +blocked variant run in chunks (``Chunks``)
AMX = "_amx"                 # in the ISA of oneDNN's AMX implementations (avx512_core_amx)
GUARDED = "+guarded"         # exact only on finite x: a fallback recomputes y otherwise
RELU = "+relu"               # an implementation computing RELU_FWD as its post-ops
# y elements and multiply-adds below which a ReLU post-op chain is the default over the
# pass after the primitive, except on oneDNN's GEMM convolution (``_post_ops_first``)
SMALL_Y = 1 << 16
SMALL_MACS = 1 << 22


class Chunks(NamedTuple):
    """A ``+blocked`` implementation run on the batch in ``count`` chunks (``CHUNKED``): the
    activations' blocked copies, reordered in and out around the primitive per chunk, are
    one chunk's, small enough to stay in the core's cache between the reorders and the
    kernel; the weights are reordered once (``_avx512.batch_chunks`` has the measurements)."""

    count: int
    pd: object           # the implementation at N / count images
    x_md: object         # the blocked x (dx) and y (dy) descriptors it chose
    y_md: object
    x_user: object       # the user's x and y seen one chunk at a time (dims N / count)
    y_user: object
    byte_steps: tuple    # bytes from one chunk of the user's x, and of y, to the next


class Conv:
    """One convolution problem in oneDNN's terms, and its implementations."""

    def __init__(self, match):
        roles, t = conv_roles(match.pattern), match.tensors
        conv = match.params["conv"]
        if conv.mode != ConvolutionMode.CROSS_CORRELATION:
            raise decline("oneDNN computes cross-correlation only; the graph asks for "
                           f"{conv.mode.name}")
        self.match, self.roles = match, roles
        self.direction = roles.direction.label
        x, w, y = t[roles.x], t[roles.w], t[roles.y]
        self.x_md, self.y_md = user_md(x), user_md(y)
        g = conv.groups
        k, cg = w.dims[0], w.dims[1]
        if g > 1:
            wd = (g, k // g, cg) + tuple(w.dims[2:])
            ws = (w.strides[0] * (k // g),) + tuple(w.strides)
        else:
            wd, ws = tuple(w.dims), tuple(w.strides)
        user_md(w)
        self.w_user = dnnl.MemoryDesc(wd, dnnl_type(w), strides=ws)
        self.w_dims, self.w_type = wd, compute_type(w)
        self.geometry = (tuple(conv.stride), tuple(d - 1 for d in conv.dilation),
                         tuple(conv.pre_padding), tuple(conv.post_padding))
        # spatial axes (0: D or H ...) along which no output window lies inside x: each
        # reaches into the padding (a 3-tap kernel over a 1-pixel-wide image; 4 taps over
        # 4 planes padded 3 before and 1 after at stride 2)
        self.no_inner_window = tuple(
            i for i, (n, r, d, s, p, o) in enumerate(zip(
                x.dims[2:], w.dims[2:], conv.dilation, conv.stride, conv.pre_padding,
                y.dims[2:]))
            if not _inner_window(n, (r - 1) * d + 1, s, p, o))
        self.bias_role = "bias" if "bias" in t else None
        self.bias_md = None
        if self.bias_role:
            bias = t["bias"]
            channel_like(bias)      # declines a bias that is not (1, K, 1, 1)
            # dense: the program hands the primitive a dense vector (the user's where its
            # channels are, else a copy: ``ProgramSpec.channel``); a pd made with the user's
            # stride had oneDNN 3.2's AMX kernels read the copy with that stride (wrong
            # values, tests/oracle/test_onednn_blocked.py's strided-memory cases). A
            # ``widened`` bias: the f32 primitive takes an f32 bias, reordered in the program
            self.bias_md = dnnl.MemoryDesc((bias.dims[1],), compute_type(bias), strides=(1,))
        self.post_ops, self.clips = [], None
        clips = (match.params.get("relu_lower_clip"), match.params.get("relu_upper_clip"))
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
            self.clips = clips
        # the order rule of this CPU's instruction set this problem meets (a
        # _preference.Preference; None: none), and whether its channels-last activations
        # get blocked copies for an AVX2 one: both fixed per problem
        self.preferred = avx2_preference(self) or avx512_preference(self)
        self.avx2_blocked = channels_last_blocked(self)
        self.impls = self._walk()
        self.fused = [False] * len(self.impls)
        if self.clips is not None and clips_are_relu(clips) and relu_post_ops_exact():
            # The same implementations with the ReLU as post-ops, after the ones running it
            # as a pass after the primitive (the heuristic's choice: faster here, as the
            # chain computes an exp per element); benchmarking picks either.
            self.post_ops = relu_post_ops()
            fused = self._walk()
            self.post_ops = []
            self.impls += fused
            self.fused += [True] * len(fused)
        if not self.impls and self._wgrad_no_inner_window():
            axes = "".join("DHW"[3 - len(x.dims[2:]) + i] for i in self.no_inner_window)
            raise decline(f"oneDNN 3.2's weight-gradient kernels gave wrong values where no "
                           f"window of the kernel along {axes} lies inside x, each reaching "
                           f"into the padding (x {tuple(x.dims)}, dw {tuple(w.dims)}), and "
                           "its GEMM one is not offered here")
        if not self.impls:
            raise decline(f"oneDNN has no optimized implementation of conv_{self.direction} "
                           f"for {match.signature} (only its reference one)")

    def _w_any(self, dtype=None):
        return dnnl.MemoryDesc(self.w_dims, self.w_type if dtype is None else dtype,
                               tag=dnnl.FORMAT_TAG_ANY)

    def _first(self, x_md, y_md):
        s, d, pl, pr = self.geometry
        if self.direction == "fprop":
            return dnnl.conv_forward(dnnl.PROP_FORWARD_INFERENCE, x_md, self._w_any(),
                                     self.bias_md, y_md, s, d, pl, pr, self.post_ops)
        hint = dnnl.conv_forward(dnnl.PROP_FORWARD_TRAINING, x_md, self._w_any(), None,
                                 y_md, s, d, pl, pr)
        if self.direction == "dgrad":
            return dnnl.conv_backward_data(x_md, self._w_any(), y_md, s, d, pl, pr, hint)
        # accumulate weight gradients in float32; the reorder to the user's dw converts once
        try:
            return dnnl.conv_backward_weights(x_md, self._w_any(dnnl.DATA_F32), y_md,
                                              s, d, pl, pr, hint)
        except NotSupportedError:
            return dnnl.conv_backward_weights(x_md, self._w_any(), y_md, s, d, pl, pr, hint)

    def _variants(self) -> list:
        """(name suffix, x and y descriptors the primitive takes) per layout variant: the
        user's layout; for activations that are not channels-last also packed
        channels-last copies (``+nhwc``); and for those, and on AVX2 for some
        channels-last weight gradients (``_avx2.channels_last_blocked``), copies in the
        layout oneDNN chooses (``+blocked``: ``format_tag_any``, typically nChw16c; the
        chosen descriptors are queried per implementation in ``_walk``). Copies are
        reordered in and out in the same program. On plain NCHW oneDNN runs its GEMM-based
        implementation (``gemm:jit``); its blocked kernels plus two reorders are faster
        for most shapes, as in PyTorch's NCHW path (``prefers_blocked`` says which)."""
        t = self.match.tensors
        x, y = t[self.roles.x], t[self.roles.y]
        if is_native(x) and is_native(y):
            out = [("", self.x_md, self.y_md)]
            suffix = ""
        else:
            # ``widened`` 16-bit types run on float32 copies (converted by the engine,
            # ``program``); strided (non-packed) activations on dense copies: oneDNN's only
            # implementations of strided activations are its reference ones
            suffix = "+f32" if widened(x) else "+dense"
            out = [(suffix, packed_md(x, compute_type(x)), packed_md(y, compute_type(y)))]
        blocked = (suffix + BLOCKED, any_md(x), any_md(y))
        odd_dgrad = (compute_type(x) == dnnl.DATA_BF16 and self.direction == "dgrad"
                     and self._odd_reduced_channels())
        if self.channels_last():
            # channels-last dy with an odd K: the NaN below, on the user's memory too
            if odd_dgrad:
                return [blocked]
            # elsewhere the blocked layout's reorders cost more than its kernels save,
            # but for some weight gradients on AVX2 (``_avx2.channels_last_blocked``)
            return out + [blocked] if self.avx2_blocked else out
        if odd_dgrad:
            # oneDNN 3.2's bf16 backward-data kernels read dy's channels in pairs: on
            # channels-last copies with an odd K the last channel's inf met the pair's
            # zero weight (inf * 0 = NaN where the reference gives inf); blocked copies
            # pad the channels with zeros, but see ``_walk`` for a blocked kernel on plain
            # memory. (fprop and wgrad over an odd C on channels-last copies keep the
            # reference's inf: tests/oracle/test_onednn_bf16_odd_channels.py)
            return out + [blocked]
        return out + [(suffix + "+nhwc", channels_last_md(x, compute_type(x)),
                       channels_last_md(y, compute_type(y))),
                      blocked]

    def _odd_reduced_channels(self) -> bool:
        """Whether the channels fprop or dgrad sums over, per group, are odd (C / groups
        for fprop, K / groups for dgrad; wgrad sums over images and pixels)."""
        k, cg = self.w_dims[-len(self.match.tensors[self.roles.w].dims):][:2]
        return self.direction != "wgrad" and bool((k if self.direction == "dgrad" else cg) % 2)

    def _summed_side_copied(self, variant) -> bool:
        """Whether ``variant``'s chosen layout copies the activations fprop (x) or dgrad
        (dy) sums over into another layout, rather than reading the user's plain memory as
        it is or a packed plain copy of it (the ``+dense`` one of non-packed memory), which
        a bf16 kernel with an odd channel count reads in pairs (``_variants``;
        tests/oracle/test_onednn_bf16_odd_channels.py's non-packed cases)."""
        role = self.roles.y if self.direction == "dgrad" else self.roles.x
        md = variant[1] if self.direction == "dgrad" else variant[0]
        tensor = self.match.tensors[role]
        return not (md.equals(self.y_md if self.direction == "dgrad" else self.x_md)
                    or md.equals(packed_md(tensor, compute_type(tensor))))

    def _chosen(self, pd) -> tuple:
        """The (x, y) descriptors ``pd`` chose for ``format_tag_any`` activations."""
        qx, qy = {"fprop": (dnnl.QUERY_SRC_MD, dnnl.QUERY_DST_MD),
                  "dgrad": (dnnl.QUERY_DIFF_SRC_MD, dnnl.QUERY_DIFF_DST_MD),
                  "wgrad": (dnnl.QUERY_SRC_MD, dnnl.QUERY_DIFF_DST_MD)}[self.direction]
        return pd.md(qx), pd.md(qy)

    def _walk(self) -> list:
        """(name, PrimitiveDesc at that implementation, workspace bytes, variant) per
        implementation, in oneDNN's order per layout variant; repeated names get ``#2``,
        ``#3``. A ``+blocked`` implementation that chose a layout an earlier variant
        already runs (plain or channels-last) is left out: the same kernel, two more
        reorders."""
        out, seen, layouts, sigs = [], {}, [], []
        x = self.match.tensors[self.roles.x]
        # bf16 over an odd summed channel count: a variant whose kernel reads that side's
        # plain memory is left out below (``_left_out`` has the rest)
        odd_bf16 = compute_type(x) == dnnl.DATA_BF16 and self._odd_reduced_channels()
        for suffix, x_md, y_md in self._variants():
            try:
                pd = self._first(x_md, y_md)
            except NotSupportedError:
                continue
            blocked = suffix.endswith(BLOCKED)
            if not blocked:
                layouts.append((x_md, y_md))
            while True:
                name = pd.impl_name
                variant = (x_md, y_md) if suffix else None
                if blocked:
                    variant = self._chosen(pd)
                    if any(variant[0].equals(a) and variant[1].equals(b) for a, b in layouts):
                        variant = None
                    elif odd_bf16 and not self._summed_side_copied(variant):
                        variant = None      # a plain odd-channel side: the NaN above
                if (variant is not None or not blocked) and not self._left_out(name, suffix):
                    name += suffix
                    chunks = self._chunked(pd) if blocked and variant is not None else None
                    if chunks is not None:
                        variant += (chunks,)
                        name += f"{CHUNKED}{chunks.count}"
                    if self._guarded(name):
                        name += GUARDED
                    # with oneDNN's primitive cache on (the library turns it off at
                    # load: runtime._onednn), 3.2 answered a walk's first steps for
                    # descriptors an earlier plan ran, then restarted it from the top:
                    # the same implementation twice, each listed once here
                    sig = self._signature(pd)
                    if not any(n == name and _same(sig, s) for n, s in sigs):
                        sigs.append((name, sig))
                        seen[name] = seen.get(name, 0) + 1
                        if seen[name] > 1:
                            name = f"{name}#{seen[name]}"
                        impl = pd.clone()
                        out.append((name, impl, self.program(impl, dry=True, variant=variant),
                                    variant))
                if not pd.next_impl():
                    break
        return out

    def _chunked(self, pd) -> Chunks | None:
        """``pd`` (a ``+blocked`` forward or data-gradient implementation) run on the batch
        in ``_avx512.batch_chunks`` chunks, or None: one chunk (or more than a program
        repeats: ``MAX_REPEAT``, a batch of millions of images), a 16-bit type oneDNN
        computes in float32 copies (``widened``), the AMX jit kernel (``_guarded``), or no
        implementation of that name reading the same weights layout at N / count."""
        count = int(batch_chunks(self, pd))
        t = self.match.tensors
        x, y = t[self.roles.x], t[self.roles.y]
        if (not 1 < count <= dnnl.MAX_REPEAT or self.direction == "wgrad"
                or x.dims[0] % count or widened(x) or widened(y)
                or self._guarded(pd.impl_name)):
            return None
        def dims(tensor):
            return (tensor.dims[0] // count,) + tuple(tensor.dims[1:])
        anys = [dnnl.MemoryDesc(dims(a), compute_type(a), tag=dnnl.FORMAT_TAG_ANY)
                for a in (x, y)]
        try:
            chunk = self._first(*anys)
        except NotSupportedError:
            return None
        w_md = pd.md(dnnl.QUERY_WEIGHTS_MD)
        while not (chunk.impl_name == pd.impl_name
                   and chunk.md(dnnl.QUERY_WEIGHTS_MD).equals(w_md)):
            if not chunk.next_impl():
                return None
        users = [dnnl.MemoryDesc(dims(a), dnnl_type(a), strides=tuple(a.strides))
                 for a in (x, y)]
        steps = tuple(a.dims[0] // count * a.strides[0] * numpy_dtype(a.data_type).itemsize
                      for a in (x, y))
        return Chunks(count, chunk.clone(), *self._chosen(chunk), *users, steps)

    def _left_out(self, name: str, suffix: str) -> bool:
        """Whether oneDNN's implementation ``name``, on the layout variant ``suffix``, is not
        a candidate for this problem: its reference implementations, and oneDNN 3.2's
        kernels that gave wrong values or wrote past their buffers here (each rule names
        its test)."""
        if name.startswith("ref:"):
            # 100-5000x slower than CPU_ENGINE, and in 3.2 wrong for a strided 3-D
            # destination with bias (tests/oracle, CONV_FPROP_BIAS_RELU)
            return True
        if suffix.endswith(BLOCKED) and self.avx2_blocked:
            # blocked copies of channels-last activations are there for one kernel only
            return self.preferred is None or not self.preferred.matches(name + suffix)
        amx, d = AMX in name, self.direction
        x = self.match.tensors[self.roles.x]
        channels_last = x.strides[1] == 1 or suffix.endswith("+nhwc")
        if compute_type(x) == dnnl.DATA_BF16 and self._odd_reduced_channels():
            # bf16 over an odd summed channel count (``_odd_reduced_channels``): on
            # channels-last memory the GEMM convolution met an inf with a zero weight (NaN;
            # tests/oracle/test_onednn_bf16_odd_channels.py) and the AVX-512 1x1 kernel
            # (jit_bf16_1x1) gave wrong values from finite inputs at some pixel counts
            # (tests/oracle/test_onednn_bf16_odd_1x1.py); the AVX-512 brgconv kernels
            # (brgconv, brgconv_1x1, brgconv_strided on avx512_core_bf16: fprop over C = 1,
            # 3, 5, 17, strided dgrad over K = 3, 5, 17) gave the same NaN on any layout.
            if channels_last and name.startswith(("x64:gemm", "jit_bf16_1x1")):
                return True
            if "brg" in name and not amx:
                return True
        if d == "fprop" and amx and name.startswith("jit_1x1:"):
            # the AMX jit 1x1 kernel wrote a whole tile past the end of y at 36 pixels an
            # image (heap corruption: tests/oracle/test_onednn_amx_1x1_overrun.py)
            return True
        stride, dilation = self.geometry[0], self.geometry[1]
        if d == "wgrad" and amx and name.startswith("jit:") and any(dilation):
            # the AMX jit weight gradient, dilated along H (D or H in 3-D) over C above 32
            # and not a multiple of 16, gave wrong values from finite inputs
            # (tests/oracle/test_onednn_amx_wgrad_dilation.py); left out at any dilation
            return True
        if (name.startswith("x64:gemm") and self.w_dims[:2] == (1, 1)
                and not self._one_by_one()):
            # the GEMM convolution from one channel to one with a kernel larger than 1x1
            # wrote past dw and its scratchpad in a weight gradient (heap corruption) and gave
            # wrong float32 fprop and dgrad values on NCHW
            # (tests/oracle/test_onednn_gemm_one_channel.py)
            return True
        if self._wgrad_no_inner_window() and not name.startswith("x64:gemm"):
            # weight gradients with an axis along which every window of the kernel reaches
            # into the padding (a kernel wider than x; at most one window from each side):
            # oneDNN 3.2's bf16 jit kernel read workspace bytes it had not written (wrong
            # dw, NaN after a NaN-filled workspace), and its float32 one left dw elements
            # unwritten and read past the end of x (3-D, grouped: a segfault at a guard
            # page) or gave a wrong tap (3-D channels-last, along D); the GEMM convolution
            # was exact in all of 2,500 such cases fuzzed (3,700 runs; bar 3 that were
            # the primitive cache's fault: runtime._onednn)
            # (tests/oracle/test_onednn_wgrad_padded_windows.py)
            return True
        if (d == "wgrad" and name.startswith(("jit_1x1:", "jit_bf16_1x1:"))
                and self.w_dims[-len(stride) - 1] < 16 and any(st > 1 for st in stride)):
            # the AVX 1x1 kernels in a strided weight gradient over fewer than 16 channels
            # (C / groups): the float32 one, the default for an NHWC 1x1/2 over C = 7, 8 or
            # 12, wrote 48-280 bytes past its scratchpad, the workspace (heap corruption:
            # tests/oracle/test_onednn_strided_1x1_wgrad_overrun.py)
            return True
        return False

    def _wgrad_no_inner_window(self) -> bool:
        return self.direction == "wgrad" and bool(self.no_inner_window)

    def _guarded(self, name: str) -> bool:
        """Whether candidate ``name`` runs guarded (``GUARDED``): oneDNN 3.2's AMX jit
        forward kernel (jit:avx512_core_amx) lets a NaN or inf in x reach outputs whose
        windows do not hold it (NaN where the reference has inf or 0, at any C:
        tests/unit/providers/test_onednn_engine.py's special values; over an odd C, an
        inf next to the odd channel), and is exact on finite x (past x's end too: it reads
        nothing there). ``conv_hooks`` checks x after it."""
        return self.direction == "fprop" and name.startswith("jit:") and AMX in name

    def _signature(self, pd) -> tuple:
        """What tells two implementations of one walk apart beyond their name: the x, w
        and y descriptors ``pd`` runs on and its scratchpad bytes."""
        w_query = (dnnl.QUERY_DIFF_WEIGHTS_MD if self.direction == "wgrad"
                   else dnnl.QUERY_WEIGHTS_MD)
        return self._chosen(pd) + (pd.md(w_query), pd.scratchpad_size)

    def prefers_blocked(self) -> bool:
        """Whether the default choice (no benchmarking) is the ``+blocked`` variant, for
        activations that are not channels-last: where oneDNN's blocked kernels plus the
        two reorders beat its ``gemm:jit`` on the user's plain layout. Measured here
        (AVX-512 with bf16, oneDNN 3.2, ResNet-50 shapes at batch 8, f32 and bf16,
        interleaved, one thread: blocked / plain time): kernels larger than 1x1 0.5-0.9
        in all three directions, strided and depthwise ones included (depthwise dgrad
        and wgrad 0.06-0.2); but 1x1 kernels 0.9-1.6 (plain NCHW is one GEMM there) and
        the stem's dgrad (7x7/2 into C = 3) 2.4-5. Blocked layouts pad channels to the
        block with zeros in activations and weights alike, so no padded weight meets a
        real input (the odd-C inf * 0 = NaN of the channels-last bf16 kernels:
        tests/oracle/test_onednn_blocked.py).

        One 1x1 exception: a float32 weight gradient at unit stride that reduces channels
        (K <= C) over at least 28x28 pixels, where the blocked ``jit_1x1`` took 0.79-0.94x
        the GEMM's time (ResNet-50's 64>64 and 256>64 at 56x56 and 512>128 at 28x28, batch
        8 and 32, two threads; PyTorch's NCHW path takes it for every 1x1). Widening
        (K > C) or over 14x14 it was 0.96-1.14x, and in bfloat16 1.04-1.16x. Not for
        HALF I/O either (computed on float32 copies; 0.94-1.2x at 64>64 and 256>64, 56x56,
        batch 8, measured while HALF still converted through oneDNN's reorders: not
        re-measured since), nor a padded 1x1: no blocked kernel takes it (``jit_1x1`` takes no
        padding), and its channels-last copies took 2.8x the plain GEMM's time.

        Two strided 1x1 exceptions (unpadded, ungrouped; measured on ResNet-50's 256>512,
        512>1024 and 1024>2048 downsampling convolutions at batch 8 and 32, two threads,
        benchmarking's timings): a bfloat16 fprop (conv + bias + ReLU too), where the
        blocked kernels took 0.69-0.95x the GEMM's time (1.02x once at 256>512, batch 32);
        and a dgrad whose dy has at most 14x14 pixels in bfloat16 (0.52-0.91x) or 7x7 in
        float32 (0.66-0.79x; at 14x14 it was 1.03-1.06x, at 28x28 1.06-1.18x in either
        type). Strided 1x1 weight gradients and float32 fprop stay plain (0.95-1.36x).
        On an AVX2 CPU without AVX-512 (oneDNN's ISA ``avx2*``), where oneDNN's first
        blocked kernel is its ``jit_1x1`` and x has at least 256 channels, a float32 fprop
        takes the blocked layout too (0.81-0.86x at 512>1024 and 1024>2048, 0.97-1.02x at
        256>512; PyTorch's NCHW path runs ``jit_1x1:avx2`` there), and a float32 dgrad
        from 14x14 dy pixels (0.75-0.78x; 28x28 1.12-1.17x; 2-core AMD EPYC, batch 8 and
        32, benchmarking's timings). Not with fewer channels (24>48 and 40>80 at 56x56 took
        1.5-1.6x the GEMM's time, 100>200 at 28x28 1.24x; 64>128 0.6x; 256>16 1.22-1.6x,
        256>32 0.85x) nor where odd pixel counts leave only the generic ``jit`` kernel
        (1.8-4.4x; so neither for the 7x7 float32 dgrad, 1.8-3.6x there).

        None of this where oneDNN offers an AMX implementation (``_amx``): there the
        blocked layout runs bfloat16 on the AVX-512 kernels, and ``candidates`` puts the
        AMX ones first for kernels larger than 1x1; a 1x1 keeps the plain GEMM (itself on
        AMX), which took 0.75-0.95x the AMX kernels' time on channels-last copies and
        0.35-0.7x the blocked kernels' (ResNet-50's 256>64 and strided 256>512 and
        1024>2048 1x1 at batch 8, two threads, interleaved)."""
        if self._amx():
            return False
        conv = self.match.params["conv"]
        w = self.match.tensors[self.roles.w]
        if self._one_by_one():
            return self._reducing_1x1_wgrad(conv, w) or self._strided_1x1(conv)
        if (self.direction == "dgrad" and conv.groups == 1 and w.dims[1] < 16
                and any(s != 1 for s in conv.stride)):
            return False
        return True

    def _amx(self) -> bool:
        """Whether oneDNN offers an AMX implementation of this problem (bfloat16 on a CPU
        with AMX: oneDNN 3.2 names its ISA ``avx512_core_amx``)."""
        return any(AMX in name for name, *_ in self.impls)

    def _amx_first(self) -> bool:
        """Whether the default choice is an AMX implementation: oneDNN offers one and the
        kernel is larger than 1x1. Those read channels-last memory only (NCHW activations
        take the ``+nhwc`` copies); on the blocked layout oneDNN runs bfloat16 on its
        AVX-512 kernels, which took 3.5-5x the time of the AMX ones on channels-last
        copies, reorders included, at ResNet-50's 3x3 convolutions, and the plain GEMM
        2-3.5x (batch 8, NCHW, two threads, benchmarking's timings). The stem's dgrad
        too: 2.1x on the GEMM."""
        return self._amx() and not self._one_by_one()

    def channels_last(self) -> bool:
        """Whether the user's activations are channels-last (x and y)."""
        t = self.match.tensors
        return t[self.roles.x].strides[1] == 1 and t[self.roles.y].strides[1] == 1

    def _one_by_one(self) -> bool:
        """Whether the kernel is 1x1 (1x1x1; 1 in 1-D)."""
        return all(d == 1 for d in self.match.tensors[self.roles.w].dims[2:])

    def _reducing_1x1_wgrad(self, conv, w) -> bool:
        """``prefers_blocked``'s 1x1 exception (FLOAT unit-stride unpadded wgrad, K <= C,
        at least 784 input pixels, or voxels, per image)."""
        x = self.match.tensors[self.roles.x]
        pixels = 1
        for d in x.dims[2:]:
            pixels *= d
        return (self.direction == "wgrad" and x.data_type == DataType.FLOAT
                and conv.groups == 1 and all(s == 1 for s in conv.stride)
                and not any(conv.pre_padding) and not any(conv.post_padding)
                and w.dims[0] <= w.dims[1] and pixels >= 784)

    def _strided_1x1(self, conv) -> bool:
        """``prefers_blocked``'s strided 1x1 exceptions (unpadded, ungrouped):
        ``_strided_1x1_rule`` names one."""
        return self._strided_1x1_rule(conv) is not None

    def _strided_1x1_rule(self, conv) -> str | None:
        """The strided 1x1 exception this problem meets, in words (None: none): a BFLOAT16
        fprop; a dgrad into at least 16 channels whose dy has at most 14x14 pixels (or
        voxels) in BFLOAT16, 7x7 in FLOAT (not on oneDNN's generic ``jit`` kernel); on an
        AVX2 CPU, where oneDNN's first blocked kernel is ``jit_1x1``, x has at least 256
        channels and y at least 32, a FLOAT fprop and a FLOAT dgrad from at most 14x14 dy
        pixels."""
        if (conv.groups != 1 or all(s == 1 for s in conv.stride)
                or any(conv.pre_padding) or any(conv.post_padding)):
            return None
        x = self.match.tensors[self.roles.x]
        # a widened BFLOAT16 runs float32 kernels on copies, as HALF: neither rule measured
        x_type = None if widened(x) else x.data_type
        k = self.match.tensors[self.roles.w].dims[0]
        avx2 = (x_type == DataType.FLOAT and x.dims[1] >= 256 and k >= 32 and avx2_only()
                and self._first_blocked().startswith("jit_1x1:"))
        on_avx2 = ("from at least 256 channels into at least 32 on an AVX2 CPU (oneDNN's "
                   "jit_1x1 kernel)")
        if self.direction == "fprop":
            return ("bfloat16 fprop" if x_type == DataType.BFLOAT16 else
                    f"float32 fprop {on_avx2}" if avx2 else None)
        if (self.direction != "dgrad" or x_type not in (DataType.BFLOAT16, DataType.FLOAT)
                or self.match.tensors[self.roles.w].dims[1] < 16):
            return None    # (into fewer than 16 channels: as the stem's dgrad, below)
        pixels = math.prod(self.match.tensors[self.roles.y].dims[2:])
        if x_type == DataType.BFLOAT16:
            return "bfloat16 dgrad with at most 14x14 dy pixels" if pixels <= 196 else None
        if pixels <= 49 and not self._first_blocked().startswith("jit:"):
            # (not on oneDNN's generic blocked kernel, all that odd dx sizes leave: 1.8-3.6x
            # the GEMM's time on AVX2)
            return "float32 dgrad with at most 7x7 dy pixels"
        return (f"float32 dgrad with at most 14x14 dy pixels {on_avx2}"
                if avx2 and pixels <= 196 else None)

    def _first_blocked(self) -> str:
        """The name of oneDNN's first ``+blocked`` implementation here ("" where none)."""
        return next((name for name, *_ in self.impls if BLOCKED in name), "")

    def rule(self, name) -> str | None:
        """``plan.algorithm``'s reason for the default choice ``name`` (None: oneDNN's
        own order)."""
        if name.endswith(RELU):
            base = self.rule(name[:-len(RELU)])
            if not self._small():
                return base     # the first to fit the workspace limit, in the usual order
            why = (f"the ReLU as the primitive's post-ops for a y of fewer than {SMALL_Y} "
                   f"elements and fewer than {SMALL_MACS} multiply-adds (a pass after it "
                   "costs more than its work there)")
            return why if base is None else f"{base}; {why}"
        if name.endswith(GUARDED):
            base = self.rule(name[:-len(GUARDED)])
            why = ("guarded: x is checked for NaN and inf after it, and where it holds one "
                   "the first unguarded candidate recomputes y (oneDNN 3.2's AMX jit "
                   "forward kernel spreads them to outputs whose windows do not hold them)")
            return why if base is None else f"{base}; {why}"
        if CHUNKED in name:
            head, _, count = name.rpartition(CHUNKED)
            base, count = self.rule(head), int(count.partition("#")[0])
            n = self.match.tensors[self.roles.x].dims[0]
            why = (f"the batch in {count} chunks of {n // count} images (each chunk's blocked "
                   "copies stay in the cores' caches between the reorders and the kernel; "
                   "the weights are reordered once)")
            return why if base is None else f"{base}; {why}"
        if (self.preferred is not None and self.preferred.matches(name)
                and self._moved_by_rule(name)):
            return self.preferred.why
        if AMX in name and self._amx_first() and ("+nhwc" in name or BLOCKED in name):
            return ("oneDNN's AMX implementations first, on copies of the activations "
                    "(reordered in and out): on the blocked layout it runs bfloat16 on "
                    "AVX-512 kernels")
        if BLOCKED in name and self._one_by_one():
            why = self._strided_1x1_rule(self.match.params["conv"])
            if why is not None:
                return ("oneDNN's blocked layout (activations reordered in and out) before "
                        f"the user's plain layout for a strided unpadded 1x1 {why}")
            return ("oneDNN's blocked layout (activations reordered in and out) before the "
                    "user's plain layout for a float32 unit-stride unpadded 1x1 weight "
                    "gradient reducing channels (K <= C) over at least 28x28 pixels")
        if BLOCKED in name:
            # the exception of ``prefers_blocked`` is named where it could have applied
            unless = (" (not a strided dgrad into fewer than 16 channels)"
                      if self.direction == "dgrad" else "")
            return ("oneDNN's blocked layout (activations reordered in and out) before the "
                    f"user's plain layout for a kernel larger than 1x1{unless}")
        if "+nhwc" in name and self.prefers_blocked() and not self._one_by_one():
            return ("channels-last copies (activations reordered in and out) before the "
                    "user's plain layout where the blocked layout is preferred (a kernel "
                    "larger than 1x1) but no blocked kernel applies")
        return None

    def candidates(self) -> list:
        """One per implementation (id: the index in ``impls``), best first: oneDNN's order,
        with its AMX ones first where ``_amx_first``, else the ``+blocked`` ones first
        where ``prefers_blocked``, and on an AVX2 CPU or an AVX-512 one without AMX the
        implementation its rule names first (``preferred``: ``_avx2.preference``,
        ``_avx512.preference``) (the default choice is the first that fits the
        workspace limit; benchmarking keeps another only if it
        beats that one by its margin); one computing the ReLU as post-ops ends ``+relu``;
        a guarded one (``GUARDED``) has its fallback's workspace too."""
        return self._guard(self._ordered())

    def _moved_by_rule(self, name) -> bool:
        """Whether ``name`` is first only by the instruction set's rule (``preferred``,
        ``_ordered``): without it another candidate would be."""
        plain = self._ordered(rules=False)
        return bool(plain) and plain[0].name != name

    def _ordered(self, rules=True) -> list:
        """``candidates`` before ``_guard`` (``rules``: with the move of ``preferred``,
        ``_avx2.preference`` or ``_avx512.preference``)."""
        cands = [_tuning.Candidate(name + (RELU if fused else ""), i, ws)
                 for i, ((name, _, ws, _v), fused) in enumerate(zip(self.impls, self.fused))]
        if self._amx_first():
            # stable: oneDNN's order kept among the AMX ones and among the others
            cands.sort(key=lambda c: AMX not in c.name)
        elif self.prefers_blocked() and not self.channels_last():
            # blocked copies, else channels-last ones (the bf16 stem: the blocked kernels
            # there read its plain odd-channel x, ``_walk``; on NHWC copies jit_bf16 took
            # 0.7x gemm:jit's time), before the user's plain layout; stable: oneDNN's
            # order kept within each; a 1x1 without a blocked kernel keeps its plain GEMM
            # (a padded 1x1 on channels-last copies took 2.8x its time)
            one = self._one_by_one()
            cands.sort(key=lambda c: (BLOCKED not in c.name, one or "+nhwc" not in c.name))
        if rules and self.preferred is not None:
            # stable: the preferred implementation (and its +relu twin) first
            cands.sort(key=lambda c: not self.preferred.matches(c.name))
        if any(self.fused) and self._small():
            cands = _post_ops_first(cands)
        return cands

    def _guard(self, cands) -> list:
        """``cands`` with each guarded one (``GUARDED``) given its fallback's workspace
        too, as its plan runs both where x is not finite (``conv_hooks``); one without a
        fallback is dropped."""
        out = []
        for c in cands:
            if GUARDED in c.name:
                fb = self.fallback(c, cands)
                if fb is None:
                    continue
                c = _tuning.Candidate(c.name, c.id, max(c.workspace_bytes, fb.workspace_bytes))
            out.append(c)
        return out

    def fallback(self, cand, cands=None):
        """The candidate recomputing y where a guarded ``cand``'s x holds a NaN or inf: the
        first of ``cands`` (default: every candidate, in order) that is not guarded and
        computes the ReLU where ``cand`` does (after the primitive, or as its post-ops);
        None if there is none."""
        cands = self._ordered() if cands is None else cands
        return next((c for c in cands
                     if GUARDED not in c.name and self.fused[c.id] == self.fused[cand.id]),
                    None)

    def _small(self) -> bool:
        """Whether y has fewer than ``SMALL_Y`` elements and the convolution fewer than
        ``SMALL_MACS`` multiply-adds (``_post_ops_first``)."""
        y = math.prod(self.match.tensors[self.roles.y].dims)
        # C / groups x the kernel's taps: multiply-adds per y element
        taps = math.prod(self.match.tensors[self.roles.w].dims[1:])
        return y < SMALL_Y and y * taps < SMALL_MACS

    def fuses_relu(self, pd) -> bool:
        """Whether implementation ``pd`` (one of ``impls``) computes the ReLU itself."""
        return any(f and p is pd for (_, p, _, _), f in zip(self.impls, self.fused))

    def program(self, pd, *, dry=False, frozen_w=None, variant=None):
        """(Program, its ProgramSpec) running implementation ``pd``; ``dry``: only the
        workspace bytes it needs (no primitive is created). ``frozen_w``: an array already
        holding the weights in ``pd``'s layout (the reorder is then not part of it).
        ``variant``: (x, y) descriptors the primitive takes instead of the user's, whose
        activations are reordered in (inputs) and out (the output) around it.

        ``widened`` types (HALF; BFLOAT16 where oneDNN has no bf16 convolution kernels):
        the primitive and every reorder run float32; the user's 16-bit x, w, y (dy, dx,
        dw; each one that is widened, per tensor) are converted into and out of float32
        copies packed in the user's layout
        (``ProgramSpec.converted``, workspace pieces ``f32:<role>``) by the plan's hooks
        with ``_kernels.convert`` (exact, round to nearest-even, on oneDNN's OpenMP team):
        oneDNN 3.2 runs f16 <-> f32 reorders in its generic ``simple:any`` here (no
        AVX512-FP16), ~36 ms per 8x64x56x56 tensor, 10x the convolution; the conversion
        takes 0.3-0.5 ms. A widened bias (K values) keeps its reorder."""
        roles = [self.roles.x, self.roles.w, self.roles.y] + ([self.bias_role] if self.bias_role else [])
        spec = ProgramSpec(roles, dry=dry)
        t = self.match.tensors
        chunks = variant[2] if variant is not None and len(variant) > 2 else None
        if chunks is not None:
            # the primitive and the activations' copies are one chunk's; the user's x and
            # y are seen one chunk at a time, advanced by the program (``Chunks``)
            pd, variant = chunks.pd, (chunks.x_md, chunks.y_md)
        x = x_user = spec.array(self.roles.x, chunks.x_user if chunks else self.x_md)
        y = y_user = spec.array(self.roles.y, chunks.y_user if chunks else self.y_md)
        w_user = spec.array(self.roles.w, self.w_user)
        # where the user's memory is ``widened``, the primitive's side of each array is a
        # float32 copy packed in the user's order, converted in and out around the
        # program (``ProgramSpec.converted``); reorders run float32 to float32 only
        # per tensor: each may have its own data type (a FLOAT w with HALF x and y)
        hx, hy, hw = (widened(t[r]) for r in (self.roles.x, self.roles.y, self.roles.w))
        x_src_md = packed_md(t[self.roles.x], dnnl.DATA_F32) if hx else spec.mems[x_user][0]
        y_src_md = packed_md(t[self.roles.y], dnnl.DATA_F32) if hy else spec.mems[y_user][0]
        w_src_md = self._w_f32() if hw else self.w_user
        w_query = dnnl.QUERY_DIFF_WEIGHTS_MD if self.direction == "wgrad" else dnnl.QUERY_WEIGHTS_MD
        w_md = pd.md(w_query)
        plain = w_md.equals(w_src_md)
        if self.direction != "wgrad":
            # the weights first: a batch in chunks reorders them once, before its repeat
            if frozen_w is not None:
                spec.mems.append((w_md, dnnl.MEM_OWNED, frozen_w))
                w = len(spec.mems) - 1
            else:
                w_src = (spec.converted(self.roles.w, t[self.roles.w], w_src_md)
                         if hw else w_user)
                if plain:
                    w = w_src
                else:
                    w = spec.scratch(w_md, "w")
                    spec.step(dnnl.reorder(w_src_md, w_md), [(dnnl.ARG_SRC, w_src),
                                                             (dnnl.ARG_DST, w)])
            b = self._bias(spec) if self.direction == "fprop" and self.bias_role else None
        first = len(spec.steps)
        outputs = []
        if variant is not None:
            x_md, y_md = variant
            out_x, out_y = self.direction == "dgrad", self.direction == "fprop"
            x_src = (spec.converted(self.roles.x, t[self.roles.x], x_src_md, output=out_x)
                     if hx else x_user)
            y_src = (spec.converted(self.roles.y, t[self.roles.y], y_src_md, output=out_y)
                     if hy else y_user)
            # a side whose chosen layout is the user's memory (or its float32 copy) runs on
            # it (the stem's blocked kernels read a plain 3-channel x)
            x = x_src if x_md.equals(x_src_md) else spec.scratch(x_md)
            y = y_src if y_md.equals(y_src_md) else spec.scratch(y_md)
            ins = {"fprop": ((x_src_md, x_md, x_src, x),),
                   "dgrad": ((y_src_md, y_md, y_src, y),),
                   "wgrad": ((x_src_md, x_md, x_src, x), (y_src_md, y_md, y_src, y))}
            for src_md, dst_md, src, dst in ins[self.direction]:
                if dst != src:
                    spec.step(dnnl.reorder(src_md, dst_md), [(dnnl.ARG_SRC, src),
                                                             (dnnl.ARG_DST, dst)])
            if out_y and y != y_src:
                outputs.append((y_md, y_src_md, y, y_src))
            elif out_x and x != x_src:
                outputs.append((x_md, x_src_md, x, x_src))
        if self.direction == "wgrad":
            w_src = (spec.converted(self.roles.w, t[self.roles.w], w_src_md, output=True)
                     if hw else w_user)
            w = w_src if plain else spec.scratch(w_md)
            spec.step(pd, [(dnnl.ARG_SRC, x), (dnnl.ARG_DIFF_DST, y), (dnnl.ARG_DIFF_WEIGHTS, w)])
            if not plain:
                spec.step(dnnl.reorder(w_md, w_src_md), [(dnnl.ARG_SRC, w),
                                                         (dnnl.ARG_DST, w_src)])
        else:
            if self.direction == "fprop":
                args = [(dnnl.ARG_SRC, x), (dnnl.ARG_WEIGHTS, w), (dnnl.ARG_DST, y)]
                if b is not None:
                    args.append((dnnl.ARG_BIAS, b))
            else:
                args = [(dnnl.ARG_DIFF_DST, y), (dnnl.ARG_WEIGHTS, w), (dnnl.ARG_DIFF_SRC, x)]
            spec.step(pd, args)
        for src_md, dst_md, src, dst in outputs:
            spec.step(dnnl.reorder(src_md, dst_md), [(dnnl.ARG_SRC, src), (dnnl.ARG_DST, dst)])
        if dry:
            return spec.ws.size
        if chunks is None:
            return spec.program(), spec
        byte_steps = [0] * len(spec.mems)
        byte_steps[x_user], byte_steps[y_user] = chunks.byte_steps
        return spec.program(repeat=(first, len(spec.steps), chunks.count, byte_steps)), spec

    def _bias(self, spec) -> int:
        """The memory of the bias the primitive reads: the user's (K,) vector, a dense copy
        of it (``ProgramSpec.channel``), or for a ``widened`` bias its float32 reorder (a
        step before the batch's chunks: it runs once)."""
        bias = self.match.tensors[self.bias_role]
        if not widened(bias):
            return spec.channel(self.bias_role, bias, dtype="own")
        b_user = spec.array(self.bias_role, channel_like(bias))
        b = spec.scratch(self.bias_md)
        spec.step(dnnl.reorder(channel_like(bias), self.bias_md),
                  [(dnnl.ARG_SRC, b_user), (dnnl.ARG_DST, b)])
        return b

    def _w_f32(self):
        """The float32 copy of widened weights: packed in the user's memory order, seen with
        the primitive's dims (``w_dims``: (G, K/G, C/G, ...) for groups)."""
        w = self.match.tensors[self.roles.w]
        s = packed_strides(tuple(w.dims), memory_order(w))
        g = len(self.w_dims) - len(w.dims)
        strides = ((s[0] * self.w_dims[1],) if g else ()) + s
        return dnnl.MemoryDesc(self.w_dims, dnnl.DATA_F32, strides=strides)

    def weights_layout(self, pd):
        """The blocked weights descriptor ``pd`` reads, or None where it reads the user's."""
        if self.direction == "wgrad":
            return None
        w_md = pd.md(dnnl.QUERY_WEIGHTS_MD)
        return None if w_md.equals(self.w_user) else w_md


def _inner_window(size: int, extent: int, stride: int, pre: int, outputs: int) -> bool:
    """Whether one of ``outputs`` windows of ``extent`` elements (the dilated kernel), at
    ``stride`` from ``-pre``, lies inside ``size`` elements: output o covers
    [o * stride - pre, o * stride - pre + extent - 1]. The first such o is
    ceil(pre / stride)."""
    o = -(-pre // stride)
    return o < outputs and o * stride - pre + extent <= size


def _same(a, b) -> bool:
    """Whether two ``Conv._signature`` tuples are equal (descriptors by ``equals``)."""
    return all(x.equals(y) for x, y in zip(a[:3], b[:3])) and a[3] == b[3]


# RELU_FWD without clips as oneDNN post-ops on the primitive's float32 result v: elu with
# alpha 0 (v > 0 ? v : 0 * (exp(v) - 1)), then linear 1, 0 (+0.0 turns -0.0 into +0.0).
# Measured on oneDNN 3.2 through every implementation it offers for conv + bias (brgconv,
# jit, gemm; avx512_core, avx2, sse41; f32, bf16 and f16-via-f32; 2-D and 3-D): equal to
# max(v, 0) + 0.0 with NaN kept, -inf -> +0.0, +inf -> +inf (tests/unit/providers/
# test_onednn_engine.py, test_conv_bias_relu_post_ops_exact_in_every_implementation).
# Why this chain: oneDNN's jit exp clamps its input with vminps first, so exp(NaN) is +inf
# and 0 * (exp(NaN) - 1) is NaN (its reference exp keeps NaN); 0 * (exp(-inf) - 1) = -0.0.
# Its relu is vmaxps in the jit kernels (NaN -> +0.0) and 0 * v in the reference ones
# (-inf -> NaN, negatives -> -0.0); clip / clip_v2 and the binary max / min post-ops are
# vmaxps / vminps with the bound as second operand, which returns the bound for NaN: no
# chain of them keeps NaN, so a clipped ReLU (and any oneDNN version not measured) runs
# after the primitive. The chain costs an exp per element: on a 2-core avx512_core_bf16
# CPU (one thread, CPU time, ResNet-50 shapes at batch 8) it was 0-13 % slower than the
# vectorised pass after brgconv / jit, 0-39 % after the bfloat16 GEMM convolution and
# 1.4-4.1x after the float32 one, which computes post-ops outside its jit code
# (bench/bench_conv_relu.py): both are candidates, the pass first.
_EXACT_VERSIONS = ((3, 2),)


def _post_ops_first(cands) -> list:
    """``cands`` with each implementation's post-op twin (``+relu``) just before it, but
    not the GEMM convolution's (``gemm`` in the name: its post-ops run outside its jit
    code), for a problem of fewer than SMALL_Y y elements and SMALL_MACS multiply-adds.
    There the pass after the primitive runs on the calling thread, and its call costs more
    than its work: on the 2-core CPU above (benchmarking's timings of whole plans, batch
    1: 1x1 8>8 and 3x3 8>8 at 8x8, 3x3 64>64 at 8x8, 1x1 64>64 at 14x14; 4 K-2.4 M
    multiply-adds) the twin took 0.68-0.97x the time in float32 and 0.62-1.01x in
    bfloat16, NHWC and NCHW; the GEMM's 1.2-6.5x. From 9.4 M multiply-adds up (3x3 at 64
    to 512 channels) it was 0.96-1.08x, and 1.48x on ResNet-50's 3x3 512>512 at 7x7
    (brgconv, float32); from 8 x 64 x 14 x 14 y elements up the pass runs on the OpenMP
    team and the chain was 1.0-1.3x (see above)."""
    twins = {c.name[:-len(RELU)]: c for c in cands if c.name.endswith(RELU)}
    out = []
    for c in cands:
        if c.name.endswith(RELU):
            continue
        twin = twins.get(c.name)
        if twin is not None and "gemm" not in c.name:
            out.append(twin)
        out.append(c)
    return out + [c for c in cands if c.name.endswith(RELU) and c not in out]


def relu_post_ops() -> list:
    """RELU_FWD without clips as (eltwise algorithm, alpha, beta) post-ops (see above)."""
    return [(dnnl.ELTWISE_ELU, 0.0, 0.0), (dnnl.ELTWISE_LINEAR, 1.0, 0.0)]


def clips_are_relu(clips) -> bool:
    """Whether RELU_FWD ``clips`` (lower, upper; None = absent) compute max(v, 0)."""
    lower, upper = clips
    return upper is None and (lower is None or float(lower) == 0.0)


def relu_post_ops_exact() -> bool:
    """Whether ``relu_post_ops()`` compute RELU_FWD exactly on the loaded oneDNN: only the
    versions it was measured on (``_EXACT_VERSIONS``)."""
    state = load_onednn()
    return state.ok and tuple(state.version[:2]) in _EXACT_VERSIONS


_RELU_KINDS = {DataType.FLOAT: _kernels.BIAS_RELU_KINDS["float32"],
               DataType.BFLOAT16: _kernels.BIAS_RELU_KINDS["bfloat16"],
               DataType.HALF: _kernels.BIAS_RELU_KINDS["float16"]}


def conv_hooks(conv, cand):
    """(hooks, workspace bytes) of the plan running candidate ``cand``: ``clip_hooks``,
    and for a guarded one (``GUARDED``) also a check of x after the primitive
    (``_kernels.nonfinite``: 0.13 ms for the ResNet-50 stem's 2.4 MB bf16 x at batch 8);
    where x holds a NaN or inf, the fallback's program (``Conv.fallback``, made here, at
    build) recomputes y before the ReLU pass, with its own staged host copies
    (``_program.staged``). The workspace is ``cand``'s, which fits both programs
    (``Conv._guard``); None where the plan's program alone sets it."""
    pd = conv.impls[cand.id][1]
    hooks = clip_hooks(conv, pd)
    if GUARDED not in cand.name:
        return hooks, None
    fb = conv.fallback(cand)
    _, fb_pd, _, fb_variant = conv.impls[fb.id]
    program, spec = conv.program(fb_pd, variant=fb_variant)
    roles = spec.roles
    role_x = conv.roles.x
    kind = _RELU_KINDS[conv.match.tensors[role_x].data_type]
    # the fallback's own host copies (a bias of non-unit channel stride staged at its own
    # workspace offset, ``ProgramSpec.channel``) run around it, as its plan would run them
    stage = staged(spec, None)

    def guarded(b, workspace):
        before, after = hooks(b, workspace) if hooks is not None else (None, None)
        x = b[role_x]

        def check():
            if _kernels.nonfinite(x, kind):
                copy_in, copy_out = stage(b, workspace)
                if copy_in is not None:
                    copy_in()
                program.run(tuple(b[r] for r in roles), workspace)
                if copy_out is not None:
                    copy_out()
            if after is not None:
                after()
        return before, check
    assert cand.workspace_bytes >= program.workspace_size, cand   # ``_guard`` sized it
    return guarded, cand.workspace_bytes


def clip_hooks(conv, pd):
    """Hooks running RELU_FWD on a convolution's y (pattern 8) after implementation ``pd``,
    or None (no ReLU, or one ``pd`` computes as post-ops)."""
    if conv.clips is None or conv.fuses_relu(pd):
        return None
    lower, upper = conv.clips
    lo = 0.0 if lower is None else float(lower)
    hi = math.inf if upper is None else float(upper)
    role = conv.roles.y
    # y's element kind, from its tensor (the binding checked the buffer's dtype against
    # it; reading ``y.dtype.name`` costs 2 us a call)
    kind = _RELU_KINDS.get(conv.match.tensors[role].data_type)
    compiled = kind is not None and lo <= hi

    def hooks(b, workspace):
        y = b[role]
        if not (compiled and y.flags.aligned):
            return None, lambda: _batchnorm.relu(y, y, lower, upper, team=True)
        # the compiled pass itself, in place (``_batchnorm.relu``'s checks cost 8 us a
        # call, 5x the pass on a tiny y): a C callable the plan runs without NumPy's
        # warning state (``_plan.quiet``)
        return None, partial(_kernels.bias_relu, y, kind, y, kind, None, lo, hi, team=True)
    hooks.reads_workspace = False     # _plan: its launches copy onto a fresh workspace
    return hooks
