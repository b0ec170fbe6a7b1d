"""The oneDNN binding's declarations against oneDNN's own headers (3.2.0, the
``onednn-devel-cpu-gomp`` wheel of the ``test`` extra): constants, status table, ISA
names, mirrored structs and the function table, each check shown to fail on a wrong value.
Without the headers (or a compiler) the tests skip with the reason, and fail under ``CI``."""
from __future__ import annotations

import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest

from hipdnn_async.runtime import _onednn

from . import _abi, _abi_onednn, _build
from .conftest import unavailable


@pytest.fixture(scope="module")
def include():
    d = _abi_onednn.include_dir()
    if d is None:
        unavailable("the oneDNN headers are not installed (pip install onednn-devel-cpu-gomp==2023.2.0)")
    try:
        _build.compiler("c")
    except _build.BuildError as exc:
        unavailable(str(exc))
    return d


def _compile(text: str, include: Path, lang: str = "c") -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="hipdnn_async_onednn_") as tmp:
        unit = Path(tmp) / ("checks.c" if lang == "c" else "checks.cpp")
        unit.write_text(text)
        flags = list(_build.SIGNATURE_FLAGS) if lang == "c" else ["-std=gnu++17", "-fsyntax-only"]
        cmd = shlex.split(_build.compiler(lang)) + flags + ["-isystem", str(include), str(unit)]
        return subprocess.run(cmd, capture_output=True, text=True)


def test_every_public_constant_maps_to_the_header():
    for name in _abi_onednn.constants():
        assert _abi_onednn.c_name(name)      # KeyError names the one without a mapping


def test_constants_statuses_isas_and_structs_match_the_header(include):
    proc = _compile(_abi_onednn.checks_header(), include)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_wrong_constant_fails_the_build(include, monkeypatch):
    monkeypatch.setattr(_onednn, "ARG_SCRATCHPAD", _onednn.ARG_SCRATCHPAD + 1)
    proc = _compile(_abi_onednn.checks_header(), include)
    assert proc.returncode != 0 and "ARG_SCRATCHPAD" in proc.stderr


def test_a_wrong_struct_layout_fails_the_build(include, monkeypatch):
    real = _abi.parse_structs

    def shifted(paths=None):
        out = real(paths)
        out["ExecArg"] = [[("long long", "arg", ""), ("void*", "memory", "")]]
        return out
    monkeypatch.setattr(_abi, "parse_structs", shifted)
    proc = _compile(_abi_onednn.checks_header(), include)
    assert proc.returncode != 0 and "ExecArg" in proc.stderr


def test_the_function_table_calls_the_header_prototypes(include):
    text = "#include <oneapi/dnnl/dnnl.h>\n" + _abi.signature_checks("onednn")
    assert text.count("check_OnednnFns_") == len(_onednn.NAMES) == _onednn.n_slots()
    proc = _compile(text, include)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_every_function_has_the_header_prototypes_exact_abi(include):
    try:
        _build.compiler("c++")
    except _build.BuildError as exc:
        unavailable(str(exc))
    text = _abi.cxx_signature_checks("onednn")
    proc = _compile(text, include, "c++")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert text.count("static_assert(hd_abi::arity<") == len(_onednn.NAMES)


def test_a_declaration_off_the_header_abi_fails(include, monkeypatch):
    real = _abi.parse_function_types

    def widened(paths=None):
        out = real(paths)
        if "f_bn_fwd" in out:
            ret, args = out["f_bn_fwd"]
            out["f_bn_fwd"] = (ret, args[:5] + ["double"] + args[6:])   # epsilon is a float
        return out
    monkeypatch.setattr(_abi, "parse_function_types", widened)
    proc = _compile(_abi.cxx_signature_checks("onednn"), include, "c++")
    assert proc.returncode != 0 and "dnnl_batch_normalization_forward_primitive_desc_create" in proc.stderr


def test_names_follow_the_table_order():
    fields = [f for _t, f, _a in _abi.parse_structs()["OnednnFns"][0]]
    assert fields == list(_onednn.NAMES)
