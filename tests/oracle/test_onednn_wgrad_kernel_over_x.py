"""Weight gradients whose dilated kernel spans more than x along an axis (a 3-tap kernel
over a 1-pixel-wide image, 5 taps over 4 depth planes): the default plan and every
oneDNN candidate left are exact against float64, write every dw element, read no
workspace byte they did not write, and read nothing past the end of x.

oneDNN 3.2's bf16 jit weight gradient (``jit_bf16:avx512_core_bf16``) read workspace
bytes it had not written there (dw followed whatever the workspace held: NaN after a
NaN-filled one), and its float32 jit one (``jit:avx512_core``), 3-D and grouped, left dw
elements unwritten and read past the end of x (a segfault where x ends at a PROT_NONE
page). Such problems keep only the GEMM convolution (``Conv._left_out``), and where it
is not offered the engine declines to ``CPU_ENGINE``. The geometries are a break-it
helper's and a fuzz campaign's over every candidate.

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

# (x dims, dw dims, pre padding, post padding, stride, dtype); groups = x.C // dw.C
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
    # one channel to one: the GEMM is left out too, so CPU_ENGINE runs it
    ((2, 1, 2, 2), (1, 1, 3, 3), (1, 1), (1, 1), (1, 1), "float32"),
]


def _channels_last(rng, dims, dtype):
    order = (0,) + tuple(range(2, len(dims))) + (1,)
    phys = rng.uniform(-1, 1, [dims[a] for a in order]).astype(np_dtype(dtype))
    return phys.transpose(np.argsort(order))


class _AtGuardPage:
    """A channels-last copy of ``a`` whose last byte is followed by a PROT_NONE page."""

    def __init__(self, a):
        page = mmap.PAGESIZE
        order = (0,) + tuple(range(2, a.ndim)) + (1,)
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


@pytest.mark.parametrize("xd, wd, pre, post, stride, dtype", CASES)
def test_wgrad_kernel_over_x_is_exact_on_every_candidate(device, xd, wd, pre, post, stride,
                                                         dtype):
    require(ONEDNN)
    import hipdnn_async as hd
    from hipdnn_async.providers.cpu.onednn._conv import Conv
    nsp = len(xd) - 2
    layout = "NHWC" if nsp == 2 else "NDHWC"
    yd = tuple(ref.conv_out_dims(xd, wd, pre, post, stride, (1,) * nsp))
    assert min(yd[2:]) >= 1
    assert any(r > n for r, n in zip(wd[2:], xd[2:]))     # the kernel spans more than x
    g = hd.Graph(name="wgrad_kernel_over_x", io_data_type=dtype)
    dy = g.tensor(dims=yd, layout=layout, name="dy")
    x = g.tensor(dims=xd, layout=layout, name="x")
    dw = g.conv_wgrad(dy, x, dw_dims=wd, pre_padding=pre, post_padding=post, stride=stride)
    dw.set_output(True).set_name("dw").set_strides(hd.strides_for(wd, layout))
    rng = np.random.default_rng(0)
    x_at_guard = _AtGuardPage(_channels_last(rng, xd, dtype))
    try:
        arrays = {"dy": _channels_last(rng, yd, dtype), "x": x_at_guard.array}
        want = ref.conv_wgrad(arrays["dy"], arrays["x"], wd, pre, post, stride, (1,) * nsp)
        limits = wgrad_tol(dtype, math.prod(yd) // yd[1], 1.0, 1.0)
        plan = device.build_sync(g)
        assert (plan.engine.name == ONEDNN) == (wd[:2] != (1, 1)), plan.engine.name
        if plan.engine.name != ONEDNN:
            # declined: it says why, and CPU_ENGINE is exact
            assert any(name == ONEDNN and "spans more than x along HW" in str(why)
                       for name, why in plan.declined), plan.declined
        match = plan._pplan.match

        def checked_run(run, size, what):
            out = np.full([wd[0]] + list(wd[2:]) + [wd[1]], np.nan, np_dtype(dtype))
            arrays["dw"] = out.transpose(np.argsort((0,) + tuple(range(2, len(wd))) + (1,)))
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
