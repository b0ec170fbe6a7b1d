"""Requests: a caller's arrays checked as ``plan.execute`` checks them (no cast), split
into pieces of at most ``max_batch_size`` rows, each waiting on its own waiter
(``_wake``)."""
from __future__ import annotations

import copy
from typing import Mapping

import numpy as np

from .._errors import ExecutionError, VariantPackError
from .._layout import stride_order
from .._types import numpy_dtype
from ..runtime._buffer import host_array

__all__ = ["Request", "check_request", "fail", "split_request"]


class Request:
    """One queued piece of a caller's request (at most max_batch_size rows).

    ``arrays`` are its rows of each per-request input (logical order, the tensor's dtype),
    in the order of the batcher's inputs; ``enqueued`` is ``time.perf_counter()`` and
    ``window`` the loop's clock when it was queued; ``waiter`` (``_wake``) is woken once
    ``done``, with ``result`` (the caller's rows of the outputs) or ``error`` set.
    """

    __slots__ = ("arrays", "n", "enqueued", "window", "waiter", "done", "result", "error",
                 "cancelled")

    def __init__(self, arrays: tuple, n: int, enqueued: float, window: float, waiter):
        self.arrays = arrays
        self.n = n
        self.enqueued = enqueued
        self.window = window
        self.waiter = waiter
        self.done = False
        self.result = None
        self.error: BaseException | None = None
        self.cancelled = False


def split_request(arrays: tuple, n: int, max_rows: int, now: float, window: float,
                  new_waiter) -> list[Request]:
    """`arrays` (of `n` rows each) as pieces of at most `max_rows` rows, in order, each
    with a waiter from `new_waiter()`."""
    return [Request(tuple(a[lo:lo + max_rows] for a in arrays), min(n, lo + max_rows) - lo,
                    now, window, new_waiter())
            for lo in range(0, n, max_rows)]


def _fresh_error(exc: BaseException) -> BaseException:
    """A copy of an exception for one caller (one instance must not be raised in many tasks)."""
    try:
        err = copy.copy(exc)
    except Exception:  # an exception type that does not copy: wrap it
        err = ExecutionError(str(exc))
    err.__traceback__ = None
    return err


def fail(req: Request, err: BaseException, wake) -> None:
    """Fail `req` with a copy of `err` and ``wake`` its waiter, unless it is done already."""
    if not req.done:
        req.error = _fresh_error(err)
        req.done = True
        wake(req.waiter)


def _memory_order_hint(t, arr) -> str:
    """For an array in the tensor's memory order (e.g. (N, H, W, C) for NHWC): how to
    pass its logical view, which requests take (as ``plan.execute``'s logical form)."""
    order = stride_order(tuple(t.dims), tuple(t.strides))
    if order[0] != 0 or order == tuple(range(len(order))) or arr.ndim != len(order):
        return ""
    if tuple(arr.shape[1:]) != tuple(t.dims[d] for d in order[1:]):
        return ""
    inverse = tuple(order.index(d) for d in range(len(order)))
    return (f" (an array in memory order; requests are logical views: pass "
            f"arr.transpose{inverse})")


def _checked_array(name, t, value, n: int | None) -> np.ndarray:
    """`value` of input `name` (tensor `t`) as an array of its dims past N and its dtype."""
    arr = host_array(value, f"DynamicBatcher: tensor {name!r}")
    want = tuple(t.dims[1:])
    if arr.ndim != len(t.dims) or tuple(arr.shape[1:]) != want or arr.shape[0] < 1:
        raise VariantPackError(f"DynamicBatcher: tensor {name!r} needs shape "
                               f"(N, {', '.join(map(str, want))}) with N >= 1; "
                               f"got {arr.shape}" + _memory_order_hint(t, arr))
    if n is not None and arr.shape[0] != n:
        raise VariantPackError(f"DynamicBatcher: tensor {name!r} has {arr.shape[0]} "
                               f"rows; the request's other inputs have {n}")
    # The rule of plan.execute: no cast (a float64 or int request would be rounded
    # or overflow silently); the caller casts, knowing its values.
    dtype = np.dtype(numpy_dtype(t.data_type))
    if arr.dtype != dtype:
        got = arr.dtype.name
        if got == dtype.name:      # same kind, other byte order ('>f4')
            got = f"{got} in non-native byte order ({arr.dtype.str})"
        raise VariantPackError(f"DynamicBatcher: tensor {name!r} needs dtype "
                               f"{dtype.name} ({t.data_type.name}); got {got} (cast "
                               f"with .astype(...) first: requests are not cast)")
    return arr


def check_request(roles, request) -> tuple[tuple, int]:
    """Validate a request; return its arrays (of the tensors' dtypes, in the order of
    ``roles.inputs``) and its rows.

    Raises
    ------
    VariantPackError
        A bare array for several inputs, a missing or unknown input, a masked array, a
        shape or dtype that does not match, or inputs of different row counts.
    """
    if not isinstance(request, Mapping):
        if len(roles.inputs) != 1:
            raise VariantPackError(f"DynamicBatcher: a bare array needs exactly one "
                                   f"input; this batcher has {list(roles.inputs)}: "
                                   "pass a dict")
        request = {roles.inputs[0]: request}
    extra = [k for k in request if k not in roles.in_tensors]
    if extra:
        raise VariantPackError(f"DynamicBatcher: request names {extra} are not "
                               f"per-request inputs; inputs are {list(roles.inputs)}")
    arrays, n = [], None
    for name in roles.inputs:
        if name not in request:
            raise VariantPackError(f"DynamicBatcher: request lacks input {name!r}")
        arrays.append(_checked_array(name, roles.in_tensors[name], request[name], n))
        n = arrays[-1].shape[0] if n is None else n
    return tuple(arrays), n
