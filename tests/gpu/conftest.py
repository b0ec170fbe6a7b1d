"""Fixtures of the GPU suite: GPU devices, engines, PyTorch on CUDA, both event loops.

The suite runs on every GPU device present, not only the first (issue 9 item 11):
``gpu_device`` (per test) and ``gpu_module_device`` (per module) are parametrised over
``gpu_specs()``, and ``gpu_engine_device`` over every (device, engine of its provider)
pair. Every GPU test skips with a reason where no GPU runtime is present; the PyTorch peer
tests also skip where torch has no CUDA.
"""
from __future__ import annotations

import importlib.util

import pytest
from _peers import peer

NO_GPU = "no GPU runtime (CUDA/cuDNN or HIP/MIOpen) on this machine"


def gpu_specs():
    """GPU device specs present here (``hd.devices()`` minus ``"cpu"``)."""
    import hipdnn_async as hd
    return [d for d in hd.devices() if d != "cpu"]


def _spec_params():
    specs = gpu_specs()
    return [pytest.param(s, id=s) for s in specs] or [pytest.param(None, id="no-gpu")]


def engine_names(spec: str) -> list[str]:
    """The engines of ``spec``'s provider, best ranked first (its ``ENGINES``)."""
    from hipdnn_async.providers._registry import parse_spec, provider_for
    provider = provider_for(*parse_spec(spec))
    return [cls.name for cls in getattr(type(provider), "ENGINES", ())]


def _engine_params():
    out = []
    for spec in gpu_specs():
        names = engine_names(spec)
        # engine None: dev.build's own choice, which must take every case; each named
        # engine may decline a case (it is then skipped for that engine, with the reason)
        out.append(pytest.param((spec, None, True), id=f"{spec}-auto"))
        out += [pytest.param((spec, name, False), id=f"{spec}-{name}") for name in names]
    return out or [pytest.param(None, id="no-gpu")]


def _open(spec):
    if spec is None:
        pytest.skip(NO_GPU)
    import hipdnn_async as hd
    return hd.Device(spec)


@pytest.fixture(params=_spec_params())
def gpu_device(request):
    """Each GPU device in turn (overrides tests/conftest.py's first-GPU fixture)."""
    with _open(request.param) as dev:
        yield dev


@pytest.fixture(scope="module", params=_engine_params())
def gpu_engine_device(request):
    """(device, engine name or None, whether the case must run) for every GPU device:
    once with the device's own engine choice (None, must run), then with every engine of
    its provider by name (may decline); the device is shared by a test module."""
    if request.param is None:
        pytest.skip(NO_GPU)
    spec, engine, default = request.param
    with _open(spec) as dev:
        yield dev, engine, default


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


@pytest.fixture(scope="module", params=_spec_params())
def gpu_module_device(request):
    """Each GPU device in turn, shared by a test module (plans cached across its cases)."""
    with _open(request.param) as dev:
        yield dev


@pytest.fixture(scope="module")
def torch_cuda():
    """PyTorch with CUDA, strict fp32 (no TF32) for the duration of a module."""
    torch = peer("torch", "PyTorch is the GPU peer of these tests")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here")
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield torch
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
