"""What the worker process runs (see ``_worker.py``): public-API scenarios on the fake
"cuda:0", returning plain data (logs, outputs, plan facts) for the tests to assert on.

Only the public API is used (``hd.Device``, ``dev.build_sync`` / ``await dev.build``,
``dev.empty``, ``plan.execute_sync`` / ``submit`` / ``await execute``, ``GpuArray``), so
the scenarios survive refactors of the provider and runtime. The pattern cases are the
oracle suite's (``tests/oracle/test_patterns.py`` builders, restricted to what the cuDNN
provider takes as ``tests/gpu/test_patterns_gpu.py`` does).
"""
from __future__ import annotations

import os

import numpy as np

from ._fakes import FakeControl

__all__ = ["control", "tensor_facts", "node_facts", "pattern_case", "plan_facts"]


def control() -> FakeControl:
    return FakeControl(os.environ["HIPDNN_ASYNC_CUDART"])


def tensor_facts(graph) -> dict:
    """name -> {dims, strides, dtype (hd.DataType value), virtual} of a graph's tensors."""
    return {t.name: {"dims": tuple(t.dims), "strides": tuple(t.strides),
                     "dtype": int(t.data_type), "virtual": bool(t.is_virtual)}
            for t in graph.tensors}


def node_facts(graph) -> list[dict]:
    """[{kind, name, attrs}] of a graph's nodes (attrs as a dict)."""
    import dataclasses
    out = []
    for n in graph.nodes:
        attrs = dataclasses.asdict(n.attrs) if dataclasses.is_dataclass(n.attrs) else {}
        out.append({"kind": n.kind, "name": n.name,
                    "attrs": {k: (int(v) if hasattr(v, "value") else v) for k, v in attrs.items()}})
    return out


def plan_facts(plan) -> dict:
    engine = plan.engine
    return {"pattern": plan.pattern, "algorithm": plan.algorithm,
            "workspace_size": int(plan.workspace_size),
            "engine": getattr(engine, "name", str(engine)),
            "provider": getattr(engine, "provider", None),
            "benchmarked": bool(getattr(plan, "benchmarked", False)),
            "perfdb_hit": bool(getattr(plan, "perfdb_hit", False))}


def _oracle_for_gpu():
    """The oracle builders with the cuDNN provider's limits (tests/gpu does the same)."""
    from gpu import test_patterns_gpu as tpg
    from oracle import test_patterns as tp
    tp.CLIPS = tpg.GPU_CLIPS
    tp.CONV = tpg.GPU_CONV
    return tp


def pattern_case(pattern: str, dtype: str, layout: str, *, executions: int = 2, knobs=None,
                 seed: int = 0, stream=0) -> dict:
    """Build, stage and execute one oracle case on the fake "cuda:0" (every execution on
    ``stream``: the first one there meets a cold stream, later ones a warm one).

    Returns
    -------
    dict
        ``plan`` (plan_facts), ``tensors`` (tensor_facts), ``pointers`` (name -> device
        pointer of the staged buffer), ``checks`` ([(name, got, want, (atol, rtol))]),
        ``log`` (the whole call log, with marks "build", "stage", "exec0".., "read",
        "end"), ``violations``.
    """
    import hipdnn_async as hd
    from oracle._cases import DTYPES, LAYOUTS, Harness, rank_of

    tp = _oracle_for_gpu()
    ctl = control()
    rng = np.random.default_rng([seed, sorted(tp.PATTERNS).index(pattern), DTYPES.index(dtype),
                                 LAYOUTS.index(layout)])
    with hd.Device("cuda:0") as dev:
        h = Harness(dtype, layout, name=f"contract_{pattern}_{dtype}_{layout}")
        checks = tp.PATTERNS[pattern](h, rank_of(layout), rng)
        h._alloc_outputs()
        h.g.validate()
        ctl.clear()
        ctl.mark("build")
        plan = dev.build_sync(h.g, knobs=knobs)
        ctl.mark("stage")
        staged = h.stage(dev)
        for i in range(executions):
            ctl.mark(f"exec{i}")
            plan.execute_sync(staged, stream=stream)
        ctl.mark("read")
        got = {name: staged[name].to_numpy_sync() for name in h.outputs}
        ctl.mark("end")
        result = {"plan": plan_facts(plan), "tensors": tensor_facts(h.g), "nodes": node_facts(h.g),
                  "pointers": {name: int(a.ptr) for name, a in staged.items()},
                  "checks": [(name, got[name], want, tolerance) for name, want, tolerance in checks]}
    result["log"] = ctl.log()
    result["violations"] = ctl.violations()
    return result
