"""``plan.declined``: the engines that declined a graph on the way to the one that built
it, each with its reason, as the build's ``info`` log line gives them."""
from __future__ import annotations

import logging

import pytest

from ._cases import device  # noqa: F401
from ._cpu_engines import ONEDNN, REFERENCE, absence, probe_graph


def _zero_batch_conv():
    import hipdnn_async as hd
    g = hd.Graph(name="zero_batch", io_data_type="float32")
    x = g.tensor(dims=(0, 8, 8, 8), layout="NHWC", name="x")
    w = g.tensor(dims=(8, 8, 3, 3), layout="NHWC", name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g


def test_a_declining_engine_is_named_with_its_reason(device, caplog):
    # oneDNN has no form for a batch of 0: ONEDNN_ENGINE declines, CPU_ENGINE builds it
    with caplog.at_level(logging.INFO, logger="hipdnn_async"):
        plan = device.build_sync(_zero_batch_conv())
    assert plan.engine.name == REFERENCE
    names = [name for name, _ in plan.declined]
    assert names == [ONEDNN], plan.declined
    why = plan.declined[0][1]
    assert ("zero dim (0, 8, 8, 8)" in why if absence(ONEDNN) is None else why), why
    assert any(f"{ONEDNN} declined: {why}" in r.getMessage() for r in caplog.records)


def test_nothing_declined_where_the_first_engine_builds_or_one_is_named(device):
    if absence(ONEDNN) is not None:
        pytest.skip(f"{ONEDNN} is not offered here: {absence(ONEDNN)}")
    assert device.build_sync(probe_graph()).declined == ()
    # engine= names the engine: no way through the others, so nothing declined on it
    assert device.build_sync(_zero_batch_conv(), engine=REFERENCE).declined == ()
