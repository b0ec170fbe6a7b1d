"""Would accepting cuDNN's FFT engines for FLOAT convolutions stay within our tolerance?
(issue 11: PyTorch runs FFT for fp32 3x3 fprop/dgrad, 1.8-2.6x faster than our default,
at 0.18 of our bound on res3 3x3 in bench/results/h200_diag_policy.log; the numerical
policy declines every FFT/Winograd config for FLOAT data.)

For every ResNet-50 shape, fp32 NCHW fprop and dgrad at ``--batch``: our default plan and
a plan built with FFT-noted configs accepted (Winograd still declined), each timed and
compared with float64 in units of our bound (tests/oracle/_cases.reduction_tol), beside
PyTorch (allow_tf32=False, its heuristic choice). Inputs U(-1, 1) and, with ``--wide``,
a wide-dynamic-range set (magnitudes 2^-8..2^8), where an FFT's error, relative to a
tile's energy, hurts small outputs most.

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
from hipdnn_async.providers.cudnn import _graph_plan  # noqa: E402
from oracle._cases import reduction_tol  # noqa: E402

_REAL = _graph_plan.rejection


def _fft_allowed(be, c, **kw):
    """The policy with FFT-noted configs accepted for FLOAT (Winograd still declined)."""
    why = _REAL(be, c, **kw)
    winograd = {be.NUMERICAL_NOTE_WINOGRAD, be.NUMERICAL_NOTE_WINOGRAD_TILE_4x4,
                be.NUMERICAL_NOTE_WINOGRAD_TILE_6x6, be.NUMERICAL_NOTE_WINOGRAD_TILE_13x13}
    if why and why.startswith("FFT") and not (c.numerical & winograd):
        return None
    return why


def _inputs(dims, wide, gen):
    x = torch.rand(dims, generator=gen, device="cuda", dtype=torch.float64) * 2 - 1
    if wide:
        x = x * torch.exp2(torch.randint(-8, 9, dims, generator=gen, device="cuda").double())
    return x.float()


async def one(dev_default, dev_fft, batch, name, cin, w_dims, pad, stride, direction, wide):
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
    for dev in (dev_default, dev_fft):
        vp = {k: gpu_copy(torch, dev, t[k], "NCHW") for k in inputs}
        vp[out_name] = dev.empty(out_dims, "float32", layout="NCHW")
        _graph_plan.rejection = _fft_allowed if dev is dev_fft else _REAL
        try:
            plan = await dev.build(g)
        finally:
            _graph_plan.rejection = _REAL
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
    print("  case                      torch    err  default                  ms     err  "
          "FFT allowed              ms     err")
    async with hd.Device("cuda:0", perfdb=os.path.join(tmp, "a.sqlite3")) as d0, \
            hd.Device("cuda:0", perfdb=os.path.join(tmp, "b.sqlite3")) as d1:
        for name, cin, w_dims, pad, stride in RESNET50_CONVS:
            for direction in ("fprop", "dgrad"):
                try:
                    await one(d0, d1, args.batch, name, cin, w_dims, pad, stride, direction,
                              args.wide)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {direction} {name}: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    asyncio.run(main())
