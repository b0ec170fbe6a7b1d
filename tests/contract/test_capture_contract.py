"""Capture-safe plans (issue 9 item 8): an execution only enqueues work, even the first
one on a stream that has run nothing and a plan needing more workspace than the stream's
last one (handles and workspace are prepared at build / stream start). The only setup
allowed on first use is the stream backend's pool of completion events growing."""
from __future__ import annotations

import pytest

from . import _scenarios
from ._expect import assert_no_setup
from ._fakes import between, violations


@pytest.fixture(scope="module")
def capture(fake_gpu):
    r = fake_gpu.call(_scenarios.capture_case)
    assert not violations(r["log"]), violations(r["log"])
    assert r["workspace_sizes"][1] > r["workspace_sizes"][0] > 0
    return r


def test_first_execution_on_a_cold_stream_creates_nothing(capture):
    records = between(capture["log"], "small_s1", "small_s0")
    assert [r["fn"] for r in records if r["rec"] == "call" and r["fn"].startswith("cudnnConvolution")] == ["cudnnConvolutionForward"]
    assert_no_setup(records, "first run on stream 1", cold=True)


def test_a_larger_workspace_is_not_allocated_mid_stream(capture):
    records = between(capture["log"], "big_s0", "end")
    assert_no_setup(records, "larger plan on a warm stream 0")
