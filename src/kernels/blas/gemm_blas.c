/*
 * gemm_blas.c - GEMM through OpenBLAS's cblas_sgemm, and the dispatch between it and the
 * reference twin.
 *
 * Determinism: neither OpenBLAS nor oneDNN gives the same bits for 1 and N threads (their
 * blocking and small-matrix paths change with the thread count; measured here on 128x784x512).
 * So OpenBLAS runs single-threaded and we parallelise ourselves: C is cut into tiles whose size
 * depends only on the shape and the machine's core count (ct_ctx's gemm_tiles), each tile is
 * one single-threaded sgemm, and OpenMP spreads the tiles over the context's threads. Every C
 * element is then computed by the same call with the same operands whatever the thread count.
 * Tiles beyond the cores cost: each re-reads the operand the tiles share (and oneDNN packs it
 * again), which on 2 cores made the MLP's products 20-25% slower cut in 8 than in 2.
 *
 * bf16 operands (ct_k_gemm_bf16) take the same tiles on oneDNN's bf16 matmul, reading the
 * caller's bf16 matrices in place.
 */
#include <cblas.h>
#include <string.h>

#include "kernels/kernels.h"

/* Number of tiles: a power of two (so 1, 2, 4, ... threads share them evenly), about one per
 * 8 MFLOP (each tile repacks the shared operand, so small tiles cost), at most cap (the
 * context's gemm_tiles: one per core), and none thinner than 16 rows or columns. A function
 * of the shape and the machine only. */
static int64_t tile_count(int64_t m, int64_t n, int64_t k, int64_t d, int64_t cap) {
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int64_t t = 1;
    while (t < cap && flops / (double)(2 * t) >= 8e6 && d / (2 * t) >= 16)
        t *= 2;
    return t;
}

ct_k_gemm_cut ct_k_gemm_cut_for(const ct_ctx *ctx, bool trans_a, int64_t m, int64_t n, int64_t k) {
    int64_t cap = ctx->gemm_tiles;
    /* The larger of M and N. On oneDNN's tiles (the fast kernels) a product with A transposed
     * (C = A^T B: a weight gradient) is cut along M wherever that gives as many tiles: a tile
     * along N reads all of the transposed A, which oneDNN lays out again for each call, a tile
     * along M only its own columns of it (on 2 cores the MLP's weight gradients took 22-43% less
     * time cut along M). */
    bool split_n = n >= m;
    if (trans_a && ctx->kernels == CT_KERNELS_FAST &&
        tile_count(m, n, k, m, cap) >= tile_count(m, n, k, n, cap))
        split_n = false;
    int64_t d = split_n ? n : m;
    int64_t tiles = tile_count(m, n, k, d, cap);
    int64_t t = d > 0 ? (d + tiles - 1) / tiles : 1;
    return (ct_k_gemm_cut){d > 0 ? (d + t - 1) / t : 1, t, split_n};
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

/* One GEMM cut into tiles of t rows (or columns, split_n) of C out of d. */
typedef struct gemm_job {
    ct_ctx *ctx;
    bool bf16, dnn, trans_a, trans_b, split_n;
    int64_t m, n, k, t, d;
    float alpha;
    const void *a; /* float, or uint16_t (bf16) */
    int64_t lda;
    const void *b;
    int64_t ldb;
    float beta;
    float *c;
    int64_t ldc;
    const float *bias; /* NULL, or [n] added to every row of C (ct_k_gemm_bias) */
} gemm_job;

/* rows x cols of C at stride ldc set to bias[0..cols) in every row. */
static void fill_rows(float *c, int64_t rows, int64_t cols, int64_t ldc, const float *bias) {
    for (int64_t r = 0; r < rows; r++)
        memcpy(c + r * ldc, bias, (size_t)cols * sizeof(float));
}

/* Tile i of the job, on the calling thread. */
static void gemm_tile(const gemm_job *j, int64_t i) {
    int64_t lo = i * j->t, len = lo + j->t <= j->d ? j->t : j->d - lo;
    size_t es = j->bf16 ? sizeof(uint16_t) : sizeof(float);
    const char *at = j->a, *bt = j->b;
    float *ct = j->c;
    int64_t tm = j->m, tn = j->n;
    if (j->split_n) {
        bt += (size_t)(j->trans_b ? lo * j->ldb : lo) * es;
        ct = j->c + lo;
        tn = len;
    } else {
        at += (size_t)(j->trans_a ? lo : lo * j->lda) * es;
        ct = j->c + lo * j->ldc;
        tm = len;
    }
    const float *bias = j->bias ? j->bias + (j->split_n ? lo : 0) : NULL;
    /* with a bias, oneDNN adds it to the finished sums (beta 0); the other kernels copy it in
     * first and add the product to it (beta 1) */
    if (j->dnn &&
        ct_k_onednn_gemm_run(j->ctx, j->bf16, j->trans_a, j->trans_b, tm, tn, j->k, j->alpha, at,
                             j->lda, bt, j->ldb, bias ? 0.0f : j->beta, bias, ct, j->ldc))
        return;
    if (bias) fill_rows(ct, tm, tn, j->ldc, bias);
    if (j->bf16) /* oneDNN refused at run time (out of memory): C is untouched */
        ct_k_gemm_bf16_ref(j->ctx, j->trans_a, j->trans_b, tm, tn, j->k, j->alpha,
                           (const uint16_t *)(const void *)at, j->lda,
                           (const uint16_t *)(const void *)bt, j->ldb, j->beta, ct, j->ldc);
    else
        sgemm(j->trans_a, j->trans_b, tm, tn, j->k, j->alpha, (const float *)(const void *)at,
              j->lda, (const float *)(const void *)bt, j->ldb, j->beta, ct, j->ldc);
}

/* The tiles of C, each one single-threaded call: oneDNN's matmul where it takes the tile, else
 * OpenBLAS on the f32 values. With bf16 the operands are uint16_t bf16 and oneDNN's bf16 matmul
 * runs each tile; false (nothing done) when oneDNN does not take the product. */
static bool gemm_tiled(ct_ctx *ctx,
                       bool bf16,
                       bool trans_a,
                       bool trans_b,
                       int64_t m,
                       int64_t n,
                       int64_t k,
                       float alpha,
                       const void *a,
                       int64_t lda,
                       const void *b,
                       int64_t ldb,
                       float beta,
                       float *c,
                       int64_t ldc,
                       const float *bias) {
    if (m == 0 || n == 0) return true;
    CT_ASSERT(!bias || alpha == 1.0f); /* oneDNN's output scale would scale the bias too */
    if (bias) beta = 1.0f;
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX) {
        /* beyond 32-bit BLAS integers: correct but slow */
        if (bias) fill_rows(c, m, n, ldc, bias);
        if (bf16)
            ct_k_gemm_bf16_ref(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else
            ct_k_gemm_ref(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return true;
    }
    ct_k_gemm_cut cut = ct_k_gemm_cut_for(ctx, trans_a, m, n, k);
    bool split_n = cut.split_n;
    int64_t d = split_n ? n : m, tiles = cut.tiles, t = cut.t;
    int nt = ct_threads_for(ctx, tiles, (split_n ? m : n) * t * k);
    /* oneDNN for products worth a primitive (any bf16 one: the alternative widens it to f32),
     * from outside any parallel region (nesting level, not team size, decides: the choice must
     * not depend on the thread count) */
    int64_t tail = d - (tiles - 1) * t;
    bool dnn = ctx->kernels == CT_KERNELS_FAST && ct_omp_level() == 0 &&
               (bf16 || 2.0 * (double)m * (double)n * (double)k >= 1e6);
    if (dnn)
        dnn = ct_k_onednn_gemm_prepare(ctx, nt, bf16, bias != NULL, trans_a, trans_b,
                                       split_n ? m : t, split_n ? t : n, k, alpha, lda, ldb,
                                       bias ? 0.0f : beta, ldc) &&
              (tail == t || ct_k_onednn_gemm_prepare(ctx, nt, bf16, bias != NULL, trans_a, trans_b,
                                                     split_n ? m : tail, split_n ? tail : n, k,
                                                     alpha, lda, ldb, bias ? 0.0f : beta, ldc));
    if (bf16 && !dnn) return false;
    /* oneDNN inside a one-thread (inactive) region, or outside any, would otherwise fork its
     * own team */
    int saved = dnn ? ct_omp_swap_threads(nt) : 0;
    const gemm_job job = {ctx, bf16,  dnn, trans_a, trans_b, split_n, m,    n, k,   t,
                          d,   alpha, a,   lda,     b,       ldb,     beta, c, ldc, bias};
    if (nt <= 1) { /* no parallel region: libgomp allocates a team for each one of one thread */
        for (int64_t i = 0; i < tiles; i++)
            gemm_tile(&job, i);
    } else {
        CT_OMP_FOR(nt)
        for (int64_t i = 0; i < tiles; i++)
            gemm_tile(&job, i);
    }
    if (dnn) ct_omp_swap_threads(saved);
    return true;
}

void ct_k_gemm_blas(ct_ctx *ctx,
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
    (void)gemm_tiled(ctx, false, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                     NULL);
}

bool ct_k_gemm_bf16_native(ct_ctx *ctx) {
    return ctx->kernels == CT_KERNELS_FAST && ct_k_onednn_bf16_native(ctx);
}

/* rows x cols bf16 values at stride ld, widened (exactly) to f32 rows of cols. */
static void widen(float *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            uint32_t u = (uint32_t)src[r * ld + c] << 16;
            memcpy(&dst[r * cols + c], &u, sizeof u);
        }
}

void ct_k_gemm_bf16(ct_ctx *ctx,
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
    if (gemm_tiled(ctx, true, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL))
        return;
    /* small or nested: the f32 GEMM on the widened operands (the same products) */
    int64_t ar = trans_a ? k : m, ac = trans_a ? m : k, br = trans_b ? n : k, bc = trans_b ? k : n;
    size_t bytes = (size_t)(ar * ac + br * bc) * sizeof(float);
    float *wa = bytes ? ct_alloc(ctx, bytes) : NULL;
    if (!wa) {
        ct_k_gemm_bf16_ref(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    float *wb = wa + ar * ac;
    widen(wa, a, ar, ac, lda);
    widen(wb, b, br, bc, ldb);
    ct_k_gemm_blas(ctx, trans_a, trans_b, m, n, k, alpha, wa, ac, wb, bc, beta, c, ldc);
    ct_free(ctx, wa, bytes);
}

void ct_k_gemm(ct_ctx *ctx,
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
    if (ctx->kernels == CT_KERNELS_REFERENCE)
        ct_k_gemm_ref(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        ct_k_gemm_blas(ctx, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void ct_k_gemm_bias(ct_ctx *ctx,
                    bool bf16,
                    bool trans_a,
                    bool trans_b,
                    int64_t m,
                    int64_t n,
                    int64_t k,
                    const void *a,
                    int64_t lda,
                    const void *b,
                    int64_t ldb,
                    const float *bias,
                    float *c,
                    int64_t ldc) {
    if (ctx->kernels != CT_KERNELS_REFERENCE &&
        gemm_tiled(ctx, bf16, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc, bias))
        return;
    /* the reference kernels (for tests), or a bf16 product the tiles do not take (nested in a
     * parallel region): the same copy first */
    fill_rows(c, m, n, ldc, bias);
    if (bf16)
        ct_k_gemm_bf16(ctx, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
    else
        ct_k_gemm(ctx, trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
}
