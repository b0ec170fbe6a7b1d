"""``hipdnn-async demo``: a CNN trained, evaluated and served on handwritten digits.

Every convolution and batchnorm of the network runs as a hipdnn_async execution plan (all
nine patterns of the library are used); only the softmax cross-entropy, the SGD-momentum
update and small host glue are NumPy. On a GPU device (``--device cuda:0``) that NumPy is
staged through device arrays (``_staging``); on the CPU plans take it directly. Needs
scikit-learn (``pip install -e '.[demo]'``); matplotlib for ``--plot``.

``--save FILE`` writes the trained weights; ``digits_model(FILE)`` turns them into a model
factory for ``hipdnn_async.ray`` (and ``hipdnn-async serve --model FILE``).
"""
from ._main import main
from ._saved import DigitsModel, digits_model, load_weights

__all__ = ["main", "digits_model", "DigitsModel", "load_weights"]
