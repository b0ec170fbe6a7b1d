"""Bindings reused across submissions: the submit path's cache (issue 11 item 2).

Binding a variant pack (resolving keys, checking every buffer's device, dtype, shape,
strides and pointer, the aliasing rule, the workspace) costs far more host time than
enqueuing the work. A :class:`Binding` is that work done once for one (plan, buffers):
the bound buffers, the workspace and the work-item function that launches them (a
provider plan's own ``launcher`` where it has one, e.g. the cuDNN graph engine's C
launch with a prebuilt variant pack). When the same buffers come again (the same keys
and the same buffer objects, in the same order, and each buffer's cheap fingerprint
unchanged) the binding is reused and no check runs again.

Fingerprints: a ``GpuArray`` is immutable (nothing to check); an array with
``data_ptr()``, ``shape``, ``stride()`` and ``dtype`` (PyTorch-style; its shape a tuple or
``torch.Size`` and its stride() a tuple, not a subclass that may compare equal to anything
or change its items) is checked by those;
one with ``data.ptr``, ``shape``, ``strides``, ``dtype`` (CuPy-style) by those; any other
``__cuda_array_interface__`` object by its interface dict. Int pointers and DLPack-only
objects are not cached (an int may name freed memory next time; a DLPack export is the
only way to read the other), so they are bound on every submission. The cache keeps
weak references to the buffers: it never keeps a user's memory alive.

Only GPU devices cache: a host array's data pointer has no cheap accessor, and the CPU
path's binding is a small part of a host computation.
"""
from __future__ import annotations

import sys
import weakref

from .runtime import GpuArray

__all__ = ["BindingCache", "Binding", "CACHE_SIZE"]

CACHE_SIZE = 4        # bindings kept per plan (double buffering and a little more)

_NOT_CACHED = object()


def _fp_none(buf):
    return None


def _fp_torch(buf):
    # shape (torch.Size) and stride() are immutable tuples: kept as they come (a tuple()
    # of each would cost a third of the fingerprint). Their types are in the print: a
    # tuple subclass may compare equal to anything, and one that comes later is not
    # trusted on its word (_fingerprint_fn admits only tuple and torch.Size)
    shape, stride = buf.shape, buf.stride()
    return (buf.data_ptr(), type(shape), shape, type(stride), stride, buf.dtype)


def _fp_cupy(buf):
    return (buf.data.ptr, buf.shape, buf.strides, buf.dtype)


def _fp_cai(buf):
    cai = buf.__cuda_array_interface__
    strides = cai.get("strides")
    # strides as a tuple: a list kept in the dict and changed in place would compare
    # equal to the print holding that same list
    return (cai.get("data"), tuple(cai.get("shape", ())),
            strides if strides is None else tuple(strides), cai.get("typestr"), cai.get("mask"))


def _exact_tuple(value) -> bool:
    """A plain tuple or a torch.Size (whose ``==`` and iteration are tuple's): a print
    holding it changes when its items do. torch is imported where a tensor exists."""
    t = type(value)
    if t is tuple:
        return True
    torch = sys.modules.get("torch")
    return torch is not None and t is getattr(torch, "Size", None)


def _fingerprint_fn(buf):
    """The fingerprint function for ``buf``'s type, or _NOT_CACHED."""
    if type(buf) is GpuArray:
        return _fp_none
    t = type(buf)
    if isinstance(buf, (int, bool)) or not hasattr(t, "__cuda_array_interface__") and \
            "__cuda_array_interface__" not in getattr(buf, "__dict__", ()):
        return _NOT_CACHED
    if callable(getattr(buf, "data_ptr", None)) and callable(getattr(buf, "stride", None)) \
            and _exact_tuple(getattr(buf, "shape", None)) and _exact_tuple(buf.stride()):
        return _fp_torch
    data = getattr(buf, "data", None)
    if hasattr(data, "ptr") and hasattr(buf, "strides") and hasattr(buf, "dtype"):
        return _fp_cupy
    return _fp_cai


class Binding:
    """One bound variant pack of one plan (see the module docstring).

    Attributes
    ----------
    buffers : dict
        role -> bound buffer (a device pointer on a GPU).
    workspace
        The bound workspace (None: the stream's own).
    fn : callable
        The work-item function of one execution with these buffers.
    """

    __slots__ = ("keys", "refs", "checks", "prints", "buffers", "workspace", "fn", "ws_obj",
                 "ws_print", "n", "plain", "__weakref__")

    def __init__(self, keys, bufs, buffers, workspace, fn, ws_obj):
        self.keys = keys
        self.n = len(keys)
        self.buffers = buffers
        self.workspace = workspace
        self.fn = fn
        self.ws_obj = ws_obj
        self.refs = None
        self.checks = None
        self.prints = None
        self.ws_print = None
        fns = [_fingerprint_fn(b) for b in bufs]
        ws_fn = _fingerprint_fn(ws_obj) if ws_obj is not None else _fp_none
        if _NOT_CACHED in fns or ws_fn is _NOT_CACHED:
            return          # not reusable: bound for this submission only
        self.ws_print = ws_fn(ws_obj)
        try:
            self.refs = tuple(weakref.ref(b) for b in bufs)
        except TypeError:   # an object that cannot be referenced weakly
            return
        self.checks = tuple(f for f in fns)
        self.prints = tuple(f(b) for f, b in zip(fns, bufs))
        # no buffer to fingerprint (GpuArrays): a hit is the keys and the objects alone
        self.plain = all(f is _fp_none for f in fns)

    @property
    def cacheable(self) -> bool:
        return self.refs is not None


class BindingCache:
    """The last few bindings of one plan, most recent first.

    Parameters
    ----------
    bind : callable
        ``bind(variant_pack, workspace) -> (buffers, workspace)``: the plan's full
        binding (every check; raises the plan's VariantPackError).
    make_fn : callable
        ``make_fn(buffers, workspace) -> work-item function``.
    enabled : bool
        False: every submission binds anew (host devices).
    """

    __slots__ = ("_bind", "_make_fn", "_entries", "enabled", "hits", "misses")

    def __init__(self, bind, make_fn, *, enabled: bool):
        self._bind = bind
        self._make_fn = make_fn
        self._entries: list[Binding] = []
        self.enabled = enabled
        self.hits = 0
        self.misses = 0

    def get(self, variant_pack, workspace) -> Binding:
        """The binding of ``variant_pack`` / ``workspace``: a cached one when the same
        buffers come again, else a new one (cached when it can be).

        Raises
        ------
        VariantPackError
            As the plan's binding.
        """
        if self.enabled and self._entries and type(variant_pack) is dict:
            n = len(variant_pack)
            for b in self._entries:     # b.matches, inlined: this is every submission
                if b.n != n or workspace is not b.ws_obj:
                    continue
                keys, refs = b.keys, b.refs
                i = 0
                if b.plain:
                    for key, buf in variant_pack.items():
                        if refs[i]() is not buf or (key is not keys[i] and key != keys[i]):
                            break
                        i += 1
                else:
                    checks, prints = b.checks, b.prints
                    for key, buf in variant_pack.items():
                        if refs[i]() is not buf or (key is not keys[i] and key != keys[i]):
                            break
                        f = checks[i]
                        if f is not _fp_none and f(buf) != prints[i]:
                            break
                        i += 1
                if i == n and (workspace is None or
                               _fingerprint_fn(workspace)(workspace) == b.ws_print):
                    self.hits += 1
                    return b
        buffers, ws = self._bind(variant_pack, workspace)
        self.misses += 1
        fn = self._make_fn(buffers, ws)
        if not self.enabled or type(variant_pack) is not dict:
            return Binding((), (), buffers, ws, fn, workspace)
        items = tuple(variant_pack.items())
        b = Binding(tuple(k for k, _ in items), tuple(v for _, v in items), buffers, ws, fn,
                    workspace)
        if b.cacheable:
            self._entries.insert(0, b)
            del self._entries[CACHE_SIZE:]
        return b

    def clear(self) -> None:
        self._entries.clear()
