"""The FFT part of both cuDNN engines' numerical policy: knobs ``cudnn_graph.allow_fft``
(FFT-noted engine configs) and ``cudnn_legacy.allow_fft`` (the FFT / FFT_TILING algorithms).

- Default 1 (FFT may run) for every data type where it ran before the knob covered it:
  FLOAT fprop, dgrad and conv+bias+activation (measured within tolerance on the H200,
  bench/diag_fft.py: see ``_graph_plan``'s docstring) and every HALF / BFLOAT16
  convolution (FFT transforms in FLOAT accumulation, as before). FLOAT weight gradients
  never take FFT (not measured) and offer no knob.
- 0 declines FFT for every data type that offers the knob: an FFT spreads a NaN or Inf
  of its input over every output of its tile or image, where direct summation keeps it
  to the outputs that read it. FLOAT then sums directly (it never takes Winograd);
  HALF / BFLOAT16 may still take a Winograd config or algorithm, whose transform mixes
  one small input tile (4x4 to 13x13 elements), as before.
- The perf-db key names the setting where it differs from the key of the data type's
  earlier default (FLOAT: FFT used to be declined, so FFT accepted is ``"fft"``;
  HALF / BFLOAT16: FFT was always accepted, so FFT declined is ``"no-fft"``): a choice
  made under one setting is never taken under the other, and keys written before keep
  their meaning.
"""
from __future__ import annotations

from ... import _knobs

__all__ = ["knob_offered", "allowed", "key_word", "fft_knob"]


def knob_offered(*, conv: bool, float_io: bool, wgrad: bool) -> bool:
    """Whether the ``<engine>.allow_fft`` knob is offered: every convolution but FLOAT
    weight gradients (``conv``: a convolution pattern, fused ones included)."""
    return conv and not (float_io and wgrad)


def allowed(knobs, knob_id: str, *, conv: bool, float_io: bool, wgrad: bool) -> bool:
    """Whether FFT may run: declined for FLOAT weight gradients and FLOAT batchnorm (as
    before), else the knob's value where it is offered (default 1), else accepted
    (HALF / BFLOAT16 batchnorm: no FFT engines there, nothing to decline)."""
    if float_io and (wgrad or not conv):
        return False
    if knob_offered(conv=conv, float_io=float_io, wgrad=wgrad):
        return bool(knobs.get(knob_id, 1))
    return True


def key_word(*, float_io: bool, allow_fft: bool) -> str:
    """The perf-db policy word of the FFT setting (module docstring): ``"fft"``,
    ``"no-fft"`` or ``""`` (the key of the data type's earlier default)."""
    if float_io:
        return "fft" if allow_fft else ""
    return "" if allow_fft else "no-fft"


def fft_knob(knob_id: str, what: str) -> _knobs.Knob:
    """The ``allow_fft`` knob: int64 in [0, 1], default 1; ``what`` names the engine's FFT
    (``"FFT engine configs"``, ``"cuDNN's FFT / FFT_TILING algorithms"``)."""
    return _knobs.Knob(knob_id, "int64", 1, 0, 1,
                       f"Allow {what} (0: none, for every data type: an FFT spreads a NaN "
                       "or Inf input over its whole tile or image)")
