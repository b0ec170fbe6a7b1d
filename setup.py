"""Build the Cython extensions. Every compiled module is named once, in EXTENSIONS."""
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

_NUMPY = dict(
    include_dirs=[numpy.get_include()],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-O3"],
)

EXTENSIONS = [
    Extension("hipdnn_async.providers.cpu._kernels", ["src_pyx/_cpu_kernels.pyx"], **_NUMPY),
]

setup(
    ext_modules=cythonize(
        EXTENSIONS,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
)
