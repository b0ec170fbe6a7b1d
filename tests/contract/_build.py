"""Compile the fake vendor libraries with the system C compiler against the real headers.

``build_nvidia(headers)`` returns :class:`FakeLibs` (paths of ``libfakecudart.so`` and
``libfakecudnn.so``). Sources are every ``*.c`` of ``fakes/common`` + ``fakes/cudart``
(runtime) and of ``fakes/cudnn`` (DNN library, linked against the runtime fake so that
both log into one call log and the DNN kernels run on the runtime's streams): a new
vendor function is a C function in a new or existing file there, nothing else.

Builds are cached by a hash of sources, generated checks, headers' versions and flags
(``<cache>/build/<hash>/``), so a session that changes nothing compiles nothing.

The MIOpen/HIP harness calls :func:`compile_library` the same way (``lang="c++"`` for
``miopen.h``, which compiles only as C++).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import _abi, _headers

__all__ = ["BuildError", "FakeLibs", "compiler", "compile_library", "build_nvidia", "FAKES"]

FAKES = Path(__file__).resolve().parent / "fakes"
COMMON = FAKES / "common"
CFLAGS = ("-std=gnu11", "-O2", "-g", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Werror",
          "-Wno-unused-parameter", "-Wno-missing-field-initializers")
CXXFLAGS = ("-std=gnu++17", "-O2", "-g", "-fPIC", "-pthread", "-Wall", "-Wextra", "-Werror",
            "-Wno-unused-parameter", "-Wno-missing-field-initializers")


class BuildError(RuntimeError):
    """The compiler rejected a fake: the message holds the command and its output."""


def compiler(lang: str = "c") -> str:
    """``$CC`` / ``$CXX``, else ``cc`` / ``c++``; BuildError when none is on PATH."""
    name = os.environ.get("CC" if lang == "c" else "CXX") or ("cc" if lang == "c" else "c++")
    exe = shutil.which(shlex.split(name)[0])
    if exe is None:
        raise BuildError(f"no {lang} compiler: `{name}` is not on PATH (apt-get install gcc)")
    return name


@dataclass(frozen=True)
class FakeLibs:
    """Built fakes: ``cudart`` and ``cudnn`` paths, the header sources they were compiled
    against (``headers``: name -> description), the build directory."""

    cudart: str
    cudnn: str
    headers: dict
    build_dir: str

    def env(self) -> dict:
        """The loader's override variables pointing at the fakes."""
        return {"HIPDNN_ASYNC_CUDART": self.cudart, "HIPDNN_ASYNC_CUDNN": self.cudnn}


def compile_library(out: Path, sources, *, includes=(), system_includes=(), link_dirs=(),
                    libs=(), lang: str = "c", extra=()) -> None:
    """Compile ``sources`` into the shared library ``out`` (soname = its file name).

    Vendor headers go in ``system_includes`` (-isystem: their own warnings are not ours).

    Raises
    ------
    BuildError
        The compiler failed (its output is in the message).
    """
    cmd = shlex.split(compiler(lang)) + list(CFLAGS if lang == "c" else CXXFLAGS)
    cmd += ["-shared", f"-Wl,-soname,{out.name}", "-Wl,-rpath,$ORIGIN", "-o", str(out)]
    cmd += [f"-I{p}" for p in includes] + [a for p in system_includes for a in ("-isystem", str(p))]
    cmd += [str(s) for s in sources]
    cmd += [f"-L{p}" for p in link_dirs] + [f"-l{lib}" for lib in libs] + ["-lm"] + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"building {out.name} failed:\n$ {shlex.join(cmd)}\n"
                         f"{proc.stdout}{proc.stderr}")


SIGNATURE_FLAGS = ("-std=gnu11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wconversion",
                   "-Wsign-conversion", "-Wdouble-promotion", "-Wno-unused-parameter")


def check_signatures(family: str, includes, headers: dict, out_dir: Path) -> None:
    """Compile our function tables of ``family`` against the vendor prototypes
    (``_abi.signature_checks``); BuildError naming the disagreeing call otherwise."""
    src = "".join(f"#include <{h}>\n" for h in includes) + _abi.signature_checks(family)
    path = out_dir / f"signatures_{family}.c"
    path.write_text(src)
    cmd = shlex.split(compiler("c")) + list(SIGNATURE_FLAGS) + [str(path)]
    cmd += [a for v in headers.values() for a in ("-isystem", str(v[0]))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"our {family} function declarations disagree with the headers:\n"
                         f"$ {shlex.join(cmd)}\n{proc.stderr}")


def _digest(parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _sources(*dirs) -> list[Path]:
    return [p for d in dirs for p in sorted(Path(d).glob("*.c"))]


def build_nvidia(headers: dict) -> FakeLibs:
    """Build (or reuse) libfakecudart.so and libfakecudnn.so.

    Parameters
    ----------
    headers : dict
        source name -> (include dir, description), as ``_headers.ensure`` returns.

    Raises
    ------
    BuildError
        A fake does not compile against the headers, or a check of ours fails.
    """
    cudart_checks = _abi.checks_header("cudart")
    cudnn_checks = _abi.checks_header("cudnn")
    rt_src = _sources(COMMON, FAKES / "cudart")
    dnn_src = _sources(FAKES / "cudnn")
    all_files = sorted(set(rt_src + dnn_src + list(FAKES.rglob("*.h"))))
    signatures = _abi.signature_checks("cudart") + _abi.signature_checks("cudnn")
    key = _digest([compiler("c"), CFLAGS, cudart_checks, cudnn_checks, signatures,
                   json.dumps({k: v[1] for k, v in headers.items()}, sort_keys=True)]
                  + [f.relative_to(FAKES).as_posix().encode() + f.read_bytes() for f in all_files])
    root = _headers.cache_root() / "build"
    final = root / key
    meta = {k: v[1] for k, v in headers.items()}
    if not (final / "libfakecudnn.so").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
        try:
            check_signatures("cudart", ("cuda_runtime_api.h",), headers, tmp)
            check_signatures("cudnn", ("cudnn.h",), headers, tmp)
            (tmp / "fake_cudart_checks.h").write_text(cudart_checks)
            (tmp / "fake_cudnn_checks.h").write_text(cudnn_checks)
            inc = [tmp, COMMON]
            sys_inc = [v[0] for v in headers.values()]
            compile_library(tmp / "libfakecudart.so", rt_src, includes=inc, system_includes=sys_inc)
            compile_library(tmp / "libfakecudnn.so", dnn_src, includes=inc, system_includes=sys_inc,
                            link_dirs=[tmp], extra=[str(tmp / "libfakecudart.so")])
            (tmp / "headers.json").write_text(json.dumps(meta, indent=1))
            try:
                tmp.rename(final)
            except OSError:        # another session built the same key meanwhile
                pass
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return FakeLibs(str(final / "libfakecudart.so"), str(final / "libfakecudnn.so"), meta,
                    str(final))


def header_constants(names, headers: dict, includes=("cuda_runtime_api.h", "cudnn.h"),
                     defines=()) -> dict:
    """The headers' own values of enumerators / macros ``names`` (compiled and run once
    with the system compiler): the independent truth the tests compare logs against.
    ``defines`` are extra compiler flags (``-D__HIP_PLATFORM_AMD__`` for the HIP headers).

    Raises
    ------
    BuildError
        A name is not in the headers, or the probe does not build.
    """
    names = sorted(set(names))
    src = "".join(f"#include <{h}>\n" for h in includes) + "#include <stdio.h>\nint main(void) {\n"
    src += "".join(f'    printf("%s %lld\\n", "{n}", (long long)({n}));\n' for n in names)
    src += "    return 0;\n}\n"
    key = _digest([compiler("c"), src, *defines,
                   json.dumps({k: v[1] for k, v in headers.items()}, sort_keys=True)])
    root = _headers.cache_root() / "probe"
    root.mkdir(parents=True, exist_ok=True)
    out_json = root / f"{key}.json"
    if not out_json.is_file():
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            c_file, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
            c_file.write_text(src)
            cmd = shlex.split(compiler("c")) + ["-std=gnu11", *defines, "-o", str(exe), str(c_file)]
            cmd += [a for v in headers.values() for a in ("-isystem", str(v[0]))]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BuildError(f"header probe failed:\n$ {shlex.join(cmd)}\n{proc.stderr}")
            run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
            values = {n: int(v) for n, v in (line.split() for line in run.stdout.splitlines())}
            out_json.write_text(json.dumps(values))
    return json.loads(out_json.read_text())


def compile_check(text: str, headers: dict, includes=("cuda_runtime_api.h", "cudnn.h")) -> None:
    """Syntax-check C ``text`` after the vendor ``includes`` (BuildError on failure):
    for tests that prove a check fails when it should."""
    src = "".join(f"#include <{h}>\n" for h in includes) + text
    with tempfile.TemporaryDirectory(prefix="hipdnn_async_check_") as tmp:
        path = Path(tmp) / "check.c"
        path.write_text(src)
        cmd = shlex.split(compiler("c")) + list(SIGNATURE_FLAGS) + [str(path)]
        cmd += [a for v in headers.values() for a in ("-isystem", str(v[0]))]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(proc.stderr)
