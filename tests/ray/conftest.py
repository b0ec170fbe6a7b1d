"""Shared fixtures of the Ray tests: one local Ray cluster on 127.0.0.1 with 2 CPUs for
all of them (starting Ray and Serve takes ~10 s on 2 cores, so it is started once),
a trained digits model file, and its local evaluation by ``plan.execute``.

Tests that need Ray are marked ``ray`` and skip with a reason when the ``ray`` extra is
not installed; the others (request parsing, the saved model, the Predictor without Ray)
always run.
"""
import os
import uuid

import numpy as np
import pytest
from ray_support import RUN_MARK_ENV, LOOPBACK, free_port, local_logits, ray_or_skip

from hipdnn_async.ray._deps import loopback_environment

# Before Ray is imported anywhere: keep every Ray process on the loopback address and
# switch off Ray's usage report (it would probe cloud metadata addresses).
os.environ.update(loopback_environment())
# Two shared cores answer Serve's queue-length probes slowly; Serve's default deadline
# (0.1 s) then logs a warning per request.
os.environ.setdefault("RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S", "1.0")
# Every Ray process of this test run inherits this mark (ray_support.ray_processes finds
# them), so a test can tell that none outlives the cluster (fresh-user review F9).
os.environ.setdefault(RUN_MARK_ENV, uuid.uuid4().hex)


_CLUSTER: dict = {}                      # {"http": base URL} while the cluster is up
_HERE = os.path.dirname(os.path.abspath(__file__))


def _start_cluster() -> None:
    ray = ray_or_skip()
    from ray import serve
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             _node_ip_address=LOOPBACK, log_to_driver=False)
    # The loopback settings took: the node (hence every Ray server) is on 127.0.0.1.
    assert ray.util.get_node_ip_address() == LOOPBACK
    port = free_port()
    serve.start(http_options={"host": LOOPBACK, "port": port})
    _CLUSTER["http"] = f"http://{LOOPBACK}:{port}"


def _stop_cluster() -> None:
    if not _CLUSTER:
        return
    _CLUSTER.clear()
    import ray
    from ray import serve
    try:
        serve.shutdown()
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray (2 CPUs, no dashboard, 127.0.0.1) with Serve's HTTP proxy started.

    Started by the first test that asks and shared by all (module scope only so that it
    can be started again should a Ray test follow others); stopped once the Ray tests are
    done (``pytest_runtest_teardown``). Returns a dict: ``http`` (the proxy's base URL).
    """
    ray_or_skip()
    if not _CLUSTER:
        _start_cluster()
    return _CLUSTER


@pytest.fixture
def ray_cluster_now():
    """As ``ray_cluster``, started again for each test that asks if it was stopped: for
    tests that stop it themselves (a module-scoped fixture is not run again)."""
    ray_or_skip()
    if not _CLUSTER:
        _start_cluster()
    return _CLUSTER


@pytest.fixture
def stop_ray_cluster():
    """A function that stops the shared cluster now (Serve, then Ray); a later
    ``ray_cluster`` starts it again."""
    return _stop_cluster


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # An idle Ray with Serve costs ~40% of a core: stop it as soon as the next test is not
    # a Ray test, so that the rest of the suite on a 2-core machine does not pay for it.
    # trylast: after the module fixtures' teardown (serve.delete of their applications).
    if _CLUSTER and (nextitem is None
                     or not os.path.abspath(str(nextitem.path)).startswith(_HERE + os.sep)):
        _stop_cluster()


def pytest_sessionfinish(session, exitstatus):
    _stop_cluster()


@pytest.fixture(scope="session")
def digits_file(tmp_path_factory):
    """A digits model trained for one epoch by ``hipdnn-async demo --save FILE``."""
    from hipdnn_async.demo import main
    path = str(tmp_path_factory.mktemp("digits") / "digits.npz")
    rc = main(["--epochs", "1", "--clients", "2", "--rounds", "1", "--min-accuracy", "0.8",
               "--save", path, "--quiet"])
    assert rc == 0 and os.path.exists(path)
    return path


@pytest.fixture(scope="session")
def digits_images():
    """All 1,797 raw digit images (N, 1, 8, 8) float32, pixel values 0..16, and labels."""
    from sklearn.datasets import load_digits
    d = load_digits()
    return d.images.astype(np.float32)[:, None], d.target.astype(np.int64)


@pytest.fixture(scope="session")
def digits_reference(digits_file, digits_images):
    """Local logits (1797, 10) of every digit image; the model's accuracy is checked."""
    images, labels = digits_images
    logits = local_logits(digits_file, images)
    assert (logits.argmax(1) == labels).mean() > 0.9     # a trained model, not noise
    return logits
