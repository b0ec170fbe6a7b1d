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
# Seconds this thread has waited, in all, for the process-wide oneDNN gate
# (``runtime._onednn``): the queues take the difference across a work item's run off its
# execution time, so that a stream waiting for another one's program is not executing.
cdef void gate_wait_add(double seconds) noexcept nogil
cdef double gate_waited() noexcept nogil
