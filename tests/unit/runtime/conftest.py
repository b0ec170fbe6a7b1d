"""Builds the small fake vendor libraries of tests/unit/runtime/fakes with the system C
compiler (skipping with a reason where there is none)."""
from __future__ import annotations

import hashlib
import pathlib
import shutil
import subprocess

import pytest

FAKES = pathlib.Path(__file__).parent / "fakes"


@pytest.fixture(scope="session")
def build_fake(tmp_path_factory):
    """``build_fake(source, **defines) -> path`` of the shared library compiled from
    ``fakes/<source>.c`` with ``-D<name>=<value>`` for each define (None: ``-D<name>``)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the fake vendor libraries")
    out_dir = tmp_path_factory.mktemp("fake_libs")
    built = {}

    def build(source: str, **defines) -> str:
        flags = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in sorted(defines.items())]
        key = hashlib.sha1(" ".join([source] + flags).encode()).hexdigest()[:12]
        if key not in built:
            path = out_dir / f"lib{source}_{key}.so"
            subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(path),
                            str(FAKES / f"{source}.c"), *flags], check=True,
                           capture_output=True, text=True)
            built[key] = str(path)
        return built[key]

    return build
