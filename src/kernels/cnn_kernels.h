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

#endif /* CT_CNN_KERNELS_H */
