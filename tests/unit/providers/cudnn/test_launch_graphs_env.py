"""$HIPDNN_ASYNC_LAUNCH_GRAPHS: the graph engine's per-binding CUDA graphs on (unset, empty,
"1": GraphLaunch's graph_after is GRAPH_AFTER) or off ("0": 0, never captured); any other
value warns once, naming the accepted values, and leaves them on."""
import warnings

import pytest

from hipdnn_async.providers.cudnn import _graph_plan

ENV = "HIPDNN_ASYNC_LAUNCH_GRAPHS"


@pytest.mark.parametrize("value,want", [(None, _graph_plan.GRAPH_AFTER), ("", _graph_plan.GRAPH_AFTER),
                                        ("1", _graph_plan.GRAPH_AFTER), (" 0 ", 0), ("0", 0)])
def test_accepted_values(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _graph_plan.graph_after() == want
    assert _graph_plan.LAUNCH_GRAPHS_ENV == ENV and _graph_plan.GRAPH_AFTER >= 1


def test_another_value_warns_naming_the_accepted_ones_and_stays_on(monkeypatch):
    monkeypatch.setenv(ENV, "off-please")
    with pytest.warns(RuntimeWarning) as rec:
        assert _graph_plan.graph_after() == _graph_plan.GRAPH_AFTER
    text = str(rec[0].message)
    assert ENV in text and "off-please" in text and "0 (off)" in text
