/* RELU_FWD rows of hipdnn_async.providers.cpu._kernels.bias_relu: o = clamp(x + b, lo, hi)
 * + 0.0 over one run of elements, float32 / bfloat16 / float16 in and out (16-bit elements
 * as raw bits), computed in float32 and rounded once to the output type; and the exact
 * element-type conversion rows of ``convert`` (HD_CVT) on the same element helpers.
 *
 * Every row is plain scalar C written branch-free (masks, no jumps) so that the compiler
 * vectorises it, and it is compiled three times: for the baseline ISA of the build (SSE2
 * on x86-64) and, on x86-64 with GCC or clang, for AVX-512 (avx512f + avx512bw: 16 float32
 * or 32 16-bit lanes) and for AVX2 (+ FMA, as AVX-512 implies: 8 float32 or 16 16-bit
 * lanes; SSE2 has no 32 -> 16-bit pack without saturation, so the 16-bit rows stayed
 * scalar there), chosen at run time by the CPU's features (hd_relu_rows). All give the
 * same bits: the same C operations, none of them contracted or reassociated.
 */
#ifndef HD_RELU_ROWS_H
#define HD_RELU_ROWS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HD_RELU_X86 1
#define HD_INLINE static inline __attribute__((always_inline))
#define HD_AVX512 __attribute__((target("avx512f,avx512bw")))
#define HD_AVX2 __attribute__((target("avx2,fma")))
#else
#define HD_RELU_X86 0
#define HD_INLINE static inline
#endif

/* ------------------------------------------------------------------ element helpers */

HD_INLINE uint32_t hd_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
HD_INLINE float hd_flt(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* a if c else b, as masks (c is 0 or 1): a conditional would be a branch. */
HD_INLINE uint32_t hd_sel(uint32_t c, uint32_t a, uint32_t b) {
    uint32_t m = 0u - c;
    return (a & m) | (b & ~m);
}

/* bfloat16 / float16 bits -> float32 (exact). */
HD_INLINE float hd_widen_bf16(uint16_t h) { return hd_flt((uint32_t)h << 16); }

HD_INLINE float hd_widen_f16(uint16_t h) {
    /* IEEE binary16 -> binary32: normals rebias the exponent (15 -> 127), inf/NaN get the
     * all-ones exponent (payload kept), subnormals are m * 2**-24. */
    uint32_t m = h & 0x7fffu;
    uint32_t o = (m << 13) + (112u << 23);
    o = hd_sel(m >= 0x7c00u, o + (112u << 23), o);
    o = hd_sel(m < 0x400u, hd_bits((float)m * 5.9604644775390625e-08f), o);
    return hd_flt(o | ((uint32_t)(h & 0x8000u) << 16));
}

/* float32 -> bfloat16 bits, round to nearest-even, NaN kept (quiet). The NaN test is a
 * float compare and the select stays in 32-bit lanes, narrowed once: the compiler then
 * vectorises it as one VCMPPS + VBLENDVPS + one pack, where an integer test of the bits
 * and a 16-bit select had it pack the mask and both candidates (AVX2 bfloat16 batchnorm
 * rows 1.5-1.9x faster; the same bits on all 2**32 inputs, checked once). v != v needs
 * IEEE comparisons: the rows are not built with -ffast-math (-ffinite-math-only drops it,
 * NaN then rounding to an infinity or zero). */
HD_INLINE uint16_t hd_narrow_bf16(float v) {
    uint32_t u = hd_bits(v);
    uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
    r = v != v ? u | 0x400000u : r;
    return (uint16_t)(r >> 16);
}

/* float32 -> float16 bits, round to nearest-even (F. Giesen's float_to_half_fast3_rtne):
 * normals rebias (127 -> 15) and round on bit 13; subnormals round by adding 0.5, whose ulp
 * is 2**-24 = the binary16 subnormal step; >= 65536 is inf; NaN is quiet (0x7e00). */
HD_INLINE uint16_t hd_narrow_f16(float v) {
    uint32_t u = hd_bits(v);
    uint32_t a = u & 0x7fffffffu;
    uint32_t r = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    uint32_t sub = hd_bits(hd_flt(a) + 0.5f) - 0x3f000000u;
    r = hd_sel(a < (113u << 23), sub, r);
    r = hd_sel(a >= (143u << 23), 0x7c00u, r);
    r = hd_sel(a > 0x7f800000u, 0x7e00u, r);
    return (uint16_t)(r | ((u >> 16) & 0x8000u));
}

/* a + b in float32, rounded to odd (for a narrower output).
 *
 * Rounding to odd in float32 (24 bits) and then to nearest-even in bfloat16 (8) or float16
 * (11) gives the correctly rounded sum, as p >= q + 2 (Boldo and Melquiond, "Emulation of
 * FMA and correctly rounded sums: proved algorithms using rounding to odd", IEEE Trans.
 * Computers 57(4), 2008); the rounding error comes from Knuth's TwoSum. A round-to-nearest
 * float32 sum would round twice (a 2**-16 chance per element for bfloat16 of an
 * off-by-one-ulp result). */
HD_INLINE float hd_add_odd(float a, float b) {
    float s = a + b;
    float bb = s - a;
    float e = (a - (s - bb)) + (b - bb);
    uint32_t us = hd_bits(s), ue = hd_bits(e);
    /* inexact (e != 0), s even and finite: step 1 ulp toward the exact sum (the sign of e
     * relative to s). */
    uint32_t step = 1u - (((us ^ ue) >> 31) << 1);
    uint32_t inexact = ((ue & 0x7fffffffu) + 0x7fffffffu) >> 31;
    uint32_t finite = ((us & 0x7f800000u) - 0x7f800000u) >> 31;
    return hd_flt(us + (step & (0u - (inexact & finite & (~us & 1u)))));
}

/* clamp(v, lo, hi) + 0.0: NaN passes (comparisons are false), -0.0 becomes +0.0. */
HD_INLINE float hd_clamp(float v, float lo, float hi) {
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    return v + 0.0f;
}

/* RELU_FWD of one bfloat16/float16 value on its bits, in 16-bit lanes: the result is x, a
 * clip or +0.0, chosen by order keys (sign-magnitude -> two's complement: -0.0 and +0.0
 * both map to 0); NaN keeps its bits. */
HD_INLINE uint16_t hd_relu16(uint16_t h, int16_t klo, int16_t khi, int16_t inf, int16_t lo16,
                             int16_t hi16) {
    int16_t v = (int16_t)h;
    int16_t m = (int16_t)(v & 0x7fff);
    int16_t s = (int16_t)(v >> 15);                    /* 0 or -1 */
    int16_t k = (int16_t)((m ^ s) - s);                /* order key: -m for negatives */
    int16_t r = (int16_t)(v & -(int16_t)(m != 0));     /* -0.0 -> +0.0 */
    int16_t sel = (int16_t)-(int16_t)(k < klo);
    r = (int16_t)((r & ~sel) | (lo16 & sel));
    sel = (int16_t)-(int16_t)(k > khi);
    r = (int16_t)((r & ~sel) | (hi16 & sel));
    sel = (int16_t)-(int16_t)(m > inf);                /* NaN keeps its bits */
    r = (int16_t)((r & ~sel) | (v & sel));
    return (uint16_t)r;
}

/* Element access by kind: f32 (float), bf16 and f16 (uint16_t bits). */
#define HD_LOAD_f32(p) (p)
#define HD_LOAD_bf16(p) hd_widen_bf16(p)
#define HD_LOAD_f16(p) hd_widen_f16(p)
#define HD_STORE_f32(v) (v)
#define HD_STORE_bf16(v) hd_narrow_bf16(v)
#define HD_STORE_f16(v) hd_narrow_f16(v)
#define HD_SUM_f32(a, b) ((a) + (b))
#define HD_SUM_bf16(a, b) hd_add_odd(a, b)
#define HD_SUM_f16(a, b) hd_add_odd(a, b)
#define HD_TYPE_f32 float
#define HD_TYPE_bf16 uint16_t
#define HD_TYPE_f16 uint16_t

typedef void (*hd_row_fn)(const void* x, ptrdiff_t xs, void* o, ptrdiff_t os, ptrdiff_t n,
                          const float* bv, ptrdiff_t bs, float lo, float hi);
typedef void (*hd_row16_fn)(const uint16_t* x, ptrdiff_t xs, uint16_t* o, ptrdiff_t os,
                            ptrdiff_t n, int16_t klo, int16_t khi, int16_t inf, int16_t lo16,
                            int16_t hi16);

/* One run of n elements (element strides xs, os): o = clamp(x + b). bv NULL: no bias;
 * bs 0: one bias value bv[0]; bs 1: bv[i] per element. Unit strides get their own loops
 * so that the compiler vectorises them. */
#define HD_ROW(ISA, ATTR, SK, DK)                                                          \
    ATTR static void hd_row_##SK##_##DK##_##ISA(const void* xv, ptrdiff_t xs, void* ov,   \
                                                ptrdiff_t os, ptrdiff_t n, const float* bv, \
                                                ptrdiff_t bs, float lo, float hi) {         \
        const HD_TYPE_##SK* x = (const HD_TYPE_##SK*)xv;                                   \
        HD_TYPE_##DK* o = (HD_TYPE_##DK*)ov;                                               \
        ptrdiff_t i;                                                                       \
        if (bv == NULL) {                                                                  \
            if (xs == 1 && os == 1)                                                        \
                for (i = 0; i < n; i++)                                                    \
                    o[i] = HD_STORE_##DK(hd_clamp(HD_LOAD_##SK(x[i]), lo, hi));            \
            else                                                                           \
                for (i = 0; i < n; i++)                                                    \
                    o[i * os] = HD_STORE_##DK(hd_clamp(HD_LOAD_##SK(x[i * xs]), lo, hi));  \
        } else if (bs == 0) {                                                              \
            const float b = bv[0];                                                         \
            if (xs == 1 && os == 1)                                                        \
                for (i = 0; i < n; i++)                                                    \
                    o[i] = HD_STORE_##DK(hd_clamp(HD_SUM_##DK(HD_LOAD_##SK(x[i]), b), lo, hi)); \
            else                                                                           \
                for (i = 0; i < n; i++)                                                    \
                    o[i * os] = HD_STORE_##DK(                                             \
                        hd_clamp(HD_SUM_##DK(HD_LOAD_##SK(x[i * xs]), b), lo, hi));        \
        } else {                                                                           \
            if (xs == 1 && os == 1)                                                        \
                for (i = 0; i < n; i++)                                                    \
                    o[i] = HD_STORE_##DK(                                                  \
                        hd_clamp(HD_SUM_##DK(HD_LOAD_##SK(x[i]), bv[i]), lo, hi));         \
            else                                                                           \
                for (i = 0; i < n; i++)                                                    \
                    o[i * os] = HD_STORE_##DK(                                             \
                        hd_clamp(HD_SUM_##DK(HD_LOAD_##SK(x[i * xs]), bv[i]), lo, hi));    \
        }                                                                                  \
    }

/* RELU_FWD on bfloat16 or float16 bits without widening (same type in and out, no bias). */
#define HD_ROW16(ISA, ATTR)                                                                \
    ATTR static void hd_row16_##ISA(const uint16_t* x, ptrdiff_t xs, uint16_t* o,          \
                                    ptrdiff_t os, ptrdiff_t n, int16_t klo, int16_t khi,   \
                                    int16_t inf, int16_t lo16, int16_t hi16) {             \
        ptrdiff_t i;                                                                       \
        if (xs == 1 && os == 1)                                                            \
            for (i = 0; i < n; i++) o[i] = hd_relu16(x[i], klo, khi, inf, lo16, hi16);     \
        else                                                                               \
            for (i = 0; i < n; i++)                                                        \
                o[i * os] = hd_relu16(x[i * xs], klo, khi, inf, lo16, hi16);               \
    }

#define HD_ROWS(ISA, ATTR)                                                                 \
    HD_ROW(ISA, ATTR, f32, f32) HD_ROW(ISA, ATTR, f32, bf16) HD_ROW(ISA, ATTR, f32, f16)   \
    HD_ROW(ISA, ATTR, bf16, f32) HD_ROW(ISA, ATTR, bf16, bf16) HD_ROW(ISA, ATTR, bf16, f16) \
    HD_ROW(ISA, ATTR, f16, f32) HD_ROW(ISA, ATTR, f16, bf16) HD_ROW(ISA, ATTR, f16, f16)   \
    HD_ROW16(ISA, ATTR)                                                                    \
    static const hd_row_fn hd_rows_##ISA[3][3] = {                                         \
        {hd_row_f32_f32_##ISA, hd_row_f32_bf16_##ISA, hd_row_f32_f16_##ISA},               \
        {hd_row_bf16_f32_##ISA, hd_row_bf16_bf16_##ISA, hd_row_bf16_f16_##ISA},            \
        {hd_row_f16_f32_##ISA, hd_row_f16_bf16_##ISA, hd_row_f16_f16_##ISA}};

HD_ROWS(base, )
#if HD_RELU_X86
HD_ROWS(avx512, HD_AVX512)
HD_ROWS(avx2, HD_AVX2)
#endif

/* Exact element-type conversion rows of hipdnn_async.providers.cpu._kernels.convert: o = x
 * rounded once to the output type (float16 / bfloat16 -> float32 exact; float32 -> 16-bit
 * round to nearest-even, overflow to inf, NaN kept NaN; the same type: the bits copied).
 * Unit strides get their own loop so that the compiler vectorises it. */
#define HD_CVT(ISA, ATTR, SK, DK)                                                          \
    ATTR static void hd_cvt_##SK##_##DK##_##ISA(const void* xv, ptrdiff_t xs, void* ov,   \
                                                ptrdiff_t os, ptrdiff_t n) {              \
        const HD_TYPE_##SK* x = (const HD_TYPE_##SK*)xv;                                   \
        HD_TYPE_##DK* o = (HD_TYPE_##DK*)ov;                                               \
        ptrdiff_t i;                                                                       \
        if (xs == 1 && os == 1)                                                            \
            for (i = 0; i < n; i++) o[i] = HD_STORE_##DK(HD_LOAD_##SK(x[i]));              \
        else                                                                               \
            for (i = 0; i < n; i++) o[i * os] = HD_STORE_##DK(HD_LOAD_##SK(x[i * xs]));    \
    }

/* The same type: a copy of the bits (a float32 NaN's payload and signalling bit kept). */
#define HD_COPY(ISA, ATTR, BITS)                                                           \
    ATTR static void hd_copy##BITS##_##ISA(const void* xv, ptrdiff_t xs, void* ov,        \
                                           ptrdiff_t os, ptrdiff_t n) {                   \
        const uint##BITS##_t* x = (const uint##BITS##_t*)xv;                               \
        uint##BITS##_t* o = (uint##BITS##_t*)ov;                                           \
        ptrdiff_t i;                                                                       \
        if (xs == 1 && os == 1)                                                            \
            memmove(o, x, (size_t)n * sizeof(*o));                                         \
        else                                                                               \
            for (i = 0; i < n; i++) o[i * os] = x[i * xs];                                 \
    }

typedef void (*hd_cvt_fn)(const void* x, ptrdiff_t xs, void* o, ptrdiff_t os, ptrdiff_t n);

#define HD_CVTS(ISA, ATTR)                                                                 \
    HD_CVT(ISA, ATTR, f32, bf16) HD_CVT(ISA, ATTR, f32, f16) HD_CVT(ISA, ATTR, bf16, f32) \
    HD_CVT(ISA, ATTR, bf16, f16) HD_CVT(ISA, ATTR, f16, f32) HD_CVT(ISA, ATTR, f16, bf16) \
    HD_COPY(ISA, ATTR, 32) HD_COPY(ISA, ATTR, 16)                                          \
    static const hd_cvt_fn hd_cvts_##ISA[3][3] = {                                         \
        {hd_copy32_##ISA, hd_cvt_f32_bf16_##ISA, hd_cvt_f32_f16_##ISA},                    \
        {hd_cvt_bf16_f32_##ISA, hd_copy16_##ISA, hd_cvt_bf16_f16_##ISA},                   \
        {hd_cvt_f16_f32_##ISA, hd_cvt_f16_bf16_##ISA, hd_copy16_##ISA}};

HD_CVTS(base, )
#if HD_RELU_X86
HD_CVTS(avx512, HD_AVX512)
HD_CVTS(avx2, HD_AVX2)
#endif

/* 1 where the AVX-512 rows run here (the CPU has avx512f and avx512bw and the OS saves
 * their registers: libgcc's / compiler-rt's feature check reads XCR0), else 0. */
static int hd_relu_avx512(void) {
#if HD_RELU_X86
    static volatile int known = -1;     /* a benign race: every thread computes the same */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    }
    return known;
#else
    return 0;
#endif
}

/* 1 where the AVX2 rows run here (avx2 and fma), else 0. */
static int hd_relu_avx2(void) {
#if HD_RELU_X86
    static volatile int known = -1;     /* as in hd_relu_avx512 */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return known;
#else
    return 0;
#endif
}

enum { HD_ROWS_BASE = 0, HD_ROWS_AVX512 = 1, HD_ROWS_AVX2 = 2 };

/* Which rows run: HD_ROWS_AVX512 where the CPU has it, else HD_ROWS_AVX2 where it has
 * that, else HD_ROWS_BASE; base asks for the baseline build even there (for tests
 * comparing the builds). */
static int hd_relu_rows(int base) {
#if HD_RELU_X86
    if (base) return HD_ROWS_BASE;
    if (hd_relu_avx512()) return HD_ROWS_AVX512;
    return hd_relu_avx2() ? HD_ROWS_AVX2 : HD_ROWS_BASE;
#else
    (void)base;
    return HD_ROWS_BASE;
#endif
}

/* Run one row of element kinds xk -> ok (0 float32, 1 bfloat16, 2 float16) from the rows
 * ``isa`` names (hd_relu_rows); the arguments are hd_row_fn's. */
static void hd_relu_row(int isa, int xk, int ok, const void* x, ptrdiff_t xs, void* o,
                        ptrdiff_t os, ptrdiff_t n, const float* bv, ptrdiff_t bs, float lo,
                        float hi) {
#if HD_RELU_X86
    if (isa == HD_ROWS_AVX512) {
        hd_rows_avx512[xk][ok](x, xs, o, os, n, bv, bs, lo, hi);
        return;
    }
    if (isa == HD_ROWS_AVX2) {
        hd_rows_avx2[xk][ok](x, xs, o, os, n, bv, bs, lo, hi);
        return;
    }
#endif
    (void)isa;
    hd_rows_base[xk][ok](x, xs, o, os, n, bv, bs, lo, hi);
}

/* Run one conversion row of element kinds xk -> ok from the rows ``isa`` names. */
static void hd_cvt_row(int isa, int xk, int ok, const void* x, ptrdiff_t xs, void* o,
                       ptrdiff_t os, ptrdiff_t n) {
#if HD_RELU_X86
    if (isa == HD_ROWS_AVX512) {
        hd_cvts_avx512[xk][ok](x, xs, o, os, n);
        return;
    }
    if (isa == HD_ROWS_AVX2) {
        hd_cvts_avx2[xk][ok](x, xs, o, os, n);
        return;
    }
#endif
    (void)isa;
    hd_cvts_base[xk][ok](x, xs, o, os, n);
}

/* Run one row of the 16-bit same-type path (hd_row16_fn's arguments). */
static void hd_relu_row16(int isa, const uint16_t* x, ptrdiff_t xs, uint16_t* o,
                          ptrdiff_t os, ptrdiff_t n, int16_t klo, int16_t khi, int16_t inf,
                          int16_t lo16, int16_t hi16) {
#if HD_RELU_X86
    if (isa == HD_ROWS_AVX512) {
        hd_row16_avx512(x, xs, o, os, n, klo, khi, inf, lo16, hi16);
        return;
    }
    if (isa == HD_ROWS_AVX2) {
        hd_row16_avx2(x, xs, o, os, n, klo, khi, inf, lo16, hi16);
        return;
    }
#endif
    (void)isa;
    hd_row16_base(x, xs, o, os, n, klo, khi, inf, lo16, hi16);
}

#endif /* HD_RELU_ROWS_H */
