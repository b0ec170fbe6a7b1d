"""Our declarations against the vendor headers: every constant, mirrored struct and
function table of the bindings is checked at build time, and each kind of check fails
when ours disagrees (proved here by feeding it a wrong value)."""
from __future__ import annotations

import ctypes

import pytest

from . import _abi, _build


def test_every_hard_coded_constant_is_checked():
    assert _abi.unchecked_constants() == [], (
        "constants of the bindings that no header check covers: add them to _abi.py")


def test_every_checked_constant_still_exists():
    missing = [f"{c.module}.{c.attr}" for c in _abi.CUDART_CONSTANTS + _abi.CUDNN_CONSTANTS
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
        for _ret, _args, field in fields:
            sym = field if field.startswith(prefix) else prefix + field
            if not hasattr(lib, sym):
                missing.append(sym)
    for name in getattr(_cudnn, "NAMES", ()):
        if not hasattr(dnn, name):
            missing.append(name)
    assert not missing, f"the fakes lack: {missing}"
