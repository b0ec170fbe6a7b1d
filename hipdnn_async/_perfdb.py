"""The persistent performance database: benchmark winners in one SQLite file.

One row per :class:`PerfKey` (provider, engine, library versions, device, problem
signature, workspace limit) holds the winning algorithm, its time and workspace. The file is
``$HIPDNN_ASYNC_PERFDB`` or ``~/.config/hipdnn_async/perfdb.sqlite3``; ``":memory:"``
selects a private in-memory db.

What breaks MIOpen's dbs, and what this module does about it (ROCm/MIOpen #1878,
#114, #2214, #124; pytorch #60477):

- Concurrent writers (threads, processes, jobs sharing ``$HOME``): WAL journal,
  ``busy_timeout``, every write a short ``BEGIN IMMEDIATE`` transaction, retries with
  backoff on "database is locked"/"busy"; one connection per ``PerfDb`` behind a lock.
- A corrupt, truncated or foreign file: detected at open (``PRAGMA quick_check``,
  ``user_version`` and a ``meta`` marker) or on first use, moved aside to
  ``<path>.corrupt-<timestamp>`` and recreated, with one warning.
- A location that cannot be written (read-only file or directory, a path that is a
  directory, a parent that cannot be created, a full or failing disk): one warning and
  an in-memory db (seeded with what could still be read), so tuning keeps working.
- A db written by a newer schema: left untouched; an in-memory db is used.
- A db of schema 1 (before entries named their engine): upgraded in place, once, with a
  note; its entries keep engine ``""`` until the engine that wrote them (its provider's
  only engine then) claims them at its first lookup (``PerfDb.lookup(..., schema1=True)``).

``lookup`` and ``store`` never raise for any of these conditions.

This module imports only the stdlib and ``_errors``.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import numbers
import os
import pathlib
import random
import sqlite3
import stat
import sys
import threading
import time
from dataclasses import dataclass, field

from ._errors import DeviceError, PerfDbError

try:  # POSIX advisory lock, used only around repair of a broken file.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = [
    "PerfKey",
    "PerfRecord",
    "PerfDb",
    "SCHEMA_VERSION",
    "SCHEMA1_ENGINE",
    "PERFDB_ENV",
    "default_path",
    "env_refusal",
    "default_perfdb",
    "reset_default_perfdb",
    "stats",
    "count",
    "reset_stats",
    "cli_show",
    "cli_clear",
    "cli_export",
    "cli_import",
]

_logger = logging.getLogger("hipdnn_async")

PERFDB_ENV = "HIPDNN_ASYNC_PERFDB"
SCHEMA_VERSION = 2
SCHEMA1_ENGINE = ""                   # the engine of entries upgraded from schema 1
_FORMAT = "hipdnn_async.perfdb"       # meta 'format' value and export 'format' field
_BUSY_TIMEOUT_MS = 10_000             # SQLite's own wait on a lock, per statement
_RETRY_BUDGET_S = 30.0                # our retries on top of busy_timeout
_MEMORY = ":memory:"

_KEY_FIELDS = ("provider", "engine", "library_versions", "device", "problem", "workspace_limit")
_RECORD_FIELDS = ("algorithm", "time_ms", "workspace_bytes", "measured_at")
_FIELDS = _KEY_FIELDS + _RECORD_FIELDS
_STR_FIELDS = ("provider", "engine", "library_versions", "device", "problem", "algorithm")
# Schema 1 (hipdnn_async 0.1.0): the same columns without ``engine``.
_SCHEMA1_FIELDS = tuple(f for f in _FIELDS if f != "engine")

# Our SQLite application_id (``PRAGMA application_id``, bytes 68-71 of the file header,
# https://www.sqlite.org/fileformat.html#application_id): "hDNA". A file carrying it is
# ours without opening it; one carrying another non-zero id is another program's.
_APPLICATION_ID = 0x68444E41

_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE perf (
    provider         TEXT    NOT NULL,
    engine           TEXT    NOT NULL,
    library_versions TEXT    NOT NULL,
    device           TEXT    NOT NULL,
    problem          TEXT    NOT NULL,
    workspace_limit  INTEGER NOT NULL,
    algorithm        TEXT    NOT NULL,
    time_ms          REAL    NOT NULL,
    workspace_bytes  INTEGER NOT NULL,
    measured_at      REAL    NOT NULL,
    PRIMARY KEY (provider, engine, library_versions, device, problem, workspace_limit)
);
PRAGMA user_version = {SCHEMA_VERSION};
PRAGMA application_id = {_APPLICATION_ID};
"""

# SQLite primary result codes (sqlite3.h).
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6


# ---------------------------------------------------------------------------
# Keys and records
# ---------------------------------------------------------------------------

def _error(message: str) -> PerfDbError:
    """The perf db's error for a bad argument, file or entry (a ``ValueError``)."""
    return PerfDbError(message)


def _os_error(message: str) -> DeviceError:
    """The perf db's error for the operating system failing to read or write a file the
    user named (permissions, a full disk): a ``DeviceError``, code INVALID_VALUE."""
    return DeviceError(message, code="INVALID_VALUE")


# SQLite INTEGER is a signed 64-bit integer (sqlite.org/datatype3.html).
_INT_MAX = (1 << 63) - 1


def _encodable(value: str) -> bool:
    """Whether SQLite can store `value` (UTF-8: no lone surrogates such as '\\udcff')."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_str(owner: str, name: str, value) -> str:
    if not isinstance(value, str):
        raise _error(f"{owner}: field '{name}' must be a str; got "
                     f"{type(value).__name__} {value!r}")
    if not _encodable(value):
        raise _error(f"{owner}: field '{name}' must be valid Unicode text (no lone "
                     f"surrogates); got {value!r}")
    return value


def _check_int(owner: str, name: str, value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise _error(f"{owner}: field '{name}' must be an int; got "
                     f"{type(value).__name__} {value!r}")
    value = int(value)
    if not 0 <= value <= _INT_MAX:
        raise _error(f"{owner}: field '{name}' must be in [0, 2**63 - 1]; got {value}")
    return value


def _check_path(owner: str, path) -> str:
    """`path` (str, bytes or os.PathLike) as a str, or a PerfDbError naming what it is."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise _error(f"{owner}: path must be a str, bytes or os.PathLike; got "
                     f"{type(path).__name__} {path!r}")
    try:
        path = os.fsdecode(path)
    except TypeError as exc:            # an os.PathLike whose __fspath__ returns junk
        raise _error(f"{owner}: path {path!r}: {exc}") from None
    if not path or "\x00" in path:
        raise _error(f"{owner}: path {path!r} is empty or holds a NUL character")
    return path


def _check_float(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _error(f"{owner}: field '{name}' must be a number; got "
                     f"{type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise _error(f"{owner}: field '{name}' must be finite and >= 0; got {value}")
    return value


@dataclass(frozen=True)
class PerfKey:
    """What a benchmark result is valid for.

    Parameters
    ----------
    provider : str
        Provider name, e.g. ``"cpu"``.
    engine : str
        Engine name, e.g. ``"CPU_ENGINE"``: two engines of one provider keep separate
        records for the same problem.
    library_versions : str
        Versions of the libraries that ran the kernels (e.g. ``"numpy 2.1"``).
    device : str
        Device model plus driver/runtime version where one exists.
    problem : str
        Full problem signature text (``Match.signature``: pattern, dims, strides, dtypes).
    workspace_limit : int
        Workspace limit in force, in bytes (a different limit is a different entry).
    """

    provider: str
    engine: str
    library_versions: str
    device: str
    problem: str
    workspace_limit: int

    def __post_init__(self):
        for name in _KEY_FIELDS[:5]:
            _check_str("PerfKey", name, getattr(self, name))
        object.__setattr__(self, "workspace_limit",
                           _check_int("PerfKey", "workspace_limit", self.workspace_limit))


@dataclass(frozen=True)
class PerfRecord:
    """A benchmark winner.

    Parameters
    ----------
    algorithm : str
        Provider's algorithm name.
    time_ms : float
        Measured time in milliseconds.
    workspace_bytes : int
        Workspace the algorithm needs, in bytes.
    measured_at : float, optional
        When it was measured, unix seconds. Default: now.
    """

    algorithm: str
    time_ms: float
    workspace_bytes: int
    measured_at: float = field(default_factory=time.time)

    def __post_init__(self):
        _check_str("PerfRecord", "algorithm", self.algorithm)
        object.__setattr__(self, "time_ms", _check_float("PerfRecord", "time_ms", self.time_ms))
        object.__setattr__(self, "workspace_bytes",
                           _check_int("PerfRecord", "workspace_bytes", self.workspace_bytes))
        object.__setattr__(self, "measured_at",
                           _check_float("PerfRecord", "measured_at", self.measured_at))


# ---------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------

_COUNTER_NAMES = ("perfdb_hits", "perfdb_misses", "perfdb_stores", "benchmarks_run",
                  "perfdb_warnings")
_counters = dict.fromkeys(_COUNTER_NAMES, 0)
_counters_lock = threading.Lock()


def count(name: str, n: int = 1) -> None:
    """Add ``n`` to the process-wide counter ``name`` (e.g. ``"benchmarks_run"``)."""
    with _counters_lock:
        _counters[name] = _counters.get(name, 0) + n


def stats() -> dict[str, int]:
    """Return a copy of the process-wide counters (hits, misses, stores, benchmarks)."""
    with _counters_lock:
        return dict(_counters)


def reset_stats() -> None:
    """Set every counter back to 0."""
    with _counters_lock:
        for k in list(_counters):
            _counters[k] = 0


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

_warned: set = set()
_warned_lock = threading.Lock()


def _warn_once(key, msg: str, *args) -> None:
    """Log a warning on the 'hipdnn_async' logger the first time ``key`` is seen."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    count("perfdb_warnings")  # visible in hd.stats() even while logging is off
    _logger.warning(msg, *args)


def _primary_code(exc: BaseException) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _is_busy(exc: BaseException) -> bool:
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if _primary_code(exc) in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return True
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


def _retry_busy(fn, *, budget_s: float = _RETRY_BUDGET_S):
    """Call ``fn()``; on "database is locked"/"busy" retry with jittered backoff."""
    deadline = time.monotonic() + budget_s
    delay = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.5)


def _write_txn(conn: sqlite3.Connection, fn):
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


_SQLITE_MAGIC = b"SQLite format 3\x00"
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def _ro_uri(path: str) -> str:
    """A read-only, immutable SQLite URI for the absolute ``path``.

    The whole path is percent-encoded (``pathlib``'s ``as_uri``: ``%``, ``?``, ``#``,
    spaces, non-ASCII), so the probe opens exactly this file; ``immutable=1`` takes no
    locks and creates no ``-wal``/``-shm``/``-journal`` beside it (sqlite.org/uri.html).
    """
    return pathlib.Path(path).as_uri() + "?mode=ro&immutable=1"


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _read_head(path: str, n: int = 100) -> bytes | None:
    """The first ``n`` bytes of a regular file, or None (missing, unreadable, or not a
    regular file: a FIFO is opened non-blocking and refused by fstat, never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, n)
    except OSError:
        return None
    finally:
        os.close(fd)


def _regular_or_missing(path: str, what: str) -> None:
    """Raise _Unusable when ``path`` exists and is not a regular file (never opened)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):   # the directory checks say why
        return
    except OSError as exc:
        raise _Unusable(f"cannot stat {what} {path!r} ({exc.strerror or exc})")
    if not stat.S_ISREG(st.st_mode):
        raise _Unusable(f"{what} {path!r} is {_file_kind(st.st_mode)}, not a regular file; "
                        "it is not opened")


def _is_export(path: str) -> bool:
    """Whether ``path`` holds a JSON export of a perf db (what ``export_json`` writes), the
    only existing file an export may replace."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == _FORMAT


def _builtin_default() -> str:
    return os.path.join(os.path.expanduser("~"), ".config", "hipdnn_async", "perfdb.sqlite3")


def default_path() -> str:
    """Return ``$HIPDNN_ASYNC_PERFDB`` or ``~/.config/hipdnn_async/perfdb.sqlite3``.

    The variable's value is ``":memory:"`` or a path, ``~`` expanded. A value that is still
    not absolute (``perf.db``, a SQLite URI such as ``file:x.db?mode=memory``) is returned
    as it is: :func:`env_refusal` says why it is not used (it would follow each process's
    working directory), and the default db is then in memory.
    """
    env = os.environ.get(PERFDB_ENV, "").strip()
    if env:
        return env if env == _MEMORY else os.path.expanduser(env)
    return _builtin_default()


def env_refusal(path: str) -> str | None:
    """Why ``path`` (from :func:`default_path`) is not used as the default perf db, or None:
    a relative ``$HIPDNN_ASYNC_PERFDB`` is refused rather than resolved against whatever
    directory each process happens to start in (creating directories there)."""
    if path == _MEMORY or os.path.isabs(path):
        return None
    return (f"${PERFDB_ENV}={path!r} is not an absolute path (a relative path would follow "
            "the working directory; a SQLite URI is not taken); set an absolute path, "
            "'~/...' or ':memory:'")


class _Unusable(Exception):
    """Internal: the file location cannot be used; fall back to memory."""


class _Broken(Exception):
    """Internal: the file is corrupt or of a foreign schema; move it aside."""


class _Newer(Exception):
    """Internal: the file has a newer schema of ours; leave it alone."""


def _row_to_dict(row) -> dict:
    return dict(zip(_FIELDS, row))


def _select_fields(version: int) -> str:
    """The columns of a ``perf`` table of ``version``, as a SELECT list in _FIELDS order."""
    if version == 1:
        return ",".join(f"'{SCHEMA1_ENGINE}'" if f == "engine" else f for f in _FIELDS)
    return ",".join(_FIELDS)


# ---------------------------------------------------------------------------
# PerfDb
# ---------------------------------------------------------------------------

class PerfDb:
    """A SQLite perf db of benchmark winners, safe for threads and processes.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The db file; ``":memory:"`` for a private in-memory db. Default
        :func:`default_path` (``$HIPDNN_ASYNC_PERFDB`` or
        ``~/.config/hipdnn_async/perfdb.sqlite3``); a ``$HIPDNN_ASYNC_PERFDB`` that is not
        an absolute path (after ``~``) is refused with a warning and the db is in memory
        (:func:`env_refusal`). A relative `path` given here is taken from the current
        directory, as ``open`` does. Missing parent directories are created.

    Raises
    ------
    PerfDbError
        `path` is not a str, bytes or os.PathLike, is empty or holds a NUL.

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
        refusal = None
        if path is None:
            path = default_path()
            refusal = env_refusal(path)
        path = _check_path("PerfDb", path)
        if refusal is None:
            path = path if path == _MEMORY else os.path.abspath(os.path.expanduser(path))
        self.path: str = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._fallback = self.path == _MEMORY
        self._seed: list[tuple] = []      # rows carried into a fallback in-memory db
        if refusal is not None:
            self._go_memory(refusal, key=("relative", path))
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
                self._conn = self._open_file()
                return self._conn
            except _Unusable as exc:
                self._go_memory(str(exc), key=("unusable", self.path))
            except _Newer as exc:
                self._go_memory(str(exc), key=("newer", self.path))
        self._conn = self._open_memory()
        return self._conn

    def _open_memory(self) -> sqlite3.Connection:
        conn = sqlite3.connect(_MEMORY, isolation_level=None, check_same_thread=False)
        conn.executescript(_SCHEMA)
        conn.execute("INSERT INTO meta VALUES ('format', ?)", (_FORMAT,))
        if self._seed:
            conn.executemany(f"INSERT OR REPLACE INTO perf VALUES ({','.join('?' * len(_FIELDS))})",
                             self._seed)
            self._seed = []
        return conn

    def _go_memory(self, reason: str, *, key) -> None:
        """Switch to an in-memory db for the rest of this object's life (warn once)."""
        _warn_once(key, "perf db %s: %s; using an in-memory perf db instead "
                   "(results will not persist)", self.path, reason)
        self._fallback = True

    def _check_location(self) -> None:
        path = self.path
        # A FIFO would block the open (every build, `hipdnn-async info`), a device such as
        # /dev/null would get a -journal beside it: refuse both before opening anything.
        _regular_or_missing(path, "the file")
        for suffix in _SIDE_SUFFIXES:
            _regular_or_missing(path + suffix, "its side file")
        # Side files first, then the file: SQLite creates the file before its side files,
        # so another process creating the db between the two looks is never taken for
        # orphaned side files (the other order refused a db being created beside us).
        if any(os.path.lexists(path + suffix) for suffix in _SIDE_SUFFIXES) and (
                not os.path.exists(path) and not self._our_name()):
            raise _Unusable("the file is missing but side files (-wal/-shm/-journal) of "
                            "another db are beside it; they are left untouched")
        parent = os.path.dirname(path) or "."
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise _Unusable(f"cannot create directory {parent!r} ({exc.strerror or exc})")
        if not os.access(parent, os.W_OK | os.X_OK):
            self._read_seed()
            raise _Unusable(f"directory {parent!r} is not writable")
        if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
            self._read_seed()
            raise _Unusable("the file is not writable")

    def _read_seed(self) -> None:
        """Copy what can be read from a read-only db file, for the in-memory fallback."""
        if not os.path.isfile(self.path):
            return
        try:
            conn = sqlite3.connect(_ro_uri(self.path), uri=True, isolation_level=None)
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version in (1, SCHEMA_VERSION):
                    self._seed = conn.execute(f"SELECT {_select_fields(version)} FROM perf").fetchall()
            finally:
                conn.close()
        except sqlite3.Error:
            self._seed = []

    def _our_name(self) -> bool:
        """The built-in default path (``~/.config/hipdnn_async/``, a folder only this library
        writes): a damaged file there is ours whatever its bytes. A file named elsewhere is
        ours only by its content (our SQLite application_id or ``meta`` format), not by its
        name: a JSON file called ``x.sqlite3`` is left alone."""
        return self.path == _builtin_default()

    def _foreign(self) -> str | None:
        """Why an existing file is not ours and must be left untouched, or None.

        Decided from the file's first 100 bytes and, for a SQLite file without our
        ``application_id``, an immutable read-only probe (no locks, no side files):

        - empty: ours (SQLite starts a new db in it);
        - SQLite with our application_id, or with our ``meta`` format: ours;
        - SQLite with another application_id, with tables but not our ``meta`` format, or
          with no tables at all (e.g. only a ``user_version``; we never leave a file so):
          another program's, never written;
        - not SQLite, or SQLite too damaged to read: ours (and repaired: moved aside)
          only at the built-in default path (:meth:`_our_name`); anything else (a JSON
          export, /etc/passwd, random bytes named ``*.sqlite3``) is left alone.
        """
        head = _read_head(self.path)
        if head is None:
            return None                      # missing or unreadable: handled elsewhere
        if not head:
            return None                      # empty: SQLite starts a new db in it
        if head[:16] != _SQLITE_MAGIC:
            if self._our_name():
                return None
            return "not a SQLite file (a perf db was expected here)"
        if len(head) == 100:
            app_id = int.from_bytes(head[68:72], "big")
            if app_id == _APPLICATION_ID:
                return None
            if app_id:
                return f"a SQLite db of another application (application_id {app_id:#x})"
        try:
            conn = sqlite3.connect(_ro_uri(self.path), uri=True, isolation_level=None)
            try:
                tables = {r[0] for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                fmt = None
                if "meta" in tables:
                    row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                    fmt = row[0] if row else None
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error:                # too damaged to tell
            if self._our_name():
                return None
            return "a SQLite file too damaged to read (not known to be a perf db)"
        if fmt == _FORMAT:
            return None
        if tables:
            return f"a SQLite db of another application (tables {sorted(tables)})"
        return (f"a SQLite db of another application (no tables, user_version {version}; "
                "content may sit in its -wal)")

    def _open_file(self) -> sqlite3.Connection:
        self._check_location()
        foreign = self._foreign()
        if foreign:
            raise _Unusable(f"{foreign}; the file is left untouched")
        try:
            return self._connect_checked()
        except _Broken as exc:
            self._repair(str(exc))
            try:
                return self._connect_checked()
            except _Broken as exc2:  # still broken after recreation: give up on the file
                raise _Unusable(f"recreated file is unusable ({exc2})")

    def _connect_checked(self) -> sqlite3.Connection:
        """Open the file, create the schema if it is new, and verify it."""
        try:
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _Unusable(f"cannot open ({exc})")
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._init_schema(conn)
            # WAL lets readers run beside one writer; on file systems without shared
            # memory (NFS) SQLite refuses and keeps its rollback journal, which works.
            with contextlib.suppress(sqlite3.OperationalError):
                _retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")
            rows = _retry_busy(lambda: conn.execute("PRAGMA quick_check").fetchall())
            if rows != [("ok",)]:
                raise _Broken(f"integrity check failed: {rows[0][0] if rows else 'no result'}")
        except (_Broken, _Newer, _Unusable):
            conn.close()
            raise
        except sqlite3.OperationalError as exc:
            conn.close()
            if _is_busy(exc):
                raise _Unusable(f"locked by another process for too long ({exc})")
            raise _Unusable(str(exc))
        except sqlite3.DatabaseError as exc:   # not a database, malformed
            conn.close()
            raise _Broken(str(exc))
        return conn

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        """Create the schema in a new file or check the one present."""
        def check(conn):
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if version == 0 and not tables:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.execute("INSERT INTO meta VALUES ('format', ?)", (_FORMAT,))
                conn.execute("INSERT INTO meta VALUES ('created_at', ?)", (repr(time.time()),))
                return
            fmt = None
            if "meta" in tables:
                row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
                fmt = row[0] if row else None
            if fmt == _FORMAT and version > SCHEMA_VERSION:
                raise _Newer(f"written by a newer hipdnn_async (schema {version} > "
                             f"{SCHEMA_VERSION}); the file is left untouched")
            if fmt == _FORMAT and version == 1 and "perf" in tables:
                self._upgrade_schema1(conn)
                version = SCHEMA_VERSION
            if fmt != _FORMAT or version != SCHEMA_VERSION or "perf" not in tables:
                raise _Broken(f"not a hipdnn_async perf db (user_version {version}, "
                              f"tables {sorted(tables)})")
            cols = [r[1] for r in conn.execute("PRAGMA table_info(perf)")]
            if cols != list(_FIELDS):
                raise _Broken(f"table 'perf' has columns {cols}; expected {list(_FIELDS)}")
            if conn.execute("PRAGMA application_id").fetchone()[0] == 0:  # made before ids
                conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")

        _retry_busy(lambda: _write_txn(conn, check))

    def _upgrade_schema1(self, conn: sqlite3.Connection) -> None:
        """Schema 1 -> 2 inside the caller's write transaction: the key gains ``engine``;
        the old entries get ``SCHEMA1_ENGINE`` (see ``lookup``'s ``schema1``)."""
        cols = tuple(r[1] for r in conn.execute("PRAGMA table_info(perf)"))
        if cols != _SCHEMA1_FIELDS:
            raise _Broken(f"schema 1 table 'perf' has columns {list(cols)}; expected "
                          f"{list(_SCHEMA1_FIELDS)}")
        conn.execute("ALTER TABLE perf RENAME TO perf_schema1")
        create = _SCHEMA[_SCHEMA.index("CREATE TABLE perf"):]
        conn.execute(create[:create.index(";")])
        conn.execute(f"INSERT INTO perf ({','.join(_FIELDS)}) SELECT "
                     f"{_select_fields(1)} FROM perf_schema1")
        n = conn.execute("SELECT count(*) FROM perf").fetchone()[0]
        conn.execute("DROP TABLE perf_schema1")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        _logger.info("perf db %s: upgraded schema 1 -> %d; its %d entries predate engine "
                     "names and are kept for the engine that wrote them (claimed at its first "
                     "lookup)", self.path, SCHEMA_VERSION, n)

    def _repair(self, reason: str) -> None:
        """Move a broken file (and its -wal/-shm) aside, under a lock file if possible."""
        lock_fd = None
        if fcntl is not None:
            try:
                lock_fd = os.open(self.path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            except OSError:
                if lock_fd is not None:
                    os.close(lock_fd)
                lock_fd = None
        try:
            # Another process may have repaired it while we waited for the lock.
            try:
                self._connect_checked().close()
                return
            except _Broken:
                pass
            stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time() % 1:.6f}"[1:]
            aside = f"{self.path}.corrupt-{stamp}"
            try:
                os.replace(self.path, aside)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise _Unusable(f"{reason}; cannot move it aside ({exc.strerror or exc})")
            for suffix in ("-wal", "-shm", "-journal"):
                with contextlib.suppress(OSError):
                    os.replace(self.path + suffix, aside + suffix)
            _warn_once(("corrupt", aside), "perf db %s: %s; moved it to %s and started "
                       "a new one", self.path, reason, aside)
        finally:
            if lock_fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(lock_fd, fcntl.LOCK_UN)
                os.close(lock_fd)

    # -- running statements -------------------------------------------------

    def _run(self, what: str, op, *, default):
        """Run ``op(conn)`` with busy retries; repair or fall back on file failures.

        Returns ``default`` when the db stays locked past the retry budget (logged).
        """
        with self._lock:
            for _ in range(3):
                conn = self._ensure_open()
                try:
                    return _retry_busy(lambda: op(conn))
                except sqlite3.OperationalError as exc:
                    if self._fallback:
                        raise
                    if _is_busy(exc):
                        _warn_once(("busy", self.path, what), "perf db %s: %s gave up, "
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
                        self._repair(f"{what} failed ({exc})")
                    except _Unusable as exc2:
                        self._go_memory(str(exc2), key=("unusable", self.path))
            return default

    def _drop_connection(self, *, seed: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if seed:
            with contextlib.suppress(sqlite3.Error):
                self._seed = conn.execute(f"SELECT {','.join(_FIELDS)} FROM perf").fetchall()
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
            raise _error(f"PerfDb.lookup: key must be a PerfKey; got {type(key).__name__}")
        args = tuple(getattr(key, f) for f in _KEY_FIELDS)
        where = " AND ".join(f"{f} = ?" for f in _KEY_FIELDS if f != "engine")
        others = args[:1] + args[2:]
        legacy = schema1 and key.engine != SCHEMA1_ENGINE

        def op(conn):
            row = conn.execute(f"SELECT {','.join(_RECORD_FIELDS)} FROM perf WHERE {where} "
                               "AND engine = ?", others + (key.engine,)).fetchone()
            if row is None and legacy:
                row = conn.execute(f"SELECT {','.join(_RECORD_FIELDS)} FROM perf WHERE "
                                   f"{where} AND engine = ?", others + (SCHEMA1_ENGINE,)).fetchone()
                if row is not None:   # claim it: it is this engine's from now on
                    _write_txn(conn, lambda c: c.execute(
                        f"UPDATE OR IGNORE perf SET engine = ? WHERE {where} AND engine = ?",
                        (key.engine,) + others + (SCHEMA1_ENGINE,)))
            return row

        row = self._run("lookup", op, default=None)
        record = None
        if row is not None:
            try:
                record = PerfRecord(*row)
            except PerfDbError as exc:   # a row some other tool wrote: treat as a miss
                _warn_once(("badrow", self.path), "perf db %s: ignoring an invalid "
                           "entry (%s)", self.path, exc)
        count("perfdb_misses" if record is None else "perfdb_hits")
        return record

    def store(self, key: PerfKey, record: PerfRecord) -> None:
        """Insert or replace the record for ``key`` (the last store wins)."""
        if not isinstance(key, PerfKey) or not isinstance(record, PerfRecord):
            raise _error(f"PerfDb.store: need a PerfKey and a PerfRecord; got "
                         f"{type(key).__name__}, {type(record).__name__}")
        row = tuple(getattr(key, f) for f in _KEY_FIELDS) + \
            tuple(getattr(record, f) for f in _RECORD_FIELDS)
        self._run("store", lambda conn: _write_txn(conn, lambda c: _upsert(c, [row])),
                  default=None)
        count("perfdb_stores")

    def entries(self) -> list[dict]:
        """Return every entry as a JSON-ready dict (key fields then record fields)."""
        rows = self._run("entries", lambda conn: conn.execute(
            f"SELECT {','.join(_FIELDS)} FROM perf ORDER BY "
            f"{','.join(_KEY_FIELDS)}").fetchall(), default=[])
        return [_row_to_dict(r) for r in rows]

    def __bool__(self) -> bool:
        return True       # an empty db is still a db (``db or default_perfdb()``)

    def __len__(self) -> int:
        return self._run("count", lambda conn: conn.execute(
            "SELECT count(*) FROM perf").fetchone()[0], default=0)

    def clear(self) -> int:
        """Delete every entry; return how many there were."""
        return self._run("clear", lambda conn: _write_txn(
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
        path = os.path.realpath(_check_path("PerfDb.export_json", path))
        try:
            _regular_or_missing(path, "export target")
        except _Unusable as exc:
            raise _error(f"PerfDb.export_json: {exc}; export to a regular file") from None
        head = (_read_head(path, 16) or b"")
        if head == _SQLITE_MAGIC or (self.path != _MEMORY and path == self.path):
            raise _error(f"PerfDb.export_json: {path!r} is a SQLite database (the perf db "
                         "itself?); refusing to overwrite it with JSON")
        if head and not _is_export(path):
            raise _error(f"PerfDb.export_json: {path!r} exists and is not a perf-db export; "
                         "refusing to overwrite it (remove it or choose another path)")
        entries = self.entries()
        doc = {"format": _FORMAT, "version": SCHEMA_VERSION, "entries": entries}
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            if isinstance(exc, (FileNotFoundError, NotADirectoryError)):   # no such directory
                raise _error(f"PerfDb.export_json: cannot write {path!r}: "
                             f"{exc.strerror or exc}") from None
            raise _os_error(f"PerfDb.export_json: cannot write {path!r}: "
                         f"{exc.strerror or exc}") from exc
        return len(entries)

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
        path = _check_path("PerfDb.import_json", path)
        where = f"PerfDb.import_json: {path!r}"
        try:
            _regular_or_missing(path, "import source")
        except _Unusable as exc:   # a FIFO would block the read
            raise _error(f"PerfDb.import_json: {exc}; import from a regular file") from None
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise _error(f"{where}: cannot read ({exc.strerror or exc})") from None
        except OSError as exc:
            raise _os_error(f"{where}: cannot read ({exc.strerror or exc})") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise _error(f"{where}: not valid JSON ({exc})") from exc
        rows = _validate_export(doc, where)
        if rows:
            self._run("import", lambda conn: _write_txn(
                conn, lambda c: _upsert(c, rows, keep_newer=True)),
                      default=None)
        return len(rows)

    def close(self) -> None:
        """Release the SQLite connection (idempotent); a later call reopens it.

        An in-memory db loses its content on close.
        """
        with self._lock:
            self._drop_connection(seed=False)

    def __enter__(self) -> "PerfDb":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PerfDb(path={self.path!r}, in_memory={self.in_memory})"


def _upsert(conn: sqlite3.Connection, rows: list[tuple], *, keep_newer: bool = False) -> None:
    """Insert or replace rows; with keep_newer an older measurement does not replace."""
    conn.executemany(
        f"INSERT INTO perf ({','.join(_FIELDS)}) VALUES ({','.join('?' * len(_FIELDS))}) "
        f"ON CONFLICT ({','.join(_KEY_FIELDS)}) DO UPDATE SET "
        + ", ".join(f"{f} = excluded.{f}" for f in _RECORD_FIELDS)
        + (" WHERE excluded.measured_at >= perf.measured_at" if keep_newer else ""), rows)


def _validate_export(doc, where: str) -> list[tuple]:
    """Check an export document field by field; return rows in column order."""
    if isinstance(doc, dict) and set(doc) == {"format", "version", "entries"}:
        if doc["format"] != _FORMAT:
            raise _error(f"{where}: field 'format' must be {_FORMAT!r}; "
                         f"got {doc['format']!r}")
        if doc["version"] not in (1, SCHEMA_VERSION) or isinstance(doc["version"], bool):
            raise _error(f"{where}: field 'version' must be 1 or {SCHEMA_VERSION}; "
                         f"got {doc['version']!r}")
        # a schema-1 export has no engine: its entries import as schema-1 entries
        fields = _SCHEMA1_FIELDS if doc["version"] == 1 else _FIELDS
        entries = doc["entries"]
        if not isinstance(entries, list):
            raise _error(f"{where}: field 'entries' must be a list; "
                         f"got {type(entries).__name__}")
    else:
        got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
        raise _error(f"{where}: not a perf db export; need an object with fields "
                     f"'format', 'version', 'entries'; got {got}")
    rows = []
    for i, e in enumerate(entries):
        at = f"{where}: entry {i}"
        if not isinstance(e, dict):
            raise _error(f"{at}: must be an object; got {type(e).__name__}")
        missing = [f for f in fields if f not in e]
        extra = sorted(set(e) - set(fields))
        if missing:
            raise _error(f"{at}: missing field '{missing[0]}'")
        if extra:
            raise _error(f"{at}: unknown field '{extra[0]}'")
        row = []
        for f in _FIELDS:
            v = e.get(f, SCHEMA1_ENGINE)      # only "engine" can be absent (schema 1)
            if f in _STR_FIELDS:
                ok = isinstance(v, str) and _encodable(v)
                want = "a str (valid Unicode: no lone surrogates)"
            elif f in ("workspace_limit", "workspace_bytes"):
                ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT_MAX
                want = "an int in [0, 2**63 - 1]"
            else:
                ok = (isinstance(v, (int, float)) and not isinstance(v, bool)
                      and math.isfinite(v) and v >= 0)
                want = "a finite number >= 0"
                v = float(v) if ok else v
            if not ok:
                raise _error(f"{at}: field '{f}' must be {want}; got {v!r}")
            row.append(v)
        rows.append(tuple(row))
    return rows


# ---------------------------------------------------------------------------
# Process-wide default db
# ---------------------------------------------------------------------------

_default: PerfDb | None = None
_default_lock = threading.Lock()


def default_perfdb() -> PerfDb:
    """Return the process-wide PerfDb at :func:`default_path` (reopened if it changed)."""
    global _default
    path = default_path()
    with _default_lock:
        if _default is None or _default.path != path:
            # An old default may still be held by plans; it stays usable and is closed
            # when the last reference goes.
            _default = PerfDb(path) if env_refusal(path) is None else PerfDb()
        return _default


def reset_default_perfdb() -> None:
    """Close and forget the process-wide PerfDb (the next call reopens)."""
    global _default
    with _default_lock:
        if _default is not None:
            _default.close()
        _default = None


# ---------------------------------------------------------------------------
# Command-line helpers (hipdnn-async perfdb show|clear|export|import)
# ---------------------------------------------------------------------------

def cli_show(db: PerfDb, out=None) -> int:
    """Print one line per entry and a summary line; return the number of entries."""
    out = sys.stdout if out is None else out
    entries = db.entries()
    where = db.path + (" (in memory)" if db.in_memory and db.path != _MEMORY else "")
    print(f"perf db {where}: {len(entries)} entries", file=out)
    for e in entries:
        problem = e["problem"] if len(e["problem"]) <= 60 else e["problem"][:57] + "..."
        print(f"  {e['provider']:<7} {e['engine'] or '(schema 1)':<20} {e['device']:<24} "
              f"ws<={e['workspace_limit']:<11} "
              f"{e['algorithm']:<20} {e['time_ms']:10.4f} ms  ws {e['workspace_bytes']:<10} "
              f"{problem}", file=out)
    return len(entries)


def cli_clear(db: PerfDb, out=None) -> int:
    """Delete every entry and print how many; return the number."""
    n = db.clear()
    print(f"cleared {n} entries from {db.path}", file=sys.stdout if out is None else out)
    return n


def cli_export(db: PerfDb, path, out=None) -> int:
    """Export to a JSON file and print how many entries; return the number."""
    n = db.export_json(path)
    print(f"exported {n} entries to {os.fspath(path)}", file=sys.stdout if out is None else out)
    return n


def cli_import(db: PerfDb, path, out=None) -> int:
    """Import a JSON export and print how many entries; return the number."""
    n = db.import_json(path)
    print(f"imported {n} entries from {os.fspath(path)} into {db.path}",
          file=sys.stdout if out is None else out)
    return n
