"""TensorAttributes, named layouts and stride checks.

Dims are always logical (N, C, [D,] H, W); layout is expressed only through strides, in
elements. The stride arithmetic itself (packed strides, stride orders) lives in the leaf
``hipdnn_async._layout``, shared with providers and runtime; it is re-exported here.
"""
from __future__ import annotations

import operator

import numpy as np

from .._errors import GraphError
from .._layout import LAYOUT_ORDERS, packed_strides, stride_order, strides_match
from .._types import DataType, as_data_type

__all__ = [
    "TensorAttributes",
    "strides_for",
    "LAYOUT_ORDERS",
    "packed_strides",
    "stride_order",
    "strides_match",
    "check_dims",
    "check_strides",
    "as_int_tuple",
]


def as_int_tuple(values, *, where: str, what: str) -> tuple:
    """Coerce a sequence of integers (Python or NumPy) to a tuple of int; GraphError else."""
    if isinstance(values, (str, bytes)):
        raise GraphError(f"{where}: {what} must be a sequence of integers; got {values!r}")
    try:
        items = list(values)
    except TypeError:
        raise GraphError(
            f"{where}: {what} must be a sequence of integers; got {values!r}") from None
    out = []
    for v in items:
        if isinstance(v, bool):
            raise GraphError(f"{where}: {what} {tuple(items)!r} holds a bool; need integers")
        try:
            out.append(operator.index(v))
        except TypeError:
            raise GraphError(
                f"{where}: {what} {tuple(items)!r} holds {v!r}; need integers") from None
    return tuple(out)


def _as_bool(value, where: str) -> bool:
    """A bool (or NumPy bool, or 0/1); GraphError for anything else, e.g. the string "no"."""
    if isinstance(value, (bool, np.bool_)) or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise GraphError(f"{where}: need True or False; got {value!r}")


def strides_for(dims, layout: str) -> tuple:
    """Return packed strides, in elements, of logical ``dims`` stored in ``layout``.

    Parameters
    ----------
    dims : sequence of int
        Logical dims (N, C, H, W) or (N, C, D, H, W).
    layout : {"NCHW", "NHWC", "NCDHW", "NDHWC"}
        Memory order; case-insensitive.

    Returns
    -------
    strides : tuple of int
        E.g. NHWC dims (N, C, H, W) give (H*W*C, 1, W*C, C).

    Raises
    ------
    GraphError
        Unknown layout, or the rank of ``dims`` does not match the layout's.
    """
    dims = as_int_tuple(dims, where="strides_for", what="dims")
    if not isinstance(layout, str) or layout.upper() not in LAYOUT_ORDERS:
        raise GraphError(
            f"strides_for: unknown layout {layout!r}; use one of "
            f"{', '.join(repr(k) for k in LAYOUT_ORDERS)}")
    order = LAYOUT_ORDERS[layout.upper()]
    if len(order) != len(dims):
        raise GraphError(
            f"strides_for: layout {layout!r} needs {len(order)} dims; got {len(dims)} "
            f"dims {dims}")
    return packed_strides(dims, order)


def check_dims(dims: tuple, *, where: str, allow_zero_batch: bool = False) -> None:
    """GraphError unless every dim is >= 1 (dims[0] may be 0 when allowed)."""
    if len(dims) == 0:
        raise GraphError(f"{where}: dims are not set (empty)", code="ATTRIBUTE_NOT_SET")
    for i, d in enumerate(dims):
        if d < 0 or (d == 0 and not (i == 0 and allow_zero_batch)):
            allowed = ("dims[0] (N) >= 0 and the others >= 1" if allow_zero_batch
                       else "every dim >= 1 (N=0 only for conv_fprop, batchnorm inference "
                            "and pointwise)")
            raise GraphError(f"{where}: dim {i} is {d} in dims {dims}; need {allowed}")


# Largest extent of one tensor, in elements: 2**48 (256 Ti elements) keeps every byte
# offset and workspace size far inside int64 (test-cases.md, "Very large tensors").
MAX_ELEMENTS = 2 ** 48


def check_strides(dims: tuple, strides: tuple, *, where: str) -> None:
    """GraphError for a stride rank that differs from dims, a stride < 1, or overlap.

    Two elements share an address when, sorting the dims of size > 1 by stride, some
    stride is smaller than the previous stride times the previous dim.
    """
    if len(strides) != len(dims):
        raise GraphError(
            f"{where}: strides {strides} have rank {len(strides)} but dims {dims} have "
            f"rank {len(dims)}")
    for i, s in enumerate(strides):
        if s < 1:
            kind = "zero" if s == 0 else "negative"
            raise GraphError(
                f"{where}: {kind} stride {s} for dim {i} in strides {strides}; strides "
                f"must be >= 1 (broadcast or reversed views are not tensors here)")
    if any(d == 0 for d in dims):
        return
    extent = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    if extent > MAX_ELEMENTS:
        raise GraphError(
            f"{where}: dims {dims} with strides {strides} span {extent} elements; a tensor "
            f"may span at most {MAX_ELEMENTS} (2**48) elements")
    big = sorted((s, d, i) for i, (s, d) in enumerate(zip(strides, dims)) if d > 1)
    for (s0, d0, i0), (s1, d1, i1) in zip(big, big[1:]):
        if s1 < s0 * d0:
            raise GraphError(
                f"{where}: strides {strides} overlap for dims {dims}: dim {i1} stride {s1} "
                f"< dim {i0} stride {s0} * size {d0}; two elements would share an address")


class TensorAttributes:
    """A tensor of a graph: logical dims, strides in elements, data type, uid, name.

    Made by ``Graph.tensor`` (inputs) or by node methods (outputs, created virtual).
    Setters are chainable. Identity (not value) equality: usable as a dict key in a
    variant pack.

    Parameters
    ----------
    dims : sequence of int, optional
        Logical dims (N, C, [D,] H, W).
    strides : sequence of int, optional
        Strides in elements; default packed NCHW/NCDHW order.
    data_type : DataType or dtype-like, optional
        Default: the graph's io_data_type (intermediate_data_type when virtual).
    name : str, optional
        Default ``""``.
    uid : int, optional
        In [0, 2**63); assigned at validate (smallest unused, from 0) when not given.
    is_virtual : bool, optional
        Default False.

    Raises
    ------
    GraphError
        Non-integer dims or strides, an unknown data type, a name that is not a str, a
        uid outside [0, 2**63). Values (dims >= 1, strides fitting dims) are checked
        when the tensor is added to a graph (``Graph.tensor``) or at ``validate``.
    """

    def __init__(self, dims=None, strides=None, data_type=None, name: str = "",
                 uid=None, is_virtual: bool = False):
        self._graph = None
        self._producer = None
        self._uid = None
        self._name = ""
        self._dims: tuple = ()
        self._strides: tuple = ()
        self._order = None            # stride order to repack in when dims change
        self._data_type = None        # None: resolved from the graph
        self._is_virtual = bool(is_virtual)
        self._dims_explicit = dims is not None
        if dims is not None:
            self._dims = as_int_tuple(dims, where=self._where(), what="dims")
            if strides is None:
                self._order = tuple(range(len(self._dims)))
                self._strides = packed_strides(self._dims, self._order)
        if strides is not None:
            self._strides = as_int_tuple(strides, where=self._where(), what="strides")
        if data_type is not None:
            self.set_data_type(data_type)
        self.set_name(name)
        if uid is not None:
            self.set_uid(uid)

    # ------------------------------------------------------------------ properties
    @property
    def uid(self):
        """Unique id (int) within the graph, or None until assigned."""
        return self._uid

    @property
    def name(self) -> str:
        """Tensor name."""
        return self._name

    @property
    def dims(self) -> tuple:
        """Logical dims (N, C, [D,] H, W)."""
        return self._dims

    @property
    def strides(self) -> tuple:
        """Strides in elements, one per dim."""
        return self._strides

    @property
    def data_type(self) -> DataType:
        """Element type; an unset one resolves from the graph (io or intermediate type),
        ``DataType.NOT_SET`` outside a graph."""
        if self._data_type is not None:
            return self._data_type
        if self._graph is not None:
            return (self._graph.intermediate_data_type if self._is_virtual
                    else self._graph.io_data_type)
        return DataType.NOT_SET

    @property
    def is_virtual(self) -> bool:
        """True for an intermediate with no buffer in the variant pack."""
        return self._is_virtual

    @property
    def is_output(self) -> bool:
        """``not is_virtual``."""
        return not self._is_virtual

    @property
    def volume(self) -> int:
        """Number of elements (the product of ``dims``; 1 for dims ``()``)."""
        v = 1
        for d in self._dims:
            v *= d
        return v

    @property
    def producer(self):
        """The node that outputs this tensor, or None for a graph input."""
        return self._producer

    # ------------------------------------------------------------------ setters
    def set_output(self, output: bool = True) -> "TensorAttributes":
        """Mark the tensor as materialised (``True``) or virtual (``False``); chainable.

        GraphError unless ``output`` is a bool (or NumPy bool, 0 or 1).
        """
        self._is_virtual = not _as_bool(output, f"{self._where()}: set_output")
        return self

    def set_is_virtual(self, virtual: bool = True) -> "TensorAttributes":
        """Mark the tensor virtual (no buffer) or not; chainable.

        GraphError unless ``virtual`` is a bool (or NumPy bool, 0 or 1).
        """
        self._is_virtual = _as_bool(virtual, f"{self._where()}: set_is_virtual")
        return self

    def set_data_type(self, data_type) -> "TensorAttributes":
        """Set the element type (DataType, NumPy/ml_dtypes dtype or name); chainable.

        GraphError for a value no data type spelling names (or NOT_SET). Whether the
        type suits the tensor's slot (FLOAT for statistics; FLOAT/HALF/BFLOAT16 for
        data) is checked when a node takes it and at ``validate``.
        """
        self._data_type = as_data_type(data_type, where=f"{self._where()}: data_type")
        return self

    def set_dims(self, dims) -> "TensorAttributes":
        """Set logical dims (N, C, [D,] H, W); chainable.

        Strides not set explicitly are repacked in their stride order (channel-first
        when the rank changes). GraphError for non-integers; values are checked at
        ``validate``, which re-infers the graph from them.
        """
        self._dims = as_int_tuple(dims, where=self._where(), what="dims")
        self._dims_explicit = True
        if self._order is not None and len(self._order) == len(self._dims):
            self._strides = packed_strides(self._dims, self._order)
        elif self._order is not None:
            self._order = tuple(range(len(self._dims)))
            self._strides = packed_strides(self._dims, self._order)
        return self

    def set_strides(self, strides) -> "TensorAttributes":
        """Set strides in elements, one per dim (kept when dims change); chainable.

        GraphError for non-integers; rank, values and overlap are checked at
        ``validate``.
        """
        self._strides = as_int_tuple(strides, where=self._where(), what="strides")
        self._order = None
        return self

    def set_name(self, name: str) -> "TensorAttributes":
        """Set the tensor name; chainable. GraphError when ``name`` is not a str."""
        if not isinstance(name, str):
            raise GraphError(f"{self._where()}: name must be a str; got {name!r}")
        self._name = name
        return self

    def set_uid(self, uid) -> "TensorAttributes":
        """Set the unique id, an int in [0, 2**63) (hipDNN uids are int64); chainable.

        GraphError for a bool, a non-integer or a value out of range; a uid shared
        with another tensor is a GraphError at ``validate``.
        """
        if isinstance(uid, bool):
            raise GraphError(f"{self._where()}: uid must be an int >= 0; got {uid!r}")
        try:
            uid = operator.index(uid)
        except TypeError:
            raise GraphError(f"{self._where()}: uid must be an int >= 0; got {uid!r}") from None
        if not 0 <= uid < 2 ** 63:  # uids are int64 (hipDNN TensorAttributes::_uid)
            raise GraphError(f"{self._where()}: uid must be an int in [0, 2**63); got {uid}")
        self._uid = uid
        return self

    def clear_uid(self) -> "TensorAttributes":
        """Forget the uid (a new one is assigned at validate)."""
        self._uid = None
        return self

    # ------------------------------------------------------------------ helpers
    def _set_packed_like(self, order: tuple) -> None:
        """Internal: packed strides in ``order`` (node outputs)."""
        self._order = tuple(order)
        self._strides = packed_strides(self._dims, self._order)

    def _where(self) -> str:
        return f"tensor {self.label}"

    @property
    def label(self) -> str:
        """``'name'`` (and uid when set) for messages."""
        text = repr(self._name) if self._name else "<unnamed>"
        if self._uid is not None:
            text += f" (uid {self._uid})"
        return text

    def __repr__(self) -> str:
        dt = self.data_type
        return (f"TensorAttributes(name={self._name!r}, uid={self._uid}, dims={self._dims}, "
                f"strides={self._strides}, data_type={dt.name}, "
                f"is_virtual={self._is_virtual})")
