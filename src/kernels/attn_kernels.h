/*
 * attn_kernels.h - causal multi-head self-attention kernels: a fast path built on small block
 * products of its own (attn_block.c: register-blocked, operands read in place, AVX-512 where
 * the CPU has it) and a naive reference twin in plain loops. Internal.
 *
 * Layout (nanoGPT's): qkv [B, T, 3C] holds q, k and v one after another along the last dim,
 * each split into H heads of hd = C/H contiguous channels; head h of q at time t is
 * qkv[b, t, h*hd .. h*hd+hd), of k at offset C, of v at offset 2C. The output [B, T, C] holds
 * the heads concatenated back. att [B, H, T, T] holds the softmax probabilities (the causal
 * mask: zeros above the diagonal); scratch the same shape for their gradient. The reference
 * twins write every entry; the fast path writes only the CT_K_ATTN_BLOCK-square blocks on or below
 * the diagonal (zeros above the diagonal inside them) and leaves the rest as it was. Backward
 * computes the probabilities again, by the forward's own code, rather than having them kept
 * (16 MiB of the GPT example's step, as FlashAttention recomputes them); it costs one more
 * q k^T product and softmax per head.
 *
 * Results do not depend on the thread count: every element is produced by one thread, and
 * the block products sum over k in a fixed order. None of the kernels allocates; scratch is
 * passed in.
 */
#ifndef CT_ATTN_KERNELS_H
#define CT_ATTN_KERNELS_H

#include <stdbool.h>
#include <string.h>

#include "core/core_internal.h"

/* The fast path's block: query rows (and key columns) per block. A constant, so the blocking,
 * and with it the bits, depend on the shape only; 32 keeps each block's GEMMs efficient while
 * skipping most of the upper triangle at the GPT example's T = 128. */
#define CT_K_ATTN_BLOCK 32

/* The work buffer of the fast path, in floats: three [B, T, C] forward, five backward (the
 * heads' operands copied into the layouts the block products read best). */
static inline int64_t ct_k_attention_work(int64_t B, int64_t T, int64_t C, bool backward) {
    return (backward ? 5 : 3) * B * T * C;
}

/*
 * Forward, fast path (defined in src/ops/attention.c): per (b, h) and block of CT_K_ATTN_BLOCK
 * query rows, S = q k^T / sqrt(hd) and out = P v over the keys up to the block's last row, by
 * the block products around the masked softmax rows; OpenMP over (head, block) items. bf16
 * (autocast): q, k and v (and backward's dout) are rounded to bf16 (nearest even) as they are
 * copied into the work buffer; where the CPU has AVX512_BF16 and the context's bf16_kernels
 * is not CT_BF16_KERNELS_F32, q k^T (and backward's dout v^T) then run as bf16 dot products
 * with f32 accumulation (the same products, exact in f32, summed in another order); the
 * products with P and dS (f32) stay f32 products. The reference twins take values rounded
 * beforehand.
 */
CT_INTERNAL void ct_k_attention_fwd(ct_ctx *ctx,
                                    float *out,  /* [B, T, C], overwritten */
                                    float *att,  /* [B, H, T, T], overwritten */
                                    float *work, /* ct_k_attention_work(.., false), clobbered */
                                    const float *qkv, /* [B, T, 3C] */
                                    bool bf16,
                                    int64_t B,
                                    int64_t T,
                                    int64_t C,
                                    int64_t H);
/*
 * Backward, fast path: adds (+=) the gradient of qkv given that of out, or with fresh stores it
 * over dqkv's unset values (each element is one block product's, so 0 + its sum: the bits of
 * adding to zeros). bf16 as in the forward (dout rounded too).
 */
CT_INTERNAL void ct_k_attention_bwd(ct_ctx *ctx,
                                    float *dqkv, /* [B, T, 3C], accumulated (stored if fresh) */
                                    bool fresh,
                                    float *scratch, /* [B, H, T, T], clobbered */
                                    float *work,    /* ct_k_attention_work(.., true), clobbered */
                                    const float *dout, /* [B, T, C] */
                                    const float *qkv,  /* [B, T, 3C], as in the forward */
                                    float *att,        /* [B, H, T, T]: the probabilities */
                                    bool bf16,
                                    int64_t B,
                                    int64_t T,
                                    int64_t C,
                                    int64_t H);

/* Whether the attention of ctx multiplies bf16 values as bf16 dot products (above). */
CT_INTERNAL bool ct_k_attention_bf16_native(ct_ctx *ctx, int64_t hd);

/* The instruction sets of the block products, as this CPU and operating system allow. */
typedef enum ct_k_attn_isa {
    CT_K_ATTN_ISA_PORTABLE,
    CT_K_ATTN_ISA_AVX2, /* and FMA */
    CT_K_ATTN_ISA_AVX512,
    CT_K_ATTN_ISA_AVX512_BF16,
    CT_K_ATTN_ISA_COUNT
} ct_k_attn_isa;
CT_INTERNAL ct_k_attn_isa ct_k_attn_isa_get(void);

/*
 * The block product (attn_block.c): C = alpha * (C0 + A B), C0 = C if acc, else 0, where
 * A(r, i) = a[r * rsa + i * csa] is [m, k] (so A^T by swapping the strides) and B is [k, n]
 * at row stride ldb. Each element is C0 plus its k products in order, by fused multiply-adds,
 * then times alpha: the same bits for every isa up to the one given (AVX2, AVX-512);
 * ct_k_attn_mm_portable is the C version that ct_k_attn_mm runs on other CPUs.
 */
typedef void ct_k_attn_mm_fn(int64_t m,
                             int64_t n,
                             int64_t k,
                             float alpha,
                             const float *a, /* A [m, k] by strides rsa, csa */
                             int64_t rsa,
                             int64_t csa,
                             const float *b, /* [k, n] */
                             int64_t ldb,
                             bool acc,
                             float *c, /* [m, n] */
                             int64_t ldc);
CT_INTERNAL ct_k_attn_mm_fn ct_k_attn_mm_portable;
CT_INTERNAL void ct_k_attn_mm(ct_k_attn_isa isa,
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
                              int64_t ldc);
/*
 * C = alpha * A B over bf16 values in pairs along k (kp pairs): a[r * lda + p] holds A's
 * elements (r, 2p) and (r, 2p + 1), b[p * ldb + j] B's elements (2p, j) and (2p + 1, j), each
 * pair as ct_k_attn_bf16_pair packs it. f32 accumulation by vdpbf16ps; isa must be
 * CT_K_ATTN_ISA_AVX512_BF16.
 */
CT_INTERNAL void ct_k_attn_mm_bf16(ct_k_attn_isa isa,
                                   int64_t m,
                                   int64_t n,
                                   int64_t kp,
                                   float alpha,
                                   const uint32_t *a, /* [m, kp] pairs */
                                   int64_t lda,
                                   const uint32_t *b, /* [kp, n] pairs */
                                   int64_t ldb,
                                   float *c, /* [m, n], overwritten */
                                   int64_t ldc);

/*
 * The masked softmax row of query i (attn_softmax.c): s[0, n) holds its scores against keys
 * 0 .. n-1; those past i count as -inf. On return s holds exp(s[j] - max) over j <= i and 0
 * beyond, and the return value is 1 / the sum of the exponentials (the sum in double): the
 * probabilities are s times it. The same bits for every isa.
 */
CT_INTERNAL float ct_k_attn_softmax_row(ct_k_attn_isa isa,
                                        float *s, /* [n], overwritten */
                                        int64_t i,
                                        int64_t n);

/* Rows i0 .. i1-1 of a block, row i at s + (i - i0) * ld (ld >= n: the rows do not overlap),
 * each ct_k_attn_softmax_row of query i over keys [0, n) with its 1 / sum in inv[i - i0]: the
 * same bits (with AVX-512 the rows run four at a time, interleaved). */
CT_INTERNAL void ct_k_attn_softmax_rows(ct_k_attn_isa isa,
                                        float *s, /* [i1 - i0, ld], overwritten */
                                        int64_t ld,
                                        int64_t i0,
                                        int64_t i1,
                                        int64_t n,
                                        float *inv); /* [i1 - i0] */

/*
 * The backward of that row, given its exponentials in p and inv (the forward's results) and
 * dP in ds: p becomes the probabilities P (p times inv) and ds becomes
 * dS = scale * P (dP - sum_j P dP) over j <= i and 0 beyond, the sum in double. The same bits
 * for every isa.
 */
CT_INTERNAL void ct_k_attn_softmax_bwd_row(ct_k_attn_isa isa,
                                           float *ds, /* [n]: dP in, dS out */
                                           float *p,  /* [n]: exponentials in, P out */
                                           int64_t i,
                                           int64_t n,
                                           float inv,
                                           float scale);

/* Rows i0 .. i1-1 of a block of ct_k_attn_softmax_bwd_row (ds and p at row stride ld, inv as
 * ct_k_attn_softmax_rows returned it): the same bits. */
CT_INTERNAL void ct_k_attn_softmax_bwd_rows(ct_k_attn_isa isa,
                                            float *ds, /* [i1 - i0, ld]: dP in, dS out */
                                            float *p,  /* [i1 - i0, ld]: exponentials in, P out */
                                            int64_t ld,
                                            int64_t i0,
                                            int64_t i1,
                                            int64_t n,
                                            const float *inv,
                                            float scale);

/* dst[d * ldd + j] = src[j * lds + d]: src [rows, cols] transposed, each value rounded to bf16
 * (as ct_vround_bf16) if round. */
CT_INTERNAL void ct_k_attn_transpose(ct_k_attn_isa isa,
                                     bool round,
                                     float *dst, /* [cols, rows] at row stride ldd */
                                     int64_t ldd,
                                     const float *src, /* [rows, cols] at row stride lds */
                                     int64_t lds,
                                     int64_t rows,
                                     int64_t cols);
/* The np pairs along each row of src (2 np values, rounded to bf16, nearest even) as
 * ct_k_attn_bf16_pair packs them: dst[j * ldd + p], or dst[p * ldd + j] when transposed. With
 * AVX512_BF16 the conversion instruction counts values below 2^-126 in magnitude as zero, as
 * the dot product instruction does anyway. */
CT_INTERNAL void ct_k_attn_pairs(ct_k_attn_isa isa,
                                 bool transposed,
                                 uint32_t *dst,
                                 int64_t ldd,
                                 const float *src, /* [rows, 2 np] at row stride lds */
                                 int64_t lds,
                                 int64_t rows,
                                 int64_t np);

/* Two f32 holding bf16 values (low 16 bits zero) as the pair (lo, hi) of bf16 in one word, lo
 * first in memory. */
static inline uint32_t ct_k_attn_bf16_pair(float lo, float hi) {
    uint32_t a, b;
    memcpy(&a, &lo, sizeof a);
    memcpy(&b, &hi, sizeof b);
    return (a >> 16) | (b & 0xFFFF0000u);
}

/* The reference twins (src/kernels/ref/attention_ref.c): the same contracts, plain serial
 * loops accumulated in double. */
CT_INTERNAL void ct_k_attention_ref_fwd(ct_ctx *ctx,
                                        float *out,       /* [B, T, C], overwritten */
                                        float *att,       /* [B, H, T, T], overwritten */
                                        const float *qkv, /* [B, T, 3C] */
                                        int64_t B,
                                        int64_t T,
                                        int64_t C,
                                        int64_t H);
CT_INTERNAL void ct_k_attention_ref_bwd(ct_ctx *ctx,
                                        float *dqkv,       /* [B, T, 3C], accumulated */
                                        float *scratch,    /* [B, H, T, T], clobbered */
                                        const float *dout, /* [B, T, C] */
                                        const float *qkv,  /* [B, T, 3C], as in the forward */
                                        float *att,        /* [B, H, T, T]: the probabilities */
                                        int64_t B,
                                        int64_t T,
                                        int64_t C,
                                        int64_t H);

#endif /* CT_ATTN_KERNELS_H */
