"""What every stream of a GPU device needs before its first launch, declared as data.

A provider says once what its plans need on each stream, and the runtime creates it on
every stream of the device, open or opened later (``GpuContext.open_stream``), calling its
own bindings only: no provider code runs when a stream opens or a workspace grows (the
context takes these two records only, never a callable).

- ``StreamNeeds(context, key, handle_kind)``: every stream gets ``StreamResources`` under
  ``key``: a DNN handle of ``handle_kind`` (one of ``HANDLE_KINDS``) bound to the stream,
  and a workspace of at least :meth:`StreamNeeds.reserve`'s largest size.
- ``HandleWork(key, call, args)``: one plan's per-handle preparation (a MIOpen solution
  compiled, a fusion plan compiled), ``HANDLE_CALLS[call](handle, *args)``, run on the
  handle under ``key`` of every stream; the results, per handle, are in
  :attr:`HandleWork.results`, which the plan reads at launch.

Both are held weakly by the device's context: a provider (or plan) that is gone prepares
nothing on later streams, as it holds them.
"""
from __future__ import annotations

import threading
from collections import namedtuple

from .._errors import ExecutionError
from . import _cudnn, _miopen
from ._stream_resources import StreamHandle

__all__ = ["HANDLE_KINDS", "HANDLE_CALLS", "StreamNeeds", "HandleWork", "FusionState",
           "stream_handle"]


# ------------------------------------------------------------------ handle kinds
def _cudnn_handle(stream: int) -> StreamHandle:
    return StreamHandle(_cudnn.create, _cudnn.set_stream, _cudnn.destroy, stream)


def _miopen_handle(stream: int) -> StreamHandle:
    # miopenCreateWithStream: the handle binds to the device current at creation (the
    # caller's, made current for the stream)
    return StreamHandle(lambda: _miopen.create_with_stream(stream), _miopen.set_stream,
                        _miopen.destroy, stream)


# kind -> ``make(stream) -> StreamHandle`` (created on the device current on the thread)
HANDLE_KINDS = {"cudnn": _cudnn_handle, "miopen": _miopen_handle}


def stream_handle(kind: str, stream: int) -> StreamHandle:
    """A DNN handle of ``kind`` (``HANDLE_KINDS``) bound to ``stream``, created on the
    device current on the calling thread.

    Raises
    ------
    ValueError
        An unknown kind.
    """
    return _handle_kind(kind)(stream)


def _handle_kind(kind: str):
    try:
        return HANDLE_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown DNN handle kind {kind!r}; known: "
                         f"{', '.join(sorted(HANDLE_KINDS))}") from None


# ------------------------------------------------------------------ per-handle calls
FusionState = namedtuple("FusionState", "plan conv_op bias_op act_op args workspace_size")
FusionState.__doc__ = """A MIOpen fusion plan compiled for one handle: the plan, its ops (the
bias op None without a bias), the operator arguments a launch fills, and the workspace
bytes ``miopenFusionPlanGetWorkSpaceSize`` gives for the handle."""


def _miopen_conv_compile(handle: int, direction: int, a, b, conv, c, solution_id: int) -> bool:
    _miopen.conv_compile(direction, handle, a, b, conv, c, solution_id)
    return True


def _miopen_fusion_plan(handle: int, x_desc, conv, w_desc, bias_desc, act_mode: int):
    # miopenCompileFusionPlan raises MiopenNotSupportedError where no fused solver applies
    plan = _miopen.FusionPlan(x_desc)
    conv_op = plan.add_conv(conv, w_desc)
    bias_op = plan.add_bias(bias_desc) if bias_desc is not None else None
    act_op = plan.add_activation(act_mode)
    plan.compile(handle)
    return FusionState(plan, conv_op, bias_op, act_op, _miopen.OperatorArgs(),
                       plan.workspace_size(handle))


# name -> ``call(handle, *args) -> result`` kept per handle
HANDLE_CALLS = {
    # miopenConvolution*CompileSolution(handle, ...): (direction, a, b, conv, c, solution id)
    "miopen.conv_compile": _miopen_conv_compile,
    # a fusion plan conv [+ bias] + activation: (x desc, conv, w desc, bias desc | None, mode)
    "miopen.fusion_plan": _miopen_fusion_plan,
}


# ------------------------------------------------------------------ declarations
class StreamNeeds:
    """What every stream of ``context`` gets under ``key``: a handle of ``handle_kind``
    and a workspace of :attr:`reserved` bytes; created on every open stream now and on
    every stream opened later, before its first launch. Several of one key on one device
    share the stream's handle; its workspace is the largest any of them reserved.

    Parameters
    ----------
    context : GpuContext
        The device.
    key : str
        The resource key (``"cudnn"``, ``"miopen"``): a launch finds the resources in
        ``LaunchContext.resources[key]``.
    handle_kind : str
        One of ``HANDLE_KINDS``.

    Raises
    ------
    ValueError
        An unknown handle kind.
    DeviceError, GpuError
        A handle cannot be had on an open stream.
    """

    __slots__ = ("context", "key", "handle_kind", "_reserved", "_lock", "__weakref__")

    def __init__(self, context, key: str, handle_kind: str):
        _handle_kind(handle_kind)
        self.context = context
        self.key = key
        self.handle_kind = handle_kind
        self._reserved = 0
        self._lock = threading.Lock()
        context.apply_needs(self)

    @property
    def reserved(self) -> int:
        """The stream workspace size every stream holds (bytes)."""
        return self._reserved

    def create_on(self, lc) -> None:
        """Give launch context ``lc``'s stream its resources under :attr:`key` (a handle,
        unless it has one) and a workspace of :attr:`reserved` bytes. The context calls
        it between the stream's launches, with the stream's device current."""
        from ._stream_resources import StreamResources
        res = lc.resources.get(self.key)
        if res is None:
            ctx = self.context
            res = StreamResources(lc.stream, stream_handle(self.handle_kind, lc.stream),
                                  pooled=ctx.pooled, runtime=ctx.runtime)
            lc.resources[self.key] = res
        res.reserve(self._reserved)

    def reserve(self, nbytes: int) -> None:
        """Make every stream's workspace (open ones now, later ones at start) hold at
        least ``nbytes``: at build, before the plan can be launched.

        Raises
        ------
        DeviceError
            The memory cannot be had on some stream.
        """
        with self._lock:
            if nbytes <= self._reserved:
                return
            self._reserved = int(nbytes)
            self.context.apply_needs(self)

    def prepare_handles(self, work: "HandleWork") -> None:
        """Run ``work`` on the handle of every stream of the device under :attr:`key`:
        now on open streams, at start on later ones (``work`` held weakly)."""
        self.context.add_handle_work(work)


class HandleWork:
    """One plan's preparation per DNN handle, as data: ``HANDLE_CALLS[call](handle,
    *args)`` on the handle under ``key`` of every stream (and on a build handle through
    :meth:`prepare`); what it returns is kept in :attr:`results` under the handle.

    Parameters
    ----------
    key : str
        The resource key whose handle it prepares (``"miopen"``).
    call : str
        One of ``HANDLE_CALLS``.
    args : tuple
        The call's arguments after the handle.
    who : str
        The plan, as messages name it.

    Raises
    ------
    ValueError
        An unknown call.
    """

    __slots__ = ("key", "call", "args", "who", "results", "_fn", "__weakref__")

    def __init__(self, key: str, call: str, args: tuple, who: str):
        try:
            self._fn = HANDLE_CALLS[call]
        except KeyError:
            raise ValueError(f"unknown per-handle call {call!r}; known: "
                             f"{', '.join(sorted(HANDLE_CALLS))}") from None
        self.key = key
        self.call = call
        self.args = tuple(args)
        self.who = who
        self.results: dict[int, object] = {}

    def prepare(self, handle: int):
        """Run the call on ``handle`` and keep its result; returns it."""
        out = self.results[handle] = self._fn(handle, *self.args)
        return out

    def prepare_on(self, lc) -> None:
        """Run on the handle of launch context ``lc``'s stream under :attr:`key` (none:
        nothing to do)."""
        res = lc.resources.get(self.key)
        if res is not None:
            self.prepare(res.handle)

    def state(self, handle: int):
        """The result for ``handle``, as a launch reads it.

        Raises
        ------
        ExecutionError
            ``handle`` was not prepared for this plan.
        """
        try:
            return self.results[handle]
        except KeyError:
            raise ExecutionError(f"{self.who}: {self.key} handle {handle:#x} was not prepared "
                                 "for this plan (a stream of another device?)") from None
