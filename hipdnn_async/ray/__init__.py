"""Scale-out on Ray: Ray Serve replicas and Ray Data actors that each own one device.

    from hipdnn_async import ray as hdray
    app = hdray.deployment(model_factory, device="gpu:0", max_batch_size=64,
                           max_delay_ms=2.0, num_replicas=2)       # a Ray Serve application
    ds.map_batches(hdray.Predictor, fn_constructor_args=(model_factory,),
                   compute=ray.data.ActorPoolStrategy(size=2), num_gpus=1)   # Ray Data

``model_factory(dev)`` is an async callable returning the model: an async callable from a
batch ``np.ndarray`` (N, ...) to outputs (N, ...) (an ``hd.DynamicBatcher`` is one, and so
is ``hipdnn_async.demo.digits_model(FILE)``'s model). Optionally the model has
``sample_shape`` and ``dtype`` (requests are then checked before they are batched, and a
single sample is accepted), ``__aenter__``/``__aexit__`` or ``aclose`` (entered at start-up,
left at shutdown), ``warmup()`` (awaited before the replica reports healthy) and
``metrics()`` (exported through Ray's metrics API).

Needs the ``ray`` extra (``pip install 'hipdnn_async[ray]'``: ``ray[serve,data]`` 2.60).
Ray is imported when first needed, so this module imports without it; ``deployment`` then
raises an ``ImportError`` naming the extra.
"""
from __future__ import annotations

from ._deps import RAY_REQUIREMENT, require_ray
from ._predictor import Predictor
from ._replica import ModelReplica, deployment

__all__ = ["deployment", "Predictor", "ModelReplica", "require_ray", "RAY_REQUIREMENT"]
