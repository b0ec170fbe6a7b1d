"""``hipdnn-async serve``: a local Ray Serve app on 127.0.0.1 from a saved model file.

The command runs as a separate process (its own local Ray, as a user would start it);
the test waits for the printed URL, sends requests, then interrupts it and expects a
clean exit. Every wait is bounded.
"""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from ray_support import ATOL, LOOPBACK, RTOL, free_port, ray_or_skip

pytestmark = pytest.mark.ray

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT_S = 180           # Ray + Serve + one replica on two busy cores
STOP_TIMEOUT_S = 90


def _lines(stream, sink: queue.Queue):
    for line in stream:
        sink.put(line)
    sink.put(None)


def test_serve_command_serves_until_interrupted(digits_file, digits_images, digits_reference):
    ray_or_skip()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hipdnn_async", "serve", "--model", digits_file,
         "--replicas", "1", "--port", str(port), "--num-cpus", "1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, out), daemon=True).start()
    seen = []
    try:
        url = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while url is None and time.monotonic() < deadline:
            try:
                line = out.get(timeout=1.0)
            except queue.Empty:
                continue
            assert line is not None, "serve exited early:\n" + "".join(seen)
            seen.append(line)
            if line.startswith("hipdnn-async serve: digits model") and " at http" in line:
                url = line.rsplit(" at ", 1)[1].strip()
        assert url == f"http://{LOOPBACK}:{port}/", "".join(seen)
        images, _ = digits_images
        req = urllib.request.Request(url, data=json.dumps(images[:5].tolist()).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            doc = json.loads(r.read())
        np.testing.assert_allclose(np.asarray(doc["outputs"], np.float32),
                                   digits_reference[:5], rtol=RTOL, atol=ATOL)
        bad = urllib.request.Request(url, data=b"[[1, 2]]",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=60)
        err.value.close()
        assert err.value.code == 400
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()


def test_serve_command_refuses_a_bad_model_file_without_starting_ray(tmp_path):
    ray_or_skip()
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    r = subprocess.run([sys.executable, "-m", "hipdnn_async", "serve", "--model", str(bad)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "not a readable .npz file" in r.stderr and str(bad) in r.stderr


def test_serve_command_refuses_gpus_this_machine_lacks_without_starting_ray(tmp_path,
                                                                            monkeypatch):
    """Widen the search (issue 10): `serve --device gpu:0` on a machine without that GPU
    (or more replicas than GPUs) started Ray and Serve, whose replica then waited for a GPU
    that never comes, and serve.run with it. Refused up front, naming what is missing."""
    ray_or_skip()
    import hipdnn_async as hd
    from hipdnn_async import _device
    from hipdnn_async.ray import _cli
    if hd.devices() == ["cpu"]:
        r = subprocess.run([sys.executable, "-m", "hipdnn_async", "serve", "--model",
                            str(tmp_path / "absent.npz"), "--device", "gpu:0"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "no GPU device on this machine" in r.stderr, r.stderr
        assert "absent.npz" not in r.stderr            # said before the model is read
    monkeypatch.setattr(_device, "devices", lambda: ["cpu", "cuda:0"])
    assert _cli._gpus_missing("cuda", 1) == "" and _cli._gpus_missing("gpu", 1) == ""
    assert "this machine has 1" in _cli._gpus_missing("gpu", 2)
    assert "no HIP device" in _cli._gpus_missing("hip", 1)
    assert _cli._gpus_missing("cpu", 8) == ""
