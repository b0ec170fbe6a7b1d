"""Tests of hipdnn_async._perfdb: round trips, import/export, broken files, defaults."""
from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import stat
import time
import warnings
from pathlib import Path

import pytest

import hipdnn_async as hd
from hipdnn_async._errors import HipdnnError
from hipdnn_async import _perfdb
from hipdnn_async._perfdb import (PerfDb, PerfKey, PerfRecord, cli_clear, cli_export,
                                  cli_import, cli_show, count, default_perfdb,
                                  reset_default_perfdb, stats)

LOGGER = "hipdnn_async"


def key(i=0, *, ws=1 << 20, device="host-cpu", provider="cpu", libs="numpy 2.0",
        engine="CPU_ENGINE"):
    return PerfKey(provider, engine, libs, device, f"CONV_FPROP|x(1,{i},8,8)|w(4,{i},3,3)", ws)


def rec(alg="im2col_gemm", t=1.25, ws=4096, at=None):
    return PerfRecord(alg, t, ws, time.time() if at is None else at)


def warnings_of(caplog, path):
    return [r for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING and str(path) in r.getMessage()]


def assert_usable(db):
    """The db still tunes: a store is visible to a lookup."""
    k = key(999, device="probe")
    db.store(k, rec("probe", 0.5, 0, 1.0))
    assert db.lookup(k) == PerfRecord("probe", 0.5, 0, 1.0)


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", str(tmp_path / "default" / "perf.sqlite3"))
    yield
    reset_default_perfdb()


@pytest.fixture
def db(tmp_path):
    with PerfDb(tmp_path / "db" / "perf.sqlite3") as d:
        yield d


# -- round trips --------------------------------------------------------------

def test_store_then_lookup_round_trip(db):
    k, r = key(), rec()
    assert db.lookup(k) is None
    db.store(k, r)
    assert db.lookup(k) == r
    assert len(db) == 1


def test_creates_missing_directories(tmp_path):
    p = tmp_path / "a" / "b" / "c" / "perf.sqlite3"
    with PerfDb(p) as d:
        assert not d.in_memory
        assert d.path == str(p)
    assert p.is_file()


def test_a_sqlite_uri_is_refused_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for uri in (f"file:{tmp_path}/w/z.db?mode=ro", "FILE:x.db"):
        with pytest.raises(hd.PerfDbError, match="SQLite URI"):
            PerfDb(uri)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["dbs/", "dbs/sub/", "existing/", "dbs/.", "dbs/sub/..",
                                  "existing", "existing/.", "link", "dbs//"])
def test_a_path_ending_in_a_separator_is_refused_and_creates_nothing(tmp_path, capsys, name):
    """A trailing slash names a directory: os.path.abspath dropped it and a db file was
    made where the user meant a folder (a perf db named ``dbs``). PerfDb, Device(perfdb=)
    and the perfdb command refuse it, naming the file path to give, and create nothing."""
    from hipdnn_async import cli
    (tmp_path / "existing").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "existing")
    before = sorted(os.listdir(tmp_path))
    given = f"{tmp_path}/{name}"
    hint = repr(os.path.join(os.path.realpath(given), "perfdb.sqlite3"))
    with pytest.raises(hd.PerfDbError, match="a directory, not the db file") as err:
        PerfDb(given)
    assert repr(given) in str(err.value) and hint in str(err.value)
    with pytest.raises(hd.PerfDbError, match="a directory, not the db file"):
        hd.Device("cpu", perfdb=given)
    for action in (["perfdb", "show", "--db", given], ["perfdb", "clear", "--db", given],
                   ["perfdb", "export", str(tmp_path / "out.json"), "--db", given],
                   ["info", "--perfdb", given]):
        assert cli.main(action) != 0, action
        assert "a directory, not the db file" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(tmp_path / "existing") == []


@pytest.mark.parametrize("name", ["dbs/", "dbs/.", "existing"])
def test_an_env_path_naming_a_directory_is_refused_for_memory(monkeypatch, tmp_path, capsys,
                                                              name):
    """... and kept: one in-memory default db, one warning; the CLI's read-only commands
    say so instead of "no such file", and `info` does not call the directory a db."""
    from hipdnn_async import _log, cli
    (tmp_path / "existing").mkdir()
    value = f"{tmp_path}/{name}"
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", value)
    reset_default_perfdb()
    _log._warned_env.discard(("HIPDNN_ASYNC_PERFDB", value))
    with pytest.warns(RuntimeWarning) as shown:
        d = default_perfdb()
        assert d.in_memory and d.path == value
        r = rec()
        d.store(key(), r)
        assert d.lookup(key()) == r and default_perfdb() is d     # kept, not reopened
    assert len(shown) == 1
    why = _perfdb.names_directory(value)
    assert str(shown[0].message) == (
        f"hipdnn_async: HIPDNN_ASYNC_PERFDB={value!r} {why}; using an in-memory perf db "
        "instead (results will not persist)")
    meant = os.path.realpath(tmp_path / (name.strip('/.') or '.'))
    assert f"e.g. {os.path.join(meant, 'perfdb.sqlite3')!r}" in why
    reset_default_perfdb()
    capsys.readouterr()
    assert cli.main(["perfdb", "show"]) == 0
    assert "is not usable as a perf db" in capsys.readouterr().err
    reset_default_perfdb()
    assert cli.main(["info"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["perfdb_in_memory"] is True and info["perfdb_exists"] is False
    reset_default_perfdb()
    assert sorted(os.listdir(tmp_path)) == ["existing"]
    assert os.listdir(tmp_path / "existing") == []


def test_a_directory_at_the_builtin_default_is_named_as_such(monkeypatch, tmp_path, caplog):
    """No $HIPDNN_ASYNC_PERFDB and a directory at ~/.config/hipdnn_async/perfdb.sqlite3:
    an in-memory db whose logged reason names the built-in default, not the unset
    variable (no RuntimeWarning about it), and says how to mend it."""
    home = tmp_path / "home"
    (home / ".config" / "hipdnn_async" / "perfdb.sqlite3").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("HIPDNN_ASYNC_PERFDB", raising=False)
    reset_default_perfdb()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            d = default_perfdb()
    assert d.in_memory and default_perfdb() is d
    msgs = [r.getMessage() for r in caplog.records if "built-in default" in r.getMessage()]
    assert len(msgs) == 1 and "set $HIPDNN_ASYNC_PERFDB to a db file's path" in msgs[0]
    reset_default_perfdb()


def test_the_hint_follows_links(tmp_path):
    (tmp_path / "other" / "deep").mkdir(parents=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "lnk").symlink_to(tmp_path / "other" / "deep")
    with pytest.raises(hd.PerfDbError) as err:
        PerfDb(f"{tmp_path}/a/lnk/..")
    assert f"e.g. {str(tmp_path / 'other' / 'perfdb.sqlite3')!r}" in str(err.value)


@pytest.mark.parametrize("form", ["{d}//db.sqlite3", "{d}/./db.sqlite3", "{d}/x/../db.sqlite3"])
def test_the_default_db_is_kept_for_an_env_path_not_in_normal_form(monkeypatch, tmp_path,
                                                                    form):
    """default_perfdb() compared the normalised PerfDb.path with the value read, so such a
    value reopened the db at every call (and a benchmarking build tuned again)."""
    (tmp_path / "x").mkdir()
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", form.format(d=tmp_path))
    reset_default_perfdb()
    d = default_perfdb()
    assert not d.in_memory and d.path == str(tmp_path / "db.sqlite3")
    assert default_perfdb() is d
    reset_default_perfdb()


def test_persists_across_instances(tmp_path):
    p = tmp_path / "perf.sqlite3"
    with PerfDb(p) as d:
        d.store(key(1), rec(t=3.0, at=10.0))
    with PerfDb(p) as d:
        assert d.lookup(key(1)) == rec(t=3.0, at=10.0)


@pytest.mark.parametrize("other", [
    key(ws=0), key(device="gfx942 rocm 6.4"), key(provider="miopen"),
    key(libs="numpy 2.1"), key(i=1), key(engine="CPU_ENGINE_TWIN"),
])
def test_each_key_field_separates_entries(db, other):
    db.store(key(), rec("a", 1.0))
    db.store(other, rec("b", 2.0))
    assert db.lookup(key()).algorithm == "a"
    assert db.lookup(other).algorithm == "b"
    assert len(db.entries()) == 2


def test_last_store_wins(db):
    db.store(key(), rec("first", 1.0, at=100.0))
    db.store(key(), rec("second", 9.0, at=200.0))
    assert db.lookup(key()) == rec("second", 9.0, at=200.0)
    db.store(key(), rec("retuned", 0.1, at=150.0))   # a store always replaces
    assert db.lookup(key()) == rec("retuned", 0.1, at=150.0)
    assert len(db) == 1


def test_entries_are_json_ready(db):
    db.store(key(), rec(at=5.0))
    (e,) = db.entries()
    assert e == {"provider": "cpu", "engine": "CPU_ENGINE", "library_versions": "numpy 2.0",
                 "device": "host-cpu",
                 "problem": key().problem, "workspace_limit": 1 << 20,
                 "algorithm": "im2col_gemm", "time_ms": 1.25, "workspace_bytes": 4096,
                 "measured_at": 5.0}
    json.dumps(e)


def test_clear_returns_count(db):
    for i in range(3):
        db.store(key(i), rec())
    assert db.clear() == 3
    assert db.entries() == [] and db.lookup(key(0)) is None


def test_counters(db):
    before = stats()
    db.lookup(key())
    db.store(key(), rec())
    db.lookup(key())
    count("benchmarks_run", 2)
    after = stats()
    delta = {k: after[k] - before[k] for k in before}
    assert delta == {"perfdb_hits": 1, "perfdb_misses": 1, "perfdb_stores": 1,
                     "benchmarks_run": 2, "perfdb_warnings": 0}


def test_memory_db(tmp_path):
    with PerfDb(":memory:") as d:
        assert d.in_memory and d.path == ":memory:"
        assert_usable(d)


def test_close_is_idempotent_and_reopens(tmp_path):
    d = PerfDb(tmp_path / "p.sqlite3")
    d.store(key(), rec(at=1.0))
    d.close()
    d.close()
    assert d.lookup(key()) == rec(at=1.0)
    d.close()


def test_repr_names_path(db):
    assert repr(db) == f"PerfDb(path={db.path!r}, in_memory=False)"


@pytest.mark.parametrize("args", [
    (1, "E", "v", "d", "p", 0), ("cpu", "E", "v", "d", b"p", 0), ("cpu", "E", "v", "d", "p", -1),
    ("cpu", "E", "v", "d", "p", True), ("cpu", "E", "v", "d", "p", 1.5),
    ("cpu", None, "v", "d", "p", 0),
])
def test_perf_key_types_checked(args):
    with pytest.raises(HipdnnError):
        PerfKey(*args)


@pytest.mark.parametrize("args", [
    ("a", float("nan"), 0, 0.0), ("a", -1.0, 0, 0.0), ("a", 1.0, -5, 0.0), (3, 1.0, 0, 0.0),
    ("a", "1.0", 0, 0.0),
])
def test_perf_record_types_checked(args):
    with pytest.raises(HipdnnError):
        PerfRecord(*args)


# -- export / import ------------------------------------------------------------

def test_export_import_round_trip(db, tmp_path):
    for i in range(5):
        db.store(key(i, ws=i * 1024), rec(f"alg{i}", 0.5 * i, i * 7, at=1000.0 + i))
    out = tmp_path / "export.json"
    assert db.export_json(out) == 5
    with PerfDb(tmp_path / "fresh.sqlite3") as fresh:
        assert fresh.import_json(out) == 5
        assert fresh.entries() == db.entries()
        assert fresh.lookup(key(3, ws=3072)) == rec("alg3", 1.5, 21, at=1003.0)


def test_import_does_not_replace_newer(db, tmp_path):
    db.store(key(), rec("old", 1.0, at=1.0))
    out = tmp_path / "e.json"
    db.export_json(out)
    db.store(key(), rec("new", 2.0, at=2.0))
    db.import_json(out)
    assert db.lookup(key()).algorithm == "new"      # older import entry: not merged
    db.store(key(), rec("oldest", 3.0, at=0.5))
    db.import_json(out)
    assert db.lookup(key()).algorithm == "old"      # newer import entry: merged


def _good_entry():
    return {"provider": "cpu", "engine": "E", "library_versions": "v", "device": "d", "problem": "p",
            "workspace_limit": 0, "algorithm": "direct", "time_ms": 1.0,
            "workspace_bytes": 0, "measured_at": 1.0}


def _doc(*entries):
    return {"format": "hipdnn_async.perfdb", "version": 2, "entries": list(entries)}


@pytest.mark.parametrize("doc, pattern", [
    ([], "not a perf db export.*; got an array$"),
    ({}, "not a perf db export.*; got an empty object$"),     # it said "got []"
    ("x", "not a perf db export.*; got a string$"),
    ({"entries": []}, "not a perf db export.*; got an object with fields \\['entries'\\]$"),
    ({**_doc(), "format": "miopen"}, "field 'format'"),
    ({**_doc(), "version": 3}, "field 'version'"),
    ({**_doc(), "version": True}, "field 'version'"),
    (_doc({**_good_entry(), "engine": 7}), "entry 0: field 'engine' must be a str"),
    ({**_doc({k: v for k, v in _good_entry().items() if k != "engine"})},
     "entry 0: missing field 'engine'"),
    ({**_doc(_good_entry()), "version": 1}, "entry 0: unknown field 'engine'"),
    ({**_doc(), "entries": {}}, "field 'entries' must be a list"),
    (_doc(5), "entry 0: must be an object"),
    (_doc({k: v for k, v in _good_entry().items() if k != "device"}), "entry 0: missing field 'device'"),
    (_doc({**_good_entry(), "extra": 1}), "entry 0: unknown field 'extra'"),
    (_doc({**_good_entry(), "time_ms": "fast"}), "entry 0: field 'time_ms' must be a finite number"),
    (_doc({**_good_entry(), "workspace_limit": True}), "entry 0: field 'workspace_limit' must be an int"),
    (_doc({**_good_entry(), "workspace_bytes": -1}), "entry 0: field 'workspace_bytes' must be an int in \\[0, 2\\*\\*63 - 1\\]"),
    # SQLite's INTEGER is 64-bit signed: 2**63 raised OverflowError (widen the search)
    (_doc({**_good_entry(), "workspace_limit": 2 ** 63}), "entry 0: field 'workspace_limit' must be an int in"),
    # a lone surrogate ("\\udcff" in JSON) cannot be stored: it raised UnicodeEncodeError
    (_doc({**_good_entry(), "problem": "\udcff"}), "entry 0: field 'problem' must be a str \\(valid Unicode"),
    (_doc({**_good_entry(), "problem": None}), "entry 0: field 'problem' must be a str"),
    (_doc(_good_entry(), {**_good_entry(), "measured_at": [1]}), "entry 1: field 'measured_at'"),
])
def test_import_malformed_rejected(db, tmp_path, doc, pattern):
    """A bad file's content is a PerfDbError, a ValueError (review F3: was DeviceError)."""
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=pattern) as ei:
        db.import_json(p)
    assert type(ei.value) is hd.PerfDbError and ei.value.code == "INVALID_VALUE"
    assert str(p) in str(ei.value)
    assert db.entries() == []          # all or nothing


def test_odd_keys_records_and_paths_are_perfdb_errors_not_overflow_or_type_errors(db):
    """Widen the search (issue 10): a workspace beyond SQLite's 64-bit INTEGER raised
    OverflowError at store, a lone surrogate UnicodeEncodeError, a path of None/int a
    TypeError and one holding NUL a bare ValueError; each is a PerfDbError naming it."""
    for make, pattern in [
            (lambda: PerfKey("cpu", "E", "v", "d", "p", 2 ** 63), "'workspace_limit' must be in"),
            (lambda: PerfRecord("a", 1.0, 2 ** 64), "'workspace_bytes' must be in"),
            (lambda: PerfKey("cpu", "E", "v", "d", "\udcff", 0), "'problem' must be valid Unicode"),
            (lambda: PerfRecord("\ud800", 1.0, 0), "'algorithm' must be valid Unicode")]:
        with pytest.raises(hd.PerfDbError, match=pattern):
            make()
    biggest = PerfKey("cpu", "E", "v", "d", "p", 2 ** 63 - 1)
    r = rec()
    db.store(biggest, r)
    assert db.lookup(biggest) == r
    for call in (db.export_json, db.import_json):
        for bad, pattern in ((None, "path must be a str"), (5, "path must be a str"),
                             ("a\0b", "holds a NUL"), ("", "is empty")):
            with pytest.raises(hd.PerfDbError, match=pattern):
                call(bad)


def test_import_not_json(db, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON") as ei:
        db.import_json(p)
    assert type(ei.value) is hd.PerfDbError and str(p) in str(ei.value)
    p.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(hd.PerfDbError, match="not valid JSON"):
        db.import_json(p)


def test_import_missing_file(db, tmp_path):
    with pytest.raises(hd.PerfDbError, match="cannot read"):
        db.import_json(tmp_path / "nope.json")
    with pytest.raises(hd.PerfDbError, match="a directory"):
        db.import_json(tmp_path)


def test_import_unreadable_file_is_a_device_error(db, tmp_path, monkeypatch):
    """The OS refusing the read (EACCES; simulated: root reads mode 000) is a DeviceError."""
    p = tmp_path / "locked.json"
    p.write_text(json.dumps(_doc()))

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_perfdb._exchange, "open", refuse, raising=False)   # the reader
    with pytest.raises(hd.DeviceError, match="cannot read.*Permission denied") as ei:
        db.import_json(p)
    assert not isinstance(ei.value, ValueError)


# -- default db -------------------------------------------------------------------

def test_default_perfdb_follows_env(monkeypatch, tmp_path):
    d1 = default_perfdb()
    assert d1.path == str(tmp_path / "default" / "perf.sqlite3")
    assert default_perfdb() is d1
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", str(tmp_path / "other.sqlite3"))
    d2 = default_perfdb()
    assert d2 is not d1 and d2.path == str(tmp_path / "other.sqlite3")
    reset_default_perfdb()
    assert default_perfdb() is not d2


def test_default_path_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("HIPDNN_ASYNC_PERFDB")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    reset_default_perfdb()
    d = default_perfdb()
    expected = tmp_path / "home" / ".config" / "hipdnn_async" / "perfdb.sqlite3"
    assert d.path == str(expected) and expected.is_file()


@pytest.mark.parametrize("value", ["rel/perf.sqlite3", "perf.sqlite3",
                                   "file:/tmp/x.db?mode=memory", "./a/../b.db"])
def test_relative_env_path_is_refused_for_memory_and_creates_nothing(monkeypatch, tmp_path,
                                                                       capsys, value):
    """Review F4: a relative $HIPDNN_ASYNC_PERFDB (or a SQLite URI) was resolved against the
    working directory, which got directories and a db. Now: a warning, an in-memory db, and
    nothing created in the working directory, by builds' default db, PerfDb() and `info`.
    The warning is a RuntimeWarning, once per process and value (it was only a log record,
    unseen at the default log level, while every process retuned)."""
    from hipdnn_async import _log, cli
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", value)
    reset_default_perfdb()
    _log._warned_env.discard(("HIPDNN_ASYNC_PERFDB", value))   # this process's first sight
    warned = _perfdb.stats()["perfdb_warnings"]
    with pytest.warns(RuntimeWarning) as shown:
        d = default_perfdb()
        assert d.in_memory and d.path == value
        assert _perfdb.stats()["perfdb_warnings"] == warned + 1
        r = rec()
        d.store(key(), r)                       # works, in memory
        assert d.lookup(key()) == r and default_perfdb() is d
        with PerfDb() as explicit_default:
            assert explicit_default.in_memory
        reset_default_perfdb()
        assert cli.main(["info"]) == 0
    assert len(shown) == 1, [str(w.message) for w in shown]
    assert str(shown[0].message) == (f"hipdnn_async: HIPDNN_ASYNC_PERFDB={value!r} "
                                     f"{_perfdb._paths.REFUSED}; using an in-memory perf db "
                                     "instead (results will not persist)")
    assert _perfdb.env_refusal(value) and "not an absolute path" in _perfdb.env_refusal(value)
    info = json.loads(capsys.readouterr().out)
    assert info["perfdb_in_memory"] is True and info["perfdb"] == value
    assert os.listdir(work) == []


def test_env_path_with_tilde_is_absolute_and_used(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", "~/dbs/perf.sqlite3")
    reset_default_perfdb()
    d = default_perfdb()
    assert not d.in_memory and d.path == str(tmp_path / "home" / "dbs" / "perf.sqlite3")
    assert _perfdb.env_refusal(d.path) is None


def test_an_explicit_relative_path_follows_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with PerfDb("here.sqlite3") as d:
        assert d.path == str(tmp_path / "here.sqlite3") and not d.in_memory


# -- command-line helpers -----------------------------------------------------------

def test_cli_helpers(db, tmp_path):
    db.store(key(1), rec("direct", 2.0))
    db.store(key(2), rec("fft", 3.0))
    out = io.StringIO()
    assert cli_show(db, out) == 2
    text = out.getvalue()
    assert text.splitlines()[0] == f"perf db {db.path}: 2 entries"
    assert "direct" in text and "fft" in text
    out = io.StringIO()
    cli_export(db, tmp_path / "x.json", out)
    assert out.getvalue() == f"exported 2 entries to {tmp_path / 'x.json'}\n"
    out = io.StringIO()
    cli_clear(db, out)
    assert out.getvalue() == f"cleared 2 entries from {db.path}\n"
    out = io.StringIO()
    cli_import(db, tmp_path / "x.json", out)
    assert out.getvalue() == f"imported 2 entries from {tmp_path / 'x.json'} into {db.path}\n"
    assert len(db) == 2


# -- broken files and locations -------------------------------------------------------

def _make_valid_db(path, n=400):
    with PerfDb(path) as d:
        d._run("fill", lambda c: _perfdb._write_txn(c, lambda c2: _perfdb._upsert(
            c2, [(f"cpu", "E", "v", "d", "p" * 200 + str(i), i, "a", 1.0, 0, 1.0)
                 for i in range(n)])), default=None)
        d._run("checkpoint", lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)"),
               default=None)


def _asides(path):
    return sorted(p for p in os.listdir(os.path.dirname(path))
                  if p.startswith(os.path.basename(path) + ".corrupt-") and
                  not p.endswith(("-wal", "-shm", "-journal")))


def _check_moved_aside_and_recreated(caplog, path, original_bytes=None):
    warned_before = stats()["perfdb_warnings"]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        d = PerfDb(path)
        assert not d.in_memory
        assert d.lookup(key()) is None          # never raises
        d.store(key(), rec(at=1.0))
        assert d.lookup(key()) == rec(at=1.0)
        assert_usable(d)
        d.close()
        with PerfDb(path) as again:              # healthy now: no second warning
            assert again.lookup(key()) == rec(at=1.0)
    (aside,) = _asides(path)
    if original_bytes is not None:
        with open(os.path.join(os.path.dirname(path), aside), "rb") as f:
            assert f.read() == original_bytes    # kept, not destroyed
    ws = warnings_of(caplog, path)
    assert len(ws) == 1 and "moved it to" in ws[0].getMessage()
    assert stats()["perfdb_warnings"] == warned_before + 1  # visible with logging off


def _builtin_path(monkeypatch, tmp_path) -> str:
    """The built-in default path (~/.config/hipdnn_async/perfdb.sqlite3) under a temporary
    HOME: the one place where a file whose bytes are unrecognisable is still ours."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = _perfdb._builtin_default()
    os.makedirs(os.path.dirname(path))
    return path


def test_corrupt_file_is_moved_aside(tmp_path, caplog, monkeypatch):
    path = _builtin_path(monkeypatch, tmp_path)
    data = os.urandom(8192)
    with open(path, "wb") as f:
        f.write(data)
    _check_moved_aside_and_recreated(caplog, path, data)


@pytest.mark.parametrize("content", [b'{"a": 1}\n', b"garbage not sqlite at all", None])
def test_unrecognisable_file_named_sqlite3_is_left_untouched(tmp_path, caplog, content):
    """Reviewer's F1: the name does not make a file ours; only its content (our SQLite
    application_id / meta format) or the built-in default path does."""
    path = str(tmp_path / "j.sqlite3")
    with open(path, "wb") as f:
        f.write(os.urandom(8192) if content is None else content)
    _check_left_untouched(caplog, path, "not a SQLite file")


def test_truncated_file_is_moved_aside(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    _make_valid_db(path)
    size = os.path.getsize(path)
    assert size > 64 * 1024
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    _check_moved_aside_and_recreated(caplog, path)


def test_file_truncated_inside_header(tmp_path, caplog, monkeypatch):
    path = _builtin_path(monkeypatch, tmp_path)
    _make_valid_db(path, n=3)
    with open(path, "r+b") as f:
        f.truncate(60)
    _check_moved_aside_and_recreated(caplog, path)


def _check_left_untouched(caplog, path, what):
    before = Path(path).read_bytes()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        d = PerfDb(path)
        assert d.in_memory
        d.store(key(), rec(at=1.0))              # works, in memory
        assert d.lookup(key()) == rec(at=1.0)
        d.close()
    assert Path(path).read_bytes() == before     # not moved, not written
    assert not _asides(path) and not os.path.exists(path + ".lock")
    ws = warnings_of(caplog, path)
    assert len(ws) == 1 and what in ws[0].getMessage() and "left untouched" in ws[0].getMessage()


def test_foreign_schema_is_left_untouched(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE find_db (k TEXT, v TEXT)")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    _check_left_untouched(caplog, path, "another application")


@pytest.mark.parametrize("name, data", [("export.json", b'{"entries": []}'),
                                        ("passwd", b"root:x:0:0:root:/root:/bin/bash\n")])
def test_a_file_that_is_not_a_perf_db_is_left_untouched(tmp_path, caplog, name, data):
    path = str(tmp_path / name)
    Path(path).write_bytes(data)
    _check_left_untouched(caplog, path, "not a SQLite file")


@pytest.mark.parametrize("version", [1, 2])
def test_wrong_columns_same_version_is_moved_aside(tmp_path, caplog, version):
    path = str(tmp_path / "perf.sqlite3")
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                       "INSERT INTO meta VALUES ('format', 'hipdnn_async.perfdb');"
                       "CREATE TABLE perf (problem TEXT, algorithm TEXT);"
                       f"PRAGMA user_version = {version};")
    conn.close()
    _check_moved_aside_and_recreated(caplog, path)


def test_newer_schema_left_untouched(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    _make_valid_db(path, n=2)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    before = Path(path).read_bytes()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            with PerfDb(path) as d:
                assert d.in_memory
                assert_usable(d)
    assert Path(path).read_bytes() == before and _asides(path) == []
    ws = warnings_of(caplog, path)
    assert len(ws) == 1 and "newer" in ws[0].getMessage()


def _check_memory_fallback(caplog, path, reason):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            d = PerfDb(path)
            assert d.in_memory
            assert d.lookup(key()) is None
            assert_usable(d)
            d.close()
    ws = warnings_of(caplog, path)
    assert len(ws) == 1, [w.getMessage() for w in ws]
    assert reason in ws[0].getMessage() and "in-memory" in ws[0].getMessage()


def test_path_is_a_directory(tmp_path):
    """A directory is a mistaken name, as a trailing '/' is: refused, not an in-memory db
    behind a log record (a break-it finding)."""
    path = tmp_path / "perf.sqlite3"
    path.mkdir()
    with pytest.raises(hd.PerfDbError, match="is a directory, not the db file"):
        PerfDb(path)
    assert os.listdir(path) == []


def test_parent_is_a_file(tmp_path, caplog):
    (tmp_path / "blocker").write_text("x")
    _check_memory_fallback(caplog, str(tmp_path / "blocker" / "perf.sqlite3"),
                           "cannot create directory")


def _chmod_or_skip(path, mode):
    os.chmod(path, mode)
    if os.access(path, os.W_OK):
        os.chmod(path, stat.S_IRWXU)
        pytest.skip("running as root: permissions are not enforced")


def test_read_only_file(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    _make_valid_db(path, n=2)
    _chmod_or_skip(path, stat.S_IRUSR)
    try:
        _check_memory_fallback(caplog, path, "not writable")
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)


def test_read_only_directory(tmp_path, caplog):
    ro = tmp_path / "ro"
    ro.mkdir()
    _chmod_or_skip(ro, stat.S_IRUSR | stat.S_IXUSR)
    try:
        _check_memory_fallback(caplog, str(ro / "perf.sqlite3"), "not writable")
    finally:
        os.chmod(ro, stat.S_IRWXU)


def test_read_only_location_keeps_readable_entries(tmp_path, caplog, monkeypatch):
    # Runs as root too: os.access is what the db consults to decide writability.
    path = str(tmp_path / "perf.sqlite3")
    with PerfDb(path) as d:
        d.store(key(7), rec("kept", 4.0, at=3.0))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (
        False if mode & os.W_OK and str(p).startswith(str(tmp_path)) else real_access(p, mode, **kw)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with PerfDb(path) as d:
            assert d.in_memory
            assert d.lookup(key(7)) == rec("kept", 4.0, at=3.0)
            assert_usable(d)
    assert len(warnings_of(caplog, path)) == 1


def test_corrupted_while_closed_is_repaired_on_next_use(tmp_path, caplog, monkeypatch):
    path = _builtin_path(monkeypatch, tmp_path)
    d = PerfDb(path)
    d.store(key(), rec(at=1.0))
    d.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    with open(path, "wb") as f:
        f.write(os.urandom(4096))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert d.lookup(key()) is None
        assert_usable(d)
    d.close()
    assert len(warnings_of(caplog, path)) == 1 and len(_asides(path)) == 1


def test_corrupted_while_open_does_not_raise(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    d = PerfDb(path)
    for i in range(50):
        d.store(key(i), rec(at=1.0))
    d._run("checkpoint", lambda c: c.execute("PRAGMA wal_checkpoint(TRUNCATE)"), default=None)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:         # clobber every page after the header page
        f.seek(4096)
        f.write(os.urandom(size - 4096))
    # Drop the connection's page cache so the next read sees the damage.
    d._run("shrink", lambda c: c.execute("PRAGMA shrink_memory").fetchall(), default=None)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for i in range(50):
            assert d.lookup(key(i)) is None   # lost with the file; must not raise
        assert_usable(d)
    d.close()
    ws = warnings_of(caplog, path)
    assert len(ws) == 1 and "lookup failed" in ws[0].getMessage()
    assert len(_asides(path)) == 1


# -- logging configuration (hipdnn_async._log, which carries the warnings above) --------

@pytest.fixture
def log_env(monkeypatch):
    from hipdnn_async import _log
    monkeypatch.delenv("HIPDNN_ASYNC_LOG_LEVEL", raising=False)
    monkeypatch.delenv("HIPDNN_ASYNC_LOG_FILE", raising=False)
    saved = (_log.logger.level, _log.logger.propagate)
    yield _log
    monkeypatch.delenv("HIPDNN_ASYNC_LOG_LEVEL", raising=False)
    monkeypatch.delenv("HIPDNN_ASYNC_LOG_FILE", raising=False)
    _log.configure_from_env()                 # detaches our handler, closes the file
    _log.logger.setLevel(saved[0])
    _log.logger.propagate = saved[1]


def _our_handlers(_log):
    return [h for h in _log.logger.handlers if h is _log._handler]


def test_log_off_by_default(log_env):
    assert log_env.configure_from_env() == log_env.OFF
    assert log_env.logger.level > logging.CRITICAL
    assert _our_handlers(log_env) == []


@pytest.mark.parametrize("word, level", [("info", logging.INFO), ("WARN", logging.WARNING),
                                         ("warning", logging.WARNING),
                                         ("error", logging.ERROR)])
def test_log_levels_attach_one_handler(log_env, monkeypatch, word, level):
    monkeypatch.setenv("HIPDNN_ASYNC_LOG_LEVEL", word)
    n_before = len(log_env.logger.handlers)
    assert log_env.configure_from_env() == level
    assert log_env.configure_from_env() == level          # idempotent
    assert len(log_env.logger.handlers) == n_before + 1
    assert len(_our_handlers(log_env)) == 1


def test_log_file(log_env, monkeypatch, tmp_path):
    out = tmp_path / "hd.log"
    monkeypatch.setenv("HIPDNN_ASYNC_LOG_LEVEL", "info")
    monkeypatch.setenv("HIPDNN_ASYNC_LOG_FILE", str(out))
    log_env.configure_from_env()
    log_env.logger.info("hello %d", 42)
    log_env.logger.debug("not shown")
    log_env._handler.flush()
    text = out.read_text()
    assert "hello 42" in text and "INFO" in text and "not shown" not in text


def test_log_unknown_level_stays_off(log_env, monkeypatch, capsys):
    monkeypatch.setenv("HIPDNN_ASYNC_LOG_LEVEL", "chatty")
    assert log_env.configure_from_env() == log_env.OFF
    assert "HIPDNN_ASYNC_LOG_LEVEL='chatty'" in capsys.readouterr().err


def test_empty_db_is_truthy(db):
    assert len(db) == 0 and bool(db)


def test_invalid_row_written_by_another_tool_is_a_miss(db, caplog):
    db._run("poke", lambda c: c.execute(
        "INSERT INTO perf VALUES ('cpu', 'CPU_ENGINE', 'numpy 2.0', 'host-cpu', ?, ?, 'x', -5.0, 0, 1.0)",
        (key().problem, key().workspace_limit)), default=None)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert db.lookup(key()) is None
        assert db.lookup(key()) is None
    assert len(warnings_of(caplog, db.path)) == 1
    db.store(key(), rec(at=2.0))
    assert db.lookup(key()) == rec(at=2.0)


# -- schema 1 (no engine column) -> 2 ------------------------------------------------------

_SCHEMA1_SQL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE perf (
    provider TEXT NOT NULL, library_versions TEXT NOT NULL, device TEXT NOT NULL,
    problem TEXT NOT NULL, workspace_limit INTEGER NOT NULL, algorithm TEXT NOT NULL,
    time_ms REAL NOT NULL, workspace_bytes INTEGER NOT NULL, measured_at REAL NOT NULL,
    PRIMARY KEY (provider, library_versions, device, problem, workspace_limit));
INSERT INTO meta VALUES ('format', 'hipdnn_async.perfdb');
PRAGMA user_version = 1;
"""


def _schema1_file(path, rows):
    """A perf db file exactly as hipdnn_async 0.1.0 (schema 1) wrote it."""
    conn = sqlite3.connect(path)
    conn.executescript(_SCHEMA1_SQL)
    conn.executemany("INSERT INTO perf VALUES (?,?,?,?,?,?,?,?,?)", rows)
    conn.commit()
    conn.close()


def _v1_row(i=0, alg="old_winner", at=10.0):
    k = key(i)
    return (k.provider, k.library_versions, k.device, k.problem, k.workspace_limit, alg, 2.0,
            64, at)


def _schema_of(path):
    conn = sqlite3.connect(path)
    try:
        return (conn.execute("PRAGMA user_version").fetchone()[0],
                [r[1] for r in conn.execute("PRAGMA table_info(perf)")])
    finally:
        conn.close()


def test_schema1_file_is_upgraded_in_place(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    _schema1_file(path, [_v1_row(0), _v1_row(1, "other")])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        with PerfDb(path) as d:
            assert not d.in_memory
            assert sorted((e["engine"], e["algorithm"]) for e in d.entries()) == [
                ("", "old_winner"), ("", "other")]
    assert _schema_of(path) == (2, list(_perfdb._FIELDS)) and _asides(path) == []
    notes = [r.getMessage() for r in caplog.records if "upgraded schema 1" in r.getMessage()]
    assert len(notes) == 1 and "2 entries" in notes[0] and path in notes[0]
    assert not warnings_of(caplog, path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        with PerfDb(path) as d:       # upgraded once: reopening says nothing
            assert len(d) == 2
    assert "upgraded" not in caplog.text


def test_schema1_entries_are_claimed_only_by_the_engine_that_wrote_them(tmp_path):
    path = str(tmp_path / "perf.sqlite3")
    _schema1_file(path, [_v1_row(0)])
    with PerfDb(path) as d:
        assert d.lookup(key(0)) is None                        # other engines: a miss
        assert d.lookup(key(0, engine="TWIN"), schema1=False) is None
        got = d.lookup(key(0), schema1=True)                   # the original engine
        assert got == PerfRecord("old_winner", 2.0, 64, 10.0)
        assert [e["engine"] for e in d.entries()] == ["CPU_ENGINE"]   # claimed
        assert d.lookup(key(0)) == got                         # now its own entry
        assert d.lookup(key(0, engine="TWIN"), schema1=True) is None  # nothing left to claim


def test_an_engines_own_entry_wins_over_a_schema1_one(tmp_path):
    path = str(tmp_path / "perf.sqlite3")
    _schema1_file(path, [_v1_row(0)])
    with PerfDb(path) as d:
        d.store(key(0), rec("tuned_since", 1.0, at=50.0))
        assert d.lookup(key(0), schema1=True).algorithm == "tuned_since"
        assert sorted(e["engine"] for e in d.entries()) == ["", "CPU_ENGINE"]


def test_schema2_file_round_trips(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    with PerfDb(path) as d:
        d.store(key(0), rec("a", at=1.0))
        d.store(key(0, engine="TWIN"), rec("b", at=2.0))
    assert _schema_of(path) == (2, list(_perfdb._FIELDS))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        with PerfDb(path) as d:
            assert d.lookup(key(0)).algorithm == "a"
            assert d.lookup(key(0, engine="TWIN")).algorithm == "b"
    assert "upgraded" not in caplog.text and _asides(path) == []


def test_schema1_export_imports_without_engines(db, tmp_path):
    entry = {k: v for k, v in _good_entry().items() if k != "engine"}
    p = tmp_path / "v1.json"
    p.write_text(json.dumps({**_doc(entry), "version": 1}))
    assert db.import_json(p) == 1
    (e,) = db.entries()
    assert e["engine"] == "" and e["algorithm"] == "direct"
    out = tmp_path / "v2.json"
    db.export_json(out)
    doc = json.loads(out.read_text())
    assert doc["version"] == 2 and doc["entries"][0]["engine"] == ""
