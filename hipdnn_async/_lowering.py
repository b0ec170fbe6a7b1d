"""``hd.Graph``: the graph layer's ``Graph`` with hipDNN's lowering names.

hipDNN lowers a graph through methods on the graph itself (``build_operation_graph``,
``get_ranked_engine_ids``, ``get_knobs_for_engine``, ``create_execution_plan_ext``,
``build_plans``, ``get_workspace_size``, ``execute``, ``execute_async``), and they need a
device. Devices sit above the graph layer, so those methods live here, in the device
layer, on a subclass of ``graph.Graph``: ``hipdnn_async.Graph`` is this class, and the
graph package imports and calls nothing above it (no hook, no registration). Graphs the
graph layer copies (``with_batch_size``, a plan's snapshot) keep their class.

The lowering's state lives on the graph (``_lowering_state``); engines are ranked and
plans built by the device layer (``hd.engines``, ``Device.build_sync``), so both
spellings share one code path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ._device import Device, engines
from ._errors import GraphError, KnobError, NotSupportedError
from ._knobs import KnobSetting, resolve_knobs
from .graph import Graph as _Graph

__all__ = ["Graph"]


@dataclass
class _State:
    device: object
    owns_device: bool
    engines: list
    engine_id: int | None = None
    settings: list = field(default_factory=list)
    plan: object = None


def _engine(st: _State, engine_id: int, step: str):
    for e in st.engines:
        if e.id == engine_id:
            return e
    raise NotSupportedError(f"{step}: engine id {engine_id} is not offered for this graph; "
                            f"offered: {', '.join(e.label() for e in st.engines) or 'none'}")


class Graph(_Graph):
    __doc__ = _Graph.__doc__.rstrip() + """

    Notes
    -----
    Besides ``Device.build``, the graph lowers itself hipDNN's way:
    ``build_operation_graph(device)``, ``get_ranked_engine_ids()``,
    ``get_knobs_for_engine(id)``, ``create_execution_plan_ext(id, settings)``,
    ``build_plans()``, ``get_workspace_size()``, ``execute(variant_pack)`` and
    ``await execute_async(variant_pack)``: the same machinery, one code path.
    """

    _lowering_state: _State | None = None    # set by build_operation_graph

    def __getstate__(self):
        # pickled (Ray ships graphs so) or deep-copied without its lowering: the bound
        # device and its plan are this process's, as copy() leaves them
        state = self.__dict__.copy()
        state.pop("_lowering_state", None)
        return state

    def _lowering(self, step: str) -> _State:
        st = self._lowering_state
        if st is None:
            raise GraphError(f"{step}: call build_operation_graph(device) first",
                             code="ATTRIBUTE_NOT_SET")
        return st

    def _built_plan(self, step: str):
        st = self._lowering(step)
        if st.plan is None:
            raise GraphError(f"{step}: call build_plans() first", code="ATTRIBUTE_NOT_SET")
        return st.plan

    # ------------------------------------------------------------------ hipDNN-style lowering
    def build_operation_graph(self, device=None) -> None:
        """Validate, assign uids, recognise the pattern and bind a device (hipDNN style).

        Parameters
        ----------
        device : Device or str, optional
            The device to build and run on, or a spec as ``Device`` takes (``"cpu"``,
            ``"gpu:N"``, ...) for a device the graph then owns. Default ``"cpu"``.

        Raises
        ------
        GraphError
            The graph is invalid (as ``validate``).
        NotSupportedError
            The graph matches none of the nine patterns, or no engine of the device
            takes it.
        DeviceError
            An unknown spec, or its runtime is absent.
        """
        owns = not isinstance(device, Device)
        dev = Device(device or "cpu") if owns else device
        try:
            state = _State(dev, owns, engines(self, dev))
        except BaseException:
            if owns:
                dev.close()
            raise
        # a second call replaces the binding: a device the first call opened is closed (its
        # streams and threads would otherwise live until the garbage collector finds them)
        old = self._lowering_state
        self._lowering_state = state
        if old is not None and old.owns_device and old.device is not dev:
            old.device.close()

    def get_ranked_engine_ids(self) -> list[int]:
        """Engine ids able to run the graph, best first (the order ``Device.build`` tries).

        Returns
        -------
        list of int
            int64 ids (FNV-1a of the engine names), as ``hd.engines(graph, device)``.

        Raises
        ------
        GraphError
            ``build_operation_graph`` was not called (code ``ATTRIBUTE_NOT_SET``).
        """
        return [e.id for e in self._lowering("get_ranked_engine_ids").engines]

    def get_knobs_for_engine(self, engine_id: int) -> list:
        """Knobs an engine offers for this graph.

        Parameters
        ----------
        engine_id : int
            One of ``get_ranked_engine_ids()``.

        Returns
        -------
        list of Knob

        Raises
        ------
        GraphError
            ``build_operation_graph`` was not called (code ``ATTRIBUTE_NOT_SET``).
        NotSupportedError
            ``engine_id`` is not offered for this graph.
        """
        st = self._lowering("get_knobs_for_engine")
        return list(_engine(st, engine_id, "get_knobs_for_engine").knobs)

    def create_execution_plan_ext(self, engine_id: int, knob_settings=()) -> None:
        """Choose the engine and knob settings that ``build_plans`` builds with.

        Parameters
        ----------
        engine_id : int
            As ``get_knobs_for_engine``.
        knob_settings : sequence of KnobSetting, optional
            e.g. ``[KnobSetting("global.workspace_size_limit", 32 << 20)]`` (bytes);
            checked now, as hipDNN does. Default: every knob at its default.

        Raises
        ------
        GraphError, NotSupportedError
            As ``get_knobs_for_engine``.
        KnobError
            An item that is not a KnobSetting, an unknown knob, a non-integer value or
            one outside the knob's range, a knob set twice.
        """
        st = self._lowering("create_execution_plan_ext")
        engine = _engine(st, engine_id, "create_execution_plan_ext")
        settings = list(knob_settings or ())
        for s in settings:
            if not isinstance(s, KnobSetting):
                raise KnobError(f"create_execution_plan_ext: expected KnobSetting items; "
                                f"got {s!r}")
        resolve_knobs(engine.knobs, settings, engine_name=engine.name)  # now, as hipDNN
        st.engine_id, st.settings, st.plan = engine_id, settings, None

    def build_plans(self) -> None:
        """Build (and tune, if ``global.benchmarking`` is 1) the plan chosen so far.

        Without ``create_execution_plan_ext`` the ranked engines are tried best first
        with default knobs, as ``Device.build`` does; with it, only the engine chosen
        there. The plan is a snapshot of the graph now.

        Raises
        ------
        GraphError
            ``build_operation_graph`` was not called (code ``ATTRIBUTE_NOT_SET``), or
            the graph is now invalid.
        NotSupportedError
            Every engine tried declined.
        KnobError
            A knob setting the engine does not accept.
        DeviceError
            The bound device is closed.
        """
        st = self._lowering("build_plans")
        st.plan = st.device.build_sync(self, engine=st.engine_id, knobs=st.settings)

    def get_workspace_size(self) -> int:
        """Workspace the built plan needs per execution, in bytes.

        Returns
        -------
        int

        Raises
        ------
        GraphError
            ``build_plans`` was not called (code ``ATTRIBUTE_NOT_SET``).
        """
        return self._built_plan("get_workspace_size").workspace_size

    def execute(self, variant_pack, workspace=None) -> None:
        """Run the built plan and wait for completion (blocking; ``ExecutionPlan.execute_sync``).

        Parameters
        ----------
        variant_pack : mapping
            TensorAttributes, uid or name -> buffer, as ``ExecutionPlan.execute``.
        workspace : array, optional
            At least ``get_workspace_size()`` writable contiguous bytes; allocated per
            call if omitted.

        Raises
        ------
        GraphError
            ``build_plans`` was not called (code ``ATTRIBUTE_NOT_SET``).
        VariantPackError, ExecutionError, DeviceError
            As ``ExecutionPlan.execute``.
        """
        self._built_plan("execute").execute_sync(variant_pack, workspace=workspace)

    async def execute_async(self, variant_pack, workspace=None) -> None:
        """Run the built plan; awaitable, returns when complete (``ExecutionPlan.execute``).

        Parameters
        ----------
        variant_pack, workspace
            As ``execute``.

        Raises
        ------
        GraphError, VariantPackError, ExecutionError, DeviceError
            As ``execute``.
        """
        await self._built_plan("execute_async").execute(variant_pack, workspace=workspace)
