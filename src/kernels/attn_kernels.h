/*
 * attn_kernels.h - causal multi-head self-attention kernels: a fast path built on ct_k_gemm
 * (OpenBLAS) and a naive reference twin in plain loops. Internal.
 *
 * Layout (nanoGPT's): qkv [B, T, 3C] holds q, k and v one after another along the last dim,
 * each split into H heads of hd = C/H contiguous channels; head h of q at time t is
 * qkv[b, t, h*hd .. h*hd+hd), of k at offset C, of v at offset 2C. The output [B, T, C] holds
 * the heads concatenated back. att [B, H, T, T] holds the softmax probabilities with zeros
 * above the diagonal (the causal mask). Backward computes them again, by the forward's own
 * code, rather than having them kept (16 MiB of the GPT example's step, as FlashAttention
 * recomputes them); it costs one more q k^T product and softmax per head.
 *
 * Results do not depend on the thread count: every element is produced by one thread, and
 * gemm sums over K in a fixed order. None of the kernels allocates; scratch is passed in.
 */
#ifndef CT_ATTN_KERNELS_H
#define CT_ATTN_KERNELS_H

#include "core/core_internal.h"

/*
 * Forward, fast path (defined in src/ops/attention.c): per (b, h), S = q k^T / sqrt(hd) and
 * out = P v through ct_k_gemm around the masked softmax rows; OpenMP over the heads, or inside
 * a head when there are too few.
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
