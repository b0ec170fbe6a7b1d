"""Histogram.summary() and StreamPool.metrics() against references computed apart.

Two references, written out here and sharing nothing with ``queues._metrics`` but the
bucket definition (10 log-spaced buckets a decade from 1 us to 100 s, in ms):

- ``_reference_summary``: the first implementation's algorithm (every sample's bucket by
  ``int(log10(v / 1e-3) * 10) + 1``, then one walk over all 82 counts per percentile),
  exact on bucket edges too;
- ``_numpy_buckets`` / nearest rank: ``np.searchsorted`` over the edges and the sorted
  sample's order statistics, for continuous random samples (which never sit on an edge).
"""
from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from hipdnn_async.queues import Histogram, StreamPool

_N = 80  # finite buckets
_UPPER = tuple(1e-3 * 10.0 ** (i / 10) for i in range(_N + 1))
_KEYS = ["count", "mean", "min", "max", "p50", "p90", "p99", "buckets"]


def _reference_bucket(v: float) -> int:
    if v <= 1e-3:
        return 0
    return min(int(math.log10(v / 1e-3) * 10) + 1, _N + 1)


def _reference_summary(samples) -> dict:
    samples = [float(v) for v in samples]
    if not samples:
        return dict.fromkeys(_KEYS[:-1], None) | {"count": 0, "buckets": []}
    counts = [0] * (_N + 2)
    for v in samples:
        counts[_reference_bucket(v)] += 1
    n, low, high = len(samples), min(samples), max(samples)

    def percentile(q):
        rank = max(1, math.ceil(q / 100.0 * n))
        seen = 0
        for i, c in enumerate(counts):
            seen += c
            if seen >= rank:
                break
        value = 1e-3 if i == 0 else high if i > _N else math.sqrt(_UPPER[i - 1] * _UPPER[i])
        return min(max(value, low), high)

    return {"count": n, "mean": math.fsum(samples) / n, "min": low, "max": high,
            "p50": percentile(50), "p90": percentile(90), "p99": percentile(99),
            "buckets": [(_UPPER[i] if i <= _N else math.inf, c)
                        for i, c in enumerate(counts) if c]}


def _assert_same(got: dict, want: dict) -> None:
    assert list(got) == _KEYS
    for key in _KEYS:
        if key == "mean" and want["mean"] is not None:
            # the order of the float additions differs (folds in chunks): ulps only
            assert got["mean"] == pytest.approx(want["mean"], rel=1e-9, abs=0), key
        else:
            assert got[key] == want[key], key


# At and below 1 us, far above 100 s, just past 1 us, above 100 s: every way of folding
# puts these in the same bucket.
_EXTREMES = [0.0, 1e-12, 5e-4, 1e-3, 1e-3 * (1 + 1e-15), 0.0011, 1e5 * 1.01, 1e6, 1e9]
# Exactly on (or an ulp from) bucket edges: the bucket depends on the last bit of a log10,
# so compared only where the samples are folded one at a time (math.log10, as the
# reference); NumPy's vectorized log10 may differ by an ulp on some CPUs.
_ON_EDGES = [1.0, 10.0, 1e5] + list(_UPPER[::7]) + [u * (1 - 1e-12) for u in _UPPER[3::9]]


def _random_samples(rng, n: int) -> np.ndarray:
    """Lognormal over ~10 decades (some below 1 us and above 100 s)."""
    return rng.lognormal(mean=0.0, sigma=3.5, size=n)


# ---------------------------------------------------------------------------- one histogram

def test_empty_and_single_sample():
    _assert_same(Histogram().summary(), _reference_summary([]))
    assert Histogram().percentile(50) is None and Histogram().mean is None
    for v in _EXTREMES + _ON_EDGES + [0.37]:
        h = Histogram()
        h.record(v)
        _assert_same(h.summary(), _reference_summary([v]))
        assert h.percentile(50) == _reference_summary([v])["p50"]


def test_samples_on_bucket_edges_folded_a_few_at_a_time():
    h, seen = Histogram(), []
    for v in _ON_EDGES + _EXTREMES + _ON_EDGES[::-1]:
        h.record(v)
        seen.append(v)
        if len(seen) % 3 == 0:
            _assert_same(h.summary(), _reference_summary(seen))
    _assert_same(h.summary(), _reference_summary(seen))



@pytest.mark.parametrize("pending", [1, 64], ids=["loop fold", "numpy fold"])
def test_samples_past_any_edge_go_to_the_top_bucket_and_lose_nothing(pending):
    # 1e306 ms overflows the log10 of v / 1 us to inf, inf and NaN have no finite log10:
    # each such sample is counted above the last edge (100 s), the finite ones as ever,
    # and a read never raises (it used to, after dropping every pending sample)
    finite = [0.5] * pending + [2.0]
    odd = [1e306, math.inf, 1e300]
    h = Histogram()
    h.record_many(finite + odd)
    s = h.summary()
    assert s["count"] == len(finite) + len(odd)
    assert s["min"] == 0.5 and s["max"] == math.inf and s["mean"] == math.inf
    assert s["buckets"] == _reference_summary(finite)["buckets"] + [(math.inf, len(odd))]
    # nearest rank 3 of 5 is past the finite samples; rank 34 of 68 in 0.5's bucket
    # (0.398, 0.501], whose middle 0.447 is clipped to the minimum
    assert s["p50"] == (math.inf if pending == 1 else 0.5) and s["p99"] == math.inf
    h = Histogram()
    h.record_many(finite + [math.nan])
    s = h.summary()
    # NaN: counted above the last edge, min/max those of the other samples, mean NaN
    assert s["count"] == len(finite) + 1 and (s["min"], s["max"]) == (0.5, 2.0)
    assert s["buckets"][-1] == (math.inf, 1) and math.isnan(s["mean"])


@pytest.mark.parametrize("n", [2, 7, 8, 39, 40, 41, 100, 4095, 4096, 4097, 12_000])
def test_summary_matches_the_reference_algorithm(n):
    rng = np.random.default_rng(n)
    samples = [float(v) for v in _random_samples(rng, n)]
    step = max(1, n // 20)
    samples[::step] = (_EXTREMES * n)[: len(samples[::step])]
    h = Histogram()
    for v in samples:
        h.record(v)
    _assert_same(h.summary(), _reference_summary(samples))
    for q in (0, 1, 25, 50, 75, 90, 99, 99.9, 100):
        assert h.percentile(q) == _percentile_reference(samples, q), q


def _percentile_reference(samples, q):
    """The reference algorithm's percentile for any q (through a summary of q's rank)."""
    counts = [0] * (_N + 2)
    for v in samples:
        counts[_reference_bucket(v)] += 1
    rank = max(1, math.ceil(q / 100.0 * len(samples)))
    i = int(np.searchsorted(np.cumsum(counts), rank, side="left"))
    low, high = min(samples), max(samples)
    value = 1e-3 if i == 0 else high if i > _N else math.sqrt(_UPPER[i - 1] * _UPPER[i])
    return min(max(value, low), high)


def test_summary_matches_numpy_buckets_and_nearest_rank():
    rng = np.random.default_rng(7)
    samples = _random_samples(rng, 5000)
    h = Histogram()
    h.record_many(samples.tolist())
    got = h.summary()
    index = np.minimum(np.searchsorted(np.array(_UPPER), samples, side="left"), _N + 1)
    edges = np.r_[np.array(_UPPER), np.inf]
    values, counts = np.unique(index, return_counts=True)
    assert got["buckets"] == [(float(edges[i]), int(c)) for i, c in zip(values, counts)]
    ordered = np.sort(samples)
    for key, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        # the bucket of the nearest-rank order statistic, reported as its geometric middle
        # (clipped to [min, max]; the bucket above 100 s reports the max)
        x = ordered[math.ceil(q / 100 * len(ordered)) - 1]
        i = int(np.searchsorted(np.array(_UPPER), x, side="left"))
        middle = samples.max() if i > _N else 1e-3 if i == 0 else math.sqrt(
            _UPPER[i - 1] * _UPPER[i])
        assert got[key] == min(max(middle, samples.min()), samples.max()), key
    assert (got["count"], got["min"], got["max"]) == (5000, samples.min(), samples.max())
    assert got["mean"] == pytest.approx(samples.mean(), rel=1e-12)


def test_summary_read_between_records_stays_exact():
    """Reads fold the samples pending at that moment (any number, small or large), and a
    read with nothing new since returns the same dict again: check after every chunk."""
    rng = random.Random(3)
    nprng = np.random.default_rng(3)
    h, seen = Histogram(), []
    for _ in range(60):
        chunk = [float(v) for v in _random_samples(nprng, rng.choice([0, 1, 3, 39, 40, 500]))]
        if rng.random() < 0.3:
            chunk += rng.sample(_EXTREMES, 2)
        if rng.random() < 0.5:
            h.record_many(chunk)
        else:
            for v in chunk:
                h.record(v)
        seen += chunk
        first = h.summary()
        _assert_same(first, _reference_summary(seen))
        # the caller owns what it got: changing it changes nothing that follows
        first["buckets"].append((0.0, 0))
        first["p50"] = -1.0
        _assert_same(h.summary(), _reference_summary(seen))
        assert h.count == len(seen) and h.counts == _reference_counts(seen)


def _reference_counts(samples) -> list[int]:
    counts = [0] * (_N + 2)
    for v in samples:
        counts[_reference_bucket(v)] += 1
    return counts


@pytest.mark.parametrize("n_histograms", [1, 2, 4, 16, 64])
def test_merge_copy_and_merged_match_the_reference(n_histograms):
    rng = np.random.default_rng(n_histograms)
    parts = []
    for k in range(n_histograms):
        n = int(rng.choice([0, 1, 5, 60, 3000]))
        part = [float(v) for v in _random_samples(rng, n)]
        if k % 3 == 1:
            part += _EXTREMES
        parts.append(part)
    histograms = []
    for part in parts:
        h = Histogram()
        h.record_many(part[: len(part) // 2])
        h.summary()  # part folded, a summary cached: both must follow later samples
        for v in part[len(part) // 2:]:
            h.record(v)
        histograms.append(h)
    everything = [v for part in parts for v in part]
    want = _reference_summary(everything)
    _assert_same(Histogram.merged(histograms).summary(), want)
    one_by_one = histograms[0].copy()
    for h in histograms[1:]:
        one_by_one.merge(h)
    _assert_same(one_by_one.summary(), want)
    for h, part in zip(histograms, parts):  # the inputs are left as they were
        _assert_same(h.summary(), _reference_summary(part))
        _assert_same(h.copy().summary(), _reference_summary(part))
    _assert_same(Histogram.merged([]).summary(), _reference_summary([]))


# ---------------------------------------------------------------------------- the pool

@pytest.mark.parametrize("n_streams", [1, 4, 16])
def test_pool_metrics_match_the_reference_per_stream_and_pool_wide(n_streams):
    with StreamPool("cpu", n_streams=n_streams) as pool:
        handles = []
        for round_ in range(3):  # read between rounds: later reads see new samples
            for i in range(40 * n_streams + 7):
                stream = (i * 7 + round_) % n_streams
                handles.append((stream, pool.submit_blocking(_short_work(i), stream=stream)))
            for _, h in handles:
                assert h.wait(10)
            m = pool.metrics()
            again = pool.metrics()  # nothing new: the same values
            for key in ("queue_wait_ms", "exec_ms"):
                per_stream = [[getattr(h, key) for s, h in handles if s == k]
                              for k in range(n_streams)]
                for k in range(n_streams):
                    _assert_same(m["streams"][k][key], _reference_summary(per_stream[k]))
                    _assert_same(again["streams"][k][key], _reference_summary(per_stream[k]))
                every = [v for values in per_stream for v in values]
                _assert_same(m[key], _reference_summary(every))
                _assert_same(again[key], _reference_summary(every))
            assert m["completed"] == len(handles) == sum(s["completed"] for s in m["streams"])
            # the pool-wide summaries and each stream's are separate objects
            m["exec_ms"]["buckets"].clear()
            m["streams"][0]["exec_ms"]["buckets"].clear()
            assert pool.metrics()["exec_ms"]["buckets"] == again["exec_ms"]["buckets"] != []


def _short_work(i: int):
    seconds = (0.0, 0.00005, 0.0003)[i % 3]

    def run():
        if seconds:
            time.sleep(seconds)
    return run


@pytest.mark.parametrize("q", [-1.0, 100.5, 1e9, float("nan")])
def test_a_percentile_outside_0_100_is_a_value_error(q):
    h = Histogram()
    for v in (0.5, 2.0, 1e6):
        h.record(v)
    with pytest.raises(ValueError, match="q must be in"):
        h.percentile(q)
    assert h.percentile(100) == 1e6 and h.percentile(0) == 0.5
