"""Shared fixtures: both event loops, a CPU device, a private perf db, GPU skips."""
import os
import tempfile

import pytest


def pytest_configure(config):
    # Tests never touch the user's perf db: one private file per test session.
    if "HIPDNN_ASYNC_PERFDB" not in os.environ:
        tmp = tempfile.mkdtemp(prefix="hipdnn_async_tests_")
        os.environ["HIPDNN_ASYNC_PERFDB"] = os.path.join(tmp, "perfdb.sqlite3")
    os.environ.pop("HIPDNN_ASYNC_FORCE_BENCHMARKING", None)
    os.environ.pop("HIPDNN_FORCE_BENCHMARKING", None)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    """Run every @pytest.mark.anyio test under asyncio and under trio."""
    return request.param


@pytest.fixture(scope="module")
def cpu_device():
    """A CPU device shared by a test module (closed, drained, at the end)."""
    import hipdnn_async as hd
    with hd.Device("cpu") as dev:
        yield dev


def _gpu_specs():
    try:
        import hipdnn_async as hd
    except ImportError:
        return []
    return [d for d in hd.devices() if d != "cpu"]


@pytest.fixture
def gpu_device():
    """The first GPU device; skips with a reason where no GPU runtime is present."""
    specs = _gpu_specs()
    if not specs:
        pytest.skip("no GPU runtime (CUDA/cuDNN or HIP/MIOpen) on this machine")
    import hipdnn_async as hd
    with hd.Device(specs[0]) as dev:
        yield dev
