"""The CPU engines the suites run every case on, and how an absent one is reported.

Every engine the CPU device offers (``hd.engines(graph, "cpu")``) is tested, and
``ONEDNN_ENGINE`` always: where it is not offered (no oneDNN on this platform, a broken
install) its tests skip with the engine's own reason (the error ``dev.build(...,
engine="ONEDNN_ENGINE")`` raises). Under ``CI=true`` on Linux x86-64, where CI installs
oneDNN from PyPI, an absent ``ONEDNN_ENGINE`` fails instead of skipping.
"""
from __future__ import annotations

import os
import platform
import sys

import pytest

__all__ = ["ONEDNN", "REFERENCE", "engine_names", "absence", "require", "required_here",
           "probe_graph", "cpu_engine", "run_named", "check_engine"]

ONEDNN = "ONEDNN_ENGINE"
REFERENCE = "CPU_ENGINE"   # the NumPy/Cython engine: the reference and the fallback

_ABSENCE = {}   # engine name -> None (offered) or why not


def probe_graph():
    """A 3x3 FLOAT NCHW convolution (1x4x6x6, 4 filters): every CPU engine takes it."""
    import hipdnn_async as hd
    g = hd.Graph(name="engine_probe", io_data_type=hd.DataType.FLOAT,
                 intermediate_data_type=hd.DataType.FLOAT, compute_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(1, 4, 6, 6), name="x")
    w = g.tensor(dims=(4, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    g.validate()
    return g


def engine_names():
    """``ONEDNN_ENGINE``, ``CPU_ENGINE`` and any other engine offered on the CPU."""
    import hipdnn_async as hd
    names = [ONEDNN, REFERENCE]
    names += [e.name for e in hd.engines(probe_graph(), "cpu") if e.name not in names]
    return names


def required_here(name) -> bool:
    """True where ``name`` must be present: ``ONEDNN_ENGINE`` under ``CI=true`` on
    Linux x86-64 (CI installs the oneDNN wheel there)."""
    return (name == ONEDNN and os.environ.get("CI", "").lower() == "true"
            and sys.platform.startswith("linux")
            and platform.machine().lower() in ("x86_64", "amd64"))


def absence(name):
    """None where the CPU offers ``name`` for the probe graph; else why it does not: the
    error a build naming it raises (the engine's decline, or 'not offered')."""
    if name not in _ABSENCE:
        import hipdnn_async as hd
        g = probe_graph()
        why = None
        if name not in [e.name for e in hd.engines(g, "cpu")]:
            with hd.Device("cpu") as dev:
                try:
                    dev.build_sync(g, engine=name)
                    why = f"hd.engines does not list {name}, yet a build naming it succeeds"
                except hd.HipdnnError as exc:
                    why = f"{type(exc).__name__}: {exc}"
        _ABSENCE[name] = why
    return _ABSENCE[name]


def require(name):
    """Skip (or, where :func:`required_here`, fail) unless the CPU offers ``name``."""
    why = absence(name)
    if why is None:
        return
    msg = f"{name} is not available on this machine: {why}"
    if required_here(name):
        pytest.fail(f"{msg}; CI=true on Linux x86-64 installs oneDNN, so {name} must run")
    pytest.skip(msg)


@pytest.fixture(scope="module", params=engine_names())
def cpu_engine(request):
    """(CPU device shared by the module, engine name) for every CPU engine; skips (or
    fails, see :func:`require`) for an engine not offered here."""
    import hipdnn_async as hd
    require(request.param)
    with hd.Device("cpu") as dev:
        yield dev, request.param


def run_named(dev, engine, fn, what):
    """fn() (a build and run naming ``engine``): an engine present here that declines a
    case fails the test, since every CPU engine takes all nine patterns in every dtype
    and layout (issue 24)."""
    import hipdnn_async as hd
    try:
        return fn()
    except hd.NotSupportedError as exc:
        pytest.fail(f"{engine} declined a case it must take ({what}): "
                    f"{type(exc).__name__}: {exc}")


def check_engine(h, engine):
    """The harness's plan was built by ``engine`` of the CPU provider."""
    assert h.plan.engine.name == engine, h.plan
    assert h.plan.engine.provider == "cpu", h.plan
