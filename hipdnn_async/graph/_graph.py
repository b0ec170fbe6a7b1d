"""Graph: tensors, node methods, validation, signature, copies (docs/design/internals.md s.1)."""
from __future__ import annotations

import dataclasses
import math
import numbers
import operator

import numpy as np

from .._errors import GraphError
from .._types import IO_DATA_TYPES, ConvolutionMode, DataType, PointwiseMode, as_data_type
from . import _shapes
from ._nodes import (
    DEFAULT_NODE_NAMES,
    NODE_KINDS,
    OUTPUT_SUFFIXES,
    BatchnormAttrs,
    BatchnormInferenceVarianceAttrs,
    ConvAttrs,
    Node,
    NoAttrs,
    PointwiseAttrs,
)
from ._tensor import (
    LAYOUT_ORDERS,
    TensorAttributes,
    as_int_tuple,
    check_dims,
    check_strides,
    packed_strides,
    stride_order,
    strides_for,
)

__all__ = ["Graph", "DATA_SLOTS"]

# Slots whose dims[0] is the batch (with_batch_size); pointwise in1 too when not broadcast.
DATA_SLOTS = frozenset({"x", "y", "dy", "dx", "in0", "out"})

# Node kinds whose data tensors may have N = 0 (inference-style ops; test-cases.md).
_ZERO_BATCH_KINDS = frozenset({"conv_fprop", "pointwise", "batchnorm_inference",
                               "batchnorm_inference_variance_ext"})

# Statistic / affine slots: FLOAT, dims (1, C, 1, 1[, 1]).
_STAT_SLOTS = frozenset({"scale", "bias", "mean", "inv_variance", "variance",
                         "prev_running_mean", "prev_running_variance", "next_running_mean",
                         "next_running_variance", "dscale", "dbias"})

_BINARY_MODES = frozenset({PointwiseMode.ADD, PointwiseMode.RELU_BWD})
_RELU_MODES = frozenset({PointwiseMode.RELU_FWD, PointwiseMode.RELU_BWD})


# The smallest batchnorm epsilon: inv_variance = 1/sqrt(variance + epsilon) is a FLOAT
# output, and on a constant channel (variance 0) it is 1/sqrt(epsilon), a finite float32
# only for epsilon >= 1/FLT_MAX**2 (about 8.64e-78; FLT_MAX**2 is exact in float64). Below
# it inv_variance overflows and y = (x - mean) * inv_variance is 0 * inf = NaN.
_FLT_MAX = float(np.finfo(np.float32).max)
_MIN_BN_EPSILON = 1.0 / (_FLT_MAX * _FLT_MAX)


def _check_epsilon(where: str, epsilon: float) -> None:
    """A batchnorm epsilon (already a finite float, ``_scalar``): > 0 and at least
    ``_MIN_BN_EPSILON``; GraphError naming the node, the parameter and the value."""
    if epsilon <= 0:
        raise GraphError(f"{where}: epsilon {epsilon} must be > 0 (e.g. 1e-5)")
    if epsilon < _MIN_BN_EPSILON:
        raise GraphError(f"{where}: epsilon {epsilon} is below {_MIN_BN_EPSILON:.6g} "
                         "(1/FLT_MAX**2): inv_variance = 1/sqrt(variance + epsilon) is a "
                         "FLOAT output and must be finite for a constant channel (variance "
                         "0), where it is 1/sqrt(epsilon); use a larger epsilon (e.g. 1e-12)")


def _where(kind: str, name: str) -> str:
    return f"{kind} '{name}'"


def _scalar(value, *, where: str, what: str, required: bool = True):
    """Coerce a Python/NumPy real to a finite float; None passes when not required."""
    if value is None:
        if required:
            raise GraphError(f"{where}: {what} is not set", code="ATTRIBUTE_NOT_SET")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(
            value, "__float__"):
        raise GraphError(f"{where}: {what} must be a float; got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise GraphError(f"{where}: {what} must be a float; got {value!r}") from None
    except OverflowError:          # an int (or Fraction, Decimal) beyond float64's range
        raise GraphError(f"{where}: {what} {value!r} is not finite as a float (beyond "
                         "float64's range); need a finite float") from None
    if not math.isfinite(f):
        raise GraphError(f"{where}: {what} {f} is not finite; need a finite float")
    return f


def _per_dim(value, n: int, default: int, *, where: str, what: str) -> tuple:
    if value is None:
        return (default,) * n
    if isinstance(value, bool):
        raise GraphError(f"{where}: {what} {value!r} must be an int or a tuple of int")
    try:
        v = operator.index(value)
    except TypeError:
        return as_int_tuple(value, where=where, what=what)
    return (v,) * n


def _conv_attrs(where, n_spatial, padding, pre_padding, post_padding, stride, dilation,
                mode) -> ConvAttrs:
    if padding is not None and (pre_padding is not None or post_padding is not None):
        raise GraphError(f"{where}: give padding, or pre_padding and post_padding, not both")
    pre = _per_dim(padding if padding is not None else pre_padding, n_spatial, 0,
                   where=where, what="pre_padding" if padding is None else "padding")
    post = _per_dim(padding if padding is not None else post_padding, n_spatial, 0,
                    where=where, what="post_padding" if padding is None else "padding")
    stride = _per_dim(stride, n_spatial, 1, where=where, what="stride")
    dilation = _per_dim(dilation, n_spatial, 1, where=where, what="dilation")
    try:
        mode = ConvolutionMode(mode)
    except (ValueError, TypeError):
        raise GraphError(f"{where}: unknown convolution mode {mode!r}; use "
                         "ConvolutionMode.CROSS_CORRELATION") from None
    if mode is ConvolutionMode.NOT_SET:
        raise GraphError(f"{where}: convolution mode NOT_SET; use "
                         "ConvolutionMode.CROSS_CORRELATION", code="ATTRIBUTE_NOT_SET")
    _shapes.check_conv_params(where, n_spatial, pre, post, stride, dilation)
    return ConvAttrs(pre, post, stride, dilation, mode, 1)


def _declared_groups(where: str, groups):
    """``groups`` of a convolution method: None, or an int >= 1."""
    if groups is None:
        return None
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise GraphError(f"{where}: groups must be an int >= 1 (or None: x.C // w.C); "
                         f"got {groups!r}")
    return int(groups)


def _check_rank(where: str, slot: str, t: TensorAttributes, rank=None) -> None:
    if rank is None:
        if len(t.dims) not in (4, 5):
            raise GraphError(
                f"{where}: tensor {t.label} ({slot}) has rank {len(t.dims)}, dims {t.dims}; "
                "need rank 4 (N, C, H, W) or 5 (N, C, D, H, W)")
    elif len(t.dims) != rank:
        raise GraphError(
            f"{where}: tensor {t.label} ({slot}) has rank {len(t.dims)}, dims {t.dims}; "
            f"need rank {rank} like the node's first input")


def _in1_is_data(node, t) -> bool:
    """Whether a pointwise node's in1 is batch data (RELU_BWD's dy, a same-shape operand)
    rather than a per-channel operand such as ADD's bias [1, C, 1, ...]. At N = 1 with a
    1x1 output the two look alike; the mode decides: only RELU_BWD's in1 is then data."""
    if t.dims != node.inputs["in0"].dims:
        return False
    if getattr(node.attrs, "mode", None) == PointwiseMode.RELU_BWD:
        return True
    per_channel = len(t.dims) >= 2 and t.dims[0] == 1 and all(d == 1 for d in t.dims[2:])
    return not per_channel


class Graph:
    """A graph of deep-learning operations on tensors, hipDNN style.

    Parameters
    ----------
    name : str, optional
        Graph name, default ``"graph"``.
    io_data_type : DataType or dtype-like, optional
        Type of non-virtual tensors without an explicit one: FLOAT (default), HALF or
        BFLOAT16.
    intermediate_data_type : DataType or dtype-like, optional
        Type of virtual tensors without an explicit one; default FLOAT.
    compute_data_type : DataType or dtype-like, optional
        Default compute type of nodes; default FLOAT.

    Raises
    ------
    GraphError
        ``name`` not a str; a data type no spelling names; io or intermediate type
        outside FLOAT/HALF/BFLOAT16 (``compute_data_type`` may also be DOUBLE, which
        every build refuses: the engines compute in FLOAT).
    """

    def __init__(self, name: str = "graph", io_data_type=DataType.FLOAT,
                 intermediate_data_type=DataType.FLOAT, compute_data_type=DataType.FLOAT):
        self._nodes: list[Node] = []
        self._tensors: list[TensorAttributes] = []
        self.set_name(name)
        self.set_io_data_type(io_data_type)
        self.set_intermediate_data_type(intermediate_data_type)
        self.set_compute_data_type(compute_data_type)

    # ------------------------------------------------------------------ configuration
    @property
    def name(self) -> str:
        """Graph name."""
        return self._name

    @property
    def io_data_type(self) -> DataType:
        """Default type of non-virtual tensors."""
        return self._io_data_type

    @property
    def intermediate_data_type(self) -> DataType:
        """Default type of virtual tensors."""
        return self._intermediate_data_type

    @property
    def compute_data_type(self) -> DataType:
        """Default compute type of nodes."""
        return self._compute_data_type

    def set_name(self, name: str) -> "Graph":
        """Set the graph name; chainable. GraphError when ``name`` is not a str."""
        if not isinstance(name, str):
            raise GraphError(f"Graph: name must be a str; got {name!r}")
        self._name = name
        return self

    def set_io_data_type(self, data_type) -> "Graph":
        """Set the default type of non-virtual tensors; chainable.

        Raises
        ------
        GraphError
            Not FLOAT, HALF or BFLOAT16 (in any spelling ``Graph`` takes).
        """
        self._io_data_type = self._io_type(data_type, "io_data_type")
        return self

    def set_intermediate_data_type(self, data_type) -> "Graph":
        """Set the default type of virtual tensors; chainable.

        Raises
        ------
        GraphError
            Not FLOAT, HALF or BFLOAT16 (in any spelling ``Graph`` takes).
        """
        self._intermediate_data_type = self._io_type(data_type, "intermediate_data_type")
        return self

    def set_compute_data_type(self, data_type) -> "Graph":
        """Set the default compute type of nodes; chainable.

        Raises
        ------
        GraphError
            A value no data type spelling names, or ``NOT_SET``.
        """
        self._compute_data_type = as_data_type(
            data_type, where=f"graph '{getattr(self, '_name', '')}': compute_data_type")
        return self

    def _io_type(self, data_type, what: str) -> DataType:
        dt = as_data_type(data_type, where=f"graph '{self._name}': {what}")
        if dt not in IO_DATA_TYPES:
            raise GraphError(f"graph '{self._name}': {what} {dt.name} is not allowed; "
                             "use FLOAT, HALF or BFLOAT16")
        return dt

    # ------------------------------------------------------------------ contents
    @property
    def nodes(self) -> tuple:
        """Nodes in insertion order."""
        return tuple(self._nodes)

    @property
    def tensors(self) -> tuple:
        """Every tensor of the graph (inputs made by ``tensor()`` and node outputs)."""
        return tuple(self._tensors)

    def tensor(self, dims=None, *, strides=None, layout=None, data_type=None, name=None,
               uid=None) -> TensorAttributes:
        """Add an input tensor to the graph and return it.

        Parameters
        ----------
        dims : sequence of int
            Logical dims (N, C, H, W) or (N, C, D, H, W); N may be 0, others >= 1.
            A ``TensorAttributes`` is copied instead (hipDNN ``Graph::tensor``).
        strides : sequence of int, optional
            Strides in elements, each >= 1, non-overlapping.
        layout : {"NCHW", "NHWC", "NCDHW", "NDHWC"}, optional
            Derive packed strides; exclusive with ``strides``. Default: packed
            NCHW / NCDHW order.
        data_type : DataType or dtype-like, optional
            FLOAT, HALF or BFLOAT16; default the graph's ``io_data_type``.
        name : str, optional
            Default ``"tensor_<k>"``, k the number of tensors already in the graph.
        uid : int, optional
            Unique id in [0, 2**63); assigned at validate when not given.

        Returns
        -------
        TensorAttributes
            A non-virtual tensor.

        Raises
        ------
        GraphError
            Missing dims (code ``ATTRIBUTE_NOT_SET``), non-integer, negative or zero dims
            (N = 0 is allowed), strides of another rank, zero, negative or overlapping
            strides, an extent over 2**48 elements, both ``strides`` and ``layout``, an
            unknown layout or one of another rank, a data type outside
            FLOAT/HALF/BFLOAT16, a name that is not a str, a uid outside [0, 2**63).
        """
        if isinstance(dims, TensorAttributes):
            tpl = dims
            dims = tpl.dims
            strides = tpl.strides if strides is None and layout is None else strides
            data_type = tpl._data_type if data_type is None else data_type
            name = tpl.name if name is None else name
            uid = tpl.uid if uid is None else uid
        label = repr(name) if name else f"tensor_{len(self._tensors)}"
        where = f"graph '{self._name}': tensor {label}"
        if dims is None:
            raise GraphError(f"{where}: dims are required", code="ATTRIBUTE_NOT_SET")
        dims = as_int_tuple(dims, where=where, what="dims")
        if strides is not None and layout is not None:
            raise GraphError(f"{where}: give strides or layout, not both")
        if layout is not None:
            if not isinstance(layout, str) or layout.upper() not in LAYOUT_ORDERS:
                raise GraphError(f"{where}: unknown layout {layout!r}; use one of "
                                 f"{', '.join(repr(k) for k in LAYOUT_ORDERS)}")
            strides = strides_for(dims, layout)
        t = TensorAttributes(dims=dims, strides=strides,
                             name=name if name is not None else f"tensor_{len(self._tensors)}",
                             uid=uid)
        if layout is not None:
            t._order = LAYOUT_ORDERS[layout.upper()]
        check_dims(dims, where=where, allow_zero_batch=True)
        check_strides(t.dims, t.strides, where=where)
        if data_type is not None:
            dt = as_data_type(data_type, where=f"{where}: data_type")
            if dt not in IO_DATA_TYPES:
                raise GraphError(f"{where}: data type {dt.name} is not allowed; use FLOAT, "
                                 "HALF or BFLOAT16")
            t._data_type = dt
        t._graph = self
        self._tensors.append(t)
        return t

    def tensor_by(self, key, default=None):
        """Return this graph's tensor for a TensorAttributes, a uid (int) or a name (str).

        A TensorAttributes of another graph (e.g. the original of a ``copy()``) is
        looked up by its uid, then its name.

        Parameters
        ----------
        key : TensorAttributes or int or str
            The tensor, its uid or its name.
        default : object, optional
            Returned when nothing matches; default None.

        Returns
        -------
        TensorAttributes or ``default``
            ``default`` (None) when no tensor matches or the key is of another type.

        Raises
        ------
        GraphError
            A name shared by several tensors.
        """
        if isinstance(key, TensorAttributes):
            if key._graph is self:
                return key
            if key.uid is not None:
                found = self.tensor_by(key.uid)
                if found is not None:
                    return found
            key = key.name
        if isinstance(key, str):
            hits = [t for t in self._tensors if t.name == key]
            if len(hits) > 1:
                raise GraphError(f"graph '{self._name}': tensor name {key!r} is ambiguous "
                                 f"({len(hits)} tensors); use the tensor or its uid")
        elif hasattr(key, "__index__") and not isinstance(key, bool):
            key = operator.index(key)
            hits = [t for t in self._tensors if t.uid == key]
        else:
            hits = []
        return hits[0] if hits else default

    # ------------------------------------------------------------------ node helpers
    def _own(self, where: str, slot: str, t) -> TensorAttributes:
        if not isinstance(t, TensorAttributes):
            raise GraphError(f"{where}: {slot} must be a TensorAttributes of this graph; "
                             f"got {type(t).__name__}")
        if t._graph is not self:
            if t._graph is None:
                other = "no graph"
            elif t._graph.name != self._name:
                other = f"graph '{t._graph.name}'"
            else:       # two graph objects of one name: a copy() and its original, mostly
                other = (f"another graph object also named '{self._name}' (the original of "
                         "a copy()?)")
            raise GraphError(f"{where}: tensor {t.label} ({slot}) belongs to {other}, not "
                             f"this graph '{self._name}'; make it with this graph's tensor()")
        return t

    def _node_name(self, kind: str, name) -> str:
        taken = {n.name for n in self._nodes}
        if name is not None:
            if not isinstance(name, str) or not name:
                raise GraphError(f"{kind}: name must be a non-empty str; got {name!r}")
            if name in taken:
                raise GraphError(f"{kind} '{name}': a node named {name!r} already exists in "
                                 f"graph '{self._name}'; node names must be unique")
            return name
        k = sum(1 for n in self._nodes if n.kind == kind)
        while f"{DEFAULT_NODE_NAMES[kind]}_{k}" in taken:
            k += 1
        return f"{DEFAULT_NODE_NAMES[kind]}_{k}"

    def _compute_type(self, where: str, value) -> DataType:
        if value is None:
            return self._compute_data_type
        return as_data_type(value, where=f"{where}: compute_data_type")

    def _add(self, kind: str, name: str, inputs: dict, attrs, compute, fixed=None, *,
             groups=None) -> Node:
        """Check a new node, create its (virtual) outputs, append it; return the node."""
        node = Node(kind=kind, name=name, inputs=inputs, attrs=attrs,
                    compute_data_type=compute, groups=groups)
        out_dims, order_slot, node.attrs = _infer(node, fixed or {})
        _check_inputs(node)
        order = _order_of(inputs[order_slot])
        for slot in NODE_KINDS[kind][1]:
            if slot not in out_dims:
                continue
            t = TensorAttributes(dims=out_dims[slot], name=f"{name}::{OUTPUT_SUFFIXES[slot]}",
                                 is_virtual=True)
            t._dims_explicit = slot in (fixed or {})
            t._set_packed_like(order)
            if slot in _STAT_SLOTS:
                t._data_type = DataType.FLOAT
            t._graph = self
            t._producer = node
            node.outputs[slot] = t
        self._tensors.extend(node.outputs.values())
        self._nodes.append(node)
        return node

    # ------------------------------------------------------------------ node methods
    def conv_fprop(self, x, w, *, padding=None, pre_padding=None, post_padding=None,
                   stride=None, dilation=None, groups=None,
                   mode=ConvolutionMode.CROSS_CORRELATION, compute_data_type=None,
                   name=None) -> TensorAttributes:
        """Add a convolution-forward (cross-correlation) node; return its virtual output.

        Parameters
        ----------
        x : TensorAttributes
            Input, dims (N, C, H, W) or (N, C, D, H, W); FLOAT, HALF or BFLOAT16. N may be 0.
        w : TensorAttributes
            Filter, dims (K, C/groups, R, S) or (K, C/groups, T, R, S).
        padding : int or tuple of int, optional
            Zero padding per spatial dim, both sides, each >= 0. Default 0.
        pre_padding, post_padding : int or tuple of int, optional
            Asymmetric padding (begin / end); exclusive with ``padding``.
        stride, dilation : int or tuple of int, optional
            Each >= 1; default 1 (dilation 1 is dense).
        groups : int, optional
            The groups the filter's dims must give: checked, x.C == groups * w.C. Default
            None: groups are x.C // w.C, as in hipDNN and cuDNN's frontend, so a filter's
            channel count alone makes a grouped convolution.
        mode : ConvolutionMode, optional
            CROSS_CORRELATION (default); CONVOLUTION is accepted here and rejected by
            every provider with NotSupportedError.
        compute_data_type : DataType, optional
            Default the graph's.
        name : str, optional
            Default ``"ConvolutionFprop_<n>"``.

        Returns
        -------
        y : TensorAttributes
            Virtual, dims (N, K, P, Q); P = (H + pre + post - dilation*(R - 1) - 1)
            // stride + 1 [1]_; strides packed in x's stride order.

        Raises
        ------
        GraphError
            Output size < 1, stride or dilation < 1, negative padding, ``padding`` given
            with ``pre_padding``/``post_padding``, wrong number of spatial entries, rank
            not 4 or 5 (or w's rank not x's), x.C not a multiple of w.C, w.K not a
            multiple of groups, ``groups`` not an int >= 1 or not x.C // w.C, an unknown
            or NOT_SET mode, a data type outside FLOAT/HALF/BFLOAT16, a tensor of another
            graph, a name already used.

        References
        ----------
        .. [1] hipDNN convolution attributes; cuDNN developer guide, convolution formulas.
        """
        name = self._node_name("conv_fprop", name)
        where = _where("conv_fprop", name)
        x = self._own(where, "x", x)
        w = self._own(where, "w", w)
        _check_rank(where, "x", x)
        attrs = _conv_attrs(where, len(x.dims) - 2, padding, pre_padding, post_padding,
                            stride, dilation, mode)
        node = self._add("conv_fprop", name, {"x": x, "w": w}, attrs,
                         self._compute_type(where, compute_data_type),
                         groups=_declared_groups(where, groups))
        return node.outputs["y"]

    def conv_dgrad(self, dy, w, *, dx_dims, padding=None, pre_padding=None,
                   post_padding=None, stride=None, dilation=None, groups=None,
                   mode=ConvolutionMode.CROSS_CORRELATION, compute_data_type=None,
                   name=None) -> TensorAttributes:
        """Add a convolution data-gradient node; return its virtual output dx.

        Parameters
        ----------
        dy : TensorAttributes
            Output gradient, dims (N, K, P, Q[, ...]).
        w : TensorAttributes
            Filter, dims (K, C/groups, R, S[, ...]).
        dx_dims : sequence of int
            Dims of dx (N, C, H, W[, ...]); required since the forward formula floors.
        padding, pre_padding, post_padding, stride, dilation, groups, mode, compute_data_type, name
            As in ``conv_fprop``; default name ``"ConvolutionDgrad_<n>"``.

        Returns
        -------
        dx : TensorAttributes
            Virtual, dims ``dx_dims``, strides packed in dy's stride order.

        Raises
        ------
        GraphError
            As ``conv_fprop``; ``dx_dims`` missing (``ATTRIBUTE_NOT_SET``) or of another
            rank than dy; dy's N, K or spatial dims inconsistent with ``dx_dims`` and w.
        """
        return self._conv_backward("conv_dgrad", name, dy, ("w", w), ("dx", dx_dims),
                                   (padding, pre_padding, post_padding, stride, dilation, mode),
                                   compute_data_type, groups)

    def conv_wgrad(self, dy, x, *, dw_dims, padding=None, pre_padding=None,
                   post_padding=None, stride=None, dilation=None, groups=None,
                   mode=ConvolutionMode.CROSS_CORRELATION, compute_data_type=None,
                   name=None) -> TensorAttributes:
        """Add a convolution weight-gradient node; return its virtual output dw.

        Parameters
        ----------
        dy : TensorAttributes
            Output gradient, dims (N, K, P, Q[, ...]).
        x : TensorAttributes
            Forward input, dims (N, C, H, W[, ...]).
        dw_dims : sequence of int
            Dims of dw (K, C/groups, R, S[, ...]); required.
        padding, pre_padding, post_padding, stride, dilation, groups, mode, compute_data_type, name
            As in ``conv_fprop``; default name ``"ConvolutionWgrad_<n>"``.

        Returns
        -------
        dw : TensorAttributes
            Virtual, dims ``dw_dims``, strides packed in dy's stride order.

        Raises
        ------
        GraphError
            As ``conv_fprop``; ``dw_dims`` missing (``ATTRIBUTE_NOT_SET``) or of another
            rank than dy; dy's N, K or spatial dims inconsistent with x and ``dw_dims``.
        """
        return self._conv_backward("conv_wgrad", name, dy, ("x", x), ("dw", dw_dims),
                                   (padding, pre_padding, post_padding, stride, dilation, mode),
                                   compute_data_type, groups)

    def _conv_backward(self, kind, name, dy, other, out, conv, compute_data_type, groups):
        """conv_dgrad / conv_wgrad: ``other`` = (slot, tensor), ``out`` = (slot, dims)."""
        name = self._node_name(kind, name)
        where = _where(kind, name)
        dy = self._own(where, "dy", dy)
        slot, tensor = other[0], self._own(where, other[0], other[1])
        _check_rank(where, "dy", dy)
        out_slot, out_dims = out
        if out_dims is None:
            raise GraphError(f"{where}: {out_slot}_dims is required", code="ATTRIBUTE_NOT_SET")
        out_dims = as_int_tuple(out_dims, where=where, what=f"{out_slot}_dims")
        attrs = _conv_attrs(where, len(dy.dims) - 2, *conv)
        node = self._add(kind, name, {"dy": dy, slot: tensor}, attrs,
                         self._compute_type(where, compute_data_type), {out_slot: out_dims},
                         groups=_declared_groups(where, groups))
        return node.outputs[out_slot]

    def pointwise(self, in0, in1=None, *, mode, relu_lower_clip=None, relu_upper_clip=None,
                  compute_data_type=None, name=None) -> TensorAttributes:
        """Add a pointwise node; return its virtual output.

        Parameters
        ----------
        in0 : TensorAttributes
            First operand (the forward input ``y_fwd`` for RELU_BWD).
        in1 : TensorAttributes, optional
            Second operand of ADD (same dims as in0, or a bias (1, C, 1, 1[, 1])) and
            of RELU_BWD (dy, same dims as in0).
        mode : PointwiseMode
            ADD, RELU_FWD, RELU_BWD (IDENTITY is accepted by the graph; no pattern uses it).
        relu_lower_clip, relu_upper_clip : float, optional
            Clips of RELU_FWD / RELU_BWD; finite, lower <= upper. The lower clip is 0
            when not given, so an upper clip alone must be >= 0.
        compute_data_type : DataType, optional
            Default the graph's.
        name : str, optional
            Default ``"Pointwise_<n>"``.

        Returns
        -------
        out : TensorAttributes
            Virtual, dims of in0, strides packed in in0's stride order.

        Raises
        ------
        GraphError
            Unknown mode; NOT_SET mode or missing in1 of ADD/RELU_BWD (code
            ``ATTRIBUTE_NOT_SET``); extra in1, mismatched dims, rank not 4 or 5, clips on
            a non-ReLU mode, not finite, or lower > upper (an upper clip < 0 alone).
        """
        name = self._node_name("pointwise", name)
        where = _where("pointwise", name)
        in0 = self._own(where, "in0", in0)
        try:
            mode = PointwiseMode(mode)
        except (ValueError, TypeError):
            raise GraphError(f"{where}: unknown pointwise mode {mode!r}; use PointwiseMode."
                             "ADD, RELU_FWD or RELU_BWD") from None
        if mode is PointwiseMode.NOT_SET:
            raise GraphError(f"{where}: pointwise mode NOT_SET; use ADD, RELU_FWD or "
                             "RELU_BWD", code="ATTRIBUTE_NOT_SET")
        inputs = {"in0": in0}
        if in1 is not None:
            inputs["in1"] = self._own(where, "in1", in1)
        lower = _scalar(relu_lower_clip, where=where, what="relu_lower_clip", required=False)
        upper = _scalar(relu_upper_clip, where=where, what="relu_upper_clip", required=False)
        node = self._add("pointwise", name, inputs, PointwiseAttrs(mode, lower, upper),
                         self._compute_type(where, compute_data_type))
        return node.outputs["out"]

    def batchnorm(self, x, scale, bias, *, epsilon, momentum=None, prev_running_mean=None,
                  prev_running_variance=None, compute_data_type=None, name=None):
        """Add a batchnorm training node (spatial statistics per channel).

        Parameters
        ----------
        x : TensorAttributes
            Input, dims (N, C, H, W) or (N, C, D, H, W), N * spatial > 1.
        scale, bias : TensorAttributes
            FLOAT, dims (1, C, 1, 1[, 1]).
        epsilon : float
            Finite and at least 1/FLT_MAX**2 (about 8.64e-78), so > 0;
            ``inv_variance = 1/sqrt(var + epsilon)``, a finite FLOAT even for a constant
            channel.
        momentum : float, optional
            In [0, 1]; required with running statistics, and without them it updates
            nothing (no running statistics are produced; as ``torch.nn.functional.
            batch_norm`` with ``running_mean=None``).
        prev_running_mean, prev_running_variance : TensorAttributes, optional
            FLOAT, dims (1, C, 1, 1[, 1]); both or neither.
        compute_data_type : DataType, optional
            Default the graph's.
        name : str, optional
            Default ``"Batchnorm_<n>"``.

        Returns
        -------
        y, mean, inv_variance, next_running_mean, next_running_variance : TensorAttributes
            All virtual; statistics FLOAT (1, C, 1, 1[, 1]); the last two are None unless
            running statistics are given.

        Raises
        ------
        GraphError
            Shapes or types (not FLOAT) of scale/bias/statistics, epsilon <= 0, below
            1/FLT_MAX**2 or not finite, momentum outside [0, 1], N * spatial == 1, only
            one of the running statistics, or running statistics without momentum (those
            two with code ``ATTRIBUTE_NOT_SET``).

        Notes
        -----
        ``next = (1 - momentum)*prev + momentum*batch_stat``; the running variance uses the
        unbiased (n/(n-1)) batch variance.
        """
        name = self._node_name("batchnorm", name)
        where = _where("batchnorm", name)
        inputs = {"x": self._own(where, "x", x), "scale": self._own(where, "scale", scale),
                  "bias": self._own(where, "bias", bias)}
        if (prev_running_mean is None) != (prev_running_variance is None):
            raise GraphError(f"{where}: give both prev_running_mean and "
                             "prev_running_variance, or neither", code="ATTRIBUTE_NOT_SET")
        if prev_running_mean is not None:
            inputs["prev_running_mean"] = self._own(where, "prev_running_mean",
                                                    prev_running_mean)
            inputs["prev_running_variance"] = self._own(where, "prev_running_variance",
                                                        prev_running_variance)
            if momentum is None:
                raise GraphError(f"{where}: running statistics need momentum (a float in "
                                 "[0, 1])", code="ATTRIBUTE_NOT_SET")
        attrs = BatchnormAttrs(_scalar(epsilon, where=where, what="epsilon"),
                               _scalar(momentum, where=where, what="momentum",
                                       required=False))
        node = self._add("batchnorm", name, inputs, attrs,
                         self._compute_type(where, compute_data_type))
        o = node.outputs
        return (o["y"], o["mean"], o["inv_variance"], o.get("next_running_mean"),
                o.get("next_running_variance"))

    def batchnorm_inference(self, x, mean, inv_variance, scale, bias, *,
                            compute_data_type=None, name=None) -> TensorAttributes:
        """Add a batchnorm inference node: ``y = scale*(x - mean)*inv_variance + bias``.

        Parameters
        ----------
        x : TensorAttributes
            Input, dims (N, C, H, W[, ...]); N may be 0.
        mean, inv_variance, scale, bias : TensorAttributes
            FLOAT, dims (1, C, 1, 1[, 1]).
        compute_data_type : DataType, optional
            Default the graph's.
        name : str, optional
            Default ``"BatchnormInference_<n>"``.

        Returns
        -------
        y : TensorAttributes
            Virtual, dims of x.

        Raises
        ------
        GraphError
            Shapes or types (not FLOAT) of the statistics, rank not 4 or 5.
        """
        name = self._node_name("batchnorm_inference", name)
        where = _where("batchnorm_inference", name)
        inputs = {"x": x, "mean": mean, "inv_variance": inv_variance, "scale": scale,
                  "bias": bias}
        inputs = {k: self._own(where, k, v) for k, v in inputs.items()}
        node = self._add("batchnorm_inference", name, inputs, NoAttrs(),
                         self._compute_type(where, compute_data_type))
        return node.outputs["y"]

    def batchnorm_inference_variance_ext(self, x, mean, variance, scale, bias, *, epsilon,
                                         compute_data_type=None, name=None):
        """Add a batchnorm-inference-with-variance node.

        ``y = scale*(x - mean)/sqrt(variance + epsilon) + bias``.

        Parameters
        ----------
        x : TensorAttributes
            Input, dims (N, C, H, W[, ...]); N may be 0.
        mean, variance, scale, bias : TensorAttributes
            FLOAT, dims (1, C, 1, 1[, 1]).
        epsilon : float
            Finite and at least 1/FLT_MAX**2 (about 8.64e-78), so > 0.
        compute_data_type : DataType, optional
            Default the graph's.
        name : str, optional
            Default ``"BatchnormInferenceVarianceExt_<n>"``.

        Returns
        -------
        y : TensorAttributes
            Virtual, dims of x.

        Raises
        ------
        GraphError
            Shapes or types (not FLOAT) of the statistics, rank not 4 or 5, epsilon
            <= 0, below 1/FLT_MAX**2 or not finite.
        """
        kind = "batchnorm_inference_variance_ext"
        name = self._node_name(kind, name)
        where = _where(kind, name)
        inputs = {"x": x, "mean": mean, "variance": variance, "scale": scale, "bias": bias}
        inputs = {k: self._own(where, k, v) for k, v in inputs.items()}
        attrs = BatchnormInferenceVarianceAttrs(_scalar(epsilon, where=where, what="epsilon"))
        node = self._add(kind, name, inputs, attrs, self._compute_type(where,
                                                                       compute_data_type))
        return node.outputs["y"]

    def batchnorm_backward(self, dy, x, scale, *, mean, inv_variance, compute_data_type=None,
                           name=None):
        """Add a batchnorm backward node given the saved mean and inv_variance.

        Parameters
        ----------
        dy, x : TensorAttributes
            Same dims (N, C, H, W[, ...]).
        scale, mean, inv_variance : TensorAttributes
            FLOAT, dims (1, C, 1, 1[, 1]).
        compute_data_type : DataType, optional
            Default the graph's.
        name : str, optional
            Default ``"BatchnormBackward_<n>"``.

        Returns
        -------
        dx, dscale, dbias : TensorAttributes
            Virtual; dx has x's dims packed in dy's stride order; dscale, dbias FLOAT
            (1, C, 1, 1[, 1]).

        Raises
        ------
        GraphError
            dy and x dims differ, rank not 4 or 5, N = 0, statistics shapes or types
            (not FLOAT).
        """
        name = self._node_name("batchnorm_backward", name)
        where = _where("batchnorm_backward", name)
        inputs = {"dy": dy, "x": x, "scale": scale, "mean": mean,
                  "inv_variance": inv_variance}
        inputs = {k: self._own(where, k, v) for k, v in inputs.items()}
        node = self._add("batchnorm_backward", name, inputs, NoAttrs(),
                         self._compute_type(where, compute_data_type))
        o = node.outputs
        return o["dx"], o["dscale"], o["dbias"]

    # ------------------------------------------------------------------ validation
    def validate(self) -> "Graph":
        """Check the whole graph, re-infer unset output dims, assign missing uids.

        Returns
        -------
        Graph
            ``self``.

        Raises
        ------
        GraphError
            Any node check (see the node methods), a virtual input no node produces,
            duplicate uids, a cycle, several disconnected components, an empty graph.
        """
        self._check()
        self.assign_uids()
        return self

    def _check(self) -> None:
        if not self._nodes:
            raise GraphError(f"graph '{self._name}' has no nodes")
        for node in self._nodes:
            where = _where(node.kind, node.name)
            for direction, slot, t in node.tensors():
                self._own(where, slot, t)
                if direction == "in" and t.is_virtual and t._producer is None:
                    raise GraphError(
                        f"{where}: input tensor {t.label} ({slot}) is virtual but no node "
                        "produces it; call set_output(True) on it or feed it from a node")
            fixed = {s: t.dims for s, t in node.outputs.items() if t._dims_explicit}
            out_dims, order_slot, node.attrs = _infer(node, fixed)
            _check_inputs(node)
            src = node.inputs[order_slot]
            for slot, t in node.outputs.items():
                if not t._dims_explicit and t.dims != out_dims[slot]:
                    t._dims = out_dims[slot]
                    t._set_packed_like(t._order or _order_of(src))
                elif t.dims != out_dims[slot]:
                    raise GraphError(
                        f"{where}: output tensor {t.label} ({slot}) has dims {t.dims}; the "
                        f"node's inputs give {out_dims[slot]}")
                _check_tensor(node, slot, t, out_dims[slot])
        uids = {}
        for t in self._tensors:
            if t.uid is None:
                continue
            if t.uid in uids:
                raise GraphError(f"graph '{self._name}': duplicate uid {t.uid} on tensors "
                                 f"{uids[t.uid].label} and {t.label}; uids must be unique")
            uids[t.uid] = t
        self._toposort()
        self._check_connected()

    def _toposort(self) -> list:
        producer = {}
        for node in self._nodes:
            for t in node.outputs.values():
                producer[id(t)] = node
        deps = {id(n): set() for n in self._nodes}
        users = {id(n): [] for n in self._nodes}
        for node in self._nodes:
            for t in node.inputs.values():
                p = producer.get(id(t))
                if p is not None and id(p) not in deps[id(node)]:
                    deps[id(node)].add(id(p))
                    users[id(p)].append(node)
        ready = [n for n in self._nodes if not deps[id(n)]]
        index = {id(n): i for i, n in enumerate(self._nodes)}
        order = []
        while ready:
            ready.sort(key=lambda n: index[id(n)])
            n = ready.pop(0)
            order.append(n)
            for u in users[id(n)]:
                deps[id(u)].discard(id(n))
                if not deps[id(u)]:
                    ready.append(u)
        if len(order) != len(self._nodes):
            left = [n.name for n in self._nodes if n not in order]
            raise GraphError(f"graph '{self._name}' contains a cycle through nodes "
                             f"{', '.join(repr(x) for x in left)}")
        return order

    def _check_connected(self) -> None:
        parent = list(range(len(self._nodes)))

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        seen = {}
        for i, node in enumerate(self._nodes):
            for _, _, t in node.tensors():
                j = seen.setdefault(id(t), i)
                parent[find(i)] = find(j)
        groups = {}
        for i, node in enumerate(self._nodes):
            groups.setdefault(find(i), []).append(node.name)
        if len(groups) > 1:
            parts = " and ".join("[" + ", ".join(repr(n) for n in g) + "]"
                                 for g in groups.values())
            raise GraphError(f"graph '{self._name}' has {len(groups)} disconnected "
                             f"components: {parts}; build one graph per component")

    def topological_nodes(self) -> tuple:
        """Nodes in dependency order (ties in insertion order).

        Returns
        -------
        tuple of Node

        Raises
        ------
        GraphError
            The graph contains a cycle.
        """
        return tuple(self._toposort())

    def assign_uids(self) -> "Graph":
        """Give every tensor without a uid the smallest unused uid, from 0, in creation order.

        Returns ``self``. Duplicate uids already set are not checked here (``validate``
        does).
        """
        used = {t.uid for t in self._tensors if t.uid is not None}
        nxt = 0
        for t in self._tensors:
            if t.uid is None:
                while nxt in used:
                    nxt += 1
                t._uid = nxt
                used.add(nxt)
        return self

    # ------------------------------------------------------------------ signature, copies
    def signature(self) -> str:
        """A stable text of the graph's computation, independent of uids and names.

        Lists, in topological order, every node's kind, attributes and compute type,
        and for every slot the tensor (numbered by first use), its dims, strides (``*``
        for size-1 dims, whose strides never matter), data type and virtual flag.
        Tensors no node uses are left out.

        Returns
        -------
        str
            Equal for graphs that compute the same thing on the same layouts; with the
            pattern name, the key of a device's plan cache and of the perf db.

        Raises
        ------
        GraphError
            The graph contains a cycle.
        """
        ids = {}
        parts = []
        for node in self._toposort():
            slots = []
            ins, outs = NODE_KINDS[node.kind]
            for direction, names, table in (("in", ins, node.inputs),
                                            ("out", outs, node.outputs)):
                for slot in names:
                    t = table.get(slot)
                    if t is None:
                        continue
                    k = ids.setdefault(id(t), len(ids))
                    strides = ",".join("*" if d == 1 else str(s)
                                       for d, s in zip(t.dims, t.strides))
                    dims = ",".join(str(d) for d in t.dims)
                    slots.append(f"{direction}:{slot}=t{k}[{dims}|{strides}|"
                                 f"{t.data_type.name}|{'v' if t.is_virtual else 'n'}]")
            parts.append(f"{node.kind}({_attrs_text(node.attrs)};compute="
                         f"{node.compute_data_type.name}){{{' '.join(slots)}}}")
        return ";".join(parts)

    def copy(self) -> "Graph":
        """Return an independent copy with the same names, uids, dims, strides and types.

        Nodes and tensors are new objects (node attributes, frozen, are shared); the
        copy is not validated and binds no device (hipDNN-style lowering state is not
        copied).
        """
        return self._copy()[0]

    def _snapshot(self):
        """Internal: validate, then return ``(copy, {id(tensor): copy's tensor})``.

        What an execution plan keeps (docs/contract/semantics.md: "a plan is a snapshot of its
        graph at build"): later ``set_dims`` / ``set_data_type`` / ``set_strides`` / ``set_name``
        calls on this graph's tensors, or new nodes, change nothing the plan reads.
        Node attributes are frozen dataclasses, so sharing them is safe.
        """
        self.validate()
        return self._copy()

    def _copy(self):
        """Internal: (copy, {id(old tensor): new tensor})."""
        g = type(self).__new__(type(self))     # a subclass (hd.Graph) stays one
        g._name = self._name
        g._io_data_type = self._io_data_type
        g._intermediate_data_type = self._intermediate_data_type
        g._compute_data_type = self._compute_data_type
        g._nodes = []
        g._tensors = []
        tmap = {}
        for t in self._tensors:
            n = TensorAttributes.__new__(TensorAttributes)
            n.__dict__.update(t.__dict__)
            n._graph = g
            n._producer = None
            tmap[id(t)] = n
            g._tensors.append(n)
        for node in self._nodes:
            new = Node(kind=node.kind, name=node.name,
                       inputs={k: tmap[id(t)] for k, t in node.inputs.items()},
                       outputs={k: tmap[id(t)] for k, t in node.outputs.items()},
                       attrs=node.attrs, compute_data_type=node.compute_data_type,
                       groups=node.groups)
            for t in new.outputs.values():
                t._producer = new
            g._nodes.append(new)
        return g, tmap

    def with_batch_size(self, n: int) -> "Graph":
        """Return a copy whose data tensors have batch ``n``.

        Data tensors are the x, y, dy, dx, in0 and out slots, and a pointwise in1 of in0's
        dims (RELU_BWD's dy); their dims[0] becomes ``n`` and their strides are repacked
        in the same stride order. Weights, dw, scale, bias and statistics keep theirs;
        names and uids are preserved.

        Parameters
        ----------
        n : int
            The new batch, >= 0.

        Returns
        -------
        Graph
            A new, checked graph; ``self`` is unchanged.

        Raises
        ------
        GraphError
            ``n`` < 0 or not an int, or the copy is invalid (e.g. batchnorm training
            with N * spatial == 1, N = 0 for a non-inference node).
        """
        if isinstance(n, bool):
            raise GraphError(f"graph '{self._name}': with_batch_size: batch {n!r} must be "
                             "an int >= 0")
        try:
            n = operator.index(n)
        except TypeError:
            raise GraphError(f"graph '{self._name}': with_batch_size: batch {n!r} must be "
                             "an int >= 0") from None
        if n < 0:
            raise GraphError(f"graph '{self._name}': with_batch_size: batch {n} must be >= 0")
        data = {}
        for node in self._nodes:
            for slot, t in list(node.inputs.items()) + list(node.outputs.items()):
                if slot in DATA_SLOTS or (slot == "in1" and _in1_is_data(node, t)):
                    data[id(t)] = t
        g, tmap = self._copy()
        for key, old in data.items():
            t = tmap[key]
            if not t.dims:
                continue
            order = _order_of(old)
            t._dims = (n,) + tuple(old.dims[1:])
            t._order = tuple(order)
            t._strides = packed_strides(t._dims, t._order)
        g._check()
        return g

    def __repr__(self) -> str:
        return (f"Graph(name={self._name!r}, nodes={[n.name for n in self._nodes]}, "
                f"io_data_type={self._io_data_type.name}, intermediate_data_type="
                f"{self._intermediate_data_type.name}, compute_data_type="
                f"{self._compute_data_type.name})")


# ---------------------------------------------------------------------- per-kind checks
def _order_of(t: TensorAttributes) -> tuple:
    """Stride order of a tensor: the layout it was made with, else read from its strides."""
    if t._order is not None and len(t._order) == len(t.dims):
        return t._order
    return stride_order(t.dims, t.strides)


def _attrs_text(attrs) -> str:
    if isinstance(attrs, NoAttrs):
        return ""
    fields = []
    for f in dataclasses.fields(attrs):
        v = getattr(attrs, f.name)
        if isinstance(v, (ConvolutionMode, PointwiseMode)):
            v = v.name
        elif isinstance(v, float):
            v = repr(v)
        fields.append(f"{f.name}={v}")
    return ",".join(fields)


def _check_tensor(node: Node, slot: str, t: TensorAttributes, expected=None) -> None:
    """Dims, strides and data type of one tensor of a node."""
    where = f"{_where(node.kind, node.name)}: tensor {t.label} ({slot})"
    zero_ok = node.kind in _ZERO_BATCH_KINDS and slot not in ("w",) and slot not in _STAT_SLOTS
    check_dims(t.dims, where=where, allow_zero_batch=zero_ok)
    check_strides(t.dims, t.strides, where=where)
    dt = t.data_type
    if slot in _STAT_SLOTS:
        if dt is not DataType.FLOAT:
            raise GraphError(f"{where}: data type {dt.name} is not allowed; scale, bias and "
                             "statistics are FLOAT (tensors take the graph's io_data_type "
                             "unless given one: pass data_type='float32')")
    elif dt not in IO_DATA_TYPES:
        raise GraphError(f"{where}: data type {dt.name} is not allowed; use FLOAT, HALF or "
                         "BFLOAT16")


def _check_inputs(node: Node) -> None:
    for slot, t in node.inputs.items():
        _check_tensor(node, slot, t)


def _check_stat(where, slot, t, x) -> None:
    want = _shapes.bn_stat_dims(x.dims)
    if t.dims != want:
        raise GraphError(f"{where}: tensor {t.label} ({slot}) has dims {t.dims}; need "
                         f"{want} = [1, C, 1, 1{', 1' if len(want) == 5 else ''}] for x dims "
                         f"{x.dims}")


def _infer(node: Node, fixed: dict):
    """Check a node's inputs and attributes; return (output dims, order slot, attrs)."""
    return _INFER[node.kind](node, fixed, _where(node.kind, node.name))


def _infer_conv_fprop(node, fixed, where):
    x, w = node.inputs["x"], node.inputs["w"]
    a = node.attrs
    _check_rank(where, "x", x)
    _check_rank(where, "w", w, len(x.dims))
    check_dims(x.dims, where=f"{where}: tensor {x.label} (x)", allow_zero_batch=True)
    check_dims(w.dims, where=f"{where}: tensor {w.label} (w)")
    _shapes.check_conv_params(where, len(x.dims) - 2, a.pre_padding, a.post_padding,
                              a.stride, a.dilation)
    groups = _shapes.conv_groups(where, x.dims[1], w.dims[1], w.dims[0], declared=node.groups)
    spatial = _shapes.conv_output_spatial(where, x.dims[2:], w.dims[2:], a.pre_padding,
                                          a.post_padding, a.stride, a.dilation)
    return ({"y": (x.dims[0], w.dims[0]) + spatial}, "x",
            dataclasses.replace(a, groups=groups))


def _infer_conv_backward(node, fixed, where, data_slot, kernel_slot, out_slot):
    dy = node.inputs["dy"]
    a = node.attrs
    _check_rank(where, "dy", dy)
    rank = len(dy.dims)
    check_dims(dy.dims, where=f"{where}: tensor {dy.label} (dy)")
    out_dims = tuple(fixed.get(out_slot, node.outputs[out_slot].dims
                               if out_slot in node.outputs else ()))
    out_label = f"{out_slot}_dims"
    if len(out_dims) != rank:
        raise GraphError(f"{where}: {out_label} {out_dims} have rank {len(out_dims)}; need "
                         f"rank {rank} like dy {dy.dims}")
    check_dims(out_dims, where=f"{where}: {out_label}")
    _shapes.check_conv_params(where, rank - 2, a.pre_padding, a.post_padding, a.stride,
                              a.dilation)
    if out_slot == "dx":
        w = node.inputs["w"]
        _check_rank(where, "w", w, rank)
        check_dims(w.dims, where=f"{where}: tensor {w.label} (w)")
        x_dims, w_dims, w_name, x_name = out_dims, w.dims, f"w {w.label}", out_label
    else:
        x = node.inputs["x"]
        _check_rank(where, "x", x, rank)
        check_dims(x.dims, where=f"{where}: tensor {x.label} (x)")
        x_dims, w_dims, w_name, x_name = x.dims, out_dims, out_label, f"x {x.label}"
    if x_dims[0] != dy.dims[0]:
        raise GraphError(f"{where}: batch N={x_dims[0]} of {x_name} {x_dims} differs from "
                         f"dy {dy.label} N={dy.dims[0]}")
    if w_dims[0] != dy.dims[1]:
        raise GraphError(f"{where}: K={w_dims[0]} of {w_name} {w_dims} differs from dy "
                         f"{dy.label} channels {dy.dims[1]}")
    groups = _shapes.conv_groups(where, x_dims[1], w_dims[1], w_dims[0],
                                 "dx" if out_slot == "dx" else "x",
                                 "w" if out_slot == "dx" else "dw", declared=node.groups)
    spatial = _shapes.conv_output_spatial(where, x_dims[2:], w_dims[2:], a.pre_padding,
                                          a.post_padding, a.stride, a.dilation)
    if spatial != tuple(dy.dims[2:]):
        raise GraphError(
            f"{where}: dy {dy.label} spatial dims {tuple(dy.dims[2:])} do not match the "
            f"forward output {spatial} of {x_name} {x_dims} with kernel {tuple(w_dims[2:])}, "
            f"padding {a.pre_padding}/{a.post_padding}, stride {a.stride}, dilation "
            f"{a.dilation}")
    return {out_slot: tuple(out_dims)}, "dy", dataclasses.replace(a, groups=groups)


def _infer_conv_dgrad(node, fixed, where):
    return _infer_conv_backward(node, fixed, where, "dy", "w", "dx")


def _infer_conv_wgrad(node, fixed, where):
    return _infer_conv_backward(node, fixed, where, "dy", "x", "dw")


def _infer_pointwise(node, fixed, where):
    a = node.attrs
    in0 = node.inputs["in0"]
    in1 = node.inputs.get("in1")
    _check_rank(where, "in0", in0)
    if a.mode in _BINARY_MODES and in1 is None:
        raise GraphError(f"{where}: mode {a.mode.name} needs in1", code="ATTRIBUTE_NOT_SET")
    if a.mode not in _BINARY_MODES and in1 is not None:
        raise GraphError(f"{where}: mode {a.mode.name} takes one input; got in1 "
                         f"{in1.label}")
    if in1 is not None and in1.dims != in0.dims:
        bias = _shapes.bn_stat_dims(in0.dims)
        if not (a.mode is PointwiseMode.ADD and in1.dims == bias):
            allowed = f"{in0.dims}" + (f" or a bias {bias}" if a.mode is PointwiseMode.ADD
                                       else "")
            raise GraphError(f"{where}: tensor {in1.label} (in1) has dims {in1.dims}; need "
                             f"{allowed} to match in0 {in0.label}")
    if a.mode not in _RELU_MODES and (a.relu_lower_clip is not None
                                      or a.relu_upper_clip is not None):
        raise GraphError(f"{where}: relu clips are not allowed for mode {a.mode.name}; only "
                         "RELU_FWD and RELU_BWD take them")
    if (a.relu_lower_clip is not None and a.relu_upper_clip is not None
            and a.relu_lower_clip > a.relu_upper_clip):
        raise GraphError(f"{where}: relu_lower_clip {a.relu_lower_clip} > relu_upper_clip "
                         f"{a.relu_upper_clip}; need lower <= upper")
    if a.relu_lower_clip is None and a.relu_upper_clip is not None and a.relu_upper_clip < 0:
        raise GraphError(f"{where}: relu_upper_clip {a.relu_upper_clip} < 0, the lower clip "
                         f"when relu_lower_clip is not given; need lower <= upper (give "
                         f"relu_lower_clip <= {a.relu_upper_clip} for a clamp)")
    return {"out": in0.dims}, "in0", a


def _check_bn_x(where, x, slot="x", zero_ok=False):
    _check_rank(where, slot, x)
    check_dims(x.dims, where=f"{where}: tensor {x.label} ({slot})", allow_zero_batch=zero_ok)


def _infer_batchnorm(node, fixed, where):
    a = node.attrs
    x = node.inputs["x"]
    _check_bn_x(where, x)
    for slot in ("scale", "bias", "prev_running_mean", "prev_running_variance"):
        if slot in node.inputs:
            _check_stat(where, slot, node.inputs[slot], x)
    if x.dims[0] * _shapes.spatial_volume(x.dims) == 1:
        raise GraphError(f"{where}: tensor {x.label} (x) dims {x.dims} give one value per "
                         "channel (N * spatial == 1); batchnorm training needs N * spatial > 1")
    _check_epsilon(where, a.epsilon)
    if a.momentum is not None and not 0.0 <= a.momentum <= 1.0:
        raise GraphError(f"{where}: momentum {a.momentum} is outside [0, 1]")
    if "prev_running_mean" in node.inputs and a.momentum is None:
        raise GraphError(f"{where}: running statistics need momentum (a float in [0, 1])",
                         code="ATTRIBUTE_NOT_SET")
    stat = _shapes.bn_stat_dims(x.dims)
    out = {"y": x.dims, "mean": stat, "inv_variance": stat}
    if "prev_running_mean" in node.inputs:
        out["next_running_mean"] = stat
        out["next_running_variance"] = stat
    return out, "x", a


def _infer_bn_inference(node, fixed, where):
    x = node.inputs["x"]
    _check_bn_x(where, x, zero_ok=True)
    for slot in node.inputs:
        if slot != "x":
            _check_stat(where, slot, node.inputs[slot], x)
    a = node.attrs
    if isinstance(a, BatchnormInferenceVarianceAttrs):
        _check_epsilon(where, a.epsilon)
    return {"y": x.dims}, "x", a


def _infer_bn_backward(node, fixed, where):
    x, dy = node.inputs["x"], node.inputs["dy"]
    _check_bn_x(where, dy, "dy")
    _check_bn_x(where, x)
    if dy.dims != x.dims:
        raise GraphError(f"{where}: tensor {dy.label} (dy) dims {dy.dims} differ from x "
                         f"{x.label} dims {x.dims}")
    for slot in ("scale", "mean", "inv_variance"):
        _check_stat(where, slot, node.inputs[slot], x)
    stat = _shapes.bn_stat_dims(x.dims)
    return {"dx": x.dims, "dscale": stat, "dbias": stat}, "dy", node.attrs


_INFER = {
    "conv_fprop": _infer_conv_fprop,
    "conv_dgrad": _infer_conv_dgrad,
    "conv_wgrad": _infer_conv_wgrad,
    "pointwise": _infer_pointwise,
    "batchnorm": _infer_batchnorm,
    "batchnorm_inference": _infer_bn_inference,
    "batchnorm_inference_variance_ext": _infer_bn_inference,
    "batchnorm_backward": _infer_bn_backward,
}
