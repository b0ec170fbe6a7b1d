"""Build the Cython extensions. Every compiled module is named once, in EXTENSIONS.

The sources live in ``src_pyx/``; a module ``cimport``s another by its package name
(``from ._loader cimport LibraryTable`` in ``hipdnn_async.runtime._gpu``), so each
``src_pyx/*.pxd`` is also linked into ``build/cython_include/<package path>/`` and that
directory is on Cython's include path.
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

_NUMPY = dict(
    include_dirs=[numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-O3"],
)
# GPU bindings: every vendor library is dlopen'ed at run time, so they build without any
# SDK installed.
_DLOPEN = dict(libraries=["dl"])

EXTENSIONS = [
    Extension("hipdnn_async.providers.cpu._kernels", ["src_pyx/_cpu_kernels.pyx"],
              depends=["src_pyx/_relu_rows.h", "src_pyx/_bn_rows.h", "src_pyx/_bn_last.h"], **_NUMPY),
    Extension("hipdnn_async.runtime._loader", ["src_pyx/_loader.pyx"], **_DLOPEN),
    Extension("hipdnn_async.runtime._launch_state", ["src_pyx/_launch_state.pyx"]),
    Extension("hipdnn_async.runtime._gpu", ["src_pyx/_gpu.pyx"], **_DLOPEN),
    Extension("hipdnn_async.runtime._cudnn", ["src_pyx/_cudnn.pyx"], **_DLOPEN),
    Extension("hipdnn_async.runtime._cudnn_backend", ["src_pyx/_cudnn_backend.pyx"]),
    Extension("hipdnn_async.runtime._miopen", ["src_pyx/_miopen.pyx"], **_DLOPEN),
    Extension("hipdnn_async.runtime._onednn", ["src_pyx/_onednn.pyx"], **_DLOPEN, **_NUMPY),
    Extension("hipdnn_async.queues._core", ["src_pyx/_queue_core.pyx"]),
    Extension("hipdnn_async.runtime._binding", ["src_pyx/_binding.pyx"], **_NUMPY),
    Extension("hipdnn_async.runtime._host_pool", ["src_pyx/_host_pool.pyx"], **_NUMPY),
]

# .pxd files without a module of their own (declarations only) belong to this package.
_PXD_PACKAGE = "hipdnn_async.runtime"
_INCLUDE = os.path.join("build", "cython_include")


def _link_pxd_files() -> None:
    """Link src_pyx/STEM.pxd to build/cython_include/<module path>.pxd: the module built
    from src_pyx/STEM.pyx, or _PXD_PACKAGE.STEM for a declarations-only file."""
    here = os.path.dirname(os.path.abspath(__file__))
    module = {os.path.splitext(os.path.basename(src))[0]: ext.name
              for ext in EXTENSIONS for src in ext.sources}
    for fname in sorted(os.listdir(os.path.join(here, "src_pyx"))):
        stem, ext = os.path.splitext(fname)
        if ext != ".pxd":
            continue
        parts = module.get(stem, f"{_PXD_PACKAGE}.{stem}").split(".")
        pkg_dir = os.path.join(here, _INCLUDE, *parts[:-1])
        os.makedirs(pkg_dir, exist_ok=True)
        link = os.path.join(pkg_dir, parts[-1] + ".pxd")
        target = os.path.join(here, "src_pyx", fname)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(target, link)


_link_pxd_files()

setup(
    ext_modules=cythonize(
        EXTENSIONS,
        language_level=3,
        include_path=[_INCLUDE],
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
)
