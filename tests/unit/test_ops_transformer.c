/*
 * test_ops_transformer.c - the transformer ops: causal attention (reference vs fast kernels,
 * thread-count independence, causality, known values), dropout (rate, scaling, evaluation mode,
 * replay from a saved RNG stream, thread independence), index_select/embedding/gather (values,
 * scatter-add backward, out-of-range errors) and layer_norm (values computed in double, as
 * F.layer_norm gives them), plus a small pipeline of all of them run with 1 and 2 threads.
 */
#include <math.h>
#include <string.h>

#include "ctrain/ctrain.h"
#include "harness.h"

static ct_ctx *make_ctx(int64_t threads, int reference) {
    ct_ctx_params p = ct_ctx_default_params();
    p.n_threads = threads;
    p.kernels = (ct_kernels)reference;
    ct_ctx *ctx = NULL;
    if (ct_ctx_create(&p, &ctx) != CT_OK) abort();
    return ctx;
}

static ct_graph *make_graph(ct_ctx *ctx, uint64_t seed) {
    ct_graph_params gp = ct_graph_default_params();
    gp.seed = seed;
    ct_graph *g = NULL;
    if (ct_graph_create(ctx, &gp, &g) != CT_OK) abort();
    return g;
}

/* A step tensor over host data (borrowed), optionally requiring grad. */
static ct_tensor *
leaf(ct_graph *g, void *data, ct_dtype dt, int32_t ndim, const int64_t *shape, bool grad) {
    ct_tensor *t = ct_graph_wrap(g, data, dt, ndim, shape);
    if (t && grad) t->flags |= CT_TENSOR_REQUIRES_GRAD;
    return t;
}

static float *rand_array(int64_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((size_t)n * sizeof(float));
    ct_rng r = ct_rng_init(seed, 3);
    ct_rng_uniform(&r, x, n);
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * x[i];
    return x;
}

/* ---- attention ---- */

/* Runs attention forward and backward (seeded with `seed`) on a fresh graph; copies out. */
static void run_attention(ct_ctx *ctx,
                          float *qkv,
                          int64_t B,
                          int64_t T,
                          int64_t C,
                          int64_t H,
                          const float *seed,
                          float *out,
                          float *grad) {
    ct_graph *g = make_graph(ctx, 0);
    ct_tensor *x = leaf(g, qkv, CT_F32, 3, (int64_t[]){B, T, 3 * C}, grad != NULL);
    ct_tensor *y = ct_op_causal_attention(g, x, H);
    CT_CHECK_MSG(y != NULL, "%s", ct_last_error(ctx));
    if (!y) {
        ct_graph_destroy(g);
        return;
    }
    CT_CHECK_INT(y->ndim, 3);
    CT_CHECK_INT(y->shape[2], C);
    memcpy(out, y->data, (size_t)(B * T * C) * sizeof(float));
    if (grad) {
        CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
        memcpy(grad, x->grad, (size_t)(B * T * 3 * C) * sizeof(float));
    }
    ct_graph_destroy(g);
}

static void attention_should_match_reference_kernels(void) {
    static const int64_t cases[][4] = {
        {2, 17, 48, 4}, {1, 96, 64, 2}, {2, 1, 8, 2}, {3, 33, 24, 1}, {2, 64, 128, 2}};
    ct_ctx *ref = make_ctx(2, 1), *fast = make_ctx(2, 0);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c][0], T = cases[c][1], C = cases[c][2], H = cases[c][3];
        int64_t n_in = B * T * 3 * C, n_out = B * T * C;
        float *qkv = rand_array(n_in, 10 + c, -2.0f, 2.0f);
        float *seed = rand_array(n_out, 20 + c, -1.0f, 1.0f);
        float *o_ref = calloc((size_t)n_out, sizeof(float)), *o_fast = calloc((size_t)n_out, 4);
        float *g_ref = calloc((size_t)n_in, sizeof(float)), *g_fast = calloc((size_t)n_in, 4);
        run_attention(ref, qkv, B, T, C, H, seed, o_ref, g_ref);
        run_attention(fast, qkv, B, T, C, H, seed, o_fast, g_fast);
        CT_CHECK_ARRAYS("attention out", o_fast, o_ref, n_out, 1e-5, 1e-4);
        CT_CHECK_ARRAYS("attention dqkv", g_fast, g_ref, n_in, 1e-4, 1e-4);
        free(qkv), free(seed), free(o_ref), free(o_fast), free(g_ref), free(g_fast);
    }
    ct_ctx_destroy(ref);
    ct_ctx_destroy(fast);
}

static void attention_should_not_depend_on_thread_count(void) {
    /* several heads: threads take whole heads; one head: threads split its GEMM tiles and
     * softmax rows. Both large enough that the work is split. */
    static const int64_t cases[][4] = {{2, 128, 128, 2}, {1, 160, 64, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t B = cases[c][0], T = cases[c][1], C = cases[c][2], H = cases[c][3];
        int64_t n_in = B * T * 3 * C, n_out = B * T * C;
        float *qkv = rand_array(n_in, 5, -1.0f, 1.0f), *seed = rand_array(n_out, 6, -1.0f, 1.0f);
        float *o1 = malloc((size_t)n_out * 4), *o2 = malloc((size_t)n_out * 4);
        float *g1 = malloc((size_t)n_in * 4), *g2 = malloc((size_t)n_in * 4);
        for (int reference = 0; reference <= 1; reference++) {
            ct_ctx *ctx = make_ctx(1, reference);
            run_attention(ctx, qkv, B, T, C, H, seed, o1, g1);
            ct_ctx_set_threads(ctx, 2);
            run_attention(ctx, qkv, B, T, C, H, seed, o2, g2);
            CT_CHECK(memcmp(o1, o2, (size_t)n_out * 4) == 0);
            CT_CHECK(memcmp(g1, g2, (size_t)n_in * 4) == 0);
            ct_ctx_destroy(ctx);
        }
        free(qkv), free(seed), free(o1), free(o2), free(g1), free(g2);
    }
}

static void attention_should_not_look_at_future_tokens(void) {
    int64_t B = 2, T = 12, C = 16, H = 2, t0 = 7, n_in = B * T * 3 * C, n_out = B * T * C;
    for (int reference = 0; reference <= 1; reference++) {
        ct_ctx *ctx = make_ctx(2, reference);
        float *qkv = rand_array(n_in, 7, -1.0f, 1.0f);
        float *a = malloc((size_t)n_out * 4), *b = malloc((size_t)n_out * 4);
        run_attention(ctx, qkv, B, T, C, H, NULL, a, NULL);
        /* change q, k and v of batch 1 from time t0 on */
        for (int64_t t = t0; t < T; t++)
            for (int64_t j = 0; j < 3 * C; j++)
                qkv[(T + t) * 3 * C + j] += 0.5f + 0.01f * j;
        run_attention(ctx, qkv, B, T, C, H, NULL, b, NULL);
        CT_CHECK(memcmp(a, b, (size_t)(T * C + t0 * C) * 4) == 0);
        bool later_changed = false;
        for (int64_t i = (T + t0) * C; i < n_out; i++)
            later_changed |= a[i] != b[i];
        CT_CHECK(later_changed);
        free(qkv), free(a), free(b);
        ct_ctx_destroy(ctx);
    }
}

static void attention_should_average_values_when_scores_are_equal(void) {
    /* q = k = 0: every allowed score is equal, so out_t = mean(v_0..v_t); T = 1 gives v. */
    int64_t B = 1, T = 5, C = 4, H = 2;
    float qkv[5 * 12] = {0}, out[5 * 4];
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < C; j++)
            qkv[t * 3 * C + 2 * C + j] = (float)(t * 10 + j);
    for (int reference = 0; reference <= 1; reference++) {
        ct_ctx *ctx = make_ctx(1, reference);
        run_attention(ctx, qkv, B, T, C, H, NULL, out, NULL);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < C; j++)
                CT_CHECK_CLOSE(out[t * C + j], 5.0 * (double)t + (double)j, 1e-5, 1e-6);
        ct_ctx_destroy(ctx);
    }
}

static void attention_should_reject_bad_shapes(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 0);
    float buf[2 * 3 * 24] = {0};
    CT_CHECK(ct_op_causal_attention(g, leaf(g, buf, CT_F32, 2, (int64_t[]){6, 24}, 0), 2) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "causal_attention: qkv must be [B, T, 3C]") != NULL);
    ct_graph_reset(g);
    CT_CHECK(ct_op_causal_attention(g, leaf(g, buf, CT_F32, 3, (int64_t[]){2, 3, 20}, 0), 2) ==
             NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_reset(g);
    CT_CHECK(ct_op_causal_attention(g, leaf(g, buf, CT_F32, 3, (int64_t[]){2, 3, 24}, 3), 3) ==
             NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "n_head 3 does not divide C = 8") != NULL);
    ct_graph_reset(g);
    CT_CHECK(ct_op_causal_attention(g, leaf(g, buf, CT_F32, 3, (int64_t[]){2, 3, 24}, 0), 0) ==
             NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_reset(g);
    int32_t ibuf[6] = {0};
    CT_CHECK(ct_op_causal_attention(g, leaf(g, ibuf, CT_I32, 3, (int64_t[]){1, 2, 3}, 0), 1) ==
             NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_reset(g);
    /* an empty batch is fine */
    ct_tensor *y = ct_op_causal_attention(g, leaf(g, buf, CT_F32, 3, (int64_t[]){0, 3, 24}, 1), 2);
    CT_CHECK(y != NULL && y->shape[0] == 0 && y->shape[2] == 8);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- dropout ---- */

static void dropout_should_drop_about_p_and_scale_the_rest(void) {
    ct_ctx *ctx = make_ctx(2, 0);
    ct_graph *g = make_graph(ctx, 42);
    enum { N = 200000 };
    float *x = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++)
        x[i] = 1.0f + (float)(i % 7);
    const float p = 0.3f, scale = 1.0f / (1.0f - p);
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){400, 500}, true);
    ct_tensor *y = ct_op_dropout(g, xt, p);
    CT_CHECK(y != NULL && y != xt);
    if (y) {
        const float *yv = y->data;
        long dropped = 0, bad = 0;
        for (int i = 0; i < N; i++) {
            if (yv[i] == 0.0f)
                dropped++;
            else if (yv[i] != x[i] * scale)
                bad++;
        }
        CT_CHECK_CLOSE((double)dropped / N, 0.3, 0.005, 0.0);
        CT_CHECK_INT(bad, 0);
        /* backward: dx = dy * mask / (1 - p) */
        float *ones = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            ones[i] = 1.0f;
        CT_CHECK_INT(ct_graph_backward_seed(g, y, ones), CT_OK);
        long grad_bad = 0;
        for (int i = 0; i < N; i++)
            grad_bad += xt->grad[i] != (yv[i] == 0.0f ? 0.0f : scale);
        CT_CHECK_INT(grad_bad, 0);
        free(ones);
    }
    free(x);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void dropout_should_draw_its_mask_from_the_graph_stream(void) {
    ct_ctx *ctx = make_ctx(2, 0);
    ct_graph *g = make_graph(ctx, 7);
    enum { N = 1003 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = 1.0f;
    ct_rng start = *ct_graph_rng(g);
    ct_tensor *xt = leaf(g, x, CT_F32, 1, (int64_t[]){N}, false);
    ct_tensor *y1 = ct_op_dropout(g, xt, 0.5f);
    if (!y1) {
        CT_CHECK(y1 != NULL);
        return;
    }
    /* the mask is u_i >= p with u_i = ct_rng_uniform_at(start, start.counter, i) */
    long mismatch = 0;
    for (int i = 0; i < N; i++) {
        bool keep = ct_rng_uniform_at(&start, start.counter, i) >= 0.5f;
        mismatch += keep != (((float *)y1->data)[i] != 0.0f);
    }
    CT_CHECK_INT(mismatch, 0);
    CT_CHECK_INT(ct_graph_rng(g)->counter, start.counter + (N + 3) / 4);
    /* the next call draws a new mask; restoring the stream replays the first */
    ct_tensor *y2 = ct_op_dropout(g, xt, 0.5f);
    *ct_graph_rng(g) = start;
    ct_tensor *y3 = ct_op_dropout(g, xt, 0.5f);
    CT_CHECK(y2 && y3 && memcmp(y1->data, y2->data, sizeof x) != 0);
    CT_CHECK(y3 && memcmp(y1->data, y3->data, sizeof x) == 0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ct_op_dropout_over: the values and gradients of ct_op_dropout from the same stream, written
 * over its input's data (a linear layer's output here: its weight gradient is unchanged, as
 * linear's backward does not read its output). */
static void dropout_over_should_equal_dropout_in_place(void) {
    ct_ctx *ctx = make_ctx(2, 0);
    enum { R = 37, IN = 5, OUT = 11 };
    float x[R * IN], w[OUT * IN], ys[2][R * OUT], dx[2][R * IN], dw[2][OUT * IN];
    for (int i = 0; i < R * IN; i++)
        x[i] = (float)((i * 7) % 13) / 13.0f - 0.4f;
    for (int i = 0; i < OUT * IN; i++)
        w[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    for (int over = 0; over < 2; over++) {
        ct_graph *g = make_graph(ctx, 11);
        ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){R, IN}, true);
        ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){OUT, IN}, true);
        ct_tensor *h = ct_op_linear(g, xt, wt, NULL);
        ct_tensor *y = over ? ct_op_dropout_over(g, h, 0.4f) : ct_op_dropout(g, h, 0.4f);
        CT_CHECK(y != NULL && h != NULL);
        if (!y || !h) return;
        CT_CHECK(over ? y->data == h->data : y->data != h->data);
        CT_CHECK_INT(ct_graph_backward(g, ct_op_sum_all(g, ct_op_mul(g, y, y))), CT_OK);
        memcpy(ys[over], y->data, sizeof ys[over]);
        memcpy(dx[over], xt->grad, sizeof dx[over]);
        memcpy(dw[over], wt->grad, sizeof dw[over]);
        ct_graph_destroy(g);
    }
    CT_CHECK(memcmp(ys[0], ys[1], sizeof ys[0]) == 0);
    CT_CHECK(memcmp(dx[0], dx[1], sizeof dx[0]) == 0);
    CT_CHECK(memcmp(dw[0], dw[1], sizeof dw[0]) == 0);
    long zeros = 0;
    for (int i = 0; i < R * OUT; i++)
        zeros += ys[1][i] == 0.0f;
    CT_CHECK(zeros > 0 && zeros < R * OUT); /* the mask did something */

    /* refused on what others may read: a leaf, a tensor an op has read since; without
       gradients a fresh output instead */
    ct_graph *g = make_graph(ctx, 11);
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){R, IN}, true);
    CT_CHECK(ct_op_dropout_over(g, xt, 0.4f) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "dropout_over: x must be the output") != NULL);
    ct_graph_reset(g);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){R, IN}, true);
    ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){OUT, IN}, true);
    ct_tensor *h = ct_op_linear(g, xt, wt, NULL);
    CT_CHECK(ct_op_relu(g, h) != NULL); /* h is read */
    CT_CHECK(ct_op_dropout_over(g, h, 0.4f) == NULL);
    ct_graph_reset(g);
    ct_graph_set_grad_enabled(g, false);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){R, IN}, false);
    ct_tensor *y = ct_op_dropout_over(g, xt, 0.4f);
    CT_CHECK(y != NULL && y->data != xt->data && x[0] == -0.4f); /* x untouched */
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ct_op_gelu_linear and ct_op_gelu_linear_over give linear(gelu(x))'s output and gradients
 * bit for bit (with a bias or without, erf and tanh forms, f32 and bf16 autocast, fast and
 * reference kernels): the first holding one activation fewer, the second computing no erf in
 * backward. x is an op's output (x0 + 0), as the _over form needs. */
static void gelu_linear_should_equal_gelu_then_linear(void) {
    enum { R = 29, IN = 12, OUT = 7 };
    static float x[R * IN], zero[R * IN], w[OUT * IN], b[OUT];
    for (int i = 0; i < R * IN; i++)
        x[i] = (float)((i * 37) % 101) / 25.0f - 2.0f;
    for (int i = 0; i < OUT * IN; i++)
        w[i] = (float)((i * 13) % 29) / 29.0f - 0.5f;
    for (int i = 0; i < OUT; i++)
        b[i] = 0.1f * (float)i - 0.3f;
    for (int ref = 0; ref < 2; ref++)
        for (int cfg = 0; cfg < 8; cfg++) {
            bool bf16 = cfg & 1, tanh_form = cfg & 2, with_bias = cfg & 4;
            ct_gelu_approx approx = tanh_form ? CT_GELU_TANH : CT_GELU_ERF;
            ct_ctx *ctx = make_ctx(2, ref ? CT_KERNELS_REFERENCE : 0);
            static float ys[3][R * OUT], dx[3][R * IN], dw[3][OUT * IN], db[3][OUT];
            for (int form = 0; form < 3; form++) { /* unfused, fused, fused over x */
                ct_graph *g = make_graph(ctx, 3);
                if (bf16) ct_graph_set_autocast(g, CT_BF16);
                ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){R, IN}, true);
                ct_tensor *zt = leaf(g, zero, CT_F32, 2, (int64_t[]){R, IN}, false);
                ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){OUT, IN}, true);
                ct_tensor *bt = with_bias ? leaf(g, b, CT_F32, 1, (int64_t[]){OUT}, true) : NULL;
                ct_tensor *h = ct_op_add(g, xt, zt);
                ct_tensor *y = form == 2   ? ct_op_gelu_linear_over(g, h, approx, wt, bt)
                               : form == 1 ? ct_op_gelu_linear(g, h, approx, wt, bt)
                                           : ct_op_linear(g, ct_op_gelu(g, h, approx), wt, bt);
                CT_CHECK(y != NULL);
                if (!y) return;
                CT_CHECK_INT(ct_graph_backward(g, ct_op_sum_all(g, ct_op_mul(g, y, y))), CT_OK);
                memcpy(ys[form], y->data, sizeof ys[form]);
                memcpy(dx[form], xt->grad, sizeof dx[form]);
                memcpy(dw[form], wt->grad, sizeof dw[form]);
                if (bt) memcpy(db[form], bt->grad, sizeof db[form]);
                ct_graph_destroy(g);
            }
            for (int form = 1; form < 3; form++) {
                CT_CHECK_MSG(memcmp(ys[0], ys[form], sizeof ys[0]) == 0, "ref %d cfg %d form %d: y",
                             ref, cfg, form);
                CT_CHECK_MSG(memcmp(dx[0], dx[form], sizeof dx[0]) == 0,
                             "ref %d cfg %d form %d: dx", ref, cfg, form);
                CT_CHECK_MSG(memcmp(dw[0], dw[form], sizeof dw[0]) == 0,
                             "ref %d cfg %d form %d: dw", ref, cfg, form);
                if (with_bias)
                    CT_CHECK_MSG(memcmp(db[0], db[form], sizeof db[0]) == 0,
                                 "ref %d cfg %d form %d: db", ref, cfg, form);
            }
            ct_ctx_destroy(ctx);
        }
}

/* gelu_linear_over refuses an x it may not write over (a leaf, a parameter, or an output some
 * op has read since), naming itself; with gradients off, or an x that needs none, it leaves x
 * as it was and gives gelu_linear's output. */
static void gelu_linear_over_should_refuse_an_x_it_may_not_write_over(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    float x[4] = {1.0f, -0.5f, 2.0f, 0.25f}, w[2] = {0.5f, -1.0f};
    ct_graph *g = make_graph(ctx, 1);
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 2}, true);
    ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){1, 2}, true);
    CT_CHECK(ct_op_gelu_linear_over(g, xt, CT_GELU_ERF, wt, NULL) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "gelu_linear_over: x must be the output") != NULL);
    ct_graph_destroy(g);

    g = make_graph(ctx, 1);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 2}, true);
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){1, 2}, true);
    ct_tensor *h = ct_op_mul(g, xt, xt);
    CT_CHECK(ct_op_relu(g, h) != NULL); /* h read since: no longer the newest output */
    CT_CHECK(ct_op_gelu_linear_over(g, h, CT_GELU_ERF, wt, NULL) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_destroy(g);

    g = make_graph(ctx, 1);
    ct_graph_set_grad_enabled(g, false);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 2}, false);
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){1, 2}, false);
    h = ct_op_mul(g, xt, xt);
    float before[4];
    memcpy(before, h->data, sizeof before);
    ct_tensor *want = ct_op_gelu_linear(g, h, CT_GELU_ERF, wt, NULL);
    ct_tensor *got = ct_op_gelu_linear_over(g, h, CT_GELU_ERF, wt, NULL);
    CT_CHECK(want != NULL && got != NULL);
    CT_CHECK(memcmp(before, h->data, sizeof before) == 0);
    if (want && got) CT_CHECK(memcmp(want->data, got->data, 2 * sizeof(float)) == 0);
    ct_graph_destroy(g);

    /* gradients on, but only for the weight: x has no node to be the newest of */
    g = make_graph(ctx, 1);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 2}, false);
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){1, 2}, true);
    h = ct_op_mul(g, xt, xt);
    memcpy(before, h->data, sizeof before);
    got = ct_op_gelu_linear_over(g, h, CT_GELU_ERF, wt, NULL);
    CT_CHECK(got != NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_OK);
    CT_CHECK(memcmp(before, h->data, sizeof before) == 0);
    if (got) CT_CHECK_INT(ct_graph_backward(g, ct_op_sum_all(g, got)), CT_OK);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void dropout_should_be_identity_in_eval_mode_or_with_p_zero(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 1);
    float x[6] = {1, -2, 3, -4, 5, -6};
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 3}, true);
    ct_rng before = *ct_graph_rng(g);
    CT_CHECK(ct_op_dropout(g, xt, 0.0f) == xt);
    ct_graph_set_training(g, false);
    CT_CHECK(ct_op_dropout(g, xt, 0.9f) == xt);
    CT_CHECK_INT(ct_graph_rng(g)->counter, before.counter);
    /* p is checked in every mode */
    CT_CHECK(ct_op_dropout(g, xt, 1.0f) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "dropout: p must be in [0, 1), got 1") != NULL);
    ct_graph_set_training(g, true);
    ct_graph_reset(g);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 3}, true);
    CT_CHECK(ct_op_dropout(g, xt, -0.1f) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_reset(g);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 3}, true);
    CT_CHECK(ct_op_dropout(g, xt, NAN) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void dropout_should_give_the_same_mask_for_any_thread_count(void) {
    enum { N = 100000 };
    float *x = rand_array(N, 3, -1.0f, 1.0f);
    float *y[2];
    for (int k = 0; k < 2; k++) {
        ct_ctx *ctx = make_ctx(k + 1, 0);
        ct_graph *g = make_graph(ctx, 99);
        ct_tensor *out = ct_op_dropout(g, leaf(g, x, CT_F32, 1, (int64_t[]){N}, false), 0.25f);
        y[k] = malloc(N * sizeof(float));
        if (out) memcpy(y[k], out->data, N * sizeof(float));
        CT_CHECK(out != NULL);
        ct_graph_destroy(g);
        ct_ctx_destroy(ctx);
    }
    CT_CHECK(memcmp(y[0], y[1], N * sizeof(float)) == 0);
    free(x), free(y[0]), free(y[1]);
}

/* ---- index_select, embedding, gather ---- */

static void embedding_should_look_up_rows_and_scatter_add_gradients(void) {
    ct_ctx *ctx = make_ctx(2, 0);
    ct_graph *g = make_graph(ctx, 0);
    float w[5 * 3];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            w[i * 3 + j] = (float)(10 * i + j);
    int64_t idx[4] = {4, 0, 2, 4};
    ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){5, 3}, true);
    ct_tensor *it = leaf(g, idx, CT_I64, 2, (int64_t[]){2, 2}, false);
    ct_tensor *y = ct_op_embedding(g, wt, it);
    CT_CHECK(y != NULL);
    if (!y) return;
    CT_CHECK_INT(y->ndim, 3);
    CT_CHECK(y->shape[0] == 2 && y->shape[1] == 2 && y->shape[2] == 3);
    for (int p = 0; p < 4; p++)
        for (int j = 0; j < 3; j++)
            CT_CHECK(((float *)y->data)[p * 3 + j] == (float)(10 * idx[p] + j));
    float seed[12];
    for (int i = 0; i < 12; i++)
        seed[i] = (float)(i + 1);
    CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
    /* row 4 gets positions 0 and 3, row 0 position 1, row 2 position 2 */
    float expect[15] = {4, 5, 6, 0, 0, 0, 7, 8, 9, 0, 0, 0, 1 + 10, 2 + 11, 3 + 12};
    CT_CHECK_ARRAYS("embedding dweight", wt->grad, expect, 15, 0.0, 0.0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void index_select_should_pick_rows_of_any_rank(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 0);
    float x[4 * 2 * 3];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    int32_t idx[3] = {3, 3, 1};
    ct_tensor *y = ct_op_index_select(g, leaf(g, x, CT_F32, 3, (int64_t[]){4, 2, 3}, false),
                                      leaf(g, idx, CT_I32, 1, (int64_t[]){3}, false));
    CT_CHECK(y != NULL && y->ndim == 3 && y->shape[0] == 3 && y->shape[1] == 2);
    if (y) {
        for (int p = 0; p < 3; p++)
            for (int j = 0; j < 6; j++)
                CT_CHECK(((float *)y->data)[p * 6 + j] == (float)(idx[p] * 6 + j));
        CT_CHECK(y->node == NULL); /* nothing requires grad: nothing recorded */
    }
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void index_ops_should_name_an_out_of_range_index(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 0);
    float w[5 * 2] = {0};
    int32_t idx[4] = {0, 1, 2, 7};
    ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){5, 2}, true);
    CT_CHECK(ct_op_embedding(g, wt, leaf(g, idx, CT_I32, 1, (int64_t[]){4}, false)) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    CT_CHECK_MSG(strstr(ct_last_error(ctx),
                        "embedding: index 7 at position 3 is out of range [0, 5)") != NULL,
                 "%s", ct_last_error(ctx));
    /* sticky: a later op returns NULL without a new message */
    CT_CHECK(ct_op_dropout(g, wt, 0.5f) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "index 7") != NULL);

    ct_graph_reset(g);
    int64_t neg[2] = {1, -1};
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){5, 2}, true);
    CT_CHECK(ct_op_index_select(g, wt, leaf(g, neg, CT_I64, 1, (int64_t[]){2}, false)) == NULL);
    CT_CHECK(strstr(ct_last_error(ctx), "index_select: index -1 at position 1") != NULL);

    ct_graph_reset(g);
    int64_t gi[4] = {0, 1, 2, 2};
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){5, 2}, true);
    CT_CHECK(ct_op_gather(g, wt, leaf(g, gi, CT_I64, 2, (int64_t[]){2, 2}, false)) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    CT_CHECK(strstr(ct_last_error(ctx), "gather: index 2 at position 2 is out of range [0, 2)") !=
             NULL);

    /* dtype and shape errors */
    ct_graph_reset(g);
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){5, 2}, true);
    CT_CHECK(ct_op_embedding(g, wt, wt) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_reset(g);
    wt = leaf(g, w, CT_F32, 1, (int64_t[]){10}, true);
    CT_CHECK(ct_op_embedding(g, wt, leaf(g, idx, CT_I32, 1, (int64_t[]){3}, false)) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_reset(g);
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){5, 2}, true);
    CT_CHECK(ct_op_gather(g, wt, leaf(g, idx, CT_I32, 1, (int64_t[]){4}, false)) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_reset(g);
    wt = leaf(g, w, CT_F32, 2, (int64_t[]){2, 5}, true);
    CT_CHECK(ct_op_gather(g, wt, leaf(g, idx, CT_I32, 2, (int64_t[]){4, 1}, false)) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void gather_should_pick_along_the_last_dim(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 0);
    float x[3 * 4];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i;
    /* idx [2, 3] smaller than x [3, 4] in the leading dim, as torch.gather allows */
    int32_t idx[6] = {3, 0, 3, 1, 1, 2};
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){3, 4}, true);
    ct_tensor *y = ct_op_gather(g, xt, leaf(g, idx, CT_I32, 2, (int64_t[]){2, 3}, false));
    CT_CHECK(y != NULL);
    if (!y) return;
    float expect[6] = {3, 0, 3, 5, 5, 6};
    CT_CHECK_ARRAYS("gather out", (float *)y->data, expect, 6, 0.0, 0.0);
    float seed[6] = {1, 2, 3, 4, 5, 6};
    CT_CHECK_INT(ct_graph_backward_seed(g, y, seed), CT_OK);
    float dx[12] = {2, 0, 0, 1 + 3, 0, 4 + 5, 6, 0, 0, 0, 0, 0};
    CT_CHECK_ARRAYS("gather dx", xt->grad, dx, 12, 0.0, 0.0);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- layer_norm ---- */

static void layer_norm_should_match_known_values(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 0);
    float x[12] = {1, 2, 3, 4, -2, 0.5f, 7, 1, 3, 3, 3, 3};
    float w[4] = {0.5f, 1, 2, -1}, b[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){3, 4}, true);
    ct_tensor *y = ct_op_layer_norm(g, xt, NULL, NULL, 1e-5f);
    CT_CHECK(y != NULL);
    if (!y) return;
    /* F.layer_norm(torch.tensor([1., 2, 3, 4]), (4,)) and a constant row */
    float e0[8] = {-1.34163542f, -0.447211807f, 0.447211807f, 1.34163542f, 0, 0, 0, 0};
    CT_CHECK_ARRAYS("layer_norm row 0", (float *)y->data, e0, 4, 1e-6, 1e-6);
    CT_CHECK_ARRAYS("layer_norm constant row", (float *)y->data + 8, e0 + 4, 4, 0.0, 0.0);
    /* affine, and a larger eps on another row */
    ct_tensor *wt = leaf(g, w, CT_F32, 1, (int64_t[]){4}, true);
    ct_tensor *bt = leaf(g, b, CT_F32, 1, (int64_t[]){4}, true);
    ct_tensor *ya = ct_op_layer_norm(g, xt, wt, bt, 1e-5f);
    float e1[4] = {-0.57081771f, -0.247211807f, 1.19442361f, -0.94163542f};
    if (ya) CT_CHECK_ARRAYS("layer_norm affine", (float *)ya->data, e1, 4, 1e-6, 1e-6);
    ct_tensor *ye = ct_op_layer_norm(g, xt, NULL, NULL, 0.1f);
    float e2[4] = {-1.09189347f, -0.338863492f, 1.61901446f, -0.188257495f};
    if (ye) CT_CHECK_ARRAYS("layer_norm eps 0.1", (float *)ye->data + 4, e2, 4, 1e-6, 1e-6);
    /* backward of the affine one: db = sum over rows of dy, and each row of dx sums to 0 */
    float seed[12];
    for (int i = 0; i < 12; i++)
        seed[i] = (float)(i % 5) - 1.5f;
    CT_CHECK(ya && ct_graph_backward_seed(g, ya, seed) == CT_OK);
    for (int j = 0; j < 4; j++)
        CT_CHECK_CLOSE(bt->grad[j], seed[j] + seed[4 + j] + seed[8 + j], 1e-6, 0);
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int j = 0; j < 4; j++)
            s += xt->grad[r * 4 + j];
        CT_CHECK_CLOSE(s, 0.0, 1e-5, 0);
    }
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

static void layer_norm_should_reject_mismatched_affine(void) {
    ct_ctx *ctx = make_ctx(1, 0);
    ct_graph *g = make_graph(ctx, 0);
    float x[8] = {0}, w[3] = {0};
    ct_tensor *xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 4}, false);
    CT_CHECK(ct_op_layer_norm(g, xt, leaf(g, w, CT_F32, 1, (int64_t[]){3}, false), NULL, 1e-5f) ==
             NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_SHAPE);
    CT_CHECK(strstr(ct_last_error(ctx), "layer_norm: weight must be [4] (the last dim of x [2,4]), "
                                        "got [3]") != NULL);
    ct_graph_reset(g);
    xt = leaf(g, x, CT_F32, 2, (int64_t[]){2, 4}, false);
    CT_CHECK(ct_op_layer_norm(g, xt, NULL, NULL, -1.0f) == NULL);
    CT_CHECK_INT(ct_graph_status(g), CT_ERR_INVALID_ARG);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
}

/* ---- everything together, 1 vs 2 threads ---- */

typedef struct pipe_result {
    float *out, *dweight, *dlnw, *dlnb;
} pipe_result;

/* embedding [V, 3C] -> layer_norm -> dropout -> attention -> gather, then backward. */
static pipe_result run_pipeline(int64_t threads) {
    enum { V = 50, B = 2, T = 128, C = 64, H = 2, K = 5 };
    ct_ctx *ctx = make_ctx(threads, 0);
    ct_graph *g = make_graph(ctx, 1234);
    float *w = rand_array(V * 3 * C, 1, -1.0f, 1.0f);
    float *lw = rand_array(3 * C, 2, 0.5f, 1.5f), *lb = rand_array(3 * C, 3, -0.5f, 0.5f);
    float *seed = rand_array(B * T * K, 4, -1.0f, 1.0f);
    int32_t *tok = malloc(B * T * sizeof(int32_t));
    int64_t *pick = malloc(B * T * K * sizeof(int64_t));
    for (int i = 0; i < B * T; i++)
        tok[i] = (i * 7) % V;
    for (int i = 0; i < B * T * K; i++)
        pick[i] = (i * 13) % C;
    ct_tensor *wt = leaf(g, w, CT_F32, 2, (int64_t[]){V, 3 * C}, true);
    ct_tensor *lwt = leaf(g, lw, CT_F32, 1, (int64_t[]){3 * C}, true);
    ct_tensor *lbt = leaf(g, lb, CT_F32, 1, (int64_t[]){3 * C}, true);
    ct_tensor *h = ct_op_embedding(g, wt, leaf(g, tok, CT_I32, 2, (int64_t[]){B, T}, false));
    h = ct_op_layer_norm(g, h, lwt, lbt, 1e-5f);
    h = ct_op_dropout(g, h, 0.1f);
    h = ct_op_causal_attention(g, h, H);
    h = ct_op_gather(g, h, leaf(g, pick, CT_I64, 3, (int64_t[]){B, T, K}, false));
    pipe_result r = {calloc(B * T * K, 4), calloc(V * 3 * C, 4), calloc(3 * C, 4),
                     calloc(3 * C, 4)};
    CT_CHECK_MSG(h != NULL, "%s", ct_last_error(ctx));
    if (h && ct_graph_backward_seed(g, h, seed) == CT_OK) {
        memcpy(r.out, h->data, B * T * K * 4);
        memcpy(r.dweight, wt->grad, V * 3 * C * 4);
        memcpy(r.dlnw, lwt->grad, 3 * C * 4);
        memcpy(r.dlnb, lbt->grad, 3 * C * 4);
    }
    free(w), free(lw), free(lb), free(seed), free(tok), free(pick);
    ct_graph_destroy(g);
    ct_ctx_destroy(ctx);
    return r;
}

static void transformer_ops_should_give_identical_bits_for_1_and_2_threads(void) {
    pipe_result a = run_pipeline(1), b = run_pipeline(2);
    CT_CHECK(memcmp(a.out, b.out, 2 * 128 * 5 * 4) == 0);
    CT_CHECK(memcmp(a.dweight, b.dweight, 50 * 192 * 4) == 0);
    CT_CHECK(memcmp(a.dlnw, b.dlnw, 192 * 4) == 0);
    CT_CHECK(memcmp(a.dlnb, b.dlnb, 192 * 4) == 0);
    bool nonzero = false;
    for (int i = 0; i < 50 * 192; i++)
        nonzero |= a.dweight[i] != 0.0f;
    CT_CHECK(nonzero);
    free(a.out), free(a.dweight), free(a.dlnw), free(a.dlnb);
    free(b.out), free(b.dweight), free(b.dlnw), free(b.dlnb);
}

int main(void) {
    CT_RUN(attention_should_match_reference_kernels);
    CT_RUN(attention_should_not_depend_on_thread_count);
    CT_RUN(attention_should_not_look_at_future_tokens);
    CT_RUN(attention_should_average_values_when_scores_are_equal);
    CT_RUN(attention_should_reject_bad_shapes);
    CT_RUN(dropout_should_drop_about_p_and_scale_the_rest);
    CT_RUN(dropout_should_draw_its_mask_from_the_graph_stream);
    CT_RUN(dropout_over_should_equal_dropout_in_place);
    CT_RUN(gelu_linear_should_equal_gelu_then_linear);
    CT_RUN(gelu_linear_over_should_refuse_an_x_it_may_not_write_over);
    CT_RUN(dropout_should_be_identity_in_eval_mode_or_with_p_zero);
    CT_RUN(dropout_should_give_the_same_mask_for_any_thread_count);
    CT_RUN(embedding_should_look_up_rows_and_scatter_add_gradients);
    CT_RUN(index_select_should_pick_rows_of_any_rank);
    CT_RUN(index_ops_should_name_an_out_of_range_index);
    CT_RUN(gather_should_pick_along_the_last_dim);
    CT_RUN(layer_norm_should_match_known_values);
    CT_RUN(layer_norm_should_reject_mismatched_affine);
    CT_RUN(transformer_ops_should_give_identical_bits_for_1_and_2_threads);
    return ct_test_finish();
}
