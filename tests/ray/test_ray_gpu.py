"""GPU replicas and actors (run on a GPU machine; skipped here): a Serve replica and a
Ray Data actor with ``num_gpus=1`` open the GPU Ray assigned them, and their answers equal
the local CPU ``plan.execute`` evaluation within float32 tolerances."""
import numpy as np
import pytest
from ray_support import ray_or_skip

import hipdnn_async as hd

pytestmark = [pytest.mark.ray, pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")]

# GPU float32 convolutions (no TF32) against the CPU's: same math, other summation order.
GPU_RTOL, GPU_ATOL = 1e-4, 1e-4


def _gpu_or_skip():
    ray = ray_or_skip()
    if not [d for d in hd.devices() if d != "cpu"]:
        pytest.skip("no GPU runtime (CUDA/cuDNN or HIP/MIOpen) on this machine")
    if ray.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("Ray found no GPU on this node")
    return ray


def test_gpu_replica_serves_on_the_gpu_ray_assigned(ray_cluster, digits_file, digits_images,
                                                     digits_reference):
    _gpu_or_skip()
    from ray import serve

    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model
    app = hdray.deployment(digits_model(digits_file), device="gpu:0", num_replicas=1,
                           ray_actor_options={"num_cpus": 0.5})
    handle = serve.run(app, name="digits_gpu", route_prefix="/digits_gpu")
    try:
        info = handle.info.remote().result(timeout_s=60)
        assert info["device"].endswith(":0") and info["device"] != "cpu"
        assert len(info["ray_gpu_ids"]) == 1                 # Ray assigned exactly one
        images, _ = digits_images
        y = handle.remote(images[:200]).result(timeout_s=60)
        np.testing.assert_allclose(y, digits_reference[:200], rtol=GPU_RTOL, atol=GPU_ATOL)
        assert (y.argmax(1) == digits_reference[:200].argmax(1)).all()
        replies = [r.result(timeout_s=60) for r in [handle.remote(images[i])
                                                     for i in range(500)]]
        np.testing.assert_allclose(np.stack(replies), digits_reference[:500], rtol=GPU_RTOL,
                                   atol=GPU_ATOL)
    finally:
        serve.delete("digits_gpu")


def test_predictor_with_num_gpus_1_runs_on_the_gpu(ray_cluster, digits_file, digits_images,
                                                   digits_reference):
    ray = _gpu_or_skip()
    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model
    images, _ = digits_images
    ds = ray.data.from_numpy(images)
    rows = ds.map_batches(hdray.Predictor, fn_constructor_args=(digits_model(digits_file),),
                          compute=ray.data.ActorPoolStrategy(size=1),
                          num_gpus=1, batch_size=256).take_all()
    got = np.stack([r["outputs"] for r in rows])
    assert got.shape == (len(images), 10)
    # One block, one actor: rows keep their order.
    np.testing.assert_allclose(got, digits_reference, rtol=GPU_RTOL, atol=GPU_ATOL)
