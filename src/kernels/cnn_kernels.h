/*
 * cnn_kernels.h - the naive reference twin of 2-D convolution (src/kernels/ref/conv2d_ref.c).
 * Internal.
 *
 * The fast path (im2col/col2im around ct_k_gemm, parallel over the batch) lives in
 * src/ops/conv2d.c because it draws its scratch buffers from the graph's arena; these kernels
 * allocate nothing and are what it is tested against. Layouts are NCHW and PyTorch's: x
 * [N, C, H, W], weight [O, C/groups, KH, KW], y [N, O, OH, OW], with
 * OH = (H + 2*pad_h - dil_h*(KH-1) - 1) / stride_h + 1 (floor), likewise OW.
 */
#ifndef CT_CNN_KERNELS_H
#define CT_CNN_KERNELS_H

#include "core/core_internal.h"

/* The geometry of one convolution; every field is validated by the op before a kernel runs
 * (sizes >= 0, stride and dilation >= 1, groups >= 1 dividing c and o, c/groups = cg). */
typedef struct ct_k_conv2d_geom {
    int64_t n, c, h, w;  /* input  [N, C, H, W] */
    int64_t o, kh, kw;   /* weight [O, C/groups, KH, KW] */
    int64_t oh, ow;      /* output [N, O, OH, OW] */
    int64_t stride[2];   /* (h, w) */
    int64_t padding[2];  /* (h, w), zero padding */
    int64_t dilation[2]; /* (h, w) */
    int64_t groups;
} ct_k_conv2d_geom;

/* y = conv2d(x, w) + b, overwriting y. Sums in double, one output element at a time. */
CT_INTERNAL void ct_k_conv2d_ref_fwd(const ct_k_conv2d_geom *s,
                                     const float *x, /* [N, C, H, W] */
                                     const float *w, /* [O, C/groups, KH, KW] */
                                     const float *b, /* [O], or NULL for no bias */
                                     float *y);      /* [N, O, OH, OW], overwritten */

/* Gradients of conv2d given dy, each accumulated (+=); a NULL destination is skipped.
 * Every element is a sum in double over the elements it depends on (a gather, no scatter). */
CT_INTERNAL void ct_k_conv2d_ref_bwd(const ct_k_conv2d_geom *s,
                                     const float *x,  /* [N, C, H, W] */
                                     const float *w,  /* [O, C/groups, KH, KW] */
                                     const float *dy, /* [N, O, OH, OW] */
                                     float *dx,       /* [N, C, H, W], += ; or NULL */
                                     float *dw,       /* [O, C/groups, KH, KW], += ; or NULL */
                                     float *db);      /* [O], += ; or NULL */

/*
 * The oneDNN path (src/kernels/onednn/conv2d_onednn.c): JIT kernels on blocked layouts, run
 * per fixed batch chunk on one thread each, so results do not depend on the thread count.
 * Call ct_k_conv2d_onednn_scratch first: it builds (or finds) the cached primitives and says how
 * many scratch bytes a call with nt threads needs; false means oneDNN cannot take this geometry
 * (or the build has no OpenMP) and the caller must use another path. The run functions return
 * 1 when done, 0 when they did nothing (use another path), -1 when a oneDNN call failed midway
 * (outputs may be partly written: report an internal error). Gradients accumulate (+=); a NULL
 * destination is skipped.
 *
 * bf16 (the plan key, as has_bias): x, w and dy are converted to bf16 on their way into the
 * primitives (rounded to nearest even, exact for values bf16 autocast already rounded) and
 * multiplied by oneDNN's bf16 kernels with f32 accumulation; y, dx, dw and db stay f32, so
 * nothing is rounded after the products. Only ask for it where ct_k_onednn_bf16_native says
 * so: elsewhere oneDNN emulates it slowly, or declines (then the call returns false/0).
 */
CT_INTERNAL bool ct_k_conv2d_onednn_scratch(ct_ctx *ctx,
                                            const ct_k_conv2d_geom *s,
                                            bool has_bias,
                                            bool bf16,
                                            bool backward,
                                            int nt,
                                            size_t *bytes);
CT_INTERNAL int ct_k_conv2d_onednn_fwd(ct_ctx *ctx,
                                       const ct_k_conv2d_geom *s,
                                       bool bf16,
                                       bool relu,      /* then y = relu(y), ct_k_relu_inplace */
                                       const float *x, /* [N, C, H, W] */
                                       const float *w, /* [O, C/groups, KH, KW] */
                                       const float *b, /* [O] or NULL */
                                       float *y,       /* [N, O, OH, OW], overwritten */
                                       void *scratch,
                                       int nt);
CT_INTERNAL int ct_k_conv2d_onednn_bwd(ct_ctx *ctx,
                                       const ct_k_conv2d_geom *s,
                                       bool has_bias,   /* as in the forward (plan key) */
                                       bool bf16,       /* likewise */
                                       const float *x,  /* [N, C, H, W] */
                                       const float *w,  /* [O, C/groups, KH, KW] */
                                       const float *dy, /* [N, O, OH, OW] */
                                       float *dx,       /* += ; or NULL */
                                       float *dw,       /* += ; or NULL */
                                       float *db,       /* += ; or NULL */
                                       void *scratch,
                                       int nt);
/*
 * The fused conv2d -> ReLU -> 2x2 max pool (stride 2, no padding) on oneDNN: per batch chunk the
 * convolution writes its own layout (nChw16c), the pool reads it straight (ReLU applied on the
 * way: the same bits as relu then pool) and writes y [N, O, OH/2, OW/2] and the winners' codes
 * [N, O, OH/2, OW/2] (the place in the window 0..3, as max_pool2d's 2x2 path: the first maximum
 * in row-major window order, a NaN winning and the last NaN kept; code may be NULL). The
 * backward pass routes dy [N, O, OH/2, OW/2] to the winners in that layout, masked as
 * relu's backward gives it (0 + (y <= 0 ? 0 : dy)), and runs the convolution's backward on it:
 * the results of max_pool2d(conv2d_relu(...)) bit for bit. The scratch call says (false) when a
 * geometry or layout cannot take this path (OH or OW below 2 among them); then compose.
 *
 * keep: where the primitives read x in a layout of their own (blocked, or bf16), the forward
 * pass can leave that copy in `keep` (ct_k_conv2d_pool_onednn_keep_bytes, 0 when there is none
 * to keep) and the backward pass read it there instead of converting x again: the same bits.
 * NULL in either: no copy kept or used.
 */
CT_INTERNAL size_t ct_k_conv2d_pool_onednn_keep_bytes(
    ct_ctx *ctx, const ct_k_conv2d_geom *s, bool has_bias, bool bf16, int nt);
CT_INTERNAL bool ct_k_conv2d_pool_onednn_scratch(ct_ctx *ctx,
                                                 const ct_k_conv2d_geom *s,
                                                 bool has_bias,
                                                 bool bf16,
                                                 bool backward,
                                                 int nt,
                                                 size_t *bytes);
CT_INTERNAL int ct_k_conv2d_relu_pool_onednn_fwd(ct_ctx *ctx,
                                                 const ct_k_conv2d_geom *s,
                                                 bool bf16,
                                                 const float *x, /* [N, C, H, W] */
                                                 const float *w, /* [O, C/groups, KH, KW] */
                                                 const float *b, /* [O] or NULL */
                                                 float *y,       /* [N, O, OH/2, OW/2] */
                                                 uint8_t *code,  /* likewise, or NULL */
                                                 void *keep,     /* or NULL */
                                                 void *scratch,
                                                 int nt);
CT_INTERNAL int
ct_k_conv2d_relu_pool_onednn_bwd(ct_ctx *ctx,
                                 const ct_k_conv2d_geom *s,
                                 bool has_bias,
                                 bool bf16,
                                 const float *x,      /* [N, C, H, W] */
                                 const float *w,      /* [O, C/groups, KH, KW] */
                                 const float *y,      /* the forward's y */
                                 const uint8_t *code, /* and its codes */
                                 const void *keep,    /* the forward's, or NULL */
                                 const float *dy,     /* [N, O, OH/2, OW/2] */
                                 float *dx,           /* += ; or NULL */
                                 bool dx_fresh,       /* dx unset: zeroed chunk by chunk */
                                 float *dw,           /* += ; or NULL */
                                 float *db,           /* += ; or NULL */
                                 void *scratch,
                                 int nt);

/* Addressing of a 4-D f32 buffer blocked by channels: element (n, c, h, w) at
 * n*sn + (c/blk)*sc + h*sh + w*sw + c%blk (blk 1: plain NCHW with these strides). */
typedef struct ct_k_blocked {
    int64_t blk, sn, sc, sh, sw;
} ct_k_blocked;

/* y [n, c, ph, pw] = 2x2 max pool of relu(src) (src [n, c, 2ph.., 2pw..] as v says), winners'
 * codes in code (or NULL). */
CT_INTERNAL void ct_k_relu_pool2x2_blocked(const ct_k_blocked *v,
                                           const float *src,
                                           int64_t n,
                                           int64_t c,
                                           int64_t ph,
                                           int64_t pw,
                                           float *y,
                                           uint8_t *code);
/* dst (as v says) at each winner = 0 + (y <= 0 ? 0 : dy), +0 at the rest of its window and in
 * the layout's padding channels; dy, y and code [n, c, ph, pw]. Where no window reaches (an odd
 * last row or column) dst is left alone: the caller zeroes it. */
CT_INTERNAL void ct_k_pool2x2_scatter_blocked(const ct_k_blocked *v,
                                              const float *dy,
                                              const float *y,
                                              const uint8_t *code,
                                              int64_t n,
                                              int64_t c,
                                              int64_t ph,
                                              int64_t pw,
                                              float *dst);
/* The two above with the tile transposes chosen: AVX-512 (avx512 true, only where
 * ct_k_pool_blocked_has_avx512 says the CPU has it) or portable C; the same bits either way. */
CT_INTERNAL bool ct_k_pool_blocked_has_avx512(void);
CT_INTERNAL void ct_k_relu_pool2x2_blocked_isa(bool avx512,
                                               const ct_k_blocked *v,
                                               const float *src,
                                               int64_t n,
                                               int64_t c,
                                               int64_t ph,
                                               int64_t pw,
                                               float *y,
                                               uint8_t *code);
CT_INTERNAL void ct_k_pool2x2_scatter_blocked_isa(bool avx512,
                                                  const ct_k_blocked *v,
                                                  const float *dy,
                                                  const float *y,
                                                  const uint8_t *code,
                                                  int64_t n,
                                                  int64_t c,
                                                  int64_t ph,
                                                  int64_t pw,
                                                  float *dst);

/* ct_k_pool2x2_scatter_blocked with each value rounded to bf16 (to nearest even, values below
 * 2^-126 in magnitude as zero: AVX512_BF16's conversion, which oneDNN's reorders use) into dst,
 * a bf16 buffer with v's element strides, for the bf16 backward primitives; the same bits as
 * the f32 routing followed by that conversion. v->blk must be a multiple of 16. Only where
 * ct_k_pool_blocked_has_bf16 says the CPU has AVX512_BF16 (and AVX-512 BW and VL). */
CT_INTERNAL bool ct_k_pool_blocked_has_bf16(void);
CT_INTERNAL void ct_k_pool2x2_scatter_blocked_bf16(const ct_k_blocked *v,
                                                   const float *dy,
                                                   const float *y,
                                                   const uint8_t *code,
                                                   int64_t n,
                                                   int64_t c,
                                                   int64_t ph,
                                                   int64_t pw,
                                                   uint16_t *dst);

/* y[0..n) = relu(y) as ct_op_relu computes it (0 > v ? 0 : v: NaN and -0 pass through). */
static inline void ct_k_relu_inplace(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] = 0.0f > y[i] ? 0.0f : y[i];
}

/* How many batch chunks (forward or backward) ran on bf16 plans in this context (for tests). */
CT_INTERNAL int64_t ct_k_onednn_bf16_convs(const ct_ctx *ctx);

#endif /* CT_CNN_KERNELS_H */
