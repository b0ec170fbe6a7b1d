"""Write the API reference entries (``_generated/api_entries.rst``, included by
``reference/api.rst``) from ``hipdnn_async.__all__`` and ``hipdnn_async.profiler.__all__``
before Sphinx reads sources.

Every public name gets an autodoc entry, so a name added to ``__all__`` is documented (and
its docstring checked by ``sphinx -W``) without editing the page by hand. A class built on
a private base (``hd.Graph`` on ``hipdnn_async.graph._graph.Graph``) lists the members it
inherits and no "Bases:" line (the base is not documented anywhere); a class that defines
``__call__`` (``await batcher(x)``) lists it.
"""
import inspect
import pathlib

import hipdnn_async
import hipdnn_async.profiler

_SKIP = {"__version__"}


def _private_base(cls) -> bool:
    """Whether a base of ``cls`` is one of ours that no public module exports."""
    public = {id(getattr(hipdnn_async, n)) for n in hipdnn_async.__all__ if n not in _SKIP}
    return any(b.__module__.split(".")[0] == "hipdnn_async" and id(b) not in public
               for b in cls.__bases__)


def _entry(module, name):
    obj = getattr(module, name)
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return f".. autoexception:: {name}\n"
        options = ""
        if _private_base(obj):
            options += "   :inherited-members:\n   :no-show-inheritance:\n"
        if "__call__" in vars(obj) and obj.__call__.__doc__:
            options += "   :special-members: __call__\n"
        return f".. autoclass:: {name}\n{options}"
    if callable(obj):
        return f".. autofunction:: {name}\n"
    return f".. autodata:: {name}\n   :annotation:\n"


def _section(title, char):
    return f"{title}\n{char * len(title)}\n\n"


def page_text() -> str:
    """The generated reference entries (reStructuredText)."""
    body = f"``__version__`` is ``{hipdnn_async.__version__!r}``.\n\n"
    for name in hipdnn_async.__all__:
        if name not in _SKIP:
            body += _section(name, "-") + _entry(hipdnn_async, name) + "\n"
    # the profiler's names that the package does not re-export (draw_timeline, ...)
    exported = {id(getattr(hipdnn_async, n)) for n in hipdnn_async.__all__}
    extra = [n for n in hipdnn_async.profiler.__all__
             if id(getattr(hipdnn_async.profiler, n)) not in exported]
    if extra:
        above = ", ".join(f"``{n}``" for n in hipdnn_async.profiler.__all__ if n not in extra)
        body += (_section("hipdnn_async.profiler", "-")
                 + f"{above} are above; the module also has:\n\n"
                 + ".. currentmodule:: hipdnn_async.profiler\n\n")
        for name in extra:
            body += f"{_section(name, '~')}{_entry(hipdnn_async.profiler, name)}\n"
        body += ".. currentmodule:: hipdnn_async\n"
    return body


def write_page(app):
    out = pathlib.Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    body = page_text()
    page = out / "api_entries.rst"
    if not page.exists() or page.read_text() != body:     # unchanged: no rebuild
        page.write_text(body)


def setup(app):
    app.connect("builder-inited", write_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
