"""Two fake GPUs in one process (issue 14): set-device discipline on every thread, results
per device, peer and staged copies, the batcher over both devices.

The fakes count a violation for each call that enqueues work on a stream of another
device than the calling thread's current one, for a cuDNN handle used off its device, and
for a kernel given another device's memory (``fakes/cudart/fake_cudart.c``); every test
asserts none happened, which is the check of the multi-GPU bug class (``cudaSetDevice``
is per host thread).
"""
from __future__ import annotations

import numpy as np
import pytest

from . import _multi_scenarios as ms
from ._fakes import calls
from ._worker import FakeGpuProcess


def _worker(fake_libs, tmp_path_factory, **env):
    e = fake_libs.env()
    e["HIPDNN_ASYNC_PERFDB"] = str(tmp_path_factory.mktemp("perfdb") / "perfdb.sqlite3")
    e["HIPDNN_ASYNC_FAKE_DEVICES"] = "2"
    e.update(env)
    return FakeGpuProcess(e)


@pytest.fixture(scope="module")
def two_gpus(fake_libs, tmp_path_factory):
    """A worker whose fake runtime has two devices with peer access between them."""
    proc = _worker(fake_libs, tmp_path_factory)
    yield proc
    proc.close()


@pytest.fixture(scope="module")
def two_gpus_no_peer(fake_libs, tmp_path_factory):
    """Two devices without peer access (``cudaDeviceCanAccessPeer`` says 0)."""
    proc = _worker(fake_libs, tmp_path_factory, HIPDNN_ASYNC_FAKE_PEER="0")
    yield proc
    proc.close()


def _on_device_records(log):
    return [r for r in log if r["rec"] == "call" and "on_device" in r]


def test_two_devices_run_concurrently_each_on_its_device(two_gpus):
    r = two_gpus.call(ms.two_devices_case)
    assert r["violations"] == 0, [x for x in r["log"] if x["rec"] == "violation"]
    assert r["devices"] == ["cpu", "cuda:0", "cuda:1"]
    for spec in ("cuda:0", "cuda:1"):
        assert len(r["got"][spec]) == 5          # a captured step's replay, 4 executions
        for got, want in zip(r["got"][spec], r["want"][spec]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert r["metrics"][spec] >= 4
    # both GPUs are one model: one perf-db device key
    assert r["describe"]["cuda:0"] == r["describe"]["cuda:1"]
    # every stream-ordered call ran with its stream's device current, on both devices
    recs = _on_device_records(r["log"])
    assert {x["on_device"] for x in recs} == {0, 1}
    assert all(x["on_device"] == x["current_device"] for x in recs)
    assert len(calls(r["log"], "cudaGraphLaunch")) == 4          # 2 replays per device
    # each device has its own cuDNN handles: one per compute stream plus the build handle
    handles = calls(r["log"], "cudnnCreate")
    by_dev = {d: sum(1 for h in handles if h["device"] == d) for d in (0, 1)}
    assert by_dev == {d: r["streams"][f"cuda:{d}"] + 1 for d in (0, 1)}
    # the main thread's device (1, set before) is the same after all of it
    assert r["main_device_after"] == 1


def test_no_library_call_changes_the_callers_device(two_gpus):
    r = two_gpus.call(ms.current_device_case)
    assert r["violations"] == 0
    assert len(r["seen"]) == 8
    for start, what, device in r["seen"]:
        assert device == start, (start, what, device)


def _copies(log):
    return ([x for x in calls(log, "cudaMemcpyPeerAsync")],
            [x["kind"] for x in calls(log, "cudaMemcpyAsync")])


def test_copies_between_devices_go_peer_to_peer(two_gpus, hdr):
    r = two_gpus.call(ms.copy_case)
    assert r["violations"] == 0, [x for x in r["log"] if x["rec"] == "violation"]
    for key in ("cross0", "cross1", "cross2", "same", "asarray", "reorder", "back"):
        np.testing.assert_array_equal(r[key], r["want"], err_msg=key)
    assert r["asarray_device"] == "cuda:1"
    assert r["peer"] is True
    nbytes = r["want"].nbytes
    s = r["slices"]
    d2d, h2d, d2h = (hdr["cudaMemcpyDeviceToDevice"], hdr["cudaMemcpyHostToDevice"],
                     hdr["cudaMemcpyDeviceToHost"])
    for key, (dst, src) in {"cross0": (1, 0), "cross1": (1, 0), "cross2": (1, 0),
                            "asarray": (1, 0), "back": (0, 1)}.items():
        peer, kinds = _copies(s[key])
        assert len(peer) == 1 and kinds == [], (key, peer, kinds)
        p = peer[0]
        assert (p["dst_device"], p["src_device"], p["count"]) == (dst, src, nbytes)
        assert p["peer_enabled"] == 1 and p["on_device"] == dst
    # access is enabled once per ordered pair (1 -> 0 at the first copy, 0 -> 1 at "back")
    enables = calls(r["log"], "cudaDeviceEnablePeerAccess")
    assert [(e["current_device"], e["peer"]) for e in enables] == [(1, 0), (0, 1)]
    assert calls(s["cross0"], "cudaDeviceEnablePeerAccess") and not calls(
        s["cross1"], "cudaDeviceEnablePeerAccess")
    # one device: device to device; another memory order: through the host
    assert _copies(s["same"]) == ([], [d2d])
    assert _copies(s["reorder"]) == ([], [d2h, h2d])
    assert r["mismatch"][0] == "GraphError" and "(1, 3, 4, 5)" in r["mismatch"][1]


def test_copies_without_peer_access_stage_through_pinned_host_memory(two_gpus_no_peer, hdr):
    r = two_gpus_no_peer.call(ms.copy_case)
    assert r["violations"] == 0, [x for x in r["log"] if x["rec"] == "violation"]
    for key in ("cross0", "cross1", "cross2", "same", "asarray", "reorder", "back"):
        np.testing.assert_array_equal(r[key], r["want"], err_msg=key)
    assert r["peer"] is False
    assert calls(r["log"], "cudaDeviceEnablePeerAccess") == []
    d2h, h2d = hdr["cudaMemcpyDeviceToHost"], hdr["cudaMemcpyHostToDevice"]
    for key, (dst, src) in {"cross0": (1, 0), "asarray": (1, 0), "back": (0, 1)}.items():
        sl = r["slices"][key]
        assert calls(sl, "cudaMemcpyPeerAsync") == []
        copies = calls(sl, "cudaMemcpyAsync")
        assert [(c["kind"], c["on_device"], c["pageable"]) for c in copies] == [
            (d2h, src, 0), (h2d, dst, 0)], key       # pinned: not pageable
        pinned = calls(sl, "cudaHostAlloc")
        assert len(pinned) == 1 and copies[0]["dst"] == pinned[0]["ptr"] == copies[1]["src"]
        assert len(calls(sl, "cudaFreeHost")) == 1


def test_batcher_over_two_devices(two_gpus):
    r = two_gpus.call(ms.batcher_case)
    assert r["violations"] == 0, [x for x in r["log"] if x["rec"] == "violation"]
    for got, want in zip(r["got"], r["want"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    m = r["metrics"]
    assert r["devices"] == ["cuda:0", "cuda:1"]
    per = m["devices"]
    assert [d["device"] for d in per] == ["cuda:0", "cuda:1"]
    assert sum(d["batches"] for d in per) == m["batches"]
    assert sum(d["rows"] for d in per) == m["rows"] == sum(len(w) for w in r["want"])
    assert all(d["batches"] >= 1 for d in per), per   # both devices served
    recs = _on_device_records(r["log"])
    assert {x["on_device"] for x in recs} == {0, 1}
    assert all(x["on_device"] == x["current_device"] for x in recs)


@pytest.mark.parametrize("devices", ["all", "cuda:0"])
def test_bench_multi_section_runs_on_every_device(two_gpus, devices):
    r = two_gpus.call(ms.bench_multi_case, devices)
    assert r["violations"] == 0
    out = r["out"]
    if devices == "all":
        assert out["devices"] == ["cuda:0", "cuda:1"] and out["scale_out"] is True
        assert out["target_ratio"] == pytest.approx(1.8)
    else:                       # one GPU: two Devices on it, and no scale-out claim
        assert out["devices"] == ["cuda:0", "cuda:0"] and out["scale_out"] is False
        assert "target_ratio" not in out
    assert out["perfdb_device_keys"] == ["Fake H200 (hipdnn_async contract) (sm_90)"]
    blk, bat = out["block"], out["batcher"]
    assert blk["max_abs_diff_vs_first"] == [0.0]          # same inputs, same results
    assert blk["one_images_per_s"] > 0 and blk["all_images_per_s"] > 0
    assert blk["ratio"] == pytest.approx(blk["all_images_per_s"] / blk["one_images_per_s"])
    assert len(bat["per_device_batches"]) == 2 and min(bat["per_device_batches"]) >= 1
    assert bat["ratio"] == pytest.approx(bat["all_samples_per_s"] / bat["one_samples_per_s"])
    assert r["printed"][0][0][-1] == "all / one"


@pytest.mark.slow
def test_gpu_multi_device_suite_passes_on_two_fake_gpus(fake_libs, tmp_path):
    """tests/gpu/test_multi_device_gpu.py itself, on the two fake GPUs (every ordered pair
    and each GPU with itself), in a subprocess: what the H200 runs is proven here first."""
    import os
    import re
    import subprocess
    import sys
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, **fake_libs.env(), "HIPDNN_ASYNC_FAKE_DEVICES": "2",
           "HIPDNN_ASYNC_FAKE_DELAY_US": "100",
           "HIPDNN_ASYNC_PERFDB": str(tmp_path / "perfdb.sqlite3")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-m", "gpu", "tests/gpu/test_multi_device_gpu.py"], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    # 4 pairs (0+1, 1+0, 0+0, 1+1) x 5 tests, at least on asyncio
    assert int(re.search(r"(\d+) passed", proc.stdout).group(1)) >= 20, tail
