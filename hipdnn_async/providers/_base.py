"""What every provider offers: engines, knobs and plans.

A provider turns a recognised pattern (``patterns.Match``) into a ``ProviderPlan`` that
runs on one of its device's streams. The CPU provider is always present; GPU providers
load their vendor library at run time.

Engines: a provider lists its engine implementations, best first, in ``ENGINES``
(subclasses of ``ProviderEngine``); adding an engine is one line there::

    class CudnnProvider(Provider):
        ENGINES = (GraphApiEngine, LegacyEngine)

``Provider.engines(match)`` offers every engine that takes the pattern, in that order;
an engine declines by raising one of ``DECLINE_TYPES`` (``NotSupportedError``,
``ImportError``), from ``knobs`` (not offered at all) or from ``build`` (``Device.build``
then moves on to the next one offered). A vendor error raised while an engine is offered
or builds is reported as a build reports it (``VendorError.at_build``): a BAD_PARAM
becomes the library's NotSupportedError naming the call, so it declines too.
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from .._errors import DECLINE_TYPES, HipdnnError, NotSupportedError, VendorError
from .._knobs import Knob

__all__ = ["Engine", "Provider", "ProviderEngine", "ProviderPlan", "DeclinedError",
           "engine_id", "run_launcher", "DECLINE_TYPES"]

# FNV-1a, 64-bit (http://www.isthe.com/chongo/tech/comp/fnv/): hipDNN derives engine ids
# from engine names this way (hipdnn docs/0003_EngineIdDesign.md, fnv1aHash).
_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3


def engine_id(name: str) -> int:
    """Return the int64 engine id of ``name``: 64-bit FNV-1a of its UTF-8 bytes.

    The unsigned hash is reinterpreted as a two's-complement int64, as hipDNN stores
    engine ids in ``int64_t``.
    """
    h = _FNV64_OFFSET
    for byte in name.encode("utf-8"):
        h ^= byte
        h = (h * _FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h - (1 << 64) if h >= (1 << 63) else h


@dataclass(frozen=True)
class Engine:
    """An engine of a provider, as offered for one graph.

    Attributes
    ----------
    id : int
        int64 FNV-1a hash of ``name`` (as hipDNN).
    name : str
        Engine name, e.g. ``"CPU_ENGINE"``.
    provider : str
        ``"cpu"``, ``"cudnn"`` or ``"miopen"``.
    knobs : tuple of Knob
        The knobs offered for this graph (``global.workspace_size_limit`` only for the
        single-node convolution patterns, with the graph's dynamic range).
    notes : str
        What the engine supports beyond the nine patterns, or how it behaves.
    """

    id: int
    name: str
    provider: str
    knobs: tuple[Knob, ...] = ()
    notes: str = ""

    def label(self) -> str:
        """``'CPU_ENGINE' (id 1234...)``: the name first, for messages (the id is the
        name's hash, the number hipDNN's API passes)."""
        return f"{self.name!r} (id {self.id})"

    def knob(self, knob_id: str) -> Knob | None:
        """Return the offered knob named ``knob_id``, or None."""
        return next((k for k in self.knobs if k.id == knob_id), None)


class DeclinedError(NotSupportedError):
    """No engine takes the graph: a ``NotSupportedError`` whose message gives each engine's
    reason, and whose ``declines`` keeps each engine's own error.

    Attributes
    ----------
    declines : tuple of (str, Exception)
        (engine name, the error it declined with: e.g. a ``CudnnNotSupportedError`` with
        ``.status`` and ``.call``), best-ranked engine first.
    """

    def __init__(self, message: str = "", *, declines=(), **kw):
        super().__init__(message, **kw)
        self.declines = tuple(declines)

    def __reduce__(self):
        return (_rebuild_declined, (type(self), self.message, self.code, self.declines))


def _rebuild_declined(cls, message, code, declines):
    return cls(message, code=code, declines=declines)


def _reasons(declines) -> str:
    return "; ".join(f"{name}: {exc}" for name, exc in declines)


class ProviderPlan(abc.ABC):
    """A built plan of one provider: a chosen algorithm and its workspace needs."""

    algorithm: str | None = None
    workspace_size: int = 0
    benchmarked: bool = False
    perfdb_hit: bool = False

    @abc.abstractmethod
    def run(self, buffers: Mapping[str, Any], workspace: Any) -> None:
        """Execute on the calling stream worker.

        ``buffers`` maps pattern roles (``"x"``, ``"w"``, ``"y"``, ...) to bound
        buffers (logical NumPy views on the CPU); ``workspace`` holds at least
        ``workspace_size`` bytes, or is None when that is 0.
        """

    def launcher(self, buffers: Mapping[str, Any], workspace: Any, *, counter=None,
                 label: str | None = None):
        """The work-item function of one execution with bound ``buffers`` / ``workspace``:
        called with no arguments, on the stream (its worker, or the submitting thread when
        the execution runs inline); made once per binding and reused while the same
        buffers come again.

        The default calls :meth:`run`. An engine with a cheaper launch (a prebuilt vendor
        call in C) overrides it.

        Parameters
        ----------
        buffers, workspace
            As :meth:`run`.
        counter : runtime.ExecCounter, optional
            ``counter.add(ns)`` per execution that completed (host ns in the launch).
        label : str, optional
            The execution plan's label: a ``HipdnnError`` of the launch is raised
            prefixed with it (``HipdnnError.prefixed``), as the queue passes such an
            error through unchanged.
        """
        return run_launcher(self, buffers, workspace, counter=counter, label=label)


def run_launcher(plan, buffers, workspace, *, counter=None, label: str | None = None):
    """A work-item function calling ``plan.run(buffers, workspace)`` (``ProviderPlan``'s
    default ``launcher``; parameters as there)."""
    add = counter.add if counter is not None else None
    clock = time.perf_counter_ns

    def launch():
        t0 = clock()
        try:
            plan.run(buffers, workspace)
        except HipdnnError as exc:
            if label is None:
                raise
            raise exc.prefixed(label)   # the unnamed error is its __cause__
        if add is not None:
            add(clock() - t0)

    return launch


class ProviderEngine(abc.ABC):
    """One engine of a provider: which patterns it takes, its knobs, how it builds.

    Subclasses set ``name`` (its FNV-1a hash is the engine id) and ``notes``, and are
    listed in their provider's ``ENGINES``; one instance is made per provider.

    Parameters
    ----------
    provider : Provider
        The provider (device) the engine runs on.
    """

    name: ClassVar[str] = ""
    notes: ClassVar[str] = ""
    # True for the engine that was its provider's only one when perf-db entries had no
    # engine (schema 1): it claims those entries (``PerfDb.lookup(..., schema1=True)``).
    schema1: ClassVar[bool] = False

    def __init__(self, provider: "Provider"):
        self.provider = provider

    @property
    def id(self) -> int:
        """int64 FNV-1a hash of ``name`` (as hipDNN)."""
        return engine_id(self.name)

    @abc.abstractmethod
    def knobs(self, match) -> Sequence[Knob]:
        """The knobs offered for ``match``.

        Raises
        ------
        NotSupportedError (or another of DECLINE_TYPES)
            The engine does not take this pattern: it is not offered.
        """

    @abc.abstractmethod
    def build(self, match, engine: Engine, knobs: Mapping[str, int], perfdb) -> ProviderPlan:
        """Build (and tune when ``knobs['global.benchmarking']``) a plan.

        Raises
        ------
        NotSupportedError (or another of DECLINE_TYPES)
            The engine declines after all (the next engine offered is tried).
        KnobError
            A knob value no algorithm satisfies (not a decline: it reaches the caller).
        """

    def offer(self, match) -> Engine:
        """The public ``Engine`` record for ``match`` (DECLINE_TYPES: not offered)."""
        return Engine(self.id, self.name, self.provider.name, tuple(self.knobs(match)),
                      self.notes)


@dataclass
class Provider(abc.ABC):
    """A source of engines for one device.

    ``ENGINES`` lists the provider's ``ProviderEngine`` classes, best first; ``engines``
    and ``build`` use them. (A provider may instead override both methods.)

    Attributes
    ----------
    name : str
        The provider (``"cpu"``, ``"cudnn"``), also the engines' ``provider``.
    spec : str
        The device it serves, as ``Device.spec`` reports it (``"cpu"``, ``"cuda:0"``).
    context : runtime.GpuContext or None
        The GPU's context (current device, streams, the tuning lock); None on the host.
    """

    name: str = field(default="", init=False)
    spec: str = field(default="", init=False)
    context: Any = field(default=None, init=False, repr=False, compare=False)
    ENGINES: ClassVar[tuple] = ()

    def _engine_impls(self) -> tuple:
        impls = self.__dict__.get("_impls")
        if impls is None or tuple(type(i) for i in impls) != tuple(self.ENGINES):
            impls = self.__dict__["_impls"] = tuple(cls(self) for cls in self.ENGINES)
        return impls

    def engines(self, match) -> list[Engine]:
        """Engines able to run ``match``, best first.

        Raises
        ------
        DeclinedError
            No engine takes the pattern; the message gives each engine's reason.
        """
        offered, declines = self.offers(match)
        if not offered:
            raise DeclinedError(f"{self.name}: no engine takes pattern {match.pattern.name}: "
                                + (_reasons(declines) or "the provider has no engines"),
                                declines=declines)
        return offered

    def offers(self, match) -> tuple[list[Engine], list[tuple[str, Exception]]]:
        """(engines offered for ``match``, best first; (name, error) of those that
        declined to be offered)."""
        offered, declines = [], []
        for impl in self._engine_impls():
            try:
                offered.append(_at_build(impl.offer, match))
            except DECLINE_TYPES as exc:
                declines.append((impl.name, exc))
        return offered, declines

    def build(self, match, engine: Engine, knobs: Mapping[str, int], perfdb) -> ProviderPlan:
        """Build (and tune when ``knobs['global.benchmarking']``) a plan with ``engine``
        (one that ``engines(match)`` offered); DECLINE_TYPES when the engine declines."""
        return _at_build(self.engine_impl(engine).build, match, engine, knobs, perfdb)

    def engine_impl(self, engine: Engine) -> ProviderEngine:
        """The ``ProviderEngine`` behind an offered ``Engine`` (NotSupportedError if none)."""
        for impl in self._engine_impls():
            if impl.id == engine.id:
                return impl
        raise NotSupportedError(f"{self.name}: engine {engine.name!r} is not one of this "
                                f"provider's ({', '.join(i.name for i in self._engine_impls())})")

    @abc.abstractmethod
    def binder(self, tensor, *, output: bool, filter: bool = False):
        """Return ``bind(buffer)``: check a variant-pack buffer against ``tensor`` (raising
        VariantPackError) and return what ``ProviderPlan.run`` takes for it. ``filter``: the
        tensor is a convolution's filter (w, dw), whose messages name dims K, C, [T,] R, S."""

    @abc.abstractmethod
    def bind_workspace(self, nbytes: int, given, *, where: str):
        """Return a workspace of ``nbytes`` for one execution: ``given`` checked (raising
        VariantPackError), or a fresh allocation when ``given`` is None."""

    @abc.abstractmethod
    def empty(self, dims, dtype, strides):
        """Allocate a device array (``runtime.DeviceArray`` or the provider's own);
        DeviceError when the memory cannot be had."""

    def describe(self) -> dict:
        """Device model, library versions and anything else that keys the perf db."""
        return {}

    def release_idle(self) -> None:
        """Free memory the provider keeps for reuse and no execution holds (a device's
        ``close`` calls it once its streams have drained); by default nothing."""


def _at_build(fn, *args):
    """``fn(*args)``, a vendor error raised as a build reports it (``VendorError.at_build``:
    a BAD_PARAM is the library's NotSupportedError naming the call)."""
    try:
        return fn(*args)
    except VendorError as exc:
        err = exc.at_build()
        if err is exc:
            raise
        raise err from exc
