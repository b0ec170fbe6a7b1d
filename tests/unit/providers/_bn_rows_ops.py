"""The ``bn_rows`` operations both row families are tested with (test_bn_rows.py,
test_bn_rows_last.py): (name, op, act, lower, upper)."""
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
