"""Workspace sizing: one allocation carved into aligned segments.

A plan that needs several scratch areas (saved statistics, a vendor call's own workspace,
a reserve space, an intermediate tensor) asks for their sum once and carves the pointer
at run time, so one stream workspace serves it.
"""
from __future__ import annotations

__all__ = ["ALIGN", "align", "Segments"]

# Alignment of every segment: 256 bytes is cudaMalloc's / hipMalloc's guaranteed alignment
# (CUDA C Programming Guide, "Device Memory Accesses"), which vendor kernels assume.
ALIGN = 256


def align(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of :data:`ALIGN`."""
    return (int(nbytes) + ALIGN - 1) // ALIGN * ALIGN


class Segments:
    """Named, aligned segments of one workspace, in the order added.

    Examples
    --------
    >>> s = Segments(); s.add("mean", 12); s.add("z", 1000)
    >>> s.size, s.offset("z")
    (1280, 256)
    """

    def __init__(self) -> None:
        self._offsets: dict[str, int] = {}
        self._sizes: dict[str, int] = {}
        self.size = 0

    def add(self, name: str, nbytes: int) -> None:
        """Append a segment of ``nbytes`` (0 allowed: it then has no pointer)."""
        self._offsets[name] = self.size
        self._sizes[name] = int(nbytes)
        self.size += align(nbytes)

    def offset(self, name: str) -> int:
        return self._offsets[name]

    def nbytes(self, name: str) -> int:
        return self._sizes[name]

    def pointer(self, base: int, name: str) -> int:
        """The segment's device pointer in a workspace at ``base``; 0 for an empty one."""
        return base + self._offsets[name] if self._sizes[name] else 0

    def __contains__(self, name: str) -> bool:
        return name in self._offsets
