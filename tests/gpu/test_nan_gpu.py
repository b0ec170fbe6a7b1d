"""NaN through the forward ReLU, per engine (issue 9 item 9): the documented behaviour
(docs/guide/graphs.md, each engine's ``notes``) is pinned on every device, for
every engine of its provider. Each engine's notes must say one of ``DOCUMENTED``'s phrases;
the outputs a NaN reaches must then be what the phrase says:

- ``CPU_ENGINE``: NaN propagates (runs here, unmarked).
- ``CUDNN_LEGACY_ENGINE``: cuDNN's activations run with CUDNN_NOT_PROPAGATE_NAN, so a NaN
  entering the ReLU comes out as 0 (GPU, marker gpu), except in the channels-last
  batchnorm training whose ReLU cuDNN fuses (plan.algorithm says "ReLU fused"): NaN
  propagates there, as its notes say.
- ``CUDNN_GRAPH_ENGINE``: its ReLU pointwise descriptors ask for PROPAGATE_NAN (GPU).

Cases: conv + bias + ReLU (fused RELU), the same with an upper clip (fused IDENTITY, then
the clipped activation), and batchnorm training + ReLU. A NaN is placed where it reaches a
known set of outputs; every other output must match the float64 reference.
"""
from __future__ import annotations

import numpy as np
import pytest

from oracle import _reference as ref
from oracle._cases import Harness, assert_close, tol

import hipdnn_async as hd

# the phrases an engine's notes use, and what a NaN entering its ReLU gives
DOCUMENTED = {"NaN propagates through ReLU": np.nan,
              "NaN entering a ReLU comes out as 0": 0.0}


def documented_nan(engine) -> float:
    """What ``engine``'s notes say a NaN entering a ReLU gives (AssertionError if they say
    nothing, or both)."""
    said = [value for words, value in DOCUMENTED.items() if words in engine.notes]
    assert len(said) == 1, f"engine {engine.name} does not state its NaN behaviour: {engine.notes}"
    return said[0]


def _targets():
    """(spec, engine name or None) for the CPU and every GPU device x engine."""
    from gpu.conftest import engine_names, gpu_specs
    specs = gpu_specs()
    out = [pytest.param(("cpu", None), id="cpu")]
    for spec in specs:
        out += [pytest.param((spec, name), id=f"{spec}-{name}", marks=pytest.mark.gpu)
                for name in engine_names(spec)]
    return out + ([] if specs else [pytest.param(None, id="no-gpu", marks=pytest.mark.gpu)])


def _conv_relu_case(layout, upper):
    """1x1 conv + bias + ReLU: a NaN at x[0, :, 1, 2] reaches exactly y[0, :, 1, 2]."""
    rng = np.random.default_rng(1)
    h = Harness("float32", layout, name=f"nan_conv_{layout}_{upper}")
    xv = rng.uniform(-1, 1, (2, 4, 3, 5))
    xv[0, 1, 1, 2] = np.nan
    x = h.input("x", xv)
    w = h.input("w", rng.uniform(-1, 1, (6, 4, 1, 1)))
    b = h.input("bias", rng.uniform(-0.5, 0.5, (1, 6, 1, 1)))
    y = h.g.conv_fprop(x, w, padding=0)
    y = h.g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
    y = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=0.0 if upper else None,
                      relu_upper_clip=upper)
    h.output(y, "y")
    r = h.ref
    want = ref.relu(ref.conv_fprop(r["x"], r["w"]) + r["bias"], 0.0 if upper else None, upper)
    hit = np.zeros(want.shape, bool)
    hit[0, :, 1, 2] = True
    return h, want, hit


def _bn_relu_case(layout):
    """Batchnorm training + ReLU: a NaN in channel 2 makes its mean NaN, so it reaches
    every output of channel 2."""
    rng = np.random.default_rng(2)
    h = Harness("float32", layout, name=f"nan_bn_{layout}")
    xv = rng.uniform(-1, 1, (2, 4, 3, 5))
    xv[1, 2, 0, 3] = np.nan
    x = h.input("x", xv)
    scale = h.float_input("scale", rng.uniform(0.5, 2, (1, 4, 1, 1)))
    bias = h.float_input("bias", rng.uniform(-1, 1, (1, 4, 1, 1)))
    y, *_ = h.g.batchnorm(x, scale, bias, epsilon=1e-5)
    h.output(h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD), "y")
    r = h.ref
    want = ref.relu(ref.bn_training(r["x"], r["scale"], r["bias"], 1e-5)["y"])
    hit = np.zeros(want.shape, bool)
    hit[:, 2] = True
    return h, want, hit


CASES = {"conv_bias_relu": lambda lay: _conv_relu_case(lay, None),
         "conv_bias_clipped_relu": lambda lay: _conv_relu_case(lay, 0.5),
         "bn_training_relu": _bn_relu_case}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("target", _targets())
def test_nan_through_relu_is_the_documented_behaviour(target, case, layout):
    if target is None:
        pytest.skip("no GPU runtime (CUDA/cuDNN or HIP/MIOpen) on this machine")
    spec, engine_name = target
    h, want, hit = CASES[case](layout)
    with hd.Device(spec) as dev:
        if engine_name is not None and engine_name not in [e.name for e in hd.engines(h.g, dev)]:
            pytest.skip(f"engine {engine_name} does not take {case} {layout} on {spec}")
        got = h.run(dev, engine=engine_name)["y"]
        engine = h.plan.engine
    value = documented_nan(engine)
    if "ReLU fused" in (h.plan.algorithm or "") and "ReLU fused" in engine.notes:
        value = np.nan       # the exception the legacy engine's notes state
    if np.isnan(value):
        assert np.isnan(got[hit]).all(), got[hit]
    else:
        np.testing.assert_array_equal(got[hit], value)
    atol, rtol = tol("conv_fprop" if case.startswith("conv") else "bn_training", "float32")
    assert_close(got[~hit], want[~hit], atol, rtol,
                 f"{spec} {engine.name} {case} {layout} (NaN-free outputs)")
