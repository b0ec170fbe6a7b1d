"""Fixed ``bn_rows`` runs whose outputs test_bn_rows.py compares bit for bit between
processes with different OpenMP team sizes.

    python _bn_rows_worker.py OUT.npz [fork]

Runs every op (training with and without a clamp, inference, backward with and without
the RELU_BWD mask) x element kind x build on seeded inputs, once before oneDNN is loaded
(on the calling thread) and once after (on its OpenMP team, of ``OMP_NUM_THREADS``
threads), and saves every output and thread count in OUT.npz (keys ``<phase>/<case>/<out>``,
``<phase>/<case>/threads``, phase ``unloaded`` or ``loaded``). With ``fork``, the process
then forks and the child runs them once more (phase ``forked``: libgomp's team does not
survive fork, so the rows must run on the child's calling thread) and writes OUT.npz; the
parent waits for it at most 60 s. Exit status 0 when OUT.npz was written.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

# 7 channels: 2 threads split them 3 + 4, 3 threads 2 + 2 + 3; 37 elements per row: two
# 16-lane blocks, a 32-element block and a 5-element tail
DIMS = (3, 7, 37)
OPS = ("training", "training_clamp", "inference", "backward", "backward_drelu")


def _inputs(kind, seed):
    """Activations in the 16-bit kinds' raw bits, a channel slice of a larger buffer."""
    import ml_dtypes
    dt = (np.float32, ml_dtypes.bfloat16, np.float16)[kind]
    rng = np.random.default_rng(seed)
    n, c, s = DIMS

    def act(offset):
        base = np.full((n, c + 3, s), np.nan, dt)
        v = base[:, 1:1 + c]
        v[...] = (offset + rng.uniform(-1, 1, DIMS)).astype(dt)
        return v if kind == 0 else v.view(np.uint16)

    def vec(lo, hi):
        return rng.uniform(lo, hi, c).astype(np.float32)

    return {"x": act(0.3), "dy": act(0.0), "scale": vec(-2, 2), "bias": vec(-1, 1),
            "mean": vec(-0.2, 0.5), "variance": vec(0.5, 2), "inv_variance": vec(0.5, 2)}


def run_all() -> dict:
    """Every case on the current team: {"<case>/<out>": array, "<case>/threads": int}."""
    from hipdnn_async.providers.cpu import _kernels as k
    out = {}
    c = DIMS[1]
    for kind in range(3):
        for baseline in (True, False):
            for i, op in enumerate(OPS):
                a = _inputs(kind, [kind, i])
                y = np.full(DIMS, 0x7fff if kind else np.nan,
                            np.uint16 if kind else np.float32)
                vec = {r: np.full(c, np.nan, np.float32)
                       for r in ("mean_out", "variance_out", "dscale", "dbias")}
                if op.startswith("training"):
                    n = k.bn_rows(k.BN_ROWS_TRAINING, a["x"], y, kind, scale=a["scale"],
                                  bias=a["bias"], mean_out=vec["mean_out"],
                                  variance_out=vec["variance_out"], epsilon=1e-5,
                                  act=op.endswith("clamp"), lower=-0.25, upper=0.5,
                                  baseline=baseline)
                    keep = ("mean_out", "variance_out")
                elif op == "inference":
                    n = k.bn_rows(k.BN_ROWS_INFERENCE, a["x"], y, kind, scale=a["scale"],
                                  bias=a["bias"], mean=a["mean"], variance=a["variance"],
                                  epsilon=1e-5, baseline=baseline)
                    keep = ()
                else:
                    n = k.bn_rows(k.BN_ROWS_BACKWARD, a["x"], y, kind, dy=a["dy"],
                                  scale=a["scale"], bias=a["bias"], mean=a["mean"],
                                  inv_variance=a["inv_variance"], dscale=vec["dscale"],
                                  dbias=vec["dbias"], act=op.endswith("drelu"), lower=0.1,
                                  upper=1.5, baseline=baseline)
                    keep = ("dscale", "dbias")
                case = f"{kind}/{'baseline' if baseline else 'default'}/{op}"
                out[f"{case}/y"] = y
                out[f"{case}/threads"] = np.array(n)
                for r in keep:
                    out[f"{case}/{r}"] = vec[r]
    return out


def main(path: str, fork: bool = False) -> int:
    from hipdnn_async.runtime import _onednn, load_onednn
    assert _onednn.loaded() is None, "oneDNN loaded before the worker asked for it"
    runs = {f"unloaded/{key}": v for key, v in run_all().items()}
    state = load_onednn()
    if not state.ok:
        print(f"oneDNN does not load: {state.reason}", file=sys.stderr)
        return 2
    runs.update({f"loaded/{key}": v for key, v in run_all().items()})
    runs["max_threads"] = np.array(_onednn.max_threads())
    if not fork:
        np.savez(path, **runs)
        return 0
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            runs.update({f"forked/{key}": v for key, v in run_all().items()})
            np.savez(path, **runs)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("the forked child did not finish in 60 s", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], fork=sys.argv[2:] == ["fork"]))
