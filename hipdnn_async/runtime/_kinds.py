"""The device kinds: one record per kind of device hipdnn_async runs on, and the one place
that knows them.

A kind (``"cpu"``, ``"cuda"``, ``"hip"``) is the first part of a device spec (``"cuda:1"``)
and says everything below the providers that its devices need: the runtime library (none
for the host), the DNN library its provider runs on and how to load it, how DLPack names
its memory, and what a Ray worker asks for to get one. ``"gpu"`` is no kind: ``"gpu:N"``
is the N-th GPU of every GPU kind present, kinds in ``KINDS`` order.

Which provider serves a kind is decided above, in ``providers/_registry.py`` (``PROVIDERS``):
this layer names nothing above it. A new vendor joins with one ``DeviceKind`` here and
one line there.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .._errors import DeviceError
from ._libraries import LibrarySpec

__all__ = ["DeviceKind", "KINDS", "VENDORS", "ANY_GPU", "parse_spec", "spec_forms",
           "kind_title", "ray_resource", "host_memory_types", "KDL_CPU", "KDL_CUDA",
           "KDL_CUDA_HOST", "KDL_ROCM", "KDL_ROCM_HOST", "KDL_CUDA_MANAGED"]

# DLDeviceType (dlpack.h, DLPack 0.8 / 1.0)
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 10, 11, 13

ANY_GPU = "gpu"


@dataclass(frozen=True)
class DeviceKind:
    """One kind of device: its libraries, its device naming, DLPack types and Ray resource.

    Attributes
    ----------
    name : str
        The device-spec kind (``"cuda"`` of ``"cuda:1"``); for a GPU kind also the
        ``runtime._gpu`` instance of its runtime.
    title : str
        For messages (``"CUDA"``, ``"HIP"``, ``"CPU"``).
    runtime : LibrarySpec or None
        The GPU runtime library (symbol prefix = ``name``); None for the host, whose
        memory and threads need no library.
    dnn : LibrarySpec or None
        The DNN library. Required for a GPU kind (its devices are usable only with it);
        optional for the host, whose provider runs without it (``load_onednn``).
    dnn_module : str or None
        The binding of ``dnn`` in ``hipdnn_async.runtime`` (``"_cudnn"``): a module with
        ``load(path, found_via) -> LoadRecord``.
    dnn_major : int or None
        The DNN library major version required (cuDNN 9), None for any.
    dnn_major_of : callable
        Major version from the library's version number.
    dlpack : tuple of int
        DLPack device types (``KDL_*``) of this kind's device memory, as a producer's
        ``__dlpack_device__`` reports it.
    dlpack_host : tuple of int
        DLPack device types of host memory this kind's runtime allocates (pinned): host
        memory, never taken where device memory is needed.
    ray_resource : str or None
        The Ray resource a worker asks for to get one device (``"GPU"``: ``num_gpus``);
        None for the host.
    ray_noset : tuple of str
        Variables with which Ray leaves this kind's device-visibility variable unset, so
        that in-process device indices are the physical ids (Ray's
        ``_private/accelerators/<vendor>.py``).
    """

    name: str
    title: str
    runtime: LibrarySpec | None = None
    dnn: LibrarySpec | None = None
    dnn_module: str | None = None
    dnn_major: int | None = None
    dnn_major_of: object = field(default=None, repr=False, compare=False)
    dlpack: tuple[int, ...] = ()
    dlpack_host: tuple[int, ...] = ()
    ray_resource: str | None = None
    ray_noset: tuple[str, ...] = ()

    @property
    def is_host(self) -> bool:
        """True for the host (the CPU): no runtime library, host memory."""
        return self.runtime is None


# ROCm wheels (TheRock's rocm-sdk-core / rocm-sdk-libraries-<target>) and ROCm installs
# under /opt/rocm, /opt/rocm-<version> or $ROCM_PATH
_ROCM_DIRS = ("$ROCM_PATH/lib", "/opt/rocm/lib", "/opt/rocm-*/lib")

KINDS = {k.name: k for k in (
    DeviceKind(
        "cpu", "CPU",
        # oneDNN v3 (libdnnl.so.3): from the onednn-cpu-gomp wheel, whose library lands in
        # <prefix>/lib, or the user's own through HIPDNN_ASYNC_ONEDNN, or the system loader
        dnn=LibrarySpec("onednn", "oneDNN", ("libdnnl.so.3",), "HIPDNN_ASYNC_ONEDNN",
                        prefix_dirs=("lib",)),
        dnn_module="_onednn",
        dlpack=(KDL_CPU,)),
    DeviceKind(
        "cuda", "CUDA",
        runtime=LibrarySpec("cudart", "CUDA runtime", ("libcudart.so.13", "libcudart.so.12"),
                            "HIPDNN_ASYNC_CUDART",
                            ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib")),
        dnn=LibrarySpec("cudnn", "cuDNN", ("libcudnn.so.9",), "HIPDNN_ASYNC_CUDNN",
                        ("nvidia/cudnn/lib",)),
        dnn_module="_cudnn", dnn_major=9,
        dnn_major_of=lambda v: v // 10000,   # cudnnGetVersion: MAJOR*10000 + MINOR*100 + PATCH
        dlpack=(KDL_CUDA, KDL_CUDA_MANAGED), dlpack_host=(KDL_CUDA_HOST,),
        ray_resource="GPU", ray_noset=("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",)),
    DeviceKind(
        "hip", "HIP",
        runtime=LibrarySpec("hip", "HIP runtime",
                            ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"),
                            "HIPDNN_ASYNC_HIP_RUNTIME", ("_rocm_sdk_core/lib",), _ROCM_DIRS),
        dnn=LibrarySpec("miopen", "MIOpen", ("libMIOpen.so.1",), "HIPDNN_ASYNC_MIOPEN",
                        ("_rocm_sdk_libraries*/lib", "_rocm_sdk_core/lib"), _ROCM_DIRS),
        dnn_module="_miopen",
        dlpack=(KDL_ROCM,), dlpack_host=(KDL_ROCM_HOST,),
        ray_resource="GPU", ray_noset=("RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
                                       "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES")),
)}


class _GpuKinds(Mapping):
    """The GPU kinds ("vendors") of ``KINDS``, in its order: what ``"gpu:N"`` counts over.
    A view, so that every reader sees a kind added to ``KINDS``."""

    def __getitem__(self, name: str) -> DeviceKind:
        kind = KINDS[name]
        if kind.is_host:
            raise KeyError(name)
        return kind

    def __iter__(self):
        return (name for name, kind in KINDS.items() if not kind.is_host)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"VENDORS({list(self)})"


VENDORS = _GpuKinds()


def spec_forms() -> str:
    """The device specs taken, for messages: ``"'cpu', 'gpu:N', 'cuda:N' or 'hip:N'"``."""
    forms = ([f"'{k}'" for k, kind in KINDS.items() if kind.is_host] + [f"'{ANY_GPU}:N'"]
             + [f"'{k}:N'" for k in VENDORS])
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def parse_spec(spec, where: str = "Device") -> tuple[str, int]:
    """Split ``"cuda:1"`` into ``("cuda", 1)``; a bare kind means index 0.

    Parameters
    ----------
    spec : str
        A kind of ``KINDS`` or ``"gpu"``, optionally ``:N`` (case and surrounding blanks
        ignored).
    where : str
        The caller, first in the error message.

    Raises
    ------
    DeviceError
        ``spec`` is none of those (code ``INVALID_VALUE``; the message lists the forms).
    """
    names = "|".join(map(re.escape, [*KINDS, ANY_GPU]))
    m = re.match(rf"^({names})(?::(\d+))?$", str(spec).strip().lower())
    if not m:
        raise DeviceError(f"{where}: unknown device spec {spec!r}; use {spec_forms()}",
                          code="INVALID_VALUE")
    return m.group(1), int(m.group(2) or 0)


def kind_title(kind: str) -> str:
    """``"CUDA"`` for ``"cuda"``; ``"GPU"`` for ``"gpu"`` (any GPU kind)."""
    return KINDS[kind].title if kind in KINDS else kind.upper()


def ray_resource(kind: str) -> str | None:
    """The Ray resource one device of ``kind`` takes (``"gpu"``: any GPU kind's, ``"GPU"``);
    None for the host."""
    return "GPU" if kind == ANY_GPU else KINDS[kind].ray_resource


def host_memory_types() -> frozenset:
    """DLPack device types of host memory: the host kind's, and every runtime's pinned."""
    return frozenset(t for k in KINDS.values()
                     for t in (k.dlpack if k.is_host else k.dlpack_host))
