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
    (hd.DeviceError, RuntimeError, "HIPDNN_BACKEND_ERROR"),
    (hd.PerfDbError, ValueError, "INVALID_VALUE"),
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


# ------------------------------------------------------------------ vendor errors
from hipdnn_async import _errors as E  # noqa: E402

VENDOR_FAMILIES = [
    # (family, its not-supported type, its bad-param type or None, the base it also is)
    (E.GpuError, E.GpuNotSupportedError, None),
    (E.CudnnError, E.CudnnNotSupportedError, E.CudnnBadParamError),
    (E.MiopenError, E.MiopenNotSupportedError, E.MiopenBadParamError),
]
VENDOR_TYPES = [E.LibraryError, E.GpuDeviceError] + [
    t for fam in VENDOR_FAMILIES for t in fam if t is not None]


def _vendor(cls, **kw):
    fields = dict(status=3000, status_name="CUDNN_STATUS_NOT_SUPPORTED",
                  library="/opt/lib/libcudnn.so.9", call="cudnnConvolutionForward",
                  vendor_message="no kernel for this layout")
    fields.update(kw)
    return cls("cudnnConvolutionForward failed: CUDNN_STATUS_NOT_SUPPORTED (3000)", **fields)


@pytest.mark.parametrize("cls", VENDOR_TYPES)
def test_vendor_errors_pickle_with_every_field(cls):
    err = _vendor(cls, code="SHAPE_DEDUCTION_FAILED")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    fields = ("message", "code", "status", "status_name", "library", "call", "vendor_message")
    assert [getattr(back, f) for f in fields] == [getattr(err, f) for f in fields]
    assert str(back) == str(err)


@pytest.mark.parametrize("family, not_supported, bad_param", VENDOR_FAMILIES)
def test_every_failure_of_a_library_is_its_family_and_an_execution_error(family, not_supported,
                                                                         bad_param):
    for cls in (family, not_supported, bad_param):
        if cls is None:
            continue
        err = _vendor(cls)
        assert isinstance(err, family) and isinstance(err, E.VendorError)
        assert isinstance(err, hd.ExecutionError) and isinstance(err, hd.HipdnnError)
    # only the not-supported type lets the next engine try
    assert issubclass(not_supported, hd.DECLINE_TYPES)
    assert _vendor(not_supported).code == "GRAPH_NOT_SUPPORTED"
    assert not issubclass(family, hd.DECLINE_TYPES)
    assert _vendor(family).code == "GRAPH_EXECUTION_FAILED"
    if bad_param is not None:
        assert not issubclass(bad_param, hd.DECLINE_TYPES)


def test_no_device_is_a_device_error_and_a_gpu_error():
    err = _vendor(E.GpuDeviceError, status=100, status_name="cudaErrorNoDevice")
    assert isinstance(err, hd.DeviceError) and isinstance(err, E.GpuError)
    assert err.code == "HIPDNN_BACKEND_ERROR"


def test_a_missing_library_or_symbol_is_a_device_error_not_an_execution_error():
    err = E.LibraryError("cudaMallocAsync is not exported by /x/libcudart.so.12",
                         library="/x/libcudart.so.12", call="cudaMallocAsync")
    assert isinstance(err, hd.DeviceError) and not isinstance(err, hd.ExecutionError)
    assert not isinstance(err, hd.DECLINE_TYPES)


@pytest.mark.parametrize("bad_param, not_supported, family", [
    (E.CudnnBadParamError, E.CudnnNotSupportedError, E.CudnnError),
    (E.MiopenBadParamError, E.MiopenNotSupportedError, E.MiopenError),
])
def test_bad_param_at_build_is_a_not_supported_error_naming_the_call(bad_param, not_supported,
                                                                     family):
    err = bad_param("miopenConvolutionForward failed: miopenStatusBadParm (3)", status=3,
                    status_name="miopenStatusBadParm", library="libMIOpen.so.1",
                    call="miopenConvolutionForward", vendor_message="bad pads")
    built = err.at_build()
    assert type(built) is not_supported and isinstance(built, family)
    assert isinstance(built, hd.DECLINE_TYPES) and built.code == "GRAPH_NOT_SUPPORTED"
    assert str(built) == ("miopenConvolutionForward refused this graph's parameters: "
                          "miopenStatusBadParm (3): bad pads")
    assert (built.status, built.call, built.library) == (3, "miopenConvolutionForward",
                                                        "libMIOpen.so.1")
    assert built.__cause__ is err
    other = _vendor(family, status=4000)
    assert other.at_build() is other      # only BAD_PARAM changes meaning at build


def test_status_error_picks_the_type_and_name_from_the_table():
    table = {3000: ("CUDNN_STATUS_NOT_SUPPORTED", E.CudnnNotSupportedError),
             2000: ("CUDNN_STATUS_BAD_PARAM", E.CudnnBadParamError)}
    err = E.status_error(table, E.CudnnError, library="libcudnn.so.9", call="cudnnCreate",
                         status=3000, status_name="ignored", vendor_message="why")
    assert type(err) is E.CudnnNotSupportedError
    assert str(err) == "cudnnCreate failed: CUDNN_STATUS_NOT_SUPPORTED (3000): why"
    assert (err.status, err.status_name, err.vendor_message) == (
        3000, "CUDNN_STATUS_NOT_SUPPORTED", "why")
    unknown = E.status_error(table, E.CudnnError, library="l", call="f", status=4242,
                             status_name="CUDNN_STATUS_NEW_THING")
    assert type(unknown) is E.CudnnError
    assert str(unknown) == "f failed: CUDNN_STATUS_NEW_THING (4242)"
    assert unknown.vendor_message is None
    nameless = E.status_error({}, E.GpuError, library="l", call="cudaMalloc", status=7)
    assert nameless.status_name == "unknown status 7"


def test_prefixed_keeps_type_and_fields():
    err = _vendor(E.CudnnNotSupportedError)
    where = "plan 'conv1' (engine CUDNN_LEGACY_ENGINE) [stream 'cuda:0:s1']"
    out = err.prefixed(where)
    assert type(out) is E.CudnnNotSupportedError and out.__cause__ is err
    assert str(out) == f"{where}: {err.message}"
    assert (out.status, out.call, out.library, out.code) == (err.status, err.call, err.library,
                                                             err.code)
    assert pickle.loads(pickle.dumps(out)).message == out.message
    plain = hd.GraphError("bad dims", code="SHAPE_DEDUCTION_FAILED").prefixed("node 'c'")
    assert type(plain) is hd.GraphError and str(plain) == "node 'c': bad dims"
    assert plain.code == "SHAPE_DEDUCTION_FAILED"
