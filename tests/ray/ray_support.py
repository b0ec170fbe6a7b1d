"""Helpers of the Ray tests, imported by conftest.py and the test modules."""
import socket
import time
import warnings

import numpy as np
import pytest

from hipdnn_async.ray._deps import RAY_REQUIREMENT

RUN_MARK_ENV = "HIPDNN_ASYNC_RAY_TEST_RUN"     # set by conftest.py before Ray starts
SKIP_REASON = f"the 'ray' extra is not installed ({RAY_REQUIREMENT}): pip install -e '.[ray]'"
LOOPBACK = "127.0.0.1"

# Tolerance of served vs local logits: the same float32 plans, but batches of other sizes
# (buckets) may sum in another order inside BLAS.
RTOL, ATOL = 1e-5, 1e-5


def ray_or_skip():
    """Import ray, ray.serve and ray.data, or skip the calling test with the reason."""
    try:
        # Ray's own imports warn (pydantic deprecations inside ray.serve); those are
        # Ray's to fix, not failures of ours (pytest turns warnings into errors).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import ray
            import ray.data  # noqa: F401
            import ray.serve  # noqa: F401
    except ImportError:
        pytest.skip(SKIP_REASON)
    return ray


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_until(predicate, *, timeout_s: float, what: str, period_s: float = 0.5):
    """Poll `predicate` until true; fail the test after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(period_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def local_logits(path, images) -> np.ndarray:
    """Logits of raw `images` by the saved network's folded plans, ``plan.execute`` on the CPU.

    Independent of the serving path (no batcher, no Ray): ``Network.predict_folded``
    builds one plan per layer at the full batch size and executes it.
    """
    import anyio

    import hipdnn_async as hd
    from hipdnn_async.demo import load_weights
    from hipdnn_async.demo._model import Network

    w = load_weights(path)
    x = ((np.asarray(images, np.float64) - w["pixel_mean"]) / w["pixel_std"]).astype(
        np.float32)

    async def run():
        async with hd.Device("cpu") as dev:
            net = Network(dev)
            for group in ("params", "running"):
                for k, v in w[group].items():
                    np.copyto(getattr(net, group)[k], v)
            return await net.predict_folded(x)

    return anyio.run(run)


def ray_processes(name: str = "") -> list[tuple[int, int, str]]:
    """(pid, ppid, command) of the live processes of this test run's Ray (their environment
    holds ``RUN_MARK_ENV``'s value, and they are Ray's: a ``ray::`` worker or a program of
    the ray package, e.g. raylet, gcs_server, the dashboard and its agents) whose command
    contains `name`. Reads /proc (Linux); an empty list elsewhere."""
    import os
    mark = os.environ.get(RUN_MARK_ENV, "").encode()
    found = []
    if not mark or not os.path.isdir("/proc"):
        return found
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark not in f.read():
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError, IndexError):   # gone meanwhile, or not ours to read
            continue
        rays = cmd.startswith("ray::") or f"{os.sep}ray{os.sep}" in cmd
        if rays and name in cmd and state != "Z":   # a zombie has exited already
            found.append((int(pid), int(ppid), cmd))
    return found
