"""cuDNN plans: one class per pattern family, each enqueuing legacy cuDNN calls.

``run`` executes on the launching thread of a GPU stream (``runtime.current_launch()``):
it only enqueues work on that stream and returns; it allocates, frees, synchronises and
creates nothing (the stream's cuDNN handle and workspace were prepared at stream start
and build, ``providers/_gpu/_launch.py``). Buffers are device pointers (ints);
``workspace`` is a user-given pointer or None (the stream's own workspace is used).

How the patterns map (docs/design/vendor-notes.md, "cuDNN 9: the legacy API"):

- conv fprop / dgrad / wgrad: ``cudnnConvolution{Forward,BackwardData,BackwardFilter}``.
- conv + bias + ReLU: ``cudnnConvolutionBiasActivationForward`` (RELU; a zero bias when the
  graph has none). An upper clip runs the fused call with IDENTITY (algorithm
  IMPLICIT_PRECOMP_GEMM, as documented) and then ``cudnnActivationForward(CLIPPED_RELU)``,
  since the fused call refuses CLIPPED_RELU.
- batchnorm inference: ``cudnnBatchNormalizationForwardInference`` (SPATIAL).
- batchnorm training (+ ReLU): ``cudnnBatchNormalizationForwardTraining``, then an in-place
  ``cudnnActivationForward`` (the fused Ex form needs NHWC + SPATIAL_PERSISTENT). cuDNN
  updates running statistics in place, so prev is first copied into next.
- batchnorm backward: ``cudnnBatchNormalizationBackward`` with the saved statistics.
- channels-last training and backward run only the Ex calls
  (``cudnnBatchNormalizationForwardTrainingEx`` / ``BackwardEx``) with
  CUDNN_BATCHNORM_SPATIAL_PERSISTENT, as PyTorch's channels-last path: the plain calls take
  1.7-4.6 ms there against 50-77 µs (docs/design/vendor-notes.md, "Batchnorm on Hopper"), so where
  cuDNN refuses the Ex form at the build's trial run the engine declines.
- other layouts run the plain calls with SPATIAL_PERSISTENT (knob
  ``cudnn_legacy.bn_persistent``, default 1) when a trial run succeeds, SPATIAL otherwise.
- batchnorm inference + DReLU + batchnorm backward: cuDNN has no legacy call that recomputes
  from x, so: k = scale * inv_variance (``OpTensor`` MUL on C values); z = BN inference of x
  with scale k, bias, mean and variance 1, epsilon 0, which is exactly
  k * (x - mean) + bias; dz = ``cudnnActivationBackward``(RELU, z, dy); then batchnorm
  backward of dz. z, dz and k live in the plan's workspace, z and the DReLU output in the
  graph's intermediate data type (FLOAT by default; ``BnInferenceDreluBackwardPlan``).
"""
from __future__ import annotations

from ...runtime import _cudnn, current_launch
from .._base import ProviderPlan
from .._gpu._launch import StreamHandle, stream_handle, stream_resources
from .._gpu._workspace import Segments, align as _align

__all__ = ["ConvPlan", "ConvBiasReluPlan", "BnInferencePlan", "BnTrainingPlan",
           "BnBackwardPlan", "BnInferenceDreluBackwardPlan", "handle_for_launch",
           "make_handle", "RESOURCE_KEY", "HANDLE_KIND"]

RESOURCE_KEY = "cudnn"   # the launch-resource key of the cuDNN handle
HANDLE_KIND = "cudnn"    # the runtime's handle kind (``runtime._stream_prep.HANDLE_KINDS``)


def make_handle(stream: int) -> StreamHandle:
    """A cuDNN handle bound to ``stream`` (the build stream's; compute streams get theirs
    from the runtime, ``StreamNeeds``)."""
    return stream_handle(HANDLE_KIND, stream)


def handle_for_launch():
    """(stream resources, cuDNN handle) of the launching stream; ExecutionError off a GPU
    stream or on one not prepared for cuDNN."""
    res = stream_resources(RESOURCE_KEY, "cuDNN plans")
    return res, res.handle


class ConvPlan(ProviderPlan):
    """A single convolution with a chosen algorithm."""

    def __init__(self, setup, algo: int, workspace_size: int):
        self.setup = setup
        self.algo = algo
        self.algorithm = setup.name(algo)
        self.workspace_size = workspace_size

    def run(self, buffers, workspace) -> None:
        res, h = handle_for_launch()
        s = self.setup
        a, b, c = s.roles
        ad, bd, cd = s.descs
        ws = res.workspace(workspace, self.workspace_size)
        _cudnn.convolution(s.direction, h, ad.ptr, buffers[a], bd.ptr, buffers[b], s.conv.ptr,
                           self.algo, ws, self.workspace_size, cd.ptr, buffers[c])


class ConvBiasReluPlan(ConvPlan):
    """conv + bias + ReLU (optionally clipped above) through the fused call."""

    def __init__(self, setup, algo, workspace_size, bias_desc, zero_bias, upper_clip):
        super().__init__(setup, algo, workspace_size)
        self.bias_desc = bias_desc
        self.zero_bias = zero_bias          # GpuArray kept alive by the plan, or None
        self.upper_clip = upper_clip
        if upper_clip is None:
            self.act = _cudnn.ActivationDescriptor(_cudnn.ACTIVATION_RELU)
            self.clip = None
        else:
            self.act = _cudnn.ActivationDescriptor(_cudnn.ACTIVATION_IDENTITY)
            self.clip = _cudnn.ActivationDescriptor(_cudnn.ACTIVATION_CLIPPED_RELU, upper_clip)

    def run(self, buffers, workspace) -> None:
        res, h = handle_for_launch()
        s = self.setup
        xd, wd, yd = s.descs
        bias = buffers["bias"] if "bias" in buffers else self.zero_bias.ptr
        ws = res.workspace(workspace, self.workspace_size)
        _cudnn.convolution_bias_activation_forward(
            h, xd.ptr, buffers["x"], wd.ptr, buffers["w"], s.conv.ptr, self.algo, ws,
            self.workspace_size, self.bias_desc.ptr, bias, self.act.ptr, yd.ptr, buffers["y"])
        if self.clip is not None:
            _cudnn.activation_forward(h, self.clip.ptr, yd.ptr, buffers["y"], yd.ptr, buffers["y"])


class _BnPlan(ProviderPlan):
    def __init__(self, descs: dict, params: dict):
        self.d = descs          # role -> TensorDescriptor; "bn" the per-channel one
        self.p = params
        # training / backward mode; the provider sets SPATIAL_PERSISTENT after a trial run
        # (channels-last: 10-60x faster there; NCHW: up to 6.7x, equal on small shapes,
        # measured on the H200: bench/results/h200_diag_bn_nchw.log)
        self.mode = _cudnn.BATCHNORM_SPATIAL
        self.bwd_ex = None      # BackwardEx workspace bytes (aligned) once use_backward_ex ran

    def use_backward_ex(self, handle: int, dyd) -> int:
        """Run the batchnorm backward step through ``cudnnBatchNormalizationBackwardEx``
        (bn_ops BN, ``self.mode``); ``dyd`` is the descriptor of the step's dy. Returns the
        reserve-space bytes cuDNN asks for: a backward plan has no TrainingEx call to fill
        one, so the caller declines when it is not 0 (then nothing is changed)."""
        ws, reserve = _cudnn.batchnorm_backward_ex_sizes(
            handle, self.mode, self.d["x"].ptr, dyd.ptr, self.d["dx"].ptr, self.d["bn"].ptr)
        if reserve:
            return reserve
        self.bwd_ex = _align(ws)
        self.workspace_size += self.bwd_ex
        return 0

    def _backward(self, h, b, ws, dyd, dy) -> None:
        """The batchnorm backward step of x with gradient ``dy`` (descriptor ``dyd``):
        the Ex call when chosen (its workspace at the end of the plan's), else the plain
        one."""
        d = self.d
        if self.bwd_ex is not None:
            n = self.bwd_ex
            _cudnn.batchnorm_backward_ex(
                h, self.mode, d["x"].ptr, b["x"], dyd, dy, d["dx"].ptr, b["dx"], d["bn"].ptr,
                b["scale"], b["dscale"], b["dbias"], _BWD_EPSILON, b["mean"],
                b["inv_variance"], ws + self.workspace_size - n if n else 0, n)
            return
        _cudnn.batchnorm_backward(h, d["x"].ptr, b["x"], dyd, dy, d["dx"].ptr, b["dx"],
                                  d["bn"].ptr, b["scale"], b["dscale"], b["dbias"],
                                  _BWD_EPSILON, b["mean"], b["inv_variance"], self.mode)


class BnInferencePlan(_BnPlan):
    def run(self, b, workspace) -> None:
        _, h = handle_for_launch()
        d = self.d
        _cudnn.batchnorm_forward_inference(h, d["x"].ptr, b["x"], d["y"].ptr, b["y"], d["bn"].ptr,
                                           b["scale"], b["bias"], b["mean"], b["variance"],
                                           self.p["epsilon"])


class BnTrainingPlan(_BnPlan):
    """Training; saved statistics that are virtual in the graph (``virtual``: a subset of
    mean, inv_variance) are written to segments of the workspace, since cuDNN's training
    calls always write them (issue 10 item 7: a virtual one used to reach cuDNN as None).

    Workspace: [virtual statistics][Ex workspace][Ex reserve space], each aligned.
    """

    def __init__(self, descs, params, channels: int, relu_upper=None, relu=False,
                 virtual=()):
        super().__init__(descs, params)
        self.channels = channels
        self.virtual = tuple(r for r in ("mean", "inv_variance") if r in virtual)
        self.segments = Segments()
        for role in self.virtual:
            self.segments.add(role, 4 * channels)
        self.stats_size = self.segments.size
        self.workspace_size = self.stats_size
        self.act = None
        self.relu_only = relu and relu_upper is None
        if relu:
            self.act = (_cudnn.ActivationDescriptor(_cudnn.ACTIVATION_RELU) if relu_upper is None
                        else _cudnn.ActivationDescriptor(_cudnn.ACTIVATION_CLIPPED_RELU, relu_upper))
        self.ex = None      # (bn_ops, activation desc, Ex workspace bytes, reserve bytes)

    def use_ex(self, handle: int) -> None:
        """Run through ``cudnnBatchNormalizationForwardTrainingEx`` (SPATIAL_PERSISTENT;
        ReLU fused when it is unclipped); sizes its workspace and reserve space."""
        bn_ops = _cudnn.BN_OPS_BN_ACTIVATION if self.relu_only else _cudnn.BN_OPS_BN
        act = self.act if self.relu_only else None
        ws, reserve = _cudnn.batchnorm_training_ex_sizes(
            handle, self.mode, bn_ops, self.d["x"].ptr, self.d["y"].ptr, self.d["bn"].ptr,
            act.ptr if act is not None else 0)
        self.ex = (bn_ops, act, _align(ws), _align(reserve))
        self.workspace_size = self.stats_size + _align(ws) + _align(reserve)
        self.algorithm = "SPATIAL_PERSISTENT Ex" + (", ReLU fused" if self.relu_only else "")

    def run(self, b, workspace) -> None:
        res, h = handle_for_launch()
        d, p = self.d, self.p
        ws = res.workspace(workspace, self.workspace_size)
        mean = b["mean"] if "mean" in b else self.segments.pointer(ws, "mean")
        inv_var = (b["inv_variance"] if "inv_variance" in b
                   else self.segments.pointer(ws, "inv_variance"))
        run_mean = run_var = 0
        if "next_running_mean" in b:
            run_mean, run_var = b["next_running_mean"], b["next_running_variance"]
            nbytes = 4 * self.channels
            for src, dst in ((b["prev_running_mean"], run_mean), (b["prev_running_variance"], run_var)):
                if src != dst:
                    rt = current_launch().context.runtime
                    rt.memcpy_async(dst, src, nbytes, rt.MEMCPY_DEVICE_TO_DEVICE, res.stream)
        factor = p["momentum"] if run_mean else 0.0
        if self.ex is not None:
            bn_ops, act, ex_ws, reserve = self.ex
            base = ws + self.stats_size
            _cudnn.batchnorm_forward_training_ex(
                h, self.mode, bn_ops, d["x"].ptr, b["x"], d["y"].ptr, b["y"], d["bn"].ptr,
                b["scale"], b["bias"], factor, run_mean, run_var, p["epsilon"], mean, inv_var,
                act.ptr if act is not None else 0, base if ex_ws else 0, ex_ws,
                base + ex_ws if reserve else 0, reserve)
            if self.act is not None and act is None:
                _cudnn.activation_forward(h, self.act.ptr, d["y"].ptr, b["y"], d["y"].ptr, b["y"])
            return
        _cudnn.batchnorm_forward_training(
            h, d["x"].ptr, b["x"], d["y"].ptr, b["y"], d["bn"].ptr, b["scale"], b["bias"],
            factor, run_mean, run_var, p["epsilon"], mean, inv_var, self.mode)
        if self.act is not None:
            _cudnn.activation_forward(h, self.act.ptr, d["y"].ptr, b["y"], d["y"].ptr, b["y"])


# cuDNN requires epsilon >= CUDNN_BN_MIN_EPSILON (0 in cuDNN 9); with saved statistics
# given it is not used by the backward pass.
_BWD_EPSILON = 1e-5


class BnBackwardPlan(_BnPlan):
    def run(self, b, workspace) -> None:
        res, h = handle_for_launch()
        self._backward(h, b, res.workspace(workspace, self.workspace_size), self.d["dy"].ptr,
                       b["dy"])


class BnInferenceDreluBackwardPlan(_BnPlan):
    """See the module docstring; the workspace holds k and the intermediates.

    The BN-inference output z and the DReLU output are virtual tensors of the graph's
    intermediate data type (FLOAT by default). Where it differs from the I/O type
    (``convert``: e.g. BFLOAT16 I/O), x and dy are first converted to it (``OpTensor`` MUL
    by a plan-owned one: cuDNN's OpTensor takes A and B of one type and C of another), z
    and dz are computed in it, and dz is converted back for the batchnorm backward call,
    exactly (dy times a 0/1 mask is representable in dy's type). A bf16 z used to flip the
    ReLU mask for values that round onto a clip boundary (issue 10 item 8).

    Parameters
    ----------
    descs : dict
        Role -> TensorDescriptor; ``"bn"`` the per-channel one, ``"z"`` packed x-order in
        the I/O type, and with ``convert`` ``"zi"`` the same in the intermediate type and
        ``"one_io"`` / ``"one_i"`` the all-1-dims descriptors of the two ones.
    ones : GpuArray
        FLOAT C-vector of 1 (the variance of the z step).
    x_elems, io_size, inter_size : int
        Elements of x; bytes per element of the I/O and intermediate types.
    unit : tuple of GpuArray or None
        (one in the I/O type, one in the intermediate type) with ``convert``.
    """

    def __init__(self, descs, params, channels, x_elems, io_size, inter_size, ones,
                 relu_upper=None, unit=None):
        super().__init__(descs, params)
        self.ones = ones
        self.unit = unit
        self.convert = unit is not None
        self.segments = Segments()
        self.segments.add("k", 4 * channels)
        if self.convert:
            for name in ("xi", "z", "dyi"):      # xi is reused for dz in the intermediate type
                self.segments.add(name, x_elems * inter_size)
        else:
            self.segments.add("z", x_elems * io_size)
        self.segments.add("dz", x_elems * io_size)
        self.workspace_size = self.segments.size
        self.mul = _cudnn.OpTensorDescriptor(_cudnn.OP_TENSOR_MUL)
        self.act = (_cudnn.ActivationDescriptor(_cudnn.ACTIVATION_RELU) if relu_upper is None
                    else _cudnn.ActivationDescriptor(_cudnn.ACTIVATION_CLIPPED_RELU, relu_upper))

    def run(self, b, workspace) -> None:
        res, h = handle_for_launch()
        d, seg = self.d, self.segments
        ws = res.workspace(workspace, self.workspace_size)
        k, z, dz = seg.pointer(ws, "k"), seg.pointer(ws, "z"), seg.pointer(ws, "dz")
        bn = d["bn"].ptr
        mul = self.mul.ptr
        _cudnn.op_tensor(h, mul, 1.0, bn, b["scale"], 1.0, bn, b["inv_variance"], bn, k)
        if self.convert:
            one_io, one_i = (u.ptr for u in self.unit)
            zi, oio, oi = d["zi"].ptr, d["one_io"].ptr, d["one_i"].ptr
            xi, dyi = seg.pointer(ws, "xi"), seg.pointer(ws, "dyi")
            _cudnn.op_tensor(h, mul, 1.0, d["x"].ptr, b["x"], 1.0, oio, one_io, zi, xi)
            _cudnn.batchnorm_forward_inference(h, zi, xi, zi, z, bn, k, b["bias"], b["mean"],
                                               self.ones.ptr, 0.0)
            _cudnn.op_tensor(h, mul, 1.0, d["dy"].ptr, b["dy"], 1.0, oio, one_io, zi, dyi)
            _cudnn.activation_backward(h, self.act.ptr, zi, z, zi, dyi, zi, z, zi, xi)
            _cudnn.op_tensor(h, mul, 1.0, zi, xi, 1.0, oi, one_i, d["z"].ptr, dz)
        else:
            _cudnn.batchnorm_forward_inference(h, d["x"].ptr, b["x"], d["z"].ptr, z, bn, k,
                                               b["bias"], b["mean"], self.ones.ptr, 0.0)
            _cudnn.activation_backward(h, self.act.ptr, d["z"].ptr, z, d["dy"].ptr, b["dy"],
                                       d["z"].ptr, z, d["z"].ptr, dz)
        self._backward(h, b, ws, d["z"].ptr, dz)
