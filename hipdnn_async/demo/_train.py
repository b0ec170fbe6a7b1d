"""The training loop: plan-driven steps, host SGD with momentum, progress per step."""
from __future__ import annotations

import time

import numpy as np

from ._data import batches
from ._host import SGDMomentum, cosine_lr

__all__ = ["train"]


async def train(net, data, cfg, progress) -> list[dict]:
    """Train `net` for ``cfg.epochs`` epochs; return one record per epoch.

    Parameters
    ----------
    net : Network
        The network (its parameters are updated in place).
    data : Digits
        Train and test splits.
    cfg : DemoConfig
        Epochs, batch size, learning rate, momentum, weight decay, seed.
    progress : Progress
        Receives ``step(...)`` after every step and ``epoch(...)`` after every epoch.

    Returns
    -------
    list of dict
        ``epoch``, ``loss`` (mean training loss), ``train_accuracy``, ``test_accuracy``
        (batchnorm inference with the running statistics), ``lr`` (at the epoch's end)
        and ``seconds``.
    """
    n_train = len(data.x_train)
    steps_per_epoch = n_train // cfg.batch_size
    total = cfg.epochs * steps_per_epoch
    await net.build_training(cfg.batch_size)
    opt = SGDMomentum(net.params, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed + 1)
    history, step = [], 0
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        loss_sum = correct = seen = 0
        for i, idx in enumerate(batches(n_train, cfg.batch_size, rng), 1):
            loss, right, grads = await net.train_step(data.x_train[idx], data.y_train[idx])
            lr = cosine_lr(cfg.lr, step, total)
            opt.step(grads, lr)
            step += 1
            loss_sum += loss * len(idx)
            correct += right
            seen += len(idx)
            progress.step(epoch, i, steps_per_epoch, loss_sum / seen, correct / seen)
        logits = await net.predict_bn_inference(data.x_test)
        record = {"epoch": epoch, "loss": loss_sum / seen, "train_accuracy": correct / seen,
                  "test_accuracy": float((logits.argmax(1) == data.y_test).mean()),
                  "lr": lr, "seconds": time.perf_counter() - t0}
        history.append(record)
        progress.epoch(record, cfg.epochs)
    return history
