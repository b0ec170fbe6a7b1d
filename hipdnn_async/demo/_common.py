"""Shared pieces of the demo: its error type and its settings."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DemoError", "DemoConfig"]


class DemoError(RuntimeError):
    """A check of the demo failed (gradients, agreement, accuracy) or a need is missing."""


@dataclass(frozen=True)
class DemoConfig:
    """Settings of one demo run (the command-line options, parsed).

    Parameters
    ----------
    epochs : int
        Passes over the training split. Default 8.
    batch_size : int
        Training batch size; the last partial batch of an epoch is dropped. Default 32.
    device : str
        ``"cpu"``, ``"gpu:N"``, ``"cuda:N"`` or ``"hip:N"``.
    seed : int
        Seeds the train/test split, the initial weights and the batch order.
    benchmarking : bool
        Build every plan with ``global.benchmarking = 1`` (tuned once, kept in the perf db).
    lr, momentum, weight_decay : float
        SGD with momentum; the learning rate follows a cosine from ``lr`` to 0.
    clients, rounds : int
        Serving: concurrent clients, and images each one sends in turn.
    max_batch_size : int
        Serving: largest batch of the dynamic batchers.
    max_delay_ms : float
        Serving: how long the first waiting request waits for others (ms).
    min_accuracy : float
        Test accuracy under which the run fails (fraction).
    perfdb : str or None
        Perf db file; default the per-user one.
    save : str or None
        Write the trained weights there after evaluation (``_saved.save_weights``).
    profile : str or None
        Write the trace of the serving phase there (trace-event JSON, ``dev.profile()``).
    """

    epochs: int = 8
    batch_size: int = 32
    device: str = "cpu"
    seed: int = 0
    benchmarking: bool = False
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 1e-2
    clients: int = 256
    rounds: int = 8
    max_batch_size: int = 64
    max_delay_ms: float = 2.0
    min_accuracy: float = 0.97
    perfdb: str | None = None
    save: str | None = None
    profile: str | None = None

    @property
    def knobs(self) -> dict | None:
        """Knob settings for every build."""
        return {"global.benchmarking": 1} if self.benchmarking else None
