// Probe (issue 11): can channels-last fp16 batchnorm at small N*H*W reach more of the copy
// bandwidth through cuDNN by describing the problem differently? Two ideas, both computing
// the same thing as the plain plan (batchnorm is independent per channel, and its
// statistics are over all of N, H, W):
//  1. split the channels into k groups, each a NORM_FORWARD / NORM_BACKWARD plan on a
//     strided channel slice (dims N x C/k x H x W, strides of the full NHWC tensor: N: H*W*C,
//     C: 1, H: W*C, W: C), the k plans run fork / join on k streams;
//  2. the same packed NHWC memory described with another (n, h, w) of product N*H*W, on the
//     graph API, on the legacy Ex calls (SPATIAL_PERSISTENT, bnOps BN) and, for training,
//     on cudnnNormalizationForwardTraining (CUDNN_NORM_PER_CHANNEL, STANDARD and PERSIST).
// Each line: device time per execution, measured as a CUDA graph of REPS executions launched
// LAUNCHES times between two events; % of an x-sized cudaMemcpyAsync's bandwidth timed the
// same way (bench_gpu.BN_PASSES x-sized passes: training 3, backward 5); the largest
// |difference| of y / dx against the plain plan's output.
//
// Build and run on the GPU machine (bench/gpu_check.sh's diag stage can run it):
//   CUDNN=$(python3 -c 'import nvidia.cudnn as m; print(m.__path__[0])')
//   nvcc -O2 -std=c++17 -Wno-deprecated-declarations -I$CUDNN/include bench/probe_bn_split.cu -L$CUDNN/lib \
//        -l:libcudnn.so.9 -Xlinker -rpath=$CUDNN/lib -o /tmp/probe_bn_split && /tmp/probe_bn_split
#include <cudnn.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

typedef cudnnBackendDescriptor_t BD;
static const int REPS = 20, LAUNCHES = 10, MAXK = 8;

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            printf("CUDA %s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static bool ok(cudnnStatus_t s, const char* what, int line) {
    if (s == CUDNN_STATUS_SUCCESS) return true;
    char buf[1024] = {0};
    cudnnGetLastErrorString(buf, sizeof buf);
    printf("  cudnn %s (line %d) -> %s | %s\n", what, line, cudnnGetErrorString(s), buf);
    return false;
}
#define OK(x) ok((x), #x, __LINE__)

static BD mk(cudnnBackendDescriptorType_t t) {
    BD d = nullptr;
    OK(cudnnBackendCreateDescriptor(t, &d));
    return d;
}
static void setd(BD d, cudnnBackendAttributeName_t a, BD v) {
    OK(cudnnBackendSetAttribute(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
}
static BD tensor(int64_t uid, cudnnDataType_t dt, const int64_t* dims, const int64_t* strides,
                 bool byval = false) {
    BD t = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = 16;
    OK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    OK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    OK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    OK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    OK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    if (byval) OK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval));
    OK(cudnnBackendFinalize(t));
    return t;
}

// The first engine config (heuristics mode A, then FALLBACK) whose plan finalizes.
static BD plan_for(cudnnHandle_t h, BD op, int64_t& ws) {
    BD g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    OK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    OK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    if (!OK(cudnnBackendFinalize(g))) return nullptr;
    for (cudnnBackendHeurMode_t m : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
        BD heur = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        setd(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, g);
        OK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m));
        if (!OK(cudnnBackendFinalize(heur))) continue;
        int64_t n = 0;
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
        std::vector<BD> cfgs(n);
        for (auto& c : cfgs) c = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfgs.data());
        for (auto c : cfgs) {
            BD p = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            OK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
            setd(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, c);
            if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS) {
                cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
                return p;
            }
        }
    }
    printf("  no plan\n");
    return nullptr;
}

static BD variant_pack(int n, const int64_t* uids, void** ptrs, void* ws) {
    BD vp = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    OK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    OK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    OK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    OK(cudnnBackendFinalize(vp));
    return vp;
}

struct Bufs {  // one shape's buffers (fp16 NHWC x / y / dy / dx, float per-channel arrays)
    __half *x, *y, *dy, *dx;
    float *scale, *bias, *mean, *ivar, *rm, *rv, *rm2, *rv2, *dscale, *dbias;
};

// One split: k plans (channel slices) on k handles / streams, launched fork / join from s0.
struct Split {
    int k = 0;
    cudnnHandle_t h[MAXK];
    cudaStream_t s[MAXK];
    cudaEvent_t fork, join[MAXK];
    BD plan[MAXK], vp[MAXK];
    void* ws[MAXK];
};

static bool build(Split& sp, bool backward, int64_t n, int64_t c, int64_t hh, int64_t w, Bufs& b, float* eps,
                  float* mom) {
    int64_t ck = c / sp.k;
    int64_t xd[4] = {n, ck, hh, w}, xs[4] = {hh * w * c, 1, w * c, c};
    int64_t cd[4] = {1, ck, 1, 1}, cs[4] = {ck, 1, ck, ck}, sd[4] = {1, 1, 1, 1};
    cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
    for (int i = 0; i < sp.k; i++) {
        BD X = tensor(1, CUDNN_DATA_HALF, xd, xs), SC = tensor(2, CUDNN_DATA_FLOAT, cd, cs);
        BD ME = tensor(4, CUDNN_DATA_FLOAT, cd, cs), IV = tensor(5, CUDNN_DATA_FLOAT, cd, cs);
        BD op;
        int nv;
        int64_t uids[12];
        void* ptrs[12];
        int64_t off = i * ck;  // channel offset of slice i
        if (!backward) {
            BD BI = tensor(3, CUDNN_DATA_FLOAT, cd, cs), EPS = tensor(6, CUDNN_DATA_FLOAT, sd, sd, true);
            BD MOM = tensor(7, CUDNN_DATA_FLOAT, sd, sd, true), RMi = tensor(8, CUDNN_DATA_FLOAT, cd, cs);
            BD RVi = tensor(9, CUDNN_DATA_FLOAT, cd, cs), RMo = tensor(10, CUDNN_DATA_FLOAT, cd, cs);
            BD RVo = tensor(11, CUDNN_DATA_FLOAT, cd, cs), Y = tensor(12, CUDNN_DATA_HALF, xd, xs);
            op = mk(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
            cudnnBackendNormFwdPhase_t ph = CUDNN_NORM_FWD_TRAINING;
            OK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode));
            OK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &ph));
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, X);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, ME);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, IV);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, SC);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, BI);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, EPS);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC, MOM);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC, RMi);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC, RVi);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC, RMo);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC, RVo);
            setd(op, CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, Y);
            int64_t u[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
            void* p[12] = {b.x + off, b.scale + off, b.bias + off, b.mean + off, b.ivar + off, eps, mom,
                           b.rm + off, b.rv + off, b.rm2 + off, b.rv2 + off, b.y + off};
            nv = 12;
            for (int j = 0; j < nv; j++) uids[j] = u[j], ptrs[j] = p[j];
        } else {
            BD DY = tensor(21, CUDNN_DATA_HALF, xd, xs), DX = tensor(22, CUDNN_DATA_HALF, xd, xs);
            BD DS = tensor(23, CUDNN_DATA_FLOAT, cd, cs), DB = tensor(24, CUDNN_DATA_FLOAT, cd, cs);
            op = mk(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR);
            OK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_NORM_BWD_MODE, CUDNN_TYPE_NORM_MODE, 1, &mode));
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, X);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, DY);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, SC);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, ME);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, IV);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, DS);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, DB);
            setd(op, CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, DX);
            int64_t u[8] = {1, 21, 2, 4, 5, 23, 24, 22};
            void* p[8] = {b.x + off, b.dy + off, b.scale + off, b.mean + off, b.ivar + off, b.dscale + off,
                          b.dbias + off, b.dx + off};
            nv = 8;
            for (int j = 0; j < nv; j++) uids[j] = u[j], ptrs[j] = p[j];
        }
        if (!OK(cudnnBackendFinalize(op))) return false;
        int64_t ws = 0;
        sp.plan[i] = plan_for(sp.h[i], op, ws);
        if (!sp.plan[i]) return false;
        sp.ws[i] = nullptr;
        if (ws) CK(cudaMalloc(&sp.ws[i], ws));
        sp.vp[i] = variant_pack(nv, uids, ptrs, sp.ws[i]);
    }
    return true;
}

static bool run_once(Split& sp) {  // enqueue one execution (all k slices) on sp.s[0]
    if (sp.k == 1) return OK(cudnnBackendExecute(sp.h[0], sp.plan[0], sp.vp[0]));
    CK(cudaEventRecord(sp.fork, sp.s[0]));
    for (int i = 1; i < sp.k; i++) CK(cudaStreamWaitEvent(sp.s[i], sp.fork, 0));
    for (int i = 0; i < sp.k; i++)
        if (!OK(cudnnBackendExecute(sp.h[i], sp.plan[i], sp.vp[i]))) return false;
    for (int i = 1; i < sp.k; i++) {
        CK(cudaEventRecord(sp.join[i], sp.s[i]));
        CK(cudaStreamWaitEvent(sp.s[0], sp.join[i], 0));
    }
    return true;
}

// Device us per execution: REPS executions captured into one graph, LAUNCHES launches timed.
template <class F>
static double graph_us(cudaStream_t s, F enqueue) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    bool good = true;
    for (int r = 0; r < REPS && good; r++) good = enqueue();
    CK(cudaStreamEndCapture(s, &g));
    if (!good) return -1;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));  // upload + warm-up
    CK(cudaStreamSynchronize(s));
    std::vector<double> t;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int l = 0; l < LAUNCHES; l++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3 / REPS);
    }
    std::sort(t.begin(), t.end());
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[t.size() / 2];
}

static double max_diff(const __half* a, const __half* b, size_t n) {
    std::vector<__half> ha(n), hb(n);
    CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
    double m = 0;
    for (size_t i = 0; i < n; i++) m = std::max(m, (double)fabsf(__half2float(ha[i]) - __half2float(hb[i])));
    return m;
}

// The same packed NHWC memory ([N][H][W][C]) described with other (n, h, w) of the same
// product N*H*W: batchnorm's statistics are over all of them, so every one computes the same
// y / dx. Does cuDNN pick a faster kernel for another description? Graph API (k = 1 plan)
// and the legacy Ex calls (SPATIAL_PERSISTENT, bnOps BN, as the legacy engine runs them).
static void reshapes(int64_t n, int64_t c, int64_t h, int64_t w, Bufs& b, __half* refy, __half* refdx, double copy,
                     cudaStream_t s0, float* eps, float* mom) {
    int64_t p = n * h * w;
    int64_t views[][3] = {{n, h, w}, {1, n * h, w}, {1, p, 1}, {1, 1, p}, {p, 1, 1}, {n * h, w, 1}};
    size_t el = p * c;
    cudnnHandle_t hd;
    OK(cudnnCreate(&hd));
    OK(cudnnSetStream(hd, s0));
    void* ws = nullptr;
    size_t wscap = 64 << 20;
    CK(cudaMalloc(&ws, wscap));
    float one = 1, zero = 0;
    for (auto& v : views) {
        for (int backward = 0; backward < 2; backward++) {
            const char* what = backward ? "backward" : "training";
            double passes = backward ? 5 : 3;
            __half* out = backward ? b.dx : b.y;
            __half* ref = backward ? refdx : refy;
            Split sp;
            sp.k = 1;
            sp.h[0] = hd;
            sp.s[0] = s0;
            double gus = -1, gdiff = -1;
            if (build(sp, backward, v[0], c, v[1], v[2], b, eps, mom) && run_once(sp)) {
                CK(cudaStreamSynchronize(s0));
                gdiff = max_diff(ref, out, el);
                gus = graph_us(s0, [&] { return run_once(sp); });
                cudnnBackendDestroyDescriptor(sp.vp[0]);
                cudnnBackendDestroyDescriptor(sp.plan[0]);
                if (sp.ws[0]) cudaFree(sp.ws[0]);
            }
            cudnnTensorDescriptor_t xd, bnd;
            cudnnCreateTensorDescriptor(&xd);
            cudnnCreateTensorDescriptor(&bnd);
            OK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, v[0], c, v[1], v[2]));
            cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
            OK(cudnnDeriveBNTensorDescriptor(bnd, xd, mode));
            size_t wsz = 0, rsz = 0;
            bool good = backward ? OK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                                       hd, mode, CUDNN_BATCHNORM_OPS_BN, xd, nullptr, xd, nullptr, xd, bnd, nullptr, &wsz))
                                 : OK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                                       hd, mode, CUDNN_BATCHNORM_OPS_BN, xd, nullptr, xd, bnd, nullptr, &wsz));
            good = good && OK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(hd, mode, CUDNN_BATCHNORM_OPS_BN,
                                                                                    nullptr, xd, &rsz));
            auto call = [&]() {
                if (backward)
                    return OK(cudnnBatchNormalizationBackwardEx(
                        hd, mode, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one, &zero, xd, b.x, nullptr, nullptr, xd, b.dy,
                        nullptr, nullptr, xd, b.dx, bnd, b.scale, b.bias, b.dscale, b.dbias, 1e-5, b.mean, b.ivar,
                        nullptr, ws, wsz, nullptr, 0));
                return OK(cudnnBatchNormalizationForwardTrainingEx(
                    hd, mode, CUDNN_BATCHNORM_OPS_BN, &one, &zero, xd, b.x, nullptr, nullptr, xd, b.y, bnd, b.scale,
                    b.bias, 0.1, b.rm2, b.rv2, 1e-5, b.mean, b.ivar, nullptr, ws, wsz, nullptr, 0));
            };
            double lus = -1, ldiff = -1;
            if (good && rsz == 0 && wsz <= wscap && call()) {
                CK(cudaStreamSynchronize(s0));
                ldiff = max_diff(ref, out, el);
                lus = graph_us(s0, call);
            } else if (good) {
                printf("  legacy Ex: reserve %zu, workspace %zu\n", rsz, wsz);
            }
            // training only: the cudnnNormalization* API (per-channel mode, each algorithm)
            double nus[2] = {-1, -1}, ndiff[2] = {-1, -1};
            for (int algo = 0; algo < 2 && !backward; algo++) {
                cudnnNormAlgo_t na = algo ? CUDNN_NORM_ALGO_PERSIST : CUDNN_NORM_ALGO_STANDARD;
                size_t nws = 0, nrs = 0;
                if (!OK(cudnnGetNormalizationForwardTrainingWorkspaceSize(hd, CUDNN_NORM_PER_CHANNEL,
                        CUDNN_NORM_OPS_NORM, na, xd, nullptr, xd, bnd, nullptr, bnd, &nws, 1)) ||
                    !OK(cudnnGetNormalizationTrainingReserveSpaceSize(hd, CUDNN_NORM_PER_CHANNEL,
                        CUDNN_NORM_OPS_NORM, na, nullptr, xd, &nrs, 1)) || nws > wscap || nrs)
                    continue;
                auto ncall = [&]() {
                    return OK(cudnnNormalizationForwardTraining(
                        hd, CUDNN_NORM_PER_CHANNEL, CUDNN_NORM_OPS_NORM, na, &one, &zero, xd, b.x, bnd, b.scale,
                        b.bias, 0.1, bnd, b.rm2, b.rv2, 1e-5, b.mean, b.ivar, nullptr, nullptr, nullptr, xd, b.y,
                        ws, nws, nullptr, 0, 1));
                };
                if (ncall()) {
                    CK(cudaStreamSynchronize(s0));
                    ndiff[algo] = max_diff(ref, out, el);
                    nus[algo] = graph_us(s0, ncall);
                }
            }
            cudnnDestroyTensorDescriptor(xd);
            cudnnDestroyTensorDescriptor(bnd);
            if (!backward)
                printf("  training view %5lldx%lldx%5lldx%5lld: cudnnNormalizationForwardTraining STANDARD %7.2f us "
                       "%5.1f%% (max diff %g), PERSIST %7.2f us %5.1f%% (max diff %g)\n",
                       (long long)v[0], (long long)c, (long long)v[1], (long long)v[2], nus[0],
                       nus[0] > 0 ? 100 * copy * passes / 2 / nus[0] : 0, ndiff[0], nus[1],
                       nus[1] > 0 ? 100 * copy * passes / 2 / nus[1] : 0, ndiff[1]);
            printf("  %-8s view %5lldx%lldx%5lldx%5lld: graph %7.2f us %5.1f%% (max diff %g)  legacy Ex %7.2f us "
                   "%5.1f%% (max diff %g)\n",
                   what, (long long)v[0], (long long)c, (long long)v[1], (long long)v[2], gus,
                   gus > 0 ? 100 * copy * passes / 2 / gus : 0, gdiff, lus, lus > 0 ? 100 * copy * passes / 2 / lus : 0,
                   ldiff);
        }
    }
    cudaFree(ws);
    cudnnDestroy(hd);
}

int main() {
    int64_t shapes[][4] = {{32, 1024, 14, 14}, {32, 2048, 7, 7}, {32, 512, 28, 28}};
    cudaStream_t s0;
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    float eps = 1e-5f, mom = 0.1f;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs, cuDNN %zu\n", prop.name, prop.multiProcessorCount, cudnnGetVersion());
    for (auto& sh : shapes) {
        int64_t n = sh[0], c = sh[1], h = sh[2], w = sh[3];
        size_t el = n * c * h * w;
        Bufs b;
        __half *refy, *refdx, *src, *dst;
        for (__half** p : {&b.x, &b.y, &b.dy, &b.dx, &refy, &refdx, &src, &dst}) CK(cudaMalloc(p, el * 2));
        for (float** p : {&b.scale, &b.bias, &b.mean, &b.ivar, &b.rm, &b.rv, &b.rm2, &b.rv2, &b.dscale, &b.dbias})
            CK(cudaMalloc(p, c * 4));
        std::vector<__half> hx(el);
        for (size_t i = 0; i < el; i++) hx[i] = __float2half((float)((i * 2654435761u) % 2001) / 1000.f - 1.f);
        CK(cudaMemcpy(b.x, hx.data(), el * 2, cudaMemcpyHostToDevice));
        for (size_t i = 0; i < el; i++) hx[i] = __float2half((float)((i * 40503u + 7) % 1999) / 999.f - 1.f);
        CK(cudaMemcpy(b.dy, hx.data(), el * 2, cudaMemcpyHostToDevice));
        std::vector<float> ones(c, 1.f), zeros(c, 0.f);
        for (float* p : {b.scale, b.rv, b.ivar}) CK(cudaMemcpy(p, ones.data(), c * 4, cudaMemcpyHostToDevice));
        for (float* p : {b.bias, b.rm, b.mean}) CK(cudaMemcpy(p, zeros.data(), c * 4, cudaMemcpyHostToDevice));
        double copy = graph_us(s0, [&] { CK(cudaMemcpyAsync(dst, src, el * 2, cudaMemcpyDeviceToDevice, s0)); return true; });
        printf("== %lldx%lldx%lldx%lld fp16 NHWC: x %.1f MB, x-sized copy %.2f us (%.0f GB/s r+w)\n", (long long)n,
               (long long)c, (long long)h, (long long)w, el * 2 / 1e6, copy, 2 * el * 2 / (copy * 1e3));
        for (int backward = 0; backward < 2; backward++) {
            const char* what = backward ? "backward" : "training";
            double passes = backward ? 5 : 3;  // bench_gpu.BN_PASSES (two-pass kernels' x-sized passes)
            for (int k : {1}) {  // k > 1: strided slices (2026-12-04: a generic engine, 58-80x slower)
                if (c % k || c / k < 64) continue;
                Split sp;
                sp.k = k;
                for (int i = 0; i < k; i++) {
                    sp.s[i] = i ? nullptr : s0;
                    if (i) CK(cudaStreamCreateWithFlags(&sp.s[i], cudaStreamNonBlocking));
                    OK(cudnnCreate(&sp.h[i]));
                    OK(cudnnSetStream(sp.h[i], sp.s[i]));
                    CK(cudaEventCreateWithFlags(&sp.join[i], cudaEventDisableTiming));
                }
                CK(cudaEventCreateWithFlags(&sp.fork, cudaEventDisableTiming));
                if (!build(sp, backward, n, c, h, w, b, &eps, &mom)) {
                    printf("  %s k=%d: not built\n", what, k);
                    continue;
                }
                if (!run_once(sp)) continue;
                CK(cudaStreamSynchronize(s0));
                __half* out = backward ? b.dx : b.y;
                __half* ref = backward ? refdx : refy;
                double diff = -1;
                if (k == 1) CK(cudaMemcpy(ref, out, el * 2, cudaMemcpyDeviceToDevice));
                else diff = max_diff(ref, out, el);
                double us = graph_us(s0, [&] { return run_once(sp); });
                double serial = -1;
                if (k > 1) {  // the same k plans one after another on s0 (no concurrency)
                    for (int i = 1; i < k; i++) OK(cudnnSetStream(sp.h[i], s0));
                    Split one = sp;
                    serial = graph_us(s0, [&] {
                        for (int i = 0; i < k; i++)
                            if (!OK(cudnnBackendExecute(one.h[i], one.plan[i], one.vp[i]))) return false;
                        return true;
                    });
                }
                printf("  %-8s k=%d: %7.2f us  %5.1f%% of copy bw  serial %7.2f us  max|y-y(k=1)| %g\n", what, k, us,
                       100 * copy * passes / 2 / us, serial, diff);
                for (int i = 0; i < k; i++) {
                    cudnnBackendDestroyDescriptor(sp.vp[i]);
                    cudnnBackendDestroyDescriptor(sp.plan[i]);
                    if (sp.ws[i]) cudaFree(sp.ws[i]);
                    cudnnDestroy(sp.h[i]);
                    if (i) cudaStreamDestroy(sp.s[i]);
                }
            }
        }
        reshapes(n, c, h, w, b, refy, refdx, copy, s0, &eps, &mom);
        for (void* p : {(void*)b.x, (void*)b.y, (void*)b.dy, (void*)b.dx, (void*)refy, (void*)refdx, (void*)src, (void*)dst})
            cudaFree(p);
        for (float* p : {b.scale, b.bias, b.mean, b.ivar, b.rm, b.rv, b.rm2, b.rv2, b.dscale, b.dbias}) cudaFree(p);
    }
    return 0;
}
