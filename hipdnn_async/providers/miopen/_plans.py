"""MIOpen plans: one class per pattern family, each enqueuing MIOpen calls on its stream.

``run`` executes on the launching thread of a GPU stream: it looks up the stream's MIOpen
handle and workspace (prepared at stream start and build, ``providers/_gpu/_launch.py``)
and only enqueues work. What a plan must have per handle (a convolution solution compiled,
a fusion plan compiled) is declared as data (``handle_work``, a runtime ``HandleWork``) and
done by the runtime at build for the build stream and every open stream, and at stream
start for later ones: ``run`` finds, compiles, creates and allocates nothing. Buffers are device pointers (ints).

How the patterns map (as hipDNN's MIOpen provider maps them; docs/design/vendor-notes.md,
"MIOpen: how hipDNN's provider maps the patterns"):

- conv fprop / dgrad / wgrad: ``miopenConvolution{Forward,BackwardData,BackwardWeights}Immediate``
  with the solution chosen at build (immediate-mode list, or Find 2.0 when benchmarking).
- conv + bias + activation: a fusion plan (conv, [bias], activation ops) compiled once per
  plan and handle, run with ``miopenExecuteFusionPlan_v2`` (its workspace) or, before
  MIOpen 3.5, ``miopenExecuteFusionPlan``. Where MIOpen refuses the fusion: the convolution
  into a workspace copy of y, ``miopenConvolutionForwardBias`` there, and
  ``miopenActivationForward`` into y, on the one stream (``ComposedConvBiasActPlan``).
- batchnorm inference with variance: ``miopenBatchNormalizationForwardInference_V2``.
- batchnorm training: ``miopenBatchNormalizationForwardTraining_V2`` with the running
  statistics updated in place (prev is first copied into next, stream-ordered) and
  expAvgFactor = momentum; saved mean / inverse variance into the outputs (workspace when
  virtual). With a ReLU: ``miopenBatchNormForwardTrainingActivation`` (MIOpen >= 3.5), else
  the training into a workspace copy of y and ``miopenActivationForward``.
- batchnorm backward: ``miopenBatchNormalizationBackward_V2`` with the saved statistics.
- batchnorm inference + DReLU + backward: ``miopenBatchNormBackwardActivation`` with the
  BN bias and the activation (MIOpen >= 3.5), which recomputes the forward output from x;
  before 3.5: k = scale * inv_variance (``miopenOpTensor`` MUL), z = BN inference of x with
  scale k, variance 1 - 2^-10 and epsilon 2^-10 (so 1/sqrt(variance + epsilon) is exactly
  1 and z = k * (x - mean) + bias), dz = ``miopenActivationBackward``(z, dy), then the
  backward of dz; k, z and dz in the workspace.
"""
from __future__ import annotations

from ...runtime import _miopen
from .._base import ProviderPlan
from .._gpu._launch import HandleWork, StreamHandle, stream_handle, stream_resources
from .._gpu._workspace import Segments

__all__ = ["RESOURCE_KEY", "HANDLE_KIND", "make_handle", "ConvPlan", "FusedConvBiasActPlan",
           "ComposedConvBiasActPlan", "BnInferencePlan", "BnTrainingPlan", "BnBackwardPlan",
           "BnDreluBackwardPlan", "BN_BACKWARD_EPSILON", "DRELU_EPSILON"]

RESOURCE_KEY = "miopen"   # the launch-resource key of the MIOpen handle
HANDLE_KIND = "miopen"    # the runtime's handle kind (``runtime._stream_prep.HANDLE_KINDS``)

# hipDNN's provider passes BATCHNORM_DEFAULT_EPSILON (1e-5) to the backward call; with the
# saved statistics given, MIOpen does not use it.
BN_BACKWARD_EPSILON = 1e-5
# The composed DReLU recomputes z with variance 1 - 2^-10 and epsilon 2^-10: both exact in
# float32, their sum exactly 1 (MIOpen needs epsilon > 0).
DRELU_EPSILON = 2.0 ** -10


def make_handle(context):
    """``make_handle(stream)`` for the build stream: a MIOpen handle created on
    ``context``'s device (a handle binds to the device current at creation) and bound to
    the stream (``miopenCreateWithStream``). Compute streams get theirs from the runtime
    (``StreamNeeds``)."""
    def make(stream: int) -> StreamHandle:
        context.activate()
        return stream_handle(HANDLE_KIND, stream)
    return make


def _resources():
    return stream_resources(RESOURCE_KEY, "MIOpen plans")


class _PerHandle:
    """What a plan prepares per MIOpen handle (compiled once per handle), as data:
    ``handle_work`` (a runtime ``HandleWork``), run by the provider on the build handle
    (``prepare_handle``) and by the runtime on every stream's; ``state(handle)`` in run."""

    def _init_handles(self, call: str, args: tuple) -> None:
        self.handle_work = HandleWork(RESOURCE_KEY, call, args, type(self).__name__)

    def prepare_handle(self, handle: int):
        """Run the per-handle call on ``handle`` (the build handle); its result."""
        return self.handle_work.prepare(handle)

    def state(self, handle: int):
        """What was prepared for ``handle`` (ExecutionError: nothing)."""
        try:
            return self.handle_work.results[handle]
        except KeyError:
            return self.handle_work.state(handle)   # raises, naming the plan


# ------------------------------------------------------------------ convolutions
class ConvPlan(ProviderPlan, _PerHandle):
    """A single convolution running one immediate-mode solution.

    Parameters
    ----------
    setup : ConvSetup
        Descriptors and roles.
    solution_id : int
        The solution (solver id) chosen at build.
    workspace_size : int
        Its workspace bytes (``miopenConvolution*GetSolutionWorkspaceSize``).
    name : str
        ``plan.algorithm``.
    """

    def __init__(self, setup, solution_id: int, workspace_size: int, name: str):
        self.setup = setup
        self.solution_id = int(solution_id)
        self.workspace_size = int(workspace_size)
        self.algorithm = name
        # miopenConvolution*CompileSolution on each handle
        a, b, c = setup.descs
        self._init_handles("miopen.conv_compile",
                           (setup.direction, a, b, setup.conv, c, self.solution_id))

    def run(self, buffers, workspace) -> None:
        res = _resources()
        self.state(res.handle)
        s = self.setup
        ra, rb, rc = s.roles
        a, b, c = s.descs
        ws = res.workspace(workspace, self.workspace_size)
        _miopen.conv_immediate(s.direction, res.handle, a, buffers[ra], b, buffers[rb], s.conv, c,
                               buffers[rc], ws, self.workspace_size, self.solution_id)


class FusedConvBiasActPlan(ProviderPlan, _PerHandle):
    """conv + [bias] + activation through one MIOpen fusion plan per handle.

    Parameters
    ----------
    setup : ConvSetup
        The convolution (forward).
    bias_desc : TensorDescriptor or None
        The bias (1, K, 1, 1[, 1]); None without a bias.
    act : Activation
        Mode and clips.
    """

    def __init__(self, setup, bias_desc, act):
        self.setup = setup
        self.bias_desc = bias_desc
        self.act = act
        self.workspace_size = 0
        self.algorithm = f"fusion plan: conv{' + bias' if bias_desc is not None else ''} + {act.name}"
        # the fusion plan created and compiled for each handle (miopenCompileFusionPlan
        # raises MiopenNotSupportedError when no fused solver applies), its workspace
        # size and operator arguments (runtime._stream_prep.FusionState)
        self._init_handles("miopen.fusion_plan",
                           (setup.desc("x"), setup.conv, setup.desc("w"), bias_desc, act.mode))

    def prepare_handle(self, handle: int):
        """Compile the fusion plan for ``handle`` (the build handle) and size the plan's
        workspace from it; the ``FusionState``."""
        state = _PerHandle.prepare_handle(self, handle)
        self.workspace_size = max(self.workspace_size, state.workspace_size)
        return state

    def run(self, buffers, workspace) -> None:
        res = _resources()
        plan, conv_op, bias_op, act_op, args, _ = self.state(res.handle)
        args.set_conv(conv_op, buffers["w"])
        if bias_op is not None:
            args.set_bias(bias_op, buffers["bias"])
        args.set_activation(act_op, self.act.alpha, self.act.beta, 0.0)
        ws = res.workspace(workspace, self.workspace_size)
        s = self.setup
        _miopen.execute_fusion(res.handle, plan, s.desc("x"), buffers["x"], s.desc("y"),
                               buffers["y"], args, ws, self.workspace_size)


class ComposedConvBiasActPlan(ConvPlan):
    """conv + [bias] + activation as three calls on one stream, the convolution's output
    ``z`` (y's dims and type, packed in y's layout) in the workspace; used where MIOpen
    refuses the fusion plan.

    Parameters
    ----------
    setup : ConvSetup
        The convolution; its output descriptor is replaced by ``z_desc``.
    z_desc, y_desc : TensorDescriptor
        The intermediate and y.
    bias_desc : TensorDescriptor or None
        The bias; None without one.
    act : Activation
    z_bytes : int
        The intermediate's size.
    """

    def __init__(self, setup, solution_id, conv_workspace, name, z_desc, y_desc, bias_desc, act,
                 z_bytes):
        from dataclasses import replace
        zsetup = replace(setup, descs=(setup.descs[0], setup.descs[1], z_desc))
        super().__init__(zsetup, solution_id, conv_workspace, name)
        self.conv_workspace = int(conv_workspace)
        self.y_desc = y_desc
        self.bias_desc = bias_desc
        self.act = act
        self.act_desc = act.descriptor()
        self.seg = Segments()
        self.seg.add("z", z_bytes)
        self.seg.add("conv", conv_workspace)
        self.workspace_size = self.seg.size
        self.algorithm = (f"composed (the fusion was refused): {name} + "
                          f"{'miopenConvolutionForwardBias + ' if bias_desc is not None else ''}"
                          f"{act.name}")

    def run(self, buffers, workspace) -> None:
        res = _resources()
        self.state(res.handle)
        s = self.setup
        wd, xd, zd = s.descs
        base = res.workspace(workspace, self.workspace_size)
        z, cws = self.seg.pointer(base, "z"), self.seg.pointer(base, "conv")
        h = res.handle
        _miopen.conv_immediate(s.direction, h, wd, buffers["w"], xd, buffers["x"], s.conv, zd, z,
                               cws, self.conv_workspace, self.solution_id)
        if self.bias_desc is not None:
            _miopen.conv_forward_bias(h, self.bias_desc, buffers["bias"], zd, z)
        _miopen.activation_forward(h, self.act_desc, zd, z, self.y_desc, buffers["y"])


# ------------------------------------------------------------------ batchnorm
class _BnPlan(ProviderPlan):
    def __init__(self, descs: dict, params: dict):
        self.d = descs          # role -> TensorDescriptor
        self.p = params

    # Batchnorm has nothing to compile per handle (MIOpen compiles on a handle's first
    # call; the trial run at build puts the kernels in MIOpen's kernel cache).
    handle_work = None


class BnInferencePlan(_BnPlan):
    """Batchnorm inference with the running variance."""

    algorithm = "miopenBatchNormalizationForwardInference_V2"

    def run(self, b, workspace) -> None:
        res = _resources()
        d = self.d
        _miopen.bn_forward_inference(res.handle, d["x"], b["x"], d["y"], b["y"], d["scale"],
                                     d["bias"], d["mean"], d["variance"], b["scale"], b["bias"],
                                     b["mean"], b["variance"], self.p["epsilon"])


class BnTrainingPlan(_BnPlan):
    """Batchnorm training [+ activation]; virtual statistics (and the composed form's BN
    output) live in the workspace.

    Parameters
    ----------
    descs : dict
        role -> descriptor; ``"stat"`` is the per-channel descriptor of the saved
        statistics, ``"z"`` the BN output in the workspace (composed activation only).
    params : dict
        epsilon, momentum.
    channels : int
    virtual : frozenset
        Roles without buffers (mean, inv_variance).
    act : Activation or None
        The ReLU of BN_TRAINING_RELU.
    fused : bool
        Through ``miopenBatchNormForwardTrainingActivation``.
    z_bytes : int
        Size of the composed form's intermediate.
    runtime : _gpu.Runtime
        For the stream-ordered copy of prev into next running statistics.
    """

    def __init__(self, descs, params, channels, virtual, act, fused, z_bytes, runtime):
        super().__init__(descs, params)
        self.channels = channels
        self.rt = runtime
        self.act = act
        self.act_desc = act.descriptor() if act is not None else None
        self.fused = fused
        self.seg = Segments()
        for role in ("mean", "inv_variance"):
            if role in virtual:
                self.seg.add(role, 4 * channels)
        if act is not None and not fused:
            self.seg.add("z", z_bytes)
        self.workspace_size = self.seg.size
        base = ("miopenBatchNormForwardTrainingActivation" if fused
                else "miopenBatchNormalizationForwardTraining_V2")
        self.algorithm = base + (f" + miopenActivationForward ({act.name})"
                                 if act is not None and not fused else
                                 f" ({act.name})" if act is not None else "")

    def run(self, b, workspace) -> None:
        res = _resources()
        d, p = self.d, self.p
        ws = res.workspace(workspace, self.workspace_size)
        mean = b["mean"] if "mean" in b else self.seg.pointer(ws, "mean")
        inv = b["inv_variance"] if "inv_variance" in b else self.seg.pointer(ws, "inv_variance")
        run_mean = run_var = 0
        if "next_running_mean" in b:
            run_mean, run_var = b["next_running_mean"], b["next_running_variance"]
            nbytes = 4 * self.channels
            for src, dst in ((b["prev_running_mean"], run_mean),
                             (b["prev_running_variance"], run_var)):
                if src != dst:
                    self.rt.memcpy_async(dst, src, nbytes, self.rt.MEMCPY_DEVICE_TO_DEVICE,
                                         res.stream)
        factor = float(p["momentum"]) if run_mean else 0.0
        composed = self.act is not None and not self.fused
        y_desc, y = (d["z"], self.seg.pointer(ws, "z")) if composed else (d["y"], b["y"])
        _miopen.bn_forward_training(
            res.handle, d["x"], b["x"], y_desc, y, d["scale"], d["bias"], d["stat"], d["stat"],
            b["scale"], b["bias"], factor, run_mean, run_var, p["epsilon"], mean, inv,
            self.act_desc if self.fused else None)
        if composed:
            _miopen.activation_forward(res.handle, self.act_desc, d["z"], y, d["y"], b["y"])


class BnBackwardPlan(_BnPlan):
    """Batchnorm backward with the saved mean and inverse variance."""

    algorithm = "miopenBatchNormalizationBackward_V2"

    def run(self, b, workspace) -> None:
        res = _resources()
        d = self.d
        _miopen.bn_backward(res.handle, d["x"], b["x"], d["dy"], b["dy"], d["dx"], b["dx"],
                            d["scale"], d["scale"], d["mean"], d["inv_variance"], b["scale"], 0,
                            b["dscale"], b["dbias"], BN_BACKWARD_EPSILON, b["mean"],
                            b["inv_variance"])


class BnDreluBackwardPlan(_BnPlan):
    """Batchnorm inference + DReLU + batchnorm backward (see the module docstring).

    Parameters
    ----------
    descs : dict
        role -> descriptor; the composed form adds ``"z"`` (x's dims and type, packed).
    act : Activation
        The RELU_BWD's clips.
    fused : bool
        Through ``miopenBatchNormBackwardActivation``.
    channels, z_bytes : int
    ones : GpuArray or None
        The composed form's variance 1 - 2^-10 per channel (plan-owned).
    """

    def __init__(self, descs, params, act, fused, channels, z_bytes, ones):
        super().__init__(descs, params)
        self.act = act
        self.act_desc = act.descriptor()
        self.fused = fused
        self.ones = ones
        self.seg = Segments()
        if not fused:
            self.seg.add("k", 4 * channels)
            self.seg.add("z", z_bytes)
            self.seg.add("dz", z_bytes)
        self.workspace_size = self.seg.size
        self.algorithm = ("miopenBatchNormBackwardActivation" if fused else
                          "miopenOpTensor + miopenBatchNormalizationForwardInference_V2 + "
                          "miopenActivationBackward + miopenBatchNormalizationBackward_V2") + \
            f" ({act.name})"

    def run(self, b, workspace) -> None:
        res = _resources()
        d, h = self.d, res.handle
        if self.fused:
            _miopen.bn_backward(h, d["x"], b["x"], d["dy"], b["dy"], d["dx"], b["dx"], d["scale"],
                                d["bias"], d["mean"], d["inv_variance"], b["scale"], b["bias"],
                                b["dscale"], b["dbias"], BN_BACKWARD_EPSILON, b["mean"],
                                b["inv_variance"], self.act_desc)
            return
        ws = res.workspace(workspace, self.workspace_size)
        k, z, dz = (self.seg.pointer(ws, n) for n in ("k", "z", "dz"))
        sd = d["scale"]
        _miopen.op_tensor(h, _miopen.TENSOR_OP_MUL, 1.0, sd, b["scale"], 1.0, d["inv_variance"],
                          b["inv_variance"], 0.0, sd, k)
        _miopen.bn_forward_inference(h, d["x"], b["x"], d["z"], z, sd, d["bias"], d["mean"], sd, k,
                                     b["bias"], b["mean"], self.ones.ptr, DRELU_EPSILON)
        _miopen.activation_backward(h, self.act_desc, d["z"], z, d["dy"], b["dy"], d["z"], z,
                                    d["z"], dz)
        _miopen.bn_backward(h, d["x"], b["x"], d["z"], dz, d["dx"], b["dx"], sd, sd, d["mean"],
                            d["inv_variance"], b["scale"], 0, b["dscale"], b["dbias"],
                            BN_BACKWARD_EPSILON, b["mean"], b["inv_variance"])
