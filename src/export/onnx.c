/*
 * onnx.c - an experiment's model as an ONNX file: the model's node tree (src/nn) walked once,
 * each layer written as the ONNX operators that compute what its forward computes in evaluation
 * mode, the parameters and buffers as initializers under their state_dict names, and the whole
 * serialised with libprotobuf-c from the C code protoc-c generates for onnx.proto at build time.
 *
 * Every message of the graph lives in one arena, freed when the file is written; initializers
 * point at the parameter store's data instead of copying it (the store outlives the call).
 * Builds without libprotobuf-c keep the entry points, which then say what is missing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/export.h"
#include "experiment/experiment_internal.h"
#include "nn/nn_internal.h"

ct_onnx_export_params ct_onnx_export_default_params(void) {
    ct_onnx_export_params p = {.opset = CT_ONNX_OPSET_DEFAULT, .with_preprocessing = false};
    return p;
}

#ifndef CT_HAVE_ONNX

bool ct_onnx_export_available(void) {
    return false;
}

ct_status
ct_experiment_export_onnx(ct_experiment *e, const char *path, const ct_onnx_export_params *p) {
    (void)p;
    return CT_FAIL(e->ctx, CT_ERR_CONFIG,
                   "export '%s': this ctrain was built without ONNX export (hint: install "
                   "libprotobuf-c-dev, protobuf-c-compiler and libonnx-dev, then configure and "
                   "build again)",
                   path);
}

#else

#include "onnx.pb-c.h"

bool ct_onnx_export_available(void) {
    return true;
}

enum { ELEM_FLOAT = 1, ELEM_UINT8 = 2, ELEM_INT64 = 7 }; /* TensorProto.DataType */

/* The graph being built. A failure (only OOM) is kept in s; every helper then returns NULL
 * and passes NULL inputs on, so the callers check once at the end. */
typedef struct gb {
    ct_ctx *ctx;
    ct_arena arena;
    ct_status s;
    int64_t opset;
    Onnx__NodeProto **node;
    size_t n_node, cap_node;
    Onnx__TensorProto **init;
    size_t n_init, cap_init;
    int64_t serial; /* for fresh value names */
} gb;

static void *mem(gb *g, size_t n) {
    void *p = g->s == CT_OK ? ct_arena_alloc(&g->arena, n) : NULL;
    if (!p) {
        if (g->s == CT_OK) g->s = CT_FAIL(g->ctx, CT_ERR_OOM, "export: out of memory");
        return NULL;
    }
    memset(p, 0, n);
    return p;
}

static char *str(gb *g, const char *s) {
    char *d = mem(g, strlen(s) + 1);
    if (d) memcpy(d, s, strlen(s) + 1);
    return d;
}

/* A value name of its own: "<hint>_<n>". */
static char *fresh(gb *g, const char *hint) {
    char buf[160];
    (void)snprintf(buf, sizeof buf, "%s_%lld", hint, (long long)g->serial++);
    return str(g, buf);
}

/* Appends p to the array *arr of *n (capacity *cap) pointers: a doubled copy when full (the old
 * one stays in the arena). */
#define APPEND(g, arr, n, cap, p)                                                                  \
    do {                                                                                           \
        if (*(n) == *(cap)) {                                                                      \
            size_t c2 = *(cap) ? 2 * *(cap) : 64;                                                  \
            void *a2 = mem((g), c2 * sizeof **(arr));                                              \
            if (!a2) break;                                                                        \
            if (*(n)) memcpy(a2, *(arr), *(n) * sizeof **(arr));                                   \
            *(arr) = a2;                                                                           \
            *(cap) = c2;                                                                           \
        }                                                                                          \
        (*(arr))[(*(n))++] = (p);                                                                  \
    } while (0)

/* ---- nodes ---- */

/* A node `op` over in[0..n_in) with n_out outputs (fresh names after the op), or NULL after a
 * failure or for a NULL input. */
static Onnx__NodeProto *node(gb *g, const char *op, int n_in, const char *const *in, int n_out) {
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return NULL;
    Onnx__NodeProto *nd = mem(g, sizeof *nd);
    char **ins = mem(g, (size_t)n_in * sizeof *ins);
    char **outs = mem(g, (size_t)n_out * sizeof *outs);
    if (!nd || !ins || !outs) return NULL;
    onnx__node_proto__init(nd);
    for (int i = 0; i < n_in; i++)
        ins[i] = str(g, in[i]);
    for (int i = 0; i < n_out; i++)
        outs[i] = fresh(g, op);
    nd->n_input = (size_t)n_in;
    nd->input = ins;
    nd->n_output = (size_t)n_out;
    nd->output = outs;
    nd->op_type = str(g, op);
    nd->name = outs[0];
    if (g->s != CT_OK) return NULL;
    APPEND(g, &g->node, &g->n_node, &g->cap_node, nd);
    return g->s == CT_OK ? nd : NULL;
}

static const char *out0(const Onnx__NodeProto *nd) {
    return nd ? nd->output[0] : NULL;
}

static const char *op1(gb *g, const char *op, const char *x) {
    return out0(node(g, op, 1, (const char *[]){x}, 1));
}

static const char *op2(gb *g, const char *op, const char *a, const char *b) {
    return out0(node(g, op, 2, (const char *[]){a, b}, 1));
}

static Onnx__AttributeProto *attr(gb *g, Onnx__NodeProto *nd, const char *name, int type) {
    if (!nd) return NULL;
    Onnx__AttributeProto *a = mem(g, sizeof *a);
    Onnx__AttributeProto **all = mem(g, (nd->n_attribute + 1) * sizeof *all);
    if (!a || !all) return NULL;
    onnx__attribute_proto__init(a);
    a->name = str(g, name);
    a->has_type = true;
    a->type = (Onnx__AttributeProto__AttributeType)type;
    if (nd->n_attribute) memcpy(all, nd->attribute, nd->n_attribute * sizeof *all);
    all[nd->n_attribute++] = a;
    nd->attribute = all;
    return g->s == CT_OK ? a : NULL;
}

static Onnx__NodeProto *attr_i(gb *g, Onnx__NodeProto *nd, const char *name, int64_t v) {
    Onnx__AttributeProto *a = attr(g, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a) return NULL;
    a->has_i = true;
    a->i = v;
    return nd;
}

static Onnx__NodeProto *attr_f(gb *g, Onnx__NodeProto *nd, const char *name, float v) {
    Onnx__AttributeProto *a = attr(g, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a) return NULL;
    a->has_f = true;
    a->f = v;
    return nd;
}

static Onnx__NodeProto *
attr_ints(gb *g, Onnx__NodeProto *nd, const char *name, size_t n, const int64_t *v) {
    Onnx__AttributeProto *a = attr(g, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *copy = mem(g, n * sizeof *copy);
    if (!a || !copy) return NULL;
    memcpy(copy, v, n * sizeof *copy);
    a->n_ints = n;
    a->ints = copy;
    return nd;
}

/* ---- initializers ---- */

/* An initializer of `name` (NULL: a fresh one) holding n bytes at data, borrowed (the
 * parameter store's) or copied into the arena. Returns its name. */
static const char *initializer(gb *g,
                               const char *name,
                               int elem,
                               int32_t ndim,
                               const int64_t *dims,
                               const void *data,
                               size_t n,
                               bool copy) {
    Onnx__TensorProto *t = mem(g, sizeof *t);
    int64_t *d = mem(g, (size_t)(ndim > 0 ? ndim : 1) * sizeof *d);
    if (!t || !d) return NULL;
    onnx__tensor_proto__init(t);
    t->name = name ? str(g, name) : fresh(g, "const");
    if (ndim > 0) memcpy(d, dims, (size_t)ndim * sizeof *d);
    t->n_dims = (size_t)ndim;
    t->dims = d;
    t->has_data_type = true;
    t->data_type = elem;
    t->has_raw_data = true;
    t->raw_data.len = n;
    if (copy) {
        uint8_t *buf = mem(g, n ? n : 1);
        if (!buf) return NULL;
        if (n) memcpy(buf, data, n);
        t->raw_data.data = buf;
    } else {
        memcpy(&t->raw_data.data, &data, sizeof data); /* borrowed; protobuf-c only reads it */
    }
    if (g->s != CT_OK) return NULL;
    APPEND(g, &g->init, &g->n_init, &g->cap_init, t);
    return g->s == CT_OK ? t->name : NULL;
}

/* A parameter or buffer of the store (f32), under its state_dict name, once. */
static const char *param(gb *g, const ct_tensor *t) {
    for (size_t i = 0; i < g->n_init; i++)
        if (strcmp(g->init[i]->name, t->name) == 0) return g->init[i]->name;
    return initializer(g, t->name, ELEM_FLOAT, t->ndim, t->shape, t->data,
                       (size_t)ct_tensor_numel(t) * sizeof(float), false);
}

static const char *scalar_f(gb *g, float v) {
    return initializer(g, NULL, ELEM_FLOAT, 0, NULL, &v, sizeof v, true);
}

static const char *ints(gb *g, size_t n, const int64_t *v) {
    return initializer(g, NULL, ELEM_INT64, 1, (const int64_t[]){(int64_t)n}, v, n * sizeof *v,
                       true);
}

/* n copies of v, as a [n] f32 initializer (batchnorm or layernorm without affine). */
static const char *filled(gb *g, int64_t n, float v) {
    float *buf = mem(g, (size_t)n * sizeof *buf);
    if (!buf) return NULL;
    for (int64_t i = 0; i < n; i++)
        buf[i] = v;
    return initializer(g, NULL, ELEM_FLOAT, 1, &n, buf, (size_t)n * sizeof *buf, false);
}

/* ---- the layers' operators ---- */

/* x @ w^T (+ b): PyTorch's Linear for any number of leading dims; the Transpose of the weight is
 * a constant the runtime folds. */
static const char *linear(gb *g, const char *x, const ct_tensor *w, const ct_tensor *b) {
    Onnx__NodeProto *tr = node(g, "Transpose", 1, (const char *[]){param(g, w)}, 1);
    attr_ints(g, tr, "perm", 2, (const int64_t[]){1, 0});
    const char *h = op2(g, "MatMul", x, out0(tr));
    return b ? op2(g, "Add", h, param(g, b)) : h;
}

/* LayerNormalization over the last dim (opset 17), or its steps: below that opset, and without
 * affine parameters (whose normalised size the graph does not know here). */
static const char *
layer_norm(gb *g, const char *x, const ct_tensor *w, const ct_tensor *b, float eps) {
    if (g->opset >= 17 && w) {
        const char *in[3] = {x, param(g, w), b ? param(g, b) : NULL};
        Onnx__NodeProto *nd = node(g, "LayerNormalization", b ? 3 : 2, in, 1);
        return out0(attr_f(g, attr_i(g, nd, "axis", -1), "epsilon", eps));
    }
    Onnx__NodeProto *mean = node(g, "ReduceMean", 1, (const char *[]){x}, 1);
    attr_ints(g, mean, "axes", 1, (const int64_t[]){-1});
    const char *dx = op2(g, "Sub", x, out0(mean));
    Onnx__NodeProto *var = node(g, "ReduceMean", 1, (const char *[]){op2(g, "Mul", dx, dx)}, 1);
    attr_ints(g, var, "axes", 1, (const int64_t[]){-1});
    const char *y = op2(g, "Div", dx, op1(g, "Sqrt", op2(g, "Add", out0(var), scalar_f(g, eps))));
    if (w) y = op2(g, "Mul", y, param(g, w));
    return b ? op2(g, "Add", y, param(g, b)) : y;
}

/* GELU: 0.5 x (1 + erf(x / sqrt 2)), or the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))); the Gelu operator is newer than opset 17. */
static const char *gelu(gb *g, const char *x, ct_gelu_approx approx) {
    const char *inner;
    if (approx == CT_GELU_TANH) {
        const char *x3 = op2(g, "Mul", op2(g, "Mul", x, x), x);
        const char *u = op2(g, "Add", x, op2(g, "Mul", x3, scalar_f(g, 0.044715f)));
        inner = op1(g, "Tanh", op2(g, "Mul", u, scalar_f(g, 0.7978845608028654f)));
    } else {
        inner = op1(g, "Erf", op2(g, "Mul", x, scalar_f(g, 0.7071067811865476f)));
    }
    const char *half_x = op2(g, "Mul", x, scalar_f(g, 0.5f));
    return op2(g, "Mul", half_x, op2(g, "Add", inner, scalar_f(g, 1.0f)));
}

/* The 2-D window attributes of a pooling or convolution node: square kernel k, stride s and
 * padding p on both sides. */
static Onnx__NodeProto *window(gb *g, Onnx__NodeProto *nd, int64_t k, int64_t s, int64_t p) {
    attr_ints(g, nd, "kernel_shape", 2, (const int64_t[]){k, k});
    attr_ints(g, nd, "strides", 2, (const int64_t[]){s, s});
    return attr_ints(g, nd, "pads", 4, (const int64_t[]){p, p, p, p});
}

static const char *layer(gb *g, const ct_layer *l, const char *x);

/* The children of l in order, from x. */
static const char *children(gb *g, const ct_layer *l, const char *x) {
    for (int64_t i = 0; i < l->n_children && x; i++)
        x = layer(g, l->children[i], x);
    return x;
}

/* One layer of a sequential stack. The slots and settings are those its file (layers_*.c,
 * model.c) fills: t[0] weight, t[1] bias, batchnorm's t[2] running_mean and t[3] running_var,
 * eps in f[1]; conv2d's stride, padding, dilation, groups in i[0..3]; the pools' kernel,
 * stride, padding in i[0..2]; gelu's approximation in i[0]; leaky_relu's slope in f[0]. */
static const char *layer(gb *g, const ct_layer *l, const char *x) {
    const ct_layer_type *t = l->type;
    ct_tensor *const *p = l->t;
    if (t == &ct_layer_linear) return linear(g, x, p[0], p[1]);
    if (t == &ct_layer_conv2d) {
        const char *in[3] = {x, param(g, p[0]), p[1] ? param(g, p[1]) : NULL};
        Onnx__NodeProto *nd = node(g, "Conv", p[1] ? 3 : 2, in, 1);
        window(g, nd, p[0]->shape[2], l->i[0], l->i[1]);
        attr_ints(g, nd, "dilations", 2, (const int64_t[]){l->i[2], l->i[2]});
        return out0(attr_i(g, nd, "group", l->i[3]));
    }
    if (t == &ct_layer_batchnorm) {
        int64_t c = p[2]->shape[0];
        const char *in[5] = {x, p[0] ? param(g, p[0]) : filled(g, c, 1.0f),
                             p[1] ? param(g, p[1]) : filled(g, c, 0.0f), param(g, p[2]),
                             param(g, p[3])};
        return out0(attr_f(g, node(g, "BatchNormalization", 5, in, 1), "epsilon", l->f[1]));
    }
    if (t == &ct_layer_layernorm) return layer_norm(g, x, p[0], p[1], l->f[1]);
    if (t == &ct_layer_relu) return op1(g, "Relu", x);
    if (t == &ct_layer_tanh) return op1(g, "Tanh", x);
    if (t == &ct_layer_sigmoid) return op1(g, "Sigmoid", x);
    if (t == &ct_layer_silu) return op2(g, "Mul", x, op1(g, "Sigmoid", x));
    if (t == &ct_layer_gelu) return gelu(g, x, (ct_gelu_approx)l->i[0]);
    if (t == &ct_layer_leaky_relu)
        return out0(attr_f(g, node(g, "LeakyRelu", 1, &x, 1), "alpha", l->f[0]));
    if (t == &ct_layer_dropout) return x; /* identity in evaluation */
    if (t == &ct_layer_maxpool2d)
        return out0(window(g, node(g, "MaxPool", 1, &x, 1), l->i[0], l->i[1], l->i[2]));
    if (t == &ct_layer_avgpool2d) {
        Onnx__NodeProto *nd =
            window(g, node(g, "AveragePool", 1, &x, 1), l->i[0], l->i[1], l->i[2]);
        return out0(attr_i(g, nd, "count_include_pad", 1));
    }
    if (t == &ct_layer_flatten) return out0(attr_i(g, node(g, "Flatten", 1, &x, 1), "axis", 1));
    if (t == &ct_layer_global_avg_pool) {
        const char *y = op1(g, "GlobalAveragePool", x);
        return out0(attr_i(g, node(g, "Flatten", 1, &y, 1), "axis", 1));
    }
    if (t == &ct_layer_embedding) return op2(g, "Gather", param(g, p[0]), x); /* int64 ids */
    if (t == &ct_layer_residual) return op2(g, "Add", x, children(g, l, x));
    if (g->s == CT_OK)
        g->s = CT_FAIL(g->ctx, CT_ERR_CONFIG, "export: layer '%s' (%s) has no ONNX form",
                       l->name ? l->name : "?", t->name);
    return NULL;
}

/* ---- gpt ---- */

/* A gpt's tensor; a bias may be absent (bias: false): NULL, which linear and layer_norm take. */
static const ct_tensor *gpt_param(gb *g, const ct_model *m, const char *prefix, const char *name) {
    char full[256];
    (void)snprintf(full, sizeof full, "%s%s", prefix, name);
    const ct_tensor *t = ct_model_param(m, full);
    size_t n = strlen(name);
    bool bias = n >= 5 && strcmp(name + n - 5, ".bias") == 0;
    if (!t && !bias && g->s == CT_OK)
        g->s = CT_FAIL(g->ctx, CT_ERR_INTERNAL, "export: gpt without '%s'", full);
    return t;
}

/* nanoGPT's causal self-attention of one block over a [B, T, C] input; mask is the [T, T]
 * additive causal mask (0 on and below the diagonal, -inf above). */
static const char *attention(gb *g,
                             const ct_model *m,
                             const char *pre,
                             const char *x,
                             int64_t c,
                             int64_t heads,
                             const char *mask) {
    int64_t hd = c / heads;
    const char *qkv = linear(g, x, gpt_param(g, m, pre, "attn.c_attn.weight"),
                             gpt_param(g, m, pre, "attn.c_attn.bias"));
    const char *in[2] = {qkv, ints(g, 3, (const int64_t[]){c, c, c})};
    Onnx__NodeProto *split = node(g, "Split", 2, in, 3);
    attr_i(g, split, "axis", 2);
    if (!split) return NULL;
    const char *heads_shape = ints(g, 4, (const int64_t[]){0, 0, heads, hd});
    const char *qkv4[3];
    for (int i = 0; i < 3; i++) {
        /* [B, T, H, D] -> q, v [B, H, T, D]; k [B, H, D, T] */
        Onnx__NodeProto *tr =
            node(g, "Transpose", 1,
                 (const char *[]){op2(g, "Reshape", split->output[i], heads_shape)}, 1);
        attr_ints(g, tr, "perm", 4,
                  i == 1 ? (const int64_t[]){0, 2, 3, 1} : (const int64_t[]){0, 2, 1, 3});
        qkv4[i] = out0(tr);
    }
    const char *s =
        op2(g, "Mul", op2(g, "MatMul", qkv4[0], qkv4[1]), scalar_f(g, 1.0f / sqrtf((float)hd)));
    Onnx__NodeProto *sm = node(g, "Softmax", 1, (const char *[]){op2(g, "Add", s, mask)}, 1);
    attr_i(g, sm, "axis", -1);
    Onnx__NodeProto *back =
        node(g, "Transpose", 1, (const char *[]){op2(g, "MatMul", out0(sm), qkv4[2])}, 1);
    attr_ints(g, back, "perm", 4, (const int64_t[]){0, 2, 1, 3});
    const char *y = op2(g, "Reshape", out0(back), ints(g, 3, (const int64_t[]){0, 0, c}));
    return linear(g, y, gpt_param(g, m, pre, "attn.c_proj.weight"),
                  gpt_param(g, m, pre, "attn.c_proj.bias"));
}

/* The gpt builder's forward (gpt.c) over ids [B, T], T taken from the input at run time. */
static const char *gpt(gb *g, const ct_model *m, const ct_layer *root, const char *ids) {
    const ct_tensor *wte = gpt_param(g, m, "", "transformer.wte.weight");
    const ct_tensor *wpe = gpt_param(g, m, "", "transformer.wpe.weight");
    if (!wte || !wpe) return NULL;
    int64_t c = wte->shape[1], context = wpe->shape[0], heads = ct_gpt_heads(root);
    /* T = shape(ids)[1]; positions 0..T-1 */
    const char *t = op2(g, "Gather", op1(g, "Shape", ids), ints(g, 1, (const int64_t[]){1}));
    const char *zero = initializer(g, NULL, ELEM_INT64, 0, NULL, (const int64_t[]){0}, 8, true);
    const char *one = initializer(g, NULL, ELEM_INT64, 0, NULL, (const int64_t[]){1}, 8, true);
    const char *t_scalar = op2(g, "Squeeze", t, ints(g, 1, (const int64_t[]){0}));
    const char *pos = out0(node(g, "Range", 3, (const char *[]){zero, t_scalar, one}, 1));
    const char *h =
        op2(g, "Add", op2(g, "Gather", param(g, wte), ids), op2(g, "Gather", param(g, wpe), pos));
    /* the causal mask of the whole context, cut to [T, T] */
    size_t nm = (size_t)(context * context);
    float *mask = mem(g, nm * sizeof *mask);
    if (!mask) return NULL;
    for (int64_t i = 0; i < context; i++)
        for (int64_t j = 0; j < context; j++)
            mask[i * context + j] = j <= i ? 0.0f : -INFINITY;
    const char *full =
        initializer(g, "causal_mask", ELEM_FLOAT, 2, (const int64_t[]){context, context}, mask,
                    nm * sizeof *mask, false);
    const char *ends = out0(attr_i(g, node(g, "Concat", 2, (const char *[]){t, t}, 1), "axis", 0));
    const char *slice_in[4] = {full, ints(g, 2, (const int64_t[]){0, 0}), ends,
                               ints(g, 2, (const int64_t[]){0, 1})};
    const char *m_tt = out0(node(g, "Slice", 4, slice_in, 1));
    char pre[64];
    for (int64_t i = 0; i < root->n_children && h; i++) {
        (void)snprintf(pre, sizeof pre, "transformer.h.%lld.", (long long)i);
        const char *a = layer_norm(g, h, gpt_param(g, m, pre, "ln_1.weight"),
                                   gpt_param(g, m, pre, "ln_1.bias"), 1e-5f);
        h = op2(g, "Add", h, attention(g, m, pre, a, c, heads, m_tt));
        a = layer_norm(g, h, gpt_param(g, m, pre, "ln_2.weight"), gpt_param(g, m, pre, "ln_2.bias"),
                       1e-5f);
        a = linear(g, a, gpt_param(g, m, pre, "mlp.c_fc.weight"),
                   gpt_param(g, m, pre, "mlp.c_fc.bias"));
        a = linear(g, gelu(g, a, CT_GELU_ERF), gpt_param(g, m, pre, "mlp.c_proj.weight"),
                   gpt_param(g, m, pre, "mlp.c_proj.bias"));
        h = op2(g, "Add", h, a);
    }
    h = layer_norm(g, h, gpt_param(g, m, "", "transformer.ln_f.weight"),
                   gpt_param(g, m, "", "transformer.ln_f.bias"), 1e-5f);
    return linear(g, h, gpt_param(g, m, "", "lm_head.weight"), NULL);
}

/* ---- the graph's input: preprocessing ---- */

/* The evaluation transforms over the raw input x (sample shape of ndim dims, channels first). */
static const char *preprocess(gb *g, ct_experiment *e, const char *x, int32_t ndim) {
    const ct_loader_params *lp = ct_experiment_eval_loader_params(e);
    const int64_t *shape = ct_experiment_train_info(e)->x_shape;
    for (int32_t i = 0; i < lp->n_transforms && x; i++) {
        const ct_transform *tf = &lp->transforms[i];
        if (tf->kind == CT_TRANSFORM_SCALE) {
            x = op2(g, "Add", op2(g, "Mul", x, scalar_f(g, tf->a)), scalar_f(g, tf->b));
        } else if (tf->kind == CT_TRANSFORM_NORMALIZE && ndim >= 1) {
            /* mean and 1/std per channel, shaped [C, 1, ...] to broadcast over the sample;
               x - m then * (1/std), as the loader computes it */
            int64_t c = shape[0], dims[CT_MAX_DIMS];
            float mean[CT_TRANSFORM_MAX_CHANNELS], inv[CT_TRANSFORM_MAX_CHANNELS];
            for (int32_t d = 0; d < ndim; d++)
                dims[d] = d == 0 ? c : 1;
            for (int64_t ch = 0; ch < c && ch < CT_TRANSFORM_MAX_CHANNELS; ch++) {
                mean[ch] = tf->mean[ch];
                inv[ch] = 1.0f / tf->std[ch];
            }
            size_t n = (size_t)c * sizeof(float);
            const char *mn = initializer(g, NULL, ELEM_FLOAT, ndim, dims, mean, n, true);
            const char *iv = initializer(g, NULL, ELEM_FLOAT, ndim, dims, inv, n, true);
            x = op2(g, "Mul", op2(g, "Sub", x, mn), iv);
        } else if (g->s == CT_OK) {
            g->s = CT_FAIL(g->ctx, CT_ERR_CONFIG,
                           "export: evaluation transform %d has no ONNX form (only scale and "
                           "normalize)",
                           (int)i);
        }
    }
    return x;
}

/* ---- the model ---- */

static Onnx__ValueInfoProto *value_info(
    gb *g, const char *name, int elem, int32_t ndim, const int64_t *dims, const char *const *dyn) {
    Onnx__ValueInfoProto *v = mem(g, sizeof *v);
    Onnx__TypeProto *tp = mem(g, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = mem(g, sizeof *tt);
    Onnx__TensorShapeProto *sh = mem(g, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dim = mem(g, (size_t)ndim * sizeof *dim);
    if (!v || !tp || !tt || !sh || !dim) return NULL;
    onnx__value_info_proto__init(v);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int32_t i = 0; i < ndim; i++) {
        Onnx__TensorShapeProto__Dimension *d = mem(g, sizeof *d);
        if (!d) return NULL;
        onnx__tensor_shape_proto__dimension__init(d);
        if (dyn[i]) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = str(g, dyn[i]);
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        }
        dim[i] = d;
    }
    sh->n_dim = (size_t)ndim;
    sh->dim = dim;
    tt->has_elem_type = true;
    tt->elem_type = elem;
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->name = str(g, name);
    v->type = tp;
    return g->s == CT_OK ? v : NULL;
}

/* The graph of e's model into *graph (arena-owned). */
static ct_status
build_graph(gb *g, ct_experiment *e, const ct_onnx_export_params *p, Onnx__GraphProto *graph) {
    ct_model *m = ct_experiment_model(e);
    const ct_layer *root = ct_model_root(m);
    if (!root)
        return CT_FAIL(g->ctx, CT_ERR_CONFIG,
                       "export: the model is a plugin's model type, whose forward ONNX cannot "
                       "express; only the built-in layers and builders export");
    const ct_dataset_info *di = ct_experiment_train_info(e);
    bool is_gpt = ct_gpt_heads(root) > 0;
    bool ids = di->x_dtype == CT_I32 || di->x_dtype == CT_I64;
    int elem = ids ? ELEM_INT64 : ELEM_FLOAT;
    if (p->with_preprocessing && !ids) elem = di->x_dtype == CT_U8 ? ELEM_UINT8 : ELEM_FLOAT;
    /* the input [batch, sample...]; gpt's sequence length is free up to its context */
    int64_t dims[CT_MAX_DIMS + 1];
    const char *dyn[CT_MAX_DIMS + 1] = {"batch"};
    int32_t nd = di->x_ndim + 1;
    for (int32_t i = 0; i < di->x_ndim; i++)
        dims[i + 1] = di->x_shape[i];
    if (is_gpt) dyn[1] = "sequence";
    const char *x = "input";
    if (!ids && elem != ELEM_FLOAT) {
        Onnx__NodeProto *cast = node(g, "Cast", 1, &x, 1);
        x = out0(attr_i(g, cast, "to", ELEM_FLOAT));
    }
    if (p->with_preprocessing && !ids) x = preprocess(g, e, x, di->x_ndim);
    x = is_gpt ? gpt(g, m, root, x) : children(g, root, x);
    Onnx__NodeProto *out = node(g, "Identity", 1, &x, 1);
    if (out) out->output[0] = out->name = str(g, "output");
    /* the output [batch, sample...] */
    int64_t odims[CT_MAX_DIMS + 1];
    const char *odyn[CT_MAX_DIMS + 1] = {"batch"};
    int32_t ond = ct_model_output_shape(m, odims + 1) + 1;
    if (is_gpt) odyn[1] = "sequence";
    if (g->s != CT_OK) return g->s;
    Onnx__ValueInfoProto **in = mem(g, sizeof *in), **outv = mem(g, sizeof *outv);
    if (in) in[0] = value_info(g, "input", elem, nd, dims, dyn);
    if (outv) outv[0] = value_info(g, "output", ELEM_FLOAT, ond, odims, odyn);
    if (g->s != CT_OK) return g->s;
    graph->name = str(g, "ctrain");
    graph->n_node = g->n_node;
    graph->node = g->node;
    graph->n_initializer = g->n_init;
    graph->initializer = g->init;
    graph->n_input = 1;
    graph->input = in;
    graph->n_output = 1;
    graph->output = outv;
    return g->s;
}

/* Writes n bytes to path through path.tmp, renamed over path once on disk. */
static ct_status write_file(ct_ctx *ctx, const char *path, const uint8_t *buf, size_t n) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "export: the path '%s' is too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return CT_FAIL(ctx, CT_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    bool ok = fwrite(buf, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) return CT_OK;
    if (ok) err = errno;
    (void)remove(tmp);
    return CT_FAIL(ctx, CT_ERR_IO, "%s: write failed: %s", path, strerror(err));
}

ct_status
ct_experiment_export_onnx(ct_experiment *e, const char *path, const ct_onnx_export_params *params) {
    ct_onnx_export_params p = params ? *params : ct_onnx_export_default_params();
    ct_ctx *ctx = e->ctx;
    if (p.opset < CT_ONNX_OPSET_MIN || p.opset > CT_ONNX_OPSET_MAX)
        return CT_FAIL(ctx, CT_ERR_CONFIG,
                       "export: opset %lld is not supported: expected %d to %d (default %d)",
                       (long long)p.opset, CT_ONNX_OPSET_MIN, CT_ONNX_OPSET_MAX,
                       CT_ONNX_OPSET_DEFAULT);
    gb g;
    memset(&g, 0, sizeof g);
    g.ctx = ctx;
    g.opset = p.opset;
    ct_arena_init(&g.arena, ctx, (size_t)1 << 20);
    Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
    Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
    Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    Onnx__OperatorSetIdProto *opsets[1] = {&opset};
    ct_status s = build_graph(&g, e, &p, &graph);
    if (s == CT_OK) s = g.s;
    opset.domain = str(&g, "");
    opset.has_version = true;
    opset.version = p.opset;
    model.has_ir_version = true;
    model.ir_version = ONNX__VERSION__IR_VERSION;
    model.n_opset_import = 1;
    model.opset_import = opsets;
    model.producer_name = str(&g, "ctrain");
    model.producer_version = str(&g, CT_VERSION_STRING);
    model.graph = &graph;
    size_t n = s == CT_OK ? onnx__model_proto__get_packed_size(&model) : 0;
    if (s == CT_OK && n > (size_t)INT32_MAX)
        s = CT_FAIL(ctx, CT_ERR_CONFIG,
                    "export '%s': the model takes %zu bytes, more than protobuf's 2 GiB", path, n);
    uint8_t *buf = s == CT_OK ? ct_alloc(ctx, n) : NULL;
    if (s == CT_OK && !buf) s = CT_FAIL(ctx, CT_ERR_OOM, "export '%s': out of memory", path);
    if (s == CT_OK && onnx__model_proto__pack(&model, buf) != n)
        s = CT_FAIL(ctx, CT_ERR_INTERNAL, "export '%s': protobuf-c packed a wrong size", path);
    if (s == CT_OK) s = write_file(ctx, path, buf, n);
    ct_free(ctx, buf, n);
    ct_arena_fini(&g.arena);
    return s;
}

#endif /* CT_HAVE_ONNX */
