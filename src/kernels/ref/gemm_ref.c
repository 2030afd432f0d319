/*
 * gemm_ref.c - the naive reference GEMM: three loops, accumulated in double, the twin that the
 * BLAS path is tested against, and its bf16 twin (ct_k_gemm_bf16_ref). Slow by design; clarity
 * is the point.
 */
#include <string.h>

#include "kernels/kernels.h"

void ct_k_gemm_ref(ct_ctx *ctx,
                   bool trans_a,
                   bool trans_b,
                   int64_t m,
                   int64_t n,
                   int64_t k,
                   float alpha,
                   const float *a,
                   int64_t lda,
                   const float *b,
                   int64_t ldb,
                   float beta,
                   float *c,
                   int64_t ldc) {
    (void)ctx;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; p++) {
                float av = trans_a ? a[p * lda + i] : a[i * lda + p];
                float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
                acc += (double)av * (double)bv;
            }
            float prev = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
            c[i * ldc + j] = (float)((double)alpha * acc + (double)prev);
        }
    }
}

/* bf16 bits to the f32 they stand for (exact; ct_f32_from_bf16 without the tensor module) */
static float widen1(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void ct_k_gemm_bf16_ref(ct_ctx *ctx,
                        bool trans_a,
                        bool trans_b,
                        int64_t m,
                        int64_t n,
                        int64_t k,
                        float alpha,
                        const uint16_t *a,
                        int64_t lda,
                        const uint16_t *b,
                        int64_t ldb,
                        float beta,
                        float *c,
                        int64_t ldc) {
    (void)ctx;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0;
            for (int64_t p = 0; p < k; p++) {
                float av = widen1(trans_a ? a[p * lda + i] : a[i * lda + p]);
                float bv = widen1(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
                acc += (double)av * (double)bv;
            }
            float prev = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
            c[i * ldc + j] = (float)((double)alpha * acc + (double)prev);
        }
    }
}
