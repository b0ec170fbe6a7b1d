"""What a profile records: executions, batches, host spans; and a plan's FLOPs and bytes.

Times are ``time.perf_counter()`` seconds (the clock of the queues' timestamps); the
exporter makes them microseconds from the profile's start.
"""
from __future__ import annotations

import math
import time

__all__ = ["Execution", "Batch", "Span", "plan_facts", "graph_flops"]


class Execution:
    """One execution (a plan's, a capture step's replay or capture) on a device stream.

    Filled in two steps: at submission (device, kind, facts, the batch it served; the
    queues hand it the work item, :meth:`attach`) and when the profile collects it
    (stream, submit / start / end times, ok).
    """

    __slots__ = ("device", "kind", "facts", "handle", "batch", "gpu", "clock", "stream",
                 "submitted", "started", "ended", "launched", "ok", "id")

    def __init__(self, device, kind: str, facts: dict, batch) -> None:
        self.device = device
        self.kind = kind
        self.facts = facts
        self.handle = None
        self.batch = batch
        self.gpu = None          # (start event, end event) on a GPU, set at launch
        self.clock = None        # the GpuClock of those events
        self.stream = None
        self.submitted = self.started = self.ended = self.launched = None
        self.ok = None
        self.id = 0

    def attach(self, item) -> None:
        """Keep ``item``, the work item this execution became (the queues call this once,
        before it runs, on every submission path: ``queues._core.submit_now``); on a GPU
        its function is put between this record's timing events."""
        self.handle = item
        if self.clock is not None:
            item._fn = self.clock.wrap(item._fn, self)

    @property
    def queue_wait(self) -> float | None:
        """Submission to start, in seconds."""
        if self.started is None or self.submitted is None:
            return None
        return max(0.0, self.started - self.submitted)

    @property
    def duration(self) -> float | None:
        """Start to end, in seconds."""
        if self.started is None or self.ended is None:
            return None
        return self.ended - self.started


class Batch:
    """One batch a dynamic batcher formed: its requests (rows and enqueue times), rows,
    bucket size, and when it was formed and done."""

    __slots__ = ("batcher", "device", "requests", "rows", "bucket", "formed", "ended", "ok",
                 "token", "id", "executions")

    def __init__(self, batcher: str, device, requests: list, rows: int, bucket: int,
                 formed: float):
        self.batcher = batcher
        self.device = device
        self.requests = requests        # [(rows, enqueued seconds)]
        self.rows = rows
        self.bucket = bucket
        self.formed = formed
        self.ended = None
        self.ok = None
        self.token = None
        self.id = 0
        self.executions: list = []     # the Execution records that served it

    @property
    def fill(self) -> float:
        """Real rows over the bucket's rows, in [0, 1]."""
        return self.rows / self.bucket if self.bucket else 0.0

    @property
    def wait(self) -> float:
        """The oldest request's wait from enqueue to the batch's formation, seconds."""
        return max((self.formed - t for _, t in self.requests), default=0.0)

    def finish(self, ok: bool) -> None:
        self.ended = time.perf_counter()
        self.ok = ok


class Span:
    """A host-side span on a device's named track (a build, a capture recording)."""

    __slots__ = ("device", "track", "name", "start", "end", "args")

    def __init__(self, device, track: str, name: str, start: float, end: float,
                 args: dict):
        self.device = device
        self.track = track
        self.name = name
        self.start = start
        self.end = end
        self.args = args


def _prod(dims) -> int:
    return math.prod(int(d) for d in dims)


def graph_flops(nodes) -> int:
    """Floating-point operations of one execution of ``nodes`` (a graph's nodes).

    Convolutions (fprop, dgrad, wgrad alike): 2·N·K·P·Q·(C/G)·R·S, a multiply-add counted
    as two (the convention of ``torch.utils.flop_counter``, and of the vendors' GFLOP/s
    figures), from the output-gradient or output dims (N, K, P, Q) and the filter dims
    (K, C/G, R, S). Pointwise nodes: one per output element. Batchnorm nodes: 0 (their
    figure is bytes moved, GB/s).
    """
    flops = 0
    for node in nodes:
        tensors = {**node.inputs, **node.outputs}
        if node.kind.startswith("conv_"):
            y = tensors.get("y") or tensors.get("dy")
            w = tensors.get("w") or tensors.get("dw")
            if y is not None and w is not None:
                flops += 2 * _prod(y.dims) * _prod(tuple(w.dims)[1:])
        elif node.kind == "pointwise":
            for t in node.outputs.values():
                flops += _prod(t.dims)
    return flops


def plan_facts(plan) -> dict:
    """Name, pattern, engine, algorithm, FLOPs and bytes of one execution of ``plan`` (an
    ``ExecutionPlan``). Bytes: every buffer of the variant pack read or written once,
    its strided extent (the least memory traffic an execution can have)."""
    extents = getattr(plan, "_extent", {}) or {}
    return {
        "name": plan.graph.name or plan.pattern,
        "pattern": plan.pattern,
        "engine": plan.engine.name,
        "algorithm": plan.algorithm,
        "flops": graph_flops(plan.match.nodes),
        "bytes": int(sum(extents.values())),
        "label": plan._label,
    }


def step_facts(step, plans, kind: str = "replay") -> dict:
    """Facts of one replay (``kind`` ``"replay"``) or the capture (``"capture"``) of a
    capture step that recorded ``plans`` (in order); a capture computes nothing."""
    facts = [plan_facts(p) for p in plans]
    replay = kind == "replay"
    return {
        "name": f"{kind} ({len(facts)} executions)",
        "pattern": kind.upper(),
        "engine": ",".join(sorted({f["engine"] for f in facts})),
        "algorithm": None,
        "flops": sum(f["flops"] for f in facts) if replay else 0,
        "bytes": sum(f["bytes"] for f in facts) if replay else 0,
        "label": step._label,
        "plans": [f["name"] for f in facts],
    }
