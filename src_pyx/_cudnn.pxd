# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._cudnn`` (cuDNN 9's legacy API), for other
Cython modules to cimport: the function-pointer types, the named table ``CudnnFns``, the
table object (``table()``) and the ``nogil`` status check.

Signatures follow ``cudnn_graph.h``, ``cudnn_ops.h`` and ``cudnn_cnn.h`` of cuDNN 9.19.1
(the ``nvidia-cudnn-cu13`` 9.19.1.2 wheel; docs/design/vendor-notes.md), against
which tests/contract compiles every type below; handles and descriptors are ``void*``,
enums ``int``, ``cudnnStatus_t`` an ``int``.
"""
from ._loader cimport Library, LibraryTable

# cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: 48 bytes on x86-64 (cudnn_cnn.h, cuDNN 9.19.1)
ctypedef struct AlgoPerf:
    int algo
    int status
    float time
    size_t memory
    int determinism
    int mathType
    int reserved[3]

ctypedef int (*f_create)(void**) noexcept nogil
ctypedef int (*f_destroy)(void*) noexcept nogil
ctypedef int (*f_set_stream)(void*, void*) noexcept nogil
ctypedef size_t (*f_version)() noexcept nogil
ctypedef const char* (*f_errstr)(int) noexcept nogil
ctypedef void (*f_last_err)(char*, size_t) noexcept nogil
ctypedef int (*f_set_tensor)(void*, int, int, const int*, const int*) noexcept nogil
ctypedef int (*f_set_filter)(void*, int, int, int, const int*) noexcept nogil
ctypedef int (*f_set_conv)(void*, int, const int*, const int*, const int*, int, int) noexcept nogil
ctypedef int (*f_set_int)(void*, int) noexcept nogil
ctypedef int (*f_set_act)(void*, int, int, double) noexcept nogil
ctypedef int (*f_set_op)(void*, int, int, int) noexcept nogil
ctypedef int (*f_max_count)(void*, int*) noexcept nogil
ctypedef int (*f_get_v7)(void*, void*, void*, void*, void*, int, int*, AlgoPerf*) noexcept nogil
ctypedef int (*f_find_ex)(void*, void*, const void*, void*, const void*, void*, void*,
                          void*, int, int*, AlgoPerf*, void*, size_t) noexcept nogil
ctypedef int (*f_ws_size)(void*, void*, void*, void*, void*, int, size_t*) noexcept nogil
ctypedef int (*f_conv)(void*, const void*, void*, const void*, void*, const void*, void*,
                       int, void*, size_t, const void*, void*, void*) noexcept nogil
ctypedef int (*f_cba)(void*, const void*, void*, const void*, void*, const void*, void*,
                      int, void*, size_t, const void*, void*, const void*, void*,
                      const void*, void*, void*, void*) noexcept nogil
ctypedef int (*f_bn_inf)(void*, int, const void*, const void*, void*, const void*, void*,
                         void*, void*, const void*, const void*, const void*, const void*,
                         double) noexcept nogil
ctypedef int (*f_bn_train)(void*, int, const void*, const void*, void*, const void*, void*,
                           void*, void*, const void*, const void*, double, void*, void*,
                           double, void*, void*) noexcept nogil
ctypedef int (*f_bn_bwd)(void*, int, const void*, const void*, const void*, const void*,
                         void*, const void*, void*, const void*, void*, void*, void*,
                         const void*, void*, void*, double, const void*, const void*) noexcept nogil
ctypedef int (*f_bn_ex_ws)(void*, int, int, void*, void*, void*, void*, void*,
                           size_t*) noexcept nogil
ctypedef int (*f_bn_ex_reserve)(void*, int, int, void*, void*, size_t*) noexcept nogil
ctypedef int (*f_bn_train_ex)(void*, int, int, const void*, const void*, void*, const void*,
                              void*, const void*, void*, void*, void*, const void*,
                              const void*, double, void*, void*, double, void*, void*,
                              void*, void*, size_t, void*, size_t) noexcept nogil
ctypedef int (*f_bn_bwd_ex_ws)(void*, int, int, void*, void*, void*, void*, void*, void*,
                               void*, size_t*) noexcept nogil
ctypedef int (*f_bn_bwd_ex)(void*, int, int, const void*, const void*, const void*,
                            const void*, void*, const void*, void*, const void*, void*,
                            const void*, void*, void*, void*, void*, void*, const void*,
                            const void*, void*, void*, double, const void*, const void*,
                            void*, void*, size_t, void*, size_t) noexcept nogil
ctypedef int (*f_act_fwd)(void*, void*, const void*, void*, const void*, const void*,
                          void*, void*) noexcept nogil
ctypedef int (*f_act_bwd)(void*, void*, const void*, void*, const void*, void*, const void*,
                          void*, const void*, const void*, void*, void*) noexcept nogil
ctypedef int (*f_op_tensor)(void*, void*, const void*, void*, const void*, const void*,
                            void*, const void*, const void*, void*, void*) noexcept nogil

# One named pointer per function; the field is the symbol without its ``cudnn`` prefix.
ctypedef struct CudnnFns:
    f_version GetVersion
    f_errstr GetErrorString
    f_last_err GetLastErrorString
    f_create Create
    f_destroy Destroy
    f_set_stream SetStream
    f_create CreateTensorDescriptor
    f_set_tensor SetTensorNdDescriptor
    f_destroy DestroyTensorDescriptor
    f_create CreateFilterDescriptor
    f_set_filter SetFilterNdDescriptor
    f_destroy DestroyFilterDescriptor
    f_create CreateConvolutionDescriptor
    f_set_conv SetConvolutionNdDescriptor
    f_set_int SetConvolutionGroupCount
    f_set_int SetConvolutionMathType
    f_destroy DestroyConvolutionDescriptor
    f_create CreateActivationDescriptor
    f_set_act SetActivationDescriptor
    f_destroy DestroyActivationDescriptor
    f_create CreateOpTensorDescriptor
    f_set_op SetOpTensorDescriptor
    f_destroy DestroyOpTensorDescriptor
    f_max_count GetConvolutionForwardAlgorithmMaxCount
    f_max_count GetConvolutionBackwardDataAlgorithmMaxCount
    f_max_count GetConvolutionBackwardFilterAlgorithmMaxCount
    f_get_v7 GetConvolutionForwardAlgorithm_v7
    f_get_v7 GetConvolutionBackwardDataAlgorithm_v7
    f_get_v7 GetConvolutionBackwardFilterAlgorithm_v7
    f_find_ex FindConvolutionForwardAlgorithmEx
    f_find_ex FindConvolutionBackwardDataAlgorithmEx
    f_find_ex FindConvolutionBackwardFilterAlgorithmEx
    f_ws_size GetConvolutionForwardWorkspaceSize
    f_ws_size GetConvolutionBackwardDataWorkspaceSize
    f_ws_size GetConvolutionBackwardFilterWorkspaceSize
    f_conv ConvolutionForward
    f_conv ConvolutionBackwardData
    f_conv ConvolutionBackwardFilter
    f_cba ConvolutionBiasActivationForward
    f_bn_inf BatchNormalizationForwardInference
    f_bn_train BatchNormalizationForwardTraining
    f_bn_bwd BatchNormalizationBackward
    f_act_fwd ActivationForward
    f_act_bwd ActivationBackward
    f_op_tensor OpTensor
    f_bn_ex_ws GetBatchNormalizationForwardTrainingExWorkspaceSize
    f_bn_ex_reserve GetBatchNormalizationTrainingExReserveSpaceSize
    f_bn_train_ex BatchNormalizationForwardTrainingEx
    f_bn_bwd_ex_ws GetBatchNormalizationBackwardExWorkspaceSize
    f_bn_bwd_ex BatchNormalizationBackwardEx


cdef class CudnnTable(LibraryTable):
    cdef CudnnFns f
    cdef int _version_number
    cdef object _error(self, int status, str call)
    cdef int c_check(self, int status, const char* call) except -1 nogil


cdef CudnnTable table()

# What every table of libcudnn.so.9 reads the same way (this binding's and the backend
# binding's, ``_cudnn_backend``, which cimports them): its version and its status texts,
# each from the table's own pointer (NULL: the library lacks the call).
cdef int version_of(f_version get_version) noexcept nogil          # 0 where NULL
cdef str status_name_of(f_errstr get_error_string, int status)     # None where unknown
cdef str last_error_of(f_last_err get_last_error_string)           # "" where NULL
