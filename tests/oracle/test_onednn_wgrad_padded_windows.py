"""Weight gradients with an axis along which every window of the kernel reaches into the
padding (a 3-tap kernel over a 1-pixel-wide image; 4 taps over 4 depth planes padded 3
before and 1 after at stride 2): the default plan and every oneDNN candidate left are
exact against float64, write every dw element, read no workspace byte they did not
write, and read nothing past the end of x.

oneDNN 3.2's bf16 jit weight gradient (``jit_bf16:avx512_core_bf16``) read workspace
bytes it had not written there (dw followed whatever the workspace held: NaN after a
NaN-filled one); its float32 jit one (``jit:avx512_core``), 3-D and grouped, left dw
elements unwritten and read past the end of x (a segfault where x ends at a PROT_NONE
page), and on channels-last copies of 3-D activations gave a wrong tap along D. Such
problems keep only the GEMM convolution (``Conv._left_out``), and where it is not offered
the engine declines to ``CPU_ENGINE``. The geometries are a break-it helper's and a fuzz
campaign's over every candidate (outputs NaN-filled, workspaces filled with NaN bytes).

Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import ctypes
import math
import mmap

import numpy as np
import pytest

from . import _reference as ref
from ._cases import assert_close, device, np_dtype, wgrad_tol  # noqa: F401
from ._cpu_engines import ONEDNN, require

# (x dims, dw dims, pre padding, post padding, stride, dtype[, layout]); groups =
# x.C // dw.C; layout channels-last unless given
CASES = [
    # one pixel wide, a 1x3 kernel at stride 3 (bf16: workspace read)
    ((1, 16, 1, 1), (16, 16, 1, 3), (0, 1), (0, 1), (1, 3), "bfloat16"),
    ((2, 3, 4, 1), (11, 3, 5, 3), (1, 0), (3, 2), (2, 2), "bfloat16"),
    ((1, 18, 3, 2), (34, 9, 4, 3), (0, 2), (2, 1), (3, 3), "bfloat16"),
    # 3-D, grouped (float32: unwritten dw, a read past x)
    ((1, 9, 4, 4, 1), (6, 3, 5, 5, 2), (3, 0, 1), (2, 2, 0), (2, 1, 1), "float32"),
    ((1, 32, 4, 8, 8), (32, 16, 5, 1, 1), (3, 0, 0), (2, 0, 0), (2, 1, 1), "float32"),
    ((2, 54, 2, 5, 6), (18, 18, 3, 4, 5), (2, 2, 0), (1, 2, 2), (1, 1, 3), "bfloat16"),
    ((1, 12, 2, 2, 6), (8, 12, 4, 5, 4), (1, 1, 0), (2, 3, 1), (1, 3, 2), "bfloat16"),
    # H = 1 under 3 taps at stride 2 (bf16: the process died of heap corruption; grouped,
    # most of dw wrong, differently each run)
    ((2, 3, 7, 1, 8), (7, 3, 3, 3, 5), (0, 1, 0), (0, 1, 2), (1, 2, 3), "bfloat16"),
    ((2, 6, 7, 1, 8), (14, 3, 3, 3, 5), (0, 1, 0), (0, 1, 2), (1, 2, 3), "bfloat16"),
    # one channel to one: the GEMM is left out too, so CPU_ENGINE runs it
    ((2, 1, 2, 2), (1, 1, 3, 3), (1, 1), (1, 1), (1, 1), "float32"),
    # no wider kernel: every window along D (float32) or H and W (bf16) still padded
    ((3, 4, 4, 5, 7), (8, 4, 4, 4, 4), (3, 2, 0), (1, 2, 3), (2, 1, 2), "float32", "NCDHW"),
    ((2, 4, 4, 3, 3), (8, 4, 4, 1, 1), (3, 0, 0), (1, 0, 0), (2, 1, 1), "float32", "NCDHW"),
    ((2, 4, 6, 3, 3), (8, 4, 5, 1, 1), (4, 0, 0), (1, 0, 0), (3, 1, 1), "float32", "NCDHW"),
    ((3, 17, 4, 2), (17, 17, 4, 2), (1, 1), (0, 0), (3, 3), "bfloat16"),
]


def test_inner_window_matches_every_window():
    from hipdnn_async.providers.cpu.onednn._conv import _inner_window
    for size in range(1, 8):
        for extent in range(1, 8):
            for stride in range(1, 4):
                for pre in range(0, extent):
                    for post in range(0, extent):
                        outputs = (size + pre + post - extent) // stride + 1
                        if outputs < 1:
                            continue
                        inside = any(0 <= o * stride - pre and
                                     o * stride - pre + extent - 1 <= size - 1
                                     for o in range(outputs))
                        assert _inner_window(size, extent, stride, pre, outputs) == inside


def _order(ndim, last):
    """The memory order of logical axes (N, C, [D,] H, W): channels last or first."""
    return (0,) + tuple(range(2, ndim)) + (1,) if last else tuple(range(ndim))


def _array(rng, dims, dtype, last, fill=None):
    order = _order(len(dims), last)
    shape = [dims[a] for a in order]
    phys = (np.full(shape, fill, np_dtype(dtype)) if fill is not None
            else rng.uniform(-1, 1, shape).astype(np_dtype(dtype)))
    return phys.transpose(np.argsort(order))


class _AtGuardPage:
    """A copy of ``a`` (its memory order ``order``) whose last byte is followed by a
    PROT_NONE page."""

    def __init__(self, a, order):
        page = mmap.PAGESIZE
        phys = np.ascontiguousarray(a.transpose(order))
        pages = -(-phys.nbytes // page)
        self._map = mmap.mmap(-1, (pages + 1) * page)
        base = np.frombuffer(self._map, np.uint8)
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._guard = base.ctypes.data + pages * page
        assert self._libc.mprotect(ctypes.c_void_p(self._guard), page, 0) == 0
        start = pages * page - phys.nbytes
        mem = base[start:start + phys.nbytes].view(phys.dtype).reshape(phys.shape)
        mem[...] = phys
        self.array = mem.transpose(np.argsort(order))
        del base

    def close(self):
        self.array = None
        self._libc.mprotect(ctypes.c_void_p(self._guard), mmap.PAGESIZE, 3)


@pytest.mark.parametrize("xd, wd, pre, post, stride, dtype, layout",
                         [c + (None,) * (7 - len(c)) for c in CASES])
def test_wgrad_with_padded_windows_is_exact_on_every_candidate(device, xd, wd, pre, post,
                                                               stride, dtype, layout):
    require(ONEDNN)
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    nsp = len(xd) - 2
    layout = layout or ("NHWC" if nsp == 2 else "NDHWC")
    last = layout in ("NHWC", "NDHWC")
    yd = tuple(ref.conv_out_dims(xd, wd, pre, post, stride, (1,) * nsp))
    assert min(yd[2:]) >= 1
    g = hd.Graph(name="wgrad_padded_windows", io_data_type=dtype)
    dy = g.tensor(dims=yd, layout=layout, name="dy")
    x = g.tensor(dims=xd, layout=layout, name="x")
    dw = g.conv_wgrad(dy, x, dw_dims=wd, pre_padding=pre, post_padding=post, stride=stride)
    dw.set_output(True).set_name("dw").set_strides(hd.strides_for(wd, layout))
    rng = np.random.default_rng(0)
    x_at_guard = _AtGuardPage(_array(rng, xd, dtype, last), _order(len(xd), last))
    try:
        arrays = {"dy": _array(rng, yd, dtype, last), "x": x_at_guard.array}
        want = ref.conv_wgrad(arrays["dy"], arrays["x"], wd, pre, post, stride, (1,) * nsp)
        limits = wgrad_tol(dtype, math.prod(yd) // yd[1], 1.0, 1.0)
        plan = device.build_sync(g)
        assert (plan.engine.name == ONEDNN) == (wd[:2] != (1, 1)), plan.engine.name
        if plan.engine.name != ONEDNN:
            # declined: it says why, and CPU_ENGINE is exact
            assert any(name == ONEDNN and "along HW lies inside x" in str(why)
                       for name, why in plan.declined), plan.declined
        match = plan._pplan.match

        def checked_run(run, size, what):
            arrays["dw"] = _array(None, wd, dtype, last, fill=np.nan)
            bufs = {role: arrays[t.name] for role, t in match.tensors.items()
                    if not t.is_virtual}
            run(bufs, np.full(size, 0xFF, np.uint8) if size else None)   # NaN bytes
            assert_close(arrays["dw"], want, *limits, what)

        checked_run(lambda b, ws: plan._pplan.run(b, ws), plan._pplan.workspace_size,
                    f"default {plan.engine.name} {plan.algorithm}")
        if plan.engine.name != ONEDNN:
            return
        conv = Conv(match)
        assert all(c.name.startswith("x64:gemm") for c in conv.candidates()), \
            [c.name for c in conv.candidates()]
        for cand in conv.candidates():
            _, pd, _, variant = conv.impls[cand.id]
            program, spec = conv.program(pd, variant=variant)
            try:
                checked_run(lambda b, ws: program.run(tuple(b[r] for r in spec.roles), ws),
                            program.workspace_size, f"candidate {cand.name}")
            finally:
                program.close()
    finally:
        x_at_guard.close()
