/*
 * layers_linear.c - the layers with weight matrices: linear, conv2d and embedding.
 *
 * Each declares "<prefix>.weight" (and "<prefix>.bias") with PyTorch's layout and initialises
 * them as PyTorch does: linear and conv2d uniform in +-1/sqrt(fan_in), embedding N(0, 1).
 */
#include <stdio.h>

#include "nn/nn_internal.h"

enum { W = 0, B = 1 };

static void init_linear(ct_layer *l, ct_rng *rng) {
    ct_nn_init_linear(l->t[W], l->t[B], rng);
}

/* ---- linear: [..., in] -> [..., out] ---- */

static const char *const linear_keys[] = {"out", "bias", NULL};

static ct_status linear_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    int64_t out;
    bool bias;
    CT_TRY(ct_options_int(b->ctx, opts, "out", -1, 1, INT64_MAX, &out));
    if (out < 0) return CT_FAIL(b->ctx, CT_ERR_CONFIG, "%s: key 'out' is required", b->where);
    CT_TRY(ct_options_bool(b->ctx, opts, "bias", true, &bias));
    if (b->in_dtype != CT_F32 || b->in_ndim < 1) return ct_layer_bad_input(b, "f32 [..., in]");
    int64_t in = b->in_shape[b->in_ndim - 1];
    CT_TRY(ct_layer_declare(b, l, W, "weight", CT_F32, 2, (const int64_t[]){out, in},
                            CT_PARAM_TRAINABLE));
    if (bias) CT_TRY(ct_layer_declare(b, l, B, "bias", CT_F32, 1, &out, CT_PARAM_TRAINABLE));
    b->out_shape[b->out_ndim - 1] = out;
    return CT_OK;
}

static ct_tensor *linear_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_linear(g, x, l->t[W], l->t[B]);
}

const ct_layer_type ct_layer_linear = {"linear", linear_keys, linear_create, init_linear,
                                       linear_forward};

/* ---- conv2d: [C, H, W] -> [out, OH, OW] ---- */

static const char *const conv2d_keys[] = {"out",      "kernel", "stride", "padding",
                                          "dilation", "groups", "bias",   NULL};

enum { CV_STRIDE, CV_PAD, CV_DIL, CV_GROUPS };

static ct_status conv2d_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    ct_ctx *ctx = b->ctx;
    int64_t out, k, stride, pad, dil, groups;
    bool bias;
    CT_TRY(ct_options_int(ctx, opts, "out", -1, 1, INT64_MAX, &out));
    if (out < 0) return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'out' is required", b->where);
    CT_TRY(ct_options_int(ctx, opts, "kernel", 3, 1, 1 << 16, &k));
    CT_TRY(ct_options_int(ctx, opts, "stride", 1, 1, 1 << 16, &stride));
    CT_TRY(ct_options_int(ctx, opts, "padding", 0, 0, 1 << 16, &pad));
    CT_TRY(ct_options_int(ctx, opts, "dilation", 1, 1, 1 << 16, &dil));
    CT_TRY(ct_options_int(ctx, opts, "groups", 1, 1, 1 << 16, &groups));
    CT_TRY(ct_options_bool(ctx, opts, "bias", true, &bias));
    if (b->in_dtype != CT_F32 || b->in_ndim != 3) return ct_layer_bad_input(b, "f32 [C, H, W]");
    int64_t c = b->in_shape[0];
    if (c % groups != 0 || out % groups != 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "%s: groups %lld must divide the input channels %lld and out %lld", b->where,
                       (long long)groups, (long long)c, (long long)out);
    int64_t oh = (b->in_shape[1] + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    int64_t ow = (b->in_shape[2] + 2 * pad - dil * (k - 1) - 1) / stride + 1;
    if (b->in_shape[1] + 2 * pad < dil * (k - 1) + 1 ||
        b->in_shape[2] + 2 * pad < dil * (k - 1) + 1 || oh < 1 || ow < 1) {
        char want[96];
        snprintf(want, sizeof want, "H and W of at least %lld for kernel %lld",
                 (long long)(dil * (k - 1) + 1 - 2 * pad), (long long)k);
        return ct_layer_bad_input(b, want);
    }
    CT_TRY(ct_layer_declare(b, l, W, "weight", CT_F32, 4, (const int64_t[]){out, c / groups, k, k},
                            CT_PARAM_TRAINABLE));
    if (bias) CT_TRY(ct_layer_declare(b, l, B, "bias", CT_F32, 1, &out, CT_PARAM_TRAINABLE));
    l->i[CV_STRIDE] = stride;
    l->i[CV_PAD] = pad;
    l->i[CV_DIL] = dil;
    l->i[CV_GROUPS] = groups;
    b->out_shape[0] = out;
    b->out_shape[1] = oh;
    b->out_shape[2] = ow;
    return CT_OK;
}

static ct_conv2d_params conv2d_params(const ct_layer *l) {
    ct_conv2d_params p = ct_conv2d_default_params();
    p.stride[0] = p.stride[1] = l->i[CV_STRIDE];
    p.padding[0] = p.padding[1] = l->i[CV_PAD];
    p.dilation[0] = p.dilation[1] = l->i[CV_DIL];
    p.groups = l->i[CV_GROUPS];
    return p;
}

static ct_tensor *conv2d_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    ct_conv2d_params p = conv2d_params(l);
    return ct_op_conv2d(g, x, l->t[W], l->t[B], &p);
}

ct_tensor *ct_layer_conv2d_relu_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    ct_conv2d_params p = conv2d_params(l);
    return ct_op_conv2d_relu(g, x, l->t[W], l->t[B], &p);
}

ct_tensor *ct_layer_conv2d_relu_maxpool_forward(ct_layer *l,
                                                const ct_pool2d_params *pool,
                                                ct_graph *g,
                                                ct_tensor *x) {
    ct_conv2d_params p = conv2d_params(l);
    return ct_op_conv2d_relu_maxpool(g, x, l->t[W], l->t[B], &p, pool);
}

const ct_layer_type ct_layer_conv2d = {"conv2d", conv2d_keys, conv2d_create, init_linear,
                                       conv2d_forward};

/* ---- embedding: ids [...] -> [..., dim] ---- */

static const char *const embedding_keys[] = {"vocab", "dim", NULL};

static ct_status embedding_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    int64_t vocab, dim;
    CT_TRY(ct_options_int(b->ctx, opts, "vocab", -1, 1, INT64_MAX, &vocab));
    CT_TRY(ct_options_int(b->ctx, opts, "dim", -1, 1, INT64_MAX, &dim));
    if (vocab < 0 || dim < 0)
        return CT_FAIL(b->ctx, CT_ERR_CONFIG, "%s: keys 'vocab' and 'dim' are required", b->where);
    if ((b->in_dtype != CT_I32 && b->in_dtype != CT_I64) || b->in_ndim >= CT_MAX_DIMS - 1)
        return ct_layer_bad_input(b, "i32 or i64 token ids");
    CT_TRY(ct_layer_declare(b, l, W, "weight", CT_F32, 2, (const int64_t[]){vocab, dim},
                            CT_PARAM_TRAINABLE));
    b->out_dtype = CT_F32;
    b->out_shape[b->out_ndim++] = dim;
    return CT_OK;
}

static void embedding_init(ct_layer *l, ct_rng *rng) {
    ct_nn_init_normal(l->t[W], rng, 0.0f, 1.0f);
}

static ct_tensor *embedding_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_embedding(g, l->t[W], x);
}

const ct_layer_type ct_layer_embedding = {"embedding", embedding_keys, embedding_create,
                                          embedding_init, embedding_forward};
