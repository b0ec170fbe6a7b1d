"""What streams need, declared as data and created by the runtime (``runtime._stream_prep``).

A provider registers a ``StreamNeeds`` (a handle kind, a reserved workspace) and plans a
``HandleWork`` (a named per-handle call); ``GpuContext`` creates them on streams open now
and opened later, under each stream's launch lock, and skips closed streams. These tests
drive a ``GpuContext`` on a host-only fake runtime with a fake handle kind that records
the streams it was made for.
"""
from __future__ import annotations

import gc
import itertools
import threading

import pytest

from hipdnn_async._errors import ExecutionError
from hipdnn_async.runtime import _stream_prep
from hipdnn_async.runtime._gpu_device import GpuContext, LaunchContext


class _Runtime:
    """The runtime calls a GpuContext and stream workspaces make, on the host."""

    def __init__(self):
        self._ptrs = itertools.count(0x1000, 0x1000)
        self.allocs: list[tuple[int, int]] = []     # (nbytes, stream)
        self.frees: list[int] = []

    get_device = lambda self: 0                    # noqa: E731
    set_device = lambda self, index: None          # noqa: E731
    device_name = arch_name = lambda self, index: "fake"
    compute_capability = lambda self, index: (9, 0)
    multiprocessor_count = lambda self, index: 1
    memory_pools_supported = lambda self, index: True
    pool_keep_memory = lambda self, index: None
    stream_create = lambda self, flags=0: 0x7      # noqa: E731 - the copy stream

    def malloc_async(self, nbytes, stream):
        self.allocs.append((nbytes, stream))
        return next(self._ptrs)

    def free(self, ptr, stream, pooled):
        self.frees.append(ptr)


class _Handle:
    def __init__(self, stream, made):
        self.ptr = 0x100 + stream
        self.closed = False
        made.append(stream)

    def close(self):
        self.closed = True


@pytest.fixture
def ctx(monkeypatch):
    made: list[int] = []
    monkeypatch.setitem(_stream_prep.HANDLE_KINDS, "fake", lambda s: _Handle(s, made))
    monkeypatch.setitem(_stream_prep.HANDLE_CALLS, "fake.compile",
                        lambda handle, tag: (tag, handle))
    c = GpuContext(0, _Runtime())
    c.made = made
    return c


def _open(ctx, stream):
    lc = LaunchContext(stream, ctx)
    ctx.open_stream(lc, threading.Lock())
    return lc


def test_streams_open_before_and_after_the_declaration_get_a_handle_and_the_workspace(ctx):
    early = _open(ctx, 1)
    needs = _stream_prep.StreamNeeds(ctx, "k", "fake")
    assert ctx.made == [1]                               # the open stream: now
    needs.reserve(256)
    late = _open(ctx, 2)
    assert ctx.made == [1, 2]                            # a later one: at its start
    for lc in (early, late):
        res = lc.resources["k"]
        assert res.handle == 0x100 + lc.stream and res.workspace_size == 256
    needs.reserve(100)                                   # smaller: nothing moves
    needs.reserve(1024)                                  # larger: every stream grows
    assert [r for r in ctx.runtime.allocs if r[0] == 1024] == [(1024, 1), (1024, 2)]
    assert needs.reserved == 1024


def test_two_declarations_of_one_key_share_the_handle_and_take_the_larger_workspace(ctx):
    a = _stream_prep.StreamNeeds(ctx, "k", "fake")
    b = _stream_prep.StreamNeeds(ctx, "k", "fake")
    a.reserve(64)
    b.reserve(512)
    lc = _open(ctx, 3)
    assert ctx.made == [3] and lc.resources["k"].workspace_size == 512


def test_a_closed_stream_is_left_out_and_a_dropped_declaration_prepares_nothing(ctx):
    needs = _stream_prep.StreamNeeds(ctx, "k", "fake")
    lc = _open(ctx, 1)
    ctx.close_stream(lc)
    needs.reserve(128)
    assert lc.resources["k"].workspace_size == 0        # closed: not grown
    del needs
    gc.collect()
    late = _open(ctx, 2)
    assert late.resources == {} and ctx.made == [1]     # held weakly: gone with its owner


def test_handle_work_runs_on_every_streams_handle_and_keeps_results_per_handle(ctx):
    needs = _stream_prep.StreamNeeds(ctx, "k", "fake")
    early = _open(ctx, 1)
    work = _stream_prep.HandleWork("k", "fake.compile", ("conv",), "ConvPlan")
    assert work.prepare(0x55) == ("conv", 0x55)         # the build handle, by the provider
    needs.prepare_handles(work)
    late = _open(ctx, 2)
    for lc in (early, late):
        h = lc.resources["k"].handle
        assert work.state(h) == ("conv", h)
    with pytest.raises(ExecutionError, match=r"ConvPlan: k handle 0x99 was not prepared"):
        work.state(0x99)
    other = _stream_prep.HandleWork("other", "fake.compile", ("x",), "P")
    ctx.add_handle_work(other)                           # a key no stream has: nothing
    assert other.results == {}
    assert needs.reserved == 0


def test_unknown_kinds_and_calls_are_refused_before_anything_is_made(ctx):
    with pytest.raises(ValueError, match="unknown DNN handle kind 'nope'"):
        _stream_prep.StreamNeeds(ctx, "k", "nope")
    with pytest.raises(ValueError, match="unknown per-handle call 'nope'"):
        _stream_prep.HandleWork("k", "nope", (), "P")
    # the context takes the two records only: a callback is no declaration
    with pytest.raises(TypeError, match="apply_needs takes a StreamNeeds, not function"):
        ctx.apply_needs(lambda lc: None)
    with pytest.raises(TypeError, match="add_handle_work takes a HandleWork, not function"):
        ctx.add_handle_work(lambda lc: None)
    assert ctx.made == []


def test_a_failing_creation_leaves_the_stream_out_of_later_rounds(ctx, monkeypatch):
    needs = _stream_prep.StreamNeeds(ctx, "k", "fake")

    def refuse(stream):
        raise RuntimeError("no handle")
    monkeypatch.setitem(_stream_prep.HANDLE_KINDS, "fake", refuse)
    lc = LaunchContext(4, ctx)
    with pytest.raises(RuntimeError, match="no handle"):
        ctx.open_stream(lc, threading.Lock())
    needs.reserve(64)                                    # would fail again if it were in
    assert lc.resources == {}
