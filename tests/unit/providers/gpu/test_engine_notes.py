"""Each engine states how NaN goes through its ReLU (issue 9 item 9): the words pinned by
tests/gpu/test_nan_gpu.py (which checks the behaviour itself on each device; the CPU part
runs here) appear in the notes of the engines offered, CPU and (fake) cuDNN."""
from __future__ import annotations

import pytest

from gpu.test_nan_gpu import CASES, documented_nan

import hipdnn_async as hd


@pytest.mark.parametrize("case", list(CASES))
def test_the_nan_behaviour_is_in_every_engines_notes(fake_cuda, case):
    # (the fake cuDNN has no graph API: CUDNN_GRAPH_ENGINE declines there and is checked
    # by its class notes below)
    h, _, _ = CASES[case]("NHWC")
    for spec in ("cpu", "cuda:0"):
        with hd.Device(spec, streams=1) as dev:
            engines = hd.engines(h.g, dev)
        assert engines
        for engine in engines:
            documented_nan(engine)


def test_every_cudnn_engine_class_states_its_nan_behaviour():
    from hipdnn_async.providers.cudnn._provider import CudnnProvider
    assert CudnnProvider.ENGINES
    for cls in CudnnProvider.ENGINES:
        documented_nan(cls)
