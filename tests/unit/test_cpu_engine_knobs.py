"""The seed's knobs on every CPU engine (tests/oracle/_cpu_engines.py): the
``global.workspace_size_limit`` range (default its maximum, every limit in range builds a
plan within it that computes the float64 reference, a limit outside is a KnobError) and
``global.benchmarking`` (timed once, then a perf-db hit in a new process, same choice)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hipdnn_async as hd
from oracle import _reference as R
from oracle._cases import Harness, assert_close, reduction_tol, wgrad_tol
from oracle._cpu_engines import ONEDNN, engine_names, require

BENCH, WS = "global.benchmarking", "global.workspace_size_limit"


@pytest.fixture(params=engine_names())
def engine(request):
    require(request.param)
    return request.param


def conv_graph(direction, layout="NHWC", dtype="float32"):
    """A 3x3 convolution (2x16x10x10, 16 filters, padding 1) in one direction."""
    f32 = hd.DataType.FLOAT
    g = hd.Graph(name=f"knobs_{direction}", io_data_type=dtype, intermediate_data_type=f32,
                 compute_data_type=f32)
    xd, wd = (2, 16, 10, 10), (16, 16, 3, 3)   # padding 1: y has x's dims

    def t(name, dims):
        return g.tensor(dims=dims, layout=layout, name=name)

    if direction == "fprop":
        g.conv_fprop(t("x", xd), t("w", wd), padding=1).set_output(True).set_name("out")
    elif direction == "dgrad":
        y = g.conv_dgrad(t("dy", xd), t("w", wd), dx_dims=xd, padding=1)
        y.set_output(True).set_name("out")
    else:
        y = g.conv_wgrad(t("dy", xd), t("x", xd), dw_dims=wd, padding=1)
        y.set_output(True).set_name("out")
    g.validate()
    return g


def conv_case(direction):
    """A Harness holding :func:`conv_graph`'s convolution (FLOAT NHWC) with U(-1, 1)
    inputs, and the float64 reference of its output with its (atol, rtol)."""
    rng = np.random.default_rng(0)
    h = Harness("float32", "NHWC", name=f"knobs_{direction}")
    xd, wd = (2, 16, 10, 10), (16, 16, 3, 3)
    if direction == "fprop":
        a, b = h.input("x", rng.uniform(-1, 1, xd)), h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_fprop(a, b, padding=1), "out")
        return h, R.conv_fprop(h.ref["x"], h.ref["w"], (1, 1), (1, 1)), reduction_tol(
            "conv_fprop", "float32", 16 * 9)
    if direction == "dgrad":
        a, b = h.input("dy", rng.uniform(-1, 1, xd)), h.input("w", rng.uniform(-1, 1, wd))
        h.output(h.g.conv_dgrad(a, b, dx_dims=xd, padding=1), "out")
        return h, R.conv_dgrad(h.ref["dy"], h.ref["w"], xd, (1, 1), (1, 1)), reduction_tol(
            "conv_dgrad", "float32", 16 * 9)
    a, b = h.input("dy", rng.uniform(-1, 1, xd)), h.input("x", rng.uniform(-1, 1, xd))
    h.output(h.g.conv_wgrad(a, b, dw_dims=wd, padding=1), "out")
    return h, R.conv_wgrad(h.ref["dy"], h.ref["x"], wd, (1, 1), (1, 1)), wgrad_tol(
        "float32", 2 * 100, 1.0, 1.0)


def _knobs(g, engine):
    (e,) = [e for e in hd.engines(g, "cpu") if e.name == engine]
    return {k.id: k for k in e.knobs}


@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_workspace_limit_range_on_engine(engine, direction):
    h, want, limits = conv_case(direction)
    knobs = _knobs(h.g, engine)
    assert BENCH in knobs and (knobs[BENCH].min, knobs[BENCH].max) == (0, 1)
    ws = knobs[WS]
    assert 0 <= ws.min <= ws.max and ws.default == ws.max, ws
    with hd.Device("cpu") as dev:
        for limit in sorted({ws.min, (ws.min + ws.max) // 2, ws.max}):
            for bench in (0, 1):
                got = h.run(dev, engine=engine, knobs={WS: limit, BENCH: bench})["out"]
                assert h.plan.engine.name == engine
                assert h.plan.workspace_size <= limit, (limit, h.plan.workspace_size)
                assert_close(got, want, *limits,
                             f"{engine} {direction} limit {limit} benchmarking {bench}")
        for bad in ([ws.min - 1] if ws.min > 0 else []) + [ws.max + 1]:
            with pytest.raises(hd.KnobError, match="outside"):
                dev.build_sync(h.g, engine=engine, knobs={WS: bad})


SCRIPT = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[2])
    import hipdnn_async as hd
    from unit.test_cpu_engine_knobs import conv_graph
    out = {}
    with hd.Device("cpu") as dev:
        for direction in ("fprop", "wgrad"):
            p = dev.build_sync(conv_graph(direction), engine=sys.argv[1],
                               knobs={"global.benchmarking": 1})
            out[direction] = {"benchmarked": p.benchmarked, "hit": p.perfdb_hit,
                              "algo": str(getattr(p.algorithm, "name", p.algorithm)),
                              "engine": p.engine.name}
    out["runs"] = hd.stats()["benchmarks_run"]
    print(json.dumps(out))
""")


def test_benchmarking_then_perfdb_hit_in_a_new_process(engine, tmp_path):
    """global.benchmarking = 1 times the candidates once; a new process with the same
    perf db builds the same choice without timing."""
    tests_dir = os.path.join(os.path.dirname(__file__), "..")
    env = dict(os.environ, HIPDNN_ASYNC_PERFDB=str(tmp_path / "shared.sqlite3"))
    env.pop("HIPDNN_ASYNC_FORCE_BENCHMARKING", None)
    runs = [json.loads(subprocess.run(
        [sys.executable, "-c", SCRIPT, engine, tests_dir], env=env, check=True,
        capture_output=True, text=True, timeout=300).stdout.strip().splitlines()[-1])
        for _ in range(2)]
    first, second = runs
    assert first["runs"] == 2 and second["runs"] == 0, runs
    for direction in ("fprop", "wgrad"):
        a, b = first[direction], second[direction]
        assert a["engine"] == b["engine"] == engine
        assert a["benchmarked"] and not a["hit"], a
        assert b["hit"] and not b["benchmarked"], b
        assert a["algo"] == b["algo"], (a, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", ["fprop", "dgrad", "wgrad"])
def test_onednn_convolutions_avoid_the_reference_implementation(direction, layout, dtype):
    """oneDNN's reference implementation (``ref:any``) is 1,000-5,000x slower than its
    JIT kernels; plain-layout weights send every convolution there. On x86-64 (where
    oneDNN has JIT kernels for FLOAT and BFLOAT16) no 3x3 16->16 convolution may run it."""
    require(ONEDNN)
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"oneDNN's JIT kernels are x86-64's; this is {platform.machine()}")
    with hd.Device("cpu") as dev:
        plan = dev.build_sync(conv_graph(direction, layout, dtype), engine=ONEDNN)
    name = str(getattr(plan.algorithm, "name", plan.algorithm))
    assert name and not name.startswith("ref") and "ref:" not in name, plan.algorithm
