"""Stubs of the compiled CPU loops (``src_pyx/_cpu_kernels.pyx``).

Arrays are (N, C, S) float32 or float64 views with any strides (one dtype per call);
per-channel vectors are contiguous float64 of length C. All run with the GIL released.
"""
import os

import numpy as np

__all__: list[str]

def channel_stats(x: np.ndarray, mean: np.ndarray, var: np.ndarray) -> None:
    """Per-channel mean and biased variance over N and S (two passes, float64 sums)."""

def scale_shift_act(x: np.ndarray, y: np.ndarray, mean: np.ndarray, a: np.ndarray,
                    bias: np.ndarray, act: bool, lower: float, upper: float) -> None:
    """y = act((x - mean[c]) * a[c] + bias[c]); act = clamp(lower, upper), NaN kept, no -0.0."""

def bias_act(x: np.ndarray, y: np.ndarray, bias: np.ndarray, has_bias: bool,
             lower: float, upper: float) -> None:
    """y = clamp(x + bias[c], lower, upper), NaN kept, no -0.0."""

def relu_backward(y: np.ndarray, dy: np.ndarray, dx: np.ndarray, lower: float,
                  upper: float) -> None:
    """dx = dy where lower < y < upper else 0; NaN in y gives NaN; upper +inf is no upper
    clip (dy where lower < y, y = +inf included)."""

def bn_backward_reduce(dy: np.ndarray, x: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                       inv: np.ndarray, bn_bias: np.ndarray, drelu: bool, lower: float,
                       upper: float, dbias: np.ndarray, dscale: np.ndarray) -> None:
    """dbias = sum(g), dscale = sum(g * xhat); g = dy, masked by RELU_BWD(y_bn) if drelu."""

def bn_backward_dx(dy: np.ndarray, x: np.ndarray, dx: np.ndarray, scale: np.ndarray,
                   mean: np.ndarray, inv: np.ndarray, bn_bias: np.ndarray, drelu: bool,
                   lower: float, upper: float, dbias: np.ndarray, dscale: np.ndarray) -> None:
    """dx = scale*inv/m * (m*g - dbias - xhat*dscale)."""

BIAS_RELU_KINDS: dict[str, int]
"""Element-type codes of :func:`bias_relu`: float32 0, bfloat16 1, float16 2."""

def bias_relu(x: np.ndarray, x_kind: int, out: np.ndarray, out_kind: int,
              bias: np.ndarray | None, lower: float, upper: float, *,
              baseline: bool = False, team: bool = False) -> None:
    """out = clamp(x + bias[c], lower, upper) + 0.0 in one pass, rounded once to ``out``'s
    type (float32, bfloat16 or float16 by ``BIAS_RELU_KINDS``); NaN kept, ReLU(-inf) = +0.0,
    -0.0 becomes +0.0; any dims (N, C, ...) and element strides; ``out`` may be ``x``.
    ``baseline``: the rows built for the baseline ISA even where AVX-512 ones run;
    ``team``: split among oneDNN's OpenMP threads (65,536 elements and more)."""

def convert(x: np.ndarray, x_kind: int, out: np.ndarray, out_kind: int, *,
            baseline: bool = False, team: bool = False) -> None:
    """out = x converted exactly to ``out``'s element type (``BIAS_RELU_KINDS``), as NumPy's
    ``astype``: 16-bit to float32 exact, float32 to 16-bit round to nearest-even (overflow
    to inf, NaN kept NaN), the same kind copies the bits; any equal dims (rank >= 1) and
    element strides; ``team``: split among oneDNN's OpenMP threads (65,536 elements and
    more). ValueError for unequal dims, kinds not 0..2 or not the item sizes, read-only
    ``out``."""

def bias_relu_isa() -> str:
    """``"avx512"`` where ``bias_relu`` runs its AVX-512 rows (avx512f + avx512bw),
    ``"avx2"`` where it runs its AVX2 ones (avx2 + fma), else ``"baseline"``."""

def bn_training_statistics(variance: np.ndarray, epsilon: float, inv_variance: np.ndarray | None,
                           mean: np.ndarray | None, momentum: float, unbias: float,
                           prev_mean: np.ndarray | None, next_mean: np.ndarray | None,
                           prev_variance: np.ndarray | None,
                           next_variance: np.ndarray | None) -> None:
    """inv_variance, running statistics from a training batchnorm's variance (float32 1-D
    vectors; the variance may be a float64 ndarray, bn_rows' variance_out in float64;
    float64 arithmetic)."""

def bn_inference_factor(scale: np.ndarray, variance: np.ndarray, epsilon: float,
                        factor: np.ndarray) -> None:
    """factor = scale / sqrt(variance + epsilon) (float32 1-D vectors)."""

BN_ROWS_TRAINING: int
BN_ROWS_INFERENCE: int
BN_ROWS_BACKWARD: int
"""``op`` codes of :func:`bn_rows`."""

def bn_rows(op: int, x: np.ndarray, y: np.ndarray, kind: int, *, dy: np.ndarray | None = None,
            scale: np.ndarray | None = None, bias: np.ndarray | None = None,
            mean: np.ndarray | None = None, variance: np.ndarray | None = None,
            inv_variance: np.ndarray | None = None, mean_out: np.ndarray | None = None,
            variance_out: np.ndarray | None = None, dscale: np.ndarray | None = None,
            dbias: np.ndarray | None = None, epsilon: float = 0.0, act: bool = False,
            lower: float = 0.0, upper: float = ..., baseline: bool = False,
            stream: bool | None = None, isa: str | None = None) -> int:
    """Batchnorm training / inference / backward on oneDNN's OpenMP team, activations of
    dims (N, C, spatial...) (float32, bfloat16 or float16 by ``kind``, 16-bit as raw bits)
    either channels-last (C > 1, a pixel's C values packed, pixels at one stride: NHWC,
    NDHWC; the pixels split among the threads, partial sums meeting at a team barrier) or
    channels-first (spatial elements one packed run: NCHW, NCDHW; every pass of a channel
    on one thread); y (dx for backward) written; per-channel float32 contiguous vectors;
    returns the thread count. ``act``: a fused clamp (forward) or RELU_BWD mask
    (backward: dy where lower < y_bn < upper; upper +inf is no upper clip, where y_bn =
    +inf passes). ``variance_out`` (training) may be a float64 ndarray: the variance kept
    beyond FLT_MAX. ``isa``: the build to run (a ``bn_rows_isa`` name; None: the one it
    names). ``stream``: y's stores non-temporal (None: ``bn_streams_by_default``, and
    channels-first rows of whole 64-byte lines, for inference y on a 64-byte boundary;
    True raises ValueError where the rows cannot: not the intrinsic rows, 16-bit
    channels-first rows, float32 y off 4-byte boundaries, channels-last y off 64-byte
    boundaries at some pixel)."""

def last_level_cache_bytes(root: str | os.PathLike = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of cpu0's largest level-3 or higher data or unified cache, from sysfs under
    ``root`` (CPUID can report the host's in a VM); 32 MiB where sysfs names none."""

def bn_streams_by_default(op: int, values: int, itemsize: int) -> bool:
    """Whether :func:`bn_rows` streams y by default (where it can): the call's activations
    (``values`` elements of ``itemsize`` bytes in x and y, and dy for ``BN_ROWS_BACKWARD``)
    at least :func:`last_level_cache_bytes`."""

def bn_pivot_samples(images: int, pixels: int) -> list[list[int]]:
    """The pixels (n * pixels + s) the channels-last training pivot reads in a job of
    ``images`` images of ``pixels`` pixels: its three groups of samples. For tests."""

def bn_rows_isa(kind: str = "float32") -> str:
    """``"avx512"``, ``"avx512_auto"``, ``"avx2"`` (float32, bfloat16), ``"avx2_auto"`` or
    ``"baseline"``: the rows ``bn_rows`` runs for elements of ``kind`` here."""

def bn_rows_builds() -> tuple[str, ...]:
    """The rows builds this CPU can run (``bn_rows``'s ``isa`` names), ``"baseline"``
    first. For tests of every build."""


def nonfinite(x: np.ndarray, kind: int) -> bool:
    """Whether ``x`` (float32, bfloat16 or float16 bits: ``kind`` 0, 1, 2) holds a NaN or
    an infinity."""
