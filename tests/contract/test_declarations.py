"""Every declaration of the vendor bindings is covered by a header check and names the
header and version it was matched against (issue 12, "How it is checked").

The ABI checks themselves live in ``_abi.py`` (CUDA runtime, cuDNN legacy and backend) and
``hip/_abi_rocm.py`` (HIP runtime, MIOpen); ``test_abi.py`` and ``hip/test_miopen_abi.py``
prove they fail on a wrong value. This module makes sure nothing escapes them: a constant,
function-pointer type, struct or compile-time value added to ``src_pyx`` without a check
fails here, and so does a comment naming a header version the tests do not check.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hipdnn_async.runtime import _gpu, _miopen

from . import _abi, _abi_onednn
from .hip import _abi_rocm, _debian

SRC = _abi.SRC_PYX
MODULE = "hipdnn_async.runtime."

# ------------------------------------------------------------------ versions named
_HEADER = re.compile(r"\b[\w/]+\.h\b")
_ASSIGN = re.compile(r"^([A-Z][A-Za-z0-9_]*(?:\s*,\s*[A-Z][A-Za-z0-9_]*)*)\s*=(?!=)")


def _blocks(path: Path):
    """(names assigned, the comment they stand under) for every module-level assignment of
    upper-case names: the nearest run of full-line comments above it (within its block of
    lines, which a blank line or a ``# ---`` rule ends) and its own trailing comment."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        m = _ASSIGN.match(line)
        if not m:
            continue
        j = i - 1
        while j >= 0 and lines[j].strip() and not lines[j].lstrip().startswith("#"):
            j -= 1                      # other assignments of the block, continuation lines
        comment = []
        while j >= 0 and lines[j].lstrip().startswith("#") and not lines[j].startswith("# ---"):
            comment.insert(0, lines[j].split("#", 1)[1])
            j -= 1
        own = line.split("#", 1)[1] if "#" in line else ""
        yield [n.strip() for n in m.group(1).split(",")], " ".join(comment + [own])


def _cudnn_version(nvidia_headers) -> str:
    """The cuDNN version of the headers the checks compile against (9.19.1)."""
    return ".".join(nvidia_headers["cudnn-9"][1]["version"].split(".")[:3])


def _cuda_version(nvidia_headers) -> str:
    return ".".join(nvidia_headers["cuda-runtime-13"][1]["version"].split(".")[:2])


_MIOPEN_VERSIONS = [".".join(map(str, s.miopen)) for s in _debian.ROCM_SOURCES]
_ROCM_VERSIONS = [s.rocm for s in _debian.ROCM_SOURCES]


@pytest.mark.parametrize("source,module", [
    ("_cudnn.pyx", "_cudnn"), ("_cudnn_backend.pyx", "_cudnn_backend"), ("_miopen.pyx", "_miopen"),
])
def test_every_constant_names_its_header_and_checked_version(nvidia_headers, source, module):
    versions = ([_cudnn_version(nvidia_headers)] if module.startswith("_cudnn")
                else _MIOPEN_VERSIONS)
    public = set(_abi.public_constants(MODULE + module))
    seen, bad = set(), []
    for names, text in _blocks(SRC / source):
        names = [n for n in names if n in public]
        if not names:
            continue
        seen.update(names)
        if not _HEADER.search(text) or not all(v in text for v in versions):
            bad.append(f"{names[0]}: {text.strip()[:80]!r}")
    assert public <= seen, f"constants not assigned at module level: {sorted(public - seen)}"
    assert not bad, (f"constants whose comment block does not name the header and "
                     f"{' and '.join(versions)}: {bad}")


def test_the_runtime_tables_name_the_headers_and_versions_checked(nvidia_headers):
    assert _gpu.CUDA_VERSIONS == f"CUDA {_cuda_version(nvidia_headers)}"
    assert _gpu.HIP_VERSIONS == "ROCm " + ", ".join(_ROCM_VERSIONS)
    # the ROCm 5 table names the HIP-only header set hip/test_hip5_abi.py checks it against
    assert _gpu.HIP5_VERSIONS == "ROCm " + _debian.HIP5_SOURCE.rocm
    for table in ("CUDA_CONSTANTS", "HIP_CONSTANTS", "HIP5_CONSTANTS"):
        for name, (_value, c_name, header) in getattr(_gpu, table).items():
            assert _HEADER.fullmatch(header), f"_gpu.{table}[{name!r}]: header {header!r}"
            assert c_name.startswith(("cuda", "hip", "(")), f"_gpu.{table}[{name!r}]: {c_name!r}"


@pytest.mark.parametrize("source", ["_cudnn.pxd", "_cudnn_backend.pxd", "_gpu_api.pxd",
                                    "_miopen.pxd"])
def test_every_declaration_file_names_its_headers_and_checked_versions(nvidia_headers, source):
    doc = (SRC / source).read_text().split('"""')[1]
    versions = {"_cudnn.pxd": [_cudnn_version(nvidia_headers)],
                "_cudnn_backend.pxd": [_cudnn_version(nvidia_headers)],
                "_gpu_api.pxd": [f"CUDA {_cuda_version(nvidia_headers)}", *_ROCM_VERSIONS],
                "_miopen.pxd": _MIOPEN_VERSIONS}[source]
    assert _HEADER.search(doc), f"{source}: the docstring names no header"
    missing = [v for v in versions if v not in " ".join(doc.split())]
    assert not missing, f"{source}: the docstring does not name the checked version(s) {missing}"


# ------------------------------------------------------------------ nothing escapes the checks
def test_every_function_pointer_type_is_in_a_checked_table():
    """A typedef outside every table would be checked by nothing."""
    tables = _abi.function_tables()
    used = {(stem, t) for stem, group in _abi._groups().items()
            for name, fields in _abi.function_tables(group).items() if name in tables
            for t, _f, _a in _abi.parse_structs(group)[name][0]}
    declared = {(stem, t) for stem, group in _abi._groups().items()
                for t in _abi.parse_function_types(group)}
    assert declared, "no function-pointer ctypedef found in src_pyx"
    assert sorted(declared - used) == [], "function-pointer types no checked table uses"
    assert set(tables) <= set(_abi.FUNCTION_TABLES)


# Structs of ours that mirror nothing: the reason is the check.
_OWN_STRUCTS = {"RuntimeConstants": "the values a Runtime fills from its checked constants table",
                # declared in `cdef extern from "<pthread.h>" / "<time.h>" / "<signal.h>"`
                # blocks of _onednn.pyx: the C compiler includes the system headers' own
                # definitions
                "pthread_mutex_t": "libc's, from <pthread.h>", "timespec": "libc's, from <time.h>",
                "sigset_t": "libc's, from <signal.h>",
                "NdPrint": "a NumPy array's print kept by a binding (runtime._binding): no "
                           "vendor layout",
                # providers.cpu._kernels (bias_relu, convert): loop parameters
                "_Clip": "bias_relu's clip values for its inner loops: no vendor layout",
                "_Walk": "bias_relu's and convert's arguments, passed to each thread of "
                         "oneDNN's OpenMP team through one pointer (team=True): no vendor "
                         "layout",
                # providers.cpu._kernels (bn_rows): the job of the C rows, from _bn_rows.h
                "hd_bn_job": "bn_rows' job for the batchnorm rows, a struct of our own "
                             "header _bn_rows.h: no vendor layout",
                "hd_bn_last_job": "bn_rows' job for the channels-last rows, a struct of our "
                                  "own header _bn_last.h: no vendor layout",
                # runtime._onednn: run_on_team's callback and its data, GOMP_parallel's one
                # pointer argument
                "_TeamCall": "run_on_team's callback and data, passed to each thread of the "
                             "OpenMP team through one pointer: no vendor layout",
                # runtime._onednn: the C arrays a convolution's descriptor creation takes
                "_Geometry": "a convolution's strides, dilations and paddings as four "
                             "int64_t arrays, passed by element: no vendor layout"}


def test_every_struct_is_a_checked_table_a_mirror_or_our_own():
    mirrored = ({sc.ours for sc in _abi.STRUCTS} | set(_abi_rocm.MIOPEN_STRUCTS)
                | set(_abi_rocm.HIP_STRUCTS) | set(_abi_onednn.STRUCTS))
    unaccounted = sorted(set(_abi.parse_structs()) - set(_abi.FUNCTION_TABLES) - mirrored
                         - set(_OWN_STRUCTS))
    assert unaccounted == [], "structs in src_pyx that no check covers (_abi.STRUCTS, ...)"


# Compile-time values (members of anonymous ``cdef enum`` blocks; Cython 3 deprecates DEF)
# of the bindings: each is ours, or checked through a public name.
_OWN_CONSTANTS = {
    "MAX_DIMS": "our bound on tensor ranks (8 >= every layout we take)",
    "_MAX_AXES": "bias_relu's bound on array ranks (NumPy's own maximum, 64)",
    "MAX_ALGOS": "our bound on the algorithm lists we ask for",
    "MAX_PACK": "our bound on variant-pack entries",
    "MAX_STREAM_PACKS": "our bound on the streams a GraphLaunch keeps a variant pack for",
    "MAX_VALUES": "our bound on the elements of one backend attribute",
    "MAX_SOLUTIONS": "our bound on the MIOpen solutions we ask for",
    "PROPS_BYTES": "checked: _gpu._PROPS_BYTES >= sizeof the properties struct",
    "NAME_BYTES": "checked: _gpu._NAME_BYTES == the properties' name size",
    "_C_MAX_NDIMS": "checked: _onednn refuses to import unless it equals MAX_NDIMS (DNNL_MAX_NDIMS)",
    "_C_MAX_MEMS": "our bound on the memories of one oneDNN program",
    "_C_MAX_REPEAT": "our bound on a oneDNN Program's repeat count (a batch's chunks)",
    "_C_SET_HANDLE_FAILED": "our marker of a failed dnnl_memory_set_data_handle in "
                            "Program._steps (no dnnl_status_t: those are >= 0)",
    "_MAX_NDIM": "our bound on the dims of a NumPy print a binding keeps in C (runtime._binding)",
    "_K_NONE": "our tag of a binding's buffer kind (runtime._binding)",
    "_K_ND": "our tag of a binding's buffer kind (runtime._binding)",
    "_K_DEVARRAY": "our tag of a binding's buffer kind (runtime._binding)",
    "_K_PY": "our tag of a binding's buffer kind (runtime._binding)",
    "_TIMER_WINDOW": "our count of executions an ExecTimer's estimate looks back over",
}
_DEF = re.compile(r"^\s*DEF\s+(\w+)\s*=")
_ENUM = re.compile(r"^cdef\s+(?:c?p?def\s+)?enum\b")
_MEMBER = re.compile(r"^\s+(\w+)\s*=")
_CDEF_LITERAL = re.compile(r"^cdef\s+(?:unsigned\s+)?(?:int|long|size_t|int64_t)\s+(\w+)\s*=\s*-?\d")


def _compile_time_values(path: Path):
    """(line number, name, how) of every DEF and every member of a module-level enum."""
    in_enum = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if m := _DEF.match(line):
            yield n, m.group(1), "DEF"
            continue
        if _ENUM.match(line):
            in_enum = True
            continue
        if in_enum:
            if line.strip() and not line[0].isspace():
                in_enum = False
            elif m := _MEMBER.match(line):
                yield n, m.group(1), "enum"


def test_no_vendor_value_is_hidden_from_the_checks():
    defs, consts, literals = [], [], []
    for path in _abi._sources():
        for n, name, how in _compile_time_values(path):
            if how == "DEF":
                defs.append(f"{path.name}:{n}: {name}")
            elif name not in _OWN_CONSTANTS:
                consts.append(f"{path.name}:{n}: {name}")
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = _CDEF_LITERAL.match(line)
            if m:
                literals.append(f"{path.name}:{n}: {m.group(1)}")
    assert not defs, f"DEF is deprecated since Cython 3; use a cdef enum: {defs}"
    assert not consts, ("compile-time values no check covers (make them public constants, "
                        f"or add them to _OWN_CONSTANTS with the reason): {consts}")
    assert not literals, f"module-level C integers set from a literal, not a checked constant: {literals}"


def test_the_compile_time_values_are_seen():
    # guard against a parser that finds nothing (the test above would pass vacuously)
    seen = {name for path in _abi._sources() for _n, name, _how in _compile_time_values(path)}
    assert set(_OWN_CONSTANTS) <= seen, sorted(set(_OWN_CONSTANTS) - seen)


def test_the_miopen_version_gates_agree():
    """The constants only MIOpen 3.5 declares are guarded by the same version in the
    binding (SINCE) and in the checks (a mismatch would check 3.4.0 for a name it lacks,
    or skip a name it has)."""
    gated = {c.attr: c.since for c in _abi_rocm.MIOPEN_CONSTANTS if c.since != (0, 0, 0)}
    assert gated == _miopen.SINCE
