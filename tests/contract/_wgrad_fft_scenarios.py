"""Scenarios of bench/diag_wgrad_fft.py's configs on the fake cuDNN (run in the fake-GPU
worker: test_diag_wgrad_fft_contract.py): the diagnostic's own graph builder, config
table and accepted-list wrapper, builds through the public API, each in a new Device with
its own perf db."""
from __future__ import annotations

import os
import sys
import tempfile

from ._fakes import between
from ._scenarios import _error_facts, control, plan_facts

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def wgrad_fft_case(stride: int = 1) -> dict:
    """A FLOAT NCHW 3x3 weight gradient (x 2x4x8x8, w 5x4x3x3, pad 1, ``stride``) built
    as bench/diag_wgrad_fft.py builds it: each config of its ``CONFIGS`` (engine,
    benchmarking, ``cudnn_legacy.allow_fft``, forced algorithm) under its
    ``AcceptedList``. Per build: plan facts or the error, what the wrapper saw of cuDNN's
    list, the build's slice of the fake's log."""
    import hipdnn_async as hd
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import bench_gpu
    import diag_wgrad_fft as dw

    g = bench_gpu.conv_graph(hd, "wgrad", 2, (4, 8, 8), (5, 4, 3, 3), 1, stride, "float32",
                             "NCHW")[0]
    ctl = control()
    ctl.clear()
    out, tmp = {}, tempfile.mkdtemp(prefix="wgrad_fft_contract_")
    for i, (label, _slot, engine, bench, allow_fft, force) in enumerate(dw.CONFIGS):
        knobs = {"global.benchmarking": bench}
        if not allow_fft:
            knobs[dw.LEGACY_ALLOW_FFT] = 0
        wrap = dw.AcceptedList(force)
        with hd.Device("cuda:0", perfdb=os.path.join(tmp, f"{i}.sqlite3")) as dev:
            ctl.mark(label)
            try:
                with wrap:
                    plan = dev.build_sync(g, engine=engine, knobs=knobs)
                facts = plan_facts(plan)
                rec = {"engine": facts["engine"], "algorithm": str(facts["algorithm"]),
                       "knobs": facts["knobs"]}
                try:
                    dw.check_plan(rec, allow_fft, force)
                    check = None
                except RuntimeError as exc:
                    check = str(exc)
                out[label] = {"plan": facts, "error": None, "check": check}
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out[label] = dict(_error_facts(exc), plan=None)
            ctl.mark(label + " end")
        out[label]["seen"] = wrap.seen
    log = ctl.log()
    for label in out:
        out[label]["log"] = between(log, label, label + " end")
    from hipdnn_async.providers.cudnn import _conv
    return {"builds": out, "violations": ctl.violations(),
            "restored": _conv.ConvSetup.accepted.__module__ == _conv.__name__
            and _conv.ConvSetup.accepted.__qualname__ == "ConvSetup.accepted"}
