"""oneDNN memory descriptors of the graph's tensors, and ``ProgramSpec``: the memories
and steps of a ``runtime._onednn.Program`` under construction, its workspace pieces
(scratchpads, copies, staged per-channel vectors)."""
from __future__ import annotations

import math

import numpy as np

from ...._errors import NotSupportedError
from ...._layout import packed_strides, stride_order, strides_match
from ...._types import DataType
from ....runtime import load_onednn
from .. import _kernels

try:
    from ....runtime import _onednn as dnnl
except ImportError:          # a source tree built without it: the engine declines
    dnnl = None

__all__ = ["ONEDNN_ENGINE_NAME", "CHANNEL_BLOCKED", "dnnl", "decline", "dnnl_type", "user_md",
           "memory_order", "packed_md", "is_dense", "bf16_convolutions", "widened",
           "compute_type", "is_native", "channel_md", "channels_last_md", "any_md",
           "channel_like", "Workspace", "ProgramSpec", "ws_view", "converted_view", "vec",
           "staged", "put"]

ONEDNN_ENGINE_NAME = "ONEDNN_ENGINE"
_ALIGN = 64                  # bytes: oneDNN's own alignment of buffers it allocates

# ``order`` for oneDNN's channel-blocked layout nC[d][h]w16c (channels in blocks of 16
# innermost, padded with zeros to a multiple of 16): reordering plain NCHW to it and back
# costs far less than the transposition to NHWC, and oneDNN's jit batchnorm takes it
CHANNEL_BLOCKED = "nC16c"
_BLOCKED_TAGS = {3: "FORMAT_TAG_NCW16C", 4: "FORMAT_TAG_NCHW16C", 5: "FORMAT_TAG_NCDHW16C"}

_DNNL_TYPES = {DataType.FLOAT: "DATA_F32", DataType.HALF: "DATA_F16",
               DataType.BFLOAT16: "DATA_BF16"}


def decline(why: str):
    return NotSupportedError(f"{ONEDNN_ENGINE_NAME}: {why}")


def dnnl_type(tensor) -> int:
    name = _DNNL_TYPES.get(tensor.data_type)
    if name is None:
        raise decline(f"tensor '{tensor.name}' is {tensor.data_type.name}; oneDNN takes FLOAT, "
                       "HALF and BFLOAT16")
    return getattr(dnnl, name)


def user_md(tensor):
    """The user's memory of ``tensor`` exactly: its dims and element strides."""
    if any(d == 0 for d in tensor.dims):
        raise decline(f"tensor '{tensor.name}' has a zero dim {tuple(tensor.dims)}")
    return dnnl.MemoryDesc(tuple(tensor.dims), dnnl_type(tensor), strides=tuple(tensor.strides))


def memory_order(tensor) -> tuple:
    dims = tuple(tensor.dims)
    return stride_order(dims, tuple(tensor.strides))


def packed_md(tensor, data_type=None, order=None):
    """A packed buffer in ``tensor``'s memory order (or ``order``: a permutation, or
    ``CHANNEL_BLOCKED``), of ``data_type`` (default the tensor's): for an intermediate
    oneDNN writes, or a dense copy of strided memory."""
    dims = tuple(tensor.dims)
    data_type = dnnl_type(tensor) if data_type is None else data_type
    if order == CHANNEL_BLOCKED:
        tag = _BLOCKED_TAGS.get(len(dims))
        if tag is None:
            raise decline(f"tensor '{tensor.name}' has {len(dims)} dims; the blocked layout "
                          "takes 3 to 5")
        return dnnl.MemoryDesc(dims, data_type, tag=getattr(dnnl, tag))
    order = memory_order(tensor) if order is None else order
    return dnnl.MemoryDesc(dims, data_type, strides=packed_strides(dims, order))


def is_dense(tensor) -> bool:
    """Whether ``tensor`` is packed in its own memory order (no gaps)."""
    dims = tuple(tensor.dims)
    return strides_match(dims, packed_strides(dims, memory_order(tensor)), tuple(tensor.strides))


def bf16_convolutions() -> bool:
    """Whether the loaded oneDNN has bfloat16 convolution kernels on this CPU: a
    1x16x8x8 3x3 problem has an implementation other than the reference one in each
    direction (forward, backward data, backward weights). oneDNN 3.2 has them from
    AVX-512 (``avx512_core``, emulating the bf16 instructions below
    ``avx512_core_bf16``); on an AVX2 CPU it offers none, and every BFLOAT16 convolution
    runs float32 primitives on float32 copies (``widened``). Asked once per process."""
    global _BF16_CONVOLUTIONS
    if _BF16_CONVOLUTIONS is None:
        _BF16_CONVOLUTIONS = _probe_bf16()
    return _BF16_CONVOLUTIONS


_BF16_CONVOLUTIONS = None


def _probe_bf16() -> bool:
    if dnnl is None or not load_onednn().ok:
        return False        # no oneDNN: nothing runs on it (the engine declines)
    bf16 = dnnl.DATA_BF16
    x, w, y = (dnnl.MemoryDesc(d, bf16, tag=dnnl.FORMAT_TAG_ANY)
               for d in ((1, 16, 8, 8), (16, 16, 3, 3), (1, 16, 8, 8)))
    geometry = ((1, 1), (0, 0), (1, 1), (1, 1))
    try:
        fwd = dnnl.conv_forward(dnnl.PROP_FORWARD_TRAINING, x, w, None, y, *geometry, [])
        pds = [fwd, dnnl.conv_backward_data(x, w, y, *geometry, fwd),
               dnnl.conv_backward_weights(x, w, y, *geometry, fwd)]
    except NotSupportedError:
        return False

    def optimized(pd) -> bool:
        while pd.impl_name.startswith("ref:"):
            if not pd.next_impl():
                return False
        return True
    return all(optimized(pd) for pd in pds)


def widened(tensor) -> bool:
    """Whether oneDNN computes ``tensor``'s values in float32 copies of it rather than in
    its own type: HALF always (oneDNN 3.2 has f16 convolution and batchnorm kernels only
    on CPUs with AVX512-FP16 / AMX-FP16), BFLOAT16 where it has no bf16 convolution
    kernels (``bf16_convolutions``). The 16-bit -> float32 conversion is exact and the
    result's conversion back rounds once, as the tolerance table assumes
    (``ProgramSpec.converted``)."""
    if tensor.data_type == DataType.HALF:
        return True
    return tensor.data_type == DataType.BFLOAT16 and not bf16_convolutions()


def compute_type(tensor) -> int:
    """The data type oneDNN computes ``tensor``'s values in: float32 where ``widened``,
    else its own."""
    return dnnl.DATA_F32 if widened(tensor) else dnnl_type(tensor)


def is_native(tensor) -> bool:
    """Whether a primitive can take ``tensor``'s user memory as it is (dense, computed in
    its own type); else it runs on a dense copy reordered in (and out)."""
    return not widened(tensor) and is_dense(tensor)


def channel_md(tensor):
    """A per-channel (1, C, 1, 1[, 1]) FLOAT tensor as oneDNN's 1-D (C,) f32 memory."""
    c = tensor.dims[1]
    if tensor.data_type != DataType.FLOAT or math.prod(tensor.dims) != c:
        raise decline(f"per-channel tensor '{tensor.name}' is {tensor.data_type.name} with dims "
                       f"{tuple(tensor.dims)}; oneDNN takes FLOAT (1, C, 1, 1)")
    return dnnl.MemoryDesc((c,), dnnl.DATA_F32, strides=(tensor.strides[1],))


class Workspace:
    """Byte offsets of the pieces of one execution's workspace, each 64-byte aligned."""

    def __init__(self):
        self.size = 0

    def add(self, nbytes: int) -> int:
        off = -(-self.size // _ALIGN) * _ALIGN
        self.size = off + int(nbytes)
        return off


class ProgramSpec:
    """Memories and steps of a ``_onednn.Program`` under construction."""

    def __init__(self, roles, *, dry=False):
        self.roles = tuple(roles)
        self.mems, self.steps, self.ws = [], [], Workspace()
        self.index = {}
        self.dry = dry               # only sizes: no primitive is created (no JIT)
        self.copy_in, self.copy_out = [], []     # per-channel roles staged in the workspace
        # widened (HALF, BFLOAT16) arrays converted to / from float32 workspace copies by
        # the engine's exact conversion (``converted``): role -> (dims, element strides of
        # the copy, the user's element kind)
        self.convert_in, self.convert_out = {}, {}
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
        md = channel_md(tensor) if dtype is None else channel_like(tensor)
        if tensor.strides[1] == 1 or tensor.dims[1] == 1:
            return self.array(role, md)
        c = tensor.dims[1]
        dense = dnnl.MemoryDesc((c,), md.data_type, strides=(1,))
        index = self.scratch(dense, "copy:" + role)
        (self.copy_out if output else self.copy_in).append(role)
        return index

    def converted(self, role, tensor, md, *, output=False) -> int:
        """A float32 copy of the ``widened`` (HALF or BFLOAT16) user array ``role``
        (``tensor``'s dims, packed in its memory order; ``md``: that memory as the
        primitive sees it, e.g. grouped weights' (G, K/G, C/G, ...) view of it) in the
        workspace, filled from the user's array before the program (input) or emptied into
        it after (``output``) by the engine's exact conversion (``_kernels.convert``,
        ``staged``): oneDNN 3.2 converts float16 in its generic reorder (``simple:any``),
        10-50x slower here than float32 reorders."""
        dims = tuple(tensor.dims)
        index = self.scratch(md, "f32:" + role)
        (self.convert_out if output else self.convert_in)[role] = (
            dims, packed_strides(dims, memory_order(tensor)), _KINDS[tensor.data_type])
        return index

    @property
    def host_copies(self) -> bool:
        """Whether ``staged`` has per-channel copies or conversions to run."""
        return bool(self.copy_in or self.copy_out or self.convert_in or self.convert_out)

    def broadcast(self, index, rank) -> int:
        """The (C,) per-channel memory ``index`` (``channel``, ``scratch``) again, as a
        (1, C, 1, ...) memory of ``rank`` dims (a binary primitive's per-channel operand)."""
        md, kind, ref = self.mems[index]
        c = md.dims[0]
        dims = (1, c) + (1,) * (rank - 2)
        self.mems.append((dnnl.MemoryDesc(dims, md.data_type, strides=(c,) + (1,) * (rank - 1)),
                          kind, ref))
        return len(self.mems) - 1

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

    def activation(self, role, tensor, order=None, *, data_type=None, share=None):
        """The memory a primitive takes for the activations ``tensor``: the user's array
        where it is dense, packed in ``order`` (default its own) and computed in its own
        type (``is_native``), else a dense copy (packed in ``order``: a permutation or
        ``CHANNEL_BLOCKED``; float32 for HALF or
        ``data_type``), for an input filled by ``reorder_in``, for an output emptied by
        ``reorder_out``; ``share``: another ``activation``'s result whose copy this one
        takes over where the two descriptors are equal (an output written in place of an
        input the primitive has finished with). Returns (memory index, its descriptor, the
        user's memory index)."""
        own = user_md(tensor)
        user = self.array(role, own)
        dims = tuple(tensor.dims)
        if (data_type is None and is_native(tensor) and (
                order is None or (order != CHANNEL_BLOCKED and strides_match(
                    dims, packed_strides(dims, order), tuple(tensor.strides))))):
            return user, own, user
        md = packed_md(tensor, compute_type(tensor) if data_type is None else data_type,
                        order)
        if share is not None and share[0] != share[2] and share[1].equals(md):
            return share[0], md, user
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

    def program(self, steps=None, repeat=None):
        return dnnl.Program(self.mems, self.steps if steps is None else steps,
                            len(self.roles), self.ws.size, repeat)


def channels_last_md(tensor, data_type=None):
    """A packed channels-last (NHWC / NDHWC) buffer with ``tensor``'s dims and type (or
    ``data_type``)."""
    order = (0,) + tuple(range(2, len(tensor.dims))) + (1,)
    return packed_md(tensor, data_type, order)


def any_md(tensor):
    """``tensor``'s dims in its compute type, the layout left to the primitive
    (``format_tag_any``): oneDNN picks the one its fastest kernel reads (nChw16c /
    nCdhw16c for most convolutions)."""
    return dnnl.MemoryDesc(tuple(tensor.dims), compute_type(tensor), tag=dnnl.FORMAT_TAG_ANY)


def channel_like(tensor):
    """A bias (1, K, 1, 1) as oneDNN's 1-D (K,) memory of its own data type."""
    k = tensor.dims[1]
    if math.prod(tensor.dims) != k:
        raise decline(f"bias '{tensor.name}' has dims {tuple(tensor.dims)}; oneDNN takes (1, K, 1, 1)")
    return dnnl.MemoryDesc((k,), dnnl_type(tensor), strides=(tensor.strides[1],))


def ws_view(workspace, spec, name) -> np.ndarray:
    """The float32 per-channel vector ``name`` inside one execution's workspace."""
    off, nbytes = spec.offset(name)
    return workspace[off:off + nbytes].view(np.float32)


def converted_view(workspace, spec, role) -> np.ndarray:
    """The float32 copy ``role`` of ``ProgramSpec.converted`` inside one execution's
    workspace, as an array of the user tensor's dims."""
    off, nbytes = spec.offset("f32:" + role)
    dims, strides, _ = (spec.convert_in.get(role) or spec.convert_out[role])
    return np.lib.stride_tricks.as_strided(workspace[off:off + nbytes].view(np.float32),
                                           dims, tuple(4 * s for s in strides))


def vec(a) -> np.ndarray:
    """A (1, C, 1, 1) array as a float64 vector (per-channel arithmetic in float64)."""
    return np.asarray(a, np.float64).reshape(-1)


def put(out, values) -> None:
    out[...] = values.reshape(out.shape)


def staged(spec, hooks):
    """``hooks`` with the per-channel copies (``ProgramSpec.channel``) and the 16-bit <->
    float32 conversions (``ProgramSpec.converted``: ``_kernels.convert`` on oneDNN's OpenMP
    team) of ``spec`` added: inputs copied / converted into the workspace first, outputs
    copied / converted out before ``after`` runs (a RELU_FWD hook then sees the user's
    output)."""
    ins, outs = bool(spec.copy_in or spec.convert_in), bool(spec.copy_out or spec.convert_out)

    def staged(b, workspace):
        before, after = hooks(b, workspace) if hooks else (None, None)

        def copy_in():
            for role in spec.copy_in:
                off, nbytes = spec.offset("copy:" + role)
                dst = workspace[off:off + nbytes].view(b[role].dtype)
                dst[...] = b[role].reshape(-1)
            for role in spec.convert_in:
                _kernels.convert(b[role], spec.convert_in[role][2],
                                 converted_view(workspace, spec, role), _F32, team=True)
            if before is not None:
                before()

        def copy_out():
            for role in spec.copy_out:
                off, nbytes = spec.offset("copy:" + role)
                out = b[role]
                out[...] = workspace[off:off + nbytes].view(out.dtype).reshape(out.shape)
            for role in spec.convert_out:
                _kernels.convert(converted_view(workspace, spec, role), _F32, b[role],
                                 spec.convert_out[role][2], team=True)
            if after is not None:
                after()
        return (copy_in if ins or before else None, copy_out if outs or after else None)
    return staged


# ``ProgramSpec.converted`` arrays: the user's HALF / BFLOAT16 (2-byte) elements, float32
# copies
_KINDS = {DataType.HALF: _kernels.BIAS_RELU_KINDS["float16"],
          DataType.BFLOAT16: _kernels.BIAS_RELU_KINDS["bfloat16"]}
_F32 = _kernels.BIAS_RELU_KINDS["float32"]
