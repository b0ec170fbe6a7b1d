"""The demo on a non-host device: NumPy staged through device arrays, same results as CPU.

No GPU is needed: ``FakeGpuDevice`` (tests/test_demo_fake_gpu.py) is a CPU device behind
the GPU contract (``is_host`` False, arrays without ``.view``, plans that refuse NumPy,
no RELU_FWD clipped below 0). The same kernels run on copies of the same data, so every
figure of the staged run is compared with a CPU run made here, not with stored numbers.
Evaluation (b) differs by design: the fake declines the identity clamp, so its layers
without ReLU run as CONV_FPROP with the bias moved on (``Network.fold``); its logits
agree with the CPU's to float32 rounding and its predictions exactly.
"""
import json

import numpy as np
import pytest

import sklearn  # noqa: F401  (the demo's data; in the test extra, so a must)

import hipdnn_async as hd
from hipdnn_async.demo import _host, main
from hipdnn_async.demo._data import load_digits_split
from hipdnn_async.demo._model import Network
from test_demo_fake_gpu import FakeGpuDevice

# Float32 results of identical kernels on identical inputs; a little room for BLAS.
RTOL, ATOL = 1e-6, 1e-7
# Evaluation (b) with the bias moved on: the same sums, rounded in another order.
FOLD_RTOL, FOLD_ATOL = 1e-5, 1e-5
CPU_FOLDED = {"conv1": "CONV_FPROP_BIAS_RELU", "conv2": "CONV_FPROP_BIAS_RELU",
              "classifier": "CONV_FPROP_BIAS_RELU"}
FAKE_FOLDED = {"conv1": "CONV_FPROP_BIAS_RELU", "conv2": "CONV_FPROP",
               "classifier": "CONV_FPROP"}


@pytest.fixture(scope="module")
def digits():
    return load_digits_split(0)


# ---------------------------------------------------------------------------------------
# The network's passes
# ---------------------------------------------------------------------------------------

async def _passes(dev, digits):
    """A training step, then both evaluations, of a fresh network on `dev`."""
    net = Network(dev, seed=3)
    x, y = digits.x_train[:16], digits.y_train[:16]
    loss, correct, grads = await net.train_step(x, y)
    for k, g in grads.items():             # one host SGD step between passes
        net.params[k] -= 0.1 * g.reshape(net.params[k].shape)
    folded = await net.fold()
    return {"loss": loss, "correct": correct, "grads": grads,
            "running": {k: v.copy() for k, v in net.running.items()},
            "a": await net.predict_bn_inference(digits.x_test[:50]),
            "b": await net.predict_folded(digits.x_test[:50], folded),
            "patterns": folded.patterns, "logit_bias": folded.logit_bias}


@pytest.mark.anyio
async def test_network_passes_on_a_staged_device_match_the_cpu(digits):
    async with hd.Device("cpu") as real:
        want = await _passes(real, digits)
        dev = FakeGpuDevice(real)
        got = await _passes(dev, digits)
    assert got["loss"] == pytest.approx(want["loss"], rel=RTOL)
    assert got["correct"] == want["correct"]
    assert set(got["grads"]) == set(want["grads"])
    for name, g in got["grads"].items():
        assert isinstance(g, np.ndarray)
        np.testing.assert_allclose(g, want["grads"][name], rtol=RTOL, atol=ATOL, err_msg=name)
    for name, v in got["running"].items():
        np.testing.assert_allclose(v, want["running"][name], rtol=RTOL, atol=ATOL,
                                   err_msg=name)
    # After the update: the parameters were re-uploaded.
    for key, rtol, atol in (("a", RTOL, ATOL), ("b", FOLD_RTOL, FOLD_ATOL)):
        assert isinstance(got[key], np.ndarray) and got[key].shape == (50, 10)
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)
        np.testing.assert_array_equal(got[key].argmax(1), want[key].argmax(1))
    assert want["patterns"] == CPU_FOLDED and want["logit_bias"] is None
    assert got["patterns"] == FAKE_FOLDED and got["logit_bias"].shape == (10,)
    assert dev.counts["executions"] > 0 and dev.counts["h2d"] > 0 and dev.counts["d2h"] > 0


def test_carried_bias_equals_the_bias_through_the_convolution():
    rng = np.random.default_rng(4)
    h = rng.standard_normal((2, 3, 5, 5))
    b = rng.standard_normal((1, 3, 1, 1))
    w = rng.standard_normal((4, 3, 3, 3))
    for stride in (1, 2):
        want = _host._conv2d(h + b, w, stride, 0)
        got = _host._conv2d(h, w, stride, 0) + _host.carry_bias(b, w, 0)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="padding 1"):
        _host.carry_bias(b, w, 1)


@pytest.mark.anyio
async def test_cpu_device_passes_numpy_without_copies(digits, monkeypatch):
    """On the host device the plans get the very NumPy arrays (no staging)."""
    seen = []
    real_execute = hd.ExecutionPlan.execute

    async def spy(self, pack, **kw):
        seen.extend(type(v) for v in pack.values())
        return await real_execute(self, pack, **kw)

    monkeypatch.setattr(hd.ExecutionPlan, "execute", spy)
    async with hd.Device("cpu") as dev:
        net = Network(dev, seed=3)
        await net.train_step(digits.x_train[:8], digits.y_train[:8])
        await net.predict_bn_inference(digits.x_test[:8])
    assert seen and set(seen) == {np.ndarray}


# ---------------------------------------------------------------------------------------
# End to end through main()
# ---------------------------------------------------------------------------------------

ARGS = ["--epochs", "1", "--clients", "16", "--rounds", "2", "--min-accuracy", "0",
        "--quiet"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One short run on the CPU and one on a FakeGpuDevice ("fake:0"), through main()."""
    d = tmp_path_factory.mktemp("demo_staging")
    mp = pytest.MonkeyPatch()
    real_device, made = hd.Device, []

    def device(spec="cpu", **kw):
        if not spec.startswith("fake"):
            return real_device(spec, **kw)
        made.append(FakeGpuDevice(real_device("cpu", **kw), spec))
        return made[-1]

    out = {}
    try:
        out["cpu_rc"] = main([*ARGS, "--json", str(d / "cpu.json")])
        mp.setattr(hd, "Device", device)
        out["fake_rc"] = main([*ARGS, "--device", "fake:0", "--json", str(d / "fake.json")])
    finally:
        mp.undo()
    out["cpu"] = json.loads((d / "cpu.json").read_text())
    out["fake"] = json.loads((d / "fake.json").read_text())
    out["device"] = made[0]
    return out


def test_staged_demo_runs_end_to_end(runs):
    doc = runs["fake"]
    assert runs["cpu_rc"] == 0 and runs["fake_rc"] == 0
    assert doc["ok"] and doc["failures"] == [] and doc["device"] == "fake:0"
    assert doc["gradient_check"]["ok"]
    assert doc["serving"]["predictions_match"] and doc["serving"]["mismatches"] == 0
    assert set(doc["plans_per_pattern"]) == set(runs["cpu"]["plans_per_pattern"])
    assert doc["evaluation"]["folded_patterns"] == FAKE_FOLDED
    assert runs["cpu"]["evaluation"]["folded_patterns"] == CPU_FOLDED
    counts = runs["device"].counts
    assert counts["executions"] > 0 and counts["h2d"] > 0 and counts["d2h"] > 0


def test_staged_demo_predicts_as_the_cpu_run(runs):
    cpu, fake = runs["cpu"], runs["fake"]
    assert fake["evaluation"]["predictions"] == cpu["evaluation"]["predictions"]
    assert fake["evaluation"]["accuracy"] == cpu["evaluation"]["accuracy"]
    assert fake["test_accuracy"] == cpu["test_accuracy"]
    for got, want in zip(fake["history"], cpu["history"], strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=RTOL)
        assert got["train_accuracy"] == want["train_accuracy"]
        assert got["test_accuracy"] == want["test_accuracy"]
    assert fake["gradient_check"]["loss_plans"] == pytest.approx(
        cpu["gradient_check"]["loss_plans"], rel=RTOL)
    # The served predictions match each run's own batch evaluation, hence each other.
    assert fake["serving"]["mismatches"] == cpu["serving"]["mismatches"] == 0
