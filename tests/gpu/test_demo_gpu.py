"""The demo end to end on the GPU, through ``hipdnn_async.demo.main`` (as tests/test_demo.py
checks the CPU run): it learns, both evaluations and the served predictions agree, every
one of the nine patterns runs on a GPU engine, and its training matches a CPU run of the
same seed (an independent provider)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import NO_GPU, gpu_specs

pytestmark = pytest.mark.gpu

NINE_PATTERNS = {"BN_INFERENCE_VARIANCE", "BN_INFERENCE_DRELU_BACKWARD", "BN_TRAINING",
                 "BN_TRAINING_RELU", "BN_BACKWARD", "CONV_DGRAD", "CONV_FPROP",
                 "CONV_FPROP_BIAS_RELU", "CONV_WGRAD"}
ARGS = ["--epochs", "2", "--min-accuracy", "0", "--quiet"]


def _spec():
    specs = gpu_specs()
    if not specs:
        pytest.skip(NO_GPU)
    pytest.importorskip("sklearn", reason="the demo's data set is scikit-learn's digits")
    return specs[0]


def _run(args, path):
    from hipdnn_async.demo import main
    rc = main([*args, "--json", str(path)])
    return {"rc": rc, "doc": json.loads(path.read_text()) if path.exists() else None}


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    spec = _spec()
    out = _run(["--device", spec, *ARGS], tmp_path_factory.mktemp("demo_gpu") / "gpu.json")
    out["spec"] = spec
    return out


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, gpu_run):
    return _run(["--device", "cpu", *ARGS], tmp_path_factory.mktemp("demo_cpu") / "cpu.json")


def test_gpu_demo_succeeds_and_learns(gpu_run):
    doc = gpu_run["doc"]
    assert gpu_run["rc"] == 0 and doc is not None, "the demo failed; see its stderr above"
    assert doc["ok"] and doc["failures"] == []
    assert doc["device"] == gpu_run["spec"]
    assert doc["gradient_check"]["ok"]
    assert len(doc["history"]) == 2
    assert doc["history"][-1]["loss"] < doc["history"][0]["loss"] < np.log(10)
    assert doc["evaluation"]["accuracy"]["bn_inference"] >= 0.93


def test_gpu_demo_predictions_agree(gpu_run):
    ev, sv = gpu_run["doc"]["evaluation"], gpu_run["doc"]["serving"]
    np.testing.assert_array_equal(ev["predictions"]["bn_inference"], ev["predictions"]["folded"])
    assert ev["predictions_identical"] and ev["mismatches"] == 0
    assert sv["mismatches"] == 0 and sv["predictions_match"]
    assert sv["requests"] == len(sv["latencies_ms"]) > 0
    for stage in sv["stages"].values():
        assert stage["errors"] == 0 and stage["requests"] == sv["requests"]


def test_gpu_demo_runs_the_nine_patterns_on_gpu_engines(gpu_run):
    doc = gpu_run["doc"]
    assert set(doc["plans_per_pattern"]) == NINE_PATTERNS
    assert all(doc["plan_stats"][p]["executions"] >= 1 for p in NINE_PATTERNS)
    assert set(doc["engines"]) == NINE_PATTERNS
    cpu_engines = {e.name for e in _cpu_engines()}
    assert not set(doc["engines"].values()) & cpu_engines, doc["engines"]


def _cpu_engines():
    import hipdnn_async as hd
    g = hd.Graph(name="probe")
    x, w = g.tensor(dims=(1, 1, 3, 3), name="x"), g.tensor(dims=(1, 1, 1, 1), name="w")
    g.conv_fprop(x, w).set_output(True)
    return hd.engines(g, "cpu")


def test_gpu_training_matches_the_cpu_run(gpu_run, cpu_run):
    g, c = gpu_run["doc"], cpu_run["doc"]
    assert cpu_run["rc"] == 0 and c["device"] == "cpu"
    for eg, ec in zip(g["history"], c["history"]):
        assert eg["loss"] == pytest.approx(ec["loss"], rel=2e-2), (eg, ec)
    pg = np.asarray(g["evaluation"]["predictions"]["bn_inference"])
    pc = np.asarray(c["evaluation"]["predictions"]["bn_inference"])
    assert (pg == pc).mean() >= 0.97, f"GPU and CPU predictions agree on {(pg == pc).mean():.1%}"


def test_gpu_demo_benchmarking_tunes_once_then_hits_the_perfdb(tmp_path):
    spec = _spec()
    args = ["--device", spec, "--epochs", "1", "--min-accuracy", "0", "--quiet",
            "--benchmarking", "--perfdb", str(tmp_path / "perf.sqlite3"), "--clients", "16",
            "--rounds", "1"]
    first = _run(args, tmp_path / "1.json")
    second = _run(args, tmp_path / "2.json")
    assert first["rc"] == 0 and second["rc"] == 0
    b1, b2 = first["doc"]["benchmarking"], second["doc"]["benchmarking"]
    assert b1["enabled"] and b1["benchmarked"] >= 1
    assert b2["benchmarked"] == 0 and b2["perfdb_hits"] >= 1
