"""What our MIOpen and HIP bindings assume about the vendors' ABI, as C++ compile-time checks.

The bindings declare their own C types (``src_pyx/_miopen.pxd``, ``src_pyx/_gpu_api.pxd``)
and hard-code enum values (the ``_miopen`` module's constants, the HIP runtime's
constants table), so that they build with no SDK. This module reads all of that from *our*
side and writes one C++ translation unit that includes the real headers of a ROCm release
next to our declarations and ``static_assert``s that they agree:

- every constant: our value == the header's enumerator (a table below names the
  enumerator; constants a header version lacks are checked only where it has them);
- every mirrored struct: same size, every field at the same offset with the same size
  (``miopenConvSolution_t`` is 32 bytes, for example);
- every function of a binding's table: our function-pointer type is ABI-compatible with
  the header's prototype (same arity; each parameter and the return value of the same
  class and width; pointers compared through their pointees, ``void`` matching any
  opaque handle; enums and ints of one size alike).

``build_rocm`` (``_build_rocm.py``) compiles the unit against each header set before it
builds the fakes, so a wrong declaration fails every contract test of that header set.
``unchecked_constants`` names public constants of ``_miopen`` no table row checks.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from .. import _abi, _abi_cxx

__all__ = ["MiopenCheck", "MIOPEN_CONSTANTS", "MIOPEN_STRUCTS", "parse_fn_types",
           "parse_table", "checks_source", "hip5_checks_source", "hip5_absent",
           "unchecked_constants"]

SRC_PYX = _abi.SRC_PYX
_MIOPEN = "hipdnn_async.runtime._miopen"
_GPU = "hipdnn_async.runtime._gpu"
# our struct in _gpu_api.pxd -> (the HIP header's type, fields it names alike); ours may be
# larger (a pad for the other runtime's bigger struct)
HIP_STRUCTS = {
    "PointerAttributes": ("hipPointerAttribute_t", ("type", "device", "devicePointer", "hostPointer")),
}


@dataclass(frozen=True)
class MiopenCheck:
    """``_miopen.<attr>`` must equal the header's ``c_expr`` (from MIOpen ``since`` on)."""

    attr: str
    c_expr: str
    since: tuple = (0, 0, 0)


# miopen.h (MIOpen 3.4.0, 3.5.1)
MIOPEN_CONSTANTS = (
    MiopenCheck("STATUS_SUCCESS", "miopenStatusSuccess"),
    MiopenCheck("STATUS_NOT_INITIALIZED", "miopenStatusNotInitialized"),
    MiopenCheck("STATUS_INVALID_VALUE", "miopenStatusInvalidValue"),
    MiopenCheck("STATUS_BAD_PARM", "miopenStatusBadParm"),
    MiopenCheck("STATUS_ALLOC_FAILED", "miopenStatusAllocFailed"),
    MiopenCheck("STATUS_INTERNAL_ERROR", "miopenStatusInternalError"),
    MiopenCheck("STATUS_NOT_IMPLEMENTED", "miopenStatusNotImplemented"),
    MiopenCheck("STATUS_UNKNOWN_ERROR", "miopenStatusUnknownError"),
    MiopenCheck("STATUS_UNSUPPORTED_OP", "miopenStatusUnsupportedOp"),
    MiopenCheck("STATUS_GPU_OPERATIONS_SKIPPED", "miopenStatusGpuOperationsSkipped"),
    MiopenCheck("STATUS_VERSION_MISMATCH", "miopenStatusVersionMismatch"),
    MiopenCheck("DATA_HALF", "miopenHalf"),
    MiopenCheck("DATA_FLOAT", "miopenFloat"),
    MiopenCheck("DATA_BFLOAT16", "miopenBFloat16"),
    MiopenCheck("CONVOLUTION", "miopenConvolution"),
    MiopenCheck("CONV_ATTRIB_DETERMINISTIC", "MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC"),
    MiopenCheck("ALGO_GEMM", "miopenConvolutionAlgoGEMM"),
    MiopenCheck("ALGO_DIRECT", "miopenConvolutionAlgoDirect"),
    MiopenCheck("ALGO_FFT", "miopenConvolutionAlgoFFT"),
    MiopenCheck("ALGO_WINOGRAD", "miopenConvolutionAlgoWinograd"),
    MiopenCheck("ALGO_IMPLICIT_GEMM", "miopenConvolutionAlgoImplicitGEMM"),
    MiopenCheck("CONV_FWD_ALGO_DIRECT", "miopenConvolutionFwdAlgoDirect"),
    MiopenCheck("PROBLEM_FORWARD", "miopenProblemDirectionForward"),
    MiopenCheck("PROBLEM_BACKWARD", "miopenProblemDirectionBackward"),
    MiopenCheck("PROBLEM_BACKWARD_WEIGHTS", "miopenProblemDirectionBackwardWeights"),
    # our direction numbering is the Find 2.0 one (find_solutions passes it through)
    MiopenCheck("FORWARD", "miopenProblemDirectionForward"),
    MiopenCheck("BACKWARD_DATA", "miopenProblemDirectionBackward"),
    MiopenCheck("BACKWARD_WEIGHTS", "miopenProblemDirectionBackwardWeights"),
    MiopenCheck("TENSOR_CONV_X", "miopenTensorConvolutionX"),
    MiopenCheck("TENSOR_CONV_W", "miopenTensorConvolutionW"),
    MiopenCheck("TENSOR_CONV_Y", "miopenTensorConvolutionY"),
    MiopenCheck("RESULTS_ORDER_BY_TIME", "miopenFindResultsOrderByTime"),
    MiopenCheck("VERTICAL_FUSION", "miopenVerticalFusion"),
    MiopenCheck("ACTIVATION_PASTHRU", "miopenActivationPASTHRU"),
    MiopenCheck("ACTIVATION_RELU", "miopenActivationRELU"),
    MiopenCheck("ACTIVATION_CLIPPEDRELU", "miopenActivationCLIPPEDRELU"),
    MiopenCheck("ACTIVATION_CLAMP", "miopenActivationCLAMP", (3, 5, 0)),
    MiopenCheck("BN_SPATIAL", "miopenBNSpatial"),
    MiopenCheck("TENSOR_OP_ADD", "miopenTensorOpAdd"),
    MiopenCheck("TENSOR_OP_MUL", "miopenTensorOpMul"),
    MiopenCheck("TUNING_POLICY_NONE", "miopenTuningPolicyNone", (3, 5, 0)),
    MiopenCheck("TUNING_POLICY_SEARCH", "miopenTuningPolicySearch", (3, 5, 0)),
)

# our struct (src_pyx) -> (header type, fields the header names alike)
MIOPEN_STRUCTS = {
    "ConvSolution": ("miopenConvSolution_t", ("time", "workspace_size", "solution_id", "algorithm")),
}

_CYTHON_TO_C = {"bint": "int"}


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


_FN_RE = re.compile(r"ctypedef\s+([\w\s\*]+?)\s*\(\s*\*\s*(\w+)\s*\)\s*\(([^)]*)\)\s*noexcept\s+nogil",
                    re.S)


def parse_fn_types(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``{typedef: (return type, [parameter types])}`` of every function-pointer
    ``ctypedef`` in a Cython file, as C types."""
    out = {}
    for ret, name, args in _FN_RE.findall(_strip_comments(Path(path).read_text())):
        params = [" ".join(a.split()) for a in args.split(",") if a.strip()]
        params = [_CYTHON_TO_C.get(p, p) for p in params]
        if params == ["void"]:
            params = []
        out[name] = (" ".join(ret.split()), params)
    return out


def parse_structs(paths) -> dict[str, list[tuple[str, str, str]]]:
    """``{name: [(c_type, field, array_suffix)]}`` of the struct blocks of ``paths`` (the
    first definition of each name)."""
    out = {}
    for name, found in _abi.parse_structs(paths).items():
        out[name] = found[0] if found and isinstance(found[0], list) else found
    return out


def parse_table(struct: str, paths=None) -> list[tuple[str, str]]:
    """``[(typedef, field)]`` of a binding's table struct (``MiopenFns``, ``RuntimeFns``)."""
    fields = parse_structs(paths).get(struct)
    if fields is None:
        raise LookupError(f"no struct {struct} in src_pyx")
    return [(t, f) for t, f, _arr in fields]


def _since_guard(since: tuple) -> str:
    major, minor, patch = since
    return (f"#if (MIOPEN_VERSION_MAJOR * 10000 + MIOPEN_VERSION_MINOR * 100 + "
            f"MIOPEN_VERSION_PATCH) >= {major * 10000 + minor * 100 + patch}")


_TEMPLATES = _abi_cxx.TEMPLATES


_c_string = _abi_cxx.c_string


# Names hip_runtime_api.h overloads with function templates in C++ even under
# __HIP_DISABLE_CPP_FUNCTIONS__: their address is taken through the C prototype (spelled
# here as the header spells it; a header that disagrees fails the static_cast).
_OVERLOADED = {"hipMallocAsync": "hipError_t (*)(void**, size_t, hipStream_t)"}


def _signature_checks(prefix: str, table: list[tuple[str, str]], fn_types: dict,
                      guards: dict, names: dict | None = None) -> list[str]:
    """static_asserts of one binding table against the header's prototypes
    (``_abi_cxx.signature_asserts``, with HIP's overloaded names)."""
    return _abi_cxx.signature_asserts(prefix, table, fn_types, guards, names, _OVERLOADED)


def _struct_checks(ours_name: str, fields, theirs: str, named: tuple) -> list[str]:
    tag = f"ours::{ours_name}"
    out = [f"static_assert(sizeof({tag}) == sizeof({theirs}), "
           f"{_c_string(f'sizeof(our {ours_name}) != sizeof({theirs})')});"]
    ours_fields = [f for _t, f, _a in fields]
    for f in named:
        if f not in ours_fields:
            out.append(f"#error {_c_string(f'our {ours_name} lacks field {f} of {theirs}')}")
            continue
        out.append(f"static_assert(offsetof({tag}, {f}) == offsetof({theirs}, {f}) && "
                   f"sizeof((({tag}*)0)->{f}) == sizeof((({theirs}*)0)->{f}), "
                   f"{_c_string(f'field {f} of our {ours_name} is not where {theirs} has it')});")
    return out


def checks_source() -> str:
    """The C++ unit checking the MIOpen binding (and, where its tables exist, the HIP
    runtime's) against the headers it is compiled with."""
    mod = importlib.import_module(_MIOPEN)
    lines = ["// generated by tests/contract/hip/_abi_rocm.py: our MIOpen declarations vs the header",
             "#include <cstddef>", "#include <cstdint>", "#include <tuple>", "#include <type_traits>",
             "#define MIOPEN_BETA_API 1", "#define __HIP_DISABLE_CPP_FUNCTIONS__ 1", "#include <miopen/miopen.h>", "#include <miopen/version.h>",
             "#include <hip/hip_runtime_api.h>", _TEMPLATES]
    # our types
    structs = parse_structs([SRC_PYX / "_miopen.pxd"])
    fn_types = parse_fn_types(SRC_PYX / "_miopen.pxd")
    lines.append("namespace ours {")
    for name in MIOPEN_STRUCTS:
        lines.append(f"struct {name} {{")
        lines.extend(f"  {t} {f}{a};" for t, f, a in structs[name])
        lines.append("};")
    for name, (ret, params) in fn_types.items():
        lines.append(f"typedef {ret} (*{name})({', '.join(params)});")
    lines.append("}  // namespace ours")
    # constants
    for c in MIOPEN_CONSTANTS:
        value = getattr(mod, c.attr, None)
        if value is None:
            lines.append(f"#error {_c_string(f'_miopen.{c.attr} is gone: update tests/contract/hip/_abi_rocm.py')}")
            continue
        if c.since != (0, 0, 0):
            lines.append(_since_guard(c.since))
        lines.append(f"static_assert((long long)({c.c_expr}) == {int(value)}LL, "
                     f"{_c_string(f'_miopen.{c.attr} = {value} disagrees with the header: {c.c_expr}')});")
        if c.since != (0, 0, 0):
            lines.append("#endif")
    # the status table: each row's name must be the header's name of its value
    for value, (c_name, _type) in mod.STATUS.items():
        lines.append(f"static_assert((long long)({c_name}) == {int(value)}LL, "
                     f"{_c_string(f'_miopen.STATUS[{value}] names {c_name}, whose value differs')});")
    for ours_name, (theirs, named) in MIOPEN_STRUCTS.items():
        lines.extend(_struct_checks(ours_name, structs[ours_name], theirs, named))
    # signatures: the optional entry points exist from the version _miopen.OPTIONAL names
    guards = {name: _since_guard(since) for name, since in mod.OPTIONAL.items()}
    lines.extend(_signature_checks("miopen", parse_table("MiopenFns", [SRC_PYX / "_miopen.pxd"]),
                                   fn_types, guards))
    lines.extend(_hip_checks())
    return "\n".join(lines) + "\n"


def _hip_checks() -> list[str]:
    """The HIP runtime instance of ``_gpu`` (helper rt's tables) against hip_runtime_api.h:
    its constants and status values, the properties offset of gcnArchName, the pointer
    attributes struct, and its function table under the HIP names it looks up."""
    gpu = importlib.import_module(_GPU)
    out = ["// ---- the HIP runtime (_gpu.Runtime('hip'))"]
    for name, (value, c_name, _header) in gpu.HIP_CONSTANTS.items():
        out.append(f"static_assert((long long)({c_name}) == {int(value)}LL, "
                   f"{_c_string(f'_gpu.HIP_CONSTANTS[{name!r}] = {value} disagrees with {c_name}')});")
    for value, (c_name, _type) in gpu.HIP_STATUS.items():
        out.append(f"static_assert((long long)({c_name}) == {int(value)}LL, "
                   f"{_c_string(f'_gpu.HIP_STATUS[{value}] names {c_name}, whose value differs')});")
    offset = gpu._GCN_ARCH_OFFSET["GetDevicePropertiesR0600"]
    out.append(f"static_assert(offsetof(hipDeviceProp_tR0600, gcnArchName) == {offset} && "
               "sizeof(((hipDeviceProp_tR0600*)0)->gcnArchName) == 256, "
               f"{_c_string(f'_gpu._GCN_ARCH_OFFSET: gcnArchName is not a char[256] at {offset}')});")
    size, name = gpu._PROPS_BYTES, gpu._NAME_BYTES
    out.append(f"static_assert(sizeof(hipDeviceProp_tR0600) <= {size} && "
               f"offsetof(hipDeviceProp_tR0600, name) == 0 && "
               f"sizeof(((hipDeviceProp_tR0600*)0)->name) == {name}, "
               f"{_c_string(f'hipDeviceProp_tR0600 does not fit _gpu.PROPS_BYTES ({size}) or its name is not a char[{name}] at 0')});")
    api = SRC_PYX / "_gpu_api.pxd"
    structs = parse_structs([api])
    out.append("namespace ours_hip {")
    for name in HIP_STRUCTS:
        out.append(f"struct {name} {{")
        out.extend(f"  {t} {f}{a};" for t, f, a in structs[name])
        out.append("};")
    fn_types = parse_fn_types(api)
    for name, (ret, params) in fn_types.items():
        out.append(f"typedef {ret} (*{name})({', '.join(params)});")
    out.append("}  // namespace ours_hip")
    for ours_name, (theirs, named) in HIP_STRUCTS.items():
        tag = f"ours_hip::{ours_name}"
        out.append(f"static_assert(sizeof({tag}) >= sizeof({theirs}), "
                   f"{_c_string(f'our {ours_name} is smaller than {theirs}')});")
        for f in named:
            out.append(f"static_assert(offsetof({tag}, {f}) == offsetof({theirs}, {f}) && "
                       f"sizeof((({tag}*)0)->{f}) == sizeof((({theirs}*)0)->{f}), "
                       f"{_c_string(f'field {f} of our {ours_name} is not where {theirs} has it')});")
    aliases = gpu._ALIASES["hip"]
    table = parse_table("RuntimeFns", [api])
    names = {f: "hip" + aliases[f][0] for _t, f in table if f in aliases}
    checks = _signature_checks("hip", table, fn_types, {}, names)
    # the calls whose signature is HIP's own (RuntimeFns holds the common ones)
    checks += _signature_checks("hip", parse_table("HipOnlyFns", [api]), fn_types, {})
    out.extend(c.replace("ours::", "ours_hip::") for c in checks)
    return out


# hipPointerAttribute_t of ROCm 5 names its first field memoryType (ROCm 6: type)
_HIP5_FIELDS = {"type": "memoryType"}


def hip5_checks_source() -> str:
    """The C++ unit checking what the HIP runtime uses on ROCm 5 (hipRuntimeGetVersion
    < 60000000) against ROCm 5.2.3's hip_runtime_api.h: HIP_CONSTANTS overlaid with
    HIP5_CONSTANTS (exactly the table ``_select_constants`` builds), the status table,
    gcnArchName's offset in the unsuffixed hipDeviceProp_t and the pointer attributes.
    Rows whose value is -1 (no such enumerator in ROCm 5) are ``hip5_absent``'s."""
    gpu = importlib.import_module(_GPU)
    out = ["// generated by tests/contract/hip/_abi_rocm.py: _gpu's ROCm 5 tables vs the header",
           "#include <cstddef>", "#define __HIP_DISABLE_CPP_FUNCTIONS__ 1",
           "#include <hip/hip_runtime_api.h>", "#include <hip/hip_version.h>",
           "static_assert(HIP_VERSION_MAJOR == 5, \"not a ROCm 5 hip_version.h\");"]
    for name, (value, c_name, _header) in {**gpu.HIP_CONSTANTS, **gpu.HIP5_CONSTANTS}.items():
        if value == -1:
            continue
        table = "HIP5_CONSTANTS" if name in gpu.HIP5_CONSTANTS else "HIP_CONSTANTS"
        out.append(f"static_assert((long long)({c_name}) == {int(value)}LL, "
                   f"{_c_string(f'_gpu.{table}[{name!r}] = {value} disagrees with {c_name} (ROCm 5)')});")
    for value, (c_name, _type) in gpu.HIP_STATUS.items():
        out.append(f"static_assert((long long)({c_name}) == {int(value)}LL, "
                   f"{_c_string(f'_gpu.HIP_STATUS[{value}] names {c_name}, whose value differs (ROCm 5)')});")
    offset = gpu._GCN_ARCH_OFFSET["GetDeviceProperties"]
    out.append(f"static_assert(offsetof(hipDeviceProp_t, gcnArchName) == {offset} && "
               "sizeof(((hipDeviceProp_t*)0)->gcnArchName) == 256, "
               f"{_c_string(f'_gpu._GCN_ARCH_OFFSET: gcnArchName is not a char[256] at {offset} (ROCm 5)')});")
    size, name = gpu._PROPS_BYTES, gpu._NAME_BYTES
    out.append(f"static_assert(sizeof(hipDeviceProp_t) <= {size} && offsetof(hipDeviceProp_t, name) == 0 "
               f"&& sizeof(((hipDeviceProp_t*)0)->name) == {name}, "
               f"{_c_string(f'hipDeviceProp_t does not fit _gpu.PROPS_BYTES ({size}) or its name is not a char[{name}] at 0')});")
    structs = parse_structs([SRC_PYX / "_gpu_api.pxd"])
    out.append("namespace ours_hip {")
    for ours_name in HIP_STRUCTS:
        out.append(f"struct {ours_name} {{")
        out.extend(f"  {t} {f}{a};" for t, f, a in structs[ours_name])
        out.append("};")
    out.append("}  // namespace ours_hip")
    for ours_name, (theirs, named) in HIP_STRUCTS.items():
        tag = f"ours_hip::{ours_name}"
        out.append(f"static_assert(sizeof({tag}) >= sizeof({theirs}), "
                   f"{_c_string(f'our {ours_name} is smaller than {theirs} (ROCm 5)')});")
        for f in named:
            t = _HIP5_FIELDS.get(f, f)
            out.append(f"static_assert(offsetof({tag}, {f}) == offsetof({theirs}, {t}) && "
                       f"sizeof((({tag}*)0)->{f}) == sizeof((({theirs}*)0)->{t}), "
                       f"{_c_string(f'field {f} of our {ours_name} is not where {theirs} has {t} (ROCm 5)')});")
    return "\n".join(out) + "\n"


def hip5_absent() -> dict[str, str]:
    """``{HIP5_CONSTANTS name: ROCm 6 enumerator}`` of the rows that say ROCm 5 has no such
    value (-1): the ROCm 5.2.3 headers must not declare that enumerator."""
    gpu = importlib.import_module(_GPU)
    return {name: gpu.HIP_CONSTANTS[name][1] for name, (value, _c, _h) in gpu.HIP5_CONSTANTS.items()
            if value == -1}


def unchecked_constants() -> list[str]:
    """Public integer constants of ``_miopen`` that no row of MIOPEN_CONSTANTS checks."""
    mod = importlib.import_module(_MIOPEN)
    checked = {c.attr for c in MIOPEN_CONSTANTS}
    return [f"{_MIOPEN}.{name} = {value}" for name, value in vars(mod).items()
            if re.fullmatch(r"[A-Z][A-Z0-9_]+", name) and type(value) is int and name not in checked]
