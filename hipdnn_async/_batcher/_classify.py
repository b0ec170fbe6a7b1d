"""Request classification: which tensors of a graph a batcher takes per request, which
are constants and which it returns, and whether the graph may be batched at all."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import GraphError, NotSupportedError, VariantPackError

__all__ = ["BATCHABLE_PATTERNS", "Roles", "check_pattern", "classify", "require_batchable",
           "tensor_by_key"]

# Patterns whose output rows depend only on the same input rows (hence batchable).
BATCHABLE_PATTERNS = ("CONV_FPROP", "CONV_FPROP_BIAS_RELU", "BN_INFERENCE_VARIANCE")


def require_batchable(pattern: str) -> None:
    """Refuse a pattern whose samples are coupled (NotSupportedError)."""
    if pattern not in BATCHABLE_PATTERNS:
        raise NotSupportedError(
            f"DynamicBatcher: pattern {pattern} is not batchable: its samples are not "
            "independent (batch statistics or reductions over N couple them), so "
            "coalescing requests would change each caller's result; batchable "
            f"patterns are {', '.join(BATCHABLE_PATTERNS)}")


def check_pattern(graph) -> bool:
    """Reject per-sample-coupled patterns early when the pattern matcher is present;
    False when it is not (the pattern is then checked on the first plan built)."""
    try:
        from ..patterns import match
    except ImportError:
        return False
    pattern = match(graph).pattern
    require_batchable(getattr(pattern, "name", str(pattern)))
    return True


def _tensor_key(t) -> str | int:
    """Name of a tensor, or its uid when it has no name."""
    return t.name if t.name else t.uid


def _graph_io(graph) -> tuple[list, list]:
    """Non-virtual (inputs, outputs) of a graph, in first-use order."""
    produced: dict[int, Any] = {}
    for node in graph.nodes:
        for t in node.outputs.values():
            produced[id(t)] = t
    inputs: dict[int, Any] = {}
    for node in graph.nodes:
        for t in node.inputs.values():
            if id(t) not in produced and not t.is_virtual:
                inputs.setdefault(id(t), t)
    outputs = [t for t in produced.values() if not t.is_virtual]
    return list(inputs.values()), outputs


def tensor_by_key(graph) -> dict:
    """Every tensor of a graph by name (or uid)."""
    out = {}
    for node in graph.nodes:
        for t in (*node.inputs.values(), *node.outputs.values()):
            out[_tensor_key(t)] = t
    return out


def _graph_batch(graph) -> int:
    """Batch size of a graph: dims[0] of the first data input of its first node."""
    node = graph.nodes[0]
    first = node.inputs.get("x", next(iter(node.inputs.values())))
    return int(first.dims[0])


@dataclass(frozen=True)
class Roles:
    """The tensors of a batcher's graph by role, by name (or uid)."""

    inputs: tuple           # per-request (batched) inputs, in the order given
    outputs: tuple          # outputs returned to callers
    all_outputs: tuple      # every non-virtual output (each needs a buffer in the pack)
    in_tensors: dict        # per-request input name -> TensorAttributes
    constant_tensors: dict  # constant name -> TensorAttributes, in the order given


def _batched(graph, g_inputs, g_outputs) -> set:
    """Keys of the tensors that follow the batch size: compared with a copy of the graph
    at another batch size."""
    probe = tensor_by_key(graph.with_batch_size(_graph_batch(graph) + 1))
    return {_tensor_key(t) for t in (*g_inputs, *g_outputs)
            if probe[_tensor_key(t)].dims[0] != t.dims[0]}


def _check_constant_names(graph, constants, in_by_key: dict, batched: set) -> None:
    for name in constants:
        if name not in in_by_key:
            raise GraphError(f"DynamicBatcher: constant {name!r} is not a non-virtual "
                             f"input of graph {graph.name!r}; inputs are "
                             f"{sorted(map(str, in_by_key))}")
        if name in batched:
            raise GraphError(f"DynamicBatcher: constant {name!r} has the batch dim "
                             f"(dims {tuple(in_by_key[name].dims)}); a batched tensor "
                             "must be a per-request input")


def _pick_inputs(graph, inputs, constants, in_by_key: dict, batched: set) -> list:
    """The per-request inputs: those named, or every batched input not a constant."""
    if inputs is None:
        inputs = [k for k in in_by_key if k in batched and k not in constants]
    inputs = [inputs] if isinstance(inputs, str) else list(inputs)   # one name
    if not inputs:
        raise GraphError(f"DynamicBatcher: graph {graph.name!r} has no batched input "
                         "(no non-virtual input follows dims[0] = N)")
    for name in inputs:
        if name not in in_by_key or name not in batched:
            raise GraphError(f"DynamicBatcher: input {name!r} is not a batched "
                             f"non-virtual input of graph {graph.name!r}; batched "
                             f"inputs are {sorted(map(str, batched & set(in_by_key)))}")
        if name in constants:
            raise GraphError(f"DynamicBatcher: {name!r} is given both as an input "
                             "and as a constant")
    missing = [k for k in in_by_key if k not in inputs and k not in constants]
    if missing:
        raise VariantPackError(f"DynamicBatcher: graph {graph.name!r} input(s) "
                               f"{missing} are neither per-request inputs nor given "
                               "in constants=")
    return inputs


def _pick_outputs(graph, outputs, out_by_key: dict, batched: set) -> list:
    """The outputs returned: those named, or every non-virtual output."""
    if outputs is None:
        outputs = list(out_by_key)
    outputs = [outputs] if isinstance(outputs, str) else list(outputs)
    for name in outputs:
        if name not in out_by_key:
            raise GraphError(f"DynamicBatcher: output {name!r} is not a non-virtual "
                             f"output of graph {graph.name!r}; outputs are "
                             f"{sorted(map(str, out_by_key))}")
        if name not in batched:
            raise GraphError(f"DynamicBatcher: output {name!r} (dims "
                             f"{tuple(out_by_key[name].dims)}) has no batch dim")
    if not outputs:
        raise GraphError("DynamicBatcher: outputs= is empty")
    return outputs


def classify(graph, inputs, outputs, constants) -> Roles:
    """Split graph inputs into batched inputs and constants; pick the outputs.

    Raises
    ------
    GraphError
        No non-virtual inputs or outputs, no batched input, or a name that is not a
        non-virtual tensor of the graph in the role it is given.
    VariantPackError
        An input that is neither per-request nor a constant.
    """
    g_inputs, g_outputs = _graph_io(graph)
    if not g_inputs or not g_outputs:
        raise GraphError(f"DynamicBatcher: graph {graph.name!r} has no non-virtual "
                         "inputs or outputs")
    batched = _batched(graph, g_inputs, g_outputs)
    in_by_key = {_tensor_key(t): t for t in g_inputs}
    out_by_key = {_tensor_key(t): t for t in g_outputs}
    _check_constant_names(graph, constants, in_by_key, batched)
    inputs = _pick_inputs(graph, inputs, constants, in_by_key, batched)
    outputs = _pick_outputs(graph, outputs, out_by_key, batched)
    return Roles(inputs=tuple(inputs), outputs=tuple(outputs),
                 all_outputs=tuple(out_by_key),
                 in_tensors={k: in_by_key[k] for k in inputs},
                 constant_tensors={k: in_by_key[k] for k in constants})
