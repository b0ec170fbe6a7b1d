"""The fuzzer's parent side: case strategies (hypothesis) and the guarded worker.

``Worker`` runs ``_fuzz_worker.py`` as a child process and sends it one case at a time;
a child that dies is a ``crash`` finding, one that does not answer within the timeout a
``hang`` finding (it is killed and a new one started). ``specs()`` draws cases: valid ones
of the nine patterns, and invalid ones (a broken graph, a broken variant pack, bad knobs).
"""
from __future__ import annotations

import json
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import time

from hypothesis import strategies as st

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")

sys.path[:0] = [HERE, os.path.dirname(HERE)]     # _fuzz_cases, and tests/ for oracle
from _fuzz_cases import EITHER, GRAPH_BUGS, MAY_PASS, MUST_FAIL, PATTERNS  # noqa: E402

LAYOUTS = ("NCHW", "NHWC", "NHWC_nonpacked", "NCDHW", "NDHWC", "NCDHW_nonpacked")
PATHS = ("sync", "sync", "sync", "submit", "submit", "enqueue", "asyncio", "trio", "cancel",
         "many", "lowering")


class Worker:
    """A guarded worker process; ``run(spec)`` returns its answer or a crash/hang finding."""

    def __init__(self, *, timeout: float = 120.0, env: dict | None = None,
                 startup_timeout: float = 600.0):
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.env = dict(os.environ if env is None else env)
        self._tmp = tempfile.mkdtemp(prefix="hipdnn_fuzz_")
        self.env.setdefault("HIPDNN_ASYNC_PERFDB", os.path.join(self._tmp, "perf.sqlite3"))
        self.proc = None
        self.restarts = 0

    def _start(self):
        self._err = open(os.path.join(self._tmp, f"stderr-{self.restarts}.log"), "w+b")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "_fuzz_worker.py")],
                                     cwd=ROOT, env=self.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._err)
        self.restarts += 1

    def _stderr_tail(self) -> str:
        self._err.flush()
        self._err.seek(0)
        return self._err.read()[-3000:].decode("utf-8", "replace")

    def _read(self, n, deadline):
        data = b""
        fd = self.proc.stdout.fileno()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None, "hang"
            chunk = os.read(fd, n - len(data))
            if not chunk:
                return None, "crash"
            data += chunk
        return data, None

    def _ready(self) -> dict | None:
        """Wait for the new worker's hello (its imports may be slow on a loaded machine)."""
        deadline = time.monotonic() + self.startup_timeout
        head, bad = self._read(4, deadline)
        if head is not None:
            body, bad = self._read(struct.unpack(">I", head)[0], deadline)
            if body is not None and "ready" in pickle.loads(body):
                return None
        return self._dead(bad or "crash")

    def request(self, req: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
            failed = self._ready()
            if failed is not None:
                failed["finding"] = "worker start: " + failed["finding"]
                return failed
        data = pickle.dumps(req)
        try:
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._dead("crash")
        deadline = time.monotonic() + self.timeout
        head, bad = self._read(4, deadline)
        if head is not None:
            body, bad = self._read(struct.unpack(">I", head)[0], deadline)
            if body is not None:
                return pickle.loads(body)
        return self._dead(bad)

    def _dead(self, why: str) -> dict:
        if why == "hang":
            self.proc.kill()
        rc = self.proc.wait()
        tail = self._stderr_tail()
        self._release()
        return {"finding": f"{why}: worker {'killed after ' + str(self.timeout) + ' s' if why == 'hang' else 'exited with ' + str(rc)}\n{tail}",
                "crash": why}

    def _release(self):
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                f.close()
            except OSError:
                pass
        self.proc = None

    def close(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._release()


# ---------------------------------------------------------------------------------------
# Strategies

small = st.integers(1, 3)


@st.composite
def conv_spec(draw):
    return {"n": draw(st.sampled_from([1, 1, 2, 2, 3, 0])), "g": draw(st.sampled_from([1, 1, 2, 3])),
            "cg": draw(small), "kg": draw(small),
            "sp": [draw(st.integers(1, 7)) for _ in range(3)],
            "k": [draw(st.integers(1, 3)) for _ in range(3)],
            "stride": [draw(st.integers(1, 3)) for _ in range(3)],
            "dil": [draw(st.integers(1, 2)) for _ in range(3)],
            "pre": [draw(st.integers(0, 2)) for _ in range(3)],
            "post": [draw(st.integers(0, 2)) for _ in range(3)]}


@st.composite
def bn_spec(draw):
    return {"n": draw(st.sampled_from([1, 1, 2, 2, 3, 0])), "c": draw(st.integers(1, 4)),
            "sp": [draw(st.integers(1, 5)) for _ in range(3)]}


CLIPS = st.sampled_from([(None, None), (None, None), (None, 0.5), (None, 6.0), (0.1, 0.5),
                         (-0.5, 0.5), (0.0, None), (-0.5, None)])


@st.composite
def specs(draw):
    """One case: a pattern with random geometry, dtype, layout, values and execution path,
    and with some probability one deliberate defect (graph, variant pack or knobs)."""
    pattern = draw(st.sampled_from(PATTERNS))
    spec = {"pattern": pattern,
            "dtype": draw(st.sampled_from(["float32", "float32", "float16", "bfloat16"])),
            "layout": draw(st.sampled_from(LAYOUTS)),
            "seed": draw(st.integers(0, 2 ** 32 - 1)),
            "scale": draw(st.sampled_from([1.0, 1.0, 0.25, 4.0])),
            "path": draw(st.sampled_from(PATHS)),
            "clips": draw(CLIPS),
            "target": draw(st.integers(0, 50))}
    spec["conv" if pattern.startswith("CONV") else "bn"] = draw(
        conv_spec() if pattern.startswith("CONV") else bn_spec())
    if pattern.startswith("BN_TRAINING"):
        spec["running"] = draw(st.booleans())
        spec["stats_out"] = draw(st.booleans())
        spec["momentum"] = draw(st.sampled_from([0.1, 0.0, 1.0, 0.05]))
    if pattern in ("BN_TRAINING", "BN_TRAINING_RELU", "BN_INFERENCE_VARIANCE"):
        spec["epsilon"] = draw(st.sampled_from([1e-5, 1e-3, 0.1]))
    if pattern in ("BN_INFERENCE_VARIANCE", "CONV_FPROP_RELU", "CONV_FPROP"):
        spec["special"] = draw(st.integers(0, 7)) == 0     # NaN / inf in x
    kind = draw(st.sampled_from(["valid"] * 4 + ["graph", "pack", "pack", "knobs", "edit"]))
    if kind == "graph":
        spec["graph_bug"] = draw(st.sampled_from(GRAPH_BUGS))
        spec["bad_value"] = draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), 2.0,
                                                  "0.1", None]))
    elif kind == "pack":
        spec["mutations"] = draw(st.lists(st.sampled_from(MUST_FAIL + MAY_PASS * 2 + EITHER * 2),
                                          min_size=1, max_size=2))
    elif kind == "knobs":
        spec["knobs"], spec["bad_knob"] = draw(knob_settings())
    elif kind == "edit":
        edit = (draw(st.sampled_from(["set_dims", "set_data_type", "set_strides",
                                      "set_name"])), draw(st.integers(0, 20)),
                draw(st.booleans()))
        spec["twin_edit" if draw(st.booleans()) else "edit_after_build"] = edit
    if kind != "knobs" and draw(st.integers(0, 9)) == 0:
        spec["knobs"] = {"global.benchmarking": 1}
    return spec


@st.composite
def knob_settings(draw):
    """(knobs, whether they must be refused)."""
    which = draw(st.sampled_from(["bench", "ws_low", "ws_big", "ws_neg", "unknown", "float",
                                  "str", "bool", "bench2", "none"]))
    return {"bench": ({"global.benchmarking": 1}, False),
            "bench2": ({"global.benchmarking": 2}, True),
            "ws_low": ({"global.workspace_size_limit": 0}, None),
            "ws_big": ({"global.workspace_size_limit": 2 ** 62}, None),
            "ws_neg": ({"global.workspace_size_limit": -1}, True),
            "unknown": ({"global.no_such_knob": 1}, True),
            "float": ({"global.benchmarking": 0.5}, True),
            "str": ({"global.benchmarking": "1"}, True),
            "bool": ({"global.benchmarking": True}, None),
            "none": ({"global.benchmarking": None}, True)}[which]


# ---------------------------------------------------------------------------------------
# Judging an answer, and the corpus

def judge(spec, ans) -> str | None:
    """None when the answer keeps every promise, else the finding's text."""
    if "finding" in ans:
        return ans["finding"]
    if "harness_error" in ans:
        return "harness error (a bug of the fuzzer):\n" + ans["harness_error"]
    return None


def corpus_specs():
    """The saved cases (tests/property/corpus/*.json), each {"spec":..., "why":...}."""
    out = []
    if os.path.isdir(CORPUS):
        for name in sorted(os.listdir(CORPUS)):
            if name.endswith(".json"):
                with open(os.path.join(CORPUS, name), encoding="utf-8") as f:
                    out.append((name, json.load(f)))
    return out


def save_finding(spec, text, folder=CORPUS):
    """Keep a finding's case in the corpus (name from its hash), once."""
    import hashlib
    os.makedirs(folder, exist_ok=True)
    body = json.dumps(spec, sort_keys=True, default=str)
    name = hashlib.sha1(body.encode()).hexdigest()[:12] + ".json"
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"spec": spec, "why": text.splitlines()[0][:300]}, f, indent=1,
                      sort_keys=True, default=str)
    return path
