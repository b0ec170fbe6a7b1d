"""Ray Serve: the demo's digits model from two CPU replicas, by handle and over HTTP.

Every reply is compared with the local ``plan.execute`` evaluation of the same saved
network (``conftest.local_logits``). The tests share one application (deploying costs
~5 s here) and run in file order: the replica-killing and shutdown tests come last.
"""
import io
import json
import re
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import hipdnn_async as hd

from ray_support import ATOL, RTOL, ray_or_skip, wait_until

pytestmark = pytest.mark.ray

APP = "digits_test"
DEPLOYMENT = "HipdnnModel"
REPLICAS = 2
RESULT_TIMEOUT_S = 60          # bound on any one reply


@pytest.fixture(scope="module")
def app(ray_cluster, digits_file):
    """The digits model deployed with 2 replicas; yields (handle, base URL)."""
    ray_or_skip()
    from ray import serve

    from hipdnn_async import ray as hdray
    from hipdnn_async.demo import digits_model
    application = hdray.deployment(digits_model(digits_file), device="cpu",
                                   max_batch_size=32, max_delay_ms=2.0,
                                   num_replicas=REPLICAS,
                                   ray_actor_options={"num_cpus": 0.5},
                                   graceful_shutdown_timeout_s=30)
    handle = serve.run(application, name=APP, route_prefix="/digits_test",
                       logging_config={"enable_access_log": False, "log_level": "WARNING"})
    try:
        yield handle, ray_cluster["http"] + "/digits_test"
    finally:
        if APP in serve.status().applications:
            serve.delete(APP)


def _post(url, body: bytes, content_type: str, *, accept=None, method="POST"):
    headers = {"Content-Type": content_type}
    if accept:
        headers["Accept"] = accept
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=RESULT_TIMEOUT_S) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers.get("Content-Type"), e.read()


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------
# Round trips equal the local evaluation
# ---------------------------------------------------------------------------------------

def test_handle_round_trip_equals_local_plans(app, digits_images, digits_reference):
    handle, _ = app
    images, _ = digits_images
    y = handle.remote(images[:100]).result(timeout_s=RESULT_TIMEOUT_S)
    assert y.shape == (100, 10) and y.dtype == np.float32
    np.testing.assert_allclose(y, digits_reference[:100], rtol=RTOL, atol=ATOL)
    # One sample (1, 8, 8) in, one row of logits (10,) out: the request's shape kept.
    one = handle.remote(images[7]).result(timeout_s=RESULT_TIMEOUT_S)
    assert one.shape == (10,)
    np.testing.assert_allclose(one, digits_reference[7], rtol=RTOL, atol=ATOL)
    # Integer pixels are numbers too: converted to the model's float32.
    ints = handle.predict.remote(images[:3].astype(np.int64)).result(timeout_s=RESULT_TIMEOUT_S)
    np.testing.assert_allclose(ints, digits_reference[:3], rtol=RTOL, atol=ATOL)


def test_request_larger_than_max_batch_size_is_split_and_joined_in_order(
        app, digits_images, digits_reference):
    handle, _ = app
    images, _ = digits_images
    y = handle.remote(images[:150]).result(timeout_s=RESULT_TIMEOUT_S)  # 32+32+32+32+22
    np.testing.assert_allclose(y, digits_reference[:150], rtol=RTOL, atol=ATOL)


def test_http_json_and_npy_round_trips_equal_local_plans(app, digits_images, digits_reference):
    _, url = app
    images, _ = digits_images
    status, ctype, body = _post(url, json.dumps(images[:20].tolist()).encode(),
                                "application/json")
    assert status == 200 and ctype.startswith("application/json")
    doc = json.loads(body)
    assert doc["shape"] == [20, 10] and doc["dtype"] == "float32"
    np.testing.assert_allclose(np.asarray(doc["outputs"], np.float32), digits_reference[:20],
                               rtol=RTOL, atol=ATOL)
    status, _, body = _post(url, json.dumps({"inputs": images[3].tolist()}).encode(),
                            "application/json")
    assert status == 200
    np.testing.assert_allclose(np.asarray(json.loads(body)["outputs"], np.float32),
                               digits_reference[3], rtol=RTOL, atol=ATOL)
    status, ctype, body = _post(url, _npy(images[20:60]), "application/x-npy")
    assert status == 200 and ctype == "application/x-npy"
    y = np.load(io.BytesIO(body), allow_pickle=False)
    assert y.shape == (40, 10)
    np.testing.assert_allclose(y, digits_reference[20:60], rtol=RTOL, atol=ATOL)
    # JSON in, .npy out on request.
    status, ctype, body = _post(url, json.dumps(images[:2].tolist()).encode(),
                                "application/json", accept="application/x-npy")
    assert status == 200 and ctype == "application/x-npy"
    np.testing.assert_allclose(np.load(io.BytesIO(body)), digits_reference[:2], rtol=RTOL,
                               atol=ATOL)


def test_http_get_describes_the_input(app):
    _, url = app
    with urllib.request.urlopen(url, timeout=RESULT_TIMEOUT_S) as r:
        info = json.loads(r.read())
    assert info["sample_shape"] == [1, 8, 8] and info["dtype"] == "float32"
    assert info["device"] == "cpu" and info["max_batch_size"] == 32


# ---------------------------------------------------------------------------------------
# Load: 1,000 concurrent requests across 2 replicas
# ---------------------------------------------------------------------------------------

def test_1000_concurrent_requests_across_two_replicas_all_correct(
        app, digits_images, digits_reference):
    handle, _ = app
    images, _ = digits_images
    rng = np.random.default_rng(13)
    idx = rng.integers(0, len(images), 1000)
    before = _replica_metrics(handle)
    t0 = time.monotonic()
    responses = [handle.remote(images[i]) for i in idx]        # all sent before any reply
    replies = [r.result(timeout_s=RESULT_TIMEOUT_S) for r in responses]
    assert time.monotonic() - t0 < 180
    got = np.stack(replies)
    np.testing.assert_allclose(got, digits_reference[idx], rtol=RTOL, atol=ATOL)
    after = _replica_metrics(handle)
    # Per-replica accounting holds only for the replicas that counted it all.
    assert set(after) == set(before), (f"replicas replaced during the load: {sorted(before)} "
                                       f"-> {sorted(after)} (Serve: {_replica_states()})")
    served = {k: after[k]["requests"] - before[k]["requests"] for k in after}
    assert sum(served.values()) == 1000
    assert len([n for n in served.values() if n > 0]) == REPLICAS   # both replicas served
    # Requests were coalesced: fewer model calls than requests.
    batches = sum(after[k]["batches"] - before[k]["batches"] for k in after)
    assert batches < 1000


def _replica_metrics(handle, timeout_s: float = 90) -> dict:
    """metrics() of every live replica of the deployment, by replica id.

    Serve routes each call to one replica (the lower queue length of two, from its
    router's cache); which one is not the caller's to pick. So bursts of concurrent calls
    are sent, with pauses that let the cache refresh, until every live replica (Ray's
    named replica actors, whose names end with the id metrics() reports) has answered;
    the test fails after `timeout_s` naming who answered. Counters only grow: each
    replica's latest answer is kept.
    """
    seen: dict = {}
    deadline = time.monotonic() + timeout_s
    while True:
        for m in [r.result(timeout_s=RESULT_TIMEOUT_S)
                  for r in [handle.metrics.remote() for _ in range(16)]]:
            if m["requests"] >= seen.get(m["replica"], {"requests": -1})["requests"]:
                seen[m["replica"]] = m
        live = _replica_ids()
        if live and live <= seen.keys():
            return {k: seen[k] for k in sorted(live)}
        if time.monotonic() > deadline:
            pytest.fail(f"after {timeout_s} s metrics() had reached replicas {sorted(seen)}; "
                        f"the live ones are {sorted(live)} (Serve: {_replica_states()})")
        time.sleep(0.5)


def _replica_ids() -> set:
    """Ids of the deployment's live replica actors ('SERVE_REPLICA::app#deployment#id')."""
    import ray
    prefix = f"SERVE_REPLICA::{APP}#{DEPLOYMENT}#"
    return {a["name"][len(prefix):] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(prefix)}


def _replica_states() -> dict:
    from ray import serve
    status = serve.status().applications.get(APP)
    return {} if status is None else dict(status.deployments[DEPLOYMENT].replica_states)


def test_replica_metrics_count_batches_and_latencies(app, digits_images):
    handle, _ = app
    images, _ = digits_images
    handle.remote(images[:10]).result(timeout_s=RESULT_TIMEOUT_S)
    ms = _replica_metrics(handle)
    assert len(ms) == REPLICAS
    for m in ms.values():
        assert m["device"] == "cpu" and m["application"] == APP
        assert m["rows"] >= m["requests"] and m["batches"] >= 1
        assert 0 < m["mean_batch_size"] <= 32
        assert m["exec_ms"]["p99"] >= m["exec_ms"]["p50"] > 0
        # The model's own metrics: each layer's DynamicBatcher.
        assert set(m["model"]) == {"conv1", "conv2", "classifier"}
        assert m["model"]["conv1"]["rows"] > 0


def test_replica_profile_returns_a_trace_of_what_it_served(app, digits_images):
    """``handle.profile.remote(seconds)``: the replica records its device while requests
    run and returns the trace: valid trace-event JSON whose batches hold rows of the
    requests and lead to executions of the model's layers."""
    from hipdnn_async.profiler import check_trace
    handle, _ = app
    images, _ = digits_images
    pending = handle.profile.remote(1.5)
    # requests throughout the profile's window (not one burst at its start: under load the
    # burst could end before the replica opened its profile, or go to another replica)
    end = time.monotonic() + 1.4
    while time.monotonic() < end:
        replies = [handle.remote(images[i:i + 4]) for i in range(0, 32, 4)]
        for r in replies:
            r.result(timeout_s=RESULT_TIMEOUT_S)
    trace = pending.result(timeout_s=RESULT_TIMEOUT_S)
    assert check_trace(trace) == []
    assert trace["otherData"]["replica"]["device"] == "cpu"
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    executions = [e for e in slices if e["cat"] == "execution"]
    batches = [e for e in slices if e["cat"] == "batch"]
    assert executions and batches
    assert {e["name"] for e in executions} <= {"conv1.folded", "conv2.folded",
                                               "classifier.folded"}
    with pytest.raises(hd.DeviceError, match="seconds"):
        handle.profile.remote(0).result(timeout_s=RESULT_TIMEOUT_S)


def _prometheus(metric: str) -> dict:
    """{replica: value} of one of our metrics on Ray's Prometheus endpoint of this node."""
    import ray
    port = ray._private.worker.global_worker.node.metrics_export_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^" + metric + r"\{(.*)\} ([0-9.e+-]+)$", line)
        if m and f'application="{APP}"' in m.group(1):
            replica = re.search(r'replica="([^"]+)"', m.group(1)).group(1)
            out[replica] = float(m.group(2))
    return out


def test_replica_counters_reach_rays_metrics_endpoint(app, digits_images):
    """What metrics() reports is exported through ray.util.metrics (Ray's dashboard and
    Prometheus read that endpoint), tagged with application, replica and device."""
    handle, _ = app
    images, _ = digits_images
    handle.remote(images[:8]).result(timeout_s=RESULT_TIMEOUT_S)
    ours = _replica_metrics(handle)
    want = {k: float(v["requests"]) for k, v in ours.items()}
    # Ray exports every few seconds: poll (bounded) until the endpoint has caught up.
    def caught_up():
        got = _prometheus("ray_hipdnn_async_requests_total")
        return all(got.get(k) == v for k, v in want.items())

    wait_until(caught_up, timeout_s=60, period_s=2.0,
               what=f"Ray's metrics endpoint to report {want}")
    rows = _prometheus("ray_hipdnn_async_rows_total")
    assert {k: rows.get(k) for k in ours} == {k: float(v["rows"]) for k, v in ours.items()}


# ---------------------------------------------------------------------------------------
# Malformed requests: refused with the reason; the replica keeps serving
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, fragment", [
    (np.zeros((2, 1, 8, 7), np.float32), "needs shape (N, 1, 8, 8)"),
    (np.zeros((0, 1, 8, 8), np.float32), "got shape (0, 1, 8, 8)"),
    (np.array([["a"] * 8] * 8), "needs numbers"),
    (np.zeros((1, 1, 8, 8), bool), "needs numbers"),
    ("not an array", "needs a NumPy array"),
])
def test_malformed_handle_request_is_a_variant_pack_error(app, digits_images,
                                                          digits_reference, bad, fragment):
    handle, _ = app
    with pytest.raises(hd.VariantPackError, match=re.escape(fragment)):
        handle.remote(bad).result(timeout_s=RESULT_TIMEOUT_S)
    images, _ = digits_images
    y = handle.remote(images[:4]).result(timeout_s=RESULT_TIMEOUT_S)
    np.testing.assert_allclose(y, digits_reference[:4], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("body, ctype, status, fragment", [
    (b"[1, 2", "application/json", 400, "not JSON"),
    (b"", "application/json", 400, "empty request body"),
    (json.dumps([[1, 2], [3]]).encode(), "application/json", 400, "rectangular"),
    (json.dumps([[0.0] * 8] * 7).encode(), "application/json", 400, "needs shape"),
    (json.dumps({"x": 1}).encode(), "application/json", 400, "without 'inputs'"),
    (json.dumps([["a"] * 8] * 8).encode(), "application/json", 400, "needs numbers"),
    (b"\x93NUMPY garbage", "application/x-npy", 400, "not a .npy"),
    (b"<xml/>", "text/xml", 415, "unsupported content type"),
])
def test_malformed_http_request_gets_4xx_with_reason(app, digits_images, digits_reference,
                                                     body, ctype, status, fragment):
    _, url = app
    got, _, reply = _post(url, body, ctype)
    assert got == status
    assert fragment in json.loads(reply)["error"]
    images, _ = digits_images
    ok, _, reply = _post(url, json.dumps(images[:2].tolist()).encode(), "application/json")
    assert ok == 200
    np.testing.assert_allclose(np.asarray(json.loads(reply)["outputs"], np.float32),
                               digits_reference[:2], rtol=RTOL, atol=ATOL)


def test_pickled_npy_and_wrong_method_are_refused(app):
    _, url = app
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    status, _, reply = _post(url, buf.getvalue(), "application/x-npy")
    assert status == 400 and "not a .npy" in json.loads(reply)["error"]
    status, _, _ = _post(url, b"[]", "application/json", method="PUT")
    assert status == 405


def test_malformed_request_among_good_ones_fails_alone(app, digits_images, digits_reference):
    """A bad request sent with good ones while they batch: only it fails."""
    handle, _ = app
    images, _ = digits_images
    good = [handle.remote(images[i]) for i in range(40)]
    bad = handle.remote(np.zeros((3, 1, 8, 9), np.float32))
    more = [handle.remote(images[i]) for i in range(40, 80)]
    got = np.stack([r.result(timeout_s=RESULT_TIMEOUT_S) for r in good + more])
    np.testing.assert_allclose(got, digits_reference[:80], rtol=RTOL, atol=ATOL)
    with pytest.raises(hd.VariantPackError):
        bad.result(timeout_s=RESULT_TIMEOUT_S)


# ---------------------------------------------------------------------------------------
# Failures: a killed replica loses nothing silently; shutdown drains
# ---------------------------------------------------------------------------------------

def _replica_actors():
    import ray
    prefix = f"SERVE_REPLICA::{APP}#{DEPLOYMENT}#"
    return [ray.get_actor(prefix + i, namespace="serve") for i in sorted(_replica_ids())]


def test_killed_replica_mid_load_loses_nothing_silently(app, digits_images, digits_reference):
    import ray
    from ray.serve import exceptions as serve_errors
    handle, _ = app
    images, _ = digits_images
    victims = _replica_actors()
    assert len(victims) == REPLICAS
    victim_id = victims[0]._actor_id.hex()
    idx = np.arange(600) % len(images)
    responses = [handle.remote(images[i]) for i in idx]
    outcomes = []

    def collect(pairs):
        for i, r in pairs:
            try:
                outcomes.append((i, r.result(timeout_s=RESULT_TIMEOUT_S)))
            except Exception as exc:          # must be a clear error, never a hang
                outcomes.append((i, exc))

    pairs = list(zip(idx, responses))
    collect(pairs[:100])                      # the load is flowing ...
    ray.kill(victims[0], no_restart=True)     # ... kill a replica under 500 pending requests
    collect(pairs[100:])
    assert len(outcomes) == len(idx)          # every request came back, one way or the other
    answered = 0
    for i, got in outcomes:
        if isinstance(got, Exception):
            assert isinstance(got, (ray.exceptions.RayError, serve_errors.RayServeException)), \
                repr(got)
            assert str(got)
            continue
        # Never a wrong reply: each answer is that request's own logits.
        np.testing.assert_allclose(got, digits_reference[i], rtol=RTOL, atol=ATOL)
        answered += 1
    assert answered >= len(idx) // 2          # the surviving replica kept serving
    # Serve replaces the dead replica; the new one answers correctly too.
    wait_until(lambda: _replica_states().get("RUNNING", 0) == REPLICAS and len(_replica_actors()) == REPLICAS,
               timeout_s=120, what="Serve to replace the killed replica")
    assert victim_id not in {a._actor_id.hex() for a in _replica_actors()}
    y = np.stack([r.result(timeout_s=RESULT_TIMEOUT_S)
                  for r in [handle.remote(images[i]) for i in range(100)]])
    np.testing.assert_allclose(y, digits_reference[:100], rtol=RTOL, atol=ATOL)
    # The handle's router learns of the new replica on its own schedule: both serve again.
    assert len(_replica_metrics(handle, timeout_s=60)) == REPLICAS


def test_shutdown_drains_requests_in_flight(app, digits_images, digits_reference):
    """Deleting the application while requests run: each in-flight one is still answered."""
    from ray import serve
    handle, _ = app
    images, _ = digits_images
    responses = [handle.remote(images[:16]) for _ in range(60)]
    time.sleep(0.2)                               # let the router hand them out
    serve.delete(APP, _blocking=False)
    for r in responses:
        y = r.result(timeout_s=RESULT_TIMEOUT_S)
        np.testing.assert_allclose(y, digits_reference[:16], rtol=RTOL, atol=ATOL)
    wait_until(lambda: APP not in serve.status().applications, timeout_s=60,
               what="the application to be deleted")
