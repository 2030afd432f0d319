/*
 * layers_act.c - parameter-free elementwise layers: relu, gelu, silu, tanh, sigmoid, leaky_relu
 * and dropout. They keep the input's shape and declare nothing.
 */
#include <string.h>

#include "nn/nn_internal.h"

static const char *const no_keys[] = {NULL};

static ct_status f32_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    (void)opts, (void)l;
    if (b->in_dtype != CT_F32) return ct_layer_bad_input(b, "f32 values");
    return CT_OK;
}

static ct_tensor *relu_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    (void)l;
    return ct_op_relu(g, x);
}
static ct_tensor *silu_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    (void)l;
    return ct_op_silu(g, x);
}
static ct_tensor *tanh_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    (void)l;
    return ct_op_tanh(g, x);
}
static ct_tensor *sigmoid_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    (void)l;
    return ct_op_sigmoid(g, x);
}

const ct_layer_type ct_layer_relu = {"relu", no_keys, f32_create, NULL, relu_forward};
const ct_layer_type ct_layer_silu = {"silu", no_keys, f32_create, NULL, silu_forward};
const ct_layer_type ct_layer_tanh = {"tanh", no_keys, f32_create, NULL, tanh_forward};
const ct_layer_type ct_layer_sigmoid = {"sigmoid", no_keys, f32_create, NULL, sigmoid_forward};

/* ---- gelu: approx none | tanh ---- */

static const char *const gelu_keys[] = {"approx", NULL};

static ct_status gelu_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    const char *a;
    CT_TRY(ct_options_string(b->ctx, opts, "approx", "none", &a));
    if (strcmp(a, "none") == 0)
        l->i[0] = CT_GELU_ERF;
    else if (strcmp(a, "tanh") == 0)
        l->i[0] = CT_GELU_TANH;
    else
        return CT_FAIL(b->ctx, CT_ERR_CONFIG, "%s: key 'approx': expected none or tanh, got '%s'",
                       b->where, a);
    return f32_create(b, opts, l);
}

static ct_tensor *gelu_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_gelu(g, x, (ct_gelu_approx)l->i[0]);
}

const ct_layer_type ct_layer_gelu = {"gelu", gelu_keys, gelu_create, NULL, gelu_forward};

/* ---- leaky_relu: negative_slope ---- */

static const char *const leaky_keys[] = {"negative_slope", NULL};

static ct_status leaky_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    double s;
    CT_TRY(ct_options_double(b->ctx, opts, "negative_slope", 0.01, -1e6, 1e6, &s));
    l->f[0] = (float)s;
    return f32_create(b, opts, l);
}

static ct_tensor *leaky_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_leaky_relu(g, x, l->f[0]);
}

const ct_layer_type ct_layer_leaky_relu = {"leaky_relu", leaky_keys, leaky_create, NULL,
                                           leaky_forward};

/* ---- dropout: p ---- */

static const char *const dropout_keys[] = {"p", NULL};

static ct_status dropout_create(ct_layer_build *b, const ct_options *opts, ct_layer *l) {
    double p;
    CT_TRY(ct_options_double(b->ctx, opts, "p", 0.5, 0.0, 0.999999, &p));
    l->f[0] = (float)p;
    return f32_create(b, opts, l);
}

static ct_tensor *dropout_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    return ct_op_dropout(g, x, l->f[0]);
}

const ct_layer_type ct_layer_dropout = {"dropout", dropout_keys, dropout_create, NULL,
                                        dropout_forward};
