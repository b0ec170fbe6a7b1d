"""The graph layer: tensors, nodes, shape inference and validation (pure Python).

Public: ``Graph``, ``TensorAttributes``, ``strides_for`` and the node attribute classes.
"""
from ._graph import DATA_SLOTS, Graph
from ._nodes import (
    NODE_KINDS,
    BatchnormAttrs,
    BatchnormInferenceVarianceAttrs,
    ConvAttrs,
    Node,
    NoAttrs,
    PointwiseAttrs,
)
from ._tensor import TensorAttributes, packed_strides, stride_order, strides_for

__all__ = [
    "Graph",
    "TensorAttributes",
    "strides_for",
    "Node",
    "ConvAttrs",
    "PointwiseAttrs",
    "BatchnormAttrs",
    "BatchnormInferenceVarianceAttrs",
    "NoAttrs",
    "NODE_KINDS",
    "DATA_SLOTS",
    "packed_strides",
    "stride_order",
]
