"""The hip-on-CUDA shim: HIP runtime calls on libcudart, so that the HIP runtime binding and
the GPU stream backend run on a CUDA GPU's real streams and events (a test tool, never
shipped; see ``hip_on_cuda.c``)."""
