"""Batchnorm through oneDNN: one builder per pattern (training (+ ReLU), inference (the
batchnorm primitive, or one binary primitive), backward, inference -> DReLU -> backward),
the engine's own batchnorm rows for channels-first memory (``_rows``, every pattern) and
``Bn``, a problem's candidates (layouts, fused or separate ReLU) and the heuristic
choosing among them."""
from __future__ import annotations

import math

import numpy as np

from ...._layout import packed_strides
from ...._types import DataType
from ....patterns import Pattern
from ... import _tuning
from .. import _batchnorm, _kernels
from ...._errors import NotSupportedError
from ._program import (CHANNEL_BLOCKED, ProgramSpec, channel_md, decline, dnnl,
                       memory_order, packed_md, vec, ws_view)

__all__ = ["Bn", "BN_BUILDERS"]


def _bn_inference_variance(match, order, fuse, dry):
    t, p = match.tensors, match.params
    roles = ["x", "y", "mean", "variance", "scale", "bias"]
    eps = float(p["epsilon"])
    if not eps > 0:
        raise decline(f"epsilon = {eps!r}; CPU_ENGINE reports it")
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


def _bn_inference_binary(match, order, fuse, dry):
    """Batchnorm inference as one pass of oneDNN's binary primitive on the user's layout:
    ``y = ((x - mean) * a) + bias`` (binary SUB with two binary post-ops), where
    ``a = scale / sqrt(variance + epsilon)`` is computed per channel on the host (float64,
    rounded once to float32; ``_kernels.bn_inference_factor``) before each execution. On
    plain NCHW, oneDNN's batchnorm has only its generic ``ncsp_bnorm`` (5-20x slower),
    while its jit binary kernel broadcasts per-channel operands over a plain layout at
    memory speed. The subtraction comes first,
    as in the batchnorm primitive, so a large mean does not cancel."""
    t, p = match.tensors, match.params
    eps = float(p["epsilon"])
    if not eps > 0:
        raise decline(f"epsilon = {eps!r}; CPU_ENGINE reports it")
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


def _bn_training(match, order, fuse, dry):
    t, p = match.tensors, match.params
    x = t["x"]
    m = x.dims[0] * math.prod(x.dims[2:])
    eps = float(p["epsilon"])
    if m < 2 or not eps > 0:
        raise decline(f"N*spatial = {m}, epsilon = {eps!r}; CPU_ENGINE reports them")
    relu = match.pattern == Pattern.BN_TRAINING_RELU
    lo, hi = p.get("relu_lower_clip"), p.get("relu_upper_clip")
    real = {r for r, tt in t.items() if not tt.is_virtual}
    roles = [r for r in ("x", "y", "scale", "bias", "mean", "inv_variance", "prev_running_mean",
                         "prev_running_variance", "next_running_mean",
                         "next_running_variance") if r in real]
    spec = ProgramSpec(roles, dry=dry)
    xm = spec.activation("x", x, order)
    # y over the copy of x where both are copies (oneDNN's batchnorm works in place)
    ym = spec.activation("y", t["y"], order, share=xm)
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
            channel_md(t[role])                       # declines a non-FLOAT statistic
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

    mom = 0.0 if momentum is None else float(momentum)

    def hooks(b, workspace):
        def after():
            # inv_variance, the running statistics and the non-finite check: one C loop
            var = ws_view(workspace, spec, "variance")
            mu = ws_view(workspace, spec, "mean") if mean_virtual else b["mean"].reshape(-1)
            g = {r: b[r].reshape(-1) for r in _STAT_ROLES if r in b}
            bad = _kernels.bn_training_statistics(
                var, eps, g.get("inv_variance"), mu, mom, m / (m - 1.0),
                g.get("prev_running_mean"), g.get("next_running_mean"),
                g.get("prev_running_variance"), g.get("next_running_variance"),
                g["scale"] if fused else None, g["bias"] if fused else None)
            if clips is not None:
                _batchnorm.relu(b["y"], b["y"], *clips, team=True)
            elif bad:
                _nonfinite_channels(b, workspace, spec, vec(var), eps, mean_virtual)
        return None, after

    if ("next_running_mean" in real or "next_running_variance" in real) and momentum is None:
        raise decline("running statistics without a momentum; CPU_ENGINE reports it")
    return spec, pd, hooks


_STAT_ROLES = ("inv_variance", "prev_running_mean", "next_running_mean", "prev_running_variance",
               "next_running_variance", "scale", "bias")


def _nonfinite_channels(b, workspace, spec, var, eps, mean_virtual) -> None:
    """oneDNN's jit fuse_norm_relu writes +0 where y is NaN (its mask is y > 0; its
    generic implementations keep the NaN): in a channel whose statistics, scale or bias
    are not finite (the only way y gets a NaN: with finite ones, y is finite or an
    overflowed +-inf, which the mask maps right), recompute
    ``y = RELU_FWD(scale * (x - mean) / sqrt(variance + epsilon) + bias)``, NaN kept."""
    mu = vec(ws_view(workspace, spec, "mean") if mean_virtual else b["mean"])
    sc, sh = vec(b["scale"]), vec(b["bias"])
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
    if clipped and order == CHANNEL_BLOCKED:   # the composition masks dy through a strided view
        raise decline("a clipped RELU_BWD between batchnorms runs on plain layouts")
    roles = ["x", "dy", "scale", "mean", "inv_variance", "dx", "dscale", "dbias"] + (
        ["bias"] if drelu else [])
    x, dy, dx = t["x"], t["dy"], t["dx"]
    for role in ("scale", "mean", "inv_variance", "dscale", "dbias") + (("bias",) if drelu else ()):
        channel_md(t[role])
    c = x.dims[1]
    stat_md = dnnl.MemoryDesc((c,), dnnl.DATA_F32, strides=(1,))
    spec = ProgramSpec(roles, dry=dry)
    # the clipped composition keeps its intermediates (y, the masked dy) in float32
    f32 = (lambda tt: None if tt.data_type == DataType.FLOAT else dnnl.DATA_F32) if clipped \
        else (lambda tt: None)
    xm = spec.activation("x", x, order, data_type=f32(x))
    dym = spec.activation("dy", dy, order, data_type=dnnl.DATA_F32 if clipped else None)
    # dx is written over the copy of dy (oneDNN's batchnorm backward works in place):
    # one buffer less to bring through the caches
    dxm = spec.activation("dx", dx, order, data_type=f32(dx), share=dym)
    relu = dnnl.FUSE_NORM_RELU if drelu and not clipped else 0
    flags = dnnl.USE_SCALE | dnnl.USE_SHIFT | relu
    # epsilon 0: oneDNN's 1/sqrt(variance + 0) is then the graph's inv_variance
    y_md = packed_md(x, xm[1].data_type, order) if drelu else dym[1]
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
    _kernels.bn_inv_to_variance(b["inv_variance"].reshape(-1), ws_view(workspace, spec, "variance"))


def _clipped_drelu(spec, x, order, first, dy_index, lo, hi):
    """Hooks composing batchnorm inference -> clipped RELU_BWD -> batchnorm backward:
    ``spec``'s steps before ``first`` (the reorders in and the inference primitive writing
    the float32 y) run as a separate program before the main one (its steps from
    ``first``: the backward primitive), and between them the float32 copy of dy is zeroed
    where ``lo < y < hi`` fails (a NaN y masks, as RELU_BWD's comparison does)."""
    pre = None if spec.dry else spec.program(spec.steps[:first])
    spec.pre_steps, spec.steps = spec.steps[:first], spec.steps[first:]
    dims = tuple(x.dims)
    strides = tuple(4 * s for s in packed_strides(dims, memory_order(x) if order is None else order))
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


# element kinds of ``_kernels.bn_rows`` by data type
_ROWS_KINDS = {DataType.FLOAT: 0, DataType.BFLOAT16: 1, DataType.HALF: 2}


def _rows_fit(match) -> int:
    """The element kind ``_kernels.bn_rows`` runs ``match`` with, or a decline: every
    activation of one data type and either channels-last (C > 1, the C values of a pixel
    one packed run, the pixels at one stride: NHWC, NDHWC; ``_channels_last``) or
    channels-first with its spatial elements one packed run (NCHW, NCDHW); every
    per-channel tensor a dense FLOAT vector."""
    t = match.tensors
    acts = [t[r] for r in ("x", "y", "dy", "dx") if r in t and not t[r].is_virtual]
    types = {a.data_type for a in acts}
    if len(types) != 1 or next(iter(types)) not in _ROWS_KINDS:
        raise decline("the batchnorm rows take activations of one type, FLOAT, BFLOAT16 or "
                      "HALF")
    for a in acts:
        if any(d == 0 for d in a.dims):
            raise decline(f"tensor '{a.name}' has a zero dim {tuple(a.dims)}")
    if not _channels_last(match):
        for a in acts:
            dims, strides = tuple(a.dims), tuple(a.strides)
            run = 1
            for d, s in zip(reversed(dims[2:]), reversed(strides[2:])):
                if d != 1 and s != run:
                    raise decline(f"tensor '{a.name}' (strides {strides}): the batchnorm rows "
                                  "take spatial elements in one packed run or channels-last "
                                  "pixels")
                run *= d
    for role, tt in t.items():
        if tt.is_virtual or role in ("x", "y", "dy", "dx"):
            continue
        channel_md(tt)                                # declines a non-FLOAT statistic
        if tt.dims[1] > 1 and tt.strides[1] != 1:
            raise decline(f"per-channel tensor '{tt.name}' has channel stride "
                          f"{tt.strides[1]}; the batchnorm rows take dense vectors")
    return _ROWS_KINDS[next(iter(types))]


def _channels_last(match) -> bool:
    """Whether ``bn_rows`` reads ``match``'s activations as channels-last pixels (the rule
    of its ``_pixels_of``): C > 1, channel stride 1, the spatial dims one run of pixels at
    a stride >= C."""
    t = match.tensors
    c = t["x"].dims[1]
    if c < 2:
        return False
    for r in ("x", "y", "dy", "dx"):
        if r not in t or t[r].is_virtual:
            continue
        dims, strides = tuple(t[r].dims), tuple(t[r].strides)
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


def _bits(a):
    """An activation as the array ``bn_rows`` reads: 16-bit types as their raw bits."""
    return a if a.dtype.itemsize == 4 else a.view(np.uint16)


def _rows(match, order, fuse, dry):
    """Batchnorm through the engine's C rows (``_kernels.bn_rows``) on oneDNN's OpenMP
    team, every pattern. Channels-first: one thread runs all passes of a channel
    (statistics, then y; or the backward sums, then dx), so the later passes read from its
    cache; oneDNN 3.2's jit batchnorm takes only channel-blocked or channels-last memory;
    around it the reorders move three more copies of the tensor (2-3.5x PyTorch's time in
    backward, measured on 2 cores), and its generic ``ncsp_bnorm`` is slower still.
    Channels-last (faster than oneDNN's jit batchnorm: see above ``Bn``): the
    pixels split among the threads, per-thread partial sums added after a team barrier.
    Clipped ReLUs fuse here too."""
    t, p = match.tensors, match.params
    kind = _rows_fit(match)
    pat = match.pattern
    x = t["x"]
    c = x.dims[1]
    m = x.dims[0] * math.prod(x.dims[2:])
    real = {r for r, tt in t.items() if not tt.is_virtual}
    spec = ProgramSpec(sorted(real), dry=dry)
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
                var = np.empty(c, np.float32)
                mu = user_mu if user_mu is not None else np.empty(c, np.float32)
                rows(_kernels.BN_ROWS_TRAINING, x_, y_, kind, scale=g["scale"],
                     bias=g["bias"], mean_out=mu, variance_out=var, epsilon=eps, act=act,
                     lower=lo, upper=hi)
                _kernels.bn_training_statistics(
                    var, eps, g.get("inv_variance"), mu, mom, m / (m - 1.0),
                    g.get("prev_running_mean"), g.get("next_running_mean"),
                    g.get("prev_running_variance"), g.get("next_running_variance"), None, None)
            before.compiled_only = True         # _plan.quiet: no NumPy warning to silence
            return before, None
    elif pat == Pattern.BN_INFERENCE_VARIANCE:
        eps = float(p["epsilon"])
        if not eps > 0:
            raise decline(f"epsilon = {eps!r}; CPU_ENGINE reports it")

        def hooks(b, workspace):
            x_, y_ = _bits(b["x"]), _bits(b["y"])
            v = {r: b[r].reshape(-1) for r in ("mean", "variance", "scale", "bias")}

            def before():
                rows(_kernels.BN_ROWS_INFERENCE, x_, y_, kind, epsilon=eps, **v)
            before.compiled_only = True
            return before, None
    else:
        act = pat == Pattern.BN_INFERENCE_DRELU_BACKWARD
        lo, hi = _relu_clips(match.params) if act else (0.0, math.inf)

        def hooks(b, workspace):
            x_, dx_, dy_ = _bits(b["x"]), _bits(b["dx"]), _bits(b["dy"])
            v = {r: b[r].reshape(-1) for r in ("scale", "mean", "inv_variance", "dscale",
                                               "dbias") + (("bias",) if act else ())}

            def before():
                rows(_kernels.BN_ROWS_BACKWARD, x_, dx_, kind, dy=dy_, act=act, lower=lo,
                     upper=hi, **v)
            before.compiled_only = True
            return before, None
    spec.names.append("bn_rows:" + _kernels.bn_rows_isa(("float32", "bfloat16", "float16")[kind]))
    hooks.reads_workspace = False     # _plan: its launches copy onto a fresh workspace
    return spec, None, hooks


def _relu_clips(p) -> tuple[float, float]:
    """RELU_FWD / RELU_BWD bounds: lower (default 0) and upper (default +inf)."""
    lo, hi = p.get("relu_lower_clip"), p.get("relu_upper_clip")
    return (0.0 if lo is None else float(lo)), (math.inf if hi is None else float(hi))


BN_BUILDERS = {
    Pattern.BN_INFERENCE_VARIANCE: _bn_inference_variance,
    Pattern.BN_TRAINING: _bn_training,
    Pattern.BN_TRAINING_RELU: _bn_training,
    Pattern.BN_BACKWARD: _bn_backward,
    Pattern.BN_INFERENCE_DRELU_BACKWARD: _bn_backward,
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


class Bn:
    """One batchnorm problem and its candidates: the user's layout and, for activations
    that are not channels-last, channel-blocked (nChw16c) and channels-last copies
    (reordered in and out: oneDNN's jit batchnorm takes only blocked or channels-last
    memory; on plain NCHW it runs its generic ``ncsp_bnorm:any``), each for batchnorm
    training + ReLU with ``fuse_norm_relu`` and with the ReLU as a separate pass; for
    batchnorm inference also one binary primitive on the user's layout
    (``_bn_inference_binary``); the engine's C rows (``_rows``) on channels-first memory
    and on channels-last memory."""

    def __init__(self, match):
        self.match = match
        builder = BN_BUILDERS[match.pattern]
        x = match.tensors["x"]
        orders = [("", None)]
        if x.strides[1] != 1 and x.dims[1] > 1:
            rank = len(x.dims)
            orders.append(("+nChw16c" if rank == 4 else "+blocked16c", CHANNEL_BLOCKED))
            orders.append(("+nhwc", (0,) + tuple(range(2, rank)) + (1,)))
        p = match.params
        fusable = (match.pattern == Pattern.BN_TRAINING_RELU
                   and p.get("relu_lower_clip") in (None, 0.0) and p.get("relu_upper_clip") is None)
        variants = [(suffix, order, fuse, builder) for suffix, order in orders
                    for fuse in ((True, False) if fusable else (False,))]
        # the C rows, on the user's memory as it is, wherever ``_rows_fit`` takes it:
        # channels-first (C = 1 too: oneDNN's generic ncsp_bnorm, all it has there, sums in
        # float32 and lost the mean of x = 1000 + N(0, 1) at 2^20 values, y off by about 1)
        # and channels-last (see the figures above this class)
        variants.insert(0, ("", None, False, _rows))
        if match.pattern == Pattern.BN_INFERENCE_VARIANCE and len(orders) > 1:
            # plain layouts only: where the channel stride is 1 oneDNN's binary kernel
            # broadcasts its per-channel post-op operands wrongly (oneDNN 3.2, e.g. NCHW
            # (3, 5, 1, 1)), and its jit batchnorm runs there anyway
            variants.insert(0, ("+binary", None, False, _bn_inference_binary))
        # (name, order, fuse, workspace bytes, jit?, builder)
        self.impls = []
        for suffix, order, fuse, build in variants:
            try:
                spec, pd, _ = build(match, order, fuse, True)
            except NotSupportedError:
                if build is builder and order is None:
                    raise                      # the user's layout: the problem declines
                continue                       # oneDNN has no such variant here
            name = "+".join(spec.names) + suffix
            if match.pattern == Pattern.BN_TRAINING_RELU and build is not _rows:
                name += "+fuse_norm_relu" if fuse else "+relu"
            self.impls.append((name, order, fuse, spec.ws.size,
                               pd is None or "jit" in pd.impl_name, build))

    def candidates(self) -> list:
        return [_tuning.Candidate(impl[0], i, impl[3]) for i, impl in enumerate(self.impls)]

    def heuristic(self, fitting, limit):
        """Without timing: the batchnorm rows where offered (channels-first memory: 0.5-0.95x
        PyTorch's time on the ResNet-50 shapes at batch 8, 2 cores, against 1.1-3.5x for the
        best oneDNN candidate there; channels-last at every size (see above the class): at
        batch 32, out of the caches, oneDNN's jit batchnorm was faster in some runs and
        slower in others, and its float32 sums missed the FLOAT tolerance on x = 1000 +
        N(0, 1) at 32x64x56x56 where the rows' float64-gathered tiles did not); else a jit
        implementation before the generic ones (``ncsp_bnorm``, ``nspc_bnorm``: 5-20x
        slower in training and backward, and fuse_norm_relu 10x slower than a separate ReLU
        pass there), in the candidates' order: the user's
        layout, then channel-blocked copies (two cheap reorders), then channels-last copies
        (two transpositions). Batchnorm inference: the jit batchnorm on the user's layout
        (channels-last: one pass), else the binary primitive on the user's layout (one
        pass at memory speed; the generic ``ncsp_bnorm`` is 5-20x slower and the reorders
        around a jit batchnorm cost two more passes)."""
        impls = self.impls
        rows = [c for c in fitting if impls[c.id][5] is _rows]
        if rows:
            return rows[0]
        if self.match.pattern == Pattern.BN_INFERENCE_VARIANCE:
            own = [c for c in fitting if impls[c.id][5] is not _bn_inference_binary
                   and impls[c.id][1] is None]
            if own and impls[own[0].id][4]:
                return own[0]
            binary = [c for c in fitting if impls[c.id][5] is _bn_inference_binary
                      and impls[c.id][4]]
            return (binary or own or fitting)[0]
        jit = [c for c in fitting if impls[c.id][4]]
        if jit:
            return jit[0]
        unfused = [c for c in fitting if not impls[c.id][2]]
        return (unfused or fitting)[0]

    def build(self, candidate):
        _, order, fuse, _, _, build = self.impls[candidate.id]
        return build(self.match, order, fuse, False)
