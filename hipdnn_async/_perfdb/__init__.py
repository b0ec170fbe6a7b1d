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
- ``fork`` with other threads using the db: the connection must be neither mid-call at
  the fork nor used in the child (sqlite.org/howtocorrupt.html, 2.6). Every db's lock
  (an RLock) is taken before the fork (a statement in another thread finishes first);
  the child closes the inherited file connection, idle, and opens its own at its next
  call.
- A db of schema 1 (before entries named their engine): upgraded in place, once, with a
  note; its entries keep engine ``""`` until the engine that wrote them (its provider's
  only engine then) claims them at its first lookup (``PerfDb.lookup(..., schema1=True)``).

``lookup`` and ``store`` never raise for any of these conditions.

This package imports only the stdlib, ``_errors`` and ``_fork``. Its modules, each
importing only those above it:

- ``_records``: ``PerfKey``, ``PerfRecord``, the fields in column order and their checks;
- ``_paths``: ``$HIPDNN_ASYNC_PERFDB`` and the default path;
- ``_stats``: process-wide counters and the warn-once log;
- ``_sqlite``: busy retries, write transactions, the upsert;
- ``_schema``: the schema, its creation or check at open, the schema 1 migration;
- ``_triage``: what a file is before it is opened, and the repair of a damaged one;
- ``_exchange``: JSON export and import;
- ``_store``: ``PerfDb`` and the process-wide default db;
- ``_cli``: the ``hipdnn-async perfdb`` helpers.
"""
from ._cli import cli_clear, cli_export, cli_import, cli_show
from ._paths import PERFDB_ENV, default_path, env_refusal, names_directory
from ._records import PerfKey, PerfRecord
from ._schema import SCHEMA1_ENGINE, SCHEMA_VERSION
from ._stats import count, reset_stats, stats
from ._store import PerfDb, default_perfdb, reset_default_perfdb
# the module's private names that tests reach, where they were before it became a package
from ._paths import builtin_default as _builtin_default
from ._records import FIELDS as _FIELDS
from ._sqlite import upsert as _upsert, write_txn as _write_txn
from ._stats import warned as _warned

__all__ = [
    "PerfKey",
    "PerfRecord",
    "PerfDb",
    "SCHEMA_VERSION",
    "SCHEMA1_ENGINE",
    "PERFDB_ENV",
    "names_directory",
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
    "_FIELDS", "_builtin_default", "_upsert", "_warned", "_write_txn",
]
