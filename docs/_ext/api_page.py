"""Write the API reference page from ``hipdnn_async.__all__`` before Sphinx reads sources.

Every public name gets an autodoc entry, so a name added to ``__all__`` is documented (and
its docstring checked by ``sphinx -W``) without editing the page by hand.
"""
import inspect
import pathlib

import hipdnn_async

_HEADER = """\
API reference
=============

Every public name of ``hipdnn_async`` (its ``__all__``), with its docstring. Import the
package as ``import hipdnn_async as hd``. The behaviour every provider shares is the
:doc:`contract </contract/index>`; this page is generated from the docstrings at build
time.

.. currentmodule:: hipdnn_async

"""
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
    body = _HEADER + f"``__version__`` is ``{hipdnn_async.__version__!r}``.\n\n"
    for name in hipdnn_async.__all__:
        if name in _SKIP:
            continue
        body += f"{name}\n{'-' * len(name)}\n\n{_entry(name)}\n"
    page = out / "api.rst"
    if not page.exists() or page.read_text() != body:     # unchanged: no rebuild
        page.write_text(body)


def setup(app):
    app.connect("builder-inited", write_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
