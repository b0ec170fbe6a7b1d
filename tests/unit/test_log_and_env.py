"""Issue 10 leftovers in the environment: a log file that cannot be written, and an
unknown value of HIPDNN_ASYNC_CUDNN_GRAPH. Each is one warning naming the variable, the
value and what happens instead; nothing prints a traceback, nothing is silently ignored."""
from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import warnings

import pytest

import hipdnn_async as hd
from hipdnn_async.providers.cudnn import _graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_LOG_THREE = """
import logging, os, hipdnn_async
from hipdnn_async import _log
log = logging.getLogger("hipdnn_async")
for word in ("first 51e", "second 51e", "third 51e"):
    log.info("record %s", word)
os.environ["HIPDNN_ASYNC_LOG_LEVEL"] = "off"
_log.configure_from_env()          # detaching the broken handler raises nothing either
print("ok")
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("flags", [(), ("-W", "error")])
def test_log_file_that_cannot_be_written_warns_once_then_logs_to_stderr(flags):
    """/dev/full opens but every write fails (ENOSPC): stock logging printed a
    '--- Logging error ---' traceback per record."""
    env = dict(os.environ, HIPDNN_ASYNC_LOG_LEVEL="info", HIPDNN_ASYNC_LOG_FILE="/dev/full")
    r = subprocess.run([sys.executable, *flags, "-c", _LOG_THREE], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "Traceback" not in r.stderr and "Logging error" not in r.stderr, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "cannot be written" in ln]
    assert len(warned) == 1, r.stderr
    assert "HIPDNN_ASYNC_LOG_FILE='/dev/full'" in warned[0]
    assert os.strerror(errno.ENOSPC) in warned[0] and "logging to stderr" in warned[0]
    if not flags:
        assert "RuntimeWarning" in warned[0]
    for word in ("first 51e", "second 51e", "third 51e"):   # none lost, each once
        assert sum(f"record {word}" in ln for ln in r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("value, off", [("0", True), (" 0 ", True), ("1", False),
                                        ("", False), (None, False)])
def test_cudnn_graph_env_accepted_values_say_nothing(monkeypatch, value, off):
    if value is None:
        monkeypatch.delenv(_graph.DISABLE_ENV, raising=False)
    else:
        monkeypatch.setenv(_graph.DISABLE_ENV, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _graph.disabled_by_env() is off


def test_cudnn_graph_env_unknown_value_warns_once_naming_the_accepted_values(monkeypatch):
    monkeypatch.setenv(_graph.DISABLE_ENV, "maybe-4d7")
    with pytest.warns(RuntimeWarning) as got:
        for _ in range(3):
            # the engine's own entry point: it stays on (on a machine without cuDNN it
            # then declines for that reason, not for the variable)
            with contextlib.suppress(hd.NotSupportedError):
                _graph.backend()
            assert _graph.disabled_by_env() is False
    assert len(got) == 1, [str(w.message) for w in got]
    msg = str(got[0].message)
    assert "HIPDNN_ASYNC_CUDNN_GRAPH='maybe-4d7' is not one of 0 (off) or 1" in msg
    assert "the engine stays on" in msg
