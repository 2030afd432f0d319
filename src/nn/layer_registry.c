/*
 * layer_registry.c - the tables of built-in layer types and model types. Adding a layer type
 * is one file defining its ct_layer_type (declared in nn_internal.h) and one line here; the same
 * goes for a model type (a ct_model_type).
 */
#include <stdio.h>
#include <string.h>

#include "nn/nn_internal.h"

static const ct_layer_type *const layer_types[] = {
    /* one line per type; the comments keep clang-format from packing the table */
    &ct_layer_linear,          /* layers_linear.c */
    &ct_layer_conv2d,          /* layers_linear.c */
    &ct_layer_embedding,       /* layers_linear.c */
    &ct_layer_batchnorm,       /* layers_norm.c */
    &ct_layer_layernorm,       /* layers_norm.c */
    &ct_layer_relu,            /* layers_act.c */
    &ct_layer_gelu,            /* layers_act.c */
    &ct_layer_silu,            /* layers_act.c */
    &ct_layer_tanh,            /* layers_act.c */
    &ct_layer_sigmoid,         /* layers_act.c */
    &ct_layer_leaky_relu,      /* layers_act.c */
    &ct_layer_dropout,         /* layers_act.c */
    &ct_layer_maxpool2d,       /* layers_pool.c */
    &ct_layer_avgpool2d,       /* layers_pool.c */
    &ct_layer_global_avg_pool, /* layers_pool.c */
    &ct_layer_flatten,         /* layers_pool.c */
    &ct_layer_residual,        /* model.c */
    NULL,
};

static const ct_model_type *const model_types[] = {
    &ct_model_mlp, /* model_builders.c */
    &ct_model_cnn, /* model_builders.c */
    &ct_model_gpt, /* gpt.c */
    NULL,
};

const ct_layer_type *const *ct_layer_types(int64_t *count) {
    int64_t n = 0;
    while (layer_types[n])
        n++;
    *count = n;
    return layer_types;
}

const ct_model_type *const *ct_model_types(int64_t *count) {
    int64_t n = 0;
    while (model_types[n])
        n++;
    *count = n;
    return model_types;
}

const ct_layer_type *ct_layer_type_find(const char *name) {
    for (int64_t k = 0; name && layer_types[k]; k++)
        if (strcmp(layer_types[k]->name, name) == 0) return layer_types[k];
    return NULL;
}

const ct_model_type *ct_model_type_find(const char *name) {
    for (int64_t k = 0; name && model_types[k]; k++)
        if (strcmp(model_types[k]->name, name) == 0) return model_types[k];
    return NULL;
}

ct_status ct_layer_unknown(ct_ctx *ctx, const char *where, const char *type) {
    ct_unknown u;
    ct_unknown_init(&u, type);
    for (int64_t i = 0; layer_types[i]; i++)
        ct_unknown_add(&u, layer_types[i]->name);
    return CT_FAIL_UNKNOWN(ctx, &u, where, "layer type");
}

ct_status ct_model_unknown(ct_ctx *ctx, const char *where, const char *type) {
    ct_unknown u;
    ct_unknown_init(&u, type);
    for (int64_t i = 0; model_types[i]; i++)
        ct_unknown_add(&u, model_types[i]->name);
    return CT_FAIL_UNKNOWN(ctx, &u, where, "model type");
}
