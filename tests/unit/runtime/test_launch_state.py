"""runtime._launch_state: the calling thread's launch context, one C thread-local slot
that the Cython modules share through ``_launch_state.pxd`` (issue 23)."""
import sys
import threading

from hipdnn_async.runtime import _launch_state, current_launch
from hipdnn_async.runtime._gpu_device import LaunchContext


def test_enter_and_exit_set_the_calling_threads_context():
    lc = LaunchContext(1, None)
    assert current_launch() is None
    lc.enter()
    try:
        assert current_launch() is lc is _launch_state.current_launch()
    finally:
        LaunchContext.exit()
    assert current_launch() is None


def test_each_thread_has_its_own_slot():
    mine, seen, entered = LaunchContext(1, None), [], threading.Event()
    other = LaunchContext(2, None)

    def worker():
        seen.append(current_launch())          # not the main thread's
        other.enter()
        seen.append(current_launch())
        entered.set()
        LaunchContext.exit()

    mine.enter()
    try:
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert entered.is_set() and seen == [None, other]
        assert current_launch() is mine         # the worker's enter changed nothing here
    finally:
        LaunchContext.exit()


def test_the_slot_holds_one_reference_until_exit():
    obj = object()
    base = sys.getrefcount(obj)
    _launch_state.enter(obj)
    assert sys.getrefcount(obj) == base + 1
    _launch_state.enter(obj)                   # re-entering replaces, does not stack
    assert sys.getrefcount(obj) == base + 1
    _launch_state.exit()
    assert sys.getrefcount(obj) == base
    _launch_state.exit()                       # exit without a context: nothing to drop
    assert current_launch() is None
