"""Strides and layouts, in elements: the helpers graph, providers and runtime share.

Dims are logical (N, C, [D,] H, W); a layout is expressed only through strides. A *stride
order* is the permutation of dim indices from outermost to innermost; packed strides
follow from dims and a stride order. This module is a leaf: it imports nothing of ours.
"""
from __future__ import annotations

__all__ = [
    "LAYOUT_ORDERS",
    "packed_strides",
    "strides_match",
    "stride_order",
    "element_extent",
    "dense_strides_like",
    "same_memory_order",
    "layout_name",
    "dim_letters",
    "wrong_strides_message",
    "ambiguous_message",
    "accepted_buffers",
    "NUMPY_VIEW",
    "NUMPY_COPY",
    "TORCH_VIEW",
    "torch_copy_hint", "NUMPY_PLAIN", "TORCH_PLAIN",
]

# Stride orders (outermost -> innermost) of the named layouts; hipDNN data SDK TensorLayout.
LAYOUT_ORDERS = {
    "NCHW": (0, 1, 2, 3),
    "NHWC": (0, 2, 3, 1),
    "NCDHW": (0, 1, 2, 3, 4),
    "NDHWC": (0, 2, 3, 4, 1),
}


def packed_strides(dims: tuple, order: tuple) -> tuple:
    """Packed strides of ``dims`` in ``order`` (outermost first); 0-size dims count as 1."""
    strides = [0] * len(dims)
    s = 1
    for d in reversed(order):
        strides[d] = s
        s *= max(dims[d], 1)
    return tuple(strides)


def strides_match(dims, want, got) -> bool:
    """Whether element strides ``got`` equal ``want`` where it matters: the strides of
    size-1 (and empty) dims never do (docs/contract/semantics.md, "Layouts")."""
    return all(d <= 1 or w == g for d, w, g in zip(dims, want, got))


def _matches(dims, strides, expected, ignore_unit: bool) -> bool:
    return all(s == e or (ignore_unit and d == 1)
               for d, s, e in zip(dims, strides, expected))


def stride_order(dims: tuple, strides: tuple) -> tuple:
    """Return the stride order (outermost first) of a tensor.

    A tensor packed in a named layout (exactly, then ignoring size-1 dims, NCHW-family
    first) gets that layout's order; otherwise dims are sorted by decreasing stride,
    ties by dim index.
    """
    rank = len(dims)
    candidates = [o for o in LAYOUT_ORDERS.values() if len(o) == rank]
    for ignore_unit in (False, True):
        for order in candidates:
            if _matches(dims, strides, packed_strides(dims, order), ignore_unit):
                return order
    return tuple(sorted(range(rank), key=lambda i: (-strides[i], i)))


def same_memory_order(shape: tuple, physical: tuple) -> bool:
    """Whether a C-contiguous array of ``shape`` is the memory of dims in memory order
    ``physical``: the same shape, or the same rank with the non-unit dims in the same
    order (size-1 dims have no place in memory: (3, 5, 1, 1, 3) is (3, 5, 1, 3, 1))."""
    shape, physical = tuple(shape), tuple(physical)
    if shape == physical:
        return True
    return len(shape) == len(physical) and (
        tuple(d for d in shape if d != 1) == tuple(d for d in physical if d != 1))


def element_extent(dims, strides) -> int:
    """Elements a strided array spans: its largest offset + 1 (0 when a dim is 0)."""
    if any(d == 0 for d in dims):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))



def dense_strides_like(shape, byte_strides) -> tuple:
    """Packed element strides for ``shape`` in the memory order of an existing array
    (``byte_strides``, e.g. a NumPy array's ``.strides``): what ``torch.Tensor.to`` and
    CuPy's ``order="K"`` keep. A dense array gets its own strides back (in elements); a
    non-dense one the packed strides of the same order. Axes are ordered by decreasing
    absolute stride, ties (size-1 or empty dims) by axis index.
    """
    order = tuple(sorted(range(len(shape)), key=lambda i: (-abs(byte_strides[i]), i)))
    return packed_strides(tuple(shape), order)


def layout_name(dims: tuple, strides: tuple) -> str:
    """A name for the layout of element ``strides``: ``"NHWC"`` for packed NHWC, ``"NCHW"``
    ..., ``"non-packed NHWC-ordered"`` where the order is a named layout's but the strides
    leave gaps, else ``"strided with stride order (...)"``."""
    order = stride_order(dims, strides)
    name = next((n for n, o in LAYOUT_ORDERS.items() if o == order), None)
    if name is None:
        return f"strided with stride order {order}"
    if strides_match(dims, strides, packed_strides(dims, order)):
        return name
    return f"non-packed {name}-ordered"


def dim_letters(rank: int, *, filter: bool = False) -> str | None:
    """The letters of logical dims, by the tensor's role: ``"NCHW"`` / ``"NCDHW"`` for an
    activation, ``"KCRS"`` / ``"KCTRS"`` for a convolution's filter (so an NHWC filter's
    memory order reads (K, R, S, C)); None for other ranks."""
    if rank not in (4, 5):
        return None
    if filter:
        return "KCTRS" if rank == 5 else "KCRS"
    return "NCDHW" if rank == 5 else "NCHW"


def _names(letters: str | None, order: tuple) -> str:
    """``"(N, H, W, C)"`` for letters NCHW in order (0, 2, 3, 1); "" without letters."""
    return "" if letters is None else "(" + ", ".join(letters[a] for a in order) + ")"


# How a message spells a logical view of memory-order array m ({inv}: the inverse of the
# stride order) and a packed copy of logical data a ({order}: the stride order), in NumPy
NUMPY_VIEW = "m.transpose{inv}"
NUMPY_COPY = "np.ascontiguousarray(a.transpose{order}).transpose{inv}"
NUMPY_PLAIN = "np.ascontiguousarray(a)"       # a packed copy in a plain (NCHW) layout
TORCH_PLAIN = "a.contiguous()"
# PyTorch's spelling (a CPU tensor that came in through __dlpack__, a CUDA tensor):
# ``torch_copy_hint`` names channels_last where that is the order.
TORCH_VIEW = "m.permute{inv}"


def torch_copy_hint(order: tuple) -> str:
    """How to make a packed tensor of memory order ``order`` from a logical tensor ``a``."""
    if tuple(order) == (0, 2, 3, 1):
        return "a.contiguous(memory_format=torch.channels_last)"
    if tuple(order) == (0, 2, 3, 4, 1):
        return "a.contiguous(memory_format=torch.channels_last_3d)"
    return "a.permute{order}.contiguous().permute{inv}"


def wrong_strides_message(label: str, dims: tuple, want: tuple, got: tuple, *,
                          view_hint: str = NUMPY_VIEW, copy_hint: str = NUMPY_COPY,
                          plain_hint: str = NUMPY_PLAIN, letters: str | None = None,
                          output: bool = False) -> str:
    """The message for a buffer of the tensor's logical shape whose strides are wrong.

    Names the tensor's layout and the buffer's, then what to pass instead: for a packed
    named layout, a C-contiguous array m of the dims in memory order (e.g. (N, H, W, C)
    for NHWC) or its logical view (``view_hint``, ``{inv}`` the inverse permutation: e.g.
    ``m.transpose(0, 3, 1, 2)``), and for an input a packed copy of logical data a
    (``copy_hint``, ``{order}`` the stride order too; ``plain_hint`` where the layout is
    plain, NCHW: its packed copy; and where the buffer is packed in another named layout,
    declaring the tensor with that layout); otherwise the logical view with
    the tensor's strides or a flat 1-D buffer covering them. An output is never offered a
    copy: the results would land in the copy, not in the caller's array.
    """
    dims, want, got = tuple(dims), tuple(want), tuple(got)
    order = stride_order(dims, want)
    rank = len(dims)
    letters = dim_letters(rank) if letters is None else letters
    theirs = layout_name(dims, got)
    head = (f"{label} is {layout_name(dims, want)} (strides {want} in elements); the buffer "
            f"has the logical shape with strides {got} ({theirs})")
    if not strides_match(dims, want, packed_strides(dims, order)):
        return (f"{head}: pass a view with the tensor's strides, or a flat 1-D buffer of at "
                f"least {element_extent(dims, want)} elements")
    physical = tuple(dims[a] for a in order)
    inverse = tuple(sorted(range(rank), key=lambda i: order[i]))
    names = _names(letters, order) + " = " if letters else ""
    if output:
        where = ("; the results are written into m, so allocate it so (a copy made to fit "
                 "would not receive them)")
        if order == tuple(range(rank)):
            return f"{head}: pass an array m of shape {names}{physical} in C order{where}"
        return (f"{head}: pass an array m of shape {names}{physical} in C order, or its "
                f"logical view {view_hint.format(inv=inverse)}{where}")
    # the buffer packed in another named layout: the graph can take it as it is
    as_is = (f"; or, to bind this buffer without a copy, declare the tensor "
             f"g.tensor(..., layout={theirs!r}) (outputs computed from an x follow its "
             f"layout unless given strides)" if theirs in LAYOUT_ORDERS else "")
    if order == tuple(range(rank)):      # a plain layout: its logical view is m itself
        return (f"{head}: pass an array of shape {names}{physical} in C order "
                f"({plain_hint}){as_is}")
    return (f"{head}: pass an array m of shape {names}{physical} in C order, or its logical "
            f"view {view_hint.format(inv=inverse)}; from data a in logical order: "
            f"{copy_hint.format(order=order, inv=inverse)}{as_is}")


def ambiguous_message(label: str, dims: tuple, want: tuple, *, letters: str | None = None,
                      view_hint: str = NUMPY_VIEW, copy_hint: str = NUMPY_COPY,
                      output: bool = False) -> str:
    """The message for a C-contiguous array of shape ``dims`` bound to a tensor packed in
    another order whose memory-order shape is also ``dims`` (NHWC with C == H == W): it
    may be either, so it is refused, and the message gives the exact call for each case.

    ``view_hint`` (``{inv}``: the inverse of the stride order) makes the logical view of a
    memory-order array ``m``; ``copy_hint`` (``{order}`` too) makes it from logical data
    ``a``, offered for inputs only (an output's results would land in the copy).
    """
    dims, want = tuple(dims), tuple(want)
    rank = len(dims)
    order = stride_order(dims, want)
    inverse = tuple(sorted(range(rank), key=lambda i: order[i]))
    letters = dim_letters(rank) if letters is None else letters
    name = layout_name(dims, want)
    logical = _names(letters, tuple(range(rank))) or "dims"
    memory = _names(letters, order) or f"in stride order {order}"
    copy = "" if output else f"{copy_hint.format(order=order, inv=inverse)} of logical data a, "
    return (f"{label}: a C-contiguous array of shape {dims} is ambiguous here: it reads both "
            f"as logical {logical} and as {name} memory order {memory}; pass the logical view "
            f"(strides {want} in elements): {view_hint.format(inv=inverse)} of an array m in "
            f"memory order {memory}, {copy}or a flat 1-D buffer (m.reshape(-1))")


def accepted_buffers(dims: tuple, want: tuple, *, letters: str | None = None) -> str:
    """What a tensor binds, for a message ending "needs ...": its logical shape with its
    strides; a C-contiguous array of the dims in memory order, where that shape differs;
    a flat 1-D array covering its extent (e.g. shape (C,) for a (1, C, 1, 1) bias)."""
    dims, want = tuple(dims), tuple(want)
    order = stride_order(dims, want)
    physical = tuple(dims[a] for a in order)
    extent = element_extent(dims, want)
    forms = [f"logical shape {dims} with strides {want} in elements"]
    if physical != dims and strides_match(dims, want, packed_strides(dims, order)):
        letters = dim_letters(len(dims)) if letters is None else letters
        names = _names(letters, order)
        forms.append(f"a C-contiguous array of shape {names + ' = ' if names else ''}"
                     f"{physical} (memory order)")
    forms.append(f"a C-contiguous 1-D array of at least {extent} elements (e.g. shape "
                 f"({extent},))")
    return ", or ".join(forms)
