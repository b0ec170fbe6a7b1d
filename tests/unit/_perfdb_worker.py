"""Perf-db stress worker, run by test_perfdb_concurrency.py in a subprocess.

    python _perfdb_worker.py DBPATH WORKER_ID N [START_FILE [N_WORKERS]]

Waits for START_FILE to exist (so that all workers start together), then stores N
distinct keys of its own while looking up keys of the other workers (ids below
N_WORKERS, default 12), checks every
record it reads, and finally checks that all of its own keys read back. Prints one JSON
line with its counts; exits 0 when everything checked out, 1 otherwise. Logging
warnings of the "hipdnn_async" logger go to stderr (the test requires none).
"""
from __future__ import annotations

import json
import logging
import os
import random
import sys
import time

def make_key(worker: int, i: int):
    from hipdnn_async._perfdb import PerfKey
    return PerfKey("cpu", "CPU_ENGINE", "test-libs 1.0", "stress-device",
                   f"CONV_FPROP|worker={worker}|i={i}|x(8,{i},16,16)", 1024 * (i % 3))


def make_record(worker: int, i: int):
    from hipdnn_async._perfdb import PerfRecord
    return PerfRecord(f"alg-{worker}-{i}", 0.001 * (i + 1), worker * 100 + i, 1000.0 + i)


def run(path: str, worker: int, n: int, *, others=range(12), start=None,
        db=None) -> dict:
    """Store n keys for ``worker`` and read others'; return counts and failures."""
    from hipdnn_async._perfdb import PerfDb
    own = db is None
    db = PerfDb(path) if own else db
    rng = random.Random(worker)
    failures: list[str] = []
    seen = 0
    others = [w for w in others if w != worker]
    if start is not None:
        start()
    try:
        for i in range(n):
            db.store(make_key(worker, i), make_record(worker, i))
            j, k = rng.choice(others), rng.randrange(n)
            got = db.lookup(make_key(j, k))
            if got is not None:
                seen += 1
                if got != make_record(j, k):
                    failures.append(f"worker {worker} read {got} for ({j}, {k})")
        for i in range(n):
            got = db.lookup(make_key(worker, i))
            if got != make_record(worker, i):
                failures.append(f"worker {worker} own key {i} reads back {got}")
        if db.in_memory:
            failures.append(f"worker {worker} fell back to an in-memory db")
    finally:
        if own:
            db.close()
    return {"worker": worker, "stored": n, "seen_others": seen, "failures": failures}


def main(argv: list[str]) -> int:
    path, worker, n = argv[1], int(argv[2]), int(argv[3])
    start_file = argv[4] if len(argv) > 4 else None
    n_workers = int(argv[5]) if len(argv) > 5 else 12
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    logging.getLogger("hipdnn_async").setLevel(logging.WARNING)

    def wait_for_start():
        deadline = time.monotonic() + 60
        while start_file and not os.path.exists(start_file):
            if time.monotonic() > deadline:
                raise TimeoutError(f"start file {start_file} never appeared")
            time.sleep(0.002)

    result = run(path, worker, n, start=wait_for_start, others=range(n_workers))
    print(json.dumps(result))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
