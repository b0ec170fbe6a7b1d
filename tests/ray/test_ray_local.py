"""The pieces of hipdnn_async.ray that run without a Ray cluster: the saved digits model
(``demo --save``, ``digits_model``), the Predictor on a local device, the device mapping of
Ray workers, the model host's lifetime, the metrics, and the missing-extra error."""
import subprocess
import sys
import threading
import types

import anyio
import numpy as np
import pytest
from ray_support import ATOL, RTOL, local_logits, ray_or_skip, wait_until

import hipdnn_async as hd
from hipdnn_async.demo import DigitsModel, digits_model, load_weights
from hipdnn_async.demo._common import DemoError
from hipdnn_async.demo._model import LAYERS
from hipdnn_async.ray import Predictor, require_ray
from hipdnn_async.ray._metrics import ReplicaMetrics, flatten_numbers
from hipdnn_async.ray._session import ModelHost, worker_device

# ---------------------------------------------------------------------------------------
# demo --save and digits_model
# ---------------------------------------------------------------------------------------


def test_saved_file_holds_every_parameter_and_statistic(digits_file):
    w = load_weights(digits_file)
    for layer in LAYERS:
        assert w["params"][f"{layer.name}.w"].shape == layer.w_dims
        if layer.bn is not None:
            assert w["running"][f"{layer.name}.running_var"].shape == (1, layer.out_channels, 1, 1)
    # The pixel statistics of the demo's training split (seed 0): recomputed here.
    from hipdnn_async.demo._data import load_digits_split
    d = load_digits_split(0)
    assert w["pixel_mean"] == d.pixel_mean and w["pixel_std"] == d.pixel_std


def test_save_writes_the_name_given_and_refuses_a_missing_folder(tmp_path):
    from hipdnn_async.demo import main
    target = tmp_path / "weights.bin"           # no .npz appended
    assert main(["--epochs", "1", "--clients", "1", "--rounds", "1", "--min-accuracy", "0",
                 "--save", str(target), "--quiet"]) == 0
    assert target.exists() and not (tmp_path / "weights.bin.npz").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["weights.bin"]   # no temporary left
    r = subprocess.run([sys.executable, "-m", "hipdnn_async", "demo", "--save",
                        str(tmp_path / "no" / "such" / "w.npz")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--save" in r.stderr and "does not exist" in r.stderr


def _rewrite(src, dst, **changes):
    with np.load(src) as z:
        entries = {k: z[k] for k in z.files}
    entries.update(changes)
    for k, v in list(entries.items()):
        if v is None:
            del entries[k]
    with open(dst, "wb") as f:
        np.savez(f, **entries)
    return str(dst)


@pytest.mark.parametrize("change, fragment", [
    ({"format": np.array("something/else")}, "format 'something/else'"),
    ({"layers": np.array("[]")}, "saved for architecture"),
    ({"params/conv1.w": None}, "entry 'params/conv1.w' is missing"),
    ({"params/conv1.w": np.zeros((32, 1, 3, 2), np.float32)}, r"dims \(32, 1, 3, 3\)"),
    ({"params/conv2.scale": np.full((1, 32, 1, 1), np.nan, np.float32)}, "must be finite"),
    ({"running/conv1.running_mean": np.zeros((1, 32, 1, 1))}, "float32"),
    ({"pixel_std": np.float64(0.0)}, "'pixel_std' must be a finite scalar > 0"),
])
def test_load_refuses_a_damaged_file_naming_the_entry(digits_file, tmp_path, change, fragment):
    path = _rewrite(digits_file, tmp_path / "w.npz", **change)
    with pytest.raises(DemoError, match=fragment) as err:
        digits_model(path)
    assert path in str(err.value)


def test_load_refuses_missing_and_foreign_files(tmp_path):
    with pytest.raises(DemoError, match="no such file; write one with 'hipdnn-async demo --save"):
        load_weights(str(tmp_path / "absent.npz"))
    (tmp_path / "t.npz").write_text("hello")
    with pytest.raises(DemoError, match="not a readable .npz file"):
        load_weights(str(tmp_path / "t.npz"))
    with pytest.raises(DemoError, match="max_batch_size"):
        digits_model(str(tmp_path / "t.npz"), max_batch_size=0)


def test_digits_model_equals_local_plans_on_the_cpu(digits_file, digits_images):
    images, _ = digits_images
    factory = digits_model(digits_file, max_batch_size=16)
    expected = local_logits(digits_file, images[:100])

    async def run():
        async with hd.Device("cpu") as dev:
            model = await factory(dev)
            assert isinstance(model, DigitsModel)
            with pytest.raises(hd.DeviceError, match="not open"):
                await model(images[:1])
            async with model:
                await model.warmup()
                got = await model(images[:100])          # split into 16-row batches
                with pytest.raises(hd.VariantPackError, match=r"\(N, 1, 8, 8\)"):
                    await model(images[:2, :, :4])
                with pytest.raises(hd.VariantPackError, match="got <U1"):
                    await model(np.full((1, 1, 8, 8), "a"))
                m = model.metrics()
            return got, m

    got, m = anyio.run(run)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    assert set(m) == {"conv1", "conv2", "classifier"} and m["conv1"]["rows"] == 100
    assert m["conv1"]["buckets"] == [1, 2, 4, 8, 16]


def test_factory_pickles_with_its_weights(digits_file, tmp_path):
    import pickle
    f = digits_model(digits_file)
    g = pickle.loads(pickle.dumps(f))
    np.testing.assert_array_equal(g.weights["params"]["conv1.w"], f.weights["params"]["conv1.w"])
    assert "digits_model(" in repr(g)


# ---------------------------------------------------------------------------------------
# Predictor on a local device (what each Ray Data actor does)
# ---------------------------------------------------------------------------------------

def test_predictor_runs_batches_keeping_other_columns(digits_file, digits_images):
    images, labels = digits_images
    p = Predictor(digits_model(digits_file))
    try:
        assert p.spec == "cpu"                             # no Ray GPUs: the CPU
        out = p({"data": images[:300], "label": labels[:300]})
        assert set(out) == {"label", "outputs"}
        np.testing.assert_array_equal(out["label"], labels[:300])
        np.testing.assert_allclose(out["outputs"], local_logits(digits_file, images[:300]),
                                   rtol=RTOL, atol=ATOL)
        bare = p(images[:5])                               # a bare array gives an array
        np.testing.assert_allclose(bare, out["outputs"][:5], rtol=RTOL, atol=ATOL)
        with pytest.raises(hd.VariantPackError, match="no column 'data'; columns are"):
            p({"pixels": images[:2]})
        with pytest.raises(hd.VariantPackError, match=r"needs shape \(N, 1, 8, 8\); got"):
            p({"data": images[:2, 0]})
        again = p({"data": images[:3]})                    # still serving after refusals
        np.testing.assert_allclose(again["outputs"], out["outputs"][:3], rtol=RTOL, atol=ATOL)
    finally:
        p.close()
    p.close()                                              # idempotent
    with pytest.raises(hd.DeviceError, match="closed"):
        p({"data": images[:1]})


def test_predictor_construction_fails_clearly_on_a_bad_device(digits_file):
    with pytest.raises(hd.DeviceError, match="unknown device spec 'tpu:0'"):
        Predictor(digits_model(digits_file), device="tpu:0")


async def _returns_none(dev):
    return None


def _not_async(dev):
    return digits_model  # a callable, but made without await


@pytest.mark.parametrize("factory, fragment", [
    (None, "model_factory must be an async callable model_factory(dev); got NoneType"),
    (42, "model_factory must be an async callable model_factory(dev); got int"),
    (_returns_none, "model_factory returned NoneType; it must return an async callable"),
    (_not_async, "model_factory(dev) returned function, not an awaitable"),
])
def test_predictor_refuses_a_bad_model_factory_with_a_graph_error(factory, fragment):
    """These were a plain TypeError; a bad argument of hipdnn_async.ray is a GraphError
    (as max_batch_size=0 is), naming model_factory. No Ray is started."""
    before = set(threading.enumerate())
    with pytest.raises(hd.GraphError) as err:
        Predictor(factory)
    assert fragment in str(err.value)
    # The event-loop thread (and the device's stream worker, where the factory ran) is
    # gone. Ray's own driver threads, when a cluster is up, come and go: only threads of
    # the Predictor's making count, and a worker may take a moment to exit after its
    # stop sentinel.
    wait_until(lambda: not _new_threads_of_ours(before), timeout_s=10,
               what=f"the Predictor's threads to exit: {_new_threads_of_ours(before)}")


def _new_threads_of_ours(before: set) -> list[str]:
    """Names of live threads not in `before`."""
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


# ---------------------------------------------------------------------------------------
# The model host: one task opens, warms up, closes
# ---------------------------------------------------------------------------------------

class _Doubler:
    """A model without a context manager: ``aclose`` and ``warmup`` are still honoured."""

    def __init__(self, log):
        self.log = log

    async def warmup(self):
        self.log.append("warmup")

    async def __call__(self, x):
        return np.asarray(x) * 2

    async def aclose(self):
        self.log.append("aclose")


def test_model_host_warms_up_serves_and_closes_in_order():
    log = []

    async def factory(dev):
        log.append(("factory", dev.spec))
        return _Doubler(log)

    async def run():
        host = ModelHost(factory, "cpu")
        async with anyio.create_task_group() as tg:
            model = await tg.start(host.run)
            assert host.model is model and log == [("factory", "cpu"), "warmup"]
            np.testing.assert_array_equal(await model(np.ones(3)), [2, 2, 2])
            host.stop()
        assert host.model is None and host.stopped and host.error is None

    anyio.run(run)
    assert log[-1] == "aclose"


class _HangsOnClose(_Doubler):
    async def aclose(self):
        self.log.append("aclose")
        await anyio.sleep_forever()


def test_predictor_close_cancels_a_model_that_does_not_close(monkeypatch):
    """close() is bounded: a model whose aclose never returns is cancelled after the
    timeout (DeviceError saying so) and the event-loop thread ends; it used to wait for
    the loop thread forever."""
    from hipdnn_async.ray import _predictor
    monkeypatch.setattr(_predictor, "_CLOSE_TIMEOUT_S", 0.5)
    log = []

    async def factory(dev):
        return _HangsOnClose(log)

    before = set(threading.enumerate())
    p = Predictor(factory)
    np.testing.assert_array_equal(p(np.ones((2, 3), np.float32)), np.full((2, 3), 2))
    with pytest.raises(hd.DeviceError, match="did not close within 0.5 s; cancelled"):
        p.close()
    assert log == ["warmup", "aclose"]
    wait_until(lambda: not _new_threads_of_ours(before), timeout_s=10,
               what=f"the Predictor's threads to exit: {_new_threads_of_ours(before)}")
    p.close()                                  # closed once: a second close does nothing


def test_a_collected_predictor_closes_on_a_thread_of_its_own(monkeypatch):
    """Second new-user review F2: a Predictor collected by the garbage collector closed on
    the collecting thread, which waited up to 70 s (and deadlocked when that thread held
    a lock the close needed). The collection now returns at once: here the model's aclose
    can only finish after gc.collect() has returned (it waits for a gate set afterwards)."""
    import gc
    from hipdnn_async.ray import _predictor
    monkeypatch.setattr(_predictor, "_CLOSE_TIMEOUT_S", 5.0)
    gate, log = threading.Event(), []

    class Gated(_Doubler):
        async def aclose(self):
            await anyio.to_thread.run_sync(gate.wait, 20)
            self.log.append("aclose" if gate.is_set() else "gate never opened")

    async def factory(dev):
        return Gated(log)

    p = Predictor(factory)
    np.testing.assert_array_equal(p(np.ones((2, 3), np.float32)), np.full((2, 3), 2))
    p.me = p                                   # only a collection can free it
    del p
    gc.collect()
    gate.set()
    wait_until(lambda: log == ["warmup", "aclose"], timeout_s=20,
               what=f"the collected Predictor's model to close (log {log})")


def test_a_call_that_races_close_is_a_device_error():
    """Second new-user review F6: a call that passed the closed check just before close()
    stopped the event loop got anyio's "This portal is not running" RuntimeError."""
    async def factory(dev):
        return _Doubler([])

    p = Predictor(factory)
    portal = p._portal

    class ClosedMeanwhile:                      # close() ran between check and call
        def call(self, *args):
            p.close()
            return portal.call(*args)

    p._portal = ClosedMeanwhile()
    with pytest.raises(hd.DeviceError, match="Predictor on 'cpu': closed"):
        p(np.ones((2, 3), np.float32))


_PREDICTOR_AT_EXIT = """
import sys, time
import anyio
import numpy as np
from hipdnn_async.ray import Predictor, _predictor
_predictor._CLOSE_TIMEOUT_S = _predictor._CANCEL_TIMEOUT_S = 1.0
case = sys.argv[1]
class M:
    async def __call__(self, x):
        return np.asarray(x) * 2
    aclose_delay = 0.0
    async def aclose(self):
        if case == "blocking":
            time.sleep(40)          # blocks the event loop: not even a cancel gets through
        await anyio.sleep(self.aclose_delay)
        print("aclose", flush=True)
async def factory(dev):
    return M()
P = Predictor(factory)
print(float(P(np.ones((2, 3), np.float32)).sum()), flush=True)
if case == "cycle":
    P.me = P
    del P
elif case == "collected":           # collected just before exit: its close must finish
    M.aclose_delay = 0.3
    P.me = P
    del P
    import gc
    gc.collect()
elif case == "blocking":
    try:
        P.close()
    except Exception as exc:
        print(type(exc).__name__, "left behind" in str(exc), flush=True)
"""


@pytest.mark.parametrize("case, lines", [
    ("global", ["12.0", "aclose"]),                # a module global: closed at exit
    ("cycle", ["12.0", "aclose"]),                 # in a reference cycle: closed at exit
    ("collected", ["12.0", "aclose"]),             # collected just before exit: finished
    ("blocking", ["12.0", "DeviceError True"]),    # close gives up; exit does not wait
])
def test_predictor_at_exit_closes_its_model_and_never_hangs(case, lines):
    """New-user review F1/F5: a Predictor in a reference cycle hung the process at exit
    forever (its finalizer waited for a loop thread the interpreter had frozen; in Ray
    its MapWorkers outlived the cluster), a module-global one never closed its model, and
    a model blocking in aclose made close() join the loop thread forever."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _PREDICTOR_AT_EXIT, case],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:len(lines)] == lines, out.stdout


def test_model_host_reports_a_factory_that_returns_no_model():
    async def factory(dev):
        return None

    async def run():
        host = ModelHost(factory, "cpu")
        async with anyio.create_task_group() as tg:
            await tg.start(host.run)

    with pytest.raises(BaseException) as err:
        anyio.run(run)
    inner = err.value.exceptions[0] if hasattr(err.value, "exceptions") else err.value
    assert isinstance(inner, hd.GraphError) and "model_factory returned NoneType" in str(inner)
    with pytest.raises(hd.GraphError, match="model_factory must be an async callable"):
        ModelHost(42, "cpu")


# ---------------------------------------------------------------------------------------
# The device of a Ray worker
# ---------------------------------------------------------------------------------------

@pytest.fixture
def fake_ray(monkeypatch):
    """A stand-in 'ray' module whose worker was assigned GPUs ``ids``."""
    mod = types.SimpleNamespace(ids=[], is_initialized=lambda: True)
    mod.get_gpu_ids = lambda: mod.ids
    monkeypatch.setitem(sys.modules, "ray", mod)
    for var in ("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
                "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
                "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return mod


def test_worker_device_takes_the_gpu_ray_assigned(fake_ray, monkeypatch):
    assert worker_device("cpu") == "cpu"
    assert worker_device("gpu:1") == "gpu:1"            # no GPUs assigned: as given
    fake_ray.ids = ["5"]                                # Ray gave GPU 5, visible as 0
    assert worker_device("gpu:0") == "gpu:0" and worker_device("cuda") == "cuda:0"
    with pytest.raises(hd.DeviceError, match=r"assigned it 1 \(ids \['5'\]\)"):
        worker_device("gpu:1")
    fake_ray.ids = [2, 7]
    assert worker_device("hip:1") == "hip:1"
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "1")
    assert worker_device("cuda:1") == "cuda:7"          # nothing masked: the physical id
    with pytest.raises(hd.DeviceError, match="unknown device spec"):
        worker_device("gpu:x")


# ---------------------------------------------------------------------------------------
# Metrics and the missing extra
# ---------------------------------------------------------------------------------------

def test_replica_metrics_snapshot_counts_and_percentiles():
    m = ReplicaMetrics({"replica": "r1", "device": "cpu"}, max_batch_size=8, export=False)
    for k in range(1, 11):
        m.answered(2, float(k), ok=True)
    m.answered(1, 0.0, ok=False)
    m.rejected_request()
    m.batch(8, [1.0, 3.0], 4.0)
    m.batch(4, [2.0], 6.0)
    s = m.snapshot()
    assert (s["requests"], s["rows"], s["failed"], s["rejected"], s["batches"]) == (10, 20, 1, 1, 2)
    assert s["mean_batch_size"] == 6.0 and s["replica"] == "r1"
    assert s["latency_ms"]["p50"] == np.percentile(np.arange(1, 11), 50)
    assert s["queue_wait_ms"]["mean"] == 2.0 and s["exec_ms"]["p99"] == pytest.approx(5.98)


def test_flatten_numbers_keeps_numbers_only():
    doc = {"conv1": {"rows": 3, "exec_ms": {"p50": 1.5}, "buckets": [1, 2]}, "name": "x"}
    assert flatten_numbers(doc) == {"conv1.rows": 3.0, "conv1.exec_ms.p50": 1.5}


def test_missing_extra_is_an_import_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)           # import ray -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'hipdnn_async\[ray\]'.*ray\[serve,data\]"
                                          r"|ray\[serve,data\].*pip install 'hipdnn_async\[ray\]'"):
        require_ray("serve")
    from hipdnn_async import ray as hdray
    with pytest.raises(ImportError, match="hipdnn_async.ray needs Ray Serve"):
        hdray.deployment(digits_model)


@pytest.mark.ray
@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"max_batch_size": 0}, hd.GraphError, "max_batch_size=0"),
    ({"max_delay_ms": -1.0}, hd.GraphError, "max_delay_ms=-1.0"),
    ({"max_concurrent_batches": 0}, hd.GraphError, "max_concurrent_batches=0"),
    ({"device": "tpu"}, hd.DeviceError, "unknown device spec 'tpu'"),
])
def test_deployment_checks_its_arguments(kwargs, error, fragment):
    ray_or_skip()
    from hipdnn_async import ray as hdray

    async def factory(dev):
        return None

    with pytest.raises(error, match=fragment):
        hdray.deployment(factory, **kwargs)
    with pytest.raises(hd.GraphError, match="model_factory must be an async callable"):
        hdray.deployment("not callable")
