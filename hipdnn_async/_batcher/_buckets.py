"""Buckets: the batch sizes plans are built for, and each lane's plans per bucket, built
once (concurrent callers wait for the one build)."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import anyio

from .._errors import GraphError, KnobError
from ._classify import require_batchable, tensor_by_key

__all__ = ["Bucket", "PlanCache", "bucket_for", "resolve_buckets"]


def _not_a_policy(buckets) -> GraphError:
    return GraphError(f"DynamicBatcher: buckets={buckets!r} is not a policy; "
                      "use 'pow2', 'exact' or an increasing sequence of batch sizes")


def resolve_buckets(buckets, max_batch_size: int) -> tuple[int, ...]:
    """The batch sizes plans are built for, increasing; the last is >= max_batch_size."""
    if isinstance(buckets, str):
        if buckets == "pow2":
            out, b = [], 1
            while b < max_batch_size:
                out.append(b)
                b *= 2
            out.append(max_batch_size)
            return tuple(out)
        if buckets == "exact":
            return tuple(range(1, max_batch_size + 1))
        raise _not_a_policy(buckets)
    try:
        out = tuple(operator.index(b) for b in buckets)
        if any(type(b) is bool for b in buckets):
            raise TypeError
    except (TypeError, ValueError):
        raise _not_a_policy(buckets) from None
    if (not out or out[0] < 1 or any(a >= b for a, b in zip(out, out[1:]))
            or out[-1] < max_batch_size):
        raise GraphError(f"DynamicBatcher: buckets {list(out)} must be positive, strictly "
                         f"increasing and end at >= max_batch_size={max_batch_size}")
    return out


def bucket_for(buckets: tuple[int, ...], rows: int) -> int:
    """The smallest of `buckets` >= `rows` (GraphError beyond the largest)."""
    for b in buckets:
        if b >= rows:
            return b
    raise GraphError(f"DynamicBatcher: {rows} rows exceed the largest bucket "
                     f"{buckets[-1]}")


@dataclass(eq=False)
class Bucket:
    """A built plan for one bucket batch size, with its tensors by name."""

    size: int
    plan: Any
    tensors: dict           # name -> TensorAttributes of the bucket graph
    keys: dict              # name -> variant-pack key (uid when set, else name)
    # buffers free for the next batch: a _staging.Staging on a GPU lane, the input
    # buffers by name on a host lane
    idle: list = field(default_factory=list)
    # host lane: output name -> (shape, dtype, byte strides, elements spanned) of its buffers
    out_like: dict = field(default_factory=dict)


class PlanCache:
    """Builds the plan of a bucket size on a lane's device, once; counts the builds."""

    def __init__(self, graph, knobs, roles):
        self._graph = graph
        self._knobs = knobs
        # every tensor of the variant pack, by name
        self._names = (*roles.inputs, *roles.constant_tensors, *roles.all_outputs)
        self.built = 0

    async def get(self, lane, size: int) -> Bucket:
        """The cached plan of `lane`'s device for a bucket size, built once (concurrent
        callers wait).

        Raises
        ------
        KnobError
            The knobs do not apply at this batch size (the message names the bucket).
        NotSupportedError, DeviceError
            As ``Device.build``; NotSupportedError also for a plan whose pattern is not
            batchable.
        """
        bucket = lane.plans.get(size)
        if bucket is not None:
            return bucket
        lock = lane.plan_locks.setdefault(size, anyio.Lock())
        async with lock:
            bucket = lane.plans.get(size)
            if bucket is not None:
                return bucket
            g = self._graph.with_batch_size(size)
            try:
                plan = await lane.device.build(g, knobs=self._knobs)
            except KnobError as exc:  # e.g. a workspace limit outside this size's range
                raise KnobError(f"DynamicBatcher: the plan for batch bucket {size}: {exc}",
                                code=exc.code) from None
            pattern = getattr(plan, "pattern", None)
            if pattern is not None:
                require_batchable(getattr(pattern, "name", str(pattern)))
            self.built += 1
            tensors = tensor_by_key(g)
            keys = {}
            for name in self._names:
                t = tensors[name]
                keys[name] = t.uid if t.uid is not None else t.name
            bucket = Bucket(size, plan, tensors, keys)
            prepare = getattr(plan, "reorder_constants", None)
            if lane.host and prepare is not None and lane.constants:
                # constants stay the same for every batch: an engine may prepare them once
                # (ONEDNN_ENGINE reorders constant weights into its blocked layout)
                prepare({keys[k]: buf for k, buf in lane.constants.items()})
            lane.plans[size] = bucket
            return bucket
