"""The ``multi`` section of bench_gpu.py (``--devices all``): one GPU against all GPUs of
the host, in the same run, on two embarrassingly parallel workloads (issue 14).

- ``block``: the ResNet-50 res2 block's conv 3x3 (64 -> 64, 56x56) + batchnorm training +
  ReLU forward at batch 256 (fp16 NHWC, FLOAT statistics), two plans per step on one
  stream of each device; every device runs the same number of steps on its own batch
  (data parallel). Images/s of one device, of all devices at once, and the ratio.
- ``batcher``: one ``hd.DynamicBatcher`` serving 1,024 concurrent clients (single-sample
  requests, host arrays in and out) of a conv 3x3 + bias + ReLU layer (256 -> 256 at
  14x14, fp32 NCHW): over one device, then over all devices (least-loaded dispatch).
  Samples/s and the ratio.

The target is a ratio >= 1.8 on two GPUs. With one GPU the section runs two ``Device``
objects on it (the multi-device code paths: separate streams, handles, workspaces and
plans on one GPU) and says that its ratio is not a scale-out figure. The batcher keeps
its rows in host memory and gathers them on one event loop, so its ratio also measures
how far the host side keeps several GPUs fed.

Each device's outputs of the block are compared with the first device's (same inputs,
same GPU model: the same algorithm and result): ``max_abs_diff_vs_first``.
"""
from __future__ import annotations

import time

import numpy as np

__all__ = ["bench_multi", "resolve_devices"]

BLOCK = {"n": 256, "c": 64, "hw": 56, "k": 64, "dtype": "float16", "layout": "NHWC"}
SERVE = {"c": 256, "hw": 14, "k": 256, "max_batch_size": 64, "max_delay_ms": 2.0}


def resolve_devices(hd, text: str) -> list[str]:
    """GPU specs of ``--devices``: ``all`` (every GPU of ``hd.devices()``) or a
    comma-separated list (``cuda:0,cuda:1``).

    Raises
    ------
    ValueError
        No GPU, or a spec that is not present.
    """
    present = [d for d in hd.devices() if d != "cpu"]
    specs = present if text == "all" else [s.strip() for s in text.split(",") if s.strip()]
    missing = [s for s in specs if s not in present]
    if not specs or missing:
        raise ValueError(f"--devices {text!r}: GPUs present are {present}; "
                         f"{'not present: ' + str(missing) if missing else 'none given'}")
    return specs


# ---------------------------------------------------------------------------------- block

def _block_graphs(hd):
    b = BLOCK
    f32 = hd.DataType.FLOAT
    x_dims, w_dims = (b["n"], b["c"], b["hw"], b["hw"]), (b["k"], b["c"], 3, 3)
    gc = hd.Graph(name="multi_conv", io_data_type=b["dtype"], intermediate_data_type=f32,
                  compute_data_type=f32)
    x = gc.tensor(dims=x_dims, layout=b["layout"], name="x")
    w = gc.tensor(dims=w_dims, layout=b["layout"], name="w")
    gc.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    gb = hd.Graph(name="multi_bn_relu", io_data_type=b["dtype"], intermediate_data_type=f32,
                  compute_data_type=f32)
    y_dims = (b["n"], b["k"], b["hw"], b["hw"])
    xb = gb.tensor(dims=y_dims, layout=b["layout"], name="x")

    def chan(name):
        return gb.tensor(dims=(1, b["k"], 1, 1), name=name, data_type="float32")

    bn_y, mean, inv_var, _, _ = gb.batchnorm(xb, chan("scale"), chan("bias"), epsilon=1e-5)
    mean.set_output(True).set_name("mean")
    inv_var.set_output(True).set_name("inv_variance")
    gb.pointwise(bn_y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("z")
    return gc, gb, x_dims, w_dims, y_dims


class _BlockState:
    """One device's plans and buffers of the block."""

    async def setup(self, hd, dev, xs, ws):
        b = BLOCK
        gc, gb, x_dims, w_dims, y_dims = _block_graphs(hd)
        self.dev = dev
        self.conv, self.bn = await dev.build(gc), await dev.build(gb)
        x = await dev.asarray(xs, layout=b["layout"])
        w = await dev.asarray(ws, layout=b["layout"])
        y = dev.empty(y_dims, b["dtype"], layout=b["layout"])
        z = dev.empty(y_dims, b["dtype"], layout=b["layout"])
        k = b["k"]
        scale = await dev.asarray(np.ones((1, k, 1, 1), np.float32))
        bias = await dev.asarray(np.zeros((1, k, 1, 1), np.float32))
        mean, inv_var = dev.empty((1, k, 1, 1), "float32"), dev.empty((1, k, 1, 1), "float32")
        self.vp_conv = {"x": x, "w": w, "y": y}
        self.vp_bn = {"x": y, "scale": scale, "bias": bias, "mean": mean,
                      "inv_variance": inv_var, "z": z}
        self.z = z
        return self

    async def steps(self, n: int) -> None:
        handles = []
        for _ in range(n):        # one stream: the BN step follows its conv
            handles.append(self.conv.submit(self.vp_conv, stream=0))
            handles.append(self.bn.submit(self.vp_bn, stream=0))
        for h in handles:
            await h


async def _timed(states, steps: int) -> float:
    """Wall seconds of ``steps`` block steps on every state at once."""
    import anyio
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for st in states:
            tg.start_soon(st.steps, steps)
    return time.perf_counter() - t0


async def _bench_block(hd, devs, steps: int) -> dict:
    b = BLOCK
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((b["n"], b["c"], b["hw"], b["hw"])).astype(np.float16)
    ws = (rng.standard_normal((b["k"], b["c"], 3, 3)) * 0.05).astype(np.float16)
    states = [await _BlockState().setup(hd, d, xs, ws) for d in devs]
    for st in states:                         # warm-up (plans' first launches)
        await st.steps(3)
    one = await _timed(states[:1], steps)
    every = await _timed(states, steps)
    first = await states[0].z.to_numpy()
    diffs = [float(np.abs((await st.z.to_numpy()).astype(np.float32)
                          - first.astype(np.float32)).max()) for st in states[1:]]
    imgs_one = steps * b["n"] / one
    imgs_all = len(states) * steps * b["n"] / every
    return {"workload": (f"conv3x3 {b['c']}>{b['k']} {b['hw']}x{b['hw']} + BN training + "
                         f"ReLU, batch {b['n']}, {b['dtype']} {b['layout']}"),
            "steps_per_device": steps, "algorithm": str(states[0].conv.algorithm),
            "one_images_per_s": imgs_one, "all_images_per_s": imgs_all,
            "ratio": imgs_all / imgs_one, "max_abs_diff_vs_first": diffs}


# ---------------------------------------------------------------------------------- batcher

def _serve_graph(hd):
    s = SERVE
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name="multi_serve", io_data_type=f32, intermediate_data_type=f32,
                 compute_data_type=f32)
    x = g.tensor(dims=(1, s["c"], s["hw"], s["hw"]), name="x")
    w = g.tensor(dims=(s["k"], s["c"], 3, 3), name="w")
    b = g.tensor(dims=(1, s["k"], 1, 1), name="b")
    y = g.pointwise(g.conv_fprop(x, w, padding=1), b, mode=hd.PointwiseMode.ADD)
    g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD).set_output(True).set_name("y")
    return g


async def _serve(hd, devices, xs, consts, clients: int, per_client: int) -> tuple:
    """(samples/s, metrics) of one batcher over ``devices`` serving ``clients`` callers."""
    import anyio
    s = SERVE
    batcher = hd.DynamicBatcher(list(devices), _serve_graph(hd), constants=consts,
                                max_batch_size=s["max_batch_size"],
                                max_delay_ms=s["max_delay_ms"])
    await batcher.warmup()
    async with batcher:
        async def client(i):
            for r in range(per_client):
                await batcher(xs[(i * per_client + r) % len(xs)])

        for i in range(4):                    # warm-up: staging buffers of every lane
            await batcher(xs[i])
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(client, i)
        rate = clients * per_client / (time.perf_counter() - t0)
    return rate, batcher.metrics()


async def _bench_batcher(hd, devs, clients: int, per_client: int) -> dict:
    s = SERVE
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, s["c"], s["hw"], s["hw"])).astype(np.float32)
          for _ in range(256)]
    consts = {"w": (rng.standard_normal((s["k"], s["c"], 3, 3)) * 0.02).astype(np.float32),
              "b": rng.standard_normal((1, s["k"], 1, 1)).astype(np.float32)}
    one, m_one = await _serve(hd, devs[:1], xs, consts, clients, per_client)
    every, m_all = await _serve(hd, devs, xs, consts, clients, per_client)
    return {"workload": (f"DynamicBatcher, conv3x3 {s['c']}>{s['k']} {s['hw']}x{s['hw']} + "
                         f"bias + ReLU fp32 NCHW, max_batch_size {s['max_batch_size']}, "
                         f"{clients} clients x {per_client} requests"),
            "one_samples_per_s": one, "all_samples_per_s": every, "ratio": every / one,
            "per_device_batches": [d["batches"] for d in m_all["devices"]],
            "mean_batch_size_one": m_one["mean_batch_size"],
            "mean_batch_size_all": m_all["mean_batch_size"]}


# ---------------------------------------------------------------------------------- section

async def bench_multi(hd, args, table, f) -> dict:
    """The section: ``args.devices`` (``all`` or a list), ``args.quick``; ``table`` and
    ``f`` are bench_gpu's printers. Returns the figures (bench_gpu puts them in --json)."""
    from contextlib import AsyncExitStack
    specs = resolve_devices(hd, args.devices)
    scale_out = len(set(specs)) > 1
    if not scale_out:                         # one GPU: two Device objects on it
        specs = [specs[0], specs[0]]
    steps = 5 if args.quick else 20
    clients, per_client = (256, 1) if args.quick else (1024, 2)
    out = {"devices": specs, "scale_out": scale_out}
    async with AsyncExitStack() as stack:
        devs = [await stack.enter_async_context(hd.Device(s, max_inflight=4 * steps + 16))
                for s in specs]
        out["perfdb_device_keys"] = sorted({d.provider.describe()["device"] for d in devs})
        out["block"] = await _bench_block(hd, devs, steps)
        out["batcher"] = await _bench_batcher(hd, devs, clients, per_client)
    n = len(specs)
    label = f"{n} GPUs" if scale_out else f"2 Devices on {specs[0]}"
    print(f"\n== multi ({label}; one device vs all, same run)")
    blk, bat = out["block"], out["batcher"]
    table([["block " + blk["workload"], "images/s", f(blk["one_images_per_s"], 0),
            f(blk["all_images_per_s"], 0), f(blk["ratio"], 2)],
           ["batcher " + bat["workload"], "samples/s", f(bat["one_samples_per_s"], 0),
            f(bat["all_samples_per_s"], 0), f(bat["ratio"], 2)]],
          ["workload", "unit", "one device", f"all ({n})", "all / one"])
    print(f"  batches per device {bat['per_device_batches']}; block outputs vs the first "
          f"device: max |diff| {blk['max_abs_diff_vs_first']}; perf-db device keys "
          f"{out['perfdb_device_keys']}")
    if scale_out:
        target = 0.9 * n
        out["target_ratio"] = target
        print(f"  target: all / one >= {target:.1f} on {n} GPUs")
    else:
        print(f"  one GPU: both Devices run on {specs[0]}, so 'all / one' is NOT a "
              "scale-out figure (it shows the two Devices share the GPU correctly)")
    return out
