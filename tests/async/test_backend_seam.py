"""The stream seam a GPU provider plugs into: ``launch`` enqueues on the submitting thread
and completion is signalled later from another thread, as a vendor event would be.

The backend here simulates a GPU stream: ``fn`` runs at launch (it would enqueue kernels),
a "device" thread completes items in order after a delay, then calls ``_finish`` (the event
callback). Buffers must stay alive until that completion, not until ``fn`` returned.
"""
import gc
import queue
import threading
import time
import weakref

import anyio
import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.queues import StreamBackend, StreamPool

pytestmark = pytest.mark.anyio


class EventSignalledBackend(StreamBackend):
    def __init__(self, name, delay=0.02, gate=None):
        self.delay = delay
        self.gate = gate                        # if set, no event fires before it is set
        self.launched = []
        self._q = queue.SimpleQueue()
        self._device = threading.Thread(target=self._run_device, daemon=True, name=name)
        self._device.start()

    def launch(self, item):
        value, error = item._execute()          # "enqueue the kernels" right away
        self.launched.append(item.label)
        self._q.put(("done", item, value, error))

    def wait(self, marker):                     # as cudaStreamWaitEvent: never blocks the host
        self._q.put(("wait", marker, None, None))

    def _run_device(self):
        while True:
            kind, item, value, error = self._q.get()
            if kind == "stop":
                return
            if kind == "wait":
                item.wait()
                continue
            time.sleep(self.delay)              # the kernels run
            if self.gate is not None:
                self.gate.wait()
            item._finish(value, error)          # the event fires

    def close(self):
        self._q.put(("stop", None, None, None))
        self._device.join()


async def test_buffers_live_until_the_event_not_until_launch(anyio_backend):
    backends = []
    gate = threading.Event()    # the "GPU" finishes only when the test says so (no timing race)

    def factory(name):
        backends.append(EventSignalledBackend(name, gate=gate))
        return backends[-1]

    async with StreamPool("fakegpu", n_streams=2, backend_factory=factory) as pool:
        buf = np.ones(1000)
        ref = weakref.ref(buf)
        handle = await pool.submit(lambda: 7, keepalive=(buf,), label="k0")
        del buf
        gc.collect()
        assert backends[0].launched == ["k0"] or backends[1].launched == ["k0"]
        assert not handle.done() and ref() is not None, "buffer released before the event"
        gate.set()
        assert await handle == 7
        gc.collect()
        assert ref() is None


async def test_order_errors_and_cross_stream_events(anyio_backend):
    order = []
    pool = StreamPool("fakegpu", n_streams=2,
                      backend_factory=lambda n: EventSignalledBackend(n, delay=0.01))
    async with pool:
        handles = [await pool.submit(lambda i=i: order.append(i) or i, stream=0, label=f"k{i}")
                   for i in range(5)]
        bad = await pool.submit(lambda: 1 / 0, stream=0, label="bad")
        ev = pool.streams[0].record_event()
        pool.streams[1].wait_event(ev)
        after = await pool.submit(lambda: "after", stream=1, label="after")
        assert [await h for h in handles] == [0, 1, 2, 3, 4]
        with pytest.raises(hd.ExecutionError, match="ZeroDivisionError"):
            await bad
        assert await after == "after"
        assert ev.is_done()
    assert order == [0, 1, 2, 3, 4]
