"""Our declarations against the vendor headers: every constant, mirrored struct and
function table of the bindings is checked at build time, and each kind of check fails
when ours disagrees (proved here by feeding it a wrong value)."""
from __future__ import annotations

import ctypes
import pathlib
import shlex
import subprocess
import tempfile

import pytest

from . import _abi, _build
from .conftest import unavailable


def test_every_hard_coded_constant_is_checked():
    assert _abi.unchecked_constants() == [], (
        "constants of the bindings that no header check covers: add them to _abi.py")


def test_every_checked_constant_still_exists():
    missing = [f"{c.module}.{c.attr}" for table in _abi.NVIDIA_CONSTANTS.values() for c in table
               if _abi.python_value(c) is None]
    assert not missing, f"checked constants no longer in the bindings (moved? update _abi.py): {missing}"


def test_every_function_table_is_checked():
    assert _abi.function_tables(), "no function table found in src_pyx"
    assert _abi.unchecked_tables() == [], "function tables not mapped to a header in _abi.FUNCTION_TABLES"


def test_every_mirrored_struct_is_found():
    structs = _abi.parse_structs()
    for sc in _abi.STRUCTS:
        assert structs.get(sc.ours), f"struct {sc.ours} not in src_pyx (renamed? update _abi.STRUCTS)"


def test_algorithm_tables_match_the_header(hdr):
    for enumerator, value, where in _abi.cudnn_algo_checks():
        assert hdr[enumerator] == value, where


def test_wrong_constant_fails_the_build(nvidia_headers, monkeypatch):
    _build.compile_check(_abi.checks_header("cudnn"), nvidia_headers)   # as built: compiles
    real = _abi.python_value

    def off_by_one(check):
        v = real(check)
        return v + 1 if check.attr == "DATA_HALF" else v
    monkeypatch.setattr(_abi, "python_value", off_by_one)
    with pytest.raises(_build.BuildError, match="DATA_HALF"):
        _build.compile_check(_abi.checks_header("cudnn"), nvidia_headers)


def test_wrong_struct_layout_fails_the_build(nvidia_headers, monkeypatch):
    real = _abi.parse_structs()

    def narrowed():
        out = dict(real)
        out["AlgoPerf"] = [[(t, f, a) if f != "memory" else ("int", f, a) for t, f, a in d]
                           for d in real["AlgoPerf"]]
        return out
    monkeypatch.setattr(_abi, "parse_structs", lambda paths=None: narrowed())
    with pytest.raises(_build.BuildError, match="memory"):
        _build.compile_check(_abi.checks_header("cudnn"), nvidia_headers)


@pytest.mark.parametrize("typedef,args,why", [
    ("f_malloc_async", ["void**", "void*", "size_t"], "arguments swapped"),
    ("f_event_elapsed", ["double*", "void*", "void*"], "float* declared double*"),
    ("f_memcpy_async", ["void*", "const void*", "int", "int", "void*"], "size_t declared int"),
    ("f_stream_wait_event", ["void*", "void*"], "an argument missing"),
])
def test_wrong_signature_fails_the_build(nvidia_headers, monkeypatch, typedef, args, why):
    _build.compile_check(_abi.signature_checks("cudart"), nvidia_headers)   # as declared: fine
    real = _abi.parse_function_types
    runtime_api = [p for p in _abi._sources() if p.stem == "_gpu_api"]
    if typedef not in real(runtime_api):
        pytest.fail(f"{typedef} is no longer declared in _gpu_api.pxd; pick another to mutate")

    def mutated(paths=None):
        types = real(paths)
        if paths is not None and [p for p in paths if p.stem == "_gpu_api"]:
            types = dict(types, **{typedef: (types[typedef][0], args)})
        return types
    monkeypatch.setattr(_abi, "parse_function_types", mutated)
    with pytest.raises(_build.BuildError):
        _build.compile_check(_abi.signature_checks("cudart"), nvidia_headers)


# The contract fake of cuDNN has no backend API on purpose: there the graph engine declines
# and every pattern runs through the legacy engine, whose calls the contract tests check.
# The backend table is exercised against tests/unit/runtime/fakes/fake_cudnn_backend.c.
_NOT_IN_THE_CONTRACT_FAKES = {"BackendFns"}


def test_fakes_export_what_the_bindings_look_up(fake_libs):
    """A symbol the bindings use but the fake lacks would only show as a missing-symbol
    error in some test; name them all here."""
    from hipdnn_async.runtime import _cudnn
    rt = ctypes.CDLL(fake_libs.cudart)
    dnn = ctypes.CDLL(fake_libs.cudnn)
    missing = []
    for table, fields in _abi.function_tables().items():
        prefix, family = _abi.FUNCTION_TABLES[table]
        lib = rt if family == "cudart" else dnn
        if family not in ("cudart", "cudnn"):
            continue                    # the HIP/MIOpen fakes: tests/contract/hip
        if table in _NOT_IN_THE_CONTRACT_FAKES:
            continue
        for _ret, _args, field in fields:
            sym = field if field.startswith(prefix) else prefix + field
            if not hasattr(lib, sym):
                missing.append(sym)
    for name in getattr(_cudnn, "NAMES", ()):
        if not hasattr(dnn, name):
            missing.append(name)
    assert not missing, f"the fakes lack: {missing}"


# ------------------------------------------------------------------ the exact ABI, in C++
def _cxx_compile(text: str, nvidia_headers) -> subprocess.CompletedProcess:
    try:
        cxx = _build.compiler("c++")
    except _build.BuildError as exc:
        unavailable(str(exc))
    with tempfile.TemporaryDirectory(prefix="hipdnn_async_cxx_") as tmp:
        unit = pathlib.Path(tmp) / "checks.cpp"
        unit.write_text(text)
        cmd = shlex.split(cxx) + ["-std=gnu++17", "-fsyntax-only", str(unit)]
        cmd += [a for v in nvidia_headers.values() for a in ("-isystem", str(v[0]))]
        return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.parametrize("family", ["cudart", "cudnn"])
def test_every_function_has_the_header_prototypes_exact_abi(nvidia_headers, family):
    text = _abi.cxx_signature_checks(family)
    proc = _cxx_compile(text, nvidia_headers)
    assert proc.returncode == 0, proc.stderr[-3000:]
    fields = [f for t, f in _abi.function_tables().items()
              if _abi.FUNCTION_TABLES[t][1] == family for f in f]
    # one arity assertion per function of every table of the family
    assert text.count("static_assert(hd_abi::arity<") == len(fields) > 0


@pytest.mark.parametrize("typedef,index,wrong,symbol", [
    # the backend table (cudnn_graph.h): a count widened from int, a descriptor type
    # declared 8 bytes wide, the status read as size_t
    ("f_set_attribute", 3, "int", "cudnnBackendSetAttribute: parameter 4 differs"),
    ("f_create_descriptor", 0, "int64_t", "cudnnBackendCreateDescriptor: parameter 1 differs"),
    ("f_get_attribute", 4, "int*", "cudnnBackendGetAttribute: parameter 5 differs"),
    ("f_execute", None, "size_t", "cudnnBackendExecute: return type differs"),
    # the legacy table and the runtime: widenings the C check lets through
    ("f_set_act", 3, "float", "cudnnSetActivationDescriptor: parameter 4 differs"),
    ("f_memcpy_async", 2, "unsigned int", "cudaMemcpyAsync: parameter 3 differs"),
])
def test_a_declaration_off_the_header_abi_fails_the_cxx_check(nvidia_headers, monkeypatch,
                                                               typedef, index, wrong, symbol):
    real = _abi.parse_function_types
    if not any(typedef in real([p]) for p in _abi._sources()):
        pytest.fail(f"{typedef} is no longer declared in src_pyx; pick another to mutate")

    def mutated(paths=None):
        types = real(paths)
        if typedef in types:
            ret, args = types[typedef]
            if index is None:
                ret = wrong
            else:
                args = [wrong if i == index else a for i, a in enumerate(args)]
            types = dict(types, **{typedef: (ret, args)})
        return types
    monkeypatch.setattr(_abi, "parse_function_types", mutated)
    family = "cudart" if typedef == "f_memcpy_async" else "cudnn"
    proc = _cxx_compile(_abi.cxx_signature_checks(family), nvidia_headers)
    assert proc.returncode != 0
    assert symbol in proc.stderr, proc.stderr[-2000:]


def test_wrong_backend_constant_fails_the_build(nvidia_headers, monkeypatch):
    real = _abi.python_value

    def off_by_one(check):
        v = real(check)
        return v + 1 if check.attr == "ATTR_TENSOR_DIMENSIONS" else v
    monkeypatch.setattr(_abi, "python_value", off_by_one)
    with pytest.raises(_build.BuildError, match="ATTR_TENSOR_DIMENSIONS = 903 disagrees"):
        _build.compile_check(_abi.checks_header("cudnn"), nvidia_headers)


def test_every_backend_constant_is_checked_against_its_enumerator():
    from hipdnn_async.runtime import _cudnn_backend as be
    checked = {c.attr: c.c_expr for c in _abi.CUDNN_BACKEND_CONSTANTS}
    names = _abi.public_constants(be.__name__)
    assert len(names) > 150 and set(names) == set(checked)
    assert all(checked[n] == "CUDNN_" + n for n in names)
    # the names with a lower-case x are constants too (WINOGRAD_TILE_4x4)
    assert "NUMERICAL_NOTE_WINOGRAD_TILE_4x4" in checked


def test_the_backend_table_and_its_names_agree():
    from hipdnn_async.runtime import _cudnn_backend as be
    fields = [f for _r, _a, f in _abi.function_tables()["BackendFns"]]
    assert fields == list(be.NAMES)
    assert set(be.REQUIRED) <= set(be.NAMES)


def test_wrong_status_row_fails_the_build(nvidia_headers, monkeypatch):
    real = _abi.status_checks

    def shifted(which):
        return [(name, value + 1 if name == "CUDNN_STATUS_NOT_SUPPORTED_SHAPE" else value, where)
                for name, value, where in real(which)]
    monkeypatch.setattr(_abi, "status_checks", shifted)
    with pytest.raises(_build.BuildError,
                       match=r"STATUS\[3002\] names CUDNN_STATUS_NOT_SUPPORTED_SHAPE, whose header value is not 3003"):
        _build.compile_check(_abi.checks_header("cudnn"), nvidia_headers)
