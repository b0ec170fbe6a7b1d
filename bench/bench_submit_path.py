"""Host cost of ``plan.submit``, ours against PyTorch's conv launch, with a breakdown.

One run prints, in µs of host time per call (median over rounds of ``--batch``
back-to-back calls, ``time.perf_counter_ns``; the rounds of the submit cases and of the
torch anchors are interleaved, so a slow phase of the machine falls on all of them):

- ``plan.submit`` with GpuArrays, torch tensors, CuPy arrays and int pointers, and a
  captured step's replay (1 plan, 20 plans);
- the breakdown of one steady-state submission: *bind* (the binding cache hit), *C launch*
  (the bound work-item function on the stream: ``GraphLaunch`` -> ``cudnnBackendExecute``,
  or the legacy engine's call), *queue* (the rest of ``submit``: the handle, the stream's
  bookkeeping, ``cudaSetDevice``, the batch's event record), and *completion* (finishing
  the item once the GPU is done: event query, slot, wake-up), amortized per item;
- with ``--runtime fake``, the same submissions and a one-plan step's replay with the
  runtime calls of a launch and its completion made no-ops (``_FreeRuntime``): our own
  code alone (with ``HIPDNN_ASYNC_LAUNCH_GRAPHS=0``: otherwise a bound pack's launch is
  the fake's ``cudaGraphLaunch``, called from C and not through ``_FreeRuntime``, and
  its cost is in the submit rows);
- Python allocations per submission (``sys.getallocatedblocks`` delta, the handle included);
- the anchors where torch and a GPU are present: ``F.conv2d`` launch and ``torch.mm``.

Runtimes: ``--runtime real`` on a GPU machine (the default when a CUDA device is there);
``--runtime fake`` (the default elsewhere): the contract suite's fake CUDA runtime and
cuDNN (tests/contract, compiled against NVIDIA's headers, fetched at first use), with
the plan's provider plan replaced by a cuDNN *graph* plan over the unit tests' fake
backend API (tests/unit/runtime/fakes/fake_cudnn_backend.c: ``cudnnBackendExecute``
checks the pack and returns), so what is timed is our whole path down to the vendor call,
and the vendor calls cost the fakes' own time (printed: each fake runtime call writes a
log record). Fake-runtime figures are this machine's, not the GPU's.

    python bench/bench_submit_path.py [--runtime auto|real|fake] [--rounds 50]
        [--batch 200] [--profile]

Targets (issue 11 item 2, on the H200): submit <= 10 µs with GpuArrays, <= 12 µs with
torch/CuPy tensors (PyTorch 18.7 µs per conv launch in the issue's run).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)          # this checkout's hipdnn_async, built in place
sys.path.insert(0, HERE)
from _bench_capture import interleaved  # noqa: E402 - bench/'s shared round interleaving


# ---------------------------------------------------------------------- the fake runtime
def _fake_env() -> dict:
    """Build (or find in the cache) the contract fakes; the loader's override variables."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from contract import _build, _headers
    headers = {s.name: _headers.ensure(s) for s in _headers.NVIDIA_SOURCES}
    return _build.build_nvidia(headers).env()


# ---------------------------------------------------------------------- buffers
class PropertyCai:
    """A device array whose ``__cuda_array_interface__`` is a property building the dict
    on every access, with ``data_ptr()`` / ``stride()`` (PyTorch-like, for the fake)."""

    def __init__(self, arr):
        self._arr = arr
        self.shape = tuple(arr.dims)
        self._strides = tuple(arr.strides)
        self._ptr, self.dtype = arr.ptr, arr.dtype

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides

    @property
    def __cuda_array_interface__(self):
        return {"typestr": self.dtype.str, "shape": self.shape,
                "strides": tuple(s * self.dtype.itemsize for s in self._strides),
                "data": (self._ptr, False), "version": 3}


class CachedCai:
    """A device array with a stored ``__cuda_array_interface__`` and CuPy's ``data.ptr``
    (CuPy-like, for the fake)."""

    def __init__(self, arr):
        self.__cuda_array_interface__ = dict(arr.__cuda_array_interface__)
        self.data = SimpleNamespace(ptr=arr.ptr)
        self.shape = tuple(arr.dims)
        self.strides = self.__cuda_array_interface__["strides"]
        self.dtype = arr.dtype
        self._arr = arr


def _graph(hd):
    """The issue's overhead case: a tiny fp32 NCHW 3x3 conv (bench_gpu.py's 'overhead')."""
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="submit_bench", io_data_type=f32, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(1, 8, 8, 8), name="x")
    w = g.tensor(dims=(8, 8, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=(1, 1)).set_output(True).set_name("y")
    return g, (x, w, y)


class _FreeRuntime:
    """The stream's runtime with the calls of a launch and its completion made no-ops
    (``--runtime fake`` only): what is left of a submission is our own code."""

    def __init__(self, rt):
        self._rt = rt

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def set_device(self, index):
        pass

    def event_record(self, event, stream):
        pass

    def event_query(self, event):
        return True

    def event_synchronize(self, event):
        pass

    def graph_launch(self, graph_exec, stream):    # a step captured under this runtime
        pass


# ---------------------------------------------------------------------- timing
def _per_call_us(fn, after, rounds: int, batch: int) -> tuple[float, float]:
    """Medians over ``rounds`` of (wall ns, this thread's CPU ns) of ``batch`` back-to-back
    ``fn()`` / batch, in µs; ``after()`` (untimed) runs after each round. The CPU time
    is the steadier figure on a shared machine (it leaves out time descheduled)."""
    wall, cpu = [], []
    pc, tt = time.perf_counter_ns, time.thread_time_ns
    for _ in range(rounds):
        t0, c0 = pc(), tt()
        for _ in range(batch):
            fn()
        c1, t1 = tt(), pc()
        wall.append((t1 - t0) / batch / 1e3)
        cpu.append((c1 - c0) / batch / 1e3)
        after()
    return statistics.median(wall), statistics.median(cpu)


def _interleaved_us(cases: dict, rounds: int, batch: int) -> dict:
    """``_per_call_us`` of every ``name -> (fn, after)``, rounds interleaved
    (``_bench_capture.interleaved``)."""
    return interleaved(cases, rounds, lambda fn, after: _per_call_us(fn, after, 1, batch))


def _allocations(fn, n: int = 2000) -> float:
    """Python memory blocks still allocated per call after ``n`` calls (the handles kept)."""
    import gc
    keep = []
    gc.collect()
    gc.disable()
    try:
        b0 = sys.getallocatedblocks()
        for _ in range(n):
            keep.append(fn())
        b1 = sys.getallocatedblocks()
    finally:
        gc.enable()
    return (b1 - b0) / n - 8 / 1000        # the list's own growth is negligible


def _fake_call_us(path: str, rounds: int = 5000) -> float:
    """µs of one cheap fake runtime call (cudaGetLastError: a log record and a return)."""
    f = ctypes.CDLL(path).cudaGetLastError
    t0 = time.perf_counter_ns()
    for _ in range(rounds):
        f()
    return (time.perf_counter_ns() - t0) / rounds / 1e3


def _torch_anchor(torch):
    """The anchors' cases for ``_interleaved_us``: an F.conv2d launch of the same conv
    and a torch.mm of 64x64 (torch's own), each round followed by a synchronize."""
    conv = torch.nn.functional.conv2d
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    a = torch.randn(64, 64, device="cuda")
    for _ in range(50):
        conv(x, w, padding=1)
        torch.mm(a, a)
    torch.cuda.synchronize()
    return {"torch F.conv2d launch": (lambda: conv(x, w, padding=1), torch.cuda.synchronize),
            "torch.mm 64x64 launch": (lambda: torch.mm(a, a), torch.cuda.synchronize)}


# ---------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", choices=("auto", "real", "fake"), default="auto")
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="cProfile of the GpuArray case")
    args = ap.parse_args(argv)
    runtime = args.runtime
    if runtime == "auto":     # decided before anything loads a runtime
        runtime = "real" if os.path.exists("/dev/nvidia0") else "fake"
    be = None
    if runtime == "fake":
        os.environ.update(_fake_env())
        os.environ.setdefault("HIPDNN_ASYNC_PERFDB", ":memory:")
        from hipdnn_async.runtime import _cudnn_backend as be
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from contract._launch_graph_scenarios import (build_fake_backend,
                                                      graph_plan_over_fake_backend)
        be.load(build_fake_backend(tempfile.mkdtemp(prefix="hipdnn_bench_")))  # first
    import numpy as np
    import hipdnn_async as hd
    torch = cupy = None
    if runtime == "real":
        try:
            import torch
            if not torch.cuda.is_available():
                torch = None
        except ImportError:
            torch = None
        try:
            import cupy
        except ImportError:
            cupy = None
    ctl = None
    if runtime == "fake":
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from contract._fakes import FakeControl
        ctl = FakeControl(os.environ["HIPDNN_ASYNC_CUDART"])
        ctl.set_delay_us(0)

    g, (x, w, y) = _graph(hd)
    rounds, batch = args.rounds, args.batch
    rows, notes = [], []
    with hd.Device("cuda:0", streams=1, max_inflight=batch + 64) as dev:
        plan = dev.build_sync(g)
        engine = plan.engine.name
        if be is not None:
            graph_plan_over_fake_backend(plan, be)
            engine += " replaced by a cuDNN graph plan over the fake backend API"
        arrs = {t: dev.empty(t.dims, t.data_type) for t in (x, w, y)}
        for a in arrs.values():
            a.copy_from(np.zeros(a.dims, a.dtype))
        packs = {"GpuArray": {"x": arrs[x], "w": arrs[w], "y": arrs[y]}}
        if torch is not None:
            tt = {k: torch.zeros(tuple(t.dims), device="cuda") for k, t in
                  (("x", x), ("w", w), ("y", y))}
            packs["torch tensors"] = tt
        else:
            packs["torch-like (fake)"] = {k: PropertyCai(arrs[t]) for k, t in
                                          (("x", x), ("w", w), ("y", y))}
        if cupy is not None:
            packs["CuPy arrays"] = {k: cupy.zeros(tuple(t.dims), dtype=cupy.float32)
                                    for k, t in (("x", x), ("w", w), ("y", y))}
        elif torch is None:
            packs["CuPy-like (fake)"] = {k: CachedCai(arrs[t]) for k, t in
                                         (("x", x), ("w", w), ("y", y))}
        packs["int pointers"] = {k: arrs[t].ptr for k, t in (("x", x), ("w", w), ("y", y))}
        stream = dev.streams[0]
        be_stream = stream.backend
        rt = be_stream._rt

        def sync():
            dev._pool.synchronize_blocking()
            if ctl is not None:
                ctl.clear()

        cases = {}
        for name, vp in packs.items():
            plan.execute_sync(vp, stream=0)          # bind once
            _per_call_us(lambda vp=vp: plan.submit(vp, stream=0), sync, 3, batch)    # warm
            cases[f"plan.submit, {name}"] = (lambda vp=vp: plan.submit(vp, stream=0), sync)
        anchors = _torch_anchor(torch) if torch is not None else {}
        timed = _interleaved_us({**cases, **anchors}, rounds, batch)
        rows += [(name, timed[name]) for name in cases]
        vp = packs["GpuArray"]
        # ---- breakdown of the GpuArray submission
        bindings = plan._bindings
        bind_us = _per_call_us(lambda: bindings.get(vp, None), lambda: None, rounds, batch)
        fn = bindings.get(vp, None).fn
        lc = be_stream.launch_context

        def c_launch_round():
            lc.enter()
            try:
                for _ in range(batch):
                    fn()
            finally:
                lc.exit()
        c_wall, c_cpu = [], []
        for _ in range(rounds):
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            with be_stream._launch_lock:
                c_launch_round()
            c_cpu.append((time.thread_time_ns() - c0) / batch / 1e3)
            c_wall.append((time.perf_counter_ns() - t0) / batch / 1e3)
            sync()
        c_us = statistics.median(c_wall), statistics.median(c_cpu)
        ev = rt.event_create()
        rec_us = _per_call_us(lambda: rt.event_record(ev, be_stream.stream),
                              lambda: rt.stream_synchronize(be_stream.stream), rounds, batch)
        rt.event_destroy(ev)
        d_wall, d_cpu = [], []
        for _ in range(rounds):
            for _ in range(batch):
                plan.submit(vp, stream=0)
            rt.stream_synchronize(be_stream.stream)    # the GPU is done; what is left is ours
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            dev._pool.synchronize_blocking()
            d_cpu.append((time.thread_time_ns() - c0) / batch / 1e3)
            d_wall.append((time.perf_counter_ns() - t0) / batch / 1e3)
            if ctl is not None:
                ctl.clear()
        done_us = statistics.median(d_wall), statistics.median(d_cpu)
        submit_us = rows[0][1]
        rows += [("  bind (binding cache hit)", bind_us),
                 ("  C launch (bound work item -> vendor call)", c_us),
                 ("  queue (handle, stream, set_device, 1/16 event)",
                  tuple(a - b - c for a, b, c in zip(submit_us, bind_us, c_us))),
                 ("  completion per item (GPU done; amortized)", done_us),
                 ("  (cudaEventRecord alone)", rec_us)]
        allocs = _allocations(lambda: plan.submit(vp, stream=0), n=min(batch, 2000))
        sync()
        if ctl is not None:   # the same with the fake runtime's calls free: ours alone
            be_stream._rt = _FreeRuntime(rt)
            try:
                for name in ("GpuArray", "torch-like (fake)"):
                    p = packs[name]
                    rows.append((f"ours only (runtime calls free): submit, {name}",
                                 _per_call_us(lambda: plan.submit(p, stream=0), sync, rounds,
                                              batch)))
            finally:
                be_stream._rt = rt
        # ---- replays of captured steps
        for n_plans in (1, 20):
            with dev.capture(stream=0) as step:
                for _ in range(n_plans):
                    plan.submit(vp)
            step.replay_sync()
            per = _per_call_us(step.submit, sync, rounds, max(1, batch // 4))
            rows.append((f"step.submit ({n_plans} plan{'s' if n_plans > 1 else ''}), per plan",
                         tuple(v / n_plans for v in per)))
            step.close()
        if ctl is not None:   # a step captured under the free runtime: its graph launch free
            be_stream._rt = _FreeRuntime(rt)
            try:
                with dev.capture(stream=0) as step:
                    plan.submit(vp)
                step.replay_sync()
                rows.append(("ours only (runtime calls free): step.submit (1 plan)",
                             _per_call_us(step.submit, sync, rounds, batch)))
                step.close()
            finally:
                be_stream._rt = rt
        if ctl is not None:
            sync()
            log0 = len(ctl.log())
            plan.submit(vp, stream=0).result()
            calls = [r["fn"] for r in ctl.log()[log0:] if r["rec"] == "call"]
            notes.append(f"a fake runtime call costs {_fake_call_us(os.environ['HIPDNN_ASYNC_CUDART']):.2f} us "
                         f"(its log record); one submit + result() made {len(calls)} "
                         f"runtime calls: {', '.join(calls)}")
        if args.profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(rounds):
                for _ in range(batch):
                    plan.submit(vp, stream=0)
                sync()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    rows += [(name, timed[name]) for name in anchors]
    where = ("FAKE runtime (tests/contract fakes + fake backend API; this machine's CPU, "
             "not a GPU's)" if runtime == "fake" else
             f"{dev.provider.context.name if hasattr(dev.provider, 'context') else 'GPU'}")
    print(f"hipdnn_async {hd.__version__} on {where}")
    print(f"plan {plan.pattern}, engine {engine}; {rounds} rounds x {batch} back-to-back calls")
    if torch is not None:
        print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print(f"  {'':<56s} {'wall':>8s} {'CPU':>8s}  (us per call, medians)")
    for label, (wall, cpu) in rows:
        print(f"  {label:<56s} {wall:8.2f} {cpu:8.2f}")
    print(f"  Python blocks allocated per submit (handle incl.): {allocs:.1f}")
    if torch is not None:
        t = {k: v[0] for k, v in rows}
        print(f"  wall-time ratios: submit(GpuArray) / torch conv launch "
              f"{t['plan.submit, GpuArray'] / t['torch F.conv2d launch']:.2f}; "
              f"submit(torch tensors) / torch conv launch "
              f"{t['plan.submit, torch tensors'] / t['torch F.conv2d launch']:.2f}")
    for n in notes:
        print("  " + n)
    if runtime == "fake":
        print("  (fake-runtime numbers: the vendor calls cost the fakes' time, not a GPU's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
