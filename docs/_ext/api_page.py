"""Write the API reference entries (``_generated/api_entries.rst``, included by
``reference/api.rst``) from ``hipdnn_async.__all__`` before Sphinx reads sources.

Every public name gets an autodoc entry, so a name added to ``__all__`` is documented (and
its docstring checked by ``sphinx -W``) without editing the page by hand.
"""
import inspect
import pathlib

import hipdnn_async

_SKIP = {"__version__"}


def _entry(name):
    obj = getattr(hipdnn_async, name)
    if inspect.isclass(obj):
        if issubclass(obj, BaseException):
            return f".. autoexception:: {name}\n"
        return f".. autoclass:: {name}\n"
    if callable(obj):
        return f".. autofunction:: {name}\n"
    return f".. autodata:: {name}\n   :annotation:\n"


def write_page(app):
    out = pathlib.Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    body = f"``__version__`` is ``{hipdnn_async.__version__!r}``.\n\n"
    for name in hipdnn_async.__all__:
        if name in _SKIP:
            continue
        body += f"{name}\n{'-' * len(name)}\n\n{_entry(name)}\n"
    page = out / "api_entries.rst"
    if not page.exists() or page.read_text() != body:     # unchanged: no rebuild
        page.write_text(body)


def setup(app):
    app.connect("builder-inited", write_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
