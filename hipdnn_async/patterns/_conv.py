"""Which tensors of a convolution pattern play which part: one mapping for every provider.

A convolution relates an activation ``x`` (N, C, ...), a filter ``w`` (K, C/groups, ...)
and an output-side activation ``y`` (N, K, ...). Fprop computes y from x and w; dgrad
computes dx from dy and w; wgrad computes dw from dy and x. ``ConvRoles`` names the
variant-pack roles (docs/design/internals.md s.2) that hold x, w and y for each pattern, so a
provider orders its kernel or library arguments from these names instead of keeping its
own table.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ._catalog import Pattern

__all__ = ["ConvDirection", "ConvRoles", "conv_roles"]


class ConvDirection(enum.IntEnum):
    """Forward, backward data, backward filter: the order vendor libraries index their
    per-direction tables in."""

    FPROP = 0
    DGRAD = 1
    WGRAD = 2

    @property
    def label(self) -> str:
        """``"fprop"``, ``"dgrad"`` or ``"wgrad"``."""
        return self.name.lower()


@dataclass(frozen=True)
class ConvRoles:
    """The roles of one convolution pattern.

    Attributes
    ----------
    direction : ConvDirection
    x, w, y : str
        Roles holding the activation, the filter and the output-side activation:
        fprop ``x, w, y``; dgrad ``dx, w, dy``; wgrad ``x, dw, dy``.
    """

    direction: ConvDirection
    x: str
    w: str
    y: str

    @property
    def inputs(self) -> tuple[str, str]:
        """The two roles read, in the node's input-slot order: fprop (x, w), dgrad
        (dy, w), wgrad (dy, x)."""
        return {ConvDirection.FPROP: (self.x, self.w), ConvDirection.DGRAD: (self.y, self.w),
                ConvDirection.WGRAD: (self.y, self.x)}[self.direction]

    @property
    def output(self) -> str:
        """The role written: y, dx or dw."""
        return {ConvDirection.FPROP: self.y, ConvDirection.DGRAD: self.x,
                ConvDirection.WGRAD: self.w}[self.direction]


_ROLES = {
    Pattern.CONV_FPROP: ConvRoles(ConvDirection.FPROP, "x", "w", "y"),
    Pattern.CONV_FPROP_BIAS_RELU: ConvRoles(ConvDirection.FPROP, "x", "w", "y"),
    Pattern.CONV_DGRAD: ConvRoles(ConvDirection.DGRAD, "dx", "w", "dy"),
    Pattern.CONV_WGRAD: ConvRoles(ConvDirection.WGRAD, "x", "dw", "dy"),
}


def conv_roles(pattern: Pattern) -> ConvRoles | None:
    """The ``ConvRoles`` of a convolution pattern (6, 7, 8, 9); None for the others."""
    return _ROLES.get(pattern)
