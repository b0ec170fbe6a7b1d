# cython: language_level=3
"""C-level surface of ``hipdnn_async.runtime._miopen``: the MIOpen calls we make, as our own
C types (no SDK header is included), and the table that holds them.

Every signature was matched against ``miopen/miopen.h`` of MIOpen 3.4.0 (ROCm 6.4.3,
Debian ``libmiopen-dev 6.4.3+dfsg-1+b1``) and MIOpen 3.5.1 (ROCm 7.2.4, ``7.2.4+dfsg-1``);
the contract tests (tests/contract/hip) compile each type below against both headers and
fail on any difference in arity, width or pointer-ness. Handles and descriptors
(``miopenHandle_t``, ``miopenTensorDescriptor_t``, ...) are ``void*``; statuses and enum
arguments are ``int`` (C enums, int-sized on every ABI we build for); ``bool`` is not used.
Entry points marked "3.5.1 only" are absent from 3.4.0's header and library and are looked
up by name: NULL there.
"""
from libc.stdint cimport uint64_t

from ._loader cimport Library, LibraryTable

# ------------------------------------------------------------------ structs (miopen.h 3.4.0 / 3.5.1)
# miopenConvSolution_t: 32 bytes on x86-64 (time@0, workspace_size@8, solution_id@16,
# algorithm@24 as miopenConvAlgorithm_t).
ctypedef struct ConvSolution:
    float time
    size_t workspace_size
    uint64_t solution_id
    int algorithm

# ------------------------------------------------------------------ function-pointer types
ctypedef int (*f_version)(size_t*, size_t*, size_t*) noexcept nogil               # GetVersion
ctypedef const char* (*f_error_string)(int) noexcept nogil                        # GetErrorString
ctypedef int (*f_create)(void**) noexcept nogil            # Create, Create*Descriptor, CreateOperatorArgs, CreateFindOptions
ctypedef int (*f_create_with_stream)(void**, void*) noexcept nogil                # CreateWithStream(handle*, hipStream_t)
ctypedef int (*f_destroy)(void*) noexcept nogil            # Destroy, Destroy*Descriptor, DestroyFusionPlan, ...
ctypedef int (*f_set_stream)(void*, void*) noexcept nogil                         # SetStream(handle, hipStream_t)
ctypedef int (*f_get_stream)(void*, void**) noexcept nogil                        # GetStream
ctypedef int (*f_set_handle_int)(void*, int) noexcept nogil                       # SetTuningPolicy (3.5.1 only)
ctypedef int (*f_get_handle_int)(void*, int*) noexcept nogil                      # GetTuningPolicy (3.5.1 only)
ctypedef int (*f_set_tensor)(void*, int, int, const int*, const int*) noexcept nogil   # SetTensorDescriptor(desc, dtype, n, dims, strides)
ctypedef int (*f_init_conv_nd)(void*, int, const int*, const int*, const int*, int) noexcept nogil  # InitConvolutionNdDescriptor
ctypedef int (*f_set_desc_int)(void*, int) noexcept nogil                         # SetConvolutionGroupCount, SetFindOptionTuning, SetFindOptionResultsOrder
ctypedef int (*f_set_conv_attr)(void*, int, int) noexcept nogil                   # SetConvolutionAttribute
# immediate mode, in each direction's argument order: fwd (w, x, conv, y), bwd data
# (dy, w, conv, dx), bwd weights (dy, x, conv, dw)
ctypedef int (*f_solution_count)(void*, void*, void*, void*, void*, size_t*) noexcept nogil
ctypedef int (*f_get_solution)(void*, void*, void*, void*, void*, size_t, size_t*, ConvSolution*) noexcept nogil
ctypedef int (*f_solution_workspace)(void*, void*, void*, void*, void*, uint64_t, size_t*) noexcept nogil
ctypedef int (*f_compile_solution)(void*, void*, void*, void*, void*, uint64_t) noexcept nogil
ctypedef int (*f_immediate)(void*, void*, const void*, void*, const void*, void*, void*, void*,
                            void*, size_t, uint64_t) noexcept nogil
# Find 2.0
ctypedef int (*f_create_conv_problem)(void**, void*, int) noexcept nogil          # CreateConvProblem(problem*, conv, direction)
ctypedef int (*f_problem_tensor)(void*, int, void*) noexcept nogil                # SetProblemTensorDescriptor(problem, id, desc)
ctypedef int (*f_set_desc_size)(void*, size_t) noexcept nogil                     # SetFindOptionWorkspaceLimit
ctypedef int (*f_set_find_buffer)(void*, void*, size_t) noexcept nogil            # SetFindOptionPreallocatedWorkspace
ctypedef int (*f_set_find_tensor)(void*, int, void*) noexcept nogil               # SetFindOptionPreallocatedTensor
ctypedef int (*f_find_solutions)(void*, void*, void*, void**, size_t*, size_t) noexcept nogil
ctypedef int (*f_solution_size)(void*, size_t*) noexcept nogil                    # GetSolutionWorkspaceSize
ctypedef int (*f_solution_time)(void*, float*) noexcept nogil                     # GetSolutionTime
ctypedef int (*f_solution_solver)(void*, uint64_t*) noexcept nogil                # GetSolutionSolverId
ctypedef int (*f_solver_algorithm)(uint64_t, int*) noexcept nogil                 # GetSolverIdConvAlgorithm
# activation, bias, element-wise
ctypedef int (*f_set_activation)(void*, int, double, double, double) noexcept nogil
ctypedef int (*f_activation_forward)(void*, void*, const void*, void*, const void*, const void*,
                                     void*, void*) noexcept nogil
ctypedef int (*f_activation_backward)(void*, void*, const void*, void*, const void*, void*,
                                      const void*, void*, const void*, const void*, void*,
                                      void*) noexcept nogil
ctypedef int (*f_forward_bias)(void*, const void*, void*, const void*, const void*, void*,
                               void*) noexcept nogil                              # ConvolutionForwardBias
ctypedef int (*f_op_tensor)(void*, int, const void*, void*, const void*, const void*, void*,
                            const void*, const void*, void*, void*) noexcept nogil
# fusion plans
ctypedef int (*f_create_fusion_plan)(void**, int, void*) noexcept nogil           # CreateFusionPlan(plan*, direction, inputDesc)
ctypedef int (*f_compile_fusion_plan)(void*, void*) noexcept nogil                # CompileFusionPlan(handle, plan)
ctypedef int (*f_create_op_conv)(void*, void**, void*, void*) noexcept nogil      # CreateOpConvForward(plan, op*, conv, wDesc)
ctypedef int (*f_create_op_bias)(void*, void**, void*) noexcept nogil             # CreateOpBiasForward(plan, op*, bDesc)
ctypedef int (*f_create_op_activation)(void*, void**, int) noexcept nogil         # CreateOpActivationForward(plan, op*, mode)
ctypedef int (*f_fusion_workspace)(void*, void*, size_t*, int) noexcept nogil     # FusionPlanGetWorkSpaceSize(handle, plan, size*, algo)
ctypedef int (*f_fusion_get_algo)(void*, int, int*, int*) noexcept nogil          # FusionPlanConvolutionGetAlgo
ctypedef int (*f_op_args_pointer)(void*, void*, const void*, const void*, const void*) noexcept nogil  # SetOpArgs{Conv,Bias}Forward
ctypedef int (*f_op_args_activation)(void*, void*, const void*, const void*, double, double,
                                     double) noexcept nogil                       # SetOpArgsActivForward
ctypedef int (*f_execute_fusion)(void*, void*, void*, const void*, void*, void*, void*) noexcept nogil
ctypedef int (*f_execute_fusion_v2)(void*, void*, void*, const void*, void*, void*, void*, void*,
                                    size_t) noexcept nogil                        # ExecuteFusionPlan_v2 (3.5.1 only)
# batchnorm (the _V2 calls: separate scale / bias / mean / variance descriptors)
ctypedef int (*f_bn_inference)(void*, int, void*, void*, void*, const void*, void*, void*, void*,
                               void*, void*, void*, void*, void*, void*, void*, double) noexcept nogil
ctypedef int (*f_bn_inference_activation)(void*, int, void*, void*, void*, const void*, void*,
                                          void*, void*, void*, void*, void*, void*, void*, void*,
                                          void*, double, void*) noexcept nogil    # 3.5.1 only
ctypedef int (*f_bn_training)(void*, int, void*, void*, void*, const void*, void*, void*, void*,
                              void*, void*, void*, void*, void*, double, void*, void*, double,
                              void*, void*) noexcept nogil
ctypedef int (*f_bn_training_activation)(void*, int, void*, void*, void*, const void*, void*,
                                         void*, void*, void*, void*, void*, void*, void*, double,
                                         void*, void*, double, void*, void*,
                                         void*) noexcept nogil                    # 3.5.1 only
ctypedef int (*f_bn_backward)(void*, int, const void*, const void*, const void*, const void*,
                              void*, const void*, void*, const void*, void*, void*, void*, void*,
                              void*, void*, const void*, void*, void*, double, const void*,
                              const void*) noexcept nogil
ctypedef int (*f_bn_backward_activation)(void*, int, const void*, const void*, const void*,
                                         const void*, void*, const void*, void*, const void*,
                                         void*, void*, void*, void*, void*, void*, const void*,
                                         const void*, void*, void*, double, const void*,
                                         const void*, void*) noexcept nogil       # 3.5.1 only


# ------------------------------------------------------------------ the table (field = symbol minus "miopen")
# Field order is the lookup order of NAMES in _miopen.pyx (a test checks they agree).
ctypedef struct MiopenFns:
    f_version GetVersion
    f_error_string GetErrorString
    f_create Create
    f_create_with_stream CreateWithStream
    f_destroy Destroy
    f_set_stream SetStream
    f_get_stream GetStream
    f_set_handle_int SetTuningPolicy
    f_get_handle_int GetTuningPolicy
    f_create CreateTensorDescriptor
    f_set_tensor SetTensorDescriptor
    f_destroy DestroyTensorDescriptor
    f_create CreateConvolutionDescriptor
    f_init_conv_nd InitConvolutionNdDescriptor
    f_set_desc_int SetConvolutionGroupCount
    f_set_conv_attr SetConvolutionAttribute
    f_destroy DestroyConvolutionDescriptor
    f_solution_count ConvolutionForwardGetSolutionCount
    f_get_solution ConvolutionForwardGetSolution
    f_solution_workspace ConvolutionForwardGetSolutionWorkspaceSize
    f_compile_solution ConvolutionForwardCompileSolution
    f_immediate ConvolutionForwardImmediate
    f_solution_count ConvolutionBackwardDataGetSolutionCount
    f_get_solution ConvolutionBackwardDataGetSolution
    f_solution_workspace ConvolutionBackwardDataGetSolutionWorkspaceSize
    f_compile_solution ConvolutionBackwardDataCompileSolution
    f_immediate ConvolutionBackwardDataImmediate
    f_solution_count ConvolutionBackwardWeightsGetSolutionCount
    f_get_solution ConvolutionBackwardWeightsGetSolution
    f_solution_workspace ConvolutionBackwardWeightsGetSolutionWorkspaceSize
    f_compile_solution ConvolutionBackwardWeightsCompileSolution
    f_immediate ConvolutionBackwardWeightsImmediate
    f_create_conv_problem CreateConvProblem
    f_problem_tensor SetProblemTensorDescriptor
    f_destroy DestroyProblem
    f_create CreateFindOptions
    f_destroy DestroyFindOptions
    f_set_desc_int SetFindOptionTuning
    f_set_desc_size SetFindOptionWorkspaceLimit
    f_set_desc_int SetFindOptionResultsOrder
    f_set_find_buffer SetFindOptionPreallocatedWorkspace
    f_set_find_tensor SetFindOptionPreallocatedTensor
    f_find_solutions FindSolutions
    f_solution_size GetSolutionWorkspaceSize
    f_solution_time GetSolutionTime
    f_solution_solver GetSolutionSolverId
    f_solver_algorithm GetSolverIdConvAlgorithm
    f_destroy DestroySolution
    f_create CreateActivationDescriptor
    f_set_activation SetActivationDescriptor
    f_destroy DestroyActivationDescriptor
    f_activation_forward ActivationForward
    f_activation_backward ActivationBackward
    f_forward_bias ConvolutionForwardBias
    f_op_tensor OpTensor
    f_create_fusion_plan CreateFusionPlan
    f_destroy DestroyFusionPlan
    f_create_op_conv CreateOpConvForward
    f_create_op_bias CreateOpBiasForward
    f_create_op_activation CreateOpActivationForward
    f_compile_fusion_plan CompileFusionPlan
    f_fusion_workspace FusionPlanGetWorkSpaceSize
    f_fusion_get_algo FusionPlanConvolutionGetAlgo
    f_create CreateOperatorArgs
    f_destroy DestroyOperatorArgs
    f_op_args_pointer SetOpArgsConvForward
    f_op_args_pointer SetOpArgsBiasForward
    f_op_args_activation SetOpArgsActivForward
    f_execute_fusion ExecuteFusionPlan
    f_execute_fusion_v2 ExecuteFusionPlan_v2
    f_bn_inference BatchNormalizationForwardInference_V2
    f_bn_training BatchNormalizationForwardTraining_V2
    f_bn_backward BatchNormalizationBackward_V2
    f_bn_inference_activation BatchNormForwardInferenceActivation
    f_bn_training_activation BatchNormForwardTrainingActivation
    f_bn_backward_activation BatchNormBackwardActivation


cdef class Miopen(LibraryTable):
    cdef MiopenFns f
    cdef int _check(self, int status, const char* call) except -1 nogil
