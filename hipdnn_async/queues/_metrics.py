"""Fixed-bucket latency histograms for the stream queues (O(1) per sample)."""
from __future__ import annotations

import itertools
import math
import operator
from bisect import bisect_left

import numpy as np

__all__ = ["Histogram", "percentiles", "FOLD_AT"]

# Log-spaced buckets, 10 per decade from 1 us to 100 s (in ms): the relative error of a
# percentile read from them is at most one bucket width, 10**0.1 - 1 ~ 26 %, and recording
# a sample is a log10 and an increment.
_LOW_MS = 1e-3
_PER_DECADE = 10
_DECADES = 8
_N_FINITE = _PER_DECADE * _DECADES
_TOP = _N_FINITE + 1  # the bucket above the last finite edge
# bucket 0: (-inf, LOW]; bucket i in 1..N: (LOW*10**((i-1)/10), LOW*10**(i/10)]; N+1: above.
FOLD_AT = _FOLD_AT = 4096      # pending samples sorted into the buckets at once
# From this many pending samples on, NumPy sorts them faster than a Python loop: its dozen
# calls cost ~12 us whatever the size, the loop ~0.2 us a sample (measured; read between
# submissions, one or a few samples are pending).
_NUMPY_FOLD_FROM = 64
_UPPER = tuple(_LOW_MS * 10.0 ** (i / _PER_DECADE) for i in range(_N_FINITE + 1))
# per bucket index: the upper edge listed in ``buckets`` and the value a percentile that
# lands there reports (the geometric middle; bucket 0 reports LOW, the top one the max)
_EDGE = _UPPER + (math.inf,)
_MIDDLE = (_LOW_MS,) + tuple(math.sqrt(_UPPER[i - 1] * _UPPER[i])
                             for i in range(1, _N_FINITE + 1)) + (math.inf,)  # inf: clipped to max
_log10 = math.log10
# samples above the last finite edge (and inf, NaN: no finite log10, and past ~1e305 ms
# v / LOW overflows) go to the top bucket without a log10; NumPy clips them to _CLIP_MS
# first, whose bucket is past the top one
_HIGH_MS = _UPPER[-1]
_CLIP_MS = _HIGH_MS * 100.0


class Histogram:
    """Latency histogram in milliseconds with fixed log-spaced buckets.

    Recording is O(1); percentiles are read from the bucket counts (each reported value is
    the geometric middle of its bucket, clipped to the observed min and max).

    Notes
    -----
    Not locked: the owner (one stream) records under its own lock and reads under it.
    Samples are kept as they come (a list append: recording is on the submission path)
    and sorted into the buckets in bulk when read, or every ``_FOLD_AT`` samples. Reading
    walks only the buckets between the lowest and the highest non-empty one (``_lo``,
    ``_hi``): latencies of one workload sit in a few adjacent buckets. :meth:`summary`
    finds its three percentiles in one pass and is kept until a sample arrives. A sample
    above the last edge (100 s), inf or NaN is counted in the top bucket; NaN leaves min
    and max alone and makes the mean NaN.
    """

    __slots__ = ("_counts", "_count", "_total", "_min", "_max", "_pending", "_lo", "_hi",
                 "_summary")

    def __init__(self) -> None:
        self._counts = [0] * (_TOP + 1)
        self._count = 0
        self._total = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._pending: list = []
        self._lo = _TOP + 1  # empty range: lo > hi
        self._hi = -1
        # the last summary and the count it was made at: counts only grow, so an equal
        # count means nothing was added since (a stream read while idle, or between the
        # submissions to its neighbours)
        self._summary: tuple | None = None

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
        """Sort the pending samples into the buckets."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if len(pending) >= _NUMPY_FOLD_FROM:
            self._fold_numpy(pending)
            return
        counts = self._counts
        lo, hi = self._lo, self._hi
        total, low, high = self._total, self._min, self._max
        for v in pending:
            if v <= _LOW_MS:
                index = 0
            elif v <= _HIGH_MS:
                index = int(_log10(v / _LOW_MS) * _PER_DECADE) + 1
                if index > _TOP:
                    index = _TOP
            else:           # above the last edge, inf or NaN
                index = _TOP
            counts[index] += 1
            if index < lo:
                lo = index
            if index > hi:
                hi = index
            total += v
            if v < low:
                low = v
            if v > high:
                high = v
        self._lo, self._hi = lo, hi
        self._total, self._min, self._max = total, low, high
        self._count += len(pending)

    def _fold_numpy(self, pending: list) -> None:
        v = np.array(pending, dtype=np.float64)
        above = v > _LOW_MS
        # samples <= LOW: log10(LOW / LOW) = 0 and `above` adds 0, so bucket 0; above LOW
        # the same division and log10 as the loop's, so the same bucket
        # fmin: NaN and inf become _CLIP_MS (the top bucket), so no log10 overflows
        index = (np.log10(np.fmin(np.maximum(v, _LOW_MS), _CLIP_MS) / _LOW_MS)
                 * _PER_DECADE).astype(np.int64)
        index += above
        np.minimum(index, _TOP, out=index)
        binned = np.bincount(index, minlength=_TOP + 1)
        nonzero = np.flatnonzero(binned)
        counts = self._counts
        for i, n in zip(nonzero.tolist(), binned[nonzero].tolist()):
            counts[i] += n
        self._lo = min(self._lo, int(nonzero[0]))
        self._hi = max(self._hi, int(nonzero[-1]))
        self._count += len(pending)
        self._total += float(v.sum())
        # fmin/fmax skip NaN, as the loop's comparisons do (min() keeps its first argument
        # against a NaN)
        self._min = min(self._min, float(np.fmin.reduce(v)))
        self._max = max(self._max, float(np.fmax.reduce(v)))

    def merge(self, other: "Histogram") -> None:
        """Add another histogram's samples to this one."""
        self._fold()
        other._fold()
        lo, hi = other._lo, other._hi + 1
        if lo < hi:
            counts = self._counts
            counts[lo:hi] = map(operator.add, counts[lo:hi], other._counts[lo:hi])
            self._lo = min(self._lo, lo)
            self._hi = max(self._hi, other._hi)
        self._count += other._count
        self._total += other._total
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    def copy(self) -> "Histogram":
        """Return an independent copy."""
        self._fold()
        h = Histogram.__new__(Histogram)
        h._counts = self._counts.copy()
        h._count, h._total = self._count, self._total
        h._min, h._max = self._min, self._max
        h._lo, h._hi = self._lo, self._hi
        h._pending = []
        h._summary = self._summary
        return h

    @classmethod
    def merged(cls, histograms) -> "Histogram":
        """A new histogram holding the samples of all ``histograms``.

        The same as merging them one by one into an empty histogram, in one pass over the
        buckets for all of them (a pool's summary over its streams).

        Parameters
        ----------
        histograms : iterable of Histogram
            Left as they are (their pending samples are folded in).

        Returns
        -------
        Histogram
        """
        histograms = list(histograms)
        h = cls()
        lo, hi = h._lo, h._hi
        count, total, low, high = 0, 0.0, math.inf, -math.inf
        for other in histograms:  # in order, as merge() one by one would add them
            other._fold()
            if other._lo < lo:
                lo = other._lo
            if other._hi > hi:
                hi = other._hi
            count += other._count
            total += other._total
            if other._min < low:
                low = other._min
            if other._max > high:
                high = other._max
        if lo <= hi:
            hi += 1
            h._counts[lo:hi] = map(sum, zip(*[other._counts[lo:hi] for other in histograms]))
            h._lo, h._hi = lo, hi - 1
        h._count, h._total, h._min, h._max = count, total, low, high
        return h

    def _read(self, qs) -> list:
        """The q-th percentiles for each q of ``qs`` (after a fold, count > 0)."""
        lo = self._lo
        return self._find(list(itertools.accumulate(self._counts[lo:self._hi + 1])), lo, qs)

    def _find(self, seen: list, lo: int, qs) -> list:
        """Percentiles from the running totals ``seen`` of the buckets from ``lo`` on: a
        percentile's bucket is the first one whose running total reaches its nearest rank;
        it reports the bucket's middle clipped to [min, max]."""
        count, low, high = self._count, self._min, self._max
        out = []
        for q in qs:
            rank = math.ceil(q / 100.0 * count)
            value = _MIDDLE[bisect_left(seen, rank if rank > 1 else 1) + lo]
            # comparisons, not min()/max() calls (a summary is read between submissions)
            out.append(low if value < low else high if value > high else value)
        return out

    def percentile(self, q: float) -> float | None:
        """Return the q-th percentile (0 <= q <= 100) in ms, or None when empty.

        Raises
        ------
        ValueError
            ``q`` is outside [0, 100] (or NaN).
        """
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"Histogram.percentile: q must be in [0, 100]; got {q!r}")
        self._fold()
        if self._count == 0:
            return None
        return self._read((q,))[0]

    @property
    def mean(self) -> float | None:
        """Mean in ms, or None when empty."""
        self._fold()
        return self._total / self._count if self._count else None

    def summary(self) -> dict:
        """Plain dict: count, mean, min, max, p50, p90, p99 (ms) and the non-empty buckets."""
        self._fold()
        count = self._count
        if not count:
            return {"count": 0, "mean": None, "min": None, "max": None,
                    "p50": None, "p90": None, "p99": None, "buckets": []}
        cached = self._summary
        if cached is not None and cached[0] == count:
            return _copy_summary(cached[1])
        summary = self._summarize()
        self._summary = (count, summary)
        return _copy_summary(summary)

    def _summarize(self) -> dict:
        count = self._count
        lo, hi = self._lo, self._hi + 1
        window = self._counts[lo:hi]
        p50, p90, p99 = self._find(list(itertools.accumulate(window)), lo, (50, 90, 99))
        return {
            "count": count,
            "mean": self._total / count,
            "min": self._min,
            "max": self._max,
            "p50": p50,
            "p90": p90,
            "p99": p99,
            # (upper edge in ms, count), non-empty buckets only
            "buckets": list(itertools.compress(zip(_EDGE[lo:hi], window), window)),
        }


def _copy_summary(summary: dict) -> dict:
    """An independent copy of a :meth:`Histogram.summary` (``buckets`` is its only mutable
    part)."""
    return {**summary, "buckets": list(summary["buckets"])}


def percentiles(values) -> dict[str, float]:
    """Exact p50/p90/p99 and mean of a sample (NumPy's linear interpolation), in the
    sample's unit; all 0.0 for an empty sample. For windows of samples kept whole (the
    batcher's, a Ray replica's); a stream's histogram reads buckets instead."""
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0}
    a = np.fromiter(values, dtype=np.float64)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(a.mean())}
