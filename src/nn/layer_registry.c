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

/* The i-th name of each table, NULL past the end (for list_names). */
static const char *layer_name(int64_t i) {
    return layer_types[i] ? layer_types[i]->name : NULL;
}

static const char *model_name(int64_t i) {
    return model_types[i] ? model_types[i]->name : NULL;
}

/* Writes "a, b, c" of the names f(0), f(1), ... into buf, and the one nearest to s's word
 * into hint (" (did you mean 'b'?)" or ""). */
static void list_names(const char *(*f)(int64_t),
                       const char *word,
                       char *buf,
                       size_t size,
                       char *hint,
                       size_t hint_size) {
    size_t off = 0;
    buf[0] = '\0';
    ct_suggest sg;
    ct_suggest_init(&sg, word);
    for (int64_t i = 0; f(i); i++) {
        ct_suggest_add(&sg, f(i));
        if (off < size) off += (size_t)snprintf(buf + off, size - off, "%s%s", i ? ", " : "", f(i));
    }
    (void)ct_suggest_hint(&sg, hint, hint_size);
}

ct_status ct_layer_unknown(ct_ctx *ctx, const char *where, const char *type) {
    char list[512], hint[96];
    list_names(layer_name, type, list, sizeof list, hint, sizeof hint);
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: unknown layer type '%s'%s (known: %s)", where,
                   type ? type : "(none)", hint, list);
}

ct_status ct_model_unknown(ct_ctx *ctx, const char *where, const char *type) {
    char list[256], hint[96];
    list_names(model_name, type, list, sizeof list, hint, sizeof hint);
    return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: unknown model type '%s'%s (known: %s)", where,
                   type ? type : "(none)", hint, list);
}
