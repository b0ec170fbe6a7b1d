"""HALF (float16 I/O) convolutions on ONEDNN_ENGINE: float32 primitives on float32 workspace
copies that the engine converts in and out (``_kernels.convert``), with no oneDNN reorder
between float16 and float32 in any implementation's program; results equal to the float32
plan's on the same float16-representable inputs, rounded once to float16 (NumPy's
``astype``), and to the float64 reference.

Skipped where oneDNN does not load."""
from __future__ import annotations

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.runtime import load_onednn
from oracle import _reference as ref
from oracle._cases import alloc

pytestmark = pytest.mark.skipif(not load_onednn().ok,
                                reason=f"oneDNN does not load here: {load_onednn().reason}")

ONEDNN = "ONEDNN_ENGINE"
F32, F16 = hd.DataType.FLOAT, hd.DataType.HALF


@pytest.fixture(scope="module")
def dev():
    with hd.Device("cpu") as d:
        yield d


def _graph(direction, dtype, layout, x_dims, w_dims, pad, relu=False):
    """(graph, {name: tensor}) of one convolution (relu: conv + bias + ReLU, FLOAT bias)."""
    g = hd.Graph(name=f"half_{direction}", io_data_type=dtype,
                 intermediate_data_type=F32, compute_data_type=F32)
    probe = hd.Graph()
    y_dims = tuple(probe.conv_fprop(probe.tensor(dims=x_dims), probe.tensor(dims=w_dims),
                                    padding=pad).dims)
    t = {}
    if direction == "fprop":
        t["x"] = g.tensor(dims=x_dims, layout=layout, name="x")
        t["w"] = g.tensor(dims=w_dims, layout=layout, name="w")
        y = g.conv_fprop(t["x"], t["w"], padding=pad)
        if relu:
            t["b"] = g.tensor(dims=(1, w_dims[0], 1, 1), name="b", data_type="float32")
            y = g.pointwise(g.pointwise(y, t["b"], mode=hd.PointwiseMode.ADD),
                            mode=hd.PointwiseMode.RELU_FWD)
        t["y"] = y
    elif direction == "dgrad":
        t["dy"] = g.tensor(dims=y_dims, layout=layout, name="dy")
        t["w"] = g.tensor(dims=w_dims, layout=layout, name="w")
        t["dx"] = g.conv_dgrad(t["dy"], t["w"], dx_dims=x_dims, padding=pad)
    else:
        t["dy"] = g.tensor(dims=y_dims, layout=layout, name="dy")
        t["x"] = g.tensor(dims=x_dims, layout=layout, name="x")
        t["dw"] = g.conv_wgrad(t["dy"], t["x"], dw_dims=w_dims, padding=pad)
    out = {"fprop": "y", "dgrad": "dx", "wgrad": "dw"}[direction]
    t[out].set_output(True).set_name(out)
    return g, t, out


CASES = [("fprop", False), ("fprop", True), ("dgrad", False), ("wgrad", False)]
IDS = ["fprop", "conv_bias_relu", "dgrad", "wgrad"]
SHAPES = {"dense": ((2, 16, 9, 9), (16, 16, 3, 3)),
          "groups": ((2, 8, 7, 6), (6, 4, 3, 3))}          # 2 groups: (G, K/G, C/G, 3, 3)


def _provider_plan(plan):
    return plan._pplan          # the OnednnPlan (white box: its Conv and implementation)


@pytest.mark.parametrize("direction,relu", CASES, ids=IDS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_no_onednn_reorder_between_float16_and_float32(dev, direction, relu, layout, shape):
    """Every implementation's program (the default and every benchmarking candidate) runs
    float32 memories only: the float16 arrays are converted by the engine's hooks, from
    and into named workspace copies that the plan's workspace holds."""
    g, t, out = _graph(direction, F16, layout, *SHAPES[shape], 1, relu)
    plan = dev.build_sync(g, engine=ONEDNN)
    assert "+f32" in str(plan.algorithm)
    conv = _provider_plan(plan)._conv
    dnnl = pytest.importorskip("hipdnn_async.runtime._onednn")
    for name, pd, ws, variant in conv.impls:
        program, spec = conv.program(pd, variant=variant)
        try:
            # the float16 user memories: no oneDNN step reads or writes them
            user16 = {i for i, (_, kind, ref) in enumerate(spec.mems)
                      if kind == dnnl.MEM_ARRAY and spec.roles[ref] != conv.bias_role}
            for (_, args), step in zip(spec.steps, spec.names):
                touched = {i for _, i in args} & user16
                assert not touched, f"{name}: step {step} takes float16 memories {touched}"
                # the descriptors that tell their type (plain ones) are all float32
                types = {spec.mems[i][0].data_type for a, i in args
                         if a != dnnl.ARG_SCRATCHPAD} - {0}
                assert types <= {dnnl.DATA_F32}, f"{name}: step {step} has {types}"
            inputs = {"fprop": {"x", "w"}, "dgrad": {"dy", "w"}, "wgrad": {"dy", "x"}}
            assert set(spec.convert_in) == inputs[direction]
            assert set(spec.convert_out) == {out}
            for r in set(spec.convert_in) | set(spec.convert_out):
                assert spec.mems[spec.index["f32:" + r]][0].data_type == dnnl.DATA_F32
            assert ws == program.workspace_size >= sum(
                4 * np.prod(t[r].dims) for r in inputs[direction] | {out})
        finally:
            program.close()


def _inputs(t, direction, layout, seed):
    """float16-representable U(-1, 1) inputs (a NaN and an inf among them for fprop)."""
    rng = np.random.default_rng(seed)
    names = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}[direction]
    vals = {}
    for n in names:
        v = rng.uniform(-1, 1, t[n].dims).astype(np.float16)
        vals[n] = v
    if direction == "fprop":
        vals["x"][0, 0, 0, 0], vals["x"][1, 1, 4, 4] = np.nan, np.inf
    if "b" in t:
        vals["b"] = rng.uniform(-0.5, 0.5, t["b"].dims).astype(np.float32)
    return vals


def _run(dev, direction, relu, layout, shape, dtype, vals):
    g, t, out = _graph(direction, dtype, layout, *SHAPES[shape], 1, relu)
    plan = dev.build_sync(g, engine=ONEDNN)
    npdt = np.float16 if dtype == F16 else np.float32
    pack = {}
    for n, v in vals.items():
        a = alloc(t[n].dims, t[n].strides, v.dtype if n == "b" else npdt)
        a[...] = v
        pack[t[n]] = a
    res = alloc(t[out].dims, t[out].strides, npdt)
    res[...] = np.nan
    pack[t[out]] = res
    plan.execute_sync(pack)
    return res, plan


@pytest.mark.parametrize("direction,relu", CASES, ids=IDS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_half_equals_float32_rounded_once(dev, direction, relu, layout, shape):
    """The HALF plan computes what the float32 plan computes on the same inputs, rounded
    once to float16; both within rounding of the float64 reference."""
    g, t, _ = _graph(direction, F16, layout, *SHAPES[shape], 1, relu)
    vals = _inputs(t, direction, layout, 11)
    half, hplan = _run(dev, direction, relu, layout, shape, F16, vals)
    full, fplan = _run(dev, direction, relu, layout, shape, F32, vals)
    with np.errstate(all="ignore"):
        want16 = full.astype(np.float16)
    assert np.array_equal(np.isnan(half), np.isnan(want16))
    # one kernel (the same implementation and layout variant) on the same float32 values:
    # the same sums
    assert str(hplan.algorithm).replace("+f32", "", 1) == str(fplan.algorithm)
    ok = ~np.isnan(half)
    assert np.array_equal(half.view(np.uint16)[ok], want16.view(np.uint16)[ok])
    x_dims, w_dims = SHAPES[shape]
    f64 = {k: v.astype(np.float64) for k, v in vals.items()}
    with np.errstate(all="ignore"):
        if direction == "fprop":
            want = ref.conv_fprop(f64["x"], f64["w"], (1, 1), (1, 1))
            if relu:
                want = ref.relu(want + f64["b"])
        elif direction == "dgrad":
            want = ref.conv_dgrad(f64["dy"], f64["w"], x_dims, (1, 1), (1, 1))
        else:
            want = ref.conv_wgrad(f64["dy"], f64["x"], w_dims, (1, 1), (1, 1))
    ok = np.isfinite(want)
    assert np.array_equal(np.isnan(half), np.isnan(want))
    got = half.astype(np.float64)
    assert np.all(np.abs(got[ok] - want[ok]) <= 2e-3 * (1 + np.abs(want[ok])))
    if relu:
        assert not np.signbit(got[ok]).any()                 # RELU_FWD: no -0.0


def test_benchmarking_times_the_conversions(dev, monkeypatch):
    """With benchmarking, each candidate is timed as the plan it would be: its float16
    conversions (x and w in, y out) run in every timed call."""
    from hipdnn_async.providers.cpu import _kernels
    calls, real = [], _kernels.convert

    def convert(*a, **k):
        calls.append(a[0].shape)
        return real(*a, **k)
    monkeypatch.setattr(_kernels, "convert", convert)
    g, t, _ = _graph("fprop", F16, "NCHW", (2, 16, 12, 12), (16, 16, 3, 3), 1)
    plan = dev.build_sync(g, engine=ONEDNN, knobs={"global.benchmarking": 1})
    assert plan.benchmarked and len(plan.algorithm.trials) > 1
    timed = [ms for _, ms in plan.algorithm.trials if ms is not None]
    # each timed candidate ran at least twice (warm-up and one timed call), 3 conversions each
    assert len(calls) >= 3 * 2 * len(timed), (len(calls), len(timed))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_workspace_limit_counts_the_float32_copies(dev, layout):
    """The workspace-limit knob ranges over the HALF candidates with their float32 copies
    counted: a plan built at either end fits it, holds at least the copies of x and y, and
    computes the float64 reference's values."""
    g, t, out = _graph("fprop", F16, layout, (2, 16, 9, 9), (16, 16, 3, 3), 1)
    knob = hd.engines(g, "cpu")[0].knob("global.workspace_size_limit")
    copies = 4 * (np.prod(t["x"].dims) + np.prod(t["y"].dims))
    assert knob.min >= copies
    vals = _inputs(t, "fprop", layout, 3)
    vals["x"][0, 0, 0, 0] = vals["x"][1, 1, 4, 4] = 0.5
    for limit in (knob.min, knob.max):
        plan = dev.build_sync(g, engine=ONEDNN, knobs={"global.workspace_size_limit": limit})
        assert copies <= plan.workspace_size <= limit
        pack = {t[n]: alloc(t[n].dims, t[n].strides, np.float16) for n in ("x", "w", "y")}
        for n in ("x", "w"):
            pack[t[n]][...] = vals[n]
        plan.execute_sync(pack)
        want = ref.conv_fprop(vals["x"].astype(np.float64), vals["w"].astype(np.float64),
                              (1, 1), (1, 1))
        got = pack[t["y"]].astype(np.float64)
        assert np.all(np.abs(got - want) <= 2e-3 * (1 + np.abs(want)))


MIXED = [("fprop", (F16, F32, F16)), ("fprop", (F16, F16, F32)), ("fprop", (F32, F32, F16)),
         ("dgrad", (F16, F32, F16)), ("dgrad", (F32, F32, F16)), ("dgrad", (F16, F16, F32)),
         ("wgrad", (F32, F16, F32)), ("wgrad", (F16, F16, F32)), ("wgrad", (F16, F32, F16))]


@pytest.mark.parametrize("direction,types", MIXED,
                         ids=["-".join(t.name[0] for t in ty) + "-" + d for d, ty in MIXED])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_mixed_half_and_float_io(dev, direction, types, layout):
    """Per-tensor data types (the two inputs and the output, in the direction's order:
    fprop x, w, y; dgrad dy, w, dx; wgrad dy, x, dw) mixing HALF and FLOAT: only the
    HALF ones are converted, the FLOAT ones read and written as they are; the float64
    reference's values."""
    names = {"fprop": ("x", "w", "y"), "dgrad": ("dy", "w", "dx"),
             "wgrad": ("dy", "x", "dw")}[direction]
    x_dims, w_dims = (2, 8, 7, 7), (8, 8, 3, 3)
    dims = {"x": x_dims, "w": w_dims, "dy": x_dims, "y": x_dims, "dx": x_dims, "dw": w_dims}
    g = hd.Graph(name="mixed", io_data_type=F32, intermediate_data_type=F32,
                 compute_data_type=F32)
    t = {n: g.tensor(dims=dims[n], layout=layout, name=n, data_type=ty)
         for n, ty in zip(names[:2], types[:2])}
    if direction == "fprop":
        out = g.conv_fprop(t["x"], t["w"], padding=1)
    elif direction == "dgrad":
        out = g.conv_dgrad(t["dy"], t["w"], dx_dims=x_dims, padding=1)
    else:
        out = g.conv_wgrad(t["dy"], t["x"], dw_dims=w_dims, padding=1)
    t[names[2]] = out.set_output(True).set_name(names[2]).set_data_type(types[2])
    plan = dev.build_sync(g, engine=ONEDNN)
    rng = np.random.default_rng(4)
    vals = {n: rng.uniform(-1, 1, dims[n]).astype(np.float16) for n in names[:2]}
    pack = {}
    for n, ty in zip(names, types):
        pack[t[n]] = alloc(dims[n], t[n].strides, np.float16 if ty == F16 else np.float32)
        if n in vals:
            pack[t[n]][...] = vals[n]
    plan.execute_sync(pack)
    a, b = (vals[n].astype(np.float64) for n in names[:2])
    want = {"fprop": lambda: ref.conv_fprop(a, b, (1, 1), (1, 1)),
            "dgrad": lambda: ref.conv_dgrad(a, b, x_dims, (1, 1), (1, 1)),
            "wgrad": lambda: ref.conv_wgrad(a, b, w_dims, (1, 1), (1, 1))}[direction]()
    got = pack[t[names[2]]].astype(np.float64)
    assert np.all(np.abs(got - want) <= 2e-3 * (1 + np.abs(want)))
