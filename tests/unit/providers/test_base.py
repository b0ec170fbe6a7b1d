"""Engines that decline (issue 9 item 5): ranked engines of one provider, tried in order.

A fake second engine on the CPU device stands in for a vendor's extra engine: it declines
(at ``knobs`` or at ``build``), succeeds, or fails otherwise, and the results of the plan
that runs are checked against a float64 reference.
"""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._base import ProviderEngine, engine_id
from hipdnn_async.providers.cpu import CpuProvider
from hipdnn_async.providers.cpu._provider import CpuEngine
from oracle import _reference as ref


def conv_graph():
    g = hd.Graph(name="decl", io_data_type=hd.DataType.FLOAT)
    x = g.tensor(dims=(2, 3, 6, 5), name="x")
    w = g.tensor(dims=(4, 3, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1, name="conv").set_output(True).set_name("y")
    return g


def run_and_check(plan):
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (2, 3, 6, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    y = np.full((2, 4, 6, 5), np.nan, np.float32)
    plan.execute_sync({"x": x, "w": w, "y": y})
    np.testing.assert_allclose(y, ref.conv_fprop(x, w, (1, 1), (1, 1)), rtol=1e-5, atol=1e-5)


class Calls:
    knobs = build = 0


class DeclinesAtBuild(ProviderEngine):
    """Offered for every pattern, then declines at build (a vendor engine whose trial run
    refuses the problem)."""

    name = "FAKE_DECLINES_AT_BUILD"

    def knobs(self, match):
        Calls.knobs += 1
        return [hd.Knob("global.benchmarking", default=0, min=0, max=1)]

    def build(self, match, engine, knobs, perfdb):
        Calls.build += 1
        raise hd.NotSupportedError(f"{self.name}: the trial run refused {match.pattern.name}")


class DeclinesAtOffer(ProviderEngine):
    """Not offered at all: its knobs raise a decline (e.g. its library is absent)."""

    name = "FAKE_NOT_OFFERED"

    def knobs(self, match):
        raise ImportError("libfake.so.1: cannot open shared object file")

    def build(self, match, engine, knobs, perfdb):  # pragma: no cover - never offered
        raise AssertionError("an engine that was not offered was built")


class Succeeds(CpuEngine):
    """A second working engine: the CPU engine's kernels under another name."""

    name = "FAKE_CPU_TWIN"


class FailsHard(ProviderEngine):
    """Fails with an error that is not a decline: it must reach the caller."""

    name = "FAKE_BROKEN"

    def knobs(self, match):
        return [hd.Knob("global.benchmarking", default=0, min=0, max=1)]

    def build(self, match, engine, knobs, perfdb):
        raise hd.ExecutionError(f"{self.name}: the vendor library crashed")


@pytest.fixture
def engines(monkeypatch):
    """Set the CPU provider's ranked engines (the one-line change a provider makes)."""
    Calls.knobs = Calls.build = 0

    def use(*classes):
        monkeypatch.setattr(CpuProvider, "ENGINES", classes)
    return use


def test_offered_in_rank_order_without_those_that_decline(engines):
    engines(DeclinesAtBuild, DeclinesAtOffer, CpuEngine)
    g = conv_graph()
    with hd.Device("cpu") as dev:
        offered = hd.engines(g, dev)
    assert [e.name for e in offered] == ["FAKE_DECLINES_AT_BUILD", "CPU_ENGINE"]
    assert [e.id for e in offered] == [engine_id("FAKE_DECLINES_AT_BUILD"), engine_id("CPU_ENGINE")]
    assert all(e.provider == "cpu" for e in offered)


def test_build_moves_on_when_an_engine_declines(engines):
    engines(DeclinesAtBuild, CpuEngine)
    g = conv_graph()
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(g)
        assert plan.engine.name == "CPU_ENGINE" and plan.engine.id == engine_id("CPU_ENGINE")
        run_and_check(plan)
        assert Calls.build == 1
        # the decline is remembered with the plan cache: no second attempt
        assert dev.build_sync(g).engine.name == "CPU_ENGINE"
        assert Calls.build == 1


def test_the_best_engine_that_works_builds(engines):
    engines(Succeeds, CpuEngine)
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(conv_graph())
        assert plan.engine.name == "FAKE_CPU_TWIN"
        run_and_check(plan)


def test_engine_picks_one_by_name_id_or_engine(engines):
    engines(Succeeds, DeclinesAtBuild, CpuEngine)
    g = conv_graph()
    with hd.Device("cpu") as dev:
        offered = hd.engines(g, dev)
        for pick in ("CPU_ENGINE", engine_id("CPU_ENGINE"), offered[2]):
            plan = dev.build_sync(g, engine=pick)
            assert plan.engine == offered[2]
            run_and_check(plan)
        # the engine asked for declines: its own reason, no fallback
        with pytest.raises(hd.NotSupportedError, match="trial run refused CONV_FPROP"):
            dev.build_sync(g, engine="FAKE_DECLINES_AT_BUILD")
        with pytest.raises(hd.NotSupportedError, match="'FAKE_CPU_TWIN' .* 'CPU_ENGINE'"):
            dev.build_sync(g, engine="NO_SUCH_ENGINE")


def test_all_decline_lists_every_reason(engines):
    class AlsoDeclines(DeclinesAtBuild):
        name = "FAKE_ALSO_DECLINES"

        def build(self, match, engine, knobs, perfdb):
            raise ImportError("libfake_two.so: not found")

    engines(DeclinesAtBuild, AlsoDeclines)
    with hd.Device("cpu") as dev:
        with pytest.raises(hd.NotSupportedError) as e:
            dev.build_sync(conv_graph())
    msg = str(e.value)
    assert "every engine of device 'cpu' declined pattern CONV_FPROP" in msg
    assert "FAKE_DECLINES_AT_BUILD: FAKE_DECLINES_AT_BUILD: the trial run refused" in msg
    assert "FAKE_ALSO_DECLINES: libfake_two.so: not found" in msg


def test_none_offered_names_each_engine(engines):
    engines(DeclinesAtOffer)
    with pytest.raises(hd.NotSupportedError, match="no engine takes pattern CONV_FPROP: "
                                                   "FAKE_NOT_OFFERED: libfake.so.1"):
        hd.engines(conv_graph(), "cpu")


def test_an_error_that_is_not_a_decline_is_raised(engines):
    engines(FailsHard, CpuEngine)
    with hd.Device("cpu") as dev:
        with pytest.raises(hd.ExecutionError, match="crashed"):
            dev.build_sync(conv_graph())


def test_a_knob_error_is_not_a_decline(engines):
    # the limit is below every algorithm of the first engine: the caller's mistake
    engines(Succeeds, CpuEngine)
    with hd.Device("cpu") as dev:
        with pytest.raises(hd.KnobError, match="FAKE_CPU_TWIN"):
            dev.build_sync(conv_graph(), knobs={"global.workspace_size_limit": -1})


def test_hipdnn_lowering_uses_the_same_ranking(engines):
    engines(DeclinesAtBuild, CpuEngine)
    g = conv_graph()
    with hd.Device("cpu") as dev:
        g.build_operation_graph(dev)
        assert g.get_ranked_engine_ids() == [e.id for e in hd.engines(g, dev)]
        g.build_plans()          # no engine chosen: the declining one gives way
        x, w = np.ones((2, 3, 6, 5), np.float32), np.ones((4, 3, 3, 3), np.float32)
        y = np.zeros((2, 4, 6, 5), np.float32)
        g.execute({"x": x, "w": w, "y": y})
        np.testing.assert_allclose(y, ref.conv_fprop(x, w, (1, 1), (1, 1)), rtol=1e-6)
        g.create_execution_plan_ext(engine_id("FAKE_DECLINES_AT_BUILD"))
        with pytest.raises(hd.NotSupportedError, match="trial run refused"):
            g.build_plans()      # chosen explicitly: that engine only


def test_a_provider_without_engines_offers_none(engines):
    engines()
    with pytest.raises(hd.NotSupportedError, match="no engines"):
        hd.engines(conv_graph(), "cpu")


def _bad_param(call):
    from hipdnn_async import _errors
    return _errors.CudnnBadParamError(
        f"{call} failed: CUDNN_STATUS_BAD_PARAM (2000): bad stride", status=2000,
        status_name="CUDNN_STATUS_BAD_PARAM", library="libcudnn.so.9", call=call,
        vendor_message="bad stride")


class BadParamAtBuild(DeclinesAtBuild):
    """A vendor engine whose descriptor call refuses the graph's parameters at build."""

    name = "FAKE_BAD_PARAM_AT_BUILD"

    def build(self, match, engine, knobs, perfdb):
        raise _bad_param("cudnnSetTensorNdDescriptor")


class BadParamAtOffer(DeclinesAtBuild):
    name = "FAKE_BAD_PARAM_AT_OFFER"

    def knobs(self, match):
        raise _bad_param("cudnnGetConvolutionForwardAlgorithm_v7")


def test_a_vendor_bad_param_at_build_declines_naming_the_call(engines):
    from hipdnn_async import _errors
    engines(BadParamAtBuild, CpuEngine)
    g = conv_graph()
    with hd.Device("cpu") as dev:
        assert dev.build_sync(g).engine.name == "CPU_ENGINE"     # the next engine built
    with hd.Device("cpu") as dev:    # a fresh plan cache: the engine's own error
        with pytest.raises(_errors.CudnnNotSupportedError) as e:
            dev.build_sync(g, engine="FAKE_BAD_PARAM_AT_BUILD")
    err = e.value
    assert isinstance(err, hd.NotSupportedError) and isinstance(err, _errors.CudnnError)
    assert (err.call, err.status, err.status_name) == ("cudnnSetTensorNdDescriptor", 2000,
                                                      "CUDNN_STATUS_BAD_PARAM")
    assert str(err) == ("cudnnSetTensorNdDescriptor refused this graph's parameters: "
                        "CUDNN_STATUS_BAD_PARAM (2000): bad stride")


def test_a_vendor_bad_param_while_offering_is_not_offered(engines):
    engines(BadParamAtOffer, CpuEngine)
    offered = hd.engines(conv_graph(), "cpu")
    assert [e.name for e in offered] == ["CPU_ENGINE"]
    engines(BadParamAtOffer)
    with pytest.raises(hd.NotSupportedError, match="FAKE_BAD_PARAM_AT_OFFER: "
                                                   "cudnnGetConvolutionForwardAlgorithm_v7 "
                                                   "refused this graph's parameters"):
        hd.engines(conv_graph(), "cpu")


def test_declines_keep_each_engines_own_error(engines):
    import pickle
    from hipdnn_async.providers._base import DeclinedError
    engines(DeclinesAtOffer, DeclinesAtBuild)
    with hd.Device("cpu") as dev:
        with pytest.raises(DeclinedError) as e:
            dev.build_sync(conv_graph())
        names = [n for n, _ in e.value.declines]
        assert names == ["FAKE_NOT_OFFERED", "FAKE_DECLINES_AT_BUILD"]
        errs = dict(e.value.declines)
        assert type(errs["FAKE_NOT_OFFERED"]) is ImportError
        assert type(errs["FAKE_DECLINES_AT_BUILD"]) is hd.NotSupportedError
        back = pickle.loads(pickle.dumps(e.value))
        assert type(back) is DeclinedError and str(back) == str(e.value)
        assert [(n, type(x), str(x)) for n, x in back.declines] == \
            [(n, type(x), str(x)) for n, x in e.value.declines]
        # asked for by name: the engine's own error, at offer or (from the cache) at build
        with pytest.raises(ImportError, match="libfake.so.1"):
            dev.build_sync(conv_graph(), engine="FAKE_NOT_OFFERED")
        for _ in range(2):
            with pytest.raises(hd.NotSupportedError, match="trial run refused") as again:
                dev.build_sync(conv_graph(), engine=engine_id("FAKE_DECLINES_AT_BUILD"))
            assert not isinstance(again.value, DeclinedError)
        assert Calls.build == 1          # the second came from the plan cache
