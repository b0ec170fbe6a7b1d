"""The fakes' call log and failure injection, through ctypes, plus helpers to read a log.

:class:`FakeControl` opens the fake runtime library by path (the same object the loader
opened: ``dlopen`` of a loaded path returns it) inside the process that uses the fakes.
Log records are dicts: ``rec`` ("call", "exec", "violation", "injected", "mark"), ``fn``,
``status``, ``seq``, ``thread`` and the call's arguments (descriptors resolved, see
``fakes/cudnn/fake_cudnn.c``). A call's record is appended when the call returns.
"""
from __future__ import annotations

import ctypes
import json

__all__ = ["FakeControl", "calls", "names", "between", "dnn_calls", "violations"]


class FakeControl:
    """Control of the fakes loaded in this process (the runtime fake holds the log).

    Parameters
    ----------
    runtime_path : str
        Path of the fake runtime library (libfakecudart.so, or the HIP fake).
    """

    def __init__(self, runtime_path: str):
        lib = ctypes.CDLL(runtime_path)
        lib.fake_log_json.restype = ctypes.c_char_p
        lib.fake_log_count.restype = ctypes.c_longlong
        lib.fake_log_mark.argtypes = [ctypes.c_char_p]
        lib.fake_inject.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.fake_set_delay_us.argtypes = [ctypes.c_int]
        self._lib = lib

    def log(self) -> list[dict]:
        """Every record since the last :meth:`clear`, in order."""
        return json.loads(self._lib.fake_log_json().decode())

    def clear(self) -> None:
        """Forget the log and the violation count."""
        self._lib.fake_log_clear()

    def count(self) -> int:
        return int(self._lib.fake_log_count())

    def mark(self, label: str) -> None:
        """Append a marker record (``between`` slices on them)."""
        self._lib.fake_log_mark(label.encode())

    def inject(self, fn: str, status: int, *, nth: int = 1, count: int = 1) -> None:
        """The ``nth`` call of ``fn`` from now on (and ``count - 1`` after it) returns
        ``status`` without doing its work."""
        self._lib.fake_inject(fn.encode(), nth, status, count)

    def clear_injections(self) -> None:
        self._lib.fake_inject_clear()

    def violations(self) -> int:
        return int(self._lib.fake_violations())

    def set_delay_us(self, us: int) -> None:
        """The delay each stream worker waits before each item."""
        self._lib.fake_set_delay_us(int(us))


def calls(log, fn=None, *, rec="call") -> list[dict]:
    """Records of kind ``rec`` (of function ``fn``, or whose name starts with a prefix
    ending in ``*``)."""
    out = []
    for r in log:
        if r["rec"] != rec:
            continue
        if fn is None or r["fn"] == fn or (fn.endswith("*") and r["fn"].startswith(fn[:-1])):
            out.append(r)
    return out


def names(log, *, rec="call", prefix=None) -> list[str]:
    """Function names of the records of kind ``rec`` (starting with ``prefix``)."""
    return [r["fn"] for r in log if r["rec"] == rec and (prefix is None or r["fn"].startswith(prefix))]


def between(log, start: str, end: str | None = None) -> list[dict]:
    """Records after the mark ``start`` and before the mark ``end`` (or the end)."""
    out, inside = [], False
    for r in log:
        if r["rec"] == "mark":
            if r["label"] == start:
                inside = True
                continue
            if end is not None and r["label"] == end:
                break
        if inside:
            out.append(r)
    if not inside:
        raise AssertionError(f"no mark {start!r} in the log")
    return out


def dnn_calls(log) -> list[dict]:
    """The cuDNN calls of a log (what a plan enqueues), plus device-to-device copies."""
    return [r for r in log if r["rec"] == "call" and (
        r["fn"].startswith("cudnn") or (r["fn"].startswith("cudaMemcpy") and r.get("kind") == 3))]


def violations(log) -> list[str]:
    """The violation messages of a log."""
    return [f"{r['fn']}: {r['what']}" for r in log if r["rec"] == "violation"]
