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

A lock held around calls into a C library that has locks of its own needs more: the
perf db's hooks (``_perfdb._store``) take its locks before the fork, so that no other
thread is inside SQLite at that instant.

The hook is registered when this module is first imported, so it runs before the hooks
of the modules that import it (``os.register_at_fork`` runs them in that order): the
queues' hook fails the parent's work in flight in the child, and the done callbacks it
runs may take these locks.
"""
from __future__ import annotations

import os
import weakref

__all__ = ["reinit_in_child", "reinit_attrs_in_child"]

_module_locks: list = []      # module-level locks: they live as long as the process
# owner -> names of its lock attributes (owners compare by identity: none defines __eq__)
_owners: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reinit_in_child(lock):
    """Register a module-level ``threading.Lock`` or ``RLock`` to be unheld in a fork
    child; returns it (``_lock = reinit_in_child(threading.Lock())``)."""
    _module_locks.append(lock)
    return lock


def reinit_attrs_in_child(owner, *names: str) -> None:
    """Register the lock attributes ``names`` of ``owner`` (weakly referenced) to be
    unheld in a fork child; read at the fork, so an attribute may be rebound."""
    _owners[owner] = names


def _reinit_in_child() -> None:
    for lock in _module_locks:
        lock._at_fork_reinit()
    for owner, names in list(_owners.items()):
        for name in names:
            lock = getattr(owner, name, None)
            if lock is not None:
                lock._at_fork_reinit()


if hasattr(os, "register_at_fork"):     # POSIX
    os.register_at_fork(after_in_child=_reinit_in_child)
