"""Serving: concurrent clients through a chain of dynamic batchers, one per folded layer."""
from __future__ import annotations

import contextlib
import time

import anyio
import numpy as np

import hipdnn_async as hd

from . import _graphs

__all__ = ["serve"]


async def serve(device, net, data, folded, expected: np.ndarray, cfg) -> dict:
    """Serve the test split to ``cfg.clients`` concurrent clients; measure and check.

    Each layer (batchnorm folded in) is a ``hd.DynamicBatcher`` over its
    CONV_FPROP_BIAS_RELU graph, with the folded weights and bias as constants (or over
    its CONV_FPROP graph, where ``Network.fold`` moved the bias on). A client sends one
    image at a time through the three batchers, ``cfg.rounds`` times (client ``c`` sends
    test images ``c, c + clients, ...`` modulo the split), adds the host logit bias if
    there is one, and checks each prediction against the batch evaluation.

    Parameters
    ----------
    device : hipdnn_async.Device
    net : Network
    data : Digits
    folded : Folded
        The folded network (``Network.fold()``).
    expected : numpy.ndarray
        Batch-evaluation predictions of the test split, int (N,).
    cfg : DemoConfig
        ``clients``, ``rounds``, ``max_batch_size``, ``max_delay_ms``, ``knobs``.

    Returns
    -------
    dict
        ``requests``, ``clients``, ``seconds``, ``throughput`` (images/s),
        ``latency_ms`` (``p50``, ``p90``, ``p99``, ``mean``, ``max``), ``mean_batch_fill``
        (real rows / bucket rows over every batch of every stage), ``mean_batch_size``,
        ``batches``, ``mismatches`` (served predictions that differ from `expected`),
        ``predictions_match``, ``stages`` (each batcher's ``metrics()``) and
        ``latencies_ms`` (every request's latency, for the histogram).
    """
    n_test = len(data.x_test)
    total = cfg.clients * cfg.rounds
    latencies = np.zeros(total)
    served = np.full(total, -1, np.int64)
    images = np.full(total, -1, np.int64)
    async with contextlib.AsyncExitStack() as stack:
        stages = []
        for i, f in enumerate(folded.layers):
            if f.op == "folded":
                graph = _graphs.conv_bias_act(f.layer, cfg.max_batch_size, net.sizes[i])
                constants = {"w": f.w, "bias": f.bias}
            else:
                graph = _graphs.conv_fprop(f.layer, cfg.max_batch_size, net.sizes[i])
                constants = {"w": f.w}
            batcher = hd.DynamicBatcher(
                device, graph, inputs=["x"], outputs=["y"], constants=constants,
                max_batch_size=cfg.max_batch_size, max_delay_ms=cfg.max_delay_ms,
                buckets="pow2", knobs=cfg.knobs)
            stages.append(await stack.enter_async_context(batcher))
        logit_bias = folded.logit_bias
        for batcher in stages:             # build every bucket's plan before timing
            await batcher.warmup()

        async def client(c: int) -> None:
            for r in range(cfg.rounds):
                k = c * cfg.rounds + r
                idx = (c + r * cfg.clients) % n_test
                t0 = time.perf_counter()
                h = data.x_test[idx:idx + 1]
                for batcher in stages:
                    h = await batcher(h)
                logits = h.reshape(-1) if logit_bias is None else h.reshape(-1) + logit_bias
                latencies[k] = (time.perf_counter() - t0) * 1e3
                served[k] = int(np.argmax(logits))
                images[k] = idx

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for c in range(cfg.clients):
                tg.start_soon(client, c)
        seconds = time.perf_counter() - t0
        metrics = [b.metrics() for b in stages]

    rows = sum(m["rows"] for m in metrics)
    bucket_rows = sum(m["rows"] / m["mean_batch_fill"] for m in metrics if m["mean_batch_fill"])
    batches = sum(m["batches"] for m in metrics)
    mismatches = int((served != expected[images]).sum())
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    return {
        "requests": total, "clients": cfg.clients, "seconds": seconds,
        "throughput": total / seconds,
        "latency_ms": {"p50": float(p50), "p90": float(p90), "p99": float(p99),
                       "mean": float(latencies.mean()), "max": float(latencies.max())},
        "mean_batch_fill": rows / bucket_rows if bucket_rows else 0.0,
        "mean_batch_size": rows / batches if batches else 0.0,
        "batches": batches, "mismatches": mismatches, "predictions_match": mismatches == 0,
        "stages": {layer.name: m for layer, m in zip(net.layers, metrics)},
        "latencies_ms": latencies.tolist(),
    }
