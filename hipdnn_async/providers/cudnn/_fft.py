"""The FFT part of both cuDNN engines' numerical policy: knobs ``cudnn_graph.allow_fft``
(FFT-noted engine configs) and ``cudnn_legacy.allow_fft`` (the FFT / FFT_TILING algorithms).

- Offered for every convolution (fprop, dgrad, wgrad, conv+bias+activation; FLOAT, HALF,
  BFLOAT16), default 1 (FFT may run). FLOAT fprop, dgrad and conv+bias+activation were
  measured within tolerance on the H200 by bench/diag_fft.py (see ``_graph_plan``'s
  docstring); FLOAT weight gradients by bench/diag_wgrad_fft.py (H200, cuDNN 9.19,
  torch 2.11, batch 32, fp32 NCHW, every ResNet-50 wgrad shape: ``python3
  bench/diag_wgrad_fft.py`` with U(-1, 1) inputs and ``--wide --layers 3x3`` with
  magnitudes 2^-8..2^8; bench/results/h200_diag_wgrad_fft*.log): every FFT result was
  at most 0.05 of our bound (``tests/oracle/_cases.gpu_wgrad_tol``; 0.01 with the wide
  set) against up to 0.33 for the direct ALGO_0 / ALGO_1, and the legacy heuristic then
  picks FFT on res3 3x3 (0.161 ms against ALGO_0's 0.357) and res4 3x3 (0.150 against
  ALGO_1's 0.322), with a ~150 MiB workspace (the workspace limit knob still bounds it).
  HALF / BFLOAT16 transforms accumulate in FLOAT, as before the knob covered them.
- 0 declines FFT for every data type: an FFT spreads a NaN or Inf of its input over
  every output of its tile or image, where direct summation keeps it to the outputs that
  read it. FLOAT then sums directly (it never takes Winograd); HALF / BFLOAT16 may still
  take a Winograd config or algorithm, whose transform mixes one small input tile (4x4 to
  13x13 elements), as before.
- Batchnorm offers no knob (no FFT engines; nothing to decline).
- The perf-db key names the setting where it differs from the key of the data type's
  earlier default (FLOAT: FFT used to be declined for every FLOAT convolution, so FFT
  accepted is ``"fft"``; HALF / BFLOAT16: FFT was always accepted, so FFT declined is
  ``"no-fft"``): a choice made under one setting is never taken under the other, entries
  chosen under the FFT-declining FLOAT default are chosen anew, and ``allow_fft = 0``
  reads them, since its candidates are theirs.
"""
from __future__ import annotations

from ... import _knobs

__all__ = ["allowed", "key_word", "fft_knob"]


def allowed(knobs, knob_id: str, *, conv: bool) -> bool:
    """Whether FFT may run: for a convolution (``conv``, fused ones included) the knob's
    value (default 1); for batchnorm True (no FFT engines, nothing to decline)."""
    return not conv or bool(knobs.get(knob_id, 1))


def key_word(*, conv: bool, float_io: bool, allow_fft: bool) -> str:
    """The perf-db policy word of the FFT setting (module docstring): ``"fft"``,
    ``"no-fft"`` or ``""`` (the key of the data type's earlier default; batchnorm: always
    ``""``, it has no FFT setting)."""
    if not conv:
        return ""
    if float_io:
        return "fft" if allow_fft else ""
    return "" if allow_fft else "no-fft"


def fft_knob(knob_id: str, what: str) -> _knobs.Knob:
    """The ``allow_fft`` knob: int64 in [0, 1], default 1; ``what`` names the engine's FFT
    (``"FFT engine configs"``, ``"cuDNN's FFT / FFT_TILING algorithms"``)."""
    return _knobs.Knob(knob_id, "int64", 1, 0, 1,
                       f"Allow {what} (0: none, for every data type: an FFT spreads a NaN "
                       "or Inf input over its whole tile or image)")
