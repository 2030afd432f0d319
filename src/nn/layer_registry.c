/*
 * layer_registry.c - the tables of built-in layer types and model builders. Adding a layer type
 * is one file defining its ct_layer_type (declared in nn_internal.h) and one line here; the same
 * goes for a model builder.
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

static const ct_model_builder *const model_types[] = {
    &ct_model_mlp, /* model_builders.c */
    &ct_model_cnn, /* model_builders.c */
    &ct_model_gpt, /* gpt.c */
    NULL,
};

const char *ct_layer_type_name(int64_t i) {
    for (int64_t k = 0; layer_types[k]; k++)
        if (k == i) return layer_types[k]->name;
    return NULL;
}

const char *ct_model_type_name(int64_t i) {
    for (int64_t k = 0; model_types[k]; k++)
        if (k == i) return model_types[k]->name;
    return NULL;
}

const ct_layer_type *ct_layer_type_find(const char *name) {
    for (int64_t k = 0; name && layer_types[k]; k++)
        if (strcmp(layer_types[k]->name, name) == 0) return layer_types[k];
    return NULL;
}

const ct_model_builder *ct_model_builder_find(const char *name) {
    for (int64_t k = 0; name && model_types[k]; k++)
        if (strcmp(model_types[k]->name, name) == 0) return model_types[k];
    return NULL;
}

const char *const *ct_layer_type_keys(const char *type) {
    const ct_layer_type *t = ct_layer_type_find(type);
    return t ? t->keys : NULL;
}

const char *const *ct_model_type_keys(const char *type) {
    const ct_model_builder *b = ct_model_builder_find(type);
    return b ? b->keys : NULL;
}

ct_status ct_layer_unknown(ct_ctx *ctx, const char *where, const char *type) {
    ct_unknown u;
    ct_unknown_init(&u, type);
    for (int64_t i = 0; ct_layer_type_name(i); i++)
        ct_unknown_add(&u, ct_layer_type_name(i));
    return CT_FAIL_UNKNOWN(ctx, &u, where, "layer type");
}

ct_status ct_model_unknown(ct_ctx *ctx, const char *where, const char *type) {
    ct_unknown u;
    ct_unknown_init(&u, type);
    for (int64_t i = 0; ct_model_type_name(i); i++)
        ct_unknown_add(&u, ct_model_type_name(i));
    return CT_FAIL_UNKNOWN(ctx, &u, where, "model type");
}
