"""Graph tensors and convolutions in MIOpen terms: descriptors, layouts, activations.

MIOpen reads a tensor's layout from its strides (``miopenSetTensorDescriptor`` with dims
in logical N, C, [D,] H, W order), so every descriptor here is the graph tensor's own dims
and element strides. What MIOpen cannot take is a ``NotSupportedError`` naming the tensor
(the decline set: the CPU engine still runs the graph):

- data types other than FLOAT, HALF, BFLOAT16 (``miopenFloat``, ``miopenHalf``,
  ``miopenBFloat16``, as hipDNN's provider maps them: ``MP/MiopenUtils.cpp``);
- dims or strides beyond 32 bits (``miopenSetTensorDescriptor`` takes ``int``);
- asymmetric padding and convolution modes other than cross-correlation
  (``miopenInitConvolutionNdDescriptor`` has one pad per spatial dim; hipDNN rejects the
  same, ``MP/MiopenConvDescriptor.cpp``), 1-D convolutions;
- batchnorm tensors that are not packed NCHW / NHWC / NCDHW / NDHWC, and per-channel
  tensors that are not FLOAT (MIOpen 3.x's kernels; hipDNN's
  ``MiopenBatchnormApplicabilityChecks.cpp``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..._errors import NotSupportedError
from ..._layout import LAYOUT_ORDERS, packed_strides, stride_order, strides_match
from ..._types import DataType
from ...patterns import Pattern
from ...runtime import _miopen

__all__ = ["MIOPEN_DTYPE", "data_type_code", "tensor_descriptor", "channel_descriptor",
           "packed_layout", "ConvSetup", "conv_setup", "Activation", "activation",
           "CONV_ROLES"]

MIOPEN_DTYPE = {DataType.FLOAT: _miopen.DATA_FLOAT, DataType.HALF: _miopen.DATA_HALF,
                DataType.BFLOAT16: _miopen.DATA_BFLOAT16}

# (a, b, c) variant-pack roles in the immediate-mode C argument order, per direction:
# forward (w, x, y), backward data (dy, w, dx), backward weights (dy, x, dw)
CONV_ROLES = (("w", "x", "y"), ("dy", "w", "dx"), ("dy", "x", "dw"))
# the Find 2.0 problem's X, W, Y roles per direction (X is dx for dgrad, W is dw for wgrad)
FIND_ROLES = (("x", "w", "y"), ("dx", "w", "dy"), ("x", "dw", "dy"))
_DIRECTION = {Pattern.CONV_FPROP: _miopen.FORWARD, Pattern.CONV_FPROP_BIAS_RELU: _miopen.FORWARD,
              Pattern.CONV_DGRAD: _miopen.BACKWARD_DATA, Pattern.CONV_WGRAD: _miopen.BACKWARD_WEIGHTS}


def data_type_code(tensor, where: str) -> int:
    """The ``miopenDataType_t`` of a graph tensor."""
    code = MIOPEN_DTYPE.get(tensor.data_type)
    if code is None:
        raise NotSupportedError(f"{where}: tensor '{tensor.name}' has data type "
                                f"{tensor.data_type.name}; MIOpen plans take FLOAT, HALF or BFLOAT16")
    return code


def _int32(values, what: str, tensor, where: str) -> None:
    for v in values:
        if not 0 <= v <= 0x7FFFFFFF:
            raise NotSupportedError(f"{where}: tensor '{tensor.name}' has {what} {tuple(values)}; "
                                    "MIOpen descriptors take 32-bit dims and strides")


def tensor_descriptor(tensor, where: str, *, dims=None, strides=None, dtype=None):
    """A ``_miopen.TensorDescriptor`` with the tensor's dims and element strides (or the
    given ones)."""
    dims = tuple(tensor.dims if dims is None else dims)
    strides = tuple(tensor.strides if strides is None else strides)
    _int32(dims, "dims", tensor, where)
    _int32(strides, "strides", tensor, where)
    code = data_type_code(tensor, where) if dtype is None else dtype
    return _miopen.TensorDescriptor(code, dims, strides)


def channel_descriptor(tensor, where: str):
    """The descriptor of a per-channel batchnorm tensor (scale, bias, mean, variance,
    inv_variance, their gradients): FLOAT, dims (1, C, 1, 1[, 1]), channel stride 1."""
    if tensor.data_type != DataType.FLOAT:
        raise NotSupportedError(f"{where}: per-channel tensor '{tensor.name}' is "
                                f"{tensor.data_type.name}; MIOpen batchnorm takes FLOAT")
    dims = tuple(tensor.dims)
    packed = packed_strides(dims, tuple(range(len(dims))))
    if not strides_match(dims, packed, tuple(tensor.strides)):
        raise NotSupportedError(f"{where}: per-channel tensor '{tensor.name}' has strides "
                                f"{tuple(tensor.strides)}; MIOpen needs them packed {packed}")
    return tensor_descriptor(tensor, where, strides=packed)


def packed_layout(tensor, where: str) -> tuple:
    """The stride order of a batchnorm data tensor packed in NCHW / NHWC / NCDHW / NDHWC;
    NotSupportedError otherwise."""
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    for name, order in LAYOUT_ORDERS.items():
        if len(order) == len(dims) and strides_match(dims, packed_strides(dims, order), strides):
            return order
    raise NotSupportedError(f"{where}: tensor '{tensor.name}' has strides {strides}; MIOpen "
                            "batchnorm takes packed NCHW, NHWC, NCDHW or NDHWC tensors")


@dataclass
class ConvSetup:
    """The descriptors of one convolution pattern, in MIOpen's terms.

    Attributes
    ----------
    direction : int
        ``_miopen.FORWARD`` / ``BACKWARD_DATA`` / ``BACKWARD_WEIGHTS``.
    roles : tuple of str
        Variant-pack roles (a, b, c) in the immediate-mode argument order.
    descs : tuple of TensorDescriptor
        Their descriptors, same order; c is the output.
    conv : ConvolutionDescriptor
        Symmetric padding, stride, dilation, groups, cross-correlation.
    find_roles : tuple of str
        The Find 2.0 problem's X, W, Y roles.
    """

    direction: int
    roles: tuple
    descs: tuple
    conv: object
    find_roles: tuple

    def desc(self, role: str):
        return self.descs[self.roles.index(role)]


def conv_setup(match, where: str) -> ConvSetup:
    """Descriptors of a convolution pattern (fprop, dgrad, wgrad, or the fprop of
    conv + bias + activation)."""
    t, conv = match.tensors, match.params["conv"]
    direction = _DIRECTION[match.pattern]
    pre, post = tuple(conv.pre_padding), tuple(conv.post_padding)
    if pre != post:
        raise NotSupportedError(f"{where}: MIOpen convolutions take symmetric padding; got "
                                f"pre {pre}, post {post}")
    if len(pre) not in (2, 3):
        raise NotSupportedError(f"{where}: {len(pre)}-D convolution; MIOpen plans take 2-D "
                                "and 3-D convolutions")
    mode = getattr(conv.mode, "name", str(conv.mode))
    if mode != "CROSS_CORRELATION":
        raise NotSupportedError(f"{where}: convolution mode {mode}; MIOpen plans take "
                                "cross-correlation only")
    roles = CONV_ROLES[direction]
    descs = tuple(tensor_descriptor(t[r], where) for r in roles)
    types = {t[r].data_type for r in roles}
    if len(types) != 1:
        raise NotSupportedError(f"{where}: MIOpen convolutions take one data type for all "
                                f"three tensors; got {', '.join(f'{r} {t[r].data_type.name}' for r in roles)}")
    cdesc = _miopen.ConvolutionDescriptor(pre, tuple(conv.stride), tuple(conv.dilation),
                                          int(conv.groups), _miopen.CONVOLUTION)
    return ConvSetup(direction, roles, descs, cdesc, FIND_ROLES[direction])


@dataclass(frozen=True)
class Activation:
    """A RELU_FWD / RELU_BWD with clips, as a MIOpen activation: ``mode`` and the
    ``miopenSetActivationDescriptor`` alpha / beta."""

    mode: int
    alpha: float = 0.0
    beta: float = 0.0

    @property
    def name(self) -> str:
        return {_miopen.ACTIVATION_RELU: "RELU", _miopen.ACTIVATION_CLIPPEDRELU: "CLIPPEDRELU",
                _miopen.ACTIVATION_CLAMP: "CLAMP"}.get(self.mode, str(self.mode))

    def descriptor(self):
        return _miopen.ActivationDescriptor(self.mode, self.alpha, self.beta, 0.0)


def activation(lower, upper, version: tuple, where: str) -> Activation:
    """The MIOpen activation of a ReLU with clips ``lower`` / ``upper`` (None: none), as
    hipDNN's provider maps them (``MP/MiopenUtils.cpp``): no clip -> RELU; an upper clip
    only -> CLIPPEDRELU (alpha = upper); a lower clip (not 0) -> CLAMP (alpha = lower,
    beta = upper or +inf), which MIOpen has from 3.5 on.

    Raises
    ------
    NotSupportedError
        A lower clip on a MIOpen without ``miopenActivationCLAMP``.
    """
    lo = 0.0 if lower is None else float(lower)
    if lo == 0.0:
        if upper is None:
            return Activation(_miopen.ACTIVATION_RELU)
        return Activation(_miopen.ACTIVATION_CLIPPEDRELU, float(upper))
    if tuple(version) < _miopen.SINCE["ACTIVATION_CLAMP"]:
        raise NotSupportedError(
            f"{where}: relu_lower_clip = {lower}; MIOpen {'.'.join(map(str, version))} has no "
            "miopenActivationCLAMP (MIOpen >= 3.5): a lower clip other than 0 cannot be expressed")
    return Activation(_miopen.ACTIVATION_CLAMP, lo, math.inf if upper is None else float(upper))


def packed_like(tensor) -> tuple:
    """Packed strides of ``tensor``'s dims in its own stride order (workspace copies)."""
    dims = tuple(tensor.dims)
    return packed_strides(dims, stride_order(dims, tuple(tensor.strides)))
