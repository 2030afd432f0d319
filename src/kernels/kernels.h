/*
 * kernels.h - compute kernels behind the ops: a fast path (OpenBLAS, oneDNN, SIMD) and a naive
 * reference twin for each, selected by the context's `kernels` setting. Internal.
 *
 * Kernels work on raw float pointers; shapes are given in comments on each argument. They
 * overwrite (beta = 0) or accumulate (beta = 1) as stated. They take no arena memory; the
 * oneDNN paths keep per-context caches (primitives, per-thread scratchpads) that grow when a
 * new shape first appears, and oneDNN's C++ runtime makes small allocations of its own per
 * primitive execution (outside the injected allocator).
 */
#ifndef CT_KERNELS_H
#define CT_KERNELS_H

#include <stdbool.h>

#include "core/core_internal.h"

/*
 * C = alpha * op(A) @ op(B) + beta * C, row-major. op(A) is [M, K] (A is [K, M] when trans_a),
 * op(B) is [K, N] (B is [N, K] when trans_b), C is [M, N]; lda/ldb/ldc are row strides.
 * Each C element is accumulated over K in a fixed order, whatever the thread count.
 */
typedef void ct_k_gemm_fn(ct_ctx *ctx,
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
                          int64_t ldc);
CT_INTERNAL ct_k_gemm_fn ct_k_gemm;
/* Its twins, with the same contract: the naive reference loops, and OpenBLAS (and oneDNN)
 * tiles without the dispatch. */
CT_INTERNAL ct_k_gemm_fn ct_k_gemm_ref;
CT_INTERNAL ct_k_gemm_fn ct_k_gemm_blas;

/*
 * C = alpha * op(A) @ op(B) + beta * C for operands held as bf16 (the bit patterns, as
 * ct_bf16_from_f32 gives them; lda/ldb count elements), with f32 accumulation into the f32 C.
 * The same tiles as ct_k_gemm_blas (set by the shape and the machine), each on oneDNN's bf16
 * matmul; a product called
 * inside a parallel region, or one oneDNN refuses, widens its operands to f32 (exact) for
 * ct_k_gemm_blas. For contexts where ct_k_gemm_bf16_native holds; its twin is
 * ct_k_gemm_bf16_ref.
 */
typedef void ct_k_gemm_bf16_fn(ct_ctx *ctx,
                               bool trans_a,
                               bool trans_b,
                               int64_t m,
                               int64_t n,
                               int64_t k,
                               float alpha,
                               const uint16_t *a, /* op(A) [M, K] */
                               int64_t lda,
                               const uint16_t *b, /* op(B) [K, N] */
                               int64_t ldb,
                               float beta,
                               float *c, /* [M, N] */
                               int64_t ldc);
CT_INTERNAL ct_k_gemm_bf16_fn ct_k_gemm_bf16;
CT_INTERNAL ct_k_gemm_bf16_fn ct_k_gemm_bf16_ref;

/*
 * C = op(A) @ op(B) + bias, bias [N] added to every row (a linear layer's output), with a and b
 * f32 (ct_k_gemm) or, when bf16, bf16 (ct_k_gemm_bf16). A tile that oneDNN's matmul runs adds
 * the bias to its finished sums as it writes them (a primitive with a bias argument); any
 * other tile, and the untiled paths, start C's rows as the bias and add the product to them
 * (beta 1), on the tile's thread just before its product. Either way the bits depend on the
 * shape and the machine only, not on the thread count.
 */
CT_INTERNAL void ct_k_gemm_bias(ct_ctx *ctx,
                                bool bf16,
                                bool trans_a,
                                bool trans_b,
                                int64_t m,
                                int64_t n,
                                int64_t k,
                                const void *a, /* op(A) [M, K] */
                                int64_t lda,
                                const void *b, /* op(B) [K, N] */
                                int64_t ldb,
                                const float *bias, /* [N] */
                                float *c,          /* [M, N] */
                                int64_t ldc);

/* How ct_k_gemm_blas (and ct_k_gemm_bf16, ct_k_gemm_bias) cut C into tiles, one
 * single-threaded product each: `tiles` blocks of `t` rows of C, or of `t` columns where
 * split_n, the last one shorter when t does not divide the dimension (tiles 1: one call). A
 * function of the shape, the transposes, the kernel set and the context's cap (ct_ctx's
 * gemm_tiles) only: never of the thread count. */
typedef struct ct_k_gemm_cut {
    int64_t tiles, t;
    bool split_n;
} ct_k_gemm_cut;
CT_INTERNAL ct_k_gemm_cut
ct_k_gemm_cut_for(const ct_ctx *ctx, bool trans_a, int64_t m, int64_t n, int64_t k);

/* Whether products of bf16 values run on ct_k_gemm_bf16 in this context: the fast kernels and
 * ct_k_onednn_bf16_native. Otherwise callers multiply the rounded f32 values with ct_k_gemm. */
CT_INTERNAL bool ct_k_gemm_bf16_native(ct_ctx *ctx);
/* Whether oneDNN's bf16 matmul is chosen in this context: CT_BF16_KERNELS_ONEDNN, or AUTO on a
 * CPU with bf16 dot products (AVX512_BF16, AMX); never without OpenMP. */
CT_INTERNAL bool ct_k_onednn_bf16_native(ct_ctx *ctx);
/* How many GEMM tiles ran on oneDNN's bf16 matmul in this context (for tests). */
CT_INTERNAL int64_t ct_k_onednn_bf16_gemms(const ct_ctx *ctx);
/* How many GEMM tiles oneDNN's matmul ran with a bias argument (ct_k_gemm_bias; for tests). */
CT_INTERNAL int64_t ct_k_onednn_bias_gemms(const ct_ctx *ctx);
/* How many GEMM tiles ran with strided operands copied dense first, for oneDNN's AMX kernels
 * (gemm_onednn.c; for tests). */
CT_INTERNAL int64_t ct_k_onednn_packed_gemms(const ct_ctx *ctx);
/* How many GEMM primitives this context has created (for tests: a repeated step makes none). */
CT_INTERNAL int64_t ct_k_onednn_gemm_plans_built(const ct_ctx *ctx);

/*
 * oneDNN matmul tiles (src/kernels/onednn/gemm_onednn.c). prepare builds or finds the cached
 * one-thread primitive for that tile geometry (call it outside parallel regions, with the
 * number of threads that will run tiles); false means use OpenBLAS. run executes one tile on
 * the calling thread; false means it did nothing (use another kernel for that tile). With bf16
 * the primitive takes bf16 operands (a and b point at uint16_t), else f32 ones. With bias (a
 * primitive of its own; prepare with beta 0 and alpha 1) the tile's rows are bias[0..n) added
 * to the finished sums, which may round differently from the bias copied into C and added to
 * with beta 1 where oneDNN sums K in blocks.
 */
CT_INTERNAL bool ct_k_onednn_gemm_prepare(ct_ctx *ctx,
                                          int nt,
                                          bool bf16,
                                          bool bias,
                                          bool trans_a,
                                          bool trans_b,
                                          int64_t m,
                                          int64_t n,
                                          int64_t k,
                                          float alpha,
                                          int64_t lda,
                                          int64_t ldb,
                                          float beta,
                                          int64_t ldc);
CT_INTERNAL bool ct_k_onednn_gemm_run(ct_ctx *ctx,
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
                                      const float *bias,
                                      float *c,
                                      int64_t ldc);

/* The versions of the libraries loaded at run time, into buf (versions.c): oneDNN's
 * "MAJOR.MINOR.PATCH (ISA avx512_core_bf16)", the ISA being the one it chose for this CPU, and
 * OpenBLAS's configuration ("OpenBLAS 0.3.21 DYNAMIC_ARCH ... SkylakeX MAX_THREADS=64"). */
CT_INTERNAL void ct_k_onednn_version(char *buf, size_t size);
CT_INTERNAL void ct_k_blas_version(char *buf, size_t size);
/* The kernels ctx runs, into buf: "oneDNN avx512_core_bf16 (bf16 native)" (the ISA oneDNN chose
 * here), "OpenBLAS (...)" or "reference (...)", with how bf16 products run. */
CT_INTERNAL void ct_k_describe(ct_ctx *ctx, char *buf, size_t size);

#endif /* CT_KERNELS_H */
