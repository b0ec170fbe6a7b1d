"""Counters and latency windows of a batcher, and the ``metrics()`` dict made of them."""
from __future__ import annotations

import collections

from ..queues._metrics import percentiles as _percentiles

__all__ = ["METRIC_WINDOW", "BatcherMetrics"]

# Samples kept for the latency percentiles of metrics() (a sliding window).
METRIC_WINDOW = 10_000


def window() -> collections.deque:
    """An empty sliding window of METRIC_WINDOW latency samples (ms)."""
    return collections.deque(maxlen=METRIC_WINDOW)


class BatcherMetrics:
    """Batcher-wide counters; each lane keeps its own (``_lanes.Lane``)."""

    def __init__(self):
        self.requests = 0           # caller calls
        self.batches = 0            # successful executions
        self.rows = 0               # real rows run
        self.bucket_rows = 0        # rows of the buckets run (real + padding)
        self.errors = 0             # failed batches
        self.cancelled = 0          # cancelled calls
        self.buckets_used: set[int] = set()
        self.queue_wait_ms = window()
        self.exec_ms = window()

    def executed(self, lane, ms: float) -> None:
        """One ``plan.execute`` of `ms` milliseconds on `lane`."""
        self.exec_ms.append(ms)
        lane.exec_ms.append(ms)

    def succeeded(self, lane, rows: int, size: int) -> None:
        """A batch of `rows` real rows in bucket `size` ran on `lane`."""
        self.batches += 1
        self.rows += rows
        lane.batches += 1
        lane.rows += rows
        self.bucket_rows += size
        self.buckets_used.add(size)

    def failed(self, lane=None) -> None:
        """A batch failed (on `lane`, or before any lane took it)."""
        self.errors += 1
        if lane is not None:
            lane.errors += 1

    def snapshot(self, *, lanes, plans_built: int, pending: int, buckets) -> dict:
        """The dict ``DynamicBatcher.metrics`` returns (its docstring gives the keys)."""
        return {
            "requests": self.requests,
            "batches": self.batches,
            "rows": self.rows,
            "mean_batch_fill": (self.rows / self.bucket_rows if self.bucket_rows else 0.0),
            "mean_batch_size": self.rows / self.batches if self.batches else 0.0,
            "queue_wait_ms": _percentiles(self.queue_wait_ms),
            "exec_ms": _percentiles(self.exec_ms),
            "plans_built": plans_built,
            "buckets_used": sorted(self.buckets_used),
            "errors": self.errors,
            "cancelled": self.cancelled,
            "pending": pending,
            "buckets": list(buckets),
            "devices": [{"lane": ln.index,
                         "device": getattr(ln.device, "spec", type(ln.device).__name__),
                         "closed": ln.closed, "retried": ln.retried,
                         "batches": ln.batches, "rows": ln.rows, "errors": ln.errors,
                         "pending": ln.inflight, "plans_built": len(ln.plans),
                         "exec_ms": _percentiles(ln.exec_ms)} for ln in lanes],
        }
