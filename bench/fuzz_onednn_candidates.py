"""Every oneDNN candidate of random small convolutions against float64: how the
``Conv._left_out`` rules for oneDNN 3.2's faulty kernels were found, and how to look for
more on another CPU (an AMX one, an AVX2 one).

Each case is a random convolution (2-D or 3-D, groups, stride, dilation, asymmetric
padding, float32 or bfloat16 I/O, channels first or last; fprop, dgrad or wgrad). The
default plan is built, then one plan per candidate that build lists
(``plan.algorithm.trials``), each pinned by the knob ``onednn.candidate``; each runs with
its output NaN-filled and a workspace of 0xFF bytes (NaN in float32 and bfloat16), so an
element left unwritten or a workspace byte read before it was written shows, and is
compared with
``tests/oracle/_reference.py`` under the oracle's tolerances. A case the engine declines
is a pass (``CPU_ENGINE`` runs it).

    python bench/fuzz_onednn_candidates.py [--seed S] [--cases N] [--directions wgrad]
                                           [--scale K]

Prints one JSON line per failing case and a summary; exit status 1 where any failed.
A crash (a kernel writing past its buffers) ends the process: ``--verbose`` prints each
case and candidate before it runs, so the last lines name it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import numpy as np  # noqa: E402

from oracle import _reference as ref  # noqa: E402
from oracle._cases import np_dtype, tol, wgrad_tol  # noqa: E402

DIRECTIONS = ("fprop", "dgrad", "wgrad")


def random_case(r: random.Random, directions=DIRECTIONS, scale: int = 1) -> dict:
    """A random small convolution whose every output dim is >= 1 and whose padding is
    below the dilated kernel's extent on each side; ``scale`` multiplies the largest
    channel counts (18 per group) and image sides (7; 3-D at most 2x), for kernels that
    take only larger problems (oneDNN's brgconv ones)."""
    nsp = r.choice([2, 3])
    groups = r.choice([1, 1, 2, 3])
    side = 7 * (scale if nsp == 2 else min(scale, 2))
    case = dict(direction=r.choice(list(directions)), dtype=r.choice(["float32", "bfloat16"]),
                channels_last=r.choice([True, False]), n=r.randint(1, 3), groups=groups,
                c=groups * r.randint(1, 18 * scale), k=groups * r.randint(1, 18 * scale))
    while True:
        sp = [r.randint(1, side) for _ in range(nsp)]
        ks = [r.randint(1, 5) for _ in range(nsp)]
        dil = [r.choice([1, 1, 2]) for _ in range(nsp)]
        ext = [(k - 1) * d + 1 for k, d in zip(ks, dil)]
        pre = [r.randint(0, e - 1) for e in ext]
        post = [r.randint(0, e - 1) for e in ext]
        stride = [r.randint(1, 3) for _ in range(nsp)]
        if all(s + a + b >= e for s, a, b, e in zip(sp, pre, post, ext)):
            break
    case.update(spatial=sp, kernel=ks, dilation=dil, pre=pre, post=post, stride=stride)
    return case


def _order(ndim: int, last: bool) -> tuple:
    return (0,) + tuple(range(2, ndim)) + (1,) if last else tuple(range(ndim))


def _array(dims, dtype, last, rng=None, fill=None):
    """Logical (N, C, ...) view of memory in channels-last or -first order."""
    order = _order(len(dims), last)
    shape = [dims[a] for a in order]
    phys = (np.full(shape, fill, np_dtype(dtype)) if rng is None
            else rng.uniform(-1, 1, shape).astype(np_dtype(dtype)))
    return phys.transpose(np.argsort(order))


def _problem(hd, case):
    """(graph, input arrays by name, output dims, float64 reference, (atol, rtol))."""
    nsp = len(case["spatial"])
    xd = (case["n"], case["c"], *case["spatial"])
    wd = (case["k"], case["c"] // case["groups"], *case["kernel"])
    geom = (case["pre"], case["post"], case["stride"], case["dilation"])
    yd = tuple(ref.conv_out_dims(xd, wd, *geom))
    last, dtype = case["channels_last"], case["dtype"]
    layout = {(2, True): "NHWC", (3, True): "NDHWC", (2, False): "NCHW",
              (3, False): "NCDHW"}[(nsp, last)]
    rng = np.random.default_rng(0)
    x, w, dy = (_array(d, dtype, last, rng) for d in (xd, wd, yd))
    g = hd.Graph(io_data_type=dtype)
    kw = dict(pre_padding=case["pre"], post_padding=case["post"], stride=case["stride"],
              dilation=case["dilation"])
    d = case["direction"]
    if d == "fprop":
        out = g.conv_fprop(g.tensor(dims=xd, layout=layout, name="x"),
                           g.tensor(dims=wd, layout=layout, name="w"), **kw)
        ins, od, want = {"x": x, "w": w}, yd, ref.conv_fprop(x, w, *geom)
        terms, (atol, rtol) = wd[1] * math.prod(wd[2:]), tol("conv_fprop", dtype)
    elif d == "dgrad":
        out = g.conv_dgrad(g.tensor(dims=yd, layout=layout, name="dy"),
                           g.tensor(dims=wd, layout=layout, name="w"), dx_dims=xd, **kw)
        ins, od, want = {"dy": dy, "w": w}, xd, ref.conv_dgrad(dy, w, xd, *geom)
        terms, (atol, rtol) = (wd[0] // case["groups"]) * math.prod(wd[2:]), \
            tol("conv_dgrad", dtype)
    else:
        out = g.conv_wgrad(g.tensor(dims=yd, layout=layout, name="dy"),
                           g.tensor(dims=xd, layout=layout, name="x"), dw_dims=wd, **kw)
        ins, od, want = {"dy": dy, "x": x}, wd, ref.conv_wgrad(dy, x, wd, *geom)
        terms = 1
        atol, rtol = wgrad_tol(dtype, yd[0] * math.prod(yd[2:]), 1.0, 1.0)
    out.set_output(True).set_name("out").set_strides(hd.strides_for(od, layout))
    # sums of `terms` U(-1, 1) products: the static table's bound grows as sqrt(terms)
    return g, ins, od, want, (atol * math.sqrt(max(terms, 1)), rtol)


PIN = "onednn.candidate"     # the knob that builds a given candidate


def check_case(hd, dev, case, verbose=False) -> list:
    """[(candidate, ok, what)] for every candidate of the case's default build (each
    built with ``onednn.candidate`` pinning it); [] where ONEDNN_ENGINE declines it."""
    g, ins, od, want, (atol, rtol) = _problem(hd, case)
    try:
        default = dev.build_sync(g, engine="ONEDNN_ENGINE")
    except hd.NotSupportedError:
        return []
    results = []
    for i, (name, _) in enumerate(default.algorithm.trials):
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs={PIN: i})
        assert str(plan.algorithm) == name, (i, name, str(plan.algorithm))
        if verbose:
            print("  candidate", name, flush=True)
        out = _array(od, case["dtype"], case["channels_last"], fill=np.nan)
        kw = ({"workspace": np.full(plan.workspace_size + 64, 0xFF, np.uint8)}
              if plan.workspace_size else {})
        plan.execute_sync({**ins, "out": out}, **kw)
        got = out.astype(np.float64)
        bad = ~(np.abs(got - want) <= atol + rtol * np.abs(want))
        results.append((name, not bad.any(), f"{int(bad.sum())} of {bad.size} wrong"))
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--directions", default="fprop,dgrad,wgrad")
    p.add_argument("--scale", type=int, default=1,
                   help="multiply the largest channel counts and image sides")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    os.environ["HIPDNN_ASYNC_PERFDB"] = os.path.join(tempfile.mkdtemp(), "perfdb.sqlite3")
    import hipdnn_async as hd
    if not hd.runtime.load_onednn().ok:
        print("fuzz_onednn_candidates: oneDNN does not load here:",
              hd.runtime.load_onednn().reason, file=sys.stderr)
        return 2
    directions = tuple(args.directions.split(","))
    failed, checked = 0, 0
    with hd.Device("cpu", streams=1) as dev:
        for i in range(args.cases):
            case = random_case(random.Random(args.seed * 1_000_003 + i), directions,
                               args.scale)
            if args.verbose:
                print("case", i, json.dumps(case), flush=True)
            results = check_case(hd, dev, case, args.verbose)
            checked += len(results)
            bad = [(n, what) for n, ok, what in results if not ok]
            if bad:
                failed += 1
                print(json.dumps({"case": i, "conv": case, "failed": bad}), flush=True)
    print(f"fuzz_onednn_candidates: {args.cases} cases (seed {args.seed}), {checked} "
          f"candidate runs, {failed} cases with a wrong candidate")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
