"""The demo CNN: parameters, running statistics, and its passes as execution plans.

Architecture (NCHW, float32), for 8x8 grey digits::

    conv1  1 -> 32, 3x3, pad 1           (N, 32, 8, 8)   batchnorm + ReLU
    conv2 32 -> 32, 3x3, stride 2, pad 1 (N, 32, 4, 4)   batchnorm
    classifier 32 -> 10, 4x4             (N, 10, 1, 1)   logits

Training runs, per step: CONV_FPROP for every convolution, BN_TRAINING_RELU and
BN_TRAINING (with running statistics); then CONV_WGRAD / CONV_DGRAD for every
convolution (no dgrad into the images), BN_BACKWARD after the plain batchnorm and the
fused BN_INFERENCE_DRELU_BACKWARD after the batchnorm + ReLU, both from the saved mean
and inv_variance. Plans are built once per (operation, batch size) and reused.

Parameters and running statistics are NumPy on the host (the optimiser updates them
there). On the CPU device plans read and write NumPy arrays directly; on a GPU the
activations stay on the device, parameters are re-uploaded at the start of each pass,
and only what the host needs (logits, gradients, running statistics) is copied back
(see ``_staging``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hipdnn_async import NotSupportedError

from . import _graphs
from ._common import DemoError
from ._graphs import LayerSpec
from ._host import carry_bias, fold_batchnorm, softmax_cross_entropy
from ._staging import Staging

__all__ = ["LAYERS", "IMAGE_SIZE", "EPSILON", "BN_MOMENTUM", "FoldedLayer", "Folded",
           "Network"]

IMAGE_SIZE = 8
EPSILON = 1e-5          # batchnorm epsilon (PyTorch's default)
BN_MOMENTUM = 0.1       # running-statistics momentum (PyTorch's default)

LAYERS = (
    LayerSpec("conv1", 1, 32, 3, stride=1, padding=1, bn="relu"),
    LayerSpec("conv2", 32, 32, 3, stride=2, padding=1, bn="plain"),
    LayerSpec("classifier", 32, 10, 4, stride=1, padding=0, bn=None),
)


@dataclass(frozen=True)
class FoldedLayer:
    """One layer of evaluation (b), its batchnorm folded into `w` and `bias`.

    ``op`` is ``"folded"``: one CONV_FPROP_BIAS_RELU plan of `w` and `bias` (ReLU, or the
    identity clamp where the layer has none); or ``"fprop"``: a CONV_FPROP plan of `w`
    alone (`bias` None), for a layer without ReLU on a device that declines the identity
    clamp (cuDNN clips below at 0 only). Its bias then moved on, exactly, into the next
    layer's bias, or into the logits (``Folded.logit_bias``).
    """

    layer: LayerSpec
    op: str
    w: np.ndarray
    bias: np.ndarray | None


@dataclass(frozen=True)
class Folded:
    """The network of evaluation (b) and serving: layers, then a host bias on the logits."""

    layers: tuple[FoldedLayer, ...]
    logit_bias: np.ndarray | None     # (classes,) float32, added on the host; or None

    @property
    def patterns(self) -> dict[str, str]:
        """The plan pattern of each layer, by layer name."""
        return {f.layer.name: "CONV_FPROP_BIAS_RELU" if f.op == "folded" else "CONV_FPROP"
                for f in self.layers}


def _sizes(layers, size: int) -> list[int]:
    """Input height of each layer, then the output height of the last."""
    out = [size]
    for layer in layers:
        out.append(layer.out_size(out[-1]))
    return out


class Network:
    """Parameters and running statistics of the demo CNN, with its plans on one device.

    Parameters
    ----------
    device : hipdnn_async.Device
        Where every convolution and batchnorm runs.
    seed : int
        Seed of the initial weights (PyTorch's default uniform fan-in initialisation).
    knobs : mapping, optional
        Knob settings for every plan build (e.g. ``{"global.benchmarking": 1}``).

    Attributes
    ----------
    params : dict of str to numpy.ndarray
        ``"<layer>.w"`` (K, C, R, S); ``"<layer>.scale"``, ``"<layer>.bias"`` (1, K, 1, 1).
        Host copies on every device; passes read them afresh.
    running : dict of str to numpy.ndarray
        ``"<layer>.running_mean"``, ``"<layer>.running_var"`` (1, K, 1, 1).
    plans : list of ExecutionPlan
        Every plan built, in build order.
    """

    def __init__(self, device, *, seed: int = 0, knobs=None, layers=LAYERS):
        self.device = device
        self.knobs = knobs
        self.layers = tuple(layers)
        self.sizes = _sizes(self.layers, IMAGE_SIZE)
        rng = np.random.default_rng(seed)
        self.params, self.running = {}, {}
        for layer in self.layers:
            bound = 1.0 / math.sqrt(layer.in_channels * layer.kernel ** 2)
            self.params[f"{layer.name}.w"] = rng.uniform(
                -bound, bound, layer.w_dims).astype(np.float32)
            if layer.bn is not None:
                c = (1, layer.out_channels, 1, 1)
                self.params[f"{layer.name}.scale"] = np.ones(c, np.float32)
                self.params[f"{layer.name}.bias"] = np.zeros(c, np.float32)
                self.running[f"{layer.name}.running_mean"] = np.zeros(c, np.float32)
                self.running[f"{layer.name}.running_var"] = np.ones(c, np.float32)
        self.plans: list = []
        self._cache: dict = {}
        self._stage = Staging(device)
        self._identity_clamp: bool | None = None     # probed once, see fold()

    # ------------------------------------------------------------------ plans

    async def plan(self, op: str, layer: LayerSpec, n: int):
        """The plan of operation `op` of `layer` at batch size `n`, built on first use."""
        key = (op, layer.name, n)
        plan = self._cache.get(key)
        if plan is None:
            size = self.sizes[self.layers.index(layer)]
            if op == "fprop":
                g = _graphs.conv_fprop(layer, n, size)
            elif op == "dgrad":
                g = _graphs.conv_dgrad(layer, n, size)
            elif op == "wgrad":
                g = _graphs.conv_wgrad(layer, n, size)
            elif op == "bn_training":
                g = _graphs.bn_training(layer, n, layer.out_size(size), epsilon=EPSILON,
                                        momentum=BN_MOMENTUM)
            elif op == "bn_backward":
                builder = (_graphs.bn_drelu_backward if layer.bn == "relu"
                           else _graphs.bn_backward)
                g = builder(layer, n, layer.out_size(size))
            elif op == "bn_inference":
                g = _graphs.bn_inference_variance(layer, n, layer.out_size(size),
                                                  epsilon=EPSILON)
            elif op == "folded":
                g = _graphs.conv_bias_act(layer, n, size)
            else:
                raise ValueError(f"Network.plan: unknown operation {op!r}")
            plan = await self.device.build(g, knobs=self.knobs)
            self._cache[key] = plan
            self.plans.append(plan)
        return plan

    async def build_training(self, n: int) -> None:
        """Build every plan a training step of batch size `n` uses."""
        for i, layer in enumerate(self.layers):
            ops = ["fprop", "wgrad"] + (["dgrad"] if i > 0 else [])
            if layer.bn is not None:
                ops += ["bn_training", "bn_backward"]
            for op in ops:
                await self.plan(op, layer, n)

    def _in_dims(self, i: int, n: int) -> tuple:
        """Dims (N, C, H, W) of layer `i`'s input at batch size `n`."""
        return (n, self.layers[i].in_channels, self.sizes[i], self.sizes[i])

    def _out_dims(self, i: int, n: int) -> tuple:
        """Dims (N, K, P, Q) of layer `i`'s convolution output at batch size `n`."""
        return (n, self.layers[i].out_channels, self.sizes[i + 1], self.sizes[i + 1])

    # ------------------------------------------------------------------ training

    async def train_step(self, x: np.ndarray, labels: np.ndarray, *,
                         update_running: bool = True):
        """Forward and backward pass of one batch, every conv and batchnorm as a plan.

        Parameters
        ----------
        x : numpy.ndarray
            Images, float32, dims (N, 1, 8, 8), C-contiguous.
        labels : numpy.ndarray
            Int labels, dims (N,).
        update_running : bool, optional
            Store the batchnorm running statistics this step computes. Default True.

        Returns
        -------
        loss : float
            Mean softmax cross-entropy of the batch.
        correct : int
            Rows whose argmax is the label.
        grads : dict of str to numpy.ndarray
            Gradient of the loss for every entry of ``params`` (new arrays).
        """
        n = len(x)
        st = self._stage
        params, running = st.resident(self.params), st.resident(self.running)
        saved = []                           # per layer: (input, conv output, bn stats)
        h = await st.put(x)
        for i, layer in enumerate(self.layers):
            y_dims = self._out_dims(i, n)
            y = st.empty(y_dims)
            await (await self.plan("fprop", layer, n)).execute(
                {"x": h, "w": params[f"{layer.name}.w"], "y": y})
            stats = None
            if layer.bn is not None:
                c = (1, layer.out_channels, 1, 1)
                a, mean, inv_var = st.empty(y_dims), st.empty(c), st.empty(c)
                next_mean, next_var = st.empty(c), st.empty(c)
                await (await self.plan("bn_training", layer, n)).execute({
                    "x": y, "scale": params[f"{layer.name}.scale"],
                    "bias": params[f"{layer.name}.bias"],
                    "running_mean": running[f"{layer.name}.running_mean"],
                    "running_var": running[f"{layer.name}.running_var"],
                    "y": a, "mean": mean, "inv_variance": inv_var,
                    "next_running_mean": next_mean, "next_running_var": next_var})
                if update_running:
                    np.copyto(self.running[f"{layer.name}.running_mean"],
                              await st.get(next_mean))
                    np.copyto(self.running[f"{layer.name}.running_var"],
                              await st.get(next_var))
                stats = (mean, inv_var)
                saved.append((h, y, stats))
                h = a
            else:
                saved.append((h, y, stats))
                h = y
        loss, d, correct = softmax_cross_entropy(await st.get(h), labels)
        d = await st.put(d)

        grads = {}
        for i in reversed(range(len(self.layers))):
            layer = self.layers[i]
            h_in, y, stats = saved[i]
            if layer.bn is not None:
                c = (1, layer.out_channels, 1, 1)
                dy, dscale, dbias = st.empty(self._out_dims(i, n)), st.empty(c), st.empty(c)
                pack = {"dy": d, "x": y, "scale": params[f"{layer.name}.scale"],
                        "mean": stats[0], "inv_variance": stats[1],
                        "dx": dy, "dscale": dscale, "dbias": dbias}
                if layer.bn == "relu":
                    pack["bias"] = params[f"{layer.name}.bias"]
                await (await self.plan("bn_backward", layer, n)).execute(pack)
                grads[f"{layer.name}.scale"] = await st.get(dscale)
                grads[f"{layer.name}.bias"] = await st.get(dbias)
                d = dy
            # wgrad and dgrad are independent: submit both, then wait for both.
            dw = st.empty(layer.w_dims)
            handles = [(await self.plan("wgrad", layer, n)).submit(
                {"dy": d, "x": h_in, "dw": dw})]
            if i > 0:
                dx = st.empty(self._in_dims(i, n))
                handles.append((await self.plan("dgrad", layer, n)).submit(
                    {"dy": d, "w": params[f"{layer.name}.w"], "dx": dx}))
            for handle in handles:
                await handle
            grads[f"{layer.name}.w"] = await st.get(dw)
            if i > 0:
                d = dx
        return loss, correct, grads

    # ------------------------------------------------------------------ evaluation

    async def predict_bn_inference(self, x: np.ndarray) -> np.ndarray:
        """Logits (N, 10) with batchnorm inference from the running statistics (eval a).

        Each convolution is a CONV_FPROP plan followed by a BN_INFERENCE_VARIANCE plan;
        the ReLU after the first batchnorm is applied on the host.
        """
        n = len(x)
        st = self._stage
        params, running = st.resident(self.params), st.resident(self.running)
        h = await st.put(x)
        for i, layer in enumerate(self.layers):
            y = st.empty(self._out_dims(i, n))
            await (await self.plan("fprop", layer, n)).execute(
                {"x": h, "w": params[f"{layer.name}.w"], "y": y})
            if layer.bn is not None:
                z = st.empty(self._out_dims(i, n))
                await (await self.plan("bn_inference", layer, n)).execute({
                    "x": y, "mean": running[f"{layer.name}.running_mean"],
                    "variance": running[f"{layer.name}.running_var"],
                    "scale": params[f"{layer.name}.scale"],
                    "bias": params[f"{layer.name}.bias"], "y": z})
                if layer.bn == "relu":       # on the host, in place (a copy on a GPU)
                    zh = await st.get(z)
                    z = await st.put(np.maximum(zh, 0.0, out=zh))
                y = z
            h = y
        return (await st.get(h)).reshape(n, -1)

    async def fold(self) -> Folded:
        """The folded network for evaluation (b) and serving, shaped for this device.

        Every layer is one CONV_FPROP_BIAS_RELU plan of its folded weights and bias where
        the device runs the identity clamp that stands for "no activation" (the CPU). On
        a device that declines it (cuDNN), a layer without ReLU is a CONV_FPROP of its
        folded weights and its bias is carried into the next layer's bias (exact: that
        convolution has no padding), or, for the last layer, into the logits.

        Returns
        -------
        Folded
            The layers with their plan operation and constants, and the logit bias
            (None where no bias reached the logits).

        Raises
        ------
        DemoError
            A bias would have to move through a padded convolution (not exact).
        """
        pairs = self.folded()
        out, carry, logit_bias = [], None, None
        for i, (layer, (w, b)) in enumerate(zip(self.layers, pairs)):
            if carry is not None:
                b, carry = (b.astype(np.float64) + carry).astype(np.float32), None
            if layer.bn == "relu" or await self._identity_clamp_supported(layer):
                out.append(FoldedLayer(layer, "folded", w, b))
                continue
            out.append(FoldedLayer(layer, "fprop", w, None))
            if i + 1 < len(self.layers):
                try:
                    carry = carry_bias(b, pairs[i + 1][0], self.layers[i + 1].padding)
                except ValueError as exc:
                    raise DemoError(f"layer '{layer.name}' has no ReLU and device "
                                    f"'{self.device.spec}' declines the identity clamp, so "
                                    f"its bias must move on, but: {exc}") from None
            else:
                logit_bias = b.reshape(-1)
        return Folded(tuple(out), logit_bias)

    async def _identity_clamp_supported(self, layer: LayerSpec) -> bool:
        """Whether the device builds `layer`'s CONV_FPROP_BIAS_RELU with the identity
        clamp (RELU_FWD clipped to the float32 range); asked once, by building it."""
        if self._identity_clamp is None:
            try:
                await self.plan("folded", layer, 1)
                self._identity_clamp = True
            except NotSupportedError:
                self._identity_clamp = False
        return self._identity_clamp

    def folded(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(weights, bias) per layer with each batchnorm folded into its convolution."""
        out = []
        for layer in self.layers:
            w = self.params[f"{layer.name}.w"]
            if layer.bn is None:
                out.append((w.copy(), np.zeros((1, layer.out_channels, 1, 1), np.float32)))
            else:
                out.append(fold_batchnorm(
                    w, self.params[f"{layer.name}.scale"], self.params[f"{layer.name}.bias"],
                    self.running[f"{layer.name}.running_mean"],
                    self.running[f"{layer.name}.running_var"], EPSILON))
        return out

    async def predict_folded(self, x: np.ndarray, folded: Folded | None = None) -> np.ndarray:
        """Logits (N, 10) with batchnorm folded into the convolutions (eval b).

        Each layer is one CONV_FPROP_BIAS_RELU plan (or CONV_FPROP, see `fold`).
        """
        folded = await self.fold() if folded is None else folded
        n = len(x)
        st = self._stage
        h = await st.put(x)
        for i, f in enumerate(folded.layers):
            y = st.empty(self._out_dims(i, n))
            pack = {"x": h, "w": await st.put(f.w), "y": y}
            if f.bias is not None:
                pack["bias"] = await st.put(f.bias)
            await (await self.plan(f.op, f.layer, n)).execute(pack)
            h = y
        logits = (await st.get(h)).reshape(n, -1)
        return logits if folded.logit_bias is None else logits + folded.logit_bias
