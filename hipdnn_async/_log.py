"""Logging for hipdnn_async, configured from the environment like hipDNN's logger.

All modules log to the ``"hipdnn_async"`` logger. :func:`configure_from_env` reads

- ``HIPDNN_ASYNC_LOG_LEVEL``: ``off`` (default), ``debug``, ``info``, ``warn`` /
  ``warning``, ``error``, ``fatal`` / ``critical`` (hipDNN's ``HIPDNN_LOG_LEVEL`` words);
- ``HIPDNN_ASYNC_LOG_FILE``: a file to append to (default: stderr).

``off`` attaches no handler and sets the logger's level above CRITICAL, so nothing is
emitted (hipDNN is silent by default). Any other level attaches one handler of ours
and stops propagation to the root logger (no double printing). The function is
idempotent: calling it again replaces only the handler it attached before and never
touches handlers someone else attached. Applications that configure logging
themselves can call ``logging.getLogger("hipdnn_async").setLevel(...)`` after import.

This module imports only the stdlib.
"""
from __future__ import annotations

import logging
import os
import stat
import sys
import threading
import warnings

from . import _fork

__all__ = ["logger", "configure_from_env", "warn_bad_env", "warn_env_once", "LOG_LEVEL_ENV",
           "LOG_FILE_ENV", "OFF"]

logger = logging.getLogger("hipdnn_async")

LOG_LEVEL_ENV = "HIPDNN_ASYNC_LOG_LEVEL"
LOG_FILE_ENV = "HIPDNN_ASYNC_LOG_FILE"

# Above CRITICAL: no record passes the logger.
OFF = logging.CRITICAL + 10

_LEVELS = {
    "off": OFF, "none": OFF, "0": OFF,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING, "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL, "critical": logging.CRITICAL,
}

_FORMAT = "%(asctime)s hipdnn_async %(levelname)s [%(process)d:%(threadName)s] %(message)s"

_lock = _fork.reinit_in_child(threading.Lock())
_handler: logging.Handler | None = None
_config: tuple | None = None
_warned_env: set = set()
_warned_lock = _fork.reinit_in_child(threading.Lock())


def warn_bad_env(name: str, value: str, accepted: str, effect: str, *,
                 import_safe: bool = False) -> None:
    """Warn once per process that ``$name`` holds ``value``, which is not accepted.

    A ``RuntimeWarning`` (shown on stderr by default, whatever the logging level, and
    filterable with the ``warnings`` module), also logged on the ``hipdnn_async`` logger.
    The message names the variable, the value, the accepted values and what happens
    instead (``effect``). With ``import_safe`` (the import-time logging setup) a warnings
    filter of ``error`` prints the message on stderr instead of failing the import.
    """
    warn_env_once(name, value, f"is not one of {accepted}; {effect}", import_safe=import_safe,
                  stacklevel=4)


def warn_env_once(name: str, value: str, why: str, *, log: bool = True,
                  import_safe: bool = False, stacklevel: int = 3) -> None:
    """Warn once per process and value that ``$name`` holds ``value``, which is not used.

    The ``RuntimeWarning`` of :func:`warn_bad_env` with its own reason: the message is
    ``hipdnn_async: NAME='value' <why>``. ``log=False`` where the caller logs the event
    itself (the perf db counts and logs its own warnings).
    """
    with _warned_lock:
        if (name, value) in _warned_env:
            return
        _warned_env.add((name, value))
    msg = f"hipdnn_async: {name}={value!r} {why}"
    if log and logger.hasHandlers():   # else logging's last-resort handler would print it twice
        logger.warning("%s", msg)
    try:
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel)
    except Warning:
        if not import_safe:
            raise
        sys.stderr.write(msg + "\n")


def _log_handler(path: str) -> logging.Handler:
    """A handler appending to ``path``. A FIFO is opened without blocking (opening one for
    writing waits for a reader: with none, ``import hipdnn_async`` hung): with no reader it
    is an OSError (ENXIO) and logging goes to stderr; with one, records go to it."""
    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False
    if not is_fifo:
        return _FileHandler(path, mode="a", encoding="utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    return _OwnedStreamHandler(os.fdopen(fd, "a", encoding="utf-8"), path)


class _StderrFallback:
    """Mixin for the handlers writing to ``$HIPDNN_ASYNC_LOG_FILE``: the first record that
    cannot be written there (a full disk, ``/dev/full``, a FIFO whose reader left) is a
    ``RuntimeWarning`` naming the file and the OS error, and that record and every later
    one go to stderr. Stock logging would print a traceback for every record instead.
    """

    _path = ""
    _fallback: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._fallback is not None:
            self._fallback.emit(record)
        else:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if self._fallback is not None or not isinstance(exc, OSError):
            super().handleError(record)
            return
        stream, self.stream = self.stream, None    # its buffer holds what failed: drop it
        try:
            stream.close()
        except (OSError, ValueError):
            pass
        self._fallback = logging.StreamHandler(sys.stderr)
        self._fallback.setFormatter(self.formatter)
        msg = (f"hipdnn_async: {LOG_FILE_ENV}={self._path!r} cannot be written "
               f"({exc.strerror or exc}); logging to stderr")
        level, frame = 1, sys._getframe()    # the warning points at the log call
        while frame is not None and frame.f_code.co_filename in (__file__, logging.__file__):
            level, frame = level + 1, frame.f_back
        try:
            warnings.warn(msg, RuntimeWarning, stacklevel=level)
        except Warning:   # a filter of "error": a log call must not raise
            sys.stderr.write(msg + "\n")
        self._fallback.emit(record)


class _FileHandler(_StderrFallback, logging.FileHandler):
    def __init__(self, path: str, **kwargs):
        super().__init__(path, **kwargs)
        self._path = path


class _OwnedStreamHandler(_StderrFallback, logging.StreamHandler):
    """A StreamHandler that closes its stream (the FIFO it opened) when closed."""

    def __init__(self, stream, path: str):
        super().__init__(stream)
        self._path = path

    def close(self) -> None:
        try:
            if self.stream is not None:
                self.stream.close()
        finally:
            super().close()


def configure_from_env() -> int:
    """Apply ``HIPDNN_ASYNC_LOG_LEVEL`` / ``HIPDNN_ASYNC_LOG_FILE`` to the logger.

    Returns
    -------
    int
        The level now set on the ``"hipdnn_async"`` logger (``OFF`` when off).

    Notes
    -----
    An unrecognised level word is a ``RuntimeWarning`` once (``warn_bad_env``, naming
    the accepted words) and treated as ``off``; a log file that cannot be opened is
    reported on stderr and logging goes to stderr. Importing the package never fails
    because of the logging environment.
    """
    global _handler, _config
    word = os.environ.get(LOG_LEVEL_ENV, "off").strip().lower() or "off"
    path = os.environ.get(LOG_FILE_ENV, "").strip() or None
    level = _LEVELS.get(word)
    with _lock:
        if (word, path) == _config and (level == OFF or _handler in logger.handlers):
            return logger.level
        if level is None:
            warn_bad_env(LOG_LEVEL_ENV, os.environ.get(LOG_LEVEL_ENV, ""),
                         ", ".join(sorted(set(_LEVELS) - {"none", "0"})),
                         "logging stays off", import_safe=True)
            level = OFF
        if _handler is not None:
            logger.removeHandler(_handler)
            _handler.close()
            _handler = None
        _config = (word, path)
        logger.setLevel(level)
        if level == OFF:
            logger.propagate = True
            return level
        handler: logging.Handler
        if path is not None:
            try:
                handler = _log_handler(path)
            except OSError as exc:
                sys.stderr.write(f"hipdnn_async: {LOG_FILE_ENV}={path!r} cannot be "
                                 f"opened ({exc.strerror or exc}); logging to stderr\n")
                handler = logging.StreamHandler(sys.stderr)
        else:
            handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_FORMAT))
        logger.addHandler(handler)
        logger.propagate = False
        _handler = handler
        return level
