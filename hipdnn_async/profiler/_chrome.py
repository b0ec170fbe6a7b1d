"""Chrome trace-event JSON of a profile, and a checker of that format.

The format is Google's "Trace Event Format" (the JSON object form, ``traceEvents``):
complete events (``ph`` ``X``, ``ts`` and ``dur`` in µs), metadata (``M``:
``process_name``, ``thread_name``, sort indices) and flow events (``s`` / ``f``, paired
by ``id``, the ``f`` bound to its enclosing slice with ``bp`` ``e``). Perfetto and
``chrome://tracing`` both read it.
"""
from __future__ import annotations

import math

__all__ = ["to_trace", "check_trace"]


class _Tracks:
    """pid per process name, tid per (pid, track), with overlapping slices of one track
    spread over extra lanes (``name #2`` ...), so slices on one thread track nest."""

    def __init__(self) -> None:
        self.pids: dict = {}
        self.tids: dict = {}
        self.lanes: dict = {}           # (pid, track) -> [lane end times]
        self.meta: list = []

    def pid(self, name: str) -> int:
        pid = self.pids.get(name)
        if pid is None:
            pid = self.pids[name] = len(self.pids) + 1
            self.meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                              "ts": 0, "args": {"name": name}})
            self.meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                              "ts": 0, "args": {"sort_index": pid}})
        return pid

    def tid(self, pid: int, track: str, start: float, end: float) -> int:
        """The tid of the first lane of ``track`` free at ``start``; it is busy to ``end``."""
        ends = self.lanes.setdefault((pid, track), [])
        for k, last in enumerate(ends):
            if last <= start:
                ends[k] = end
                break
        else:
            ends.append(end)
            k = len(ends) - 1
        name = track if k == 0 else f"{track} #{k + 1}"
        key = (pid, name)
        tid = self.tids.get(key)
        if tid is None:
            tid = self.tids[key] = sum(1 for p, _ in self.tids if p == pid) + 1
            self.meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                              "ts": 0, "args": {"name": name}})
            self.meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid,
                              "tid": tid, "ts": 0, "args": {"sort_index": tid}})
        return tid


def _device_names(prof) -> dict:
    """id(device) -> process name; devices of one spec told apart by a count."""
    names, used = {}, {}
    for key, device in prof._seen.items():
        spec = device.spec
        used[spec] = used.get(spec, 0) + 1
        names[key] = spec if used[spec] == 1 else f"{spec} ({used[spec]})"
    return names


def to_trace(prof) -> dict:
    """The trace-event dict of a finished ``Profile``."""
    t0 = prof.started_at
    def us(t):                                       # µs from the profile's start
        return round((t - t0) * 1e6, 3)

    def dur(a, b):                                   # µs from a to b, never negative
        return max(0.0, round(us(b) - us(a), 3))

    tracks = _Tracks()
    names = _device_names(prof)
    for key in names:                                # devices first, in first-seen order
        tracks.pid(f"device {names[key]}")
    events: list = []
    flows: list = []
    where: dict = {}                                 # id(record) -> (pid, tid)
    # per device: its streams' tracks in stream order, then builds
    execs = sorted((r for r in prof.executions if r.started is not None),
                   key=lambda r: (r.started, r.ended))
    for r in execs:
        pid = tracks.pid(f"device {names[id(r.device)]}")
        tid = tracks.tid(pid, f"stream {r.stream}", r.started, r.ended)
        where[id(r)] = (pid, tid)
        f = r.facts
        args = {"pattern": f["pattern"], "engine": f["engine"], "algorithm": f["algorithm"],
                "stream": r.stream, "kind": r.kind, "ok": r.ok,
                "submitted_us": us(r.submitted) if r.submitted is not None else None,
                "queue_wait_us": round(r.queue_wait * 1e6, 3) if r.queue_wait is not None
                else None,
                "flops": f["flops"], "bytes": f["bytes"]}
        if r.duration and f["flops"]:
            args["gflops"] = round(f["flops"] / r.duration / 1e9, 3)
        if r.launched is not None:
            args["launched_us"] = us(r.launched)
        if "plans" in f:
            args["plans"] = f["plans"]
        events.append({"ph": "X", "name": f["name"], "cat": r.kind, "ts": us(r.started),
                       "dur": dur(r.started, r.ended),
                       "pid": pid, "tid": tid, "args": args})
    for s in sorted(prof.spans, key=lambda s: s.start):
        pid = tracks.pid(f"device {names[id(s.device)]}")
        tid = tracks.tid(pid, s.track, s.start, s.end)
        events.append({"ph": "X", "name": s.name, "cat": s.track, "ts": us(s.start),
                       "dur": dur(s.start, s.end),
                       "pid": pid, "tid": tid, "args": dict(s.args)})
    flow_id = 0
    for b in sorted(prof.batches, key=lambda b: b.formed):
        pid = tracks.pid(f"batcher {b.batcher}")
        tid = tracks.tid(pid, "batches", b.formed, b.ended)
        served = [r for r in b.executions if id(r) in where]
        events.append({"ph": "X", "name": f"batch {b.rows}/{b.bucket} rows", "cat": "batch",
                       "ts": us(b.formed), "dur": dur(b.formed, b.ended),
                       "pid": pid, "tid": tid,
                       "args": {"device": names[id(b.device)], "rows": b.rows,
                                "bucket": b.bucket, "fill": round(b.fill, 4),
                                "requests": len(b.requests),
                                "wait_us": round(b.wait * 1e6, 3), "ok": b.ok}})
        for n, enqueued in b.requests:
            rtid = tracks.tid(pid, "requests", enqueued, b.formed)
            events.append({"ph": "X", "name": f"request ({n} rows)", "cat": "request",
                           "ts": us(enqueued), "dur": dur(enqueued, b.formed),
                           "pid": pid, "tid": rtid, "args": {"rows": n}})
            flow_id += 1
            flows.append({"ph": "s", "name": "request", "cat": "flow", "id": flow_id,
                          "ts": us(enqueued), "pid": pid, "tid": rtid})
            flows.append({"ph": "f", "bp": "e", "name": "request", "cat": "flow",
                          "id": flow_id, "ts": us(b.formed), "pid": pid, "tid": tid})
        for r in served:
            flow_id += 1
            epid, etid = where[id(r)]
            flows.append({"ph": "s", "name": "batch", "cat": "flow", "id": flow_id,
                          "ts": us(max(b.formed, min(r.submitted or b.formed, b.ended))),
                          "pid": pid, "tid": tid})
            flows.append({"ph": "f", "bp": "e", "name": "batch", "cat": "flow",
                          "id": flow_id, "ts": us(r.started), "pid": epid, "tid": etid})
    from ._stats import overlap
    return {
        "traceEvents": tracks.meta + events + flows,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": "hipdnn_async.profiler",
            "duration_us": us(prof.stopped_at),
            "executions": len(prof.executions),
            "batches": len(prof.batches),
            "overlap": overlap(prof.executions),
        },
    }


def _number(v) -> bool:
    """A finite JSON number (an int too large for a float is not: 10**400 µs)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return math.isfinite(v) if isinstance(v, float) else abs(v) < 2 ** 63


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_trace(trace) -> list[str]:
    """Problems of ``trace`` (a dict or list) as trace-event JSON; empty when valid.

    Checked: the events are a list of objects (and ``otherData``, where present, is an
    object whose ``overlap`` is a fraction); every event has ``ph``, ``ts`` (a finite
    number), ``pid`` and ``tid`` (integers), and a ``cat``, where present, is a string (the
    format's comma-separated categories); a complete event has a string ``name`` and a
    finite ``dur`` >= 0, a ``process_name`` / ``thread_name`` metadata event an object
    ``args`` whose ``name`` is a string; each flow id (a string or an integer) has one
    ``s`` and one ``f``, the ``f`` not before the ``s``, and each end bound to a complete
    event of its thread that encloses its time. An event with a problem is left out of
    the later checks.
    """
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        return ["the trace is neither a list of events nor an object whose traceEvents is one"]
    problems = []
    other = trace.get("otherData", {}) if isinstance(trace, dict) else {}
    if not isinstance(other, dict):
        problems.append(f"otherData must be an object; got {other!r}")
    elif "overlap" in other and not (_number(other["overlap"]) and 0 <= other["overlap"] <= 1):
        problems.append(f"otherData.overlap must be a fraction in [0, 1]; got "
                        f"{other['overlap']!r}")
    slices: dict = {}
    flows: dict = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            problems.append(f"event {i} is a {type(e).__name__}, not an object")
            continue
        missing = [key for key in ("ph", "ts", "pid", "tid") if key not in e]
        if missing:
            problems.append(f"event {i} ({e.get('name')!r}) has no {', '.join(missing)}")
            continue
        if not (_number(e["ts"]) and _integer(e["pid"]) and _integer(e["tid"])):
            problems.append(f"event {i}: ts must be a finite number, pid and tid integers; "
                            f"got {e['ts']!r}, {e['pid']!r}, {e['tid']!r}")
            continue
        if "cat" in e and not isinstance(e["cat"], str):
            problems.append(f"event {i} ({e.get('name')!r}): cat must be a string of "
                            f"comma-separated categories; got {e['cat']!r}")
            continue
        ph = e["ph"]
        if ph == "X":
            if not isinstance(e.get("name"), str) or not _number(e.get("dur")) or e["dur"] < 0:
                problems.append(f"event {i} ({e.get('name')!r}): a complete event needs a "
                                f"name (a string) and a finite dur >= 0; dur {e.get('dur')!r}")
            else:
                slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "f"):
            fid = e.get("id")
            if not (isinstance(fid, str) or _integer(fid)):
                problems.append(f"event {i}: a flow event's id must be a string or an "
                                f"integer; got {fid!r}")
                continue
            flows.setdefault(fid, {}).setdefault(ph, []).append(e)
        elif ph == "M":
            args = e.get("args")
            if e.get("name") in ("process_name", "thread_name") and not (
                    isinstance(args, dict) and isinstance(args.get("name"), str)):
                problems.append(f"event {i}: a {e['name']} event's args must be an object "
                                f"with a string name; got {args!r}")
        elif ph not in ("B", "E", "i", "I", "C", "b", "e", "n", "t"):
            problems.append(f"event {i}: unknown phase {ph!r}")
    for fid, ends in flows.items():
        if len(ends.get("s", ())) != 1 or len(ends.get("f", ())) != 1:
            problems.append(f"flow {fid}: {len(ends.get('s', ()))} starts and "
                            f"{len(ends.get('f', ()))} ends; need one each")
            continue
        s, f = ends["s"][0], ends["f"][0]
        if f["ts"] < s["ts"]:
            problems.append(f"flow {fid}: ends at {f['ts']} before it starts at {s['ts']}")
        for end in (s, f):
            spans = slices.get((end["pid"], end["tid"]), ())
            # times are written to the ns (3 decimals of µs): allow that rounding
            if not any(a - 1e-3 <= end["ts"] <= b + 1e-3 for a, b in spans):
                problems.append(f"flow {fid}: its {end['ph']!r} at {end['ts']} µs is inside no "
                                f"slice of pid {end['pid']} tid {end['tid']}")
    return problems
