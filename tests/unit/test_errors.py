"""The error tree: base classes, codes from hipDNN's ErrorCode, pickling, the decline set."""
import pickle

import pytest

import hipdnn_async as hd

CASES = [
    (hd.GraphError, ValueError, "INVALID_VALUE"),
    (hd.NotSupportedError, hd.HipdnnError, "GRAPH_NOT_SUPPORTED"),
    (hd.KnobError, ValueError, "INVALID_VALUE"),
    (hd.VariantPackError, ValueError, "INVALID_VARIANT_PACK"),
    (hd.ExecutionError, RuntimeError, "GRAPH_EXECUTION_FAILED"),
    (hd.DeviceError, RuntimeError, "GRAPH_EXECUTION_PLAN_CREATION_FAILED"),
]


@pytest.mark.parametrize("cls, also, code", CASES)
def test_classes_codes_and_bases(cls, also, code):
    err = cls("node 'c': bad")
    assert isinstance(err, hd.HipdnnError) and isinstance(err, also)
    assert err.code == code
    assert str(err) == "node 'c': bad"


@pytest.mark.parametrize("cls", [c for c, _, _ in CASES] + [hd.HipdnnError])
def test_every_error_pickles_with_its_fields(cls):
    err = cls("where: what", code="SHAPE_DEDUCTION_FAILED", status=3, status_name="BadParm")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert (str(back), back.code, back.status, back.status_name) == (
        "where: what", "SHAPE_DEDUCTION_FAILED", 3, "BadParm")


def test_decline_set_is_not_supported_and_import_error():
    # cuDNN frontend test_decline_types.py: only these let the next engine try.
    assert set(hd.DECLINE_TYPES) == {hd.NotSupportedError, ImportError}
    assert pickle.loads(pickle.dumps(hd.DECLINE_TYPES)) == hd.DECLINE_TYPES
    assert not issubclass(hd.GraphError, hd.DECLINE_TYPES)
