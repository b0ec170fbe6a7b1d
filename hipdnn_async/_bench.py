"""``hipdnn-async bench``: CPU convolution algorithms on ResNet-50 layer shapes.

For each layer and direction it prints the time of every algorithm of every CPU engine
that takes the graph (``hd.engines``: oneDNN's implementations, the NumPy engine's), as
the library's own benchmarking (``global.benchmarking = 1``, a fresh perf db) timed them;
the heuristic's choice (``global.benchmarking = 0``) and the benchmarked choice, each with
its ``execute_sync`` time (median of repeated executions, host work included); and the
ratios heuristic/best and benchmarked/best of their algorithms' benchmarking times, so
that all three come from one measurement. Times in ms, all in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time

import numpy as np

from ._cli_args import check_output_file

__all__ = ["main", "RESNET50_LAYERS"]

# (name, x dims, w dims, padding, stride): ResNet-50 v1.5 layers (He et al. 2016, table 1),
# batch 1 by default so the slowest algorithms still finish on a 2-core machine.
RESNET50_LAYERS = [
    ("conv1 7x7/2", (1, 3, 224, 224), (64, 3, 7, 7), 3, 2),
    ("res2 1x1", (1, 256, 56, 56), (64, 256, 1, 1), 0, 1),
    ("res2 3x3", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("res3 3x3/2", (1, 128, 56, 56), (128, 128, 3, 3), 1, 2),
    ("res5 3x3", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
]


# After NumPy's BLAS (the NumPy engine's algorithms) its worker threads spin for about
# 0.1 s, and oneDNN's OpenMP threads running meanwhile share the cores with them: on 2
# cores a 1.2 ms oneDNN convolution took 17-36 ms there. The other engines are timed
# after this much quiet.
BLAS_SETTLE_S = 0.25


def _graph(hd, direction, x_dims, w_dims, pad, stride, layout="NCHW", dtype="float32"):
    """One convolution of ``layout`` (its x, w, dy in that memory order) and ``dtype`` I/O
    (float32 compute)."""
    kw = dict(io_data_type=dtype, compute_data_type=hd.DataType.FLOAT,
              intermediate_data_type=hd.DataType.FLOAT)
    g = hd.Graph(name=f"bench_{direction}", **kw)
    x = g.tensor(dims=x_dims, layout=layout, name="x")
    w = g.tensor(dims=w_dims, layout=layout, name="w")
    if direction == "fprop":
        out = g.conv_fprop(x, w, padding=pad, stride=stride)
        return g, out.set_output(True)
    fwd = hd.Graph()
    y_dims = fwd.conv_fprop(fwd.tensor(dims=x_dims), fwd.tensor(dims=w_dims),
                            padding=pad, stride=stride).dims
    g = hd.Graph(name=f"bench_{direction}", **kw)
    dy = g.tensor(dims=y_dims, layout=layout, name="dy")
    if direction == "dgrad":
        out = g.conv_dgrad(dy, g.tensor(dims=w_dims, layout=layout, name="w"),
                           dx_dims=x_dims, padding=pad, stride=stride)
    else:
        out = g.conv_wgrad(dy, g.tensor(dims=x_dims, layout=layout, name="x"),
                           dw_dims=w_dims, padding=pad, stride=stride)
    return g, out.set_output(True)


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _variant_pack(dev, g, rng):
    """U(-1, 1) device arrays of each tensor's dims, strides and data type."""
    vp = {}
    for t in g.tensors:
        if not t.is_virtual:
            vp[t] = dev.empty(t.dims, t.data_type, strides=t.strides)
            vp[t].view[...] = rng.uniform(-1, 1, t.dims)
    return vp


def run(directions=("fprop", "dgrad", "wgrad"), layers=RESNET50_LAYERS, repeats=3, *,
        layout="NCHW", dtype="float32", batch=1) -> list[dict]:
    """The rows of the table: ``layers`` (name, x dims, w dims, padding, stride; x's N
    replaced by ``batch``) in ``layout`` with ``dtype`` I/O, per direction."""
    import hipdnn_async as hd

    rng = np.random.default_rng(0)
    rows = []
    # a fresh db (benchmarking really runs), removed afterwards
    with tempfile.TemporaryDirectory(prefix="hipdnn_async_bench_") as folder:
        db = hd.PerfDb(os.path.join(folder, "perfdb.sqlite3"))
        with hd.Device("cpu", streams=1, perfdb=db) as dev:
            for name, x_dims, w_dims, pad, stride in layers:
                x_dims = (batch,) + tuple(x_dims[1:])
                for direction in directions:
                    g, _ = _graph(hd, direction, x_dims, w_dims, pad, stride, layout, dtype)
                    vp = _variant_pack(dev, g, rng)
                    algos = {}      # every engine's algorithms, as benchmarking timed them
                    for engine in hd.engines(g, dev):
                        plan = dev.build_sync(g, engine=engine.name,
                                              knobs={"global.benchmarking": 1})
                        algos.update(plan.algorithm.trials)
                        if engine.name == "CPU_ENGINE":
                            time.sleep(BLAS_SETTLE_S)
                    heur = dev.build_sync(g)
                    tuned = dev.build_sync(g, knobs={"global.benchmarking": 1})
                    best = min(algos.values())
                    rows.append({
                        "layer": name, "direction": direction, "layout": layout,
                        "dtype": dtype, "batch": batch, "algorithms_ms": algos,
                        "heuristic": str(heur.algorithm),
                        "heuristic_ms": _time(lambda: heur.execute_sync(vp), repeats),
                        "benchmarked": str(tuned.algorithm),
                        "benchmarked_ms": _time(lambda: tuned.execute_sync(vp), repeats),
                        "heuristic_over_best": _over(algos, heur.algorithm, best),
                        "benchmarked_over_best": _over(algos, tuned.algorithm, best),
                    })
    return rows


def _over(algos: dict, algorithm, best: float):
    """``algorithm``'s benchmarking time over the best one's, or None where benchmarking
    did not time it."""
    t = algos.get(str(algorithm))
    return None if t is None else t / best


def _directions(text: str) -> tuple:
    dirs = tuple(d.strip() for d in text.split(",") if d.strip())
    bad = [d for d in dirs if d not in ("fprop", "dgrad", "wgrad")]
    if bad or not dirs:
        raise argparse.ArgumentTypeError(f"unknown direction(s) {bad or text!r}; "
                                         "use fprop, dgrad, wgrad")
    return dirs


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"need an int >= 1; got {value}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="hipdnn-async bench", description=__doc__.replace("``", ""),
        epilog="hipdnn-async bench overlap --help: the stream-overlap benchmark")
    parser.add_argument("--directions", type=_directions, default="fprop,dgrad,wgrad",
                        help="comma-separated subset of fprop,dgrad,wgrad")
    parser.add_argument("--repeats", type=_positive, default=3, help="timed runs (>= 1)")
    parser.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW",
                        help="memory order of x, w, dy (default NCHW)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        default="float32", help="I/O data type; compute float32")
    parser.add_argument("--batch", type=_positive, default=1, help="batch N (default 1)")
    parser.add_argument("--quick", action="store_true", help="two small layers only")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    if args.json is not None:     # checked before minutes of benchmarking
        check_output_file(parser, "--json", args.json)
    layers = RESNET50_LAYERS[1:3] if args.quick else RESNET50_LAYERS
    rows = run(args.directions, layers, args.repeats, layout=args.layout, dtype=args.dtype,
               batch=args.batch)
    print(f"{args.layout} {args.dtype}, batch {args.batch}")
    table = [("layer", "dir", "heuristic (ms)", "benchmarked (ms)", "h/best", "b/best")]
    for r in rows:
        table.append((r["layer"], r["direction"],
                      f"{r['heuristic']}={r['heuristic_ms']:.2f}",
                      f"{r['benchmarked']}={r['benchmarked_ms']:.2f}",
                      _ratio(r["heuristic_over_best"]), _ratio(r["benchmarked_over_best"])))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for i, row in enumerate(table):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i:   # every algorithm's benchmarking time, fastest first, wrapped under its row
            algos = sorted(rows[i - 1]["algorithms_ms"].items(), key=lambda kv: kv[1])
            print(textwrap.fill(" ".join(f"{k}={v:.2f}" for k, v in algos), width=100,
                                initial_indent="    algorithms (ms): ",
                                subsequent_indent=" " * 21, break_on_hyphens=False))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
