"""Locating and loading the vendor libraries (CUDA runtime, cuDNN) at run time.

Search order for each library (shared/reference/vendor-c-apis.md s.3, as cuda.pathfinder):
an environment override (``HIPDNN_ASYNC_CUDART`` / ``HIPDNN_ASYNC_CUDNN``: a path), the
NVIDIA wheels in ``sys.path`` (``nvidia/cu13/lib``, ``nvidia/cuda_runtime/lib``,
``nvidia/cudnn/lib``), then the system loader by soname. Each outcome is recorded
(``LoadedLibrary``) and logged; failures are kept as reasons for ``hipdnn-async info``.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass

__all__ = ["LoadedLibrary", "load_cuda", "cuda_status"]

log = logging.getLogger("hipdnn_async")

_CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12")
_CUDNN_SONAMES = ("libcudnn.so.9",)
_WHEEL_DIRS = {"cudart": ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib"),
               "cudnn": ("nvidia/cudnn/lib",)}


@dataclass(frozen=True)
class LoadedLibrary:
    """Where a library was loaded from: ``path``, ``found_via`` (env, site-packages,
    system) and ``version`` (the library's own integer version)."""

    name: str
    path: str
    found_via: str
    version: int


_lock = threading.Lock()
_state: dict = {}


def _candidates(kind: str, env: str, sonames) -> list[tuple[str, str]]:
    out = []
    if os.environ.get(env):
        out.append((os.environ[env], "env"))
    for base in sys.path:
        for sub in _WHEEL_DIRS[kind]:
            for so in sonames:
                p = os.path.join(base or ".", sub, so)
                if os.path.isfile(p):
                    out.append((os.path.abspath(p), "site-packages"))
    out.extend((so, "system") for so in sonames)
    return out


def _load_first(kind, env, sonames, loader):
    """(path, found_via, loader's result, errors) of the first candidate that loads. An
    explicit override that fails is final: no silent fallback to another library."""
    errors = []
    for path, via in _candidates(kind, env, sonames):
        try:
            return path, via, loader(path), errors
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            if via == "env":
                errors[-1] = f"{env}={path} does not load: {exc}"
                break
    return None, None, None, errors


def load_cuda() -> dict:
    """Load the CUDA runtime and cuDNN once; return the state dict.

    Keys: ``ok`` (bool), ``reason`` (str, why not), ``cudart``/``cudnn``
    (LoadedLibrary), ``device_count`` (int). Never raises.
    """
    with _lock:
        if _state:
            return _state
        _state.update(ok=False, reason="", device_count=0)
        try:
            _load_cuda_locked()
        except Exception as exc:  # noqa: BLE001 - a broken library must not break the CPU
            _state["ok"] = False
            _state["reason"] = f"loading the CUDA libraries failed: {type(exc).__name__}: {exc}"
        return _state


def _load_cuda_locked() -> None:
    from . import _cudnn, _gpu
    if _gpu is None or _cudnn is None:  # runtime/__init__ found no compiled bindings
        _state["reason"] = ("the GPU bindings (hipdnn_async.runtime._gpu/_cudnn) are not "
                            "built; run `pip install -e .`")
        return
    path, via, _, errors = _load_first("cudart", "HIPDNN_ASYNC_CUDART", _CUDART_SONAMES,
                                       lambda p: _gpu.load(p, "cuda"))
    if path is None:
        _state["reason"] = "no CUDA runtime (libcudart.so.13/.12) loads: " + "; ".join(errors[-3:])
        return
    _state["cudart"] = LoadedLibrary("cudart", path, via, _gpu.runtime_version())
    n = _gpu.device_count()
    _state["device_count"] = n
    if n == 0:
        _state["reason"] = f"the CUDA runtime ({path}) sees no GPU on this machine"
        return
    path, via, record, errors = _load_first("cudnn", "HIPDNN_ASYNC_CUDNN", _CUDNN_SONAMES,
                                            _cudnn.load)
    if path is None:
        _state["reason"] = "no cuDNN 9 (libcudnn.so.9) loads: " + "; ".join(errors[-3:])
        return
    version = record[1]
    if version // 10000 != 9:
        _state["reason"] = f"cuDNN at {path} is version {version}; cuDNN 9 is required"
        return
    _state["cudnn"] = LoadedLibrary("cudnn", path, via, version)
    _state["ok"] = True
    log.info("loaded CUDA runtime %s (%s) and cuDNN %s (%s); %d device(s)",
             _state["cudart"].path, _state["cudart"].found_via, path, via, n)


def cuda_status() -> dict:
    """The load state without loading again (empty before the first ``load_cuda``)."""
    return dict(_state)
