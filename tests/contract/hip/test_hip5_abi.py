"""The HIP runtime's ROCm 5 tables (``_gpu.HIP5_CONSTANTS`` over ``HIP_CONSTANTS``, the
status table, gcnArchName's offset 396) against ROCm 5.2.3's hip_runtime_api.h (Debian 12's
libamdhip64-dev 5.2.3-8; HIP only: the MIOpen checks stay on 3.4.0 / 3.5.1). Outside CI a
failed download skips with the reason; with ``CI`` set it fails.
"""
from __future__ import annotations

import re

import pytest

from .. import _build, _headers
from ..conftest import unavailable
from . import _abi_rocm, _debian
from .test_miopen_abi import _compile


@pytest.fixture(scope="module")
def hip5_include():
    try:
        _build.compiler("c++")
    except _build.BuildError as exc:
        unavailable(str(exc))
    try:
        include, _meta = _headers.ensure(_debian.HIP5_SOURCE)
    except _headers.HeadersUnavailable as exc:
        unavailable(f"ROCm 5.2.3 HIP headers unavailable: {exc}")
    return include


def test_the_rocm5_tables_compile_against_the_5_2_3_headers(hip5_include, tmp_path):
    source = _abi_rocm.hip5_checks_source()
    proc = _compile(source, hip5_include, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "offsetof(hipDeviceProp_t, gcnArchName) == 396" in source
    assert "(hipMemoryTypeHost) == 0LL" in source and "(hipMemoryTypeDevice) == 1LL" in source


def test_the_types_rocm5_lacks_are_not_in_its_headers(hip5_include):
    absent = _abi_rocm.hip5_absent()
    assert set(absent) == {"MEMORY_TYPE_UNREGISTERED", "MEMORY_TYPE_MANAGED"}
    text = "\n".join(p.read_text(errors="replace") for p in (hip5_include / "hip").rglob("*.h"))
    assert re.search(r"\bhipMemoryTypeHost\b", text)
    for name, enumerator in absent.items():
        assert not re.search(rf"\b{enumerator}\b", text), (name, enumerator)


@pytest.mark.parametrize("right,wrong,message", [
    # ROCm 6 numbers hipMemoryTypeDevice 2; ROCm 5 numbered it 1
    ("(hipMemoryTypeDevice) == 1LL,", "(hipMemoryTypeDevice) == 2LL,",
     "_gpu.HIP5_CONSTANTS['MEMORY_TYPE_DEVICE'] = 1 disagrees"),
    ("gcnArchName) == 396", "gcnArchName) == 1160", "gcnArchName is not a char[256] at 396"),
    ('(hipErrorNotReady) == 600LL, "_gpu.HIP_STATUS', '(hipErrorNotReady) == 601LL, "_gpu.HIP_STATUS',
     "_gpu.HIP_STATUS[600] names hipErrorNotReady"),
], ids=["memory-type", "gcn-arch-offset", "status-row"])
def test_a_wrong_rocm5_value_fails_the_checks(hip5_include, tmp_path, right, wrong, message):
    source = _abi_rocm.hip5_checks_source()
    assert source.count(right) == 1
    proc = _compile(source.replace(right, wrong), hip5_include, tmp_path)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-2000:]
