/*
 * attn_block.c - the block products of causal attention (src/ops/attention.c): small GEMMs
 * that read their operands in place (any row and column strides on A, a row stride on B), with
 * no packing, and accumulate in registers. An AVX-512 version (chosen at run time where the CPU
 * and the operating system have it) and a portable one (CT_HOT: vectorised for the ISA the
 * loader picks) give the same bits: both sum each element over k in order, by fused
 * multiply-adds, from zero or from C, then multiply by alpha once. An AVX2 version does the
 * same at 8 lanes for CPUs without AVX-512. The bf16 product multiplies
 * pairs of bf16 values with vdpbf16ps (AVX512_BF16), f32 accumulation, in its own order.
 */
#include <math.h>

#include "kernels/vmath.h"

#include "kernels/attn_kernels.h"
#include "kernels/avx512_transpose.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ATTN_X86 1
#include <immintrin.h>
#else
#define ATTN_X86 0
#endif

/* Columns per strip: the portable version's accumulator row, on the stack. */
enum { STRIP = 64 };

CT_HOT void ct_k_attn_mm_portable(int64_t m,
                                  int64_t n,
                                  int64_t k,
                                  float alpha,
                                  const float *a,
                                  int64_t rsa,
                                  int64_t csa,
                                  const float *b,
                                  int64_t ldb,
                                  bool acc,
                                  float *c,
                                  int64_t ldc) {
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j0 = 0; j0 < n; j0 += STRIP) {
            int64_t nj = n - j0 < STRIP ? n - j0 : STRIP;
            float s[STRIP];
            float *cr = c + r * ldc + j0;
            for (int64_t j = 0; j < nj; j++)
                s[j] = acc ? cr[j] : 0.0f;
            for (int64_t kk = 0; kk < k; kk++) {
                float av = a[r * rsa + kk * csa];
                const float *bk = b + kk * ldb + j0;
                for (int64_t j = 0; j < nj; j++)
                    s[j] = fmaf(av, bk[j], s[j]);
            }
            for (int64_t j = 0; j < nj; j++)
                cr[j] = alpha * s[j];
        }
    }
}

#if ATTN_X86
#define AVX512    __attribute__((target("avx512f")))
#define AVX512_BF __attribute__((target("avx512f,avx512bf16")))
#define INLINE    static inline __attribute__((always_inline))

/* R rows by NV vectors of 16 columns (the masks cut the last strip): R * NV accumulators,
 * each row's A element broadcast once per k against NV loads of B's row k. */
INLINE AVX512 void tile_rn(int R,
                           int NV,
                           int64_t k,
                           float alpha,
                           const float *a,
                           int64_t rsa,
                           int64_t csa,
                           const float *b,
                           int64_t ldb,
                           bool acc,
                           float *c,
                           int64_t ldc,
                           __mmask16 m0,
                           __mmask16 m1) {
    __m512 s0[8], s1[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        s0[r] = acc ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
        s1[r] = acc && NV == 2 ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; kk++) {
        const float *bk = b + kk * ldb, *ak = a + kk * csa;
        __m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
        __m512 b1 = NV == 2 ? _mm512_maskz_loadu_ps(m1, bk + 16) : b0;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(ak[r * rsa]);
            s0[r] = _mm512_fmadd_ps(av, b0, s0[r]);
            if (NV == 2) s1[r] = _mm512_fmadd_ps(av, b1, s1[r]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, _mm512_mul_ps(va, s0[r]));
        if (NV == 2) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, _mm512_mul_ps(va, s1[r]));
    }
}

/* Each tile shape its own function: inlined into one, they leave the register allocator
 * spilling B's vectors. */
#define TILE_FN(R, NV)                                                                             \
    AVX512 __attribute__((noinline)) static void tile_##R##_##NV(                                  \
        int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa, const float *b,          \
        int64_t ldb, bool acc, float *c, int64_t ldc, __mmask16 m0, __mmask16 m1) {                \
        tile_rn(R, NV, k, alpha, a, rsa, csa, b, ldb, acc, c, ldc, m0, m1);                        \
    }
TILE_FN(8, 1)
TILE_FN(4, 1)
TILE_FN(2, 1)
TILE_FN(1, 1)
TILE_FN(8, 2)
TILE_FN(4, 2)
TILE_FN(2, 2)
TILE_FN(1, 2)
#define tile(R, NV, ...) tile_##R##_##NV(__VA_ARGS__)

/* One strip of up to 32 columns, its rows by 8, then 4, 2, 1. */
#define STRIP_ROWS(NV)                                                                             \
    do {                                                                                           \
        int64_t r = 0;                                                                             \
        for (; r + 8 <= m; r += 8)                                                                 \
            tile(8, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);   \
        if (r + 4 <= m) {                                                                          \
            tile(4, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);   \
            r += 4;                                                                                \
        }                                                                                          \
        if (r + 2 <= m) {                                                                          \
            tile(2, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);   \
            r += 2;                                                                                \
        }                                                                                          \
        if (r < m)                                                                                 \
            tile(1, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);   \
    } while (0)

static __mmask16 lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

AVX512 static void mm_avx512(int64_t m,
                             int64_t n,
                             int64_t k,
                             float alpha,
                             const float *a,
                             int64_t rsa,
                             int64_t csa,
                             const float *b,
                             int64_t ldb,
                             bool acc,
                             float *c,
                             int64_t ldc) {
    for (int64_t j0 = 0; j0 < n; j0 += 32, b += 32, c += 32) {
        __mmask16 m0 = lanes(n - j0), m1 = lanes(n - j0 - 16);
        if (m1)
            STRIP_ROWS(2);
        else
            STRIP_ROWS(1);
    }
}

/* The bf16 tile: A's element is a pair of bf16 (one 32-bit word, broadcast), B's row p holds
 * 16 such pairs per vector, one per column. */
INLINE AVX512_BF void tile_bf16_rn(int R,
                                   int NV,
                                   int64_t kp,
                                   float alpha,
                                   const uint32_t *a,
                                   int64_t lda,
                                   const uint32_t *b,
                                   int64_t ldb,
                                   float *c,
                                   int64_t ldc,
                                   __mmask16 m0,
                                   __mmask16 m1) {
    __m512 s0[8], s1[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        s0[r] = s1[r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; p++) {
        const uint32_t *bp = b + p * ldb;
        __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(m0, bp);
        __m512bh b1 = NV == 2 ? (__m512bh)_mm512_maskz_loadu_epi32(m1, bp + 16) : b0;
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * lda + p]);
            s0[r] = _mm512_dpbf16_ps(s0[r], av, b0);
            if (NV == 2) s1[r] = _mm512_dpbf16_ps(s1[r], av, b1);
        }
    }
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, _mm512_mul_ps(va, s0[r]));
        if (NV == 2) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, _mm512_mul_ps(va, s1[r]));
    }
}

#define TILE_BF16_FN(R, NV)                                                                        \
    AVX512_BF __attribute__((noinline)) static void tile_bf16_##R##_##NV(                          \
        int64_t kp, float alpha, const uint32_t *a, int64_t lda, const uint32_t *b, int64_t ldb,   \
        float *c, int64_t ldc, __mmask16 m0, __mmask16 m1) {                                       \
        tile_bf16_rn(R, NV, kp, alpha, a, lda, b, ldb, c, ldc, m0, m1);                            \
    }
TILE_BF16_FN(8, 1)
TILE_BF16_FN(4, 1)
TILE_BF16_FN(2, 1)
TILE_BF16_FN(1, 1)
TILE_BF16_FN(8, 2)
TILE_BF16_FN(4, 2)
TILE_BF16_FN(2, 2)
TILE_BF16_FN(1, 2)
#define tile_bf16(R, NV, ...) tile_bf16_##R##_##NV(__VA_ARGS__)

#define STRIP_ROWS_BF16(NV)                                                                        \
    do {                                                                                           \
        int64_t r = 0;                                                                             \
        for (; r + 8 <= m; r += 8)                                                                 \
            tile_bf16(8, NV, kp, alpha, a + r * lda, lda, b, ldb, c + r * ldc, ldc, m0, m1);       \
        if (r + 4 <= m) {                                                                          \
            tile_bf16(4, NV, kp, alpha, a + r * lda, lda, b, ldb, c + r * ldc, ldc, m0, m1);       \
            r += 4;                                                                                \
        }                                                                                          \
        if (r + 2 <= m) {                                                                          \
            tile_bf16(2, NV, kp, alpha, a + r * lda, lda, b, ldb, c + r * ldc, ldc, m0, m1);       \
            r += 2;                                                                                \
        }                                                                                          \
        if (r < m)                                                                                 \
            tile_bf16(1, NV, kp, alpha, a + r * lda, lda, b, ldb, c + r * ldc, ldc, m0, m1);       \
    } while (0)

AVX512_BF static void mm_bf16(int64_t m,
                              int64_t n,
                              int64_t kp,
                              float alpha,
                              const uint32_t *a,
                              int64_t lda,
                              const uint32_t *b,
                              int64_t ldb,
                              float *c,
                              int64_t ldc) {
    for (int64_t j0 = 0; j0 < n; j0 += 32, b += 32, c += 32) {
        __mmask16 m0 = lanes(n - j0), m1 = lanes(n - j0 - 16);
        if (m1)
            STRIP_ROWS_BF16(2);
        else
            STRIP_ROWS_BF16(1);
    }
}

/* The AVX2 version (x86-64-v3 CPUs without AVX-512): the same tiles at 8 lanes, R rows by NV
 * vectors, AVX2's masked loads and stores cutting the last strip. */
#define AVX2 __attribute__((target("avx2,fma")))

INLINE AVX2 __m256i lanes8(int64_t n) {
    int32_t k = n < 0 ? 0 : n > 8 ? 8 : (int32_t)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

INLINE AVX2 void tile8_rn(int R,
                          int NV,
                          int64_t k,
                          float alpha,
                          const float *a,
                          int64_t rsa,
                          int64_t csa,
                          const float *b,
                          int64_t ldb,
                          bool acc,
                          float *c,
                          int64_t ldc,
                          __m256i m0,
                          __m256i m1) {
    __m256 s0[6], s1[6];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        s0[r] = acc ? _mm256_maskload_ps(c + r * ldc, m0) : _mm256_setzero_ps();
        s1[r] = acc && NV == 2 ? _mm256_maskload_ps(c + r * ldc + 8, m1) : _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; kk++) {
        const float *bk = b + kk * ldb, *ak = a + kk * csa;
        __m256 b0 = _mm256_maskload_ps(bk, m0);
        __m256 b1 = NV == 2 ? _mm256_maskload_ps(bk + 8, m1) : b0;
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 av = _mm256_broadcast_ss(ak + r * rsa);
            s0[r] = _mm256_fmadd_ps(av, b0, s0[r]);
            if (NV == 2) s1[r] = _mm256_fmadd_ps(av, b1, s1[r]);
        }
    }
    __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        _mm256_maskstore_ps(c + r * ldc, m0, _mm256_mul_ps(va, s0[r]));
        if (NV == 2) _mm256_maskstore_ps(c + r * ldc + 8, m1, _mm256_mul_ps(va, s1[r]));
    }
}

#define TILE8_FN(R, NV)                                                                            \
    AVX2 __attribute__((noinline)) static void tile8_##R##_##NV(                                   \
        int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa, const float *b,          \
        int64_t ldb, bool acc, float *c, int64_t ldc, __m256i m0, __m256i m1) {                    \
        tile8_rn(R, NV, k, alpha, a, rsa, csa, b, ldb, acc, c, ldc, m0, m1);                       \
    }
TILE8_FN(6, 1)
TILE8_FN(4, 1)
TILE8_FN(2, 1)
TILE8_FN(1, 1)
TILE8_FN(6, 2)
TILE8_FN(4, 2)
TILE8_FN(2, 2)
TILE8_FN(1, 2)
#define tile8(R, NV, ...) tile8_##R##_##NV(__VA_ARGS__)

/* One strip of up to 16 columns, its rows by 6, then 4, 2, 1. */
#define STRIP8_ROWS(NV)                                                                            \
    do {                                                                                           \
        int64_t r = 0;                                                                             \
        for (; r + 6 <= m; r += 6)                                                                 \
            tile8(6, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);  \
        if (r + 4 <= m) {                                                                          \
            tile8(4, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);  \
            r += 4;                                                                                \
        }                                                                                          \
        if (r + 2 <= m) {                                                                          \
            tile8(2, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);  \
            r += 2;                                                                                \
        }                                                                                          \
        if (r < m)                                                                                 \
            tile8(1, NV, k, alpha, a + r * rsa, rsa, csa, b, ldb, acc, c + r * ldc, ldc, m0, m1);  \
    } while (0)

AVX2 static void mm_avx2(int64_t m,
                         int64_t n,
                         int64_t k,
                         float alpha,
                         const float *a,
                         int64_t rsa,
                         int64_t csa,
                         const float *b,
                         int64_t ldb,
                         bool acc,
                         float *c,
                         int64_t ldc) {
    for (int64_t j0 = 0; j0 < n; j0 += 16, b += 16, c += 16) {
        __m256i m0 = lanes8(n - j0), m1 = lanes8(n - j0 - 8);
        if (n - j0 > 8)
            STRIP8_ROWS(2);
        else
            STRIP8_ROWS(1);
    }
}

/* Stores the transposed block: column c of the rows loaded (nr of them) to dst + c * ldd. */
INLINE AVX512 void store_columns(float *dst, int64_t ldd, __m512 r[16], int64_t nc, int64_t nr) {
    __mmask16 m = lanes(nr);
    for (int64_t c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(dst + c * ldd, m, r[c]);
}

/* ct_vround_bf16 on 16 lanes: the same integer steps. */
INLINE AVX512 __m512 round_bf16(__m512 x) {
    __m512i u = _mm512_castps_si512(x), hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    r = _mm512_and_si512(r, hi);
    __m512i nan = _mm512_and_si512(_mm512_or_si512(u, _mm512_set1_epi32(0x00400000)), hi);
    __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 isnan = _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7F800000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(isnan, r, nan));
}

AVX512 static void transpose_avx512(bool round,
                                    float *dst,
                                    int64_t ldd,
                                    const float *src,
                                    int64_t lds,
                                    int64_t rows,
                                    int64_t cols) {
    for (int64_t j0 = 0; j0 < rows; j0 += 16)
        for (int64_t d0 = 0; d0 < cols; d0 += 16) {
            int64_t nr = rows - j0 < 16 ? rows - j0 : 16, nc = cols - d0 < 16 ? cols - d0 : 16;
            __mmask16 m = lanes(nc);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nr ? _mm512_maskz_loadu_ps(m, src + (j0 + i) * lds + d0)
                              : _mm512_setzero_ps();
            if (round)
                for (int i = 0; i < 16; i++)
                    r[i] = round_bf16(r[i]);
            ct_k_transpose16(r);
            store_columns(dst + d0 * ldd + j0, ldd, r, nc, nr);
        }
}

/* 32 floats from p (n of them) as 16 pairs of bf16. */
INLINE AVX512_BF __m512 load_pairs(const float *p, int64_t n) {
    __m512 lo = _mm512_maskz_loadu_ps(lanes(n), p),
           hi = _mm512_maskz_loadu_ps(lanes(n - 16), p + 16);
    return (__m512)_mm512_cvtne2ps_pbh(hi, lo);
}

AVX512_BF static void pairs_t_avx512(
    uint32_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t np) {
    for (int64_t j0 = 0; j0 < rows; j0 += 16)
        for (int64_t p0 = 0; p0 < np; p0 += 16) {
            int64_t nr = rows - j0 < 16 ? rows - j0 : 16, nc = np - p0 < 16 ? np - p0 : 16;
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nr ? load_pairs(src + (j0 + i) * lds + 2 * p0, 2 * nc)
                              : _mm512_setzero_ps();
            ct_k_transpose16(r);
            store_columns((float *)(void *)(dst + p0 * ldd + j0), ldd, r, nc, nr);
        }
}

AVX512_BF static void
pairs_avx512(uint32_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t np) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t p0 = 0; p0 < np; p0 += 16) {
            int64_t nc = np - p0 < 16 ? np - p0 : 16;
            _mm512_mask_storeu_ps((float *)(void *)(dst + i * ldd + p0), lanes(nc),
                                  load_pairs(src + i * lds + 2 * p0, 2 * nc));
        }
}
#endif /* ATTN_X86 */

void ct_k_attn_transpose(ct_k_attn_isa isa,
                         bool round,
                         float *dst,
                         int64_t ldd,
                         const float *src,
                         int64_t lds,
                         int64_t rows,
                         int64_t cols) {
#if ATTN_X86
    if (isa >= CT_K_ATTN_ISA_AVX512) {
        transpose_avx512(round, dst, ldd, src, lds, rows, cols);
        return;
    }
#endif
    (void)isa;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t d = 0; d < cols; d++)
            dst[d * ldd + j] = round ? ct_vround_bf16(src[j * lds + d]) : src[j * lds + d];
}

void ct_k_attn_pairs(ct_k_attn_isa isa,
                     bool transposed,
                     uint32_t *dst,
                     int64_t ldd,
                     const float *src,
                     int64_t lds,
                     int64_t rows,
                     int64_t np) {
#if ATTN_X86
    if (isa == CT_K_ATTN_ISA_AVX512_BF16) {
        if (transposed)
            pairs_t_avx512(dst, ldd, src, lds, rows, np);
        else
            pairs_avx512(dst, ldd, src, lds, rows, np);
        return;
    }
#endif
    (void)isa;
    for (int64_t j = 0; j < rows; j++)
        for (int64_t p = 0; p < np; p++) {
            uint32_t w = ct_k_attn_bf16_pair(ct_vround_bf16(src[j * lds + 2 * p]),
                                             ct_vround_bf16(src[j * lds + 2 * p + 1]));
            dst[transposed ? p * ldd + j : j * ldd + p] = w;
        }
}

/* The compiler's run-time check reads what its start-up code found once (the CPU's features,
 * less those whose registers the operating system does not save), where ct_build_get asks the
 * CPU each time: cheap enough for every call. */
ct_k_attn_isa ct_k_attn_isa_get(void) {
#if ATTN_X86
    if (__builtin_cpu_supports("avx512f")) {
        if (__builtin_cpu_supports("avx512bf16")) return CT_K_ATTN_ISA_AVX512_BF16;
        return CT_K_ATTN_ISA_AVX512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CT_K_ATTN_ISA_AVX2;
#endif
    return CT_K_ATTN_ISA_PORTABLE;
}

void ct_k_attn_mm(ct_k_attn_isa isa,
                  int64_t m,
                  int64_t n,
                  int64_t k,
                  float alpha,
                  const float *a,
                  int64_t rsa,
                  int64_t csa,
                  const float *b,
                  int64_t ldb,
                  bool acc,
                  float *c,
                  int64_t ldc) {
#if ATTN_X86
    if (isa >= CT_K_ATTN_ISA_AVX512) {
        mm_avx512(m, n, k, alpha, a, rsa, csa, b, ldb, acc, c, ldc);
        return;
    }
    if (isa == CT_K_ATTN_ISA_AVX2) {
        mm_avx2(m, n, k, alpha, a, rsa, csa, b, ldb, acc, c, ldc);
        return;
    }
#endif
    (void)isa;
    ct_k_attn_mm_portable(m, n, k, alpha, a, rsa, csa, b, ldb, acc, c, ldc);
}

void ct_k_attn_mm_bf16(ct_k_attn_isa isa,
                       int64_t m,
                       int64_t n,
                       int64_t kp,
                       float alpha,
                       const uint32_t *a,
                       int64_t lda,
                       const uint32_t *b,
                       int64_t ldb,
                       float *c,
                       int64_t ldc) {
    CT_ASSERT(isa == CT_K_ATTN_ISA_AVX512_BF16);
#if ATTN_X86
    mm_bf16(m, n, kp, alpha, a, lda, b, ldb, c, ldc);
#else
    (void)m, (void)n, (void)kp, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)c;
    (void)ldc;
#endif
}
