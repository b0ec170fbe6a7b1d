"""``hipdnn-async bench overlap``: how much the streams of one device overlap.

Runs the same independent convolutions spread over ``--streams`` K streams and on one
stream, each under a profile, and prints the overlap figure (fraction of wall time with
two or more streams busy), the wall times and their ratio, measured in the same run;
writes the K-stream trace (``overlap_trace.json``) and its timeline
(``overlap_timeline.png``) into ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from ._cli_args import check_output_folder

__all__ = ["main", "run"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"need an int >= 1; got {text}")
    return value


def _graph(hd, n: int, c: int, hw: int):
    g = hd.Graph(name=f"conv {n}x{c}x{hw}x{hw} 3x3")
    x = g.tensor(name="x", dims=(n, c, hw, hw), data_type=hd.DataType.FLOAT)
    w = g.tensor(name="w", dims=(c, c, 3, 3), data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(x, w, padding=1)
    y.set_output(True)
    y.set_name("y")
    return g, x, w, y


def _once(hd, spec: str, streams: int, executions: int, shape: tuple):
    """(profile, wall seconds) of ``executions`` convolutions round-robin over ``streams``."""
    g, x, w, y = _graph(hd, *shape)
    rng = np.random.default_rng(0)
    with hd.Device(spec, streams=streams) as dev:
        plan = dev.build_sync(g)
        host = [{x: rng.standard_normal(x.dims).astype(np.float32),
                 w: rng.standard_normal(w.dims).astype(np.float32),
                 y: np.empty(y.dims, np.float32)} for _ in range(streams)]
        if dev.is_host:
            packs = host
        else:
            packs = [{t: dev.empty(t.dims, np.float32) for t in (x, w, y)} for _ in host]
            for p, h in zip(packs, host):
                for t in (x, w):
                    p[t].copy_from(h[t])
        for i in range(streams):                      # warm every stream
            plan.execute_sync(packs[i], stream=i)
        with dev.profile() as prof:
            t0 = time.perf_counter()
            handles = [plan.submit(packs[i % streams], stream=i % streams)
                       for i in range(executions)]
            for h in handles:
                h.result()
            wall = time.perf_counter() - t0
    return prof, wall


def run(spec: str = "cpu", streams: int = 2, executions: int = 16,
        shape: tuple = (4, 32, 28)) -> dict:
    """The benchmark's figures: ``overlap`` (K streams), ``overlap_one_stream`` (0 by
    definition, measured), ``wall_s`` and ``wall_one_stream_s``, ``speedup`` (one-stream
    wall over K-stream wall), and the K-stream profile under ``profile``."""
    import hipdnn_async as hd
    prof, wall = _once(hd, spec, streams, executions, shape)
    one, wall1 = _once(hd, spec, 1, executions, shape)
    return {"device": spec, "streams": streams, "executions": executions,
            "shape": list(shape), "overlap": prof.overlap(),
            "overlap_one_stream": one.overlap(), "wall_s": wall, "wall_one_stream_s": wall1,
            "speedup": wall1 / wall if wall > 0 else None, "profile": prof}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hipdnn-async bench overlap",
                                     description=__doc__.replace("``", ""))
    parser.add_argument("--device", default="cpu", help="cpu (default), gpu:N, cuda:N, hip:N")
    parser.add_argument("--streams", type=_positive, default=2, help="streams, default 2")
    parser.add_argument("--executions", type=_positive, default=16,
                        help="convolutions per run, default 16")
    parser.add_argument("--out", default=".", help="folder for the trace and the picture")
    args = parser.parse_args(argv)
    check_output_folder(parser, "--out", args.out)
    r = run(args.device, args.streams, args.executions)
    prof = r.pop("profile")
    trace_path = os.path.join(args.out, "overlap_trace.json")
    png_path = os.path.join(args.out, "overlap_timeline.png")
    prof.export_chrome_trace(trace_path)
    from .profiler import draw_timeline
    with open(trace_path, encoding="utf-8") as f:
        draw_timeline(json.load(f), png_path)
    print(f"device {r['device']}: {r['executions']} convolutions {tuple(r['shape'])} 3x3")
    print(f"  {r['streams']} streams: wall {r['wall_s'] * 1e3:.2f} ms, two or more streams "
          f"busy {r['overlap']:.1%} of the time")
    print(f"  1 stream : wall {r['wall_one_stream_s'] * 1e3:.2f} ms, overlap "
          f"{r['overlap_one_stream']:.1%}")
    print(f"  speedup (1-stream wall / {r['streams']}-stream wall): {r['speedup']:.2f}x")
    print(f"  trace {trace_path}, timeline {png_path}")
    print(json.dumps(r))
    return 0
