"""The legacy cuDNN engine's numerical policy (providers/cudnn/_conv.ConvSetup.accurate),
without a GPU: per direction and data type, which of cuDNN's algorithms it keeps. The
algorithm names are ``_conv.ALGO_NAMES``, which tests/contract/test_abi.py checks against
cudnn_cnn.h."""
import pytest

from hipdnn_async.providers._tuning import Candidate
from hipdnn_async.providers.cudnn._conv import ALGO_NAMES, ConvSetup

FPROP, DGRAD, WGRAD = 0, 1, 2
FFT = {"FFT", "FFT_TILING"}
WINOGRAD = {"WINOGRAD", "WINOGRAD_NONFUSED"}


def _setup(direction, float_io=True):
    return ConvSetup(direction, ("a", "b", "c"), (None, None, None), None, float_io)


def _kept(setup, **policy):
    return {name for algo, name in enumerate(ALGO_NAMES[setup.direction])
            if setup.accurate(algo, True, **policy)}


@pytest.mark.parametrize("direction", [FPROP, DGRAD, WGRAD])
def test_float_convolutions_take_fft_unless_the_knob_says_not(direction):
    # weight gradients too since bench/diag_wgrad_fft.py measured FFT within the wgrad
    # bound on the H200 (they declined FFT whatever the knob before)
    s = _setup(direction)
    names = set(ALGO_NAMES[direction])
    assert FFT <= names
    assert _kept(s, deterministic=False, allow_fft=True) == names - WINOGRAD
    assert _kept(s, deterministic=False, allow_fft=False) == names - WINOGRAD - FFT
    # deterministic=True drops no FFT algorithm (cuDNN reports them deterministic)
    assert _kept(s, deterministic=True, allow_fft=True) == names - WINOGRAD


def test_float_wgrad_fallback_takes_no_fft_with_the_knob_at_0():
    # cuDNN lists only what the policy declines for a FLOAT weight gradient (Winograd, FFT
    # with the knob at 0): the fallback takes the whole list, deterministic first, minus
    # FFT; with the knob at 1 FFT is simply accepted
    s = _setup(WGRAD)
    names = ALGO_NAMES[WGRAD]
    cands = [Candidate(n, names.index(n), 0, True)
             for n in ("FFT", "WINOGRAD_NONFUSED", "FFT_TILING")]
    assert [c.name for c in s.accepted(cands, deterministic=False, allow_fft=False)] == [
        "WINOGRAD_NONFUSED"]
    assert [c.name for c in s.accepted(cands, deterministic=False, allow_fft=True)] == [
        "FFT", "FFT_TILING"]


@pytest.mark.parametrize("direction", [FPROP, DGRAD, WGRAD])
def test_half_keeps_every_deterministic_algorithm_by_default_and_fft_unless_the_knob_says_not(
        direction):
    # HALF / BFLOAT16 (float_io False): the engine's default (allow_fft=True) keeps every
    # deterministic algorithm, FFT included, as before the knob covered them; the knob's 0
    # drops FFT and FFT_TILING in every direction, weight gradients too
    s = _setup(direction, float_io=False)
    names = set(ALGO_NAMES[direction])
    assert FFT <= names
    assert _kept(s, deterministic=False, allow_fft=True) == names
    assert _kept(s, deterministic=False, allow_fft=False) == names - FFT
    # cuDNN's non-deterministic entries stay out for HALF whatever the knobs say
    fft = ALGO_NAMES[direction].index("FFT")
    assert not s.accurate(fft, False, deterministic=False, allow_fft=True)


@pytest.mark.parametrize("float_io,other", [(True, "WINOGRAD"), (False, "ALGO_0")])
def test_with_the_knob_at_0_the_fallback_takes_no_fft_either(float_io, other):
    # cuDNN lists only what the policy declines (FFT, FFT_TILING and, for FLOAT, Winograd;
    # for HALF the non-deterministic ALGO_0): accepted() falls back to the whole list,
    # deterministic first, but a knob set to 0 keeps FFT out of that fallback too
    s = _setup(DGRAD, float_io=float_io)
    names = ALGO_NAMES[DGRAD]
    cands = [Candidate(n, names.index(n), 0, n != "ALGO_0") for n in ("FFT", other, "FFT_TILING")]
    assert [c.name for c in s.accepted(cands, deterministic=True, allow_fft=False)] == [other]
    # the default accepts FFT there
    assert [c.name for c in s.accepted(cands, deterministic=True, allow_fft=True)] == [
        "FFT", "FFT_TILING"]


def test_accepted_keeps_cudnns_order_under_the_policy():
    s = _setup(DGRAD)
    names = ALGO_NAMES[DGRAD]
    order = ["ALGO_1", "WINOGRAD_NONFUSED", "FFT_TILING", "ALGO_0", "FFT"]
    cands = [Candidate(n, names.index(n), 0, n != "ALGO_0") for n in order]
    assert [c.name for c in s.accepted(cands, deterministic=False, allow_fft=True)] == [
        "ALGO_1", "FFT_TILING", "ALGO_0", "FFT"]
    assert [c.name for c in s.accepted(cands, deterministic=True, allow_fft=False)] == ["ALGO_1"]
