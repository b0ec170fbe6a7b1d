"""Primitive-level dynamic batching for concurrent inference.

`DynamicBatcher` wraps a graph whose batch dim is N. Concurrent ``await batcher(sample)``
calls are coalesced, as Ray Serve's ``@serve.batch`` and Triton's dynamic batcher do for
whole models: the first waiting request opens a window, which is flushed when
``max_batch_size`` rows wait or ``max_delay_ms`` has elapsed. The coalesced rows run as
one plan built for a *bucket* batch size (plans are cached per bucket, so new sizes do
not each build or tune); padding rows are zero and their results are discarded, and each
caller gets exactly its own rows back.

Only graphs whose samples are independent are accepted (convolution forward, the fused
convolution + bias + ReLU, batchnorm inference): batch statistics couple the samples of
a training batchnorm, so batching them would change every caller's result.

On a host device (``device.is_host``, the CPU) the batch is gathered straight into a
device array's NumPy view (one ``np.concatenate`` per input, into buffers each bucket
reuses) and each caller's result is a view of its rows of the batch's output: no staging
copy, no copy out. On a GPU device, whose arrays are not host-addressable, the rows are gathered into a host
staging array, copied to a device batch buffer, and the outputs are copied back once the
batch has run; constants are uploaded once, and each bucket keeps its staging and device
buffers for the next batch.

Several devices (the serving path of one process with several GPUs): given a list of
devices, the batcher keeps one *lane* per device (its plans, constants uploaded once,
staging buffers, counters) and sends each coalesced batch to the least loaded lane (fewest
batches in flight; ties in turn), so every device works while requests keep coming.
``metrics()["devices"]`` has each lane's counters.

A lane whose device is closed (``device.closed``, seen when a batch is dispatched or when
one of its batches fails with a ``DeviceError``) leaves the dispatch for good, with one
``RuntimeWarning`` naming the device; its ``metrics()["devices"][i]["closed"]`` is True and
batches go to the other lanes. A batch whose lane failed that way before its execution
started (building the plan, staging the rows) is run once more on another lane; one that
failed in ``plan.execute`` fails its callers (the execution may have begun). With no
lane left, a request fails with a ``DeviceError`` naming the devices.

The batcher runs under asyncio and trio alike: anyio's task group, timeouts, semaphore and
``to_thread`` (for blocking device copies), and on a request's path (a few microseconds a
request) one waiter per request from the running backend (``_wake``: a loop future on
asyncio, the parked task on trio). Requests wait in one queue, and a request wakes the
collector only when the collector waits for it.

The package, one concern a module (imports run down this list):

- ``_dynamic``: ``DynamicBatcher``, the public class: arguments, lifetime, a request's
  call, ``metrics()``;
- ``_dispatch``: ``Dispatcher``, where batches are formed (``collect``) and dispatched to
  a lane and run (``run_batch``);
- ``_options``: checks of the arguments other than the graph's tensors;
- ``_classify``: which tensors are per-request inputs, constants and outputs, and whether
  the graph's pattern is batchable;
- ``_constants``: constants read as ``plan.execute`` reads them and cast once;
- ``_requests``: a request's arrays checked and split into queued pieces;
- ``_wake``: the waiters of the running event loop (asyncio or trio);
- ``_buckets``: the bucket policy and each lane's plans per bucket;
- ``_lanes``: one lane per device and the choice of lane;
- ``_staging``: a batch's variant pack on a lane, and the device copies;
- ``_metrics``: counters and latency windows.
"""
from ._dynamic import DynamicBatcher

__all__ = ["DynamicBatcher"]
