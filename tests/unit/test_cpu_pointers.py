"""Int host pointers on the CPU device: every page of the range is checked (issue 10 item 3).

Only the first and last byte used to be probed, so a range with an unmapped or PROT_NONE
page in the middle segfaulted the process inside the worker. Each case runs in a child
process so that a regression is a failed test, not a dead pytest.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROT_NONE = 0  # <sys/mman.h>; the mmap module does not export it
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="process_vm_readv and mprotect are Linux calls")

# A 3-page anonymous mapping whose middle page is made unreadable (PROT_NONE), read-only
# or unmapped, then bound as a tensor spanning exactly the three pages.
CHILD = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    import hipdnn_async as hd

    hole, role = sys.argv[1], sys.argv[2]
    PROT_NONE = 0                                       # <sys/mman.h>
    page = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.mprotect.argtypes = libc.munmap.argtypes = None
    base = libc.mmap(None, 3 * page, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    mid = ctypes.c_void_p(base + page)
    if hole == "prot_none":
        assert libc.mprotect(mid, ctypes.c_size_t(page), PROT_NONE) == 0
    elif hole == "read_only":
        assert libc.mprotect(mid, ctypes.c_size_t(page), mmap.PROT_READ) == 0
    elif hole == "munmap":
        assert libc.munmap(mid, ctypes.c_size_t(page)) == 0

    n = 3 * page // 4                                   # float32 elements in 3 pages
    g = hd.Graph(name="ptr", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 1, n // 64, 64), name="x")
    mean, var, scale, bias = (g.tensor(dims=(1, 1, 1, 1), name=k)
                              for k in ("mean", "var", "scale", "bias"))
    y = g.batchnorm_inference_variance_ext(x, mean, var, scale, bias,
                                           epsilon=1e-5).set_output(True)
    one = np.ones((1, 1, 1, 1), np.float32)
    with hd.Device("cpu", streams=1) as dev:
        plan = dev.build_sync(g)
        xs, ys = np.ones(x.dims, np.float32), np.zeros(x.dims, np.float32)
        vp = {x: xs, y: ys, mean: one * 0, var: one, scale: one, bias: one}
        vp[x if role == "x" else y] = base
        try:
            plan.execute_sync(vp)
        except hd.VariantPackError as exc:
            print("VariantPackError:", exc)
            sys.exit(0)
        print("ran")
""")


def run_child(hole: str, role: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, hole, role], cwd=ROOT, timeout=120,
                          capture_output=True, text=True)


@pytest.mark.parametrize("hole", ["prot_none", "munmap"])
@pytest.mark.parametrize("role", ["x", "y"])
def test_range_with_an_unreadable_page_inside_is_a_variant_pack_error(hole, role):
    r = run_child(hole, role)
    assert r.returncode == 0, f"child died with {r.returncode}: {r.stderr[-2000:]}"
    assert "VariantPackError" in r.stdout, r.stdout
    assert "not mapped host memory" in r.stdout
    assert "(offset 4096)" in r.stdout or f"(offset {os.sysconf('SC_PAGE_SIZE')})" in r.stdout


def test_output_range_with_a_read_only_page_inside_is_refused():
    r = run_child("read_only", "y")
    assert r.returncode == 0, f"child died with {r.returncode}: {r.stderr[-2000:]}"
    assert "is an output, but pointer" in r.stdout and "read-only" in r.stdout, r.stdout


def test_read_only_page_is_fine_for_an_input_and_whole_ranges_run():
    for hole, role in (("read_only", "x"), ("none", "x"), ("none", "y")):
        r = run_child(hole, role)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == "ran", (hole, role, r.stdout)


def test_every_page_is_probed_in_chunks_of_iov_max():
    """A range of more pages than one process_vm_readv call takes (1024), with the hole
    past the first call's pages, is still found (in process: nothing is dereferenced)."""
    import ctypes
    import mmap

    import numpy as np

    from hipdnn_async.providers.cpu._bind import _unmapped_page
    page = mmap.PAGESIZE
    m = mmap.mmap(-1, 1500 * page)
    arr = np.frombuffer(m, np.uint8)
    base = arr.ctypes.data
    assert _unmapped_page(base, 1500 * page) is None
    assert _unmapped_page(base, 1500 * page, writable=True) is None
    assert _unmapped_page(base + 10, 1500 * page - 10) is None
    libc = ctypes.CDLL(None, use_errno=True)
    hole = base + 1300 * page
    assert libc.mprotect(ctypes.c_void_p(hole), ctypes.c_size_t(page), PROT_NONE) == 0
    try:
        assert _unmapped_page(base, 1500 * page) == hole
        assert _unmapped_page(base + 7, 1300 * page - 7) is None      # ends before the hole
        assert _unmapped_page(base, 1300 * page + 1) == hole          # its first byte counts
    finally:
        libc.mprotect(ctypes.c_void_p(hole), ctypes.c_size_t(page),
                      mmap.PROT_READ | mmap.PROT_WRITE)
        del arr
        m.close()


def test_a_huge_tensor_on_a_small_mapping_is_a_variant_pack_error_not_a_memory_error():
    """The page probes were one array of 8 bytes per page of the whole range: a tensor of
    2**40 x 3 x 5 x 5 floats (330 TB) bound to an int pointer asked NumPy for 640 GB and
    raised an untyped MemoryError (new-user report). The probes are now made per call, so
    the hole after a 2-page mapping is found in the first call (nothing is dereferenced)."""
    import ctypes
    import mmap

    import numpy as np

    import hipdnn_async as hd
    page = mmap.PAGESIZE
    m = mmap.mmap(-1, 3 * page)
    arr = np.frombuffer(m, np.uint8)
    base = arr.ctypes.data
    libc = ctypes.CDLL(None, use_errno=True)
    hole = base + 2 * page
    assert libc.mprotect(ctypes.c_void_p(hole), ctypes.c_size_t(page), PROT_NONE) == 0
    try:
        g = hd.Graph(io_data_type="float32")
        x = g.tensor(dims=(2 ** 40, 3, 5, 5), name="x")
        w = g.tensor(dims=(4, 3, 3, 3), name="w")
        y = g.conv_fprop(x, w).set_output(True)
        with hd.Device("cpu", streams=1) as dev:
            plan = dev.build_sync(g)
            with pytest.raises(hd.VariantPackError) as e:
                plan.execute_sync({x: base, w: np.zeros((4, 3, 3, 3), np.float32),
                                   y: base + page})
        msg = str(e.value)
        assert "tensor 'x' (uid 0): pointer" in msg, msg
        assert f"(+{2 ** 40 * 75 * 4} bytes) is not mapped host memory" in msg, msg
        assert f"address {hole:#x} (offset {2 * page})" in msg, msg
    finally:
        libc.mprotect(ctypes.c_void_p(hole), ctypes.c_size_t(page),
                      mmap.PROT_READ | mmap.PROT_WRITE)
        del arr
        m.close()
