"""Helpers of the Ray tests, imported by conftest.py and the test modules."""
import socket
import time
import warnings

import numpy as np
import pytest

from hipdnn_async.ray._deps import RAY_REQUIREMENT

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
