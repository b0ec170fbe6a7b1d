"""Every vendor binding is built on the one loader (issue 9, "How it is checked": no
near-copy of the loader remains; a third binding adds only its own symbol list and
wrappers).

Each binding's symbol table is a ``_loader.LibraryTable`` subclass (opened, filled once
under the table's lock and recorded by the loader); no Cython source other than
``_loader.pyx`` opens libraries, looks up symbols or keeps a lock or a numbered symbol
array of its own.
"""
import pathlib
import re

import pytest

from hipdnn_async._errors import LibraryError
from hipdnn_async.runtime import _cudnn, _cudnn_backend, _gpu, _loader, _miopen, _onednn

SRC = pathlib.Path(__file__).resolve().parents[3] / "src_pyx"

# binding module -> its table object(s)
TABLES = {
    "_gpu": lambda: [_gpu.instance("cuda"), _gpu.instance("hip")],
    "_cudnn": lambda: [_cudnn.TABLE],
    "_cudnn_backend": lambda: [_cudnn_backend.TABLE],
    "_miopen": lambda: [_miopen.TABLE],
    "_onednn": lambda: [_onednn.TABLE],
}


def _bindings():
    """The vendor bindings in src_pyx: every .pyx that cimports the loader."""
    return sorted(p.stem for p in SRC.glob("*.pyx")
                  if p.stem != "_loader" and re.search(r"^from \._loader cimport", p.read_text(), re.M))


def test_every_binding_is_listed_here():
    if not SRC.is_dir():
        pytest.skip("not a source tree (no src_pyx)")
    assert _bindings() == sorted(TABLES)


@pytest.mark.parametrize("module", sorted(TABLES))
def test_each_table_is_a_library_table_subclass(module):
    for table in TABLES[module]():
        assert isinstance(table, _loader.LibraryTable)
        assert type(table) is not _loader.LibraryTable, "a subclass with its own named symbols"
        # the loader's own lock, flag and record: nothing the binding re-implements
        assert table.loaded in (True, False) and hasattr(table, "record")


# What only the loader may do, as it appears in code (comments and docstrings aside).
_LOADER_ONLY = {
    "dlopen/dlsym/dlclose/dlerror": re.compile(r"\b(dlopen|dlsym|dlclose|dlerror)\s*\("),
    "<dlfcn.h>": re.compile(r"dlfcn"),
    "a lock": re.compile(r"\bthreading\b|\bLock\s*\(|\bRLock\s*\("),
    "ctypes": re.compile(r"\bctypes\b"),
    "a numbered symbol table": re.compile(r"^cdef\s+void\s*\*\s*\w+\s*\[|^DEF\s+I_\w+\s*=|^DEF\s+N_FUNCS",
                                          re.M),
}


def _code(text: str) -> str:
    """``text`` without comments and string literals (docstrings included)."""
    text = re.sub(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', text)
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


@pytest.mark.parametrize("path", sorted(p.name for p in SRC.glob("*.p*") if p.suffix in (".pyx", ".pxd")
                                        and not p.stem.startswith(("_loader", "_cpu_kernels"))))
def test_no_binding_carries_loader_code(path):
    code = _code((SRC / path).read_text())
    found = [what for what, pattern in _LOADER_ONLY.items() if pattern.search(code)]
    assert not found, f"{path} does what only _loader may: {found}"


def test_the_patterns_find_loader_code():
    """The scan is not vacuous: the loader itself trips it, and a numbered table would."""
    code = _code((SRC / "_loader.pyx").read_text())
    assert _LOADER_ONLY["dlopen/dlsym/dlclose/dlerror"].search(code)
    assert _LOADER_ONLY["a lock"].search(code)
    assert _LOADER_ONLY["a numbered symbol table"].search("cdef void* _fn[N_FUNCS]\n")
    assert not _LOADER_ONLY["dlopen/dlsym/dlclose/dlerror"].search(_code('"""uses ``dlopen(3)``"""'))


def test_a_binding_table_fills_by_name_through_the_loader(tmp_path):
    """The backend table (the last one ported) loads through LibraryTable.load: the
    library's record names the symbols looked up by name, and an absent one raises at call
    time naming symbol and library. Run on libm, which has none of cuDNN's symbols, in a
    table of its own (the module's table is one per process)."""
    import ctypes.util
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to open")
    table = _cudnn_backend.BackendTable()
    record = table.load(libm, "explicit")
    assert record.path == libm and record.found_via == "explicit" and record.version == 0
    assert table.lib.looked_up == ["cudnn" + n for n in _cudnn_backend.NAMES]
    assert table.lib.missing == table.lib.looked_up
    with pytest.raises(LibraryError, match=f"cudnnBackendExecute is not exported by {re.escape(libm)}"):
        table.address("BackendExecute")


_PROBE = r"""
import json, sys
from hipdnn_async import _errors
from hipdnn_async.runtime import _cudnn_backend as be
out = {"before": list(be.available())}
try:
    be.Descriptor(be.BACKEND_TENSOR_DESCRIPTOR)
except _errors.LibraryError as e:
    out["unloaded"] = [str(e), e.call]
rec = be.load(sys.argv[1])
out["record"] = [rec.path, rec.found_via, be.loaded_path(), be.loaded() is rec]
out["after"] = list(be.available())
for call in (lambda: be.Descriptor(be.BACKEND_TENSOR_DESCRIPTOR), be.version):
    try:
        call()
    except _errors.LibraryError as e:
        out.setdefault("missing", []).append([str(e), e.call, isinstance(e, _errors.DeviceError)])
print(json.dumps(out))
"""


def test_the_module_table_raises_at_call_time_naming_symbol_and_library():
    """The module's own table (one per process, so in a fresh interpreter) on a library
    without the backend API: loading succeeds, ``available()`` says why the API cannot be
    used, and each call raises a LibraryError (a DeviceError) naming symbol and library."""
    import ctypes.util
    import json
    import subprocess
    import sys
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to open")
    r = subprocess.run([sys.executable, "-c", _PROBE, libm], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["before"] == [False, "the cuDNN backend API is not loaded"]
    assert out["unloaded"][1] == "cudnnBackendCreateDescriptor"
    assert "cuDNN backend API library is not loaded" in out["unloaded"][0]
    assert out["record"] == [libm, "explicit", libm, True]
    ok, why = out["after"]
    assert not ok and why.startswith(f"{libm} does not export the cuDNN backend API (")
    assert "cudnnBackendExecute" in why
    assert out["missing"] == [
        [f"cudnnBackendCreateDescriptor is not exported by {libm}", "cudnnBackendCreateDescriptor", True],
        [f"cudnnGetVersion is not exported by {libm}", "cudnnGetVersion", True]]
