"""Host memory of one execution beyond its buffers: the peak of temporary allocations,
as a ratio to the bytes of the execution's own I/O buffers (the anchor, same run).

Convolutions are measured per algorithm, with the declared workspace allocated beforehand
and printed beside: the workspace holds the large scratch (column matrices); the
temporaries are NumPy's packed copies and float32 accumulators. Measured with
tracemalloc, which sees NumPy's allocations.

    python bench/bench_memory.py [--json FILE]
"""
import argparse
import json
import tracemalloc

import numpy as np

import hipdnn_async as hd
from hipdnn_async.providers.cpu import _conv

N, C, H, W = 16, 32, 64, 64


def graph(pattern, dtype):
    g = hd.Graph(name=pattern, io_data_type=dtype)
    x = g.tensor(dims=(N, C, H, W), name="x")

    def stat(name):
        return g.tensor(dims=(1, C, 1, 1), data_type="float32", name=name)

    if pattern == "bn_inference_variance":
        y = g.batchnorm_inference_variance_ext(x, stat("m"), stat("v"), stat("s"), stat("b"),
                                               epsilon=1e-5)
    elif pattern == "bn_training_relu":
        y, mean, inv_var, _, _ = g.batchnorm(x, stat("s"), stat("b"), epsilon=1e-5)
        mean.set_output(True)
        inv_var.set_output(True)
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    elif pattern == "conv_fprop_3x3":
        y = g.conv_fprop(x, g.tensor(dims=(C, C, 3, 3), name="w"), padding=1)
    else:
        y = g.conv_fprop(x, g.tensor(dims=(C, C, 1, 1), name="w"))
    y.set_output(True)
    return g


def _peak(fn) -> int:
    fn()  # warm-up
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main():
    from hipdnn_async._types import numpy_dtype
    from hipdnn_async.patterns import match
    from hipdnn_async.providers.cpu._provider import _operands, conv_problem

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows = []
    with hd.Device("cpu", streams=1) as dev:
        for pattern in ("bn_inference_variance", "bn_training_relu", "conv_fprop_1x1",
                        "conv_fprop_3x3"):
            for dtype in ("float32", "float16"):
                g = graph(pattern, dtype)
                vp = {t: np.ones(t.dims, numpy_dtype(t.data_type))
                      for t in g.tensors if not t.is_virtual}
                io_bytes = sum(a.nbytes for a in vp.values())
                if not pattern.startswith("conv"):
                    plan = dev.build_sync(g)
                    runs = [(plan.pattern, 0, lambda: plan.execute_sync(vp))]
                else:  # each algorithm on its own, its workspace allocated beforehand
                    m = match(g)
                    p = conv_problem(m)
                    a, b, out = (vp[m.tensors[r]] for r in _operands(m))
                    runs = []
                    for algo in _conv.ALGORITHMS["fprop"]:
                        if algo.applicable(p):
                            ws = np.empty(algo.workspace_size(p), np.uint8)
                            runs.append((algo.name, ws.nbytes,
                                         lambda algo=algo, ws=ws: algo.run(p, a, b, out, ws)))
                for name, ws_bytes, fn in runs:
                    peak = _peak(fn)
                    rows.append({"pattern": pattern, "dtype": dtype, "algorithm": name,
                                 "io_bytes": io_bytes, "workspace_bytes": ws_bytes,
                                 "temporaries_bytes": peak,
                                 "temporaries_over_io": peak / io_bytes})
    for r in rows:
        print(f"{r['pattern']:22} {r['dtype']:8} {r['algorithm']:28} io "
              f"{r['io_bytes'] / 2**20:6.1f} MiB  workspace {r['workspace_bytes'] / 2**20:6.1f} "
              f"MiB  temporaries {r['temporaries_bytes'] / 2**20:6.1f} MiB  temporaries/io "
              f"{r['temporaries_over_io']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
