/* Channels-last batchnorm of hipdnn_async.providers.cpu._kernels.bn_rows (NHWC, NDHWC):
 * the same ops, formulas and special-value rules as the channels-first rows of
 * _bn_rows.h, on activations whose C channel values of a pixel are contiguous.
 *
 * Why it exists: oneDNN 3.2's FLOAT jit batchnorm on channels-last memory takes about
 * twice its own time when y is 64-byte aligned, it has no HALF batchnorm here (float32
 * copies through reference reorders), and inference -> DReLU -> backward is two of its
 * primitives (three passes over x) where the rows make two passes.
 *
 * The N * spatial pixels are split among the team's threads. Statistics are per-thread
 * partial sums: float32 per channel over a tile of at most HD_BN_FLUSH pixels (as short as
 * the float32 lane sums of the channels-first rows), added into float64 per-thread
 * vectors, which every thread then adds up in the same order after a barrier (so each
 * thread holds the same mean and factor, and only thread 0 writes the outputs; the sums'
 * last bits depend on the number of threads). Training: sums of x - p and (x - p)^2,
 * barrier, y, with the squared deviations from the mean (pass 2, then a second barrier)
 * only where p is not near enough to every channel's mean for the first sums to give the
 * variance (hd_bnl_one_pass). p is the channel's pivot (hd_bnl_pivot_*: a median of
 * sampled means, read by every thread), mean = p + sum / M in float64: float32 tile sums
 * of the values themselves lost bits on offset data (64 values of 3e4 + 0.5 N(0, 1): the
 * mean 3 float32 ulps off, y 0.0124 off). Backward: the two sums, barrier, dx.
 * Inference: one pass.
 *
 * A channel's float32 tile sums that come out non-finite are taken again in float64 over
 * the tile (one test per channel and tile), and a channel whose factor scale /
 * sqrt(variance + epsilon) overflows float32, or whose x - mean does (hd_bn_wide), has
 * its y taken again in float64 after the pass (hd_bnl_fix_*), one whose backward factors overflow float32 (k1, k2 or k3 beyond
 * FLT_MAX) its dx (hd_bnl_dxfix_*), as in the channels-first rows (_bn_rows.h); where a =
 * float32(scale inv) itself overflows, under RELU_BWD, also its sums (hd_bnl_bsumfix_*),
 * so that the mask's forward value is inference's y there (HD_BN_FWD64) in both.
 */
#ifndef HD_BN_LAST_H
#define HD_BN_LAST_H

#include "_bn_rows.h"

#define HD_BN_FLUSH 64

/* What the channels-last job adds to hd_bn_job's fields (N, C, S, the pointers, the
 * per-channel vectors, eps, act, lo, hi): pixel strides and per-thread scratch. */
typedef struct {
    hd_bn_job j;                   /* xn, yn, gn: N strides; xc, yc, gc unused */
    ptrdiff_t xp, yp, gp;          /* pixel strides (>= C): between consecutive pixels */
    ptrdiff_t Cp;                  /* C rounded up to 16 */
    int slots;                     /* per-thread scratch blocks; threads beyond idle */
    char* scratch;                 /* slots blocks of HD_BN_LAST_BLOCK(Cp) bytes, 64-aligned */
    void (*barrier)(void);         /* the team's barrier (GOMP_barrier) */
    int group;                     /* pixels per group above 64 channels (HD_BNL_GROUPS) */
} hd_bn_last_job;

/* Pixels per group above 64 channels, this thread's copy of hd_bn_last_job.group (set on
 * entering the team): groups of 4 load the per-channel operands once for 4 pixels, 20-25 %
 * faster while the tensor stays in the caches; once it does not (batch 32), pixel by
 * pixel streams memory in order and took 0.42-0.6x the time of groups of 4 (32 x 256 x
 * 28 x 28 float32 inference 0.76 against 1.82 ms, 2 cores). */
static __thread int hd_bnl_group = 4;

/* per thread: 5 float64 and 6 float32 vectors of Cp values */
#define HD_BN_LAST_BLOCK(Cp) ((size_t)(Cp) * (5 * sizeof(double) + 6 * sizeof(float)))

/* Training's statistics in one pass where the pivot allows it (hd_bn_one_pass: within one
 * standard deviation of the mean) for every channel: the tiles sum x - p and (x - p)^2
 * together, and pass 2 (the squared deviations from the mean, and its barrier) is left
 * out. The pivot is a median of three means of HD_BNL_PIVOT_G sampled pixels: on N(0, 1)
 * data within about 0.2 of the mean, where one value (the median of the first, middle and
 * last pixels, as the channels-first rows take per channel) was over 1 away for 13 % of
 * channels, so that a job of 64 channels nearly always needed pass 2; one outlier moves
 * one group's mean, not the median. */
#define HD_BNL_PIVOT_G 16

/* The pixel (n * S + s) of sample i of a job of N images of S pixels: the R2 sequence
 * (Roberts, "The unreasonable effectiveness of quasirandom sequences", 2018; 1/rho and
 * 1/rho^2 of the plastic number rho in 32-bit fixed point) over (image, pixel), so that
 * the samples spread over the images and over the pixels of an image alike. Evenly
 * spaced flat indices (R (2 i + 1) / (6 G)) all fell on one pixel of every other image
 * at N = 96 (a zero-padded convolution's corner as the pivot, which then needed pass 2),
 * and one golden-ratio sequence over the flat index on 11 of 49 pixels at N = 48. */
static inline ptrdiff_t hd_bnl_sample(ptrdiff_t i, ptrdiff_t N, ptrdiff_t S) {
    const uint32_t f = (uint32_t)(0x80000000u + (uint32_t)i * 0xC13FA9A9u);
    const uint32_t g = (uint32_t)(0x80000000u + (uint32_t)i * 0x91E10DA5u);
    ptrdiff_t n = (ptrdiff_t)((double)f * 0x1p-32 * (double)N);
    ptrdiff_t s = (ptrdiff_t)((double)g * 0x1p-32 * (double)S);
    n = n < N ? n : N - 1;
    s = s < S ? s : S - 1;
    return n * S + s;
}

/* Whether the team's sums of x - p and (x - p)^2 (each block's first two float64 vectors,
 * hd_bnl_team_*) give every channel's variance in one pass (hd_bn_one_pass). */
static int hd_bnl_one_pass(const hd_bn_last_job* L, int team, double M) {
    const ptrdiff_t C = L->j.C, Cp = L->Cp;
    ptrdiff_t c;
    int u;
    for (c = 0; c < C; c++) {
        double s1 = 0.0, s2 = 0.0;
        for (u = 0; u < team; u++) {
            const double* du = (const double*)(L->scratch + u * HD_BN_LAST_BLOCK(Cp));
            s1 += du[c];
            s2 += du[Cp + c];
        }
        if (!hd_bn_one_pass(s1, s2, M)) return 0;
    }
    return 1;
}

/* the portable rows' outputs overlap no input (what lets the compiler vectorise them) */
#if defined(__GNUC__) || defined(__clang__)
#define HD_BNL_RESTRICT __restrict__
#else
#define HD_BNL_RESTRICT
#endif

/* Whether any of the C float32 sums v is not finite (one pass the compiler vectorises). */
HD_INLINE int hd_bnl_nonfinite(const float* v, ptrdiff_t C) {
    int bad = 0;
    ptrdiff_t c;
    for (c = 0; c < C; c++) bad |= !(v[c] - v[c] == 0.0f);
    return bad;
}

/* Streamed stores (hd_bn_stream) seen before stores to the same lines (hd_bnl_fix_*). */
static inline void hd_bnl_fence(void) {
#if HD_BN_VEC
    if (hd_bn_stream) _mm_sfence();
#endif
}

/* Per element kind K: s0[c] += the float32 tile sums acc (hd_bnl_sum), those of the
 * channels where they are not finite taken again in float64 over the tile; y of the
 * channels whose factor a64[c] overflows float32 or is infinite (hd_bn_y64: there b[c]
 * is training's bias without the mean's remainder, and the mean its float64 m64[c]
 * where m64 is given, so that x on the float32 mean's side takes the float64 one's
 * infinity) or that are wide
 * (wide[c] != 0: hd_bn_wide), in float64 with the mean m and bias b, over the pixels
 * [r0, r1) of a job (after the float32 pass wrote them). */
#define HD_BN_LAST_SLOW(K)                                                                 \
    /* training's pivot p[c] (hd_bnl_team_*): the median of the means of three groups      \
     * of HD_BNL_PIVOT_G pixels spread over the job (hd_bnl_sample: sample i of 3 G in     \
     * group i mod 3; a value that is not finite adds 0), g0..g2 scratch of C float64      \
     * values; every thread reads the same elements. (Rounded to a 16-bit element kind     \
     * it was no better: the variance of bfloat16 N(0, 1) data is within 5.8e-7 of         \
     * float64's either way, where two passes gave 6.7e-8; float32 data 3.4e-8.) */        \
    HD_BN_UNUSED static void hd_bnl_pivot_##K(const hd_bn_job* j, ptrdiff_t xp,            \
                                              double* HD_BNL_RESTRICT g0,                  \
                                              double* HD_BNL_RESTRICT g1,                  \
                                              double* HD_BNL_RESTRICT g2, float* p) {      \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        const ptrdiff_t C = j->C, R = j->N * j->S, n = 3 * HD_BNL_PIVOT_G;                 \
        ptrdiff_t c, i;                                                                    \
        for (c = 0; c < C; c++) g0[c] = g1[c] = g2[c] = 0.0;                               \
        for (i = 0; R > 0 && i < n; i++) {                                                 \
            const ptrdiff_t r = hd_bnl_sample(i, j->N, j->S);                              \
            const HD_TYPE_##K* xq = x + (r / j->S) * j->xn + (r % j->S) * xp;              \
            double* g = i % 3 == 0 ? g0 : i % 3 == 1 ? g1 : g2;                            \
            for (c = 0; c < C; c++) {                                                      \
                const float v = HD_LOAD_##K(xq[c]);                                        \
                g[c] += v - v == 0.0f ? (double)v : 0.0;                                   \
            }                                                                              \
        }                                                                                  \
        for (c = 0; c < C; c++)                                                            \
            p[c] = hd_bn_median3((float)(g0[c] / HD_BNL_PIVOT_G),                          \
                                 (float)(g1[c] / HD_BNL_PIVOT_G),                          \
                                 (float)(g2[c] / HD_BNL_PIVOT_G));                         \
    }                                                                                      \
    HD_INLINE void hd_bnl_sum_flush_##K(const HD_TYPE_##K* x, ptrdiff_t xp, ptrdiff_t P,   \
                                        const float* m, ptrdiff_t C, int square,           \
                                        float* acc, double* s0) {                          \
        ptrdiff_t c;                                                                       \
        if (hd_bnl_nonfinite(acc, C))                                                      \
            for (c = 0; c < C; c++)                                                        \
                if (!hd_bn_finite(acc[c])) {                                               \
                    s0[c] += hd_bn_sum64_##K(x + c, xp, P, m[c], square);                  \
                    acc[c] = 0.0f;                                                         \
                }                                                                          \
        for (c = 0; c < C; c++) s0[c] += acc[c];                                           \
    }                                                                                      \
    HD_BN_UNUSED static void hd_bnl_fix_##K(const hd_bn_job* j, ptrdiff_t xp, ptrdiff_t yp, \
                                            ptrdiff_t r0, ptrdiff_t r1, const float* m,    \
                                            const double* m64, const double* a64,          \
                                            const float* b, const float* wide) {           \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        HD_TYPE_##K* y = (HD_TYPE_##K*)j->y;                                               \
        const ptrdiff_t S = j->S;                                                          \
        ptrdiff_t c;                                                                       \
        hd_bnl_fence();                                                                    \
        for (c = 0; c < j->C; c++)                                                         \
            if (hd_bn_y64(a64[c]) || (wide != NULL && wide[c] != 0.0f))                    \
                HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                   \
                    hd_bn_affine64_##K(x + n * j->xn + s * xp + c, xp,                     \
                                       y + n * j->yn + s * yp + c, yp, P,                  \
                                       m64 && !hd_bn_finite(a64[c]) ? m64[c] : m[c],       \
                                       a64[c], b[c], j->act, j->lo, j->hi);                \
    }

/* Tile functions: P pixels (<= HD_BN_FLUSH) at pixel strides xp, yp, gp, over C channels;
 * per-channel vectors are float32 of >= C values (m: the mean subtracted; inv: backward's
 * inv_variance, NULL where every channel's k2 folds it in; a: the factor; b: the bias;
 * k1..k3 the dx coefficients), float64 sums of >= C values (padded to a multiple of 16).
 *   sum:    s0[c] += sum_p x[p][c] - m[c] (square 1: (x[p][c] - m[c])^2; square 2: both,
 *           the squares into s1[c])
 *   affine: y[p][c] = (x - m[c]) * a[c] + b[c], clamped to [lo, hi] (+ 0.0) where act
 *   bsum:   s0[c] += sum_p g, s1[c] += sum_p g * (x - m[c]); g = dy, or RELU_BWD of the
 *           forward yb = (x - m) * a + b where act (as hd_bn_bsum)
 *   dx:     dx[p][c] = k1[c] * g + k2[c] * xhat + k3[c], xhat = (x - m[c]) * inv[c], or
 *           x - m[c] where inv is NULL (as hd_bn_dx_*: hd_bn_folds)
 * The portable ones run a pixel's channels as one loop the compiler vectorises, the
 * float32 sums in acc0 / acc1 (C values) added to the float64 ones once per tile. */
#define HD_BN_LAST_TILES(ISA, ATTR, K)                                                     \
    ATTR HD_BN_UNUSED static void hd_bnl_sum_##K##_##ISA(                                  \
        const HD_TYPE_##K* x, ptrdiff_t xp, ptrdiff_t P, const float* m, ptrdiff_t C,      \
        int square, float* acc0, float* acc1, double* s0, double* s1) {                    \
        const HD_TYPE_##K* x0 = x;                                                         \
        ptrdiff_t p, c;                                                                    \
        for (c = 0; c < C; c++) acc0[c] = acc1[c] = 0.0f;                                  \
        for (p = 0; p < P; p++, x += xp)                                                   \
            if (square == 2)                                                               \
                for (c = 0; c < C; c++) {                                                  \
                    float d = HD_LOAD_##K(x[c]) - m[c];                                    \
                    acc0[c] += d;                                                          \
                    acc1[c] += d * d;                                                      \
                }                                                                          \
            else if (square)                                                               \
                for (c = 0; c < C; c++) {                                                  \
                    float d = HD_LOAD_##K(x[c]) - m[c];                                    \
                    acc0[c] += d * d;                                                      \
                }                                                                          \
            else                                                                           \
                for (c = 0; c < C; c++) acc0[c] += HD_LOAD_##K(x[c]) - m[c];              \
        hd_bnl_sum_flush_##K(x0, xp, P, m, C, square & 1, acc0, s0);                      \
        if (square == 2) hd_bnl_sum_flush_##K(x0, xp, P, m, C, 1, acc1, s1);               \
    }                                                                                      \
    ATTR HD_BN_UNUSED static void hd_bnl_affine_##K##_##ISA(                               \
        const HD_TYPE_##K* x, ptrdiff_t xp, HD_TYPE_##K* y, ptrdiff_t yp, ptrdiff_t P,     \
        const float* m, const float* a, const float* b, ptrdiff_t C, int act, float lo,    \
        float hi) {                                                                        \
        ptrdiff_t p, c;                                                                    \
        for (p = 0; p < P; p++, x += xp, y += yp)                                          \
            if (act)                                                                       \
                for (c = 0; c < C; c++)                                                    \
                    y[c] = HD_STORE_##K(                                                   \
                        hd_clamp((HD_LOAD_##K(x[c]) - m[c]) * a[c] + b[c], lo, hi));       \
            else                                                                           \
                for (c = 0; c < C; c++)                                                    \
                    y[c] = HD_STORE_##K((HD_LOAD_##K(x[c]) - m[c]) * a[c] + b[c]);         \
    }                                                                                      \
    ATTR HD_BN_UNUSED static void hd_bnl_bsum_##K##_##ISA(                                 \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        ptrdiff_t P, const float* m, const float* a, const float* b, ptrdiff_t C, int act, \
        float lo, float hi, float* HD_BNL_RESTRICT acc0, float* HD_BNL_RESTRICT acc1,      \
        double* s0, double* s1) {                                                          \
        ptrdiff_t p, c;                                                                    \
        const HD_TYPE_##K* x0 = x;                                                         \
        const HD_TYPE_##K* dy0 = dy;                                                       \
        for (c = 0; c < C; c++) acc0[c] = acc1[c] = 0.0f;                                  \
        for (p = 0; p < P; p++, x += xp, dy += gp)                                         \
            if (act)                                                                       \
                for (c = 0; c < C; c++) {                                                  \
                    float d = HD_LOAD_##K(x[c]) - m[c];                                    \
                    float g = HD_LOAD_##K(dy[c]);                                          \
                    float yb = d * a[c] + b[c];                                            \
                    g = hd_bn_drelu(g, yb, lo, hi);                                        \
                    acc0[c] += g;                                                          \
                    acc1[c] += g * d;                                                      \
                }                                                                          \
            else                                                                           \
                for (c = 0; c < C; c++) {                                                  \
                    float d = HD_LOAD_##K(x[c]) - m[c];                                    \
                    float g = HD_LOAD_##K(dy[c]);                                          \
                    acc0[c] += g;                                                          \
                    acc1[c] += g * d;                                                      \
                }                                                                          \
        if (hd_bnl_nonfinite(acc0, C) || hd_bnl_nonfinite(acc1, C))                        \
            for (c = 0; c < C; c++)                                                        \
                if (!(hd_bn_finite(acc0[c]) && hd_bn_finite(acc1[c]))) {                   \
                    double u0, u1;                                                         \
                    hd_bn_bsum64_##K##_##ISA(x0 + c, xp, dy0 + c, gp, P, m[c], a[c], a[c], \
                                             b[c], act, lo, hi, &u0, &u1);                 \
                    s0[c] += u0;                                                           \
                    s1[c] += u1;                                                           \
                    acc0[c] = acc1[c] = 0.0f;                                              \
                }                                                                          \
        for (c = 0; c < C; c++) {                                                          \
            s0[c] += acc0[c];                                                              \
            s1[c] += acc1[c];                                                              \
        }                                                                                  \
    }                                                                                      \
    /* xh (inv given) a constant in each copy of the loops, as in hd_bn_dx_* */            \
    ATTR HD_INLINE void hd_bnl_dxi_##K##_##ISA(                                            \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        HD_TYPE_##K* HD_BNL_RESTRICT dx, ptrdiff_t yp, ptrdiff_t P, const float* m,        \
        const float* inv, const float* a, const float* b, ptrdiff_t C, int act, float lo,  \
        float hi, const float* k1, const float* k2, const float* k3, int xh) {             \
        ptrdiff_t p, c;                                                                    \
        for (p = 0; p < P; p++, x += xp, dy += gp, dx += yp)                               \
            if (act)                                                                       \
                for (c = 0; c < C; c++) {                                                  \
                    float d = HD_LOAD_##K(x[c]) - m[c];                                    \
                    float g = HD_LOAD_##K(dy[c]);                                          \
                    float yb = d * a[c] + b[c];                                            \
                    g = hd_bn_drelu(g, yb, lo, hi);                                        \
                    dx[c] = HD_STORE_##K(k1[c] * g + k2[c] * (xh ? d * inv[c] : d)         \
                                         + k3[c]);                                         \
                }                                                                          \
            else                                                                           \
                for (c = 0; c < C; c++) {                                                  \
                    float d = HD_LOAD_##K(x[c]) - m[c];                                    \
                    dx[c] = HD_STORE_##K(k1[c] * HD_LOAD_##K(dy[c])                        \
                                         + k2[c] * (xh ? d * inv[c] : d) + k3[c]);         \
                }                                                                          \
    }                                                                                      \
    ATTR HD_BN_UNUSED static void hd_bnl_dx_##K##_##ISA(                                   \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        HD_TYPE_##K* HD_BNL_RESTRICT dx, ptrdiff_t yp, ptrdiff_t P, const float* m,        \
        const float* inv, const float* a, const float* b, ptrdiff_t C, int act, float lo,  \
        float hi, const float* k1, const float* k2, const float* k3) {                     \
        if (inv)                                                                           \
            hd_bnl_dxi_##K##_##ISA(x, xp, dy, gp, dx, yp, P, m, inv, a, b, C, act, lo, hi, \
                                   k1, k2, k3, 1);                                         \
        else                                                                               \
            hd_bnl_dxi_##K##_##ISA(x, xp, dy, gp, dx, yp, P, m, inv, a, b, C, act, lo, hi, \
                                   k1, k2, k3, 0);                                         \
    }

/* The pixels from r of a tile: to the end of r's image, of [.., r1) or HD_BN_FLUSH. */
static inline ptrdiff_t hd_bnl_tile(ptrdiff_t r, ptrdiff_t r1, ptrdiff_t S) {
    ptrdiff_t P = S - r % S;
    P = P < r1 - r ? P : r1 - r;
    return P < HD_BN_FLUSH ? P : HD_BN_FLUSH;
}
/* Tiles of the thread's pixels [r0, r1) (pixel r = n * S + s): n, s of a tile's first
 * pixel and P, its pixel count, as the loop's variables */
#define HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                           \
    for (ptrdiff_t r_ = (r0), n = r_ / (S), s = r_ % (S), P = hd_bnl_tile(r_, (r1), (S));  \
         r_ < (r1); r_ += P, n = r_ / (S), s = r_ % (S), P = hd_bnl_tile(r_, (r1), (S)))

/* The share of thread ithr of nthr of a channels-last job; KS is the suffix of the tile
 * functions (K_ISA). The per-channel float64 work is plain C, C values a pass. */
#define HD_BN_LAST_TEAM(KS, ATTR, K)                                                       \
    /* training's float64 sums s1[c] = sum (x - m[c]), s2[c] = sum (x - m[c])^2 over the   \
     * whole job, for the channels hd_bn_stats_need asks them of: every channel in one     \
     * pass over the pixels, the channels' loop vectorised, the others' sums unused (a     \
     * channel at a time, at the pixel stride, took 8-15x the time of training on         \
     * ordinary data) */                                                                   \
    ATTR HD_BN_UNUSED static void hd_bnl_moments64_##KS(const hd_bn_job* j, ptrdiff_t xp,  \
                                                        const double* HD_BNL_RESTRICT m,   \
                                                        double* HD_BNL_RESTRICT s1,        \
                                                        double* HD_BNL_RESTRICT s2) {      \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        const ptrdiff_t C = j->C, R = j->N * j->S;                                         \
        ptrdiff_t c, r;                                                                    \
        for (c = 0; c < C; c++) s1[c] = s2[c] = 0.0;                                       \
        for (r = 0; r < R; r++) {                                                          \
            const HD_TYPE_##K* xq = x + (r / j->S) * j->xn + (r % j->S) * xp;              \
            for (c = 0; c < C; c++) {                                                      \
                const double d = (double)HD_LOAD_##K(xq[c]) - m[c];                        \
                s1[c] += d;                                                                \
                s2[c] += d * d;                                                            \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    /* backward under RELU_BWD: this thread's sums s0, s1 of the channels whose a =        \
     * float32(scale inv) is not finite taken again over the pixels [r0, r1), in float64   \
     * with the mask's forward value of HD_BN_FWD64 (the tiles' float32 sums of d * inf    \
     * replaced: they may be finite, and mask elements inference's y does not) */          \
    ATTR static void hd_bnl_bsumfix_##KS(const hd_bn_last_job* L, ptrdiff_t r0,            \
                                         ptrdiff_t r1, double* s0, double* s1) {           \
        const hd_bn_job* j = &L->j;                                                        \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        const HD_TYPE_##K* dy = (const HD_TYPE_##K*)j->dy;                                 \
        const ptrdiff_t S = j->S, xp = L->xp, gp = L->gp;                                  \
        ptrdiff_t c;                                                                       \
        for (c = 0; c < j->C; c++) {                                                       \
            const double a64 = (double)j->scale[c] * j->inv[c];                            \
            const float a = (float)a64;                                                    \
            if (a - a == 0.0f) continue;                                                   \
            s0[c] = s1[c] = 0.0;                                                           \
            HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P) {                                     \
                double u0, u1;                                                             \
                hd_bn_bsum64_##KS(x + n * j->xn + s * xp + c, xp,                          \
                                  dy + n * j->gn + s * gp + c, gp, P, j->mean[c], a, a64,  \
                                  j->bias[c], 1, j->lo, j->hi, &u0, &u1);                  \
                s0[c] += u0;                                                               \
                s1[c] += u1;                                                               \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    /* backward: dx of the channels c whose factors overflow float32 (big[c] not 0), in    \
     * float64 (hd_bn_dx64_*, its mask as the sums take it), over the pixels [r0, r1)    \
     * of a job after the float32 pass wrote them (as hd_bnl_fix_*); the channel's         \
     * sums added again from the team's blocks, in the team's order */                     \
    ATTR static void hd_bnl_dxfix_##KS(const hd_bn_last_job* L, int team, ptrdiff_t r0,    \
                                       ptrdiff_t r1, const double* big) {                  \
        const hd_bn_job* j = &L->j;                                                        \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        const HD_TYPE_##K* dy = (const HD_TYPE_##K*)j->dy;                                 \
        HD_TYPE_##K* y = (HD_TYPE_##K*)j->y;                                               \
        const ptrdiff_t S = j->S, Cp = L->Cp, xp = L->xp, yp = L->yp, gp = L->gp;          \
        const double M = (double)(j->N * j->S);                                            \
        ptrdiff_t c;                                                                       \
        int u;                                                                             \
        hd_bnl_fence();                                                                    \
        for (c = 0; c < j->C; c++)                                                         \
            if (big[c] != 0.0) {                                                           \
                const double inv = j->inv[c], k1 = (double)j->scale[c] * inv;             \
                const float a = (float)k1, b = j->act ? j->bias[c] : 0.0f;                 \
                double sg = 0.0, sgd = 0.0;                                                \
                for (u = 0; u < team; u++) {                                               \
                    const double* du = (const double*)(L->scratch + u * HD_BN_LAST_BLOCK(Cp)); \
                    sg += du[c];                                                           \
                    sgd += du[Cp + c];                                                     \
                }                                                                          \
                HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                   \
                    hd_bn_dx64_##KS(x + n * j->xn + s * xp + c, xp,                        \
                                    dy + n * j->gn + s * gp + c, gp,                       \
                                    y + n * j->yn + s * yp + c, yp, P, j->mean[c], inv, a, \
                                    b, j->act, j->lo, j->hi, k1, sg / M, sgd * inv / M);   \
            }                                                                              \
    }                                                                                      \
    ATTR static void hd_bnl_team_##KS(const hd_bn_last_job* L, int ithr, int nthr) {       \
        const hd_bn_job* j = &L->j;                                                        \
        const ptrdiff_t C = j->C, Cp = L->Cp, S = j->S, R = j->N * j->S;                   \
        const ptrdiff_t xp = L->xp, yp = L->yp, gp = L->gp;                                \
        const double M = (double)R;                                                        \
        const int team = nthr < L->slots ? nthr : L->slots, me = ithr < team;              \
        const ptrdiff_t r0 = me ? R * ithr / team : 0, r1 = me ? R * (ithr + 1) / team : 0; \
        char* blk = L->scratch + (size_t)(me ? ithr : 0) * HD_BN_LAST_BLOCK(Cp);           \
        double* d0 = (double*)blk;               /* per-thread float64 sums; training: */  \
        double* d1 = d0 + Cp;                    /* of x - p, (x - p)^2, then the */       \
                                                 /* variance, and float64 sums of x - */   \
                                                 /* mean (hd_bnl_moments64_*) */           \
        double* a64 = d1 + Cp;                   /* the factor a in float64 (forward); */  \
                                                 /* backward: 1 where dx takes float64 */  \
        double* d2 = a64 + Cp;                   /* training: sum (x - fm)^2 */            \
        double* d3 = d2 + Cp;                    /* and float64 sum (x - mean)^2 */        \
        float* f0 = (float*)(d3 + Cp);           /* float32 sums of a tile (portable); */  \
                                                 /* training: hd_bn_stats_need's */        \
        float* f1 = f0 + Cp;                     /* training: hd_bn_wide's */              \
        float* fm = f1 + Cp;                     /* training: the mean subtracted; */      \
                                                 /* backward: inv, or 1 where k2 folds */  \
        float* fa = fm + Cp;                     /* the factor a; backward: k1 */          \
        float* k2 = fa + Cp;                     /* backward: the factor a, then k2; */    \
                                                 /* training: the pivots */                \
        float* k3 = k2 + Cp;                     /* backward: zeros (b without act) */     \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        HD_TYPE_##K* y = (HD_TYPE_##K*)j->y;                                               \
        const HD_TYPE_##K* dy = (const HD_TYPE_##K*)j->dy;                                 \
        ptrdiff_t c, u;                                                                    \
        if (j->op == HD_BN_INFERENCE) {                                                    \
            int big = 0;                                                                   \
            if (!me) return;                                                               \
            for (c = 0; c < C; c++) {                                                      \
                a64[c] = j->scale[c] / sqrt((double)j->var[c] + j->eps);                   \
                fa[c] = (float)a64[c];                                                     \
                big |= hd_bn_overflows(a64[c]);                                            \
            }                                                                              \
            HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                       \
                hd_bnl_affine_##KS(x + n * j->xn + s * xp, xp, y + n * j->yn + s * yp, yp, \
                                   P, j->mean, fa, j->bias, C, j->act, j->lo, j->hi);      \
            if (big) hd_bnl_fix_##K(j, xp, yp, r0, r1, j->mean, NULL, a64, j->bias, NULL); \
        } else if (j->op == HD_BN_TRAINING) {                                              \
            double mean, dm, var;                                                          \
            int big = 0, two;                                                              \
            if (me) {                                                                      \
                /* sums of x - p and (x - p)^2, p the channel's pivot (hd_bnl_pivot_*: the \
                 * same for every thread), so that the float32 tile sums of offset data    \
                 * (3e4 + N(0, 1)) stay small */                                           \
                hd_bnl_pivot_##K(j, xp, d0, d1, d2, fm);                                   \
                for (c = 0; c < Cp; c++) d0[c] = d1[c] = 0.0;                              \
                HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                   \
                    hd_bnl_sum_##KS(x + n * j->xn + s * xp, xp, P, fm, C, 2, f0, f1, d0,   \
                                    d1);                                                   \
            }                                                                              \
            if (nthr > 1) L->barrier();                                                    \
            two = !hd_bnl_one_pass(L, team, M);   /* the same for every thread */          \
            if (me) {                                                                      \
                for (c = 0; c < C; c++) {                                                  \
                    double s1 = 0.0, s2 = 0.0;                                             \
                    for (u = 0; u < team; u++) {                                           \
                        const double* du = (const double*)(L->scratch + u * HD_BN_LAST_BLOCK(Cp)); \
                        s1 += du[c];                                                       \
                        s2 += du[Cp + c];                                                  \
                    }                                                                      \
                    a64[c] = (double)fm[c] + s1 / M;   /* the float64 mean, kept */        \
                    k2[c] = fm[c];                      /* the pivot, kept */              \
                    fm[c] = (float)a64[c];                                                 \
                    /* one pass: sum (x - fm)^2 from the sums about p, in this thread's    \
                     * d2 (no other thread reads it then) */                               \
                    if (!two) d2[c] = hd_bn_one_pass_q(s1, s2, M, k2[c], fm[c]);           \
                }                                                                          \
                if (two) {   /* pass 2: sum (x - fm)^2 into d2, read after the barrier */  \
                    for (c = 0; c < Cp; c++) d2[c] = 0.0;                                  \
                    HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                               \
                        hd_bnl_sum_##KS(x + n * j->xn + s * xp, xp, P, fm, C, 1, f0, f1,   \
                                        d2, NULL);                                         \
                }                                                                          \
            }                                                                              \
            /* (also when one pass sufficed: d0, d1 are read by every thread until here) */\
            if (nthr > 1) L->barrier();                                                    \
            if (!me) return;                                                               \
            {                                                                              \
                int need = 0;                    /* the most a channel's statistics need */ \
                for (c = 0; c < C; c++) {                                                  \
                    double q = two ? 0.0 : d2[c];                                          \
                    for (u = 0; two && u < team; u++)                                      \
                        q += ((const double*)(L->scratch + u * HD_BN_LAST_BLOCK(Cp)))[3 * Cp + c];\
                    /* as the channels-first rows: a64 the mean, d0 the variance */        \
                    f0[c] = (float)hd_bn_stats_need(k2[c], a64[c], q, M, j->eps, &mean,    \
                                                    &dm, &var);                            \
                    f1[c] = (float)hd_bn_wide(q);                                          \
                    need = f0[c] > need ? (int)f0[c] : need;                               \
                    a64[c] = mean;                                                         \
                    d0[c] = var;                                                           \
                }                                                                          \
                /* float64 where the float32 sums may have lost them, every such channel  \
                 * in one pass over the pixels (every thread the same sums) */             \
                if (need) {                                                                \
                    hd_bnl_moments64_##KS(j, xp, a64, d1, d3);                             \
                    for (c = 0; c < C; c++)                                                \
                        if (f0[c] != 0.0f) {                                               \
                            mean = a64[c];                                                 \
                            dm = mean - (double)fm[c];                                     \
                            hd_bn_stats_fix((int)f0[c], M, a64[c], d1[c], d3[c], &mean,    \
                                            &dm, &d0[c]);                                  \
                            a64[c] = mean;                                                 \
                        }                                                                  \
                }                                                                          \
            }                                                                              \
            for (c = 0; c < C; c++) {                                                      \
                double r_;                                                                 \
                mean = a64[c];                                                             \
                var = d0[c];                                                               \
                dm = mean - (double)fm[c];                                                 \
                /* y from the float64 variance, as in the channels-first rows */           \
                a64[c] = j->scale[c] / sqrt(var + j->eps);                                 \
                fa[c] = (float)a64[c];                                                     \
                /* the bias with the float64 mean's remainder, as in the channels-first   \
                 * rows: y = (x - fm) a + (bias - a (mean - fm)) */                        \
                r_ = hd_bn_finite(a64[c]) ? a64[c] * dm : 0.0; /* inf: y in float64 */      \
                k3[c] = r_ == 0.0 ? j->bias[c] : (float)((double)j->bias[c] - r_); /* -0.0 */ \
                d1[c] = mean;                    /* hd_bnl_fix_*'s of an infinite a */      \
                big |= hd_bn_y64(a64[c]) || f1[c] != 0.0f;                                 \
                if (ithr == 0) {                                                           \
                    j->mean_out[c] = (float)mean;                                          \
                    if (j->var_out64)                                                      \
                        j->var_out64[c] = var;                                             \
                    else                                                                   \
                        j->var_out[c] = (float)var;                                        \
                }                                                                          \
            }                                                                              \
            for (c = C; c < Cp; c++) k3[c] = 0.0f;                                         \
            HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                       \
                hd_bnl_affine_##KS(x + n * j->xn + s * xp, xp, y + n * j->yn + s * yp, yp, \
                                   P, fm, fa, k3, C, j->act, j->lo, j->hi);                \
            if (big) hd_bnl_fix_##K(j, xp, yp, r0, r1, fm, d1, a64, k3, f1);               \
        } else {                                                                           \
            const float* b = j->act ? j->bias : k3;                                        \
            int xh = 0;                          /* a k2 of xhat (hd_bn_folds) */          \
            int big = 0;                         /* a channel of hd_bnl_dxfix_* */         \
            if (me) {                                                                      \
                int wide = 0;                    /* a channel of hd_bnl_bsumfix_* */       \
                for (c = 0; c < Cp; c++) d0[c] = d1[c] = 0.0, k3[c] = 0.0f;                \
                for (c = 0; c < C; c++) {                                                  \
                    k2[c] = (float)((double)j->scale[c] * j->inv[c]);                      \
                    wide |= !(k2[c] - k2[c] == 0.0f);                                      \
                }                                                                          \
                HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                   \
                    hd_bnl_bsum_##KS(x + n * j->xn + s * xp, xp, dy + n * j->gn + s * gp,  \
                                     gp, P, j->mean, k2, b, C, j->act, j->lo, j->hi, f0,   \
                                     f1, d0, d1);                                          \
                if (wide && j->act) hd_bnl_bsumfix_##KS(L, r0, r1, d0, d1);                \
            }                                                                              \
            if (nthr > 1) L->barrier();                                                    \
            if (!me) return;                                                               \
            for (c = 0; c < C; c++) {                                                      \
                const double inv = j->inv[c], sc = j->scale[c];                            \
                double sg = 0.0, sgd = 0.0, k1, k2_, k3_, dscale;                          \
                int fold;                                                                  \
                for (u = 0; u < team; u++) {                                               \
                    const double* du = (const double*)(L->scratch + u * HD_BN_LAST_BLOCK(Cp)); \
                    sg += du[c];                                                           \
                    sgd += du[Cp + c];                                                     \
                }                                                                          \
                dscale = sgd * inv;                                                        \
                if (ithr == 0) {                                                           \
                    j->dbias[c] = (float)sg;                                               \
                    j->dscale[c] = (float)dscale;                                          \
                }                                                                          \
                /* the factors as in the channels-first rows (hd_bn_dx_factors): fm 1     \
                 * where k2 folds inv, else inv (the rows read fm only where some channel's \
                 * is not 1: xh); a factor beyond FLT_MAX: the channel's dx again in       \
                 * float64 after the pass (a64 1; this thread's a64 is not read by the     \
                 * others) */                                                              \
                a64[c] = hd_bn_dx_factors(sc, inv, sg, sgd, M, &k1, &k2_, &k3_, &fold);    \
                fm[c] = fold ? 1.0f : (float)inv;                                          \
                xh |= !fold;                                                               \
                fa[c] = (float)k1;                                                         \
                f1[c] = (float)k2_;                                                        \
                f0[c] = (float)k3_;                                                        \
                big |= a64[c] != 0.0;                                                      \
            }                                                                              \
            HD_BN_LAST_FOR_TILES(r0, r1, S, n, s, P)                                       \
                hd_bnl_dx_##KS(x + n * j->xn + s * xp, xp, dy + n * j->gn + s * gp, gp,    \
                               y + n * j->yn + s * yp, yp, P, j->mean, xh ? fm : NULL, k2, \
                               b, C, j->act, j->lo, j->hi, fa, f1, f0);                    \
            if (big) hd_bnl_dxfix_##KS(L, team, r0, r1, a64);                              \
        }                                                                                  \
    }

#define HD_BN_LAST_KIND(ISA, ATTR, K)                                                      \
    HD_BN_LAST_TILES(ISA, ATTR, K) HD_BN_LAST_TEAM(K##_##ISA, ATTR, K)

#define HD_BN_LAST_ISA(ISA, ATTR)                                                          \
    HD_BN_LAST_KIND(ISA, ATTR, f32) HD_BN_LAST_KIND(ISA, ATTR, bf16)                       \
    HD_BN_LAST_KIND(ISA, ATTR, f16)                                                        \
    typedef void (*hd_bnl_team_fn_##ISA)(const hd_bn_last_job*, int, int);                 \
    static const hd_bnl_team_fn_##ISA hd_bnl_teams_##ISA[3] = {                            \
        hd_bnl_team_f32_##ISA, hd_bnl_team_bf16_##ISA, hd_bnl_team_f16_##ISA};

HD_BN_LAST_SLOW(f32)
HD_BN_LAST_SLOW(bf16)
HD_BN_LAST_SLOW(f16)

HD_BN_LAST_ISA(base, )
#if HD_RELU_X86
HD_BN_LAST_ISA(avx512, HD_AVX512)
HD_BN_LAST_ISA(avx2, HD_AVX2)
#endif

#if HD_BN_VEC
/* The intrinsics: blocks of 64 channels (four vectors, the last ones masked) whose
 * per-channel operands and sums stay in registers over a tile's pixels, as oneDNN's jit
 * batchnorm keeps them (a pixel-by-pixel loop reloading them from L1 ran at 1.5x its
 * time). Masked-off lanes load as zero and are neither stored nor added. */
HD_AVX512V static inline __mmask16 hd_bnl_mask(ptrdiff_t left) {
    return left <= 0 ? (__mmask16)0 : hd_bn_tail(left);
}
/* the lanes of v that are not finite: v - v is NaN there, +0 elsewhere */
HD_AVX512V static inline __mmask16 hd_bnl_vbad(__m512 v) {
    return _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_NEQ_UQ);
}
#define HD_BNL_U 4
/* The code after it for one block of C <= 64 channels (cb = 0), k the lanes of its four
 * vectors: constants for C = 64 (unmasked instructions: 10 % faster), else masks. */
#define HD_BNL_BLOCK(C, ...)                                                               \
    do {                                                                                   \
        const ptrdiff_t cb = 0;                                                            \
        (void)cb;                                                                          \
        if ((C) == 16 * HD_BNL_U) {                                                        \
            const __mmask16 k[HD_BNL_U] = {0xffff, 0xffff, 0xffff, 0xffff};                \
            __VA_ARGS__                                                                    \
        } else {                                                                           \
            __mmask16 k[HD_BNL_U];                                                         \
            for (u = 0; u < HD_BNL_U; u++) k[u] = hd_bnl_mask((C) - 16 * u);               \
            __VA_ARGS__                                                                    \
        }                                                                                  \
    } while (0)
#define HD_BNL_LD(v, src, k)                                                               \
    __m512 v[HD_BNL_U];                                                                    \
    for (u = 0; u < HD_BNL_U; u++) v[u] = _mm512_maskz_loadu_ps(k[u], (src) + cb + 16 * u)
/* float64 sums s[cb..cb+64) += the float32 vectors v, where a vector has lanes */
#define HD_BNL_ADD64(s, v, k)                                                              \
    for (u = 0; u < HD_BNL_U; u++)                                                         \
        if (k[u]) {                                                                        \
            double* s_ = (s) + cb + 16 * u;                                                \
            _mm512_storeu_pd(s_, _mm512_add_pd(_mm512_loadu_pd(s_),                        \
                                               _mm512_cvtps_pd(_mm512_castps512_ps256(v[u])))); \
            _mm512_storeu_pd(s_ + 8, _mm512_add_pd(_mm512_loadu_pd(s_ + 8),                \
                _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[u]), 1))))); \
        }
/* The lanes of the float32 sums v[u] (lanes k[u]) that are not finite, for each of
 * them __VA_ARGS__ with ch its channel (which takes the channel's sums again in float64),
 * then the lane set to 0, so that HD_BNL_ADD64 adds nothing there. One test a vector. */
#define HD_BNL_SLOW_LANES(v, w, k, ...)                                                    \
    for (u = 0; u < HD_BNL_U; u++) {                                                       \
        const __mmask16 bad_ = (hd_bnl_vbad(v[u]) | hd_bnl_vbad(w[u])) & k[u];             \
        if (bad_) {                                                                        \
            int l_;                                                                        \
            for (l_ = 0; l_ < 16; l_++)                                                    \
                if (bad_ >> l_ & 1) {                                                      \
                    const ptrdiff_t ch = cb + 16 * u + l_;                                 \
                    __VA_ARGS__                                                            \
                }                                                                          \
            v[u] = _mm512_mask_mov_ps(v[u], bad_, _mm512_setzero_ps());                    \
            w[u] = _mm512_mask_mov_ps(w[u], bad_, _mm512_setzero_ps());                    \
        }                                                                                  \
    }
/* RELU_BWD of g under the forward yb = d * a + b (as hd_bn_drelu: lo < yb <= hi) */
#define HD_BNL_VMASK(g, d, a, b)                                                           \
    do {                                                                                   \
        __m512 yb_ = _mm512_fmadd_ps(d, a, b);                                             \
        __mmask16 in_ = _mm512_cmp_ps_mask(yb_, vlo, _CMP_GT_OQ)                           \
                        & _mm512_cmp_ps_mask(yb_, vhi, _CMP_LE_OQ);                        \
        g = _mm512_maskz_mov_ps(in_, g);                                                   \
        g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(yb_, yb_, _CMP_UNORD_Q), yb_);        \
    } while (0)

/* dx of one vector: k1 * g + k2 * xhat + k3, xhat = d * inv where xh, else d = x - m; g =
 * dy or its RELU_BWD where act (of d, as hd_bnl_bsum takes it) */
HD_AVX512V static inline __m512 hd_bnl_dxv(__m512 x, __m512 g, __m512 m, __m512 inv,
                                           __m512 a, __m512 b, __m512 k1, __m512 k2,
                                           __m512 k3, int act, int xh, __m512 vlo,
                                           __m512 vhi) {
    __m512 d = _mm512_sub_ps(x, m);
    if (act) HD_BNL_VMASK(g, d, a, b);
    return _mm512_fmadd_ps(k1, g, _mm512_fmadd_ps(k2, xh ? _mm512_mul_ps(d, inv) : d, k3));
}
/* Stores of two vectors, 32 elements from p (lanes k0, k1): bfloat16 rounds both with one
 * VCVTNE2PS2BF16 into one 64-byte store where every lane is stored (20 % faster than two
 * VCVTNEPS2BF16 and 32-byte stores at C = 64, in a C harness) */
HD_AVX512V static inline void hd_bnl_st2_f32(float* p, __mmask16 k0, __mmask16 k1, __m512 v0,
                                             __m512 v1, int nt) {
    if (nt && (k0 & k1) == 0xffff) {   /* p is 64-byte aligned (hd_bn_job.stream) */
        _mm512_stream_ps(p, v0);
        _mm512_stream_ps(p + 16, v1);
        return;
    }
    _mm512_mask_storeu_ps(p, k0, v0);
    _mm512_mask_storeu_ps(p + 16, k1, v1);
}
HD_AVX512V static inline void hd_bnl_st2_f16(uint16_t* p, __mmask16 k0, __mmask16 k1,
                                             __m512 v0, __m512 v1, int nt) {
    (void)nt;                          /* never streamed (stream is set for f32, bf16) */
    hd_bn_st_f16(p, k0, v0);
    hd_bn_st_f16(p + 16, k1, v1);
}
HD_AVX512BF16 static inline void hd_bnl_st2_bf16(uint16_t* p, __mmask16 k0, __mmask16 k1,
                                                 __m512 v0, __m512 v1, int nt) {
    if ((k0 & k1) == 0xffff) {
        const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
        if (nt)
            _mm512_stream_si512((void*)p, w);
        else
            _mm512_storeu_si512((void*)p, w);
    } else {
        hd_bn_st_bf16(p, k0, v0);
        hd_bn_st_bf16(p + 16, k1, v1);
    }
}
/* C > 64 channels, pixel by pixel: __VA_ARGS__ for channels [c, c + 32) (lanes ka, kb) of
 * the q pixels from p0, in groups of 4 pixels (then one at a time), so that the
 * per-channel operands are loaded from L1 once for 4 pixels (20-25 % faster than once a
 * pixel at C = 256 and 512, in a C harness); full vectors are unmasked. */
#define HD_BNL_GROUPS(C, P, ...)                                                           \
    for (ptrdiff_t p0 = 0, q = 0; p0 < (P); p0 += q) {                                     \
        ptrdiff_t c = 0;                                                                   \
        q = (P) - p0 >= hd_bnl_group ? hd_bnl_group : 1;                                   \
        for (; c + 32 <= (C); c += 32) {                                                   \
            const __mmask16 ka = 0xffff, kb = 0xffff;                                      \
            __VA_ARGS__                                                                    \
        }                                                                                  \
        if (c < (C)) {                                                                     \
            const __mmask16 ka = hd_bnl_mask((C) - c), kb = hd_bnl_mask((C) - c - 16);     \
            __VA_ARGS__                                                                    \
        }                                                                                  \
    }
/* the float32 vectors src[c + off, +16) under mask k */
#define HD_BNL_L(src, off, k) _mm512_maskz_loadu_ps(k, (src) + c + (off))
/* the mean, factor and bias of channels [c, c + 32) (m0, m1, a0, a1, b0, b1) */
#define HD_BNL_MAB                                                                         \
    const __m512 m0 = HD_BNL_L(m, 0, ka), m1 = HD_BNL_L(m, 16, kb);                        \
    const __m512 a0 = HD_BNL_L(a, 0, ka), a1 = HD_BNL_L(a, 16, kb);                        \
    const __m512 b0 = HD_BNL_L(b, 0, ka), b1 = HD_BNL_L(b, 16, kb);

/* One call of the intrinsic dx tiles (hd_bnl_dx_*_avx512i) with act, nt and xh constant,
 * inside hd_bnl_dx_*_avx512v (its arguments by name) */
#define HD_BNL_DXI(K, ACT, NT, XH)                                                         \
    hd_bnl_dx_##K##_avx512i(x, xp, dy, gp, dx, yp, P, m, inv, a, b, C, ACT, lo, hi, k1, k2, \
                            k3, NT, XH)
#define HD_BN_LAST_VEC(K, ATTR)                                                            \
    ATTR static void hd_bnl_sum_##K##_avx512v(                                             \
        const HD_TYPE_##K* x, ptrdiff_t xp, ptrdiff_t P, const float* m, ptrdiff_t C,      \
        int square, float* acc0, float* acc1, double* s0, double* s1) {                    \
        ptrdiff_t p, u;                                                                    \
        if (C > 16 * HD_BNL_U && square == 2) {   /* sums in acc0, squares in acc1 */      \
            memset(acc0, 0, (size_t)C * sizeof(float));                                    \
            memset(acc1, 0, (size_t)C * sizeof(float));                                    \
            HD_BNL_GROUPS(C, P, {                                                          \
                __m512 a0 = HD_BNL_L(acc0, 0, ka), a1 = HD_BNL_L(acc0, 16, kb);            \
                __m512 b0 = HD_BNL_L(acc1, 0, ka), b1 = HD_BNL_L(acc1, 16, kb);            \
                const __m512 m0 = HD_BNL_L(m, 0, ka), m1 = HD_BNL_L(m, 16, kb);            \
                for (p = p0; p < p0 + q; p++) {                                            \
                    const __m512 v0 = _mm512_sub_ps(hd_bn_ld_##K(x + p * xp + c, ka), m0); \
                    const __m512 v1 =                                                      \
                        _mm512_sub_ps(hd_bn_ld_##K(x + p * xp + c + 16, kb), m1);          \
                    a0 = _mm512_add_ps(a0, v0);                                            \
                    a1 = _mm512_add_ps(a1, v1);                                            \
                    b0 = _mm512_fmadd_ps(v0, v0, b0);                                      \
                    b1 = _mm512_fmadd_ps(v1, v1, b1);                                      \
                }                                                                          \
                _mm512_mask_storeu_ps(acc0 + c, ka, a0);                                   \
                _mm512_mask_storeu_ps(acc0 + c + 16, kb, a1);                              \
                _mm512_mask_storeu_ps(acc1 + c, ka, b0);                                   \
                _mm512_mask_storeu_ps(acc1 + c + 16, kb, b1);                              \
            })                                                                             \
            hd_bnl_sum_flush_##K(x, xp, P, m, C, 0, acc0, s0);                             \
            hd_bnl_sum_flush_##K(x, xp, P, m, C, 1, acc1, s1);                             \
            return;                                                                        \
        }                                                                                  \
        if (C > 16 * HD_BNL_U) {   /* sums in acc0 */                                      \
            memset(acc0, 0, (size_t)C * sizeof(float));                                    \
            HD_BNL_GROUPS(C, P, {                                                          \
                __m512 a0 = HD_BNL_L(acc0, 0, ka), a1 = HD_BNL_L(acc0, 16, kb);            \
                const __m512 m0 = HD_BNL_L(m, 0, ka), m1 = HD_BNL_L(m, 16, kb);            \
                for (p = p0; p < p0 + q; p++) {                                            \
                    __m512 v0 = hd_bn_ld_##K(x + p * xp + c, ka);                          \
                    __m512 v1 = hd_bn_ld_##K(x + p * xp + c + 16, kb);                     \
                    if (square) {                                                          \
                        v0 = _mm512_sub_ps(v0, m0);                                        \
                        v1 = _mm512_sub_ps(v1, m1);                                        \
                        a0 = _mm512_fmadd_ps(v0, v0, a0);                                  \
                        a1 = _mm512_fmadd_ps(v1, v1, a1);                                  \
                    } else {                                                               \
                        a0 = _mm512_add_ps(a0, _mm512_sub_ps(v0, m0));                     \
                        a1 = _mm512_add_ps(a1, _mm512_sub_ps(v1, m1));                     \
                    }                                                                      \
                }                                                                          \
                _mm512_mask_storeu_ps(acc0 + c, ka, a0);                                   \
                _mm512_mask_storeu_ps(acc0 + c + 16, kb, a1);                              \
            })                                                                             \
            hd_bnl_sum_flush_##K(x, xp, P, m, C, square, acc0, s0);                        \
            return;                                                                        \
        }                                                                                  \
        HD_BNL_BLOCK(C, {  /* C <= 64: one block, its operands in registers */             \
            const HD_TYPE_##K* xr = x + cb;                                                \
            __m512 s[HD_BNL_U], t[HD_BNL_U];   /* t: the squares of square 2 */            \
            for (u = 0; u < HD_BNL_U; u++) s[u] = t[u] = _mm512_setzero_ps();              \
            HD_BNL_LD(vm, m, k);                                                           \
            if (square == 2)                                                               \
                for (p = 0; p < P; p++, xr += xp)                                          \
                    for (u = 0; u < HD_BNL_U; u++) {                                       \
                        __m512 d = _mm512_sub_ps(hd_bn_ld_##K(xr + 16 * u, k[u]), vm[u]);  \
                        s[u] = _mm512_add_ps(s[u], d);                                     \
                        t[u] = _mm512_fmadd_ps(d, d, t[u]);                                \
                    }                                                                      \
            else if (square)                                                               \
                for (p = 0; p < P; p++, xr += xp)                                          \
                    for (u = 0; u < HD_BNL_U; u++) {                                       \
                        __m512 d = _mm512_sub_ps(hd_bn_ld_##K(xr + 16 * u, k[u]), vm[u]);  \
                        s[u] = _mm512_fmadd_ps(d, d, s[u]);                                \
                    }                                                                      \
            else                                                                           \
                for (p = 0; p < P; p++, xr += xp)                                          \
                    for (u = 0; u < HD_BNL_U; u++)                                         \
                        s[u] = _mm512_add_ps(                                              \
                            s[u], _mm512_sub_ps(hd_bn_ld_##K(xr + 16 * u, k[u]), vm[u]));  \
            HD_BNL_SLOW_LANES(s, t, k, {                                                   \
                s0[ch] += hd_bn_sum64_##K(x + ch, xp, P, m[ch], square & 1);               \
                if (square == 2) s1[ch] += hd_bn_sum64_##K(x + ch, xp, P, m[ch], 1);       \
            });                                                                            \
            HD_BNL_ADD64(s0, s, k);                                                        \
            if (square == 2) HD_BNL_ADD64(s1, t, k);                                       \
        });                                                                                \
    }                                                                                      \
    ATTR static inline __attribute__((always_inline)) void hd_bnl_affine_##K##_avx512i(    \
        const HD_TYPE_##K* x, ptrdiff_t xp, HD_TYPE_##K* y, ptrdiff_t yp, ptrdiff_t P,     \
        const float* m, const float* a, const float* b, ptrdiff_t C, int act, float lo,    \
        float hi, int nt) {                                                                \
        const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);                   \
        ptrdiff_t p, u;                                                                    \
        if (C > 16 * HD_BNL_U) {   /* the operands from L1 */                              \
            HD_BNL_GROUPS(C, P, {                                                          \
                HD_BNL_MAB                                                                 \
                for (p = p0; p < p0 + q; p++)                                              \
                    hd_bnl_st2_##K(y + p * yp + c, ka, kb,                                 \
                        hd_bn_affv(hd_bn_ld_##K(x + p * xp + c, ka), m0, a0, b0, act, vlo, vhi), \
                        hd_bn_affv(hd_bn_ld_##K(x + p * xp + c + 16, kb), m1, a1, b1, act, \
                                    vlo, vhi), nt);                                        \
            })                                                                             \
            return;                                                                        \
        }                                                                                  \
        HD_BNL_BLOCK(C, {  /* C <= 64: one block, its operands in registers */             \
            const HD_TYPE_##K* xr = x + cb;                                                \
            HD_TYPE_##K* yr = y + cb;                                                      \
            HD_BNL_LD(vm, m, k);                                                           \
            HD_BNL_LD(va, a, k);                                                           \
            HD_BNL_LD(vb, b, k);                                                           \
            for (p = 0; p < P; p++, xr += xp, yr += yp) {                                  \
                __m512 v[HD_BNL_U];                                                        \
                for (u = 0; u < HD_BNL_U; u++)                                             \
                    v[u] = hd_bn_affv(hd_bn_ld_##K(xr + 16 * u, k[u]), vm[u], va[u],      \
                                       vb[u], act, vlo, vhi);                              \
                for (u = 0; u < HD_BNL_U; u += 2)                                          \
                    hd_bnl_st2_##K(yr + 16 * u, k[u], k[u + 1], v[u], v[u + 1], nt);       \
            }                                                                              \
        });                                                                                \
    }                                                                                      \
    ATTR static inline __attribute__((always_inline)) void hd_bnl_bsum_##K##_avx512i(                                            \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        ptrdiff_t P, const float* m, const float* a, const float* b, ptrdiff_t C, int act, \
        float lo, float hi, float* acc0, float* acc1, double* s0, double* s1) {            \
        const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);                   \
        ptrdiff_t p, u;                                                                    \
        if (C > 16 * HD_BNL_U) {   /* sums in acc0, acc1 */                                \
            memset(acc0, 0, (size_t)C * sizeof(float));                                    \
            memset(acc1, 0, (size_t)C * sizeof(float));                                    \
            HD_BNL_GROUPS(C, P, {                                                          \
                __m512 g0 = HD_BNL_L(acc0, 0, ka), g1 = HD_BNL_L(acc0, 16, kb);            \
                __m512 e0 = HD_BNL_L(acc1, 0, ka), e1 = HD_BNL_L(acc1, 16, kb);            \
                HD_BNL_MAB                                                                 \
                for (p = p0; p < p0 + q; p++) {                                            \
                    __m512 d0 = _mm512_sub_ps(hd_bn_ld_##K(x + p * xp + c, ka), m0);       \
                    __m512 d1 = _mm512_sub_ps(hd_bn_ld_##K(x + p * xp + c + 16, kb), m1);  \
                    __m512 h0 = hd_bn_ld_##K(dy + p * gp + c, ka);                         \
                    __m512 h1 = hd_bn_ld_##K(dy + p * gp + c + 16, kb);                    \
                    if (act) {                                                             \
                        HD_BNL_VMASK(h0, d0, a0, b0);                                      \
                        HD_BNL_VMASK(h1, d1, a1, b1);                                      \
                    }                                                                      \
                    g0 = _mm512_add_ps(g0, h0);                                            \
                    g1 = _mm512_add_ps(g1, h1);                                            \
                    e0 = _mm512_fmadd_ps(h0, d0, e0);                                      \
                    e1 = _mm512_fmadd_ps(h1, d1, e1);                                      \
                }                                                                          \
                _mm512_mask_storeu_ps(acc0 + c, ka, g0);                                   \
                _mm512_mask_storeu_ps(acc0 + c + 16, kb, g1);                              \
                _mm512_mask_storeu_ps(acc1 + c, ka, e0);                                   \
                _mm512_mask_storeu_ps(acc1 + c + 16, kb, e1);                              \
            })                                                                             \
            if (hd_bnl_nonfinite(acc0, C) || hd_bnl_nonfinite(acc1, C))                    \
                for (p = 0; p < C; p++)                                                    \
                    if (!(hd_bn_finite(acc0[p]) && hd_bn_finite(acc1[p]))) {               \
                        double u0, u1;                                                     \
                        hd_bn_bsum64_##K##_avx512v(x + p, xp, dy + p, gp, P, m[p], a[p],   \
                                                   a[p], b[p], act, lo, hi, &u0, &u1);     \
                        s0[p] += u0;                                                       \
                        s1[p] += u1;                                                       \
                        acc0[p] = acc1[p] = 0.0f;                                          \
                    }                                                                      \
            for (p = 0; p < C; p++) {                                                      \
                s0[p] += acc0[p];                                                          \
                s1[p] += acc1[p];                                                          \
            }                                                                              \
            return;                                                                        \
        }                                                                                  \
        HD_BNL_BLOCK(C, {  /* C <= 64: one block, its operands in registers */             \
            const HD_TYPE_##K* xr = x + cb;                                                \
            const HD_TYPE_##K* gr = dy + cb;                                               \
            __m512 sg[HD_BNL_U], sd[HD_BNL_U];                                             \
            HD_BNL_LD(vm, m, k);                                                           \
            HD_BNL_LD(va, a, k);                                                           \
            HD_BNL_LD(vb, b, k);                                                           \
            for (u = 0; u < HD_BNL_U; u++) sg[u] = sd[u] = _mm512_setzero_ps();            \
            for (p = 0; p < P; p++, xr += xp, gr += gp)                                    \
                for (u = 0; u < HD_BNL_U; u++) {                                           \
                    __m512 d = _mm512_sub_ps(hd_bn_ld_##K(xr + 16 * u, k[u]), vm[u]);      \
                    __m512 g = hd_bn_ld_##K(gr + 16 * u, k[u]);                            \
                    if (act) HD_BNL_VMASK(g, d, va[u], vb[u]);                             \
                    sg[u] = _mm512_add_ps(sg[u], g);                                       \
                    sd[u] = _mm512_fmadd_ps(g, d, sd[u]);                                  \
                }                                                                          \
            HD_BNL_SLOW_LANES(sg, sd, k, {                                                 \
                double u0, u1;                                                             \
                hd_bn_bsum64_##K##_avx512v(x + ch, xp, dy + ch, gp, P, m[ch], a[ch], a[ch], \
                                           b[ch], act, lo, hi, &u0, &u1);                  \
                s0[ch] += u0;                                                              \
                s1[ch] += u1;                                                              \
            });                                                                            \
            HD_BNL_ADD64(s0, sg, k);                                                       \
            HD_BNL_ADD64(s1, sd, k);                                                       \
        });                                                                                \
    }                                                                                      \
    ATTR static inline __attribute__((always_inline)) void hd_bnl_dx_##K##_avx512i(        \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        HD_TYPE_##K* dx, ptrdiff_t yp, ptrdiff_t P, const float* m, const float* inv,      \
        const float* a, const float* b, ptrdiff_t C, int act, float lo, float hi,          \
        const float* k1, const float* k2, const float* k3, int nt, int xh) {               \
        const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);                   \
        const float* iv = xh ? inv : m;    /* not xh: inv NULL, the loads unused */        \
        ptrdiff_t p, u;                                                                    \
        if (C > 16 * HD_BNL_U) {   /* the operands from L1 */                              \
            HD_BNL_GROUPS(C, P, {                                                          \
                HD_BNL_MAB                                                                 \
                const __m512 i0 = HD_BNL_L(iv, 0, ka), i1 = HD_BNL_L(iv, 16, kb);          \
                const __m512 c10 = HD_BNL_L(k1, 0, ka), c11 = HD_BNL_L(k1, 16, kb);        \
                const __m512 c20 = HD_BNL_L(k2, 0, ka), c21 = HD_BNL_L(k2, 16, kb);        \
                const __m512 c30 = HD_BNL_L(k3, 0, ka), c31 = HD_BNL_L(k3, 16, kb);        \
                for (p = p0; p < p0 + q; p++)                                              \
                    hd_bnl_st2_##K(dx + p * yp + c, ka, kb,                                \
                        hd_bnl_dxv(hd_bn_ld_##K(x + p * xp + c, ka),                       \
                                   hd_bn_ld_##K(dy + p * gp + c, ka), m0, i0, a0, b0, c10, \
                                   c20, c30, act, xh, vlo, vhi),                           \
                        hd_bnl_dxv(hd_bn_ld_##K(x + p * xp + c + 16, kb),                  \
                                   hd_bn_ld_##K(dy + p * gp + c + 16, kb), m1, i1, a1, b1, \
                                   c11, c21, c31, act, xh, vlo, vhi), nt);                 \
            })                                                                             \
            return;                                                                        \
        }                                                                                  \
        HD_BNL_BLOCK(C, {  /* C <= 64: one block, its operands in registers */             \
            const HD_TYPE_##K* xr = x + cb;                                                \
            const HD_TYPE_##K* gr = dy + cb;                                               \
            HD_TYPE_##K* dr = dx + cb;                                                     \
            HD_BNL_LD(vm, m, k);                                                           \
            HD_BNL_LD(vi, iv, k);                                                          \
            HD_BNL_LD(va, a, k);                                                           \
            HD_BNL_LD(vb, b, k);                                                           \
            HD_BNL_LD(v1, k1, k);                                                          \
            HD_BNL_LD(v2, k2, k);                                                          \
            HD_BNL_LD(v3, k3, k);                                                          \
            for (p = 0; p < P; p++, xr += xp, gr += gp, dr += yp) {                        \
                __m512 v[HD_BNL_U];                                                        \
                for (u = 0; u < HD_BNL_U; u++)                                             \
                    v[u] = hd_bnl_dxv(hd_bn_ld_##K(xr + 16 * u, k[u]),                     \
                                      hd_bn_ld_##K(gr + 16 * u, k[u]), vm[u], vi[u], va[u], \
                                      vb[u], v1[u], v2[u], v3[u], act, xh, vlo, vhi);      \
                for (u = 0; u < HD_BNL_U; u += 2)                                          \
                    hd_bnl_st2_##K(dr + 16 * u, k[u], k[u + 1], v[u], v[u + 1], nt);       \
            }                                                                              \
        });                                                                                \
    }                                                                                      \
    /* act and nt (hd_bn_stream), and dx's xh (inv given), as constants in each copy of    \
     * the rows (no test of them per vector) */                                            \
    ATTR static void hd_bnl_affine_##K##_avx512v(                                          \
        const HD_TYPE_##K* x, ptrdiff_t xp, HD_TYPE_##K* y, ptrdiff_t yp, ptrdiff_t P,     \
        const float* m, const float* a, const float* b, ptrdiff_t C, int act, float lo,    \
        float hi) {                                                                        \
        const int a_ = !act ? 0 : hi == INFINITY ? 1 : 2;  /* 1: ReLU, one VMINPS less */ \
        switch (a_ + 3 * hd_bn_stream) {                                                  \
        case 0: hd_bnl_affine_##K##_avx512i(x, xp, y, yp, P, m, a, b, C, 0, lo, hi, 0); break; \
        case 1: hd_bnl_affine_##K##_avx512i(x, xp, y, yp, P, m, a, b, C, 1, lo, hi, 0); break; \
        case 2: hd_bnl_affine_##K##_avx512i(x, xp, y, yp, P, m, a, b, C, 2, lo, hi, 0); break; \
        case 3: hd_bnl_affine_##K##_avx512i(x, xp, y, yp, P, m, a, b, C, 0, lo, hi, 1); break; \
        case 4: hd_bnl_affine_##K##_avx512i(x, xp, y, yp, P, m, a, b, C, 1, lo, hi, 1); break; \
        default: hd_bnl_affine_##K##_avx512i(x, xp, y, yp, P, m, a, b, C, 2, lo, hi, 1);   \
        }                                                                                  \
    }                                                                                      \
    ATTR static void hd_bnl_bsum_##K##_avx512v(                                            \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        ptrdiff_t P, const float* m, const float* a, const float* b, ptrdiff_t C, int act, \
        float lo, float hi, float* acc0, float* acc1, double* s0, double* s1) {            \
        if (act)                                                                           \
            hd_bnl_bsum_##K##_avx512i(x, xp, dy, gp, P, m, a, b, C, 1, lo, hi, acc0, acc1, \
                                      s0, s1);                                             \
        else                                                                               \
            hd_bnl_bsum_##K##_avx512i(x, xp, dy, gp, P, m, a, b, C, 0, lo, hi, acc0, acc1, \
                                      s0, s1);                                             \
    }                                                                                      \
    ATTR static void hd_bnl_dx_##K##_avx512v(                                              \
        const HD_TYPE_##K* x, ptrdiff_t xp, const HD_TYPE_##K* dy, ptrdiff_t gp,           \
        HD_TYPE_##K* dx, ptrdiff_t yp, ptrdiff_t P, const float* m, const float* inv,      \
        const float* a, const float* b, ptrdiff_t C, int act, float lo, float hi,          \
        const float* k1, const float* k2, const float* k3) {                               \
        /* act, nt (hd_bn_stream) and xh (inv given) constants in each copy of the row */  \
        switch ((act ? 1 : 0) + 2 * hd_bn_stream + 4 * (inv != NULL)) {                    \
        case 0: HD_BNL_DXI(K, 0, 0, 0); break;                                             \
        case 1: HD_BNL_DXI(K, 1, 0, 0); break;                                             \
        case 2: HD_BNL_DXI(K, 0, 1, 0); break;                                             \
        case 3: HD_BNL_DXI(K, 1, 1, 0); break;                                             \
        case 4: HD_BNL_DXI(K, 0, 0, 1); break;                                             \
        case 5: HD_BNL_DXI(K, 1, 0, 1); break;                                             \
        case 6: HD_BNL_DXI(K, 0, 1, 1); break;                                             \
        default: HD_BNL_DXI(K, 1, 1, 1);                                                   \
        }                                                                                  \
    }                                                                                      \
    HD_BN_LAST_TEAM(K##_avx512v, ATTR, K)

HD_BN_LAST_VEC(f32, HD_AVX512V)
HD_BN_LAST_VEC(bf16, HD_AVX512BF16)
HD_BN_LAST_VEC(f16, HD_AVX512V)
#endif

/* The AVX2 rows (bn_rows_isa "avx2", _bn_rows.h), channels-last: bfloat16's y written with
 * intrinsics; the sums and dx, and float32's rows, are the compiler's AVX2 build
 * (channels-last bfloat16 backward already ran at 0.5-0.65x PyTorch's time). The 16
 * channels at c are widened in VPUNPCKLWD / VPUNPCKHWD order (0-3, 8-11 and 4-7, 12-15),
 * so the per-channel operands are copied into that order first, HD_BNL_AVX2_CH channels
 * at a time, for the P pixels of the call: 1.4-1.6x the compiler's build (256 channels,
 * 64 pixels, one thread, C harness), where putting x in channel order (VPERMQ in and out)
 * gained 1.1x. The same bits as that build. */
#if HD_BN_AVX2V
#define HD_BNL_AVX2_CH 256
/* o = the V (a multiple of 16) values at v in VPUNPCK order: per 16, 0-3 8-11 4-7 12-15 */
HD_AVX2 static inline void hd_bnl_unpack_order(const float* v, float* o, ptrdiff_t V) {
    ptrdiff_t c;
    for (c = 0; c < V; c += 16) {
        const __m256 lo = _mm256_loadu_ps(v + c), hi = _mm256_loadu_ps(v + c + 8);
        _mm256_store_ps(o + c, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_store_ps(o + c + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}
/* act a constant in each copy (hd_bnl_affine_bf16_avx2v picks one) */
HD_AVX2 static inline __attribute__((always_inline)) void hd_bnl_affine_bf16_avx2i(
    const uint16_t* x, ptrdiff_t xp, uint16_t* y, ptrdiff_t yp, ptrdiff_t P, const float* m,
    const float* a, const float* b, ptrdiff_t C, int act, float lo, float hi) {
    float pm[HD_BNL_AVX2_CH] __attribute__((aligned(32)));
    float pa[HD_BNL_AVX2_CH] __attribute__((aligned(32)));
    float pb[HD_BNL_AVX2_CH] __attribute__((aligned(32)));
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    ptrdiff_t c0, p, c;
    for (c0 = 0; c0 < C; c0 += HD_BNL_AVX2_CH) {
        const ptrdiff_t W = C - c0 < HD_BNL_AVX2_CH ? C - c0 : HD_BNL_AVX2_CH;
        const ptrdiff_t V = W & ~(ptrdiff_t)15;
        const uint16_t* xr = x + c0;
        uint16_t* yr = y + c0;
        hd_bnl_unpack_order(m + c0, pm, V);
        hd_bnl_unpack_order(a + c0, pa, V);
        hd_bnl_unpack_order(b + c0, pb, V);
        for (p = 0; p < P; p++, xr += xp, yr += yp) {
            for (c = 0; c < V; c += 16) {
                __m256 x0, x1;
                HD_BN_LD16_bf16(xr + c, x0, x1);
                HD_BN_ST16_bf16(
                    yr + c,
                    hd_bn_aff_avx2(x0, _mm256_load_ps(pm + c), _mm256_load_ps(pa + c),
                                   _mm256_load_ps(pb + c), act, vlo, vhi),
                    hd_bn_aff_avx2(x1, _mm256_load_ps(pm + c + 8), _mm256_load_ps(pa + c + 8),
                                   _mm256_load_ps(pb + c + 8), act, vlo, vhi));
            }
            for (; c < W; c++) {
                const float v = fmaf(hd_widen_bf16(xr[c]) - m[c0 + c], a[c0 + c], b[c0 + c]);
                yr[c] = hd_narrow_bf16(act ? hd_clamp(v, lo, hi) : v);
            }
        }
    }
}
HD_AVX2 static void hd_bnl_affine_bf16_avx2v(const uint16_t* x, ptrdiff_t xp, uint16_t* y,
                                             ptrdiff_t yp, ptrdiff_t P, const float* m,
                                             const float* a, const float* b, ptrdiff_t C,
                                             int act, float lo, float hi) {
    if (!act)
        hd_bnl_affine_bf16_avx2i(x, xp, y, yp, P, m, a, b, C, 0, lo, hi);
    else if (hi == INFINITY)
        hd_bnl_affine_bf16_avx2i(x, xp, y, yp, P, m, a, b, C, 1, lo, hi);
    else
        hd_bnl_affine_bf16_avx2i(x, xp, y, yp, P, m, a, b, C, 2, lo, hi);
}
#define hd_bnl_sum_bf16_avx2v hd_bnl_sum_bf16_avx2
#define hd_bnl_bsum_bf16_avx2v hd_bnl_bsum_bf16_avx2
#define hd_bnl_dx_bf16_avx2v hd_bnl_dx_bf16_avx2
HD_BN_LAST_TEAM(bf16_avx2v, HD_AVX2, bf16)
#endif

/* The channels-last share of thread ithr of nthr, rows chosen as in hd_bn_team. */
static void hd_bn_last_team(void* data, int ithr, int nthr) {
    const hd_bn_last_job* L = (const hd_bn_last_job*)data;
    const hd_bn_job* j = &L->j;
    hd_bnl_group = L->group;
#if HD_BN_VEC
    /* channels-last rows stream full vectors of every pixel: y 64-byte aligned at each
     * (the caller's stream), float32 or bfloat16 */
    hd_bn_stream = j->stream;
    if (j->isa == 2 && j->kind == 0) {
        hd_bnl_team_f32_avx512v(L, ithr, nthr);
        if (j->stream) _mm_sfence();   /* streamed stores seen before the team's end */
        return;
    }
    if (j->isa == 2 && j->kind == 1 && hd_bn_bf16_stores()) {
        hd_bnl_team_bf16_avx512v(L, ithr, nthr);
        if (j->stream) _mm_sfence();
        return;
    }
    if (j->isa == 2 && j->kind == 2) {
        hd_bnl_team_f16_avx512v(L, ithr, nthr);
        return;
    }
#endif
#if HD_BN_AVX2V
    if (j->isa == HD_BN_AVX2 && j->kind == 1) {
        hd_bnl_team_bf16_avx2v(L, ithr, nthr);
        return;
    }
#endif
#if HD_RELU_X86
    if (j->isa == HD_BN_AVX2_AUTO || j->isa == HD_BN_AVX2) {
        hd_bnl_teams_avx2[j->kind](L, ithr, nthr);
        return;
    }
    if (j->isa) {
        hd_bnl_teams_avx512[j->kind](L, ithr, nthr);
        return;
    }
#endif
    hd_bnl_teams_base[j->kind](L, ithr, nthr);
}

#endif /* HD_BN_LAST_H */
