/*
 * gemm_blas.c - GEMM through OpenBLAS's cblas_sgemm, and the dispatch between it and the
 * reference twin.
 *
 * OpenBLAS partitions level-3 work over M and N, never over K, so every element of C sums its
 * K products in the same order for any thread count: results are bitwise reproducible.
 */
#include <cblas.h>

#include "kernels/kernels.h"

void ct_k_blas_gemm(const ct_ctx *ctx,
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
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

void ct_k_gemm(const ct_ctx *ctx,
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
    if (ctx->reference_kernels)
        ct_k_ref_gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        ct_k_blas_gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
