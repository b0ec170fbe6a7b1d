"""Graph -> (pattern, bindings), or NotSupportedError naming the first node that does not fit."""
from __future__ import annotations

from dataclasses import dataclass, field

from .._errors import GraphError, NotSupportedError
from .._types import ConvolutionMode, DataType
from ..graph import Graph, Node, TensorAttributes
from ..graph._shapes import bn_stat_dims
from ._catalog import CATALOG, Pattern, PatternSpec, Step

__all__ = ["Match", "match"]


@dataclass(frozen=True)
class Match:
    """A graph recognised as one of the nine patterns.

    Attributes
    ----------
    pattern : Pattern
    nodes : tuple of Node
        In pattern order.
    tensors : dict
        Role -> TensorAttributes (roles in docs/design/internals.md s.2); fused intermediates are
        not listed; optional roles that are absent are left out.
    params : dict
        Role -> scalar (epsilon, momentum, relu clips) or ConvAttrs (``conv``).
    graph : Graph
        The matched graph (extension: ``signature`` needs it).
    """

    pattern: Pattern
    nodes: tuple
    tensors: dict
    params: dict
    graph: Graph | None = field(default=None, repr=False, compare=False)

    @property
    def signature(self) -> str:
        """``"<pattern>: <graph signature>"``: the key of perf-db and plan caches."""
        return f"{self.pattern.name}: " + (self.graph.signature() if self.graph is not None else "")

    @property
    def label(self) -> str:
        """Readable pattern name, e.g. ``conv_fprop+bias+relu``."""
        for spec in CATALOG:
            if spec.pattern == self.pattern and len(spec.steps) == len(self.nodes):
                return spec.label
        return self.pattern.name.lower()


def _fits(step: Step, node: Node) -> bool:
    if step.kind != node.kind:
        return False
    return step.mode is None or node.attrs.mode == step.mode


def _alone_hint(nodes) -> str:
    """A pointer to the stand-alone form where a graph of one node has none: batchnorm
    inference on (mean, inv_variance) is only the head of pattern 2; on its own the seed
    runs it with the variance (pattern 1)."""
    if len(nodes) == 1 and nodes[0].kind == "batchnorm_inference":
        return ("; batchnorm inference on its own is g.batchnorm_inference_variance_ext(x, "
                "mean, variance, scale, bias, epsilon=...), on the variance (PyTorch's "
                "running_var) rather than inv_variance")
    return ""


def _check_spec(spec: PatternSpec, nodes) -> None:
    """Tensor links, identities, bias shape and virtual flags of a matched chain.

    Activation clips are not checked here: which clips an engine can express is the
    provider's business (a vendor library may have no activation for a lower clip alone)."""
    where = f"pattern {spec.label}"
    linked = set()
    for i, (step, node) in enumerate(zip(spec.steps, nodes)):
        for in_slot, j, out_slot in step.links:
            want = nodes[j].outputs[out_slot]
            got = node.inputs.get(in_slot)
            if got is not want:
                raise NotSupportedError(
                    f"{where}: node '{node.name}' ({node.describe}) input {in_slot} must be "
                    f"tensor {want.label} ({out_slot} of node '{nodes[j].name}'); got "
                    f"{got.label if got is not None else 'nothing'}")
            linked.add((i, in_slot))
        for in_slot, j, other in step.same:
            want = nodes[j].inputs[other]
            got = node.inputs[in_slot]
            if got is not want:
                raise NotSupportedError(
                    f"{where}: node '{node.name}' ({node.describe}) input {in_slot} must be "
                    f"the same tensor as node '{nodes[j].name}' {other} ({want.label}); got "
                    f"{got.label}")
        if node.kind == "pointwise" and node.attrs.mode.name == "ADD":
            bias = node.inputs["in1"]
            y = node.inputs["in0"]
            need = bn_stat_dims(y.dims)
            if bias.dims != need:
                raise NotSupportedError(
                    f"{where}: node '{node.name}' (pointwise ADD) operand {bias.label} has "
                    f"dims {bias.dims}; need a bias {need} = [1, K, 1, 1]")
    for i, (step, node) in enumerate(zip(spec.steps, nodes)):
        for slot, t in node.inputs.items():
            if (i, slot) not in linked and t.is_virtual:
                raise NotSupportedError(
                    f"{where}: tensor {t.label} ({slot} of node '{node.name}') must be "
                    "non-virtual; call set_output(True) on it")
        for slot, t in node.outputs.items():
            if slot in step.virtual:
                if not t.is_virtual:
                    raise NotSupportedError(
                        f"{where}: tensor {t.label} must be virtual ({slot} of node "
                        f"'{node.name}' is a fused intermediate); do not call "
                        "set_output(True) on it")
            elif slot not in step.may_be_virtual and t.is_virtual:
                raise NotSupportedError(
                    f"{where}: tensor {t.label} ({slot} of node '{node.name}') must be "
                    "non-virtual; call set_output(True) on it")


def _bind(spec: PatternSpec, nodes, graph) -> Match:
    tensors: dict[str, TensorAttributes] = {}
    for role, i, direction, slot in spec.roles:
        table = nodes[i].inputs if direction == "in" else nodes[i].outputs
        if slot in table:
            tensors[role] = table[slot]
    params = {}
    for name, i, attr in spec.params:
        params[name] = nodes[i].attrs if attr is None else getattr(nodes[i].attrs, attr)
    return Match(spec.pattern, tuple(nodes), tensors, params, graph)


def match(graph: Graph) -> Match:
    """Validate ``graph`` and recognise which of the nine supported patterns it is.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    Match

    Raises
    ------
    GraphError
        The graph is invalid (from ``graph.validate()``).
    NotSupportedError
        The graph is valid but fits none of the nine patterns; the message names the
        first node that does not fit and why, or the tensor that breaks a pattern's
        virtual/non-virtual rules.
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"expected a hipdnn_async.Graph; got {type(graph).__name__}")
    graph.validate()
    nodes = graph.topological_nodes()
    for node in nodes:
        if node.kind.startswith("conv_") and node.attrs.mode != ConvolutionMode.CROSS_CORRELATION:
            raise NotSupportedError(
                f"node '{node.name}' ({node.kind}): convolution mode {node.attrs.mode.name} "
                "is not supported; only CROSS_CORRELATION")
        if node.compute_data_type == DataType.DOUBLE:
            # every engine computes in float32: a DOUBLE request would run, unmet, as FLOAT
            raise NotSupportedError(
                f"node '{node.name}' ({node.describe}): compute_data_type DOUBLE is not "
                "supported; the nine patterns compute in FLOAT (DOUBLE names float64 "
                "references only)")
    first = nodes[0]
    candidates = [s for s in CATALOG if _fits(s.steps[0], first)]
    if not candidates:
        starts = sorted({s.steps[0].describe for s in CATALOG})
        raise NotSupportedError(
            f"node '{first.name}' ({first.describe}) fits none of the nine patterns: no "
            f"pattern starts with it (they start with {', '.join(starts)})")
    for i in range(1, len(nodes)):
        node = nodes[i]
        following = [s for s in candidates if len(s.steps) > i]
        fitting = [s for s in following if _fits(s.steps[i], node)]
        if not fitting:
            prev = nodes[i - 1]
            fed = {id(t) for t in prev.outputs.values()}
            if not any(id(t) in fed for t in node.inputs.values()):
                # not a chain: a second consumer of an earlier output, or a second chain
                raise NotSupportedError(
                    f"node '{node.name}' ({node.describe}) does not take the output of "
                    f"'{prev.name}' ({prev.describe}), the node before it: a graph is one "
                    "chain of one of the nine patterns, and this one holds another chain "
                    "(or a second consumer of an earlier output); build each chain as a "
                    "graph of its own")
            if following:
                hint = ("; allowed there: "
                        + " or ".join(sorted({s.steps[i].describe for s in following})))
            else:
                hint = f"; {prev.describe} ends every pattern it is part of"
            raise NotSupportedError(
                f"node '{node.name}' ({node.describe}) after {prev.describe} fits none of "
                f"the nine patterns{hint}")
        candidates = fitting
    exact = [s for s in candidates if len(s.steps) == len(nodes)]
    if not exact:
        last = nodes[-1]
        need = " or ".join(s.describe for s in candidates)
        raise NotSupportedError(
            f"node '{last.name}' ({last.describe}) ends the graph, which fits none of the "
            f"nine patterns; supported chains through it: {need}{_alone_hint(nodes)}")
    spec = exact[0]
    _check_spec(spec, nodes)
    return _bind(spec, nodes, graph)
