/*
 * ops.h - differentiable tensor operations.
 *
 * Every op takes the step graph first, computes its f32 result into a new step tensor (eager)
 * and records a tape node when gradients are needed (see autograd.h). Inputs are f32 unless
 * stated otherwise (indices are i32 or i64). Results die at ct_graph_reset. On any error (bad
 * shape, NULL input, OOM, earlier failure) an op returns NULL and the graph keeps the first
 * failure; ct_graph_status and ct_last_error tell what it was.
 *
 * Shapes are given as [dims]; "..." means any leading dimensions. Broadcasting follows NumPy:
 * shapes are aligned at the trailing dimension and a dimension of 1 stretches.
 * Layouts and semantics follow PyTorch's functions of the same name, so weights and results
 * pass between the two unchanged.
 */
#ifndef CTRAIN_OPS_H
#define CTRAIN_OPS_H

#include "ctrain/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise ---- */

/* a + b, a - b, a * b, a / b with broadcasting. */
CT_API ct_tensor *ct_op_add(ct_graph *g, ct_tensor *a, ct_tensor *b);
CT_API ct_tensor *ct_op_sub(ct_graph *g, ct_tensor *a, ct_tensor *b);
CT_API ct_tensor *ct_op_mul(ct_graph *g, ct_tensor *a, ct_tensor *b);
CT_API ct_tensor *ct_op_div(ct_graph *g, ct_tensor *a, ct_tensor *b);
/* x * s and x + s for a constant s. */
CT_API ct_tensor *ct_op_scale(ct_graph *g, ct_tensor *x, float s);
CT_API ct_tensor *ct_op_add_scalar(ct_graph *g, ct_tensor *x, float s);

/* ---- activations ---- */

typedef enum ct_gelu_approx {
    CT_GELU_ERF = 0, /* x * Phi(x), exact (PyTorch approximate='none') */
    CT_GELU_TANH,    /* the tanh approximation (PyTorch approximate='tanh') */
    CT_GELU_APPROX_COUNT
} ct_gelu_approx;

CT_API ct_tensor *ct_op_relu(ct_graph *g, ct_tensor *x);
CT_API ct_tensor *ct_op_leaky_relu(ct_graph *g, ct_tensor *x, float negative_slope);
CT_API ct_tensor *ct_op_gelu(ct_graph *g, ct_tensor *x, ct_gelu_approx approx);
CT_API ct_tensor *ct_op_silu(ct_graph *g, ct_tensor *x);
CT_API ct_tensor *ct_op_tanh(ct_graph *g, ct_tensor *x);
CT_API ct_tensor *ct_op_sigmoid(ct_graph *g, ct_tensor *x);
/* Softmax and log-softmax along `axis` (negative counts from the end). */
CT_API ct_tensor *ct_op_softmax(ct_graph *g, ct_tensor *x, int32_t axis);
CT_API ct_tensor *ct_op_log_softmax(ct_graph *g, ct_tensor *x, int32_t axis);

/* ---- reductions ---- */

/* Sum or mean over `axis` (negative counts from the end); keepdim keeps it as size 1. */
CT_API ct_tensor *ct_op_sum(ct_graph *g, ct_tensor *x, int32_t axis, bool keepdim);
CT_API ct_tensor *ct_op_mean(ct_graph *g, ct_tensor *x, int32_t axis, bool keepdim);
/* Sum or mean of every element: a scalar (ndim 0). */
CT_API ct_tensor *ct_op_sum_all(ct_graph *g, ct_tensor *x);
CT_API ct_tensor *ct_op_mean_all(ct_graph *g, ct_tensor *x);

/* ---- shape ---- */

/* Same elements, new shape (one dim may be -1 and is inferred). */
CT_API ct_tensor *ct_op_reshape(ct_graph *g, ct_tensor *x, int32_t ndim, const int64_t *shape);
/* Merges dims [start_dim, end] into one, as torch.flatten(x, start_dim). */
CT_API ct_tensor *ct_op_flatten(ct_graph *g, ct_tensor *x, int32_t start_dim);
/* Swaps two dims. */
CT_API ct_tensor *ct_op_transpose(ct_graph *g, ct_tensor *x, int32_t dim0, int32_t dim1);
/* out.shape[i] = x.shape[perm[i]], as torch.permute. */
CT_API ct_tensor *ct_op_permute(ct_graph *g, ct_tensor *x, const int32_t *perm);
/* Concatenation of n tensors (same shape but along axis) along axis. */
CT_API ct_tensor *ct_op_concat(ct_graph *g, int32_t n, ct_tensor *const *xs, int32_t axis);
/* x.narrow(axis, start, len): a copy of that range. */
CT_API ct_tensor *ct_op_narrow(ct_graph *g, ct_tensor *x, int32_t axis, int64_t start, int64_t len);
/* Splits x along axis into n pieces of the given sizes (which sum to the dim) into outs[n].
 * Returns the graph status. */
CT_API ct_status ct_op_split(
    ct_graph *g, ct_tensor *x, int32_t axis, int32_t n, const int64_t *sizes, ct_tensor **outs);

/* ---- indexing ---- */

/* Rows of x[R, ...] picked by idx (i32/i64, any shape): out [idx.shape..., ...]. An index out of
 * [0, R) fails with CT_ERR_INVALID_ARG naming it. Backward scatters (adds) into x's rows. */
CT_API ct_tensor *ct_op_index_select(ct_graph *g, ct_tensor *x, ct_tensor *idx);
/* Embedding lookup: weight [V, D], idx [...] -> [..., D]; the same as index_select. */
CT_API ct_tensor *ct_op_embedding(ct_graph *g, ct_tensor *weight, ct_tensor *idx);
/* torch.gather(x, -1, idx): x [..., C], idx [..., K] (i32/i64) -> [..., K]. */
CT_API ct_tensor *ct_op_gather(ct_graph *g, ct_tensor *x, ct_tensor *idx);

/* ---- linear algebra ---- */

/* a [..., M, K] @ b [K, N] -> [..., M, N]; or batched: b [..., K, N] with a's leading dims. */
CT_API ct_tensor *ct_op_matmul(ct_graph *g, ct_tensor *a, ct_tensor *b);
/* x [..., in] @ weight[out, in]^T + bias[out] -> [..., out]; bias may be NULL. */
CT_API ct_tensor *ct_op_linear(ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias);
/* linear(gelu(x)) as one op that keeps x but not gelu(x) (computed again in backward): the
 * values and gradients of ct_op_linear(ct_op_gelu(x, approx), ...), bit for bit, with one
 * activation fewer held for backward (a transformer MLP's [tokens, 4C]). */
CT_API ct_tensor *ct_op_gelu_linear(
    ct_graph *g, ct_tensor *x, ct_gelu_approx approx, ct_tensor *weight, ct_tensor *bias);
/* The same op written over x's data: the forward pass stores gelu'(x) where x was and keeps
 * gelu(x) (as the product multiplied it: bf16 under native bf16 autocast), so the backward pass
 * computes no erf or exp, for the memory of gelu then linear (x's buffer and one activation).
 * x must be as for ct_op_dropout_over: nothing reads it after this call, forward or backward,
 * its producer's backward does not read its output (a linear layer's), and it is the newest
 * recorded node's output (else CT_ERR_INVALID_ARG). Where no backward pass will read x's
 * gradient (gradients off, or x needs none) x is left as it is and the op is ct_op_gelu_linear.
 * Values and gradients are ct_op_gelu_linear's, bit for bit. */
CT_API ct_tensor *ct_op_gelu_linear_over(
    ct_graph *g, ct_tensor *x, ct_gelu_approx approx, ct_tensor *weight, ct_tensor *bias);

/* ---- convolution and pooling (NCHW) ---- */

typedef struct ct_conv2d_params {
    int64_t stride[2];   /* (h, w), default 1 */
    int64_t padding[2];  /* zero padding, default 0 */
    int64_t dilation[2]; /* default 1 */
    int64_t groups;      /* default 1 */
} ct_conv2d_params;

CT_API ct_conv2d_params ct_conv2d_default_params(void);
/* x [N, C, H, W], weight [O, C/groups, KH, KW], bias [O] or NULL -> [N, O, OH, OW]. */
CT_API ct_tensor *ct_op_conv2d(
    ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, const ct_conv2d_params *p);
/* relu(conv2d(x, weight, bias)) as one op: the values and gradients of
 * ct_op_relu(g, ct_op_conv2d(...)) bit for bit (NaN included), without the intermediate
 * tensor; the ReLU runs on each batch chunk while the convolution's output is in cache, and
 * the backward pass masks the gradient by the output (y > 0, or NaN). */
CT_API ct_tensor *ct_op_conv2d_relu(
    ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, const ct_conv2d_params *p);

typedef struct ct_pool2d_params {
    int64_t kernel[2];  /* (h, w) */
    int64_t stride[2];  /* 0 = same as kernel (PyTorch's default) */
    int64_t padding[2]; /* at most kernel/2; max pooling pads with -inf, avg with 0 (counted) */
} ct_pool2d_params;

/* x [N, C, H, W] -> [N, C, OH, OW] (floor mode). */
CT_API ct_tensor *ct_op_max_pool2d(ct_graph *g, ct_tensor *x, const ct_pool2d_params *p);
CT_API ct_tensor *ct_op_avg_pool2d(ct_graph *g, ct_tensor *x, const ct_pool2d_params *p);
/* max_pool2d(conv2d_relu(x, weight, bias, conv), pool) as one op: its values and gradients
 * bit for bit (NaN and -0 included). With a 2x2 window, stride 2 and no padding, on oneDNN's
 * convolution, the convolution's output stays in oneDNN's blocked layout inside the op: the
 * ReLU and the pool read it there and only the pooled output is written (NCHW), and the
 * backward pass routes the gradient to the pool's winners in that layout. Any other pooling or
 * kernel choice composes the two ops. */
CT_API ct_tensor *ct_op_conv2d_relu_maxpool(ct_graph *g,
                                            ct_tensor *x,
                                            ct_tensor *weight,
                                            ct_tensor *bias,
                                            const ct_conv2d_params *conv,
                                            const ct_pool2d_params *pool);
/* x [N, C, H, W] -> [N, C]: the mean over H and W. */
CT_API ct_tensor *ct_op_global_avg_pool(ct_graph *g, ct_tensor *x);

/* ---- normalisation, dropout, attention ---- */

/*
 * Batch normalisation over x [N, C] or [N, C, H, W] per channel C. weight, bias [C] (may be
 * NULL: affine off). running_mean, running_var [C] f32 and num_batches_tracked (i64 scalar) are
 * buffers (may be NULL: no running statistics, batch statistics always). In training mode the
 * batch statistics normalise and the running ones are updated in place
 * (r = (1-momentum) r + momentum s, the variance unbiased) and num_batches_tracked += 1; in
 * evaluation mode the running statistics normalise.
 */
CT_API ct_tensor *ct_op_batch_norm(ct_graph *g,
                                   ct_tensor *x,
                                   ct_tensor *weight,
                                   ct_tensor *bias,
                                   ct_tensor *running_mean,
                                   ct_tensor *running_var,
                                   ct_tensor *num_batches_tracked,
                                   float momentum,
                                   float eps);
/* Layer normalisation over the last dim D: x [..., D], weight, bias [D] (may be NULL). */
CT_API ct_tensor *
ct_op_layer_norm(ct_graph *g, ct_tensor *x, ct_tensor *weight, ct_tensor *bias, float eps);
/* Inverted dropout with probability p in [0, 1), masks drawn from the graph's RNG stream; the
 * identity in evaluation mode or when p == 0. */
CT_API ct_tensor *ct_op_dropout(ct_graph *g, ct_tensor *x, float p);
/* The same dropout written over x's data (the result is a new tensor sharing it), to save the
 * activation memory of a fresh output: for an x that nothing reads after this call, forward or
 * backward, whose own producer's backward does not read its output (a linear layer's, a
 * sum's, an embedding's). x must be the newest recorded node's output (else
 * CT_ERR_INVALID_ARG); without a recorded node (no gradients) the output is a fresh tensor.
 * Gradients are as ct_op_dropout's. */
CT_API ct_tensor *ct_op_dropout_over(ct_graph *g, ct_tensor *x, float p);
/*
 * Causal multi-head self-attention with a fused softmax. qkv [B, T, 3C] holds q, k and v one
 * after another along the last dim (as nanoGPT's c_attn output), each split into n_head heads
 * of C/n_head contiguous channels. Returns [B, T, C]: softmax(q k^T / sqrt(hd) + causal mask) v
 * with the heads concatenated back.
 */
CT_API ct_tensor *ct_op_causal_attention(ct_graph *g, ct_tensor *qkv, int64_t n_head);

#ifdef __cplusplus
}
#endif

#endif /* CTRAIN_OPS_H */
