"""Counters and latency percentiles of one replica, exported through Ray's metrics API.

Ray's metrics (``ray.util.metrics``) reach its Prometheus endpoint and dashboard, named
with a ``ray_`` prefix: ``ray_hipdnn_async_requests_total`` and so on, tagged with the
deployment, the replica and the device. Counters and histograms are recorded as requests
and batches happen; the percentile gauges, and every number of the model's own
``metrics()`` (a ``DynamicBatcher``'s, per layer for the demo model), are refreshed at
most once a second, when a batch ends.
"""
from __future__ import annotations

import collections
import numbers
import time

from ..queues._metrics import percentiles as _percentiles

__all__ = ["ReplicaMetrics", "flatten_numbers"]

_WINDOW = 10_000                   # latency samples kept for the percentiles
_REFRESH_S = 1.0                   # gauges refreshed at most this often
_MS_BOUNDARIES = [0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000]


def flatten_numbers(doc, prefix: str = "") -> dict[str, float]:
    """Every number of a nested dict, keyed ``"a.b.c"`` (lists and strings skipped)."""
    out = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(flatten_numbers(v, f"{prefix}{k}."))
    elif isinstance(doc, numbers.Real):
        out[prefix[:-1]] = float(doc)
    return out


class ReplicaMetrics:
    """What one replica has done: requests, rows, batches, refusals, failures, latencies.

    Parameters
    ----------
    tags : dict of str to str
        ``deployment``, ``replica``, ``device``: attached to every exported metric.
    max_batch_size : int
        For the batch-size histogram's buckets.
    export : bool
        Also record into ``ray.util.metrics`` (False: only ``snapshot()``).
    """

    def __init__(self, tags: dict, *, max_batch_size: int, export: bool = True):
        self.tags = {k: str(v) for k, v in tags.items()}
        self.requests = self.rows = self.batches = self.batch_rows = 0
        self.rejected = self.failed = 0
        self.queue_wait_ms = collections.deque(maxlen=_WINDOW)
        self.exec_ms = collections.deque(maxlen=_WINDOW)
        self.latency_ms = collections.deque(maxlen=_WINDOW)
        self._next_refresh = 0.0
        self._ray = None
        if export:
            self._ray = self._make_ray_metrics(max_batch_size)

    def _make_ray_metrics(self, max_batch_size: int) -> dict:
        from ray.util import metrics as m
        keys = tuple(self.tags)
        sizes = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, max_batch_size})
        sizes = [s for s in sizes if s <= max_batch_size]
        out = {
            "requests": m.Counter("hipdnn_async_requests_total",
                                  "Requests answered by this replica (handle and HTTP).",
                                  tag_keys=keys),
            "rows": m.Counter("hipdnn_async_rows_total", "Rows (samples) run.", tag_keys=keys),
            "batches": m.Counter("hipdnn_async_batches_total",
                                 "Model calls (coalesced batches).", tag_keys=keys),
            "rejected": m.Counter("hipdnn_async_rejected_total",
                                  "Malformed requests refused (HTTP 4xx) before batching.",
                                  tag_keys=keys),
            "failed": m.Counter("hipdnn_async_failed_total",
                                "Requests whose model call failed.", tag_keys=keys),
            "batch_rows": m.Histogram("hipdnn_async_batch_rows", "Rows per model call.",
                                      boundaries=sizes, tag_keys=keys),
            "exec_ms": m.Histogram("hipdnn_async_exec_ms", "Model call time (ms).",
                                   boundaries=_MS_BOUNDARIES, tag_keys=keys),
            "queue_wait_ms": m.Histogram("hipdnn_async_queue_wait_ms",
                                         "Time a request waited for its batch (ms).",
                                         boundaries=_MS_BOUNDARIES, tag_keys=keys),
            "latency_ms": m.Gauge("hipdnn_async_latency_ms",
                                  "Latency percentiles inside the replica (ms), by stage "
                                  "(queue_wait, exec, request) and quantile.",
                                  tag_keys=keys + ("stage", "quantile")),
            "model": m.Gauge("hipdnn_async_model",
                             "Numbers of the model's own metrics() (e.g. each layer's "
                             "DynamicBatcher counters and percentiles), by name.",
                             tag_keys=keys + ("metric",)),
        }
        for metric in out.values():
            metric.set_default_tags(self.tags)
        return out

    # ------------------------------------------------------------------ recording

    def rejected_request(self) -> None:
        self.rejected += 1
        if self._ray:
            self._ray["rejected"].inc()

    def answered(self, rows: int, latency_ms: float, *, ok: bool) -> None:
        """A request finished: answered (`ok`), or its model call failed."""
        if ok:
            self.requests += 1
            self.rows += rows
            self.latency_ms.append(latency_ms)
        else:
            self.failed += 1
        if self._ray:
            if ok:
                self._ray["requests"].inc()
                self._ray["rows"].inc(rows)
            else:
                self._ray["failed"].inc()

    def batch(self, rows: int, waits_ms, exec_ms: float, model=None) -> None:
        """A model call of `rows` rows finished; `waits_ms` per request it held."""
        self.batches += 1
        self.batch_rows += rows
        self.exec_ms.append(exec_ms)
        self.queue_wait_ms.extend(waits_ms)
        if self._ray:
            self._ray["batches"].inc()
            self._ray["batch_rows"].observe(rows)
            self._ray["exec_ms"].observe(exec_ms)
            for w in waits_ms:
                self._ray["queue_wait_ms"].observe(w)
            now = time.monotonic()
            if now >= self._next_refresh:
                self._next_refresh = now + _REFRESH_S
                self.refresh(model)

    def refresh(self, model=None) -> None:
        """Set the percentile gauges and the model's gauges from the current windows."""
        if not self._ray:
            return
        for stage, window in (("queue_wait", self.queue_wait_ms), ("exec", self.exec_ms),
                              ("request", self.latency_ms)):
            for q, v in _percentiles(window).items():
                self._ray["latency_ms"].set(v, tags={"stage": stage, "quantile": q})
        for name, v in flatten_numbers(_model_metrics(model)).items():
            self._ray["model"].set(v, tags={"metric": name})

    # ------------------------------------------------------------------ reading

    def snapshot(self, model=None) -> dict:
        """Everything as one dict (``ModelReplica.metrics()``)."""
        return {
            **self.tags,
            "requests": self.requests, "rows": self.rows, "batches": self.batches,
            "rejected": self.rejected, "failed": self.failed,
            "mean_batch_size": self.batch_rows / self.batches if self.batches else 0.0,
            "queue_wait_ms": _percentiles(self.queue_wait_ms),
            "exec_ms": _percentiles(self.exec_ms),
            "latency_ms": _percentiles(self.latency_ms),
            "model": _model_metrics(model),
        }


def _model_metrics(model) -> dict:
    fn = getattr(model, "metrics", None)
    if not callable(fn):
        return {}
    try:
        doc = fn()
    except Exception as exc:  # a model's metrics must not fail the replica
        return {"error": f"{type(exc).__name__}: {exc}"}
    return doc if isinstance(doc, dict) else {}
