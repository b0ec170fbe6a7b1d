"""The timeline picture of a trace: one lane per stream, batcher and build track."""
from __future__ import annotations

import re

from .._figure import save_figure

__all__ = ["draw_timeline", "lanes_of"]

_LANE_COPY = re.compile(r" #\d+$")
# lanes whose slices are drawn in one colour: requests, batches, builds
_PLAIN = {"request": "#9e9e9e", "batch": "#5c6bc0", "builds": "#8d6e63", "flow": "#424242"}


def lanes_of(trace: dict) -> tuple[list, dict]:
    """(lane labels top to bottom, {(pid, tid): lane index}) of a trace's complete events;
    the extra lanes of one track (``requests #2`` ...) share the track's lane."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    used = sorted({(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"})
    labels, index = [], {}
    for pid, tid in used:
        track = _LANE_COPY.sub("", threads.get((pid, tid), f"tid {tid}"))
        label = f"{procs.get(pid, f'pid {pid}')}  {track}"
        if label not in labels:
            labels.append(label)
        index[(pid, tid)] = labels.index(label)
    return labels, index


def _literal(text) -> str:
    """``text`` as matplotlib draws it literally: a ``$`` would start mathtext (a plan or
    thread named ``a$^$b`` failed to draw, ``x$y$`` drew as math)."""
    return str(text).replace("$", r"\$")


def draw_timeline(trace: dict, path, *, title: str | None = None, flows: bool = True) -> None:
    """Draw ``trace`` (trace-event JSON as a dict) to ``path`` (PNG, SVG, PDF: by suffix).

    Each lane is one stream, batcher track or build track, labelled ``<process>
    <track>``; executions are coloured by plan name (legend: the ten with the most time),
    requests grey, batches blue; flow arrows (request -> batch -> execution) are thin
    lines. Time in ms from the profile's start.

    Raises
    ------
    ImportError
        matplotlib is not installed.
    OSError
        ``path`` cannot be written (a full disk included).
    ValueError
        Its suffix names a format matplotlib cannot write.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    labels, index = lanes_of(events)
    slices = [e for e in events if e.get("ph") == "X"]
    totals: dict = {}
    for e in slices:
        if e.get("cat") in ("execution", "replay", "capture"):
            totals[e["name"]] = totals.get(e["name"], 0.0) + e["dur"]
    named = sorted(totals, key=lambda k: -totals[k])
    cmap = plt.get_cmap("tab10")
    colour = {name: cmap(i % 10) for i, name in enumerate(named)}
    n = max(1, len(labels))
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.45 * n))
    for e in slices:
        y = index[(e["pid"], e["tid"])]
        cat = e.get("cat", "")
        c = colour.get(e["name"]) or _PLAIN.get(cat) or "#78909c"
        alpha = 0.35 if cat == "request" else 0.9
        ax.barh(y, max(e["dur"], 0.0) / 1e3, left=e["ts"] / 1e3, height=0.7, color=c,
                alpha=alpha, edgecolor="white", linewidth=0.4)
    if flows:
        starts = {}
        for e in events:
            if e.get("ph") == "s":
                starts[e["id"]] = e
        for e in events:
            s = starts.get(e.get("id")) if e.get("ph") == "f" else None
            if s is not None:
                ax.plot([s["ts"] / 1e3, e["ts"] / 1e3],
                        [index.get((s["pid"], s["tid"]), 0), index.get((e["pid"], e["tid"]), 0)],
                        color=_PLAIN["flow"], linewidth=0.4, alpha=0.35)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels([_literal(t) for t in labels], fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("time since the profile started (ms)")
    ax.grid(axis="x", alpha=0.3)
    if named:
        from matplotlib.patches import Patch
        ax.legend(handles=[Patch(color=colour[k], label=_literal(k)) for k in named[:10]],
                  loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False,
                  title="executions", title_fontsize=8)
    other = trace.get("otherData", {}) if isinstance(trace, dict) else {}
    if title is None:
        title = (f"{other.get('executions', len(slices))} executions, "
                 f"{other.get('batches', 0)} batches; two or more streams busy "
                 f"{other.get('overlap', 0.0):.0%} of the time")
    ax.set_title(_literal(title), fontsize=10)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
