/*
 * test_grad_transformer.c - finite-difference checks (gradcheck.h) of the transformer ops'
 * backward: layer_norm with and without affine parameters, dropout (gradcheck rewinds the
 * graph's RNG so every probe sees the same mask), causal attention on the reference and the
 * fast kernels, and index_select/embedding/gather with respect to the float input.
 */
#include "ctrain/ctrain.h"
#include "gradcheck.h"
#include "harness.h"

static ct_ctx *make_ctx(int reference) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = 2;
    p.kernels = (ct_kernels)reference;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static gc_input f32_input(float *data, int32_t ndim, const int64_t *shape) {
    gc_input in = {CT_F32, ndim, {0}, data, true};
    for (int32_t d = 0; d < ndim; d++)
        in.shape[d] = shape[d];
    return in;
}

static gc_input idx_input(void *data, ct_dtype dt, int32_t ndim, const int64_t *shape) {
    gc_input in = {dt, ndim, {0}, data, false};
    for (int32_t d = 0; d < ndim; d++)
        in.shape[d] = shape[d];
    return in;
}

/* ---- layer_norm ---- */

typedef struct ln_case {
    bool weight, bias;
} ln_case;

static ct_tensor *ln_fwd(ct_graph *g, ct_tensor **in, void *user) {
    const ln_case *c = user;
    int k = 1;
    ct_tensor *w = c->weight ? in[k++] : NULL;
    ct_tensor *b = c->bias ? in[k++] : NULL;
    return ct_op_layer_norm(g, in[0], w, b, 1e-5f);
}

static void layer_norm_should_pass_gradcheck(void) {
    ct_ctx *ctx = make_ctx(0);
    static ln_case cases[] = {{true, true}, {false, false}, {true, false}, {false, true}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float x[3 * 2 * 6], w[6], b[6];
        gc_fill(x, 36, 1 + c, -1.0f, 1.0f);
        gc_fill(w, 6, 11 + c, 0.5f, 1.5f);
        gc_fill(b, 6, 21 + c, -0.5f, 0.5f);
        gc_input ins[3];
        int n = 0;
        ins[n++] = f32_input(x, 3, (int64_t[]){3, 2, 6});
        if (cases[c].weight) ins[n++] = f32_input(w, 1, (int64_t[]){6});
        if (cases[c].bias) ins[n++] = f32_input(b, 1, (int64_t[]){6});
        char what[64];
        snprintf(what, sizeof what, "layer_norm weight=%d bias=%d", cases[c].weight, cases[c].bias);
        CT_CHECK(gc_check(what, ctx, n, ins, ln_fwd, &cases[c], NULL));
    }
    ct_ctx_destroy(ctx);
}

/* ---- dropout ---- */

static ct_tensor *dropout_fwd(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_dropout(g, in[0], 0.3f);
}

static void dropout_should_pass_gradcheck(void) {
    ct_ctx *ctx = make_ctx(0);
    float x[4 * 9];
    gc_fill(x, 36, 5, -2.0f, 2.0f);
    gc_input in = f32_input(x, 2, (int64_t[]){4, 9});
    CT_CHECK(gc_check("dropout train", ctx, 1, &in, dropout_fwd, NULL, NULL));
    gc_opts o = gc_default_opts();
    o.training = false;
    CT_CHECK(gc_check("dropout eval", ctx, 1, &in, dropout_fwd, NULL, &o));
    ct_ctx_destroy(ctx);
}

/* ---- attention ---- */

static ct_tensor *attention_fwd(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_causal_attention(g, in[0], 2);
}

static void attention_should_pass_gradcheck(void) {
    for (int reference = 0; reference <= 1; reference++) {
        ct_ctx *ctx = make_ctx(reference);
        float qkv[2 * 5 * 24];
        gc_fill(qkv, 240, 7, -1.0f, 1.0f);
        gc_input in = f32_input(qkv, 3, (int64_t[]){2, 5, 24});
        gc_opts o = gc_default_opts();
        o.max_points = 240;
        CT_CHECK(gc_check(reference ? "attention (reference)" : "attention (fast)", ctx, 1, &in,
                          attention_fwd, NULL, &o));
        ct_ctx_destroy(ctx);
    }
}

/* ---- index_select, embedding, gather ---- */

static ct_tensor *index_select_fwd(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_index_select(g, in[0], in[1]);
}

static ct_tensor *embedding_fwd(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_embedding(g, in[0], in[1]);
}

static ct_tensor *gather_fwd(ct_graph *g, ct_tensor **in, void *user) {
    (void)user;
    return ct_op_gather(g, in[0], in[1]);
}

static void index_ops_should_pass_gradcheck(void) {
    ct_ctx *ctx = make_ctx(0);
    /* index_select: x [5, 2, 3], idx i64 [2, 3] with repeats and an unused row */
    float x[30];
    gc_fill(x, 30, 31, -1.0f, 1.0f);
    int64_t sel[6] = {4, 0, 4, 2, 1, 4};
    gc_input ins[2] = {f32_input(x, 3, (int64_t[]){5, 2, 3}),
                       idx_input(sel, CT_I64, 2, (int64_t[]){2, 3})};
    CT_CHECK(gc_check("index_select", ctx, 2, ins, index_select_fwd, NULL, NULL));

    /* embedding: weight [6, 4], idx i32 [3, 2] */
    float w[24];
    gc_fill(w, 24, 32, -1.0f, 1.0f);
    int32_t tok[6] = {5, 1, 1, 0, 5, 5};
    gc_input emb[2] = {f32_input(w, 2, (int64_t[]){6, 4}),
                       idx_input(tok, CT_I32, 2, (int64_t[]){3, 2})};
    CT_CHECK(gc_check("embedding", ctx, 2, emb, embedding_fwd, NULL, NULL));

    /* gather: x [2, 3, 5], idx i64 [2, 3, 4] with repeats in a row */
    float gx[30];
    gc_fill(gx, 30, 33, -1.0f, 1.0f);
    int64_t gi[24];
    for (int i = 0; i < 24; i++)
        gi[i] = (i * 3 + i / 4) % 5;
    gc_input ga[2] = {f32_input(gx, 3, (int64_t[]){2, 3, 5}),
                      idx_input(gi, CT_I64, 3, (int64_t[]){2, 3, 4})};
    CT_CHECK(gc_check("gather", ctx, 2, ga, gather_fwd, NULL, NULL));

    /* gather with idx [1, 2, 2] smaller than x [2, 3, 5] in the leading dims, i32 */
    int32_t gs[4] = {4, 4, 0, 3};
    gc_input gb[2] = {f32_input(gx, 3, (int64_t[]){2, 3, 5}),
                      idx_input(gs, CT_I32, 3, (int64_t[]){1, 2, 2})};
    CT_CHECK(gc_check("gather (smaller idx)", ctx, 2, gb, gather_fwd, NULL, NULL));
    ct_ctx_destroy(ctx);
}

int main(void) {
    CT_RUN(layer_norm_should_pass_gradcheck);
    CT_RUN(dropout_should_pass_gradcheck);
    CT_RUN(attention_should_pass_gradcheck);
    CT_RUN(index_ops_should_pass_gradcheck);
    return ct_test_finish();
}
