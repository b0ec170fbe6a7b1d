/* libfakecudnn.so: batch normalization (inference, training, training Ex, backward, backward Ex),
 * activation forward/backward and OpTensor.
 *
 * Rules kept from the cuDNN API reference (cudnn_ops.h, cuDNN 9):
 *  - bnScaleBiasMeanVarDesc: 1 x C x 1 x 1 (SPATIAL, SPATIAL_PERSISTENT), FLOAT for
 *    FLOAT/HALF/BFLOAT16 data, DOUBLE for DOUBLE data; x and y of the same dims;
 *    epsilon >= CUDNN_BN_MIN_EPSILON; PER_ACTIVATION is not in the fake (NOT_SUPPORTED).
 *  - running statistics: running = factor * batch + (1 - factor) * running, the variance
 *    unbiased; NULL running or saved pointers: not computed.
 *  - ForwardTrainingEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION: NHWC (channel stride 1)
 *    and SPATIAL_PERSISTENT only, activation RELU; the reserve space holds the ReLU mask.
 *  - activation: CLIPPED_RELU's coef is the ceiling; NOT_PROPAGATE_NAN maps NaN to 0.
 *  - OpTensor: each dim of B equals C's or is 1; A's dims equal C's.
 */
#define _GNU_SOURCE
#include "fake_cudnn.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int kind;          /* 0 inference, 1 training, 2 backward, 3 act fwd, 4 act bwd, 5 op */
    ref_tensor t[10];
    int present[10];
    double eps, factor, a[4];
    ref_act act;
    int has_act;
    ref_op op;
} ops_job;

enum { X, Y, SCALE, BIAS, MEAN, VAR, RMEAN, RVAR, SMEAN, SINV };   /* inference/training */
enum { BX, BDY, BDX, BSCALE, BDSCALE, BDBIAS, BSMEAN, BSINV };    /* backward */

static ref_tensor *opt(ops_job *j, int i) { return j->present[i] ? &j->t[i] : NULL; }

static void run_ops(void *arg) {
    ops_job *j = (ops_job *)arg;
    ref_tensor *t = j->t;
    for (int i = 0; i < 10; i++)
        if (j->present[i] || (j->kind >= 3 && t[i].data)) fcd_exec_check("batchnorm/activation/op", "operand", &t[i]);
    switch (j->kind) {
        case 0:
            ref_bn_inference(&t[X], &t[Y], &t[SCALE], &t[BIAS], &t[MEAN], &t[VAR], j->eps,
                             j->has_act ? &j->act : NULL, j->a[0], j->a[1]);
            break;
        case 1:
            ref_bn_training(&t[X], &t[Y], &t[SCALE], &t[BIAS], j->factor, opt(j, RMEAN), opt(j, RVAR),
                            j->eps, opt(j, SMEAN), opt(j, SINV), j->has_act ? &j->act : NULL,
                            j->a[0], j->a[1]);
            break;
        case 2:
            ref_bn_backward(&t[BX], &t[BDY], &t[BDX], &t[BSCALE], &t[BDSCALE], &t[BDBIAS], j->eps,
                            opt(j, BSMEAN), opt(j, BSINV), j->a[0], j->a[1], j->a[2], j->a[3]);
            break;
        case 3: ref_activation_fwd(&j->act, &t[0], &t[1], j->a[0], j->a[1]); break;
        case 4: ref_activation_bwd(&j->act, &t[0], &t[1], &t[2], &t[3], j->a[0], j->a[1]); break;
        case 5: ref_op_tensor(j->op, &t[0], j->a[0], &t[1], j->a[1], &t[2], j->a[2]); break;
    }
}

/* a per-channel tensor: the bn descriptor at data (NULL allowed when optional) */
static int put(ops_job *j, int i, const struct cudnnTensorStruct *d, const void *data,
               const char *fn, const char *what) {
    if (!data) return 1;
    fcd_tensor_ref(d, data, &j->t[i]);
    j->present[i] = 1;
    return fcd_check_mem(fn, what, data, &j->t[i]);
}

static cudnnStatus_t check_bn(const char *fn, cudnnBatchNormMode_t mode,
                              const struct cudnnTensorStruct *x, const struct cudnnTensorStruct *y,
                              const struct cudnnTensorStruct *bn, double eps) {
    if (mode == CUDNN_BATCHNORM_PER_ACTIVATION)
        return fcd_error(CUDNN_STATUS_NOT_SUPPORTED, "%s: PER_ACTIVATION is not in the fake", fn);
    if (mode != CUDNN_BATCHNORM_SPATIAL && mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
        return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: mode %d", fn, mode);
    if (x->nd != y->nd || memcmp(x->dims, y->dims, sizeof(int) * (size_t)x->nd) != 0)
        return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: x and y dims differ", fn);
    if (x->dt != y->dt) return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: x and y types differ", fn);
    cudnnDataType_t want = x->dt == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    if (bn->dt != want) return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: bn descriptor type %d, want %d", fn, bn->dt, want);
    if (bn->nd != x->nd || bn->dims[0] != 1 || bn->dims[1] != x->dims[1])
        return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: bn descriptor must be 1 x C x 1 x 1", fn);
    for (int i = 2; i < bn->nd; i++)
        if (bn->dims[i] != 1) return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: bn descriptor must be 1 x C x 1 x 1", fn);
    if (eps < CUDNN_BN_MIN_EPSILON) return fcd_error(CUDNN_STATUS_BAD_PARAM, "%s: epsilon %g", fn, eps);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
        const void *alpha, const void *beta, const cudnnTensorDescriptor_t xDesc, const void *x,
        const cudnnTensorDescriptor_t yDesc, void *y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
        const void *bnScale, const void *bnBias, const void *estimatedMean, const void *estimatedVariance,
        double epsilon) {
    BEGIN("cudnnBatchNormalizationForwardInference");
    struct cudnnContext *h = fcd_handle(handle);
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc), *yd = fcd_tensor(yDesc), *bd = fcd_tensor(bnScaleBiasMeanVarDesc);
    fake_rec_int(R, "handle", h ? h->id : 0);
    fake_rec_int(R, "mode", mode);
    fcd_rec_tensor(R, "xDesc", xd);
    fcd_rec_tensor(R, "yDesc", yd);
    fcd_rec_tensor(R, "bnScaleBiasMeanVarDesc", bd);
    double a = xd ? fcd_scale(alpha, xd->dt) : 0, b = xd ? fcd_scale(beta, xd->dt) : 0;
    fake_rec_double(R, "alpha", a);
    fake_rec_double(R, "beta", b);
    fake_rec_ptr(R, "x", x); fake_rec_ptr(R, "y", y); fake_rec_ptr(R, "bnScale", bnScale);
    fake_rec_ptr(R, "bnBias", bnBias); fake_rec_ptr(R, "estimatedMean", estimatedMean);
    fake_rec_ptr(R, "estimatedVariance", estimatedVariance);
    fake_rec_double(R, "epsilon", epsilon);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !xd || !yd || !bd) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    cudnnStatus_t st = check_bn(FN, mode, xd, yd, bd, epsilon);
    if (st) return fcd_done(R, st);
    if (!bnScale || !bnBias || !estimatedMean || !estimatedVariance || !x || !y)
        FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL operand", FN);
    ops_job *j = (ops_job *)calloc(1, sizeof *j);
    j->kind = 0;
    j->eps = epsilon;
    j->a[0] = a;
    j->a[1] = b;
    int ok = put(j, X, xd, x, FN, "x") & put(j, Y, yd, y, FN, "y") & put(j, SCALE, bd, bnScale, FN, "bnScale")
             & put(j, BIAS, bd, bnBias, FN, "bnBias") & put(j, MEAN, bd, estimatedMean, FN, "estimatedMean")
             & put(j, VAR, bd, estimatedVariance, FN, "estimatedVariance");
    if (!ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN); }
    fake_stream_enqueue(s, FN, run_ops, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

static cudnnStatus_t training(fake_rec *R, const char *FN, cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                              int bn_ops, const void *alpha, const void *beta,
                              cudnnTensorDescriptor_t xDesc, const void *x, cudnnTensorDescriptor_t yDesc, void *y,
                              cudnnTensorDescriptor_t bnDesc, const void *scale, const void *bias, double factor,
                              void *rmean, void *rvar, double eps, void *smean, void *sinv,
                              cudnnActivationDescriptor_t actDesc, void *ws, size_t ws_size,
                              void *reserve, size_t reserve_size, int ex) {
    struct cudnnContext *h = fcd_handle(handle);
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc), *yd = fcd_tensor(yDesc), *bd = fcd_tensor(bnDesc);
    struct cudnnActivationStruct *act = actDesc ? fcd_act(actDesc) : NULL;
    fake_rec_int(R, "handle", h ? h->id : 0);
    fake_rec_int(R, "mode", mode);
    if (ex) fake_rec_int(R, "bnOps", bn_ops);
    fcd_rec_tensor(R, "xDesc", xd);
    fcd_rec_tensor(R, "yDesc", yd);
    fcd_rec_tensor(R, "bnScaleBiasMeanVarDesc", bd);
    if (ex) fcd_rec_act(R, "activationDesc", act);
    double a = xd ? fcd_scale(alpha, xd->dt) : 0, b = xd ? fcd_scale(beta, xd->dt) : 0;
    fake_rec_double(R, "alpha", a);
    fake_rec_double(R, "beta", b);
    fake_rec_ptr(R, "x", x); fake_rec_ptr(R, "y", y);
    fake_rec_ptr(R, "bnScale", scale); fake_rec_ptr(R, "bnBias", bias);
    fake_rec_double(R, "exponentialAverageFactor", factor);
    fake_rec_ptr(R, "resultRunningMean", rmean); fake_rec_ptr(R, "resultRunningVariance", rvar);
    fake_rec_double(R, "epsilon", eps);
    fake_rec_ptr(R, "resultSaveMean", smean); fake_rec_ptr(R, "resultSaveInvVariance", sinv);
    if (ex) {
        fake_rec_ptr(R, "workspace", ws); fake_rec_uint(R, "workSpaceSizeInBytes", ws_size);
        fake_rec_ptr(R, "reserveSpace", reserve); fake_rec_uint(R, "reserveSpaceSizeInBytes", reserve_size);
    }
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !xd || !yd || !bd || (actDesc && !act)) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    cudnnStatus_t st = check_bn(FN, mode, xd, yd, bd, eps);
    if (st) return fcd_done(R, st);
    if (!scale || !bias || !x || !y) FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL operand", FN);
    if ((rmean == NULL) != (rvar == NULL)) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: one running statistic is NULL", FN);
    if ((smean == NULL) != (sinv == NULL)) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: one saved statistic is NULL", FN);
    ops_job *j = (ops_job *)calloc(1, sizeof *j);
    j->kind = 1;
    j->eps = eps;
    j->factor = factor;
    j->a[0] = a;
    j->a[1] = b;
    if (ex && bn_ops == CUDNN_BATCHNORM_OPS_BN_ACTIVATION) {
        if (mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT || xd->strides[1] != 1 || !act ||
            act->mode != CUDNN_ACTIVATION_RELU) {
            free(j);
            FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: BN_ACTIVATION needs NHWC, SPATIAL_PERSISTENT and RELU", FN);
        }
        fcd_act_ref(act, &j->act);
        j->has_act = 1;
    } else if (ex && bn_ops != CUDNN_BATCHNORM_OPS_BN) {
        free(j);
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: bnOps %d", FN, bn_ops);
    }
    int ok = put(j, X, xd, x, FN, "x") & put(j, Y, yd, y, FN, "y") & put(j, SCALE, bd, scale, FN, "bnScale")
             & put(j, BIAS, bd, bias, FN, "bnBias") & put(j, RMEAN, bd, rmean, FN, "resultRunningMean")
             & put(j, RVAR, bd, rvar, FN, "resultRunningVariance") & put(j, SMEAN, bd, smean, FN, "resultSaveMean")
             & put(j, SINV, bd, sinv, FN, "resultSaveInvVariance");
    if (ex) {
        size_t need_ws = (size_t)xd->dims[1] * 8 + 64;
        size_t need_res = j->has_act ? (size_t)(ref_count(&j->t[X]) + 7) / 8 : 0;
        if (ws_size < need_ws || reserve_size < need_res) {
            free(j);
            FAIL(CUDNN_STATUS_BAD_PARAM, "%s: workspace %zu < %zu or reserve %zu < %zu", FN, ws_size, need_ws,
                 reserve_size, need_res);
        }
        if (ws_size) ok &= fake_mem_check(ws, ws_size, FN, "workspace");
        if (reserve_size) ok &= fake_mem_check(reserve, reserve_size, FN, "reserveSpace");
    }
    if (!ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN); }
    fake_stream_enqueue(s, FN, run_ops, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
        const void *alpha, const void *beta, const cudnnTensorDescriptor_t xDesc, const void *x,
        const cudnnTensorDescriptor_t yDesc, void *y, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
        const void *bnScale, const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
        void *resultRunningVariance, double epsilon, void *resultSaveMean, void *resultSaveInvVariance) {
    BEGIN("cudnnBatchNormalizationForwardTraining");
    return training(R, FN, handle, mode, CUDNN_BATCHNORM_OPS_BN, alpha, beta, xDesc, x, yDesc, y,
                    bnScaleBiasMeanVarDesc, bnScale, bnBias, exponentialAverageFactor, resultRunningMean,
                    resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance, NULL, NULL, 0,
                    NULL, 0, 0);
}

cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
        cudnnBatchNormOps_t bnOps, const void *alpha, const void *beta, const cudnnTensorDescriptor_t xDesc,
        const void *xData, const cudnnTensorDescriptor_t zDesc, const void *zData,
        const cudnnTensorDescriptor_t yDesc, void *yData, const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
        const void *bnScale, const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
        void *resultRunningVariance, double epsilon, void *resultSaveMean, void *resultSaveInvVariance,
        cudnnActivationDescriptor_t activationDesc, void *workspace, size_t workSpaceSizeInBytes,
        void *reserveSpace, size_t reserveSpaceSizeInBytes) {
    BEGIN("cudnnBatchNormalizationForwardTrainingEx");
    if (zDesc || zData) {
        fake_rec_ptr(R, "z", zData);
        FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: the residual (z) is not in the fake", FN);
    }
    return training(R, FN, handle, mode, (int)bnOps, alpha, beta, xDesc, xData, yDesc, yData,
                    bnScaleBiasMeanVarDesc, bnScale, bnBias, exponentialAverageFactor, resultRunningMean,
                    resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance, activationDesc,
                    workspace, workSpaceSizeInBytes, reserveSpace, reserveSpaceSizeInBytes, 1);
}

cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps, const cudnnTensorDescriptor_t xDesc,
        const cudnnTensorDescriptor_t zDesc, const cudnnTensorDescriptor_t yDesc,
        const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const cudnnActivationDescriptor_t activationDesc,
        size_t *sizeInBytes) {
    BEGIN("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc);
    fake_rec_int(R, "mode", mode);
    fake_rec_int(R, "bnOps", bnOps);
    fcd_rec_tensor(R, "xDesc", xd);
    INJECT();
    if (!fcd_handle(handle) || !xd || !sizeInBytes) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    *sizeInBytes = (size_t)xd->dims[1] * 8 + 64;
    fake_rec_uint(R, "size", *sizeInBytes);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle,
        cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps, const cudnnActivationDescriptor_t activationDesc,
        const cudnnTensorDescriptor_t xDesc, size_t *sizeInBytes) {
    BEGIN("cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc);
    fake_rec_int(R, "mode", mode);
    fake_rec_int(R, "bnOps", bnOps);
    fcd_rec_tensor(R, "xDesc", xd);
    INJECT();
    if (!fcd_handle(handle) || !xd || !sizeInBytes) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    long long n = 1;
    for (int i = 0; i < xd->nd; i++) n *= xd->dims[i];
    *sizeInBytes = bnOps == CUDNN_BATCHNORM_OPS_BN ? 0 : (size_t)(n + 7) / 8;
    fake_rec_uint(R, "size", *sizeInBytes);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

static cudnnStatus_t backward(fake_rec *R, const char *FN, cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                              int bn_ops, const void *alphaDataDiff, const void *betaDataDiff,
                              const void *alphaParamDiff, const void *betaParamDiff,
                              cudnnTensorDescriptor_t xDesc, const void *x, cudnnTensorDescriptor_t yDesc,
                              const void *y, cudnnTensorDescriptor_t dyDesc, const void *dy,
                              cudnnTensorDescriptor_t dzDesc, void *dz, cudnnTensorDescriptor_t dxDesc,
                              void *dx, cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale,
                              const void *bnBias, void *dBnScaleResult, void *dBnBiasResult, double epsilon,
                              const void *savedMean, const void *savedInvVariance,
                              cudnnActivationDescriptor_t actDesc, void *ws, size_t ws_size, void *reserve,
                              size_t reserve_size, int ex) {
    struct cudnnContext *h = fcd_handle(handle);
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc), *dyd = fcd_tensor(dyDesc), *dxd = fcd_tensor(dxDesc),
                             *bd = fcd_tensor(dBnScaleBiasDesc);
    fake_rec_int(R, "handle", h ? h->id : 0);
    fake_rec_int(R, "mode", mode);
    if (ex) fake_rec_int(R, "bnOps", bn_ops);
    fcd_rec_tensor(R, "xDesc", xd);
    fcd_rec_tensor(R, "dyDesc", dyd);
    fcd_rec_tensor(R, "dxDesc", dxd);
    fcd_rec_tensor(R, "dBnScaleBiasDesc", bd);
    cudnnDataType_t dt = xd ? xd->dt : CUDNN_DATA_FLOAT;
    double ad = fcd_scale(alphaDataDiff, dt), bdd = fcd_scale(betaDataDiff, dt);
    double ap = fcd_scale(alphaParamDiff, dt), bp = fcd_scale(betaParamDiff, dt);
    fake_rec_double(R, "alphaDataDiff", ad); fake_rec_double(R, "betaDataDiff", bdd);
    fake_rec_double(R, "alphaParamDiff", ap); fake_rec_double(R, "betaParamDiff", bp);
    fake_rec_ptr(R, "x", x); fake_rec_ptr(R, "dy", dy); fake_rec_ptr(R, "dx", dx);
    fake_rec_ptr(R, "bnScale", bnScale); fake_rec_ptr(R, "dBnScaleResult", dBnScaleResult);
    fake_rec_ptr(R, "dBnBiasResult", dBnBiasResult);
    fake_rec_double(R, "epsilon", epsilon);
    fake_rec_ptr(R, "savedMean", savedMean); fake_rec_ptr(R, "savedInvVariance", savedInvVariance);
    if (ex) {
        fake_rec_ptr(R, "y", y); fake_rec_ptr(R, "dz", dz); fake_rec_ptr(R, "bnBias", bnBias);
        fake_rec_ptr(R, "activationDesc", actDesc);
        fake_rec_ptr(R, "workspace", ws); fake_rec_uint(R, "workSpaceSizeInBytes", ws_size);
        fake_rec_ptr(R, "reserveSpace", reserve); fake_rec_uint(R, "reserveSpaceSizeInBytes", reserve_size);
    }
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !xd || !dyd || !dxd || !bd) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    cudnnStatus_t st = check_bn(FN, mode, xd, dxd, bd, epsilon);
    if (!st) st = check_bn(FN, mode, xd, dyd, bd, epsilon);
    if (st) return fcd_done(R, st);
    if ((savedMean == NULL) != (savedInvVariance == NULL))
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: one saved statistic is NULL", FN);
    if (!alphaDataDiff || !betaDataDiff || !alphaParamDiff || !betaParamDiff)
        FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL scaling factor", FN);
    if (ex) {
        /* only bnOps BN is in the fake: BN_ACTIVATION / BN_ADD_ACTIVATION need the forward y
         * and the TrainingEx reserve space */
        if (bn_ops != CUDNN_BATCHNORM_OPS_BN || actDesc || yDesc || y || dzDesc || dz)
            FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: bnOps %d (only BN, without y, dz or activation, is in the fake)",
                 FN, bn_ops);
        size_t need_ws = (size_t)xd->dims[1] * 8 + 64;
        if (ws_size < need_ws) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: workspace %zu < %zu", FN, ws_size, need_ws);
        if (ws_size && !fake_mem_check(ws, ws_size, FN, "workSpace"))
            FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: the workspace is not device memory", FN);
        if (reserve_size && !fake_mem_check(reserve, reserve_size, FN, "reserveSpace"))
            FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: the reserve space is not device memory", FN);
    }
    ops_job *j = (ops_job *)calloc(1, sizeof *j);
    j->kind = 2;
    j->eps = epsilon;
    j->a[0] = ad; j->a[1] = bdd; j->a[2] = ap; j->a[3] = bp;
    int ok = put(j, BX, xd, x, FN, "x") & put(j, BDY, dyd, dy, FN, "dy") & put(j, BDX, dxd, dx, FN, "dx")
             & put(j, BSCALE, bd, bnScale, FN, "bnScale") & put(j, BDSCALE, bd, dBnScaleResult, FN, "dBnScaleResult")
             & put(j, BDBIAS, bd, dBnBiasResult, FN, "dBnBiasResult")
             & put(j, BSMEAN, bd, savedMean, FN, "savedMean") & put(j, BSINV, bd, savedInvVariance, FN, "savedInvVariance");
    if (!j->present[BX] || !j->present[BDY] || !j->present[BDX] || !j->present[BSCALE] ||
        !j->present[BDSCALE] || !j->present[BDBIAS]) {
        free(j);
        FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: NULL operand", FN);
    }
    if (!ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN); }
    fake_stream_enqueue(s, FN, run_ops, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnBatchNormalizationBackward(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
        const void *alphaDataDiff, const void *betaDataDiff, const void *alphaParamDiff,
        const void *betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void *x,
        const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnTensorDescriptor_t dxDesc, void *dx,
        const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale, void *dBnScaleResult,
        void *dBnBiasResult, double epsilon, const void *savedMean, const void *savedInvVariance) {
    BEGIN("cudnnBatchNormalizationBackward");
    return backward(R, FN, handle, mode, CUDNN_BATCHNORM_OPS_BN, alphaDataDiff, betaDataDiff, alphaParamDiff,
                    betaParamDiff, xDesc, x, NULL, NULL, dyDesc, dy, NULL, NULL, dxDesc, dx, dBnScaleBiasDesc,
                    bnScale, NULL, dBnScaleResult, dBnBiasResult, epsilon, savedMean, savedInvVariance, NULL,
                    NULL, 0, NULL, 0, 0);
}

cudnnStatus_t cudnnBatchNormalizationBackwardEx(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
        cudnnBatchNormOps_t bnOps, const void *alphaDataDiff, const void *betaDataDiff,
        const void *alphaParamDiff, const void *betaParamDiff, const cudnnTensorDescriptor_t xDesc,
        const void *xData, const cudnnTensorDescriptor_t yDesc, const void *yData,
        const cudnnTensorDescriptor_t dyDesc, const void *dyData, const cudnnTensorDescriptor_t dzDesc,
        void *dzData, const cudnnTensorDescriptor_t dxDesc, void *dxData,
        const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScaleData, const void *bnBiasData,
        void *dBnScaleData, void *dBnBiasData, double epsilon, const void *savedMean,
        const void *savedInvVariance, const cudnnActivationDescriptor_t activationDesc, void *workSpace,
        size_t workSpaceSizeInBytes, void *reserveSpace, size_t reserveSpaceSizeInBytes) {
    BEGIN("cudnnBatchNormalizationBackwardEx");
    return backward(R, FN, handle, mode, (int)bnOps, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
                    xDesc, xData, yDesc, yData, dyDesc, dyData, dzDesc, dzData, dxDesc, dxData,
                    dBnScaleBiasDesc, bnScaleData, bnBiasData, dBnScaleData, dBnBiasData, epsilon, savedMean,
                    savedInvVariance, activationDesc, workSpace, workSpaceSizeInBytes, reserveSpace,
                    reserveSpaceSizeInBytes, 1);
}

cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
        cudnnBatchNormOps_t bnOps, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t yDesc,
        const cudnnTensorDescriptor_t dyDesc, const cudnnTensorDescriptor_t dzDesc,
        const cudnnTensorDescriptor_t dxDesc, const cudnnTensorDescriptor_t dBnScaleBiasDesc,
        const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes) {
    BEGIN("cudnnGetBatchNormalizationBackwardExWorkspaceSize");
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc);
    fake_rec_int(R, "mode", mode);
    fake_rec_int(R, "bnOps", bnOps);
    fcd_rec_tensor(R, "xDesc", xd);
    (void)yDesc; (void)dyDesc; (void)dzDesc; (void)dxDesc; (void)dBnScaleBiasDesc; (void)activationDesc;
    INJECT();
    if (!fcd_handle(handle) || !xd || !sizeInBytes) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    *sizeInBytes = (size_t)xd->dims[1] * 8 + 64;
    fake_rec_uint(R, "size", *sizeInBytes);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

/* ------------------------------------------------------------------ activation, op tensor */
static int same_dims(const struct cudnnTensorStruct *a, const struct cudnnTensorStruct *b) {
    return a->nd == b->nd && memcmp(a->dims, b->dims, sizeof(int) * (size_t)a->nd) == 0 && a->dt == b->dt;
}

cudnnStatus_t cudnnActivationForward(cudnnHandle_t handle, cudnnActivationDescriptor_t activationDesc,
        const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
        const cudnnTensorDescriptor_t yDesc, void *y) {
    BEGIN("cudnnActivationForward");
    struct cudnnContext *h = fcd_handle(handle);
    struct cudnnActivationStruct *act = fcd_act(activationDesc);
    struct cudnnTensorStruct *xd = fcd_tensor(xDesc), *yd = fcd_tensor(yDesc);
    fake_rec_int(R, "handle", h ? h->id : 0);
    fcd_rec_act(R, "activationDesc", act);
    fcd_rec_tensor(R, "xDesc", xd);
    fcd_rec_tensor(R, "yDesc", yd);
    double a = xd ? fcd_scale(alpha, xd->dt) : 0, b = xd ? fcd_scale(beta, xd->dt) : 0;
    fake_rec_double(R, "alpha", a);
    fake_rec_double(R, "beta", b);
    fake_rec_ptr(R, "x", x);
    fake_rec_ptr(R, "y", y);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !act || !xd || !yd) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (!same_dims(xd, yd)) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: x and y differ in dims or type", FN);
    if (x == y && memcmp(xd->strides, yd->strides, sizeof(int) * (size_t)xd->nd) != 0)
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: in place with different strides", FN);
    if (act->mode == CUDNN_ACTIVATION_IDENTITY)
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: IDENTITY works only in cudnnConvolutionBiasActivationForward", FN);
    ops_job *j = (ops_job *)calloc(1, sizeof *j);
    j->kind = 3;
    fcd_act_ref(act, &j->act);
    j->a[0] = a;
    j->a[1] = b;
    fcd_tensor_ref(xd, x, &j->t[0]);
    fcd_tensor_ref(yd, y, &j->t[1]);
    if (!(fcd_check_mem(FN, "x", x, &j->t[0]) & fcd_check_mem(FN, "y", y, &j->t[1]))) {
        free(j);
        FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN);
    }
    fake_stream_enqueue(s, FN, run_ops, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnActivationBackward(cudnnHandle_t handle, cudnnActivationDescriptor_t activationDesc,
        const void *alpha, const cudnnTensorDescriptor_t yDesc, const void *y,
        const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnTensorDescriptor_t xDesc, const void *x,
        const void *beta, const cudnnTensorDescriptor_t dxDesc, void *dx) {
    BEGIN("cudnnActivationBackward");
    struct cudnnContext *h = fcd_handle(handle);
    struct cudnnActivationStruct *act = fcd_act(activationDesc);
    struct cudnnTensorStruct *yd = fcd_tensor(yDesc), *dyd = fcd_tensor(dyDesc), *xd = fcd_tensor(xDesc),
                             *dxd = fcd_tensor(dxDesc);
    fake_rec_int(R, "handle", h ? h->id : 0);
    fcd_rec_act(R, "activationDesc", act);
    fcd_rec_tensor(R, "yDesc", yd);
    fcd_rec_tensor(R, "dyDesc", dyd);
    fcd_rec_tensor(R, "xDesc", xd);
    fcd_rec_tensor(R, "dxDesc", dxd);
    double a = xd ? fcd_scale(alpha, xd->dt) : 0, b = xd ? fcd_scale(beta, xd->dt) : 0;
    fake_rec_double(R, "alpha", a);
    fake_rec_double(R, "beta", b);
    fake_rec_ptr(R, "y", y); fake_rec_ptr(R, "dy", dy); fake_rec_ptr(R, "x", x); fake_rec_ptr(R, "dx", dx);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !act || !yd || !dyd || !xd || !dxd) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (!same_dims(xd, yd) || !same_dims(xd, dyd) || !same_dims(xd, dxd))
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: y, dy, x, dx differ in dims or type", FN);
    ops_job *j = (ops_job *)calloc(1, sizeof *j);
    j->kind = 4;
    fcd_act_ref(act, &j->act);
    j->a[0] = a;
    j->a[1] = b;
    fcd_tensor_ref(yd, y, &j->t[0]);
    fcd_tensor_ref(dyd, dy, &j->t[1]);
    fcd_tensor_ref(xd, x, &j->t[2]);
    fcd_tensor_ref(dxd, dx, &j->t[3]);
    int ok = fcd_check_mem(FN, "y", y, &j->t[0]) & fcd_check_mem(FN, "dy", dy, &j->t[1])
             & fcd_check_mem(FN, "x", x, &j->t[2]) & fcd_check_mem(FN, "dx", dx, &j->t[3]);
    if (!ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN); }
    fake_stream_enqueue(s, FN, run_ops, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}

cudnnStatus_t cudnnOpTensor(cudnnHandle_t handle, const cudnnOpTensorDescriptor_t opTensorDesc,
        const void *alpha1, const cudnnTensorDescriptor_t aDesc, const void *A, const void *alpha2,
        const cudnnTensorDescriptor_t bDesc, const void *B, const void *beta,
        const cudnnTensorDescriptor_t cDesc, void *C) {
    BEGIN("cudnnOpTensor");
    struct cudnnContext *h = fcd_handle(handle);
    struct cudnnOpTensorStruct *op = fcd_op(opTensorDesc);
    struct cudnnTensorStruct *ad = fcd_tensor(aDesc), *bd = fcd_tensor(bDesc), *cd = fcd_tensor(cDesc);
    fake_rec_int(R, "handle", h ? h->id : 0);
    if (op) { fake_rec_int(R, "op", op->op); fake_rec_int(R, "compute", op->compute); }
    fcd_rec_tensor(R, "aDesc", ad);
    fcd_rec_tensor(R, "bDesc", bd);
    fcd_rec_tensor(R, "cDesc", cd);
    cudnnDataType_t dt = cd ? cd->dt : CUDNN_DATA_FLOAT;
    double a1 = fcd_scale(alpha1, dt), a2 = fcd_scale(alpha2, dt), b = fcd_scale(beta, dt);
    fake_rec_double(R, "alpha1", a1);
    fake_rec_double(R, "alpha2", a2);
    fake_rec_double(R, "beta", b);
    fake_rec_ptr(R, "A", A); fake_rec_ptr(R, "B", B); fake_rec_ptr(R, "C", C);
    fake_stream *s = h ? fcd_stream(h, FN) : NULL;
    fake_rec_int(R, "stream", fake_stream_id(s));
    INJECT();
    if (!h || !s || !op || !ad || !bd || !cd) return fcd_done(R, CUDNN_STATUS_BAD_PARAM);
    if (ad->nd != cd->nd || memcmp(ad->dims, cd->dims, sizeof(int) * (size_t)cd->nd) != 0)
        FAIL(CUDNN_STATUS_BAD_PARAM, "%s: A's dims must equal C's", FN);
    if (bd->nd != cd->nd) FAIL(CUDNN_STATUS_BAD_PARAM, "%s: B's rank differs from C's", FN);
    for (int i = 0; i < cd->nd; i++)
        if (bd->dims[i] != cd->dims[i] && bd->dims[i] != 1)
            FAIL(CUDNN_STATUS_BAD_PARAM, "%s: B dim %d is %d, C's %d", FN, i, bd->dims[i], cd->dims[i]);
    ops_job *j = (ops_job *)calloc(1, sizeof *j);
    j->kind = 5;
    j->op = op->op == CUDNN_OP_TENSOR_ADD ? REF_OP_ADD : op->op == CUDNN_OP_TENSOR_MUL ? REF_OP_MUL
          : op->op == CUDNN_OP_TENSOR_MIN ? REF_OP_MIN : op->op == CUDNN_OP_TENSOR_MAX ? REF_OP_MAX
          : op->op == CUDNN_OP_TENSOR_SQRT ? REF_OP_SQRT : REF_OP_NOT;
    j->a[0] = a1; j->a[1] = a2; j->a[2] = b;
    fcd_tensor_ref(ad, A, &j->t[0]);
    fcd_tensor_ref(bd, B, &j->t[1]);
    fcd_tensor_ref(cd, C, &j->t[2]);
    int ok = fcd_check_mem(FN, "A", A, &j->t[0]) & fcd_check_mem(FN, "B", B, &j->t[1])
             & fcd_check_mem(FN, "C", C, &j->t[2]);
    if (!ok) { free(j); FAIL(CUDNN_STATUS_EXECUTION_FAILED, "%s: an operand is not device memory", FN); }
    fake_stream_enqueue(s, FN, run_ops, j, free);
    return fcd_done(R, CUDNN_STATUS_SUCCESS);
}
