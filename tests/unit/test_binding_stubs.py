"""The .pyi stubs beside the compiled modules match the modules (STYLE.md s.1).

Each stub is parsed with ``ast``; every name it declares must exist on the compiled module
with the same parameter names, and every public name of the module must be declared.
Importing the bindings needs no GPU (the runtime libraries are opened only by ``load``).
"""
import ast
import importlib
import inspect
import pathlib
import types

import pytest

import hipdnn_async

PKG = pathlib.Path(hipdnn_async.__file__).parent
MODULES = ["hipdnn_async.runtime._loader", "hipdnn_async.runtime._launch_state",
           "hipdnn_async.runtime._gpu", "hipdnn_async.runtime._miopen",
           "hipdnn_async.runtime._onednn",
           "hipdnn_async.runtime._cudnn", "hipdnn_async.runtime._cudnn_backend",
           "hipdnn_async.providers.cpu._kernels", "hipdnn_async.queues._core",
           "hipdnn_async.runtime._binding", "hipdnn_async.runtime._host_pool"]


def test_every_compiled_module_is_checked():
    # setup.py's EXTENSIONS is the one list of compiled modules
    import re
    setup_py = PKG.parent / "setup.py"
    if not setup_py.is_file():
        pytest.skip("not a source tree (no setup.py beside the package)")
    names = re.findall(r'Extension\(\s*"([\w.]+)"', setup_py.read_text())
    assert names and sorted(names) == sorted(MODULES)


def _stub(modname):
    path = PKG.joinpath(*modname.split(".")[1:]).with_suffix(".pyi")
    assert path.is_file(), f"missing stub {path}"
    return ast.parse(path.read_text(), filename=str(path))


def _declared(body):
    """name -> ast node for the functions, classes and annotated/assigned names of a body."""
    out = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return out


def _stub_params(fn):
    a = fn.args
    return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]


def _runtime_params(obj):
    return list(inspect.signature(obj).parameters)


def _class_members(cls_node, classes):
    """Members a stub class declares, its stub bases' included."""
    members = {}
    for base in cls_node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            members.update(_class_members(classes[base.id], classes))
    members.update(_declared(cls_node.body))
    return members


@pytest.fixture(params=MODULES)
def pair(request):
    return importlib.import_module(request.param), _stub(request.param)


def test_stub_has_docstrings(pair):
    mod, tree = pair
    assert ast.get_docstring(tree), f"{mod.__name__}.pyi: no module docstring"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            assert ast.get_docstring(node), f"{mod.__name__}.pyi: {node.name} has no docstring"


def test_stub_names_exist_on_module(pair):
    mod, tree = pair
    declared = _declared(tree.body)
    missing = sorted(n for n in declared if not hasattr(mod, n))
    assert not missing, f"{mod.__name__}.pyi declares names the module lacks: {missing}"
    for name, node in declared.items():
        obj = getattr(mod, name)
        if isinstance(node, ast.FunctionDef):
            assert callable(obj) and not isinstance(obj, type), name
            assert _stub_params(node) == _runtime_params(obj), f"{mod.__name__}.{name}"
        elif isinstance(node, ast.ClassDef):
            assert isinstance(obj, type), name
        else:
            assert not callable(obj) or name == "__all__", name


def test_module_public_names_in_stub(pair):
    mod, tree = pair
    declared = _declared(tree.body)
    public = [n for n, v in vars(mod).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)]
    missing = sorted(n for n in public if n not in declared)
    assert not missing, f"{mod.__name__}.pyi lacks public names: {missing}"
    missing_all = sorted(set(getattr(mod, "__all__", ())) - set(declared))
    assert not missing_all, f"{mod.__name__}.pyi lacks names of __all__: {missing_all}"


def _dummy(annotation):
    text = ast.unparse(annotation)
    if text.startswith("tuple["):
        return ()
    if text.startswith("Callable["):
        return lambda: None
    return {"int": 0, "float": 0.0, "bool": False, "str": ""}.get(text, [1, 1, 1, 1])


def _check_init_keywords(cls, node):
    """A cdef class __init__ has no introspectable signature: call it with the stub's
    parameter names as keywords; a name mismatch is a TypeError before any cuDNN call."""
    args = node.args.args[1:] + node.args.kwonlyargs
    kwargs = {a.arg: _dummy(a.annotation) for a in args}
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise AssertionError(f"{cls.__name__}({', '.join(kwargs)}): {exc}") from exc
    except Exception:
        pass   # CudnnError: not loaded here, or rejected dummy values; the names were taken
    else:
        close = getattr(obj, "close", None)
        if close is not None:
            close()


def _all_stub_classes():
    """Class nodes of every stub by name: a stub class may derive from another stub's
    (``_gpu.Runtime`` from ``_loader.LibraryTable``)."""
    return {n.name: n for m in MODULES for n in _stub(m).body if isinstance(n, ast.ClassDef)}


def test_class_members_match(pair):
    mod, tree = pair
    classes = _all_stub_classes()
    own = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for node in own:
        name = node.name
        cls = getattr(mod, name)
        if cls.__module__ != mod.__name__:
            continue   # re-exported (the vendor errors of _errors): checked by identity below
        members = _class_members(node, classes)
        for m, mnode in members.items():
            if not isinstance(mnode, ast.FunctionDef):
                continue
            assert hasattr(cls, m), f"{name}.{m} declared but absent"
            if any(isinstance(d, ast.Name) and d.id == "property" for d in mnode.decorator_list):
                assert isinstance(inspect.getattr_static(cls, m), property) or \
                    type(inspect.getattr_static(cls, m)).__name__ == "getset_descriptor", \
                    f"{name}.{m} is not a property"
                continue
            if m.startswith("__") and m != "__init__":
                continue   # slot wrappers (__reduce__, __getattr__) have no signature
            try:
                params = _runtime_params(getattr(cls, m))
            except ValueError:
                params = None
            if m == "__init__" and (params is None or params[1:] == ["args", "kwargs"]):
                _check_init_keywords(cls, mnode)
            else:
                assert _stub_params(mnode) == params, f"{mod.__name__}.{name}.{m}"
        public = [m for m in dir(cls) if not m.startswith("_") and m not in dir(BaseException)]
        missing = sorted(m for m in public if m not in members)
        assert not missing, f"{mod.__name__}.pyi: {name} lacks {missing}"


@pytest.mark.parametrize("modname, errname", [("hipdnn_async.runtime._gpu", "GpuError"),
                                              ("hipdnn_async.runtime._cudnn", "CudnnError")])
def test_binding_errors_are_the_error_tree_types(modname, errname):
    from hipdnn_async import _errors
    mod = importlib.import_module(modname)
    assert getattr(mod, errname) is getattr(_errors, errname)
    assert any(isinstance(n, ast.ClassDef) and n.name == errname for n in _stub(modname).body)
