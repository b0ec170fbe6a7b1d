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
