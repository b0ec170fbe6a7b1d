"""The store: ``PerfDb``, one SQLite connection behind a lock, whose statements retry
while the db is busy, repair a file found broken, and fall back to an in-memory db when
the file cannot be used; and the process-wide default db."""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref

from .. import _fork
from .._errors import PerfDbError
from .._log import warn_env_once
from ._exchange import read_export, write_export
from ._paths import (MEMORY, PERFDB_ENV, REFUSED, builtin_default, default_path,
                     env_refusal, names_directory)
from ._records import FIELDS, KEY_FIELDS, RECORD_FIELDS, PerfKey, PerfRecord, check_path, error
from ._schema import FORMAT, SCHEMA, SCHEMA1_ENGINE, Newer
from ._sqlite import is_busy, retry_busy, upsert, write_txn
from ._stats import count, warn_once
from ._triage import Unusable, open_file, repair

__all__ = ["PerfDb", "default_perfdb", "reset_default_perfdb"]


class PerfDb:
    """A SQLite perf db of benchmark winners, safe for threads and processes.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The db file; ``":memory:"`` for a private in-memory db. Default
        :func:`default_path` (``$HIPDNN_ASYNC_PERFDB`` or
        ``~/.config/hipdnn_async/perfdb.sqlite3``); a ``$HIPDNN_ASYNC_PERFDB`` that is not
        an absolute path (after ``~``) or names a directory is refused with a
        ``RuntimeWarning`` (once per process and value) and the db is in memory
        (:func:`env_refusal`, :func:`names_directory`). A relative `path` given
        here is taken from the current directory, as ``open`` does. Missing parent
        directories are created.

    Raises
    ------
    PerfDbError
        `path` is not a str, bytes or os.PathLike, is empty or holds a NUL, is a
        SQLite URI (``file:...``), or names a directory (ends in a path separator, ``.``
        or ``..``, or is an existing directory: :func:`names_directory`; such a
        ``$HIPDNN_ASYNC_PERFDB`` is refused with a ``RuntimeWarning`` and the db is in
        memory, as a relative one is).

    Attributes
    ----------
    path : str
        The file asked for (absolute), or ``":memory:"``.
    in_memory : bool
        True when the db lives in memory: asked for, or fallen back to because the
        file could not be used (a warning was logged once).

    Notes
    -----
    One record per key. ``store`` replaces whatever is there (the last store wins;
    a provider that re-tunes, e.g. because a stored algorithm no longer applies,
    overwrites it). ``import_json`` merges by ``measured_at``: an imported entry older
    than the stored one does not replace it. ``close()`` releases the connection; a
    later call reopens it.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        refusal = why = None        # why the default path is not used; said to the user
        from_env = False
        if path is None:
            path = default_path()
            from_env = path != builtin_default()
            # not a db file's absolute path: the db is in memory, with a warning for a
            # $HIPDNN_ASYNC_PERFDB shown whatever the logging level (every process retunes)
            refusal = env_refusal(path)
            directory = None if refusal else names_directory(path)
            if refusal is not None:
                why = REFUSED
            elif directory is not None:
                refusal = why = directory if from_env else (
                    f"is a directory where the built-in default db file belongs; remove "
                    f"it, or set ${PERFDB_ENV} to a db file's path")
        else:
            path = check_path("PerfDb", path)
            directory = names_directory(path)
            if directory is not None:
                raise error(f"PerfDb: path {path!r} {directory}")
        if refusal is None and path[:5].lower() == "file:":
            # sqlite3 would take it as a file name here (no uri=True): a folder named
            # "file:" in the working directory and a db named "x.db?mode=ro" in it
            raise error(f"PerfDb: path {path!r} is a SQLite URI, which is not taken; give "
                        "the file's path")
        if refusal is None:
            path = path if path == MEMORY else os.path.abspath(os.path.expanduser(path))
        self.path: str = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._fallback = self.path == MEMORY
        self._seed: list[tuple] = []      # rows carried into a fallback in-memory db
        if refusal is not None:
            self._go_memory(refusal, key=("refused", path))
            if from_env:
                warn_env_once(PERFDB_ENV, path, f"{why}; using an in-memory perf db "
                              "instead (results will not persist)", log=False)
        with _fork.holding(_registry_lock):     # not half-open at a fork (_before_fork)
            _dbs.add(self)
            with self._lock:
                self._ensure_open()

    # -- opening ------------------------------------------------------------

    @property
    def in_memory(self) -> bool:
        """True when the db lives in memory (asked for, or fallen back to)."""
        return self._fallback

    def _ensure_open(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if not self._fallback:
            try:
                self._conn = open_file(self.path)
                return self._conn
            except Unusable as exc:
                if exc.seed is not None:      # rows still readable in a read-only place
                    self._seed = exc.seed
                self._go_memory(str(exc), key=("unusable", self.path))
            except Newer as exc:
                self._go_memory(str(exc), key=("newer", self.path))
        self._conn = self._open_memory()
        return self._conn

    def _open_memory(self) -> sqlite3.Connection:
        conn = sqlite3.connect(MEMORY, isolation_level=None, check_same_thread=False)
        conn.executescript(SCHEMA)
        conn.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
        if self._seed:
            conn.executemany(f"INSERT OR REPLACE INTO perf VALUES ({','.join('?' * len(FIELDS))})",
                             self._seed)
            self._seed = []
        return conn

    def _go_memory(self, reason: str, *, key) -> None:
        """Switch to an in-memory db for the rest of this object's life (warn once)."""
        warn_once(key, "perf db %s: %s; using an in-memory perf db instead "
                  "(results will not persist)", self.path, reason)
        self._fallback = True

    # -- running statements -------------------------------------------------

    def _run(self, what: str, op, *, default):
        """Run ``op(conn)`` with busy retries; repair or fall back on file failures.

        Returns ``default`` when the db stays locked past the retry budget (logged).
        """
        with _fork.holding(self._lock):
            for _ in range(3):
                conn = self._ensure_open()
                try:
                    return retry_busy(lambda: op(conn))
                except sqlite3.OperationalError as exc:
                    if self._fallback:
                        raise
                    if is_busy(exc):
                        warn_once(("busy", self.path, what), "perf db %s: %s gave up, "
                                  "the db stayed locked (%s)", self.path, what, exc)
                        return default
                    # I/O error, read-only, cannot open, disk full: keep tuning in memory.
                    self._drop_connection(seed=True)
                    self._go_memory(f"{what} failed ({exc})", key=("unusable", self.path))
                except sqlite3.DatabaseError as exc:
                    if self._fallback:
                        raise
                    self._drop_connection(seed=False)
                    try:
                        repair(self.path, f"{what} failed ({exc})")
                    except Unusable as exc2:
                        self._go_memory(str(exc2), key=("unusable", self.path))
            return default

    def _drop_connection(self, *, seed: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if seed:
            with contextlib.suppress(sqlite3.Error):
                self._seed = conn.execute(f"SELECT {','.join(FIELDS)} FROM perf").fetchall()
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    # -- public API ---------------------------------------------------------

    def lookup(self, key: PerfKey, *, schema1: bool = False) -> PerfRecord | None:
        """Return the stored record for ``key``, or None (counts a hit or a miss).

        Parameters
        ----------
        key : PerfKey
        schema1 : bool, optional
            Also accept an entry upgraded from schema 1 (engine ``SCHEMA1_ENGINE``) with
            the same other fields, and claim it for ``key.engine``. Pass True only from
            the engine that was its provider's single engine when schema 1 was written.
        """
        if not isinstance(key, PerfKey):
            raise error(f"PerfDb.lookup: key must be a PerfKey; got {type(key).__name__}")
        args = tuple(getattr(key, f) for f in KEY_FIELDS)
        where = " AND ".join(f"{f} = ?" for f in KEY_FIELDS if f != "engine")
        others = args[:1] + args[2:]
        legacy = schema1 and key.engine != SCHEMA1_ENGINE

        def op(conn):
            row = conn.execute(f"SELECT {','.join(RECORD_FIELDS)} FROM perf WHERE {where} "
                               "AND engine = ?", others + (key.engine,)).fetchone()
            if row is None and legacy:
                row = conn.execute(f"SELECT {','.join(RECORD_FIELDS)} FROM perf WHERE "
                                   f"{where} AND engine = ?", others + (SCHEMA1_ENGINE,)).fetchone()
                if row is not None:   # claim it: it is this engine's from now on
                    write_txn(conn, lambda c: c.execute(
                        f"UPDATE OR IGNORE perf SET engine = ? WHERE {where} AND engine = ?",
                        (key.engine,) + others + (SCHEMA1_ENGINE,)))
            return row

        row = self._run("lookup", op, default=None)
        record = None
        if row is not None:
            try:
                record = PerfRecord(*row)
            except PerfDbError as exc:   # a row some other tool wrote: treat as a miss
                warn_once(("badrow", self.path), "perf db %s: ignoring an invalid "
                          "entry (%s)", self.path, exc)
        count("perfdb_misses" if record is None else "perfdb_hits")
        return record

    def store(self, key: PerfKey, record: PerfRecord) -> None:
        """Insert or replace the record for ``key`` (the last store wins)."""
        if not isinstance(key, PerfKey) or not isinstance(record, PerfRecord):
            raise error(f"PerfDb.store: need a PerfKey and a PerfRecord; got "
                        f"{type(key).__name__}, {type(record).__name__}")
        row = tuple(getattr(key, f) for f in KEY_FIELDS) + \
            tuple(getattr(record, f) for f in RECORD_FIELDS)
        self._run("store", lambda conn: write_txn(conn, lambda c: upsert(c, [row])),
                  default=None)
        count("perfdb_stores")

    def entries(self) -> list[dict]:
        """Return every entry as a JSON-ready dict (key fields then record fields)."""
        rows = self._run("entries", lambda conn: conn.execute(
            f"SELECT {','.join(FIELDS)} FROM perf ORDER BY "
            f"{','.join(KEY_FIELDS)}").fetchall(), default=[])
        return [dict(zip(FIELDS, r)) for r in rows]

    def __bool__(self) -> bool:
        return True       # an empty db is still a db (``db or default_perfdb()``)

    def __len__(self) -> int:
        return self._run("count", lambda conn: conn.execute(
            "SELECT count(*) FROM perf").fetchone()[0], default=0)

    def clear(self) -> int:
        """Delete every entry; return how many there were."""
        return self._run("clear", lambda conn: write_txn(
            conn, lambda c: c.execute("DELETE FROM perf").rowcount), default=0)

    def export_json(self, path: str | os.PathLike) -> int:
        """Write every entry to a JSON file (atomically); return the number written.

        The file is replaced by a rename, so an existing target must be a regular file
        (a symlink is followed: the link stays and its target is rewritten); a FIFO, a
        device or a directory is refused, and so is a SQLite file (the db itself?) and any
        non-empty file that is not an earlier export (nothing of the user's is clobbered).

        Raises
        ------
        PerfDbError
            (a ``ValueError``) The target is not a regular file, is a SQLite file, or
            exists and is not an earlier export.
            Also: its directory does not exist.
        DeviceError
            Code ``INVALID_VALUE``: the operating system could not write it (permissions,
            a full disk, an I/O error).
        """
        path = os.path.realpath(check_path("PerfDb.export_json", path))
        return write_export(path, self.entries, db_path=self.path)

    def import_json(self, path: str | os.PathLike) -> int:
        """Merge the entries of a JSON file written by :meth:`export_json`.

        Every entry is checked before anything is written (all or nothing). An entry
        older than the one stored for its key does not replace it.

        Returns
        -------
        int
            Number of entries in the file.

        Raises
        ------
        PerfDbError
            (a ``ValueError``) The file is missing or not a regular file, is not JSON, is
            not a perf db export, or an entry has a missing, extra or mistyped field (the
            message names the file, the entry index and the field).
        DeviceError
            Code ``INVALID_VALUE``: the operating system could not read the file
            (permissions, an I/O error).
        """
        rows = read_export(check_path("PerfDb.import_json", path))
        if rows:
            self._run("import", lambda conn: write_txn(
                conn, lambda c: upsert(c, rows, keep_newer=True)), default=None)
        return len(rows)

    def close(self) -> None:
        """Release the SQLite connection (idempotent); a later call reopens it.

        An in-memory db loses its content on close.
        """
        with _fork.holding(self._lock):
            self._drop_connection(seed=False)

    def __enter__(self) -> "PerfDb":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PerfDb(path={self.path!r}, in_memory={self.in_memory})"


_default: PerfDb | None = None
_default_source: str | None = None        # the default_path() value _default was opened for
_default_lock = threading.RLock()
_registry_lock = threading.RLock()
_dbs: "weakref.WeakSet[PerfDb]" = weakref.WeakSet()


# Fork. Every statement runs under its db's lock. SQLite must not be inside a call on a
# connection at a fork, nor may the child use that connection ("How To Corrupt An SQLite
# Database File", sqlite.org/howtocorrupt.html, 2.6). So the hooks take the module's
# locks and every db's lock before the fork, in the order the code takes them (a
# statement running in another thread finishes first: within SQLite's busy timeout plus
# the retry budget, BUSY_TIMEOUT_MS and _RETRY_BUDGET_S, where another process holds the
# db locked), and release them after it, in parent and child. The child then closes each
# file connection, idle, that was the parent's (in WAL mode the parent's own lock on the
# file keeps that close from checkpointing under it); its next call opens its own. All
# are RLocks: a fork by their holder (a logging handler called while a db opens) goes
# through, and the connection of a db this thread was using at the fork is left to it.
# An in-memory db keeps its connection: the child has its own copy of that memory.
def _before_fork() -> None:
    _default_lock.acquire()
    _registry_lock.acquire()
    for db in list(_dbs):
        _in_use.append(db._lock._is_owned())
        db._lock.acquire()
        _held_at_fork.append(db)


def _after_fork_in_parent() -> None:
    while _held_at_fork:
        _held_at_fork.pop()._lock.release()
    _in_use.clear()
    _registry_lock.release()
    _default_lock.release()


def _after_fork_in_child() -> None:
    for db, in_use in zip(_held_at_fork, _in_use):
        db._lock.release()
        if not in_use and db._conn is not None and not db._fallback:
            with contextlib.suppress(sqlite3.Error):
                db._conn.close()
            db._conn = None
    _held_at_fork.clear()
    _in_use.clear()
    _registry_lock.release()
    _default_lock.release()


_held_at_fork: list = []      # the dbs whose locks _before_fork took
_in_use: list = []            # for each, whether this thread held it already
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def default_perfdb() -> PerfDb:
    """Return the process-wide PerfDb at :func:`default_path` (reopened if it changed)."""
    global _default, _default_source
    path = default_path()
    with _fork.holding(_default_lock):
        # compared as the value read, not as PerfDb.path (made absolute and normalised):
        # '/x//db' or '/x/./db' would otherwise reopen, and retune, at every call
        if _default is None or _default_source != path:
            # An old default may still be held by plans; it stays usable and is closed
            # when the last reference goes.
            _default, _default_source = PerfDb(), path    # PerfDb() refuses what it must
        return _default


def reset_default_perfdb() -> None:
    """Close and forget the process-wide PerfDb (the next call reopens)."""
    global _default
    with _fork.holding(_default_lock):
        if _default is not None:
            _default.close()
        _default = None
