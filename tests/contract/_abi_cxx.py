"""Strict ABI checks of our function-pointer types against a vendor's C prototypes, in C++.

A C compile of a call through our declared types (``_abi.signature_checks``) catches
narrowing, sign changes, pointer mismatches and arity, but not a value widened on the way
(our ``int`` where the header takes ``int64_t``). The C++ unit these helpers write compares
the types themselves: for every function of a table, ``static_assert``s that the header's
prototype has our arity, and that each parameter and the return value is of the same class
(integral-or-enum / floating / pointer / class) and width, pointers compared through their
pointees (``void`` matching any opaque handle). Used for the NVIDIA tables
(``_abi.cxx_signature_checks``) and the MIOpen / HIP ones (``hip/_abi_rocm.py``).
"""
from __future__ import annotations

__all__ = ["TEMPLATES", "c_string", "signature_asserts", "typedefs"]

TEMPLATES = r"""
namespace hd_abi {
// ABI-compatible types: same class (integral-or-enum / floating / pointer / class) and
// width; pointers through their pointees, void matching any (opaque handles)
template <class A, class B, class = void> struct same_impl : std::false_type {};
template <class A, class B> constexpr bool same_v =
    same_impl<std::remove_cv_t<A>, std::remove_cv_t<B>>::value;
template <> struct same_impl<void, void, void> : std::true_type {};
template <class A, class B>
struct same_impl<A, B, std::enable_if_t<(std::is_integral_v<A> || std::is_enum_v<A>) &&
                                        (std::is_integral_v<B> || std::is_enum_v<B>)>>
    : std::bool_constant<sizeof(A) == sizeof(B)> {};
template <class A, class B>
struct same_impl<A, B, std::enable_if_t<std::is_floating_point_v<A> && std::is_floating_point_v<B>>>
    : std::bool_constant<sizeof(A) == sizeof(B)> {};
template <class A, class B>
struct same_impl<A, B, std::enable_if_t<std::is_class_v<A> && std::is_class_v<B>>>
    : std::bool_constant<sizeof(A) == sizeof(B)> {};
template <class A, class B>
struct same_impl<A*, B*, void>
    : std::bool_constant<std::is_void_v<std::remove_cv_t<A>> || std::is_void_v<std::remove_cv_t<B>> ||
                         same_v<A, B>> {};
struct none {};
template <class F> struct arity;
template <class R, class... A> struct arity<R (*)(A...)> : std::integral_constant<size_t, sizeof...(A)> {};
template <class F> struct result;
template <class R, class... A> struct result<R (*)(A...)> { using type = R; };
template <size_t I, class F> struct param { using type = none; };
template <size_t I, class R, class... A> struct param<I, R (*)(A...)> {
  using type = std::conditional_t<(I < sizeof...(A)),
                                  std::tuple_element_t<(I < sizeof...(A) ? I : 0), std::tuple<A..., none>>, none>;
};
template <size_t I, class F, class G> constexpr bool param_same =
    same_v<typename param<I, F>::type, typename param<I, G>::type>;
}  // namespace hd_abi
"""


def c_string(s: str) -> str:
    """``s`` as a C string literal."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def typedefs(fn_types: dict, namespace: str = "ours") -> list[str]:
    """C++ ``typedef``s of our function-pointer types (``{name: (ret, [params])}``) in
    ``namespace``."""
    out = [f"namespace {namespace} {{"]
    out += [f"typedef {ret} (*{name})({', '.join(params)});" for name, (ret, params) in fn_types.items()]
    out.append(f"}}  // namespace {namespace}")
    return out


def signature_asserts(prefix: str, table: list[tuple[str, str]], fn_types: dict,
                      guards: dict, names: dict | None = None, overloaded: dict | None = None,
                      namespace: str = "ours") -> list[str]:
    """static_asserts of one binding table against the header's prototypes.

    ``table`` is ``[(typedef, field)]``; ``fn_types`` our types (``{typedef: (ret,
    [params])}``, declared in ``namespace`` by :func:`typedefs`); ``names`` maps a field to
    the C symbol (default ``prefix + field``); ``guards`` a field to a preprocessor
    condition under which the header declares it; ``overloaded`` a symbol C++ overloads to
    the C prototype its address is taken through."""
    out = []
    for typedef, field in table:
        if typedef not in fn_types:
            out.append(f"#error {c_string(f'{field}: no function-pointer ctypedef {typedef}')}")
            continue
        sym = (names or {}).get(field, prefix + field)
        ret, params = fn_types[typedef]
        guard = guards.get(field)
        if guard:
            out.append(guard)
        ours, theirs = f"{namespace}::{typedef}", f"decltype(&{sym})"
        if sym in (overloaded or {}):
            theirs = f"decltype(static_cast<{overloaded[sym]}>(&{sym}))"
        out.append(f"static_assert(hd_abi::arity<{theirs}>::value == {len(params)}, "
                   f"{c_string(f'{sym}: the header takes a different number of parameters than our {typedef} ({len(params)})')});")
        out.append(f"static_assert(hd_abi::same_v<hd_abi::result<{theirs}>::type, {ret}>, "
                   f"{c_string(f'{sym}: return type differs from our {typedef} ({ret})')});")
        for i, p in enumerate(params):
            out.append(f"static_assert(hd_abi::param_same<{i}, {theirs}, {ours}>, "
                       f"{c_string(f'{sym}: parameter {i + 1} differs from our {typedef} ({p})')});")
        if guard:
            out.append("#endif")
    return out
