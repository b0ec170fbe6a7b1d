"""Requests to a served model: checking arrays, reading HTTP bodies, writing replies.

Pure NumPy and the standard library (no Ray), so each rule is tested on its own.

A request is an array of numbers: (N, *sample_shape) rows, or one sample of
``sample_shape`` when the model declares it. Over HTTP the body is JSON (a nested list, or
``{"inputs": nested list}``) or a ``.npy`` file (``np.save``'s format, no pickles); the
reply is ``{"outputs": nested list, "shape": [...], "dtype": "..."}`` or a ``.npy`` file,
whichever the request used (``Accept: application/x-npy`` asks for ``.npy`` either way).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .._errors import VariantPackError

__all__ = ["ModelInputs", "HttpError", "as_batch", "decode_body", "encode_reply",
           "wants_npy", "NPY_MEDIA_TYPES", "JSON_MEDIA_TYPE", "MAX_BODY_BYTES"]

NPY_MEDIA_TYPES = ("application/x-npy", "application/npy", "application/octet-stream")
JSON_MEDIA_TYPE = "application/json"
NPY_REPLY_TYPE = "application/x-npy"
MAX_BODY_BYTES = 64 << 20          # larger bodies get 413; split them into several requests
_NUMBER_KINDS = "iuf"              # int, unsigned, float (bool, complex, str, object refused)


class HttpError(Exception):
    """A request the replica refuses before running it: HTTP `status` and the reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = int(status)
        self.message = message


@dataclass(frozen=True)
class ModelInputs:
    """What a model says about its input: per-sample dims and dtype, each optional."""

    sample_shape: tuple | None = None
    dtype: np.dtype | None = None

    @classmethod
    def of(cls, model) -> "ModelInputs":
        """Read ``model.sample_shape`` and ``model.dtype`` where the model has them."""
        shape = getattr(model, "sample_shape", None)
        dtype = getattr(model, "dtype", None)
        return cls(tuple(int(d) for d in shape) if shape is not None else None,
                   np.dtype(dtype) if dtype is not None else None)

    def shape_text(self) -> str:
        """``"(N, 1, 8, 8)"``, or ``"(N, ...)"`` when the model gives no sample shape."""
        if self.sample_shape is None:
            return "(N, ...)"
        return "(N, " + ", ".join(map(str, self.sample_shape)) + ")"

    def describe(self) -> str:
        return f"{self.shape_text()} of {self.dtype or 'numbers'}"


def as_batch(x, inputs: ModelInputs, *, where: str = "request",
             allow_single: bool = True) -> tuple[np.ndarray, bool]:
    """Check one request and return it as a batch of rows.

    Parameters
    ----------
    x : array_like
        (N, *sample_shape) with N >= 1, or one sample of ``sample_shape`` when the model
        declares it; numbers (int or float). Converted to the model's dtype when it has one.
    inputs : ModelInputs
        The model's declared sample shape and dtype (either may be None: then any
        (N, ...) with N >= 1 and any number dtype pass).
    where : str
        Start of error messages.
    allow_single : bool
        Take an array of exactly ``sample_shape`` as one sample (a Ray Data batch is
        always rows: False).

    Returns
    -------
    batch : numpy.ndarray
        Dims (N, ...).
    single : bool
        `x` was one sample (the reply drops the batch dim again).

    Raises
    ------
    VariantPackError
        Not an array of numbers, ragged, empty, or the wrong shape (the message gives the
        shape expected and the one seen); or a NaN or infinite value, or one beyond the
        model dtype's range (1e308 for float32): the model would answer it with NaN.
    """
    if isinstance(x, np.ndarray):
        a = x
    elif isinstance(x, (list, tuple, int, float, np.generic)):
        try:
            a = np.asarray(x)
        except (ValueError, RecursionError) as exc:   # ragged or absurdly deep nesting
            raise VariantPackError(f"{where}: not a rectangular array "
                                   f"({type(exc).__name__}: {exc})") from None
    else:
        raise VariantPackError(f"{where}: needs a NumPy array {inputs.describe()}; got "
                               f"{type(x).__name__}")
    if a.dtype.kind not in _NUMBER_KINDS and a.dtype.name != "bfloat16":
        raise VariantPackError(f"{where}: needs numbers (int or float); got dtype {a.dtype}")
    single = False
    want = inputs.sample_shape
    if want is not None and a.shape == want and allow_single:
        a, single = a[None], True
    elif want is not None and (a.ndim != len(want) + 1 or a.shape[1:] != want):
        raise VariantPackError(f"{where}: needs shape {inputs.shape_text()}"
                               + (f" or one sample {want}" if allow_single else "")
                               + f"; got {a.shape}")
    if a.ndim < 1 or a.shape[0] < 1:
        raise VariantPackError(f"{where}: needs at least one row (N >= 1); got shape "
                               f"{a.shape}")
    sent = a
    if inputs.dtype is not None and a.dtype != inputs.dtype:
        with np.errstate(over="ignore", invalid="ignore"):   # checked just below
            a = a.astype(inputs.dtype)
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        finite = np.isfinite(a.astype(np.float32) if a.dtype.name == "bfloat16" else a)
        if not finite.all():
            bad = np.argwhere(~finite)
            raise VariantPackError(
                f"{where}: needs finite numbers; {len(bad)} value(s) are NaN or infinite "
                f"or beyond the range of {a.dtype} (the first at index "
                f"{tuple(int(i) for i in bad[0])}: {sent[tuple(bad[0])].item()!r})")
    return a, single


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def decode_body(body: bytes, content_type: str | None) -> tuple[object, bool]:
    """The array of an HTTP request body, and whether it came as ``.npy``.

    Raises
    ------
    HttpError
        413 for a body over ``MAX_BODY_BYTES``; 415 for a media type other than JSON or
        ``.npy``; 400 for an empty body, JSON that does not parse or has no array, or a
        ``.npy`` file that does not load (pickled object arrays are refused).
    """
    if len(body) > MAX_BODY_BYTES:
        raise HttpError(413, f"request body of {len(body)} bytes is over the "
                             f"{MAX_BODY_BYTES} byte limit; send fewer rows per request")
    media = _media_type(content_type)
    if not body:
        raise HttpError(400, "empty request body; send a JSON array or a .npy file")
    if media in NPY_MEDIA_TYPES or (not media and body[:6] == b"\x93NUMPY"):
        try:
            return np.load(io.BytesIO(body), allow_pickle=False), True
        except Exception as exc:  # np.load raises ValueError, EOFError, OSError, ...
            raise HttpError(400, f"body is not a .npy array ({type(exc).__name__}: "
                                 f"{exc})") from None
    if media and media != JSON_MEDIA_TYPE and not media.endswith("+json"):
        raise HttpError(415, f"unsupported content type {media!r}; use {JSON_MEDIA_TYPE} "
                             f"or {NPY_MEDIA_TYPES[0]}")
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting too
        raise HttpError(400, f"body is not JSON ({type(exc).__name__}: {exc})") from None
    if isinstance(doc, Mapping):
        if "inputs" not in doc:
            raise HttpError(400, f"JSON object without 'inputs'; got keys {sorted(doc)[:8]}")
        doc = doc["inputs"]
    if not isinstance(doc, list):
        raise HttpError(400, f"JSON body must be an array (or {{'inputs': array}}); got "
                             f"{type(doc).__name__}")
    return doc, False


def wants_npy(accept: str | None, came_as_npy: bool) -> bool:
    """Reply as ``.npy``: the request was ``.npy``, or ``Accept`` names a ``.npy`` type."""
    accepted = {_media_type(part) for part in (accept or "").split(",")}
    if accepted & set(NPY_MEDIA_TYPES[:2]):
        return True
    if JSON_MEDIA_TYPE in accepted:
        return False
    return came_as_npy


def encode_reply(y, as_npy: bool) -> tuple[bytes, str]:
    """Body and media type of a reply holding `y` (an array, or a dict of arrays)."""
    if as_npy and isinstance(y, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(y), allow_pickle=False)
        return buf.getvalue(), NPY_REPLY_TYPE
    if isinstance(y, Mapping):
        doc = {"outputs": {k: np.asarray(v).tolist() for k, v in y.items()},
               "shape": {k: list(np.shape(v)) for k, v in y.items()},
               "dtype": {k: str(np.asarray(v).dtype) for k, v in y.items()}}
    else:
        a = np.asarray(y)
        doc = {"outputs": a.tolist(), "shape": list(a.shape), "dtype": str(a.dtype)}
    return json.dumps(doc).encode(), JSON_MEDIA_TYPE
