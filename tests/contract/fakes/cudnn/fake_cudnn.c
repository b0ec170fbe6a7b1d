/* libfakecudnn.so: version, errors, handles and descriptors (see fake_cudnn.h). */
#define _GNU_SOURCE
#include "fake_cudnn.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cudnn_checks.h"   /* generated: our cuDNN constants and structs */

static __thread char last_error[512];

cudnnStatus_t fcd_error(cudnnStatus_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

cudnnStatus_t fcd_done(fake_rec *r, cudnnStatus_t st) {
    if (st != CUDNN_STATUS_SUCCESS) fake_rec_str(r, "message", last_error);
    return (cudnnStatus_t)fake_rec_end(r, (int)st);
}

/* ------------------------------------------------------------------ version, errors */
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
size_t cudnnGetCudartVersion(void) { return 13000; }

#define NAME(e) case e: return #e;
const char *cudnnGetErrorString(cudnnStatus_t status) {
    switch ((int)status) {
        NAME(CUDNN_STATUS_SUCCESS) NAME(CUDNN_STATUS_NOT_INITIALIZED)
        NAME(CUDNN_STATUS_BAD_PARAM) NAME(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
        NAME(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER) NAME(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
        NAME(CUDNN_STATUS_NOT_SUPPORTED) NAME(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
        NAME(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE) NAME(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
        NAME(CUDNN_STATUS_INTERNAL_ERROR) NAME(CUDNN_STATUS_EXECUTION_FAILED)
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
        NAME(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
        default: return "CUDNN_STATUS_UNKNOWN (fake cudnn)";
    }
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (!message || !max_size) return;
    snprintf(message, max_size, "%s", last_error);
    last_error[0] = 0;
}

/* ------------------------------------------------------------------ registry */
typedef struct { const void *d; int kind; } desc_entry;
static pthread_mutex_t d_mu = PTHREAD_MUTEX_INITIALIZER;
static desc_entry descs[65536];
static int n_descs;

void fcd_desc_register(void *d, int subkind, int *id) {
    *id = fake_handle_register(d, FAKE_KIND_DESCRIPTOR);
    pthread_mutex_lock(&d_mu);
    if (n_descs < 65536) { descs[n_descs].d = d; descs[n_descs].kind = subkind; n_descs++; }
    pthread_mutex_unlock(&d_mu);
}

void fcd_desc_unregister(void *d) {
    fake_handle_unregister(d);
    pthread_mutex_lock(&d_mu);
    for (int i = n_descs; i-- > 0;)
        if (descs[i].d == d) { descs[i] = descs[--n_descs]; break; }
    pthread_mutex_unlock(&d_mu);
}

int fcd_desc_kind(const void *d) {
    int k = 0;
    pthread_mutex_lock(&d_mu);
    for (int i = n_descs; i-- > 0;)
        if (descs[i].d == d) { k = descs[i].kind; break; }
    pthread_mutex_unlock(&d_mu);
    return k;
}

static void *lookup(const void *d, int kind, const char *what) {
    if (!d) { fcd_error(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "NULL %s descriptor", what); return NULL; }
    if (fcd_desc_kind(d) != kind) {
        fake_violation("cudnn", "%p is not a live %s descriptor", d, what);
        fcd_error(CUDNN_STATUS_BAD_PARAM, "%p is not a live %s descriptor", d, what);
        return NULL;
    }
    return (void *)d;
}

#define LOOKUP(fn, type, kind, what) \
    type *fn(const void *d) { \
        type *p = (type *)lookup(d, kind, what); \
        if (p && !p->set) { fcd_error(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "%s descriptor %d was never set", what, p->id); return NULL; } \
        return p; \
    }
static LOOKUP(tensor_, struct cudnnTensorStruct, DESC_TENSOR, "tensor")
static LOOKUP(filter_, struct cudnnFilterStruct, DESC_FILTER, "filter")
static LOOKUP(conv_, struct cudnnConvolutionStruct, DESC_CONV, "convolution")
static LOOKUP(act_, struct cudnnActivationStruct, DESC_ACT, "activation")
static LOOKUP(op_, struct cudnnOpTensorStruct, DESC_OP, "op-tensor")

struct cudnnTensorStruct *fcd_tensor(cudnnTensorDescriptor_t d) { return tensor_(d); }
struct cudnnFilterStruct *fcd_filter(cudnnFilterDescriptor_t d) { return filter_(d); }
struct cudnnConvolutionStruct *fcd_conv(cudnnConvolutionDescriptor_t d) { return conv_(d); }
struct cudnnActivationStruct *fcd_act(cudnnActivationDescriptor_t d) { return act_(d); }
struct cudnnOpTensorStruct *fcd_op(cudnnOpTensorDescriptor_t d) { return op_(d); }

struct cudnnContext *fcd_handle(cudnnHandle_t h) {
    if (fake_handle_kind(h) != FAKE_KIND_DNN_HANDLE) {
        fake_violation("cudnn", "%p is not a live cuDNN handle", (void *)h);
        fcd_error(CUDNN_STATUS_BAD_PARAM, "%p is not a live cuDNN handle", (void *)h);
        return NULL;
    }
    return h;
}

fake_stream *fcd_stream(struct cudnnContext *h, const char *fn) {
    fake_stream *s = fake_stream_get((void *)h->stream, fn);
    int cur = fake_current_device(), sd = fake_stream_device(s);
    /* cuDNN launches on the handle's device: the current one at cudnnCreate */
    if (h->device != cur || (sd >= 0 && sd != h->device))
        fake_violation(fn, "handle %d of device %d with a stream of device %d, called while "
                       "the current device is %d", h->id, h->device, sd, cur);
    return s;
}

/* ------------------------------------------------------------------ helpers */
int fcd_ref_dtype(cudnnDataType_t dt, ref_dtype *out) {
    switch (dt) {
        case CUDNN_DATA_FLOAT: *out = REF_F32; return 0;
        case CUDNN_DATA_HALF: *out = REF_F16; return 0;
        case CUDNN_DATA_BFLOAT16: *out = REF_BF16; return 0;
        case CUDNN_DATA_DOUBLE: *out = REF_F64; return 0;
        default: return -1;
    }
}

size_t fcd_elem_size(cudnnDataType_t dt) {
    ref_dtype r;
    return fcd_ref_dtype(dt, &r) == 0 ? ref_elem_size(r) : 1;
}

void fcd_tensor_ref(const struct cudnnTensorStruct *t, const void *data, ref_tensor *out) {
    memset(out, 0, sizeof *out);
    fcd_ref_dtype(t->dt, &out->dt);
    out->nd = t->nd;
    for (int i = 0; i < t->nd; i++) { out->dims[i] = t->dims[i]; out->strides[i] = t->strides[i]; }
    out->data = (void *)data;
}

void fcd_filter_ref(const struct cudnnFilterStruct *f, const void *data, ref_tensor *out) {
    /* NCHW: packed K, C, [D,] R, S; NHWC: packed K, [D,] R, S, C */
    memset(out, 0, sizeof *out);
    fcd_ref_dtype(f->dt, &out->dt);
    out->nd = f->nd;
    for (int i = 0; i < f->nd; i++) out->dims[i] = f->dims[i];
    int order[FAKE_CUDNN_MAX_DIMS], k = 0;
    order[k++] = 0;
    if (f->format == CUDNN_TENSOR_NHWC) {
        for (int i = 2; i < f->nd; i++) order[k++] = i;
        order[k++] = 1;
    } else {
        for (int i = 1; i < f->nd; i++) order[k++] = i;
    }
    int64_t s = 1;
    for (int i = f->nd - 1; i >= 0; i--) { out->strides[order[i]] = s; s *= f->dims[order[i]]; }
    out->data = (void *)data;
}

void fcd_json_tensor(fake_buf *b, const struct cudnnTensorStruct *t) {
    if (!t) { fake_buf_printf(b, "null"); return; }
    fake_buf_printf(b, "{\"id\": %d, \"dtype\": %d, \"dims\": [", t->id, t->dt);
    for (int i = 0; i < t->nd; i++) fake_buf_printf(b, i ? ", %d" : "%d", t->dims[i]);
    fake_buf_printf(b, "], \"strides\": [");
    for (int i = 0; i < t->nd; i++) fake_buf_printf(b, i ? ", %d" : "%d", t->strides[i]);
    fake_buf_printf(b, "]}");
}

void fcd_json_filter(fake_buf *b, const struct cudnnFilterStruct *f) {
    if (!f) { fake_buf_printf(b, "null"); return; }
    fake_buf_printf(b, "{\"id\": %d, \"dtype\": %d, \"format\": %d, \"dims\": [", f->id, f->dt, f->format);
    for (int i = 0; i < f->nd; i++) fake_buf_printf(b, i ? ", %d" : "%d", f->dims[i]);
    fake_buf_printf(b, "]}");
}

static void ints(fake_buf *b, const char *key, const int *v, int n) {
    fake_buf_printf(b, ", \"%s\": [", key);
    for (int i = 0; i < n; i++) fake_buf_printf(b, i ? ", %d" : "%d", v[i]);
    fake_buf_printf(b, "]");
}

void fcd_json_conv(fake_buf *b, const struct cudnnConvolutionStruct *c) {
    if (!c) { fake_buf_printf(b, "null"); return; }
    fake_buf_printf(b, "{\"id\": %d", c->id);
    ints(b, "pad", c->pad, c->n);
    ints(b, "stride", c->stride, c->n);
    ints(b, "dilation", c->dilation, c->n);
    fake_buf_printf(b, ", \"mode\": %d, \"compute\": %d, \"groups\": %d, \"math\": %d}",
                    c->mode, c->compute, c->groups, c->math);
}

void fcd_json_act(fake_buf *b, const struct cudnnActivationStruct *a) {
    if (!a) { fake_buf_printf(b, "null"); return; }
    fake_buf_printf(b, "{\"id\": %d, \"mode\": %d, \"nan\": %d, \"coef\": %.17g}", a->id, a->mode,
                    a->nan, a->coef);
}

#define REC_JSON(name, type, json) \
    void name(fake_rec *r, const char *key, const type *v) { \
        fake_buf b = {0}; json(&b, v); fake_rec_raw(r, key, b.s); fake_buf_free(&b); }
REC_JSON(fcd_rec_tensor, struct cudnnTensorStruct, fcd_json_tensor)
REC_JSON(fcd_rec_filter, struct cudnnFilterStruct, fcd_json_filter)
REC_JSON(fcd_rec_conv, struct cudnnConvolutionStruct, fcd_json_conv)
REC_JSON(fcd_rec_act, struct cudnnActivationStruct, fcd_json_act)

double fcd_scale(const void *p, cudnnDataType_t data) {
    if (!p) return 0;
    return data == CUDNN_DATA_DOUBLE ? *(const double *)p : (double)*(const float *)p;
}

int fcd_check_mem(const char *fn, const char *what, const void *data, const ref_tensor *t) {
    size_t n = ref_extent_bytes(t);
    if (n == 0) return 1;
    return fake_mem_check(data, n, fn, what);
}

void fcd_exec_check(const char *label, const char *what, const ref_tensor *t) {
    size_t n = ref_extent_bytes(t);
    if (!n || !t->data) return;
    char where[160];
    snprintf(where, sizeof where, "%s (on the stream)", label);
    fake_mem_check(t->data, n, where, what);
}

int fcd_act_ref(const struct cudnnActivationStruct *a, ref_act *out) {
    memset(out, 0, sizeof *out);
    out->propagate_nan = a->nan == CUDNN_PROPAGATE_NAN;
    switch (a->mode) {
        case CUDNN_ACTIVATION_SIGMOID: out->mode = REF_ACT_SIGMOID; return 0;
        case CUDNN_ACTIVATION_RELU: out->mode = REF_ACT_RELU; return 0;
        case CUDNN_ACTIVATION_TANH: out->mode = REF_ACT_TANH; return 0;
        case CUDNN_ACTIVATION_CLIPPED_RELU: out->mode = REF_ACT_CLIPPED_RELU; out->upper = a->coef; return 0;
        case CUDNN_ACTIVATION_ELU: out->mode = REF_ACT_ELU; out->lower = a->coef; return 0;
        case CUDNN_ACTIVATION_IDENTITY: out->mode = REF_ACT_IDENTITY; return 0;
        default: return -1;
    }
}

/* ------------------------------------------------------------------ handles */
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    BEGIN("cudnnCreate");
    INJECT();
    if (!handle) FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreate: NULL handle pointer");
    struct cudnnContext *h = (struct cudnnContext *)calloc(1, sizeof *h);
    h->id = fake_handle_register(h, FAKE_KIND_DNN_HANDLE);
    h->device = fake_current_device();
    *handle = h;
    fake_rec_int(R, "device", h->device);
    fake_rec_int(R, "id", h->id);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    BEGIN("cudnnDestroy");
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    INJECT();
    if (!h) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    fake_device_synchronize();     /* cuDNN synchronizes the device here */
    fake_handle_unregister(h);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    BEGIN("cudnnSetStream");
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    fake_stream *s = fake_stream_get((void *)stream, FN);
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (!s) FAIL(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: %p is not a stream", (void *)stream);
    if (fake_stream_device(s) >= 0 && fake_stream_device(s) != h->device)
        fake_violation(FN, "stream %d of device %d given to handle %d of device %d",
                       fake_stream_id(s), fake_stream_device(s), h->id, h->device);
    h->stream = stream;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *stream) {
    BEGIN("cudnnGetStream");
    struct cudnnContext *h = fcd_handle(handle);
    INJECT();
    if (!h) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    *stream = h->stream;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

/* ------------------------------------------------------------------ descriptors */
#define CREATE(fn_name, type, ctype, kind) \
    cudnnStatus_t fn_name(ctype *d) { \
        BEGIN(#fn_name); INJECT(); \
        if (!d) FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, #fn_name ": NULL"); \
        type *p = (type *)calloc(1, sizeof *p); \
        fcd_desc_register(p, kind, &p->id); *d = p; \
        fake_rec_int(R, "id", p->id); \
        return fcd_done(R, CUDNN_STATUS_SUCCESS); }
#define DESTROY(fn_name, ctype, kind, what) \
    cudnnStatus_t fn_name(ctype d) { \
        BEGIN(#fn_name); \
        fake_rec_int(R, "id", fake_handle_id(d)); INJECT(); \
        if (!lookup(d, kind, what)) return fcd_done(R, CUDNN_STATUS_BAD_PARAM); \
        fcd_desc_unregister(d); return fcd_done(R, CUDNN_STATUS_SUCCESS); }

CREATE(cudnnCreateTensorDescriptor, struct cudnnTensorStruct, cudnnTensorDescriptor_t, DESC_TENSOR)
CREATE(cudnnCreateFilterDescriptor, struct cudnnFilterStruct, cudnnFilterDescriptor_t, DESC_FILTER)
CREATE(cudnnCreateConvolutionDescriptor, struct cudnnConvolutionStruct, cudnnConvolutionDescriptor_t, DESC_CONV)
CREATE(cudnnCreateActivationDescriptor, struct cudnnActivationStruct, cudnnActivationDescriptor_t, DESC_ACT)
CREATE(cudnnCreateOpTensorDescriptor, struct cudnnOpTensorStruct, cudnnOpTensorDescriptor_t, DESC_OP)
DESTROY(cudnnDestroyTensorDescriptor, cudnnTensorDescriptor_t, DESC_TENSOR, "tensor")
DESTROY(cudnnDestroyFilterDescriptor, cudnnFilterDescriptor_t, DESC_FILTER, "filter")
DESTROY(cudnnDestroyConvolutionDescriptor, cudnnConvolutionDescriptor_t, DESC_CONV, "convolution")
DESTROY(cudnnDestroyActivationDescriptor, cudnnActivationDescriptor_t, DESC_ACT, "activation")
DESTROY(cudnnDestroyOpTensorDescriptor, cudnnOpTensorDescriptor_t, DESC_OP, "op-tensor")

static int known_dtype(cudnnDataType_t dt) { ref_dtype r; return fcd_ref_dtype(dt, &r) == 0; }

/* cuDNN: nbDims in [3, CUDNN_DIM_MAX] (4 or 5 for most routines), every dim and stride
 * > 0; an unsupported data type is BAD_PARAM at set time */
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t d, cudnnDataType_t dt, int nd,
                                         const int dims[], const int strides[]) {
    BEGIN("cudnnSetTensorNdDescriptor");
    struct cudnnTensorStruct *t = (struct cudnnTensorStruct *)lookup(d, DESC_TENSOR, "tensor");
    fake_rec_int(R, "id", t ? t->id : 0);
    fake_rec_int(R, "dtype", dt);
    fake_rec_int(R, "nbDims", nd);
    fake_rec_ints(R, "dims", dims, nd > 0 && nd <= FAKE_CUDNN_MAX_DIMS ? nd : 0);
    fake_rec_ints(R, "strides", strides, nd > 0 && nd <= FAKE_CUDNN_MAX_DIMS ? nd : 0);
    INJECT();
    if (!t) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (nd < 3 || nd > FAKE_CUDNN_MAX_DIMS) FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d outside [3, 8]", nd);
    if (!known_dtype(dt)) FAIL(CUDNN_STATUS_BAD_PARAM, "data type %d not supported by the fake", dt);
    for (int i = 0; i < nd; i++)
        if (dims[i] <= 0 || strides[i] <= 0)
            FAIL(CUDNN_STATUS_BAD_PARAM, "dim %d: size %d stride %d must be > 0", i, dims[i], strides[i]);
    t->dt = dt;
    t->nd = nd;
    for (int i = 0; i < nd; i++) { t->dims[i] = dims[i]; t->strides[i] = strides[i]; }
    t->set = 1;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t dt,
                                         cudnnTensorFormat_t format, int nd, const int dims[]) {
    BEGIN("cudnnSetFilterNdDescriptor");
    struct cudnnFilterStruct *f = (struct cudnnFilterStruct *)lookup(d, DESC_FILTER, "filter");
    fake_rec_int(R, "id", f ? f->id : 0);
    fake_rec_int(R, "dtype", dt);
    fake_rec_int(R, "format", format);
    fake_rec_int(R, "nbDims", nd);
    fake_rec_ints(R, "dims", dims, nd > 0 && nd <= FAKE_CUDNN_MAX_DIMS ? nd : 0);
    INJECT();
    if (!f) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (nd < 3 || nd > FAKE_CUDNN_MAX_DIMS) FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d outside [3, 8]", nd);
    if (!known_dtype(dt)) FAIL(CUDNN_STATUS_BAD_PARAM, "data type %d", dt);
    if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
        FAIL(CUDNN_STATUS_BAD_PARAM, "filter format %d", format);
    for (int i = 0; i < nd; i++)
        if (dims[i] <= 0) FAIL(CUDNN_STATUS_BAD_PARAM, "filter dim %d is %d", i, dims[i]);
    f->dt = dt;
    f->format = format;
    f->nd = nd;
    for (int i = 0; i < nd; i++) f->dims[i] = dims[i];
    f->set = 1;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t d, int n,
                                              const int pad[], const int stride[],
                                              const int dilation[], cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
    BEGIN("cudnnSetConvolutionNdDescriptor");
    struct cudnnConvolutionStruct *c = (struct cudnnConvolutionStruct *)lookup(d, DESC_CONV, "convolution");
    int ok_n = n > 0 && n <= FAKE_CUDNN_MAX_DIMS - 2;
    fake_rec_int(R, "id", c ? c->id : 0);
    fake_rec_int(R, "arrayLength", n);
    fake_rec_ints(R, "pad", pad, ok_n ? n : 0);
    fake_rec_ints(R, "stride", stride, ok_n ? n : 0);
    fake_rec_ints(R, "dilation", dilation, ok_n ? n : 0);
    fake_rec_int(R, "mode", mode);
    fake_rec_int(R, "compute", compute);
    INJECT();
    if (!c) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (!ok_n) FAIL(CUDNN_STATUS_BAD_PARAM, "arrayLength %d", n);
    if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) FAIL(CUDNN_STATUS_BAD_PARAM, "mode %d", mode);
    if (!known_dtype(compute)) FAIL(CUDNN_STATUS_BAD_PARAM, "compute type %d", compute);
    for (int i = 0; i < n; i++)
        if (pad[i] < 0 || stride[i] <= 0 || dilation[i] <= 0)
            FAIL(CUDNN_STATUS_BAD_PARAM, "dim %d: pad %d stride %d dilation %d", i, pad[i], stride[i], dilation[i]);
    c->n = n;
    for (int i = 0; i < n; i++) { c->pad[i] = pad[i]; c->stride[i] = stride[i]; c->dilation[i] = dilation[i]; }
    c->mode = mode;
    c->compute = compute;
    if (!c->groups) c->groups = 1;
    c->set = 1;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
    BEGIN("cudnnSetConvolutionGroupCount");
    struct cudnnConvolutionStruct *c = (struct cudnnConvolutionStruct *)lookup(d, DESC_CONV, "convolution");
    fake_rec_int(R, "id", c ? c->id : 0);
    fake_rec_int(R, "groups", groups);
    INJECT();
    if (!c) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (groups < 1) FAIL(CUDNN_STATUS_BAD_PARAM, "group count %d", groups);
    c->groups = groups;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    BEGIN("cudnnSetConvolutionMathType");
    struct cudnnConvolutionStruct *c = (struct cudnnConvolutionStruct *)lookup(d, DESC_CONV, "convolution");
    fake_rec_int(R, "id", c ? c->id : 0);
    fake_rec_int(R, "math", math);
    INJECT();
    if (!c) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH &&
        math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && math != CUDNN_FMA_MATH)
        FAIL(CUDNN_STATUS_BAD_PARAM, "math type %d", math);
    c->math = math;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double coef) {
    BEGIN("cudnnSetActivationDescriptor");
    struct cudnnActivationStruct *a = (struct cudnnActivationStruct *)lookup(d, DESC_ACT, "activation");
    fake_rec_int(R, "id", a ? a->id : 0);
    fake_rec_int(R, "mode", mode);
    fake_rec_int(R, "nan", nan);
    fake_rec_double(R, "coef", coef);
    INJECT();
    if (!a) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN) FAIL(CUDNN_STATUS_BAD_PARAM, "nan option %d", nan);
    a->mode = mode;
    a->nan = nan;
    a->coef = coef;
    ref_act tmp;
    if (fcd_act_ref(a, &tmp) != 0) FAIL(CUDNN_STATUS_BAD_PARAM, "activation mode %d", mode);
    a->set = 1;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnSetOpTensorDescriptor(cudnnOpTensorDescriptor_t d, cudnnOpTensorOp_t op,
                                         cudnnDataType_t compute, cudnnNanPropagation_t nan) {
    BEGIN("cudnnSetOpTensorDescriptor");
    struct cudnnOpTensorStruct *o = (struct cudnnOpTensorStruct *)lookup(d, DESC_OP, "op-tensor");
    fake_rec_int(R, "id", o ? o->id : 0);
    fake_rec_int(R, "op", op);
    fake_rec_int(R, "compute", compute);
    fake_rec_int(R, "nan", nan);
    INJECT();
    if (!o) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (op < CUDNN_OP_TENSOR_ADD || op > CUDNN_OP_TENSOR_NOT) FAIL(CUDNN_STATUS_BAD_PARAM, "op %d", op);
    if (!known_dtype(compute)) FAIL(CUDNN_STATUS_BAD_PARAM, "compute type %d", compute);
    o->op = op;
    o->compute = compute;
    o->nan = nan;
    o->set = 1;
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}
