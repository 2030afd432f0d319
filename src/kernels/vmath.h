/*
 * vmath.h - exp and erf for f32 written so that the compiler vectorises loops calling them
 * (no library calls, no branches: selects only), for the elementwise ops' fast path. Their
 * reference twins are libm's expf and erff, which the ops use with CT_KERNELS_REFERENCE;
 * tests/unit/test_kernels.c compares the two over the whole f32 range that matters.
 *
 * ct_vexpf: Cephes' method, x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial,
 * 2^n put in the exponent bits. Relative error below 2e-7 where the result is a normal f32;
 * 0 below -87.3 (libm gives subnormals down to -103.9) and +inf above 88.7.
 * ct_verff: for |x| >= 0.5 Abramowitz & Stegun 7.1.26, erf(|x|) = 1 - t (a1 + t (a2 + ...))
 * exp(-x^2) with t = 1 / (1 + p |x|), sign restored; below 0.5 the Taylor series to x^11.
 * Absolute error below 4e-7 in f32 arithmetic (tests/unit/test_kernels.c checks both).
 * ct_verff_exp is ct_verff with exp(-x^2) supplied by the caller (the same bits when it is
 * ct_vexpf(-x * x)).
 * ct_vround_bf16: x rounded to the nearest bf16 (ties to even), returned as the f32 holding
 * it, as ct_f32_from_bf16(ct_bf16_from_f32(x)) (its reference twin) but without a branch;
 * NaN stays a quiet NaN. Tested on every 2^16th bit pattern plus the rounding boundaries.
 * ct_vsum_squares: a sum of squares in a fixed order; ct_vnonfinite: whether a buffer holds an
 * inf or a NaN; ct_vmax, ct_vsum, ct_vdot: the largest element, a sum and a dot product in
 * double, for softmax rows (below). Internal.
 */
#ifndef CT_VMATH_H
#define CT_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float ct_vexpf(float x) {
    const float lo = -87.33654f, hi = 88.72283f;
    float c = x < lo ? lo : x;
    c = c > hi ? hi : c;
    /* n = round(c / ln2) by adding 1.5 * 2^23, whose sum keeps n in its low mantissa bits: no
       float-to-int conversion (which gcc will not if-convert) and no floorf (which it will
       not vectorise) */
    union {
        float f;
        int32_t i;
    } m = {c * 1.44269504088896341f + 12582912.0f};
    float n = m.f - 12582912.0f;
    int32_t ni = m.i - 0x4B400000;
    /* ln 2 in two parts, so n * ln2 subtracts without rounding away r */
    float r = c - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* 2^n as 2^(n/2) 2^(n - n/2): both halves stay normal at either end of the range */
    int32_t n1 = ni / 2, n2 = ni - n1;
    /* unsigned: a NaN input gives a meaningless n, whose shifted bits must not overflow (the
       result is NaN regardless, from p) */
    union {
        uint32_t u;
        float f;
    } s1 = {(uint32_t)(n1 + 127) << 23}, s2 = {(uint32_t)(n2 + 127) << 23};
    float y = p * s1.f * s2.f;
    y = x < lo ? 0.0f : y;
    return x > hi ? INFINITY : y;
}

/* ct_verff(x) given ex2 = ct_vexpf(-x * x), for callers that need that exponential too
 * (GELU's derivative) */
static inline float ct_verff_exp(float x, float ex2) {
    float a = fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    float e = 1.0f - p * t * ex2;
    /* near 0 that difference cancels: the Taylor series instead, to x^11 (the next term is
       below 2e-8 for |x| < 0.5) */
    float x2 = x * x, q = -1.0f / 1320.0f;
    q = q * x2 + 1.0f / 216.0f;
    q = q * x2 - 1.0f / 42.0f;
    q = q * x2 + 1.0f / 10.0f;
    q = q * x2 - 1.0f / 3.0f;
    q = q * x2 + 1.0f;
    float small = 1.1283791670955126f * x * q;
    return a < 0.5f ? small : copysignf(e, x);
}

static inline float ct_verff(float x) {
    return ct_verff_exp(x, ct_vexpf(-x * x));
}

static inline float ct_vround_bf16(float x) {
    union {
        float f;
        uint32_t u;
    } v = {x};
    uint32_t nan = (v.u | 0x00400000u) & 0xFFFF0000u;
    uint32_t rounded = (v.u + 0x7FFFu + ((v.u >> 16) & 1u)) & 0xFFFF0000u;
    v.u = (v.u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded;
    return v.f;
}

/* The sum of x[i]^2 over [0, n) in double, in 8 interleaved accumulators (x[i] goes to i mod 8)
 * added in order at the end: a fixed order that depends only on n, so callers that sum fixed
 * chunks get the same bits for any thread count (the clipping norm, the sharded update's
 * norm), and a loop the compiler vectorises. */
static inline double ct_vsum_squares(const float *x, int64_t n) {
    enum { LANES = 8 };
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += (double)x[i + k] * (double)x[i + k];
    for (int k = 0; i < n; i++, k++)
        acc[k] += (double)x[i] * (double)x[i];
    double s = 0.0;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

/* 1 when x[0, n) holds an inf or a NaN: the largest exponent field is all ones. Integer
 * operations only, the same answer for any split of the buffer, and 64 independent running
 * maxima, so that it vectorises into a load, an AND and a MAX per vector without a dependency
 * chain: twice as fast as comparing each element and OR-ing the flags (11 us instead of 23 us
 * for 200k floats in L2 here). */
static inline unsigned ct_vnonfinite(const float *x, int64_t n) {
    enum { LANES = 64 };
    const uint32_t exp_mask = 0x7f800000u;
    uint32_t top[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++) {
            uint32_t u;
            memcpy(&u, &x[i + k], sizeof u);
            u &= exp_mask;
            top[k] = u > top[k] ? u : top[k];
        }
    uint32_t m = 0;
    for (int k = 0; k < LANES; k++)
        m = top[k] > m ? top[k] : m;
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u &= exp_mask;
        m = u > m ? u : m;
    }
    return m == exp_mask;
}

/* The largest of x[0, n) (n >= 1): 16 running maxima, so that it vectorises. The maximum
 * does not depend on the order (NaNs aside, which a softmax row turns into NaN either way). */
static inline float ct_vmax(const float *x, int64_t n) {
    enum { LANES = 16 };
    float m[LANES];
    for (int k = 0; k < LANES; k++)
        m[k] = x[0];
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (int k = 0; i < n; i++, k++)
        m[k] = x[i] > m[k] ? x[i] : m[k];
    float r = m[0];
    for (int k = 1; k < LANES; k++)
        r = m[k] > r ? m[k] : r;
    return r;
}

/* sum x[0, n) and sum a[i] b[i] in double, in ct_vsum_squares' fixed order (8 running sums,
 * the tail spread over them, added in order at the end): a function of n only, and a loop the
 * compiler vectorises, where a sum in order would be one long chain of dependent adds. */
static inline double ct_vsum(const float *x, int64_t n) {
    enum { LANES = 8 };
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += (double)x[i + k];
    for (int k = 0; i < n; i++, k++)
        acc[k] += (double)x[i];
    double s = 0.0;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

static inline double ct_vdot(const float *a, const float *b, int64_t n) {
    enum { LANES = 8 };
    double acc[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int k = 0; k < LANES; k++)
            acc[k] += (double)a[i + k] * (double)b[i + k];
    for (int k = 0; i < n; i++, k++)
        acc[k] += (double)a[i] * (double)b[i];
    double s = 0.0;
    for (int k = 0; k < LANES; k++)
        s += acc[k];
    return s;
}

#endif /* CT_VMATH_H */
