"""Start-up check: plan gradients against float64 finite differences on a tiny batch."""
from __future__ import annotations

import numpy as np

from ._common import DemoError
from ._host import reference_loss
from ._model import EPSILON

__all__ = ["check_gradients"]


async def check_gradients(net, x: np.ndarray, labels: np.ndarray, *, seed: int = 0,
                          directions: int = 3, step: float = 1e-6, rtol: float = 2e-3,
                          atol: float = 1e-5) -> dict:
    """Compare the plans' gradients with central differences of the float64 loss.

    For each parameter tensor p and a few random unit directions u, the directional
    derivative ``<grad_p, u>`` from one plan-driven training step is compared with
    ``(L(p + h u) - L(p - h u)) / 2h`` of the float64 host loss (batch statistics).
    The running statistics are left untouched.

    Parameters
    ----------
    net : Network
        The network, at its initial weights.
    x, labels : numpy.ndarray
        A tiny batch: images (n, 1, 8, 8) float32, int labels (n,).
    seed : int, optional
        Seed of the directions.
    directions : int, optional
        Random directions per parameter tensor. Default 3.
    step : float, optional
        Finite-difference step h. Default 1e-6; a direction that disagrees is tried
        again with h / 10 before it counts as a failure.
    rtol, atol : float, optional
        Allowed ``|fd - analytic| <= atol + rtol * max(|fd|, |analytic|)``.

    Returns
    -------
    dict
        ``ok``, ``batch``, ``checks`` (count), ``max_rel_err``, ``loss_plans``,
        ``loss_float64``, and ``worst`` (the parameter with the largest error).

    Notes
    -----
    The loss is piecewise smooth: a central difference whose step carries a ReLU input
    across 0 (many inputs share one value over the digits' flat background) is off by
    up to a few percent, at h = 1e-4 on some seeds. A wrong gradient disagrees at every
    step size, so a second, smaller step separates the two.

    Raises
    ------
    DemoError
        Some directional derivative disagrees: the run must not go on.
    """
    loss, _, grads = await net.train_step(x, labels, update_running=False)
    params64 = {k: v.astype(np.float64) for k, v in net.params.items()}
    loss64 = reference_loss(net.layers, params64, x, labels, EPSILON)
    rng = np.random.default_rng(seed)
    checks, worst, failures = 0, (0.0, None), []
    for name, g in grads.items():
        base = params64[name]
        for _ in range(directions):
            u = rng.standard_normal(base.shape)
            u /= np.linalg.norm(u)
            an = float(np.sum(g.astype(np.float64) * u))
            for h in (step, step / 10):
                fd = _central_difference(net.layers, params64, name, u, h, x, labels)
                err = abs(fd - an)
                if err <= atol + rtol * max(abs(fd), abs(an)):
                    break
            else:
                failures.append(f"{name}: finite difference {fd:.6g}, plans {an:.6g}")
            rel = err / max(abs(fd), abs(an), 1e-12)
            checks += 1
            if rel > worst[0]:
                worst = (rel, name)
    result = {"ok": not failures and abs(loss - loss64) <= 1e-4 * max(1.0, abs(loss64)),
              "batch": int(len(x)), "checks": checks, "max_rel_err": worst[0],
              "worst": worst[1], "loss_plans": float(loss), "loss_float64": float(loss64)}
    if not result["ok"]:
        detail = "; ".join(failures) or (f"loss {loss:.8g} from the plans vs "
                                         f"{loss64:.8g} in float64")
        raise DemoError(f"gradient check failed on a batch of {len(x)}: {detail}; "
                        "the training would be wrong, so the run stops here")
    return result


def _central_difference(layers, params64, name, u, h, x, labels) -> float:
    """(L(p + h u) - L(p - h u)) / 2h for parameter `name`, in float64."""
    base = params64[name]
    try:
        params64[name] = base + h * u
        plus = reference_loss(layers, params64, x, labels, EPSILON)
        params64[name] = base - h * u
        minus = reference_loss(layers, params64, x, labels, EPSILON)
    finally:
        params64[name] = base
    return (plus - minus) / (2 * h)
