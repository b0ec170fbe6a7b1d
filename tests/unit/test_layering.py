"""The package's import graph: layers import downward only, and nothing loops.

Static (every import statement, function-level ones too), so an import that would only
run on a GPU machine is checked here as well. Layers (STYLE.md s.1, issue 9 item 7):
leaves (_errors, _types, _layout, _version, _knobs, _perfdb, _log) -> graph -> patterns -> providers ->
runtime; queues -> runtime, providers._base; only _device, _lowering, _batcher, _bench,
cli, __main__, demo and __init__ see everything.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

import hipdnn_async

PKG = pathlib.Path(hipdnn_async.__file__).parent
LEAVES = ("_errors", "_types", "_layout", "_version", "_knobs", "_perfdb", "_log")


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = p
    return mods


def _compiled(name: str) -> bool:
    path = PKG.joinpath(*name.split("."))
    return path.with_suffix(".pyi").exists() or any(path.parent.glob(path.name + ".*.so"))


def _edges() -> dict[str, set[str]]:
    """Module -> modules of ours it imports (names relative to the package; '' = __init__)."""
    mods = _modules()
    edges = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".") if pkg else []
                    base = base[:len(base) - node.level + 1]
                    head = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").startswith("hipdnn_async"):
                    head = node.module[len("hipdnn_async"):].lstrip(".")
                else:
                    continue
                for a in node.names:
                    full = f"{head}.{a.name}".lstrip(".")
                    if full in mods:
                        targets.append(full)
                    elif not (_compiled(full) or _compiled(head)):
                        targets.append(head)    # a compiled module is a leaf of its own
            elif isinstance(node, ast.Import):
                targets = [a.name[len("hipdnn_async"):].lstrip(".") for a in node.names
                           if a.name.split(".")[0] == "hipdnn_async"]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t in mods and t != name:
                    out.add(t)
        edges[name] = out
    return edges


EDGES = _edges()


def _in(mod: str, *layers: str) -> bool:
    return any(mod == layer or mod.startswith(layer + ".") for layer in layers)


def test_no_import_cycles():
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(EDGES[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(EDGES):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaves_import_only_leaves(leaf):
    # a leaf may be a package (_perfdb): each of its modules imports only leaves
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if _in(m, leaf)
                 for t in ts if not _in(t, *LEAVES))
    assert not bad, f"{leaf} imports {bad}"


@pytest.mark.parametrize("layer,allowed", [
    ("graph", ("graph", *LEAVES)),
    ("patterns", ("patterns", "graph", *LEAVES)),
    ("runtime", ("runtime", *LEAVES)),
    ("queues", ("queues", "runtime", "providers._base", *LEAVES)),
])
def test_layers_import_downward_only(layer, allowed):
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if _in(m, layer)
                 for t in ts if not _in(t, *allowed))
    assert not bad, f"{layer} imports above itself: {bad}"


def test_providers_use_no_graph_internals():
    # the stride helpers live in the leaf _layout; graph's private modules are its own
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items() if _in(m, "providers")
                 for t in ts if _in(t, "graph") and t != "graph")
    assert not bad, f"providers import graph internals: {bad}"


def test_nothing_below_the_device_layer_imports_it():
    top = ("_device", "_lowering", "_batcher", "_bench", "cli", "__main__", "demo", "ray", "")
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items()
                 if not _in(m, *top[:-1]) and m != "" for t in ts
                 if t == "" or _in(t, *top[:-1]))
    assert not bad, f"lower layers import the device layer or the package: {bad}"


def test_the_check_sees_imports():
    # guard against a parser that finds nothing (the tests above would pass vacuously)
    assert "_layout" in EDGES["graph._tensor"]
    assert "graph" in EDGES["patterns._match"]
    assert "_device" in EDGES["_lowering"]
    assert "_cudnn" in _code_words(_modules()["providers.cudnn._provider"])


VENDOR_WORDS = ("cuda", "cudnn", "cudart", "hip", "miopen", "rocm", "nvidia", "amd")
VENDOR_FREE = ("graph", "patterns", "_layout", "_knobs", "_perfdb", "_lowering", "_device")


def _code_words(path: pathlib.Path) -> set[str]:
    """Lower-cased identifiers and string literals of a module, docstrings and comments
    excluded (those may cite a vendor's documentation)."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id.lower())
        elif isinstance(node, ast.Attribute):
            words.add(node.attr.lower())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            words.update(w.lower() for w in __import__("re").findall(r"[A-Za-z]+", node.value))
    return words


@pytest.mark.parametrize("layer", VENDOR_FREE)
def test_no_vendor_names_above_providers_and_runtime(layer):
    mods = _modules()
    hits = {m: sorted(w for w in _code_words(p) if not w.startswith("hipdnn")   # our name
                      and any(w.startswith(v) for v in VENDOR_WORDS))
            for m, p in mods.items() if _in(m, layer)}
    assert not {m: h for m, h in hits.items() if h}, f"vendor names in {layer}: {hits}"
