"""Host cost of ``plan.submit`` on the fake CUDA runtime and cuDNN of tests/contract (no GPU).

The fakes (``tests/contract/fakes``, compiled with cc against NVIDIA's headers, fetched at
first use into the contract suite's cache) stand in for libcudart and libcudnn, so what
is timed is our Python and Cython path from ``plan.submit(vp)`` to the vendor calls, plus
the fakes' own cost per call (each logs a JSON record; measured here as ``fake call``
and printed, so the figures can be read net of it). Nothing runs on a GPU.

Prints, per case, the median over rounds of (wall time of ``--batch`` back-to-back
``plan.submit`` calls) / batch, in µs, and the same for a replay of a captured step
(``step.submit``). Cases: GpuArray buffers; objects with a precomputed
``__cuda_array_interface__`` dict (as CuPy's is C-level); objects that build the dict on
every access (as PyTorch's Python property does); int device pointers.

    python bench/bench_submit_path.py [--rounds 30] [--batch 20] [--profile]

``--profile`` prints the cProfile of the GpuArray case (top 25 by own time). The
``ours only`` rows repeat two cases with every vendor call of the launch and completion
made a no-op and the plan's enqueue a no-op: what remains is our own code. The targets
(issue 11) are for the H200: <= 10 µs per submit with GpuArrays, <= 12 µs with tensors;
this machine's figures are the part of it that is ours.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)          # this checkout's hipdnn_async, built in place


def _fake_env() -> dict:
    """Build (or find in the cache) the fakes; the loader's override variables."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from contract import _build, _headers
    headers = {s.name: _headers.ensure(s) for s in _headers.NVIDIA_SOURCES}
    return _build.build_nvidia(headers).env()


class CachedCai:
    """A device array whose ``__cuda_array_interface__`` is a stored dict (CuPy-like)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)
        self._arr = arr


class PropertyCai:
    """A device array whose ``__cuda_array_interface__`` is built on each access
    (PyTorch-like: a Python property)."""

    def __init__(self, arr):
        self._arr = arr
        self._shape, self._strides = arr.dims, tuple(s * arr.dtype.itemsize for s in arr.strides)
        self._ptr, self._typestr = arr.ptr, arr.dtype.str

    @property
    def __cuda_array_interface__(self):
        return {"typestr": self._typestr, "shape": tuple(self._shape),
                "strides": tuple(self._strides), "data": (self._ptr, False), "version": 3}


def _graph(hd):
    g = hd.Graph(name="submit_bench", io_data_type=hd.DataType.HALF,
                 intermediate_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 8, 4, 4), layout="NHWC", name="x")
    w = g.tensor(dims=(8, 8, 1, 1), layout="NHWC", name="w")
    b = g.tensor(dims=(1, 8, 1, 1), layout="NHWC", name="b")
    y = g.conv_fprop(x, w, padding=0)
    y = g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g, (x, w, b, y)


def _time_batches(fn, sync, rounds: int, batch: int) -> tuple[float, float]:
    """Median (wall µs, this thread's CPU µs) per call of ``batch`` back-to-back ``fn()``
    calls (then ``sync()``, not timed). CPU time is the steadier figure on a shared
    machine; the wall time includes waiting for the GIL held by the completion thread."""
    wall, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(batch):
            fn()
        cpu.append((time.thread_time() - c0) / batch * 1e6)
        wall.append((time.perf_counter() - t0) / batch * 1e6)
        sync()
    return statistics.median(wall), statistics.median(cpu)


class _FreeRuntime:
    """The loaded runtime with the calls of a launch and its completion made free (no-ops):
    what is left of a submission is our own code."""

    def __init__(self, rt):
        self._rt = rt

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def set_device(self, index):
        pass

    def event_record(self, event, stream):
        pass

    def event_synchronize(self, event):
        pass

    def stream_wait_event(self, stream, event):
        pass

    def graph_launch(self, graph_exec, stream):
        pass


def _ours_only(dev, plan):
    """Make the vendor side of ``dev``'s launches free (see _FreeRuntime); return undo."""
    backends = [s.backend for s in dev.streams]
    ctx = backends[0].context
    saved = [(be, be._rt) for be in backends], ctx.runtime, plan._pplan.__dict__.get("run")
    for be in backends:
        be._rt = _FreeRuntime(be._rt)
    ctx.runtime = _FreeRuntime(ctx.runtime)
    plan._pplan.run = lambda buffers, ws: None

    def undo():
        for be, rt in saved[0]:
            be._rt = rt
        ctx.runtime = saved[1]
        if saved[2] is None:
            del plan._pplan.run
        else:
            plan._pplan.run = saved[2]
    return undo


def _fake_call_us(ctl_lib, rounds: int = 2000) -> float:
    """µs of one cheap fake runtime call (cudaGetLastError: log record + return)."""
    f = ctl_lib.cudaGetLastError
    t0 = time.perf_counter()
    for _ in range(rounds):
        f()
    return (time.perf_counter() - t0) / rounds * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    os.environ.update(_fake_env())
    os.environ.setdefault("HIPDNN_ASYNC_PERFDB", ":memory:")
    import numpy as np
    import hipdnn_async as hd
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from contract._fakes import FakeControl

    ctl = FakeControl(os.environ["HIPDNN_ASYNC_CUDART"])
    ctl.set_delay_us(0)
    lib = ctypes.CDLL(os.environ["HIPDNN_ASYNC_CUDART"])
    g, (x, w, b, y) = _graph(hd)
    rows = []
    with hd.Device("cuda:0", streams=1, max_inflight=4 * args.batch) as dev:
        plan = dev.build_sync(g)
        arrs = {t: dev.empty(t.dims, t.data_type, strides=t.strides) for t in (x, w, b, y)}
        for a in arrs.values():
            a.copy_from(np.zeros(a.dims, a.dtype))
        cases = {"GpuArray": dict(arrs),
                 "CAI dict (CuPy-like)": {t: CachedCai(a) for t, a in arrs.items()},
                 "CAI property (PyTorch-like)": {t: PropertyCai(a) for t, a in arrs.items()},
                 "int pointers": {t: a.ptr for t, a in arrs.items()}}

        def sync():
            dev._pool.synchronize_blocking()
            ctl.clear()

        for name, vp in cases.items():
            plan.execute_sync(vp)         # warm
            us = _time_batches(lambda: plan.submit(vp), sync, args.rounds, args.batch)
            rows.append((f"plan.submit, {name}", us))
        with dev.capture() as step:
            plan.submit(cases["GpuArray"])
        step.replay_sync()
        rows.append(("step.submit (1 plan captured)",
                     _time_batches(step.submit, sync, args.rounds, args.batch)))
        step.close()
        with dev.capture() as step20:
            for _ in range(20):
                plan.submit(cases["GpuArray"])
        step20.replay_sync()
        w20, c20 = _time_batches(step20.submit, sync, args.rounds, args.batch)
        rows.append(("step.submit (20 plans), per plan", (w20 / 20, c20 / 20)))
        step20.close()
        undo = _ours_only(dev, plan)      # the same, with every vendor call free
        try:
            for name in ("GpuArray", "CAI property (PyTorch-like)"):
                vp = cases[name]
                rows.append((f"ours only: plan.submit, {name}",
                             _time_batches(lambda: plan.submit(vp), sync, args.rounds,
                                           args.batch)))
            for n_plans in (1, 20):       # captured under the free runtime: free launches
                with dev.capture() as st:
                    for _ in range(n_plans):
                        plan.submit(cases["GpuArray"])
                w, c = _time_batches(st.submit, sync, args.rounds, args.batch)
                rows.append((f"ours only: step.submit ({n_plans} plans), per plan",
                             (w / n_plans, c / n_plans)))
                st.close()
        finally:
            undo()
        sync()
        fake_us = _fake_call_us(lib)
        log = ctl.log()
        plan.submit(cases["GpuArray"]).result()
        calls = [r["fn"] for r in ctl.log()[len(log):] if r["rec"] == "call"]
        if args.profile:
            import cProfile
            import pstats
            vp = cases["GpuArray"]
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.rounds):
                for _ in range(args.batch):
                    plan.submit(vp)
                sync()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    print(f"hipdnn_async {hd.__version__}: plan {plan.pattern}, engine {plan.engine.name}, "
          f"{args.rounds} rounds x {args.batch} back-to-back submits (fake CUDA runtime + cuDNN)")
    print(f"  {'':<46s} {'wall':>8s} {'CPU':>8s}  (us per call, median)")
    for label, (wall, cpu) in rows:
        print(f"  {label:<46s} {wall:8.2f} {cpu:8.2f}")
    print(f"  a fake runtime call costs {fake_us:.2f} us (its log record); calls per submit: "
          f"{len(calls)} ({', '.join(calls)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
