"""Perf db under concurrent writers: 8 processes and 4 threads on one fresh file."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import hipdnn_async
from hipdnn_async._perfdb import PerfDb

HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = HERE / "_perfdb_worker.py"
N_PROCS, N_THREADS, N_KEYS = 8, 4, 40

_spec = importlib.util.spec_from_file_location("_perfdb_worker", WORKER_SCRIPT)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)


def _env():
    env = dict(os.environ)
    # The subprocesses import the same hipdnn_async this test imported.
    root = str(Path(hipdnn_async.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    for var in ("HIPDNN_ASYNC_LOG_LEVEL", "HIPDNN_ASYNC_LOG_FILE"):
        env.pop(var, None)
    return env


@pytest.mark.slow
def test_processes_and_threads_share_one_db(tmp_path, caplog):
    path = str(tmp_path / "shared" / "perf.sqlite3")       # created by the race itself
    start_file = tmp_path / "go"
    procs = [subprocess.Popen(
        [sys.executable, str(WORKER_SCRIPT), path, str(w), str(N_KEYS), str(start_file),
         str(N_PROCS + N_THREADS)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        for w in range(N_PROCS)]

    # Threads 0 and 1 share one PerfDb object; threads 2 and 3 open their own.
    go = threading.Event()
    results: dict[int, dict] = {}
    errors: list[BaseException] = []
    shared = None

    def thread_main(w, db):
        try:
            results[w] = worker.run(path, w, N_KEYS, start=go.wait, db=db,
                                    others=range(N_PROCS + N_THREADS))
        except BaseException as exc:  # reported below, never lost in the thread
            errors.append(exc)

    try:
        with caplog.at_level(logging.WARNING, logger="hipdnn_async"):
            shared = PerfDb(path)
            threads = [threading.Thread(target=thread_main,
                                        args=(N_PROCS + t, shared if t < 2 else None))
                       for t in range(N_THREADS)]
            for t in threads:
                t.start()
            start_file.write_text("go")
            go.set()
            for t in threads:
                t.join(60)
            outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if shared is not None:
            shared.close()

    assert not errors, errors
    seen = 0
    for w, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"worker {w} exit {p.returncode}:\n{out}\n{err}"
        res = json.loads(out.strip().splitlines()[-1])
        assert res["failures"] == [] and res["stored"] == N_KEYS
        seen += res["seen_others"]
        assert "WARNING" not in err, err
    for w in range(N_PROCS, N_PROCS + N_THREADS):
        assert results[w]["failures"] == [], results[w]["failures"]
    print(f"cross-worker reads that hit: {seen}")
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []

    with PerfDb(path) as db:
        assert not db.in_memory
        entries = db.entries()
    problems = [e["problem"] for e in entries]
    expected = {worker.make_key(w, i).problem
                for w in range(N_PROCS + N_THREADS) for i in range(N_KEYS)}
    assert len(problems) == len(expected)           # every key exactly once
    assert set(problems) == expected
    for e in entries:
        w = int(e["problem"].split("worker=")[1].split("|")[0])
        i = int(e["problem"].split("|i=")[1].split("|")[0])
        assert e["algorithm"] == worker.make_record(w, i).algorithm


@pytest.mark.slow
def test_writers_killed_mid_write_leave_a_usable_db(tmp_path, caplog):
    """SIGKILL to processes in the middle of their writes (issue 10: 8 benchmarking
    processes with kill -9): the file stays ours and sound (quick_check ok, nothing moved
    aside), every record in it reads back as written, and a new process tunes on it."""
    import signal
    import sqlite3
    import time

    path = str(tmp_path / "perf.sqlite3")
    PerfDb(path).close()
    start_file = tmp_path / "go"
    for round_ in range(3):
        procs = [subprocess.Popen([sys.executable, str(WORKER_SCRIPT), path, str(w),
                                   "100000", str(start_file), "4"],
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for w in range(4)]
        start_file.write_text("go")
        deadline = time.monotonic() + 60     # until each has stored something, at least
        while time.monotonic() < deadline:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                n = conn.execute("SELECT count(*) FROM perf").fetchone()[0]
            finally:
                conn.close()
            if n >= 20 * (round_ + 1):
                break
            time.sleep(0.05)
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.communicate(timeout=60)
            assert p.returncode == -signal.SIGKILL
        start_file.unlink()
    assert sorted(os.listdir(tmp_path)) == sorted(
        n for n in ("perf.sqlite3", "perf.sqlite3-wal", "perf.sqlite3-shm")
        if (tmp_path / n).exists())                        # nothing moved aside
    with caplog.at_level(logging.WARNING, logger="hipdnn_async"):
        with PerfDb(path) as db:
            assert not db.in_memory
            entries = db.entries()
            assert len(entries) >= 60
            for e in entries:                              # each record as its worker wrote it
                w, i = (int(v.split("=")[1]) for v in e["problem"].split("|")[1:3])
                want = worker.make_record(w, i)
                assert (e["algorithm"], e["time_ms"], e["workspace_bytes"]) == (
                    want.algorithm, want.time_ms, want.workspace_bytes)
            assert db._conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_db_created_by_another_process_while_we_open_it_is_used(tmp_path, monkeypatch,
                                                                   caplog):
    """The moment another process creates the db between our check that the file is
    missing and our look for its side files: the file (published whole, as _create does)
    and then its -wal appear. That was taken for side files of a missing db, and this
    PerfDb fell back to memory with a warning (a worker of
    test_processes_and_threads_share_one_db can meet it under load)."""
    import os.path
    import sqlite3
    path = str(tmp_path / "perf.sqlite3")
    PerfDb(str(tmp_path / "theirs.sqlite3")).close()     # another process's new db
    real_exists = os.path.exists
    raced = []
    held = []

    def exists_then_another_process_creates_it(p):
        answer = real_exists(p)
        if os.fspath(p) == path and not raced:
            raced.append(answer)
            os.link(str(tmp_path / "theirs.sqlite3"), path)   # published whole,
            conn = sqlite3.connect(path)                      # then opened: its -wal
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("COMMIT")
            held.append(conn)
        return answer

    monkeypatch.setattr(os.path, "exists", exists_then_another_process_creates_it)
    with caplog.at_level(logging.WARNING, logger="hipdnn_async"):
        db = PerfDb(path)
        try:
            db.store(worker.make_key(0, 0), worker.make_record(0, 0))
            assert db.lookup(worker.make_key(0, 0)) == worker.make_record(0, 0)
            assert not db.in_memory
        finally:
            db.close()
    assert raced == [False]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    for conn in held:
        conn.close()
    monkeypatch.undo()
    with PerfDb(path) as again:                     # the record is in the file
        assert again.lookup(worker.make_key(0, 0)) == worker.make_record(0, 0)
