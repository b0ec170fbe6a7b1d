"""runtime._loader: opening libraries by path, the load record, missing symbols at call
time, the locked one-time load. A real system library (libm) stands in for a vendor one."""
import ctypes
import math
import os
import pickle
import threading

import pytest

import hipdnn_async as hd
from hipdnn_async._errors import LibraryError
from hipdnn_async.runtime import _loader


@pytest.fixture(scope="module")
def libm_path():
    """The absolute path of the C math library this process maps (from /proc/self/maps)."""
    ctypes.CDLL("libm.so.6")
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libm." in line or "/libm-" in line}
    paths = sorted(p for p in paths if os.path.isfile(p))
    if not paths:
        pytest.skip("no libm mapped from a file on this system")
    return paths[0]


def test_a_library_opens_by_absolute_path_and_finds_symbols(libm_path):
    lib = _loader.Library("m", libm_path)
    assert (lib.name, lib.path, lib.found_via, lib.file_name) == (
        "m", libm_path, "explicit", os.path.basename(libm_path))
    addr = lib.address("cos")
    assert addr != 0
    cos = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(addr)
    assert cos(0.5) == math.cos(0.5)       # the address is really libm's cos
    assert lib.address("no_such_symbol_xyz") == 0


def test_a_prefix_is_prepended_to_every_name(libm_path):
    lib = _loader.Library("m", libm_path, prefix="co")
    assert lib.address("s") == _loader.Library("m", libm_path).address("cos") != 0


@pytest.mark.parametrize("make_path, dlerror_text", [
    (lambda tmp: str(tmp / "absent" / "libnothing.so.1"), "No such file or directory"),
    (lambda tmp: _write(tmp / "libtext.so", b"not an ELF file at all\n" * 8), "invalid ELF header"),
])
def test_a_path_that_does_not_open_is_a_device_error_with_dlerror(tmp_path, make_path,
                                                                   dlerror_text):
    path = make_path(tmp_path)
    with pytest.raises(LibraryError) as info:
        _loader.Library("cudnn", path)
    err = info.value
    assert isinstance(err, hd.DeviceError)
    assert path in str(err) and dlerror_text in str(err)
    assert (err.library, err.call) == (path, "dlopen")


def _write(path, data):
    path.write_bytes(data)
    return str(path)


def test_load_records_where_the_library_came_from(libm_path):
    table = _loader.LibraryTable("m", "", "C math", ("cos", "sin"))
    assert not table.loaded and table.record is None and table.lib is None
    record = table.load(libm_path, "site-packages")
    assert record == _loader.LoadRecord("m", libm_path, "site-packages", 0)
    assert table.loaded and table.lib.path == libm_path
    assert pickle.loads(pickle.dumps(record)) == record
    with pytest.raises(AttributeError):
        record.path = "/elsewhere"          # frozen


def test_load_is_idempotent(libm_path):
    table = _loader.LibraryTable("m", "", "C math")
    first = table.load(libm_path)
    assert table.load("/nonexistent/other.so") is first   # a loaded table keeps its library


def test_concurrent_loads_open_once(libm_path):
    table = _loader.LibraryTable("m", "", "C math", ("cos",))
    barrier = threading.Barrier(8)
    records, libs = [], []

    def worker():
        barrier.wait()
        records.append(table.load(libm_path))
        libs.append(table.lib)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(records) == 8 and all(r is records[0] for r in records)
    assert all(lib is libs[0] for lib in libs)


def test_a_missing_symbol_raises_at_call_time_naming_symbol_and_library(libm_path):
    table = _loader.LibraryTable("m", "", "C math", ("cos",))
    table.load(libm_path)              # loading does not ask for the absent name
    assert table.address("sin") != 0
    with pytest.raises(LibraryError) as info:
        table.address("no_such_symbol_xyz")
    err = info.value
    assert isinstance(err, hd.DeviceError)
    assert str(err) == f"no_such_symbol_xyz is not exported by {libm_path}"
    assert (err.call, err.library) == ("no_such_symbol_xyz", libm_path)


def test_a_call_before_any_load_says_the_library_is_not_loaded():
    table = _loader.LibraryTable("cudnn", "cudnn", "cuDNN")
    with pytest.raises(LibraryError, match=r"cudnnCreate: the cuDNN library is not loaded"):
        table.address("Create")


def test_a_library_lacking_a_required_symbol_is_refused_and_the_table_stays_empty(libm_path):
    table = _loader.LibraryTable("m", "", "C math", ("cos", "no_such_symbol_xyz"))
    with pytest.raises(LibraryError, match=rf"{libm_path} is not a C math library: it lacks "
                                           r"no_such_symbol_xyz"):
        table.load(libm_path)
    assert not table.loaded and table.lib is None and table.record is None
    with pytest.raises(LibraryError, match="not loaded"):
        table.address("cos")


def test_a_refused_library_leaves_room_for_the_right_one(libm_path, tmp_path):
    table = _loader.LibraryTable("m", "", "C math", ("cos",))
    with pytest.raises(LibraryError):
        table.load(str(tmp_path / "missing.so"))
    assert table.load(libm_path).path == libm_path
