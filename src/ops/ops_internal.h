/*
 * ops_internal.h - helpers shared by the op files (src/ops, src/loss): argument checks that
 * record a sticky graph failure with a precise message, output allocation, and parallel-loop
 * sizing. Internal.
 *
 * Pattern of an op:
 *     if (!ct_ops_begin(g, "relu", 1, (ct_tensor *[]){x})) return NULL;   // NULL input, failure
 *     if (!ct_ops_f32(g, "relu", "x", x)) return NULL;                      // dtype checks
 *     ct_tensor *y = ct_graph_new(g, CT_F32, x->ndim, x->shape);            // output
 *     ... forward kernel ...
 *     if (ct_graph_needs_grad(g, 1, &x)) { ct_node *n = ct_graph_record(...); ... }
 */
#ifndef CT_OPS_INTERNAL_H
#define CT_OPS_INTERNAL_H

#include "core/core_internal.h"
#include "ctrain/ops.h"

/* True when every input is non-NULL and the graph has not failed. A NULL input after a
 * successful graph means the caller passed NULL: that is recorded as an error. */
CT_INTERNAL bool ct_ops_begin(ct_graph *g, const char *op, int32_t n, ct_tensor *const *in);
/* True when t is f32; otherwise records "<op>: <what> must be f32, got <dtype>". */
CT_INTERNAL bool ct_ops_f32(ct_graph *g, const char *op, const char *what, const ct_tensor *t);
/* True when t is an integer index tensor (i32 or i64). */
CT_INTERNAL bool ct_ops_index(ct_graph *g, const char *op, const char *what, const ct_tensor *t);
/* Normalises a possibly negative axis for ndim dims; false (and a failure) when out of range. */
CT_INTERNAL bool ct_ops_axis(ct_graph *g, const char *op, int32_t ndim, int32_t *axis);
/* Reads index i of an i32/i64 tensor. */
CT_INTERNAL int64_t ct_ops_index_at(const ct_tensor *t, int64_t i);
/* outer = prod(shape[:axis]), dim = shape[axis], inner = prod(shape[axis+1:]). */
CT_INTERNAL void
ct_ops_split_axis(const ct_tensor *t, int32_t axis, int64_t *outer, int64_t *dim, int64_t *inner);
/* Thread count for a loop over n items of ~work flops each (see ct_threads_for). */
CT_INTERNAL int ct_ops_threads(const ct_graph *g, int64_t n, int64_t work);
/* The context's reference-kernel flag. */
CT_INTERNAL bool ct_ops_reference(const ct_graph *g);

/* Mixed precision (ct_graph_set_autocast): with bf16 autocast, a copy of x[0..n) rounded to
 * bf16 (as f32 values) in the graph's arena (scratch: take a mark before it and release it
 * after the product); otherwise x itself. NULL, with the graph's failure recorded, when the
 * arena cannot grow. */
CT_INTERNAL const float *ct_ops_autocast(ct_graph *g, const float *x, int64_t n);
/* The same rounding into dst, whatever the autocast setting (for backward passes). */
CT_INTERNAL void ct_ops_round_bf16(ct_graph *g, const float *x, float *dst, int64_t n);

/* y = gelu(x) and dx += dy * gelu'(x) over n elements: ct_op_gelu's loops (activation.c),
 * shared with ct_op_gelu_linear so that the two give the same bits. */
CT_INTERNAL void
ct_ops_gelu_fwd(ct_graph *g, ct_gelu_approx approx, const float *x, float *y, int64_t n);
/* y = gelu(x) rounded to bf16 (as ct_ops_bf16 rounds ct_ops_gelu_fwd's output, bit for bit) in
 * one pass, for gelu_linear's operand of the native bf16 GEMM. */
CT_INTERNAL void
ct_ops_gelu_fwd_bf16(ct_graph *g, ct_gelu_approx approx, const float *x, uint16_t *y, int64_t n);
CT_INTERNAL void ct_ops_gelu_bwd(
    ct_graph *g, ct_gelu_approx approx, const float *x, const float *dy, float *dx, int64_t n);

/* gelu_linear's backward over x[0..n) in one pass where it can (the erf form on the fast path;
 * otherwise the passes above): the activation again, as the forward pass multiplied it, into
 * a (f32, rounded to bf16 values when `round`) or h (bf16), either may be NULL; and, when dx is
 * not NULL, dx += da * gelu'(x) (dx unzeroed when `fresh`: ct_graph_grad_fresh). The same bits
 * as the separate passes. */
CT_INTERNAL void ct_ops_gelu_bwd_act(ct_graph *g,
                                     ct_gelu_approx approx,
                                     const float *x,
                                     const float *da,
                                     float *dx,
                                     bool fresh,
                                     float *a,
                                     bool round,
                                     uint16_t *h,
                                     int64_t n);

/* gelu_linear's forward pass when a backward pass follows, over x[0..n): the activation, as
 * the product multiplies it, into a (f32, rounded to bf16 values when `round`) or h (bf16; one
 * of the two is NULL), and gelu'(x) into gp, in one pass where it can (the erf form on the fast
 * path: erf and exp once for both; otherwise the loops above). The backward pass then reads
 * them instead of computing erf and exp again: dx += da * gp (dx unzeroed when `fresh`:
 * ct_graph_grad_fresh). Both give the bits of ct_op_gelu's passes. */
CT_INTERNAL void ct_ops_gelu_fwd_keep(ct_graph *g,
                                      ct_gelu_approx approx,
                                      const float *x,
                                      float *a,
                                      bool round,
                                      uint16_t *h,
                                      float *gp,
                                      int64_t n);
CT_INTERNAL void ct_ops_gelu_bwd_kept(
    ct_graph *g, const float *gp, const float *da, float *dx, bool fresh, int64_t n);

/* The node iarg that ct_ops_note_autocast sets to 1 (matmul, linear and conv2d leave it free). */
#define CT_OPS_AUTOCAST_ARG 7
/* Under bf16 autocast, marks the node (iarg[CT_OPS_AUTOCAST_ARG]) so that its backward pass
 * rounds as the forward pass did; does nothing otherwise. The rounded operands themselves are
 * not kept: rounding is a pure function of the inputs, which do not change before backward,
 * so the backward pass rounds them again into scratch (an arena copy of every matmul operand
 * would outlive the forward pass: 47 MiB of the GPT example's peak). The exception is linear's
 * input under the native bf16 GEMM, kept in bf16 for dW (matmul.c). */
CT_INTERNAL void ct_ops_note_autocast(ct_graph *g, ct_node *node);
/* Whether the node's forward pass ran under bf16 autocast (ct_ops_note_autocast marked it). */
CT_INTERNAL bool ct_ops_ran_autocast(const ct_node *n);
/* In a backward pass: input i's data as the forward pass multiplied it: rounded into arena
 * memory when it ran under autocast (take a scratch mark first, after allocating the inputs'
 * gradients), else the data itself. NULL on arena failure. */
CT_INTERNAL const float *ct_ops_operand(ct_graph *g, const ct_node *n, int i);
/* In a backward pass: the incoming gradient dy[0..count) rounded to bf16 into arena memory
 * when the forward pass ran under autocast (ct_ops_note_autocast), else dy itself; NULL
 * on arena failure. Call it after allocating the inputs' gradients and release it with a
 * scratch mark. */
CT_INTERNAL const float *
ct_ops_round_dy(ct_graph *g, const ct_node *n, const float *dy, int64_t count);

/* bf16 operands (bf16_cast.c). Whether this graph's bf16 products run on ct_k_gemm_bf16 (its
 * context's ct_k_gemm_bf16_native); when not, ops multiply f32 copies rounded as above. */
CT_INTERNAL bool ct_ops_bf16_native(ct_graph *g);
/* x[0..n) rounded to bf16 into the graph's arena (scratch when taken inside a mark); NULL on
 * arena failure. */
CT_INTERNAL uint16_t *ct_ops_bf16(ct_graph *g, const float *x, int64_t n);
/* t's values rounded to bf16: for a parameter, the graph's copy of them, made on first use and
 * kept to ct_graph_reset or the next ct_ctx_weights_changed (so it must not be written between
 * uses without one of those); for any other tensor ct_ops_bf16's scratch copy. */
CT_INTERNAL const uint16_t *ct_ops_bf16_tensor(ct_graph *g, const ct_tensor *t);
/* db[j] += the sum of column j of x [rows, cols] (bf16), each summed as ct_ops_sum_f64 sums a
 * column of their f32 values (so the same bits), whatever the thread count. */
CT_INTERNAL void
ct_ops_colsum_bf16(ct_graph *g, const uint16_t *x, int64_t rows, int64_t cols, float *db);

/* db[j] += the sum of column j of x [rows, cols], each column summed as ct_ops_sum_f64 sums it
 * (so the same bits), whatever the thread count; row-major blocks of columns on the fast path,
 * a column at a time with CT_KERNELS_REFERENCE. */
CT_INTERNAL void ct_ops_colsum(ct_graph *g, const float *x, int64_t rows, int64_t cols, float *db);

/* Checked arithmetic on non-negative sizes: false (and *r untouched) on overflow or a negative
 * operand. */
CT_INTERNAL bool ct_ops_mul_ok(int64_t a, int64_t b, int64_t *r);
CT_INTERNAL bool ct_ops_add_ok(int64_t a, int64_t b, int64_t *r);

/* A sum of n floats in double in a fixed order (blocks of 256 summed left to right), so that
 * reductions give the same bits for any thread count. */
CT_INTERNAL double ct_ops_sum_f64(const float *x, int64_t n, int64_t stride);

#endif /* CT_OPS_INTERNAL_H */
