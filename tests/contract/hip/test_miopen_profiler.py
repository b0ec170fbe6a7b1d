"""The profiler's GPU times on the fake HIP runtime with MIOpen: the same checks as the CUDA
run (``test_profiler_contract.check_profile``), for each ROCm header set."""
from __future__ import annotations

import pytest

from .. import _profile_scenarios
from .._fakes import between, calls
from ..test_profiler_contract import DELAY_US, check_profile


@pytest.mark.parametrize("streams", [1, 2])
def test_profile_times_miopen_executions_with_events(fake_rocm, streams):
    r = fake_rocm.call(_profile_scenarios.profile_case, "hip:0", "trio", streams, 4, DELAY_US)
    check_profile(r, prefix="hip", streams=streams, executions=4)
    profiled = between(r["log"], "profiled", "end")
    assert calls(profiled, "miopenConvolution*")
