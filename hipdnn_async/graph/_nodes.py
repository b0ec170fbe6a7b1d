"""Nodes of a graph: one frozen dataclass of attributes per node kind
(docs/design/internals.md s.1)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .._types import ConvolutionMode, DataType, PointwiseMode
from ._tensor import TensorAttributes

__all__ = [
    "Node",
    "ConvAttrs",
    "PointwiseAttrs",
    "BatchnormAttrs",
    "BatchnormInferenceVarianceAttrs",
    "NoAttrs",
    "NODE_KINDS",
    "DEFAULT_NODE_NAMES",
    "OUTPUT_SUFFIXES",
]

# kind -> (input slots, output slots); optional slots are absent from a node's dicts.
NODE_KINDS = {
    "conv_fprop": (("x", "w"), ("y",)),
    "conv_dgrad": (("dy", "w"), ("dx",)),
    "conv_wgrad": (("dy", "x"), ("dw",)),
    "pointwise": (("in0", "in1"), ("out",)),
    "batchnorm": (("x", "scale", "bias", "prev_running_mean", "prev_running_variance"),
                  ("y", "mean", "inv_variance", "next_running_mean", "next_running_variance")),
    "batchnorm_inference": (("x", "mean", "inv_variance", "scale", "bias"), ("y",)),
    "batchnorm_inference_variance_ext": (("x", "mean", "variance", "scale", "bias"), ("y",)),
    "batchnorm_backward": (("dy", "x", "scale", "mean", "inv_variance"),
                           ("dx", "dscale", "dbias")),
}

# hipDNN frontend default node names ("ConvolutionFprop_<n>", Graph.hpp).
DEFAULT_NODE_NAMES = {
    "conv_fprop": "ConvolutionFprop",
    "conv_dgrad": "ConvolutionDgrad",
    "conv_wgrad": "ConvolutionWgrad",
    "pointwise": "Pointwise",
    "batchnorm": "Batchnorm",
    "batchnorm_inference": "BatchnormInference",
    "batchnorm_inference_variance_ext": "BatchnormInferenceVarianceExt",
    "batchnorm_backward": "BatchnormBackward",
}

# Output tensor names are "<node>::<SUFFIX>" (hipDNN outputTensor()).
OUTPUT_SUFFIXES = {
    "y": "Y", "dx": "DX", "dw": "DW", "out": "OUT_0", "mean": "MEAN",
    "inv_variance": "INV_VARIANCE", "next_running_mean": "NEXT_RUNNING_MEAN",
    "next_running_variance": "NEXT_RUNNING_VARIANCE", "dscale": "DSCALE", "dbias": "DBIAS",
}


@dataclass(frozen=True)
class ConvAttrs:
    """Convolution parameters; tuples have one entry per spatial dim."""

    pre_padding: tuple
    post_padding: tuple
    stride: tuple
    dilation: tuple
    mode: ConvolutionMode = ConvolutionMode.CROSS_CORRELATION
    groups: int = 1

    @property
    def padding(self) -> tuple:
        """Pre padding (equal to post padding when symmetric)."""
        return self.pre_padding

    @property
    def is_symmetric(self) -> bool:
        """True when pre and post padding are equal."""
        return self.pre_padding == self.post_padding


@dataclass(frozen=True)
class PointwiseAttrs:
    """Pointwise mode and optional ReLU clips."""

    mode: PointwiseMode
    relu_lower_clip: float | None = None
    relu_upper_clip: float | None = None


@dataclass(frozen=True)
class BatchnormAttrs:
    """Batchnorm training scalars (passed by value)."""

    epsilon: float
    momentum: float | None = None


@dataclass(frozen=True)
class BatchnormInferenceVarianceAttrs:
    """Batchnorm inference-with-variance scalar."""

    epsilon: float


@dataclass(frozen=True)
class NoAttrs:
    """Nodes without scalar attributes."""


@dataclass(eq=False)
class Node:
    """One operation of a graph (internal).

    ``inputs`` / ``outputs`` map slot names to tensors; optional slots are absent.
    """

    kind: str
    name: str
    inputs: dict[str, TensorAttributes] = field(default_factory=dict)
    outputs: dict[str, TensorAttributes] = field(default_factory=dict)
    attrs: object = field(default_factory=NoAttrs)
    compute_data_type: DataType = DataType.FLOAT
    groups: int | None = None      # a convolution's declared groups; None: x.C // w.C

    @property
    def describe(self) -> str:
        """``kind`` plus the pointwise mode, for messages (e.g. ``pointwise RELU_FWD``)."""
        if self.kind == "pointwise":
            return f"pointwise {self.attrs.mode.name}"
        return self.kind

    def tensors(self):
        """Yield (direction, slot, tensor) for every input then every output."""
        for slot, t in self.inputs.items():
            yield "in", slot, t
        for slot, t in self.outputs.items():
            yield "out", slot, t

    def __repr__(self) -> str:
        ins = ", ".join(f"{k}={t.name!r}" for k, t in self.inputs.items())
        outs = ", ".join(f"{k}={t.name!r}" for k, t in self.outputs.items())
        return f"Node({self.kind} {self.name!r}: {ins} -> {outs}; {self.attrs})"

