/* libfakecudnn.so: convolutions (forward, backward data, backward filter, fused
 * conv + bias + activation), their algorithm lists, workspace sizes and Find.
 *
 * The fake's algorithms all compute the same reference result; what differs is what
 * cuDNN's documentation makes them differ in: applicability (FFT: 2-D, stride 1,
 * dilation 1, no groups; Winograd: 3x3 2-D stride 1; DIRECT: never implemented),
 * workspace (a per-algorithm formula below), determinism (backward ALGO_0 / ALGO_3 use
 * atomics: non-deterministic) and, for Find, a fixed fake time per algorithm.
 */
#define _GNU_SOURCE
#include "fake_cudnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    struct cudnnTensorStruct x, y;          /* x (dx for backward data), y (dy for backward) */
    struct cudnnFilterStruct w;
    struct cudnnConvolutionStruct c;
    int nsp;
} problem;

static const char *DIR_NAME[3] = {"forward", "backward data", "backward filter"};

/* cudnnConvolutionForward etc.: BAD_PARAM for inconsistent shapes, NOT_SUPPORTED for a
 * data/compute type combination outside the documented table */
static cudnnStatus_t make_problem(const char *fn, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                                  cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                                  problem *p) {
    struct cudnnTensorStruct *x = fcd_tensor(xd), *y = fcd_tensor(yd);
    struct cudnnFilterStruct *w = fcd_filter(wd);
    struct cudnnConvolutionStruct *c = fcd_conv(cd);
    if (!x || !y || !w || !c) return CUDNN_STATUS_BAD_PARAM;
    p->x = *x; p->y = *y; p->w = *w; p->c = *c;
    int nd = x->nd;
    if (y->nd != nd || w->nd != nd || c->n != nd - 2)
        return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: ranks x %d, w %d, y %d, convolution %d",
                         fn, x->nd, w->nd, y->nd, c->n);
    p->nsp = nd - 2;
    if (x->dt != y->dt || x->dt != w->dt)
        return fcd_error(CUDNN_STATUS_NOT_SUPPORTED, "%s: data types x %d, w %d, y %d differ", fn,
                         x->dt, w->dt, y->dt);
    int compute_ok = x->dt == CUDNN_DATA_DOUBLE ? c->compute == CUDNN_DATA_DOUBLE
                   : x->dt == CUDNN_DATA_HALF ? (c->compute == CUDNN_DATA_FLOAT || c->compute == CUDNN_DATA_HALF)
                   : c->compute == CUDNN_DATA_FLOAT;
    if (!compute_ok)
        return fcd_error(CUDNN_STATUS_NOT_SUPPORTED, "%s: data type %d with compute type %d", fn,
                         x->dt, c->compute);
    int g = c->groups;
    if (x->dims[1] != w->dims[1] * g || w->dims[0] % g || y->dims[1] != w->dims[0] || x->dims[0] != y->dims[0])
        return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: x C %d, filter K %d C %d, groups %d, y C %d", fn,
                         x->dims[1], w->dims[0], w->dims[1], g, y->dims[1]);
    for (int i = 0; i < p->nsp; i++) {
        int in = x->dims[2 + i], k = w->dims[2 + i];
        int out = (in + 2 * c->pad[i] - c->dilation[i] * (k - 1) - 1) / c->stride[i] + 1;
        if (out != y->dims[2 + i])
            return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: spatial dim %d: output %d, expected %d "
                             "(in %d, kernel %d, pad %d, stride %d, dilation %d)", fn, i,
                             y->dims[2 + i], out, in, k, c->pad[i], c->stride[i], c->dilation[i]);
    }
    return CUDNN_STATUS_SUCCESS;
}

static long long prod(const int *v, int n) {
    long long r = 1;
    for (int i = 0; i < n; i++) r *= v[i];
    return r;
}

/* applicability, workspace bytes, determinism and fake time of (direction, algo) */
static cudnnStatus_t algo_info(int dir, int algo, const problem *p, size_t *ws, int *det, float *time) {
    long long esz = (long long)fcd_elem_size(p->x.dt);
    long long kern = prod(p->w.dims + 2, p->nsp);
    long long cg = p->w.dims[1], k = p->w.dims[0], n = p->x.dims[0];
    long long outsp = prod(p->y.dims + 2, p->nsp), insp = prod(p->x.dims + 2, p->nsp);
    int unit = 1, k3 = p->nsp == 2;
    for (int i = 0; i < p->nsp; i++) {
        if (p->c.stride[i] != 1 || p->c.dilation[i] != 1) unit = 0;
        if (p->w.dims[2 + i] != 3) k3 = 0;
    }
    int fft_ok = p->nsp == 2 && unit && p->c.groups == 1;
    int wino_ok = k3 && unit && p->c.groups == 1;
    *det = CUDNN_DETERMINISTIC;
    *ws = 0;
    *time = 1.0f;
    if (dir == 0) {
        switch (algo) {
            case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: *time = 0.9f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
                *ws = (size_t)(4 * cg * kern + 256); *time = 0.7f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
                *ws = (size_t)(esz * cg * kern * n * outsp * p->c.groups); *time = 0.3f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
                if (!fft_ok) break;
                *ws = (size_t)(16 * (n + k) * cg * insp); *time = 0.5f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
                if (!fft_ok) break;
                *ws = (size_t)(16 * (n + k) * cg * 32 * 32); *time = 0.6f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
                if (!wino_ok) break;
                *ws = 0; *time = 0.4f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
                if (!wino_ok) break;
                *ws = (size_t)(4 * 36 * (cg * k + n * cg * outsp)); *time = 0.45f; return CUDNN_STATUS_SUCCESS;
            default: break;     /* DIRECT: not implemented in cuDNN */
        }
    } else if (dir == 1) {
        switch (algo) {
            case CUDNN_CONVOLUTION_BWD_DATA_ALGO_0:
                *det = CUDNN_NON_DETERMINISTIC; *time = 0.8f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_DATA_ALGO_1:
                *ws = (size_t)(4 * (k / p->c.groups) * kern + 128); *time = 0.6f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT:
                if (!fft_ok) break;
                *ws = (size_t)(16 * (n + k) * cg * insp); *time = 0.5f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING:
                if (!fft_ok) break;
                *ws = (size_t)(16 * (n + k) * cg * 32 * 32); *time = 0.55f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD:
                if (!wino_ok) break;
                *time = 0.4f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED:
                if (!wino_ok) break;
                *ws = (size_t)(4 * 36 * (cg * k + n * k * outsp)); *time = 0.45f; return CUDNN_STATUS_SUCCESS;
            default: break;
        }
    } else {
        switch (algo) {
            case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
                *det = CUDNN_NON_DETERMINISTIC; *time = 0.7f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
                *ws = (size_t)(esz * cg * kern * n * outsp * p->c.groups + 64); *time = 0.6f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
                *det = CUDNN_NON_DETERMINISTIC; *ws = (size_t)(4 * k * cg * kern); *time = 0.5f;
                return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT:
                if (!fft_ok) break;
                *ws = (size_t)(16 * (n + k) * cg * insp); *time = 0.65f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING:
                if (!fft_ok) break;
                *ws = (size_t)(16 * (n + k) * cg * 32 * 32); *time = 0.66f; return CUDNN_STATUS_SUCCESS;
            case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED:
                if (!wino_ok) break;
                *ws = (size_t)(4 * 36 * (cg * k + n * k * outsp)); *time = 0.45f; return CUDNN_STATUS_SUCCESS;
            default: break;     /* WINOGRAD: not implemented in cuDNN */
        }
    }
    *time = -1.0f;
    return CUDNN_STATUS_NOT_SUPPORTED;
}

/* heuristic order (the fake's: cuDNN's own depends on the GPU) */
static const int HEUR_FWD[] = {1, 0, 2, 7, 6, 5, 4, 3};
static const int HEUR_BWD_DATA[] = {1, 0, 5, 3, 2, 4};
static const int HEUR_BWD_FILTER[] = {1, 0, 3, 5, 6, 2, 4};
static const int *HEUR[3] = {HEUR_FWD, HEUR_BWD_DATA, HEUR_BWD_FILTER};
static const int N_ALGOS[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
_Static_assert(sizeof HEUR_FWD / sizeof HEUR_FWD[0] == CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "fwd list");
_Static_assert(sizeof HEUR_BWD_DATA / sizeof HEUR_BWD_DATA[0] == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, "bwd data list");
_Static_assert(sizeof HEUR_BWD_FILTER / sizeof HEUR_BWD_FILTER[0] == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, "bwd filter list");

/* one layout for the three perf structs (the headers declare them field for field alike) */
typedef cudnnConvolutionFwdAlgoPerf_t perf_t;
_Static_assert(sizeof(perf_t) == sizeof(cudnnConvolutionBwdDataAlgoPerf_t) &&
               sizeof(perf_t) == sizeof(cudnnConvolutionBwdFilterAlgoPerf_t), "perf structs");

static void rec_problem(fake_rec *R, int dir, const problem *p) {
    fcd_rec_tensor(R, dir == 1 ? "dxDesc" : "xDesc", &p->x);
    fcd_rec_filter(R, dir == 2 ? "dwDesc" : "wDesc", &p->w);
    fcd_rec_conv(R, "convDesc", &p->c);
    fcd_rec_tensor(R, dir == 0 ? "yDesc" : "dyDesc", &p->y);
}

static void rec_perf(fake_rec *R, const perf_t *perf, int n) {
    fake_buf b = {0};
    fake_buf_printf(&b, "[");
    for (int i = 0; i < n; i++)
        fake_buf_printf(&b, "%s{\"algo\": %d, \"status\": %d, \"time\": %.3f, \"memory\": %zu, "
                        "\"determinism\": %d, \"mathType\": %d}", i ? ", " : "", perf[i].algo,
                        perf[i].status, perf[i].time, perf[i].memory, perf[i].determinism,
                        perf[i].mathType);
    fake_buf_printf(&b, "]");
    fake_rec_raw(R, "perf", b.s);
    fake_buf_free(&b);
}

static int heuristics(int dir, const problem *p, int requested, perf_t *out) {
    perf_t ok[16], bad[16];
    int n_ok = 0, n_bad = 0;
    for (int i = 0; i < N_ALGOS[dir]; i++) {
        perf_t e;
        memset(&e, 0, sizeof e);
        int det;
        size_t ws;
        float t;
        e.algo = (cudnnConvolutionFwdAlgo_t)HEUR[dir][i];
        e.status = algo_info(dir, HEUR[dir][i], p, &ws, &det, &t);
        e.memory = ws;
        e.determinism = (cudnnDeterminism_t)det;
        e.mathType = p->c.math;
        e.time = -1.0f;                      /* heuristics do not time */
        if (e.status == CUDNN_STATUS_SUCCESS) ok[n_ok++] = e; else bad[n_bad++] = e;
    }
    int n = 0;
    for (int i = 0; i < n_ok && n < requested; i++) out[n++] = ok[i];
    for (int i = 0; i < n_bad && n < requested; i++) out[n++] = bad[i];
    return n;
}

#define MAX_COUNT(fname, dir) \
    cudnnStatus_t fname(cudnnHandle_t handle, int *count) { \
        BEGIN(#fname); INJECT(); \
        if (!fcd_handle(handle)) return fcd_done(R, CUDNN_STATUS_BAD_PARAM); \
        *count = N_ALGOS[dir]; fake_rec_int(R, "count", *count); \
        return fcd_done(R, CUDNN_STATUS_SUCCESS); }
MAX_COUNT(cudnnGetConvolutionForwardAlgorithmMaxCount, 0)
MAX_COUNT(cudnnGetConvolutionBackwardDataAlgorithmMaxCount, 1)
MAX_COUNT(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, 2)

static cudnnStatus_t get_v7(fake_rec *R, const char *FN, int dir, cudnnHandle_t handle,
                            cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                            cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd,
                            int requested, int *returned, perf_t *perf) {
    problem p;
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    cudnnStatus_t st = make_problem(FN, xd, wd, cd, yd, &p);
    if (st == CUDNN_STATUS_SUCCESS) rec_problem(R, dir, &p);
    fake_rec_int(R, "requestedAlgoCount", requested);
    INJECT();
    if (!h) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (st) return fcd_done(R, st);
    if (requested <= 0 || !returned || !perf) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: requestedAlgoCount %d", FN, requested);
    *returned = heuristics(dir, &p, requested, perf);
    rec_perf(R, perf, *returned);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
        const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
        cudnnConvolutionFwdAlgoPerf_t *perfResults) {
    BEGIN("cudnnGetConvolutionForwardAlgorithm_v7");
    return get_v7(R, FN, 0, handle, srcDesc, filterDesc, convDesc, destDesc, requestedAlgoCount,
                  returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
        const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
        cudnnConvolutionBwdDataAlgoPerf_t *perfResults) {
    BEGIN("cudnnGetConvolutionBackwardDataAlgorithm_v7");
    return get_v7(R, FN, 1, handle, gradDesc, filterDesc, convDesc, diffDesc, requestedAlgoCount,
                  returnedAlgoCount, (perf_t *)(void *)perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
        const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
        cudnnConvolutionBwdFilterAlgoPerf_t *perfResults) {
    BEGIN("cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    return get_v7(R, FN, 2, handle, srcDesc, gradDesc, convDesc, diffDesc, requestedAlgoCount,
                  returnedAlgoCount, (perf_t *)(void *)perfResults);
}

static cudnnStatus_t ws_size(fake_rec *R, const char *FN, int dir, cudnnHandle_t handle,
                             cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                             cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, int algo,
                             size_t *size) {
    problem p;
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    cudnnStatus_t st = make_problem(FN, xd, wd, cd, yd, &p);
    if (st == CUDNN_STATUS_SUCCESS) rec_problem(R, dir, &p);
    fake_rec_int(R, "algo", algo);
    INJECT();
    if (!h) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (st) return fcd_done(R, st);
    int det;
    float t;
    size_t ws;
    if (algo_info(dir, algo, &p, &ws, &det, &t) != CUDNN_STATUS_SUCCESS)
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: algorithm %d does not apply to this %s problem", FN, algo, DIR_NAME[dir]);
    *size = ws;
    fake_rec_uint(R, "size", ws);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
        const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes) {
    BEGIN("cudnnGetConvolutionForwardWorkspaceSize");
    return ws_size(R, FN, 0, handle, xDesc, wDesc, convDesc, yDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
        const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes) {
    BEGIN("cudnnGetConvolutionBackwardDataWorkspaceSize");
    return ws_size(R, FN, 1, handle, dxDesc, wDesc, convDesc, dyDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
        const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
        const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes) {
    BEGIN("cudnnGetConvolutionBackwardFilterWorkspaceSize");
    return ws_size(R, FN, 2, handle, xDesc, gradDesc, convDesc, dyDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
        const cudnnTensorDescriptor_t inputTensorDesc, const cudnnFilterDescriptor_t filterDesc,
        int nbDims, int tensorOuputDimA[]) {
    BEGIN("cudnnGetConvolutionNdForwardOutputDim");
    INJECT();
    struct cudnnConvolutionStruct *c = fcd_conv(convDesc);
    struct cudnnTensorStruct *x = fcd_tensor(inputTensorDesc);
    struct cudnnFilterStruct *w = fcd_filter(filterDesc);
    if (!c || !x || !w) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (nbDims != x->nd || w->nd != x->nd || c->n != x->nd - 2) FAIL(CUDNN_STATUS_BAD_PARAM, "ranks");
    tensorOuputDimA[0] = x->dims[0];
    tensorOuputDimA[1] = w->dims[0];
    for (int i = 0; i < c->n; i++)
        tensorOuputDimA[2 + i] = (x->dims[2 + i] + 2 * c->pad[i] - c->dilation[i] * (w->dims[2 + i] - 1) - 1)
                                 / c->stride[i] + 1;
    fake_rec_ints(R, "dims", tensorOuputDimA, nbDims);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

/* ------------------------------------------------------------------ execution */
typedef struct {
    int which;
    ref_conv p;
    ref_tensor x, w, y;
    double alpha, beta;
    int fused;
    ref_tensor z, bias;
    double alpha2;
    ref_act act;
} conv_job;

static void run_conv(void *arg) {
    conv_job *j = (conv_job *)arg;
    fcd_exec_check("convolution", "x", &j->x);
    fcd_exec_check("convolution", "w", &j->w);
    fcd_exec_check("convolution", "y", &j->y);
    if (j->fused) fcd_exec_check("convolution", "bias", &j->bias);
    if (!j->fused) {
        ref_conv_run_dir(j->which, &j->p, &j->x, &j->w, &j->y, j->alpha, j->beta);
        return;
    }
    /* y = act(alpha1 * conv(x, w) + alpha2 * z + bias) */
    ref_tensor tmp = j->y;
    tmp.dt = REF_F64;
    int64_t s = 1;
    for (int i = tmp.nd - 1; i >= 0; i--) { tmp.strides[i] = s; s *= tmp.dims[i]; }
    tmp.data = calloc((size_t)(s > 0 ? s : 1), sizeof(double));
    ref_conv_run_dir(0, &j->p, &j->x, &j->w, &tmp, j->alpha, 0.0);
    int64_t idx[REF_MAX_DIMS] = {0};
    if (ref_count(&j->y) > 0) do {
        double v = ref_load(&tmp, ref_offset(&tmp, idx));
        if (j->alpha2 != 0) v += j->alpha2 * ref_load(&j->z, ref_offset(&j->z, idx));
        v += ref_load(&j->bias, ref_bcast_offset(&j->bias, idx));
        ref_store(&j->y, ref_offset(&j->y, idx), ref_act_fwd(&j->act, v));
    } while (ref_next(idx, j->y.dims, j->y.nd));
    free(tmp.data);
}

static void fill_job(conv_job *j, int which, const problem *p, const void *x, const void *w,
                     const void *y, double alpha, double beta) {
    memset(j, 0, sizeof *j);
    j->which = which;
    j->p.nsp = p->nsp;
    for (int i = 0; i < p->nsp; i++) {
        j->p.pad[i] = p->c.pad[i];
        j->p.stride[i] = p->c.stride[i];
        j->p.dilation[i] = p->c.dilation[i];
    }
    j->p.groups = p->c.groups;
    j->p.flip = p->c.mode == CUDNN_CONVOLUTION;
    fcd_tensor_ref(&p->x, x, &j->x);
    fcd_filter_ref(&p->w, w, &j->w);
    fcd_tensor_ref(&p->y, y, &j->y);
    j->alpha = alpha;
    j->beta = beta;
}

static const char *LABEL[3] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                               "cudnnConvolutionBackwardFilter"};

/* the shared body of the three convolution calls; a, b, c are x, w, y in the problem's
 * terms (dx, w, dy for backward data; x, dw, dy for backward filter) */
static cudnnStatus_t run_call(fake_rec *R, const char *FN, int dir, cudnnHandle_t handle,
                              const void *alpha, cudnnTensorDescriptor_t xd, const void *x,
                              cudnnFilterDescriptor_t wd, const void *w,
                              cudnnConvolutionDescriptor_t cd, int algo, void *ws, size_t ws_size,
                              const void *beta, cudnnTensorDescriptor_t yd, const void *y,
                              int fused_sync /* Find: run and wait */) {
    problem p;
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    cudnnStatus_t st = make_problem(FN, xd, wd, cd, yd, &p);
    if (st == CUDNN_STATUS_SUCCESS) rec_problem(R, dir, &p);
    double a = st ? 0 : fcd_scale(alpha, p.x.dt), b = st ? 0 : fcd_scale(beta, p.x.dt);
    fake_rec_double(R, "alpha", a);
    fake_rec_double(R, "beta", b);
    fake_rec_ptr(R, dir == 1 ? "dx" : "x", x);
    fake_rec_ptr(R, dir == 2 ? "dw" : "w", w);
    fake_rec_ptr(R, dir == 0 ? "y" : "dy", y);
    fake_rec_int(R, "algo", algo);
    fake_rec_ptr(R, "workSpace", ws);
    fake_rec_uint(R, "workSpaceSizeInBytes", ws_size);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (st) return fcd_done(R, st);
    if (!alpha || !beta) FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL alpha or beta", FN);
    int det;
    float t;
    size_t need;
    if (algo_info(dir, algo, &p, &need, &det, &t) != CUDNN_STATUS_SUCCESS)
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: algorithm %d does not apply to this problem", FN, algo);
    if (ws_size < need) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: workspace %zu bytes < %zu for algorithm %d", FN, ws_size, need, algo);
    if (need && !ws) FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL workspace of %zu bytes", FN, ws_size);
    conv_job *j = (conv_job *)malloc(sizeof *j);
    fill_job(j, dir, &p, x, w, y, a, b);
    int mem_ok = fcd_check_mem(FN, dir == 1 ? "dx" : "x", x, &j->x)
                 & fcd_check_mem(FN, dir == 2 ? "dw" : "w", w, &j->w)
                 & fcd_check_mem(FN, dir == 0 ? "y" : "dy", y, &j->y);
    if (ws_size && ws) mem_ok &= fake_mem_check(ws, ws_size, FN, "workSpace");
    if (!mem_ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory (see violations)", FN); }
    fake_stream_enqueue(s, LABEL[dir], run_conv, j, free);
    if (fused_sync) fake_stream_synchronize(s);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
        const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
        const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo, void *workSpace,
        size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t yDesc, void *y) {
    BEGIN("cudnnConvolutionForward");
    return run_call(R, FN, 0, handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                    workSpaceSizeInBytes, beta, yDesc, y, 0);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
        const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
        const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
        size_t workSpaceSizeInBytes, const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx) {
    BEGIN("cudnnConvolutionBackwardData");
    return run_call(R, FN, 1, handle, alpha, dxDesc, dx, wDesc, w, convDesc, algo, workSpace,
                    workSpaceSizeInBytes, beta, dyDesc, dy, 0);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
        const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy,
        const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
        size_t workSpaceSizeInBytes, const void *beta, const cudnnFilterDescriptor_t dwDesc, void *dw) {
    BEGIN("cudnnConvolutionBackwardFilter");
    return run_call(R, FN, 2, handle, alpha, xDesc, x, dwDesc, dw, convDesc, algo, workSpace,
                    workSpaceSizeInBytes, beta, dyDesc, dy, 0);
}

/* ------------------------------------------------------------------ Find (benchmarking) */
static int cmp_time(const void *a, const void *b) {
    float x = ((const perf_t *)a)->time, y = ((const perf_t *)b)->time;
    if (x < 0) return 1;
    if (y < 0) return -1;
    return x < y ? -1 : x > y;
}

static cudnnStatus_t find_ex(fake_rec *R, const char *FN, int dir, cudnnHandle_t handle,
                             cudnnTensorDescriptor_t xd, const void *x, cudnnFilterDescriptor_t wd,
                             const void *w, cudnnConvolutionDescriptor_t cd,
                             cudnnTensorDescriptor_t yd, const void *y, int requested, int *returned,
                             perf_t *perf, void *ws, size_t ws_size) {
    problem p;
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    cudnnStatus_t st = make_problem(FN, xd, wd, cd, yd, &p);
    if (st == CUDNN_STATUS_SUCCESS) rec_problem(R, dir, &p);
    fake_rec_int(R, "requestedAlgoCount", requested);
    fake_rec_ptr(R, "workSpace", ws);
    fake_rec_uint(R, "workSpaceSizeInBytes", ws_size);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (st) return fcd_done(R, st);
    if (requested <= 0 || !returned || !perf) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: requestedAlgoCount %d", FN, requested);
    conv_job probe;
    fill_job(&probe, dir, &p, x, w, y, 1.0, 0.0);
    int mem_ok = fcd_check_mem(FN, "a", x, &probe.x) & fcd_check_mem(FN, "b", w, &probe.w)
                 & fcd_check_mem(FN, "c", y, &probe.y);
    if (ws_size) mem_ok &= fake_mem_check(ws, ws_size, FN, "workSpace");
    if (!mem_ok) FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN);
    perf_t all[16];
    int n = 0;
    for (int i = 0; i < N_ALGOS[dir]; i++) {
        perf_t e;
        memset(&e, 0, sizeof e);
        int det;
        size_t need;
        float t;
        e.algo = (cudnnConvolutionFwdAlgo_t)HEUR[dir][i];
        e.status = algo_info(dir, HEUR[dir][i], &p, &need, &det, &t);
        if (e.status == CUDNN_STATUS_SUCCESS && need > ws_size) {
            e.status = CUDNN_STATUS_NOT_SUPPORTED;     /* does not fit: not run */
            t = -1.0f;
        }
        e.time = t;
        e.memory = need;
        e.determinism = (cudnnDeterminism_t)det;
        e.mathType = p.c.math;
        all[n++] = e;
    }
    qsort(all, (size_t)n, sizeof all[0], cmp_time);
    conv_job *j = (conv_job *)malloc(sizeof *j);
    *j = probe;                             /* one run computes every algorithm's result */
    fake_stream_enqueue(s, "cudnnFindConvolution", run_conv, j, free);
    fake_stream_synchronize(s);             /* Find blocks until the timings are in */
    *returned = n < requested ? n : requested;
    memcpy(perf, all, (size_t)*returned * sizeof *perf);
    rec_perf(R, perf, *returned);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
        const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, void *y,
        const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults,
        void *workSpace, size_t workSpaceSizeInBytes) {
    BEGIN("cudnnFindConvolutionForwardAlgorithmEx");
    return find_ex(R, FN, 0, handle, xDesc, x, wDesc, w, convDesc, yDesc, y, requestedAlgoCount,
                   returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
        const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx,
        const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults,
        void *workSpace, size_t workSpaceSizeInBytes) {
    BEGIN("cudnnFindConvolutionBackwardDataAlgorithmEx");
    return find_ex(R, FN, 1, handle, dxDesc, dx, wDesc, w, convDesc, dyDesc, dy, requestedAlgoCount,
                   returnedAlgoCount, (perf_t *)(void *)perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
        const void *x, const cudnnTensorDescriptor_t dyDesc, const void *y,
        const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc, void *dw,
        const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults,
        void *workSpace, size_t workSpaceSizeInBytes) {
    BEGIN("cudnnFindConvolutionBackwardFilterAlgorithmEx");
    return find_ex(R, FN, 2, handle, xDesc, x, dwDesc, dw, convDesc, dyDesc, y, requestedAlgoCount,
                   returnedAlgoCount, (perf_t *)(void *)perfResults, workSpace, workSpaceSizeInBytes);
}

/* ------------------------------------------------------------------ fused */
/* cuDNN API reference, cudnnConvolutionBiasActivationForward: the activation must be
 * RELU or IDENTITY, and IDENTITY only with IMPLICIT_PRECOMP_GEMM; otherwise
 * CUDNN_STATUS_NOT_SUPPORTED. bias: dims 1 x K x 1 x 1. */
cudnnStatus_t cudnnConvolutionBiasActivationForward(cudnnHandle_t handle, const void *alpha1,
        const cudnnTensorDescriptor_t xDesc, const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
        const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo, void *workSpace,
        size_t workSpaceSizeInBytes, const void *alpha2, const cudnnTensorDescriptor_t zDesc, const void *z,
        const cudnnTensorDescriptor_t biasDesc, const void *bias, const cudnnActivationDescriptor_t activationDesc,
        const cudnnTensorDescriptor_t yDesc, void *y) {
    BEGIN("cudnnConvolutionBiasActivationForward");
    const char *FNn = FN;
    problem p;
    struct cudnnContext *h = fcd_handle(handle);
    fake_rec_int(R, "handle", h ? h->id : 0);
    cudnnStatus_t st = make_problem(FNn, xDesc, wDesc, convDesc, yDesc, &p);
    if (st == CUDNN_STATUS_SUCCESS) rec_problem(R, 0, &p);
    struct cudnnTensorStruct *zt = fcd_tensor(zDesc), *bt = fcd_tensor(biasDesc);
    struct cudnnActivationStruct *act = fcd_act(activationDesc);
    fcd_rec_tensor(R, "zDesc", zt);
    fcd_rec_tensor(R, "biasDesc", bt);
    fcd_rec_act(R, "activationDesc", act);
    double a1 = st ? 0 : fcd_scale(alpha1, p.x.dt), a2 = st ? 0 : fcd_scale(alpha2, p.x.dt);
    fake_rec_double(R, "alpha1", a1);
    fake_rec_double(R, "alpha2", a2);
    fake_rec_ptr(R, "x", x);
    fake_rec_ptr(R, "w", w);
    fake_rec_ptr(R, "z", z);
    fake_rec_ptr(R, "bias", bias);
    fake_rec_ptr(R, "y", y);
    fake_rec_int(R, "algo", algo);
    fake_rec_ptr(R, "workSpace", workSpace);
    fake_rec_uint(R, "workSpaceSizeInBytes", workSpaceSizeInBytes);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !zt || !bt || !act) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (st) return fcd_done(R, st);
    if (act->mode != CUDNN_ACTIVATION_RELU && act->mode != CUDNN_ACTIVATION_IDENTITY)
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: activation mode %d (RELU or IDENTITY only)", FN, act->mode);
    if (act->mode == CUDNN_ACTIVATION_IDENTITY && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: IDENTITY needs IMPLICIT_PRECOMP_GEMM, got algorithm %d", FN, algo);
    if (zt->nd != p.y.nd || memcmp(zt->dims, p.y.dims, sizeof(int) * (size_t)p.y.nd) != 0 || zt->dt != p.y.dt)
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: z descriptor must match y", FN);
    if (bt->nd != p.y.nd || bt->dims[1] != p.y.dims[1] || bt->dims[0] != 1)
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: bias dims must be 1 x K x 1 x 1", FN);
    for (int i = 2; i < bt->nd; i++)
        if (bt->dims[i] != 1) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: bias dims must be 1 x K x 1 x 1", FN);
    int det;
    float t;
    size_t need;
    if (algo_info(0, algo, &p, &need, &det, &t) != CUDNN_STATUS_SUCCESS)
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: algorithm %d does not apply", FN, algo);
    if (workSpaceSizeInBytes < need) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: workspace %zu < %zu", FN, workSpaceSizeInBytes, need);
    conv_job *j = (conv_job *)malloc(sizeof *j);
    fill_job(j, 0, &p, x, w, y, a1, 0.0);
    j->fused = 1;
    j->alpha2 = a2;
    fcd_tensor_ref(zt, z, &j->z);
    fcd_tensor_ref(bt, bias, &j->bias);
    fcd_act_ref(act, &j->act);
    int mem_ok = fcd_check_mem(FN, "x", x, &j->x) & fcd_check_mem(FN, "w", w, &j->w)
                 & fcd_check_mem(FN, "y", y, &j->y) & fcd_check_mem(FN, "bias", bias, &j->bias);
    if (a2 != 0) mem_ok &= fcd_check_mem(FN, "z", z, &j->z);
    if (workSpaceSizeInBytes && workSpace) mem_ok &= fake_mem_check(workSpace, workSpaceSizeInBytes, FN, "workSpace");
    if (!mem_ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN); }
    fake_stream_enqueue(s, "cudnnConvolutionBiasActivationForward", run_conv, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}
