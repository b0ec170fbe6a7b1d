# cython: language_level=3, boundscheck=False, wraparound=False
"""Vendor-library loading (``hipdnn_async.runtime._loader``): the one library-table type
every vendor binding (GPU runtimes, cuDNN, MIOpen, ...) is built on.

Wrapping contract
-----------------
- ``Library(name, path, found_via, prefix)`` opens one shared library by the path given
  (an absolute path or a soname; ``dlopen(RTLD_NOW | RTLD_LOCAL)``, so two runtimes with
  clashing symbols coexist). A failure is a ``LibraryError`` (a ``DeviceError``) naming
  the path and ``dlerror()``. ``sym(name)`` looks up ``prefix + name`` and returns NULL
  when it is absent, recording the name in ``missing``; nothing is checked at load.
- ``LibraryTable`` is the base of a binding's symbol table (cuda-python's
  ``_internal/*_linux.pyx`` model): the subclass declares one named, typed function
  pointer per C function, fills them in ``_fill`` by name, and NULLs them in ``_clear``.
  ``load(path, found_via)`` opens the library once: a flag checked, then re-checked under
  a ``threading.Lock`` (two threads never open twice). A library that lacks one of the
  table's ``required`` names is refused (``LibraryError``) and the table stays empty, so
  a later ``load`` may take the right one. The outcome is a ``LoadRecord``, logged.
- A wrapper whose pointer is NULL calls ``missing(b"Name")``, which raises
  ``LibraryError("<prefix>Name is not exported by <path>")`` at CALL time, not at load
  (CuPy's SoftLink), or ``"... is not loaded"`` before any load.
- Errors a library reports are built by its binding from its status table (made by
  :func:`status_table`) with ``LibraryTable.status_error`` (over
  ``hipdnn_async._errors.status_error``), naming the library file.
"""
import dataclasses
import logging
import os
import threading

from libc.stdint cimport uintptr_t

from hipdnn_async import _errors

cdef extern from "<dlfcn.h>" nogil:
    void* dlopen(const char*, int)
    void* dlsym(void*, const char*)
    int dlclose(void*)
    char* dlerror()
    int RTLD_NOW
    int RTLD_LOCAL

__all__ = ["Library", "LibraryTable", "LoadRecord", "status_table"]

_log = logging.getLogger("hipdnn_async")


@dataclasses.dataclass(frozen=True)
class LoadRecord:
    """Where a library was loaded from (cuda.pathfinder's ``LoadedDL``).

    Attributes
    ----------
    name : str
        The library's short name (``"cudart"``, ``"hip"``, ``"cudnn"``, ``"miopen"``).
    path : str
        What was opened: an absolute path, or a soname the system loader resolved.
    found_via : str
        ``"env"`` (an override variable), ``"site-packages"`` (a wheel), ``"system"``
        (the loader's search path) or ``"explicit"`` (a caller's path).
    version : int
        The library's own version number (``cudaRuntimeGetVersion``, ``cudnnGetVersion``...).
    """

    name: str
    path: str
    found_via: str
    version: int


cdef str _dlerror(str fallback):
    cdef char* err = dlerror()
    return err.decode(errors="replace") if err != NULL else fallback


# ------------------------------------------------------------------ one opened library
cdef class Library:
    """One shared library opened by explicit path.

    Parameters
    ----------
    name : str
        Short name for records and messages (``"cudnn"``).
    path : str
        Absolute path or soname.
    found_via : str, optional
        How ``path`` was found (see ``LoadRecord``). Default ``"explicit"``.
    prefix : str, optional
        Prepended to every name looked up (``"cuda"`` + ``"Malloc"``). Default ``""``.

    Raises
    ------
    LibraryError
        ``dlopen`` failed; the message names the path and ``dlerror()``.
    """

    def __init__(self, str name, str path, str found_via="explicit", str prefix=""):
        self.name, self.path, self.found_via, self.prefix = name, path, found_via, prefix
        self.missing = []
        self.looked_up = []
        self.version = None
        dlerror()   # clear a stale message
        self.handle = dlopen(os.fsencode(path), RTLD_NOW | RTLD_LOCAL)
        if self.handle == NULL:
            why = _dlerror("dlopen failed without a message")
            raise _errors.LibraryError(f"{name}: cannot open {path}: {why}", library=path,
                                       call="dlopen", vendor_message=why)

    cdef void* sym(self, str name) except? NULL:
        """``prefix + name``, or NULL (recorded in ``missing``)."""
        full = self.prefix + name
        cdef void* p = dlsym(self.handle, full.encode())
        self.looked_up.append(full)
        if p == NULL:
            self.missing.append(full)
        return p

    cdef void* sym_first(self, tuple names) except? NULL:
        """The first of ``names`` exported (versioned aliases, e.g. ``GetDeviceProperties_v2``
        before ``GetDeviceProperties``); NULL, with the first name recorded, if none is."""
        cdef void* p = NULL
        for name in names:
            full = self.prefix + name
            p = dlsym(self.handle, full.encode())
            if p != NULL:
                self.looked_up.append(full)
                return p
        self.looked_up.append(self.prefix + names[0])
        self.missing.append(self.prefix + names[0])
        return NULL

    cdef void _close(self) noexcept:
        # only for a library the table refused: no pointer into it is kept
        if self.handle != NULL:
            dlclose(self.handle)
            self.handle = NULL

    def address(self, str name):
        """The address of ``prefix + name`` as an int; 0 when it is not exported."""
        if self.handle == NULL:
            return 0
        return <uintptr_t>dlsym(self.handle, (self.prefix + name).encode())

    @property
    def file_name(self):
        """The file name of ``path`` (``"libcudnn.so.9"``)."""
        return os.path.basename(self.path)

    def __repr__(self):
        return (f"Library({self.name!r}, {self.path!r}, found_via={self.found_via!r}, "
                f"version={self.version!r})")


# ------------------------------------------------------------------ a binding's symbol table
cdef class LibraryTable:
    """Base of a binding's symbol table: one library, opened once, under a lock.

    Parameters
    ----------
    name : str
        Short library name (``"cudnn"``); also the ``LoadRecord`` name.
    prefix : str
        Symbol prefix (``"cudnn"``, ``"cuda"``, ``"hip"``).
    title : str
        For messages (``"cuDNN"``, ``"CUDA runtime"``).
    required : tuple of str, optional
        Names (without prefix) a library must export to be accepted.
    """

    def __cinit__(self, *args, **kwargs):
        self._lock = threading.Lock()
        self._ready = False
        self.lib = None
        self.record = None

    def __init__(self, str name, str prefix, str title, tuple required=()):
        self.name, self.prefix, self.title, self.required = name, prefix, title, required

    # -------------------------------------------------------------- hooks (bindings override)
    cdef int _fill(self, Library lib) except -1:
        return 0

    cdef void _clear(self) noexcept:
        pass

    cdef object _version(self):
        return 0

    # -------------------------------------------------------------- loading
    def load(self, str path, str found_via="explicit"):
        """Open the library at ``path`` and fill the table; idempotent (a loaded table
        returns its record and ignores ``path``).

        Returns
        -------
        LoadRecord

        Raises
        ------
        LibraryError
            ``dlopen`` failed, or the library lacks one of the ``required`` symbols (the
            table is left empty and the library closed).
        """
        if self._ready:
            return self.record
        cdef Library lib
        with self._lock:
            if self._ready:
                return self.record
            lib = Library(self.name, path, found_via, self.prefix)
            try:
                self._fill(lib)
                absent = [self.prefix + n for n in self.required if not lib.address(n)]
                if absent:
                    raise _errors.LibraryError(
                        f"{path} is not a {self.title} library: it lacks "
                        + ", ".join(absent[:4]), library=path, call=absent[0])
                self.lib = lib
                lib.version = int(self._version())
            except BaseException:
                self._clear()
                self.lib = None
                lib._close()
                raise
            self.record = LoadRecord(self.name, path, found_via, lib.version)
            self._ready = True
        _log.info("loaded %s from %s (%s), version %s", self.title, path, found_via,
                 lib.version)
        return self.record

    @property
    def loaded(self):
        """True once a library is loaded into this table."""
        return self._ready

    cdef int missing(self, const char* name) except -1 with gil:
        full = self.prefix + name.decode()
        if self.lib is None:
            raise _errors.LibraryError(f"{full}: the {self.title} library is not loaded "
                                       "(hipdnn_async.runtime.load_vendor loads it)",
                                       library=self.name, call=full)
        raise _errors.LibraryError(f"{full} is not exported by {self.lib.path}",
                                   library=self.lib.path, call=full)

    cdef object status_error(self, dict table, object family, int status, str call,
                             str status_name=None, str vendor_message=""):
        """The typed error of ``status`` returned by ``call`` (``_errors.status_error``
        over the binding's ``table``, ``family`` for a status absent from it), naming the
        loaded library's file (or the table's name before a load)."""
        return _errors.status_error(table, family,
                                    library=self.lib.path if self.lib is not None else self.name,
                                    call=call, status=status, status_name=status_name,
                                    vendor_message=vendor_message)

    def address(self, str name):
        """The address of ``prefix + name`` in the loaded library, as an int.

        Raises
        ------
        LibraryError
            Not loaded, or the symbol is not exported (naming symbol and library).
        """
        cdef uintptr_t p = 0
        if self.lib is not None:
            p = self.lib.address(name)
        if p == 0:
            self.missing(name.encode())
        return p

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r} {self.record!r}>"


def status_table(family, dict entries):
    """A binding's status table, ``{status: (name, error type)}``, from ``entries``
    (``{status: name}`` or ``{status: (name, type)}``): a bare name's type is ``family``
    (the library's base error); a pair keeps its own (``None``: not a failure).
    ``_errors.status_error`` reads the table."""
    return {status: (entry, family) if isinstance(entry, str) else entry
            for status, entry in entries.items()}
