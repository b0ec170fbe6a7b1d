"""Where the perf db lives: ``$HIPDNN_ASYNC_PERFDB``, ``":memory:"`` or the built-in
default under ``~/.config/hipdnn_async/``."""
from __future__ import annotations

import os

__all__ = ["MEMORY", "PERFDB_ENV", "REFUSED", "builtin_default", "default_path", "env_refusal",
           "names_directory"]

PERFDB_ENV = "HIPDNN_ASYNC_PERFDB"
MEMORY = ":memory:"
# Why a relative $HIPDNN_ASYNC_PERFDB is not used (after "$HIPDNN_ASYNC_PERFDB='value' ").
REFUSED = ("is not an absolute path (a relative path would follow the working directory; a "
           "SQLite URI is not taken); set an absolute path, '~/...' or ':memory:'")


def builtin_default() -> str:
    """``~/.config/hipdnn_async/perfdb.sqlite3`` (``~`` expanded now)."""
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
        return env if env == MEMORY else os.path.expanduser(env)
    return builtin_default()


def env_refusal(path: str) -> str | None:
    """Why ``path`` (from :func:`default_path`) is not used as the default perf db, or None:
    a relative ``$HIPDNN_ASYNC_PERFDB`` is refused rather than resolved against whatever
    directory each process happens to start in (creating directories there)."""
    if path == MEMORY or os.path.isabs(path):
        return None
    return f"${PERFDB_ENV}={path!r} {REFUSED}"


def names_directory(path: str) -> str | None:
    """Why ``path`` is not a db file's path because it names a directory, or None: it ends
    in a separator, ``.`` or ``..`` (``/data/dbs/``; ``os.path.abspath`` would drop the
    ending and create a file named ``dbs``), or it is an existing directory (a symlink to
    one too)."""
    if path == MEMORY:
        return None
    seps = tuple(filter(None, (os.sep, os.altsep)))
    last = path.rstrip("".join(seps)) != path or os.path.basename(path) in (".", "..")
    if not last and not os.path.isdir(os.path.expanduser(path)):
        return None
    how = (f"ends in {path[-1]!r}, so it names a directory" if path.endswith(seps) else
           f"ends in {os.path.basename(path)!r}, so it names a directory" if last else
           "is a directory")
    # the directory meant, links followed ('lnk/..' is the link target's parent)
    hint = os.path.join(os.path.realpath(os.path.expanduser(path)), "perfdb.sqlite3")
    return f"{how}, not the db file; give the file's path, e.g. {hint!r}"
