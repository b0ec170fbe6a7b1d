"""Scenarios of the cuDNN graph engine's per-binding CUDA graphs (``GraphLaunch``'s
``graph_after``; issue 11 item 2) for the worker process (``_worker.py``): a plan whose
provider plan is a ``GraphPlan`` over the fake backend API (tests/unit/runtime/fakes/
fake_cudnn_backend.c: ``cudnnBackendExecute`` counts and returns), on the fake CUDA
runtime, whose stream capture and graph calls are logged. The fake backend enqueues
nothing, so these scenarios check the calls made, not data (tests/gpu does that).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np

from ._fakes import calls
from ._scenarios import control

__all__ = ["build_fake_backend", "graph_plan_over_fake_backend", "launch_graph_case",
           "launch_frames_case", "stream_open_frames_case", "collected_in_a_cycle_case", "copy_during_capture_case", "steady_state_failure_case"]

_FAKE_BACKEND_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "unit", "runtime", "fakes", "fake_cudnn_backend.c")


def build_fake_backend(out_dir: str) -> str:
    """Compile the fake cuDNN backend API (tests/unit/runtime/fakes/fake_cudnn_backend.c)
    into ``out_dir``; its path. RuntimeError without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the fake cuDNN backend API needs a C compiler (cc or gcc)")
    out = os.path.join(out_dir, "libfake_cudnn_backend.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", out, _FAKE_BACKEND_SRC], check=True)
    return out


def graph_plan_over_fake_backend(plan, be) -> None:
    """Put a cuDNN graph plan (``GraphPlan``: the real launcher and ``GraphLaunch``) over
    the fake backend API under ``plan``: its roles become the variant pack's uids."""
    from hipdnn_async.providers.cudnn._graph_plan import GraphPlan
    pack = [SimpleNamespace(uid=i + 1, binding=("role", role), name=t.name)
            for i, (role, t) in enumerate(plan._roles)]
    desc = be.Descriptor(be.BACKEND_EXECUTION_PLAN_DESCRIPTOR)
    plan._pplan = GraphPlan(be, SimpleNamespace(pack=pack, segments=()), desc, 0,
                            "fake backend plan")
    plan._bindings.clear()


def _backend(backend_lib: str):
    """The backend binding over the fake backend API (loaded before any plan is built:
    one backend table a process)."""
    from hipdnn_async.runtime import _cudnn_backend as be
    if be.loaded_path() != backend_lib:
        be.load(backend_lib)
    return be


def _fake_backend_conv(dev, be, name: str):
    """(plan, variant pack) of a small conv fprop on ``dev`` whose provider plan is a
    GraphPlan over the fake backend API; the pack's buffers are fresh device arrays."""
    import hipdnn_async as hd
    g = hd.Graph(name=name)
    x = g.tensor(dims=(2, 4, 6, 6), name="x")
    w = g.tensor(dims=(4, 4, 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    plan = dev.build_sync(g)
    graph_plan_over_fake_backend(plan, be)
    return plan, {t: dev.empty(t.dims, np.float32) for t in (x, w, y)}


def _counts(lib) -> list:
    """The fake backend's creates, destroys, finalizes, executes, live variant packs."""
    a = (ctypes.c_long * 5)()
    lib.fake_counts(a)
    return [int(v) for v in a]


def _executes(lib) -> int:
    return _counts(lib)[3]


def _stream_log(lib) -> list:
    """The fake backend's [kind (1 cudnnSetStream, 2 execute), handle, stream] entries
    since the last call."""
    a = (ctypes.c_uint64 * (3 * 256))()
    n = lib.fake_stream_log(a, 256)
    return [[int(a[3 * i]), int(a[3 * i + 1]), int(a[3 * i + 2])] for i in range(n)]


def launch_graph_case(backend_lib: str, *, submits: int = 6, inject: tuple | None = None,
                      env_off: bool = False, step: bool = False, streams: int = 1,
                      spec: str = "cuda:0") -> dict:
    """``submits`` submissions of one plan with the same buffers, each awaited.

    ``inject``: (runtime function, status) made to fail once, at its first call;
    ``env_off``: ``$HIPDNN_ASYNC_LAUNCH_GRAPHS=0``; ``step``: afterwards, a capture block
    records one more submission and the step is replayed once (marks "capture", "replay");
    ``streams`` > 1: a device of that many streams, the submissions left to its pick
    (round robin between idle streams); ``spec``: the device (on another than cuda:0 the
    submitting thread keeps device 0 current).

    Returns
    -------
    dict
        ``log`` (marks "start", "end", ...), ``executes`` (fake cudnnBackendExecute calls
        between "start" and "end"), ``streams`` (the fake backend's stream log there), ``executions`` / ``graph_launches`` of the binding's
        ``GraphLaunch``, ``plan_stats`` executions, ``step_executes``.
    """
    be = _backend(backend_lib)
    import hipdnn_async as hd
    lib = ctypes.CDLL(backend_lib)
    ctl = control()
    if env_off:
        os.environ["HIPDNN_ASYNC_LAUNCH_GRAPHS"] = "0"
    try:
        with hd.Device(spec, streams=streams) as dev:
            plan, vp = _fake_backend_conv(dev, be, "launch_graph")
            plan.execute_sync(vp, stream=0)           # binds (one direct execution)
            ctl.clear()
            if inject is not None:
                ctl.inject(inject[0], inject[1])
            e0 = _executes(lib)
            _stream_log(lib)
            ctl.mark("start")
            on = 0 if streams == 1 else None
            for _ in range(submits):
                plan.submit(vp, stream=on).result()
            ctl.mark("end")
            out = {"executes": _executes(lib) - e0, "streams": _stream_log(lib)}
            ctl.clear_injections()
            launch = plan._bindings._entries[0].fn       # the binding's GraphLaunch
            out["step_executes"] = None
            if step:
                e1 = _executes(lib)
                ctl.mark("capture")
                with dev.capture(stream=0) as st:
                    plan.submit(vp)
                ctl.mark("replay")
                st.replay_sync()
                ctl.mark("replayed")
                out["step_executes"] = _executes(lib) - e1
                st.close()
            out["plan_stats"] = sum(s["executions"] for s in dev.plan_stats().values())
            out["launch"] = [launch.executions, launch.graph_launches]
            out["log"] = ctl.log()
            return out
    finally:
        os.environ.pop("HIPDNN_ASYNC_LAUNCH_GRAPHS", None)


def launch_frames_case(backend_lib: str, *, streams: int = 3, submits: int = 6) -> dict:
    """The Python functions entered while a ``GraphLaunch`` (a GraphPlan's binding) runs
    as a stream's work item: ``submits`` submissions left to a device of ``streams``
    streams (each new stream builds its variant pack inside the launch), every thread
    profiled while a launch context is entered on it (``runtime.current_launch()``).

    Returns
    -------
    dict
        ``frames``: sorted ``"<path in the package>:<function>"`` of every Python function
        entered during a launch; ``launch``: the binding's executions.
    """
    import sys
    import threading

    be = _backend(backend_lib)
    import hipdnn_async as hd
    from hipdnn_async.runtime import current_launch
    root = os.path.dirname(os.path.abspath(hd.__file__)) + os.sep
    seen, recording = set(), []

    def profile(frame, event, arg):
        if recording and event == "call" and current_launch() is not None:
            path = frame.f_code.co_filename
            if path.startswith(root):
                seen.add(f"{path[len(root):]}:{frame.f_code.co_name}")

    # every thread: the submitting one (a submission launches inline when it can) and,
    # set before the device opens, its streams' launching threads
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with hd.Device("cuda:0", streams=streams) as dev:
            plan, vp = _fake_backend_conv(dev, be, "launch_frames")
            plan.execute_sync(vp, stream=0)         # binds: the binding's GraphLaunch
            recording.append(True)                  # the build's trial runs are not launches
            for _ in range(submits):
                plan.submit(vp).result()
            return {"frames": sorted(seen), "launch": plan._bindings._entries[0].fn.executions}
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def stream_open_frames_case(*, streams: int = 3, spec: str = "cuda:0") -> dict:
    """The provider functions that runtime or queue code enters while a device's streams
    are prepared (issue 23): every thread profiled while a device ``spec`` of ``streams``
    streams opens, a conv fprop is built on it (its workspace reserved on every stream;
    on MIOpen its solution compiled for every stream's handle), a second device on the
    same GPU opens two streams after that build (mark "late"), and both close. A launch
    is left out (``runtime.current_launch()`` set: ``launch_frames_case`` checks those),
    and so is whatever a provider calls itself.

    Returns
    -------
    dict
        ``upcalls``: sorted ``"<provider function> <- <runtime/queues function>"`` for every
        function of ``providers/`` entered with a frame of ``runtime/`` or ``queues/``
        below it on the stack (the nearest such frame); ``opened``: the streams opened;
        ``runtime_frames``: how many runtime/queues functions were seen at all (the check
        would pass vacuously at 0); ``log``: the fakes' call log.
    """
    import sys
    import threading

    import hipdnn_async as hd
    from hipdnn_async.runtime import current_launch
    root = os.path.dirname(os.path.abspath(hd.__file__)) + os.sep
    upcalls, seen = set(), [0]
    ctl = control(spec)
    ctl.clear()

    def where(frame):
        path = frame.f_code.co_filename
        return path[len(root):] if path.startswith(root) else None

    def profile(frame, event, arg):
        if event != "call" or current_launch() is not None:
            return
        here = where(frame)
        if here is None:
            return
        if here.startswith(("runtime", "queues")):
            seen[0] += 1
        if not here.startswith("providers"):
            return
        below = frame.f_back
        while below is not None:
            there = where(below)
            if there is not None and there.startswith(("runtime", "queues")):
                upcalls.add(f"{here}:{frame.f_code.co_name} <- "
                            f"{there}:{below.f_code.co_name}")
                return
            below = below.f_back

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with hd.Device(spec, streams=streams) as dev:
            g = hd.Graph(name="stream_open")
            x = g.tensor(dims=(2, 4, 6, 6), name="x")
            w = g.tensor(dims=(4, 4, 3, 3), name="w")
            g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
            dev.build_sync(g)
            ctl.mark("late")
            with hd.Device(spec, streams=2) as late:
                opened = len(dev.streams) + len(late.streams)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return {"upcalls": sorted(upcalls), "opened": opened, "runtime_frames": seen[0],
            "log": ctl.log()}


def collected_in_a_cycle_case(backend_lib: str) -> dict:
    """A binding whose second stream's pack captured a graph, dropped inside a reference
    cycle and collected by the cyclic GC, in the order that clears the younger pack before
    its launch (the pack younger than the launch: the GC clears gen0 before gen1).

    Returns
    -------
    dict
        ``instantiated`` / ``destroyed``: executable graphs from "start" on;
        ``packs_freed``: variant packs destroyed by the collection (the launch's two).
    """
    import gc

    be = _backend(backend_lib)
    import hipdnn_async as hd
    lib = ctypes.CDLL(backend_lib)
    ctl = control()
    with hd.Device("cuda:0", streams=2) as dev:
        plan, vp = _fake_backend_conv(dev, be, "launch_graph_gc")
        gc.collect()
        gc.disable()
        try:
            plan.execute_sync(vp, stream=0)          # the launch and stream 0's pack
            gc.collect(0)                            # both now in generation 1
            ctl.clear()
            ctl.mark("start")
            for _ in range(4):                       # stream 1's pack (generation 0): a graph
                plan.submit(vp, stream=1).result()
            launch = plan._bindings._entries[0].fn
            cycle = [launch]
            cycle.append(cycle)
            plan._bindings.clear()
            packs = _counts(lib)[4]
            del launch, cycle
            gc.collect()
        finally:
            gc.enable()
        log = ctl.log()
        return {"instantiated": len(calls(log, "cudaGraphInstantiateWithFlags")),
                "destroyed": len(calls(log, "cudaGraphExecDestroy")),
                "packs_freed": packs - _counts(lib)[4]}


@contextlib.contextmanager
def copies_alongside(dev, ctl, delay_us: int, out: dict):
    """Run the block while another thread copies host data into a device array of
    ``dev`` all the while (``GpuArray.copy_from``) and every fake ``cudnnBackendExecute``
    takes ``delay_us``; ``ctl`` is marked "start" and "end" around it. Fills ``out``:
    ``copies`` done, ``copy_errors`` (each failed copy's type and text), ``copied_ok``
    (the last copy's bytes read back equal what was copied)."""
    import threading

    other = dev.empty((64,), np.float32)
    stop = threading.Event()
    out.update(copies=0, copy_errors=[])
    data = np.arange(64, dtype=np.float32)

    def copier():
        while not stop.is_set():
            try:
                other.copy_from(data + out["copies"])
                out["copies"] += 1
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out["copy_errors"].append(f"{type(exc).__name__}: {exc}")
                return

    ctl.clear()
    ctl.mark("start")
    os.environ["FAKE_EXECUTE_DELAY_US"] = str(delay_us)
    t = threading.Thread(target=copier)
    t.start()
    try:
        yield
    finally:
        os.environ.pop("FAKE_EXECUTE_DELAY_US", None)
        stop.set()
        t.join()
    ctl.mark("end")
    n = out["copies"]
    out["copied_ok"] = bool(n) and bool(np.array_equal(other.to_numpy_sync(),
                                                        data + (n - 1)))


def copy_during_capture_case(backend_lib: str, *, submits: int = 5,
                             delay_us: int = 20000) -> dict:
    """One thread submits one binding ``submits`` times (its capture included) while
    every ``cudnnBackendExecute`` takes ``delay_us``; another thread copies host data into
    a device array of the same device (``GpuArray.copy_from``, which orders the copy stream
    after every compute stream's launched work) all the while (``copies_alongside``).

    Returns
    -------
    dict
        ``log`` (marks "start", "end"), ``copies`` done, ``copy_errors`` (type and text of
        each failed copy), ``graph_launches`` of the binding, ``copied_ok`` (the last copy's
        bytes read back equal what was copied).
    """
    be = _backend(backend_lib)
    import hipdnn_async as hd
    ctl = control()
    out = {}
    with hd.Device("cuda:0", streams=1) as dev:
        plan, vp = _fake_backend_conv(dev, be, "launch_graph_copy")
        plan.execute_sync(vp, stream=0)
        with copies_alongside(dev, ctl, delay_us, out):
            for _ in range(submits):
                plan.submit(vp, stream=0).result()
        out["graph_launches"] = plan._bindings._entries[0].fn.graph_launches
        out["log"] = ctl.log()
        return out


def steady_state_failure_case(backend_lib: str, fail: str) -> dict:
    """A binding that runs, then fails once in its steady state, then runs again.

    ``fail``: ``"execute"`` (the direct ``cudnnBackendExecute`` of the bound pack returns
    CUDNN_STATUS_EXECUTION_FAILED: ``$FAKE_EXECUTE_STATUS``, before any capture) or
    ``"graph_launch"`` (after the binding's CUDA graph was captured and launched once, its
    next ``cudaGraphLaunch`` returns cudaErrorLaunchFailure, 719).

    Returns
    -------
    dict
        ``label`` (the plan's), ``error`` (type name, message, ``.status``, ``.call``, the
        type name of its ``__cause__``) of the failed submission, ``graph_launches`` of
        the binding before the failure, ``after`` (the next submission ran: no error) and
        ``log``.
    """
    be = _backend(backend_lib)
    import hipdnn_async as hd
    ctl = control()
    with hd.Device("cuda:0", streams=1) as dev:
        plan, vp = _fake_backend_conv(dev, be, "conv1")
        plan.execute_sync(vp, stream=0)                  # binds; one direct execution
        if fail == "graph_launch":
            for _ in range(3):                           # the capture, then a launch
                plan.submit(vp, stream=0).result()
        launch = plan._bindings._entries[0].fn
        out = {"label": plan._label, "graph_launches": launch.graph_launches}
        ctl.clear()
        ctl.mark("start")
        if fail == "execute":
            os.environ["FAKE_EXECUTE_STATUS"] = "5000"
        else:
            ctl.inject("cudaGraphLaunch", 719)
        try:
            plan.submit(vp, stream=0).result()
            out["error"] = None
        except hd.HipdnnError as exc:
            out["error"] = [type(exc).__name__, str(exc), exc.status, getattr(exc, "call", None),
                            type(exc.__cause__).__name__ if exc.__cause__ else None]
        finally:
            os.environ.pop("FAKE_EXECUTE_STATUS", None)
            ctl.clear_injections()
        ctl.mark("end")
        plan.submit(vp, stream=0).result()
        out["after"] = launch.executions
        out["log"] = ctl.log()
        return out
