/*
 * gpt.c - the gpt builder: a GPT-2 style decoder with nanoGPT's architecture, parameter names
 * and initialisation, so weights load into nanoGPT's GPT module unchanged.
 *
 * The root node holds the embeddings, ln_f and (untied) lm_head; its children are the blocks.
 * With tied weights the head multiplies by transformer.wte.weight itself: one tensor in the
 * store, whose gradient gets both uses, with "lm_head.weight" declared as its alias in the
 * store, so files name it either way as PyTorch's state_dict does. Without biases (nanoGPT's
 * bias=False) the bias slots stay NULL and the ops run without them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/gpt_internal.h"

enum { WTE = CT_GPT_WTE, WPE = CT_GPT_WPE, LNF_W = CT_GPT_LNF_W, LNF_B = CT_GPT_LNF_B };
enum { HEAD = CT_GPT_HEAD, I_HEAD = CT_GPT_I_HEAD, I_LAYER = CT_GPT_I_LAYER };
enum { F_DROP = CT_GPT_F_DROP };
enum { LN1_W = CT_GPT_LN1_W, LN1_B = CT_GPT_LN1_B, ATT_W = CT_GPT_ATT_W, ATT_B = CT_GPT_ATT_B };
enum { APR_W = CT_GPT_APR_W, APR_B = CT_GPT_APR_B, LN2_W = CT_GPT_LN2_W, LN2_B = CT_GPT_LN2_B };
enum { FC_W = CT_GPT_FC_W, FC_B = CT_GPT_FC_B, MPR_W = CT_GPT_MPR_W, MPR_B = CT_GPT_MPR_B };

static const char *const gpt_keys[] = {"n_layer", "n_head", "d_model", "context", "vocab",
                                       "dropout", "tied",   "bias",    NULL};
static const char *const no_keys[] = {NULL};

#define LN_EPS CT_GPT_LN_EPS

static void init_weight(ct_tensor *w, ct_rng *rng, float std) {
    ct_nn_init_normal(w, rng, 0.0f, std);
}

/* Fills t, a bias: NULL when the model has none. */
static void fill(ct_tensor *t, float v) {
    if (t) ct_tensor_fill(t, v);
}

/* ---- a block: x + attn(ln_1(x)), then x + mlp(ln_2(x)) ---- */

static void block_init(ct_layer *l, ct_rng *rng) {
    float std = 0.02f;
    float proj_std = 0.02f / sqrtf(2.0f * (float)l->i[I_LAYER]);
    ct_tensor_fill(l->t[LN1_W], 1.0f);
    fill(l->t[LN1_B], 0.0f);
    ct_tensor_fill(l->t[LN2_W], 1.0f);
    fill(l->t[LN2_B], 0.0f);
    init_weight(l->t[ATT_W], rng, std);
    init_weight(l->t[APR_W], rng, proj_std);
    init_weight(l->t[FC_W], rng, std);
    init_weight(l->t[MPR_W], rng, proj_std);
    fill(l->t[ATT_B], 0.0f);
    fill(l->t[APR_B], 0.0f);
    fill(l->t[FC_B], 0.0f);
    fill(l->t[MPR_B], 0.0f);
}

static ct_tensor *block_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    ct_tensor **t = l->t;
    float p = l->f[F_DROP];
    ct_tensor *h = ct_op_layer_norm(g, x, t[LN1_W], t[LN1_B], LN_EPS);
    h = ct_op_linear(g, h, t[ATT_W], t[ATT_B]);
    h = ct_op_causal_attention(g, h, l->i[I_HEAD]);
    /* over the projections' outputs, which only the dropout reads (linear's backward does not
       read its output): a block holds two activations fewer */
    h = ct_op_dropout_over(g, ct_op_linear(g, h, t[APR_W], t[APR_B]), p);
    x = ct_op_add(g, x, h);
    h = ct_op_layer_norm(g, x, t[LN2_W], t[LN2_B], LN_EPS);
    h = ct_op_linear(g, h, t[FC_W], t[FC_B]);
    /* gelu and the projection as one op over the fc output, which only it reads: gelu'(x)
       takes x's place and the activation is kept, so backward computes no erf or exp */
    h = ct_op_dropout_over(g, ct_op_gelu_linear_over(g, h, CT_GELU_ERF, t[MPR_W], t[MPR_B]), p);
    return ct_op_add(g, x, h);
}

static const ct_layer_type block_type = {"gpt_block", no_keys, NULL, block_init, block_forward};

static ct_status block_declare(ct_layer_build *b, ct_layer *l, int64_t c, bool bias) {
    static const char *const names[] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    const int64_t shapes[][2] = {{c, 0}, {c, 0}, {3 * c, c}, {3 * c, 0}, {c, c},     {c, 0},
                                 {c, 0}, {c, 0}, {4 * c, c}, {4 * c, 0}, {c, 4 * c}, {c, 0}};
    for (int k = 0; k < 12; k++) {
        bool is_bias = k % 2 == 1; /* each weight is followed by its bias */
        if (is_bias && !bias) continue;
        CT_TRY(ct_layer_declare(b, l, k, names[k], CT_F32, shapes[k][1] ? 2 : 1, shapes[k],
                                CT_PARAM_TRAINABLE));
    }
    l->norm_slots = 1u << LN1_W | 1u << LN1_B | 1u << LN2_W | 1u << LN2_B;
    return CT_OK;
}

/* ---- the root: embeddings, blocks, ln_f, head ---- */

static void root_init(ct_layer *l, ct_rng *rng) {
    init_weight(l->t[WTE], rng, 0.02f);
    init_weight(l->t[WPE], rng, 0.02f);
    ct_tensor_fill(l->t[LNF_W], 1.0f);
    fill(l->t[LNF_B], 0.0f);
    if (l->t[HEAD]) init_weight(l->t[HEAD], rng, 0.02f);
}

static ct_tensor *root_forward(ct_layer *l, ct_graph *g, ct_tensor *x) {
    int64_t t = x->shape[1];
    ct_tensor *pos = ct_graph_new(g, CT_I64, 1, &t);
    if (!pos) return NULL;
    for (int64_t i = 0; i < t; i++)
        ((int64_t *)pos->data)[i] = i;
    /* [B, T, C] + [T, C] */
    ct_tensor *h =
        ct_op_add(g, ct_op_embedding(g, l->t[WTE], x), ct_op_embedding(g, l->t[WPE], pos));
    h = ct_op_dropout_over(g, h, l->f[F_DROP]); /* the sum's backward does not read it */
    h = ct_layer_forward_children(l, g, h);
    h = ct_op_layer_norm(g, h, l->t[LNF_W], l->t[LNF_B], LN_EPS);
    return ct_op_linear(g, h, l->t[HEAD] ? l->t[HEAD] : l->t[WTE], NULL);
}

static const ct_layer_type root_type = {"gpt", no_keys, NULL, root_init, root_forward};

bool ct_gpt_is_root(const ct_layer *l) {
    return l && l->type == &root_type;
}

typedef struct gpt_cfg {
    int64_t n_layer, n_head, c, context, vocab;
    double dropout;
    bool tied, bias;
} gpt_cfg;

/* Reads and checks the options; vocab is required when need_vocab (else -1 when absent). */
static ct_status read_gpt(ct_ctx *ctx, const ct_options *opts, bool need_vocab, gpt_cfg *g) {
    const char *where = ct_options_where(opts, "model");
    CT_TRY(ct_options_check(ctx, opts, gpt_keys));
    CT_TRY(ct_options_int(ctx, opts, "n_layer", 2, 1, 1 << 12, &g->n_layer));
    CT_TRY(ct_options_int(ctx, opts, "n_head", 2, 1, 1 << 12, &g->n_head));
    CT_TRY(ct_options_int(ctx, opts, "d_model", 64, 1, 1 << 20, &g->c));
    CT_TRY(ct_options_int(ctx, opts, "context", 64, 1, 1 << 24, &g->context));
    CT_TRY(ct_options_int(ctx, opts, "vocab", -1, 1, INT32_MAX, &g->vocab));
    CT_TRY(ct_options_double(ctx, opts, "dropout", 0.0, 0.0, 0.999999, &g->dropout));
    CT_TRY(ct_options_bool(ctx, opts, "tied", true, &g->tied));
    CT_TRY(ct_options_bool(ctx, opts, "bias", true, &g->bias));
    if (need_vocab && g->vocab < 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: key 'vocab' is required", where);
    if (g->c % g->n_head != 0)
        return CT_FAIL(ctx, CT_ERR_CONFIG, "%s: d_model %lld is not a multiple of n_head %lld",
                       where, (long long)g->c, (long long)g->n_head);
    return CT_OK;
}

static ct_status check_gpt(ct_ctx *ctx, const ct_options *opts) {
    gpt_cfg g;
    return read_gpt(ctx, opts, false, &g);
}

static ct_status build_gpt(ct_ctx *ctx,
                           const ct_options *opts,
                           ct_params *params,
                           ct_dtype in_dtype,
                           int32_t in_ndim,
                           const int64_t *in_shape,
                           ct_model **out) {
    const char *where = ct_options_where(opts, "model");
    gpt_cfg g;
    CT_TRY(read_gpt(ctx, opts, true, &g));
    int64_t n_layer = g.n_layer, n_head = g.n_head, c = g.c, context = g.context, vocab = g.vocab;
    double dropout = g.dropout;
    bool tied = g.tied;
    if ((in_dtype != CT_I32 && in_dtype != CT_I64) || in_ndim != 1 || in_shape[0] > context) {
        ct_tensor v = ct_tensor_view(NULL, in_dtype, in_ndim, in_shape);
        char buf[96];
        return CT_FAIL(ctx, CT_ERR_SHAPE,
                       "%s: input sample %s %s, expected i32 or i64 token ids [T], T <= context "
                       "%lld",
                       where, ct_shape_str(&v, buf, sizeof buf), ct_dtype_name(in_dtype),
                       (long long)context);
    }
    ct_layer *root = ct_layer_new(ctx, &root_type, n_layer);
    if (!root) return CT_FAIL(ctx, CT_ERR_OOM, "allocating a gpt model");
    root->f[F_DROP] = (float)dropout;
    root->norm_slots = 1u << LNF_W | 1u << LNF_B;
    ct_layer_build b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.params = params;
    b.prefix = "";
    b.where = "gpt";
    b.in_dtype = in_dtype;
    b.in_ndim = 1;
    b.in_shape[0] = in_shape[0];
    ct_status s = ct_layer_declare(&b, root, WTE, "transformer.wte.weight", CT_F32, 2,
                                   (const int64_t[]){vocab, c}, CT_PARAM_TRAINABLE);
    if (s == CT_OK)
        s = ct_layer_declare(&b, root, WPE, "transformer.wpe.weight", CT_F32, 2,
                             (const int64_t[]){context, c}, CT_PARAM_TRAINABLE);
    char prefix[64], bwhere[64];
    for (int64_t i = 0; i < n_layer && s == CT_OK; i++) {
        ct_layer *blk = ct_layer_new(ctx, &block_type, 0);
        if (!blk) {
            s = CT_FAIL(ctx, CT_ERR_OOM, "allocating gpt block %lld", (long long)i);
            break;
        }
        root->children[i] = blk;
        blk->i[I_HEAD] = n_head;
        blk->i[I_LAYER] = n_layer;
        blk->f[F_DROP] = (float)dropout;
        snprintf(prefix, sizeof prefix, "transformer.h.%lld", (long long)i);
        snprintf(bwhere, sizeof bwhere, "gpt block %lld", (long long)i);
        ct_layer_build bb = b;
        bb.prefix = prefix;
        bb.where = bwhere;
        s = block_declare(&bb, blk, c, g.bias);
    }
    if (s == CT_OK)
        s = ct_layer_declare(&b, root, LNF_W, "transformer.ln_f.weight", CT_F32, 1, &c,
                             CT_PARAM_TRAINABLE);
    if (s == CT_OK && g.bias)
        s = ct_layer_declare(&b, root, LNF_B, "transformer.ln_f.bias", CT_F32, 1, &c,
                             CT_PARAM_TRAINABLE);
    if (s == CT_OK && !tied)
        s = ct_layer_declare(&b, root, HEAD, "lm_head.weight", CT_F32, 2,
                             (const int64_t[]){vocab, c}, CT_PARAM_TRAINABLE);
    if (s == CT_OK && tied) s = ct_params_alias(params, "lm_head.weight", "transformer.wte.weight");
    if (s != CT_OK) {
        ct_layer_free(ctx, root);
        return s;
    }
    b.out_dtype = CT_F32;
    b.out_ndim = 2;
    b.out_shape[0] = in_shape[0];
    b.out_shape[1] = vocab;
    return ct_model_wrap(ctx, params, root, &b, true, out);
}

const ct_model_type ct_model_gpt = {"gpt", gpt_keys, check_gpt, build_gpt};

int64_t ct_gpt_heads(const ct_layer *root) {
    if (!root || root->type != &root_type || root->n_children < 1) return -1;
    return root->children[0]->i[I_HEAD];
}
