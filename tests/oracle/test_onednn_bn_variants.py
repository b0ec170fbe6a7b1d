"""Every batchnorm implementation ``ONEDNN_ENGINE`` offers for a problem, not only the one
its heuristic takes: the user's layout, channel-blocked (nC[d]hw16c) and channels-last
copies around oneDNN's batchnorm, batchnorm inference as one binary primitive, and the
engine's own C rows (``bn_rows``, offered exactly on the packed layouts NCHW, NCDHW, NHWC
and NDHWC; all but inference: the rows alone, on dense copies of the non-packed layouts). Each
runs every batchnorm pattern x {FLOAT, HALF, BFLOAT16} x the oracle's layouts (NCHW,
NHWC, NCDHW, NDHWC and non-packed strides), with 3 channels (one partial block of 16) and
20 (a full and a partial block), against the float64 references of ``_reference.py`` with
the tolerances of ``_cases.py``.

Skipped where oneDNN does not load (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from . import test_patterns as tp
from ._cases import DTYPES, LAYOUTS
from ._cpu_engines import ONEDNN, require

BN_PATTERNS = ("BN_TRAINING", "BN_TRAINING_RELU", "BN_INFERENCE_VARIANCE", "BN_BACKWARD",
               "BN_INFERENCE_DRELU_BACKWARD")
SIZES = {"C3": tp.BN, "C20": {4: (2, 20, 3, 5), 5: (2, 20, 2, 3, 3)}}


def _run_candidates(dev, pattern, dtype, layout):
    """The case built on ONEDNN_ENGINE, then re-run on each candidate of its problem:
    (harness, checks, [(candidate name, outputs)], the pattern's params)."""
    h, checks, _ = tp.run_case(dev, pattern, dtype, layout, engine=ONEDNN)
    return h, checks, candidate_outputs(h), h.plan._pplan.match.params


def candidate_outputs(h) -> list:
    """[(candidate name, outputs)] of every candidate of the problem of ``h``'s plan (built
    on ONEDNN_ENGINE), each run on ``h``'s pack, its outputs NaN-filled first."""
    from hipdnn_async.providers.cpu.onednn._bnorm import Bn
    from hipdnn_async.providers.cpu.onednn._plan import OnednnPlan

    match = h.plan._pplan.match
    bn = Bn(match)
    buffers = {role: h.pack[t.name] for role, t in match.tensors.items() if not t.is_virtual}
    runs = []
    for cand in bn.candidates():
        spec, _, hooks = bn.build(cand)
        plan = OnednnPlan(match, spec.program(), spec, cand.name, hooks=hooks)
        for name in h.outputs:
            h.pack[name][...] = np.nan
        ws = np.empty(plan.workspace_size, np.uint8) if plan.workspace_size else None
        plan.launcher(buffers, ws)()
        runs.append((cand.name, {name: np.array(h.pack[name]) for name in h.outputs}))
        plan.program.close()
    return runs


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pattern", BN_PATTERNS)
def test_every_bn_candidate_matches_float64(cpu_device, monkeypatch, pattern, dtype, layout, size):
    require(ONEDNN)
    monkeypatch.setattr(tp, "BN", SIZES[size])
    h, checks, runs, params = _run_candidates(cpu_device, pattern, dtype, layout)
    names = [name for name, _ in runs]
    # the engine's C rows (bn_rows) read channels-first memory whose spatial elements are
    # one packed run (NCHW, NCDHW) and channels-last memory whose pixels are at one stride
    # (NHWC, NDHWC), not the padded (non-packed) layouts: they run on dense copies there;
    # training runs the rows alone (every oneDNN 3.2 batchnorm sums in float32)
    from hipdnn_async.providers.cpu import _kernels
    base, _, kind = layout.partition("_")
    rows_name = "bn_rows:" + _kernels.bn_rows_isa(dtype) + ("+dense" if kind == "nonpacked"
                                                            else "")
    if pattern != "BN_INFERENCE_VARIANCE":
        assert names == [rows_name], names
    else:
        assert [n for n in names if n.startswith("bn_rows:")] == [rows_name], names
    if not layout.startswith(("NHWC", "NDHWC")) and pattern == "BN_INFERENCE_VARIANCE":
        # plain layouts offer channels-last copies, blocked ones and binary inference
        assert any("+nhwc" in n for n in names), names
        assert any("16c" in n for n in names), names
        assert any(n.endswith("+binary") for n in names), names
    for name, got in runs:
        tp.check_case(h, checks, got, f"{pattern} {dtype} {layout} {size} candidate {name}")
