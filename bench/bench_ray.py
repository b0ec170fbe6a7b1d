"""Requests/s and latency of the digits model served four ways, in one run (issue 13).

`--clients` concurrent clients each send `--rounds` single-image requests, one at a time
(client c sends digit images c, c + clients, ... modulo the 1,797), and wait for each reply:

- ``in_process``: the model in this process (``digits_model(FILE)`` on one device: one
  ``DynamicBatcher`` per layer), clients on this event loop; no Ray;
- ``serve_hipdnn_1``, ``serve_hipdnn_2``: ``hipdnn_async.ray.deployment`` with 1 and 2
  replicas, clients awaiting a Serve handle;
- ``serve_torch_1``: a plain Ray Serve deployment (``@serve.batch``, same batch size and
  delay) running the same folded network in PyTorch eager (``torch.nn.functional.conv2d``);
  the anchor a Ray user would write first.

Every reply is checked against the local evaluation (argmax equal to ``plan.execute``'s),
so a fast wrong answer does not count. Prints requests/s, p50 and p99 latency (ms) per
mode; ``--json FILE`` writes them. On a GPU machine ``--device gpu:0`` runs the hipdnn
replicas on the GPU (one replica: ``--replicas 1``) and PyTorch on ``cuda``.

    PYTHONPATH=. python bench/bench_ray.py --model digits.npz [--clients 64 --rounds 16]
    # the model: hipdnn-async demo --save digits.npz

Ray is started locally on 127.0.0.1 (``--num-cpus``, default 2), and stopped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

import numpy as np

from hipdnn_async.ray._deps import loopback_environment

os.environ.update(loopback_environment())       # before Ray is imported


def _stats(latencies_ms, seconds: float, n: int, wrong: int) -> dict:
    a = np.asarray(latencies_ms)
    p50, p99 = np.percentile(a, [50, 99])
    return {"requests": n, "seconds": seconds, "requests_per_s": n / seconds,
            "p50_ms": float(p50), "p99_ms": float(p99), "wrong": wrong}


async def _drive(call, images, expected, clients: int, rounds: int) -> dict:
    """`clients` concurrent loops of `rounds` awaited calls; latency of each; check each."""
    lat, wrong = [], 0

    async def client(c: int):
        nonlocal wrong
        for r in range(rounds):
            i = (c + r * clients) % len(images)
            t0 = time.perf_counter()
            y = await call(images[i:i + 1])
            lat.append((time.perf_counter() - t0) * 1e3)
            wrong += int(np.asarray(y).reshape(-1, 10).argmax(1)[0] != expected[i])

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return _stats(lat, time.perf_counter() - t0, clients * rounds, wrong)


async def _in_process(factory, device, images, expected, args) -> dict:
    import hipdnn_async as hd
    async with hd.Device(device) as dev:
        async with await factory(dev) as model:
            await model.warmup()
            await _drive(model, images, expected, args.clients, 2)        # warm caches
            return await _drive(model, images, expected, args.clients, args.rounds)


class TorchDigits:
    """Plain Ray Serve replica: the folded digits network in PyTorch eager."""

    def __init__(self, layers, logit_bias, pixel_mean, pixel_std, device, max_batch_size,
                 max_delay_ms):
        import torch
        from ray import serve
        self.torch = torch
        self.dev = torch.device("cuda" if device != "cpu" else "cpu")
        self.layers = [(torch.as_tensor(w, device=self.dev),
                        None if b is None else torch.as_tensor(b.reshape(-1), device=self.dev),
                        stride, pad, relu) for w, b, stride, pad, relu in layers]
        self.logit_bias = (None if logit_bias is None
                           else torch.as_tensor(logit_bias, device=self.dev))
        self.mean, self.std = pixel_mean, pixel_std
        self.batched = serve.batch(max_batch_size=max_batch_size,
                                   batch_wait_timeout_s=max_delay_ms / 1000)(self._run)

    async def _run(self, xs):
        torch = self.torch
        x = np.concatenate(xs)
        h = torch.as_tensor(((x.astype(np.float64) - self.mean) / self.std).astype(np.float32),
                            device=self.dev)
        with torch.inference_mode():
            for w, b, stride, pad, relu in self.layers:
                h = torch.nn.functional.conv2d(h, w, b, stride=stride, padding=pad)
                if relu:
                    h = torch.relu(h)
            h = h.reshape(len(x), -1)
            if self.logit_bias is not None:
                h = h + self.logit_bias
            out = h.cpu().numpy()
        return list(out)

    async def __call__(self, x):
        return await self.batched(x)


async def _torch_layers(factory):
    """The folded layers (weights, bias, stride, padding, relu) as the CPU device folds them."""
    import hipdnn_async as hd
    from hipdnn_async.demo._model import Network
    async with hd.Device("cpu") as dev:
        net = Network(dev)
        for group in ("params", "running"):
            for k, v in factory.weights[group].items():
                np.copyto(getattr(net, group)[k], v)
        folded = await net.fold()
    layers = [(f.w, f.bias, f.layer.stride, f.layer.padding, f.layer.bn == "relu")
              for f in folded.layers]
    return layers, folded.logit_bias


async def _serve_mode(serve, app, name, images, expected, args) -> dict:
    handle = serve.run(app, name=name, route_prefix=f"/{name}",
                       logging_config={"enable_access_log": False, "log_level": "WARNING"})

    async def call(x):
        return await handle.remote(x)

    try:
        await _drive(call, images, expected, args.clients, 2)             # warm up
        return await _drive(call, images, expected, args.clients, args.rounds)
    finally:
        serve.delete(name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="file from 'hipdnn-async demo --save'")
    p.add_argument("--device", default="cpu")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--max-delay-ms", type=float, default=2.0)
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    p.add_argument("--num-cpus", type=int, default=2)
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch anchor")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)

    import anyio
    import ray
    from ray import serve
    from sklearn.datasets import load_digits

    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model

    factory = digits_model(args.model, max_batch_size=args.max_batch_size)
    d = load_digits()
    images = d.images.astype(np.float32)[:, None]

    async def expected_of():
        import hipdnn_async as hd
        async with hd.Device("cpu") as dev:
            async with await factory(dev) as m:
                return (await m(images)).argmax(1)

    expected = anyio.run(expected_of)
    results = {"config": vars(args)}
    results["in_process"] = anyio.run(_in_process, factory, args.device, images, expected,
                                      args, backend="asyncio")
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": 0})
        gpu = args.device != "cpu"
        for k in args.replicas:
            cpus = 0 if gpu else min(1.0, args.num_cpus / k)
            app = hdray.deployment(factory, device=args.device, num_replicas=k,
                                   max_batch_size=args.max_batch_size,
                                   max_delay_ms=args.max_delay_ms,
                                   ray_actor_options={"num_cpus": cpus})
            results[f"serve_hipdnn_{k}"] = asyncio.run(
                _serve_mode(serve, app, f"hipdnn{k}", images, expected, args))
        if not args.no_torch:
            layers, logit_bias = anyio.run(_torch_layers, factory)
            w = factory.weights
            opts = {"num_gpus": 1} if gpu else {"num_cpus": min(1.0, args.num_cpus)}
            app = serve.deployment(TorchDigits, ray_actor_options=opts,
                                   max_ongoing_requests=2 * args.max_batch_size).bind(
                layers, logit_bias, w["pixel_mean"], w["pixel_std"], args.device,
                args.max_batch_size, args.max_delay_ms)
            results["serve_torch_1"] = asyncio.run(
                _serve_mode(serve, app, "torch1", images, expected, args))
    finally:
        serve.shutdown()
        ray.shutdown()

    print(f"digits model, {args.clients} clients x {args.rounds} requests of 1 image, "
          f"device {args.device}, max_batch_size {args.max_batch_size}, "
          f"max_delay_ms {args.max_delay_ms}")
    print(f"  {'mode':<16} {'req/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'wrong':>6}")
    for mode, r in results.items():
        if mode != "config":
            print(f"  {mode:<16} {r['requests_per_s']:>9.0f} {r['p50_ms']:>9.2f} "
                  f"{r['p99_ms']:>9.2f} {r['wrong']:>6}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if any(r["wrong"] for m, r in results.items() if m != "config") else 0


if __name__ == "__main__":
    sys.exit(main())
