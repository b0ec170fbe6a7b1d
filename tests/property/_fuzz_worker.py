"""The fuzzer's worker process: runs cases sent by ``_fuzz.Worker`` and answers each.

    python tests/property/_fuzz_worker.py          (cwd: the repository root)

Protocol on stdin / the original stdout: 4-byte big-endian length + a pickled dict, one
request, one answer. Requests: a case spec, or ``{"op": "stats"}``. Answers:
``{"outcome": ...}``, ``{"finding": message}`` (a broken promise of the library),
``{"harness_error": traceback}`` (a bug of the fuzzer itself), or the stats. Anything the
library prints goes to stderr (fd 1 is moved there), so it cannot corrupt the protocol;
a crash or a hang shows as a dead or silent pipe on the parent's side.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _read_exact(f, n):
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main() -> int:
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)                           # stray prints (C or Python) go to stderr
    sys.stdout = sys.stderr
    sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), HERE]
    warnings.simplefilter("ignore")         # library warnings are not findings here
    import resource

    import hipdnn_async as hd
    from _fuzz_cases import PKG_DIR, Finding, api, run_spec

    state = {"device": hd.Device("cpu", streams=2), "cases": 0}
    proto_in = sys.stdin.buffer
    ready = pickle.dumps({"ready": os.getpid()})    # imports done: cases are timed from here
    proto_out.write(struct.pack(">I", len(ready)) + ready)
    while True:
        head = _read_exact(proto_in, 4)
        if head is None:
            break
        req = pickle.loads(_read_exact(proto_in, struct.unpack(">I", head)[0]))
        if req.get("op") == "stats":
            ans = {"cases": state["cases"],
                   "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                   "plan_cache": len(state["device"]._plan_cache)}
        elif req.get("op") == "selftest":       # proves the guard (test_the_guard_...)
            if req["do"] == "abort":
                os.abort()
            if req["do"] == "hang":
                time.sleep(3600)
            # an exception raised from code that lives in the package: an untyped finding
            code = compile("1 / 0", os.path.join(PKG_DIR, "_fuzz_selftest.py"), "eval")
            try:
                api("selftest", eval, code)
                ans = {"outcome": "selftest did not raise"}
            except Finding as exc:
                ans = {"finding": str(exc)}
        else:
            state["cases"] += 1
            try:
                ans = run_spec(req, state)
            except Finding as exc:
                ans = {"finding": str(exc)}
            except Exception:  # noqa: BLE001
                ans = {"harness_error": traceback.format_exc()}
            if state["device"]._pool.closed:    # a case closed it (it should not): reopen
                state["device"] = hd.Device("cpu", streams=2)
        data = pickle.dumps(ans)
        proto_out.write(struct.pack(">I", len(data)) + data)
    state["device"].close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
