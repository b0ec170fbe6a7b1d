"""Host-side NumPy math of the demo: loss, optimiser, batchnorm folding, float64 reference.

Everything with a convolution or a batchnorm in the training and evaluation paths runs
through execution plans; this module holds only what is small (softmax cross-entropy, the
SGD-momentum update, folding batchnorm into convolution weights) and the float64 reference
forward pass that the finite-difference gradient check differentiates.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["softmax_cross_entropy", "SGDMomentum", "cosine_lr", "fold_batchnorm",
           "carry_bias", "reference_loss"]


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray):
    """Mean softmax cross-entropy of a batch, its gradient, and the correct count.

    Parameters
    ----------
    logits : numpy.ndarray
        Dims (N, classes) or (N, classes, 1, 1), any float dtype.
    labels : numpy.ndarray
        Int labels, dims (N,).

    Returns
    -------
    loss : float
        ``mean(-log softmax(logits)[label])``, computed in float64.
    dlogits : numpy.ndarray
        d loss / d logits, float32, the dims of `logits`.
    correct : int
        How many rows have their label as argmax.
    """
    z = np.asarray(logits, np.float64).reshape(len(labels), -1)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = float(-logp[rows, labels].mean())
    grad = np.exp(logp)
    grad[rows, labels] -= 1.0
    grad /= len(labels)
    correct = int((z.argmax(axis=1) == labels).sum())
    return loss, grad.astype(np.float32).reshape(np.shape(logits)), correct


def cosine_lr(base: float, step: int, total: int) -> float:
    """Learning rate at `step` of `total` on a cosine from `base` down to 0."""
    return base * 0.5 * (1.0 + math.cos(math.pi * step / max(total, 1)))


class SGDMomentum:
    """SGD with (heavy-ball) momentum and L2 weight decay, in place on float32 arrays.

    ``v = momentum*v + (g + weight_decay*p)``; ``p -= lr*v`` (PyTorch's convention).
    """

    def __init__(self, params: dict, *, momentum: float = 0.9, weight_decay: float = 0.0):
        self.params = params
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.velocity = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads: dict, lr: float) -> None:
        """Update every parameter that has a gradient in `grads` (a step that overflows
        float32, e.g. with --lr 1e30, gives inf / NaN weights quietly: the demo's checks
        report the run, and --quiet prints nothing but errors)."""
        with np.errstate(over="ignore", invalid="ignore"):
            self._step(grads, lr)

    def _step(self, grads: dict, lr: float) -> None:
        for name, g in grads.items():
            p, v = self.params[name], self.velocity[name]
            g = np.asarray(g, np.float32).reshape(p.shape)
            v *= self.momentum
            v += g
            if self.weight_decay:
                v += self.weight_decay * p
            p -= np.float32(lr) * v


def fold_batchnorm(w, scale, bias, mean, variance, epsilon: float):
    """Fold batchnorm inference into the convolution before it.

    ``scale*(conv(x, w) - mean)/sqrt(variance + eps) + bias == conv(x, w') + b'`` with
    ``w' = w * a`` (per output channel), ``b' = bias - a*mean``, ``a = scale/sqrt(var+eps)``.

    Parameters
    ----------
    w : numpy.ndarray
        Weights, dims (K, C, R, S).
    scale, bias, mean, variance : numpy.ndarray
        Dims (1, K, 1, 1).
    epsilon : float
        The batchnorm's epsilon.

    Returns
    -------
    w_folded : numpy.ndarray
        float32, dims (K, C, R, S).
    b_folded : numpy.ndarray
        float32, dims (1, K, 1, 1).
    """
    a = (np.asarray(scale, np.float64).reshape(-1)
         / np.sqrt(np.asarray(variance, np.float64).reshape(-1) + epsilon))
    w_f = np.asarray(w, np.float64) * a[:, None, None, None]
    b_f = np.asarray(bias, np.float64).reshape(-1) - a * np.asarray(mean, np.float64).reshape(-1)
    return w_f.astype(np.float32), b_f.reshape(1, -1, 1, 1).astype(np.float32)


def carry_bias(bias, w_next, padding: int) -> np.ndarray:
    """The bias of a layer without activation, moved into the next convolution's bias.

    ``conv(h + b, w) == conv(h, w) + t`` with ``t[k] = sum_{c,r,s} w[k, c, r, s] * b[c]``
    when the convolution has no padding, so that every tap reads ``h + b``.

    Parameters
    ----------
    bias : numpy.ndarray
        The layer's per-channel bias ``b``, dims (1, C, 1, 1).
    w_next : numpy.ndarray
        The next convolution's weights, dims (K, C, R, S).
    padding : int
        The next convolution's padding; must be 0.

    Returns
    -------
    numpy.ndarray
        ``t``, float64, dims (1, K, 1, 1).

    Raises
    ------
    ValueError
        `padding` is not 0: border taps would read the zero padding, not ``b``.
    """
    if padding:
        raise ValueError(f"carry_bias: the next convolution has padding {padding}; a bias "
                         "moves through a convolution exactly only without padding")
    return np.einsum("kcrs,c->k", np.asarray(w_next, np.float64),
                     np.asarray(bias, np.float64).reshape(-1)).reshape(1, -1, 1, 1)


# ---------------------------------------------------------------------------------------
# float64 reference forward pass (for the finite-difference check)
# ---------------------------------------------------------------------------------------

def _conv2d(x, w, stride: int, padding: int):
    """Cross-correlation in float64, dims (N, C, H, W) x (K, C, R, S) -> (N, K, P, Q)."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    r, s = w.shape[2:]
    win = sliding_window_view(x, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncpqrs,kcrs->nkpq", win, w, optimize=True)


def reference_loss(layers, params: dict, x: np.ndarray, labels: np.ndarray,
                   epsilon: float) -> float:
    """Training-mode loss (batch statistics) of the network, all in float64.

    Parameters
    ----------
    layers : sequence of LayerSpec
        The architecture (see ``_model.LAYERS``).
    params : dict of str to numpy.ndarray
        ``"<layer>.w"``, ``"<layer>.scale"``, ``"<layer>.bias"``.
    x : numpy.ndarray
        Images, dims (N, 1, 8, 8).
    labels : numpy.ndarray
        Int labels, dims (N,).
    epsilon : float
        Batchnorm epsilon.
    """
    h = np.asarray(x, np.float64)
    for layer in layers:
        h = _conv2d(h, np.asarray(params[f"{layer.name}.w"], np.float64), layer.stride,
                    layer.padding)
        if layer.bn is not None:
            mean = h.mean(axis=(0, 2, 3), keepdims=True)
            var = h.var(axis=(0, 2, 3), keepdims=True)
            h = ((h - mean) / np.sqrt(var + epsilon)
                 * np.asarray(params[f"{layer.name}.scale"], np.float64)
                 + np.asarray(params[f"{layer.name}.bias"], np.float64))
            if layer.bn == "relu":
                h = np.maximum(h, 0.0)
    loss, _, _ = softmax_cross_entropy(h, labels)
    return loss
