# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._loader`` (cimported by every vendor binding).

``Library`` is one opened shared library; ``LibraryTable`` is the base of a binding's
symbol table (a ``cdef class`` whose subclass holds named function pointers and fills them
in ``_fill``). See ``_loader.pyx`` for the contract.
"""


cdef class Library:
    cdef void* handle
    cdef readonly str name          # the library's short name: "cudart", "hip", "cudnn", ...
    cdef readonly str path          # as passed to dlopen (absolute path or soname)
    cdef readonly str found_via     # "env", "site-packages", "system", "explicit"
    cdef readonly str prefix        # symbol prefix the table adds ("cuda", "hip", "cudnn", ...)
    cdef readonly list missing      # full names looked up and absent
    cdef readonly list looked_up    # full names looked up, in lookup order
    cdef public object version      # set by the table once loaded (the library's own number)

    cdef void* sym(self, str name) except? NULL
    cdef void* sym_first(self, tuple names) except? NULL
    cdef void _close(self) noexcept


cdef class LibraryTable:
    cdef readonly str name
    cdef readonly str prefix
    cdef readonly str title          # for messages: "CUDA runtime", "cuDNN", ...
    cdef readonly Library lib        # None until loaded
    cdef readonly tuple required     # names (without prefix) a library must export to be taken
    cdef readonly object record      # LoadRecord once loaded, else None
    cdef bint _ready
    cdef object _lock

    # overridden by each binding
    cdef int _fill(self, Library lib) except -1
    cdef void _clear(self) noexcept
    cdef object _version(self)

    # raises LibraryError for ``prefix + name`` (not loaded / not exported); GIL taken inside
    cdef int missing(self, const char* name) except -1 with gil
    # the typed error of a status a call returned, from the binding's status table
    cdef object status_error(self, dict table, object family, int status, str call,
                             str status_name=*, str vendor_message=*)
