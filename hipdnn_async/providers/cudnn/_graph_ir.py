"""A matched pattern as a cuDNN operation graph, in plain data (no cuDNN call here).

``graph_spec(match)`` returns a :class:`GraphSpec`: the backend tensors (uid, data type,
dims, strides, virtual, by value), the operations in topological order, and what each
variant-pack uid is bound to at execution (a pattern role, a workspace segment, or a
host scalar). ``_graph_lower`` turns it into finalized descriptors; keeping the
translation pure lets it be tested without a GPU.

How the patterns map (measured by an H200 probe of the backend API: docs/design/vendor-notes.md,
"cuDNN backend call sequences" and "Batchnorm on Hopper"):

- conv fprop / dgrad / wgrad: one CONVOLUTION_{FORWARD,BACKWARD_DATA,BACKWARD_FILTER}
  operation, compute type FLOAT, pre and post paddings as given (asymmetric padding is
  expressed directly), groups through the channel counts of x and w.
- conv + bias + activation: conv writes a virtual FLOAT tensor; pointwise ADD of the bias
  (when present) to another virtual FLOAT tensor; pointwise RELU_FWD with the clips into y
  (PyTorch's ``build_opgraph_fused`` shape).
- batchnorm training (+ ReLU): NORM_FORWARD(BATCH_NORM, TRAINING) with epsilon and, with
  running statistics, the momentum as by-value host scalars; with ReLU its y is a virtual
  FLOAT tensor read by pointwise RELU_FWD. Saved mean / inv_variance that are virtual in
  the user's graph are real tensors in workspace segments.
- batchnorm backward: NORM_BACKWARD(BATCH_NORM) with the saved statistics.
- batchnorm inference + DReLU + backward: NORM_FORWARD(INFERENCE) -> virtual FLOAT y_bn ->
  pointwise RELU_BWD(y_bn, dy) -> virtual dReLU output -> NORM_BACKWARD. cuDNN 9.19 takes
  this only with the dReLU output declared HALF for HALF data (FLOAT gives no engine; the
  probe, and cudnn-frontend's sample); ``DRELU_DTYPES`` lists what is tried per I/O type.

Only channels-last batchnorm goes here: for NCHW the legacy SPATIAL_PERSISTENT calls are
faster (62/89 us against 131/201 us, "Batchnorm on Hopper" there), and standalone BN
inference has no graph form.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..._errors import NotSupportedError
from ..._types import ConvolutionMode, DataType
from ...patterns import Pattern

__all__ = ["TensorSpec", "OpSpec", "GraphSpec", "graph_spec", "channels_last",
           "DRELU_DTYPES", "IO_TYPES"]

IO_TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)

# Data type of the virtual dReLU output of BN_INFERENCE_DRELU_BACKWARD, tried in order per
# I/O type. HALF is the one cuDNN 9.19 accepts for HALF data; for FLOAT and BFLOAT16 the
# I/O type itself (a HALF copy of dy would round FLOAT and overflow BFLOAT16's range).
DRELU_DTYPES = {DataType.HALF: (DataType.HALF,), DataType.BFLOAT16: (DataType.BFLOAT16,),
                DataType.FLOAT: (DataType.FLOAT,)}

_CONV = {Pattern.CONV_FPROP: "conv_fprop", Pattern.CONV_DGRAD: "conv_dgrad",
         Pattern.CONV_WGRAD: "conv_wgrad"}
# conv slot -> pattern role, per direction (the backend's x / w / y naming)
_CONV_SLOTS = {"conv_fprop": (("x", "x"), ("w", "w"), ("y", "y")),
               "conv_dgrad": (("dx", "dx"), ("w", "w"), ("dy", "dy")),
               "conv_wgrad": (("x", "x"), ("dw", "dw"), ("dy", "dy"))}
_BN_PATTERNS = (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU, Pattern.BN_BACKWARD,
                Pattern.BN_INFERENCE_DRELU_BACKWARD)
_PER_CHANNEL = ("scale", "bias", "mean", "inv_variance", "dscale", "dbias",
                "prev_running_mean", "prev_running_variance", "next_running_mean",
                "next_running_variance")


@dataclass(frozen=True)
class TensorSpec:
    """One backend tensor. ``binding`` says what its variant-pack pointer is at run time:
    ``("role", name)`` a pattern buffer, ``("segment", name)`` a workspace segment of
    ``nbytes``, ``("scalar", value)`` a by-value FLOAT host scalar, ``None`` virtual."""

    uid: int
    name: str
    data_type: DataType
    dims: tuple
    strides: tuple
    virtual: bool = False
    by_value: bool = False
    binding: tuple | None = None
    nbytes: int = 0


@dataclass(frozen=True)
class OpSpec:
    """One backend operation: ``kind`` (conv_fprop, conv_dgrad, conv_wgrad, pointwise,
    norm_forward, norm_backward), ``slots`` (backend slot -> tensor uid) and ``attrs``."""

    kind: str
    slots: tuple          # ((slot, uid), ...)
    attrs: tuple = ()     # ((name, value), ...)

    def slot(self, name: str) -> int | None:
        return dict(self.slots).get(name)

    def attr(self, name: str, default=None):
        return dict(self.attrs).get(name, default)


@dataclass(frozen=True)
class GraphSpec:
    """A pattern as a cuDNN operation graph (see the module docstring)."""

    pattern: Pattern
    tensors: tuple
    ops: tuple
    variant: str = ""         # which alternative this is ("drelu HALF"), for messages

    def tensor(self, uid: int) -> TensorSpec:
        return next(t for t in self.tensors if t.uid == uid)

    @property
    def pack(self) -> tuple:
        """The non-virtual tensors, in uid order: the variant pack."""
        return tuple(sorted((t for t in self.tensors if not t.virtual), key=lambda t: t.uid))

    @property
    def segments(self) -> tuple:
        """(name, nbytes) of the workspace segments, in uid order."""
        return tuple((t.binding[1], t.nbytes) for t in self.pack if t.binding[0] == "segment")


def channels_last(tensor) -> bool:
    """True when the channel axis has the smallest stride among dims > 1 (NHWC, NDHWC)."""
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    big = [s for d, s in zip(dims, strides) if d > 1]
    return dims[1] > 1 and strides[1] == min(big)


def _channel_strides(dims) -> tuple:
    # (1, C, 1, ...) with the probe's strides (C, 1, C, C): only the channel stride addresses
    # memory, and cuDNN's batchnorm matchers were measured with this form.
    c = dims[1]
    return tuple(1 if i == 1 else c for i in range(len(dims)))


class _Builder:
    def __init__(self, match, where: str):
        self.match = match
        self.where = where
        self.tensors: list[TensorSpec] = []
        self.ops: list[OpSpec] = []
        self._virtual_uid = 100

    def _next_uid(self) -> int:
        # role tensors: 1.. in order of appearance; virtual/segment/scalar ones: 100..
        return len([t for t in self.tensors if t.uid < 100]) + 1

    def role(self, role: str, *, per_channel: bool = False) -> int:
        t = self.match.tensors[role]
        if t.data_type not in IO_TYPES:
            raise NotSupportedError(f"{self.where}: tensor '{t.name}' ({role}) is "
                                    f"{t.data_type.name}; the cuDNN graph engine takes FLOAT, "
                                    "HALF or BFLOAT16")
        dims, strides = tuple(t.dims), tuple(t.strides)
        if per_channel:
            if t.data_type != DataType.FLOAT:
                raise NotSupportedError(f"{self.where}: per-channel tensor '{t.name}' ({role}) "
                                        f"is {t.data_type.name}; cuDNN batchnorm takes FLOAT")
            if any(d != 1 for i, d in enumerate(dims) if i != 1) or (dims[1] > 1 and strides[1] != 1):
                raise NotSupportedError(f"{self.where}: per-channel tensor '{t.name}' ({role}) "
                                        f"has dims {dims}, strides {strides}; cuDNN takes "
                                        "(1, C, 1, ...) with channel stride 1")
            strides = _channel_strides(dims)
        uid = self._next_uid()
        self.tensors.append(TensorSpec(uid, t.name, t.data_type, dims, strides,
                                       binding=("role", role)))
        return uid

    def virtual(self, name: str, data_type: DataType, like) -> int:
        self._virtual_uid += 1
        self.tensors.append(TensorSpec(self._virtual_uid, name, data_type, tuple(like.dims),
                                       tuple(like.strides), virtual=True))
        return self._virtual_uid

    def segment(self, name: str, like_role: str, *, per_channel: bool) -> int:
        """A tensor the user's graph has virtual but cuDNN writes: workspace scratch."""
        t = self.match.tensors[like_role]
        dims = tuple(t.dims)
        strides = _channel_strides(dims) if per_channel else tuple(t.strides)
        self._virtual_uid += 1
        self.tensors.append(TensorSpec(self._virtual_uid, name, DataType.FLOAT, dims, strides,
                                       binding=("segment", name), nbytes=4 * dims[1]))
        return self._virtual_uid

    def scalar(self, name: str, value: float, rank: int) -> int:
        self._virtual_uid += 1
        ones = (1,) * rank
        self.tensors.append(TensorSpec(self._virtual_uid, name, DataType.FLOAT, ones, ones,
                                       by_value=True, binding=("scalar", float(value))))
        return self._virtual_uid

    def op(self, kind: str, slots: dict, **attrs) -> None:
        self.ops.append(OpSpec(kind, tuple(slots.items()), tuple(sorted(attrs.items()))))

    def stats(self, role: str) -> int:
        """A saved statistic: the user's buffer, or a workspace segment when virtual."""
        t = self.match.tensors.get(role)
        if t is not None and not t.is_virtual:
            return self.role(role, per_channel=True)
        return self.segment(role, "scale", per_channel=True)

    def spec(self, variant: str = "") -> GraphSpec:
        return GraphSpec(self.match.pattern, tuple(self.tensors), tuple(self.ops), variant)


def _relu_attrs(params) -> dict:
    lower, upper = params.get("relu_lower_clip"), params.get("relu_upper_clip")
    return {"lower_clip": 0.0 if lower is None else float(lower),
            "upper_clip": None if upper is None else float(upper)}


def _conv_attrs(conv, where: str) -> dict:
    mode = {ConvolutionMode.CONVOLUTION: "convolution"}.get(conv.mode, "cross_correlation")
    for name in ("pre_padding", "post_padding"):
        if any(p < 0 for p in getattr(conv, name)):
            raise NotSupportedError(f"{where}: negative {name} {tuple(getattr(conv, name))}")
    return {"mode": mode, "pre_padding": tuple(conv.pre_padding),
            "post_padding": tuple(conv.post_padding), "stride": tuple(conv.stride),
            "dilation": tuple(conv.dilation)}


def _conv(b: _Builder, kind: str, match) -> None:
    slots = {slot: b.role(role) for slot, role in _CONV_SLOTS[kind]}
    b.op(kind, slots, **_conv_attrs(match.params["conv"], b.where))


def _conv_bias_act(b: _Builder, match) -> None:
    y = match.tensors["y"]
    slots = {"x": b.role("x"), "w": b.role("w")}
    slots["y"] = conv_out = b.virtual("conv_out", DataType.FLOAT, y)
    b.op("conv_fprop", slots, **_conv_attrs(match.params["conv"], b.where))
    act_in = conv_out
    if "bias" in match.tensors:
        bias = match.tensors["bias"]
        per_channel = all(d == 1 for i, d in enumerate(bias.dims) if i != 1)
        if per_channel and bias.dims[1] > 1 and bias.strides[1] != 1:
            raise NotSupportedError(f"{b.where}: bias '{bias.name}' has channel stride "
                                    f"{bias.strides[1]}; cuDNN takes 1")
        bias_uid = b.role("bias")
        if per_channel:  # same channel-stride form as batchnorm's per-channel tensors
            t = b.tensors[-1]
            b.tensors[-1] = TensorSpec(t.uid, t.name, t.data_type, t.dims,
                                       _channel_strides(t.dims), binding=t.binding)
        act_in = b.virtual("biased", DataType.FLOAT, y)
        b.op("pointwise", {"x": conv_out, "b": bias_uid, "y": act_in}, mode="add")
    b.op("pointwise", {"x": act_in, "y": b.role("y")}, mode="relu_fwd",
         **_relu_attrs(match.params))


def _bn_training(b: _Builder, match, relu: bool) -> None:
    t, p = match.tensors, match.params
    rank = len(t["x"].dims)
    slots = {"x": b.role("x"), "scale": b.role("scale", per_channel=True),
             "bias": b.role("bias", per_channel=True)}
    slots["mean"] = b.stats("mean")
    slots["inv_variance"] = b.stats("inv_variance")
    slots["epsilon"] = b.scalar("epsilon", p["epsilon"], rank)
    if "next_running_mean" in t:
        if p.get("momentum") is None:
            raise NotSupportedError(f"{b.where}: running statistics need a momentum")
        slots["momentum"] = b.scalar("momentum", p["momentum"], rank)
        for slot, role in (("in_running_mean", "prev_running_mean"),
                           ("in_running_var", "prev_running_variance"),
                           ("out_running_mean", "next_running_mean"),
                           ("out_running_var", "next_running_variance")):
            slots[slot] = b.role(role, per_channel=True)
    y = t["y"]
    if relu:
        slots["y"] = bn_out = b.virtual("bn_out", DataType.FLOAT, y)
        b.op("norm_forward", slots, phase="training")
        b.op("pointwise", {"x": bn_out, "y": b.role("y")}, mode="relu_fwd",
             **_relu_attrs(p))
    else:
        slots["y"] = b.role("y")
        b.op("norm_forward", slots, phase="training")


def _bn_backward(b: _Builder) -> None:
    slots = {"x": b.role("x"), "dy": b.role("dy"),
             "scale": b.role("scale", per_channel=True),
             "mean": b.role("mean", per_channel=True),
             "inv_variance": b.role("inv_variance", per_channel=True),
             "dscale": b.role("dscale", per_channel=True),
             "dbias": b.role("dbias", per_channel=True), "dx": b.role("dx")}
    b.op("norm_backward", slots)


def _bn_drelu_backward(b: _Builder, match, drelu_dtype: DataType) -> None:
    x = match.tensors["x"]
    xs = {"x": b.role("x"), "scale": b.role("scale", per_channel=True),
          "mean": b.role("mean", per_channel=True),
          "inv_variance": b.role("inv_variance", per_channel=True)}
    bias = b.role("bias", per_channel=True)
    y_bn = b.virtual("bn_out", DataType.FLOAT, x)
    b.op("norm_forward", dict(xs, bias=bias, y=y_bn), phase="inference")
    g = b.virtual("drelu_out", drelu_dtype, x)
    b.op("pointwise", {"x": y_bn, "dy": b.role("dy"), "dx": g}, mode="relu_bwd",
         **_relu_attrs(match.params))
    b.op("norm_backward", dict(xs, dy=g, dscale=b.role("dscale", per_channel=True),
                               dbias=b.role("dbias", per_channel=True), dx=b.role("dx")))


def graph_spec(match, where: str) -> list[GraphSpec]:
    """The operation graphs that express ``match``, in the order to try (one, or one per
    dReLU data type of BN_INFERENCE_DRELU_BACKWARD).

    Raises
    ------
    NotSupportedError
        A pattern, layout or data type this engine leaves to the legacy engine: standalone
        BN inference, NCHW batchnorm, non-FLOAT per-channel tensors, DOUBLE I/O, ranks
        other than 4 and 5.
    """
    pattern, t = match.pattern, match.tensors
    data = t.get("x", t.get("dy"))
    rank = len(data.dims)
    if rank not in (4, 5):
        raise NotSupportedError(f"{where}: {rank}-D tensors; the cuDNN graph engine takes 4-D "
                                "and 5-D")
    if pattern == Pattern.BN_INFERENCE_VARIANCE:
        raise NotSupportedError(f"{where}: cuDNN's graph API has no standalone batchnorm "
                                "inference (the legacy engine runs it)")
    if pattern in _BN_PATTERNS:
        for role in ("x", "y", "dx", "dy"):
            if role in t and not channels_last(t[role]):
                raise NotSupportedError(
                    f"{where}: tensor '{t[role].name}' ({role}) is not channels-last "
                    f"(strides {tuple(t[role].strides)}); NCHW batchnorm runs faster on the "
                    "legacy engine (SPATIAL_PERSISTENT)")
        for role in _PER_CHANNEL:
            if role in t and t[role].data_type != DataType.FLOAT:
                raise NotSupportedError(f"{where}: per-channel tensor '{t[role].name}' ({role}) "
                                        f"is {t[role].data_type.name}; cuDNN batchnorm takes "
                                        "FLOAT")
    if pattern == Pattern.BN_INFERENCE_DRELU_BACKWARD:
        specs = []
        for dt in DRELU_DTYPES[t["x"].data_type]:
            b = _Builder(match, where)
            _bn_drelu_backward(b, match, dt)
            specs.append(b.spec(f"dReLU output {dt.name}"))
        return specs
    b = _Builder(match, where)
    if pattern in _CONV:
        _conv(b, _CONV[pattern], match)
    elif pattern == Pattern.CONV_FPROP_BIAS_RELU:
        _conv_bias_act(b, match)
    elif pattern in (Pattern.BN_TRAINING, Pattern.BN_TRAINING_RELU):
        _bn_training(b, match, relu=pattern == Pattern.BN_TRAINING_RELU)
    elif pattern == Pattern.BN_BACKWARD:
        _bn_backward(b)
    else:  # pragma: no cover - every pattern is handled above
        raise NotSupportedError(f"{where}: pattern {pattern.name} has no cuDNN graph form")
    return [b.spec()]
