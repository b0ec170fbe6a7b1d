"""cuDNN's FFT engines for FLOAT convolutions against direct summation: time and error in
units of our tolerance bound, the measurement behind the numerical policy (issue 11).

The policy accepts FFT-noted configs for FLOAT fprop/dgrad by default (Winograd stays
declined) and ``cudnn_graph.allow_fft = 0`` declines them. For every ResNet-50 shape,
fp32 NCHW fprop and dgrad at ``--batch``: the default plan and a plan built with
``cudnn_graph.allow_fft = 0`` (direct summation only, the earlier default), each timed and
compared with float64 in units of our bound (tests/oracle/_cases.reduction_tol), beside
PyTorch (allow_tf32=False, its heuristic choice). Inputs U(-1, 1) and, with ``--wide``,
a wide-dynamic-range set (magnitudes 2^-8..2^8), where an FFT's error, relative to a
tile's energy, hurts small outputs most.

Measured on the H200 (cuDNN 9.19, batch 32, 2026-12-01, when the default still declined
FFT and the second column was built with FFT accepted through a patched policy): where
FFT configs were chosen (res2 3x3 dgrad: eng50; res3 3x3 fprop: eng3 k11=2, dgrad:
eng50) the error was at most 0.19 of our bound (0.03 with ``--wide``) against 0.41-0.44
for the direct kernels (0.07-0.08 wide), at 0.19-0.23 ms against 0.43-0.46 ms; every other
shape chose the same config either way, and PyTorch ran FFT on those three shapes.

    python3 bench/diag_fft.py [--batch 32] [--wide]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]

import torch  # noqa: E402

import hipdnn_async as hd  # noqa: E402
from bench_gpu import RESNET50_CONVS, _torch_conv_fn, conv_graph, gpu_copy  # noqa: E402
from diag_policy import ms, over_bound  # noqa: E402
from hipdnn_async.providers.cudnn._graph import ALLOW_FFT, CUDNN_GRAPH_ENGINE  # noqa: E402
from oracle._cases import reduction_tol  # noqa: E402

# (column, build knobs): the default policy, then FFT declined (direct summation only)
POLICIES = (("default", {}), ("FFT declined", {ALLOW_FFT: 0}))


def _inputs(dims, wide, gen):
    x = torch.rand(dims, generator=gen, device="cuda", dtype=torch.float64) * 2 - 1
    if wide:
        x = x * torch.exp2(torch.randint(-8, 9, dims, generator=gen, device="cuda").double())
    return x.float()


async def one(devs, batch, name, cin, w_dims, pad, stride, direction, wide):
    g, dims = conv_graph(hd, direction, batch, cin, w_dims, pad, stride, "float32", "NCHW")
    gen = torch.Generator(device="cuda").manual_seed(3)
    t = {"x": _inputs(dims["x"], wide, gen), "w": _inputs(dims["w"], wide, gen),
         "dy": _inputs(dims["y"], wide, gen)}
    t64 = {k: v.double() for k, v in t.items()}
    fn, fn64 = (_torch_conv_fn(torch, direction, tt, w_dims, pad, stride) for tt in (t, t64))
    pick = (lambda r: r) if direction == "fprop" else (lambda r: r[0])
    ref = pick(fn64())
    max_a = float(max(t["x" if direction == "fprop" else "dy"].abs().max(), 1e-30))
    max_b = float(t["w"].abs().max())
    n = (w_dims[1] if direction == "fprop" else w_dims[0]) * w_dims[2] * w_dims[3]
    atol, rtol = reduction_tol(f"conv_{direction}", "float32", n, max_a, max_b)
    row = [f"{direction} {name}", f"{ms(fn):.3f}", f"{over_bound(pick(fn()), ref, atol, rtol):.2f}"]
    out_name, out_dims = ("y", dims["y"]) if direction == "fprop" else ("dx", dims["x"])
    inputs = ("x", "w") if direction == "fprop" else ("dy", "w")
    for dev, (_, knobs) in zip(devs, POLICIES):
        vp = {k: gpu_copy(torch, dev, t[k], "NCHW") for k in inputs}
        vp[out_name] = dev.empty(out_dims, "float32", layout="NCHW")
        # the graph engine asked for by name: the knob is its own (the legacy engine's is
        # cudnn_legacy.allow_fft), and a decline is reported instead of falling back
        plan = await dev.build(g, engine=CUDNN_GRAPH_ENGINE, knobs=knobs)
        await plan.execute(vp)
        got = torch.as_tensor(vp[out_name], device="cuda")
        row += [str(plan.algorithm)[:24], f"{ms(lambda: plan.execute_sync(vp, stream=0)):.3f}",
                f"{over_bound(got, ref, atol, rtol):.2f}"]
    print("  " + "  ".join(f"{c:<24s}" if i in (0, 3, 6) else f"{c:>7s}"
                           for i, c in enumerate(row)), flush=True)


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--wide", action="store_true")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    tmp = tempfile.mkdtemp(prefix="diag_fft_")
    print(f"fp32 NCHW, batch {args.batch}, inputs {'wide range' if args.wide else 'U(-1, 1)'}; "
          "ms incl. sync; err = max |got - float64| / (atol + rtol |ref|)")
    head = ["case", "torch", "err"] + [c for label, _ in POLICIES for c in (label, "ms", "err")]
    print("  " + "  ".join(f"{c:<24s}" if i in (0, 3, 6) else f"{c:>7s}"
                           for i, c in enumerate(head)))
    async with hd.Device("cuda:0", perfdb=os.path.join(tmp, "a.sqlite3")) as d0, \
            hd.Device("cuda:0", perfdb=os.path.join(tmp, "b.sqlite3")) as d1:
        for name, cin, w_dims, pad, stride in RESNET50_CONVS:
            for direction in ("fprop", "dgrad"):
                try:
                    await one((d0, d1), args.batch, name, cin, w_dims, pad, stride,
                              direction, args.wide)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {direction} {name}: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    asyncio.run(main())
