"""Our MIOpen and HIP declarations against the real headers of both ROCm releases: the ABI
checks compile (every constant, struct and signature of ``_miopen``, and of the HIP
instance of ``_gpu``, agrees with miopen.h 3.4.0 / 3.5.1 and hip_runtime_api.h 6.4.3 /
7.2.4), they can fail, and nothing the MIOpen binding hard-codes is unchecked.
"""
from __future__ import annotations

import shlex
import subprocess

import pytest

from hipdnn_async.runtime import _miopen

from .. import _build
from . import _abi_rocm
from ._build_rocm import _DEFINES


def _compile(source: str, include, tmp_path) -> subprocess.CompletedProcess:
    unit = tmp_path / "checks.cpp"
    unit.write_text(source)
    cmd = shlex.split(_build.compiler("c++")) + ["-std=gnu++17", "-fsyntax-only", *_DEFINES,
                                                 "-isystem", str(include), str(unit)]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_checks_compile_against_the_headers(rocm, rocm_include, tmp_path):
    # the build fixture compiled them already; this names the header set in the report
    proc = _compile(_abi_rocm.checks_source(), rocm_include, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = _abi_rocm.checks_source()
    assert "sizeof(ours::ConvSolution) == sizeof(miopenConvSolution_t)" in text
    assert text.count("static_assert(hd_abi::arity<decltype(&miopen") == len(_miopen.NAMES)


@pytest.mark.parametrize("right,wrong,message", [
    ('== 1LL, "_miopen.DATA_FLOAT', '== 2LL, "_miopen.DATA_FLOAT', "_miopen.DATA_FLOAT = 1 disagrees"),
    ("typedef int (*f_version)(size_t*, size_t*, size_t*);",
     "typedef int (*f_version)(size_t*, int*, size_t*);", "miopenGetVersion: parameter 2 differs"),
    ("struct ConvSolution {\n  float time;", "struct ConvSolution {\n  double time;",
     "field time of our ConvSolution is not where"),
    # the HIP runtime's table (helper rt's _gpu.HIP_CONSTANTS): CUDA's number for the
    # attribute would be 75
    ("== 23LL, \"_gpu.HIP_CONSTANTS['ATTR_CC_MAJOR']", "== 75LL, \"_gpu.HIP_CONSTANTS['ATTR_CC_MAJOR']",
     "_gpu.HIP_CONSTANTS['ATTR_CC_MAJOR'] = 23 disagrees"),
    ("typedef int (*f_malloc_async)(void**, size_t, void*);",
     "typedef int (*f_malloc_async)(void**, int, void*);", "hipMallocAsync: parameter 2 differs"),
    # a status row naming the wrong enumerator
    ('(miopenStatusBadParm) == 3LL, "_miopen.STATUS[3]', '(miopenStatusInvalidValue) == 3LL, "_miopen.STATUS[3]',
     "_miopen.STATUS[3] names miopenStatusBadParm, whose value differs"),
], ids=["constant", "signature", "struct", "hip-constant", "hip-signature", "status-row"])
def test_a_wrong_declaration_fails_the_checks(rocm, rocm_include, tmp_path, right, wrong, message):
    source = _abi_rocm.checks_source()
    assert right in source
    proc = _compile(source.replace(right, wrong), rocm_include, tmp_path)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-2000:]


def test_every_constant_of_the_binding_is_checked():
    assert _abi_rocm.unchecked_constants() == []


def test_the_table_and_its_names_agree():
    fields = [f for _t, f in _abi_rocm.parse_table("MiopenFns", [_abi_rocm.SRC_PYX / "_miopen.pxd"])]
    assert fields == list(_miopen.NAMES)
    assert _miopen.n_slots() == len(_miopen.NAMES)
    assert set(_miopen.OPTIONAL) <= set(_miopen.NAMES)


def test_the_fake_exports_the_newer_entry_points_only_where_the_header_declares_them(rocm):
    out = subprocess.run(["nm", "-D", "--defined-only", rocm.miopen], capture_output=True,
                         text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines()}
    for name, since in _miopen.OPTIONAL.items():
        assert (("miopen" + name) in exported) == (rocm.miopen_version >= since), name
    for name in set(_miopen.NAMES) - set(_miopen.OPTIONAL):
        assert "miopen" + name in exported, name
