"""Plans built one after another for one problem, each on another oneDNN candidate, are
each exact: oneDNN's primitive cache is off.

With it on (oneDNN 3.2's default), a weight gradient from one channel (C = 1, K = 13,
4x3 kernel at stride 3 over 5x4: one output pixel) built on ``jit:avx512_core+nhwc``, then
``x64:gemm:jit+nhwc``, then ``x64:gemm:jit`` got for the last a primitive made for the
second: another weights layout and a 3,008-byte scratchpad in a 2,800-byte workspace
(dw 155 of 156 wrong, then ``free(): invalid pointer``). The walk also restarted from
cached steps and listed implementations twice (``#2``). A fuzz over every candidate
(``bench/fuzz_onednn_candidates.py``, one process for many problems) found it. Each
candidate is built by pinning it (the knob ``onednn.candidate``).

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import numpy as np
import pytest

from . import _reference as ref
from ._cases import assert_close, device, wgrad_tol  # noqa: F401
from ._cpu_engines import ONEDNN, require

GUARD = 4096


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_candidates_built_in_turn_are_each_exact(device, dtype):
    require(ONEDNN)
    import hipdnn_async as hd
    from oracle._cases import np_dtype
    xd, wd, stride = (1, 1, 5, 4), (13, 1, 4, 3), (3, 3)
    yd = tuple(ref.conv_out_dims(xd, wd, (0, 0), (0, 0), stride, (1, 1)))
    g = hd.Graph(name="primitive_cache", io_data_type=dtype)
    dy = g.tensor(dims=yd, name="dy")
    x = g.tensor(dims=xd, name="x")
    g.conv_wgrad(dy, x, dw_dims=wd, stride=stride).set_output(True).set_name("dw")
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, xd).astype(np_dtype(dtype))
    dys = rng.uniform(-1, 1, yd).astype(np_dtype(dtype))
    want = ref.conv_wgrad(dys, xs, wd, (0, 0), (0, 0), stride, (1, 1))
    limits = wgrad_tol(dtype, 1, 1.0, 1.0)
    names = [n for n, _ in device.build_sync(g, engine=ONEDNN).algorithm.trials]
    assert not [n for n in names if "#" in n], names            # no repeated steps
    # the order that failed, then every other candidate after them, then the first again
    first = [n for n in ("jit:avx512_core+nhwc", "x64:gemm:jit+nhwc", "x64:gemm:jit")
             if n in names]
    for name in first + [n for n in names if n not in first] + first:
        device._plan_cache._plans.clear()        # a new plan: new primitives each time
        plan = device.build_sync(g, engine=ONEDNN,
                                 knobs={"onednn.candidate": names.index(name)})
        assert str(plan.algorithm) == name
        buf = np.full(wd[0] * 12 + 2 * GUARD, 7, np_dtype(dtype))
        dw = buf[GUARD:GUARD + wd[0] * 12].reshape(wd)
        dw[...] = np.nan
        ws = np.full(plan.workspace_size + 64 + GUARD, 0xFF, np.uint8)
        plan.execute_sync({"dy": dys, "x": xs, "dw": dw},
                          workspace=ws[:plan.workspace_size + 64])
        assert_close(dw, want, *limits, name)
        assert (buf[:GUARD] == 7).all() and (buf[GUARD + dw.size:] == 7).all(), name
        assert (ws[plan.workspace_size + 64:] == 0xFF).all(), name
