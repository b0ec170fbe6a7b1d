"""The ``bn_rows`` operations both row families are tested with (test_bn_rows.py,
test_bn_rows_last.py): (name, op, act, lower, upper); where the channels-last training
pivot samples (pivot_pixels)."""
import numpy as np

from hipdnn_async.providers.cpu import _kernels as k

OPS = [("training", k.BN_ROWS_TRAINING, False, 0.0, np.inf),
       ("training_relu", k.BN_ROWS_TRAINING, True, 0.0, np.inf),
       ("training_clamp", k.BN_ROWS_TRAINING, True, -0.25, 0.5),
       ("inference", k.BN_ROWS_INFERENCE, False, 0.0, np.inf),
       ("inference_relu", k.BN_ROWS_INFERENCE, True, 0.0, np.inf),
       ("inference_clamp", k.BN_ROWS_INFERENCE, True, -0.25, 0.5),
       ("backward", k.BN_ROWS_BACKWARD, False, 0.0, np.inf),
       ("backward_drelu", k.BN_ROWS_BACKWARD, True, 0.0, np.inf),
       ("backward_drelu_clipped", k.BN_ROWS_BACKWARD, True, 0.1, 0.5)]


def op_vectors(op, act, vec, outs):
    """The per-channel keyword arguments of ``bn_rows`` for ``op``: scale, bias, mean,
    variance, inv_variance from ``vec``; mean_out, variance_out, dscale, dbias into
    ``outs`` (the output vectors, written). Backward takes the forward's bias only under
    ``act`` (RELU_BWD of the recomputed forward)."""
    if op == k.BN_ROWS_TRAINING:
        return dict(scale=vec["scale"], bias=vec["bias"], mean_out=outs["mean_out"],
                    variance_out=outs["variance_out"])
    if op == k.BN_ROWS_INFERENCE:
        return dict(scale=vec["scale"], bias=vec["bias"], mean=vec["mean"],
                    variance=vec["variance"])
    kw = dict(scale=vec["scale"], mean=vec["mean"], inv_variance=vec["inv_variance"],
              dscale=outs["dscale"], dbias=outs["dbias"])
    if act:
        kw["bias"] = vec["bias"]
    return kw


def pivot_pixels(n, spatial, group):
    """The pixels (image * spatial + s) of group ``group`` (0, 1, 2) of the channels-last
    training pivot's samples in a job of ``n`` images of ``spatial`` pixels
    (``bn_pivot_samples``), sorted, repeats dropped."""
    return sorted(set(k.bn_pivot_samples(n, spatial)[group]))
