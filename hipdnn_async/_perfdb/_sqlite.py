"""SQLite statements under contention: retries on "database is locked"/"busy" with
jittered backoff, short ``BEGIN IMMEDIATE`` write transactions, and the one upsert."""
from __future__ import annotations

import contextlib
import random
import sqlite3
import time

from ._records import FIELDS, KEY_FIELDS, RECORD_FIELDS

__all__ = ["BUSY_TIMEOUT_MS", "is_busy", "retry_busy", "upsert", "write_txn"]

BUSY_TIMEOUT_MS = 10_000              # SQLite's own wait on a lock, per statement
_RETRY_BUDGET_S = 30.0                # our retries on top of busy_timeout

# SQLite primary result codes (sqlite3.h).
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def is_busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite saying the db is locked or busy."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if _primary_code(exc) in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return True
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def retry_busy(fn, *, budget_s: float = _RETRY_BUDGET_S):
    """Call ``fn()``; on "database is locked"/"busy" retry with jittered backoff."""
    deadline = time.monotonic() + budget_s
    delay = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.5)


def write_txn(conn: sqlite3.Connection, fn):
    """Run ``fn(conn)`` inside BEGIN IMMEDIATE ... COMMIT (rolled back on error)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return result


def upsert(conn: sqlite3.Connection, rows: list[tuple], *, keep_newer: bool = False) -> None:
    """Insert or replace rows; with keep_newer an older measurement does not replace."""
    conn.executemany(
        f"INSERT INTO perf ({','.join(FIELDS)}) VALUES ({','.join('?' * len(FIELDS))}) "
        f"ON CONFLICT ({','.join(KEY_FIELDS)}) DO UPDATE SET "
        + ", ".join(f"{f} = excluded.{f}" for f in RECORD_FIELDS)
        + (" WHERE excluded.measured_at >= perf.measured_at" if keep_newer else ""), rows)
