"""Strided 1x1 weight gradients over fewer than 16 channels on NHWC memory: the default
plan and every candidate stay inside their workspace, and dw matches float64. oneDNN
3.2's AVX-512 1x1 weight-gradient kernel (``jit_1x1:avx512_core``, the float32 default
there) wrote 48-280 bytes past the end of its scratchpad (the plan's workspace) at C = 7,
8, 12 with stride 2 (not at C = 16 and up, nor unstrided); it and its bf16 sibling are
not candidates there (``Conv._left_out``).

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import assert_close, device, np_dtype, wgrad_tol  # noqa: F401
from ._cpu_engines import ONEDNN, require

GUARD = 1 << 14


def _nhwc(rng, dims, dtype):
    n, c, h, w = dims
    return rng.uniform(-1, 1, (n, h, w, c)).astype(np_dtype(dtype)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("c", [7, 8, 12])
def test_strided_1x1_wgrad_stays_in_its_workspace(device, dtype, c):
    require(ONEDNN)
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    xd, yd, wd = (3, c, 8, 10), (3, 5, 4, 5), (5, c, 1, 1)
    g = hd.Graph(name="strided_1x1_wgrad", io_data_type=dtype)
    dy = g.tensor(dims=yd, layout="NHWC", name="dy")
    x = g.tensor(dims=xd, layout="NHWC", name="x")
    g.conv_wgrad(dy, x, dw_dims=wd, stride=2).set_output(True).set_name("dw")
    plan = device.build_sync(g, engine=ONEDNN)
    rng = np.random.default_rng(0)
    arrays = {"dy": _nhwc(rng, yd, dtype), "x": _nhwc(rng, xd, dtype),
              "dw": _nhwc(rng, wd, dtype)}
    want = ref.conv_wgrad(arrays["dy"], arrays["x"], wd, (0, 0), (0, 0), (2, 2), (1, 1))
    limits = wgrad_tol(dtype, 3 * 4 * 5, 1.0, 1.0)
    match = plan._pplan.match
    bufs = {role: arrays[t.name] for role, t in match.tensors.items() if not t.is_virtual}

    def guarded_run(run, size, what):
        ws = np.full(size + GUARD, 0x5A, np.uint8)
        run(ws[:size])
        past = int((ws[size:] != 0x5A).sum())
        assert not past, f"{what}: {past} bytes written past its {size}-byte workspace"
        assert_close(arrays["dw"], want, *limits, what)

    guarded_run(lambda ws: plan._pplan.run(bufs, ws), plan._pplan.workspace_size,
                f"default {plan.algorithm}")
    conv = Conv(match)
    for cand in conv.candidates():
        _, pd, _, variant = conv.impls[cand.id]
        program, spec = conv.program(pd, variant=variant)
        try:
            guarded_run(lambda ws: program.run(tuple(bufs[r] for r in spec.roles),
                                               ws if program.workspace_size else None),
                        program.workspace_size, f"candidate {cand.name}")
        finally:
            program.close()
