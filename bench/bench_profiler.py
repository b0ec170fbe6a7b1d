"""What the profiler costs on the submit path: hooks with no profile open vs no hooks, and
the cost per execution with a profile open.

One run prints, in µs of host time per call (median over rounds of ``--batch``
back-to-back calls on one CPU stream; the rounds of every case interleaved, so a slow
phase of the shared machine falls on all of them), for a tiny convolution (1x8x8x8, 1x1
kernel, FLOAT, whose kernel takes about a microsecond):

- ``plan.submit`` as shipped (its hook reads one module flag: no profile is open);
- ``plan.submit`` without the hook: the same body with the profiler line taken out
  (``_submit_without_hook`` below: the same binding, inline run or submission, no
  recorder), the anchor;
- the anchor again, as a separate case: its ratio to the first is the run's noise floor;
- ``plan.submit`` with a profile open (the record made per execution and handed to the
  queues with the work: the same path, inline where the stream is idle);
- the profile's exit per execution (waiting for the work, reading the timestamps);
- the same three for ``plan.execute_sync`` (submit, run on the worker, wait).

Ratios are against the no-hook anchor of the same run. CPU figures on a shared 2-core
machine are noisy: compare ratios, not absolute µs.

    python bench/bench_profiler.py [--device cpu] [--rounds 30] [--batch 200] [--json FILE]

On a GPU (``--device cuda:0``) the "profile open" rows include the two timing events
recorded around each launch, and the exit the event reads.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))       # this checkout's hipdnn_async

import numpy as np  # noqa: E402

import hipdnn_async as hd  # noqa: E402
from hipdnn_async import _capture  # noqa: E402
from hipdnn_async.queues._core import run_host  # noqa: E402
from hipdnn_async.queues._pool import INLINE_MAX_S  # noqa: E402

from _bench_common import median, write_json  # noqa: E402


def _submit_without_hook(plan, variant_pack):
    """``ExecutionPlan.submit`` without its profiler line (the anchor): the same binding,
    inline run or submission, with no recorder."""
    if _capture.OPEN:
        step = _capture.recording_step(plan)
        if step is not None:
            return step._record(plan, variant_pack, None, None)
    got = run_host(plan._launch, variant_pack, None, None, INLINE_MAX_S, None)
    if type(got) is not tuple:
        return got
    return plan._pool._submit_now(*got, plan._label, plan._timer)


def _execute_sync_without_hook(plan, variant_pack):
    """``ExecutionPlan.execute_sync`` without its profiler line (the anchor)."""
    item = run_host(plan._launch, variant_pack, None, None, -1.0, None)
    if type(item) is tuple:
        item = plan._pool._run_sync(*item, plan._label, plan._timer)
    if item._error is not None:
        raise item._error


def _tiny(dev):
    g = hd.Graph(name="tiny")
    x = g.tensor(name="x", dims=(1, 8, 8, 8), data_type=hd.DataType.FLOAT)
    w = g.tensor(name="w", dims=(8, 8, 1, 1), data_type=hd.DataType.FLOAT)
    y = g.conv_fprop(x, w).set_output(True).set_name("y")
    plan = dev.build_sync(g)
    rng = np.random.default_rng(0)
    host = {x: rng.standard_normal(x.dims).astype(np.float32),
            w: rng.standard_normal(w.dims).astype(np.float32),
            y: np.zeros(y.dims, np.float32)}
    if dev.is_host:
        return plan, host
    vp = {}
    for t, a in host.items():           # a GPU: device arrays, copied once
        vp[t] = dev.empty(a.shape, np.float32)
        vp[t].copy_from(a)
    return plan, vp


def _round(call, batch: int, profile_of=None) -> tuple:
    """(µs per call, µs per call of the profile's exit) of one round of ``batch`` calls;
    ``profile_of``: open that device's profile around the calls (its entry untimed)."""
    prof = profile_of.profile().start() if profile_of is not None else None
    clock = time.perf_counter_ns
    t0 = clock()
    last = None
    for _ in range(batch):
        last = call()
    t1 = clock()
    if last is not None:
        last.result()
    t2 = clock()
    if prof is not None:
        prof.stop()
        assert len(prof.executions) == batch, len(prof.executions)
    t3 = clock()
    return (t1 - t0) / batch / 1e3, (t3 - t2) / batch / 1e3


def run(rounds: int, batch: int, spec: str = "cpu") -> dict:
    with hd.Device(spec, streams=1, max_inflight=1 << 20) as dev:
        plan, vp = _tiny(dev)
        cases = {
            "submit, no hook (anchor)": (lambda: _submit_without_hook(plan, vp), None),
            "submit, hook, no profile": (lambda: plan.submit(vp), None),
            "submit, no hook (anchor again)": (lambda: _submit_without_hook(plan, vp), None),
            "submit, profile open": (lambda: plan.submit(vp), dev),
            "execute_sync, no hook (anchor)": (lambda: _execute_sync_without_hook(plan, vp),
                                               None),
            "execute_sync, hook, no profile": (lambda: plan.execute_sync(vp), None),
            "execute_sync, profile open": (lambda: plan.execute_sync(vp), dev),
        }
        for call, _ in cases.values():       # warm: bindings, the worker, the caches
            for _ in range(50):
                h = call()
            if h is not None:
                h.result()
        samples = {k: [] for k in cases}
        for _ in range(rounds):
            for k, (call, prof_dev) in cases.items():
                samples[k].append(_round(call, batch, prof_dev))
    out = {}
    for k, rows in samples.items():
        out[k] = {"us": median(r[0] for r in rows), "exit_us": median(r[1] for r in rows)}
    for what in ("submit", "execute_sync"):
        anchor = out[f"{what}, no hook (anchor)"]["us"]
        for k in out:
            if k.startswith(what):
                out[k]["ratio"] = out[k]["us"] / anchor
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--batch", type=int, default=200)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda:N, hip:N")
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    out = run(a.rounds, a.batch, a.device)
    print(f"profiler cost, tiny conv on {a.device} (1 stream), median of {a.rounds} rounds of "
          f"{a.batch} calls, µs host time per call")
    print(f"{'case':<34} {'µs/call':>9} {'ratio':>7} {'exit µs/exec':>13}")
    for k, v in out.items():
        exit_us = f"{v['exit_us']:.2f}" if "profile open" in k else "-"
        print(f"{k:<34} {v['us']:>9.2f} {v['ratio']:>6.3f}x {exit_us:>13}")
    write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
