"""Loading a device kind's libraries: ``load_vendor(name)`` loads the runtime and the DNN
library of GPU kind ``runtime._kinds.VENDORS[name]`` (``"cuda"``: the CUDA runtime
``libcudart`` and cuDNN 9; ``"hip"``: the HIP runtime ``libamdhip64`` and MIOpen) once per
process and returns a ``VendorState``; ``load_onednn()`` loads the host's optional DNN
library (oneDNN, ``KINDS["cpu"].dnn``). Neither raises: when something is missing the
state's ``reason`` names the library and every path tried. Which libraries a kind needs
and where they are looked for is its record's (``_kinds``, ``_libraries``); which provider
serves it is the providers' business (``providers/_registry.py``): this module imports
nothing above ``runtime``. Each load is recorded (``LoadRecord``: path, how found,
version) and logged.
"""
from __future__ import annotations

import logging
import os
import threading
import warnings
from dataclasses import dataclass

from .. import _fork
from ._kinds import KINDS, VENDORS, DeviceKind
from ._libraries import LibrarySpec, load_first, soname_list

__all__ = ["LibrarySpec", "Vendor", "VendorState", "VENDORS", "load_vendor",
           "vendor_status", "load_cuda", "cuda_status", "ONEDNN", "OnednnState", "load_onednn",
           "onednn_status"]

Vendor = DeviceKind   # the former name of a GPU kind's record

log = logging.getLogger("hipdnn_async")


@dataclass(frozen=True)
class VendorState:
    """What ``load_vendor`` found.

    Attributes
    ----------
    vendor : str
        ``"cuda"`` or ``"hip"``.
    ok : bool
        Runtime and DNN library loaded and at least one device seen.
    reason : str
        Why not ('' when ok): the missing library and the paths tried.
    runtime : _gpu.Runtime or None
        The loaded runtime (``.record`` is its ``LoadRecord``, ``.version`` its version).
    dnn : LoadRecord or None
        The DNN library's record.
    device_count : int
        Devices the runtime sees.
    tried : tuple of str
        ``"path: why it failed"`` for every candidate that did not load.
    """

    vendor: str
    ok: bool
    reason: str = ""
    runtime: object = None
    dnn: object = None
    device_count: int = 0
    tried: tuple[str, ...] = ()

    @property
    def runtime_record(self):
        """The runtime's ``LoadRecord`` (None when it did not load)."""
        return getattr(self.runtime, "record", None)


# held across a load (dlopen, the library's init): a fork waits for one in progress
_lock = _fork.hold_across_fork(threading.RLock())
_states: dict[str, VendorState] = {}


def load_vendor(name: str) -> VendorState:
    """Load vendor ``name``'s runtime and DNN library once per process; never raises.

    Parameters
    ----------
    name : str
        A key of ``VENDORS`` (``"cuda"``, ``"hip"``).

    Returns
    -------
    VendorState
        Cached: later calls return the same object.
    """
    with _fork.holding(_lock):
        state = _states.get(name)
        if state is None:
            try:
                state = _load(name)
            except Exception as exc:  # noqa: BLE001 - a broken library must not break the CPU
                state = VendorState(name, False, f"loading the {name} libraries failed: "
                                                 f"{type(exc).__name__}: {exc}")
            _states[name] = state
        return state


def vendor_status(name: str) -> VendorState | None:
    """The state of vendor ``name`` without loading (None before ``load_vendor``)."""
    return _states.get(name)


def load_cuda() -> VendorState:
    """``load_vendor("cuda")``."""
    return load_vendor("cuda")


def cuda_status() -> VendorState | None:
    """``vendor_status("cuda")``."""
    return vendor_status("cuda")


def _load(name: str) -> VendorState:
    if name not in VENDORS:
        return VendorState(name, False, f"unknown GPU vendor {name!r}; known: {sorted(VENDORS)}")
    vendor = VENDORS[name]
    try:
        from . import _gpu
    except ImportError:
        return VendorState(name, False, "the GPU bindings (hipdnn_async.runtime._gpu) are not "
                                        "built; run `pip install -e .`")
    rt = _gpu.instance(name)
    record, tried = load_first(vendor.runtime, rt.load)
    if record is None:
        return VendorState(name, False, (
            f"no {vendor.runtime.title} ({soname_list(vendor.runtime)}) loads; tried: "
            + ("; ".join(tried) or "nothing") + f". {vendor.title} devices also need "
            f"{vendor.dnn.title} ({soname_list(vendor.dnn)})"), tried=tuple(tried))
    count = rt.device_count()
    if count == 0:
        return VendorState(name, False, f"the {vendor.runtime.title} ({record.path}) sees no "
                                        "GPU on this machine", runtime=rt, tried=tuple(tried))
    try:
        binding = __import__(f"{__package__}.{vendor.dnn_module}", fromlist=["load"])
    except ImportError:
        return VendorState(name, False, (
            f"the {vendor.dnn.title} binding (hipdnn_async.runtime.{vendor.dnn_module}) is not "
            "built into this release"), runtime=rt, device_count=count, tried=tuple(tried))
    dnn, dnn_tried = load_first(vendor.dnn, binding.load)
    tried += dnn_tried
    if dnn is None:
        return VendorState(name, False, (
            f"no {vendor.dnn.title} ({soname_list(vendor.dnn)}) loads; tried: "
            + ("; ".join(dnn_tried) or "nothing")), runtime=rt, device_count=count,
            tried=tuple(tried))
    if vendor.dnn_major is not None and vendor.dnn_major_of(dnn.version) != vendor.dnn_major:
        return VendorState(name, False, (
            f"{vendor.dnn.title} at {dnn.path} is version {dnn.version}; "
            f"{vendor.dnn.title} {vendor.dnn_major} is required"), runtime=rt, dnn=dnn,
            device_count=count, tried=tuple(tried))
    log.info("loaded %s %s (%s) and %s %s (%s); %d device(s)", vendor.runtime.title,
             record.path, record.found_via, vendor.dnn.title, dnn.path, dnn.found_via, count)
    return VendorState(name, True, runtime=rt, dnn=dnn, device_count=count, tried=tuple(tried))


# ------------------------------------------------------------------ oneDNN (the CPU's DNN library)
# the host kind's optional DNN library and its binding (runtime._kinds.KINDS["cpu"])
_HOST = next(k for k in KINDS.values() if k.is_host)
ONEDNN = _HOST.dnn


@dataclass(frozen=True)
class OnednnState:
    """What ``load_onednn`` found.

    Attributes
    ----------
    ok : bool
        oneDNN loaded and its CPU engine was created.
    reason : str
        Why not ('' when ok): the binding missing, or every path tried and why it failed.
    record : LoadRecord or None
        Path, how found (``"env"``, ``"site-packages"``, ``"system"``), version number.
    version : tuple
        ``(major, minor, patch, git_hash, cpu_runtime)`` (``dnnl_version``); () when not ok.
    isa : str
        The instruction set oneDNN dispatches to (``"avx512_core_amx"``); '' when not ok.
    threads : int or None
        Threads a primitive uses from the loading thread (``omp_get_max_threads``).
    tried : tuple of str
        ``"path: why it failed"`` for every candidate that did not load.
    """

    ok: bool
    reason: str = ""
    record: object = None
    version: tuple = ()
    isa: str = ""
    threads: int | None = None
    tried: tuple[str, ...] = ()


_onednn_state: OnednnState | None = None


def load_onednn() -> OnednnState:
    """Load oneDNN once per process (``ONEDNN``'s search order); raises nothing of its own.

    Where the library named by ``$HIPDNN_ASYNC_ONEDNN`` does not load (no such file, not a
    oneDNN, too old), no other library is tried and the CPU runs without oneDNN: the first
    call says so with a ``RuntimeWarning`` naming the variable, the path and why (an
    error where the warnings filter makes it one; ``hipdnn-async info`` shows the same
    reason). The file was asked for, so its absence is not left to the log.

    Returns
    -------
    OnednnState
        Cached: later calls return the same object.
    """
    global _onednn_state
    reason = _onednn_fork_reason()
    if reason:
        return OnednnState(False, reason)
    with _fork.holding(_lock):
        if _onednn_state is not None:
            return _onednn_state
        try:
            _onednn_state = _load_onednn()
        except Exception as exc:  # noqa: BLE001 - a broken library must not break the CPU
            _onednn_state = OnednnState(False, f"loading oneDNN failed: "
                                               f"{type(exc).__name__}: {exc}")
        state = _onednn_state
        if state.ok:
            log.info("loaded oneDNN %s from %s (%s); ISA %s, %s threads",
                     ".".join(map(str, state.version[:3])), state.record.path,
                     state.record.found_via, state.isa, state.threads)
        else:
            log.info("oneDNN not used: %s", state.reason)
    override = [t for t in state.tried if t.startswith(ONEDNN.env + "=")]
    if not state.ok and override:     # outside the lock: a filter may make it raise
        warnings.warn(f"hipdnn_async: {override[0]}; {ONEDNN.title} is not used (no other "
                      "library is tried for an explicit path): the CPU runs its own "
                      "engine, CPU_ENGINE", RuntimeWarning, stacklevel=2)
    return state


def _onednn_fork_reason() -> str | None:
    """Why oneDNN may not run in this fork child, or None (``_onednn.fork_reason``)."""
    try:
        from . import _onednn
    except ImportError:         # the binding is not built: _load_onednn says so
        return None
    return _onednn.fork_reason()


def onednn_status() -> OnednnState | None:
    """The state of oneDNN without loading (None before ``load_onednn``)."""
    return _onednn_state


def _load_onednn() -> OnednnState:
    try:   # the binding the host kind names (as load_vendor imports a GPU kind's)
        _onednn = __import__(f"{__package__}.{_HOST.dnn_module}", fromlist=["load"])
    except ImportError:
        return OnednnState(False, f"the {ONEDNN.title} binding (hipdnn_async.runtime."
                                  f"{_HOST.dnn_module}) is not built into this release")
    record, tried = load_first(ONEDNN, _onednn.load)
    if record is None:
        # the user's own path is the only one tried: fixing it is the advice, not a wheel
        advice = (f"fix or unset {ONEDNN.env} (it names the library to load)"
                  if os.environ.get(ONEDNN.env) else
                  "install it with `pip install onednn-cpu-gomp==2023.2.0` (Linux x86-64) "
                  f"or point {ONEDNN.env} at a libdnnl.so.3")
        return OnednnState(False, (
            f"no {ONEDNN.title} ({soname_list(ONEDNN)}) loads; tried: "
            + ("; ".join(tried) or "nothing") + ". " + advice[0].upper() + advice[1:]),
            tried=tuple(tried))
    return OnednnState(True, record=record, version=_onednn.version(),
                       isa=_onednn.isa_name(_onednn.effective_isa()),
                       threads=_onednn.max_threads(), tried=tuple(tried))
