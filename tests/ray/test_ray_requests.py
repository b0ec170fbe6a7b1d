"""Request checking and HTTP bodies of hipdnn_async.ray (pure NumPy: runs without Ray)."""
import io
import json

import numpy as np
import pytest

import hipdnn_async as hd
from hipdnn_async.ray._requests import (MAX_BODY_BYTES, HttpError, ModelInputs, as_batch,
                                        decode_body, encode_reply, wants_npy)

DIGITS = ModelInputs((1, 8, 8), np.dtype(np.float32))
FREE = ModelInputs()


def test_rows_pass_and_are_converted_to_the_model_dtype():
    x = np.arange(2 * 64, dtype=np.int64).reshape(2, 1, 8, 8)
    batch, single = as_batch(x, DIGITS)
    assert not single and batch.dtype == np.float32 and batch.shape == (2, 1, 8, 8)
    np.testing.assert_array_equal(batch, x.astype(np.float32))


def test_one_sample_becomes_one_row_and_is_marked_single():
    batch, single = as_batch(np.ones((1, 8, 8), np.float32), DIGITS)
    assert single and batch.shape == (1, 1, 8, 8)
    with pytest.raises(hd.VariantPackError, match=r"needs shape \(N, 1, 8, 8\); got \(1, 8, 8\)"):
        as_batch(np.ones((1, 8, 8), np.float32), DIGITS, allow_single=False)


def test_nested_lists_are_arrays():
    batch, single = as_batch([[[0.0] * 8] * 8], DIGITS)
    assert single and batch.shape == (1, 1, 8, 8)


@pytest.mark.parametrize("x, fragment", [
    (np.zeros((2, 1, 8, 9)), r"needs shape \(N, 1, 8, 8\) or one sample \(1, 8, 8\); got \(2, 1, 8, 9\)"),
    (np.zeros((2, 8, 8)), r"got \(2, 8, 8\)"),
    (np.zeros((0, 1, 8, 8)), r"at least one row .* got shape \(0, 1, 8, 8\)"),
    (np.zeros((2, 1, 8, 8), bool), "needs numbers .* got dtype bool"),
    (np.zeros((2, 1, 8, 8), complex), "needs numbers .* got dtype complex128"),
    (np.array([None]), "needs numbers .* got dtype object"),
    ([[1, 2], [3]], "not a rectangular array"),
    ({"x": 1}, "needs a NumPy array .* got dict"),
    (b"abc", "needs a NumPy array .* got bytes"),
])
def test_malformed_requests_name_what_was_expected_and_seen(x, fragment):
    with pytest.raises(hd.VariantPackError, match=fragment):
        as_batch(x, DIGITS)


def test_without_a_declared_sample_shape_any_rows_of_numbers_pass():
    batch, single = as_batch(np.zeros((3, 5), np.float16), FREE)
    assert not single and batch.dtype == np.float16 and batch.shape == (3, 5)
    with pytest.raises(hd.VariantPackError, match="at least one row"):
        as_batch(np.float32(1.0), FREE)


def test_model_inputs_are_read_from_the_model():
    class M:
        sample_shape = [3, 4]
        dtype = "float16"
    assert ModelInputs.of(M()) == ModelInputs((3, 4), np.dtype(np.float16))
    assert ModelInputs.of(object()) == FREE


def _npy(a, **kw) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, **kw)
    return buf.getvalue()


def test_json_bodies_nested_list_or_inputs_object():
    doc, npy = decode_body(b"[[1, 2], [3, 4]]", "application/json; charset=utf-8")
    assert doc == [[1, 2], [3, 4]] and not npy
    doc, npy = decode_body(b'{"inputs": [1.5]}', None)
    assert doc == [1.5] and not npy


def test_npy_bodies_load_and_sniff_without_content_type():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for ctype in ("application/x-npy", "application/octet-stream", None):
        got, npy = decode_body(_npy(a), ctype)
        assert npy
        np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("body, ctype, status, fragment", [
    (b"", "application/json", 400, "empty request body"),
    (b"[1,", "application/json", 400, "not JSON"),
    (b"\xff\xfe", "application/json", 400, "not JSON"),
    (b'"text"', "application/json", 400, "must be an array .* got str"),
    (b'{"x": []}', "application/json", 400, "without 'inputs'"),
    (b"\x93NUMPYxx", "application/x-npy", 400, "not a .npy array"),
    (_npy(np.array([{}], dtype=object), allow_pickle=True), "application/x-npy", 400,
     "not a .npy array"),
    (b"a,b", "text/csv", 415, "unsupported content type 'text/csv'"),
])
def test_bad_bodies_are_http_errors_with_status_and_reason(body, ctype, status, fragment):
    with pytest.raises(HttpError, match=fragment) as err:
        decode_body(body, ctype)
    assert err.value.status == status


def test_oversized_bodies_are_413():
    with pytest.raises(HttpError) as err:
        decode_body(b" " * (MAX_BODY_BYTES + 1), "application/json")
    assert err.value.status == 413 and "limit" in err.value.message


def test_replies_keep_shape_and_dtype_in_json_and_npy():
    y = np.arange(20, dtype=np.float32).reshape(2, 10) / 3
    body, media = encode_reply(y, as_npy=False)
    doc = json.loads(body)
    assert media == "application/json" and doc["shape"] == [2, 10] and doc["dtype"] == "float32"
    np.testing.assert_array_equal(np.asarray(doc["outputs"], np.float32), y)   # exact
    body, media = encode_reply(y, as_npy=True)
    assert media == "application/x-npy"
    np.testing.assert_array_equal(np.load(io.BytesIO(body)), y)
    body, _ = encode_reply({"a": y[0], "b": y[1, :2]}, as_npy=True)    # dicts go as JSON
    assert json.loads(body)["shape"] == {"a": [10], "b": [2]}


def test_reply_format_follows_the_request_unless_accept_says():
    assert wants_npy(None, True) and not wants_npy(None, False)
    assert wants_npy("application/x-npy", False)
    assert not wants_npy("application/json", True)
    assert wants_npy("text/html, application/npy;q=0.9", False)


def test_absurdly_deep_json_is_a_400_not_a_500():
    """Fresh-user review F10: a deeply nested JSON body raised RecursionError (HTTP 500)."""
    depth = 200_000
    with pytest.raises(HttpError) as info:
        decode_body(b"[" * depth + b"]" * depth, "application/json")
    assert info.value.status == 400 and "RecursionError" in str(info.value)


@pytest.mark.parametrize("body", [b"[[[[1e308, 1, 2, 3]]]]", b"[[[[Infinity, 0, 0, 0]]]]",
                                  b"[[[[NaN, 0, 0, 0]]]]", b"[[[[-1e39, 0, 0, 0]]]]"])
def test_non_finite_pixels_are_refused_not_answered_with_nan(body):
    """Fresh-user review F11: 1e308 (inf once float32), Infinity or NaN pixels were accepted
    (HTTP 200 with all-NaN logits). They are a VariantPackError (the replica's 400) naming
    the first bad value and where it is."""
    inputs = ModelInputs((1, 1, 4), np.dtype(np.float32))
    doc, _ = decode_body(body, "application/json")
    with pytest.raises(hd.VariantPackError, match=r"needs finite numbers; 1 value\(s\).*"
                                                  r"float32.*index \(0, 0, 0, 0\)"):
        as_batch(doc, inputs)
    with pytest.raises(hd.VariantPackError, match="finite"):          # one sample, .npy
        as_batch(np.asarray(doc, np.float64)[0], inputs)
    big = np.zeros((3, 1, 1, 4), np.float16)
    big[2, 0, 0, 3] = np.inf
    with pytest.raises(hd.VariantPackError, match=r"index \(2, 0, 0, 3\): inf"):
        as_batch(big, ModelInputs((1, 1, 4), None))
    ok, _ = as_batch(np.full((2, 1, 1, 4), 3.4e38), inputs)            # float32's max: fine
    assert ok.dtype == np.float32 and np.isfinite(ok).all()
