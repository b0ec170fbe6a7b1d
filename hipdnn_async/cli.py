"""The ``hipdnn-async`` command: ``demo``, ``info``, ``bench`` (``bench overlap``),
``trace``, ``perfdb {show,clear,export,import}``, ``serve`` (with the ``ray`` extra)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from ._cli_args import check_output_file

__all__ = ["main"]


def _gpu_info() -> dict:
    """Per GPU vendor (runtime.VENDORS): where its runtime and DNN library were found, or
    why its devices are not usable."""
    from .runtime import VENDORS, load_vendor
    out = {}
    for name, vendor in VENDORS.items():
        state = load_vendor(name)
        info = {"usable": state.ok, "reason": state.reason, "devices": state.device_count}
        for lib, rec in ((vendor.runtime.name, state.runtime_record), (vendor.dnn.name, state.dnn)):
            if rec is not None:
                info[lib] = {"path": rec.path, "found_via": rec.found_via, "version": rec.version}
        out[name] = info
    return out


def _cpu_info() -> dict:
    """The CPU's DNN library: oneDNN's path, version, ISA and threads (ONEDNN_ENGINE runs),
    and the build of ONEDNN_ENGINE's own batchnorm rows per element type; or why oneDNN is
    not used (CPU_ENGINE, over NumPy, runs everything)."""
    from .providers.cpu import _kernels
    from .runtime import load_onednn
    state = load_onednn()
    info = {"onednn": state.ok, "engines": (["ONEDNN_ENGINE", "CPU_ENGINE"] if state.ok
                                            else ["CPU_ENGINE"])}
    if state.ok:
        major, minor, patch, git, runtime = state.version
        info.update(path=state.record.path, found_via=state.record.found_via,
                    version=f"{major}.{minor}.{patch}", git_hash=git, runtime=runtime,
                    isa=state.isa, threads=state.threads,
                    batchnorm_rows={k: _kernels.bn_rows_isa(k)
                                    for k in ("float32", "bfloat16", "float16")})
    else:
        info["reason"] = state.reason
    return info


def _existing_db(path):
    """The PerfDb at ``path`` (None: the default) if its file exists, else None: read-only
    commands neither create a perf db nor its directory."""
    from . import _perfdb
    if path == ":memory:":           # SQLite's name for a private in-memory db, not a file
        target = path
    else:
        target = os.path.abspath(os.path.expanduser(path)) if path else _perfdb.default_path()
    # A relative $HIPDNN_ASYNC_PERFDB is refused (the default db is in memory, with a
    # warning): never look for it in the working directory.
    # a directory's name: PerfDb refuses it (explicit: PerfDbError; the default: a
    # warning and an in-memory db), rather than "no such file"
    if (target != ":memory:" and os.path.isabs(target) and not os.path.exists(target)
            and not _perfdb.names_directory(path or target)):
        return None, target
    return (_perfdb.PerfDb(path) if path else _default_db()), target


def _info(args) -> int:
    import hipdnn_async as hd
    db, target = _existing_db(args.perfdb)
    info = {
        "version": hd.__version__,
        "devices": hd.devices(),
        "cpu": _cpu_info(),
        "gpu": _gpu_info(),
        "perfdb": str(db.path) if db else target,
        # a refused relative $HIPDNN_ASYNC_PERFDB is an in-memory db, not a file
        "perfdb_exists": db is not None and (db.path == ":memory:" or (
            os.path.isabs(db.path) and os.path.isfile(db.path))),
        "perfdb_entries": len(db.entries()) if db else 0,
        # True: the file was unusable or not a perf db (see stats.perfdb_warnings)
        "perfdb_in_memory": db.in_memory if db else False,
        "stats": hd.stats(),
    }
    print(json.dumps(info, indent=2))
    return 0


def _default_db():
    from . import _perfdb
    return _perfdb.default_perfdb()


def _perfdb_cmd(args) -> int:
    from . import _perfdb
    if args.action in ("show", "export"):
        db, target = _existing_db(args.db)
        if db is None:
            print(f"perf db {target}: no such file (0 entries)"
                  + ("; nothing exported" if args.action == "export" else ""))
            return 0 if args.action == "show" else 1
    else:
        db = _perfdb.PerfDb(args.db) if args.db else _perfdb.default_perfdb()
    if db.in_memory and db.path != ":memory:":
        print(f"hipdnn-async: warning: {db.path} is not usable as a perf db (see "
              "HIPDNN_ASYNC_LOG_LEVEL=warn for why); working on an in-memory db",
              file=sys.stderr)
        if args.action in ("clear", "import"):
            print(f"hipdnn-async: perfdb {args.action}: nothing done to {db.path}",
                  file=sys.stderr)
            return 1
        if args.action == "export" and not len(db):
            # nothing could be read from it (a read-only db of ours still exports)
            print(f"hipdnn-async: perfdb export: nothing read from {db.path}; nothing "
                  "exported", file=sys.stderr)
            return 1
    if args.action == "show":
        _perfdb.cli_show(db)
    elif args.action == "clear":
        _perfdb.cli_clear(db)
    elif args.action == "export":
        _perfdb.cli_export(db, args.file)
    else:
        _perfdb.cli_import(db, args.file)
    return 0


def _bench(args) -> int:
    if args.rest[:1] == ["overlap"]:
        from ._bench_overlap import main as overlap_main
        return overlap_main(args.rest[1:])
    from ._bench import main as bench_main
    return bench_main(args.rest)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _trace(args) -> int:
    from .profiler import check_trace, draw_timeline
    try:
        with open(args.file, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError, RecursionError) as exc:   # RecursionError: nested too deep
        print(f"hipdnn-async trace: {args.file}: cannot read a JSON trace: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if isinstance(trace, list):
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        print(f"hipdnn-async trace: {args.file}: no traceEvents list (not trace-event "
              "JSON)", file=sys.stderr)
        return 1
    problems = check_trace(trace)
    for p in problems[:20]:
        print(f"hipdnn-async trace: {args.file}: {p}", file=sys.stderr)
    events = [e for e in trace["traceEvents"] if isinstance(e, dict)]
    slices = [e for e in events if e.get("ph") == "X"]
    other = trace.get("otherData", {})
    print(f"{args.file}: {len(slices)} slices, "
          f"{sum(1 for e in events if e.get('ph') == 's')} flows"
          + (f", overlap {other['overlap']:.1%}" if isinstance(other, dict)
             and _is_number(other.get("overlap")) else "")
          + ("" if not problems else f"; {len(problems)} format problems"))
    if args.png and problems:
        print(f"hipdnn-async trace: {args.file}: not drawn (fix the format problems first)",
              file=sys.stderr)
    elif args.png and not slices:
        print(f"hipdnn-async trace: {args.file}: no complete events: nothing to draw",
              file=sys.stderr)
    elif args.png:
        try:
            draw_timeline(trace, args.png)
        except ImportError:
            print("hipdnn-async trace: --png needs matplotlib (pip install "
                  "'hipdnn_async[profile]')", file=sys.stderr)
            return 1
        except (OSError, ValueError) as exc:     # e.g. a full disk, an unknown extension
            print(f"hipdnn-async trace: --png {args.png}: not drawn or not written: {exc}",
                  file=sys.stderr)
            return 1
        print(f"timeline written to {args.png}")
    return 1 if problems else 0


def _demo(args) -> int:
    from .demo import main as demo_main
    return demo_main(args.rest)


def _serve(args) -> int:
    from .ray._cli import main as serve_main
    return serve_main(args.rest)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = argparse.ArgumentParser(prog="hipdnn-async", description=__doc__.replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="train and serve a CNN on the UCI digits (the main job)",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_demo)
    p = sub.add_parser("info", help="version, devices, perf db location, counters")
    p.add_argument("--perfdb", help="perf db file (default: $HIPDNN_ASYNC_PERFDB, else "
                   "~/.config/hipdnn_async/perfdb.sqlite3)")
    p.set_defaults(func=_info)
    p = sub.add_parser("bench", help="convolution algorithms: heuristic vs benchmarked vs each; "
                       "'bench overlap': stream overlap",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_bench)
    p = sub.add_parser("trace", help="check a profiler trace (trace-event JSON) and draw "
                       "its timeline")
    p.add_argument("file", help="trace JSON (prof.export_chrome_trace)")
    p.add_argument("--png", metavar="FILE.png", help="write the timeline picture here")
    p.set_defaults(func=_trace)
    p = sub.add_parser("serve", help="serve a model saved by 'demo --save' on a local Ray "
                       "Serve app at 127.0.0.1 (the ray extra)", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_serve)
    p = sub.add_parser("perfdb", help="show, clear, export or import the perf db (JSON)")
    p.add_argument("action", choices=["show", "clear", "export", "import"])
    p.add_argument("file", nargs="?", help="JSON file for export/import")
    p.add_argument("--db", help="perf db file (default: $HIPDNN_ASYNC_PERFDB, else "
                   "~/.config/hipdnn_async/perfdb.sqlite3)")
    p.set_defaults(func=_perfdb_cmd)
    argv = list(sys.argv[1:] if argv is None else argv)
    # demo, bench and serve parse their own options (argparse's REMAINDER drops leading
    # options).
    own = {"demo": _demo, "bench": _bench, "serve": _serve}
    if argv[:1] and argv[0] in own:
        args = argparse.Namespace(command=argv[0], rest=argv[1:], func=own[argv[0]])
    else:
        args = parser.parse_args(argv)
    if args.command == "trace" and args.png is not None:
        check_output_file(parser, "--png", args.png)
    if args.command == "perfdb" and args.action in ("export", "import") and not args.file:
        parser.error(f"perfdb {args.action} needs a FILE")
    if args.command == "perfdb" and args.action in ("show", "clear") and args.file:
        # e.g. `perfdb clear other.sqlite3` would clear the default db, not that file
        parser.error(f"perfdb {args.action} takes no FILE (got {args.file!r}); name the db "
                     "with --db")
    from ._errors import HipdnnError
    try:
        return args.func(args)
    except HipdnnError as exc:
        print(f"hipdnn-async: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `hipdnn-async perfdb show | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
