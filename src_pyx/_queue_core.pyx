# cython: language_level=3
"""The queues' submission path in C: a work item's fields, a stream's submission and a GPU
stream's launch (``plan.submit`` and ``step.submit`` make one item per call).

``queues.Completion``, ``queues.Stream`` and ``queues.GpuStreamBackend`` derive from the
cores here. A core holds, typed, the fields the submission touches, and :func:`submit_now`
runs a whole submission (the handle, the stream's bookkeeping, the launch into the GPU
stream, its completion batch) without a Python frame (``bench/bench_submit_path.py``: on
the H200 a one-plan ``step.submit`` went from 6.9 to 3.3 µs, against PyTorch conv
launches of 19.6 / 21.0 µs on those machines; with ``--runtime fake`` on a 2-core CPU,
interleaved runs, "ours only" rows: 1.46 -> 1.13 µs, ``plan.submit`` 3.14 -> 2.90 µs).
Waiting, retiring, parking and metrics stay in Python, in those classes.
A host stream's lock is a :class:`StreamLock`, which the submission path takes with C
calls (no attribute lookup, no Python call); a GPU backend's own lock is called as
``threading.Lock``.

Timestamps (``submitted_at``, ``started_at``) are ``time.perf_counter()`` seconds: on Linux
that clock is ``CLOCK_MONOTONIC`` (PEP 418), read here with ``clock_gettime``.
"""
from cpython.dict cimport PyDict_Values
from cpython.object cimport PyObject, PyTypeObject
from cpython.tuple cimport PyTuple_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.pythread cimport (NOWAIT_LOCK, PY_LOCK_ACQUIRED, PY_LOCK_FAILURE, WAIT_LOCK,
                               PyLockStatus, PyThread_acquire_lock, PyThread_allocate_lock,
                               PyThread_free_lock, PyThread_release_lock, PyThread_type_lock)
from hipdnn_async.runtime._binding cimport Binding, BindingCache
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from .._errors import DeviceError as _DeviceError
from .._errors import HipdnnError as _HipdnnError
from hipdnn_async.runtime._launch_state cimport (gate_item_begin, gate_item_pre_wait,
                                                 launch_enter, launch_exit)
from ._metrics import FOLD_AT as _FOLD_AT
from _thread import TIMEOUT_MAX as _THREAD_TIMEOUT_MAX

cdef extern from "pythread.h":
    # absent from Cython's cpython/pythread.pxd; microseconds, -1: no limit
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds,
                                             int intr_flag) nogil

__all__ = ["CompletionCore", "StreamCore", "StreamLock", "LaunchCore", "HostLaunchCore", "ExecTimer", "Batch",
           "PlanLaunch",
           "Named", "submit_now", "run_inline", "run_host", "least_loaded", "perf_counter", "EVENT_EVERY", "PENDING",
           "RUNNING", "DONE"]

PENDING, RUNNING, DONE = 0, 1, 2
# Work items per completion event when nobody waits for them: an event record costs host
# time (about a microsecond), and completions are only looked at batch by batch.
EVENT_EVERY = 16
cdef Py_ssize_t _EVENT_EVERY = EVENT_EVERY
cdef tuple _NO_ARGS = ()
cdef Py_ssize_t _FOLD = _FOLD_AT
cdef double _TIMEOUT_MAX = _THREAD_TIMEOUT_MAX


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


def perf_counter():
    """The clock of the timestamps set here, in seconds (``time.perf_counter()``'s)."""
    return _now()


cdef enum:
    _TIMER_WINDOW = 8     # executions an ExecTimer's estimate looks back over


cdef class ExecTimer:
    """A plan's execution time on a host stream (seconds), from which a submission decides
    whether it may run inline (:func:`run_inline`): the shortest of its last 8 executions,
    wherever they ran.

    A plan's work has fixed shapes, so its time varies by what the machine adds to it:
    preemptions on a shared machine, a worker's wait for the GIL that the submitting
    thread holds. Those only ever add time, so the shortest recent execution is the work's
    own time, and a stall in a few executions does not send short work to the worker.
    """

    cdef double _window[_TIMER_WINDOW]
    cdef public Py_ssize_t count
    cdef public double estimate_s             # the estimate (0.0 until the first execution)

    cdef inline void observe(self, double seconds) noexcept:
        cdef int k, n
        cdef double low = seconds
        self._window[self.count % _TIMER_WINDOW] = seconds
        self.count += 1
        n = self.count if self.count < _TIMER_WINDOW else _TIMER_WINDOW
        for k in range(n):
            if self._window[k] < low:
                low = self._window[k]
        self.estimate_s = low

    cdef inline bint within(self, double bound) noexcept:
        return self.count > 0 and self.estimate_s <= bound

    def record(self, double seconds):
        """Take one execution's time (seconds)."""
        self.observe(seconds)


cdef class CompletionCore:
    """Fields of one work item (``queues.Completion`` derives from this and documents them).

    Parameters
    ----------
    fn : callable
        ``fn()`` is the work.
    keepalive : object, optional
        Referenced until the work is done. Default ``()``.
    label : str, optional
        What the item is, for messages.

    Raises
    ------
    TypeError
        ``fn`` is not callable.
    """

    cdef public object label
    cdef public object stream             # the Stream it was submitted to
    cdef public object submitted_at, started_at, finished_at
    cdef public object _fn, _keepalive, _value, _error
    cdef public object _waiters, _tevent, _callbacks
    cdef public object _batch             # GPU: its completion batch until retired
    cdef public ExecTimer _timer          # a plan's execution times (None: not a plan's)
    cdef public bint _control             # an event marker or wait, not counted as work
    cdef public int _state
    cdef object __weakref__

    def __init__(self, fn, keepalive=(), label="", _control=False):
        if not callable(fn):
            raise TypeError(f"queues: work item {label!r}: fn must be callable; "
                            f"got {type(fn).__name__}")
        self.label = label
        self._fn = fn
        self._keepalive = keepalive
        self._control = _control

    cdef int enqueue(self) except -1:
        # the value or error is stored on the item, fn dropped; ``finished_at`` is left to
        # the item's completion
        self._state = RUNNING
        cdef double waited
        gate_item_begin()
        self.started_at = _now()
        fn = self._fn
        self._fn = None
        try:
            self._value = fn()
        except _HipdnnError as exc:
            self._error = exc
        except Exception as exc:  # noqa - the launching thread goes on
            self._error = self._wrapped(exc)
        except BaseException as exc:
            # the calling thread's own Ctrl-C (a signal handler runs on the main thread,
            # which runs this item inline): stored as itself, so that the waiter gets
            # KeyboardInterrupt, not an ExecutionError (a worker still wraps it, and lives)
            self._error = exc
        fn = None          # not kept by a traceback: it may hold a replay's graph
        waited = gate_item_pre_wait()
        if waited > 0.0:
            # time the run waited for the process-wide oneDNN gate before it first held it
            # (another stream's program did) was queue wait: executing starts after it
            self.started_at = <double>self.started_at + waited
        return 0

    def _enqueue(self):
        """Run ``fn`` (it only enqueues: a GPU stream's launch); store its value or error
        on the item and drop ``fn``."""
        self.enqueue()

    def _publish_stored(self):
        """Publish the outcome already stored (``_enqueue``), its keepalive already
        dropped, and wake the waiters: a GPU stream's completion batch."""
        self.publish_stored()

    cdef int publish_stored(self) except -1:
        if self._state == DONE:
            raise RuntimeError(f"{self.describe()}: completed twice")  # backend bug
        self._keepalive = None
        self._state = DONE     # before the waiter fields are read: see Completion._publish
        # a completion wakes only who waits: nobody, mostly (no lock, no event made)
        if self._tevent is not None or self._waiters is not None or self._callbacks is not None:
            self._wake()
        return 0


cdef class Named:
    """``fn()`` whose library error names ``label``: the work item of a capture step's
    replay, a bound C launch (``rt.graph_launch``) that knows no step, while the queue
    passes a ``HipdnnError`` through unchanged.

    Parameters
    ----------
    fn : callable
        The work.
    label : str
        Prefixed to the message of a ``HipdnnError`` that ``fn`` raises
        (``HipdnnError.prefixed``: same type and fields, the original its ``__cause__``;
        made only on failure).
    """

    cdef readonly object fn
    cdef readonly str label

    def __init__(self, fn, str label):
        self.fn = fn
        self.label = label

    def __call__(self):
        try:
            return self.fn()
        except _HipdnnError as exc:
            raise exc.prefixed(self.label)


cdef class Batch:
    """Items launched in order on one GPU stream, completed by one event recorded after
    the last of them (``event`` None while the batch is open, 0 when the record failed)."""

    cdef public list items
    cdef public object event, record_error, sync_error
    cdef public bint synced, retired

    def __init__(self):
        self.items = []


cdef class LaunchCore:
    """Launch fields of a GPU stream (``queues.GpuStreamBackend`` derives from this): the
    device index, whether a launch makes it current, the launch context, the open batch.

    The subclass provides ``name``, ``_close()`` (record the open batch's event) and
    ``poll()``, and sets ``_open`` (a ``Batch``) before the first launch. A stream calls
    the C launch directly, so a subclass cannot override :meth:`launch`.
    """

    cdef public object _rt, launch_context
    cdef public int _index
    cdef public bint _switch              # make the stream's device current per launch
    cdef public bint poll_due             # the submitter should call poll() once
    cdef public Batch _open

    cdef int launch_item(self, CompletionCore item) except -1:
        cdef int prev = self._index, current
        cdef Batch batch
        if self._open is None:
            self._no_batch()
        try:
            if self._switch:
                current = self._rt.get_device()
                if current != self._index:
                    self._rt.set_device(self._index)
                    prev = current
            launch_enter(self.launch_context)     # LaunchContext.enter(), in C
            try:
                item.enqueue()
            finally:
                launch_exit()
            batch = self._open
            batch.items.append(item)
            item._batch = batch
            if item._control or len(batch.items) >= _EVENT_EVERY:
                self._close()
        finally:
            if prev != self._index:
                self._rt.set_device(prev)
        return 0

    cdef int _no_batch(self) except -1:
        # a typed access to a None batch would crash the process, not raise
        raise RuntimeError(f"{type(self).__name__}: launch before the stream started (no "
                           "open completion batch)")

    def launch(self, item):
        """Enqueue ``item``'s work on the GPU stream now, with the stream's device current
        and the thread's restored after; it joins the open completion batch (called with
        the stream's lock held)."""
        self.launch_item(item)

    def fail_unlaunched(self, CompletionCore item, exc):
        """Fail ``item``, whose launch raised ``exc`` before its work was enqueued, in its
        place: it joins the open batch with that error and completes in order (a parked
        item launched as a slot frees has no submitter to raise to). The batch's event is
        recorded later, with the stream's device current (the next launch, ``_cover``)."""
        if self._open is None:
            self._no_batch()
        item._state = RUNNING
        item.started_at = _now()
        item._fn = None
        item._error = (exc.prefixed(f"{item.describe()} [stream '{self.name}']")
                       if isinstance(exc, _HipdnnError) else item._wrapped(exc))
        self._open.items.append(item)
        item._batch = self._open


cdef class HostLaunchCore:
    """Launch fields of a host stream (``queues.CpuStreamBackend`` derives from this):
    the worker's queue, what was launched to it and what it has run, and the hand-off
    around an item run inline on a submitting thread (:func:`run_inline`).

    While an inline item runs, the items launched behind it wait in ``_held``, in order,
    and go to the worker once it has finished: a stream runs one item at a time, in
    submission order, wherever it runs. The subclass sets ``_queue`` (a
    ``queue.SimpleQueue``: a C queue whose ``put`` wakes the worker only when it sleeps)
    and ``_held`` (a list) before the first launch.
    """

    cdef public object _queue
    cdef public list _held
    cdef public Py_ssize_t _launched      # under the stream's lock
    cdef public Py_ssize_t _ran           # by the worker: launched items it has finished
    cdef public bint _inline              # an item runs on a submitting thread now
    cdef public bint poll_due             # the submitter should call poll() once
    cdef public bint _direct              # launch() is this class's: called in C

    def __cinit__(self):
        self._direct = type(self).launch is HostLaunchCore.launch

    cdef int launch_item(self, CompletionCore item) except -1:
        # called with the stream's lock held
        self._launched += 1
        if self._inline:
            self._held.append(item)
        else:
            self._queue.put(item)
        return 0

    cdef inline bint idle(self) noexcept:
        return not self._inline and self._ran == self._launched

    def launch(self, item):
        """Queue ``item`` for the worker (behind an inline item, once it has finished);
        called with the stream's lock held."""
        self.launch_item(item)

    def put_last(self, entry):
        """Queue a control entry for the worker behind everything launched (the stop
        sentinel); called with the stream's lock held, or once no thread can submit."""
        if self._inline:
            self._held.append(entry)
        else:
            self._queue.put(entry)

    def work(self, _stop):
        """The worker's loop: run items in order until ``_stop`` comes (an item's run
        finishes it: ``Completion._run``); count the launched items run."""
        get = self._queue.get
        cdef CompletionCore item
        cdef double waited
        while True:
            entry = get()
            if entry is _stop:
                return
            if isinstance(entry, CompletionCore):
                item = <CompletionCore>entry
                gate_item_begin()
                value, error = entry._execute()
                waited = gate_item_pre_wait()
                if waited > 0.0 and item.started_at is not None:
                    # as ``enqueue``: the wait for the oneDNN gate was queue wait
                    item.started_at = <double>item.started_at + waited
                # counted once its work is done, before it is finished: a submitter
                # woken by its completion finds the stream idle (run_inline)
                self._ran += 1
                if item._timer is not None and error is None:
                    item._timer.observe(<double>item.finished_at - <double>item.started_at)
                entry._finish(value, error)
                item = None
                value = error = None
            else:
                entry._run()
            entry = None    # hold nothing (keepalive, the stream) while idle


cdef class StreamLock:
    """A stream's lock: ``threading.Lock``'s protocol, and C methods the submission path
    here calls without a Python call (``Stream`` makes one per host stream).

    The C methods try the lock first and, only when it is held, wait for it with the GIL
    released, so a contended stream never stops other Python threads. As
    ``threading.Lock``, it is not reentrant and any thread may release it.
    """

    cdef PyThread_type_lock _lock
    cdef bint _locked

    cdef inline bint try_acquire(self) noexcept:
        if PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            self._locked = True
            return True
        return False

    cdef inline void acquire_wait(self) noexcept:
        # uncontended: no GIL round trip; contended: other threads run meanwhile. Not
        # interruptible (the core's sections are short, and a KeyboardInterrupt here
        # would leave a submission half made)
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self._lock, WAIT_LOCK)
        self._locked = True

    cdef inline void release_held(self) noexcept:
        self._locked = False
        PyThread_release_lock(self._lock)

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("StreamLock: cannot allocate a lock")

    def __dealloc__(self):
        if self._lock != NULL:
            if self._locked:            # freeing a held lock is undefined (CPython's too)
                PyThread_release_lock(self._lock)
            PyThread_free_lock(self._lock)

    def acquire(self, bint blocking=True, double timeout=-1):
        """Take the lock; True when taken, False when not within ``timeout``.

        Parameters
        ----------
        blocking : bool
            False: return at once (``timeout`` must then be -1).
        timeout : float
            Seconds to wait at most; -1: no limit.

        Raises
        ------
        ValueError
            ``timeout`` is negative and not -1, or given with ``blocking`` False
            (``threading.Lock.acquire``'s rules).
        OverflowError
            ``timeout`` exceeds ``threading.TIMEOUT_MAX``.
        """
        if not blocking:
            if timeout != -1:
                raise ValueError("can't specify a timeout for a non-blocking call")
            return self.try_acquire()
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        if timeout > _TIMEOUT_MAX:
            raise OverflowError("timeout value is too large")
        return self.try_acquire() or self.wait_for(timeout) == 1

    cdef int wait_for(self, double timeout) except -1:
        # 1: taken within ``timeout`` seconds (< 0: no limit), 0: not; the GIL released
        # while waiting, and a signal's handler run (its exception raised) as
        # threading.Lock's wait does
        cdef long long us
        cdef double deadline = _now() + timeout if timeout >= 0 else 0.0
        cdef PyLockStatus r
        while True:
            us = -1 if timeout < 0 else <long long>((deadline - _now()) * 1e6)
            if timeout >= 0 and us < 0:
                us = 0
            with nogil:
                r = PyThread_acquire_lock_timed(self._lock, us, 1)
            if r == PY_LOCK_ACQUIRED:
                self._locked = True
                return 1
            if r == PY_LOCK_FAILURE:
                return 0
            PyErr_CheckSignals()        # interrupted (EINTR): run the handlers, wait on
            if timeout >= 0 and _now() >= deadline:
                return self.try_acquire()

    def release(self):
        """Release the lock (whichever thread took it).

        Raises
        ------
        RuntimeError
            The lock is not held.
        """
        if not self._locked:
            raise RuntimeError("release unlocked lock")
        self.release_held()

    def locked(self):
        """True while some thread holds the lock."""
        return self._locked

    def __enter__(self):
        if not self.try_acquire():
            self.wait_for(-1)
        return True

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return f"<{'locked' if self._locked else 'unlocked'} StreamLock at {id(self):#x}>"


cdef inline void _take(StreamLock own, lock) except *:
    """Acquire a stream's lock: C calls for a ``StreamLock`` (``own``), else the GPU
    backend's ``threading.Lock`` by its method."""
    if own is not None:
        own.acquire_wait()
    else:
        lock.acquire()


cdef inline void _give(StreamLock own, lock) except *:
    """Release what ``_take`` acquired."""
    if own is not None:
        own.release_held()
    else:
        lock.release()


cdef class StreamCore:
    """Submission fields of a stream (``queues.Stream`` derives from this and documents
    them): its backend, lock, in-flight items, host-side line, counters."""

    cdef public object name, _backend, _lock, _limit
    cdef public Py_ssize_t id                 # its index in its pool
    cdef public object _inflight, _parked     # collections.deque
    cdef public object _queue_wait, _exec     # queues._metrics.Histogram
    cdef public bint _closed
    cdef public Py_ssize_t _submitted, _completed, _failed
    cdef object __weakref__

    def _try_submit(self, CompletionCore item, limit, bint park=False):
        """Enqueue ``item`` unless ``limit`` items are in flight; then return the oldest one.

        With ``park``, a full stream takes the item anyway into its host-side line, in
        order; it is launched as soon as a slot frees (``Stream._unpark``), and None is
        returned.

        Raises
        ------
        DeviceError
            The stream is closed.
        """
        return self.try_submit(item, -1 if limit is None else limit, park)

    cdef object try_submit(self, CompletionCore item, Py_ssize_t limit, bint park):
        inflight, backend = self._inflight, self._backend
        cdef LaunchCore gpu = backend if isinstance(backend, LaunchCore) else None
        cdef HostLaunchCore host = (backend if gpu is None and isinstance(backend, HostLaunchCore)
                                    and (<HostLaunchCore>backend)._direct else None)
        cdef bint full
        if limit >= 0 and len(inflight) >= limit:
            backend.poll()              # completed items free their slots first
        lock = self._lock
        cdef StreamLock own = lock if isinstance(lock, StreamLock) else None
        _take(own, lock)
        try:
            if self._closed:
                raise _DeviceError(f"stream '{self.name}': {item.describe()} submitted "
                                  "after close")
            parked = self._parked
            full = limit >= 0 and (len(inflight) >= limit or len(parked) > 0)
            if full and not park:
                return inflight[0] if inflight else parked[0][1]
            item.stream = self
            item.submitted_at = _now()
            self._submitted += 1
            if full:
                self._limit = limit
                if not parked and inflight:
                    backend.watch(inflight[0])   # its completion frees a slot
                parked.append(("launch", item))
            else:
                inflight.append(item)
                if host is not None:
                    host.launch_item(item)
                elif gpu is None:
                    # a host backend may have handed the item to its worker before
                    # raising (a KeyboardInterrupt after the queue put): it stays, and
                    # the worker frees its slot
                    backend.launch(item)
                else:
                    try:
                        gpu.launch_item(item)
                    except BaseException:
                        if item._batch is None:    # never launched (e.g. cudaSetDevice
                            inflight.pop()         # failed): its slot is not taken
                            self._submitted -= 1
                            item.stream = None
                        raise
        finally:
            _give(own, lock)
        if (gpu.poll_due if gpu is not None else backend.poll_due):
            backend.poll()              # outside the lock: finishing items takes it
        return None


cdef object _record_ms(object histogram, double ms):
    # Histogram.record, inlined: one append; the buckets are sorted in batches
    pending = histogram._pending
    pending.append(ms)
    if len(pending) >= _FOLD:
        histogram._fold()


def run_inline(type item_type, StreamCore stream, fn, keepalive, label, ExecTimer timer,
               double bound, recorder=None):
    """Run ``fn`` as a work item of ``stream`` on the calling thread, at once, when that
    keeps the stream's guarantees; return the finished item, or None (nothing done).

    It runs when ``stream`` is a host stream with nothing submitted and unfinished (no
    item in flight, parked, queued or running; event markers and waits included), not
    closed, and ``timer`` says the work takes at most ``bound`` seconds (``bound`` < 0:
    whatever it takes; ``timer`` None: no estimate needed). The item takes a slot as a
    worker's would (``max_inflight``, ``pending``), is timed and counted in the stream's
    metrics and the timer, and its error is stored on it, as a worker's; items submitted
    meanwhile from other threads start after it (``HostLaunchCore``). ``recorder`` (None:
    nothing recorded) is attached to the item before it runs (:func:`submit_now`).

    Raises
    ------
    DeviceError
        The stream is closed.
    """
    return _run_inline(item_type, stream, fn, keepalive, label, timer, bound, recorder)


cdef object _run_inline(type item_type, StreamCore stream, fn, keepalive, label,
                        ExecTimer timer, double bound, recorder):
    backend = stream._backend
    if not isinstance(backend, HostLaunchCore) or not (<HostLaunchCore>backend)._direct:
        return None
    cdef HostLaunchCore host = <HostLaunchCore>backend
    if bound >= 0 and (timer is None or not timer.within(bound)):
        return None
    inflight, lock = stream._inflight, stream._lock
    if inflight or host._inline or stream._parked:       # busy: no lock taken
        return None
    cdef PyTypeObject* t = <PyTypeObject*>item_type
    cdef CompletionCore item
    cdef double started, finished
    cdef StreamLock own = lock if isinstance(lock, StreamLock) else None
    _take(own, lock)
    try:
        if stream._closed:
            raise _DeviceError(f"stream '{stream.name}': {label or 'work item'} submitted "
                               "after close")
        if inflight or stream._parked or not host.idle():
            return None
        item = <CompletionCore>t.tp_new(item_type, <PyObject*>_NO_ARGS, NULL)
        item.label = label
        item._fn = fn
        item._keepalive = keepalive
        item.stream = stream
        item.submitted_at = _now()
        stream._submitted += 1
        inflight.append(item)
        host._inline = True
    finally:
        _give(own, lock)
    try:
        if recorder is not None:
            recorder.attach(item)
        item.enqueue()     # started_at, the run, its value or error stored, fn dropped
    finally:
        finished = _now()
        item.finished_at = finished
        started = <double>item.started_at if item.started_at is not None else finished
        if timer is not None and item._error is None:
            timer.observe(finished - started)
        _take(own, lock)
        try:
            try:
                head = inflight.popleft()       # the first: the stream was idle
                if head is not item:            # (cannot be: a backend bug)
                    inflight.appendleft(head)
                    inflight.remove(item)
                if item._error is None:
                    stream._completed += 1
                else:
                    stream._failed += 1
                _record_ms(stream._queue_wait, (started - <double>item.submitted_at) * 1e3)
                _record_ms(stream._exec, (finished - started) * 1e3)
                if stream._parked:
                    stream._unpark()            # joins _held, behind what is there
            finally:
                # whatever failed above, the stream must not stay held
                host._inline = False
                if host._held:
                    held, host._held = host._held, []
                    put = host._queue.put
                    for entry in held:
                        put(entry)
        finally:
            _give(own, lock)
        item.publish_stored()
    return item


cdef StreamCore _least_loaded(tuple streams, Py_ssize_t start):
    # StreamPool.pick's default: the least pending from ``start`` on, ties in turn
    cdef Py_ssize_t n = PyTuple_GET_SIZE(streams), k, load, best_load
    cdef StreamCore best = <StreamCore>streams[start % n], s
    best_load = len(best._inflight) + len(best._parked)
    if best_load:
        for k in range(1, n):
            s = <StreamCore>streams[(start + k) % n]
            load = len(s._inflight) + len(s._parked)
            if load < best_load:
                best, best_load = s, load
                if load == 0:
                    break
    return best


def least_loaded(tuple streams, Py_ssize_t start):
    """The stream of ``streams`` with the fewest items pending (in flight or parked),
    looking from index ``start`` on (ties: the first found)."""
    return _least_loaded(streams, start)


cdef class PlanLaunch:
    """What every execution of one plan hands :func:`run_host`, fixed when the plan is
    built: the work-item type, the binding cache, the stream pool, the label and the
    execution timer (None on a GPU). The types are checked per call, where they are
    used (``TypeError``): a check costs a pointer comparison.
    """

    cdef readonly object item_type, cache, pool, label, timer

    def __init__(self, item_type, cache, pool, label, timer):
        self.item_type = item_type
        self.cache = cache
        self.pool = pool
        self.label = label
        self.timer = timer


def run_host(PlanLaunch plan, variant_pack, workspace, stream, double bound, recorder):
    """One execution of a host plan, in one call: its binding (``plan.cache``: a hit
    compares in C, allocating nothing), its keepalive (the pack's buffer objects and
    ``workspace``), its stream (``stream``, or ``plan.pool``'s least loaded) and, where
    :func:`run_inline` takes it (``plan.timer``, ``bound``, ``recorder`` as there), its
    run on this thread.

    Returns the finished item, or ``(fn, keepalive, stream)`` for the caller to submit
    (the stream busy, the work too long, the pool closed), with ``recorder`` not yet
    attached: the submission attaches it.

    Raises
    ------
    VariantPackError
        As the plan's binding (nothing submitted).
    DeviceError
        The stream is closed.
    """
    cdef Binding b = (<BindingCache?>plan.cache).lookup(variant_pack, workspace)
    cdef StreamCore s
    cdef tuple streams
    if type(variant_pack) is dict:
        keep = tuple(PyDict_Values(variant_pack))
    else:
        keep = tuple(variant_pack.values())
    if workspace is not None:
        keep = (keep, workspace)
    pool = plan.pool
    if pool._closed:
        return (b.fn, keep, stream)
    if stream is None:
        streams = pool.streams
        s = _least_loaded(streams, pool._rr)
        pool._rr = (s.id + 1) % PyTuple_GET_SIZE(streams)
    else:
        s = <StreamCore?>stream
    cdef ExecTimer timer = plan.timer     # typed here: None or an ExecTimer
    item = _run_inline(<type?>plan.item_type, s, b.fn, keep, plan.label, timer, bound,
                       recorder)
    if item is None:
        return (b.fn, keep, s)
    return item


def submit_now(type item_type, StreamCore stream, fn, keepalive, label, limit,
               ExecTimer timer=None, recorder=None):
    """A new ``item_type`` (a ``CompletionCore`` subclass) for ``fn``, enqueued on
    ``stream`` at once: beyond ``limit`` items in flight (None: no limit) it waits in the
    stream's host-side line. The library's hot paths (``StreamPool._submit_now``); ``fn``
    is known to be callable. ``timer`` (a host plan's) takes the item's execution time.

    ``recorder`` (a profile's record of this execution; None: nothing recorded) is
    attached to the item before it is enqueued: ``recorder.attach(item)`` may replace
    ``item._fn`` (a GPU's timing events around the launch) and keeps the item, whose
    ``submitted_at``, ``started_at``, ``finished_at`` and stream it reads once done. The
    one hook of every submission path (inline, queued, parked, blocking), so a profile
    records the path the library takes without one.

    Raises
    ------
    DeviceError
        The stream is closed.
    """
    cdef PyTypeObject* t = <PyTypeObject*>item_type
    if not issubclass(item_type, CompletionCore):
        raise TypeError(f"queues: {item_type.__name__} is not a work-item type")
    cdef CompletionCore item = <CompletionCore>t.tp_new(item_type, <PyObject*>_NO_ARGS, NULL)
    item.label = label
    item._fn = fn
    item._keepalive = keepalive
    item._timer = timer
    if recorder is not None:
        recorder.attach(item)
    stream.try_submit(item, -1 if limit is None else limit, True)
    return item
