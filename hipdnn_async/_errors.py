"""The hipdnn_async error tree.

Every error carries ``.code``, the name of the hipDNN frontend ``ErrorCode`` it
corresponds to (``hipdnn_frontend/Error.hpp``), and optionally ``.status`` and
``.status_name`` when a vendor library reported the failure. All errors pickle
(they cross thread and process boundaries in the queues and in perf-db tests).

Vendor errors (``VendorError`` and its families ``GpuError``, ``CudnnError``,
``MiopenError``, ``OnednnError``) also carry ``.library``, ``.call`` and ``.vendor_message``. Each vendor
binding holds one table from its status values to these types (``status_error`` builds
the error from it): NOT_SUPPORTED -> the family's ``*NotSupportedError`` (also a
``NotSupportedError``, so the next engine may try); BAD_PARAM -> the family's
``*BadParamError``, which a provider turns into a ``NotSupportedError`` naming the call
when it happens at build (``at_build``); anything else -> the family type, an
``ExecutionError``. A library or symbol that is missing is a ``LibraryError``, a
``DeviceError``.

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
    "PerfDbError",
    "DECLINE_TYPES",
    "VendorError",
    "BadParamError",
    "LibraryError",
    "GpuError",
    "GpuNotSupportedError",
    "GpuDeviceError",
    "CudnnError",
    "CudnnNotSupportedError",
    "CudnnBadParamError",
    "MiopenError",
    "MiopenNotSupportedError",
    "MiopenBadParamError",
    "OnednnError",
    "OnednnNotSupportedError",
    "OnednnBadParamError",
    "status_error",
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

    def prefixed(self, where: str) -> "HipdnnError":
        """A copy of this error, same type and fields, whose message starts with ``where``
        (e.g. the plan and stream it happened on); the original is its ``__cause__``."""
        func, args = self.__reduce__()
        err = func(*args)
        err.message = f"{where}: {self.message}"
        err.args = (err.message,)
        err.__cause__ = self
        return err


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
    """Device absent, runtime library missing or broken (a misuse of a device, e.g. of
    its capture API or a bad spec, says ``INVALID_VALUE``)."""

    # hipDNN's code for a failure below the frontend (Error.hpp): no device is no plan
    # problem (no plan is being created), so not GRAPH_EXECUTION_PLAN_CREATION_FAILED
    default_code = "HIPDNN_BACKEND_ERROR"


class PerfDbError(HipdnnError, ValueError):
    """A perf-db argument, file or entry that cannot be used: a path or key of the wrong
    type, an import file that is not JSON or not a perf-db export or has an entry with a
    bad field, an export target that is not a regular file or is someone else's file.
    (The operating system failing to read or write a file is a ``DeviceError``.)"""

    default_code = "INVALID_VALUE"


class VendorError(HipdnnError):
    """A vendor library (GPU runtime, cuDNN, MIOpen) reported a failure (mixin base).

    Parameters
    ----------
    message : str
        Usually ``"{call} failed: {status_name} ({status}): {vendor_message}"``.
    library : str, optional
        The library as it was opened: a path or soname (``".../nvidia/cudnn/lib/libcudnn.so.9"``).
    call : str, optional
        The C function that failed (e.g. ``"cudnnConvolutionForward"``).
    vendor_message : str, optional
        The library's own text (``cudaGetErrorString``, ``cudnnGetLastErrorString``).
    code, status, status_name
        As :class:`HipdnnError`.
    """

    def __init__(self, message: str = "", *, code: str | None = None,
                 status: int | None = None, status_name: str | None = None,
                 library: str | None = None, call: str | None = None,
                 vendor_message: str | None = None):
        super().__init__(message, code=code, status=status, status_name=status_name)
        self.library = library
        self.call = call
        self.vendor_message = vendor_message

    def __reduce__(self):
        return (_rebuild_vendor, (type(self), self.message, self.code, self.status,
                                  self.status_name, self.library, self.call,
                                  self.vendor_message))

    def at_build(self) -> HipdnnError:
        """The error as a build reports it: itself (``BadParamError`` overrides)."""
        return self


def _rebuild_vendor(cls, message, code, status, status_name, library, call, vendor_message):
    return cls(message, code=code, status=status, status_name=status_name, library=library,
               call=call, vendor_message=vendor_message)


class BadParamError(VendorError):
    """A vendor call refused its parameters (cuDNN BAD_PARAM*, MIOpen BadParm). At run time
    that is an execution failure; at build it means "this engine cannot take the graph",
    and :meth:`at_build` gives the family's NotSupportedError naming the call."""

    def at_build(self) -> HipdnnError:
        """The family's ``*NotSupportedError`` with the same fields, naming the call."""
        cls = getattr(type(self), "not_supported_type", None) or NotSupportedError
        text = f"{self.call} refused this graph's parameters: {self.status_name} ({self.status})"
        if self.vendor_message:
            text += f": {self.vendor_message}"
        err = cls(text,
                  code=NotSupportedError.default_code, status=self.status,
                  status_name=self.status_name, library=self.library, call=self.call,
                  vendor_message=self.vendor_message)
        err.__cause__ = self
        return err


class LibraryError(VendorError, DeviceError):
    """A vendor library cannot be opened, or lacks a symbol that was called: ``.library``
    is the path tried, ``.call`` the symbol (or ``"dlopen"``)."""


# ------------------------------------------------------------------ per-library families
class GpuError(VendorError, ExecutionError):
    """A GPU runtime call (CUDA runtime or HIP) failed."""


class GpuNotSupportedError(GpuError, NotSupportedError):
    """The runtime does not support the operation (cudaErrorNotSupported, hipErrorNotSupported)."""

    default_code = NotSupportedError.default_code


class GpuDeviceError(GpuError, DeviceError):
    """No usable device or driver (no device, invalid device, driver too old or mismatched)."""

    default_code = DeviceError.default_code


class CudnnError(VendorError, ExecutionError):
    """A cuDNN call failed (every cuDNN failure is one, whatever subtype the table picked)."""


class CudnnNotSupportedError(CudnnError, NotSupportedError):
    """CUDNN_STATUS_NOT_SUPPORTED*: the next engine may try."""

    default_code = NotSupportedError.default_code


class CudnnBadParamError(CudnnError, BadParamError):
    """CUDNN_STATUS_BAD_PARAM*."""


class MiopenError(VendorError, ExecutionError):
    """A MIOpen call failed (every MIOpen failure is one, whatever subtype the table picked)."""


class MiopenNotSupportedError(MiopenError, NotSupportedError):
    """miopenStatusNotImplemented / miopenStatusUnsupportedOp: the next engine may try."""

    default_code = NotSupportedError.default_code


class MiopenBadParamError(MiopenError, BadParamError):
    """miopenStatusBadParm / miopenStatusInvalidValue."""


class OnednnError(VendorError, ExecutionError):
    """A oneDNN call failed (every oneDNN failure is one, whatever subtype the table picked)."""


class OnednnNotSupportedError(OnednnError, NotSupportedError):
    """dnnl_unimplemented (no implementation for these descriptors): the next engine may try."""

    default_code = NotSupportedError.default_code


class OnednnBadParamError(OnednnError, BadParamError):
    """dnnl_invalid_arguments."""


CudnnBadParamError.not_supported_type = CudnnNotSupportedError
MiopenBadParamError.not_supported_type = MiopenNotSupportedError
OnednnBadParamError.not_supported_type = OnednnNotSupportedError


def status_error(table: dict, family: type, *, library: str, call: str, status: int,
                 status_name: str | None = None, vendor_message: str = "") -> VendorError:
    """The typed error for ``status`` returned by ``call``.

    Parameters
    ----------
    table : dict
        The library's status table: ``{status: (name, type)}`` (in its binding).
    family : type
        The library's base type, for a status absent from ``table``.
    library, call : str
        Library file name, C function name.
    status : int
        The value returned.
    status_name : str, optional
        The library's name for ``status`` (its own lookup); the table's name wins.
    vendor_message : str, optional
        The library's text for the failure.

    Returns
    -------
    VendorError
        Message ``"{call} failed: {name} ({status})"`` plus ``": {vendor_message}"``.
    """
    name, cls = table.get(status, (None, None))
    name = name or status_name or f"unknown status {status}"
    cls = cls or family
    text = f"{call} failed: {name} ({status})" + (f": {vendor_message}" if vendor_message else "")
    return cls(text, status=status, status_name=name, library=library, call=call,
               vendor_message=vendor_message or None)


# Errors that let the next engine try (cuDNN frontend test_decline_types.py): anything
# else propagates to the caller.
DECLINE_TYPES = (NotSupportedError, ImportError)
