# cython: language_level=3
"""Bindings reused across submissions: the submit path's cache (issue 11 item 2), in C.

Binding a variant pack (resolving keys, checking every buffer's device, dtype, shape,
strides and pointer, the aliasing rule, the workspace) costs far more host time than
enqueuing the work. A :class:`Binding` is that work done once for one (plan, buffers):
the bound buffers, the workspace and the work-item function that launches them (the
provider plan's ``launcher``, e.g. the cuDNN graph engine's C launch with a prebuilt
variant pack). When the same buffers come again (the same keys and the same buffer
objects, in the same order, and each buffer's cheap fingerprint unchanged) the binding is
reused and no check runs again. A hit is compared in C, allocating nothing.

Fingerprints: a ``GpuArray`` is immutable (nothing to check); a NumPy array (exactly
``np.ndarray``) by its data pointer, dims, strides, dtype object and writeable flag, read
in C (its data pointer cannot change, but ``shape``, ``strides``, ``dtype`` and the flag
can be set in place); a host ``DeviceArray`` by its ``view`` object and that view's print;
an array with ``data_ptr()``, ``shape``, ``stride()`` and ``dtype`` (PyTorch-style; its
shape a tuple or ``torch.Size`` and its stride() a tuple, not a subclass that may compare
equal to anything or change its items) by those; one with ``data.ptr``, ``shape``,
``strides``, ``dtype`` (CuPy-style) by those; any other ``__cuda_array_interface__``
object by its interface dict. Int pointers and DLPack-only objects are not cached (an int
may name freed memory next time; a DLPack export is the only way to read the other), so
they are bound on every submission. The cache keeps weak references to the buffer objects
it compares, so a new object at a freed one's address never hits.

What a binding holds: on a GPU, pointers (never a user's memory). On a host device the
bound buffers are views of the user's memory, and the work-item function needs them, so
a cached binding keeps them alive: at most ``CACHE_SIZE`` packs per plan, each of at most
``HOST_CACHE_BYTES`` (a larger pack is bound on every call: its kernel's time dwarfs the
binding's). A host binding with a workspace allocated for it (``workspace=None`` and a
workspace needed) is cached without that workspace: each hit takes a fresh one (the
cache's ``take_workspace``) and makes its work-item function anew, as concurrent
executions of one binding must not share a workspace; what a hit skips is the binding's
checks, the larger part of its cost. Where the function is a oneDNN launch whose host
hooks do not read the workspace, the binding keeps a template of it on no workspace, and
a hit copies that onto the fresh workspace in C instead of making it anew (1.0 of 6 us
of a tiny convolution). A larger pack of plain NumPy arrays that bind as
themselves (logical dims and strides; no ``workspace=``) is cached by reference only (its
``recipe``: weak references, C prints, and which pack value each role is): it keeps
nothing alive, and a hit rebuilds the role map from the pack it is given and makes the
work-item function anew (a 3 MB batchnorm pack: 12 us of checks per call before).
"""
from cpython.dict cimport PyDict_Next, PyDict_Values
from cpython.object cimport PyObject, PyObject_RichCompareBool, Py_EQ
from cpython.weakref cimport PyWeakref_GET_OBJECT
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp
cimport numpy as cnp

import sys
import weakref

import numpy as np

from ._buffer import DeviceArray as _DeviceArray
try:   # the GPU bindings build everywhere; a source tree may lack them (runtime/__init__)
    from ._gpu_device import GpuArray as _GpuArray
except ImportError:  # pragma: no cover
    _GpuArray = None

cnp.import_array()

__all__ = ["BindingCache", "Binding", "CACHE_SIZE", "HOST_CACHE_BYTES"]

CACHE_SIZE = 4        # bindings kept per plan (double buffering and a little more)
# Bytes of host buffers a cached binding may keep alive (the sum over its pack): the
# binding of a larger pack costs little beside the kernel that reads it.
HOST_CACHE_BYTES = 1 << 20
cdef Py_ssize_t _CACHE_SIZE = CACHE_SIZE
cdef enum:
    _K_NONE = 0       # nothing to check (GpuArray)
    _K_ND = 1         # a NumPy array's C print
    _K_DEVARRAY = 2   # a host DeviceArray: its view object and that view's C print
    _K_PY = 3         # a Python fingerprint function

_NOT_CACHED = object()


# NdPrint keeps dims and strides as Py_ssize_t (the .pxd needs no NumPy): the same type
assert sizeof(cnp.npy_intp) == sizeof(Py_ssize_t)


cdef bint _nd_print(object arr, NdPrint* out):
    """Fill ``out`` with ``arr``'s print (an exact ndarray); False when it has too many dims."""
    cdef cnp.ndarray a = <cnp.ndarray>arr
    cdef int nd = cnp.PyArray_NDIM(a), k
    if nd > _MAX_NDIM:
        return False
    out.data = cnp.PyArray_DATA(a)
    out.ndim = nd
    out.writeable = (cnp.PyArray_FLAGS(a) & cnp.NPY_ARRAY_WRITEABLE) != 0
    out.descr = <void*>cnp.PyArray_DESCR(a)
    for k in range(nd):
        out.dims[k] = <Py_ssize_t>cnp.PyArray_DIMS(a)[k]
        out.strides[k] = <Py_ssize_t>cnp.PyArray_STRIDES(a)[k]
    return True


cdef inline bint _nd_same(object arr, NdPrint* p) noexcept:
    """Whether exact ndarray ``arr`` still has print ``p`` (no allocation)."""
    cdef cnp.ndarray a = <cnp.ndarray>arr
    cdef int nd = cnp.PyArray_NDIM(a)
    if (nd != p.ndim or cnp.PyArray_DATA(a) != p.data
            or <void*>cnp.PyArray_DESCR(a) != p.descr
            or ((cnp.PyArray_FLAGS(a) & cnp.NPY_ARRAY_WRITEABLE) != 0) != p.writeable):
        return False
    return (memcmp(cnp.PyArray_DIMS(a), p.dims, nd * sizeof(cnp.npy_intp)) == 0 and
            memcmp(cnp.PyArray_STRIDES(a), p.strides, nd * sizeof(cnp.npy_intp)) == 0)


def _fp_none(buf):
    return None


def _fp_ndarray(buf):
    # compared in C (_nd_same); this is its Python form, for a workspace
    return (buf.__array_interface__["data"][0], buf.shape, buf.strides, buf.dtype,
            bool(buf.flags.writeable))


def _fp_device_array(buf):
    # compared in C (the view object and its print); this is its Python form
    return (id(buf.view), _fp_ndarray(buf.view))


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
    t = type(buf)
    if t is _GpuArray and t is not None:
        return _fp_none
    if t is np.ndarray:
        return _fp_ndarray
    if t is _DeviceArray:
        return _fp_device_array if type(buf.view) is np.ndarray else _NOT_CACHED
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


def _host_bytes(buf) -> int:
    """Bytes of host memory a binding of ``buf`` (a buffer of a host device's pack) may
    keep alive: a NumPy view's base array and a torch tensor's whole storage (a view
    keeps all of it), another buffer's ``nbytes`` (0 where it has none)."""
    t = type(buf)
    if t is _DeviceArray:
        buf = buf.view
        t = type(buf)
    if t is np.ndarray:
        return max(buf.nbytes, _base_bytes(buf.base))
    storage = getattr(buf, "untyped_storage", None)
    if callable(storage):
        return storage().nbytes()
    n = getattr(buf, "nbytes", 0)
    return n if type(n) is int else 0


def _base_bytes(base) -> int:
    """Bytes of the largest object in a NumPy array's ``base`` chain: the array owning
    the data, but also what a view made otherwise holds (``as_strided``: a DummyArray
    holding the array; ``np.frombuffer``: a bytes object, memoryview or mmap;
    ``tensor.numpy()``: the torch tensor, holding its whole storage). An object that
    cannot say (its attribute raises) counts as more than HOST_CACHE_BYTES."""
    n = 0
    for _ in range(32):             # a chain is short; the bound only guards a cycle
        if base is None:
            break
        if isinstance(base, np.ndarray):
            n = max(n, base.nbytes)
            base = base.base
            continue
        try:
            if isinstance(base, memoryview):
                n = max(n, base.nbytes)
                base = base.obj
            elif callable(getattr(type(base), "untyped_storage", None)):
                # a torch tensor (tensor.numpy(), np.asarray(tensor)): its whole storage
                return max(n, base.untyped_storage().nbytes())
            else:
                try:
                    n = max(n, memoryview(base).nbytes)
                except (TypeError, ValueError, BufferError):  # no buffer (DummyArray)
                    got = getattr(base, "nbytes", 0)
                    n = max(n, got if type(got) is int else 0)
                base = getattr(base, "base", None)
        except Exception:           # a foreign object's property: not trusted to be small
            return HOST_CACHE_BYTES + 1
    return n


def _recipe(dict buffers, tuple bufs):
    """((role, index into bufs), ...) where every bound buffer is a pack value itself, a
    plain NumPy array; else None (a view made by binding, another type: not rebuilt)."""
    index = {id(v): i for i, v in enumerate(bufs) if type(v) is np.ndarray}
    out = []
    for role, v in buffers.items():
        i = index.get(id(v))
        if i is None:
            return None
        out.append((role, i))
    return tuple(out)


def _pack_bytes(bufs) -> int:
    return sum(_host_bytes(v) for v in bufs)


cdef class Binding:
    """One bound variant pack of one plan (see the module docstring).

    Attributes
    ----------
    buffers : dict
        role -> bound buffer (a device pointer on a GPU, a NumPy view on the CPU).
    workspace
        The bound workspace (None: the stream's own, or none needed).
    fn : callable
        The work-item function of one execution with these buffers.
    """

    def __init__(self, tuple keys, tuple bufs, buffers, workspace, fn, ws_obj):
        self.fresh_ws = False
        self.recipe = None
        self.template = None
        self.keys = keys
        self.n = len(keys)
        self.buffers = buffers
        self.workspace = workspace
        self.fn = fn
        self.ws_obj = ws_obj
        if not keys:
            return          # bound for this submission only
        fns = [_fingerprint_fn(b) for b in bufs]
        ws_fn = _fingerprint_fn(ws_obj) if ws_obj is not None else _fp_none
        if _NOT_CACHED in fns or ws_fn is _NOT_CACHED:
            return          # not reusable: bound for this submission only
        self.ws_print = ws_fn(ws_obj)
        try:
            refs = tuple(weakref.ref(b) for b in bufs)
        except TypeError:   # an object that cannot be referenced weakly
            return
        n = self.n
        self.kinds = <int*>calloc(max(n, 1), sizeof(int))
        self.nd = <NdPrint*>calloc(max(n, 1), sizeof(NdPrint))
        if self.kinds == NULL or self.nd == NULL:
            raise MemoryError
        prints, descrs = [], []
        cdef Py_ssize_t i
        for i in range(n):
            f, b = fns[i], bufs[i]
            view = b.view if f is _fp_device_array else b
            if f is _fp_none:
                self.kinds[i] = _K_NONE
            elif (f is _fp_ndarray or f is _fp_device_array) and _nd_print(view, &self.nd[i]):
                self.kinds[i] = _K_ND if f is _fp_ndarray else _K_DEVARRAY
                descrs.append(view.dtype)        # the print's dtype pointer stays valid
            elif f is _fp_ndarray or f is _fp_device_array:
                return      # more dims than a C print holds: bound every time
            else:
                self.kinds[i] = _K_PY
            prints.append(view if f is _fp_device_array else
                          (f(b) if self.kinds[i] == _K_PY else None))
        self.checks = tuple(fns)
        self.prints = tuple(prints)
        self.descrs = tuple(descrs)
        # no buffer to fingerprint (GpuArrays): a hit is the keys and the objects alone
        self.plain = all(f is _fp_none for f in fns)
        self.refs = refs

    def __dealloc__(self):
        free(self.kinds)
        free(self.nd)

    @property
    def cacheable(self) -> bool:
        return self.refs is not None

    cdef Binding one_off(self, buffers, workspace, fn):
        """A binding of ``buffers`` with ``workspace`` and ``fn``, for one execution
        (never cached, nothing to compare)."""
        cdef Binding b = Binding.__new__(Binding)
        b.keys = ()
        b.buffers = buffers
        b.workspace = workspace
        b.fn = fn
        return b

    cdef bint matches(self, dict variant_pack, object workspace):
        """Whether ``variant_pack`` / ``workspace`` are this binding's buffers, unchanged."""
        cdef Py_ssize_t pos = 0, i = 0, n = self.n
        cdef PyObject* key
        cdef PyObject* buf
        cdef int kind
        if len(variant_pack) != n or workspace is not self.ws_obj:
            return False
        keys, refs = self.keys, self.refs
        while PyDict_Next(variant_pack, &pos, &key, &buf):
            if PyWeakref_GET_OBJECT(refs[i]) != buf:
                return False
            k = keys[i]
            if key != <PyObject*>k and not PyObject_RichCompareBool(<object>key, k, Py_EQ):
                return False
            kind = self.kinds[i]
            if kind == _K_ND:
                if not _nd_same(<object>buf, &self.nd[i]):
                    return False
            elif kind == _K_DEVARRAY:
                view = (<object>buf).view
                if view is not self.prints[i] or not _nd_same(view, &self.nd[i]):
                    return False
            elif kind == _K_PY:
                if self.checks[i](<object>buf) != self.prints[i]:
                    return False
            i += 1
        return workspace is None or _fingerprint_fn(workspace)(workspace) == self.ws_print


cdef object _template(fn):
    """A copy of ``fn`` on no workspace, where ``fn`` can be copied onto another one in C
    (``_onednn.Launch.with_workspace``: a launch whose host hooks do not read the
    workspace), else None."""
    with_ws = getattr(fn, "with_workspace", None)
    return with_ws(None) if with_ws is not None else None


cdef class BindingCache:
    """The last few bindings of one plan, most recent first.

    Parameters
    ----------
    bind : callable
        ``bind(variant_pack, workspace) -> (buffers, workspace)``: the plan's full
        binding (every check; raises the plan's VariantPackError).
    make_fn : callable
        ``make_fn(buffers, workspace) -> work-item function``.
    enabled : bool
        False: every submission binds anew.
    host : bool, optional
        The buffers are host memory (the CPU device): what a binding keeps alive is
        bounded (module docstring). Default False.
    take_workspace : callable, optional
        ``take_workspace()`` -> a fresh workspace for one execution (the host device's
        pool; raises as ``bind`` does): lets a host binding whose workspace was allocated
        for it be cached without it (module docstring). None: such bindings are bound
        on every submission.
    """

    def __init__(self, bind, make_fn, *, bint enabled, bint host=False,
                 take_workspace=None):
        self._bind = bind
        self._make_fn = make_fn
        self._take_ws = take_workspace
        self._entries = []
        self.enabled = enabled
        self.host = host
        self.hits = 0
        self.misses = 0

    def get(self, variant_pack, workspace):
        """The binding of ``variant_pack`` / ``workspace``: a cached one when the same
        buffers come again, else a new one (cached when it can be).

        Raises
        ------
        VariantPackError
            As the plan's binding.
        """
        return self.lookup(variant_pack, workspace)

    cpdef Binding lookup(self, variant_pack, workspace):
        """:meth:`get` (C callers call this directly)."""
        cdef Binding b
        if self.enabled and type(variant_pack) is dict:
            for entry in self._entries:
                b = <Binding>entry
                if b.refs is not None and b.matches(<dict>variant_pack, workspace):
                    self.hits += 1
                    if b.recipe is None and not b.fresh_ws:
                        return b
                    buffers = b.buffers
                    if b.recipe is not None:
                        # the pack's values, in the order matches() compared them
                        values = PyDict_Values(<dict>variant_pack)
                        buffers = {role: values[i] for role, i in b.recipe}
                    ws = self._take_ws() if b.fresh_ws else None
                    fn = None
                    if b.template is not None:
                        try:
                            fn = b.template.with_workspace(ws)
                        except ValueError:
                            # the plan's program changed since (reorder_constants on
                            # another thread, before it dropped this binding): made anew
                            fn = None
                    return b.one_off(buffers, ws, fn if fn is not None else
                                     self._make_fn(buffers, ws))
        buffers, ws = self._bind(variant_pack, workspace)
        self.misses += 1
        fn = self._make_fn(buffers, ws)
        if not self.enabled or type(variant_pack) is not dict:
            return Binding((), (), buffers, ws, fn, workspace)
        keys = tuple(variant_pack.keys())
        bufs = tuple(variant_pack.values())
        fresh = self.host and workspace is None and ws is not None
        recipe = None
        if fresh and self._take_ws is None:
            return Binding((), (), buffers, ws, fn, workspace)
        if self.host and _pack_bytes(bufs) > HOST_CACHE_BYTES:
            recipe = _recipe(buffers, bufs) if workspace is None else None
            if recipe is None:
                return Binding((), (), buffers, ws, fn, workspace)
        if recipe is not None:
            # by reference only: no buffer, workspace or function kept (module docstring)
            b = Binding(keys, bufs, None, None, None, workspace)
            b.recipe = recipe
            b.fresh_ws = fresh
        elif fresh:
            # cached without this execution's workspace and function (module docstring),
            # with the function as a template where it copies onto another workspace
            b = Binding(keys, bufs, buffers, None, None, workspace)
            b.fresh_ws = True
            b.template = _template(fn)
        else:
            b = Binding(keys, bufs, buffers, ws, fn, workspace)
        if b.cacheable:
            self._entries.insert(0, b)
            del self._entries[_CACHE_SIZE:]
        return b.one_off(buffers, ws, fn) if (fresh or recipe is not None) else b

    def clear(self) -> None:
        self._entries.clear()
