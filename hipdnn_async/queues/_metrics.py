"""Fixed-bucket latency histograms for the stream queues (O(1) per sample)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["Histogram", "percentiles"]

# Log-spaced buckets, 10 per decade from 1 us to 100 s (in ms): the relative error of a
# percentile read from them is at most one bucket width, 10**0.1 - 1 ~ 26 %, and recording
# a sample is a log10 and an increment.
_LOW_MS = 1e-3
_PER_DECADE = 10
_DECADES = 8
_N_FINITE = _PER_DECADE * _DECADES
# bucket 0: (-inf, LOW]; bucket i in 1..N: (LOW*10**((i-1)/10), LOW*10**(i/10)]; N+1: above.
_FOLD_AT = 4096      # pending samples sorted into the buckets at once
_UPPER = tuple(_LOW_MS * 10.0 ** (i / _PER_DECADE) for i in range(_N_FINITE + 1))


class Histogram:
    """Latency histogram in milliseconds with fixed log-spaced buckets.

    Recording is O(1); percentiles are read from the bucket counts (each reported value is
    the geometric middle of its bucket, clipped to the observed min and max).

    Notes
    -----
    Not locked: the owner (one stream) records under its own lock and reads under it.
    Samples are kept as they come (a list append: recording is on the submission path)
    and sorted into the buckets in bulk when read, or every ``_FOLD_AT`` samples.
    """

    __slots__ = ("_counts", "_count", "_total", "_min", "_max", "_pending")

    def __init__(self) -> None:
        self._counts = [0] * (_N_FINITE + 2)
        self._count = 0
        self._total = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._pending: list = []

    # the fields, read after the pending samples are folded in
    counts = property(lambda self: (self._fold(), self._counts)[1])
    count = property(lambda self: (self._fold(), self._count)[1])
    total = property(lambda self: (self._fold(), self._total)[1])
    min = property(lambda self: (self._fold(), self._min)[1])
    max = property(lambda self: (self._fold(), self._max)[1])

    def record(self, value_ms: float) -> None:
        """Add one sample (ms)."""
        pending = self._pending
        pending.append(value_ms)
        if len(pending) >= _FOLD_AT:
            self._fold()

    def record_many(self, values_ms: list) -> None:
        """Add samples (ms)."""
        pending = self._pending
        pending.extend(values_ms)
        if len(pending) >= _FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        """Sort the pending samples into the buckets (vectorized)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if len(pending) < 8:
            for v in pending:
                self._record_one(v)
            return
        v = np.asarray(pending, dtype=np.float64)
        index = np.zeros(v.shape, dtype=np.int64)
        above = v > _LOW_MS
        index[above] = np.minimum(
            (np.log10(v[above] / _LOW_MS) * _PER_DECADE).astype(np.int64) + 1, _N_FINITE + 1)
        counts = np.bincount(index, minlength=_N_FINITE + 2)
        for i in np.flatnonzero(counts):
            self._counts[i] += int(counts[i])
        self._count += len(pending)
        self._total += float(v.sum())
        self._min = min(self._min, float(v.min()))
        self._max = max(self._max, float(v.max()))

    def _record_one(self, value_ms: float) -> None:
        if value_ms <= _LOW_MS:
            index = 0
        else:
            index = int(math.log10(value_ms / _LOW_MS) * _PER_DECADE) + 1
            if index > _N_FINITE + 1:
                index = _N_FINITE + 1
        self._counts[index] += 1
        self._count += 1
        self._total += value_ms
        if value_ms < self._min:
            self._min = value_ms
        if value_ms > self._max:
            self._max = value_ms

    def merge(self, other: "Histogram") -> None:
        """Add another histogram's samples to this one."""
        self._fold()
        other._fold()
        for i, n in enumerate(other._counts):
            self._counts[i] += n
        self._count += other._count
        self._total += other._total
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    def copy(self) -> "Histogram":
        """Return an independent copy."""
        h = Histogram()
        h.merge(self)
        return h

    def percentile(self, q: float) -> float | None:
        """Return the q-th percentile (0 <= q <= 100) in ms, or None when empty."""
        self._fold()
        if self._count == 0:
            return None
        rank = max(1, math.ceil(q / 100.0 * self._count))
        seen = 0
        for index, n in enumerate(self._counts):
            seen += n
            if seen >= rank:
                break
        if index == 0:
            value = _LOW_MS
        elif index > _N_FINITE:
            value = self._max
        else:
            value = math.sqrt(_UPPER[index - 1] * _UPPER[index])
        return min(max(value, self._min), self._max)

    @property
    def mean(self) -> float | None:
        """Mean in ms, or None when empty."""
        self._fold()
        return self._total / self._count if self._count else None

    def summary(self) -> dict:
        """Plain dict: count, mean, min, max, p50, p90, p99 (ms) and the non-empty buckets."""
        self._fold()
        buckets = []
        for index, n in enumerate(self._counts):
            if n:
                upper = _UPPER[index] if index <= _N_FINITE else math.inf
                buckets.append((upper, n))
        return {
            "count": self._count,
            "mean": self.mean,
            "min": self._min if self._count else None,
            "max": self._max if self._count else None,
            "p50": self.percentile(50),
            "p90": self.percentile(90),
            "p99": self.percentile(99),
            "buckets": buckets,  # (upper edge in ms, count), non-empty buckets only
        }


def percentiles(values) -> dict[str, float]:
    """Exact p50/p90/p99 and mean of a sample (NumPy's linear interpolation), in the
    sample's unit; all 0.0 for an empty sample. For windows of samples kept whole (the
    batcher's, a Ray replica's); a stream's histogram reads buckets instead."""
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0}
    a = np.fromiter(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean())}
