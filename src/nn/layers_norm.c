/*
 * layers_norm.c - batchnorm (BatchNorm1d on [C], BatchNorm2d on [C, H, W]) and layernorm over
 * the last dim, with PyTorch's names (weight, bias, running_mean, running_var,
 * num_batches_tracked) and initial values (weight 1, bias 0, running_var 1).
 */
#include "nn/nn_internal.h"

enum { W, B, RMEAN, RVAR, NBT };
enum { F_MOMENTUM, F_EPS };

static const char *const batchnorm_keys[] = {"momentum", "eps", "affine", NULL};

static ct_status read_eps(ct_layer_build *b, const ct_options *opts, ct_layer *l, bool *affine) {
    double eps;
    CT_TRY(ct_options_double(b->ctx, opts, "eps", 1e-5, 0.0, 1.0, &eps));
    CT_TRY(ct_options_bool(b->ctx, opts, "affine", true, affine));
    l->f[F_EPS] = (float)eps;
    return CT_OK;
}

static ct_status batchnorm_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    double momentum;
    bool affine;
    CT_TRY(ct_options_double(b->ctx, opts, "momentum", 0.1, 0.0, 1.0, &momentum));
    CT_TRY(read_eps(b, opts, l, &affine));
    l->f[F_MOMENTUM] = (float)momentum;
    l->norm_slots = CT_LAYER_ALL_SLOTS;
    if (b->in_dtype != CT_F32 || (b->in_ndim != 1 && b->in_ndim != 3))
        return ct_layer_bad_input(b, "f32 [C] (BatchNorm1d) or [C, H, W] (BatchNorm2d)");
    int64_t c = b->in_shape[0];
    if (affine) {
        CT_TRY(ct_layer_declare(b, l, W, "weight", CT_F32, 1, &c, CT_PARAM_TRAINABLE));
        CT_TRY(ct_layer_declare(b, l, B, "bias", CT_F32, 1, &c, CT_PARAM_TRAINABLE));
    }
    CT_TRY(ct_layer_declare(b, l, RMEAN, "running_mean", CT_F32, 1, &c, CT_PARAM_BUFFER));
    CT_TRY(ct_layer_declare(b, l, RVAR, "running_var", CT_F32, 1, &c, CT_PARAM_BUFFER));
    CT_TRY(ct_layer_declare(b, l, NBT, "num_batches_tracked", CT_I64, 0, (const int64_t[]){1},
                            CT_PARAM_BUFFER));
    return CT_OK;
}

static void norm_init(ct_layer *l, ct_rng *rng) {
    (void)rng;
    if (l->t[W]) ct_tensor_fill(l->t[W], 1.0f);
    if (l->t[B]) ct_tensor_fill(l->t[B], 0.0f);
    if (l->t[RMEAN]) ct_tensor_fill(l->t[RMEAN], 0.0f);
    if (l->t[RVAR]) ct_tensor_fill(l->t[RVAR], 1.0f);
    if (l->t[NBT]) ct_tensor_fill(l->t[NBT], 0.0f);
}

static ct_tensor *batchnorm_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_batch_norm(g, x, l->t[W], l->t[B], l->t[RMEAN], l->t[RVAR], l->t[NBT],
                            l->f[F_MOMENTUM], l->f[F_EPS]);
}

const ct_layer_type ct_layer_batchnorm = {"batchnorm", batchnorm_keys, batchnorm_create, norm_init,
                                          batchnorm_forward};

static const char *const layernorm_keys[] = {"eps", "affine", NULL};

static ct_status layernorm_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    bool affine;
    CT_TRY(read_eps(b, opts, l, &affine));
    if (b->in_dtype != CT_F32 || b->in_ndim < 1) return ct_layer_bad_input(b, "f32 [..., D]");
    l->norm_slots = CT_LAYER_ALL_SLOTS;
    int64_t d = b->in_shape[b->in_ndim - 1];
    if (affine) {
        CT_TRY(ct_layer_declare(b, l, W, "weight", CT_F32, 1, &d, CT_PARAM_TRAINABLE));
        CT_TRY(ct_layer_declare(b, l, B, "bias", CT_F32, 1, &d, CT_PARAM_TRAINABLE));
    }
    return CT_OK;
}

static ct_tensor *layernorm_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_layer_norm(g, x, l->t[W], l->t[B], l->f[F_EPS]);
}

const ct_layer_type ct_layer_layernorm = {"layernorm", layernorm_keys, layernorm_create, norm_init,
                                          layernorm_forward};
