"""The data: scikit-learn's copy of the UCI handwritten digits, split and normalised."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._common import DemoError

__all__ = ["Digits", "load_digits_split", "batches"]


@dataclass(frozen=True)
class Digits:
    """Train and test splits, NCHW float32 images (N, 1, 8, 8) and int64 labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    pixel_mean: float
    pixel_std: float

    @property
    def classes(self) -> int:
        return 10


# scikit-learn's digits: 1,797 images; train_test_split's test_size=0.2 holds out
# ceil(0.2 * 1797) = 360 of them (sklearn.model_selection._split._validate_shuffle_split)
IMAGES = 1797
TRAIN_IMAGES = IMAGES - 360


def load_digits_split(seed: int, *, test_fraction: float = 0.2) -> Digits:
    """Load the 1,797 8x8 digits (no download) and split them, stratified, with `seed`.

    Parameters
    ----------
    seed : int
        Seed of the split.
    test_fraction : float, optional
        Share of the images held out for testing. Default 0.2 (360 images).

    Returns
    -------
    Digits
        Images normalised by the training split's pixel mean and standard deviation.

    Raises
    ------
    DemoError
        scikit-learn is not installed.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise DemoError("the demo needs scikit-learn (its digits data set): "
                        "pip install -e '.[demo]'") from None
    data = load_digits()
    images = data.images.astype(np.float64)          # (1797, 8, 8), values 0..16
    x_tr, x_te, y_tr, y_te = train_test_split(images, data.target, test_size=test_fraction,
                                              random_state=seed, stratify=data.target)
    mean, std = float(x_tr.mean()), float(x_tr.std())

    def prep(x):
        return np.ascontiguousarray(((x - mean) / std)[:, None], dtype=np.float32)

    return Digits(prep(x_tr), y_tr.astype(np.int64), prep(x_te), y_te.astype(np.int64),
                  mean, std)


def batches(n: int, batch_size: int, rng: np.random.Generator):
    """Yield index arrays of full batches over a fresh permutation of ``range(n)``."""
    order = rng.permutation(n)
    for lo in range(0, n - batch_size + 1, batch_size):
        yield order[lo:lo + batch_size]
