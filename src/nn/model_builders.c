/*
 * model_builders.c - the mlp and cnn builders: they turn options into a ct_layer_spec sequence
 * and hand it to ct_model_create, so their parameter names are nn.Sequential's ("0.weight").
 * The option strings they write for the layers live on this frame only during creation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

enum { MAX_STAGES = 32, MAX_SPECS = 4 * MAX_STAGES + 4 };

/* Parses "512,256" into sizes[0..*n); an empty string gives none. */
static ct_status parse_sizes(
    ct_ctx *ctx, const ct_options *opts, const char *key, const char *s, int64_t *sizes, int *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || (*end && *end != ',') || *n == MAX_STAGES)
            return CT_FAIL(ctx, CT_ERR_CONFIG,
                           "%s: key '%s': expected up to %d comma-separated positive integers, "
                           "got '%s'",
                           ct_options_where(opts, "model"), key, MAX_STAGES, s);
        sizes[(*n)++] = (int64_t)v;
        p = *end ? end + 1 : end;
    }
    return CT_OK;
}

/* The specs under construction, with room for their option strings. */
typedef struct spec_list {
    ct_layer_spec specs[MAX_SPECS];
    ct_option items[MAX_SPECS][2];
    char values[MAX_SPECS][2][32];
    int64_t n;
} spec_list;

/* Appends a layer with up to two integer/string options (key NULL: none). */
static void add(spec_list *l,
                const char *type,
                const char *k0,
                const char *v0,
                const char *k1,
                const char *v1) {
    int64_t i = l->n++;
    ct_layer_spec *s = &l->specs[i];
    memset(s, 0, sizeof *s);
    s->type = type;
    int64_t c = 0;
    const char *keys[2] = {k0, k1}, *vals[2] = {v0, v1};
    for (int j = 0; j < 2; j++) {
        if (!keys[j]) continue;
        snprintf(l->values[i][c], sizeof l->values[i][c], "%s", vals[j]);
        l->items[i][c].key = keys[j];
        l->items[i][c].value = l->values[i][c];
        c++;
    }
    s->opts.items = l->items[i];
    s->opts.count = c;
}

static const char *num(char *buf, size_t size, int64_t v) {
    snprintf(buf, size, "%lld", (long long)v);
    return buf;
}

/* ---- mlp ---- */

static const char *const mlp_keys[] = {"hidden", "activation", "dropout", "out", NULL};
static const char *const activations[] = {"relu",    "gelu",       "silu", "tanh",
                                          "sigmoid", "leaky_relu", NULL};

typedef struct mlp_cfg {
    const char *act;
    double dropout;
    int64_t n_out, sizes[MAX_STAGES];
    int n_hidden;
} mlp_cfg;

/* Reads and checks the options; out is required when need_out (else -1 when absent). */
static ct_status read_mlp(ct_ctx *ctx, const ct_options *opts, bool need_out, mlp_cfg *c) {
    const char *hidden;
    CT_TRY(ct_options_check(ctx, opts, mlp_keys));
    CT_TRY(ct_options_string(ctx, opts, "hidden", "512,256", &hidden));
    CT_TRY(ct_options_string(ctx, opts, "activation", "relu", &c->act));
    CT_TRY(ct_options_double(ctx, opts, "dropout", 0.0, 0.0, 0.999999, &c->dropout));
    CT_TRY(ct_options_int(ctx, opts, "out", -1, 1, INT64_MAX, &c->n_out));
    if (need_out && c->n_out < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'out' is required",
                       ct_options_where(opts, "model"));
    CT_TRY(parse_sizes(ctx, opts, "hidden", hidden, c->sizes, &c->n_hidden));
    ct_unknown u;
    ct_unknown_init(&u, c->act);
    for (int i = 0; activations[i]; i++) {
        if (strcmp(activations[i], c->act) == 0) return CT_OK;
        ct_unknown_add(&u, activations[i]);
    }
    char where[CT_ERRMSG_SIZE];
    (void)snprintf(where, sizeof where, "%s: key 'activation'", ct_options_where(opts, "model"));
    return CT_FAIL_UNKNOWN(ctx, &u, where, NULL);
}

static ct_status check_mlp(ct_ctx *ctx, const ct_options *opts) {
    mlp_cfg c;
    return read_mlp(ctx, opts, false, &c);
}

static ct_status build_mlp(ct_ctx *ctx,
                           const ct_options *opts,
                           ct_params *params,
                           ct_dtype in_dtype,
                           int32_t in_ndim,
                           const int64_t *in_shape,
                           ct_model **out) {
    mlp_cfg c;
    CT_TRY(read_mlp(ctx, opts, true, &c));
    spec_list *l = ct_alloc(ctx, sizeof *l);
    if (!l) return CT_FAIL(ctx, CT_ERR_OOM, "allocating the mlp's layer list");
    l->n = 0;
    char buf[32], pbuf[32];
    snprintf(pbuf, sizeof pbuf, "%.9g", c.dropout);
    for (int i = 0; i < c.n_hidden; i++) {
        add(l, "linear", "out", num(buf, sizeof buf, c.sizes[i]), NULL, NULL);
        add(l, c.act, NULL, NULL, NULL, NULL);
        if (c.dropout > 0.0) add(l, "dropout", "p", pbuf, NULL, NULL);
    }
    add(l, "linear", "out", num(buf, sizeof buf, c.n_out), NULL, NULL);
    ct_status s = ct_model_create(ctx, params, in_dtype, in_ndim, in_shape, l->specs, l->n, out);
    ct_free(ctx, l, sizeof *l);
    return s;
}

const ct_model_type ct_model_mlp = {"mlp", mlp_keys, check_mlp, build_mlp};

/* ---- cnn ---- */

static const char *const cnn_keys[] = {"channels", "out", NULL};

typedef struct cnn_cfg {
    int64_t n_out, sizes[MAX_STAGES];
    int n_stages;
} cnn_cfg;

static ct_status read_cnn(ct_ctx *ctx, const ct_options *opts, bool need_out, cnn_cfg *c) {
    const char *channels;
    CT_TRY(ct_options_check(ctx, opts, cnn_keys));
    CT_TRY(ct_options_string(ctx, opts, "channels", "32,64", &channels));
    CT_TRY(ct_options_int(ctx, opts, "out", -1, 1, INT64_MAX, &c->n_out));
    if (need_out && c->n_out < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'out' is required",
                       ct_options_where(opts, "model"));
    return parse_sizes(ctx, opts, "channels", channels, c->sizes, &c->n_stages);
}

static ct_status check_cnn(ct_ctx *ctx, const ct_options *opts) {
    cnn_cfg c;
    return read_cnn(ctx, opts, false, &c);
}

static ct_status build_cnn(ct_ctx *ctx,
                           const ct_options *opts,
                           ct_params *params,
                           ct_dtype in_dtype,
                           int32_t in_ndim,
                           const int64_t *in_shape,
                           ct_model **out) {
    cnn_cfg c;
    CT_TRY(read_cnn(ctx, opts, true, &c));
    spec_list *l = ct_alloc(ctx, sizeof *l);
    if (!l) return CT_FAIL(ctx, CT_ERR_OOM, "allocating the cnn's layer list");
    l->n = 0;
    char buf[32];
    for (int i = 0; i < c.n_stages; i++) {
        add(l, "conv2d", "out", num(buf, sizeof buf, c.sizes[i]), "padding", "1");
        add(l, "batchnorm", NULL, NULL, NULL, NULL);
        add(l, "relu", NULL, NULL, NULL, NULL);
        add(l, "maxpool2d", "kernel", "2", NULL, NULL);
    }
    add(l, "global_avg_pool", NULL, NULL, NULL, NULL);
    add(l, "linear", "out", num(buf, sizeof buf, c.n_out), NULL, NULL);
    ct_status s = ct_model_create(ctx, params, in_dtype, in_ndim, in_shape, l->specs, l->n, out);
    ct_free(ctx, l, sizeof *l);
    return s;
}

const ct_model_type ct_model_cnn = {"cnn", cnn_keys, check_cnn, build_cnn};
