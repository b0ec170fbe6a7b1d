"""Random small convolutions on every oneDNN candidate against float64, outputs
NaN-filled, workspaces of NaN bytes (``bench/fuzz_onednn_candidates.py``, a fixed sample
of its cases): the ``Conv._left_out`` rules keep oneDNN 3.2's faulty kernels out of
every candidate list, not only the default's.

Weight gradients get most of the sample: every faulty kernel found so far is one.
Skipped where ONEDNN_ENGINE is not offered (``_cpu_engines.require``)."""
from __future__ import annotations

import os
import random
import sys

import pytest

from ._cases import device  # noqa: F401
from ._cpu_engines import ONEDNN, require

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))


@pytest.mark.parametrize("directions, seed, cases", [(("wgrad",), 11, 200),
                                                     (("fprop", "dgrad", "wgrad"), 12, 100)])
def test_every_candidate_of_random_convolutions_is_exact(device, directions, seed, cases):
    require(ONEDNN)
    import hipdnn_async as hd
    import fuzz_onednn_candidates as fuzz
    wrong, runs = [], 0
    for i in range(cases):
        case = fuzz.random_case(random.Random(seed * 1_000_003 + i), directions)
        results = fuzz.check_case(hd, device, case)
        runs += len(results)
        wrong += [(case, name, what) for name, ok, what in results if not ok]
    assert runs >= cases        # candidates ran: not every case declined
    assert not wrong, wrong
