"""What the worker runs for the binding-level tests (``test_miopen_binding.py``):
``runtime._miopen`` called directly on the fake MIOpen, with the fake HIP runtime reached
through ctypes for streams and memory (the HIP runtime binding is tested on its own).

Each function returns plain data: outputs as NumPy arrays, the call log, the errors raised
(hipdnn_async errors pickle with their fields).
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from .._fakes import FakeControl

__all__ = ["Hip", "binding_facts", "conv_immediate_case", "find_case", "error_case",
           "fusion_case", "bn_activation_case"]


class Hip:
    """The fake HIP runtime through ctypes: a stream and device buffers."""

    H2D, D2H = 1, 2      # hipMemcpyHostToDevice / DeviceToHost (hip/driver_types.h)

    def __init__(self):
        self.lib = ctypes.CDLL(os.environ["HIPDNN_ASYNC_HIP_RUNTIME"])
        self.ctl = FakeControl(os.environ["HIPDNN_ASYNC_HIP_RUNTIME"])
        self.stream = ctypes.c_void_p()
        assert self.lib.hipStreamCreateWithFlags(ctypes.byref(self.stream), 1) == 0
        self.keep = []

    def to_device(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        p = ctypes.c_void_p()
        assert self.lib.hipMalloc(ctypes.byref(p), ctypes.c_size_t(max(array.nbytes, 1))) == 0
        assert self.lib.hipMemcpy(p, array.ctypes.data_as(ctypes.c_void_p),
                                  ctypes.c_size_t(array.nbytes), self.H2D) == 0
        return p.value

    def empty(self, nbytes: int) -> int:
        p = ctypes.c_void_p()
        assert self.lib.hipMalloc(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1))) == 0
        return p.value

    def to_host(self, ptr: int, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype)
        self.sync()
        assert self.lib.hipMemcpy(out.ctypes.data_as(ctypes.c_void_p), ctypes.c_void_p(ptr),
                                  ctypes.c_size_t(out.nbytes), self.D2H) == 0
        return out

    def sync(self) -> None:
        assert self.lib.hipStreamSynchronize(self.stream) == 0

    @property
    def s(self) -> int:
        return self.stream.value


def _load():
    from hipdnn_async.runtime import _miopen as m
    m.load(os.environ["HIPDNN_ASYNC_MIOPEN"], "env")
    return m


def binding_facts() -> dict:
    """Version, the optional entry points present, the names the table found missing."""
    m = _load()
    missing_error = None
    try:
        h = m.create_with_stream(0)
        m.set_tuning_policy(h, m.TUNING_POLICY_SEARCH)
        policy = m.get_tuning_policy(h)
    except Exception as exc:  # noqa: BLE001 - returned to the test
        missing_error, policy = exc, None
    return {"version": m.version(), "record": m.loaded(), "has": {n: m.has(n) for n in m.OPTIONAL},
            "missing": list(m.TABLE.lib.missing), "policy": policy, "missing_error": missing_error,
            "slots": m.n_slots(), "names": len(m.NAMES)}


def conv_immediate_case(direction: int, seed: int = 0) -> dict:
    """One 2-D FLOAT NCHW convolution through the immediate-mode calls: solutions listed,
    the first compiled and run; inputs and the output returned."""
    m = _load()
    hip = Hip()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    h = m.create_with_stream(hip.s)
    conv = m.ConvolutionDescriptor((1, 1), (1, 1), (1, 1), 1)
    xd = m.TensorDescriptor(m.DATA_FLOAT, x.shape, (144, 36, 6, 1))
    wd = m.TensorDescriptor(m.DATA_FLOAT, w.shape, (36, 9, 3, 1))
    yd = m.TensorDescriptor(m.DATA_FLOAT, dy.shape, (108, 36, 6, 1))
    descs = [(wd, xd, yd), (yd, wd, xd), (yd, xd, wd)][direction]
    host = [(w, x), (dy, w), (dy, x)][direction]
    out_shape = [dy.shape, x.shape, w.shape][direction]
    a_ptr, b_ptr = hip.to_device(host[0]), hip.to_device(host[1])
    c_ptr = hip.empty(int(np.prod(out_shape)) * 4)
    hip.ctl.clear()
    sols = m.conv_solutions(direction, h, *descs[:2], conv, descs[2])
    sid, algo, ws_size, _t = sols[0]
    ws_reported = m.conv_solution_workspace(direction, h, *descs[:2], conv, descs[2], sid)
    m.conv_compile(direction, h, *descs[:2], conv, descs[2], sid)
    ws = hip.empty(ws_size) if ws_size else 0
    m.conv_immediate(direction, h, descs[0], a_ptr, descs[1], b_ptr, conv, descs[2], c_ptr, ws,
                     ws_size, sid)
    out = hip.to_host(c_ptr, out_shape, np.float32)
    return {"solutions": sols, "ws_reported": ws_reported, "out": out, "x": x, "w": w, "dy": dy,
            "log": hip.ctl.log(), "pointers": (a_ptr, b_ptr, c_ptr, ws)}


def find_case(tuning: bool, limit: int) -> dict:
    """Find 2.0 on a 3x3 forward problem: the solver list and the log."""
    m = _load()
    hip = Hip()
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((2, 2, 3, 3), np.float32)
    h = m.create_with_stream(hip.s)
    conv = m.ConvolutionDescriptor((1, 1), (1, 1), (1, 1), 1)
    xd = m.TensorDescriptor(m.DATA_FLOAT, x.shape, (50, 25, 5, 1))
    wd = m.TensorDescriptor(m.DATA_FLOAT, w.shape, (18, 9, 3, 1))
    yd = m.TensorDescriptor(m.DATA_FLOAT, (1, 2, 5, 5), (50, 25, 5, 1))
    xp, wp, yp = hip.to_device(x), hip.to_device(w), hip.empty(200)
    wsz = 1 << 16
    ws = hip.empty(wsz)
    hip.ctl.clear()
    found = m.find_solutions(h, m.FORWARD, conv, xd, wd, yd, xp, wp, yp, ws, wsz, tuning, limit)
    return {"found": found, "log": hip.ctl.log(),
            "immediate": m.conv_solutions(m.FORWARD, h, wd, xd, conv, yd)}


def error_case(call: str, status: int) -> dict:
    """The error the binding raises when the fake fails ``call`` with ``status``."""
    m = _load()
    hip = Hip()
    h = m.create_with_stream(hip.s)
    hip.ctl.inject(call, status)
    try:
        if call == "miopenSetTensorDescriptor":
            m.TensorDescriptor(m.DATA_FLOAT, (1, 2, 3, 4), (24, 12, 4, 1))
        elif call == "miopenConvolutionForwardGetSolutionCount":
            conv = m.ConvolutionDescriptor((0, 0), (1, 1), (1, 1), 1)
            d = m.TensorDescriptor(m.DATA_FLOAT, (1, 1, 2, 2), (4, 4, 2, 1))
            m.conv_solutions(m.FORWARD, h, d, d, conv, d)
        elif call == "miopenCompileFusionPlan":
            d = m.TensorDescriptor(m.DATA_FLOAT, (1, 1, 2, 2), (4, 4, 2, 1))
            plan = m.FusionPlan(d)
            plan.compile(h)
        else:
            raise AssertionError(f"no scenario for {call}")
    except Exception as exc:  # noqa: BLE001 - returned to the test
        return {"error": exc, "type": type(exc).__name__, "log": hip.ctl.log()}
    return {"error": None, "log": hip.ctl.log()}


def fusion_case(mode_name: str, alpha: float, beta: float, bias: bool, policy: int = 0) -> dict:
    """conv + [bias] + activation through a fusion plan: compile, workspace, execute."""
    m = _load()
    hip = Hip()
    lib = ctypes.CDLL(os.environ["HIPDNN_ASYNC_MIOPEN"])
    lib.fake_miopen_set_fusion_policy(policy)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    h = m.create_with_stream(hip.s)
    conv = m.ConvolutionDescriptor((1, 1), (1, 1), (1, 1), 1)
    xd = m.TensorDescriptor(m.DATA_FLOAT, x.shape, (32, 16, 4, 1))
    wd = m.TensorDescriptor(m.DATA_FLOAT, w.shape, (18, 9, 3, 1))
    bd = m.TensorDescriptor(m.DATA_FLOAT, b.shape, (3, 1, 1, 1))
    yd = m.TensorDescriptor(m.DATA_FLOAT, (1, 3, 4, 4), (48, 16, 4, 1))
    plan = m.FusionPlan(xd)
    conv_op = plan.add_conv(conv, wd)
    bias_op = plan.add_bias(bd) if bias else None
    act_op = plan.add_activation(getattr(m, mode_name))
    result = {"x": x, "w": w, "b": b}
    try:
        plan.compile(h)
    except Exception as exc:  # noqa: BLE001 - returned to the test
        result["compile_error"] = exc
        return result
    ws_size = plan.workspace_size(h)
    args = m.OperatorArgs()
    xp, wp, bp, yp = hip.to_device(x), hip.to_device(w), hip.to_device(b), hip.empty(48 * 4)
    args.set_conv(conv_op, wp)
    if bias:
        args.set_bias(bias_op, bp)
    args.set_activation(act_op, alpha, beta, 0.0)
    ws = hip.empty(ws_size) if ws_size else 0
    hip.ctl.clear()
    m.execute_fusion(h, plan, xd, xp, yd, yp, args, ws, ws_size)
    result.update(out=hip.to_host(yp, (1, 3, 4, 4), np.float32), ws_size=ws_size,
                  log=hip.ctl.log())
    return result


def bn_activation_case() -> dict:
    """The fused batchnorm calls: present in 3.5.1, a LibraryError naming them in 3.4.0."""
    m = _load()
    hip = Hip()
    h = m.create_with_stream(hip.s)
    x = m.TensorDescriptor(m.DATA_FLOAT, (2, 3, 2, 2), (12, 4, 2, 1))
    p = m.TensorDescriptor(m.DATA_FLOAT, (1, 3, 1, 1), (3, 1, 1, 1))
    act = m.ActivationDescriptor(m.ACTIVATION_RELU)
    xp, yp = hip.empty(96), hip.empty(96)
    cs = [hip.to_device(np.ones(3, np.float32)) for _ in range(4)]
    try:
        m.bn_forward_inference(h, x, xp, x, yp, p, p, p, p, *cs, 1e-5, act)
        hip.sync()
        return {"error": None}
    except Exception as exc:  # noqa: BLE001 - returned to the test
        return {"error": exc}
