# cython: language_level=3
"""The launch context of the calling thread (``hipdnn_async.runtime._launch_state``).

While a GPU stream's launching thread enqueues a work item, that stream's launch context
(``runtime.LaunchContext``: stream, device context, per-stream resources) is *entered* on
the thread, and the plans' launch code reads it (``current_launch``). The state is one C
thread-local pointer, shared by every Cython module through ``_launch_state.pxd``
(``launch_current``, ``launch_enter``, ``launch_exit``: C calls, no Python frame and no
attribute lookup on the submit path) and by Python code through the functions below.

A thread starts with no launch context; ``enter`` holds a reference to the context until
``exit`` (or the next ``enter``) drops it.

Beside it, C thread-locals of the process-wide oneDNN gate: the seconds the thread has
waited for it in all, and within the work item it runs, the wait before the item's first
acquisition (``gate_acquired`` in ``runtime._onednn``; ``gate_item_begin`` /
``gate_item_pre_wait`` in the queues), so that a CPU stream's work item waiting for
another stream's oneDNN program is timed as waiting, not executing.
"""
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

__all__ = ["current_launch", "enter", "exit"]

cdef extern from *:
    """
    /* C11 thread-local storage: one slot per OS thread, as threading.local() gives */
    static _Thread_local PyObject *hipdnn_launch_current = NULL;
    static _Thread_local double hipdnn_gate_waited = 0.0;
    static _Thread_local double hipdnn_gate_pre = 0.0;
    static _Thread_local int hipdnn_gate_held = 0;
    """
    PyObject* hipdnn_launch_current
    double hipdnn_gate_waited
    double hipdnn_gate_pre
    int hipdnn_gate_held


cdef object launch_current():
    cdef PyObject* lc = hipdnn_launch_current
    if lc == NULL:
        return None
    return <object>lc


cdef int launch_enter(object lc) except -1:
    global hipdnn_launch_current
    cdef PyObject* old = hipdnn_launch_current
    Py_INCREF(lc)
    hipdnn_launch_current = <PyObject*>lc
    Py_XDECREF(old)         # after the store: a finalizer it runs sees the new state
    return 0


cdef int launch_exit() except -1:
    global hipdnn_launch_current
    cdef PyObject* old = hipdnn_launch_current
    hipdnn_launch_current = NULL
    Py_XDECREF(old)
    return 0


cdef void gate_acquired(double waited) noexcept nogil:
    global hipdnn_gate_waited, hipdnn_gate_pre, hipdnn_gate_held
    hipdnn_gate_waited += waited
    if not hipdnn_gate_held:
        hipdnn_gate_pre += waited
        hipdnn_gate_held = 1


cdef double gate_waited() noexcept nogil:
    return hipdnn_gate_waited


cdef void gate_item_begin() noexcept nogil:
    global hipdnn_gate_pre, hipdnn_gate_held
    hipdnn_gate_pre = 0.0
    hipdnn_gate_held = 0


cdef double gate_item_pre_wait() noexcept nogil:
    return hipdnn_gate_pre


def current_launch():
    """The launch context of the stream enqueuing work on this thread, or None."""
    return launch_current()


def enter(lc):
    """Make ``lc`` (a ``runtime.LaunchContext``) the calling thread's launch context."""
    launch_enter(lc)


def exit():
    """Clear the calling thread's launch context."""
    launch_exit()
