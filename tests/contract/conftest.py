"""Fixtures of the contract suite: vendor headers, the fakes built against them, a worker
process whose GPU libraries are the fakes.

Outside CI a missing prerequisite (no network for the header download, no C compiler)
skips with the reason; with ``CI`` set (``.ci/run`` sets it) it fails: CI must run these
tests. A fake that does not compile against the headers always fails.
"""
from __future__ import annotations

import os

import pytest

from . import _build, _headers
from ._worker import FakeGpuProcess

CONTRACT_DIR = os.path.dirname(os.path.abspath(__file__))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str):
    """Fail in CI, skip elsewhere."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: the contract tests must run here)", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(config, items):
    mark = pytest.mark.contract
    for item in items:
        if str(item.fspath).startswith(CONTRACT_DIR + os.sep):
            item.add_marker(mark)


@pytest.fixture(scope="session")
def nvidia_headers() -> dict:
    """source name -> (include dir, description) of CUDA 13's and cuDNN 9's headers."""
    out = {}
    for source in _headers.NVIDIA_SOURCES:
        try:
            out[source.name] = _headers.ensure(source)
        except _headers.HeadersUnavailable as exc:
            unavailable(f"vendor headers unavailable: {exc}")
    return out


@pytest.fixture(scope="session")
def fake_libs(nvidia_headers) -> _build.FakeLibs:
    """libfakecudart.so and libfakecudnn.so, compiled against the real headers."""
    try:
        _build.compiler("c")
    except _build.BuildError as exc:
        unavailable(str(exc))
    try:
        return _build.build_nvidia(nvidia_headers)
    except _build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def fake_gpu(fake_libs, tmp_path_factory):
    """A worker process for this test module: "cuda:0" is the fake device there."""
    env = fake_libs.env()
    env["HIPDNN_ASYNC_PERFDB"] = str(tmp_path_factory.mktemp("perfdb") / "perfdb.sqlite3")
    proc = FakeGpuProcess(env)
    yield proc
    proc.close()


@pytest.fixture(scope="session")
def backend_lib(tmp_path_factory):
    """The fake cuDNN backend API (``_launch_graph_scenarios.build_fake_backend``), built
    once for the session; its path."""
    from ._launch_graph_scenarios import build_fake_backend
    try:
        return build_fake_backend(str(tmp_path_factory.mktemp("fake_backend")))
    except RuntimeError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def hdr(nvidia_headers, fake_libs):
    """The vendor headers' own values of the constants the tests compare against."""
    from ._expect import HEADER_NAMES, Header
    try:
        return Header(_build.header_constants(HEADER_NAMES, nvidia_headers))
    except _build.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)
