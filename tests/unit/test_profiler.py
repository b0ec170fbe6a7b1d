"""hipdnn_async.profiler on the CPU device: what a profile records, the trace it exports,
its table and overlap figures, and that nothing is recorded without one."""
from __future__ import annotations

import errno
import json
import os
import re
import statistics
import time

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.profiler import _state, check_trace, draw_timeline
from hipdnn_async.profiler._stats import busy_overlap


def _conv_graph(name="conv", n=4, c=8, k=8, hw=16, r=3):
    g = hd.Graph(name=name)
    x = g.tensor(name="x", dims=(n, c, hw, hw), data_type=hd.DataType.FLOAT)
    w = g.tensor(name="w", dims=(k, c, r, r), data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(x, w, padding=r // 2)
    y.set_output(True)
    y.set_name("y")
    return g, x, w, y


def _pack(x, w, y, rng):
    return {x: rng.standard_normal(x.dims).astype(np.float32),
            w: rng.standard_normal(w.dims).astype(np.float32),
            y: np.empty(y.dims, np.float32)}


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ------------------------------------------------------------------ nothing when closed

def test_nothing_is_recorded_without_an_open_profile(monkeypatch, rng):
    """With no profile open the hooks read the flag and call nothing of the profiler."""
    def called(*a, **k):
        raise AssertionError("a profiler hook ran with no profile open")
    for name in ("recorder", "batch_begin", "built", "span"):
        monkeypatch.setattr(_state, name, called)
    assert _state.ON is False
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        vp = _pack(x, w, y, rng)
        plan.execute_sync(vp)
        plan.submit(vp).result()
        with dev.capture() as step:
            plan.submit(vp)
        step.replay_sync()
        step.submit().result()
        step.close()
    monkeypatch.undo()
    # a profile opened after the work has nothing of it
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        plan.execute_sync(_pack(x, w, y, rng))
        with dev.profile() as prof:
            pass
    assert prof.executions == [] and prof.batches == [] and prof.spans == []
    assert _state.ON is False


# ------------------------------------------------------------------ order and nesting

def test_events_are_ordered_per_stream_and_nest_inside_the_profile(rng):
    g, x, w, y = _conv_graph(hw=8)
    with hd.Device("cpu", streams=2) as dev:
        with dev.profile() as prof:
            plan = dev.build_sync(g)
            vp = [_pack(x, w, y, rng) for _ in range(12)]
            handles = [plan.submit(vp[i], stream=i % 2) for i in range(12)]
            for h in handles:
                h.result()
    assert len(prof.executions) == 12
    by_stream = {}
    for r in prof.executions:                     # submission order
        assert r.ok and r.facts["pattern"] == "CONV_FPROP"
        assert prof.started_at <= r.submitted <= r.started <= r.ended <= prof.stopped_at
        by_stream.setdefault(r.stream, []).append(r)
    assert sorted(by_stream) == ["cpu:s0", "cpu:s1"]
    for rs in by_stream.values():
        for a, b in zip(rs, rs[1:]):              # in order, one at a time
            assert a.ended <= b.started
    trace = prof.trace()
    duration = trace["otherData"]["duration_us"]
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert slices and all(0 <= e["ts"] and e["ts"] + e["dur"] <= duration + 1e-3
                          for e in slices)
    (build,) = [e for e in slices if e["cat"] == "builds"]
    assert build["name"] == "build CONV_FPROP 'conv'"
    assert build["args"]["engine"] == plan.engine.name and build["args"]["benchmarked"] is False
    assert build["dur"] / 1e3 <= plan.build_ms + 1.0


def test_a_benchmarked_build_lists_its_trials(rng):
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=1, perfdb=":memory:") as dev:
        with dev.profile() as prof:
            plan = dev.build_sync(g, knobs={"global.benchmarking": 1})
    (span,) = prof.spans
    assert span.args["benchmarked"] is True
    assert span.args["trials_ms"] == dict(plan.algorithm.trials) and span.args["trials_ms"]
    assert str(plan.algorithm) in span.args["trials_ms"]


def test_durations_agree_with_an_independent_timer(rng):
    """One execution at a time on an idle stream: the recorded duration lies within the
    wall time of ``execute_sync`` around it, and close to it (the rest is the submit and
    the hand-off to the worker and back)."""
    g, x, w, y = _conv_graph(n=4, c=16, k=16, hw=32)
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        vp = _pack(x, w, y, rng)
        plan.execute_sync(vp)                     # warm
        walls = []
        with dev.profile() as prof:
            for _ in range(7):
                t0 = time.perf_counter()
                plan.execute_sync(vp)
                walls.append(time.perf_counter() - t0)
    durations = [r.duration for r in prof.executions]
    assert len(durations) == 7
    for d, wall in zip(durations, walls):
        assert 0 < d <= wall
    med_d, med_w = statistics.median(durations), statistics.median(walls)
    assert med_w - med_d <= 0.25 * med_w + 2e-3, (durations, walls)


# ------------------------------------------------------------------ overlap

def test_busy_overlap_of_hand_made_intervals():
    # lanes A [0, 2] and [4, 5], B [1, 3]: both busy [1, 2] = 1 s of 5 s
    both, wall = busy_overlap({"A": [(0.0, 2.0), (4.0, 5.0)], "B": [(1.0, 3.0)]})
    assert both == pytest.approx(1.0) and wall == pytest.approx(5.0)
    # one lane's own overlapping intervals are one busy stretch, not two streams
    assert busy_overlap({"A": [(0.0, 2.0), (1.0, 3.0)]}) == (0.0, 3.0)
    assert busy_overlap({}) == (0.0, 0.0)


def _union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def test_the_table_footer_gives_the_overlap_as_a_share_of_wall_time(rng):
    """The footer said "streams overlap X% of the busy time" for the figure overlap() and
    profiling.md define over wall time. Known times on two streams: A [0, 2] and [4, 5] ms,
    B [1, 3] ms; busy at all 4 ms of 5, both 1 ms: 20 % of wall time (25 % of busy)."""
    g, x, w, y = _conv_graph()
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g, engine="CPU_ENGINE")
        with dev.profile() as prof:
            for i in range(3):
                plan.submit(_pack(x, w, y, rng), stream=i % 2).result()
    for r, (stream, a, b) in zip(prof.executions, [(0, 0.0, 2.0), (1, 1.0, 3.0),
                                                   (0, 4.0, 5.0)]):
        r.stream, r.started, r.ended = stream, 10.0 + a / 1e3, 10.0 + b / 1e3
    # independently: sample the 5 ms on a fine grid, count instants with both streams busy
    ts = np.linspace(10.0, 10.005, 500_001)
    busy = [np.zeros_like(ts, bool), np.zeros_like(ts, bool)]
    for r in prof.executions:
        busy[r.stream] |= (ts >= r.started) & (ts <= r.ended)
    share = float(np.mean(busy[0] & busy[1]))
    assert share == pytest.approx(0.2, abs=1e-4)
    footer = prof.table().splitlines()[-1]
    m = re.search(r"two or more streams busy ([\d.]+)% of the wall time", footer)
    assert m and float(m.group(1)) == pytest.approx(100 * share, abs=0.05), footer
    assert "busy time" not in footer


@pytest.mark.parametrize("streams", [1, 2])
def test_overlap_is_the_share_of_wall_time_two_streams_execute(rng, streams):
    # the NumPy engine (no process-wide gate: the test below); the figure against the
    # recorded intervals, computed here another way: the intersection of the two
    # streams' busy unions over the wall time
    g, x, w, y = _conv_graph(n=4, c=16, k=16, hw=24)
    with hd.Device("cpu", streams=streams) as dev:
        plan = dev.build_sync(g, engine="CPU_ENGINE")
        vp = [_pack(x, w, y, rng) for _ in range(8)]
        with dev.profile() as prof:
            handles = [plan.submit(vp[i], stream=i % streams) for i in range(8)]
            for h in handles:
                h.result()
    lanes = {}
    for r in prof.executions:
        lanes.setdefault(r.stream, []).append((r.started, r.ended))
    assert len(lanes) == streams
    wall = max(r.ended for r in prof.executions) - min(r.started for r in prof.executions)
    if streams == 1:
        assert prof.overlap() == 0.0
    else:
        u0, u1 = (_union(v) for v in lanes.values())
        both = sum(max(0.0, min(b, d) - max(a, c)) for a, b in u0 for c, d in u1)
        assert prof.overlap() == pytest.approx(both / wall, abs=1e-9)
    assert prof.trace()["otherData"]["overlap"] == prof.overlap()


def test_onednn_programs_on_two_streams_are_not_shown_overlapping(rng):
    """oneDNN programs run one at a time (the process-wide gate: each takes every core);
    a stream's execution waiting for the gate is queue wait, not execution, so two
    streams of oneDNN convolutions overlap only by the bookkeeping around each program
    (the time between the gate's release and the finish timestamp), not the ~80 % that
    counting the wait as execution showed."""
    if "ONEDNN_ENGINE" not in [e.name for e in hd.engines(_conv_graph()[0], "cpu")]:
        pytest.skip("oneDNN does not load here: the NumPy engine has no gate")
    g, x, w, y = _conv_graph(n=8, c=32, k=32, hw=56)
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE")
        vp = [_pack(x, w, y, rng) for _ in range(8)]
        plan.execute_sync(vp[0])
        with dev.profile() as prof:
            handles = [plan.submit(vp[i], stream=i % 2) for i in range(8)]
            for h in handles:
                h.result()
    assert {r.stream for r in prof.executions} == {"cpu:s0", "cpu:s1"}
    assert prof.overlap() < 0.3


# ------------------------------------------------------------------ trace format, table

def test_trace_is_valid_trace_event_json(tmp_path, rng):
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=2) as dev:
        with hd.profile(dev) as prof:
            plan = dev.build_sync(g)
            for i in range(4):
                plan.execute_sync(_pack(x, w, y, rng), stream=i % 2)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    assert check_trace(trace) == []
    for e in trace["traceEvents"]:
        assert {"ph", "ts", "pid", "tid"} <= set(e)
        assert e.get("dur", 0) >= 0
    names = {(e["name"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    assert ("process_name", "device cpu") in names
    assert {("thread_name", "stream cpu:s0"), ("thread_name", "stream cpu:s1")} <= names


def test_check_trace_finds_what_is_wrong():
    good = {"ph": "X", "name": "a", "ts": 0, "dur": 5, "pid": 1, "tid": 1}
    assert check_trace([good]) == []
    assert check_trace([{**good, "cat": "execution,cpu"}]) == []    # the format's categories
    assert check_trace([{**good, "dur": -1}])                     # negative duration
    assert check_trace([{k: v for k, v in good.items() if k != "tid"}])
    start = {"ph": "s", "id": 7, "name": "f", "ts": 1, "pid": 1, "tid": 1}
    end = {"ph": "f", "bp": "e", "id": 7, "name": "f", "ts": 2, "pid": 1, "tid": 1}
    assert check_trace([good, start, end]) == []
    assert check_trace([good, start])                             # unpaired
    assert check_trace([good, start, {**end, "ts": 9}])           # end outside any slice
    assert check_trace([good, {**start, "ts": 3}, end])           # ends before it starts
    # malformed input is a list of problems, never an exception
    for bad in ([{**good, "ts": "a"}], [{**start, "id": [1]}, end], [1, 2],
                [{**good, "dur": float("nan")}], [{**good, "ts": float("inf")}],
                [{**good, "pid": True}], {"traceEvents": 5}, "text",
                {"traceEvents": [good], "otherData": 5}, [{**good, "ts": 10 ** 400}],
                [{**good, "name": {"a": 1}}],
                # a category list / object: the timeline's drawing looked it up (TypeError)
                [{**good, "cat": []}], [{**good, "cat": {"a": 1}}],
                [good, {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0,
                        "args": "x"}],
                [good, {"ph": "M", "name": "process_name", "pid": 1, "tid": 1, "ts": 0}],
                {"traceEvents": [good], "otherData": {"overlap": float("nan")}},
                {"traceEvents": [good], "otherData": {"overlap": "50%"}}):
        problems = check_trace(bad)
        assert problems and all(isinstance(p, str) for p in problems), bad


def test_table_and_key_averages_count_flops_and_bytes(rng):
    n, c, k, hw, r = 2, 4, 6, 10, 3
    g, x, w, y = _conv_graph(n=n, c=c, k=k, hw=hw, r=r)
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        with dev.profile() as prof:
            for _ in range(3):
                plan.execute_sync(_pack(x, w, y, rng))
    # 2·N·K·P·Q·C·R·S (padding keeps P = Q = hw); bytes: x, w, y float32 once each
    flops = 2 * n * k * hw * hw * c * r * r
    nbytes = 4 * (n * c * hw * hw + k * c * r * r + n * k * hw * hw)
    assert prof.executions[0].facts["flops"] == flops
    assert prof.executions[0].facts["bytes"] == nbytes
    (row,) = prof.key_averages("pattern")
    total_s = sum(e.duration for e in prof.executions)
    assert row["key"] == "CONV_FPROP" and row["count"] == 3
    assert row["total_ms"] == pytest.approx(total_s * 1e3)
    assert row["gflops"] == pytest.approx(3 * flops / total_s / 1e9)
    assert row["gbps"] == pytest.approx(3 * nbytes / total_s / 1e9)
    ms = sorted(e.duration * 1e3 for e in prof.executions)
    assert row["p50_ms"] == pytest.approx(ms[1])
    text = prof.table()
    assert "conv" in text and "CONV_FPROP" in text and "3 executions" in text
    with pytest.raises(hd.DeviceError, match=r"profile.key_averages: group_by='colour'"):
        prof.key_averages("colour")
    with pytest.raises(hd.DeviceError, match=r"profile.table: group_by='bogus'"):
        prof.table("bogus")
    with pytest.raises(hd.DeviceError, match=r"profile.table: group_by=''"):
        prof.table("")
    with pytest.raises(hd.DeviceError, match="row_limit must be an int >= 1; got 'x'"):
        prof.table(row_limit="x")


def test_profile_misuse_is_a_clear_error():
    with pytest.raises(hd.DeviceError, match="expected Device"):
        hd.profile("cpu")
    prof = hd.profile()
    with pytest.raises(hd.DeviceError, match="leave its `with` block"):
        prof.table()
    with prof:
        with pytest.raises(hd.DeviceError, match="leave its `with` block"):
            prof.trace()
    with pytest.raises(hd.DeviceError, match="records once"):
        prof.start()


def test_a_profile_records_only_its_devices(rng):
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=1) as a, hd.Device("cpu", streams=1) as b:
        pa, pb = a.build_sync(g), b.build_sync(g)
        with a.profile() as only_a, hd.profile(a, b) as both, hd.profile() as every:
            pa.execute_sync(_pack(x, w, y, rng))
            pb.execute_sync(_pack(x, w, y, rng))
    assert [r.device for r in only_a.executions] == [a]
    assert [r.device for r in both.executions] == [a, b]
    assert [r.device for r in every.executions] == [a, b]
    procs = sorted(e["args"]["name"] for e in both.trace()["traceEvents"]
                   if e["ph"] == "M" and e["name"] == "process_name")
    assert procs == ["device cpu", "device cpu (2)"]


def test_capture_and_replays_are_recorded(rng):
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        vp = _pack(x, w, y, rng)
        with dev.profile() as prof:
            with dev.capture() as step:
                plan.submit(vp)
                plan.submit(vp)
            step.replay_sync()
            step.submit().result()
            step.close()
    kinds = [(r.kind, r.facts["name"]) for r in prof.executions]
    assert kinds == [("capture", "capture (2 executions)"),
                     ("replay", "replay (2 executions)"), ("replay", "replay (2 executions)")]
    replay = prof.executions[1]
    assert replay.facts["flops"] == 2 * (2 * 4 * 8 * 6 * 6 * 8 * 3 * 3)   # two convs
    assert prof.executions[0].facts["flops"] == 0                         # the capture
    assert replay.facts["plans"] == ["conv", "conv"]


def test_export_to_an_unwritable_place_is_a_device_error(tmp_path, rng):
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        with dev.profile() as prof:
            plan.execute_sync(_pack(x, w, y, rng))
    for bad in (tmp_path / "missing" / "t.json", tmp_path):
        with pytest.raises(hd.DeviceError, match="export_chrome_trace: cannot write") as e:
            prof.export_chrome_trace(bad)
        assert isinstance(e.value.__cause__, OSError)
    with pytest.raises(hd.DeviceError, match="path must be a str"):
        prof.export_chrome_trace(3.5)
    assert list(tmp_path.iterdir()) == []


def test_a_recaptured_steps_replays_name_the_plans_it_holds_now(rng):
    small, xs, ws, ys = _conv_graph(name="small_conv", c=4, k=4, hw=6)
    big, xb, wb, yb = _conv_graph(name="big_conv", c=8, k=8, hw=6)
    with hd.Device("cpu", streams=1) as dev:
        plan_s, plan_b = dev.build_sync(small), dev.build_sync(big)
        with dev.capture() as step:
            plan_s.submit(_pack(xs, ws, ys, rng))
        with dev.profile() as prof:
            step.replay_sync()
            with step.recapture():
                plan_b.submit(_pack(xb, wb, yb, rng))
            step.replay_sync()
    replays = [r.facts for r in prof.executions if r.kind == "replay"]
    assert [f["plans"] for f in replays] == [["small_conv"], ["big_conv"]]
    assert replays[1]["flops"] == 2 * 4 * 8 * 6 * 6 * 8 * 3 * 3


def test_a_process_profile_inside_a_device_profile_exports(tmp_path, rng):
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        with dev.profile() as outer:
            with hd.profile() as inner:          # every device: the same executions
                plan.execute_sync(_pack(x, w, y, rng))
    for prof, name in ((outer, "outer"), (inner, "inner")):
        prof.export_chrome_trace(tmp_path / f"{name}.json")
        assert check_trace(json.loads((tmp_path / f"{name}.json").read_text())) == []
        assert "1 executions" in prof.table()


# ------------------------------------------------------------------ picture

def test_timeline_png_is_written_with_a_lane_per_stream(tmp_path, rng):
    from hipdnn_async.profiler._timeline import lanes_of
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g)
        with dev.profile() as prof:
            for i in range(4):
                plan.execute_sync(_pack(x, w, y, rng), stream=i % 2)
    trace = prof.trace()
    labels, _ = lanes_of(trace)
    assert labels == ["device cpu  stream cpu:s0", "device cpu  stream cpu:s1"]
    png = tmp_path / "timeline.png"
    draw_timeline(trace, png)
    head = png.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_timeline_draws_dollar_signs_in_names_as_text(tmp_path):
    """A plan or lane named with ``$`` started matplotlib's mathtext: ``a$^$b`` failed to
    draw (reported as a write error), ``x$y$`` drew as math (break-it round 2)."""
    pytest.importorskip("matplotlib", reason="the profile extra draws timelines")
    from hipdnn_async.profiler._timeline import _literal
    assert _literal("a$^$b") == r"a\$^\$b" and _literal("plain") == "plain"
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0,
               "args": {"name": "lane $x$"}},
              {"ph": "X", "name": "a$^$b", "cat": "execution", "ts": 0, "dur": 5, "pid": 1,
               "tid": 1}]
    assert check_trace(events) == []
    png = tmp_path / "dollars.png"
    draw_timeline({"traceEvents": events}, png, title="fee $\\euro$")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ command line

def test_trace_command_checks_and_draws(tmp_path, rng, capsys):
    from hipdnn_async.cli import main
    g, x, w, y = _conv_graph(hw=6)
    with hd.Device("cpu", streams=2) as dev:
        plan = dev.build_sync(g)
        with dev.profile() as prof:
            for i in range(3):
                plan.execute_sync(_pack(x, w, y, rng), stream=i % 2)
    good = tmp_path / "trace.json"
    prof.export_chrome_trace(good)
    png = tmp_path / "timeline.png"
    assert main(["trace", str(good), "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "3 slices" in capsys.readouterr().out          # the 3 executions
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 0, "dur": -2, "pid": 1,
                                "tid": 1}]))
    assert main(["trace", str(bad)]) == 1
    assert "dur >= 0" in capsys.readouterr().err
    # a rejected trace is reported, not drawn (an event without pid/tid crashed the drawing)
    nopid = tmp_path / "nopid.json"
    nopid.write_text(json.dumps({"traceEvents": [{"ph": "X", "ts": 1}]}))
    assert main(["trace", str(nopid), "--png", str(tmp_path / "nopid.png")]) == 1
    err = capsys.readouterr().err
    assert "pid" in err and "not drawn" in err and not (tmp_path / "nopid.png").exists()
    (tmp_path / "not.json").write_text("{")
    assert main(["trace", str(tmp_path / "not.json")]) == 1
    assert "cannot read a JSON trace" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:                          # checked before the work
        main(["trace", str(bad), "--png", str(tmp_path / "missing" / "t.png")])
    assert e.value.code == 2 and "does not exist" in capsys.readouterr().err
    (tmp_path / "deep.json").write_text("[" * 100000)             # nested past the stack
    assert main(["trace", str(tmp_path / "deep.json")]) == 1
    assert "RecursionError" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"traceEvents": [], "otherData": 5}))
    assert main(["trace", str(tmp_path / "other.json"), "--png",
                 str(tmp_path / "other.png")]) == 1
    assert "otherData" in capsys.readouterr().err and not (tmp_path / "other.png").exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_trace_png_to_a_full_disk_is_an_error(tmp_path, capsys):
    # matplotlib's savefig to a file name returned without error when /dev/full refused
    # the bytes; the command said "timeline written" and exited 0
    pytest.importorskip("matplotlib")
    from hipdnn_async.cli import main
    good = tmp_path / "trace.json"
    good.write_text(json.dumps([{"ph": "X", "name": "a", "ts": 0, "dur": 2, "pid": 1,
                                 "tid": 1}]))
    assert main(["trace", str(good), "--png", "/dev/full"]) == 1
    out, err = capsys.readouterr()
    assert "No space left" in err and "written" not in out
    with pytest.raises(OSError) as e:
        draw_timeline(json.loads(good.read_text()), "/dev/full")
    assert e.value.errno == errno.ENOSPC
    # an unknown suffix: a ValueError naming the format, and no file left behind
    assert main(["trace", str(good), "--png", str(tmp_path / "t.foo")]) == 1
    assert "'foo' is not supported" in capsys.readouterr().err
    assert not (tmp_path / "t.foo").exists()
    assert main(["trace", str(good), "--png", str(tmp_path / "t.svg")]) == 0
    assert (tmp_path / "t.svg").read_text().lstrip().startswith("<?xml")


def test_bench_overlap_command_writes_trace_picture_and_figure(tmp_path, capsys):
    from hipdnn_async.cli import main
    assert main(["bench", "overlap", "--streams", "2", "--executions", "4",
                 "--out", str(tmp_path)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["streams"] == 2 and figures["overlap_one_stream"] == 0.0
    assert 0.0 <= figures["overlap"] <= 1.0
    trace = json.loads((tmp_path / "overlap_trace.json").read_text())
    assert check_trace(trace) == [] and trace["otherData"]["overlap"] == figures["overlap"]
    assert (tmp_path / "overlap_timeline.png").read_bytes()[:4] == b"\x89PNG"
