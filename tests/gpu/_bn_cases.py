"""Batchnorm cases shared by tests/gpu/test_bn_gpu.py and the fake-runtime unit tests
(tests/unit/providers/gpu/): each builds a graph on a ``Harness`` and returns the
float64 reference values to check (tests/oracle/_reference.py)."""
from __future__ import annotations

import numpy as np

from oracle import _reference as ref
from oracle._cases import Harness, tol

import hipdnn_async as hd


def bn_training_case(dtype, layout, *, relu=False, virtual=("mean", "inv_variance"),
                     running=True, seed=0):
    """A Harness with batchnorm training (+ ReLU) whose ``virtual`` statistics are left
    virtual; returns (harness, checks against the float64 reference)."""
    rng = np.random.default_rng(seed)
    h = Harness(dtype, layout, name=f"bn_virtual_{dtype}_{layout}")
    dims, cs = (4, 8, 5, 6), (1, 8, 1, 1)
    eps, momentum = 1e-5, 0.1
    x = h.input("x", rng.uniform(-1, 1, dims) * 2 + 0.3)
    scale = h.float_input("scale", rng.uniform(0.5, 2, cs))
    bias = h.float_input("bias", rng.uniform(-1, 1, cs))
    kw = {}
    if running:
        kw = dict(momentum=momentum, prev_running_mean=h.float_input("prm", rng.uniform(-1, 1, cs)),
                  prev_running_variance=h.float_input("prv", rng.uniform(0.5, 2, cs)))
    y, mean, inv, nrm, nrv = h.g.batchnorm(x, scale, bias, epsilon=eps, **kw)
    if relu:
        y = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD)
    h.output(y, "y")
    r = h.ref
    want = ref.bn_training(r["x"], r["scale"], r["bias"], eps, momentum if running else None,
                           r.get("prm"), r.get("prv"))
    if relu:
        want["y"] = ref.relu(want["y"])
    checks = [("y", want["y"], tol("bn_training", dtype))]
    tf = tol("bn_training", "float32")
    for t, name in ((mean, "mean"), (inv, "inv_variance")):
        if name not in virtual:
            h.output(t, name, dtype="float32")
            checks.append((name, want[name], tf))
    if running:
        h.output(nrm, "next_running_mean", dtype="float32")
        h.output(nrv, "next_running_variance", dtype="float32")
        checks += [(k, want[k], tf) for k in ("next_running_mean", "next_running_variance")]
    return h, checks


def drelu_boundary_case(dtype, layout, *, upper=0.5, seed=0):
    """BN inference -> DReLU (clip at ``upper``) -> BN backward where many z =
    k*(x - mean) + bias land just below the clip, within half a bf16 step of it: z kept
    in FLOAT passes dy there, z rounded to bf16 reaches the clip and blocks it (issue 10
    item 8). Returns (harness, checks, discriminating) where ``discriminating`` is the
    float64 dx a bf16 z would give, for checking that the case can tell the two apart.
    """
    rng = np.random.default_rng(seed)
    h = Harness(dtype, layout, name=f"drelu_boundary_{dtype}_{layout}")
    dims, c = (4, 8, 6, 6), 8
    cs = (1, c, 1, 1)
    # x: 0.25 (exact in every dtype) on ~40% of the elements, else uniform in [-1, 1)
    xv = rng.uniform(-1, 1, dims)
    xv[rng.random(dims) < 0.4] = 0.25
    x = h.input("x", xv)
    dy = h.input("dy", rng.uniform(-1, 1, dims))
    mean = h.float_input("mean", np.zeros(cs))
    inv = h.float_input("inv_variance", np.ones(cs))
    scale = h.float_input("scale", np.ones(cs))
    # z = 0.25 + bias = upper - 4e-4: below the clip in FLOAT, the clip itself in bf16
    bias = h.float_input("bias", np.full(cs, upper - 0.25 - 4e-4))
    y_bn = h.g.batchnorm_inference(x, mean, inv, scale, bias)
    g = h.g.pointwise(y_bn, dy, mode=hd.PointwiseMode.RELU_BWD, relu_lower_clip=0.0,
                      relu_upper_clip=upper)
    dx, dscale, dbias = h.g.batchnorm_backward(g, x, scale, mean=mean, inv_variance=inv)
    h.output(dx, "dx")
    h.output(dscale, "dscale", dtype="float32")
    h.output(dbias, "dbias", dtype="float32")
    r = h.ref
    z = ref.bn_inference(r["x"], r["mean"], r["inv_variance"], r["scale"], r["bias"])
    want = ref.bn_backward(ref.relu_bwd(z, r["dy"], 0.0, upper), r["x"], r["scale"],
                           r["mean"], r["inv_variance"])
    import ml_dtypes
    z_bf16 = z.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    flipped = ref.bn_backward(ref.relu_bwd(z_bf16, r["dy"], 0.0, upper), r["x"], r["scale"],
                              r["mean"], r["inv_variance"])
    tf = tol("bn_backward", "float32")
    checks = [("dx", want["dx"], tol("bn_backward", dtype)), ("dscale", want["dscale"], tf),
              ("dbias", want["dbias"], tf)]
    return h, checks, flipped
