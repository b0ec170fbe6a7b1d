/* CPU reference kernels of the fake DNN libraries (cuDNN fake, MIOpen fake).
 *
 * Written from the math of the vendors' documentation (cuDNN API reference: convolution,
 * batch normalization, activation, op-tensor formulas; the same formulas MIOpen
 * documents), independent of hipdnn_async's own CPU provider. Every kernel:
 *  - takes strided N-d tensors (ref_tensor: dtype, dims, element strides, data) of FLOAT,
 *    HALF, BFLOAT16 or DOUBLE, accumulates in double, rounds once on store;
 *  - blends like the vendors: out = alpha * result + beta * out, and does not read the
 *    prior output when beta == 0 (so NaN garbage there does not leak in);
 *  - leaves vendor enums to the caller (the fakes map their enums to REF_* values).
 * Header-only (static functions), valid C11 and C++17.
 */
#ifndef HIPDNN_ASYNC_REF_KERNELS_H
#define HIPDNN_ASYNC_REF_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REF_MAX_DIMS 8

typedef enum { REF_F32 = 0, REF_F16 = 1, REF_BF16 = 2, REF_F64 = 3 } ref_dtype;

typedef struct {
    ref_dtype dt;
    int nd;
    int64_t dims[REF_MAX_DIMS];
    int64_t strides[REF_MAX_DIMS];   /* elements */
    void *data;
} ref_tensor;

static inline size_t ref_elem_size(ref_dtype dt) {
    return dt == REF_F64 ? 8 : dt == REF_F32 ? 4 : 2;
}

/* bytes spanned from data to one past the last element (0 for an empty tensor) */
static inline size_t ref_extent_bytes(const ref_tensor *t) {
    int64_t last = 0;
    for (int i = 0; i < t->nd; i++) {
        if (t->dims[i] <= 0) return 0;
        last += (t->dims[i] - 1) * t->strides[i];
    }
    return (size_t)(last + 1) * ref_elem_size(t->dt);
}

static inline int64_t ref_count(const ref_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= t->dims[i];
    return n;
}

/* ------------------------------------------------------------------ conversions */
static inline float ref_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else {                                   /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3FFu) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7F800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t ref_float_to_half(float f) {   /* round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);            /* NaN */
    if (absx >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);           /* overflow: inf */
    if (absx < 0x38800000u) {                                             /* subnormal/zero */
        float a;
        memcpy(&a, &absx, 4);
        /* value / 2^-24, rounded to nearest even by the FPU's default mode */
        float q = a * 16777216.0f;
        uint32_t m = (uint32_t)q;
        float rem = q - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((absx >> 23) - 127 + 15) << 10;
    uint32_t man = (absx >> 13) & 0x3FFu;
    uint32_t rest = absx & 0x1FFFu;
    uint32_t h = exp | man;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static inline float ref_bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t ref_float_to_bf16(float f) {   /* round to nearest even */
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7FFFu + lsb;
    return (uint16_t)(x >> 16);
}

static inline double ref_load(const ref_tensor *t, int64_t off) {
    switch (t->dt) {
        case REF_F32: return ((const float *)t->data)[off];
        case REF_F64: return ((const double *)t->data)[off];
        case REF_F16: return ref_half_to_float(((const uint16_t *)t->data)[off]);
        case REF_BF16: return ref_bf16_to_float(((const uint16_t *)t->data)[off]);
    }
    return 0;
}

static inline void ref_store(const ref_tensor *t, int64_t off, double v) {
    switch (t->dt) {
        case REF_F32: ((float *)t->data)[off] = (float)v; break;
        case REF_F64: ((double *)t->data)[off] = v; break;
        case REF_F16: ((uint16_t *)t->data)[off] = ref_float_to_half((float)v); break;
        case REF_BF16: ((uint16_t *)t->data)[off] = ref_float_to_bf16((float)v); break;
    }
}

/* out = alpha * v + beta * out (prior value unread when beta == 0) */
static inline void ref_blend(const ref_tensor *t, int64_t off, double v, double alpha, double beta) {
    double r = alpha * v;
    if (beta != 0) r += beta * ref_load(t, off);
    ref_store(t, off, r);
}

static inline int64_t ref_offset(const ref_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->nd; i++) off += idx[i] * t->strides[i];
    return off;
}

/* next multi-index in row-major order; 0 after the last */
static inline int ref_next(int64_t *idx, const int64_t *dims, int nd) {
    for (int i = nd - 1; i >= 0; i--) {
        if (++idx[i] < dims[i]) return 1;
        idx[i] = 0;
    }
    return 0;
}

/* dense row-major index of idx in dims */
static inline int64_t ref_dense(const int64_t *idx, const int64_t *dims, int nd) {
    int64_t k = 0;
    for (int i = 0; i < nd; i++) k = k * dims[i] + idx[i];
    return k;
}

/* ------------------------------------------------------------------ convolution
 * x: (N, C, spatial...), w: (K, C/groups, kernel...), y: (N, K, out...).
 * in = out * stride - pad + r * dilation; flip: true convolution (kernel reversed). */
typedef struct {
    int nsp;
    int pad[REF_MAX_DIMS], stride[REF_MAX_DIMS], dilation[REF_MAX_DIMS];
    int groups;
    int flip;
} ref_conv;

/* calls fn(ctx, x_off, w_off, y_off) for every (x, w, y) triple of the sum, x in bounds */
typedef void (*ref_conv_visit)(void *ctx, int64_t xo, int64_t wo, int64_t yo);

static inline void ref_conv_walk(const ref_conv *p, const ref_tensor *x, const ref_tensor *w,
                                 const ref_tensor *y, ref_conv_visit fn, void *ctx) {
    int nsp = p->nsp;
    int64_t K = w->dims[0], Cg = w->dims[1];
    int64_t Kg = K / p->groups;
    int64_t yidx[REF_MAX_DIMS] = {0};
    if (ref_count(y) == 0 || ref_count(w) == 0) return;
    do {
        int64_t n = yidx[0], k = yidx[1], g = k / Kg;
        int64_t yo = ref_offset(y, yidx);
        for (int64_t c = 0; c < Cg; c++) {
            int64_t r[REF_MAX_DIMS] = {0};
            do {
                int64_t xo = n * x->strides[0] + (g * Cg + c) * x->strides[1];
                int inside = 1;
                for (int i = 0; i < nsp; i++) {
                    int64_t rr = p->flip ? w->dims[2 + i] - 1 - r[i] : r[i];
                    int64_t in = yidx[2 + i] * p->stride[i] - p->pad[i] + rr * p->dilation[i];
                    if (in < 0 || in >= x->dims[2 + i]) { inside = 0; break; }
                    xo += in * x->strides[2 + i];
                }
                if (inside) {
                    int64_t wo = k * w->strides[0] + c * w->strides[1];
                    for (int i = 0; i < nsp; i++) wo += r[i] * w->strides[2 + i];
                    fn(ctx, xo, wo, yo);
                }
            } while (ref_next(r, w->dims + 2, nsp));
        }
    } while (ref_next(yidx, y->dims, y->nd));
}

/* maps a strided offset of `out` back to a dense index: kept as a lookup through a
 * dense table of offsets built once per call */
typedef struct { int64_t *offs; int64_t n; } ref_offmap;

static inline int ref_cmp64(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return x < y ? -1 : x > y;
}

static inline ref_offmap ref_offmap_build(const ref_tensor *t) {
    ref_offmap m;
    m.n = ref_count(t);
    m.offs = (int64_t *)malloc((size_t)(m.n > 0 ? m.n : 1) * 2 * sizeof(int64_t));
    int64_t idx[REF_MAX_DIMS] = {0};
    int64_t k = 0;
    if (m.n > 0) do {
        m.offs[2 * k] = ref_offset(t, idx);
        m.offs[2 * k + 1] = k;
        k++;
    } while (ref_next(idx, t->dims, t->nd));
    qsort(m.offs, (size_t)m.n, 2 * sizeof(int64_t), ref_cmp64);
    return m;
}

static inline int64_t ref_offmap_find(const ref_offmap *m, int64_t off) {
    int64_t lo = 0, hi = m->n - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2, v = m->offs[2 * mid];
        if (v == off) return m->offs[2 * mid + 1];
        if (v < off) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}

typedef struct {
    const ref_tensor *x, *w, *y;
    double *acc;
    ref_offmap map;
    int which;
} ref_conv_run;

static inline void ref_conv_visit_fn(void *ctx, int64_t xo, int64_t wo, int64_t yo) {
    ref_conv_run *c = (ref_conv_run *)ctx;
    /* the output operand is never read: garbage there cannot leak in */
    switch (c->which) {
        case 0: c->acc[ref_offmap_find(&c->map, yo)] += ref_load(c->x, xo) * ref_load(c->w, wo); break;
        case 1: c->acc[ref_offmap_find(&c->map, xo)] += ref_load(c->y, yo) * ref_load(c->w, wo); break;
        case 2: c->acc[ref_offmap_find(&c->map, wo)] += ref_load(c->x, xo) * ref_load(c->y, yo); break;
    }
}

/* which: 0 forward (out = y), 1 backward data (out = x, y holds dy), 2 backward filter
 * (out = w, y holds dy). Operands are read where they are inputs only. */
static inline void ref_conv_run_dir(int which, const ref_conv *p, const ref_tensor *x,
                                    const ref_tensor *w, const ref_tensor *y,
                                    double alpha, double beta) {
    const ref_tensor *out = which == 0 ? y : which == 1 ? x : w;
    ref_conv_run c;
    c.x = x; c.w = w; c.y = y; c.which = which;
    c.map = ref_offmap_build(out);
    c.acc = (double *)calloc((size_t)(c.map.n > 0 ? c.map.n : 1), sizeof(double));
    ref_conv_walk(p, x, w, y, ref_conv_visit_fn, &c);
    int64_t idx[REF_MAX_DIMS] = {0};
    int64_t k = 0;
    if (c.map.n > 0) do {
        ref_blend(out, ref_offset(out, idx), c.acc[k++], alpha, beta);
    } while (ref_next(idx, out->dims, out->nd));
    free(c.acc);
    free(c.map.offs);
}

/* ------------------------------------------------------------------ activations */
typedef enum {
    REF_ACT_IDENTITY, REF_ACT_RELU, REF_ACT_CLIPPED_RELU, REF_ACT_CLAMP, REF_ACT_SIGMOID,
    REF_ACT_TANH, REF_ACT_ELU, REF_ACT_LEAKY_RELU
} ref_act_mode;

typedef struct {
    ref_act_mode mode;
    double lower, upper;   /* CLAMP: [lower, upper]; CLIPPED_RELU: upper; ELU/LEAKY: alpha in lower */
    int propagate_nan;     /* 0: NaN in gives 0 for the ReLU family (cuDNN NOT_PROPAGATE_NAN) */
} ref_act;

static inline double ref_act_fwd(const ref_act *a, double x) {
    if (x != x) {
        if (a->propagate_nan) return x;
        switch (a->mode) {
            case REF_ACT_RELU: return 0;
            case REF_ACT_CLIPPED_RELU: return 0;
            case REF_ACT_CLAMP: return a->lower;
            default: return x;
        }
    }
    switch (a->mode) {
        case REF_ACT_IDENTITY: return x;
        case REF_ACT_RELU: return x > 0 ? x : 0;
        case REF_ACT_CLIPPED_RELU: return x > 0 ? (x < a->upper ? x : a->upper) : 0;
        case REF_ACT_CLAMP: return x < a->lower ? a->lower : (x > a->upper ? a->upper : x);
        case REF_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
        case REF_ACT_TANH: return tanh(x);
        case REF_ACT_ELU: return x > 0 ? x : a->lower * (exp(x) - 1);
        case REF_ACT_LEAKY_RELU: return x > 0 ? x : a->lower * x;
    }
    return x;
}

/* d act / d x at x (y = act(x)) */
static inline double ref_act_grad(const ref_act *a, double x, double y) {
    switch (a->mode) {
        case REF_ACT_IDENTITY: return 1;
        case REF_ACT_RELU: return x > 0 ? 1 : 0;
        case REF_ACT_CLIPPED_RELU: return (x > 0 && x < a->upper) ? 1 : 0;
        case REF_ACT_CLAMP: return (x > a->lower && x < a->upper) ? 1 : 0;
        case REF_ACT_SIGMOID: return y * (1 - y);
        case REF_ACT_TANH: return 1 - y * y;
        case REF_ACT_ELU: return x > 0 ? 1 : y + a->lower;
        case REF_ACT_LEAKY_RELU: return x > 0 ? 1 : a->lower;
    }
    return 1;
}

static inline void ref_activation_fwd(const ref_act *a, const ref_tensor *x, const ref_tensor *y,
                                      double alpha, double beta) {
    int64_t idx[REF_MAX_DIMS] = {0};
    if (ref_count(y) == 0) return;
    /* in place (x == y) is fine: each element is read before it is written */
    do {
        double v = ref_act_fwd(a, ref_load(x, ref_offset(x, idx)));
        ref_blend(y, ref_offset(y, idx), v, alpha, beta);
    } while (ref_next(idx, y->dims, y->nd));
}

static inline void ref_activation_bwd(const ref_act *a, const ref_tensor *y, const ref_tensor *dy,
                                      const ref_tensor *x, const ref_tensor *dx,
                                      double alpha, double beta) {
    int64_t idx[REF_MAX_DIMS] = {0};
    if (ref_count(dx) == 0) return;
    do {
        double xv = ref_load(x, ref_offset(x, idx)), yv = ref_load(y, ref_offset(y, idx));
        double g = ref_load(dy, ref_offset(dy, idx)) * ref_act_grad(a, xv, yv);
        ref_blend(dx, ref_offset(dx, idx), g, alpha, beta);
    } while (ref_next(idx, dx->dims, dx->nd));
}

/* ------------------------------------------------------------------ op tensor
 * c = op(alpha1 * a, alpha2 * b) + beta * c; a and b broadcast over dims of size 1. */
typedef enum { REF_OP_ADD, REF_OP_MUL, REF_OP_MIN, REF_OP_MAX, REF_OP_SQRT, REF_OP_NOT } ref_op;

static inline int64_t ref_bcast_offset(const ref_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->nd; i++) off += (t->dims[i] == 1 ? 0 : idx[i]) * t->strides[i];
    return off;
}

static inline void ref_op_tensor(ref_op op, const ref_tensor *a, double alpha1, const ref_tensor *b,
                                 double alpha2, const ref_tensor *c, double beta) {
    int64_t idx[REF_MAX_DIMS] = {0};
    if (ref_count(c) == 0) return;
    do {
        double x = alpha1 * ref_load(a, ref_bcast_offset(a, idx));
        double y = b ? alpha2 * ref_load(b, ref_bcast_offset(b, idx)) : 0;
        double r = 0;
        switch (op) {
            case REF_OP_ADD: r = x + y; break;
            case REF_OP_MUL: r = x * y; break;
            case REF_OP_MIN: r = x < y ? x : y; break;
            case REF_OP_MAX: r = x > y ? x : y; break;
            case REF_OP_SQRT: r = sqrt(x); break;
            case REF_OP_NOT: r = 1 - x; break;
        }
        ref_blend(c, ref_offset(c, idx), r, 1.0, beta);
    } while (ref_next(idx, c->dims, c->nd));
}

/* ------------------------------------------------------------------ batchnorm (spatial)
 * Per channel (dim 1) over N and every spatial dim; per-channel tensors are any
 * ref_tensor whose dim 1 is C (read at channel c through strides[1]). */
static inline int64_t ref_ch(const ref_tensor *t, int64_t c) { return c * t->strides[1]; }

static inline void ref_bn_stats(const ref_tensor *x, double *mean, double *var /* biased */) {
    int64_t C = x->dims[1];
    int64_t m = ref_count(x) / (C ? C : 1);
    int64_t idx[REF_MAX_DIMS] = {0};
    for (int64_t c = 0; c < C; c++) mean[c] = var[c] = 0;
    if (ref_count(x) == 0) return;
    do mean[idx[1]] += ref_load(x, ref_offset(x, idx)); while (ref_next(idx, x->dims, x->nd));
    for (int64_t c = 0; c < C; c++) mean[c] /= (double)m;
    memset(idx, 0, sizeof idx);
    do {
        double d = ref_load(x, ref_offset(x, idx)) - mean[idx[1]];
        var[idx[1]] += d * d;
    } while (ref_next(idx, x->dims, x->nd));
    for (int64_t c = 0; c < C; c++) var[c] /= (double)m;
}

/* y = scale * (x - mean) * inv_std + bias, inv_std given per channel */
static inline void ref_bn_apply(const ref_tensor *x, const ref_tensor *y, const double *scale,
                                const double *bias, const double *mean, const double *inv_std,
                                const ref_act *act, double alpha, double beta) {
    int64_t idx[REF_MAX_DIMS] = {0};
    if (ref_count(x) == 0) return;
    do {
        int64_t c = idx[1];
        double v = scale[c] * (ref_load(x, ref_offset(x, idx)) - mean[c]) * inv_std[c] + bias[c];
        if (act) v = ref_act_fwd(act, v);
        ref_blend(y, ref_offset(y, idx), v, alpha, beta);
    } while (ref_next(idx, x->dims, x->nd));
}

static inline void ref_read_channels(const ref_tensor *t, int64_t C, double *out) {
    for (int64_t c = 0; c < C; c++) out[c] = ref_load(t, ref_ch(t, c));
}

static inline void ref_bn_inference(const ref_tensor *x, const ref_tensor *y, const ref_tensor *scale,
                                    const ref_tensor *bias, const ref_tensor *mean,
                                    const ref_tensor *var, double eps, const ref_act *act,
                                    double alpha, double beta) {
    int64_t C = x->dims[1];
    double *s = (double *)calloc((size_t)C * 4 + 1, sizeof(double));
    double *b = s + C, *m = b + C, *inv = m + C;
    ref_read_channels(scale, C, s);
    ref_read_channels(bias, C, b);
    ref_read_channels(mean, C, m);
    ref_read_channels(var, C, inv);
    for (int64_t c = 0; c < C; c++) inv[c] = 1.0 / sqrt(inv[c] + eps);
    ref_bn_apply(x, y, s, b, m, inv, act, alpha, beta);
    free(s);
}

/* running = (1 - factor) * running + factor * batch (variance unbiased: m / (m - 1));
 * running tensors and saved ones may be NULL */
static inline void ref_bn_training(const ref_tensor *x, const ref_tensor *y, const ref_tensor *scale,
                                   const ref_tensor *bias, double factor,
                                   const ref_tensor *run_mean, const ref_tensor *run_var,
                                   double eps, const ref_tensor *save_mean,
                                   const ref_tensor *save_inv, const ref_act *act,
                                   double alpha, double beta) {
    int64_t C = x->dims[1];
    int64_t m = ref_count(x) / (C ? C : 1);
    double *s = (double *)calloc((size_t)C * 5 + 1, sizeof(double));
    double *b = s + C, *mean = b + C, *var = mean + C, *inv = var + C;
    ref_read_channels(scale, C, s);
    ref_read_channels(bias, C, b);
    ref_bn_stats(x, mean, var);
    for (int64_t c = 0; c < C; c++) inv[c] = 1.0 / sqrt(var[c] + eps);
    ref_bn_apply(x, y, s, b, mean, inv, act, alpha, beta);
    for (int64_t c = 0; c < C; c++) {
        if (save_mean) ref_store(save_mean, ref_ch(save_mean, c), mean[c]);
        if (save_inv) ref_store(save_inv, ref_ch(save_inv, c), inv[c]);
        if (run_mean) {
            double r = ref_load(run_mean, ref_ch(run_mean, c));
            ref_store(run_mean, ref_ch(run_mean, c), (1 - factor) * r + factor * mean[c]);
        }
        if (run_var) {
            double unbiased = m > 1 ? var[c] * (double)m / (double)(m - 1) : var[c];
            double r = ref_load(run_var, ref_ch(run_var, c));
            ref_store(run_var, ref_ch(run_var, c), (1 - factor) * r + factor * unbiased);
        }
    }
    free(s);
}

/* dbias = sum dy; dscale = sum dy * xhat; dx = scale * inv / m * (m dy - dbias - xhat dscale),
 * with xhat = (x - mean) * inv from the saved statistics, or recomputed (saved NULL) */
static inline void ref_bn_backward(const ref_tensor *x, const ref_tensor *dy, const ref_tensor *dx,
                                   const ref_tensor *scale, const ref_tensor *dscale,
                                   const ref_tensor *dbias, double eps,
                                   const ref_tensor *saved_mean, const ref_tensor *saved_inv,
                                   double alpha_d, double beta_d, double alpha_p, double beta_p) {
    int64_t C = x->dims[1];
    int64_t m = ref_count(x) / (C ? C : 1);
    double *s = (double *)calloc((size_t)C * 6 + 1, sizeof(double));
    double *mean = s + C, *inv = mean + C, *db = inv + C, *ds = db + C, *var = ds + C;
    ref_read_channels(scale, C, s);
    if (saved_mean && saved_inv) {
        ref_read_channels(saved_mean, C, mean);
        ref_read_channels(saved_inv, C, inv);
    } else {
        ref_bn_stats(x, mean, var);
        for (int64_t c = 0; c < C; c++) inv[c] = 1.0 / sqrt(var[c] + eps);
    }
    int64_t idx[REF_MAX_DIMS] = {0};
    if (ref_count(x) > 0) {
        do {
            int64_t c = idx[1];
            double g = ref_load(dy, ref_offset(dy, idx));
            double xh = (ref_load(x, ref_offset(x, idx)) - mean[c]) * inv[c];
            db[c] += g;
            ds[c] += g * xh;
        } while (ref_next(idx, x->dims, x->nd));
        memset(idx, 0, sizeof idx);
        do {
            int64_t c = idx[1];
            double g = ref_load(dy, ref_offset(dy, idx));
            double xh = (ref_load(x, ref_offset(x, idx)) - mean[c]) * inv[c];
            double v = s[c] * inv[c] / (double)m * ((double)m * g - db[c] - xh * ds[c]);
            ref_blend(dx, ref_offset(dx, idx), v, alpha_d, beta_d);
        } while (ref_next(idx, x->dims, x->nd));
    }
    for (int64_t c = 0; c < C; c++) {
        ref_blend(dscale, ref_ch(dscale, c), ds[c], alpha_p, beta_p);
        ref_blend(dbias, ref_ch(dbias, c), db[c], alpha_p, beta_p);
    }
    free(s);
}

#endif
