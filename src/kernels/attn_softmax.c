/*
 * attn_softmax.c - the masked softmax rows of causal attention (src/ops/attention.c): per row
 * the max, then the exponentials (vmath.h's ct_vexpf) and their sum in one pass, 1 / the sum
 * returned (the caller scales by it where it costs least). An AVX-512 version keeps the row's
 * running max and sums in registers, where the portable one (CT_HOT: vectorised for the ISA the
 * loader picks) reduces through the stack; both give the same bits: ct_vexpf's operations one by
 * one without fused multiply-adds, the max (independent of order), and the sum in double over 16
 * running sums (element j into sum j mod 16) added as a tree, s[k] + s[k + 8], then + 4, 2, 1.
 * The backward row (dS from P and dP) likewise: its dot product in double in the same order.
 * The rows of a block run four at a time with AVX-512, their operations interleaved (each
 * row's own operations unchanged), so that one row's chain of reductions overlaps the others.
 */
#include <math.h>

#include "kernels/vmath.h"

#include "kernels/attn_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SOFTMAX_X86 1
#include <immintrin.h>
#else
#define SOFTMAX_X86 0
#endif

enum { LANES = 16, GROUP = 4 /* rows interleaved (AVX-512) */ };

/* The 16 running sums in the tree order of the file's comment. */
static double tree_sum(double acc[LANES]) {
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int k = 0; k < w; k++)
            acc[k] += acc[k + w];
    return acc[0];
}

CT_HOT static float softmax_row_portable(float *s, int64_t i, int64_t n) {
    for (int64_t j = i + 1; j < n; j++)
        s[j] = -INFINITY;
    float mx = ct_vmax(s, n);
    double acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        for (int k = 0; k < LANES; k++)
            s[j + k] = ct_vexpf(s[j + k] - mx);
        for (int k = 0; k < LANES; k++)
            acc[k] += (double)s[j + k];
    }
    for (int k = 0; j < n; j++, k++) {
        s[j] = ct_vexpf(s[j] - mx);
        acc[k] += (double)s[j];
    }
    return (float)(1.0 / tree_sum(acc));
}

CT_HOT static void
softmax_bwd_row_portable(float *ds, float *p, int64_t i, int64_t n, float inv, float scale) {
    double acc[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        for (int k = 0; k < LANES; k++)
            p[j + k] *= inv;
        for (int k = 0; k < LANES; k++)
            acc[k] += (double)p[j + k] * (double)ds[j + k];
    }
    for (int k = 0; j < n; j++, k++) {
        p[j] *= inv;
        acc[k] += (double)p[j] * (double)ds[j];
    }
    float fdot = (float)tree_sum(acc);
    for (j = 0; j < n; j++)
        ds[j] = j <= i ? scale * p[j] * (ds[j] - fdot) : 0.0f;
}

#if SOFTMAX_X86
#define AVX512 __attribute__((target("avx512f")))

static __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* ct_vexpf on 16 lanes: its operations in its order (max_ps and min_ps are its clamps, NaN
 * passing through as there). */
static inline __attribute__((always_inline)) AVX512 __m512 vexp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    __m512 c = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
    __m512 m = _mm512_add_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)), magic);
    __m512 n = _mm512_sub_ps(m, magic);
    __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(m), _mm512_set1_epi32(0x4B400000));
    __m512 r = _mm512_sub_ps(c, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
                      _mm512_set1_ps(1.0f));
    /* ni / 2 rounded toward zero, as C's division */
    __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(ni, _mm512_srli_epi32(ni, 31)), 1);
    __m512i n2 = _mm512_sub_epi32(ni, n1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
}

/* The 16 running sums of a0 (sums 0-7) and a1 (8-15) in the tree order. */
static inline __attribute__((always_inline)) AVX512 double tree_sum16(__m512d a0, __m512d a1) {
    __m512d t8 = _mm512_add_pd(a0, a1);
    __m256d t4 = _mm256_add_pd(_mm512_castpd512_pd256(t8), _mm512_extractf64x4_pd(t8, 1));
    __m128d t2 = _mm_add_pd(_mm256_castpd256_pd128(t4), _mm256_extractf128_pd(t4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t2, _mm_unpackhi_pd(t2, t2)));
}

/* The upper 8 lanes of x in double. */
static inline __attribute__((always_inline)) AVX512 __m512d hi_pd(__m512 x) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}

/* Rows i .. i+R-1 (row q at s + q * ld), their operations interleaved: one row's passes are
 * chains of dependent reductions (the max, the sums, the division), so R rows at once keep the
 * vector units busy where one row waits. Each row's own operations, and so its bits, are those
 * of a group of one (softmax_row_avx512). The keys past row q's query are read as -inf. */
static inline __attribute__((always_inline)) AVX512 void
softmax_group(int R, float *s, int64_t ld, int64_t i, int64_t n, float *inv) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx[GROUP], vm[GROUP];
    __m512d a0[GROUP], a1[GROUP];
#pragma GCC unroll 4
    for (int q = 0; q < R; q++)
        mx[q] = ninf;
    for (int64_t j = 0; j < n; j += 16)
#pragma GCC unroll 4
        for (int q = 0; q < R; q++) {
            __m512 x =
                _mm512_mask_loadu_ps(ninf, lanes(i + q + 1 - j) & lanes(n - j), s + q * ld + j);
            mx[q] = _mm512_max_ps(x, mx[q]);
        }
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) {
        vm[q] = _mm512_set1_ps(_mm512_reduce_max_ps(mx[q]));
        a0[q] = a1[q] = _mm512_setzero_pd();
    }
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 in = lanes(n - j);
#pragma GCC unroll 4
        for (int q = 0; q < R; q++) {
            __m512 x = _mm512_mask_loadu_ps(ninf, lanes(i + q + 1 - j) & in, s + q * ld + j);
            __m512 e = vexp16(_mm512_sub_ps(x, vm[q]));
            _mm512_mask_storeu_ps(s + q * ld + j, in, e);
            a0[q] = _mm512_add_pd(a0[q], _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
            a1[q] = _mm512_add_pd(a1[q], hi_pd(e));
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < R; q++)
        inv[q] = (float)(1.0 / tree_sum16(a0[q], a1[q]));
}

AVX512 static void
softmax_rows_avx512(float *s, int64_t ld, int64_t i0, int64_t i1, int64_t n, float *inv) {
    int64_t i = i0;
    for (; i + GROUP <= i1; i += GROUP)
        softmax_group(GROUP, s + (i - i0) * ld, ld, i, n, inv + (i - i0));
    for (; i < i1; i++)
        softmax_group(1, s + (i - i0) * ld, ld, i, n, inv + (i - i0));
}

/* Rows i .. i+R-1 of the backward (softmax_bwd_row_avx512), interleaved as softmax_group. */
static inline __attribute__((always_inline)) AVX512 void softmax_bwd_group(
    int R, float *ds, float *p, int64_t ld, int64_t i, int64_t n, const float *inv, float scale) {
    __m512 vi[GROUP], vf[GROUP];
    __m512d a0[GROUP], a1[GROUP];
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) {
        vi[q] = _mm512_set1_ps(inv[q]);
        a0[q] = a1[q] = _mm512_setzero_pd();
    }
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 in = lanes(n - j);
#pragma GCC unroll 4
        for (int q = 0; q < R; q++) {
            __m512 pv = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, p + q * ld + j), vi[q]);
            __m512 dv = _mm512_maskz_loadu_ps(in, ds + q * ld + j);
            _mm512_mask_storeu_ps(p + q * ld + j, in, pv);
            a0[q] =
                _mm512_add_pd(a0[q], _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(pv)),
                                                   _mm512_cvtps_pd(_mm512_castps512_ps256(dv))));
            a1[q] = _mm512_add_pd(a1[q], _mm512_mul_pd(hi_pd(pv), hi_pd(dv)));
        }
    }
#pragma GCC unroll 4
    for (int q = 0; q < R; q++)
        vf[q] = _mm512_set1_ps((float)tree_sum16(a0[q], a1[q]));
    __m512 vs = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 in = lanes(n - j);
#pragma GCC unroll 4
        for (int q = 0; q < R; q++) {
            __mmask16 below = lanes(i + q + 1 - j) & in;
            __m512 pv = _mm512_maskz_loadu_ps(in, p + q * ld + j);
            __m512 dv = _mm512_maskz_loadu_ps(in, ds + q * ld + j);
            __m512 r = _mm512_mul_ps(_mm512_mul_ps(vs, pv), _mm512_sub_ps(dv, vf[q]));
            _mm512_mask_storeu_ps(ds + q * ld + j, in, _mm512_maskz_mov_ps(below, r));
        }
    }
}

AVX512 static void softmax_bwd_rows_avx512(float *ds,
                                           float *p,
                                           int64_t ld,
                                           int64_t i0,
                                           int64_t i1,
                                           int64_t n,
                                           const float *inv,
                                           float scale) {
    int64_t i = i0;
    for (; i + GROUP <= i1; i += GROUP)
        softmax_bwd_group(GROUP, ds + (i - i0) * ld, p + (i - i0) * ld, ld, i, n, inv + (i - i0),
                          scale);
    for (; i < i1; i++)
        softmax_bwd_group(1, ds + (i - i0) * ld, p + (i - i0) * ld, ld, i, n, inv + (i - i0),
                          scale);
}

/* One row: a group of one. */
AVX512 static float softmax_row_avx512(float *s, int64_t i, int64_t n) {
    float inv;
    softmax_group(1, s, 0, i, n, &inv);
    return inv;
}

AVX512 static void
softmax_bwd_row_avx512(float *ds, float *p, int64_t i, int64_t n, float inv, float scale) {
    softmax_bwd_group(1, ds, p, 0, i, n, &inv, scale);
}
#endif /* SOFTMAX_X86 */

float ct_k_attn_softmax_row(ct_k_attn_isa isa, float *s, int64_t i, int64_t n) {
#if SOFTMAX_X86
    if (isa >= CT_K_ATTN_ISA_AVX512) return softmax_row_avx512(s, i, n);
#endif
    (void)isa;
    return softmax_row_portable(s, i, n);
}

void ct_k_attn_softmax_rows(
    ct_k_attn_isa isa, float *s, int64_t ld, int64_t i0, int64_t i1, int64_t n, float *inv) {
#if SOFTMAX_X86
    if (isa >= CT_K_ATTN_ISA_AVX512) {
        softmax_rows_avx512(s, ld, i0, i1, n, inv);
        return;
    }
#endif
    (void)isa;
    for (int64_t i = i0; i < i1; i++)
        inv[i - i0] = softmax_row_portable(s + (i - i0) * ld, i, n);
}

void ct_k_attn_softmax_bwd_rows(ct_k_attn_isa isa,
                                float *ds,
                                float *p,
                                int64_t ld,
                                int64_t i0,
                                int64_t i1,
                                int64_t n,
                                const float *inv,
                                float scale) {
#if SOFTMAX_X86
    if (isa >= CT_K_ATTN_ISA_AVX512) {
        softmax_bwd_rows_avx512(ds, p, ld, i0, i1, n, inv, scale);
        return;
    }
#endif
    (void)isa;
    for (int64_t i = i0; i < i1; i++)
        softmax_bwd_row_portable(ds + (i - i0) * ld, p + (i - i0) * ld, i, n, inv[i - i0], scale);
}

void ct_k_attn_softmax_bwd_row(
    ct_k_attn_isa isa, float *ds, float *p, int64_t i, int64_t n, float inv, float scale) {
#if SOFTMAX_X86
    if (isa >= CT_K_ATTN_ISA_AVX512) {
        softmax_bwd_row_avx512(ds, p, i, n, inv, scale);
        return;
    }
#endif
    (void)isa;
    softmax_bwd_row_portable(ds, p, i, n, inv, scale);
}
