"""Host memory from ``runtime._buffer.aligned_empty`` of ``HUGE_PAGE`` bytes or more: its own
mapping, on a 2 MiB boundary, whose whole 2 MiB extents the kernel reports eligible for
transparent huge pages (``/proc/self/smaps``), released when the last view goes; a failed
mapping is a MemoryError."""
import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hipdnn_async.runtime import _buffer
from hipdnn_async.runtime._buffer import HUGE_PAGE, aligned_empty

linux = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="transparent huge pages and /proc/self/smaps are Linux's")


def _thp_mode():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1:text.index("]")]


def _mapping(addr):
    """(start, end, {field: value}) of the mapping holding ``addr``, from /proc/self/smaps."""
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            if lo <= addr < hi:
                fields = {}
                for extra in lines[i + 1:]:
                    key = extra.split()[0]
                    if not key.endswith(":"):
                        break
                    fields[key[:-1]] = extra.split()[1]
                return lo, hi, fields
    return None


@linux
@pytest.mark.parametrize("nbytes", [HUGE_PAGE, 5 * HUGE_PAGE // 2, 3 * HUGE_PAGE + 64])
def test_large_arrays_start_on_a_huge_page_and_their_whole_extents_are_advised(nbytes):
    a = aligned_empty(nbytes, huge_pages=True)
    addr = a.ctypes.data
    assert addr % HUGE_PAGE == 0 and a.nbytes == nbytes and a.flags.writeable
    a[:] = 3
    whole = nbytes // HUGE_PAGE * HUGE_PAGE
    lo, hi, fields = _mapping(addr)
    # madvise splits the mapping: the advised part is exactly the whole extents
    assert (lo, hi - lo) == (addr, whole)
    if _thp_mode() in ("madvise", "always"):
        assert fields.get("THPeligible") == "1"
    tail = _mapping(addr + whole) if whole < nbytes else None
    if tail is not None:
        assert tail[0] == addr + whole            # the tail is a mapping of its own
    assert int(a.sum(dtype=np.int64)) == 3 * nbytes


@linux
def test_small_arrays_stay_on_the_numpy_heap_on_64_byte_boundaries():
    a = aligned_empty(HUGE_PAGE - 1, huge_pages=True)
    assert a.ctypes.data % 64 == 0 and a.nbytes == HUGE_PAGE - 1
    assert type(a.base) is np.ndarray and a.base.flags.owndata


@linux
def test_the_mapping_goes_with_the_last_view():
    a = aligned_empty(2 * HUGE_PAGE, huge_pages=True)
    addr = a.ctypes.data
    view = a[HUGE_PAGE:].view(np.float32)[5:]
    del a
    gc.collect()
    view[:] = 1.0                                   # still mapped, still ours
    assert _mapping(addr) is not None
    del view
    gc.collect()
    assert _mapping(addr) is None


@linux
def test_a_mapping_the_address_space_refuses_is_a_memory_error():
    code = textwrap.dedent(f"""
        import resource
        from hipdnn_async.runtime._buffer import aligned_empty
        limit = 1 << 33
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            aligned_empty({1 << 34}, huge_pages=True)
        except MemoryError as exc:
            print("MemoryError", exc)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MemoryError cannot map 17179869184 bytes"), out.stdout


def test_without_madvise_the_heap_path_serves_every_size(monkeypatch):
    # another platform (no mmap.MADV_HUGEPAGE): 64-byte boundaries as before
    monkeypatch.setattr(_buffer, "_MADV_HUGEPAGE", None)
    a = aligned_empty(3 * HUGE_PAGE, huge_pages=True)
    assert a.ctypes.data % 64 == 0 and a.nbytes == 3 * HUGE_PAGE
    assert type(a.base) is np.ndarray and a.base.flags.owndata



@pytest.mark.parametrize("nbytes", [np.int64(HUGE_PAGE), np.uint32(HUGE_PAGE + 5),
                                    np.uint32(4_000_000_000), np.int32(HUGE_PAGE - 1)])
def test_numpy_integer_sizes_are_taken_without_wrapping(nbytes):
    # np.uint32 + HUGE_PAGE wraps around in uint32 (NEP 50): the mapping was then smaller
    # than the array claimed; the size is made a Python int first
    want = int(nbytes)
    a = aligned_empty(nbytes, huge_pages=True)
    assert a.shape == (want,) and a.dtype == np.uint8 and a.ctypes.data % 64 == 0
    a[-1] = 9                                       # the last byte is ours
    assert a[-1] == 9


@pytest.mark.parametrize("nbytes", [-1, -HUGE_PAGE - 1])
def test_a_negative_size_is_a_value_error(nbytes):
    # -1 used to give an empty array (a slice of the 64-byte slack) instead of an error
    with pytest.raises(ValueError, match=f"nbytes must be >= 0; got {nbytes}"):
        aligned_empty(nbytes, huge_pages=True)


@pytest.mark.parametrize("nbytes", [2.5 * HUGE_PAGE, 64.0])
def test_a_float_size_is_a_type_error(nbytes):
    with pytest.raises(TypeError):
        aligned_empty(nbytes)


@linux
def test_without_huge_pages_large_arrays_stay_on_the_heap_and_pool_blocks_too():
    from hipdnn_async.runtime import _host_pool as pool
    a = aligned_empty(3 * HUGE_PAGE)
    assert a.ctypes.data % 64 == 0 and type(a.base) is np.ndarray and a.base.flags.owndata
    pool.release_pooled()
    try:
        block = pool.take(3 * HUGE_PAGE)
        # the block's memory is a NumPy heap allocation, not a mapping of its own
        lo, hi, _ = _mapping(block.ctypes.data)
        assert not (lo == block.ctypes.data and hi - lo == 3 * HUGE_PAGE)
        assert block.ctypes.data % 64 == 0
    finally:
        del block
        pool.release_pooled()


@linux
def test_device_arrays_of_2_mib_and_more_are_huge_page_mappings():
    import hipdnn_async as hd
    with hd.Device("cpu") as dev:
        big = dev.empty((2, 64, 64, 64), dtype=np.float32)          # 2 MiB exactly
        small = dev.empty((2, 64, 64, 63), dtype=np.float32)
        addr = big.view.ctypes.data
        assert addr % HUGE_PAGE == 0
        lo, hi, fields = _mapping(addr)
        assert (lo, hi - lo) == (addr, HUGE_PAGE)
        if _thp_mode() in ("madvise", "always"):
            assert fields.get("THPeligible") == "1"
        assert small.view.ctypes.data % 64 == 0
