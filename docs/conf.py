"""Sphinx configuration of the hipdnn_async documentation.

Build (warnings are errors, as CI builds it):

    python -m sphinx -W -b html docs docs/_build/html

Markdown pages go through MyST, docstrings (NumPy style) through napoleon. The API
reference lists ``hipdnn_async.__all__`` (and ``hipdnn_async.profiler.__all__``), written at
build time by ``_ext/api_page.py``;
the performance plots are drawn at build time from ``bench/results/*.json`` by
``_ext/perf_plots.py`` (matplotlib, Agg backend: no display needed).
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "_ext"))

import hipdnn_async  # noqa: E402  (the package documented; its compiled parts must be built)

project = "hipdnn_async"
author = "hipdnn_async contributors"
copyright = "2026, hipdnn_async contributors"
release = hipdnn_async.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
    "api_page",
    "perf_plots",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

# MyST: heading anchors for in-page links ("page.md#section"), as GitHub makes them.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

# Docstrings: NumPy style only.
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True           # class "Attributes" as fields: no duplicate entries
napoleon_custom_sections = [("Raises (when called)", "params_style")]
autodoc_member_order = "bysource"
autodoc_typehints = "none"          # signatures and the Parameters sections say it all
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False                    # type names in docstrings are prose, not targets

html_theme = "alabaster"
html_static_path = []
html_theme_options = {"description": "deep-learning primitive graphs, awaited from asyncio or trio",
                      "fixed_sidebar": True}
