/* Channels-first batchnorm of hipdnn_async.providers.cpu._kernels.bn_rows: training (+ a
 * fused clamp), inference, and backward (+ a fused RELU_BWD of the recomputed forward) on
 * activations whose spatial elements are contiguous (NCHW, NCDHW: S = H*W[*D] elements
 * per (n, c) row), float32 / bfloat16 / float16 (16-bit elements as raw bits), computed in
 * float32 with per-row sums gathered in float64.
 *
 * Why it exists: oneDNN 3.2's fast (jit) batchnorm reads only channel-blocked or
 * channels-last memory; on plain channels-first memory it has the generic ncsp_bnorm
 * (2-10x slower than PyTorch's own kernel), and the reorders around its jit kernel move
 * three more copies of the tensor through the caches. Here one thread owns whole channels
 * (the N rows of a channel: 25-100 KiB for ResNet-50 activations at batch 8) and runs all
 * passes of a channel back to back, so the second and third passes read from its L2.
 *
 * As in _relu_rows.h, every row loop is plain C that the compiler vectorises, built for the
 * baseline ISA, AVX-512 and AVX2 (chosen at run time by hd_relu_rows); the sums keep 32
 * float32 lanes (two 512-bit accumulators) so that the reduction vectorises without
 * reassociating anything the compiler may not. Unlike the bias + ReLU rows, the builds may
 * differ in the last bit: the AVX2 and AVX-512 ones contract a multiply and an add into
 * an FMA where GCC's default -ffp-contract=fast lets them (as the intrinsic rows do by
 * hand), the baseline SSE2 one has none; each is tested against float64 (one float32 or
 * bfloat16 ulp apart, measured).
 *
 * Finite data the float32 lanes cannot hold: a run's float32 sums (sum x, sum (x - m)^2;
 * backward sum g, sum g (x - m)) that come out non-finite are taken again in float64
 * (hd_bn_sum64_*, hd_bn_bsum64_*: one test per run of at most HD_BN_CHUNK elements, a
 * slow path only there), so that |x - mean| up to FLT_MAX (squares to 1e77) and sums of
 * values near FLT_MAX give the float64 statistics; a channel whose factor scale /
 * sqrt(variance + epsilon) overflows float32 (a variance + epsilon below (scale /
 * FLT_MAX)^2), or whose x - mean does (hd_bn_wide: x near +-FLT_MAX), has its y taken in
 * float64 (hd_bn_affine64_*). Non-finite data take the
 * slow path too and give the same non-finite results. A channel whose backward factors
 * overflow float32 (finite in float64: k1 = scale inv from inv ~ 3e38, the factor of x - m
 * or of xhat, k3 = -k1 sum g / M from dy ~ 1e30), where dx may be finite, has its dx taken
 * in float64 (hd_bn_dx64_*). Where a = float32(scale inv) itself overflows, backward's
 * RELU_BWD mask takes its forward value as inference's y there (hd_bn_affine64_*: 0 * inf
 * = NaN on x = mean in float32, the bias in float64): such a channel's sums and dx run the
 * float64 paths alone (HD_BN_FWD64).
 */
#ifndef HD_BN_ROWS_H
#define HD_BN_ROWS_H

#include <float.h>
#include <math.h>
#include "_relu_rows.h"

#define HD_BN_LANES 32
/* Sums run over chunks of at most HD_BN_CHUNK elements of a row, each added in float64:
 * float32 lanes over a whole 2048 x 2048 row of x = 1000 + N(0, 1) put y 3.3e-4 off. */
#define HD_BN_CHUNK 1024
#define HD_BN_RUN(S, o) ((S) - (o) < HD_BN_CHUNK ? (S) - (o) : HD_BN_CHUNK)
#if defined(__GNUC__) || defined(__clang__)
#define HD_BN_UNUSED __attribute__((unused))
#define HD_BN_NOINLINE __attribute__((noinline))
#else
#define HD_BN_UNUSED
#define HD_BN_NOINLINE
#endif

enum { HD_BN_TRAINING = 0, HD_BN_INFERENCE = 1, HD_BN_BACKWARD = 2 };

/* RELU_BWD of g under the forward value yb: g where lo < yb <= hi, NaN where yb is NaN
 * (as the float64 reference), else 0; selects, so that the loops around it vectorise. hi
 * is the backward job's inclusive top (hd_bn_job.hi): the float32 below the upper clip,
 * so that yb < upper strictly and yb = +inf (>= any clip) gives 0; +inf without an upper
 * clip, so that yb = +inf passes (relu(+inf) = +inf with slope 1: PyTorch's relu
 * backward and cuDNN pass dy there). */
HD_INLINE float hd_bn_drelu(float g, float yb, float lo, float hi) {
    g = (yb > lo && yb <= hi) ? g : 0.0f;
    return (yb != yb) ? yb : g;
}

/* Whether v is finite (neither infinite nor NaN). */
HD_INLINE int hd_bn_finite(double v) { return v - v == 0.0; }

/* a[] = b[] = +0.0, HD_BN_LANES each: through an opaque zero, as a constant fill became a
 * memset that GCC expands into REP STOSQ, whose start-up took a tenth of the time of
 * 14x14 rows' backward; this one is a few vector stores. */
HD_INLINE void hd_bn_zero_lanes(float* a, float* b) {
    float z = 0.0f;
    int j;
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+m"(z));
#endif
    for (j = 0; j < HD_BN_LANES; j++) a[j] = b[j] = z;
}

/* The HD_BN_LANES float32 lane sums at v added in float64, pairwise: halves added lane by
 * lane, which the compiler vectorises level by level. Added one after the other they were
 * 32 dependent float64 additions a row, most of the sums' time on 14x14 and 7x7 rows
 * (channels-first float32 training of 8 x 1024 x 7 x 7 took 5.5x inference's time). */
HD_INLINE double hd_bn_lanes64(const float* v) {
    double r[HD_BN_LANES / 2];
    int j;
    for (j = 0; j < HD_BN_LANES / 2; j++) r[j] = (double)v[j] + (double)v[j + HD_BN_LANES / 2];
    for (j = 0; j < HD_BN_LANES / 4; j++) r[j] += r[j + HD_BN_LANES / 4];
    for (j = 0; j < HD_BN_LANES / 8; j++) r[j] += r[j + HD_BN_LANES / 8];
    return (r[0] + r[2]) + (r[1] + r[3]);
}

/* The pivot p of a channel's sums of x - p (both row families): the median of its values
 * at its first, middle and last elements, 0 where one is not finite; a median, so that
 * one outlier (1e30 at the first pixel once put a channels-last mean 1.8 % off) is not
 * the pivot. */
HD_INLINE float hd_bn_median3(float a, float b, float c) {
    if (!(hd_bn_finite(a) && hd_bn_finite(b) && hd_bn_finite(c))) return 0.0f;
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* Whether a finite v rounds to an infinity in float32 (|v| >= FLT_MAX + half an ulp). */
HD_INLINE int hd_bn_overflows(double v) {
    const float f = (float)v;
    return hd_bn_finite(v) && f - f != 0.0f;
}

/* Whether a factor a (training's scale / sqrt(variance + epsilon), backward's k1 = scale
 * inv_variance) has its channel's y or dx taken in float64 (hd_bn_affine64_*,
 * hd_bn_dx64_*): a overflows float32 (hd_bn_overflows), or is infinite (an infinite
 * scale), where the float32 rows gave NaN for float64's +-inf (training's bias takes the
 * mean's remainder a (mean - mf): inf * 0; backward's k1 g + k2 t + k3: inf - inf). */
HD_INLINE int hd_bn_y64(double a) {
    const float f = (float)a;
    return f - f != 0.0f && a == a;
}

/* Whether backward's dx rows fold inv into k2 (hd_bn_dx_*): where v = k2 inv, the factor
 * of x - m, is 0 or a normal float32. Elsewhere (past FLT_MAX from inv ~ 1e20, x spread
 * over 1e-20, where dx ~ 1e20 is finite; subnormal; not finite) k2 multiplies xhat = (x -
 * m) inv, which takes one product more an element (3-15 % of the time of bfloat16
 * channels-last backward, 2-3 % channels-first, at batch 32 on 2 cores). */
HD_INLINE int hd_bn_folds(double v) {
    const double a = fabs(v);
    return a == 0.0 || (a >= FLT_MIN && a <= FLT_MAX);
}

/* Backward's dx factors of a channel from its sums sg = sum g, sgd = sum g (x - m), M
 * values, scale sc, inv_variance inv: dx = scale inv / M (M g - sg - xhat dscale), dscale
 * = sgd inv, xhat = (x - m) inv, as dx = k1 g + k2 t + k3, t = x - m where *fold (k2 of
 * x - m 0 or a normal float32: hd_bn_folds), else t = xhat (|xhat| <= sqrt(M) under the
 * batch's statistics: inv ~ 1e20 put k2 of x - m past FLT_MAX), so that k2 is finite
 * where dx is. Returns whether a factor overflows float32 all the same (k1 from inv ~
 * 3e38, k3 from sum g ~ 1e30 M): that channel's dx is taken in float64 (hd_bn_dx64_*).
 * The channels-first and the channels-last rows both take them from here. */
HD_INLINE int hd_bn_dx_factors(double sc, double inv, double sg, double sgd, double M,
                               double* k1, double* k2, double* k3, int* fold) {
    const double dscale = sgd * inv;
    *k1 = sc * inv;
    *k2 = -*k1 * inv * dscale / M;
    *fold = hd_bn_folds(*k2);
    if (!*fold) *k2 = -*k1 * dscale / M;
    *k3 = -*k1 * sg / M;
    /* k1 infinite (an infinite scale): k1 g + k2 t + k3 is inf - inf = NaN in float32,
     * where float64 gives +-inf */
    return hd_bn_y64(*k1) || hd_bn_overflows(*k2) || hd_bn_overflows(*k3);
}

/* The slow paths of one element kind K, in float64 (see the top of this file), on n
 * elements at element strides xs (ys, gs): a channels-first row (stride 1) or one
 * channel of channels-last pixels (the pixel stride).
 *   sum64:    sum (x - m), or with square sum (x - m)^2 (the terms in float64; the
 *             channels-first rows pass their pivot p (hd_bn_median3) for the plain
 *             sum)
 *   affine64: y = (x - m) * a + b in float64, rounded to float32, clamped as hd_clamp
 *             where act, then to the element kind */
#define HD_BN_SLOW_KIND(K)                                                                 \
    HD_BN_UNUSED static double hd_bn_sum64_##K(const HD_TYPE_##K* x, ptrdiff_t xs,        \
                                               ptrdiff_t n, double m, int square) {        \
        double s = 0.0, a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};                   \
        ptrdiff_t i = 0, k;                                                                \
        /* contiguous: 8 partial sums, which the compiler vectorises (a channel's float64 \
         * statistics once took 4-5x its float32 training time one sum at a time) */     \
        if (xs == 1 && square)                                                             \
            for (; i + 8 <= n; i += 8)                                                     \
                for (k = 0; k < 8; k++) {                                                  \
                    const double d = (double)HD_LOAD_##K(x[i + k]) - m;                    \
                    a[k] += d * d;                                                         \
                }                                                                          \
        else if (xs == 1)                                                                  \
            for (; i + 8 <= n; i += 8)                                                     \
                for (k = 0; k < 8; k++) a[k] += (double)HD_LOAD_##K(x[i + k]) - m;         \
        for (; i < n; i++) {                                                               \
            const double v = (double)HD_LOAD_##K(x[i * xs]);                               \
            s += square ? (v - m) * (v - m) : v - m;                                       \
        }                                                                                  \
        return s + (((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])));    \
    }                                                                                      \
    /* *s1 += sum (x - m), *s2 += sum (x - m)^2 over n contiguous elements, one pass */   \
    HD_BN_UNUSED static void hd_bn_moments64_##K(const HD_TYPE_##K* x, ptrdiff_t n,        \
                                                 double m, double* s1, double* s2) {       \
        double a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};                            \
        double b[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};                            \
        ptrdiff_t i = 0, k;                                                                \
        for (; i + 8 <= n; i += 8)                                                         \
            for (k = 0; k < 8; k++) {                                                      \
                const double d = (double)HD_LOAD_##K(x[i + k]) - m;                        \
                a[k] += d;                                                                 \
                b[k] += d * d;                                                             \
            }                                                                              \
        for (k = 0; i < n; i++, k++) {                                                     \
            const double d = (double)HD_LOAD_##K(x[i]) - m;                                \
            a[k] += d;                                                                     \
            b[k] += d * d;                                                                 \
        }                                                                                  \
        *s1 += ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));          \
        *s2 += ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));          \
    }                                                                                      \
    HD_BN_UNUSED static void hd_bn_affine64_##K(const HD_TYPE_##K* x, ptrdiff_t xs,        \
                                                HD_TYPE_##K* y, ptrdiff_t ys, ptrdiff_t n, \
                                                double m, double a, double b, int act,     \
                                                float lo, float hi) {                      \
        ptrdiff_t i;                                                                       \
        for (i = 0; i < n; i++) {                                                          \
            const float v = (float)(((double)HD_LOAD_##K(x[i * xs]) - m) * a + b);         \
            y[i * ys] = HD_STORE_##K(act ? hd_clamp(v, lo, hi) : v);                       \
        }                                                                                  \
    }
HD_BN_SLOW_KIND(f32)
HD_BN_SLOW_KIND(bf16)
HD_BN_SLOW_KIND(f16)

/* Training's statistics of a channel in float64 where its float32 sums may have lost them
 * (hd_bn_stats_*), both row families:
 * - a variance + epsilon below HD_BN_TINY_VAR: float32 squares of deviations below 1e-19
 *   fall under FLT_MIN and keep an absolute error of up to 2^-150 (7e-46) each, to 0
 *   below 1e-23, so a variance of 1e-46 came out 0 and, at epsilon 1e-77, y = (x - mean)
 *   / sqrt(epsilon) 1e14 off. Above it that error is under 2^-30 of variance + epsilon;
 *   below it only where epsilon is under 1e-36 too, which no network uses.
 * - a pivot p further than HD_BN_PIVOT_FAR root-mean-squares (of the sums about pass 1's
 *   mean) from that mean (outliers at most of the elements it is taken from: two of the
 *   three channels-first, two of the three sampled groups channels-last, hd_bnl_pivot_*):
 *   pass 1's float32 sums of x - p, at most 64 additions into an accumulator (32-lane
 *   sums of chunks of at most 1,024 elements; 64-pixel tiles), are off by up to about
 *   64 2^-24 mean |x - p| of the mean (two 1e10 among N(0, 1) values put it 5.4 % off
 *   channels-first, 0.2 % channels-last). Nearer, that bound is under 6.5e-5 of the spread. An element is at
 *   most sqrt(M) root-mean-squares from the mean, so only channels of over 256 values
 *   with such outliers take this path. The mean is then pass 1's plus the mean of the
 *   deviations from it in float64 (the corrected two-pass algorithm: Chan, Golub and
 *   LeVeque, "Algorithms for computing the sample variance", 1983), the variance about it.
 * Slow paths for such data alone (channels-last: two passes over the tensor for all such
 * channels at once): ordinary channels pay one test. */
#define HD_BN_TINY_VAR 1e-36
#define HD_BN_PIVOT_FAR 16.0

/* hd_bn_stats_need: a channel's mean, the remainder dm = mean - mf that y's bias takes,
 * and variance from pass 1's float64 mean mean1 (of sums of x - p, p the pivot), mf =
 * float32(mean1) and pass 2's q = sum (x - mf)^2, as sum (x - mf)^2 = sum (x - mean)^2 +
 * M (mean - mf)^2 (pass 1's mean where it is not finite: +inf data give inf, not inf +
 * NaN); returns what must be taken again in float64 (see above): 0 nothing, 1 the
 * variance about that mean, 2 the mean (mean1 plus the mean of x - mean1) and the
 * variance. Both row families take their decisions here. */
HD_INLINE int hd_bn_stats_need(float p, double mean1, double q, double M, double eps,
                               double* mean, double* dm, double* var) {
    const float mf = (float)mean1;
    double v;
    *mean = mean1;
    *dm = mean1 - (double)mf;
    v = q / M - *dm * *dm;
    *var = v < 0.0 ? 0.0 : v;
    if (!hd_bn_finite(mean1)) return 0;
    if (fabs((double)mf - (double)p) > HD_BN_PIVOT_FAR * sqrt(q / M)) return 2;
    return *var + eps < HD_BN_TINY_VAR;
}

/* The float64 statistics from the sums hd_bn_stats_need asked for: e = sum (x - mean1),
 * q2 = sum (x - mean1)^2 over M values; need 2 moves the mean too. */
HD_INLINE void hd_bn_stats_fix(int need, double M, double mean1, double e, double q2,
                               double* mean, double* dm, double* var) {
    const double de = e / M;
    double v = q2 / M - de * de;
    if (need == 2) {
        *mean = mean1 + de;
        *dm += de;
    }
    *var = v < 0.0 ? 0.0 : v;
}

/* Training's statistics in one pass (both row families): with s1 = sum (x - p) and s2 =
 * sum (x - p)^2 over M values, the variance is s2 / M - (s1 / M)^2 (the shifted one-pass
 * algorithm, Chan, Golub and LeVeque 1983) where the pivot p lies within one standard
 * deviation of the mean, (s1 / M)^2 <= s2 / M - (s1 / M)^2: the float32 sums of the
 * squares are then rounded relative to at most twice the variance, and the mean's
 * rounding moves the variance by at most twice the standard deviation times it, a few
 * times the rounding of sums about the mean, far inside the tolerances (FLOAT training
 * 4e-3). Not where a sum is not finite (pass 2 and its results, as before) or M is 0.
 * Saves pass 2's read of x: 32 x 256 x 28 x 28 float32 channels-last training 0.78x. */
HD_INLINE int hd_bn_one_pass(double s1, double s2, double M) {
    const double d = s1 / M;
    return M > 0.0 && hd_bn_finite(s1) && hd_bn_finite(s2) && 2.0 * d * d <= s2 / M;
}

/* Pass 2's q = sum (x - mf)^2 from the one-pass sums about p (see hd_bn_one_pass). */
HD_INLINE double hd_bn_one_pass_q(double s1, double s2, double M, float p, float mf) {
    const double e = (double)mf - (double)p;
    return s2 - 2.0 * e * s1 + M * e * e;
}

/* Whether a channel's y takes float64 (hd_bn_affine64_*): some |x - mf| is beyond FLT_MAX
 * (x near +-FLT_MAX on both sides of the mean), so float32's x - mf overflows while y is
 * finite; q = sum (x - mf)^2 >= FLT_MAX^2 wherever one does. */
HD_INLINE int hd_bn_wide(double q) {
    return q >= (double)FLT_MAX * (double)FLT_MAX;
}

/* hd_bn_stats: hd_bn_stats_need and the float64 sums it asks for, of one channels-first
 * channel (N x R runs of W contiguous elements, x + n xn + r xr the first of each), in
 * one pass: the deviations e and squares q2 from pass 1's mean, whose corrected mean is
 * mean1 + e / M and variance q2 / M - (e / M)^2 (float64: e / M is small beside the
 * spread unless pass 1 was off by 1e7 of it). */
#define HD_BN_STATS_KIND(K)                                                                \
    HD_BN_UNUSED static void hd_bn_stats_##K(const HD_TYPE_##K* x, ptrdiff_t N,            \
                                             ptrdiff_t xn, ptrdiff_t R, ptrdiff_t xr,      \
                                             ptrdiff_t W, float p, double mean1, double q, \
                                             double eps, double* mean, double* dm,         \
                                             double* var) {                                \
        const double M = (double)N * (double)R * (double)W;                                \
        const int need = hd_bn_stats_need(p, mean1, q, M, eps, mean, dm, var);             \
        if (need) {                                                                        \
            double e = 0.0, q2 = 0.0;                                                      \
            ptrdiff_t n, r;                                                                \
            for (n = 0; n < N; n++)                                                        \
                for (r = 0; r < R; r++)                                                    \
                    hd_bn_moments64_##K(x + n * xn + r * xr, W, mean1, &e, &q2);           \
            hd_bn_stats_fix(need, M, mean1, e, q2, mean, dm, var);                         \
        }                                                                                  \
    }
HD_BN_STATS_KIND(f32)
HD_BN_STATS_KIND(bf16)
HD_BN_STATS_KIND(f16)

typedef struct {
    int op;                        /* HD_BN_TRAINING / _INFERENCE / _BACKWARD */
    int kind;                      /* every activation's element kind: 0 f32, 1 bf16, 2 f16 */
    int isa;                       /* hd_bn_rows_isa() */
    ptrdiff_t N, C, S;             /* rows per channel, channels, elements per row */
    ptrdiff_t R, W;                /* a row's runs, R of W elements each (R W = S): 1 and S
                                      where its elements are one packed run */
    ptrdiff_t xr, yr, gr;          /* element strides between a row's runs (x, y, dy) */
    const void* x;                 /* x: element strides xn (between n) and xc (between c) */
    ptrdiff_t xn, xc;
    void* y;                       /* y (forward) or dx (backward) */
    ptrdiff_t yn, yc;
    const void* dy;                /* backward only */
    ptrdiff_t gn, gc;
    /* contiguous float32 vectors of C values; NULL where the op does not use them */
    const float* scale;            /* all ops */
    const float* bias;             /* forward; backward with drelu (the forward's bias) */
    const float* mean;             /* inference, backward: the given mean */
    const float* var;              /* inference: the running variance */
    const float* inv;              /* backward: the given inv_variance */
    float* mean_out;               /* training: the batch mean */
    float* var_out;                /* training: the biased batch variance (float32) */
    double* var_out64;             /* training: it in float64, where given (var_out unused) */
    float* dscale;                 /* backward */
    float* dbias;                  /* backward */
    double eps;                    /* training, inference */
    int act;                       /* forward: clamp y to [lo, hi]; backward: RELU_BWD mask */
    float lo, hi;                  /* backward: dy passes where lo < yb <= hi (hd_bn_drelu):
                                      hi the float32 below the upper clip, or +inf */
    int stream;                    /* y's (dx's) 64-byte-aligned full vectors stored
                                      non-temporally (hd_bn_stream); the caller sets it
                                      only where y is too large for the caches */
} hd_bn_job;

/* Whether this thread's intrinsic rows store y (dx) with MOVNTPS (hd_bn_job.stream, set on
 * entering the team). A store pass over a y larger than the caches otherwise reads every
 * line of y before writing it and evicts x with it (glibc's memcpy streams above 3/4 of
 * the L3 for the same reason); while y fits the caches, streaming is slower (1.3-1.9x at
 * 9.6-19 MB of float32 y, 2 cores, C harness). */
static __thread int hd_bn_stream = 0;

/* The float64 slow path of hd_bn_bsum (*sg, *sgd set): n elements of x and dy at strides
 * xs, gs; FWD(d, a, b) is the forward value of the RELU_BWD mask as the float32 rows that
 * fall back to it compute it, so that both take the same elements. Where a is not finite
 * (scale inv beyond FLT_MAX) it is HD_BN_FWD64 of a64 = scale inv instead: y as the
 * inference rows take it there (hd_bn_affine64_*, unclamped), the bias on x = m where d *
 * a is 0 * inf = NaN; the callers run such a channel's sums here alone (act), so that no
 * float32 sum of it is kept. */
#define HD_BN_FWD_MULADD(d, a, b) ((d) * (a) + (b))
#define HD_BN_FWD_FMA(d, a, b) fmaf((d), (a), (b))
#define HD_BN_FWD64(xv, m, a64, b)                                                         \
    ((float)(((double)(xv) - (double)(m)) * (a64) + (double)(b)))
/* RELU_BWD of g under the forward value of x: FWD's float32 one, or HD_BN_FWD64's where
 * a = float32(scale inv) is not finite (then a64 = scale inv); the float64 slow paths'
 * mask (HD_BN_BSUM64, HD_BN_DX64), so that both take the same elements */
#define HD_BN_SLOW_DRELU(FWD, g, xv, m, a, a64, b, lo, hi)                                 \
    hd_bn_drelu((g), !((a) - (a) == 0.0f) ? HD_BN_FWD64((xv), (m), (a64), (b))             \
                                          : FWD((xv) - (m), (a), (b)), (lo), (hi))
#define HD_BN_BSUM64(ATTR, K, NAME, FWD)                                                   \
    ATTR static void NAME(const HD_TYPE_##K* x, ptrdiff_t xs, const HD_TYPE_##K* dy,       \
                          ptrdiff_t gs, ptrdiff_t n, float m, float a, double a64, float b, \
                          int act, float lo, float hi, double* sg, double* sgd) {          \
        double s1 = 0.0, s2 = 0.0;                                                         \
        ptrdiff_t i;                                                                       \
        for (i = 0; i < n; i++) {                                                          \
            const float xv = HD_LOAD_##K(x[i * xs]);                                       \
            float g = HD_LOAD_##K(dy[i * gs]);                                             \
            if (act) g = HD_BN_SLOW_DRELU(FWD, g, xv, m, a, a64, b, lo, hi);               \
            s1 += g;                                                                       \
            s2 += (double)g * ((double)xv - (double)m);                                    \
        }                                                                                  \
        *sg = s1;                                                                          \
        *sgd = s2;                                                                         \
    }
/* The float64 slow path of backward's dx rows (hd_bn_dx_*) for a channel whose factors
 * overflow float32 (k1 = scale inv, k2 or k3 beyond FLT_MAX where dx is finite: inv ~ 3e38
 * from epsilon 1e-77, or dy ~ 1e30 under a k1 ~ 1e9): n elements at element strides xs, gs,
 * ys (a channels-first row, or one channel of channels-last pixels), dx = k1 (g - mg -
 * xhat mx), xhat = (x - m) inv, mg = sum g / M, mx = dscale / M, in float64, rounded to
 * float32, then to the element kind; g's RELU_BWD mask from FWD as in HD_BN_BSUM64 (of
 * a64 = k1 where a is not finite), so that it takes the same elements as the sums. */
#define HD_BN_DX64(ATTR, K, NAME, FWD)                                                     \
    ATTR static void NAME(const HD_TYPE_##K* x, ptrdiff_t xs, const HD_TYPE_##K* dy,       \
                          ptrdiff_t gs, HD_TYPE_##K* dx, ptrdiff_t ys, ptrdiff_t n,        \
                          float m, double inv, float a, float b, int act, float lo,        \
                          float hi, double k1, double mg, double mx) {                     \
        ptrdiff_t i;                                                                       \
        for (i = 0; i < n; i++) {                                                          \
            const float xv = HD_LOAD_##K(x[i * xs]);                                       \
            float g = HD_LOAD_##K(dy[i * gs]);                                             \
            if (act) g = HD_BN_SLOW_DRELU(FWD, g, xv, m, a, k1, b, lo, hi);                \
            dx[i * ys] = HD_STORE_##K(                                                     \
                (float)(k1 * ((double)g - mg - ((double)xv - (double)m) * inv * mx)));     \
        }                                                                                  \
    }

/* One channel's rows of one element kind K, for one ISA. */
#define HD_BN_KIND(ISA, ATTR, K)                                                           \
    HD_BN_ROWS_OF(ISA, ATTR, K)                                                            \
    HD_BN_CHANNEL(ISA, ATTR, K, hd_bn_affine_##K##_##ISA, hd_bn_dx_##K##_##ISA)

#define HD_BN_ROWS_OF(ISA, ATTR, K)                                                        \
    /* *s += sum (x - m)^2 (square 1) or sum (x - m) (square 0) over S elements, in 32     \
     * float32 lanes; square 2: both, the squares into *s2 */                              \
    ATTR HD_BN_UNUSED static void hd_bn_sums_##K##_##ISA(const HD_TYPE_##K* x, ptrdiff_t S,\
                                                         float m, int square, double* s,   \
                                                         double* s2) {                     \
        float a[HD_BN_LANES], b[HD_BN_LANES];                                              \
        ptrdiff_t i = 0, j;                                                                \
        double t = 0.0, u = 0.0;                                                           \
        hd_bn_zero_lanes(a, b);                                                            \
        if (square == 2) {                                                                 \
            for (; i + HD_BN_LANES <= S; i += HD_BN_LANES)                                 \
                for (j = 0; j < HD_BN_LANES; j++) {                                        \
                    float d = HD_LOAD_##K(x[i + j]) - m;                                   \
                    a[j] += d;                                                             \
                    b[j] += d * d;                                                         \
                }                                                                          \
            for (; i < S; i++) {                                                           \
                float d = HD_LOAD_##K(x[i]) - m;                                           \
                t += d;                                                                    \
                u += d * d;                                                                \
            }                                                                              \
            t += hd_bn_lanes64(a);                                                         \
            u += hd_bn_lanes64(b);                                                         \
            *s += hd_bn_finite(t) ? t : hd_bn_sum64_##K(x, 1, S, m, 0);                    \
            *s2 += hd_bn_finite(u) ? u : hd_bn_sum64_##K(x, 1, S, m, 1);                   \
            return;                                                                        \
        }                                                                                  \
        if (square) {                                                                      \
            for (; i + HD_BN_LANES <= S; i += HD_BN_LANES)                                 \
                for (j = 0; j < HD_BN_LANES; j++) {                                        \
                    float d = HD_LOAD_##K(x[i + j]) - m;                                   \
                    a[j] += d * d;                                                         \
                }                                                                          \
            for (; i < S; i++) {                                                           \
                float d = HD_LOAD_##K(x[i]) - m;                                           \
                t += d * d;                                                                \
            }                                                                              \
        } else {                                                                           \
            for (; i + HD_BN_LANES <= S; i += HD_BN_LANES)                                 \
                for (j = 0; j < HD_BN_LANES; j++) a[j] += HD_LOAD_##K(x[i + j]) - m;       \
            for (; i < S; i++) t += HD_LOAD_##K(x[i]) - m;                                 \
        }                                                                                  \
        t += hd_bn_lanes64(a);                                                             \
        *s += hd_bn_finite(t) ? t : hd_bn_sum64_##K(x, 1, S, m, square);                   \
    }                                                                                      \
    /* y = clamp((x - m) * a + b) where act, else (x - m) * a + b */                        \
    ATTR HD_BN_UNUSED static void hd_bn_affine_##K##_##ISA(const HD_TYPE_##K* x, HD_TYPE_##K* y,        \
                                              ptrdiff_t S, float m, float a, float b,      \
                                              int act, float lo, float hi) {               \
        ptrdiff_t i;                                                                       \
        if (act)                                                                           \
            for (i = 0; i < S; i++)                                                        \
                y[i] = HD_STORE_##K(hd_clamp((HD_LOAD_##K(x[i]) - m) * a + b, lo, hi));    \
        else                                                                               \
            for (i = 0; i < S; i++) y[i] = HD_STORE_##K((HD_LOAD_##K(x[i]) - m) * a + b);  \
    }                                                                                      \
    /* the sums of hd_bn_bsum in float64: the mask as the float32 rows of this build take \
     * it (the same expression, d * a + b) */                                              \
    HD_BN_BSUM64(ATTR HD_BN_UNUSED, K, hd_bn_bsum64_##K##_##ISA, HD_BN_FWD_MULADD)         \
    /* dx of a channel whose factors overflow float32, in float64 (mask as above) */      \
    HD_BN_DX64(ATTR HD_BN_UNUSED, K, hd_bn_dx64_##K##_##ISA, HD_BN_FWD_MULADD)             \
    /* sg += sum(g), sgd += sum(g * (x - m)); g = dy, or RELU_BWD(dy) of the forward        \
     * yb = (x - m) * a + b where act: dy where lo < yb <= hi, NaN where yb is, else 0 */  \
    ATTR HD_BN_UNUSED static void hd_bn_bsum_##K##_##ISA(const HD_TYPE_##K* x, const HD_TYPE_##K* dy,   \
                                            ptrdiff_t S, float m, float a, float b,        \
                                            int act, float lo, float hi, double* sg,       \
                                            double* sgd) {                                 \
        float ag[HD_BN_LANES], agd[HD_BN_LANES];                                           \
        ptrdiff_t i = 0, j;                                                                \
        double s1 = 0.0, s2 = 0.0;                                                         \
        hd_bn_zero_lanes(ag, agd);                                                         \
        for (; i + HD_BN_LANES <= S; i += HD_BN_LANES)                                     \
            for (j = 0; j < HD_BN_LANES; j++) {                                            \
                float d = HD_LOAD_##K(x[i + j]) - m;                                       \
                float g = HD_LOAD_##K(dy[i + j]);                                          \
                if (act) {                                                                 \
                    float yb = d * a + b;                                                  \
                    g = hd_bn_drelu(g, yb, lo, hi);                                        \
                }                                                                          \
                ag[j] += g;                                                                \
                agd[j] += g * d;                                                           \
            }                                                                              \
        for (; i < S; i++) {                                                               \
            float d = HD_LOAD_##K(x[i]) - m;                                               \
            float g = HD_LOAD_##K(dy[i]);                                                  \
            if (act) {                                                                     \
                float yb = d * a + b;                                                      \
                g = hd_bn_drelu(g, yb, lo, hi);                                            \
            }                                                                              \
            s1 += g;                                                                       \
            s2 += (double)g * d;                                                           \
        }                                                                                  \
        s1 += hd_bn_lanes64(ag);                                                           \
        s2 += hd_bn_lanes64(agd);                                                          \
        if (!(hd_bn_finite(s1) && hd_bn_finite(s2)))                                       \
            hd_bn_bsum64_##K##_##ISA(x, 1, dy, 1, S, m, a, a, b, act, lo, hi, &s1, &s2);   \
        *sg += s1;                                                                         \
        *sgd += s2;                                                                        \
    }                                                                                      \
    /* dx = k1 * g + k2 * xhat + k3, xhat = (x - m) * inv, or x - m where inv is 1 (k2     \
     * folded: hd_bn_folds); g as in hd_bn_bsum (its mask from yb = (x - m) * a + b, as    \
     * there). xh (inv not 1) a constant in each copy of the loops: a test of it in them   \
     * kept the compiler from vectorising some (bfloat16 channels-last DReLU backward took \
     * 6x the time) */                                                                     \
    ATTR HD_INLINE void hd_bn_dxi_##K##_##ISA(const HD_TYPE_##K* x, const HD_TYPE_##K* dy, \
                                              HD_TYPE_##K* dx, ptrdiff_t S, float m,       \
                                              float inv, float a, float b, int act,        \
                                              float lo, float hi, float k1, float k2,      \
                                              float k3, int xh) {                          \
        ptrdiff_t i;                                                                       \
        if (act)                                                                           \
            for (i = 0; i < S; i++) {                                                      \
                float d = HD_LOAD_##K(x[i]) - m;                                           \
                float g = HD_LOAD_##K(dy[i]);                                              \
                float yb = d * a + b;                                                      \
                g = hd_bn_drelu(g, yb, lo, hi);                                            \
                dx[i] = HD_STORE_##K(k1 * g + k2 * (xh ? d * inv : d) + k3);               \
            }                                                                              \
        else                                                                               \
            for (i = 0; i < S; i++) {                                                      \
                float d = HD_LOAD_##K(x[i]) - m;                                           \
                dx[i] = HD_STORE_##K(k1 * HD_LOAD_##K(dy[i]) + k2 * (xh ? d * inv : d)     \
                                     + k3);                                                \
            }                                                                              \
    }                                                                                      \
    ATTR HD_BN_UNUSED static void hd_bn_dx_##K##_##ISA(const HD_TYPE_##K* x, const HD_TYPE_##K* dy,     \
                                          HD_TYPE_##K* dx, ptrdiff_t S, float m,           \
                                          float inv, float a, float b, int act, float lo,  \
                                          float hi, float k1, float k2, float k3) {        \
        if (inv != 1.0f)                                                                   \
            hd_bn_dxi_##K##_##ISA(x, dy, dx, S, m, inv, a, b, act, lo, hi, k1, k2, k3, 1); \
        else                                                                               \
            hd_bn_dxi_##K##_##ISA(x, dy, dx, S, m, inv, a, b, act, lo, hi, k1, k2, k3, 0); \
    }

/* Ask for the bytes [p, p + n) in L2 (PREFETCHT1), one request a cache line: the next
 * channel's rows, read from memory while this channel's later passes run from L2 and
 * leave the memory bus idle. */
static inline void hd_bn_prefetch(const void* p, ptrdiff_t n) {
#if defined(__GNUC__) || defined(__clang__)
    const char* b = (const char*)p;
    for (ptrdiff_t o = 0; o < n; o += 64) __builtin_prefetch(b + o, 0, 2);
#else
    (void)p, (void)n;
#endif
}

/* Whether a channel's passes from L2 prefetch the next channel's x (and dy): where what
 * the job reads and writes (x and y; backward x, dy and dx) passes about 3/4 of a 32 MiB
 * L3 (HD_BN_PREFETCH_BYTES), and a row is short enough (HD_BN_PREFETCH_ROW bytes) that
 * the hardware's prefetcher, which follows one run, leaves the next channel's N runs, C *
 * S elements apart, to be read on demand. On 2 cores: 32 x 256 x 28 x 28 and 32 x 512 x
 * 14 x 14 training and backward ran at 0.82-0.91x the time without; in the caches (8 x
 * 256 x 28 x 28 float32 backward, 32 x 512 x 14 x 14 bfloat16) at 1.04-1.09x, as did
 * 56 x 56 float32 rows. */
#define HD_BN_PREFETCH_BYTES (24 << 20)
#define HD_BN_PREFETCH_ROW 8192
static inline int hd_bn_prefetches(const hd_bn_job* j, ptrdiff_t itemsize) {
    const double bytes = (double)j->N * (double)j->C * (double)j->S * (double)itemsize
                         * (j->op == HD_BN_BACKWARD ? 3.0 : 2.0);
    return bytes >= HD_BN_PREFETCH_BYTES && j->S * itemsize <= HD_BN_PREFETCH_ROW;
}

/* Channels a training or backward pass takes together (hd_bn_channel_*): where a row is
 * short (at most HD_BN_BLOCK_ROW bytes) and the channels are adjacent rows (NCHW), as many
 * as keep their x (and dy) within HD_BN_BLOCK_BYTES, at most HD_BN_BLOCK_MAX; else 1.
 * Short rows one channel at a time are N * 2 runs of a few hundred bytes, C * S elements
 * apart, which the hardware prefetcher hardly follows; a block reads runs B rows long.
 * On 2 cores (AMD EPYC, 1 MiB L2), float32 32 x 512 x 14 x 14: backward (+ DReLU)
 * 0.75-0.86x and training 0.74-0.9x the time of one channel at a time; 28 x 28 rows (3136
 * bytes, and bfloat16's 1568) ran up to 1.1x slower in blocks of 512 KiB, and of 1 MiB
 * 1.1-1.3x slower. */
#define HD_BN_BLOCK_MAX 64
#define HD_BN_BLOCK_BYTES (512 << 10)
#define HD_BN_BLOCK_ROW 1024
static inline ptrdiff_t hd_bn_block(const hd_bn_job* j) {
    const ptrdiff_t item = j->kind == 0 ? 4 : 2;
    const double per = (double)j->N * (double)j->S * (double)item
                       * (j->op == HD_BN_BACKWARD ? 2.0 : 1.0);
    const double b = per > 0.0 ? HD_BN_BLOCK_BYTES / per : 1.0;
    if (j->R != 1 || j->S * item > HD_BN_BLOCK_ROW || j->xc != j->S || j->yc != j->S
        || (j->op == HD_BN_BACKWARD && j->gc != j->S))
        return 1;
    return b < 1.0 ? 1 : b > HD_BN_BLOCK_MAX ? HD_BN_BLOCK_MAX : (ptrdiff_t)b;
}

/* Every pass of channels [c0, c0 + B) (see hd_bn_job): each pass runs over the block's
 * rows in (n, c) order, so that where the channels are adjacent (NCHW) it reads N runs of
 * B rows each instead of N * B short runs (hd_bn_block); each channel's sums still add its
 * rows in n order, as with B 1. Inference: a thread's share of the (n, c) rows in one
 * call (a call per row cost 1.1x the time on 196-element rows). AFFINE and DX name the
 * row functions of the stores (hd_bn_affine_*, hd_bn_dx_*). Training and
 * backward, whose per-channel state of a block fills kilobytes of stack, are functions of
 * their own: inside the per-row inference call that frame cost 1.15-1.3x its time on
 * 196-element rows (32 x 512 x 14 x 14). */
/* The locals of hd_bn_train_* and hd_bn_back_* (j, c0 and B in scope): block channels
 * c0's x0 and y0, the strides, the runs, read-ahead and M. */
#define HD_BN_BLOCK_LOCALS(K)                                                              \
        const HD_TYPE_##K* x0 = (const HD_TYPE_##K*)j->x + c0 * j->xc;                     \
        HD_TYPE_##K* y0 = (HD_TYPE_##K*)j->y + c0 * j->yc;                                 \
        const ptrdiff_t N = j->N, S = j->S, xn = j->xn, xc = j->xc, yn = j->yn, yc = j->yc; \
        /* a row (n, c): R runs of W elements, xr (yr, gr) apart (hd_bn_job) */            \
        const ptrdiff_t R = j->R, W = j->W, xr = j->xr, yr = j->yr;                        \
        const ptrdiff_t rowb = S * (ptrdiff_t)sizeof(*x0);                                 \
        /* the next block's rows are read ahead during the last pass over x (and dy) */   \
        const int pf = R == 1 && c0 + B < j->C && hd_bn_prefetches(j, (ptrdiff_t)sizeof(*x0)); \
        const double M = (double)N * (double)S;                                            \
        ptrdiff_t n, o, b, r;

/* Inference takes every channel's factor once per thread up to this many channels (a
 * float64 array on the thread's stack), else a row at a time. */
#define HD_BN_INFER_C 1024

#define HD_BN_CHANNEL(ISA, ATTR, K, AFFINE, DX)                                            \
    ATTR HD_BN_NOINLINE static void hd_bn_train_##K##_##ISA(const hd_bn_job* j,            \
                                                      ptrdiff_t c0, ptrdiff_t B) {         \
        HD_BN_BLOCK_LOCALS(K)                                                              \
        double s[HD_BN_BLOCK_MAX], q[HD_BN_BLOCK_MAX];                                 \
        double a64[HD_BN_BLOCK_MAX];                                                   \
        float mf[HD_BN_BLOCK_MAX], a[HD_BN_BLOCK_MAX], bf[HD_BN_BLOCK_MAX];            \
        int one[HD_BN_BLOCK_MAX];      /* statistics in one pass (hd_bn_one_pass) */   \
        /* the sum of x - p (and of its squares), p the channel's pivot                \
         * (hd_bn_median3): the float32 lanes                                          \
         * then add deviations, not the offset, and a constant channel's mean is p     \
         * exactly (its y the bias; the lanes' rounding of 32 x 8 x 28 x 28 values of  \
         * 30000.1 put the mean 5.9e-3 off and y 0.75) */                              \
        float p[HD_BN_BLOCK_MAX];                                                      \
        const ptrdiff_t mid = (N / 2) * xn + (S / 2 / W) * xr + (S / 2) % W;           \
        const ptrdiff_t end = (N - 1) * xn + ((S - 1) / W) * xr + (S - 1) % W;         \
        for (b = 0; b < B; b++) {                                                      \
            p[b] = hd_bn_median3(HD_LOAD_##K(x0[b * xc]), HD_LOAD_##K(x0[b * xc + mid]),\
                                 HD_LOAD_##K(x0[b * xc + end]));                       \
            s[b] = q[b] = 0.0;                                                         \
        }                                                                              \
        for (n = 0; n < N; n++)                                                        \
            for (b = 0; b < B; b++)                                                    \
                for (r = 0; r < R; r++)                                                \
                    for (o = 0; o < W; o += HD_BN_CHUNK)                               \
                        hd_bn_sums_##K##_##ISA(x0 + b * xc + n * xn + r * xr + o,      \
                                               HD_BN_RUN(W, o), p[b], 2, &s[b], &q[b]); \
        for (b = 0; b < B; b++) {                                                      \
            const double s1 = s[b], s2 = q[b];                                         \
            s[b] = (double)p[b] + s1 / M;                    /* pass 1's mean */       \
            mf[b] = (float)s[b];                                                       \
            one[b] = hd_bn_one_pass(s1, s2, M);                                        \
            q[b] = one[b] ? hd_bn_one_pass_q(s1, s2, M, p[b], mf[b]) : 0.0;            \
        }                                                                              \
        /* pass 2 for the channels whose pivot is too far from the mean: sum (x - mf)^2 */ \
        for (n = 0; n < N; n++)                                                        \
            for (b = 0; b < B; b++) {                                                  \
                const HD_TYPE_##K* x = x0 + b * xc + n * xn;                           \
                if (one[b]) continue;                                                  \
                for (r = 0; r < R; r++)                                                \
                    for (o = 0; o < W; o += HD_BN_CHUNK)                               \
                        hd_bn_sums_##K##_##ISA(x + r * xr + o, HD_BN_RUN(W, o), mf[b], \
                                               1, &q[b], NULL);                        \
                if (pf && c0 + b + B < j->C) hd_bn_prefetch(x + B * xc, rowb);         \
            }                                                                          \
        for (b = 0; b < B; b++) {                                                      \
            double mean, dm, var, r_;                                                  \
            hd_bn_stats_##K(x0 + b * xc, N, xn, R, xr, W, p[b], s[b], q[b], j->eps,    \
                            &mean, &dm, &var);                                         \
            s[b] = mean;                           /* for hd_bn_affine64_* */          \
            j->mean_out[c0 + b] = (float)mean;                                         \
            if (j->var_out64)                                                          \
                j->var_out64[c0 + b] = var;                                            \
            else                                                                       \
                j->var_out[c0 + b] = (float)var;   /* +inf above FLT_MAX (correctly    \
                                                      rounded) */                      \
            /* y from the float64 variance (a of a variance beyond float32: finite);   \
             * y = (x - mf) a + (bias - a (mean - mf)): the float64 mean's remainder   \
             * in the bias (x = 3e4 + 0.2 N(0, 1): y 4.3e-3 off without, the float32   \
             * mean's rounding over sigma) */                                          \
            a64[b] = j->scale[c0 + b] / sqrt(var + j->eps);                            \
            a[b] = (float)a64[b];                                                      \
            r_ = a64[b] * dm;                                                          \
            bf[b] = r_ == 0.0 ? j->bias[c0 + b]                      /* -0.0 kept */   \
                              : (float)((double)j->bias[c0 + b] - r_);                 \
        }                                                                              \
        for (n = 0; n < N; n++)                                                        \
            for (b = 0; b < B; b++)                                                    \
                for (r = 0; r < R; r++) {                                              \
                    const HD_TYPE_##K* x = x0 + b * xc + n * xn + r * xr;              \
                    HD_TYPE_##K* y = y0 + b * yc + n * yn + r * yr;                    \
                    /* the next block's rows, read ahead by pass 2 where it ran */     \
                    if (one[b] && pf && c0 + b + B < j->C) hd_bn_prefetch(x + B * xc, rowb); \
                    if (hd_bn_y64(a64[b]) || hd_bn_wide(q[b]))                         \
                        hd_bn_affine64_##K(x, 1, y, 1, W, s[b], a64[b],                \
                                           j->bias[c0 + b], j->act, j->lo, j->hi);     \
                    else                                                               \
                        AFFINE(x, y, W, mf[b], a[b], bf[b], j->act, j->lo, j->hi);     \
                }                                                                      \
    }                                                                                  \
    ATTR HD_BN_NOINLINE static void hd_bn_back_##K##_##ISA(const hd_bn_job* j,             \
                                                      ptrdiff_t c0, ptrdiff_t B) {         \
        HD_BN_BLOCK_LOCALS(K)                                                              \
        const HD_TYPE_##K* g0 = (const HD_TYPE_##K*)j->dy + c0 * j->gc;                \
        const ptrdiff_t gn = j->gn, gc = j->gc, gr = j->gr;                            \
        double sg[HD_BN_BLOCK_MAX], sgd[HD_BN_BLOCK_MAX];                              \
        double k1[HD_BN_BLOCK_MAX], k2[HD_BN_BLOCK_MAX], k3[HD_BN_BLOCK_MAX];          \
        float a[HD_BN_BLOCK_MAX], bb[HD_BN_BLOCK_MAX];                                 \
        /* wide: a beyond float32: the mask's forward value in float64 (HD_BN_FWD64),  \
         * the sums in float64 alone (the float32 ones of d * inf may be finite);      \
         * fold: the rows take inv as 1 where k2 folds it */                           \
        int wide[HD_BN_BLOCK_MAX], fold[HD_BN_BLOCK_MAX], slow[HD_BN_BLOCK_MAX];       \
        for (b = 0; b < B; b++) {                                                      \
            a[b] = (float)((double)j->scale[c0 + b] * (double)j->inv[c0 + b]);         \
            bb[b] = j->act ? j->bias[c0 + b] : 0.0f;                                   \
            wide[b] = j->act && !(a[b] - a[b] == 0.0f);                                \
            sg[b] = sgd[b] = 0.0;                                                      \
        }                                                                              \
        for (n = 0; n < N; n++)                                                        \
            for (b = 0; b < B; b++) {                                                  \
                const HD_TYPE_##K* x = x0 + b * xc + n * xn;                           \
                const HD_TYPE_##K* dy = g0 + b * gc + n * gn;                          \
                const float m = j->mean[c0 + b];                                       \
                const double inv = j->inv[c0 + b], sc = j->scale[c0 + b];              \
                for (r = 0; r < R; r++)                                                \
                    for (o = 0; o < W; o += HD_BN_CHUNK)                               \
                        if (wide[b]) {                                                 \
                            double u0, u1;                                             \
                            hd_bn_bsum64_##K##_##ISA(x + r * xr + o, 1, dy + r * gr + o,\
                                                     1, HD_BN_RUN(W, o), m, a[b],      \
                                                     sc * inv, bb[b], j->act, j->lo,   \
                                                     j->hi, &u0, &u1);                 \
                            sg[b] += u0;                                               \
                            sgd[b] += u1;                                              \
                        } else                                                         \
                            hd_bn_bsum_##K##_##ISA(x + r * xr + o, dy + r * gr + o,    \
                                                   HD_BN_RUN(W, o), m, a[b], bb[b],    \
                                                   j->act, j->lo, j->hi, &sg[b],       \
                                                   &sgd[b]);                           \
            }                                                                          \
        for (b = 0; b < B; b++) {                                                      \
            const double inv = j->inv[c0 + b], sc = j->scale[c0 + b];                  \
            j->dbias[c0 + b] = (float)sg[b];                                           \
            j->dscale[c0 + b] = (float)(sgd[b] * inv);                                 \
            slow[b] = hd_bn_dx_factors(sc, inv, sg[b], sgd[b], M, &k1[b], &k2[b],      \
                                       &k3[b], &fold[b]);                              \
        }                                                                              \
        for (n = 0; n < N; n++)                                                        \
            for (b = 0; b < B; b++) {                                                  \
                const HD_TYPE_##K* x = x0 + b * xc + n * xn;                           \
                const HD_TYPE_##K* dy = g0 + b * gc + n * gn;                          \
                HD_TYPE_##K* dx = y0 + b * yc + n * yn;                                \
                const float m = j->mean[c0 + b];                                       \
                const double inv = j->inv[c0 + b];                                     \
                for (r = 0; r < R; r++)                                                \
                    if (slow[b])                                                       \
                        hd_bn_dx64_##K##_##ISA(x + r * xr, 1, dy + r * gr, 1,          \
                                               dx + r * yr, 1, W, m, inv, a[b], bb[b], \
                                               j->act, j->lo, j->hi, k1[b], sg[b] / M, \
                                               sgd[b] * inv / M);                      \
                    else                                                               \
                        DX(x + r * xr, dy + r * gr, dx + r * yr, W, m,                 \
                           fold[b] ? 1.0f : (float)inv, a[b], bb[b], j->act, j->lo,    \
                           j->hi, (float)k1[b], (float)k2[b], (float)k3[b]);           \
                if (pf && c0 + b + B < j->C) {                                         \
                    hd_bn_prefetch(x + B * xc, rowb);                                  \
                    hd_bn_prefetch(dy + B * gc, rowb);                                 \
                }                                                                      \
            }                                                                          \
    }                                                                                  \
    /* inference: the rows [r0, r1) in (n, c) order, one call for a thread's share */      \
    ATTR static void hd_bn_infer_##K##_##ISA(const hd_bn_job* j, ptrdiff_t r0,             \
                                             ptrdiff_t r1) {                               \
        const HD_TYPE_##K* x = (const HD_TYPE_##K*)j->x;                                   \
        HD_TYPE_##K* y = (HD_TYPE_##K*)j->y;                                               \
        /* a row (n, c): R runs of W elements, xr (yr) apart (hd_bn_job) */                \
        const ptrdiff_t C = j->C, R = j->R, W = j->W, xr = j->xr, yr = j->yr;              \
        ptrdiff_t n = r0 / C, c = r0 % C, i, r;                                            \
        /* every channel's factor first where this share has more rows than channels: a  \
         * division and a square root a row took a third of 14x14 rows' time */          \
        double f[HD_BN_INFER_C];                                                           \
        const int pre = C <= HD_BN_INFER_C && r1 - r0 > C;                                 \
        if (pre)                                                                           \
            for (i = 0; i < C; i++) f[i] = j->scale[i] / sqrt((double)j->var[i] + j->eps); \
        for (i = r0; i < r1; i++) {                                                        \
            const double a64 = pre ? f[c] : j->scale[c] / sqrt((double)j->var[c] + j->eps); \
            const float a = (float)a64;                                                    \
            const HD_TYPE_##K* xi = x + n * j->xn + c * j->xc;                             \
            HD_TYPE_##K* yi = y + n * j->yn + c * j->yc;                                   \
            for (r = 0; r < R; r++)                                                        \
                if (hd_bn_overflows(a64))                                                  \
                    hd_bn_affine64_##K(xi + r * xr, 1, yi + r * yr, 1, W, j->mean[c], a64, \
                                       j->bias[c], j->act, j->lo, j->hi);                  \
                else                                                                       \
                    AFFINE(xi + r * xr, yi + r * yr, W, j->mean[c], a, j->bias[c], j->act, \
                           j->lo, j->hi);                                                  \
            if (++c == C) c = 0, n++;                                                      \
        }                                                                                  \
    }                                                                                      \
    /* training, backward: channels [c0, c0 + B); inference: the rows [c0, c0 + B) */  \
    ATTR static void hd_bn_channel_##K##_##ISA(const hd_bn_job* j, ptrdiff_t c0,           \
                                               ptrdiff_t B) {                              \
        if (j->op == HD_BN_TRAINING)                                                       \
            hd_bn_train_##K##_##ISA(j, c0, B);                                             \
        else if (j->op == HD_BN_INFERENCE)                                                 \
            hd_bn_infer_##K##_##ISA(j, c0, c0 + B);                                        \
        else                                                                               \
            hd_bn_back_##K##_##ISA(j, c0, B);                                              \
    }

#define HD_BN_ISA(ISA, ATTR)                                                               \
    HD_BN_KIND(ISA, ATTR, f32) HD_BN_KIND(ISA, ATTR, bf16) HD_BN_KIND(ISA, ATTR, f16)      \
    typedef void (*hd_bn_channel_fn_##ISA)(const hd_bn_job*, ptrdiff_t, ptrdiff_t);        \
    static const hd_bn_channel_fn_##ISA hd_bn_channels_##ISA[3] = {                        \
        hd_bn_channel_f32_##ISA, hd_bn_channel_bf16_##ISA, hd_bn_channel_f16_##ISA};

HD_BN_ISA(base, )
#if HD_RELU_X86
HD_BN_ISA(avx512, HD_AVX512)
HD_BN_ISA(avx2, HD_AVX2)
#endif

/* The AVX-512 rows written with intrinsics, where the compiler's own vectorisation of
 * the loops above falls short: rows shorter than a few hundred elements (14x14 = 196) end
 * in masked vectors instead of scalar tails, and bfloat16 results are rounded by
 * VCVTNEPS2BF16 (16 float32 values to nearest-even in one instruction, as oneDNN's bf16
 * kernels do, where hd_narrow_bf16 is a dozen integer operations per vector and bounds
 * these memory-speed loops) on CPUs with AVX512_BF16. VCVTNEPS2BF16 differs from
 * hd_narrow_bf16 only on float32 subnormals (|v| < 2**-126), which it takes as zero.
 * Masked-off lanes load as zero and are zeroed again after every operation that could
 * make them non-zero, so they add nothing to the sums. */
#if HD_RELU_X86 && (defined(__clang__) || __GNUC__ >= 10)
#define HD_BN_VEC 1
#include <immintrin.h>
#define HD_AVX512V __attribute__((target("avx512f,avx512bw,avx512vl")))
#define HD_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

HD_AVX512V static inline __mmask16 hd_bn_tail(ptrdiff_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u);
}
HD_AVX512V static inline __m512 hd_bn_ld_f32(const float* p, __mmask16 k) {
    return _mm512_maskz_loadu_ps(k, p);
}
HD_AVX512V static inline void hd_bn_st_f32(float* p, __mmask16 k, __m512 v) {
    _mm512_mask_storeu_ps(p, k, v);
}
HD_AVX512V static inline __m512 hd_bn_ld_bf16(const uint16_t* p, __mmask16 k) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
}
HD_AVX512BF16 static inline void hd_bn_st_bf16(uint16_t* p, __mmask16 k, __m512 v) {
    _mm256_mask_storeu_epi16(p, k, (__m256i)_mm512_cvtneps_pbh(v));
}
/* float16: VCVTPH2PS and VCVTPS2PH (AVX-512F) convert exactly, to nearest-even,
 * subnormals included (hd_widen_f16 / hd_narrow_f16 are a dozen integer operations per
 * vector: the portable float16 backward took 18x float32's time) */
HD_AVX512V static inline __m512 hd_bn_ld_f16(const uint16_t* p, __mmask16 k) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
}
HD_AVX512V static inline void hd_bn_st_f16(uint16_t* p, __mmask16 k, __m512 v) {
    _mm256_mask_storeu_epi16(p, k,
                             _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* Streamed stores (hd_bn_stream) of one full float32 vector at a 64-byte-aligned p; rows
 * of 16-bit elements are never streamed (HD_BN_NT_*: none of ResNet-50's passes the
 * caches in 16 bits at batch 32). */
#define HD_BN_NT_f32 1
#define HD_BN_NT_bf16 0
#define HD_BN_NT_f16 0
HD_AVX512V static inline void hd_bn_nt_f32(float* p, __m512 v) { _mm512_stream_ps(p, v); }
/* unreachable while HD_BN_NT_bf16 / _f16 are 0; a plain store, so that turning one on
 * without a streamed version would lose no value */
HD_AVX512BF16 static inline void hd_bn_nt_bf16(uint16_t* p, __m512 v) {
    hd_bn_st_bf16(p, (__mmask16)0xffff, v);
}
HD_AVX512V static inline void hd_bn_nt_f16(uint16_t* p, __m512 v) {
    hd_bn_st_f16(p, (__mmask16)0xffff, v);
}
/* the float32 elements of a row at p (of S) before its first 64-byte boundary; all S
 * where p is off a 4-byte boundary (then no element of the row is on one, and MOVNTPS
 * would fault: bn_rows streams no such row, this keeps the rows safe by themselves) */
static inline ptrdiff_t hd_bn_to_line(const float* p, ptrdiff_t S) {
    const ptrdiff_t h = (uintptr_t)p & 3 ? S : (ptrdiff_t)((64 - ((uintptr_t)p & 63)) & 63) / 4;
    return h < S ? h : S;
}
/* the 16 lanes of a and b, summed in float64 */
HD_AVX512V static inline double hd_bn_hsum(__m512 a, __m512 b) {
    __m512d lo = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)),
                               _mm512_cvtps_pd(_mm512_castps512_ps256(b)));
    __m512d hi = _mm512_add_pd(
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))),
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b), 1))));
    return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

/* y of one vector: (x - m) * a + b, clamped as hd_clamp where act (2; 1: below only, the
 * upper clip +inf): VMAXPS(lo, v) is
 * lo > v ? lo : v and VMINPS(hi, v) is hi < v ? hi : v, v where v is NaN (bit for bit
 * hd_clamp's selects, in 2 instructions instead of 4: bfloat16 training + ReLU ran at 1.9x
 * the time of training without); -0.0 + 0.0 is +0.0 */
HD_AVX512V static inline __m512 hd_bn_affv(__m512 x, __m512 m, __m512 a, __m512 b, int act,
                                           __m512 vlo, __m512 vhi) {
    __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(x, m), a, b);
    if (act) {
        v = _mm512_max_ps(vlo, v);
        if (act > 1)    /* 1: hi is +inf, VMINPS(+inf, v) is v */
            v = _mm512_min_ps(vhi, v);
        v = _mm512_add_ps(v, _mm512_setzero_ps());
    }
    return v;
}
/* RELU_BWD of g under the forward yb = d * a + b (as hd_bn_drelu: lo < yb <= hi), lanes k
 * only; act 1 (hi +inf) leaves out the upper compare, true for every yb but NaN, whose
 * lanes take yb anyway */
#define HD_BN_VMASK(g, d, k, act)                                                          \
    do {                                                                                   \
        __m512 yb_ = _mm512_fmadd_ps(d, va, vb);                                           \
        __mmask16 in_ = _mm512_cmp_ps_mask(yb_, vlo, _CMP_GT_OQ);                          \
        if ((act) > 1) in_ &= _mm512_cmp_ps_mask(yb_, vhi, _CMP_LE_OQ);                    \
        g = _mm512_maskz_mov_ps(in_, g);                                                   \
        g = _mm512_mask_mov_ps(g, _mm512_cmp_ps_mask(yb_, yb_, _CMP_UNORD_Q) & (k), yb_);   \
    } while (0)

#define HD_BN_VEC_KIND(K, ATTR)                                                            \
    ATTR static void hd_bn_sums_##K##_avx512v(const HD_TYPE_##K* x, ptrdiff_t S, float m,  \
                                              int square, double* s, double* s2) {         \
        const __m512 vm = _mm512_set1_ps(m);                                               \
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();                         \
        ptrdiff_t i = 0;                                                                   \
        double t;                                                                          \
        if (square == 2) {                                                                 \
            __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();                     \
            double u;                                                                      \
            for (; i + 32 <= S; i += 32) {                                                 \
                __m512 d0 = _mm512_sub_ps(hd_bn_ld_##K(x + i, 0xffff), vm);                \
                __m512 d1 = _mm512_sub_ps(hd_bn_ld_##K(x + i + 16, 0xffff), vm);           \
                a0 = _mm512_add_ps(a0, d0);                                                \
                a1 = _mm512_add_ps(a1, d1);                                                \
                b0 = _mm512_fmadd_ps(d0, d0, b0);                                          \
                b1 = _mm512_fmadd_ps(d1, d1, b1);                                          \
            }                                                                              \
            for (; i < S; i += 16) {                                                       \
                __mmask16 k = hd_bn_tail(S - i);                                           \
                __m512 d = _mm512_maskz_sub_ps(k, hd_bn_ld_##K(x + i, k), vm);             \
                a0 = _mm512_add_ps(a0, d);                                                 \
                b0 = _mm512_fmadd_ps(d, d, b0);                                            \
            }                                                                              \
            t = hd_bn_hsum(a0, a1);                                                        \
            u = hd_bn_hsum(b0, b1);                                                        \
            *s += hd_bn_finite(t) ? t : hd_bn_sum64_##K(x, 1, S, m, 0);                    \
            *s2 += hd_bn_finite(u) ? u : hd_bn_sum64_##K(x, 1, S, m, 1);                   \
            return;                                                                        \
        }                                                                                  \
        if (square) {                                                                      \
            for (; i + 32 <= S; i += 32) {                                                 \
                __m512 d0 = _mm512_sub_ps(hd_bn_ld_##K(x + i, 0xffff), vm);                \
                __m512 d1 = _mm512_sub_ps(hd_bn_ld_##K(x + i + 16, 0xffff), vm);           \
                a0 = _mm512_fmadd_ps(d0, d0, a0);                                          \
                a1 = _mm512_fmadd_ps(d1, d1, a1);                                          \
            }                                                                              \
            for (; i < S; i += 16) {                                                       \
                __mmask16 k = hd_bn_tail(S - i);                                           \
                __m512 d = _mm512_maskz_sub_ps(k, hd_bn_ld_##K(x + i, k), vm);             \
                a0 = _mm512_fmadd_ps(d, d, a0);                                            \
            }                                                                              \
        } else {                                                                           \
            for (; i + 32 <= S; i += 32) {                                                 \
                a0 = _mm512_add_ps(a0, _mm512_sub_ps(hd_bn_ld_##K(x + i, 0xffff), vm));    \
                a1 = _mm512_add_ps(a1, _mm512_sub_ps(hd_bn_ld_##K(x + i + 16, 0xffff), vm));\
            }                                                                              \
            for (; i < S; i += 16) {                                                       \
                __mmask16 k = hd_bn_tail(S - i);                                           \
                a0 = _mm512_add_ps(a0, _mm512_maskz_sub_ps(k, hd_bn_ld_##K(x + i, k), vm));\
            }                                                                              \
        }                                                                                  \
        t = hd_bn_hsum(a0, a1);                                                            \
        *s += hd_bn_finite(t) ? t : hd_bn_sum64_##K(x, 1, S, m, square);                   \
    }                                                                                      \
    /* hd_bn_bsum64 of the intrinsic rows: their mask's forward value is one FMA */        \
    HD_BN_BSUM64(ATTR, K, hd_bn_bsum64_##K##_avx512v, HD_BN_FWD_FMA)                       \
    HD_BN_DX64(ATTR, K, hd_bn_dx64_##K##_avx512v, HD_BN_FWD_FMA)                           \
    /* act as a constant in each copy of the row (hd_bn_affine_*_avx512v picks one) */     \
    ATTR static inline __attribute__((always_inline)) void hd_bn_affine_##K##_avx512i(     \
        const HD_TYPE_##K* x, HD_TYPE_##K* y, ptrdiff_t S, float m, float a, float b,      \
        int act, float lo, float hi, int nt) {                                             \
        const __m512 vm = _mm512_set1_ps(m), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b); \
        const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);                   \
        ptrdiff_t i = 0;                                                                   \
        if (nt) {  /* masked up to y's first 64-byte boundary, then streamed */           \
            const ptrdiff_t h = hd_bn_to_line((const float*)y, S);                         \
            for (; i < h; i += 16) {                                                       \
                __mmask16 k = hd_bn_tail(h - i);                                           \
                hd_bn_st_##K(y + i, k, hd_bn_affv(hd_bn_ld_##K(x + i, k), vm, va, vb, act, \
                                                  vlo, vhi));                              \
            }                                                                              \
            for (i = h; i + 16 <= S; i += 16)                                              \
                hd_bn_nt_##K(y + i, hd_bn_affv(hd_bn_ld_##K(x + i, 0xffff), vm, va, vb,    \
                                               act, vlo, vhi));                            \
        }                                                                                  \
        for (; i < S; i += 16) {                                                           \
            __mmask16 k = hd_bn_tail(S - i);                                               \
            hd_bn_st_##K(y + i, k, hd_bn_affv(hd_bn_ld_##K(x + i, k), vm, va, vb, act, vlo, \
                                              vhi));                                       \
        }                                                                                  \
    }                                                                                      \
    ATTR static void hd_bn_affine_##K##_avx512v(const HD_TYPE_##K* x, HD_TYPE_##K* y,      \
                                                ptrdiff_t S, float m, float a, float b,    \
                                                int act, float lo, float hi) {             \
        const int a_ = !act ? 0 : hi == INFINITY ? 1 : 2;  /* 1: ReLU, one VMINPS less */ \
        switch (a_ + 3 * (HD_BN_NT_##K && hd_bn_stream)) {                                 \
        case 0: hd_bn_affine_##K##_avx512i(x, y, S, m, a, b, 0, lo, hi, 0); break;         \
        case 1: hd_bn_affine_##K##_avx512i(x, y, S, m, a, b, 1, lo, hi, 0); break;         \
        case 2: hd_bn_affine_##K##_avx512i(x, y, S, m, a, b, 2, lo, hi, 0); break;         \
        case 3: hd_bn_affine_##K##_avx512i(x, y, S, m, a, b, 0, lo, hi, 1); break;         \
        case 4: hd_bn_affine_##K##_avx512i(x, y, S, m, a, b, 1, lo, hi, 1); break;         \
        default: hd_bn_affine_##K##_avx512i(x, y, S, m, a, b, 2, lo, hi, 1);               \
        }                                                                                  \
    }                                                                                      \
    /* act (0; 1: ReLU, hi +inf; 2: clipped) a constant in each copy of the row */        \
    ATTR static inline __attribute__((always_inline)) void hd_bn_bsum_##K##_avx512i(       \
        const HD_TYPE_##K* x, const HD_TYPE_##K* dy, ptrdiff_t S, float m, float a,        \
        float b, int act, float lo, float hi, double* sg, double* sgd) {                   \
        const __m512 vm = _mm512_set1_ps(m), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b); \
        const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);                   \
        __m512 g0 = _mm512_setzero_ps(), g1 = _mm512_setzero_ps();                         \
        __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();                         \
        ptrdiff_t i;                                                                       \
        for (i = 0; i < S; i += 16) {                                                      \
            __mmask16 k = hd_bn_tail(S - i);                                               \
            __m512 d = _mm512_maskz_sub_ps(k, hd_bn_ld_##K(x + i, k), vm);                 \
            __m512 g = hd_bn_ld_##K(dy + i, k);                                            \
            if (act) HD_BN_VMASK(g, d, k, act);                                            \
            if ((i >> 4) & 1) {                                                            \
                g1 = _mm512_add_ps(g1, g);                                                 \
                p1 = _mm512_fmadd_ps(g, d, p1);                                            \
            } else {                                                                       \
                g0 = _mm512_add_ps(g0, g);                                                 \
                p0 = _mm512_fmadd_ps(g, d, p0);                                            \
            }                                                                              \
        }                                                                                  \
        {                                                                                  \
            double s1 = hd_bn_hsum(g0, g1), s2 = hd_bn_hsum(p0, p1);                       \
            if (!(hd_bn_finite(s1) && hd_bn_finite(s2)))                                   \
                hd_bn_bsum64_##K##_avx512v(x, 1, dy, 1, S, m, a, a, b, act, lo, hi, &s1,   \
                                           &s2);                                           \
            *sg += s1;                                                                     \
            *sgd += s2;                                                                    \
        }                                                                                  \
    }                                                                                      \
    ATTR static void hd_bn_bsum_##K##_avx512v(const HD_TYPE_##K* x, const HD_TYPE_##K* dy, \
                                              ptrdiff_t S, float m, float a, float b,      \
                                              int act, float lo, float hi, double* sg,     \
                                              double* sgd) {                               \
        if (!act)                                                                          \
            hd_bn_bsum_##K##_avx512i(x, dy, S, m, a, b, 0, lo, hi, sg, sgd);               \
        else if (hi == INFINITY)                                                           \
            hd_bn_bsum_##K##_avx512i(x, dy, S, m, a, b, 1, lo, hi, sg, sgd);               \
        else                                                                               \
            hd_bn_bsum_##K##_avx512i(x, dy, S, m, a, b, 2, lo, hi, sg, sgd);               \
    }                                                                                      \
    /* xh (inv not 1: hd_bn_dx_*) and act (as hd_bn_bsum_*_avx512i) constants in each     \
     * copy of the row */                                                                  \
    ATTR static inline __attribute__((always_inline)) void hd_bn_dx_##K##_avx512i(         \
        const HD_TYPE_##K* x, const HD_TYPE_##K* dy, HD_TYPE_##K* dx, ptrdiff_t S,         \
        float m, float inv, float a, float b, int act, float lo, float hi, float k1,       \
        float k2, float k3, int xh) {                                                      \
        const __m512 vm = _mm512_set1_ps(m), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b); \
        const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);                   \
        const __m512 v1 = _mm512_set1_ps(k1), v2 = _mm512_set1_ps(k2);                     \
        const __m512 v3 = _mm512_set1_ps(k3), vi = _mm512_set1_ps(inv);                    \
        /* streamed from dx's first 64-byte boundary h (hd_bn_stream), masked elsewhere */ \
        const ptrdiff_t h = HD_BN_NT_##K && hd_bn_stream ? hd_bn_to_line((const float*)dx, S) \
                                                          : S;                            \
        ptrdiff_t i;                                                                       \
        for (i = 0; i < S; i += 16) {                                                      \
            __mmask16 k = i < h ? hd_bn_tail(h - i) : hd_bn_tail(S - i);                   \
            __m512 d = _mm512_sub_ps(hd_bn_ld_##K(x + i, k), vm);                          \
            __m512 g = hd_bn_ld_##K(dy + i, k);                                            \
            __m512 v;                                                                      \
            if (act) HD_BN_VMASK(g, d, k, act);                                            \
            v = _mm512_fmadd_ps(v2, xh ? _mm512_mul_ps(d, vi) : d, v3);                    \
            v = _mm512_fmadd_ps(v1, g, v);                                                 \
            if (i >= h && k == 0xffff)                                                     \
                hd_bn_nt_##K(dx + i, v);                                                   \
            else                                                                           \
                hd_bn_st_##K(dx + i, k, v);                                                \
            if (i < h && i + 16 > h) i = h - 16;   /* on from the boundary */              \
        }                                                                                  \
    }                                                                                      \
    ATTR static void hd_bn_dx_##K##_avx512v(const HD_TYPE_##K* x, const HD_TYPE_##K* dy,   \
                                            HD_TYPE_##K* dx, ptrdiff_t S, float m,         \
                                            float inv, float a, float b, int act,          \
                                            float lo, float hi, float k1, float k2,        \
                                            float k3) {                                    \
        const int a_ = !act ? 0 : hi == INFINITY ? 1 : 2;                                  \
        switch (a_ + 3 * (inv != 1.0f)) {                                                  \
        case 0: hd_bn_dx_##K##_avx512i(x, dy, dx, S, m, inv, a, b, 0, lo, hi, k1, k2, k3, 0); \
            break;                                                                         \
        case 1: hd_bn_dx_##K##_avx512i(x, dy, dx, S, m, inv, a, b, 1, lo, hi, k1, k2, k3, 0); \
            break;                                                                         \
        case 2: hd_bn_dx_##K##_avx512i(x, dy, dx, S, m, inv, a, b, 2, lo, hi, k1, k2, k3, 0); \
            break;                                                                         \
        case 3: hd_bn_dx_##K##_avx512i(x, dy, dx, S, m, inv, a, b, 0, lo, hi, k1, k2, k3, 1); \
            break;                                                                         \
        case 4: hd_bn_dx_##K##_avx512i(x, dy, dx, S, m, inv, a, b, 1, lo, hi, k1, k2, k3, 1); \
            break;                                                                         \
        default: hd_bn_dx_##K##_avx512i(x, dy, dx, S, m, inv, a, b, 2, lo, hi, k1, k2, k3, 1); \
        }                                                                                  \
    }                                                                                      \
    HD_BN_CHANNEL(avx512v, ATTR, K, hd_bn_affine_##K##_avx512v, hd_bn_dx_##K##_avx512v)

HD_BN_VEC_KIND(f32, HD_AVX512V)
HD_BN_VEC_KIND(bf16, HD_AVX512BF16)
HD_BN_VEC_KIND(f16, HD_AVX512V)
#else
#define HD_BN_VEC 0
#endif

/* The rows of CPUs with AVX2 and FMA but not AVX-512 written with intrinsics (bn_rows_isa
 * "avx2"), float32 and bfloat16, channels-first: training's sums, y, and backward's sums
 * and dx without RELU_BWD, where the compiler's AVX2 build of the loops above falls
 * short. A float32 row ends in one masked step (VMASKMOVPS) instead of up to 15 (31 in
 * the sums) scalar elements, a bfloat16 row's last S % 16 elements run one at a time, and
 * a row's lane sums stay in registers. A bfloat16 vector is widened by interleaving it with zeros
 * (VPUNPCKLWD / VPUNPCKHWD: elements 0-3, 8-11 and 4-7, 12-15, each the high half of a
 * float32) and narrowed by VPACKUSDW, which puts them back in the same order, where the
 * compiler's widening (VPMOVZXWD, VPSLLD) and narrowing (VPACKUSDW, VPERMQ) keep element
 * order at three more operations a vector. Against that build (2 cores, batch 8): bfloat16
 * y rows 1.2x (14x14) to 1.6x (56x56) faster, training's sums 1.2-1.45x. y and dx give
 * its bits (the same roundings, one FMA where it contracts one); the sums add their lanes
 * in another order, so statistics and backward's dx may differ from its in the last bits.
 * RELU_BWD rows stay the compiler's (their mask must be computed alike in the sums and in
 * dx), and so do float16 and the channels-last rows but bfloat16's y (_bn_last.h). */
#if HD_RELU_X86 && (defined(__clang__) || __GNUC__ >= 10)
#define HD_BN_AVX2V 1
#include <immintrin.h>

/* float32 -> bfloat16 as hd_narrow_bf16, 8 lanes, each result in the low half of its
 * 32-bit lane (VPACKUSDW's input: at most 0xffff, so it does not saturate) */
HD_AVX2 static inline __m256i hd_bn_nb_avx2(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r),
        _mm256_castsi256_ps(_mm256_or_si256(u, _mm256_set1_epi32(0x400000))), nan));
    return _mm256_srli_epi32(r, 16);
}
/* y of 8 lanes as hd_bn_affv: (x - m) * a + b in one FMA, clamped where act (2; 1: below
 * only), + 0.0 (hd_clamp, bit for bit: VMAXPS(lo, v) is lo > v ? lo : v, v where NaN) */
HD_AVX2 static inline __m256 hd_bn_aff_avx2(__m256 x, __m256 m, __m256 a, __m256 b, int act,
                                            __m256 lo, __m256 hi) {
    __m256 v = _mm256_fmadd_ps(_mm256_sub_ps(x, m), a, b);
    if (act) {
        v = _mm256_max_ps(lo, v);
        if (act == 2) v = _mm256_min_ps(hi, v);
        v = _mm256_add_ps(v, _mm256_setzero_ps());
    }
    return v;
}
/* the float32 lanes of a0..a3 summed in float64 */
HD_AVX2 static inline double hd_bn_hsum_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
#define HD_BN_PD2(v) _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),               \
                                   _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)))
    const __m256d s = _mm256_add_pd(_mm256_add_pd(HD_BN_PD2(a0), HD_BN_PD2(a1)),
                                    _mm256_add_pd(HD_BN_PD2(a2), HD_BN_PD2(a3)));
#undef HD_BN_PD2
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
/* one vector d of deviations into the sums' accumulators (hd_bn_sums_*): *a += d (square
 * 1: d^2), and with square 2 also *b += d^2 */
HD_AVX2 static inline __attribute__((always_inline)) void hd_bn_acc_avx2(int square, __m256 d,
                                                                         __m256* a,
                                                                         __m256* b) {
    if (square == 1) {
        *a = _mm256_fmadd_ps(d, d, *a);
        return;
    }
    *a = _mm256_add_ps(*a, d);
    if (square == 2) *b = _mm256_fmadd_ps(d, d, *b);
}
/* the lanes of the first n of 16 elements (all ones), the lane order given by l0..l15 */
#define HD_BN_KEEP_AVX2(n, klo_, khi_, l0, l1, l2, l3, l4, l5, l6, l7, h0, h1, h2, h3, h4, \
                        h5, h6, h7)                                                        \
    do {                                                                                   \
        const __m256i n_ = _mm256_set1_epi32((int)(n));                                    \
        klo_ = _mm256_castsi256_ps(                                                        \
            _mm256_cmpgt_epi32(n_, _mm256_setr_epi32(l0, l1, l2, l3, l4, l5, l6, l7)));    \
        khi_ = _mm256_castsi256_ps(                                                        \
            _mm256_cmpgt_epi32(n_, _mm256_setr_epi32(h0, h1, h2, h3, h4, h5, h6, h7)));    \
    } while (0)
/* 16 elements of kind K at p as two float32 vectors lo, hi: float32 0-7 and 8-15;
 * bfloat16 0-3, 8-11 and 4-7, 12-15 (VPUNPCK order); ST16 stores them back. float32's
 * LDT: the first n < 16 (the other lanes 0) and the lanes holding them (klo, khi); STT
 * stores those. */
#define HD_BN_LD16_f32(p, lo_, hi_)                                                        \
    do {                                                                                   \
        lo_ = _mm256_loadu_ps(p);                                                          \
        hi_ = _mm256_loadu_ps((p) + 8);                                                    \
    } while (0)
#define HD_BN_LDT_f32(p, n, lo_, hi_, klo_, khi_)                                          \
    do {                                                                                   \
        HD_BN_KEEP_AVX2(n, klo_, khi_, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); \
        lo_ = _mm256_maskload_ps(p, _mm256_castps_si256(klo_));                            \
        hi_ = _mm256_maskload_ps((p) + 8, _mm256_castps_si256(khi_));                      \
    } while (0)
#define HD_BN_ST16_f32(p, lo_, hi_)                                                        \
    do {                                                                                   \
        _mm256_storeu_ps(p, lo_);                                                          \
        _mm256_storeu_ps((p) + 8, hi_);                                                    \
    } while (0)
#define HD_BN_STT_f32(p, n, lo_, hi_, klo_, khi_)                                          \
    do {                                                                                   \
        _mm256_maskstore_ps(p, _mm256_castps_si256(klo_), lo_);                            \
        _mm256_maskstore_ps((p) + 8, _mm256_castps_si256(khi_), hi_);                      \
    } while (0)
#define HD_BN_LD16_bf16(p, lo_, hi_)                                                       \
    do {                                                                                   \
        const __m256i w_ = _mm256_loadu_si256((const __m256i*)(p));                        \
        lo_ = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w_));      \
        hi_ = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w_));      \
    } while (0)
#define HD_BN_ST16_bf16(p, lo_, hi_)                                                       \
    _mm256_storeu_si256((__m256i*)(p),                                                     \
                        _mm256_packus_epi32(hd_bn_nb_avx2(lo_), hd_bn_nb_avx2(hi_)))
/* Whether a row's last elements run as one masked step (float32: VMASKMOVPS) or one at
 * a time (bfloat16: AVX2 has no 16-bit masked loads, and a step through a buffer stalled
 * on store forwarding, 1.45x the time of 7x7 rows) */
#define HD_BN_MASKED_f32 1
#define HD_BN_MASKED_bf16 0
/* (bfloat16's masked steps: never reached, HD_BN_MASKED_bf16 is 0) */
#define HD_BN_LDT_bf16(p, n, lo_, hi_, klo_, khi_)                                         \
    do {                                                                                   \
        HD_BN_LD16_bf16(p, lo_, hi_);                                                      \
        klo_ = khi_ = _mm256_setzero_ps();                                                 \
    } while (0)
#define HD_BN_STT_bf16(p, n, lo_, hi_, klo_, khi_) ((void)(lo_), (void)(hi_), (void)(klo_), (void)(khi_))

/* The rows of one element kind K (f32, bf16); the masked-off lanes of a last step load
 * as 0, and x - m there is zeroed (KEEP) before it is summed. Where K has no masked step
 * (HD_BN_MASKED_*) the last S % 16 elements run one at a time, the same operations on
 * one lane (fmaf is one FMA), their sums in float64. */
#define HD_BN_AVX2_KIND(K)                                                                 \
    /* hd_bn_sums_* in 32 float32 lanes: four vectors, a 16-element step into two,        \
     * alternate steps into the other two */                                               \
    HD_AVX2 static void hd_bn_sums_##K##_avx2v(const HD_TYPE_##K* x, ptrdiff_t S, float m, \
                                               int square, double* s, double* s2) {        \
        const __m256 vm = _mm256_set1_ps(m);                                               \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; /* sum d (1: d^2) */   \
        __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                  /* 2: sum d^2 */       \
        __m256 x0, x1, k0, k1;                                                             \
        ptrdiff_t i = 0;                                                                   \
        double t, u = 0.0, tt = 0.0, tu = 0.0;     /* tt, tu: the sums of a scalar tail */ \
        for (; i + 32 <= S; i += 32) {                                                     \
            __m256 d0, d1, d2, d3;                                                         \
            HD_BN_LD16_##K(x + i, x0, x1);                                                 \
            d0 = _mm256_sub_ps(x0, vm);                                                    \
            d1 = _mm256_sub_ps(x1, vm);                                                    \
            HD_BN_LD16_##K(x + i + 16, x0, x1);                                            \
            d2 = _mm256_sub_ps(x0, vm);                                                    \
            d3 = _mm256_sub_ps(x1, vm);                                                    \
            hd_bn_acc_avx2(square, d0, &a0, &b0);                                          \
            hd_bn_acc_avx2(square, d1, &a1, &b1);                                          \
            hd_bn_acc_avx2(square, d2, &a2, &b2);                                          \
            hd_bn_acc_avx2(square, d3, &a3, &b3);                                          \
        }                                                                                  \
        for (; i < S; i += 16) {   /* a full step of 16 and a masked one, or a masked one */ \
            __m256 d0, d1;                                                                 \
            if (i + 16 > S && !HD_BN_MASKED_##K) {                                         \
                for (; i < S; i++) {                                                       \
                    const float d = HD_LOAD_##K(x[i]) - m;                                 \
                    tt += square == 1 ? d * d : d;                                         \
                    tu += d * d;                                                           \
                }                                                                          \
                break;                                                                     \
            }                                                                              \
            if (i + 16 <= S) {                                                             \
                HD_BN_LD16_##K(x + i, x0, x1);                                             \
                d0 = _mm256_sub_ps(x0, vm);                                                \
                d1 = _mm256_sub_ps(x1, vm);                                                \
            } else {                                                                       \
                HD_BN_LDT_##K(x + i, S - i, x0, x1, k0, k1);                               \
                d0 = _mm256_and_ps(_mm256_sub_ps(x0, vm), k0);                             \
                d1 = _mm256_and_ps(_mm256_sub_ps(x1, vm), k1);                             \
            }                                                                              \
            hd_bn_acc_avx2(square, d0, &a0, &b0);                                          \
            hd_bn_acc_avx2(square, d1, &a1, &b1);                                          \
        }                                                                                  \
        t = hd_bn_hsum_avx2(a0, a1, a2, a3) + tt;                                          \
        if (square == 2) {                                                                 \
            u = hd_bn_hsum_avx2(b0, b1, b2, b3) + tu;                                      \
            *s += hd_bn_finite(t) ? t : hd_bn_sum64_##K(x, 1, S, m, 0);                    \
            *s2 += hd_bn_finite(u) ? u : hd_bn_sum64_##K(x, 1, S, m, 1);                   \
        } else {                                                                           \
            *s += hd_bn_finite(t) ? t : hd_bn_sum64_##K(x, 1, S, m, square);               \
        }                                                                                  \
    }                                                                                      \
    /* act a constant in each copy of the row (hd_bn_affine_*_avx2v picks one) */         \
    HD_AVX2 static inline __attribute__((always_inline)) void hd_bn_affine_##K##_avx2i(    \
        const HD_TYPE_##K* x, HD_TYPE_##K* y, ptrdiff_t S, float m, float a, float b,      \
        int act, float lo, float hi) {                                                     \
        const __m256 vm = _mm256_set1_ps(m), va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b); \
        const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);                   \
        __m256 x0, x1, k0, k1;                                                             \
        ptrdiff_t i = 0;                                                                   \
        for (; i + 16 <= S; i += 16) {                                                     \
            HD_BN_LD16_##K(x + i, x0, x1);                                                 \
            HD_BN_ST16_##K(y + i, hd_bn_aff_avx2(x0, vm, va, vb, act, vlo, vhi),           \
                           hd_bn_aff_avx2(x1, vm, va, vb, act, vlo, vhi));                 \
        }                                                                                  \
        if (i < S && HD_BN_MASKED_##K) {                                                   \
            HD_BN_LDT_##K(x + i, S - i, x0, x1, k0, k1);                                   \
            HD_BN_STT_##K(y + i, S - i, hd_bn_aff_avx2(x0, vm, va, vb, act, vlo, vhi),     \
                          hd_bn_aff_avx2(x1, vm, va, vb, act, vlo, vhi), k0, k1);          \
        } else {                                                                           \
            for (; i < S; i++) {                                                           \
                const float v = fmaf(HD_LOAD_##K(x[i]) - m, a, b);                         \
                y[i] = HD_STORE_##K(act ? hd_clamp(v, lo, hi) : v);                        \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    HD_AVX2 static void hd_bn_affine_##K##_avx2v(const HD_TYPE_##K* x, HD_TYPE_##K* y,     \
                                                 ptrdiff_t S, float m, float a, float b,   \
                                                 int act, float lo, float hi) {            \
        if (!act)                                                                          \
            hd_bn_affine_##K##_avx2i(x, y, S, m, a, b, 0, lo, hi);                         \
        else if (hi == INFINITY)   /* ReLU: one VMINPS less */                             \
            hd_bn_affine_##K##_avx2i(x, y, S, m, a, b, 1, lo, hi);                         \
        else                                                                               \
            hd_bn_affine_##K##_avx2i(x, y, S, m, a, b, 2, lo, hi);                         \
    }                                                                                      \
    /* hd_bn_bsum_* without RELU_BWD (with it: the compiler's rows, as dx below), in 32    \
     * lanes as the sums above */                                                          \
    HD_AVX2 static void hd_bn_bsum_##K##_avx2v(const HD_TYPE_##K* x, const HD_TYPE_##K* dy, \
                                               ptrdiff_t S, float m, float a, float b,     \
                                               int act, float lo, float hi, double* sg,    \
                                               double* sgd) {                              \
        const __m256 vm = _mm256_set1_ps(m);                                               \
        __m256 g0 = _mm256_setzero_ps(), g1 = g0, g2 = g0, g3 = g0;                        \
        __m256 p0 = g0, p1 = g0, p2 = g0, p3 = g0;                                         \
        __m256 x0, x1, y0, y1, k0, k1;                                                     \
        ptrdiff_t i = 0;                                                                   \
        double s1, s2, tg = 0.0, tp = 0.0;         /* tg, tp: the sums of a scalar tail */ \
        if (act) {                                                                         \
            hd_bn_bsum_##K##_avx2(x, dy, S, m, a, b, act, lo, hi, sg, sgd);                \
            return;                                                                        \
        }                                                                                  \
        for (; i + 16 <= S; i += 16) {                                                     \
            HD_BN_LD16_##K(x + i, x0, x1);                                                 \
            HD_BN_LD16_##K(dy + i, y0, y1);                                                \
            x0 = _mm256_sub_ps(x0, vm);                                                    \
            x1 = _mm256_sub_ps(x1, vm);                                                    \
            if ((i >> 4) & 1) {                                                            \
                g2 = _mm256_add_ps(g2, y0);                                                \
                g3 = _mm256_add_ps(g3, y1);                                                \
                p2 = _mm256_fmadd_ps(y0, x0, p2);                                          \
                p3 = _mm256_fmadd_ps(y1, x1, p3);                                          \
            } else {                                                                       \
                g0 = _mm256_add_ps(g0, y0);                                                \
                g1 = _mm256_add_ps(g1, y1);                                                \
                p0 = _mm256_fmadd_ps(y0, x0, p0);                                          \
                p1 = _mm256_fmadd_ps(y1, x1, p1);                                          \
            }                                                                              \
        }                                                                                  \
        if (i < S && !HD_BN_MASKED_##K) {                                                  \
            for (; i < S; i++) {                                                           \
                const float d = HD_LOAD_##K(x[i]) - m, g = HD_LOAD_##K(dy[i]);             \
                tg += g;                                                                   \
                tp += (double)g * d;                                                       \
            }                                                                              \
        } else if (i < S) {                                                                \
            HD_BN_LDT_##K(x + i, S - i, x0, x1, k0, k1);                                   \
            HD_BN_LDT_##K(dy + i, S - i, y0, y1, k0, k1);                                  \
            x0 = _mm256_and_ps(_mm256_sub_ps(x0, vm), k0);                                 \
            x1 = _mm256_and_ps(_mm256_sub_ps(x1, vm), k1);                                 \
            g0 = _mm256_add_ps(g0, y0);                                                    \
            g1 = _mm256_add_ps(g1, y1);                                                    \
            p0 = _mm256_fmadd_ps(y0, x0, p0);                                              \
            p1 = _mm256_fmadd_ps(y1, x1, p1);                                              \
        }                                                                                  \
        s1 = hd_bn_hsum_avx2(g0, g1, g2, g3) + tg;                                         \
        s2 = hd_bn_hsum_avx2(p0, p1, p2, p3) + tp;                                         \
        if (!(hd_bn_finite(s1) && hd_bn_finite(s2)))                                       \
            hd_bn_bsum64_##K##_avx2(x, 1, dy, 1, S, m, a, a, b, 0, lo, hi, &s1, &s2);      \
        *sg += s1;                                                                         \
        *sgd += s2;                                                                        \
    }                                                                                      \
    /* dx = k1 g + k2 t + k3 (hd_bn_dx_*) in two FMAs, t = (x - m) inv where xh, else      \
     * x - m */                                                                            \
    HD_AVX2 static inline __attribute__((always_inline)) void hd_bn_dx_##K##_avx2i(        \
        const HD_TYPE_##K* x, const HD_TYPE_##K* dy, HD_TYPE_##K* dx, ptrdiff_t S,         \
        float m, float inv, float k1, float k2, float k3, int xh) {                        \
        const __m256 vm = _mm256_set1_ps(m), vi = _mm256_set1_ps(inv);                     \
        const __m256 v1 = _mm256_set1_ps(k1), v2 = _mm256_set1_ps(k2);                     \
        const __m256 v3 = _mm256_set1_ps(k3);                                              \
        __m256 x0, x1, g0, g1, q0, q1;                                                     \
        ptrdiff_t i = 0;                                                                   \
        for (; i < S; i += 16) {                                                           \
            const int full = i + 16 <= S;                                                  \
            if (!full && !HD_BN_MASKED_##K) {                                              \
                for (; i < S; i++) {                                                       \
                    const float d = HD_LOAD_##K(x[i]) - m;                                 \
                    dx[i] = HD_STORE_##K(fmaf(k1, HD_LOAD_##K(dy[i]),                      \
                                              fmaf(k2, xh ? d * inv : d, k3)));             \
                }                                                                          \
                break;                                                                     \
            }                                                                              \
            if (full) {                                                                    \
                HD_BN_LD16_##K(x + i, x0, x1);                                             \
                HD_BN_LD16_##K(dy + i, g0, g1);                                            \
            } else {                                                                       \
                HD_BN_LDT_##K(x + i, S - i, x0, x1, q0, q1);                               \
                HD_BN_LDT_##K(dy + i, S - i, g0, g1, q0, q1);                              \
            }                                                                              \
            x0 = _mm256_sub_ps(x0, vm);                                                    \
            x1 = _mm256_sub_ps(x1, vm);                                                    \
            if (xh) {                                                                      \
                x0 = _mm256_mul_ps(x0, vi);                                                \
                x1 = _mm256_mul_ps(x1, vi);                                                \
            }                                                                              \
            x0 = _mm256_fmadd_ps(v1, g0, _mm256_fmadd_ps(v2, x0, v3));                     \
            x1 = _mm256_fmadd_ps(v1, g1, _mm256_fmadd_ps(v2, x1, v3));                     \
            if (full)                                                                      \
                HD_BN_ST16_##K(dx + i, x0, x1);                                            \
            else                                                                           \
                HD_BN_STT_##K(dx + i, S - i, x0, x1, q0, q1);                              \
        }                                                                                  \
    }                                                                                      \
    HD_AVX2 static void hd_bn_dx_##K##_avx2v(const HD_TYPE_##K* x, const HD_TYPE_##K* dy,  \
                                             HD_TYPE_##K* dx, ptrdiff_t S, float m,        \
                                             float inv, float a, float b, int act,         \
                                             float lo, float hi, float k1, float k2,       \
                                             float k3) {                                   \
        if (act)   /* RELU_BWD: the compiler's rows, whose mask its sums took */           \
            hd_bn_dx_##K##_avx2(x, dy, dx, S, m, inv, a, b, act, lo, hi, k1, k2, k3);      \
        else if (inv != 1.0f)                                                              \
            hd_bn_dx_##K##_avx2i(x, dy, dx, S, m, inv, k1, k2, k3, 1);                     \
        else                                                                               \
            hd_bn_dx_##K##_avx2i(x, dy, dx, S, m, inv, k1, k2, k3, 0);                     \
    }                                                                                      \
    HD_BN_CHANNEL(avx2v, HD_AVX2, K, hd_bn_affine_##K##_avx2v, hd_bn_dx_##K##_avx2v)

/* the slow paths of the compiler's AVX2 build, by the names HD_BN_CHANNEL uses */
#define hd_bn_bsum64_f32_avx2v hd_bn_bsum64_f32_avx2
#define hd_bn_dx64_f32_avx2v hd_bn_dx64_f32_avx2
#define hd_bn_bsum64_bf16_avx2v hd_bn_bsum64_bf16_avx2
#define hd_bn_dx64_bf16_avx2v hd_bn_dx64_bf16_avx2
HD_BN_AVX2_KIND(f32)
HD_BN_AVX2_KIND(bf16)
#else
#define HD_BN_AVX2V 0
#endif

/* The rows builds (hd_bn_job.isa; bn_rows_isa's names by value). */
enum { HD_BN_BASE = 0, HD_BN_AVX512_AUTO = 1, HD_BN_AVX512 = 2, HD_BN_AVX2_AUTO = 3,
       HD_BN_AVX2 = 4 };

/* Which rows run: the intrinsics (AVX-512; for bfloat16 also AVX512_BF16, else that kind
 * keeps the compiler's AVX-512 build), else AVX2's (intrinsics for float32 and bfloat16,
 * the compiler's build for float16), else the baseline build; base as in hd_relu_rows. */
static int hd_bn_rows_isa(int base) {
    int rows = hd_relu_rows(base);
    if (rows == HD_ROWS_AVX512)
        return HD_BN_VEC ? HD_BN_AVX512 : HD_BN_AVX512_AUTO;
    if (rows == HD_ROWS_AVX2)
        return HD_BN_AVX2V ? HD_BN_AVX2 : HD_BN_AVX2_AUTO;
    return HD_BN_BASE;
}

static int hd_bn_bf16_stores(void) {
#if HD_BN_VEC
    static volatile int known = -1;     /* a benign race, as in hd_relu_avx512 */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
    }
    return known;
#else
    return 0;
#endif
}

/* Channels [c, c + B) (training, backward: every pass of their N rows), or inference's
 * rows [c, c + B) in (n, c) order, by the build j->isa names. */
static void hd_bn_channel(const hd_bn_job* j, ptrdiff_t c, ptrdiff_t B) {
#if HD_BN_VEC
    if (j->isa == 2 && j->kind == 0) {
        hd_bn_channel_f32_avx512v(j, c, B);
        return;
    }
    if (j->isa == 2 && j->kind == 1 && hd_bn_bf16_stores()) {
        hd_bn_channel_bf16_avx512v(j, c, B);
        return;
    }
    if (j->isa == 2 && j->kind == 2) {
        hd_bn_channel_f16_avx512v(j, c, B);
        return;
    }
#endif
#if HD_BN_AVX2V
    if (j->isa == HD_BN_AVX2 && j->kind == 0) {
        hd_bn_channel_f32_avx2v(j, c, B);
        return;
    }
    if (j->isa == HD_BN_AVX2 && j->kind == 1) {
        hd_bn_channel_bf16_avx2v(j, c, B);
        return;
    }
#endif
#if HD_RELU_X86
    if (j->isa == HD_BN_AVX2_AUTO || j->isa == HD_BN_AVX2) {
        hd_bn_channels_avx2[j->kind](j, c, B);
        return;
    }
    if (j->isa) {
        hd_bn_channels_avx512[j->kind](j, c, B);
        return;
    }
#endif
    hd_bn_channels_base[j->kind](j, c, B);
}

/* The share of thread ithr of nthr. Training and backward: channels [C ithr / nthr,
 * C (ithr + 1) / nthr), in blocks of hd_bn_block channels, so that one thread runs every
 * pass of a channel (its rows stay in that core's caches). Inference, one pass: the N*C
 * rows in (n, c) order (memory order of NCHW), a contiguous share each, as a copy streams
 * (by channel, threads hopping between rows C*S apart took 1.5x PyTorch's time once the
 * tensor left the caches, at batch 32). */
static void hd_bn_team(void* data, int ithr, int nthr) {
    const hd_bn_job* j = (const hd_bn_job*)data;
    hd_bn_stream = j->stream;
    if (j->op == HD_BN_INFERENCE) {
        const ptrdiff_t R = j->N * j->C, r0 = R * ithr / nthr, r1 = R * (ithr + 1) / nthr;
        if (r1 > r0) hd_bn_channel(j, r0, r1 - r0);
    } else {
        ptrdiff_t c0 = j->C * ithr / nthr, c1 = j->C * (ithr + 1) / nthr, c;
        const ptrdiff_t B = hd_bn_block(j);
        for (c = c0; c < c1; c += B) hd_bn_channel(j, c, c1 - c < B ? c1 - c : B);
    }
#if HD_BN_VEC
    if (j->stream) _mm_sfence();   /* streamed stores seen before the team's end */
#endif
}

#endif /* HD_BN_ROWS_H */
