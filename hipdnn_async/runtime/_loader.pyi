"""Stubs of the vendor-library loader (``src_pyx/_loader.pyx``).

``Library`` opens one shared library by explicit path (``dlopen(RTLD_NOW | RTLD_LOCAL)``);
``LibraryTable`` is the base of every binding's symbol table: opened once under a lock,
symbols filled by name, a missing one raising ``LibraryError`` (a ``DeviceError``) naming
symbol and library when it is called. ``LoadRecord`` says where a library came from.
"""
from dataclasses import dataclass

__all__: list[str]

@dataclass(frozen=True)
class LoadRecord:
    """Where a library was loaded from: ``name``, ``path``, ``found_via``, ``version``."""

    name: str
    path: str
    found_via: str
    version: int

class Library:
    """One shared library opened by explicit path; LibraryError (naming path and dlerror) on failure."""

    name: str
    path: str
    found_via: str
    prefix: str
    missing: list[str]
    looked_up: list[str]
    version: int | None

    def __init__(self, name: str, path: str, found_via: str = "explicit",
                 prefix: str = "") -> None:
        """Open ``path``; symbols are looked up as ``prefix + name``."""
    def address(self, name: str) -> int:
        """The address of ``prefix + name``; 0 when it is not exported."""
    @property
    def file_name(self) -> str:
        """The file name of ``path``."""

class LibraryTable:
    """Base of a binding's symbol table (one library, opened once, under a lock)."""

    name: str
    prefix: str
    title: str
    lib: Library | None
    required: tuple[str, ...]
    record: LoadRecord | None

    def __init__(self, name: str, prefix: str, title: str,
                 required: tuple[str, ...] = ()) -> None:
        """An empty table for library ``name`` with symbol prefix ``prefix``."""
    def load(self, path: str, found_via: str = "explicit") -> LoadRecord:
        """Open ``path`` and fill the table once; LibraryError if it does not open or lacks a required symbol."""
    @property
    def loaded(self) -> bool:
        """True once a library is loaded into this table."""
    def address(self, name: str) -> int:
        """The address of ``prefix + name``; LibraryError naming symbol and library if absent or not loaded."""

def status_table(family: type, entries: dict[int, str | tuple[str, type | None]]
                 ) -> dict[int, tuple[str, type | None]]:
    """A binding's status table ``{status: (name, error type)}``; a bare name's type is ``family``."""
