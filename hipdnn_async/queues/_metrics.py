"""Fixed-bucket latency histograms for the stream queues (O(1) per sample)."""
from __future__ import annotations

import math

__all__ = ["Histogram"]

# Log-spaced buckets, 10 per decade from 1 us to 100 s (in ms): the relative error of a
# percentile read from them is at most one bucket width, 10**0.1 - 1 ~ 26 %, and recording
# a sample is a log10 and an increment.
_LOW_MS = 1e-3
_PER_DECADE = 10
_DECADES = 8
_N_FINITE = _PER_DECADE * _DECADES
# bucket 0: (-inf, LOW]; bucket i in 1..N: (LOW*10**((i-1)/10), LOW*10**(i/10)]; N+1: above.
_UPPER = tuple(_LOW_MS * 10.0 ** (i / _PER_DECADE) for i in range(_N_FINITE + 1))


class Histogram:
    """Latency histogram in milliseconds with fixed log-spaced buckets.

    Recording is O(1); percentiles are read from the bucket counts (each reported value is
    the geometric middle of its bucket, clipped to the observed min and max).

    Notes
    -----
    Not locked: the owner (one stream) records under its own lock and reads under it.
    """

    __slots__ = ("counts", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.counts = [0] * (_N_FINITE + 2)
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def record(self, value_ms: float) -> None:
        """Add one sample (ms)."""
        if value_ms <= _LOW_MS:
            index = 0
        else:
            index = int(math.log10(value_ms / _LOW_MS) * _PER_DECADE) + 1
            if index > _N_FINITE + 1:
                index = _N_FINITE + 1
        self.counts[index] += 1
        self.count += 1
        self.total += value_ms
        if value_ms < self.min:
            self.min = value_ms
        if value_ms > self.max:
            self.max = value_ms

    def merge(self, other: "Histogram") -> None:
        """Add another histogram's samples to this one."""
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def copy(self) -> "Histogram":
        """Return an independent copy."""
        h = Histogram()
        h.merge(self)
        return h

    def percentile(self, q: float) -> float | None:
        """Return the q-th percentile (0 <= q <= 100) in ms, or None when empty."""
        if self.count == 0:
            return None
        rank = max(1, math.ceil(q / 100.0 * self.count))
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                break
        if index == 0:
            value = _LOW_MS
        elif index > _N_FINITE:
            value = self.max
        else:
            value = math.sqrt(_UPPER[index - 1] * _UPPER[index])
        return min(max(value, self.min), self.max)

    @property
    def mean(self) -> float | None:
        """Mean in ms, or None when empty."""
        return self.total / self.count if self.count else None

    def summary(self) -> dict:
        """Plain dict: count, mean, min, max, p50, p90, p99 (ms) and the non-empty buckets."""
        buckets = []
        for index, n in enumerate(self.counts):
            if n:
                upper = _UPPER[index] if index <= _N_FINITE else math.inf
                buckets.append((upper, n))
        return {
            "count": self.count,
            "mean": self.mean,
            "min": self.min if self.count else None,
            "max": self.max if self.count else None,
            "p50": self.percentile(50),
            "p90": self.percentile(90),
            "p99": self.percentile(99),
            "buckets": buckets,  # (upper edge in ms, count), non-empty buckets only
        }
