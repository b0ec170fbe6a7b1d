"""Pattern recognition: a validated graph -> one of the nine supported patterns.

``match(graph)`` returns a ``Match`` (pattern, nodes, role -> tensor, params) or raises
``NotSupportedError`` naming the first node that does not fit. ``conv_roles(pattern)``
says which roles of a convolution pattern are its x, w and y.
"""
from ._catalog import CATALOG, Pattern, PatternSpec, Step, spec_for
from ._conv import ConvDirection, ConvRoles, conv_roles
from ._match import Match, match

__all__ = ["Pattern", "Match", "match", "CATALOG", "PatternSpec", "Step", "spec_for",
           "ConvDirection", "ConvRoles", "conv_roles"]
