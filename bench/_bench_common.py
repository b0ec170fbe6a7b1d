"""Helpers shared by the benchmarks (bench_gpu.py, bench_cpu.py, bench_profiler.py,
bench_batching.py): ResNet-50 shapes, graphs of one convolution, timing statistics,
bandwidth figures, tables and the ``--json`` file."""
from __future__ import annotations

import math

__all__ = ["RESNET50_CONVS", "NoGc", "median", "geomean", "ratio", "table", "f", "conv_graph",
           "conv_flops", "bn_gbps", "pct_of", "write_json"]

# ResNet-50 v1.5 convolutions (He et al. 2016, table 1; stride 2 in the 3x3 of the first
# block of res3-res5): name, (C, H, W) of the input, (K, C, R, S), padding, stride.
RESNET50_CONVS = [
    ("conv1 7x7/2", (3, 224, 224), (64, 3, 7, 7), 3, 2),
    ("res2 1x1 64>64", (64, 56, 56), (64, 64, 1, 1), 0, 1),
    ("res2 3x3", (64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("res2 1x1 64>256", (64, 56, 56), (256, 64, 1, 1), 0, 1),
    ("res2 1x1 256>64", (256, 56, 56), (64, 256, 1, 1), 0, 1),
    ("res3 3x3/2", (128, 56, 56), (128, 128, 3, 3), 1, 2),
    ("res3 down 1x1/2", (256, 56, 56), (512, 256, 1, 1), 0, 2),
    ("res3 3x3", (128, 28, 28), (128, 128, 3, 3), 1, 1),
    ("res3 1x1 128>512", (128, 28, 28), (512, 128, 1, 1), 0, 1),
    ("res3 1x1 512>128", (512, 28, 28), (128, 512, 1, 1), 0, 1),
    ("res4 3x3", (256, 14, 14), (256, 256, 3, 3), 1, 1),
    ("res4 1x1 1024>256", (1024, 14, 14), (256, 1024, 1, 1), 0, 1),
    ("res5 3x3", (512, 7, 7), (512, 512, 3, 3), 1, 1),
    ("res5 1x1 512>2048", (512, 7, 7), (2048, 512, 1, 1), 0, 1),
]


class NoGc:
    """``with NoGc():`` the garbage collector is off (after a collection) while timing."""

    def __enter__(self):
        import gc
        self._was = gc.isenabled()
        gc.collect()
        gc.disable()

    def __exit__(self, *exc):
        import gc
        if self._was:
            gc.enable()


def median(values):
    """Median of the finite values (NaN where none)."""
    v = sorted(x for x in values if x is not None and math.isfinite(x))
    if not v:
        return float("nan")
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def geomean(values):
    """Geometric mean of the positive finite values (NaN where none)."""
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def ratio(a, b):
    """a / b, or None where either is missing or not finite."""
    return a / b if a and b and math.isfinite(a) and math.isfinite(b) else None


def table(rows, header):
    """Print rows under header, columns padded to their widest cell."""
    text = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(header))]
    for r in text:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), flush=True)


def f(x, digits=3):
    """x with `digits` decimals, "-" for None or a non-finite float."""
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def conv_graph(hd, direction, n, cin, w_dims, pad, stride, dtype, layout):
    """(graph, {name: dims}) of one convolution; names x, w, y / dy, w, dx / dy, x, dw."""
    f32 = hd.DataType.FLOAT
    x_dims = (n,) + tuple(cin)
    probe = hd.Graph()
    y_dims = tuple(probe.conv_fprop(probe.tensor(dims=x_dims), probe.tensor(dims=w_dims),
                                    padding=pad, stride=stride).dims)
    g = hd.Graph(name=f"bench_{direction}", io_data_type=dtype, intermediate_data_type=f32,
                 compute_data_type=f32)
    kw = dict(padding=pad, stride=stride)
    if direction == "fprop":
        x = g.tensor(dims=x_dims, layout=layout, name="x")
        w = g.tensor(dims=w_dims, layout=layout, name="w")
        g.conv_fprop(x, w, **kw).set_output(True).set_name("y")
    elif direction == "dgrad":
        dy = g.tensor(dims=y_dims, layout=layout, name="dy")
        w = g.tensor(dims=w_dims, layout=layout, name="w")
        g.conv_dgrad(dy, w, dx_dims=x_dims, **kw).set_output(True).set_name("dx")
    else:
        dy = g.tensor(dims=y_dims, layout=layout, name="dy")
        x = g.tensor(dims=x_dims, layout=layout, name="x")
        g.conv_wgrad(dy, x, dw_dims=w_dims, **kw).set_output(True).set_name("dw")
    return g, {"x": x_dims, "w": w_dims, "y": y_dims}


def bn_gbps(passes, nbytes, ms):
    """GB/s of `passes` transfers of `nbytes` bytes each in `ms` ms (None without a time)."""
    if not ms or not math.isfinite(ms) or ms <= 0:
        return None
    return passes * nbytes / ms / 1e6


def pct_of(gbps, ref_gbps):
    """100 * gbps / ref_gbps (None where either is missing)."""
    r = ratio(gbps, ref_gbps)
    return None if r is None else 100.0 * r


def conv_flops(n, cin, w_dims, pad, stride):
    """Floating-point operations of one convolution (fprop, dgrad and wgrad alike):
    2 * N * K * P * Q * (C / groups) * R * S, P and Q from the padded input."""
    _, h, w = cin
    k, cg, r, s = w_dims
    p = (h + 2 * pad - r) // stride + 1
    q = (w + 2 * pad - s) // stride + 1
    return 2.0 * n * k * p * q * cg * r * s


def write_json(path, doc) -> None:
    """Write ``doc`` to ``path`` as indented JSON (a benchmark's ``--json FILE``); nothing
    where ``path`` is None or empty."""
    if path:
        import json
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, default=str)
