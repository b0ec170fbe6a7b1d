"""Convolutions from one channel to one (K = C = 1) with a 3x3 kernel on NCHW memory,
which oneDNN 3.2's GEMM convolution got wrong (``Conv._left_out``: not a candidate there).
A weight gradient, built with benchmarking (which runs every candidate) and run: the process
survives and dw matches the float64 reference. oneDNN 3.2's GEMM convolution
(``x64:gemm:jit``) wrote past the end of dw (135 elements past a 9-element dw in float32)
and of its scratchpad there, and the process aborted with heap corruption, in float32 and
bfloat16; it is not a candidate there (``Conv._left_out``). Run in a child process: the
failure is the process's death.

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ._cases import device  # noqa: F401
from ._cpu_engines import ONEDNN, require

CHILD = r"""
import sys
import numpy as np
import hipdnn_async as hd
from tests.oracle import _reference as ref
from tests.oracle._cases import assert_close, np_dtype, wgrad_tol
dt = sys.argv[1]
rng = np.random.default_rng(0)
dyv = rng.uniform(-1, 1, (2, 1, 11, 9)).astype(np_dtype(dt))
xv = rng.uniform(-1, 1, (2, 1, 11, 9)).astype(np_dtype(dt))
g = hd.Graph(name="wgrad_one", io_data_type=dt)
dy = g.tensor(dims=dyv.shape, layout="NCHW", name="dy")
x = g.tensor(dims=xv.shape, layout="NCHW", name="x")
g.conv_wgrad(dy, x, dw_dims=(1, 1, 3, 3), padding=1).set_output(True).set_name("dw")
want = ref.conv_wgrad(dyv, xv, (1, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
with hd.Device("cpu") as dev:
    for _ in range(3):
        plan = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs={"global.benchmarking": 1})
        dw = np.zeros((1, 1, 3, 3), np_dtype(dt))
        plan.execute_sync({"dy": dyv, "x": xv, "dw": dw})
        assert_close(dw, want, *wgrad_tol(dt, 2 * 11 * 9, 1.0, 1.0), str(plan.algorithm))
    assert not any(n.startswith("x64:gemm") for n, _ in plan.algorithm.trials), plan.algorithm.trials
print("ok")
"""


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_channel_wgrad_benchmarking_survives(tmp_path, dtype):
    require(ONEDNN)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=str(tmp_path / "perfdb.sqlite3"),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", CHILD, dtype], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"rc {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


@pytest.mark.parametrize("direction", ["fprop", "dgrad"])
def test_one_channel_fp32_every_candidate_matches_float64(device, direction):
    """float32 fprop and dgrad from one channel to one on NCHW: the GEMM convolution gave
    wrong values there (71 of 72 outputs at 1x1x7x7, 3x3, padding 2, 1 / 2, 2)."""
    require(ONEDNN)
    from ._cases import assert_close
    from .test_onednn_blocked import candidate_outputs, run_blocked
    case = ("NCHW", (2, 1, 7, 7), (1, 1, 3, 3), (2, 1), (2, 2), (1, 1), (1, 1))
    hs = []
    plan, got, want, limits = run_blocked(device, direction, "float32", case, seed=2,
                                          harness=hs)
    assert_close(got, want, *limits, f"{direction} default ({plan.algorithm})")
    outs = candidate_outputs(plan, hs[0], direction, lambda name: True)
    assert outs
    for name, out in outs.items():
        assert_close(out, want, *limits, f"{direction}, candidate {name}")
