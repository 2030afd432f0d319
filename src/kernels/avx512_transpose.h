/*
 * avx512_transpose.h - a 16 x 16 transpose of 32-bit values in AVX-512 registers, for the
 * kernels that move tiles between layouts (attention's operand layouts in attn_block.c, the
 * blocked pool in onednn/pool_blocked.c). Internal. x86-64 with GCC or clang only; it is
 * inlined into the callers' AVX-512 functions, which run only where the CPU has AVX-512F
 * (their run-time dispatch).
 */
#ifndef CT_KERNELS_AVX512_TRANSPOSE_H
#define CT_KERNELS_AVX512_TRANSPOSE_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* r[i] holds row i; on return r[c] holds column c: pairs of rows interleaved, then pairs of
 * pairs, then the 128-bit quarters gathered in two rounds. */
static inline __attribute__((always_inline, target("avx512f"))) void
ct_k_transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* u[4i + k], quarter L: column 4L + k of rows 4i .. 4i+3 */
    for (int k = 0; k < 4; k++) {
        __m512 a = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88);
        __m512 b = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD);
        __m512 c = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        __m512 d = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
        r[k] = _mm512_shuffle_f32x4(a, c, 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(a, c, 0xDD);
        r[4 + k] = _mm512_shuffle_f32x4(b, d, 0x88);
        r[12 + k] = _mm512_shuffle_f32x4(b, d, 0xDD);
    }
}
#endif

#endif
