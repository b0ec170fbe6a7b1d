"""The onnx package's backend test cases as a peer oracle, through the public API.

Sources: the node cases of ``onnx.backend.test.case.node`` (modules conv, convtranspose,
batch_normalization, relu, clip; importing a module runs its exporters) and the model +
data directories of ``onnx/backend/test/data/pytorch-converted/``. Each single-node case
is translated into a graph when expressible and its outputs compared with ONNX's
expected ones; the rest are skipped with the reason. Translation rules:

- Conv: fprop; 1-D becomes 2-D with H = 1; ONNX pads are [begin..., end...]; auto_pad
  SAME_UPPER/SAME_LOWER/VALID per the ONNX spec; the optional bias B is added in float64
  after the library's conv (a plain conv has no bias in our patterns).
- ConvTranspose(X, W) is conv_dgrad(dy=X, w=W) with dx dims the ConvTranspose output
  dims, pre = pad begin, post = pad end (expressible when the forward formula maps dx
  back to X's dims, i.e. output_padding < stride).
- BatchNormalization: inference is batchnorm_inference_variance_ext. Training mode uses
  ONNX's momentum convention ``running = momentum*running + (1-momentum)*batch`` with the
  population variance; our API is ``next = (1-m)*prev + m*batch`` with the unbiased
  variance, so m = 1 - momentum_onnx and the expected running variance is converted.
- Relu / Clip: a 1x1 identity conv (C = K = 1, weight 1.0, exact) followed by RELU_FWD
  (pattern 8, two nodes); Clip(min=0, max) is the upper clip, Clip(min, max) the CLAMP form.
"""
from __future__ import annotations

import importlib
import os
import warnings

import numpy as np
import pytest

from ._cases import Harness, assert_close, chan_shape, device, tol  # noqa: F401

onnx = pytest.importorskip("onnx", reason="the onnx package provides the peer test cases")
from onnx import numpy_helper  # noqa: E402

OPS = ("Conv", "ConvTranspose", "BatchNormalization", "Relu", "Clip")
MIN_TRANSLATED = 55   # measured: 61 of 68 single-node cases are expressible with onnx 1.23


class NotExpressible(Exception):
    """The ONNX case has no equivalent graph in our API (reason in the message)."""


def _node_cases():
    import onnx.backend.test.case.node as node_mod
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in ("conv", "convtranspose", "batch_normalization", "relu", "clip"):
            importlib.import_module(f"onnx.backend.test.case.node.{m}")
    cases = getattr(node_mod, "_NodeTestCases", None)
    if cases is None:   # private list gone: fall back to the (slow) public collector
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = node_mod.collect_testcases(None)
    out = []
    for c in cases:
        nodes = c.model.graph.node
        if len(nodes) != 1 or nodes[0].op_type not in OPS:
            continue
        ins, outs = c.data_sets[0]
        names = [i.name for i in c.model.graph.input]
        by_name = dict(zip(names, ins))
        node = nodes[0]
        inputs = [by_name.get(n) if n else None for n in node.input]
        out.append((c.name, node, inputs, list(outs)))
    return out


def _converted_cases():
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "pytorch-converted")
    out = []
    if not os.path.isdir(root):
        return out
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path)
        nodes = model.graph.node
        if len(nodes) != 1 or nodes[0].op_type not in OPS:
            continue
        init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        data = os.path.join(root, name, "test_data_set_0")
        feeds = [i.name for i in model.graph.input if i.name not in init]

        def load(fn):
            t = onnx.TensorProto()
            with open(os.path.join(data, fn), "rb") as f:
                t.ParseFromString(f.read())
            return numpy_helper.to_array(t)

        for i, n in enumerate(feeds):
            init[n] = load(f"input_{i}.pb")
        outs = [load(f"output_{i}.pb") for i in range(len(model.graph.output))]
        node = nodes[0]
        out.append((f"pytorch-converted/{name}", node, [init.get(n) if n else None for n in node.input], outs))
    return out


CASES = _node_cases() + _converted_cases()


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _f32(a, what):
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype != np.float32:
        raise NotExpressible(f"{what} has dtype {a.dtype}; only float32 cases are translated")
    return a


def _to_2d(arrays, nsp):
    """1-D conv -> 2-D with H = 1 (insert a unit spatial dim after C)."""
    if nsp == 1:
        return [None if a is None else a[:, :, None] for a in arrays], True
    if nsp not in (2, 3):
        raise NotExpressible(f"{nsp} spatial dims")
    return arrays, False


def _conv_pads(a, in_sp, k_sp, stride, dil):
    nsp = len(in_sp)
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("NOTSET", ""):
        pads = list(a.get("pads", [0] * 2 * nsp))
        return pads[:nsp], pads[nsp:]
    if auto == "VALID":
        return [0] * nsp, [0] * nsp
    pre, post = [], []
    for i in range(nsp):
        out = -(-in_sp[i] // stride[i])
        total = max(0, (out - 1) * stride[i] + (k_sp[i] - 1) * dil[i] + 1 - in_sp[i])
        small, big = total // 2, total - total // 2
        pre.append(small if auto == "SAME_UPPER" else big)
        post.append(big if auto == "SAME_UPPER" else small)
    return pre, post


def _layout(rank):
    return "NCHW" if rank == 4 else "NCDHW"


def translate(node, inputs, outputs):
    """Return run(dev) -> [(label, got, expected, (atol, rtol))] or raise NotExpressible."""
    op = node.op_type
    a = _attrs(node)
    if op == "Conv":
        x, w = _f32(inputs[0], "X"), _f32(inputs[1], "W")
        b = _f32(inputs[2], "B") if len(inputs) > 2 else None
        nsp = x.ndim - 2
        stride = list(a.get("strides", [1] * nsp))
        dil = list(a.get("dilations", [1] * nsp))
        pre, post = _conv_pads(a, x.shape[2:], w.shape[2:], stride, dil)
        (x, w), lifted = _to_2d([x, w], nsp)
        if lifted:
            stride, dil, pre, post = [1] + stride, [1] + dil, [0] + pre, [0] + post
        if x.shape[1] != w.shape[1] * a.get("group", 1):
            raise NotExpressible("group attribute disagrees with X.C / W.C")
        expected = outputs[0]

        def run(dev):
            h = Harness("float32", _layout(x.ndim))
            xt, wt = h.input("x", x), h.input("w", w)
            y = h.g.conv_fprop(xt, wt, pre_padding=pre, post_padding=post, stride=stride, dilation=dil)
            h.output(y, "y")
            got = h.run(dev)["y"].astype(np.float64)
            if b is not None:
                got = got + b.astype(np.float64).reshape(chan_shape(b.size, got.ndim))
            return [("Y", got.reshape(expected.shape), expected, tol("conv_fprop", "float32"))]
        return run

    if op == "ConvTranspose":
        x, w = _f32(inputs[0], "X"), _f32(inputs[1], "W")
        b = _f32(inputs[2], "B") if len(inputs) > 2 else None
        nsp = x.ndim - 2
        g = a.get("group", 1)
        stride = list(a.get("strides", [1] * nsp))
        dil = list(a.get("dilations", [1] * nsp))
        k = list(w.shape[2:])
        opad = list(a.get("output_padding", [0] * nsp))
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        full = [stride[i] * (x.shape[2 + i] - 1) + opad[i] + (k[i] - 1) * dil[i] + 1 for i in range(nsp)]
        if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
            oshape = list(a["output_shape"])[-nsp:] if "output_shape" in a else [
                x.shape[2 + i] * stride[i] for i in range(nsp)]
            # a negative total padding is an implied output_padding at the end (zeros the
            # dgrad never reaches): pads 0 and dx dims = output_shape
            total = [max(0, full[i] - oshape[i]) for i in range(nsp)]
            if auto == "SAME_UPPER":
                pre, post = [t // 2 for t in total], [t - t // 2 for t in total]
            else:
                pre, post = [t - t // 2 for t in total], [t // 2 for t in total]
            out_sp = list(oshape)
        else:
            pads = list(a.get("pads", [0] * 2 * nsp))
            pre, post = pads[:nsp], pads[nsp:]
            out_sp = [full[i] - pre[i] - post[i] for i in range(nsp)]
        for i in range(nsp):
            fwd = (out_sp[i] + pre[i] + post[i] - dil[i] * (k[i] - 1) - 1) // stride[i] + 1
            if fwd != x.shape[2 + i]:
                raise NotExpressible(f"dim {i}: dgrad of dx {out_sp[i]} gives dy {fwd}, not {x.shape[2 + i]}")
        (x, w), lifted = _to_2d([x, w], nsp)
        if lifted:
            stride, dil, pre, post, out_sp = [1] + stride, [1] + dil, [0] + pre, [0] + post, [1] + out_sp
        dx_dims = (x.shape[0], w.shape[1] * g, *out_sp)
        expected = outputs[0]

        def run(dev):
            h = Harness("float32", _layout(x.ndim))
            dyt, wt = h.input("dy", x), h.input("w", w)
            dx = h.g.conv_dgrad(dyt, wt, dx_dims=dx_dims, pre_padding=pre, post_padding=post,
                                stride=stride, dilation=dil)
            h.output(dx, "dx")
            got = h.run(dev)["dx"].astype(np.float64)
            if b is not None:
                got = got + b.astype(np.float64).reshape(chan_shape(b.size, got.ndim))
            return [("Y", got.reshape(expected.shape), expected, tol("conv_dgrad", "float32"))]
        return run

    if op == "BatchNormalization":
        x = _f32(inputs[0], "X")
        s, bias, mean, var = (_f32(inputs[i], n) for i, n in enumerate(("scale", "B", "mean", "var"), 1))
        eps = float(a.get("epsilon", 1e-5))
        mom = float(a.get("momentum", 0.9))
        training = bool(a.get("training_mode", 0)) or (
            "is_test" in a and not a["is_test"] and len(node.output) > 1)
        if a.get("spatial", 1) != 1:
            raise NotExpressible("spatial=0 (per-activation) batchnorm")
        shape = x.shape
        if x.ndim == 2:
            x4 = x.reshape(*shape, 1, 1)
        elif x.ndim == 3:
            x4 = x[:, :, None, :]
        elif x.ndim in (4, 5):
            x4 = x
        else:
            raise NotExpressible(f"rank {x.ndim}")
        cs = chan_shape(shape[1], x4.ndim)
        exp_y = outputs[0]

        def run(dev):
            h = Harness("float32", _layout(x4.ndim))
            xt = h.input("x", x4)
            st, bt = h.float_input("scale", s.reshape(cs)), h.float_input("bias", bias.reshape(cs))
            mt, vt = h.float_input("mean", mean.reshape(cs)), h.float_input("var", var.reshape(cs))
            if not training:
                y = h.g.batchnorm_inference_variance_ext(xt, mt, vt, st, bt, epsilon=eps)
                h.output(y, "y")
                got = h.run(dev)
                return [("Y", got["y"].reshape(shape), exp_y, tol("bn_inference_variance", "float32"))]
            y, bm, binv, nrm, nrv = h.g.batchnorm(xt, st, bt, epsilon=eps, momentum=1.0 - mom,
                                                  prev_running_mean=mt, prev_running_variance=vt)
            h.output(y, "y")
            h.output(nrm, "nrm", dtype="float32")
            h.output(nrv, "nrv", dtype="float32")
            got = h.run(dev)
            t = tol("bn_training", "float32")
            res = [("Y", got["y"].reshape(shape), exp_y, t)]
            if len(outputs) >= 3:
                m = x.size // shape[1]
                v64 = var.astype(np.float64)
                var_b = (outputs[2].astype(np.float64) - mom * v64) / (1 - mom)
                want_rv = mom * v64 + (1 - mom) * var_b * m / (m - 1)
                res += [("running_mean", got["nrm"].ravel(), outputs[1], t),
                        ("running_var (unbiased)", got["nrv"].ravel(), want_rv, t)]
            return res
        return run

    if op in ("Relu", "Clip"):
        x = _f32(inputs[0], "X")
        lower = upper = None
        if op == "Clip":
            lo = a.get("min", inputs[1] if len(inputs) > 1 else None)
            hi = a.get("max", inputs[2] if len(inputs) > 2 else None)
            lo = None if lo is None else float(np.asarray(lo))
            hi = None if hi is None else float(np.asarray(hi))
            if hi is None:
                # (a lower-only RELU_FWD clip is max(x, lower): not translated here)
                raise NotExpressible("Clip without max: only clipped ReLU and clamp are translated")
            if lo is None:
                raise NotExpressible("Clip without min (min = -inf): not a RELU_FWD clip")
            if lo > hi:
                raise NotExpressible(f"Clip min {lo} > max {hi}: CLAMP needs lower <= upper")
            lower, upper = (None, hi) if lo == 0 else (lo, hi)
        shape = x.shape
        x4 = x.reshape(1, 1, -1, shape[-1] if x.ndim else 1)
        expected = outputs[0]

        def run(dev):
            import hipdnn_async as hd
            h = Harness("float32", "NCHW")
            xt = h.input("x", x4)
            wt = h.input("w", np.ones((1, 1, 1, 1)))
            y = h.g.conv_fprop(xt, wt)
            r = h.g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=lower,
                              relu_upper_clip=upper)
            h.output(r, "y")
            got = h.run(dev)["y"].reshape(shape)
            return [("Y", got, expected, tol("pointwise", "float32"))]
        return run
    raise NotExpressible(f"op {op}")


def _translate_all():
    ok, skipped = [], []
    for name, node, inputs, outputs in CASES:
        try:
            translate(node, inputs, outputs)
            ok.append(name)
        except NotExpressible as exc:
            skipped.append((name, str(exc)))
    return ok, skipped


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_onnx_case(device, case):
    name, node, inputs, outputs = case
    try:
        run = translate(node, inputs, outputs)
    except NotExpressible as exc:
        pytest.skip(f"{name}: not expressible: {exc}")
    for label, got, expected, (atol, rtol) in run(device):
        assert_close(got, np.asarray(expected, dtype=np.float64), atol, rtol, f"onnx {name} {label}")


def test_minimum_translated():
    ok, skipped = _translate_all()
    ops = {node.op_type for name, node, _, _ in CASES if name in set(ok)}
    assert set(OPS) <= ops, f"every op should have translated cases; got {sorted(ops)}"
    assert len(ok) >= MIN_TRANSLATED, (
        f"only {len(ok)} of {len(CASES)} ONNX cases translated; skipped: {skipped}")
