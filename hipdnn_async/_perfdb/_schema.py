"""The perf db's schema: its SQL, the markers that make a file ours (``meta`` format,
``application_id``), its creation or check at open, and the migration from schema 1."""
from __future__ import annotations

import sqlite3
import time

from ._records import FIELDS, SCHEMA1_FIELDS
from ._sqlite import retry_busy, write_txn
from ._stats import logger

__all__ = ["APPLICATION_ID", "Broken", "FORMAT", "Newer", "SCHEMA", "SCHEMA1_ENGINE",
           "SCHEMA_VERSION", "init_schema", "select_fields"]

SCHEMA_VERSION = 2
SCHEMA1_ENGINE = ""                   # the engine of entries upgraded from schema 1
FORMAT = "hipdnn_async.perfdb"        # meta 'format' value and export 'format' field

# Our SQLite application_id (``PRAGMA application_id``, bytes 68-71 of the file header,
# https://www.sqlite.org/fileformat.html#application_id): "hDNA". A file carrying it is
# ours without opening it; one carrying another non-zero id is another program's.
APPLICATION_ID = 0x68444E41

SCHEMA = f"""
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
PRAGMA application_id = {APPLICATION_ID};
"""


class Broken(Exception):
    """Internal: the file is corrupt or of a foreign schema; move it aside."""


class Newer(Exception):
    """Internal: the file has a newer schema of ours; leave it alone."""


def select_fields(version: int) -> str:
    """The columns of a ``perf`` table of ``version``, as a SELECT list in FIELDS order."""
    if version == 1:
        return ",".join(f"'{SCHEMA1_ENGINE}'" if f == "engine" else f for f in FIELDS)
    return ",".join(FIELDS)


def init_schema(conn: sqlite3.Connection, path: str) -> None:
    """Create the schema in a new file or check the one present (upgrading schema 1).

    Raises
    ------
    Newer
        The file is ours, of a newer schema.
    Broken
        The file is not a perf db of ours, or its ``perf`` table has other columns.
    """
    def check(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and not tables:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
            conn.execute("INSERT INTO meta VALUES ('created_at', ?)", (repr(time.time()),))
            return
        fmt = None
        if "meta" in tables:
            row = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            fmt = row[0] if row else None
        if fmt == FORMAT and version > SCHEMA_VERSION:
            raise Newer(f"written by a newer hipdnn_async (schema {version} > "
                        f"{SCHEMA_VERSION}); the file is left untouched")
        if fmt == FORMAT and version == 1 and "perf" in tables:
            _upgrade_schema1(conn, path)
            version = SCHEMA_VERSION
        if fmt != FORMAT or version != SCHEMA_VERSION or "perf" not in tables:
            raise Broken(f"not a hipdnn_async perf db (user_version {version}, "
                         f"tables {sorted(tables)})")
        cols = [r[1] for r in conn.execute("PRAGMA table_info(perf)")]
        if cols != list(FIELDS):
            raise Broken(f"table 'perf' has columns {cols}; expected {list(FIELDS)}")
        if conn.execute("PRAGMA application_id").fetchone()[0] == 0:  # made before ids
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    retry_busy(lambda: write_txn(conn, check))


def _upgrade_schema1(conn: sqlite3.Connection, path: str) -> None:
    """Schema 1 -> 2 inside the caller's write transaction: the key gains ``engine``;
    the old entries get ``SCHEMA1_ENGINE`` (see ``PerfDb.lookup``'s ``schema1``)."""
    cols = tuple(r[1] for r in conn.execute("PRAGMA table_info(perf)"))
    if cols != SCHEMA1_FIELDS:
        raise Broken(f"schema 1 table 'perf' has columns {list(cols)}; expected "
                     f"{list(SCHEMA1_FIELDS)}")
    conn.execute("ALTER TABLE perf RENAME TO perf_schema1")
    create = SCHEMA[SCHEMA.index("CREATE TABLE perf"):]
    conn.execute(create[:create.index(";")])
    conn.execute(f"INSERT INTO perf ({','.join(FIELDS)}) SELECT "
                 f"{select_fields(1)} FROM perf_schema1")
    n = conn.execute("SELECT count(*) FROM perf").fetchone()[0]
    conn.execute("DROP TABLE perf_schema1")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    logger.info("perf db %s: upgraded schema 1 -> %d; its %d entries predate engine "
                "names and are kept for the engine that wrote them (claimed at its first "
                "lookup)", path, SCHEMA_VERSION, n)
