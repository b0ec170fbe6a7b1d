"""runtime._onednn: the load record, the status table as typed errors (a real oneDNN
refusal at build declines), and a Program against NumPy (a reorder is a transpose)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from hipdnn_async import _errors
from hipdnn_async.runtime import load_onednn

state = load_onednn()
pytestmark = pytest.mark.skipif(not state.ok, reason=f"oneDNN does not load here: {state.reason}")


@pytest.fixture
def dnnl():
    from hipdnn_async.runtime import _onednn
    return _onednn


def test_load_record_names_path_version_isa_threads(dnnl):
    rec = dnnl.loaded()
    assert rec is state.record and rec.path.endswith("libdnnl.so.3") and rec.name == "onednn"
    major, minor, patch, _git, runtime = dnnl.version()
    assert (major, minor, patch) >= dnnl.MIN_VERSION and rec.version == major * 10000 + minor * 100 + patch
    assert state.isa == dnnl.isa_name(dnnl.effective_isa()) in dnnl.ISA_NAMES.values()
    assert runtime in dnnl.RUNTIME_NAMES.values()
    assert state.threads == dnnl.max_threads() >= 1


def test_every_status_maps_to_a_typed_error(dnnl):
    assert set(dnnl.STATUS) == set(range(1, 11))
    for status, (name, cls) in dnnl.STATUS.items():
        assert name.startswith("dnnl_") and issubclass(cls, _errors.OnednnError)
    assert issubclass(dnnl.STATUS[dnnl.STATUS_UNIMPLEMENTED][1], _errors.DECLINE_TYPES)
    assert dnnl.STATUS[dnnl.STATUS_INVALID_ARGUMENTS][1] is _errors.OnednnBadParamError


def test_invalid_arguments_at_build_declines_naming_the_call(dnnl):
    x = dnnl.MemoryDesc((1, 8, 4, 4), dnnl.DATA_F32, strides=(128, 16, 4, 1))
    w = dnnl.MemoryDesc((4, 3, 1, 1), dnnl.DATA_F32, tag=dnnl.FORMAT_TAG_ANY)   # 3 != 8 channels
    y = dnnl.MemoryDesc((1, 4, 4, 4), dnnl.DATA_F32, strides=(64, 16, 4, 1))
    with pytest.raises(_errors.OnednnBadParamError) as ei:
        dnnl.conv_forward(dnnl.PROP_FORWARD_INFERENCE, x, w, None, y, (1, 1), (0, 0), (0, 0), (0, 0))
    err = ei.value
    assert err.call == "dnnl_convolution_forward_primitive_desc_create"
    assert err.status == dnnl.STATUS_INVALID_ARGUMENTS and err.status_name == "dnnl_invalid_arguments"
    declined = err.at_build()
    assert isinstance(declined, _errors.OnednnNotSupportedError)
    assert isinstance(declined, _errors.DECLINE_TYPES) and declined.call == err.call
    again = pickle.loads(pickle.dumps(declined))
    assert type(again) is type(declined) and again.status == err.status


def test_a_reorder_program_is_a_transpose(dnnl):
    dims = (2, 3, 4, 5)
    nchw = dnnl.MemoryDesc(dims, dnnl.DATA_F32, strides=(60, 20, 5, 1))
    nhwc = dnnl.MemoryDesc(dims, dnnl.DATA_F32, strides=(60, 1, 15, 3))
    pd = dnnl.reorder(nchw, nhwc)
    pad = pd.scratchpad_size
    prog = dnnl.Program([(nchw, dnnl.MEM_ARRAY, 0), (nhwc, dnnl.MEM_ARRAY, 1)],
                        [(dnnl.Primitive(pd), [(dnnl.ARG_SRC, 0), (dnnl.ARG_DST, 1)])], 2,
                        pad)
    src = np.arange(120, dtype=np.float32).reshape(dims)
    for k in range(2):                      # handles change between runs
        dst = np.zeros((2, 4, 5, 3), np.float32)
        prog.run((src + k, dst), np.empty(pad, np.uint8) if pad else None)
        assert np.array_equal(dst, (src + k).transpose(0, 2, 3, 1))
    with pytest.raises(ValueError):
        prog.run((src,), None)
    with pytest.raises(TypeError):
        prog.run((src, [1, 2]), None)
    prog.close()


def test_a_repeated_step_runs_on_consecutive_slices_of_the_batch(dnnl):
    # a reorder made for 1 image of 4, repeated 4 times, each time 1 image further into
    # both arrays: the whole batch transposed, and a step outside the repeat (a second
    # transposition of another pair) runs once
    one, four = (1, 3, 4, 5), (4, 3, 4, 5)
    nchw = dnnl.MemoryDesc(one, dnnl.DATA_F32, strides=(60, 20, 5, 1))
    nhwc = dnnl.MemoryDesc(one, dnnl.DATA_F32, strides=(60, 1, 15, 3))
    pd = dnnl.reorder(nchw, nhwc)
    assert pd.scratchpad_size == 0
    prim = dnnl.Primitive(pd)
    mems = [(nchw, dnnl.MEM_ARRAY, 0), (nhwc, dnnl.MEM_ARRAY, 1),
            (nchw, dnnl.MEM_ARRAY, 2), (nhwc, dnnl.MEM_ARRAY, 3)]
    steps = [(prim, [(dnnl.ARG_SRC, 2), (dnnl.ARG_DST, 3)]),
             (prim, [(dnnl.ARG_SRC, 0), (dnnl.ARG_DST, 1)])]
    prog = dnnl.Program(mems, steps, 4, 0, repeat=(1, 2, 4, [240, 240, 0, 0]))
    rng = np.random.default_rng(0)
    for _ in range(2):                      # the handles go back to slice 0 on a new run
        src = rng.standard_normal(four).astype(np.float32)
        other = rng.standard_normal(one).astype(np.float32)
        dst = np.full((4, 4, 5, 3), np.nan, np.float32)
        other_dst = np.full((1, 4, 5, 3), np.nan, np.float32)
        prog.run((src, dst, other, other_dst), None)
        assert np.array_equal(dst, src.transpose(0, 2, 3, 1))
        assert np.array_equal(other_dst, other.transpose(0, 2, 3, 1))
    prog.close()


@pytest.mark.parametrize("repeat, message", [
    ((0, 1, 2, [240, 0]), "not a user array"),
    ((0, 0, 2, [240, 0, 0]), "advanced in the repeated steps"),
    ((0, 2, 2, [0, 0, 0]), "out of 1 steps"),
    ((0, 1, 0, [0, 0, 0]), "repeat count 0"),
    ((0, 1, 2, [0]), "byte steps for 3 memories"),
])
def test_a_repeat_that_could_misuse_a_memory_is_refused(dnnl, repeat, message):
    one = (1, 3, 4, 5)
    nchw = dnnl.MemoryDesc(one, dnnl.DATA_F32, strides=(60, 20, 5, 1))
    nhwc = dnnl.MemoryDesc(one, dnnl.DATA_F32, strides=(60, 1, 15, 3))
    prim = dnnl.Primitive(dnnl.reorder(nchw, nhwc))
    first, last, count, steps = repeat
    if len(steps) == 2:             # memory 1 a workspace piece, advanced: refused
        mems = [(nchw, dnnl.MEM_ARRAY, 0), (nhwc, dnnl.MEM_WORKSPACE, 0)]
        steps = [0, 240]
    else:
        mems = [(nchw, dnnl.MEM_ARRAY, 0), (nhwc, dnnl.MEM_ARRAY, 1), (nhwc, dnnl.MEM_ARRAY, 1)]
    with pytest.raises(ValueError, match=message):
        dnnl.Program(mems, [(prim, [(dnnl.ARG_SRC, 0), (dnnl.ARG_DST, 1)])], 2, 240,
                     repeat=(first, last, count, steps))


@pytest.mark.parametrize("repeat, message", [
    ((0, 1, 2, [-240, 0]), "steps are >= 0"),               # a slice before the array
    ((0, 1, 2, [1 << 62, 0]), "span at most"),
    ((0, 1, 1 << 31, [0, 0]), "repeat count"),
    ((0, 1, 2.5, [0, 0]), "integer"),
    ((0, 1, 2, ["240", 0]), "integer"),
    ((0, 1, float("inf"), [0, 0]), "integer"),
])
def test_a_repeat_of_a_wrong_kind_or_size_is_a_value_error(dnnl, repeat, message):
    # (break-it round: these crashed, corrupted the heap or raised OverflowError)
    one = (1, 3, 4, 5)
    nchw = dnnl.MemoryDesc(one, dnnl.DATA_F32, strides=(60, 20, 5, 1))
    nhwc = dnnl.MemoryDesc(one, dnnl.DATA_F32, strides=(60, 1, 15, 3))
    prim = dnnl.Primitive(dnnl.reorder(nchw, nhwc))
    with pytest.raises(ValueError, match=message):
        dnnl.Program([(nchw, dnnl.MEM_ARRAY, 0), (nhwc, dnnl.MEM_ARRAY, 1)],
                     [(prim, [(dnnl.ARG_SRC, 0), (dnnl.ARG_DST, 1)])], 2, 0, repeat=repeat)
