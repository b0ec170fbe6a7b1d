"""JSON import and export of a perf db's entries: the export document written atomically
without clobbering anything of the user's, and an import checked field by field before
anything is written."""
from __future__ import annotations

import contextlib
import json
import math
import os
import threading

from ._paths import MEMORY
from ._records import FIELDS, INT_MAX, SCHEMA1_FIELDS, STR_FIELDS, encodable, error, os_error
from ._schema import FORMAT, SCHEMA1_ENGINE, SCHEMA_VERSION
from ._triage import SQLITE_MAGIC, Unusable, read_head, regular_or_missing

__all__ = ["read_export", "write_export"]


def _is_export(path: str) -> bool:
    """Whether ``path`` holds a JSON export of a perf db (what ``write_export`` writes), the
    only existing file an export may replace."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == FORMAT


def write_export(path: str, entries, *, db_path: str) -> int:
    """Write ``entries()`` (called once the target is checked) as an export document to
    the checked, absolute `path`, atomically; return the number written. `db_path` is the
    db's own file (``":memory:"`` for none), never overwritten.

    Raises
    ------
    PerfDbError, DeviceError
        As ``PerfDb.export_json``.
    """
    try:
        regular_or_missing(path, "export target")
    except Unusable as exc:
        raise error(f"PerfDb.export_json: {exc}; export to a regular file") from None
    head = (read_head(path, 16) or b"")
    if head == SQLITE_MAGIC or (db_path != MEMORY and path == db_path):
        raise error(f"PerfDb.export_json: {path!r} is a SQLite database (the perf db "
                    "itself?); refusing to overwrite it with JSON")
    if head and not _is_export(path):
        raise error(f"PerfDb.export_json: {path!r} exists and is not a perf-db export; "
                    "refusing to overwrite it (remove it or choose another path)")
    entries = entries()
    doc = {"format": FORMAT, "version": SCHEMA_VERSION, "entries": entries}
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
            raise error(f"PerfDb.export_json: cannot write {path!r}: "
                        f"{exc.strerror or exc}") from None
        raise os_error(f"PerfDb.export_json: cannot write {path!r}: "
                       f"{exc.strerror or exc}") from exc
    return len(entries)


def read_export(path: str) -> list[tuple]:
    """The entries of the export document at the checked `path`, as rows in column order.

    Raises
    ------
    PerfDbError, DeviceError
        As ``PerfDb.import_json``.
    """
    where = f"PerfDb.import_json: {path!r}"
    try:
        regular_or_missing(path, "import source")
    except Unusable as exc:   # a FIFO would block the read
        raise error(f"PerfDb.import_json: {exc}; import from a regular file") from None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    except OSError as exc:
        raise os_error(f"{where}: cannot read ({exc.strerror or exc})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where}: not valid JSON ({exc})") from exc
    return _validate_export(doc, where)


def _export_entries(doc, where: str) -> tuple[tuple, list]:
    """(fields of the export's schema, its entries) of a checked export document."""
    if isinstance(doc, dict) and set(doc) == {"format", "version", "entries"}:
        if doc["format"] != FORMAT:
            raise error(f"{where}: field 'format' must be {FORMAT!r}; "
                        f"got {doc['format']!r}")
        if doc["version"] not in (1, SCHEMA_VERSION) or isinstance(doc["version"], bool):
            raise error(f"{where}: field 'version' must be 1 or {SCHEMA_VERSION}; "
                        f"got {doc['version']!r}")
        # a schema-1 export has no engine: its entries import as schema-1 entries
        fields = SCHEMA1_FIELDS if doc["version"] == 1 else FIELDS
        entries = doc["entries"]
        if not isinstance(entries, list):
            raise error(f"{where}: field 'entries' must be a list; "
                        f"got {type(entries).__name__}")
        return fields, entries
    raise error(f"{where}: not a perf db export; need an object with fields "
                f"'format', 'version', 'entries'; got {_json_kind(doc)}")


def _json_kind(doc) -> str:
    """What a decoded JSON value is, in JSON's words: "an object with fields ['a']", "an
    empty object", "an array", ... (a bare ``[]`` for ``{}`` read as a list was given)."""
    if isinstance(doc, dict):
        return f"an object with fields {sorted(doc)}" if doc else "an empty object"
    if isinstance(doc, bool):
        return f"the boolean {str(doc).lower()}"
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number",
             type(None): "null"}
    return kinds.get(type(doc), type(doc).__name__)


def _validate_export(doc, where: str) -> list[tuple]:
    """Check an export document field by field; return rows in column order."""
    fields, entries = _export_entries(doc, where)
    rows = []
    for i, e in enumerate(entries):
        at = f"{where}: entry {i}"
        if not isinstance(e, dict):
            raise error(f"{at}: must be an object; got {type(e).__name__}")
        missing = [f for f in fields if f not in e]
        extra = sorted(set(e) - set(fields))
        if missing:
            raise error(f"{at}: missing field '{missing[0]}'")
        if extra:
            raise error(f"{at}: unknown field '{extra[0]}'")
        row = []
        for f in FIELDS:
            v = e.get(f, SCHEMA1_ENGINE)      # only "engine" can be absent (schema 1)
            if f in STR_FIELDS:
                ok = isinstance(v, str) and encodable(v)
                want = "a str (valid Unicode: no lone surrogates)"
            elif f in ("workspace_limit", "workspace_bytes"):
                ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT_MAX
                want = "an int in [0, 2**63 - 1]"
            else:
                ok = (isinstance(v, (int, float)) and not isinstance(v, bool)
                      and math.isfinite(v) and v >= 0)
                want = "a finite number >= 0"
                v = float(v) if ok else v
            if not ok:
                raise error(f"{at}: field '{f}' must be {want}; got {v!r}")
            row.append(v)
        rows.append(tuple(row))
    return rows
