"""The per-channel host loops around oneDNN's batchnorm (``providers.cpu._kernels``:
``bn_training_statistics``, ``bn_inference_factor``) against the
float64 NumPy formulas they replace, on strided float32 vectors (the (1, C, 1, 1) tensors
of an NHWC graph reshaped), with special values and running statistics updated in place."""
from __future__ import annotations

import numpy as np
import pytest

from hipdnn_async.providers.cpu import _kernels

C = 37


def strided(values, step=3):
    """``values`` as float32 in every ``step``-th element of a larger buffer."""
    buf = np.full(len(values) * step, np.nan, np.float32)
    view = buf[::step]
    view[...] = values
    return view


def f32(a):
    return np.asarray(a, np.float64).astype(np.float32)


def test_training_statistics_match_float64():
    rng = np.random.default_rng(0)
    var = f32(rng.uniform(0, 4, C))
    var[0] = 0.0
    mean, pm, pv = (strided(rng.uniform(-2, 2, C)) for _ in range(3))
    eps, mom, m = 1e-5, 0.1, 50
    inv, nm, nv = strided(np.zeros(C)), strided(np.zeros(C)), strided(np.zeros(C))
    _kernels.bn_training_statistics(var, eps, inv, mean, mom, m / (m - 1.0), pm, nm, pv, nv)
    v, mu = var.astype(np.float64), mean.astype(np.float64)
    np.testing.assert_array_equal(inv, f32(1.0 / np.sqrt(v + eps)))
    np.testing.assert_array_equal(nm, f32((1 - mom) * pm.astype(np.float64) + mom * mu))
    np.testing.assert_array_equal(
        nv, f32((1 - mom) * pv.astype(np.float64) + mom * v * m / (m - 1)))


def test_training_statistics_in_place_and_optional_outputs():
    rng = np.random.default_rng(1)
    var, mean = f32(rng.uniform(0, 1, C)), f32(rng.uniform(-1, 1, C))
    running = f32(rng.uniform(-1, 1, C))
    want = f32(0.75 * running.astype(np.float64) + 0.25 * mean.astype(np.float64))
    _kernels.bn_training_statistics(var, 1e-3, None, mean, 0.25, 2.0, running, running,
                                    None, None)
    np.testing.assert_array_equal(running, want)


def test_training_statistics_refuse_other_lengths():
    with pytest.raises(ValueError, match="channels"):
        _kernels.bn_training_statistics(np.ones(C, np.float32), 1e-5,
                                        np.ones(C - 1, np.float32), None, 0.0, 1.0, None,
                                        None, None, None)


def test_inference_factor_matches_float64():
    rng = np.random.default_rng(2)
    scale, var = strided(rng.uniform(-2, 2, C)), strided(rng.uniform(0, 3, C))
    out = np.empty(C, np.float32)
    _kernels.bn_inference_factor(scale, var, 1e-4, out)
    np.testing.assert_array_equal(
        out, f32(scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-4)))
