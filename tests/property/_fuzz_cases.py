"""Run one fuzz case (a plain dict, see ``test_fuzz_public_api.specs``) through the
public API and judge it. Imported by the worker process (``_fuzz_worker.py``), never by
pytest's own process, so that a crash or hang here is a finding, not a dead test run.

A case builds one of the nine patterns (random geometry, dtype, layout), maybe breaks
the graph or the variant pack on purpose (``graph_bug`` / ``mutations``), builds with
random knobs, maybe edits the graph after build, executes along one of the public paths
(``execute_sync``, ``submit``, ``enqueue``, ``await execute`` on asyncio or trio, a
cancelled execute, the hipDNN lowering calls) and checks:

- every failure is a ``HipdnnError`` subclass (else: finding ``untyped``);
- what must be refused is refused (else: ``accepted-invalid``), what is valid is not
  refused (``refused-valid``);
- every output of a valid execution matches the float64 reference of
  ``tests/oracle/_reference.py`` within ``tests/oracle/_cases.py``'s tolerances
  (``mismatch``); outputs are NaN-prefilled, so an unwritten element fails.

Returns ``{"outcome": ...}``; raises :class:`Finding` for a broken promise.
"""
from __future__ import annotations

import ctypes
import math
import mmap
import os
import traceback

import numpy as np

import hipdnn_async as hd
from oracle import _reference as ref
from oracle._cases import (alloc, assert_close, chan_shape, layout_strides, np_dtype,
                           reduction_tol, tol, wgrad_tol)

PKG_DIR = os.path.dirname(os.path.abspath(hd.__file__))

CONV_PATTERNS = ("CONV_FPROP", "CONV_FPROP_BIAS_RELU", "CONV_FPROP_RELU", "CONV_DGRAD",
                 "CONV_WGRAD")
BN_PATTERNS = ("BN_INFERENCE_VARIANCE", "BN_INFERENCE_DRELU_BACKWARD", "BN_TRAINING",
               "BN_TRAINING_RELU", "BN_BACKWARD")
PATTERNS = CONV_PATTERNS + BN_PATTERNS

# Variant-pack mutations. MUST_FAIL ones must be refused (a HipdnnError at submit or
# before); MAY_PASS ones are legal spellings of the same buffers (the results must match).
# EITHER ones may be refused or run (then the results must match).
MUST_FAIL = ("drop", "extra_virtual", "extra_unknown_name", "extra_unknown_uid", "wrong_dtype",
             "wrong_shape", "readonly_out", "obj_none", "obj_list", "obj_str", "obj_float",
             "obj_dict", "obj_dlpack_raises", "obj_bytes", "ptr_zero", "ptr_small", "ptr_huge",
             "ptr_negative", "ptr_hole", "ptr_unmapped", "alias", "not_mapping", "key_float",
             "given_twice", "workspace_small", "workspace_type", "workspace_readonly",
             "bad_stream")
MAY_PASS = ("ptr_good", "memory_order", "flat_1d", "device_array", "dlpack_good", "by_uid",
            "by_name")
EITHER = ("transpose",)
MUTATIONS = MUST_FAIL + MAY_PASS + EITHER

GRAPH_BUGS = ("neg_padding", "stride0", "dilation0", "bad_channels", "io_double", "epsilon",
              "momentum", "clip_order", "clip_nan", "virtual_input",
              "output_left_virtual", "intermediate_output", "zero_dim", "huge_dim",
              "bad_strides", "convolution_mode", "dx_dims", "dup_uid", "stat_dims",
              "pointwise_mode", "extra_node", "wrong_order")


class _NotApplied(Exception):
    """The case's graph bug does not apply to the graph drawn (build it without)."""


class Finding(Exception):
    """A broken promise of the library (the message says which)."""


class Refused(Exception):
    """The library raised a HipdnnError (an answer, good or bad depending on the case)."""

    def __init__(self, exc, stage):
        super().__init__(f"{type(exc).__name__} at {stage}: {exc}")
        self.exc, self.stage = exc, stage


def _ours(tb) -> bool:
    """Whether a traceback passes through the library (not only through this harness)."""
    return any(f.filename.startswith(PKG_DIR) for f in traceback.extract_tb(tb))


def api(stage, fn, *args, **kwargs):
    """Call the public API: a HipdnnError becomes Refused, any other error from inside the
    library a Finding('untyped'); errors of the harness itself propagate."""
    try:
        return fn(*args, **kwargs)
    except hd.HipdnnError as exc:
        raise Refused(exc, stage) from exc
    except Exception as exc:  # noqa: BLE001 - judging them is the point
        if _ours(exc.__traceback__):
            raise Finding(f"untyped {type(exc).__name__} at {stage}: {exc}\n"
                          + "".join(traceback.format_exception(exc)[-6:])) from exc
        raise


# ---------------------------------------------------------------------------------------
# Graph building (a Harness-like builder that keeps every tensor and its buffer)

class Case:
    def __init__(self, spec):
        self.spec = spec
        self.dtype = spec["dtype"]
        self.layout = spec["layout"]
        self.rank = 5 if "D" in self.layout.split("_")[0] else 4
        self.rng = np.random.default_rng(spec["seed"])
        self.g = None
        self.tensors = {}      # name -> TensorAttributes
        self.pack = {}         # name -> buffer (logical view)
        self.refv = {}         # name -> float64 values the library sees
        self.outputs = {}      # name -> tensor
        self.checks = []       # (name, reference, (atol, rtol))
        self.valid = True      # geometry and parameters valid (no graph_bug)

    # -- tensors --------------------------------------------------------------------------
    def graph(self):
        self.g = hd.Graph(name="fuzz", io_data_type=self.dtype,
                          intermediate_data_type=hd.DataType.FLOAT,
                          compute_data_type=hd.DataType.FLOAT)
        return self.g

    def input(self, name, values, *, dtype=None, layout=None):
        dtype = dtype or self.dtype
        values = np.asarray(values, dtype=np.float64) * self.spec.get("scale", 1.0)
        if name == "x" and self.spec.get("special") and values.size:
            # NaN and +-inf in the data: IEEE propagation is the answer (the contract: NaN
            # propagates on the CPU); the reference computes the same from the same inputs.
            flat = values.reshape(-1)
            idx = self.rng.integers(0, flat.size, size=min(3, flat.size))
            flat[idx] = self.rng.choice([np.nan, np.inf, -np.inf], size=idx.size)
        strides = layout_strides(values.shape, layout or self.layout)
        t = self.g.tensor(dims=values.shape, strides=strides, name=name)
        t.set_data_type(dtype)
        buf = alloc(values.shape, strides, np_dtype(dtype))
        buf[...] = values.astype(np_dtype(dtype))
        self.tensors[name], self.pack[name] = t, buf
        self.refv[name] = buf.astype(np.float64)
        return t

    def stat(self, name, values):
        values = np.asarray(values, dtype=np.float64)
        strides = layout_strides(values.shape, self.layout.split("_")[0])
        t = self.g.tensor(dims=values.shape, strides=strides, name=name, data_type="float32")
        buf = alloc(values.shape, strides, np.float32)
        buf[...] = values
        self.tensors[name], self.pack[name] = t, buf
        self.refv[name] = buf.astype(np.float64)
        return t

    def output(self, t, name, *, dtype=None):
        dtype = dtype or self.dtype
        t.set_output(True).set_name(name).set_data_type(dtype)
        if self.layout.endswith("nonpacked"):
            t.set_strides(layout_strides(t.dims, self.layout))
        self.outputs[name] = t
        self.tensors[name] = t
        return t

    def alloc_outputs(self):
        for name, t in self.outputs.items():
            dt = {hd.DataType.FLOAT: np.float32, hd.DataType.HALF: np.float16,
                  hd.DataType.BFLOAT16: np_dtype("bfloat16")}[t.data_type]
            self.pack[name] = alloc(tuple(t.dims), tuple(t.strides), dt)

    def u(self, lo, hi, shape):
        return self.rng.uniform(lo, hi, shape)


# -- convolutions ---------------------------------------------------------------------------

def conv_geometry(case):
    c = case.spec["conv"]
    nsp = case.rank - 2
    g, cg, kg = c["g"], c["cg"], c["kg"]
    sp, k = tuple(c["sp"][:nsp]), tuple(c["k"][:nsp])
    stride, dil = tuple(c["stride"][:nsp]), tuple(c["dil"][:nsp])
    pre, post = tuple(c["pre"][:nsp]), tuple(c["post"][:nsp])
    x = (c["n"], g * cg) + sp
    w = (g * kg, cg) + k
    out = tuple((i + a + b - d * (kk - 1) - 1) // s + 1
                for i, kk, a, b, s, d in zip(sp, k, pre, post, stride, dil))
    ok = all(o >= 1 for o in out)
    y = (c["n"], g * kg) + tuple(max(o, 1) for o in out)
    return dict(x=x, w=w, y=y, pre=pre, post=post, stride=stride, dilation=dil, ok=ok,
                groups=g)


def _conv_kw(geo):
    return dict(pre_padding=geo["pre"], post_padding=geo["post"], stride=geo["stride"],
                dilation=geo["dilation"])


def _rkw(geo):
    return (geo["pre"], geo["post"], geo["stride"], geo["dilation"])


def build_conv(case, pattern, bug):
    geo = conv_geometry(case)
    # the contract / the graph: N = 0 only for conv_fprop, batchnorm inference and pointwise
    case.valid = geo["ok"] and (geo["x"][0] > 0 or pattern.startswith("CONV_FPROP"))
    kw = _conv_kw(geo)
    if bug == "neg_padding":
        kw["pre_padding"] = (-1,) + tuple(kw["pre_padding"][1:])
    elif bug == "stride0":
        kw["stride"] = (0,) + tuple(kw["stride"][1:])
    elif bug == "dilation0":
        kw["dilation"] = tuple(kw["dilation"][:-1]) + (0,)
    elif bug == "convolution_mode":
        kw["mode"] = hd.ConvolutionMode.CONVOLUTION
    g = case.graph()
    nsp = case.rank - 2
    red = geo["x"][1] // geo["groups"] * math.prod(geo["w"][2:])
    w_dims = geo["w"]
    if bug == "bad_channels":   # x.C + 1 divides no x.C: no groups count fits
        w_dims = (w_dims[0], geo["x"][1] + 1) + w_dims[2:]
    if pattern == "CONV_DGRAD":
        dy = case.input("dy", case.u(-1, 1, geo["y"]))
        w = case.input("w", case.u(-1, 1, w_dims))
        dx_dims = geo["x"]
        if bug == "dx_dims":
            dx_dims = dx_dims[:2] + (dx_dims[2] + geo["stride"][0] * 2 + 1,) + dx_dims[3:]
        dx = g.conv_dgrad(dy, w, dx_dims=dx_dims, **kw)
        case.output(dx, "dx")
        want = ref.conv_dgrad(case.refv["dy"], case.refv["w"], geo["x"], *_rkw(geo))
        n = geo["w"][0] // geo["groups"] * math.prod(geo["w"][2:])
        case.checks.append(("dx", want, reduction_tol("conv_dgrad", case.dtype, n,
                                                      *_maxes(case, "dy", "w"))))
        return
    if pattern == "CONV_WGRAD":
        dy = case.input("dy", case.u(-1, 1, geo["y"]))
        x = case.input("x", case.u(-1, 1, geo["x"]))
        dw = g.conv_wgrad(dy, x, dw_dims=w_dims, **kw)
        case.output(dw, "dw")
        want = ref.conv_wgrad(case.refv["dy"], case.refv["x"], geo["w"], *_rkw(geo))
        n = geo["y"][0] * math.prod(geo["y"][2:])
        case.checks.append(("dw", want, wgrad_tol(case.dtype, n, *_maxes(case, "dy", "x"))))
        return
    x = case.input("x", case.u(-1, 1, geo["x"]))
    w = case.input("w", case.u(-1, 1, w_dims))
    y = g.conv_fprop(x, w, **kw)
    want = ref.conv_fprop(case.refv["x"], case.refv["w"], *_rkw(geo)) if geo["ok"] and \
        bug != "bad_channels" else None
    atol, rtol = reduction_tol("conv_fprop", case.dtype, red, *_maxes(case, "x", "w"))
    if pattern == "CONV_FPROP":
        case.output(y, "y")
        case.checks.append(("y", want, (atol, rtol)))
        return
    lo, hi = case.spec.get("clips", (None, None))
    if pattern == "CONV_FPROP_BIAS_RELU":
        b = case.input("bias", case.u(-1, 1, chan_shape(geo["w"][0], case.rank)))
        if bug == "stat_dims":
            b.set_dims((1, geo["w"][0] + 1) + (1,) * nsp)
        y = g.pointwise(y, b, mode=hd.PointwiseMode.ADD)
        if want is not None:
            want = want + case.refv["bias"]
    mode = hd.PointwiseMode.RELU_FWD
    if bug == "pointwise_mode":
        mode = hd.PointwiseMode.RELU_BWD
    lo, hi = _bug_clips(bug, lo, hi)
    out = g.pointwise(y, mode=mode, relu_lower_clip=lo, relu_upper_clip=hi)
    if bug == "intermediate_output":
        y.set_output(True)
    case.output(out, "y")
    if want is not None:
        want = ref.relu(want, lo, hi)
    case.checks.append(("y", want, (max(atol, tol("pointwise", case.dtype)[0]), rtol)))


def _bug_clips(bug, lo, hi):
    if bug == "clip_order":
        return 1.0, 0.5
    if bug == "clip_nan":
        return lo, float("nan")
    if bug == "lower_only_clip":
        return -0.5, None
    return lo, hi


def _maxes(case, a, b):
    return (max(float(np.abs(case.refv[a]).max(initial=0.0)), 1e-30),
            max(float(np.abs(case.refv[b]).max(initial=0.0)), 1e-30))


# -- batchnorm ------------------------------------------------------------------------------

def bn_dims(case):
    b = case.spec["bn"]
    return (b["n"], b["c"]) + tuple(b["sp"][:case.rank - 2])


def build_bn(case, pattern, bug):
    dims = bn_dims(case)
    cs = chan_shape(dims[1], case.rank)
    m = dims[0] * math.prod(dims[2:])
    g = case.graph()
    eps = case.spec.get("epsilon", 1e-5)
    if bug == "epsilon":   # epsilon must be a finite float > 0
        eps = case.spec.get("bad_value", 0.0)
        if eps is None or (isinstance(eps, float) and math.isfinite(eps) and eps > 0):
            eps = -eps if eps else 0.0
    lo, hi = _bug_clips(bug, *case.spec.get("clips", (None, None)))
    if pattern == "BN_INFERENCE_VARIANCE":
        x = case.input("x", case.u(-1, 1, dims))
        mean = case.stat("mean", case.u(-0.5, 0.5, cs))
        var = case.stat("variance", case.u(0.5, 2.0, cs))
        scale = case.stat("scale", case.u(-2, 2, cs))
        bias = case.stat("bias", case.u(-2, 2, cs))
        if bug == "stat_dims":
            var.set_dims(tuple(d + (i == 1) for i, d in enumerate(var.dims)))
        y = g.batchnorm_inference_variance_ext(x, mean, var, scale, bias, epsilon=eps)
        case.output(y, "y")
        r = case.refv
        want = ref.bn_inference_variance(r["x"], r["mean"], r["variance"], r["scale"],
                                         r["bias"], eps)
        case.checks.append(("y", want, tol("bn_inference_variance", case.dtype)))
        return
    if pattern.startswith("BN_TRAINING") and m < 2:
        case.valid = False      # the contract: training with one value per channel is a GraphError
    if dims[0] == 0 and pattern != "BN_INFERENCE_VARIANCE":
        case.valid = False      # N = 0 only for batchnorm inference (and conv_fprop)
    if pattern == "BN_BACKWARD" or pattern == "BN_INFERENCE_DRELU_BACKWARD":
        drelu = pattern == "BN_INFERENCE_DRELU_BACKWARD"
        xv = case.u(-1.8, 1.8, dims) if drelu else case.u(-1, 1, dims)
        x = case.input("x", xv)
        dy = case.input("dy", case.u(-1, 1, dims))
        scale = case.stat("scale", case.u(0.5, 1.5, cs) if drelu else case.u(-2, 2, cs))
        if drelu:
            mean = case.stat("mean", case.u(-0.1, 0.1, cs))
            inv = case.stat("inv_variance", case.u(0.1, 2.0, cs))
            bias = case.stat("bias", case.u(-0.1, 0.1, cs))
            if bug == "stat_dims":
                bias.set_dims(tuple(d + (i == 1) for i, d in enumerate(bias.dims)))
            y_bn = g.batchnorm_inference(x, mean, inv, scale, bias)
            mode = hd.PointwiseMode.RELU_FWD if bug == "pointwise_mode" else \
                hd.PointwiseMode.RELU_BWD
            grad = g.pointwise(y_bn, dy, mode=mode, relu_lower_clip=lo, relu_upper_clip=hi)
            if bug == "intermediate_output":
                y_bn.set_output(True)
        else:
            st = ref.bn_training(case.refv["x"], np.ones(dims[1]), np.zeros(dims[1]), 1e-5) \
                if m >= 2 else {"mean": np.zeros(cs), "inv_variance": np.ones(cs)}
            mean = case.stat("mean", np.asarray(st["mean"]).reshape(cs))
            inv = case.stat("inv_variance", np.asarray(st["inv_variance"]).reshape(cs))
            grad = dy
        dx, dscale, dbias = g.batchnorm_backward(grad, x, scale, mean=mean, inv_variance=inv)
        case.output(dx, "dx")
        case.output(dscale, "dscale", dtype="float32")
        case.output(dbias, "dbias", dtype="float32")
        r = case.refv
        gm = r["dy"]
        if drelu:
            ybn = ref.bn_inference(r["x"], r["mean"], r["inv_variance"], r["scale"], r["bias"])
            if _near_mask_edge(ybn, lo, hi):
                case.spec["_skip_compare"] = "a forward value within 1e-4 of a clip"
            gm = ref.relu_bwd(ybn, r["dy"], lo, hi)
        want = ref.bn_backward(gm, r["x"], r["scale"], r["mean"], r["inv_variance"])
        tf = tol("bn_backward", "float32")
        case.checks += [("dx", want["dx"], _bwd_tol(case, want["dx"])),
                        ("dscale", want["dscale"], _stat_tol(tf, m)),
                        ("dbias", want["dbias"], _stat_tol(tf, m))]
        return
    # training (+ relu)
    momentum = case.spec.get("momentum", 0.1)
    if bug == "momentum":  # momentum must be a finite float in [0, 1]
        momentum = case.spec.get("bad_value", float("nan"))
        if momentum is None or (isinstance(momentum, float) and 0.0 <= momentum <= 1.0):
            momentum = -1.0
    x = case.input("x", case.u(-1, 1, dims) * 2 + 0.3)
    scale = case.stat("scale", case.u(-2, 2, cs))
    bias = case.stat("bias", case.u(-2, 2, cs))
    running = case.spec.get("running", True)
    kw = {"momentum": momentum} if bug == "momentum" else {}
    if running:
        kw = dict(momentum=momentum, prev_running_mean=case.stat("prev_running_mean",
                                                                  case.u(-1, 1, cs)),
                  prev_running_variance=case.stat("prev_running_variance", case.u(0.5, 2, cs)))
    y, mean, inv, nrm, nrv = g.batchnorm(x, scale, bias, epsilon=eps, **kw)
    if pattern == "BN_TRAINING_RELU":
        y = g.pointwise(y, mode=hd.PointwiseMode.RELU_FWD, relu_lower_clip=lo,
                        relu_upper_clip=hi)
    case.output(y, "y")
    stats_out = case.spec.get("stats_out", True)
    names = [("next_running_mean", nrm), ("next_running_variance", nrv)] if running else []
    if stats_out:
        names = [("mean", mean), ("inv_variance", inv)] + names
    for name, t in names:
        case.output(t, name, dtype="float32")
    if bug == "output_left_virtual":
        if not running:
            raise _NotApplied()
        nrm.set_output(False)
        del case.outputs["next_running_mean"]
    if m < 2:
        case.valid = False      # the contract: training with one value per channel is a GraphError
        return
    r = case.refv
    want = ref.bn_training(r["x"], r["scale"], r["bias"], eps,
                           momentum if running else None, r.get("prev_running_mean"),
                           r.get("prev_running_variance"))
    if pattern == "BN_TRAINING_RELU":
        want["y"] = ref.relu(want["y"], lo, hi)
    case.checks.append(("y", want["y"], tol("bn_training", case.dtype)))
    tf = tol("bn_training", "float32")
    for name, _ in names:
        case.checks.append((name, want[name], tf))


def _near_mask_edge(ybn, lo, hi) -> bool:
    """RELU_BWD's mask flips on a rounding difference exactly at a clip: such inputs
    compare float32 vs float64 arithmetic, not the library (skip the comparison)."""
    edges = [0.0 if lo is None else lo] + ([] if hi is None else [hi])
    return any(bool((np.abs(ybn - e) < 1e-4).any()) for e in edges)


def _bwd_tol(case, dx):
    atol, rtol = tol("bn_backward", case.dtype)
    return atol * max(1.0, float(np.abs(dx).max(initial=0.0))), rtol


def _stat_tol(tf, m):
    atol, rtol = tf
    return atol * max(1.0, math.sqrt(m) / 4), rtol   # sums over m values in float32+


# ---------------------------------------------------------------------------------------
# Graph bugs that the builders above do not express

def apply_graph_bug(case, bug):
    """Post-build-of-graph edits that make it invalid (they must be refused at build)."""
    t = case.tensors
    first = next(iter(case.pack))            # the first input
    if bug == "io_double":
        t[first].set_data_type(hd.DataType.DOUBLE)
    elif bug == "virtual_input":
        t[first].set_output(False)           # an input no node produces, virtual
    elif bug == "zero_dim":
        t[first].set_dims((t[first].dims[0],) + (0,) + tuple(t[first].dims[2:]))
    elif bug == "huge_dim":
        t[first].set_dims((2 ** 48 + 1,) + tuple(t[first].dims[1:]))   # beyond the element limit
    elif bug == "bad_strides":
        t[first].set_strides((0,) * len(t[first].dims))
    elif bug == "dup_uid":
        names = list(case.pack)
        t[names[0]].set_uid(7)
        t[names[1]].set_uid(7)
    elif bug == "extra_node":
        x = t[first]
        case.g.pointwise(x, mode=hd.PointwiseMode.RELU_FWD)
    elif bug == "wrong_order":
        out = next(iter(case.outputs.values()))
        case.g.pointwise(out, mode=hd.PointwiseMode.RELU_FWD).set_output(True)


# These bugs are invalid graphs: every one must be refused. (The builders make a few of
# them conditional on the pattern; where a bug does not apply it is dropped.)
BUG_APPLIES = {
    "neg_padding": CONV_PATTERNS, "stride0": CONV_PATTERNS, "dilation0": CONV_PATTERNS,
    "bad_channels": ("CONV_FPROP", "CONV_FPROP_BIAS_RELU", "CONV_FPROP_RELU", "CONV_DGRAD"),
    "convolution_mode": CONV_PATTERNS, "dx_dims": ("CONV_DGRAD",),
    "io_double": PATTERNS, "epsilon": ("BN_INFERENCE_VARIANCE", "BN_TRAINING", "BN_TRAINING_RELU"),
    "momentum": ("BN_TRAINING", "BN_TRAINING_RELU"),
    "clip_order": ("CONV_FPROP_BIAS_RELU", "CONV_FPROP_RELU", "BN_TRAINING_RELU",
                   "BN_INFERENCE_DRELU_BACKWARD"),
    "clip_nan": ("CONV_FPROP_BIAS_RELU", "CONV_FPROP_RELU", "BN_TRAINING_RELU",
                 "BN_INFERENCE_DRELU_BACKWARD"),
    "virtual_input": PATTERNS, "output_left_virtual": ("BN_TRAINING", "BN_TRAINING_RELU"),
    "intermediate_output": ("CONV_FPROP_BIAS_RELU", "CONV_FPROP_RELU",
                            "BN_INFERENCE_DRELU_BACKWARD"),
    "zero_dim": PATTERNS, "huge_dim": PATTERNS, "bad_strides": PATTERNS,
    "dup_uid": PATTERNS, "stat_dims": ("CONV_FPROP_BIAS_RELU", "BN_INFERENCE_VARIANCE",
                                       "BN_INFERENCE_DRELU_BACKWARD"),
    "pointwise_mode": ("CONV_FPROP_BIAS_RELU", "CONV_FPROP_RELU", "BN_INFERENCE_DRELU_BACKWARD"),
    "extra_node": PATTERNS, "wrong_order": PATTERNS,
}


# ---------------------------------------------------------------------------------------
# Variant-pack mutations

class _DlpackRaises:
    def __init__(self, exc):
        self.exc = exc

    def __dlpack__(self, *a, **k):
        raise self.exc

    def __dlpack_device__(self):
        return (1, 0)


class _Dlpack:
    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, *a, **k):
        return self.arr.__dlpack__(*a, **k)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def _hole_pointer(nbytes, state):
    """An address of nbytes whose second page is PROT_NONE (kept mapped in ``state``)."""
    page = mmap.PAGESIZE
    size = max(3 * page, -(-nbytes // page) * page)
    m = mmap.mmap(-1, size + page)
    arr = np.frombuffer(m, np.uint8)
    base = arr.ctypes.data
    libc = state.setdefault("libc", ctypes.CDLL(None, use_errno=True))
    libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 0)
    state.setdefault("keep", []).append((m, arr))
    if len(state["keep"]) > 64:        # restore and release old mappings
        old_m, old_arr = state["keep"].pop(0)
        old_base = old_arr.ctypes.data
        libc.mprotect(ctypes.c_void_p(old_base + page), ctypes.c_size_t(page), 3)
        del old_arr
        old_m.close()
    return base


def mutate(case, plan, vp, keys, readers, mutation, target, state, dev, touched=None):
    """Apply one mutation to the variant pack (in place); returns execute kwargs, or None
    where the mutation does not apply. ``keys[name]`` is the key the pack uses now."""
    if not isinstance(vp, dict):
        return None                  # already replaced by a non-mapping
    names = [n for n in case.pack if n in case.tensors]
    outs = [n for n in names if n in case.outputs]
    ins = [n for n in names if n not in case.outputs]
    pick = lambda pool: pool[target % len(pool)]   # noqa: E731
    kw = {}

    class _Put(dict):          # vp[t[n]] = buf  ->  under the key in use for n
        def __setitem__(self, tensor, buf):
            if touched is not None and tensor.name in touched:
                raise _Skip()      # one mutation per tensor: a later one would undo it
            vp[keys[tensor.name]] = buf
            if touched is not None:
                touched.add(tensor.name)
    t = {n: case.tensors[n] for n in case.tensors}
    put = _Put()
    if mutation == "drop":
        n = pick(names)
        if touched is not None and n in touched:
            return None
        vp.pop(keys[n])
        if touched is not None:
            touched.add(n)
    elif mutation == "extra_virtual":
        virt = [x for x in case.g.tensors if x.is_virtual]
        if not virt:
            return None
        vp[virt[target % len(virt)]] = np.zeros(1, np.float32)
    elif mutation == "extra_unknown_name":
        vp["no such tensor"] = np.zeros(1, np.float32)
    elif mutation == "extra_unknown_uid":
        vp[10 ** 6 + target] = np.zeros(1, np.float32)
    elif mutation == "wrong_dtype":
        n = pick(names)
        put[t[n]] = case.pack[n].astype(np.float64)
    elif mutation == "wrong_shape":
        n = pick(names)
        put[t[n]] = np.zeros(tuple(d + 1 for d in case.pack[n].shape), case.pack[n].dtype)
    elif mutation == "readonly_out":
        n = pick(outs)
        ro = case.pack[n].view()
        ro.flags.writeable = False
        put[t[n]] = ro
    elif mutation.startswith("obj_"):
        obj = {"obj_none": None, "obj_list": [1.0, 2.0], "obj_str": "x", "obj_float": 1.5,
               "obj_dict": {"a": 1}, "obj_bytes": b"\0" * 64,
               "obj_dlpack_raises": _DlpackRaises([KeyError, AttributeError, ValueError,
                                                   IndexError][target % 4]("boom"))}[mutation]
        put[t[pick(names)]] = obj
    elif mutation.startswith("ptr_"):
        n = pick(names)
        if case.pack[n].size == 0:
            return None          # an empty tensor reads and writes nothing: any address
        if mutation == "ptr_good":
            buf = case.pack[n]
            if buf.size == 0 or not _contiguous_extent(buf):
                return None
            base = buf.__array_interface__["data"][0]
            put[t[n]] = base
        elif mutation == "ptr_hole":
            nbytes = case.pack[n].nbytes
            if nbytes <= 2 * mmap.PAGESIZE:
                return None      # the hole must lie inside the range, past its first page
            put[t[n]] = _hole_pointer(nbytes, state)
        else:
            put[t[n]] = {"ptr_zero": 0, "ptr_small": 4096 + target, "ptr_huge": 2 ** 64 + 8,
                         "ptr_negative": -4096,
                         "ptr_unmapped": 0x7ff0_0000_0000 + 4096 * target}[mutation]
    elif mutation == "alias":
        o = pick(outs)
        if case.pack[o].size == 0:
            return None          # an empty output shares no memory with anything
        others = [n for n in names if n != o and case.pack[n].dtype == case.pack[o].dtype
                  and case.pack[n].shape == case.pack[o].shape
                  and case.pack[n].strides == case.pack[o].strides]
        others = [n for n in others if keys[n] in vp]
        if not others:
            return None
        other = others[target % len(others)]
        if touched is not None and other in touched:
            return None
        put[t[o]] = vp[keys[other]]            # whatever buffer it has now
        if touched is not None:
            touched.add(other)                 # a later mutation must not undo the alias
    elif mutation == "not_mapping":
        return {"_replace": list(vp.items())}
    elif mutation == "key_float":
        vp[1.5] = np.zeros(1, np.float32)
    elif mutation == "given_twice":
        n = pick(names)
        if touched is not None and n in touched:
            return None
        vp[t[n].uid if keys[n] is not t[n].uid else t[n]] = case.pack[n]
        if touched is not None:
            touched.add(n)
    elif mutation.startswith("workspace_"):
        ws = plan.workspace_size
        if mutation == "workspace_small":
            if ws == 0:
                return None
            kw["workspace"] = np.empty(ws - 1, np.uint8)
        elif mutation == "workspace_type":
            if ws == 0:
                return None
            kw["workspace"] = [0] * 8
        else:
            if ws == 0:
                return None
            ro = np.empty(ws, np.uint8)
            ro.flags.writeable = False
            kw["workspace"] = ro
    elif mutation == "bad_stream":
        kw["stream"] = [len(dev.streams), -7, "s0", 2.0][target % 4]
    elif mutation == "transpose":
        n = pick(names)
        buf = case.pack[n]
        if buf.ndim < 2:
            return None
        perm = list(range(buf.ndim))
        perm[0], perm[-1] = perm[-1], perm[0]
        moved = np.ascontiguousarray(buf.transpose(perm)).transpose(perm)
        put[t[n]] = moved
        if n in case.outputs:
            readers[n] = moved
    elif mutation == "memory_order":
        n = pick(names)
        tt = t[n]
        order = tuple(int(i) for i in np.argsort([-s for s in tt.strides], kind="stable"))
        if sum(d > 1 for d in tt.dims) < 2 or case.layout.endswith("nonpacked"):
            return None
        phys = np.ascontiguousarray(case.pack[n].transpose(order))
        if phys.shape == tuple(tt.dims) and order != tuple(range(len(order))):
            return None      # reads as logical dims too: refused as ambiguous, by design
        put[t[n]] = phys
        if n in case.outputs:
            readers[n] = phys.transpose(np.argsort(order))
    elif mutation == "flat_1d":
        n = pick(names)
        buf = case.pack[n]
        if buf.size == 0 or not _contiguous_extent(buf):
            return None
        flat = _base_1d(buf)
        put[t[n]] = flat
    elif mutation == "device_array":
        n = pick(names)
        tt = t[n]
        arr = dev.empty(tt.dims, case.pack[n].dtype, strides=tt.strides)
        arr.copy_from(np.ascontiguousarray(case.pack[n]))
        put[t[n]] = arr
        if n in case.outputs:
            readers[n] = arr.view
    elif mutation == "dlpack_good":
        n = pick(ins)
        if case.pack[n].dtype == np_dtype("bfloat16"):
            return None                  # NumPy's DLPack does not carry bfloat16
        put[t[n]] = _Dlpack(case.pack[n])
    elif mutation in ("by_uid", "by_name"):
        if mutation == "by_name" and len({t[n].name for n in names}) < len(names):
            return None
        for n in names:
            if keys[n] not in vp:
                continue                     # dropped by an earlier mutation
            buf = vp.pop(keys[n])
            keys[n] = t[n].uid if mutation == "by_uid" else t[n].name
            vp[keys[n]] = buf
    return kw


def _root(buf):
    """The array that owns ``buf``'s memory (as_strided views sit on a DummyArray)."""
    base = buf.base
    while base is not None and getattr(base, "base", None) is not None:
        base = base.base
    return base


class _Skip(Exception):
    """The mutation does not apply (it would touch a tensor already mutated)."""


def _contiguous_extent(buf) -> bool:
    """The buffer is a view starting at offset 0 of one contiguous array (what alloc makes)."""
    base = _root(buf)
    return (isinstance(base, np.ndarray) and base.flags.c_contiguous
            and base.__array_interface__["data"][0] == buf.__array_interface__["data"][0])


def _base_1d(buf):
    return _root(buf).reshape(-1)


# ---------------------------------------------------------------------------------------
# Running one case

def build_case(spec, case=None):
    case = Case(spec) if case is None else case
    pattern = spec["pattern"]
    bug = spec.get("graph_bug")
    if bug is not None and pattern not in BUG_APPLIES.get(bug, ()):
        bug = spec["graph_bug"] = None
    try:
        (build_conv if pattern in CONV_PATTERNS else build_bn)(case, pattern, bug)
    except _NotApplied:
        spec["graph_bug"] = bug = None
        return build_case(spec, Case(spec))
    if bug is not None:
        apply_graph_bug(case, bug)
    return case, bug


def run_spec(spec, state):
    """Run one case; return {"outcome": ...} or raise Finding."""
    dev = state["device"]
    case = Case(spec)
    try:
        case, bug = build_case(spec, case)
    except hd.HipdnnError as exc:
        bug = spec.get("graph_bug")
        if bug is not None and spec["pattern"] not in BUG_APPLIES.get(bug, ()):
            bug = None
        built = exc
    except Exception as exc:  # noqa: BLE001
        if _ours(exc.__traceback__):
            raise Finding(f"untyped {type(exc).__name__} while building the graph: {exc}\n"
                          + "".join(traceback.format_exception(exc)[-6:])) from exc
        raise
    else:
        built = None
    invalid_graph = bug is not None or not case.valid
    if built is not None:
        if not invalid_graph:
            raise Finding(f"refused-valid: {type(built).__name__} building a valid graph: "
                          f"{built}")
        return {"outcome": f"refused:{type(built).__name__}:graph"}
    case.alloc_outputs()
    knobs = spec.get("knobs") or {}
    twin = None
    if spec.get("twin_edit") and not invalid_graph and not spec.get("bad_knob"):
        # A twin of the same signature built FIRST (its provider plan is the one this
        # case's plan shares), then edited: this plan must not care (issue 10 item 1).
        twin, _ = build_case(dict(spec, graph_bug=None))
        twin.alloc_outputs()
        try:
            api("build twin", dev.build_sync, twin.g, knobs=knobs)
        except Refused:
            twin = None
    try:
        if spec.get("path") == "lowering":
            plan = api("build", _lowering_build, case, knobs, dev)
        else:
            plan = api("build", dev.build_sync, case.g, knobs=knobs)
    except Refused as r:
        # bad_knob: True must be refused, None may be (a workspace limit outside the
        # graph's range, a knob not offered for this pattern), False must not.
        if invalid_graph or spec.get("bad_knob", False) is not False:
            return {"outcome": f"refused:{type(r.exc).__name__}:build"}
        raise Finding(f"refused-valid: {r}") from None
    if invalid_graph:
        raise Finding(f"accepted-invalid graph ({bug or 'geometry'}): built plan {plan!r}")
    if spec.get("bad_knob"):
        raise Finding(f"accepted-invalid knobs {knobs!r}: built plan {plan!r}")
    if spec.get("build_only"):
        return {"outcome": "built"}
    if twin is not None:
        _edit_after_build(twin, spec["twin_edit"])
    rebound = None
    if spec.get("edit_after_build"):
        rebound = _edit_after_build(case, spec["edit_after_build"])
    keys = {n: case.tensors[n] for n in case.pack}
    vp = {keys[n]: buf for n, buf in case.pack.items()}
    readers = {n: case.pack[n] for n in case.outputs}
    mutations = [m for m in spec.get("mutations", ()) if m in MUTATIONS]
    mutations.sort(key=lambda m: m not in ("by_uid", "by_name"))   # re-keying first
    kw, must_fail, either, applied = {}, False, False, []
    if rebound is not None:
        # a buffer that fits the edited tensor but not the plan's snapshot: refused at
        # submit, as a VariantPackError (issue 10 item 2), never an error in the worker
        name, buf = rebound
        vp[keys[name]] = buf
        readers.pop(name, None)
        must_fail = True
        applied.append("rebind after edit")
    touched = set()
    for i, m in enumerate(mutations):
        try:
            got = mutate(case, plan, vp, keys, readers, m, spec.get("target", 0) + i, state, dev,
                         touched)
        except _Skip:
            continue
        if got is None:
            continue
        applied.append(m)
        if "_replace" in got:
            vp = got["_replace"]
            got = {}
        kw.update(got)
        must_fail = must_fail or m in MUST_FAIL
        either = either or m in EITHER
    try:
        _execute(plan, vp, kw, spec.get("path", "sync"), case)
    except Refused as r:
        if must_fail or either:
            return {"outcome": f"refused:{type(r.exc).__name__}:{r.stage}"}
        raise Finding(f"refused-valid variant pack (mutations {applied}): {r}") from None
    if must_fail:
        raise Finding(f"accepted-invalid variant pack: mutations {applied} ran without error")
    if spec.get("_skip_compare"):
        return {"outcome": "ok-unchecked"}
    for name, want, (atol, rtol) in case.checks:
        if want is None or name not in readers:
            continue
        try:
            assert_close(readers[name], want, atol, rtol,
                         f"{spec['pattern']} {case.dtype} {case.layout} output '{name}'")
        except AssertionError as exc:
            raise Finding(f"mismatch: {exc}") from None
    return {"outcome": "ok"}


def _edit_after_build(case, edit):
    """Edit the built graph through the public setters (the plan keeps its snapshot).

    ``edit`` is (setter, which tensor[, rebind]); with rebind, return (name, a buffer
    that fits the edited tensor) when the edit changed its dims, strides or dtype."""
    kind, which = edit[:2]
    names = list(case.tensors)
    t = case.tensors[names[which % len(names)]]
    before = (tuple(t.dims), tuple(t.strides), t.data_type)
    if kind == "set_dims":
        t.set_dims(tuple(d + 1 for d in t.dims))
    elif kind == "set_data_type":
        t.set_data_type(hd.DataType.HALF if t.data_type != hd.DataType.HALF else
                        hd.DataType.FLOAT)
        for v in case.g.tensors:          # the virtual intermediates too
            if v.is_virtual:
                v.set_data_type(hd.DataType.BFLOAT16)
    elif kind == "set_strides":
        t.set_strides(tuple(reversed(range(1, len(t.dims) + 1))))
    elif kind == "set_name":
        t.set_name("renamed")
    after = (tuple(t.dims), tuple(t.strides), t.data_type)
    same = (after[0] == before[0] and after[2] == before[2] and (0 in after[0] or all(
        d <= 1 or a == b for d, a, b in zip(after[0], after[1], before[1]))))
    # (strides of size-1 dims never matter; an empty tensor takes any strides)
    if len(edit) > 2 and edit[2] and not same and t.name in case.pack:
        dt = {hd.DataType.FLOAT: np.float32, hd.DataType.HALF: np.float16,
              hd.DataType.BFLOAT16: np_dtype("bfloat16")}[t.data_type]
        buf = alloc(after[0], after[1], dt, fill=0.5)
        return t.name, buf
    return None


def _lowering_build(case, knobs, dev):
    g = case.g
    g.build_operation_graph(dev)
    ids = g.get_ranked_engine_ids()
    g.get_knobs_for_engine(ids[0])
    g.create_execution_plan_ext(ids[0], [hd.KnobSetting(k, v) for k, v in knobs.items()])
    g.build_plans()
    g.get_workspace_size()
    return g._lowering_state.plan


def _execute(plan, vp, kw, path, case):
    import anyio
    if path == "sync" or path == "lowering":
        api("execute_sync", plan.execute_sync, vp, **kw)
    elif path == "submit":
        handle = api("submit", plan.submit, vp, **kw)
        api("result", handle.result)
    elif path in ("asyncio", "trio", "enqueue", "cancel"):
        async def main():
            if path == "enqueue":
                h = await plan.enqueue(vp, **kw)
                await h
            elif path == "cancel":
                h = await plan.enqueue(vp, **kw)
                with anyio.move_on_after(0):        # cancelled at once: it still completes
                    await h
                await plan.device.synchronize()
            else:
                await plan.execute(vp, **kw)
        api("await execute", anyio.run, main, backend="trio" if path == "trio" else "asyncio")
    elif path == "many":
        handles = [api("submit", plan.submit, vp, **kw) for _ in range(3)]
        for h in handles:
            api("result", h.result)
    else:
        raise ValueError(f"unknown path {path!r}")
