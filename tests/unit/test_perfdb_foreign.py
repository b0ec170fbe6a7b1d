"""The perf db never touches a file that is not ours, nor its side files (issue 10 items
5 and 6).

Each case snapshots the whole directory (names, file types, bytes) before and after and
requires it unchanged: no file moved, written or created (-wal, -shm, -journal, .lock,
.corrupt-*). Cases that could hang (a FIFO) run in a child process with a timeout.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hipdnn_async as hd
from hipdnn_async import _perfdb
from hipdnn_async._perfdb import PerfDb, PerfKey, PerfRecord

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOGGER = "hipdnn_async"
SIDE = ("-wal", "-shm", "-journal", ".lock")


def key(i=0):
    return PerfKey("cpu", "CPU_ENGINE", "libs", "dev", f"problem {i}", 1024)


def rec(t=1.0):
    return PerfRecord("direct", t, 0, 5.0)


def tree(folder) -> dict:
    """{relative name: (file type, bytes or None)} of everything under ``folder``."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), data)
    return out


def assert_untouched_in_memory(path, caplog, *, what):
    """Open ``path`` as a perf db: it falls back to memory, warns once naming ``what``, and
    nothing in its directory changes."""
    folder = os.path.dirname(path)
    before = tree(folder)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            with PerfDb(path) as db:
                assert db.in_memory
                db.store(key(), rec())            # still tunes, in memory
                assert db.lookup(key()) == rec()
    assert tree(folder) == before
    msgs = [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING and path in r.getMessage()]
    assert len(msgs) == 1 and what in msgs[0], msgs


@pytest.fixture(autouse=True)
def _reset_warnings():
    _perfdb._warned.clear()
    yield
    _perfdb.reset_default_perfdb()


def foreign_db(path, *, wal=False, tables=True, user_version=0):
    conn = sqlite3.connect(path)
    if wal:
        assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    if tables:
        conn.execute("CREATE TABLE notes (k TEXT PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO notes VALUES ('a', 'b')")
    if user_version:
        conn.execute(f"PRAGMA user_version = {user_version}")
    conn.commit()
    return conn


# -- 5a: paths with %, ?, #, spaces ------------------------------------------------------

@pytest.mark.parametrize("name", ["app%41.sqlite3", "app%2541.db", "a?b#c d.sqlite3",
                                  "caf\u00e9%20.sqlite3"])
def test_foreign_db_at_a_path_needing_uri_escapes_is_left_untouched(tmp_path, caplog, name):
    """Only ? and # used to be escaped, so 'app%41' probed 'appA' (missing: 'too damaged,
    treat as ours') and the real file was moved aside as corrupt."""
    path = str(tmp_path / name)
    foreign_db(path).close()
    decoded = tmp_path / name.replace("%41", "A").replace("%25", "%")
    assert not decoded.exists() or decoded == Path(path)
    assert_untouched_in_memory(path, caplog, what="another application")


@pytest.mark.parametrize("name", ["perf%41.sqlite3", "p?q#r s%25.sqlite3"])
def test_our_db_at_a_path_needing_uri_escapes_works_and_persists(tmp_path, name):
    path = str(tmp_path / name)
    with PerfDb(path) as db:
        assert not db.in_memory
        db.store(key(1), rec(2.0))
    with PerfDb(path) as db:
        assert not db.in_memory and db.lookup(key(1)) == rec(2.0)
    assert sorted(os.listdir(tmp_path)) == [name]


# -- 5b: SQLite files that are not ours --------------------------------------------------

@pytest.mark.parametrize("name", ["other.db", "perf.sqlite3"])
@pytest.mark.parametrize("user_version", [0, 7])
def test_sqlite_file_without_tables_is_left_untouched(tmp_path, caplog, name, user_version):
    path = str(tmp_path / name)
    foreign_db(path, tables=False, user_version=user_version or 1).close()
    if user_version == 0:      # a header-only db: journal_mode=WAL on an empty file
        os.remove(path)
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.close()
    assert Path(path).stat().st_size > 0
    assert_untouched_in_memory(path, caplog, what="another application")


@pytest.mark.parametrize("name", ["app.db", "app.sqlite3"])
def test_foreign_wal_db_gets_no_wal_or_shm_beside_it(tmp_path, caplog, name):
    path = str(tmp_path / name)
    foreign_db(path, wal=True).close()            # closed cleanly: only the main file
    assert os.listdir(tmp_path) == [name]
    assert_untouched_in_memory(path, caplog, what="another application")


def test_foreign_wal_db_with_a_live_writer_is_left_untouched(tmp_path, caplog):
    """Its tables live only in the -wal (not checkpointed): the main file shows none, and
    the name is one of ours. Still not ours."""
    path = str(tmp_path / "live.sqlite3")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE notes (k TEXT)")
    conn.commit()
    try:
        assert {"live.sqlite3-wal", "live.sqlite3-shm"} <= set(os.listdir(tmp_path))
        assert_untouched_in_memory(path, caplog, what="another application")
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    finally:
        conn.close()


def test_foreign_application_id_is_refused_from_the_header(tmp_path, caplog):
    path = str(tmp_path / "other.sqlite3")
    conn = foreign_db(path, tables=False)
    conn.execute("PRAGMA application_id = 1234")
    conn.commit()
    conn.close()
    assert_untouched_in_memory(path, caplog, what="application_id 0x4d2")


def test_our_db_carries_our_application_id_and_old_ones_get_it(tmp_path):
    path = str(tmp_path / "perf.sqlite3")
    with PerfDb(path) as db:
        db.store(key(), rec())
    head = Path(path).read_bytes()[:100]
    assert int.from_bytes(head[68:72], "big") == 0x68444E41          # b"hDNA"
    assert head[68:72] == b"hDNA"
    conn = sqlite3.connect(path)            # a db of ours made before application ids
    conn.execute("PRAGMA application_id = 0")
    conn.close()
    with PerfDb(path) as db:
        assert not db.in_memory and db.lookup(key()) == rec()
    assert Path(path).read_bytes()[68:72] == b"hDNA"


def test_damaged_sqlite_is_repaired_only_at_the_builtin_path(tmp_path, caplog, monkeypatch):
    good = foreign_db(str(tmp_path / "x.db"))
    good.close()
    data = bytearray(Path(tmp_path / "x.db").read_bytes())
    data[100:400] = b"\xff" * 300                                   # garbled schema page
    os.remove(tmp_path / "x.db")
    (tmp_path / "elsewhere.db").write_bytes(bytes(data))
    assert_untouched_in_memory(str(tmp_path / "elsewhere.db"), caplog, what="damaged")
    named = tmp_path / "perf.sqlite3"          # our name, but not known to be ours
    named.write_bytes(bytes(data))
    assert_untouched_in_memory(str(named), caplog, what="damaged")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ours = Path(_perfdb._builtin_default())
    ours.parent.mkdir(parents=True)
    ours.write_bytes(bytes(data))
    with PerfDb(str(ours)) as db:
        assert not db.in_memory
    assert any(n.startswith("perfdb.sqlite3.corrupt-") for n in os.listdir(ours.parent))


# -- empty files, and the atomic creation of a new db ---------------------------------------

MAGIC = b"SQLite format 3\x00"


def listing(folder) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("name", ["notes.txt", "perf.sqlite3"])
def test_empty_file_elsewhere_is_left_untouched(tmp_path, caplog, name):
    """Another tool's empty marker named by $HIPDNN_ASYNC_PERFDB became a 20 KB perf db:
    an empty file was taken for one SQLite had just started. A new db is now published
    whole, so an empty file is ours only at the built-in default path."""
    path = tmp_path / name
    path.write_bytes(b"")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))     # an mtime we would not write
    st = path.stat()
    assert_untouched_in_memory(str(path), caplog, what="an empty file")
    after = path.stat()
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (0, st.st_ino, 1_000_000_000)
    assert path.read_bytes() == b"" and listing(tmp_path) == [name]


def _recording_link(monkeypatch, calls):
    """os.link, recording what each published temporary file looked like."""
    real_link = os.link

    def link(src, dst, *a, **kw):
        src, dst = os.fspath(src), os.fspath(dst)
        with open(src, "rb") as f:
            head = f.read(100)
        calls.append({"src": src, "dst": dst, "dst_existed": os.path.lexists(dst),
                      "head16": head[:16], "app_id": head[68:72],
                      "size": os.path.getsize(src),
                      "side": [s for s in ("-wal", "-shm", "-journal")
                               if os.path.lexists(src + s)]})
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "link", link)


def test_new_db_is_published_whole_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    folder = tmp_path / "new"                    # missing folder and file
    path = folder / "perf.sqlite3"
    calls = []
    _recording_link(monkeypatch, calls)
    with PerfDb(path) as db:
        assert not db.in_memory
        db.store(key(), rec())
        names = listing(folder)
        with open(path, "rb") as f:
            head = f.read(20)
    assert len(calls) == 1
    c = calls[0]
    assert c["dst"] == str(path) and not c["dst_existed"]
    assert os.path.basename(c["src"]).startswith(f"perf.sqlite3.new-{os.getpid()}-")
    # the temporary file was a complete perf db on its own when published
    assert c["head16"] == MAGIC and c["app_id"] == b"hDNA" and c["size"] >= 4096
    assert c["side"] == []
    # only the db and its WAL side files while open: WAL mode is on (header bytes 18-19)
    assert names[0] == "perf.sqlite3" and set(names) <= {
        "perf.sqlite3", "perf.sqlite3-wal", "perf.sqlite3-shm"}
    assert head[:16] == MAGIC and head[18:20] == b"\x02\x02"
    assert listing(folder) == ["perf.sqlite3"]
    assert not any(".new-" in n for n in os.listdir(folder))
    with PerfDb(path) as db:
        assert not db.in_memory and db.lookup(key()) == rec()


def test_without_hard_links_a_new_db_is_renamed_into_place(tmp_path, monkeypatch):
    import errno

    tried = []

    def no_links(src, dst, *a, **kw):
        tried.append(os.path.basename(src))
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    path = tmp_path / "perf.sqlite3"
    with PerfDb(path) as db:
        assert not db.in_memory
        db.store(key(), rec(3.0))
    assert len(tried) == 1 and tried[0].startswith("perf.sqlite3.new-")
    assert listing(tmp_path) == ["perf.sqlite3"]
    assert path.read_bytes()[:16] == MAGIC and path.read_bytes()[68:72] == b"hDNA"
    with PerfDb(path) as db:
        assert db.lookup(key()) == rec(3.0)


def test_a_db_name_near_the_file_name_limit_is_created(tmp_path):
    """A 247-character name leaves room for SQLite's -journal (255 bytes) but not for
    '<name>.new-<pid>-<hex>': the temporary name keeps only the first 200 characters
    (break-it round 2: the db fell back to memory)."""
    path = tmp_path / ("p" * 239 + ".sqlite3")
    with PerfDb(path) as db:
        assert not db.in_memory
        db.store(key(), rec(2.0))
    assert listing(tmp_path) == [path.name]
    with PerfDb(path) as db:
        assert db.lookup(key()) == rec(2.0)


def test_db_published_by_another_process_first_is_used_and_ours_dropped(tmp_path,
                                                                     monkeypatch, caplog):
    """Between our look (missing) and our publish another process publishes its db: our
    link fails, our temporary file is removed, and its db (with its record) is used."""
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    theirs = other_dir / "perf.sqlite3"
    with PerfDb(theirs) as db:
        db.store(key(7), rec(7.0))
    assert listing(other_dir) == ["perf.sqlite3"]
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "perf.sqlite3"
    real_link = os.link
    seen = {}

    def another_process_wins(src, dst, *a, **kw):
        if os.fspath(dst) == str(path) and not seen:
            real_link(theirs, path)              # published whole, as we publish
            seen["ino"] = path.stat().st_ino
            seen["temps"] = [n for n in os.listdir(folder) if ".new-" in n]
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "link", another_process_wins)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with PerfDb(path) as db:
            assert not db.in_memory
            assert db.lookup(key(7)) == rec(7.0)           # their record
            db.store(key(8), rec(8.0))
    assert len(seen["temps"]) == 1                         # ours existed at the race
    assert path.stat().st_ino == seen["ino"] == theirs.stat().st_ino
    assert listing(folder) == ["perf.sqlite3"]             # our temporary file is gone
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    monkeypatch.undo()
    with PerfDb(theirs) as db:                              # one file, two names
        assert db.lookup(key(8)) == rec(8.0)


def test_empty_file_at_the_builtin_path_is_still_taken(tmp_path, monkeypatch, caplog):
    """An older version that crashed while creating the default db left it empty."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ours = Path(_perfdb._builtin_default())
    assert str(ours).startswith(str(tmp_path))
    ours.parent.mkdir(parents=True)
    ours.write_bytes(b"")
    ino = ours.stat().st_ino
    elsewhere = tmp_path / "perfdb.sqlite3"           # same name, not the built-in path
    elsewhere.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with PerfDb(str(ours)) as db:
            assert not db.in_memory
            db.store(key(), rec())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert ours.stat().st_ino == ino                  # written in place
    head = ours.read_bytes()[:100]
    assert head[:16] == MAGIC and head[68:72] == b"hDNA" and ours.stat().st_size >= 4096
    assert listing(ours.parent) == ["perfdb.sqlite3"]
    assert elsewhere.stat().st_size == 0


def test_repair_recreates_the_db_atomically(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    ours = Path(_perfdb._builtin_default())
    ours.parent.mkdir(parents=True)
    ours.write_bytes(b"not a database, " * 64)            # damaged, at our path
    calls = []
    _recording_link(monkeypatch, calls)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with PerfDb(str(ours)) as db:
            assert not db.in_memory
            db.store(key(), rec())
    assert [(c["dst"], c["dst_existed"], c["head16"], c["side"]) for c in calls] == [
        (str(ours), False, MAGIC, [])]
    names = listing(ours.parent)
    aside = [n for n in names if n.startswith("perfdb.sqlite3.corrupt-")]
    assert len(aside) == 1 and (ours.parent / aside[0]).read_bytes() == \
        b"not a database, " * 64
    assert not any(".new-" in n for n in names)
    assert set(names) - set(aside) <= {"perfdb.sqlite3", "perfdb.sqlite3.lock"}
    assert ours.read_bytes()[:16] == MAGIC


NEW_DB_CHILD = textwrap.dedent("""
    import json, os, sys, time
    from hipdnn_async._perfdb import PerfDb, PerfKey, PerfRecord
    path, start, w = sys.argv[1], sys.argv[2], int(sys.argv[3])
    while not os.path.exists(start):
        time.sleep(0.001)
    db = PerfDb(path)
    db.store(PerfKey("cpu", "E", "l", "d", f"p{w}", 0), PerfRecord(f"a{w}", 1.0, 0, 1.0))
    print(json.dumps({"in_memory": db.in_memory, "ino": os.stat(path).st_ino}))
    db.close()
""")


def test_processes_creating_one_new_db_together_share_it(tmp_path):
    folder = tmp_path / "fresh"
    path = folder / "perf.sqlite3"
    start = tmp_path / "go"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "")
                                                  .split(os.pathsep) if p])
    procs = [subprocess.Popen([sys.executable, "-c", NEW_DB_CHILD, str(path), str(start),
                               str(w)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(6)]
    time.sleep(1.0)                               # let them all import and wait
    start.write_text("go")
    outs = [p.communicate(timeout=120) for p in procs]
    results = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "WARNING" not in err and "in-memory" not in err, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert [r["in_memory"] for r in results] == [False] * 6
    assert len({r["ino"] for r in results}) == 1 == len({path.stat().st_ino})
    assert listing(folder) == ["perf.sqlite3"]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert sorted(r[0] for r in conn.execute("SELECT problem FROM perf")) == [
            f"p{w}" for w in range(6)]
    finally:
        conn.close()


# -- 5c: devices and other non-regular files (no -journal beside /dev/null) --------------

@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_dev_null_is_refused_and_gets_no_side_files(caplog):
    before = {s: os.path.lexists("/dev/null" + s) for s in SIDE}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with PerfDb("/dev/null") as db:
            assert db.in_memory
            db.store(key(), rec())
            assert db.lookup(key()) == rec()
    assert {s: os.path.lexists("/dev/null" + s) for s in SIDE} == before
    assert any("character device" in r.getMessage() for r in caplog.records)


def test_directory_and_socket_are_refused(tmp_path, caplog):
    import socket
    (tmp_path / "d").mkdir()
    # a directory is a mistaken name (test_perfdb's trailing-'/' tests): an error
    with pytest.raises(hd.PerfDbError, match="is a directory, not the db file"):
        PerfDb(str(tmp_path / "d"))
    assert os.listdir(tmp_path / "d") == []
    sock_path = str(tmp_path / "s.sqlite3")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(sock_path)
        assert_untouched_in_memory(sock_path, caplog, what="a socket")
    finally:
        s.close()


def test_side_file_that_is_not_regular_is_refused(tmp_path, caplog):
    path = str(tmp_path / "perf.sqlite3")
    with PerfDb(path) as db:
        db.store(key(), rec())
    os.mkfifo(path + "-journal")
    assert_untouched_in_memory(path, caplog, what="a FIFO")


def test_orphan_side_files_of_another_db_are_left_untouched(tmp_path, caplog):
    path = str(tmp_path / "their.db")
    Path(path + "-journal").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + b"\0" * 504)
    assert_untouched_in_memory(path, caplog, what="side files")


# -- 6: a FIFO hangs nothing (child processes with a timeout) ------------------------------

FIFO_CHILD = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import hipdnn_async as hd
    from hipdnn_async import _perfdb
    fifo = sys.argv[1]
    db = hd.PerfDb(fifo)
    g = hd.Graph(io_data_type="float32")
    x = g.tensor(dims=(1, 2, 4, 4), name="x")
    w = g.tensor(dims=(2, 2, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True)
    with hd.Device("cpu", streams=1) as dev:        # the default db: $HIPDNN_ASYNC_PERFDB
        plan = dev.build_sync(g, knobs={"global.benchmarking": 1})
    print(json.dumps({"in_memory": db.in_memory,
                      "default_in_memory": _perfdb.default_perfdb().in_memory,
                      "benchmarked": plan.benchmarked,
                      "warnings": hd.stats()["perfdb_warnings"]}))
""")


def _child(args, env, timeout=90):
    return subprocess.run(args, cwd=ROOT, env=env, timeout=timeout, capture_output=True,
                          text=True)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_as_the_perf_db_hangs_nothing(tmp_path):
    fifo = str(tmp_path / "perf.sqlite3")
    os.mkfifo(fifo)
    before = tree(tmp_path)
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=fifo, HIPDNN_ASYNC_LOG_LEVEL="warn")
    t0 = time.monotonic()
    r = _child([sys.executable, "-c", FIFO_CHILD, fifo], env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"in_memory": True, "default_in_memory": True, "benchmarked": True,
                   "warnings": 1}
    assert "a FIFO" in r.stderr and "in-memory" in r.stderr
    cli = [sys.executable, "-m", "hipdnn_async"]
    r = _child(cli + ["info"], env)
    assert r.returncode == 0, r.stderr[-3000:]
    info = json.loads(r.stdout)
    assert info["perfdb_in_memory"] is True
    r = _child(cli + ["perfdb", "show"], env)
    assert r.returncode == 0 and "(in memory)" in r.stdout and "not usable" in r.stderr
    r = _child(cli + ["perfdb", "clear"], env)
    assert r.returncode == 1 and "nothing done" in r.stderr
    r = _child(cli + ["perfdb", "import", fifo], dict(env, HIPDNN_ASYNC_PERFDB=":memory:"))
    assert r.returncode == 2 and "PerfDbError" in r.stderr and "FIFO" in r.stderr
    r = _child(cli + ["perfdb", "export", fifo], dict(env, HIPDNN_ASYNC_PERFDB=":memory:"))
    assert r.returncode == 2 and "FIFO" in r.stderr
    assert time.monotonic() - t0 < 300
    assert tree(tmp_path) == before


# -- export keeps links and refuses non-regular targets ----------------------------------

def test_export_through_a_symlink_keeps_the_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text('{"format": "hipdnn_async.perfdb", "version": 2, "entries": []}')
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with PerfDb(":memory:") as db:
        db.store(key(), rec())
        assert db.export_json(link) == 1
    assert link.is_symlink() and json.loads(target.read_text())["entries"][0]["problem"] == \
        "problem 0"
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def test_export_to_a_directory_is_refused(tmp_path):
    with PerfDb(":memory:") as db:
        with pytest.raises(hd.PerfDbError, match="a directory"):
            db.export_json(tmp_path)


# -- argument types (issue 10 item 9) ------------------------------------------------------

def test_bytes_and_pathlike_paths_work_other_types_are_perfdb_errors(tmp_path):
    path = tmp_path / "b.sqlite3"
    with PerfDb(os.fsencode(path)) as db:
        assert db.path == str(path) and not db.in_memory
        db.store(key(), rec())
    with PerfDb(path) as db:
        assert db.lookup(key()) == rec()
    for bad in (3, 1.5, ["x"]):
        with pytest.raises(ValueError, match="path must be") as ei:
            PerfDb(bad)
        assert type(ei.value) is hd.PerfDbError and ei.value.code == "INVALID_VALUE"
    for bad in ("", "a\0b"):
        with pytest.raises(hd.PerfDbError, match="empty or holds a NUL"):
            PerfDb(bad)
    with pytest.raises(hd.PerfDbError, match="must be a str"):
        PerfKey(1, "e", "l", "d", "p", 0)


def test_export_never_clobbers_a_file_that_is_not_an_export(tmp_path):
    """Reviewer's F2: `perfdb export FILE` over an existing text file is refused (the file
    is byte-identical after); over an earlier export, or an empty file, it writes."""
    precious = tmp_path / "precious.txt"
    precious.write_bytes(b"precious\n")
    with PerfDb(str(tmp_path / "db.sqlite3")) as db:
        db.store(key(), rec())
        with pytest.raises(hd.PerfDbError, match="not a perf-db export"):
            db.export_json(precious)
        assert precious.read_bytes() == b"precious\n"
        earlier = tmp_path / "earlier.json"
        assert db.export_json(earlier) == 1
        assert db.export_json(earlier) == 1          # replacing an export is fine
        empty = tmp_path / "empty.json"
        empty.write_bytes(b"")
        assert db.export_json(empty) == 1
        assert json.loads(empty.read_text())["entries"][0]["algorithm"] == rec().algorithm


@pytest.mark.parametrize("engine", ["ONEDNN_ENGINE", "CPU_ENGINE"])
def test_a_build_without_benchmarking_creates_no_perf_db(tmp_path, monkeypatch, engine):
    # every build opened the default perf db, creating its file (and folder's db) though
    # only benchmarking reads or writes it on the CPU; now the first build that
    # benchmarks creates it
    g = hd.Graph(io_data_type="float32")
    x = g.tensor(dims=(1, 2, 4, 4), name="x")
    w = g.tensor(dims=(2, 2, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True)
    offered = [e.name for e in hd.engines(g, "cpu")]
    if engine not in offered:
        pytest.skip(f"{engine} is not offered here (offered: {offered})")
    path = tmp_path / "perfdb.sqlite3"
    monkeypatch.setenv("HIPDNN_ASYNC_PERFDB", str(path))
    _perfdb.reset_default_perfdb()
    with hd.Device("cpu", streams=1) as dev:
        assert dev.build_sync(g, engine=engine).engine.name == engine
        assert tree(tmp_path) == {}
        plan = dev.build_sync(g, engine=engine, knobs={"global.benchmarking": 1})
        assert plan.benchmarked and path.exists()
        assert [e["algorithm"] for e in PerfDb(path).entries()] == [str(plan.algorithm)]
