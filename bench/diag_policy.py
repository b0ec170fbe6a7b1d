"""What PyTorch runs where our default choice is slower at equal numerics policy: the
kernels of torch's heuristic call (CUPTI kernel names), and the error of its result and of
ours against a float64 reference, in units of our tolerance bound
(tests/oracle/_cases.reduction_tol / gpu_wgrad_tol: |got - ref| <= atol + rtol*|ref|).

    python3 bench/diag_policy.py
"""
from __future__ import annotations

import asyncio
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]

import torch  # noqa: E402

import hipdnn_async as hd  # noqa: E402
from bench_gpu import Timer, _torch_conv_fn, conv_graph, gpu_copy  # noqa: E402
from oracle._cases import gpu_wgrad_tol, reduction_tol  # noqa: E402

CASES = [("res3 3x3", (128, 28, 28), (128, 128, 3, 3), 1, 1, "fprop", "float32", "NCHW"),
         ("res3 3x3", (128, 28, 28), (128, 128, 3, 3), 1, 1, "dgrad", "float32", "NCHW"),
         ("res3 3x3", (128, 28, 28), (128, 128, 3, 3), 1, 1, "wgrad", "float32", "NCHW"),
         ("conv1 7x7/2", (3, 224, 224), (64, 3, 7, 7), 3, 2, "fprop", "float16", "NHWC")]


def kernels(fn, n=3):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    names = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            names[e.name[:90]] = names.get(e.name[:90], 0) + 1
    return {k: v / n for k, v in names.items()}


def ms(fn, reps=20):
    """ms per call of ``fn`` (bench_gpu's ``Timer.events`` on torch's current stream)."""
    return Timer(torch).events(torch.cuda.current_stream(), fn, reps)


def over_bound(got, ref, atol, rtol):
    got, ref = got.double(), ref.double()
    return float(((got - ref).abs() / (atol + rtol * ref.abs())).max())


async def case(dev, name, cin, w_dims, pad, stride, direction, dtype, layout):
    torch.backends.cudnn.benchmark = False
    tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
    g, dims = conv_graph(hd, direction, 32, cin, w_dims, pad, stride, dtype, layout)
    gen = torch.Generator(device="cuda").manual_seed(5)
    t64 = {k: torch.rand(dims[k2], generator=gen, device="cuda", dtype=torch.float64) * 2 - 1
           for k, k2 in (("x", "x"), ("w", "w"), ("dy", "y"))}
    mf = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    t = {k: v.to(tdt).contiguous(memory_format=mf) for k, v in t64.items()}
    t64 = {k: v.to(tdt).double() for k, v in t.items()}         # the rounded inputs, exactly
    fn, fn64 = (_torch_conv_fn(torch, direction, tt, w_dims, pad, stride) for tt in (t, t64))
    ref = fn64()
    ref = ref if direction == "fprop" else ref[0 if direction == "dgrad" else 1]
    got_t = fn()
    got_t = got_t if direction == "fprop" else got_t[0 if direction == "dgrad" else 1]
    c, r, s = w_dims[1], w_dims[2], w_dims[3]
    if direction == "wgrad":
        n = 32 * dims["y"][2] * dims["y"][3]
        atol, rtol = gpu_wgrad_tol(dtype, n, 1.0, 1.0)
    else:
        n = (c if direction == "fprop" else w_dims[0]) * r * s
        atol, rtol = reduction_tol(f"conv_{direction}", dtype, n)
    out_name = {"fprop": "y", "dgrad": "dx", "wgrad": "dw"}[direction]
    inputs = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}[direction]
    vp = {k: gpu_copy(torch, dev, t[k], layout) for k in inputs}
    out_dims = {"y": dims["y"], "dx": dims["x"], "dw": dims["w"]}[out_name]
    vp[out_name] = dev.empty(out_dims, dtype, layout=layout)
    plan = await dev.build(g)
    await plan.execute(vp)
    ours = torch.as_tensor(vp[out_name], device="cuda").clone()
    ours_ms = ms(lambda: plan.execute_sync(vp, stream=0))
    print(f"\n== {direction} {dtype} {layout} {name} (n={n}, atol {atol:.3g}, rtol {rtol:.3g})")
    print(f"  torch: {ms(fn):.3f} ms, error / our bound {over_bound(got_t, ref, atol, rtol):.2f}")
    for k, v in kernels(fn).items():
        print(f"    kernel x{v:g} {k}")
    print(f"  ours ({plan.algorithm}): {ours_ms:.3f} ms (incl. sync), error / bound "
          f"{over_bound(ours, ref, atol, rtol):.2f}")


async def main():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    async with hd.Device("cuda:0", streams=1) as dev:
        for c in CASES:
            t0 = time.perf_counter()
            try:
                await case(dev, *c)
            except Exception as exc:  # noqa: BLE001
                print(f"  {c}: {type(exc).__name__}: {exc}")
            print(f"  ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    asyncio.run(main())
