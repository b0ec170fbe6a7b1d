"""The package's import graph: layers import downward only, and nothing loops.

Static (every import statement, function-level ones too), so an import that would only
run on a GPU machine is checked here as well. The Cython sources count too: each
``src_pyx/*.pyx`` is the module setup.py's ``EXTENSIONS`` builds from it, a ``.pxd`` belongs
to the module of its stem (or, declarations only, to setup.py's ``_PXD_PACKAGE``), and
their ``import`` and ``cimport`` statements are edges like Python's. Layers (STYLE.md
s.1, issues 9 and 23): leaves (_errors, _types, _layout, _version, _knobs, _perfdb, _log,
_fork)
-> graph -> patterns -> providers -> runtime; queues -> runtime, providers._base; only
_device, _lowering, _batcher, _bench, _bench_overlap, cli, __main__, demo and __init__ see
everything.
Beyond imports, no lower layer is handed a hook at module level: no module assigns a
global of a module in a lower layer, and none calls a lower layer's registration function
(one that rebinds a module global, or a ``set_*`` / ``register*`` one).
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

import hipdnn_async

PKG = pathlib.Path(hipdnn_async.__file__).parent
SRC_PYX = PKG.parent / "src_pyx"
LEAVES = ("_errors", "_types", "_layout", "_version", "_knobs", "_perfdb", "_log", "_fork")
TOP = ("_device", "_lowering", "_batcher", "_bench", "_bench_overlap", "_cli_args", "cli",
       "__main__", "demo", "ray")


def _rel(dotted: str) -> str:
    """'hipdnn_async.runtime._gpu' -> 'runtime._gpu' (names relative to the package)."""
    return dotted[len("hipdnn_async"):].lstrip(".")


def _extensions() -> tuple[dict[str, str], str]:
    """({src_pyx stem: module}, the package of declarations-only .pxd files), read from
    setup.py (its EXTENSIONS list is the one list of compiled modules)."""
    setup = PKG.parent / "setup.py"
    if not setup.is_file():
        return {}, ""
    stems, pxd_pkg = {}, ""
    for node in ast.walk(ast.parse(setup.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Extension":
            name, sources = node.args[0].value, node.args[1].elts
            for src in sources:
                stems[pathlib.Path(src.value).stem] = _rel(name)
        elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_PXD_PACKAGE":
            pxd_pkg = _rel(node.value.value)
    return stems, pxd_pkg


STEMS, PXD_PACKAGE = _extensions()


def _modules() -> dict[str, list[pathlib.Path]]:
    """Module (relative name; '' = the package) -> its source files: the .py, or the .pyx
    and .pxd a compiled module is built from (a declarations-only .pxd is a module too)."""
    mods: dict[str, list[pathlib.Path]] = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = [p]
    if SRC_PYX.is_dir():
        for p in sorted(SRC_PYX.glob("*.p[yx][xd]")):
            name = STEMS.get(p.stem) or (f"{PXD_PACKAGE}.{p.stem}" if p.suffix == ".pxd"
                                         else None)
            if name is not None:
                mods.setdefault(name, []).append(p)
    return mods


MODULES = _modules()


def _compiled(name: str) -> bool:
    path = PKG.joinpath(*name.split("."))
    return path.with_suffix(".pyi").exists() or any(path.parent.glob(path.name + ".*.so"))


_STRINGS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'')
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n]+)", re.M)
_IMPORT = re.compile(r"^[ \t]*c?import[ \t]+([^\n]+)", re.M)


def _cython_imports(path: pathlib.Path) -> list[tuple[int, str | None, list[str]]]:
    """(level, module, names) of every import and cimport of a .pyx/.pxd, as
    ``ast.ImportFrom`` gives them (``import a.b`` is (0, None, ['a.b']))."""
    text = _STRINGS.sub("", path.read_text())          # docstrings, verbatim C code
    text = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    out = []
    for m in _FROM.finditer(text):
        head = m.group(1)
        level = len(head) - len(head.lstrip("."))
        names = [n.split(" as ")[0].strip() for n in m.group(2).strip("()").split(",")]
        out.append((level, head.lstrip(".") or None, [n for n in names if n]))
    for m in _IMPORT.finditer(text):
        out.append((0, None, [n.split(" as ")[0].strip() for n in m.group(1).split(",")]))
    return out


def _python_imports(path: pathlib.Path) -> list[tuple[int, str | None, list[str]]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.append((0, None, [a.name for a in node.names]))
    return out


def _imports_of(path: pathlib.Path):
    return _python_imports(path) if path.suffix == ".py" else _cython_imports(path)


def _targets(name: str, path: pathlib.Path, level: int, module: str | None,
             names: list[str]) -> list[tuple[str, str]]:
    """(module of ours, name imported from it or '') for one import statement of ``name``."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if module is None and not level:                  # import a.b.c
        return [(_rel(n), "") for n in names if n.split(".")[0] == "hipdnn_async"]
    if level:
        base = pkg.split(".") if pkg else []
        base = base[:len(base) - level + 1]
        head = ".".join(base + ([module] if module else []))
    elif module.split(".")[0] == "hipdnn_async":
        head = _rel(module)
    else:
        return []
    out = []
    for a in names:
        full = f"{head}.{a}".lstrip(".")
        if full in MODULES:
            out.append((full, ""))
        elif not (_compiled(full) or _compiled(head)) or head in MODULES:
            out.append((head, a))
    return out


def _edges() -> tuple[dict[str, set[str]], dict[str, set[tuple[str, str]]]]:
    """Module -> modules of ours it imports; module -> (module, name) pairs it imports."""
    edges, names = {}, {}
    for name, paths in MODULES.items():
        out, got = set(), set()
        for path in paths:
            for level, module, imported in _imports_of(path):
                for t, what in _targets(name, path, level, module, imported):
                    while t and t not in MODULES:
                        t = t.rpartition(".")[0]
                    if t in MODULES and t != name:
                        out.add(t)
                        if what:
                            got.add((t, what))
        edges[name], names[name] = out, got
    return edges, names


EDGES, IMPORTED_NAMES = _edges()


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
    ("providers", ("providers", "patterns", "graph", "runtime", *LEAVES)),
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
    bad = sorted(f"{m} -> {t}" for m, ts in EDGES.items()
                 if not _in(m, *TOP) and m != "" for t in ts
                 if t == "" or _in(t, *TOP))
    assert not bad, f"lower layers import the device layer or the package: {bad}"


def _compiled_modules() -> list[str]:
    return sorted(m for m, paths in MODULES.items() if paths[0].suffix in (".pyx", ".pxd"))


def test_cython_modules_share_no_private_python_state():
    # state that Cython modules share is a declared C interface (a .pxd, cimported), not
    # a private Python global read from another module (issue 23: runtime._gpu_device._tls)
    bad = sorted(f"{m} imports {t}.{name}" for m in _compiled_modules()
                 for t, name in IMPORTED_NAMES[m] if name.startswith("_"))
    assert not bad, f"Cython modules import another module's private names: {bad}"


def _layer(mod: str) -> str:
    for layer in ("graph", "patterns", "providers", "runtime", "queues"):
        if _in(mod, layer):
            return layer
    return next((leaf for leaf in LEAVES if _in(mod, leaf)), "top")


_REGISTRATION = re.compile(r"^_?(set|register)(_|$)")


def _stores_an_argument(module: str, fname: str) -> bool:
    """Whether ``module``'s top-level function ``fname`` rebinds a module global to a value
    made from its arguments (what its caller hands it: a registration)."""
    path = MODULES[module][0]
    if path.suffix != ".py":
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fname:
            a = node.args
            params = {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}
            params |= {p.arg for p in (a.vararg, a.kwarg) if p is not None}
            globs = {g for n in ast.walk(node) if isinstance(n, ast.Global) for g in n.names}
            for n in ast.walk(node):
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value:
                    tgts = n.targets if isinstance(n, ast.Assign) else [n.target]
                    names = {t.id for t in tgts if isinstance(t, ast.Name)}
                    used = {u.id for u in ast.walk(n.value) if isinstance(u, ast.Name)}
                    if names & globs and used & params:
                        return True
    return False


def _own_code(arg: ast.expr, defined: set[str]) -> bool:
    """Whether a call argument is the caller's own code: a lambda, a function or class the
    calling module defines, or the module itself (``sys.modules[__name__]``)."""
    if isinstance(arg, ast.Lambda):
        return True
    if isinstance(arg, ast.Name):
        return arg.id in defined
    return isinstance(arg, ast.Subscript) and "__name__" in ast.unparse(arg.slice)


def _hooks(name: str, path: pathlib.Path) -> list[str]:
    """A Python module's module-level hooks set in a module of another layer: a global of
    it assigned (``mod.x = ...``, ``setattr(mod, ...)``), or a registration function of it
    called (one that stores its argument in a global, or a ``set_*`` / ``register*`` one
    handed the caller's own code: a function, a class, a lambda, the module)."""
    tree = ast.parse(path.read_text())
    defined = {n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    modules, functions = {}, {}         # local name -> our module; -> (module, function)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            level, module = getattr(node, "level", 0), getattr(node, "module", None)
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                for t, what in _targets(name, path, level, module, [a.name]):
                    if what:
                        functions[local] = (t, what)
                    elif isinstance(node, ast.ImportFrom) or a.asname:
                        modules[local] = t
                    else:                               # import hipdnn_async.x.y binds 'hipdnn_async'
                        modules[local] = ""

    def module_of(expr):
        """Our module an expression names (``_graph``, ``graph._graph``), or None."""
        if isinstance(expr, ast.Name):
            return modules.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = module_of(expr.value)
            if base is not None:
                full = f"{base}.{expr.attr}".lstrip(".")
                return full if full in MODULES else None
        return None

    def foreign(t):
        return t is not None and t != name and _layer(t) != _layer(name)

    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for tgt in targets:
            if isinstance(tgt, ast.Attribute) and foreign(module_of(tgt.value)):
                out.append(f"{name}:{node.lineno} assigns {module_of(tgt.value)}.{tgt.attr}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "setattr" and node.args \
                and foreign(module_of(node.args[0])):
            out.append(f"{name}:{node.lineno} setattr on {module_of(node.args[0])}")
            continue
        if isinstance(func, ast.Name) and func.id in functions:
            t, fname = functions[func.id]
        elif isinstance(func, ast.Attribute) and module_of(func.value) is not None:
            t, fname = module_of(func.value), func.attr
        else:
            continue
        args = list(node.args) + [k.value for k in node.keywords]
        if foreign(t) and (_stores_an_argument(t, fname) or (
                _REGISTRATION.match(fname) and any(_own_code(a, defined) for a in args))):
            out.append(f"{name}:{node.lineno} calls {t}.{fname} (a registration)")
    return out


def test_no_module_level_hook_is_set_from_above():
    # a lower layer calling back up through a global a higher one filled (issue 23:
    # graph._graph._lowering_impl, filled by _lowering through set_lowering)
    bad = [h for m, paths in sorted(MODULES.items()) if paths[0].suffix == ".py"
           for h in _hooks(m, paths[0])]
    assert not bad, f"module-level hooks set from another layer: {bad}"


def test_the_hook_check_sees_hooks(tmp_path):
    # guard: the check finds each form of hook in a module written for it, and takes the
    # same forms within one layer for what they are (not a hook from above)
    probe = tmp_path / "probe.py"
    probe.write_text("from hipdnn_async.graph import _graph\n"
                     "import hipdnn_async.runtime._gpu_device as gd\n"
                     "def mine(): pass\n"
                     "_graph._lowering_impl = object()\nsetattr(gd, '_tls', None)\n"
                     "_graph.set_lowering(mine)\ngd.register_hook(lambda: 0)\n"
                     "gd.set_device_count(2)\n")
    found = [h.split(" ", 1)[1] for h in _hooks("_probe", probe)]
    assert found == ["assigns graph._graph._lowering_impl", "setattr on runtime._gpu_device",
                     "calls graph._graph.set_lowering (a registration)",
                     "calls runtime._gpu_device.register_hook (a registration)"], found
    found = [h.split(" ", 1)[1] for h in _hooks("graph._probe", probe)]
    assert found == ["setattr on runtime._gpu_device",
                     "calls runtime._gpu_device.register_hook (a registration)"], found


def test_the_check_sees_imports():
    # guard against a parser that finds nothing (the tests above would pass vacuously)
    assert "_layout" in EDGES["graph._tensor"]
    assert "graph" in EDGES["patterns._match"]
    assert "_device" in EDGES["_lowering"]
    assert "_cudnn" in _code_words(MODULES["providers.cudnn._provider"][0])
    if not SRC_PYX.is_dir():
        pytest.skip("not a source tree (no src_pyx)")
    # the Cython sources, named by setup.py's EXTENSIONS: imports and cimports both
    assert {"runtime._loader", "runtime._gpu", "runtime._gpu_api", "_errors"} <= \
        EDGES["runtime._cudnn_backend"], EDGES["runtime._cudnn_backend"]
    assert "_errors" in EDGES["queues._core"] and "runtime" in {
        t.split(".")[0] for t in EDGES["queues._core"]}
    assert ("runtime._stream_resources", "PackSpec") in IMPORTED_NAMES["runtime._cudnn_backend"] \
        or ("runtime._gpu_device", "_tls") in IMPORTED_NAMES["runtime._cudnn_backend"]


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
            words.update(w.lower() for w in re.findall(r"[A-Za-z]+", node.value))
    return words


@pytest.mark.parametrize("layer", VENDOR_FREE)
def test_no_vendor_names_above_providers_and_runtime(layer):
    hits = {m: sorted(w for w in _code_words(ps[0]) if not w.startswith("hipdnn")   # our name
                      and any(w.startswith(v) for v in VENDOR_WORDS))
            for m, ps in MODULES.items() if _in(m, layer) and ps[0].suffix == ".py"}
    assert not {m: h for m, h in hits.items() if h}, f"vendor names in {layer}: {hits}"
