"""cuDNN's FFT and FFT_TILING for FLOAT weight gradients against the direct algorithms
(ALGO_0 / ALGO_1 / ALGO_3): time, workspace and error in units of our wgrad bound, the
measurement behind the numerical policy's FFT default for FLOAT wgrad (issue 11 item 4).

Why: on the H200 our fp32 NCHW 3x3 weight gradients took 1.3-3.1x PyTorch's time
(bench/results/h200_bench_gpu.log). PyTorch (``cudnn.benchmark=True``) runs cuDNN's
Winograd nonfused there, measured at 2.02x our bound (bench/results/h200_diag_policy.log),
so we decline it; our legacy engine then took ALGO_0 / ALGO_1, because the numerical
policy declined FFT / FFT_TILING for FLOAT weight gradients as "not measured". This
script measured them; the policy now accepts FFT for every FLOAT convolution by default
(hipdnn_async/providers/cudnn/_fft.py) and ``cudnn_legacy.allow_fft = 0`` declines it.

What: for every ResNet-50 fp32 NCHW weight-gradient shape at ``--batch`` (3x3 first, then
the 1x1 and 7x7 ones; ``--layers 3x3`` for the 3x3 ones only), on one device:

- ``default`` / ``default bench``: ``dev.build(g)`` as a user gets it (the legacy engine
  ranks first for FLOAT wgrad; FFT accepted), heuristic and with
  ``global.benchmarking = 1`` (cudnnFind over the algorithms the policy accepts; the
  trials column gives cudnnFind's time of each);
- ``FFT declined`` / ``FFT declined bench``: the legacy engine (``CUDNN_LEGACY_ENGINE``)
  with ``cudnn_legacy.allow_fft = 0`` (direct summation only, the earlier default);
- ``force FFT`` / ``force FFT_TILING``: the legacy engine limited to that one algorithm
  (the engine has no knob that selects an algorithm), so each gets its own time, error
  and workspace even where it is not the fastest; "n/a" where cuDNN's list for the
  problem lacks it (FFT wgrad needs stride 1) or its trial run refuses it;
- ``torch``: ``torch.ops.aten.convolution_backward`` with ``cudnn.benchmark = True`` and
  ``allow_tf32 = False``, as bench/bench_gpu.py times it.

How an algorithm is forced (in this process only, while that plan builds):
``ConvSetup.accepted`` is wrapped (:class:`AcceptedList`) to record cuDNN's list (names,
workspaces) of every build and, for the forced plans, to keep only that algorithm of what
the policy accepted. Each build is checked, else the case is an ERROR: every plan of the
legacy engine offers ``cudnn_legacy.allow_fft`` (1 by default, 0 in the declined rows),
an FFT-declined plan runs no FFT algorithm, and a forced plan runs the forced algorithm.

Error: max |dw - float64| / (atol + rtol |ref|) with ``tests/oracle/_cases.gpu_wgrad_tol``
(n = N * H_out * W_out), the bound tests/gpu checks FLOAT wgrad with: max|dy| = max|x| = 1
for the U(-1, 1) inputs (as the tests take them), the measured maxima with ``--wide``
(magnitudes 2^-8..2^8, as bench/diag_fft.py). dw is filled with NaN before each plan's
first run (cuDNN does not read dw at beta = 0), so an unwritten output reads as NaN; the
error is the larger of the first run's and the last timed run's. Times: CUDA events on
the launching stream over ``--reps`` back-to-back executions (bench_gpu's ``time_plan`` /
``time_torch``, the figures of its conv section), ms per execution.

Output: one table (a row per shape and config: engine/algorithm, ms, ratio to torch,
err/bound, workspace, cudnnFind's trials), then a summary line per shape: the fastest
config within ``--margin`` of the bound (default 0.5: err/bound <= 0.5, half the bound
left for inputs and shapes not drawn here) and the fastest within the bound itself,
whether the best FFT config within the margin beats the fastest direct one (ALGO_0 /
ALGO_1 / ALGO_3) by more than the benchmark noise (3 %), and the shapes sorted by that.
Exit status 1 when any config failed unexpectedly (listed at the end) or no shape ran, 2
without torch or a GPU.

Measured on the H200 (2026-12-01, cuDNN 9.19, torch 2.11, batch 32;
bench/results/h200_diag_wgrad_fft.log: all 14 shapes, U(-1, 1);
h200_diag_wgrad_fft_wide.log: ``--wide --layers 3x3``) with this script's first form
(commit 3b0f193), when the default still declined FFT for FLOAT wgrad and a patch of the
policy accepted it: its ``default`` rows are today's ``FFT declined`` ones and its
``fft`` / ``fft bench`` rows today's ``default`` ones. Every FFT result was at most 0.05
of our bound (0.01 with ``--wide``) against up to 0.33 for the direct algorithms (ALGO_1
on res4 3x3; 0.28 on res5 3x3). With FFT accepted, the legacy heuristic picks FFT on
res3 3x3 (0.161 ms against ALGO_0's 0.357) and res4 3x3 (0.150 against ALGO_1's 0.322)
and keeps ALGO_0 / ALGO_1 elsewhere: res2 3x3 FFT 0.329 against ALGO_0's 0.385 only when
forced (cudnnFind timed it at 0.522, so a benchmark keeps ALGO_0 too), res5 3x3 FFT 1.9x
slower than ALGO_1, 1x1 shapes 1.4-14x slower; cuDNN listed no FFT at stride 2 (res3
3x3/2, conv1 7x7/2, res3 down 1x1/2) and no FFT_TILING at all. FFT workspaces: 148-157
MiB on res2-res4 3x3, 579 MiB on res5 3x3, 157 MiB-2.3 GiB on the 1x1 shapes (never
chosen there). PyTorch's results were at 2.0-3.4x our bound on the 3x3 shapes with
U(-1, 1) inputs (0.22-0.39 with ``--wide``), 0.10-0.12 ms on res3 / res4 3x3.

    python3 bench/diag_wgrad_fft.py [--batch 32] [--wide] [--layers all|3x3] [--reps 20]
                                    [--margin 0.5] [--max-seconds 110] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]

FFT_ALGOS = ("FFT", "FFT_TILING")
DIRECT_ALGOS = ("ALGO_0", "ALGO_1", "ALGO_3")     # cuDNN's direct-summation wgrad algorithms
LEGACY = "CUDNN_LEGACY_ENGINE"
LEGACY_ALLOW_FFT = "cudnn_legacy.allow_fft"
TORCH = "torch"
# The benchmark noise: an FFT time counts as faster only below (1 - this) x the direct
# one (providers/_tuning.BENCH_MARGIN, the same rule a benchmark switches by).
NOISE = 0.03
# A forced algorithm cuDNN does not list for the problem: an expected "n/a", not an error.
NOT_LISTED = "not in cuDNN's list"

# (label, device slot, engine, global.benchmarking, cudnn_legacy.allow_fft, forced
# algorithm); as bench/diag_fft.py's POLICIES: the default (FFT accepted), then FFT
# declined. One Device per slot, so that no plan-cache or perf-db entry is shared between
# policies (the perf-db keys differ too: "[fft] ..." for the default)
CONFIGS = (
    ("default", 0, None, 0, 1, None),
    ("default bench", 0, None, 1, 1, None),
    ("FFT declined", 1, LEGACY, 0, 0, None),
    ("FFT declined bench", 1, LEGACY, 1, 0, None),
    ("force FFT", 2, LEGACY, 0, 1, "FFT"),
    ("force FFT_TILING", 3, LEGACY, 0, 1, "FFT_TILING"),
)
N_DEVICES = 4


# =======================================================================================
# pure parts: selection and summary (tests/unit/test_diag_wgrad_fft.py)

def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def usable(rec: dict, limit: float) -> bool:
    """A record that ran, was timed and whose error is within ``limit`` x the bound (NaN
    and infinite errors never are)."""
    return (rec.get("status") == "ok" and finite(rec.get("ms")) and finite(rec.get("err"))
            and rec["err"] <= limit)


def worst(*errs: float) -> float:
    """The largest error, NaN if any is NaN (``max`` would drop a NaN after a number)."""
    return float("nan") if any(math.isnan(e) for e in errs) else max(errs)


def _fastest(recs):
    return min(recs, key=lambda r: r["ms"]) if recs else None


def verdict(recs: list[dict], margin: float) -> dict:
    """The choice among one shape's records (dicts with ``config``, ``algorithm``, ``ms``,
    ``err`` = error / bound, ``workspace`` bytes and ``status`` "ok" / "n/a" / "error";
    the torch record has ``config`` "torch").

    Returns a dict: ``best`` the fastest record within ``margin`` (torch included),
    ``best_bound`` the fastest within the bound (err <= 1), ``fft`` our fastest FFT /
    FFT_TILING record within the margin, ``fft_over`` our FFT records that ran but are
    outside it, ``direct`` our fastest direct-algorithm record (ALGO_0/1/3, whatever its
    error: the policy's present choice), ``ratio`` fft ms / direct ms, ``beats`` whether
    that ratio is below 1 - NOISE, and ``torch`` the torch record (None if absent). Each
    is None where there is no such record.
    """
    ours = [r for r in recs if r.get("config") != TORCH]
    ran = [r for r in ours if r.get("status") == "ok" and finite(r.get("ms"))]
    fft_ran = [r for r in ran if r.get("algorithm") in FFT_ALGOS]
    fft = _fastest([r for r in fft_ran if usable(r, margin)])
    direct = _fastest([r for r in ran if r.get("algorithm") in DIRECT_ALGOS])
    ratio = fft["ms"] / direct["ms"] if fft and direct and direct["ms"] > 0 else None
    return {"best": _fastest([r for r in recs if usable(r, margin)]),
            "best_bound": _fastest([r for r in recs if usable(r, 1.0)]),
            "fft": fft, "fft_over": [r for r in fft_ran if not usable(r, margin)],
            "direct": direct, "ratio": ratio,
            "beats": ratio is not None and ratio < 1.0 - NOISE,
            "torch": next((r for r in recs if r.get("config") == TORCH), None)}


def _mib(nbytes) -> str:
    return "-" if nbytes is None else f"{nbytes / 2**20:.1f}"


def _num(x, digits=3) -> str:
    return f"{x:.{digits}f}" if finite(x) else ("nan" if isinstance(x, float) else "-")


def _who(rec) -> str:
    if rec["config"] == TORCH:
        return "torch"
    return f"{rec['algorithm']} ({rec['config']})"


def summary_line(shape: str, v: dict, margin: float) -> str:
    """One line: the fastest within the margin (and within the bound if that differs),
    FFT against the direct algorithm, torch's error."""
    parts = []
    b = v["best"]
    parts.append(f"fastest with err/bound <= {margin:g}: " + (
        f"{_who(b)} {_num(b['ms'])} ms, err {_num(b['err'], 2)}" if b else "none"))
    bb = v["best_bound"]
    if bb is not None and bb is not b:
        parts.append(f"with err/bound <= 1: {_who(bb)} {_num(bb['ms'])} ms, err "
                     f"{_num(bb['err'], 2)}")
    f, d = v["fft"], v["direct"]
    if f and d:
        parts.append(f"FFT {'BEATS' if v['beats'] else 'does not beat'} {d['algorithm']}: "
                     f"{f['algorithm']} {_num(f['ms'])} ms (err {_num(f['err'], 2)}, ws "
                     f"{_mib(f.get('workspace'))} MiB) = {v['ratio']:.2f}x {d['algorithm']} "
                     f"({d['config']}, {_num(d['ms'])} ms, err {_num(d['err'], 2)})")
    elif f:
        parts.append(f"FFT {f['algorithm']} {_num(f['ms'])} ms, no direct algorithm timed")
    else:
        parts.append(f"no FFT config with err/bound <= {margin:g}")
    for r in v["fft_over"]:
        parts.append(f"{r['algorithm']} ({r['config']}) err {_num(r['err'], 2)} OVER "
                     f"{margin:g}")
    t = v["torch"]
    if t is not None:
        parts.append(f"torch {_num(t.get('ms'))} ms err {_num(t.get('err'), 2)}"
                     + ("" if usable(t, 1.0) else " (outside our bound)"))
    return f"  {shape}: " + "; ".join(parts)


def decision(verdicts: dict, margin: float) -> list[str]:
    """The lines that say where FFT (accepted by default) is worth it for FLOAT wgrad,
    from every shape's :func:`verdict` (``{shape: verdict}``)."""
    beats = [s for s, v in verdicts.items() if v["beats"]]
    within = [s for s, v in verdicts.items() if v["fft"] is not None]
    over = [f"{s} (" + ", ".join(f"{r['config']} {_num(r['err'], 2)}" for r in v["fft_over"])
            + ")" for s, v in verdicts.items() if v["fft_over"]]
    none = [s for s, v in verdicts.items() if v["fft"] is None and not v["fft_over"]]
    return [f"  FFT with err/bound <= {margin:g} and faster than the direct algorithm by "
            f"> {NOISE:.0%}: {len(beats)} of {len(verdicts)} shapes: {', '.join(beats) or '-'}",
            f"  FFT with err/bound <= {margin:g} at all: {', '.join(within) or '-'}",
            f"  FFT above err/bound {margin:g}: {', '.join(over) or '-'}",
            f"  no FFT config ran: {', '.join(none) or '-'}"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--device", default="cuda:0", help="GPU device spec (default cuda:0)")
    p.add_argument("--batch", type=int, default=32, help="batch N (default 32)")
    p.add_argument("--wide", action="store_true", help="inputs of magnitudes 2^-8..2^8 "
                   "instead of U(-1, 1)")
    p.add_argument("--layers", choices=("all", "3x3"), default="all",
                   help="every ResNet-50 shape, 3x3 first (default), or the 3x3 ones")
    p.add_argument("--reps", type=int, default=20, help="timed executions per figure")
    p.add_argument("--margin", type=float, default=0.5, help="err/bound a config must stay "
                   "within to be chosen in the summary (default 0.5)")
    p.add_argument("--max-seconds", type=float, default=110.0, help="start no new shape "
                   "after this much wall time (default 110)")
    p.add_argument("--json", metavar="FILE", help="write every record as JSON")
    args = p.parse_args(argv)
    if args.batch < 1 or args.reps < 1 or not args.margin > 0:
        p.error("--batch and --reps must be >= 1 and --margin > 0")
    return args


def shapes(convs, layers: str) -> list:
    """The ResNet-50 rows (name, (C, H, W), (K, C, R, S), pad, stride) to run: the 3x3
    ones first (what the question is about), then the rest unless ``layers == "3x3"``."""
    three = [c for c in convs if tuple(c[2][2:]) == (3, 3)]
    rest = [c for c in convs if tuple(c[2][2:]) != (3, 3)]
    return three + ([] if layers == "3x3" else rest)


# =======================================================================================
# the accepted-list wrapper (this process only, while entered)

class AcceptedList:
    """While entered: the legacy engine's ``ConvSetup.accepted`` records cuDNN's list
    ((name, workspace bytes) per entry, in ``seen``) of each policy call and, with
    ``force``, keeps only that algorithm of the list the policy accepted."""

    def __init__(self, force: str | None = None):
        self.force = force
        self.seen: list[list[tuple[str, int]]] = []
        self._saved = None

    def __enter__(self):
        from hipdnn_async._errors import NotSupportedError
        from hipdnn_async.providers.cudnn import _conv
        accepted = _conv.ConvSetup.accepted
        self._saved = (_conv, accepted)
        force, seen = self.force, self.seen

        def accepted_wrapped(setup, candidates, *, deterministic, allow_fft):
            got = accepted(setup, candidates, deterministic=deterministic,
                           allow_fft=allow_fft)
            listed = [(setup.name(c.id), int(c.workspace_bytes)) for c in candidates]
            seen.append(listed)
            if force is None:
                return got
            keep = [c for c in got if c.name == force]
            if keep:
                return keep
            names = ", ".join(n for n, _ in listed) or "nothing"
            if force not in (n for n, _ in listed):
                raise NotSupportedError(f"{force} {NOT_LISTED} for this problem (it lists "
                                        f"{names})")
            # listed but refused: the policy no longer accepts it (not a decline)
            raise RuntimeError(f"diag_wgrad_fft: cuDNN lists {force} but the policy "
                               f"refused it (allow_fft={allow_fft}, deterministic="
                               f"{deterministic}): ConvSetup.accurate no longer accepts "
                               "FFT for FLOAT wgrad; update this diagnostic")

        _conv.ConvSetup.accepted = accepted_wrapped
        return self

    def __exit__(self, *exc):
        _conv, accepted = self._saved
        _conv.ConvSetup.accepted = accepted
        return False


def check_plan(rec: dict, allow_fft: int, force: str | None) -> None:
    """Raise RuntimeError where a plan's record does not show the policy this config asked
    for (module docstring): a legacy plan without ``cudnn_legacy.allow_fft`` = ``allow_fft``,
    an FFT-declined plan running FFT, a forced plan running something else."""
    knobs = rec.get("knobs") or {}
    if rec.get("engine") == LEGACY and knobs.get(LEGACY_ALLOW_FFT) != allow_fft:
        raise RuntimeError(f"diag_wgrad_fft: asked for {LEGACY_ALLOW_FFT}={allow_fft}, the "
                           f"legacy plan has knobs {knobs}; update this diagnostic")
    if not allow_fft and rec.get("algorithm") in FFT_ALGOS:
        raise RuntimeError(f"diag_wgrad_fft: {LEGACY_ALLOW_FFT}=0 but the plan runs "
                           f"{rec['algorithm']}")
    if force is not None and rec.get("algorithm") != force:
        raise RuntimeError(f"diag_wgrad_fft: forced {force} but the plan runs "
                           f"{rec.get('algorithm')}")


# =======================================================================================
# GPU parts

def _inputs(torch, dims, wide, gen):
    x = torch.rand(dims, generator=gen, device="cuda", dtype=torch.float64) * 2 - 1
    if wide:
        x = x * torch.exp2(torch.randint(-8, 9, dims, generator=gen, device="cuda").double())
    return x.float()


class Shape:
    """One wgrad problem: graph, inputs, float64 reference, bound, one variant pack per
    device."""

    def __init__(self, h, batch, row, wide, devs):
        torch, hd = h.torch, h.hd
        self.name, cin, self.w_dims, pad, stride = row
        self.graph, dims = h.conv_graph(hd, "wgrad", batch, cin, self.w_dims, pad, stride,
                                        "float32", "NCHW")
        gen = torch.Generator(device="cuda").manual_seed(11)
        self.t = {"x": _inputs(torch, dims["x"], wide, gen),
                  "w": _inputs(torch, dims["w"], wide, gen),
                  "dy": _inputs(torch, dims["y"], wide, gen)}
        t64 = {k: v.double() for k, v in self.t.items()}      # the rounded inputs, exactly
        torch.backends.cudnn.benchmark = False
        self.ref = h.torch_conv_fn(torch, "wgrad", t64, self.w_dims, pad, stride)()[1]
        self.torch_fn = h.torch_conv_fn(torch, "wgrad", self.t, self.w_dims, pad, stride)
        n = batch * dims["y"][2] * dims["y"][3]
        max_dy, max_x = ((float(self.t["dy"].abs().max()), float(self.t["x"].abs().max()))
                         if wide else (1.0, 1.0))
        self.n = n
        self.atol, self.rtol = h.gpu_wgrad_tol("float32", n, max_dy, max_x)
        self.vps = []
        for dev in devs:
            vp = {k: h.gpu_copy(torch, dev, self.t[k], "NCHW") for k in ("dy", "x")}
            vp["dw"] = dev.empty(self.w_dims, "float32", layout="NCHW")
            self.vps.append(vp)

    def err(self, h, got) -> float:
        return h.over_bound(got, self.ref, self.atol, self.rtol)


async def run_config(h, shape, devs, cfg, reps):
    """The record of one config on one shape (raises on an unexpected failure)."""
    torch = h.torch
    label, slot, engine, bench, allow_fft, force = cfg
    dev, vp = devs[slot], shape.vps[slot]
    knobs = {"global.benchmarking": bench}
    if not allow_fft:
        knobs[LEGACY_ALLOW_FFT] = 0
    wrap = AcceptedList(force)
    t0 = time.perf_counter()
    with wrap:
        plan = await dev.build(shape.graph, engine=engine, knobs=knobs)
    build_s = time.perf_counter() - t0
    rec = {"config": label, "engine": h.engine_of(plan), "algorithm": str(plan.algorithm),
           "workspace": int(plan.workspace_size), "knobs": dict(plan.knobs),
           "benchmarked": bool(plan.benchmarked), "build_s": build_s,
           "trials": h.trials_text(plan.algorithm, limit=8) if bench else "-",
           "reason": getattr(plan.algorithm, "reason", "")}
    rec["listed"] = wrap.seen[-1] if wrap.seen else None
    if force is not None and not wrap.seen:
        raise RuntimeError(f"diag_wgrad_fft: forcing {force} did not reach the legacy "
                           "engine's policy (no ConvSetup.accepted call); update this "
                           "diagnostic")
    check_plan(rec, allow_fft, force)
    if bool(plan.knobs.get("global.benchmarking", 0)) != bool(bench):
        raise RuntimeError(f"diag_wgrad_fft: asked for global.benchmarking={bench}, the plan "
                           f"has {plan.knobs} (is HIPDNN_ASYNC_FORCE_BENCHMARKING set?)")
    out = torch.as_tensor(vp["dw"], device="cuda")
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    await plan.execute(vp)
    first = shape.err(h, out)
    rec["ms"], rec["method"], rec["gpu_ms"] = await h.time_plan(torch, dev, plan, vp, reps)
    rec["err"] = worst(first, shape.err(h, out))
    rec["status"] = "ok"
    return rec


def run_torch(h, shape, reps, method):
    torch = h.torch
    torch.backends.cudnn.benchmark = True
    try:
        ms, gpu_ms = h.time_torch(torch, shape.torch_fn, reps, method, warmup=5)
        err = shape.err(h, shape.torch_fn()[1])
    finally:
        torch.backends.cudnn.benchmark = False
    return {"config": TORCH, "engine": "torch", "algorithm": "cudnn.benchmark", "ms": ms,
            "gpu_ms": gpu_ms, "err": err, "workspace": None, "status": "ok", "trials": "-"}


def _row(shape, rec, torch_ms):
    ratio = rec["ms"] / torch_ms if finite(rec.get("ms")) and finite(torch_ms) and torch_ms \
        else None
    tag = {"CUDNN_LEGACY_ENGINE": "legacy", "CUDNN_GRAPH_ENGINE": "graph"}.get(
        rec.get("engine"), rec.get("engine") or "")
    algo = f"{tag} {rec.get('algorithm', '')}".strip() if rec.get("status") == "ok" else \
        rec["status"].upper()
    note = rec.get("trials", "-") if rec.get("status") == "ok" else rec.get("message", "")
    return [shape, rec["config"], algo[:30], _num(rec.get("ms")), _num(ratio, 2),
            _num(rec.get("err"), 2), _mib(rec.get("workspace")), note[:110]]


HEADER = ["shape", "config", "engine/algorithm", "ms", "/torch", "err", "ws MiB",
          "cudnnFind trials (ms) / why"]
WIDTHS = (18, 16, 30, 7, 6, 6, 7, 0)


def _print_row(cells):
    print("  " + "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(cells, WIDTHS))).rstrip(), flush=True)


async def one_shape(h, args, row, devs):
    shape = Shape(h, args.batch, row, args.wide, devs)
    recs = []
    for cfg in CONFIGS:
        try:
            recs.append(await run_config(h, shape, devs, cfg, args.reps))
        except Exception as exc:  # noqa: BLE001 - reported in the table and the exit status
            msg = f"{type(exc).__name__}: {exc}"
            expected = (cfg[5] is not None and isinstance(exc, h.NotSupportedError))
            recs.append({"config": cfg[0], "status": "n/a" if expected else "error",
                         "message": msg, "ms": None, "err": None, "workspace": None})
    method = next((r["method"] for r in recs if r.get("method")), "cuda_events")
    try:
        recs.append(run_torch(h, shape, args.reps, method))
    except Exception as exc:  # noqa: BLE001
        recs.append({"config": TORCH, "status": "error", "message": f"{type(exc).__name__}: "
                     f"{exc}", "ms": None, "err": None, "workspace": None})
    torch_ms = recs[-1].get("ms")
    for r in recs:
        _print_row(_row(shape.name, r, torch_ms))
    listed = next((r["listed"] for r in recs if r.get("listed")), None)
    if listed:
        print(f"  {'':18s}  cuDNN lists (workspace MiB): "
              + ", ".join(f"{n} {_mib(ws)}" for n, ws in listed), flush=True)
    return shape, recs


async def main_async(args, h):
    hd, torch = h.hd, h.torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    if h.forced_benchmarking() is not None:
        print("diag_wgrad_fft: HIPDNN_ASYNC_FORCE_BENCHMARKING is set; the heuristic columns "
              "would be benchmarked. Unset it.", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="diag_wgrad_fft_")
    rows = shapes(h.RESNET50_CONVS, args.layers)
    print(f"fp32 NCHW wgrad, batch {args.batch}, inputs "
          f"{'wide range 2^-8..2^8' if args.wide else 'U(-1, 1)'}; torch {torch.__version__} "
          f"(cuDNN {torch.backends.cudnn.version()}, benchmark=True, allow_tf32=False); "
          f"ms per execution (CUDA events, {args.reps} back-to-back); err = max |dw - "
          "float64| / (atol + rtol |ref|), gpu_wgrad_tol; ws = workspace")
    start = time.perf_counter()
    records, verdicts, errors, skipped = [], {}, [], []
    async with contextlib.AsyncExitStack() as stack:
        devs = [await stack.enter_async_context(
            hd.Device(args.device, streams=1, max_inflight=args.reps + 16,
                      perfdb=os.path.join(tmp, f"{i}.sqlite3"))) for i in range(N_DEVICES)]
        print(f"  device: {devs[0].provider.describe()}")
        _print_row(HEADER)
        for row in rows:
            if time.perf_counter() - start > args.max_seconds:
                skipped.append(row[0])
                continue
            t0 = time.perf_counter()
            try:
                shape, recs = await one_shape(h, args, row, devs)
            except Exception as exc:  # noqa: BLE001 - the shape's setup itself failed
                errors.append(f"{row[0]}: {type(exc).__name__}: {exc}")
                print(f"  {row[0]}: ERROR {type(exc).__name__}: {exc}", flush=True)
                continue
            verdicts[shape.name] = verdict(recs, args.margin)
            for r in recs:
                r.update(shape=shape.name, n=shape.n, atol=shape.atol, rtol=shape.rtol)
                if r["status"] == "error":
                    errors.append(f"{shape.name} {r['config']}: {r['message']}")
            records += recs
            print(f"  {'':18s}  ({time.perf_counter() - t0:.1f} s; atol {shape.atol:.3g}, "
                  f"rtol {shape.rtol:.3g}, n {shape.n})", flush=True)
    print(f"\n== per shape (margin: err/bound <= {args.margin:g}; 'beats': FFT time < "
          f"{1 - NOISE:.2f} x the direct algorithm's)")
    for name, v in verdicts.items():
        print(summary_line(name, v, args.margin))
    print("\n== FFT against direct summation (the default accepts FFT: run with and "
          "without --wide)")
    for line in decision(verdicts, args.margin):
        print(line)
    print(f"\n  total {time.perf_counter() - start:.1f} s")
    if skipped:
        print(f"  SKIPPED (--max-seconds {args.max_seconds:g} reached): {', '.join(skipped)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"batch": args.batch, "wide": args.wide, "margin": args.margin,
                       "records": records, "skipped": skipped, "errors": errors}, fh,
                      indent=1, default=str)
    if errors:
        print(f"\n  ERRORS ({len(errors)}): a config failed unexpectedly:")
        for e in errors:
            print(f"    {e}")
        return 1
    if not verdicts:
        print("\n  ERROR: no shape ran")
        return 1
    return 0


class _Helpers:
    """The GPU-side imports (torch, hipdnn_async, bench_gpu, diag_policy, the oracle),
    made after argument parsing so that ``--help`` needs none of them."""

    def __init__(self):
        import torch
        import hipdnn_async as hd
        from bench_gpu import (RESNET50_CONVS, _torch_conv_fn, conv_graph, engine_of, gpu_copy,
                               time_plan, time_torch, trials_text)
        from diag_policy import over_bound
        from hipdnn_async._errors import NotSupportedError
        from hipdnn_async._knobs import forced_benchmarking
        from oracle._cases import gpu_wgrad_tol
        self.torch, self.hd = torch, hd
        self.RESNET50_CONVS, self.torch_conv_fn, self.conv_graph = (RESNET50_CONVS,
                                                                    _torch_conv_fn, conv_graph)
        self.engine_of, self.gpu_copy, self.trials_text = engine_of, gpu_copy, trials_text
        self.time_plan, self.time_torch, self.over_bound = time_plan, time_torch, over_bound
        self.NotSupportedError, self.forced_benchmarking = NotSupportedError, forced_benchmarking
        self.gpu_wgrad_tol = gpu_wgrad_tol


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        print(f"diag_wgrad_fft: needs PyTorch with CUDA ({exc})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("diag_wgrad_fft: torch sees no CUDA device", file=sys.stderr)
        return 2
    return asyncio.run(main_async(args, _Helpers()))


if __name__ == "__main__":
    sys.exit(main())
