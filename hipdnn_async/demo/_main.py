"""``hipdnn-async demo``: train, evaluate and serve the digits CNN; print, plot, save."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import time

import anyio
import numpy as np

from .._cli_args import check_output_file
from ._common import DemoConfig, DemoError
from ._data import TRAIN_IMAGES

__all__ = ["main", "run", "parse_args", "accuracy_failure"]

_GRADCHECK_BATCH = 4
# scikit-learn's random_state takes [0, 2**32 - 1] (sklearn.utils.check_random_state);
# NumPy's default_rng(seed + 1) any int >= 0.
_MAX_SEED = 2 ** 32 - 1


# matplotlib's Agg/PDF/SVG/PS writers (matplotlib.backend_bases.FigureCanvasBase filetypes)
_PLOT_FORMATS = frozenset({"png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif",
                           "tiff", "webp", "pgf", "raw", "rgba"})

def parse_args(argv: list[str] | None = None) -> tuple[DemoConfig, argparse.Namespace]:
    """Parse the demo's command line into a DemoConfig and the output options."""
    d = DemoConfig()
    p = argparse.ArgumentParser(
        prog="hipdnn-async demo",
        description="Train a small CNN on scikit-learn's 8x8 handwritten digits with "
                    "hipdnn_async plans only (convolutions and batchnorms), evaluate it "
                    "two ways, and serve it to concurrent clients through dynamic batchers.")
    p.add_argument("--epochs", type=int, default=d.epochs, help=f"default {d.epochs}")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help=f"training batch size, default {d.batch_size}")
    p.add_argument("--device", default=d.device,
                   help="cpu (default), gpu:N, cuda:N or hip:N")
    p.add_argument("--seed", type=int, default=d.seed,
                   help=f"split, weights and batch order, 0 to {_MAX_SEED}, default {d.seed}")
    p.add_argument("--benchmarking", action="store_true",
                   help="build every plan with global.benchmarking=1 (tuned once, kept in "
                        "the perf db)")
    p.add_argument("--perfdb", metavar="FILE", default=None,
                   help="perf db file (default $HIPDNN_ASYNC_PERFDB or the per-user one)")
    p.add_argument("--lr", type=float, default=d.lr, help=f"initial learning rate, default {d.lr}")
    p.add_argument("--clients", type=int, default=d.clients,
                   help=f"concurrent serving clients, default {d.clients}")
    p.add_argument("--rounds", type=int, default=d.rounds,
                   help=f"images each client sends, one at a time, default {d.rounds}")
    p.add_argument("--max-batch-size", type=int, default=d.max_batch_size,
                   help=f"dynamic batcher's largest batch, default {d.max_batch_size}")
    p.add_argument("--min-accuracy", type=float, default=d.min_accuracy,
                   help=f"fail below this test accuracy, default {d.min_accuracy}")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="save loss/accuracy and latency plots")
    p.add_argument("--save", metavar="FILE",
                   help="write the trained weights (.npz) for 'hipdnn-async serve --model "
                        "FILE' and hipdnn_async.demo.digits_model")
    p.add_argument("--profile", metavar="FILE.json",
                   help="write the serving phase's trace (trace-event JSON, for Perfetto or "
                        "'hipdnn-async trace FILE.json --png timeline.png')")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    a = p.parse_args(argv)
    for name in ("epochs", "batch_size", "clients", "rounds", "max_batch_size"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(a, name)}")
    if a.batch_size < 2:
        p.error(f"--batch-size must be >= 2 (batchnorm training needs two values per "
                f"channel); got {a.batch_size}")
    if a.batch_size > TRAIN_IMAGES:
        p.error(f"--batch-size {a.batch_size} exceeds the {TRAIN_IMAGES} training images")
    if not 0 <= a.seed <= _MAX_SEED:
        p.error(f"--seed must be an int in [0, {_MAX_SEED}]; got {a.seed}")
    if not 0.0 <= a.min_accuracy <= 1.0:
        p.error(f"--min-accuracy is a fraction in [0, 1]; got {a.min_accuracy}")
    if not (a.lr > 0 and a.lr <= float(np.finfo(np.float32).max)):  # SGD runs in float32
        p.error(f"--lr must be a finite float32 number > 0; got {a.lr}")
    for flag, path in (("--json", a.json), ("--plot", a.plot), ("--save", a.save),
                       ("--profile", a.profile)):
        if path is not None:
            check_output_file(p, flag, path)
    if a.plot:
        ext = os.path.splitext(a.plot)[1].lower().lstrip(".")
        if ext not in _PLOT_FORMATS:
            p.error(f"--plot {a.plot}: unsupported format {ext or '(none)'!r}; use one of "
                    f"{', '.join(sorted(_PLOT_FORMATS))}")
    cfg = DemoConfig(epochs=a.epochs, batch_size=a.batch_size, device=a.device, seed=a.seed,
                     benchmarking=a.benchmarking, lr=a.lr, clients=a.clients, rounds=a.rounds,
                     max_batch_size=a.max_batch_size, min_accuracy=a.min_accuracy,
                     perfdb=a.perfdb, save=a.save, profile=a.profile)
    return cfg, a


async def run(cfg: DemoConfig, progress) -> dict:
    """Run the whole demo on one device; return every figure (the JSON document).

    Raises
    ------
    DemoError
        scikit-learn missing, or the gradient check failed (training is not started).
    hipdnn_async.HipdnnError
        The library failed (device absent, a graph not supported, an execution error).
    """
    import hipdnn_async as hd

    from ._data import load_digits_split
    from ._evaluate import evaluate
    from ._gradcheck import check_gradients
    from ._model import Network
    from ._serve import serve
    from ._train import train

    t_start = time.perf_counter()
    data = load_digits_split(cfg.seed)
    if cfg.batch_size > len(data.x_train):
        raise DemoError(f"--batch-size {cfg.batch_size} exceeds the {len(data.x_train)} "
                        "training images")
    timings = {}
    async with hd.Device(cfg.device, perfdb=cfg.perfdb) as dev:
        net = Network(dev, seed=cfg.seed, knobs=cfg.knobs)
        progress.line(f"hipdnn-async demo on {dev.spec}: {len(data.x_train)} training / "
                      f"{len(data.x_test)} test digits")

        t0 = time.perf_counter()
        gc = await check_gradients(net, data.x_train[:_GRADCHECK_BATCH],
                                   data.y_train[:_GRADCHECK_BATCH], seed=cfg.seed)
        timings["gradcheck_s"] = time.perf_counter() - t0
        progress.line(f"  gradient check ok: {gc['checks']} directional derivatives, "
                      f"max rel err {gc['max_rel_err']:.1e}")

        t0 = time.perf_counter()
        history = await train(net, data, cfg, progress)
        timings["train_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        ev = await evaluate(net, data)
        timings["eval_s"] = time.perf_counter() - t0
        progress.line(f"  evaluated: (a) {ev['accuracy']['bn_inference']:.2%}  "
                      f"(b) {ev['accuracy']['folded']:.2%}; serving "
                      f"{cfg.clients * cfg.rounds} requests from {cfg.clients} clients ...")
        if cfg.save:
            from ._saved import save_weights
            try:
                saved = save_weights(cfg.save, net, data)
            except OSError as exc:
                raise DemoError(f"--save {cfg.save}: cannot write: {exc}") from None
            progress.line(f"  weights saved to {saved}")

        t0 = time.perf_counter()
        async with (dev.profile() if cfg.profile else contextlib.nullcontext()) as prof:
            sv = await serve(dev, net, data, ev.pop("folded"),
                             np.asarray(ev["predictions"]["folded"]), cfg)
        timings["serve_s"] = time.perf_counter() - t0
        if prof is not None:
            try:
                prof.export_chrome_trace(cfg.profile)
            except OSError as exc:
                raise DemoError(f"--profile {cfg.profile}: cannot write: {exc}") from None
            progress.line(f"  serving trace written to {cfg.profile} ({len(prof.executions)} "
                          f"executions, {len(prof.batches)} batches)")
        plan_stats = dev.plan_stats()
        engines = {p.pattern: p.engine.name for p in net.plans}
        benchmarked = sum(bool(p.benchmarked) for p in net.plans)
        perfdb_hits = sum(bool(p.perfdb_hit) for p in net.plans)
        spec = dev.spec
    timings["total_s"] = time.perf_counter() - t_start

    failures = []
    acc = min(ev["accuracy"].values())
    if acc < cfg.min_accuracy:
        failures.append(accuracy_failure(acc, cfg))
    if not ev["predictions_identical"]:
        failures.append(f"(a) and (b) differ on {ev['mismatches']} images")
    if not sv["predictions_match"]:
        failures.append(f"{sv['mismatches']} served predictions differ from the batch "
                        "evaluation")
    return {
        "ok": not failures, "failures": failures,
        "device": spec, "engines": engines,
        "config": dataclasses.asdict(cfg),
        "data": {"train": len(data.x_train), "test": len(data.x_test),
                 "pixel_mean": data.pixel_mean, "pixel_std": data.pixel_std},
        "architecture": [dataclasses.asdict(layer) for layer in net.layers],
        "gradient_check": gc,
        "steps_per_epoch": len(data.x_train) // cfg.batch_size,
        "history": history,
        "test_accuracy": ev["accuracy"]["bn_inference"],
        "evaluation": ev,
        "serving": sv,
        "plans_per_pattern": {k: v["plans"] for k, v in plan_stats.items()},
        "plan_stats": plan_stats,
        "benchmarking": {"enabled": cfg.benchmarking, "benchmarked": benchmarked,
                         "perfdb_hits": perfdb_hits},
        "stats": hd.stats(),
        "timings": timings,
    }


def accuracy_failure(acc: float, cfg: DemoConfig) -> str:
    """The failure line for a test accuracy `acc` (a fraction) under ``cfg.min_accuracy``,
    naming the two options that move it (``--epochs``, ``--min-accuracy``)."""
    floor = math.floor(acc * 100) / 100          # a floor this run would have passed
    return (f"test accuracy {acc:.2%} is below the floor {cfg.min_accuracy:.2%} after "
            f"{cfg.epochs} epoch(s): train longer (--epochs; {DemoConfig.epochs} by default) "
            f"or lower the floor (--min-accuracy, a fraction: e.g. --min-accuracy {floor:.2f})")


def main(argv: list[str] | None = None) -> int:
    """Run ``hipdnn-async demo`` with `argv` (default ``sys.argv[1:]``); return the status.

    Returns 0 when every check passed, 1 when one failed (gradient check, accuracy under
    ``--min-accuracy``, predictions that differ) or the library raised; argparse exits
    with 2 on a bad command line.
    """
    from . import _report

    cfg, args = parse_args(argv)
    progress = _report.Progress(enabled=not args.quiet)
    try:
        result = anyio.run(run, cfg, progress, backend="asyncio")
    except DemoError as exc:
        print(f"hipdnn-async demo: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        from hipdnn_async import HipdnnError
        if not isinstance(exc, HipdnnError):
            raise
        print(f"hipdnn-async demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for path, write in ((args.json, _report.write_json), (args.plot, _report.plot)):
        if not path:
            continue
        try:
            write(result, path)
        except (OSError, ValueError) as exc:  # e.g. a full disk: still print the figures
            print(_report.summary(result), end="")
            print(f"hipdnn-async demo: cannot write {path}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return 1
    if not args.quiet:
        print(_report.summary(result), end="")
        for path, what in ((args.json, "figures"), (args.plot, "figure")):
            if path:
                print(f"  {what} written to {path}")
    if not result["ok"]:
        print("hipdnn-async demo: " + "; ".join(result["failures"]), file=sys.stderr)
        return 1
    return 0
