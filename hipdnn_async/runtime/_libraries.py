"""Finding and loading one vendor library: where it is looked for (``LibrarySpec``) and
the first candidate that loads (``load_first``).

Search order (as cuda.pathfinder does): the library's environment override (a path; one
that fails is final, never silently replaced), the vendors' wheel directories under each
``sys.path`` entry and under the installation prefixes, the vendor's system directories
(``/opt/rocm*/lib``), then the system loader by soname.
"""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass

from .._errors import DeviceError

__all__ = ["LibrarySpec", "load_first", "soname_list"]


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
    prefix_dirs : tuple of str
        Directories relative to the environment's installation prefixes (``sys.prefix``,
        the user base, ``sys.base_prefix``): where a wheel's ``.data/data`` files land
        (oneDNN's ``lib/``); found via ``"site-packages"``.
    """

    name: str
    title: str
    sonames: tuple[str, ...]
    env: str
    wheel_dirs: tuple[str, ...] = ()
    system_dirs: tuple[str, ...] = ()
    prefix_dirs: tuple[str, ...] = ()

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
        for base in _prefixes() if self.prefix_dirs else ():
            for sub in self.prefix_dirs:
                d = os.path.join(base, sub)
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


def _prefixes() -> list[str]:
    """The installation prefixes a wheel's data files may be under: the environment's,
    the user base (``pip install --user``), the base interpreter's."""
    import site
    out = [sys.prefix]
    try:
        user = site.getuserbase()
    except Exception:  # noqa: BLE001 - an odd site module must not break loading
        user = None
    out += [p for p in (user, sys.base_prefix) if p]
    return list(dict.fromkeys(out))


def load_first(spec: LibrarySpec, load) -> tuple[object, list[str]]:
    """Try ``load(path, found_via)`` on each of ``spec.candidates()`` in order.

    Returns
    -------
    (object or None, list of str)
        The loader's result for the first candidate that loads (None if none does), and
        ``"path: why it failed"`` for each that did not. An explicit override that fails
        is final: no silent fallback to another library.
    """
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


def soname_list(spec: LibrarySpec) -> str:
    """The sonames for messages: ``"libamdhip64.so.7/.6/.5"``."""
    return "/".join([spec.sonames[0]] + [so.rsplit(".so", 1)[1] for so in spec.sonames[1:]])
