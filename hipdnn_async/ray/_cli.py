"""``hipdnn-async serve``: the demo's digits model on a local Ray Serve app, 127.0.0.1 only.

    hipdnn-async demo --save digits.npz
    hipdnn-async serve --model digits.npz --replicas 2 [--device cpu|gpu:0] [--port 8000]

Starts a local Ray (its processes and Serve's HTTP proxy on 127.0.0.1), deploys
``hipdnn_async.ray.deployment(digits_model(FILE), ...)``, prints the URL and serves until
interrupted (Ctrl-C, SIGTERM); then Serve drains the requests in flight and Ray stops.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

__all__ = ["main", "parse_args"]

_HOST = "127.0.0.1"
_APP = "digits"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="hipdnn-async serve",
        description="Serve the demo's trained digits CNN (a file from 'hipdnn-async demo "
                    "--save FILE') from Ray Serve replicas on http://127.0.0.1:PORT/. POST "
                    "raw 8x8 images (N, 1, 8, 8), pixel values 0..16, as JSON or .npy; the "
                    "reply holds the logits (N, 10).")
    p.add_argument("--model", required=True, metavar="FILE",
                   help="weights written by 'hipdnn-async demo --save FILE'")
    p.add_argument("--replicas", type=int, default=1, help="Serve replicas, default 1")
    p.add_argument("--device", default="cpu",
                   help="cpu (default) or gpu:0 / cuda:0 / hip:0 (one GPU per replica)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port on 127.0.0.1, default 8000")
    p.add_argument("--max-batch-size", type=int, default=64, help="default 64")
    p.add_argument("--max-delay-ms", type=float, default=2.0, help="default 2.0")
    p.add_argument("--num-cpus", type=int, default=None,
                   help="CPUs Ray may use (default: this machine's, at least --replicas)")
    a = p.parse_args(argv)
    if a.replicas < 1:
        p.error(f"--replicas must be >= 1; got {a.replicas}")
    if not 0 < a.port < 65536:
        p.error(f"--port must be in 1..65535; got {a.port}")
    if a.max_batch_size < 1:
        p.error(f"--max-batch-size must be >= 1; got {a.max_batch_size}")
    if not 0.0 <= a.max_delay_ms < float("inf"):
        p.error(f"--max-delay-ms must be a finite number >= 0; got {a.max_delay_ms}")
    if a.num_cpus is not None and a.num_cpus < 1:
        p.error(f"--num-cpus must be >= 1; got {a.num_cpus}")
    return a


def _port_free(port: int) -> bool:
    import socket
    with socket.socket() as s:
        try:
            s.bind((_HOST, port))
        except OSError:
            return False
    return True


def _gpus_missing(kind: str, replicas: int) -> str:
    """Why this machine cannot give each of `replicas` replicas one GPU of `kind` ('' when
    it can, or for the CPU). Checked before Ray starts: a replica that Ray cannot place
    would wait for a GPU forever, and ``serve.run`` with it."""
    from ..runtime._kinds import ANY_GPU, KINDS, kind_title, ray_resource
    if ray_resource(kind) is None:
        return ""
    from .._device import devices
    from ..providers._registry import gpu_unavailable_reason
    hosts = [k for k, v in KINDS.items() if v.is_host]
    gpus = [d for d in devices() if d not in hosts
            and (kind == ANY_GPU or d.startswith(kind + ":"))]
    if not gpus:
        return (f"no {kind_title(kind)} device on this machine "
                f"({gpu_unavailable_reason(kind)}); use --device {hosts[0]}")
    if replicas > len(gpus):
        return (f"each replica takes one GPU and this machine has {len(gpus)} ({gpus}); "
                f"use --replicas {len(gpus)} or fewer")
    return ""


def main(argv=None) -> int:
    """Run ``hipdnn-async serve``; return the exit status (0 after an interrupt).

    Returns 2 when the extra is missing, the model file is bad, the device spec is
    malformed, the GPUs asked for (one per replica) are not on this machine, or the port
    is taken (each said on stderr), without starting Ray.
    """
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from ._deps import loopback_environment, require_ray
    # Before Ray is imported: every Ray process on the loopback address, no usage report.
    os.environ.update(loopback_environment())
    try:
        ray = require_ray("serve")
    except ImportError as exc:
        print(f"hipdnn-async serve: {exc}", file=sys.stderr)
        return 2
    from ..demo import digits_model
    from ..demo._common import DemoError
    from ._replica import deployment
    from ._session import parse_device
    try:
        kind, _ = parse_device(args.device)
        missing = _gpus_missing(kind, args.replicas)
        if missing:
            print(f"hipdnn-async serve: --device {args.device} --replicas {args.replicas}: "
                  f"{missing}", file=sys.stderr)
            return 2
        factory = digits_model(args.model, max_batch_size=args.max_batch_size)
    except (DemoError, ValueError, RuntimeError) as exc:
        print(f"hipdnn-async serve: {exc}", file=sys.stderr)
        return 2
    if not _port_free(args.port):
        print(f"hipdnn-async serve: port {args.port} on {_HOST} is in use; pick another "
              "with --port", file=sys.stderr)
        return 2

    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set())
                for s in (signal.SIGINT, signal.SIGTERM)}
    from ray import serve
    num_cpus = args.num_cpus or max(args.replicas, os.cpu_count() or 1)
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
             _node_ip_address=_HOST)
    try:
        serve.start(http_options={"host": _HOST, "port": args.port})
        app = deployment(factory, device=args.device, num_replicas=args.replicas,
                         max_batch_size=args.max_batch_size, max_delay_ms=args.max_delay_ms,
                         ray_actor_options={"num_cpus": min(1.0, num_cpus / args.replicas)})
        serve.run(app, name=_APP, route_prefix="/")
        url = f"http://{_HOST}:{args.port}/"
        print(f"hipdnn-async serve: digits model {args.model} on {args.replicas} "
              f"{args.device} replica(s) at {url}", flush=True)
        print("  POST (N, 1, 8, 8) images (pixels 0..16) as JSON or .npy; GET describes "
              "the input; Ctrl-C stops", flush=True)
        while not stop.wait(0.5):
            pass
        print("hipdnn-async serve: stopping (draining requests in flight)", flush=True)
        serve.shutdown()
    finally:
        ray.shutdown()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
