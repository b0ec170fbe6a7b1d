"""Locks that a fork child gets back unheld.

Only the thread that calls ``fork`` exists in the child. A lock that another thread of
the parent held at that instant stays held there, and its first use in the child waits
forever (a child's ``dev.plan_stats()``, a tuned build on a new device: found by a
break-it helper forking a busy parent). As CPython's ``logging`` does for its handlers'
locks, each lock of this package that guards plain Python state (counters, registries,
a device's plan list) is registered here and re-initialised, unheld, in the child
(``_at_fork_reinit``, the method CPython's own fork handlers use). The state it guards
may have been half-updated by the vanished thread; each holder keeps only a few
attribute or dict writes under its lock, so the child sees one side or the other.

A lock held around calls into C code that must not be mid-call at a fork needs more
(a library being loaded: the child would find it half-initialised): registered with
:func:`hold_across_fork`, it is taken before the fork, so a holder in another thread
finishes first, and released after it in parent and child. It is an RLock, so that a
fork by its own holder goes through. The perf db's hooks (``_perfdb._store``) do the
same for its locks, in their own order. Such a lock is taken through :func:`holding`,
which holds back the "hipdnn_async" logger's records of the block until the lock is
released: a handler that forks holds its own lock while the fork waits for ours, so
our holder must not wait for that handler inside (found by a break-it helper).

The hooks are registered when this module is first imported: after a fork they run
before those of the modules that import it (the queues' hook fails the parent's work in
flight in the child, and the done callbacks it runs may take these locks); before a
fork, ``os.register_at_fork`` runs them after (in reverse order), so the perf db's locks
are taken before the vendor registry's (no code holds one of them while taking the
other).
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref

__all__ = ["hold_across_fork", "holding", "reinit_in_child", "reinit_attrs_in_child"]

_RLOCK = type(threading.RLock())
_held_locks: list = []        # hold_across_fork, in registration order
_module_locks: list = []      # module-level locks: they live as long as the process
# owner -> names of its lock attributes (owners compare by identity: none defines __eq__)
_owners: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reinit_in_child(lock):
    """Register a module-level ``threading.Lock`` or ``RLock`` to be unheld in a fork
    child; returns it (``_lock = reinit_in_child(threading.Lock())``)."""
    _module_locks.append(lock)
    return lock


def hold_across_fork(lock):
    """Register a module-level ``threading.RLock`` that a fork waits for (taken before
    it, released after it in parent and child); returns it.

    Raises
    ------
    TypeError
        `lock` is not an RLock (a plain Lock would deadlock a fork by its holder).
    """
    if not isinstance(lock, _RLOCK):
        raise TypeError(f"hold_across_fork takes a threading.RLock; got {type(lock).__name__}")
    _held_locks.append(lock)
    return lock


class _HoldBack(logging.Filter):
    """Keeps the records of a thread inside :func:`holding` for the end of the block."""

    def filter(self, record) -> bool:
        pending = getattr(_local, "pending", None)
        if pending is None:
            return True
        pending.append(record)
        return False


_local = threading.local()
_logger = logging.getLogger("hipdnn_async")
# first, so that a user's filters (added before this import too) see a record once: at
# its replay
_logger.filters.insert(0, _HoldBack())


@contextlib.contextmanager
def holding(lock):
    """``with lock:`` for a lock a fork waits for, the "hipdnn_async" logger's records of
    this thread held back until the outermost such block has released its lock (where
    the block raises, a handler's error at that point does not replace its exception)."""
    outer = getattr(_local, "pending", None) is None
    if outer:
        _local.pending = []
    try:
        with lock:
            yield
    except BaseException:
        if outer:
            _replay(quiet=True)
        raise
    if outer:
        _replay(quiet=False)


def _replay(*, quiet: bool) -> None:
    pending, _local.pending = _local.pending, None
    for record in pending:
        try:
            _logger.handle(record)
        except Exception:           # noqa: BLE001 - only while another error propagates
            if not quiet:
                raise


def reinit_attrs_in_child(owner, *names: str) -> None:
    """Register the lock attributes ``names`` of ``owner`` (weakly referenced) to be
    unheld in a fork child; read at the fork, so an attribute may be rebound."""
    _owners[owner] = names


def _take_held() -> None:
    for lock in _held_locks:
        lock.acquire()


def _release_held() -> None:
    for lock in reversed(_held_locks):
        lock.release()


def _reinit_in_child() -> None:
    _release_held()         # taken by this thread before the fork: no other holds one
    if getattr(_local, "pending", None):
        _local.pending = []     # the parent's held records: the parent emits them
    for lock in _module_locks:
        lock._at_fork_reinit()
    for owner, names in list(_owners.items()):
        for name in names:
            lock = getattr(owner, name, None)
            if lock is not None:
                lock._at_fork_reinit()


if hasattr(os, "register_at_fork"):     # POSIX
    os.register_at_fork(before=_take_held, after_in_parent=_release_held,
                        after_in_child=_reinit_in_child)
