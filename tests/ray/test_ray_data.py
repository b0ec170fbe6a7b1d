"""Ray Data: ``Dataset.map_batches(Predictor, ...)`` over 10,000 digit images equals the
local ``plan.execute`` evaluation, row for row (matched by id, not by position)."""
import time
import warnings

import numpy as np
import pytest
from ray_support import ATOL, RTOL, ray_or_skip, ray_processes

# Ray Data's own internals warn about its deprecated settings (e.g. use_push_based_shuffle).
pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")]

N_IMAGES = 10_000
BLOCKS = 4                      # >= the actor count, so both actors get work


def _dataset(images, ids):
    """A dataset of columns ``id`` (int64) and ``data`` (tensor (1, 8, 8)), in blocks."""
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray
    tables = [pa.table({"id": pa.array(ids[s]), "data": ArrowTensorArray.from_numpy(images[s])})
              for s in np.array_split(np.arange(len(ids)), BLOCKS)]
    return ray.data.from_arrow(tables)


def test_map_batches_over_10000_images_equals_local_evaluation(
        ray_cluster, digits_file, digits_images, digits_reference):
    ray = ray_or_skip()
    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model
    images, labels = digits_images
    rng = np.random.default_rng(2024)
    pick = rng.integers(0, len(images), N_IMAGES)      # image of each dataset row
    ids = rng.permutation(N_IMAGES).astype(np.int64)   # row ids, in no particular order
    ds = _dataset(images[pick], ids)
    out = ds.map_batches(hdray.Predictor, fn_constructor_args=(digits_model(digits_file),),
                         compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1, batch_size=500)
    rows = out.take_all()
    assert len(rows) == N_IMAGES
    assert set(rows[0]) == {"id", "outputs"}           # input dropped, other columns kept
    got_ids = np.array([r["id"] for r in rows])
    got = np.stack([r["outputs"] for r in rows])
    assert sorted(got_ids.tolist()) == sorted(ids.tolist())   # each row exactly once
    image_of_id = dict(zip(ids.tolist(), pick.tolist()))
    expected = digits_reference[[image_of_id[i] for i in got_ids.tolist()]]
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    accuracy = (got.argmax(1) == labels[[image_of_id[i] for i in got_ids.tolist()]]).mean()
    assert accuracy > 0.9


def test_map_batches_with_a_malformed_column_fails_with_the_reason(ray_cluster, digits_file):
    ray = ray_or_skip()
    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model
    ds = _dataset(np.zeros((8, 1, 8, 7), np.float32), np.arange(8))
    with warnings.catch_warnings():
        # Ray Data warns that 4 small blocks cannot keep 2 actors busy; not our concern.
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises((ray.exceptions.RayTaskError, Exception),
                           match=r"needs shape \(N, 1, 8, 8\); got \(\d+, 1, 8, 7\)"):
            ds.map_batches(hdray.Predictor, fn_constructor_args=(digits_model(digits_file),),
                           compute=ray.data.ActorPoolStrategy(size=1),
                           num_cpus=1, batch_size=4).take_all()


@pytest.mark.parametrize("cyclic", [False, True])
def test_no_map_worker_outlives_the_cluster(ray_cluster_now, stop_ray_cluster, digits_file,
                                            cyclic):
    """Fresh-user review F9: ``ray::MapWorker(MapBatches(Predictor))`` processes were found
    reparented to PID 1 long after their cluster was gone. Run Ray Data through the
    Predictor (two actors), stop the cluster as the fixtures do, and count this run's
    MapWorker processes (every Ray process inherits conftest's RUN_MARK_ENV): none may be
    left, nor any other process of this run's Ray, once Ray has had time to exit."""
    ray = ray_or_skip()
    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model
    predictor = hdray.Predictor
    if cyclic:
        # New-user review F1: a Predictor in a reference cycle is collected late (at exit,
        # after Ray's shutdown); its MapWorkers then hung for good.
        class CyclicPredictor(hdray.Predictor):     # local: Ray pickles it by value
            def __init__(self, factory):
                super().__init__(factory)
                self.me = self
        predictor = CyclicPredictor
    ds = _dataset(np.zeros((64, 1, 8, 8), np.float32), np.arange(64))
    rows = ds.map_batches(predictor, fn_constructor_args=(digits_model(digits_file),),
                          compute=ray.data.ActorPoolStrategy(size=2),
                          num_cpus=1, batch_size=16).take_all()
    assert len(rows) == 64
    assert ray_processes("raylet"), "the count does not see this run's Ray processes"
    stop_ray_cluster()
    for name, timeout_s in (("MapWorker", 60), ("", 90)):   # the workers, then all of Ray
        deadline = time.monotonic() + timeout_s
        while ray_processes(name) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = ray_processes(name)
        assert not left, f"{timeout_s} s after ray.shutdown() these are still alive: {left}"
