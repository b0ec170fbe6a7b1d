"""The algorithm policy's device options (issue 11 item 4): ``Device(deterministic=True)``
and ``Device(allow_tf32=True)`` make 1 the default of every offered knob named
``<engine>.deterministic`` / ``<engine>.allow_tf32``; a value given in ``knobs=`` wins;
other knobs and engines without such knobs are unchanged; ``plan.algorithm`` is a str
with ``.reason``. The cuDNN graph engine's own policy is tested in
tests/unit/providers/cudnn/test_graph_plan.py and, on the H200, tests/gpu."""
import pickle

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.providers._tuning import Algorithm


def _graph():
    g = hd.Graph(name="policy")
    x = g.tensor(dims=(1, 4, 5, 5), name="x")
    w = g.tensor(dims=(4, 4, 3, 3), name="w")
    g.conv_fprop(x, w, padding=1).set_output(True).set_name("y")
    return g


def _with_knobs(dev, monkeypatch, *extra):
    impl = dev.provider._engine_impls()[0]
    base = impl.knobs

    def knobs(match):
        return list(base(match)) + list(extra)
    monkeypatch.setattr(impl, "knobs", knobs)
    return impl


DET = hd.Knob("cpu_test.deterministic", "int64", 0, 0, 1, "test")
TF32 = hd.Knob("cpu_test.allow_tf32", "int64", 0, 0, 1, "test")


@pytest.mark.parametrize("option,knob", [("deterministic", DET), ("allow_tf32", TF32)])
def test_a_device_option_sets_the_default_of_its_knobs(monkeypatch, option, knob):
    with hd.Device("cpu", **{option: True}) as dev:
        _with_knobs(dev, monkeypatch, DET, TF32)
        plan = dev.build_sync(_graph())
        other = TF32 if knob is DET else DET
        assert plan.knobs[knob.id] == 1 and plan.knobs[other.id] == 0, plan.knobs
        assert plan.knobs["global.benchmarking"] == 0
        again = dev.build_sync(_graph(), knobs={knob.id: 0})      # the caller's value wins
        assert again.knobs[knob.id] == 0
    with hd.Device("cpu") as dev:
        _with_knobs(dev, monkeypatch, DET, TF32)
        assert dev.build_sync(_graph()).knobs[knob.id] == 0


def test_engines_without_the_knobs_are_unchanged():
    with hd.Device("cpu", deterministic=True, allow_tf32=True) as dev:
        plan = dev.build_sync(_graph())
        assert not any(k.endswith((".deterministic", ".allow_tf32")) for k in plan.knobs)
        x = np.ones((1, 4, 5, 5), np.float32)
        y = np.zeros((1, 4, 5, 5), np.float32)
        plan.execute_sync({"x": x, "w": np.ones((4, 4, 3, 3), np.float32), "y": y})
        assert y[0, 0, 2, 2] == 36.0          # 4 channels x 3 x 3 ones


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_the_options_take_bools(bad):
    with pytest.raises(hd.DeviceError, match="need True or False"):
        hd.Device("cpu", deterministic=bad)


def test_algorithm_is_a_name_with_a_reason():
    a = Algorithm("eng62 k2=3", "cuDNN heuristics mode A, rank 1 of the 3 configs ...")
    assert a == "eng62 k2=3" and isinstance(a, str) and a.split(" (")[0] == "eng62 k2=3"
    b = pickle.loads(pickle.dumps(a))
    assert b == a and b.reason == a.reason and type(b) is Algorithm
    assert Algorithm("x").reason == ""
