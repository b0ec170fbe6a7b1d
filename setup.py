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
    # GPU bindings: dlopen at run time, so they build without CUDA installed.
    Extension("hipdnn_async.runtime._gpu", ["src_pyx/_gpu.pyx"], libraries=["dl"]),
    Extension("hipdnn_async.runtime._cudnn", ["src_pyx/_cudnn.pyx"], libraries=["dl"]),
]

setup(
    ext_modules=cythonize(
        EXTENSIONS,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
)
