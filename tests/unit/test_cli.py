"""The hipdnn-async command line: info, perfdb show/clear/export/import, errors."""
import json
import re
import subprocess
import sys

import pytest

import hipdnn_async as hd
from hipdnn_async import _log, _perfdb
from hipdnn_async.cli import main


def seeded_db(path):
    db = hd.PerfDb(str(path))
    for i in range(3):
        db.store(_perfdb.PerfKey("cpu", "CPU_ENGINE", "v1", "cpu x86", f"problem {i}", 1 << i),
                 _perfdb.PerfRecord(f"algo{i}", 0.5 + i, 1 << i, 1000.0 + i))
    return db


def test_perfdb_export_import_round_trip(tmp_path, capsys):
    src = seeded_db(tmp_path / "a.sqlite3")
    out = tmp_path / "dump.json"
    assert main(["perfdb", "export", str(out), "--db", str(src.path)]) == 0
    rows = json.loads(out.read_text())
    rows = rows["entries"] if isinstance(rows, dict) else rows
    assert len(rows) == 3
    dst_path = tmp_path / "b.sqlite3"
    assert main(["perfdb", "import", str(out), "--db", str(dst_path)]) == 0
    dst = hd.PerfDb(str(dst_path))
    key = _perfdb.PerfKey("cpu", "CPU_ENGINE", "v1", "cpu x86", "problem 2", 4)
    assert dst.lookup(key).algorithm == "algo2" and dst.lookup(key).time_ms == 2.5
    assert main(["perfdb", "show", "--db", str(dst_path)]) == 0
    assert "algo1" in capsys.readouterr().out
    assert main(["perfdb", "clear", "--db", str(dst_path)]) == 0
    assert hd.PerfDb(str(dst_path)).entries() == []


def test_import_of_malformed_file_fails_cleanly(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"provider": "cpu"}]))
    rc = main(["perfdb", "import", str(bad), "--db", str(tmp_path / "c.sqlite3")])
    assert rc == 2
    assert "bad.json" in capsys.readouterr().err


def test_info_and_module_entry_point(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hipdnn_async", "info"], check=True,
                         capture_output=True, text=True).stdout
    info = json.loads(out)
    assert info["version"] == hd.__version__ and info["devices"][0] == "cpu"


def test_read_only_commands_never_create_or_replace_files(tmp_path, capsys):
    export = tmp_path / "export.json"
    export.write_text('{"entries": []}')
    assert main(["perfdb", "show", "--db", str(export)]) == 0
    assert export.read_text() == '{"entries": []}'          # untouched, not moved aside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json"]
    assert "not usable as a perf db" in capsys.readouterr().err
    missing = tmp_path / "no" / "dir" / "perf.sqlite3"
    assert main(["info", "--perfdb", str(missing)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["perfdb_exists"] is False and info["perfdb_entries"] == 0
    assert main(["perfdb", "show", "--db", str(missing)]) == 0
    assert main(["perfdb", "export", str(tmp_path / "out.json"), "--db", str(missing)]) == 1
    assert not (tmp_path / "no").exists() and not (tmp_path / "out.json").exists()


def test_exporting_a_file_that_is_not_a_perf_db_fails_and_writes_nothing(tmp_path, capsys):
    """It exported the empty in-memory stand-in and exited 0: a script took an empty
    export for the db's contents (break-it round)."""
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    out = tmp_path / "out.json"
    assert main(["perfdb", "export", str(out), "--db", str(notes)]) == 1
    err = capsys.readouterr().err
    assert "nothing read from" in err and str(notes) in err
    assert not out.exists() and notes.read_text() == "hello\n"


def test_env_path_that_is_not_a_perf_db_is_left_untouched(tmp_path, monkeypatch, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", str(notes))
    _perfdb.reset_default_perfdb()
    try:
        assert main(["perfdb", "show"]) == 0
        assert main(["perfdb", "clear"]) == 1          # refuses: nothing to clear there
    finally:
        _perfdb.reset_default_perfdb()
    assert notes.read_text() == "hello\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_export_refuses_to_overwrite_a_sqlite_file(tmp_path, capsys):
    src = seeded_db(tmp_path / "a.sqlite3")
    before = (tmp_path / "a.sqlite3").read_bytes()[:16]
    assert main(["perfdb", "export", str(src.path), "--db", str(src.path)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "a.sqlite3").read_bytes()[:16] == before
    assert len(hd.PerfDb(str(src.path)).entries()) == 3


def test_memory_db_name_is_not_a_file(tmp_path, capsys, monkeypatch):
    """`--db :memory:` is SQLite's private in-memory db, not a file ':memory:' in the
    current directory (show/export used to say 'no such file /cwd/:memory:')."""
    monkeypatch.chdir(tmp_path)
    assert main(["perfdb", "show", "--db", ":memory:"]) == 0
    assert "perf db :memory:: 0 entries" in capsys.readouterr().out
    out = tmp_path / "e.json"
    assert main(["perfdb", "export", str(out), "--db", ":memory:"]) == 0
    assert json.loads(out.read_text())["entries"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.json"]


def test_show_or_clear_with_a_file_argument_is_refused_not_run_on_the_default(tmp_path, capsys,
                                                                            monkeypatch):
    """`perfdb clear other.sqlite3` used to clear the *default* db (the FILE was ignored)."""
    default = seeded_db(tmp_path / "default.sqlite3")
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", default.path)
    _perfdb.reset_default_perfdb()
    other = tmp_path / "other.sqlite3"
    for action in ("show", "clear"):
        try:
            rc = main(["perfdb", action, str(other)])
        except SystemExit as exc:
            rc = exc.code
        assert rc == 2 and "takes no FILE" in capsys.readouterr().err
    assert len(hd.PerfDb(default.path).entries()) == 3 and not other.exists()
    _perfdb.reset_default_perfdb()


def test_info_of_a_refused_relative_env_db_says_it_does_not_exist(tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel.db").write_bytes(b"")          # even with a file of that name in cwd
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", "rel.db")
    _perfdb.reset_default_perfdb()
    _log._warned_env.discard(("HIPDNN_ASYNC_PERFDB", "rel.db"))
    with pytest.warns(RuntimeWarning, match="HIPDNN_ASYNC_PERFDB='rel.db' is not an absolute"):
        assert main(["info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["perfdb"] == "rel.db" and info["perfdb_in_memory"] is True
    assert info["perfdb_exists"] is False
    assert (tmp_path / "rel.db").read_bytes() == b""
    _perfdb.reset_default_perfdb()


def test_bench_json_in_a_missing_folder_is_a_usage_error_before_benchmarking(tmp_path, capsys,
                                                                              monkeypatch):
    """Widen the search (issue 10): `bench --json /no/such/dir/x.json` benchmarked for
    minutes, then died with a FileNotFoundError traceback."""
    from hipdnn_async import _bench
    monkeypatch.setattr(_bench, "run", lambda *a: pytest.fail("benchmarked before the check"))
    for path, why in ((tmp_path / "no" / "x.json", "does not exist"), (tmp_path, "directory")):
        try:
            rc = main(["bench", "--quick", "--json", str(path)])
        except SystemExit as exc:
            rc = exc.code
        assert rc == 2 and why in capsys.readouterr().err


def test_bench_ratios_take_every_engines_algorithms_and_leave_no_file(tmp_path, monkeypatch):
    """`bench` once took "best" over the NumPy engine's algorithms alone while the
    heuristic and benchmarked plans ran on oneDNN, so h/best and b/best came out below 1,
    and it left its perf db in /tmp (found by a break-it helper). Now every engine's
    algorithms are timed by benchmarking, the ratios are those times over the fastest
    (so at least 1), and the perf db goes with its temporary folder."""
    import tempfile
    from hipdnn_async import _bench
    from hipdnn_async.runtime import load_onednn
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rows = _bench.run(("fprop", "wgrad"), [("tiny", (1, 8, 10, 10), (8, 8, 3, 3), 1, 1)], 1)
    assert [r["direction"] for r in rows] == ["fprop", "wgrad"]
    for r in rows:
        names = set(r["algorithms_ms"])
        assert "direct" in names, names                       # CPU_ENGINE's
        if load_onednn().ok:
            assert any(":" in n for n in names), names        # oneDNN's implementations
        best = min(r["algorithms_ms"].values())
        for who in ("heuristic", "benchmarked"):
            assert r[who] in names, (who, r[who], names)
            assert r[f"{who}_over_best"] == r["algorithms_ms"][r[who]] / best >= 1.0
            assert r[f"{who}_ms"] > 0
    assert list(tmp_path.iterdir()) == []


def test_bench_takes_layout_dtype_and_batch(tmp_path, monkeypatch):
    """`bench` timed NCHW float32 batch 1 only; NHWC (oneDNN's fast order on the CPU) and
    16-bit I/O are what a CPU user tunes."""
    import tempfile
    import hipdnn_async as hd
    from hipdnn_async import _bench
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    g, y = _bench._graph(hd, "fprop", (2, 8, 10, 10), (4, 8, 3, 3), 1, 1, "NHWC", "bfloat16")
    x, w = (next(t for t in g.tensors if t.name == n) for n in ("x", "w"))
    # NHWC strides of (N, C, H, W) = (2, 8, 10, 10): C fastest, then W, then H
    assert tuple(x.strides) == (800, 1, 80, 8) and tuple(w.strides) == (72, 1, 24, 8)
    assert x.data_type == hd.DataType.BFLOAT16 and tuple(y.dims) == (2, 4, 10, 10)
    rows = _bench.run(("dgrad",), [("tiny", (1, 8, 10, 10), (8, 8, 3, 3), 1, 1)], 1,
                      layout="NHWC", dtype="bfloat16", batch=2)
    assert [(r["layout"], r["dtype"], r["batch"]) for r in rows] == [("NHWC", "bfloat16", 2)]
    assert rows[0]["heuristic"] in rows[0]["algorithms_ms"]
    with pytest.raises(SystemExit):
        _bench.main(["--layout", "CHWN"])


def test_bench_table_wraps_the_algorithms_under_each_row(monkeypatch, capsys):
    """The algorithms column made lines of 500+ characters (a new user's report): each
    row's algorithms are listed under it now, fastest first, within 100 columns."""
    from hipdnn_async import _bench
    algos = {f"impl_{i}:avx512_core+blocked": 1.0 + i / 7 for i in range(40)}
    row = {"layer": "res2 3x3", "direction": "fprop", "algorithms_ms": algos,
           "heuristic": "impl_3:avx512_core+blocked", "heuristic_ms": 1.5,
           "benchmarked": "impl_0:avx512_core+blocked", "benchmarked_ms": 1.0,
           "heuristic_over_best": algos["impl_3:avx512_core+blocked"] / 1.0,
           "benchmarked_over_best": 1.0}
    monkeypatch.setattr(_bench, "run", lambda *a, **k: [row])
    assert _bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    listed = re.findall(r"(impl_\d+):avx512_core\+blocked=([\d.]+)", out.split("algorithms")[1])
    assert [n for n, _ in listed] == [f"impl_{i}" for i in range(40)]        # fastest first
    assert [float(ms) for _, ms in listed] == [round(1.0 + i / 7, 2) for i in range(40)]
    assert "1.43" in out.splitlines()[2]          # h/best of the row: 1.4286 / 1.0
