# cython: language_level=3
"""C types of the oneDNN v3 C API that ``hipdnn_async.runtime._onednn`` calls, as our own
declarations (no oneDNN header is included at build; the library is dlopen'ed).

Every type below was matched against ``oneapi/dnnl/dnnl.h``, ``dnnl_types.h`` and
``dnnl_common_types.h`` of oneDNN 3.2.0 (PyPI ``onednn-devel-cpu-gomp`` 2023.2.0); the
contract tests (tests/contract/test_onednn_declarations.py) compile each function-pointer
type against those headers and check every struct's field offsets. Handles
(``dnnl_engine_t``, ``dnnl_memory_desc_t``, ``dnnl_primitive_desc_t``, ...) are
``void*``; statuses and enum arguments are ``int`` (C enums, int-sized on x86-64);
``dnnl_dim_t`` is ``int64_t`` and ``dnnl_dims_t`` an array of 12 of them
(``DNNL_MAX_NDIMS``), passed as a pointer.
"""
from libc.stdint cimport int64_t

# ------------------------------------------------------------------ structs (dnnl_types.h / dnnl_common_types.h 3.2.0)
# dnnl_exec_arg_t: 16 bytes on x86-64 (arg@0, memory@8).
ctypedef struct ExecArg:
    int arg
    void* memory

# dnnl_version_t: 32 bytes on x86-64 (major@0, minor@4, patch@8, hash@16, cpu_runtime@24,
# gpu_runtime@28).
ctypedef struct Version:
    int major
    int minor
    int patch
    const char* hash
    unsigned cpu_runtime
    unsigned gpu_runtime

# ------------------------------------------------------------------ function-pointer types
ctypedef const void* (*f_version)() noexcept nogil                                 # dnnl_version (-> const dnnl_version_t*)
ctypedef int (*f_get_isa)() noexcept nogil                                         # dnnl_get_effective_cpu_isa
ctypedef int (*f_set_int)(int) noexcept nogil                                      # dnnl_set_primitive_cache_capacity
ctypedef int (*f_engine_create)(void**, int, size_t) noexcept nogil                # dnnl_engine_create(engine*, kind, index)
ctypedef int (*f_destroy)(void*) noexcept nogil          # dnnl_*_destroy, dnnl_stream_wait, dnnl_primitive_desc_next_impl
ctypedef int (*f_stream_create)(void**, void*, unsigned) noexcept nogil            # dnnl_stream_create(stream*, engine, flags)
ctypedef int (*f_md_strides)(void**, int, const int64_t*, int, const int64_t*) noexcept nogil  # dnnl_memory_desc_create_with_strides
ctypedef int (*f_md_tag)(void**, int, const int64_t*, int, int) noexcept nogil     # dnnl_memory_desc_create_with_tag
ctypedef int (*f_md_clone)(void**, const void*) noexcept nogil                     # dnnl_memory_desc_clone
ctypedef size_t (*f_md_size)(const void*) noexcept nogil                           # dnnl_memory_desc_get_size
ctypedef int (*f_md_equal)(const void*, const void*) noexcept nogil                # dnnl_memory_desc_equal
ctypedef int (*f_memory_create)(void**, const void*, void*, void*) noexcept nogil  # dnnl_memory_create(memory*, md, engine, handle)
ctypedef int (*f_set_handle)(void*, void*) noexcept nogil                          # dnnl_memory_set_data_handle
ctypedef int (*f_create)(void**) noexcept nogil          # dnnl_primitive_attr_create, dnnl_post_ops_create
ctypedef int (*f_attr_set_int)(void*, int) noexcept nogil                          # dnnl_primitive_attr_set_scratchpad_mode
ctypedef int (*f_attr_set_ptr)(void*, const void*) noexcept nogil                  # dnnl_primitive_attr_set_post_ops
ctypedef int (*f_append_eltwise)(void*, int, float, float) noexcept nogil          # dnnl_post_ops_append_eltwise
ctypedef int (*f_pd_query)(const void*, int, int, void*) noexcept nogil            # dnnl_primitive_desc_query
ctypedef const void* (*f_pd_query_md)(const void*, int, int) noexcept nogil        # dnnl_primitive_desc_query_md
ctypedef int (*f_pd_clone)(void**, const void*) noexcept nogil                     # dnnl_primitive_desc_clone
ctypedef int (*f_primitive_create)(void**, const void*) noexcept nogil             # dnnl_primitive_create
ctypedef int (*f_execute)(const void*, void*, int, const ExecArg*) noexcept nogil   # dnnl_primitive_execute
# dnnl_convolution_forward_primitive_desc_create(pd*, engine, prop_kind, alg_kind, src, weights,
# bias, dst, strides, dilates, padding_l, padding_r, attr)
ctypedef int (*f_conv_fwd)(void**, void*, int, int, const void*, const void*, const void*,
                           const void*, const int64_t*, const int64_t*, const int64_t*,
                           const int64_t*, const void*) noexcept nogil
# dnnl_convolution_backward_data_primitive_desc_create(pd*, engine, alg_kind, diff_src, weights,
# diff_dst, strides, dilates, padding_l, padding_r, hint_fwd_pd, attr)
ctypedef int (*f_conv_bwd_data)(void**, void*, int, const void*, const void*, const void*,
                                const int64_t*, const int64_t*, const int64_t*, const int64_t*,
                                const void*, const void*) noexcept nogil
# dnnl_convolution_backward_weights_primitive_desc_create(pd*, engine, alg_kind, src,
# diff_weights, diff_bias, diff_dst, strides, dilates, padding_l, padding_r, hint_fwd_pd, attr)
ctypedef int (*f_conv_bwd_weights)(void**, void*, int, const void*, const void*, const void*,
                                   const void*, const int64_t*, const int64_t*, const int64_t*,
                                   const int64_t*, const void*, const void*) noexcept nogil
# dnnl_batch_normalization_forward_primitive_desc_create(pd*, engine, prop_kind, src, dst,
# epsilon, flags, attr)
ctypedef int (*f_bn_fwd)(void**, void*, int, const void*, const void*, float, unsigned,
                         const void*) noexcept nogil
# dnnl_batch_normalization_backward_primitive_desc_create(pd*, engine, prop_kind, diff_src,
# diff_dst, src, epsilon, flags, hint_fwd_pd, attr)
ctypedef int (*f_bn_bwd)(void**, void*, int, const void*, const void*, const void*, float,
                         unsigned, const void*, const void*) noexcept nogil
# dnnl_reorder_primitive_desc_create(pd*, src_md, src_engine, dst_md, dst_engine, attr)
ctypedef int (*f_reorder)(void**, const void*, void*, const void*, void*, const void*) noexcept nogil
ctypedef int (*f_append_binary)(void*, int, const void*) noexcept nogil           # dnnl_post_ops_append_binary(post_ops, alg, src1_md)
# dnnl_binary_primitive_desc_create(pd*, engine, alg_kind, src0, src1, dst, attr)
ctypedef int (*f_binary)(void**, void*, int, const void*, const void*, const void*, const void*) noexcept nogil

# ------------------------------------------------------------------ the table
# One pointer per C function, in the order of _onednn.NAMES (looked up as "dnnl_" + name).
ctypedef struct OnednnFns:
    f_version version
    f_get_isa get_effective_cpu_isa
    f_set_int set_primitive_cache_capacity
    f_engine_create engine_create
    f_destroy engine_destroy
    f_stream_create stream_create
    f_destroy stream_destroy
    f_destroy stream_wait
    f_md_strides memory_desc_create_with_strides
    f_md_tag memory_desc_create_with_tag
    f_md_clone memory_desc_clone
    f_destroy memory_desc_destroy
    f_md_size memory_desc_get_size
    f_md_equal memory_desc_equal
    f_memory_create memory_create
    f_destroy memory_destroy
    f_set_handle memory_set_data_handle
    f_create primitive_attr_create
    f_destroy primitive_attr_destroy
    f_attr_set_int primitive_attr_set_scratchpad_mode
    f_attr_set_ptr primitive_attr_set_post_ops
    f_create post_ops_create
    f_destroy post_ops_destroy
    f_append_eltwise post_ops_append_eltwise
    f_destroy primitive_desc_next_impl
    f_pd_query primitive_desc_query
    f_pd_query_md primitive_desc_query_md
    f_pd_clone primitive_desc_clone
    f_destroy primitive_desc_destroy
    f_primitive_create primitive_create
    f_destroy primitive_destroy
    f_execute primitive_execute
    f_conv_fwd convolution_forward_primitive_desc_create
    f_conv_bwd_data convolution_backward_data_primitive_desc_create
    f_conv_bwd_weights convolution_backward_weights_primitive_desc_create
    f_bn_fwd batch_normalization_forward_primitive_desc_create
    f_bn_bwd batch_normalization_backward_primitive_desc_create
    f_reorder reorder_primitive_desc_create
    f_append_binary post_ops_append_binary
    f_binary binary_primitive_desc_create
