"""Variant-pack checks of an execution plan that need no plan state of their own: buffer
layouts, memory overlap between bound buffers, and the messages for a key or buffer the
plan refuses (``_device.ExecutionPlan._bind`` and ``_check_aliasing`` call these)."""
from __future__ import annotations

import numpy as np

try:
    from numpy.exceptions import TooHardError
except ImportError:  # NumPy < 1.25
    from numpy import TooHardError

__all__ = ["element_layout", "same_memory", "overlap", "edit_hint", "unknown_key"]


def element_layout(dims, strides, dtype) -> tuple:
    """What places a tensor's elements in memory: dims, dtype and the strides of the dims
    longer than 1 (a (1, C, 1, 1) tensor in NCHW and in NHWC strides is one layout)."""
    return (tuple(dims), dtype, tuple(s for d, s in zip(dims, strides) if d > 1))


def same_memory(a, b) -> bool:
    """Whether bound buffers ``a`` and ``b`` are exactly one memory (a device pointer
    of tensors whose dims, strides and type agree; host arrays of one start, shape,
    strides and dtype)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                and element_layout(a.shape, a.strides, a.dtype)
                == element_layout(b.shape, b.strides, b.dtype))
    return type(a) is int and type(b) is int and a == b


def overlap(a, a_bytes: int, b, b_bytes: int) -> bool:
    """Whether bound buffers ``a`` and ``b`` (host arrays, or device pointers spanning
    ``a_bytes`` / ``b_bytes``) share memory; False for a pair of other kinds."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        try:
            return bool(np.shares_memory(a, b, max_work=100_000))
        except TooHardError:
            return True
    if type(a) is int and type(b) is int:
        return a < b + b_bytes and b < a + a_bytes
    return False


def edit_hint(plan, role: str) -> str:
    """Why a buffer that fits the edited graph is refused: the plan's snapshot."""
    snap = plan.match.tensors[role]
    user = plan._originals.get(id(snap))
    if user is None:
        return ""
    now = (tuple(user.dims), tuple(user.strides), user.data_type)
    then = (tuple(snap.dims), tuple(snap.strides), snap.data_type)
    if now == then:
        return ""
    return (f" (the graph was edited after this plan was built: the tensor now has dims "
            f"{now[0]}, strides {now[1]}, {now[2].name}; the plan keeps its build-time "
            f"dims {then[0]}, strides {then[1]}, {then[2].name}; build a new plan for "
            "the edited graph)")


def unknown_key(plan, key, t) -> str:
    """The message for a variant-pack key naming no buffer-taking tensor of ``plan``: a
    tensor no operation of the plan's graph used (at build), a virtual intermediate of a
    fused pattern, a virtual output, or no tensor at all."""
    snap = plan._snap_of.get(id(t)) if t is not None else None
    if snap is None and t is not None and any(t is g for g in plan._snapshot.tensors):
        snap = t
    if snap is not None:
        nodes = plan._snapshot.nodes
        read = any(u is snap for n in nodes for u in n.inputs.values())
        made = any(u is snap for n in nodes for u in n.outputs.values())
        if not (read or made):
            return (f"execute: tensor '{snap.name}' (uid {snap.uid}) was an operand of no "
                    f"operation of graph '{plan.graph.name}' when this plan was built, so "
                    "the plan takes no buffer for it; leave it out of the variant pack")
        if snap.is_virtual:
            when = "" if t.is_virtual else " when this plan was built"
            if read and made:        # a fused pattern's intermediates stay virtual
                return (f"execute: tensor '{snap.name}' (uid {snap.uid}) was virtual{when}: "
                        "an intermediate of the fused pattern (one operation's output, "
                        "another's input), which takes no buffer; leave it out of the "
                        "variant pack")
            return (f"execute: tensor '{snap.name}' (uid {snap.uid}) was virtual{when} and "
                    "takes no buffer; call set_output(True) on it before building to get "
                    "it back")
    takes = ", ".join(f"'{g.name}' (uid {g.uid})" for g in plan._snapshot.tensors
                      if not g.is_virtual and id(g) in plan._slots)
    twins = [g for g in plan._snapshot.tensors if t is not None and snap is None
             and g.name == getattr(t, "name", None) and id(g) in plan._slots
             and getattr(t, "uid", None) in (None, g.uid)]
    if twins:
        # a tensor object of another graph with this one's name (and uid, once given):
        # the original of a copy (g.copy(), g.with_batch_size(n)) or a copy of the original
        twin = twins[0]
        return (f"execute: variant pack key tensor '{twin.name}' belongs to another graph "
                f"object than this plan's graph '{plan.graph.name}' (the original of a "
                "copy such as with_batch_size()?); key the buffer by the name "
                f"'{twin.name}' or the uid {twin.uid}, or by the plan graph's own tensor")
    return (f"execute: variant pack key {key!r} names no tensor of graph "
            f"'{plan.graph.name}'; its tensors that take a buffer are {takes} (keys are "
            "those tensors, their names or their uids)")
