/* Internals shared by the files of libfakecudnn.so (not a vendor header).
 *
 * The fake implements cuDNN 9's legacy API on the host, compiled against the real
 * cudnn*.h of the nvidia-cudnn-cu13 wheel. Descriptors keep every field they were set
 * with; execution calls validate like cuDNN (documented rules, named at each check),
 * log their arguments with the descriptors resolved, and enqueue a CPU reference kernel
 * (fakes/common/ref_kernels.h) on the handle's stream of the fake CUDA runtime.
 *
 * Adding a function (the backend API, say): write it in a new fake_cudnn_*.c with the
 * header's exact prototype; use BEGIN / INJECT / done as below. A function left out is a
 * missing symbol, which the bindings report at call time.
 */
#ifndef HIPDNN_ASYNC_FAKE_CUDNN_H
#define HIPDNN_ASYNC_FAKE_CUDNN_H

#include <cudnn.h>
#include <cuda_runtime_api.h>

#include "fake_core.h"
#include "ref_kernels.h"

#define FAKE_CUDNN_MAX_DIMS 8

/* device: current at cudnnCreate; the handle's kernels must run with it current */
struct cudnnContext { int id; cudaStream_t stream; int device; };
struct cudnnTensorStruct {
    int id, set;
    cudnnDataType_t dt;
    int nd, dims[FAKE_CUDNN_MAX_DIMS], strides[FAKE_CUDNN_MAX_DIMS];
};
struct cudnnFilterStruct {
    int id, set;
    cudnnDataType_t dt;
    cudnnTensorFormat_t format;
    int nd, dims[FAKE_CUDNN_MAX_DIMS];
};
struct cudnnConvolutionStruct {
    int id, set;
    int n, pad[FAKE_CUDNN_MAX_DIMS], stride[FAKE_CUDNN_MAX_DIMS], dilation[FAKE_CUDNN_MAX_DIMS];
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    int groups;
    cudnnMathType_t math;
};
struct cudnnActivationStruct {
    int id, set;
    cudnnActivationMode_t mode;
    cudnnNanPropagation_t nan;
    double coef;
};
struct cudnnOpTensorStruct {
    int id, set;
    cudnnOpTensorOp_t op;
    cudnnDataType_t compute;
    cudnnNanPropagation_t nan;
};

/* descriptor kinds in the handle registry: FAKE_KIND_DESCRIPTOR + a sub-kind tag kept
 * in a side table of fake_cudnn.c */
enum { DESC_TENSOR = 1, DESC_FILTER, DESC_CONV, DESC_ACT, DESC_OP };
int fcd_desc_kind(const void *d);
void fcd_desc_register(void *d, int subkind, int *id);
void fcd_desc_unregister(void *d);

/* sets the message cudnnGetLastErrorString returns; returns status */
cudnnStatus_t fcd_error(cudnnStatus_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

cudnnStatus_t fcd_done(fake_rec *r, cudnnStatus_t st);
#define BEGIN(name) fake_rec *R = fake_rec_begin("call", name); const char *FN = name; (void)FN
#define INJECT() do { int inj_ = fake_injected(FN); \
    if (inj_) return fcd_done(R, fcd_error((cudnnStatus_t)inj_, "%s: injected failure", FN)); } while (0)
#define FAIL(st, ...) return fcd_done(R, fcd_error(st, __VA_ARGS__))

/* validated lookups: NULL + a logged violation / error message when not a live, set
 * descriptor of that kind */
struct cudnnTensorStruct *fcd_tensor(cudnnTensorDescriptor_t d);
struct cudnnFilterStruct *fcd_filter(cudnnFilterDescriptor_t d);
struct cudnnConvolutionStruct *fcd_conv(cudnnConvolutionDescriptor_t d);
struct cudnnActivationStruct *fcd_act(cudnnActivationDescriptor_t d);
struct cudnnOpTensorStruct *fcd_op(cudnnOpTensorDescriptor_t d);
struct cudnnContext *fcd_handle(cudnnHandle_t h);

int fcd_ref_dtype(cudnnDataType_t dt, ref_dtype *out);
size_t fcd_elem_size(cudnnDataType_t dt);
void fcd_tensor_ref(const struct cudnnTensorStruct *t, const void *data, ref_tensor *out);
void fcd_filter_ref(const struct cudnnFilterStruct *f, const void *data, ref_tensor *out);

/* JSON of a descriptor, for the log (caller frees with fake_buf_free) */
void fcd_json_tensor(fake_buf *b, const struct cudnnTensorStruct *t);
void fcd_json_filter(fake_buf *b, const struct cudnnFilterStruct *f);
void fcd_json_conv(fake_buf *b, const struct cudnnConvolutionStruct *c);
void fcd_json_act(fake_buf *b, const struct cudnnActivationStruct *a);
void fcd_rec_tensor(fake_rec *r, const char *key, const struct cudnnTensorStruct *t);
void fcd_rec_filter(fake_rec *r, const char *key, const struct cudnnFilterStruct *f);
void fcd_rec_conv(fake_rec *r, const char *key, const struct cudnnConvolutionStruct *c);
void fcd_rec_act(fake_rec *r, const char *key, const struct cudnnActivationStruct *a);

/* scaling factor: double for DOUBLE data, float otherwise (cuDNN's rule) */
double fcd_scale(const void *p, cudnnDataType_t data);

/* [data, data + extent) is device memory; else a violation (the real library would
 * fault) and 0 */
int fcd_check_mem(const char *fn, const char *what, const void *data, const ref_tensor *t);

/* at execution time (on the stream worker): the operand is still live device memory;
 * else a violation "freed before the kernel ran" (the bytes read are poison) */
void fcd_exec_check(const char *label, const char *what, const ref_tensor *t);

/* the stream a handle's work goes to (NULL: a violation was logged) */
fake_stream *fcd_stream(struct cudnnContext *h, const char *fn);

int fcd_act_ref(const struct cudnnActivationStruct *a, ref_act *out);

#endif
