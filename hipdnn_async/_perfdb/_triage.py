"""File triage and repair: what the file at a perf db's path is (missing, ours, another
program's, damaged, in a place that cannot be written) before SQLite opens it, a new db
created atomically where none is, and a damaged file of ours moved aside and recreated.
Nothing here writes a file that is not known to be ours, and no empty file is ever left
at a db's path (another process could not tell it from someone else's empty file)."""
from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import sqlite3
import stat
import time

from ._paths import builtin_default
from ._schema import APPLICATION_ID, FORMAT, SCHEMA_VERSION, Broken, Newer, init_schema, \
    select_fields
from ._sqlite import BUSY_TIMEOUT_MS, is_busy, retry_busy
from ._stats import warn_once

try:  # POSIX advisory lock, used only around repair of a broken file.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = ["SQLITE_MAGIC", "Unusable", "open_file", "read_head", "regular_or_missing",
           "repair"]

SQLITE_MAGIC = b"SQLite format 3\x00"
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
_OPEN_TRIES = 5          # a db moved aside by another process's repair as we open it
_TEMP_STEM = 200         # characters of the db's name kept in its temporary name


class Unusable(Exception):
    """Internal: the file location cannot be used; fall back to memory, seeded with
    ``seed`` (the rows still readable there) unless it is None."""

    def __init__(self, message: str, seed: list | None = None):
        super().__init__(message)
        self.seed = seed


class _Missing(Exception):
    """Internal: the file was gone when SQLite came to open it (never created there)."""


def _ro_uri(path: str) -> str:
    """A read-only, immutable SQLite URI for the absolute ``path``.

    The whole path is percent-encoded (``pathlib``'s ``as_uri``: ``%``, ``?``, ``#``,
    spaces, non-ASCII), so the probe opens exactly this file; ``immutable=1`` takes no
    locks and creates no ``-wal``/``-shm``/``-journal`` beside it (sqlite.org/uri.html).
    """
    return pathlib.Path(path).as_uri() + "?mode=ro&immutable=1"


def _rw_uri(path: str) -> str:
    """A read-write SQLite URI for ``path`` that never creates the file (``mode=rw``):
    a missing file is SQLITE_CANTOPEN, not a new empty file (see :func:`_create`)."""
    return pathlib.Path(os.path.abspath(path)).as_uri() + "?mode=rw"


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_head(path: str, n: int = 100) -> bytes | None:
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


def regular_or_missing(path: str, what: str) -> None:
    """Raise Unusable when ``path`` exists and is not a regular file (never opened)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):   # the directory checks say why
        return
    except OSError as exc:
        raise Unusable(f"cannot stat {what} {path!r} ({exc.strerror or exc})")
    if not stat.S_ISREG(st.st_mode):
        raise Unusable(f"{what} {path!r} is {_file_kind(st.st_mode)}, not a regular file; "
                       "it is not opened")


def _our_name(path: str) -> bool:
    """The built-in default path (``~/.config/hipdnn_async/``, a folder only this library
    writes): a damaged file there is ours whatever its bytes. A file named elsewhere is
    ours only by its content (our SQLite application_id or ``meta`` format), not by its
    name: a JSON file called ``x.sqlite3`` is left alone."""
    return path == builtin_default()


def _read_seed(path: str) -> list | None:
    """What can be read from a read-only db file, for the in-memory fallback; None when
    there is nothing to take (no file, or a schema not ours)."""
    if not os.path.isfile(path):
        return None
    try:
        conn = sqlite3.connect(_ro_uri(path), uri=True, isolation_level=None)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version in (1, SCHEMA_VERSION):
                return conn.execute(f"SELECT {select_fields(version)} FROM perf").fetchall()
            return None
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def _check_location(path: str) -> None:
    """Raise Unusable where the file, its side files or its directory cannot be used."""
    # A FIFO would block the open (every build, `hipdnn-async info`), a device such as
    # /dev/null would get a -journal beside it: refuse both before opening anything.
    regular_or_missing(path, "the file")
    for suffix in _SIDE_SUFFIXES:
        regular_or_missing(path + suffix, "its side file")
    # Side files first, then the file: the file appears before its side files (it is
    # published whole, then opened), so another process creating the db between the two
    # looks is never taken for orphaned side files (the other order refused a db being
    # created beside us).
    if any(os.path.lexists(path + suffix) for suffix in _SIDE_SUFFIXES) and (
            not os.path.exists(path) and not _our_name(path)):
        raise Unusable("the file is missing but side files (-wal/-shm/-journal) of "
                       "another db are beside it; they are left untouched")
    parent = os.path.dirname(path) or "."
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise Unusable(f"cannot create directory {parent!r} ({exc.strerror or exc})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise Unusable(f"directory {parent!r} is not writable", _read_seed(path))
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise Unusable("the file is not writable", _read_seed(path))


def _foreign(path: str) -> str | None:
    """Why an existing file is not ours and must be left untouched, or None.

    Decided from the file's first 100 bytes and, for a SQLite file without our
    ``application_id``, an immutable read-only probe (no locks, no side files):

    - empty: ours only at the built-in default path (:func:`_our_name`; an older
      version that crashed while creating the db there may have left it); anywhere else
      foreign (we never leave an empty file: :func:`_create` publishes a db whole), e.g.
      another tool's marker or placeholder;
    - SQLite with our application_id, or with our ``meta`` format: ours;
    - SQLite with another application_id, with tables but not our ``meta`` format, or
      with no tables at all (e.g. only a ``user_version``; we never leave a file so):
      another program's, never written;
    - not SQLite, or SQLite too damaged to read: ours (and repaired: moved aside)
      only at the built-in default path (:func:`_our_name`); anything else (a JSON
      export, /etc/passwd, random bytes named ``*.sqlite3``) is left alone.
    """
    head = read_head(path)
    if head is None:
        return None                      # missing or unreadable: handled elsewhere
    if not head:
        if _our_name(path):
            return None                  # ours: SQLite starts a new db in it
        return ("an empty file (a perf db is created only where no file exists; remove "
                "it to let one be created)")
    if head[:16] != SQLITE_MAGIC:
        if _our_name(path):
            return None
        return "not a SQLite file (a perf db was expected here)"
    if len(head) == 100:
        app_id = int.from_bytes(head[68:72], "big")
        if app_id == APPLICATION_ID:
            return None
        if app_id:
            return f"a SQLite db of another application (application_id {app_id:#x})"
    try:
        conn = sqlite3.connect(_ro_uri(path), uri=True, isolation_level=None)
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
        if _our_name(path):
            return None
        return "a SQLite file too damaged to read (not known to be a perf db)"
    if fmt == FORMAT:
        return None
    if tables:
        return f"a SQLite db of another application (tables {sorted(tables)})"
    return (f"a SQLite db of another application (no tables, user_version {version}; "
            "content may sit in its -wal)")


def _connect_checked(path: str, *, new: bool = False) -> sqlite3.Connection:
    """Open the file, create the schema if it is new (empty), and verify it.

    The file is never created here (``mode=rw``; a missing one raises :class:`_Missing`):
    :func:`_create` makes a new db. With ``new``, ``path`` is that function's own
    temporary file: SQLite creates it, and it keeps its rollback journal (no ``-wal`` or
    ``-shm``; complete on its own once closed).
    """
    try:
        if new:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
        else:
            conn = sqlite3.connect(_rw_uri(path), uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        if not new and not os.path.exists(path):
            raise _Missing(path)
        raise Unusable(f"cannot open ({exc})")
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        init_schema(conn, path)
        if not new:
            # WAL lets readers run beside one writer; on file systems without shared
            # memory (NFS) SQLite refuses and keeps its rollback journal, which works.
            with contextlib.suppress(sqlite3.OperationalError):
                retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute("PRAGMA synchronous = NORMAL")
        rows = retry_busy(lambda: conn.execute("PRAGMA quick_check").fetchall())
        if rows != [("ok",)]:
            raise Broken(f"integrity check failed: {rows[0][0] if rows else 'no result'}")
    except (Broken, Newer, Unusable):
        conn.close()
        raise
    except sqlite3.OperationalError as exc:
        conn.close()
        if is_busy(exc):
            raise Unusable(f"locked by another process for too long ({exc})")
        if not new and not os.path.exists(path):
            raise _Missing(path)
        raise Unusable(str(exc))
    except sqlite3.DatabaseError as exc:   # not a database, malformed
        conn.close()
        raise Broken(str(exc))
    return conn


def _create(path: str) -> None:
    """Create a new, empty perf db at the missing ``path`` atomically.

    The db is made and checked under a unique temporary name beside the file, closed
    (rollback journal: no side files), and published with ``os.link``, which fails where
    another process published first: its db is then used. The temporary name is always
    removed. So no process ever sees an empty or half-made file at ``path``, and an empty
    file there is never ours (:func:`_foreign`). A dangling symlink at ``path`` gets the
    db at its target.
    """
    real = os.path.realpath(path)
    # the db's own name, cut so that the temporary one (and its -journal) stays within
    # the 255 bytes a file name may have where the db's name nearly fills them
    head, name = os.path.split(real)
    temp = os.path.join(head, f"{name[:_TEMP_STEM]}.new-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        try:
            conn = _connect_checked(temp, new=True)
        except Broken as exc:
            raise Unusable(f"cannot create a new db ({exc})")
        try:
            # A new file starts in rollback-journal mode: no -wal/-shm, and the -journal
            # is gone at each commit. Said again so the file is complete on its own.
            conn.execute("PRAGMA journal_mode = DELETE")
        finally:
            conn.close()
        try:
            os.link(temp, real)
        except FileExistsError:
            return                       # another process published first: use its db
        except OSError:
            # No hard links on this file system (EPERM, ENOTSUP, EXDEV, EMLINK): rename,
            # only while the path is still missing. A tiny race remains here: a db that
            # another process publishes between this check and the rename is replaced by
            # ours (and what it writes before it reopens is lost).
            if os.path.lexists(real):
                return
            try:
                os.rename(temp, real)
            except FileExistsError:      # Windows: rename never replaces
                return
            except OSError as exc:
                raise Unusable(f"cannot create the file ({exc.strerror or exc})")
    finally:
        for name in (temp,) + tuple(temp + suffix for suffix in _SIDE_SUFFIXES):
            with contextlib.suppress(OSError):
                os.unlink(name)


def _open_or_create(path: str, *, triage: bool = True) -> sqlite3.Connection:
    """A checked connection to the db at ``path``, created (:func:`_create`) where the
    path is missing. The file is triaged (:func:`_foreign`) first when ``triage`` is set,
    and always after a creation (another program may have put a file there first)."""
    for _ in range(_OPEN_TRIES):
        created = not os.path.exists(path)
        if created:
            _create(path)
        if triage or created:
            foreign = _foreign(path)
            if foreign:
                raise Unusable(f"{foreign}; the file is left untouched")
        try:
            return _connect_checked(path)
        except _Missing:
            continue                     # moved aside by another process: create again
    raise Unusable(f"the file disappeared each of the {_OPEN_TRIES} times it was created")


def open_file(path: str) -> sqlite3.Connection:
    """A checked connection to the perf db file at `path`, repaired once if broken.

    Raises
    ------
    Unusable
        The location cannot be used, the file is another program's, or it is still
        broken once recreated.
    Newer
        The file is ours, of a newer schema.
    """
    _check_location(path)
    try:
        return _open_or_create(path)
    except Broken as exc:
        repair(path, str(exc))
        try:
            return _open_or_create(path)      # moved aside: created anew, atomically
        except Broken as exc2:  # still broken after recreation: give up on the file
            raise Unusable(f"recreated file is unusable ({exc2})")


def repair(path: str, reason: str) -> None:
    """Move a broken file (and its -wal/-shm) aside, under a lock file if possible."""
    lock_fd = None
    if fcntl is not None:
        try:
            lock_fd = os.open(path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        except OSError:
            if lock_fd is not None:
                os.close(lock_fd)
            lock_fd = None
    try:
        # Another process may have repaired it while we waited for the lock (and if it
        # has moved it aside but not yet recreated it, it is created here, atomically).
        try:
            _open_or_create(path, triage=False).close()
            return
        except Broken:
            pass
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time() % 1:.6f}"[1:]
        aside = f"{path}.corrupt-{stamp}"
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise Unusable(f"{reason}; cannot move it aside ({exc.strerror or exc})")
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.replace(path + suffix, aside + suffix)
        warn_once(("corrupt", aside), "perf db %s: %s; moved it to %s and started "
                  "a new one", path, reason, aside)
    finally:
        if lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
            os.close(lock_fd)
