"""Batchnorm of the oneDNN engine: the engine's own batchnorm rows (``_rows``, every
pattern; ``_rows_dense`` on dense copies), oneDNN's batchnorm for inference only (the
batchnorm primitive, or one binary primitive; ``BN_BUILDERS`` says why) and ``Bn``, a
problem's candidates and the heuristic choosing among them."""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple

import numpy as np

from ...._layout import packed_strides
from ...._types import DataType
from ....patterns import Pattern
from ... import _tuning
from .. import _kernels
from ...._errors import NotSupportedError
from ._program import (CHANNEL_BLOCKED, ProgramSpec, channel_md, decline, dnnl,
                       dnnl_type, ws_view)

__all__ = ["Bn", "BN_BUILDERS"]


def _primitive_epsilon(p) -> float:
    """The epsilon of a oneDNN batchnorm (or its binary inference), or a decline: oneDNN
    takes it, and computes ``1 / sqrt(variance + epsilon)``, in float32, where an epsilon
    below the smallest normal float32 (1.18e-38) rounds to 0 or leaves no finite factor for
    a constant channel (y was NaN at 1e-50, the rows and CPU_ENGINE give the bias)."""
    eps = float(p["epsilon"])
    if not eps >= _F32_TINY:
        raise decline(f"epsilon = {eps!r}: oneDNN computes 1/sqrt(variance + epsilon) in "
                      f"float32, which needs epsilon >= {_F32_TINY!r} (float32's smallest "
                      "normal)")
    return eps


_F32_TINY = float(np.finfo(np.float32).tiny)
_F32 = _kernels.BIAS_RELU_KINDS["float32"]


def _bn_inference_variance(match, order, dry):
    t, p = match.tensors, match.params
    roles = ["x", "y", "mean", "variance", "scale", "bias"]
    eps = _primitive_epsilon(p)
    spec = ProgramSpec(roles, dry=dry)
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


def _bn_inference_binary(match, order, dry):
    """Batchnorm inference as one pass of oneDNN's binary primitive on the user's layout:
    ``y = ((x - mean) * a) + bias`` (binary SUB with two binary post-ops), where
    ``a = scale / sqrt(variance + epsilon)`` is computed per channel on the host (float64,
    rounded once to float32; ``_kernels.bn_inference_factor``) before each execution. On
    plain NCHW, oneDNN's batchnorm has only its generic ``ncsp_bnorm`` (5-20x slower),
    while its jit binary kernel broadcasts per-channel operands over a plain layout at
    memory speed. The subtraction comes first,
    as in the batchnorm primitive, so a large mean does not cancel."""
    t, p = match.tensors, match.params
    eps = _primitive_epsilon(p)
    for role in ("variance", "scale"):
        channel_md(t[role])                           # declines a non-FLOAT statistic
    spec = ProgramSpec(["x", "y", "mean", "variance", "scale", "bias"], dry=dry)
    x, y = spec.activation("x", t["x"], order), spec.activation("y", t["y"], order)
    rank = len(t["x"].dims)
    c = t["x"].dims[1]
    mean = spec.broadcast(spec.channel("mean", t["mean"]), rank)
    bias = spec.broadcast(spec.channel("bias", t["bias"]), rank)
    a = spec.broadcast(spec.scratch(dnnl.MemoryDesc((c,), dnnl.DATA_F32, strides=(1,)), "a"),
                       rank)
    c_md = spec.mems[a][0]
    pd = dnnl.binary(dnnl.BINARY_SUB, x[1], spec.mems[mean][0], y[1],
                     [(dnnl.BINARY_MUL, c_md), (dnnl.BINARY_ADD, c_md)])
    post = dnnl.ARG_ATTR_MULTIPLE_POST_OP_BASE
    spec.reorder_in(x)
    spec.step(pd, [(dnnl.ARG_SRC, x[0]), (dnnl.ARG_SRC_1, mean), (dnnl.ARG_DST, y[0]),
                   (post | dnnl.ARG_SRC_1, a), (2 * post | dnnl.ARG_SRC_1, bias)])
    spec.reorder_out(y)

    def hooks(b, workspace):
        def before():
            _kernels.bn_inference_factor(b["scale"].reshape(-1), b["variance"].reshape(-1), eps,
                                         ws_view(workspace, spec, "a"))
        return before, None
    return spec, pd, hooks


_STAT_ROLES = ("inv_variance", "prev_running_mean", "next_running_mean", "prev_running_variance",
               "next_running_variance", "scale", "bias")


# element kinds of ``_kernels.bn_rows`` by data type
_ROWS_KINDS = {DataType.FLOAT: 0, DataType.BFLOAT16: 1, DataType.HALF: 2}


_ACTIVATIONS = ("x", "y", "dy", "dx")


def _rows_fit(match, *, dense=False) -> int:
    """The element kind ``_kernels.bn_rows`` runs ``match`` with, or a decline: every
    activation of one data type and either channels-last (C > 1, the C values of a pixel
    one packed run, the pixels at one stride: NHWC, NDHWC; ``_channels_last``) or
    channels-first with its spatial elements one packed run (NCHW, NCDHW) or, for
    inference, packed runs at one stride (NCHW cropped in W; ``_runs``); every
    per-channel tensor a dense FLOAT vector. ``dense``: the memory the rows cannot read
    as it is goes to dense copies (``_dense_roles``), and a problem with none declines
    (the rows without copies take it)."""
    t = match.tensors
    acts = [t[r] for r in _ACTIVATIONS if r in t and not t[r].is_virtual]
    types = {a.data_type for a in acts}
    if len(types) != 1 or next(iter(types)) not in _ROWS_KINDS:
        raise decline("the batchnorm rows take activations of one type, FLOAT, BFLOAT16 or "
                      "HALF")
    for a in acts:
        if any(d == 0 for d in a.dims):
            raise decline(f"tensor '{a.name}' has a zero dim {tuple(a.dims)}")
    for role, tt in t.items():
        if not tt.is_virtual and role not in _ACTIVATIONS:
            channel_md(tt)                            # declines a non-FLOAT statistic
    copies = _dense_roles(match)
    if dense and not copies:
        raise decline("the batchnorm rows read this memory as it is; no copies needed")
    if copies and not dense:
        tt = t[copies[0]]
        if copies[0] in _ACTIVATIONS:
            raise decline(f"tensor '{tt.name}' (strides {tuple(tt.strides)}): the batchnorm "
                          "rows take spatial elements in one packed run (inference: or "
                          "packed runs at one stride) or channels-last pixels")
        raise decline(f"per-channel tensor '{tt.name}' has channel stride "
                      f"{tt.strides[1]}; the batchnorm rows take dense vectors")
    return _ROWS_KINDS[next(iter(types))]


def _dense_roles(match) -> list:
    """The roles ``bn_rows`` cannot read as they are: unless every activation is
    channels-last, those activations that are not channels-last pixels where every
    activation's channels are packed (``_dense_order``), else those whose spatial elements
    are one packed run or, for inference, packed runs of the others' length at one stride
    (``_runs``: NCHW cropped in W is read as it is); per-channel tensors whose channels are
    not dense."""
    t = match.tensors
    out = []
    last = _channels_last(match)
    pixels = _dense_order(match) is not None
    c = t["x"].dims[1]
    acts = {r: tt for r, tt in t.items() if r in _ACTIVATIONS and not tt.is_virtual}
    runs = {r: _runs(tt) for r, tt in acts.items()}
    # the rows' run length (bn_rows' _runs_of): the shortest; a packed activation is
    # read as runs that long, any other must have runs of exactly that length. Inference
    # only: the sums of training and backward over runs as short as a cropped row (28
    # values) took 1.15x (training) and 0.97x (backward) the time of dense copies at
    # 32x256x28x28 float32, inference 0.4x
    whole = math.prod(t["x"].dims[2:])
    w = whole
    if match.pattern == Pattern.BN_INFERENCE_VARIANCE:
        w = min([rw[0] for rw in runs.values() if rw is not None] or [whole])
    for role, tt in sorted(t.items()):
        if tt.is_virtual:
            continue
        if role in _ACTIVATIONS:
            if last:
                continue
            if pixels:
                if not _pixels(tt, c):
                    out.append(role)
                continue
            if runs[role] is None or runs[role][0] not in (w, whole):
                out.append(role)
        elif tt.dims[1] > 1 and tt.strides[1] != 1:
            out.append(role)
    return out


def _runs(tt):
    """(w, rr) of the activation ``tt``'s (n, c) rows as ``bn_rows`` reads them (the rule of
    its ``_rows_of``): ``w`` elements packed (the innermost spatial dims; the innermost of
    size > 1 at stride 1), the dims outside them one sequence of runs ``rr`` >= ``w``
    elements apart (``rr`` = ``w``: the row is one packed run); None where they are
    neither (those rows run on a dense copy)."""
    run, split, step = 1, False, 0
    outer = 0
    for d, s in zip(reversed(tt.dims[2:]), reversed(tt.strides[2:])):
        if d == 1:
            continue
        if not split and s == run:
            run *= d
        elif not split and run > 1 and s >= run:
            split, outer, step = True, s, s * d
        elif split and s == step:
            step *= d
        else:
            return None
    return run, (outer if split else run)


def _dense_order(match):
    """The order of the activations' dense copies: channels-last (N, spatial..., C) where
    C > 1 and every activation's C values of a pixel are packed (channel stride 1, e.g. a
    channel slice with its W and H swapped), so that a copy moves whole pixels and the rows
    read every activation as channels-last pixels; else None, for channels-first
    (a channels-first copy of such memory transposes every element: 1.14x PyTorch's time
    on 32x256x28x28 with H and W swapped, 2 cores)."""
    t = match.tensors
    c = t["x"].dims[1]
    acts = [t[r] for r in _ACTIVATIONS if r in t and not t[r].is_virtual]
    if c < 2 or any(a.strides[1] != 1 for a in acts):
        return None
    rank = len(t["x"].dims)
    return (0,) + tuple(range(2, rank)) + (1,)


def _pixels(tt, c) -> bool:
    """Whether ``bn_rows`` reads the activation ``tt`` as channels-last pixels (the rule of
    its ``_pixels_of``): channel stride 1, the spatial dims one run of pixels at a stride
    >= C."""
    dims, strides = tuple(tt.dims), tuple(tt.strides)
    if strides[1] != 1:
        return False
    inner = [s for d, s in zip(dims[2:], strides[2:]) if d != 1]
    run = inner[-1] if inner else c
    if run < c:
        return False
    for d, s in zip(reversed(dims[2:]), reversed(strides[2:])):
        if d != 1 and s != run:
            return False
        run *= d
    return True


def _channels_last(match) -> bool:
    """Whether ``bn_rows`` reads every one of ``match``'s activations as channels-last
    pixels (``_pixels``; C > 1)."""
    t = match.tensors
    c = t["x"].dims[1]
    return c >= 2 and all(_pixels(t[r], c) for r in _ACTIVATIONS
                          if r in t and not t[r].is_virtual)


def _bits(a):
    """An activation as the array ``bn_rows`` reads: 16-bit types as their raw bits."""
    return a if a.dtype.itemsize == 4 else a.view(np.uint16)


def _rows(match, order, dry, *, dense=False):
    """Batchnorm through the engine's C rows (``_kernels.bn_rows``) on oneDNN's OpenMP
    team, every pattern. Channels-first: one thread runs all passes of a channel
    (statistics, then y; or the backward sums, then dx), so the later passes read from its
    cache; oneDNN 3.2's jit batchnorm takes only channel-blocked or channels-last memory;
    around it the reorders move three more copies of the tensor (2-3.5x PyTorch's time in
    backward, measured on 2 cores), and its generic ``ncsp_bnorm`` is slower still.
    Channels-last (faster than oneDNN's jit batchnorm: see above ``Bn``): the
    pixels split among the threads, per-thread partial sums added after a team barrier.
    Clipped ReLUs fuse here too. ``dense``: on dense workspace copies of the memory the
    rows cannot read as it is (``_dense_roles``; ``_on_dense_copies``)."""
    t, p = match.tensors, match.params
    kind = _rows_fit(match, dense=dense)
    pat = match.pattern
    x = t["x"]
    c = x.dims[1]
    m = x.dims[0] * math.prod(x.dims[2:])
    real = {r for r, tt in t.items() if not tt.is_virtual}
    spec = ProgramSpec(sorted(real), dry=dry)
    copies = _dense_roles(match) if dense else []
    pixels = _dense_order(match)
    orders = {}                       # role -> its copy's element strides
    for role in copies:
        tt = t[role]
        dims = tuple(tt.dims)
        order = pixels if role in _ACTIVATIONS and pixels else tuple(range(len(dims)))
        orders[role] = packed_strides(dims, order)
        spec.scratch(dnnl.MemoryDesc(dims, dnnl_type(tt), strides=orders[role]),
                     "dense:" + role)
    rows = _kernels.bn_rows
    if pat in (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU):
        eps = float(p["epsilon"])
        if m < 2 or not eps > 0:
            raise decline(f"N*spatial = {m}, epsilon = {eps!r}; CPU_ENGINE reports them")
        momentum = p.get("momentum")
        if ("next_running_mean" in real or "next_running_variance" in real) and momentum is None:
            raise decline("running statistics without a momentum; CPU_ENGINE reports it")
        mom = 0.0 if momentum is None else float(momentum)
        act = pat == Pattern.BN_TRAINING_RELU
        lo, hi = _relu_clips(p) if act else (0.0, math.inf)

        def hooks(b, workspace):
            user_mu = b["mean"].reshape(-1) if "mean" in real else None
            g = {r: b[r].reshape(-1) for r in _STAT_ROLES if r in b}
            x_, y_ = _bits(b["x"]), _bits(b["y"])

            def before():
                # the biased variance (and a virtual mean): C floats made per execution,
                # not workspace, so the plan needs none and a repeated pack's launch is
                # reused whole (a workspace per execution made it anew: 2.5 of 16 us of a
                # tiny training batchnorm)
                var = np.empty(c, np.float64)   # beyond FLT_MAX too (x ~ 1e20)
                mu = user_mu if user_mu is not None else np.empty(c, np.float32)
                rows(_kernels.BN_ROWS_TRAINING, x_, y_, kind, scale=g["scale"],
                     bias=g["bias"], mean_out=mu, variance_out=var, epsilon=eps, act=act,
                     lower=lo, upper=hi)
                _kernels.bn_training_statistics(
                    var, eps, g.get("inv_variance"), mu, mom, m / (m - 1.0),
                    g.get("prev_running_mean"), g.get("next_running_mean"),
                    g.get("prev_running_variance"), g.get("next_running_variance"))
            before.compiled_only = True         # _plan.quiet: no NumPy warning to silence
            return before, None
    elif pat == Pattern.BN_INFERENCE_VARIANCE:
        eps = float(p["epsilon"])
        if not eps > 0:
            raise decline(f"epsilon = {eps!r}; CPU_ENGINE reports it")

        def hooks(b, workspace):
            # the rows on the bound arrays as they are (16-bit ones too, per-channel ones
            # of dims (1, C, 1, ...)), a C callable: a closure over their raw-bit and 1-D
            # views took 4 of the 10 us a 3 MB pack's execution spent on the host
            return partial(rows, _kernels.BN_ROWS_INFERENCE, b["x"], b["y"], kind,
                           epsilon=eps, mean=b["mean"], variance=b["variance"],
                           scale=b["scale"], bias=b["bias"]), None
    else:
        act = pat == Pattern.BN_INFERENCE_DRELU_BACKWARD
        lo, hi = _relu_clips(match.params) if act else (0.0, math.inf)

        def hooks(b, workspace):
            # as inference's
            return partial(rows, _kernels.BN_ROWS_BACKWARD, b["x"], b["dx"], kind,
                           dy=b["dy"], act=act, lower=lo, upper=hi, scale=b["scale"],
                           mean=b["mean"], inv_variance=b["inv_variance"],
                           dscale=b["dscale"], dbias=b["dbias"],
                           bias=b["bias"] if act else None), None
    spec.names.append("bn_rows:"
                      + _kernels.bn_rows_isa(("float32", "bfloat16", "float16")[kind]))
    if copies:
        return spec, None, _on_dense_copies(hooks, orders, spec, _row_outputs(pat), kind)
    hooks.reads_workspace = False     # _plan: its launches copy onto a fresh workspace
    return spec, None, hooks


def _rows_dense(match, order, dry):
    """``_rows`` on dense copies of the memory the rows cannot read as it is (every
    pattern; for all but inference the only candidate there)."""
    return _rows(match, order, dry, dense=True)


def _row_outputs(pattern) -> frozenset:
    """The roles ``bn_rows`` writes in ``pattern``."""
    if pattern in (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU):
        return frozenset(("y", "mean", "inv_variance", "next_running_mean",
                          "next_running_variance"))
    if pattern == Pattern.BN_INFERENCE_VARIANCE:
        return frozenset(("y",))
    return frozenset(("dx", "dscale", "dbias"))


def _on_dense_copies(hooks, roles, spec, outputs, kind):
    """``hooks`` (``_rows``'s) run on dense workspace copies of ``roles`` (role -> the
    copy's element strides, ``"dense:" + role``): inputs copied in before the rows, outputs
    copied out after them, in the same host step. The copies are ``_kernels.convert`` of one
    element kind to itself (the bits), split among oneDNN's team: NumPy's ``copyto`` runs
    on one core (the activations' ``kind``; per-channel tensors are float32)."""
    def copy(dst, src):
        k = kind if src.dtype.itemsize == 2 else _F32
        _kernels.convert(_bits(src), k, _bits(dst), k, team=True)

    def dense_hooks(b, workspace):
        views = {}
        for role in roles:
            off, nbytes = spec.offset("dense:" + role)
            a = b[role]
            views[role] = np.lib.stride_tricks.as_strided(
                workspace[off:off + nbytes].view(a.dtype), a.shape,
                tuple(a.itemsize * st for st in roles[role]))
        rows, _ = hooks({**b, **views}, workspace)
        ins = [(views[r], b[r]) for r in roles if r not in outputs]
        outs = [(b[r], views[r]) for r in roles if r in outputs]

        def before():
            for dst, src in ins:
                copy(dst, src)
            rows()
            for dst, src in outs:
                copy(dst, src)
        before.compiled_only = True     # copies of one dtype and the rows: no FP warnings
        return before, None
    return dense_hooks


def _relu_clips(p) -> tuple[float, float]:
    """RELU_FWD / RELU_BWD bounds: lower (default 0) and upper (default +inf)."""
    lo, hi = p.get("relu_lower_clip"), p.get("relu_upper_clip")
    return (0.0 if lo is None else float(lo)), (math.inf if hi is None else float(hi))


# oneDNN's batchnorm per pattern: inference only. Training: every oneDNN 3.2 batchnorm
# sums in float32 (on x = 3e4 + N(0, 1), 16x3x64x64, its y was 2.9-5.1 off, the FLOAT
# tolerance 4e-3; the rows: 2e-4). Backward (and pattern 2): it takes inv_variance as
# variance = 1 / inv_variance**2 in float32, which is 0 or +inf for inv_variance beyond
# about 9.2e18 or below 5.4e-20 (a constant channel's inv_variance at epsilon 1e-77 is
# 3.2e38): dx all NaN. Those patterns run the rows alone (``Bn``).
BN_BUILDERS = {
    Pattern.BN_INFERENCE_VARIANCE: _bn_inference_variance,
}


# Why the channels-last rows are offered, and taken by the heuristic, for every pattern and
# data type (2 cores, batch 8, ResNet-50 shapes 64x56x56, 256x28x28, 512x14x14; best of 150
# interleaved launches of each candidate at several buffer alignments): where oneDNN 3.2's
# jit batchnorm is at its best (x, y 16 bytes past a 64-byte boundary) the rows take
# 0.75-1.09x its time in training (+ ReLU), inference and backward (0.92x in the geometric
# mean) and 0.45-0.93x in inference -> DReLU -> backward (two passes to its three); with y
# 64-byte aligned oneDNN's FLOAT jit takes 2.1-2.4x its own time and the rows do not slow
# down. Its float32 sums miss the FLOAT tolerance on offset data at batch 32 (x = 1000 +
# N(0, 1)). HALF: oneDNN 3.2 has no f16 batchnorm here and runs float32 copies made by
# reference reorders (40-140 ms a case; the rows 0.25-10 ms).


class _Impl(NamedTuple):
    """One batchnorm candidate of ``Bn``."""
    name: str                # plan.algorithm's name: the steps' implementations + variant
    order: object            # the builder's layout of the activations (None: the user's)
    workspace: int           # bytes
    jit: bool                # no oneDNN step, or a jit one (not a generic implementation)
    build: Callable          # builder(match, order, dry) -> (spec, pd, hooks)


_ROWS = (_rows, _rows_dense)


class Bn:
    """One batchnorm problem and its candidates (``impls``: ``_Impl``). Training (+ ReLU),
    backward and pattern 2: the engine's C rows (``_rows``) alone, on dense copies of
    memory they cannot read as it is (``_rows_dense``; ``BN_BUILDERS`` says why).
    Inference: the rows, on dense copies likewise (with H and W swapped oneDNN offers only
    its reference ``ref:any``, 97 ms against the copies' 4.5 ms at 32x256x28x28; a
    W-cropped NCHW x the rows read as it is, in runs of W); oneDNN's batchnorm on the
    user's layout and, for activations that are not channels-last, on channel-blocked
    (nChw16c) and channels-last copies (reordered in and
    out: oneDNN's jit batchnorm takes only blocked or channels-last memory; on plain NCHW
    it runs its generic ``ncsp_bnorm:any``); one binary primitive on the user's layout
    (``_bn_inference_binary``)."""

    def __init__(self, match):
        self.match = match
        # the C rows, on the user's memory as it is, wherever ``_rows_fit`` takes it:
        # channels-first (C = 1 too: oneDNN's generic ncsp_bnorm, all it has there, sums in
        # float32 and lost the mean of x = 1000 + N(0, 1) at 2^20 values, y off by about 1)
        # and channels-last (see the figures above this class)
        variants = [("", None, _rows), ("+dense", None, _rows_dense)]
        builder = BN_BUILDERS.get(match.pattern)
        if builder is not None:
            x = match.tensors["x"]
            orders = [("", None)]
            if x.strides[1] != 1 and x.dims[1] > 1:
                rank = len(x.dims)
                orders.append(("+nChw16c" if rank == 4 else "+blocked16c", CHANNEL_BLOCKED))
                orders.append(("+nhwc", (0,) + tuple(range(2, rank)) + (1,)))
            variants += [(suffix, order, builder) for suffix, order in orders]
            if len(orders) > 1:
                # plain layouts only: where the channel stride is 1 oneDNN's binary kernel
                # broadcasts its per-channel post-op operands wrongly (oneDNN 3.2, e.g. NCHW
                # (3, 5, 1, 1)), and its jit batchnorm runs there anyway
                variants.insert(0, ("+binary", None, _bn_inference_binary))
        self.impls = []
        declined = []
        for suffix, order, build in variants:
            try:
                spec, pd, _ = build(match, order, True)
            except NotSupportedError as exc:
                if build is builder and order is None:
                    # oneDNN takes none of this problem's layouts: the rows alone, or a
                    # decline
                    if not any(impl.build in _ROWS for impl in self.impls):
                        raise
                    break
                declined.append(exc)
                continue                       # no such variant here
            self.impls.append(_Impl("+".join(spec.names) + suffix, order, spec.ws.size,
                                    pd is None or "jit" in pd.impl_name, build))
        if not self.impls:
            raise declined[0]                  # training the rows decline: CPU_ENGINE runs it

    def candidates(self) -> list:
        return [_tuning.Candidate(impl.name, i, impl.workspace)
                for i, impl in enumerate(self.impls)]

    def heuristic(self, fitting, limit):
        """Without timing: the batchnorm rows where offered (channels-first memory: 0.5-0.95x
        PyTorch's time on the ResNet-50 shapes at batch 8, 2 cores, against 1.1-3.5x for the
        best oneDNN candidate there; channels-last at every size (see above the class): at
        batch 32, out of the caches, oneDNN's jit batchnorm was faster in some runs and
        slower in others, and its float32 sums missed the FLOAT tolerance on x = 1000 +
        N(0, 1) at 32x64x56x56 where the rows' float64-gathered tiles did not); else
        (inference, the only pattern oneDNN's batchnorm takes here) the jit batchnorm on the
        user's layout (channels-last: one pass), else the binary primitive on the user's
        layout (one pass at memory speed; the generic ``ncsp_bnorm`` is 5-20x slower and the
        reorders around a jit batchnorm cost two more passes)."""
        impl = [self.impls[c.id] for c in fitting]
        rows = [c for c, i in zip(fitting, impl) if i.build in _ROWS]
        if rows:
            return rows[0]
        own = [c for c, i in zip(fitting, impl)
               if i.build is not _bn_inference_binary and i.order is None]
        if own and self.impls[own[0].id].jit:
            return own[0]
        binary = [c for c, i in zip(fitting, impl) if i.build is _bn_inference_binary and i.jit]
        return (binary or own or fitting)[0]

    def build(self, candidate):
        impl = self.impls[candidate.id]
        return impl.build(self.match, impl.order, False)
