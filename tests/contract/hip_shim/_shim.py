"""Build the hip-on-CUDA shim with the system C compiler.

``build(out_dir, cudart, cuda_includes)`` compiles ``hip_on_cuda.c`` (the HIP side, against
``hip_min.h``, or AMD's ``hip_runtime_api.h`` with ``hip_include``) and ``cuda_side.c``
(the CUDA side, against NVIDIA's ``cuda_runtime_api.h`` in ``cuda_includes``) into
``libhip_on_cuda.so``, linked against the libcudart at ``cudart`` (the contract harness's
fake here, the real one on a GPU machine; its directory is the library's rpath).

``find_cuda()`` locates a real libcudart and its headers on a GPU machine the way
``hipdnn_async.runtime._vendors`` finds the runtime (the NVIDIA wheels under each
``sys.path`` entry), the headers in the same wheel or in the CUDA toolkit (``$CUDA_HOME``,
``/usr/local/cuda``, next to ``nvcc``). Nothing here downloads anything.
"""
from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from .. import _build

__all__ = ["SHIM_DIR", "SOURCES", "LIBRARY", "build", "check_declarations", "find_cuda",
           "CudaNotFound"]

SHIM_DIR = Path(__file__).resolve().parent
SOURCES = (SHIM_DIR / "hip_on_cuda.c", SHIM_DIR / "cuda_side.c")
LIBRARY = "libhip_on_cuda.so"
# what hipcc defines: hip_runtime_api.h wants exactly one platform
_HIP_PLATFORM = "-D__HIP_PLATFORM_AMD__"


class CudaNotFound(RuntimeError):
    """No libcudart, or no cuda_runtime_api.h / crt/host_defines.h, on this machine."""


def build(out_dir, cudart: str, cuda_includes, *, hip_include=None, strict: bool = True) -> Path:
    """Compile the shim into ``out_dir/libhip_on_cuda.so``; its path.

    Parameters
    ----------
    out_dir : path
        Created if missing.
    cudart : str
        Path of the libcudart to link (its directory becomes the rpath).
    cuda_includes : sequence of path
        Directories holding ``cuda_runtime_api.h`` and ``crt/host_defines.h``.
    hip_include : path, optional
        A ROCm include directory: compile the HIP side against AMD's real
        ``hip/hip_runtime_api.h`` instead of ``hip_min.h``.
    strict : bool, optional
        Warnings are errors (the contract harness's flags). The GPU machine's build passes
        False: another compiler's new warning must not stop the GPU run (the CPU build
        holds the code to -Werror). Default True.

    Raises
    ------
    contract._build.BuildError
        The compiler failed (its output is in the message).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / LIBRARY
    cudart = os.path.abspath(cudart)
    flags = [f for f in _build.CFLAGS if strict or f != "-Werror"]
    cc = shlex.split(_build.compiler("c")) + flags + [f"-I{SHIM_DIR}"]
    cuda_inc = [a for p in cuda_includes for a in ("-isystem", str(p))]
    hip_o, cuda_o = out_dir / "hip_on_cuda.o", out_dir / "cuda_side.o"
    if hip_include is not None:
        # AMD's header for the HIP side only: cuda_side.c never sees it (they clash)
        _compile(cc + ["-DHIP_SHIM_REAL_HEADERS", _HIP_PLATFORM, "-isystem", str(hip_include),
                       "-c", str(SOURCES[0]), "-o", str(hip_o)])
    else:
        _compile(cc + ["-c", str(SOURCES[0]), "-o", str(hip_o)])
    _compile(cc + cuda_inc + ["-c", str(SOURCES[1]), "-o", str(cuda_o)])
    _compile(cc + ["-shared", f"-Wl,-soname,{LIBRARY}", "-o", str(out), str(hip_o), str(cuda_o),
                   cudart, f"-Wl,-rpath,{os.path.dirname(cudart)}"])
    return out


def _compile(cmd) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise _build.BuildError(f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")


def check_declarations(hip_include, where, *, shim_dir=SHIM_DIR) -> str:
    """Compile and run ``hip_min_check.c`` against a ROCm include directory: hip_min.h's
    values and layouts must be the header's. Its output (the HIP_VERSION checked).

    Raises
    ------
    contract._build.BuildError
        A value or layout differs (the compiler or the program says which).
    """
    where, shim_dir = Path(where), Path(shim_dir)
    exe = where / "hip_min_check"
    cmd = shlex.split(_build.compiler("c")) + ["-std=gnu11", "-Wall", "-Wextra", "-Werror"]
    _compile(cmd + [_HIP_PLATFORM, f"-I{shim_dir}", "-isystem", str(hip_include),
                    str(shim_dir / "hip_min_check.c"), "-o", str(exe)])
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    if run.returncode != 0:
        raise _build.BuildError(f"hip_min_check: {run.stdout}{run.stderr}")
    return run.stdout.strip()


# ---------------------------------------------------------------------- a GPU machine's CUDA
_CUDART = (("nvidia/cu13/lib", "libcudart.so.13"), ("nvidia/cuda_runtime/lib", "libcudart.so.12"))
_WHEEL_INCLUDES = ("nvidia/cu13/include", "nvidia/cuda_runtime/include", "nvidia/cuda_nvcc/include",
                   "nvidia/cuda_crt/include")


def find_cuda() -> tuple[str, list[str]]:
    """(libcudart path, include directories) of this machine's CUDA, wheels first.

    Raises
    ------
    CudaNotFound
        No libcudart in the NVIDIA wheels (``HIPDNN_ASYNC_CUDART`` overrides), or no
        directory with ``cuda_runtime_api.h`` and ``crt/host_defines.h``.
    """
    bases = [p for p in sys.path if p and os.path.isdir(p)]
    cudart = os.environ.get("HIPDNN_ASYNC_CUDART") or ""
    lib_dir = os.path.dirname(cudart) if cudart else ""
    if not cudart:
        for base in bases:
            for sub, so in _CUDART:
                path = os.path.join(base, sub, so)
                if os.path.isfile(path):
                    cudart, lib_dir = path, os.path.dirname(path)
                    break
            if cudart:
                break
    if not cudart or not os.path.isfile(cudart):
        raise CudaNotFound("no libcudart.so.13/.12 under nvidia/cu13/lib or "
                           "nvidia/cuda_runtime/lib of any sys.path entry "
                           f"(HIPDNN_ASYNC_CUDART={os.environ.get('HIPDNN_ASYNC_CUDART', '')!r})")
    dirs = [os.path.normpath(os.path.join(lib_dir, "..", "include"))]
    dirs += [os.path.join(b, sub) for b in bases for sub in _WHEEL_INCLUDES]
    nvcc = shutil.which("nvcc")
    toolkits = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""),
                "/usr/local/cuda", os.path.dirname(os.path.dirname(nvcc)) if nvcc else ""]
    toolkits += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    dirs += [os.path.join(t, "include") for t in toolkits if t]
    dirs += [os.path.join(t, "targets", "x86_64-linux", "include") for t in toolkits if t]
    found, seen = [], set()
    for d in dirs:
        d = os.path.abspath(d)
        if d in seen or not os.path.isdir(d):
            continue
        seen.add(d)
        if (os.path.isfile(os.path.join(d, "cuda_runtime_api.h"))
                or os.path.isfile(os.path.join(d, "crt", "host_defines.h"))):
            found.append(d)
    have_api = any(os.path.isfile(os.path.join(d, "cuda_runtime_api.h")) for d in found)
    have_crt = any(os.path.isfile(os.path.join(d, "crt", "host_defines.h")) for d in found)
    if not (have_api and have_crt):
        raise CudaNotFound(f"CUDA headers incomplete (cuda_runtime_api.h: {have_api}, "
                           f"crt/host_defines.h: {have_crt}); looked in {sorted(seen)}")
    return cudart, found
