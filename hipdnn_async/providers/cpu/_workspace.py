"""Host workspaces reused across executions: a small caching pool for the CPU device.

Why: a workspace the caller does not pass is allocated for each execution. Below about
32 MiB glibc's heap recycles such blocks, but a larger one (a 32 x 64 x 56 x 56 float32
convolution on NCHW memory needs 51 MB for its channel-blocked copies) is a fresh
``mmap`` every time, whose pages the kernel faults in and zeroes on first touch: 2-8 ms
of a 35-43 ms convolution on 2 cores, where PyTorch's allocator reuses its blocks.

How: blocks of at least ``POOL_MIN_BYTES`` come from here. The array handed out views a
pooled block through a small exporter object; every NumPy view made from it keeps that
exporter alive, so the block returns to the pool only when the last view of it is gone
(the execution holds its workspace until it completes). The pool keeps at most
``POOL_KEEP_BLOCKS`` free blocks and ``POOL_KEEP_BYTES`` bytes; others are freed. A block
is reused for a request of at least half its size. Contents are not cleared: a workspace
is scratch, as ``np.empty``'s is.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = ["POOL_MIN_BYTES", "POOL_KEEP_BLOCKS", "POOL_KEEP_BYTES", "take", "pooled_bytes",
           "release_pooled"]

POOL_MIN_BYTES = 1 << 20        # smaller workspaces: np.empty (the heap recycles those)
POOL_KEEP_BLOCKS = 8            # free blocks kept
POOL_KEEP_BYTES = 1 << 30       # bytes of free blocks kept

_lock = threading.Lock()
_free: list = []                # [(nbytes, owner array, exporter class)], free blocks


def take(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes``: a reused block where one fits, else a new one (raises
    MemoryError). It returns to the pool once every view of it is gone."""
    if nbytes < POOL_MIN_BYTES:
        return np.empty(nbytes, np.uint8)
    with _lock:
        fits = [b for b in _free if nbytes <= b[0] <= 2 * nbytes]
        block = min(fits, key=lambda b: b[0]) if fits else None
        if block is not None:
            _free.remove(block)
    if block is None:
        owner = np.empty(nbytes, np.uint8)
        block = (nbytes, owner, type("_Block", (_Exporter,), {"_type_": ctypes.c_uint8,
                                                               "_length_": nbytes}))
    size, owner, cls = block
    exporter = cls.from_address(owner.ctypes.data)
    exporter.block = block
    return np.frombuffer(exporter, np.uint8, nbytes)


class _Exporter(ctypes.Array):
    """A ctypes array over a pooled block's memory (not owning it): the base of the arrays
    handed out, whose end gives the block back."""
    _type_ = ctypes.c_uint8
    _length_ = 0

    def __del__(self):
        try:
            _put(self.__dict__["block"])
        except Exception:   # noqa: BLE001 - at interpreter exit the module may be gone
            pass


def _put(block) -> None:
    with _lock:
        if (len(_free) < POOL_KEEP_BLOCKS
                and sum(b[0] for b in _free) + block[0] <= POOL_KEEP_BYTES):
            _free.append(block)


def pooled_bytes() -> int:
    """Bytes held in free blocks now."""
    with _lock:
        return sum(b[0] for b in _free)


def release_pooled() -> int:
    """Free every pooled block not in use; returns the bytes released."""
    with _lock:
        released = sum(b[0] for b in _free)
        _free.clear()
    return released
