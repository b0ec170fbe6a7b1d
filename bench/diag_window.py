"""Why a conv whose kernel is as fast as torch's takes up to 2x its time in a window of 20
back-to-back submissions (bench_gpu's "host-bound" cases): per-submit host time inside
the window, events with and without dev.metrics() inside it, and the kernels and runtime
calls one submit makes (torch.profiler / CUPTI).

    python3 bench/diag_window.py
"""
from __future__ import annotations

import asyncio
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])

import torch  # noqa: E402

import hipdnn_async as hd  # noqa: E402
from bench_gpu import (_NoGc, _torch_conv_fn, conv_graph, gpu_copy,  # noqa: E402
                       our_stream, torch_tensor)

CASES = [("res3 3x3", (128, 28, 28), (128, 128, 3, 3), 1, 1, "fprop"),
         ("res3 1x1 512>128", (512, 28, 28), (128, 512, 1, 1), 0, 1, "fprop"),
         ("res2 3x3", (64, 56, 56), (64, 64, 3, 3), 1, 1, "dgrad")]


def us(v):
    return f"{v:7.2f}"


def _timed(stream, launch, reps, extra=None):
    """CUDA events on ``stream`` around ``reps`` calls of ``launch()`` (then ``extra()``,
    also inside the window): (start, end, host us of each call, the launches' results)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    host, results = [], []
    clock = time.perf_counter_ns
    with _NoGc():
        start.record(stream)
        for _ in range(reps):
            t0 = clock()
            results.append(launch())
            host.append((clock() - t0) / 1e3)
        if extra is not None:
            t0 = clock()
            extra()
            host.append((clock() - t0) / 1e3)
        end.record(stream)
    return start, end, host, results


async def window(dev, plan, vp, ext, reps, metrics_inside):
    start, end, host, handles = _timed(ext, lambda: plan.submit(vp, stream=0), reps,
                                       dev.metrics if metrics_inside else None)
    for h in handles:
        await h
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps, host


def torch_window(fn, reps):
    start, end, host, _ = _timed(torch.cuda.current_stream(), fn, reps)
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps, host


def kernels(run, n=5):
    """(kernel names with device us, runtime API calls with host us) of n calls of run()."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            run()
        torch.cuda.synchronize()
    dev_rows, api_rows = {}, {}
    for e in prof.events():
        dt = getattr(e, "device_type", None)
        name = e.name[:70]
        if str(dt).endswith("CUDA"):
            dev_rows.setdefault(name, []).append(e.device_time if hasattr(e, "device_time")
                                                 else e.cuda_time)
        elif name.startswith(("cuda", "cu")):
            api_rows.setdefault(name, []).append(e.cpu_time)
    return ({k: (len(v) / n, statistics.median(v)) for k, v in dev_rows.items()},
            {k: (len(v) / n, statistics.median(v)) for k, v in api_rows.items()})


async def case(dev, name, cin, w_dims, pad, stride, direction, dtype="float16", layout="NHWC"):
    g, dims = conv_graph(hd, direction, 32, cin, w_dims, pad, stride, dtype, layout)
    t = {"x": torch_tensor(torch, dims["x"], dtype, layout),
         "w": torch_tensor(torch, dims["w"], dtype, layout, scale=0.05),
         "dy": torch_tensor(torch, dims["y"], dtype, layout)}
    out_name, out_dims = {"fprop": ("y", dims["y"]), "dgrad": ("dx", dims["x"]),
                          "wgrad": ("dw", dims["w"])}[direction]
    inputs = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}[direction]
    vp = {k: gpu_copy(torch, dev, t[k], layout) for k in inputs}
    vp[out_name] = dev.empty(out_dims, dtype, layout=layout)
    plan = await dev.build(g)
    ext = our_stream(torch, dev)
    print(f"\n== {direction} {dtype} {layout} {name}: {plan.algorithm}")
    for _ in range(5):
        await plan.execute(vp, stream=0)
    for reps in (20, 100):
        for inside in (True, False):
            per, host = [], []
            for _ in range(5):
                p, h = await window(dev, plan, vp, ext, reps, inside)
                per.append(p)
                host.append(h)
            h0 = [h[0] for h in host]
            rest = [x for h in host for x in h[1:reps]]
            extra = [h[reps] for h in host] if inside else []
            print(f"  ours reps {reps:3d} metrics {'in ' if inside else 'out'}: events us/call "
                  f"{us(statistics.median(per))}  host first {us(statistics.median(h0))} "
                  f"rest med {us(statistics.median(rest))} max {us(max(rest))}"
                  + (f"  metrics() {us(statistics.median(extra))}" if extra else ""))
    fn = _torch_conv_fn(torch, direction, t, w_dims, pad, stride)
    for _ in range(5):
        fn()
    for reps in (20, 100):
        per, host = [], []
        for _ in range(5):
            p, h = torch_window(fn, reps)
            per.append(p)
            host.append(h)
        rest = [x for h in host for x in h[1:]]
        print(f"  torch reps {reps:3d}:             events us/call {us(statistics.median(per))}  "
              f"host first {us(statistics.median([h[0] for h in host]))} rest med "
              f"{us(statistics.median(rest))} max {us(max(rest))}")

    # is the first call after a wait slow for any host work (CPU wake-up) or for ours?
    def cpu_work():
        return sum(range(300))

    firsts, rests = [], []
    for _ in range(5):
        p, _h = await window(dev, plan, vp, ext, 20, False)      # ends in a synchronize
        t = []
        for _ in range(20):
            t0 = time.perf_counter_ns()
            cpu_work()
            t.append((time.perf_counter_ns() - t0) / 1e3)
        firsts.append(t[0])
        rests.extend(t[1:])
    print(f"  pure-CPU sum(range(300)) after a synchronize: first {us(statistics.median(firsts))}"
          f" rest med {us(statistics.median(rests))}")
    async with dev.capture(stream=0) as step:
        plan.submit(vp)
    for _ in range(3):
        await step.replay()
    firsts, rests = [], []
    for _ in range(10):
        dev._pool.synchronize_blocking()
        t = []
        for _ in range(20):
            t0 = time.perf_counter_ns()
            step.submit()
            t.append((time.perf_counter_ns() - t0) / 1e3)
        firsts.append(t[0])
        rests.extend(t[1:])
    dev._pool.synchronize_blocking()
    step.close()
    print(f"  step.submit (1 plan) after a synchronize: first {us(statistics.median(firsts))} "
          f"rest med {us(statistics.median(rests))}")

    def ours_sync():
        plan.execute_sync(vp, stream=0)

    for who, run in (("ours", ours_sync), ("torch", fn)):
        try:
            kd, ka = kernels(run)
        except Exception as exc:  # noqa: BLE001
            print(f"  profiler failed for {who}: {type(exc).__name__}: {exc}")
            continue
        print(f"  {who}: kernels per call " + "; ".join(
            f"{k} x{c:g} {d:.1f}us" for k, (c, d) in kd.items()))
        print(f"  {who}: runtime calls per call " + "; ".join(
            f"{k} x{c:g} {d:.1f}us" for k, (c, d) in sorted(ka.items())))


async def main():
    async with hd.Device("cuda:0", streams=1, max_inflight=256) as dev:
        for c in CASES:
            await case(dev, *c)


if __name__ == "__main__":
    asyncio.run(main())
