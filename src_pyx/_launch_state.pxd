# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._launch_state``: the launch context of the
stream that is enqueuing work on the calling thread, for other Cython modules to cimport
(the queues' C launch enters and exits it around a work item; a bound execution, the
cuDNN backend's ``GraphLaunch``, reads it). See ``_launch_state.pyx`` for the contract.
"""

# The launch context entered on this thread, or None.
cdef object launch_current()
# Make ``lc`` (a ``runtime.LaunchContext``) this thread's; a reference is held until exit.
cdef int launch_enter(object lc) except -1
# Clear this thread's launch context.
cdef int launch_exit() except -1
# The process-wide oneDNN gate (``runtime._onednn``), per thread: ``gate_acquired`` after
# each acquisition with the seconds waited for it; ``gate_waited`` the total waited (a
# launch's execution-time counter leaves it out); ``gate_item_begin`` before a work item
# runs and ``gate_item_pre_wait`` after: the wait before the item's first acquisition,
# which the queues count as queue wait (a stream waiting for another one's program is not
# executing; a wait between two acquisitions of one item, after work, stays inside it).
cdef void gate_acquired(double waited) noexcept nogil
cdef double gate_waited() noexcept nogil
cdef void gate_item_begin() noexcept nogil
cdef double gate_item_pre_wait() noexcept nogil
