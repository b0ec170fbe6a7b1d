"""The smaller defects of issue 10 item 9, one test each (plus the ones found next to them).

Bad input gets the specific HipdnnError subclass, nothing is silently ignored, nothing
unbounded is started.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async import _knobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def conv(dims=(1, 2, 5, 5)):
    g = hd.Graph(name="c", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=dims, name="x")
    w = g.tensor(dims=(3, dims[1], 3, 3), name="w")
    y = g.conv_fprop(x, w, padding=1).set_output(True)
    return g, x, w, y


@pytest.fixture(scope="module")
def dev():
    with hd.Device("cpu", streams=1) as d:
        yield d


# -- __dlpack__ producers that raise ------------------------------------------------------

class Raising:
    def __init__(self, exc):
        self.exc = exc

    def __dlpack__(self, *a, **k):
        raise self.exc

    def __dlpack_device__(self):
        return (1, 0)


class RaisingProperty:
    @property
    def __dlpack__(self):
        raise KeyError("no such attribute in my table")


@pytest.mark.parametrize("producer", [
    Raising(KeyError("stream")), Raising(AttributeError("no .data")),
    Raising(ZeroDivisionError()), RaisingProperty()],
    ids=["key", "attribute", "zerodiv", "property"])
def test_dlpack_producer_that_raises_is_a_variant_pack_error(dev, producer):
    g, x, w, y = conv()
    plan = dev.build_sync(g)
    vp = {x: producer, w: np.zeros((3, 2, 3, 3), np.float32), y: np.zeros((1, 3, 5, 5), np.float32)}
    with pytest.raises(hd.VariantPackError, match="DLPack") as ei:
        plan.execute_sync(vp)
    assert "tensor 'x'" in str(ei.value)


def test_masked_and_byte_swapped_arrays_are_refused(dev):
    g, x, w, y = conv()
    plan = dev.build_sync(g)
    good = {x: np.ones((1, 2, 5, 5), np.float32), w: np.ones((3, 2, 3, 3), np.float32),
            y: np.zeros((1, 3, 5, 5), np.float32)}
    masked = dict(good)
    masked[x] = np.ma.masked_array(good[x], mask=np.zeros(good[x].shape, bool))
    with pytest.raises(hd.VariantPackError, match="masked arrays"):
        plan.execute_sync(masked)
    swapped = dict(good)
    swapped[w] = good[w].astype(">f4")
    with pytest.raises(hd.VariantPackError, match="non-native byte order"):
        plan.execute_sync(swapped)


# -- streams are bounded ------------------------------------------------------------------

def test_streams_beyond_the_maximum_are_a_device_error_and_start_nothing():
    before = set(threading.enumerate())
    with pytest.raises(hd.DeviceError, match="at most 256 streams") as ei:
        hd.Device("cpu", streams=20000)
    assert ei.value.code == "INVALID_VALUE"
    with pytest.raises(hd.DeviceError, match="at most 256"):
        hd.Device("cpu", streams=257)
    # no stream worker was started (threads of other tests may end meanwhile: a set, not
    # a count)
    assert not [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    from hipdnn_async.queues import StreamPool
    with pytest.raises(ValueError, match=r"\[1, 256\]"):
        StreamPool("cpu", n_streams=257)
    with hd.Device("cpu", streams=256) as d:          # the maximum itself works
        assert len(d.streams) == 256


# -- specific classes ---------------------------------------------------------------------

def test_perfdb_path_types(tmp_path):
    with hd.Device("cpu", streams=1, perfdb=os.fsencode(tmp_path / "p.sqlite3")) as d:
        assert d._perfdb.path == str(tmp_path / "p.sqlite3") and not d._perfdb.in_memory
    with pytest.raises(hd.PerfDbError) as ei:       # review F3: a ValueError, not DeviceError
        hd.PerfDb(3)
    assert type(ei.value) is hd.PerfDbError and isinstance(ei.value, ValueError)


@pytest.mark.parametrize("call", ["get_ranked_engine_ids", "get_workspace_size", "build_plans",
                                  "execute"])
def test_lowering_calls_out_of_order_are_graph_errors(call):
    g, *_ = conv()
    args = ({},) if call == "execute" else ()
    with pytest.raises(hd.GraphError, match="build_operation_graph") as ei:
        getattr(g, call)(*args)
    assert type(ei.value) is hd.GraphError and ei.value.code == "ATTRIBUTE_NOT_SET"
    if call in ("get_workspace_size", "execute"):
        g.build_operation_graph("cpu")
        try:
            with pytest.raises(hd.GraphError, match="build_plans") as ei:
                getattr(g, call)(*args)
            assert ei.value.code == "ATTRIBUTE_NOT_SET"
        finally:
            g._lowering_state.device.close()


# -- unknown environment values warn once, naming the accepted values ---------------------

def _import_with(env, *flags):
    return subprocess.run([sys.executable, *flags, "-c", "import hipdnn_async; print('ok')"],
                          cwd=ROOT, env=dict(os.environ, **env), capture_output=True,
                          text=True, timeout=120)


def test_unknown_log_level_warns_once_and_import_still_works():
    for flags in ((), ("-W", "error")):
        r = _import_with({"HIPDNN_ASYNC_LOG_LEVEL": "verbose"}, *flags)
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
        lines = [ln for ln in r.stderr.splitlines() if "'verbose'" in ln]
        assert len(lines) == 1, r.stderr
        for word in ("debug", "info", "warn", "error", "off"):
            assert word in lines[0]
    r = _import_with({"HIPDNN_ASYNC_LOG_LEVEL": "WARN"})
    assert r.returncode == 0 and r.stderr == ""


def test_unknown_force_benchmarking_warns_once(dev, monkeypatch):
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "sometimes-3c1")
    g, *_ = conv((1, 2, 6, 6))
    with pytest.warns(RuntimeWarning, match="'sometimes-3c1' is not one of 1, true") as w:
        for _ in range(3):
            plan = dev.build_sync(g)
    assert len(w) == 1 and not plan.benchmarked          # ignored: the knob decides
    assert _knobs.forced_benchmarking() is None


# -- the CPU plan's perf-db key: CPU model and BLAS threads --------------------------------

def test_cpu_perf_key_names_the_cpu_model_and_blas_threads(tmp_path):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from hipdnn_async.providers.cpu import _provider
    db = hd.PerfDb(tmp_path / "k.sqlite3")
    g, *_ = conv((2, 4, 12, 12))
    devices = []
    for threads in (1, 2, 1):
        with threadpoolctl.threadpool_limits(threads, user_api="blas"):
            with hd.Device("cpu", streams=1, perfdb=db) as d:
                plan = d.build_sync(g, knobs={"global.benchmarking": 1}, engine="CPU_ENGINE")
                devices.append((threads, plan.benchmarked, plan.perfdb_hit))
    # tuned at 1 thread, again at 2 (not reused), then the 1-thread winner is a hit
    assert devices == [(1, True, False), (2, True, False), (1, False, True)]
    keys = sorted(e["device"] for e in db.entries())
    assert len(keys) == 2
    assert keys[0].endswith("1 threads") and keys[1].endswith("2 threads")
    model = _provider._cpu_model()
    assert model and all(model in k for k in keys)


# -- found by the fuzzer ------------------------------------------------------------------

def test_memory_order_array_with_size1_dims_elsewhere_is_the_same_memory(dev):
    """NDHWC dims (3, 1, 5, 1, 3): memory order N, D, H, W, C; with C == H == 1 the
    C-contiguous (3, 5, 1, 1, 3) array is that memory too (size-1 dims have no place).
    It used to be refused; the fuzzer found it (tests/property/corpus)."""
    g = hd.Graph(name="s1", io_data_type="float32")
    x = g.tensor(dims=(3, 1, 5, 1, 3), layout="NDHWC", name="x")
    st = [g.tensor(dims=(1, 1, 1, 1, 1), name=n) for n in ("m", "v", "s", "b")]
    y = g.batchnorm_inference_variance_ext(x, *st, epsilon=1e-5).set_output(True)
    plan = dev.build_sync(g)
    xs = np.random.default_rng(0).uniform(-1, 1, (3, 5, 1, 1, 3)).astype(np.float32)
    ys = np.full((3, 1, 5, 3, 1), np.nan, np.float32).reshape(3, 5, 1, 3, 1)  # the other placement
    one = np.ones((1, 1, 1, 1, 1), np.float32)
    plan.execute_sync({x: xs, y: ys, st[0]: one * 0.25, st[1]: one * 3, st[2]: one * 2,
                       st[3]: one})
    want = 2 * (xs.astype(np.float64) - 0.25) / np.sqrt(3 + 1e-5) + 1      # float64 reference
    np.testing.assert_allclose(ys.reshape(-1), want.reshape(-1), rtol=1e-6, atol=1e-6)
    with pytest.raises(hd.VariantPackError):           # the non-unit dims out of order: no
        plan.execute_sync({x: np.ascontiguousarray(xs.transpose(0, 4, 2, 3, 1)), y: ys,
                           st[0]: one, st[1]: one, st[2]: one, st[3]: one})


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_log_file_that_is_a_fifo_hangs_nothing(tmp_path):
    """HIPDNN_ASYNC_LOG_FILE naming a FIFO with no reader hung `import hipdnn_async`
    (opening a FIFO for writing waits for a reader); with a reader, records reach it."""
    fifo = str(tmp_path / "log.fifo")
    os.mkfifo(fifo)
    env = {"HIPDNN_ASYNC_LOG_LEVEL": "info", "HIPDNN_ASYNC_LOG_FILE": fifo}
    r = _import_with(env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "cannot be opened" in r.stderr and "logging to stderr" in r.stderr
    got = []

    def read():
        with open(fifo, "rb") as f:
            got.append(f.read())
    reader = threading.Thread(target=read)
    reader.start()
    code = "import logging, hipdnn_async; logging.getLogger('hipdnn_async').info('via fifo 9d1')"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, **env),
                       capture_output=True, text=True, timeout=120)
    reader.join(60)
    assert r.returncode == 0, r.stderr
    assert b"via fifo 9d1" in got[0]


def test_cpu_perf_key_without_threadpoolctl_names_the_blas_environment(monkeypatch):
    from hipdnn_async.providers.cpu import _provider
    monkeypatch.setattr(_provider, "threadpool_info", None)      # its import failed
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert _provider._blas_threads() == f"blas threads default of {os.cpu_count()} cores"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert _provider._blas_threads() == "blas threads OMP_NUM_THREADS=3"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")                # OpenBLAS's own wins
    assert _provider._blas_threads() == "blas threads OPENBLAS_NUM_THREADS=1"
