"""No ONEDNN_ENGINE convolution implementation writes past its output: every candidate
(benchmarking runs each) of bfloat16 1x1 fprop on NHWC memory, run with guard elements
after y. oneDNN 3.2's AMX jit 1x1 forward kernel (``jit_1x1:avx512_core_amx``) wrote a whole
tile past the end of y at 36 pixels an image (9x4, 6x6: 12 rows x K elements, the
process then aborting with heap corruption in benchmarking); it is not a candidate
(``Conv._left_out``). On a CPU without AMX oneDNN does not offer it and these cases check the
other implementations.

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from ._cases import device  # noqa: F401
from ._cpu_engines import ONEDNN, require

GUARD = 4096


@pytest.mark.parametrize("xd,k", [((2, 32, 9, 4), 32), ((1, 64, 6, 6), 64),
                                  ((3, 32, 9, 4), 64)])
def test_no_candidate_writes_past_y(device, xd, k):
    require(ONEDNN)
    import ml_dtypes
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    n, c, h, w = xd
    g = hd.Graph(name="overrun", io_data_type="bfloat16")
    x = g.tensor(dims=xd, layout="NHWC", name="x")
    wt = g.tensor(dims=(k, c, 1, 1), layout="NHWC", name="w")
    g.conv_fprop(x, wt, padding=0, stride=1).set_output(True).set_name("y")
    plan = device.build_sync(g, engine=ONEDNN)
    rng = np.random.default_rng(0)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    xa = rng.uniform(-1, 1, (n, h, w, c)).astype(bf16).transpose(0, 3, 1, 2)
    wa = rng.uniform(-1, 1, (k, 1, 1, c)).astype(bf16).transpose(0, 3, 1, 2)
    size = n * k * h * w
    base = np.full(size + GUARD, 7.0, bf16)
    ya = base[:size].reshape(n, h, w, k).transpose(0, 3, 1, 2)
    match = plan._pplan.match
    pack = {role: {"x": xa, "w": wa, "y": ya}[t.name] for role, t in match.tensors.items()
            if not t.is_virtual}
    conv = Conv(match)
    overruns = []
    for cand in conv.candidates():
        _, pd, _, variant = conv.impls[cand.id]
        program, spec = conv.program(pd, variant=variant)
        try:
            ws = (np.empty(program.workspace_size, np.uint8) if program.workspace_size
                  else None)
            program.run(tuple(pack[r] for r in spec.roles), ws)
        finally:
            program.close()
        written = int((np.asarray(base[size:], np.float32) != 7.0).sum())
        if written:
            overruns.append((cand.name, written))
            base[size:] = 7.0
    assert not overruns, f"(candidate, elements written past y): {overruns}"
