"""hipDNN's lowering names over the same machinery as ``Device.build``.

``Graph.build_operation_graph``, ``get_ranked_engine_ids``, ``get_knobs_for_engine``,
``create_execution_plan_ext``, ``build_plans``, ``get_workspace_size``, ``execute`` and
``execute_async`` forward here: this module registers itself with the graph layer
(``graph._graph.set_lowering``) on import, so the graph package never imports upward. The
state lives on the graph (``graph._lowering_state``); engines are ranked and plans built
by the device layer (``hd.engines``, ``Device.build_sync``), so both spellings share one
code path.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ._device import Device, engines
from ._errors import GraphError, KnobError, NotSupportedError
from ._knobs import KnobSetting, resolve_knobs
from .graph._graph import set_lowering

__all__ = [
    "build_operation_graph", "get_ranked_engine_ids", "get_knobs_for_engine",
    "create_execution_plan_ext", "build_plans", "get_workspace_size", "execute", "execute_async",
]


@dataclass
class _State:
    device: object
    owns_device: bool
    engines: list
    engine_id: int | None = None
    settings: list = field(default_factory=list)
    plan: object = None


def _state(graph, step: str) -> _State:
    st = getattr(graph, "_lowering_state", None)
    if st is None:
        raise GraphError(f"{step}: call build_operation_graph(device) first",
                         code="ATTRIBUTE_NOT_SET")
    return st


def build_operation_graph(graph, device=None) -> None:
    """Validate, assign uids, recognise the pattern and bind a device (default ``"cpu"``).

    Raises
    ------
    GraphError, NotSupportedError
    """
    owns = not isinstance(device, Device)
    dev = Device(device or "cpu") if owns else device
    try:
        state = _State(dev, owns, engines(graph, dev))
    except BaseException:
        if owns:
            dev.close()
        raise
    # a second call replaces the binding: a device the first call opened is closed (its
    # streams and threads would otherwise live until the garbage collector finds them)
    old = getattr(graph, "_lowering_state", None)
    graph._lowering_state = state
    if old is not None and old.owns_device and old.device is not dev:
        old.device.close()


def get_ranked_engine_ids(graph) -> list[int]:
    """Engine ids able to run the graph, best first: the ids of ``hd.engines(graph, device)``,
    in the order ``Device.build`` tries them."""
    return [e.id for e in _state(graph, "get_ranked_engine_ids").engines]


def _engine(st: _State, engine_id: int, step: str):
    for e in st.engines:
        if e.id == engine_id:
            return e
    raise NotSupportedError(f"{step}: engine id {engine_id} is not offered for this graph; "
                            f"offered: {[e.id for e in st.engines]}")


def get_knobs_for_engine(graph, engine_id: int) -> list:
    """The knobs engine ``engine_id`` offers for this graph."""
    st = _state(graph, "get_knobs_for_engine")
    return list(_engine(st, engine_id, "get_knobs_for_engine").knobs)


def create_execution_plan_ext(graph, engine_id: int, knob_settings=()) -> None:
    """Choose the engine and knob settings; ``build_plans`` builds with them.

    Raises
    ------
    KnobError
        A setting that is not a KnobSetting, an unknown knob, a value out of range.
    """
    st = _state(graph, "create_execution_plan_ext")
    engine = _engine(st, engine_id, "create_execution_plan_ext")
    settings = list(knob_settings or ())
    for s in settings:
        if not isinstance(s, KnobSetting):
            raise KnobError(f"create_execution_plan_ext: expected KnobSetting items; got {s!r}")
    resolve_knobs(engine.knobs, settings, engine_name=engine.name)  # range errors now, as hipDNN
    st.engine_id, st.settings, st.plan = engine_id, settings, None


def build_plans(graph) -> None:
    """Build (and tune, if ``global.benchmarking`` is 1) the plan chosen so far.

    Without ``create_execution_plan_ext`` the ranked engines are tried best first with
    default knobs, as ``Device.build`` does (an engine that declines gives way to the next);
    with it, only the engine chosen there.
    """
    st = _state(graph, "build_plans")
    st.plan = st.device.build_sync(graph, engine=st.engine_id, knobs=st.settings)


def _plan(graph, step):
    st = _state(graph, step)
    if st.plan is None:
        raise GraphError(f"{step}: call build_plans() first", code="ATTRIBUTE_NOT_SET")
    return st.plan


def get_workspace_size(graph) -> int:
    """Workspace bytes the built plan needs."""
    return _plan(graph, "get_workspace_size").workspace_size


def execute(graph, variant_pack, workspace=None) -> None:
    """Run the built plan and wait for completion (blocking)."""
    _plan(graph, "execute").execute_sync(variant_pack, workspace=workspace)


async def execute_async(graph, variant_pack, workspace=None) -> None:
    """Run the built plan; return when complete."""
    await _plan(graph, "execute_async").execute(variant_pack, workspace=workspace)


set_lowering(sys.modules[__name__])
