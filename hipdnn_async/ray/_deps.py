"""The optional dependency: Ray Serve and Ray Data, imported only when asked for."""
from __future__ import annotations

import importlib
import os

__all__ = ["RAY_REQUIREMENT", "require_ray", "loopback_environment"]

# The pin of pyproject.toml's "ray" extra (the minor version the tests ran on).
RAY_REQUIREMENT = "ray[serve,data]>=2.60,<2.61"


def require_ray(*parts: str):
    """Import and return ``ray`` (and each of `parts`, e.g. ``"serve"``, ``"data"``).

    Raises
    ------
    ImportError
        Ray or one of its parts is not installed; the message names the extra.
    """
    try:
        ray = importlib.import_module("ray")
        if not hasattr(ray, "init"):    # a folder named ray on sys.path, not Ray
            raise ImportError(f"'ray' at {list(getattr(ray, '__path__', []))} is not Ray")
        for part in parts:
            importlib.import_module(f"ray.{part}")
    except ImportError as exc:
        what = "Ray " + " and Ray ".join(p.capitalize() for p in parts) if parts else "Ray"
        raise ImportError(f"hipdnn_async.ray needs {what} ({RAY_REQUIREMENT}): install the "
                          f"extra with pip install 'hipdnn_async[ray]' (from a checkout: "
                          f"pip install -e '.[ray]'); import failed: {exc}") from exc
    return ray


def loopback_environment() -> dict[str, str]:
    """Environment settings that keep a local Ray cluster on 127.0.0.1 and quiet.

    Set them (``os.environ.update``) before ``import ray`` and ``ray.init``: Ray reads
    them at import and its processes inherit them. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
    makes every Ray process take the loopback address as the node address (Ray's
    single-machine mode; ``ray._private.services.get_node_ip_address``), where
    ``_node_ip_address`` alone still left agents listening on the host's address;
    ``RAY_USAGE_STATS_ENABLED=0`` stops the usage report and its cloud-metadata probes.
    Values already in the environment are kept.
    """
    want = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    return {k: os.environ.get(k, v) for k, v in want.items()}
