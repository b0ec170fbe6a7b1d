"""Scenarios of bench/diag_wgrad_fft.py's FFT policy patch on the fake cuDNN (run in the
fake-GPU worker: test_diag_wgrad_fft_contract.py): the diagnostic's own graph builder and
patch, builds through the public API, each in a new Device with its own perf db."""
from __future__ import annotations

import os
import sys
import tempfile

from ._fakes import between
from ._scenarios import _error_facts, control, plan_facts

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def wgrad_fft_case(stride: int = 1) -> dict:
    """A FLOAT NCHW 3x3 weight gradient (x 2x4x8x8, w 5x4x3x3, pad 1, ``stride``) built
    as bench/diag_wgrad_fft.py builds it: by default and benchmarked (no patch), with
    the patch benchmarked, forced to FFT and to FFT_TILING, then again without the patch
    asking for the knob. Per build: plan facts or the error, what the patch saw of
    cuDNN's list, the build's slice of the fake's log."""
    import hipdnn_async as hd
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import bench_gpu
    import diag_wgrad_fft as dw

    g = bench_gpu.conv_graph(hd, "wgrad", 2, (4, 8, 8), (5, 4, 3, 3), 1, stride, "float32",
                             "NCHW")[0]
    builds = (("default bench", None, None, {"global.benchmarking": 1}),
              ("fft bench", "patch", None, {"global.benchmarking": 1}),
              ("force FFT", "patch", "FFT", {}),
              ("force FFT_TILING", "patch", "FFT_TILING", {}),
              ("knob without the patch", None, None, {dw.LEGACY_ALLOW_FFT: 1}))
    ctl = control()
    ctl.clear()
    out, tmp = {}, tempfile.mkdtemp(prefix="wgrad_fft_contract_")
    for i, (label, patched, force, knobs) in enumerate(builds):
        patch = dw.WgradFftPatch(force) if patched else None
        with hd.Device("cuda:0", perfdb=os.path.join(tmp, f"{i}.sqlite3")) as dev:
            ctl.mark(label)
            try:
                if patch is None:
                    plan = dev.build_sync(g, engine=None if not knobs.get(dw.LEGACY_ALLOW_FFT)
                                          else dw.LEGACY, knobs=knobs)
                else:
                    with patch:
                        plan = dev.build_sync(g, engine=dw.LEGACY, knobs=knobs)
                out[label] = {"plan": plan_facts(plan), "error": None}
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out[label] = dict(_error_facts(exc), plan=None)
            ctl.mark(label + " end")
        out[label]["seen"] = patch.seen if patch is not None else None
    log = ctl.log()
    for label in out:
        out[label]["log"] = between(log, label, label + " end")
    from hipdnn_async.providers.cudnn import _conv, _fft
    return {"builds": out, "violations": ctl.violations(),
            "restored": not _fft.knob_offered(conv=True, float_io=True, wgrad=True)
            and _conv.ConvSetup.accepted.__module__ == _conv.__name__}
