"""Enums with hipDNN's values (``hipdnn_frontend/Types.hpp``) and dtype coercion."""
from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from ._errors import GraphError

__all__ = [
    "DataType",
    "PointwiseMode",
    "ConvolutionMode",
    "as_data_type",
    "numpy_dtype",
    "IO_DATA_TYPES",
]


class DataType(enum.IntEnum):
    """Tensor element types; values equal hipDNN's ``DataType``."""

    NOT_SET = 0
    FLOAT = 1
    HALF = 2
    BFLOAT16 = 3
    DOUBLE = 4

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return numpy_dtype(self).itemsize


class PointwiseMode(enum.IntEnum):
    """Pointwise modes used by the supported patterns; values equal hipDNN's."""

    NOT_SET = 0
    ADD = 2
    IDENTITY = 23
    RELU_BWD = 33
    RELU_FWD = 34


class ConvolutionMode(enum.IntEnum):
    """Convolution math mode; only CROSS_CORRELATION is supported by any provider."""

    NOT_SET = 0
    CROSS_CORRELATION = 1
    CONVOLUTION = 2


# The I/O types every provider supports (the seed's table: FP16, BFP16, FP32).
IO_DATA_TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)

_TO_NUMPY = {
    DataType.FLOAT: np.dtype(np.float32),
    DataType.HALF: np.dtype(np.float16),
    DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DataType.DOUBLE: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
_FROM_STRING = {
    "float32": DataType.FLOAT, "float": DataType.FLOAT,
    "float16": DataType.HALF, "half": DataType.HALF,
    "bfloat16": DataType.BFLOAT16,
    "float64": DataType.DOUBLE, "double": DataType.DOUBLE,
}


def as_data_type(value, *, where: str = "data_type") -> DataType:
    """Coerce a DataType, its int value, a NumPy/ml_dtypes dtype or a name to DataType.

    Raises
    ------
    GraphError
        The value names no supported type (``where`` says which argument).
    """
    if isinstance(value, DataType):
        if value is DataType.NOT_SET:
            raise GraphError(f"{where}: data type NOT_SET is not allowed here")
        return value
    if isinstance(value, str):
        try:
            return _FROM_STRING[value.lower()]
        except KeyError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            dt = DataType(value)
        except ValueError:
            pass
        else:
            if dt is not DataType.NOT_SET:
                return dt
    else:
        try:
            return _FROM_NUMPY[np.dtype(value)]
        except (TypeError, KeyError):
            pass
    raise GraphError(
        f"{where}: unsupported data type {value!r}; use DataType.FLOAT/HALF/BFLOAT16, "
        "numpy.float32, numpy.float16, ml_dtypes.bfloat16 or 'float32'/'float16'/'bfloat16'")


def numpy_dtype(data_type) -> np.dtype:
    """Return the NumPy dtype (ml_dtypes.bfloat16 for BFLOAT16) of a data type."""
    return _TO_NUMPY[as_data_type(data_type)]
