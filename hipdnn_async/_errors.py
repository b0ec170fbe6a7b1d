"""The hipdnn_async error tree.

Every error carries ``.code``, the name of the hipDNN frontend ``ErrorCode`` it
corresponds to (``hipdnn_frontend/Error.hpp``), and optionally ``.status`` and
``.status_name`` when a vendor library reported the failure. All errors pickle
(they cross thread and process boundaries in the queues and in perf-db tests).

This module imports nothing of ours.
"""
from __future__ import annotations

__all__ = [
    "HipdnnError",
    "GraphError",
    "NotSupportedError",
    "KnobError",
    "VariantPackError",
    "ExecutionError",
    "DeviceError",
    "DECLINE_TYPES",
]


class HipdnnError(Exception):
    """Base of every hipdnn_async error.

    Parameters
    ----------
    message : str
        Where (API, node, tensor), what is wrong, the value seen, what is allowed.
    code : str, optional
        hipDNN ``ErrorCode`` name; defaults to the class's ``default_code``.
    status : int, optional
        Vendor status value (e.g. ``miopenStatus_t``, ``cudnnStatus_t``) when one exists.
    status_name : str, optional
        The vendor's name for ``status``.
    """

    default_code = "INVALID_VALUE"

    def __init__(self, message: str = "", *, code: str | None = None,
                 status: int | None = None, status_name: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status
        self.status_name = status_name

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.code, self.status, self.status_name))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls, message, code, status, status_name):
    return cls(message, code=code, status=status, status_name=status_name)


class GraphError(HipdnnError, ValueError):
    """Invalid graph: dims, strides, dtypes, shapes or node parameters."""

    default_code = "INVALID_VALUE"


class NotSupportedError(HipdnnError):
    """A valid graph that no engine of this device supports."""

    default_code = "GRAPH_NOT_SUPPORTED"


class KnobError(HipdnnError, ValueError):
    """Unknown knob, wrong value type, or value outside the knob's range."""

    default_code = "INVALID_VALUE"


class VariantPackError(HipdnnError, ValueError):
    """Missing, extra-virtual or mismatched buffers in a variant pack."""

    default_code = "INVALID_VARIANT_PACK"


class ExecutionError(HipdnnError, RuntimeError):
    """The provider or the runtime failed while running a plan."""

    default_code = "GRAPH_EXECUTION_FAILED"


class DeviceError(HipdnnError, RuntimeError):
    """Device absent, runtime library missing or broken."""

    default_code = "GRAPH_EXECUTION_PLAN_CREATION_FAILED"


# Errors that let the next engine try (cuDNN frontend test_decline_types.py): anything
# else propagates to the caller.
DECLINE_TYPES = (NotSupportedError, ImportError)
