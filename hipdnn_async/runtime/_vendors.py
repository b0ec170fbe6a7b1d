"""The vendor registry: for each GPU vendor, its runtime library, its DNN library, where to
look for them and how to load them.

A vendor is a GPU runtime plus the DNN library a provider runs on it: ``"cuda"`` (the
CUDA runtime ``libcudart`` and cuDNN 9) and ``"hip"`` (the HIP runtime ``libamdhip64``
and MIOpen). ``load_vendor(name)`` loads both once per process and returns a
``VendorState``; it never raises, and when something is missing its ``reason`` names the
library and every path tried. Which provider serves a vendor is the providers' business
(``providers/_registry.py``): this module imports nothing above ``runtime``.

Search order for each library (docs/design/vendor-notes.md, "Locating the libraries"; as
cuda.pathfinder does): the vendor's environment override (a path; one that fails is final,
never silently replaced), the vendors' wheel directories under each ``sys.path`` entry, the
vendor's system directories (``/opt/rocm*/lib``), then the system loader by soname. Each
load is recorded (``LoadRecord``: path, how found, version) and logged.
"""
from __future__ import annotations

import glob
import logging
import os
import sys
import threading
from dataclasses import dataclass, field

from .._errors import DeviceError

__all__ = ["LibrarySpec", "Vendor", "VendorState", "VENDORS", "load_vendor",
           "vendor_status", "load_cuda", "cuda_status"]

log = logging.getLogger("hipdnn_async")


@dataclass(frozen=True)
class LibrarySpec:
    """Where one vendor library is looked for.

    Attributes
    ----------
    name : str
        Short name, also the ``LoadRecord`` name (``"cudart"``, ``"cudnn"``, ``"hip"``,
        ``"miopen"``).
    title : str
        For messages (``"CUDA runtime"``).
    sonames : tuple of str
        File names in order of preference (``"libcudart.so.13"``, ``"libcudart.so.12"``).
    env : str
        The override variable: a path to the library.
    wheel_dirs : tuple of str
        Directories relative to a ``sys.path`` entry; glob patterns allowed.
    system_dirs : tuple of str
        Absolute directories (glob patterns allowed, newest match first); ``$VAR``
        expanded, unset variables skipped.
    """

    name: str
    title: str
    sonames: tuple[str, ...]
    env: str
    wheel_dirs: tuple[str, ...] = ()
    system_dirs: tuple[str, ...] = ()

    def candidates(self) -> list[tuple[str, str]]:
        """(path, found_via) in search order: ``"env"``, ``"site-packages"``, ``"system"``."""
        out = []
        override = os.environ.get(self.env)
        if override:
            out.append((override, "env"))
        for base in sys.path:
            for sub in self.wheel_dirs:
                for d in sorted(glob.glob(os.path.join(base or ".", sub))):
                    out.extend((os.path.abspath(os.path.join(d, so)), "site-packages")
                               for so in self.sonames if os.path.isfile(os.path.join(d, so)))
        for pattern in self.system_dirs:
            pattern = os.path.expandvars(pattern)
            if "$" in pattern:
                continue    # an unset variable
            for d in sorted(glob.glob(pattern), reverse=True):
                out.extend((os.path.join(d, so), "system")
                           for so in self.sonames if os.path.isfile(os.path.join(d, so)))
        out.extend((so, "system") for so in self.sonames)
        seen, unique = set(), []
        for path, via in out:
            if path not in seen:
                seen.add(path)
                unique.append((path, via))
        return unique


@dataclass(frozen=True)
class Vendor:
    """One GPU vendor: its runtime (``runtime._gpu`` instance ``name``) and DNN library.

    Attributes
    ----------
    name : str
        ``"cuda"`` or ``"hip"``; also the device-spec kind and the ``_gpu`` instance.
    title : str
        For messages (``"CUDA"``, ``"HIP"``).
    runtime : LibrarySpec
        The GPU runtime library (symbol prefix = ``name``).
    dnn : LibrarySpec
        The DNN library.
    dnn_module : str
        The binding of ``dnn`` in ``hipdnn_async.runtime`` (``"_cudnn"``): a module with
        ``load(path, found_via) -> LoadRecord``.
    dnn_major : int or None
        The DNN library major version required (cuDNN 9), None for any.
    dnn_major_of : callable
        Major version from the library's version number.
    """

    name: str
    title: str
    runtime: LibrarySpec
    dnn: LibrarySpec
    dnn_module: str
    dnn_major: int | None = None
    dnn_major_of: object = field(default=None, repr=False, compare=False)


VENDORS = {
    "cuda": Vendor(
        "cuda", "CUDA",
        LibrarySpec("cudart", "CUDA runtime", ("libcudart.so.13", "libcudart.so.12"),
                    "HIPDNN_ASYNC_CUDART", ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib")),
        LibrarySpec("cudnn", "cuDNN", ("libcudnn.so.9",), "HIPDNN_ASYNC_CUDNN",
                    ("nvidia/cudnn/lib",)),
        "_cudnn", 9, lambda v: v // 10000),    # cudnnGetVersion: MAJOR*10000 + MINOR*100 + PATCH
    "hip": Vendor(
        "hip", "HIP",
        # ROCm wheels (TheRock's rocm-sdk-core / rocm-sdk-libraries-<target>) and ROCm
        # installs under /opt/rocm, /opt/rocm-<version> or $ROCM_PATH
        LibrarySpec("hip", "HIP runtime",
                    ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"),
                    "HIPDNN_ASYNC_HIP_RUNTIME", ("_rocm_sdk_core/lib",),
                    ("$ROCM_PATH/lib", "/opt/rocm/lib", "/opt/rocm-*/lib")),
        LibrarySpec("miopen", "MIOpen", ("libMIOpen.so.1",), "HIPDNN_ASYNC_MIOPEN",
                    ("_rocm_sdk_libraries*/lib", "_rocm_sdk_core/lib"),
                    ("$ROCM_PATH/lib", "/opt/rocm/lib", "/opt/rocm-*/lib")),
        "_miopen"),
}


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


_lock = threading.Lock()
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
    with _lock:
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


def _load_first(spec: LibrarySpec, load) -> tuple[object, list[str]]:
    """(the loader's result for the first candidate that loads or None, failures). An
    explicit override that fails is final: no silent fallback to another library."""
    tried = []
    for path, via in spec.candidates():
        try:
            return load(path, via), tried
        except DeviceError as exc:
            why = _why(exc, path)
            if via == "env":
                tried.append(f"{spec.env}={path} does not load: {why}")
                break
            tried.append(f"{path}: {why}")
    return None, tried


def _why(exc: DeviceError, path: str) -> str:
    """The reason a candidate failed, without repeating its path (dlerror starts with it)."""
    if getattr(exc, "call", None) == "dlopen" and getattr(exc, "vendor_message", None):
        why = exc.vendor_message
        return why[len(path) + 2:] if why.startswith(path + ": ") else why
    return str(exc)


def _names(spec: LibrarySpec) -> str:
    return "/".join([spec.sonames[0]] + [so.rsplit(".so", 1)[1] for so in spec.sonames[1:]])


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
    record, tried = _load_first(vendor.runtime, rt.load)
    if record is None:
        return VendorState(name, False, (
            f"no {vendor.runtime.title} ({_names(vendor.runtime)}) loads; tried: "
            + ("; ".join(tried) or "nothing") + f". {vendor.title} devices also need "
            f"{vendor.dnn.title} ({_names(vendor.dnn)})"), tried=tuple(tried))
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
    dnn, dnn_tried = _load_first(vendor.dnn, binding.load)
    tried += dnn_tried
    if dnn is None:
        return VendorState(name, False, (
            f"no {vendor.dnn.title} ({_names(vendor.dnn)}) loads; tried: "
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
