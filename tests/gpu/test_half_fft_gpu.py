"""The FFT knobs on HALF / BFLOAT16 convolutions, on the GPU (both cuDNN engines):

- ``cudnn_graph.allow_fft`` / ``cudnn_legacy.allow_fft`` are offered for HALF and
  BFLOAT16 fprop, dgrad and wgrad (default 1, range [0, 1]), and the default plan stays
  within the float64 oracle's tolerance, as before the knob covered these data types;
- with the knob at 0 no FFT runs (``plan.algorithm`` and its reason, which lists the
  chosen config's numerical notes, name no FFT; the legacy engine's benchmark considers no
  FFT algorithm either) and the result matches the float64 oracle;
- and a NaN in one input element then stays in the outputs that read it (the float64
  oracle's NaN positions, exactly), which is what the knob is for: an FFT spreads a NaN
  over every output of its tile or image. HALF / BFLOAT16 may still take a Winograd
  config with the knob at 0 (its transform mixes one small input tile); where the plan
  is one (its algorithm or reason says Winograd), the NaN must still stay in its image
  (fprop, dgrad) or channel of dw (wgrad), every oracle NaN must be there, and every
  other output must match.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import Harness, assert_close, gpu_wgrad_tol, reduction_tol

import hipdnn_async as hd

from .test_algorithm_policy_gpu import FFT_KNOB, RES3_PAD, RES3_W, RES3_X, _cudnn_engines_or_skip

pytestmark = pytest.mark.gpu

# (dtype, direction): every direction in HALF, fprop in BFLOAT16
CASES = [("float16", "fprop"), ("float16", "dgrad"), ("float16", "wgrad"), ("bfloat16", "fprop")]
# the input element made NaN in the NaN case: image 0, channel 5, an interior pixel
NAN_AT = (0, 5, 10, 10)


def _case(dtype, direction, nan=False):
    """(Harness of one NHWC convolution of the res3 3x3 shape, its float64 expectation,
    (atol, rtol)); ``nan``: the first input has a NaN at NAN_AT."""
    rng = np.random.default_rng([7, ("fprop", "dgrad", "wgrad").index(direction)])
    a = rng.uniform(-1, 1, RES3_X)
    b = rng.uniform(-1, 1, RES3_W if direction != "wgrad" else RES3_X)
    if nan:     # fprop's x, dgrad's dy; wgrad's x (b): a NaN reaches one channel of dw
        (b if direction == "wgrad" else a)[NAN_AT] = np.nan
    h = Harness(dtype, "NHWC", name=f"half_fft_{direction}")
    if direction == "fprop":
        x, w = h.input("x", a), h.input("w", b)
        h.output(h.g.conv_fprop(x, w, padding=RES3_PAD), "out")
        n = RES3_W[1] * RES3_W[2] * RES3_W[3]
        return (h, lambda: ref.conv_fprop(h.ref["x"], h.ref["w"], RES3_PAD, RES3_PAD),
                reduction_tol("conv_fprop", dtype, n))
    if direction == "dgrad":
        dy, w = h.input("dy", a), h.input("w", b)
        h.output(h.g.conv_dgrad(dy, w, dx_dims=RES3_X, padding=RES3_PAD), "out")
        n = RES3_W[0] * RES3_W[2] * RES3_W[3]
        return (h, lambda: ref.conv_dgrad(h.ref["dy"], h.ref["w"], RES3_X, RES3_PAD, RES3_PAD),
                reduction_tol("conv_dgrad", dtype, n))
    dy, x = h.input("dy", a), h.input("x", b)
    h.output(h.g.conv_wgrad(dy, x, dw_dims=RES3_W, padding=RES3_PAD), "out")
    n = RES3_X[0] * RES3_X[2] * RES3_X[3]
    return (h, lambda: ref.conv_wgrad(h.ref["dy"], h.ref["x"], RES3_W, RES3_PAD, RES3_PAD),
            gpu_wgrad_tol(dtype, n, 1.0, 1.0))


@functools.lru_cache(maxsize=None)
def _expected(dtype, direction, nan):
    """The float64 oracle of a case, computed once per module run."""
    _h, want, _tol = _case(dtype, direction, nan)
    return want()


def _no_fft(plan, what):
    alg = plan.algorithm
    assert "FFT" not in str(alg) and "FFT" not in alg.reason, (what, alg, alg.reason)
    return alg


@pytest.mark.parametrize("engine", sorted(FFT_KNOB))
@pytest.mark.parametrize("dtype,direction", CASES)
def test_half_allow_fft_0_runs_no_fft_and_matches_float64(
        gpu_module_device, tmp_path, dtype, direction, engine):
    h, _want, (atol, rtol) = _case(dtype, direction)
    engines = _cudnn_engines_or_skip(gpu_module_device, h)
    assert engine in engines, f"{engine} is not offered for {dtype} {direction}: {sorted(engines)}"
    knob_id = FFT_KNOB[engine]
    knob = engines[engine].knob(knob_id)
    assert (knob.default, knob.min, knob.max) == (1, 0, 1), knob
    expected = _expected(dtype, direction, False)
    what = f"{engine} {dtype} NHWC {direction}"
    # a fresh perf db: every plan is chosen here (a restored plan's reason names no notes)
    with hd.Device(gpu_module_device.spec, perfdb=str(tmp_path / "perfdb.sqlite3")) as dev:
        got = h.run(dev, engine=engine)["out"]
        assert h.plan.knobs[knob_id] == 1 and not h.plan.perfdb_hit
        assert_close(got, expected, atol, rtol, f"{what} default ({h.plan.algorithm}: "
                     f"{h.plan.algorithm.reason})")
        got = h.run(dev, engine=engine, knobs={knob_id: 0})["out"]
        direct = h.plan
        assert direct.knobs[knob_id] == 0 and not direct.perfdb_hit
        alg = _no_fft(direct, f"{what} allow_fft=0")
        assert_close(got, expected, atol, rtol, f"{what} allow_fft=0 ({alg}: {alg.reason})")
        if engine == "CUDNN_LEGACY_ENGINE":
            # benchmarked: cuDNN's Find times only what the policy accepts (names are
            # cuDNN's algorithm names here)
            got = h.run(dev, engine=engine, knobs={knob_id: 0, "global.benchmarking": 1})["out"]
            tuned = h.plan
            assert tuned.benchmarked and not tuned.perfdb_hit, tuned
            _no_fft(tuned, f"{what} allow_fft=0 benchmarked")
            names = [name for name, _ms in tuned.algorithm.trials]
            assert names and not any(n.startswith("FFT") for n in names), names
            assert_close(got, expected, atol, rtol, f"{what} allow_fft=0 benchmarked "
                         f"({tuned.algorithm})")


@pytest.mark.parametrize("engine", sorted(FFT_KNOB))
@pytest.mark.parametrize("dtype,direction", CASES)
def test_half_allow_fft_0_keeps_a_nan_in_the_outputs_that_read_it(
        gpu_module_device, dtype, direction, engine):
    h, _want, (atol, rtol) = _case(dtype, direction, nan=True)
    engines = _cudnn_engines_or_skip(gpu_module_device, h)
    assert engine in engines, f"{engine} is not offered for {dtype} {direction}: {sorted(engines)}"
    expected = _expected(dtype, direction, True)
    # the oracle's NaNs are local (the check is not vacuous) and not everywhere
    nans = np.isnan(expected)
    assert 0 < nans.sum() < expected.size // 8, int(nans.sum())
    got = h.run(gpu_module_device, engine=engine, knobs={FFT_KNOB[engine]: 0})["out"]
    alg = _no_fft(h.plan, f"{engine} {dtype} {direction} allow_fft=0")
    what = f"{engine} {dtype} NHWC {direction} allow_fft=0, NaN at {NAN_AT} ({alg}: {alg.reason})"
    if "WINOGRAD" not in str(alg).upper() and "Winograd" not in alg.reason:
        assert_close(got, expected, atol, rtol, what)     # NaN exactly where the oracle has it
        return
    # a Winograd transform: the NaN may reach the neighbours of its tile, nothing further
    got_nan = np.isnan(np.asarray(got, np.float64))
    assert got_nan[nans].all(), f"{what}: a NaN of the oracle is missing"
    allowed = np.zeros_like(nans)
    if direction == "wgrad":
        allowed[:, NAN_AT[1]] = True          # dw[:, c] reads only channel c of x
    else:
        allowed[NAN_AT[0]] = True             # an image's outputs read only that image
    where = "its channel of dw" if direction == "wgrad" else "its image"
    assert not (got_nan & ~allowed).any(), f"{what}: NaN outside {where}"
    keep = ~got_nan
    assert_close(np.asarray(got)[keep], expected[keep], atol, rtol, what)
