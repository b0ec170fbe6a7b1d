"""Tests of hipdnn_async._knobs: knob records, resolution, errors, env override."""
from __future__ import annotations

import dataclasses
import logging
import pickle

import numpy as np
import pytest

from hipdnn_async._errors import HipdnnError, KnobError
from hipdnn_async._knobs import (BENCHMARKING, WORKSPACE_SIZE_LIMIT, IntConstraint, Knob,
                                 KnobSetting, apply_forced_benchmarking, benchmarking_knob,
                                 forced_benchmarking, resolve_knobs, workspace_limit_knob)

LO, HI = 512 * 1024, 128 * 1024 * 1024          # the seed's example range
ENGINE = "CPU_ENGINE"


@pytest.fixture
def knobs():
    return [benchmarking_knob(), workspace_limit_knob(LO, HI)]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", raising=False)
    monkeypatch.delenv("HIPDNN_FORCE_BENCHMARKING", raising=False)


# -- records ----------------------------------------------------------------

def test_global_knob_names_match_hipdnn():
    assert BENCHMARKING == "global.benchmarking"
    assert WORKSPACE_SIZE_LIMIT == "global.workspace_size_limit"


def test_benchmarking_knob_fields():
    k = benchmarking_knob()
    assert (k.id, k.type, k.default, k.min, k.max) == (BENCHMARKING, "int64", 0, 0, 1)
    assert k.description == "Enable benchmarking mode for kernel selection"
    assert str(k.constraint) == "[0, 1]"


def test_workspace_knob_defaults_to_max_and_prints_range():
    k = workspace_limit_knob(LO, HI)
    assert (k.id, k.default, k.min, k.max) == (WORKSPACE_SIZE_LIMIT, HI, LO, HI)
    assert k.description == "Maximum workspace memory in bytes"
    assert str(k.constraint) == "[524288, 134217728]"
    assert (k.constraint.min, k.constraint.max) == (LO, HI)


def test_knob_is_frozen_hashable_and_pickles():
    k = workspace_limit_knob(LO, HI)
    assert dataclasses.is_dataclass(k)
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.default = 3
    assert pickle.loads(pickle.dumps(k)) == k
    assert len({k, workspace_limit_knob(LO, HI)}) == 1
    assert dataclasses.replace(k, default=LO).default == LO


def test_knob_positional_and_keyword_construction_agree():
    a = Knob("p.op.x", "int64", 2, 1, 3, "d")
    b = Knob(id="p.op.x", default=2, min=1, max=3, description="d")
    assert a == b


@pytest.mark.parametrize("kwargs", [
    dict(type="double", default=0, min=0, max=1),
    dict(default=5, min=0, max=1),
    dict(default=0.5, min=0, max=1),
    dict(min=0, max=1),
])
def test_bad_knob_definitions_raise(kwargs):
    with pytest.raises(KnobError):
        Knob("p.op.x", **kwargs)


def test_int_constraint_validate():
    c = IntConstraint(2, 5)
    assert c.validate(np.int32(3)) == 3 and type(c.validate(np.int32(3))) is int
    with pytest.raises(KnobError, match=r"= 6 is outside \[2, 5\]"):
        c.validate(6, knob_id="k", engine_name="E")


def test_knob_setting_is_positional_like_hipdnn():
    s = KnobSetting("global.benchmarking", 1)
    assert (s.knob_id, s.value) == ("global.benchmarking", 1)
    s.value = 0  # hipDNN's setValue
    assert s.value == 0


# -- resolution -------------------------------------------------------------

def test_defaults_fill_everything(knobs):
    assert resolve_knobs(knobs, None, engine_name=ENGINE) == {BENCHMARKING: 0,
                                                              WORKSPACE_SIZE_LIMIT: HI}


def test_mapping_and_knob_settings_spellings_agree(knobs):
    as_map = resolve_knobs(knobs, {WORKSPACE_SIZE_LIMIT: 32 << 20, BENCHMARKING: 1},
                           engine_name=ENGINE)
    as_list = resolve_knobs(knobs, [KnobSetting(BENCHMARKING, 1),
                                    KnobSetting(WORKSPACE_SIZE_LIMIT, 32 << 20)],
                            engine_name=ENGINE)
    assert as_map == as_list == {BENCHMARKING: 1, WORKSPACE_SIZE_LIMIT: 32 << 20}
    assert list(as_map) == [BENCHMARKING, WORKSPACE_SIZE_LIMIT]  # offer order


@pytest.mark.parametrize("value", [LO, HI, np.int64(LO + 1), np.uint32(1 << 20)])
def test_range_edges_and_numpy_integers_accepted(knobs, value):
    got = resolve_knobs(knobs, {WORKSPACE_SIZE_LIMIT: value}, engine_name=ENGINE)
    assert got[WORKSPACE_SIZE_LIMIT] == int(value)
    assert type(got[WORKSPACE_SIZE_LIMIT]) is int


def test_out_of_range_message_is_exact(knobs):
    with pytest.raises(KnobError) as ei:
        resolve_knobs(knobs, [KnobSetting(WORKSPACE_SIZE_LIMIT, 1024)], engine_name=ENGINE)
    assert str(ei.value) == ("knob 'global.workspace_size_limit' = 1024 is outside "
                             "[524288, 134217728] for engine 'CPU_ENGINE'")
    assert ei.value.code == "INVALID_VALUE"
    assert isinstance(ei.value, ValueError)


@pytest.mark.parametrize("value", [LO - 1, HI + 1, -1])
def test_out_of_range_values(knobs, value):
    with pytest.raises(KnobError, match=r"is outside \[524288, 134217728\]"):
        resolve_knobs(knobs, {WORKSPACE_SIZE_LIMIT: value}, engine_name=ENGINE)


@pytest.mark.parametrize("value", [2, -1])
def test_benchmarking_only_zero_or_one(knobs, value):
    with pytest.raises(KnobError, match=r"outside \[0, 1\]"):
        resolve_knobs(knobs, {BENCHMARKING: value}, engine_name=ENGINE)


@pytest.mark.parametrize("value", [True, False, 1.0, 0.5, "1", None, np.bool_(True),
                                   np.float32(1)])
def test_non_integer_values_are_type_errors(knobs, value):
    with pytest.raises(KnobError, match=r"knob 'global.benchmarking' value .* has type"):
        resolve_knobs(knobs, {BENCHMARKING: value}, engine_name=ENGINE)


def test_int64_overflow_rejected():
    k = Knob("p.op.big", default=0, min=0, max=2 ** 63 - 1)
    with pytest.raises(KnobError, match="does not fit in int64"):
        resolve_knobs([k], {"p.op.big": 2 ** 63}, engine_name=ENGINE)


def test_unknown_knob_lists_offered_ids(knobs):
    with pytest.raises(KnobError) as ei:
        resolve_knobs(knobs, {"global.deterministic": 1}, engine_name=ENGINE)
    msg = str(ei.value)
    assert "'global.deterministic' is not offered for engine 'CPU_ENGINE'" in msg
    assert "'global.benchmarking'" in msg and "'global.workspace_size_limit'" in msg


def test_workspace_knob_not_offered_for_batchnorm():
    # the engine offers it for convolutions: the message says it is this graph that has none
    with pytest.raises(KnobError, match="for engine 'CPU_ENGINE' on this graph; "
                                        "offered: 'global.benchmarking'$"):
        resolve_knobs([benchmarking_knob()], {WORKSPACE_SIZE_LIMIT: 0}, engine_name=ENGINE)


def test_unknown_knob_with_nothing_offered():
    with pytest.raises(KnobError, match="offered: none"):
        resolve_knobs([], {BENCHMARKING: 0}, engine_name=ENGINE)


def test_duplicate_setting_rejected(knobs):
    with pytest.raises(KnobError, match="set twice"):
        resolve_knobs(knobs, [KnobSetting(BENCHMARKING, 1), KnobSetting(BENCHMARKING, 0)],
                      engine_name=ENGINE)


@pytest.mark.parametrize("settings", ["global.benchmarking", 5, [("a",)], [object()]])
def test_malformed_settings_container(knobs, settings):
    with pytest.raises(KnobError):
        resolve_knobs(knobs, settings, engine_name=ENGINE)


def test_knob_error_pickles(knobs):
    with pytest.raises(KnobError) as ei:
        resolve_knobs(knobs, {BENCHMARKING: 3}, engine_name=ENGINE)
    back = pickle.loads(pickle.dumps(ei.value))
    assert type(back) is KnobError and str(back) == str(ei.value)
    assert isinstance(back, HipdnnError)


# -- environment override ---------------------------------------------------

@pytest.mark.parametrize("word", ["1", "true", "ON", "Yes", "enable", "ENABLED", " on "])
def test_force_benchmarking_true_words(monkeypatch, word):
    monkeypatch.setenv("HIPDNN_FORCE_BENCHMARKING", word)
    assert forced_benchmarking() is True


@pytest.mark.parametrize("word", ["0", "false", "Off", "NO", "disable", "disabled"])
def test_force_benchmarking_false_words(monkeypatch, word):
    monkeypatch.setenv("HIPDNN_FORCE_BENCHMARKING", word)
    assert forced_benchmarking() is False


def test_force_benchmarking_unset_is_none():
    assert forced_benchmarking() is None


def test_our_variable_wins_over_hipdnn_one(monkeypatch):
    monkeypatch.setenv("HIPDNN_FORCE_BENCHMARKING", "1")
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "0")
    assert forced_benchmarking() is False


def test_read_on_every_call(monkeypatch):
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "1")
    assert forced_benchmarking() is True
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "off")
    assert forced_benchmarking() is False
    monkeypatch.delenv("HIPDNN_ASYNC_FORCE_BENCHMARKING")
    assert forced_benchmarking() is None


def test_bad_value_warns_once_and_is_ignored(monkeypatch, caplog):
    """Issue 10 item 9: an unknown value used to be logged only (logging is off by
    default, so: silent). Now a RuntimeWarning, once, naming the accepted values."""
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "maybe-7f3a")
    monkeypatch.setenv("HIPDNN_FORCE_BENCHMARKING", "yes")
    with caplog.at_level(logging.WARNING, logger="hipdnn_async"):
        with pytest.warns(RuntimeWarning, match="maybe-7f3a.*1, true, on.*0, false, off") as w:
            assert forced_benchmarking() is True      # falls through to the next variable
            assert forced_benchmarking() is True
    assert len(w) == 1
    hits = [r for r in caplog.records if "maybe-7f3a" in r.getMessage()]
    assert len(hits) == 1 and hits[0].name == "hipdnn_async"


def test_apply_forced_benchmarking(monkeypatch, knobs):
    resolved = resolve_knobs(knobs, {BENCHMARKING: 0}, engine_name=ENGINE)
    assert apply_forced_benchmarking(resolved) == resolved
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "1")
    forced = apply_forced_benchmarking(resolved)
    assert forced == {BENCHMARKING: 1, WORKSPACE_SIZE_LIMIT: HI}
    assert resolved[BENCHMARKING] == 0                 # input not modified
    monkeypatch.setenv("HIPDNN_ASYNC_FORCE_BENCHMARKING", "disabled")
    assert apply_forced_benchmarking({BENCHMARKING: 1})[BENCHMARKING] == 0
