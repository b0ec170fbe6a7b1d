"""Command-line helpers of ``hipdnn-async perfdb show|clear|export|import``: each does the
work through ``PerfDb`` and prints one summary line (and, for show, one line per entry)."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ._paths import MEMORY

if TYPE_CHECKING:
    from ._store import PerfDb

__all__ = ["cli_clear", "cli_export", "cli_import", "cli_show"]


def cli_show(db: PerfDb, out=None) -> int:
    """Print one line per entry and a summary line; return the number of entries."""
    out = sys.stdout if out is None else out
    entries = db.entries()
    where = db.path + (" (in memory)" if db.in_memory and db.path != MEMORY else "")
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
