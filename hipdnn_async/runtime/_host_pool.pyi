"""Stubs of the CPU device's pool of host workspaces (``src_pyx/_host_pool.pyx``): blocks
from POOL_MIN_BYTES up, reused once every view of a block is gone."""
import numpy as np

__all__: list[str]

ALIGN: int
POOL_MIN_BYTES: int
POOL_KEEP_BLOCKS: int
POOL_KEEP_BYTES: int

class HostBlock:
    """The first ``nbytes`` of a pooled block as a writable 1-D byte buffer; the block
    returns to the pool when this object is deallocated."""

    @property
    def nbytes(self) -> int:
        """Bytes exported (the request's size, at most the block's)."""

def aligned_empty(nbytes: int, *, huge_pages: bool = False) -> np.ndarray:
    """``runtime._buffer.aligned_empty``: ``nbytes`` at a multiple of ``ALIGN`` bytes,
    not pooled; the pool calls it without ``huge_pages`` (MemoryError)."""

def take(nbytes: int) -> np.ndarray:
    """A writable uint8 array of ``nbytes`` (reused block or new; where a new one fails,
    again after freeing the idle blocks; then MemoryError)."""

def pooled_bytes() -> int:
    """Bytes held in free blocks now."""

def release_pooled() -> int:
    """Free every pooled block not in use; return the bytes released."""
