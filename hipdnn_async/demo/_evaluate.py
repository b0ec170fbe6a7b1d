"""Evaluation on the test split: (a) batchnorm inference, (b) batchnorm folded into convs."""
from __future__ import annotations

import time

import numpy as np

__all__ = ["evaluate"]


async def evaluate(net, data) -> dict:
    """Evaluate the test split both ways and compare the predictions.

    (a) every convolution is a CONV_FPROP plan followed by a BN_INFERENCE_VARIANCE plan
    on the running statistics; (b) each batchnorm is folded into its convolution's
    weights and bias and every layer is one CONV_FPROP_BIAS_RELU plan (a CONV_FPROP
    whose bias moves on, where the device declines the identity clamp: ``Network.fold``).

    Returns
    -------
    dict
        ``accuracy`` (``{"bn_inference", "folded"}``), ``predictions`` (same keys, lists
        of int), ``predictions_identical``, ``mismatches``, ``max_logit_diff`` (largest
        absolute difference of the two logit sets), ``seconds``, ``folded_patterns``
        (the plan pattern of each layer in (b)), and ``folded`` (the ``Folded`` network,
        for serving; not JSON).
    """
    t0 = time.perf_counter()
    logits_a = await net.predict_bn_inference(data.x_test)
    folded = await net.fold()
    logits_b = await net.predict_folded(data.x_test, folded)
    pred_a, pred_b = logits_a.argmax(1), logits_b.argmax(1)
    return {
        "accuracy": {"bn_inference": float((pred_a == data.y_test).mean()),
                     "folded": float((pred_b == data.y_test).mean())},
        "predictions": {"bn_inference": pred_a.tolist(), "folded": pred_b.tolist()},
        "predictions_identical": bool(np.array_equal(pred_a, pred_b)),
        "mismatches": int((pred_a != pred_b).sum()),
        "max_logit_diff": float(np.abs(logits_a - logits_b).max()),
        "seconds": time.perf_counter() - t0,
        "folded_patterns": folded.patterns,
        "folded": folded,
    }
