"""The nine supported patterns as data (the seed's operation-support table).

Each ``PatternSpec`` lists its nodes in topological order (``Step``): the node kind and
pointwise mode, which inputs are outputs of earlier nodes (``links``), which inputs must
be the same tensors as an earlier node's (``same``), which outputs are fused
intermediates and must be virtual (``virtual``) and which may be either
(``may_be_virtual``). Every other tensor must be non-virtual. ``roles`` and ``params``
say where the ``Match`` bindings come from (docs/design/internals.md s.2).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from .._types import PointwiseMode

__all__ = ["Pattern", "Step", "PatternSpec", "CATALOG", "spec_for"]


class Pattern(enum.IntEnum):
    """The nine supported patterns, numbered as in docs/contract/semantics.md."""

    BN_INFERENCE_VARIANCE = 1
    BN_INFERENCE_DRELU_BACKWARD = 2
    BN_TRAINING = 3
    BN_TRAINING_RELU = 4
    BN_BACKWARD = 5
    CONV_DGRAD = 6
    CONV_FPROP = 7
    CONV_FPROP_BIAS_RELU = 8
    CONV_WGRAD = 9


@dataclass(frozen=True)
class Step:
    """One node of a pattern.

    ``links``: (input slot, earlier node index, output slot) - the input is that output.
    ``same``: (input slot, earlier node index, input slot) - the same tensor object.
    """

    kind: str
    mode: PointwiseMode | None = None
    links: tuple = ()
    same: tuple = ()
    virtual: frozenset = frozenset()
    may_be_virtual: frozenset = frozenset()

    @property
    def describe(self) -> str:
        """``kind`` plus the pointwise mode, for messages."""
        return f"{self.kind} {self.mode.name}" if self.mode is not None else self.kind


@dataclass(frozen=True)
class PatternSpec:
    """A pattern: its steps, role bindings ((role, node, "in"/"out", slot); absent
    optional slots are skipped), parameter bindings ((param, node, attribute);
    attribute ``None`` binds the whole attrs object) and ``in_place``: (output role,
    input role) pairs whose output may be exactly the input's buffer (every provider
    reads the input before it writes the output, element by element)."""

    pattern: Pattern
    label: str
    steps: tuple
    roles: tuple
    params: tuple = ()
    in_place: tuple = ()

    @property
    def describe(self) -> str:
        """The node chain, e.g. ``conv_fprop -> pointwise RELU_FWD``."""
        return " -> ".join(s.describe for s in self.steps)


_BN_STATS = frozenset({"mean", "inv_variance"})
_RELU_PARAMS = ("relu_lower_clip", "relu_upper_clip")
# Running statistics may be updated in place, as PyTorch keeps running_mean / running_var
# (cuDNN's and MIOpen's training calls update one running buffer in place; the CPU
# computes next whole before storing it)
_BN_RUNNING_IN_PLACE = (("next_running_mean", "prev_running_mean"),
                        ("next_running_variance", "prev_running_variance"))


def _bn_training_roles(y_node: int, y_dir: str, y_slot: str) -> tuple:
    return (("x", 0, "in", "x"), ("scale", 0, "in", "scale"), ("bias", 0, "in", "bias"),
            ("y", y_node, y_dir, y_slot), ("mean", 0, "out", "mean"),
            ("inv_variance", 0, "out", "inv_variance"),
            ("prev_running_mean", 0, "in", "prev_running_mean"),
            ("prev_running_variance", 0, "in", "prev_running_variance"),
            ("next_running_mean", 0, "out", "next_running_mean"),
            ("next_running_variance", 0, "out", "next_running_variance"))


CATALOG = (
    PatternSpec(
        Pattern.BN_INFERENCE_VARIANCE, "batchnorm_inference_variance_ext",
        (Step("batchnorm_inference_variance_ext"),),
        (("x", 0, "in", "x"), ("mean", 0, "in", "mean"), ("variance", 0, "in", "variance"),
         ("scale", 0, "in", "scale"), ("bias", 0, "in", "bias"), ("y", 0, "out", "y")),
        (("epsilon", 0, "epsilon"),)),
    PatternSpec(
        Pattern.BN_INFERENCE_DRELU_BACKWARD,
        "batchnorm_inference+relu_bwd+batchnorm_backward",
        (Step("batchnorm_inference", virtual=frozenset({"y"})),
         Step("pointwise", PointwiseMode.RELU_BWD, links=(("in0", 0, "y"),),
              virtual=frozenset({"out"})),
         Step("batchnorm_backward", links=(("dy", 1, "out"),),
              same=(("x", 0, "x"), ("scale", 0, "scale"), ("mean", 0, "mean"),
                    ("inv_variance", 0, "inv_variance")))),
        (("x", 0, "in", "x"), ("mean", 0, "in", "mean"),
         ("inv_variance", 0, "in", "inv_variance"), ("scale", 0, "in", "scale"),
         ("bias", 0, "in", "bias"), ("dy", 1, "in", "in1"), ("dx", 2, "out", "dx"),
         ("dscale", 2, "out", "dscale"), ("dbias", 2, "out", "dbias")),
        tuple((p, 1, p) for p in _RELU_PARAMS)),
    PatternSpec(
        Pattern.BN_TRAINING, "batchnorm",
        (Step("batchnorm", may_be_virtual=_BN_STATS),),
        _bn_training_roles(0, "out", "y"),
        (("epsilon", 0, "epsilon"), ("momentum", 0, "momentum")),
        _BN_RUNNING_IN_PLACE),
    PatternSpec(
        Pattern.BN_TRAINING_RELU, "batchnorm+relu",
        (Step("batchnorm", virtual=frozenset({"y"}), may_be_virtual=_BN_STATS),
         Step("pointwise", PointwiseMode.RELU_FWD, links=(("in0", 0, "y"),))),
        _bn_training_roles(1, "out", "out"),
        (("epsilon", 0, "epsilon"), ("momentum", 0, "momentum"))
        + tuple((p, 1, p) for p in _RELU_PARAMS),
        _BN_RUNNING_IN_PLACE),
    PatternSpec(
        Pattern.BN_BACKWARD, "batchnorm_backward",
        (Step("batchnorm_backward"),),
        (("dy", 0, "in", "dy"), ("x", 0, "in", "x"), ("scale", 0, "in", "scale"),
         ("mean", 0, "in", "mean"), ("inv_variance", 0, "in", "inv_variance"),
         ("dx", 0, "out", "dx"), ("dscale", 0, "out", "dscale"),
         ("dbias", 0, "out", "dbias"))),
    PatternSpec(
        Pattern.CONV_DGRAD, "conv_dgrad", (Step("conv_dgrad"),),
        (("dy", 0, "in", "dy"), ("w", 0, "in", "w"), ("dx", 0, "out", "dx")),
        (("conv", 0, None),)),
    PatternSpec(
        Pattern.CONV_FPROP, "conv_fprop", (Step("conv_fprop"),),
        (("x", 0, "in", "x"), ("w", 0, "in", "w"), ("y", 0, "out", "y")),
        (("conv", 0, None),)),
    PatternSpec(
        Pattern.CONV_FPROP_BIAS_RELU, "conv_fprop+bias+relu",
        (Step("conv_fprop", virtual=frozenset({"y"})),
         Step("pointwise", PointwiseMode.ADD, links=(("in0", 0, "y"),),
              virtual=frozenset({"out"})),
         Step("pointwise", PointwiseMode.RELU_FWD, links=(("in0", 1, "out"),))),
        (("x", 0, "in", "x"), ("w", 0, "in", "w"), ("bias", 1, "in", "in1"),
         ("y", 2, "out", "out")),
        (("conv", 0, None),) + tuple((p, 2, p) for p in _RELU_PARAMS)),
    PatternSpec(
        Pattern.CONV_FPROP_BIAS_RELU, "conv_fprop+relu",
        (Step("conv_fprop", virtual=frozenset({"y"})),
         Step("pointwise", PointwiseMode.RELU_FWD, links=(("in0", 0, "y"),))),
        (("x", 0, "in", "x"), ("w", 0, "in", "w"), ("y", 1, "out", "out")),
        (("conv", 0, None),) + tuple((p, 1, p) for p in _RELU_PARAMS)),
    PatternSpec(
        Pattern.CONV_WGRAD, "conv_wgrad", (Step("conv_wgrad"),),
        (("dy", 0, "in", "dy"), ("x", 0, "in", "x"), ("dw", 0, "out", "dw")),
        (("conv", 0, None),)),
)


def spec_for(pattern: Pattern) -> tuple:
    """The catalog entries (one, or two for pattern 8) of a pattern."""
    return tuple(s for s in CATALOG if s.pattern == pattern)
