"""Completion-batch scenarios for the worker process (issue 11 item 2): how the GPU stream
backend observes completion when nobody waits, when a thread waits, when a loop awaits,
when the stream is full. Public API only (plus the backend's EVENT_EVERY), on the fake
"cuda:0"; each returns the call log with marks and what the handles reported."""
from __future__ import annotations

import asyncio
import gc
import time
import weakref

import numpy as np

from ._scenarios import control

__all__ = ["batches_case"]

N, C, HW = 1, 4, 5


class _Buf:
    """A ``__cuda_array_interface__`` object over a GpuArray that can be weakly referenced
    (to see when the queue lets go of it)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)
        self._arr = arr


def batches_case(n_submits: int = 40, seed: int = 5) -> dict:
    """Submissions that nobody waits for, then a ``result()``, an ``await``, a callback, a
    full stream (``max_inflight=4``), and the outputs against each other.

    Returns
    -------
    dict
        ``log`` with marks "submits", "polled", "result", "await", "callback", "full",
        "end"; ``every`` (EVENT_EVERY); ``done_before`` / ``done_after`` (handles done
        right after the submits / after polling); ``kept_alive`` (the buffer of a
        finished submission still referenced by the queue); ``callback_ran``,
        ``full_done`` (all of the full stream's handles finished), ``y`` (last output),
        ``x``, ``w`` (inputs), ``await_error``.
    """
    import hipdnn_async as hd
    from hipdnn_async.queues import _gpu_backend
    ctl = control()
    rng = np.random.default_rng(seed)
    out: dict = {"every": _gpu_backend.EVENT_EVERY}
    g = hd.Graph(name="batches")
    x = g.tensor(dims=(N, C, HW, HW), name="x")
    w = g.tensor(dims=(C, C, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    hx = rng.uniform(-1, 1, x.dims).astype(np.float32)
    hw = rng.uniform(-1, 1, w.dims).astype(np.float32)
    out["x"], out["w"] = hx, hw
    with hd.Device("cuda:0", streams=1, max_inflight=4 * n_submits) as dev:
        plan = dev.build_sync(g)
        ax, aw, ay = (dev.empty(t.dims, np.float32) for t in (x, w, y))
        ax.copy_from(hx)
        aw.copy_from(hw)
        vp = {"x": ax, "w": aw, "y": ay}
        plan.execute_sync(vp)
        ctl.clear()
        ctl.mark("submits")
        handles = [plan.submit(vp) for _ in range(n_submits)]
        ctl.mark("polled")
        out["done_before"] = sum(h._state == 2 for h in handles)
        deadline = time.monotonic() + 30
        while not all(h.done() for h in handles) and time.monotonic() < deadline:
            time.sleep(0.01)
        out["done_after"] = sum(h.done() for h in handles)
        # a finished submission lets go of its buffers
        bx = _Buf(ax)
        ref = weakref.ref(bx)
        h = plan.submit({"x": bx, "w": aw, "y": ay})
        del bx
        ctl.mark("result")
        h.result()
        gc.collect()
        out["kept_alive"] = ref() is not None
        ctl.mark("await")

        async def awaited():
            hs = [plan.submit(vp) for _ in range(3)]
            for hh in hs:
                await hh
            return [hh.done() for hh in hs]
        try:
            out["awaited_done"] = asyncio.run(awaited())
            out["await_error"] = None
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out["await_error"] = repr(exc)
        ctl.mark("callback")
        ran = []
        plan.submit(vp).add_done_callback(lambda c: ran.append(c.exception()))
        deadline = time.monotonic() + 30
        while not ran and time.monotonic() < deadline:
            time.sleep(0.01)
        out["callback_ran"] = ran[:1] == [None]
        ay_host = ay.to_numpy_sync()
        out["y"] = ay_host
    with hd.Device("cuda:0", streams=1, max_inflight=4) as dev:
        plan = dev.build_sync(g)
        ax, aw, ay = (dev.empty(t.dims, np.float32) for t in (x, w, y))
        ax.copy_from(hx)
        aw.copy_from(hw)
        vp = {"x": ax, "w": aw, "y": ay}
        ctl.mark("full")
        hs = [plan.submit(vp) for _ in range(12)]    # 8 of them wait host-side
        deadline = time.monotonic() + 60
        while not all(h.done() for h in hs) and time.monotonic() < deadline:
            time.sleep(0.01)
        out["full_done"] = [h.done() for h in hs]
        out["full_errors"] = [repr(h.exception(0)) for h in hs if h.done() and h.exception(0)]
        out["y_full"] = ay.to_numpy_sync()
        ctl.mark("end")
    out["log"] = ctl.log()
    out["violations"] = ctl.violations()
    return out
