/*
 * gemm_blas.c - GEMM through OpenBLAS's cblas_sgemm, and the dispatch between it and the
 * reference twin.
 *
 * Determinism: neither OpenBLAS nor oneDNN gives the same bits for 1 and N threads (their
 * blocking and small-matrix paths change with the thread count; measured here on 128x784x512).
 * So OpenBLAS runs single-threaded and we parallelise ourselves: C is cut into tiles whose size
 * depends only on the shape, each tile is one single-threaded sgemm, and OpenMP spreads the
 * tiles over the context's threads. Every C element is then computed by the same call with the
 * same operands whatever the thread count.
 */
#include <cblas.h>

#include "kernels/kernels.h"

/* Tile extent along a dimension of size d: about 64, at most 16 tiles' worth of slack. */
static int64_t tile_extent(int64_t d) {
    if (d < 128) return d;
    int64_t tiles = (d + 63) / 64;
    return (d + tiles - 1) / tiles;
}

static void sgemm(bool trans_a,
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
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)k, alpha, a,
                (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

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
    if (m == 0 || n == 0) return;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX) {
        /* beyond 32-bit BLAS integers: correct but slow */
        ct_k_ref_gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    /* Split the larger of M and N; small products stay one call. */
    bool split_n = n >= m;
    int64_t d = split_n ? n : m;
    int64_t t = (m * n * k < 64 * 64 * 64) ? d : tile_extent(d);
    int64_t tiles = (d + t - 1) / t;
    int nt = ct_threads_for(ctx, tiles, (split_n ? m : n) * t * k);
    CT_OMP_FOR(nt)
    for (int64_t i = 0; i < tiles; i++) {
        int64_t lo = i * t, len = lo + t <= d ? t : d - lo;
        if (split_n) {
            const float *bt = trans_b ? b + lo * ldb : b + lo;
            sgemm(trans_a, trans_b, m, len, k, alpha, a, lda, bt, ldb, beta, c + lo, ldc);
        } else {
            const float *at = trans_a ? a + lo : a + lo * lda;
            sgemm(trans_a, trans_b, len, n, k, alpha, at, lda, b, ldb, beta, c + lo * ldc, ldc);
        }
    }
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
