"""Special values meeting the padding (docs/guide/cpu.md): the float64 reference
multiplies them by the padding's zeros (inf x 0 and NaN x 0 are NaN); oneDNN's ``jit``
kernels skip the padded taps, so they give finite values there, while its GEMM kernels
and ``CPU_ENGINE`` give the NaN. Weight gradients with an inf in dy at a padded window,
and fprop with a NaN weight tap that reads only padding for the edge outputs. Every
candidate is pinned in turn (knob ``onednn.candidate``); values that never meet the
padding agree with the reference on all of them."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.runtime import load_onednn

pytestmark = pytest.mark.skipif(not load_onednn().ok,
                                reason="ONEDNN_ENGINE needs oneDNN, which does not load here")

N, C, K, H, W = 1, 96, 2, 10, 10


def _graph():
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    dy = g.tensor(dims=(N, K, H, W), name="dy")
    x = g.tensor(dims=(N, C, H, W), name="x")
    g.conv_wgrad(dy, x, dw_dims=(K, C, 3, 3), padding=1).set_output(True).set_name("dw")
    return g


def _reference(dy, x):
    """float64 weight gradient, padding 1, from the definition (inf x 0 is NaN)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    dw = np.zeros((K, C, 3, 3))
    with np.errstate(invalid="ignore"):
        for r in range(3):
            for s in range(3):
                dw[:, :, r, s] = np.einsum("nkhw,nchw->kc", dy.astype(np.float64),
                                           xp[:, :, r:r + H, s:s + W])
    return dw


def test_inf_in_dy_at_the_padding_per_candidate():
    rng = np.random.default_rng(5)
    dy = rng.uniform(-1, 1, (N, K, H, W)).astype(np.float32)
    x = rng.uniform(-1, 1, (N, C, H, W)).astype(np.float32)
    dy[0, 0, 0, 0] = np.inf               # its window's top row and left column are padding
    want = _reference(dy, x)
    padded = np.isnan(want[0])            # (C, 3, 3): the taps that met the padding
    assert padded[:, 0, :].all() and padded[:, :, 0].all() and not padded[:, 1:, 1:].any()
    g = _graph()
    with hd.Device("cpu") as dev:
        names = [n for n, _ in dev.build_sync(g, engine="ONEDNN_ENGINE").algorithm.trials]
        kinds = set()
        for i, name in enumerate(names):
            plan = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs={"onednn.candidate": i})
            assert str(plan.algorithm) == name
            dw = np.full((K, C, 3, 3), np.nan, np.float32)
            plan.execute_sync({"dy": dy, "x": x, "dw": dw})
            got = dw.astype(np.float64)
            # K = 1's taps have no inf: every candidate matches the reference there; and
            # K = 0's taps that never met the padding hold +-inf exactly as the reference
            np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-4, err_msg=name)
            np.testing.assert_array_equal(got[0][~padded], want[0][~padded], err_msg=name)
            if name.startswith("x64:gemm"):
                kinds.add("gemm")
                assert np.isnan(got[0][padded]).all(), name
            elif name.startswith("jit"):
                kinds.add("jit")
                assert np.isfinite(got[0][padded]).all(), name
        cpu = dev.build_sync(g, engine="CPU_ENGINE")
        dw = np.full((K, C, 3, 3), np.nan, np.float32)
        cpu.execute_sync({"dy": dy, "x": x, "dw": dw})
        assert np.isnan(dw[0][padded]).all()
    assert kinds == {"gemm", "jit"}, names


def test_nan_weight_tap_over_the_padding_per_candidate():
    """fprop: a NaN weight tap meets padding only for the outputs at the image's edge; the
    reference gives NaN at every output (NaN x 0 there), the ``jit`` kernels only where
    it meets x, the GEMM kernels and CPU_ENGINE everywhere."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    w[1, 2, 0, 0] = np.nan                 # the top-left tap: padding for row 0 and col 0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 4, 8, 8))
    with np.errstate(invalid="ignore"):
        for r in range(3):
            for s in range(3):
                want += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 8, s:s + 8],
                                  w[:, :, r, s].astype(np.float64))
    assert np.isnan(want[0, 1]).all() and not np.isnan(want[0, [0, 2, 3]]).any()
    edge = np.zeros((8, 8), bool)
    edge[0, :] = edge[:, 0] = True         # outputs whose NaN tap reads padding
    g = hd.Graph(io_data_type=hd.DataType.FLOAT)
    xt = g.tensor(dims=x.shape, name="x")
    wt = g.tensor(dims=w.shape, name="w")
    g.conv_fprop(xt, wt, padding=1).set_output(True).set_name("y")
    with hd.Device("cpu") as dev:
        names = [n for n, _ in dev.build_sync(g, engine="ONEDNN_ENGINE").algorithm.trials]
        kinds = set()
        for i, name in enumerate(names):
            plan = dev.build_sync(g, engine="ONEDNN_ENGINE", knobs={"onednn.candidate": i})
            y = np.full(want.shape, np.inf, np.float32)
            plan.execute_sync({"x": x, "w": w, "y": y})
            got = y.astype(np.float64)
            np.testing.assert_allclose(got[0, [0, 2, 3]], want[0, [0, 2, 3]], rtol=1e-4,
                                       atol=1e-4, err_msg=name)
            assert np.isnan(got[0, 1][~edge]).all(), name
            if name.startswith("x64:gemm"):
                kinds.add("gemm")
                assert np.isnan(got[0, 1][edge]).all(), name
            elif name.startswith("jit"):
                kinds.add("jit")
                assert np.isfinite(got[0, 1][edge]).all(), name
        y = np.full(want.shape, np.inf, np.float32)
        dev.build_sync(g, engine="CPU_ENGINE").execute_sync({"x": x, "w": w, "y": y})
        assert np.isnan(y[0, 1]).all()
    assert kinds == {"gemm", "jit"}, names
