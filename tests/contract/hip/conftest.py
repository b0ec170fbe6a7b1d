"""Fixtures of the MIOpen / HIP contract suite: Debian's ROCm headers, the fakes built
against them, a worker process whose HIP runtime and MIOpen are the fakes.

Every test that takes ``rocm`` runs once per header set (MIOpen 3.4.0 / ROCm 6.4.3 and
MIOpen 3.5.1 / ROCm 7.2.4). Outside CI a missing prerequisite (no network for the
download, no C/C++ compiler) skips with the reason; with ``CI`` set it fails. A fake or an
ABI check that does not compile against the headers always fails.
"""
from __future__ import annotations

import pytest

from .. import _build, _headers
from .._worker import FakeGpuProcess
from ..conftest import unavailable
from . import _debian
from ._build_rocm import build_rocm

_LABELS = [s.label for s in _debian.ROCM_SOURCES]


@pytest.fixture(scope="session", params=_debian.ROCM_SOURCES, ids=_LABELS)
def rocm_headers(request):
    """(source, include dir, description) of one ROCm release's headers."""
    source = request.param
    try:
        include, meta = _headers.ensure(source)
    except _headers.HeadersUnavailable as exc:
        unavailable(f"ROCm headers unavailable: {exc}")
    return source, include, meta


@pytest.fixture(scope="session")
def rocm(rocm_headers):
    """``RocmLibs``: the fake libamdhip64 and libMIOpen of one header set."""
    for lang in ("c", "c++"):
        try:
            _build.compiler(lang)
        except _build.BuildError as exc:
            unavailable(str(exc))
    source, include, meta = rocm_headers
    try:
        return build_rocm(source, include, meta)
    except _build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def rocm_include(rocm_headers):
    return rocm_headers[1]


@pytest.fixture(scope="module")
def fake_rocm(rocm, tmp_path_factory):
    """A worker process for this module and header set: its HIP runtime and MIOpen are
    the fakes (``hip:0`` is the fake device there)."""
    env = rocm.env()
    env["HIPDNN_ASYNC_PERFDB"] = str(tmp_path_factory.mktemp("perfdb") / "perfdb.sqlite3")
    env["MIOPEN_USER_DB_PATH"] = str(tmp_path_factory.mktemp("miopen_user_db"))
    proc = FakeGpuProcess(env)
    proc.rocm = rocm
    yield proc
    proc.close()
