/*
 * layers_pool.c - shape-changing layers without parameters: maxpool2d and avgpool2d (floor
 * mode, as PyTorch's defaults), global_avg_pool ([C, H, W] -> [C]) and flatten (the whole
 * sample into one dim, as nn.Flatten()).
 */
#include <stdio.h>

#include "nn/nn_internal.h"

static const char *const pool_keys[] = {"kernel", "stride", "padding", NULL};
static const char *const no_keys[] = {NULL};

enum { P_K, P_S, P_PAD };

static ct_status pool_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    ct_ctx *ctx = b->ctx;
    int64_t k, s, pad;
    CT_TRY(ct_options_int(ctx, opts, "kernel", 2, 1, 1 << 16, &k));
    CT_TRY(ct_options_int(ctx, opts, "stride", k, 1, 1 << 16, &s));
    CT_TRY(ct_options_int(ctx, opts, "padding", 0, 0, k / 2, &pad));
    if (b->in_dtype != CT_F32 || b->in_ndim != 3) return ct_layer_bad_input(b, "f32 [C, H, W]");
    if (b->in_shape[1] + 2 * pad < k || b->in_shape[2] + 2 * pad < k) {
        char want[64];
        snprintf(want, sizeof want, "H and W of at least %lld for kernel %lld",
                 (long long)(k - 2 * pad), (long long)k);
        return ct_layer_bad_input(b, want);
    }
    l->i[P_K] = k;
    l->i[P_S] = s;
    l->i[P_PAD] = pad;
    b->out_shape[1] = (b->in_shape[1] + 2 * pad - k) / s + 1;
    b->out_shape[2] = (b->in_shape[2] + 2 * pad - k) / s + 1;
    return CT_OK;
}

ct_pool2d_params ct_layer_pool2d_params(const ct_layer *l) {
    ct_pool2d_params p = {
        {l->i[P_K], l->i[P_K]}, {l->i[P_S], l->i[P_S]}, {l->i[P_PAD], l->i[P_PAD]}};
    return p;
}

static ct_tensor *maxpool_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    ct_pool2d_params p = ct_layer_pool2d_params(l);
    return ct_op_max_pool2d(g, x, &p);
}

static ct_tensor *avgpool_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    ct_pool2d_params p = ct_layer_pool2d_params(l);
    return ct_op_avg_pool2d(g, x, &p);
}

const ct_layer_type ct_layer_maxpool2d = {"maxpool2d", pool_keys, pool_create, NULL,
                                          maxpool_forward};
const ct_layer_type ct_layer_avgpool2d = {"avgpool2d", pool_keys, pool_create, NULL,
                                          avgpool_forward};

static ct_status gap_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    (void)opts, (void)l;
    if (b->in_dtype != CT_F32 || b->in_ndim != 3) return ct_layer_bad_input(b, "f32 [C, H, W]");
    b->out_ndim = 1;
    return CT_OK;
}

static ct_tensor *gap_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    (void)l;
    return ct_op_global_avg_pool(g, x);
}

const ct_layer_type ct_layer_global_avg_pool = {"global_avg_pool", no_keys, gap_create, NULL,
                                                gap_forward};

static ct_status flatten_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    (void)opts, (void)l;
    int64_t n = 1;
    for (int32_t d = 0; d < b->in_ndim; d++)
        n *= b->in_shape[d];
    b->out_ndim = 1;
    b->out_shape[0] = n;
    return CT_OK;
}

static ct_tensor *flatten_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    (void)l;
    return ct_op_flatten(g, x, 1);
}

const ct_layer_type ct_layer_flatten = {"flatten", no_keys, flatten_create, NULL, flatten_forward};
