/*
 * attn_kernels.h - causal multi-head self-attention kernels: a fast path built on ct_k_gemm
 * (OpenBLAS) and a naive reference twin in plain loops. Internal.
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
 * gemm sums over K in a fixed order. None of the kernels allocates; scratch is passed in.
 */
#ifndef CT_ATTN_KERNELS_H
#define CT_ATTN_KERNELS_H

#include "core/core_internal.h"

/* The fast path's block: query rows (and key columns) per block. A constant, so the blocking,
 * and with it the bits, depend on the shape only; 32 keeps each block's GEMMs efficient while
 * skipping most of the upper triangle at the GPT example's T = 128. */
#define CT_K_ATTN_BLOCK 32

/*
 * Forward, fast path (defined in src/ops/attention.c): per (b, h) and block of CT_K_ATTN_BLOCK
 * query rows, S = q k^T / sqrt(hd) and out = P v over the keys up to the block's last row, through
 * ct_k_gemm around the masked softmax rows; OpenMP over (head, block) items.
 */
CT_INTERNAL void ct_k_attention_fwd(ct_ctx *ctx,
                                    float *out,       /* [B, T, C], overwritten */
                                    float *att,       /* [B, H, T, T], overwritten */
                                    const float *qkv, /* [B, T, 3C] */
                                    int64_t B,
                                    int64_t T,
                                    int64_t C,
                                    int64_t H);
/*
 * Backward, fast path: adds (+=) the gradient of qkv given that of out.
 */
CT_INTERNAL void ct_k_attention_bwd(ct_ctx *ctx,
                                    float *dqkv,       /* [B, T, 3C], accumulated */
                                    float *scratch,    /* [B, H, T, T], clobbered */
                                    const float *dout, /* [B, T, C] */
                                    const float *qkv,  /* [B, T, 3C], as in the forward */
                                    float *att,        /* [B, H, T, T]: the probabilities */
                                    int64_t B,
                                    int64_t T,
                                    int64_t C,
                                    int64_t H);

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
