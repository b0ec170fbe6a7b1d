"""Fixtures of the GPU suite: a module-wide GPU device, PyTorch on CUDA, both event loops.

Every GPU test skips with a reason where no GPU runtime is present (the ``gpu_device``
fixture of ``tests/conftest.py`` and ``gpu_module_device`` here); the PyTorch peer tests
also skip where torch has no CUDA.
"""
from __future__ import annotations

import importlib.util

import pytest

NO_GPU = "no GPU runtime (CUDA/cuDNN or HIP/MIOpen) on this machine"


def gpu_specs():
    """GPU device specs present here (``hd.devices()`` minus ``"cpu"``)."""
    import hipdnn_async as hd
    return [d for d in hd.devices() if d != "cpu"]


def cuda_spec():
    """The first ``cuda:N`` spec, or skip with a reason."""
    specs = gpu_specs()
    if not specs:
        pytest.skip(NO_GPU)
    cuda = [s for s in specs if s.startswith("cuda:")]
    if not cuda:
        pytest.skip(f"needs a CUDA (cuDNN) device; devices present: {specs}")
    return cuda[0]


@pytest.fixture(params=["asyncio", pytest.param("trio", marks=pytest.mark.skipif(
    importlib.util.find_spec("trio") is None, reason="trio is not installed"))])
def anyio_backend(request):
    """asyncio, and trio where it is installed (the GPU machine may lack it)."""
    return request.param


@pytest.fixture(scope="module")
def gpu_module_device():
    """The first GPU device, shared by a test module (plans cached across its cases)."""
    specs = gpu_specs()
    if not specs:
        pytest.skip(NO_GPU)
    import hipdnn_async as hd
    with hd.Device(specs[0]) as dev:
        yield dev


@pytest.fixture(scope="module")
def torch_cuda():
    """PyTorch with CUDA, strict fp32 (no TF32) for the duration of a module."""
    torch = pytest.importorskip("torch", reason="PyTorch is the GPU peer of these tests")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here")
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield torch
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
