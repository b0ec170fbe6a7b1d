"""Vendor headers for the contract fakes, downloaded at test time and cached (never committed).

A header source names a package and the folder of its archive that holds the headers. The
NVIDIA ones are PyPI wheels (``pip download --no-deps``; only ``include/`` is extracted,
the wheel itself is deleted); the MIOpen/HIP harness adds Debian packages the same way
(:class:`HeaderSource` subclasses with their own ``fetch``).

Cache: ``$HIPDNN_ASYNC_CONTRACT_CACHE`` or ``~/.cache/hipdnn_async/contract``; each source
extracts into ``headers/<name>/`` with a ``source.json`` saying which file and version it
came from, and is reused from there. A lock file serialises concurrent test sessions.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HeaderSource", "WheelHeaders", "HeadersUnavailable", "cache_root", "ensure",
           "CUDA_RUNTIME", "CUDA_CRT", "CUDNN", "NVIDIA_SOURCES"]


class HeadersUnavailable(RuntimeError):
    """A header package could not be downloaded or read (the message says which and why)."""


def cache_root() -> Path:
    """Where downloaded headers and built fakes are kept (created on demand)."""
    env = os.environ.get("HIPDNN_ASYNC_CONTRACT_CACHE")
    root = Path(env) if env else Path.home() / ".cache" / "hipdnn_async" / "contract"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive advisory lock on ``path`` (other sessions wait)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class HeaderSource:
    """One package of headers: ``name`` (cache folder), ``include`` (the folder of the
    package that holds the headers, relative to the extracted tree)."""

    name: str
    include: str

    def fetch(self, dest: Path) -> dict:   # pragma: no cover - abstract
        """Extract the package's headers under ``dest``; return its description."""
        raise NotImplementedError


@dataclass(frozen=True)
class WheelHeaders(HeaderSource):
    """Headers inside a PyPI wheel; ``requirements`` are tried in order (the first that
    pip can download wins: e.g. an exact minor, then the nearest of the major)."""

    requirements: tuple = ()

    def fetch(self, dest: Path) -> dict:
        errors = []
        with tempfile.TemporaryDirectory(prefix="hipdnn_async_wheel_") as tmp:
            for req in self.requirements:
                cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                       "--no-cache-dir", "--disable-pip-version-check", "--quiet",
                       "--dest", tmp, req]
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
                except (OSError, subprocess.TimeoutExpired) as exc:
                    errors.append(f"{req}: {exc}")
                    continue
                wheels = sorted(Path(tmp).glob("*.whl"))
                if proc.returncode != 0 or not wheels:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
                    errors.append(f"{req}: pip download failed: {' '.join(tail)}")
                    continue
                wheel = wheels[0]
                prefix = self.include.rstrip("/") + "/"
                with zipfile.ZipFile(wheel) as zf:
                    members = [m for m in zf.namelist() if m.startswith(prefix) and not m.endswith("/")]
                    if not members:
                        raise HeadersUnavailable(f"{wheel.name} has no {prefix} folder")
                    for m in members:
                        zf.extract(m, dest)
                return {"requirement": req, "file": wheel.name,
                        "version": wheel.name.split("-")[1], "headers": len(members)}
        raise HeadersUnavailable(f"cannot download the {self.name} headers: " + "; ".join(errors))


# CUDA 13 (the H200 machine's cudart reports 13000; bench/results) and cuDNN 9.19 (its
# cuDNN, 91900); the nearest 9.x when 9.19 is gone from the index.
CUDA_RUNTIME = WheelHeaders("cuda-runtime-13", "nvidia/cu13/include",
                            ("nvidia-cuda-runtime>=13.0,<13.1", "nvidia-cuda-runtime>=13,<14"))
CUDA_CRT = WheelHeaders("cuda-crt-13", "nvidia/cu13/include",      # crt/host_defines.h
                        ("nvidia-cuda-crt>=13.0,<13.1", "nvidia-cuda-crt>=13,<14"))
CUDNN = WheelHeaders("cudnn-9", "nvidia/cudnn/include",
                     ("nvidia-cudnn-cu13>=9.19,<9.20", "nvidia-cudnn-cu13>=9,<10"))
NVIDIA_SOURCES = (CUDA_RUNTIME, CUDA_CRT, CUDNN)


def ensure(source: HeaderSource) -> tuple[Path, dict]:
    """(include directory, description) of ``source``, downloading it once.

    Raises
    ------
    HeadersUnavailable
        The download or extraction failed.
    """
    root = cache_root() / "headers"
    final = root / source.name
    meta_path = final / "source.json"
    with locked(root / f".{source.name}.lock"):
        if not meta_path.is_file():
            tmp = Path(tempfile.mkdtemp(prefix=f".{source.name}-", dir=root))
            try:
                meta = source.fetch(tmp)
                (tmp / "source.json").write_text(json.dumps(meta, indent=1))
                if final.exists():
                    shutil.rmtree(final)
                tmp.rename(final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        meta = json.loads(meta_path.read_text())
    include = final / source.include
    if not include.is_dir():
        raise HeadersUnavailable(f"{final} lacks {source.include}; delete it to download again")
    return include, meta
