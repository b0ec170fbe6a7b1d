"""What our bindings assume about the vendors' ABI, as C compile-time checks.

The Cython bindings hard-code enum values and mirror a few structs without including any
vendor header (they build with no SDK). This module reads those values and structs from
*our* side (the compiled modules' constants, the provider's algorithm-name tables, the
``ctypedef struct`` blocks of ``src_pyx``) and writes a header of ``_Static_assert``s that
the fakes include next to the real vendor headers: a constant or layout of ours that
disagrees with the header fails the build of the fakes, and with it every contract test.

To add a constant: one row in a table below (Python name, C expression of the header).
``test_abi.py`` fails when a binding exposes a constant no table checks.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Check", "CUDART_CONSTANTS", "CUDNN_CONSTANTS", "CUDNN_BACKEND_CONSTANTS",
           "NVIDIA_CONSTANTS", "STRUCTS", "FUNCTION_TABLES",
           "cudnn_algo_checks", "python_value", "parse_structs", "parse_function_types",
           "function_tables", "checks_header", "signature_checks", "cxx_signature_checks",
           "unchecked_constants", "unchecked_tables", "public_constants"]

REPO = Path(__file__).resolve().parents[2]
SRC_PYX = REPO / "src_pyx"


@dataclass(frozen=True)
class Check:
    """Our value ``module.attr`` must equal the header's C expression ``c_expr``."""

    module: str
    attr: str
    c_expr: str


_GPU = "hipdnn_async.runtime._gpu"
_CUDNN = "hipdnn_async.runtime._cudnn"
_BACKEND = "hipdnn_async.runtime._cudnn_backend"

# A public constant of a binding: an upper-case name (digits, ``_`` and the ``x`` of
# ``WINOGRAD_TILE_4x4`` allowed) bound to an int.
_CONSTANT_NAME = re.compile(r"[A-Z][A-Z0-9_]*(?:[0-9]x[0-9][A-Z0-9_]*)*")


def public_constants(module: str) -> dict:
    """``{name: value}`` of the public integer constants of a binding module."""
    mod = importlib.import_module(module)
    return {name: value for name, value in vars(mod).items()
            if _CONSTANT_NAME.fullmatch(name) and len(name) > 1 and type(value) is int}


def _table_checks(module: str, table: str) -> tuple:
    """One Check per row of a binding's constants table ``{name: (value, C name, header)}``
    (``_gpu.CUDA_CONSTANTS``); rows whose C name is a note in parentheses have no enumerator."""
    rows = getattr(importlib.import_module(module), table)
    return tuple(Check(module, f"{table}[{name}]", cname)
                 for name, (_value, cname, _header) in rows.items() if not cname.startswith("("))


# cuda_runtime_api.h / driver_types.h (CUDA 13): the CUDA runtime's constants table
CUDART_CONSTANTS = _table_checks(_GPU, "CUDA_CONSTANTS")

# cudnn_graph.h / cudnn_ops.h / cudnn_cnn.h (cuDNN 9.19)
CUDNN_CONSTANTS = (
    Check(_CUDNN, "DATA_FLOAT", "CUDNN_DATA_FLOAT"),
    Check(_CUDNN, "DATA_HALF", "CUDNN_DATA_HALF"),
    Check(_CUDNN, "DATA_BFLOAT16", "CUDNN_DATA_BFLOAT16"),
    Check(_CUDNN, "FORMAT_NCHW", "CUDNN_TENSOR_NCHW"),
    Check(_CUDNN, "FORMAT_NHWC", "CUDNN_TENSOR_NHWC"),
    Check(_CUDNN, "CROSS_CORRELATION", "CUDNN_CROSS_CORRELATION"),
    Check(_CUDNN, "DEFAULT_MATH", "CUDNN_DEFAULT_MATH"),
    Check(_CUDNN, "TENSOR_OP_MATH", "CUDNN_TENSOR_OP_MATH"),
    Check(_CUDNN, "FMA_MATH", "CUDNN_FMA_MATH"),
    Check(_CUDNN, "DETERMINISTIC", "CUDNN_DETERMINISTIC"),
    Check(_CUDNN, "ACTIVATION_RELU", "CUDNN_ACTIVATION_RELU"),
    Check(_CUDNN, "ACTIVATION_CLIPPED_RELU", "CUDNN_ACTIVATION_CLIPPED_RELU"),
    Check(_CUDNN, "ACTIVATION_IDENTITY", "CUDNN_ACTIVATION_IDENTITY"),
    Check(_CUDNN, "NOT_PROPAGATE_NAN", "CUDNN_NOT_PROPAGATE_NAN"),
    Check(_CUDNN, "OP_TENSOR_ADD", "CUDNN_OP_TENSOR_ADD"),
    Check(_CUDNN, "OP_TENSOR_MUL", "CUDNN_OP_TENSOR_MUL"),
    Check(_CUDNN, "BATCHNORM_SPATIAL", "CUDNN_BATCHNORM_SPATIAL"),
    Check(_CUDNN, "BATCHNORM_SPATIAL_PERSISTENT", "CUDNN_BATCHNORM_SPATIAL_PERSISTENT"),
    Check(_CUDNN, "STATUS_NOT_SUPPORTED", "CUDNN_STATUS_NOT_SUPPORTED"),
    Check(_CUDNN, "STATUS_BAD_PARAM", "CUDNN_STATUS_BAD_PARAM"),
    Check(_CUDNN, "BN_OPS_BN", "CUDNN_BATCHNORM_OPS_BN"),
    Check(_CUDNN, "BN_OPS_BN_ACTIVATION", "CUDNN_BATCHNORM_OPS_BN_ACTIVATION"),
)

# cudnn_graph.h (cuDNN 9.19.1): the backend binding names every constant as the header does
# without its ``CUDNN_`` prefix (its wrapping contract), so each public constant of the
# module is checked against ``CUDNN_<name>``; a new one is checked without a row here, and
# one the header lacks fails the build naming it.
CUDNN_BACKEND_CONSTANTS = tuple(Check(_BACKEND, name, "CUDNN_" + name)
                                for name in public_constants(_BACKEND))

NVIDIA_CONSTANTS = {"cudart": CUDART_CONSTANTS, "cudnn": CUDNN_CONSTANTS + CUDNN_BACKEND_CONSTANTS}

# The status tables ``{value: (C name, error type)}``: each name must have its value in the
# header (driver_types.h of CUDA 13 / cudnn_graph.h of cuDNN 9.19.1), or an error would be
# typed and named by the wrong row. The HIP table is checked by tests/contract/hip.
STATUS_TABLES = {"cudart": ((_GPU, "CUDA_STATUS"),), "cudnn": ((_CUDNN, "STATUS"),)}


def status_checks(which: str) -> list[tuple[str, int, str]]:
    """(C name, our value, where) of every row of ``which``'s status tables."""
    out = []
    for module, table in STATUS_TABLES[which]:
        rows = getattr(importlib.import_module(module), table)
        out += [(name, value, f"{module}.{table}[{value}]") for value, (name, _t) in rows.items()]
    return out

# The provider's algorithm names, indexed by the cudnnConvolution*Algo_t value.
_ALGO_TABLE = ("hipdnn_async.providers.cudnn._conv", "ALGO_NAMES")
_ALGO_PREFIX = ("CUDNN_CONVOLUTION_FWD_ALGO_", "CUDNN_CONVOLUTION_BWD_DATA_ALGO_",
                "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_")


@dataclass(frozen=True)
class StructCheck:
    """Our Cython struct ``ours`` mirrors the header's ``theirs``: every field both name
    sits at the same offset with the same size; sizeof(ours) ``size_rule`` sizeof(theirs)
    (``"=="``, or ``">="`` for a buffer we pad for safety)."""

    ours: str
    theirs: tuple
    size_rule: str
    header: str


STRUCTS = (
    StructCheck("AlgoPerf", ("cudnnConvolutionFwdAlgoPerf_t", "cudnnConvolutionBwdDataAlgoPerf_t",
                             "cudnnConvolutionBwdFilterAlgoPerf_t"), "==", "cudnn"),
    StructCheck("PointerAttributes", ("struct cudaPointerAttributes",), ">=", "cudart"),
    StructCheck("GraphExecUpdateResultInfo", ("cudaGraphExecUpdateResultInfo",), "==", "cudart"),
)


def python_value(check: Check):
    """Our value of a constant (``attr`` or ``TABLE[name]``), or None when the module no
    longer has it."""
    mod = importlib.import_module(check.module)
    if "[" in check.attr:
        table, name = check.attr.rstrip("]").split("[", 1)
        return getattr(mod, table, {}).get(name, (None,))[0]
    return getattr(mod, check.attr, None)


def cudnn_algo_checks() -> list[tuple[str, int, str]]:
    """(C enumerator, our index, where) for every name in the provider's algorithm table."""
    mod = importlib.import_module(_ALGO_TABLE[0])
    table = getattr(mod, _ALGO_TABLE[1])
    out = []
    for direction, names in enumerate(table):
        for value, name in enumerate(names):
            # "ALGO_0" -> CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 (the prefix ends in ALGO_)
            enumerator = _ALGO_PREFIX[direction] + name.removeprefix("ALGO_")
            out.append((enumerator, value,
                        f"{_ALGO_TABLE[0]}.{_ALGO_TABLE[1]}[{direction}][{value}]"))
    return out


_STRUCT_RE = re.compile(r"^(\s*)(?:ctypedef|cdef)\s+(?:packed\s+)?struct\s+(\w+)\s*:\s*(#.*)?$")
_FIELD_RE = re.compile(r"^\s*([A-Za-z_][\w\s\*]*?[\s\*])(\w+)\s*(\[\s*\d+\s*\])?\s*(#.*)?$")


def _sources():
    return sorted(p for p in SRC_PYX.glob("*") if p.suffix in (".pyx", ".pxd", ".pxi"))


def parse_structs(paths=None) -> dict[str, list[list[tuple[str, str, str]]]]:
    """``{name: [fields of each definition]}``, fields ``[(c_type, field, array_suffix)]``,
    of every ``ctypedef struct`` / ``cdef struct`` block in the Cython sources
    (``src_pyx/*.pyx|*.pxd|*.pxi``; a name defined in two files is checked twice)."""
    paths = paths or _sources()
    out: dict[str, list] = {}
    for path in paths:
        lines = Path(path).read_text().splitlines()
        i = 0
        while i < len(lines):
            m = _STRUCT_RE.match(lines[i])
            i += 1
            if not m:
                continue
            indent, name, fields = len(m.group(1)), m.group(2), []
            while i < len(lines):
                line = lines[i]
                if not line.strip() or line.strip().startswith("#"):
                    i += 1
                    continue
                if len(line) - len(line.lstrip()) <= indent:
                    break
                fm = _FIELD_RE.match(line)
                if fm:
                    fields.append((" ".join(fm.group(1).split()), fm.group(2), fm.group(3) or ""))
                i += 1
            out.setdefault(name, []).append(fields)
    return out


def _c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def checks_header(which: str) -> str:
    """The C text of the checks for ``which`` ("cudart" or "cudnn"): constants, and the
    structs whose header is ``which``. Constants missing on our side are left out (the
    completeness test names them)."""
    lines = [f"/* generated by tests/contract/_abi.py: our {which} constants and structs */",
             "#include <stddef.h>"]
    table = NVIDIA_CONSTANTS[which]
    for c in table:
        v = python_value(c)
        if v is None:
            continue
        msg = f"{c.module}.{c.attr} = {v} disagrees with the header's {c.c_expr}"
        lines.append(f"_Static_assert((long long)({c.c_expr}) == {int(v)}LL, {_c_string(msg)});")
    for c_name, value, where in status_checks(which):
        msg = f"{where} names {c_name}, whose header value is not {value}"
        lines.append(f"_Static_assert((long long)({c_name}) == {value}LL, {_c_string(msg)});")
    if which == "cudart":
        lines.extend(_properties_checks("struct cudaDeviceProp"))
    if which == "cudnn":
        for enumerator, value, where in cudnn_algo_checks():
            msg = f"{where} names {enumerator}, whose header value is not {value}"
            lines.append(f"_Static_assert((long long)({enumerator}) == {value}LL, {_c_string(msg)});")
    structs = parse_structs()
    for sc in STRUCTS:
        if sc.header != which:
            continue
        definitions = structs.get(sc.ours)
        if not definitions:
            lines.append(f"#error {_c_string(f'no struct {sc.ours} in src_pyx: update STRUCTS in tests/contract/_abi.py')}")
            continue
        for k, fields in enumerate(definitions):
            tag = f"ours_{sc.ours}_{k}"
            lines.append(f"struct {tag} {{")
            lines.extend(f"    {t} {f}{arr};" for t, f, arr in fields)
            lines.append("};")
            for theirs in sc.theirs:
                rule = sc.size_rule
                msg = f"sizeof(our {sc.ours}) {rule} sizeof({theirs}) does not hold"
                lines.append(f"_Static_assert(sizeof(struct {tag}) {rule} sizeof({theirs}), {_c_string(msg)});")
            lines.extend(_field_checks(tag, sc, fields))
    return "\n".join(lines) + "\n"


def _properties_checks(struct: str) -> list[str]:
    """The device-properties struct fits the buffer ``_gpu`` reads it into, and its name
    is the ``char[256]`` at offset 0 that ``_gpu`` reads as the device name."""
    gpu = importlib.import_module(_GPU)
    size, name = gpu._PROPS_BYTES, gpu._NAME_BYTES
    return [f"_Static_assert(sizeof({struct}) <= {size}, "
            f"{_c_string(f'{struct} is larger than _gpu.PROPS_BYTES ({size})')});",
            f"_Static_assert(offsetof({struct}, name) == 0 && sizeof((({struct} *)0)->name) == {name}, "
            f"{_c_string(f'{struct}.name is not a char[{name}] at offset 0')});"]


# fields of the vendor structs, from the headers (the checked ones must name the same)
_THEIR_FIELDS = {
    "cudnnConvolutionFwdAlgoPerf_t": ("algo", "status", "time", "memory", "determinism",
                                      "mathType", "reserved"),
    "cudnnConvolutionBwdDataAlgoPerf_t": ("algo", "status", "time", "memory", "determinism",
                                          "mathType", "reserved"),
    "cudnnConvolutionBwdFilterAlgoPerf_t": ("algo", "status", "time", "memory", "determinism",
                                            "mathType", "reserved"),
    "struct cudaPointerAttributes": ("type", "device", "devicePointer", "hostPointer"),
    "cudaGraphExecUpdateResultInfo": ("result", "errorNode", "errorFromNode"),
}


def _field_checks(tag: str, sc: StructCheck, fields) -> list[str]:
    out = []
    for theirs in sc.theirs:
        known = _THEIR_FIELDS[theirs]
        for _t, f, _arr in fields:
            if f not in known:
                continue
            msg = f"field {f} of our {sc.ours} is not where {theirs} has it (offset or size)"
            out.append(f"_Static_assert(offsetof(struct {tag}, {f}) == offsetof({theirs}, {f}) && "
                       f"sizeof(((struct {tag} *)0)->{f}) == sizeof((({theirs} *)0)->{f}), "
                       f"{_c_string(msg)});")
    return out


def unchecked_constants() -> list[str]:
    """Public integer constants of the bindings that no table checks."""
    checked = {(c.module, c.attr) for table in NVIDIA_CONSTANTS.values() for c in table}
    out = []
    for modname in (_GPU, _CUDNN, _BACKEND):
        for name, value in public_constants(modname).items():
            if (modname, name) not in checked:
                out.append(f"{modname}.{name} = {value}")
    return out


# ------------------------------------------------------------------ function signatures
# Tables of named function pointers in src_pyx (a struct whose fields are function-pointer
# typedefs): struct name -> (symbol prefix, header family). The field name is the symbol
# minus the prefix (RuntimeFns.Malloc -> cudaMalloc), or the whole symbol when it already
# starts with the prefix.
FUNCTION_TABLES = {"RuntimeFns": ("cuda", "cudart"), "CudnnFns": ("cudnn", "cudnn"),
                   "BackendFns": ("cudnn", "cudnn"),      # _cudnn_backend: cudnn_graph.h
                   "CudaOnlyFns": ("cuda", "cudart"),
                   # checked in C++ against both MIOpen headers by tests/contract/hip
                   "MiopenFns": ("miopen", "miopen"),
                   # checked in C++ against the HIP headers by tests/contract/hip
                   "HipOnlyFns": ("hip", "hip"),
                   # checked in C and C++ against oneDNN's headers by test_onednn_abi.py
                   "OnednnFns": ("dnnl_", "onednn")}

_FNTYPE_RE = re.compile(r"^\s*ctypedef\s+(.+?)\s*\(\s*\*\s*(\w+)\s*\)\s*\((.*?)\)\s*(noexcept)?\s*(nogil)?\s*(#.*)?$")


def _statements(lines):
    """Lines with a ctypedef's continuation lines joined (open parentheses carry on)."""
    buf, depth = "", 0
    for line in lines:
        code = line.split("#", 1)[0]
        if depth:
            buf += " " + code.strip()
        else:
            buf = code.rstrip()
        depth += code.count("(") - code.count(")")
        if depth <= 0:
            depth = 0
            yield buf


def parse_function_types(paths=None) -> dict[str, tuple[str, list[str]]]:
    """``{typedef name: (return type, [argument types])}`` of the function-pointer
    ``ctypedef``s in the Cython sources."""
    out = {}
    for path in paths or _sources():
        for line in _statements(Path(path).read_text().splitlines()):
            m = _FNTYPE_RE.match(line)
            if m:
                args = [a.strip() for a in m.group(3).split(",") if a.strip() and a.strip() != "void"]
                out[m.group(2)] = (" ".join(m.group(1).split()), args)
    return out


def _groups(paths=None) -> dict[str, list]:
    """Source files by module (``_cudnn.pxd`` and ``_cudnn.pyx`` share names)."""
    out: dict[str, list] = {}
    for p in paths or _sources():
        out.setdefault(Path(p).stem, []).append(p)
    return out


def function_tables(paths=None) -> dict[str, list[tuple[str, list[str], str]]]:
    """``{struct name: [(return type, [argument types], field)]}`` of every struct whose
    fields are all function-pointer typedefs of its own module (a binding's symbol table)."""
    out = {}
    for group in _groups(paths).values():
        types = parse_function_types(group)
        for name, definitions in parse_structs(group).items():
            for fields in definitions:
                if fields and all(t in types for t, _f, arr in fields if not arr):
                    out[name] = [(types[t][0], types[t][1], f) for t, f, _arr in fields]
    return out


def unchecked_tables() -> list[str]:
    """Function tables in src_pyx that FUNCTION_TABLES does not map to a header."""
    return sorted(set(function_tables()) - set(FUNCTION_TABLES))


def signature_checks(family: str) -> str:
    """C that calls every function of our tables for ``family`` through our declared
    argument types; compiled with conversion warnings as errors, so an argument count,
    order or type (int vs size_t, float vs double, a pointer vs a value) or a return type
    that disagrees with the header's prototype fails the build. Handles we declare
    ``void*`` pass as they are (C converts void* to any object pointer); our ``void**``
    out-parameters pass as ``void*`` (the header's ``cudaStream_t*`` and the like)."""
    lines = [f"/* generated by tests/contract/_abi.py: our {family} function tables */",
             "#include <stdint.h>"]
    structs = parse_structs()
    tables = {t: f for t, f in function_tables().items()
              if FUNCTION_TABLES.get(t, (None, None))[1] == family}
    used = {a.replace("const", "").replace("*", "").strip() for fields in tables.values()
            for _r, args, _f in fields for a in args} & set(structs)
    for name in sorted(used):       # our mirrored structs (their layout: checks_header)
        lines.append("typedef struct {")
        lines.extend(f"    {t} {f}{arr};" for t, f, arr in structs[name][0])
        lines.append(f"}} {name};")

    def passed_as(i, a):
        bare = a.replace("const", "").replace("*", "").strip()
        if a.replace(" ", "") == "void**" or bare in used:
            return f"(void *)a{i}"
        return f"a{i}"
    for table, fields in tables.items():
        prefix = FUNCTION_TABLES[table][0]
        for ret, args, field in fields:
            symbol = field if field.startswith(prefix) else prefix + field
            params = ", ".join(f"{a} a{i}" for i, a in enumerate(args)) or "void"
            passed = ", ".join(passed_as(i, a) for i, a in enumerate(args))
            lines.append(f"/* {table}.{field} */")
            lines.append(f"__attribute__((unused)) static {ret} check_{table}_{field}({params}) {{")
            if ret == "void":
                lines.append(f"    {symbol}({passed});")
            else:
                lines.append(f"    {ret} r = {symbol}({passed});")
                lines.append("    return r;")
            lines.append("}")
    return "\n".join(lines) + "\n"


# the header each family's prototypes come from, and the C++ spelling of a Cython type
FAMILY_HEADERS = {"cudart": ("cuda_runtime_api.h",), "cudnn": ("cudnn.h",),
                  "onednn": ("oneapi/dnnl/dnnl.h",)}
_CYTHON_TO_C = {"bint": "int"}


def cxx_signature_checks(family: str) -> str:
    """A C++ unit asserting that every function of our tables for ``family`` has the
    header prototype's exact ABI (``_abi_cxx``: arity, and each parameter and the return
    value of the same class and width), which the C check above does not prove for a
    value widened on the way (our ``int`` for the header's ``int64_t``). Compiled by
    test_abi.py with the vendor headers."""
    from . import _abi_cxx
    lines = [f"// generated by tests/contract/_abi.py: our {family} function tables vs the header",
             "#include <cstddef>", "#include <cstdint>", "#include <tuple>", "#include <type_traits>"]
    lines += [f"#include <{h}>" for h in FAMILY_HEADERS[family]]
    lines.append(_abi_cxx.TEMPLATES)
    for stem, group in sorted(_groups().items()):
        tables = {t: f for t, f in function_tables(group).items()
                  if FUNCTION_TABLES.get(t, (None, None))[1] == family}
        if not tables:
            continue
        namespace = "ours_" + stem.lstrip("_")
        types = {name: (ret, [_CYTHON_TO_C.get(a, a) for a in args])
                 for name, (ret, args) in parse_function_types(group).items()}
        structs = parse_structs(group)
        used = {a.replace("const", "").replace("*", "").strip()
                for _n, (_r, args) in types.items() for a in args} & set(structs)
        lines.append(f"namespace {namespace} {{")
        for name in sorted(used):
            lines.append(f"struct {name} {{")
            lines.extend(f"  {t} {f}{arr};" for t, f, arr in structs[name][0])
            lines.append("};")
        lines.append(f"}}  // namespace {namespace}")
        lines += _abi_cxx.typedefs(types, namespace)
        for table, fields in tables.items():
            prefix = FUNCTION_TABLES[table][0]
            typed = [(t, f) for t, f, _arr in parse_structs(group)[table][0]]
            names = {f: f for _t, f in typed if f.startswith(prefix)}
            lines += _abi_cxx.signature_asserts(prefix, typed, types, {}, names,
                                                namespace=namespace)
    return "\n".join(lines) + "\n"
