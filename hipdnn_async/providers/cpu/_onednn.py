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
  are not channels-last also get channels-last candidates (reorders in and out).
  Activations that are not packed (gaps between elements, a channel slice) run on dense
  copies (``+dense``): oneDNN's only implementations of strided activations are its
  reference ones.
  oneDNN's reference implementations (``ref:any``) are never candidates: where nothing
  else applies the engine declines.
- conv + bias + ReLU: the forward primitive with its bias argument; RELU_FWD then runs
  on y through the CPU kernels, since oneDNN 3.2's eltwise post-ops differ from RELU_FWD
  on special values (``relu`` gives NaN for -inf and -0.0 for negatives, ``clip`` maps
  NaN to the lower bound).
- batchnorm inference (variance): one forward-inference primitive with global statistics.
- batchnorm training (+ ReLU): one forward-training primitive, with ``fuse_norm_relu`` for
  an unclipped ReLU (its mask goes to a workspace piece, ``DNNL_ARG_WORKSPACE``); its jit
  implementation maps NaN to +0 (mask y > 0), so a channel whose statistics, scale or bias
  are not finite is recomputed on the host (RELU_FWD keeps NaN); a clipped ReLU runs on the
  result through the CPU kernels. oneDNN returns the batch variance,
  converted per channel to ``inv_variance = 1 / sqrt(variance + epsilon)``; the running
  statistics are updated per channel as ``CPU_ENGINE`` does (unbiased variance).
- batchnorm backward: one backward primitive given ``variance = 1 / inv_variance**2`` and
  epsilon 0 (so oneDNN's ``1 / sqrt(variance + 0)`` is the graph's inv_variance).
- batchnorm inference -> RELU_BWD -> batchnorm backward: a forward-training primitive with
  global statistics and ``fuse_norm_relu`` writes the ReLU mask, the backward primitive
  with ``fuse_norm_relu`` applies it: two primitives, one program. A clipped ReLU has no
  oneDNN mask (``fuse_norm_relu`` masks y > 0 only): a first program runs the
  forward-inference primitive into a float32 y, dy's float32 copy is zeroed where
  ``lower < y < upper`` fails, then the backward primitive runs on it.
- batchnorm activations that are not packed run on dense copies, as convolutions do.

HALF (float16) I/O: oneDNN 3.2 has f16 convolution and batchnorm kernels only on CPUs with
AVX512-FP16 or AMX-FP16, so every HALF graph runs float32 primitives on float32 copies
(candidate names ``+f32``): the f16 -> f32 reorders in are exact, the f32 -> f16 reorder
of each result rounds once (what the tolerance table assumes); weights are reordered to
oneDNN's blocked float32 layout, a HALF bias to a float32 vector. Every copy is a piece
of the plan's workspace (``workspace_size`` counts it).

Batchnorm candidates: the user's layout, and for activations that are not channels-last
also channels-last copies (``+nhwc``: reorders in and out around oneDNN's jit batchnorm,
which takes no plain NCHW memory; there oneDNN runs its generic ``ncsp_bnorm:any``); for
batchnorm training + ReLU each with ``fuse_norm_relu`` and with a separate ReLU pass.
Without benchmarking a jit implementation is taken before the generic ones (measured on
8x256x28x28, one thread: NCHW training + ReLU 3.2 ms through ``+nhwc`` fused vs 19-20 ms
generic), except for batchnorm inference, which keeps the user's layout (one pass at
memory speed: the reorders cost more in float32).

Per-channel tensors (scale, bias, statistics) whose channel stride is not 1 are staged
through the workspace (oneDNN reads and writes them as dense vectors).

Choosing: a primitive descriptor's implementations (``next_impl``, named by
``impl_info_str``) are the candidates, in oneDNN's own preference order; each needs the
workspace of its scratchpad plus the blocked weights (``global.workspace_size_limit``
ranges over these). ``global.benchmarking = 1`` times the candidates and keeps the
fastest in the perf db, keyed by CPU model, ISA, threads and oneDNN version.
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np

from ... import _knobs
from ..._errors import DeviceError, NotSupportedError
from ..._layout import packed_strides, stride_order, strides_match
from ..._types import ConvolutionMode, DataType, numpy_dtype
from ...patterns import Pattern, conv_roles
from ...runtime import load_onednn
from .. import _tuning
from .._base import ProviderEngine, ProviderPlan
from . import _batchnorm

try:
    from ...runtime import _onednn as dnnl
except ImportError:          # a source tree built without it: the engine declines
    dnnl = None

__all__ = ["OnednnEngine", "OnednnPlan", "ONEDNN_ENGINE_NAME"]

log = logging.getLogger("hipdnn_async")

ONEDNN_ENGINE_NAME = "ONEDNN_ENGINE"

# Benchmarking: one warm-up, then timed runs until this many or this much time (s).
_BENCH_RUNS = 5
_BENCH_BUDGET_S = 0.5
_ALIGN = 64                  # bytes: oneDNN's own alignment of buffers it allocates

_DNNL_TYPES = {DataType.FLOAT: "DATA_F32", DataType.HALF: "DATA_F16",
               DataType.BFLOAT16: "DATA_BF16"}


def _decline(why: str):
    return NotSupportedError(f"{ONEDNN_ENGINE_NAME}: {why}")


def _dt(tensor) -> int:
    name = _DNNL_TYPES.get(tensor.data_type)
    if name is None:
        raise _decline(f"tensor '{tensor.name}' is {tensor.data_type.name}; oneDNN takes FLOAT, "
                       "HALF and BFLOAT16")
    return getattr(dnnl, name)


def _user_md(tensor):
    """The user's memory of ``tensor`` exactly: its dims and element strides."""
    if any(d == 0 for d in tensor.dims):
        raise _decline(f"tensor '{tensor.name}' has a zero dim {tuple(tensor.dims)}")
    return dnnl.MemoryDesc(tuple(tensor.dims), _dt(tensor), strides=tuple(tensor.strides))


def _order(tensor) -> tuple:
    dims = tuple(tensor.dims)
    return stride_order(dims, tuple(tensor.strides))


def _packed_md(tensor, data_type=None, order=None):
    """A packed buffer in ``tensor``'s memory order (or ``order``), of ``data_type`` (default
    the tensor's): for an intermediate oneDNN writes, or a dense copy of strided memory."""
    dims = tuple(tensor.dims)
    return dnnl.MemoryDesc(dims, _dt(tensor) if data_type is None else data_type,
                           strides=packed_strides(dims, _order(tensor) if order is None else order))


def _is_dense(tensor) -> bool:
    """Whether ``tensor`` is packed in its own memory order (no gaps)."""
    dims = tuple(tensor.dims)
    return strides_match(dims, packed_strides(dims, _order(tensor)), tuple(tensor.strides))


def _compute_type(tensor) -> int:
    """The data type oneDNN computes ``tensor``'s values in: float32 for HALF (oneDNN 3.2
    has f16 convolution and batchnorm kernels only on CPUs with AVX512-FP16 / AMX-FP16;
    f16 -> f32 is exact and the f32 -> f16 reorder of the result rounds once, as the
    tolerance table assumes), else its own."""
    return dnnl.DATA_F32 if tensor.data_type == DataType.HALF else _dt(tensor)


def _native(tensor) -> bool:
    """Whether a primitive can take ``tensor``'s user memory as it is (dense, computed in
    its own type); else it runs on a dense copy reordered in (and out)."""
    return tensor.data_type != DataType.HALF and _is_dense(tensor)


def _channel_md(tensor):
    """A per-channel (1, C, 1, 1[, 1]) FLOAT tensor as oneDNN's 1-D (C,) f32 memory."""
    c = tensor.dims[1]
    if tensor.data_type != DataType.FLOAT or math.prod(tensor.dims) != c:
        raise _decline(f"per-channel tensor '{tensor.name}' is {tensor.data_type.name} with dims "
                       f"{tuple(tensor.dims)}; oneDNN takes FLOAT (1, C, 1, 1)")
    return dnnl.MemoryDesc((c,), dnnl.DATA_F32, strides=(tensor.strides[1],))


class _Workspace:
    """Byte offsets of the pieces of one execution's workspace, each 64-byte aligned."""

    def __init__(self):
        self.size = 0

    def add(self, nbytes: int) -> int:
        off = -(-self.size // _ALIGN) * _ALIGN
        self.size = off + int(nbytes)
        return off


class _ProgramSpec:
    """Memories and steps of a ``_onednn.Program`` under construction."""

    def __init__(self, roles, *, dry=False):
        self.roles = tuple(roles)
        self.mems, self.steps, self.ws = [], [], _Workspace()
        self.index = {}
        self.dry = dry               # only sizes: no primitive is created (no JIT)
        self.copy_in, self.copy_out = [], []     # per-channel roles staged in the workspace
        self.pre_steps = []          # steps run as a separate program first (``_clipped_drelu``)
        self.names = []              # oneDNN's implementation name of each step

    def array(self, role, md) -> int:
        self.mems.append((md, dnnl.MEM_ARRAY, self.roles.index(role)))
        self.index[role] = len(self.mems) - 1
        return self.index[role]

    def channel(self, role, tensor, *, output=False, dtype=None) -> int:
        """A per-channel (1, C, 1, 1[, 1]) tensor as oneDNN's 1-D (C,) memory: the user's
        array where its channels are dense (oneDNN reads and writes statistics as dense
        vectors whatever the strides say), else a workspace copy made before the program
        (inputs) or copied back after it (outputs)."""
        md = _channel_md(tensor) if dtype is None else _channel_like(tensor)
        if tensor.strides[1] == 1 or tensor.dims[1] == 1:
            return self.array(role, md)
        c = tensor.dims[1]
        dense = dnnl.MemoryDesc((c,), md.data_type, strides=(1,))
        index = self.scratch(dense, "copy:" + role)
        (self.copy_out if output else self.copy_in).append(role)
        return index

    def scratch(self, md, name=None) -> int:
        self.mems.append((md, dnnl.MEM_WORKSPACE, self.ws.add(md.size)))
        if name is not None:
            self.index[name] = len(self.mems) - 1
        return len(self.mems) - 1

    def step(self, pd, args):
        """Add a primitive of ``pd``; ``args``: (DNNL_ARG_*, memory index); its scratchpad
        becomes a piece of the workspace."""
        args = list(args)
        pad = pd.md(dnnl.QUERY_SCRATCHPAD_MD)
        if pad is not None:
            args.append((dnnl.ARG_SCRATCHPAD, self.scratch(pad)))
        self.steps.append((None if self.dry else dnnl.Primitive(pd), args))
        self.names.append(pd.impl_name)

    def activation(self, role, tensor, order=None, *, data_type=None):
        """The memory a primitive takes for the activations ``tensor``: the user's array
        where it is dense, packed in ``order`` (default its own) and computed in its own
        type (``_native``), else a dense copy (packed in ``order``, float32 for HALF or
        ``data_type``), for an input filled by ``reorder_in``, for an output emptied by
        ``reorder_out``. Returns (memory index, its descriptor, the user's memory index)."""
        user_md = _user_md(tensor)
        user = self.array(role, user_md)
        dims = tuple(tensor.dims)
        if (data_type is None and _native(tensor) and (
                order is None or strides_match(dims, packed_strides(dims, order),
                                               tuple(tensor.strides)))):
            return user, user_md, user
        md = _packed_md(tensor, _compute_type(tensor) if data_type is None else data_type,
                        order)
        return self.scratch(md), md, user

    def reorder_in(self, mem):
        """Add the reorder of the user's memory into an ``activation`` copy (a no-op where
        the primitive takes the user's array)."""
        index, md, user = mem
        if index != user:
            self.step(dnnl.reorder(self.mems[user][0], md), [(dnnl.ARG_SRC, user),
                                                             (dnnl.ARG_DST, index)])

    def reorder_out(self, mem):
        """Add the reorder of an ``activation`` copy back into the user's memory."""
        index, md, user = mem
        if index != user:
            self.step(dnnl.reorder(md, self.mems[user][0]), [(dnnl.ARG_SRC, index),
                                                             (dnnl.ARG_DST, user)])

    def offset(self, name) -> tuple[int, int]:
        """(byte offset, bytes) of the workspace memory ``name``."""
        md, _, off = self.mems[self.index[name]]
        return off, md.size

    def program(self, steps=None):
        return dnnl.Program(self.mems, self.steps if steps is None else steps,
                            len(self.roles), self.ws.size)


# ------------------------------------------------------------------ convolutions
class _Conv:
    """One convolution problem in oneDNN's terms, and its implementations."""

    def __init__(self, match):
        roles, t = conv_roles(match.pattern), match.tensors
        conv = match.params["conv"]
        if conv.mode != ConvolutionMode.CROSS_CORRELATION:
            raise _decline("oneDNN computes cross-correlation only; the graph asks for "
                           f"{conv.mode.name}")
        self.match, self.roles = match, roles
        self.direction = roles.direction.label
        x, w, y = t[roles.x], t[roles.w], t[roles.y]
        self.x_md, self.y_md = _user_md(x), _user_md(y)
        g = conv.groups
        k, cg = w.dims[0], w.dims[1]
        if g > 1:
            wd = (g, k // g, cg) + tuple(w.dims[2:])
            ws = (w.strides[0] * (k // g),) + tuple(w.strides)
        else:
            wd, ws = tuple(w.dims), tuple(w.strides)
        _user_md(w)
        self.w_user = dnnl.MemoryDesc(wd, _dt(w), strides=ws)
        self.w_dims, self.w_type = wd, _compute_type(w)
        self.geometry = (tuple(conv.stride), tuple(d - 1 for d in conv.dilation),
                         tuple(conv.pre_padding), tuple(conv.post_padding))
        self.bias_role = "bias" if "bias" in t else None
        self.bias_md = None
        if self.bias_role:
            bias = t["bias"]
            self.bias_md = _channel_like(bias)
            if bias.data_type == DataType.HALF:
                # the f32 primitive takes an f32 bias, converted in the program
                self.bias_md = dnnl.MemoryDesc((bias.dims[1],), dnnl.DATA_F32, strides=(1,))
        self.post_ops, self.clips = [], None
        if match.pattern == Pattern.CONV_FPROP_BIAS_RELU:
            # RELU_FWD runs on y after the primitive: oneDNN 3.2's eltwise post-ops do not
            # compute it exactly (relu: 0 * x gives NaN for -inf and -0.0 for negatives;
            # clip / clip_v2 turn NaN into the lower bound: tests/oracle/test_edge_cases.py)
            self.clips = (match.params.get("relu_lower_clip"), match.params.get("relu_upper_clip"))
        self.impls = self._walk()
        if not self.impls:
            raise _decline(f"oneDNN has no optimized implementation of conv_{self.direction} "
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
        """(name suffix, x and y descriptors the primitive takes): the user's layout, and
        for activations that are not channels-last also packed channels-last copies
        (reordered in and out in the same program), candidates for benchmarking: on
        plain NCHW oneDNN runs its GEMM-based implementation (``gemm:jit``), and the NHWC
        kernels plus two reorders may be faster. The user's layout stays first (the
        heuristic's choice): the channels-last bf16 kernels pair channels, and with an
        odd C an inf input met a zero-padded weight there (inf * 0 = NaN,
        tests/oracle/test_edge_cases.py)."""
        t = self.match.tensors
        x, y = t[self.roles.x], t[self.roles.y]
        if _native(x) and _native(y):
            out = [("", self.x_md, self.y_md)]
            suffix = ""
        else:
            # HALF runs on float32 copies; strided (non-packed) activations on dense copies:
            # oneDNN's only implementations of strided activations are its reference ones
            suffix = "+f32" if x.data_type == DataType.HALF else "+dense"
            out = [(suffix, _packed_md(x, _compute_type(x)), _packed_md(y, _compute_type(y)))]
        if x.strides[1] == 1 and y.strides[1] == 1:
            return out
        return out + [(suffix + "+nhwc", _channels_last_md(x, _compute_type(x)),
                       _channels_last_md(y, _compute_type(y)))]

    def _walk(self) -> list:
        """(name, PrimitiveDesc at that implementation, workspace bytes) per implementation,
        in oneDNN's order; repeated names get ``#2``, ``#3``."""
        out, seen = [], {}
        for suffix, x_md, y_md in self._variants():
            try:
                pd = self._first(x_md, y_md)
            except NotSupportedError:
                continue
            variant = (x_md, y_md) if suffix else None
            while True:
                name = pd.impl_name
                if not name.startswith("ref:"):
                    # oneDNN's reference implementations (ref:any) are never candidates:
                    # 100-5000x slower than CPU_ENGINE, and in 3.2 wrong for a strided
                    # 3-D destination with bias (tests/oracle, CONV_FPROP_BIAS_RELU)
                    name += suffix
                    seen[name] = seen.get(name, 0) + 1
                    if seen[name] > 1:
                        name = f"{name}#{seen[name]}"
                    impl = pd.clone()
                    out.append((name, impl, self.program(impl, dry=True, variant=variant),
                                variant))
                if not pd.next_impl():
                    break
        return out

    def candidates(self) -> list:
        return [_tuning.Candidate(name, i, ws) for i, (name, _, ws, _v) in enumerate(self.impls)]

    def program(self, pd, *, dry=False, frozen_w=None, variant=None):
        """(Program, its _ProgramSpec) running implementation ``pd``; ``dry``: only the
        workspace bytes it needs (no primitive is created). ``frozen_w``: an array already
        holding the weights in ``pd``'s layout (the reorder is then not part of it).
        ``variant``: (x, y) descriptors the primitive takes instead of the user's, whose
        activations are reordered in (inputs) and out (the output) around it."""
        roles = [self.roles.x, self.roles.w, self.roles.y] + ([self.bias_role] if self.bias_role else [])
        spec = _ProgramSpec(roles, dry=dry)
        x = x_user = spec.array(self.roles.x, self.x_md)
        y = y_user = spec.array(self.roles.y, self.y_md)
        w_user = spec.array(self.roles.w, self.w_user)
        outputs = []
        if variant is not None:
            x_md, y_md = variant
            x, y = spec.scratch(x_md), spec.scratch(y_md)
            ins = {"fprop": ((self.x_md, x_md, x_user, x),),
                   "dgrad": ((self.y_md, y_md, y_user, y),),
                   "wgrad": ((self.x_md, x_md, x_user, x), (self.y_md, y_md, y_user, y))}
            for src_md, dst_md, src, dst in ins[self.direction]:
                spec.step(dnnl.reorder(src_md, dst_md), [(dnnl.ARG_SRC, src), (dnnl.ARG_DST, dst)])
            if self.direction == "fprop":
                outputs.append((y_md, self.y_md, y, y_user))
            elif self.direction == "dgrad":
                outputs.append((x_md, self.x_md, x, x_user))
        w_query = dnnl.QUERY_DIFF_WEIGHTS_MD if self.direction == "wgrad" else dnnl.QUERY_WEIGHTS_MD
        w_md = pd.md(w_query)
        plain = w_md.equals(self.w_user)
        if self.direction == "wgrad":
            w = w_user if plain else spec.scratch(w_md)
            spec.step(pd, [(dnnl.ARG_SRC, x), (dnnl.ARG_DIFF_DST, y), (dnnl.ARG_DIFF_WEIGHTS, w)])
            if not plain:
                spec.step(dnnl.reorder(w_md, self.w_user), [(dnnl.ARG_SRC, w),
                                                            (dnnl.ARG_DST, w_user)])
        else:
            if plain:
                w = w_user
            elif frozen_w is not None:
                spec.mems.append((w_md, dnnl.MEM_OWNED, frozen_w))
                w = len(spec.mems) - 1
            else:
                w = spec.scratch(w_md, "w")
                spec.step(dnnl.reorder(self.w_user, w_md), [(dnnl.ARG_SRC, w_user),
                                                            (dnnl.ARG_DST, w)])
            if self.direction == "fprop":
                args = [(dnnl.ARG_SRC, x), (dnnl.ARG_WEIGHTS, w), (dnnl.ARG_DST, y)]
                if self.bias_role:
                    bias = self.match.tensors[self.bias_role]
                    if bias.data_type == DataType.HALF:
                        b_user = spec.array(self.bias_role, _channel_like(bias))
                        b = spec.scratch(self.bias_md)
                        spec.step(dnnl.reorder(_channel_like(bias), self.bias_md),
                                  [(dnnl.ARG_SRC, b_user), (dnnl.ARG_DST, b)])
                    else:
                        b = spec.channel(self.bias_role, bias, dtype="own")
                    args.append((dnnl.ARG_BIAS, b))
            else:
                args = [(dnnl.ARG_DIFF_DST, y), (dnnl.ARG_WEIGHTS, w), (dnnl.ARG_DIFF_SRC, x)]
            spec.step(pd, args)
        for src_md, dst_md, src, dst in outputs:
            spec.step(dnnl.reorder(src_md, dst_md), [(dnnl.ARG_SRC, src), (dnnl.ARG_DST, dst)])
        if dry:
            return spec.ws.size
        return spec.program(), spec

    def weights_layout(self, pd):
        """The blocked weights descriptor ``pd`` reads, or None where it reads the user's."""
        if self.direction == "wgrad":
            return None
        w_md = pd.md(dnnl.QUERY_WEIGHTS_MD)
        return None if w_md.equals(self.w_user) else w_md


def _channels_last_md(tensor, data_type=None):
    """A packed channels-last (NHWC / NDHWC) buffer with ``tensor``'s dims and type (or
    ``data_type``)."""
    order = (0,) + tuple(range(2, len(tensor.dims))) + (1,)
    return _packed_md(tensor, data_type, order)


def _channel_like(tensor):
    """A bias (1, K, 1, 1) as oneDNN's 1-D (K,) memory of its own data type."""
    k = tensor.dims[1]
    if math.prod(tensor.dims) != k:
        raise _decline(f"bias '{tensor.name}' has dims {tuple(tensor.dims)}; oneDNN takes (1, K, 1, 1)")
    return dnnl.MemoryDesc((k,), _dt(tensor), strides=(tensor.strides[1],))


# ------------------------------------------------------------------ plans
class OnednnPlan(ProviderPlan):
    """A oneDNN plan: a prebuilt ``_onednn.Program`` over the pattern's roles, with
    per-channel host work before / after it where the pattern needs it (batchnorm
    statistics). ``launcher`` gives the submit path's C callable."""

    def __init__(self, match, program, spec, algorithm, *, hooks=None, conv=None, pd=None,
                 variant=None):
        self.match, self.program, self.roles = match, program, spec.roles
        self.algorithm = algorithm
        self.workspace_size = program.workspace_size
        self._conv, self._pd, self._variant = conv, pd, variant
        self._frozen = None
        self._hooks = _staged(spec, hooks) if spec.copy_in or spec.copy_out else hooks

    def _arrays(self, buffers) -> tuple:
        return tuple(buffers[r] for r in self.roles)

    def _host_work(self, buffers, workspace):
        """(before, after) of one execution, each run with NumPy's floating-point warnings
        off: IEEE results (inf, NaN) are the answer, as on a GPU, never warnings (which
        pytest's -W error, or a user's filter, would turn into exceptions on a worker)."""
        if not self._hooks:
            return None, None
        return tuple(None if fn is None else _quiet(fn) for fn in self._hooks(buffers, workspace))

    def run(self, buffers, workspace) -> None:
        before, after = self._host_work(buffers, workspace)
        if before is not None:
            before()
        program = self._frozen[1] if self._frozen is not None else self.program
        program.run(self._arrays(buffers), workspace)
        if after is not None:
            after()

    def launcher(self, buffers, workspace, *, counter=None, label=None):
        """The work-item function of one execution: a ``_onednn.Launch`` (a C callable that
        runs the program with the GIL released, counts itself in ``counter`` and names
        ``label`` in its errors)."""
        before, after = self._host_work(buffers, workspace)
        program = self._frozen[1] if self._frozen is not None else self.program
        return dnnl.Launch(program, self._arrays(buffers), workspace, counter, label,
                           before, after)

    def reorder_constants(self, buffers) -> bool:
        """Reorder constant weights once into the layout the convolution reads, so later
        executions skip the per-execution reorder (fprop, fprop + bias + ReLU, dgrad).

        Parameters
        ----------
        buffers : mapping
            Role -> bound buffer of the constant inputs; only ``"w"`` (logical dims (K,
            C/groups, ...), the tensor's strides) is used. Its values are read now; later
            changes to it are not seen until this is called again.

        Returns
        -------
        bool
            True when the plan now reads the reordered copy; False where there is nothing
            to reorder (wgrad, or weights already in the layout the implementation reads).
        """
        if self._conv is None or buffers.get(self._conv.roles.w) is None:
            return False
        weights = buffers[self._conv.roles.w]
        w_md = self._conv.weights_layout(self._pd)
        if w_md is None:
            return False
        blocked = np.empty(w_md.size, np.uint8)
        spec = _ProgramSpec(["w"])
        src = spec.array("w", self._conv.w_user)
        spec.mems.append((w_md, dnnl.MEM_OWNED, blocked))
        spec.step(dnnl.reorder(self._conv.w_user, w_md), [(dnnl.ARG_SRC, src),
                                                          (dnnl.ARG_DST, len(spec.mems) - 1)])
        once = spec.program()
        ws = np.empty(once.workspace_size, np.uint8) if once.workspace_size else None
        once.run((weights,), ws)
        program, spec = self._conv.program(self._pd, frozen_w=blocked, variant=self._variant)
        hooks = _clip_hooks(self._conv)
        self._hooks = _staged(spec, hooks) if spec.copy_in else hooks
        self._frozen = (blocked, program)
        self.workspace_size = program.workspace_size
        return True


def _quiet(fn):
    def quiet():
        with np.errstate(all="ignore"):
            fn()
    return quiet


def _clip_hooks(conv):
    """Hooks running RELU_FWD on a convolution's y (pattern 8), or None."""
    if conv.clips is None:
        return None
    lo, hi = conv.clips

    def hooks(b, workspace):
        y = b[conv.roles.y]
        return None, lambda: _batchnorm.relu(y, y, lo, hi)
    return hooks


def _staged(spec, hooks):
    """``hooks`` with the per-channel copies of ``spec`` (``_ProgramSpec.channel``) added:
    inputs copied into the workspace first, outputs copied out before ``after`` runs."""
    def staged(b, workspace):
        before, after = hooks(b, workspace) if hooks else (None, None)

        def copy_in():
            for role in spec.copy_in:
                off, nbytes = spec.offset("copy:" + role)
                dst = workspace[off:off + nbytes].view(b[role].dtype)
                dst[...] = b[role].reshape(-1)
            if before is not None:
                before()

        def copy_out():
            for role in spec.copy_out:
                off, nbytes = spec.offset("copy:" + role)
                out = b[role]
                out[...] = workspace[off:off + nbytes].view(out.dtype).reshape(out.shape)
            if after is not None:
                after()
        return (copy_in if spec.copy_in or before else None,
                copy_out if spec.copy_out or after else None)
    return staged


def _ws_view(workspace, spec, name) -> np.ndarray:
    """The float32 per-channel vector ``name`` inside one execution's workspace."""
    off, nbytes = spec.offset(name)
    return workspace[off:off + nbytes].view(np.float32)


def _vec(a) -> np.ndarray:
    """A (1, C, 1, 1) array as a float64 vector (per-channel arithmetic in float64)."""
    return np.asarray(a, np.float64).reshape(-1)


def _put(out, values) -> None:
    out[...] = values.reshape(out.shape)


# ------------------------------------------------------------------ batchnorm
def _bn_inference_variance(match, order, fuse, dry):
    t, p = match.tensors, match.params
    roles = ["x", "y", "mean", "variance", "scale", "bias"]
    eps = float(p["epsilon"])
    if not eps > 0:
        raise _decline(f"epsilon = {eps!r}; CPU_ENGINE reports it")
    spec = _ProgramSpec(roles, dry=dry)
    x, y = spec.activation("x", t["x"], order), spec.activation("y", t["y"], order)
    pd = dnnl.bn_forward(dnnl.PROP_FORWARD_INFERENCE, x[1], y[1], eps,
                         dnnl.USE_GLOBAL_STATS | dnnl.USE_SCALE | dnnl.USE_SHIFT)
    spec.reorder_in(x)
    spec.step(pd, [(dnnl.ARG_SRC, x[0]), (dnnl.ARG_DST, y[0]),
                   (dnnl.ARG_MEAN, spec.channel("mean", t["mean"])),
                   (dnnl.ARG_VARIANCE, spec.channel("variance", t["variance"])),
                   (dnnl.ARG_SCALE, spec.channel("scale", t["scale"])),
                   (dnnl.ARG_SHIFT, spec.channel("bias", t["bias"]))])
    spec.reorder_out(y)
    return spec, pd, None


def _bn_training(match, order, fuse, dry):
    t, p = match.tensors, match.params
    x = t["x"]
    m = x.dims[0] * math.prod(x.dims[2:])
    eps = float(p["epsilon"])
    if m < 2 or not eps > 0:
        raise _decline(f"N*spatial = {m}, epsilon = {eps!r}; CPU_ENGINE reports them")
    relu = match.pattern == Pattern.BN_TRAINING_RELU
    lo, hi = p.get("relu_lower_clip"), p.get("relu_upper_clip")
    real = {r for r, tt in t.items() if not tt.is_virtual}
    roles = [r for r in ("x", "y", "scale", "bias", "mean", "inv_variance", "prev_running_mean",
                         "prev_running_variance", "next_running_mean",
                         "next_running_variance") if r in real]
    spec = _ProgramSpec(roles, dry=dry)
    xm, ym = spec.activation("x", x, order), spec.activation("y", t["y"], order)
    # ``fuse``: an unclipped ReLU is oneDNN's fuse_norm_relu (y > 0 ? y : +0, its mask
    # written to the workspace); else the ReLU runs on y after the primitive
    fused = fuse and relu and lo in (None, 0.0) and hi is None
    pd = dnnl.bn_forward(dnnl.PROP_FORWARD_TRAINING, xm[1], ym[1], eps,
                         dnnl.USE_SCALE | dnnl.USE_SHIFT | (dnnl.FUSE_NORM_RELU if fused else 0))
    c = x.dims[1]
    stat_md = dnnl.MemoryDesc((c,), dnnl.DATA_F32, strides=(1,))
    for role in ("scale", "bias", "mean", "inv_variance", "prev_running_mean",
                 "prev_running_variance", "next_running_mean", "next_running_variance"):
        if role in real:
            _channel_md(t[role])                       # declines a non-FLOAT statistic
    mean = (spec.channel("mean", t["mean"], output=True) if "mean" in real
            else spec.scratch(stat_md, "mean"))
    args = [(dnnl.ARG_SRC, xm[0]), (dnnl.ARG_DST, ym[0]),
            (dnnl.ARG_SCALE, spec.channel("scale", t["scale"])),
            (dnnl.ARG_SHIFT, spec.channel("bias", t["bias"])),
            (dnnl.ARG_MEAN, mean), (dnnl.ARG_VARIANCE, spec.scratch(stat_md, "variance"))]
    mask = pd.md(dnnl.QUERY_WORKSPACE_MD)
    if mask is not None:
        args.append((dnnl.ARG_WORKSPACE, spec.scratch(mask)))
    spec.reorder_in(xm)
    spec.step(pd, args)
    spec.reorder_out(ym)
    momentum = p.get("momentum")
    clips = (lo, hi) if relu and not fused else None
    mean_virtual = "mean" not in real

    def hooks(b, workspace):
        def after():
            var = _vec(_ws_view(workspace, spec, "variance"))
            if "inv_variance" in b:
                _put(b["inv_variance"], 1.0 / np.sqrt(var + eps))
            if clips is not None:
                _batchnorm.relu(b["y"], b["y"], *clips)
            elif fused:
                _nonfinite_channels(b, workspace, spec, var, eps, mean_virtual)
            if "next_running_mean" in b or "next_running_variance" in b:
                mom = float(momentum)
                if "next_running_mean" in b:
                    mu = _vec(_ws_view(workspace, spec, "mean") if mean_virtual else b["mean"])
                    _put(b["next_running_mean"],
                         (1.0 - mom) * _vec(b["prev_running_mean"]) + mom * mu)
                if "next_running_variance" in b:
                    _put(b["next_running_variance"],
                         (1.0 - mom) * _vec(b["prev_running_variance"])
                         + mom * var * (m / (m - 1.0)))
        return None, after

    if ("next_running_mean" in real or "next_running_variance" in real) and momentum is None:
        raise _decline("running statistics without a momentum; CPU_ENGINE reports it")
    return spec, pd, hooks


def _nonfinite_channels(b, workspace, spec, var, eps, mean_virtual) -> None:
    """oneDNN's jit fuse_norm_relu writes +0 where y is NaN (its mask is y > 0; its
    generic implementations keep the NaN): in a channel whose statistics, scale or bias
    are not finite (the only way y gets a NaN: with finite ones, y is finite or an
    overflowed +-inf, which the mask maps right), recompute
    ``y = RELU_FWD(scale * (x - mean) / sqrt(variance + epsilon) + bias)``, NaN kept."""
    mu = _vec(_ws_view(workspace, spec, "mean") if mean_virtual else b["mean"])
    sc, sh = _vec(b["scale"]), _vec(b["bias"])
    bad = ~(np.isfinite(mu) & np.isfinite(var) & np.isfinite(sc) & np.isfinite(sh))
    if not bad.any():
        return
    x, y = b["x"], b["y"]
    for c in np.flatnonzero(bad):
        v = (sc[c] * (np.asarray(x[:, c], np.float64) - mu[c]) / np.sqrt(var[c] + eps)
             + sh[c]).astype(np.float32)
        _batchnorm.relu(v, v)
        y[:, c] = v


def _bn_backward(match, order, fuse, dry):
    t = match.tensors
    drelu = match.pattern == Pattern.BN_INFERENCE_DRELU_BACKWARD
    lo = hi = None
    if drelu:
        lo, hi = match.params.get("relu_lower_clip"), match.params.get("relu_upper_clip")
    # fuse_norm_relu masks y > 0 only; a clipped RELU_BWD is composed (``_clipped_drelu``)
    clipped = drelu and (lo not in (None, 0.0) or hi is not None)
    roles = ["x", "dy", "scale", "mean", "inv_variance", "dx", "dscale", "dbias"] + (
        ["bias"] if drelu else [])
    x, dy, dx = t["x"], t["dy"], t["dx"]
    for role in ("scale", "mean", "inv_variance", "dscale", "dbias") + (("bias",) if drelu else ()):
        _channel_md(t[role])
    c = x.dims[1]
    stat_md = dnnl.MemoryDesc((c,), dnnl.DATA_F32, strides=(1,))
    spec = _ProgramSpec(roles, dry=dry)
    # the clipped composition keeps its intermediates (y, the masked dy) in float32
    f32 = (lambda tt: None if tt.data_type == DataType.FLOAT else dnnl.DATA_F32) if clipped \
        else (lambda tt: None)
    xm = spec.activation("x", x, order, data_type=f32(x))
    dym = spec.activation("dy", dy, order, data_type=dnnl.DATA_F32 if clipped else None)
    dxm = spec.activation("dx", dx, order, data_type=f32(dx))
    relu = dnnl.FUSE_NORM_RELU if drelu and not clipped else 0
    flags = dnnl.USE_SCALE | dnnl.USE_SHIFT | relu
    # epsilon 0: oneDNN's 1/sqrt(variance + 0) is then the graph's inv_variance
    y_md = _packed_md(x, xm[1].data_type, order) if drelu else dym[1]
    hint = dnnl.bn_forward(dnnl.PROP_FORWARD_TRAINING, xm[1], y_md, 0.0, flags)
    pd = dnnl.bn_backward(dnnl.PROP_BACKWARD, dxm[1], dym[1], xm[1], 0.0, flags, hint)
    mean = spec.channel("mean", t["mean"])
    scale = spec.channel("scale", t["scale"])
    var = spec.scratch(stat_md, "variance")
    args = [(dnnl.ARG_SRC, xm[0]), (dnnl.ARG_DIFF_DST, dym[0]),
            (dnnl.ARG_MEAN, mean), (dnnl.ARG_VARIANCE, var), (dnnl.ARG_SCALE, scale),
            (dnnl.ARG_DIFF_SRC, dxm[0]),
            (dnnl.ARG_DIFF_SCALE, spec.channel("dscale", t["dscale"], output=True)),
            (dnnl.ARG_DIFF_SHIFT, spec.channel("dbias", t["dbias"], output=True))]
    spec.reorder_in(xm)
    spec.reorder_in(dym)
    if drelu:
        fwd_args = [(dnnl.ARG_SRC, xm[0]), (dnnl.ARG_DST, spec.scratch(y_md, "y")),
                    (dnnl.ARG_MEAN, mean), (dnnl.ARG_VARIANCE, var), (dnnl.ARG_SCALE, scale),
                    (dnnl.ARG_SHIFT, spec.channel("bias", t["bias"]))]
        if clipped:
            fwd = dnnl.bn_forward(dnnl.PROP_FORWARD_INFERENCE, xm[1], y_md, 0.0,
                                  dnnl.USE_SCALE | dnnl.USE_SHIFT | dnnl.USE_GLOBAL_STATS)
        else:
            fwd = dnnl.bn_forward(dnnl.PROP_FORWARD_TRAINING, xm[1], y_md, 0.0,
                                  flags | dnnl.USE_GLOBAL_STATS)
            mask = spec.scratch(fwd.md(dnnl.QUERY_WORKSPACE_MD))
            fwd_args.append((dnnl.ARG_WORKSPACE, mask))
            args.append((dnnl.ARG_WORKSPACE, mask))
        spec.step(fwd, fwd_args)
    first = len(spec.steps)
    spec.step(pd, args)
    spec.reorder_out(dxm)

    if not clipped:
        def hooks(b, workspace):
            def before():
                _variance_from_inv(b, workspace, spec)
            return before, None
        return spec, pd, hooks
    return spec, pd, _clipped_drelu(spec, x, order, first, dym[0],
                                    0.0 if lo is None else float(lo),
                                    math.inf if hi is None else float(hi))


def _variance_from_inv(b, workspace, spec) -> None:
    """The workspace's float32 variance = 1 / inv_variance**2 (read with epsilon 0)."""
    inv = _vec(b["inv_variance"])
    with np.errstate(divide="ignore", over="ignore"):
        _ws_view(workspace, spec, "variance")[...] = 1.0 / (inv * inv)


def _clipped_drelu(spec, x, order, first, dy_index, lo, hi):
    """Hooks composing batchnorm inference -> clipped RELU_BWD -> batchnorm backward:
    ``spec``'s steps before ``first`` (the reorders in and the inference primitive writing
    the float32 y) run as a separate program before the main one (its steps from
    ``first``: the backward primitive), and between them the float32 copy of dy is zeroed
    where ``lo < y < hi`` fails (a NaN y masks, as RELU_BWD's comparison does)."""
    pre = None if spec.dry else spec.program(spec.steps[:first])
    spec.pre_steps, spec.steps = spec.steps[:first], spec.steps[first:]
    dims = tuple(x.dims)
    strides = tuple(4 * s for s in packed_strides(dims, _order(x) if order is None else order))
    y_off, _ = spec.offset("y")
    dy_off = spec.mems[dy_index][2]

    def hooks(b, workspace):
        def before():
            _variance_from_inv(b, workspace, spec)
            pre.run(tuple(b[r] for r in spec.roles), workspace)
            y = np.ndarray(dims, np.float32, workspace, y_off, strides)
            g = np.ndarray(dims, np.float32, workspace, dy_off, strides)
            inside = np.greater(y, lo)
            inside &= np.less(y, hi)
            np.copyto(g, 0.0, where=~inside)
        return before, None
    return hooks


_BN_BUILDERS = {
    Pattern.BN_INFERENCE_VARIANCE: _bn_inference_variance,
    Pattern.BN_TRAINING: _bn_training,
    Pattern.BN_TRAINING_RELU: _bn_training,
    Pattern.BN_BACKWARD: _bn_backward,
    Pattern.BN_INFERENCE_DRELU_BACKWARD: _bn_backward,
}




class _Bn:
    """One batchnorm problem and its candidates: the user's layout and, for activations
    that are not channels-last, channels-last copies (reordered in and out: oneDNN's jit
    batchnorm takes only blocked or channels-last memory; on plain NCHW it runs its generic
    ``ncsp_bnorm:any``), each for batchnorm training + ReLU with ``fuse_norm_relu`` and with
    the ReLU as a separate pass."""

    def __init__(self, match):
        self.match = match
        self.builder = _BN_BUILDERS[match.pattern]
        x = match.tensors["x"]
        orders = [("", None)]
        if x.strides[1] != 1 and x.dims[1] > 1:
            rank = len(x.dims)
            orders.append(("+nhwc", (0,) + tuple(range(2, rank)) + (1,)))
        p = match.params
        fusable = (match.pattern == Pattern.BN_TRAINING_RELU
                   and p.get("relu_lower_clip") in (None, 0.0) and p.get("relu_upper_clip") is None)
        self.impls = []                      # (name, order, fuse, workspace bytes, jit?)
        for suffix, order in orders:
            for fuse in ((True, False) if fusable else (False,)):
                spec, pd, _ = self.builder(match, order, fuse, True)
                name = "+".join(spec.names) + suffix
                if match.pattern == Pattern.BN_TRAINING_RELU:
                    name += "+fuse_norm_relu" if fuse else "+relu"
                self.impls.append((name, order, fuse, spec.ws.size, "jit" in pd.impl_name))

    def candidates(self) -> list:
        return [_tuning.Candidate(name, i, ws) for i, (name, _o, _f, ws, _j)
                in enumerate(self.impls)]

    def heuristic(self, fitting, limit):
        """Without timing: a jit implementation before the generic ones (``ncsp_bnorm``,
        ``nspc_bnorm``: 5-20x slower in training and backward, and fuse_norm_relu 10x
        slower than a separate ReLU pass there); batchnorm inference keeps the user's
        layout (one pass without barriers: the generic kernel runs at memory speed and the
        two reorders cost more)."""
        if self.match.pattern == Pattern.BN_INFERENCE_VARIANCE:
            return fitting[0]
        jit = [c for c in fitting if self.impls[c.id][4]]
        if jit:
            return jit[0]
        unfused = [c for c in fitting if not self.impls[c.id][2]]
        return (unfused or fitting)[0]

    def build(self, candidate):
        _, order, fuse, _, _ = self.impls[candidate.id]
        return self.builder(self.match, order, fuse, False)
# ------------------------------------------------------------------ the engine
class OnednnEngine(ProviderEngine):
    """``ONEDNN_ENGINE``: every pattern through oneDNN; declines where oneDNN is absent or
    has no implementation (``CPU_ENGINE`` then runs the graph)."""

    name = ONEDNN_ENGINE_NAME
    notes = ("all nine patterns through oneDNN primitives (library: runtime.load_onednn); "
             "FLOAT/HALF/BFLOAT16 I/O, per-channel tensors FLOAT; any strides; weights "
             "reordered to oneDNN's blocked layout; HALF computed in float32 (reorders in the "
             "workspace), strided activations on dense copies; declines (to CPU_ENGINE) where "
             "oneDNN has only its reference implementation; NaN propagates through ReLU (a "
             "NaN input gives NaN)")

    def __init__(self, provider):
        super().__init__(provider)
        self._convs = {}

    @staticmethod
    def _library():
        if dnnl is None:
            raise _decline("the oneDNN binding (runtime._onednn) is not built")
        state = load_onednn()
        if not state.ok:
            raise _decline(f"oneDNN is not available: {state.reason}")
        return state

    def _conv(self, match) -> _Conv:
        key = match.signature
        conv = self._convs.get(key)
        if conv is None:
            conv = self._convs[key] = _Conv(match)
            if len(self._convs) > 64:                      # a bounded cache of problems
                self._convs.pop(next(iter(self._convs)))
        return conv

    def knobs(self, match):
        self._library()
        if conv_roles(match.pattern) is None:
            return _tuning.engine_knobs(match, _Bn(match).candidates())
        return _tuning.engine_knobs(match, self._conv(match).candidates())

    def perf_device(self) -> str:
        """The perf-db key's device: CPU model, oneDNN version, ISA and threads."""
        state = self._library()
        major, minor, patch = state.version[:3]
        return (f"{self.provider.describe()['device']}; oneDNN {major}.{minor}.{patch} "
                f"{state.version[4]}; isa {state.isa}; {dnnl.max_threads()} threads")

    def build(self, match, engine, knobs, perfdb) -> ProviderPlan:
        self._library()
        if conv_roles(match.pattern) is None:
            bn = _Bn(match)
            choice = _tuning.choose(self, match, bn.candidates(), knobs, perfdb,
                                    heuristic=bn.heuristic,
                                    measure=lambda fitting: _benchmark_bn(bn, fitting),
                                    device=self.perf_device())
            spec, _, hooks = bn.build(choice.candidate)
            plan = OnednnPlan(match, spec.program(), spec,
                              _explain(choice, "a jit implementation before oneDNN's generic "
                                       "ones (batchnorm inference: the user's layout)"),
                              hooks=hooks)
            plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
            return plan
        conv = self._conv(match)

        def heuristic(fitting, limit):
            return fitting[0]

        def measure(fitting):
            return _benchmark(conv, fitting)

        choice = _tuning.choose(self, match, conv.candidates(), knobs, perfdb,
                                heuristic=heuristic, measure=measure,
                                device=self.perf_device())
        _, pd, _, variant = conv.impls[choice.candidate.id]
        program, spec = conv.program(pd, variant=variant)
        plan = OnednnPlan(match, program, spec, _explain(choice), hooks=_clip_hooks(conv),
                          conv=conv, pd=pd, variant=variant)
        plan.benchmarked, plan.perfdb_hit = choice.benchmarked, choice.perfdb_hit
        return plan


def _scratch_array(tensor) -> np.ndarray:
    """U(-1, 1) values with the tensor's dims and strides (for timing runs)."""
    from ...runtime import DeviceArray
    arr = DeviceArray(tensor.dims, numpy_dtype(tensor.data_type), tensor.strides)
    arr.view[...] = np.random.default_rng(0).uniform(-1, 1, arr.dims)
    return arr.view


def _benchmark(conv: _Conv, fitting):
    """Time each candidate's program on scratch tensors: (fastest, its ms, trials)."""
    t = conv.match.tensors
    roles = [conv.roles.x, conv.roles.w, conv.roles.y] + ([conv.bias_role] if conv.bias_role else [])
    try:
        arrays = {r: _scratch_array(t[r]) for r in roles}
    except MemoryError:
        raise DeviceError(f"{ONEDNN_ENGINE_NAME}: benchmarking conv_{conv.direction} cannot "
                          "allocate its scratch tensors; build without "
                          f"'{_knobs.BENCHMARKING}'") from None
    times = []
    for cand in fitting:
        _, pd, _, variant = conv.impls[cand.id]
        program, spec = conv.program(pd, variant=variant)
        ws = np.empty(program.workspace_size, np.uint8) if program.workspace_size else None
        args = tuple(arrays[r] for r in spec.roles)
        program.run(args, ws)                                   # warm-up
        runs, start = [], time.perf_counter()
        while len(runs) < _BENCH_RUNS and time.perf_counter() - start < _BENCH_BUDGET_S:
            t0 = time.perf_counter()
            program.run(args, ws)
            runs.append((time.perf_counter() - t0) * 1e3)
        times.append(min(runs))
        log.info("benchmark %s: %s %.3f ms", conv.direction, cand.name, times[-1])
        program.close()
    best = _tuning.fastest(times)
    return fitting[best], times[best], tuple((c.name, ms) for c, ms in zip(fitting, times))


def _benchmark_bn(bn: _Bn, fitting):
    """Time each batchnorm candidate's plan (its host work included) on scratch tensors:
    (fastest, its ms, trials)."""
    t = bn.match.tensors
    arrays = {}
    try:
        for role, tensor in t.items():
            if not tensor.is_virtual:
                arrays[role] = _scratch_array(tensor)
                if math.prod(tensor.dims) == tensor.dims[1]:       # statistics: positive
                    np.abs(arrays[role], out=arrays[role])
                    arrays[role] += 0.5
    except MemoryError:
        raise DeviceError(f"{ONEDNN_ENGINE_NAME}: benchmarking batchnorm cannot allocate its "
                          f"scratch tensors; build without '{_knobs.BENCHMARKING}'") from None
    times = []
    for cand in fitting:
        spec, _, hooks = bn.build(cand)
        plan = OnednnPlan(bn.match, spec.program(), spec, cand.name, hooks=hooks)
        ws = np.empty(plan.workspace_size, np.uint8) if plan.workspace_size else None
        plan.run(arrays, ws)                                    # warm-up
        runs, start = [], time.perf_counter()
        while len(runs) < _BENCH_RUNS and time.perf_counter() - start < _BENCH_BUDGET_S:
            t0 = time.perf_counter()
            plan.run(arrays, ws)
            runs.append((time.perf_counter() - t0) * 1e3)
        times.append(min(runs))
        log.info("benchmark batchnorm: %s %.3f ms", cand.name, times[-1])
        plan.program.close()
    best = _tuning.fastest(times)
    return fitting[best], times[best], tuple((c.name, ms) for c, ms in zip(fitting, times))


def _explain(choice, rule=None) -> _tuning.Algorithm:
    """``plan.algorithm``: oneDNN's implementation name and why it runs."""
    names = [c.name for c in choice.fitting]
    name = choice.candidate.name
    if choice.benchmarked:
        reason = (f"benchmarked: the fastest of {len(choice.trials)} oneDNN implementations "
                  f"(the minimum of up to {_BENCH_RUNS} runs each within {_BENCH_BUDGET_S} s, "
                  "after a warm-up)")
        trials = choice.trials
    elif choice.perfdb_hit:
        reason = "perf db: the benchmarked winner remembered for this problem"
        trials = tuple((n, None) for n in names)
    elif rule is not None:
        reason = (f"{rule}: rank {names.index(name) + 1} of the {len(names)} candidates "
                  f"within the workspace limit of {choice.limit} bytes")
        trials = tuple((n, None) for n in names)
    else:
        reason = (f"oneDNN's own preference order, rank {names.index(name) + 1} of the "
                  f"{len(names)} implementations within the workspace limit of "
                  f"{choice.limit} bytes")
        trials = tuple((n, None) for n in names)
    return _tuning.Algorithm(name, reason, trials)
