"""Build the fake HIP runtime and the fake MIOpen against the real headers of one ROCm release.

``build_rocm(source, include)`` first compiles the ABI checks of our bindings
(``_abi_rocm.checks_source``, C++, syntax only) against the headers, then
``libamdhip64.so.<major>`` (C: ``fakes/fake_hip.c`` + the shared core
``tests/contract/fakes/common/fake_core.c``) and ``libMIOpen.so.1`` (C++:
``fakes/fake_miopen.cpp``, linked against that fake HIP as the real one links
libamdhip64, ``$ORIGIN`` rpath). A failure of any step is a ``BuildError`` with the
compiler's output. Builds are cached like the NVIDIA fakes' (``<cache>/build/<hash>/``).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import _build, _headers
from . import _abi_rocm

__all__ = ["RocmLibs", "build_rocm", "FAKES"]

FAKES = Path(__file__).resolve().parent / "fakes"
_DEFINES = ("-D__HIP_PLATFORM_AMD__",)   # what hipcc defines (hip_common.h wants one platform)


@dataclass(frozen=True)
class RocmLibs:
    """Built fakes of one header set: ``hip`` and ``miopen`` paths, its ``label``
    (``"miopen-3.5.1"``), ``miopen_version``, ``headers`` (description), ``build_dir``."""

    hip: str
    miopen: str
    label: str
    miopen_version: tuple
    headers: dict
    build_dir: str

    def env(self) -> dict:
        """The loader's override variables pointing at the fakes."""
        return {"HIPDNN_ASYNC_HIP_RUNTIME": self.hip, "HIPDNN_ASYNC_MIOPEN": self.miopen}


def _syntax_check(source_text: str, include: Path, where: Path) -> None:
    unit = where / "abi_checks.cpp"
    unit.write_text(source_text)
    cmd = shlex.split(_build.compiler("c++")) + ["-std=gnu++17", "-fsyntax-only", *_DEFINES,
                                                 "-isystem", str(include), str(unit)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise _build.BuildError(f"our MIOpen/HIP declarations disagree with the headers of "
                                f"{include}:\n$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")


def build_rocm(source, include: Path, meta: dict) -> RocmLibs:
    """Build (or reuse) the two fakes for ``source`` (a ``_debian.DebianHeaders``) whose
    headers are in ``include``.

    Raises
    ------
    BuildError
        A check of ours fails, or a fake does not compile against the headers.
    """
    checks = _abi_rocm.checks_source()
    common = _build.COMMON
    hip_src = [common / "fake_core.c", FAKES / "fake_hip.c"]
    dnn_src = [FAKES / "fake_miopen.cpp"]
    files = sorted(set(hip_src + dnn_src + list(common.glob("*.h")) + list(FAKES.glob("*.h"))))
    key = _build._digest([_build.compiler("c"), _build.compiler("c++"), _build.CFLAGS,
                          _build.CXXFLAGS, _DEFINES, checks, source.name,
                          json.dumps(meta, sort_keys=True)]
                         + [f.name.encode() + f.read_bytes() for f in files])
    hip_name = f"libamdhip64.so.{source.hip_major}"
    root = _headers.cache_root() / "build"
    final = root / f"{source.name}-{key}"
    if not (final / "libMIOpen.so.1").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-rocm-", dir=root))
        try:
            _syntax_check(checks, include, tmp)
            sys_inc = [include]
            _build.compile_library(tmp / hip_name, hip_src, includes=[common],
                                   system_includes=sys_inc, extra=list(_DEFINES))
            _build.compile_library(tmp / "libMIOpen.so.1", dnn_src, includes=[common],
                                   system_includes=sys_inc, lang="c++",
                                   extra=list(_DEFINES) + [str(tmp / hip_name)])
            (tmp / "headers.json").write_text(json.dumps(meta, indent=1))
            try:
                tmp.rename(final)
            except OSError:        # another session built the same key meanwhile
                pass
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return RocmLibs(str(final / hip_name), str(final / "libMIOpen.so.1"), source.label,
                    tuple(source.miopen), meta, str(final))
