"""Summaries of a profile: per-key averages, the text table, stream overlap."""
from __future__ import annotations

import numpy as np

from .._errors import DeviceError

__all__ = ["key_averages", "table", "overlap", "busy_overlap"]

_KEYS = {
    "name": lambda r: r.facts["name"],
    "pattern": lambda r: r.facts["pattern"],
    "engine": lambda r: r.facts["engine"],
    "stream": lambda r: f"{r.device.spec} {r.stream}",
}


def key_averages(executions, group_by: str = "name", where: str = "key_averages") -> list[dict]:
    """Rows of ``Profile.key_averages`` (see there); ``where``: the method called, for an
    unknown ``group_by``'s ``DeviceError``."""
    try:
        key_of = _KEYS[group_by]
    except (KeyError, TypeError):
        raise DeviceError(f"profile.{where}: group_by={group_by!r}; one of "
                          f"{', '.join(map(repr, _KEYS))}", code="INVALID_VALUE") from None
    groups: dict = {}
    for r in executions:
        if r.duration is not None:
            groups.setdefault(key_of(r), []).append(r)
    rows = []
    for key, rs in groups.items():
        ms = np.array([r.duration * 1e3 for r in rs])
        waits = [r.queue_wait * 1e3 for r in rs if r.queue_wait is not None]
        total_s = ms.sum() / 1e3
        flops = sum(r.facts["flops"] for r in rs)
        nbytes = sum(r.facts["bytes"] for r in rs)
        rows.append({
            "key": key, "count": len(rs), "total_ms": float(ms.sum()),
            "mean_ms": float(ms.mean()), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)),
            "queue_wait_ms": float(np.mean(waits)) if waits else None,
            "gflops": flops / total_s / 1e9 if flops and total_s > 0 else None,
            "gbps": nbytes / total_s / 1e9 if nbytes and total_s > 0 else None,
        })
    rows.sort(key=lambda row: -row["total_ms"])
    return rows


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(prof, group_by: str | None = None, row_limit: int = 20) -> str:
    """``Profile.table``: a fixed-width text table per grouping."""
    if isinstance(row_limit, bool) or not isinstance(row_limit, int) or row_limit < 1:
        raise DeviceError(f"profile.table: row_limit must be an int >= 1; got {row_limit!r}",
                          code="INVALID_VALUE")
    out = []
    for group in ([group_by] if group_by is not None else ["name", "pattern"]):
        rows = key_averages(prof.executions, group, "table")
        title = {"name": "plan"}.get(group, group)
        width = max([len(title)] + [len(str(r["key"])) for r in rows[:row_limit]])
        head = (f"{title:<{width}}  {'count':>6}  {'total ms':>10}  {'mean ms':>9}  "
                f"{'p50 ms':>9}  {'p99 ms':>9}  {'wait ms':>8}  {'GFLOP/s':>8}  {'GB/s':>7}")
        out += [head, "-" * len(head)]
        for r in rows[:row_limit]:
            out.append(f"{str(r['key']):<{width}}  {r['count']:>6}  {r['total_ms']:>10.3f}  "
                       f"{r['mean_ms']:>9.4f}  {r['p50_ms']:>9.4f}  {r['p99_ms']:>9.4f}  "
                       f"{_fmt(r['queue_wait_ms'], '8.3f'):>8}  {_fmt(r['gflops'], '8.2f'):>8}"
                       f"  {_fmt(r['gbps'], '7.2f'):>7}")
        if len(rows) > row_limit:
            out.append(f"... {len(rows) - row_limit} more")
        out.append("")
    n = len(prof.executions)
    wall = (prof.stopped_at - prof.started_at) if prof.stopped_at is not None else 0.0
    # the figure of Profile.overlap: a share of wall time (first execution's start to the
    # last one's end), not of the time some stream is busy
    out.append(f"{n} executions, {len(prof.batches)} batches, {len(prof.spans)} spans in "
               f"{wall * 1e3:.3f} ms; two or more streams busy {overlap(prof.executions):.1%} "
               "of the wall time from the first execution's start to the last one's end")
    return "\n".join(out)


def busy_overlap(intervals_by_lane: dict) -> tuple[float, float]:
    """(seconds with two or more lanes busy, seconds from the first start to the last
    end) of ``{lane: [(start, end), ...]}``; a lane's own intervals are merged first."""
    points = []
    lo, hi = None, None
    for spans in intervals_by_lane.values():
        merged = []
        for s, e in sorted(spans):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        for s, e in merged:
            points.append((s, 1))
            points.append((e, -1))
            lo = s if lo is None else min(lo, s)
            hi = e if hi is None else max(hi, e)
    if lo is None:
        return 0.0, 0.0
    points.sort(key=lambda p: (p[0], p[1]))   # an end before a start at the same time
    busy, both, prev = 0, 0.0, lo
    for t, step in points:
        if busy >= 2:
            both += t - prev
        busy += step
        prev = t
    return both, hi - lo


def overlap(executions) -> float:
    """``Profile.overlap``: the fraction of wall time with two or more streams busy."""
    lanes: dict = {}
    for r in executions:
        if r.started is not None and r.ended is not None:
            lanes.setdefault((id(r.device), r.stream), []).append((r.started, r.ended))
    both, wall = busy_overlap(lanes)
    return both / wall if wall > 0 else 0.0
