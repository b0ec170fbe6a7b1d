"""Workspace sizing (providers/_gpu/_workspace.py): aligned, named segments of one buffer."""
import pytest

from hipdnn_async.providers._gpu._workspace import ALIGN, Segments, align


@pytest.mark.parametrize("n, want", [(0, 0), (1, 256), (256, 256), (257, 512), (4096, 4096)])
def test_align_rounds_up_to_256(n, want):
    assert ALIGN == 256 and align(n) == want


def test_segments_are_aligned_disjoint_and_in_order():
    s = Segments()
    for name, n in (("mean", 12), ("inv_variance", 12), ("empty", 0), ("z", 1000)):
        s.add(name, n)
    base = 0x7000_0000
    ptrs = {n: s.pointer(base, n) for n in ("mean", "inv_variance", "z")}
    assert all((p - base) % ALIGN == 0 for p in ptrs.values())
    assert ptrs["mean"] == base and ptrs["inv_variance"] == base + 256
    assert s.pointer(base, "empty") == 0 and "empty" in s and "k" not in s
    assert ptrs["z"] == base + 512 and s.size == 512 + 1024
    spans = sorted((s.offset(n), s.offset(n) + s.nbytes(n)) for n in ptrs)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
