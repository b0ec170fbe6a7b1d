"""What an order rule of the default convolution implementation names: one implementation
and its layout variant, moved first by ``Conv._ordered`` where oneDNN 3.2's own order puts
a slower one first on some CPU. The rules are per instruction set: ``_avx2.py`` (AVX2
without AVX-512) and ``_avx512.py`` (AVX-512 without AMX)."""
from __future__ import annotations

import math
from typing import NamedTuple

from ....runtime import load_onednn

__all__ = ["Preference", "isa", "pixels"]


class Preference(NamedTuple):
    """The candidate a rule puts first: oneDNN's implementation name starts with
    ``kernel``, on the layout variant ``layout`` ("" for the user's own layout, else
    ``"+nhwc"`` or ``"+blocked"``); ``why`` is ``plan.algorithm``'s reason."""

    kernel: str
    layout: str
    why: str

    def matches(self, name: str) -> bool:
        layout = next((v for v in ("+nhwc", "+blocked") if v in name), "")
        return name.startswith(self.kernel) and layout == self.layout


def pixels(tensor) -> int:
    """The spatial size of an activation of dims (N, C, spatial...)."""
    return math.prod(tensor.dims[2:])


def isa() -> str:
    """oneDNN's ISA here (``avx2``, ``avx512_core_bf16``, ``avx512_core_amx``...; "" where
    oneDNN does not load): which instruction set's rules apply."""
    state = load_onednn()
    return str(state.isa) if state.ok else ""
